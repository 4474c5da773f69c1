/*
 * bench_util.h: small helpers shared by the bench suites: reading numbers out of one-line
 * JSON records (the metrics and summary files hetring writes), list and number options,
 * medians, and running the hetring executable (or gnuplot) as a child with a deadline.
 */
#ifndef HR_BENCH_UTIL_H
#define HR_BENCH_UTIL_H

#include <stddef.h>

/* Find "key": NUMBER in a one-line JSON object. Returns 0 and stores it, or -1. */
int json_number(const char *line, const char *key, double *out);
/* Find "key": [N, N, ...]; stores up to `max` numbers and returns how many were read. */
int json_array(const char *line, const char *key, double *out, int max);
/* Is `item` one of the comma-separated entries of `list`? */
int list_has(const char *list, const char *item);
/* Median of v[0..n) (sorts v in place); NAN for n = 0. */
double bench_median(double *v, int n);

/* Parse the value `arg` of option --`name` as an integer in [lo, hi]. Returns 0, or prints
 * "hetring bench SUITE: --NAME 'ARG' (expected LO..HI)" and returns -1. */
int bench_long_opt(const char *suite, const char *name, const char *arg, long lo, long hi,
                   long *out);

/* Path of the executable `name` in the directory of the running one (the build root, where
 * hetring and hetring-bench both land). Returns 0 when it is there and executable; else -1,
 * with `buf` still holding the path looked for. */
int bench_sibling_exe(const char *name, char *buf, size_t len);

/* Run argv (argv[0] a path, or a name looked up in PATH) as a child with stdout and stderr
 * going to `log` (truncated, or appended when `append`; NULL keeps the bench's own), and wait
 * at most `deadline_s` seconds: past it the child gets SIGTERM and, 5 s later, SIGKILL. The
 * child gets SIGTERM too when the bench dies. Returns the child's exit status, 128 + signal
 * when a signal ended it, 124 when the deadline passed, -1 when it could not be started. */
int bench_spawn(char *const argv[], const char *log, int append, double deadline_s);

#endif
