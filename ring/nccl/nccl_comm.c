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
 * An abort that returns ncclInProgress (a non-blocking communicator still being torn down) is
 * polled the same way until the communicator leaves ncclInProgress, for TEARDOWN_S at most, as
 * a finalize is. A teardown that outlives that is left to NCCL, and this process makes no new
 * communicator on that device (torn_devices), which would race it: such a node's views go over
 * TCP.
 */
#include "ring/nccl/nccl_comm.h"

#include "ring/nccl/nccl_lib.h"

#include "base/hr_log.h"
#include "base/hr_time.h"

#include <cuda_runtime_api.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

_Static_assert(sizeof(ncclUniqueId) == NCCL_UNIQUE_ID_BYTES, "ncclUniqueId size changed");

#define TEARDOWN_S 10.0 /* seconds a finalize, or an abort in progress, may take */

/* Devices whose aborted communicator was still being torn down after TEARDOWN_S, bit N for
 * cuda:N (cuda:63 and above share bit 63). The process's, as the device is, and only ever set. */
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

hr_status nccl_comm_init(nccl_comm *c, int rank, int n,
                         const uint8_t unique_id[NCCL_UNIQUE_ID_BYTES], int device,
                         double timeout_s, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    c->rank = rank, c->n = n, c->device = device;
    if (n < 1 || rank < 0 || rank >= n)
        return hr_fail(err, errlen, HR_ERR_INVAL, "nccl: rank %d out of range for %d members", rank,
                       n);
    HR_CHECK(nccl_lib_load(err, errlen));
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess) cudaGetLastError(), ndev = 0;
    if (device < 0 || device >= ndev)
        return hr_fail(err, errlen, HR_ERR_UNSUPPORTED,
                       "nccl: cuda:%d requested, but this machine has %d CUDA device(s)", device,
                       ndev);
    if (__atomic_load_n(&torn_devices, __ATOMIC_ACQUIRE) & device_bit(device))
        return hr_fail(err, errlen, HR_ERR_NCCL,
                       "nccl: cuda:%d: a communicator aborted earlier was still being torn down "
                       "after %.0f s, so this process makes no new one there (restart the node "
                       "to use NCCL on it again)",
                       device, TEARDOWN_S);
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

/* An abort that returned ncclInProgress: poll until the communicator leaves it, TEARDOWN_S at
 * most; past that, NCCL keeps the communicator and the device takes no new one. */
static void wait_teardown(const nccl_comm *c, ncclComm_t comm) {
    const double t0 = hr_now();
    for (;;) {
        ncclResult_t st = ncclInProgress;
        ncclResult_t r = nccl_lib.ncclCommGetAsyncError(comm, &st);
        if (r != ncclSuccess) {
            HR_WARN(RING, "nccl rank %d on cuda:%d: after ncclCommAbort: ncclCommGetAsyncError: %s",
                    c->rank, c->device, nccl_lib.ncclGetErrorString(r));
            return;
        }
        if (st != ncclInProgress) return;
        double t = hr_now();
        if (t - t0 > TEARDOWN_S) break;
        pause_poll(t - t0);
    }
    __atomic_fetch_or(&torn_devices, device_bit(c->device), __ATOMIC_RELEASE);
    HR_ERROR(RING,
             "nccl rank %d on cuda:%d: ncclCommAbort was still tearing the communicator down "
             "after %.0f s; it is left to NCCL, and this process makes no new communicator on "
             "cuda:%d (views with this node go over TCP)",
             c->rank, c->device, TEARDOWN_S, c->device);
}

void nccl_comm_abort(nccl_comm *c) {
    if (!c) return;
    if (c->comm) {
        ncclComm_t comm = (ncclComm_t)c->comm;
        c->comm = NULL;
        cudaSetDevice(c->device);
        ncclResult_t r = nccl_lib.ncclCommAbort(comm);
        if (r == ncclInProgress)
            wait_teardown(c, comm);
        else if (r != ncclSuccess)
            HR_WARN(RING, "nccl rank %d: ncclCommAbort: %s", c->rank,
                    nccl_lib.ncclGetErrorString(r));
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
            s = HR_ERR_NCCL, nccl_comm_abort(c);
        if (s == HR_OK && c->comm) nccl_lib.ncclCommDestroy(comm);
        c->comm = NULL;
    }
    if (c->stream) { /* no synchronise: after an abort the stream may hold dead work */
        cudaStreamDestroy((cudaStream_t)c->stream);
        c->stream = NULL;
    }
}
