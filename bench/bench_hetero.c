/*
 * bench_hetero.c: `hetring bench hetero`, dynamic batching against static on emulated
 * heterogeneous clusters.
 *
 * Every (scenario, policy) pair is a real local cluster, started the way a user starts one:
 * the bench builds the run's cluster file through the config module (the template
 * bench/hetero.ini with the run's values set over it, validated, written to --out) and runs
 * `hetring local --conf FILE -- --quiet --metrics ...` with the hetring next to this
 * executable, under a deadline. N nodes on loopback train the same MLP with the same global
 * batch. Node 0's per-iteration metrics (loss, wall
 * clock, every node's batch size and compute time) are analysed into throughput, speed-up over
 * static, the ideal speed-up, the adjustments needed to re-balance after a change, and the
 * steady-state oscillation of batch sizes. Slowdowns are emulated by sleeping, and the report
 * says so. --ddp adds PyTorch DDP (gloo) with the Python that has torch (--python PATH, else
 * python3 on PATH, then /usr/bin/python3).
 *
 * SIGINT or SIGTERM stops the bench: the run in progress is stopped (hetring local passes
 * SIGTERM to its nodes and reaps them; SIGKILL follows if it has not exited 10 s later), no
 * further run starts, the table and report.md hold the runs completed so far, and the bench
 * exits 128 + the signal (130, 143).
 */
#include "base/hr_log.h"
#include "bench/bench.h"
#include "bench/bench_util.h"
#include "bench/netns.h"
#include "bench/plot.h"
#include "cli/cli.h"
#include "conf/cfg.h"
#include "trainer/device.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define HB_NODES      4
#define HB_MAX_ITERS  100000
#define HB_MAX_REPEAT 15
#define HB_MAX_HOOKS  8

typedef struct {
    const char *name;          /* scenario id used in file names and the report */
    const char *what;          /* one-line description */
    double slowdown[HB_NODES]; /* per-node slowdown factor */
    const char *interference;  /* interference schedule for node 1 ("" for none) */
    int gpu;                   /* the node on cuda:0 (its real speed, no emulation), -1: none */
    int asked;                 /* runs only when --scenarios names it */
} scenario;

/* The interference step happens at 40% and ends at 70% of the run (set in main). */
static scenario scenarios[] = {
    {"homogeneous", "4 equal nodes", {1, 1, 1, 1}, "", -1, 0},
    {"one-slow", "slowdowns 1,1,1,4", {1, 1, 1, 4}, "", -1, 0},
    {"graded", "slowdowns 1,2,4,8", {1, 2, 4, 8}, "", -1, 0},
    {"interference", "node 1 slowed 3x for the middle 30% of the run", {1, 1, 1, 1}, NULL, -1, 0},
    {"mixed",
     "node 0 on cuda:0, nodes 1-3 on the CPU, all at their real speeds",
     {1, 1, 1, 1},
     "",
     0,
     1},
    {"demo", "the README's demo cluster: slowdowns 1,1.5,2,4", {1, 1.5, 2, 4}, "", -1, 1},
};
#define N_SCEN ((int)(sizeof scenarios / sizeof scenarios[0]))

/* Policies come from the config module, in its order (static first): cfg_policy_name(p) for
 * p = 0.. until it answers "?". N_POL bounds the table. */
#define N_POL 16

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
    double compute_ms;    /* median compute time of the slowest node, ms */
    double wait_ms;       /* median of the slowest node's compute minus the mean node's, ms:
                           * what the others wait for it */
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
    double *sync = malloc(sizeof *sync * (size_t)l->n), *comp = malloc(sizeof *comp * (size_t)l->n),
           *wait = malloc(sizeof *wait * (size_t)l->n);
    long ns = 0;
    for (long i = warm + 1; i < l->n; i++) {
        double mx = 0, sum = 0;
        for (int k = 0; k < HB_NODES; k++) mx = fmax(mx, l->t[i][k]), sum += l->t[i][k];
        sync[ns] = l->wall[i] - l->wall[i - 1] - mx;
        comp[ns] = mx;
        wait[ns++] = mx - sum / HB_NODES;
    }
    r->sync_ms = 1e3 * bench_median(sync, (int)ns);
    r->compute_ms = 1e3 * bench_median(comp, (int)ns);
    r->wait_ms = 1e3 * bench_median(wait, (int)ns);
    free(sync), free(comp), free(wait);
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
        rb[HB_MAX_REPEAT], syn[HB_MAX_REPEAT], cmp[HB_MAX_REPEAT], wt[HB_MAX_REPEAT];
    int n = 0, ns = 0;
    for (int i = 0; i < k; i++) {
        if (!v[i].ok) continue;
        sps[n] = v[i].samples_per_s;
        osc[n] = v[i].oscillation;
        imb[n] = v[i].imbalance;
        syn[n] = v[i].sync_ms;
        cmp[n] = v[i].compute_ms;
        wt[n] = v[i].wait_ms;
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
    out->compute_ms = bench_median(cmp, n);
    out->wait_ms = bench_median(wt, n);
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

/* ================================================================ options */

typedef struct {
    const char *out_dir; /* where configs, logs, CSV, plots and the report go */
    const char *json;    /* --json FILE */
    long iters;          /* iterations per run */
    long batch;          /* global batch */
    const char *layers;  /* MLP layers */
    int ddp;             /* also run the PyTorch DDP baseline */
    long repeat;         /* runs of every scenario and policy; the report gives medians */
    int n_pol;           /* policies to run, static first */
    const char *pol[N_POL];
    int scen_on[N_SCEN];    /* scenarios to run */
    bench_sets sets;        /* --set overrides passed to every run (but unread_set's) */
    const char *tmpl;       /* cluster file every run starts from */
    const char *python;     /* --python PATH for the DDP baseline, or NULL (search) */
    long port;              /* first of the HB_NODES + 1 ports the runs use (--port), 0: choose */
    char hetring[4096];     /* the hetring executable that runs the clusters */
    bench_python py;        /* where the DDP baseline's torch is (with --ddp) */
    int netns;              /* run the nodes over shaped veth links in namespaces */
    const char *link_rate;  /* --link-rate as given, or NULL: 1gbit */
    const char *link_delay; /* --link-delay as given, or NULL: 200us */
    double link_bps;        /* the links' rate, bits per second (--netns) */
    double link_delay_s;    /* the links' one-way delay, seconds (--netns) */
    const char *ddp_hooks;  /* --ddp-hooks as given, or NULL: none */
    int n_hooks;            /* DDP variants to run: none, fp16, bf16, powersgd:R */
    char hook[HB_MAX_HOOKS][16];
    /* per policy, as pol[]: the [controller] keys of the template and --set that it does not
     * read, left out of its runs (plan_unread; "" for none) */
    char unread[N_POL][1024];
} hetero_opts;

/* How far the bench got: runs completed, failed and planned. */
typedef struct {
    int done;   /* runs completed and analysed */
    int failed; /* runs that failed (a stop is no failure) */
    int total;  /* runs planned */
} progress;

/* "static,proportional,..." from the config module */
static void policy_list(char *out, size_t n) {
    size_t len = 0;
    out[0] = 0;
    for (int p = 0; p < N_POL && strcmp(cfg_policy_name(p), "?") != 0 && len < n; p++)
        len += (size_t)snprintf(out + len, n - len, "%s%s", p ? "," : "", cfg_policy_name(p));
}

static void usage(FILE *out) {
    char tmpl[4200];
    char pols[256];
    policy_list(pols, sizeof pols);
    fprintf(out,
            "usage: hetring bench hetero [--out DIR] [--json FILE] [--iters N] [--batch B]\n"
            "                            [--layers L] [--policies P,...] [--scenarios S,...]\n"
            "                            [--repeat K] [--ddp] [--python PATH] [--set S.K=V]...\n"
            "                            [--template FILE] [--port P]\n"
            "                            [--ddp-hooks H,...]\n"
            "                            [--netns [--link-rate RATE] [--link-delay D]]\n"
            "\n"
            "Run every scenario on %d local nodes for every policy and compare dynamic batching\n"
            "with static. Slowdowns are emulated by sleeping. Each run is `hetring local` on a\n"
            "cluster file built from the template. SIGINT or SIGTERM stops the bench: the run\n"
            "in progress is stopped, the runs completed so far are reported, and it exits 130\n"
            "or 143.\n"
            "\n"
            "  --out DIR        configs, logs, CSV, PNG plots and report.md (default bench-out)\n"
            "  --json FILE      one object per scenario and policy\n"
            "  --iters N        iterations per run (default 300)\n"
            "  --batch B        global batch (default 512)\n"
            "  --layers L       MLP layers (default 784,512,512,10)\n"
            "  --policies P     subset of %s (static always runs)\n"
            "  --scenarios S    subset of homogeneous,one-slow,graded,interference,mixed,demo\n"
            "                   (default all but mixed and demo; mixed: node 0 on cuda:0, the\n"
            "                   others on the CPU, real speeds, no emulation; needs a GPU;\n"
            "                   demo: the README's demo cluster, slowdowns 1,1.5,2,4)\n"
            "  --repeat K       run every scenario and policy K times, interleaved, and report\n"
            "                   medians; speed-ups pair each run with static's run of the same\n"
            "                   round (default 1)\n"
            "  --ddp            also run the PyTorch DDP (gloo) baseline where torch is installed\n"
            "                   (homogeneous, one-slow and demo)\n"
            "  --ddp-hooks H    the DDP variants --ddp runs, a list of none (fp32), fp16, bf16\n"
            "                   (DDP's compression hooks) and powersgd:R (DDP's PowerSGD hook at\n"
            "                   rank R); default none; each is a row of its own\n"
            "  --python PATH    the Python with torch for --ddp (default: python3 on PATH, then\n"
            "                   /usr/bin/python3, the first that has torch)\n"
            "  --set S.K=V      override a key in every run (e.g. train.bucket_bytes=0); a\n"
            "                   [controller] key a policy does not read (controller.ki: pid's),\n"
            "                   or a node.ID.capacity (static's), is left out of that policy's\n"
            "                   runs, and the report says so\n"
            "  --port P         the nodes listen on 127.0.0.1 ports P to P+%d and the DDP\n"
            "                   baseline meets on P+%d (default: %d free ports found at start)\n"
            "  --template FILE  cluster file with %d nodes the runs start from\n"
            "                   (default %s)\n"
            "  --netns          run every node in a network namespace of its own, on a veth\n"
            "                   link to a bridge, its egress shaped with tc (made at the start,\n"
            "                   removed at the end; needs root, ip and tc); nodes at\n"
            "                   10.77.0.1-%d; --ddp runs there too\n"
            "  --link-rate RATE with --netns: each link's rate in tc's syntax, a number and a\n"
            "                   unit (default 1gbit; e.g. 10gbit, 500mbit)\n"
            "  --link-delay D   with --netns: each link's one-way delay, a number and s, ms or\n"
            "                   us (default 200us; 0 for none)\n",
            HB_NODES, pols, HB_NODES - 1, HB_NODES, HB_NODES + 1, HB_NODES,
            bench_own_file("hetero.ini", tmpl, sizeof tmpl), HB_NODES);
}

/* --ddp-hooks: none, fp16, bf16 or powersgd:R (R in 1..64), comma-separated. -1 to go on,
 * else the exit status of a usage error. */
static int parse_hooks(hetero_opts *o, const char *list) {
    o->n_hooks = 0;
    for (const char *q = list;;) {
        size_t len = strcspn(q, ",");
        char h[32] = "";
        if (len < sizeof h) memcpy(h, q, len), h[len] = 0;
        char *end = NULL;
        long r = strncmp(h, "powersgd:", 9) == 0 ? strtol(h + 9, &end, 10) : 0;
        int ok = strcmp(h, "none") == 0 || strcmp(h, "fp16") == 0 || strcmp(h, "bf16") == 0 ||
                 (end && end != h + 9 && !*end && r >= 1 && r <= 64);
        if (!ok)
            return cli_usage_error("bench hetero",
                                   "--ddp-hooks: '%.*s' (expected none, fp16, bf16 or powersgd:R "
                                   "with R in 1..64)",
                                   (int)len, q);
        if (o->n_hooks == HB_MAX_HOOKS)
            return cli_usage_error("bench hetero", "--ddp-hooks: more than %d", HB_MAX_HOOKS);
        snprintf(o->hook[o->n_hooks++], sizeof o->hook[0], "%s", h);
        if (!q[len]) return -1;
        q += len + 1;
    }
}

/* Returns -1 to go on, else the exit status (after --help or a usage error). */
static int parse_opts(hetero_opts *o, int argc, char **argv, const char **pols,
                      const char **scens) {
    const bench_opt opts[] = {
        {.name = "out", .kind = BENCH_OPT_STR, .dst = &o->out_dir},
        {.name = "json", .kind = BENCH_OPT_OUT, .dst = &o->json},
        {.name = "iters", .kind = BENCH_OPT_LONG, .dst = &o->iters, .lo = 20, .hi = HB_MAX_ITERS},
        {.name = "batch",
         .kind = BENCH_OPT_LONG,
         .dst = &o->batch,
         .lo = 4 * HB_NODES,
         .hi = 1L << 30},
        {.name = "layers", .kind = BENCH_OPT_STR, .dst = &o->layers},
        {.name = "port",
         .kind = BENCH_OPT_LONG,
         .dst = &o->port,
         .lo = 1024,
         .hi = 65535 - HB_NODES},
        {.name = "policies", .kind = BENCH_OPT_STR, .dst = pols},
        {.name = "scenarios", .kind = BENCH_OPT_STR, .dst = scens},
        {.name = "ddp", .kind = BENCH_OPT_FLAG, .dst = &o->ddp},
        {.name = "repeat", .kind = BENCH_OPT_LONG, .dst = &o->repeat, .lo = 1, .hi = HB_MAX_REPEAT},
        {.name = "set", .kind = BENCH_OPT_FN, .dst = &o->sets, .fn = bench_add_set},
        {.name = "template", .kind = BENCH_OPT_STR, .dst = &o->tmpl},
        {.name = "python", .kind = BENCH_OPT_STR, .dst = &o->python},
        {.name = "netns", .kind = BENCH_OPT_FLAG, .dst = &o->netns},
        {.name = "link-rate", .kind = BENCH_OPT_STR, .dst = &o->link_rate},
        {.name = "link-delay", .kind = BENCH_OPT_STR, .dst = &o->link_delay},
        {.name = "ddp-hooks", .kind = BENCH_OPT_STR, .dst = &o->ddp_hooks},
        {0}};
    int rc = bench_parse_opts("hetero", opts, usage, argc, argv);
    if (rc >= 0) return rc;
    char why[256];
    if ((o->link_rate || o->link_delay) && !o->netns)
        return cli_usage_error("bench hetero",
                               "%s shapes the links of --netns, which was not given; add --netns "
                               "(loopback has no rate or delay to set)",
                               o->link_rate ? "--link-rate" : "--link-delay");
    if (o->link_rate && netns_parse_rate(o->link_rate, &o->link_bps, why, sizeof why) != 0)
        return cli_usage_error("bench hetero", "--link-rate: %s", why);
    if (o->link_delay && netns_parse_delay(o->link_delay, &o->link_delay_s, why, sizeof why) != 0)
        return cli_usage_error("bench hetero", "--link-delay: %s", why);
    if (o->ddp_hooks && !o->ddp)
        return cli_usage_error("bench hetero", "--ddp-hooks picks the variants of --ddp, which was "
                                               "not given; add --ddp");
    return parse_hooks(o, o->ddp_hooks ? o->ddp_hooks : "none");
}

/* static always, then the policies `pols` names (all when NULL), in the config's order */
static int select_policies(hetero_opts *o, const char *pols) {
    const char *names[N_POL], *bad;
    char all[256];
    int np = 0;
    size_t len;
    while (np < N_POL && strcmp(cfg_policy_name(np), "?") != 0)
        names[np] = cfg_policy_name(np), np++;
    if ((bad = list_unknown(pols, names, np, &len, all, sizeof all)))
        return cli_usage_error("bench hetero",
                               "unknown policy '%.*s' in --policies (expected some of %s)",
                               (int)len, bad, all);
    o->pol[o->n_pol++] = cfg_policy_name(CFG_POLICY_STATIC);
    for (int p = 0; p < N_POL && strcmp(cfg_policy_name(p), "?") != 0; p++)
        if (p != CFG_POLICY_STATIC && (!pols || list_has(pols, cfg_policy_name(p))))
            o->pol[o->n_pol++] = cfg_policy_name(p);
    return -1;
}

/* the scenarios `scens` names, each a known one (all but the asked-for ones when NULL) */
static int select_scenarios(hetero_opts *o, const char *scens) {
    const char *names[N_SCEN], *bad;
    char all[256];
    size_t len;
    for (int s = 0; s < N_SCEN; s++) names[s] = scenarios[s].name;
    if ((bad = list_unknown(scens, names, N_SCEN, &len, all, sizeof all)))
        return cli_usage_error("bench hetero",
                               "unknown scenario '%.*s' in --scenarios (expected some of %s)",
                               (int)len, bad, all);
    int any = 0;
    for (int s = 0; s < N_SCEN; s++)
        any |= o->scen_on[s] = scens ? list_has(scens, scenarios[s].name) : !scenarios[s].asked;
    if (!any)
        return cli_usage_error("bench hetero",
                               "--scenarios names no scenario (expected some of %s)", all);
    return -1;
}

/* ================================================================ one run */

/* The cfg_policy of the policy named `name` (one of o->pol). */
static int policy_id(const char *name) {
    int p = 0;
    while (strcmp(cfg_policy_name(p), name) != 0 && strcmp(cfg_policy_name(p), "?") != 0) p++;
    return p;
}

/* Whether --set `set` gives a [controller] key, or a node's capacity ("node.ID.capacity"),
 * that `policy` does not read, which the config module would refuse under it: such a --set is
 * left out of that policy's runs. */
static int unread_set(const char *set, int policy) {
    static const char pre[] = "controller.", node[] = "node.";
    const char *k = NULL;
    if (strncmp(set, pre, sizeof pre - 1) == 0) k = set + sizeof pre - 1;
    if (strncmp(set, node, sizeof node - 1) == 0 && (k = strchr(set + sizeof node - 1, '.')))
        k++;
    if (!k) return 0;
    char key[64];
    snprintf(key, sizeof key, "%.*s", (int)strcspn(k, "="), k);
    return !cfg_policy_uses(policy, key);
}

/* The [controller] keys of `c` that `policy` does not read, given another value than their
 * default (the keys of another policy, which the config module refuses under this one), and
 * the nodes' capacity hints it does not read, put back to their defaults; with `out`, each
 * named with where it was set ("n" bytes). */
static void reset_unread(cfg *c, int policy, char *out, size_t n) {
    const char *keys[16];
    int nodes[CFG_MAX_NODES];
    int nk = cfg_policy_unused(c, policy, keys, 16);
    int nn = cfg_capacity_unused(c, policy, nodes, CFG_MAX_NODES);
    size_t len = out ? strlen(out) : 0;
    for (int i = 0; i < nk + nn; i++) {
        char at[CFG_PATH + 64];
        const int node = i < nk ? -1 : nodes[i - nk];
        const char *key = i < nk ? keys[i] : "capacity";
        if (out && len < n && node < 0)
            len += (size_t)snprintf(out + len, n - len, "%scontroller.%s (%s)", len ? ", " : "",
                                    key, cfg_where(c, -1, key, at, sizeof at));
        else if (out && len < n)
            len += (size_t)snprintf(out + len, n - len, "%snode.%ld.%s (%s)", len ? ", " : "",
                                    c->nodes[node].id, key, cfg_where(c, node, key, at, sizeof at));
        if (node < 0)
            cfg_reset(c, key);
        else
            cfg_reset_node(c, node, key);
    }
}

/* The run's values over the template: model size, batch, length, policy, ports, speeds. */
static hr_status set_run(cfg *c, const hetero_opts *o, const scenario *s, const char *policy,
                         const char *interf, int port, char *err, size_t errlen) {
    if (c->n_nodes != HB_NODES)
        return hr_fail(err, errlen, HR_ERR_CONFIG, "%s: %d [node.ID] sections (expected %d)",
                       o->tmpl, c->n_nodes, HB_NODES);
    hr_status st = bench_cfg_set(c, err, errlen, "train.layers=%s", o->layers);
    if (st == HR_OK) st = bench_cfg_set(c, err, errlen, "train.global_batch=%ld", o->batch);
    if (st == HR_OK) st = bench_cfg_set(c, err, errlen, "train.iterations=%ld", o->iters);
    if (st == HR_OK) st = bench_cfg_set(c, err, errlen, "controller.policy=%s", policy);
    for (int k = 0; k < HB_NODES && st == HR_OK; k++) {
        long id = c->nodes[k].id;
        if (o->netns && id != k)
            return hr_fail(err, errlen, HR_ERR_CONFIG,
                           "%s: --netns needs the nodes numbered 0-%d in order ([node.%ld] is "
                           "number %d)",
                           o->tmpl, HB_NODES - 1, id, k);
        st = bench_cfg_set(c, err, errlen, "node.%ld.port=%d", id, port + k);
        if (st == HR_OK && o->netns) {
            char addr[32];
            netns_addr(k, addr, sizeof addr);
            st = bench_cfg_set(c, err, errlen, "node.%ld.host=%s", id, addr);
        }
        if (st == HR_OK)
            st = bench_cfg_set(c, err, errlen, "node.%ld.slowdown=%g", id, s->slowdown[k]);
        if (st == HR_OK && k == 1 && interf && interf[0])
            st = bench_cfg_set(c, err, errlen, "node.%ld.interference=%s", id, interf);
        if (st == HR_OK && k == s->gpu)
            st = bench_cfg_set(c, err, errlen, "node.%ld.device=cuda:0", id);
    }
    return st;
}

/* The run's cluster file: the template with this run's values set over it through the
 * config module, validated, and written out as the effective configuration. */
static int write_config(const char *path, const hetero_opts *o, const scenario *s,
                        const char *policy, const char *interf, int port) {
    char err[HR_ERRLEN], comment[256];
    cfg c;
    cfg_init(&c);
    hr_status st = cfg_parse_file(&c, o->tmpl, err, sizeof err);
    if (st == HR_OK) st = set_run(&c, o, s, policy, interf, port, err, sizeof err);
    if (st == HR_OK) reset_unread(&c, policy_id(policy), NULL, 0);
    if (st == HR_OK) st = cfg_validate(&c, err, sizeof err);
    snprintf(comment, sizeof comment,
             "generated by hetring bench hetero from %s: scenario %s, policy %s (%s)", o->tmpl,
             s->name, policy, s->gpu >= 0 ? "real speeds" : "emulated slowdowns");
    int rc = st == HR_OK ? bench_write_cfg(&c, path, comment) : -1;
    if (st != HR_OK)
        fprintf(stderr, "hetring bench hetero: %s\n", err);
    else if (rc != 0)
        fprintf(stderr, "hetring bench hetero: cannot write %s: %s\n", path, strerror(errno));
    cfg_free(&c);
    return rc;
}

/* One cluster run: `hetring local` on the run's file, as a user would start it; node 0's
 * metrics are read back into `log`. Returns 0, -1 when the run failed, BENCH_STOPPED when the
 * bench was asked to stop. */
static int run_one(const hetero_opts *o, const scenario *s, const char *policy, const char *interf,
                   run_log *log) {
    char conf[1024], metrics[1024], logpath[1024], m0[1024];
    snprintf(conf, sizeof conf, "%s/%s-%s.ini", o->out_dir, s->name, policy);
    snprintf(metrics, sizeof metrics, "%s/%s-%s-node{id}.jsonl", o->out_dir, s->name, policy);
    snprintf(logpath, sizeof logpath, "%s/%s-%s.log", o->out_dir, s->name, policy);
    snprintf(m0, sizeof m0, "%s/%s-%s-node0.jsonl", o->out_dir, s->name, policy);
    if (write_config(conf, o, s, policy, interf, (int)o->port) != 0) return -1;
    char *argv[2 * BENCH_MAX_SETS + 12];
    int n = 0;
    argv[n++] = (char *)o->hetring, argv[n++] = "local", argv[n++] = "--conf", argv[n++] = conf;
    if (o->netns) argv[n++] = "--netns", argv[n++] = (char *)netns_prefix();
    for (int i = 0; i < o->sets.n; i++)
        if (!unread_set(o->sets.v[i], policy_id(policy)))
            argv[n++] = "--set", argv[n++] = (char *)o->sets.v[i];
    argv[n++] = "--", argv[n++] = "--quiet", argv[n++] = "--metrics", argv[n++] = metrics;
    argv[n] = NULL;
    int rc = bench_spawn(argv, logpath, 0, 600);
    if (rc == BENCH_STOPPED) return BENCH_STOPPED;
    if (rc != 0) {
        fprintf(stderr, "bench hetero: %s/%s failed (hetring local exited %d%s); see %s\n", s->name,
                policy, rc, rc == 124 ? ", past its deadline" : "", logpath);
        return -1;
    }
    return read_log(m0, log);
}

static void write_csv(const char *dir, const char *scen, const char *policy, const run_log *l) {
    char path[1024], tmp[1100];
    snprintf(path, sizeof path, "%s/%s-%s.csv", dir, scen, policy);
    FILE *f = bench_open_out(path, tmp, sizeof tmp);
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
    bench_commit(f, tmp, path);
}

/* PNGs from the CSV (columns iter, wall_s, loss, b0.., t0.., changed): batch sizes and compute
 * times of `policy`, loss against wall time of static and `policy`. */
static void plot_scenario(const char *dir, const char *scen, const char *policy) {
    char csv[PLOT_PATH], csv_static[PLOT_PATH], script[PLOT_PATH], log[PLOT_PATH];
    snprintf(csv, sizeof csv, "%s/%s-%s.csv", dir, scen, policy);
    snprintf(csv_static, sizeof csv_static, "%s/%s-static.csv", dir, scen);
    snprintf(script, sizeof script, "%s/%s.gp", dir, scen);
    snprintf(log, sizeof log, "%s/gnuplot.log", dir);
    static plot_spec p[3];
    memset(p, 0, sizeof p);
    snprintf(p[0].png, sizeof p[0].png, "%s/%s-batch.png", dir, scen);
    snprintf(p[0].title, sizeof p[0].title, "%s: batch size per node (%s, emulated)", scen, policy);
    p[0].xlabel = "iteration", p[0].ylabel = "samples";
    snprintf(p[1].png, sizeof p[1].png, "%s/%s-time.png", dir, scen);
    snprintf(p[1].title, sizeof p[1].title, "%s: compute time per node (%s, emulated)", scen,
             policy);
    p[1].xlabel = "iteration", p[1].ylabel = "ms";
    for (int k = 0; k < HB_NODES; k++) {
        plot_add(&p[0], csv, 1, 4 + k, 1, "node %d", k);
        plot_add(&p[1], csv, 1, 4 + HB_NODES + k, 1000, "node %d", k);
    }
    snprintf(p[2].png, sizeof p[2].png, "%s/%s-loss.png", dir, scen);
    snprintf(p[2].title, sizeof p[2].title, "%s: training loss against wall time", scen);
    p[2].xlabel = "seconds", p[2].ylabel = "loss";
    plot_add(&p[2], csv_static, 2, 3, 1, "static");
    plot_add(&p[2], csv, 2, 3, 1, "%s", policy);
    plot_render(script, p, 3, log);
}

/* PyTorch DDP baseline with the Python found at the start (o->py). Returns samples/s, or NAN
 * with `why` saying why not. */
static double ddp_baseline(const hetero_opts *o, const scenario *s, const char *hook, char *why,
                           size_t whylen) {
    if (!o->py.path[0]) {
        snprintf(why, whylen, "%s", o->py.why);
        return NAN;
    }
    char script[1100], nodes[16], batch[32], slow[128], iters[32], port[24];
    bench_own_file("py/ddp_baseline.py", script, sizeof script);
    snprintf(nodes, sizeof nodes, "%d", HB_NODES);
    snprintf(batch, sizeof batch, "%ld", o->batch);
    snprintf(slow, sizeof slow, "%g,%g,%g,%g", s->slowdown[0], s->slowdown[1], s->slowdown[2],
             s->slowdown[3]);
    snprintf(iters, sizeof iters, "%ld", o->iters / 2);
    snprintf(port, sizeof port, "%ld", o->port + HB_NODES);
    char *argv[] = {(char *)o->py.path,
                    script,
                    "--nodes",
                    nodes,
                    "--layers",
                    (char *)o->layers,
                    "--batch",
                    batch,
                    "--slowdowns",
                    slow,
                    "--iters",
                    iters,
                    "--repeats",
                    "3",
                    "--port",
                    port,
                    "--hook",
                    (char *)hook,
                    o->netns ? "--netns" : NULL,
                    (char *)netns_prefix(),
                    NULL};
    char out[4096] = "", err[512] = "";
    int rc = bench_capture(argv, 1800, out, sizeof out, err, sizeof err);
    double v = NAN;
    if (rc == 0 && json_number(out, "samples_per_s", &v) == 0 && v > 0) return v;
    snprintf(why, whylen, "%.300s %.300s exited %d%s%.300s", o->py.path, script, rc,
             err[0] ? ": " : "", err);
    return NAN;
}

/* ================================================================ report */

/* The three outputs of the suite: the table on stdout, report.md and the --json file. */
typedef struct {
    FILE *md;       /* report.md */
    FILE *js;       /* --json FILE, or NULL */
    int first_json; /* no JSON object written yet */
    long batch;     /* the global batch, for the ceiling */
} report;

/* "loopback", or "veth in network namespaces, 1 Gbit/s, 200 us one-way delay (tc netem)" */
static void links_str(const hetero_opts *o, char *out, size_t n) {
    if (!o->netns) {
        snprintf(out, n, "loopback (127.0.0.1), unshaped");
        return;
    }
    char rs[32];
    netns_rate_str(o->link_bps, rs, sizeof rs);
    if (netns_no_delay())
        snprintf(out, n,
                 "veth in network namespaces, %s (tc tbf: netem is missing here, so the "
                 "%.0f us delay is NOT emulated)",
                 rs, o->link_delay_s * 1e6);
    else
        snprintf(out, n, "veth in network namespaces, %s, %.0f us one-way delay (tc netem)", rs,
                 o->link_delay_s * 1e6);
}

static int report_open(report *r, const hetero_opts *o) {
    char path[1024];
    snprintf(path, sizeof path, "%s/report.md", o->out_dir);
    r->md = fopen(path, "w");
    r->js = o->json ? fopen(o->json, "w") : NULL;
    r->first_json = 1;
    r->batch = o->batch;
    if (!r->md || (o->json && !r->js)) {
        fprintf(stderr, "bench hetero: cannot write %s\n", !r->md ? path : o->json);
        if (r->md) fclose(r->md);
        if (r->js) fclose(r->js);
        return -1;
    }
    if (r->js) fprintf(r->js, "[\n");
    fprintf(r->md,
            "# hetring bench hetero\n\n%d local nodes, MLP %s, global batch %ld, %ld "
            "iterations per run, median of %ld run(s). Slowdowns are emulated by sleeping (the "
            "mixed scenario runs at real speeds).\n\n",
            HB_NODES, o->layers, o->batch, o->iters, o->repeat);
    char pydesc[1400] = "";
    if (o->ddp) bench_python_describe(&o->py, pydesc, sizeof pydesc);
    printf("# hetring bench hetero: %d local nodes, MLP %s, global batch %ld, %ld iterations per "
           "run, median of %ld run(s), emulated slowdowns (mixed: real speeds)\n",
           HB_NODES, o->layers, o->batch, o->iters, o->repeat);
    bench_print_blas(stdout, "# ");
    bench_print_blas(r->md, "");
    char links[256];
    links_str(o, links, sizeof links);
    printf("# links: %s\n", links);
    fprintf(r->md, "\nlinks: %s\n", links);
    for (int p = 0; p < o->n_pol; p++)
        if (o->unread[p][0]) {
            printf("# policy %s does not read %s: left out of its runs\n", o->pol[p], o->unread[p]);
            fprintf(r->md, "\npolicy %s does not read %s: left out of its runs\n", o->pol[p],
                    o->unread[p]);
        }
    fprintf(r->md, "\n");
    if (o->ddp) printf("# pytorch: %s\n", pydesc), fprintf(r->md, "pytorch: %s\n\n", pydesc);
    fprintf(r->md, "Where a step's time goes: *compute ms*, the slowest node's compute; *wait ms*, "
                   "how much longer that is than the mean node's (what balancing can win); *sync "
                   "ms*, the rest of the step after the slowest compute (the all-reduce on the "
                   "wire, the update); *comm ceiling*, B / sync: the samples/s that communication "
                   "leaves were compute free.\n\n");
    fprintf(r->md, "| scenario | policy | samples/s | speed-up vs static | ideal | efficiency | "
                   "re-balance adjustments | oscillation | max/min compute | sync ms | compute ms "
                   "| wait ms | comm ceiling (samples/s) |\n"
                   "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    printf("%-13s %-13s %10s %8s %7s %6s %6s %7s %7s %7s\n", "scenario", "policy", "samples/s",
           "speedup", "ideal", "effic", "rebal", "oscill", "imbal", "sync");
    return 0;
}

static void report_row(report *rep, const char *scen, const char *pol, int is_static,
                       const run_result *r) {
    if (!r->ok) {
        const char *what =
            bench_stopped() ? "no run completed before the stop" : "every run failed";
        printf("%-13s %-13s (%s)\n", scen, pol, what);
        fprintf(rep->md, "| %s | %s | %s | | | | | | | | | | |\n", scen, pol, what);
        return;
    }
    char rb[32] = "-";
    if (!is_static && r->rebalance >= 0) snprintf(rb, sizeof rb, "%.0f", r->rebalance);
    printf("%-13s %-13s %10.0f %7.2fx %6.2fx %5.0f%% %6s %6.1f%% %7.2f %7.1f\n", scen, pol,
           r->samples_per_s, r->speedup, r->ideal, 100 * r->speedup / r->ideal, rb,
           100 * r->oscillation, r->imbalance, r->sync_ms);
    fflush(stdout);
    fprintf(rep->md,
            "| %s | %s | %.0f | %.2fx | %.2fx | %.0f%% | %s | %.1f%% | %.2f | %.1f | %.1f | %.1f "
            "| %.0f |\n",
            scen, pol, r->samples_per_s, r->speedup, r->ideal, 100 * r->speedup / r->ideal, rb,
            100 * r->oscillation, r->imbalance, r->sync_ms, r->compute_ms, r->wait_ms,
            r->sync_ms > 0 ? 1e3 * (double)rep->batch / r->sync_ms : 0);
    if (!rep->js) return;
    fprintf(rep->js,
            "%s  {\"scenario\": \"%s\", \"policy\": \"%s\", \"samples_per_s\": %.1f, "
            "\"speedup_vs_static\": %.4f, \"ideal_speedup\": %.4f, "
            "\"rebalance_adjustments\": %s, \"oscillation\": %.5f, "
            "\"imbalance\": %.4f, \"sync_ms\": %.3f, \"compute_ms\": %.3f, \"wait_ms\": %.3f, "
            "\"runs\": %d, \"emulated\": %s}",
            rep->first_json ? "" : ",\n", scen, pol, r->samples_per_s, r->speedup, r->ideal,
            strcmp(rb, "-") ? rb : "null", r->oscillation, r->imbalance, r->sync_ms, r->compute_ms,
            r->wait_ms, r->runs, strcmp(scen, "mixed") ? "true" : "false");
    rep->first_json = 0;
}

/* The DDP row: PyTorch's rate against hetring's static and best dynamic ones. */
static void report_ddp(report *rep, const hetero_opts *o, const scenario *sc, const run_result *res,
                       int best) {
    for (int h = 0; h < o->n_hooks && !bench_stopped(); h++) {
        char why[1400], name[32];
        snprintf(name, sizeof name, "ddp-gloo%s%s", strcmp(o->hook[h], "none") ? "-" : "",
                 strcmp(o->hook[h], "none") ? o->hook[h] : "");
        double ddp = ddp_baseline(o, sc, o->hook[h], why, sizeof why);
        if (bench_stopped()) return;
        if (isnan(ddp)) {
            printf("%-13s %-13s (PyTorch DDP not available: %s)\n", sc->name, name, why);
            fprintf(rep->md,
                    "| %s | PyTorch DDP (gloo), hook %s | not available: %s | | | | | | "
                    "| | | | |\n",
                    sc->name, o->hook[h], why);
            continue;
        }
        double mine = best > 0 ? res[best].samples_per_s : res[0].samples_per_s;
        printf("%-13s %-13s %10.0f   hetring static %.2fx, best dynamic %.2fx of DDP\n", sc->name,
               name, ddp, res[0].samples_per_s / ddp, mine / ddp);
        fprintf(rep->md, "| %s | PyTorch DDP (gloo), hook %s | %.0f | %.2fx | | | | | | | | | |\n",
                sc->name, o->hook[h], ddp, ddp / res[0].samples_per_s);
        if (rep->js) {
            fprintf(rep->js,
                    "%s  {\"scenario\": \"%s\", \"policy\": \"%s\", \"samples_per_s\": %.1f, "
                    "\"speedup_vs_static\": %.4f, \"best_hetring_over_this\": %.4f}",
                    rep->first_json ? "" : ",\n", sc->name, name, ddp, ddp / res[0].samples_per_s,
                    mine / ddp);
            rep->first_json = 0;
        }
    }
}

/* Finish report.md and --json; -1 when either could not be written whole (said). */
static int report_close(report *rep, const hetero_opts *o, const progress *pr) {
    if (bench_stopped())
        fprintf(rep->md,
                "\n**Stopped by signal %d** (%s) after %d of %d runs; the table holds the runs "
                "completed before it.\n",
                bench_stopped(), strsignal(bench_stopped()), pr->done, pr->total);
    fprintf(rep->md,
            "\nEfficiency is the achieved speed-up over the ideal one, max f * sum(1/f) / N "
            "per phase. Oscillation is the mean largest relative batch move per iteration in "
            "steady state. Balance is judged on each node's median compute time over %d "
            "iterations. Sync is the median time per iteration beyond the slowest node's compute "
            "(all-reduce, update, bookkeeping): balancing cannot remove it, and the ideal leaves "
            "it out. Plots: SCENARIO-batch.png, SCENARIO-time.png, SCENARIO-loss.png.\n",
            BAL_WINDOW);
    char path[1024];
    snprintf(path, sizeof path, "%s/report.md", o->out_dir);
    int rc = bench_close(rep->md, path);
    if (rep->js) fprintf(rep->js, "\n]\n");
    if (bench_close(rep->js, o->json) != 0) rc = -1;
    printf("report: %s/report.md\n", o->out_dir);
    return rc;
}

/* ================================================================ scenarios */

/* Where a scenario's speeds change and what counts as steady state (iterations). */
typedef struct {
    const char *schedule;  /* node 1's interference schedule */
    long change;           /* last speed change, 0 for none */
    long steady;           /* first iteration of the steady state */
    double ideal;          /* ideal speed-up over static */
    double rate[HB_NODES]; /* mixed: each node's own compute throughput, samples/s (0: none) */
} scenario_plan;

/* The interference step happens at 40% and ends at 70% of the run. */
static void plan_scenario(const hetero_opts *o, const scenario *sc, char *interf, size_t n,
                          scenario_plan *pl) {
    long t0 = o->iters * 4 / 10, t1 = o->iters * 7 / 10;
    snprintf(interf, n, "%ld:3,%ld:1", t0, t1);
    pl->schedule = sc->interference ? sc->interference : interf;
    pl->change = sc->interference ? 0 : t1;
    pl->steady = sc->interference ? o->iters / 2 : t1 + (o->iters - t1) / 3;
    pl->ideal = ideal_speedup(sc, o->iters, t0, t1, 3);
}

/* The mixed scenario's speeds: every node's own throughput and the ideal they allow. */
static void report_rates(report *rep, const scenario *sc, const scenario_plan *pl) {
    char line[512];
    int at = snprintf(line, sizeof line,
                      "%s: each node's own compute throughput (static run, B/%d "
                      "each):",
                      sc->name, HB_NODES);
    for (int k = 0; k < HB_NODES && at < (int)sizeof line; k++)
        at += snprintf(line + at, sizeof line - (size_t)at, " node %d%s %.0f samples/s%s", k,
                       k == sc->gpu ? " (cuda:0)" : " (cpu)", pl->rate[k],
                       k + 1 < HB_NODES ? "," : "");
    printf("%s; ideal speed-up sum/(%d min) = %.2fx\n", line, HB_NODES, pl->ideal);
    fprintf(rep->md, "\n%s; ideal speed-up sum/(%d min) = %.2fx\n\n", line, HB_NODES, pl->ideal);
    fflush(stdout);
}

/* K rounds, each running every policy once, so that slow phases of the shared machine hit all
 * policies alike; rr[p][round] is each run's analysis. Counts runs in `pr`; returns at once
 * when the bench is asked to stop. */
/* A node's own compute throughput in a run: the median over the steady half of b_k / t_k
 * (samples per second of compute, the link left out), from node 0's record of every node. */
static double node_rate(const run_log *l, int k) {
    double *v = malloc(sizeof *v * (size_t)(l->n + 1));
    int n = 0;
    for (long i = l->n / 2; v && i < l->n; i++)
        if (l->t[i][k] > 0) v[n++] = l->b[i][k] / l->t[i][k];
    double r = n ? bench_median(v, n) : 0;
    free(v);
    return r;
}

/* Real speeds (mixed): each node's throughput, from the static run where every node has B/N,
 * and the ideal speed-up sum(s) / (N * min(s)) of perfect balancing over static. */
static void measure_rates(const run_log *l, scenario_plan *pl) {
    double sum = 0, mn = INFINITY;
    for (int k = 0; k < HB_NODES; k++) {
        pl->rate[k] = node_rate(l, k);
        sum += pl->rate[k], mn = fmin(mn, pl->rate[k]);
    }
    if (mn > 0) pl->ideal = sum / (HB_NODES * mn);
}

static void run_rounds(const hetero_opts *o, const scenario *sc, scenario_plan *pl,
                       run_result rr[][HB_MAX_REPEAT], progress *pr) {
    for (int round = 0; round < o->repeat; round++)
        for (int p = 0; p < o->n_pol; p++) {
            run_log log;
            int rc = run_one(o, sc, o->pol[p], pl->schedule, &log);
            if (rc == 0) {
                if (sc->gpu >= 0 && p == 0 && round == 0) measure_rates(&log, pl);
                analyse(&log, pl->change, pl->steady, o->batch, &rr[p][round]);
                write_csv(o->out_dir, sc->name, o->pol[p], &log); /* the last round's */
                run_log_free(&log);
                pr->done++;
            } else if (rc != BENCH_STOPPED) {
                pr->failed++;
            }
            if (bench_stopped()) return;
        }
}

/* Before any run: each policy's [controller] keys of the template and --set that it does not
 * read, which its runs leave out rather than fail on (the report names them once: unread[]),
 * and every --set tried on the template, so that one no run would take (an unknown key, a
 * malformed value) stops the bench at once, naming it (exit 2). */
static int plan_unread(hetero_opts *o) {
    for (int p = 0; p < o->n_pol; p++) {
        char err[HR_ERRLEN], *u = o->unread[p];
        const size_t n = sizeof o->unread[p];
        const int id = policy_id(o->pol[p]);
        cfg c;
        cfg_init(&c);
        hr_status st = cfg_parse_file(&c, o->tmpl, err, sizeof err);
        if (st == HR_OK) st = bench_cfg_set(&c, err, sizeof err, "controller.policy=%s", o->pol[p]);
        if (st == HR_OK) reset_unread(&c, id, u, n);
        size_t len = strlen(u);
        for (int i = 0; i < o->sets.n && st == HR_OK; i++)
            if ((st = cfg_set(&c, o->sets.v[i], err, sizeof err)) == HR_OK &&
                unread_set(o->sets.v[i], id) && len < n)
                len +=
                    (size_t)snprintf(u + len, n - len, "%s--set %s", len ? ", " : "", o->sets.v[i]);
        cfg_free(&c);
        if (st != HR_OK) {
            fprintf(stderr, "hetring bench hetero: %s\n", err);
            return CLI_USAGE;
        }
    }
    return -1;
}

/* Before any run: the first scenario's static run file, with the --set overrides, checked
 * as `hetring config --node` checks a node (its data against the model, its port), so that a
 * --template, --layers or --set that every run would refuse stops the bench at once, naming
 * the problem (exit 2), rather than failing each run into its log. The node checked is on the
 * CPU; with --netns only the file is checked (its hosts are in namespaces not made yet). */
static int check_runs(const hetero_opts *o) {
    int s = 0;
    while (!o->scen_on[s]) s++;
    const scenario *sc = &scenarios[s];
    char conf[1024], node[24];
    snprintf(conf, sizeof conf, "%s/%s-%s.ini", o->out_dir, sc->name, o->pol[0]);
    if (write_config(conf, o, sc, o->pol[0], "", (int)o->port) != 0) return CLI_USAGE;
    cfg c;
    char err[HR_ERRLEN];
    cfg_init(&c);
    if (cfg_parse_file(&c, conf, err, sizeof err) != HR_OK) {
        fprintf(stderr, "hetring bench hetero: %s\n", err);
        cfg_free(&c);
        return CLI_USAGE;
    }
    snprintf(node, sizeof node, "%ld", c.nodes[sc->gpu == 0 ? 1 : 0].id);
    cfg_free(&c);
    char *argv[2 * BENCH_MAX_SETS + 12];
    int n = 0;
    argv[n++] = (char *)o->hetring, argv[n++] = "config", argv[n++] = "--conf", argv[n++] = conf;
    for (int i = 0; i < o->sets.n; i++)
        if (!unread_set(o->sets.v[i], policy_id(o->pol[0])))
            argv[n++] = "--set", argv[n++] = (char *)o->sets.v[i];
    if (!o->netns) argv[n++] = "--node", argv[n++] = node;
    argv[n] = NULL;
    int rc = bench_spawn_quiet(argv, 60); /* the configuration it prints does not matter */
    if (rc == 0 || rc == BENCH_STOPPED) return rc == 0 ? -1 : 128 + bench_stopped();
    fprintf(stderr,
            "hetring bench hetero: the runs' cluster file (%s, from --template %s and the "
            "options) is refused as above; nothing was run\n",
            conf, o->tmpl);
    return CLI_USAGE;
}

/* Run one scenario and report it: medians over the rounds, speed-ups paired within a round,
 * plots of the fastest dynamic policy. After a stop, the runs completed so far are reported
 * and nothing more is run. */
static void run_scenario(const hetero_opts *o, const scenario *sc, report *rep, progress *pr) {
    char interf[64];
    scenario_plan pl;
    plan_scenario(o, sc, interf, sizeof interf, &pl);
    static run_result rr[N_POL][HB_MAX_REPEAT];
    memset(rr, 0, sizeof rr);
    run_rounds(o, sc, &pl, rr, pr);
    if (sc->gpu >= 0) report_rates(rep, sc, &pl);
    run_result res[N_POL];
    int best = -1;
    for (int p = 0; p < o->n_pol; p++) {
        median_result(rr[p], rr[0], (int)o->repeat, &res[p]);
        res[p].ideal = pl.ideal;
        report_row(rep, sc->name, o->pol[p], p == 0, &res[p]);
        if (res[p].ok && p > 0 && (best < 0 || res[p].samples_per_s > res[best].samples_per_s))
            best = p;
    }
    if (bench_stopped()) return;
    if (best > 0 && res[0].ok) plot_scenario(o->out_dir, sc->name, o->pol[best]);
    if (o->ddp && (strcmp(sc->name, "homogeneous") == 0 || strcmp(sc->name, "one-slow") == 0 ||
                   strcmp(sc->name, "demo") == 0))
        report_ddp(rep, o, sc, res, best);
}

int bench_hetero(int argc, char **argv) {
    static char tmpl[4200];
    hetero_opts o = {.out_dir = "bench-out",
                     .iters = 300,
                     .batch = 512,
                     .layers = "784,512,512,10",
                     .repeat = 1,
                     .tmpl = bench_own_file("hetero.ini", tmpl, sizeof tmpl),
                     .link_bps = 1e9,
                     .link_delay_s = 200e-6};
    const char *pols = NULL, *scens = NULL;
    int rc = parse_opts(&o, argc, argv, &pols, &scens);
    if (rc < 0) rc = select_policies(&o, pols);
    if (rc < 0) rc = select_scenarios(&o, scens);
    if (rc >= 0) return rc;
    rc = bench_prepare_runs("hetero", o.hetring, sizeof o.hetring, o.out_dir);
    if (rc >= 0) return rc;
    if (o.port == 0 && (o.port = bench_free_ports(HB_NODES + 1)) < 0)
        return fprintf(stderr,
                       "hetring bench hetero: no %d free ports on 127.0.0.1 in "
                       "10000-30799; give --port P\n",
                       HB_NODES + 1),
               CLI_FAIL;
    bench_stop_on_signals();
    if (o.ddp) { /* before any run, so that a bad --python stops the bench at once */
        int found = bench_find_python(o.python, &o.py);
        if (found == -2) return cli_usage_error("bench hetero", "%s", o.py.why);
    } else if (o.python) {
        return cli_usage_error("bench hetero", "--python is for the --ddp baseline; add --ddp");
    }
    for (int s = 0; s < N_SCEN; s++) { /* a GPU scenario needs the GPU before anything runs */
        char why[HR_ERRLEN];
        const char *fault = getenv("HETRING_FAULT"); /* the nodes' emulated GPU (test hooks) */
        if (o.scen_on[s] && scenarios[s].gpu >= 0 && !(fault && strstr(fault, "emu_device")) &&
            device_cuda_check(0, why, sizeof why) != HR_OK)
            return cli_usage_error("bench hetero", "scenario %s needs cuda:0: %s",
                                   scenarios[s].name, why);
    }
    if ((rc = plan_unread(&o)) >= 0 || (rc = check_runs(&o)) >= 0) return rc;
    if (o.netns && netns_setup(HB_NODES, o.link_bps, o.link_delay_s) != 0) {
        fprintf(stderr, "hetring bench hetero: could not create the network namespaces (needs "
                        "root, ip and tc); removed what was made\n");
        netns_cleanup();
        return CLI_FAIL;
    }
    report rep;
    if (report_open(&rep, &o) != 0) return CLI_FAIL;
    progress pr = {0, 0, 0};
    for (int s = 0; s < N_SCEN; s++) pr.total += o.scen_on[s] * o.n_pol * (int)o.repeat;
    for (int s = 0; s < N_SCEN && !bench_stopped(); s++)
        if (o.scen_on[s]) run_scenario(&o, &scenarios[s], &rep, &pr);
    int lost = report_close(&rep, &o, &pr) != 0;
    int stopped = bench_stop_status("hetero", pr.done, pr.total, pr.failed);
    if (stopped >= 0) return stopped;
    return pr.failed || lost ? CLI_FAIL : CLI_OK;
}
