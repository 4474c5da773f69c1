/*
 * hr_log.c: levelled logging to stderr, filtered per subsystem (see hr_log.h).
 *
 * A line is "HH:MM:SS.mmm [nID] LEVEL subsys: message" and is written with one write(2), so
 * lines from several threads or processes sharing a pipe do not interleave.
 */
#include "base/hr_log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static hr_log_level g_level[HR_SUB_COUNT] = {
    HR_LOG_INFO, HR_LOG_INFO, HR_LOG_INFO, HR_LOG_INFO, HR_LOG_INFO,
    HR_LOG_INFO, HR_LOG_INFO, HR_LOG_INFO, HR_LOG_INFO,
};
static _Atomic int g_node = -1; /* node id printed on every line; -1 before it is known
                                 * (atomic: nodes of one process may set it from their threads) */

static const char *const sub_names[HR_SUB_COUNT] = {"conf", "ring", "sec",   "ctrl", "train",
                                                    "data", "cli",  "bench", "cuda"};
static const char *const level_names[] = {"error", "warn", "info", "debug", "trace"};

static int parse_level(const char *s, size_t n, hr_log_level *out) {
    for (int i = 0; i <= HR_LOG_TRACE; i++)
        if (strlen(level_names[i]) == n && strncasecmp(s, level_names[i], n) == 0) {
            *out = (hr_log_level)i;
            return 0;
        }
    return -1;
}

int hr_log_configure(const char *spec, char *err, int errlen) {
    hr_log_level next[HR_SUB_COUNT];
    memcpy(next, g_level, sizeof next);
    const char *p = spec;
    while (p && *p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        hr_log_level lvl;
        if (!eq) {
            if (parse_level(p, len, &lvl)) goto bad;
            for (int i = 0; i < HR_SUB_COUNT; i++) next[i] = lvl;
        } else {
            size_t klen = (size_t)(eq - p);
            int sub = -1;
            for (int i = 0; i < HR_SUB_COUNT; i++)
                if (strlen(sub_names[i]) == klen && strncasecmp(p, sub_names[i], klen) == 0)
                    sub = i;
            if (sub < 0 || parse_level(eq + 1, len - klen - 1, &lvl)) goto bad;
            next[sub] = lvl;
        }
        p = end ? end + 1 : NULL;
        continue;
    bad:
        if (err)
            snprintf(err, (size_t)errlen,
                     "HETRING_LOG: bad item '%.*s' (expected LEVEL or SUBSYS=LEVEL; levels "
                     "error,warn,info,debug,trace; subsystems conf,ring,sec,ctrl,train,data,cli,"
                     "bench,cuda)",
                     (int)len, p);
        return -1;
    }
    memcpy(g_level, next, sizeof next);
    return 0;
}

int hr_log_init_from_env(char *err, int errlen) {
    const char *spec = getenv("HETRING_LOG");
    return spec ? hr_log_configure(spec, err, errlen) : 0;
}

void hr_log_set_node(int node_id) {
    g_node = node_id;
}

int hr_log_enabled(hr_log_sub sub, hr_log_level lvl) {
    return (unsigned)sub < HR_SUB_COUNT && lvl <= g_level[sub];
}

void hr_vlog(hr_log_sub sub, hr_log_level lvl, const char *fmt, va_list ap) {
    if (!hr_log_enabled(sub, lvl)) return;
    char line[2048];
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    localtime_r(&tv.tv_sec, &tm);
    int n;
    const int node = g_node;
    if (node >= 0)
        n = snprintf(line, sizeof line, "%02d:%02d:%02d.%03d [n%d] %-5s %s: ", tm.tm_hour,
                     tm.tm_min, tm.tm_sec, (int)(tv.tv_usec / 1000), node, level_names[lvl],
                     sub_names[sub]);
    else
        n = snprintf(line, sizeof line, "%02d:%02d:%02d.%03d %-5s %s: ", tm.tm_hour, tm.tm_min,
                     tm.tm_sec, (int)(tv.tv_usec / 1000), level_names[lvl], sub_names[sub]);
    if (n < 0) return;
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    if (m < 0) return;
    size_t len = (size_t)n + (size_t)m;
    if (len > sizeof line - 2) len = sizeof line - 2;
    line[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}

void hr_log(hr_log_sub sub, hr_log_level lvl, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    hr_vlog(sub, lvl, fmt, ap);
    va_end(ap);
}
