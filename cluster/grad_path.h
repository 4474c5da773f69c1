/*
 * grad_path.h: how a view all-reduces an iteration's gradient, as a table of operations.
 *
 * A path is a grad_path: a name and two operations, `ready` (a buffer is in: send what it
 * completes) and `exchange` (after the compute: the stats tail and the rest of the gradient).
 * libhetring's hetring_ready and hetring_step make one call each through the path of the
 * current view, and never ask which one it is. Adding a path (a compressed one, say) is a new
 * table in grad_path.c and one line in grad_path_choose.
 *
 *   whole    one SUM all-reduce of the stats tail and the gradient after the compute, round the
 *            ring. Like tree and buckets it sends float32, and with it whatever residual lossy
 *            steps left (wire = auto between its lossy stretches, a resumed checkpoint's): it
 *            joins the gradient as it goes out, and the applied step empties it
 *   tree     the same over the view's tree (ring.h), where the tree takes it: a view of 4 nodes
 *            or more and a tail and gradient within tree_bytes (a small model at a large N,
 *            where the ring's 2(N-1) hops cost more than the bytes)
 *   buckets  the bucket plan's buckets (overlap_plan), all-reduced by the communication thread
 *            during backward as their buffers come in, in plan order; the last one, buffer 0's,
 *            waits for the exchange and carries the tail just before it (overlap.h); a
 *            bucket small enough takes the tree as every small collective of the ring does
 *   nccl     the device's gradient over the view's NCCL communicator, then the tail over the
 *            TCP ring (nccl_path.h); the host buffers hold no gradient
 *   bf16     ([cluster] wire = bf16) the tail as float32, then the gradient with bf16 on the
 *            wire (ring_allreduce_bf16), after the compute: half the bytes, the same bits on
 *            every member. Error feedback: what this node's roundings dropped is added to its
 *            next gradient. That residual is this node's own (not replicated state): it is
 *            taken up only when the step is applied (grad_xfer_commit), so a failed or skipped
 *            step leaves it as it was; a node's checkpoint records it, and the node that wrote
 *            it takes it up again when it resumes from it (grad_xfer_resume); a node that
 *            starts otherwise (or restarts after a crash) begins with none
 *   bf16 buckets  ([cluster] wire = bf16 where buckets overlap, as for float32) the buckets
 *            of the plan, each all-reduced with bf16 on the wire by the communication thread
 *            as its buffers come in, its residual added just before it goes and its roundings
 *            kept at its offsets; the last one, buffer 0's, behind the tail sent exact; the
 *            error feedback as bf16's
 *   powersgd ([cluster] wire = powersgd) the matrices the application declared
 *            (hetring_matrices) at rank r, one power iteration a step (powersgd.h): the tail,
 *            the floats outside the matrices and every P = M Q in one float32 sum, then every
 *            Q' = M^T P in a second; P Q'^T is the step, the same bits on every member. Error
 *            feedback as bf16's (the residual, its commit, checkpoint and resume); Q, the
 *            same on every member, starts from the seed at each view's first step and goes
 *            on from the last applied step's Q', so a joiner needs none sent; a checkpoint
 *            records it, and a node resuming one starts its first view from it instead, so a
 *            job cut in two where every node resumes its own ends bit for bit where the
 *            uninterrupted job does
 *
 * The choice is one pure function of the view and the configuration (grad_view), the same on
 * every member, so every member calls the same collectives (I7). libhetring chooses at the
 * first step of every view and, with bucket_bytes = auto, again after every iteration from
 * the machine facts the members gathered in it; the first iteration of a view has none yet,
 * so it takes `whole`.
 */
#ifndef HR_GRAD_PATH_H
#define HR_GRAD_PATH_H

#include "base/hr_status.h"
#include "cluster/dist.h"
#include "cluster/overlap.h"
#include "cluster/powersgd.h"

#include <stddef.h>

/* One compressed matrix of the powersgd path, and where its P and Q lie in the path's
 * buffers (floats from their starts). */
typedef struct {
    psgd_mat m;          /* its place in the gradient and its shape */
    size_t p_at, q_at;   /* its P (rows x r) in the P's, its Q (cols x r) in every Q buffer */
} psgd_slot;

/* The powersgd path's plan and state (set by grad_xfer_matrices; the rest by its first
 * exchange). Q is replicated: every member holds the same bits, started from the seed at each
 * view's first step and then the last applied step's Q'. */
typedef struct {
    int r;            /* rank, [cluster] powersgd_rank */
    int threads;      /* threads the products split over: the node's compute threads, idle
                       * while the path exchanges (it sends after the compute) */
    uint64_t seed;    /* Q's start: [train] seed */
    psgd_slot *mats;  /* (n_mats) the matrices compressed, in offset order */
    int n_mats;
    size_t n_p, n_q;  /* floats of every matrix's P (rows x r) and Q (cols x r) */
    size_t n_plain;   /* floats of the gradient outside them (all-reduced as float32) */
    float *q;         /* (n_q) this view's Q */
    float *q_next;    /* (n_q) the exchanged step's Q' (the sum): the next Q once applied */
    float *local;     /* (n_q) this node's own q_k = M_k^T P, before the sum */
    float *qt, *lt;   /* (n_q) one matrix's Q' and q_k transposed (r x cols), for the step */
    float *send;      /* (send_cap) the first sum: the stats tail, plain floats, then P */
    size_t send_cap;
    uint64_t epoch;   /* the view Q belongs to */
    int q_ready;      /* q holds a Q of view `epoch` */
    float *resume;    /* a checkpoint's Q, the first view's instead of the seed's, or NULL */
    size_t n_resume;  /* its floats */
} grad_psgd;

/* What the paths work on: the gradient's layout, its bucket plan and the communication
 * thread. One per node (libhetring's handle holds it). */
typedef struct {
    dist *d;               /* the view's collectives */
    float *grads;          /* (n_grad) the gradient; the stats tail lies just before it */
    size_t n_grad;         /* floats of gradient */
    float *device_grads;   /* the device's gradient (n_grad floats) for nccl, or NULL */
    int n_bufs;            /* buffers the gradient is handed over in */
    int n_buckets;         /* buckets of the plan */
    long plan_bytes;       /* the bucket size it was cut with (OVERLAP_AUTO: the constant) */
    long cuts[OVERLAP_MAX_JOBS + 1]; /* bucket j = grads[cuts[j+1], cuts[j]) */
    int *bucket_of;                  /* (n_bufs) the bucket of each buffer, -1 for an empty one */
    int missing[OVERLAP_MAX_JOBS];   /* buffers of each bucket not handed over yet */
    int next_bucket;                 /* buckets sent this iteration */
    overlap_worker ow;               /* the communication thread, started by the first bucket */
    overlap_worker ow_bf16;          /* the bf16 buckets' (bf16 buckets), likewise */
    /* the bf16 path's (n_grad each, allocated by its first exchange) */
    uint16_t *wire;  /* the bf16 values on the wire */
    float *residual; /* what earlier roundings dropped, added to this step's gradient */
    float *dropped;  /* what this step's roundings dropped: the residual once it is applied */
    int pending;     /* dropped holds an exchanged step's, not yet committed */
    int live;        /* the residual may hold something not sent yet (a lossy step's, a
                      * resumed one): a float32 path adds it to the gradient it sends */
    int flushed;     /* a float32 path sent it this step: the commit empties it */
    int out;         /* this step's exchange added the residual to the gradient it sent */
    int unsettled;   /* the exchange of the step whose view failed: 2 completed here (dropped
                      * holds its part), 1 sent the residual but did not complete, 0 neither or
                      * settled (grad_xfer_passed) */
    float *resume;   /* a checkpoint's residual that the first lossy exchange takes up, or NULL */
    size_t n_resume; /* its floats */
    grad_psgd psgd;  /* the powersgd path's */
} grad_xfer;

typedef struct {
    const char *name; /* "whole", "tree", "buckets", "nccl" */
    int host_grads;   /* the host buffers hold the gradient (their finiteness is checked) */
    int overlaps;     /* buckets go out during the compute (what "overlap:" lines report) */
    /* Buffer i was handed over (its floats are in place in x->grads). */
    hr_status (*ready)(grad_xfer *x, int i);
    /* The iteration's all-reduce: the tail (head[0, tail), just before x->grads) and whatever
     * of the gradient is not sent yet. On failure the ring is idle when it returns. */
    hr_status (*exchange)(grad_xfer *x, float *head, size_t tail);
} grad_path;

extern const grad_path grad_path_whole, grad_path_tree, grad_path_buckets, grad_path_nccl,
    grad_path_bf16, grad_path_bf16_buckets, grad_path_powersgd;

/* What the choice depends on: the same on every member of a view. */
typedef struct {
    int nccl;                  /* the view's transport is NCCL (transport_choose) */
    long bucket_bytes;         /* [train] bucket_bytes, or OVERLAP_AUTO */
    int n_buckets;             /* buckets of the plan */
    const overlap_fact *facts; /* (n) the members' machine facts, NULL before any gathered */
    int n;                     /* members of the view */
    int tree;                  /* the view's tree takes the whole exchange (dist_tree_takes) */
    int wire;                  /* [cluster] wire: cfg_wire */
    /* wire = auto's facts, besides the measured ones in facts: */
    size_t bytes;              /* the float32 all-reduce's bytes (tail and gradient) */
    double psgd_ratio;         /* those floats over what powersgd sends (0: no plan) */
    double auto_gbit;          /* [cluster] wire_auto_gbit */
} grad_view;

#define WIRE_AUTO_MIN_BYTES (1L << 20) /* auto: below, an all-reduce waits on latency, not rate */
#define WIRE_AUTO_MIN_RATIO 4.0        /* auto: powersgd must send this many times fewer floats */

/* The path of view v; `why` (len bytes) says why buckets are or are not used, or which wire
 * auto chose. */
const grad_path *grad_path_choose(const grad_view *v, char *why, size_t len);

/* wire = auto's choice: 1 for powersgd where the view's float32 all-reduce, measured on every
 * member (v->facts), moved at most v->auto_gbit Gbit/s of bus bandwidth (2(n-1)/n bytes over
 * the least wall time of any member: the others also waited for the slowest compute), was
 * WIRE_AUTO_MIN_BYTES or more (below, latency rules and fewer bytes save nothing), took at
 * least OVERLAP_WIRE_FRAC of the longest compute, and powersgd sends WIRE_AUTO_MIN_RATIO
 * times fewer floats; else 0 (float32, the whole, tree or buckets path as without it, but no
 * buckets before the all-reduce is measured: with them it would not be). `why` says which and
 * from what. A pure function of the gathered facts. */
int grad_wire_auto(const grad_view *v, char *why, size_t len);

/* The bucket plan of a layout of n_bufs buffers (counts[i] floats at off[i]), fixed by the
 * first step; x->bucket_of must hold n_bufs entries. */
void grad_xfer_plan(grad_xfer *x, const size_t *counts, const size_t *off, int n_bufs,
                    long bucket_bytes);
/* The powersgd path's matrices: mats (n, in offset order, within the gradient, copied) of
 * which those worth compressing at rank r (psgd_worth) are kept; Q starts from seed; the
 * products split over `threads` threads (powersgd.h). Returns the matrices kept (>= 0), or -1
 * when out of memory. */
int grad_xfer_matrices(grad_xfer *x, const psgd_mat *mats, int n, int r, uint64_t seed,
                       int threads);
/* A new iteration: no buffer handed over yet. */
void grad_xfer_reset(grad_xfer *x);
/* Stop the communication thread (waiting for buckets in flight; the ring's deadlines bound
 * it). Safe to call again. */
void grad_xfer_stop(grad_xfer *x);
/* The step just exchanged is applied: the bf16 and powersgd paths' dropped part becomes the
 * residual the next step adds, and powersgd's Q' the next Q; a float32 path that sent the
 * residual empties it (a float32 step of wire = auto, or after a resumed one). */
void grad_xfer_commit(grad_xfer *x);
/* The step was not applied (skipped as not finite, or its view failed and the iteration runs
 * again, perhaps on another path): what its exchange dropped, and powersgd's Q', are thrown
 * away, and the residual it added to its gradient stays the residual. */
void grad_xfer_discard(grad_xfer *x);
/* The step's view failed: discarded as above, but the others may have applied it (with this
 * node's share, and the residual the share carried); grad_xfer_passed settles it if so. */
void grad_xfer_failed(grad_xfer *x);
/* The view's state this node took is past the step whose view failed last (grad_xfer_failed,
 * and no step exchanged since): the others applied it. What its exchange dropped becomes the
 * residual, as its commit would have made it (or, where the exchange did not complete here,
 * the residual it sent is emptied: one step's roundings are lost, none counted twice). */
void grad_xfer_passed(grad_xfer *x);
/* What floats [lo, hi) of the gradient hold that is not finite as this step's exchange sends
 * them, the residual it adds included (the one it holds while live, or a resumed one the first
 * exchange takes up): DIST_FLAG_NONFINITE_GRAD where the gradient itself holds a NaN or an
 * inf, DIST_FLAG_NONFINITE_FEEDBACK where it is finite but overflows with the residual added
 * (the same float additions the exchange makes), else 0. */
int grad_xfer_nonfinite(const grad_xfer *x, size_t lo, size_t hi);
/* This node's residual as of the last applied step (what a checkpoint records; n_grad
 * floats): the bf16 path's, a resumed one not taken up yet, or NULL. */
const float *grad_xfer_residual(const grad_xfer *x);
/* Take up a checkpoint's residual r (n floats, copied) at the first bf16 or powersgd exchange, where it
 * must be n_grad floats. HR_ERR_NOMEM when the copy cannot be made. */
hr_status grad_xfer_resume(grad_xfer *x, const float *r, size_t n);
/* The powersgd path's Q as of the last applied step (n_q floats into *n), what a checkpoint
 * records beside the residual so that a resumed job goes on where it stopped; a resumed one not
 * taken up yet; or NULL (no powersgd step yet). */
const float *grad_xfer_q(const grad_xfer *x, size_t *n);
/* Take up a checkpoint's Q (n floats, copied) at the first powersgd step, in place of the
 * seed's; it must be the plan's n_q floats (grad_xfer_q_fits); n = 0 drops one. HR_ERR_NOMEM
 * when the copy cannot be made. */
hr_status grad_xfer_resume_q(grad_xfer *x, const float *q, size_t n);
/* Whether a resumed Q (if any) is the size of the plan's Q. */
int grad_xfer_q_fits(const grad_xfer *x);
/* Free what the paths allocated (after grad_xfer_stop). */
void grad_xfer_free(grad_xfer *x);

#endif
