/*
 * engine.c: schedules and the single-threaded engine (see ring_internal.h).
 *
 * Every collective is compiled into a schedule: the frames this node sends to its successor
 * (byte ranges of one buffer, each with the number of received frames it must wait for) and
 * the frames it receives from its predecessor (byte ranges, each added as floats or copied).
 * One engine runs any schedule with non-blocking sockets: it sends whatever is ready, receives
 * whatever has arrived, reduces each segment as soon as it has been verified, and sleeps in
 * poll() only when neither link can move. So both links run at once, reduction overlaps the
 * transfers, and no wait is longer than `timeout` without progress. eng_run hands large
 * collectives to the threaded engine (engine_mt.c) instead, which reports its failures with
 * the functions here.
 *
 * Invariants:
 *  - a received frame's header is checked against the one expected (epoch, sequence number,
 *    collective, index, length) before its payload is read (I7);
 *  - in auth and encrypt modes no payload byte is added or copied before its tag verified;
 *  - a failure is passed on round the ring both ways (abort frames), so every member names the
 *    same node.
 */
#include "ring/ring_internal.h"

#include "base/hr_log.h"
#include "ring/bytes.h"
#include "ring/frame.h"
#include "ring/tcp.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
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
            size_t lo = i * e / ns, hi = (i + 1) * e / ns;
            s->tx_off[s->n_tx] = b->off[tx_blk[k]] + lo * esz;
            s->tx_len[s->n_tx] = (hi - lo) * esz;
            s->tx_need[s->n_tx] = k == 0 ? 0 : prev_rx_start + i + 1;
            s->n_tx++;
        }
        prev_rx_start = s->n_rx;
        len = b->len[rx_blk[k]], e = len / esz, ns = sched_nseg(len, r->seg_bytes);
        for (size_t i = 0; i < ns; i++) {
            size_t lo = i * e / ns, hi = (i + 1) * e / ns;
            s->rx_off[s->n_rx] = b->off[rx_blk[k]] + lo * esz;
            s->rx_len[s->n_rx] = (hi - lo) * esz;
            s->rx_add[s->n_rx] = add[k];
            s->n_rx++;
        }
    }
    return HR_OK;
}

/* ================================================================ the engine */

/* Finish sending the frame in flight on its link (blocking, with a deadline). */
static hr_status tx_finish(ring *r, txf *t, double deadline) {
    int fd = *ring_link_fd(r, t->link);
    while (t->left > 0) {
        struct msghdr m = {.msg_iov = t->iov, .msg_iovlen = (size_t)t->iovn};
        ssize_t n = sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            eng_iov_advance(t, (size_t)n);
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            HR_CHECK(tcp_wait(fd, POLLOUT, deadline));
            continue;
        }
        return HR_ERR_PEER;
    }
    return HR_OK;
}

/* How long passing on news of a failure may take: a neighbour that is still working reads an
 * abort within milliseconds; one that has stopped reading must not hold this node up. */
static double spread_s(const ring *r) {
    return r->timeout < 1.0 ? r->timeout : 1.0;
}

/* Send an abort frame naming `culprit` on one link (fd, sealed with `d`). Abort payload:
 * culprit id i64 | status u32 | reporter id i64 | text. Best effort, bounded by the timeout. */
static void send_abort(ring *r, int fd, sec_dir *d, int coll, long culprit, long reporter,
                       hr_status st, const char *text) {
    if (fd < 0) return;
    size_t tl = strlen(text);
    if (tl > FRAME_ABORT_MAX - 20) tl = FRAME_ABORT_MAX - 20;
    uint8_t f[FRAME_HDR + FRAME_ABORT_MAX + SEC_TAG], body[FRAME_ABORT_MAX];
    le_put64(body, (uint64_t)culprit);
    le_put32(body + 8, (uint32_t)st);
    le_put64(body + 12, (uint64_t)reporter);
    memcpy(body + 20, text, tl);
    size_t len = 20 + tl, tag = 0;
    frame_hdr h = {FRAME_MAGIC,   FRAME_VERSION, FRAME_ABORT, (uint8_t)coll,
                   r->view.epoch, r->seq,        0,           (uint32_t)len};
    frame_encode(&h, f);
    if (r->keys.mode != RING_SEC_NONE) {
        sec_seal(d, f, body, len);
        tag = SEC_TAG;
    } else {
        memcpy(f + FRAME_HDR, body, len);
    }
    (void)tcp_send_all(fd, f, FRAME_HDR + len + tag, tcp_now() + spread_s(r));
}

/* Pass news of a failure to every neighbour (both of the ring, and the tree's), except the link
 * it came from, the reporter and the culprit, so that it travels round the ring both ways and
 * over the tree and every member names the same node. A node blamed for a link that failed
 * authentication is told too: it is alive and only sent frames, and without the news it would
 * see its links close and blame a neighbour. The frame in flight on a link is finished first so
 * that the abort starts on a frame boundary; a link that carries no data this way now (the
 * predecessor link, a tree link this node only reads) takes it at once. The predecessor is
 * told first: it is the one node whose link carries nothing else back. */
static void spread(ring *r, txf *t, int coll, long culprit, long reporter, hr_status st,
                   const char *text, int from) {
    static const int order[FROM_LINKS - 1] = {FROM_PRED, FROM_SUCC, FROM_TREE, FROM_TREE + 1,
                                              FROM_TREE + 2};
    int tell_culprit = st == HR_ERR_AUTH;
    for (int k = 0; k < FROM_LINKS - 1; k++) {
        int l = order[k], fd = *ring_link_fd(r, l);
        long id = ring_link_id(r, l);
        if (l == from || fd < 0 || id < 0 || id == reporter || (id == culprit && !tell_culprit))
            continue;
        if (t && t->link == l && t->left > 0 && tx_finish(r, t, tcp_now() + spread_s(r)) != HR_OK)
            continue;
        send_abort(r, fd, &ring_link_ch(r, l)->tx, coll, culprit, reporter, st, text);
    }
}

/* Record this view's failure: r->err names the collective and `text`, then the reporter when it
 * is another node, then `chain` (a note, or ""); logged (at error level when a new view cannot
 * cure it), the culprit remembered for the election. Passing the news on is the caller's. */
static hr_status fail_record(ring *r, int coll, hr_status st, long culprit, long reporter,
                             const char *text, const char *chain) {
    if (reporter == r->self_id) {
        snprintf(r->err, sizeof r->err, "%s #%llu (view epoch %llu): %.400s%.80s",
                 frame_coll_name(coll), (unsigned long long)r->seq,
                 (unsigned long long)r->view.epoch, text, chain);
    } else {
        char rw[RING_STR + 64];
        ring_node_str(r, reporter, rw, sizeof rw);
        snprintf(r->err, sizeof r->err,
                 "%s #%llu (view epoch %llu): %.240s (reported by %.64s)%.100s",
                 frame_coll_name(coll), (unsigned long long)r->seq,
                 (unsigned long long)r->view.epoch, text, rw, chain);
    }
    if (st == HR_ERR_AUTH || st == HR_ERR_PROTO) /* not cured by a new view */
        HR_ERROR(RING, "%s", r->err);
    else
        HR_WARN(RING, "%s", r->err);
    r->suspect = culprit;
    r->failed = st;
    return st;
}

/* Record a failure of this view, blaming node `culprit`, seen `from` a link or here. The
 * links stay open (closing them would look like yet another failure to the neighbours) until
 * ring_reform or ring_free, except a link that carried a bad frame (the predecessor's, a
 * tree link's): it is dropped, after an abort on it tells the sender why its frames are no
 * longer read. */
hr_status eng_fail_view(ring *r, txf *t, int coll, hr_status st, long culprit, int from,
                        const char *fmt, ...) {
    char what[HR_ERRLEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    fail_record(r, coll, st, culprit, r->self_id, what, "");
    spread(r, t, coll, culprit, r->self_id, st, what, from);
    if (from != FROM_SUCC && from != FROM_HERE &&
        (st == HR_ERR_AUTH || st == HR_ERR_PROTO || st == HR_ERR_VIEW)) {
        send_abort(r, *ring_link_fd(r, from), &ring_link_ch(r, from)->tx, coll, culprit,
                   r->self_id, st, what);
        tcp_close(ring_link_fd(r, from));
    }
    return st;
}

/* A frame on the link `from` failed authentication (or, unverified, cannot be a genuine one). */
hr_status eng_link_auth_fail(ring *r, txf *t, int coll, int from, const char *frame) {
    char pw[RING_STR + 64];
    long nid = ring_link_id(r, from);
    ring_node_str(r, nid, pw, sizeof pw);
    return eng_fail_view(
        r, t, coll, HR_ERR_AUTH, nid, from,
        "authentication failed on the %slink from %s (tampered or corrupted frame%s); "
        "%sframe unused",
        from >= FROM_TREE ? "tree " : "", pw, frame,
        from != FROM_SUCC ? "connection dropped, " : "");
}

/* An abort frame's payload: culprit id i64 | status u32 | reporter id i64 | text. */
typedef struct {
    long culprit, reporter;
    hr_status st;
    char text[FRAME_ABORT_MAX + 1];
} abort_msg;

/* Parse a payload of `len` bytes; -1 when it is too short or too long to be an abort. */
static int abort_parse(const uint8_t *body, size_t len, abort_msg *m) {
    if (len < 20 || len > FRAME_ABORT_MAX) return -1;
    m->culprit = (long)le_get64(body);
    m->st = (hr_status)le_get32(body + 8);
    if (m->st <= HR_OK || m->st >= HR_STATUS_COUNT) m->st = HR_ERR_PEER;
    m->reporter = (long)le_get64(body + 12);
    memcpy(m->text, body + 20, len - 20);
    m->text[len - 20] = 0;
    for (char *q = m->text; *q; q++)
        if (*q < 32 || *q > 126) *q = '?';
    return 0;
}

/* The member before `id` in the view's ring order, or -1 when `id` is not a member. */
static long view_pred_of(const ring *r, long id) {
    for (int i = 0; i < r->view.n; i++)
        if (r->view.ids[i] == id) return r->view.ids[(i + r->view.n - 1) % r->view.n];
    return -1;
}

/* Whether nodes `a` and `b` are neighbours in this view's tree. */
static int view_tree_adjacent(const ring *r, long a, long b) {
    if (!r->tree_on) return 0;
    int ra = -1, rb = -1, nb[3];
    for (int i = 0; i < r->view.n; i++) {
        if (r->view.ids[i] == a) ra = i;
        if (r->view.ids[i] == b) rb = i;
    }
    if (ra < 0 || rb < 0) return 0;
    tree_links_of(ra, r->view.n, nb);
    return nb[0] == rb || nb[1] == rb || nb[2] == rb;
}

/* A reporter that blames the node it waited on for silence may be wrong: that node may be
 * alive and waiting in turn (on ITS predecessor, or on a tree neighbour), timing out at about
 * the same moment. Such a blame of the reporter's predecessor or tree neighbour is provisional
 * until the blamed node has had time to speak. */
static int blames_silent(const ring *r, const abort_msg *m) {
    return m->st == HR_ERR_TIMEOUT && m->culprit != r->self_id && m->reporter != r->self_id &&
           (m->culprit == view_pred_of(r, m->reporter) ||
            view_tree_adjacent(r, m->culprit, m->reporter));
}

/* Read link `from` (the predecessor's, or a tree link), from where its stream stands (`pp`;
 * NULL: at a frame boundary), until `deadline`: skip data frames (each takes a nonce counter,
 * as when it is opened) up to the next abort frame of this view, verified in secure modes. 1
 * with its payload in `body` (FRAME_ABORT_MAX + 1 bytes) and its length in `len`; 0 when the
 * link closed, the time passed or something unreadable came. */
static int link_read_abort(ring *r, int from, const link_pos *pp, double deadline,
                           uint8_t *body, size_t *len) {
    int fd = *ring_link_fd(r, from);
    sec_dir *rx = &ring_link_ch(r, from)->rx;
    if (ring_link_id(r, from) < 0 || fd < 0) return 0;
    const size_t tag = r->keys.mode != RING_SEC_NONE ? SEC_TAG : 0;
    uint8_t *f = r->rx_stage;
    size_t skip = pp && pp->body ? pp->left : 0, got = pp && !pp->body ? pp->got : 0;
    uint64_t ctr = rx->ctr;
    if (got > 0) memmove(f, pp->hdr, got);
    for (;;) {
        while (skip > 0) { /* the rest of a data frame nobody will use */
            size_t n = skip < r->stage_cap ? skip : r->stage_cap;
            if (tcp_recv_all(fd, f, n, deadline) != HR_OK) return 0;
            skip -= n;
            if (skip == 0) ctr++;
        }
        if (tcp_recv_all(fd, f + got, FRAME_HDR - got, deadline) != HR_OK) return 0;
        got = 0;
        frame_hdr h;
        frame_decode(f, &h);
        if (h.magic != FRAME_MAGIC || h.version != FRAME_VERSION) return 0;
        if (h.type == FRAME_DATA) {
            if (h.len + tag > r->stage_cap) return 0; /* no frame of this ring */
            skip = h.len + tag;
            if (skip == 0) ctr++;
            continue;
        }
        if (h.type != FRAME_ABORT || h.len > FRAME_ABORT_MAX) return 0;
        if (tcp_recv_all(fd, f + FRAME_HDR, h.len + tag, deadline) != HR_OK) return 0;
        if (tag && sec_open_at(rx, ctr, f, h.len, body) != 0) return 0;
        if (!tag) memcpy(body, f + FRAME_HDR, h.len);
        if (h.epoch != r->view.epoch) return 0;
        rx->ctr = ctr + 1;
        *len = h.len;
        return 1;
    }
}

/* `m` blames a node for silence (blames_silent, or this node's own blame of the node on link
 * `from`). Wait up to spread_s on link `from` (the predecessor's, or the tree link the blame
 * concerns or came on) for more news: any abort that comes on it proves the node there alive
 * (it sent or passed it on), so the blame was provisional and the news is newer: the blamed
 * node's own abort, naming the node it waited on, or one from further back that the nodes in
 * between passed along. It is adopted and passed on at once, so the nodes further on learn
 * the same, and the wait goes on while what is adopted is provisional in turn. The link's
 * stream stands at `pp` (NULL: at a frame boundary). `chain` gets a note naming the nodes found
 * waiting, or "". */
static void follow_blame(ring *r, txf *t, int coll, int from, const link_pos *pp, abort_msg *m,
                         char *chain, size_t n) {
    const double deadline = tcp_now() + spread_s(r);
    char names[RING_STR * 3] = "";
    int k = 0;
    uint8_t body[FRAME_ABORT_MAX + 1];
    size_t len;
    abort_msg next;
    chain[0] = 0;
    for (int hops = 0; hops < r->view.n; hops++, pp = NULL) {
        if (!link_read_abort(r, from, pp, deadline, body, &len) ||
            abort_parse(body, len, &next) != 0 || next.culprit == r->self_id)
            break;
        char cw[RING_STR + 64];
        size_t used = strlen(names);
        ring_node_str(r, m->culprit, cw, sizeof cw);
        snprintf(names + used, sizeof names - used, "%s%s", k ? ", " : "", cw);
        k++;
        *m = next;
        spread(r, t, coll, m->culprit, m->reporter, m->st, m->text, from);
        if (!blames_silent(r, m)) break;
    }
    if (k && from == FROM_PRED)
        snprintf(chain, n, "; %s %s alive, waiting on %s predecessor%s", names,
                 k > 1 ? "were" : "was", k > 1 ? "their" : "its", k > 1 ? "s" : "");
    else if (k)
        snprintf(chain, n, "; %s %s alive, waiting on other nodes", names,
                 k > 1 ? "were" : "was");
}

/* The node on link `from` moved nothing for `limit`. It may be waiting itself, on its own
 * predecessor or tree neighbour: then it times out at about the same moment and its abort
 * names the node that really stopped. So this node's blame goes to the neighbours at once (a
 * node waiting on this one learns it is alive and waits for the rest of the news), and this
 * node reports the blamed node only when no abort of its own came from it within spread_s.
 * The link's incoming stream is at `pp`. */
hr_status eng_silent(ring *r, txf *t, int coll, int from, int tx, double limit,
                     const link_pos *pp) {
    char who[RING_STR + 64], chain[RING_STR * 4] = "";
    abort_msg m = {.culprit = ring_link_id(r, from), .reporter = r->self_id, .st = HR_ERR_TIMEOUT};
    ring_node_str(r, m.culprit, who, sizeof who);
    snprintf(m.text, sizeof m.text, "%s %s for %.1f s (peer dead or hung?)", who,
             tx ? "accepted no data" : "sent nothing", limit);
    spread(r, t, coll, m.culprit, m.reporter, m.st, m.text, from);
    follow_blame(r, t, coll, from, pp, &m, chain, sizeof chain);
    return fail_record(r, coll, m.st, m.culprit, m.reporter, m.text, chain);
}

/* Report the abort frame whose payload (`len` bytes, verified in secure modes) is `body`, which
 * came on link `from`, and pass it on. A provisional blame that came from the predecessor or
 * over the tree (blames_silent) waits for the blamed node's own news first (follow_blame). */
static hr_status abort_report(ring *r, txf *t, int coll, uint8_t *body, size_t len, int from) {
    abort_msg m;
    if (abort_parse(body, len, &m) != 0) {
        char pw[RING_STR + 64];
        long nid = ring_link_id(r, from);
        ring_node_str(r, nid, pw, sizeof pw);
        return eng_fail_view(r, t, coll, HR_ERR_PROTO, nid, from, "%s sent a malformed abort frame",
                             pw);
    }
    /* pass it on unchanged, so the next member names the same culprit and reporter */
    if (m.reporter != r->self_id) spread(r, t, coll, m.culprit, m.reporter, m.st, m.text, from);
    char chain[RING_STR * 4] = "";
    if (from != FROM_SUCC && from != FROM_HERE && blames_silent(r, &m))
        follow_blame(r, t, coll, from, NULL, &m, chain, sizeof chain);
    return fail_record(r, coll, m.st, m.culprit, m.reporter, m.text, chain);
}

/* Read the rest of a frame whose header `raw` came in on the link `from` and that should be an
 * abort. In secure modes it is verified before any header field but the length is used; the
 * length is bounded first (no genuine abort is longer), so the read stays in `f`. */
static hr_status on_abort(ring *r, txf *t, int coll, const uint8_t *raw, int from) {
    char pw[RING_STR + 64];
    int fd = *ring_link_fd(r, from);
    sec_dir *d = &ring_link_ch(r, from)->rx;
    long nid = ring_link_id(r, from);
    ring_node_str(r, nid, pw, sizeof pw);
    size_t tag = r->keys.mode != RING_SEC_NONE ? SEC_TAG : 0;
    frame_hdr h;
    frame_decode(raw, &h);
    if (h.len > FRAME_ABORT_MAX && tag) return eng_link_auth_fail(r, t, coll, from, "");
    if (h.len > FRAME_ABORT_MAX) return abort_report(r, t, coll, NULL, h.len, from);
    uint8_t f[FRAME_HDR + FRAME_ABORT_MAX + SEC_TAG], body[FRAME_ABORT_MAX + 1];
    memcpy(f, raw, FRAME_HDR);
    if (tcp_recv_all(fd, f + FRAME_HDR, h.len + tag, tcp_now() + r->timeout) != HR_OK)
        return eng_fail_view(r, t, coll, HR_ERR_PEER, nid, from, "%s closed the connection", pw);
    if (tag && sec_open(d, f, h.len, body) != 0) return eng_link_auth_fail(r, t, coll, from, "");
    if (!tag) memcpy(body, f + FRAME_HDR, h.len);
    if (h.magic != FRAME_MAGIC || h.version != FRAME_VERSION || h.type != FRAME_ABORT ||
        h.epoch != r->view.epoch)
        return eng_fail_view(r, t, coll, HR_ERR_PROTO, nid, from,
                             "%s sent unexpected data the wrong way; connection dropped", pw);
    return abort_report(r, t, coll, body, h.len, from);
}

/* The successor link closed with no abort on it. That need not be the successor's doing: a node
 * that finds a tampered frame drops the link it came on, and whatever sits in between (a proxy,
 * a middlebox) may then close this node's link too. News of such a failure travels round the
 * ring and reaches this node on its predecessor link behind the data frames in flight. Read
 * that link for up to spread_s, skipping data frames (each takes a nonce counter, as when it is
 * opened), and report the first abort frame, verified in secure modes. HR_OK when none came:
 * the link closed, the time passed or something unreadable came; the caller then blames the
 * successor. */
static hr_status news_from_pred(ring *r, txf *t, int coll, const link_pos *pp) {
    if (!pp || r->pred < 0 || r->pred_fd < 0 || r->pred == r->succ) return HR_OK;
    uint8_t body[FRAME_ABORT_MAX + 1];
    size_t len;
    if (!link_read_abort(r, FROM_PRED, pp, tcp_now() + spread_s(r), body, &len)) return HR_OK;
    return abort_report(r, t, coll, body, len, FROM_PRED);
}

/* Something happened on link `from` (the successor's, or a tree link this node sends on), which
 * carries nothing this way but an abort: a queued abort frame explains the failure; otherwise
 * news from the predecessor may (news_from_pred, when `pp` says where its stream stands), else
 * the node at the other end is gone. */
hr_status eng_tx_trouble(ring *r, txf *t, int coll, int from, int e, const link_pos *pp) {
    char sw[RING_STR + 64];
    long sid = ring_link_id(r, from);
    int fd = *ring_link_fd(r, from);
    ring_node_str(r, sid, sw, sizeof sw);
    uint8_t raw[FRAME_HDR];
    ssize_t n = recv(fd, raw, 1, MSG_DONTWAIT | MSG_PEEK);
    if (n > 0) {
        if (tcp_recv_all(fd, raw, FRAME_HDR, tcp_now() + r->timeout) == HR_OK)
            return on_abort(r, t, coll, raw, from);
        return eng_fail_view(r, t, coll, HR_ERR_PROTO, sid, from,
                             "%s sent unexpected data the wrong way; connection dropped", sw);
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && e == 0) return HR_OK;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) e = errno;
    hr_status st = news_from_pred(r, t, coll, pp);
    if (st != HR_OK) return st;
    return eng_fail_view(r, t, coll, HR_ERR_PEER, sid, from, "%s %s", sw,
                         e == 0 || e == EPIPE || e == ECONNRESET
                             ? "closed the connection (peer died?)"
                             : strerror(e));
}

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

/* Where the incoming stream stands in `e`, for eng_tx_trouble and eng_silent. */
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
            return eng_tx_trouble(r, NULL, e->coll, e->t.link, err,
                                  e->rx_link == FROM_PRED ? &pp : NULL);
        }
        e->progress = 1;
        eng_iov_advance(&e->t, (size_t)n);
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
        return eng_fail_view(r, &e->t, e->coll, HR_ERR_PROTO, pid, from,
                             "%s sent a malformed frame header (bad magic or version); connection "
                             "dropped",
                             pw);
    if (h.epoch != r->view.epoch)
        return eng_fail_view(
            r, &e->t, e->coll, HR_ERR_VIEW, pid, from,
            "%s sent a frame of view epoch %llu, this node is in %llu; frame dropped", pw,
            (unsigned long long)h.epoch, (unsigned long long)r->view.epoch);
    if (h.type == FRAME_ABORT && e->secure)
        return abort_report(r, &e->t, e->coll, r->rx_stage + FRAME_HDR, h.len, from);
    if (h.type == FRAME_ABORT) return on_abort(r, &e->t, e->coll, r->rx_stage, from);
    if (h.type != FRAME_DATA || h.seq != r->seq || h.coll != e->coll)
        return eng_fail_view(r, &e->t, e->coll, HR_ERR_PROTO, pid, from,
                             "%s sent a frame of %s #%llu while this node is in %s #%llu (members "
                             "must call the same collectives in the same order)",
                             pw, frame_coll_name(h.coll), (unsigned long long)h.seq, coll,
                             (unsigned long long)r->seq);
    if (h.index != ri)
        return eng_fail_view(r, &e->t, e->coll, HR_ERR_PROTO, pid, from,
                             "%s sent frame %u of %u bytes, expected frame %zu of %zu bytes "
                             "(replayed, dropped or reordered frame); connection dropped",
                             pw, h.index, h.len, ri, want);
    if (h.len != want)
        return eng_fail_view(r, &e->t, e->coll, HR_ERR_PROTO, pid, from,
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
        return eng_link_auth_fail(r, &e->t, e->coll, e->rx_link, "");
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
            char f[32];
            snprintf(f, sizeof f, " %zu", e->ri);
            return eng_link_auth_fail(r, &e->t, e->coll, e->rx_link, f);
        }
        HR_CHECK(eng_header(r, e));
    }
    if (add == RX_ADD)
        eng_add_floats((float *)out, (const float *)pay, len / 4);
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
            int err = n == 0 ? 0 : errno;
            char pw[RING_STR + 64];
            long pid = ring_link_id(r, e->rx_link);
            ring_node_str(r, pid, pw, sizeof pw);
            return eng_fail_view(r, &e->t, e->coll, HR_ERR_PEER, pid, e->rx_link, "%s %s", pw,
                                 err == 0            ? "closed the connection (peer died?)"
                                 : err == ECONNRESET ? "reset the connection (peer died?)"
                                                     : strerror(err));
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
    double left = last + limit - tcp_now();
    int rc = left > 0 ? poll(p, 2, (int)(left * 1000) + 1) : 0;
    if (rc < 0 && errno == EINTR) return HR_OK;
    link_pos pp = eng_pos(r, e);
    if (rc == 0 && tcp_now() >= last + limit) {
        long id = ring_link_id(r, tx_wait ? tx : rx);
        ring_node_str(r, id, who, sizeof who);
        if (tx_wait && tx == FROM_SUCC)
            return eng_fail_view(r, &e->t, e->coll, HR_ERR_TIMEOUT, id, FROM_SUCC,
                                 "%s accepted no data for %.1f s (peer dead or hung?)", who, limit);
        /* a tree neighbour that reads nothing may be reading its other child first */
        if (tx_wait) return eng_silent(r, &e->t, e->coll, tx, 1, limit, NULL);
        return eng_silent(r, &e->t, e->coll, rx, 0, limit, &pp);
    }
    if (rc > 0 && e->ti < s->n_tx && (p[1].revents & (POLLIN | POLLHUP | POLLERR)))
        return eng_tx_trouble(r, &e->t, e->coll, tx, 0, rx == FROM_PRED ? &pp : NULL);
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

/* Run r->sched: small collectives on the calling thread alone (a hand-off between threads
 * would cost more than it saves), large ones on the threaded engine unless it is off. */
hr_status eng_run(ring *r, int coll, uint8_t *base) {
    const ring_sched *s = r->sched;
    size_t rx_bytes = 0;
    for (size_t i = 0; i < s->n_rx && rx_bytes <= RING_MT_BYTES; i++) rx_bytes += s->rx_len[i];
    if (rx_bytes > RING_MT_BYTES && r->mt_workers >= 0) {
        r->mt_runs++;
        return mt_run(r, coll, base);
    }
    return engine_st(r, coll, base, FROM_SUCC, FROM_PRED);
}

hr_status eng_run_links(ring *r, int coll, uint8_t *base, int tx, int rx) {
    return engine_st(r, coll, base, tx, rx);
}
