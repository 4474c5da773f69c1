/* bench_util.c: see bench_util.h. */
#include "bench_util.h"
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
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

int bench_long_opt(const char *suite, const char *name, const char *arg, long lo, long hi,
                   long *out) {
    char *end;
    errno = 0;
    long v = strtol(arg, &end, 10);
    if (end == arg || *end || errno || v < lo || v > hi) {
        char cmd[64];
        snprintf(cmd, sizeof cmd, "bench %s", suite);
        cli_usage_error(cmd, "--%s '%s' (expected %ld..%ld)", name, arg, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

static size_t parse_size(const char *s) {
    char *end;
    double v = strtod(s, &end);
    if (*end == 'K' || *end == 'k') v *= 1024;
    if (*end == 'M' || *end == 'm') v *= 1024 * 1024;
    if (*end == 'G' || *end == 'g') v *= 1024.0 * 1024 * 1024;
    return v < 0 ? 0 : (size_t)v;
}

/* Store the value of option `o`; 0, or -1 after a usage error was printed. */
static int store_opt(const char *suite, const bench_opt *o, const char *arg) {
    switch (o->kind) {
    case BENCH_OPT_FLAG:
        *(int *)o->dst = 1;
        return 0;
    case BENCH_OPT_STR:
        *(const char **)o->dst = arg;
        return 0;
    case BENCH_OPT_LONG:
        return bench_long_opt(suite, o->name, arg, o->lo, o->hi, o->dst);
    case BENCH_OPT_LAX_INT:
        *(int *)o->dst = atoi(arg);
        return 0;
    case BENCH_OPT_LAX_LONG:
        *(long *)o->dst = atol(arg);
        return 0;
    case BENCH_OPT_LAX_REAL:
        *(double *)o->dst = atof(arg);
        return 0;
    case BENCH_OPT_SIZE:
        *(size_t *)o->dst = parse_size(arg);
        return 0;
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

/* ================================================================ cluster files */

hr_status bench_cfg_set(cfg *c, char *err, size_t errlen, const char *fmt, ...) {
    char assignment[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(assignment, sizeof assignment, fmt, ap);
    va_end(ap);
    return cfg_set(c, assignment, err, errlen);
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
    return fclose(f) == 0 ? 0 : -1;
}

/* ================================================================ child processes */

double bench_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void child_exec(char *const argv[], const char *log, int append) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (log) {
        int fd = open(log, O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC), 0644);
        if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0) _exit(127);
        close(fd);
    }
    execvp(argv[0], argv);
    fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

/* waitpid that gives up at `until` (monotonic seconds); 1 when the child was reaped */
static int wait_until(pid_t pid, int *status, double until) {
    const struct timespec tick = {0, 20 * 1000 * 1000};
    for (;;) {
        pid_t r = waitpid(pid, status, WNOHANG);
        if (r == pid) return 1;
        if (r < 0 && errno != EINTR) {
            *status = W_EXITCODE(127, 0); /* lost: count it as a child that could not run */
            return 1;
        }
        if (bench_now_s() >= until) return 0;
        nanosleep(&tick, NULL);
    }
}

int bench_spawn(char *const argv[], const char *log, int append, double deadline_s) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) child_exec(argv, log, append);
    int status = 0;
    if (wait_until(pid, &status, bench_now_s() + deadline_s)) {
        if (WIFEXITED(status)) return WEXITSTATUS(status);
        return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
    }
    kill(pid, SIGTERM);
    if (!wait_until(pid, &status, bench_now_s() + 5)) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    return 124;
}
