/*
 * ring.c: the ring's state as every file of ring/ sees it (ring_internal.h): the accessors of
 * ring.h, a member's name for messages, the view's links and the shape of its tree.
 *
 * The lowest file of the ring: the engines, the collectives, formation and elections call down
 * into it, and it calls none of them.
 */
#include "ring/ring_internal.h"
#include "base/hr_addr.h"

#include "ring/tcp.h"

#include <stdio.h>

/* ================================================================ names and accessors */

void ring_node_str(const ring *r, long id, char *out, size_t n) {
    int i = ring_config_index(&r->rc, id);
    if (i < 0)
        snprintf(out, n, "node %ld", id);
    else {
        char a[HR_ADDR_LEN];
        snprintf(out, n, "node %ld (%s)", id,
                 hr_addr(a, sizeof a, r->rc.members[i].host, r->rc.members[i].port));
    }
}

const char *ring_error(const ring *r) {
    return r->err;
}

void ring_set_step_timeout(ring *r, double secs) {
    r->coll_timeout = secs;
}

double ring_timeout(const ring *r) {
    return r->coll_timeout > r->timeout ? r->coll_timeout : r->timeout;
}

int ring_rank(const ring *r) {
    return r->rank;
}

hr_status ring_status(const ring *r) {
    return r->failed;
}

size_t ring_segment_bytes(const ring *r) {
    return r->seg_bytes;
}

long ring_tree_bytes(const ring *r) {
    return r->rc.tree_bytes;
}

long ring_tree_cut(const ring *r) {
    return r->tree_on ? r->tree_cut : 0;
}

void ring_set_tree_cut(ring *r, long bytes) {
    r->tree_cut = bytes < 0 ? 0 : bytes > r->rc.tree_bytes ? r->rc.tree_bytes : bytes;
}

int ring_size(const ring *r) {
    return r->view.n;
}

const ring_view *ring_get_view(const ring *r) {
    return &r->view;
}

int ring_workers(const ring *r) {
    return r->mt_workers;
}

uint64_t ring_threaded_runs(const ring *r) {
    return r->mt_runs;
}

uint64_t ring_tree_runs(const ring *r) {
    return r->tree_runs;
}

/* ================================================================ links */

void ring_close_links(ring *r) {
    tcp_close(&r->succ_fd);
    tcp_close(&r->pred_fd);
    sec_chan_free(&r->succ_ch);
    sec_chan_free(&r->pred_ch);
    for (int i = 0; i < 3; i++) {
        tcp_close(&r->tree_fd[i]);
        sec_chan_free(&r->tree_ch[i]);
    }
    r->tree_on = 0;
}

void tree_links_of(int rank, int n, int out[3]) {
    out[0] = rank > 0 ? (rank - 1) / 2 : -1;
    out[1] = 2 * rank + 1 < n ? 2 * rank + 1 : -1;
    out[2] = 2 * rank + 2 < n ? 2 * rank + 2 : -1;
}
