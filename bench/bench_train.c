/*
 * bench_train.c: `hetring bench train`, the speed of one node's training step.
 *
 * Times train_step (slice gather, forward, backward, SGD-momentum update) of one node on the
 * synthetic set and reports samples/s, the share of time in sgemm and the GFLOP/s reached.
 * Where PyTorch is found (--python PATH, else python3 on PATH, then /usr/bin/python3: the
 * first that imports torch), the same step in PyTorch (bench/torch_mlp.py) runs next, at the
 * same thread count, for comparison. The header names the BLAS kernels and the PyTorch used.
 */
#include "base/hr_log.h"
#include "base/hr_time.h"
#include "bench/bench.h"
#include "bench/bench_util.h"
#include "cli/cli.h"
#include "cluster/trainer_setup.h"
#include "trainer/train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *out) {
    fprintf(out, "usage: hetring bench train [--model mlp] [--layers L0,L1,...] [--batch B]\n"
                 "                           [--threads T] [--iters N] [--repeat R] [--json FILE]\n"
                 "                           [--no-torch] [--python PATH]\n"
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
                 "  --no-torch     skip the PyTorch comparison\n"
                 "  --python PATH  the Python with torch for the comparison (default: python3\n"
                 "                 on PATH, then /usr/bin/python3, the first that has torch)\n");
}

/* The options. */
typedef struct {
    const char *model;  /* --model */
    const char *layers; /* --layers, MLP widths */
    const char *json;   /* --json FILE or NULL */
    const char *python; /* --python PATH or NULL (search) */
    long batch;         /* samples per step */
    long threads;       /* BLAS threads */
    long iters;         /* timed steps per repeat */
    long repeat;        /* repeats; medians are reported */
    int no_torch;       /* skip the PyTorch comparison */
} tb_opts;

/* The medians over the repeats. */
typedef struct {
    double rate;  /* samples/s */
    double share; /* share of the step's time in sgemm */
    double gemm;  /* GFLOP/s inside sgemm */
} tb_speed;

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* v[n / 2] after sorting: the median for odd n, the upper of the middle two for even n. */
static double upper_median(double *v, long n) {
    qsort(v, (size_t)n, sizeof *v, cmp_dbl);
    return v[n / 2];
}

/* bench/torch_mlp.py: installed beside hetring-bench, or in the source tree (bench_own_file),
 * else next to the build tree. Returns 0, or -1 with `buf` empty. */
static int torch_script(char *buf, size_t len) {
    char exe[1024];
    if (access(bench_own_file("torch_mlp.py", buf, len), R_OK) == 0) return 0;
    if (cli_self_exe(exe, sizeof exe) == 0) {
        char *slash = strrchr(exe, '/');
        if (slash) *slash = 0;
        const char *cands[] = {"/../bench/", "/../../bench/", "/bench/"};
        for (int i = 0; i < 3; i++) {
            snprintf(buf, len, "%s%storch_mlp.py", exe, cands[i]);
            if (access(buf, R_OK) == 0) return 0;
        }
    }
    buf[0] = 0;
    return -1;
}

/* PyTorch's samples/s for the same MLP with interpreter `py`, or -1 with `why` saying why
 * not. */
static double torch_rate(const char *py, const tb_opts *o, char *why, size_t whylen) {
    char script[1200], batch[32], threads[32], iters[32];
    if (torch_script(script, sizeof script) != 0) {
        snprintf(why, whylen, "bench/torch_mlp.py not found under %s", HR_SOURCE_DIR);
        return -1;
    }
    snprintf(batch, sizeof batch, "%ld", o->batch);
    snprintf(threads, sizeof threads, "%ld", o->threads);
    snprintf(iters, sizeof iters, "%ld", o->iters);
    char *argv[] = {(char *)py, script, (char *)o->layers, batch, threads, iters, NULL};
    char out[4096] = "", err[512] = "";
    int rc = bench_capture(argv, 900, out, sizeof out, err, sizeof err);
    double rate = -1;
    if (rc == 0) json_number(out, "samples_per_s", &rate);
    if (rate > 0) return rate;
    snprintf(why, whylen, "%.300s %.300s exited %d%s%.300s", py, script, rc, err[0] ? ": " : "",
             err);
    return -1;
}

/* Returns -1 to go on, else the exit status (after --help or a usage error). */
static int parse_opts(tb_opts *o, int argc, char **argv) {
    *o = (tb_opts){.model = "mlp",
                   .layers = "784,512,512,10",
                   .batch = 512,
                   .threads = 1,
                   .iters = 50,
                   .repeat = 5};
    const bench_opt opts[] = {
        {.name = "model", .kind = BENCH_OPT_STR, .dst = &o->model},
        {.name = "layers", .kind = BENCH_OPT_STR, .dst = &o->layers},
        {.name = "batch", .kind = BENCH_OPT_LONG, .dst = &o->batch, .lo = 1, .hi = 1L << 24},
        {.name = "threads", .kind = BENCH_OPT_LONG, .dst = &o->threads, .lo = 1, .hi = 1024},
        {.name = "iters", .kind = BENCH_OPT_LONG, .dst = &o->iters, .lo = 1, .hi = 1L << 30},
        {.name = "repeat", .kind = BENCH_OPT_LONG, .dst = &o->repeat, .lo = 1, .hi = 100},
        {.name = "json", .kind = BENCH_OPT_OUT, .dst = &o->json},
        {.name = "no-torch", .kind = BENCH_OPT_FLAG, .dst = &o->no_torch},
        {.name = "python", .kind = BENCH_OPT_STR, .dst = &o->python},
        {0}};
    return bench_parse_opts("train", opts, usage, argc, argv);
}

/* One node's config and trainer for the options. Returns -1 when ready, else the exit status
 * (the error printed, `c` freed). */
static int setup(cfg *c, trainer *t, const tb_opts *o) {
    cfg_init(c);
    char err[HR_ERRLEN], set[300];
    snprintf(set, sizeof set, "train.model=%s", o->model);
    hr_status st = cfg_set(c, set, err, sizeof err);
    snprintf(set, sizeof set, "train.layers=%s", o->layers);
    if (st == HR_OK) st = cfg_set(c, set, err, sizeof err);
    if (st != HR_OK) {
        cfg_free(c);
        return cli_usage_error("bench train", "%s", err);
    }
    c->global_batch = o->batch;
    c->samples = o->batch * 8;
    c->eval_samples = 0;
    c->iterations = 1L << 40;
    c->nodes = calloc(1, sizeof *c->nodes);
    c->n_nodes = 1;
    c->nodes[0].threads = o->threads;
    c->nodes[0].slowdown = 1;
    c->nodes[0].device = -1; /* cpu (0 would be cuda:0) */
    snprintf(c->nodes[0].host, sizeof c->nodes[0].host, "127.0.0.1");
    train_config tc;
    app_train_config(c, 0, NULL, &tc);
    if ((st = train_init(t, &tc, err, sizeof err)) != HR_OK) {
        fprintf(stderr, "hetring bench train: %s\n", err);
        cfg_free(c);
        return st == HR_ERR_CONFIG ? CLI_USAGE : CLI_FAIL;
    }
    return -1;
}

/* Warm up, then --repeat times --iters profiled steps. Returns the status of the last step. */
static hr_status measure(trainer *t, const tb_opts *o, tb_speed *med) {
    train_iter r;
    hr_status st = HR_OK;
    for (int i = 0; i < 5; i++) train_step(t, &r); /* warm-up: first touch, BLAS threads */
    double *rate = calloc((size_t)o->repeat, sizeof *rate),
           *share = calloc((size_t)o->repeat, sizeof *share);
    double *gemm = calloc((size_t)o->repeat, sizeof *gemm);
    t->m.profile = 1;
    for (long k = 0; k < o->repeat; k++) {
        memset(&t->m.prof, 0, sizeof t->m.prof);
        double t0 = hr_now();
        for (long i = 0; i < o->iters; i++)
            if ((st = train_step(t, &r)) != HR_OK) break;
        double dt = hr_now() - t0;
        rate[k] = (double)(o->iters * o->batch) / dt;
        share[k] = t->m.prof.gemm_s / dt;
        gemm[k] = t->m.prof.gemm_flop / t->m.prof.gemm_s * 1e-9;
    }
    *med = (tb_speed){upper_median(rate, o->repeat), upper_median(share, o->repeat),
                      upper_median(gemm, o->repeat)};
    free(rate), free(share), free(gemm);
    return st;
}

/* --json FILE: the medians and, when it ran, PyTorch's rate (tr > 0). */
static int write_json(const tb_opts *o, const tb_speed *m, double flops, double tr) {
    FILE *f = fopen(o->json, "w");
    if (!f) {
        fprintf(stderr, "hetring bench train: cannot create %s\n", o->json);
        return -1;
    }
    fprintf(f,
            "{\"model\":\"%s\",\"layers\":\"%s\",\"batch\":%ld,\"threads\":%ld,"
            "\"samples_per_s\":%.1f,\"gemm_share\":%.4f,\"gflops\":%.2f,"
            "\"gemm_gflops\":%.2f,\"flops_per_sample\":%.0f",
            o->model, o->layers, o->batch, o->threads, m->rate, m->share, m->rate * flops * 1e-9,
            m->gemm, flops);
    if (tr > 0)
        fprintf(f, ",\"pytorch_samples_per_s\":%.1f,\"speedup_vs_pytorch\":%.3f", tr, m->rate / tr);
    fprintf(f, "}\n");
    return bench_close(f, o->json);
}

int bench_train(int argc, char **argv) {
    tb_opts o;
    int rc = parse_opts(&o, argc, argv);
    if (rc >= 0) return rc;
    /* PyTorch is looked for first, so that a bad --python stops the bench before it measures */
    int torch = !o.no_torch && strcmp(o.model, "mlp") == 0;
    bench_python py;
    char pydesc[1400] = "";
    if (torch) {
        int found = bench_find_python(o.python, &py);
        if (found == -2) return cli_usage_error("bench train", "%s", py.why);
        if (found == BENCH_STOPPED) return CLI_FAIL;
        bench_python_describe(&py, pydesc, sizeof pydesc);
    }
    cfg c;
    trainer t;
    if ((rc = setup(&c, &t, &o)) >= 0) return rc;
    char desc[160];
    model_describe(&t.m, desc, sizeof desc);
    tb_speed m;
    hr_status st = measure(&t, &o, &m);
    double flops = model_flops_per_sample(&t.m);
    printf("# hetring bench train: %s %s, batch %ld, %ld thread(s), %ld x %ld steps\n", o.model,
           desc, o.batch, o.threads, o.repeat, o.iters);
    bench_print_blas(stdout, "# ");
    if (torch) printf("# pytorch: %s\n", pydesc);
    printf("%-10s %12s %10s %12s %12s\n", "impl", "samples/s", "gemm%", "GFLOP/s", "gemm GFLOP/s");
    printf("%-10s %12.0f %9.1f%% %12.1f %12.1f\n", "hetring", m.rate, 100 * m.share,
           m.rate * flops * 1e-9, m.gemm);
    double tr = -1;
    if (torch && py.path[0]) {
        char why[1024];
        tr = torch_rate(py.path, &o, why, sizeof why);
        if (tr > 0)
            printf("%-10s %12.0f %10s %12.1f %12s\n# hetring / pytorch: %.2fx\n", "pytorch", tr,
                   "-", tr * flops * 1e-9, "-", m.rate / tr);
        else
            printf("# pytorch: the run failed (%s)\n", why);
    }
    rc = st == HR_OK ? CLI_OK : CLI_FAIL;
    if (o.json && write_json(&o, &m, flops, tr) != 0) rc = CLI_FAIL;
    train_free(&t);
    cfg_free(&c);
    return rc;
}
