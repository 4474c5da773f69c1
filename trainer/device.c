/*
 * device.c: opening and closing a device, the CPU implementation (the host model itself), and
 * the check of a cuda:N setting (see device.h).
 */
#include "trainer/device.h"
#ifdef HR_HAVE_CUDA
#include "trainer/cuda/device_cuda.h"
#endif

#include <stdio.h>
#include <string.h>

/* ================================================================ cpu */

static hr_status cpu_open(device *d, char *err, size_t errlen) {
    return HR_OK;
}

static void cpu_close(device *d) {}

static hr_status cpu_pass(device *d, const float *x, const int32_t *labels, const float *targets,
                          long b, model_stats *st, const model_grad_hook *hook) {
    return model_forward_backward_hooked(d->m, x, labels, targets, b, st, hook);
}

static hr_status cpu_eval(device *d, const float *x, const int32_t *labels, const float *targets,
                          long b, model_stats *st) {
    return model_forward(d->m, x, labels, targets, b, st);
}

static hr_status cpu_step(device *d, const opt_scalars *s) {
    opt_apply(d->o, d->m->params, d->m->grads, s);
    return HR_OK;
}

static hr_status cpu_same(device *d) { /* the host copy is the device's */
    return HR_OK;
}

/* The CPU device is the host: never an NCCL member (transport.h). */
static hr_status cpu_keep_grads(device *d, int on) {
    return on ? HR_ERR_UNSUPPORTED : HR_OK;
}

static float *cpu_grads(device *d) {
    return NULL;
}

const device_ops device_cpu_ops = {"cpu",    cpu_open, cpu_close, cpu_pass,       cpu_eval,
                                   cpu_step, cpu_same, cpu_same,  cpu_keep_grads, cpu_grads};

/* ================================================================ cuda */

#ifdef HR_HAVE_CUDA
const device_ops *const device_cuda_ops = &device_cuda_impl;
#else
const device_ops *const device_cuda_ops = NULL;
#endif

hr_status device_cuda_check(int index, char *err, size_t errlen) {
#ifdef HR_HAVE_CUDA
    char why[HR_ERRLEN] = "";
    int n = device_cuda_count(why, sizeof why);
    if (n < 0)
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "the GPU libraries cannot be used: %s (install them or point "
                       "HETRING_CUDA_LIBS at their directory, or use device = cpu)",
                       why);
    if (n == 0)
        return hr_fail(err, errlen, HR_ERR_CONFIG, "this machine has no usable CUDA device (%s)",
                       why);
    if (index < 0 || index >= n) {
        char last[32] = ""; /* " to cuda:N-1", with N the count */
        if (n > 1) snprintf(last, sizeof last, " to cuda:%d", n - 1);
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "cuda:%d is out of range: this machine has %d CUDA device%s (cuda:0%s)",
                       index, n, n == 1 ? "" : "s", last);
    }
    return HR_OK;
#else
    return hr_fail(err, errlen, HR_ERR_CONFIG,
                   "this build has no CUDA (configured without the CUDA Toolkit and NCCL; "
                   "`hetring version` says so): rebuild with -DHETRING_CUDA=ON, or use cpu");
#endif
}

/* ================================================================ open and close */

hr_status device_open(device *d, const device_ops *ops, model *m, opt_sgd *o, int index, char *err,
                      size_t errlen) {
    double delay = d->delay_s; /* the emulation's knob, set before opening */
    memset(d, 0, sizeof *d);
    d->ops = ops, d->m = m, d->o = o, d->index = index, d->delay_s = delay;
    hr_status st = ops->open(d, err, errlen);
    if (st == HR_OK) st = ops->push(d); /* the device starts from the host's params and vel */
    if (st != HR_OK) {
        if (err && errlen && !err[0])
            hr_fail(err, errlen, st, "%s: could not take the model", ops->name);
        ops->close(d);
        d->ops = NULL;
    }
    return st;
}

void device_close(device *d) {
    if (d->ops) d->ops->close(d);
    d->ops = NULL;
}
