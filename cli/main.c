/*
 * main.c: the hetring executable, a table of commands.
 *
 * `hetring bench` is the one command that lives elsewhere: the bench suites are their own
 * executable, hetring-bench, on top of everything else (it starts clusters with this hetring),
 * so nothing here includes them; the command runs the hetring-bench next to this executable.
 */
#include "cli/cli.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int cmd_help(int argc, char **argv);

/* `hetring bench ARGS...`: exec hetring-bench ARGS... from the directory of this executable. */
static int cmd_bench(int argc, char **argv) {
    char self[4096], bench[4200];
    if (cli_self_exe(self, sizeof self) != 0) {
        fprintf(stderr, "hetring bench: cannot find the hetring executable (/proc/self/exe)\n");
        return CLI_FAIL;
    }
    const char *slash = strrchr(self, '/');
    snprintf(bench, sizeof bench, "%.*s/hetring-bench", slash ? (int)(slash - self) : 1,
             slash ? self : ".");
    if (access(bench, X_OK) != 0)
        return cli_usage_error("bench",
                               "hetring-bench not found next to %s; build the "
                               "hetring-bench target",
                               self);
    argv[0] = bench;
    fflush(stdout);
    execv(bench, argv);
    fprintf(stderr, "hetring bench: cannot run %s: %s\n", bench, strerror(errno));
    return CLI_FAIL;
}

/* The bench suites are built unless -DHETRING_BENCH=OFF. */
static int bench_available(void) {
#ifdef HR_HAVE_BENCH
    return 1;
#else
    return 0;
#endif
}

static const cli_command commands[] = {
    {"run", "start one node of a cluster", cmd_run, NULL},
    {"local", "start every node of a cluster file on this machine", cmd_local, NULL},
    {"config", "validate a cluster file and print the effective configuration", cmd_config, NULL},
    {"gen-data", "write a synthetic dataset as MNIST IDX, CIFAR-10 or CSV files", cmd_gen_data,
     NULL},
    {"keygen", "write a node identity key (or a cluster pre-shared key)", cmd_keygen, NULL},
    {"bench", "benchmark suites: allreduce, train, hetero, elastic, powersgd", cmd_bench,
     bench_available},
    {"version", "print the version and build features", cmd_version, NULL},
    {"help", "help on a command", cmd_help, NULL},
};
#define N_COMMANDS ((int)(sizeof commands / sizeof commands[0]))

static int available(const cli_command *c) {
    return !c->available || c->available();
}

static void usage(FILE *out) {
    fprintf(out, "usage: hetring COMMAND [OPTIONS]\n\n"
                 "Peer-to-peer ring all-reduce training for clusters of mixed-speed machines.\n\n"
                 "Commands:\n");
    for (int i = 0; i < N_COMMANDS; i++)
        if (available(&commands[i]))
            fprintf(out, "  %-9s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\nRun 'hetring COMMAND --help' for a command's options.\n"
                 "Quick start: hetring local --conf conf/examples/demo.ini\n"
                 "Logging: HETRING_LOG=error|warn|info|debug|trace (default info),\n"
                 "         or per subsystem, e.g. warn,ring=debug\n");
}

static const cli_command *find(const char *name) {
    for (int i = 0; i < N_COMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0 && available(&commands[i])) return &commands[i];
    return NULL;
}

static int cmd_help(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(stdout);
        return CLI_OK;
    }
    const cli_command *c = find(argv[1]);
    if (!c) return cli_usage_error("help", "unknown command '%s' (see hetring help)", argv[1]);
    char *sub[] = {argv[1], "--help", NULL};
    return c->fn(2, sub);
}

int main(int argc, char **argv) {
    int rc = cli_main_start(argv, "hetring");
    if (rc != CLI_OK) return rc;
    if (argc < 2) {
        usage(stderr);
        return CLI_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)
        return cli_main_end(cmd_help(1, argv), "hetring");
    if (strcmp(argv[1], "--version") == 0) return cli_main_end(cmd_version(1, argv), "hetring");
    const cli_command *c = find(argv[1]);
    if (!c) return cli_main_unknown("hetring", "command", argv[1], usage);
    return cli_main_end(c->fn(argc - 1, argv + 1), "hetring");
}
