/*
 * coll.c: the collectives (see ring.h).
 *
 * Every collective is compiled into a schedule (engine.c): the frames this node sends to its
 * successor (byte ranges of one buffer, each with the number of received frames it must wait
 * for) and the frames it receives from its predecessor (byte ranges, each added as floats or
 * copied); run_sched runs it on the engine that suits its size (engine.c, engine_mt.c). Small
 * ones may go over the view's tree instead (tree.c). The collectives call down into those files,
 * and the engines never call back up.
 *
 * Invariants:
 *  - each segment of the all-reduce is reduced once, by the node that owns it in that step,
 *    and then copied unchanged, so all members end with the same bytes (I4);
 *  - a failed view stays failed: every collective returns its error (begin) until ring_reform
 *    forms a new one.
 */
#include "ring/ring.h"

#include "base/hr_log.h"
#include "base/hr_time.h"

#include "ring/engine_internal.h"
#include "ring/fail_internal.h"
#include "ring/frame.h"
#include "ring/ring_internal.h"
#include "ring/tree_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* All-reduces of at most this many bytes gather every contribution and add them in rank order
 * (allreduce_small): n - 1 hops instead of 2(n - 1), so lower latency, at the cost of (n - 1)x the
 * traffic. */
#define RING_SMALL_BYTES (32 << 10)

/* ================================================================ collectives */

static hr_status begin(ring *r) {
    if (r->failed != HR_OK) return r->failed;
    if (r->view.n > 1 && (r->succ_fd < 0 || r->pred_fd < 0)) {
        snprintf(r->err, sizeof r->err, "the ring is not formed");
        return HR_ERR_INVAL;
    }
    return HR_OK;
}

static hr_status finish(ring *r, hr_status st) {
    r->seq++;
    return st;
}

/* Run r->sched over `base`: small collectives on the calling thread alone (engine.c; a hand-off
 * between threads would cost more than it saves), large ones on the threaded engine
 * (engine_mt.c) unless it is off. An engine that cannot start (no memory or threads) is
 * turned off for good: the frames are the same either way, so the neighbours never notice. */
static hr_status run_sched(ring *r, int coll, uint8_t *base) {
    const ring_sched *s = r->sched;
    size_t rx_bytes = 0;
    for (size_t i = 0; i < s->n_rx && rx_bytes <= RING_MT_BYTES; i++) rx_bytes += s->rx_len[i];
    if (rx_bytes > RING_MT_BYTES && r->mt_workers >= 0) {
        if (mt_start(r) == HR_OK) {
            r->mt_runs++;
            return mt_run(r, coll, base);
        }
        HR_WARN(RING, "the threaded engine could not start (out of memory or threads): the "
                      "collectives run on the calling thread from now on");
        r->mt_workers = -1;
    }
    return eng_run_links(r, coll, base, FROM_SUCC, FROM_PRED);
}

hr_status ring_fail_view(ring *r, hr_status st, const char *what) {
    if (r->failed != HR_OK) return r->failed;
    return fail_local(r, FRAME_COLL_ALLREDUCE, st, what);
}

hr_status ring_allgatherv(ring *r, const void *mine, size_t my_bytes, void *all,
                          const size_t *bytes_of) {
    HR_CHECK(begin(r));
    int n = r->view.n, k = r->rank;
    size_t off[RING_MAX_NODES] = {0}, tot = 0;
    for (int i = 0; i < n; i++) off[i] = tot, tot += bytes_of[i];
    if (my_bytes != bytes_of[k]) {
        snprintf(r->err, sizeof r->err, "all-gather: my_bytes %zu != bytes_of[%d] %zu", my_bytes, k,
                 bytes_of[k]);
        return HR_ERR_INVAL;
    }
    if (my_bytes && (const uint8_t *)all + off[k] != mine)
        memmove((uint8_t *)all + off[k], mine, my_bytes);
    if (n == 1) return finish(r, HR_OK);
    if (tree_takes(r, tot, n - 1)) { /* the blocks OR'ed into a buffer that is zero elsewhere */
        memset(all, 0, off[k]);
        memset((uint8_t *)all + off[k] + my_bytes, 0, tot - off[k] - my_bytes);
        return finish(r, tree_reduce(r, FRAME_COLL_ALLGATHER, all, tot, RX_OR));
    }
    int tx[RING_MAX_NODES], rx[RING_MAX_NODES];
    uint8_t add[RING_MAX_NODES];
    for (int s = 0; s < n - 1; s++) {
        tx[s] = (k - s + n) % n;
        rx[s] = (k - s - 1 + 2 * n) % n;
        add[s] = 0;
    }
    sched_blocks b = {off, bytes_of};
    if (sched_steps(r, &b, tx, rx, add, n - 1, 1) != HR_OK)
        return finish(r, fail_local(r, FRAME_COLL_ALLGATHER, HR_ERR_NOMEM, "out of memory"));
    return finish(r, run_sched(r, FRAME_COLL_ALLGATHER, all));
}

hr_status ring_allgather(ring *r, const void *mine, void *all, size_t bytes_each) {
    size_t sizes[RING_MAX_NODES];
    for (int i = 0; i < r->view.n; i++) sizes[i] = bytes_each;
    return ring_allgatherv(r, mine, bytes_each, all, sizes);
}

hr_status ring_barrier(ring *r) {
    HR_CHECK(begin(r));
    int n = r->view.n, k = r->rank;
    if (n == 1) return finish(r, HR_OK);
    uint8_t dummy = 0;
    if (tree_takes(r, 0, n - 1))
        return finish(r, tree_reduce(r, FRAME_COLL_BARRIER, &dummy, 0, RX_COPY));
    size_t off[RING_MAX_NODES] = {0}, len[RING_MAX_NODES] = {0};
    int tx[RING_MAX_NODES], rx[RING_MAX_NODES];
    uint8_t add[RING_MAX_NODES] = {0};
    for (int s = 0; s < n - 1; s++) {
        tx[s] = (k - s + n) % n;
        rx[s] = (k - s - 1 + 2 * n) % n;
    }
    sched_blocks b = {off, len};
    if (sched_steps(r, &b, tx, rx, add, n - 1, 1) != HR_OK)
        return finish(r, fail_local(r, FRAME_COLL_BARRIER, HR_ERR_NOMEM, "out of memory"));
    return finish(r, run_sched(r, FRAME_COLL_BARRIER, &dummy));
}

hr_status ring_broadcast(ring *r, void *buf, size_t bytes, int root) {
    HR_CHECK(begin(r));
    int n = r->view.n;
    if (root < 0 || root >= n) {
        snprintf(r->err, sizeof r->err, "broadcast: root rank %d out of range (0..%d)", root,
                 n - 1);
        return HR_ERR_INVAL;
    }
    if (n == 1) return finish(r, HR_OK);
    if (tree_takes(r, bytes, n - 1)) { /* the root's bytes OR'ed with zeros everywhere else */
        if (r->rank != root) memset(buf, 0, bytes);
        return finish(r, tree_reduce(r, FRAME_COLL_BROADCAST, buf, bytes, RX_OR));
    }
    int rel = (r->rank - root + n) % n;
    ring_sched *s = r->sched;
    size_t ns = sched_nseg(bytes, r->seg_bytes);
    if (sched_reserve(s, ns) != HR_OK)
        return finish(r, fail_local(r, FRAME_COLL_BROADCAST, HR_ERR_NOMEM, "out of memory"));
    s->n_tx = rel == n - 1 ? 0 : ns;
    s->n_rx = rel == 0 ? 0 : ns;
    for (size_t i = 0; i < ns; i++) {
        size_t lo = sched_cut(i, bytes, ns), hi = sched_cut(i + 1, bytes, ns);
        s->tx_off[i] = s->rx_off[i] = lo;
        s->tx_len[i] = s->rx_len[i] = hi - lo;
        s->tx_need[i] = rel == 0 ? 0 : i + 1;
        s->rx_add[i] = 0;
    }
    return finish(r, run_sched(r, FRAME_COLL_BROADCAST, buf));
}

/* Small all-reduce: gather every contribution, then add them in rank order. */
static hr_status allreduce_small(ring *r, float *buf, size_t count) {
    int n = r->view.n;
    size_t bytes = count * sizeof(float), need = bytes * (size_t)n;
    if (need > r->tmp_cap) {
        float *t = realloc(r->tmp, need);
        if (!t) return fail_local(r, FRAME_COLL_ALLREDUCE, HR_ERR_NOMEM, "out of memory");
        r->tmp = t;
        r->tmp_cap = need;
    }
    int k = r->rank;
    memcpy(r->tmp + (size_t)k * count, buf, bytes);
    int tx[RING_MAX_NODES], rx[RING_MAX_NODES];
    uint8_t add[RING_MAX_NODES] = {0};
    size_t off[RING_MAX_NODES], len[RING_MAX_NODES];
    for (int i = 0; i < n; i++) off[i] = (size_t)i * bytes, len[i] = bytes;
    for (int s = 0; s < n - 1; s++) {
        tx[s] = (k - s + n) % n;
        rx[s] = (k - s - 1 + 2 * n) % n;
    }
    sched_blocks b = {off, len};
    if (sched_steps(r, &b, tx, rx, add, n - 1, sizeof(float)) != HR_OK)
        return fail_local(r, FRAME_COLL_ALLREDUCE, HR_ERR_NOMEM, "out of memory");
    HR_CHECK(run_sched(r, FRAME_COLL_ALLREDUCE, (uint8_t *)r->tmp));
    memcpy(buf, r->tmp, bytes);
    for (int i = 1; i < n; i++) eng_add_floats(buf, r->tmp + (size_t)i * count, count);
    return HR_OK;
}

/* An all-reduce of count floats goes round the ring in n - 1 hops (allreduce_small) or
 * 2(n - 1) (reduce-scatter and all-gather). */
static int allreduce_is_small(const ring *r, size_t count) {
    return count * sizeof(float) <= RING_SMALL_BYTES || count < (size_t)r->view.n;
}

int ring_tree_takes_allreduce(const ring *r, size_t count) {
    const int n = r->view.n;
    if (n == 1 || count == 0) return 0;
    return tree_takes(r, count * sizeof(float), allreduce_is_small(r, count) ? n - 1 : 2 * (n - 1));
}

hr_status ring_allreduce_tree(ring *r, float *buf, size_t count) {
    HR_CHECK(begin(r));
    if (!ring_tree_takes_allreduce(r, count)) /* the caller's choice disagrees with the view's */
        return finish(r, fail_local(r, FRAME_COLL_ALLREDUCE, HR_ERR_INVAL,
                                    "an all-reduce the tree does not take was sent to it"));
    return finish(r, tree_reduce(r, FRAME_COLL_ALLREDUCE, (uint8_t *)buf, count * sizeof(float),
                                 RX_ADD));
}

/* The ring all-reduce's blocks: block j of count elements of esz bytes. */
static void allreduce_blocks(int n, size_t count, size_t esz, size_t *off, size_t *len) {
    for (int j = 0; j < n; j++) {
        size_t lo = sched_cut((size_t)j, count, (size_t)n),
               hi = sched_cut((size_t)j + 1, count, (size_t)n);
        off[j] = lo * esz;
        len[j] = (hi - lo) * esz;
    }
}

/* The ring all-reduce's steps: n - 1 of reduce-scatter (received frames reduced with `op`),
 * then n - 1 of all-gather (copied). */
static void allreduce_steps(int n, int k, uint8_t op, int *tx, int *rx, uint8_t *add) {
    for (int s = 0; s < n - 1; s++) { /* reduce-scatter */
        tx[s] = (k - s + n) % n;
        rx[s] = (k - s - 1 + 2 * n) % n;
        add[s] = op;
    }
    for (int t = 0; t < n - 1; t++) { /* all-gather of the reduced chunks */
        tx[n - 1 + t] = (k + 1 - t + n) % n;
        rx[n - 1 + t] = (k - t + n) % n;
        add[n - 1 + t] = RX_COPY;
    }
}

hr_status ring_allreduce_bf16(ring *r, float *buf, uint16_t *wire, float *dropped, size_t count) {
    if (dropped) memset(dropped, 0, count * sizeof *dropped);
    HR_CHECK(begin(r));
    int n = r->view.n, k = r->rank;
    if (n == 1 || count == 0) return finish(r, HR_OK);
    if (ring_tree_takes_allreduce(r, count) || allreduce_is_small(r, count))
        return ring_allreduce(r, buf, count); /* float32: latency, not bytes, rules there */
    for (size_t i = 0; i < count; i++) wire[i] = eng_bf16(buf[i]);
    size_t off[RING_MAX_NODES], len[RING_MAX_NODES];
    allreduce_blocks(n, count, sizeof *wire, off, len);
    int tx[2 * RING_MAX_NODES], rx[2 * RING_MAX_NODES];
    uint8_t add[2 * RING_MAX_NODES];
    allreduce_steps(n, k, RX_ADD_BF16, tx, rx, add);
    sched_blocks b = {off, len};
    if (sched_steps(r, &b, tx, rx, add, 2 * (n - 1), sizeof *wire) != HR_OK)
        return finish(r, fail_local(r, FRAME_COLL_ALLREDUCE_BF16, HR_ERR_NOMEM, "out of memory"));
    r->bf16_acc = buf;
    hr_status st = run_sched(r, FRAME_COLL_ALLREDUCE_BF16, (uint8_t *)wire);
    r->bf16_acc = NULL;
    if (st != HR_OK) return finish(r, st);
    /* buf holds, element by element, what this node rounded last: its own value for the block
     * it sent first, the float32 sum of a block it passed on, the whole sum of the block it
     * owns; each rounding's loss is dropped[i], and then every member takes the same bits */
    for (size_t i = 0; i < count; i++) {
        if (dropped) dropped[i] = buf[i] - eng_f32(eng_bf16(buf[i]));
        buf[i] = eng_f32(wire[i]);
    }
    return finish(r, HR_OK);
}

hr_status ring_allreduce(ring *r, float *buf, size_t count) {
    HR_CHECK(begin(r));
    int n = r->view.n, k = r->rank;
    if (n == 1 || count == 0) return finish(r, HR_OK);
    if (ring_tree_takes_allreduce(r, count))
        return finish(r, tree_reduce(r, FRAME_COLL_ALLREDUCE, (uint8_t *)buf, count * sizeof(float),
                                     RX_ADD));
    if (allreduce_is_small(r, count))
        return finish(r, allreduce_small(r, buf, count));
    size_t off[RING_MAX_NODES], len[RING_MAX_NODES];
    allreduce_blocks(n, count, sizeof(float), off, len);
    int tx[2 * RING_MAX_NODES], rx[2 * RING_MAX_NODES];
    uint8_t add[2 * RING_MAX_NODES];
    allreduce_steps(n, k, RX_ADD, tx, rx, add);
    sched_blocks b = {off, len};
    if (sched_steps(r, &b, tx, rx, add, 2 * (n - 1), sizeof(float)) != HR_OK)
        return finish(r, fail_local(r, FRAME_COLL_ALLREDUCE, HR_ERR_NOMEM, "out of memory"));
    return finish(r, run_sched(r, FRAME_COLL_ALLREDUCE, (uint8_t *)buf));
}

/* ================================================================ link probe */

/* The least wall time of RING_PROBE_REPS all-reduces of count floats of buf. */
static hr_status probe_time(ring *r, float *buf, size_t count, double *least) {
    *least = 0;
    for (int i = 0; i < RING_PROBE_REPS; i++) {
        const double t0 = hr_now();
        HR_CHECK(ring_allreduce(r, buf, count));
        const double t = hr_now() - t0;
        if (i == 0 || t < *least) *least = t;
    }
    return HR_OK;
}

hr_status ring_probe_links(ring *r, ring_link *out) {
    *out = (ring_link){0, 0};
    const int n = r->view.n;
    if (n < 2) return HR_OK;
    const size_t small = RING_PROBE_SMALL / sizeof(float), large = RING_PROBE_LARGE / sizeof(float);
    float *buf = calloc(large, sizeof *buf); /* zeros: the sums stay zero */
    if (!buf) return HR_ERR_NOMEM;
    const long cut = r->tree_cut;
    r->tree_cut = 0; /* the ring's own hops, on every member alike */
    double t_small = 0, t_large = 0;
    hr_status st = ring_allreduce(r, buf, large); /* untimed: the members arrive at odd times */
    if (st == HR_OK) st = probe_time(r, buf, small, &t_small);
    if (st == HR_OK) st = probe_time(r, buf, large, &t_large);
    r->tree_cut = cut;
    free(buf);
    if (st != HR_OK) return st;
    /* T(S) = H alpha + c S beta: two sizes, two unknowns; noise can make either negative */
    const double hops = 2.0 * (n - 1), c = 2.0 * (n - 1) / n;
    double beta = (t_large - t_small) / (c * (double)(RING_PROBE_LARGE - RING_PROBE_SMALL));
    if (!(beta > 1e-13)) beta = 1e-13; /* 80 Tbit/s: no link is faster */
    double alpha = (t_small - c * (double)RING_PROBE_SMALL * beta) / hops;
    if (!(alpha > 0)) alpha = 0;
    *out = (ring_link){alpha, beta};
    return HR_OK;
}
