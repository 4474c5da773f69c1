/*
 * form.c: ring formation (see ring.h): the gate, which accepts every connection from the first
 * listen until ring_free; ring_form, which connects to the successor and takes the predecessor
 * of r->view, and where the view has a tree (tree.c) connects to its tree children and takes its
 * tree parent.
 *
 * Invariants:
 *  - only the authenticated predecessor (and tree parent) of the view forming becomes a link;
 *    every other
 *    connection is served as one lobby call (by the handler elect.c registers) or closed at
 *    once (see the gate, below).
 */
#include "ring/form_internal.h"

#include "base/hr_addr.h"
#include "base/hr_log.h"
#include "base/hr_time.h"
#include "ring/engine_internal.h"
#include "ring/frame.h"
#include "ring/tcp.h"
#include "ring/tree_internal.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const char *engine_name(const ring *r, char *out, size_t n);

/*
 * The gate: one thread per ring, from the first listen until ring_free, does all accepting.
 * It hands each connection to a handshake thread of its own, with a short deadline (GATE_HS_S,
 * at most `timeout`, while a view forms; GATE_IDLE_S otherwise, when only lobby calls can
 * succeed); at most GATE_PENDING of them run at once. Past that cap the gate first evicts a
 * connection that has sent nothing for GATE_MUTE_S (an honest caller speaks at once: its hello
 * is on the wire before its connect returns), else one pending for GATE_SLOW_S, the oldest from
 * the address with the most pending first; when none is that old it accepts nothing for a
 * moment, and new connections wait in the listening socket's backlog (TCP_BACKLOG, tcp.c) rather
 * than evict an honest handshake in progress: a burst of lobby calls from members (the lowest ids
 * of a bounded election, elect.c) is served in turn, and a stranger's connections, idle or slow,
 * make room within GATE_SLOW_S. A lobby call (any member of the config, sec.h) is served by its
 * handshake thread through the handler elect.c registers (gate_set_lobby): one request, one
 * reply, every read and write by the same deadline, then closed. The gate knows nothing of
 * elections. The first ring-link connection that proves to be the expected predecessor while a
 * view forms is taken. Every other connection (one that fails its handshake, a ring link while
 * no view forms) is closed at once and its address logged. So nothing a node without the key does can hold formation up, and no
 * stranger's connection stays open for long.
 * Invariant: a slot's fd is shut down (never closed) by the gate, under `mu`, and only while
 * the handshake thread still owns it; that thread closes it.
 */
#define GATE_HS_S    5.0                /* per-connection handshake deadline, capped by timeout */
#define GATE_IDLE_S  1.0                /* the same while no view forms (lobby calls only) */
#define GATE_LOGS    20                 /* lines per second about strangers; the rest are counted */
#define GATE_MUTE_S  0.05               /* a pending connection silent this long may be evicted */
/* Any pending connection this old may be evicted: an honest lobby caller has given up by then
 * (elect.c). */
#define GATE_SLOW_S 1.0

typedef struct {
    ring_gate *g;            /* owner */
    pthread_t th;            /* the handshake thread */
    int used;                /* th started and not yet joined (gate thread only) */
    int done;                /* the handshake thread is finishing (mu) */
    int spoke;               /* its first bytes arrived (mu) */
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
    int tfd;                     /* the authenticated tree parent (p.tree), or -1 */
    sec_chan tch;                /* its channel */
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

/* Tell how many lines gate_log left out, once their one-second window has ended (or, with `all`,
 * at once): a flood that ends within a window is counted too, not only one that goes on. */
static void gate_log_flush(ring_gate *g, int all) {
    pthread_mutex_lock(&g->mu);
    long skipped = 0;
    if (g->log_skipped > 0 && (all || tcp_now() - g->log_t >= 1.0)) {
        skipped = g->log_skipped;
        g->log_skipped = 0;
    }
    pthread_mutex_unlock(&g->mu);
    if (skipped > 0)
        HR_WARN(SEC, "%ld more lines about strangers' connections not shown (at most %d a second)",
                skipped, GATE_LOGS);
}

/* Why gate_reap cuts a pending connection that has spoken as the ring is freed: most often a
 * member's lobby call (its election probing this node as it leaves), nothing to warn of. One
 * that has sent nothing for GATE_MUTE_S is a stranger's, named as such (gate_silent). */
static const char gate_closing[] = "this node is shutting down";

/* Shut a pending connection down, so that its handshake thread ends now. Under mu. */
static void gate_cut(gate_slot *s, const char *why) {
    if (s->cut) return;
    s->cut = why;
    if (s->fd >= 0) shutdown(s->fd, SHUT_RDWR);
}

/* Whether handshake parameters a and b ask for the same links: one view epoch, one expected
 * predecessor and tree parent. */
static int same_links(const sec_hs_params *a, const sec_hs_params *b) {
    return a->epoch == b->epoch && a->expect_id == b->expect_id && a->tree == b->tree &&
           a->expect_tree_id == b->expect_tree_id;
}

static void *gate_hs_main(void *arg) {
    gate_slot *s = arg;
    ring_gate *g = s->g;
    int fd = s->fd, refused = 0;
    char why[HR_ERRLEN];
    if (tcp_wait(fd, POLLIN, s->deadline) == HR_OK) { /* the gate evicts a silent one first */
        pthread_mutex_lock(&g->mu);
        s->spoke = 1;
        pthread_mutex_unlock(&g->mu);
    }
    hr_status st = sec_handshake(fd, 0, &s->p, s->deadline, &s->ch, &refused, why, sizeof why);
    if (st == HR_OK && s->who_is.lobby) {
        /* the gate may still shut fd down (s->fd is kept) while the request is served */
        const gate_lobby *l = &g->r->lobby;
        if (l->serve) l->serve(l->ctx, fd, &s->ch, s->who_is.id, s->peer, s->deadline);
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
    int tree = s->who_is.tree, *slot = tree ? &g->tfd : &g->fd;
    /* a handshake begun for a view whose formation has ended since (another may be forming
     * now) is no link of the formation open now: its peer made it for the old view */
    const int wanted = g->forming && same_links(&s->p, &g->p);
    const int take = st == HR_OK && !cut && wanted && *slot < 0;
    if (take) {
        *slot = fd;
        *(tree ? &g->tch : &g->ch) = s->ch;
        pthread_cond_broadcast(&g->cv);
    } else if (st != HR_OK && !cut && wanted) {
        g->st = st;
        snprintf(g->err, sizeof g->err, "rejected a connection from %s: %.380s", s->peer, why);
    }
    s->fd = -1;
    s->done = 1;
    pthread_mutex_unlock(&g->mu);
    sec_chan_free(&s->ch);
    if (take) return NULL;
    close(fd);
    if (cut == gate_closing)
        HR_DEBUG(SEC, "closed a connection from %s after %.1f s: %s", s->peer, tcp_now() - s->t0,
                 cut);
    else if (cut)
        gate_log(g, "closed a connection from %s after %.1f s: %s", s->peer, tcp_now() - s->t0,
                 cut);
    else if (st == HR_ERR_VIEW) /* another epoch or neighbour: transient while views change */
        HR_DEBUG(SEC, "refused a connection from %s (expected predecessor %s): %s", s->peer, s->who,
                 why);
    else if (st != HR_OK)
        gate_log(g, "rejected a connection from %s (expected predecessor %s): %s", s->peer, s->who,
                 why);
    else if (!wanted)
        HR_DEBUG(SEC,
                 "closed a connection from %s: made for view epoch %llu, whose formation "
                 "has ended",
                 s->peer, (unsigned long long)s->p.epoch);
    else
        gate_log(g, "closed a connection from %s: %s %s is connected already", s->peer,
                 tree ? "the tree parent of" : "predecessor", tree ? "this node" : s->who);
    return NULL;
}

/* Whether a pending connection has been silent for GATE_MUTE_S: nothing read by its thread,
 * nothing waiting in its socket. Under mu. */
static int gate_silent(gate_slot *s, double now) {
    if (s->spoke || now - s->t0 < GATE_MUTE_S) return 0;
    int avail = 0;
    return s->fd >= 0 && ioctl(s->fd, FIONREAD, &avail) == 0 && avail == 0;
}

/* Join finished handshake threads; with `all`, shut every connection down and join them all. */
static void gate_reap(ring_gate *g, int all) {
    for (int i = 0; i < GATE_SLOTS; i++) {
        gate_slot *s = &g->slots[i];
        if (!s->used) continue;
        pthread_mutex_lock(&g->mu);
        if (all)
            gate_cut(s, gate_silent(s, tcp_now()) ? "this node is shutting down (it sent nothing)"
                                                  : gate_closing);
        int done = s->done;
        pthread_mutex_unlock(&g->mu);
        if (!done && !all) continue;
        pthread_join(s->th, NULL);
        s->used = 0;
    }
}

/* Whether a pending connection may be evicted now: silent (gate_silent), or pending for
 * GATE_SLOW_S. Under mu. */
static int gate_evictable(gate_slot *s, double now) {
    return now - s->t0 >= GATE_SLOW_S || gate_silent(s, now);
}

/* The pending connection to evict, or -1 when none may be (gate_evictable): the oldest from the
 * address with the most such (the predecessor has one at a time, so a flood from elsewhere
 * never evicts it). Under mu. */
static int gate_victim(ring_gate *g) {
    int best = -1, best_n = 0;
    double now = tcp_now();
    for (int i = 0; i < GATE_SLOTS; i++) {
        gate_slot *s = &g->slots[i];
        if (!s->used || s->done || s->cut || !gate_evictable(s, now)) continue;
        int n = 0;
        for (int j = 0; j < GATE_SLOTS; j++) {
            gate_slot *o = &g->slots[j];
            if (o->used && !o->done && !o->cut && gate_evictable(o, now) &&
                hr_addr_same_host(o->peer, s->peer))
                n++;
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
    if (free_i < 0 || live >= GATE_PENDING) no = "too many unauthenticated connections pending";
    if (!no) {
        gate_slot *s = &g->slots[free_i];
        s->g = g;
        s->fd = fd;
        s->done = 0;
        s->spoke = 0;
        s->cut = NULL;
        s->t0 = tcp_now();
        s->deadline = s->t0 + (g->forming || g->hs_s < GATE_IDLE_S ? g->hs_s : GATE_IDLE_S);
        s->p = g->p;
        s->p.accept_lobby = 1;
        s->p.peer = &s->who_is;
        s->who_is = (sec_hs_peer){.id = -1};
        if (!g->forming) { /* a ring or tree link is refused: none is wanted now */
            s->p.expect_id = -1;
            s->p.tree = 0;
        }
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

/* Whether a new connection may be taken now: a slot is free and fewer than GATE_PENDING are
 * pending, after evicting one that may be (gate_victim). Otherwise the connection waits in the
 * backlog. */
static int gate_room(ring_gate *g) {
    pthread_mutex_lock(&g->mu);
    int live = 0, free_n = 0;
    for (int i = 0; i < GATE_SLOTS; i++) {
        gate_slot *s = &g->slots[i];
        if (!s->used)
            free_n++;
        else if (!s->done && !s->cut)
            live++;
    }
    if (live >= GATE_PENDING) {
        int v = gate_victim(g);
        if (v >= 0) {
            gate_cut(&g->slots[v], "evicted: too many unauthenticated connections pending");
            live--;
        }
    }
    pthread_mutex_unlock(&g->mu);
    return live < GATE_PENDING && free_n > 0;
}

static void *gate_main(void *arg) {
    ring_gate *g = arg;
    while (!atomic_load(&g->stop)) {
        gate_reap(g, 0);
        gate_log_flush(g, 0);
        if (!gate_room(g)) {
            hr_sleep(0.005);
            continue;
        }
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
    gate_log_flush(g, 1);
    return NULL;
}

static sec_hs_params hs_params(const ring *r, long expect, int rank);

/* Start the gate on r->listen_fd. */
static hr_status gate_start(ring *r, char *err, size_t errlen) {
    size_t sz = (sizeof(ring_gate) + 63) & ~(size_t)63; /* holds aligned channel states */
    ring_gate *g = aligned_alloc(64, sz);
    if (!g) return hr_fail(err, errlen, HR_ERR_NOMEM, "out of memory");
    memset(g, 0, sz);
    g->r = r;
    g->fd = g->tfd = -1;
    for (int i = 0; i < GATE_SLOTS; i++) g->slots[i].fd = -1;
    g->hs_s = r->timeout < GATE_HS_S ? r->timeout : GATE_HS_S;
    g->p = (sec_hs_params){.rc = &r->rc,
                           .keys = &r->keys,
                           .epoch = r->view.epoch,
                           .self_id = r->self_id,
                           .expect_id = -1,
                           .seg_bytes = (uint32_t)r->seg_bytes,
                           .tree_bytes = (uint32_t)r->rc.tree_bytes};
    if (r->view.n > 1) { /* ring_init knows its view: formation is open from the first accept */
        int rank = 0;
        while (rank < r->view.n - 1 && r->view.ids[rank] != r->self_id) rank++;
        long pred = r->view.ids[(rank + r->view.n - 1) % r->view.n];
        g->forming = 1;
        g->p = hs_params(r, pred, rank);
        ring_node_str(r, pred, g->who, sizeof g->who);
        g->st = HR_ERR_TIMEOUT;
        snprintf(g->err, sizeof g->err, "no connection arrived");
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
void gate_stop(ring *r) {
    ring_gate *g = r->gate;
    if (!g) return;
    atomic_store(&g->stop, 1);
    pthread_join(g->th, NULL);
    if (g->fd >= 0) close(g->fd);
    if (g->tfd >= 0) close(g->tfd);
    sec_chan_free(&g->ch);
    sec_chan_free(&g->tch);
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g);
    r->gate = NULL;
}

void gate_set_lobby(ring *r, gate_lobby_fn *serve, void *ctx) {
    r->lobby = (gate_lobby){serve, ctx};
}

/* Listen on this node's address and start the gate. Its host name is looked up within
 * connect_timeout, as its peers' are. A port that cannot be bound is named by where the
 * config set it (rc.port_where), when the caller said. */
hr_status listen_start(ring *r, char *err, size_t errlen) {
    const ring_member *me = &r->rc.members[r->self];
    hr_status st = tcp_listen(me->host, me->port, tcp_now() + r->rc.connect_timeout, &r->listen_fd,
                              err, errlen);
    if (st == HR_ERR_TIMEOUT)
        return hr_fail(err, errlen, st,
                       "node %ld cannot listen: looking up its own host %s took longer than "
                       "connect_timeout (%.1f s) (is the resolver slow or out of reach?)",
                       r->self_id, me->host, r->rc.connect_timeout);
    if (st == HR_ERR_IO && r->rc.port_where[0]) {
        char why[HR_ERRLEN];
        snprintf(why, sizeof why, "%s", err);
        return hr_fail(err, errlen, st, "%s: %s (is another node or program using it?)",
                       r->rc.port_where, why);
    }
    if (st != HR_OK) return st;
    st = gate_start(r, err, errlen);
    if (st != HR_OK) tcp_close(&r->listen_fd);
    return st;
}

/* Formation begins: connections are handshaken as the predecessor `p` names. Where it is open
 * already for that predecessor in that epoch (gate_start opens ring_init's at the first
 * accept), a rejection recorded since is kept: the predecessor may have been turned away
 * before ring_form got here, and the error must still say why. */
static void gate_open(ring_gate *g, const sec_hs_params *p, const char *who) {
    pthread_mutex_lock(&g->mu);
    int open = g->forming && same_links(&g->p, p);
    g->forming = 1;
    g->p = *p;
    snprintf(g->who, sizeof g->who, "%s", who);
    if (!open) {
        g->st = HR_ERR_TIMEOUT;
        snprintf(g->err, sizeof g->err, "no connection arrived");
    }
    pthread_mutex_unlock(&g->mu);
}

/* Wait until `deadline` for the predecessor and, where one is expected, the tree parent (0 skips
 * the wait), then end formation. Returns the predecessor's fd and channel, or -1 with the last
 * rejection's status in `st` and its text in `why`; the tree parent's in `tfd` and `tch` (-1
 * when it did not come). */
static int gate_close(ring_gate *g, double deadline, sec_chan *ch, int *tfd, sec_chan *tch,
                      hr_status *st, char *why, size_t whylen) {
    pthread_mutex_lock(&g->mu);
    while ((g->fd < 0 || (g->p.tree && g->tfd < 0)) && tcp_now() < deadline) {
        double t = tcp_now() + 0.5 < deadline ? tcp_now() + 0.5 : deadline; /* monotonic */
        struct timespec ts = {(time_t)t, (long)((t - (double)(time_t)t) * 1e9)};
        pthread_cond_timedwait(&g->cv, &g->mu, &ts);
    }
    int fd = g->fd;
    g->fd = -1;
    if (fd >= 0) *ch = g->ch;
    sec_chan_free(&g->ch);
    *tfd = g->tfd;
    g->tfd = -1;
    if (*tfd >= 0) *tch = g->tch;
    sec_chan_free(&g->tch);
    g->forming = 0;
    /* handshakes still running are left to their deadline: they may be lobby calls, and a
     * ring link that finishes now is closed as no longer wanted */
    *st = g->st;
    snprintf(why, whylen, "%s", g->err);
    pthread_mutex_unlock(&g->mu);
    return fd;
}

/* The handshake parameters of rank `rank` in r->view expecting `expect` at the other end of a
 * ring link; as a responder it also takes its tree parent where the view has a tree. */
static sec_hs_params hs_params(const ring *r, long expect, int rank) {
    sec_hs_params p = {.rc = &r->rc,
                       .keys = &r->keys,
                       .epoch = r->view.epoch,
                       .self_id = r->self_id,
                       .expect_id = expect,
                       .seg_bytes = (uint32_t)r->seg_bytes,
                       .tree_bytes = (uint32_t)r->rc.tree_bytes};
    if (rank > 0 && tree_wanted(r, r->view.n)) {
        int nb[3];
        tree_links_of(rank, r->view.n, nb);
        p.tree = 1;
        p.expect_tree_id = r->view.ids[nb[0]];
    }
    return p;
}

/* Connect link `link` (FROM_SUCC, or FROM_TREE + 1 or + 2: a tree child) to member `idx`,
 * retrying with backoff until `deadline`. */
static hr_status connect_link(ring *r, int link, int idx, double deadline, double secs, char *err,
                              size_t errlen) {
    const ring_member *s = &r->rc.members[idx];
    const char *role = link == FROM_SUCC ? "successor" : "tree child";
    char who[RING_STR + 64], why[HR_ERRLEN] = "no attempt";
    ring_node_str(r, s->id, who, sizeof who);
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
            sec_hs_params p = hs_params(r, s->id, -1);
            p.link = link == FROM_SUCC ? SEC_LINK_RING : SEC_LINK_TREE;
            int refused;
            st = sec_handshake(fd, 1, &p, tcp_now() + r->timeout, ring_link_ch(r, link), &refused,
                               why, sizeof why);
            if (st == HR_OK) {
                *ring_link_fd(r, link) = fd;
                return HR_OK;
            }
            close(fd);
            /* A view mismatch (other epoch, other neighbour) is transient while the members
             * re-form one after another: retry until the deadline, keeping the reason. */
            if (st == HR_ERR_AUTH || st == HR_ERR_PROTO || (refused && st != HR_ERR_VIEW)) {
                HR_ERROR(SEC, "%s %s: %s", role, who, why);
                return hr_fail(err, errlen, st, "%s %s: %s", role, who, why);
            }
        } else if (st == HR_ERR_CONFIG) {
            return hr_fail(err, errlen, st, "%s %s: %s", role, who, why);
        }
        HR_DEBUG(RING, "connect to %s: %s; retrying in %.0f ms", who, why, backoff * 1e3);
        hr_sleep(backoff < deadline - tcp_now() ? backoff : deadline - tcp_now());
        backoff = backoff * 2 > 0.5 ? 0.5 : backoff * 2;
    }
    return hr_fail(err, errlen, HR_ERR_TIMEOUT,
                   "could not connect to %s %s within %.1f s (%d attempts): %s", role, who, secs,
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
    r->tree_on = 0;
    for (int i = 0; i < 3; i++) r->tree_peer[i] = -1;
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
    if (tree_wanted(r, n)) {
        int nb[3];
        tree_links_of(r->rank, n, nb);
        for (int i = 0; i < 3; i++)
            r->tree_peer[i] = nb[i] < 0 ? -1 : ring_config_index(&r->rc, r->view.ids[nb[i]]);
    }
    double deadline = tcp_now() + secs;
    char pw[RING_STR + 64], why[HR_ERRLEN];
    ring_node_str(r, ring_id_of(r, r->pred), pw, sizeof pw);
    sec_hs_params p = hs_params(r, ring_id_of(r, r->pred), r->rank);
    gate_open(r->gate, &p, pw);
    hr_status st = connect_link(r, FROM_SUCC, r->succ, deadline, secs, err, errlen), pst;
    for (int c = 1; c < 3 && st == HR_OK; c++)
        if (r->tree_peer[c] >= 0)
            st = connect_link(r, FROM_TREE + c, r->tree_peer[c], deadline, secs, err, errlen);
    r->pred_fd = gate_close(r->gate, st == HR_OK ? deadline : 0, &r->pred_ch, &r->tree_fd[0],
                            &r->tree_ch[0], &pst, why, sizeof why);
    if (st == HR_OK && r->pred_fd < 0)
        st = hr_fail(err, errlen, pst,
                     "no authenticated connection from predecessor %s within %.1f s: %s", pw, secs,
                     why);
    if (st == HR_OK && r->tree_peer[0] >= 0 && r->tree_fd[0] < 0) {
        char tw[RING_STR + 64];
        ring_node_str(r, ring_id_of(r, r->tree_peer[0]), tw, sizeof tw);
        st = hr_fail(err, errlen, pst == HR_OK ? HR_ERR_TIMEOUT : pst,
                     "no authenticated tree link from %s within %.1f s: %s", tw, secs, why);
    }
    r->tree_on = st == HR_OK && tree_wanted(r, n);
    r->tree_cut = r->rc.tree_bytes;
    if (st != HR_OK) {
        ring_close_links(r);
        return st;
    }
    char sw[RING_STR + 64], eng_s[96];
    ring_node_str(r, ring_id_of(r, r->succ), sw, sizeof sw);
    HR_INFO(RING,
            "ring formed: view epoch %llu, rank %d of %d, successor %s, predecessor %s, "
            "security %s (%s), %s%s",
            (unsigned long long)r->view.epoch, r->rank, n, sw, pw, ring_security_name(r->keys.mode),
            sec_aead_name(r->succ_ch.tx.aead), engine_name(r, eng_s, sizeof eng_s),
            r->tree_on ? ", tree links for small collectives" : "");
    return HR_OK;
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
