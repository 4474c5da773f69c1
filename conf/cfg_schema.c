/*
 * cfg_schema.c: the schema, one table of keys per section kind ([cluster], [train] and
 * [controller] share one; [node.ID] has its own). Each row names its field, value type, range,
 * default and help line; parsing, overrides, validation and printing all walk these tables.
 */
#include "conf/cfg_internal.h"

#include <stddef.h>
#include <string.h>

#define G(f)        offsetof(cfg, f)
#define N(f)        offsetof(cfg_node, f)
#define BIG         1e12
#define SEC_CHOICES "auto|none|auth|encrypt"

const key_spec cfg_gkeys[] = {
    {"cluster", "name", T_STR, G(name), CFG_STR, 0, 0, NULL, "hetring", 0,
     "cluster name; peers with another name are refused in the handshake"},
    {"cluster", "security", T_ENUM, G(security), 0, 0, 0, SEC_CHOICES, "auto", 0,
     "peer links: auto = encrypt when keys are configured; none must be asked for"},
    {"cluster", "key_file", T_PATH, G(key_file), CFG_PATH, 0, 0, NULL, "", 0,
     "this node's identity secret key (hetring keygen); {id} becomes the node id"},
    {"cluster", "psk_file", T_PATH, G(psk_file), CFG_PATH, 0, 0, NULL, "", 0,
     "cluster pre-shared key file (32 bytes as 64 hex digits), instead of identity keys"},
    {"cluster", "psk", T_HEXKEY, G(psk), 0, 0, 0, NULL, NULL, 1,
     "inline pre-shared key, 64 hex digits; prefer psk_file or HETRING_CLUSTER_PSK"},
    {"cluster", "connect_timeout", T_DBL, G(connect_timeout), 0, 0.1, 3600, NULL, "30", 0,
     "seconds to keep retrying connects while the ring forms (host name lookups included), and "
     "to wait for every member's NCCL set-up in a view"},
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
    {"cluster", "wire", T_ENUM, G(wire), 0, 0, 0, "fp32|bf16|powersgd|auto", "fp32", 0,
     "the gradient on the wire: fp32, or bf16 (half the bytes; each hop adds in float32 and "
     "sends bf16, every node gets the same bits, and what a node's rounding dropped is added "
     "to its next gradient; in buckets during backward where bucket_bytes has them overlap), "
     "or powersgd (each gradient matrix at rank powersgd_rank, with the same error feedback), "
     "or auto (fp32 until the view's all-reduce is measured, then powersgd where the link is "
     "slower than wire_auto_gbit); bf16, powersgd and auto go round the TCP ring, powersgd "
     "after the compute"},
    {"cluster", "powersgd_rank", T_INT, G(powersgd_rank), 0, 1, CFG_PSGD_RANK_MAX, NULL, "4", 0,
     "wire = powersgd: the rank r of each matrix's approximation (P, rows x r, and Q, cols x r, "
     "go on the wire instead of rows x cols floats); matrices it would not halve go as fp32"},
    {"cluster", "wire_auto_gbit", T_DBL, G(wire_auto_gbit), 0, 1e-6, 1e6, NULL, "2", 0,
     "wire = auto: powersgd where the view's measured all-reduce of 1 MiB or more moves less "
     "than this many Gbit/s (bus bandwidth, as bench allreduce reports it)"},
    {"cluster", "segment_bytes", T_INT, G(segment_bytes), 0, 0, 1 << 30, NULL, "0", 0,
     "all-reduce pipeline segment in bytes, 64 at least; 0 uses the measured default"},
    {"cluster", "tree_bytes", T_INT, G(tree_bytes), 0, 0, 1 << 20, NULL, "65536", 0,
     "all-reduces of at most this many bytes (and one segment) go over a binary tree of extra "
     "links in views of 4 nodes or more, where its 2*depth hops are fewer than the ring's; "
     "0: ring only; with link_probe = on each view may take a lower cut-off from its links"},
    {"cluster", "link_probe", T_ENUM, G(link_probe), 0, 0, 0, "off|on", "on", 0,
     "on: at each view's first step the members time ring all-reduces of two sizes (a hop's "
     "latency, a byte's time), gather the figures and choose the tree's cut-off (at most "
     "tree_bytes) and, with bucket_bytes = auto, the bucket size, the same on every node, "
     "logged once a view; off: tree_bytes and 1 MiB buckets as they are"},

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
     "training set size: a synthetic set's; the training files' (mnist, cifar10, csv) first "
     "samples when given (more than they hold is an error), else all of them"},
    {"train", "eval_samples", T_INT, G(eval_samples), 0, 0, 1e9, NULL, "10000", 0,
     "held-out set size: a synthetic set's; a held-out file's (mnist, cifar10, a CSV "
     "directory's test.csv) first eval_samples when given (more than it holds is an error), "
     "else all of it; one CSV file's last rows, at most a fifth of them (the default is cut to "
     "that)"},
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
     "checkpoint file, written atomically; resumed from when it exists; {id} becomes the "
     "node id, so that nodes sharing a disk each keep their own (and their own error-feedback "
     "residual with wire = bf16, powersgd or auto); empty = none"},
    {"train", "checkpoint_interval", T_INT, G(checkpoint_interval), 0, 0, BIG, NULL, "0", 0,
     "iterations between checkpoints; 0 writes one at the end only"},
    {"train", "hash_interval", T_INT, G(hash_interval), 0, 1, BIG, NULL, "10", 0,
     "iterations between replica hash checks (all nodes must hold identical parameters)"},
    {"train", "bucket_bytes", T_AUTOINT, G(bucket_bytes), 0, 0, 1 << 30, NULL, "auto", 0,
     "gradient bucket: each is all-reduced as soon as backward has it, overlapping the rest "
     "of backward; 0 all-reduces once after backward; auto: buckets of 1 MiB (or the size "
     "link_probe chooses) when every node has a core to spare for its communication thread "
     "or the measured all-reduce mostly waits on the wire, else 0"},
    {"train", "nonfinite", T_ENUM, G(nonfinite), 0, 0, 0, "error|skip", "error", 0,
     "a step whose global gradient or loss is not finite (NaN, inf): error stops every node, "
     "naming the iteration and the nodes whose share was not finite; skip drops its update "
     "(its samples count as used) and counts it in the metrics"},
    {"train", "nonfinite_limit", T_INT, G(nonfinite_limit), 0, 0, BIG, NULL, "10", 0,
     "with nonfinite = skip: every node stops, naming the iteration, once this many steps in a "
     "row were not finite (a run whose parameters diverged would skip every step left; each "
     "membership view counts anew); 0 = never"},

    {"controller", "policy", T_ENUM, G(policy), 0, 0, 0, "static|proportional|pid|model|epoch",
     "model", 0,
     "batch-size controller; static is the plain BSP baseline. A key below that the policy does "
     "not use, given another value than its default, is refused"},
    {"controller", "interval", T_INT, G(interval), 0, 1, 1e6, NULL, "4", 0,
     "proportional, pid, model: iterations between batch-size decisions"},
    {"controller", "deadband", T_DBL, G(deadband), 0, 0, 1, NULL, "0.05", 0,
     "all but static: no change unless some node's batch would move by more than this fraction"},
    {"controller", "gain", T_DBL, G(gain), 0, 0.01, 2, NULL, "1", 0,
     "all but static: proportional gain; 1 moves straight to the balanced split"},
    {"controller", "ki", T_DBL, G(ki), 0, 0, 10, NULL, "0.05", 0, "pid: integral gain"},
    {"controller", "kd", T_DBL, G(kd), 0, 0, 10, NULL, "0", 0, "pid: derivative gain"},
    {"controller", "min_batch", T_INT, G(min_batch), 0, 1, 1e8, NULL, "1", 0,
     "smallest batch a node is given"},
    {"controller", "max_batch", T_INT, G(max_batch), 0, 0, 1e8, NULL, "0", 0,
     "largest batch a node is given; 0 means global_batch"},
    {"controller", "smoothing", T_DBL, G(smoothing), 0, 0.001, 1, NULL, "0.3", 0,
     "proportional, pid, model: EWMA weight of the newest compute-time sample"},
    {"controller", "rate_limit", T_DBL, G(rate_limit), 0, 0.01, 100, NULL, "1", 0,
     "all but static: largest relative change of one node's batch per decision"},
    {"controller", "forgetting", T_DBL, G(forgetting), 0, 0.5, 1, NULL, "0.9", 0,
     "model: recursive-least-squares forgetting factor"},
    {"controller", "calibrate", T_ENUM, G(calibrate), 0, 0, 0, "off|on", "on", 0,
     "all but static: when a view forms, every node times a few passes and the first split "
     "follows the measured speeds; off (or a node that cannot time itself): the capacity hints"},
};
const int cfg_n_gkeys = (int)(sizeof cfg_gkeys / sizeof cfg_gkeys[0]);

const key_spec cfg_nkeys[] = {
    {"node", "host", T_HOST, N(host), CFG_STR, 0, 0, NULL, NULL, 0,
     "address the node listens on (required)"},
    {"node", "port", T_INT, N(port), 0, 1, 65535, NULL, NULL, 0,
     "TCP port the node listens on (required)"},
    {"node", "device", T_DEVICE, N(device), 0, 0, 0, NULL, "cpu", 0,
     "cpu, or cuda:N: the GPU this node trains on (refused at start where there is none)"},
    {"node", "threads", T_INT, N(threads), 0, 0, 1024, NULL, "1", 0,
     "compute threads: BLAS's (more than OpenBLAS's build runs is an error at start), and wire = "
     "powersgd's products (at most 64); 0 uses every core this process may run on"},
    {"node", "capacity", T_DBL, N(capacity), 0, 1e-6, BIG, NULL, "1", 0,
     "relative speed (cores, FLOPS) for the first batch split when it is not measured "
     "([controller] calibrate); all but policy = static, which gives every node B/N"},
    {"node", "pubkey", T_HEXKEY, N(pubkey), 0, 0, 0, NULL, NULL, 0,
     "pinned identity public key, 64 hex digits from hetring keygen"},
    {"node", "slowdown", T_DBL, N(slowdown), 0, 1, 1000, NULL, "1", 0,
     "emulated heterogeneity: stretch compute by this factor (runs say so)"},
    {"node", "interference", T_PHASES, N(interference), 0, 1, 1000, NULL, "", 0,
     "emulated interference: ITER:FACTOR pairs, e.g. 200:3,400:1"},
};
const int cfg_n_nkeys = (int)(sizeof cfg_nkeys / sizeof cfg_nkeys[0]);

_Static_assert(sizeof cfg_gkeys / sizeof cfg_gkeys[0] <= 64, "cfg.key_line is too small");
_Static_assert(sizeof cfg_nkeys / sizeof cfg_nkeys[0] <= 16, "cfg_node.key_line is too small");

void cfg_list_keys(const key_spec *keys, int n, const char *section, char *out, size_t len) {
    size_t o = 0;
    out[0] = 0;
    for (int i = 0; i < n && o < len; i++)
        if (strcmp(keys[i].section, section) == 0)
            o += (size_t)snprintf(out + o, len - o, "%s%s", o ? ", " : "", keys[i].key);
}

const key_spec *cfg_find_key(const key_spec *keys, int n, const char *section, const char *key,
                             int *idx) {
    for (int i = 0; i < n; i++)
        if (strcmp(keys[i].section, section) == 0 && strcmp(keys[i].key, key) == 0) {
            *idx = i;
            return &keys[i];
        }
    return NULL;
}
