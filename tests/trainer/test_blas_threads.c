/*
 * test_blas_threads.c: [node] threads that OpenBLAS cannot run is refused at start-up. A node
 * asking for more BLAS threads than this OpenBLAS's build runs (its MAX_THREADS) fails in
 * train_init, naming the file, the key's line, the node and the cap; the process then reports
 * the count OpenBLAS runs. Exits 77 where OpenBLAS does not say its cap or runs 1000 threads.
 */
#include "tests/trainer/util.h"
#include "trainer/blas_pick.h"

#include <cblas.h>

enum { ASK = 1000 };

int main(int argc, char **argv) {
    (void)argc;
    test_blas_main(argv);
    const char *conf = openblas_get_config(), *m = strstr(conf, "MAX_THREADS=");
    long cap = m ? strtol(m + 12, NULL, 10) : 0;
    if (cap <= 0 || cap >= ASK) {
        printf("skipped: OpenBLAS (%s) does not cap its threads below %d\n", conf, ASK);
        return 77;
    }
    char dir[64], path[600], err[HR_ERRLEN] = "";
    tmpdir(dir, sizeof dir);
    FILE *f = cfg_create(dir, "c.ini", path, sizeof path);
    fprintf(f,
            "[cluster]\nsecurity = none\n[train]\nlayers = 784,8,10\nsamples = 256\n"
            "eval_samples = 16\nglobal_batch = 32\niterations = 1\n[node.3]\n"
            "host = 127.0.0.1\nport = 47991\nthreads = %d\n",
            ASK);
    cfg c;
    cfg_close_load(&c, f, path);
    train_config tc;
    app_train_config(&c, 0, NULL, &tc);
    trainer t;
    hr_status st = train_init(&t, &tc, err, sizeof err);
    char want[700], runs[64];
    snprintf(want, sizeof want, "%s:12: [node.3] threads = %d: ", path, ASK);
    snprintf(runs, sizeof runs, "OpenBLAS runs %ld thread(s), not the %d asked for", cap, ASK);
    CHECK(st == HR_ERR_CONFIG && strstr(err, want) && strstr(err, runs) &&
              strstr(err, "MAX_THREADS="),
          "threads = %d with OpenBLAS's MAX_THREADS=%ld: %d (%s)", ASK, cap, st, err);
    printf("refused as expected: %s\n", err);
    CHECK(blas_threads() == cap, "the count OpenBLAS runs: %ld, want %ld", blas_threads(), cap);
    if (st == HR_OK) train_free(&t);
    cfg_free(&c);
    rm_rf(dir);
    return check_exit();
}
