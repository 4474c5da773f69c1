/*
 * test_split_invariance.c: invariant I3 across real processes.
 *
 * The same seed and global batch are trained twice: by one node, and by three nodes on a
 * loopback ring whose proportional controller keeps re-splitting the batch under emulated
 * slowdowns. The per-iteration losses must agree to a relative 1e-6 for 50 iterations and the
 * final parameters (from each run's checkpoint) to 1e-6: how a batch is split never changes
 * which samples are used (I1) or the update (I2), only the order of float summation (measured:
 * losses within 6e-8 to 1e-7 relative, parameters within 1.2e-7). Every node of the
 * three-node run must report the same global loss as node 0, exactly: it comes from the
 * all-gathered stats, the same bytes on every node. A NaN anywhere fails.
 */
#include "tests/check.h"
#include "tests/ports.h"
#include "trainer/ckpt.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ITERS 50

static const char *common =
    "[cluster]\nsecurity = none\nconnect_timeout = 20\ntimeout = 20\n"
    "[train]\nmodel = mlp\nlayers = 784,32,10\ndataset = synthetic\nsamples = 4096\n"
    "eval_samples = 64\nglobal_batch = 96\nlr = 0.05\niterations = 50\nseed = 11\n"
    "hash_interval = 1\ncheckpoint = %s\nbucket_bytes = %ld\n"
    "[controller]\npolicy = proportional\ninterval = 1\ndeadband = 0\nmin_batch = 4\n";

static int read_losses(const char *path, double *loss, long **b_out, int nodes) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f) && n < ITERS) {
        const char *p = strstr(line, "\"loss\":");
        if (!p) continue;
        loss[n] = strtod(p + 7, NULL);
        const char *q = strstr(line, "\"b\":[");
        for (int k = 0; q && k < nodes && b_out; k++) {
            q += k ? 1 : 5;
            b_out[n][k] = strtol(q, (char **)&q, 10);
        }
        n++;
    }
    fclose(f);
    return n;
}

/* argv[1], optional: bucket_bytes for both runs; 1024 cuts the MLP's gradients into two
 * buckets, so the three-node run all-reduces the first while backward computes the second. */
int main(int argc, char **argv) {
    long bucket = argc > 1 ? atol(argv[1]) : 0;
    char dir[] = "/tmp/hetring-test-i3-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char one[512], three[512], ck1[512], ck3[512], cmd[4096];
    snprintf(one, sizeof one, "%s/one.ini", dir);
    snprintf(three, sizeof three, "%s/three.ini", dir);
    snprintf(ck1, sizeof ck1, "%s/one.ckpt", dir);
    snprintf(ck3, sizeof ck3, "%s/three.ckpt", dir);
    /* a claimed block of 8 ports (tests/ports.h): tests side by side never share one */
    int port = port_block();
    FILE *f = fopen(one, "w");
    fprintf(f, common, ck1, bucket);
    fprintf(f, "[node.0]\nhost = 127.0.0.1\nport = %d\n", port);
    fclose(f);
    f = fopen(three, "w");
    fprintf(f, common, ck3, bucket);
    for (int k = 0; k < 3; k++)
        fprintf(f, "[node.%d]\nhost = 127.0.0.1\nport = %d\nslowdown = %d\n", k, port + 1 + k,
                1 + 2 * k);
    fclose(f);

    snprintf(cmd, sizeof cmd, "timeout 120 %s run --conf %s --quiet --metrics %s/one.jsonl",
             HETRING, one, dir);
    CHECK(system(cmd) == 0, "one-node run failed: %s", cmd);
    snprintf(cmd, sizeof cmd,
             "timeout 120 %s local --conf %s -- --quiet --metrics %s/three-{id}.jsonl "
             "--summary %s/three.json >%s/log 2>&1",
             HETRING, three, dir, dir, dir);
    CHECK(system(cmd) == 0, "three-node run failed: %s (log in %s/log)", cmd, dir);
    /* the run must really have overlapped when asked to, or the test proves nothing */
    char summary[600], text[4096] = "";
    snprintf(summary, sizeof summary, "%s/three.json", dir);
    f = fopen(summary, "r");
    CHECK(f != NULL, "no summary %s", summary);
    if (f) {
        text[fread(text, 1, sizeof text - 1, f)] = 0;
        fclose(f);
    }
    const char *want = bucket > 0 ? "\"gradient_buckets\": 2," : "\"gradient_buckets\": 1,";
    CHECK(strstr(text, want) != NULL, "summary %s lacks %s", summary, want);

    double l1[ITERS], l3[ITERS], lk[ITERS];
    long bsplit[ITERS][3], *rows[ITERS];
    for (int i = 0; i < ITERS; i++) rows[i] = bsplit[i];
    char m1[600], m3[600];
    snprintf(m1, sizeof m1, "%s/one.jsonl", dir);
    snprintf(m3, sizeof m3, "%s/three-0.jsonl", dir);
    int n1 = read_losses(m1, l1, NULL, 1), n3 = read_losses(m3, l3, rows, 3);
    CHECK(n1 == ITERS && n3 == ITERS, "iterations recorded: %d and %d, expected %d", n1, n3, ITERS);
    double worst = 0;
    for (int i = 0; i < n1 && i < n3; i++) {
        double rel = fabs(l1[i] - l3[i]) / fmax(1e-12, fabs(l1[i]));
        if (isnan(rel) || isnan(worst))
            worst = NAN; /* a NaN loss stays the worst, and fails the check below */
        else if (rel > worst)
            worst = rel;
    }
    printf("loss over %d iterations: max relative difference %.3g (1 node vs 3 nodes)\n", ITERS,
           worst);
    CHECK(worst <= 1e-6, "losses diverge: max relative difference %.3g", worst);
    for (int k = 1; k < 3; k++) {
        snprintf(m3, sizeof m3, "%s/three-%d.jsonl", dir, k);
        int nk = read_losses(m3, lk, NULL, 3), same = 0;
        for (int i = 0; i < nk && i < n3; i++) same += lk[i] == l3[i];
        printf("node %d: %d of %d losses equal to node 0's\n", k, same, n3);
        CHECK(nk == n3 && same == n3, "node %d reports %d of %d losses equal to node 0's", k, same,
              n3);
    }
    /* the split must really have moved, or the test proves nothing */
    int moved = 0;
    for (int i = 1; i < n3; i++)
        for (int k = 0; k < 3; k++) moved |= bsplit[i][k] != bsplit[0][k];
    printf("split at iteration 0: %ld/%ld/%ld, at the end: %ld/%ld/%ld\n", bsplit[0][0],
           bsplit[0][1], bsplit[0][2], bsplit[n3 - 1][0], bsplit[n3 - 1][1], bsplit[n3 - 1][2]);
    CHECK(moved, "the controller never changed the split");
    /* The emulated slowdowns reach the controller: the first split follows the speeds measured
     * at the view's start (calibrate: the fastest of the passes each node times for 50 ms, which
     * a descheduled pass cannot spoil; trainer.probe), so the fast node starts with the larger
     * batch. Where the split goes
     * after that is the proportional policy's to decide, and on sub-millisecond steps it need
     * not favour the fast node: its adaptive b_max (Tyagi & Sharma) caps a node whose
     * throughput fell when its batch grew. A run beside the full suite showed it: node 0 took
     * 0.04 ms for 36 samples and 0.09 ms for 64, a real drop (~950 to ~700 samples/ms), so the
     * cap held it at 36 for 32 decisions while the slowest node took 40 (the recorded stats
     * replayed through ctrl give the same splits). The second half is printed, not checked. */
    CHECK(bsplit[0][0] > bsplit[0][2], "the first split %ld/%ld/%ld does not follow the slowdowns",
          bsplit[0][0], bsplit[0][1], bsplit[0][2]);
    long fast = 0, slow = 0;
    for (int i = n3 / 2; i < n3; i++) fast += bsplit[i][0], slow += bsplit[i][2];
    printf("second half: the fast node took %ld samples, the slowest %ld\n", fast, slow);

    /* final parameters, from the checkpoints both runs wrote */
    const long n_params = 784 * 32 + 32 + 32 * 10 + 10;
    float *p1 = malloc(sizeof *p1 * n_params), *p3 = malloc(sizeof *p3 * n_params);
    float *v = malloc(sizeof *v * n_params);
    int64_t split[3];
    char err[HR_ERRLEN] = "";
    ckpt_meta m = {
        .n_params = (uint64_t)n_params, .seed = 11, .global_batch = 96, .model = 2, .n_nodes = 1};
    CHECK(ckpt_load(ck1, &m, p1, v, split, 3, NULL, err, sizeof err) == HR_OK, "%s", err);
    m = (ckpt_meta){
        .n_params = (uint64_t)n_params, .seed = 11, .global_batch = 96, .model = 2, .n_nodes = 3};
    CHECK(ckpt_load(ck3, &m, p3, v, split, 3, NULL, err, sizeof err) == HR_OK, "%s", err);
    long nonfinite = 0;
    for (long i = 0; i < n_params; i++) nonfinite += !isfinite(p1[i]) + !isfinite(p3[i]);
    CHECK(nonfinite == 0, "%ld non-finite final parameters", nonfinite);
    CHECK_CLOSE(p1, p3, n_params, 1e-6, "final parameters, 1 node vs 3 nodes");
    free(p1);
    free(p3);
    free(v);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (!check_failures_ && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return check_exit();
}
