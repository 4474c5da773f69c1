/*
 * cfg_override.c: the overrides that apply after the file: the environment
 * (HETRING_<SECTION>_<KEY>, HETRING_NODE_<ID>_<KEY>) and the command line (cfg_set). A value set
 * by either has CFG_LINE_ENV or CFG_LINE_SET as its line, so that nothing blames the file for
 * it (cfg_where names the override instead).
 */
#include "conf/cfg_internal.h"

#include <ctype.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

const char *cfg_env_name(const char *section, long node_id, const char *key, char *out, size_t n) {
    size_t o;
    if (node_id >= 0)
        o = (size_t)snprintf(out, n, "HETRING_NODE_%ld_", node_id);
    else
        o = (size_t)snprintf(out, n, "HETRING_%s_", section);
    snprintf(out + o, n - o, "%s", key);
    for (char *p = out; *p; p++) *p = (char)toupper((unsigned char)*p);
    return out;
}

/* Set key `k` of `base` (c, or one of its nodes) from an override; its line becomes `by`
 * (CFG_LINE_ENV or CFG_LINE_SET), so that nothing blames the file for the value. */
static hr_status apply_one(cfg *c, const key_spec *k, void *base, int by, const char *src,
                           const char *val, char *err, size_t errlen) {
    char why[512], cwd[PATH_MAX];
    cfg_current_dir(cwd, sizeof cwd); /* a relative path in an override is the user's own */
    if (cfg_value_set(k, base, val, cwd, why, sizeof why))
        return hr_fail(err, errlen, HR_ERR_CONFIG, "%s: %s", src, why);
    if (base == (void *)c)
        c->key_line[k - cfg_gkeys] = by;
    else
        ((cfg_node *)base)->key_line[k - cfg_nkeys] = by;
    return HR_OK;
}

hr_status cfg_apply_env(cfg *c, char *err, size_t errlen) {
    char name[128], src[160];
    for (int i = 0; i < cfg_n_gkeys; i++) {
        cfg_env_name(cfg_gkeys[i].section, -1, cfg_gkeys[i].key, name, sizeof name);
        const char *v = getenv(name);
        if (!v) continue;
        snprintf(src, sizeof src, "environment %s", name);
        HR_CHECK(apply_one(c, &cfg_gkeys[i], c, CFG_LINE_ENV, src, v, err, errlen));
    }
    for (int j = 0; j < c->n_nodes; j++)
        for (int i = 0; i < cfg_n_nkeys; i++) {
            cfg_env_name("node", c->nodes[j].id, cfg_nkeys[i].key, name, sizeof name);
            const char *v = getenv(name);
            if (!v) continue;
            snprintf(src, sizeof src, "environment %s", name);
            HR_CHECK(apply_one(c, &cfg_nkeys[i], &c->nodes[j], CFG_LINE_ENV, src, v, err, errlen));
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
        for (int i = 0; i < cfg_n_gkeys && !known; i++) {
            cfg_env_name(cfg_gkeys[i].section, -1, cfg_gkeys[i].key, name, sizeof name);
            known = strlen(name) == len && strncmp(name, s, len) == 0;
        }
        for (int j = 0; j < c->n_nodes && !known; j++)
            for (int i = 0; i < cfg_n_nkeys && !known; i++) {
                cfg_env_name("node", c->nodes[j].id, cfg_nkeys[i].key, name, sizeof name);
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
    const key_spec *k = node_id >= 0 ? cfg_find_key(cfg_nkeys, cfg_n_nkeys, "node", key, &idx)
                                     : cfg_find_key(cfg_gkeys, cfg_n_gkeys, section, key, &idx);
    if (!k && node_id < 0 && strcmp(section, "cluster") != 0 && strcmp(section, "train") != 0 &&
        strcmp(section, "controller") != 0)
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "--set %s: unknown section '%s' (expected cluster, train, controller or "
                       "node.ID)",
                       assignment, section);
    if (!k) {
        char list[1024];
        cfg_list_keys(node_id >= 0 ? cfg_nkeys : cfg_gkeys,
                      node_id >= 0 ? cfg_n_nkeys : cfg_n_gkeys, node_id >= 0 ? "node" : section,
                      list, sizeof list);
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "--set %s: unknown key '%s' in [%s] (expected one of %s)", assignment, key,
                       node_id >= 0 ? "node.ID" : section, list);
    }
    void *base = node_id >= 0 ? (void *)&c->nodes[cfg_node_index(c, node_id)] : (void *)c;
    return apply_one(c, k, base, CFG_LINE_SET, src, eq + 1, err, errlen);
}
