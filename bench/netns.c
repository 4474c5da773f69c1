/*
 * netns.c: the benches' shaped links in network namespaces (netns.h).
 */
#include "bench/netns.h"

#include "base/hr_log.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mount.h>
#include <unistd.h>

/* ================================================================ rates and delays */

/* tc's rate units (iproute2 tc_util.c), matched without regard to case as tc does. */
static const struct {
    const char *unit;
    double bits; /* bits per second of one unit */
} rate_units[] = {
    {"bit", 1},
    {"kbit", 1e3},
    {"kibit", 1024.0},
    {"mbit", 1e6},
    {"mibit", 1048576.0},
    {"gbit", 1e9},
    {"gibit", 1073741824.0},
    {"tbit", 1e12},
    {"tibit", 1099511627776.0},
    {"bps", 8},
    {"kbps", 8e3},
    {"kibps", 8 * 1024.0},
    {"mbps", 8e6},
    {"mibps", 8 * 1048576.0},
    {"gbps", 8e9},
    {"gibps", 8 * 1073741824.0},
    {"tbps", 8e12},
    {"tibps", 8 * 1099511627776.0},
};

/* A positive finite number at the start of text (no sign), its end in *end; -1 when none. */
static int leading_number(const char *text, double *v, char **end) {
    errno = 0;
    *v = strtod(text, end);
    if (*end == text || errno || !isfinite(*v) || *v < 0 || text[0] == '+' || text[0] == '-')
        return -1;
    return 0;
}

int netns_parse_rate(const char *text, double *bps, char *why, size_t whylen) {
    char *end;
    double v;
    if (leading_number(text, &v, &end) != 0 || v <= 0)
        return snprintf(why, whylen, "'%s' does not start with a positive number", text), -1;
    if (!*end)
        return snprintf(why, whylen, "'%s' has no unit (write e.g. %sgbit or %smbit)", text, text,
                        text),
               -1;
    for (size_t i = 0; i < sizeof rate_units / sizeof *rate_units; i++)
        if (strcasecmp(end, rate_units[i].unit) == 0) {
            double r = v * rate_units[i].bits;
            if (r < NETNS_RATE_MIN || r > NETNS_RATE_MAX)
                return snprintf(why, whylen, "'%s' is %.4g bit/s, outside 1mbit to 1tbit", text, r),
                       -1;
            *bps = r;
            return 0;
        }
    return snprintf(why, whylen,
                    "'%s' has an unknown unit '%s' (expected bit, kbit, mbit, gbit, tbit, "
                    "kibit, mibit, gibit, tibit, or bps, kbps, mbps, gbps, tbps in bytes per "
                    "second)",
                    text, end),
           -1;
}

int netns_parse_delay(const char *text, double *seconds, char *why, size_t whylen) {
    static const struct {
        const char *unit;
        double s;
    } units[] = {{"s", 1}, {"ms", 1e-3}, {"us", 1e-6}};
    char *end;
    double v;
    if (leading_number(text, &v, &end) != 0)
        return snprintf(why, whylen, "'%s' does not start with a number of 0 or more", text), -1;
    if (!*end && v == 0) return *seconds = 0, 0;
    for (size_t i = 0; i < sizeof units / sizeof *units; i++)
        if (strcasecmp(end, units[i].unit) == 0) {
            if (v * units[i].s > NETNS_DELAY_MAX)
                return snprintf(why, whylen, "'%s' is over 1 s", text), -1;
            *seconds = v * units[i].s;
            return 0;
        }
    return snprintf(why, whylen, "'%s' needs a unit: s, ms or us (e.g. 200us; 0 for none)", text),
           -1;
}

void netns_rate_str(double bps, char *out, size_t n) {
    if (bps >= 1e9)
        snprintf(out, n, "%.4g Gbit/s", bps / 1e9);
    else
        snprintf(out, n, "%.4g Mbit/s", bps / 1e6);
}

/* ================================================================ namespaces */

#define NETNS_MAX 64 /* node namespaces at most: bench allreduce's --nodes bound */

static char g_prefix[32]; /* "hrbPID": namespaces to remove at exit; empty when none */
static int g_n;           /* node namespaces, PREFIX-0..g_n-1 */
/* /var/run/netns/NAME of each namespace, the nodes' then the bridge's (PREFIX-br): what
 * netns_cleanup removes, written before g_prefix is set, so that the cleanup formats nothing
 * in a signal handler (snprintf is not async-signal-safe) */
static char g_path[NETNS_MAX + 1][64];
static int g_owner = 1; /* this process made the namespaces and removes them */
static int g_no_delay;  /* sch_netem was missing: links are rate-limited (tbf) without delay */

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

/* What `ip netns del NAME` does for every namespace, without starting it: a command started
 * here, from a signal handler, could be killed by the same signal sent again to the process
 * group (`timeout` signals the bench, then its group), leaving the namespace behind. System
 * calls on the paths written beforehand only: this runs in a signal handler too. The veth links
 * go with their namespaces. */
void netns_cleanup(void) {
    if (!g_prefix[0] || !g_owner) return;
    for (int i = 0; i <= g_n; i++) {
        umount2(g_path[i], MNT_DETACH);
        unlink(g_path[i]);
    }
    g_prefix[0] = 0;
}

void netns_disown(void) {
    g_owner = 0;
}

static void on_signal(int sig) {
    netns_cleanup();
    signal(sig, SIG_DFL);
    raise(sig);
}

const char *netns_prefix(void) {
    return g_prefix;
}

void netns_addr(int i, char *out, size_t n) {
    snprintf(out, n, "10.77.0.%d", i + 1);
}

int netns_no_delay(void) {
    return g_no_delay;
}

/* Namespace i's egress: netem with the rate and the delay, else tbf with the rate alone. The
 * token bucket of the fallback holds 2.1 ms of traffic, 256 KiB at 1 Gbit/s, and at least 16
 * KiB (several packets). */
static int shape(const char *ns, const char *dev, double bps, double delay) {
    if (sh("ip netns exec %s tc qdisc add dev %s root netem delay %.0fus rate %.0fbit "
           "limit 100000 2>/dev/null",
           ns, dev, delay * 1e6, bps) == 0)
        return 0;
    long burst = (long)(262144.0 * bps / 1e9);
    if (burst < 16384) burst = 16384;
    if (sh("ip netns exec %s tc qdisc add dev %s root tbf rate %.0fbit burst %ld latency 50ms", ns,
           dev, bps, burst) != 0) {
        fprintf(stderr, "hetring bench: neither tc netem nor tbf is available here\n");
        return -1;
    }
    g_no_delay = delay > 0;
    return 0;
}

void netns_cleanup_on_signals(void) {
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
}

int netns_setup(int n, double bps, double delay) {
    if (n < 1 || n > NETNS_MAX) {
        fprintf(stderr, "hetring bench: %d network namespaces (expected 1 to %d)\n", n, NETNS_MAX);
        return -1;
    }
    char p[sizeof g_prefix];
    snprintf(p, sizeof p, "hrb%d", (int)getpid() % 100000);
    for (int i = 0; i < n; i++) snprintf(g_path[i], sizeof g_path[i], "/var/run/netns/%s-%d", p, i);
    snprintf(g_path[n], sizeof g_path[n], "/var/run/netns/%s-br", p);
    g_n = n;
    memcpy(g_prefix, p, sizeof g_prefix); /* from here on a signal removes them */
    atexit(netns_cleanup);
    if (sh("ip netns add %s-br && ip -n %s-br link add br0 type bridge && "
           "ip -n %s-br link set br0 up",
           p, p, p) != 0)
        return -1;
    for (int i = 0; i < n; i++) {
        char ns[48], v[48], q[48], addr[32];
        snprintf(ns, sizeof ns, "%s-%d", p, i);
        snprintf(v, sizeof v, "%sv%d", p, i);
        snprintf(q, sizeof q, "%sp%d", p, i);
        netns_addr(i, addr, sizeof addr);
        if (sh("ip netns add %s", ns) || sh("ip link add %s type veth peer name %s", v, q) ||
            sh("ip link set %s netns %s", v, ns) || sh("ip link set %s netns %s-br", q, p) ||
            sh("ip -n %s addr add %s/24 dev %s", ns, addr, v) ||
            sh("ip -n %s link set %s up", ns, v) || sh("ip -n %s link set lo up", ns) ||
            sh("ip -n %s-br link set %s master br0 up", p, q) || shape(ns, v, bps, delay))
            return -1;
    }
    return 0;
}

int netns_enter(int i) {
    const char *path = i >= 0 && i < g_n ? g_path[i] : "/var/run/netns/(none)";
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
        perror(path);
        if (fd >= 0) close(fd);
        return -1;
    }
    close(fd);
    return 0;
}
