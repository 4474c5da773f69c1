/*
 * cmd_run.c: `hetring run`, one node of the cluster.
 *
 * A one-node cluster trains here with the local communicator. A cluster of several nodes
 * needs the ring: run_cluster() is where it plugs in (train_init with a ring train_comm and
 * a controller in trainer.ctrl, then train_run).
 */
#include "cli.h"
#include "hr_fault.h"
#include "hr_log.h"
#include "train.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *out) {
    fprintf(out, "usage: hetring run --conf FILE [--node ID] [--set SECTION.KEY=VALUE]...\n"
                 "\n"
                 "Start one node of the cluster described by FILE.\n"
                 "\n"
                 "  --conf FILE      cluster INI file (the same file on every node)\n"
                 "  --node ID        which [node.ID] this process is; otherwise HETRING_NODE,\n"
                 "                   SLURM_PROCID or OMPI_COMM_WORLD_RANK (a rank: position in id\n"
                 "                   order), otherwise the one node whose host is a local address\n"
                 "  --set S.K=V      override one key (node keys: node.ID.KEY=VALUE)\n"
                 "  --metrics FILE   write one JSON record per iteration (JSONL)\n"
                 "  --summary FILE   write a JSON summary of the run\n"
                 "  --quiet          no progress output\n"
                 "  --help           this text\n");
}

/* Train on this node alone. */
static int train_one(const cfg *c, int self, const train_opts *to) {
    trainer t;
    train_result res;
    char err[HR_ERRLEN] = "";
    hr_status st = train_init(&t, c, self, NULL, err, sizeof err);
    if (st != HR_OK) {
        fprintf(stderr, "hetring run: %s\n", err[0] ? err : hr_strerror(st));
        return st == HR_ERR_CONFIG ? CLI_USAGE : CLI_FAIL;
    }
    st = train_run(&t, to, &res, err, sizeof err);
    if (st != HR_OK) {
        fprintf(stderr, "hetring run: %s\n", err[0] ? err : hr_strerror(st));
        train_free(&t);
        return CLI_FAIL;
    }
    HR_INFO(TRAIN,
            "done: %ld iterations, %ld samples in %.2f s (%.0f samples/s), final loss %.4f, "
            "held-out %s %.4g%s",
            res.iterations, res.samples, res.wall_s, res.samples_per_s, res.final_loss,
            t.y ? "accuracy" : "mse", t.y ? res.eval_accuracy : res.eval_loss,
            res.emulated ? " (emulated heterogeneity)" : "");
    train_free(&t);
    return CLI_OK;
}

int cmd_run(int argc, char **argv) {
    static const struct option opts[] = {
        {"conf", required_argument, 0, 0},    {"node", required_argument, 0, 0},
        {"set", required_argument, 0, 0},     {"metrics", required_argument, 0, 0},
        {"summary", required_argument, 0, 0}, {"quiet", no_argument, 0, 0},
        {"help", no_argument, 0, 'h'},        {0, 0, 0, 0}};
    cli_common o = {0};
    train_opts to = {NULL, NULL, TRAIN_PROGRESS_AUTO, NULL};
    int idx, ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "h", opts, &idx)) != -1) {
        if (ch == 'h') return usage(stdout), CLI_OK;
        if (ch != 0) return usage(stderr), CLI_USAGE;
        const char *name = opts[idx].name;
        if (strcmp(name, "metrics") == 0)
            to.metrics_path = optarg;
        else if (strcmp(name, "summary") == 0)
            to.summary_path = optarg;
        else if (strcmp(name, "quiet") == 0)
            to.progress = TRAIN_PROGRESS_NONE;
        else if (cli_common_opt(&o, name, optarg) <= 0)
            return usage(stderr), CLI_USAGE;
    }
    if (optind < argc) return cli_usage_error("run", "unexpected argument '%s'", argv[optind]);
    cfg c;
    int rc = cli_load_config(&c, &o, "run");
    if (rc) return rc;
    int self;
    char err[HR_ERRLEN];
    if (cfg_resolve_node(&c, o.node, &self, err, sizeof err) != HR_OK) {
        fprintf(stderr, "hetring run: %s\n", err);
        cfg_free(&c);
        return CLI_USAGE;
    }
    const cfg_node *me = &c.nodes[self];
    hr_log_set_node((int)me->id);
    if (c.security == CFG_SEC_NONE)
        HR_WARN(CLI, "security = none: peer links are neither authenticated nor encrypted");
    HR_INFO(CLI, "node %ld of %d ready on %s:%ld (%s, %ld thread(s)%s)", me->id, c.n_nodes,
            me->host, me->port, me->device < 0 ? "cpu" : "cuda", me->threads,
            me->slowdown > 1 || me->n_interference ? ", emulated slowdown" : "");
    hr_fault_point(me->id, -1);
    if (c.n_nodes > 1) {
        HR_WARN(CLI,
                "%d nodes configured: distributed training is not available in this build "
                "yet; only one-node clusters train",
                c.n_nodes);
        cfg_free(&c);
        return CLI_OK;
    }
    rc = train_one(&c, self, &to);
    cfg_free(&c);
    return rc;
}
