/*
 * engine.c: schedules and the single-threaded engine (see engine_internal.h).
 *
 * Every collective is compiled into a schedule: the frames this node sends to its successor
 * (byte ranges of one buffer, each with the number of received frames it must wait for) and
 * the frames it receives from its predecessor (byte ranges, each added as floats or copied).
 * One engine runs any schedule with non-blocking sockets: it sends whatever is ready, receives
 * whatever has arrived, reduces each segment as soon as it has been verified, and sleeps in
 * poll() only when neither link can move. So both links run at once, reduction overlaps the
 * transfers, and no wait is longer than `timeout` without progress. Large collectives run on
 * the threaded engine (engine_mt.c) instead (coll.c chooses). Both report every failure with
 * fail.c's functions.
 *
 * Invariants:
 *  - a received frame's header is checked against the one expected (epoch, sequence number,
 *    collective, index, length) before its payload is read (I7);
 *  - in auth and encrypt modes no payload byte is added or copied before its tag verified.
 */
#include "ring/engine_internal.h"

#include "ring/fail_internal.h"
#include "ring/frame.h"
#include "ring/tcp.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

/* Collectives receiving at most this many bytes spin up to RING_SPIN_S before sleeping. */
#define RING_SPIN_BYTES (256 << 10)
#define RING_SPIN_S     50e-6

/* ================================================================ schedules */

hr_status sched_alloc(ring *r) {
    r->sched = calloc(1, sizeof *r->sched);
    return r->sched ? HR_OK : HR_ERR_NOMEM;
}

void sched_free(ring *r) {
    ring_sched *s = r->sched;
    if (!s) return;
    free(s->tx_off);
    free(s->tx_len);
    free(s->tx_need);
    free(s->rx_off);
    free(s->rx_len);
    free(s->rx_add);
    free(s);
    r->sched = NULL;
}

hr_status sched_reserve(ring_sched *s, size_t n) {
    if (n <= s->cap) return HR_OK;
    size_t *a = realloc(s->tx_off, n * sizeof *a);
    if (a) s->tx_off = a;
    size_t *b = realloc(s->tx_len, n * sizeof *b);
    if (b) s->tx_len = b;
    size_t *c = realloc(s->tx_need, n * sizeof *c);
    if (c) s->tx_need = c;
    size_t *d = realloc(s->rx_off, n * sizeof *d);
    if (d) s->rx_off = d;
    size_t *e = realloc(s->rx_len, n * sizeof *e);
    if (e) s->rx_len = e;
    uint8_t *f = realloc(s->rx_add, n);
    if (f) s->rx_add = f;
    if (!a || !b || !c || !d || !e || !f) return HR_ERR_NOMEM;
    s->cap = n;
    return HR_OK;
}

/* Build the schedule of a sequence of ring steps: at step k this node sends block tx_blk[k] and
 * receives block rx_blk[k] (adding floats when add[k]). The block sent at step k is the one
 * received at step k-1, so its i-th segment waits for that segment to arrive. */
hr_status sched_steps(ring *r, const sched_blocks *b, const int *tx_blk, const int *rx_blk,
                      const uint8_t *add, int steps, size_t esz) {
    ring_sched *s = r->sched;
    size_t total = 0;
    for (int k = 0; k < steps; k++)
        total += sched_nseg(b->len[tx_blk[k]], r->seg_bytes) +
                 sched_nseg(b->len[rx_blk[k]], r->seg_bytes);
    if (sched_reserve(s, total) != HR_OK) return HR_ERR_NOMEM;
    s->n_tx = s->n_rx = 0;
    size_t prev_rx_start = 0;
    for (int k = 0; k < steps; k++) {
        size_t len = b->len[tx_blk[k]], e = len / esz, ns = sched_nseg(len, r->seg_bytes);
        for (size_t i = 0; i < ns; i++) {
            size_t lo = sched_cut(i, e, ns), hi = sched_cut(i + 1, e, ns);
            s->tx_off[s->n_tx] = b->off[tx_blk[k]] + lo * esz;
            s->tx_len[s->n_tx] = (hi - lo) * esz;
            s->tx_need[s->n_tx] = k == 0 ? 0 : prev_rx_start + i + 1;
            s->n_tx++;
        }
        prev_rx_start = s->n_rx;
        len = b->len[rx_blk[k]], e = len / esz, ns = sched_nseg(len, r->seg_bytes);
        for (size_t i = 0; i < ns; i++) {
            size_t lo = sched_cut(i, e, ns), hi = sched_cut(i + 1, e, ns);
            s->rx_off[s->n_rx] = b->off[rx_blk[k]] + lo * esz;
            s->rx_len[s->n_rx] = (hi - lo) * esz;
            s->rx_add[s->n_rx] = add[k];
            s->n_rx++;
        }
    }
    return HR_OK;
}

/* ================================================================ the engine */

/* Lay frame e->ti out in e->t: sealed in tx_stage, or header and payload as two pieces. */
static void eng_frame(ring *r, eng *e) {
    size_t len = e->s->tx_len[e->ti];
    uint8_t *src = e->base + e->s->tx_off[e->ti];
    frame_hdr th = {FRAME_MAGIC,   FRAME_VERSION, FRAME_DATA,      (uint8_t)e->coll,
                    r->view.epoch, r->seq,        (uint32_t)e->ti, (uint32_t)len};
    if (e->secure) {
        frame_encode(&th, r->tx_stage);
        sec_seal(&ring_link_ch(r, e->t.link)->tx, r->tx_stage, src, len);
        e->t.iov[0] = (struct iovec){r->tx_stage, FRAME_HDR + len + e->tag};
        e->t.iovn = 1;
    } else {
        frame_encode(&th, e->t.hdr);
        e->t.iov[0] = (struct iovec){e->t.hdr, FRAME_HDR};
        e->t.iov[1] = (struct iovec){src, len};
        e->t.iovn = len ? 2 : 1;
    }
    e->t.left = FRAME_HDR + len + e->tag;
    e->tx_ready = 1;
}

/* Where the incoming stream stands in `e`, for fail_tx_trouble and fail_silent. */
static link_pos eng_pos(const ring *r, const eng *e) {
    return (link_pos){.hdr = r->rx_stage,
                      .got = e->rx_body ? 0 : e->rx_got,
                      .body = e->rx_body,
                      .left = e->rx_body ? e->rx_want - e->rx_got : 0};
}

/* Send every frame whose inputs have arrived, until the socket would block. */
static hr_status eng_send(ring *r, eng *e) {
    const ring_sched *s = e->s;
    while (e->ti < s->n_tx && e->ri >= s->tx_need[e->ti]) {
        if (!e->tx_ready) eng_frame(r, e);
        struct msghdr m = {.msg_iov = e->t.iov, .msg_iovlen = (size_t)e->t.iovn};
        ssize_t n = sendmsg(*ring_link_fd(r, e->t.link), &m, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return HR_OK;
            int err = errno ? errno : EPIPE;
            link_pos pp = eng_pos(r, e);
            return fail_tx_trouble(r, NULL, e->coll, e->t.link, err,
                                   e->rx_link == FROM_PRED ? &pp : NULL);
        }
        e->progress = 1;
        txf_advance(&e->t, (size_t)n);
        if (e->t.left == 0) {
            e->ti++;
            e->tx_ready = 0;
        }
    }
    return HR_OK;
}

/* Check the header of frame e->ri (in rx_stage) against the one expected: in mode none before
 * its payload is read, in secure modes once the whole frame verified. An abort frame ends the
 * collective with the failure it reports. */
hr_status eng_header(ring *r, eng *e) {
    frame_hdr h;
    char pw[RING_STR + 64];
    const int from = e->rx_link;
    long pid = ring_link_id(r, from);
    size_t ri = e->ri, want = e->s->rx_len[ri];
    const char *coll = frame_coll_name(e->coll);
    frame_decode(r->rx_stage, &h);
    ring_node_str(r, pid, pw, sizeof pw);
    if (h.magic != FRAME_MAGIC || h.version != FRAME_VERSION)
        return fail_view(r, &e->t, e->coll, HR_ERR_PROTO, pid, from,
                         "%s sent a malformed frame header (bad magic or version); connection "
                         "dropped",
                         pw);
    if (h.epoch != r->view.epoch)
        return fail_view(r, &e->t, e->coll, HR_ERR_VIEW, pid, from,
                         "%s sent a frame of view epoch %llu, this node is in %llu; frame dropped",
                         pw, (unsigned long long)h.epoch, (unsigned long long)r->view.epoch);
    if (h.type == FRAME_ABORT && e->secure)
        return fail_abort_report(r, &e->t, e->coll, r->rx_stage + FRAME_HDR, h.len, from);
    if (h.type == FRAME_ABORT) return fail_on_abort(r, &e->t, e->coll, r->rx_stage, from);
    if (h.type != FRAME_DATA || h.seq != r->seq || h.coll != e->coll)
        return fail_view(r, &e->t, e->coll, HR_ERR_PROTO, pid, from,
                         "%s sent a frame of %s #%llu while this node is in %s #%llu (members "
                         "must call the same collectives in the same order)",
                         pw, frame_coll_name(h.coll), (unsigned long long)h.seq, coll,
                         (unsigned long long)r->seq);
    if (h.index != ri)
        return fail_view(r, &e->t, e->coll, HR_ERR_PROTO, pid, from,
                         "%s sent frame %u of %u bytes, expected frame %zu of %zu bytes "
                         "(replayed, dropped or reordered frame); connection dropped",
                         pw, h.index, h.len, ri, want);
    if (h.len != want)
        return fail_view(r, &e->t, e->coll, HR_ERR_PROTO, pid, from,
                         "%s sent frame %u of %u bytes, expected %zu bytes: the nodes disagree "
                         "on the size of this %s (do they run the same config, model and "
                         "bucket_bytes?); connection dropped",
                         pw, h.index, h.len, want, coll);
    return HR_OK;
}

/* Secure modes: how many payload bytes frame e->ri has on the wire, from its header, which is
 * not verified yet. Only the type and the length are read, and only to find the tag; every
 * field is checked after the frame verified (the header is associated data of the tag).
 *  - an abort frame is read as long as it says, up to FRAME_ABORT_MAX (longer is no abort);
 *  - any other frame is read as min(its length, the expected length). Those bytes are on the
 *    wire whether the length is genuine or was altered, so the read never waits for bytes
 *    that were not sent, and the read stays inside rx_stage. An altered length fails
 *    verification (it is authenticated), as does a genuine longer frame, which could not be
 *    this frame anyway; a genuine shorter frame verifies and is reported as a size mismatch. */
static hr_status eng_frame_len(ring *r, eng *e) {
    frame_hdr h;
    size_t want = e->s->rx_len[e->ri];
    frame_decode(r->rx_stage, &h);
    if (h.type == FRAME_ABORT && h.len > FRAME_ABORT_MAX)
        return fail_link_auth(r, &e->t, e->coll, e->rx_link, "", "");
    e->rx_len = h.type == FRAME_ABORT || h.len < want ? h.len : want;
    return HR_OK;
}

/* Frame e->ri has arrived whole. Secure modes: verify it, then check its header. Then copy,
 * add or OR its payload into place. */
static hr_status eng_apply(ring *r, eng *e) {
    size_t len = e->rx_len;
    int add = e->s->rx_add[e->ri];
    uint8_t *out = e->base + e->s->rx_off[e->ri], *pay = r->rx_stage + FRAME_HDR;
    if (e->secure) {
        /* the plaintext of anything but a data frame stays in rx_stage (the type is checked
         * once verified); a data frame is never longer than its place */
        frame_hdr h;
        frame_decode(r->rx_stage, &h);
        uint8_t *dst = add || h.type != FRAME_DATA ? pay : out;
        if (sec_open(&ring_link_ch(r, e->rx_link)->rx, r->rx_stage, len, dst) != 0) {
            char f[32], hint[256];
            snprintf(f, sizeof f, " %zu", e->ri);
            fail_size_hint(hint, sizeof hint, r->rx_stage, e->s->rx_len[e->ri]);
            return fail_link_auth(r, &e->t, e->coll, e->rx_link, f, hint);
        }
        HR_CHECK(eng_header(r, e));
    }
    if (add == RX_ADD)
        eng_add_floats((float *)out, (const float *)pay, len / 4);
    else if (add == RX_ADD_BF16)
        eng_add_bf16((uint16_t *)out, r->bf16_acc + e->s->rx_off[e->ri] / 2,
                     (const uint16_t *)pay, len / 2);
    else if (add == RX_OR)
        for (size_t i = 0; i < len; i++) out[i] |= pay[i];
    return HR_OK;
}

/* Where the next bytes from the predecessor go: a header and a sealed or summed payload into
 * rx_stage; a plain payload that is copied straight into place. */
static uint8_t *eng_rx_dst(ring *r, const eng *e) {
    if (!e->rx_body) return r->rx_stage + e->rx_got;
    if (!e->secure && !e->s->rx_add[e->ri]) return e->base + e->s->rx_off[e->ri] + e->rx_got;
    return r->rx_stage + FRAME_HDR + e->rx_got;
}

/* Receive whatever has arrived, frame by frame, until the socket would block. */
static hr_status eng_recv(ring *r, eng *e) {
    while (e->ri < e->s->n_rx) {
        ssize_t n = e->rx_want > e->rx_got
                        ? recv(*ring_link_fd(r, e->rx_link), eng_rx_dst(r, e),
                               e->rx_want - e->rx_got, MSG_DONTWAIT)
                        : 0;
        if (e->rx_want > e->rx_got && n <= 0) {
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) break;
            return fail_rx_closed(r, &e->t, e->coll, e->rx_link, n == 0 ? 0 : errno);
        }
        if (n > 0) {
            e->rx_got += (size_t)n;
            e->progress = 1;
        }
        if (e->rx_got < e->rx_want) continue;
        if (!e->rx_body) {
            if (e->secure) {
                HR_CHECK(eng_frame_len(r, e));
            } else {
                HR_CHECK(eng_header(r, e));
                e->rx_len = e->s->rx_len[e->ri];
            }
            e->rx_body = 1;
            e->rx_got = 0;
            e->rx_want = e->rx_len + e->tag;
            if (e->rx_want > 0) continue;
        }
        HR_CHECK(eng_apply(r, e));
        e->ri++;
        e->rx_body = 0;
        e->rx_got = 0;
        e->rx_want = FRAME_HDR;
    }
    return HR_OK;
}

/* Nothing moved: wait for either link, at most until `timeout` after the last progress, and
 * blame the neighbour that held things up when it passes. */
static hr_status eng_wait(ring *r, eng *e, double last) {
    const ring_sched *s = e->s;
    char who[RING_STR + 64];
    int tx_wait = e->ti < s->n_tx && e->ri >= s->tx_need[e->ti];
    const int tx = e->t.link, rx = e->rx_link;
    struct pollfd p[2] = {{.fd = *ring_link_fd(r, rx), .events = e->ri < s->n_rx ? POLLIN : 0},
                          {.fd = *ring_link_fd(r, tx), .events = e->ti < s->n_tx ? POLLIN : 0}};
    if (tx_wait) p[1].events |= POLLOUT;
    if (!p[0].events) p[0].fd = -1;
    if (!p[1].events) p[1].fd = -1;
    const double limit = r->coll_timeout > r->timeout ? r->coll_timeout : r->timeout;
    int rc = last + limit > tcp_now() ? poll(p, 2, tcp_poll_ms(last + limit)) : 0;
    if (rc < 0 && errno == EINTR) return HR_OK;
    link_pos pp = eng_pos(r, e);
    if (rc == 0 && tcp_now() >= last + limit) {
        long id = ring_link_id(r, tx_wait ? tx : rx);
        ring_node_str(r, id, who, sizeof who);
        if (tx_wait && tx == FROM_SUCC)
            return fail_view(r, &e->t, e->coll, HR_ERR_TIMEOUT, id, FROM_SUCC,
                             "%s accepted no data for %.1f s (peer dead or hung?)", who, limit);
        /* a tree neighbour that reads nothing may be reading its other child first */
        if (tx_wait) return fail_silent(r, &e->t, e->coll, tx, 1, limit, NULL);
        return fail_silent(r, &e->t, e->coll, rx, 0, limit, &pp);
    }
    if (rc > 0 && e->ti < s->n_tx && (p[1].revents & (POLLIN | POLLHUP | POLLERR)))
        return fail_tx_trouble(r, &e->t, e->coll, tx, 0, rx == FROM_PRED ? &pp : NULL);
    return HR_OK;
}

/* Run the schedule in r->sched over `base`, sending on link `tx` and receiving from link `rx`:
 * both directions at once, each frame as soon as its inputs are there, waiting only when
 * neither link can move. */
static hr_status engine_st(ring *r, int coll, uint8_t *base, int tx, int rx) {
    eng e = {.s = r->sched,
             .coll = coll,
             .rx_link = rx,
             .base = base,
             .secure = r->keys.mode != RING_SEC_NONE,
             .t = {.link = tx},
             .rx_want = FRAME_HDR};
    e.tag = e.secure ? SEC_TAG : 0;
    const ring_sched *s = e.s;
    double last = tcp_now();
    /* Small collectives are latency-bound: poll the sockets for a few microseconds before
     * sleeping in poll(), which saves a wake-up per hop. Large ones never spin, so that nodes
     * sharing cores do not steal each other's time. */
    size_t rx_bytes = 0;
    for (size_t i = 0; i < s->n_rx && rx_bytes <= RING_SPIN_BYTES; i++) rx_bytes += s->rx_len[i];
    const double spin_s = rx_bytes <= RING_SPIN_BYTES ? RING_SPIN_S : 0;
    while (e.ti < s->n_tx || e.ri < s->n_rx) {
        e.progress = 0;
        HR_CHECK(eng_send(r, &e));
        HR_CHECK(eng_recv(r, &e));
        if (e.ti >= s->n_tx && e.ri >= s->n_rx) break;
        double now = tcp_now();
        if (e.progress) {
            last = now;
            continue;
        }
        if (now - last < spin_s) continue;
        HR_CHECK(eng_wait(r, &e, last));
    }
    return HR_OK;
}

hr_status eng_run_links(ring *r, int coll, uint8_t *base, int tx, int rx) {
    return engine_st(r, coll, base, tx, rx);
}
