/*
 * elect.c: elastic membership: the lobby (status and admit requests served by the gate) and
 * ring_elect, which agrees on the next view with no coordinator (ring.h, DESIGN.md "Elastic
 * membership").
 *
 * Election, as every node runs it:
 *  - drop the current links first, so the neighbours of a failed collective see EOF at once
 *    and the abort forwarding of engine.c spreads the news; state ELECTING;
 *  - each round, probe: in a config of at most ELECT_FULL_N nodes, every other member in
 *    parallel (a lobby call each, by 0.5 s, or 0.2 s for a peer whose last probe in this
 *    election timed out or that the failure was blamed on, and at most timeout / 8: a stopped
 *    or cut-off peer slows the first round only); in a larger one, a bounded round (below);
 *    then, in this order:
 *     1. adopt: a peer FORMING or TRAINING a view that contains this node, whose epoch is
 *        above the highest epoch this node has seen and that was decided with this life of
 *        this node gives the view (and its members' lineages); seen := that epoch, then form
 *        it. A life is a process: each ring_open draws a random 64-bit life id, every probe
 *        and reply carries it and a decided view records each member's. A node killed while a
 *        view forms and started again within the same formation must not take its earlier
 *        life's place: the view records that life's lineage (the state the process held), and
 *        the donor rule would make the new process, which holds nothing of it, the donor;
 *     2. admit: a peer TRAINING a view without this node is asked (next round) to admit it;
 *     3. decide: S = this node and the peers that are ELECTING. When two consecutive rounds
 *        gave the same S, S has a quorum (min_nodes, default a majority of the config), this
 *        node is the lowest id of S and, in a cold start only (no view decided yet, here or
 *        at any node that answered), all nodes are in S or connect_timeout has passed since
 *        ring_open, it decides the view (epoch = 1 + the highest epoch seen over S, members = S
 *        in ascending id), sets seen := epoch and forms.
 *  - a view that fails to form (or to confirm: every member all-gathers a hash of the view
 *    and lineages) sends the node back to electing, within the same rejoin_timeout.
 * Bounded rounds (probe_bounded), so that an election costs O(N) connections a round, not
 * N(N-1): a node probes the ELECT_CAND lowest ids below its own that did not fail in the last
 * ELECT_DEAD_S (its candidates for leader) and the peers it asks for admission. Every probe
 * says the prober is electing, with its seen epoch and lineage, and the node probed counts it
 * in its own S for reg_s() (a call); so the lowest live id learns S from the calls of all the
 * others, and they learn its decision from their next probe of it (adopt). A node that no
 * lower id leads (none answered, or one that answered lately only timed out: slow, not gone)
 * and that has tried every lower id in the last ELECT_DEAD_S also sweeps, every ELECT_SWEEP_S, up
 * to ELECT_SWEEP of the nodes that did not call it (the failure's suspect and the last view's
 * members first): that finds the training members a restarted lowest id asks for admission, and the
 * last view's members that are down. Only such a node decides, and only once S has been the same
 * for a follower's round (follow_s()) and every member of its last view is in S or down (or reg_s()
 * has passed), so that late noticers are not left out to join in a second change. A full
 * election's leader likewise waits, up to min(reg_s(), timeout), for a member of its last view
 * that answers it still trains that view. Followers pause
 * follow_s() between rounds, which keeps the calls at the two lowest ids near 1 / ELECT_CALL_S a
 * second whatever N. Safety does not rest on who leads: two nodes that both decide still need a
 * quorum each, and `seen` lets a node take part in one of their views only. Invariants:
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
 *    from the others' stops at once (and so do two nodes of two that differ). A reply says how
 *    many nodes share the responder's configuration (its S, or its view), so a node of a
 *    bounded election, which hears from few, counts those as differing too.
 *
 * Lobby wire format (after the handshake of sec.h with epoch SEC_EPOCH_LOBBY). Each message is
 * one frame as frame.h lays it out, sealed with the connection's keys exactly like a ring frame
 * (encrypt: header authenticated, payload encrypted; auth: both authenticated; none: plain):
 *   header: magic, version, type FRAME_LOBBY, coll LOBBY_REQ or LOBBY_REP,
 *           epoch SEC_EPOCH_LOBBY, seq 0, index 0, len (at most LOBBY_MAX)
 *   request (LOBBY_REQ_LEN = 72 bytes):
 *     0 version u8 (4) | 1 flags u8 (bit 0: admit me; bit 1: send your configuration text;
 *     bit 2: I am electing, count me) | 2..7 zero | 8 the caller's configuration digest
 *     (32 bytes) | 40 seen u64 | 48 own lineage epoch u64 | 56 own progress i64 | 64 life u64
 *   reply to a configuration request: the text of rc.agree (at most RING_AGREE_MAX bytes)
 *   reply (LOBBY_REP_HDR + 32 n bytes):
 *     0 version u8 (4) | 1 state u8 (1 electing, 2 forming, 3 training; 0 idle) |
 *     2 admitted u8 (the request's admit flag was honoured) | 3 zero u8 | 4 n u32 |
 *     8 seen u64 (highest epoch seen) | 16 view epoch u64 (forming/training: the view;
 *     otherwise the last view held) | 24 own lineage epoch u64 | 32 own progress i64 |
 *     40 agree u32 (nodes known to share this node's configuration, itself included: its
 *     electing set or view) | 44 zero u32 | 48 configuration digest (32 bytes) | 80 life u64 |
 *     then n members (forming/training only, in ring order): id i64 | lineage epoch u64 |
 *     lineage progress i64 | life u64 (the member's life the view was decided with)
 * The caller sends one request and reads one reply; the responder closes. Integers are
 * little-endian.
 */
#include "ring/elect_internal.h"
#include "base/hr_addr.h"

#include "base/hr_log.h"
#include "base/hr_time.h"
#include "ring/bytes.h"
#include "ring/form_internal.h"
#include "ring/frame.h"
#include "ring/ring_internal.h"
#include "ring/tcp.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { EL_IDLE = 0, EL_ELECTING = 1, EL_FORMING = 2, EL_TRAINING = 3 };
enum { LOBBY_REQ = 1, LOBBY_REP = 2 };

#define LOBBY_VERSION  4
#define LOBBY_ADMIT    0x01
#define LOBBY_CONFIG   0x02
#define LOBBY_ELECTING 0x04
#define LOBBY_DIGEST   32
#define LOBBY_REQ_LEN  (8 + LOBBY_DIGEST + 32)
#define LOBBY_REP_HDR  (48 + LOBBY_DIGEST + 8)
#define LOBBY_MEMBER   32
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
#define ELECT_LOG_S 5.0 /* seconds between "waiting for a quorum" lines */
/* Bounded elections (configs of more than ELECT_FULL_N nodes; "Election" above): */
#define ELECT_FULL_N  16  /* up to this many nodes every node probes every other */
#define ELECT_CAND    2   /* a node probes this many of the lowest live ids below its own */
#define ELECT_SWEEP   64  /* most nodes one sweep of a node without a live lower id probes */
#define ELECT_SWEEP_S 0.5 /* seconds between two sweeps */
#define ELECT_DEAD_S  1.0 /* a node whose probe failed is probed again after this */
#define ELECT_LED_S                                                                                \
    1.5                    /* a lower id that answered this lately and then timed out still        \
                            * leads (it may be slow, not gone): no sweep, no decision */
#define ELECT_CALL_S 0.002 /* a follower's pause between rounds grows by this per node */
#define ELECT_BPROBE_S                                                                             \
    1.0 /* a bounded probe's deadline (0.5 s for a silent peer), at most                           \
         * timeout / 2: the lowest ids serve every node's calls in turn */

/* A follower's pause between rounds of a bounded election: the lowest ids get about
 * 1 / ELECT_CALL_S calls a second whatever N. */
static double follow_s(const ring *r) {
    return ELECT_ROUND_S + ELECT_CALL_S * r->rc.n_members;
}

/* How long a call from an electing node counts at the node called: two of its rounds and a
 * probe's deadline. */
static double reg_s(const ring *r) {
    return 2 * follow_s(r) + ELECT_BPROBE_S;
}
#define ELECT_DEFAULT_S 60.0 /* rejoin_timeout when the config gives none */

/* An electing node that called this one (LOBBY_ELECTING): what it said, and when. */
typedef struct {
    double t;         /* tcp_now() of the call; 0: none since this node last formed a view */
    uint64_t seen;    /* its highest epoch seen */
    ring_lineage own; /* its lineage */
    uint64_t life;    /* its life id */
    int differs;      /* its configuration digest differs from this node's */
} elect_reg;

/* A node's election state, read by the gate's lobby threads. */
struct ring_elastic {
    pthread_mutex_t mu;               /* guards every field but join */
    int state;                        /* EL_* */
    uint64_t seen;                    /* highest view epoch seen, decided or adopted */
    ring_view view;                   /* FORMING/TRAINING: that view; else the last held */
    ring_lineage lin[RING_MAX_NODES]; /* lineages of view's members, by rank */
    uint64_t lives[RING_MAX_NODES];   /* life ids of view's members, by rank */
    ring_lineage mine;                /* this node's, as the running election was given */
    uint64_t life;                    /* this process's life id (random, nonzero; set once) */
    double join_wait;                 /* test hook HETRING_TEST_JOIN_WAIT, seconds (set once) */
    int been_in_view;                 /* a view has formed here before */
    uint64_t held;                    /* epoch of the last view formed here (0: none) */
    double t_open;                    /* tcp_now() when the ring was opened (set once) */
    atomic_int join;                  /* an admit request was honoured since ring_elect */
    uint8_t digest[LOBBY_DIGEST];     /* of rc.agree; zeros: no configuration check */
    uint8_t told[RING_MAX_NODES];     /* a differing configuration was logged, by index */
    int agree;                        /* nodes known to share this configuration (replies) */
    int bounded;                      /* elections are bounded (set once, elect_alloc) */
    elect_reg reg[RING_MAX_NODES];    /* electing nodes that called this one, by index */
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

/* Node `id`'s rank in view `v`, or -1. */
static int rank_in(const ring_view *v, long id) {
    for (int i = 0; i < v->n; i++)
        if (v->ids[i] == id) return i;
    return -1;
}

static int view_has(const ring_view *v, long id) {
    return rank_in(v, id) >= 0;
}

/* "0,1,3" */
static void ids_str(const long *ids, int n, char *out, size_t len) {
    size_t o = 0;
    out[0] = 0;
    for (int i = 0; i < n && o + 24 < len; i++)
        o += (size_t)snprintf(out + o, len - o, "%s%ld", i ? "," : "", ids[i]);
    if (n == 0) snprintf(out, len, "none");
}

static gate_lobby_fn elect_serve; /* below, "serving the lobby" */

hr_status elect_alloc(ring *r) {
    ring_elastic *el = calloc(1, sizeof *el);
    if (!el) return HR_ERR_NOMEM;
    pthread_mutex_init(&el->mu, NULL);
    atomic_init(&el->join, 0);
    el->t_open = tcp_now();
    if (sodium_init() < 0) {
        free(el);
        return HR_ERR_IO;
    }
    while (el->life == 0) randombytes_buf(&el->life, sizeof el->life);
    const char *wait = getenv("HETRING_TEST_JOIN_WAIT");
    if (wait && *wait) {
        el->join_wait = atof(wait);
        HR_WARN(RING,
                "HETRING_TEST_JOIN_WAIT=%s: this node waits %.1f s before forming each view "
                "that admits a node (a test hook)",
                wait, el->join_wait);
    }
    /* bounded elections above ELECT_FULL_N nodes; HETRING_ELECT=bounded|full chooses (tests) */
    const char *how = getenv("HETRING_ELECT");
    el->bounded = r->rc.n_members > ELECT_FULL_N;
    if (how && (strcmp(how, "bounded") == 0 || strcmp(how, "full") == 0)) {
        el->bounded = how[0] == 'b';
        HR_INFO(RING, "HETRING_ELECT=%s: elections probe %s", how,
                el->bounded ? "the lowest ids, which hear from the others" : "every node");
    } else if (how && *how) {
        HR_WARN(RING, "HETRING_ELECT=%s ignored: expected bounded or full", how);
    }
    if (r->rc.agree_len > 0 && r->rc.agree_len <= RING_AGREE_MAX)
        crypto_generichash(el->digest, LOBBY_DIGEST, (const uint8_t *)r->rc.agree, r->rc.agree_len,
                           NULL, 0);
    r->el = el;
    gate_set_lobby(r, elect_serve, r); /* the gate answers lobby calls from its start */
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
    for (int i = 0; i < r->view.n; i++) el->lives[i] = r->view.ids[i] == r->self_id ? el->life : 0;
    if (r->view.epoch > el->seen) el->seen = r->view.epoch;
    el->been_in_view = 1;
    el->held = r->view.epoch;
    pthread_mutex_unlock(&el->mu);
}

void ring_set_stop(ring *r, const volatile sig_atomic_t *stop) {
    r->stop = stop;
}

void ring_set_ending(ring *r, int ending) {
    r->ending = ending;
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
    le_put32(b + 40, (uint32_t)(decided ? el->view.n : el->agree));
    memcpy(b + 48, el->digest, LOBBY_DIGEST);
    le_put64(b + 48 + LOBBY_DIGEST, el->life);
    for (int i = 0; i < n; i++) {
        uint8_t *m = b + LOBBY_REP_HDR + (size_t)i * LOBBY_MEMBER;
        le_put64(m, (uint64_t)el->view.ids[i]);
        le_put64(m + 8, el->lin[i].epoch);
        le_put64(m + 16, (uint64_t)el->lin[i].progress);
        le_put64(m + 24, el->lives[i]);
    }
    return LOBBY_REP_HDR + (size_t)n * LOBBY_MEMBER;
}

/* The gate's lobby handler (gate_lobby_fn; ctx: the ring). */
static void elect_serve(void *ctx, int fd, sec_chan *ch, long peer, const char *addr,
                        double deadline) {
    ring *r = ctx;
    ring_elastic *el = r->el;
    uint8_t body[LOBBY_MAX];
    size_t len = 0;
    char why[HR_ERRLEN];
    hr_status st = lobby_recv(fd, ch, LOBBY_REQ, body, &len, deadline, why, sizeof why);
    if (st == HR_OK && (len != LOBBY_REQ_LEN || body[0] != LOBBY_VERSION ||
                        (body[1] & ~(LOBBY_ADMIT | LOBBY_CONFIG | LOBBY_ELECTING)) != 0 ||
                        le_get32(body + 4) != 0 || body[2] || body[3]))
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
    int idx = ring_config_index(&r->rc, peer);
    pthread_mutex_lock(&el->mu);
    state = el->state;
    /* an electing caller counts in this node's election for reg_s() (bounded elections) */
    if ((body[1] & LOBBY_ELECTING) && idx >= 0 && state == EL_ELECTING)
        el->reg[idx] = (elect_reg){.t = tcp_now(),
                                   .seen = le_get64(body + 40),
                                   .own = {le_get64(body + 48), (int64_t)le_get64(body + 56)},
                                   .life = le_get64(body + 64),
                                   .differs = differs};
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
    int ok;                           /* it answered with a well-formed reply */
    int silent;                       /* its last probe in this election timed out */
    char why[HR_ERRLEN];              /* why not */
    int state, admitted;              /* its EL_* state; it honoured the admit request */
    uint64_t seen;                    /* its highest epoch seen */
    ring_view view;                   /* its view (n = 0 unless forming or training) */
    ring_lineage own;                 /* its own lineage */
    uint64_t life;                    /* its life id */
    ring_lineage lin[RING_MAX_NODES]; /* its view members' lineages, by rank */
    uint64_t lives[RING_MAX_NODES];   /* its view members' life ids, by rank */
    int differs;                      /* its configuration digest differs from this node's */
    int agree;                        /* nodes it knows to share its configuration */
    int probed;                       /* probed in this round (else ok comes from a call) */
    double retry_at;                  /* bounded: not probed before then (its probe failed) */
    double last_ok;                   /* bounded: when it last answered (tcp_now; 0: never) */
    double wait_s;                    /* bounded: this round's probe deadline (0: probe_s) */
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
    p->agree = (int)le_get32(b + 40);
    p->life = le_get64(b + 48 + LOBBY_DIGEST);
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *m = b + LOBBY_REP_HDR + (size_t)i * LOBBY_MEMBER;
        p->view.ids[i] = (long)le_get64(m);
        p->lin[i].epoch = le_get64(m + 8);
        p->lin[i].progress = (int64_t)le_get64(m + 16);
        p->lives[i] = le_get64(m + 24);
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
                        .seg_bytes = (uint32_t)r->seg_bytes,
                        .tree_bytes = (uint32_t)r->rc.tree_bytes};
    sec_chan ch;
    *len = 0;
    hr_status st = sec_handshake(fd, 1, &hp, deadline, &ch, &refused, why, whylen);
    if (st == HR_OK) {
        uint8_t req[LOBBY_REQ_LEN] = {LOBBY_VERSION, (uint8_t)flags};
        memcpy(req + 8, r->el->digest, LOBBY_DIGEST);
        pthread_mutex_lock(&r->el->mu);
        le_put64(req + 40, r->el->seen);
        le_put64(req + 48, r->el->mine.epoch);
        le_put64(req + 56, (uint64_t)r->el->mine.progress);
        le_put64(req + 64, r->el->life);
        pthread_mutex_unlock(&r->el->mu);
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
    double deadline = tcp_now() + (p->wait_s > 0 ? p->wait_s : probe_s(p->r, p->silent));
    int flags = LOBBY_ELECTING | (p->admit ? LOBBY_ADMIT : 0);
    HR_CHECK(lobby_call(p->r, p->idx, flags, deadline, body, &len, p->why, sizeof p->why));
    return reply_parse(p, body, len);
}

static void *probe_main(void *arg) {
    probe *p = arg;
    hr_status st = probe_run(p);
    p->ok = st == HR_OK;
    p->silent = st == HR_ERR_TIMEOUT;
    return NULL;
}

/* The probes of one round, shared by at most ELECT_THREADS threads. */
typedef struct {
    probe *pr;        /* every member's */
    const int *which; /* member indices to probe */
    int n;            /* how many */
    atomic_int next;  /* the next entry of which[] to take */
} probe_set;

static void *probe_worker(void *arg) {
    probe_set *ps = arg;
    for (int k; (k = atomic_fetch_add(&ps->next, 1)) < ps->n;) probe_main(&ps->pr[ps->which[k]]);
    return NULL;
}

/* Probe the members which[0..n) (never self), at most ELECT_THREADS at once; wait for all of
 * them (each ends by its deadline). */
static void probe_round(ring *r, probe *pr, const int *which, int n) {
    probe_set ps = {.pr = pr, .which = which, .n = n};
    atomic_init(&ps.next, 0);
    for (int k = 0; k < n; k++) {
        probe *p = &pr[which[k]];
        p->ok = 0;
        p->probed = 1;
        p->why[0] = 0;
        p->r = r;
        p->idx = which[k];
    }
    pthread_t th[ELECT_THREADS];
    int nth = 0;
    while (nth < n && nth < ELECT_THREADS && pthread_create(&th[nth], NULL, probe_worker, &ps) == 0)
        nth++;
    probe_worker(&ps); /* this thread probes too (all of them if no thread started) */
    for (int t = 0; t < nth; t++) pthread_join(th[t], NULL);
    for (int k = 0; k < n; k++) {
        probe *p = &pr[which[k]];
        if (!p->ok)
            HR_TRACE(RING, "probe of node %ld: %s", r->rc.members[which[k]].id, p->why);
        else if (p->admit && p->admitted)
            HR_DEBUG(RING, "node %ld (training view %llu) will admit this node",
                     r->rc.members[which[k]].id, (unsigned long long)p->view.epoch);
    }
}

/* ================================================================ installing a view */

static void set_state(ring_elastic *el, int state) {
    pthread_mutex_lock(&el->mu);
    el->state = state;
    pthread_mutex_unlock(&el->mu);
}

hr_status elect_check_own(const ring_view *v, int rank, const ring_lineage *lin,
                          const uint64_t *lives, const ring_lineage *mine, uint64_t life, char *err,
                          size_t errlen) {
    if (rank < 0 || rank >= v->n)
        return hr_fail(err, errlen, HR_ERR_VIEW, "view %llu does not hold this node",
                       (unsigned long long)v->epoch);
    if (lives[rank] != life) /* pick_adopt and decide make sure; kept as a guard */
        return hr_fail(err, errlen, HR_ERR_VIEW,
                       "view %llu was decided with an earlier life of node %ld",
                       (unsigned long long)v->epoch, v->ids[rank]);
    if (lin[rank].epoch != mine->epoch || lin[rank].progress != mine->progress)
        return hr_fail(err, errlen, HR_ERR_VIEW,
                       "view %llu records node %ld's state as (view %llu, %lld iterations), but "
                       "it holds (view %llu, %lld iterations): the view was decided from an "
                       "older call of this node",
                       (unsigned long long)v->epoch, v->ids[rank],
                       (unsigned long long)lin[rank].epoch, (long long)lin[rank].progress,
                       (unsigned long long)mine->epoch, (long long)mine->progress);
    return HR_OK;
}

/* Every member all-gathers a hash of (view, lineages, lives): the ring is whole and all
 * agree. First, this node's own entry must be its life and its lineage (elect_check_own); a
 * member that fails it closes its links, so the others fail the all-gather at once. */
static hr_status confirm(ring *r, const ring_lineage *lin, const uint64_t *lives, char *err,
                         size_t errlen) {
    HR_CHECK(
        elect_check_own(&r->view, r->rank, lin, lives, &r->el->mine, r->el->life, err, errlen));
    uint8_t h[32], all[RING_MAX_NODES][32], buf[32];
    crypto_generichash_state s;
    crypto_generichash_init(&s, (const uint8_t *)"hetring-view-v1", 15, 32);
    le_put64(buf, r->view.epoch);
    crypto_generichash_update(&s, buf, 8);
    for (int i = 0; i < r->view.n; i++) {
        le_put64(buf, (uint64_t)r->view.ids[i]);
        le_put64(buf + 8, lin[i].epoch);
        le_put64(buf + 16, (uint64_t)lin[i].progress);
        le_put64(buf + 24, lives[i]);
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
static hr_status install(ring *r, const ring_view *v, const ring_lineage *lin,
                         const uint64_t *lives, const char *how, ring_agreement *out, char *err,
                         size_t errlen) {
    ring_elastic *el = r->el;
    pthread_mutex_lock(&el->mu);
    int admits = 0; /* a member the last view held here lacks (for the test hook) */
    for (int i = 0; el->held > 0 && i < v->n; i++) admits |= !view_has(&el->view, v->ids[i]);
    if (v->epoch <= el->seen) { /* never two views of one epoch */
        pthread_mutex_unlock(&el->mu);
        return hr_fail(err, errlen, HR_ERR_VIEW, "view %llu is not above epoch %llu seen here",
                       (unsigned long long)v->epoch, (unsigned long long)el->seen);
    }
    el->seen = v->epoch;
    el->state = EL_FORMING;
    el->view = *v;
    memset(el->reg, 0, sizeof el->reg); /* the calls of this election are answered */
    memcpy(el->lin, lin, (size_t)v->n * sizeof *lin);
    memcpy(el->lives, lives, (size_t)v->n * sizeof *lives);
    int been = el->been_in_view;
    pthread_mutex_unlock(&el->mu);
    char ids[RING_MAX_NODES * 8];
    ids_str(v->ids, v->n, ids, sizeof ids);
    HR_DEBUG(RING, "%s view %llu: nodes %s; forming", how, (unsigned long long)v->epoch, ids);
    r->view = *v;
    if (el->join_wait > 0 && admits) {
        HR_INFO(RING, "test hook: waiting %.1f s before forming view %llu", el->join_wait,
                (unsigned long long)v->epoch);
        hr_sleep(el->join_wait);
    }
    /* after the first view: the timeout, and time for the slowest member to finish its probe
     * round and adopt the view */
    double secs = been ? r->timeout + 2 * probe_s(r, 0) : r->rc.connect_timeout;
    hr_status st = ring_form(r, secs, err, errlen);
    if (st == HR_OK) st = confirm(r, lin, lives, err, errlen);
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
    int bounded;                /* more than ELECT_FULL_N nodes (or HETRING_ELECT=bounded) */
    int led;                    /* bounded: a lower id leads (lower_leads) */
    int lower_open;             /* bounded: a lower id is still to be tried */
    int sweep;                  /* bounded: the member index the next sweep starts at */
    uint64_t stale_told;        /* the highest epoch said to be of an earlier life */
    int failed;                 /* views that failed to form in this election */
    double next_sweep;          /* bounded: no sweep before then */
    double t0;                  /* tcp_now() when the election began */
    double s_since;             /* bounded: when the electing set last changed */
    ring_view prev;             /* the last view this node held (n = 0: none) */
    int suspect;                /* member index the failure was blamed on, or -1 */
    int *which;                 /* scratch: the member indices to probe (n_members) */
} election;

/* ---------------------------------------------------------------- probing a round */

/* Every other member (elections of at most ELECT_FULL_N nodes). */
static void probe_all(ring *r, election *e) {
    int k = 0;
    for (int i = 0; i < r->rc.n_members; i++)
        if (i != r->self) e->which[k++] = i;
    probe_round(r, e->pr, e->which, k);
}

/* The probes of which[0..k) that failed are not probed again for ELECT_DEAD_S; those that
 * answered note when. */
static void note_probes(election *e, int k) {
    double now = tcp_now();
    for (int j = 0; j < k; j++) {
        probe *p = &e->pr[e->which[j]];
        if (p->ok)
            p->last_ok = now;
        else
            p->retry_at = now + ELECT_DEAD_S;
    }
}

/* Whether a node below this one leads: it answered this round, or answered within ELECT_LED_S
 * and then only timed out (slow under load rather than gone; a refused connection is gone). */
static int lower_leads(ring *r, const election *e, double now) {
    for (int i = 0; i < r->self; i++) {
        const probe *p = &e->pr[i];
        if (p->differs) continue;
        if ((p->probed && p->ok) ||
            (p->last_ok > 0 && now - p->last_ok < ELECT_LED_S && (p->ok || p->silent)))
            return 1;
    }
    return 0;
}

/* Add member i to this round's probes unless it is there already. */
static void probe_add(election *e, int *k, int i, double wait_s) {
    for (int j = 0; j < *k; j++)
        if (e->which[j] == i) return;
    e->pr[i].wait_s = wait_s;
    e->which[(*k)++] = i;
}

/* A bounded round: this node probes the ELECT_CAND lowest ids below its own that did not fail
 * lately (its candidates for leader) and the peers it asks for admission; only when no lower id
 * leads does it also sweep, every ELECT_SWEEP_S, up to ELECT_SWEEP of the nodes that did not
 * call it. Every probe is also a call that counts the prober as electing at the node probed
 * for reg_s(), so the lowest live node learns the electing set from the calls: per round,
 * fan-out ELECT_CAND (and a leader's sweep), fan-in about N / follow_s() a second at the two
 * lowest live ids and none elsewhere. */
static void probe_bounded(ring *r, election *e) {
    int n = r->rc.n_members, k = 0;
    double now = tcp_now(),
           wait_s = r->timeout / 2 < ELECT_BPROBE_S ? r->timeout / 2 : ELECT_BPROBE_S;
    for (int i = 0; i < n; i++) e->pr[i].ok = e->pr[i].probed = 0;
    for (int i = 0; i < r->self && k < ELECT_CAND; i++)
        if (e->pr[i].retry_at <= now) probe_add(e, &k, i, e->pr[i].silent ? wait_s / 2 : wait_s);
    for (int i = 0, a = 0; i < n && a < ELECT_CAND; i++)
        if (i != r->self && e->pr[i].admit) probe_add(e, &k, i, wait_s), a++;
    probe_round(r, e->pr, e->which, k);
    note_probes(e, k);
    now = tcp_now();
    e->led = lower_leads(r, e, now);
    /* lower ids not yet tried in this window: the next rounds probe them before this node
     * may sweep or decide (at a cold start only the lowest node up sweeps) */
    e->lower_open = 0;
    for (int i = 0; i < r->self; i++) e->lower_open |= !e->pr[i].probed && e->pr[i].retry_at <= now;
    elect_reg reg[RING_MAX_NODES];
    ring_elastic *el = r->el;
    pthread_mutex_lock(&el->mu);
    memcpy(reg, el->reg, (size_t)n * sizeof *reg);
    pthread_mutex_unlock(&el->mu);
    if (!e->led && !e->lower_open && now >= e->next_sweep) {
        /* the node the failure was blamed on, the last view's members, then round the config
         * from where the last sweep ended */
        k = 0;
        int c = 0;
        for (int pass = -1; pass < 2; pass++)
            for (c = 0; c < (pass > 0 ? n : pass == 0 ? e->prev.n : 1) && k < ELECT_SWEEP; c++) {
                int i = pass > 0    ? (e->sweep + c) % n
                        : pass == 0 ? ring_config_index(&r->rc, e->prev.ids[c])
                                    : e->suspect;
                const probe *p = i >= 0 ? &e->pr[i] : NULL;
                if (!p || i == r->self || p->probed || p->retry_at > now ||
                    (reg[i].t > 0 && now - reg[i].t <= reg_s(r)))
                    continue;
                probe_add(e, &k, i, p->silent ? wait_s / 2 : wait_s);
            }
        e->sweep = (e->sweep + c) % n;
        e->next_sweep = now + ELECT_SWEEP_S;
        probe_round(r, e->pr, e->which, k);
        note_probes(e, k);
    }
    /* the nodes that called lately and were not probed: electing, as they said */
    for (int i = 0; i < n; i++) {
        probe *p = &e->pr[i];
        if (i == r->self || p->probed || reg[i].t <= 0 || now - reg[i].t > reg_s(r)) continue;
        p->ok = 1;
        p->state = EL_ELECTING;
        p->admitted = 0;
        p->seen = reg[i].seen;
        p->view.n = 0;
        p->own = reg[i].own;
        p->life = reg[i].life;
        p->differs = reg[i].differs;
        p->agree = 0;
        p->why[0] = 0;
    }
}

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

/* The peer whose view this node should adopt (forming or training, contains this node as the
 * life it is, epoch above seen; the highest such epoch), or -1. A view decided with an earlier
 * life of this node is said once per epoch and left to fail. */
static int pick_adopt(ring *r, election *e, uint64_t seen) {
    int best = -1;
    for (int i = 0; i < r->rc.n_members; i++) {
        const probe *p = &e->pr[i];
        if (i == r->self || !p->ok || p->differs ||
            (p->state != EL_FORMING && p->state != EL_TRAINING))
            continue;
        int k = rank_in(&p->view, r->self_id);
        if (k < 0 || p->view.epoch <= seen) continue;
        if (p->lives[k] != r->el->life) {
            if (p->view.epoch > e->stale_told) {
                e->stale_told = p->view.epoch;
                HR_INFO(RING,
                        "not adopting view %llu (node %ld %s it): it was decided with an earlier "
                        "life of this node, whose state it records; waiting for the next",
                        (unsigned long long)p->view.epoch, r->rc.members[i].id,
                        state_name(p->state));
            }
            continue;
        }
        if (best < 0 || p->view.epoch > e->pr[best].view.epoch) best = i;
    }
    return best;
}

/* This round's electing set; peers training without this node are asked to admit it. */
static void electing_set(ring *r, election *e, uint64_t seen) {
    e->n_s = 0;
    e->n_differ = 0;
    int agree_elsewhere = 0; /* nodes that share a differing peer's configuration */
    for (int i = 0; i < r->rc.n_members; i++) {
        probe *p = &e->pr[i];
        int differs = i != r->self && p->ok && p->differs;
        e->n_differ += differs;
        e->in_s[i] = i == r->self || (p->ok && !differs && p->state == EL_ELECTING);
        e->n_s += e->in_s[i];
        if (i != r->self && p->ok && !differs && p->seen > 0) e->history = 1;
        if (differs && p->probed && p->agree > agree_elsewhere) agree_elsewhere = p->agree;
        if (i != r->self)
            p->admit = p->ok && !differs && p->state == EL_TRAINING &&
                       (!view_has(&p->view, r->self_id) || p->view.epoch > seen);
    }
    /* a bounded election hears from few nodes: those that share a differing peer's
     * configuration (its own count) differ from this node's too */
    if (agree_elsewhere > e->n_differ) e->n_differ = agree_elsewhere;
    pthread_mutex_lock(&r->el->mu);
    r->el->agree = e->n_s;
    pthread_mutex_unlock(&r->el->mu);
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

/* Bounded: whether every member of the last view this node held is accounted for: electing
 * with it, or its probe failed in this election, or its configuration differs. One still
 * training that view has not seen the failure yet, and one not heard from is swept first;
 * the leader waits for them up to reg_s() into the election, so that a view change at large N
 * does not leave the late ones out (each would then ask to be admitted: another change). */
static int prev_accounted(ring *r, const election *e) {
    for (int k = 0; k < e->prev.n; k++) {
        int i = ring_config_index(&r->rc, e->prev.ids[k]);
        if (i < 0 || i == r->self || e->in_s[i]) continue;
        const probe *p = &e->pr[i];
        if (p->retry_at > 0 || (p->ok && p->differs)) continue;
        return 0;
    }
    return 1;
}

/* Full elections: whether a member of the last view this node held answered this round that it
 * still trains that view: alive, and not yet aware of the change (a planned one, an admission,
 * reaches each member at its next iteration boundary; on a loaded machine that is late). The
 * leader waits for it up to min(reg_s(), timeout) into the election, so that it is not left
 * out to be admitted in a second change, with a state transfer. */
static int prev_training(ring *r, const election *e) {
    for (int k = 0; k < e->prev.n; k++) {
        int i = ring_config_index(&r->rc, e->prev.ids[k]);
        if (i < 0 || i == r->self || e->in_s[i]) continue;
        const probe *p = &e->pr[i];
        if (p->ok && !p->differs && p->state == EL_TRAINING && p->view.epoch == e->prev.epoch)
            return 1;
    }
    return 0;
}

/* Is this node the leader of a stable quorum, allowed to decide now? */
static int may_decide(ring *r, const election *e) {
    int n = r->rc.n_members, lowest = -1;
    for (int i = 0; i < n && lowest < 0; i++)
        if (e->in_s[i]) lowest = i;
    if (lowest != r->self || e->n_s < e->quorum || !e->have_prev || e->led || e->lower_open)
        return 0;
    if (memcmp(e->in_s, e->prev_s, (size_t)n * sizeof(int)) != 0) return 0;
    /* bounded: the set was stable for a follower's round, and the last view is accounted for */
    if (e->bounded && (tcp_now() - e->s_since < follow_s(r) ||
                       (!prev_accounted(r, e) && tcp_now() - e->t0 < reg_s(r))))
        return 0;
    /* full: a member still training the last view is on its way */
    const double late_s = reg_s(r) < r->timeout ? reg_s(r) : r->timeout;
    if (!e->bounded && prev_training(r, e) && tcp_now() - e->t0 < late_s) return 0;
    /* the first view waits for every node, but not for one whose configuration differs */
    return !cold_start(r, e) || e->n_s + e->n_differ == n ||
           tcp_now() - r->el->t_open >= r->rc.connect_timeout;
}

/* The view the leader decides: S in ascending id, epoch 1 + the highest seen over S. */
static void decide(ring *r, const election *e, uint64_t seen, ring_view *v, ring_lineage *lin,
                   uint64_t *lives) {
    uint64_t top = seen;
    v->n = 0;
    for (int i = 0; i < r->rc.n_members; i++) {
        if (!e->in_s[i]) continue;
        const probe *p = &e->pr[i];
        if (i != r->self && p->seen > top) top = p->seen;
        v->ids[v->n] = r->rc.members[i].id;
        lives[v->n] = i == r->self ? r->el->life : p->life;
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
            uint64_t f = lives[j];
            lives[j] = lives[j - 1];
            lives[j - 1] = f;
        }
    v->epoch = top + 1;
}

/* "reachable: nodes 0,1 (electing 0,1); no answer from node 2 (node 2 (HOST:PORT): why)": ids,
 * never a count, so that "reachable: node 0" alone is not read as "no node reachable"; the
 * nodes probed this round that did not answer are the ones this node waits for, the first
 * one's failure says how, with the address it was called at */
static void reach_str(ring *r, const election *e, char *out, size_t len) {
    long reach[RING_MAX_NODES], el[RING_MAX_NODES], gone[RING_MAX_NODES];
    int nr = 0, ne = 0, ng = 0;
    const char *why = "";
    char addr[HR_ADDR_LEN] = "";
    for (int i = 0; i < r->rc.n_members; i++) {
        if (i == r->self || e->pr[i].ok)
            reach[nr++] = r->rc.members[i].id;
        else if (e->pr[i].probed) {
            if (ng == 0) {
                why = e->pr[i].why;
                hr_addr(addr, sizeof addr, r->rc.members[i].host, r->rc.members[i].port);
            }
            gone[ng++] = r->rc.members[i].id;
        }
        if (e->in_s[i]) el[ne++] = r->rc.members[i].id;
    }
    char a[RING_MAX_NODES * 8], b[RING_MAX_NODES * 8], c[RING_MAX_NODES * 8];
    ids_str(reach, nr, a, sizeof a);
    ids_str(el, ne, b, sizeof b);
    ids_str(gone, ng, c, sizeof c);
    int o =
        snprintf(out, len, "reachable: node%s %.200s (electing %.200s)", nr > 1 ? "s" : "", a, b);
    if (ng > 0 && o > 0 && (size_t)o < len)
        snprintf(out + o, len - (size_t)o,
                 "; no answer from node%s %.200s (node %ld (%.100s): %.120s)", ng > 1 ? "s" : "", c,
                 gone[0], addr, why[0] ? why : "no reply");
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
    if (e->bounded)
        probe_bounded(r, e);
    else
        probe_all(r, e);
    uint64_t seen = seen_now(r->el);
    int a = pick_adopt(r, e, seen);
    if (a >= 0) {
        e->have_prev = 0;
        if (install(r, &e->pr[a].view, e->pr[a].lin, e->pr[a].lives, "adopting", out, err,
                    errlen) == HR_OK)
            return HR_OK;
        e->failed++;
        return HR_ERR_VIEW;
    }
    electing_set(r, e, seen);
    if (!e->have_prev || memcmp(e->in_s, e->prev_s, (size_t)r->rc.n_members * sizeof(int)) != 0)
        e->s_since = tcp_now();
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
        uint64_t lives[RING_MAX_NODES];
        decide(r, e, seen, &v, lin, lives);
        e->have_prev = 0;
        if (install(r, &v, lin, lives, "deciding", out, err, errlen) == HR_OK) return HR_OK;
        e->failed++;
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
                char addr[HR_ADDR_LEN];
                hr_addr(addr, sizeof addr, m->host, m->port);
                if (left > 0)
                    HR_INFO(RING, "waiting for node %ld (%s): %.200s; %s in %.0f s more", m->id,
                            addr, p->ok ? state_name(p->state) : p->why,
                            e->n_s >= e->quorum ? "starting without it" : "retrying", left);
                else
                    HR_INFO(RING, "node %ld (%s) is not here (%.200s)", m->id, addr,
                            p->ok ? state_name(p->state) : p->why);
            }
        int lead = -1; /* bounded: the quorum is the leader's to count */
        for (int i = 0; e->led && i < r->self && lead < 0; i++)
            if (e->pr[i].last_ok > 0 && !e->pr[i].differs) lead = i;
        const probe *lp = lead >= 0 ? &e->pr[lead] : NULL;
        /* at the run's end (ring_set_ending) the view agrees the end, and nothing is left to
         * train */
        const char *to = r->ending ? " to agree the run's end" : "";
        const char *then = r->ending ? "training is done" : "training pauses";
        if (lp && lp->ok && lp->state == EL_ELECTING && lp->agree < e->quorum)
            HR_WARN(RING,
                    "waiting for a quorum of %d of %d nodes%s: %s; node %ld leads, %d electing "
                    "with it; %s",
                    e->quorum, r->rc.n_members, to, reach, ring_id_of(r, lead), lp->agree, then);
        else if (lp)
            HR_INFO(RING, "electing a view: node %ld leads (%s); %s", ring_id_of(r, lead),
                    lp->ok ? state_name(lp->state) : "slow to answer", reach);
        else if (e->n_s < e->quorum)
            HR_WARN(RING, "waiting for a quorum of %d of %d nodes%s: %s; %s", e->quorum,
                    r->rc.n_members, to, reach, then);
        else
            HR_INFO(RING, "electing a view: %s", reach);
        e->next_log = tcp_now() + ELECT_LOG_S;
    }
    return HR_ERR_VIEW;
}

/* An election begins: the links dropped, this node ELECTING with lineage `mine`, `e` set up
 * with a probe state for every member. *starting: this node never held a view. */
static hr_status elect_begin(ring *r, const ring_lineage *mine, election *e, int *starting) {
    ring_elastic *el = r->el;
    ring_close_links(r); /* first: the neighbours of a failed collective see EOF at once */
    r->failed = HR_ERR_VIEW;
    snprintf(r->err, sizeof r->err, "electing a new view");
    pthread_mutex_lock(&el->mu);
    el->state = EL_ELECTING;
    el->mine = *mine;
    pthread_mutex_unlock(&el->mu);
    atomic_store(&el->join, 0);
    *e = (election){.quorum = quorum_of(&r->rc), .next_log = tcp_now() + 1.0};
    e->pr = calloc((size_t)r->rc.n_members, sizeof *e->pr);
    e->which = calloc((size_t)r->rc.n_members, sizeof *e->which);
    if (!e->pr || !e->which) {
        free(e->pr);
        free(e->which);
        return HR_ERR_NOMEM;
    }
    e->bounded = el->bounded;
    e->t0 = e->s_since = tcp_now();
    pthread_mutex_lock(&el->mu);
    if (el->held > 0) e->prev = el->view;
    *starting = el->held == 0;
    pthread_mutex_unlock(&el->mu);
    /* the node the failure was blamed on is probed as a silent one from the first round */
    int sus =
        r->suspect >= 0 && r->suspect != r->self_id ? ring_config_index(&r->rc, r->suspect) : -1;
    if (sus >= 0) e->pr[sus].silent = 1;
    e->suspect = sus;
    r->suspect = -1;
    return HR_OK;
}

hr_status ring_elect(ring *r, const ring_lineage *mine, ring_agreement *out, char *err,
                     size_t errlen) {
    ring_elastic *el = r->el;
    if (!el) return hr_fail(err, errlen, HR_ERR_INVAL, "ring_elect on a ring that is not open");
    election e;
    int starting;
    if (elect_begin(r, mine, &e, &starting) != HR_OK)
        return hr_fail(err, errlen, HR_ERR_NOMEM, "out of memory");
    double limit = r->rc.rejoin_timeout > 0 ? r->rc.rejoin_timeout : ELECT_DEFAULT_S;
    /* a node that never held a view is starting, and so may its peers be: the first view waits
     * for every node up to connect_timeout, as its "waiting for node K" lines say (a loaded
     * machine took 1.3 s to start four nodes), and only then is elected without the missing
     * ones, which takes an election's own time: so a starting node elects for connect_timeout
     * plus rejoin_timeout (with the larger of the two alone, a quorum that started without a
     * node had well under a second left once the wait ended, and failed) */
    const char *limit_key = "rejoin_timeout";
    if (starting) {
        limit += r->rc.connect_timeout;
        limit_key = "connect_timeout + rejoin_timeout";
    }
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
        if (st == HR_OK) out->failed_views = e.failed;
        if (st == HR_OK || st == HR_ERR_CONFIG || tcp_now() - t0 >= limit) break;
        /* a bounded election's followers call the lowest ids less often as N grows */
        double pause = e.bounded && e.led ? follow_s(r) : ELECT_ROUND_S;
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
        st = hr_fail(r->err, sizeof r->err, HR_ERR_TIMEOUT,
                     "no view within %s %.1f s: a quorum needs %d of %d nodes, %s%s%.200s",
                     limit_key, limit, e.quorum, r->rc.n_members, reach,
                     why[0] ? "; last failure: " : "", why);
        if (err) snprintf(err, errlen, "%s", r->err);
    }
    free(e.pr);
    free(e.which);
    return st;
}
