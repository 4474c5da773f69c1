/*
 * stats.h: the stats tail, the wire format of every node's stats of one iteration (DESIGN.md
 * "One iteration", step 3).
 *
 * Each node's cluster_stat travels as CLUSTER_NODE_STATS floats in its slot of a tail that
 * leads the gradient in the iteration's SUM all-reduce (hetring.c): each node fills its own
 * slot and zeros the others, so the all-reduce hands every node every slot unchanged, an
 * all-gather at no extra cost. b and correct are exact in a float up to 2^24; the checks'
 * hashes travel as 24-bit halves (dist.h). This file is the one place that knows the slot's
 * layout.
 */
#ifndef HR_STATS_H
#define HR_STATS_H

#include "cluster/overlap.h"
#include "trainer/train.h"

#define CLUSTER_STAT_EXTRA 5 /* floats for the agreement checks (dist.h) */

/* One node's stats of one iteration, as every node gets them back. */
typedef struct {
    train_stat rec;                  /* b, t, loss sum and correct predictions (train.h) */
    overlap_fact machine;            /* its cores, its machine's threads, its last all-reduce
                                      * and its link probe (overlap.h; compute_s is rec.t) */
    float extra[CLUSTER_STAT_EXTRA]; /* the agreement hashes and flags (dist.h), carried as is */
} cluster_stat;

#define CLUSTER_NODE_STATS (13 + CLUSTER_STAT_EXTRA) /* floats per node in the stats tail */

/* This node's stats into its slot of tail[0, size * CLUSTER_NODE_STATS), zeros elsewhere. */
void cluster_stats_pack(float *tail, int rank, int size, const cluster_stat *mine);

/* Every node's stats back from the all-reduced tail, out[0, size). */
void cluster_stats_unpack(const float *tail, int size, cluster_stat *out);

#endif
