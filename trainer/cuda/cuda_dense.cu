/*
 * cuda_dense.cu: linear, ReLU, the two losses, the bias reductions and the SGD step.
 *
 * Reductions never use atomics: a column sum gives each column to a fixed set of threads and
 * folds them in a fixed tree; a loss writes one partial per block (the grid size depends on
 * the batch only) and a single block folds the partials. Same input, same bits.
 */
#include "trainer/cuda/cuda_common.cuh"
#include "trainer/ew.h"

#include <float.h>

/* ================================================================ reductions */

/* out[n] = sum over rows r of m[r, n] for a row-major (R, N) matrix. Block (32, 8): the 32
 * x-threads take 32 adjacent columns (coalesced), the 8 y-threads split the rows by stride,
 * then fold in a fixed order. */
static __global__ void colsum_kernel(float *out, const float *m, int R, int N) {
    __shared__ float sh[8][33];
    int n = blockIdx.x * 32 + threadIdx.x;
    float s = 0.0f;
    if (n < N)
        for (int r = threadIdx.y; r < R; r += 8) s += m[(long)r * N + n];
    sh[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && n < N) {
        float t = sh[0][threadIdx.x];
        for (int k = 1; k < 8; k++) t += sh[k][threadIdx.x];
        out[n] = t;
    }
}

/* Channel sums of x (B, C, S) over b and s, first pass: block (c, p) folds the p-th of P
 * contiguous pieces of channel c's B*S values into part[p*C + c] (or out[c] when P == 1). */
static __global__ void chansum_kernel(float *part, const float *x, int B, int C, int S, int P) {
    __shared__ float sh[HR_CUDA_THREADS];
    int c = blockIdx.x, p = blockIdx.y;
    long n = (long)B * S, per = (n + P - 1) / P;
    long lo = p * per, hi = lo + per < n ? lo + per : n;
    float s = 0.0f;
    for (long j = lo + threadIdx.x; j < hi; j += HR_CUDA_THREADS) {
        long b = j / S, i = j - b * S;
        s += x[(b * C + c) * S + i];
    }
    s = hr_block_sum(s, sh);
    if (threadIdx.x == 0) part[(long)p * C + c] = s;
}

/* Second pass: out[c] = sum over p of part[p*C + c], in order of p. */
static __global__ void chansum_finish_kernel(float *out, const float *part, int C, int P) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s = 0.0f;
    for (int p = 0; p < P; p++) s += part[(long)p * C + c];
    out[c] = s;
}

/* out (C) = sums of x (B, C, S) over the batch and the S positions of each channel. */
static hr_status channel_sum(cuda_ctx *c, float *out, const float *x, int B, int C, int S) {
    if (S == 1) {
        colsum_kernel<<<(C + 31) / 32, dim3(32, 8), 0, c->stream>>>(out, x, B, C);
        LAUNCH_CHECK();
        return HR_OK;
    }
    int cap = (int)(2 * (CUDA_MAX_PARTIALS + 1) * sizeof(double) / sizeof(float)) / C;
    long per_block = 16384; /* values one block folds, before splitting a channel */
    long P = ((long)B * S + per_block - 1) / per_block;
    if (P > 32) P = 32;
    if (P > cap) P = cap;
    if (P <= 1) {
        chansum_kernel<<<dim3(C, 1), HR_CUDA_THREADS, 0, c->stream>>>(out, x, B, C, S, 1);
        LAUNCH_CHECK();
        return HR_OK;
    }
    float *part = (float *)c->partials;
    chansum_kernel<<<dim3(C, (unsigned)P), HR_CUDA_THREADS, 0, c->stream>>>(part, x, B, C, S,
                                                                            (int)P);
    LAUNCH_CHECK();
    chansum_finish_kernel<<<(C + 127) / 128, 128, 0, c->stream>>>(out, part, C, (int)P);
    LAUNCH_CHECK();
    return HR_OK;
}

/* stats[k] = sum over blocks of part[2*blk + k], k = 0, 1: one block, fixed tree. */
static __global__ void finish_stats_kernel(double *stats, const double *part, int nparts) {
    __shared__ double sh[HR_CUDA_THREADS];
    for (int k = 0; k < 2; k++) {
        double s = 0.0;
        for (int i = threadIdx.x; i < nparts; i += HR_CUDA_THREADS) s += part[2 * i + k];
        s = hr_block_sum(s, sh);
        if (threadIdx.x == 0) stats[k] = s;
    }
}

hr_status hr_cuda_finish_stats(cuda_ctx *c, int nparts, double *stats) {
    finish_stats_kernel<<<1, HR_CUDA_THREADS, 0, c->stream>>>(stats, c->partials, nparts);
    LAUNCH_CHECK();
    return HR_OK;
}

/* ================================================================ linear */

/* out (B, O) = bias broadcast over the rows. */
static __global__ void bias_rows_kernel(float *out, const float *bias, long B, int O) {
    long n = B * O;
    HR_CUDA_GRID_LOOP(i, n) out[i] = bias[i % O];
}

extern "C" hr_status cuda_linear_forward(cuda_ctx *c, float *out, const float *in, const float *w,
                                         const float *bias, int B, int I, int O) {
    bias_rows_kernel<<<hr_cuda_blocks((long)B * O, 4096), HR_CUDA_THREADS, 0, c->stream>>>(
        out, bias, B, O);
    LAUNCH_CHECK();
    return hr_cuda_gemm(c, 0, 1, B, O, I, in, I, w, I, 1.0f, out, O);
}

extern "C" hr_status cuda_linear_backward(cuda_ctx *c, float *din, float *dw, float *dbias,
                                          const float *dout, const float *in, const float *w, int B,
                                          int I, int O) {
    HR_CHECK(hr_cuda_gemm(c, 1, 0, O, I, B, dout, O, in, I, 0.0f, dw, I));
    HR_CHECK(channel_sum(c, dbias, dout, B, O, 1));
    if (din) HR_CHECK(hr_cuda_gemm(c, 0, 0, B, I, O, dout, O, w, I, 0.0f, din, I));
    return HR_OK;
}

hr_status hr_cuda_channel_sum(cuda_ctx *c, float *out, const float *x, int B, int C, int S) {
    return channel_sum(c, out, x, B, C, S);
}

/* ================================================================ relu */

static __global__ void relu_fwd_kernel(float *out, const float *in, long n) {
    HR_CUDA_GRID_LOOP(i, n) out[i] = ew_relu(in[i]);
}

static __global__ void relu_bwd_kernel(float *din, const float *dout, const float *out, long n) {
    HR_CUDA_GRID_LOOP(i, n) din[i] = ew_relu_grad(out[i], dout[i]);
}

extern "C" hr_status cuda_relu_forward(cuda_ctx *c, float *out, const float *in, long n) {
    relu_fwd_kernel<<<hr_cuda_blocks(n, 8192), HR_CUDA_THREADS, 0, c->stream>>>(out, in, n);
    LAUNCH_CHECK();
    return HR_OK;
}

extern "C" hr_status cuda_relu_backward(cuda_ctx *c, float *din, const float *dout,
                                        const float *out, long n) {
    relu_bwd_kernel<<<hr_cuda_blocks(n, 8192), HR_CUDA_THREADS, 0, c->stream>>>(din, dout, out, n);
    LAUNCH_CHECK();
    return HR_OK;
}

/* ================================================================ losses */

/* One thread per sample, the CPU's arithmetic in double; per-block partials of
 * (loss, correct) go to part[2*blk], part[2*blk+1]. */
static __global__ void xent_kernel(float *dlogits, const float *logits, const int32_t *labels,
                                   int B, int C, double *part) {
    __shared__ double sh[HR_CUDA_THREADS];
    double loss = 0.0, ok = 0.0;
    for (int b = blockIdx.x * blockDim.x + threadIdx.x; b < B; b += gridDim.x * blockDim.x) {
        const float *z = logits + (long)b * C;
        int am = 0;
        for (int k = 1; k < C; k++)
            if (z[k] > z[am]) am = k;
        double zm = (double)z[am], sum = 0.0;
        for (int k = 0; k < C; k++) sum += exp((double)z[k] - zm);
        int y = labels[b];
        loss += log(sum) - ((double)z[y] - zm);
        ok += am == y ? 1.0 : 0.0;
        if (dlogits) {
            float *d = dlogits + (long)b * C;
            for (int k = 0; k < C; k++)
                d[k] = (float)(exp((double)z[k] - zm) / sum) - (k == y ? 1.0f : 0.0f);
        }
    }
    loss = hr_block_sum(loss, sh);
    ok = hr_block_sum(ok, sh);
    if (threadIdx.x == 0) {
        part[2 * blockIdx.x] = loss;
        part[2 * blockIdx.x + 1] = ok;
    }
}

extern "C" hr_status cuda_softmax_xent(cuda_ctx *c, float *dlogits, const float *logits,
                                       const int32_t *labels, int B, int C, double *stats) {
    int blocks = hr_cuda_blocks(B, CUDA_MAX_PARTIALS);
    xent_kernel<<<blocks, HR_CUDA_THREADS, 0, c->stream>>>(dlogits, logits, labels, B, C,
                                                           c->partials);
    LAUNCH_CHECK();
    return hr_cuda_finish_stats(c, blocks, stats);
}

static __global__ void mse_kernel(float *dy, const float *y, const float *t, long n, double *part) {
    __shared__ double sh[HR_CUDA_THREADS];
    double loss = 0.0;
    HR_CUDA_GRID_LOOP(i, n) {
        float e = y[i] - t[i];
        loss += (double)e * e;
        if (dy) dy[i] = ew_mse_grad(e);
    }
    loss = hr_block_sum(loss, sh);
    if (threadIdx.x == 0) {
        part[2 * blockIdx.x] = loss;
        part[2 * blockIdx.x + 1] = 0.0;
    }
}

extern "C" hr_status cuda_mse_loss(cuda_ctx *c, float *dy, const float *y, const float *t, int B,
                                   int T, double *stats) {
    long n = (long)B * T;
    int blocks = hr_cuda_blocks(n, CUDA_MAX_PARTIALS);
    mse_kernel<<<blocks, HR_CUDA_THREADS, 0, c->stream>>>(dy, y, t, n, c->partials);
    LAUNCH_CHECK();
    return hr_cuda_finish_stats(c, blocks, stats);
}

/* ================================================================ optimizer */

/* The CPU's step (ew_sgd), compiled without fused multiply-adds (--fmad=false): the update is
 * opt_step's, operation for operation. */
static __global__ void sgd_kernel(float *p, float *v, const float *grad, long n, float lr,
                                  float momentum, float wd, float inv_B) {
    HR_CUDA_GRID_LOOP(i, n) ew_sgd(&p[i], &v[i], grad[i], lr, momentum, wd, inv_B);
}

extern "C" hr_status cuda_sgd_step(cuda_ctx *c, float *p, float *v, const float *grad, long n,
                                   float lr, float momentum, float wd, float inv_B) {
    if (n <= 0) return HR_OK;
    sgd_kernel<<<hr_cuda_blocks(n, 8192), HR_CUDA_THREADS, 0, c->stream>>>(p, v, grad, n, lr,
                                                                           momentum, wd, inv_B);
    LAUNCH_CHECK();
    return HR_OK;
}
