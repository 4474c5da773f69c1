/*
 * test_elastic_metrics.c: the measures of `hetring bench elastic` (bench/elastic_metrics.c) on
 * crafted metrics files, whose every number is known:
 *   clean       3 nodes, node 2 killed after iteration 12 and back at iteration 25: detect_s,
 *               resume_s, join_s, state_bytes, the touched epochs, throughput before and
 *               after, final loss, no sample missing or duplicated, replicas identical
 *   late join   a join near the end shortens both throughput windows to what fits after it
 *   gap         an iteration no final member recorded inside the touched epochs counts B
 *               missing; one outside them does not; a node without a record of the iteration
 *               after the fault (it took it up as state) still gives throughput_before
 *   duplicate   an iteration recorded twice by one node counts B duplicated; splits that sum
 *               to B + 3 and B - 2 count 3 duplicated and 2 missing
 *   hashes      a final member with another param_hash, without an end record, or ending
 *               an iteration early makes the replicas not identical
 *   join        state_bytes from the joiner's own view record, else a member's naming it;
 *               a stopped node's stale record after SIGCONT is not its join
 *   no view     survivors that never installed a view without the target: detect_s and
 *               resume_s are NaN, not 0
 *   torn line   a last line cut short (a node killed while writing) is skipped
 */
#include "bench/elastic_metrics.h"
#include "tests/check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GB    8 /* global batch */
#define IPE   10
#define ITERS 40
#define FAULT 101.25 /* t_unix of the kill: after iteration 12 (t 101.2) */
#define BACK  102.5  /* t_unix of the restart */

static char g_dir[64];
static long g_join = 25; /* the iteration node 2 joins at */

/* What to craft into one node's file besides the clean run. */
typedef struct {
    long skip[4];     /* iterations left out (-1: none) */
    long twice;       /* an iteration written twice (-1: none) */
    long bad_iter;    /* an iteration whose split sums to B + bad_delta (-1: none) */
    int bad_delta;    /* the split's excess (negative: short) */
    const char *hash; /* param_hash of the end record; NULL: no end record */
    int no_view2;     /* leave out the view without node 2 */
    int torn;         /* end with a line cut short */
    long end_at;      /* iteration of the end record (0: ITERS) */
    int stale;        /* target: a record of its old view after SIGCONT (a stop, not a kill) */
    int no_own_view;  /* target: no view record of its own after the restart */
} craft;

/* t_unix of iteration i on the survivors: 0.1 s apart, 0.5 s lost to the fault, then 0.2 s
 * apart from iteration 30 on (the after-throughput is half the before). */
static double t_of(long i) {
    double t = 100 + 0.1 * (double)i + (i >= 13 ? 0.5 : 0);
    return i >= 30 ? t_of(29) + 0.2 * (double)(i - 29) : t;
}

static void iter_line(FILE *f, long id, long i, long view, const char *nodes, int n, int delta) {
    fprintf(f, "{\"iter\":%ld,\"epoch\":%ld,\"loss\":%.4f,\"b\":[", i, i / IPE,
            2.0 - 0.01 * (double)i);
    for (int k = 0; k < n; k++)
        fprintf(f, "%s%d", k ? "," : "", GB / n + (k == 0 ? GB % n + delta : 0));
    fprintf(
        f,
        "],\"t\":[0.01],\"wall_s\":1,\"t_unix\":%.6f,\"node\":%ld,\"view\":%ld,\"nodes\":[%s]}\n",
        t_of(i) + 0.001 * (double)id, id, view, nodes);
}

static void view_line(FILE *f, long id, long epoch, const char *nodes, long iter,
                      const char *joined, double bytes, double t) {
    fprintf(f,
            "{\"event\":\"view\",\"epoch\":%ld,\"nodes\":[%s],\"iter\":%ld,\"left\":[],"
            "\"joined\":[%s],\"state_bytes\":%.0f,\"elect_s\":0.1,\"t_unix\":%.6f,\"node\":%ld}\n",
            epoch, nodes, iter, joined, bytes, t, id);
}

static int skipped(const craft *c, long i) {
    for (int k = 0; k < 4; k++)
        if (c->skip[k] == i) return 1;
    return 0;
}

/* A survivor (0 or 1): views 1 (all), 2 (without 2, from iteration 13), 3 (2 joins at 25). */
static void write_survivor(long id, const craft *c) {
    char path[128];
    snprintf(path, sizeof path, "%s/m%ld.jsonl", g_dir, id);
    FILE *f = fopen(path, "w");
    view_line(f, id, 1, "0,1,2", 0, "", 0, 99.9);
    for (long i = 0; i < ITERS; i++) {
        if (i == 13 && !c->no_view2) view_line(f, id, 2, "0,1", 13, "", 0, 101.5 + 0.1 * id);
        if (i == g_join) view_line(f, id, 3, "0,1,2", g_join, "2", 4000, 102.8);
        long view = i < 13 ? 1 : i < g_join ? 2 : 3;
        const char *nodes = view == 2 ? "0,1" : "0,1,2";
        int n = view == 2 ? 2 : 3;
        if (skipped(c, i)) continue;
        iter_line(f, id, i, view, nodes, n, i == c->bad_iter ? c->bad_delta : 0);
        if (i == c->twice) iter_line(f, id, i, view, nodes, n, 0);
    }
    if (c->hash)
        fprintf(f,
                "{\"event\":\"end\",\"iter\":%ld,\"param_hash\":\"%s\",\"t_unix\":104,"
                "\"node\":%ld,\"view\":3,\"nodes\":[0,1,2]}\n",
                c->end_at ? c->end_at : ITERS, c->hash, id);
    if (c->torn) /* iteration 20 again, cut short before its last field ended */
        fprintf(f,
                "{\"iter\":20,\"epoch\":2,\"loss\":1.8,\"b\":[4,4],\"t_unix\":104.9,"
                "\"node\":%ld,\"view\":3,\"nodes\":[0,1",
                id);
    fclose(f);
}

/* Node 2: iterations 0..12, killed; restarted, its own view 3 record, then 25.. */
static void write_target(const craft *c) {
    char path[128];
    snprintf(path, sizeof path, "%s/m2.jsonl", g_dir);
    FILE *f = fopen(path, "w");
    view_line(f, 2, 1, "0,1,2", 0, "", 0, 99.9);
    for (long i = 0; i <= 12; i++) iter_line(f, 2, i, 1, "0,1,2", 3, 0);
    if (c->stale)
        fprintf(f,
                "{\"iter\":13,\"epoch\":1,\"loss\":1.87,\"b\":[3,3,2],\"t_unix\":%.6f,"
                "\"node\":2,\"view\":1,\"nodes\":[0,1,2]}\n",
                BACK + 0.05);
    if (!c->no_own_view) view_line(f, 2, 3, "0,1,2", g_join, "", 4096, 102.9);
    for (long i = g_join; i < ITERS; i++) iter_line(f, 2, i, 3, "0,1,2", 3, 0);
    if (c->hash)
        fprintf(f,
                "{\"event\":\"end\",\"iter\":%d,\"param_hash\":\"aaaa\",\"t_unix\":104.5,"
                "\"node\":2,\"view\":3,\"nodes\":[0,1,2]}\n",
                ITERS);
    fclose(f);
}

/* Write the three files (c0, c1 for the survivors, c2 for the target; NULL: clean), load and
 * analyse. */
static void analyse3(const craft *c0, const craft *c1, const craft *c2, em_result *r) {
    const craft clean = {.skip = {-1, -1, -1, -1}, .twice = -1, .bad_iter = -1, .hash = "aaaa"};
    write_survivor(0, c0 ? c0 : &clean);
    write_survivor(1, c1 ? c1 : &clean);
    write_target(c2 ? c2 : &clean);
    em_node nodes[3];
    for (int k = 0; k < 3; k++) {
        char path[128];
        snprintf(path, sizeof path, "%s/m%d.jsonl", g_dir, k);
        CHECK(em_node_load(&nodes[k], k, path) == 0, "cannot load %s", path);
    }
    em_fault f = {.kill = 1,
                  .target = 2,
                  .fault_t = FAULT,
                  .restart_t = BACK,
                  .B = GB,
                  .ipe = IPE,
                  .iters = ITERS};
    em_analyse(nodes, 3, &f, r);
    for (int k = 0; k < 3; k++) em_node_free(&nodes[k]);
}

static void analyse(const craft *c0, const craft *c1, em_result *r) {
    analyse3(c0, c1, NULL, r);
}

#define CHECK_NEAR(v, want, what)                                                                  \
    CHECK(fabs((v) - (want)) <= 1e-6, "%s = %.9g, expected %.9g (diff %.3g)", what, (double)(v),   \
          (double)(want), fabs((double)(v) - (double)(want)))

static void test_clean(void) {
    em_result r;
    analyse(NULL, NULL, &r);
    CHECK(r.final_iter == ITERS && r.n_final == 3, "final iter %ld, %d members", r.final_iter,
          r.n_final);
    CHECK(r.replicas_identical, "replicas should be identical");
    CHECK(r.excl_view == 2, "view without node 2: %ld", r.excl_view);
    /* the later survivor installed view 2 at 101.6; its first iteration there at t_of(13)+0.001 */
    CHECK_NEAR(r.detect_s, 101.6 - FAULT, "detect_s");
    CHECK_NEAR(r.resume_s, t_of(13) + 0.001 - FAULT, "resume_s");
    CHECK_NEAR(r.join_s, t_of(25) + 0.002 - BACK, "join_s");
    CHECK_NEAR(r.state_bytes, 4096, "state_bytes");
    CHECK(r.touched_from == 10 && r.touched_to == 30, "touched [%ld, %ld), expected [10, 30)",
          r.touched_from, r.touched_to);
    CHECK(r.samples_missing == 0 && r.samples_duplicated == 0, "missing %ld, duplicated %ld",
          r.samples_missing, r.samples_duplicated);
    /* W = min(40/4, 13 - (40/20 + 1)) = 10 iterations of B = 8 samples */
    CHECK_NEAR(r.throughput_before, 10.0 * GB / (t_of(12) - t_of(2)), "throughput_before");
    CHECK_NEAR(r.throughput_after, 10.0 * GB / (t_of(39) - t_of(29)), "throughput_after");
    CHECK_NEAR(r.throughput_after / r.throughput_before, 0.5, "after/before");
    CHECK_NEAR(r.final_loss, 2.0 - 0.01 * 39, "final_loss");
}

/* A late join shortens both windows: W = 40 - (33 + 3) = 4. */
static void test_late_join(void) {
    em_result r;
    g_join = 33;
    analyse(NULL, NULL, &r);
    g_join = 25;
    CHECK(r.window == 4, "window %ld, expected 4", r.window);
    CHECK_NEAR(r.throughput_before, 4.0 * GB / (t_of(12) - t_of(8)),
               "throughput_before, late join");
    CHECK_NEAR(r.throughput_after, 4.0 * GB / (t_of(39) - t_of(35)), "throughput_after, late join");
}

static void test_gap(void) {
    craft c = {.skip = {17, 5, -1, -1}, .twice = -1, .bad_iter = -1, .hash = "aaaa"};
    em_result r;
    analyse(&c, &c, &r); /* both survivors lack 17 (touched) and 5 (before the fault's epoch) */
    CHECK(r.samples_missing == GB && r.samples_duplicated == 0,
          "gap: missing %ld (expected %d), duplicated %ld", r.samples_missing, GB,
          r.samples_duplicated);
    craft one = {.skip = {17, -1, -1, -1}, .twice = -1, .bad_iter = -1, .hash = "aaaa"};
    analyse(&one, NULL, &r); /* node 1 holds 17: the union has it */
    CHECK(r.samples_missing == 0, "one node's gap is covered by the other: missing %ld",
          r.samples_missing);
    /* node 0 took iteration 13 up as state (no record of its own): the window before the fault
     * still ends at its last record before it */
    craft took = {.skip = {13, -1, -1, -1}, .twice = -1, .bad_iter = -1, .hash = "aaaa"};
    analyse(&took, NULL, &r);
    CHECK(r.samples_missing == 0 && r.fault_iter == 13, "missing %ld, fault_iter %ld",
          r.samples_missing, r.fault_iter);
    CHECK_NEAR(r.throughput_before, 10.0 * GB / (t_of(12) - t_of(2)),
               "throughput_before without the reference node's record after the fault");
}

static void test_duplicate(void) {
    craft c = {.skip = {-1, -1, -1, -1}, .twice = 20, .bad_iter = -1, .hash = "aaaa"};
    em_result r;
    analyse(&c, NULL, &r);
    CHECK(r.samples_duplicated == GB && r.samples_missing == 0, "twice: duplicated %ld missing %ld",
          r.samples_duplicated, r.samples_missing);
    craft lng = {
        .skip = {-1, -1, -1, -1}, .twice = -1, .bad_iter = 15, .bad_delta = 3, .hash = "aaaa"};
    craft shrt = {
        .skip = {-1, -1, -1, -1}, .twice = -1, .bad_iter = 16, .bad_delta = -2, .hash = "aaaa"};
    analyse(&lng, &shrt, &r);
    CHECK(r.samples_duplicated == 3 && r.samples_missing == 2,
          "splits B+3 and B-2: duplicated %ld (3), missing %ld (2)", r.samples_duplicated,
          r.samples_missing);
}

static void test_hashes(void) {
    craft other = {.skip = {-1, -1, -1, -1}, .twice = -1, .bad_iter = -1, .hash = "bbbb"};
    em_result r;
    analyse(NULL, &other, &r);
    CHECK(!r.replicas_identical, "different param_hash: replicas reported identical");
    craft none = {.skip = {-1, -1, -1, -1}, .twice = -1, .bad_iter = -1, .hash = NULL};
    analyse(NULL, &none, &r);
    CHECK(!r.replicas_identical, "a final member without an end record: reported identical");
    craft short_run = {
        .skip = {-1, -1, -1, -1}, .twice = -1, .bad_iter = -1, .hash = "aaaa", .end_at = ITERS - 1};
    analyse(NULL, &short_run, &r);
    CHECK(!r.replicas_identical,
          "a final member that ended an iteration early: reported identical");
}

/* The joiner's own view record gives state_bytes; without it, a member's naming it. A stopped
 * node's stale record of its old view after SIGCONT is not its join. */
static void test_join(void) {
    craft stale = {.skip = {-1, -1, -1, -1},
                   .twice = -1,
                   .bad_iter = -1,
                   .hash = "aaaa",
                   .stale = 1,
                   .no_own_view = 1};
    em_result r;
    analyse3(NULL, NULL, &stale, &r);
    CHECK_NEAR(r.join_s, t_of(25) + 0.002 - BACK, "join_s after a stale record");
    CHECK_NEAR(r.state_bytes, 4000, "state_bytes from a member's view record");
}

static void test_no_view(void) {
    craft c = {
        .skip = {-1, -1, -1, -1}, .twice = -1, .bad_iter = -1, .hash = "aaaa", .no_view2 = 1};
    em_result r;
    analyse(&c, &c, &r);
    CHECK(isnan(r.detect_s) && isnan(r.resume_s), "no view without the target: detect %g resume %g",
          r.detect_s, r.resume_s);
    /* the join is still the target's first record after its restart */
    CHECK_NEAR(r.join_s, t_of(25) + 0.002 - BACK, "join_s without the survivors' view");
}

static void test_torn(void) {
    craft c = {.skip = {-1, -1, -1, -1}, .twice = -1, .bad_iter = -1, .hash = "aaaa", .torn = 1};
    em_result r;
    analyse(&c, NULL, &r);
    CHECK(r.samples_missing == 0 && r.samples_duplicated == 0 && r.replicas_identical,
          "torn last line: missing %ld duplicated %ld identical %d", r.samples_missing,
          r.samples_duplicated, r.replicas_identical);
    CHECK_NEAR(r.final_loss, 2.0 - 0.01 * 39, "final_loss with a torn line");
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/hetring-test-em-XXXXXX");
    if (!mkdtemp(g_dir)) return perror("mkdtemp"), 1;
    test_clean();
    test_late_join();
    test_gap();
    test_duplicate();
    test_hashes();
    test_join();
    test_no_view();
    test_torn();
    for (int k = 0; k < 3; k++) {
        char path[128];
        snprintf(path, sizeof path, "%s/m%d.jsonl", g_dir, k);
        unlink(path);
    }
    rmdir(g_dir);
    return check_exit();
}
