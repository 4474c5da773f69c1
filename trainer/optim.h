/*
 * optim.h: SGD with momentum and weight decay, and the learning-rate schedules.
 *
 * The step takes gradient SUMS over the global batch and divides by B itself (DESIGN.md I2):
 *     g = grad_sum / B + weight_decay * p
 *     v = momentum * v + g
 *     p = p - lr(iter) * v
 * (PyTorch's SGD convention). The update is elementwise and in a fixed order, so replicas
 * that start equal and see the same gradient bytes stay bitwise equal (I4). B is fixed, so
 * the learning rate never depends on how the batch was split.
 */
#ifndef HR_OPTIM_H
#define HR_OPTIM_H

#include "base/hr_status.h"

typedef enum { OPT_LR_CONSTANT, OPT_LR_STEP, OPT_LR_COSINE } opt_schedule;

/* The optimizer's settings ([train] lr ... weight_decay of the config). */
typedef struct {
    double lr;             /* base learning rate */
    opt_schedule schedule; /* learning-rate schedule after the warm-up */
    long step;             /* step schedule: iterations between decays (<= 0 means 1) */
    double gamma;          /* step schedule: decay factor */
    long warmup;           /* linear warm-up iterations */
    double momentum;       /* SGD momentum */
    double weight_decay;   /* L2 weight decay */
} opt_config;

typedef struct {
    double lr;             /* base learning rate */
    opt_schedule schedule; /* learning-rate schedule after the warm-up */
    long step;             /* step schedule: iterations between decays */
    double gamma;          /* step schedule: decay factor */
    long warmup;           /* linear warm-up iterations */
    long total;            /* total iterations (cosine schedule) */
    double momentum;       /* SGD momentum */
    double weight_decay;   /* L2 weight decay */
    long n;                /* parameters */
    float *vel;            /* (n) momentum buffer: the whole optimizer state */
    int threads;           /* threads a step may use (opt_set_threads; 0 or 1: the caller's) */
} opt_sgd;

/* Settings from oc; `total` is the run's iteration count (cosine schedule). */
hr_status opt_init(opt_sgd *o, const opt_config *oc, long n_params, long total, char *err,
                   size_t errlen);
void opt_free(opt_sgd *o);

/* Learning rate at iteration `iter` (0-based): warm-up ramps linearly from lr/warmup to lr
 * over the first `warmup` iterations, then the schedule applies to iter - warmup. */
double opt_lr(const opt_sgd *o, long iter);

/* The scalars of one step, as floats, computed once: every device's step takes these. */
typedef struct {
    float lr;    /* opt_lr at the iteration */
    float mu;    /* momentum */
    float wd;    /* weight decay */
    float inv_b; /* 1 / B */
} opt_scalars;

/* The scalars of the step of iteration `iter` with global batch B. */
opt_scalars opt_scalars_at(const opt_sgd *o, long B, long iter);

/* The step with the scalars s (ew_sgd on every parameter, over o->threads threads). */
void opt_apply(opt_sgd *o, float *params, const float *grad_sums, const opt_scalars *s);

/* One step on params (n) with grad_sums (n) summed over B samples. Each parameter's update is
 * the same arithmetic whichever thread does it, so the result is bitwise the same for any
 * thread count (and matches the device step, trainer/cuda). */
void opt_step(opt_sgd *o, float *params, const float *grad_sums, long B, long iter);
/* Let opt_step spread large models over `threads` threads (the node's compute threads): at 4
 * threads the update was a fifth of an MLP step once the GEMMs ran on all four. */
void opt_set_threads(opt_sgd *o, int threads);

#endif
