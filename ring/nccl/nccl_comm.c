/*
 * nccl_comm.c: the NCCL backend (see nccl_comm.h).
 *
 * NCCL is called through the table of nccl_lib.h, filled by the first unique id or init of the
 * process (nccl_lib_load). Every wait is a poll against a monotonic deadline: ncclCommGetAsyncError
 * for the communicator's state (ncclInProgress while a non-blocking call completes, an error code
 * when a peer or the network failed) and cudaStreamQuery for the collective itself. The poll
 * yields for the first millisecond (small all-reduces finish in microseconds) and then
 * sleeps 50 us per round so a long wait does not burn a core.
 *
 * ncclCommAbort and ncclCommDestroy give no deadline of their own: NCCL runs them as blocking
 * calls, and they wait for the communicator's threads and for its other ranks on this machine. So
 * each runs on a thread of its own (teardown_run), waited for TEARDOWN_S at most; an abort that
 * returns ncclInProgress is polled there until the communicator leaves that state. A teardown that
 * outlives the deadline is left to NCCL, and one that failed may have left the communicator half
 * torn down (NCCL allows no further call on it); either way this process makes no new
 * communicator on that device (torn_devices), which would race it, and such a node's views go
 * over TCP.
 */
#include "ring/nccl/nccl_comm.h"

#include "ring/nccl/nccl_lib.h"

#include "base/hr_log.h"
#include "base/hr_time.h"

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

_Static_assert(sizeof(ncclUniqueId) == NCCL_UNIQUE_ID_BYTES, "ncclUniqueId size changed");

/* Seconds a finalize, an abort or a destroy may take. Teardown is local work (NCCL's threads, the
 * device's memory, the ranks on this machine), not a wait on the network, so it is one bound for
 * every configuration; past it the device goes over TCP, which costs speed, not the run. */
#define TEARDOWN_S 10.0

/* Devices where a communicator's abort or destroy failed, or was still going after TEARDOWN_S,
 * bit N for cuda:N (cuda:63 and above share bit 63). The process's, as the device is, and only
 * ever set. */
static uint64_t torn_devices;

static uint64_t device_bit(int device) {
    return 1ull << (device < 63 ? device : 63);
}

/* ================================================================ helpers */

static void pause_poll(double waited_s) {
    if (waited_s < 1e-3) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, 50 * 1000};
    nanosleep(&ts, NULL);
}

/* Record a failure, abort the communicator and return s. */
static hr_status fail(nccl_comm *c, hr_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static hr_status fail(nccl_comm *c, hr_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
    HR_ERROR(RING, "nccl rank %d/%d: %s", c->rank, c->n, c->err);
    nccl_comm_abort(c);
    return s;
}

/* The communicator's asynchronous state, one round of a poll: HR_OK with *busy = 1 while a
 * non-blocking call is in progress, 0 once it settled; a failure (recorded, the communicator
 * aborted) when the state is an error or cannot be read. */
static hr_status comm_state(nccl_comm *c, const char *what, int *busy) {
    ncclResult_t st = ncclInProgress;
    ncclResult_t r = nccl_lib.ncclCommGetAsyncError((ncclComm_t)c->comm, &st);
    if (r != ncclSuccess)
        return fail(c, HR_ERR_NCCL, "%s: ncclCommGetAsyncError: %s", what,
                    nccl_lib.ncclGetErrorString(r));
    if (st != ncclSuccess && st != ncclInProgress)
        return fail(c, HR_ERR_NCCL, "%s: %s (%s)", what, nccl_lib.ncclGetErrorString(st),
                    nccl_lib.ncclGetLastError((ncclComm_t)c->comm));
    *busy = st == ncclInProgress;
    return HR_OK;
}

/* The end of one round of a poll begun at t0: past the deadline, HR_ERR_TIMEOUT (recorded as
 * "<what><late> within <seconds> s (<hint>)", the communicator aborted); before it, a pause and
 * HR_OK. */
static hr_status poll_round(nccl_comm *c, double t0, double deadline, const char *what,
                            const char *late, const char *hint) {
    double t = hr_now();
    if (t > deadline)
        return fail(c, HR_ERR_TIMEOUT, "%s%s within %.1f s (%s)", what, late, t - t0, hint);
    pause_poll(t - t0);
    return HR_OK;
}

/* Poll the communicator until it leaves ncclInProgress or the deadline passes. */
static hr_status wait_comm(nccl_comm *c, double deadline, const char *what) {
    double t0 = hr_now();
    for (;;) {
        int busy = 0;
        hr_status s = comm_state(c, what, &busy);
        if (s != HR_OK || !busy) return s;
        s = poll_round(c, t0, deadline, what, ": no progress",
                       "a member is missing or unreachable; check that every node reached the "
                       "same view");
        if (s != HR_OK) return s;
    }
}

/* ================================================================ public API */

int nccl_available(void) {
    int v = 0, n = 0;
    char why[HR_ERRLEN];
    if (nccl_lib_load(why, sizeof why) != HR_OK) return 0;
    if (nccl_lib.ncclGetVersion(&v) != ncclSuccess) return 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n > 0;
}

hr_status nccl_get_unique_id(uint8_t out[NCCL_UNIQUE_ID_BYTES], char *err, size_t errlen) {
    HR_CHECK(nccl_lib_load(err, errlen));
    ncclUniqueId id;
    ncclResult_t r = nccl_lib.ncclGetUniqueId(&id);
    if (r != ncclSuccess)
        return hr_fail(err, errlen, HR_ERR_NCCL, "ncclGetUniqueId: %s (%s)",
                       nccl_lib.ncclGetErrorString(r), nccl_lib.ncclGetLastError(NULL));
    memcpy(out, id.internal, NCCL_UNIQUE_ID_BYTES);
    return HR_OK;
}

hr_status nccl_comm_usable(int device, char *err, size_t errlen) {
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess) cudaGetLastError(), ndev = 0;
    if (device < 0 || device >= ndev)
        return hr_fail(err, errlen, HR_ERR_UNSUPPORTED,
                       "nccl: cuda:%d requested, but this machine has %d CUDA device(s)", device,
                       ndev);
    if (__atomic_load_n(&torn_devices, __ATOMIC_ACQUIRE) & device_bit(device))
        return hr_fail(err, errlen, HR_ERR_NCCL,
                       "nccl: cuda:%d: the teardown of an earlier communicator there failed or "
                       "had not ended after %.0f s (logged then), so this process makes no new one "
                       "there (restart the node to use NCCL on it again)",
                       device, TEARDOWN_S);
    return HR_OK;
}

hr_status nccl_comm_init(nccl_comm *c, int rank, int n,
                         const uint8_t unique_id[NCCL_UNIQUE_ID_BYTES], int device,
                         double timeout_s, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    c->rank = rank, c->n = n, c->device = device;
    if (n < 1 || rank < 0 || rank >= n)
        return hr_fail(err, errlen, HR_ERR_INVAL, "nccl: rank %d out of range for %d members", rank,
                       n);
    HR_CHECK(nccl_lib_load(err, errlen));
    HR_CHECK(nccl_comm_usable(device, err, errlen));
    double deadline = hr_now() + timeout_s;
    cudaStream_t stream = NULL;
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    if (e != cudaSuccess)
        return hr_fail(err, errlen, HR_ERR_CUDA, "nccl: cuda:%d: %s", device,
                       cudaGetErrorString(e));
    c->stream = stream;

    ncclUniqueId id;
    memcpy(id.internal, unique_id, NCCL_UNIQUE_ID_BYTES);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = NULL;
    ncclResult_t r = nccl_lib.ncclCommInitRankConfig(&comm, n, id, rank, &config);
    c->comm = comm;
    hr_status s = HR_OK;
    if (r != ncclSuccess && r != ncclInProgress)
        s = fail(c, HR_ERR_NCCL, "ncclCommInitRankConfig: %s (%s)", nccl_lib.ncclGetErrorString(r),
                 nccl_lib.ncclGetLastError(comm));
    else if (!comm)
        s = fail(c, HR_ERR_NCCL, "ncclCommInitRankConfig returned no communicator");
    else
        s = wait_comm(c, deadline, "communicator init");
    if (s != HR_OK) {
        hr_fail(err, errlen, s, "nccl rank %d of %d on cuda:%d: %s", rank, n, device, c->err);
        nccl_comm_free(c);
        return s;
    }
    HR_INFO(RING, "nccl: rank %d of %d on cuda:%d ready", rank, n, device);
    return HR_OK;
}

hr_status nccl_allreduce(nccl_comm *c, float *dev_buf, size_t count, double timeout_s) {
    if (!c->comm || c->broken) {
        if (!c->err[0]) snprintf(c->err, sizeof c->err, "communicator not initialised");
        return HR_ERR_NCCL;
    }
    if (count == 0) return HR_OK;
    double t0 = hr_now(), deadline = t0 + timeout_s;
    cudaError_t e = cudaSetDevice(c->device);
    if (e != cudaSuccess)
        return fail(c, HR_ERR_CUDA, "cudaSetDevice(%d): %s", c->device, cudaGetErrorString(e));
    ncclResult_t r = nccl_lib.ncclAllReduce(dev_buf, dev_buf, count, ncclFloat, ncclSum,
                                            (ncclComm_t)c->comm, (cudaStream_t)c->stream);
    if (r == ncclInProgress)
        HR_CHECK(wait_comm(c, deadline, "all-reduce enqueue"));
    else if (r != ncclSuccess)
        return fail(c, HR_ERR_NCCL, "ncclAllReduce(%zu floats): %s (%s)", count,
                    nccl_lib.ncclGetErrorString(r), nccl_lib.ncclGetLastError((ncclComm_t)c->comm));
    char what[64];
    snprintf(what, sizeof what, "all-reduce of %zu floats", count);
    for (;;) {
        e = cudaStreamQuery((cudaStream_t)c->stream);
        if (e == cudaSuccess) break;
        if (e != cudaErrorNotReady)
            return fail(c, HR_ERR_CUDA, "%s: %s", what, cudaGetErrorString(e));
        /* the runtime keeps "not ready" as this thread's last error: clear it, or the next
         * kernel launch check (cudaGetLastError, the SGD step's) reports it as a failure */
        (void)cudaGetLastError();
        int busy = 0;
        hr_status s = comm_state(c, what, &busy);
        if (s == HR_OK)
            s = poll_round(c, t0, deadline, what, " did not finish",
                           "a peer stopped or the network failed");
        if (s != HR_OK) return s;
    }
    return HR_OK;
}

/* ================================================================ teardown with a deadline */

/* ncclCommAbort and ncclCommDestroy block their caller (NCCL runs them as blocking calls even on
 * a non-blocking communicator) until the communicator's own threads, and the other ranks of it on
 * this machine, let it go: with a peer gone, possibly for ever. So each runs on a thread of its
 * own, which the caller waits for TEARDOWN_S at most. The job is shared by the two threads, under
 * its lock; the last of them to let go of it frees it, so a caller that gave up leaves nothing the
 * teardown thread still touches, and the communicator is that thread's alone from the hand-over. */
typedef struct {
    ncclComm_t comm;    /* the communicator; only the teardown thread uses it */
    int destroy;        /* 1: ncclCommDestroy (after a finalize), 0: ncclCommAbort */
    int rank, device;   /* for the log */
    ncclResult_t r;     /* what the teardown came to, once done */
    int settling;       /* the abort returned ncclInProgress and is being polled */
    int done;           /* the teardown thread has finished */
    int refs;           /* holders: the caller until it stops waiting, the teardown thread */
    pthread_mutex_t mu; /* guards r, settling, done and refs */
    pthread_cond_t cv;  /* signalled when done */
} teardown;

static const char *teardown_call(int destroy) {
    return destroy ? "ncclCommDestroy" : "ncclCommAbort";
}

/* Drop one holder; the last frees the job. */
static void teardown_release(teardown *t) {
    pthread_mutex_lock(&t->mu);
    int last = --t->refs == 0;
    pthread_mutex_unlock(&t->mu);
    if (!last) return;
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

/* An abort that returned ncclInProgress: poll until the communicator leaves it, or until the
 * caller stopped waiting. ncclSuccess once it left, else what the poll failed with. */
static ncclResult_t teardown_settle(teardown *t) {
    const double t0 = hr_now();
    for (;;) {
        ncclResult_t st = ncclInProgress;
        ncclResult_t r = nccl_lib.ncclCommGetAsyncError(t->comm, &st);
        if (r != ncclSuccess) return r;
        if (st != ncclInProgress) return ncclSuccess;
        pthread_mutex_lock(&t->mu);
        int alone = t->refs == 1;
        pthread_mutex_unlock(&t->mu);
        if (alone) return ncclInProgress; /* the caller gave up: the device is refused already */
        pause_poll(hr_now() - t0);
    }
}

static void *teardown_main(void *arg) {
    teardown *t = arg;
    cudaSetDevice(t->device); /* the device is per thread */
    ncclResult_t r =
        t->destroy ? nccl_lib.ncclCommDestroy(t->comm) : nccl_lib.ncclCommAbort(t->comm);
    if (r == ncclInProgress && !t->destroy) {
        pthread_mutex_lock(&t->mu);
        t->settling = 1;
        pthread_mutex_unlock(&t->mu);
        r = teardown_settle(t);
    }
    pthread_mutex_lock(&t->mu);
    t->r = r, t->done = 1;
    int late = t->refs == 1;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
    if (late && r != ncclInProgress) /* the call came back; the caller has said the rest */
        HR_WARN(RING,
                "nccl rank %d on cuda:%d: %s returned (%s) after its deadline; cuda:%d stays "
                "refused to new communicators in this process",
                t->rank, t->device, teardown_call(t->destroy), nccl_lib.ncclGetErrorString(r),
                t->device);
    teardown_release(t);
    return NULL;
}

/* Refuse `device` to new communicators for the rest of the process, and say why. */
static void refuse_device(int rank, int device, const char *call, const char *what) {
    __atomic_fetch_or(&torn_devices, device_bit(device), __ATOMIC_RELEASE);
    HR_ERROR(RING,
             "nccl rank %d on cuda:%d: %s %s; the communicator is left to NCCL, and this process "
             "makes no new communicator on cuda:%d (views with this node go over TCP)",
             rank, device, call, what, device);
}

/* The job of tearing comm down, handed to a thread of its own (detached); NULL when there is no
 * memory or thread for it. */
static teardown *teardown_start(int rank, int device, ncclComm_t comm, int destroy) {
    teardown *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    *t = (teardown){.comm = comm, .destroy = destroy, .rank = rank, .device = device, .refs = 2};
    pthread_mutex_init(&t->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&t->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_t th;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    int made = pthread_create(&th, &a, teardown_main, t) == 0;
    pthread_attr_destroy(&a);
    if (made) return t;
    t->refs = 1;
    teardown_release(t);
    return NULL;
}

/* Tear comm down (abort, or destroy when `destroy`) on a thread of its own, waiting TEARDOWN_S at
 * most. 0 when it ended in time with ncclSuccess. Otherwise -1: it failed, or outlived the
 * deadline (and is left running), or could not be started (the communicator is then left as it
 * is); either way it is logged and the device refused. NCCL allows no call on a communicator
 * after its destroy or abort returned, whatever they returned, so one that failed may be half torn
 * down with nothing left to finish it: a new communicator there would race what is left. */
static int teardown_run(int rank, int device, ncclComm_t comm, int destroy) {
    const char *call = teardown_call(destroy);
    teardown *t = teardown_start(rank, device, comm, destroy);
    if (!t) {
        refuse_device(rank, device, call, "could not be run (no memory or thread for it)");
        return -1;
    }
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    const long ns = until.tv_nsec + (long)(TEARDOWN_S * 1e9) % 1000000000L;
    until.tv_sec += (time_t)TEARDOWN_S + ns / 1000000000L, until.tv_nsec = ns % 1000000000L;
    pthread_mutex_lock(&t->mu);
    while (!t->done && pthread_cond_timedwait(&t->cv, &t->mu, &until) == 0) {
    }
    const int done = t->done, settling = t->settling;
    const ncclResult_t r = t->r;
    pthread_mutex_unlock(&t->mu);
    teardown_release(t); /* t is the teardown thread's alone from here */
    if (done && r == ncclSuccess) return 0;
    char what[160];
    if (done)
        snprintf(what, sizeof what, "failed: %s (%s)", nccl_lib.ncclGetErrorString(r),
                 nccl_lib.ncclGetLastError(NULL));
    else
        snprintf(what, sizeof what, "%s after %.0f s",
                 settling ? "returned ncclInProgress and was still tearing the communicator down"
                          : "had not returned",
                 TEARDOWN_S);
    refuse_device(rank, device, call, what);
    return -1;
}

void nccl_comm_abort(nccl_comm *c) {
    if (!c) return;
    if (c->comm) {
        ncclComm_t comm = (ncclComm_t)c->comm;
        c->comm = NULL;
        (void)teardown_run(c->rank, c->device, comm, 0);
    }
    c->broken = 1;
}

void nccl_comm_free(nccl_comm *c) {
    if (!c) return;
    if (c->comm) {
        cudaSetDevice(c->device);
        ncclComm_t comm = (ncclComm_t)c->comm;
        ncclResult_t r = nccl_lib.ncclCommFinalize(comm);
        hr_status s = HR_OK;
        if (r == ncclInProgress)
            s = wait_comm(c, hr_now() + TEARDOWN_S, "finalize"); /* aborts on failure */
        else if (r != ncclSuccess)
            s = fail(c, HR_ERR_NCCL, "ncclCommFinalize: %s (%s)", nccl_lib.ncclGetErrorString(r),
                     nccl_lib.ncclGetLastError(comm));
        c->comm = NULL;
        /* finalized: the destroy frees what is left in this process */
        if (s == HR_OK && teardown_run(c->rank, c->device, comm, 1) != 0) c->broken = 1;
    }
    if (c->stream) { /* no synchronise: after an abort the stream may hold dead work */
        cudaStreamDestroy((cudaStream_t)c->stream);
        c->stream = NULL;
    }
}
