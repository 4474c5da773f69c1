/*
 * hr_time.h: the clocks and the one sleep every folder uses: the monotonic clock for durations
 * and deadlines, the wall clock for timestamps.
 */
#ifndef HR_TIME_H
#define HR_TIME_H

/* Seconds on the monotonic clock (CLOCK_MONOTONIC): for durations and deadlines. */
double hr_now(void);

/* Seconds since the Unix epoch (CLOCK_REALTIME): for timestamps in records that are read next to
 * other processes' records (metrics files, view records, bench reports), never for durations. */
double hr_unix_s(void);

/* CPU seconds this process has used, all its threads (CLOCK_PROCESS_CPUTIME_ID). */
double hr_cpu_s(void);

/* CPU seconds the calling thread has used (CLOCK_THREAD_CPUTIME_ID). */
double hr_thread_cpu_s(void);

/* Sleep `s` seconds (nothing when s <= 0), the whole time even when signals interrupt. */
void hr_sleep(double s);

#endif
