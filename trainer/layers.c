/*
 * layers.c: CPU layers (see layers.h). Dense and convolution layers are sgemm calls plus
 * small loops; every reduction runs in a fixed order so results are reproducible.
 */
#include "trainer/layers.h"
#include "base/hr_time.h"
#include "trainer/ew.h"

#include <cblas.h>
#include <math.h>
#include <string.h>
#include <time.h>

/* ================================================================ sgemm with accounting */

/* Row-major C (M, N) = alpha op(A) op(B) + beta C. */
static void gemm(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B,
                 int ldb, float beta, float *C, int ldc, layer_prof *prof) {
    double t0 = prof ? hr_now() : 0;
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
                K, 1.0f, A, lda, B, ldb, beta, C, ldc);
    if (prof) {
        prof->gemm_s += hr_now() - t0;
        prof->gemm_flop += 2.0 * M * N * K;
    }
}

/* ================================================================ linear */

void linear_forward(float *out, const float *in, const float *w, const float *bias, int B, int NI,
                    int NO, layer_prof *prof) {
    for (int b = 0; b < B; b++) memcpy(out + (long)b * NO, bias, sizeof *out * (size_t)NO);
    gemm(0, 1, B, NO, NI, in, NI, w, NI, 1.0f, out, NO, prof);
}

void linear_backward(float *din, float *dw, float *dbias, const float *dout, const float *in,
                     const float *w, int B, int NI, int NO, layer_prof *prof) {
    gemm(1, 0, NO, NI, B, dout, NO, in, NI, 0.0f, dw, NI, prof);
    memset(dbias, 0, sizeof *dbias * (size_t)NO);
    for (int b = 0; b < B; b++) {
        const float *d = dout + (long)b * NO;
        for (int o = 0; o < NO; o++) dbias[o] += d[o];
    }
    if (din) gemm(0, 0, B, NI, NO, dout, NO, w, NI, 0.0f, din, NI, prof);
}

/* ================================================================ relu */

void relu_forward(float *out, const float *in, long n) {
    for (long i = 0; i < n; i++) out[i] = ew_relu(in[i]);
}

/* Written as a select of both loads, so the compiler vectorizes it: a branch on the sign of
 * each activation is mispredicted about half the time, which made this loop a tenth of a
 * training step. The buffers never overlap (model.c: they belong to different layers). */
void relu_backward(float *restrict din, const float *restrict dout, const float *restrict out,
                   long n) {
    for (long i = 0; i < n; i++) din[i] = ew_relu_grad(out[i], dout[i]);
}

/* ================================================================ conv2d */

/* col (C*K*K, OH*OW) from one image (C, H, W). */
static void im2col(float *col, const float *img, const conv_geom *g) {
    long ohw = (long)g->OH * g->OW;
    for (int c = 0; c < g->C; c++)
        for (int ky = 0; ky < g->K; ky++)
            for (int kx = 0; kx < g->K; kx++) {
                float *row = col + ((long)(c * g->K + ky) * g->K + kx) * ohw;
                const float *plane = img + (long)c * g->H * g->W;
                for (int oy = 0; oy < g->OH; oy++) {
                    int y = oy * g->S - g->P + ky;
                    float *r = row + (long)oy * g->OW;
                    if (y < 0 || y >= g->H) {
                        memset(r, 0, sizeof *r * (size_t)g->OW);
                        continue;
                    }
                    for (int ox = 0; ox < g->OW; ox++) {
                        int x = ox * g->S - g->P + kx;
                        r[ox] = (x >= 0 && x < g->W) ? plane[(long)y * g->W + x] : 0.0f;
                    }
                }
            }
}

/* img (C, H, W) += col2im(col); img must be zeroed by the caller. */
static void col2im(float *img, const float *col, const conv_geom *g) {
    long ohw = (long)g->OH * g->OW;
    for (int c = 0; c < g->C; c++)
        for (int ky = 0; ky < g->K; ky++)
            for (int kx = 0; kx < g->K; kx++) {
                const float *row = col + ((long)(c * g->K + ky) * g->K + kx) * ohw;
                float *plane = img + (long)c * g->H * g->W;
                for (int oy = 0; oy < g->OH; oy++) {
                    int y = oy * g->S - g->P + ky;
                    if (y < 0 || y >= g->H) continue;
                    const float *r = row + (long)oy * g->OW;
                    for (int ox = 0; ox < g->OW; ox++) {
                        int x = ox * g->S - g->P + kx;
                        if (x >= 0 && x < g->W) plane[(long)y * g->W + x] += r[ox];
                    }
                }
            }
}

void conv2d_forward(float *out, const float *in, const float *w, const float *bias, int B,
                    const conv_geom *g, float *col, layer_prof *prof) {
    int ckk = g->C * g->K * g->K, ohw = g->OH * g->OW;
    long in_sz = (long)g->C * g->H * g->W, out_sz = (long)g->OC * ohw;
    for (int b = 0; b < B; b++) {
        float *o = out + b * out_sz;
        im2col(col, in + b * in_sz, g);
        for (int oc = 0; oc < g->OC; oc++)
            for (int i = 0; i < ohw; i++) o[(long)oc * ohw + i] = bias[oc];
        gemm(0, 0, g->OC, ohw, ckk, w, ckk, col, ohw, 1.0f, o, ohw, prof);
    }
}

void conv2d_backward(float *din, float *dw, float *dbias, const float *dout, const float *in,
                     const float *w, int B, const conv_geom *g, float *col, float *dcol,
                     layer_prof *prof) {
    int ckk = g->C * g->K * g->K, ohw = g->OH * g->OW;
    long in_sz = (long)g->C * g->H * g->W, out_sz = (long)g->OC * ohw;
    memset(dbias, 0, sizeof *dbias * (size_t)g->OC);
    for (int b = 0; b < B; b++) {
        const float *d = dout + b * out_sz;
        im2col(col, in + b * in_sz, g);
        gemm(0, 1, g->OC, ckk, ohw, d, ohw, col, ohw, b == 0 ? 0.0f : 1.0f, dw, ckk, prof);
        for (int oc = 0; oc < g->OC; oc++) {
            float s = 0.0f;
            for (int i = 0; i < ohw; i++) s += d[(long)oc * ohw + i];
            dbias[oc] += s;
        }
        if (din) {
            gemm(1, 0, ckk, ohw, g->OC, w, ckk, d, ohw, 0.0f, dcol, ohw, prof);
            memset(din + b * in_sz, 0, sizeof *din * (size_t)in_sz);
            col2im(din + b * in_sz, dcol, g);
        }
    }
}

/* ================================================================ max-pool */

void maxpool_forward(float *out, int32_t *argmax, const float *in, int B, int C, int H, int W,
                     int K, int S) {
    int OH = (H - K) / S + 1, OW = (W - K) / S + 1;
    for (long p = 0; p < (long)B * C; p++) {
        const float *plane = in + p * H * W;
        float *o = out + p * OH * OW;
        int32_t *a = argmax + p * OH * OW;
        for (int oy = 0; oy < OH; oy++)
            for (int ox = 0; ox < OW; ox++) {
                int32_t bi = ew_maxpool_argmax(plane, W, K, S, oy, ox);
                o[oy * OW + ox] = plane[bi];
                a[oy * OW + ox] = bi;
            }
    }
}

void maxpool_backward(float *din, const float *dout, const int32_t *argmax, int B, int C, int H,
                      int W, int K, int S) {
    int OH = (H - K) / S + 1, OW = (W - K) / S + 1;
    memset(din, 0, sizeof *din * (size_t)B * C * H * W);
    for (long p = 0; p < (long)B * C; p++) {
        float *plane = din + p * H * W;
        const float *d = dout + p * OH * OW;
        const int32_t *a = argmax + p * OH * OW;
        for (int i = 0; i < OH * OW; i++) plane[a[i]] += d[i];
    }
}

/* ================================================================ losses */

void softmax_xent(float *dlogits, const float *logits, const int32_t *labels, int B, int C,
                  double *loss_sum, long *correct) {
    double loss = 0.0;
    long ok = 0;
    for (int b = 0; b < B; b++) {
        const float *z = logits + (long)b * C;
        int am = 0;
        for (int c = 1; c < C; c++)
            if (z[c] > z[am]) am = c;
        double sum = 0.0;
        for (int c = 0; c < C; c++) sum += exp((double)z[c] - (double)z[am]);
        int y = labels[b];
        loss += log(sum) - ((double)z[y] - (double)z[am]);
        ok += am == y;
        if (dlogits) {
            float *d = dlogits + (long)b * C;
            for (int c = 0; c < C; c++)
                d[c] = (float)(exp((double)z[c] - (double)z[am]) / sum) - (c == y ? 1.0f : 0.0f);
        }
    }
    *loss_sum += loss;
    *correct += ok;
}

void mse_loss(float *dy, const float *y, const float *t, int B, int T, double *loss_sum) {
    double loss = 0.0;
    for (long i = 0; i < (long)B * T; i++) {
        float e = y[i] - t[i];
        loss += (double)e * e;
        if (dy) dy[i] = ew_mse_grad(e);
    }
    *loss_sum += loss;
}
