/*
 * cfg.c: the configuration's life: defaults, nodes and freeing, and the provenance of each
 * key (the line that set it). Loading a file, which calls up into parsing, the overrides and
 * validation, is cfg_load.c's.
 */
#include "conf/cfg_internal.h"

#include <stdlib.h>
#include <string.h>

/* ================================================================ defaults and nodes */

static void apply_defaults(const key_spec *keys, int n, void *base) {
    char why[256];
    for (int i = 0; i < n; i++)
        if (keys[i].def && cfg_value_set(&keys[i], base, keys[i].def, NULL, why, sizeof why) != 0)
            abort(); /* a bad default in the schema (cfg_schema.c) is a programming error */
}

void cfg_init(cfg *c) {
    memset(c, 0, sizeof *c);
    apply_defaults(cfg_gkeys, cfg_n_gkeys, c);
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

hr_status cfg_reset(cfg *c, const char *key) {
    char why[256];
    for (int i = 0; i < cfg_n_gkeys; i++)
        if (strcmp(cfg_gkeys[i].key, key) == 0 && cfg_gkeys[i].def) {
            if (cfg_value_set(&cfg_gkeys[i], c, cfg_gkeys[i].def, NULL, why, sizeof why) != 0)
                abort(); /* a bad default in the schema, as in apply_defaults */
            c->key_line[i] = 0;
            return HR_OK;
        }
    return HR_ERR_CONFIG;
}

hr_status cfg_reset_node(cfg *c, int node_idx, const char *key) {
    char why[256];
    int i;
    const key_spec *k = cfg_find_key(cfg_nkeys, cfg_n_nkeys, "node", key, &i);
    if (node_idx < 0 || node_idx >= c->n_nodes || !k || !k->def) return HR_ERR_CONFIG;
    if (cfg_value_set(k, &c->nodes[node_idx], k->def, NULL, why, sizeof why) != 0)
        abort(); /* a bad default in the schema, as in apply_defaults */
    c->nodes[node_idx].key_line[i] = 0;
    return HR_OK;
}

const char *cfg_key_default(const char *key) {
    for (int i = 0; i < cfg_n_gkeys; i++)
        if (strcmp(cfg_gkeys[i].key, key) == 0) return cfg_gkeys[i].def;
    for (int i = 0; i < cfg_n_nkeys; i++)
        if (strcmp(cfg_nkeys[i].key, key) == 0) return cfg_nkeys[i].def;
    return NULL;
}

int cfg_node_index(const cfg *c, long id) {
    for (int i = 0; i < c->n_nodes; i++)
        if (c->nodes[i].id == id) return i;
    return -1;
}

cfg_node *cfg_add_node(cfg *c, long id, int line) {
    cfg_node *grown = realloc(c->nodes, sizeof *grown * (size_t)(c->n_nodes + 1));
    if (!grown) return NULL;
    c->nodes = grown;
    cfg_node *n = &c->nodes[c->n_nodes++];
    memset(n, 0, sizeof *n);
    apply_defaults(cfg_nkeys, cfg_n_nkeys, n);
    n->id = id;
    n->line = line;
    return n;
}

int cfg_key_line(const cfg *c, int node_idx, const char *key) {
    int idx;
    if (node_idx < 0) {
        for (int i = 0; i < cfg_n_gkeys; i++)
            if (strcmp(cfg_gkeys[i].key, key) == 0) return c->key_line[i];
        return 0;
    }
    if (node_idx >= c->n_nodes || !cfg_find_key(cfg_nkeys, cfg_n_nkeys, "node", key, &idx))
        return 0;
    return c->nodes[node_idx].key_line[idx];
}

const char *cfg_where(const cfg *c, int node_idx, const char *key, char *out, size_t n) {
    const int line = cfg_key_line(c, node_idx, key);
    const cfg_node *nd = node_idx >= 0 && node_idx < c->n_nodes ? &c->nodes[node_idx] : NULL;
    const char *section = "node";
    for (int i = 0; i < cfg_n_gkeys && !nd; i++)
        if (strcmp(cfg_gkeys[i].key, key) == 0) section = cfg_gkeys[i].section;
    char env[128];
    if (line == CFG_LINE_SET && nd)
        snprintf(out, n, "--set node.%ld.%s", nd->id, key);
    else if (line == CFG_LINE_SET)
        snprintf(out, n, "--set %s.%s", section, key);
    else if (line == CFG_LINE_ENV)
        snprintf(out, n, "environment %s",
                 cfg_env_name(section, nd ? nd->id : -1, key, env, sizeof env));
    else
        snprintf(out, n, "%s:%d", c->path[0] ? c->path : "<config>",
                 line > 0 ? line
                 : nd     ? nd->line
                          : 1);
    return out;
}
