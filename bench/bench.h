/*
 * bench.h: `hetring bench SUITE`, the benchmark suites.
 */
#ifndef HR_BENCH_H
#define HR_BENCH_H

/* A benchmark suite of `hetring bench`. */
typedef struct {
    const char *name;
    const char *summary;
    int (*fn)(int argc, char **argv);
} bench_suite;

int cmd_bench(int argc, char **argv);

/* The suites. */
int bench_hetero(int argc, char **argv);
int bench_allreduce(int argc, char **argv);
int bench_train(int argc, char **argv);
/* Nonzero when this build has at least one suite. */
int bench_available(void);

#endif
