/*
 * grad_path.c: the gradient paths (whole, tree, buckets, nccl) and the one function that chooses
 * among them (grad_path.h).
 */
#include "cluster/grad_path.h"

#include "conf/cfg.h"
#include "trainer/train.h"

#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static_assert(PSGD_MAX_RANK == CFG_PSGD_RANK_MAX, "the configuration's rank bound is the path's");

static hr_status take_residual(grad_xfer *x, size_t lo, size_t hi);

/* ================================================================ whole */

static hr_status whole_ready(grad_xfer *x, int i) {
    (void)x, (void)i; /* everything goes in the exchange */
    return HR_OK;
}

static hr_status whole_exchange(grad_xfer *x, float *head, size_t tail) {
    HR_CHECK(take_residual(x, 0, x->n_grad));
    return dist_allreduce(x->d, head, tail + x->n_grad);
}

const grad_path grad_path_whole = {.name = "whole",
                                   .host_grads = 1,
                                   .overlaps = 0,
                                   .ready = whole_ready,
                                   .exchange = whole_exchange};

/* ================================================================ tree */

static hr_status tree_exchange(grad_xfer *x, float *head, size_t tail) {
    HR_CHECK(take_residual(x, 0, x->n_grad));
    return dist_allreduce_tree(x->d, head, tail + x->n_grad);
}

const grad_path grad_path_tree = {.name = "tree",
                                  .host_grads = 1,
                                  .overlaps = 0,
                                  .ready = whole_ready,
                                  .exchange = tree_exchange};

/* ================================================================ buckets */

static hr_status bf16_alloc(grad_xfer *x);
static void add_residual(grad_xfer *x, size_t lo, size_t hi);

/* The communication thread's all-reduce: float32 (ctx: the dist). */
static hr_status bucket_allreduce(void *ctx, float *buf, size_t n) {
    return dist_allreduce(ctx, buf, n);
}

/* With bf16 on the wire (ctx: the grad_xfer): a bucket of the gradient through
 * ring_allreduce_bf16, its roundings into dropped at its offsets; the last job, which leads
 * with the stats tail, sends the tail exact first, as bf16_exchange does. */
static hr_status bucket_allreduce_bf16(void *ctx, float *buf, size_t n) {
    grad_xfer *x = ctx;
    if (buf < x->grads) {
        const size_t tail = (size_t)(x->grads - buf);
        HR_CHECK(dist_allreduce(x->d, buf, tail));
        buf += tail, n -= tail;
    }
    const size_t lo = (size_t)(buf - x->grads);
    return dist_allreduce_bf16(x->d, buf, x->wire + lo, x->dropped + lo, n);
}

/* What joins floats [lo, hi) before their bucket goes: with bf16 the residual earlier
 * roundings dropped, else (float32) whatever residual lossy steps left (take_residual). */
static hr_status bucket_prepare(grad_xfer *x, int bf16, size_t lo, size_t hi) {
    if (!bf16) return take_residual(x, lo, hi);
    add_residual(x, lo, hi);
    return HR_OK;
}

/* Send every bucket before the last whose buffers are all in, in the plan's order, on the
 * float32 worker or (bf16) the bf16 one. */
static hr_status send_complete(grad_xfer *x, int bf16) {
    overlap_worker *w = bf16 ? &x->ow_bf16 : &x->ow;
    if (!w->running)
        HR_CHECK(bf16 ? overlap_start(w, bucket_allreduce_bf16, x)
                      : overlap_start(w, bucket_allreduce, x->d));
    if (bf16) HR_CHECK(bf16_alloc(x));
    while (x->next_bucket < x->n_buckets - 1 && x->missing[x->next_bucket] == 0) {
        const long lo = x->cuts[x->next_bucket + 1], hi = x->cuts[x->next_bucket];
        hr_status st = bucket_prepare(x, bf16, (size_t)lo, (size_t)hi);
        if (st != HR_OK) { /* the buckets out already end first: the ring is the caller's next */
            (void)overlap_wait(w);
            return st;
        }
        overlap_submit(w, x->grads + lo, (size_t)(hi - lo));
        x->next_bucket++;
    }
    return HR_OK;
}

static hr_status ready_bucket(grad_xfer *x, int i, int bf16) {
    if (x->bucket_of[i] >= 0) x->missing[x->bucket_of[i]]--;
    return send_complete(x, bf16);
}

/* The last bucket (buffer 0's) behind the tail, and the wait for every bucket. With bf16 the
 * step's dropped part is whole (pending) once every bucket came back. */
static hr_status exchange_buckets(grad_xfer *x, float *head, size_t tail, int bf16) {
    overlap_worker *w = bf16 ? &x->ow_bf16 : &x->ow;
    HR_CHECK(send_complete(x, bf16));
    if (bf16) x->pending = 0;
    hr_status st = bucket_prepare(x, bf16, 0, (size_t)x->cuts[x->n_buckets - 1]);
    if (st != HR_OK) { /* the buckets out already end first */
        (void)overlap_wait(w);
        return st;
    }
    overlap_submit(w, head, tail + (size_t)x->cuts[x->n_buckets - 1]);
    st = overlap_wait(w);
    if (bf16 && st == HR_OK) x->pending = 1;
    return st;
}

static hr_status buckets_ready(grad_xfer *x, int i) {
    return ready_bucket(x, i, 0);
}

static hr_status buckets_exchange(grad_xfer *x, float *head, size_t tail) {
    return exchange_buckets(x, head, tail, 0);
}

const grad_path grad_path_buckets = {.name = "buckets",
                                     .host_grads = 1,
                                     .overlaps = 1,
                                     .ready = buckets_ready,
                                     .exchange = buckets_exchange};

static hr_status bf16_buckets_ready(grad_xfer *x, int i) {
    return ready_bucket(x, i, 1);
}

static hr_status bf16_buckets_exchange(grad_xfer *x, float *head, size_t tail) {
    return exchange_buckets(x, head, tail, 1);
}

const grad_path grad_path_bf16_buckets = {.name = "bf16 buckets",
                                          .host_grads = 1,
                                          .overlaps = 1,
                                          .ready = bf16_buckets_ready,
                                          .exchange = bf16_buckets_exchange};

/* ================================================================ nccl */

static hr_status nccl_exchange(grad_xfer *x, float *head, size_t tail) {
    HR_CHECK(dist_nccl_allreduce(x->d, x->device_grads, x->n_grad));
    return dist_allreduce(x->d, head, tail);
}

const grad_path grad_path_nccl = {.name = "nccl",
                                  .host_grads = 0,
                                  .overlaps = 0,
                                  .ready = whole_ready,
                                  .exchange = nccl_exchange};

/* ================================================================ bf16 */

/* The error feedback's buffers (residual, dropped: n_grad floats each), allocated by a lossy
 * path's first exchange, which takes up a resumed checkpoint's residual. */
static hr_status feedback_alloc(grad_xfer *x) {
    if (x->residual) return HR_OK;
    x->residual = calloc(x->n_grad, sizeof *x->residual);
    x->dropped = calloc(x->n_grad, sizeof *x->dropped);
    if (!x->residual || !x->dropped) {
        free(x->residual), free(x->dropped);
        x->residual = x->dropped = NULL;
        return HR_ERR_NOMEM;
    }
    if (x->resume && x->n_resume == x->n_grad) {
        memcpy(x->residual, x->resume, x->n_grad * sizeof *x->residual);
        x->live = 1;
    }
    free(x->resume);
    x->resume = NULL;
    return HR_OK;
}

static hr_status take_residual(grad_xfer *x, size_t lo, size_t hi) {
    if (x->resume) HR_CHECK(feedback_alloc(x));
    if (!x->live) return HR_OK;
    add_residual(x, lo, hi);
    x->flushed = 1;
    return HR_OK;
}

/* The bf16 wire's scratch and the error feedback's buffers. */
static hr_status bf16_alloc(grad_xfer *x) {
    if (!x->wire && !(x->wire = malloc(x->n_grad * sizeof *x->wire))) return HR_ERR_NOMEM;
    return feedback_alloc(x);
}

/* The residual into floats [lo, hi) of the gradient a lossy path sends (nothing to add while
 * it holds nothing). */
static void add_residual(grad_xfer *x, size_t lo, size_t hi) {
    if (!x->live) return;
    x->out = 1;
    for (size_t i = lo; i < hi; i++) x->grads[i] += x->residual[i];
}

static hr_status bf16_exchange(grad_xfer *x, float *head, size_t tail) {
    HR_CHECK(bf16_alloc(x));
    x->pending = 0;
    HR_CHECK(dist_allreduce(x->d, head, tail)); /* the stats, exact */
    add_residual(x, 0, x->n_grad);
    HR_CHECK(dist_allreduce_bf16(x->d, x->grads, x->wire, x->dropped, x->n_grad));
    x->pending = 1;
    return HR_OK;
}

const grad_path grad_path_bf16 = {.name = "bf16",
                                  .host_grads = 1,
                                  .overlaps = 0,
                                  .ready = whole_ready,
                                  .exchange = bf16_exchange};

/* ================================================================ powersgd */

/* The state's buffers, and a send buffer for a tail of `tail` floats. Each buffer is had
 * under its own guard, so a call after one that ran out of memory allocates only what is
 * missing, and none is used before all are there (grad_xfer_free frees each). */
static hr_status psgd_alloc(grad_xfer *x, size_t tail) {
    grad_psgd *s = &x->psgd;
    HR_CHECK(feedback_alloc(x));
    float **const bufs[] = {&s->q, &s->q_next, &s->local, &s->qt, &s->lt}; /* (n_q) each */
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        if (!*bufs[i] && !(*bufs[i] = malloc(sizeof **bufs[i] * (s->n_q + 1)))) return HR_ERR_NOMEM;
    const size_t need = tail + s->n_plain + s->n_p;
    if (need > s->send_cap) {
        float *b = realloc(s->send, sizeof *b * need);
        if (!b) return HR_ERR_NOMEM;
        s->send = b, s->send_cap = need;
    }
    return HR_OK;
}

/* Q from the seed at a view's first step (every member of the view does the same), or, at
 * the first one after a resume, the checkpoint's (checked to fit by the plan). */
static void psgd_start_view(grad_psgd *s, uint64_t epoch) {
    if (s->q_ready && s->epoch == epoch) return;
    if (s->resume && s->n_resume == s->n_q)
        memcpy(s->q, s->resume, sizeof *s->q * s->n_q);
    else
        for (int k = 0; k < s->n_mats; k++)
            psgd_init_q(s->q + s->mats[k].q_at, s->mats[k].m.cols, s->r, s->seed, epoch, k);
    free(s->resume);
    s->resume = NULL;
    s->epoch = epoch, s->q_ready = 1;
}

/* The floats outside the matrices: from g to buf (out = 1) or back (out = 0), in order. */
static size_t psgd_plain(const grad_psgd *s, float *g, size_t n_grad, float *buf, int out) {
    size_t at = 0, o = 0;
    for (int k = 0; k <= s->n_mats; k++) {
        const size_t end = k < s->n_mats ? s->mats[k].m.off : n_grad;
        const size_t n = end - at;
        if (out) memcpy(buf + o, g + at, sizeof *g * n);
        else memcpy(g + at, buf + o, sizeof *g * n);
        o += n;
        if (k < s->n_mats) at = end + s->mats[k].m.rows * s->mats[k].m.cols;
    }
    return o;
}

static hr_status powersgd_exchange(grad_xfer *x, float *head, size_t tail) {
    grad_psgd *s = &x->psgd;
    HR_CHECK(psgd_alloc(x, tail));
    psgd_start_view(s, ring_get_view(x->d->r)->epoch);
    x->pending = 0;
    float *g = x->grads;
    x->out |= x->live;
    for (size_t i = 0; i < x->n_grad; i++) g[i] += x->residual[i];
    /* the first sum: the stats tail, the plain floats, every P_k = M_k Q */
    memcpy(s->send, head, sizeof *head * tail);
    float *p = s->send + tail + psgd_plain(s, g, x->n_grad, s->send + tail, 1);
    for (int k = 0; k < s->n_mats; k++) {
        const psgd_mat *m = &s->mats[k].m;
        psgd_project(g + m->off, m->rows, m->cols, s->q + s->mats[k].q_at, s->r,
                     p + s->mats[k].p_at, s->threads);
    }
    HR_CHECK(dist_allreduce(x->d, s->send, tail + s->n_plain + s->n_p));
    memcpy(head, s->send, sizeof *head * tail);
    /* the second: every q_k = M_k^T P, P orthonormal (the same bits on every member) */
    for (int k = 0; k < s->n_mats; k++) {
        const psgd_mat *m = &s->mats[k].m;
        float *pk = p + s->mats[k].p_at;
        psgd_orthonormalize(pk, m->rows, s->r);
        psgd_back(g + m->off, m->rows, m->cols, pk, s->r, s->local + s->mats[k].q_at, s->threads);
    }
    memcpy(s->q_next, s->local, sizeof *s->q_next * s->n_q);
    HR_CHECK(dist_allreduce(x->d, s->q_next, s->n_q));
    /* the step: the plain sums, each P Q'^T; what this node's share lost, M_k - P q_k^T */
    memset(x->dropped, 0, sizeof *x->dropped * x->n_grad); /* the plain floats lose nothing */
    psgd_plain(s, g, x->n_grad, s->send + tail, 0);
    for (int k = 0; k < s->n_mats; k++) {
        const psgd_mat *m = &s->mats[k].m;
        psgd_transpose(s->q_next + s->mats[k].q_at, m->cols, s->r, s->qt);
        psgd_transpose(s->local + s->mats[k].q_at, m->cols, s->r, s->lt);
        psgd_expand(p + s->mats[k].p_at, s->qt, m->rows, m->cols, s->r, g + m->off, s->lt,
                    x->dropped + m->off, g + m->off, s->threads);
    }
    x->pending = 1;
    return HR_OK;
}

const grad_path grad_path_powersgd = {.name = "powersgd",
                                      .host_grads = 1,
                                      .overlaps = 0,
                                      .ready = whole_ready,
                                      .exchange = powersgd_exchange};

int grad_xfer_matrices(grad_xfer *x, const psgd_mat *mats, int n, int r, uint64_t seed,
                       int threads) {
    grad_psgd *s = &x->psgd;
    free(s->mats);
    s->mats = malloc(sizeof *s->mats * (size_t)(n + 1));
    if (!s->mats) return -1;
    s->r = r, s->seed = seed, s->threads = threads, s->n_mats = 0, s->n_p = s->n_q = 0;
    s->n_plain = x->n_grad;
    for (int k = 0; k < n; k++) {
        if (!psgd_worth(mats[k].rows, mats[k].cols, r)) continue;
        s->mats[s->n_mats++] = (psgd_slot){mats[k], s->n_p, s->n_q};
        s->n_p += mats[k].rows * (size_t)r, s->n_q += mats[k].cols * (size_t)r;
        s->n_plain -= mats[k].rows * mats[k].cols;
    }
    return s->n_mats;
}

/* ================================================================ the residual */

void grad_xfer_commit(grad_xfer *x) {
    if (x->flushed && !x->pending) { /* a float32 step sent it all */
        memset(x->residual, 0, x->n_grad * sizeof *x->residual);
        x->live = 0;
    }
    x->flushed = x->out = x->unsettled = 0;
    if (!x->pending) return;
    x->live = 1;
    float *t = x->residual;
    x->residual = x->dropped, x->dropped = t;
    if (x->psgd.q_next) { /* powersgd: Q' of the applied step goes on as Q */
        t = x->psgd.q;
        x->psgd.q = x->psgd.q_next, x->psgd.q_next = t;
    }
    x->pending = 0;
}

void grad_xfer_discard(grad_xfer *x) {
    x->pending = x->flushed = x->out = x->unsettled = 0;
}

void grad_xfer_failed(grad_xfer *x) {
    const int u = x->pending ? 2 : x->out ? 1 : 0;
    grad_xfer_discard(x);
    x->unsettled = u;
}

void grad_xfer_passed(grad_xfer *x) {
    if (x->unsettled == 2) { /* dropped holds what the applied step's roundings lost */
        x->pending = 1;
        grad_xfer_commit(x);
    } else if (x->unsettled == 1) { /* sent, and its roundings unknown here */
        memset(x->residual, 0, x->n_grad * sizeof *x->residual);
        x->live = 0;
    }
    x->unsettled = 0;
}

/* The residual this step's exchange adds to the gradient, or NULL where it adds none: every
 * path with host buffers adds it while it is live (add_residual, take_residual, powersgd's
 * whole sum, zeros otherwise), and the first exchange takes up a resumed one of the right
 * size (feedback_alloc). */
static const float *residual_sent(const grad_xfer *x) {
    if (x->live) return x->residual;
    if (x->resume && x->n_resume == x->n_grad) return x->resume;
    return NULL;
}

int grad_xfer_nonfinite(const grad_xfer *x, size_t lo, size_t hi) {
    const float *g = x->grads + lo, *r = residual_sent(x);
    if (!r) return train_all_finite(g, hi - lo) ? 0 : DIST_FLAG_NONFINITE_GRAD;
    r += lo;
    /* g + r finite implies g finite: one pass where all is well */
    uint32_t bad = 0;
    for (size_t i = 0; i < hi - lo; i++) {
        const float s = g[i] + r[i];
        uint32_t w;
        memcpy(&w, &s, sizeof w);
        bad |= (w & 0x7f800000u) == 0x7f800000u;
    }
    if (!bad) return 0;
    return train_all_finite(g, hi - lo) ? DIST_FLAG_NONFINITE_FEEDBACK : DIST_FLAG_NONFINITE_GRAD;
}

const float *grad_xfer_residual(const grad_xfer *x) {
    return x->residual ? x->residual : x->resume;
}

hr_status grad_xfer_resume(grad_xfer *x, const float *r, size_t n) {
    float *c = malloc(n * sizeof *c + 1);
    if (!c) return HR_ERR_NOMEM;
    memcpy(c, r, n * sizeof *c);
    free(x->resume);
    x->resume = c, x->n_resume = n;
    return HR_OK;
}

const float *grad_xfer_q(const grad_xfer *x, size_t *n) {
    const grad_psgd *s = &x->psgd;
    if (s->q_ready) return *n = s->n_q, s->q;
    return *n = s->n_resume, s->resume;
}

hr_status grad_xfer_resume_q(grad_xfer *x, const float *q, size_t n) {
    float *c = NULL;
    if (n) {
        if (!(c = malloc(n * sizeof *c))) return HR_ERR_NOMEM;
        memcpy(c, q, n * sizeof *c);
    }
    free(x->psgd.resume);
    x->psgd.resume = c, x->psgd.n_resume = n;
    return HR_OK;
}

int grad_xfer_q_fits(const grad_xfer *x) {
    return !x->psgd.resume || x->psgd.n_resume == x->psgd.n_q;
}

void grad_xfer_free(grad_xfer *x) {
    free(x->wire), free(x->residual), free(x->dropped), free(x->resume);
    x->wire = NULL, x->residual = x->dropped = x->resume = NULL;
    x->pending = x->live = x->flushed = 0;
    grad_psgd *s = &x->psgd;
    free(s->q), free(s->q_next), free(s->local), free(s->qt), free(s->lt), free(s->send);
    free(s->mats), free(s->resume);
    s->q = s->q_next = s->local = s->qt = s->lt = s->send = NULL, s->mats = NULL;
    s->resume = NULL;
    s->send_cap = 0, s->q_ready = 0, s->n_mats = 0;
}

/* ================================================================ the choice */

int grad_wire_auto(const grad_view *v, char *why, size_t len) {
    if (v->n < 2 || !v->facts || !overlap_measured(v->facts, v->n)) {
        snprintf(why, len, "wire = auto: float32 until the view's all-reduce is measured");
        return 0;
    }
    if (v->psgd_ratio < WIRE_AUTO_MIN_RATIO) {
        snprintf(why, len,
                 "wire = auto: float32; powersgd would send %.1fx fewer floats, less than %.0fx "
                 "(no declared matrix, or too few that halve)",
                 v->psgd_ratio, WIRE_AUTO_MIN_RATIO);
        return 0;
    }
    int wire = 0, slow = 0;
    for (int k = 1; k < v->n; k++) {
        if (v->facts[k].comm_s < v->facts[wire].comm_s) wire = k;
        if (v->facts[k].compute_s > v->facts[slow].compute_s) slow = k;
    }
    const double w = v->facts[wire].comm_s, s = v->facts[slow].compute_s;
    const double gbit = 2.0 * (v->n - 1) / v->n * (double)v->bytes * 8 / w / 1e9;
    const int big = (long)v->bytes >= WIRE_AUTO_MIN_BYTES, long_enough = w >= OVERLAP_WIRE_FRAC * s;
    const int psgd = big && long_enough && gbit <= v->auto_gbit;
    snprintf(why, len,
             "wire = auto: %s; the all-reduce of %.2f MB took %.1f ms (node %ld, the least), %.2f "
             "Gbit/s of bus bandwidth %s wire_auto_gbit = %g, against %.1f ms of compute at most "
             "(node %ld)%s%s; powersgd sends %.1fx fewer floats",
             psgd ? "powersgd" : "float32", (double)v->bytes / 1e6, 1e3 * w, v->facts[wire].id,
             gbit, gbit <= v->auto_gbit ? "within" : "above", v->auto_gbit, 1e3 * s,
             v->facts[slow].id, big ? "" : ", too small to be rate-bound",
             long_enough ? "" : ", too short to matter", v->psgd_ratio);
    return psgd;
}

const grad_path *grad_path_choose(const grad_view *v, char *why, size_t len) {
    if (v->nccl) {
        snprintf(why, len, "the view's transport is NCCL");
        return &grad_path_nccl;
    }
    if (v->wire == CFG_WIRE_BF16) { /* buckets as float32's, each with bf16 on the wire */
        const int on = overlap_choose(v->bucket_bytes, v->n_buckets, v->facts,
                                      v->facts ? v->n : 0, why, len);
        return on ? &grad_path_bf16_buckets : &grad_path_bf16;
    }
    if (v->wire == CFG_WIRE_POWERSGD) {
        snprintf(why, len, "wire = powersgd: the whole gradient after the compute, its matrices "
                           "at low rank");
        return &grad_path_powersgd;
    }
    if (v->wire == CFG_WIRE_AUTO) {
        if (grad_wire_auto(v, why, len)) return &grad_path_powersgd;
        /* no buckets before the wire is chosen: they would leave the all-reduce unmeasured */
        if (!v->facts || !overlap_measured(v->facts, v->n))
            return v->tree ? &grad_path_tree : &grad_path_whole;
    }
    /* auto without facts (a view's first iteration) says no: "not gathered yet" */
    const int on = overlap_choose(v->bucket_bytes, v->n_buckets, v->facts, v->facts ? v->n : 0,
                                  why, len);
    if (on) return &grad_path_buckets;
    return v->tree ? &grad_path_tree : &grad_path_whole;
}

/* ================================================================ the plan */

void grad_xfer_plan(grad_xfer *x, const size_t *counts, const size_t *off, int n_bufs,
                    long bucket_bytes) {
    const int nb = overlap_plan(counts, n_bufs, bucket_bytes, x->cuts);
    x->n_buckets = nb;
    x->plan_bytes = bucket_bytes;
    x->n_bufs = n_bufs;
    for (int i = 0, j = nb - 1; i < n_bufs; i++) {
        while (j > 0 && (long)off[i] >= x->cuts[j]) j--;
        x->bucket_of[i] = counts[i] ? j : -1;
    }
}

void grad_xfer_reset(grad_xfer *x) {
    x->next_bucket = 0;
    memset(x->missing, 0, sizeof x->missing);
    for (int i = 0; i < x->n_bufs; i++)
        if (x->bucket_of[i] >= 0) x->missing[x->bucket_of[i]]++;
}

void grad_xfer_stop(grad_xfer *x) {
    overlap_stop(&x->ow);
    overlap_stop(&x->ow_bf16);
}
