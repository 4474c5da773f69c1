/*
 * bench_allreduce.c: `hetring bench allreduce`, the ring all-reduce bandwidth in the format of
 * nccl-tests (size, count, type, redop, time, algbw, busbw, #wrong; busbw = algbw*2(N-1)/N).
 *
 * The bench forks N nodes on this machine, each forming the ring over 127.0.0.1 (or, with
 * --netns, over veth links in network namespaces it creates, shaped with tc to 1 Gbit/s, or the
 * --link-rate given, and 200 us of delay, and removes again when it ends, also on failure or
 * SIGINT/SIGTERM; bench/netns.c, which hands tc numbers it formats, never the user's text). For
 * each size every node first runs one checked all-reduce (exact integer sums, counted in #wrong),
 * then warm-up and timed iterations; the time is the slowest node's mean per iteration.
 * R, the rate of one iperf3 TCP stream on loopback, is measured (or given with --rate) and
 * printed next to the table, because on one machine busbw <= R/N; the iperf3 server it starts
 * is killed once the client is done, and by SIGINT or SIGTERM while it runs.
 */
#include "base/hr_cores.h"
#include "base/hr_log.h"
#include "base/hr_time.h"
#include "bench/bench.h"
#include "bench/bench_util.h"
#include "bench/netns.h"
#include "cli/cli.h"
#include "cluster/ring_setup.h"
#include "conf/cfg.h"
#include "ring/ring.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define AR_MAX (1L << 30) /* the largest size: every node holds its buffers in this process */

typedef struct {
    int nodes;             /* N */
    int security;          /* CFG_SEC_* */
    size_t min_bytes;      /* first size */
    size_t max_bytes;      /* last size */
    long factor;           /* each size is the previous times this (nccl-tests' -f) */
    int iters;             /* timed iterations per size (at least 200 below 1 MiB) */
    int warmup;            /* untimed iterations per size */
    const char *json;      /* --json FILE or NULL */
    int netns;             /* run over shaped veth links in namespaces */
    const char *link_rate; /* --link-rate as given (tc syntax), or NULL: 1gbit */
    double link_bps;       /* the links' rate in bits per second (--netns) */
    double rate;           /* R in GB/s; 0 = measure with iperf3 */
    size_t segment;        /* segment_bytes, 0 = default */
    size_t tree_bytes;     /* tree_bytes, SIZE_MAX = the default */
    long port;             /* first port (node i: port + i); with --netns every node's port */
    const char *wire;      /* --wire as given: fp32 (default) or bf16 */
    int bf16;              /* ring_allreduce_bf16: bf16 on the wire */
} ar_opts;

static void usage(FILE *out) {
    fprintf(out,
            "usage: hetring bench allreduce [--nodes N] [--security MODE] [-b|--min-bytes A]\n"
            "                               [-e|--max-bytes B] [-f|--step-factor F]\n"
            "                               [--iters K] [--warmup W] [--json FILE] [--netns]\n"
            "                               [--link-rate RATE] [--rate R] [--segment BYTES]\n"
            "                               [--tree-bytes BYTES] [--wire fp32|bf16]\n"
            "                               [--port P]\n"
            "\n"
            "All-reduce bandwidth of N local nodes in the nccl-tests table format. -b, -e\n"
            "and -f are nccl-tests' names for the smallest size, the largest, the step.\n"
            "\n"
            "  --nodes N              nodes (default 2)\n"
            "  --security MODE        none, auth or encrypt (default none; auth and encrypt\n"
            "                         use a random cluster pre-shared key)\n"
            "  -b, --min-bytes A      smallest size (default 8); K, M, G suffixes (x1024)\n"
            "  -e, --max-bytes B      largest size (default 64M; at most 1G); K, M, G suffixes\n"
            "  -f, --step-factor F    each size is the last one times F (default 2; 2..1024)\n"
            "  --iters K              timed iterations per size (default 20; 200 below 1 MiB)\n"
            "  --warmup W             untimed iterations per size (default 3)\n"
            "  --json FILE            also write one JSON object per size\n"
            "  --netns                run over veth links in network namespaces, shaped with tc\n"
            "                         to 1 Gbit/s and 200 us delay (needs root; removed after)\n"
            "  --link-rate RATE       with --netns: the links' rate in tc's syntax, a number and\n"
            "                         a unit: bit, kbit, mbit, gbit, tbit (x1000), kibit .. tibit\n"
            "                         (x1024), or bps, kbps .. tbps in bytes per second; e.g.\n"
            "                         10gbit, 500mbit (1mbit to 1tbit; default 1gbit)\n"
            "  --rate R               R in GB/s instead of measuring it with iperf3\n"
            "  --segment BYTES        pipeline segment size (default: the ring's)\n"
            "  --tree-bytes BYTES     largest all-reduce over the tree of 4+ nodes (default:\n"
            "                         the ring's, 64K; 0: every all-reduce on the ring)\n"
            "  --wire fp32|bf16       what goes on the wire: float32 (default), or bfloat16\n"
            "                         (ring_allreduce_bf16: half the bytes, every sum rounded\n"
            "                         to bf16); sizes, algbw and busbw count the float32 buffer\n"
            "                         all-reduced, so a faster wire shows as more GB/s\n"
            "  --port P               node i listens on 127.0.0.1 port P+i, and iperf3's server\n"
            "                         on P+N, or on another free port when that one is taken\n"
            "                         (default: N+1 free ports found at start); with --netns\n"
            "                         every node listens on port P in its own namespace\n"
            "                         (default 47000)\n"
            "  -h, --help             this text\n");
}

/* ================================================================ R, by iperf3 */

#define R_NO_IPERF (-1.0) /* measure_r: iperf3 is not installed */
#define R_NO_PORT  (-2.0) /* measure_r: no free port for its server */

/* The iperf3 server while R is measured, 0 otherwise: a signal that ends the bench then ends it
 * too (and PR_SET_PDEATHSIG, should the bench die otherwise), as it would wait for ever for a
 * client that never comes. */
static volatile pid_t iperf_server;

static void kill_server_and_die(int sig) {
    if (iperf_server > 0) kill(iperf_server, SIGKILL);
    signal(sig, SIG_DFL);
    raise(sig);
}

/* `iperf3 -s -1` on 127.0.0.1:port, its output dropped; its pid, or -1. */
static pid_t start_server(const char *iperf, long port) {
    char p[24];
    snprintf(p, sizeof p, "%ld", port);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open("/dev/null", O_WRONLY);
        if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0) _exit(127);
        execl(iperf, "iperf3", "-s", "-1", "-p", p, "-B", "127.0.0.1", (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* R in GB/s: one iperf3 TCP stream on loopback for 3 s, its server on `port` (the one after the
 * nodes'), or on another free port when that one is taken (saying so); 0 when it failed,
 * R_NO_IPERF when there is no iperf3 in PATH, R_NO_PORT when no port is free. The server is
 * gone when it returns, or when a signal ends the bench meanwhile. */
static double measure_r(long port) {
    char iperf[1024], p[24];
    if (bench_in_path("iperf3", iperf, sizeof iperf) != 0) return R_NO_IPERF;
    if (!bench_port_free((int)port)) {
        long taken = port;
        if ((port = bench_free_ports(1)) < 0) return R_NO_PORT;
        fprintf(stderr,
                "hetring bench allreduce: port %ld for the iperf3 server is taken; it listens "
                "on %ld\n",
                taken, port);
    }
    snprintf(p, sizeof p, "%ld", port);
    struct sigaction sa = {.sa_handler = kill_server_and_die}, old_int, old_term;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    fflush(stdout);
    fflush(stderr);
    iperf_server = start_server(iperf, port);
    static char buf[1 << 16];
    buf[0] = 0;
    if (iperf_server > 0) {
        const struct timespec wait_listen = {0, 500 * 1000 * 1000};
        nanosleep(&wait_listen, NULL);
        char *client[] = {iperf, "-c", "127.0.0.1", "-p", p, "-t", "3", "-J", NULL};
        bench_capture(client, 20, buf, sizeof buf, NULL, 0);
        kill(iperf_server, SIGKILL); /* gone by now unless no client reached it */
        waitpid(iperf_server, NULL, 0);
    }
    iperf_server = 0;
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    char *s = strstr(buf, "\"sum_received\"");
    double bps = 0;
    if (!s || json_number(s, "bits_per_second", &bps) != 0) return 0;
    return bps / 8e9;
}

/* ================================================================ one node */

typedef struct {
    double time_us; /* mean time per iteration on this node */
    double wrong;   /* wrong elements in the checked run */
    int tree;       /* the size went over the tree (ring/tree.c) */
} node_result;

/* The sizes measured so far, for the footer. */
typedef struct {
    double sum_bus;    /* sum of busbw over the sizes, GB/s */
    int sizes;         /* sizes measured */
    size_t last_bytes; /* the last (largest) size */
    double last_bus;   /* its busbw, GB/s */
    size_t tree_max;   /* the largest size that went over the tree, 0: none */
} sweep;

/* Form node `idx`'s ring into *r. 0, or -1 after printing why not. */
static int node_ring(ring **r, const cfg *c, int idx) {
    char err[HR_ERRLEN];
    ring_config rcfg;
    if (app_ring_config(c, idx, &rcfg, err, sizeof err) != HR_OK) {
        fprintf(stderr, "node %d: %s\n", idx, err);
        return -1;
    }
    hr_status st = ring_init(r, &rcfg, err, sizeof err);
    ring_config_wipe(&rcfg); /* the ring keeps its own copy of the PSK */
    if (st != HR_OK) {
        fprintf(stderr, "node %d: %s\n", idx, err);
        return -1;
    }
    return 0;
}

/* --json FILE, opened by rank 0; NULL without one or when it cannot be written (said). */
static FILE *open_json(const ar_opts *o) {
    if (!o->json) return NULL;
    FILE *js = fopen(o->json, "w");
    if (!js) fprintf(stderr, "hetring bench: cannot write %s: %s\n", o->json, strerror(errno));
    return js;
}

/* The nccl-tests header: the run, R or the link rate, the column names. */
static void print_header(const ar_opts *o, ring *r, double r_gbs) {
    int n = ring_size(r);
    char where[96];
    if (o->netns)
        snprintf(where, sizeof where, "in network namespaces (veth links), port %ld", o->port);
    else
        snprintf(where, sizeof where, "on loopback, ports %ld-%ld", o->port, o->port + n - 1);
    printf("# hetring bench allreduce: %d nodes %s, security %s, segment %ld B, tree_bytes %ld B, "
           "%d iterations (at least 200 below 1 MiB), %d warm-up\n",
           n, where, cfg_security_name(o->security), (long)ring_segment_bytes(r),
           ring_tree_bytes(r), o->iters, o->warmup);
    if (o->bf16)
        printf("# wire: bf16 (ring_allreduce_bf16: half the bytes, sums rounded to bf16); sizes "
               "and GB/s count the float32 buffer\n");
    if (ring_workers(r) < 0)
        printf("# ring: one thread per collective\n");
    else
        printf("# ring: threaded engine above 1 MiB, sender + %d worker(s) per node\n",
               ring_workers(r));
    bench_print_blas(stdout, "# ");
    if (o->netns) {
        char rs[32];
        netns_rate_str(o->link_bps, rs, sizeof rs);
        printf("# link rate = %.4g GB/s (%s%s%s%s); target busbw >= 0.9 of it\n", o->link_bps / 8e9,
               rs, o->link_rate ? ", --link-rate " : "", o->link_rate ? o->link_rate : "",
               netns_no_delay() ? "; tc netem is missing here, so tbf shapes the rate and the "
                                  "200 us delay is NOT emulated"
                                : ", netem delay 200 us");
    } else if (r_gbs > 0)
        printf("# R = %.2f GB/s (one iperf3 TCP stream on loopback); R/N = %.2f GB/s\n", r_gbs,
               r_gbs / n);
    else if (r_gbs == R_NO_IPERF)
        printf("# R unknown (iperf3 is not installed; install it or give --rate)\n");
    else if (r_gbs == R_NO_PORT)
        printf("# R unknown (no free port for the iperf3 server; give --rate)\n");
    else
        printf("# R unknown (iperf3 failed; give --rate)\n");
    printf("#\n# %10s %12s %8s %6s %11s %8s %8s %7s\n", "size", "count", "type", "redop", "time",
           "algbw", "busbw", "#wrong");
    printf("# %10s %12s %8s %6s %11s %8s %8s %7s\n", "(B)", "(elements)", "", "", "(us)", "(GB/s)",
           "(GB/s)", "");
    fflush(stdout);
}

/* One size on this node: one checked all-reduce, the warm-up, the timed iterations. Returns
 * the slowest node's mean time and the wrong elements of all nodes in *out; -1 on a ring
 * error. */
/* The all-reduce the bench times: float32, or with --wire bf16 bf16 on the wire (wire: count
 * values of scratch). */
static hr_status allreduce(ring *r, const ar_opts *o, float *buf, uint16_t *wire, size_t count) {
    return o->bf16 ? ring_allreduce_bf16(r, buf, wire, NULL, count) : ring_allreduce(r, buf, count);
}

static int measure_size(ring *r, const ar_opts *o, float *buf, uint16_t *wire, size_t count,
                        node_result *out) {
    int n = ring_size(r), k = ring_rank(r);
    size_t bytes = count * sizeof(float);
    double wrong = 0;
    /* the checked run: integer sums, exact in float32; with bf16 small enough that every
     * partial sum is exact in bf16 too (at most n (128 / n - 1) + n <= 256) */
    const int span = o->bf16 ? (n < 128 ? 128 / n : 1) : 251, lift = o->bf16 ? 2 : n;
    double base = 0;
    for (int q = 0; q < n; q++) base += q % lift;
    for (size_t i = 0; i < count; i++) buf[i] = (float)((int)(i % (size_t)span) + k % lift);
    if (allreduce(r, o, buf, wire, count) != HR_OK) return -1;
    for (size_t i = 0; i < count; i++)
        if (buf[i] != (float)(n * (int)(i % (size_t)span) + base)) wrong++;
    int iters = bytes < (1u << 20) && o->iters < 200 ? 200 : o->iters;
    for (int w = 0; w < o->warmup; w++)
        if (allreduce(r, o, buf, wire, count) != HR_OK) return -1;
    if (ring_barrier(r) != HR_OK) return -1;
    uint64_t tree0 = ring_tree_runs(r);
    double t0 = hr_now();
    for (int it = 0; it < iters; it++) {
        if (it % 16 == 0) memset(buf, 0, bytes); /* keep the values finite */
        if (allreduce(r, o, buf, wire, count) != HR_OK) return -1;
    }
    node_result me = {(hr_now() - t0) / iters * 1e6, wrong, ring_tree_runs(r) > tree0},
                all[CFG_MAX_NODES];
    if (ring_allgather(r, &me, all, sizeof me) != HR_OK) return -1;
    *out = (node_result){0, 0, me.tree};
    for (int q = 0; q < n; q++) {
        if (all[q].time_us > out->time_us) out->time_us = all[q].time_us;
        out->wrong += all[q].wrong;
    }
    return 0;
}

/* One row of the table (and of --json) for `res` at `bytes`; returns busbw. */
static double report_size(const ar_opts *o, int n, size_t bytes, node_result res, FILE *js) {
    double t = res.time_us;
    double algbw = (double)bytes / (t * 1e-6) / 1e9, busbw = algbw * 2.0 * (n - 1) / n;
    printf("  %10zu %12zu %8s %6s %11.1f %8.3f %8.3f %7.0f\n", bytes, bytes / sizeof(float),
           "float", "sum", t, algbw, busbw, res.wrong);
    fflush(stdout);
    if (js) {
        fprintf(js,
                "{\"bytes\": %zu, \"time_us\": %.3f, \"algbw\": %.6f, \"busbw\": %.6f, "
                "\"wrong\": %.0f, \"nodes\": %d, \"security\": \"%s\", \"algo\": \"%s\", "
                "\"wire\": \"%s\"",
                bytes, t, algbw, busbw, res.wrong, n, cfg_security_name(o->security),
                res.tree ? "tree" : "ring", o->bf16 ? "bf16" : "fp32");
        if (o->netns) fprintf(js, ", \"link_rate_bps\": %.0f", o->link_bps);
        fputs("}\n", js);
    }
    return busbw;
}

static void print_footer(const ar_opts *o, int n, double r_gbs, const sweep *s) {
    printf("# Out of bounds values : 0 OK\n# Avg bus bandwidth    : %.4f\n", s->sum_bus / s->sizes);
    if (s->tree_max)
        printf("# sizes up to %zu B went over the tree (2*depth hops), the rest round the ring\n",
               s->tree_max);
    if (o->netns) {
        char rs[32];
        netns_rate_str(o->link_bps, rs, sizeof rs);
        printf("# busbw at %zu B = %.3f GB/s = %.2f of the %s link\n", s->last_bytes, s->last_bus,
               s->last_bus / (o->link_bps / 8e9), rs);
    } else if (r_gbs > 0)
        printf("# busbw at %zu B = %.3f GB/s = %.2f of R/N\n", s->last_bytes, s->last_bus,
               s->last_bus / (r_gbs / n));
}

/* The size after `bytes`: times the step factor, or past max_bytes where that would wrap. */
static size_t next_size(const ar_opts *o, size_t bytes) {
    size_t f = (size_t)o->factor;
    return bytes > o->max_bytes / f ? o->max_bytes + 1 : bytes * f;
}

/* Node `idx` of the bench: joins the ring, runs every size, rank 0 prints. The exit status of
 * its process: 0, or 1 on a ring error or a wrong element. */
static int run_node(const ar_opts *o, cfg *c, int idx, double r_gbs) {
    if (o->netns && netns_enter(idx) != 0) return 1;
    hr_log_set_node((int)c->nodes[idx].id);
    ring *r;
    if (node_ring(&r, c, idx) != 0) return 1;
    int n = ring_size(r), k = ring_rank(r), rc = 0, ring_failed = 0;
    size_t maxc = o->max_bytes / sizeof(float);
    float *buf = malloc((maxc ? maxc : 1) * sizeof *buf);
    uint16_t *wire = o->bf16 ? malloc((maxc ? maxc : 1) * sizeof *wire) : NULL;
    FILE *js = k == 0 ? open_json(o) : NULL;
    if (k == 0) print_header(o, r, r_gbs);
    sweep s = {0};
    for (size_t bytes = o->min_bytes; bytes <= o->max_bytes && buf && (wire || !o->bf16);
         bytes = next_size(o, bytes)) {
        size_t count = bytes / sizeof(float);
        if (count == 0) count = 1;
        bytes = count * sizeof(float);
        node_result res;
        if (measure_size(r, o, buf, wire, count, &res) != 0) {
            ring_failed = 1;
            break;
        }
        if (res.wrong > 0) rc = 1;
        double busbw = k == 0 ? report_size(o, n, bytes, res, js) : 0;
        s = (sweep){s.sum_bus + busbw, s.sizes + 1, bytes, busbw, res.tree ? bytes : s.tree_max};
    }
    if (ring_failed) {
        fprintf(stderr, "node %d: %s\n", idx, ring_error(r));
        rc = 1;
    } else if (k == 0 && s.sizes) {
        print_footer(o, n, r_gbs, &s);
    }
    if (bench_close(js, o->json) != 0) rc = 1;
    free(buf);
    free(wire);
    ring_free(r);
    return rc;
}

/* ================================================================ the suite */

static int opt_security(const char *suite, const char *arg, void *dst) {
    for (int sec = CFG_SEC_NONE; sec <= CFG_SEC_ENCRYPT; sec++)
        if (strcmp(arg, cfg_security_name(sec)) == 0) return *(int *)dst = sec, 0;
    char cmd[64];
    snprintf(cmd, sizeof cmd, "bench %s", suite);
    cli_usage_error(cmd, "--security none|auth|encrypt");
    return -1;
}

/* nccl-tests' short options and the long ones they stand for; each takes a value. */
static const char *const nccl_alias[][2] = {
    {"-b", "--min-bytes"}, {"-e", "--max-bytes"}, {"-f", "--step-factor"}};
#define N_ALIASES ((int)(sizeof nccl_alias / sizeof nccl_alias[0]))

/* Copy argv (argc + 1 entries with the final NULL) into `out`, which holds 2 * argc + 1, with
 * nccl-tests' "-b A" and "-bA" spelled "--min-bytes A" (likewise -e, -f). The value of a long
 * option of `opts` that takes one is copied as is, and so is everything after "--". Returns
 * the new argc. */
static int expand_aliases(const bench_opt *opts, int argc, char **argv, char **out) {
    int n = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int alias = -1;
        for (int k = 0; k < N_ALIASES && i > 0; k++)
            if (strncmp(a, nccl_alias[k][0], 2) == 0) alias = k;
        if (alias < 0) {
            out[n++] = argv[i];
            if (strcmp(a, "--") == 0) {
                while (++i < argc) out[n++] = argv[i];
                break;
            }
            if (strncmp(a, "--", 2) == 0 && !strchr(a, '=') && i + 1 < argc)
                for (const bench_opt *p = opts; p->name; p++)
                    if (strcmp(a + 2, p->name) == 0 && p->kind != BENCH_OPT_FLAG) {
                        out[n++] = argv[++i];
                        break;
                    }
            continue;
        }
        out[n++] = (char *)nccl_alias[alias][1];
        if (a[2]) out[n++] = argv[i] + 2; /* "-b1K" */
    }
    out[n] = NULL;
    return n;
}

/* Returns -1 to go on, else the exit status (after --help or a usage error). */
static int parse_opts(ar_opts *o, int argc, char **argv) {
    *o = (ar_opts){.nodes = 2,
                   .security = CFG_SEC_NONE,
                   .min_bytes = 8,
                   .max_bytes = 64 << 20,
                   .factor = 2,
                   .iters = 20,
                   .warmup = 3,
                   .tree_bytes = SIZE_MAX};
    const bench_opt opts[] = {
        {.name = "nodes", .kind = BENCH_OPT_INT, .dst = &o->nodes, .lo = 1, .hi = 64},
        {.name = "security", .kind = BENCH_OPT_FN, .dst = &o->security, .fn = opt_security},
        {.name = "min-bytes", .kind = BENCH_OPT_SIZE, .dst = &o->min_bytes, .lo = 1, .hi = AR_MAX},
        {.name = "max-bytes", .kind = BENCH_OPT_SIZE, .dst = &o->max_bytes, .lo = 1, .hi = AR_MAX},
        {.name = "step-factor", .kind = BENCH_OPT_LONG, .dst = &o->factor, .lo = 2, .hi = 1024},
        {.name = "iters", .kind = BENCH_OPT_INT, .dst = &o->iters, .lo = 1, .hi = 1000000},
        {.name = "warmup", .kind = BENCH_OPT_INT, .dst = &o->warmup, .lo = 0, .hi = 1000000},
        {.name = "json", .kind = BENCH_OPT_OUT, .dst = &o->json},
        {.name = "netns", .kind = BENCH_OPT_FLAG, .dst = &o->netns},
        {.name = "wire", .kind = BENCH_OPT_STR, .dst = &o->wire},
        {.name = "link-rate", .kind = BENCH_OPT_STR, .dst = &o->link_rate},
        {.name = "rate", .kind = BENCH_OPT_REAL, .dst = &o->rate},
        {.name = "segment", .kind = BENCH_OPT_SIZE, .dst = &o->segment, .lo = 0, .hi = 1L << 30},
        {.name = "tree-bytes",
         .kind = BENCH_OPT_SIZE,
         .dst = &o->tree_bytes,
         .lo = 0,
         .hi = 1L << 20},
        {.name = "port", .kind = BENCH_OPT_LONG, .dst = &o->port, .lo = 1024, .hi = 65535},
        {0}};
    char **args = malloc((2 * (size_t)argc + 1) * sizeof *args);
    if (!args) return CLI_FAIL;
    int nargs = expand_aliases(opts, argc, argv, args);
    int rc = bench_parse_opts("allreduce", opts, usage, nargs, args);
    free(args); /* the values point into argv, which outlives the run */
    if (rc >= 0) return rc;
    if (o->max_bytes < o->min_bytes)
        return cli_usage_error("bench allreduce",
                               "--min-bytes %zu, --max-bytes %zu (expected min-bytes <= max-bytes)",
                               o->min_bytes, o->max_bytes);
    if (!(o->rate >= 0 && o->rate <= 1e4))
        return cli_usage_error("bench allreduce",
                               "--rate %g (expected 0..10000 GB/s; 0 measures it)", o->rate);
    /* each node holds the largest message (and its bf16 copy): nodes that the machine cannot
     * hold together are refused here, not killed by the kernel part way through the sweep (one
     * that its own ulimit -v cannot hold fails at its allocation) */
    const double need = (double)o->nodes * (double)o->max_bytes * (o->bf16 ? 1.5 : 1.0),
                 have = hr_memory_shared();
    if (have > 0 && need > have)
        return cli_usage_error("bench allreduce",
                               "--nodes %d with --max-bytes %zu need at least %.3g GB of memory, "
                               "more than the %.3g GB of this machine (expected fewer "
                               "nodes or a smaller --max-bytes)",
                               o->nodes, o->max_bytes, need / 1e9, have / 1e9);
    if (!o->netns && o->port + o->nodes - 1 > 65535)
        return cli_usage_error("bench allreduce",
                               "--port %ld with %d nodes (expected at most %d: node i listens on "
                               "port + i)",
                               o->port, o->nodes, 65536 - o->nodes);
    char why[256];
    o->link_bps = 1e9;
    if (o->wire && strcmp(o->wire, "fp32") != 0 && strcmp(o->wire, "bf16") != 0)
        return cli_usage_error("bench allreduce", "--wire '%s' (expected fp32 or bf16)", o->wire);
    o->bf16 = o->wire && strcmp(o->wire, "bf16") == 0;
    if (o->link_rate && !o->netns)
        return cli_usage_error("bench allreduce",
                               "--link-rate shapes the links of --netns, which was not given; "
                               "add --netns (loopback has no rate to set)");
    if (o->link_rate && netns_parse_rate(o->link_rate, &o->link_bps, why, sizeof why) != 0)
        return cli_usage_error("bench allreduce", "--link-rate: %s", why);
    if (o->port == 0 && o->netns) o->port = 47000; /* the namespaces are the bench's own */
    /* the nodes' ports and the iperf3 server's after them (measure_r) */
    if (o->port == 0 && (o->port = bench_free_ports(o->nodes + 1)) < 0)
        return fprintf(stderr,
                       "hetring bench allreduce: no %d free ports on 127.0.0.1 in 10000-30799; "
                       "give --port P\n",
                       o->nodes + 1),
               CLI_FAIL;
    return -1;
}

/* The cluster of the run: N nodes on loopback (or in the namespaces), a random PSK when
 * secured. 0, or -1 with `c` freed. */
static int cluster_config(cfg *c, const ar_opts *o) {
    cfg_init(c);
    snprintf(c->name, sizeof c->name, "bench-allreduce");
    c->security = o->security;
    c->connect_timeout = 30;
    c->timeout = 30;
    c->segment_bytes = (long)o->segment;
    if (o->tree_bytes != SIZE_MAX) c->tree_bytes = (long)o->tree_bytes;
    if (o->security != CFG_SEC_NONE) {
        if (sodium_init() < 0) return cfg_free(c), -1;
        randombytes_buf(c->psk, sizeof c->psk);
        c->has_psk = 1;
    }
    c->nodes = calloc((size_t)o->nodes, sizeof *c->nodes);
    if (!c->nodes) return cfg_free(c), -1;
    c->n_nodes = o->nodes;
    for (int i = 0; i < o->nodes; i++) {
        c->nodes[i].id = i;
        c->nodes[i].port = (int)(o->netns ? o->port : o->port + i);
        c->nodes[i].device = -1;
        if (o->netns)
            netns_addr(i, c->nodes[i].host, sizeof c->nodes[i].host);
        else
            snprintf(c->nodes[i].host, sizeof c->nodes[i].host, "127.0.0.1");
    }
    return 0;
}

/* Fork the nodes and wait for them; the first to fail ends the others. */
static int run_nodes(const ar_opts *o, cfg *c, double r_gbs) {
    fflush(stdout);
    pid_t pids[64];
    int rc = CLI_OK;
    for (int i = 0; i < o->nodes; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            netns_disown(); /* only the parent removes the namespaces */
            int nrc = run_node(o, c, i, r_gbs);
            fflush(stdout);
            _exit(nrc);
        }
        if (pids[i] < 0) {
            rc = CLI_FAIL;
            for (int j = 0; j < i; j++) kill(pids[j], SIGKILL);
            break;
        }
    }
    for (int i = 0; i < o->nodes && rc == CLI_OK; i++) {
        int st;
        if (waitpid(pids[i], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            rc = CLI_FAIL;
            for (int j = 0; j < o->nodes; j++) kill(pids[j], SIGKILL);
        }
    }
    while (wait(NULL) > 0) {
    }
    return rc;
}

int bench_allreduce(int argc, char **argv) {
    ar_opts o;
    int rc = parse_opts(&o, argc, argv);
    if (rc >= 0) return rc;
    double r_gbs = o.rate;
    if (!o.netns && r_gbs <= 0) r_gbs = measure_r(o.port + o.nodes);
    cfg c;
    if (cluster_config(&c, &o) != 0) return CLI_FAIL;
    if (o.netns) netns_cleanup_on_signals();
    if (o.netns && netns_setup(o.nodes, o.link_bps, 200e-6) != 0) {
        fprintf(stderr, "hetring bench: could not create the network namespaces (needs root and "
                        "ip/tc); removed what was made\n");
        netns_cleanup();
        cfg_free(&c);
        return CLI_FAIL;
    }
    rc = run_nodes(&o, &c, r_gbs);
    netns_cleanup();
    cfg_free(&c);
    return rc;
}
