/*
 * elect.c: elastic membership: the lobby (status and admit requests served by the gate) and
 * ring_elect, which agrees on the next view with no coordinator (ring.h, DESIGN.md "Elastic
 * membership").
 *
 * Election, as every node runs it:
 *  - drop the current links first, so the neighbours of a failed collective see EOF at once
 *    and the abort forwarding of engine.c spreads the news; state ELECTING;
 *  - each round, probe every other member of the config in parallel (a lobby call each, by
 *    0.5 s, or 0.2 s for a peer whose last probe in this election timed out or that the
 *    failure was blamed on, and at most timeout / 8: a stopped or cut-off peer slows the
 *    first round only); then, in this order:
 *     1. adopt: a peer FORMING or TRAINING a view that contains this node and whose epoch is
 *        above the highest epoch this node has seen gives the view (and its members'
 *        lineages); seen := that epoch, then form it;
 *     2. admit: a peer TRAINING a view without this node is asked (next round) to admit it;
 *     3. decide: S = this node and the peers that are ELECTING. When two consecutive rounds
 *        gave the same S, S has a quorum (min_nodes, default a majority of the config), this
 *        node is the lowest id of S and, in a cold start only (no view decided yet, here or
 *        at any node that answered), all nodes are in S or connect_timeout has passed since
 *        ring_open, it decides the view (epoch = 1 + the
 *        highest epoch seen over S, members = S in ascending id), sets seen := epoch and forms.
 *  - a view that fails to form (or to confirm: every member all-gathers a hash of the view
 *    and lineages) sends the node back to electing, within the same rejoin_timeout.
 * Invariants:
 *  - `seen` only grows, and a node forms a view only with an epoch above `seen`, which it
 *    raises first: a node takes part in at most one view per epoch. Two quorums share a node,
 *    so two different views of one epoch cannot both form;
 *  - no view below the quorum is ever formed: a minority waits (and says so every ~5 s);
 *  - a lobby request changes nothing but the admit flag, and only when it comes from a proven
 *    member of the config outside the view, whose configuration digest equals this node's,
 *    while this node trains; malformed requests are refused with a logged reason;
 *  - configuration: every reply and request carries a BLAKE2b digest of rc.agree (what the
 *    members' configurations must share). A peer whose digest differs is never adopted from,
 *    elected with or admitted; the first time, its text is fetched and the differing keys are
 *    logged. When the nodes that could still agree with this node are fewer than the quorum,
 *    the election ends with HR_ERR_CONFIG naming the differences: a node whose file differs
 *    from the others' stops at once (and so do two nodes of two that differ).
 *
 * Lobby wire format (after the handshake of sec.h with epoch SEC_EPOCH_LOBBY). Each message is
 * one frame as frame.h lays it out, sealed with the connection's keys exactly like a ring frame
 * (encrypt: header authenticated, payload encrypted; auth: both authenticated; none: plain):
 *   header: magic, version, type FRAME_LOBBY, coll LOBBY_REQ or LOBBY_REP,
 *           epoch SEC_EPOCH_LOBBY, seq 0, index 0, len (at most LOBBY_MAX)
 *   request (LOBBY_REQ_LEN = 40 bytes):
 *     0 version u8 (2) | 1 flags u8 (bit 0: admit me; bit 1: send your configuration text) |
 *     2..7 zero | 8 the caller's configuration digest (32 bytes)
 *   reply to a configuration request: the text of rc.agree (at most RING_AGREE_MAX bytes)
 *   reply (LOBBY_REP_HDR + 24 n bytes):
 *     0 version u8 (2) | 1 state u8 (1 electing, 2 forming, 3 training; 0 idle) |
 *     2 admitted u8 (the request's admit flag was honoured) | 3 zero u8 | 4 n u32 |
 *     8 seen u64 (highest epoch seen) | 16 view epoch u64 (forming/training: the view;
 *     otherwise the last view held) | 24 own lineage epoch u64 | 32 own progress i64 |
 *     40 zero u64 | 48 configuration digest (32 bytes) | then n members (forming/training
 *     only, in ring order):
 *     id i64 | lineage epoch u64 | lineage progress i64
 * The caller sends one request and reads one reply; the responder closes. Integers are
 * little-endian.
 */
#include "ring/ring_internal.h"

#include "base/hr_log.h"
#include "ring/bytes.h"
#include "ring/frame.h"
#include "ring/tcp.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { EL_IDLE = 0, EL_ELECTING = 1, EL_FORMING = 2, EL_TRAINING = 3 };
enum { LOBBY_REQ = 1, LOBBY_REP = 2 };

#define LOBBY_VERSION  2
#define LOBBY_ADMIT    0x01
#define LOBBY_CONFIG   0x02
#define LOBBY_DIGEST   32
#define LOBBY_REQ_LEN  (8 + LOBBY_DIGEST)
#define LOBBY_REP_HDR  (48 + LOBBY_DIGEST)
#define LOBBY_MEMBER   24
#define LOBBY_VIEW_MAX (LOBBY_REP_HDR + LOBBY_MEMBER * RING_MAX_NODES)
#define LOBBY_MAX      (LOBBY_VIEW_MAX > RING_AGREE_MAX ? LOBBY_VIEW_MAX : RING_AGREE_MAX)
#define ELECT_ROUND_S  0.05 /* pause between probe rounds */
#define ELECT_PROBE_S  0.5  /* a probe's deadline, at most timeout / 8 */
#define ELECT_SILENT_S 0.2  /* the same for a peer whose last probe timed out */

/* A probe's deadline: ELECT_PROBE_S, or ELECT_SILENT_S for a peer silent before, and never
 * above timeout / 8: a cluster set to notice a silent peer quickly also elects quickly. */
static double probe_s(const ring *r, int silent) {
    double s = silent ? ELECT_SILENT_S : ELECT_PROBE_S;
    return r->timeout / 8 < s ? r->timeout / 8 : s;
}
#define ELECT_LOG_S     5.0  /* seconds between "waiting for a quorum" lines */
#define ELECT_DEFAULT_S 60.0 /* rejoin_timeout when the config gives none */

/* A node's election state, read by the gate's lobby threads. */
struct ring_elastic {
    pthread_mutex_t mu;               /* guards every field but join */
    int state;                        /* EL_* */
    uint64_t seen;                    /* highest view epoch seen, decided or adopted */
    ring_view view;                   /* FORMING/TRAINING: that view; else the last held */
    ring_lineage lin[RING_MAX_NODES]; /* lineages of view's members, by rank */
    ring_lineage mine;                /* this node's, as the running election was given */
    int been_in_view;                 /* a view has formed here before */
    uint64_t held;                    /* epoch of the last view formed here (0: none) */
    double t_open;                    /* tcp_now() when the ring was opened (set once) */
    atomic_int join;                  /* an admit request was honoured since ring_elect */
    uint8_t digest[LOBBY_DIGEST];     /* of rc.agree; zeros: no configuration check */
    uint8_t told[RING_MAX_NODES];     /* a differing configuration was logged, by index */
};

/* Whether a peer's configuration digest differs from this node's (no check if either side
 * has none). */
static int digest_differs(const ring_elastic *el, const uint8_t *theirs) {
    static const uint8_t zero[LOBBY_DIGEST];
    if (memcmp(el->digest, zero, LOBBY_DIGEST) == 0 || memcmp(theirs, zero, LOBBY_DIGEST) == 0)
        return 0;
    return memcmp(el->digest, theirs, LOBBY_DIGEST) != 0;
}

static const char *state_name(int s) {
    static const char *names[] = {"idle", "electing", "forming", "training"};
    return s >= 0 && s <= EL_TRAINING ? names[s] : "?";
}

static int view_has(const ring_view *v, long id) {
    for (int i = 0; i < v->n; i++)
        if (v->ids[i] == id) return 1;
    return 0;
}

/* "0,1,3" */
static void ids_str(const long *ids, int n, char *out, size_t len) {
    size_t o = 0;
    out[0] = 0;
    for (int i = 0; i < n && o + 24 < len; i++)
        o += (size_t)snprintf(out + o, len - o, "%s%ld", i ? "," : "", ids[i]);
    if (n == 0) snprintf(out, len, "none");
}

hr_status elect_alloc(ring *r) {
    ring_elastic *el = calloc(1, sizeof *el);
    if (!el) return HR_ERR_NOMEM;
    pthread_mutex_init(&el->mu, NULL);
    atomic_init(&el->join, 0);
    el->t_open = tcp_now();
    if (r->rc.agree_len > 0 && r->rc.agree_len <= RING_AGREE_MAX)
        crypto_generichash(el->digest, LOBBY_DIGEST, (const uint8_t *)r->rc.agree, r->rc.agree_len,
                           NULL, 0);
    r->el = el;
    return HR_OK;
}

void elect_free(ring *r) {
    if (!r->el) return;
    pthread_mutex_destroy(&r->el->mu);
    free(r->el);
    r->el = NULL;
}

void elect_formed(ring *r) {
    ring_elastic *el = r->el;
    pthread_mutex_lock(&el->mu);
    el->state = EL_TRAINING;
    el->view = r->view;
    memset(el->lin, 0, sizeof el->lin);
    if (r->view.epoch > el->seen) el->seen = r->view.epoch;
    el->been_in_view = 1;
    el->held = r->view.epoch;
    pthread_mutex_unlock(&el->mu);
}

void ring_set_stop(ring *r, const volatile sig_atomic_t *stop) {
    r->stop = stop;
}

int ring_join_requested(ring *r) {
    return r->el ? atomic_load(&r->el->join) : 0;
}

/* ================================================================ lobby messages */

static hr_status lobby_send(int fd, sec_chan *ch, int kind, const uint8_t *body, size_t len,
                            double deadline) {
    uint8_t f[FRAME_HDR + LOBBY_MAX + SEC_TAG];
    frame_hdr h = {FRAME_MAGIC, FRAME_VERSION, FRAME_LOBBY, (uint8_t)kind, SEC_EPOCH_LOBBY, 0,
                   0,           (uint32_t)len};
    frame_encode(&h, f);
    size_t tag = 0;
    if (ch->tx.mode != RING_SEC_NONE) {
        sec_seal(&ch->tx, f, body, len);
        tag = SEC_TAG;
    } else {
        memcpy(f + FRAME_HDR, body, len);
    }
    hr_status st = tcp_send_all(fd, f, FRAME_HDR + len + tag, deadline);
    sodium_memzero(f, FRAME_HDR + len + tag);
    return st;
}

/* Read one lobby message of `kind` into body (LOBBY_MAX bytes). The length is bounded before
 * anything is read after the header; every header field is checked once the frame verified. */
static hr_status lobby_recv(int fd, sec_chan *ch, int kind, uint8_t *body, size_t *len,
                            double deadline, char *why, size_t whylen) {
    uint8_t f[FRAME_HDR + LOBBY_MAX + SEC_TAG];
    frame_hdr h;
    hr_status st = tcp_recv_all(fd, f, FRAME_HDR, deadline);
    if (st != HR_OK)
        return hr_fail(why, whylen, st, "%s",
                       st == HR_ERR_TIMEOUT ? "no lobby message in time" : "connection lost");
    frame_decode(f, &h);
    if (h.len > LOBBY_MAX)
        return hr_fail(why, whylen, HR_ERR_PROTO, "a lobby message of %u bytes (at most %d)", h.len,
                       LOBBY_MAX);
    size_t tag = ch->rx.mode != RING_SEC_NONE ? SEC_TAG : 0;
    st = tcp_recv_all(fd, f + FRAME_HDR, h.len + tag, deadline);
    if (st != HR_OK)
        return hr_fail(why, whylen, st, "%s",
                       st == HR_ERR_TIMEOUT ? "lobby message cut short (timeout)"
                                            : "lobby message cut short");
    if (tag && sec_open(&ch->rx, f, h.len, body) != 0)
        return hr_fail(why, whylen, HR_ERR_AUTH,
                       "authentication failed on a lobby message (tampered or forged)");
    if (!tag) memcpy(body, f + FRAME_HDR, h.len);
    if (h.magic != FRAME_MAGIC || h.version != FRAME_VERSION || h.type != FRAME_LOBBY ||
        h.coll != kind || h.epoch != SEC_EPOCH_LOBBY || h.seq != 0 || h.index != 0)
        return hr_fail(why, whylen, HR_ERR_PROTO, "malformed lobby message header");
    *len = h.len;
    return HR_OK;
}

/* ================================================================ serving the lobby */

/* The reply to a status request, from the state under el->mu. Returns its length. */
static size_t reply_build(ring_elastic *el, int admitted, uint8_t *b) {
    int decided = el->state == EL_FORMING || el->state == EL_TRAINING;
    int n = decided ? el->view.n : 0;
    memset(b, 0, LOBBY_REP_HDR);
    b[0] = LOBBY_VERSION;
    b[1] = (uint8_t)el->state;
    b[2] = (uint8_t)admitted;
    le_put32(b + 4, (uint32_t)n);
    le_put64(b + 8, el->seen);
    le_put64(b + 16, decided ? el->view.epoch : el->held);
    le_put64(b + 24, el->mine.epoch);
    le_put64(b + 32, (uint64_t)el->mine.progress);
    memcpy(b + 48, el->digest, LOBBY_DIGEST);
    for (int i = 0; i < n; i++) {
        uint8_t *m = b + LOBBY_REP_HDR + (size_t)i * LOBBY_MEMBER;
        le_put64(m, (uint64_t)el->view.ids[i]);
        le_put64(m + 8, el->lin[i].epoch);
        le_put64(m + 16, (uint64_t)el->lin[i].progress);
    }
    return LOBBY_REP_HDR + (size_t)n * LOBBY_MEMBER;
}

void elect_serve(ring *r, int fd, sec_chan *ch, long peer, const char *addr, double deadline) {
    ring_elastic *el = r->el;
    uint8_t body[LOBBY_MAX];
    size_t len = 0;
    char why[HR_ERRLEN];
    hr_status st = lobby_recv(fd, ch, LOBBY_REQ, body, &len, deadline, why, sizeof why);
    if (st == HR_OK && (len != LOBBY_REQ_LEN || body[0] != LOBBY_VERSION ||
                        (body[1] & ~(LOBBY_ADMIT | LOBBY_CONFIG)) != 0 || le_get32(body + 4) != 0 ||
                        body[2] || body[3]))
        st = hr_fail(why, sizeof why, HR_ERR_PROTO,
                     "malformed lobby request (%zu bytes, version %d, flags 0x%02x)", len, body[0],
                     body[1]);
    if (st != HR_OK) {
        HR_WARN(RING, "lobby call from node %ld (%s) refused: %s", peer, addr, why);
        return;
    }
    if (body[1] & LOBBY_CONFIG) { /* the text of what must agree, for the caller's diff */
        st = lobby_send(fd, ch, LOBBY_REP, (const uint8_t *)r->rc.agree, r->rc.agree_len, deadline);
        if (st != HR_OK)
            HR_DEBUG(RING, "configuration for node %ld (%s) not delivered: %s", peer, addr,
                     hr_strerror(st));
        return;
    }
    int admit = body[1] & LOBBY_ADMIT, admitted = 0, state;
    int differs = digest_differs(el, body + 8);
    pthread_mutex_lock(&el->mu);
    state = el->state;
    if (admit && differs) {
        HR_DEBUG(RING, "node %ld (%s) asked to be admitted; its configuration differs", peer, addr);
    } else if (admit && state == EL_TRAINING && !view_has(&el->view, peer)) {
        admitted = 1;
        if (!atomic_exchange(&el->join, 1))
            HR_INFO(RING,
                    "node %ld (%s) asks to be admitted to view %llu: re-electing when the "
                    "members agree",
                    peer, addr, (unsigned long long)el->view.epoch);
    }
    len = reply_build(el, admitted, body);
    pthread_mutex_unlock(&el->mu);
    if (admit && !admitted)
        HR_DEBUG(RING, "node %ld (%s) asked to be admitted; not honoured (this node is %s%s)", peer,
                 addr, state_name(state), state == EL_TRAINING ? " and it is a member" : "");
    st = lobby_send(fd, ch, LOBBY_REP, body, len, deadline);
    if (st != HR_OK)
        HR_DEBUG(RING, "lobby reply to node %ld (%s) not delivered: %s", peer, addr,
                 hr_strerror(st));
}

/* ================================================================ probing */

/* One probe of one peer, and what it answered. */
typedef struct {
    ring *r;                          /* the prober */
    int idx;                          /* rc.members index of the peer */
    int admit;                        /* ask it to admit this node */
    pthread_t th;                     /* the probing thread */
    int started;                      /* th runs */
    int ok;                           /* it answered with a well-formed reply */
    int silent;                       /* its last probe in this election timed out */
    char why[HR_ERRLEN];              /* why not */
    int state, admitted;              /* its EL_* state; it honoured the admit request */
    uint64_t seen;                    /* its highest epoch seen */
    ring_view view;                   /* its view (n = 0 unless forming or training) */
    ring_lineage own;                 /* its own lineage */
    ring_lineage lin[RING_MAX_NODES]; /* its view members' lineages, by rank */
    int differs;                      /* its configuration digest differs from this node's */
} probe;

/* Check and decode a reply; `why` says what is wrong. */
static hr_status reply_parse(probe *p, const uint8_t *b, size_t len) {
    const ring_config *rc = &p->r->rc;
    if (len < LOBBY_REP_HDR || b[0] != LOBBY_VERSION || b[1] > EL_TRAINING || b[2] > 1 || b[3])
        return hr_fail(p->why, sizeof p->why, HR_ERR_PROTO, "malformed lobby reply");
    uint32_t n = le_get32(b + 4);
    int decided = b[1] == EL_FORMING || b[1] == EL_TRAINING;
    if (n > RING_MAX_NODES || len != LOBBY_REP_HDR + (size_t)n * LOBBY_MEMBER ||
        (decided && n == 0) || (!decided && n != 0))
        return hr_fail(p->why, sizeof p->why, HR_ERR_PROTO,
                       "lobby reply of %zu bytes for %u members", len, n);
    p->state = b[1];
    p->admitted = b[2];
    p->seen = le_get64(b + 8);
    p->view.epoch = le_get64(b + 16);
    p->view.n = (int)n;
    p->own.epoch = le_get64(b + 24);
    p->own.progress = (int64_t)le_get64(b + 32);
    p->differs = digest_differs(p->r->el, b + 48);
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *m = b + LOBBY_REP_HDR + (size_t)i * LOBBY_MEMBER;
        p->view.ids[i] = (long)le_get64(m);
        p->lin[i].epoch = le_get64(m + 8);
        p->lin[i].progress = (int64_t)le_get64(m + 16);
        if (ring_config_index(rc, p->view.ids[i]) < 0 ||
            (i && p->view.ids[i] <= p->view.ids[i - 1]))
            return hr_fail(p->why, sizeof p->why, HR_ERR_PROTO,
                           "lobby reply names node %ld out of order or not in the config",
                           p->view.ids[i]);
    }
    if (decided &&
        (p->view.epoch == 0 || p->view.epoch == SEC_EPOCH_LOBBY || p->view.epoch > p->seen))
        return hr_fail(p->why, sizeof p->why, HR_ERR_PROTO,
                       "lobby reply with view epoch %llu (seen %llu)",
                       (unsigned long long)p->view.epoch, (unsigned long long)p->seen);
    return HR_OK;
}

/* One lobby call to member `idx`: connect, handshake, send a request with `flags`, read the
 * reply into body (LOBBY_MAX bytes), all by `deadline`. */
static hr_status lobby_call(ring *r, int idx, int flags, double deadline, uint8_t *body,
                            size_t *len, char *why, size_t whylen) {
    const ring_member *m = &r->rc.members[idx];
    int fd = -1, refused = 0;
    HR_CHECK(tcp_connect(m->host, m->port, deadline, &fd, why, whylen));
    sec_hs_params hp = {.rc = &r->rc,
                        .keys = &r->keys,
                        .epoch = SEC_EPOCH_LOBBY,
                        .self_id = r->self_id,
                        .expect_id = m->id,
                        .seg_bytes = (uint32_t)r->seg_bytes};
    sec_chan ch;
    *len = 0;
    hr_status st = sec_handshake(fd, 1, &hp, deadline, &ch, &refused, why, whylen);
    if (st == HR_OK) {
        uint8_t req[LOBBY_REQ_LEN] = {LOBBY_VERSION, (uint8_t)flags};
        memcpy(req + 8, r->el->digest, LOBBY_DIGEST);
        st = lobby_send(fd, &ch, LOBBY_REQ, req, sizeof req, deadline);
        if (st != HR_OK) snprintf(why, whylen, "lobby request not delivered");
    }
    if (st == HR_OK) st = lobby_recv(fd, &ch, LOBBY_REP, body, len, deadline, why, whylen);
    sec_chan_free(&ch);
    tcp_close(&fd);
    return st;
}

static hr_status probe_run(probe *p) {
    uint8_t body[LOBBY_MAX];
    size_t len = 0;
    double deadline = tcp_now() + probe_s(p->r, p->silent);
    HR_CHECK(lobby_call(p->r, p->idx, p->admit ? LOBBY_ADMIT : 0, deadline, body, &len, p->why,
                        sizeof p->why));
    return reply_parse(p, body, len);
}

static void *probe_main(void *arg) {
    probe *p = arg;
    hr_status st = probe_run(p);
    p->ok = st == HR_OK;
    p->silent = st == HR_ERR_TIMEOUT;
    return NULL;
}

/* Probe every other member at once; wait for all of them (each ends by its deadline). */
static void probe_round(ring *r, probe *pr) {
    for (int i = 0; i < r->rc.n_members; i++) {
        probe *p = &pr[i];
        p->ok = 0;
        p->started = 0;
        p->why[0] = 0;
        if (i == r->self) continue;
        p->r = r;
        p->idx = i;
        p->started = pthread_create(&p->th, NULL, probe_main, p) == 0;
        if (!p->started) p->ok = probe_run(p) == HR_OK; /* no thread: probe in line */
    }
    for (int i = 0; i < r->rc.n_members; i++)
        if (pr[i].started) pthread_join(pr[i].th, NULL);
    for (int i = 0; i < r->rc.n_members; i++) {
        probe *p = &pr[i];
        if (i == r->self) continue;
        if (!p->ok)
            HR_TRACE(RING, "probe of node %ld: %s", r->rc.members[i].id, p->why);
        else if (p->admit && p->admitted)
            HR_DEBUG(RING, "node %ld (training view %llu) will admit this node",
                     r->rc.members[i].id, (unsigned long long)p->view.epoch);
    }
}

/* ================================================================ installing a view */

static void set_state(ring_elastic *el, int state) {
    pthread_mutex_lock(&el->mu);
    el->state = state;
    pthread_mutex_unlock(&el->mu);
}

/* Every member all-gathers a hash of (view, lineages): the ring is whole and all agree. */
static hr_status confirm(ring *r, const ring_lineage *lin, char *err, size_t errlen) {
    uint8_t h[32], all[RING_MAX_NODES][32], buf[24];
    crypto_generichash_state s;
    crypto_generichash_init(&s, (const uint8_t *)"hetring-view-v1", 15, 32);
    le_put64(buf, r->view.epoch);
    crypto_generichash_update(&s, buf, 8);
    for (int i = 0; i < r->view.n; i++) {
        le_put64(buf, (uint64_t)r->view.ids[i]);
        le_put64(buf + 8, lin[i].epoch);
        le_put64(buf + 16, (uint64_t)lin[i].progress);
        crypto_generichash_update(&s, buf, sizeof buf);
    }
    crypto_generichash_final(&s, h, 32);
    if (ring_allgather(r, h, all, 32) != HR_OK)
        return hr_fail(err, errlen, r->failed, "%s", r->err);
    for (int i = 0; i < r->view.n; i++)
        if (memcmp(all[i], h, 32) != 0)
            return hr_fail(err, errlen, HR_ERR_MISMATCH,
                           "node %ld holds another view %llu or other lineages than this node",
                           r->view.ids[i], (unsigned long long)r->view.epoch);
    return HR_OK;
}

static void agreement_fill(const ring *r, const ring_lineage *lin, uint64_t prev,
                           ring_agreement *out) {
    memset(out, 0, sizeof *out);
    out->view = r->view;
    out->prev_epoch = prev;
    int d = 0;
    for (int i = 0; i < r->view.n; i++) {
        out->lineage[i] = lin[i];
        if (lin[i].epoch > lin[d].epoch ||
            (lin[i].epoch == lin[d].epoch && lin[i].progress > lin[d].progress))
            d = i;
    }
    out->donor = d;
    out->in_sync = 1;
    for (int i = 0; i < r->view.n; i++)
        if (lin[i].epoch != lin[d].epoch || lin[i].progress != lin[d].progress) out->in_sync = 0;
}

/* Take part in view `v` (decided here or adopted): raise `seen`, form its ring, confirm it.
 * On failure the node is electing again and the links are closed. */
static hr_status install(ring *r, const ring_view *v, const ring_lineage *lin, const char *how,
                         ring_agreement *out, char *err, size_t errlen) {
    ring_elastic *el = r->el;
    pthread_mutex_lock(&el->mu);
    if (v->epoch <= el->seen) { /* never two views of one epoch */
        pthread_mutex_unlock(&el->mu);
        return hr_fail(err, errlen, HR_ERR_VIEW, "view %llu is not above epoch %llu seen here",
                       (unsigned long long)v->epoch, (unsigned long long)el->seen);
    }
    el->seen = v->epoch;
    el->state = EL_FORMING;
    el->view = *v;
    memcpy(el->lin, lin, (size_t)v->n * sizeof *lin);
    int been = el->been_in_view;
    pthread_mutex_unlock(&el->mu);
    char ids[RING_MAX_NODES * 8];
    ids_str(v->ids, v->n, ids, sizeof ids);
    HR_DEBUG(RING, "%s view %llu: nodes %s; forming", how, (unsigned long long)v->epoch, ids);
    r->view = *v;
    /* after the first view: the timeout, and time for the slowest member to finish its probe
     * round and adopt the view */
    double secs = been ? r->timeout + 2 * probe_s(r, 0) : r->rc.connect_timeout;
    hr_status st = ring_form(r, secs, err, errlen);
    if (st == HR_OK) st = confirm(r, lin, err, errlen);
    if (st != HR_OK) {
        ring_close_links(r);
        r->failed = HR_ERR_VIEW;
        set_state(el, EL_ELECTING);
        HR_WARN(RING, "view %llu (nodes %s) did not form: %s; electing again",
                (unsigned long long)v->epoch, ids, err);
        return st;
    }
    pthread_mutex_lock(&el->mu);
    uint64_t prev = el->held;
    el->state = EL_TRAINING;
    el->been_in_view = 1;
    el->held = v->epoch;
    pthread_mutex_unlock(&el->mu);
    agreement_fill(r, lin, prev, out);
    if (v->ids[0] == r->self_id)
        HR_INFO(RING, "view %llu: nodes %s", (unsigned long long)v->epoch, ids);
    return HR_OK;
}

/* ================================================================ ring_elect */

/* One election in progress. */
typedef struct {
    probe *pr;                  /* one per config member (self unused) */
    int quorum;                 /* members a view needs */
    int in_s[RING_MAX_NODES];   /* this round's electing set, by member index */
    int prev_s[RING_MAX_NODES]; /* the last round's */
    int have_prev;              /* prev_s holds a round */
    int n_s;                    /* members of in_s */
    int n_differ;               /* peers that answered with another configuration */
    int history;                /* some node has seen a view decided: no cold start */
    char cfg_err[HR_ERRLEN];    /* the first configuration difference found */
    double next_log;            /* when to say again that a quorum is missing */
} election;

/* ---------------------------------------------------------------- configurations */

/* A reader of agree texts: "[section]" lines and "key = value" lines. */
typedef struct {
    const char *t; /* the text */
    size_t n, i;   /* its length, and where the next line starts */
    char sec[96];  /* the section the current line is in */
    char key[96];  /* the current line's key ("" for a section line) */
    char val[160]; /* and its value */
} agree_rd;

/* The next key line of the text into r->sec/key/val; 0 at the end. */
static int agree_next(agree_rd *r) {
    while (r->i < r->n) {
        const char *line = r->t + r->i;
        size_t e = r->i;
        while (e < r->n && r->t[e] != '\n') e++;
        int l = (int)(e - r->i);
        r->i = e + 1;
        const char *eq = l > 1 && line[0] != '[' ? memchr(line, '=', (size_t)l) : NULL;
        if (l > 1 && line[0] == '[') {
            snprintf(r->sec, sizeof r->sec, "%.*s", l, line);
        } else if (eq) {
            int kl = (int)(eq - line);
            while (kl > 0 && line[kl - 1] == ' ') kl--;
            const char *v = eq + 1;
            while (v < line + l && *v == ' ') v++;
            snprintf(r->key, sizeof r->key, "%.*s", kl, line);
            snprintf(r->val, sizeof r->val, "%.*s", (int)(line + l - v), v);
            return 1;
        }
    }
    return 0;
}

/* The value of `key` in section `sec` of text t (n bytes) into val; 0 when it has none. */
static int agree_lookup(const char *t, size_t n, const char *sec, const char *key, char *val,
                        size_t vlen) {
    agree_rd r = {.t = t, .n = n};
    while (agree_next(&r))
        if (strcmp(r.sec, sec) == 0 && strcmp(r.key, key) == 0) {
            snprintf(val, vlen, "%s", r.val);
            return 1;
        }
    return 0;
}

/* Name the first keys on which text `a` (this node, id `ida`) and `b` (node `idb`) differ:
 * "node 1 has [train] samples = 3000, node 0 has 4000". Returns how many differ. */
static int agree_diff(const char *a, size_t na, long ida, const char *b, size_t nb, long idb,
                      char *out, size_t olen) {
    int count = 0;
    size_t o = 0;
    out[0] = 0;
    for (int pass = 0; pass < 2; pass++) { /* keys of a, then keys only b has */
        agree_rd r = {.t = pass ? b : a, .n = pass ? nb : na};
        const char *u = pass ? a : b;
        size_t un = pass ? na : nb;
        long tid = pass ? idb : ida, uid = pass ? ida : idb;
        while (agree_next(&r)) {
            char theirs[160];
            int has = agree_lookup(u, un, r.sec, r.key, theirs, sizeof theirs);
            if (has && (pass == 1 || strcmp(r.val, theirs) == 0)) continue;
            if (count < 3 && o < olen) {
                if (has)
                    o += (size_t)snprintf(out + o, olen - o,
                                          "%snode %ld has %s %s = %s, node %ld has %s",
                                          count ? "; " : "", uid, r.sec, r.key, theirs, tid, r.val);
                else
                    o += (size_t)snprintf(out + o, olen - o,
                                          "%snode %ld has %s %s = %s, node %ld has no such key",
                                          count ? "; " : "", tid, r.sec, r.key, r.val, uid);
            }
            count++;
        }
    }
    if (count > 3 && o < olen) snprintf(out + o, olen - o, " (and %d more)", count - 3);
    return count;
}

/* A peer answered with another configuration: once per peer, fetch its text and log what
 * differs; keep the first such message for the error that may end the election. */
static void tell_difference(ring *r, election *e, int idx) {
    ring_elastic *el = r->el;
    if (el->told[idx]) return;
    el->told[idx] = 1;
    long peer = r->rc.members[idx].id;
    uint8_t body[LOBBY_MAX];
    size_t len = 0;
    char why[HR_ERRLEN], diff[HR_ERRLEN - 128] = "";
    hr_status st = lobby_call(r, idx, LOBBY_CONFIG, tcp_now() + probe_s(r, 0) * 4, body, &len, why,
                              sizeof why);
    if (st != HR_OK || agree_diff(r->rc.agree, r->rc.agree_len, r->self_id, (const char *)body, len,
                                  peer, diff, sizeof diff) == 0)
        snprintf(diff, sizeof diff, "its configuration differs from this node's%s%.200s%s",
                 st != HR_OK ? " (its text could not be fetched: " : "", st != HR_OK ? why : "",
                 st != HR_OK ? ")" : "");
    HR_ERROR(RING, "node %ld cannot train with this node: %s", peer, diff);
    if (!e->cfg_err[0])
        snprintf(e->cfg_err, sizeof e->cfg_err, "node %ld cannot train with this node: %s", peer,
                 diff);
}

static int quorum_of(const ring_config *rc) {
    int q = rc->min_nodes > 0 ? rc->min_nodes : rc->n_members / 2 + 1;
    return q < 1 ? 1 : q > rc->n_members ? rc->n_members : q;
}

/* The peer whose view this node should adopt (forming or training, contains this node, epoch
 * above seen; the highest such epoch), or -1. */
static int pick_adopt(ring *r, const election *e, uint64_t seen) {
    int best = -1;
    for (int i = 0; i < r->rc.n_members; i++) {
        const probe *p = &e->pr[i];
        if (i == r->self || !p->ok || p->differs ||
            (p->state != EL_FORMING && p->state != EL_TRAINING))
            continue;
        if (!view_has(&p->view, r->self_id) || p->view.epoch <= seen) continue;
        if (best < 0 || p->view.epoch > e->pr[best].view.epoch) best = i;
    }
    return best;
}

/* This round's electing set; peers training without this node are asked to admit it. */
static void electing_set(ring *r, election *e, uint64_t seen) {
    e->n_s = 0;
    e->n_differ = 0;
    for (int i = 0; i < r->rc.n_members; i++) {
        probe *p = &e->pr[i];
        int differs = i != r->self && p->ok && p->differs;
        e->n_differ += differs;
        e->in_s[i] = i == r->self || (p->ok && !differs && p->state == EL_ELECTING);
        e->n_s += e->in_s[i];
        if (i != r->self && p->ok && !differs && p->seen > 0) e->history = 1;
        if (i != r->self)
            p->admit = p->ok && !differs && p->state == EL_TRAINING &&
                       (!view_has(&p->view, r->self_id) || p->view.epoch > seen);
    }
}

/* Whether this election is a cold start: no view was ever decided, here or at any node that
 * answered. Only a cold start waits for every node (a node that restarts while the others
 * train, or elect with a history, joins them at once, whatever its id). */
static int cold_start(ring *r, const election *e) {
    ring_elastic *el = r->el;
    pthread_mutex_lock(&el->mu);
    int cold = !el->been_in_view && el->seen == 0;
    pthread_mutex_unlock(&el->mu);
    return cold && !e->history;
}

/* Is this node the leader of a stable quorum, allowed to decide now? */
static int may_decide(ring *r, const election *e) {
    int n = r->rc.n_members, lowest = -1;
    for (int i = 0; i < n && lowest < 0; i++)
        if (e->in_s[i]) lowest = i;
    if (lowest != r->self || e->n_s < e->quorum || !e->have_prev) return 0;
    if (memcmp(e->in_s, e->prev_s, (size_t)n * sizeof(int)) != 0) return 0;
    /* the first view waits for every node, but not for one whose configuration differs */
    return !cold_start(r, e) || e->n_s + e->n_differ == n ||
           tcp_now() - r->el->t_open >= r->rc.connect_timeout;
}

/* The view the leader decides: S in ascending id, epoch 1 + the highest seen over S. */
static void decide(ring *r, const election *e, uint64_t seen, ring_view *v, ring_lineage *lin) {
    uint64_t top = seen;
    v->n = 0;
    for (int i = 0; i < r->rc.n_members; i++) {
        if (!e->in_s[i]) continue;
        const probe *p = &e->pr[i];
        if (i != r->self && p->seen > top) top = p->seen;
        v->ids[v->n] = r->rc.members[i].id;
        lin[v->n++] = i == r->self ? r->el->mine : p->own;
    }
    /* members[] is in ascending id (ring_config.h); sort anyway, lineages with their ids */
    for (int i = 1; i < v->n; i++)
        for (int j = i; j > 0 && v->ids[j] < v->ids[j - 1]; j--) {
            long t = v->ids[j];
            v->ids[j] = v->ids[j - 1];
            v->ids[j - 1] = t;
            ring_lineage l = lin[j];
            lin[j] = lin[j - 1];
            lin[j - 1] = l;
        }
    v->epoch = top + 1;
}

/* "reachable 0,1 (electing 0,1)" */
static void reach_str(ring *r, const election *e, char *out, size_t len) {
    long reach[RING_MAX_NODES], el[RING_MAX_NODES];
    int nr = 0, ne = 0;
    for (int i = 0; i < r->rc.n_members; i++) {
        if (i == r->self || e->pr[i].ok) reach[nr++] = r->rc.members[i].id;
        if (e->in_s[i]) el[ne++] = r->rc.members[i].id;
    }
    char a[RING_MAX_NODES * 8], b[RING_MAX_NODES * 8];
    ids_str(reach, nr, a, sizeof a);
    ids_str(el, ne, b, sizeof b);
    snprintf(out, len, "reachable %.200s (electing %.200s)", a, b);
}

static uint64_t seen_now(ring_elastic *el) {
    pthread_mutex_lock(&el->mu);
    uint64_t s = el->seen;
    pthread_mutex_unlock(&el->mu);
    return s;
}

/* One round: probe, then adopt, or decide, or wait. HR_OK once a view formed; HR_ERR_VIEW
 * to go on electing. */
static hr_status elect_round(ring *r, election *e, ring_agreement *out, char *err, size_t errlen) {
    probe_round(r, e->pr);
    uint64_t seen = seen_now(r->el);
    int a = pick_adopt(r, e, seen);
    if (a >= 0) {
        e->have_prev = 0;
        if (install(r, &e->pr[a].view, e->pr[a].lin, "adopting", out, err, errlen) == HR_OK)
            return HR_OK;
        return HR_ERR_VIEW;
    }
    electing_set(r, e, seen);
    for (int i = 0; i < r->rc.n_members; i++)
        if (i != r->self && e->pr[i].ok && e->pr[i].differs) tell_difference(r, e, i);
    if (r->rc.n_members - e->n_differ < e->quorum) {
        /* even if every other node came, the ones that agree with this node are too few */
        snprintf(err, errlen, "%s", e->cfg_err);
        return HR_ERR_CONFIG;
    }
    if (may_decide(r, e)) {
        ring_view v;
        ring_lineage lin[RING_MAX_NODES];
        decide(r, e, seen, &v, lin);
        e->have_prev = 0;
        if (install(r, &v, lin, "deciding", out, err, errlen) == HR_OK) return HR_OK;
        return HR_ERR_VIEW;
    }
    memcpy(e->prev_s, e->in_s, sizeof e->in_s);
    e->have_prev = 1;
    if (tcp_now() >= e->next_log) {
        char reach[512];
        reach_str(r, e, reach, sizeof reach);
        double left = r->rc.connect_timeout - (tcp_now() - r->el->t_open);
        if (cold_start(r, e)) /* the first view waits for everyone: say for whom, why, how long */
            for (int i = 0; i < r->rc.n_members; i++) {
                const probe *p = &e->pr[i];
                const ring_member *m = &r->rc.members[i];
                if (i == r->self || e->in_s[i] || (p->ok && p->differs)) continue;
                if (left > 0)
                    HR_INFO(RING, "waiting for node %ld (%s:%ld): %.200s; %s in %.0f s more", m->id,
                            m->host, m->port, p->ok ? state_name(p->state) : p->why,
                            e->n_s >= e->quorum ? "starting without it" : "retrying", left);
                else
                    HR_INFO(RING, "node %ld (%s:%ld) is not here (%.200s)", m->id, m->host, m->port,
                            p->ok ? state_name(p->state) : p->why);
            }
        if (e->n_s < e->quorum)
            HR_WARN(RING, "waiting for a quorum of %d of %d nodes: %s; training pauses", e->quorum,
                    r->rc.n_members, reach);
        else
            HR_INFO(RING, "electing a view: %s", reach);
        e->next_log = tcp_now() + ELECT_LOG_S;
    }
    return HR_ERR_VIEW;
}

hr_status ring_elect(ring *r, const ring_lineage *mine, ring_agreement *out, char *err,
                     size_t errlen) {
    ring_elastic *el = r->el;
    if (!el) return hr_fail(err, errlen, HR_ERR_INVAL, "ring_elect on a ring that is not open");
    ring_close_links(r); /* first: the neighbours of a failed collective see EOF at once */
    r->failed = HR_ERR_VIEW;
    snprintf(r->err, sizeof r->err, "electing a new view");
    pthread_mutex_lock(&el->mu);
    el->state = EL_ELECTING;
    el->mine = *mine;
    pthread_mutex_unlock(&el->mu);
    atomic_store(&el->join, 0);
    election e = {.quorum = quorum_of(&r->rc), .next_log = tcp_now() + 1.0};
    e.pr = calloc((size_t)r->rc.n_members, sizeof *e.pr);
    if (!e.pr) return hr_fail(err, errlen, HR_ERR_NOMEM, "out of memory");
    /* the node the failure was blamed on is probed as a silent one from the first round */
    int sus =
        r->suspect >= 0 && r->suspect != r->self_id ? ring_config_index(&r->rc, r->suspect) : -1;
    if (sus >= 0) e.pr[sus].silent = 1;
    r->suspect = -1;
    double limit = r->rc.rejoin_timeout > 0 ? r->rc.rejoin_timeout : ELECT_DEFAULT_S;
    double t0 = tcp_now();
    char why[HR_ERRLEN] = "";
    hr_status st;
    for (;;) {
        if (r->stop && *r->stop) {
            st = HR_ERR_INTERRUPTED;
            snprintf(why, sizeof why, "interrupted");
            break;
        }
        st = elect_round(r, &e, out, why, sizeof why);
        if (st == HR_OK || st == HR_ERR_CONFIG || tcp_now() - t0 >= limit) break;
        double pause = ELECT_ROUND_S;
        struct timespec ts = {0, (long)(pause * 1e9)};
        nanosleep(&ts, NULL);
    }
    if (st == HR_ERR_CONFIG) {
        /* stay reachable a moment, so the peers that differ learn it too, and stop as well */
        struct timespec linger = {1, 500000000};
        nanosleep(&linger, NULL);
        set_state(el, EL_IDLE);
        st = hr_fail(r->err, sizeof r->err, st, "%s", why);
        if (err) snprintf(err, errlen, "%s", r->err);
    } else if (st == HR_ERR_INTERRUPTED) {
        set_state(el, EL_IDLE);
        st = hr_fail(r->err, sizeof r->err, st, "the election was interrupted (stop requested)");
        if (err) snprintf(err, errlen, "%s", r->err);
    } else if (st != HR_OK) {
        char reach[512];
        reach_str(r, &e, reach, sizeof reach);
        set_state(el, EL_IDLE);
        st = hr_fail(
            r->err, sizeof r->err, HR_ERR_TIMEOUT,
            "no view within rejoin_timeout %.1f s: a quorum needs %d of %d nodes, %s%s%.200s",
            limit, e.quorum, r->rc.n_members, reach, why[0] ? "; last failure: " : "", why);
        if (err) snprintf(err, errlen, "%s", r->err);
    }
    free(e.pr);
    return st;
}
