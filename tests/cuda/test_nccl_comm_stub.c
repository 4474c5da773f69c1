/*
 * test_nccl_comm_stub.c: the NCCL backend (ring/nccl/nccl_comm.c) on a machine without a GPU.
 * nccl_comm.c is compiled into this test against stand-ins of the CUDA runtime calls it makes
 * and of the NCCL table (nccl_lib.h), which a scenario scripts: how long the non-blocking init
 * stays in progress, how many times the all-reduce's stream answers "not ready", when the
 * communicator reports a peer's failure. The stand-in runtime keeps "not ready" as the last
 * error, as the CUDA runtime does, so a poll that leaves it behind fails here as it would fail
 * the next kernel launch check on a GPU.
 *   init         in progress for a few polls, then ready
 *   all-reduce   the stream not ready for a few polls: HR_OK, and no error left behind
 *   peer dies    the stream never finishes and the communicator reports ncclRemoteError: the
 *                communicator is aborted once, later calls fail without reaching NCCL
 *   deadline     the stream never finishes, no error: HR_ERR_TIMEOUT, aborted
 *   init stuck   a member never arrives: HR_ERR_TIMEOUT, aborted, its stream destroyed
 *   abort in progress  ncclCommAbort returns ncclInProgress and the communicator tears down
 *                over a few polls: the abort returns once it left ncclInProgress, and the
 *                next init on the device goes ahead
 *   abort stuck  the teardown never ends: the abort gives up after its deadline (10 s) and
 *                the device takes no new communicator in this process, refused without
 *                reaching NCCL, naming the device
 */
#include "ring/nccl/nccl_comm.h"
#include "ring/nccl/nccl_lib.h"
#include "tests/check.h"

#include <cuda_runtime_api.h>
#include <string.h>

/* ================================================================ the stand-in CUDA runtime */

static cudaError_t last_error; /* what cudaGetLastError returns (and clears) */
static int not_ready; /* cudaStreamQuery says "not ready" this many more times (-1: ever) */
static int streams;   /* streams created and not destroyed */
static struct CUstream_st *one; /* never dereferenced */

cudaError_t cudaGetDeviceCount(int *count) {
    *count = 1;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
    return device == 0 ? cudaSuccess : (last_error = cudaErrorInvalidDevice);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
    (void)flags;
    *s = (cudaStream_t)&one;
    streams++;
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s) {
    (void)s;
    streams--;
    return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t s) {
    (void)s;
    if (!not_ready) return cudaSuccess;
    if (not_ready > 0) not_ready--;
    return last_error = cudaErrorNotReady; /* the runtime keeps it as the last error */
}

cudaError_t cudaGetLastError(void) {
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

const char *cudaGetErrorString(cudaError_t e) {
    return e == cudaErrorNotReady ? "device not ready" : "stand-in error";
}

/* ================================================================ the stand-in NCCL */

static int busy;       /* ncclCommGetAsyncError says ncclInProgress this many more times */
static int fail_after; /* ... then, after this many more polls, ncclRemoteError (-1: never) */
static int aborts, allreduces, inits;
static int abort_polls; /* the next abort returns ncclInProgress and tears down over this many
                         * polls of ncclCommGetAsyncError (-1: never ends); 0: ncclSuccess */
static int tearing;     /* polls left of the teardown of an abort in progress (-1: ever) */
static int comm_obj;

static ncclResult_t s_version(int *v) {
    *v = NCCL_VERSION_CODE;
    return ncclSuccess;
}
static ncclResult_t s_unique_id(ncclUniqueId *id) {
    memset(id, 7, sizeof *id);
    return ncclSuccess;
}
static ncclResult_t s_init(ncclComm_t *comm, int n, ncclUniqueId id, int rank, ncclConfig_t *cfg) {
    (void)n, (void)id, (void)rank;
    CHECK(cfg && cfg->blocking == 0, "the communicator is not non-blocking");
    inits++;
    *comm = (ncclComm_t)&comm_obj;
    return ncclInProgress;
}
static ncclResult_t s_async(ncclComm_t comm, ncclResult_t *st) {
    (void)comm;
    if (tearing != 0) {
        if (tearing > 0) tearing--;
        *st = ncclInProgress;
    } else if (busy != 0) {
        if (busy > 0) busy--;
        *st = ncclInProgress;
    } else if (fail_after == 0) {
        *st = ncclRemoteError;
    } else {
        if (fail_after > 0) fail_after--;
        *st = ncclSuccess;
    }
    return ncclSuccess;
}
static const char *s_error_string(ncclResult_t r) {
    return r == ncclRemoteError ? "remote process exited or there was a network error" : "other";
}
static const char *s_last_error(ncclComm_t comm) {
    (void)comm;
    return "stand-in";
}
static ncclResult_t s_allreduce(const void *in, void *out, size_t count, ncclDataType_t t,
                                ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    (void)in, (void)out, (void)count, (void)t, (void)op, (void)comm, (void)stream;
    allreduces++;
    return ncclSuccess;
}
static ncclResult_t s_abort(ncclComm_t comm) {
    (void)comm;
    aborts++;
    if (!abort_polls) return ncclSuccess;
    tearing = abort_polls, abort_polls = 0;
    return ncclInProgress;
}
static ncclResult_t s_finalize(ncclComm_t comm) {
    (void)comm;
    return ncclSuccess;
}
static ncclResult_t s_destroy(ncclComm_t comm) {
    (void)comm;
    return ncclSuccess;
}

nccl_lib_fns nccl_lib = {
    .ncclGetVersion = s_version,
    .ncclGetUniqueId = s_unique_id,
    .ncclCommInitRankConfig = s_init,
    .ncclCommGetAsyncError = s_async,
    .ncclGetErrorString = s_error_string,
    .ncclGetLastError = s_last_error,
    .ncclAllReduce = s_allreduce,
    .ncclCommAbort = s_abort,
    .ncclCommFinalize = s_finalize,
    .ncclCommDestroy = s_destroy,
};

hr_status nccl_lib_load(char *err, size_t errlen) {
    (void)err, (void)errlen;
    return HR_OK;
}

/* ================================================================ scenarios */

static hr_status init(nccl_comm *c, double timeout_s) {
    uint8_t id[NCCL_UNIQUE_ID_BYTES];
    char err[HR_ERRLEN] = "";
    CHECK(nccl_get_unique_id(id, err, sizeof err) == HR_OK, "unique id: %s", err);
    hr_status s = nccl_comm_init(c, 0, 2, id, 0, timeout_s, err, sizeof err);
    if (s != HR_OK) printf("init: %s: %s\n", hr_strerror(s), err);
    return s;
}

int main(void) {
    static float buf[16]; /* never read: the stand-in all-reduce only counts */
    nccl_comm c;

    busy = 3, fail_after = -1;
    CHECK(init(&c, 5.0) == HR_OK, "init in progress for 3 polls");
    CHECK(busy == 0, "init returned before the communicator was ready");

    not_ready = 4;
    CHECK(nccl_allreduce(&c, buf, 16, 5.0) == HR_OK, "all-reduce: %s", c.err);
    CHECK(not_ready == 0, "the all-reduce returned before its stream finished");
    cudaError_t left = cudaGetLastError();
    CHECK(left == cudaSuccess,
          "the all-reduce's poll left \"%s\" as the last CUDA error: the next kernel launch "
          "check fails on it",
          cudaGetErrorString(left));

    not_ready = -1, fail_after = 5;
    int before = allreduces;
    CHECK(nccl_allreduce(&c, buf, 16, 30.0) == HR_ERR_NCCL, "a peer's failure is not HR_ERR_NCCL");
    printf("peer dies: %s\n", c.err);
    CHECK(strstr(c.err, "remote process exited") != NULL, "the error does not say why: %s", c.err);
    CHECK(aborts == 1 && c.comm == NULL && c.broken, "not aborted once (aborts %d)", aborts);
    CHECK(nccl_allreduce(&c, buf, 16, 1.0) == HR_ERR_NCCL && allreduces == before + 1,
          "an aborted communicator reached NCCL again");
    nccl_comm_abort(&c);
    nccl_comm_free(&c);
    CHECK(aborts == 1 && streams == 0, "abort twice or a stream left (aborts %d, streams %d)",
          aborts, streams);

    busy = 0, fail_after = -1, not_ready = 0;
    CHECK(init(&c, 5.0) == HR_OK, "second init");
    not_ready = -1;
    CHECK(nccl_allreduce(&c, buf, 16, 0.05) == HR_ERR_TIMEOUT, "a stuck all-reduce is no timeout");
    printf("deadline: %s\n", c.err);
    CHECK(aborts == 2 && c.comm == NULL, "a timed-out all-reduce was not aborted");
    nccl_comm_free(&c);
    not_ready = 0;
    (void)cudaGetLastError();

    busy = -1;
    CHECK(init(&c, 0.05) == HR_ERR_TIMEOUT, "an init no member completes is no timeout");
    CHECK(aborts == 3 && streams == 0,
          "a stuck init left its communicator (aborts %d) or stream (%d)", aborts, streams);

    busy = 0;
    CHECK(init(&c, 5.0) == HR_OK, "init before an abort in progress");
    abort_polls = 4;
    nccl_comm_abort(&c);
    CHECK(tearing == 0,
          "the abort returned while NCCL was still tearing the communicator down (%d polls "
          "left): a later init on the device races it",
          tearing);
    nccl_comm_free(&c);
    CHECK(streams == 0, "an aborted communicator's stream was left (%d)", streams);
    int before_inits = inits;
    CHECK(init(&c, 5.0) == HR_OK && inits == before_inits + 1,
          "no init after an abort whose teardown ended");
    nccl_comm_abort(&c);
    nccl_comm_free(&c);

    CHECK(init(&c, 5.0) == HR_OK, "init before a stuck abort");
    abort_polls = -1;
    nccl_comm_abort(&c); /* gives up after its deadline */
    nccl_comm_free(&c);
    CHECK(tearing == -1 && streams == 0, "a stuck teardown: tearing %d, streams %d", tearing,
          streams);
    tearing = 0;
    before_inits = inits;
    uint8_t id[NCCL_UNIQUE_ID_BYTES] = {0};
    char err[HR_ERRLEN] = "";
    hr_status s = nccl_comm_init(&c, 0, 2, id, 0, 5.0, err, sizeof err);
    printf("abort stuck: %s\n", err);
    CHECK(s == HR_ERR_NCCL && inits == before_inits && strstr(err, "cuda:0") != NULL,
          "an init on a device whose abort never ended: %s, %d init(s) reached NCCL: %s",
          hr_strerror(s), inits - before_inits, err);
    nccl_comm_free(&c);
    return check_exit();
}
