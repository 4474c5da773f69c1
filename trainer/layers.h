/*
 * layers.h: forward and backward passes of the CPU layers, on raw float arrays.
 *
 * Tensors are row-major with the batch first: a dense activation is (B, N), an image
 * activation (B, C, H, W). Matrix work goes through OpenBLAS sgemm.
 *
 * Backward passes WRITE (not accumulate) the parameter gradients as SUMS over the B samples
 * of the batch; nothing is divided by B here (DESIGN.md I2: the optimizer divides by the
 * global batch). Summation order depends only on B and the shapes, so a fixed input gives
 * bitwise-identical gradients for a fixed BLAS thread count.
 *
 * `prof` (may be NULL) accumulates the time and floating-point operations spent in sgemm.
 */
#ifndef HR_LAYERS_H
#define HR_LAYERS_H

#include <stdint.h>

typedef struct {
    double gemm_s;    /* seconds inside sgemm */
    double gemm_flop; /* floating-point operations issued to sgemm (2*M*N*K per call) */
} layer_prof;

/* out (B, NO) = in (B, NI) . w^T + bias; w (NO, NI), bias (NO). */
void linear_forward(float *out, const float *in, const float *w, const float *bias, int B, int NI,
                    int NO, layer_prof *prof);
/* dw (NO, NI) = dout^T . in, dbias (NO) = column sums of dout, din (B, NI) = dout . w.
 * din may be NULL (first layer: no input gradient needed). */
void linear_backward(float *din, float *dw, float *dbias, const float *dout, const float *in,
                     const float *w, int B, int NI, int NO, layer_prof *prof);

/* out = max(in, 0), elementwise over n values; may run in place (out == in). */
void relu_forward(float *out, const float *in, long n);
/* din = dout where out > 0, else 0; may run in place (din == dout). */
void relu_backward(float *din, const float *dout, const float *out, long n);

/* Convolution geometry: input (C, H, W), OC filters of (C, K, K), stride S, zero padding P;
 * output (OC, OH, OW) with OH = (H + 2P - K)/S + 1. */
typedef struct {
    int C, H, W, OC, K, S, P, OH, OW;
} conv_geom;

/* out (B, OC, OH, OW) = conv(in (B, C, H, W), w (OC, C*K*K)) + bias (OC).
 * col is scratch of (C*K*K, OH*OW) floats. */
void conv2d_forward(float *out, const float *in, const float *w, const float *bias, int B,
                    const conv_geom *g, float *col, layer_prof *prof);
/* dw (OC, C*K*K), dbias (OC) as sums over the batch; din (B, C, H, W) or NULL.
 * col and dcol are scratch of (C*K*K, OH*OW) floats each. */
void conv2d_backward(float *din, float *dw, float *dbias, const float *dout, const float *in,
                     const float *w, int B, const conv_geom *g, float *col, float *dcol,
                     layer_prof *prof);

/* Max pooling, window K, stride S, no padding: in (B, C, H, W) -> out (B, C, OH, OW).
 * argmax (B, C, OH, OW) records the winning input offset within its (H, W) plane. */
void maxpool_forward(float *out, int32_t *argmax, const float *in, int B, int C, int H, int W,
                     int K, int S);
void maxpool_backward(float *din, const float *dout, const int32_t *argmax, int B, int C, int H,
                      int W, int K, int S);

/* Softmax cross-entropy on logits (B, C) with labels in [0, C): writes dlogits (B, C) =
 * softmax - onehot (a per-sample gradient, not divided by B), adds the summed loss to
 * *loss_sum and the number of correct argmax predictions to *correct. dlogits may be NULL
 * (evaluation). */
void softmax_xent(float *dlogits, const float *logits, const int32_t *labels, int B, int C,
                  double *loss_sum, long *correct);

/* Squared error on y (B, T) against t (B, T): loss per sample sum_j (y - t)^2; writes
 * dy = 2 (y - t) (may be NULL) and adds the summed loss to *loss_sum. */
void mse_loss(float *dy, const float *y, const float *t, int B, int T, double *loss_sum);

#endif
