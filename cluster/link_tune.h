/*
 * link_tune.h: the tree's cut-off and the bucket size of a view, from its measured links.
 *
 * With [cluster] link_probe = on, every member of a view times ring all-reduces of two sizes
 * at the view's first step (ring_probe_links: alpha, a hop's latency, and beta, a byte's time)
 * and puts the figures in its slot of that step's stats tail, so every member gathers every
 * member's. link_tune, a pure function of them, then chooses on every member alike (I7), and
 * every member applies the choice at the same point of the view's collectives. The constants
 * (tree_bytes, OVERLAP_AUTO_BYTES) serve before the choice, without the probe, and as the
 * bounds of what it may choose; an explicit bucket_bytes is obeyed.
 *
 * The model (bench/README.md, "Small all-reduces at large N"): an all-reduce of S bytes costs
 * H·alpha + 2(n-1)/n·S·beta round the ring (H = 2(n-1) hops) and about 2d·alpha + 4d·S·beta
 * over the tree (d = floor(log2 n); store and forward, an inner node takes its two children in
 * turn). The links are the slowest member's: the largest alpha and the largest beta measured.
 *  - tree cut-off: where the two cross, S* = (H - 2d)/(4d - 2)·alpha/beta, at most tree_bytes;
 *  - bucket size: the least whose hops cost at most LINK_BUCKET_LATENCY of its bytes' time,
 *    H·alpha <= f·2(n-1)/n·S·beta, so S >= n·alpha/(f·beta), rounded up to a power of two
 *    within [LINK_BUCKET_MIN, LINK_BUCKET_MAX], and halved (not below the minimum) while the
 *    plan would cut fewer than two buckets: one bucket overlaps nothing.
 */
#ifndef HR_LINK_TUNE_H
#define HR_LINK_TUNE_H

#include "cluster/overlap.h"

#include <stddef.h>

#define LINK_BUCKET_MIN     (256L << 10)
#define LINK_BUCKET_MAX     (4L << 20)
#define LINK_BUCKET_LATENCY 0.1

typedef struct {
    double alpha_s, beta_s; /* the slowest links measured: a hop's latency, a byte's time */
    long alpha_id, beta_id; /* the members that measured them */
    long tree_cut;          /* the largest all-reduce over the view's tree (0: none) */
    long bucket_bytes;      /* the bucket size for the plan (bucket_bytes = auto) */
} link_choice;

/* The choice for a view of n members whose facts hold their probes, with the configuration's
 * tree_bytes and bucket_bytes (OVERLAP_AUTO: chosen here; else kept, as set) and the
 * gradient's layout (counts of n_bufs buffers, in floats). Returns 0 and chooses nothing when
 * some member has no probe (beta_s = 0) or one the model cannot take (alpha_s or beta_s not
 * finite, a negative alpha_s), else 1; `why` (len bytes) gets one line for the log:
 * "links: ...". A pure function. */
int link_tune(const overlap_fact *facts, int n, long tree_bytes, long bucket_bytes,
              const size_t *counts, int n_bufs, link_choice *out, char *why, size_t len);

#endif
