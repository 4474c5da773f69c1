/*
 * nccl_real.c: the real NCCL operations of nccl_path.h over ring/nccl/nccl_comm.c. Compiled
 * only in builds with CUDA and NCCL (HR_HAVE_CUDA); elsewhere nccl_path_real is NULL.
 */
#include "cluster/nccl_path.h"

#ifdef HR_HAVE_CUDA
#include "ring/nccl/nccl_comm.h"

#include <stdlib.h>

_Static_assert(NCCL_PATH_ID_BYTES == NCCL_UNIQUE_ID_BYTES, "a unique id is 128 bytes");

static hr_status real_unique_id(uint8_t id[NCCL_PATH_ID_BYTES], long node_id, uint64_t epoch,
                                char *err, size_t errlen) {
    (void)node_id, (void)epoch;
    return nccl_get_unique_id(id, err, errlen);
}

static hr_status real_ready(int cuda, long node_id, uint64_t epoch, char *err, size_t errlen) {
    (void)node_id, (void)epoch;
    return nccl_comm_usable(cuda, err, errlen);
}

static hr_status real_init(void **comm, const nccl_path_args *a, char *err, size_t errlen) {
    nccl_comm *c = calloc(1, sizeof *c);
    *comm = NULL;
    if (!c) return hr_fail(err, errlen, HR_ERR_NOMEM, "nccl: out of memory");
    hr_status st = nccl_comm_init(c, a->rank, a->n, a->id, a->device, a->timeout_s, err, errlen);
    if (st != HR_OK) {
        free(c); /* nccl_comm_init freed what it made */
        return st;
    }
    *comm = c;
    return HR_OK;
}

static hr_status real_allreduce(void *comm, float *buf, size_t count, double timeout_s, long iter,
                                char *err, size_t errlen) {
    nccl_comm *c = comm;
    (void)iter;
    hr_status st = nccl_allreduce(c, buf, count, timeout_s);
    if (st != HR_OK) hr_fail(err, errlen, st, "%s", c->err);
    return st;
}

static void real_abort(void *comm) {
    nccl_comm *c = comm;
    if (!c) return;
    nccl_comm_abort(c);
    nccl_comm_free(c);
    free(c);
}

static const nccl_path_ops real_ops = {"nccl",    nccl_lib_load,  real_unique_id, real_ready,
                                       real_init, real_allreduce, real_abort};

const nccl_path_ops *nccl_path_real(void) {
    return &real_ops;
}
#else
const nccl_path_ops *nccl_path_real(void) {
    return NULL;
}
#endif
