/*
 * nccl_path.h: NCCL among the GPU members of a view (DESIGN.md, "The GPU path"), behind a small
 * table of operations with two implementations:
 *
 *   real  ring/nccl/nccl_comm.c (builds with CUDA only; nccl_path_real)
 *   fake  a recording fake for tests (cluster/nccl_fake.c, linked only with the test hooks,
 *         hr_fault_fake_nccl): its all-reduce all-reduces the (emulated device's, host-memory)
 *         buffer over the view's TCP ring, so this code path runs on machines without a GPU,
 *         and it logs one line per event (id, init, abort) for the tests to check.
 *
 * Per view (nccl_path_view, once the TCP ring agreed on the view and the state): the choice
 * (transport.h) from the INI and, when the INI allows NCCL, the members' own facts,
 * all-gathered; with NCCL, every member all-gathers whether it can make a communicator at all
 * (ready: a device refused after a failed teardown cannot), and when one cannot, the view goes
 * over TCP before anyone enters NCCL's init and rank 0 logs once which node and why; else the
 * lowest member (rank 0) makes a unique id and broadcasts it over
 * the authenticated TCP ring, every member initialises its communicator (rank = ring position,
 * with the deadline connect_timeout) and the results are all-gathered, waiting as long as an
 * init may wait for a member that never arrives: when any member failed, every member falls back
 * to TCP for this view, and rank 0 logs once which node failed and why.
 * Invariants: every member takes the same decision (it is made from all-gathered facts); a
 * communicator never outlives its view (nccl_path_abort runs before every election); an
 * all-reduce error or timeout fails the TCP ring too (ring_fail_view), so it enters the same
 * election path as a TCP failure and the iteration runs again in a new view.
 */
#ifndef HR_NCCL_PATH_H
#define HR_NCCL_PATH_H

#include "base/hr_status.h"
#include "cluster/cluster_setup.h"
#include "ring/ring.h"

#include <stddef.h>
#include <stdint.h>

#define NCCL_PATH_ID_BYTES 128 /* an ncclUniqueId */

/* What a member's init gets. */
typedef struct {
    int rank, n;       /* ring position and view size */
    const uint8_t *id; /* (NCCL_PATH_ID_BYTES) the view's unique id */
    int device;        /* cuda:N's N */
    double timeout_s;  /* every member must arrive within this */
    uint64_t epoch;    /* the view's epoch (logs; the fake's faults) */
    long node_id;      /* this node (logs; the fake's faults) */
    ring *r;           /* the view's TCP ring (the fake all-reduces over it) */
} nccl_path_args;

/* The operations. Every call returns HR_OK or a status with a message in err. */
typedef struct {
    const char *name; /* "nccl", "fake" */
    /* Whether this process can run the implementation: the real one opens libnccl.so.2 and
     * checks its version (nccl_lib_load); HR_ERR_UNSUPPORTED naming the library otherwise. */
    hr_status (*load)(char *err, size_t errlen);
    hr_status (*unique_id)(uint8_t id[NCCL_PATH_ID_BYTES], long node_id, uint64_t epoch, char *err,
                           size_t errlen);
    /* Whether this member can make a communicator on `device` now, asked before every view's
     * init: the real one refuses a device without CUDA or one whose earlier teardown failed
     * (nccl_comm_usable); an init there would fail at once while the others wait in theirs.
     * node_id and epoch: the fake's faults. */
    hr_status (*ready)(int device, long node_id, uint64_t epoch, char *err, size_t errlen);
    hr_status (*init)(void **comm, const nccl_path_args *a, char *err, size_t errlen);
    /* In-place SUM of count floats of device memory; iter is the iteration (logs, the fake's
     * fault). On failure the communicator is broken: abort it. */
    hr_status (*allreduce)(void *comm, float *dev_buf, size_t count, double timeout_s, long iter,
                           char *err, size_t errlen);
    void (*abort)(void *comm); /* tear down at once and free; safe on NULL */
} nccl_path_ops;

/* The real implementation, or NULL in a build without NCCL. */
const nccl_path_ops *nccl_path_real(void);

/* One node's NCCL path across views. */
typedef struct {
    const nccl_path_ops *ops; /* the implementation; NULL: this node cannot run NCCL */
    void *comm;               /* the current view's communicator, or NULL */
    uint64_t epoch;           /* the view comm belongs to */
    int on;                   /* the current view all-reduces the gradient over NCCL */
    int device;               /* cuda:N's N */
    int device_grads;         /* this node's gradients stay on its device (the library's user
                               * gives a device pointer) */
    int told;                 /* the transport last logged (rank 0), -1: none */
} nccl_path;

void nccl_path_init(nccl_path *p, const nccl_path_ops *ops, int cuda_index);

/* Before an election: the communicator is aborted (the old view's collective may be stuck on
 * a dead peer) and the view runs over TCP until nccl_path_view says otherwise. r: the ring as
 * it is (the fake logs its view). */
void nccl_path_abort(nccl_path *p, const ring *r);

/* A view formed (r) and its state agreed: choose the transport and, for NCCL, set up the
 * communicator as the top of this file says. A ring status when a collective of the set-up
 * failed (the caller elects again); a failed NCCL init is no error (TCP for this view). */
hr_status nccl_path_view(nccl_path *p, ring *r, const cluster_config *cc, char *err,
                         size_t errlen);

/* The iteration's gradient (count floats of device memory) over NCCL. A failure aborts the
 * communicator and fails the ring (ring_fail_view), returning the ring's status. */
hr_status nccl_path_allreduce(nccl_path *p, ring *r, float *dev_buf, size_t count, long iter);

void nccl_path_free(nccl_path *p);

#endif
