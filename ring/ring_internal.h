/*
 * ring_internal.h: the ring's state as the files of ring/ see it; ring.h keeps it opaque to the
 * ring's users (the cluster engine, benches, tests). struct ring, the links of its view and the
 * frames in flight on them, and what ring.c, the lowest file of the ring, gives the others.
 *
 * The ring is built from these files, from the top down; each calls only files below it, and
 * its header (NAME_internal.h) serves the files above:
 *  - open.c: a ring's life, from ring_init or ring_open to ring_free; it sets up and frees what
 *    the files below keep;
 *  - elect.c: elections and the lobby (elect_internal.h); it registers the gate's lobby
 *    handler and forms the views it agrees on with ring_form;
 *  - form.c: the gate and formation (form_internal.h);
 *  - coll.c: the collectives, run on one of the engines or over the tree;
 *  - tree.c: the view's binary tree and the collectives over it (tree_internal.h);
 *  - engine_mt.c, engine.c: the threaded and the single-threaded engine, and the schedules they
 *    run (engine_internal.h);
 *  - fail.c: a view's failures, recorded and told in abort frames (fail_internal.h);
 *  - ring.c: the accessors of ring.h, names and links (this header).
 * Everything else in those files is static. The frame fuzzer (tests/fuzz/fuzz_frame.c) and
 * tests/ring/test_mt_abort.c include this header too, to write on a ring's socket.
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
 * connections (form.c), the schedule of a collective's frames (engine_internal.h). */
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
    long tree_cut;        /* this view's largest all-reduce over it: rc.tree_bytes when the
                           * view forms, then ring_set_tree_cut's */
    uint64_t seq;            /* sequence number of the next collective in this view */
    size_t seg_bytes;        /* pipeline segment size */
    double timeout;          /* seconds without progress before a peer counts as dead */
    double coll_timeout;     /* a collective's deadline without progress if longer
                              * (ring_set_step_timeout), else timeout applies */
    uint8_t *tx_stage;       /* sealed outgoing frame: header | payload | tag */
    uint8_t *rx_stage;       /* incoming frame: header | payload | tag */
    size_t stage_cap;        /* bytes allocated for each stage */
    float *tmp;              /* scratch for the small all-reduce (n * count floats) */
    float *bf16_acc;         /* the float32 sums of ring_allreduce_bf16 in progress, or NULL */
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
    int ending;                        /* ring_set_ending: elections agree on the run's end */
    long suspect; /* the node the last failure was blamed on, for the election's
                   * first probe (-1: none) */
};

/* ---------------------------------------------------------------- names */

/* "node ID (host:port)" for a member of the config, else "node ID". */
void ring_node_str(const ring *r, long id, char *out, size_t n);

/* The id of member `idx` of the config. */
static inline long ring_id_of(const ring *r, int idx) {
    return r->rc.members[idx].id;
}

/* ---------------------------------------------------------------- links */

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

/* Drop every link (fds closed, channel states freed): before a view forms, and first thing in
 * an election (elect.c). */
void ring_close_links(ring *r);

/* The tree's neighbours of rank `rank` in a view of `n`: out[0] the parent, out[1] and out[2]
 * the children (ranks, -1 where there is none). */
void tree_links_of(int rank, int n, int out[3]);

#endif
