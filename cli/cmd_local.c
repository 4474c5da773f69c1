/* cmd_local.c: `hetring local`, every node of a cluster file on this machine. */
#include "cli/cli.h"
#include "cli/launch.h"
#include "cluster/trainer_setup.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CLI_UNREAD_MAX 16 /* [controller] keys the static pass of --compare-static sets back */
#define CLI_UNREAD_ALL (CLI_UNREAD_MAX + CFG_MAX_NODES) /* with a capacity per node */

static void usage(FILE *out) {
    fprintf(
        out,
        "usage: hetring local --conf FILE [--set SECTION.KEY=VALUE]... [--grace S]\n"
        "                     [--respawn S] [--compare-static] [--netns PREFIX]\n"
        "                     [-- RUN-OPTIONS...]\n"
        "\n"
        "Start one `hetring run` child per [node.ID] of FILE on this machine (every host must\n"
        "be a local address). Each output line is prefixed with its node. No node outlives\n"
        "this command. Options after -- are passed to every `hetring run` (a --metrics FILE\n"
        "needs {id} in it, which becomes each node's id, so that each writes its own).\n"
        "\n"
        "When a node dies (killed, or a non-zero exit) the others go on as long as a quorum\n"
        "of them still runs ([cluster] min_nodes, default a majority: floor(N/2)+1 of the N\n"
        "nodes); below it, with no restart pending, the others pause and give up after\n"
        "[cluster] rejoin_timeout; those still running then are stopped. A node that exits\n"
        "with an error before the cluster formed (before any node's first view: its\n"
        "configuration, its port or its files are wrong) and is not restarted stops the\n"
        "others at once, whatever the quorum. Once nodes have finished (exit 0) and fewer\n"
        "than a quorum still run, those get the same time to finish, then are stopped: a\n"
        "stopped or hung node never holds this command. SIGINT, SIGTERM and SIGHUP reach\n"
        "every node as SIGTERM (each checkpoints and leaves), and so does the end of the\n"
        "command reading this one's output (hetring local ... | head); nodes still running\n"
        "after the grace period, or at a second signal half a second or more after the first\n"
        "(Ctrl-C twice), are killed, and nothing is restarted any more.\n"
        "\n"
        "  --conf FILE      cluster INI file\n"
        "  --set S.K=V      override one key, for every node\n"
        "  --grace S        seconds between SIGTERM and SIGKILL when stopping nodes (default 5)\n"
        "  --respawn S      restart a node that died (killed or a non-zero exit, not one that\n"
        "                   exited 0, nor one that refused its configuration with 2) S seconds\n"
        "                   later with the same command line, so that it rejoins the cluster;\n"
        "                   at most %d times per node, and only while another node runs or\n"
        "                   waits for its own restart\n"
        "  --compare-static run the cluster twice, first with static batches, then as\n"
        "                   configured, and report the measured speed-up; both runs start\n"
        "                   from scratch, without [train] checkpoint (neither reads nor\n"
        "                   writes it), and take no --summary or --metrics; the static\n"
        "                   run leaves out the [controller] keys and the [node] capacity\n"
        "                   hints static does not read\n"
        "  --netns PREFIX   start node ID in the network namespace PREFIX-ID\n"
        "                   (/var/run/netns/PREFIX-ID, made beforehand: `hetring bench hetero\n"
        "                   --netns` makes them with shaped links); each host must then be an\n"
        "                   address of its node's namespace. Needs the privilege to enter them\n"
        "  --help           this text\n"
        "\n"
        "Exit status: 0 when the last process of every node exited 0 (a node that died, was\n"
        "restarted and then finished counts as a success; one that stayed down does not, even\n"
        "if the others finished without it); 1 when a node's last process failed, the quorum\n"
        "was lost or the run was interrupted; 2 for a usage or configuration error, this\n"
        "command's or the nodes' (every node that failed exited 2, refusing the file).\n",
        LAUNCH_MAX_RESPAWNS);
}

/* How a node's last process ended, for the closing message. */
static void describe_exit(char *buf, size_t n, int code) {
    if (code > 128)
        snprintf(buf, n, "killed by SIG%s",
                 sigabbrev_np(code - 128) ? sigabbrev_np(code - 128) : "?");
    else
        snprintf(buf, n, "exit status %d", code);
}

/* Why the run failed, after launch_cluster returned 1 (not for an interruption), or 2 with the
 * nodes' refusal of the configuration. */
static void report_failure(const launch_result *res) {
    if (res->refused)
        fprintf(stderr,
                "hetring local: the command line or configuration was refused (exit status %d): "
                "each node that refused it said why above\n",
                LAUNCH_EXIT_REFUSED);
    else if (res->at_start)
        fprintf(stderr,
                "hetring local: node %ld failed before the cluster formed (its error is above); "
                "the others were stopped\n",
                res->ids[res->failed_node]);
    else if (res->quorum_lost)
        fprintf(stderr,
                "hetring local: fewer than %ld node(s) (the quorum) were left running; the "
                "others gave up or were stopped\n",
                res->quorum);
    else if (res->timed_out)
        fprintf(stderr, "hetring local: the run passed its deadline\n");
    for (int i = 0; i < res->n; i++) {
        if (res->exit_code[i] == 0) continue;
        char how[64];
        describe_exit(how, sizeof how, res->exit_code[i]);
        fprintf(stderr, "hetring local: node %ld ended with %s", res->ids[i], how);
        if (res->restarts[i]) fprintf(stderr, " after %d restart(s)", res->restarts[i]);
        fprintf(stderr, "\n");
    }
}

/* Launch every node once. `extra` are additional run arguments (NULL-terminated). */
static int launch_once(const cfg *c, const cli_common *o, const char *exe, const launch_opts *how,
                       char **tail, int n_tail, const char *const *extra) {
    /* every child gets the same --set overrides, then whatever followed "--", then `extra`,
     * which come last so that they win over a --set of the same key among the run options;
     * sized from their count, so that none is dropped */
    int n_extra = 0, na = 0;
    while (extra && extra[n_extra]) n_extra++;
    const char **args = malloc(sizeof *args * (size_t)(2 * o->n_sets + n_tail + n_extra + 1));
    if (!args) {
        fprintf(stderr, "hetring local: out of memory\n");
        return CLI_FAIL;
    }
    for (int i = 0; i < o->n_sets; i++) args[na++] = "--set", args[na++] = o->sets[i];
    for (int i = 0; i < n_tail; i++) args[na++] = tail[i];
    for (int i = 0; i < n_extra; i++) args[na++] = extra[i];
    args[na] = NULL;
    launch_opts lo = *how;
    lo.exe = exe, lo.conf = o->conf, lo.args = args, lo.out = stdout;
    launch_result res;
    int rc = launch_cluster(c, &lo, &res);
    free(args);
    if ((rc == 1 && !res.interrupted) || res.refused) report_failure(&res);
    if (res.interrupted) rc = -1;
    launch_result_free(&res);
    return rc;
}

/* samples_per_s from a run summary, or -1 when there is none to read. */
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

/* Whether pass `name`'s rate r (summary_rate of `path`) can be compared; says why not. */
static int rate_ok(const char *name, const char *path, double r) {
    if (r > 0) return 1;
    if (r < 0)
        fprintf(stderr, "hetring local: the %s run wrote no summary that could be read (%s)\n",
                name, path);
    else
        fprintf(stderr, "hetring local: the %s run trained nothing (samples_per_s %g in %s)\n",
                name, r, path);
    return 0;
}

/* The keys of the configured policy that static does not read, given another value than their
 * default (cfg_policy_unused, and the nodes' capacity: cfg_capacity_unused), which the config
 * module would refuse under static: the static pass sets them back to their defaults, as
 * "--set controller.KEY=DEFAULT" and "--set node.ID.capacity=DEFAULT" into args (NULL after
 * the last; sets holds their text), and says so once. c is the configuration as the nodes read
 * it (run_config), with the --set options after "--" too. */
static void static_unread(const cfg *c, const char **args, char sets[][96]) {
    const char *keys[CLI_UNREAD_MAX];
    int nodes[CFG_MAX_NODES], na = 0, ns = 0;
    int n = cfg_policy_unused(c, CFG_POLICY_STATIC, keys, CLI_UNREAD_MAX);
    int nn = cfg_capacity_unused(c, CFG_POLICY_STATIC, nodes, CFG_MAX_NODES);
    for (int i = 0; i < n + nn; i++) {
        char at[PATH_MAX + 64], name[64];
        const int node = i < n ? -1 : nodes[i - n];
        const char *key = i < n ? keys[i] : "capacity";
        if (node < 0)
            snprintf(name, sizeof name, "controller.%s", key);
        else
            snprintf(name, sizeof name, "node.%ld.%s", c->nodes[node].id, key);
        snprintf(sets[ns], sizeof sets[ns], "%.63s=%.31s", name, cfg_key_default(key));
        args[na++] = "--set", args[na++] = sets[ns++];
        fprintf(stderr,
                "hetring local: the static pass leaves out %s (%s), which static does not read\n",
                name, cfg_where(c, node, key, at, sizeof at));
    }
    args[na] = NULL;
}

/* The configuration as every node reads it: c's file, environment and --set options, then the
 * --set options among the run options after "--" (run_sets), which come after them on each
 * node's command line. One the config module refuses is left out here: each node refuses it
 * and says why. Returns 0, or -1 when the file can no longer be read (after a message). */
static int run_config(cfg *out, const cli_common *o, const char *const *run_sets, int n_run_sets) {
    char err[HR_ERRLEN];
    cfg_init(out);
    hr_status st = cfg_parse_file(out, o->conf, err, sizeof err);
    if (st == HR_OK) st = cfg_apply_env(out, err, sizeof err);
    for (int i = 0; st == HR_OK && i < o->n_sets; i++)
        st = cfg_set(out, o->sets[i], err, sizeof err);
    if (st != HR_OK) {
        fprintf(stderr, "hetring local: %s\n", err);
        cfg_free(out);
        return -1;
    }
    for (int i = 0; i < n_run_sets; i++) cfg_set(out, run_sets[i], err, sizeof err);
    return 0;
}

/* Run the cluster with the static policy, then as configured, and report the speed-up. Neither
 * pass reads or writes the user's checkpoint: the first would leave it at the end, where the
 * second, resumed from it, would train nothing (and a checkpoint the user had would be
 * overwritten by a static run's state), so both start from scratch without one. */
static int compare_static(const cfg *c, const cli_common *o, const char *exe,
                          const launch_opts *how, char **tail, int n_tail,
                          const char *const *run_sets, int n_run_sets) {
    cfg nodes; /* what the nodes read: the policy they run, the keys to leave out */
    if (run_config(&nodes, o, run_sets, n_run_sets)) return CLI_FAIL;
    char dir[] = "/tmp/hetring-local-XXXXXX";
    if (!mkdtemp(dir)) {
        cfg_free(&nodes);
        fprintf(stderr, "hetring local: cannot create a temporary directory: %s\n",
                strerror(errno));
        return CLI_FAIL;
    }
    char s_static[PATH_MAX], s_dyn[PATH_MAX];
    snprintf(s_static, sizeof s_static, "%s/static.json", dir);
    snprintf(s_dyn, sizeof s_dyn, "%s/dynamic.json", dir);
    const char *run1[8 + 2 * CLI_UNREAD_ALL + 1] = {
        "--set", "train.checkpoint=",        "--set",     "train.checkpoint_interval=0",
        "--set", "controller.policy=static", "--summary", s_static};
    char unread[CLI_UNREAD_ALL][96];
    static_unread(&nodes, run1 + 8, unread);
    const char *run2[] = {
        "--set", "train.checkpoint=", "--set", "train.checkpoint_interval=0", "--summary", s_dyn,
        NULL};
    printf("== 1/2: static batches (the plain BSP baseline) ==\n");
    fflush(stdout);
    int rc = launch_once(c, o, exe, how, tail, n_tail, run1);
    if (rc == 0) {
        printf("== 2/2: dynamic batching, policy %s ==\n", cfg_policy_name(nodes.policy));
        fflush(stdout);
        rc = launch_once(c, o, exe, how, tail, n_tail, run2);
    }
    double r1 = summary_rate(s_static), r2 = summary_rate(s_dyn);
    if (rc == 0 && rate_ok("static", s_static, r1) && rate_ok("dynamic", s_dyn, r2)) {
        int emulated = 0;
        for (int i = 0; i < c->n_nodes; i++)
            emulated |= c->nodes[i].slowdown > 1 || c->nodes[i].n_interference > 0;
        printf("\nstatic:  %9.0f samples/s\n%-8s %9.0f samples/s\nspeed-up over static: %.2fx "
               "(measured%s)\n",
               r1, cfg_policy_name(nodes.policy), r2, r2 / r1,
               emulated ? "; node speeds emulated with slowdown" : "");
    } else if (rc == 0) {
        rc = CLI_FAIL;
    }
    unlink(s_static);
    unlink(s_dyn);
    rmdir(dir);
    cfg_free(&nodes);
    return rc;
}

/* --netns PREFIX: a name ip-netns takes, short enough for PREFIX-ID. */
static int netns_prefix_ok(const char *p) {
    size_t n = strlen(p);
    if (n == 0 || n > 31) return 0;
    for (size_t i = 0; i < n; i++)
        if (!((p[i] >= 'a' && p[i] <= 'z') || (p[i] >= 'A' && p[i] <= 'Z') ||
              (p[i] >= '0' && p[i] <= '9') || p[i] == '_' || p[i] == '-'))
            return 0;
    return 1;
}

/* --grace and --respawn: seconds in [0, 3600]. Returns 0, or CLI_USAGE after a message. */
static int seconds_opt(const char *name, const char *arg, double *out) {
    char *end;
    double v = strtod(arg, &end);
    if (end == arg || *end || !(v >= 0 && v <= 3600))
        return cli_usage_error("local", "--%s '%s' (expected seconds in [0, 3600])", name, arg);
    *out = v;
    return 0;
}

/* The run options after "--" that every node gets: a --metrics file must have {id} in it, or
 * the nodes, all on this machine, would write one file at once (their lines interleaved); and
 * --compare-static writes each run's summary itself, where it reads the rates from, so it takes
 * no --summary, nor a --metrics, which its second run would write over the first's. The options
 * are found as `hetring run` finds them, by getopt_long over its own table (cmd_run_options), so
 * that an abbreviation it takes (--metr F, --summ=F) is found too; what it would refuse is left
 * to it. The values of its --set options go into sets (room for n_tail), their count into
 * *n_sets. Returns 0, or CLI_USAGE after a message. */
static int check_run_args(const cfg *c, char **tail, int n_tail, int compare, const char **sets,
                          int *n_sets) {
    char **argv = malloc(sizeof *argv * (size_t)(n_tail + 2)); /* getopt_long permutes it */
    if (!argv) {
        fprintf(stderr, "hetring local: out of memory\n");
        return CLI_FAIL;
    }
    argv[0] = "run";
    memcpy(argv + 1, tail, sizeof *argv * (size_t)n_tail);
    argv[n_tail + 1] = NULL;
    const struct option *opts = cmd_run_options();
    int ch, idx, rc = 0, opterr_was = opterr, optind_was = optind; /* cmd_local's own parse */
    opterr = 0, optind = 0; /* 0: getopt starts afresh on this argv */
    while (!rc && (ch = getopt_long(n_tail + 1, argv, "h", opts, &idx)) != -1) {
        const char *name = ch == 0 ? opts[idx].name : "";
        if (strcmp(name, "set") == 0) sets[(*n_sets)++] = optarg;
        if (compare && strcmp(name, "summary") == 0)
            rc = cli_usage_error("local",
                                 "--summary with --compare-static: the comparison writes each "
                                 "run's summary itself and reads the rates from them (expected "
                                 "no --summary, or no --compare-static)");
        else if (compare && strcmp(name, "metrics") == 0)
            rc = cli_usage_error("local",
                                 "--metrics with --compare-static: the two runs would write the "
                                 "same files, the second over the first (expected no "
                                 "--metrics, or no --compare-static)");
        else if (strcmp(name, "metrics") == 0 && c->n_nodes > 1 && !strstr(optarg, "{id}"))
            rc = cli_usage_error("local",
                                 "--metrics %s: the %d nodes would all write this one file "
                                 "(expected {id} in it, which becomes each node's id: e.g. "
                                 "m-{id}.jsonl)",
                                 optarg, c->n_nodes);
    }
    opterr = opterr_was, optind = optind_was;
    free(argv);
    return rc;
}

int cmd_local(int argc, char **argv) {
    static const struct option opts[] = {
        {"conf", required_argument, 0, 0},       {"set", required_argument, 0, 0},
        {"grace", required_argument, 0, 'g'},    {"respawn", required_argument, 0, 'r'},
        {"compare-static", no_argument, 0, 'c'}, {"netns", required_argument, 0, 'n'},
        {"help", no_argument, 0, 'h'},           {0, 0, 0, 0}};
    cli_common o = {0};
    launch_opts how = {.grace_s = 5};
    int idx, ch, compare = 0;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "h", opts, &idx)) != -1) {
        if (ch == 'h') return usage(stdout), CLI_OK;
        if (ch == 'c') {
            compare = 1;
        } else if (ch == 'n') {
            if (!netns_prefix_ok(optarg))
                return cli_usage_error("local",
                                       "--netns '%s' (expected 1-31 letters, digits, '_' "
                                       "or '-')",
                                       optarg);
            how.netns = optarg;
        } else if (ch == 'g') {
            if (seconds_opt("grace", optarg, &how.grace_s)) return CLI_USAGE;
        } else if (ch == 'r') {
            if (seconds_opt("respawn", optarg, &how.respawn_s)) return CLI_USAGE;
            how.max_respawns = LAUNCH_MAX_RESPAWNS;
        } else if (ch != 0 || cli_common_opt(&o, opts[idx].name, optarg) <= 0) {
            return usage(stderr), CLI_USAGE;
        }
    }
    char **tail = argv + optind; /* the run options after "--" */
    const int n_tail = argc - optind;
    cfg c;
    int rc = cli_load_config(&c, &o, "local");
    if (rc) return rc;
    const char **run_sets = malloc(sizeof *run_sets * (size_t)(n_tail + 1));
    int n_run_sets = 0;
    if (!run_sets) {
        fprintf(stderr, "hetring local: out of memory\n");
        cfg_free(&c);
        return CLI_FAIL;
    }
    rc = check_run_args(&c, tail, n_tail, compare, run_sets, &n_run_sets);
    for (int k = 0; !rc && k < c.n_nodes; k++) { /* every node runs here: every device too */
        char err[HR_ERRLEN];
        if (app_check_device(&c, k, err, sizeof err) != HR_OK) {
            fprintf(stderr, "hetring local: %s\n", err);
            rc = CLI_USAGE;
        }
    }
    char exe[4096];
    if (!rc && cli_self_exe(exe, sizeof exe)) {
        fprintf(stderr, "hetring local: cannot find the hetring executable (/proc/self/exe)\n");
        rc = CLI_FAIL;
    }
    if (rc) {
        free(run_sets);
        cfg_free(&c);
        return rc;
    }
    how.min_nodes = cfg_quorum(&c); /* the nodes' own quorum: below it they stop training too */
    how.quorum_wait_s = c.rejoin_timeout; /* and wait this long for it before giving up */
    if (compare)
        rc = compare_static(&c, &o, exe, &how, tail, n_tail, run_sets, n_run_sets);
    else
        rc = launch_once(&c, &o, exe, &how, tail, n_tail, NULL);
    free(run_sets);
    cfg_free(&c);
    return rc == 2 ? CLI_USAGE : rc < 0 ? CLI_FAIL : rc;
}
