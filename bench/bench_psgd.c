/*
 * bench_psgd.c: `hetring bench powersgd`, the low-rank path's products (cluster/powersgd.h)
 * on one thread and on several.
 *
 * For each matrix shape, times what a node computes per matrix and step of wire = powersgd:
 * P = M Q (project), q = M^T P (back, after the orthonormalisation), and the step P Q'^T with
 * the error feedback M - P q^T (expand), each the median of --repeat runs, at each thread
 * count of --threads, and checks that every thread count gives the bits of one thread (exit
 * status 1 otherwise). The thread counts are what [node] threads gives the path.
 */
#include "base/hr_time.h"
#include "bench/bench.h"
#include "bench/bench_util.h"
#include "cli/cli.h"
#include "cluster/powersgd.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *out) {
    fprintf(out, "usage: hetring bench powersgd [--shapes RxC,...] [--rank R] [--threads T,...]\n"
                 "                              [--repeat N]\n"
                 "\n"
                 "Time the low-rank wire's products (project, back, expand with the error\n"
                 "feedback) per matrix on each thread count, and check that every count gives\n"
                 "the bits of one thread.\n"
                 "\n"
                 "  --shapes S    matrices, rows x cols (default 512x784,512x4608,2048x2048:\n"
                 "                the demo MLP's first, ResNet-18's largest, a square one)\n"
                 "  --rank R      rank, 1..64 (default 4, [cluster] powersgd_rank's default)\n"
                 "  --threads T   thread counts, 1..64 (default 1,2,4,8,16)\n"
                 "  --repeat N    runs per figure; the median is reported (default 7)\n");
}

/* The products' seconds on one shape and thread count, and their outputs. */
typedef struct {
    float *p, *back, *dropped, *out; /* P (orthonormal), q, M - P q^T, P Q'^T */
    double project_s, back_s, expand_s;
} psgd_run;

/* Time the three products of m (rows x cols) at rank r on `threads` threads, `repeat` times. */
static void run_products(const float *m, size_t rows, size_t cols, const float *q, int r,
                         int threads, int repeat, float *qt, psgd_run *o) {
    double t[3][64];
    for (int k = 0; k < repeat; k++) {
        double t0 = hr_now();
        psgd_project(m, rows, cols, q, r, o->p, threads);
        double t1 = hr_now();
        psgd_orthonormalize(o->p, rows, r);
        double t2 = hr_now();
        psgd_back(m, rows, cols, o->p, r, o->back, threads);
        double t3 = hr_now();
        psgd_transpose(o->back, cols, r, qt); /* Q' as q: one node's sum */
        double t4 = hr_now();
        psgd_expand(o->p, qt, rows, cols, r, m, qt, o->dropped, o->out, threads);
        double t5 = hr_now();
        t[0][k] = t1 - t0, t[1][k] = t3 - t2, t[2][k] = t5 - t4;
    }
    o->project_s = bench_median(t[0], repeat);
    o->back_s = bench_median(t[1], repeat);
    o->expand_s = bench_median(t[2], repeat);
}

static int same_bits(const psgd_run *a, const psgd_run *b, size_t rows, size_t cols, int r) {
    return memcmp(a->p, b->p, sizeof *a->p * rows * (size_t)r) == 0 &&
           memcmp(a->back, b->back, sizeof *a->back * cols * (size_t)r) == 0 &&
           memcmp(a->dropped, b->dropped, sizeof *a->dropped * rows * cols) == 0 &&
           memcmp(a->out, b->out, sizeof *a->out * rows * cols) == 0;
}

static int alloc_run(psgd_run *o, size_t rows, size_t cols, int r) {
    o->p = malloc(sizeof *o->p * rows * (size_t)r);
    o->back = malloc(sizeof *o->back * cols * (size_t)r);
    o->dropped = malloc(sizeof *o->dropped * rows * cols);
    o->out = malloc(sizeof *o->out * rows * cols);
    return o->p && o->back && o->dropped && o->out;
}

static void free_run(psgd_run *o) {
    free(o->p), free(o->back), free(o->dropped), free(o->out);
}

/* One shape: every thread count against one thread. Returns 0, or 1 when the bits differ or
 * memory runs out. */
static int bench_shape(size_t rows, size_t cols, int r, const long *threads, int n_threads,
                       int repeat) {
    float *m = malloc(sizeof *m * rows * cols), *q = malloc(sizeof *q * cols * (size_t)r);
    float *qt = malloc(sizeof *qt * cols * (size_t)r);
    psgd_run one = {0}, many = {0};
    int rc = 0;
    if (!m || !q || !qt || !alloc_run(&one, rows, cols, r) || !alloc_run(&many, rows, cols, r)) {
        fprintf(stderr, "hetring bench powersgd: out of memory for %zu x %zu\n", rows, cols);
        rc = 1;
        goto out;
    }
    for (size_t i = 0; i < rows * cols; i++) /* a full-rank matrix of gradient-like values */
        m[i] = sinf(0.731f * (float)(i / cols) + 0.377f * (float)(i % cols)) * 1e-3f;
    psgd_init_q(q, cols, r, 1, 1, 0);
    run_products(m, rows, cols, q, r, 1, repeat, qt, &one);
    const double base = one.project_s + one.back_s + one.expand_s;
    for (int t = 0; t < n_threads; t++) {
        psgd_run *o = threads[t] == 1 ? &one : &many;
        if (threads[t] != 1) run_products(m, rows, cols, q, r, (int)threads[t], repeat, qt, o);
        const double all = o->project_s + o->back_s + o->expand_s;
        const int same = same_bits(&one, o, rows, cols, r);
        printf("%5zu x %-5zu %3d %7ld %10.3f %10.3f %10.3f %10.3f %8.2fx  %s\n", rows, cols, r,
               threads[t], o->project_s * 1e3, o->back_s * 1e3, o->expand_s * 1e3, all * 1e3,
               base / all, same ? "same" : "DIFFER");
        if (!same) rc = 1;
    }
out:
    free(m), free(q), free(qt);
    free_run(&one), free_run(&many);
    return rc;
}

/* "RxC,RxC,...": up to max shapes into rows/cols; -1 (after a message) on a bad one. */
static int parse_shapes(const char *arg, size_t *rows, size_t *cols, int max) {
    const char *s = arg;
    int n = 0;
    while (*s && n < max) {
        char *end;
        unsigned long r = strtoul(s, &end, 10), c;
        if (end == s || *end != 'x') break;
        s = end + 1;
        c = strtoul(s, &end, 10);
        if (end == s || r < 2 || c < 2 || r > 65536 || c > 65536) break;
        rows[n] = r, cols[n++] = c;
        s = end;
        if (*s == ',')
            s++;
        else if (*s)
            break;
    }
    if (*s || n == 0) {
        fprintf(stderr,
                "hetring bench powersgd: --shapes '%s' (expected ROWSxCOLS,... each in "
                "2..65536, at most %d)\n",
                arg, max);
        return -1;
    }
    return n;
}

/* "T,T,...": thread counts in 1..PSGD_MAX_THREADS. */
static int parse_threads(const char *s, long *out, int max) {
    int n = 0;
    const char *at = s;
    while (*at && n < max) {
        char *end;
        long t = strtol(at, &end, 10);
        if (end == at || t < 1 || t > PSGD_MAX_THREADS) break;
        out[n++] = t;
        at = end;
        if (*at == ',')
            at++;
        else if (*at)
            break;
    }
    if (*at || n == 0) {
        fprintf(stderr, "hetring bench powersgd: --threads '%s' (expected T,... each in 1..%d)\n",
                s, PSGD_MAX_THREADS);
        return -1;
    }
    return n;
}

int bench_psgd(int argc, char **argv) {
    const char *shapes = "512x784,512x4608,2048x2048", *threads_s = "1,2,4,8,16";
    long rank = 4, repeat = 7;
    const bench_opt opts[] = {
        {"shapes", BENCH_OPT_STR, &shapes, 0, 0, NULL},
        {"rank", BENCH_OPT_LONG, &rank, 1, PSGD_MAX_RANK, NULL},
        {"threads", BENCH_OPT_STR, &threads_s, 0, 0, NULL},
        {"repeat", BENCH_OPT_LONG, &repeat, 1, 64, NULL},
        {NULL, 0, NULL, 0, 0, NULL},
    };
    int rc = bench_parse_opts("powersgd", opts, usage, argc, argv);
    if (rc >= 0) return rc;
    enum { MAX = 16 };
    size_t rows[MAX], cols[MAX];
    long threads[MAX];
    const int n_shapes = parse_shapes(shapes, rows, cols, MAX);
    const int n_threads = parse_threads(threads_s, threads, MAX);
    if (n_shapes < 0 || n_threads < 0) return CLI_USAGE;
    printf("# hetring bench powersgd: the low-rank products per matrix and step, median of %ld "
           "runs, ms;\n# speed-up against one thread; bits against one thread\n",
           repeat);
    printf("%-13s %3s %7s %10s %10s %10s %10s %9s  %s\n", "matrix", "r", "threads", "project",
           "back", "expand", "all", "speed-up", "bits");
    int bad = 0;
    for (int s = 0; s < n_shapes; s++)
        bad |= bench_shape(rows[s], cols[s], (int)rank, threads, n_threads, (int)repeat);
    return bad ? CLI_FAIL : CLI_OK;
}
