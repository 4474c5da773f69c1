/*
 * dist.h: distributed training over the ring, with elastic membership.
 *
 * Plugs three things into the training loop of train.h:
 *  - the ring's SUM all-reduce as the communication step (the stats tail rides along, so the
 *    all-reduce is also an all-gather of every node's (b, t, loss, correct, hashes));
 *  - the replicated controller of ctrl/ as the batch-size decision: every node feeds it the
 *    same all-gathered stats, so every node computes the same split (I5, I6);
 *  - the agreement checks: every `hash_interval` iterations each node puts a hash of its
 *    parameters in its stats slot, and every iteration a hash of its last decision (split and
 *    controller state). A node whose hash differs from rank 0's stops the run on every node
 *    with a clear error (I4, I5).
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
 */
#ifndef HR_DIST_H
#define HR_DIST_H

#include "cfg.h"
#include "ctrl.h"
#include "ring.h"
#include "train.h"

#include <signal.h>

/* The checks' floats in train_stat.extra, the per-node stats left free by the trainer. */
enum {
    DIST_STAT_PHASH = 0, /* two floats: parameter hash, on hash iterations */
    DIST_STAT_DHASH = 2, /* two floats: hash of the decision that set this iteration's split */
    DIST_STAT_FLAGS = 4, /* one float: DIST_FLAG_* bits */
};
_Static_assert(DIST_STAT_FLAGS + 1 <= TRAIN_STAT_EXTRA, "the checks must fit train_stat.extra");

/* An iteration that fails in this many views in a row stops the run: something other than a
 * dead peer is wrong. */
#define DIST_MAX_RETRIES 8

/* What a member asks of the others at an iteration boundary. */
enum {
    DIST_FLAG_JOIN = 1,  /* a node outside the view asked this member to admit it */
    DIST_FLAG_LEAVE = 2, /* this member leaves after this iteration (SIGTERM) */
};

typedef struct {
    const cfg *c;        /* configuration (borrowed) */
    int self;            /* index of this node in c->nodes */
    ring r;              /* the TCP ring */
    int have_ring;       /* r was initialised */
    ctrl ctl;            /* replicated controller */
    int have_ctrl;       /* ctl was initialised */
    long ipe;            /* iterations per epoch (epoch policy) */
    long hash_interval;  /* iterations between parameter hash checks */
    uint64_t dhash;      /* hash of the last decision, checked at the next iteration */
    ctrl_stat *gathered; /* (n) stats handed to the controller */
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
    double t_last;                      /* now_s() at the end of the last iteration, 0: none */
    double t_slow;                      /* the slowest recent iteration, seconds (decaying) */
    int have_pending;                   /* `pending` is a view record not yet in the metrics */
    char pending[8192];                 /* the first view's record, before the file was open */
    unsigned char *blob;                /* state transfer buffer */
    size_t blob_cap;                    /* bytes allocated for blob */
} dist;

/* Open the ring for node `self` of `c` (listening; no view yet). dist_free still needed. */
hr_status dist_init(dist *d, const cfg *c, int self, char *err, size_t errlen);

/* The ring as the trainer's communicator: build the trainer with it and max_nodes =
 * c->n_nodes; its rank and size are provisional until dist_attach. */
train_comm dist_comm(dist *d);

/* Join the cluster with trainer `t` (built with dist_comm, resumed from its own checkpoint if
 * it had one): elect the first view with the reachable nodes, take the state of the member
 * with the newest (a resumed checkpoint, or the running job's when this node joins late),
 * start the controller (the checkpoint's split when every node resumed the same one, else
 * from the capacity hints) and plug it into t->ctrl. On failure err says why (no quorum
 * within rejoin_timeout, a state that does not verify). */
hr_status dist_attach(dist *d, trainer *t, char *err, size_t errlen);

/* The membership hooks of train_run (on_fail, after_iter, tag). `leave` (may be NULL) is
 * polled at every iteration: nonzero makes this node leave the cluster at the next boundary,
 * after the others agreed on it. */
void dist_hooks(dist *d, train_opts *o, const volatile sig_atomic_t *leave);

void dist_free(dist *d);

/* 64-bit hash of n floats (their bit patterns). */
uint64_t dist_hash_floats(const float *v, long n);

#endif
