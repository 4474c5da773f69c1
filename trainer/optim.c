/*
 * optim.c: SGD with momentum and weight decay (see optim.h).
 */
#include "trainer/optim.h"
#include "base/hr_detmath.h"
#include "trainer/ew.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

hr_status opt_init(opt_sgd *o, const opt_config *c, long n_params, long total, char *err,
                   size_t errlen) {
    memset(o, 0, sizeof *o);
    o->lr = c->lr, o->schedule = c->schedule, o->step = c->step > 0 ? c->step : 1;
    o->gamma = c->gamma, o->warmup = c->warmup, o->total = total;
    o->momentum = c->momentum, o->weight_decay = c->weight_decay;
    o->n = n_params;
    o->vel = calloc((size_t)n_params + 1, sizeof *o->vel);
    if (!o->vel) return hr_fail(err, errlen, HR_ERR_NOMEM, "optimizer: out of memory");
    return HR_OK;
}

void opt_free(opt_sgd *o) {
    if (!o) return;
    free(o->vel);
    o->vel = NULL;
}

double opt_lr(const opt_sgd *o, long iter) {
    if (iter < o->warmup) return o->lr * (double)(iter + 1) / (double)o->warmup;
    long t = iter - o->warmup;
    switch (o->schedule) {
    case OPT_LR_STEP:
        return o->lr * hr_det_powi(o->gamma, t / o->step);
    case OPT_LR_COSINE: {
        long span = o->total - o->warmup;
        if (span <= 0) return o->lr;
        double f = (double)(t < span ? t : span) / (double)span;
        return 0.5 * o->lr * (1.0 + hr_det_cospi(f));
    }
    default:
        return o->lr;
    }
}

/* One thread's part of a step: parameters [lo, hi). */
typedef struct {
    float *v, *p;
    const float *g;
    float lr, mu, wd, inv_b;
    long lo, hi;
} opt_part;

static void step_part(const opt_part *a) {
    float *restrict v = a->v;
    float *restrict p = a->p;
    const float *restrict g = a->g;
    const float lr = a->lr, mu = a->mu, wd = a->wd, inv_b = a->inv_b;
    for (long i = a->lo; i < a->hi; i++) ew_sgd(&p[i], &v[i], g[i], lr, mu, wd, inv_b);
}

static void *step_main(void *arg) {
    step_part(arg);
    return NULL;
}

/* Below this many parameters starting threads costs more than the update. */
#define OPT_PAR_MIN     (1L << 16)
#define OPT_THREADS_MAX 16

void opt_set_threads(opt_sgd *o, int threads) {
    o->threads = threads < 1 ? 1 : threads > OPT_THREADS_MAX ? OPT_THREADS_MAX : threads;
}

opt_scalars opt_scalars_at(const opt_sgd *o, long B, long iter) {
    opt_scalars s = {(float)opt_lr(o, iter), (float)o->momentum, (float)o->weight_decay,
                     1.0f / (float)B};
    return s;
}

void opt_step(opt_sgd *o, float *params, const float *grad_sums, long B, long iter) {
    opt_scalars s = opt_scalars_at(o, B, iter);
    opt_apply(o, params, grad_sums, &s);
}

void opt_apply(opt_sgd *o, float *params, const float *grad_sums, const opt_scalars *s) {
    opt_part base = {o->vel, params, grad_sums, s->lr, s->mu, s->wd, s->inv_b, 0, o->n};
    int nt = o->threads > 1 && o->n >= OPT_PAR_MIN ? o->threads : 1;
    opt_part part[OPT_THREADS_MAX];
    pthread_t th[OPT_THREADS_MAX];
    int started[OPT_THREADS_MAX] = {0};
    for (int k = 0; k < nt; k++) { /* cut at multiples of 16 floats (64 bytes) */
        part[k] = base;
        part[k].lo = k == 0 ? 0 : ((o->n * k / nt) & ~15L);
        part[k].hi = k == nt - 1 ? o->n : ((o->n * (k + 1) / nt) & ~15L);
    }
    for (int k = 1; k < nt; k++)
        started[k] = pthread_create(&th[k], NULL, step_main, &part[k]) == 0;
    step_part(&part[0]);
    for (int k = 1; k < nt; k++) {
        if (started[k])
            pthread_join(th[k], NULL);
        else
            step_part(&part[k]); /* no thread to be had: this one does that part too */
    }
}
