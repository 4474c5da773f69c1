/* cmd_local.c: `hetring local`, every node of a cluster file on this machine. */
#include "cli.h"
#include "launch.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *out) {
    fprintf(
        out,
        "usage: hetring local --conf FILE [--set SECTION.KEY=VALUE]... [--grace S]\n"
        "                     [--compare-static] [-- RUN-OPTIONS...]\n"
        "\n"
        "Start one `hetring run` child per [node.ID] of FILE on this machine (every host must\n"
        "be a local address). Each output line is prefixed with its node. SIGINT and SIGTERM\n"
        "are forwarded; if any node fails the others are stopped, and no node outlives this\n"
        "command. Options after -- are passed to every `hetring run`.\n"
        "\n"
        "  --conf FILE      cluster INI file\n"
        "  --set S.K=V      override one key, for every node\n"
        "  --grace S        seconds between SIGTERM and SIGKILL when stopping nodes (default 5)\n"
        "  --compare-static run the cluster twice, first with static batches, then as\n"
        "                   configured, and report the measured speed-up\n"
        "  --help           this text\n"
        "\n"
        "Exit status: 0 when every node succeeded, 1 when one failed or the run was\n"
        "interrupted, 2 for a usage or configuration error.\n");
}

/* Launch every node once. `extra` are additional run arguments (NULL-terminated). */
static int launch_once(const cfg *c, const cli_common *o, const char *exe, double grace,
                       char **tail, int n_tail, const char *const *extra) {
    /* every child gets the same --set overrides, then `extra`, then whatever followed "--" */
    const char *args[2 * CLI_MAX_SETS + 80];
    int na = 0, cap = (int)(sizeof args / sizeof args[0]) - 1;
    for (int i = 0; i < o->n_sets; i++) args[na++] = "--set", args[na++] = o->sets[i];
    for (int i = 0; extra && extra[i] && na < cap; i++) args[na++] = extra[i];
    for (int i = 0; i < n_tail && na < cap; i++) args[na++] = tail[i];
    args[na] = NULL;
    launch_opts lo = {.exe = exe, .conf = o->conf, .args = args, .out = stdout, .grace_s = grace};
    launch_result res;
    int rc = launch_cluster(c, &lo, &res);
    if (rc == 1 && !res.interrupted)
        fprintf(stderr, "hetring local: %s\n",
                res.failed_node >= 0 ? "a node failed; every node has been stopped"
                                     : "not every node succeeded");
    if (res.interrupted) rc = -1;
    launch_result_free(&res);
    return rc;
}

/* samples_per_s from a run summary, or -1. */
static double summary_rate(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strstr(buf, "\"samples_per_s\"");
    if (!p || !(p = strchr(p, ':'))) return -1;
    return strtod(p + 1, NULL);
}

/* Run the cluster with the static policy, then as configured, and report the speed-up. */
static int compare_static(const cfg *c, const cli_common *o, const char *exe, double grace,
                          char **tail, int n_tail) {
    char dir[] = "/tmp/hetring-local-XXXXXX";
    if (!mkdtemp(dir)) {
        fprintf(stderr, "hetring local: cannot create a temporary directory: %s\n",
                strerror(errno));
        return CLI_FAIL;
    }
    char s_static[PATH_MAX], s_dyn[PATH_MAX];
    snprintf(s_static, sizeof s_static, "%s/static.json", dir);
    snprintf(s_dyn, sizeof s_dyn, "%s/dynamic.json", dir);
    const char *run1[] = {"--set", "controller.policy=static", "--summary", s_static, NULL};
    const char *run2[] = {"--summary", s_dyn, NULL};
    printf("== 1/2: static batches (the plain BSP baseline) ==\n");
    fflush(stdout);
    int rc = launch_once(c, o, exe, grace, tail, n_tail, run1);
    if (rc == 0) {
        printf("== 2/2: dynamic batching, policy %s ==\n", cfg_policy_name(c->policy));
        fflush(stdout);
        rc = launch_once(c, o, exe, grace, tail, n_tail, run2);
    }
    double r1 = summary_rate(s_static), r2 = summary_rate(s_dyn);
    if (rc == 0 && r1 > 0 && r2 > 0) {
        int emulated = 0;
        for (int i = 0; i < c->n_nodes; i++)
            emulated |= c->nodes[i].slowdown > 1 || c->nodes[i].n_interference > 0;
        printf("\nstatic:  %9.0f samples/s\n%-8s %9.0f samples/s\nspeed-up over static: %.2fx "
               "(measured%s)\n",
               r1, cfg_policy_name(c->policy), r2, r2 / r1,
               emulated ? "; node speeds emulated with slowdown" : "");
    } else if (rc == 0) {
        fprintf(stderr, "hetring local: the runs left no summary to compare\n");
        rc = CLI_FAIL;
    }
    unlink(s_static);
    unlink(s_dyn);
    rmdir(dir);
    return rc;
}

int cmd_local(int argc, char **argv) {
    static const struct option opts[] = {
        {"conf", required_argument, 0, 0},    {"set", required_argument, 0, 0},
        {"grace", required_argument, 0, 'g'}, {"compare-static", no_argument, 0, 'c'},
        {"help", no_argument, 0, 'h'},        {0, 0, 0, 0}};
    cli_common o = {0};
    double grace = 5;
    int idx, ch, compare = 0;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "h", opts, &idx)) != -1) {
        if (ch == 'h') return usage(stdout), CLI_OK;
        if (ch == 'c') {
            compare = 1;
        } else if (ch == 'g') {
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
    if (compare)
        rc = compare_static(&c, &o, exe, grace, argv + optind, argc - optind);
    else
        rc = launch_once(&c, &o, exe, grace, argv + optind, argc - optind, NULL);
    cfg_free(&c);
    return rc == 2 ? CLI_USAGE : rc < 0 ? CLI_FAIL : rc;
}
