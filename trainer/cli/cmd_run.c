/* cmd_run.c: `hetring run`, one node of the cluster. */
#include "cli.h"
#include "hr_fault.h"
#include "hr_log.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

static void usage(FILE *out) {
    fprintf(out,
            "usage: hetring run --conf FILE [--node ID] [--set SECTION.KEY=VALUE]...\n"
            "\n"
            "Start one node of the cluster described by FILE.\n"
            "\n"
            "  --conf FILE      cluster INI file (the same file on every node)\n"
            "  --node ID        which [node.ID] this process is; otherwise HETRING_NODE,\n"
            "                   SLURM_PROCID or OMPI_COMM_WORLD_RANK (a rank: position in id\n"
            "                   order), otherwise the one node whose host is a local address\n"
            "  --set S.K=V      override one key (node keys: node.ID.KEY=VALUE)\n"
            "  --help           this text\n");
}

int cmd_run(int argc, char **argv) {
    static const struct option opts[] = {{"conf", required_argument, 0, 0},
                                         {"node", required_argument, 0, 0},
                                         {"set", required_argument, 0, 0},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    cli_common o = {0};
    int idx, ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "h", opts, &idx)) != -1) {
        if (ch == 'h') return usage(stdout), CLI_OK;
        if (ch != 0 || cli_common_opt(&o, opts[idx].name, optarg) <= 0)
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
    cfg_free(&c);
    return CLI_OK;
}
