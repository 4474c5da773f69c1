/*
 * model_cuda.h: runs a model built by model_init on one CUDA device.
 *
 * The executor reuses the host model's geometry and offsets (model_layer w_off/b_off, shapes,
 * in-place ReLU/flatten) and keeps device copies of everything the iteration touches:
 * params (n_params), grads (n_params, the same layout as model.grads, so NCCL can all-reduce
 * it in place), the momentum buffer, and activations for max_batch samples. Parameters and gradients stay resident; the host model's own buffers
 * are not touched after init.
 *
 * Batches reach the device through pinned staging buffers. For the TCP ring the gradient
 * goes back through a pinned host buffer in chunks of `chunk_floats`: with download enabled,
 * each chunk is queued on a copy stream as soon as the backward pass has finished every
 * layer that writes it (the last layers first, so copies overlap the rest of the backward
 * pass), and a per-chunk event says when its bytes are on the host. The ring can start on
 * ready chunks while later ones are still in flight, and after the all-reduce, upload the
 * summed chunks back the same way before the device SGD step.
 *
 * Every function returns HR_OK or HR_ERR_CUDA/HR_ERR_INVAL (messages go to the cuda log).
 * Not thread-safe: one thread drives one model_cuda.
 */
#ifndef HR_MODEL_CUDA_H
#define HR_MODEL_CUDA_H

#include "trainer/cuda/cuda_layers.h"

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "trainer/model.h"

/* Gradient chunks: about MODEL_CUDA_CHUNKS of them, each at least MODEL_CUDA_MIN_CHUNK floats
 * (256 KiB), so the copy of one chunk is long enough to be worth its own event. */
#define MODEL_CUDA_CHUNKS     16
#define MODEL_CUDA_MIN_CHUNK  (1L << 16)
#define MODEL_CUDA_MAX_CHUNKS 64

typedef struct {
    const model *m;    /* host model: geometry and offsets (not owned, must outlive this) */
    cuda_ctx ctx;      /* device, compute stream, cuBLAS, conv workspace */
    cudaStream_t copy; /* gradient download/upload stream */
    float *params;     /* device (n_params) */
    float *grads;      /* device (n_params) */
    float *vel;        /* device (n_params) momentum */
    float *x;          /* device (max_batch, in_size) input */
    int32_t *labels;   /* device (max_batch) */
    float *targets;    /* device (max_batch, out_size) */
    float *out[MODEL_MAX_LAYERS];      /* device (max_batch, out_size) per layer (aliases) */
    float *dout[MODEL_MAX_LAYERS];     /* device gradients w.r.t. the activations (aliases) */
    int32_t *argmax[MODEL_MAX_LAYERS]; /* device, maxpool layers only */
    double *stats;                     /* device (2): loss sum, correct */
    float *h_x;                        /* pinned (max_batch, in_size) input staging */
    int32_t *h_labels;                 /* pinned (max_batch) */
    float *h_targets;                  /* pinned (max_batch, out_size) */
    float *h_grads;    /* pinned (n_params) gradient staging for the TCP ring */
    double *h_stats;   /* pinned (2) */
    long chunk_floats; /* gradient chunk size */
    int n_chunks;      /* ceil(n_params / chunk_floats) */
    cudaEvent_t down[MODEL_CUDA_MAX_CHUNKS];  /* chunk i is in h_grads (download) */
    cudaEvent_t layer_done[MODEL_MAX_LAYERS]; /* backward of layer i finished (compute) */
    cudaEvent_t copy_idle;   /* recorded on the copy stream; the compute stream waits on it */
    cudaEvent_t grads_ready; /* recorded on the compute stream when the gradient is complete */
    int download;            /* stream gradients to h_grads during forward_backward */
    int downloading;         /* a download is in flight (chunks queued, not yet waited) */
    int n_events;            /* created events in down[] (for free) */
    int n_layer_events;      /* created events in layer_done[] */
    int misc_events;         /* copy_idle and grads_ready created */
} model_cuda;

/* Copy the host model's geometry and current params to `device`, allocate every device and
 * pinned buffer (none are allocated later) and zero the momentum and the gradient. */
hr_status model_cuda_init(model_cuda *mc, const model *m, int device, char *err, size_t errlen);
/* Safe on a zeroed or partly initialised struct. */
void model_cuda_free(model_cuda *mc);

/* Forward, loss and backward over b <= max_batch samples: x (b, in_size), labels (b) or
 * targets (b, out_size) on the host (x may be model_cuda_host_input(), which skips a copy).
 * Writes gradient SUMS into the device grads[0, n_params) and returns once they are
 * computed. *st is overwritten, as model_forward_backward does. With download enabled the
 * gradient is also on its way to the pinned host buffer (see the chunk functions). */
hr_status model_cuda_forward_backward(model_cuda *mc, const float *x_host,
                                      const int32_t *labels_host, const float *targets_host, long b,
                                      model_stats *st);
/* Forward and loss only (evaluation); ADDS to *st, as model_forward does. */
hr_status model_cuda_forward(model_cuda *mc, const float *x_host, const int32_t *labels_host,
                             const float *targets_host, long b, model_stats *st);
/* Copy the last forward's output (b, out_size) to the host. */
hr_status model_cuda_output_to_host(model_cuda *mc, float *out, long b);

/* Pinned input staging of (max_batch, in_size) floats that a loader may fill directly. */
float *model_cuda_host_input(model_cuda *mc);

/* ---------------------------------------------------------------- TCP ring staging */

/* Stream each finished gradient chunk to the pinned host buffer during the backward pass. */
void model_cuda_set_download(model_cuda *mc, int on);
/* Pinned (n_params) host gradient buffer, where download streams the gradient. */
float *model_cuda_host_grads(model_cuda *mc);
/* Chunk i covers host/device grads [i*chunk_floats, min((i+1)*chunk_floats, n_params)). */
int model_cuda_grad_chunks(const model_cuda *mc);
/* 1 when chunk i of the current download is on the host, 0 if not yet, -1 on error. */
int model_cuda_grad_chunk_ready(model_cuda *mc, int i);
/* Wait until chunk i of the current download is on the host. */
hr_status model_cuda_grad_chunk_wait(model_cuda *mc, int i);
/* Queue chunk i of the pinned host buffer for upload into the device grads (after the
 * all-reduce has finished it); model_cuda_sgd_step orders itself after every upload. */
hr_status model_cuda_grad_chunk_upload(model_cuda *mc, int i);

/* The whole gradient (n_params floats) to `host`: starts the chunked download if it is not
 * already in flight, waits for each chunk and, if host is not the pinned buffer, copies it
 * out as it lands. `stream` (may be NULL: the executor's copy stream) carries the copies. */
hr_status model_cuda_grads_to_host(model_cuda *mc, float *host, cudaStream_t stream);
/* The summed gradient (n_params floats) from `host` (pinned buffer or any host memory) into
 * the device grads, in chunks; returns once the copies are queued if host is the pinned
 * buffer, after they finish otherwise. */
hr_status model_cuda_grads_from_host(model_cuda *mc, const float *host);

/* ---------------------------------------------------------------- NCCL path and state */

/* The device buffers that move between host and device in one synchronous copy. */
typedef enum {
    MODEL_CUDA_PARAMS, /* parameters (n_params): state transfer, checkpoints and the I4 hash */
    MODEL_CUDA_VEL,    /* momentum (n_params), for checkpoints (opt_sgd.vel on the CPU) */
} model_cuda_buf;

/* Buffer b from host into the device, or from the device into host; both return once the copy
 * finished (after the copies and kernels queued before it). */
hr_status model_cuda_to_device(model_cuda *mc, model_cuda_buf b, const float *host);
hr_status model_cuda_to_host(model_cuda *mc, model_cuda_buf b, float *host);

/* One SGD step on the device grads, operation for operation opt_step's (optim.h):
 *     g = grad * inv_B + wd * p;  v = momentum * v + g;  p = p - lr * v
 * Pass lr = (float)opt_lr(o, iter), inv_B = 1.0f / (float)B as opt_step computes them, and
 * a GPU replica stays bitwise equal to CPU replicas (I4). Orders itself after queued gradient
 * uploads and returns once the step is queued; every later call on the executor (the next
 * pass, params_to_host, ...) runs after it. */
hr_status model_cuda_sgd_step(model_cuda *mc, float lr, float momentum, float wd, float inv_B);

#ifdef __cplusplus
}
#endif

#endif
