/*
 * cuda_conv.cu: conv2d (im2col + cuBLAS GEMM, stride and zero padding) and max-pool.
 *
 * A context with cuDNN (cuda_cudnn.cu) runs conv2d there; im2col runs it otherwise, and for a
 * shape cuDNN has no qualifying algorithm for. im2col is the reference the cuDNN path is
 * tested against (tests/cuda/test_cuda_layers.c).
 *
 * The batch is processed in chunks of Bc samples (Bc fixed by the geometry and B) whose
 * im2col matrix is laid out (C*K*K, Bc*OH*OW), so each chunk is ONE large GEMM instead of Bc
 * small ones:
 *   forward   outT (OC, Bc*OHW) = w (OC, CKK) . col,  then out (b, oc, i) = outT + bias
 *   backward  doutT = dout transposed to (OC, Bc*OHW)
 *             dw (OC, CKK) += doutT . col^T        (chunks summed in order through beta)
 *             dcol (CKK, Bc*OHW) = w^T . doutT,      then din = col2im(dcol)
 * The max-pool window scan is ew.h's, the CPU's, so both break ties alike. col2im and the
 * max-pool backward are gathers (one thread per input value, contributions added in the CPU's
 * order), so neither needs atomics.
 */
#include "trainer/cuda/cuda_common.cuh"
#include "trainer/ew.h"

/* Workspace per chunk: col and dcol (CKK each) plus outT/doutT (OC), per output position. */
#define CONV_CHUNK_FLOATS (32L << 20)

static long conv_per_sample(const conv_geom *g) {
    long ckk = (long)g->C * g->K * g->K;
    return (2 * ckk + g->OC) * (long)g->OH * g->OW;
}

static int conv_chunk(const conv_geom *g, int B) {
    long bc = CONV_CHUNK_FLOATS / conv_per_sample(g);
    if (bc < 1) bc = 1;
    return (int)(bc < B ? bc : B);
}

extern "C" size_t cuda_conv2d_workspace(const conv_geom *g, int B) {
    return (size_t)conv_chunk(g, B) * (size_t)conv_per_sample(g);
}

/* ================================================================ kernels */

/* col (CKK, Bc*OHW) from in (Bc, C, H, W): row (c, ky, kx), column (b, oy, ox). */
static __global__ void im2col_kernel(float *col, const float *in, int Bc, conv_geom g) {
    long ohw = (long)g.OH * g.OW, ncol = Bc * ohw;
    long n = (long)g.C * g.K * g.K * ncol;
    HR_CUDA_GRID_LOOP(t, n) {
        long row = t / ncol, j = t - row * ncol;
        int kx = (int)(row % g.K), ky = (int)((row / g.K) % g.K), c = (int)(row / (g.K * g.K));
        long b = j / ohw, o = j - b * ohw;
        int oy = (int)(o / g.OW), ox = (int)(o - (long)oy * g.OW);
        int y = oy * g.S - g.P + ky, x = ox * g.S - g.P + kx;
        col[t] = (y >= 0 && y < g.H && x >= 0 && x < g.W)
                     ? in[((b * g.C + c) * g.H + y) * (long)g.W + x]
                     : 0.0f;
    }
}

/* din (Bc, C, H, W) = col2im(dcol (CKK, Bc*OHW)), one thread per input value, summing its
 * (ky, kx) contributions in the CPU's order. */
static __global__ void col2im_kernel(float *din, const float *dcol, int Bc, conv_geom g) {
    long ohw = (long)g.OH * g.OW, ncol = Bc * ohw;
    long n = (long)Bc * g.C * g.H * g.W;
    HR_CUDA_GRID_LOOP(t, n) {
        int x = (int)(t % g.W), y = (int)((t / g.W) % g.H);
        long bc = t / ((long)g.H * g.W);
        int c = (int)(bc % g.C);
        long b = bc / g.C;
        float s = 0.0f;
        for (int ky = 0; ky < g.K; ky++) {
            int ty = y + g.P - ky;
            if (ty < 0 || ty % g.S) continue;
            int oy = ty / g.S;
            if (oy >= g.OH) continue;
            for (int kx = 0; kx < g.K; kx++) {
                int tx = x + g.P - kx;
                if (tx < 0 || tx % g.S) continue;
                int ox = tx / g.S;
                if (ox >= g.OW) continue;
                long row = ((long)c * g.K + ky) * g.K + kx;
                s += dcol[row * ncol + b * ohw + (long)oy * g.OW + ox];
            }
        }
        din[t] = s;
    }
}

/* Where element t of a (Bc, OC, OHW) tensor sits in its (OC, Bc*OHW) transpose. */
static __device__ inline long transposed(long t, int Bc, int OC, long ohw) {
    long i = t % ohw, boc = t / ohw;
    return (boc % OC) * Bc * ohw + boc / OC * ohw + i;
}

/* out (Bc, OC, OHW) = outT (OC, Bc*OHW) transposed, plus bias (OC). */
static __global__ void untranspose_bias_kernel(float *out, const float *outT, const float *bias,
                                               int Bc, int OC, long ohw) {
    HR_CUDA_GRID_LOOP(t, (long)Bc * OC * ohw) {
        out[t] = outT[transposed(t, Bc, OC, ohw)] + bias[(t / ohw) % OC];
    }
}

/* doutT (OC, Bc*OHW) = dout (Bc, OC, OHW) transposed. */
static __global__ void transpose_kernel(float *doutT, const float *dout, int Bc, int OC, long ohw) {
    HR_CUDA_GRID_LOOP(t, (long)Bc * OC * ohw) doutT[transposed(t, Bc, OC, ohw)] = dout[t];
}

/* ================================================================ conv2d */

/* col (CKK, bc*OHW) = the im2col matrix of the bc samples at in. */
static hr_status im2col(cuda_ctx *c, float *col, const float *in, int bc, const conv_geom *g) {
    long rows = (long)g->C * g->K * g->K, ncol = (long)bc * g->OH * g->OW;
    im2col_kernel<<<hr_cuda_blocks(rows * ncol, 16384), HR_CUDA_THREADS, 0, c->stream>>>(col, in,
                                                                                         bc, *g);
    LAUNCH_CHECK();
    return HR_OK;
}

static hr_status im2col_forward(cuda_ctx *c, float *out, const float *in, const float *w,
                                const float *bias, int B, const conv_geom *g) {
    int bc_max = conv_chunk(g, B), ckk = g->C * g->K * g->K;
    long ohw = (long)g->OH * g->OW, in_sz = (long)g->C * g->H * g->W, out_sz = g->OC * ohw;
    HR_CHECK(cuda_ctx_reserve(c, cuda_conv2d_workspace(g, B)));
    float *col = c->scratch, *outT = col + (long)ckk * bc_max * ohw;
    for (int b0 = 0; b0 < B; b0 += bc_max) {
        int bc = B - b0 < bc_max ? B - b0 : bc_max;
        int ncol = (int)(bc * ohw);
        HR_CHECK(im2col(c, col, in + b0 * in_sz, bc, g));
        HR_CHECK(hr_cuda_gemm(c, 0, 0, g->OC, ncol, ckk, w, ckk, col, ncol, 0.0f, outT, ncol));
        untranspose_bias_kernel<<<hr_cuda_blocks((long)bc * out_sz, 16384), HR_CUDA_THREADS, 0,
                                  c->stream>>>(out + b0 * out_sz, outT, bias, bc, g->OC, ohw);
        LAUNCH_CHECK();
    }
    return HR_OK;
}

static hr_status im2col_backward(cuda_ctx *c, float *din, float *dw, float *dbias,
                                 const float *dout, const float *in, const float *w, int B,
                                 const conv_geom *g) {
    int bc_max = conv_chunk(g, B), ckk = g->C * g->K * g->K;
    long ohw = (long)g->OH * g->OW, in_sz = (long)g->C * g->H * g->W, out_sz = g->OC * ohw;
    HR_CHECK(cuda_ctx_reserve(c, cuda_conv2d_workspace(g, B)));
    float *col = c->scratch, *doutT = col + (long)ckk * bc_max * ohw,
          *dcol = doutT + (long)g->OC * bc_max * ohw;
    HR_CHECK(hr_cuda_channel_sum(c, dbias, dout, B, g->OC, (int)ohw));
    for (int b0 = 0; b0 < B; b0 += bc_max) {
        int bc = B - b0 < bc_max ? B - b0 : bc_max;
        int ncol = (int)(bc * ohw);
        HR_CHECK(im2col(c, col, in + b0 * in_sz, bc, g));
        transpose_kernel<<<hr_cuda_blocks((long)bc * out_sz, 16384), HR_CUDA_THREADS, 0,
                           c->stream>>>(doutT, dout + b0 * out_sz, bc, g->OC, ohw);
        LAUNCH_CHECK();
        HR_CHECK(hr_cuda_gemm(c, 0, 1, g->OC, ckk, ncol, doutT, ncol, col, ncol,
                              b0 == 0 ? 0.0f : 1.0f, dw, ckk));
        if (din) {
            HR_CHECK(
                hr_cuda_gemm(c, 1, 0, ckk, ncol, g->OC, w, ckk, doutT, ncol, 0.0f, dcol, ncol));
            col2im_kernel<<<hr_cuda_blocks((long)bc * in_sz, 16384), HR_CUDA_THREADS, 0,
                            c->stream>>>(din + b0 * in_sz, dcol, bc, *g);
            LAUNCH_CHECK();
        }
    }
    return HR_OK;
}

extern "C" hr_status cuda_conv2d_forward(cuda_ctx *c, float *out, const float *in, const float *w,
                                         const float *bias, int B, const conv_geom *g) {
    if (c->dnn) {
        hr_status st = hr_dnn_conv_forward(c, out, in, w, bias, B, g);
        if (st != HR_ERR_UNSUPPORTED) return st;
        c->conv_fallbacks++;
    }
    return im2col_forward(c, out, in, w, bias, B, g);
}

extern "C" hr_status cuda_conv2d_backward(cuda_ctx *c, float *din, float *dw, float *dbias,
                                          const float *dout, const float *in, const float *w, int B,
                                          const conv_geom *g) {
    if (c->dnn) {
        hr_status st = hr_dnn_conv_backward(c, din, dw, dbias, dout, in, w, B, g);
        if (st != HR_ERR_UNSUPPORTED) return st;
        c->conv_fallbacks++;
    }
    return im2col_backward(c, din, dw, dbias, dout, in, w, B, g);
}

/* ================================================================ max-pool */

static __global__ void maxpool_fwd_kernel(float *out, int32_t *argmax, const float *in, long BC,
                                          int H, int W, int K, int S, int OH, int OW) {
    long n = BC * OH * OW;
    HR_CUDA_GRID_LOOP(t, n) {
        int ox = (int)(t % OW), oy = (int)((t / OW) % OH);
        const float *plane = in + (t / ((long)OH * OW)) * H * W;
        int32_t bi = ew_maxpool_argmax(plane, W, K, S, oy, ox);
        out[t] = plane[bi];
        argmax[t] = bi;
    }
}

/* One thread per input value: add dout of every window that covers it and chose it, in
 * increasing output order (the CPU's). */
static __global__ void maxpool_bwd_kernel(float *din, const float *dout, const int32_t *argmax,
                                          long BC, int H, int W, int K, int S, int OH, int OW) {
    long n = BC * H * W;
    HR_CUDA_GRID_LOOP(t, n) {
        int x = (int)(t % W), y = (int)((t / W) % H);
        long p = t / ((long)H * W);
        int oy0 = y < K ? 0 : (y - K) / S + 1, oy1 = y / S < OH - 1 ? y / S : OH - 1;
        int ox0 = x < K ? 0 : (x - K) / S + 1, ox1 = x / S < OW - 1 ? x / S : OW - 1;
        const float *d = dout + p * OH * OW;
        const int32_t *a = argmax + p * OH * OW;
        int32_t me = y * W + x;
        float s = 0.0f;
        for (int oy = oy0; oy <= oy1; oy++)
            for (int ox = ox0; ox <= ox1; ox++)
                if (a[oy * OW + ox] == me) s += d[oy * OW + ox];
        din[t] = s;
    }
}

extern "C" hr_status cuda_maxpool_forward(cuda_ctx *c, float *out, int32_t *argmax, const float *in,
                                          int B, int C, int H, int W, int K, int S) {
    int OH = (H - K) / S + 1, OW = (W - K) / S + 1;
    long BC = (long)B * C;
    maxpool_fwd_kernel<<<hr_cuda_blocks(BC * OH * OW, 16384), HR_CUDA_THREADS, 0, c->stream>>>(
        out, argmax, in, BC, H, W, K, S, OH, OW);
    LAUNCH_CHECK();
    return HR_OK;
}

extern "C" hr_status cuda_maxpool_backward(cuda_ctx *c, float *din, const float *dout,
                                           const int32_t *argmax, int B, int C, int H, int W, int K,
                                           int S) {
    int OH = (H - K) / S + 1, OW = (W - K) / S + 1;
    long BC = (long)B * C;
    maxpool_bwd_kernel<<<hr_cuda_blocks(BC * H * W, 16384), HR_CUDA_THREADS, 0, c->stream>>>(
        din, dout, argmax, BC, H, W, K, S, OH, OW);
    LAUNCH_CHECK();
    return HR_OK;
}
