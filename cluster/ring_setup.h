/*
 * ring_setup.h: the ring's config, made from the cluster's INI config (the one place that
 * knows both), and the "{id}" expansion of per-node file names.
 *
 * The ring layer takes a ring_config and never sees the whole cfg; this conversion happens
 * once per ring, in the application. The limits and security modes of conf/ and ring/ are
 * checked to agree at compile time (ring_setup.c).
 */
#ifndef HR_RING_SETUP_H
#define HR_RING_SETUP_H

#include "base/hr_status.h"
#include "conf/cfg.h"
#include "ring/ring_config.h"

#include <stddef.h>

/* Fill `out` with what the ring of node c->nodes[self_idx] needs: members, timeouts, segment
 * size, security mode (auto resolves to encrypt) and key sources, with "{id}" in key_file
 * replaced by the node id. `out` then holds the inline PSK, if any: the caller wipes it with
 * ring_config_wipe once ring_init has copied it. Returns HR_ERR_INVAL for a bad index, or
 * HR_ERR_CONFIG when a value does not fit, with `err` saying which. */
/* The lines of c's effective configuration (cfg_print) that every node must share, as
 * "[section]" and "key = value" lines, into out (cap bytes): [train] and [controller] but for
 * local paths and cadences, the cluster's name, security, backend, segment_bytes and
 * min_nodes, and each node's host, port, capacity and pubkey. Returns its length, 0 when it
 * does not fit. The ring compares its digest between nodes (ring_config.agree). */
size_t app_agree_text(const cfg *c, char *out, size_t cap);

hr_status app_ring_config(const cfg *c, int self_idx, ring_config *out, char *err, size_t errlen);

/* Where node self_idx's port is set, with its value: "FILE:LINE: [node.N] port = P" (or the
 * override that set it), as a port that cannot be bound is reported (ring_config.port_where). */
void app_port_where(const cfg *c, int self_idx, char *out, size_t len);

/* Copy `pattern` into `out` (`len` bytes) with every "{id}" replaced by `id`. Returns 0, or -1
 * when the result was cut to fit (it is still NUL-terminated). */
int app_expand_id(char *out, size_t len, const char *pattern, long id);

#endif
