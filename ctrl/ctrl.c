/*
 * ctrl.c: the replicated batch-size controllers (static, proportional, pid, model, epoch).
 *
 * Invariants kept here:
 *   I5  every output is a pure function of (config, stats fed so far). No clocks, no
 *       randomness, no node-local state; the library is built with -ffp-contract=off, loops run
 *       in node order, and every tie is broken by node index, so replicas agree bit for bit.
 *   I6  every split this file writes sums to B exactly, with min_batch <= b_k <= max_batch.
 *       Real-valued targets are projected onto {sum = B, bounds} exactly (piecewise-linear
 *       solve, no iteration count to tune) and then rounded by largest remainder.
 *
 * The decision pipeline and the call convention are described in ctrl.h. Here a policy is one
 * row of `policies` (section "policies"): when it is due, its target b*, the variance of the
 * timing that target rests on, its step toward b*, and what a move commits. ctrl_decide runs
 * the shared stages around those (adaptive caps, bounds, dead-band, rate limit, projection,
 * apportionment, the I6 check) in a ctrl_scratch allocated once, so a decision never
 * allocates. Policy notes:
 *   proportional  Tyagi & Sharma: X_k = b_k / t_k, b*_k = B X_k / sum X. Adaptive b_max: if a
 *                 node's throughput fell by more than max(deadband, 5%, CTRL_CAP_Z standard
 *                 errors of its timings) after its batch grew by more than max(deadband,
 *                 5%), its b_max becomes the old batch for CTRL_CAP_DECISIONS decisions (the
 *                 paper keeps it for good; a shared machine's speed changes, so here it
 *                 expires). Also used by pid.
 *   pid           relative error e_k = b*_k / b_k - 1 (zero-sum against b); output
 *                 b_k (1 + gain e_k + ki I_k + kd (e_k - e_prev_k)). I_k is leaky
 *                 (CTRL_PID_LEAK per decision) and integrates only errors beyond the
 *                 dead-band, so noise inside the dead-band cannot wind it up. Anti-windup:
 *                 no integration while the node sits on a bound it is pushing against,
 *                 |ki I_k| <= CTRL_PID_IMAX, and I_k restarts when e_k changes sign (after
 *                 a step the smoothed timings lag, and without the reset the integral
 *                 carries the lag into an overshoot).
 *   model         LB-BSP: per node, exponentially forgotten least squares (RLS with forgetting,
 *                 kept as weighted means and co-moments, which cannot wind up when b stays
 *                 put) fits t = alpha + beta b. The fit is used once it has two distinct b,
 *                 at least CTRL_FIT_NEFF effective samples, beta > 0 and a slope standard
 *                 error below CTRL_FIT_SE of beta; otherwise the node falls back to the
 *                 proportional model alpha = 0. beta is clamped to [CTRL_BETA_MIN t/b, t/b]
 *                 (alpha >= 0) and alpha re-anchored at the node's current smoothed time.
 *                 The common finish time T solves sum clamp((T - alpha_k) / beta_k) = B.
 *                 A node's step factor halves when its direction reverses, doubles back
 *                 (up to 1) when it repeats, and returns to 1 when its time jumps at an
 *                 unchanged batch by more than CTRL_JUMP_Z noise deviations (a speed change).
 *   epoch         DBS: at each epoch end, b*_k proportional to samples / compute seconds over
 *                 that epoch.
 */
#include "ctrl/ctrl.h"
#include "base/hr_detmath.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CTRL_CAP_DECISIONS 32     /* decisions an adaptive b_max lasts */
#define CTRL_CAP_DROP      0.05   /* least throughput drop (and growth) that sets a cap */
#define CTRL_PID_LEAK      0.5    /* pid: integral kept per decision */
#define CTRL_PID_IMAX      0.5    /* pid: largest |ki * I| (relative change) */
#define CTRL_STEP_MIN      0.0625 /* model: smallest step factor */
#define CTRL_FIT_NEFF      3.0    /* model: least effective samples for a fit */
#define CTRL_FIT_SE        0.25   /* model: largest slope standard error relative to slope */
#define CTRL_BETA_MIN      0.05   /* model: beta >= this * t/b, i.e. alpha <= 95% of t */
#define CTRL_D_MIN         1e-200 /* smallest normalised speed, keeps ratios finite */
#define CTRL_NOISE_Z       2.0 /* dead-band: least target move in standard errors of the timings */
#define CTRL_NOISE_SMOOTH  0.1 /* EWMA weight of a new sample difference in the noise estimate */
#define CTRL_NOISE_DMAX    0.5 /* largest relative difference one pair of samples contributes */
#define CTRL_MAD_SIGMA     0.886226925452758 /* sqrt(pi) / 2: sd from E|t_i - t_(i-1)| */
#define CTRL_CAP_Z         3.0 /* a drop that sets a cap: least size in standard errors */
#define CTRL_JUMP_Z        4.0 /* model: a speed change, in standard deviations of a sample */
#define CTRL_JUMP_MIN      0.22314355131420976 /* model: and at least ln 1.25 */

enum { ND = 19, NL = 7 }; /* double and long arrays per node */

/* Work space of one decision (and of ctrl_init), allocated once per controller so that a
 * decision never allocates. Not state: nothing in it outlives the call that fills it. The
 * arrays live in `mem`, right behind the struct (scratch_new). */
typedef struct ctrl_scratch {
    long seen;     /* observations behind this decision (epoch: the whole epoch) */
    double *lo;    /* (n) lower bound of the target, samples (min_batch) */
    double *hi;    /* (n) upper bound of the target, samples (hil) */
    double *c0;    /* (n) target line b*_k = c0_k + d_k lam: offset, samples */
    double *d;     /* (n) its slope: normalised speed (model: samples per unit of T / tref) */
    double *bstar; /* (n) the target b*, samples */
    double *e;     /* (n) pid: relative error b*_k / b_k - 1 */
    double *inew;  /* (n) pid: the new integral, committed with the decision */
    double *sf;    /* (n) model: tentative step factors, committed when the split changes */
    double *y;     /* (n) the stepped split before the rate limit (pid: its raw output) */
    double *rl;    /* (n) rate-limited lower bound, samples (rlo as doubles) */
    double *rh;    /* (n) rate-limited upper bound, samples (rhi as doubles) */
    double *q;     /* (n) real-valued next split, sum B */
    double *zero;  /* (n) project_scale: zero offsets */
    double *dd;    /* (n) project_scale: normalised slopes */
    double *bp;    /* (2n) projection breakpoints */
    long *hil;     /* (n) upper bound per node after adaptive caps */
    long *rlo;     /* (n) rate-limited lower bound (init: min_batch) */
    long *rhi;     /* (n) rate-limited upper bound (init: max_batch) */
    long *bn;      /* (n) the next split, sum B */
    double mem[];  /* SD doubles per node, then SL longs per node */
} ctrl_scratch;

enum { SD = 16, SL = 4 }; /* scratch doubles (bp counts twice) and longs per node */
_Static_assert(_Alignof(long) <= _Alignof(double), "scratch longs follow its doubles");

static ctrl_scratch *scratch_new(long n) {
    ctrl_scratch *s = malloc(sizeof *s + (size_t)n * (SD * sizeof(double) + SL * sizeof(long)));
    if (!s) return NULL;
    double *d = s->mem;
    double **dp[SD - 1] = {&s->lo, &s->hi, &s->c0, &s->d, &s->bstar, &s->e,  &s->inew, &s->sf,
                           &s->y,  &s->rl, &s->rh, &s->q, &s->zero,  &s->dd, &s->bp};
    for (int i = 0; i < SD - 1; i++) *dp[i] = d + i * n; /* bp, last, takes 2n */
    long *l = (long *)(d + SD * n);
    long **lp[SL] = {&s->hil, &s->rlo, &s->rhi, &s->bn};
    for (int i = 0; i < SL; i++) *lp[i] = l + i * n;
    s->seen = 0;
    return s;
}

static void ctrl_bind(ctrl *c) {
    long n = c->n;
    double *d = c->dbl;
    double **dp[ND] = {&c->ts,    &c->h1,   &c->h2, &c->grow_x, &c->ep_t,  &c->ep_b, &c->integ,
                       &c->eprev, &c->step, &c->w,  &c->w2,     &c->mb,    &c->mt,   &c->cbb,
                       &c->cbt,   &c->ctt,  &c->rd, &c->tw2,    &c->grow_v};
    for (int i = 0; i < ND; i++) *dp[i] = d + i * n;
    long *l = c->lng;
    long **lp[NL] = {&c->b, &c->nsamp, &c->grow_from, &c->cap, &c->cap_until, &c->dir, &c->nrd};
    for (int i = 0; i < NL; i++) *lp[i] = l + i * n;
}

void ctrl_free(ctrl *c) {
    if (!c) return;
    free(c->dbl);
    free(c->lng);
    free(c->scr);
    memset(c, 0, sizeof *c);
}

hr_status ctrl_copy(ctrl *dst, const ctrl *src) {
    if (!dst || !src || !src->dbl || !src->lng) return HR_ERR_INVAL;
    memset(dst, 0, sizeof *dst);
    size_t nd = (size_t)src->n * ND, nl = (size_t)src->n * NL;
    double *d = malloc(nd * sizeof *d);
    long *l = malloc(nl * sizeof *l);
    ctrl_scratch *scr = scratch_new(src->n); /* scratch: no state to copy */
    if (!d || !l || !scr) {
        free(d);
        free(l);
        free(scr);
        return HR_ERR_NOMEM;
    }
    *dst = *src;
    memcpy(d, src->dbl, nd * sizeof *d);
    memcpy(l, src->lng, nl * sizeof *l);
    dst->dbl = d;
    dst->lng = l;
    dst->scr = scr;
    ctrl_bind(dst);
    return HR_OK;
}

/* ---------------------------------------------------------------- projection and rounding */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double clampd(double x, double lo, double hi) {
    return x < lo ? lo : (x > hi ? hi : x);
}

static double proj_sum(int n, const double *c0, const double *d, const double *lo, const double *hi,
                       double lam) {
    double s = 0;
    for (int k = 0; k < n; k++) s += clampd(c0[k] + d[k] * lam, lo[k], hi[k]);
    return s;
}

/* out_k = clamp(c0_k + d_k lam, lo_k, hi_k) with lam chosen so that sum out = B; d_k > 0 and
 * sum lo <= B <= sum hi. The sum is piecewise linear and non-decreasing in lam, so sort the 2n
 * breakpoints, binary-search the segment holding B and interpolate in it. bp: 2n scratch. */
static void project(int n, const double *c0, const double *d, const double *lo, const double *hi,
                    double B, double *bp, double *out) {
    for (int k = 0; k < n; k++) {
        bp[2 * k] = (lo[k] - c0[k]) / d[k];
        bp[2 * k + 1] = (hi[k] - c0[k]) / d[k];
    }
    qsort(bp, (size_t)(2 * n), sizeof *bp, cmp_double);
    double lam;
    if (proj_sum(n, c0, d, lo, hi, bp[0]) >= B) {
        lam = bp[0];
    } else if (proj_sum(n, c0, d, lo, hi, bp[2 * n - 1]) <= B) {
        lam = bp[2 * n - 1];
    } else {
        int a = 0, z = 2 * n - 1; /* f(bp[a]) < B < f(bp[z]) */
        while (z - a > 1) {
            int m = a + (z - a) / 2;
            if (proj_sum(n, c0, d, lo, hi, bp[m]) < B)
                a = m;
            else
                z = m;
        }
        double fa = proj_sum(n, c0, d, lo, hi, bp[a]), fz = proj_sum(n, c0, d, lo, hi, bp[z]);
        lam = fz > fa ? bp[a] + (B - fa) / (fz - fa) * (bp[z] - bp[a]) : bp[z];
        lam = clampd(lam, bp[a], bp[z]);
    }
    for (int k = 0; k < n; k++) out[k] = clampd(c0[k] + d[k] * lam, lo[k], hi[k]);
}

/* Round q (sum about B, lo_k <= q_k <= hi_k) to integers summing to B within [lo_k, hi_k]:
 * floors first, then one sample each to the largest remainders (ties: lower index), or away
 * from the smallest (ties: higher index) if the floors overshoot. Needs sum lo <= B <= sum hi. */
static void apportion(int n, const double *q, const long *lo, const long *hi, long B, long *out) {
    long s = 0;
    for (int k = 0; k < n; k++) {
        double f = floor(q[k]);
        long v = f <= (double)lo[k] ? lo[k] : (f >= (double)hi[k] ? hi[k] : (long)f);
        out[k] = v;
        s += v;
    }
    for (; s < B; s++) {
        int best = -1;
        double br = 0;
        for (int k = 0; k < n; k++) {
            if (out[k] >= hi[k]) continue;
            double r = q[k] - (double)out[k];
            if (best < 0 || r > br) best = k, br = r;
        }
        out[best]++;
    }
    for (; s > B; s--) {
        int best = -1;
        double br = 0;
        for (int k = n - 1; k >= 0; k--) {
            if (out[k] <= lo[k]) continue;
            double r = q[k] - (double)out[k];
            if (best < 0 || r < br) best = k, br = r;
        }
        out[best]--;
    }
}

/* I6: b sums to B with min_batch <= b_k <= max_batch. */
static int split_ok(const ctrl *c, const long *b) {
    long sum = 0;
    for (int k = 0; k < c->n; k++) {
        if (b[k] < c->lo || b[k] > c->hi) return 0;
        sum += b[k];
    }
    return sum == c->B;
}

/* Scale-family projection: out proportional to y (y_k > 0) within [lo, hi], sum B. */
static void project_scale(int n, const double *y, const double *lo, const double *hi, double B,
                          double *zero, double *d, double *bp, double *out) {
    double m = 0;
    for (int k = 0; k < n; k++) m = y[k] > m ? y[k] : m;
    for (int k = 0; k < n; k++) {
        zero[k] = 0;
        d[k] = m > 0 ? fmax(y[k] / m, CTRL_D_MIN) : 1;
    }
    project(n, zero, d, lo, hi, B, bp, out);
}

/* ---------------------------------------------------------------- init */

static hr_status check_config(const ctrl_config *g, int n, long B) {
    if (!g || n < 1 || B < 1) return HR_ERR_INVAL;
    if (g->policy < CTRL_STATIC || g->policy > CTRL_EPOCH) return HR_ERR_INVAL;
    if (g->interval < 1 || g->min_batch < 1 || g->max_batch < 0) return HR_ERR_INVAL;
    if (!(g->deadband >= 0 && g->deadband <= 1)) return HR_ERR_INVAL;
    if (!(g->gain > 0 && g->gain <= 2)) return HR_ERR_INVAL;
    if (!(g->ki >= 0 && g->ki <= 1e6) || !(g->kd >= 0 && g->kd <= 1e6)) return HR_ERR_INVAL;
    if (!(g->smoothing > 0 && g->smoothing <= 1)) return HR_ERR_INVAL;
    if (!(g->rate_limit > 0 && g->rate_limit <= 1e6)) return HR_ERR_INVAL;
    if (!(g->forgetting > 0 && g->forgetting <= 1)) return HR_ERR_INVAL;
    long hi = g->max_batch ? g->max_batch : B;
    if (hi < g->min_batch || g->min_batch > B / n || (double)hi * n < (double)B)
        return HR_ERR_INVAL;
    return HR_OK;
}

hr_status ctrl_init(ctrl *c, const ctrl_config *cfg, int n, long B, const double *capacity,
                    long *b_out) {
    if (!c) return HR_ERR_INVAL;
    memset(c, 0, sizeof *c);
    hr_status st = check_config(cfg, n, B);
    if (st != HR_OK) return st;
    if (capacity)
        for (int k = 0; k < n; k++)
            if (!(capacity[k] > 0 && isfinite(capacity[k]))) return HR_ERR_INVAL;
    c->dbl = calloc((size_t)n * ND, sizeof *c->dbl);
    c->lng = calloc((size_t)n * NL, sizeof *c->lng);
    c->scr = scratch_new(n);
    if (!c->dbl || !c->lng || !c->scr) {
        ctrl_free(c);
        return HR_ERR_NOMEM;
    }
    ctrl_scratch *s = c->scr;
    c->cfg = *cfg;
    c->n = n;
    c->B = B;
    c->lo = cfg->min_batch;
    c->hi = cfg->max_batch ? cfg->max_batch : B;
    c->last_iter = -1;
    ctrl_bind(c);

    for (int k = 0; k < n; k++) {
        s->y[k] = capacity && cfg->policy != CTRL_STATIC ? capacity[k] : 1.0;
        s->lo[k] = (double)c->lo;
        s->hi[k] = (double)c->hi;
        s->rlo[k] = c->lo;
        s->rhi[k] = c->hi;
        c->step[k] = 1;
    }
    project_scale(n, s->y, s->lo, s->hi, (double)B, s->zero, s->dd, s->bp, s->q);
    apportion(n, s->q, s->rlo, s->rhi, B, c->b);
    if (b_out) memcpy(b_out, c->b, (size_t)n * sizeof *b_out);
    return HR_OK;
}

hr_status ctrl_set_split(ctrl *c, const long *b) {
    if (!c || !c->lng || !b) return HR_ERR_INVAL;
    if (!split_ok(c, b)) return HR_ERR_INVAL;
    for (int k = 0; k < c->n; k++) {
        if (b[k] == c->b[k]) continue;
        c->b[k] = b[k];
        c->nsamp[k] = 0; /* timings at the old batch say nothing about the new one */
        c->grow_from[k] = 0;
    }
    return HR_OK;
}

/* ---------------------------------------------------------------- observe */

/* Relative variance of one timing sample of node k. */
static double noise_var(const ctrl *c, int k) {
    double sd = CTRL_MAD_SIGMA * c->rd[k];
    return sd * sd;
}

static double median3(double a, double b, double c) {
    double lo = fmin(a, b), hi = fmax(a, b);
    return c < lo ? lo : (c > hi ? hi : c);
}

hr_status ctrl_observe(ctrl *c, long iter, const ctrl_stat *stats) {
    if (!c || !c->dbl || !stats || iter < 0 || iter <= c->last_iter) return HR_ERR_INVAL;
    for (int k = 0; k < c->n; k++) {
        double t = stats[k].t;
        if (!isfinite(t) || !(t >= CTRL_T_MIN && t <= CTRL_T_MAX) || stats[k].b != c->b[k])
            return HR_ERR_INVAL;
    }
    double s = c->cfg.smoothing, lam = c->cfg.forgetting;
    for (int k = 0; k < c->n; k++) {
        double t = stats[k].t, b = (double)stats[k].b;
        double f = c->nsamp[k] >= 2 ? median3(t, c->h1[k], c->h2[k]) : t;
        /* How noisy this node's clock is (shared cores, interference), which the dead-band
         * and the adaptive cap must not chase; kept across batch changes. rd is the mean
         * relative difference of successive samples at the same batch, from which
         * noise_var() derives the variance of one sample (unbiased for independent normal
         * noise, and unaffected by a slow drift). A difference is clamped to
         * CTRL_NOISE_DMAX, so a real speed step adds one bounded outlier. The first
         * differences are averaged plainly (weight 1/count), so the estimate starts from
         * data rather than from zero. */
        if (c->nsamp[k] >= 1) {
            double d = fmin(fabs(t - c->h1[k]) / c->h1[k], CTRL_NOISE_DMAX);
            /* model: a jump far beyond the noise at an unchanged batch is a change of speed
             * (interference starting or stopping), not the oscillation that step-halving
             * damps, so the node's next steps are full again */
            double jump = fabs(hr_det_log(t / c->h1[k]));
            double big = fmax(CTRL_JUMP_Z * sqrt(noise_var(c, k)), CTRL_JUMP_MIN);
            if (c->cfg.policy == CTRL_MODEL && c->nrd[k] >= 2 && jump > big) {
                c->step[k] = 1;
                c->dir[k] = 0;
            }
            c->nrd[k]++;
            double w = fmax(CTRL_NOISE_SMOOTH, 1.0 / (double)c->nrd[k]);
            c->rd[k] += w * (d - c->rd[k]);
        }
        c->ts[k] = c->nsamp[k] == 0 ? f : (1 - s) * c->ts[k] + s * f;
        c->tw2[k] = c->nsamp[k] == 0 ? 1 : (1 - s) * (1 - s) * c->tw2[k] + s * s;
        c->h2[k] = c->h1[k];
        c->h1[k] = t;
        c->nsamp[k]++;
        if (c->cfg.policy == CTRL_EPOCH) {
            c->ep_t[k] += t;
            c->ep_b[k] += b;
        }
        if (c->cfg.policy == CTRL_MODEL) {
            /* Exponentially forgotten weighted least squares (West's update, weight 1). */
            double w = lam * c->w[k] + 1;
            c->w2[k] = lam * lam * c->w2[k] + 1;
            double db = b - c->mb[k], dt = f - c->mt[k];
            c->mb[k] += db / w;
            c->mt[k] += dt / w;
            c->cbb[k] = lam * c->cbb[k] + db * (b - c->mb[k]);
            c->cbt[k] = lam * c->cbt[k] + db * (f - c->mt[k]);
            c->ctt[k] = lam * c->ctt[k] + dt * (f - c->mt[k]);
            c->w[k] = w;
        }
    }
    c->last_iter = iter;
    c->window++;
    return HR_OK;
}

/* ---------------------------------------------------------------- decide: shared stages */

/* Least relative growth of a batch, and least drop of its throughput, that the adaptive b_max
 * acts on. */
static double cap_thr(const ctrl_config *g) {
    return fmax(g->deadband, CTRL_CAP_DROP);
}

/* Adaptive b_max: expire old caps, review the last growth of each node (only when `adaptive`,
 * i.e. the policy keeps caps). A throughput drop only counts when it exceeds cap_thr and
 * CTRL_CAP_Z standard errors of the difference of the two throughput estimates: on a shared
 * machine, scheduling alone moves a node's throughput by tens of percent, and a cap set on
 * noise holds a fast node back for CTRL_CAP_DECISIONS decisions. */
static void caps_review(ctrl *c, int adaptive) {
    double thr = cap_thr(&c->cfg);
    for (int k = 0; k < c->n; k++) {
        if (c->cap[k] && c->decisions >= c->cap_until[k]) c->cap[k] = 0;
        /* conditions changed (interference ended): the node now beats the throughput that
         * capped it, so the cap no longer describes it */
        if (c->cap[k] && c->nsamp[k] > 0 && (double)c->b[k] / c->ts[k] > c->grow_x[k] * (1 + thr))
            c->cap[k] = 0;
        if (adaptive && c->grow_from[k] > 0) {
            double x = (double)c->b[k] / c->ts[k];
            double var = noise_var(c, k) * c->tw2[k] + c->grow_v[k];
            double drop = fmax(thr, CTRL_CAP_Z * sqrt(var));
            if (x < c->grow_x[k] * (1 - drop)) {
                c->cap[k] = c->grow_from[k];
                c->cap_until[k] = c->decisions + CTRL_CAP_DECISIONS;
            }
            c->grow_from[k] = 0;
        }
    }
}

/* Bounds of this decision's target: [min_batch, cap or max_batch] per node into s->hil (and
 * as doubles into s->lo, s->hi). Caps that would make sum B infeasible are all ignored. */
static void target_bounds(const ctrl *c, ctrl_scratch *s) {
    long shi = 0;
    for (int k = 0; k < c->n; k++) {
        s->hil[k] = c->cap[k] && c->cap[k] < c->hi ? c->cap[k] : c->hi;
        shi += s->hil[k];
    }
    for (int k = 0; k < c->n; k++) {
        if (shi < c->B) s->hil[k] = c->hi;
        s->lo[k] = (double)c->lo;
        s->hi[k] = (double)s->hil[k];
    }
}

/* Dead-band on the target: the configured fraction, or more when the timings are noisy.
 * With v the variance of one sample (noise_var), the timing a target rests on has relative
 * variance v * vf, vf the policy's variance factor (ctrl_policy_ops.var). A target moves with
 * the noise of its own node and of the others, so a move smaller than CTRL_NOISE_Z standard
 * errors of that difference is noise, not imbalance. Returns 1 when some node's target lies
 * beyond its dead-band. */
static int beyond_deadband(const ctrl *c, const ctrl_scratch *s, double vf) {
    int n = c->n;
    double v_mean = 0;
    for (int k = 0; k < n; k++) v_mean += noise_var(c, k) / n;
    for (int k = 0; k < n; k++) {
        double b = (double)c->b[k];
        double noise = CTRL_NOISE_Z * sqrt((noise_var(c, k) + v_mean) * vf);
        if (fabs(s->bstar[k] - b) > fmax(c->cfg.deadband, noise) * b) return 1;
    }
    return 0;
}

/* One node's step: the fraction f of the way from b to b*, kept positive for the scale
 * projection that follows. */
static double step_to(double b, double f, double bstar) {
    return fmax(b + f * (bstar - b), 1e-6 * b);
}

/* Rate limit (at least one sample either way), inside the bounds; the cap may override. Into
 * s->rlo, s->rhi (and as doubles s->rl, s->rh); when those cannot reach sum B, the plain
 * bounds [min_batch, hil] apply instead. */
static void rate_bounds(const ctrl *c, ctrl_scratch *s) {
    long slo = 0, srh = 0, *rlo = s->rlo, *rhi = s->rhi, *hil = s->hil;
    for (int k = 0; k < c->n; k++) {
        double b = (double)c->b[k], r = c->cfg.rate_limit;
        double a = ceil(b * (1 - r)), z = floor(b * (1 + r));
        long al = a < b - 1 ? (long)fmax(a, 0.0) : c->b[k] - 1;
        long zl = z > b + 1 ? (z < (double)hil[k] ? (long)z : hil[k]) : c->b[k] + 1;
        rlo[k] = al > c->lo ? al : c->lo;
        rhi[k] = zl < hil[k] ? zl : hil[k];
        if (rlo[k] > rhi[k]) rlo[k] = rhi[k];
        slo += rlo[k];
        srh += rhi[k];
    }
    if (slo > c->B || srh < c->B)
        for (int k = 0; k < c->n; k++) rlo[k] = c->lo, rhi[k] = hil[k];
    for (int k = 0; k < c->n; k++) s->rl[k] = (double)rlo[k], s->rh[k] = (double)rhi[k];
}

/* ---------------------------------------------------------------- policies */

/* A policy is its stages of a decision; ctrl_decide runs the shared ones around them. */
typedef struct {
    const char *name; /* as in the config ("static", "proportional", ...) */
    /* whether iteration iter ends with a decision (before the shared readiness checks) */
    int (*due)(const ctrl *c, long iter, int epoch_ended);
    /* the target b* into s->bstar, sum B within [s->lo, s->hi]; may update the policy's own
     * state, which a decision keeps whether or not the split then changes */
    void (*target)(ctrl *c, ctrl_scratch *s);
    /* variance of the timing behind b*, in units of one sample's (noise_var) */
    double (*var)(const ctrl *c, const ctrl_scratch *s);
    /* the stepped split into s->y (positive, any sum), from b toward s->bstar */
    void (*step)(const ctrl *c, ctrl_scratch *s);
    /* node k's batch goes from c->b[k] to s->bn[k]: commit what the step kept tentative;
     * NULL when nothing is */
    void (*moved)(ctrl *c, const ctrl_scratch *s, int k);
    int caps; /* keeps adaptive b_max caps (Tyagi & Sharma) */
} ctrl_policy_ops;

static int due_never(const ctrl *c, long iter, int epoch_ended) {
    (void)c, (void)iter, (void)epoch_ended;
    return 0;
}

static int due_interval(const ctrl *c, long iter, int epoch_ended) {
    (void)epoch_ended;
    return (iter + 1) % c->cfg.interval == 0;
}

/* At an epoch end, once every node computed something in it (a rate needs seconds). */
static int due_epoch(const ctrl *c, long iter, int epoch_ended) {
    (void)iter;
    if (!epoch_ended) return 0;
    for (int k = 0; k < c->n; k++)
        if (!(c->ep_t[k] > 0)) return 0;
    return 1;
}

/* A smoothed time: EWMA of independent samples, relative variance v * s / (2 - s). */
static double var_ewma(const ctrl *c, const ctrl_scratch *s) {
    (void)s;
    return c->cfg.smoothing / (2 - c->cfg.smoothing);
}

/* epoch: a rate is a mean over the `seen` iterations of the epoch, variance v / seen. */
static double var_epoch(const ctrl *c, const ctrl_scratch *s) {
    (void)c;
    return 1.0 / (double)s->seen;
}

/* proportional: b*_k proportional to the node's smoothed throughput b_k / t_k. */
static void target_proportional(ctrl *c, ctrl_scratch *s) {
    for (int k = 0; k < c->n; k++) s->d[k] = (double)c->b[k] / c->ts[k]; /* samples/s */
    project_scale(c->n, s->d, s->lo, s->hi, (double)c->B, s->zero, s->dd, s->bp, s->bstar);
}

/* pid: the proportional target, then the pid law on the relative error (ctrl.c's header)
 * gives the target the dead-band judges. The integral and the previous error are kept at
 * every decision, whether or not the split changes. */
static void target_pid(ctrl *c, ctrl_scratch *s) {
    const ctrl_config *g = &c->cfg;
    target_proportional(c, s);
    for (int k = 0; k < c->n; k++) {
        double b = (double)c->b[k];
        double e = s->e[k] = s->bstar[k] / b - 1;
        double edb = fabs(e) > g->deadband ? e : 0;
        int pinned = (c->b[k] <= c->lo && edb < 0) || (c->b[k] >= s->hil[k] && edb > 0);
        double ik = c->integ[k];
        if (ik * e < 0) ik = 0; /* the error changed sign: drop the old push */
        s->inew[k] = CTRL_PID_LEAK * ik + (pinned ? 0 : edb);
        if (g->ki > 0)
            s->inew[k] = clampd(s->inew[k], -CTRL_PID_IMAX / g->ki, CTRL_PID_IMAX / g->ki);
        double u = g->gain * e + g->ki * s->inew[k] + g->kd * (e - c->eprev[k]);
        s->y[k] = fmax(b * (1 + u), 1e-6 * b);
    }
    for (int k = 0; k < c->n; k++) {
        c->integ[k] = s->inew[k];
        c->eprev[k] = s->e[k];
    }
    project_scale(c->n, s->y, s->lo, s->hi, (double)c->B, s->zero, s->dd, s->bp, s->bstar);
}

/* Model policy: node k's (alpha, beta) in seconds and s/sample, or the proportional fallback. */
static void model_fit(const ctrl *c, int k, double *alpha, double *beta) {
    double t = c->ts[k], b = (double)c->b[k], bprop = t / b;
    *alpha = 0;
    *beta = bprop;
    double w = c->w[k], cbb = c->cbb[k];
    if (!(w > 0) || !(cbb > 0)) return;
    double neff = w * w / c->w2[k];
    double spread = 1e-3 * c->mb[k];
    if (neff < CTRL_FIT_NEFF || cbb / w < spread * spread) return;
    double be = c->cbt[k] / cbb;
    if (!(be > 0) || !isfinite(be)) return;
    double srr = fmax(0.0, c->ctt[k] - c->cbt[k] * be);
    double var = srr / w * neff / (neff - 2) * (c->w2[k] / w) / cbb;
    if (!(sqrt(var) <= CTRL_FIT_SE * be)) return;
    be = clampd(be, CTRL_BETA_MIN * bprop, bprop);
    *beta = be;
    *alpha = t - be * b;
}

/* model: b*_k = (T - alpha_k) / beta_k with the common finish time T that makes the sum B;
 * the line's parameter is T / tref, tref the slowest smoothed time, to keep it near 1. */
static void target_model(ctrl *c, ctrl_scratch *s) {
    double tref = 0;
    for (int k = 0; k < c->n; k++) tref = fmax(tref, c->ts[k]);
    for (int k = 0; k < c->n; k++) {
        double al, be;
        model_fit(c, k, &al, &be);
        s->c0[k] = -al / be; /* samples */
        s->d[k] = tref / be; /* samples per unit of T / tref */
    }
    project(c->n, s->c0, s->d, s->lo, s->hi, (double)c->B, s->bp, s->bstar);
}

/* epoch: b*_k proportional to the node's samples per compute second over the epoch, whose
 * totals this decision consumes. */
static void target_epoch(ctrl *c, ctrl_scratch *s) {
    for (int k = 0; k < c->n; k++) s->d[k] = c->ep_b[k] / c->ep_t[k]; /* samples/s */
    for (int k = 0; k < c->n; k++) c->ep_t[k] = c->ep_b[k] = 0;
    project_scale(c->n, s->d, s->lo, s->hi, (double)c->B, s->zero, s->dd, s->bp, s->bstar);
}

/* proportional, epoch: the fraction `gain` of the way. */
static void step_gain(const ctrl *c, ctrl_scratch *s) {
    for (int k = 0; k < c->n; k++) s->y[k] = step_to((double)c->b[k], c->cfg.gain, s->bstar[k]);
}

/* pid: all the way to its output, which already holds the gain. */
static void step_pid(const ctrl *c, ctrl_scratch *s) {
    for (int k = 0; k < c->n; k++) s->y[k] = step_to((double)c->b[k], 1, s->bstar[k]);
}

static int sgn(double x) {
    return (x > 0) - (x < 0);
}

/* model: gain times the node's step factor, halved when its direction reverses and doubled
 * back (up to 1) when it repeats. The factors stay tentative in s->sf (moved_model). */
static void step_model(const ctrl *c, ctrl_scratch *s) {
    for (int k = 0; k < c->n; k++) {
        double b = (double)c->b[k], f = c->cfg.gain;
        int dn = sgn(s->bstar[k] - b);
        double sk = c->step[k];
        if (dn && c->dir[k] && dn != c->dir[k])
            sk = fmax(sk * 0.5, CTRL_STEP_MIN);
        else if (dn && dn == c->dir[k])
            sk = fmin(1.0, sk * 2);
        s->sf[k] = sk;
        f *= sk;
        s->y[k] = step_to(b, f, s->bstar[k]);
    }
}

/* proportional, pid: a growth beyond cap_thr is remembered, to be reviewed by the next
 * decision (caps_review) against the throughput it had before. */
static void moved_grow(ctrl *c, const ctrl_scratch *s, int k) {
    long old = c->b[k];
    if ((double)s->bn[k] > (double)old * (1 + cap_thr(&c->cfg))) {
        c->grow_from[k] = old;
        c->grow_x[k] = (double)old / c->ts[k];
        c->grow_v[k] = noise_var(c, k) * c->tw2[k];
    }
}

/* model: the step factor and direction of the move that happened. */
static void moved_model(ctrl *c, const ctrl_scratch *s, int k) {
    c->step[k] = s->sf[k];
    c->dir[k] = s->bn[k] > c->b[k] ? 1 : -1;
}

/* Indexed by ctrl_policy. static is never due, so it needs no other stage. */
static const ctrl_policy_ops policies[] = {
    [CTRL_STATIC] = {.name = "static", .due = due_never},
    [CTRL_PROPORTIONAL] = {.name = "proportional",
                           .due = due_interval,
                           .target = target_proportional,
                           .var = var_ewma,
                           .step = step_gain,
                           .moved = moved_grow,
                           .caps = 1},
    [CTRL_PID] = {.name = "pid",
                  .due = due_interval,
                  .target = target_pid,
                  .var = var_ewma,
                  .step = step_pid,
                  .moved = moved_grow,
                  .caps = 1},
    [CTRL_MODEL] = {.name = "model",
                    .due = due_interval,
                    .target = target_model,
                    .var = var_ewma,
                    .step = step_model,
                    .moved = moved_model},
    [CTRL_EPOCH] = {.name = "epoch",
                    .due = due_epoch,
                    .target = target_epoch,
                    .var = var_epoch,
                    .step = step_gain},
};
_Static_assert(sizeof policies / sizeof policies[0] == CTRL_EPOCH + 1, "one entry per policy");

const char *ctrl_policy_name(ctrl_policy p) {
    return p >= CTRL_STATIC && p <= CTRL_EPOCH ? policies[p].name : "?";
}

/* ---------------------------------------------------------------- decide */

/* Make s->bn the split when it differs from the current one; returns 1 when it did. A node
 * whose batch changes restarts its EWMA, and its policy commits what the step kept. */
static int adopt(ctrl *c, const ctrl_policy_ops *P, const ctrl_scratch *s) {
    int diff = 0;
    for (int k = 0; k < c->n; k++) diff |= s->bn[k] != c->b[k];
    if (!diff) return 0;
    for (int k = 0; k < c->n; k++) {
        if (s->bn[k] == c->b[k]) continue;
        c->grow_from[k] = 0; /* only this move's growth (moved_grow) awaits review */
        if (P->moved) P->moved(c, s, k);
        c->nsamp[k] = 0; /* restart the EWMA at the new batch */
        c->b[k] = s->bn[k];
    }
    c->changes++;
    return 1;
}

hr_status ctrl_decide(ctrl *c, long iter, int epoch_ended, long *b_out, int *changed) {
    if (!c || !c->dbl || !c->scr || !b_out || iter < 0 || c->n < 1) return HR_ERR_INVAL;
    const ctrl_policy_ops *P = &policies[c->cfg.policy];
    ctrl_scratch *s = c->scr;
    int n = c->n;
    if (changed) *changed = 0;
    memcpy(b_out, c->b, (size_t)n * sizeof *b_out);
    if (!P->due(c, iter, epoch_ended) || c->window == 0) return HR_OK;
    for (int k = 0; k < n; k++)
        if (c->nsamp[k] == 0) return HR_OK; /* no timing yet at some node's batch */

    c->decisions++;
    s->seen = c->window;
    c->window = 0;
    caps_review(c, P->caps);
    target_bounds(c, s);
    P->target(c, s);
    if (!beyond_deadband(c, s, P->var(c, s))) return HR_OK;
    P->step(c, s);
    rate_bounds(c, s);
    project_scale(n, s->y, s->rl, s->rh, (double)c->B, s->zero, s->dd, s->bp, s->q);
    apportion(n, s->q, s->rlo, s->rhi, c->B, s->bn);
    if (!split_ok(c, s->bn)) return HR_ERR_INVAL; /* I6, checked where the split is made */
    if (!adopt(c, P, s)) return HR_OK;
    memcpy(b_out, c->b, (size_t)n * sizeof *b_out);
    if (changed) *changed = 1;
    return HR_OK;
}

/* ---------------------------------------------------------------- hash */

static uint64_t fnv_bytes(uint64_t h, const void *p, size_t len) {
    const unsigned char *s = p;
    for (size_t i = 0; i < len; i++) {
        h ^= s[i];
        h *= 1099511628211ULL;
    }
    return h;
}

static uint64_t fnv_i64(uint64_t h, int64_t v) {
    unsigned char b[8];
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)v >> (8 * i));
    return fnv_bytes(h, b, 8);
}

static uint64_t fnv_f64(uint64_t h, double v) {
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    return fnv_i64(h, (int64_t)u);
}

uint64_t ctrl_hash(const ctrl *c, const long *b) {
    uint64_t h = 14695981039346656037ULL;
    if (!c || !c->dbl) return h;
    const ctrl_config *g = &c->cfg;
    h = fnv_i64(h, g->policy);
    h = fnv_i64(h, g->interval);
    h = fnv_i64(h, g->min_batch);
    h = fnv_i64(h, g->max_batch);
    double gd[] = {g->deadband, g->gain, g->ki, g->kd, g->smoothing, g->rate_limit, g->forgetting};
    for (size_t i = 0; i < sizeof gd / sizeof gd[0]; i++) h = fnv_f64(h, gd[i]);
    long sc[] = {c->n, c->B, c->lo, c->hi, c->last_iter, c->window, c->decisions, c->changes};
    for (size_t i = 0; i < sizeof sc / sizeof sc[0]; i++) h = fnv_i64(h, sc[i]);
    for (long i = 0; i < (long)c->n * NL; i++) h = fnv_i64(h, c->lng[i]);
    for (long i = 0; i < (long)c->n * ND; i++) h = fnv_f64(h, c->dbl[i]);
    const long *bb = b ? b : c->b;
    for (int k = 0; k < c->n; k++) h = fnv_i64(h, bb[k]);
    return h;
}
