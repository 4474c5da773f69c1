/*
 * dist.h: distributed training over the ring.
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
 */
#ifndef HR_DIST_H
#define HR_DIST_H

#include "cfg.h"
#include "ctrl.h"
#include "ring.h"
#include "train.h"

/* The checks' floats in train_stat.extra, the per-node stats left free by the trainer. */
enum {
    DIST_STAT_PHASH = 0, /* two floats: parameter hash, on hash iterations */
    DIST_STAT_DHASH = 2, /* two floats: hash of the decision that set this iteration's split */
};
_Static_assert(DIST_STAT_DHASH + 2 <= TRAIN_STAT_EXTRA, "the hashes must fit train_stat.extra");

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
} dist;

/* Form the ring for node `self` of `c`. On failure err names the peer; dist_free still needed. */
hr_status dist_init(dist *d, const cfg *c, int self, char *err, size_t errlen);

/* The ring as the trainer's communicator. */
train_comm dist_comm(dist *d);

/* Set up the controller for trainer `t` (built with dist_comm) and hand it the split
 * (train_set_split): the first one from the nodes' capacity hints, or the one the checkpoint
 * train_load resumed from recorded; then t->ctrl. */
hr_status dist_attach(dist *d, trainer *t, char *err, size_t errlen);

void dist_free(dist *d);

/* 64-bit hash of n floats (their bit patterns). */
uint64_t dist_hash_floats(const float *v, long n);

#endif
