/*
 * cfg.h: the typed cluster configuration and its INI schema.
 *
 * Values apply in the order defaults, INI file, environment (HETRING_<SECTION>_<KEY>, with
 * node sections as HETRING_NODE_<ID>_<KEY>), then command line (cfg_set "section.key=value").
 * Every key lives in one schema table in cfg_schema.c, which drives parsing, range checks, the
 * environment overrides, `hetring config` and the reference file conf/examples/reference.ini.
 *
 * Paths (key_file, psk_file, data_dir, checkpoint) written relative in the file are relative to
 * the file's directory, and relative in an override to the current directory; either way the
 * struct holds them absolute, so a config means the same files from any working directory.
 *
 * Errors have the form "FILE:LINE: what is wrong (what was expected)"; overrides name their
 * source instead of a file ("environment HETRING_TRAIN_LR: ..."). A failed load leaves the
 * struct freed and safe to free again.
 */
#ifndef HR_CFG_H
#define HR_CFG_H

#include "base/hr_status.h"

#include <stdint.h>
#include <stdio.h>

#define CFG_STR           128 /* host names, cluster name */
#define CFG_PATH          512 /* file and directory paths */
#define CFG_MAX_LAYERS    16  /* MLP layer sizes, input and output included */
#define CFG_MAX_PHASES    32  /* interference schedule entries per node */
#define CFG_MAX_NODES     256
#define CFG_KEYLEN        32   /* public keys and pre-shared keys, bytes */
#define CFG_LINE_ENV      (-1) /* key_line of a key the environment set last */
#define CFG_LINE_SET      (-2) /* key_line of a key --set (cfg_set) set last */
#define CFG_AUTO          (-1) /* a numeric key set to "auto": resolved where it is used */
#define CFG_PSGD_RANK_MAX 64   /* powersgd_rank's bound (cluster/powersgd.h's PSGD_MAX_RANK) */

typedef enum { CFG_SEC_AUTO, CFG_SEC_NONE, CFG_SEC_AUTH, CFG_SEC_ENCRYPT } cfg_security;
typedef enum { CFG_BACKEND_AUTO, CFG_BACKEND_TCP, CFG_BACKEND_NCCL } cfg_backend;
typedef enum { CFG_WIRE_FP32, CFG_WIRE_BF16, CFG_WIRE_POWERSGD, CFG_WIRE_AUTO } cfg_wire;
typedef enum { CFG_MODEL_LINREG, CFG_MODEL_SOFTMAX, CFG_MODEL_MLP, CFG_MODEL_CNN } cfg_model;
typedef enum {
    CFG_DATA_SYNTHETIC,            /* image-like classification set, 28x28x1, 10 classes */
    CFG_DATA_SYNTHETIC_RGB,        /* the same at 32x32x3 */
    CFG_DATA_SYNTHETIC_REGRESSION, /* linear target plus Gaussian noise */
    CFG_DATA_MNIST,                /* IDX files (optionally .gz) in data_dir */
    CFG_DATA_CIFAR10,              /* CIFAR-10 binary batches in data_dir */
    CFG_DATA_CSV                   /* data_dir names a CSV file: label first, then features */
} cfg_dataset;
typedef enum { CFG_LR_CONSTANT, CFG_LR_STEP, CFG_LR_COSINE } cfg_lr_schedule;
typedef enum { CFG_NONFINITE_ERROR, CFG_NONFINITE_SKIP } cfg_nonfinite;
typedef enum {
    CFG_POLICY_STATIC,
    CFG_POLICY_PROPORTIONAL,
    CFG_POLICY_PID,
    CFG_POLICY_MODEL,
    CFG_POLICY_EPOCH
} cfg_policy;

/* One step of a node's interference schedule: from iteration `iter` on, compute is stretched
 * by `factor` (replacing the node's slowdown). */
typedef struct {
    long iter;     /* first iteration the factor applies to */
    double factor; /* >= 1 stretches compute, 1 is full speed */
} cfg_phase;

typedef struct {
    long id;                                /* node id; ring order is ascending id */
    char host[CFG_STR];                     /* address the node listens on */
    long port;                              /* TCP port the node listens on */
    long device;                            /* -1 for cpu, N for cuda:N */
    long threads;                           /* BLAS threads; 0 means all cores */
    double capacity;                        /* relative speed hint for the first split */
    uint8_t pubkey[CFG_KEYLEN];             /* pinned identity public key */
    int has_pubkey;                         /* pubkey was given */
    double slowdown;                        /* emulated compute stretch factor, >= 1 */
    cfg_phase interference[CFG_MAX_PHASES]; /* emulated speed changes, ascending iter */
    int n_interference;                     /* entries used in interference[] */
    int line;                               /* line of the [node.ID] header */
    int key_line[16]; /* line each node key was set on, 0 if unset, or CFG_LINE_ENV/_SET */
} cfg_node;

typedef struct {
    /* [cluster] */
    char name[CFG_STR];      /* cluster name, checked in every handshake */
    int security;            /* cfg_security; AUTO resolves during validation */
    char key_file[CFG_PATH]; /* this node's identity secret key; "{id}" is the node id */
    char psk_file[CFG_PATH]; /* cluster pre-shared key file (alternative to identities) */
    uint8_t psk[CFG_KEYLEN]; /* inline pre-shared key; never printed */
    int has_psk;             /* psk was given inline */
    double connect_timeout;  /* seconds for ring formation: lookups and connects */
    double timeout;          /* seconds any blocking I/O may take before the peer is dead */
    int backend;             /* cfg_backend */
    int wire;                /* cfg_wire: the gradient's format on the wire */
    long powersgd_rank;      /* wire = powersgd: the rank of each matrix's approximation */
    double wire_auto_gbit;   /* wire = auto: powersgd on links measured slower (Gbit/s) */
    long segment_bytes;      /* all-reduce pipeline segment; 0 picks the measured default */
    long tree_bytes;         /* largest all-reduce over the view's tree; 0 = ring only */
    int link_probe;          /* 1: each view times its links and tunes tree cut and buckets */
    double step_timeout;     /* collectives wait up to this x the slowest recent iteration */
    long min_nodes;          /* quorum a view needs; 0: a majority (cfg_quorum) */
    double rejoin_timeout;   /* seconds a node without a quorum keeps trying */
    /* [train] */
    int model;                   /* cfg_model */
    long layers[CFG_MAX_LAYERS]; /* MLP layer widths, input first, output last */
    int n_layers;                /* entries used in layers[] */
    int dataset;                 /* cfg_dataset */
    char data_dir[CFG_PATH];     /* directory (or CSV file) for file-backed datasets */
    long samples;                /* synthetic dataset size (training split) */
    long eval_samples;           /* held-out split size */
    long global_batch;           /* B: samples per iteration across all nodes */
    double lr;                   /* base learning rate */
    int lr_schedule;             /* cfg_lr_schedule */
    long lr_step;                /* step schedule: iterations between decays */
    double lr_gamma;             /* step schedule: decay factor */
    long warmup;                 /* linear warm-up iterations */
    double momentum;             /* SGD momentum */
    double weight_decay;         /* L2 weight decay */
    long epochs;                 /* passes over the data (if iterations is 0) */
    long iterations;             /* total iterations; overrides epochs when > 0 */
    long eval_interval;          /* iterations between evaluations; 0 = at the end only */
    uint64_t seed;               /* seeds data, permutations and initial weights */
    char checkpoint[CFG_PATH];   /* checkpoint file; empty disables checkpoints */
    long checkpoint_interval;    /* iterations between checkpoints */
    long hash_interval;          /* iterations between replica hash checks (I4) */
    long bucket_bytes;           /* gradient bucket overlapped with backward; 0 = one all-reduce;
                                  * CFG_AUTO: chosen while training (cluster/overlap.h) */
    int nonfinite;               /* cfg_nonfinite: a step whose global gradient or loss is
                                  * not finite stops the run or is skipped */
    long nonfinite_limit;        /* skip: the run stops at this many skipped steps in a row;
                                  * 0 = never */
    /* [controller] */
    int policy;        /* cfg_policy */
    long interval;     /* iterations between batch-size decisions */
    double deadband;   /* relative change below which batches stay put */
    double gain;       /* proportional gain (1 = jump straight to the balanced split) */
    double ki;         /* pid: integral gain */
    double kd;         /* pid: derivative gain */
    long min_batch;    /* lower bound per node */
    long max_batch;    /* upper bound per node; 0 means global_batch */
    double smoothing;  /* EWMA weight of the newest timing, (0, 1] */
    double rate_limit; /* largest relative change of a batch per decision */
    double forgetting; /* model: RLS forgetting factor */
    int calibrate;     /* 1: the first split of a view from measured speed (on), 0: hints */
    /* nodes */
    cfg_node *nodes; /* ascending id */
    int n_nodes;
    /* provenance */
    char path[CFG_PATH]; /* file the config came from */
    int key_line[64];    /* line each global key was set on (schema order), 0 if unset */
                         /* or CFG_LINE_ENV or CFG_LINE_SET when an override set it last */
    int n_lines;         /* lines in the file */
} cfg;

/* Fill `c` with defaults and no nodes. */
void cfg_init(cfg *c);
void cfg_free(cfg *c);

/* Parse `path` over the defaults, then apply the environment, then validate. On failure
 * `err` holds "FILE:LINE: what (expected)". Returns HR_ERR_CONFIG or HR_ERR_IO. */
hr_status cfg_load(cfg *c, const char *path, char *err, size_t errlen);

/* The steps of cfg_load, for callers that add command-line overrides before validating. */
hr_status cfg_parse_file(cfg *c, const char *path, char *err, size_t errlen);
/* The same for an INI held in memory (`text`, NUL-terminated), named `name` in messages;
 * relative paths in it resolve against the current directory. */
hr_status cfg_parse_text(cfg *c, const char *text, const char *name, char *err, size_t errlen);
hr_status cfg_apply_env(cfg *c, char *err, size_t errlen);
hr_status cfg_set(cfg *c, const char *assignment, char *err, size_t errlen);
hr_status cfg_validate(cfg *c, char *err, size_t errlen);
/* Members a view needs to train: min_nodes, or a majority of the nodes when it is 0. */
long cfg_quorum(const cfg *c);

/* Whether controller policy `policy` (cfg_policy) reads [controller] `key`, or [node]
 * capacity: 0 for a key that only other policies read (ki and kd are pid's, forgetting is
 * model's; static reads none of interval, deadband, gain, smoothing, rate_limit, calibrate and
 * capacity, and epoch neither interval nor smoothing), else 1, as for every other key. */
int cfg_policy_uses(int policy, const char *key);
/* The [controller] keys `c` gives (file, environment or --set) another value than their
 * default that `policy` does not read, which cfg_validate refuses under that policy: their
 * names into keys[] (at most max), in schema order; returns how many. A caller that runs one
 * configuration under several policies puts them back to their defaults for such a policy
 * (cfg_reset, or --set KEY=cfg_key_default(KEY)). */
int cfg_policy_unused(const cfg *c, int policy, const char **keys, int max);
/* The same for [node] capacity: the indexes in c->nodes of the nodes that give it another value
 * than its default where `policy` does not read it (static), at most max, in c->nodes order;
 * returns how many. Such a caller puts it back (cfg_reset_node, or --set
 * node.ID.capacity=cfg_key_default("capacity")). */
int cfg_capacity_unused(const cfg *c, int policy, int *nodes, int max);
/* Put key `key` of the cluster ("ki") back to its default, as if it was never given (it
 * prints as a comment). Returns HR_ERR_CONFIG, changing nothing, for a key that is not one or
 * has no default (psk). */
hr_status cfg_reset(cfg *c, const char *key);
/* The same for key `key` of c->nodes[node_idx] ("capacity"). */
hr_status cfg_reset_node(cfg *c, int node_idx, const char *key);
/* The default of key `key` of the cluster, or else of a node, as INI text ("0.05"), or NULL:
 * none, or no such key. */
const char *cfg_key_default(const char *key);

/* Line of the file that set `key` of the cluster (node_idx -1) or of c->nodes[node_idx]: > 0,
 * or 0 when it has its default, or CFG_LINE_ENV or CFG_LINE_SET when an override set it. */
int cfg_key_line(const cfg *c, int node_idx, const char *key);

/* Where `key` of the cluster (node_idx -1) or of c->nodes[node_idx] got its value, for a
 * message that blames it ("WHERE: what (expected)"): "FILE:LINE" when the file set it, the
 * override that did ("--set train.lr", "environment HETRING_NODE_2_THREADS"), and for a
 * default the line to add it at: the node's [node.ID] header, or line 1 for the cluster's. */
const char *cfg_where(const cfg *c, int node_idx, const char *key, char *out, size_t n);

/* Index of node `id` in c->nodes, or -1. */
int cfg_node_index(const cfg *c, long id);

/* Write the effective configuration as INI. It reads back as the same configuration, with two
 * exceptions: the header comment names the file, and an inline psk prints as "<redacted>",
 * which the parser refuses with a message saying so (give the key again, or use psk_file or
 * HETRING_CLUSTER_PSK). Unset optional keys (psk, pubkey) print as comments, ";psk =", and so
 * does a key never given, with its default (or what it resolved to: security = auto),
 * ";interval = 4": it reads back as not given (a given eval_samples cuts a held-out file). */
void cfg_print(const cfg *c, FILE *out);
/* The same with every key as "key = value", defaults too: for comparing configurations. */
void cfg_print_values(const cfg *c, FILE *out);
/* Write the reference file: every key, its default, its range and what it does. */
void cfg_print_reference(FILE *out);

/* Names for enum values ("encrypt", "mlp", ...). */
const char *cfg_security_name(int v);
const char *cfg_wire_name(int v);
const char *cfg_policy_name(int v);
const char *cfg_model_name(int v);
const char *cfg_dataset_name(int v);

/* A whole decimal number, surrounding white space allowed. Returns 0, or -1 (and leaves `out`
 * alone) when `s` is not one or does not fit a long. */
int cfg_parse_long(const char *s, long *out);

/* Hex helpers for keys: 2*n hex digits <-> n bytes. Return 0 on success. */
int cfg_hex_decode(const char *hex, uint8_t *out, size_t n);
void cfg_hex_encode(const uint8_t *in, size_t n, char *out);

#endif
