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
 * all-reduce of iteration I fails, once per process), nccl_refused:NODE:E (NODE's device is
 * refused from view E on, as the real one's is after a teardown that failed: ready says so, and
 * an init there fails at once).
 *
 * Its init is collective, as NCCL's is: a member waits in it until every member of the view has
 * arrived or its deadline (timeout_s) passed. The members meet through empty files named by the
 * view's id, one a rank, in $TMPDIR (else /tmp), each removed when its communicator goes; so a
 * member whose init fails (nccl_init_fail) never arrives, and the others wait in theirs for it
 * until their deadline, and fail with HR_ERR_TIMEOUT.
 */
#include "cluster/nccl_fake.h"

#include "cluster/hr_fault.h"
#include "cluster/nccl_path.h"
#include "cluster/stats.h"

#include "base/hr_log.h"
#include "base/hr_time.h"

#include <errno.h>
#include <limits.h>
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

/* Where rank `rank` of the communicator with id `hex` says it arrived. */
static void arrival_path(char *out, size_t len, const char *hex, int rank) {
    const char *dir = getenv("TMPDIR");
    snprintf(out, len, "%s/hetring-fake-nccl-%.32s.%d", dir && *dir ? dir : "/tmp", hex, rank);
}

/* Arrive, then wait until every rank has, or timeout_s. */
static hr_status meet(const nccl_path_args *a, const char *hex, char *err, size_t errlen) {
    char path[PATH_MAX];
    arrival_path(path, sizeof path, hex, a->rank);
    FILE *f = fopen(path, "w");
    if (!f || fclose(f) != 0)
        return hr_fail(err, errlen, HR_ERR_IO, "fake nccl: %s: %s", path, strerror(errno));
    const double t0 = hr_now();
    for (int q = 0; q < a->n;) {
        arrival_path(path, sizeof path, hex, q);
        if (access(path, F_OK) == 0) {
            q++;
            continue;
        }
        if (hr_now() - t0 > a->timeout_s) {
            arrival_path(path, sizeof path, hex, a->rank);
            unlink(path);
            return hr_fail(err, errlen, HR_ERR_TIMEOUT,
                           "communicator init: no progress within %.1f s (rank %d of %d never "
                           "arrived)",
                           hr_now() - t0, q, a->n);
        }
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    }
    return HR_OK;
}

/* The real one's refused device, scripted: nccl_refused:NODE:E refuses NODE's device from view
 * E on, as a teardown that failed would (only ever set). */
static hr_status fake_ready(int cuda, long node_id, uint64_t epoch, char *err, size_t errlen) {
    double at;
    if (hr_fault_get("nccl_refused", node_id, -1, &at) && epoch >= (uint64_t)at)
        return hr_fail(err, errlen, HR_ERR_NCCL,
                       "nccl: cuda:%d: the teardown of an earlier communicator there failed (test "
                       "fault nccl_refused), so this process makes no new one there",
                       cuda);
    return HR_OK;
}

static hr_status fake_init(void **comm, const nccl_path_args *a, char *err, size_t errlen) {
    char hex[2 * NCCL_PATH_ID_BYTES + 1];
    to_hex(a->id, hex);
    double at;
    *comm = NULL;
    if (fake_ready(a->device, a->node_id, a->epoch, err, errlen) != HR_OK) { /* as the real one */
        HR_INFO(RING, "fake nccl: init view %llu rank %d/%d id %s: failed (%s)",
                (unsigned long long)a->epoch, a->rank, a->n, hex, err);
        return HR_ERR_NCCL;
    }
    if (hr_fault_get("nccl_init_fail", a->node_id, -1, &at) && (uint64_t)at == a->epoch) {
        HR_INFO(RING, "fake nccl: init view %llu rank %d/%d id %s: failed (injected)",
                (unsigned long long)a->epoch, a->rank, a->n, hex);
        return hr_fail(err, errlen, HR_ERR_NCCL,
                       "ncclCommInitRankConfig: unhandled system error (test fault "
                       "nccl_init_fail)");
    }
    hr_status st = meet(a, hex, err, errlen);
    if (st != HR_OK) {
        HR_INFO(RING, "fake nccl: init view %llu rank %d/%d id %s: failed (%s)",
                (unsigned long long)a->epoch, a->rank, a->n, hex, err);
        return st;
    }
    fake_comm *c = calloc(1, sizeof *c);
    if (!c) {
        char path[PATH_MAX];
        arrival_path(path, sizeof path, hex, a->rank);
        unlink(path);
        return hr_fail(err, errlen, HR_ERR_NOMEM, "fake nccl: out of memory");
    }
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
    char path[PATH_MAX];
    arrival_path(path, sizeof path, c->hex, c->rank);
    unlink(path);
    free(c->scratch);
    free(c);
}

static hr_status fake_load(char *err, size_t errlen) {
    return HR_OK;
}

const nccl_path_ops nccl_fake_ops = {"fake",    fake_load,      fake_unique_id, fake_ready,
                                     fake_init, fake_allreduce, fake_abort};
