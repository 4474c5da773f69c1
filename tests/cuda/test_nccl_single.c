/*
 * test_nccl_single.c: the NCCL backend with one rank (a single GPU cannot host two ranks; the
 * multi-rank path shares this interface with the TCP backend, which is tested there): init
 * through the non-blocking path, an in-place SUM all-reduce that must return its input bit
 * for bit, an empty all-reduce, and abort/free on a live, an aborted and a zeroed
 * communicator (the free's destroy and the abort, each on a thread of its own, end within their
 * deadline and leave the device open to the next init). Exits 77 without a CUDA device.
 */
#include "ring/nccl/nccl_comm.h"
#include "tests/check.h"
#include "tests/cuda/cuda_test_util.h"

int main(void) {
    nccl_comm z;
    memset(&z, 0, sizeof z);
    nccl_comm_free(&z); /* safe without a device */
    CUDA_SKIP_IF_NO_DEVICE();
    CHECK(nccl_available() == 1, "nccl_available() is 0 on a machine with a device");
    char err[HR_ERRLEN];
    uint8_t id[NCCL_UNIQUE_ID_BYTES];
    HR_DIE(nccl_get_unique_id(id, err, sizeof err));
    nccl_comm c;
    hr_status s = nccl_comm_init(&c, 0, 1, id, 0, 60.0, err, sizeof err);
    CHECK(s == HR_OK, "nccl_comm_init: %s", err);
    if (s != HR_OK) return check_exit();

    const size_t n = (1u << 20) + 3;
    float *h = xmalloc(sizeof(float) * n), *r = xmalloc(sizeof(float) * n);
    fill_uniform(h, (long)n, 11, 1, 3.0f);
    float *d = dev_copy(h, sizeof(float) * n);
    s = nccl_allreduce(&c, d, n, 30.0);
    CHECK(s == HR_OK, "nccl_allreduce: %s (%s)", hr_strerror(s), c.err);
    to_host(r, d, sizeof(float) * n);
    CHECK_CLOSE(r, h, (long)n, 0.0, "nccl all-reduce, 1 rank");
    CHECK(nccl_allreduce(&c, d, 0, 1.0) == HR_OK, "empty all-reduce");
    for (int i = 0; i < 20; i++) CHECK(nccl_allreduce(&c, d, 17, 5.0) == HR_OK, "small #%d", i);
    cudaError_t left = cudaGetLastError(); /* what the next kernel launch check would read */
    CHECK(left == cudaSuccess, "the all-reduces' polls left \"%s\" as the last CUDA error",
          cudaGetErrorString(left));
    nccl_comm_free(&c);
    CHECK(!c.broken, "the orderly free's ncclCommDestroy failed or outlived its deadline (logged)");

    /* abort: later calls fail cleanly, free stays safe */
    HR_DIE(nccl_get_unique_id(id, err, sizeof err));
    s = nccl_comm_init(&c, 0, 1, id, 0, 60.0, err, sizeof err);
    CHECK(s == HR_OK, "second nccl_comm_init: %s", err);
    nccl_comm_abort(&c);
    nccl_comm_abort(&c);
    CHECK(nccl_allreduce(&c, d, n, 1.0) == HR_ERR_NCCL, "all-reduce on an aborted communicator");
    nccl_comm_free(&c);
    HR_DIE(nccl_get_unique_id(id, err, sizeof err));
    s = nccl_comm_init(&c, 0, 1, id, 0, 60.0, err, sizeof err);
    CHECK(s == HR_OK, "init after an abort (the device should stay open): %s", err);
    nccl_comm_free(&c);

    /* bad arguments never reach NCCL */
    CHECK(nccl_comm_init(&c, 1, 1, id, 0, 1.0, err, sizeof err) == HR_ERR_INVAL, "rank >= n");
    nccl_comm_free(&c);
    CHECK(nccl_comm_init(&c, 0, 1, id, 1 << 20, 1.0, err, sizeof err) == HR_ERR_UNSUPPORTED,
          "missing device");
    nccl_comm_free(&c);

    cudaFree(d);
    free(h), free(r);
    return check_exit();
}
