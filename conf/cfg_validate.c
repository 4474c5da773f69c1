/*
 * cfg_validate.c: the checks across keys that a single value cannot make (peers, quorum, batch
 * bounds, something to train, keys for the security asked for, and no key given that the rest
 * would leave unused: check_security, check_controller, check_unused), each failing with
 * "FILE:LINE: what (expected)" at the line of the key to change.
 */
#include "conf/cfg_internal.h"
#include "base/hr_addr.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static int cmp_node_id(const void *a, const void *b) {
    long x = ((const cfg_node *)a)->id, y = ((const cfg_node *)b)->id;
    return (x > y) - (x < y);
}

/* Where a global key got its value, for "WHERE: what (expected)": "FILE:LINE", or the override
 * that set it (cfg_where). The buffer lives to the end of the enclosing block. */
#define AT(c, key) cfg_where((c), -1, (key), (char[CFG_PATH + 64]){0}, CFG_PATH + 64)

/* A global key was given (in the file, the environment or --set), not left at its default. */
static int given(const cfg *c, const char *key) {
    return cfg_key_line(c, -1, key) != 0;
}

/* Each check below returns HR_OK or fails with "FILE:LINE: what (expected)", `f` the file. */

/* Every node has host and port, and no two share both. Nodes are still in file order. */
static hr_status check_nodes(const cfg *c, const char *f, char *err, size_t errlen) {
    if (c->n_nodes == 0)
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "%s:%d: the peer list is empty (expected one [node.ID] section per peer, "
                       "with host and port)",
                       f, c->n_lines > 0 ? c->n_lines : 1);
    for (int i = 0; i < c->n_nodes; i++) {
        const cfg_node *n = &c->nodes[i];
        const char *missing = !n->host[0] ? "host" : n->port == 0 ? "port" : NULL;
        if (missing) {
            int idx;
            char exp[256];
            cfg_expected(cfg_find_key(cfg_nkeys, cfg_n_nkeys, "node", missing, &idx), exp,
                         sizeof exp);
            return hr_fail(err, errlen, HR_ERR_CONFIG,
                           "%s:%d: [node.%ld] is missing required key '%s' (expected %s)", f,
                           n->line, n->id, missing, exp);
        }
        for (int j = 0; j < i; j++)
            if (c->nodes[j].port == n->port && strcasecmp(c->nodes[j].host, n->host) == 0)
                return hr_fail(err, errlen, HR_ERR_CONFIG,
                               "%s:%d: [node.%ld] uses %s, already used by [node.%ld] at line "
                               "%d (expected a distinct host:port per node)",
                               f, n->line, n->id,
                               hr_addr((char[HR_ADDR_LEN]){0}, HR_ADDR_LEN, n->host, n->port),
                               c->nodes[j].id, c->nodes[j].line);
    }
    return HR_OK;
}

/* min_nodes is a majority, so two sides of a partition can never both train. */
static hr_status check_quorum(const cfg *c, char *err, size_t errlen) {
    long majority = c->n_nodes / 2 + 1;
    if (c->min_nodes != 0 && (c->min_nodes < majority || c->min_nodes > c->n_nodes))
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "%s: min_nodes = %ld with %d nodes (expected 0 for a majority, or %ld "
                       "to %d: a smaller quorum would let both sides of a split train)",
                       AT(c, "min_nodes"), c->min_nodes, c->n_nodes, majority, c->n_nodes);
    return HR_OK;
}

long cfg_quorum(const cfg *c) {
    return c->min_nodes ? c->min_nodes : c->n_nodes / 2 + 1;
}

/* min_batch and max_batch leave room for a split of global_batch over the nodes, from every
 * node down to a quorum (the smallest view that trains). */
static hr_status check_batch_bounds(const cfg *c, char *err, size_t errlen) {
    long nn = c->n_nodes, nq = cfg_quorum(c);
    if (c->global_batch < nn * c->min_batch)
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "%s: global_batch = %ld is smaller than %ld nodes x min_batch %ld = %ld "
                       "(expected global_batch >= %ld)",
                       AT(c, "global_batch"), c->global_batch, nn, c->min_batch, nn * c->min_batch,
                       nn * c->min_batch);
    if (c->max_batch && c->max_batch < c->min_batch)
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "%s: max_batch = %ld is below min_batch = %ld (expected max_batch >= "
                       "min_batch, or 0 for no limit)",
                       AT(c, "max_batch"), c->max_batch, c->min_batch);
    if (c->max_batch && c->max_batch * nq < c->global_batch)
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "%s: max_batch = %ld with %ld nodes cannot cover global_batch = %ld "
                       "(expected max_batch >= %ld%s)",
                       AT(c, "max_batch"), c->max_batch, nq, c->global_batch,
                       (c->global_batch + nq - 1) / nq,
                       nq < nn ? ": a view may shrink to the quorum, min_nodes" : "");
    return HR_OK;
}

/* There is something to train (a synthetic set fills at least one batch), and the mlp has its
 * layers. */
static hr_status check_training(const cfg *c, char *err, size_t errlen) {
    if (c->epochs == 0 && c->iterations == 0)
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "%s: nothing to train (expected epochs >= 1 or iterations >= 1)",
                       AT(c, cfg_key_line(c, -1, "iterations") ? "iterations" : "epochs"));
    const int synthetic = c->dataset == CFG_DATA_SYNTHETIC ||
                          c->dataset == CFG_DATA_SYNTHETIC_RGB ||
                          c->dataset == CFG_DATA_SYNTHETIC_REGRESSION;
    if (synthetic && c->samples < c->global_batch)
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "%s: samples = %ld, fewer than global_batch = %ld: the synthetic training "
                       "set would not fill one iteration (expected samples >= global_batch)",
                       AT(c, given(c, "samples") ? "samples" : "global_batch"), c->samples,
                       c->global_batch);
    if (!synthetic && !c->data_dir[0]) /* a node would find out as it loads the data */
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "%s: dataset = %s needs [train] data_dir (expected the directory of the "
                       "files, e.g. from `hetring gen-data`)",
                       AT(c, "dataset"), cfg_dataset_name(c->dataset));
    if (c->model == CFG_MODEL_MLP && c->n_layers < 2)
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "%s: the mlp needs layers (expected e.g. layers = 784,256,10)",
                       AT(c, "layers"));
    for (int i = 0; i < c->n_nodes; i++) { /* each node's file, "{id}" replaced, fits */
        size_t len = 0;
        for (const char *p = c->checkpoint; *p;)
            if (strncmp(p, "{id}", 4) == 0)
                len += (size_t)snprintf(NULL, 0, "%ld", c->nodes[i].id), p += 4;
            else
                len++, p++;
        if (len >= CFG_PATH)
            return hr_fail(err, errlen, HR_ERR_CONFIG,
                           "%s: checkpoint with {id} replaced by %ld is %zu characters long "
                           "(expected at most %d)",
                           AT(c, "checkpoint"), c->nodes[i].id, len, CFG_PATH - 1);
    }
    if (!c->checkpoint[0] && c->checkpoint_interval > 0 && given(c, "checkpoint_interval"))
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "%s: checkpoint_interval = %ld, but no checkpoint is configured, so none "
                       "would be written (expected checkpoint = FILE, or no checkpoint_interval)",
                       AT(c, "checkpoint_interval"), c->checkpoint_interval);
    return HR_OK;
}

/* The first key configured of those security = none would leave unused: its name in *key, its
 * node's id in *node (-1 for a key of the cluster) and where it was set in `at` (cfg_where),
 * else 0. */
static int unused_keys(const cfg *c, const char **key, long *node, char *at, size_t n) {
    static const char *const keys[] = {"key_file", "psk_file", "psk"};
    const int set[] = {c->key_file[0] != 0, c->psk_file[0] != 0, c->has_psk};
    *node = -1;
    for (int i = 0; i < 3; i++)
        if (set[i]) return *key = keys[i], cfg_where(c, -1, keys[i], at, n), 1;
    for (int i = 0; i < c->n_nodes; i++)
        if (c->nodes[i].has_pubkey) {
            *key = "pubkey", *node = c->nodes[i].id, cfg_where(c, i, "pubkey", at, n);
            return 1;
        }
    return 0;
}

/* The keys that are given are used: none of them with security = none (the user meant the
 * links to be protected), not both a psk and a psk_file (one would be dropped), and no pubkey
 * without a key_file (without an identity of its own a node authenticates by the PSK alone). */
static hr_status check_keys_used(const cfg *c, char *err, size_t errlen) {
    const char *key;
    char at[CFG_PATH + 64];
    long node;
    if (c->security == CFG_SEC_NONE && unused_keys(c, &key, &node, at, sizeof at)) {
        char sec[48] = "";
        if (node >= 0) snprintf(sec, sizeof sec, "[node.%ld] ", node);
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "%s: %s%s is configured, but security = none leaves every link "
                       "unauthenticated and unencrypted (expected security = auto, auth or "
                       "encrypt to use the keys, or no keys with security = none)",
                       at, sec, key);
    }
    if (c->has_psk && c->psk_file[0]) {
        const int psk_by_override = cfg_key_line(c, -1, "psk") < 0;
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "%s: psk_file and psk are both given%s%s%s, and only one pre-shared key "
                       "can be used (expected one of them)",
                       AT(c, cfg_key_line(c, -1, "psk_file") > 0 ? "psk_file" : "psk"),
                       psk_by_override ? " (psk by " : "", psk_by_override ? AT(c, "psk") : "",
                       psk_by_override ? ")" : "");
    }
    if (c->key_file[0]) return HR_OK;
    for (int i = 0; i < c->n_nodes; i++)
        if (c->nodes[i].has_pubkey)
            return hr_fail(err, errlen, HR_ERR_CONFIG,
                           "%s: [node.%ld] pubkey is set, but no key_file gives the nodes "
                           "identities, so no pubkey is checked (expected key_file = "
                           "node{id}.key with the pubkeys, or no pubkeys)",
                           cfg_where(c, i, "pubkey", at, sizeof at), c->nodes[i].id);
    return HR_OK;
}

/* Security has the keys it needs. The default is encrypt when keys are configured, never a
 * silent none: this is where security = auto resolves. */
static hr_status check_security(cfg *c, const char *f, char *err, size_t errlen) {
    HR_CHECK(check_keys_used(c, err, errlen));
    int have_identity = c->key_file[0] != 0;
    int have_psk = c->psk_file[0] != 0 || c->has_psk;
    if (c->security == CFG_SEC_AUTO) {
        if (!have_identity && !have_psk)
            return hr_fail(err, errlen, HR_ERR_CONFIG,
                           "%s: security is not set and no keys are configured (expected "
                           "security = none for unprotected links, or key_file with a pubkey per "
                           "node, or psk_file)",
                           AT(c, "security"));
        c->security = CFG_SEC_ENCRYPT;
    }
    if (c->security == CFG_SEC_NONE) return HR_OK;
    if (!have_identity && !have_psk)
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "%s: security = %s needs keys (expected key_file with a pubkey per "
                       "node, or psk_file)",
                       AT(c, "security"), cfg_security_name(c->security));
    if (have_identity && !have_psk)
        for (int i = 0; i < c->n_nodes; i++)
            if (!c->nodes[i].has_pubkey)
                return hr_fail(err, errlen, HR_ERR_CONFIG,
                               "%s:%d: [node.%ld] has no pubkey, but key_file makes peers "
                               "authenticate by identity (expected pubkey = 64 hex digits "
                               "from hetring keygen)",
                               f, c->nodes[i].line, c->nodes[i].id);
    return HR_OK;
}

/* wire = bf16, powersgd and auto are gradient paths of the TCP ring: refused with NCCL;
 * powersgd and auto take the whole gradient after the compute, so buckets of a size of their
 * own, which they would ignore, are refused too (bf16 sends such buckets, each in bf16). */
static hr_status check_wire(const cfg *c, char *err, size_t errlen) {
    if (c->wire == CFG_WIRE_FP32) return HR_OK;
    const char *w = cfg_wire_name(c->wire);
    if (c->backend == CFG_BACKEND_NCCL)
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "%s: wire = %s with backend = nccl: the %s wire is the TCP ring's "
                       "(expected backend = auto or tcp, or wire = fp32)",
                       AT(c, "wire"), w, w);
    if (c->bucket_bytes != CFG_AUTO && c->bucket_bytes > 0 && c->wire != CFG_WIRE_BF16)
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "%s: wire = %s with bucket_bytes = %ld: the %s wire sends the whole "
                       "gradient after the compute, without buckets (expected bucket_bytes = auto "
                       "or 0, or wire = fp32)",
                       AT(c, "wire"), w, c->bucket_bytes, w);
    return HR_OK;
}

/* backend = nccl all-reduces the whole gradient after the compute (cluster/grad_path.c's NCCL
 * path), so buckets of a size of their own, which it would ignore, are refused. backend = auto
 * goes the same way only where the build has NCCL: cli_check_supported refuses it there. */
static hr_status check_nccl_buckets(const cfg *c, char *err, size_t errlen) {
    if (c->backend != CFG_BACKEND_NCCL || c->bucket_bytes == CFG_AUTO || c->bucket_bytes <= 0)
        return HR_OK;
    return hr_fail(err, errlen, HR_ERR_CONFIG,
                   "%s: bucket_bytes = %ld with backend = nccl: NCCL all-reduces the whole "
                   "gradient after the compute, without buckets (expected bucket_bytes = auto or "
                   "0, or backend = tcp for buckets on the TCP ring)",
                   AT(c, "bucket_bytes"), c->bucket_bytes);
}

/* segment_bytes: 0 (the measured default), or a segment of 64 bytes at least, which the ring
 * would otherwise raise it to. */
static hr_status check_segment(const cfg *c, char *err, size_t errlen) {
    if (c->segment_bytes == 0 || c->segment_bytes >= 64) return HR_OK;
    return hr_fail(err, errlen, HR_ERR_CONFIG,
                   "%s: segment_bytes = %ld is below 64 bytes, the smallest pipeline segment "
                   "(expected 0 for the measured default, or 64 to 1073741824)",
                   AT(c, "segment_bytes"), c->segment_bytes);
}

/* ================================================================ the keys of a policy */

#define POL(p) (1u << CFG_POLICY_##p)
#define DECIDE (POL(PROPORTIONAL) | POL(PID) | POL(MODEL) | POL(EPOCH))

/* The [controller] keys that some policy leaves unused, and the policies that use each, as
 * ctrl/ctrl.c reads them (and cluster/cluster_setup.c calibrate): static never decides, so of
 * all these it uses none (its bounds, min_batch and max_batch, which every policy uses, still
 * hold a resumed checkpoint's split); epoch decides at each epoch's end from the epoch's totals,
 * with no interval and no smoothed times; ki and kd are pid's terms, forgetting model's fit. */
static const struct {
    const char *key;
    unsigned users; /* bit p set: policy p (cfg_policy) reads the key */
} policy_keys[] = {
    {"interval", POL(PROPORTIONAL) | POL(PID) | POL(MODEL)},
    {"deadband", DECIDE},
    {"gain", DECIDE},
    {"ki", POL(PID)},
    {"kd", POL(PID)},
    {"smoothing", POL(PROPORTIONAL) | POL(PID) | POL(MODEL)},
    {"rate_limit", DECIDE},
    {"forgetting", POL(MODEL)},
    {"calibrate", DECIDE},
};
enum { N_POLICY_KEYS = sizeof policy_keys / sizeof *policy_keys };

/* [node] capacity, the nodes' speed hints for a first split that is not measured: the policies
 * that decide start from them (ctrl_init); static gives every node B/N whatever they say. */
#define CAPACITY_USERS DECIDE

int cfg_policy_uses(int policy, const char *key) {
    if (policy < CFG_POLICY_STATIC || policy > CFG_POLICY_EPOCH) return 1;
    if (strcmp(key, "capacity") == 0) return (CAPACITY_USERS >> policy) & 1;
    for (int i = 0; i < N_POLICY_KEYS; i++)
        if (strcmp(policy_keys[i].key, key) == 0) return (policy_keys[i].users >> policy) & 1;
    return 1;
}

/* Whether global key `key` of c holds another value than its default in d. */
static int off_default(const cfg *c, const cfg *d, const char *key) {
    int idx;
    const key_spec *k = cfg_find_key(cfg_gkeys, cfg_n_gkeys, "controller", key, &idx);
    char a[256], b[256];
    cfg_value_format(k, c, a, sizeof a);
    cfg_value_format(k, d, b, sizeof b);
    return strcmp(a, b) != 0;
}

int cfg_policy_unused(const cfg *c, int policy, const char **keys, int max) {
    cfg d;
    cfg_init(&d);
    int n = 0;
    for (int i = 0; i < N_POLICY_KEYS && n < max; i++)
        if (!((policy_keys[i].users >> policy) & 1) && given(c, policy_keys[i].key) &&
            off_default(c, &d, policy_keys[i].key))
            keys[n++] = policy_keys[i].key;
    cfg_free(&d);
    return n;
}

/* Whether node i of c gives capacity another value than its default. */
static int capacity_set(const cfg *c, int i) {
    int idx;
    const key_spec *k = cfg_find_key(cfg_nkeys, cfg_n_nkeys, "node", "capacity", &idx);
    cfg_node d;
    char a[256], b[256], why[256];
    memset(&d, 0, sizeof d);
    if (cfg_value_set(k, &d, k->def, NULL, why, sizeof why) != 0) abort(); /* schema's default */
    cfg_value_format(k, &c->nodes[i], a, sizeof a);
    cfg_value_format(k, &d, b, sizeof b);
    return c->nodes[i].key_line[idx] != 0 && strcmp(a, b) != 0;
}

int cfg_capacity_unused(const cfg *c, int policy, int *nodes, int max) {
    int n = 0;
    for (int i = 0; i < c->n_nodes && n < max; i++)
        if (!cfg_policy_uses(policy, "capacity") && capacity_set(c, i)) nodes[n++] = i;
    return n;
}

/* "policy = pid", "policy = proportional, pid or model": the policies in `users` (bit p set:
 * policy p). */
static void policy_users(unsigned users, char *out, size_t n) {
    const char *names[CFG_POLICY_EPOCH + 1];
    int m = 0;
    for (int p = CFG_POLICY_STATIC; p <= CFG_POLICY_EPOCH; p++)
        if ((users >> p) & 1) names[m++] = cfg_policy_name(p);
    size_t o = (size_t)snprintf(out, n, "policy = %s", names[0]);
    for (int j = 1; j < m && o < n; j++)
        o += (size_t)snprintf(out + o, n - o, "%s%s", j == m - 1 ? " or " : ", ", names[j]);
}

/* A [controller] key, or a node's capacity, given another value than its default that the
 * policy does not use (a key at its default changes nothing either way: reference.ini gives
 * every key). `hetring local --compare-static` and `bench hetero`, which run one file under
 * several policies, set such a key back to its default for a policy that does not use it
 * (cfg_policy_unused, cfg_capacity_unused). */
static hr_status check_controller(const cfg *c, char *err, size_t errlen) {
    const char *key;
    char users[128];
    int node;
    if (cfg_policy_unused(c, c->policy, &key, 1) == 1) {
        int i = 0;
        while (strcmp(policy_keys[i].key, key) != 0) i++;
        policy_users(policy_keys[i].users, users, sizeof users);
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "%s: %s is set, but policy = %s does not use it (expected %s, or no %s)",
                       AT(c, key), key, cfg_policy_name(c->policy), users, key);
    }
    if (cfg_capacity_unused(c, c->policy, &node, 1) == 0) return HR_OK;
    policy_users(CAPACITY_USERS, users, sizeof users);
    char at[CFG_PATH + 64];
    return hr_fail(err, errlen, HR_ERR_CONFIG,
                   "%s: [node.%ld] capacity is set, but policy = %s does not use it: every node "
                   "gets global_batch / nodes (expected %s, or no capacity)",
                   cfg_where(c, node, "capacity", at, sizeof at), c->nodes[node].id,
                   cfg_policy_name(c->policy), users);
}

/* A key given another value than its default that the rest of the configuration does not use:
 * `unused` says so (c the configuration, d the defaults), `by` names the key that leaves it
 * unused, `by_value` gives that key's value, and `expected` says what would use it. A key set
 * to its default changes nothing either way (reference.ini gives every key). The keys of one
 * controller policy are check_controller's. */
typedef struct {
    const char *key, *by;
    int (*unused)(const cfg *c, const cfg *d);
    const char *(*by_value)(const cfg *c);
    const char *expected;
} unused_rule;

static int step_unused(const cfg *c, const cfg *d) {
    return c->lr_schedule != CFG_LR_STEP && c->lr_step != d->lr_step;
}
static int gamma_unused(const cfg *c, const cfg *d) {
    return c->lr_schedule != CFG_LR_STEP && c->lr_gamma != d->lr_gamma;
}
static int layers_unused(const cfg *c, const cfg *d) {
    return c->model != CFG_MODEL_MLP &&
           (c->n_layers != d->n_layers ||
            memcmp(c->layers, d->layers, sizeof *c->layers * (size_t)c->n_layers) != 0);
}
static int data_dir_unused(const cfg *c, const cfg *d) {
    const int synthetic = c->dataset == CFG_DATA_SYNTHETIC ||
                          c->dataset == CFG_DATA_SYNTHETIC_RGB ||
                          c->dataset == CFG_DATA_SYNTHETIC_REGRESSION;
    return synthetic && strcmp(c->data_dir, d->data_dir) != 0;
}
static int rank_unused(const cfg *c, const cfg *d) {
    return c->wire != CFG_WIRE_POWERSGD && c->wire != CFG_WIRE_AUTO &&
           c->powersgd_rank != d->powersgd_rank;
}
static int limit_unused(const cfg *c, const cfg *d) {
    return c->nonfinite != CFG_NONFINITE_SKIP && c->nonfinite_limit != d->nonfinite_limit;
}
static int gbit_unused(const cfg *c, const cfg *d) {
    return c->wire != CFG_WIRE_AUTO && c->wire_auto_gbit != d->wire_auto_gbit;
}
static const char *lr_schedule_value(const cfg *c) {
    return c->lr_schedule == CFG_LR_COSINE ? "cosine" : "constant";
}
static const char *model_value(const cfg *c) {
    return cfg_model_name(c->model);
}
static const char *dataset_value(const cfg *c) {
    return cfg_dataset_name(c->dataset);
}
static const char *nonfinite_value(const cfg *c) {
    return c->nonfinite == CFG_NONFINITE_SKIP ? "skip" : "error";
}
static const char *wire_value(const cfg *c) {
    return cfg_wire_name(c->wire);
}

static const unused_rule unused_rules[] = {
    {"lr_step", "lr_schedule", step_unused, lr_schedule_value, "lr_schedule = step, or no lr_step"},
    {"lr_gamma", "lr_schedule", gamma_unused, lr_schedule_value,
     "lr_schedule = step, or no lr_gamma"},
    {"layers", "model", layers_unused, model_value, "model = mlp, or no layers"},
    {"data_dir", "dataset", data_dir_unused, dataset_value,
     "dataset = mnist, cifar10 or csv, or no data_dir"},
    {"powersgd_rank", "wire", rank_unused, wire_value,
     "wire = powersgd or auto, or no powersgd_rank"},
    {"wire_auto_gbit", "wire", gbit_unused, wire_value, "wire = auto, or no wire_auto_gbit"},
    {"nonfinite_limit", "nonfinite", limit_unused, nonfinite_value,
     "nonfinite = skip, or no nonfinite_limit"},
};

static hr_status check_unused(const cfg *c, char *err, size_t errlen) {
    cfg d;
    cfg_init(&d);
    hr_status st = HR_OK;
    for (size_t i = 0; st == HR_OK && i < sizeof unused_rules / sizeof *unused_rules; i++) {
        const unused_rule *u = &unused_rules[i];
        if (given(c, u->key) && u->unused(c, &d))
            st = hr_fail(err, errlen, HR_ERR_CONFIG,
                         "%s: %s is set, but %s = %s does not use it (expected %s)", AT(c, u->key),
                         u->key, u->by, u->by_value(c), u->expected);
    }
    cfg_free(&d);
    return st;
}

hr_status cfg_validate(cfg *c, char *err, size_t errlen) {
    const char *f = c->path[0] ? c->path : "<config>";
    HR_CHECK(check_nodes(c, f, err, errlen));
    HR_CHECK(check_quorum(c, err, errlen));
    HR_CHECK(check_batch_bounds(c, err, errlen));
    HR_CHECK(check_training(c, err, errlen));
    HR_CHECK(check_security(c, f, err, errlen));
    HR_CHECK(check_wire(c, err, errlen));
    HR_CHECK(check_nccl_buckets(c, err, errlen));
    HR_CHECK(check_segment(c, err, errlen));
    HR_CHECK(check_controller(c, err, errlen));
    HR_CHECK(check_unused(c, err, errlen));
    qsort(c->nodes, (size_t)c->n_nodes, sizeof *c->nodes, cmp_node_id); /* id order from here */
    return HR_OK;
}
