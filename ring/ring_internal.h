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
 *  - elect.c: elections and the lobby (elect_): form.c's gate hands it lobby calls, and it
 *    forms the views it agrees on with ring_form.
 * Each of them includes this header and none includes another's: ring.h declares only what
 * users of the ring call. Everything else in those files is static.
 */
#ifndef HR_RING_INTERNAL_H
#define HR_RING_INTERNAL_H

#include "ring/frame.h"
#include "ring/ring.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

/* Collectives receiving more than this run on the threaded engine (where it is on): below it
 * the hand-offs between threads cost about what they save (bench/README.md, "All-reduce"). */
#define RING_MT_BYTES (1 << 20)
/* Most workers the threaded engine runs beside its sender (ring_workers). */
#define MT_WORKERS_MAX 8

/* ---------------------------------------------------------------- names and errors (ring.c) */

/* "node ID (host:port)" for a member of the config, else "node ID". */
void ring_node_str(const ring *r, long id, char *out, size_t n);

/* The id of member `idx` of the config. */
static inline long ring_id_of(const ring *r, int idx) {
    return r->rc.members[idx].id;
}

/* Drop both links (fds closed, channel states freed): before a view forms, and first thing in
 * an election (elect.c). */
void ring_close_links(ring *r);

/* A local failure in the middle of a collective: the others are already sending, so the view
 * is failed and they are told. */
hr_status ring_local_fail(ring *r, int coll, hr_status st, const char *what);

/* ---------------------------------------------------------------- formation (form.c) */

/* Form the ring of r->view: connect to the successor and take the predecessor, both within
 * `secs` seconds (ring_init, ring_reform, and elect.c once a view is agreed on). */
hr_status ring_form(ring *r, double secs, char *err, size_t errlen);

/* ---------------------------------------------------------------- schedules (engine.c) */

/* Per-call schedule of frames (r->sched). */
struct ring_sched {
    size_t *tx_off, *tx_len; /* byte range of the i-th frame sent */
    size_t *tx_need;         /* frames that must have arrived before frame i is sent */
    size_t *rx_off, *rx_len; /* byte range of the i-th frame received */
    uint8_t *rx_add;         /* 1: add the frame's floats, 0: copy its bytes */
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

/* The outgoing frame in flight. */
typedef struct {
    uint8_t hdr[FRAME_HDR]; /* header (mode none; secure modes build it in tx_stage) */
    struct iovec iov[2];    /* what is left to send */
    int iovn;               /* entries of iov in use */
    size_t left;            /* bytes left */
} txf;

/* `n` more bytes of `t` went out. */
static inline void eng_iov_advance(txf *t, size_t n) {
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

/* Where a failure was seen: on the predecessor link, on the successor link, or here. */
enum { FROM_PRED, FROM_SUCC, FROM_HERE };

/* Where the predecessor's stream stands, for news_from_pred: `got` bytes of the next frame's
 * header are in `hdr` (body 0), or `left` bytes of the current frame's payload and tag are
 * still to come (body 1). The incoming channel's counter is that frame's. */
typedef struct {
    const uint8_t *hdr;
    size_t got;
    int body;
    size_t left;
} pred_pos;

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

/* dst[i] += src[i] for the n floats of a frame: the reduction. */
static inline void eng_add_floats(float *restrict dst, const float *restrict src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

/* Record a failure of this view, blaming node `culprit`, seen `from` a link or here, and tell
 * the neighbours. Returns `st`. */
hr_status eng_fail_view(ring *r, txf *t, int coll, hr_status st, long culprit, int from,
                        const char *fmt, ...) __attribute__((format(printf, 7, 8)));
/* A frame on the link `from` failed authentication (or, unverified, cannot be a genuine one). */
hr_status eng_link_auth_fail(ring *r, txf *t, int coll, int from, const char *frame);
/* The predecessor sent nothing for `limit` seconds while its stream stood at `pp`: blame it,
 * unless its own abort, within a short wait, names the node it was waiting on (engine.c). */
hr_status eng_pred_silent(ring *r, txf *t, int coll, double limit, const pred_pos *pp);
/* Something happened on the successor link: report what (see engine.c). */
hr_status eng_succ_trouble(ring *r, txf *t, int coll, int e, const pred_pos *pp);
/* Check the header of frame e->ri (in rx_stage) against the one expected. */
hr_status eng_header(ring *r, eng *e);

/* Run the schedule in r->sched over `base` on the engine that suits it. */
hr_status eng_run(ring *r, int coll, uint8_t *base);

/* ---------------------------------------------------------------- the threaded engine
 * (engine_mt.c) */

/* Run r->sched over `base` on the engine's threads, starting them on first use. */
hr_status mt_run(ring *r, int coll, uint8_t *base);
/* Stop the threaded engine's threads and free its staging (ring_free). */
void mt_free(ring *r);

/* ---------------------------------------------------------------- elections and the lobby
 * (elect.c) */

typedef struct ring_elastic ring_elastic;

/* The election state of a ring (r->el), allocated by ring_init and ring_open and freed by
 * ring_free after the gate stopped. */
hr_status elect_alloc(ring *r);
void elect_free(ring *r);
/* ring_init or ring_reform formed r->view outside an election: the lobby reports it. */
void elect_formed(ring *r);
/* Serve one lobby call on `fd` (its handshake succeeded; `ch` is its channel; `peer` is the
 * caller's proven id, `addr` its address for messages): read one request, send one reply, all
 * by `deadline`. Runs on a gate thread; the caller closes fd. */
void elect_serve(ring *r, int fd, sec_chan *ch, long peer, const char *addr, double deadline);

#endif
