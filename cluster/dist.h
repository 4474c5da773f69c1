/*
 * dist.h: distributed training over the ring, with elastic membership: the machinery behind
 * libhetring (cluster/hetring.c), through which `hetring run` trains the built-in models too
 * (cluster/hr_node.h).
 *
 * Three things join the training loop:
 *  - the ring's SUM all-reduce as the communication step (the stats tail of stats.h rides
 *    along, so the all-reduce is also an all-gather of every node's (b, t, loss, correct,
 *    machine, hashes));
 *  - the replicated controller of ctrl/ as the batch-size decision: every node feeds it the
 *    same all-gathered stats, so every node computes the same split (I5, I6);
 *  - the agreement checks: every `hash_interval` iterations each node puts a hash of its
 *    parameters in its stats slot, and every iteration a hash of its last decision (split and
 *    controller state). A node whose hash differs from rank 0's stops the run on every node
 *    with a clear error (I4, I5);
 *  - the finiteness of each share: a node that finds its own gradient or loss not finite
 *    before the all-reduce says so in its flags, so after it every node knows the same
 *    culprits (dist_nonfinite) and takes the same decision ([train] nonfinite).
 * Hashes travel as two 24-bit halves of a 48-bit hash, each exact in a float.
 *
 * Elastic membership (README "Elastic training"): views come from ring_elect. When a
 * collective fails, the survivors elect a new view and retry the iteration; when any member
 * reports (in its stats flags) that a node asked to be admitted or that it is leaving, every
 * member changes the view after that same iteration. At every view change:
 *  - commit rule: a node applies iteration k only once its all-reduce completed, so states
 *    differ by at most one iteration; every member takes the state of the donor the election
 *    names (the highest lineage), broadcast over the new ring, so an iteration is applied by
 *    all survivors or by none, and a joiner gets the state the same way;
 *  - every member all-gathers a hash of its state and stops on a mismatch (I4);
 *  - the controller starts again for the new members from their capacity hints (the split
 *    still sums to B, I6), the same on every node (I5);
 *  - the data cursor is the iteration: an aborted iteration is re-run whole, so no sample is
 *    skipped or used twice (I8).
 *
 * The state a view change moves and checks is a dist_state: libhetring's, the user's get/put
 * callbacks behind a small header (the built-in trainer's state blob, for `hetring run`). It
 * goes through the election, transfer, hash check and controller restart (dist_attach_state,
 * dist_recover, dist_boundary), and every iteration through the checks (dist_annotate,
 * dist_decide).
 */
#ifndef HR_DIST_H
#define HR_DIST_H

#include "ctrl/ctrl.h"
#include "cluster/cluster_setup.h"
#include "cluster/nccl_path.h"
#include "cluster/stats.h"
#include "ring/ring.h"
#include "trainer/train.h"

#include <signal.h>

/* The checks' floats in cluster_stat.extra (stats.h). */
enum {
    DIST_STAT_PHASH = 0, /* two floats: parameter hash, on hash iterations */
    DIST_STAT_DHASH = 2, /* two floats: hash of the decision that set this iteration's split */
    DIST_STAT_FLAGS = 4, /* one float: DIST_FLAG_* bits */
};
_Static_assert(DIST_STAT_FLAGS + 1 <= CLUSTER_STAT_EXTRA, "the checks must fit cluster_stat.extra");

/* An iteration that fails in this many views in a row stops the run: something other than a
 * dead peer is wrong. */
#define DIST_MAX_RETRIES 8

/* What a member asks of the others at an iteration boundary (JOIN, LEAVE), and what it found
 * in its own share before the all-reduce (NONFINITE_*). */
enum {
    DIST_FLAG_JOIN = 1,           /* a node outside the view asked this member to admit it */
    DIST_FLAG_LEAVE = 2,          /* this member leaves after this iteration (SIGTERM) */
    DIST_FLAG_NONFINITE_GRAD = 4, /* its gradient share held a NaN or an inf */
    DIST_FLAG_NONFINITE_LOSS = 8, /* its loss sum was not finite (as the float the stats carry) */
    DIST_FLAG_NONFINITE_FEEDBACK = 16, /* its gradient share was finite, but not with the
                                        * error-feedback residual its exchange adds to it */
};
#define DIST_FLAG_CHANGE    (DIST_FLAG_JOIN | DIST_FLAG_LEAVE)
#define DIST_FLAG_NONFINITE                                                                        \
    (DIST_FLAG_NONFINITE_GRAD | DIST_FLAG_NONFINITE_LOSS | DIST_FLAG_NONFINITE_FEEDBACK)

/* The training state of one node, as the view changes see it. */
typedef struct {
    void *ctx;
    long (*iter)(void *ctx); /* the iteration to run next: the data cursor (I8) */
    /* A new view: this node is at ring position rank of size; the split is unset until
     * set_split. */
    hr_status (*set_comm)(void *ctx, int rank, int size);
    /* The state as one blob, valid until the next call; replicas may differ in size (the
     * donor's size is sent first). */
    hr_status (*pack)(void *ctx, const void **blob, size_t *bytes, char *err, size_t errlen);
    /* Adopt the donor's blob; nothing changes on failure. */
    hr_status (*unpack)(void *ctx, const void *blob, size_t bytes, char *err, size_t errlen);
    /* A hash of the state as this node holds it (after an unpack: as it adopted it). */
    hr_status (*hash)(void *ctx, uint64_t *h, char *err, size_t errlen);
    void (*set_split)(void *ctx, const long *b); /* the controller's split (size entries) */
    hr_status (*save)(void *ctx, char *err, size_t errlen); /* leaving: checkpoint, or NULL */
    FILE *(*metrics)(void *ctx); /* where view records go, NULL: kept until there is one */
    /* Time forward and backward over b samples as the next iteration would run them (the
     * emulated stretch included), changing no state: *seconds for one pass. NULL: this node
     * cannot time itself, and views start from the capacity hints ([controller] calibrate). */
    hr_status (*probe)(void *ctx, long b, double *seconds);
    long ipe;             /* iterations per epoch (the epoch policy) */
    const long *recorded; /* a resumed split (c->n_nodes entries) or NULL */
    int send_first;       /* the first view sends the donor's state to every member even
                           * when their lineages agree (states built apart) */
} dist_state;

typedef struct {
    const cluster_config *cc; /* this node's cluster settings (borrowed): B, the nodes, the
                               * controller's config; dist reads no cfg */
    ring *r;                  /* the TCP ring */
    int have_ring;            /* r was initialised */
    nccl_path np;             /* NCCL among the view's GPU members (nccl_path.h); set up per view
                               * after the TCP ring agreed on it, aborted before every election */
    ctrl ctl;                 /* replicated controller */
    int have_ctrl;            /* ctl was initialised */
    long ipe;                 /* iterations per epoch (epoch policy) */
    long hash_interval;       /* iterations between parameter hash checks */
    uint64_t dhash;           /* hash of the last decision, checked at the next iteration */
    ctrl_stat *gathered;      /* (n) stats handed to the controller */
    /* elastic membership */
    ring_lineage lineage;               /* the training state this node holds */
    const volatile sig_atomic_t *leave; /* nonzero: leave at the next boundary (a signal's) */
    int change;                         /* DIST_FLAG_* bits gathered at the last iteration */
    int leaving_self;                   /* this node is among the leavers */
    int force_hash;                     /* check the parameters at the next iteration */
    int views;                          /* views installed */
    long iter;                          /* the iteration in flight (test faults): written only
                                         * between iterations, when the bucket thread is idle */
    long fail_iter;                     /* the iteration that failed last */
    int fails;                          /* views in a row it failed in */
    double t_last;                      /* hr_now() at the end of the last iteration, 0: none */
    double t_slow;                      /* the slowest recent iteration, seconds (decaying) */
    int have_pending;                   /* `pending` is a view record not yet in the metrics */
    char pending[8192];                 /* the first view's record, before the file was open */
    unsigned char *blob;                /* state transfer buffer */
    size_t blob_cap;                    /* bytes allocated for blob */
    dist_state st;                      /* the state the views move (dist_attach_state) */
    /* the last view change, as its view record says it */
    long left[RING_MAX_NODES];   /* (n_left) nodes it dropped */
    int n_left;                  /* entries of left */
    long joined[RING_MAX_NODES]; /* (n_joined) nodes it admitted, or this node when it was the
                                  * one that rejoined */
    int n_joined;                /* entries of joined */
    double change_s;             /* seconds from the failure (or the request) to the new view */
} dist;

/* Open the ring of config rc (copied: the caller wipes its own) for the node whose settings
 * cc are (listening; no view yet). cc must outlive d. dist_free still needed. */
hr_status dist_init(dist *d, const cluster_config *cc, const ring_config *rc, char *err,
                    size_t errlen);

void dist_free(dist *d);

/* Join the cluster with state s (copied): elect the first view with the reachable nodes,
 * take the state of the member with the newest (a resumed checkpoint, or the running job's
 * when this node joins late), and start the controller (s->recorded when every node resumed
 * that split, else from the capacity hints). On failure err says why (no quorum within
 * rejoin_timeout, a state that does not verify). */
hr_status dist_attach_state(dist *d, const dist_state *s, char *err, size_t errlen);

/* A SUM all-reduce of n floats over the current view (the iteration's gradients and stats). */
hr_status dist_allreduce(dist *d, float *buf, size_t n);
/* The same with bf16 on the wire (ring_allreduce_bf16): every member gets the same bits, and
 * what this node's roundings dropped goes to dropped (n floats). */
hr_status dist_allreduce_bf16(dist *d, float *buf, uint16_t *wire, float *dropped, size_t n);
/* The same over the view's tree, for a gradient path that chose it (dist_tree_takes). */
hr_status dist_allreduce_tree(dist *d, float *buf, size_t n);
/* Whether the view's tree takes an all-reduce of n floats (ring_tree_takes_allreduce): the
 * same on every member. */
int dist_tree_takes(const dist *d, size_t n);

/* Whether the current view all-reduces the gradient over NCCL (nccl_path.h). */
int dist_on_nccl(const dist *d);
/* The gradient (n floats of device memory) over the view's NCCL communicator; a failure fails
 * the ring too (dist_recover elects, and the iteration runs again). */
hr_status dist_nccl_allreduce(dist *d, float *dev_buf, size_t n);

/* Whether iteration iter's stats carry a parameter hash (dist_annotate's param_hash). */
int dist_wants_hash(const dist *d, long iter);

/* Before the all-reduce: this node's agreement hashes and flags into mine->extra, with the
 * DIST_FLAG_NONFINITE_* bits `nonfinite` of its own share. */
void dist_annotate(dist *d, long iter, uint64_t param_hash, int nonfinite, cluster_stat *mine);

/* After the all-reduce: the members whose share was not finite, from their flags (the same on
 * every node): their ids into ids and their DIST_FLAG_NONFINITE_* bits into bits (size
 * entries at most); returns how many. */
int dist_nonfinite(const dist *d, const cluster_stat *stats, int size, long *ids, int *bits);

/* After the all-reduce: check the hashes (I4, I5) and decide the next split (size entries). */
hr_status dist_decide(dist *d, long iter, const cluster_stat *stats, int size, long *split);

/* A collective of the current view failed with st: agree on a new view and bring every
 * member to the same state (HR_OK: re-run the iteration), or the status to stop with. */
hr_status dist_recover(dist *d, hr_status st, char *err, size_t errlen);

/* After a completed (and applied) iteration: change the view or leave when a member asked
 * for it at that iteration (HR_ERR_INTERRUPTED: this node left). *changed says whether the
 * view changed. */
hr_status dist_boundary(dist *d, int *changed, char *err, size_t errlen);

/* The test faults perturb and perturb_last: flip the lowest bit of the first or the last of
 * the n_params parameters when armed for node node_id at iteration iter (before they are
 * hashed, so that the replica check is tested at both ends of the buffer). */
void dist_perturb(long node_id, long iter, float *params, long n_params);
/* Whether a perturb fault is armed for this node and iteration (the parameters must then be on
 * the host first). */
int dist_perturb_due(long node_id, long iter);

/* The node ids as a JSON list's inside, "0,1,3" (view records, metrics tags). */
void dist_ids_str(char *out, size_t n, const long *ids, int count);

#endif
