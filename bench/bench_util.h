/*
 * bench_util.h: small helpers shared by the bench suites: reading numbers out of one-line
 * JSON records (the metrics and summary files hetring writes), list options, medians.
 */
#ifndef HR_BENCH_UTIL_H
#define HR_BENCH_UTIL_H

/* Find "key": NUMBER in a one-line JSON object. Returns 0 and stores it, or -1. */
int json_number(const char *line, const char *key, double *out);
/* Find "key": [N, N, ...]; stores up to `max` numbers and returns how many were read. */
int json_array(const char *line, const char *key, double *out, int max);
/* Is `item` one of the comma-separated entries of `list`? */
int list_has(const char *list, const char *item);
/* Median of v[0..n) (sorts v in place); NAN for n = 0. */
double bench_median(double *v, int n);

#endif
