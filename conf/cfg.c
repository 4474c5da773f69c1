/*
 * cfg.c: INI parsing, overrides, validation and printing of the cluster configuration.
 *
 * One schema table per section kind drives everything. inih parses the file; it does not give
 * the handler line numbers, so a line reader of our own feeds it one line at a time and
 * counts them, and also notes section headers so that empty sections, duplicate nodes and
 * missing keys can be reported at their header's line.
 */
#include "conf/cfg.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

/* ================================================================ schema */

typedef enum {
    T_STR,
    T_PATH, /* a T_STR naming a file: relative to the INI file's directory (resolve_path) */
    T_INT,
    T_AUTOINT, /* a T_INT, or "auto" (stored as CFG_AUTO) */
    T_DBL,
    T_ENUM,
    T_U64,
    T_LAYERS,
    T_HEXKEY,
    T_DEVICE,
    T_PHASES
} ktype;

typedef struct {
    const char *section; /* "cluster", "train", "controller" or "node" */
    const char *key;
    ktype type;
    size_t off;          /* offset of the field in cfg (or cfg_node for "node") */
    size_t size;         /* T_STR: buffer size; T_HEXKEY: offset of the has_ flag */
    double min, max;     /* T_INT, T_AUTOINT, T_DBL: inclusive range */
    const char *choices; /* T_ENUM: "a|b|c", value is the index */
    const char *def;     /* default as INI text; NULL: required (nodes) or unset */
    int secret;          /* never printed */
    const char *help;    /* one line for the reference file */
} key_spec;

#define G(f)        offsetof(cfg, f)
#define N(f)        offsetof(cfg_node, f)
#define BIG         1e12
#define SEC_CHOICES "auto|none|auth|encrypt"

static const key_spec g_keys[] = {
    {"cluster", "name", T_STR, G(name), CFG_STR, 0, 0, NULL, "hetring", 0,
     "cluster name; peers with another name are refused in the handshake"},
    {"cluster", "security", T_ENUM, G(security), 0, 0, 0, SEC_CHOICES, "auto", 0,
     "peer links: auto = encrypt when keys are configured; none must be asked for"},
    {"cluster", "key_file", T_PATH, G(key_file), CFG_PATH, 0, 0, NULL, "", 0,
     "this node's identity secret key (hetring keygen); {id} becomes the node id"},
    {"cluster", "psk_file", T_PATH, G(psk_file), CFG_PATH, 0, 0, NULL, "", 0,
     "cluster pre-shared key file (32 bytes as 64 hex digits), instead of identity keys"},
    {"cluster", "psk", T_HEXKEY, G(psk), G(has_psk), 0, 0, NULL, NULL, 1,
     "inline pre-shared key, 64 hex digits; prefer psk_file or HETRING_CLUSTER_PSK"},
    {"cluster", "connect_timeout", T_DBL, G(connect_timeout), 0, 0.1, 3600, NULL, "30", 0,
     "seconds to keep retrying connects while the ring forms"},
    {"cluster", "timeout", T_DBL, G(timeout), 0, 0.1, 3600, NULL, "30", 0,
     "seconds a blocking send or receive may wait before its peer is declared dead"},
    {"cluster", "step_timeout", T_DBL, G(step_timeout), 0, 0, 1e6, NULL, "10", 0,
     "a collective waits up to this many times the slowest recent iteration for a silent "
     "peer, when that is longer than timeout; 0: timeout alone"},
    {"cluster", "min_nodes", T_INT, G(min_nodes), 0, 0, CFG_MAX_NODES, NULL, "0", 0,
     "quorum: nodes a view needs to train; 0 = a majority, floor(N/2)+1 (with N = 2 both)"},
    {"cluster", "rejoin_timeout", T_DBL, G(rejoin_timeout), 0, 0.1, 86400, NULL, "300", 0,
     "seconds a node without a quorum keeps trying to rejoin before it gives up"},
    {"cluster", "backend", T_ENUM, G(backend), 0, 0, 0, "auto|tcp|nccl", "auto", 0,
     "gradient transport: auto uses NCCL for a view of GPU nodes with security = none, else tcp"},
    {"cluster", "segment_bytes", T_INT, G(segment_bytes), 0, 0, 1 << 30, NULL, "0", 0,
     "all-reduce pipeline segment in bytes; 0 uses the measured default"},
    {"cluster", "tree_bytes", T_INT, G(tree_bytes), 0, 0, 1 << 20, NULL, "65536", 0,
     "all-reduces of at most this many bytes (and one segment) go over a binary tree of extra "
     "links in views of 4 nodes or more, where its 2*depth hops are fewer than the ring's; "
     "0: ring only"},

    {"train", "model", T_ENUM, G(model), 0, 0, 0, "linreg|softmax|mlp|cnn", "mlp", 0,
     "model: cnn is LeNet-style for 28x28x1 inputs, VGG-style for 32x32x3"},
    {"train", "layers", T_LAYERS, G(layers), 0, 1, 1 << 20, NULL, "784,256,10", 0,
     "mlp layer widths, input first and classes last"},
    {"train", "dataset", T_ENUM, G(dataset), 0, 0, 0,
     "synthetic|synthetic-rgb|synthetic-regression|mnist|cifar10|csv", "synthetic", 0,
     "training data; the synthetic sets are generated from the seed"},
    {"train", "data_dir", T_PATH, G(data_dir), CFG_PATH, 0, 0, NULL, "", 0,
     "directory of mnist/cifar10 files, or the CSV file"},
    {"train", "samples", T_INT, G(samples), 0, 1, 1e9, NULL, "60000", 0,
     "synthetic training set size"},
    {"train", "eval_samples", T_INT, G(eval_samples), 0, 0, 1e9, NULL, "10000", 0,
     "held-out set size (synthetic sets)"},
    {"train", "global_batch", T_INT, G(global_batch), 0, 1, 1e8, NULL, "512", 0,
     "B, samples per iteration over all nodes; fixed, so the learning rate never changes"},
    {"train", "lr", T_DBL, G(lr), 0, 0, 100, NULL, "0.05", 0, "base learning rate"},
    {"train", "lr_schedule", T_ENUM, G(lr_schedule), 0, 0, 0, "constant|step|cosine", "constant", 0,
     "learning-rate schedule after warm-up"},
    {"train", "lr_step", T_INT, G(lr_step), 0, 1, BIG, NULL, "1000", 0,
     "step schedule: iterations between decays"},
    {"train", "lr_gamma", T_DBL, G(lr_gamma), 0, 1e-6, 1, NULL, "0.1", 0,
     "step schedule: factor applied at each decay"},
    {"train", "warmup", T_INT, G(warmup), 0, 0, BIG, NULL, "0", 0,
     "iterations of linear learning-rate warm-up"},
    {"train", "momentum", T_DBL, G(momentum), 0, 0, 0.9999, NULL, "0.9", 0, "SGD momentum"},
    {"train", "weight_decay", T_DBL, G(weight_decay), 0, 0, 1, NULL, "0", 0, "L2 weight decay"},
    {"train", "epochs", T_INT, G(epochs), 0, 0, 1e6, NULL, "1", 0,
     "passes over the training set (used when iterations = 0)"},
    {"train", "iterations", T_INT, G(iterations), 0, 0, BIG, NULL, "0", 0,
     "total iterations; overrides epochs when > 0"},
    {"train", "eval_interval", T_INT, G(eval_interval), 0, 0, BIG, NULL, "0", 0,
     "iterations between held-out evaluations; 0 evaluates at the end only"},
    {"train", "seed", T_U64, G(seed), 0, 0, 0, NULL, "1", 0,
     "seeds the data, the per-epoch permutations and the initial weights"},
    {"train", "checkpoint", T_PATH, G(checkpoint), CFG_PATH, 0, 0, NULL, "", 0,
     "checkpoint file, written atomically; resumed from when it exists; empty = none"},
    {"train", "checkpoint_interval", T_INT, G(checkpoint_interval), 0, 0, BIG, NULL, "0", 0,
     "iterations between checkpoints; 0 writes one at the end only"},
    {"train", "hash_interval", T_INT, G(hash_interval), 0, 1, BIG, NULL, "10", 0,
     "iterations between replica hash checks (all nodes must hold identical parameters)"},
    {"train", "bucket_bytes", T_AUTOINT, G(bucket_bytes), 0, 0, 1 << 30, NULL, "auto", 0,
     "gradient bucket: each is all-reduced as soon as backward has it, overlapping the rest "
     "of backward; 0 all-reduces once after backward; auto: 1 MiB buckets when every node "
     "has a core to spare for its communication thread, else 0"},
    {"train", "nonfinite", T_ENUM, G(nonfinite), 0, 0, 0, "error|skip", "error", 0,
     "a step whose global gradient or loss is not finite (NaN, inf): error stops every node, "
     "naming the iteration and the nodes whose share was not finite; skip drops its update "
     "(its samples count as used) and counts it in the metrics"},

    {"controller", "policy", T_ENUM, G(policy), 0, 0, 0, "static|proportional|pid|model|epoch",
     "model", 0, "batch-size controller; static is the plain BSP baseline"},
    {"controller", "interval", T_INT, G(interval), 0, 1, 1e6, NULL, "4", 0,
     "iterations between batch-size decisions"},
    {"controller", "deadband", T_DBL, G(deadband), 0, 0, 1, NULL, "0.05", 0,
     "no change unless some node's batch would move by more than this fraction"},
    {"controller", "gain", T_DBL, G(gain), 0, 0.01, 2, NULL, "1", 0,
     "proportional gain; 1 moves straight to the balanced split"},
    {"controller", "ki", T_DBL, G(ki), 0, 0, 10, NULL, "0.05", 0, "pid: integral gain"},
    {"controller", "kd", T_DBL, G(kd), 0, 0, 10, NULL, "0", 0, "pid: derivative gain"},
    {"controller", "min_batch", T_INT, G(min_batch), 0, 1, 1e8, NULL, "1", 0,
     "smallest batch a node is given"},
    {"controller", "max_batch", T_INT, G(max_batch), 0, 0, 1e8, NULL, "0", 0,
     "largest batch a node is given; 0 means global_batch"},
    {"controller", "smoothing", T_DBL, G(smoothing), 0, 0.001, 1, NULL, "0.3", 0,
     "EWMA weight of the newest compute-time sample"},
    {"controller", "rate_limit", T_DBL, G(rate_limit), 0, 0.01, 100, NULL, "1", 0,
     "largest relative change of one node's batch per decision"},
    {"controller", "forgetting", T_DBL, G(forgetting), 0, 0.5, 1, NULL, "0.9", 0,
     "model policy: recursive-least-squares forgetting factor"},
    {"controller", "calibrate", T_ENUM, G(calibrate), 0, 0, 0, "off|on", "on", 0,
     "when a view forms, every node times a few passes and the first split follows the "
     "measured speeds; off (or a node that cannot time itself): the capacity hints"},
};
#define N_GKEYS ((int)(sizeof g_keys / sizeof g_keys[0]))

static const key_spec n_keys[] = {
    {"node", "host", T_STR, N(host), CFG_STR, 0, 0, NULL, NULL, 0,
     "address the node listens on (required)"},
    {"node", "port", T_INT, N(port), 0, 1, 65535, NULL, NULL, 0,
     "TCP port the node listens on (required)"},
    {"node", "device", T_DEVICE, N(device), 0, 0, 0, NULL, "cpu", 0,
     "cpu, or cuda:N: the GPU this node trains on (refused at start where there is none)"},
    {"node", "threads", T_INT, N(threads), 0, 0, 1024, NULL, "1", 0,
     "BLAS threads; 0 uses every core"},
    {"node", "capacity", T_DBL, N(capacity), 0, 1e-6, BIG, NULL, "1", 0,
     "relative speed (cores, FLOPS) for the first batch split when it is not measured "
     "([controller] calibrate)"},
    {"node", "pubkey", T_HEXKEY, N(pubkey), N(has_pubkey), 0, 0, NULL, NULL, 0,
     "pinned identity public key, 64 hex digits from hetring keygen"},
    {"node", "slowdown", T_DBL, N(slowdown), 0, 1, 1000, NULL, "1", 0,
     "emulated heterogeneity: stretch compute by this factor (runs say so)"},
    {"node", "interference", T_PHASES, N(interference), 0, 1, 1000, NULL, "", 0,
     "emulated interference: ITER:FACTOR pairs, e.g. 200:3,400:1"},
};
#define N_NKEYS ((int)(sizeof n_keys / sizeof n_keys[0]))

_Static_assert(N_GKEYS <= 64, "cfg.key_line is too small");
_Static_assert(N_NKEYS <= 16, "cfg_node.key_line is too small");

/* ================================================================ value parsing */

/* Each value type is a row of three small functions: what it expects (for messages and the
 * reference file), how its text is parsed into the field, and how the field prints. A parser
 * writes nothing to the field unless the whole value is good. */

/* Why a value was refused: the text of the value, what the key expects, and the caller's
 * buffer for the reason. */
typedef struct {
    const char *val; /* the value as written */
    const char *exp; /* what the key expects, e.g. "an integer in [1, 65535]" */
    char *why;       /* out: the reason the value is refused */
    size_t whylen;
} verdict;

static int refuse(verdict *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int refuse(verdict *v, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->why, v->whylen, fmt, ap);
    va_end(ap);
    return -1;
}

int cfg_parse_long(const char *s, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    while (isspace((unsigned char)*end)) end++;
    if (errno || end == s || *end) return -1;
    *out = v;
    return 0;
}

static int parse_double(const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    while (isspace((unsigned char)*end)) end++;
    if (errno || end == s || *end || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

static int in_range(const key_spec *k, double v) {
    return v >= k->min && v <= k->max;
}

/* Split a comma-separated list in `buf` (modified) into its non-empty items, leading white
 * space trimmed. Returns the count, or -1 when there are more than `max`. */
static int split_list(char *buf, char **items, int max) {
    int n = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (n == max) return -1;
        while (isspace((unsigned char)*tok)) tok++;
        items[n++] = tok;
    }
    return n;
}

/* The shortest text that reads back as the same double. */
static void format_double(double v, char *out, size_t n) {
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(out, n, "%.*g", prec, v);
        if (strtod(out, NULL) == v) break;
    }
}

/* ---------------------------------------------------------------- text */

static void str_expect(const key_spec *k, char *buf, size_t n) {
    snprintf(buf, n, "%s", strcmp(k->key, "host") == 0 ? "a host name or IP address" : "text");
}

static void path_expect(const key_spec *k, char *buf, size_t n) {
    (void)k;
    snprintf(buf, n,
             "a path; relative to this file's directory (from --set or the environment: "
             "to the current directory)");
}

static int str_parse(const key_spec *k, void *base, char *field, verdict *v) {
    (void)base;
    size_t len = strlen(v->val);
    if (len >= k->size)
        return refuse(v, "value is too long (expected at most %zu characters)", k->size - 1);
    memcpy(field, v->val, len + 1);
    return 0;
}

static void str_format(const key_spec *k, const void *base, const char *field, char *out,
                       size_t n) {
    (void)k, (void)base;
    snprintf(out, n, "%s", field);
}

/* ---------------------------------------------------------------- numbers */

static void int_expect(const key_spec *k, char *buf, size_t n) {
    snprintf(buf, n, "an integer in [%.15g, %.15g]", k->min, k->max);
}

static int int_parse(const key_spec *k, void *base, char *field, verdict *v) {
    (void)base;
    long x;
    if (cfg_parse_long(v->val, &x))
        return refuse(v, "malformed integer '%s' (expected %s)", v->val, v->exp);
    if (!in_range(k, (double)x)) return refuse(v, "%ld is out of range (expected %s)", x, v->exp);
    *(long *)field = x;
    return 0;
}

static void int_format(const key_spec *k, const void *base, const char *field, char *out,
                       size_t n) {
    (void)k, (void)base;
    snprintf(out, n, "%ld", *(const long *)field);
}

/* "auto" or an integer: with auto, the code that uses the key chooses its value */
static void autoint_expect(const key_spec *k, char *buf, size_t n) {
    snprintf(buf, n, "auto or an integer in [%.15g, %.15g]", k->min, k->max);
}

static int autoint_parse(const key_spec *k, void *base, char *field, verdict *v) {
    if (strcmp(v->val, "auto") != 0) return int_parse(k, base, field, v);
    *(long *)field = CFG_AUTO;
    return 0;
}

static void autoint_format(const key_spec *k, const void *base, const char *field, char *out,
                           size_t n) {
    if (*(const long *)field == CFG_AUTO)
        snprintf(out, n, "auto");
    else
        int_format(k, base, field, out, n);
}

static void dbl_expect(const key_spec *k, char *buf, size_t n) {
    snprintf(buf, n, "a number in [%.15g, %.15g]", k->min, k->max);
}

static int dbl_parse(const key_spec *k, void *base, char *field, verdict *v) {
    (void)base;
    double x;
    if (parse_double(v->val, &x))
        return refuse(v, "malformed number '%s' (expected %s)", v->val, v->exp);
    if (!in_range(k, x)) return refuse(v, "%g is out of range (expected %s)", x, v->exp);
    *(double *)field = x;
    return 0;
}

static void dbl_format(const key_spec *k, const void *base, const char *field, char *out,
                       size_t n) {
    (void)k, (void)base;
    format_double(*(const double *)field, out, n);
}

static void u64_expect(const key_spec *k, char *buf, size_t n) {
    (void)k;
    snprintf(buf, n, "an unsigned 64-bit integer");
}

static int u64_parse(const key_spec *k, void *base, char *field, verdict *v) {
    (void)k, (void)base;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v->val, &end, 10); /* decimal: 010 is ten, not eight */
    if (errno || end == v->val || *end || v->val[0] == '-')
        return refuse(v, "malformed integer '%s' (expected %s)", v->val, v->exp);
    *(uint64_t *)field = (uint64_t)x;
    return 0;
}

static void u64_format(const key_spec *k, const void *base, const char *field, char *out,
                       size_t n) {
    (void)k, (void)base;
    snprintf(out, n, "%llu", (unsigned long long)*(const uint64_t *)field);
}

/* ---------------------------------------------------------------- enums: "a|b|c", value is the
 * index */

static void enum_expect(const key_spec *k, char *buf, size_t n) {
    size_t o = (size_t)snprintf(buf, n, "one of ");
    for (const char *p = k->choices; *p && o + 2 < n; p++) {
        if (*p == '|') {
            if (o + 2 < n) buf[o++] = ',', buf[o++] = ' ';
        } else {
            buf[o++] = *p;
        }
    }
    buf[o < n ? o : n - 1] = 0;
}

static int enum_parse(const key_spec *k, void *base, char *field, verdict *v) {
    (void)base;
    size_t vlen = strlen(v->val);
    int idx = 0;
    for (const char *p = k->choices; *p; idx++) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == vlen && strncmp(p, v->val, len) == 0) {
            *(int *)field = idx;
            return 0;
        }
        p += len + (bar ? 1 : 0);
    }
    return refuse(v, "unknown value '%s' (expected %s)", v->val, v->exp);
}

static void enum_format(const key_spec *k, const void *base, const char *field, char *out,
                        size_t n) {
    (void)base;
    int idx = *(const int *)field;
    const char *p = k->choices;
    for (int i = 0; i < idx && p; i++) {
        p = strchr(p, '|');
        if (p) p++;
    }
    const char *bar = p ? strchr(p, '|') : NULL;
    snprintf(out, n, "%.*s", p ? (int)(bar ? (size_t)(bar - p) : strlen(p)) : 0, p ? p : "");
}

/* ---------------------------------------------------------------- lists */

static void layers_expect(const key_spec *k, char *buf, size_t n) {
    snprintf(buf, n, "2 to %d comma-separated widths in [1, %.0f]", CFG_MAX_LAYERS, k->max);
}

static int layers_parse(const key_spec *k, void *base, char *field, verdict *v) {
    (void)base;
    char buf[512], *item[CFG_MAX_LAYERS];
    long tmp[CFG_MAX_LAYERS];
    snprintf(buf, sizeof buf, "%s", v->val);
    int n = split_list(buf, item, CFG_MAX_LAYERS), ok = n >= 2;
    for (int i = 0; i < n && ok; i++)
        ok = cfg_parse_long(item[i], &tmp[i]) == 0 && in_range(k, (double)tmp[i]);
    if (!ok) return refuse(v, "bad layer list '%s' (expected %s)", v->val, v->exp);
    memcpy(field, tmp, sizeof tmp);
    /* n_layers follows layers[] directly in cfg */
    *(int *)(field + sizeof(long) * CFG_MAX_LAYERS) = n;
    return 0;
}

static void layers_format(const key_spec *k, const void *base, const char *field, char *out,
                          size_t n) {
    (void)k, (void)base;
    const long *l = (const long *)field;
    int cnt = *(const int *)(field + sizeof(long) * CFG_MAX_LAYERS);
    size_t o = 0;
    out[0] = 0;
    for (int i = 0; i < cnt && o < n; i++)
        o += (size_t)snprintf(out + o, n - o, "%s%ld", i ? "," : "", l[i]);
}

static void phases_expect(const key_spec *k, char *buf, size_t n) {
    (void)k;
    snprintf(buf, n, "up to %d ITER:FACTOR pairs with ascending ITER and FACTOR in [1, 1000]",
             CFG_MAX_PHASES);
}

/* One "ITER:FACTOR" item of an interference schedule, after the phase `prev` (NULL first). */
static int parse_phase(const key_spec *k, char *item, const cfg_phase *prev, cfg_phase *out) {
    char *colon = strchr(item, ':');
    if (!colon) return -1;
    *colon = 0;
    return cfg_parse_long(item, &out->iter) || out->iter < 0 ||
                   parse_double(colon + 1, &out->factor) || !in_range(k, out->factor) ||
                   (prev && out->iter <= prev->iter)
               ? -1
               : 0;
}

static int phases_parse(const key_spec *k, void *base, char *field, verdict *v) {
    char buf[512], *item[CFG_MAX_PHASES];
    cfg_phase tmp[CFG_MAX_PHASES];
    snprintf(buf, sizeof buf, "%s", v->val);
    int n = split_list(buf, item, CFG_MAX_PHASES), ok = n >= 0;
    for (int i = 0; i < n && ok; i++)
        ok = parse_phase(k, item[i], i ? &tmp[i - 1] : NULL, &tmp[i]) == 0;
    if (!ok) return refuse(v, "bad interference schedule '%s' (expected %s)", v->val, v->exp);
    memcpy(field, tmp, sizeof tmp);
    ((cfg_node *)base)->n_interference = n;
    return 0;
}

static void phases_format(const key_spec *k, const void *base, const char *field, char *out,
                          size_t n) {
    (void)k, (void)field;
    const cfg_node *node = base;
    char factor[32];
    size_t o = 0;
    out[0] = 0;
    for (int i = 0; i < node->n_interference && o < n; i++) {
        format_double(node->interference[i].factor, factor, sizeof factor);
        o += (size_t)snprintf(out + o, n - o, "%s%ld:%s", i ? "," : "", node->interference[i].iter,
                              factor);
    }
}

/* ---------------------------------------------------------------- keys and devices */

int cfg_hex_decode(const char *hex, uint8_t *out, size_t n) {
    if (strlen(hex) != 2 * n) return -1;
    for (size_t i = 0; i < n; i++) {
        unsigned v = 0;
        for (int j = 0; j < 2; j++) {
            char ch = (char)tolower((unsigned char)hex[2 * i + (size_t)j]);
            if (ch >= '0' && ch <= '9')
                v = v * 16 + (unsigned)(ch - '0');
            else if (ch >= 'a' && ch <= 'f')
                v = v * 16 + (unsigned)(ch - 'a' + 10);
            else
                return -1;
        }
        out[i] = (uint8_t)v;
    }
    return 0;
}

void cfg_hex_encode(const uint8_t *in, size_t n, char *out) {
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * n] = 0;
}

/* What cfg_print writes in place of a secret key. It does not parse as a key: a printed
 * configuration with an inline secret reads back only once the secret is given again. */
#define REDACTED "<redacted>"

static void hexkey_expect(const key_spec *k, char *buf, size_t n) {
    (void)k;
    snprintf(buf, n, "%d hex digits", 2 * CFG_KEYLEN);
}

/* T_HEXKEY keys are optional: `size` is the offset of the flag that says the key was given. */
static int *hexkey_flag(const key_spec *k, void *base) {
    return (int *)((char *)base + k->size);
}
static int hexkey_given(const key_spec *k, const void *base) {
    return *(const int *)((const char *)base + k->size);
}

static int hexkey_parse(const key_spec *k, void *base, char *field, verdict *v) {
    uint8_t key[CFG_KEYLEN];
    if (k->secret && strcmp(v->val, REDACTED) == 0)
        return refuse(v,
                      "the key was redacted when this configuration was printed (expected %s: "
                      "give the key again, or remove this line and set psk_file or "
                      "HETRING_CLUSTER_PSK)",
                      v->exp);
    if (cfg_hex_decode(v->val, key, CFG_KEYLEN)) /* never echo a key value: it may be secret */
        return refuse(v, "malformed key (expected %s)", v->exp);
    memcpy(field, key, CFG_KEYLEN);
    *hexkey_flag(k, base) = 1;
    memset(key, 0, sizeof key);
    return 0;
}

static void hexkey_format(const key_spec *k, const void *base, const char *field, char *out,
                          size_t n) {
    if (!hexkey_given(k, base))
        snprintf(out, n, "%s", "");
    else if (k->secret)
        snprintf(out, n, REDACTED);
    else if (n > 2 * CFG_KEYLEN)
        cfg_hex_encode((const uint8_t *)field, CFG_KEYLEN, out);
}

static void device_expect(const key_spec *k, char *buf, size_t n) {
    (void)k;
    snprintf(buf, n, "cpu or cuda:N");
}

static int device_parse(const key_spec *k, void *base, char *field, verdict *v) {
    (void)k, (void)base;
    long d;
    if (strcmp(v->val, "cpu") == 0)
        d = -1;
    else if (strncmp(v->val, "cuda:", 5) != 0 || cfg_parse_long(v->val + 5, &d) || d < 0 || d >= 64)
        return refuse(v, "unknown device '%s' (expected %s)", v->val, v->exp);
    *(long *)field = d;
    return 0;
}

static void device_format(const key_spec *k, const void *base, const char *field, char *out,
                          size_t n) {
    (void)k, (void)base;
    long d = *(const long *)field;
    if (d < 0)
        snprintf(out, n, "cpu");
    else
        snprintf(out, n, "cuda:%ld", d);
}

/* ---------------------------------------------------------------- paths */

/* A T_PATH value written relative is taken relative to `base`, an absolute directory: the INI
 * file's for values from the file, the current one for overrides. The field then holds an
 * absolute path, so the configuration means the same files from any working directory, and
 * what cfg_print writes reads back the same from anywhere. An empty value (unset) stays
 * empty; "{id}" in key_file is expanded later and survives. */
static int resolve_path(const char *base, char *field, size_t size, char *why, size_t whylen) {
    if (!field[0] || field[0] == '/') return 0;
    const char *rel = field;
    while (rel[0] == '.' && rel[1] == '/') /* "./x" is "x" */
        for (rel += 2; *rel == '/';) rel++;
    char joined[PATH_MAX + CFG_PATH];
    int n = snprintf(joined, sizeof joined, "%s%s%s", base,
                     base[0] && base[strlen(base) - 1] == '/' ? "" : "/", rel);
    if (n < 0 || (size_t)n >= size) {
        snprintf(why, whylen, "'%s' relative to %s is too long (expected at most %zu characters)",
                 field, base, size - 1);
        return -1;
    }
    memcpy(field, joined, (size_t)n + 1);
    return 0;
}

/* The absolute directory of `file` (the file need not be named absolutely) into `out`, which
 * holds PATH_MAX bytes (realpath's size). */
static void dir_of(const char *file, char *out, size_t n) {
    char dir[PATH_MAX];
    const char *slash = strrchr(file, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else
        snprintf(dir, sizeof dir, "%.*s", slash == file ? 1 : (int)(slash - file), file);
    if (!realpath(dir, out)) snprintf(out, n, "%s", dir);
}

/* The current directory, for overrides. */
static void current_dir(char *out, size_t n) {
    if (!getcwd(out, n)) snprintf(out, n, ".");
}

/* ---------------------------------------------------------------- the table */

typedef struct {
    void (*expect)(const key_spec *k, char *buf, size_t n);
    int (*parse)(const key_spec *k, void *base, char *field, verdict *v);
    void (*format)(const key_spec *k, const void *base, const char *field, char *out, size_t n);
} value_type;

static const value_type value_types[] = {
    [T_STR] = {str_expect, str_parse, str_format},
    [T_PATH] = {path_expect, str_parse, str_format},
    [T_INT] = {int_expect, int_parse, int_format},
    [T_AUTOINT] = {autoint_expect, autoint_parse, autoint_format},
    [T_DBL] = {dbl_expect, dbl_parse, dbl_format},
    [T_ENUM] = {enum_expect, enum_parse, enum_format},
    [T_U64] = {u64_expect, u64_parse, u64_format},
    [T_LAYERS] = {layers_expect, layers_parse, layers_format},
    [T_HEXKEY] = {hexkey_expect, hexkey_parse, hexkey_format},
    [T_DEVICE] = {device_expect, device_parse, device_format},
    [T_PHASES] = {phases_expect, phases_parse, phases_format},
};

/* What key `k` expects, for messages and the reference file. */
static void expected(const key_spec *k, char *buf, size_t n) {
    value_types[k->type].expect(k, buf, n);
}

/* Parse `val` into the field of `k` inside `base`. On failure write the reason to `why`. */
static int set_value(const key_spec *k, void *base, const char *val, char *why, size_t whylen) {
    char exp[256];
    expected(k, exp, sizeof exp);
    verdict v = {.val = val, .exp = exp, .why = why, .whylen = whylen};
    return value_types[k->type].parse(k, base, (char *)base + k->off, &v);
}

/* Is an optional key (a T_HEXKEY) unset? Every other key always has a value. */
static int value_unset(const key_spec *k, const void *base) {
    return k->type == T_HEXKEY && !hexkey_given(k, base);
}

/* Text of a field's current value, for printing. */
static void format_value(const key_spec *k, const void *base, char *out, size_t n) {
    value_types[k->type].format(k, base, (const char *)base + k->off, out, n);
}

/* ================================================================ defaults and nodes */

static void apply_defaults(const key_spec *keys, int n, void *base) {
    char why[256];
    for (int i = 0; i < n; i++)
        if (keys[i].def && set_value(&keys[i], base, keys[i].def, why, sizeof why) != 0)
            abort(); /* a bad default in the table above is a programming error */
}

void cfg_init(cfg *c) {
    memset(c, 0, sizeof *c);
    apply_defaults(g_keys, N_GKEYS, c);
}

void cfg_free(cfg *c) {
    if (!c) return;
    free(c->nodes);
    c->nodes = NULL;
    c->n_nodes = 0;
    /* the inline PSK is a secret: wipe it (volatile so the stores are not elided) */
    volatile uint8_t *p = c->psk;
    for (size_t i = 0; i < sizeof c->psk; i++) p[i] = 0;
    c->has_psk = 0;
}

int cfg_node_index(const cfg *c, long id) {
    for (int i = 0; i < c->n_nodes; i++)
        if (c->nodes[i].id == id) return i;
    return -1;
}

static cfg_node *add_node(cfg *c, long id, int line) {
    cfg_node *grown = realloc(c->nodes, sizeof *grown * (size_t)(c->n_nodes + 1));
    if (!grown) return NULL;
    c->nodes = grown;
    cfg_node *n = &c->nodes[c->n_nodes++];
    memset(n, 0, sizeof *n);
    apply_defaults(n_keys, N_NKEYS, n);
    n->id = id;
    n->line = line;
    return n;
}

static int cmp_node_id(const void *a, const void *b) {
    long x = ((const cfg_node *)a)->id, y = ((const cfg_node *)b)->id;
    return (x > y) - (x < y);
}

/* ================================================================ INI parsing */

#define CFG_MAX_LINE 16384 /* characters of an INI line, its end of line not counted */

typedef struct {
    cfg *c;
    FILE *f;
    const char *path;
    char dir[PATH_MAX]; /* absolute directory of path: relative T_PATH values start there */
    int line;           /* line most recently handed to inih */
    int section;        /* -1 none, 0 global section, 1 node */
    cfg_node *node;     /* current node section */
    long node_id;       /* id of the current node section */
    int failed;         /* an error was recorded */
    hr_status status;   /* status of the first error */
    char *err;
    size_t errlen;
} parse_state;

static void parse_error(parse_state *ps, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void parse_error(parse_state *ps, const char *fmt, ...) {
    if (ps->failed) return;
    ps->failed = 1;
    ps->status = HR_ERR_CONFIG;
    int o = snprintf(ps->err, ps->errlen, "%s:%d: ", ps->path, ps->line);
    if (o < 0 || (size_t)o >= ps->errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ps->err + o, ps->errlen - (size_t)o, fmt, ap);
    va_end(ap);
}

static int known_section(const char *name) {
    return strcmp(name, "cluster") == 0 || strcmp(name, "train") == 0 ||
           strcmp(name, "controller") == 0;
}

/* A section header was read: check it and open a node when it is [node.ID]. */
static void on_section(parse_state *ps, const char *name) {
    if (known_section(name)) {
        ps->section = 0;
        ps->node = NULL;
        return;
    }
    if (strncmp(name, "node.", 5) == 0) {
        long id;
        if (cfg_parse_long(name + 5, &id) || id < 0 || id > 65535 ||
            !isdigit((unsigned char)name[5])) {
            parse_error(ps,
                        "bad node id in [%s] (expected [node.N] with N an integer in [0, 65535])",
                        name);
            return;
        }
        int prev = cfg_node_index(ps->c, id);
        if (prev >= 0) {
            parse_error(ps,
                        "duplicate node id %ld: [node.%ld] was already defined at line %d "
                        "(expected each node id once)",
                        id, id, ps->c->nodes[prev].line);
            return;
        }
        if (ps->c->n_nodes >= CFG_MAX_NODES) {
            parse_error(ps, "too many nodes (expected at most %d)", CFG_MAX_NODES);
            return;
        }
        ps->node = add_node(ps->c, id, ps->line);
        if (!ps->node) {
            parse_error(ps, "out of memory");
            ps->status = HR_ERR_NOMEM;
            return;
        }
        ps->node_id = id;
        ps->section = 1;
        return;
    }
    parse_error(ps, "unknown section [%s] (expected [cluster], [train], [controller] or [node.ID])",
                name);
}

/* inih line reader: hands over one line at a time so that we know the line number. */
static char *read_line(char *str, int num, void *stream) {
    parse_state *ps = stream;
    if (ps->failed) return NULL;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len = getline(&line, &cap, ps->f);
    if (len < 0) {
        free(line);
        return NULL;
    }
    ps->line++;
    ps->c->n_lines = ps->line;
    if (len >= num - 1) {
        free(line);
        parse_error(ps, "line is too long (expected at most %d characters)", num - 3);
        return NULL;
    }
    const char *nul = memchr(line, 0, (size_t)len); /* inih would stop the line there */
    if (nul) {
        parse_error(ps, "NUL byte in column %ld (expected text; is this a binary file?)",
                    (long)(nul - line) + 1);
        free(line);
        return NULL;
    }
    memcpy(str, line, (size_t)len + 1);
    /* Section headers never reach the handler, so note them here. */
    const char *p = line;
    if (ps->line == 1 && (unsigned char)p[0] == 0xEF && (unsigned char)p[1] == 0xBB &&
        (unsigned char)p[2] == 0xBF)
        p += 3;
    while (isspace((unsigned char)*p)) p++;
    if (*p == '[') {
        const char *close = strchr(p, ']');
        if (close) {
            char name[256];
            snprintf(name, sizeof name, "%.*s", (int)(close - p - 1), p + 1);
            on_section(ps, name);
        }
    }
    free(line);
    return ps->failed ? NULL : str;
}

static const key_spec *find_key(const key_spec *keys, int n, const char *section, const char *key,
                                int *idx) {
    for (int i = 0; i < n; i++)
        if (strcmp(keys[i].section, section) == 0 && strcmp(keys[i].key, key) == 0) {
            *idx = i;
            return &keys[i];
        }
    return NULL;
}

static void list_keys(const key_spec *keys, int n, const char *section, char *out, size_t len) {
    size_t o = 0;
    out[0] = 0;
    for (int i = 0; i < n && o < len; i++)
        if (strcmp(keys[i].section, section) == 0)
            o += (size_t)snprintf(out + o, len - o, "%s%s", o ? ", " : "", keys[i].key);
}

static int on_key(void *user, const char *section, const char *name, const char *value) {
    parse_state *ps = user;
    if (ps->failed) return 0;
    const key_spec *keys = ps->section == 1 ? n_keys : g_keys;
    int n = ps->section == 1 ? N_NKEYS : N_GKEYS;
    const char *sec = ps->section == 1 ? "node" : section;
    if (ps->section < 0) {
        parse_error(ps, "key '%s' outside any section (expected a [section] header first)", name);
        return 0;
    }
    int idx;
    const key_spec *k = find_key(keys, n, sec, name, &idx);
    if (!k) {
        char list[1024];
        list_keys(keys, n, sec, list, sizeof list);
        parse_error(ps, "unknown key '%s' in [%s] (expected one of %s)", name, section, list);
        return 0;
    }
    int *lines = ps->section == 1 ? ps->node->key_line : ps->c->key_line;
    if (lines[idx]) {
        parse_error(ps, "duplicate key '%s' in [%s], first set at line %d (expected each key once)",
                    name, section, lines[idx]);
        return 0;
    }
    char why[512];
    void *base = ps->section == 1 ? (void *)ps->node : (void *)ps->c;
    if (set_value(k, base, value, why, sizeof why) ||
        (k->type == T_PATH &&
         resolve_path(ps->dir, (char *)base + k->off, k->size, why, sizeof why))) {
        parse_error(ps, "%s: %s", name, why);
        return 0;
    }
    lines[idx] = ps->line;
    return 1;
}

/* Parse the INI in `f`, named `path` in messages; relative paths resolve against `dir`. */
static hr_status parse_stream(cfg *c, FILE *f, const char *path, const char *dir, char *err,
                              size_t errlen) {
    parse_state ps = {.c = c, .f = f, .path = path, .section = -1, .err = err, .errlen = errlen};
    snprintf(ps.dir, sizeof ps.dir, "%s", dir);
    /* A line that starts with whitespace would otherwise continue the previous value; we want
     * indented keys to be keys. This inih setting is process-wide and we never want it on. */
    ini_allow_multiline = false;
    /* Debian's libinih sizes its line buffer from ini_max_line at run time (the compiled-in
     * INI_MAX_LINE is 200); read_line refuses a longer line with its file:line. */
    ini_max_line = CFG_MAX_LINE + 3;
    int rc = ini_parse_stream(read_line, &ps, on_key, &ps);
    if (ps.failed) return ps.status;
    if (rc > 0) {
        ps.line = rc;
        parse_error(&ps, "malformed line (expected '[section]', 'key = value' or a ; comment)");
        return HR_ERR_CONFIG;
    }
    if (rc < 0) return hr_fail(err, errlen, HR_ERR_NOMEM, "%s: out of memory while parsing", path);
    return HR_OK;
}

hr_status cfg_parse_file(cfg *c, const char *path, char *err, size_t errlen) {
    snprintf(c->path, sizeof c->path, "%s", path);
    FILE *f = fopen(path, "r");
    if (!f)
        return hr_fail(err, errlen, HR_ERR_IO, "%s: cannot open: %s (expected a readable INI file)",
                       path, strerror(errno));
    char dir[PATH_MAX];
    dir_of(path, dir, sizeof dir);
    hr_status st = parse_stream(c, f, path, dir, err, errlen);
    fclose(f);
    return st;
}

hr_status cfg_parse_text(cfg *c, const char *text, const char *name, char *err, size_t errlen) {
    snprintf(c->path, sizeof c->path, "%s", name);
    size_t len = strlen(text);
    /* fmemopen of zero bytes fails on some C libraries: an empty text is an empty file */
    FILE *f = fmemopen(len ? (void *)text : (void *)"\n", len ? len : 1, "r");
    if (!f) return hr_fail(err, errlen, HR_ERR_NOMEM, "%s: cannot read: %s", name, strerror(errno));
    char dir[PATH_MAX];
    current_dir(dir, sizeof dir);
    hr_status st = parse_stream(c, f, name, dir, err, errlen);
    fclose(f);
    return st;
}

/* ================================================================ overrides */

static void env_name(const char *section, long node_id, const char *key, char *out, size_t n) {
    size_t o;
    if (node_id >= 0)
        o = (size_t)snprintf(out, n, "HETRING_NODE_%ld_", node_id);
    else
        o = (size_t)snprintf(out, n, "HETRING_%s_", section);
    snprintf(out + o, n - o, "%s", key);
    for (char *p = out; *p; p++) *p = (char)toupper((unsigned char)*p);
}

/* Set key `k` of `base` (c, or one of its nodes) from an override; its line becomes
 * CFG_LINE_OVERRIDE, so that nothing blames the file for the value. */
static hr_status apply_one(cfg *c, const key_spec *k, void *base, const char *src, const char *val,
                           char *err, size_t errlen) {
    char why[512], cwd[PATH_MAX];
    if (k->type == T_PATH) current_dir(cwd, sizeof cwd); /* an override is the user's own */
    if (set_value(k, base, val, why, sizeof why) ||
        (k->type == T_PATH && resolve_path(cwd, (char *)base + k->off, k->size, why, sizeof why)))
        return hr_fail(err, errlen, HR_ERR_CONFIG, "%s: %s", src, why);
    if (base == (void *)c)
        c->key_line[k - g_keys] = CFG_LINE_OVERRIDE;
    else
        ((cfg_node *)base)->key_line[k - n_keys] = CFG_LINE_OVERRIDE;
    return HR_OK;
}

hr_status cfg_apply_env(cfg *c, char *err, size_t errlen) {
    char name[128], src[160];
    for (int i = 0; i < N_GKEYS; i++) {
        env_name(g_keys[i].section, -1, g_keys[i].key, name, sizeof name);
        const char *v = getenv(name);
        if (!v) continue;
        snprintf(src, sizeof src, "environment %s", name);
        HR_CHECK(apply_one(c, &g_keys[i], c, src, v, err, errlen));
    }
    for (int j = 0; j < c->n_nodes; j++)
        for (int i = 0; i < N_NKEYS; i++) {
            env_name("node", c->nodes[j].id, n_keys[i].key, name, sizeof name);
            const char *v = getenv(name);
            if (!v) continue;
            snprintf(src, sizeof src, "environment %s", name);
            HR_CHECK(apply_one(c, &n_keys[i], &c->nodes[j], src, v, err, errlen));
        }
    /* A misspelt override must not be silently ignored. */
    for (char **e = environ; *e; e++) {
        const char *s = *e;
        const char *eq = strchr(s, '=');
        if (!eq || strncmp(s, "HETRING_", 8) != 0) continue;
        size_t len = (size_t)(eq - s);
        int ours = 0, known = 0;
        static const char *const prefixes[] = {"HETRING_CLUSTER_", "HETRING_TRAIN_",
                                               "HETRING_CONTROLLER_", "HETRING_NODE_"};
        for (int p = 0; p < 4; p++)
            if (strncmp(s, prefixes[p], strlen(prefixes[p])) == 0) ours = 1;
        if (!ours) continue;
        for (int i = 0; i < N_GKEYS && !known; i++) {
            env_name(g_keys[i].section, -1, g_keys[i].key, name, sizeof name);
            known = strlen(name) == len && strncmp(name, s, len) == 0;
        }
        for (int j = 0; j < c->n_nodes && !known; j++)
            for (int i = 0; i < N_NKEYS && !known; i++) {
                env_name("node", c->nodes[j].id, n_keys[i].key, name, sizeof name);
                known = strlen(name) == len && strncmp(name, s, len) == 0;
            }
        if (!known)
            return hr_fail(err, errlen, HR_ERR_CONFIG,
                           "environment %.*s: unknown setting (expected HETRING_<SECTION>_<KEY> "
                           "for a key of reference.ini, or HETRING_NODE_<ID>_<KEY> for a node in "
                           "the file)",
                           (int)len, s);
    }
    return HR_OK;
}

hr_status cfg_set(cfg *c, const char *assignment, char *err, size_t errlen) {
    const char *eq = strchr(assignment, '=');
    const char *dot = strchr(assignment, '.');
    if (!eq || !dot || dot > eq)
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "--set %s: malformed (expected SECTION.KEY=VALUE, e.g. train.lr=0.1)",
                       assignment);
    char section[64], key[64], src[200];
    snprintf(section, sizeof section, "%.*s", (int)(dot - assignment), assignment);
    const char *kstart = dot + 1;
    /* node.ID.key */
    long node_id = -1;
    if (strcmp(section, "node") == 0) {
        const char *dot2 = strchr(kstart, '.');
        char idbuf[32];
        if (!dot2 || dot2 > eq)
            return hr_fail(err, errlen, HR_ERR_CONFIG,
                           "--set %s: malformed (expected node.ID.KEY=VALUE)", assignment);
        snprintf(idbuf, sizeof idbuf, "%.*s", (int)(dot2 - kstart), kstart);
        if (cfg_parse_long(idbuf, &node_id) || cfg_node_index(c, node_id) < 0)
            return hr_fail(err, errlen, HR_ERR_CONFIG,
                           "--set %s: no node '%s' in the configuration", assignment, idbuf);
        kstart = dot2 + 1;
    }
    snprintf(key, sizeof key, "%.*s", (int)(eq - kstart), kstart);
    snprintf(src, sizeof src, "--set %s", assignment);
    int idx;
    const key_spec *k = node_id >= 0 ? find_key(n_keys, N_NKEYS, "node", key, &idx)
                                     : find_key(g_keys, N_GKEYS, section, key, &idx);
    if (!k)
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "--set %s: unknown key '%s' in [%s] (expected a key of reference.ini)",
                       assignment, key, section);
    void *base = node_id >= 0 ? (void *)&c->nodes[cfg_node_index(c, node_id)] : (void *)c;
    return apply_one(c, k, base, src, eq + 1, err, errlen);
}

/* ================================================================ validation */

int cfg_key_line(const cfg *c, int node_idx, const char *key) {
    int idx;
    if (node_idx < 0) {
        for (int i = 0; i < N_GKEYS; i++)
            if (strcmp(g_keys[i].key, key) == 0) return c->key_line[i];
        return 0;
    }
    if (node_idx >= c->n_nodes || !find_key(n_keys, N_NKEYS, "node", key, &idx)) return 0;
    return c->nodes[node_idx].key_line[idx];
}

/* Line to blame for a global key: where it was set, else line 1. */
static int blame(const cfg *c, const char *key) {
    int l = cfg_key_line(c, -1, key);
    return l > 0 ? l : 1;
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
            expected(find_key(n_keys, N_NKEYS, "node", missing, &idx), exp, sizeof exp);
            return hr_fail(err, errlen, HR_ERR_CONFIG,
                           "%s:%d: [node.%ld] is missing required key '%s' (expected %s)", f,
                           n->line, n->id, missing, exp);
        }
        for (int j = 0; j < i; j++)
            if (c->nodes[j].port == n->port && strcasecmp(c->nodes[j].host, n->host) == 0)
                return hr_fail(err, errlen, HR_ERR_CONFIG,
                               "%s:%d: [node.%ld] uses %s:%ld, already used by [node.%ld] at line "
                               "%d (expected a distinct host:port per node)",
                               f, n->line, n->id, n->host, n->port, c->nodes[j].id,
                               c->nodes[j].line);
    }
    return HR_OK;
}

/* min_nodes is a majority, so two sides of a partition can never both train. */
static hr_status check_quorum(const cfg *c, const char *f, char *err, size_t errlen) {
    long majority = c->n_nodes / 2 + 1;
    if (c->min_nodes != 0 && (c->min_nodes < majority || c->min_nodes > c->n_nodes))
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "%s:%d: min_nodes = %ld with %d nodes (expected 0 for a majority, or %ld "
                       "to %d: a smaller quorum would let both sides of a split train)",
                       f, blame(c, "min_nodes"), c->min_nodes, c->n_nodes, majority, c->n_nodes);
    return HR_OK;
}

long cfg_quorum(const cfg *c) {
    return c->min_nodes ? c->min_nodes : c->n_nodes / 2 + 1;
}

/* min_batch and max_batch leave room for a split of global_batch over the nodes, from every
 * node down to a quorum (the smallest view that trains). */
static hr_status check_batch_bounds(const cfg *c, const char *f, char *err, size_t errlen) {
    long nn = c->n_nodes, nq = cfg_quorum(c);
    if (c->global_batch < nn * c->min_batch)
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "%s:%d: global_batch = %ld is smaller than %ld nodes x min_batch %ld = %ld "
                       "(expected global_batch >= %ld)",
                       f, blame(c, "global_batch"), c->global_batch, nn, c->min_batch,
                       nn * c->min_batch, nn * c->min_batch);
    if (c->max_batch && c->max_batch < c->min_batch)
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "%s:%d: max_batch = %ld is below min_batch = %ld (expected max_batch >= "
                       "min_batch, or 0 for no limit)",
                       f, blame(c, "max_batch"), c->max_batch, c->min_batch);
    if (c->max_batch && c->max_batch * nq < c->global_batch)
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "%s:%d: max_batch = %ld with %ld nodes cannot cover global_batch = %ld "
                       "(expected max_batch >= %ld%s)",
                       f, blame(c, "max_batch"), c->max_batch, nq, c->global_batch,
                       (c->global_batch + nq - 1) / nq,
                       nq < nn ? ": a view may shrink to the quorum, min_nodes" : "");
    return HR_OK;
}

/* There is something to train, and the mlp has its layers. */
static hr_status check_training(const cfg *c, const char *f, char *err, size_t errlen) {
    if (c->epochs == 0 && c->iterations == 0)
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "%s:%d: nothing to train (expected epochs >= 1 or iterations >= 1)", f,
                       blame(c, cfg_key_line(c, -1, "iterations") ? "iterations" : "epochs"));
    if (c->model == CFG_MODEL_MLP && c->n_layers < 2)
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "%s:%d: the mlp needs layers (expected e.g. layers = 784,256,10)", f,
                       blame(c, "layers"));
    return HR_OK;
}

/* Security has the keys it needs. The default is encrypt when keys are configured, never a
 * silent none: this is where security = auto resolves. */
static hr_status check_security(cfg *c, const char *f, char *err, size_t errlen) {
    int have_identity = c->key_file[0] != 0;
    int have_psk = c->psk_file[0] != 0 || c->has_psk;
    if (c->security == CFG_SEC_AUTO) {
        if (!have_identity && !have_psk)
            return hr_fail(err, errlen, HR_ERR_CONFIG,
                           "%s:%d: security is not set and no keys are configured (expected "
                           "security = none for unprotected links, or key_file with a pubkey per "
                           "node, or psk_file)",
                           f, blame(c, "security"));
        c->security = CFG_SEC_ENCRYPT;
    }
    if (c->security == CFG_SEC_NONE) return HR_OK;
    if (!have_identity && !have_psk)
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "%s:%d: security = %s needs keys (expected key_file with a pubkey per "
                       "node, or psk_file)",
                       f, blame(c, "security"), cfg_security_name(c->security));
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

hr_status cfg_validate(cfg *c, char *err, size_t errlen) {
    const char *f = c->path[0] ? c->path : "<config>";
    HR_CHECK(check_nodes(c, f, err, errlen));
    HR_CHECK(check_quorum(c, f, err, errlen));
    HR_CHECK(check_batch_bounds(c, f, err, errlen));
    HR_CHECK(check_training(c, f, err, errlen));
    HR_CHECK(check_security(c, f, err, errlen));
    qsort(c->nodes, (size_t)c->n_nodes, sizeof *c->nodes, cmp_node_id); /* id order from here */
    return HR_OK;
}

hr_status cfg_load(cfg *c, const char *path, char *err, size_t errlen) {
    hr_status st;
    cfg_init(c);
    HR_CHECK_GOTO(cfg_parse_file(c, path, err, errlen), st, fail);
    HR_CHECK_GOTO(cfg_apply_env(c, err, errlen), st, fail);
    HR_CHECK_GOTO(cfg_validate(c, err, errlen), st, fail);
    return HR_OK;
fail:
    cfg_free(c);
    return st;
}

/* ================================================================ printing */

static void print_section(const key_spec *keys, int n, const char *section, const void *base,
                          FILE *out) {
    char val[1024];
    for (int i = 0; i < n; i++) {
        if (strcmp(keys[i].section, section) != 0) continue;
        if (value_unset(&keys[i], base)) { /* as in reference.ini: an empty key is malformed */
            fprintf(out, ";%s =\n", keys[i].key);
            continue;
        }
        format_value(&keys[i], base, val, sizeof val);
        fprintf(out, "%s = %s\n", keys[i].key, val);
    }
}

void cfg_print(const cfg *c, FILE *out) {
    static const char *const sections[] = {"cluster", "train", "controller"};
    fprintf(out, "; effective configuration of %s (defaults, file, environment, command line)\n",
            c->path);
    for (int s = 0; s < 3; s++) {
        fprintf(out, "\n[%s]\n", sections[s]);
        print_section(g_keys, N_GKEYS, sections[s], c, out);
    }
    for (int i = 0; i < c->n_nodes; i++) {
        fprintf(out, "\n[node.%ld]\n", c->nodes[i].id);
        print_section(n_keys, N_NKEYS, "node", &c->nodes[i], out);
    }
}

void cfg_print_reference(FILE *out) {
    static const char *const sections[] = {"cluster", "train", "controller", "node"};
    fprintf(out,
            "; reference.ini: every key hetring reads, with its default and its range.\n"
            "; Generated by `hetring config --reference`; tests check that it is current.\n"
            "; Order of precedence: defaults < this file < environment\n"
            "; (HETRING_<SECTION>_<KEY>, HETRING_NODE_<ID>_<KEY>) < --set SECTION.KEY=VALUE.\n");
    for (int s = 0; s < 4; s++) {
        const key_spec *keys = s == 3 ? n_keys : g_keys;
        int n = s == 3 ? N_NKEYS : N_GKEYS;
        if (s == 3)
            fprintf(out, "\n; One [node.ID] section per peer, ID an integer in [0, 65535].\n"
                         "; Ring order is ascending ID.\n[node.0]\n");
        else
            fprintf(out, "\n[%s]\n", sections[s]);
        for (int i = 0; i < n; i++) {
            if (strcmp(keys[i].section, sections[s]) != 0) continue;
            char exp[256];
            expected(&keys[i], exp, sizeof exp);
            fprintf(out, "; %s\n; expected: %s; default: %s\n", keys[i].help, exp,
                    keys[i].def                ? (keys[i].def[0] ? keys[i].def : "(empty)")
                    : keys[i].type == T_HEXKEY ? "(none)"
                                               : "(required)");
            if (strcmp(keys[i].key, "security") == 0) /* so that this file runs on loopback */
                fprintf(out, "; this file sets none so that it runs as is on loopback\n"
                             "security = none\n");
            else if (keys[i].def)
                fprintf(out, "%s = %s\n", keys[i].key, keys[i].def);
            else if (strcmp(keys[i].key, "host") == 0)
                fprintf(out, "host = 127.0.0.1\n");
            else if (strcmp(keys[i].key, "port") == 0)
                fprintf(out, "port = 7000\n");
            else
                fprintf(out, ";%s =\n", keys[i].key);
        }
    }
}

#define NAME_OF(table, v)                                                                          \
    ((v) >= 0 && (size_t)(v) < sizeof(table) / sizeof(table)[0] ? (table)[v] : "?")

const char *cfg_security_name(int v) {
    static const char *const names[] = {"auto", "none", "auth", "encrypt"};
    return NAME_OF(names, v);
}
const char *cfg_policy_name(int v) {
    static const char *const names[] = {"static", "proportional", "pid", "model", "epoch"};
    return NAME_OF(names, v);
}
const char *cfg_model_name(int v) {
    static const char *const names[] = {"linreg", "softmax", "mlp", "cnn"};
    return NAME_OF(names, v);
}
const char *cfg_dataset_name(int v) {
    static const char *const names[] = {"synthetic", "synthetic-rgb", "synthetic-regression",
                                        "mnist",     "cifar10",       "csv"};
    return NAME_OF(names, v);
}
