/*
 * ctrl.h: the replicated batch-size controller (DESIGN.md "ctrl/", invariants I5 and I6).
 *
 * Every node holds an identical `ctrl` and feeds it the same all-gathered stats, so every node
 * computes the same split without talking to anyone. Everything here is a pure function of
 * (config, stats fed so far): no clocks, no randomness, no node-local state, and the library is
 * built with -ffp-contract=off so that every node rounds alike. It depends on libc and libm.
 *
 * Call convention, once per training iteration `iter` (0, 1, 2, ... strictly increasing):
 *
 *     compute with b[k], all-gather stats[] (t_k, b_k)
 *     ctrl_observe(&c, iter, stats);                    // validates, then smooths the timings
 *     ctrl_decide(&c, iter, epoch_ended, b, &changed);  // b[] for iteration iter + 1
 *     all-gather ctrl_hash(&c, b) and compare (I5)
 *
 * Decisions. The time-based policies (proportional, pid, model) decide at iterations with
 * (iter + 1) % interval == 0, that is after every `interval` observed iterations; epoch
 * decides only when the caller says the epoch ended (epoch_ended != 0) and ignores interval;
 * static never changes. At other iterations ctrl_decide returns the current split unchanged.
 *
 * What a decision does (proportional, pid, model, epoch):
 *   1. Smoothed timings. Each node's time at its current batch is an EWMA (weight `smoothing`
 *      on the newest sample) restarted whenever that node's batch changes, as in Tyagi & Sharma.
 *      A sample enters the EWMA as the median of itself and the node's two previous samples at
 *      the same batch, so a lone spike is ignored.
 *   2. A balanced target b* with sum B inside [min_batch, max_batch]: equal finish times under
 *      each node's time model (proportional: t = b / X_k; model: t = alpha_k + beta_k b).
 *   3. Dead-band: nothing changes unless some node's |b*_k - b_k| > max(deadband, noise_k) *
 *      b_k, where noise_k is two standard errors of the target's move as the nodes' measured
 *      timing noise implies it (ctrl.c, "Dead-band on the target").
 *   4. The step b + gain * (b* - b) (model: also times a per-node factor halved whenever the
 *      node's direction reverses; pid: its own output), limited to a relative change of
 *      rate_limit per node (at least one sample), and projected back onto sum = B and bounds.
 *   5. Integer apportionment by largest remainder, ties to the lower node index (I6 exact).
 */
#ifndef HR_CTRL_H
#define HR_CTRL_H

#include "base/hr_status.h"

#include <stdint.h>

/* Same order as cfg_policy in conf/cfg.h. */
typedef enum { CTRL_STATIC, CTRL_PROPORTIONAL, CTRL_PID, CTRL_MODEL, CTRL_EPOCH } ctrl_policy;

/* Mirrors the [controller] section of the config; the trainer copies cfg -> ctrl_config. */
typedef struct {
    ctrl_policy policy;
    long interval;     /* iterations between decisions, >= 1 (not used by epoch and static) */
    double deadband;   /* relative change below which batches stay put, [0, 1] */
    double gain;       /* fraction of the way to the balanced target per decision, (0, 2] */
    double ki;         /* pid: integral gain, >= 0 */
    double kd;         /* pid: derivative gain, >= 0 */
    long min_batch;    /* lower bound per node, >= 1 */
    long max_batch;    /* upper bound per node; 0 means B */
    double smoothing;  /* EWMA weight of the newest timing sample, (0, 1] */
    double rate_limit; /* largest relative change of one node's batch per decision, > 0 */
    double forgetting; /* model: weight kept by older samples per new sample, (0, 1] */
} ctrl_config;

/* One node's stats for one iteration, as all-gathered. */
typedef struct {
    double t; /* compute seconds for this node's last batch, finite, in [CTRL_T_MIN, CTRL_T_MAX] */
    long b;   /* that batch size; must equal the controller's current b[k] */
} ctrl_stat;

#define CTRL_T_MIN 1e-12 /* smallest accepted compute time, s */
#define CTRL_T_MAX 1e9   /* largest accepted compute time, s */

/* Replicated controller state. Caller-owned; every per-node array has n entries and lives in
 * one of two heap blocks (`dbl`, `lng`), so a copy is two memcpys (ctrl_copy). A decision
 * works in scratch allocated once by ctrl_init, so it never allocates. */
typedef struct ctrl {
    ctrl_config cfg; /* validated copy of the config */
    int n;           /* nodes */
    long B;          /* global batch, the sum of b */
    long lo, hi;     /* per-node bounds: min_batch, max_batch (0 resolved to B) */
    long last_iter;  /* last observed iteration, -1 before the first */
    long window;     /* observations since the last decision (epoch: since the epoch ended) */
    long decisions;  /* decisions evaluated so far */
    long changes;    /* decisions that changed the split */
    /* per node, in `lng` */
    long *b;         /* (n) current split */
    long *nsamp;     /* (n) samples at the current batch since it last changed */
    long *grow_from; /* (n) batch before the last growth, 0 when no growth awaits review */
    long *cap;       /* (n) adaptive b_max (Tyagi & Sharma), 0 when none */
    long *cap_until; /* (n) decision count at which the cap expires */
    long *dir;       /* (n) direction of the last change: -1, 0 or +1 (model step-halving) */
    long *nrd;       /* (n) sample differences folded into rd so far */
    /* per node, in `dbl` */
    double *ts;     /* (n) EWMA of compute time at the current batch, s */
    double *h1;     /* (n) previous raw sample at the current batch, s */
    double *h2;     /* (n) the one before, s */
    double *grow_x; /* (n) throughput b/t before the last growth, samples/s */
    double *ep_t;   /* (n) epoch: compute seconds summed since the last epoch end */
    double *ep_b;   /* (n) epoch: samples summed since the last epoch end */
    double *integ;  /* (n) pid: leaky integral of the dead-banded relative error */
    double *eprev;  /* (n) pid: relative error at the previous decision */
    double *step;   /* (n) model: step factor in (0, 1], halved on reversal */
    double *w;      /* (n) model: sum of sample weights */
    double *w2;     /* (n) model: sum of squared sample weights */
    double *mb;     /* (n) model: weighted mean batch */
    double *mt;     /* (n) model: weighted mean time, s */
    double *cbb;    /* (n) model: weighted sum of (b - mb)^2 */
    double *cbt;    /* (n) model: weighted sum of (b - mb)(t - mt) */
    double *ctt;    /* (n) model: weighted sum of (t - mt)^2 */
    double *rd;     /* (n) EWMA of |t_i - t_(i-1)| / t_(i-1) at the same batch (timing noise) */
    double *tw2;    /* (n) sum of the squared EWMA weights behind ts (its variance factor) */
    double *grow_v; /* (n) relative variance of grow_x when it was taken */
    double *dbl;    /* owned block behind the double arrays */
    long *lng;      /* owned block behind the long arrays */
    struct ctrl_scratch *scr; /* owned work space of ctrl_init and ctrl_decide (ctrl.c), not
                               * state: neither hashed nor copied */
} ctrl;

/* Validate cfg, n >= 1 and B (n * min_batch <= B <= n * max_batch), and write the first split
 * into b_out (n entries): proportional to capacity (n positive finite hints; NULL, or the
 * static policy, means equal), within bounds, summing to B. On failure *c is safe to free. */
hr_status ctrl_init(ctrl *c, const ctrl_config *cfg, int n, long B, const double *capacity,
                    long *b_out);

/* Replace the current split, e.g. with the one a resumed checkpoint recorded. b must sum to B
 * and respect the bounds (else HR_ERR_INVAL, state unchanged). Smoothed timings restart for
 * every node whose batch changes. */
hr_status ctrl_set_split(ctrl *c, const long *b);

/* Feed iteration iter's all-gathered stats (n entries). Rejects with HR_ERR_INVAL, leaving the
 * state unchanged: iter not after the last observed one, t zero, negative, NaN, infinite or
 * outside [CTRL_T_MIN, CTRL_T_MAX], or b different from the current split. */
hr_status ctrl_observe(ctrl *c, long iter, const ctrl_stat *stats);

/* Write the split for iteration iter + 1 into b_out (n entries) and set *changed (may be NULL)
 * to 1 when it differs from the current one. Decides per the convention above. A new split is
 * checked against I6 where it is made; should it fail (a bug in ctrl.c, never the input),
 * HR_ERR_INVAL is returned and the current split stays in b_out and in the state. */
hr_status ctrl_decide(ctrl *c, long iter, int epoch_ended, long *b_out, int *changed);

/* FNV-1a hash of the config, the whole replicated state and the split b (n entries; NULL
 * hashes the current split). Equal states give equal hashes on every node. */
uint64_t ctrl_hash(const ctrl *c, const long *b);

/* Deep copy src into dst (dst uninitialised or freed). */
hr_status ctrl_copy(ctrl *dst, const ctrl *src);

/* Release the state; safe on a zeroed or partly initialised struct, and twice. */
void ctrl_free(ctrl *c);

/* Name of a policy ("static", "proportional", ...). */
const char *ctrl_policy_name(ctrl_policy p);

#endif
