/*
 * cuda_layers.h: the trainer layers of layers.h on device pointers, plus the SGD step.
 *
 * Every function mirrors its CPU twin in layers.h: same shapes, same row-major layout with
 * the batch first, same contract (backward passes WRITE gradient SUMS over the batch; the
 * optimizer divides by the global batch, DESIGN.md I2). All pointers are device pointers;
 * work is enqueued on ctx->stream and the functions return without waiting, except where
 * noted. GEMMs go through cuBLAS in plain fp32 (no TF32). Convolutions go through cuDNN where
 * the build has it (deterministic algorithms, FMA math: no TF32), else through im2col and
 * cuBLAS, which stays as the reference; everything else is this module's own kernels.
 *
 * Determinism: no reduction uses atomics. Sums over the batch run as fixed per-block partials
 * followed by a fixed second pass, so a given input, shape and device give bitwise-identical
 * output on every run. Results differ from the CPU only by float summation order (GEMM) and
 * by the device's exp/log in the loss.
 *
 * A status other than HR_OK means a launch or cuBLAS call failed; the message is logged
 * under the cuda subsystem.
 */
#ifndef HR_CUDA_LAYERS_H
#define HR_CUDA_LAYERS_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "base/hr_status.h"
#include "trainer/layers.h"

/* Per-device execution state: one stream, one cuBLAS handle, reusable scratch. */
typedef struct {
    int device;            /* CUDA ordinal */
    cudaStream_t stream;   /* every kernel and GEMM of this context runs here */
    cublasHandle_t blas;   /* bound to `stream`, fp32 math */
    float *scratch;        /* conv2d workspace (scratch_floats), grown on demand */
    size_t scratch_floats; /* capacity of scratch */
    double *partials;      /* reduction partials (2 * CUDA_MAX_PARTIALS doubles) */
    int owns_stream;       /* stream was created here and is destroyed by cuda_ctx_free */
    void *dnn;             /* cuDNN state (cuda_cudnn.cu) while convolutions use cuDNN, else NULL */
    long conv_fallbacks;   /* conv2d calls that ran on im2col although dnn was set (no cuDNN
                              algorithm qualified for the shape) */
} cuda_ctx;

/* How a context runs conv2d. */
typedef enum { CUDA_CONV_IM2COL, CUDA_CONV_CUDNN } cuda_conv_impl;

#define CUDA_MAX_PARTIALS 1024

/* Number of usable CUDA devices; 0 when there is no device or no driver. */
int cuda_device_count(void);
/* Peak fp32 FLOP/s of `device` (SMs x clock x FLOP per clock per SM), for the capacity
 * hint; 0 when the device cannot be queried. `name` (may be NULL) receives its name. */
double cuda_device_capacity(int device, char *name, size_t namelen);

/* Bind `device` and create the stream, cuBLAS handle and reduction scratch. Convolutions start
 * on cuDNN where the build has it and its library loads (logged once per process), else on
 * im2col. */
hr_status cuda_ctx_init(cuda_ctx *c, int device, char *err, size_t errlen);
/* Safe on a zeroed or partly initialised context. */
void cuda_ctx_free(cuda_ctx *c);
/* Grow the conv2d workspace to at least `floats` (synchronises the device when it grows;
 * call once before the training loop so the loop never allocates). */
hr_status cuda_ctx_reserve(cuda_ctx *c, size_t floats);
/* Switch the context's convolutions. CUDA_CONV_CUDNN fails with HR_ERR_UNSUPPORTED (and a
 * reason in err) on a build without cuDNN or where its library does not load. */
hr_status cuda_ctx_set_conv(cuda_ctx *c, cuda_conv_impl impl, char *err, size_t errlen);
cuda_conv_impl cuda_ctx_conv(const cuda_ctx *c);
/* "cuDNN 9.19.0" (the library opened, asked and closed again), why it cannot be used, or
 * "none (built without cuDNN)"; never NULL. */
const char *cuda_cudnn_version(void);
/* Open the GPU libraries this build calls (the CUDA driver, cuBLAS and, where built in, cuDNN;
 * cuda_libs.c) and check their versions, once per process; later calls return the first
 * answer. HR_ERR_UNSUPPORTED with the library and what dlopen or the check said in err.
 * cuda_ctx_init calls it; a node with device = cuda:N calls it at start-up. */
hr_status cuda_libs_load(char *err, size_t errlen);
/* One line per library ("  cuBLAS: cuBLAS 13.0.2 (/path)" or "  cuBLAS: cannot be used:
 * why"), each opened, asked its version and closed again: nothing stays loaded. */
void cuda_libs_describe(char *out, size_t len);
/* Workspace floats that conv2d forward/backward need for geometry g and batch B. The cuDNN
 * path uses no more than this either (it picks among the algorithms that fit). */
size_t cuda_conv2d_workspace(const conv_geom *g, int B);

/* ---------------------------------------------------------------- dense layers */

/* out (B, O) = in (B, I) . w^T + bias; w (O, I), bias (O). */
hr_status cuda_linear_forward(cuda_ctx *c, float *out, const float *in, const float *w,
                              const float *bias, int B, int I, int O);
/* dw (O, I) = dout^T . in, dbias (O) = column sums of dout, din (B, I) = dout . w or NULL. */
hr_status cuda_linear_backward(cuda_ctx *c, float *din, float *dw, float *dbias, const float *dout,
                               const float *in, const float *w, int B, int I, int O);

/* out = max(in, 0) over n values; may run in place. */
hr_status cuda_relu_forward(cuda_ctx *c, float *out, const float *in, long n);
/* din = dout where out > 0, else 0; may run in place (din == dout). */
hr_status cuda_relu_backward(cuda_ctx *c, float *din, const float *dout, const float *out, long n);

/* ---------------------------------------------------------------- image layers */

/* out (B, OC, OH, OW) = conv(in (B, C, H, W), w (OC, C*K*K)) + bias (OC). Uses the
 * context workspace (cuda_conv2d_workspace floats). */
hr_status cuda_conv2d_forward(cuda_ctx *c, float *out, const float *in, const float *w,
                              const float *bias, int B, const conv_geom *g);
/* dw (OC, C*K*K), dbias (OC) as sums over the batch; din (B, C, H, W) or NULL. */
hr_status cuda_conv2d_backward(cuda_ctx *c, float *din, float *dw, float *dbias, const float *dout,
                               const float *in, const float *w, int B, const conv_geom *g);

/* Max pooling, window K, stride S, no padding: in (B, C, H, W) -> out (B, C, OH, OW);
 * argmax (B, C, OH, OW) holds the winning offset within its (H, W) plane, ties and NaNs
 * resolved exactly as on the CPU. */
hr_status cuda_maxpool_forward(cuda_ctx *c, float *out, int32_t *argmax, const float *in, int B,
                               int C, int H, int W, int K, int S);
/* din (B, C, H, W) = sum of dout over the windows whose argmax is each input (a gather, in
 * the CPU's order). */
hr_status cuda_maxpool_backward(cuda_ctx *c, float *din, const float *dout, const int32_t *argmax,
                                int B, int C, int H, int W, int K, int S);

/* Flatten is a view: (B, C, H, W) and (B, C*H*W) share one buffer, so it has no kernel. */

/* ---------------------------------------------------------------- losses */

/* Softmax cross-entropy on logits (B, C), labels (B) in [0, C) on the device. Writes
 * dlogits = softmax - onehot (or skips it when NULL) and stats[0] = summed loss,
 * stats[1] = correct argmax predictions (a device array of 2 doubles, overwritten). */
hr_status cuda_softmax_xent(cuda_ctx *c, float *dlogits, const float *logits, const int32_t *labels,
                            int B, int C, double *stats);
/* Squared error of y (B, T) against t (B, T): dy = 2 (y - t) (or NULL), stats[0] = summed
 * loss, stats[1] = 0. */
hr_status cuda_mse_loss(cuda_ctx *c, float *dy, const float *y, const float *t, int B, int T,
                        double *stats);

/* ---------------------------------------------------------------- optimizer */

/* SGD with momentum and L2 weight decay over n values, in the CPU
 * optimizer's arithmetic and order, without fused multiply-adds:
 *     g = grad * inv_B + wd * p;  v = momentum * v + g;  p = p - lr * v
 * so a GPU node and a CPU node given the same summed gradient keep bitwise-identical
 * parameters (I4). */
hr_status cuda_sgd_step(cuda_ctx *c, float *p, float *v, const float *grad, long n, float lr,
                        float momentum, float wd, float inv_B);

/* Wait for everything enqueued on the context's stream. */
hr_status cuda_ctx_sync(cuda_ctx *c);

#ifdef __cplusplus
}
#endif

#endif
