/*
 * grad_path.c: the gradient paths (whole, tree, buckets, nccl) and the one function that chooses
 * among them (grad_path.h).
 */
#include "cluster/grad_path.h"

#include "conf/cfg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================ whole */

static hr_status whole_ready(grad_xfer *x, int i) {
    (void)x, (void)i; /* everything goes in the exchange */
    return HR_OK;
}

static hr_status whole_exchange(grad_xfer *x, float *head, size_t tail) {
    return dist_allreduce(x->d, head, tail + x->n_grad);
}

const grad_path grad_path_whole = {.name = "whole",
                                   .host_grads = 1,
                                   .overlaps = 0,
                                   .ready = whole_ready,
                                   .exchange = whole_exchange};

/* ================================================================ tree */

static hr_status tree_exchange(grad_xfer *x, float *head, size_t tail) {
    return dist_allreduce_tree(x->d, head, tail + x->n_grad);
}

const grad_path grad_path_tree = {.name = "tree",
                                  .host_grads = 1,
                                  .overlaps = 0,
                                  .ready = whole_ready,
                                  .exchange = tree_exchange};

/* ================================================================ buckets */

/* The communication thread's all-reduce. */
static hr_status bucket_allreduce(void *ctx, float *buf, size_t n) {
    return dist_allreduce(ctx, buf, n);
}

/* Send every bucket before the last whose buffers are all in, in the plan's order. */
static hr_status send_complete(grad_xfer *x) {
    if (!x->ow.running) HR_CHECK(overlap_start(&x->ow, bucket_allreduce, x->d));
    while (x->next_bucket < x->n_buckets - 1 && x->missing[x->next_bucket] == 0) {
        const long lo = x->cuts[x->next_bucket + 1], hi = x->cuts[x->next_bucket];
        overlap_submit(&x->ow, x->grads + lo, (size_t)(hi - lo));
        x->next_bucket++;
    }
    return HR_OK;
}

static hr_status buckets_ready(grad_xfer *x, int i) {
    if (x->bucket_of[i] >= 0) x->missing[x->bucket_of[i]]--;
    return send_complete(x);
}

static hr_status buckets_exchange(grad_xfer *x, float *head, size_t tail) {
    HR_CHECK(send_complete(x));
    overlap_submit(&x->ow, head, tail + (size_t)x->cuts[x->n_buckets - 1]);
    return overlap_wait(&x->ow);
}

const grad_path grad_path_buckets = {.name = "buckets",
                                     .host_grads = 1,
                                     .overlaps = 1,
                                     .ready = buckets_ready,
                                     .exchange = buckets_exchange};

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

static hr_status bf16_exchange(grad_xfer *x, float *head, size_t tail) {
    if (!x->residual) {
        x->wire = malloc(x->n_grad * sizeof *x->wire);
        x->residual = calloc(x->n_grad, sizeof *x->residual);
        x->dropped = malloc(x->n_grad * sizeof *x->dropped);
        if (!x->wire || !x->residual || !x->dropped) {
            grad_xfer_free(x);
            return HR_ERR_NOMEM;
        }
        if (x->resume && x->n_resume == x->n_grad)
            memcpy(x->residual, x->resume, x->n_grad * sizeof *x->residual);
        free(x->resume);
        x->resume = NULL;
    }
    x->pending = 0;
    HR_CHECK(dist_allreduce(x->d, head, tail)); /* the stats, exact */
    for (size_t i = 0; i < x->n_grad; i++) x->grads[i] += x->residual[i];
    HR_CHECK(dist_allreduce_bf16(x->d, x->grads, x->wire, x->dropped, x->n_grad));
    x->pending = 1;
    return HR_OK;
}

const grad_path grad_path_bf16 = {.name = "bf16",
                                  .host_grads = 1,
                                  .overlaps = 0,
                                  .ready = whole_ready,
                                  .exchange = bf16_exchange};

void grad_xfer_commit(grad_xfer *x) {
    if (!x->pending) return;
    float *t = x->residual;
    x->residual = x->dropped, x->dropped = t;
    x->pending = 0;
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

void grad_xfer_free(grad_xfer *x) {
    free(x->wire), free(x->residual), free(x->dropped), free(x->resume);
    x->wire = NULL, x->residual = x->dropped = x->resume = NULL;
    x->pending = 0;
}

/* ================================================================ the choice */

const grad_path *grad_path_choose(const grad_view *v, char *why, size_t len) {
    if (v->nccl) {
        snprintf(why, len, "the view's transport is NCCL");
        return &grad_path_nccl;
    }
    if (v->wire == CFG_WIRE_BF16) {
        snprintf(why, len, "wire = bf16: the whole gradient after the compute, bf16 on the wire");
        return &grad_path_bf16;
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
}
