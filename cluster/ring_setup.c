/*
 * ring_setup.c: cfg -> ring_config (see ring_setup.h).
 *
 * Invariant: every string of a cfg fits the ring_config field it is copied to, and the ring's
 * security modes have the schema's values (they travel in the handshake), both checked at
 * compile time, so the copy never truncates and the mode needs no table.
 */
#include "cluster/ring_setup.h"
#include "base/hr_log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the enums are distinct types: compare their values */
_Static_assert((int)CFG_SEC_NONE == (int)RING_SEC_NONE && (int)CFG_SEC_AUTH == (int)RING_SEC_AUTH &&
                   (int)CFG_SEC_ENCRYPT == (int)RING_SEC_ENCRYPT,
               "cfg_security and ring_security must agree");
_Static_assert(CFG_MAX_NODES <= RING_MAX_NODES, "a ring must hold every node of a config");
_Static_assert(CFG_STR <= RING_STR, "cfg host and cluster names must fit a ring_config");
_Static_assert(CFG_PATH <= RING_PATH, "cfg paths must fit a ring_config");
_Static_assert(CFG_KEYLEN == RING_KEYLEN, "cfg and ring keys have one length");

int app_expand_id(char *out, size_t len, const char *pattern, long id) {
    size_t o = 0;
    const char *p = pattern;
    while (*p && o + 1 < len) {
        if (strncmp(p, "{id}", 4) == 0) {
            o += (size_t)snprintf(out + o, len - o, "%ld", id);
            if (o >= len) o = len - 1; /* the number was cut */
            p += 4;
        } else {
            out[o++] = *p++;
        }
    }
    out[o] = 0;
    return *p ? -1 : 0;
}

/* Whether key `key` of `section` ("[train]") must be the same on every node: everything that
 * decides what is computed and how the nodes talk (the gradient's wire and its choice, and
 * whether the members time their links together at a view's first step included), not local
 * paths, deadlines (step_timeout among them: each node waits as long as it is told), cadences
 * or emulation settings. */
static int must_agree(const char *section, const char *key) {
    static const char *const cluster[] = {"name",           "security",  "backend", "segment_bytes",
                                          "tree_bytes",     "min_nodes", "wire",    "powersgd_rank",
                                          "wire_auto_gbit", "link_probe"};
    static const char *const train_local[] = {"data_dir", "checkpoint", "checkpoint_interval",
                                              "eval_interval"};
    static const char *const node[] = {"host", "port", "capacity", "pubkey"};
    if (strcmp(section, "[cluster]") == 0) {
        for (size_t i = 0; i < sizeof cluster / sizeof *cluster; i++)
            if (strcmp(key, cluster[i]) == 0) return 1;
        return 0;
    }
    if (strcmp(section, "[train]") == 0) {
        for (size_t i = 0; i < sizeof train_local / sizeof *train_local; i++)
            if (strcmp(key, train_local[i]) == 0) return 0;
        return 1;
    }
    if (strcmp(section, "[controller]") == 0) return 1;
    if (strncmp(section, "[node.", 6) == 0) {
        for (size_t i = 0; i < sizeof node / sizeof *node; i++)
            if (strcmp(key, node[i]) == 0) return 1;
    }
    return 0;
}

size_t app_agree_text(const cfg *c, char *out, size_t cap) {
    char *buf = NULL;
    size_t len = 0, o = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return 0;
    cfg_print_values(c, f);
    if (fclose(f) != 0 || !buf) {
        free(buf);
        return 0;
    }
    char section[96] = "", *save = NULL;
    /* strtok_r: libhetring's nodes may set up on several threads of one process at once */
    for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        int keep = 0;
        if (line[0] == '[') {
            snprintf(section, sizeof section, "%s", line);
            keep = 1;
        } else if (line[0] != ';' && strchr(line, '=')) {
            char key[96];
            size_t kl = strcspn(line, " =");
            snprintf(key, sizeof key, "%.*s", (int)kl, line);
            keep = must_agree(section, key);
        }
        size_t n = strlen(line);
        if (keep && o + n + 1 >= cap) { /* does not fit: no check rather than half of one */
            free(buf);
            return 0;
        }
        if (keep) {
            memcpy(out + o, line, n);
            o += n;
            out[o++] = '\n';
        }
    }
    free(buf);
    return o;
}

hr_status app_ring_config(const cfg *c, int self_idx, ring_config *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (self_idx < 0 || self_idx >= c->n_nodes)
        return hr_fail(err, errlen, HR_ERR_INVAL, "node index %d out of range", self_idx);
    memcpy(out->name, c->name, sizeof c->name);
    out->security = c->security == CFG_SEC_AUTO ? RING_SEC_ENCRYPT : c->security;
    out->self_id = c->nodes[self_idx].id;
    out->n_members = c->n_nodes;
    for (int i = 0; i < c->n_nodes; i++) {
        const cfg_node *n = &c->nodes[i];
        ring_member *m = &out->members[i];
        m->id = n->id;
        memcpy(m->host, n->host, sizeof n->host);
        m->port = n->port;
        memcpy(m->pubkey, n->pubkey, sizeof n->pubkey);
        m->has_pubkey = n->has_pubkey;
    }
    out->connect_timeout = c->connect_timeout;
    out->timeout = c->timeout;
    out->segment_bytes = c->segment_bytes;
    out->tree_bytes = c->tree_bytes;
    out->min_nodes = (int)cfg_quorum(c);
    out->agree_len = app_agree_text(c, out->agree, sizeof out->agree);
    if (out->agree_len == 0)
        HR_WARN(RING, "the configuration is too long for the nodes to compare it; not checked");
    out->rejoin_timeout = c->rejoin_timeout;
    if (app_expand_id(out->key_file, sizeof out->key_file, c->key_file, out->self_id) != 0)
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "%s: key_file with {id} replaced by %ld is longer than %zu characters",
                       c->path[0] ? c->path : "the config", out->self_id, sizeof out->key_file - 1);
    memcpy(out->psk_file, c->psk_file, sizeof c->psk_file);
    memcpy(out->psk, c->psk, sizeof c->psk);
    out->has_psk = c->has_psk;
    memcpy(out->label, c->path, sizeof c->path);
    app_port_where(c, self_idx, out->port_where, sizeof out->port_where);
    return HR_OK;
}

void app_port_where(const cfg *c, int self_idx, char *out, size_t len) {
    char at[CFG_PATH + 64];
    const cfg_node *me = &c->nodes[self_idx];
    snprintf(out, len, "%s: [node.%ld] port = %ld", cfg_where(c, self_idx, "port", at, sizeof at),
             me->id, me->port);
}
