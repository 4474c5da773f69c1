/*
 * hr_log.h: levelled logging, filtered per subsystem by HETRING_LOG.
 *
 * HETRING_LOG is a comma-separated list of LEVEL or SUBSYS=LEVEL items, for example
 * "info", "debug" or "warn,ring=trace,ctrl=debug". Levels: error, warn, info, debug, trace.
 * Subsystems: conf, ring, sec, ctrl, train, data, cli, bench, cuda. Every line carries the
 * node id once hr_log_set_node() has been called. A bad HETRING_LOG is an error at start-up
 * (hetring exits 2; hetring_open returns HETRING_ECONFIG). The log settings are the project's only
 * global state; they are written once at start-up, before any thread exists.
 */
#ifndef HR_LOG_H
#define HR_LOG_H

#include <stdarg.h>

typedef enum { HR_LOG_ERROR, HR_LOG_WARN, HR_LOG_INFO, HR_LOG_DEBUG, HR_LOG_TRACE } hr_log_level;

typedef enum {
    HR_SUB_CONF,
    HR_SUB_RING,
    HR_SUB_SEC,
    HR_SUB_CTRL,
    HR_SUB_TRAIN,
    HR_SUB_DATA,
    HR_SUB_CLI,
    HR_SUB_BENCH,
    HR_SUB_CUDA,
    HR_SUB_COUNT
} hr_log_sub;

/* Parse a HETRING_LOG-style spec. Returns 0, or -1 with a message in err for a bad spec. */
int hr_log_configure(const char *spec, char *err, int errlen);
/* Read HETRING_LOG from the environment. Returns 0, or -1 with a message in err for a bad value
 * (the settings are then left as they were): a log setting the caller cannot honour is refused,
 * not warned about and dropped. */
int hr_log_init_from_env(char *err, int errlen);
void hr_log_set_node(int node_id);
int hr_log_enabled(hr_log_sub sub, hr_log_level lvl);

void hr_log(hr_log_sub sub, hr_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void hr_vlog(hr_log_sub sub, hr_log_level lvl, const char *fmt, va_list ap);

#define HR_ERROR(sub, ...) hr_log(HR_SUB_##sub, HR_LOG_ERROR, __VA_ARGS__)
#define HR_WARN(sub, ...)  hr_log(HR_SUB_##sub, HR_LOG_WARN, __VA_ARGS__)
#define HR_INFO(sub, ...)  hr_log(HR_SUB_##sub, HR_LOG_INFO, __VA_ARGS__)
#define HR_DEBUG(sub, ...)                                                                         \
    do {                                                                                           \
        if (hr_log_enabled(HR_SUB_##sub, HR_LOG_DEBUG))                                            \
            hr_log(HR_SUB_##sub, HR_LOG_DEBUG, __VA_ARGS__);                                       \
    } while (0)
#define HR_TRACE(sub, ...)                                                                         \
    do {                                                                                           \
        if (hr_log_enabled(HR_SUB_##sub, HR_LOG_TRACE))                                            \
            hr_log(HR_SUB_##sub, HR_LOG_TRACE, __VA_ARGS__);                                       \
    } while (0)

#endif
