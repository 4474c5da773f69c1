/*
 * bench.h: the suites of hetring-bench, the bench executable (`hetring bench SUITE` runs it).
 *
 * The bench sits on top of everything: it may use the commands (cli/), the cluster engine, the
 * trainer, the ring and the config module, and nothing below includes it. A suite is a function of its own
 * command line, returning CLI_OK, CLI_FAIL or CLI_USAGE.
 */
#ifndef HR_BENCH_H
#define HR_BENCH_H

/* A benchmark suite of hetring-bench. */
typedef struct {
    const char *name;
    const char *summary;
    int (*fn)(int argc, char **argv);
} bench_suite;

/* The suites. */
int bench_hetero(int argc, char **argv);
int bench_allreduce(int argc, char **argv);
int bench_train(int argc, char **argv);
int bench_elastic(int argc, char **argv);
int bench_psgd(int argc, char **argv);

#endif
