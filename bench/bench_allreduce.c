/*
 * bench_allreduce.c: `hetring bench allreduce`, the ring all-reduce bandwidth in the format of
 * nccl-tests (size, count, type, redop, time, algbw, busbw, #wrong; busbw = algbw*2(N-1)/N).
 *
 * The bench forks N nodes on this machine, each forming the ring over 127.0.0.1 (or, with
 * --netns, over veth links in network namespaces it creates, shaped with tc to 1 Gbit/s and
 * 200 us of delay, and removes again when it ends, also on failure or SIGINT/SIGTERM). For each
 * size every node first runs one checked all-reduce (exact integer sums, counted in #wrong),
 * then warm-up and timed iterations; the time is the slowest node's mean per iteration.
 * R, the rate of one iperf3 TCP stream on loopback, is measured (or given with --rate) and
 * printed next to the table, because on one machine busbw <= R/N.
 */
#include "bench.h"
#include "bench_util.h"
#include "cfg.h"
#include "cli.h"
#include "hr_log.h"
#include "ring.h"
#include "ring_setup.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    int nodes;        /* N */
    int security;     /* CFG_SEC_* */
    size_t min_bytes; /* first size */
    size_t max_bytes; /* last size (sizes double) */
    int iters;        /* timed iterations per size (at least 200 below 1 MiB) */
    int warmup;       /* untimed iterations per size */
    const char *json; /* --json FILE or NULL */
    int netns;        /* run over shaped veth links in namespaces */
    double rate;      /* R in GB/s; 0 = measure with iperf3 */
    long segment;     /* segment_bytes, 0 = default */
    long port;        /* first port */
} ar_opts;

static void usage(FILE *out) {
    fprintf(out,
            "usage: hetring bench allreduce [--nodes N] [--security MODE] [--min-bytes A]\n"
            "                               [--max-bytes B] [--iters K] [--json FILE] [--netns]\n"
            "\n"
            "All-reduce bandwidth of N local nodes in the nccl-tests table format.\n"
            "\n"
            "  --nodes N         nodes (default 2)\n"
            "  --security MODE   none, auth or encrypt (default none; auth and encrypt use a\n"
            "                    random cluster pre-shared key)\n"
            "  --min-bytes A     smallest size (default 8)\n"
            "  --max-bytes B     largest size (default 64M); sizes double; K, M, G suffixes\n"
            "  --iters K         timed iterations per size (default 20; 200 below 1 MiB)\n"
            "  --warmup W        untimed iterations per size (default 3)\n"
            "  --json FILE       also write one JSON object per size\n"
            "  --netns           run over veth links in network namespaces, shaped with tc to\n"
            "                    1 Gbit/s and 200 us delay (needs root; removed afterwards)\n"
            "  --rate R          R in GB/s instead of measuring it with iperf3\n"
            "  --segment BYTES   pipeline segment size (default: the ring's)\n"
            "  --port P          first TCP port (default: random in 10000-32000)\n");
}

static size_t parse_size(const char *s) {
    char *end;
    double v = strtod(s, &end);
    if (*end == 'K' || *end == 'k') v *= 1024;
    if (*end == 'M' || *end == 'm') v *= 1024 * 1024;
    if (*end == 'G' || *end == 'g') v *= 1024.0 * 1024 * 1024;
    return v < 0 ? 0 : (size_t)v;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ================================================================ R, by iperf3 */

static double measure_r(long port) {
    char cmd[256];
    snprintf(cmd, sizeof cmd,
             "iperf3 -s -1 -p %ld -B 127.0.0.1 >/dev/null 2>&1 & sleep 0.5; "
             "iperf3 -c 127.0.0.1 -p %ld -t 3 -J 2>/dev/null; wait",
             port, port);
    FILE *p = popen(cmd, "r");
    if (!p) return 0;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, p);
    buf[n] = 0;
    pclose(p);
    char *s = strstr(buf, "\"sum_received\"");
    double bps = 0;
    if (!s || json_number(s, "bits_per_second", &bps) != 0) return 0;
    return bps / 8e9;
}

/* ================================================================ namespaces */

static char g_ns_prefix[32]; /* "hrbPID": namespaces to remove at exit; empty when none */
static int g_ns_n;
static int g_ns_owner = 1; /* this process made the namespaces and removes them */
static int g_no_delay;     /* sch_netem was missing: links are rate-limited (tbf) without delay */

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...) {
    char cmd[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int rc = system(cmd);
    if (rc != 0) HR_DEBUG(BENCH, "command failed (%d): %s", rc, cmd);
    return rc;
}

static void netns_cleanup(void) {
    if (!g_ns_prefix[0] || !g_ns_owner) return;
    for (int i = 0; i < g_ns_n; i++) sh("ip netns del %s-%d 2>/dev/null", g_ns_prefix, i);
    sh("ip netns del %s-br 2>/dev/null", g_ns_prefix);
    g_ns_prefix[0] = 0;
}

static void on_signal(int sig) {
    netns_cleanup();
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Nodes at 10.77.0.(i+1)/24 in namespaces PREFIX-i, joined by a bridge in PREFIX-br; each node's
 * egress is shaped to 1 Gbit/s with 200 us of delay. */
static int netns_setup(int n) {
    snprintf(g_ns_prefix, sizeof g_ns_prefix, "hrb%d", (int)getpid() % 100000);
    g_ns_n = n;
    atexit(netns_cleanup);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    const char *p = g_ns_prefix;
    if (sh("ip netns add %s-br && ip -n %s-br link add br0 type bridge && "
           "ip -n %s-br link set br0 up",
           p, p, p) != 0)
        return -1;
    for (int i = 0; i < n; i++) {
        char ns[48], v[48], q[48];
        snprintf(ns, sizeof ns, "%s-%d", p, i);
        snprintf(v, sizeof v, "%sv%d", p, i);
        snprintf(q, sizeof q, "%sp%d", p, i);
        if (sh("ip netns add %s", ns) || sh("ip link add %s type veth peer name %s", v, q) ||
            sh("ip link set %s netns %s", v, ns) || sh("ip link set %s netns %s-br", q, p) ||
            sh("ip -n %s addr add 10.77.0.%d/24 dev %s", ns, i + 1, v) ||
            sh("ip -n %s link set %s up", ns, v) || sh("ip -n %s link set lo up", ns) ||
            sh("ip -n %s-br link set %s master br0 up", p, q))
            return -1;
        if (sh("ip netns exec %s tc qdisc add dev %s root netem delay 200us rate 1gbit "
               "limit 100000 2>/dev/null",
               ns, v) == 0)
            continue;
        /* without sch_netem: the rate alone, with a token bucket */
        if (sh("ip netns exec %s tc qdisc add dev %s root tbf rate 1gbit burst 256kb latency 50ms",
               ns, v) != 0) {
            fprintf(stderr, "hetring bench: neither tc netem nor tbf is available here\n");
            return -1;
        }
        g_no_delay = 1;
    }
    return 0;
}

static int netns_enter(int i) {
    char path[96];
    snprintf(path, sizeof path, "/var/run/netns/%s-%d", g_ns_prefix, i);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
        perror(path);
        return -1;
    }
    close(fd);
    return 0;
}

/* ================================================================ one node */

typedef struct {
    double time_us; /* mean time per iteration on this node */
    double wrong;   /* wrong elements in the checked run */
} node_result;

static int run_node(const ar_opts *o, cfg *c, int idx, double r_gbs) {
    if (o->netns && netns_enter(idx) != 0) return 1;
    hr_log_set_node((int)c->nodes[idx].id);
    ring r;
    char err[HR_ERRLEN];
    ring_config rcfg;
    if (app_ring_config(c, idx, &rcfg, err, sizeof err) != HR_OK) {
        fprintf(stderr, "node %d: %s\n", idx, err);
        return 1;
    }
    hr_status st = ring_init(&r, &rcfg, err, sizeof err);
    ring_config_wipe(&rcfg); /* the ring keeps its own copy of the PSK */
    if (st != HR_OK) {
        fprintf(stderr, "node %d: %s\n", idx, err);
        ring_free(&r);
        return 1;
    }
    int n = ring_size(&r), k = ring_rank(&r), rc = 0;
    size_t maxc = o->max_bytes / sizeof(float);
    float *buf = malloc((maxc ? maxc : 1) * sizeof *buf);
    FILE *js = NULL;
    if (k == 0 && o->json) {
        js = fopen(o->json, "w");
        if (!js) fprintf(stderr, "hetring bench: cannot write %s: %s\n", o->json, strerror(errno));
    }
    if (k == 0) {
        printf("# hetring bench allreduce: %d nodes %s, security %s, segment %ld B, %d iterations "
               "(at least 200 below 1 MiB), %d warm-up\n",
               n, o->netns ? "in network namespaces (veth links)" : "on loopback",
               cfg_security_name(o->security), (long)ring_segment_bytes(&r), o->iters, o->warmup);
        if (o->netns)
            printf("# link rate = 0.125 GB/s (1 Gbit/s%s); target busbw >= 0.9 of it\n",
                   g_no_delay ? "; tc netem is missing here, so tbf shapes the rate and the "
                                "200 us delay is NOT emulated"
                              : ", netem delay 200 us");
        else if (r_gbs > 0)
            printf("# R = %.2f GB/s (one iperf3 TCP stream on loopback); R/N = %.2f GB/s\n", r_gbs,
                   r_gbs / n);
        else
            printf("# R unknown (iperf3 failed; give --rate)\n");
        printf("#\n# %10s %12s %8s %6s %11s %8s %8s %7s\n", "size", "count", "type", "redop",
               "time", "algbw", "busbw", "#wrong");
        printf("# %10s %12s %8s %6s %11s %8s %8s %7s\n", "(B)", "(elements)", "", "", "(us)",
               "(GB/s)", "(GB/s)", "");
        fflush(stdout);
    }
    double sum_bus = 0, last_bus = 0;
    int nsz = 0;
    size_t last_bytes = 0;
    for (size_t bytes = o->min_bytes; bytes <= o->max_bytes && buf; bytes *= 2) {
        size_t count = bytes / sizeof(float);
        if (count == 0) count = 1;
        bytes = count * sizeof(float);
        double wrong = 0;
        for (size_t i = 0; i < count; i++) buf[i] = (float)((i % 251) + (size_t)k);
        if (ring_allreduce(&r, buf, count) != HR_OK) goto ring_err;
        for (size_t i = 0; i < count; i++)
            if (buf[i] != (float)(n * (int)(i % 251) + n * (n - 1) / 2)) wrong++;
        int iters = bytes < (1u << 20) && o->iters < 200 ? 200 : o->iters;
        for (int w = 0; w < o->warmup; w++)
            if (ring_allreduce(&r, buf, count) != HR_OK) goto ring_err;
        if (ring_barrier(&r) != HR_OK) goto ring_err;
        double t0 = now_s();
        for (int it = 0; it < iters; it++) {
            if (it % 16 == 0) memset(buf, 0, bytes); /* keep the values finite */
            if (ring_allreduce(&r, buf, count) != HR_OK) goto ring_err;
        }
        node_result me = {(now_s() - t0) / iters * 1e6, wrong}, all[CFG_MAX_NODES];
        if (ring_allgather(&r, &me, all, sizeof me) != HR_OK) goto ring_err;
        double t = 0, wr = 0;
        for (int q = 0; q < n; q++) {
            if (all[q].time_us > t) t = all[q].time_us;
            wr += all[q].wrong;
        }
        double algbw = (double)bytes / (t * 1e-6) / 1e9, busbw = algbw * 2.0 * (n - 1) / n;
        if (wr > 0) rc = 1;
        if (k == 0) {
            printf("  %10zu %12zu %8s %6s %11.1f %8.3f %8.3f %7.0f\n", bytes, count, "float", "sum",
                   t, algbw, busbw, wr);
            fflush(stdout);
            if (js)
                fprintf(js,
                        "{\"bytes\": %zu, \"time_us\": %.3f, \"algbw\": %.6f, \"busbw\": %.6f, "
                        "\"wrong\": %.0f, \"nodes\": %d, \"security\": \"%s\"}\n",
                        bytes, t, algbw, busbw, wr, n, cfg_security_name(o->security));
        }
        sum_bus += busbw;
        nsz++;
        last_bus = busbw;
        last_bytes = bytes;
    }
    if (k == 0 && nsz) {
        printf("# Out of bounds values : 0 OK\n# Avg bus bandwidth    : %.4f\n", sum_bus / nsz);
        if (o->netns)
            printf("# busbw at %zu B = %.3f GB/s = %.2f of the 1 Gbit/s link\n", last_bytes,
                   last_bus, last_bus / 0.125);
        else if (r_gbs > 0)
            printf("# busbw at %zu B = %.3f GB/s = %.2f of R/N\n", last_bytes, last_bus,
                   last_bus / (r_gbs / n));
    }
    goto done;
ring_err:
    fprintf(stderr, "node %d: %s\n", idx, ring_error(&r));
    rc = 1;
done:
    if (js) fclose(js);
    free(buf);
    ring_free(&r);
    return rc;
}

/* ================================================================ the suite */

int bench_allreduce(int argc, char **argv) {
    static const struct option opts[] = {{"nodes", required_argument, 0, 'n'},
                                         {"security", required_argument, 0, 's'},
                                         {"min-bytes", required_argument, 0, 'a'},
                                         {"max-bytes", required_argument, 0, 'b'},
                                         {"iters", required_argument, 0, 'k'},
                                         {"warmup", required_argument, 0, 'w'},
                                         {"json", required_argument, 0, 'j'},
                                         {"netns", no_argument, 0, 'N'},
                                         {"rate", required_argument, 0, 'r'},
                                         {"segment", required_argument, 0, 'g'},
                                         {"port", required_argument, 0, 'p'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    ar_opts o = {.nodes = 2,
                 .security = CFG_SEC_NONE,
                 .min_bytes = 8,
                 .max_bytes = 64 << 20,
                 .iters = 20,
                 .warmup = 3};
    srand((unsigned)(getpid() ^ time(NULL)));
    o.port = 10000 + rand() % 22000; /* below the ephemeral range (32768+) */
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 'n':
            o.nodes = atoi(optarg);
            break;
        case 's':
            if (strcmp(optarg, "none") == 0)
                o.security = CFG_SEC_NONE;
            else if (strcmp(optarg, "auth") == 0)
                o.security = CFG_SEC_AUTH;
            else if (strcmp(optarg, "encrypt") == 0)
                o.security = CFG_SEC_ENCRYPT;
            else
                return cli_usage_error("bench allreduce", "--security none|auth|encrypt");
            break;
        case 'a':
            o.min_bytes = parse_size(optarg);
            break;
        case 'b':
            o.max_bytes = parse_size(optarg);
            break;
        case 'k':
            o.iters = atoi(optarg);
            break;
        case 'w':
            o.warmup = atoi(optarg);
            break;
        case 'j':
            o.json = optarg;
            break;
        case 'N':
            o.netns = 1;
            break;
        case 'r':
            o.rate = atof(optarg);
            break;
        case 'g':
            o.segment = (long)parse_size(optarg);
            break;
        case 'p':
            o.port = atol(optarg);
            break;
        case 'h':
            usage(stdout);
            return CLI_OK;
        default:
            usage(stderr);
            return CLI_USAGE;
        }
    }
    if (optind < argc)
        return cli_usage_error("bench allreduce", "unexpected argument '%s'", argv[optind]);
    if (o.nodes < 1 || o.nodes > 64 || o.iters < 1 || o.min_bytes < 1 || o.max_bytes < o.min_bytes)
        return cli_usage_error("bench allreduce",
                               "need 1 <= nodes <= 64, iters >= 1, 1 <= min-bytes <= max-bytes");
    double r_gbs = o.rate;
    if (!o.netns && r_gbs <= 0) r_gbs = measure_r(o.port + 100);

    cfg c;
    cfg_init(&c);
    snprintf(c.name, sizeof c.name, "bench-allreduce");
    c.security = o.security;
    c.connect_timeout = 30;
    c.timeout = 30;
    c.segment_bytes = o.segment;
    if (o.security != CFG_SEC_NONE) {
        if (sodium_init() < 0) return CLI_FAIL;
        randombytes_buf(c.psk, sizeof c.psk);
        c.has_psk = 1;
    }
    c.nodes = calloc((size_t)o.nodes, sizeof *c.nodes);
    if (!c.nodes) return CLI_FAIL;
    c.n_nodes = o.nodes;
    for (int i = 0; i < o.nodes; i++) {
        c.nodes[i].id = i;
        c.nodes[i].port = o.netns ? 47000 : o.port + i;
        c.nodes[i].device = -1;
        if (o.netns)
            snprintf(c.nodes[i].host, sizeof c.nodes[i].host, "10.77.0.%d", i + 1);
        else
            snprintf(c.nodes[i].host, sizeof c.nodes[i].host, "127.0.0.1");
    }
    if (o.netns && netns_setup(o.nodes) != 0) {
        fprintf(stderr, "hetring bench: could not create the network namespaces (needs root and "
                        "ip/tc); removed what was made\n");
        netns_cleanup();
        cfg_free(&c);
        return CLI_FAIL;
    }
    fflush(stdout);
    pid_t pids[64];
    int rc = CLI_OK;
    for (int i = 0; i < o.nodes; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            g_ns_owner = 0; /* only the parent removes the namespaces */
            int nrc = run_node(&o, &c, i, r_gbs);
            fflush(stdout);
            _exit(nrc);
        }
        if (pids[i] < 0) {
            rc = CLI_FAIL;
            for (int j = 0; j < i; j++) kill(pids[j], SIGKILL);
            break;
        }
    }
    for (int i = 0; i < o.nodes && rc == CLI_OK; i++) {
        int st;
        if (waitpid(pids[i], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            rc = CLI_FAIL;
            for (int j = 0; j < o.nodes; j++) kill(pids[j], SIGKILL);
        }
    }
    while (wait(NULL) > 0) {
    }
    netns_cleanup();
    cfg_free(&c);
    return rc;
}
