/*
 * device_cuda.c: the CUDA implementation of the device table (trainer/device.h) over the GPU
 * executor (model_cuda.h).
 *
 * A pass streams the gradient to the executor's pinned buffer chunk by chunk as backward
 * finishes it (the last layers first), and each chunk is copied into the host model's grads
 * and reported through the hook as soon as its event says it landed, so the ring can start on
 * it while later chunks are still in flight. A step uploads the all-reduced sums and queues
 * the SGD kernel (ew_sgd, the CPU's arithmetic); it returns once queued, and every later call
 * on the executor runs after it. With the gradient kept on the device (an NCCL view) the pass
 * leaves it in the executor's device grads (no download, model_cuda_forward_backward returns
 * once it is computed, so NCCL's stream may read it) and the step reads it there (no upload).
 */
#include "trainer/cuda/device_cuda.h"

#include "trainer/cuda/cuda_layers.h"
#include "trainer/cuda/model_cuda.h"
#include "trainer/device.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int device_cuda_count(char *why, size_t len) {
    if (cuda_libs_load(why, len) != HR_OK) return -1;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        snprintf(why, len, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
        return 0;
    }
    if (n == 0) snprintf(why, len, "cudaGetDeviceCount found none");
    return n;
}

static hr_status cu_open(device *d, char *err, size_t errlen) {
    model_cuda *mc = calloc(1, sizeof *mc);
    if (!mc) return hr_fail(err, errlen, HR_ERR_NOMEM, "cuda:%d: out of memory", d->index);
    d->impl = mc;
    hr_status st = model_cuda_init(mc, d->m, d->index, err, errlen);
    if (st == HR_OK) model_cuda_set_download(mc, 1);
    return st;
}

static void cu_close(device *d) {
    if (!d->impl) return;
    model_cuda_free(d->impl);
    free(d->impl);
    d->impl = NULL;
}

static hr_status cu_pass(device *d, const float *x, const int32_t *labels, const float *targets,
                         long b, model_stats *st, const model_grad_hook *hook) {
    model_cuda *mc = d->impl;
    const long n = d->m->n_params;
    HR_CHECK(model_cuda_forward_backward(mc, x, labels, targets, b, st));
    if (d->keep_grads) return HR_OK;
    if (hook && hook->ready) hook->ready(hook->ctx, n);
    const float *staged = model_cuda_host_grads(mc);
    for (int i = model_cuda_grad_chunks(mc) - 1; i >= 0; i--) {
        HR_CHECK(model_cuda_grad_chunk_wait(mc, i));
        long lo = (long)i * mc->chunk_floats,
             hi = lo + mc->chunk_floats < n ? lo + mc->chunk_floats : n;
        memcpy(d->m->grads + lo, staged + lo, sizeof(float) * (size_t)(hi - lo));
        if (hook && hook->ready) hook->ready(hook->ctx, lo);
    }
    return HR_OK;
}

static hr_status cu_eval(device *d, const float *x, const int32_t *labels, const float *targets,
                         long b, model_stats *st) {
    return model_cuda_forward(d->impl, x, labels, targets, b, st);
}

static hr_status cu_step(device *d, const opt_scalars *s) {
    model_cuda *mc = d->impl;
    if (!d->keep_grads) HR_CHECK(model_cuda_grads_from_host(mc, d->m->grads));
    return model_cuda_sgd_step(mc, s->lr, s->mu, s->wd, s->inv_b);
}

static hr_status cu_pull(device *d) {
    HR_CHECK(model_cuda_params_to_host(d->impl, d->m->params));
    return model_cuda_vel_to_host(d->impl, d->o->vel);
}

static hr_status cu_push(device *d) {
    HR_CHECK(model_cuda_params_from_host(d->impl, d->m->params));
    return model_cuda_vel_from_host(d->impl, d->o->vel);
}

static hr_status cu_keep_grads(device *d, int on) {
    model_cuda_set_download(d->impl, !on);
    d->keep_grads = on;
    return HR_OK;
}

static float *cu_grads(device *d) {
    return ((model_cuda *)d->impl)->grads;
}

const device_ops device_cuda_impl = {"cuda",  cu_open, cu_close, cu_pass,       cu_eval,
                                     cu_step, cu_pull, cu_push,  cu_keep_grads, cu_grads};
