/*
 * ring.h: the TCP ring and its collectives.
 *
 * A ring is formed from a membership view (epoch, ordered member ids): every member listens on
 * its configured host:port, connects to its successor (retrying with backoff until
 * connect_timeout) and accepts its predecessor; both links are authenticated by the handshake
 * in sec.h. Data flows one way round the ring: a node sends only to its successor and
 * receives only from its predecessor, both at once.
 * From the first listen until ring_free a thread accepts every connection: while a view forms,
 * handshakes run in parallel, each with a short deadline and at most 16 pending; any connection
 * that is not the authenticated predecessor is closed at once and its address logged, so a
 * peer without the key cannot delay or stop the cluster.
 *
 * Contract of every collective:
 *  - all members call the same collectives in the same order with matching arguments;
 *  - each call returns HR_OK, or an error with ring_error() naming the peer (id, host:port)
 *    and what went wrong; no call blocks longer than the config's `timeout` without progress;
 *  - after an error the ring is failed: later calls return the same error until ring_reform()
 *    forms a new view; buffers handed to the failed call hold unspecified (never unverified)
 *    data;
 *  - a failure seen by one node is forwarded round the ring, so every member reports the node
 *    that failed, not just its neighbour.
 * Every frame carries the view epoch and the collective's sequence number (I7). The all-reduce
 * is a reduce-scatter then an all-gather, so every member ends with bitwise-identical bytes
 * (I4); small all-reduces gather every contribution and add them in rank order, which gives
 * the same guarantee.
 */
#ifndef HR_RING_H
#define HR_RING_H

#include "hr_status.h"
#include "ring_config.h"
#include "sec.h"

#include <stddef.h>
#include <stdint.h>

/* The accepting thread and its pending connections (ring.c). */
typedef struct ring_gate ring_gate;

/* A membership view. */
typedef struct {
    uint64_t epoch;           /* 0 at start, +1 per re-formation */
    int n;                    /* members */
    long ids[RING_MAX_NODES]; /* member ids in ring order */
} ring_view;

/* Per-call schedule of frames (internal). */
typedef struct {
    size_t *tx_off, *tx_len; /* byte range of the i-th frame sent */
    size_t *tx_need;         /* frames that must have arrived before frame i is sent */
    size_t *rx_off, *rx_len; /* byte range of the i-th frame received */
    uint8_t *rx_add;         /* 1: add the frame's floats, 0: copy its bytes */
    size_t n_tx, n_rx;       /* frames in each direction */
    size_t cap;              /* entries allocated per array */
} ring_sched;

typedef struct ring {
    ring_config rc;      /* this ring's own copy of its config; its PSK is wiped by ring_free */
    int self;            /* this node's index in rc.members */
    long self_id;        /* this node's id */
    ring_view view;      /* current view */
    int rank;            /* position of this node in view.ids */
    int succ, pred;      /* rc.members indices of successor and predecessor; -1 when alone */
    int listen_fd;       /* listening socket, kept across views */
    ring_gate *gate;     /* thread that accepts on listen_fd until ring_free (ring.c) */
    int succ_fd;         /* connection to the successor (this node sends) */
    int pred_fd;         /* connection from the predecessor (this node receives) */
    sec_keys keys;       /* this node's secrets */
    sec_chan succ_ch;    /* channel state of the successor link (tx used) */
    sec_chan pred_ch;    /* channel state of the predecessor link (rx used) */
    uint64_t seq;        /* sequence number of the next collective in this view */
    size_t seg_bytes;    /* pipeline segment size */
    double timeout;      /* seconds without progress before a peer counts as dead */
    uint8_t *tx_stage;   /* sealed outgoing frame: header | payload | tag */
    uint8_t *rx_stage;   /* incoming frame: header | payload | tag */
    size_t stage_cap;    /* bytes allocated for each stage */
    float *tmp;          /* scratch for the small all-reduce (n * count floats) */
    size_t tmp_cap;      /* bytes allocated for tmp */
    ring_sched sched;    /* schedule scratch */
    hr_status failed;    /* HR_OK, or the error that broke this view */
    char err[HR_ERRLEN]; /* last detailed error */
} ring;

/* Form the ring for view epoch 0 (all members of `rc`, in their order) as node rc->self_id.
 * `rc` is copied: the caller may wipe and drop its own after the call. On failure `err` (and
 * ring_error) say which peer and why; ring_free is still needed. */
hr_status ring_init(ring *r, const ring_config *rc, char *err, size_t errlen);

/* Drop the current links and form the ring of view `v` (which must contain this node),
 * keeping the listening socket and the keys. Clears a failed state. */
hr_status ring_reform(ring *r, const ring_view *v, char *err, size_t errlen);

int ring_rank(const ring *r);
/* Pipeline segment size in bytes (segment_bytes, or the measured default). */
size_t ring_segment_bytes(const ring *r);
int ring_size(const ring *r);
const ring_view *ring_get_view(const ring *r);

/* In-place float32 sum over all members; any count, 0 included. */
hr_status ring_allreduce(ring *r, float *buf, size_t count);
/* Everyone's `bytes_each` bytes, in rank order, into `all` (n * bytes_each bytes). */
hr_status ring_allgather(ring *r, const void *mine, void *all, size_t bytes_each);
/* Variable sizes: rank k contributes bytes_of[k] bytes (my_bytes must equal bytes_of[rank]);
 * `all` receives them back to back in rank order. */
hr_status ring_allgatherv(ring *r, const void *mine, size_t my_bytes, void *all,
                          const size_t *bytes_of);
/* `bytes` bytes of root_rank's buf into everyone's buf. */
hr_status ring_broadcast(ring *r, void *buf, size_t bytes, int root_rank);
/* Returns once every member has entered the barrier. */
hr_status ring_barrier(ring *r);

/* The last detailed error ("" if none). */
const char *ring_error(const ring *r);
/* Close everything and wipe the keys (the config's PSK too); safe on a partly initialised
 * ring. */
void ring_free(ring *r);

#endif
