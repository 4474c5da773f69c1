/*
 * nccl_comm.h: the NCCL collective backend: a SUM all-reduce of float device buffers.
 *
 * Used when every member of the view has a GPU. The TCP ring stays up as the control plane:
 * the lowest-id member calls nccl_get_unique_id and sends the 128 bytes over the
 * authenticated TCP ring, then every member calls nccl_comm_init with its ring position as
 * rank. After a view change the caller frees (or aborts) the communicator and builds a new
 * one only once the TCP control plane has agreed on the new view.
 *
 * Nothing here blocks without a deadline: the communicator is non-blocking
 * (config.blocking = 0), init and all-reduce poll ncclCommGetAsyncError and cudaStreamQuery
 * until done or until the deadline passes, and the abort and destroy, which NCCL runs blocking,
 * run on a thread of their own that is waited for with a deadline. On any error or timeout the
 * communicator is torn down with ncclCommAbort (so a dead peer cannot leave a kernel spinning
 * on the device) and later calls return HR_ERR_NCCL until nccl_comm_free and a new init.
 */
#ifndef HR_NCCL_COMM_H
#define HR_NCCL_COMM_H

#include "base/hr_status.h"

#include <stddef.h>
#include <stdint.h>

#define NCCL_UNIQUE_ID_BYTES 128

typedef struct {
    void *comm;          /* ncclComm_t; NULL before init and after abort or free */
    void *stream;        /* cudaStream_t the all-reduces run on */
    int rank, n;         /* position in the view and its size */
    int device;          /* CUDA ordinal */
    int broken;          /* an error or deadline aborted the communicator */
    char err[HR_ERRLEN]; /* what went wrong last, for the caller's message */
} nccl_comm;

/* 1 when this process can run NCCL: the library loads (nccl_lib_load) and a CUDA device is
 * present. */
int nccl_available(void);

/* Open libnccl.so.2 (nccl_lib.c, base/hr_dl.h), check its version and bind the functions
 * this backend calls, once per process; later calls return the first answer. The first
 * unique id, init or nccl_available of a process calls it. HR_ERR_UNSUPPORTED with the
 * library and what dlopen or the check said in err. */
hr_status nccl_lib_load(char *err, size_t errlen);
/* "  NCCL: NCCL 2.28.9 (/path)" or "  NCCL: cannot be used: why", the library opened, asked
 * its version and closed again: nothing stays loaded. */
void nccl_lib_describe(char *out, size_t len);

/* A fresh ncclUniqueId as bytes (on the lowest-id member only). */
hr_status nccl_get_unique_id(uint8_t out[NCCL_UNIQUE_ID_BYTES], char *err, size_t errlen);

/* Whether this process can make a communicator on `device` now: HR_ERR_UNSUPPORTED when the
 * machine has no such CUDA device, HR_ERR_NCCL when an earlier teardown there failed or outlived
 * its deadline (the device is refused for the rest of the process); err says which. What
 * nccl_comm_init checks first: a caller asks before a collective init in which the other
 * members would wait for this one until their deadline. */
hr_status nccl_comm_usable(int device, char *err, size_t errlen);

/* Join the n-member communicator named by unique_id as `rank` on `device`, waiting at most
 * timeout_s for every member to arrive. HR_ERR_TIMEOUT (the communicator is aborted) when a
 * member does not show up in time, HR_ERR_NCCL or HR_ERR_CUDA for other failures. */
hr_status nccl_comm_init(nccl_comm *c, int rank, int n,
                         const uint8_t unique_id[NCCL_UNIQUE_ID_BYTES], int device,
                         double timeout_s, char *err, size_t errlen);

/* In-place SUM all-reduce of count floats at dev_buf (device memory on c->device). Returns
 * once the result is in dev_buf. Work queued on other streams that produced dev_buf must be
 * complete (or ordered before) when this is called. HR_ERR_TIMEOUT after timeout_s, or
 * HR_ERR_NCCL/HR_ERR_CUDA; either way the communicator has been aborted (c->err says why). */
hr_status nccl_allreduce(nccl_comm *c, float *dev_buf, size_t count, double timeout_s);

/* Tear down with ncclCommAbort, abandoning in-flight work (a peer died or the view changed).
 * The abort runs on a thread of its own and is waited for 10 s at most (when it returns
 * ncclInProgress, until the communicator leaves that state). An abort that failed, or is still
 * going then and is left to NCCL, is logged naming rank and device, and nccl_comm_init refuses
 * that device for the rest of the process (HR_ERR_NCCL), rather than race what is left of it.
 * Safe to call twice. */
void nccl_comm_abort(nccl_comm *c);

/* Orderly release: finalize (bounded by a short deadline, abort if it runs out), destroy (on a
 * thread of its own, 10 s at most, as the abort: one that fails or outlives that is logged, the
 * device refused and c->broken set), free the stream. Safe on a zeroed, partly initialised or
 * aborted struct. */
void nccl_comm_free(nccl_comm *c);

#endif
