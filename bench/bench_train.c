/*
 * bench_train.c: `hetring bench train`, the speed of one node's training step.
 *
 * Times train_step (slice gather, forward, backward, SGD-momentum update) of one node on the
 * synthetic set and reports samples/s, the share of time in sgemm and the GFLOP/s reached.
 * With /usr/bin/python3 and torch importable, the same step in PyTorch (bench/torch_mlp.py)
 * runs next, at the same thread count, for comparison.
 */
#include "bench.h"
#include "bench_util.h"
#include "cli.h"
#include "hr_log.h"
#include "train.h"
#include "trainer_setup.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void usage(FILE *out) {
    fprintf(out, "usage: hetring bench train [--model mlp] [--layers L0,L1,...] [--batch B]\n"
                 "                           [--threads T] [--iters N] [--repeat R] [--json FILE]\n"
                 "                           [--no-torch]\n"
                 "\n"
                 "Time one node's training step (forward, backward, SGD momentum).\n"
                 "\n"
                 "  --model M      linreg, softmax, mlp or cnn (default mlp)\n"
                 "  --layers L     MLP widths (default 784,512,512,10)\n"
                 "  --batch B      samples per step (default 512)\n"
                 "  --threads T    BLAS threads (default 1)\n"
                 "  --iters N      timed steps per repeat (default 50)\n"
                 "  --repeat R     repeats; the median is reported (default 5)\n"
                 "  --json FILE    write the results as JSON\n"
                 "  --no-torch     skip the PyTorch comparison\n");
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* PyTorch's samples/s for the same MLP, or -1 when torch is not available. */
static double torch_rate(const char *layers, long batch, long threads, long iters) {
    char exe[1024], script[1200], cmd[2600];
    if (cli_self_exe(exe, sizeof exe) != 0) return -1;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    /* the script lives in the source tree; the executable in the build tree below it */
    const char *cands[] = {"/../bench/", "/../../bench/", "/bench/"};
    script[0] = 0;
    for (int i = 0; i < 3 && !script[0]; i++) {
        snprintf(script, sizeof script, "%s%storch_mlp.py", exe, cands[i]);
        if (access(script, R_OK) != 0) script[0] = 0;
    }
    if (!script[0] || access("/usr/bin/python3", X_OK) != 0) return -1;
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' %s %ld %ld %ld 2>/dev/null", script, layers,
             batch, threads, iters);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    char line[512] = "";
    double rate = -1;
    if (fgets(line, sizeof line, p)) {
        char *s = strstr(line, "\"samples_per_s\":");
        if (s) rate = strtod(s + 16, NULL);
    }
    if (pclose(p) != 0) rate = -1;
    return rate;
}

int bench_train(int argc, char **argv) {
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'}, {"layers", required_argument, 0, 'l'},
        {"batch", required_argument, 0, 'b'}, {"threads", required_argument, 0, 't'},
        {"iters", required_argument, 0, 'n'}, {"repeat", required_argument, 0, 'r'},
        {"json", required_argument, 0, 'j'},  {"no-torch", no_argument, 0, 'T'},
        {"help", no_argument, 0, 'h'},        {0, 0, 0, 0}};
    const char *model_name = "mlp", *layers = "784,512,512,10", *json = NULL;
    long batch = 512, threads = 1, iters = 50, repeat = 5;
    int use_torch = 1, ch, bad = 0;
    optind = 1;
    while (!bad && (ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 'h':
            usage(stdout);
            return CLI_OK;
        case 'm':
            model_name = optarg;
            break;
        case 'l':
            layers = optarg;
            break;
        case 'b':
            bad = bench_long_opt("train", "batch", optarg, 1, 1L << 24, &batch);
            break;
        case 't':
            bad = bench_long_opt("train", "threads", optarg, 0, 1024, &threads);
            break;
        case 'n':
            bad = bench_long_opt("train", "iters", optarg, 1, 1L << 30, &iters);
            break;
        case 'r':
            bad = bench_long_opt("train", "repeat", optarg, 1, 100, &repeat);
            break;
        case 'j':
            json = optarg;
            break;
        case 'T':
            use_torch = 0;
            break;
        default:
            usage(stderr);
            return CLI_USAGE;
        }
    }
    if (bad) return CLI_USAGE;
    if (optind < argc)
        return cli_usage_error("bench train", "unexpected argument '%s'", argv[optind]);

    cfg c;
    cfg_init(&c);
    char err[HR_ERRLEN], set[300];
    snprintf(set, sizeof set, "train.model=%s", model_name);
    hr_status st = cfg_set(&c, set, err, sizeof err);
    snprintf(set, sizeof set, "train.layers=%s", layers);
    if (st == HR_OK) st = cfg_set(&c, set, err, sizeof err);
    if (st != HR_OK) {
        cfg_free(&c);
        return cli_usage_error("bench train", "%s", err);
    }
    c.global_batch = batch;
    c.samples = batch * 8;
    c.eval_samples = 0;
    c.iterations = 1L << 40;
    c.nodes = calloc(1, sizeof *c.nodes);
    c.n_nodes = 1;
    c.nodes[0].threads = threads;
    c.nodes[0].slowdown = 1;
    snprintf(c.nodes[0].host, sizeof c.nodes[0].host, "127.0.0.1");
    trainer t;
    train_config tc;
    app_train_config(&c, 0, &tc);
    if ((st = train_init(&t, &tc, NULL, err, sizeof err)) != HR_OK) {
        fprintf(stderr, "hetring bench train: %s\n", err);
        cfg_free(&c);
        return st == HR_ERR_CONFIG ? CLI_USAGE : CLI_FAIL;
    }
    char desc[160];
    model_describe(&t.m, desc, sizeof desc);
    train_iter r;
    for (int i = 0; i < 5; i++) train_step(&t, &r); /* warm-up: first touch, BLAS threads */
    double *rate = calloc((size_t)repeat, sizeof *rate),
           *share = calloc((size_t)repeat, sizeof *share);
    double *gemm = calloc((size_t)repeat, sizeof *gemm);
    t.m.profile = 1;
    for (long k = 0; k < repeat; k++) {
        memset(&t.m.prof, 0, sizeof t.m.prof);
        double t0 = now_s();
        for (long i = 0; i < iters; i++)
            if ((st = train_step(&t, &r)) != HR_OK) break;
        double dt = now_s() - t0;
        rate[k] = (double)(iters * batch) / dt;
        share[k] = t.m.prof.gemm_s / dt;
        gemm[k] = t.m.prof.gemm_flop / t.m.prof.gemm_s * 1e-9;
    }
    double flops = model_flops_per_sample(&t.m);
    qsort(rate, (size_t)repeat, sizeof *rate, cmp_dbl);
    qsort(share, (size_t)repeat, sizeof *share, cmp_dbl);
    qsort(gemm, (size_t)repeat, sizeof *gemm, cmp_dbl);
    double med = rate[repeat / 2], sh = share[repeat / 2], gg = gemm[repeat / 2];
    printf("# hetring bench train: %s %s, batch %ld, %ld thread(s), %ld x %ld steps\n", model_name,
           desc, batch, threads, repeat, iters);
    printf("%-10s %12s %10s %12s %12s\n", "impl", "samples/s", "gemm%", "GFLOP/s", "gemm GFLOP/s");
    printf("%-10s %12.0f %9.1f%% %12.1f %12.1f\n", "hetring", med, 100 * sh, med * flops * 1e-9,
           gg);
    double tr = -1;
    if (use_torch && strcmp(model_name, "mlp") == 0) {
        tr = torch_rate(layers, batch, threads, iters);
        if (tr > 0)
            printf("%-10s %12.0f %10s %12.1f %12s\n# hetring / pytorch: %.2fx\n", "pytorch", tr,
                   "-", tr * flops * 1e-9, "-", med / tr);
        else
            printf("# pytorch: not available (/usr/bin/python3 with torch)\n");
    }
    int rc = st == HR_OK ? CLI_OK : CLI_FAIL;
    if (json) {
        FILE *f = fopen(json, "w");
        if (!f) {
            fprintf(stderr, "hetring bench train: cannot create %s\n", json);
            rc = CLI_FAIL;
        } else {
            fprintf(f,
                    "{\"model\":\"%s\",\"layers\":\"%s\",\"batch\":%ld,\"threads\":%ld,"
                    "\"samples_per_s\":%.1f,\"gemm_share\":%.4f,\"gflops\":%.2f,"
                    "\"gemm_gflops\":%.2f,\"flops_per_sample\":%.0f",
                    model_name, layers, batch, threads, med, sh, med * flops * 1e-9, gg, flops);
            if (tr > 0)
                fprintf(f, ",\"pytorch_samples_per_s\":%.1f,\"speedup_vs_pytorch\":%.3f", tr,
                        med / tr);
            fprintf(f, "}\n");
            fclose(f);
        }
    }
    free(rate), free(share), free(gemm);
    train_free(&t);
    cfg_free(&c);
    return rc;
}
