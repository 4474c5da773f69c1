/*
 * device.h: where a node's model computes: a table of functions (as NCCL's transports and
 * redis's ConnectionType are) with three implementations:
 *
 *   cpu   the host model itself (model.h, OpenBLAS); every call is synchronous
 *   cuda  the GPU executor (trainer/cuda/model_cuda.h): parameters, momentum and activations
 *         live on the GPU; only in builds with CUDA (device_cuda_available)
 *   emu   a host emulation of a GPU for tests (device_emu.c): separate "device" buffers, copies
 *         and kernels completed asynchronously on a worker thread, and the host copies poisoned
 *         with NaN whenever they stop being current, so a missing synchronisation fails loudly
 *         on machines without a GPU. It computes with the CPU layers, so its replicas are
 *         bitwise the CPU's. Linked only into builds with the test hooks (hr_device_emu).
 *
 * The host side of the model (model.h's params and grads, opt_sgd's vel) is the device's
 * "host copy". Its contract, which every implementation keeps and the emulation enforces:
 *   - after device_pass, grads[0, n_params) on the host hold the pass's gradient sums; each
 *     part is reported through the hook as it lands (ready(ctx, off): grads[off, n_params)
 *     are final; off never grows and ends at 0), so the ring may start on it;
 *   - device_step takes the all-reduced sums from the host grads and steps the parameters on
 *     the device; afterwards the host params and vel are stale until device_pull;
 *   - device_push makes the device take the host params and vel (a state transfer, a
 *     checkpoint resumed), device_pull brings them to the host (the I4 hash, a state to send, a
 *     checkpoint to write).
 * With the gradient kept on the device (device_keep_grads(d, 1): a view whose gradient
 * all-reduce is NCCL's), the pass leaves its sums in the device's gradient (device_grads) and
 * returns once they are computed there, without a download or a hook call (the host grads are
 * stale: the emulation poisons them), and the step takes the device's gradient, all-reduced in
 * place, without an upload. The CPU device has no memory of its own and refuses it.
 * A device is driven by one thread. Every call returns HR_OK or a status with a message.
 */
#ifndef HR_DEVICE_H
#define HR_DEVICE_H

#include "base/hr_status.h"
#include "trainer/model.h"
#include "trainer/optim.h"

#include <stddef.h>

typedef enum { DEVICE_CPU, DEVICE_CUDA, DEVICE_EMU } device_kind;

typedef struct device device;

typedef struct {
    const char *name; /* "cpu", "cuda", "emu" */
    /* Take the host model m (its geometry and current params) and the optimizer o (its vel);
     * allocate everything the device needs (nothing is allocated later). */
    hr_status (*open)(device *d, char *err, size_t errlen);
    void (*close)(device *d); /* safe after a failed open */
    /* Forward, loss and backward over b samples (host x, labels or targets): gradient sums to
     * the host grads as the contract above says. *st is overwritten. */
    hr_status (*pass)(device *d, const float *x, const int32_t *labels, const float *targets,
                      long b, model_stats *st, const model_grad_hook *hook);
    /* Forward and loss only, on the device's parameters; ADDS to *st. */
    hr_status (*eval)(device *d, const float *x, const int32_t *labels, const float *targets,
                      long b, model_stats *st);
    /* The SGD step with scalars s on the all-reduced sums in the host grads. */
    hr_status (*step)(device *d, const opt_scalars *s);
    hr_status (*pull)(device *d); /* device params and vel -> host */
    hr_status (*push)(device *d); /* host params and vel -> device */
    /* Keep the gradient on the device (on = 1) or bring it to the host (0, the default), as
     * the contract above says; HR_ERR_UNSUPPORTED for on = 1 where there is no device memory. */
    hr_status (*keep_grads)(device *d, int on);
    /* The device's gradient: n_params floats of device memory; NULL for the CPU. */
    float *(*grads)(device *d);
} device_ops;

struct device {
    const device_ops *ops; /* the implementation */
    model *m;              /* the host model (borrowed) */
    opt_sgd *o;            /* the optimizer whose vel is the host copy (borrowed) */
    int index;             /* cuda:N's N; emu: 0 */
    double delay_s;        /* emu: seconds each queued operation waits before it runs */
    int keep_grads;        /* the gradient stays on the device (device_keep_grads) */
    void *impl;            /* the implementation's state */
};

/* The implementations. device_cuda_ops is NULL in builds without CUDA; device_emu_ops is
 * defined only where hr_device_emu is linked (builds with the test hooks). */
extern const device_ops device_cpu_ops;
extern const device_ops *const device_cuda_ops;
extern const device_ops device_emu_ops;

/* Whether cuda:index can be used on this machine: HR_OK, or HR_ERR_CONFIG with the reason
 * (this build has no CUDA, no GPU or driver, index out of range). */
hr_status device_cuda_check(int index, char *err, size_t errlen);

/* Open ops on m and o (index: cuda:N's N). */
hr_status device_open(device *d, const device_ops *ops, model *m, opt_sgd *o, int index, char *err,
                      size_t errlen);
void device_close(device *d);

static inline hr_status device_pass(device *d, const float *x, const int32_t *labels,
                                    const float *targets, long b, model_stats *st,
                                    const model_grad_hook *hook) {
    return d->ops->pass(d, x, labels, targets, b, st, hook);
}
static inline hr_status device_eval(device *d, const float *x, const int32_t *labels,
                                    const float *targets, long b, model_stats *st) {
    return d->ops->eval(d, x, labels, targets, b, st);
}
static inline hr_status device_step(device *d, const opt_scalars *s) {
    return d->ops->step(d, s);
}
static inline hr_status device_pull(device *d) {
    return d->ops->pull(d);
}
static inline hr_status device_push(device *d) {
    return d->ops->push(d);
}
static inline hr_status device_keep_grads(device *d, int on) {
    return d->ops->keep_grads(d, on);
}
static inline float *device_grads(device *d) {
    return d->ops->grads(d);
}

#endif
