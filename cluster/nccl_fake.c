/*
 * nccl_fake.c: a recording fake of the NCCL operations (nccl_path.h) for tests on machines
 * without a GPU. Linked only into the hooks variant of the fault hooks (hr_fault_fake_nccl,
 * armed by HETRING_FAULT=fake_nccl:NODE), never into libhetring or the installed hetring.
 *
 * Its "device" buffer is host memory (the emulated GPU's, trainer/device_emu.c), and its
 * all-reduce is the view's TCP ring all-reduce, preceded by as many zeros as the stats tail the
 * TCP path carries before the gradient (stats.h), so the ring cuts its chunks at the same
 * places and the sums are the TCP path's bit for bit: a cluster over the fake ends where the
 * same cluster over TCP does. It logs one line per event, which the tests read:
 *   fake nccl: unique id for view E: HEX
 *   fake nccl: init view E rank R/N id HEX: ok | failed (...)
 *   fake nccl: abort of view E's communicator (ring at view E'): K all-reduce(s) of F floats
 *     (the calls that went through this communicator, so that a test can tell that the
 *     gradients took this path and not the TCP ring's own all-reduce)
 *   fake nccl: all-reduce error injected at iteration I (view E)
 * Faults: nccl_init_fail:NODE:E (the init of view E fails on NODE), nccl_error:NODE:I (NODE's
 * all-reduce of iteration I fails, once per process).
 */
#include "cluster/nccl_fake.h"

#include "cluster/hr_fault.h"
#include "cluster/nccl_path.h"
#include "cluster/stats.h"

#include "base/hr_log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    ring *r;                              /* the view's TCP ring */
    uint64_t epoch;                       /* the view */
    int rank, n;                          /* position and size */
    long node_id;                         /* this node */
    char hex[2 * NCCL_PATH_ID_BYTES + 1]; /* the id, for the log */
    float *scratch;                       /* (cap) the padded buffer of the all-reduce */
    size_t cap;                           /* floats allocated */
    long calls;                           /* all-reduces that completed */
    unsigned long long floats;            /* floats they carried, the padding not counted */
} fake_comm;

/* The nccl_error fault fires once per process: the re-run of the iteration must succeed. */
static int error_fired;

static void to_hex(const uint8_t *id, char *out) {
    for (int i = 0; i < NCCL_PATH_ID_BYTES; i++) sprintf(out + 2 * i, "%02x", id[i]);
}

static hr_status fake_unique_id(uint8_t id[NCCL_PATH_ID_BYTES], long node_id, uint64_t epoch,
                                char *err, size_t errlen) {
    if (getrandom(id, NCCL_PATH_ID_BYTES, 0) != NCCL_PATH_ID_BYTES) {
        uint64_t x = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ epoch;
        for (int i = 0; i < NCCL_PATH_ID_BYTES; i++)
            x = x * 6364136223846793005ull + 1, id[i] = (uint8_t)(x >> 56);
    }
    char hex[2 * NCCL_PATH_ID_BYTES + 1];
    to_hex(id, hex);
    HR_INFO(RING, "fake nccl: unique id for view %llu: %s", (unsigned long long)epoch, hex);
    (void)node_id, (void)err, (void)errlen;
    return HR_OK;
}

static hr_status fake_init(void **comm, const nccl_path_args *a, char *err, size_t errlen) {
    char hex[2 * NCCL_PATH_ID_BYTES + 1];
    to_hex(a->id, hex);
    double at;
    *comm = NULL;
    if (hr_fault_get("nccl_init_fail", a->node_id, -1, &at) && (uint64_t)at == a->epoch) {
        HR_INFO(RING, "fake nccl: init view %llu rank %d/%d id %s: failed (injected)",
                (unsigned long long)a->epoch, a->rank, a->n, hex);
        return hr_fail(err, errlen, HR_ERR_NCCL,
                       "ncclCommInitRankConfig: unhandled system error (test fault "
                       "nccl_init_fail)");
    }
    fake_comm *c = calloc(1, sizeof *c);
    if (!c) return hr_fail(err, errlen, HR_ERR_NOMEM, "fake nccl: out of memory");
    *c = (fake_comm){
        .r = a->r, .epoch = a->epoch, .rank = a->rank, .n = a->n, .node_id = a->node_id};
    memcpy(c->hex, hex, sizeof hex);
    HR_INFO(RING, "fake nccl: init view %llu rank %d/%d id %s: ok", (unsigned long long)a->epoch,
            a->rank, a->n, hex);
    *comm = c;
    return HR_OK;
}

static hr_status fake_allreduce(void *comm, float *buf, size_t count, double timeout_s, long iter,
                                char *err, size_t errlen) {
    fake_comm *c = comm;
    double at;
    (void)timeout_s;
    if (!c) return hr_fail(err, errlen, HR_ERR_NCCL, "fake nccl: no communicator");
    if (!error_fired && hr_fault_get("nccl_error", c->node_id, -1, &at) && (long)at == iter) {
        error_fired = 1;
        HR_INFO(RING, "fake nccl: all-reduce error injected at iteration %ld (view %llu)", iter,
                (unsigned long long)c->epoch);
        return hr_fail(err, errlen, HR_ERR_NCCL,
                       "ncclAllReduce: remote process exited or there was a network error (test "
                       "fault nccl_error)");
    }
    const size_t pad = (size_t)c->n * CLUSTER_NODE_STATS; /* the TCP path's stats tail */
    if (pad + count > c->cap) {
        float *s = realloc(c->scratch, sizeof *s * (pad + count));
        if (!s) return hr_fail(err, errlen, HR_ERR_NOMEM, "fake nccl: out of memory");
        c->scratch = s, c->cap = pad + count;
    }
    memset(c->scratch, 0, sizeof *c->scratch * pad);
    memcpy(c->scratch + pad, buf, sizeof *buf * count);
    hr_status st = ring_allreduce(c->r, c->scratch, pad + count);
    if (st != HR_OK) return hr_fail(err, errlen, st, "fake nccl: %s", ring_error(c->r));
    memcpy(buf, c->scratch + pad, sizeof *buf * count);
    c->calls++, c->floats += count;
    return HR_OK;
}

static void fake_abort(void *comm) {
    fake_comm *c = comm;
    if (!c) return;
    HR_INFO(RING,
            "fake nccl: abort of view %llu's communicator (ring at view %llu): %ld "
            "all-reduce(s) of %llu floats",
            (unsigned long long)c->epoch, (unsigned long long)ring_get_view(c->r)->epoch, c->calls,
            c->floats);
    free(c->scratch);
    free(c);
}

static hr_status fake_load(char *err, size_t errlen) {
    return HR_OK;
}

const nccl_path_ops nccl_fake_ops = {"fake",    fake_load,      fake_unique_id,
                                     fake_init, fake_allreduce, fake_abort};
