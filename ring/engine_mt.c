/*
 * engine_mt.c: the threaded engine (mt_run, see engine_internal.h).
 *
 * Collectives that receive more than RING_MT_BYTES run the same schedule on several threads,
 * so that sending, receiving, sealing, opening and reducing use more than one core:
 *  - the calling thread receives: it reads each frame from the predecessor into a slot (one of
 *    MT_SLOTS staged frames) and, without workers, opens it and applies it at once; a frame
 *    whose header says it is an abort it opens itself and reads nothing behind it, so that the
 *    news that may follow it is still on the link (mt_abort_frame);
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
 * sender and the workers first; the calling thread then reports it with the same functions
 * (fail.c, and engine.c's header check), messages and abort frames as the single-threaded
 * engine, finishing the sender's partial frame before an abort goes out behind it. Counters of
 * both channels are left where the in-order engine would leave them.
 */
#include "ring/engine_internal.h"

#include "base/hr_log.h"
#include "ring/fail_internal.h"
#include "ring/frame.h"
#include "ring/tcp.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

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
    if (add == RX_ADD_BF16)
        eng_add_bf16((uint16_t *)out, r->bf16_acc + s->rx_off[j] / 2, (const uint16_t *)pay,
                     len / 2);
    else if (add)
        eng_add_floats((float *)out, (const float *)pay, len / 4);
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
            txf_advance(&m->t, (size_t)n);
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

void mt_free(ring *r) {
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
hr_status mt_start(ring *r) { /* engine_internal.h */
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

/* An engine view of the collective for the reporting functions (fail.c, eng_header), at
 * received frame j, carrying the sender's frame in flight. */
static eng mt_eng(ring_mt *m, size_t j) {
    /* e.t's pieces still point into m->t.hdr and the buffers, which stay put */
    eng e = {.s = m->s,
             .coll = m->coll,
             .rx_link = FROM_PRED,
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
        char fr[32], hint[256];
        snprintf(fr, sizeof fr, " %zu", j);
        fail_size_hint(hint, sizeof hint, f, m->s->rx_len[j]);
        return fail_link_auth(r, &e.t, e.coll, FROM_PRED, fr, hint);
    }
    size_t n = FRAME_HDR + len;
    if (n > r->stage_cap - 1) n = r->stage_cap - 1;
    memcpy(r->rx_stage, f, n);
    hr_status st = eng_header(r, &e);
    if (st == HR_OK) /* a stale check passed now: cannot happen, but never report success */
        st = fail_view(r, &e.t, e.coll, HR_ERR_PROTO, ring_id_of(r, r->pred), FROM_PRED,
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
    int abort;        /* secure modes: its header, not verified yet, says it is an abort */
} mt_rx;

/* Where the predecessor's stream stands while frame j is received as `x`, for fail_tx_trouble. */
static link_pos mt_pos(const ring_mt *m, size_t j, const mt_rx *x) {
    return (link_pos){.hdr = m->rxb[j % m->nslot],
                      .got = x->body ? 0 : x->got,
                      .body = x->body,
                      .left = x->body ? x->want - x->got : 0};
}

/* Something happened on the successor link (a send failed with `err`, or it became readable)
 * while frame j is received as `x`. The threads stop first. A frame they were opening may turn
 * out bad then, and the frames received but not opened yet are opened here, in order: an abort
 * among them explains the failure (the news came before the link closed). Else fail_tx_trouble
 * decides. */
static hr_status mt_succ_trouble(ring *r, ring_mt *m, size_t j, const mt_rx *x, int err) {
    if (mt_quiesce_bad(m))
        return mt_bad_frame(r, m, m->bad, m->rxb[m->bad % m->nslot], m->rx_len[m->bad % m->nslot],
                            m->bad_auth);
    mt_counters(r, m, j);
    eng e = mt_eng(m, j);
    link_pos pp = mt_pos(m, j, x);
    return fail_tx_trouble(r, &e.t, m->coll, FROM_SUCC, err, &pp);
}

/* Secure modes: received frame j, whole in its slot (`len` payload bytes), says in its header,
 * not verified yet, that it is an abort. It is opened here, once the threads stopped and the
 * frames before it were opened in order (the first bad frame decides, as on the single-threaded
 * engine), and nothing behind it is read: an abort that blames a silent node is followed by the
 * news that comes next on the link (fail.c, follow_blame), which must still be there. Handed to
 * a worker, the receiver could take the next frame off the link while the worker opened this
 * one, and the news in it was lost. */
static hr_status mt_abort_frame(ring *r, ring_mt *m, size_t j, size_t len) {
    m->rx_len[j % m->nslot] = len;
    if (!mt_quiesce_bad(m)) {
        int auth_failed;
        (void)mt_apply(m, j, &auth_failed); /* an abort never passes the header check */
        m->have_bad = 1;
        m->bad = j;
        m->bad_auth = auth_failed;
    }
    return mt_bad_frame(r, m, m->bad, m->rxb[m->bad % m->nslot], m->rx_len[m->bad % m->nslot],
                        m->bad_auth);
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
            if (mt_quiesce_bad(m))
                return mt_bad_frame(r, m, m->bad, m->rxb[m->bad % m->nslot],
                                    m->rx_len[m->bad % m->nslot], m->bad_auth);
            mt_counters(r, m, j);
            eng e = mt_eng(m, j);
            return fail_rx_closed(r, &e.t, e.coll, FROM_PRED, err);
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
                return fail_link_auth(r, &e.t, e.coll, FROM_PRED, "", "");
            }
            x->len = h.type == FRAME_ABORT || h.len < want ? h.len : want;
            x->abort = h.type == FRAME_ABORT;
        } else {
            if (!mt_header_ok(m, j, f)) return mt_bad_frame(r, m, j, f, 0, 0);
            x->len = want;
        }
        x->body = 1;
        x->got = 0;
        x->want = x->len + m->tag;
        if (x->want == 0) break;
    }
    if (x->abort) return mt_abort_frame(r, m, j, x->len);
    m->rx_len[j % m->nslot] = x->len;
    *whole = 1;
    return HR_OK;
}

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

/* A collective begins: the sender and the workers take it from here (under mu). */
static void mt_begin(ring *r, ring_mt *m, int coll, uint8_t *base) {
    const ring_sched *s = r->sched;
    int secure = r->keys.mode != RING_SEC_NONE;
    pthread_mutex_lock(&m->mu);
    m->s = s;
    m->base = base;
    m->coll = coll;
    m->secure = secure;
    m->tag = secure ? SEC_TAG : 0;
    m->tx_ctr0 = r->succ_ch.tx.ctr;
    m->rx_ctr0 = r->pred_ch.rx.ctr;
    if (secure) { /* the threads read the channels' window keys from here on */
        sec_dir_sync(&r->succ_ch.tx);
        sec_dir_sync(&r->pred_ch.rx);
    }
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
}

/* Received frame j came in whole: the workers open and apply it, or without workers this thread
 * does at once. */
static void mt_received(ring_mt *m, size_t j) {
    pthread_mutex_lock(&m->mu);
    m->last = tcp_now();
    if (m->nworkers > 0) {
        m->rx_state[j % m->nslot] = RX_FULL;
        m->recvd = j + 1;
        pthread_cond_broadcast(&m->cv);
        pthread_mutex_unlock(&m->mu);
        return;
    }
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

/* Receive frame *j (as `x`) while its slot is free (*slot_free says whether it was); once it is
 * whole it is handed on and *j moves to the next. *moved: bytes came in. */
static hr_status mt_take(ring *r, ring_mt *m, size_t *j, mt_rx *x, int *slot_free, int *moved) {
    int whole = 0;
    pthread_mutex_lock(&m->mu);
    *slot_free = *j < m->s->n_rx && m->rx_state[*j % m->nslot] == RX_FREE && !m->have_bad;
    /* a frame that lands on bytes this node sends first waits for that send (when
     * receiving starts: only x->got == 0 of the header) */
    m->rx_waits = *slot_free && x->got == 0 && !x->body && m->sent < m->need_sent[*j];
    if (m->rx_waits) *slot_free = 0;
    pthread_mutex_unlock(&m->mu);
    if (!*slot_free) return HR_OK;
    HR_CHECK(mt_recv(r, m, *j, x, &whole, moved));
    if (whole) {
        mt_received(m, *j);
        (*j)++;
        *x = (mt_rx){.want = FRAME_HDR};
        *moved = 1;
    }
    return HR_OK;
}

/* Nothing moved for `limit` while frame j is received as `x`: blame the successor that took no
 * data (`tx_blocked`), else the predecessor's silence, as the single-threaded engine does. The
 * sender's flag is read once it stopped: a sender blocked on a full link stops from that wait
 * with the flag set, while a snapshot from before the wait may predate the link filling up. */
static hr_status mt_timeout(ring *r, ring_mt *m, size_t j, const mt_rx *x, double limit) {
    char who[RING_STR + 64];
    mt_quiesce(m);
    pthread_mutex_lock(&m->mu);
    const int tx_blocked = m->tx_blocked;
    pthread_mutex_unlock(&m->mu);
    mt_counters(r, m, j);
    eng e = mt_eng(m, j);
    long id = ring_id_of(r, tx_blocked ? r->succ : r->pred);
    ring_node_str(r, id, who, sizeof who);
    if (tx_blocked)
        return fail_view(r, &e.t, m->coll, HR_ERR_TIMEOUT, id, FROM_SUCC,
                         "%s accepted no data for %.1f s (peer dead or hung?)", who, limit);
    link_pos pp = mt_pos(m, j, x);
    return fail_silent(r, &e.t, m->coll, FROM_PRED, 0, limit, &pp);
}

/* What the receiver sees of the collective after a round (under mu, in mt_look). */
typedef struct {
    int tx_state, tx_errno; /* the sender's */
    int bad;                /* a received frame failed */
    int done;               /* every frame applied and sent */
    double last;            /* time of the last progress */
} mt_seen;

/* Look at the collective after a round in which this thread `moved` bytes or not. */
static mt_seen mt_look(ring_mt *m, int moved) {
    pthread_mutex_lock(&m->mu);
    mt_seen v = {.tx_state = m->tx_state,
                 .tx_errno = m->tx_errno,
                 .bad = m->have_bad,
                 .done = m->applied == m->s->n_rx && m->tx_state == TX_DONE};
    if (moved) m->last = tcp_now();
    v.last = m->last;
    pthread_mutex_unlock(&m->mu);
    return v;
}

/* Nothing moved: wait for the predecessor (while frame j's slot is free), news on the successor
 * link (while the sender runs) or a wake-up, at most until `limit` after the last progress.
 * HR_OK to go on, or the failure reported. */
static hr_status mt_wait(ring *r, ring_mt *m, size_t j, const mt_rx *x, int slot_free,
                         const mt_seen *v, double limit) {
    /* a link not waited on is left out: poll reports a hang-up or error without being asked,
     * which would wake this loop at once, again and again, with nothing to do */
    struct pollfd p[3] = {{.fd = slot_free ? r->pred_fd : -1, .events = POLLIN},
                          {.fd = v->tx_state == TX_RUN ? r->succ_fd : -1, .events = POLLIN},
                          {.fd = m->wake[0], .events = POLLIN}};
    double last = v->last;
    int rc = last + limit > tcp_now() ? poll(p, 3, tcp_poll_ms(last + limit)) : 0;
    if (rc < 0 && errno != EINTR) rc = 0;
    if (p[2].revents & POLLIN) mt_drain(m);
    if (rc > 0 && (p[1].revents & (POLLIN | POLLHUP | POLLERR)))
        return mt_succ_trouble(r, m, j, x, 0);
    pthread_mutex_lock(&m->mu);
    last = m->last;
    pthread_mutex_unlock(&m->mu);
    if (rc == 0 && tcp_now() >= last + limit) return mt_timeout(r, m, j, x, limit);
    return HR_OK;
}

/* Run r->sched over `base` on the engine's threads (see this file's comment). */
/* CPU seconds thread t has used (0 where its clock cannot be read). */
static double thread_cpu_s(pthread_t t) {
    clockid_t c;
    struct timespec ts;
    if (pthread_getcpuclockid(t, &c) != 0 || clock_gettime(c, &ts) != 0) return 0;
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double ring_engine_cpu_s(const ring *r) { /* ring.h */
    const ring_mt *m = r->mt;
    if (!m || !m->started) return 0;
    double s = thread_cpu_s(m->sender);
    for (int w = 0; w < m->nworkers; w++) s += thread_cpu_s(m->workers[w]);
    return s;
}

hr_status mt_run(ring *r, int coll, uint8_t *base) {
    if (mt_start(r) != HR_OK)
        return fail_local(r, coll, HR_ERR_NOMEM, "the threaded engine could not start");
    ring_mt *m = r->mt;
    const ring_sched *s = r->sched;
    if (mt_need_sent(m, s) != 0) return fail_local(r, coll, HR_ERR_NOMEM, "out of memory");
    mt_begin(r, m, coll, base);
    const double limit = r->coll_timeout > r->timeout ? r->coll_timeout : r->timeout;
    mt_rx x = {.want = FRAME_HDR};
    size_t j = 0; /* frame being received */
    for (;;) {
        int moved = 0, slot_free;
        hr_status st = mt_take(r, m, &j, &x, &slot_free, &moved);
        if (st != HR_OK) return st;
        mt_seen v = mt_look(m, moved);
        if (v.bad) {
            mt_quiesce(m); /* frames in flight finish: the first bad one is known then */
            return mt_bad_frame(r, m, m->bad, m->rxb[m->bad % m->nslot],
                                m->rx_len[m->bad % m->nslot], m->bad_auth);
        }
        if (v.tx_state == TX_FAIL) return mt_succ_trouble(r, m, j, &x, v.tx_errno);
        if (v.done) break;
        if (moved) continue;
        if ((st = mt_wait(r, m, j, &x, slot_free, &v, limit)) != HR_OK) return st;
    }
    pthread_mutex_lock(&m->mu);
    m->active = 0;
    pthread_mutex_unlock(&m->mu);
    if (m->secure) {
        r->succ_ch.tx.ctr = m->tx_ctr0 + s->n_tx;
        r->pred_ch.rx.ctr = m->rx_ctr0 + s->n_rx;
    }
    return HR_OK;
}
