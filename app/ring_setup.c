/*
 * ring_setup.c: cfg -> ring_config (see ring_setup.h).
 *
 * Invariant: every string of a cfg fits the ring_config field it is copied to, and the ring's
 * security modes have the schema's values (they travel in the handshake), both checked at
 * compile time, so the copy never truncates and the mode needs no table.
 */
#include "ring_setup.h"

#include <stdio.h>
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
    out->min_nodes = (int)cfg_quorum(c);
    out->rejoin_timeout = c->rejoin_timeout;
    if (app_expand_id(out->key_file, sizeof out->key_file, c->key_file, out->self_id) != 0)
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "%s: key_file with {id} replaced by %ld is longer than %zu characters",
                       c->path[0] ? c->path : "the config", out->self_id, sizeof out->key_file - 1);
    memcpy(out->psk_file, c->psk_file, sizeof c->psk_file);
    memcpy(out->psk, c->psk, sizeof c->psk);
    out->has_psk = c->has_psk;
    memcpy(out->label, c->path, sizeof c->path);
    return HR_OK;
}
