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
 *   abort blocks ncclCommAbort itself does not return (NCCL runs it blocking): the abort gives
 *                up after its deadline while the call is still blocked, logs it naming rank
 *                and device, and the device is refused; the call, released later, ends on its
 *                own thread
 *   abort fails  ncclCommAbort returns an error: logged, the device refused
 *   destroy fails / blocks  the same for the ncclCommDestroy of an orderly nccl_comm_free, which
 *                also marks the struct broken
 * Each device these refuse is its own (cuda:1 to cuda:4), so the others take new communicators.
 */
#include "ring/nccl/nccl_comm.h"
#include "ring/nccl/nccl_lib.h"
#include "tests/check.h"

#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ================================================================ the stand-in CUDA runtime */

static cudaError_t last_error; /* what cudaGetLastError returns (and clears) */
static int not_ready; /* cudaStreamQuery says "not ready" this many more times (-1: ever) */
static int streams;   /* streams created and not destroyed */
static struct CUstream_st *one; /* never dereferenced */

#define NDEV 5 /* cuda:0 to cuda:4 */

cudaError_t cudaGetDeviceCount(int *count) {
    *count = NDEV;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
    return device >= 0 && device < NDEV ? cudaSuccess : (last_error = cudaErrorInvalidDevice);
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
static int tearing;     /* polls left of the teardown of an abort in progress (-1: ever); an
                         * atomic: a teardown the caller gave up on may still poll it */
static int comm_obj;

/* How the next ncclCommAbort or ncclCommDestroy ends: returns ncclSuccess (or, for an abort,
 * ncclInProgress when abort_polls says so), returns an error, or blocks until released (or
 * BLOCK_CAP_S passed, so that a teardown without a deadline fails this test instead of hanging
 * it). The teardown calls run on a thread of nccl_comm.c's own: these are atomics. */
enum { END_OK, END_FAIL, END_BLOCK };
#define BLOCK_CAP_S 30
static int abort_end, destroy_end; /* END_*, for the next call only */
static int destroys;
static int blocked;  /* a teardown call is blocked in the stand-in now */
static int released; /* let a blocked teardown call return */
static int returned; /* blocked teardown calls that returned */

static ncclResult_t teardown_end(int *end) {
    int e = __atomic_exchange_n(end, END_OK, __ATOMIC_ACQ_REL);
    if (e == END_FAIL) return ncclSystemError;
    if (e != END_BLOCK) return ncclSuccess;
    __atomic_store_n(&blocked, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < BLOCK_CAP_S * 100 && !__atomic_load_n(&released, __ATOMIC_ACQUIRE); i++) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    __atomic_store_n(&blocked, 0, __ATOMIC_RELEASE);
    __atomic_fetch_add(&returned, 1, __ATOMIC_ACQ_REL);
    return ncclSuccess;
}

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
    int left = __atomic_load_n(&tearing, __ATOMIC_ACQUIRE);
    if (left != 0) {
        if (left > 0) __atomic_store_n(&tearing, left - 1, __ATOMIC_RELEASE);
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
    if (__atomic_load_n(&abort_end, __ATOMIC_ACQUIRE) != END_OK) return teardown_end(&abort_end);
    if (!abort_polls) return ncclSuccess;
    __atomic_store_n(&tearing, abort_polls, __ATOMIC_RELEASE), abort_polls = 0;
    return ncclInProgress;
}
static ncclResult_t s_finalize(ncclComm_t comm) {
    (void)comm;
    return ncclSuccess;
}
static ncclResult_t s_destroy(ncclComm_t comm) {
    (void)comm;
    __atomic_fetch_add(&destroys, 1, __ATOMIC_ACQ_REL);
    return teardown_end(&destroy_end);
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

static hr_status init_on(nccl_comm *c, int device, double timeout_s, char *err, size_t errlen) {
    uint8_t id[NCCL_UNIQUE_ID_BYTES];
    CHECK(nccl_get_unique_id(id, err, errlen) == HR_OK, "unique id: %s", err);
    hr_status s = nccl_comm_init(c, 0, 2, id, device, timeout_s, err, errlen);
    if (s != HR_OK) printf("init on cuda:%d: %s: %s\n", device, hr_strerror(s), err);
    return s;
}

static hr_status init(nccl_comm *c, double timeout_s) {
    char err[HR_ERRLEN] = "";
    return init_on(c, 0, timeout_s, err, sizeof err);
}

/* ---------------------------------------------------------------- the log, captured */

static int saved_stderr = -1;
static FILE *captured;

/* The log lines (stderr) from here to log_end go to a file. */
static void log_begin(void) {
    fflush(stderr);
    captured = tmpfile();
    saved_stderr = dup(STDERR_FILENO);
    if (!captured || saved_stderr < 0 || dup2(fileno(captured), STDERR_FILENO) < 0) {
        perror("capturing the log");
        exit(1);
    }
}

/* What was logged since log_begin, into out, and echoed to stdout. */
static void log_end(char *out, size_t len) {
    fflush(stderr);
    dup2(saved_stderr, STDERR_FILENO);
    close(saved_stderr);
    rewind(captured);
    size_t k = fread(out, 1, len - 1, captured);
    out[k] = 0;
    fclose(captured);
    printf("logged: %s", out);
}

/* A communicator on `device` whose teardown ends as scripted (abort_end or destroy_end): the
 * call returns, the log names the rank, the device, the call and `why`, and a new init on the
 * device is refused without reaching NCCL, naming it, and nccl_comm_usable says so beforehand. */
static void teardown_refuses(int device, int destroy, int end, const char *why) {
    nccl_comm c;
    char err[HR_ERRLEN] = "", log[4096];
    const char *call = destroy ? "ncclCommDestroy" : "ncclCommAbort";
    CHECK(init_on(&c, device, 5.0, err, sizeof err) == HR_OK, "init on cuda:%d: %s", device, err);
    CHECK(nccl_comm_usable(device, err, sizeof err) == HR_OK, "cuda:%d unusable before: %s", device,
          err);
    __atomic_store_n(destroy ? &destroy_end : &abort_end, end, __ATOMIC_RELEASE);
    log_begin();
    if (destroy)
        nccl_comm_free(&c);
    else
        nccl_comm_abort(&c);
    const int still = __atomic_load_n(&blocked, __ATOMIC_ACQUIRE);
    log_end(log, sizeof log);
    CHECK(end != END_BLOCK || still,
          "%s on cuda:%d returned only once the blocked call did: the teardown has no deadline",
          call, device);
    CHECK(c.comm == NULL && c.broken, "%s on cuda:%d: comm %p, broken %d", call, device, c.comm,
          c.broken);
    char where[64];
    snprintf(where, sizeof where, "rank 0 on cuda:%d: %s", device, call);
    CHECK(strstr(log, where) && strstr(log, why),
          "%s on cuda:%d: the log does not say \"%s\" and \"%s\"", call, device, where, why);
    nccl_comm_free(&c);
    CHECK(streams == 0, "a stream left after %s on cuda:%d (%d)", call, device, streams);
    int before = inits;
    hr_status s = init_on(&c, device, 5.0, err, sizeof err);
    char dev[16];
    snprintf(dev, sizeof dev, "cuda:%d", device);
    CHECK(s == HR_ERR_NCCL && inits == before && strstr(err, dev),
          "cuda:%d after %s %s: %s, %d init(s) reached NCCL: %s", device, call, why, hr_strerror(s),
          inits - before, err);
    CHECK(nccl_comm_usable(device, err, sizeof err) == HR_ERR_NCCL && strstr(err, dev),
          "cuda:%d after %s %s: asked before an init, it is not refused: %s", device, call, why,
          err);
    nccl_comm_free(&c);
    if (end == END_BLOCK && still) { /* let the call end on its thread; it frees what it held */
        int was = __atomic_load_n(&returned, __ATOMIC_ACQUIRE);
        __atomic_store_n(&released, 1, __ATOMIC_RELEASE);
        for (int i = 0; i < 6000 && __atomic_load_n(&returned, __ATOMIC_ACQUIRE) == was; i++)
            usleep(10000);
        __atomic_store_n(&released, 0, __ATOMIC_RELEASE);
    }
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
    int polls_left = __atomic_load_n(&tearing, __ATOMIC_ACQUIRE);
    CHECK(polls_left == -1 && streams == 0, "a stuck teardown: tearing %d, streams %d", polls_left,
          streams);
    __atomic_store_n(&tearing, 0, __ATOMIC_RELEASE);
    before_inits = inits;
    uint8_t id[NCCL_UNIQUE_ID_BYTES] = {0};
    char err[HR_ERRLEN] = "";
    hr_status s = nccl_comm_init(&c, 0, 2, id, 0, 5.0, err, sizeof err);
    printf("abort stuck: %s\n", err);
    CHECK(s == HR_ERR_NCCL && inits == before_inits && strstr(err, "cuda:0") != NULL,
          "an init on a device whose abort never ended: %s, %d init(s) reached NCCL: %s",
          hr_strerror(s), inits - before_inits, err);
    nccl_comm_free(&c);

    teardown_refuses(1, 0, END_BLOCK, "had not returned after 10 s");
    teardown_refuses(2, 0, END_FAIL, "failed: ");
    int d = __atomic_load_n(&destroys, __ATOMIC_ACQUIRE);
    teardown_refuses(3, 1, END_FAIL, "failed: ");
    teardown_refuses(4, 1, END_BLOCK, "had not returned after 10 s");
    CHECK(__atomic_load_n(&destroys, __ATOMIC_ACQUIRE) == d + 2, "the destroys did not reach NCCL");
    return check_exit();
}
