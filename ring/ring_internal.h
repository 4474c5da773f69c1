/*
 * ring_internal.h: what the files of the ring share with each other; not for users of the ring
 * (the cluster engine, tests, benches), who include ring.h alone.
 *
 * The ring is built from these files, each of which declares here what the others call:
 *  - ring.c: names and errors, and the collectives (prefix ring_);
 *  - form.c: the gate, formation and a ring's life from ring_init to ring_free (ring_form);
 *  - engine.c: schedules (sched_) and the single-threaded engine (eng_), which also reports
 *    every failure of a collective, for both engines;
 *  - engine_mt.c: the threaded engine (mt_);
 *  - tree.c: the view's binary tree and the all-reduce over it (tree_);
 *  - elect.c: elections and the lobby (elect_): form.c's gate hands it lobby calls, and it
 *    forms the views it agrees on with ring_form.
 * Each of them includes this header and none includes another's: ring.h declares only what
 * users of the ring call. Everything else in those files is static.
 */
#ifndef HR_RING_INTERNAL_H
#define HR_RING_INTERNAL_H

#include "ring/frame.h"
#include "ring/ring.h"
#include "ring/sec.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

/* Parts of a ring that only some of its files see: the accepting thread and its pending
 * connections (form.c), the schedule of a collective's frames (below). */
typedef struct ring_gate ring_gate;
typedef struct ring_sched ring_sched;

/* What the gate does with a lobby call whose handshake succeeded: read one request on `fd`
 * (channel `ch`; `peer` is the caller's proven id, `addr` its address for messages) and send one
 * reply, all by `deadline`. Runs on a gate thread; the gate closes fd afterwards. */
typedef void gate_lobby_fn(void *ctx, int fd, sec_chan *ch, long peer, const char *addr,
                           double deadline);
typedef struct {
    gate_lobby_fn *serve; /* NULL: a lobby call is closed once its handshake succeeded */
    void *ctx;            /* its first argument */
} gate_lobby;

struct ring {
    ring_config rc;          /* this ring's own copy of its config; its PSK is wiped by ring_free */
    int self;                /* this node's index in rc.members */
    long self_id;            /* this node's id */
    ring_view view;          /* current view */
    int rank;                /* position of this node in view.ids */
    int succ, pred;          /* rc.members indices of successor and predecessor; -1 when alone */
    int listen_fd;           /* listening socket, kept across views */
    ring_gate *gate;         /* thread that accepts on listen_fd until ring_free (form.c) */
    gate_lobby lobby;        /* the gate's handler of lobby calls (gate_set_lobby) */
    int succ_fd;             /* connection to the successor (this node sends) */
    int pred_fd;             /* connection from the predecessor (this node receives) */
    sec_keys keys;           /* this node's secrets */
    sec_chan succ_ch;        /* channel state of the successor link (tx used) */
    sec_chan pred_ch;        /* channel state of the predecessor link (rx used) */
    /* the view's binary tree over the ranks, for small all-reduces (ring/tree.c): link 0 to
     * the parent, 1 and 2 to the children; fd -1 where there is none */
    int tree_fd[3];
    sec_chan tree_ch[3];  /* their channels (both directions used) */
    int tree_peer[3];     /* rc.members index at the other end, or -1 */
    int tree_on;          /* this view formed its tree (ring_tree_wanted) */
    uint64_t seq;            /* sequence number of the next collective in this view */
    size_t seg_bytes;        /* pipeline segment size */
    double timeout;          /* seconds without progress before a peer counts as dead */
    double coll_timeout;     /* a collective's deadline without progress if longer
                              * (ring_set_step_timeout), else timeout applies */
    uint8_t *tx_stage;       /* sealed outgoing frame: header | payload | tag */
    uint8_t *rx_stage;       /* incoming frame: header | payload | tag */
    size_t stage_cap;        /* bytes allocated for each stage */
    float *tmp;              /* scratch for the small all-reduce (n * count floats) */
    size_t tmp_cap;          /* bytes allocated for tmp */
    ring_sched *sched;       /* schedule scratch (engine.c) */
    struct ring_elastic *el; /* election state, shared with the gate's lobby (elect.c) */
    struct ring_mt *mt;      /* threads of the threaded engine, started by the first large
                              * collective (engine_mt.c), or NULL */
    int mt_workers;          /* crypto and reduction workers of the threaded engine */
    uint64_t mt_runs;        /* collectives the threaded engine ran */
    uint64_t tree_runs;      /* collectives that went over the tree */
    hr_status failed;        /* HR_OK, or the error that broke this view */
    char err[HR_ERRLEN];     /* last detailed error */
    const volatile sig_atomic_t *stop; /* ring_set_stop's flag, or NULL */
    long suspect; /* the node the last failure was blamed on, for the election's
                   * first probe (-1: none) */
};

/* Collectives receiving more than this run on the threaded engine (where it is on): below it
 * the hand-offs between threads cost about what they save (bench/README.md, "All-reduce"). */
#define RING_MT_BYTES (1 << 20)
/* All-reduces of at most this many bytes gather every contribution and add them in rank order
 * (ring.c): n - 1 hops instead of 2(n - 1), so lower latency, at the cost of (n - 1)x the
 * traffic. */
#define RING_SMALL_BYTES (32 << 10)
/* Most workers the threaded engine runs beside its sender (ring_workers). */
#define MT_WORKERS_MAX 8

/* ---------------------------------------------------------------- names and errors (ring.c) */

/* "node ID (host:port)" for a member of the config, else "node ID". */
void ring_node_str(const ring *r, long id, char *out, size_t n);

/* The id of member `idx` of the config. */
static inline long ring_id_of(const ring *r, int idx) {
    return r->rc.members[idx].id;
}

/* Drop every link (fds closed, channel states freed): before a view forms, and first thing in
 * an election (elect.c). */
void ring_close_links(ring *r);

/* A local failure in the middle of a collective: the others are already sending, so the view
 * is failed and they are told. */
hr_status fail_local(ring *r, int coll, hr_status st, const char *what);

/* ---------------------------------------------------------------- formation (form.c) */

/* Register the gate's handler of lobby calls (elect.c does, as the ring is set up): before the
 * gate starts, so that its threads only read it. */
void gate_set_lobby(ring *r, gate_lobby_fn *serve, void *ctx);
/* Listen on this node's address and start the gate (ring_init, ring_open, ring_reform). */
hr_status listen_start(ring *r, char *err, size_t errlen);
/* Stop the gate: every pending connection is closed and every thread joined (ring_free). */
void gate_stop(ring *r);

/* Form the ring of r->view: connect to the successor and take the predecessor, both within
 * `secs` seconds (ring_init, ring_reform, and elect.c once a view is agreed on). */
hr_status ring_form(ring *r, double secs, char *err, size_t errlen);

/* ---------------------------------------------------------------- schedules (engine.c) */

/* What a received frame does to its place: copy its bytes, add its floats, or OR its bytes
 * (the tree's all-gather: blocks are disjoint and zero elsewhere). */
enum { RX_COPY = 0, RX_ADD = 1, RX_OR = 2 };

/* Per-call schedule of frames (r->sched). */
struct ring_sched {
    size_t *tx_off, *tx_len; /* byte range of the i-th frame sent */
    size_t *tx_need;         /* frames that must have arrived before frame i is sent */
    size_t *rx_off, *rx_len; /* byte range of the i-th frame received */
    uint8_t *rx_add;         /* RX_COPY, RX_ADD or RX_OR (the threaded engine: copy, add) */
    size_t n_tx, n_rx;       /* frames in each direction */
    size_t cap;              /* entries allocated per array */
};

/* Allocate a ring's schedule scratch (r->sched, empty until a collective reserves room) for
 * ring_init and ring_open; sched_free frees it (ring_free) and does nothing where there is none. */
hr_status sched_alloc(ring *r);
void sched_free(ring *r);

/* Blocks of a ring step schedule: byte offset and length of each rank's block. */
typedef struct {
    const size_t *off, *len;
} sched_blocks;

/* Room for `n` frames each way in `s`. */
hr_status sched_reserve(ring_sched *s, size_t n);

/* Segments of at most `seg` bytes that `bytes` bytes are cut into (1 for none). */
static inline size_t sched_nseg(size_t bytes, size_t seg) {
    return bytes <= seg ? 1 : (bytes + seg - 1) / seg;
}

/* Build the schedule of a sequence of ring steps into r->sched (see engine.c). */
hr_status sched_steps(ring *r, const sched_blocks *b, const int *tx_blk, const int *rx_blk,
                      const uint8_t *add, int steps, size_t esz);

/* ---------------------------------------------------------------- the engine (engine.c) */

/* The links of a view, as the engine names them: where a failure was seen or a frame goes.
 * FROM_HERE is none (a failure here). The tree's links follow: FROM_TREE + 0 to the parent,
 * + 1 and + 2 to the children. */
enum { FROM_SUCC, FROM_PRED, FROM_HERE, FROM_TREE, FROM_LINKS = FROM_TREE + 3 };

/* The socket of link `from` (-1 where there is none). */
static inline int *ring_link_fd(ring *r, int from) {
    return from == FROM_SUCC ? &r->succ_fd : from == FROM_PRED ? &r->pred_fd
                                                               : &r->tree_fd[from - FROM_TREE];
}
static inline sec_chan *ring_link_ch(ring *r, int from) {
    return from == FROM_SUCC ? &r->succ_ch : from == FROM_PRED ? &r->pred_ch
                                                               : &r->tree_ch[from - FROM_TREE];
}
/* The node at the other end of link `from`, or -1. */
static inline long ring_link_id(const ring *r, int from) {
    int idx = from == FROM_SUCC   ? r->succ
              : from == FROM_PRED ? r->pred
              : from >= FROM_TREE && from < FROM_LINKS ? r->tree_peer[from - FROM_TREE]
                                                       : -1;
    return idx >= 0 ? r->rc.members[idx].id : -1;
}

/* The outgoing frame in flight. */
typedef struct {
    int link;               /* the link it goes on (FROM_SUCC unless a tree collective's) */
    uint8_t hdr[FRAME_HDR]; /* header (mode none; secure modes build it in tx_stage) */
    struct iovec iov[2];    /* what is left to send */
    int iovn;               /* entries of iov in use */
    size_t left;            /* bytes left */
} txf;

/* `n` more bytes of `t` went out. */
static inline void txf_advance(txf *t, size_t n) {
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

/* Where an incoming stream stands, for news_from_pred and follow_blame: `got` bytes of the
 * next frame's header are in `hdr` (body 0), or `left` bytes of the current frame's payload
 * and tag are still to come (body 1). The incoming channel's counter is that frame's. */
typedef struct {
    const uint8_t *hdr;
    size_t got;
    int body;
    size_t left;
} link_pos;

/* One collective in progress: where the schedule stands in each direction. */
typedef struct {
    const ring_sched *s; /* the schedule (r->sched) */
    int coll;            /* FRAME_COLL_* of this collective */
    int rx_link;         /* the link frames come from (FROM_PRED but on the tree) */
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

/* dst[i] += src[i] for the n floats of a frame: the reduction. */
static inline void eng_add_floats(float *restrict dst, const float *restrict src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

/* Record a failure of this view, blaming node `culprit`, seen `from` a link or here, and tell
 * the neighbours. Returns `st`. */
hr_status fail_view(ring *r, txf *t, int coll, hr_status st, long culprit, int from,
                    const char *fmt, ...) __attribute__((format(printf, 7, 8)));
/* A frame on the link `from` failed authentication (or, unverified, cannot be a genuine one). */
hr_status fail_link_auth(ring *r, txf *t, int coll, int from, const char *frame);
/* The node on link `from` moved nothing for `limit` seconds (sent nothing, or with `tx`
 * accepted nothing), its incoming stream standing at `pp` (NULL: a frame boundary): blame it,
 * unless its own abort, within a short wait, names the node it was waiting on (engine.c). */
hr_status fail_silent(ring *r, txf *t, int coll, int from, int tx, double limit,
                      const link_pos *pp);
/* Something happened on link `from`, which carries nothing this way but an abort (the
 * successor link, or a tree link while this node sends on it): report what (see engine.c). */
hr_status fail_tx_trouble(ring *r, txf *t, int coll, int from, int e, const link_pos *pp);
/* Report the abort frame whose payload (`len` bytes, verified in secure modes) is `body`, which
 * came on link `from`, and pass it on (fail.c). */
hr_status fail_abort_report(ring *r, txf *t, int coll, uint8_t *body, size_t len, int from);
/* Read the rest of a frame whose header `raw` came in on link `from` and that should be an
 * abort, and report it (fail.c). */
hr_status fail_on_abort(ring *r, txf *t, int coll, const uint8_t *raw, int from);
/* Check the header of frame e->ri (in rx_stage) against the one expected. */
hr_status eng_header(ring *r, eng *e);

/* Run r->sched on the calling thread with its frames sent on link `tx` and received from link
 * `rx` (FROM_SUCC and FROM_PRED round the ring; a tree link for the tree's single-frame steps). */
hr_status eng_run_links(ring *r, int coll, uint8_t *base, int tx, int rx);

/* ---------------------------------------------------------------- the tree (tree.c) */

/* Whether a view of `n` members forms a tree (tree_bytes set and n >= 4). */
int tree_wanted(const ring *r, int n);
/* The tree's neighbours of rank `rank` in a view of `n`: out[0] the parent, out[1] and out[2]
 * the children (ranks, -1 where there is none). */
void tree_links_of(int rank, int n, int out[3]);
/* Whether a collective of `bytes` bytes that takes `ring_hops` hops round the ring goes over
 * the tree in this view. */
int tree_takes(const ring *r, size_t bytes, int ring_hops);
/* Collective `coll` over the tree on `bytes` bytes of buf: combined up to rank 0 in a fixed
 * order (`op` RX_ADD: floats added; RX_OR: bytes OR'ed), then rank 0's bytes copied down. */
hr_status tree_reduce(ring *r, int coll, uint8_t *buf, size_t bytes, int op);

/* ---------------------------------------------------------------- the threaded engine
 * (engine_mt.c) */

/* Run r->sched over `base` on the engine's threads, starting them on first use. */
hr_status mt_run(ring *r, int coll, uint8_t *base);
/* Stop the threaded engine's threads and free its staging (ring_free). */
void mt_free(ring *r);

/* ---------------------------------------------------------------- elections and the lobby
 * (elect.c) */

typedef struct ring_elastic ring_elastic;

/* The election state of a ring (r->el), allocated by ring_init and ring_open, which also
 * registers the gate's lobby handler, and freed by ring_free after the gate stopped. */
hr_status elect_alloc(ring *r);
void elect_free(ring *r);
/* ring_init or ring_reform formed r->view outside an election: the lobby reports it. */
void elect_formed(ring *r);

#endif
