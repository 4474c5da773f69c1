/*
 * fail.c: a view's failures (see fail_internal.h): how a failure seen in a collective is
 * recorded, told to the neighbours in abort frames, and traced to the node that really stopped.
 *
 * Both engines (engine.c, engine_mt.c) report every failure with the functions here, so the
 * messages and the abort frames are the same whichever engine ran the collective.
 *
 * Invariants:
 *  - a failure is passed on round the ring both ways and over the tree (abort frames), so every
 *    member names the same node;
 *  - an abort frame that comes in is verified in secure modes before any field of it but its
 *    length is used, and that length is bounded first;
 *  - a blame for silence of a predecessor or a tree neighbour is provisional until the blamed
 *    node has had time to speak (follow_blame).
 */
#include "ring/fail_internal.h"

#include "base/hr_log.h"
#include "ring/bytes.h"
#include "ring/frame.h"
#include "ring/tcp.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

/* Finish sending the frame in flight on its link (blocking, with a deadline). */
static hr_status tx_finish(ring *r, txf *t, double deadline) {
    int fd = *ring_link_fd(r, t->link);
    while (t->left > 0) {
        struct msghdr m = {.msg_iov = t->iov, .msg_iovlen = (size_t)t->iovn};
        ssize_t n = sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            txf_advance(t, (size_t)n);
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
hr_status fail_view(ring *r, txf *t, int coll, hr_status st, long culprit, int from,
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
hr_status fail_link_auth(ring *r, txf *t, int coll, int from, const char *frame, const char *hint) {
    char pw[RING_STR + 64];
    long nid = ring_link_id(r, from);
    ring_node_str(r, nid, pw, sizeof pw);
    return fail_view(r, t, coll, HR_ERR_AUTH, nid, from,
                     "authentication failed on the %slink from %s (tampered or corrupted "
                     "frame%s)%s; %sframe unused",
                     from >= FROM_TREE ? "tree " : "", pw, frame, hint,
                     from != FROM_SUCC ? "connection dropped, " : "");
}

const char *fail_size_hint(char *out, size_t n, const uint8_t *hdr, size_t want) {
    frame_hdr h;
    frame_decode(hdr, &h);
    if (h.type == FRAME_DATA && h.len != want)
        snprintf(out, n,
                 "; its header, not verified, gives %u bytes where %zu were expected: unless it "
                 "was tampered with, the nodes disagree on the size of this collective (another "
                 "model or bucket_bytes?)",
                 h.len, want);
    else
        out[0] = 0;
    return out;
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
hr_status fail_silent(ring *r, txf *t, int coll, int from, int tx, double limit,
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
hr_status fail_abort_report(ring *r, txf *t, int coll, uint8_t *body, size_t len, int from) {
    abort_msg m;
    if (abort_parse(body, len, &m) != 0) {
        char pw[RING_STR + 64];
        long nid = ring_link_id(r, from);
        ring_node_str(r, nid, pw, sizeof pw);
        return fail_view(r, t, coll, HR_ERR_PROTO, nid, from, "%s sent a malformed abort frame",
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
hr_status fail_on_abort(ring *r, txf *t, int coll, const uint8_t *raw, int from) {
    char pw[RING_STR + 64];
    int fd = *ring_link_fd(r, from);
    sec_dir *d = &ring_link_ch(r, from)->rx;
    long nid = ring_link_id(r, from);
    ring_node_str(r, nid, pw, sizeof pw);
    size_t tag = r->keys.mode != RING_SEC_NONE ? SEC_TAG : 0;
    frame_hdr h;
    frame_decode(raw, &h);
    if (h.len > FRAME_ABORT_MAX && tag) return fail_link_auth(r, t, coll, from, "", "");
    if (h.len > FRAME_ABORT_MAX) return fail_abort_report(r, t, coll, NULL, h.len, from);
    uint8_t f[FRAME_HDR + FRAME_ABORT_MAX + SEC_TAG], body[FRAME_ABORT_MAX + 1];
    memcpy(f, raw, FRAME_HDR);
    if (tcp_recv_all(fd, f + FRAME_HDR, h.len + tag, tcp_now() + r->timeout) != HR_OK)
        return fail_view(r, t, coll, HR_ERR_PEER, nid, from, "%s closed the connection", pw);
    if (tag && sec_open(d, f, h.len, body) != 0) return fail_link_auth(r, t, coll, from, "", "");
    if (!tag) memcpy(body, f + FRAME_HDR, h.len);
    if (h.magic != FRAME_MAGIC || h.version != FRAME_VERSION || h.type != FRAME_ABORT ||
        h.epoch != r->view.epoch)
        return fail_view(r, t, coll, HR_ERR_PROTO, nid, from,
                         "%s sent unexpected data the wrong way; connection dropped", pw);
    return fail_abort_report(r, t, coll, body, h.len, from);
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
    return fail_abort_report(r, t, coll, body, len, FROM_PRED);
}

/* Something happened on link `from` (the successor's, or a tree link this node sends on), which
 * carries nothing this way but an abort: a queued abort frame explains the failure; otherwise
 * news from the predecessor may (news_from_pred, when `pp` says where its stream stands), else
 * the node at the other end is gone. */
hr_status fail_tx_trouble(ring *r, txf *t, int coll, int from, int e, const link_pos *pp) {
    char sw[RING_STR + 64];
    long sid = ring_link_id(r, from);
    int fd = *ring_link_fd(r, from);
    ring_node_str(r, sid, sw, sizeof sw);
    uint8_t raw[FRAME_HDR];
    ssize_t n = recv(fd, raw, 1, MSG_DONTWAIT | MSG_PEEK);
    if (n > 0) {
        if (tcp_recv_all(fd, raw, FRAME_HDR, tcp_now() + r->timeout) == HR_OK)
            return fail_on_abort(r, t, coll, raw, from);
        return fail_view(r, t, coll, HR_ERR_PROTO, sid, from,
                         "%s sent unexpected data the wrong way; connection dropped", sw);
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && e == 0) return HR_OK;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) e = errno;
    hr_status st = news_from_pred(r, t, coll, pp);
    if (st != HR_OK) return st;
    return fail_view(r, t, coll, HR_ERR_PEER, sid, from, "%s %s", sw,
                     e == 0 || e == EPIPE || e == ECONNRESET ? "closed the connection (peer died?)"
                                                             : strerror(e));
}

/* The predecessor link closed with no abort on it; news of the failure may wait on the successor
 * link instead. A node that drops the link a bad frame came on tells the sender why on that link
 * alone (fail_view), and in a ring of two that sender is this node's predecessor and successor
 * both: the abort sits on the successor link, which this node stops watching once it has sent its
 * frames, and the predecessor link's close (that node's exit, say) comes first. Read an abort
 * queued on the successor link, waiting for one until `deadline`, and report it. HR_OK when none
 * came: the link closed (a node that dies closes both at once), the time passed or something
 * unreadable came; the caller then blames the predecessor. */
static hr_status news_from_succ(ring *r, txf *t, int coll, double deadline) {
    int fd = r->succ_fd;
    uint8_t raw[FRAME_HDR];
    for (;;) {
        ssize_t n = recv(fd, raw, 1, MSG_DONTWAIT | MSG_PEEK);
        if (n > 0) break;
        if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return HR_OK;
        if (errno != EINTR && tcp_wait(fd, POLLIN, deadline) != HR_OK) return HR_OK;
    }
    if (tcp_recv_all(fd, raw, FRAME_HDR, tcp_now() + spread_s(r)) != HR_OK) return HR_OK;
    return fail_on_abort(r, t, coll, raw, FROM_SUCC);
}

/* The link `from` that this node receives on closed (e: 0 at end-of-file, else the error). On
 * the predecessor link an abort queued on the successor link explains it (news_from_succ); it is
 * waited for up to spread_s in a ring of two, where both links join the same node, and only
 * taken if already there in a larger ring, where a node that died would be blamed that much
 * later. Else the node at the other end is blamed. */
hr_status fail_rx_closed(ring *r, txf *t, int coll, int from, int e) {
    char pw[RING_STR + 64];
    long pid = ring_link_id(r, from);
    ring_node_str(r, pid, pw, sizeof pw);
    if (from == FROM_PRED && r->succ_fd >= 0 && r->succ >= 0) {
        hr_status st =
            news_from_succ(r, t, coll, tcp_now() + (r->pred == r->succ ? spread_s(r) : 0));
        if (st != HR_OK) return st;
    }
    return fail_view(r, t, coll, HR_ERR_PEER, pid, from, "%s %s", pw,
                     e == 0            ? "closed the connection (peer died?)"
                     : e == ECONNRESET ? "reset the connection (peer died?)"
                                       : strerror(e));
}

/* A local failure in the middle of a collective: the others are already sending, so the view
 * is failed and they are told. */
hr_status fail_local(ring *r, int coll, hr_status st, const char *what) {
    char me[RING_STR + 64];
    ring_node_str(r, r->self_id, me, sizeof me);
    return fail_view(r, NULL, coll, st, r->self_id, FROM_HERE, "%s: %s", me, what);
}
