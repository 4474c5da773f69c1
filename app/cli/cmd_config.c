/* cmd_config.c: `hetring config`, the effective configuration with secrets redacted. */
#include "cli.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *out) {
    fprintf(out,
            "usage: hetring config --conf FILE [--set SECTION.KEY=VALUE]... [--node ID]\n"
            "       hetring config --reference\n"
            "\n"
            "Validate FILE and print the effective configuration: defaults, then the file, then\n"
            "HETRING_<SECTION>_<KEY> environment overrides, then --set. Secrets are redacted.\n"
            "\n"
            "  --conf FILE        cluster INI file\n"
            "  --set S.K=V        override one key (node keys: node.ID.KEY=VALUE)\n"
            "  --node ID          also resolve and report which node this process would be\n"
            "  --reference        print every key with its default and range (reference.ini)\n"
            "  --help             this text\n");
}

int cmd_config(int argc, char **argv) {
    static const struct option opts[] = {
        {"conf", required_argument, 0, 0}, {"set", required_argument, 0, 0},
        {"node", required_argument, 0, 0}, {"reference", no_argument, 0, 'r'},
        {"help", no_argument, 0, 'h'},     {0, 0, 0, 0}};
    cli_common o = {0};
    int idx, ch, reference = 0;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "h", opts, &idx)) != -1) {
        if (ch == 'h') return usage(stdout), CLI_OK;
        if (ch == 'r')
            reference = 1;
        else if (ch == 0 && cli_common_opt(&o, opts[idx].name, optarg) > 0)
            continue;
        else if (ch != 'r')
            return usage(stderr), CLI_USAGE;
    }
    if (optind < argc) return cli_usage_error("config", "unexpected argument '%s'", argv[optind]);
    if (reference) {
        cfg_print_reference(stdout);
        return CLI_OK;
    }
    cfg c;
    int rc = cli_load_config(&c, &o, "config");
    if (rc) return rc;
    cfg_print(&c, stdout);
    if (o.node || getenv("HETRING_NODE")) {
        int self;
        if ((rc = cli_resolve_node(&c, o.node, NULL, &self))) return rc;
        printf("\n; this process is node %ld\n", c.nodes[self].id);
    }
    cfg_free(&c);
    return CLI_OK;
}
