/*
 * cfg_internal.h: what the files of conf/ share behind cfg.h: the schema's key tables
 * (cfg_schema.c), the value types that parse and print a key (cfg_value.c), the paths values
 * resolve against, and the nodes of a configuration being read (cfg.c).
 */
#ifndef HR_CFG_INTERNAL_H
#define HR_CFG_INTERNAL_H

#include "conf/cfg.h"

#include <stddef.h>

/* ================================================================ schema (cfg_schema.c) */

typedef enum {
    T_STR,
    T_HOST, /* a T_STR naming a host */
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
    size_t size;         /* T_STR, T_HOST, T_PATH: buffer size */
    double min, max;     /* T_INT, T_AUTOINT, T_DBL: inclusive range */
    const char *choices; /* T_ENUM: "a|b|c", value is the index */
    const char *def;     /* default as INI text; NULL: required (nodes) or unset */
    int secret;          /* never printed */
    const char *help;    /* one line for the reference file */
} key_spec;

extern const key_spec cfg_gkeys[]; /* [cluster], [train] and [controller], in print order */
extern const int cfg_n_gkeys;
extern const key_spec cfg_nkeys[]; /* [node.ID] */
extern const int cfg_n_nkeys;

/* The key `key` of `section` in `keys` (n rows), its index in *idx; NULL when there is none. */
const key_spec *cfg_find_key(const key_spec *keys, int n, const char *section, const char *key,
                             int *idx);
/* The keys of `section` in `keys` (n rows) as "a, b, c" into out (len bytes), for the message
 * about a key that is not one of them. */
void cfg_list_keys(const key_spec *keys, int n, const char *section, char *out, size_t len);

/* The environment variable that overrides `key` of `section` (node_id -1) or of node
 * `node_id`: HETRING_TRAIN_LR, HETRING_NODE_2_THREADS. Returns `out`. (cfg_override.c) */
const char *cfg_env_name(const char *section, long node_id, const char *key, char *out, size_t n);

/* ================================================================ values (cfg_value.c) */

/* What key `k` expects, for messages and the reference file. */
void cfg_expected(const key_spec *k, char *buf, size_t n);
/* Parse `text` into the field of `k` inside `base`; a relative T_PATH becomes absolute from
 * `dir` (NULL for the defaults, which are never relative). Writes nothing to the field unless
 * the whole value is good; on failure writes the reason to `why` and returns -1. */
int cfg_value_set(const key_spec *k, void *base, const char *text, const char *dir, char *why,
                  size_t whylen);
/* Is an optional key (a T_HEXKEY) unset? Every other key always has a value. */
int cfg_value_unset(const key_spec *k, const void *base);
/* Text of a field's current value, for printing. */
void cfg_value_format(const key_spec *k, const void *base, char *out, size_t n);

/* The absolute directory of `file` into `out`, which holds PATH_MAX bytes. */
void cfg_dir_of(const char *file, char *out, size_t n);
/* The current directory, for overrides. */
void cfg_current_dir(char *out, size_t n);

/* ================================================================ nodes (cfg.c) */

/* Append node `id`, its [node.ID] header at `line`, with the node defaults; NULL: no memory. */
cfg_node *cfg_add_node(cfg *c, long id, int line);

#endif
