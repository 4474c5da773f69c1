/* cmd_local.c: `hetring local`, every node of a cluster file on this machine. */
#include "cli.h"
#include "launch.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

static void usage(FILE *out) {
    fprintf(
        out,
        "usage: hetring local --conf FILE [--set SECTION.KEY=VALUE]... [--grace S]\n"
        "                     [-- RUN-OPTIONS...]\n"
        "\n"
        "Start one `hetring run` child per [node.ID] of FILE on this machine (every host must\n"
        "be a local address). Each output line is prefixed with its node. SIGINT and SIGTERM\n"
        "are forwarded; if any node fails the others are stopped, and no node outlives this\n"
        "command. Options after -- are passed to every `hetring run`.\n"
        "\n"
        "  --conf FILE      cluster INI file\n"
        "  --set S.K=V      override one key, for every node\n"
        "  --grace S        seconds between SIGTERM and SIGKILL when stopping nodes (default 5)\n"
        "  --help           this text\n"
        "\n"
        "Exit status: 0 when every node succeeded, 1 when one failed or the run was\n"
        "interrupted, 2 for a usage or configuration error.\n");
}

int cmd_local(int argc, char **argv) {
    static const struct option opts[] = {{"conf", required_argument, 0, 0},
                                         {"set", required_argument, 0, 0},
                                         {"grace", required_argument, 0, 'g'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    cli_common o = {0};
    double grace = 5;
    int idx, ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "h", opts, &idx)) != -1) {
        if (ch == 'h') return usage(stdout), CLI_OK;
        if (ch == 'g') {
            char *end;
            grace = strtod(optarg, &end);
            if (*end || grace < 0 || grace > 3600)
                return cli_usage_error("local", "--grace '%s' (expected seconds in [0, 3600])",
                                       optarg);
        } else if (ch != 0 || cli_common_opt(&o, opts[idx].name, optarg) <= 0) {
            return usage(stderr), CLI_USAGE;
        }
    }
    cfg c;
    int rc = cli_load_config(&c, &o, "local");
    if (rc) return rc;
    char exe[4096];
    if (cli_self_exe(exe, sizeof exe)) {
        cfg_free(&c);
        fprintf(stderr, "hetring local: cannot find the hetring executable (/proc/self/exe)\n");
        return CLI_FAIL;
    }
    /* every child gets the same --set overrides, then whatever followed "--" */
    const char *args[2 * CLI_MAX_SETS + 64];
    int na = 0;
    for (int i = 0; i < o.n_sets; i++) args[na++] = "--set", args[na++] = o.sets[i];
    for (int i = optind; i < argc && na < (int)(sizeof args / sizeof args[0]) - 1; i++)
        args[na++] = argv[i];
    args[na] = NULL;
    launch_opts lo = {.exe = exe, .conf = o.conf, .args = args, .out = stdout, .grace_s = grace};
    launch_result res;
    rc = launch_cluster(&c, &lo, &res);
    if (rc == 1 && !res.interrupted)
        fprintf(stderr, "hetring local: %s\n",
                res.failed_node >= 0 ? "a node failed; every node has been stopped"
                                     : "not every node succeeded");
    launch_result_free(&res);
    cfg_free(&c);
    return rc == 2 ? CLI_USAGE : rc;
}
