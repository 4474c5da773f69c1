/*
 * hr_cores.h: what of the machine this process may use: how many cores, the one count behind
 * every "0 means every core" ([node] threads for BLAS and the low-rank products, bucket_bytes =
 * auto's machine fact), how much memory, which a model must fit at start, and how many open
 * files, which a ring's sockets and a launcher's pipes must fit at start.
 */
#ifndef HR_CORES_H
#define HR_CORES_H

/* Cores this process may run on: its CPU affinity (sched_getaffinity, else the online cores),
 * capped by a cgroup CPU quota (v2's /sys/fs/cgroup/cpu.max, else v1's cpu.cfs_quota_us over
 * cpu.cfs_period_us; rounded up). At least 1. */
long hr_cores(void);

/* Bytes of memory the processes of this cgroup may use together: the machine's physical memory,
 * capped by a cgroup memory limit (v2's /sys/fs/cgroup/memory.max, else v1's
 * memory.limit_in_bytes). Swap is not counted: a model that lives in it does not train. */
double hr_memory_shared(void);

/* Bytes of memory this process may use: hr_memory_shared, capped by its own address-space
 * limit (RLIMIT_AS, ulimit -v). */
double hr_memory_bytes(void);

/* Descriptors this process has open now (/proc/self/fd), or -1 where that cannot be read. */
long hr_fds_open(void);

/* Makes the open-file limit (RLIMIT_NOFILE) hold `need` descriptors: 0 where it already does
 * (or cannot be read), 1 where the soft limit was below and is now raised to `need`, -1 where
 * the hard limit is below `need` (nothing changed). *soft and *hard receive the limits as they
 * were found (ULONG_MAX for unlimited). */
int hr_fds_reserve(long need, unsigned long *soft, unsigned long *hard);

#endif
