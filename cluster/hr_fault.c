/* hr_fault.c: HETRING_FAULT parsing and the process-level faults (see hr_fault.h). */
#include "cluster/hr_fault.h"
#include "base/hr_log.h"
#ifdef HR_TEST_HOOKS
#include "cluster/nccl_fake.h" /* defined in the hooks variant only */
#endif

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int hr_fault_hooks_built(void) {
#ifdef HR_TEST_HOOKS
    return 1;
#else
    return 0;
#endif
}

const device_ops *hr_fault_emu_device(void) {
#ifdef HR_TEST_HOOKS
    return &device_emu_ops;
#else
    return NULL;
#endif
}

const nccl_path_ops *hr_fault_fake_nccl(void) {
#ifdef HR_TEST_HOOKS
    return &nccl_fake_ops;
#else
    return NULL;
#endif
}

int hr_fault_get(const char *kind, long node_id, double def, double *arg) {
#ifdef HR_TEST_HOOKS
    const char *spec = getenv("HETRING_FAULT");
    if (!spec) return 0;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", spec);
    char *save = NULL;
    for (char *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *k = item, *node = strchr(item, ':');
        if (!node) continue;
        *node++ = 0;
        char *a = strchr(node, ':');
        if (a) *a++ = 0;
        if (strcmp(k, kind) != 0) continue;
        if (strcmp(node, "*") != 0 && strtol(node, NULL, 10) != node_id) continue;
        *arg = a ? strtod(a, NULL) : def;
        return 1;
    }
#else
    (void)kind, (void)node_id, (void)def, (void)arg;
#endif
    return 0;
}

void hr_fault_point(long node_id, long iter) {
    double arg;
    if (iter < 0 && hr_fault_get("hang", node_id, 3600, &arg)) {
        HR_WARN(CLI, "test fault: hanging for %.1f s", arg);
        struct timespec ts = {(time_t)arg, (long)((arg - (double)(time_t)arg) * 1e9)};
        while (nanosleep(&ts, &ts) != 0) {
        }
    }
    if (iter >= 0 && hr_fault_get("sleep", node_id, 0, &arg) && arg > 0) {
        struct timespec ts = {(time_t)arg, (long)((arg - (double)(time_t)arg) * 1e9)};
        while (nanosleep(&ts, &ts) != 0) {
        }
    }
    if (iter >= 0 && hr_fault_get("crash_compute", node_id, -1, &arg) && (long)arg == iter)
        hr_fault_kill_after("the compute", 0.001);
    if (hr_fault_get("crash", node_id, -1, &arg) && (long)arg == iter) {
        HR_WARN(CLI, "test fault: crashing%s", iter < 0 ? " once ready" : "");
        raise(SIGKILL);
    }
}

void hr_fault_pace(long node_id, int members, int configured) {
    double arg;
    if (members < configured && hr_fault_get("sleep_short", node_id, 0, &arg) && arg > 0) {
        struct timespec ts = {(time_t)arg, (long)((arg - (double)(time_t)arg) * 1e9)};
        while (nanosleep(&ts, &ts) != 0) {
        }
    }
}

void hr_fault_kill_now(const char *what) {
    HR_WARN(CLI, "test fault: crashing inside %s", what);
    raise(SIGKILL);
}

static void *kill_later(void *arg) {
    double s = *(double *)arg;
    free(arg);
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {
    }
    raise(SIGKILL);
    return NULL;
}

void hr_fault_kill_after(const char *what, double seconds) {
    HR_WARN(CLI, "test fault: crashing %.3f s into %s", seconds, what);
    double *arg = malloc(sizeof *arg);
    pthread_t th;
    if (!arg) raise(SIGKILL);
    *arg = seconds;
    if (pthread_create(&th, NULL, kill_later, arg) != 0) raise(SIGKILL);
    pthread_detach(th);
}
