/*
 * hr_cores.c: the cores and the memory this process may use (see hr_cores.h).
 */
#include "base/hr_cores.h"

#include <dirent.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <sys/resource.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One number from file `path`, or 0 when it cannot be read. */
static long read_long(const char *path) {
    FILE *f = fopen(path, "r");
    long v = 0;
    if (f && fscanf(f, "%ld", &v) != 1) v = 0;
    if (f) fclose(f);
    return v;
}

/* The cgroup's CPU quota in whole cores, rounded up, or 0 when there is none or no cgroup file
 * to read (a container sees its own cgroup at the root): v2's cpu.max ("max" or QUOTA PERIOD),
 * else v1's cpu.cfs_quota_us (-1 for none) over cpu.cfs_period_us. */
static long quota_cores(void) {
    FILE *f = fopen("/sys/fs/cgroup/cpu.max", "r");
    if (!f) {
        long q = read_long("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"),
             p = read_long("/sys/fs/cgroup/cpu/cpu.cfs_period_us");
        return q > 0 && p > 0 ? (q + p - 1) / p : 0;
    }
    char quota[32] = "";
    long period = 0;
    int got = fscanf(f, "%31s %ld", quota, &period);
    fclose(f);
    long q;
    char *end;
    if (got != 2 || period <= 0 || strcmp(quota, "max") == 0) return 0;
    q = strtol(quota, &end, 10);
    if (*end || q <= 0) return 0;
    return (q + period - 1) / period;
}

long hr_cores(void) {
    long cores = 0;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) cores = CPU_COUNT(&set);
    if (cores <= 0) cores = sysconf(_SC_NPROCESSORS_ONLN);
    long q = quota_cores();
    if (q > 0 && q < cores) cores = q;
    return cores > 0 ? cores : 1;
}

double hr_memory_shared(void) {
    double bytes = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    FILE *f = fopen("/sys/fs/cgroup/memory.max", "r"); /* cgroup v2; else v1's */
    if (!f) f = fopen("/sys/fs/cgroup/memory/memory.limit_in_bytes", "r");
    if (f) {
        char limit[32] = "";
        if (fscanf(f, "%31s", limit) == 1 && strcmp(limit, "max") != 0) {
            char *end;
            double v = strtod(limit, &end);
            if (!*end && v > 0 && (bytes <= 0 || v < bytes)) bytes = v;
        }
        fclose(f);
    }
    return bytes;
}

double hr_memory_bytes(void) {
    double bytes = hr_memory_shared();
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        (bytes <= 0 || (double)rl.rlim_cur < bytes))
        bytes = (double)rl.rlim_cur;
    return bytes;
}

long hr_fds_open(void) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    long n = -1; /* the directory's own descriptor */
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

int hr_fds_reserve(long need, unsigned long *soft, unsigned long *hard) {
    struct rlimit l;
    *soft = *hard = ULONG_MAX;
    if (getrlimit(RLIMIT_NOFILE, &l) != 0) return 0;
    if (l.rlim_cur != RLIM_INFINITY) *soft = (unsigned long)l.rlim_cur;
    if (l.rlim_max != RLIM_INFINITY) *hard = (unsigned long)l.rlim_max;
    if (l.rlim_cur == RLIM_INFINITY || l.rlim_cur >= (rlim_t)need) return 0;
    if (l.rlim_max != RLIM_INFINITY && l.rlim_max < (rlim_t)need) return -1;
    l.rlim_cur = (rlim_t)need;
    return setrlimit(RLIMIT_NOFILE, &l) == 0 ? 1 : -1;
}
