/*
 * cli.h: the hetring command line: shared option handling and the built-in commands.
 *
 * Exit codes: CLI_OK (0) success, CLI_FAIL (1) a runtime failure, CLI_USAGE (2) a usage or
 * configuration error. Every command accepts --help.
 */
#ifndef HR_CLI_H
#define HR_CLI_H

#include "conf/cfg.h"

#include <stdio.h>

enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

/* A command of `hetring`. `available` returns 0 where the command cannot work in this build
 * (help then leaves it out); NULL means always available. */
typedef struct {
    const char *name;
    const char *summary;
    int (*fn)(int argc, char **argv);
    int (*available)(void);
} cli_command;

/* The most --set overrides one command line may carry. */
#define CLI_MAX_SETS 64

/* Options most commands share. */
typedef struct {
    const char *conf;               /* --conf FILE */
    const char *node;               /* --node ID */
    const char *sets[CLI_MAX_SETS]; /* --set SECTION.KEY=VALUE, in order */
    int n_sets;
} cli_common;

/* Handle one shared option from getopt_long (the option's name and optarg). Returns 1 if it was
 * one, 0 if not, -1 after printing a usage error. */
int cli_common_opt(cli_common *o, const char *name, const char *arg);

/* Load and validate the config named by o->conf: file, environment, --set, then validation.
 * Prints the error to stderr. Returns CLI_OK or CLI_USAGE. */
int cli_load_config(cfg *c, const cli_common *o, const char *cmd);

/* Which node of `c` this process is (node_id_resolve, `node` from --node or NULL). On failure
 * prints the candidates (after "hetring CMD: " when `cmd` is given), frees `c` and returns
 * CLI_USAGE; otherwise sets *self to the node's index and returns CLI_OK. */
int cli_resolve_node(cfg *c, const char *node, const char *cmd, int *self);

/* Settings the schema accepts but this build or file cannot honour are refused here, naming
 * the file and the keys: backend = nccl with security, without NCCL in the build (unless the
 * test fake is armed) or with a CPU node (transport_check_config). A node's device is checked
 * where it runs (app_check_device). cli_load_config calls it. */
hr_status cli_check_supported(const cfg *c, char *err, size_t errlen);

/* train_init's error `err` about a file-backed data set, which names the file but no key
 * ("DIR/train-images-idx3-ubyte: cannot open ..."), gets the key that names the data in front:
 * "FILE:LINE: [train] data_dir = DIR: ...". An error that names its key already (FILE:LINE, or
 * FILE: [train] KEY), or of a synthetic data set, is left as it is. */
void cli_name_data_key(const cfg *c, char *err, size_t errlen);

/* Print "hetring CMD: msg" to stderr and return CLI_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The opening of every main (hetring, hetring-bench): hold the standard descriptors the caller
 * closed (no file or socket may take their numbers), choose the BLAS kernels, which may run the
 * program again (trainer/blas_pick.h), then read the log settings from the environment.
 * CLI_OK, or CLI_USAGE (CLI_FAIL) after "<prog>: <why>" on stderr. */
int cli_main_start(char **argv, const char *prog);
/* The exit status of a command that returned `rc`: a write error on standard output (a full
 * disk) makes a success 1, with a message from `prog`, as the output it promised was lost
 * (`hetring config > file` exited 0 with the file cut short). */
int cli_main_end(int rc, const char *prog);

/* A main's word that names none of its commands: "<prog>: unknown <what> 'WORD'", a blank line
 * and the usage on stderr. Returns CLI_USAGE. */
int cli_main_unknown(const char *prog, const char *what, const char *word, void (*usage)(FILE *));

/* Absolute path of the running executable (for re-executing nodes). */
int cli_self_exe(char *buf, size_t len);

/* The option table of `hetring run` (getopt_long's; {0} at the end), which `hetring local`
 * parses its run options with, so that it finds an option as the node will, abbreviated too. */
struct option;
const struct option *cmd_run_options(void);

int cmd_run(int argc, char **argv);
int cmd_local(int argc, char **argv);
int cmd_config(int argc, char **argv);
int cmd_version(int argc, char **argv);
int cmd_gen_data(int argc, char **argv);
int cmd_keygen(int argc, char **argv);

#endif
