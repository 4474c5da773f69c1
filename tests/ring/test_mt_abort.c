/*
 * test_mt_abort.c: two abort frames queued on a node's predecessor link, the first blaming a
 * node for silence, the second naming the node that really failed: the threaded engine
 * (ring/engine_mt.c) names the same culprit as the single-threaded engine (engine.c), the one of
 * the second abort, which the first one's follow-up reads off the link (fail.c, follow_blame).
 *
 * Four rings in one process, view epoch 0 = nodes 0..3, auth mode (aborts are sealed), no tree.
 * Before node 0 runs an all-reduce, the test writes on node 3's successor socket (node 0's
 * predecessor link), sealed with node 3's channel, what a real node 3 would pass on:
 *   1. node 3 blames its predecessor, node 2, for sending nothing (provisional: node 2 may be
 *      waiting on its own predecessor);
 *   2. node 2 passed on node 1's own failure ("out of memory"), reported by node 1.
 * Node 0 must report node 1's failure, reported by node 1, and say that node 2 was alive. On
 * the threaded engine a worker used to open the first abort while the receiving thread read
 * the second into the next slot; the follow-up then found nothing on the link and, after
 * waiting a second, node 0 blamed node 2. Runs the all-reduce on the threaded engine with 2
 * workers, with 0 (frames opened on the receiving thread) and on the single-threaded engine
 * (HETRING_RING_WORKERS=2, 0, off).
 * A white-box test: it writes on node 3's successor socket with node 3's channel, which only
 * the ring's own files see (ring/ring_internal.h); everything else goes through ring.h.
 */
#include "ring/bytes.h"
#include "ring/frame.h"
#include "ring/ring.h"
#include "ring/ring_internal.h"
#include "ring/tcp.h"
#include "tests/check.h"
#include "tests/ports.h"
#include "tests/ring/loopback_ring.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N     4
#define COUNT (1 << 20) /* floats: node 0 receives 6 MiB, above RING_MT_BYTES */

static void make_config(ring_config *rc, long self, int base) {
    loopback_ring_config(rc, "mt-abort", self, N, base, 1);
    loopback_ring_psk(rc);
    rc->connect_timeout = 20;
    rc->timeout = 5;
}

typedef struct {
    ring *r;
    ring_config rc;
    hr_status st;
    char err[HR_ERRLEN];
} former;

static void *form_main(void *arg) {
    former *f = arg;
    f->st = ring_init(&f->r, &f->rc, f->err, sizeof f->err);
    ring_config_wipe(&f->rc);
    return NULL;
}

/* Write an abort frame of node 3's (seq 0 of view epoch 0, an all-reduce's) on its successor
 * link, sealed with its channel, as fail.c's send_abort lays it out. */
static int write_abort(ring *r3, long culprit, long reporter, hr_status st, const char *text) {
    uint8_t body[FRAME_ABORT_MAX], f[FRAME_HDR + FRAME_ABORT_MAX + SEC_TAG];
    size_t tl = strlen(text), len = 20 + tl;
    le_put64(body, (uint64_t)culprit);
    le_put32(body + 8, (uint32_t)st);
    le_put64(body + 12, (uint64_t)reporter);
    memcpy(body + 20, text, tl);
    frame_hdr h = {FRAME_MAGIC, FRAME_VERSION, FRAME_ABORT, FRAME_COLL_ALLREDUCE, 0, 0,
                   0,           (uint32_t)len};
    frame_encode(&h, f);
    sec_seal(&r3->succ_ch.tx, f, body, len);
    return tcp_send_all(r3->succ_fd, f, FRAME_HDR + len + SEC_TAG, tcp_now() + 5) == HR_OK ? 0 : -1;
}

/* One run: form the four rings, queue the two aborts, all-reduce on node 0, check its error. */
static void run(const char *workers) {
    setenv("HETRING_RING_WORKERS", workers, 1);
    const int want_mt = strcmp(workers, "off") != 0;
    const int base = port_block();
    former f[N];
    pthread_t t[N];
    for (int i = 0; i < N; i++) {
        f[i] = (former){.st = HR_ERR_INVAL};
        make_config(&f[i].rc, i, base);
    }
    for (int i = 1; i < N; i++) pthread_create(&t[i], NULL, form_main, &f[i]);
    form_main(&f[0]);
    for (int i = 1; i < N; i++) pthread_join(t[i], NULL);
    int formed = 1;
    for (int i = 0; i < N; i++) {
        CHECK(f[i].st == HR_OK, "workers %s: node %d cannot form the ring: %s", workers, i,
              f[i].err);
        formed &= f[i].st == HR_OK;
    }
    if (formed) {
        ring *r0 = f[0].r, *r3 = f[3].r;
        char silent[160], oom[160];
        snprintf(silent, sizeof silent,
                 "node 2 (127.0.0.1:%d) sent nothing for 5.0 s (peer dead or hung?)", base + 2);
        snprintf(oom, sizeof oom, "node 1 (127.0.0.1:%d): out of memory", base + 1);
        CHECK(write_abort(r3, 2, 3, HR_ERR_TIMEOUT, silent) == 0 &&
                  write_abort(r3, 1, 1, HR_ERR_NOMEM, oom) == 0,
              "the aborts could not be written");
        float *buf = calloc(COUNT, sizeof *buf);
        const uint64_t mt0 = ring_threaded_runs(r0);
        const double t0 = tcp_now();
        hr_status st = buf ? ring_allreduce(r0, buf, COUNT) : HR_ERR_NOMEM;
        const double took = tcp_now() - t0;
        const char *e = ring_error(r0);
        const int threaded = ring_threaded_runs(r0) > mt0;
        printf("workers %s (%s engine): %s after %.2f s: %s\n", workers,
               threaded ? "threaded" : "single-threaded", hr_strerror(st), took, e);
        CHECK(threaded == want_mt, "workers %s: the all-reduce ran on the %s engine", workers,
              threaded ? "threaded" : "single-threaded");
        CHECK(st == HR_ERR_NOMEM && strstr(e, oom) && strstr(e, "(reported by node 1 ") &&
                  strstr(e, "; node 2 (") && strstr(e, "was alive, waiting on its predecessor"),
              "workers %s: node 0 does not name node 1's failure, reported by node 1, with node "
              "2 alive: %s: %s",
              workers, hr_strerror(st), e);
        free(buf);
    }
    for (int i = 0; i < N; i++) ring_free(f[i].r);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    run("2");
    run("0");
    run("off");
    return check_exit();
}
