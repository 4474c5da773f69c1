/*
 * model_cuda.c: the GPU executor of a host-built model (see model_cuda.h).
 *
 * The pass mirrors model.c layer for layer, with the same in-place ReLU/flatten aliasing and
 * the same "first layer has no input gradient" rule, so the device gradient equals the CPU
 * gradient up to float summation order. Two streams: compute (the context's) and copy
 * (gradient chunks to and from the pinned host buffer). Their ordering is explicit: a chunk
 * download waits on the event of the backward layer that finished it, and anything that
 * writes the device grads or params waits on the copy stream's last work first.
 */
#include "trainer/cuda/model_cuda.h"

#include "base/hr_log.h"

#include <cuda_runtime_api.h>
#include <string.h>

#include "trainer/cuda/cuda_check.h"

/* ================================================================ init and free */

static long chunk_size(long n_params) {
    long c = (n_params + MODEL_CUDA_CHUNKS - 1) / MODEL_CUDA_CHUNKS;
    if (c < MODEL_CUDA_MIN_CHUNK) c = MODEL_CUDA_MIN_CHUNK;
    if ((n_params + c - 1) / c > MODEL_CUDA_MAX_CHUNKS)
        c = (n_params + MODEL_CUDA_MAX_CHUNKS - 1) / MODEL_CUDA_MAX_CHUNKS;
    return c;
}

static hr_status dalloc(void **p, size_t bytes) {
    CU_CHECK(cudaMalloc(p, bytes ? bytes : 4));
    return HR_OK;
}

static hr_status halloc(void **p, size_t bytes) {
    CU_CHECK(cudaHostAlloc(p, bytes ? bytes : 4, cudaHostAllocDefault));
    return HR_OK;
}

static hr_status init_buffers(model_cuda *mc) {
    const model *m = mc->m;
    size_t B = (size_t)m->max_batch, np = (size_t)m->n_params;
    CU_CHECK(cudaStreamCreateWithFlags(&mc->copy, cudaStreamNonBlocking));
    HR_CHECK(dalloc((void **)&mc->params, sizeof(float) * np));
    HR_CHECK(dalloc((void **)&mc->grads, sizeof(float) * np));
    HR_CHECK(dalloc((void **)&mc->vel, sizeof(float) * np));
    HR_CHECK(dalloc((void **)&mc->x, sizeof(float) * B * (size_t)m->in_size));
    HR_CHECK(dalloc((void **)&mc->labels, sizeof(int32_t) * B));
    HR_CHECK(dalloc((void **)&mc->targets, sizeof(float) * B * (size_t)m->out_size));
    HR_CHECK(dalloc((void **)&mc->stats, sizeof(double) * 2));
    size_t ws = 0;
    for (int i = 0; i < m->n_layers; i++) {
        const model_layer *L = &m->layers[i];
        if (L->inplace) {
            mc->out[i] = mc->out[i - 1];
            mc->dout[i] = mc->dout[i - 1];
            continue;
        }
        size_t n = B * (size_t)L->out_size;
        HR_CHECK(dalloc((void **)&mc->out[i], sizeof(float) * n));
        HR_CHECK(dalloc((void **)&mc->dout[i], sizeof(float) * n));
        if (L->kind == LAYER_MAXPOOL)
            HR_CHECK(dalloc((void **)&mc->argmax[i], sizeof(int32_t) * n));
        if (L->kind == LAYER_CONV2D) {
            size_t w = cuda_conv2d_workspace(&L->g, (int)B);
            if (w > ws) ws = w;
        }
    }
    if (ws) HR_CHECK(cuda_ctx_reserve(&mc->ctx, ws));
    HR_CHECK(halloc((void **)&mc->h_x, sizeof(float) * B * (size_t)m->in_size));
    HR_CHECK(halloc((void **)&mc->h_labels, sizeof(int32_t) * B));
    HR_CHECK(halloc((void **)&mc->h_targets, sizeof(float) * B * (size_t)m->out_size));
    HR_CHECK(halloc((void **)&mc->h_grads, sizeof(float) * np));
    HR_CHECK(halloc((void **)&mc->h_stats, sizeof(double) * 2));
    for (; mc->n_events < mc->n_chunks; mc->n_events++)
        CU_CHECK(cudaEventCreateWithFlags(&mc->down[mc->n_events], cudaEventDisableTiming));
    for (; mc->n_layer_events < m->n_layers; mc->n_layer_events++)
        CU_CHECK(
            cudaEventCreateWithFlags(&mc->layer_done[mc->n_layer_events], cudaEventDisableTiming));
    CU_CHECK(cudaEventCreateWithFlags(&mc->copy_idle, cudaEventDisableTiming));
    mc->misc_events = 1;
    CU_CHECK(cudaEventCreateWithFlags(&mc->grads_ready, cudaEventDisableTiming));
    mc->misc_events = 2;
    cudaStream_t s = mc->ctx.stream;
    CU_CHECK(cudaMemcpyAsync(mc->params, m->params, sizeof(float) * np, cudaMemcpyHostToDevice, s));
    CU_CHECK(cudaMemsetAsync(mc->grads, 0, sizeof(float) * np, s));
    CU_CHECK(cudaMemsetAsync(mc->vel, 0, sizeof(float) * np, s));
    CU_CHECK(cudaStreamSynchronize(s));
    memset(mc->h_grads, 0, sizeof(float) * np);
    return HR_OK;
}

hr_status model_cuda_init(model_cuda *mc, const model *m, int device, char *err, size_t errlen) {
    memset(mc, 0, sizeof *mc);
    mc->m = m;
    if (!m || !m->params || m->n_layers < 1)
        return hr_fail(err, errlen, HR_ERR_INVAL, "model_cuda: the host model is not built");
    HR_CHECK(cuda_ctx_init(&mc->ctx, device, err, errlen));
    mc->chunk_floats = chunk_size(m->n_params);
    mc->n_chunks = (int)((m->n_params + mc->chunk_floats - 1) / mc->chunk_floats);
    hr_status s = init_buffers(mc);
    if (s != HR_OK) {
        size_t need = sizeof(float) * (size_t)m->n_params * 3;
        model_cuda_free(mc);
        return hr_fail(err, errlen, s,
                       "cuda:%d: cannot set up the model (%ld params, batch %ld, %.1f MiB of "
                       "parameter state; see the cuda log for the failing call)",
                       device, m->n_params, m->max_batch, (double)need / (1 << 20));
    }
    char name[256];
    double cap = cuda_device_capacity(device, name, sizeof name);
    HR_INFO(CUDA, "cuda:%d %s (%.1f fp32 TFLOP/s peak): %ld params, batch %ld, %d grad chunks",
            device, name, cap / 1e12, m->n_params, m->max_batch, mc->n_chunks);
    return HR_OK;
}

void model_cuda_free(model_cuda *mc) {
    if (!mc || !mc->m) return;
    cudaSetDevice(mc->ctx.device);
    if (mc->ctx.stream) cudaStreamSynchronize(mc->ctx.stream);
    if (mc->copy) cudaStreamSynchronize(mc->copy);
    for (int i = 0; i < mc->m->n_layers; i++) {
        if (!mc->m->layers[i].inplace) {
            cudaFree(mc->out[i]);
            cudaFree(mc->dout[i]);
            cudaFree(mc->argmax[i]);
        }
        mc->out[i] = mc->dout[i] = NULL;
        mc->argmax[i] = NULL;
    }
    cudaFree(mc->params);
    cudaFree(mc->grads);
    cudaFree(mc->vel);
    cudaFree(mc->x);
    cudaFree(mc->labels);
    cudaFree(mc->targets);
    cudaFree(mc->stats);
    cudaFreeHost(mc->h_x);
    cudaFreeHost(mc->h_labels);
    cudaFreeHost(mc->h_targets);
    cudaFreeHost(mc->h_grads);
    cudaFreeHost(mc->h_stats);
    for (int i = 0; i < mc->n_events; i++) cudaEventDestroy(mc->down[i]);
    for (int i = 0; i < mc->n_layer_events; i++) cudaEventDestroy(mc->layer_done[i]);
    if (mc->misc_events > 0) cudaEventDestroy(mc->copy_idle);
    if (mc->misc_events > 1) cudaEventDestroy(mc->grads_ready);
    if (mc->copy) cudaStreamDestroy(mc->copy);
    cuda_ctx_free(&mc->ctx);
    memset(mc, 0, sizeof *mc);
}

/* ================================================================ forward and backward */

static hr_status check_args(const model_cuda *mc, const float *x, const int32_t *labels,
                            const float *targets, long b) {
    const model *m = mc->m;
    if (!x || b < 1 || b > m->max_batch) return HR_ERR_INVAL;
    if (m->loss == MODEL_LOSS_XENT ? !labels : !targets) return HR_ERR_INVAL;
    return HR_OK;
}

/* Make the compute stream wait for everything queued on the copy stream so far. */
static hr_status after_copies(model_cuda *mc) {
    CU_CHECK(cudaEventRecord(mc->copy_idle, mc->copy));
    CU_CHECK(cudaStreamWaitEvent(mc->ctx.stream, mc->copy_idle, 0));
    return HR_OK;
}

/* Batch to the device through the pinned staging buffers. */
static hr_status stage_batch(model_cuda *mc, const float *x, const int32_t *labels,
                             const float *targets, long b) {
    const model *m = mc->m;
    cudaStream_t s = mc->ctx.stream;
    size_t nx = sizeof(float) * (size_t)(b * m->in_size);
    if (x != mc->h_x) memcpy(mc->h_x, x, nx);
    CU_CHECK(cudaMemcpyAsync(mc->x, mc->h_x, nx, cudaMemcpyHostToDevice, s));
    if (m->loss == MODEL_LOSS_XENT) {
        size_t nl = sizeof(int32_t) * (size_t)b;
        if (labels != mc->h_labels) memcpy(mc->h_labels, labels, nl);
        CU_CHECK(cudaMemcpyAsync(mc->labels, mc->h_labels, nl, cudaMemcpyHostToDevice, s));
    } else {
        size_t nt = sizeof(float) * (size_t)(b * m->out_size);
        if (targets != mc->h_targets) memcpy(mc->h_targets, targets, nt);
        CU_CHECK(cudaMemcpyAsync(mc->targets, mc->h_targets, nt, cudaMemcpyHostToDevice, s));
    }
    return HR_OK;
}

static hr_status forward(model_cuda *mc, int B) {
    const model *m = mc->m;
    cuda_ctx *c = &mc->ctx;
    const float *in = mc->x;
    for (int i = 0; i < m->n_layers; i++) {
        const model_layer *L = &m->layers[i];
        const float *w = mc->params + L->w_off, *bias = mc->params + L->b_off;
        switch (L->kind) {
        case LAYER_LINEAR:
            HR_CHECK(cuda_linear_forward(c, mc->out[i], in, w, bias, B, (int)L->in_size, L->out_c));
            break;
        case LAYER_CONV2D:
            HR_CHECK(cuda_conv2d_forward(c, mc->out[i], in, w, bias, B, &L->g));
            break;
        case LAYER_RELU:
            HR_CHECK(cuda_relu_forward(c, mc->out[i], in, (long)B * L->out_size));
            break;
        case LAYER_MAXPOOL:
            HR_CHECK(cuda_maxpool_forward(c, mc->out[i], mc->argmax[i], in, B, L->in_c, L->in_h,
                                          L->in_w, L->k, L->stride));
            break;
        case LAYER_FLATTEN:
            if (!L->inplace)
                CU_CHECK(cudaMemcpyAsync(mc->out[i], in, sizeof(float) * (size_t)(B * L->out_size),
                                         cudaMemcpyDeviceToDevice, c->stream));
            break;
        }
        in = mc->out[i];
    }
    return HR_OK;
}

static hr_status loss(model_cuda *mc, float *dy, int B) {
    const model *m = mc->m;
    const float *y = mc->out[m->n_layers - 1];
    if (m->loss == MODEL_LOSS_XENT)
        return cuda_softmax_xent(&mc->ctx, dy, y, mc->labels, B, (int)m->out_size, mc->stats);
    return cuda_mse_loss(&mc->ctx, dy, y, mc->targets, B, (int)m->out_size, mc->stats);
}

static hr_status queue_download(model_cuda *mc, int i, cudaStream_t s) {
    long off = (long)i * mc->chunk_floats, len = mc->m->n_params - off;
    if (len > mc->chunk_floats) len = mc->chunk_floats;
    CU_CHECK(cudaMemcpyAsync(mc->h_grads + off, mc->grads + off, sizeof(float) * (size_t)len,
                             cudaMemcpyDeviceToHost, s));
    CU_CHECK(cudaEventRecord(mc->down[i], s));
    return HR_OK;
}

/* Stats of the last loss to the host; waits for the compute stream. */
static hr_status fetch_stats(model_cuda *mc, model_stats *st, int add) {
    CU_CHECK(cudaMemcpyAsync(mc->h_stats, mc->stats, sizeof(double) * 2, cudaMemcpyDeviceToHost,
                             mc->ctx.stream));
    CU_CHECK(cudaStreamSynchronize(mc->ctx.stream));
    if (!add) memset(st, 0, sizeof *st);
    st->loss_sum += mc->h_stats[0];
    st->correct += (long)mc->h_stats[1];
    return HR_OK;
}

hr_status model_cuda_forward_backward(model_cuda *mc, const float *x_host,
                                      const int32_t *labels_host, const float *targets_host, long b,
                                      model_stats *st) {
    HR_CHECK(check_args(mc, x_host, labels_host, targets_host, b));
    const model *m = mc->m;
    cuda_ctx *c = &mc->ctx;
    int B = (int)b;
    HR_CHECK(after_copies(mc)); /* earlier downloads/uploads still read or write grads */
    HR_CHECK(stage_batch(mc, x_host, labels_host, targets_host, b));
    HR_CHECK(forward(mc, B));
    HR_CHECK(loss(mc, mc->dout[m->n_layers - 1], B));
    long done_from = m->n_params; /* grads [done_from, n_params) are final */
    int next = mc->n_chunks - 1;  /* highest chunk not yet queued for download */
    for (int i = m->n_layers - 1; i >= 0; i--) {
        const model_layer *L = &m->layers[i];
        const float *in = i ? mc->out[i - 1] : mc->x;
        float *din = i ? mc->dout[i - 1] : NULL;
        float *dw = mc->grads + L->w_off, *db = mc->grads + L->b_off;
        const float *w = mc->params + L->w_off;
        switch (L->kind) {
        case LAYER_LINEAR:
            HR_CHECK(cuda_linear_backward(c, din, dw, db, mc->dout[i], in, w, B, (int)L->in_size,
                                          L->out_c));
            break;
        case LAYER_CONV2D:
            HR_CHECK(cuda_conv2d_backward(c, din, dw, db, mc->dout[i], in, w, B, &L->g));
            break;
        case LAYER_RELU:
            if (din)
                HR_CHECK(
                    cuda_relu_backward(c, din, mc->dout[i], mc->out[i], (long)B * L->out_size));
            break;
        case LAYER_MAXPOOL:
            if (din)
                HR_CHECK(cuda_maxpool_backward(c, din, mc->dout[i], mc->argmax[i], B, L->in_c,
                                               L->in_h, L->in_w, L->k, L->stride));
            break;
        case LAYER_FLATTEN:
            if (din && !L->inplace)
                CU_CHECK(cudaMemcpyAsync(din, mc->dout[i],
                                         sizeof(float) * (size_t)(B * L->out_size),
                                         cudaMemcpyDeviceToDevice, c->stream));
            break;
        }
        if (!mc->download || L->n_params == 0) continue;
        done_from = L->w_off;
        if (next < 0 || (long)next * mc->chunk_floats < done_from) continue;
        CU_CHECK(cudaEventRecord(mc->layer_done[i], c->stream));
        CU_CHECK(cudaStreamWaitEvent(mc->copy, mc->layer_done[i], 0));
        for (; next >= 0 && (long)next * mc->chunk_floats >= done_from; next--)
            HR_CHECK(queue_download(mc, next, mc->copy));
    }
    if (mc->download) {
        CU_CHECK(cudaEventRecord(mc->grads_ready, c->stream));
        CU_CHECK(cudaStreamWaitEvent(mc->copy, mc->grads_ready, 0));
        for (; next >= 0; next--) HR_CHECK(queue_download(mc, next, mc->copy));
    }
    mc->downloading = mc->download;
    return fetch_stats(mc, st, 0);
}

hr_status model_cuda_forward(model_cuda *mc, const float *x_host, const int32_t *labels_host,
                             const float *targets_host, long b, model_stats *st) {
    HR_CHECK(check_args(mc, x_host, labels_host, targets_host, b));
    HR_CHECK(stage_batch(mc, x_host, labels_host, targets_host, b));
    HR_CHECK(forward(mc, (int)b));
    HR_CHECK(loss(mc, NULL, (int)b));
    return fetch_stats(mc, st, 1);
}

hr_status model_cuda_output_to_host(model_cuda *mc, float *out, long b) {
    const model *m = mc->m;
    if (b < 1 || b > m->max_batch) return HR_ERR_INVAL;
    CU_CHECK(cudaMemcpyAsync(out, mc->out[m->n_layers - 1],
                             sizeof(float) * (size_t)(b * m->out_size), cudaMemcpyDeviceToHost,
                             mc->ctx.stream));
    CU_CHECK(cudaStreamSynchronize(mc->ctx.stream));
    return HR_OK;
}

float *model_cuda_host_input(model_cuda *mc) {
    return mc->h_x;
}

/* ================================================================ TCP ring staging */

void model_cuda_set_download(model_cuda *mc, int on) {
    mc->download = on != 0;
}

float *model_cuda_host_grads(model_cuda *mc) {
    return mc->h_grads;
}

int model_cuda_grad_chunks(const model_cuda *mc) {
    return mc->n_chunks;
}

int model_cuda_grad_chunk_ready(model_cuda *mc, int i) {
    if (i < 0 || i >= mc->n_chunks || !mc->downloading) return -1;
    cudaError_t e = cudaEventQuery(mc->down[i]);
    if (e == cudaSuccess) return 1;
    if (e == cudaErrorNotReady) {
        (void)cudaGetLastError(); /* kept as the last error: the next launch check would see it */
        return 0;
    }
    HR_ERROR(CUDA, "gradient chunk %d: %s", i, cudaGetErrorString(e));
    return -1;
}

hr_status model_cuda_grad_chunk_wait(model_cuda *mc, int i) {
    if (i < 0 || i >= mc->n_chunks || !mc->downloading) return HR_ERR_INVAL;
    CU_CHECK(cudaEventSynchronize(mc->down[i]));
    return HR_OK;
}

hr_status model_cuda_grad_chunk_upload(model_cuda *mc, int i) {
    if (i < 0 || i >= mc->n_chunks) return HR_ERR_INVAL;
    long off = (long)i * mc->chunk_floats, len = mc->m->n_params - off;
    if (len > mc->chunk_floats) len = mc->chunk_floats;
    if (mc->downloading) CU_CHECK(cudaStreamWaitEvent(mc->copy, mc->down[i], 0));
    CU_CHECK(cudaMemcpyAsync(mc->grads + off, mc->h_grads + off, sizeof(float) * (size_t)len,
                             cudaMemcpyHostToDevice, mc->copy));
    return HR_OK;
}

hr_status model_cuda_grads_to_host(model_cuda *mc, float *host, cudaStream_t stream) {
    if (!mc->downloading) {
        cudaStream_t s = stream ? stream : mc->copy;
        CU_CHECK(cudaEventRecord(mc->grads_ready, mc->ctx.stream));
        CU_CHECK(cudaStreamWaitEvent(s, mc->grads_ready, 0));
        for (int i = mc->n_chunks - 1; i >= 0; i--) HR_CHECK(queue_download(mc, i, s));
        if (s != mc->copy) { /* later uploads on the copy stream must follow these reads */
            CU_CHECK(cudaEventRecord(mc->copy_idle, s));
            CU_CHECK(cudaStreamWaitEvent(mc->copy, mc->copy_idle, 0));
        }
        mc->downloading = 1;
    }
    /* chunks were queued last-first; take them in that order so host copies overlap */
    for (int i = mc->n_chunks - 1; i >= 0; i--) {
        CU_CHECK(cudaEventSynchronize(mc->down[i]));
        if (host && host != mc->h_grads) {
            long off = (long)i * mc->chunk_floats, len = mc->m->n_params - off;
            if (len > mc->chunk_floats) len = mc->chunk_floats;
            memcpy(host + off, mc->h_grads + off, sizeof(float) * (size_t)len);
        }
    }
    return HR_OK;
}

hr_status model_cuda_grads_from_host(model_cuda *mc, const float *host) {
    for (int i = 0; i < mc->n_chunks; i++) {
        if (host != mc->h_grads) {
            long off = (long)i * mc->chunk_floats, len = mc->m->n_params - off;
            if (len > mc->chunk_floats) len = mc->chunk_floats;
            if (mc->downloading) CU_CHECK(cudaEventSynchronize(mc->down[i]));
            memcpy(mc->h_grads + off, host + off, sizeof(float) * (size_t)len);
        }
        HR_CHECK(model_cuda_grad_chunk_upload(mc, i));
    }
    return HR_OK;
}

/* ================================================================ NCCL path and state */

static hr_status copy_sync(model_cuda *mc, void *dst, const void *src, size_t bytes,
                           enum cudaMemcpyKind kind) {
    if (!bytes) return HR_OK;
    HR_CHECK(after_copies(mc));
    CU_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, mc->ctx.stream));
    CU_CHECK(cudaStreamSynchronize(mc->ctx.stream));
    return HR_OK;
}

/* Buffer b on the device, and its size in bytes. */
static float *device_buf(model_cuda *mc, model_cuda_buf b, size_t *bytes) {
    const model *m = mc->m;
    *bytes = sizeof(float) * (size_t)m->n_params;
    return b == MODEL_CUDA_PARAMS ? mc->params : mc->vel;
}

hr_status model_cuda_to_device(model_cuda *mc, model_cuda_buf b, const float *host) {
    size_t bytes;
    float *dev = device_buf(mc, b, &bytes);
    return copy_sync(mc, dev, host, bytes, cudaMemcpyHostToDevice);
}

hr_status model_cuda_to_host(model_cuda *mc, model_cuda_buf b, float *host) {
    size_t bytes;
    const float *dev = device_buf(mc, b, &bytes);
    return copy_sync(mc, host, dev, bytes, cudaMemcpyDeviceToHost);
}

hr_status model_cuda_sgd_step(model_cuda *mc, float lr, float momentum, float wd, float inv_B) {
    HR_CHECK(after_copies(mc)); /* uploaded gradient chunks */
    /* no wait: every later call on the executor runs on (or after) the compute stream */
    return cuda_sgd_step(&mc->ctx, mc->params, mc->vel, mc->grads, mc->m->n_params, lr, momentum,
                         wd, inv_B);
}
