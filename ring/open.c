/*
 * open.c: a ring's life (see ring.h), from ring_init or ring_open through ring_reform to
 * ring_free. It sets up and tears down the parts that the other files keep: the config's copy,
 * the keys, the stages and the worker count (here), the schedule's scratch (engine.c), the
 * election state and its lobby (elect.c), the listening socket and the gate (form.c), the
 * threaded engine (engine_mt.c).
 *
 * Invariants:
 *  - ring_free stops the gate before it frees what the gate's threads read (listen_fd, rc,
 *    the keys, the election state);
 *  - ring_free is safe on a ring that was only partly set up;
 *  - a ring starts only where the open-file limit (RLIMIT_NOFILE) holds every descriptor it may
 *    need at once (fd_budget), so no accept or connect fails mid-run with EMFILE.
 */
#include "ring/ring.h"

#include "base/hr_cores.h"
#include "base/hr_log.h"
#include "ring/elect_internal.h"
#include "ring/engine_internal.h"
#include "ring/form_internal.h"
#include "ring/frame.h"
#include "ring/ring_internal.h"
#include "ring/tcp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Measured default pipeline segment (bench/README.md, "All-reduce"). */
#define RING_SEG_DEFAULT (1 << 20)

/* The threaded engine's workers: HETRING_RING_WORKERS (off, or 0 to MT_WORKERS_MAX), else
 * the cores this process may use, shared among the config's nodes with this node's host, less
 * the receiving and the sending thread; -1 (off: one thread runs every collective) when that
 * share is less than two cores. */
static hr_status workers_of(ring *r) {
    const char *env = getenv("HETRING_RING_WORKERS");
    if (env && *env) {
        char *end;
        long w = strtol(env, &end, 10);
        if (strcmp(env, "off") == 0) {
            r->mt_workers = -1;
            return HR_OK;
        }
        if (*end || end == env || w < 0 || w > MT_WORKERS_MAX)
            return hr_fail(r->err, sizeof r->err, HR_ERR_CONFIG,
                           "HETRING_RING_WORKERS=%s: expected off or 0 to %d", env, MT_WORKERS_MAX);
        r->mt_workers = (int)w;
        return HR_OK;
    }
    long cores = hr_cores();
    int here = 0;
    for (int i = 0; i < r->rc.n_members; i++)
        here += strcmp(r->rc.members[i].host, r->rc.members[r->self].host) == 0;
    long per = cores / (here > 0 ? here : 1);
    /* with less than two cores a node's threads would only take turns: one thread runs it */
    r->mt_workers = per < 2 ? -1 : per - 2 > MT_WORKERS_MAX ? MT_WORKERS_MAX : (int)(per - 2);
    return HR_OK;
}

/* Descriptors a node may need besides those open at its start: the trainer's files, a
 * checkpoint being written, a log. */
#define RING_FDS_SPARE 8

/* Descriptors a ring of n members may hold at once besides those open before it: the listening
 * socket, the ring's two links and the tree's three, the election's probes in flight, the
 * gate's connections, the threaded engine's wake pipe. */
static long fds_needed(int n) {
    const long probes = n - 1 < ELECT_THREADS ? n - 1 : ELECT_THREADS;
    return 1 + 2 + 3 + probes + GATE_SLOTS + 2;
}

/* The open-file limit must hold what the ring may need at once: a limit below it would fail
 * accepts and connects mid-run (EMFILE), where the election waits for a quorum, instead of at
 * the start. A soft limit below it is raised as far as it needs (the hard limit allowing);
 * else the ring does not start, and says which limit to raise. */
static hr_status fd_budget(ring *r) {
    if (r->rc.n_members < 2) return HR_OK; /* no sockets */
    long open = hr_fds_open();
    if (open < 0) open = 3; /* /proc unreadable: the standard three */
    const long need = open + fds_needed(r->rc.n_members) + RING_FDS_SPARE;
    unsigned long soft, hard;
    const int got = hr_fds_reserve(need, &soft, &hard);
    if (got == 1)
        HR_INFO(RING,
                "raised the open-file limit (RLIMIT_NOFILE) from %lu to %ld: a node of a %d-node "
                "cluster may hold that many descriptors at once",
                soft, need, r->rc.n_members);
    if (got >= 0) return HR_OK;
    return hr_fail(r->err, sizeof r->err, HR_ERR_CONFIG,
                   "node %ld: the open-file limit (RLIMIT_NOFILE, ulimit -n) is %lu (hard %lu), "
                   "but a node of a %d-node cluster may need %ld descriptors at once (%ld open "
                   "now): raise it to %ld or more (ulimit -n %ld, or LimitNOFILE= for a service)",
                   r->self_id, soft, hard, r->rc.n_members, need, open, need, need);
}

static hr_status alloc_stage(ring *r) {
    size_t cap = FRAME_HDR + r->seg_bytes + 64 + SEC_TAG;
    if (cap < FRAME_HDR + FRAME_ABORT_MAX + SEC_TAG) cap = FRAME_HDR + FRAME_ABORT_MAX + SEC_TAG;
    cap = (cap + 63) & ~(size_t)63;
    r->tx_stage = aligned_alloc(64, cap);
    r->rx_stage = aligned_alloc(64, cap);
    if (!r->tx_stage || !r->rx_stage) return HR_ERR_NOMEM;
    r->stage_cap = cap;
    return HR_OK;
}

/* What ring_init and ring_open share: a new ring into *out (NULL: no memory for it), the config
 * copied, the keys loaded, the stages, the schedule and the election state allocated. On
 * failure r->err says why, and ring_free frees what was set up. */
static hr_status ring_setup(ring **out, const ring_config *rc) {
    size_t sz = (sizeof(ring) + 63) & ~(size_t)63; /* holds aligned channel states */
    ring *r = *out = aligned_alloc(64, sz);
    if (!r) return HR_ERR_NOMEM;
    memset(r, 0, sz);
    r->listen_fd = r->succ_fd = r->pred_fd = -1;
    r->succ = r->pred = -1;
    for (int i = 0; i < 3; i++) r->tree_fd[i] = r->tree_peer[i] = -1;
    r->suspect = -1;
    r->rc = *rc;
    if (rc->n_members < 1 || rc->n_members > RING_MAX_NODES)
        return hr_fail(r->err, sizeof r->err, HR_ERR_INVAL, "a ring needs 1 to %d members, not %d",
                       RING_MAX_NODES, rc->n_members);
    r->self = ring_config_index(rc, rc->self_id);
    if (r->self < 0)
        return hr_fail(r->err, sizeof r->err, HR_ERR_INVAL, "node %ld is not a member",
                       rc->self_id);
    r->self_id = rc->self_id;
    r->timeout = rc->timeout;
    r->seg_bytes = rc->segment_bytes > 0 ? (size_t)rc->segment_bytes : RING_SEG_DEFAULT;
    if (r->seg_bytes < 64) r->seg_bytes = 64;
    HR_CHECK(workers_of(r));
    HR_CHECK(fd_budget(r));
    HR_CHECK(sec_keys_load(&r->keys, &r->rc, r->err, sizeof r->err));
    if (r->keys.mode == RING_SEC_NONE)
        HR_WARN(SEC, "security = none: ring links are neither authenticated nor encrypted");
    if (alloc_stage(r) != HR_OK || sched_alloc(r) != HR_OK || elect_alloc(r) != HR_OK)
        return hr_fail(r->err, sizeof r->err, HR_ERR_NOMEM, "out of memory");
    return HR_OK;
}

/* A failed ring_init or ring_open: its error into `err`, the ring freed, *out NULL. */
static hr_status open_failed(ring **out, hr_status st, char *err, size_t errlen) {
    if (err) snprintf(err, errlen, "%s", *out ? (*out)->err : "out of memory");
    ring_free(*out);
    *out = NULL;
    return st;
}

hr_status ring_init(ring **out, const ring_config *rc, char *err, size_t errlen) {
    hr_status st = ring_setup(out, rc);
    ring *r = *out;
    if (st != HR_OK) return open_failed(out, st, err, errlen);
    r->view.epoch = 0;
    r->view.n = rc->n_members;
    for (int i = 0; i < rc->n_members; i++) r->view.ids[i] = rc->members[i].id;
    if (rc->n_members > 1) HR_CHECK_GOTO(listen_start(r, r->err, sizeof r->err), st, fail);
    HR_CHECK_GOTO(ring_form(r, r->rc.connect_timeout, r->err, sizeof r->err), st, fail);
    elect_formed(r);
    return HR_OK;
fail:
    return open_failed(out, st, err, errlen);
}

hr_status ring_open(ring **out, const ring_config *rc, char *err, size_t errlen) {
    hr_status st = ring_setup(out, rc);
    ring *r = *out;
    if (st != HR_OK) return open_failed(out, st, err, errlen);
    r->view = (ring_view){.epoch = 0, .n = 0};
    r->rank = -1;
    r->failed = HR_ERR_VIEW;
    snprintf(r->err, sizeof r->err, "no view yet: call ring_elect");
    if (rc->n_members > 1) HR_CHECK_GOTO(listen_start(r, r->err, sizeof r->err), st, fail);
    return HR_OK;
fail:
    return open_failed(out, st, err, errlen);
}

hr_status ring_reform(ring *r, const ring_view *v, char *err, size_t errlen) {
    ring_close_links(r);
    if (v->n < 1 || v->n > RING_MAX_NODES)
        return hr_fail(err, errlen, HR_ERR_INVAL, "a view needs 1 to %d members", RING_MAX_NODES);
    r->view = *v;
    hr_status st = HR_OK;
    if (v->n > 1 && r->listen_fd < 0) st = listen_start(r, r->err, sizeof r->err);
    if (st == HR_OK) st = ring_form(r, r->rc.connect_timeout, r->err, sizeof r->err);
    if (st == HR_OK) elect_formed(r);
    if (st != HR_OK) {
        r->failed = st;
        if (err) snprintf(err, errlen, "%s", r->err);
    }
    return st;
}

void ring_free(ring *r) {
    if (!r) return;
    gate_stop(r); /* its threads read listen_fd, rc, keys and the election state */
    mt_free(r);
    elect_free(r);
    ring_close_links(r);
    tcp_close(&r->listen_fd);
    sec_keys_free(&r->keys);
    ring_config_wipe(&r->rc);
    free(r->tx_stage);
    free(r->rx_stage);
    free(r->tmp);
    sched_free(r);
    free(r);
}
