/*
 * cmd_config.c: `hetring config`, the effective configuration with secrets redacted, and with
 * --node a dry run of that node: everything `hetring run` would meet before its first
 * iteration except the peers. It reads the key files as the ring would, builds the trainer as
 * train_init does (data loaded and checked against the model, the checkpoint directory
 * proven writable, an existing checkpoint read), and binds the node's port and lets it go.
 * Nothing is trained and nothing is left behind. Each problem is reported on its own line,
 * naming the FILE:LINE (or the override) that set the value. Its verdict is hetring run's: exit
 * status 2 for what run refuses as a configuration error, 1 for the other problems. Without
 * --node, every check of run that the file alone decides (train_check_config) is made.
 */
#include "base/hr_log.h"
#include "cli/cli.h"
#include "cluster/hr_node.h"
#include "cluster/node_id.h"
#include "cluster/ring_setup.h"
#include "cluster/trainer_setup.h"
#include "ring/sec.h"
#include "ring/tcp.h"
#include "trainer/ckpt.h"
#include "trainer/train.h"

#include <ctype.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *out) {
    fprintf(out,
            "usage: hetring config --conf FILE [--set SECTION.KEY=VALUE]... [--node ID]\n"
            "       hetring config --reference\n"
            "\n"
            "Validate FILE and print the effective configuration: defaults, then the file, then\n"
            "HETRING_<SECTION>_<KEY> environment overrides, then --set. Secrets are redacted.\n"
            "Every check hetring run makes that the file alone decides is made, the model\n"
            "against the dataset included, with the same exit status 2; what depends on the\n"
            "node's machine (its files, memory, device and port) takes --node.\n"
            "Paths written relative in FILE are relative to FILE's directory; in an override, to\n"
            "the current directory. The printed paths are absolute.\n"
            "\n"
            "  --conf FILE        cluster INI file\n"
            "  --set S.K=V        override one key (node keys: node.ID.KEY=VALUE)\n"
            "  --node ID          also a dry run of node ID (or of the node HETRING_NODE names):\n"
            "                     its key files are read, its data loaded and checked against\n"
            "                     the model, its checkpoint directory written to and its port\n"
            "                     bound, as hetring run would; each problem names the FILE:LINE\n"
            "                     of the value; exit status 2 when hetring run would refuse\n"
            "                     one as a configuration error, else 1 when there is one\n"
            "  --reference        print every key with its default and range (reference.ini)\n"
            "  --help             this text\n");
}

/* "FILE:LINE: KEY" for a value of the cluster (node_idx -1) or of a node, or the override that
 * set it ("--set train.checkpoint", "environment HETRING_NODE_1_PORT"), so that a problem points
 * at the text to change; a default is named as one. */
static void where(const cfg *c, int node_idx, const char *key, char *out, size_t n) {
    char sec[48] = "", at[CFG_PATH + 64];
    if (node_idx >= 0) snprintf(sec, sizeof sec, "[node.%ld] ", c->nodes[node_idx].id);
    const int line = cfg_key_line(c, node_idx, key);
    if (line == 0)
        snprintf(out, n, "%s: %s%s (default)", c->path, sec, key);
    else if (line > 0)
        snprintf(out, n, "%s: %s%s", cfg_where(c, node_idx, key, at, sizeof at), sec, key);
    else /* the override names the key itself */
        cfg_where(c, node_idx, key, out, n);
}

/* One problem of the dry run: "WHERE: what". Returns 1, to be counted. */
__attribute__((format(printf, 4, 5))) static int problem(const cfg *c, int node_idx,
                                                         const char *key, const char *fmt, ...) {
    char at[CFG_PATH + 96];
    where(c, node_idx, key, at, sizeof at);
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", at);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

/* The key files the ring reads at start, read the same way (regular files, mode 0600, a key),
 * and the node's identity key against the pubkey pinned for it, as sec_keys_load checks it.
 * Each problem is one hetring run refuses as a configuration error: sets *refused. */
static int dry_keys(const cfg *c, int self, int *refused) {
    char path[CFG_PATH], err[HR_ERRLEN];
    uint8_t key[32];
    int bad = 0;
    if (c->security == CFG_SEC_NONE) return 0;
    if (c->key_file[0]) {
        uint8_t pk[32];
        char hex[65];
        if (app_expand_id(path, sizeof path, c->key_file, c->nodes[self].id) != 0)
            bad += problem(c, -1, "key_file", "too long once {id} is replaced");
        else if (sec_read_key_file(path, key, err, sizeof err) != HR_OK)
            bad += problem(c, -1, "key_file", "%s", err);
        else if (sec_identity_public(key, pk),
                 !c->nodes[self].has_pubkey || memcmp(pk, c->nodes[self].pubkey, 32) != 0) {
            sodium_bin2hex(hex, sizeof hex, pk, 32);
            bad += problem(c, self, "pubkey",
                           "%s the public key of %s (that is %s); fix the pubkey or use the "
                           "right key file",
                           c->nodes[self].has_pubkey ? "is not" : "is not set to", path, hex);
        }
    }
    if (c->psk_file[0] && sec_read_key_file(c->psk_file, key, err, sizeof err) != HR_OK)
        bad += problem(c, -1, "psk_file", "%s", err);
    memset(key, 0, sizeof key);
    if (bad) *refused = 1;
    return bad;
}

/* The trainer as train_init builds it, and the checkpoint as a resuming run reads it. Sets
 * *refused when a problem is one hetring run refuses as a configuration error (exit 2). */
static int dry_trainer(const cfg *c, int self, int *refused) {
    char err[HR_ERRLEN] = "", key[32] = "";
    train_config tc;
    trainer t;
    int bad = 0, same[CFG_MAX_NODES]; /* the nodes on this machine */
    hr_status st = node_id_check_hosts(c, self, same, err, sizeof err);
    if (st != HR_OK) return *refused |= st == HR_ERR_CONFIG, fprintf(stderr, "%s\n", err), 1;
    app_train_config(c, self, same, &tc);
    char ckpt[sizeof tc.checkpoint]; /* this node's: "{id}" replaced */
    memcpy(ckpt, tc.checkpoint, sizeof ckpt);
    if (ckpt[0] && ckpt_prepare(ckpt, err, sizeof err) != HR_OK)
        bad += problem(c, -1, "checkpoint", "%s", err);
    tc.checkpoint[0] = 0; /* checked above, to name its key */
    st = train_init(&t, &tc, err, sizeof err);
    if (st != HR_OK) {
        *refused |= st == HR_ERR_CONFIG;
        /* "FILE: [train] KEY ..." (a model that does not fit the data) names its key; anything
         * else is about the data files */
        size_t pl = strlen(c->path);
        if (strncmp(err, c->path, pl) == 0 && err[pl] == ':' &&
            isdigit((unsigned char)err[pl + 1])) {
            fprintf(stderr, "%s\n", err); /* "FILE:LINE: ..." names its key already */
            return bad + 1;
        }
        if (strncmp(err, c->path, pl) == 0 && strncmp(err + pl, ": [train] ", 10) == 0 &&
            sscanf(err + pl + 10, "%31[a-z_]", key) == 1)
            return bad + problem(c, -1, key, "%s", err + pl + 10 + strlen(key) + 1);
        return bad +
               problem(c, -1, c->dataset >= CFG_DATA_MNIST ? "data_dir" : "dataset", "%s", err);
    }
    if (!bad && ckpt[0] && access(ckpt, F_OK) == 0 &&
        train_load(&t, ckpt, NULL, 0, NULL, err, sizeof err) != HR_OK)
        bad += problem(c, -1, "checkpoint", "%s", err);
    printf("; data: %ld training and %ld held-out samples of %dx%dx%d\n", t.train.n, t.eval.n,
           t.train.h, t.train.w, t.train.c);
    char overlap[400];
    hr_node_describe_overlap(&t, c, self, same, overlap, sizeof overlap);
    printf("; %s\n", overlap);
    train_free(&t);
    return bad;
}

/* The node's listening port: bound and released, as the ring will bind it; *refused as
 * dry_trainer sets it. */
static int dry_port(const cfg *c, int self, int *refused) {
    const cfg_node *me = &c->nodes[self];
    char err[HR_ERRLEN];
    int fd = -1;
    if (c->n_nodes < 2) return 0; /* one node trains alone and listens on nothing */
    hr_status st = node_id_check_reachable(c, self, NULL, err, sizeof err);
    if (st != HR_OK) return *refused |= st == HR_ERR_CONFIG, fprintf(stderr, "%s\n", err), 1;
    st = tcp_listen(me->host, me->port, tcp_now() + c->connect_timeout, &fd, err, sizeof err);
    if (st == HR_ERR_IO) { /* as the ring's listen_start says it */
        char at[RING_PATH];
        app_port_where(c, self, at, sizeof at);
        return fprintf(stderr, "%s: %s (is another node or program using it?)\n", at, err), 1;
    }
    if (st != HR_OK) return *refused |= st == HR_ERR_CONFIG, problem(c, self, "host", "%s", err);
    tcp_close(&fd);
    return 0;
}

/* Everything hetring run would meet on this node before its first iteration, peers aside.
 * Returns the number of problems, each printed; *refused as dry_trainer sets it. */
static int dry_run(const cfg *c, int self, int *refused) {
    hr_log_set_node((int)c->nodes[self].id);
    return dry_keys(c, self, refused) + dry_trainer(c, self, refused) + dry_port(c, self, refused);
}

/* What hetring run refuses with exit status 2 before it trains, whichever node it is, that
 * needs neither the network nor the data files: the model against the dataset, and against the
 * shape of a synthetic set (train_check_config). */
static int check_trainer_config(const cfg *c) {
    char err[HR_ERRLEN] = "";
    train_config tc;
    app_train_config(c, 0, NULL, &tc); /* the [train] keys, the same on every node */
    if (train_check_config(&tc, err, sizeof err) == HR_OK) return CLI_OK;
    cli_name_data_key(c, err, sizeof err);
    fprintf(stderr, "hetring config: %s\n", err);
    return CLI_USAGE;
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
    if (reference && (o.conf || o.n_sets || o.node))
        return cli_usage_error("config", "--reference prints every key's default and range, and "
                                         "takes no --conf, --set or --node");
    if (reference) {
        cfg_print_reference(stdout);
        return CLI_OK;
    }
    cfg c;
    int rc = cli_load_config(&c, &o, "config");
    if (rc) return rc;
    cfg_print(&c, stdout);
    if ((rc = check_trainer_config(&c))) {
        cfg_free(&c);
        return rc;
    }
    if (o.node || getenv("HETRING_NODE")) {
        int self;
        if ((rc = cli_resolve_node(&c, o.node, NULL, &self))) return rc;
        printf("\n; this process is node %ld\n", c.nodes[self].id);
        fflush(stdout);
        char err[HR_ERRLEN];
        if (app_check_device(&c, self, err, sizeof err) != HR_OK) { /* as hetring run refuses it */
            fprintf(stderr, "hetring config: %s\n", err);
            cfg_free(&c);
            return CLI_USAGE;
        }
        int refused = 0, bad = dry_run(&c, self, &refused);
        if (bad) {
            fprintf(stderr, "hetring config: node %ld would not start: %d problem%s above\n",
                    c.nodes[self].id, bad, bad == 1 ? "" : "s");
            cfg_free(&c);
            return refused ? CLI_USAGE : CLI_FAIL;
        }
        printf("; dry run of node %ld: key files, data, checkpoint and port are ready\n",
               c.nodes[self].id);
    }
    cfg_free(&c);
    return CLI_OK;
}
