/*
 * bench.c: main of hetring-bench, the bench executable: a table of suites, each in its own
 * file. Users reach it as `hetring bench SUITE ...`, which runs the hetring-bench next to
 * hetring with the same arguments; running hetring-bench directly is the same.
 */
#include "bench/bench.h"
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

const char *bench_own_file(const char *rel, char *buf, size_t len) {
    char exe[4096];
    if (cli_self_exe(exe, sizeof exe) == 0 && strrchr(exe, '/')) {
        *strrchr(exe, '/') = 0;
        snprintf(buf, len, "%s/../share/hetring/bench/%s", exe, rel);
        if (access(buf, R_OK) == 0) return buf;
    }
    snprintf(buf, len, "%s/bench/%s", HR_SOURCE_DIR, rel);
    return buf;
}

static const bench_suite suites[] = {
    {"hetero", "dynamic batching against static on emulated heterogeneous clusters", bench_hetero},
    {"train", "one node's training step: samples/s, GEMM share, GFLOP/s (vs PyTorch)", bench_train},
    {"allreduce", "ring all-reduce bandwidth and latency, nccl-tests table", bench_allreduce},
    {"elastic", "a node killed or stopped mid-run and brought back: detection, resume, join",
     bench_elastic},
    {"powersgd", "the low-rank wire's products per matrix on one thread and several", bench_psgd},
};
#define N_SUITES ((int)(sizeof suites / sizeof suites[0]))

static void usage(FILE *out) {
    fprintf(out, "usage: hetring bench SUITE [OPTIONS]\n\nSuites:\n");
    for (int i = 0; i < N_SUITES; i++)
        fprintf(out, "  %-10s %s\n", suites[i].name, suites[i].summary);
    fprintf(out, "\nRun 'hetring bench SUITE --help' (or 'hetring bench help SUITE') for a suite's "
                 "options.\n");
}

int main(int argc, char **argv) {
    int rc = cli_main_start(argv, "hetring bench");
    if (rc != CLI_OK) return rc;
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return cli_main_end(argc < 2 ? CLI_USAGE : CLI_OK, "hetring bench");
    }
    /* `hetring bench help [SUITE]`, as `hetring help [COMMAND]`: the usage, or SUITE --help */
    const int help = strcmp(argv[1], "help") == 0;
    if (help && argc < 3) {
        usage(stdout);
        return cli_main_end(CLI_OK, "hetring bench");
    }
    const char *name = argv[1 + help];
    char *sub[] = {(char *)name, "--help", NULL};
    for (int i = 0; i < N_SUITES; i++)
        if (strcmp(suites[i].name, name) == 0)
            return cli_main_end(help ? suites[i].fn(2, sub) : suites[i].fn(argc - 1, argv + 1),
                                "hetring bench");
    return cli_main_unknown("hetring bench", "suite", name, usage);
}
