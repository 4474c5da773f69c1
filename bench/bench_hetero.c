/*
 * bench_hetero.c: `hetring bench hetero`, dynamic batching against static on emulated
 * heterogeneous clusters.
 *
 * Every (scenario, policy) pair is a real local cluster: N `hetring run` processes on loopback
 * training the same MLP with the same global batch. Node 0's per-iteration metrics (loss, wall
 * clock, every node's batch size and compute time) are analysed into throughput, speed-up over
 * static, the ideal speed-up, the adjustments needed to re-balance after a change, and the
 * steady-state oscillation of batch sizes. Slowdowns are emulated by sleeping, and the report
 * says so.
 */
#include "bench.h"
#include "bench_util.h"
#include "cli.h"
#include "hr_log.h"
#include "launch.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define HB_NODES      4
#define HB_MAX_ITERS  100000
#define HB_MAX_REPEAT 15

typedef struct {
    const char *name;          /* scenario id used in file names and the report */
    const char *what;          /* one-line description */
    double slowdown[HB_NODES]; /* per-node slowdown factor */
    const char *interference;  /* interference schedule for node 1 ("" for none) */
} scenario;

/* The interference step happens at 40% and ends at 70% of the run (set in main). */
static scenario scenarios[] = {
    {"homogeneous", "4 equal nodes", {1, 1, 1, 1}, ""},
    {"one-slow", "slowdowns 1,1,1,4", {1, 1, 1, 4}, ""},
    {"graded", "slowdowns 1,2,4,8", {1, 2, 4, 8}, ""},
    {"interference", "node 1 slowed 3x for the middle 30% of the run", {1, 1, 1, 1}, NULL},
};
#define N_SCEN ((int)(sizeof scenarios / sizeof scenarios[0]))

static const char *const all_policies[] = {"static", "proportional", "pid", "model", "epoch"};
#define N_POL 5

/* One run's per-iteration record, from node 0's metrics file. */
typedef struct {
    long n;                /* iterations recorded */
    double *wall;          /* seconds since the run started, at the end of the iteration */
    double *loss;          /* training loss */
    double (*b)[HB_NODES]; /* batch size of every node */
    double (*t)[HB_NODES]; /* compute time of every node, seconds */
    int *changed;          /* the controller changed the split after this iteration */
} run_log;

typedef struct {
    double samples_per_s; /* steady-state throughput */
    double speedup;       /* over static in the same scenario */
    double ideal;         /* ideal speed-up from the slowdowns */
    double rebalance;     /* adjustments to re-balance after the last change (-1: never) */
    double oscillation;   /* mean max relative batch move per interval, steady state */
    double imbalance;     /* median max/min compute time, steady state */
    double sync_ms;       /* median iteration time beyond the slowest node's compute, ms */
    int runs;             /* runs behind a median (median_result) */
    int ok;               /* the run completed */
} run_result;

static void run_log_free(run_log *l) {
    free(l->wall);
    free(l->loss);
    free(l->b);
    free(l->t);
    free(l->changed);
    memset(l, 0, sizeof *l);
}

static int read_log(const char *path, run_log *l) {
    memset(l, 0, sizeof *l);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long cap = 1024;
    l->wall = malloc(sizeof *l->wall * (size_t)cap);
    l->loss = malloc(sizeof *l->loss * (size_t)cap);
    l->b = malloc(sizeof *l->b * (size_t)cap);
    l->t = malloc(sizeof *l->t * (size_t)cap);
    l->changed = malloc(sizeof *l->changed * (size_t)cap);
    char *line = NULL;
    size_t lcap = 0;
    while (getline(&line, &lcap, f) > 0 && l->n < HB_MAX_ITERS) {
        double b[HB_NODES], t[HB_NODES], ch = 0;
        if (json_array(line, "b", b, HB_NODES) != HB_NODES ||
            json_array(line, "t", t, HB_NODES) != HB_NODES)
            continue;
        if (l->n == cap) {
            cap *= 2;
            l->wall = realloc(l->wall, sizeof *l->wall * (size_t)cap);
            l->loss = realloc(l->loss, sizeof *l->loss * (size_t)cap);
            l->b = realloc(l->b, sizeof *l->b * (size_t)cap);
            l->t = realloc(l->t, sizeof *l->t * (size_t)cap);
            l->changed = realloc(l->changed, sizeof *l->changed * (size_t)cap);
        }
        json_number(line, "wall_s", &l->wall[l->n]);
        json_number(line, "loss", &l->loss[l->n]);
        json_number(line, "changed", &ch);
        memcpy(l->b[l->n], b, sizeof b);
        memcpy(l->t[l->n], t, sizeof t);
        l->changed[l->n] = ch != 0;
        l->n++;
    }
    free(line);
    fclose(f);
    return l->n > 0 ? 0 : -1;
}

static double ratio_max_min(const double *v, int n) {
    double lo = v[0], hi = v[0];
    for (int i = 1; i < n; i++) lo = fmin(lo, v[i]), hi = fmax(hi, v[i]);
    return lo > 0 ? hi / lo : INFINITY;
}

/* Per-node median compute time over iterations [i, i + BAL_WINDOW): a single iteration's
 * times carry the scheduling noise of nodes sharing cores, so balance is judged on medians. */
#define BAL_WINDOW 8

static double window_ratio(const run_log *l, long i) {
    double med[HB_NODES], w[BAL_WINDOW];
    long n = l->n - i < BAL_WINDOW ? l->n - i : BAL_WINDOW;
    for (int k = 0; k < HB_NODES; k++) {
        for (long j = 0; j < n; j++) w[j] = l->t[i + j][k];
        med[k] = bench_median(w, (int)n);
    }
    return ratio_max_min(med, HB_NODES);
}

/* Analyse a run: `change` is the iteration of the last speed change (0 for none). */
static void analyse(const run_log *l, long change, long steady_from, long global_batch,
                    run_result *r) {
    long warm = l->n / 10;
    if (l->n - warm < 2) return;
    r->samples_per_s =
        (double)(l->n - 1 - warm) * (double)global_batch / (l->wall[l->n - 1] - l->wall[warm]);
    /* what balancing cannot remove: the all-reduce, the update and the bookkeeping after the
     * slowest node has finished its compute */
    double *sync = malloc(sizeof *sync * (size_t)l->n);
    long ns = 0;
    for (long i = warm + 1; i < l->n; i++) {
        double mx = 0;
        for (int k = 0; k < HB_NODES; k++) mx = fmax(mx, l->t[i][k]);
        sync[ns++] = l->wall[i] - l->wall[i - 1] - mx;
    }
    r->sync_ms = 1e3 * bench_median(sync, (int)ns);
    free(sync);
    /* adjustments from the change until the windowed compute times are within 10% */
    r->rebalance = -1;
    int adj = 0;
    for (long i = change; i + BAL_WINDOW <= l->n; i++) {
        if (window_ratio(l, i) <= 1.10) {
            r->rebalance = adj;
            break;
        }
        adj += l->changed[i];
    }
    /* steady state: batch movement per iteration, and the windowed imbalance */
    double *imb = malloc(sizeof *imb * (size_t)l->n);
    long ni = 0, intervals = 0;
    double moved = 0;
    for (long i = steady_from; i + 1 < l->n; i++) {
        double mx = 0;
        for (int k = 0; k < HB_NODES; k++)
            mx = fmax(mx, fabs(l->b[i + 1][k] - l->b[i][k]) / fmax(1, l->b[i][k]));
        moved += mx;
        intervals++;
        if (i + BAL_WINDOW <= l->n) imb[ni++] = window_ratio(l, i);
    }
    r->oscillation = intervals ? moved / (double)intervals : 0;
    r->imbalance = bench_median(imb, (int)ni);
    free(imb);
    r->ok = 1;
}

/* Medians over the completed runs of one policy (v) and its static pairing (st) in the same
 * rounds: throughput, speed-up per round, oscillation, imbalance, and re-balance adjustments
 * with "never" (-1) ranked above every count. */
static void median_result(const run_result *v, const run_result *st, int k, run_result *out) {
    double sps[HB_MAX_REPEAT], sp[HB_MAX_REPEAT], osc[HB_MAX_REPEAT], imb[HB_MAX_REPEAT],
        rb[HB_MAX_REPEAT], syn[HB_MAX_REPEAT];
    int n = 0, ns = 0;
    for (int i = 0; i < k; i++) {
        if (!v[i].ok) continue;
        sps[n] = v[i].samples_per_s;
        osc[n] = v[i].oscillation;
        imb[n] = v[i].imbalance;
        syn[n] = v[i].sync_ms;
        rb[n] = v[i].rebalance < 0 ? INFINITY : v[i].rebalance;
        n++;
        if (st[i].ok) sp[ns++] = v[i].samples_per_s / st[i].samples_per_s;
    }
    memset(out, 0, sizeof *out);
    out->runs = n;
    if (!n) return;
    out->ok = 1;
    out->samples_per_s = bench_median(sps, n);
    out->speedup = ns ? bench_median(sp, ns) : NAN;
    out->oscillation = bench_median(osc, n);
    out->imbalance = bench_median(imb, n);
    out->sync_ms = bench_median(syn, n);
    double r = bench_median(rb, n);
    out->rebalance = isinf(r) ? -1 : r;
}

/* Ideal speed-up of perfect balancing over static: sum over phases of the static iteration
 * time (slowest node, max f) against the balanced one (N / sum 1/f). */
static double ideal_speedup(const scenario *s, long iters, long t0, long t1, double factor) {
    double stat = 0, dyn = 0;
    for (int phase = 0; phase < 3; phase++) {
        long len = phase == 0 ? t0 : phase == 1 ? t1 - t0 : iters - t1;
        double f[HB_NODES], inv = 0, mx = 0;
        for (int k = 0; k < HB_NODES; k++) {
            f[k] = s->slowdown[k];
            if (!s->interference && k == 1 && phase == 1) f[k] = factor;
            inv += 1 / f[k];
            mx = fmax(mx, f[k]);
        }
        stat += (double)len * mx;
        dyn += (double)len * HB_NODES / inv;
    }
    return stat / dyn;
}

typedef struct {
    const char *out_dir; /* where configs, logs, CSV, plots and the report go */
    const char *json;    /* --json FILE */
    long iters;          /* iterations per run */
    long batch;          /* global batch */
    const char *layers;  /* MLP layers */
    int ddp;             /* also run the PyTorch DDP baseline */
    int repeat;          /* runs of every scenario and policy; the report gives medians */
    int n_pol;           /* policies to run */
    const char *pol[N_POL];
    int scen_on[N_SCEN];  /* scenarios to run */
    const char *sets[16]; /* --set overrides passed to every node */
    int n_sets;
} hetero_opts;

static int write_config(const char *path, const scenario *s, const char *policy,
                        const hetero_opts *o, int base_port, const char *interference) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f,
            "; generated by hetring bench hetero: scenario %s, policy %s (emulated slowdowns)\n"
            "[cluster]\nname = bench-hetero\nsecurity = none\nconnect_timeout = 30\ntimeout = "
            "60\n"
            "[train]\nmodel = mlp\nlayers = %s\ndataset = synthetic\nsamples = 16384\n"
            "eval_samples = 512\nglobal_batch = %ld\nlr = 0.02\niterations = %ld\nseed = 3\n"
            "hash_interval = 50\n"
            "[controller]\npolicy = %s\nmin_batch = 4\n",
            s->name, policy, o->layers, o->batch, o->iters, policy);
    for (int k = 0; k < HB_NODES; k++) {
        fprintf(f, "[node.%d]\nhost = 127.0.0.1\nport = %d\nthreads = 1\nslowdown = %g\n", k,
                base_port + k, s->slowdown[k]);
        if (k == 1 && interference && interference[0])
            fprintf(f, "interference = %s\n", interference);
    }
    fclose(f);
    return 0;
}

static int run_one(const hetero_opts *o, const scenario *s, const char *policy, const char *interf,
                   run_log *log) {
    char conf[1024], metrics[1024], logpath[1024], exe[4096], err[HR_ERRLEN];
    snprintf(conf, sizeof conf, "%s/%s-%s.ini", o->out_dir, s->name, policy);
    snprintf(metrics, sizeof metrics, "%s/%s-%s-node{id}.jsonl", o->out_dir, s->name, policy);
    snprintf(logpath, sizeof logpath, "%s/%s-%s.log", o->out_dir, s->name, policy);
    int port = 10000 + (int)((unsigned)getpid() * 7919u % 22000u); /* below 32768 */
    if (write_config(conf, s, policy, o, port, interf) || cli_self_exe(exe, sizeof exe)) return -1;
    cfg c;
    if (cfg_load(&c, conf, err, sizeof err) != HR_OK) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    FILE *out = fopen(logpath, "w");
    const char *args[2 * 16 + 4] = {"--quiet", "--metrics", metrics};
    int na = 3;
    for (int i = 0; i < o->n_sets; i++) args[na++] = "--set", args[na++] = o->sets[i];
    args[na] = NULL;
    launch_opts lo = {
        .exe = exe, .conf = conf, .args = args, .out = out, .grace_s = 5, .deadline_s = 600};
    launch_result res;
    int rc = launch_cluster(&c, &lo, &res);
    launch_result_free(&res);
    cfg_free(&c);
    if (out) fclose(out);
    if (rc != 0) {
        fprintf(stderr, "bench hetero: %s/%s failed; see %s\n", s->name, policy, logpath);
        return -1;
    }
    char m0[1024];
    snprintf(m0, sizeof m0, "%s/%s-%s-node0.jsonl", o->out_dir, s->name, policy);
    return read_log(m0, log);
}

static void write_csv(const char *dir, const char *scen, const char *policy, const run_log *l) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s-%s.csv", dir, scen, policy);
    FILE *f = fopen(path, "w");
    if (!f) return;
    fprintf(f, "iter,wall_s,loss");
    for (int k = 0; k < HB_NODES; k++) fprintf(f, ",b%d", k);
    for (int k = 0; k < HB_NODES; k++) fprintf(f, ",t%d", k);
    fprintf(f, ",changed\n");
    for (long i = 0; i < l->n; i++) {
        fprintf(f, "%ld,%.6f,%.6f", i, l->wall[i], l->loss[i]);
        for (int k = 0; k < HB_NODES; k++) fprintf(f, ",%.0f", l->b[i][k]);
        for (int k = 0; k < HB_NODES; k++) fprintf(f, ",%.6f", l->t[i][k]);
        fprintf(f, ",%d\n", l->changed[i]);
    }
    fclose(f);
}

/* gnuplot PNGs: batch sizes and compute times of `policy`, loss against wall time of static
 * and `policy`. Skipped with a note when gnuplot is missing. */
static void plot(const char *dir, const char *scen, const char *policy) {
    char script[1024];
    snprintf(script, sizeof script, "%s/%s.gp", dir, scen);
    FILE *f = fopen(script, "w");
    if (!f) return;
    fprintf(f,
            "set datafile separator ','\nset terminal pngcairo size 900,300 font ',9'\n"
            "set key outside right\nset grid\n"
            "set output '%s/%s-batch.png'\nset title '%s: batch size per node (%s, emulated)'\n"
            "set xlabel 'iteration'\nset ylabel 'samples'\n"
            "plot for [k=0:%d] '%s/%s-%s.csv' using 1:(column(4+k)) with lines title 'node '.k\n"
            "set output '%s/%s-time.png'\nset title '%s: compute time per node (%s, emulated)'\n"
            "set ylabel 'ms'\n"
            "plot for [k=0:%d] '%s/%s-%s.csv' using 1:(1000*column(%d+k)) with lines title 'node "
            "'.k\n"
            "set output '%s/%s-loss.png'\nset title '%s: training loss against wall time'\n"
            "set xlabel 'seconds'\nset ylabel 'loss'\n"
            "plot '%s/%s-static.csv' using 2:3 with lines title 'static', '%s/%s-%s.csv' using "
            "2:3 with lines title '%s'\n",
            dir, scen, scen, policy, HB_NODES - 1, dir, scen, policy, dir, scen, scen, policy,
            HB_NODES - 1, dir, scen, policy, 4 + HB_NODES, dir, scen, scen, dir, scen, dir, scen,
            policy, policy);
    fclose(f);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "gnuplot '%s' 2>>'%s/gnuplot.log'", script, dir);
    if (system(cmd) != 0)
        HR_WARN(BENCH, "gnuplot failed or is missing; plots skipped (%s)", script);
}

/* PyTorch DDP baseline, when /usr/bin/python3 has torch. Returns samples/s or NAN. */
static double ddp_baseline(const hetero_opts *o, const scenario *s) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 '%s/bench/py/ddp_baseline.py' --nodes %d --layers %s --batch %ld "
             "--slowdowns %g,%g,%g,%g --iters %ld --repeats 3 --port %d 2>/dev/null",
             HR_SOURCE_DIR, HB_NODES, o->layers, o->batch, s->slowdown[0], s->slowdown[1],
             s->slowdown[2], s->slowdown[3], o->iters / 2, 29000 + getpid() % 1000);
    FILE *p = popen(cmd, "r");
    if (!p) return NAN;
    char line[4096] = "";
    double v = NAN;
    if (fgets(line, sizeof line, p)) json_number(line, "samples_per_s", &v);
    pclose(p);
    return v;
}

static void usage(FILE *out) {
    fprintf(
        out,
        "usage: hetring bench hetero [--out DIR] [--json FILE] [--iters N] [--batch B]\n"
        "                            [--layers L] [--policies P,...] [--scenarios S,...]\n"
        "                            [--repeat K] [--ddp]\n"
        "\n"
        "Run every scenario on %d local nodes for every policy and compare dynamic batching\n"
        "with static. Slowdowns are emulated by sleeping.\n"
        "\n"
        "  --out DIR        configs, logs, CSV, PNG plots and report.md (default bench-out)\n"
        "  --json FILE      one object per scenario and policy\n"
        "  --iters N        iterations per run (default 300)\n"
        "  --batch B        global batch (default 512)\n"
        "  --layers L       MLP layers (default 784,512,512,10)\n"
        "  --policies P     subset of static,proportional,pid,model,epoch (static always runs)\n"
        "  --scenarios S    subset of homogeneous,one-slow,graded,interference\n"
        "  --repeat K       run every scenario and policy K times, interleaved, and report\n"
        "                   medians; speed-ups pair each run with static's run of the same\n"
        "                   round (default 1)\n"
        "  --ddp            also run the PyTorch DDP (gloo) baseline where torch is installed\n"
        "  --set S.K=V      override a key in every run (e.g. controller.interval=4)\n",
        HB_NODES);
}

int bench_hetero(int argc, char **argv) {
    static const struct option opts[] = {{"out", required_argument, 0, 'o'},
                                         {"json", required_argument, 0, 'j'},
                                         {"iters", required_argument, 0, 'i'},
                                         {"batch", required_argument, 0, 'b'},
                                         {"layers", required_argument, 0, 'l'},
                                         {"policies", required_argument, 0, 'p'},
                                         {"scenarios", required_argument, 0, 's'},
                                         {"ddp", no_argument, 0, 'd'},
                                         {"repeat", required_argument, 0, 'r'},
                                         {"set", required_argument, 0, 'S'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    hetero_opts o = {.out_dir = "bench-out",
                     .iters = 300,
                     .batch = 512,
                     .layers = "784,512,512,10",
                     .repeat = 1};
    const char *pols = NULL, *scens = NULL;
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        char *end = NULL;
        switch (ch) {
        case 'o':
            o.out_dir = optarg;
            break;
        case 'j':
            o.json = optarg;
            break;
        case 'i':
            o.iters = strtol(optarg, &end, 10);
            if (*end || o.iters < 20 || o.iters > HB_MAX_ITERS)
                return cli_usage_error("bench hetero", "--iters '%s' (expected 20..%d)", optarg,
                                       HB_MAX_ITERS);
            break;
        case 'b':
            o.batch = strtol(optarg, &end, 10);
            if (*end || o.batch < 4 * HB_NODES)
                return cli_usage_error("bench hetero", "--batch '%s' (expected >= %d)", optarg,
                                       4 * HB_NODES);
            break;
        case 'l':
            o.layers = optarg;
            break;
        case 'p':
            pols = optarg;
            break;
        case 's':
            scens = optarg;
            break;
        case 'd':
            o.ddp = 1;
            break;
        case 'r':
            o.repeat = (int)strtol(optarg, &end, 10);
            if (*end || o.repeat < 1 || o.repeat > HB_MAX_REPEAT)
                return cli_usage_error("bench hetero", "--repeat '%s' (expected 1..%d)", optarg,
                                       HB_MAX_REPEAT);
            break;
        case 'S':
            if (o.n_sets == 16) return cli_usage_error("bench hetero", "too many --set options");
            o.sets[o.n_sets++] = optarg;
            break;
        case 'h':
            usage(stdout);
            return CLI_OK;
        default:
            usage(stderr);
            return CLI_USAGE;
        }
    }
    o.pol[o.n_pol++] = "static";
    for (int p = 1; p < N_POL; p++)
        if (!pols || list_has(pols, all_policies[p])) o.pol[o.n_pol++] = all_policies[p];
    if (pols)
        for (const char *q = pols; *q;) {
            size_t len = strcspn(q, ",");
            int known = 0;
            for (int p = 0; p < N_POL; p++)
                known |= strlen(all_policies[p]) == len && strncmp(q, all_policies[p], len) == 0;
            if (!known)
                return cli_usage_error("bench hetero", "unknown policy '%.*s' in --policies",
                                       (int)len, q);
            q += len + (q[len] == ',');
        }
    int any = 0;
    for (int s = 0; s < N_SCEN; s++)
        any |= o.scen_on[s] = !scens || list_has(scens, scenarios[s].name);
    if (!any) return cli_usage_error("bench hetero", "--scenarios names no known scenario");
    if (mkdir(o.out_dir, 0755) != 0 && errno != EEXIST)
        return fprintf(stderr, "bench hetero: cannot create %s: %s\n", o.out_dir, strerror(errno)),
               CLI_FAIL;

    long t0 = o.iters * 4 / 10, t1 = o.iters * 7 / 10;
    char interf[64];
    snprintf(interf, sizeof interf, "%ld:3,%ld:1", t0, t1);
    run_result res[N_SCEN][N_POL];
    memset(res, 0, sizeof res);
    char path[1024];
    snprintf(path, sizeof path, "%s/report.md", o.out_dir);
    FILE *md = fopen(path, "w");
    FILE *js = o.json ? fopen(o.json, "w") : NULL;
    if (!md || (o.json && !js)) {
        fprintf(stderr, "bench hetero: cannot write %s\n", !md ? path : o.json);
        if (md) fclose(md);
        return CLI_FAIL;
    }
    if (js) fprintf(js, "[\n");
    int first_json = 1, failures = 0;
    fprintf(md,
            "# hetring bench hetero\n\n%d local nodes, MLP %s, global batch %ld, %ld "
            "iterations per run, median of %d run(s). Slowdowns are emulated by sleeping.\n\n",
            HB_NODES, o.layers, o.batch, o.iters, o.repeat);
    fprintf(md, "| scenario | policy | samples/s | speed-up vs static | ideal | efficiency | "
                "re-balance adjustments | oscillation | max/min compute | sync ms |\n"
                "|---|---|---|---|---|---|---|---|---|---|\n");
    printf("%-13s %-13s %10s %8s %7s %6s %6s %7s %7s %7s\n", "scenario", "policy", "samples/s",
           "speedup", "ideal", "effic", "rebal", "oscill", "imbal", "sync");
    for (int s = 0; s < N_SCEN; s++) {
        if (!o.scen_on[s]) continue;
        scenario *sc = &scenarios[s];
        const char *schedule = sc->interference ? sc->interference : interf;
        long change = sc->interference ? 0 : t1;
        double ideal = ideal_speedup(sc, o.iters, t0, t1, 3);
        /* K rounds, each running every policy once, so that slow phases of the shared machine
         * hit all policies alike; medians over the rounds, speed-ups paired within a round. */
        run_result rr[N_POL][HB_MAX_REPEAT];
        memset(rr, 0, sizeof rr);
        long steady = sc->interference ? o.iters / 2 : t1 + (o.iters - t1) / 3;
        for (int round = 0; round < o.repeat; round++)
            for (int p = 0; p < o.n_pol; p++) {
                run_log log;
                if (run_one(&o, sc, o.pol[p], schedule, &log) != 0) {
                    failures++;
                    continue;
                }
                analyse(&log, change, steady, o.batch, &rr[p][round]);
                write_csv(o.out_dir, sc->name, o.pol[p], &log); /* the last round's */
                run_log_free(&log);
            }
        int best = -1;
        for (int p = 0; p < o.n_pol; p++) {
            run_result *r = &res[s][p];
            median_result(rr[p], rr[0], o.repeat, r);
            r->ideal = ideal;
            if (!r->ok) {
                printf("%-13s %-13s (every run failed)\n", sc->name, o.pol[p]);
                fprintf(md, "| %s | %s | failed | | | | | | | |\n", sc->name, o.pol[p]);
                continue;
            }
            if (p > 0 && (best < 0 || r->samples_per_s > res[s][best].samples_per_s)) best = p;
            const char *pol = o.pol[p];
            int is_static = p == 0;
            char rb[32] = "-";
            if (!is_static && r->rebalance >= 0) snprintf(rb, sizeof rb, "%.0f", r->rebalance);
            printf("%-13s %-13s %10.0f %7.2fx %6.2fx %5.0f%% %6s %6.1f%% %7.2f %7.1f\n", sc->name,
                   pol, r->samples_per_s, r->speedup, ideal, 100 * r->speedup / ideal, rb,
                   100 * r->oscillation, r->imbalance, r->sync_ms);
            fflush(stdout);
            fprintf(md, "| %s | %s | %.0f | %.2fx | %.2fx | %.0f%% | %s | %.1f%% | %.2f | %.1f |\n",
                    sc->name, pol, r->samples_per_s, r->speedup, ideal, 100 * r->speedup / ideal,
                    rb, 100 * r->oscillation, r->imbalance, r->sync_ms);
            if (js) {
                fprintf(js,
                        "%s  {\"scenario\": \"%s\", \"policy\": \"%s\", \"samples_per_s\": %.1f, "
                        "\"speedup_vs_static\": %.4f, \"ideal_speedup\": %.4f, "
                        "\"rebalance_adjustments\": %s, \"oscillation\": %.5f, "
                        "\"imbalance\": %.4f, \"sync_ms\": %.3f, \"runs\": %d, \"emulated\": true}",
                        first_json ? "" : ",\n", sc->name, pol, r->samples_per_s, r->speedup, ideal,
                        strcmp(rb, "-") ? rb : "null", r->oscillation, r->imbalance, r->sync_ms,
                        r->runs);
                first_json = 0;
            }
        }
        if (best > 0 && res[s][0].ok) plot(o.out_dir, sc->name, o.pol[best]);
        if (o.ddp && (strcmp(sc->name, "homogeneous") == 0 || strcmp(sc->name, "one-slow") == 0)) {
            double ddp = ddp_baseline(&o, sc);
            if (isnan(ddp)) {
                printf("%-13s %-13s (PyTorch with torch.distributed not available)\n", sc->name,
                       "ddp-gloo");
            } else {
                double mine = best > 0 ? res[s][best].samples_per_s : res[s][0].samples_per_s;
                printf("%-13s %-13s %10.0f   hetring static %.2fx, best dynamic %.2fx of DDP\n",
                       sc->name, "ddp-gloo", ddp, res[s][0].samples_per_s / ddp, mine / ddp);
                fprintf(md, "| %s | PyTorch DDP (gloo) | %.0f | %.2fx | | | | | | |\n", sc->name,
                        ddp, ddp / res[s][0].samples_per_s);
            }
        }
    }
    fprintf(md,
            "\nEfficiency is the achieved speed-up over the ideal one, max f * sum(1/f) / N "
            "per phase. Oscillation is the mean largest relative batch move per iteration in "
            "steady state. Balance is judged on each node's median compute time over %d "
            "iterations. Sync is the median time per iteration beyond the slowest node's compute "
            "(all-reduce, update, bookkeeping): balancing cannot remove it, and the ideal leaves "
            "it out. Plots: SCENARIO-batch.png, SCENARIO-time.png, SCENARIO-loss.png.\n",
            BAL_WINDOW);
    fclose(md);
    if (js) {
        fprintf(js, "\n]\n");
        fclose(js);
    }
    printf("report: %s/report.md\n", o.out_dir);
    return failures ? CLI_FAIL : CLI_OK;
}
