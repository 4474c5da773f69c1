/*
 * test_link_tune.c: the view's tree cut-off and bucket size from its measured links
 * (cluster/link_tune.h), as a table of (members, alpha, beta, tree_bytes, layout) -> choice.
 *
 * The expected figures are worked out by hand from the model link_tune.h states, so a changed
 * divisor, hop count or clamp fails a row; besides the table:
 *  - the slowest member's figures count (the largest alpha and beta, each named);
 *  - a member without a probe, or with figures the model cannot take (NaN, inf, a negative
 *    alpha), chooses nothing, and says which;
 *  - the bucket size halves while the plan would have one bucket, and never goes below the
 *    minimum.
 */
#include "check.h"
#include "cluster/link_tune.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* The demo MLP's buffers (784-512-512-10: weights and bias of each layer), in floats. */
static const size_t mlp[3] = {784 * 512 + 512, 512 * 512 + 512, 512 * 10 + 10};
/* 20 buffers of 1 Mi floats (80 MiB): room for the largest buckets */
static size_t big[20];

typedef struct {
    const char *name;
    int n;
    double alpha, beta; /* every member's alike */
    long tree_bytes;
    long bucket; /* bucket_bytes: OVERLAP_AUTO, or as set */
    const size_t *counts;
    int n_bufs;
    long want_cut, want_bucket;
    const char *want_why; /* a part of the line */
} row;

static void fill(overlap_fact *f, int n, double alpha, double beta) {
    for (int k = 0; k < n; k++)
        f[k] = (overlap_fact){.id = 10 + k, .alpha_s = alpha, .beta_s = beta};
}

static void table(void) {
    for (int i = 0; i < 20; i++) big[i] = 1u << 20;
    const row rows[] = {
        /* 1 Gbit/s, 50 us: S* = (6 - 4)/(8 - 2) * 6250 = 2083 B; n*alpha/(0.1*beta) = 250 kB
         * -> 256 KiB, which cuts the MLP in two */
        {"1 Gbit/s, 4 members", 4, 50e-6, 8e-9, 65536, OVERLAP_AUTO, mlp, 3, 2083, 256L << 10,
         "50 us a hop (node 10), 1.00 Gbit/s (node 10), the slowest of 4 members; the tree takes "
         "all-reduces up to 2083 B; buckets of 256 KiB or more"},
        /* 10 Gbit/s: S* = 20833 B; 2.5 MB -> 4 MiB, one bucket for the MLP's 2.68 MB, so 2 MiB
         * (one bucket still: 1.07 MB of the last two layers is less), then 1 MiB: two */
        {"10 Gbit/s, MLP", 4, 50e-6, 0.8e-9, 65536, OVERLAP_AUTO, mlp, 3, 20833, 1L << 20,
         "up to 20833 B"},
        /* the same links and a gradient of 80 MiB: 4 MiB (the maximum) kept */
        {"10 Gbit/s, large model", 4, 50e-6, 0.8e-9, 65536, OVERLAP_AUTO, big, 20, 20833, 4L << 20,
         "buckets of 4096 KiB"},
        /* a fast link: S* = 0.8 * 100e-6/0.08e-9 = 1e6 at 8 members, capped by tree_bytes */
        {"100 Gbit/s, 8 members", 8, 100e-6, 0.08e-9, 65536, OVERLAP_AUTO, big, 20, 65536, 4L << 20,
         "up to 65536 B (tree_bytes)"},
        /* 32 members: d = 5, H = 62: S* = 52/18 * 6250 = 18055 B; 32*50e-6/(0.1*8e-9) = 2 MB */
        {"1 Gbit/s, 32 members", 32, 50e-6, 8e-9, 65536, OVERLAP_AUTO, big, 20, 18055, 2L << 20,
         "up to 18055 B"},
        /* no tree below 4 members, or with tree_bytes = 0; buckets as ever */
        {"3 members", 3, 50e-6, 8e-9, 65536, OVERLAP_AUTO, mlp, 3, 0, 256L << 10,
         "no tree (fewer than 4"},
        {"tree_bytes = 0", 4, 50e-6, 8e-9, 0, OVERLAP_AUTO, mlp, 3, 0, 256L << 10,
         "no tree (tree_bytes = 0)"},
        /* no latency at all: the least bucket, a zero cut */
        {"alpha 0", 4, 0, 8e-9, 65536, OVERLAP_AUTO, mlp, 3, 0, 256L << 10, "up to 0 B"},
        /* a gradient too small for two buckets of the minimum: the minimum (one bucket) */
        {"small gradient", 4, 50e-6, 0.8e-9, 65536, OVERLAP_AUTO, mlp + 2, 1, 20833, 256L << 10,
         "buckets of 256 KiB"},
        /* a bucket_bytes of its own is kept, whatever the links */
        {"bucket_bytes set", 4, 50e-6, 0.8e-9, 65536, 300000, mlp, 3, 20833, 300000,
         "buckets as bucket_bytes = 300000 sets"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const row *w = &rows[i];
        overlap_fact f[64];
        fill(f, w->n, w->alpha, w->beta);
        link_choice c;
        char why[384];
        const int ok =
            link_tune(f, w->n, w->tree_bytes, w->bucket, w->counts, w->n_bufs, &c, why, sizeof why);
        printf("%-24s %s\n", w->name, why);
        CHECK(ok == 1, "%s: no choice", w->name);
        CHECK(c.tree_cut == w->want_cut, "%s: tree cut %ld, expected %ld", w->name, c.tree_cut,
              w->want_cut);
        CHECK(c.bucket_bytes == w->want_bucket, "%s: buckets of %ld, expected %ld", w->name,
              c.bucket_bytes, w->want_bucket);
        CHECK(strstr(why, w->want_why) != NULL, "%s: \"%s\" lacks \"%s\"", w->name, why,
              w->want_why);
    }
}

/* The slowest member's alpha and beta, each named; a member without a probe: no choice. */
static void members(void) {
    overlap_fact f[4];
    fill(f, 4, 50e-6, 0.8e-9);
    f[2].alpha_s = 400e-6; /* node 12: the most latency */
    f[1].beta_s = 8e-9;    /* node 11: the least bandwidth */
    link_choice c;
    char why[384];
    CHECK(link_tune(f, 4, 65536, OVERLAP_AUTO, mlp, 3, &c, why, sizeof why) == 1, "no choice");
    printf("mixed: %s\n", why);
    CHECK(c.alpha_s == 400e-6 && c.alpha_id == 12, "alpha %g of node %ld", c.alpha_s, c.alpha_id);
    CHECK(c.beta_s == 8e-9 && c.beta_id == 11, "beta %g of node %ld", c.beta_s, c.beta_id);
    /* S* = 1/3 * 400e-6/8e-9 = 16666 B from the two slowest figures together */
    CHECK(c.tree_cut == 16666, "tree cut %ld from node 12's alpha and node 11's beta", c.tree_cut);
    f[3].beta_s = 0; /* node 13 probed nothing (yet) */
    c.tree_cut = -7;
    CHECK(link_tune(f, 4, 65536, OVERLAP_AUTO, mlp, 3, &c, why, sizeof why) == 0,
          "chose without node 13");
    CHECK(c.tree_cut == -7, "the choice was written without every probe");
    CHECK(strstr(why, "node 13 has no probe") != NULL, "why: %s", why);
    /* figures the model cannot take (not finite, a negative latency), wherever they sit among
     * the members, choose nothing either: the same on every member, and never a cut outside
     * [0, tree_bytes] */
    const double bad[][2] = {{NAN, 0.8e-9}, {50e-6, INFINITY}, {INFINITY, INFINITY},
                             {-1, 0.8e-9},  {50e-6, NAN},      {50e-6, -1e-9}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        for (int at = 0; at < 4; at++) {
            fill(f, 4, 50e-6, 0.8e-9);
            f[at].alpha_s = bad[i][0], f[at].beta_s = bad[i][1];
            c.tree_cut = -7;
            const int ok = link_tune(f, 4, 65536, OVERLAP_AUTO, mlp, 3, &c, why, sizeof why);
            CHECK(ok == 0 && c.tree_cut == -7,
                  "alpha %g, beta %g at node %d: chose (%d), tree cut %ld: %s", bad[i][0],
                  bad[i][1], 10 + at, ok, c.tree_cut, why);
            char want[64];
            snprintf(want, sizeof want, "node %d's probe is not usable", 10 + at);
            CHECK(strstr(why, want) != NULL, "why: %s", why);
        }
}

int main(void) {
    table();
    members();
    return check_exit();
}
