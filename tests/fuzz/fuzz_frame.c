/*
 * fuzz_frame.c: the ring's frame header and every check the ring makes on a frame before it
 * uses the body (ring/engine.c: the engine's header checks, the length bound of secure modes, abort
 * frames), through the collectives themselves.
 *
 * Two real rings, node 0 and node 1 of a two-node cluster, are formed on 127.0.0.1 once per
 * security mode. For each input node 0 runs one collective; the input stands for everything
 * its predecessor (node 1) sends: it is written on node 1's link to node 0, followed by
 * end-of-file on both of node 1's links, as when node 1 stops, so node 0 either completes the
 * collective or fails at once (never by its timeout). Then both rings re-form view epoch 0
 * (ring_reform), so every input meets the same state: sequence number 0, fresh channel keys.
 * Input: one selector byte, then node 1's bytes. Selector: value % 3 is the mode (none, auth,
 * encrypt; a PSK); value / 3 % 5 the collective: 0 a small all-reduce (6 floats), 1 a
 * pipelined all-reduce (8200 floats in 4 KiB segments), 2 an all-gather (12 bytes each),
 * 3 a broadcast from rank 1 (100 bytes), 4 a barrier.
 * In secure modes the fuzzer cannot forge a tag, so it reaches the length bound and abort
 * handling that come before verification; in mode none, every header check.
 *
 * Seeds (corpus/frame): what a real node 1 sends in each collective, recorded through a
 * relay: FUZZ_RECORD=DIR fuzz_frame writes them to DIR. Not fuzzed here: what node 0 reads
 * on its successor link (an abort sent back against the data flow, ring/fail.c fail_tx_trouble).
 * Ports: a block of 8 claimed as tests/ports.sh claims them ($TMPDIR/hetring-ports.BASE).
 * A white-box test: it writes on node 1's successor socket, which only the ring's own files see
 * (ring/ring_internal.h); everything else goes through ring.h.
 */
#include "base/hr_log.h"
#include "ring/frame.h"
#include "ring/ring.h"
#include "ring/ring_internal.h"
#include "ring/tcp.h"
#include "tests/fuzz/fuzz.h"
#include "tests/fuzz/fuzz_ring.h"
#include "tests/ports.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define N_MODES         3
#define N_COLLS         5
#define FRAME_MAX_INPUT (64 << 10)
#define BIG_COUNT       8200 /* floats: above the small all-reduce's 32 KiB */

static ring *g_ring[N_MODES][2];
static float g_buf[BIG_COUNT];
static uint8_t g_all[2 * 100];

/* ================================================================ setup */

static int g_formed; /* modes whose rings were formed */

static void free_rings(void) {
    for (int m = 0; m < g_formed; m++) ring_free(g_ring[m][0]), ring_free(g_ring[m][1]);
}

static void make_config(ring_config *rc, int mode, int self, int base) {
    fuzz_ring_config(rc, mode, self, base + 2 * mode, 1);
    rc->connect_timeout = 10;
    rc->segment_bytes = 4096;
    rc->min_nodes = 2;
    rc->rejoin_timeout = 5;
    if (mode) {
        memset(rc->psk, 0x5a, sizeof rc->psk);
        rc->has_psk = 1;
    }
}

typedef struct {
    ring **r;
    ring_config rc;
    int reform; /* 0: ring_init(rc), 1: ring_reform to view epoch 0 */
    hr_status st;
    char err[HR_ERRLEN];
} former;

static void *former_main(void *arg) {
    former *f = arg;
    ring_view v = {.epoch = 0, .n = 2, .ids = {0, 1}};
    f->st = f->reform ? ring_reform(*f->r, &v, f->err, sizeof f->err)
                      : ring_init(f->r, &f->rc, f->err, sizeof f->err);
    return NULL;
}

/* Form (or re-form) both rings of `mode` at once. */
static void form(int mode, int reform, int base) {
    former f[2];
    pthread_t t;
    for (int n = 0; n < 2; n++) {
        f[n] = (former){.r = &g_ring[mode][n], .reform = reform};
        if (!reform) make_config(&f[n].rc, mode, n, base);
    }
    pthread_create(&t, NULL, former_main, &f[1]);
    former_main(&f[0]);
    pthread_join(t, NULL);
    for (int n = 0; n < 2; n++)
        if (f[n].st != HR_OK) {
            fprintf(stderr, "fuzz_frame: node %d cannot form the ring: %s\n", n, f[n].err);
            exit(1);
        }
}

/* Run collective `coll` on `r` (either node: the same arguments on both). */
static hr_status collective(ring *r, int coll) {
    switch (coll) {
    case 0:
        return ring_allreduce(r, g_buf, 6);
    case 1:
        return ring_allreduce(r, g_buf, BIG_COUNT);
    case 2:
        return ring_allgather(r, g_buf, g_all, 12);
    case 3:
        return ring_broadcast(r, g_all, 100, 1);
    default:
        return ring_barrier(r);
    }
}

/* ================================================================ one input */

static void send_blocking(int fd, const uint8_t *p, size_t n) {
    if (n && tcp_send_all(fd, p, n, tcp_now() + 5) != HR_OK) {
        fprintf(stderr, "fuzz_frame: cannot write the input to node 0 (%s)\n", strerror(errno));
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size - 1 > FRAME_MAX_INPUT) return 0;
    int mode = data[0] % N_MODES, coll = data[0] / N_MODES % N_COLLS;
    ring *r0 = g_ring[mode][0], *r1 = g_ring[mode][1];
    send_blocking(r1->succ_fd, data + 1, size - 1);
    shutdown(r1->succ_fd, SHUT_WR);
    /* node 0's successor link ends too: node 0 reads an abort queued there when its predecessor
     * link closes (fail_rx_closed), and waits up to a second for one while that link is open */
    shutdown(r1->pred_fd, SHUT_WR);
    double t0 = tcp_now();
    memset(g_buf, 0, sizeof g_buf);
    (void)collective(r0, coll);
    fuzz_waited("fuzz_frame: node 0", t0, tcp_now());
    form(mode, 1, 0);
    return 0;
}

/* ================================================================ recording honest seeds */

typedef struct {
    int from, to; /* copy from -> to (the real, non-blocking socket) until end-of-file */
    FILE *rec;    /* and append what passed */
} relay;

static void *relay_main(void *arg) {
    relay *r = arg;
    uint8_t buf[4096];
    for (ssize_t n; (n = read(r->from, buf, sizeof buf)) > 0;) {
        fwrite(buf, 1, (size_t)n, r->rec);
        if (tcp_send_all(r->to, buf, (size_t)n, tcp_now() + 5) != HR_OK) break;
    }
    return NULL;
}

typedef struct {
    ring *r;
    int coll;
    hr_status st;
} runner;

static void *runner_main(void *arg) {
    runner *c = arg;
    c->st = collective(c->r, c->coll);
    return NULL;
}

/* Node 1's bytes in collective `coll` of `mode`, after the selector, to DIR/NAME. */
static void record(const char *dir, int mode, int coll) {
    static const char *mn[N_MODES] = {"none", "auth", "encrypt"};
    static const char *cn[N_COLLS] = {"allreduce", "allreduce_big", "allgather", "broadcast",
                                      "barrier"};
    char path[1024];
    snprintf(path, sizeof path, "%s/%s_%s", dir, mn[mode], cn[coll]);
    FILE *rec = fopen(path, "wb");
    if (!rec) abort();
    fputc(mode + N_MODES * coll, rec);
    ring *r0 = g_ring[mode][0], *r1 = g_ring[mode][1];
    int sp[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sp) != 0) abort();
    fcntl(sp[0], F_SETFL, fcntl(sp[0], F_GETFL) | O_NONBLOCK);
    int real = r1->succ_fd;
    r1->succ_fd = sp[0];
    relay rl = {sp[1], real, rec};
    runner c1 = {r1, coll, HR_OK}, c0 = {r0, coll, HR_OK};
    pthread_t tr, t1;
    pthread_create(&tr, NULL, relay_main, &rl);
    pthread_create(&t1, NULL, runner_main, &c1);
    runner_main(&c0);
    pthread_join(t1, NULL);
    shutdown(sp[0], SHUT_WR);
    pthread_join(tr, NULL);
    close(sp[0]);
    close(sp[1]);
    r1->succ_fd = real;
    fclose(rec);
    printf("%s: node 0 %s, node 1 %s\n", path, hr_strerror(c0.st), hr_strerror(c1.st));
    form(mode, 1, 0);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    fuzz_quiet();
    if (sodium_init() < 0) abort();
    int base = port_block(); /* released at exit, after the rings (atexit runs in reverse) */
    atexit(free_rings);
    for (int m = 0; m < N_MODES; m++, g_formed++) form(m, 0, base);
    const char *dir = getenv("FUZZ_RECORD");
    if (dir) {
        for (int m = 0; m < N_MODES; m++)
            for (int c = 0; c < N_COLLS; c++) record(dir, m, c);
        exit(0);
    }
    return 0;
}
