/*
 * link_tune.c: the view's tree cut-off and bucket size from its measured links (link_tune.h).
 */
#include "cluster/link_tune.h"

#include <math.h>
#include <stdio.h>

/* floor(log2 n): the depth of the tree of n ranks (ring/tree.c) */
static int depth_of(int n) {
    int d = 0;
    for (int p = n; p > 1; p >>= 1) d++;
    return d;
}

static long tree_cut_of(int n, double alpha, double beta, long tree_bytes) {
    if (n < 4 || tree_bytes <= 0) return 0; /* no tree in such a view */
    const int d = depth_of(n), hops = 2 * (n - 1);
    const double s = (double)(hops - 2 * d) / (4 * d - 2) * alpha / beta;
    return s >= (double)tree_bytes ? tree_bytes : (long)s;
}

static long bucket_of(int n, double alpha, double beta, const size_t *counts, int n_bufs) {
    const double want = (double)n * alpha / (LINK_BUCKET_LATENCY * beta);
    long b = LINK_BUCKET_MIN;
    while (b < LINK_BUCKET_MAX && (double)b < want) b *= 2;
    long cuts[OVERLAP_MAX_JOBS + 1];
    while (b > LINK_BUCKET_MIN && overlap_plan(counts, n_bufs, b, cuts) < 2) b /= 2;
    return b;
}

int link_tune(const overlap_fact *facts, int n, long tree_bytes, long bucket_bytes,
              const size_t *counts, int n_bufs, link_choice *out, char *why, size_t len) {
    int a = 0, b = 0;
    for (int k = 0; k < n; k++) {
        const double al = facts[k].alpha_s, be = facts[k].beta_s;
        if (be == 0) {
            snprintf(why, len, "links: node %ld has no probe; tree_bytes and buckets as set",
                     facts[k].id);
            return 0;
        }
        if (!(be > 0) || !isfinite(be) || !(al >= 0) || !isfinite(al)) { /* none the model takes */
            snprintf(why, len,
                     "links: node %ld's probe is not usable (%g s a hop, %g s a byte); tree_bytes "
                     "and buckets as set",
                     facts[k].id, al, be);
            return 0;
        }
        if (facts[k].alpha_s > facts[a].alpha_s) a = k;
        if (facts[k].beta_s > facts[b].beta_s) b = k;
    }
    const double alpha = facts[a].alpha_s, beta = facts[b].beta_s;
    *out = (link_choice){.alpha_s = alpha,
                         .beta_s = beta,
                         .alpha_id = facts[a].id,
                         .beta_id = facts[b].id,
                         .tree_cut = tree_cut_of(n, alpha, beta, tree_bytes),
                         .bucket_bytes = bucket_bytes == OVERLAP_AUTO
                                             ? bucket_of(n, alpha, beta, counts, n_bufs)
                                             : bucket_bytes};
    char tree[96];
    if (n < 4 || tree_bytes <= 0)
        snprintf(tree, sizeof tree, "no tree (%s)",
                 n < 4 ? "fewer than 4 members" : "tree_bytes = 0");
    else
        snprintf(tree, sizeof tree, "the tree takes all-reduces up to %ld B%s", out->tree_cut,
                 out->tree_cut == tree_bytes ? " (tree_bytes)" : "");
    char buckets[64];
    if (bucket_bytes == OVERLAP_AUTO)
        snprintf(buckets, sizeof buckets, "buckets of %ld KiB or more", out->bucket_bytes >> 10);
    else
        snprintf(buckets, sizeof buckets, "buckets as bucket_bytes = %ld sets", bucket_bytes);
    snprintf(why, len,
             "links: %.0f us a hop (node %ld), %.2f Gbit/s (node %ld), the slowest of %d members; "
             "%s; %s",
             1e6 * alpha, out->alpha_id, 8e-9 / beta, out->beta_id, n, tree, buckets);
    return 1;
}
