/*
 * hr_time.h: the one clock and the one sleep every folder uses.
 */
#ifndef HR_TIME_H
#define HR_TIME_H

/* Seconds on the monotonic clock (CLOCK_MONOTONIC): for durations and deadlines. */
double hr_now(void);

/* Sleep `s` seconds (nothing when s <= 0), the whole time even when signals interrupt. */
void hr_sleep(double s);

#endif
