/*
 * optim.c: SGD with momentum and weight decay (see optim.h).
 */
#include "optim.h"

#include <math.h>
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
        return o->lr * pow(o->gamma, (double)(t / o->step));
    case OPT_LR_COSINE: {
        long span = o->total - o->warmup;
        if (span <= 0) return o->lr;
        double f = (double)(t < span ? t : span) / (double)span;
        return 0.5 * o->lr * (1.0 + cos(3.14159265358979323846 * f));
    }
    default:
        return o->lr;
    }
}

void opt_step(opt_sgd *o, float *params, const float *grad_sums, long B, long iter) {
    const float lr = (float)opt_lr(o, iter), mu = (float)o->momentum;
    const float wd = (float)o->weight_decay, inv_b = 1.0f / (float)B;
    float *restrict v = o->vel;
    float *restrict p = params;
    const float *restrict g = grad_sums;
    for (long i = 0; i < o->n; i++) {
        float gi = g[i] * inv_b + wd * p[i];
        v[i] = mu * v[i] + gi;
        p[i] -= lr * v[i];
    }
}
