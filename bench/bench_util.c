/* bench_util.c: see bench_util.h. */
#include "bench/bench_util.h"
#include "base/hr_file.h"
#include "base/hr_time.h"
#include "cli/cli.h"
#include "trainer/blas_pick.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *find_key(const char *line, const char *key) {
    char pat[128];
    snprintf(pat, sizeof pat, "\"%s\"", key);
    const char *p = strstr(line, pat);
    if (!p) return NULL;
    p += strlen(pat);
    while (*p == ' ') p++;
    return *p == ':' ? p + 1 : NULL;
}

int json_number(const char *line, const char *key, double *out) {
    const char *p = find_key(line, key);
    if (!p) return -1;
    char *end;
    double v = strtod(p, &end);
    if (end == p) {
        while (*p == ' ') p++;
        if (strncmp(p, "true", 4) == 0)
            v = 1;
        else if (strncmp(p, "false", 5) == 0)
            v = 0;
        else
            return -1;
    }
    *out = v;
    return 0;
}

int json_array(const char *line, const char *key, double *out, int max) {
    const char *p = find_key(line, key);
    if (!p) return 0;
    while (*p == ' ') p++;
    if (*p++ != '[') return 0;
    int n = 0;
    while (n < max) {
        char *end;
        double v = strtod(p, &end);
        if (end == p) break;
        out[n++] = v;
        p = end;
        while (*p == ' ') p++;
        if (*p != ',') break;
        p++;
    }
    return n;
}

int list_has(const char *list, const char *item) {
    size_t n = strlen(item);
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, ",");
        if (len == n && strncmp(p, item, n) == 0) return 1;
        p += len + (p[len] == ',');
    }
    return 0;
}

const char *list_unknown(const char *list, const char *const *names, int n, size_t *len,
                         char *joined, size_t joined_len) {
    if (joined) joined[0] = 0;
    for (int i = 0; joined && i < n; i++) {
        size_t at = strlen(joined);
        snprintf(joined + at, joined_len - at, "%s%s", i ? ", " : "", names[i]);
    }
    for (const char *q = list; q && *q;) {
        size_t l = strcspn(q, ",");
        int known = 0;
        for (int i = 0; i < n && !known; i++)
            known = strlen(names[i]) == l && strncmp(q, names[i], l) == 0;
        if (!known) return *len = l, q;
        q += l + (q[l] == ',');
    }
    return NULL;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(double *v, int n) {
    if (n <= 0) return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ================================================================ options */

/* "bench SUITE: --NAME 'ARG' (expected WHAT)" on stderr; returns -1. */
static int bad_value(const char *suite, const char *name, const char *arg, const char *what) {
    char cmd[64];
    snprintf(cmd, sizeof cmd, "bench %s", suite);
    cli_usage_error(cmd, "--%s '%s' (expected %s)", name, arg, what);
    return -1;
}

int bench_long_opt(const char *suite, const char *name, const char *arg, long lo, long hi,
                   long *out) {
    char *end, what[64];
    errno = 0;
    long v = strtol(arg, &end, 10);
    snprintf(what, sizeof what, "%ld..%ld", lo, hi);
    if (end == arg || *end || errno || v < lo || v > hi) return bad_value(suite, name, arg, what);
    *out = v;
    return 0;
}

int bench_add_set(const char *suite, const char *arg, void *dst) {
    bench_sets *o = dst;
    if (o->n == BENCH_MAX_SETS) {
        char cmd[64];
        snprintf(cmd, sizeof cmd, "bench %s", suite);
        cli_usage_error(cmd, "too many --set options (at most %d)", BENCH_MAX_SETS);
        return -1;
    }
    o->v[o->n++] = arg;
    return 0;
}

/* A size in bytes: a number >= 0 and an optional K, M or G (powers of 1024), in [lo, hi]. */
static int size_opt(const char *suite, const bench_opt *o, const char *arg) {
    char *end, what[96];
    errno = 0;
    double v = strtod(arg, &end);
    const char *units = "kKmMgG", *u = *end ? strchr(units, *end) : NULL;
    if (u) v *= (double)(1L << (10 * (1 + (u - units) / 2))), end++;
    snprintf(what, sizeof what, "a size of %ld..%ld bytes, K, M or G for x1024", o->lo, o->hi);
    if (end == arg || *end || errno || !(v >= (double)o->lo && v <= (double)o->hi))
        return bad_value(suite, o->name, arg, what);
    *(size_t *)o->dst = (size_t)v;
    return 0;
}

/* Store the value of option `o`; 0, or -1 after a usage error was printed. */
static int store_opt(const char *suite, const bench_opt *o, const char *arg) {
    switch (o->kind) {
    case BENCH_OPT_FLAG:
        *(int *)o->dst = 1;
        return 0;
    case BENCH_OPT_OUT: {
        char why[128], what[256];
        if (hr_file_writable(arg, why, sizeof why) != 0) {
            snprintf(what, sizeof what,
                     "a file in an existing directory this process may write "
                     "to; this one: %s",
                     why);
            return bad_value(suite, o->name, arg, what);
        }
        *(const char **)o->dst = arg;
        return 0;
    }
    case BENCH_OPT_STR:
        *(const char **)o->dst = arg;
        return 0;
    case BENCH_OPT_LONG:
        return bench_long_opt(suite, o->name, arg, o->lo, o->hi, o->dst);
    case BENCH_OPT_INT: {
        long v;
        if (bench_long_opt(suite, o->name, arg, o->lo, o->hi, &v) != 0) return -1;
        *(int *)o->dst = (int)v;
        return 0;
    }
    case BENCH_OPT_REAL: {
        char *end;
        double v = strtod(arg, &end);
        if (end == arg || *end || !isfinite(v)) return bad_value(suite, o->name, arg, "a number");
        *(double *)o->dst = v;
        return 0;
    }
    case BENCH_OPT_SIZE:
        return size_opt(suite, o, arg);
    case BENCH_OPT_FN:
        return o->fn(suite, arg, o->dst);
    }
    return -1;
}

int bench_parse_opts(const char *suite, const bench_opt *opts, void (*usage)(FILE *), int argc,
                     char **argv) {
    enum { HELP = 'h', FIRST = 256 }; /* getopt_long returns FIRST + i for opts[i] */
    struct option longopts[BENCH_MAX_OPTS + 2];
    int n = 0;
    for (; opts[n].name; n++) {
        if (n == BENCH_MAX_OPTS) {
            fprintf(stderr, "hetring bench %s: more than %d options; raise BENCH_MAX_OPTS\n", suite,
                    BENCH_MAX_OPTS);
            return CLI_FAIL;
        }
        longopts[n] = (struct option){
            opts[n].name, opts[n].kind == BENCH_OPT_FLAG ? no_argument : required_argument, NULL,
            FIRST + n};
    }
    longopts[n] = (struct option){"help", no_argument, NULL, HELP};
    longopts[n + 1] = (struct option){0, 0, 0, 0};
    char cmd[64];
    snprintf(cmd, sizeof cmd, "bench %s", suite);
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (ch == HELP) return usage(stdout), CLI_OK;
        if (ch < FIRST || ch >= FIRST + n) return usage(stderr), CLI_USAGE;
        if (store_opt(suite, &opts[ch - FIRST], optarg) != 0) return CLI_USAGE;
    }
    if (optind < argc) return cli_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
    return -1;
}

int bench_sibling_exe(const char *name, char *buf, size_t len) {
    char self[4096];
    if (cli_self_exe(self, sizeof self) != 0) {
        snprintf(buf, len, "%s", name);
        return -1;
    }
    char *slash = strrchr(self, '/');
    if (slash) *slash = 0;
    snprintf(buf, len, "%s/%s", self, name);
    return access(buf, X_OK) == 0 ? 0 : -1;
}

int bench_prepare_runs(const char *suite, char *hetring, size_t len, const char *out_dir) {
    if (bench_sibling_exe("hetring", hetring, len) != 0)
        return fprintf(stderr, "hetring bench %s: %s not found; build the hetring target\n", suite,
                       hetring),
               CLI_USAGE;
    if (mkdir(out_dir, 0755) != 0 && errno != EEXIST)
        return fprintf(stderr, "bench %s: cannot create %s: %s\n", suite, out_dir, strerror(errno)),
               CLI_FAIL;
    return -1;
}

/* ================================================================ cluster files */

hr_status bench_cfg_set(cfg *c, char *err, size_t errlen, const char *fmt, ...) {
    char assignment[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(assignment, sizeof assignment, fmt, ap);
    va_end(ap);
    return cfg_set(c, assignment, err, errlen);
}

int bench_close(FILE *f, const char *path) {
    if (!f) return 0;
    int e = hr_file_close(f, errno);
    if (!e) return 0;
    fprintf(stderr, "hetring bench: %s: write failed (%s); it is incomplete\n", path, strerror(e));
    return -1;
}

FILE *bench_open_out(const char *path, char *tmp, size_t n) {
    FILE *f = hr_file_create(path, tmp, n);
    if (!f) fprintf(stderr, "hetring bench: cannot write %s: %s\n", path, strerror(errno));
    return f;
}

int bench_commit(FILE *f, const char *tmp, const char *path) {
    int e = hr_file_commit(f, errno, tmp, path);
    if (!e) return 0;
    fprintf(stderr, "hetring bench: %s: write failed (%s); not written\n", path, strerror(e));
    return -1;
}

int bench_write_cfg(const cfg *c, const char *path, const char *comment) {
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    FILE *f = fopen(path, "w");
    if (mem) cfg_print(c, mem), fclose(mem);
    if (!f || !text) {
        if (f) fclose(f);
        free(text);
        return -1;
    }
    fprintf(f, "; %s\n", comment);
    for (char *line = text, *end; *line; line = end + (*end == '\n')) {
        end = line + strcspn(line, "\n");
        int n = (int)(end - line);
        if (n < 3 || strncmp(end - 3, " = ", 3) != 0) fprintf(f, "%.*s\n", n, line);
    }
    free(text);
    return bench_close(f, path);
}

/* ================================================================ child processes */

/* The signal that asked the bench to stop (bench_stop_on_signals), or 0. */
static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig) {
    stop_signal = sig;
}

void bench_stop_on_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal; /* no SA_RESTART: waits wake up */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

int bench_stopped(void) {
    return (int)stop_signal;
}

int bench_stop_status(const char *suite, int done, int total, int failed) {
    int sig = (int)stop_signal;
    if (!sig) return -1;
    const char *name = sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : strsignal(sig);
    printf("bench %s: stopped by %s after %d of %d runs (%d failed); the table above holds "
           "the runs completed before it\n",
           suite, name, done, total, failed);
    fflush(stdout);
    fprintf(stderr, "hetring bench %s: stopped by %s\n", suite, name);
    return 128 + sig;
}

/* In the child: output to out_fd and err_fd (-1 keeps the bench's), a process group of its own
 * when asked, SIGTERM when the bench dies, the default SIGINT and SIGTERM actions back. */
static void child_exec(char *const argv[], int out_fd, int err_fd, int own_group) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    if (own_group) setpgid(0, 0);
    if ((out_fd >= 0 && dup2(out_fd, 1) < 0) || (err_fd >= 0 && dup2(err_fd, 2) < 0)) _exit(127);
    execvp(argv[0], argv);
    fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

/* waitpid that gives up at `until` (monotonic seconds), or at once when the bench is asked to
 * stop and `stoppable`; 1 when the child was reaped */
static int wait_until(pid_t pid, int *status, double until, int stoppable) {
    const struct timespec tick = {0, 20 * 1000 * 1000};
    for (;;) {
        pid_t r = waitpid(pid, status, WNOHANG);
        if (r == pid) return 1;
        if (r < 0 && errno != EINTR) {
            *status = W_EXITCODE(127, 0); /* lost: count it as a child that could not run */
            return 1;
        }
        if (hr_now() >= until || (stoppable && stop_signal)) return 0;
        nanosleep(&tick, NULL);
    }
}

/* SIGTERM to the child (its group when `group`), SIGKILL `grace_s` later, and reap it. */
/* Signal the child's group when it has one, else (or when the group is not there) the child. */
static void signal_child(pid_t pid, int group, int sig) {
    if (!group || kill(-pid, sig) != 0) kill(pid, sig);
}

static void stop_child(pid_t pid, int group, double grace_s) {
    int status;
    signal_child(pid, group, SIGTERM);
    if (!wait_until(pid, &status, hr_now() + grace_s, 0)) {
        signal_child(pid, group, SIGKILL);
        waitpid(pid, &status, 0);
    }
    if (!group) return;
    /* what is left of its group once the leader is gone (helpers that ignore SIGTERM, such as
     * multiprocessing's resource tracker): SIGKILL, then up to 2 s for them to be gone */
    const struct timespec tick = {0, 10 * 1000 * 1000};
    double until = hr_now() + 2;
    while (kill(-pid, SIGKILL) == 0 && hr_now() < until) nanosleep(&tick, NULL);
}

/* Fork argv with its output on out_fd and err_fd and wait as bench_spawn says. */
static int run_child(char *const argv[], int out_fd, int err_fd, int own_group, double deadline_s) {
    if (stop_signal) return BENCH_STOPPED;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) child_exec(argv, out_fd, err_fd, own_group);
    if (own_group) setpgid(pid, pid); /* either side may run first */
    int status = 0;
    if (wait_until(pid, &status, hr_now() + deadline_s, 1)) {
        if (WIFEXITED(status)) return WEXITSTATUS(status);
        return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
    }
    /* stopped: time for hetring local to stop its nodes (its own grace is 5 s) */
    stop_child(pid, own_group, stop_signal ? 10 : 5);
    return stop_signal ? BENCH_STOPPED : 124;
}

int bench_spawn(char *const argv[], const char *log, int append, double deadline_s) {
    int fd = -1;
    if (log &&
        (fd = open(log, O_WRONLY | O_CREAT | O_CLOEXEC | (append ? O_APPEND : O_TRUNC), 0644)) < 0)
        return -1;
    int rc = run_child(argv, fd, fd, 0, deadline_s);
    if (fd >= 0) close(fd);
    return rc;
}

int bench_spawn_quiet(char *const argv[], double deadline_s) {
    int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = run_child(argv, fd, -1, 0, deadline_s);
    close(fd);
    return rc;
}

/* An unlinked temporary file; -1 when none could be made. */
static int temp_fd(void) {
    const char *dir = getenv("TMPDIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/hetring-bench-XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkostemp(path, O_CLOEXEC);
    if (fd >= 0) unlink(path);
    return fd;
}

/* The first len - 1 bytes of file `fd` from its start (the whole of it when `last_line` is 0,
 * else its last non-empty line), NUL-terminated. */
static void read_back(int fd, char *buf, size_t len, int last_line) {
    if (!buf || !len) return;
    buf[0] = 0;
    static char all[1 << 16];
    ssize_t n = pread(fd, all, sizeof all - 1, 0);
    all[n > 0 ? n : 0] = 0;
    char *start = all;
    if (last_line) {
        size_t end = strlen(all);
        while (end && (all[end - 1] == '\n' || all[end - 1] == '\r')) all[--end] = 0;
        char *nl = strrchr(all, '\n');
        start = nl ? nl + 1 : all;
    }
    snprintf(buf, len, "%s", start);
}

int bench_capture(char *const argv[], double deadline_s, char *out, size_t outlen, char *err,
                  size_t errlen) {
    int ofd = temp_fd(), efd = temp_fd();
    int rc = ofd < 0 || efd < 0 ? -1 : run_child(argv, ofd, efd, 1, deadline_s);
    if (ofd >= 0) read_back(ofd, out, outlen, 0), close(ofd);
    if (efd >= 0) read_back(efd, err, errlen, 1), close(efd);
    return rc;
}

/* ================================================================ headers */

int bench_port_free(int port) {
    if (port < 1 || port > 65535) return 0;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return 0;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

int bench_free_ports(int n) {
    static int seeded;
    if (!seeded) srand((unsigned)time(NULL) ^ (unsigned)getpid() * 2654435761u), seeded = 1;
    for (int tries = 0; tries < 200; tries++) {
        int base = 10000 + (rand() % 2600) * 8, k = 0;
        while (k < n && bench_port_free(base + k)) k++;
        if (k == n) return base;
    }
    return -1;
}

void bench_print_blas(FILE *out, const char *prefix) {
    char line[512];
    blas_pick_describe(line, sizeof line);
    fprintf(out, "%s%s\n", prefix, line);
}

/* Does interpreter `path` import torch? 0 and py filled, or -1 with its answer in `said`. */
static int probe_python(const char *path, bench_python *py, char *said, size_t len) {
    char *argv[] = {(char *)path, "-c",
                    "import sys, torch; print(torch.__version__, sys.version.split()[0])", NULL};
    char out[256] = "", err[512] = "";
    int rc = bench_capture(argv, 120, out, sizeof out, err, sizeof err);
    if (rc == BENCH_STOPPED) return BENCH_STOPPED;
    char torch[64] = "", python[32] = "";
    if (rc == 0 && sscanf(out, "%63s %31s", torch, python) == 2) {
        snprintf(py->path, sizeof py->path, "%s", path);
        snprintf(py->torch, sizeof py->torch, "%s", torch);
        snprintf(py->python, sizeof py->python, "%s", python);
        return 0;
    }
    if (rc == 124)
        snprintf(said, len, "%s: import torch took over 120 s", path);
    else if (err[0])
        snprintf(said, len, "%s: %s", path, err);
    else
        snprintf(said, len, "%s: exited %d", path, rc);
    return -1;
}

int bench_in_path(const char *name, char *buf, size_t len) {
    const char *path = getenv("PATH");
    buf[0] = 0;
    for (const char *p = path ? path : ""; *p;) {
        size_t n = strcspn(p, ":");
        snprintf(buf, len, "%.*s/%s", (int)n, n ? p : ".", name);
        if (access(buf, X_OK) == 0) return 0;
        p += n + (p[n] == ':');
    }
    buf[0] = 0;
    return -1;
}

int bench_find_python(const char *given, bench_python *py) {
    memset(py, 0, sizeof *py);
    if (given) {
        snprintf(py->how, sizeof py->how, "--python");
        if (access(given, X_OK) != 0) {
            snprintf(py->why, sizeof py->why, "--python %s: %s", given,
                     errno == ENOENT ? "no such file" : "not executable");
            return -2;
        }
        return probe_python(given, py, py->why, sizeof py->why);
    }
    char on_path[1024];
    bench_in_path("python3", on_path, sizeof on_path);
    const char *cands[] = {on_path, "/usr/bin/python3"};
    const char *hows[] = {"python3 on PATH", "after python3 on PATH"};
    size_t used = 0;
    for (int i = 0; i < 2; i++) {
        if (!cands[i][0] || (i == 1 && on_path[0] && strcmp(on_path, cands[i]) == 0)) continue;
        char said[600];
        if (access(cands[i], X_OK) != 0) continue;
        int rc = probe_python(cands[i], py, said, sizeof said);
        if (rc != -1) {
            snprintf(py->how, sizeof py->how, "%s", hows[i]);
            return rc;
        }
        used +=
            (size_t)snprintf(py->why + used, sizeof py->why - used, "%s%s", used ? "; " : "", said);
        if (used >= sizeof py->why) used = sizeof py->why - 1;
    }
    if (!used) snprintf(py->why, sizeof py->why, "no python3 on PATH nor /usr/bin/python3");
    return -1;
}

void bench_python_describe(const bench_python *py, char *buf, size_t len) {
    if (py->path[0] && py->why[0]) /* the fallback, after python3 on PATH */
        snprintf(buf, len, "torch %s, Python %s, %s (python3 on PATH has none: %s)", py->torch,
                 py->python, py->path, py->why);
    else if (py->path[0])
        snprintf(buf, len, "torch %s, Python %s, %s (%s)", py->torch, py->python, py->path,
                 py->how);
    else
        snprintf(buf, len, "not available (%s)", py->why);
}
