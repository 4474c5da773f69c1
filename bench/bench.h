/*
 * bench.h: the suites of hetring-bench, the bench executable (`hetring bench SUITE` runs it).
 *
 * The bench sits on top of everything: it may use the commands (cli/), the cluster engine, the
 * trainer, the ring and the config module, and nothing below includes it. A suite is a function of its own
 * command line, returning CLI_OK, CLI_FAIL or CLI_USAGE.
 */
#ifndef HR_BENCH_H
#define HR_BENCH_H

#include <stddef.h>

/* A benchmark suite of hetring-bench. */
typedef struct {
    const char *name;
    const char *summary;
    int (*fn)(int argc, char **argv);
} bench_suite;

/* The path of the bench's own file `rel` (hetero.ini, torch_mlp.py, py/ddp_baseline.py) in
 * buf[0..len): beside an installed hetring-bench (BIN/../share/hetring/bench/REL, where
 * `cmake --install` puts them) when it is there, else in the source tree this executable was
 * built from (which a build tree uses; it need not exist any more). The path is returned. */
const char *bench_own_file(const char *rel, char *buf, size_t len);

/* The suites. */
int bench_hetero(int argc, char **argv);
int bench_allreduce(int argc, char **argv);
int bench_train(int argc, char **argv);
int bench_elastic(int argc, char **argv);
int bench_psgd(int argc, char **argv);

#endif
