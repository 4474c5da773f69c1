/*
 * device_emu.c: a GPU emulated on the host, for tests on machines without one (device.h).
 *
 * It behaves as the CUDA executor does where a caller can get it wrong:
 *  - its "device" buffers (a model of its own: params, grads, activations; the momentum) are
 *    apart from the host's, and only copies move bytes between them;
 *  - copies and kernels are queued and completed in order by a worker thread, each after
 *    `delay_s` seconds (the knob), so a caller that reads a host buffer before the copy into it
 *    completed, or writes one before the copy out of it did, reads or sends other bytes;
 *  - the host copies are poisoned with NaN whenever they stop being current: the gradient when
 *    a pass begins (until its chunks land), the parameters and momentum when a step is queued
 *    (until a pull); with the gradient kept on the device (an NCCL view) the host gradient stays
 *    poisoned, so a path that still reads it fails. A missing synchronisation therefore gives NaN
 * in a loss, a hash or a checkpoint, and a test fails loudly instead of passing by luck. Kernels
 * are the CPU layers (model_forward_backward, opt_apply), so a replica on the emulated device stays
 * bitwise equal to a CPU replica that applies the same sums (I4).
 *
 * Built only into hr_device_emu, which only builds with the test hooks link.
 */
#include "base/hr_time.h"
#include "base/hr_worker.h"
#include "trainer/device.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define EMU_JOBS   64 /* queued operations at most */
#define EMU_CHUNKS 4  /* the gradient comes back in this many chunks, the last one first */

typedef enum { JOB_COPY, JOB_POISON, JOB_PASS, JOB_EVAL, JOB_STEP } job_kind;

typedef struct {
    job_kind kind;
    void *dst;       /* COPY, POISON */
    const void *src; /* COPY */
    size_t bytes;    /* COPY, POISON */
    long b;          /* PASS, EVAL: samples */
    int has_labels;  /* PASS, EVAL: labels (else targets) */
    opt_scalars s;   /* STEP */
} job;

typedef struct {
    model dm;         /* the device's model: its params, grads and activations */
    opt_sgd dopt;     /* the optimizer as the device runs it: vel = the device's momentum */
    float *dvel;      /* (n_params) device momentum */
    float *dx;        /* (max_batch, in_size) device input */
    int32_t *dlabels; /* (max_batch) */
    float *dtargets;  /* (max_batch, out_size) */
    model_stats st;   /* the last PASS's stats, EVAL's sums */
    int running;      /* the worker was started */
    hr_worker t;      /* the worker; t.mu guards t.quit and every field below */
    job q[EMU_JOBS];  /* ring of queued jobs */
    long queued;      /* jobs queued so far (sequence numbers 1..queued) */
    long completed;   /* jobs completed so far */
    hr_status err;    /* the first failed kernel */
    double delay_s;   /* seconds each job waits before it runs */
} emu;

static void poison(float *p, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = NAN;
}

static hr_status run_job(emu *e, const job *j) {
    switch (j->kind) {
    case JOB_COPY:
        memcpy(j->dst, j->src, j->bytes);
        return HR_OK;
    case JOB_POISON:
        poison(j->dst, j->bytes / sizeof(float));
        return HR_OK;
    case JOB_PASS:
        return model_forward_backward(&e->dm, e->dx, j->has_labels ? e->dlabels : NULL,
                                      j->has_labels ? NULL : e->dtargets, j->b, &e->st);
    case JOB_EVAL:
        return model_forward(&e->dm, e->dx, j->has_labels ? e->dlabels : NULL,
                             j->has_labels ? NULL : e->dtargets, j->b, &e->st);
    case JOB_STEP:
        opt_apply(&e->dopt, e->dm.params, e->dm.grads, &j->s);
        return HR_OK;
    }
    return HR_ERR_INVAL;
}

static void *worker(void *arg) {
    emu *e = arg;
    pthread_mutex_lock(&e->t.mu);
    for (;;) {
        while (!e->t.quit && e->completed == e->queued) pthread_cond_wait(&e->t.wake, &e->t.mu);
        if (e->completed == e->queued) break; /* quit, and nothing left */
        job j = e->q[e->completed % EMU_JOBS];
        double delay = e->delay_s;
        pthread_mutex_unlock(&e->t.mu);
        hr_sleep(delay);
        hr_status st = run_job(e, &j);
        pthread_mutex_lock(&e->t.mu);
        if (st != HR_OK && e->err == HR_OK) e->err = st;
        e->completed++;
        pthread_cond_broadcast(&e->t.done);
    }
    pthread_mutex_unlock(&e->t.mu);
    return NULL;
}

/* Queue j; returns its sequence number, which emu_wait waits for. */
static long enqueue(emu *e, job j) {
    pthread_mutex_lock(&e->t.mu);
    while (e->queued - e->completed >= EMU_JOBS) pthread_cond_wait(&e->t.done, &e->t.mu);
    e->q[e->queued % EMU_JOBS] = j;
    long seq = ++e->queued;
    pthread_cond_signal(&e->t.wake);
    pthread_mutex_unlock(&e->t.mu);
    return seq;
}

static long copy(emu *e, void *dst, const void *src, size_t bytes) {
    job j = {.kind = JOB_COPY, .dst = dst, .src = src, .bytes = bytes};
    return enqueue(e, j);
}

/* Wait until job `seq` completed; the first kernel failure so far, if any. */
static hr_status emu_wait(emu *e, long seq) {
    pthread_mutex_lock(&e->t.mu);
    while (e->completed < seq) pthread_cond_wait(&e->t.done, &e->t.mu);
    hr_status st = e->err;
    pthread_mutex_unlock(&e->t.mu);
    return st;
}

/* Queue the batch's copies into the device input. */
static void stage_input(emu *e, const model *m, const float *x, const int32_t *labels,
                        const float *targets, long b) {
    copy(e, e->dx, x, sizeof *x * (size_t)(b * m->in_size));
    if (labels) copy(e, e->dlabels, labels, sizeof *labels * (size_t)b);
    if (targets) copy(e, e->dtargets, targets, sizeof *targets * (size_t)(b * m->out_size));
}

/* ================================================================ the table */

static void emu_close(device *d) {
    emu *e = d->impl;
    if (!e) return;
    if (e->running) hr_worker_stop(&e->t);
    model_free(&e->dm);
    free(e->dvel), free(e->dx), free(e->dlabels), free(e->dtargets);
    free(e);
    d->impl = NULL;
}

static hr_status emu_open(device *d, char *err, size_t errlen) {
    const model *m = d->m;
    emu *e = calloc(1, sizeof *e);
    if (!e) return hr_fail(err, errlen, HR_ERR_NOMEM, "emu: out of memory");
    d->impl = e;
    hr_status st = model_init(&e->dm, &m->spec, m->max_batch, 0, err, errlen);
    if (st != HR_OK) return st;
    e->dvel = calloc((size_t)m->n_params + 1, sizeof *e->dvel);
    e->dx = malloc(sizeof *e->dx * (size_t)(m->max_batch * m->in_size));
    e->dlabels = malloc(sizeof *e->dlabels * (size_t)m->max_batch);
    e->dtargets = malloc(sizeof *e->dtargets * (size_t)(m->max_batch * m->out_size));
    if (!e->dvel || !e->dx || !e->dlabels || !e->dtargets)
        return hr_fail(err, errlen, HR_ERR_NOMEM, "emu: out of memory");
    e->dopt = *d->o;
    e->dopt.vel = e->dvel;
    e->delay_s = d->delay_s;
    if (hr_worker_start(&e->t, worker, e) != HR_OK)
        return hr_fail(err, errlen, HR_ERR_NOMEM, "emu: could not start the worker thread");
    e->running = 1;
    return HR_OK;
}

static hr_status emu_pass(device *d, const float *x, const int32_t *labels, const float *targets,
                          long b, model_stats *st, const model_grad_hook *hook) {
    emu *e = d->impl;
    model *m = d->m;
    long n = m->n_params;
    if (b > m->max_batch) return HR_ERR_INVAL;
    job pz = {.kind = JOB_POISON, .dst = m->grads, .bytes = sizeof(float) * (size_t)n};
    enqueue(e, pz); /* the host gradient is stale until its chunks land */
    stage_input(e, m, x, labels, targets, b);
    job pass = {.kind = JOB_PASS, .b = b, .has_labels = labels != NULL};
    long pass_seq = enqueue(e, pass);
    if (d->keep_grads) { /* the sums stay in the device's gradient; the worker is idle after */
        hr_status r = emu_wait(e, pass_seq);
        *st = e->st;
        return r;
    }
    long lo[EMU_CHUNKS + 1], seq[EMU_CHUNKS];
    for (int c = 0; c <= EMU_CHUNKS; c++) lo[c] = n * c / EMU_CHUNKS;
    for (int c = EMU_CHUNKS - 1; c >= 0; c--) /* the last layers' chunk first, as backward */
        seq[c] = copy(e, m->grads + lo[c], e->dm.grads + lo[c],
                      sizeof(float) * (size_t)(lo[c + 1] - lo[c]));
    hr_status r = HR_OK;
    if (hook && hook->ready) {
        r = emu_wait(e, pass_seq); /* backward is done on the device */
        if (r == HR_OK) hook->ready(hook->ctx, n);
    }
    for (int c = EMU_CHUNKS - 1; c >= 0 && r == HR_OK; c--) {
        r = emu_wait(e, seq[c]);
        if (r == HR_OK && hook && hook->ready && lo[c] < lo[c + 1]) hook->ready(hook->ctx, lo[c]);
    }
    if (r == HR_OK && hook && hook->ready && n == 0) hook->ready(hook->ctx, 0);
    *st = e->st;
    return r;
}

static hr_status emu_eval(device *d, const float *x, const int32_t *labels, const float *targets,
                          long b, model_stats *st) {
    emu *e = d->impl;
    if (b > d->m->max_batch) return HR_ERR_INVAL;
    stage_input(e, d->m, x, labels, targets, b);
    memset(&e->st, 0, sizeof e->st); /* no pass or evaluation is in flight to write it */
    job j = {.kind = JOB_EVAL, .b = b, .has_labels = labels != NULL};
    hr_status r = emu_wait(e, enqueue(e, j));
    st->loss_sum += e->st.loss_sum;
    st->correct += e->st.correct;
    return r;
}

static hr_status emu_step(device *d, const opt_scalars *s) {
    emu *e = d->impl;
    model *m = d->m;
    size_t bytes = sizeof(float) * (size_t)m->n_params;
    /* the all-reduced sums: as cudaMemcpy from pageable memory, the call returns once the copy
     * has read them (the host may then reuse its gradient buffer); the step itself is queued.
     * Kept on the device, they were all-reduced in place there: no copy */
    hr_status st = d->keep_grads ? HR_OK : emu_wait(e, copy(e, e->dm.grads, m->grads, bytes));
    job j = {.kind = JOB_STEP, .s = *s};
    enqueue(e, j);
    /* the host parameters and momentum are stale from now on, until a pull */
    poison(m->params, (size_t)m->n_params);
    poison(d->o->vel, (size_t)m->n_params);
    return st;
}

static hr_status emu_pull(device *d) {
    emu *e = d->impl;
    size_t bytes = sizeof(float) * (size_t)d->m->n_params;
    copy(e, d->m->params, e->dm.params, bytes);
    return emu_wait(e, copy(e, d->o->vel, e->dvel, bytes));
}

static hr_status emu_push(device *d) {
    emu *e = d->impl;
    size_t bytes = sizeof(float) * (size_t)d->m->n_params;
    copy(e, e->dm.params, d->m->params, bytes);
    return emu_wait(e, copy(e, e->dvel, d->o->vel, bytes));
}

static hr_status emu_keep_grads(device *d, int on) {
    d->keep_grads = on;
    return HR_OK;
}

static float *emu_grads(device *d) {
    emu *e = d->impl;
    return e->dm.grads;
}

const device_ops device_emu_ops = {"emu",    emu_open, emu_close, emu_pass,       emu_eval,
                                   emu_step, emu_pull, emu_push,  emu_keep_grads, emu_grads};
