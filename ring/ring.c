/*
 * ring.c: ring formation, the frame engine and the collectives (see ring.h).
 *
 * Every collective is compiled into a schedule: the frames this node sends to its successor
 * (byte ranges of one buffer, each with the number of received frames it must wait for) and
 * the frames it receives from its predecessor (byte ranges, each added as floats or copied).
 * One engine runs any schedule with non-blocking sockets: it sends whatever is ready, receives
 * whatever has arrived, reduces each segment as soon as it has been verified, and sleeps in
 * poll() only when neither link can move. So both links run at once, reduction overlaps the
 * transfers, and no wait is longer than `timeout` without progress.
 *
 * Invariants:
 *  - a received frame's header is checked against the one expected (epoch, sequence number,
 *    collective, index, length) before its payload is read (I7);
 *  - in auth and encrypt modes no payload byte is added or copied before its tag verified;
 *  - each segment of the all-reduce is reduced once, by the node that owns it in that step,
 *    and then copied unchanged, so all members end with the same bytes (I4).
 */
#include "ring/ring.h"

#include "base/hr_log.h"
#include "base/hr_time.h"
#include "ring/bytes.h"
#include "ring/elect.h"
#include "ring/frame.h"
#include "ring/tcp.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* Measured default pipeline segment (bench/README.md, "All-reduce"). */
#define RING_SEG_DEFAULT (1 << 20)
/* All-reduces of at most this many bytes gather every contribution and add them in rank
 * order: fewer hops, so lower latency, at the cost of (N-1)x the traffic. */
#define RING_SMALL_BYTES (32 << 10)
/* Collectives receiving at most this many bytes spin up to RING_SPIN_S before sleeping. */
#define RING_SPIN_BYTES (256 << 10)
#define RING_SPIN_S     50e-6
/* Collectives receiving more than this run on the threaded engine (where it is on): below it
 * the hand-offs between threads cost about what they save (bench/README.md, "All-reduce"). */
#define RING_MT_BYTES (1 << 20)

static const char *engine_name(const ring *r, char *out, size_t n);

/* ================================================================ names and errors */

static void node_str(const ring *r, long id, char *out, size_t n) {
    int i = ring_config_index(&r->rc, id);
    if (i < 0)
        snprintf(out, n, "node %ld", id);
    else
        snprintf(out, n, "node %ld (%s:%ld)", id, r->rc.members[i].host, r->rc.members[i].port);
}

static long id_of(const ring *r, int idx) {
    return r->rc.members[idx].id;
}

const char *ring_error(const ring *r) {
    return r->err;
}

void ring_set_step_timeout(ring *r, double secs) {
    r->coll_timeout = secs;
}

int ring_rank(const ring *r) {
    return r->rank;
}

size_t ring_segment_bytes(const ring *r) {
    return r->seg_bytes;
}

int ring_size(const ring *r) {
    return r->view.n;
}

const ring_view *ring_get_view(const ring *r) {
    return &r->view;
}

void ring_close_links(ring *r) {
    tcp_close(&r->succ_fd);
    tcp_close(&r->pred_fd);
    sec_chan_free(&r->succ_ch);
    sec_chan_free(&r->pred_ch);
}

/* ================================================================ formation */

/*
 * The gate: one thread per ring, from the first listen until ring_free, does all accepting.
 * It hands each connection to a handshake thread of its own, with a short deadline (GATE_HS_S,
 * at most `timeout`, while a view forms; GATE_IDLE_S otherwise, when only lobby calls can
 * succeed); at most GATE_PENDING of them run at once, and a new connection past that cap evicts
 * the oldest one from the address with the most pending. A lobby call (any member of the
 * config, sec.h) is served by its handshake thread: one request, one reply, closed
 * (elect_serve, every read and write by the same deadline). The first ring-link connection
 * that proves to be the expected predecessor while a view forms is taken. Every other
 * connection (one that fails its handshake, a ring link while no view forms) is closed at once
 * and its address logged. So nothing a node without the key does can hold formation up, and no
 * stranger's connection stays open for long.
 * Invariant: a slot's fd is shut down (never closed) by the gate, under `mu`, and only while
 * the handshake thread still owns it; that thread closes it.
 */
#define GATE_PENDING 16                 /* unauthenticated connections handshaking at once */
#define GATE_SLOTS   (2 * GATE_PENDING) /* those, and evicted ones still winding down */
#define GATE_HS_S    5.0                /* per-connection handshake deadline, capped by timeout */
#define GATE_IDLE_S  1.0                /* the same while no view forms (lobby calls only) */
#define GATE_LOGS    20                 /* lines per second about strangers; the rest are counted */

typedef struct {
    ring_gate *g;            /* owner */
    pthread_t th;            /* the handshake thread */
    int used;                /* th started and not yet joined (gate thread only) */
    int done;                /* the handshake thread is finishing (mu) */
    int fd;                  /* the connection while the handshake thread owns it, else -1 (mu) */
    const char *cut;         /* why the gate shut the connection down, or NULL (mu) */
    double t0;               /* when it was accepted (tcp_now seconds) */
    double deadline;         /* its handshake must finish by then */
    sec_hs_params p;         /* what the handshake must agree on */
    sec_hs_peer who_is;      /* who the other end proved to be */
    char peer[96];           /* "addr:port" of the remote end */
    char who[RING_STR + 64]; /* the predecessor expected, for messages */
    sec_chan ch;             /* channel of a successful handshake */
} gate_slot;

struct ring_gate {
    ring *r;                     /* the ring it accepts for (listen_fd, rc and keys read) */
    pthread_t th;                /* the gate thread */
    atomic_int stop;             /* set by ring_free */
    double hs_s;                 /* per-connection handshake deadline in seconds */
    pthread_mutex_t mu;          /* guards what follows */
    pthread_cond_t cv;           /* signalled when fd is set (CLOCK_MONOTONIC) */
    int forming;                 /* a view is forming: connections are handshaken */
    sec_hs_params p;             /* its parameters (or the last view's, for messages) */
    char who[RING_STR + 64];     /* its expected predecessor */
    int fd;                      /* the authenticated predecessor, or -1 */
    sec_chan ch;                 /* its channel */
    hr_status st;                /* status of the last rejection (HR_ERR_TIMEOUT if none) */
    char err[HR_ERRLEN];         /* the last rejection or accept failure of this formation */
    double log_t;                /* start of the current one-second log window */
    int log_n;                   /* lines logged in it */
    long log_skipped;            /* lines not shown since the last one shown */
    gate_slot slots[GATE_SLOTS]; /* handshake threads */
};

/* A WARN line about a stranger, at most GATE_LOGS a second (a flood must not flood the log). */
static void gate_log(ring_gate *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void gate_log(ring_gate *g, const char *fmt, ...) {
    char line[HR_ERRLEN + 256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    long skipped = -1;
    pthread_mutex_lock(&g->mu);
    double now = tcp_now();
    if (now - g->log_t >= 1.0) {
        g->log_t = now;
        g->log_n = 0;
    }
    if (g->log_n < GATE_LOGS) {
        g->log_n++;
        skipped = g->log_skipped;
        g->log_skipped = 0;
    } else {
        g->log_skipped++;
    }
    pthread_mutex_unlock(&g->mu);
    if (skipped > 0)
        HR_WARN(SEC, "%s (%ld similar lines not shown before this one)", line, skipped);
    else if (skipped == 0)
        HR_WARN(SEC, "%s", line);
}

/* Shut a pending connection down, so that its handshake thread ends now. Under mu. */
static void gate_cut(gate_slot *s, const char *why) {
    if (s->cut) return;
    s->cut = why;
    if (s->fd >= 0) shutdown(s->fd, SHUT_RDWR);
}

static void *gate_hs_main(void *arg) {
    gate_slot *s = arg;
    ring_gate *g = s->g;
    int fd = s->fd, refused = 0;
    char why[HR_ERRLEN];
    hr_status st = sec_handshake(fd, 0, &s->p, s->deadline, &s->ch, &refused, why, sizeof why);
    if (st == HR_OK && s->who_is.lobby) {
        /* the gate may still shut fd down (s->fd is kept) while the request is served */
        elect_serve(g->r, fd, &s->ch, s->who_is.id, s->peer, s->deadline);
        pthread_mutex_lock(&g->mu);
        s->fd = -1;
        s->done = 1;
        pthread_mutex_unlock(&g->mu);
        sec_chan_free(&s->ch);
        close(fd);
        return NULL;
    }
    pthread_mutex_lock(&g->mu);
    const char *cut = s->cut;
    int take = st == HR_OK && !cut && g->forming && g->fd < 0;
    if (take) {
        g->fd = fd;
        g->ch = s->ch;
        pthread_cond_broadcast(&g->cv);
    } else if (st != HR_OK && !cut && g->forming) {
        g->st = st;
        snprintf(g->err, sizeof g->err, "rejected a connection from %s: %.380s", s->peer, why);
    }
    s->fd = -1;
    s->done = 1;
    pthread_mutex_unlock(&g->mu);
    sec_chan_free(&s->ch);
    if (take) return NULL;
    close(fd);
    if (cut)
        gate_log(g, "closed a connection from %s after %.1f s: %s", s->peer, tcp_now() - s->t0,
                 cut);
    else if (st == HR_ERR_VIEW) /* another epoch or neighbour: transient while views change */
        HR_DEBUG(SEC, "refused a connection from %s (expected predecessor %s): %s", s->peer, s->who,
                 why);
    else if (st != HR_OK)
        gate_log(g, "rejected a connection from %s (expected predecessor %s): %s", s->peer, s->who,
                 why);
    else
        gate_log(g, "closed a connection from %s: predecessor %s is connected already", s->peer,
                 s->who);
    return NULL;
}

/* Join finished handshake threads; with `all`, shut every connection down and join them all. */
static void gate_reap(ring_gate *g, int all) {
    for (int i = 0; i < GATE_SLOTS; i++) {
        gate_slot *s = &g->slots[i];
        if (!s->used) continue;
        pthread_mutex_lock(&g->mu);
        if (all) gate_cut(s, "this node is shutting down");
        int done = s->done;
        pthread_mutex_unlock(&g->mu);
        if (!done && !all) continue;
        pthread_join(s->th, NULL);
        s->used = 0;
    }
}

/* The pending connection to evict: the oldest from the address with the most pending (the
 * predecessor has one at a time, so a flood from elsewhere never evicts it). Under mu. */
static int gate_victim(ring_gate *g) {
    int best = -1, best_n = 0;
    for (int i = 0; i < GATE_SLOTS; i++) {
        gate_slot *s = &g->slots[i];
        if (!s->used || s->done || s->cut) continue;
        size_t hl = strcspn(s->peer, "]") + 1, colon = (size_t)(strrchr(s->peer, ':') - s->peer);
        hl = hl < colon ? hl : colon;
        int n = 0;
        for (int j = 0; j < GATE_SLOTS; j++) {
            gate_slot *o = &g->slots[j];
            if (o->used && !o->done && !o->cut && strncmp(o->peer, s->peer, hl) == 0) n++;
        }
        if (n > best_n || (n == best_n && s->t0 < g->slots[best].t0)) best = i, best_n = n;
    }
    return best;
}

/* Start a handshake thread for a new connection, or close it at once. */
static void gate_admit(ring_gate *g, int fd, const char *peer) {
    const char *no = NULL;
    pthread_mutex_lock(&g->mu);
    uint64_t epoch = g->p.epoch;
    int live = 0, free_i = -1;
    for (int i = 0; i < GATE_SLOTS; i++) {
        gate_slot *s = &g->slots[i];
        if (!s->used)
            free_i = free_i < 0 ? i : free_i;
        else if (!s->done && !s->cut)
            live++;
    }
    if (live >= GATE_PENDING) {
        int v = gate_victim(g);
        if (v >= 0) gate_cut(&g->slots[v], "evicted: too many unauthenticated connections pending");
    }
    if (free_i < 0) no = "too many unauthenticated connections pending";
    if (!no) {
        gate_slot *s = &g->slots[free_i];
        s->g = g;
        s->fd = fd;
        s->done = 0;
        s->cut = NULL;
        s->t0 = tcp_now();
        s->deadline = s->t0 + (g->forming || g->hs_s < GATE_IDLE_S ? g->hs_s : GATE_IDLE_S);
        s->p = g->p;
        s->p.accept_lobby = 1;
        s->p.peer = &s->who_is;
        s->who_is = (sec_hs_peer){-1, 0};
        if (!g->forming) s->p.expect_id = -1; /* a ring link is refused: none is wanted now */
        snprintf(s->peer, sizeof s->peer, "%s", peer);
        snprintf(s->who, sizeof s->who, "%s", g->forming ? g->who : "none (no view is forming)");
        if (pthread_create(&s->th, NULL, gate_hs_main, s) == 0)
            s->used = 1;
        else
            no = "cannot start a handshake thread";
    }
    pthread_mutex_unlock(&g->mu);
    if (!no) return;
    close(fd);
    gate_log(g, "closed a connection from %s: %s (view epoch %llu)", peer, no,
             (unsigned long long)epoch);
}

static void *gate_main(void *arg) {
    ring_gate *g = arg;
    while (!atomic_load(&g->stop)) {
        gate_reap(g, 0);
        int fd;
        char peer[96], why[HR_ERRLEN];
        hr_status st =
            tcp_accept(g->r->listen_fd, tcp_now() + 0.1, &fd, peer, sizeof peer, why, sizeof why);
        if (st == HR_OK) {
            gate_admit(g, fd, peer);
        } else if (st != HR_ERR_TIMEOUT) { /* out of descriptors, say: keep trying */
            pthread_mutex_lock(&g->mu);
            if (g->forming) snprintf(g->err, sizeof g->err, "%s", why);
            pthread_mutex_unlock(&g->mu);
            gate_log(g, "listening socket: %s", why);
            hr_sleep(0.1);
        }
    }
    gate_reap(g, 1);
    return NULL;
}

static sec_hs_params hs_params(const ring *r, long expect);

/* Start the gate on r->listen_fd. */
static hr_status gate_start(ring *r, char *err, size_t errlen) {
    size_t sz = (sizeof(ring_gate) + 63) & ~(size_t)63; /* holds aligned channel states */
    ring_gate *g = aligned_alloc(64, sz);
    if (!g) return hr_fail(err, errlen, HR_ERR_NOMEM, "out of memory");
    memset(g, 0, sz);
    g->r = r;
    g->fd = -1;
    for (int i = 0; i < GATE_SLOTS; i++) g->slots[i].fd = -1;
    g->hs_s = r->timeout < GATE_HS_S ? r->timeout : GATE_HS_S;
    g->p = (sec_hs_params){.rc = &r->rc,
                           .keys = &r->keys,
                           .epoch = r->view.epoch,
                           .self_id = r->self_id,
                           .expect_id = -1,
                           .seg_bytes = (uint32_t)r->seg_bytes};
    if (r->view.n > 1) { /* ring_init knows its view: formation is open from the first accept */
        int rank = 0;
        while (rank < r->view.n - 1 && r->view.ids[rank] != r->self_id) rank++;
        long pred = r->view.ids[(rank + r->view.n - 1) % r->view.n];
        g->forming = 1;
        g->p = hs_params(r, pred);
        node_str(r, pred, g->who, sizeof g->who);
        g->st = HR_ERR_TIMEOUT;
        snprintf(g->err, sizeof g->err, "no connection from predecessor %s", g->who);
    }
    atomic_init(&g->stop, 0);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&g->th, NULL, gate_main, g) != 0) {
        pthread_cond_destroy(&g->cv);
        pthread_mutex_destroy(&g->mu);
        free(g);
        return hr_fail(err, errlen, HR_ERR_IO, "cannot start the accepting thread");
    }
    r->gate = g;
    return HR_OK;
}

/* Stop the gate: every pending connection is closed and every thread joined. */
static void gate_stop(ring *r) {
    ring_gate *g = r->gate;
    if (!g) return;
    atomic_store(&g->stop, 1);
    pthread_join(g->th, NULL);
    if (g->fd >= 0) close(g->fd);
    sec_chan_free(&g->ch);
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g);
    r->gate = NULL;
}

/* Listen on this node's address and start the gate. */
static hr_status listen_start(ring *r, char *err, size_t errlen) {
    const ring_member *me = &r->rc.members[r->self];
    HR_CHECK(tcp_listen(me->host, me->port, &r->listen_fd, err, errlen));
    hr_status st = gate_start(r, err, errlen);
    if (st != HR_OK) tcp_close(&r->listen_fd);
    return st;
}

/* Formation begins: connections are handshaken as the predecessor `p` names. Where it is open
 * already for that predecessor in that epoch (gate_start opens ring_init's at the first
 * accept), a rejection recorded since is kept: the predecessor may have been turned away
 * before ring_form got here, and the error must still say why. */
static void gate_open(ring_gate *g, const sec_hs_params *p, const char *who) {
    pthread_mutex_lock(&g->mu);
    int open = g->forming && g->p.epoch == p->epoch && g->p.expect_id == p->expect_id;
    g->forming = 1;
    g->p = *p;
    snprintf(g->who, sizeof g->who, "%s", who);
    if (!open) {
        g->st = HR_ERR_TIMEOUT;
        snprintf(g->err, sizeof g->err, "no connection from predecessor %s", who);
    }
    pthread_mutex_unlock(&g->mu);
}

/* Wait until `deadline` for the predecessor (0 skips the wait), then end formation. Returns the
 * predecessor's fd and channel, or -1 with the last rejection's status in `st` and its text in
 * `why`. */
static int gate_close(ring_gate *g, double deadline, sec_chan *ch, hr_status *st, char *why,
                      size_t whylen) {
    pthread_mutex_lock(&g->mu);
    while (g->fd < 0 && tcp_now() < deadline) {
        double t = tcp_now() + 0.5 < deadline ? tcp_now() + 0.5 : deadline; /* monotonic */
        struct timespec ts = {(time_t)t, (long)((t - (double)(time_t)t) * 1e9)};
        pthread_cond_timedwait(&g->cv, &g->mu, &ts);
    }
    int fd = g->fd;
    g->fd = -1;
    if (fd >= 0) *ch = g->ch;
    sec_chan_free(&g->ch);
    g->forming = 0;
    /* handshakes still running are left to their deadline: they may be lobby calls, and a
     * ring link that finishes now is closed as no longer wanted */
    *st = g->st;
    snprintf(why, whylen, "%s", g->err);
    pthread_mutex_unlock(&g->mu);
    return fd;
}

static sec_hs_params hs_params(const ring *r, long expect) {
    sec_hs_params p = {.rc = &r->rc,
                       .keys = &r->keys,
                       .epoch = r->view.epoch,
                       .self_id = r->self_id,
                       .expect_id = expect,
                       .seg_bytes = (uint32_t)r->seg_bytes};
    return p;
}

/* Connect to the successor, retrying with backoff until `deadline`. */
static hr_status connect_succ(ring *r, double deadline, double secs, char *err, size_t errlen) {
    const ring_member *s = &r->rc.members[r->succ];
    char who[RING_STR + 64], why[HR_ERRLEN] = "no attempt";
    node_str(r, s->id, who, sizeof who);
    double backoff = 0.01;
    int tries = 0;
    for (;;) {
        double now = tcp_now();
        if (now >= deadline) break;
        int fd;
        double d = now + r->timeout < deadline ? now + r->timeout : deadline;
        hr_status st = tcp_connect(s->host, s->port, d, &fd, why, sizeof why);
        tries++;
        if (st == HR_OK) {
            sec_hs_params p = hs_params(r, s->id);
            int refused;
            st = sec_handshake(fd, 1, &p, tcp_now() + r->timeout, &r->succ_ch, &refused, why,
                               sizeof why);
            if (st == HR_OK) {
                r->succ_fd = fd;
                return HR_OK;
            }
            close(fd);
            /* A view mismatch (other epoch, other neighbour) is transient while the members
             * re-form one after another: retry until the deadline, keeping the reason. */
            if (st == HR_ERR_AUTH || st == HR_ERR_PROTO || (refused && st != HR_ERR_VIEW)) {
                HR_ERROR(SEC, "successor %s: %s", who, why);
                return hr_fail(err, errlen, st, "successor %s: %s", who, why);
            }
        } else if (st == HR_ERR_CONFIG) {
            return hr_fail(err, errlen, st, "successor %s: %s", who, why);
        }
        HR_DEBUG(RING, "connect to %s: %s; retrying in %.0f ms", who, why, backoff * 1e3);
        hr_sleep(backoff < deadline - tcp_now() ? backoff : deadline - tcp_now());
        backoff = backoff * 2 > 0.5 ? 0.5 : backoff * 2;
    }
    return hr_fail(err, errlen, HR_ERR_TIMEOUT,
                   "could not connect to successor %s within %.1f s (%d attempts): %s", who, secs,
                   tries, why);
}

/* Form the ring of r->view: connect to the successor and take the predecessor, both within
 * `secs` seconds. */
hr_status ring_form(ring *r, double secs, char *err, size_t errlen) {
    r->rank = -1;
    for (int i = 0; i < r->view.n; i++)
        if (r->view.ids[i] == r->self_id) r->rank = i;
    if (r->rank < 0)
        return hr_fail(err, errlen, HR_ERR_VIEW, "node %ld is not a member of view epoch %llu",
                       r->self_id, (unsigned long long)r->view.epoch);
    int n = r->view.n;
    r->seq = 0;
    r->failed = HR_OK;
    r->err[0] = 0;
    r->succ = r->pred = -1;
    if (n == 1) {
        char eng_s[96];
        HR_INFO(RING, "ring of 1: view epoch %llu, nothing to connect, %s",
                (unsigned long long)r->view.epoch, engine_name(r, eng_s, sizeof eng_s));
        return HR_OK;
    }
    r->succ = ring_config_index(&r->rc, r->view.ids[(r->rank + 1) % n]);
    r->pred = ring_config_index(&r->rc, r->view.ids[(r->rank + n - 1) % n]);
    if (r->succ < 0 || r->pred < 0)
        return hr_fail(err, errlen, HR_ERR_VIEW, "view epoch %llu names a node not in the config",
                       (unsigned long long)r->view.epoch);
    double deadline = tcp_now() + secs;
    char pw[RING_STR + 64], why[HR_ERRLEN];
    node_str(r, id_of(r, r->pred), pw, sizeof pw);
    sec_hs_params p = hs_params(r, id_of(r, r->pred));
    gate_open(r->gate, &p, pw);
    hr_status st = connect_succ(r, deadline, secs, err, errlen), pst;
    r->pred_fd =
        gate_close(r->gate, st == HR_OK ? deadline : 0, &r->pred_ch, &pst, why, sizeof why);
    if (st == HR_OK && r->pred_fd < 0)
        st = hr_fail(err, errlen, pst,
                     "no authenticated connection from predecessor %s within %.1f s: %s", pw, secs,
                     why);
    if (st != HR_OK) {
        ring_close_links(r);
        return st;
    }
    char sw[RING_STR + 64], eng_s[96];
    node_str(r, id_of(r, r->succ), sw, sizeof sw);
    HR_INFO(RING,
            "ring formed: view epoch %llu, rank %d of %d, successor %s, predecessor %s, "
            "security %s (%s), %s",
            (unsigned long long)r->view.epoch, r->rank, n, sw, pw, ring_security_name(r->keys.mode),
            sec_aead_name(r->succ_ch.tx.aead), engine_name(r, eng_s, sizeof eng_s));
    return HR_OK;
}

static void mt_free(ring *r); /* the threaded engine's threads and staging */

/* The threaded engine's workers: HETRING_RING_WORKERS (off, or 0 to MT_WORKERS_MAX), else
 * the cores this process may use, shared among the config's nodes with this node's host, less
 * the receiving and the sending thread; -1 (off: one thread runs every collective) when that
 * share is less than two cores. */
#define MT_WORKERS_MAX 8
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
                           "node %ld: HETRING_RING_WORKERS=%s: expected off or 0 to %d", r->self_id,
                           env, MT_WORKERS_MAX);
        r->mt_workers = (int)w;
        return HR_OK;
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) cores = CPU_COUNT(&set);
    int here = 0;
    for (int i = 0; i < r->rc.n_members; i++)
        here += strcmp(r->rc.members[i].host, r->rc.members[r->self].host) == 0;
    long per = cores / (here > 0 ? here : 1);
    /* with less than two cores a node's threads would only take turns: one thread runs it */
    r->mt_workers = per < 2 ? -1 : per - 2 > MT_WORKERS_MAX ? MT_WORKERS_MAX : (int)(per - 2);
    return HR_OK;
}

int ring_workers(const ring *r) {
    return r->mt_workers;
}

uint64_t ring_threaded_runs(const ring *r) {
    return r->mt_runs;
}

/* How collectives run, for the log. */
static const char *engine_name(const ring *r, char *out, size_t n) {
    if (r->mt_workers < 0)
        snprintf(out, n, "one thread per collective");
    else
        snprintf(out, n, "threaded engine (sender + %d worker%s) above %d KiB", r->mt_workers,
                 r->mt_workers == 1 ? "" : "s", RING_MT_BYTES >> 10);
    return out;
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

/* What ring_init and ring_open share: copy the config, load the keys, allocate the stages and
 * the election state. */
static hr_status ring_setup(ring *r, const ring_config *rc) {
    memset(r, 0, sizeof *r);
    r->listen_fd = r->succ_fd = r->pred_fd = -1;
    r->succ = r->pred = -1;
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
    HR_CHECK(sec_keys_load(&r->keys, &r->rc, r->err, sizeof r->err));
    if (r->keys.mode == RING_SEC_NONE)
        HR_WARN(SEC, "security = none: ring links are neither authenticated nor encrypted");
    if (alloc_stage(r) != HR_OK || elect_alloc(r) != HR_OK)
        return hr_fail(r->err, sizeof r->err, HR_ERR_NOMEM, "out of memory");
    return HR_OK;
}

hr_status ring_init(ring *r, const ring_config *rc, char *err, size_t errlen) {
    hr_status st;
    HR_CHECK_GOTO(ring_setup(r, rc), st, fail);
    r->view.epoch = 0;
    r->view.n = rc->n_members;
    for (int i = 0; i < rc->n_members; i++) r->view.ids[i] = rc->members[i].id;
    if (rc->n_members > 1) HR_CHECK_GOTO(listen_start(r, r->err, sizeof r->err), st, fail);
    HR_CHECK_GOTO(ring_form(r, r->rc.connect_timeout, r->err, sizeof r->err), st, fail);
    elect_formed(r);
    return HR_OK;
fail:
    if (err) snprintf(err, errlen, "%s", r->err);
    return st;
}

hr_status ring_open(ring *r, const ring_config *rc, char *err, size_t errlen) {
    hr_status st;
    HR_CHECK_GOTO(ring_setup(r, rc), st, fail);
    r->view = (ring_view){.epoch = 0, .n = 0};
    r->rank = -1;
    r->failed = HR_ERR_VIEW;
    snprintf(r->err, sizeof r->err, "no view yet: call ring_elect");
    if (rc->n_members > 1) HR_CHECK_GOTO(listen_start(r, r->err, sizeof r->err), st, fail);
    return HR_OK;
fail:
    if (err) snprintf(err, errlen, "%s", r->err);
    return st;
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
    ring_sched *s = &r->sched;
    free(s->tx_off);
    free(s->tx_len);
    free(s->tx_need);
    free(s->rx_off);
    free(s->rx_len);
    free(s->rx_add);
    memset(s, 0, sizeof *s);
    r->tx_stage = r->rx_stage = NULL;
    r->tmp = NULL;
}

/* ================================================================ schedules */

static hr_status sched_reserve(ring_sched *s, size_t n) {
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

static size_t nseg_of(size_t bytes, size_t seg) {
    return bytes <= seg ? 1 : (bytes + seg - 1) / seg;
}

/* Blocks of a ring step schedule: byte offset and length of each rank's block. */
typedef struct {
    const size_t *off, *len;
} blocks;

/* Build the schedule of a sequence of ring steps: at step k this node sends block tx_blk[k] and
 * receives block rx_blk[k] (adding floats when add[k]). The block sent at step k is the one
 * received at step k-1, so its i-th segment waits for that segment to arrive. */
static hr_status sched_steps(ring *r, const blocks *b, const int *tx_blk, const int *rx_blk,
                             const uint8_t *add, int steps, size_t esz) {
    ring_sched *s = &r->sched;
    size_t total = 0;
    for (int k = 0; k < steps; k++)
        total +=
            nseg_of(b->len[tx_blk[k]], r->seg_bytes) + nseg_of(b->len[rx_blk[k]], r->seg_bytes);
    if (sched_reserve(s, total) != HR_OK) return HR_ERR_NOMEM;
    s->n_tx = s->n_rx = 0;
    size_t prev_rx_start = 0;
    for (int k = 0; k < steps; k++) {
        size_t len = b->len[tx_blk[k]], e = len / esz, ns = nseg_of(len, r->seg_bytes);
        for (size_t i = 0; i < ns; i++) {
            size_t lo = i * e / ns, hi = (i + 1) * e / ns;
            s->tx_off[s->n_tx] = b->off[tx_blk[k]] + lo * esz;
            s->tx_len[s->n_tx] = (hi - lo) * esz;
            s->tx_need[s->n_tx] = k == 0 ? 0 : prev_rx_start + i + 1;
            s->n_tx++;
        }
        prev_rx_start = s->n_rx;
        len = b->len[rx_blk[k]], e = len / esz, ns = nseg_of(len, r->seg_bytes);
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

/* The outgoing frame in flight. */
typedef struct {
    uint8_t hdr[FRAME_HDR]; /* header (mode none; secure modes build it in tx_stage) */
    struct iovec iov[2];    /* what is left to send */
    int iovn;               /* entries of iov in use */
    size_t left;            /* bytes left */
} txf;

static void iov_advance(txf *t, size_t n) {
    t->left -= n;
    while (n > 0 && t->iovn > 0) {
        if (n >= t->iov[0].iov_len) {
            n -= t->iov[0].iov_len;
            t->iov[0] = t->iov[1];
            t->iovn--;
        } else {
            t->iov[0].iov_base = (char *)t->iov[0].iov_base + n;
            t->iov[0].iov_len -= n;
            n = 0;
        }
    }
    while (t->iovn > 0 && t->iov[0].iov_len == 0) {
        t->iov[0] = t->iov[1];
        t->iovn--;
    }
}

/* Finish sending the frame in flight (blocking, with a deadline). */
static hr_status tx_finish(ring *r, txf *t, double deadline) {
    while (t->left > 0) {
        struct msghdr m = {.msg_iov = t->iov, .msg_iovlen = (size_t)t->iovn};
        ssize_t n = sendmsg(r->succ_fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            iov_advance(t, (size_t)n);
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            HR_CHECK(tcp_wait(r->succ_fd, POLLOUT, deadline));
            continue;
        }
        return HR_ERR_PEER;
    }
    return HR_OK;
}

/* Where a failure was seen: on the predecessor link, on the successor link, or here. */
enum { FROM_PRED, FROM_SUCC, FROM_HERE };

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

/* Pass news of a failure to both neighbours, except the link it came from, the reporter and the
 * culprit, so that it travels round the ring both ways and every member names the same node.
 * A node blamed for a link that failed authentication is told too: it is alive and only sent
 * frames, and without the news it would see its links close and blame a neighbour. Forward,
 * the frame in flight is finished first so that the abort starts on a frame boundary.
 * Backward (on the predecessor link, which carries no data that way) it can go at once. */
static void spread(ring *r, txf *t, int coll, long culprit, long reporter, hr_status st,
                   const char *text, int from) {
    long pid = r->pred >= 0 ? id_of(r, r->pred) : -1, sid = r->succ >= 0 ? id_of(r, r->succ) : -1;
    int tell_culprit = st == HR_ERR_AUTH;
    if (r->pred >= 0 && from != FROM_PRED && pid != reporter && (pid != culprit || tell_culprit))
        send_abort(r, r->pred_fd, &r->pred_ch.tx, coll, culprit, reporter, st, text);
    if (r->succ >= 0 && from != FROM_SUCC && sid != reporter && (sid != culprit || tell_culprit) &&
        r->succ_fd >= 0) {
        if (t && t->left > 0 && tx_finish(r, t, tcp_now() + spread_s(r)) != HR_OK) return;
        send_abort(r, r->succ_fd, &r->succ_ch.tx, coll, culprit, reporter, st, text);
    }
}

/* Record a failure of this view, blaming node `culprit`, seen `from` a link or here. The
 * links stay open (closing them would look like yet another failure to the neighbours) until
 * ring_reform or ring_free, except a predecessor link that carried a bad frame: it is dropped,
 * after an abort on it tells the predecessor why its frames are no longer read. */
static hr_status fail_view(ring *r, txf *t, int coll, hr_status st, long culprit, int from,
                           const char *fmt, ...) __attribute__((format(printf, 7, 8)));
static hr_status fail_view(ring *r, txf *t, int coll, hr_status st, long culprit, int from,
                           const char *fmt, ...) {
    char what[HR_ERRLEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(r->err, sizeof r->err, "%s #%llu (view epoch %llu): %.400s", frame_coll_name(coll),
             (unsigned long long)r->seq, (unsigned long long)r->view.epoch, what);
    if (st == HR_ERR_AUTH || st == HR_ERR_PROTO) /* not cured by a new view */
        HR_ERROR(RING, "%s", r->err);
    else
        HR_WARN(RING, "%s", r->err);
    r->suspect = culprit;
    spread(r, t, coll, culprit, r->self_id, st, what, from);
    if (from == FROM_PRED && (st == HR_ERR_AUTH || st == HR_ERR_PROTO || st == HR_ERR_VIEW)) {
        send_abort(r, r->pred_fd, &r->pred_ch.tx, coll, culprit, r->self_id, st, what);
        tcp_close(&r->pred_fd);
    }
    r->failed = st;
    return st;
}

/* A frame on the link `from` failed authentication (or, unverified, cannot be a genuine one). */
static hr_status link_auth_fail(ring *r, txf *t, int coll, int from, const char *frame) {
    char pw[RING_STR + 64];
    long nid = id_of(r, from == FROM_PRED ? r->pred : r->succ);
    node_str(r, nid, pw, sizeof pw);
    return fail_view(r, t, coll, HR_ERR_AUTH, nid, from,
                     "authentication failed on the link from %s (tampered or corrupted frame%s); "
                     "%sframe unused",
                     pw, frame, from == FROM_PRED ? "connection dropped, " : "");
}

/* Report the abort frame whose payload (`len` bytes, verified in secure modes) is `body` and
 * pass it on. `body` has room for one more byte. */
static hr_status abort_report(ring *r, txf *t, int coll, uint8_t *body, size_t len, int from) {
    if (len < 20 || len > FRAME_ABORT_MAX) {
        char pw[RING_STR + 64];
        long nid = id_of(r, from == FROM_PRED ? r->pred : r->succ);
        node_str(r, nid, pw, sizeof pw);
        return fail_view(r, t, coll, HR_ERR_PROTO, nid, from, "%s sent a malformed abort frame",
                         pw);
    }
    body[len] = 0;
    long culprit = (long)le_get64(body);
    hr_status st = (hr_status)le_get32(body + 8);
    if (st <= HR_OK || st >= HR_STATUS_COUNT) st = HR_ERR_PEER;
    long reporter = (long)le_get64(body + 12);
    char *text = (char *)body + 20;
    for (char *q = text; *q; q++)
        if (*q < 32 || *q > 126) *q = '?';
    char rw[RING_STR + 64];
    node_str(r, reporter, rw, sizeof rw);
    snprintf(r->err, sizeof r->err, "%s #%llu (view epoch %llu): %.300s (reported by %.100s)",
             frame_coll_name(coll), (unsigned long long)r->seq, (unsigned long long)r->view.epoch,
             text, rw);
    if (st == HR_ERR_AUTH || st == HR_ERR_PROTO)
        HR_ERROR(RING, "%s", r->err);
    else
        HR_WARN(RING, "%s", r->err);
    r->suspect = culprit;
    /* pass it on unchanged, so the next member names the same culprit and reporter */
    if (reporter != r->self_id) spread(r, t, coll, culprit, reporter, st, text, from);
    r->failed = st;
    return st;
}

/* Read the rest of a frame whose header `raw` came in on the link `from` and that should be an
 * abort. In secure modes it is verified before any header field but the length is used; the
 * length is bounded first (no genuine abort is longer), so the read stays in `f`. */
static hr_status on_abort(ring *r, txf *t, int coll, const uint8_t *raw, int from) {
    char pw[RING_STR + 64];
    int fd = from == FROM_PRED ? r->pred_fd : r->succ_fd;
    sec_dir *d = from == FROM_PRED ? &r->pred_ch.rx : &r->succ_ch.rx;
    long nid = id_of(r, from == FROM_PRED ? r->pred : r->succ);
    node_str(r, nid, pw, sizeof pw);
    size_t tag = r->keys.mode != RING_SEC_NONE ? SEC_TAG : 0;
    frame_hdr h;
    frame_decode(raw, &h);
    if (h.len > FRAME_ABORT_MAX && tag) return link_auth_fail(r, t, coll, from, "");
    if (h.len > FRAME_ABORT_MAX) return abort_report(r, t, coll, NULL, h.len, from);
    uint8_t f[FRAME_HDR + FRAME_ABORT_MAX + SEC_TAG], body[FRAME_ABORT_MAX + 1];
    memcpy(f, raw, FRAME_HDR);
    if (tcp_recv_all(fd, f + FRAME_HDR, h.len + tag, tcp_now() + r->timeout) != HR_OK)
        return fail_view(r, t, coll, HR_ERR_PEER, nid, from, "%s closed the connection", pw);
    if (tag && sec_open(d, f, h.len, body) != 0) return link_auth_fail(r, t, coll, from, "");
    if (!tag) memcpy(body, f + FRAME_HDR, h.len);
    if (h.magic != FRAME_MAGIC || h.version != FRAME_VERSION || h.type != FRAME_ABORT ||
        h.epoch != r->view.epoch)
        return fail_view(r, t, coll, HR_ERR_PROTO, nid, from,
                         "%s sent unexpected data the wrong way; connection dropped", pw);
    return abort_report(r, t, coll, body, h.len, from);
}

/* Where the predecessor's stream stands, for news_from_pred: `got` bytes of the next frame's
 * header are in `hdr` (body 0), or `left` bytes of the current frame's payload and tag are
 * still to come (body 1). The incoming channel's counter is that frame's. */
typedef struct {
    const uint8_t *hdr;
    size_t got;
    int body;
    size_t left;
} pred_pos;

/* The successor link closed with no abort on it. That need not be the successor's doing: a node
 * that finds a tampered frame drops the link it came on, and whatever sits in between (a proxy,
 * a middlebox) may then close this node's link too. News of such a failure travels round the
 * ring and reaches this node on its predecessor link behind the data frames in flight. Read
 * that link for up to spread_s, skipping data frames (each takes a nonce counter, as when it is
 * opened), and report the first abort frame, verified in secure modes. HR_OK when none came:
 * the link closed, the time passed or something unreadable came; the caller then blames the
 * successor. */
static hr_status news_from_pred(ring *r, txf *t, int coll, const pred_pos *pp) {
    if (!pp || r->pred < 0 || r->pred_fd < 0 || r->pred == r->succ) return HR_OK;
    const double deadline = tcp_now() + spread_s(r);
    const size_t tag = r->keys.mode != RING_SEC_NONE ? SEC_TAG : 0;
    uint8_t *f = r->rx_stage, body[FRAME_ABORT_MAX + 1];
    size_t skip = pp->body ? pp->left : 0, got = pp->body ? 0 : pp->got;
    uint64_t ctr = r->pred_ch.rx.ctr;
    if (!pp->body && got > 0) memmove(f, pp->hdr, got);
    for (;;) {
        while (skip > 0) { /* the rest of a data frame nobody will use */
            size_t n = skip < r->stage_cap ? skip : r->stage_cap;
            if (tcp_recv_all(r->pred_fd, f, n, deadline) != HR_OK) return HR_OK;
            skip -= n;
            if (skip == 0) ctr++;
        }
        if (tcp_recv_all(r->pred_fd, f + got, FRAME_HDR - got, deadline) != HR_OK) return HR_OK;
        got = 0;
        frame_hdr h;
        frame_decode(f, &h);
        if (h.magic != FRAME_MAGIC || h.version != FRAME_VERSION) return HR_OK;
        if (h.type == FRAME_DATA) {
            if (h.len + tag > r->stage_cap) return HR_OK; /* no frame of this ring */
            skip = h.len + tag;
            if (skip == 0) ctr++;
            continue;
        }
        if (h.type != FRAME_ABORT || h.len > FRAME_ABORT_MAX) return HR_OK;
        if (tcp_recv_all(r->pred_fd, f + FRAME_HDR, h.len + tag, deadline) != HR_OK) return HR_OK;
        if (tag && sec_open_at(&r->pred_ch.rx, ctr, f, h.len, body) != 0) return HR_OK;
        if (!tag) memcpy(body, f + FRAME_HDR, h.len);
        if (h.epoch != r->view.epoch) return HR_OK;
        r->pred_ch.rx.ctr = ctr + 1;
        return abort_report(r, t, coll, body, h.len, FROM_PRED);
    }
}

/* Something happened on the successor link, which carries nothing this way but an abort: a
 * queued abort frame explains the failure; otherwise news from the predecessor may
 * (news_from_pred, when `pp` says where its stream stands), else the successor is gone. */
static hr_status succ_trouble(ring *r, txf *t, int coll, int e, const pred_pos *pp) {
    char sw[RING_STR + 64];
    long sid = id_of(r, r->succ);
    node_str(r, sid, sw, sizeof sw);
    uint8_t raw[FRAME_HDR];
    ssize_t n = recv(r->succ_fd, raw, 1, MSG_DONTWAIT | MSG_PEEK);
    if (n > 0) {
        if (tcp_recv_all(r->succ_fd, raw, FRAME_HDR, tcp_now() + r->timeout) == HR_OK)
            return on_abort(r, t, coll, raw, FROM_SUCC);
        return fail_view(r, t, coll, HR_ERR_PROTO, sid, FROM_SUCC,
                         "%s sent unexpected data the wrong way; connection dropped", sw);
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && e == 0) return HR_OK;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) e = errno;
    hr_status st = news_from_pred(r, t, coll, pp);
    if (st != HR_OK) return st;
    return fail_view(r, t, coll, HR_ERR_PEER, sid, FROM_SUCC, "%s %s", sw,
                     e == 0 || e == EPIPE || e == ECONNRESET ? "closed the connection (peer died?)"
                                                             : strerror(e));
}

static void add_floats(float *restrict dst, const float *restrict src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

/* One collective in progress: where the schedule stands in each direction. */
typedef struct {
    const ring_sched *s; /* the schedule (r->sched) */
    int coll;            /* FRAME_COLL_* of this collective */
    uint8_t *base;       /* the caller's buffer the schedule's offsets refer to */
    int secure;          /* frames are sealed (auth or encrypt) */
    size_t tag;          /* bytes of tag per frame: SEC_TAG or 0 */
    size_t ti, ri;       /* next frame to send, next frame to receive */
    txf t;               /* the outgoing frame in flight */
    int tx_ready;        /* t holds frame ti, partly sent */
    int rx_body;         /* 0: reading frame ri's header, 1: its payload and tag */
    size_t rx_len;       /* payload bytes of frame ri on the wire (known once its header is in) */
    size_t rx_got;       /* bytes of the current header or payload read so far */
    size_t rx_want;      /* bytes the current header or payload has */
    int progress;        /* something moved in this round */
} eng;

/* Lay frame e->ti out in e->t: sealed in tx_stage, or header and payload as two pieces. */
static void eng_frame(ring *r, eng *e) {
    size_t len = e->s->tx_len[e->ti];
    uint8_t *src = e->base + e->s->tx_off[e->ti];
    frame_hdr th = {FRAME_MAGIC,   FRAME_VERSION, FRAME_DATA,      (uint8_t)e->coll,
                    r->view.epoch, r->seq,        (uint32_t)e->ti, (uint32_t)len};
    if (e->secure) {
        frame_encode(&th, r->tx_stage);
        sec_seal(&r->succ_ch.tx, r->tx_stage, src, len);
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

/* Where the predecessor's stream stands in `e`, for succ_trouble. */
static pred_pos eng_pos(const ring *r, const eng *e) {
    return (pred_pos){.hdr = r->rx_stage,
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
        ssize_t n = sendmsg(r->succ_fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return HR_OK;
            int err = errno ? errno : EPIPE;
            pred_pos pp = eng_pos(r, e);
            return succ_trouble(r, NULL, e->coll, err, &pp);
        }
        e->progress = 1;
        iov_advance(&e->t, (size_t)n);
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
static hr_status eng_header(ring *r, eng *e) {
    frame_hdr h;
    char pw[RING_STR + 64];
    long pid = id_of(r, r->pred);
    size_t ri = e->ri, want = e->s->rx_len[ri];
    const char *coll = frame_coll_name(e->coll);
    frame_decode(r->rx_stage, &h);
    node_str(r, pid, pw, sizeof pw);
    if (h.magic != FRAME_MAGIC || h.version != FRAME_VERSION)
        return fail_view(r, &e->t, e->coll, HR_ERR_PROTO, pid, FROM_PRED,
                         "%s sent a malformed frame header (bad magic or version); connection "
                         "dropped",
                         pw);
    if (h.epoch != r->view.epoch)
        return fail_view(r, &e->t, e->coll, HR_ERR_VIEW, pid, FROM_PRED,
                         "%s sent a frame of view epoch %llu, this node is in %llu; frame dropped",
                         pw, (unsigned long long)h.epoch, (unsigned long long)r->view.epoch);
    if (h.type == FRAME_ABORT && e->secure)
        return abort_report(r, &e->t, e->coll, r->rx_stage + FRAME_HDR, h.len, FROM_PRED);
    if (h.type == FRAME_ABORT) return on_abort(r, &e->t, e->coll, r->rx_stage, FROM_PRED);
    if (h.type != FRAME_DATA || h.seq != r->seq || h.coll != e->coll)
        return fail_view(r, &e->t, e->coll, HR_ERR_PROTO, pid, FROM_PRED,
                         "%s sent a frame of %s #%llu while this node is in %s #%llu (members "
                         "must call the same collectives in the same order)",
                         pw, frame_coll_name(h.coll), (unsigned long long)h.seq, coll,
                         (unsigned long long)r->seq);
    if (h.index != ri)
        return fail_view(r, &e->t, e->coll, HR_ERR_PROTO, pid, FROM_PRED,
                         "%s sent frame %u of %u bytes, expected frame %zu of %zu bytes "
                         "(replayed, dropped or reordered frame); connection dropped",
                         pw, h.index, h.len, ri, want);
    if (h.len != want)
        return fail_view(r, &e->t, e->coll, HR_ERR_PROTO, pid, FROM_PRED,
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
        return link_auth_fail(r, &e->t, e->coll, FROM_PRED, "");
    e->rx_len = h.type == FRAME_ABORT || h.len < want ? h.len : want;
    return HR_OK;
}

/* Frame e->ri has arrived whole. Secure modes: verify it, then check its header. Then copy
 * or add its payload into place. */
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
        if (sec_open(&r->pred_ch.rx, r->rx_stage, len, dst) != 0) {
            char f[32];
            snprintf(f, sizeof f, " %zu", e->ri);
            return link_auth_fail(r, &e->t, e->coll, FROM_PRED, f);
        }
        HR_CHECK(eng_header(r, e));
    }
    if (add) add_floats((float *)out, (const float *)pay, len / 4);
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
                        ? recv(r->pred_fd, eng_rx_dst(r, e), e->rx_want - e->rx_got, MSG_DONTWAIT)
                        : 0;
        if (e->rx_want > e->rx_got && n <= 0) {
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) break;
            int err = n == 0 ? 0 : errno;
            char pw[RING_STR + 64];
            long pid = id_of(r, r->pred);
            node_str(r, pid, pw, sizeof pw);
            return fail_view(r, &e->t, e->coll, HR_ERR_PEER, pid, FROM_PRED, "%s %s", pw,
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
    struct pollfd p[2] = {{.fd = r->pred_fd, .events = e->ri < s->n_rx ? POLLIN : 0},
                          {.fd = r->succ_fd, .events = e->ti < s->n_tx ? POLLIN : 0}};
    if (tx_wait) p[1].events |= POLLOUT;
    const double limit = r->coll_timeout > r->timeout ? r->coll_timeout : r->timeout;
    double left = last + limit - tcp_now();
    int rc = left > 0 ? poll(p, 2, (int)(left * 1000) + 1) : 0;
    if (rc < 0 && errno == EINTR) return HR_OK;
    if (rc == 0 && tcp_now() >= last + limit) {
        long id = id_of(r, tx_wait ? r->succ : r->pred);
        node_str(r, id, who, sizeof who);
        if (tx_wait)
            return fail_view(r, &e->t, e->coll, HR_ERR_TIMEOUT, id, FROM_SUCC,
                             "%s accepted no data for %.1f s (peer dead or hung?)", who, limit);
        return fail_view(r, &e->t, e->coll, HR_ERR_TIMEOUT, id, FROM_PRED,
                         "%s sent nothing for %.1f s (peer dead or hung?)", who, limit);
    }
    if (rc > 0 && e->ti < s->n_tx && (p[1].revents & (POLLIN | POLLHUP | POLLERR))) {
        pred_pos pp = eng_pos(r, e);
        return succ_trouble(r, &e->t, e->coll, 0, &pp);
    }
    return HR_OK;
}

/* Run the schedule in r->sched over `base`: send and receive in both directions at once,
 * each frame as soon as its inputs are there, waiting only when neither link can move. */
static hr_status engine_st(ring *r, int coll, uint8_t *base) {
    eng e = {.s = &r->sched,
             .coll = coll,
             .base = base,
             .secure = r->keys.mode != RING_SEC_NONE,
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

/* ================================================================ the threaded engine
 *
 * Collectives that receive more than RING_MT_BYTES run the same schedule on several threads,
 * so that sending, receiving, sealing, opening and reducing use more than one core:
 *  - the calling thread receives: it reads each frame from the predecessor into a slot (one of
 *    MT_SLOTS staged frames) and, without workers, opens it and applies it at once;
 *  - a sender thread sends frame after frame in schedule order, each once the frames it needs
 *    are applied; without workers it seals them itself;
 *  - worker threads (ring_workers) seal outgoing frames ahead of the sender and open, check and
 *    apply received frames, several at once. Frame i of a collective takes the nonce counter
 *    start + i, exactly as the single-threaded engine gives it, so the wire format is the same
 *    and the two engines talk to each other.
 * The frames applied are counted as a prefix in schedule order (`applied`), which is what the
 * sender waits on. Two frames in flight never touch the same bytes: a frame that overwrites
 * bytes an earlier frame added into can only have been sent after this node sent those bytes
 * on, which it does only after they were applied.
 * Any failure (a bad frame, a send error, a timeout, a frame from the successor) stops the
 * sender and the workers first; the calling thread then reports it with the same functions,
 * messages and abort frames as the single-threaded engine, finishing the sender's partial frame
 * before an abort goes out behind it. Counters of both channels are left where the in-order
 * engine would leave them. */

static hr_status local_fail(ring *r, int coll, hr_status st, const char *what);

#define MT_SLOTS_MIN 4
#define MT_SLOTS_MAX 16
#define MT_POLL_MS   20 /* longest sleep of a thread that must notice a stop */

enum { TX_IDLE, TX_RUN, TX_DONE, TX_FAIL, TX_STOPPED };
enum { RX_FREE, RX_FULL, RX_BUSY, RX_DONE, RX_BAD };

typedef struct ring_mt {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* every change of the state below (broadcast) */
    int wake[2];       /* pipe: wakes the receiver's poll() (sender ended, frame applied) */
    pthread_t sender;
    pthread_t workers[MT_WORKERS_MAX];
    int nworkers, started, quit;
    size_t nslot;  /* staged frames each way */
    size_t cap;    /* bytes of each staged frame */
    uint8_t **txb; /* sealed outgoing frames, frame i in txb[i % nslot] */
    uint8_t **rxb; /* received frames, frame j in rxb[j % nslot] */
    /* the collective in progress (mu) */
    int active, stop;
    ring *r;
    const ring_sched *s;
    uint8_t *base;
    int coll, secure;
    size_t tag;
    uint64_t tx_ctr0, rx_ctr0; /* nonce counters at frame 0 */
    size_t sent;               /* frames the sender finished */
    size_t sealed_next;        /* next outgoing frame to claim for sealing */
    size_t *tx_have;           /* per slot: 1 + index of the frame sealed there, or 0 */
    size_t recvd;              /* frames the receiver has whole */
    size_t open_next;          /* next received frame to claim for applying */
    size_t applied;            /* frames applied, a prefix of the schedule */
    uint8_t *rx_state;         /* per slot: RX_* of frame (slot index modulo nslot) */
    size_t *rx_len;            /* per slot: payload bytes on the wire */
    size_t *need_sent;         /* per received frame: frames that must be sent before it is
                                * received (mt_need_sent) */
    size_t need_cap;           /* entries allocated in need_sent */
    int rx_waits;              /* the receiver waits for a send: the sender wakes it */
    int have_bad;              /* a received frame failed: stop receiving */
    size_t bad;                /* the first frame that failed */
    int bad_auth;              /* it failed to verify (else: its header is not the one expected) */
    int busy;                  /* workers inside a job */
    int tx_state;              /* TX_* */
    int tx_errno;              /* with TX_FAIL */
    int tx_blocked;            /* the sender waits for the successor to take data */
    double last;               /* time of the last progress on either link */
    txf t;                     /* the sender's frame in flight */
} ring_mt;

static void mt_wake(ring_mt *m) {
    char c = 1;
    ssize_t n = write(m->wake[1], &c, 1); /* a full pipe already wakes the reader */
    (void)n;
}

static void mt_drain(ring_mt *m) {
    char buf[64];
    while (read(m->wake[0], buf, sizeof buf) > 0) {
    }
}

/* Seal outgoing frame i into its slot (no lock held; the slot is the claimer's). */
static void mt_seal(ring_mt *m, size_t i) {
    ring *r = m->r;
    const ring_sched *s = m->s;
    uint8_t *f = m->txb[i % m->nslot];
    size_t len = s->tx_len[i];
    frame_hdr th = {FRAME_MAGIC,   FRAME_VERSION, FRAME_DATA,  (uint8_t)m->coll,
                    r->view.epoch, r->seq,        (uint32_t)i, (uint32_t)len};
    frame_encode(&th, f);
    sec_seal_at(&r->succ_ch.tx, m->tx_ctr0 + i, f, m->base + s->tx_off[i], len);
}

/* Does the header of received frame j (in `f`) say what the schedule expects? Only checked
 * here; a frame that does not is reported by the receiver (mt_bad_frame). */
static int mt_header_ok(ring_mt *m, size_t j, const uint8_t *f) {
    const ring *r = m->r;
    frame_hdr h;
    frame_decode(f, &h);
    return h.magic == FRAME_MAGIC && h.version == FRAME_VERSION && h.epoch == r->view.epoch &&
           h.type == FRAME_DATA && h.seq == r->seq && h.coll == m->coll && h.index == j &&
           h.len == m->s->rx_len[j];
}

/* Apply received frame j from its slot: verify it (secure modes), check its header, then add
 * or copy its payload into place. Returns 0, or -1 when the frame is bad (m->bad_auth says
 * how). No lock held. */
static int mt_apply(ring_mt *m, size_t j, int *auth_failed) {
    ring *r = m->r;
    const ring_sched *s = m->s;
    uint8_t *f = m->rxb[j % m->nslot], *pay = f + FRAME_HDR;
    uint8_t *out = m->base + s->rx_off[j];
    size_t len = m->rx_len[j % m->nslot];
    int add = s->rx_add[j];
    *auth_failed = 0;
    if (m->secure) {
        frame_hdr h;
        frame_decode(f, &h);
        uint8_t *dst = add || h.type != FRAME_DATA || len != s->rx_len[j] ? pay : out;
        if (sec_open_at(&r->pred_ch.rx, m->rx_ctr0 + j, f, len, dst) != 0) {
            *auth_failed = 1;
            return -1;
        }
        if (!mt_header_ok(m, j, f)) return -1;
    }
    if (add) add_floats((float *)out, (const float *)pay, len / 4);
    return 0;
}

/* A worker's job, if one is ready (mu held): 1 + frame to seal, or -(1 + frame) to apply. */
static long mt_job(ring_mt *m) {
    const ring_sched *s = m->s;
    if (!m->active || m->stop) return 0;
    size_t j = m->open_next;
    if (j < m->recvd) return -(long)(j + 1);
    size_t i = m->sealed_next;
    if (m->secure && i < s->n_tx && i < m->sent + m->nslot && m->applied >= s->tx_need[i])
        return (long)(i + 1);
    return 0;
}

/* A frame finished applying (mu held): advance the applied prefix and free slots. */
static void mt_applied(ring_mt *m, size_t j, int ok, int auth_failed) {
    size_t k = j % m->nslot;
    if (!ok) {
        if (!m->have_bad || j < m->bad) {
            m->bad = j;
            m->bad_auth = auth_failed;
        }
        m->have_bad = 1;
        m->rx_state[k] = RX_BAD;
        return;
    }
    m->rx_state[k] = RX_DONE;
    while (m->applied < m->recvd && m->rx_state[m->applied % m->nslot] == RX_DONE) {
        m->rx_state[m->applied % m->nslot] = RX_FREE;
        m->applied++;
    }
}

static void *mt_worker_main(void *arg) {
    ring_mt *m = arg;
    pthread_mutex_lock(&m->mu);
    for (;;) {
        long job;
        while (!m->quit && (job = mt_job(m)) == 0) pthread_cond_wait(&m->cv, &m->mu);
        if (m->quit) break;
        m->busy++;
        if (job > 0) {
            size_t i = (size_t)job - 1;
            m->sealed_next = i + 1;
            pthread_mutex_unlock(&m->mu);
            mt_seal(m, i);
            pthread_mutex_lock(&m->mu);
            m->tx_have[i % m->nslot] = i + 1;
        } else {
            size_t j = (size_t)(-job) - 1;
            int auth_failed;
            m->open_next = j + 1;
            m->rx_state[j % m->nslot] = RX_BUSY;
            pthread_mutex_unlock(&m->mu);
            int ok = mt_apply(m, j, &auth_failed) == 0;
            pthread_mutex_lock(&m->mu);
            mt_applied(m, j, ok, auth_failed);
            m->last = tcp_now();
            mt_wake(m);
        }
        m->busy--;
        pthread_cond_broadcast(&m->cv);
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

/* Lay out outgoing frame i in m->t: the sealed slot, or header and payload (mode none). */
static void mt_frame(ring_mt *m, size_t i) {
    const ring_sched *s = m->s;
    size_t len = s->tx_len[i];
    txf *t = &m->t;
    if (m->secure) {
        t->iov[0] = (struct iovec){m->txb[i % m->nslot], FRAME_HDR + len + m->tag};
        t->iovn = 1;
    } else {
        ring *r = m->r;
        frame_hdr th = {FRAME_MAGIC,   FRAME_VERSION, FRAME_DATA,  (uint8_t)m->coll,
                        r->view.epoch, r->seq,        (uint32_t)i, (uint32_t)len};
        frame_encode(&th, t->hdr);
        t->iov[0] = (struct iovec){t->hdr, FRAME_HDR};
        t->iov[1] = (struct iovec){m->base + s->tx_off[i], len};
        t->iovn = len ? 2 : 1;
    }
    t->left = FRAME_HDR + len + m->tag;
}

/* Send the frame in m->t. Returns TX_RUN when it is out, TX_STOPPED when asked to stop (the
 * rest stays in m->t), TX_FAIL on a socket error. No lock held. */
static int mt_send_frame(ring_mt *m) {
    int fd = m->r->succ_fd;
    while (m->t.left > 0) {
        struct msghdr mh = {.msg_iov = m->t.iov, .msg_iovlen = (size_t)m->t.iovn};
        ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            iov_advance(&m->t, (size_t)n);
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
            pthread_mutex_lock(&m->mu);
            m->tx_errno = errno ? errno : EPIPE;
            pthread_mutex_unlock(&m->mu);
            return TX_FAIL;
        }
        pthread_mutex_lock(&m->mu);
        int stop = m->stop;
        m->tx_blocked = 1;
        pthread_mutex_unlock(&m->mu);
        if (stop) return TX_STOPPED;
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        (void)poll(&p, 1, MT_POLL_MS);
        pthread_mutex_lock(&m->mu);
        m->tx_blocked = 0;
        pthread_mutex_unlock(&m->mu);
    }
    return TX_RUN;
}

/* The sender's part of one collective (mu held on entry and exit). */
static int mt_send_all(ring_mt *m) {
    const ring_sched *s = m->s;
    while (m->sent < s->n_tx) {
        size_t i = m->sent;
        for (;;) {
            if (m->stop) return TX_STOPPED;
            if (m->applied >= s->tx_need[i]) {
                if (!m->secure || m->tx_have[i % m->nslot] == i + 1) break;
                if (m->sealed_next == i) { /* nobody took it: seal it here */
                    m->sealed_next = i + 1;
                    pthread_mutex_unlock(&m->mu);
                    mt_seal(m, i);
                    pthread_mutex_lock(&m->mu);
                    m->tx_have[i % m->nslot] = i + 1;
                    break;
                }
            }
            pthread_cond_wait(&m->cv, &m->mu);
        }
        mt_frame(m, i);
        pthread_mutex_unlock(&m->mu);
        int st = mt_send_frame(m);
        pthread_mutex_lock(&m->mu);
        if (st != TX_RUN) return st;
        m->tx_have[i % m->nslot] = 0;
        m->sent = i + 1;
        m->last = tcp_now();
        pthread_cond_broadcast(&m->cv);
        if (m->rx_waits) mt_wake(m);
    }
    return TX_DONE;
}

static void *mt_sender_main(void *arg) {
    ring_mt *m = arg;
    pthread_mutex_lock(&m->mu);
    for (;;) {
        while (!m->quit && m->tx_state != TX_RUN) pthread_cond_wait(&m->cv, &m->mu);
        if (m->quit) break;
        m->tx_state = mt_send_all(m);
        pthread_cond_broadcast(&m->cv);
        mt_wake(m);
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

static void mt_stop_threads(ring_mt *m) {
    pthread_mutex_lock(&m->mu);
    m->quit = 1;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
    if (m->started) {
        pthread_join(m->sender, NULL);
        for (int w = 0; w < m->nworkers; w++) pthread_join(m->workers[w], NULL);
    }
}

static void mt_free(ring *r) {
    ring_mt *m = r->mt;
    if (!m) return;
    mt_stop_threads(m);
    for (size_t k = 0; k < m->nslot; k++) {
        if (m->txb) free(m->txb[k]);
        if (m->rxb) free(m->rxb[k]);
    }
    free(m->txb);
    free(m->rxb);
    free(m->tx_have);
    free(m->rx_state);
    free(m->rx_len);
    free(m->need_sent);
    close(m->wake[0]);
    close(m->wake[1]);
    pthread_cond_destroy(&m->cv);
    pthread_mutex_destroy(&m->mu);
    free(m);
    r->mt = NULL;
}

/* Start the threaded engine's threads and staging on first use. */
static hr_status mt_start(ring *r) {
    if (r->mt) return HR_OK;
    ring_mt *m = calloc(1, sizeof *m);
    if (!m) return HR_ERR_NOMEM;
    m->wake[0] = m->wake[1] = -1;
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cv, NULL);
    r->mt = m;
    m->r = r;
    m->nworkers = r->mt_workers;
    m->nslot = 2 * (size_t)(m->nworkers + 2);
    if (m->nslot < MT_SLOTS_MIN) m->nslot = MT_SLOTS_MIN;
    if (m->nslot > MT_SLOTS_MAX) m->nslot = MT_SLOTS_MAX;
    m->cap = r->stage_cap;
    m->txb = calloc(m->nslot, sizeof *m->txb);
    m->rxb = calloc(m->nslot, sizeof *m->rxb);
    m->tx_have = calloc(m->nslot, sizeof *m->tx_have);
    m->rx_state = calloc(m->nslot, 1);
    m->rx_len = calloc(m->nslot, sizeof *m->rx_len);
    int ok = m->txb && m->rxb && m->tx_have && m->rx_state && m->rx_len && pipe(m->wake) == 0;
    for (size_t k = 0; ok && k < m->nslot; k++) {
        m->txb[k] = aligned_alloc(64, m->cap);
        m->rxb[k] = aligned_alloc(64, m->cap);
        ok = m->txb[k] && m->rxb[k];
    }
    if (ok) {
        for (int e = 0; e < 2; e++) {
            int fl = fcntl(m->wake[e], F_GETFL);
            if (fl >= 0) fcntl(m->wake[e], F_SETFL, fl | O_NONBLOCK);
        }
        ok = pthread_create(&m->sender, NULL, mt_sender_main, m) == 0;
    }
    int w = 0;
    for (; ok && w < m->nworkers; w++)
        if (pthread_create(&m->workers[w], NULL, mt_worker_main, m) != 0) break;
    if (ok && w < m->nworkers) { /* fewer workers than asked for: go on with what started */
        HR_WARN(RING, "the threaded engine started %d of %d workers", w, m->nworkers);
        m->nworkers = w;
    }
    m->started = ok;
    if (!ok) {
        mt_free(r);
        return HR_ERR_NOMEM;
    }
    HR_DEBUG(RING, "threaded engine: sender and %d worker(s), %zu staged frames each way",
             m->nworkers, m->nslot);
    return HR_OK;
}

/* Stop the sender and the workers of the collective in progress and wait until they are idle,
 * so the calling thread may use the links, the channels and m->t alone. */
static void mt_quiesce(ring_mt *m) {
    pthread_mutex_lock(&m->mu);
    m->stop = 1;
    pthread_cond_broadcast(&m->cv);
    while (m->tx_state == TX_RUN || m->busy > 0) pthread_cond_wait(&m->cv, &m->mu);
    m->active = 0;
    pthread_mutex_unlock(&m->mu);
}

/* Leave both channels' counters where the in-order engine would: the outgoing one after the
 * frames sent (and the one in flight, which an abort finishes first), the incoming one after
 * the frames received. */
static void mt_counters(ring *r, ring_mt *m, size_t rx_frames) {
    size_t tx_frames = m->sent + (m->t.left > 0 && m->sent < m->s->n_tx ? 1 : 0);
    if (!m->secure) return;
    r->succ_ch.tx.ctr = m->tx_ctr0 + tx_frames;
    r->pred_ch.rx.ctr = m->rx_ctr0 + rx_frames;
}

/* An engine view of the collective for the single-threaded engine's reporting functions, at
 * received frame j, carrying the sender's frame in flight. */
static eng mt_eng(ring_mt *m, size_t j) {
    /* e.t's pieces still point into m->t.hdr and the buffers, which stay put */
    eng e = {.s = m->s,
             .coll = m->coll,
             .base = m->base,
             .secure = m->secure,
             .tag = m->tag,
             .ti = m->sent,
             .ri = j,
             .t = m->t,
             .tx_ready = m->t.left > 0};
    return e;
}

/* Stop the threads, then open the frames received but not opened yet, in order, on this
 * thread: a link that failed may have carried an abort just before, which explains the failure
 * better than the link does. Returns whether a frame is bad (m->bad, m->bad_auth). */
static int mt_quiesce_bad(ring_mt *m) {
    mt_quiesce(m);
    for (size_t k = m->open_next; !m->have_bad && k < m->recvd; k++) {
        int auth_failed;
        if (mt_apply(m, k, &auth_failed) != 0) {
            m->have_bad = 1;
            m->bad = k;
            m->bad_auth = auth_failed;
        }
    }
    return m->have_bad;
}

/* Received frame j (staged in `f`, plaintext in secure modes) is not the one expected, or did
 * not verify: report it as the single-threaded engine does. */
static hr_status mt_bad_frame(ring *r, ring_mt *m, size_t j, const uint8_t *f, size_t len,
                              int auth_failed) {
    mt_quiesce(m);
    mt_counters(r, m, j + 1);
    eng e = mt_eng(m, j);
    if (auth_failed) {
        char fr[32];
        snprintf(fr, sizeof fr, " %zu", j);
        return link_auth_fail(r, &e.t, e.coll, FROM_PRED, fr);
    }
    size_t n = FRAME_HDR + len;
    if (n > r->stage_cap - 1) n = r->stage_cap - 1;
    memcpy(r->rx_stage, f, n);
    hr_status st = eng_header(r, &e);
    if (st == HR_OK) /* a stale check passed now: cannot happen, but never report success */
        st = fail_view(r, &e.t, e.coll, HR_ERR_PROTO, id_of(r, r->pred), FROM_PRED,
                       "frame %zu of %s #%llu is not the one expected", j, frame_coll_name(e.coll),
                       (unsigned long long)r->seq);
    return st;
}

/* Receive into frame j's slot (or straight into place for a plain copy) until the socket
 * would block. Returns HR_OK with *whole set once the frame is in, or a reported failure. */
typedef struct {
    size_t got, want; /* bytes of the current part read and expected */
    int body;         /* 0: the header, 1: payload and tag */
    size_t len;       /* payload bytes on the wire */
} mt_rx;

/* Where the predecessor's stream stands while frame j is received as `x`, for succ_trouble. */
static pred_pos mt_pos(const ring_mt *m, size_t j, const mt_rx *x) {
    return (pred_pos){.hdr = m->rxb[j % m->nslot],
                      .got = x->body ? 0 : x->got,
                      .body = x->body,
                      .left = x->body ? x->want - x->got : 0};
}

/* Something happened on the successor link (a send failed with `err`, or it became readable)
 * while frame j is received as `x`. The threads stop first. A frame they were opening may turn
 * out bad then, and the frames received but not opened yet are opened here, in order: an abort
 * among them explains the failure (the news came before the link closed). Else succ_trouble
 * decides. */
static hr_status mt_succ_trouble(ring *r, ring_mt *m, size_t j, const mt_rx *x, int err) {
    if (mt_quiesce_bad(m))
        return mt_bad_frame(r, m, m->bad, m->rxb[m->bad % m->nslot], m->rx_len[m->bad % m->nslot],
                            m->bad_auth);
    mt_counters(r, m, j);
    eng e = mt_eng(m, j);
    pred_pos pp = mt_pos(m, j, x);
    return succ_trouble(r, &e.t, m->coll, err, &pp);
}

static hr_status mt_recv(ring *r, ring_mt *m, size_t j, mt_rx *x, int *whole, int *moved) {
    const ring_sched *s = m->s;
    uint8_t *f = m->rxb[j % m->nslot];
    *whole = 0;
    for (;;) {
        uint8_t *dst = !x->body                      ? f + x->got
                       : !m->secure && !s->rx_add[j] ? m->base + s->rx_off[j] + x->got
                                                     : f + FRAME_HDR + x->got;
        ssize_t n = x->want > x->got ? recv(r->pred_fd, dst, x->want - x->got, MSG_DONTWAIT) : 0;
        if (x->want > x->got && n <= 0) {
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return HR_OK;
            int err = n == 0 ? 0 : errno;
            char pw[RING_STR + 64];
            long pid = id_of(r, r->pred);
            node_str(r, pid, pw, sizeof pw);
            if (mt_quiesce_bad(m))
                return mt_bad_frame(r, m, m->bad, m->rxb[m->bad % m->nslot],
                                    m->rx_len[m->bad % m->nslot], m->bad_auth);
            mt_counters(r, m, j);
            eng e = mt_eng(m, j);
            return fail_view(r, &e.t, e.coll, HR_ERR_PEER, pid, FROM_PRED, "%s %s", pw,
                             err == 0            ? "closed the connection (peer died?)"
                             : err == ECONNRESET ? "reset the connection (peer died?)"
                                                 : strerror(err));
        }
        if (n > 0) {
            x->got += (size_t)n;
            *moved = 1;
        }
        if (x->got < x->want) continue;
        if (x->body) break;
        frame_hdr h;
        frame_decode(f, &h);
        size_t want = s->rx_len[j];
        if (m->secure) { /* as eng_frame_len: the length is read, not trusted */
            if (h.type == FRAME_ABORT && h.len > FRAME_ABORT_MAX) {
                mt_quiesce(m);
                mt_counters(r, m, j);
                eng e = mt_eng(m, j);
                return link_auth_fail(r, &e.t, e.coll, FROM_PRED, "");
            }
            x->len = h.type == FRAME_ABORT || h.len < want ? h.len : want;
        } else {
            if (!mt_header_ok(m, j, f)) return mt_bad_frame(r, m, j, f, 0, 0);
            x->len = want;
        }
        x->body = 1;
        x->got = 0;
        x->want = x->len + m->tag;
        if (x->want == 0) break;
    }
    m->rx_len[j % m->nslot] = x->len;
    *whole = 1;
    return HR_OK;
}

/* Run r->sched over `base` on the engine's threads (see the section's comment). */
/* For every received frame, how many frames must have been sent before it may be received:
 * 1 + the last outgoing frame that reads bytes the received one writes and does not wait for
 * it (an all-reduce's all-gather lands on the blocks its reduce-scatter sent). The peers
 * already order it so: those bytes come back only after they went round the ring. Waiting
 * for the count makes that order visible inside this process as well (ThreadSanitizer sees
 * the sender's write of `sent` before the receiver overwrites what was sent). */
static int mt_need_sent(ring_mt *m, const ring_sched *s) {
    if (s->n_rx > m->need_cap) {
        size_t *a = realloc(m->need_sent, s->n_rx * sizeof *a);
        if (!a) return -1;
        m->need_sent = a;
        m->need_cap = s->n_rx;
    }
    for (size_t j = 0; j < s->n_rx; j++) {
        size_t need = 0, lo = s->rx_off[j], hi = lo + s->rx_len[j];
        for (size_t i = 0; i < s->n_tx && s->tx_need[i] <= j; i++)
            if (s->tx_off[i] < hi && lo < s->tx_off[i] + s->tx_len[i]) need = i + 1;
        m->need_sent[j] = need;
    }
    return 0;
}

static hr_status engine_mt(ring *r, int coll, uint8_t *base) {
    if (mt_start(r) != HR_OK) return HR_ERR_NOMEM;
    ring_mt *m = r->mt;
    const ring_sched *s = &r->sched;
    int secure = r->keys.mode != RING_SEC_NONE;
    if (mt_need_sent(m, s) != 0) return local_fail(r, coll, HR_ERR_NOMEM, "out of memory");
    pthread_mutex_lock(&m->mu);
    m->s = s;
    m->base = base;
    m->coll = coll;
    m->secure = secure;
    m->tag = secure ? SEC_TAG : 0;
    m->tx_ctr0 = r->succ_ch.tx.ctr;
    m->rx_ctr0 = r->pred_ch.rx.ctr;
    m->sent = m->sealed_next = m->recvd = m->open_next = m->applied = 0;
    memset(m->tx_have, 0, m->nslot * sizeof *m->tx_have);
    memset(m->rx_state, RX_FREE, m->nslot);
    m->t = (txf){0};
    m->stop = 0;
    m->have_bad = 0;
    m->busy = 0;
    m->tx_errno = 0;
    m->tx_blocked = 0;
    m->last = tcp_now();
    m->active = 1;
    m->tx_state = s->n_tx > 0 ? TX_RUN : TX_DONE;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
    mt_drain(m);

    const double limit = r->coll_timeout > r->timeout ? r->coll_timeout : r->timeout;
    mt_rx x = {.want = FRAME_HDR};
    size_t j = 0; /* frame being received */
    for (;;) {
        int moved = 0, whole = 0;
        pthread_mutex_lock(&m->mu);
        int slot_free = j < s->n_rx && m->rx_state[j % m->nslot] == RX_FREE && !m->have_bad;
        /* a frame that lands on bytes this node sends first waits for that send (when
         * receiving starts: only x.got == 0 of the header) */
        m->rx_waits = slot_free && x.got == 0 && !x.body && m->sent < m->need_sent[j];
        if (m->rx_waits) slot_free = 0;
        pthread_mutex_unlock(&m->mu);
        if (slot_free) {
            HR_CHECK(mt_recv(r, m, j, &x, &whole, &moved));
            if (whole) {
                pthread_mutex_lock(&m->mu);
                m->last = tcp_now();
                if (m->nworkers > 0) {
                    m->rx_state[j % m->nslot] = RX_FULL;
                    m->recvd = j + 1;
                    pthread_cond_broadcast(&m->cv);
                    pthread_mutex_unlock(&m->mu);
                } else {
                    m->rx_state[j % m->nslot] = RX_BUSY;
                    m->recvd = m->open_next = j + 1;
                    pthread_mutex_unlock(&m->mu);
                    int auth_failed;
                    int ok = mt_apply(m, j, &auth_failed) == 0;
                    pthread_mutex_lock(&m->mu);
                    mt_applied(m, j, ok, auth_failed);
                    pthread_cond_broadcast(&m->cv);
                    pthread_mutex_unlock(&m->mu);
                }
                j++;
                x = (mt_rx){.want = FRAME_HDR};
                moved = 1;
            }
        }
        pthread_mutex_lock(&m->mu);
        int tx_state = m->tx_state, tx_errno = m->tx_errno, tx_blocked = m->tx_blocked;
        int bad = m->have_bad, bad_auth = m->bad_auth;
        size_t bad_j = m->bad;
        int done = m->applied == s->n_rx && tx_state == TX_DONE;
        if (moved) m->last = tcp_now();
        double last = m->last;
        pthread_mutex_unlock(&m->mu);
        if (bad) {
            mt_quiesce(m); /* frames in flight finish: the first bad one is known then */
            bad_j = m->bad;
            bad_auth = m->bad_auth;
            return mt_bad_frame(r, m, bad_j, m->rxb[bad_j % m->nslot], m->rx_len[bad_j % m->nslot],
                                bad_auth);
        }
        if (tx_state == TX_FAIL) return mt_succ_trouble(r, m, j, &x, tx_errno);
        if (done) break;
        if (moved) continue;
        struct pollfd p[3] = {{.fd = r->pred_fd, .events = slot_free ? POLLIN : 0},
                              {.fd = r->succ_fd, .events = tx_state == TX_RUN ? POLLIN : 0},
                              {.fd = m->wake[0], .events = POLLIN}};
        double left = last + limit - tcp_now();
        int rc = left > 0 ? poll(p, 3, (int)(left * 1000) + 1) : 0;
        if (rc < 0 && errno != EINTR) rc = 0;
        if (p[2].revents & POLLIN) mt_drain(m);
        if (rc > 0 && (p[1].revents & (POLLIN | POLLHUP | POLLERR)))
            return mt_succ_trouble(r, m, j, &x, 0);
        pthread_mutex_lock(&m->mu);
        last = m->last;
        pthread_mutex_unlock(&m->mu);
        if (rc == 0 && tcp_now() >= last + limit) {
            char who[RING_STR + 64];
            mt_quiesce(m);
            mt_counters(r, m, j);
            eng e = mt_eng(m, j);
            long id = id_of(r, tx_blocked ? r->succ : r->pred);
            node_str(r, id, who, sizeof who);
            if (tx_blocked)
                return fail_view(r, &e.t, coll, HR_ERR_TIMEOUT, id, FROM_SUCC,
                                 "%s accepted no data for %.1f s (peer dead or hung?)", who, limit);
            return fail_view(r, &e.t, coll, HR_ERR_TIMEOUT, id, FROM_PRED,
                             "%s sent nothing for %.1f s (peer dead or hung?)", who, limit);
        }
    }
    pthread_mutex_lock(&m->mu);
    m->active = 0;
    pthread_mutex_unlock(&m->mu);
    if (secure) {
        r->succ_ch.tx.ctr = m->tx_ctr0 + s->n_tx;
        r->pred_ch.rx.ctr = m->rx_ctr0 + s->n_rx;
    }
    return HR_OK;
}

/* Run r->sched: small collectives on the calling thread alone (a hand-off between threads
 * would cost more than it saves), large ones on the threaded engine unless it is off. */
static hr_status engine(ring *r, int coll, uint8_t *base) {
    const ring_sched *s = &r->sched;
    size_t rx_bytes = 0;
    for (size_t i = 0; i < s->n_rx && rx_bytes <= RING_MT_BYTES; i++) rx_bytes += s->rx_len[i];
    if (rx_bytes > RING_MT_BYTES && r->mt_workers >= 0) {
        r->mt_runs++;
        return engine_mt(r, coll, base);
    }
    return engine_st(r, coll, base);
}

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

/* A local failure in the middle of a collective: the others are already sending, so the view
 * is failed and they are told. */
static hr_status local_fail(ring *r, int coll, hr_status st, const char *what) {
    char me[RING_STR + 64];
    node_str(r, r->self_id, me, sizeof me);
    return fail_view(r, NULL, coll, st, r->self_id, FROM_HERE, "%s: %s", me, what);
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
    int tx[RING_MAX_NODES], rx[RING_MAX_NODES];
    uint8_t add[RING_MAX_NODES];
    for (int s = 0; s < n - 1; s++) {
        tx[s] = (k - s + n) % n;
        rx[s] = (k - s - 1 + 2 * n) % n;
        add[s] = 0;
    }
    blocks b = {off, bytes_of};
    if (sched_steps(r, &b, tx, rx, add, n - 1, 1) != HR_OK)
        return finish(r, local_fail(r, FRAME_COLL_ALLGATHER, HR_ERR_NOMEM, "out of memory"));
    return finish(r, engine(r, FRAME_COLL_ALLGATHER, all));
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
    size_t off[RING_MAX_NODES] = {0}, len[RING_MAX_NODES] = {0};
    int tx[RING_MAX_NODES], rx[RING_MAX_NODES];
    uint8_t add[RING_MAX_NODES] = {0};
    for (int s = 0; s < n - 1; s++) {
        tx[s] = (k - s + n) % n;
        rx[s] = (k - s - 1 + 2 * n) % n;
    }
    blocks b = {off, len};
    uint8_t dummy = 0;
    if (sched_steps(r, &b, tx, rx, add, n - 1, 1) != HR_OK)
        return finish(r, local_fail(r, FRAME_COLL_BARRIER, HR_ERR_NOMEM, "out of memory"));
    return finish(r, engine(r, FRAME_COLL_BARRIER, &dummy));
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
    int rel = (r->rank - root + n) % n;
    ring_sched *s = &r->sched;
    size_t ns = nseg_of(bytes, r->seg_bytes);
    if (sched_reserve(s, ns) != HR_OK)
        return finish(r, local_fail(r, FRAME_COLL_BROADCAST, HR_ERR_NOMEM, "out of memory"));
    s->n_tx = rel == n - 1 ? 0 : ns;
    s->n_rx = rel == 0 ? 0 : ns;
    for (size_t i = 0; i < ns; i++) {
        size_t lo = i * bytes / ns, hi = (i + 1) * bytes / ns;
        s->tx_off[i] = s->rx_off[i] = lo;
        s->tx_len[i] = s->rx_len[i] = hi - lo;
        s->tx_need[i] = rel == 0 ? 0 : i + 1;
        s->rx_add[i] = 0;
    }
    return finish(r, engine(r, FRAME_COLL_BROADCAST, buf));
}

/* Small all-reduce: gather every contribution, then add them in rank order. */
static hr_status allreduce_small(ring *r, float *buf, size_t count) {
    int n = r->view.n;
    size_t bytes = count * sizeof(float), need = bytes * (size_t)n;
    if (need > r->tmp_cap) {
        float *t = realloc(r->tmp, need);
        if (!t) return local_fail(r, FRAME_COLL_ALLREDUCE, HR_ERR_NOMEM, "out of memory");
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
    blocks b = {off, len};
    if (sched_steps(r, &b, tx, rx, add, n - 1, sizeof(float)) != HR_OK)
        return local_fail(r, FRAME_COLL_ALLREDUCE, HR_ERR_NOMEM, "out of memory");
    HR_CHECK(engine(r, FRAME_COLL_ALLREDUCE, (uint8_t *)r->tmp));
    memcpy(buf, r->tmp, bytes);
    for (int i = 1; i < n; i++) add_floats(buf, r->tmp + (size_t)i * count, count);
    return HR_OK;
}

hr_status ring_allreduce(ring *r, float *buf, size_t count) {
    HR_CHECK(begin(r));
    int n = r->view.n, k = r->rank;
    if (n == 1 || count == 0) return finish(r, HR_OK);
    if (count * sizeof(float) <= RING_SMALL_BYTES || count < (size_t)n)
        return finish(r, allreduce_small(r, buf, count));
    size_t off[RING_MAX_NODES], len[RING_MAX_NODES];
    for (int j = 0; j < n; j++) {
        size_t lo = (size_t)j * count / (size_t)n, hi = (size_t)(j + 1) * count / (size_t)n;
        off[j] = lo * sizeof(float);
        len[j] = (hi - lo) * sizeof(float);
    }
    int tx[2 * RING_MAX_NODES], rx[2 * RING_MAX_NODES];
    uint8_t add[2 * RING_MAX_NODES];
    for (int s = 0; s < n - 1; s++) { /* reduce-scatter */
        tx[s] = (k - s + n) % n;
        rx[s] = (k - s - 1 + 2 * n) % n;
        add[s] = 1;
    }
    for (int t = 0; t < n - 1; t++) { /* all-gather of the reduced chunks */
        tx[n - 1 + t] = (k + 1 - t + n) % n;
        rx[n - 1 + t] = (k - t + n) % n;
        add[n - 1 + t] = 0;
    }
    blocks b = {off, len};
    if (sched_steps(r, &b, tx, rx, add, 2 * (n - 1), sizeof(float)) != HR_OK)
        return finish(r, local_fail(r, FRAME_COLL_ALLREDUCE, HR_ERR_NOMEM, "out of memory"));
    return finish(r, engine(r, FRAME_COLL_ALLREDUCE, (uint8_t *)buf));
}
