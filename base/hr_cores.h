/*
 * hr_cores.h: how many cores this process may run on, the one count behind every "0 means every
 * core" ([node] threads for BLAS and the low-rank products, bucket_bytes = auto's machine fact).
 */
#ifndef HR_CORES_H
#define HR_CORES_H

/* Cores this process may run on: its CPU affinity (sched_getaffinity, else the online cores),
 * capped by a cgroup v2 CPU quota (/sys/fs/cgroup/cpu.max, rounded up). At least 1. */
long hr_cores(void);

#endif
