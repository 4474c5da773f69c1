/*
 * overlap.h: gradient buckets all-reduced on a communication thread while backward runs.
 *
 * Backward finishes the gradient buffer from its end towards its start (model.h). A plan
 * cuts the buffer at layer boundaries into buckets of at least bucket_bytes, taken in that
 * order; as soon as backward has finished a bucket, the training loop hands it to the
 * worker, whose thread all-reduces it while the main thread computes the next layers.
 *
 * Invariants:
 *  - the plan depends only on the model and bucket_bytes, so every node cuts the same
 *    buckets and submits them in the same order (a differing config fails in the ring's
 *    frame checks, it never mixes buckets);
 *  - a bucket's floats belong to the worker from overlap_submit until overlap_wait returns;
 *    backward writes only lower offsets meanwhile;
 *  - after the first failed all-reduce the worker skips the remaining jobs of the round and
 *    overlap_wait returns that failure, so the communicator is idle whenever the caller
 *    holds the result.
 */
#ifndef HR_OVERLAP_H
#define HR_OVERLAP_H

#include "hr_status.h"
#include "model.h"

#include <pthread.h>
#include <stddef.h>

#define OVERLAP_MAX_JOBS (MODEL_MAX_LAYERS + 1) /* at most one bucket per layer */

/* A SUM all-reduce of n floats in place (train_comm's signature). */
typedef hr_status (*overlap_allreduce)(void *ctx, float *buf, size_t n);

typedef struct {
    overlap_allreduce allreduce;  /* the communicator, used by the thread only */
    void *ctx;                    /* its context */
    pthread_t thread;             /* the worker thread */
    pthread_mutex_t mu;           /* guards every field below */
    pthread_cond_t wake;          /* a job was submitted, or quit was set */
    pthread_cond_t done;          /* a job finished */
    float *buf[OVERLAP_MAX_JOBS]; /* jobs of this round, in submission order */
    size_t n[OVERLAP_MAX_JOBS];   /* floats per job */
    int submitted;                /* jobs submitted this round */
    int finished;                 /* jobs finished (or skipped) this round */
    int quit;                     /* the thread should exit */
    int running;                  /* the thread was started */
    hr_status st;                 /* first failure of the round, or HR_OK */
} overlap_worker;

/* Cut grads[0, m->n_params) into buckets of at least bucket_bytes at layer boundaries:
 * cuts[0] = n_params > cuts[1] > ... > cuts[nb] = 0, bucket j = [cuts[j+1], cuts[j]).
 * cuts needs MODEL_MAX_LAYERS + 1 entries. Returns nb (0 for a model without parameters). */
int overlap_plan(const model *m, long bucket_bytes, long *cuts);

/* Start the worker thread. HR_ERR_NOMEM / HR_ERR_IO when the thread cannot be created. */
hr_status overlap_start(overlap_worker *w, overlap_allreduce allreduce, void *ctx);

/* Queue an all-reduce of buf[0, n). At most OVERLAP_MAX_JOBS per round. */
void overlap_submit(overlap_worker *w, float *buf, size_t n);

/* Wait until every job of the round has finished; returns the round's first failure and
 * starts a new round. */
hr_status overlap_wait(overlap_worker *w);

/* Stop and join the thread (waiting for the current round first). Safe on a worker that
 * was never started or was zeroed. */
void overlap_stop(overlap_worker *w);

#endif
