/*
 * hr_worker.h: the life of one worker thread that serves a queue its owner keeps: the lock and
 * the two conditions the owner and the thread share, the quit flag, the start and the
 * stop-and-join. Whether the thread runs is the owner's to keep. The queue and the loop of the
 * thread stay with the owner (cluster/overlap.c's buckets, trainer/device_emu.c's emulated device);
 * the thread exits once quit is set and its queue is empty, which the owner's loop checks under mu.
 */
#ifndef HR_WORKER_H
#define HR_WORKER_H

#include "base/hr_status.h"

#include <pthread.h>

typedef struct {
    pthread_t thread;    /* the worker thread */
    pthread_mutex_t mu;  /* guards quit and the owner's queue */
    pthread_cond_t wake; /* work was queued, or quit was set */
    pthread_cond_t done; /* a job finished */
    int quit;            /* the thread should exit once its queue is empty */
} hr_worker;

/* Make w's lock and conditions and run fn(arg) on a new thread. HR_ERR_NOMEM when the lock or a
 * condition cannot be made, HR_ERR_IO when the thread cannot be created; nothing is left to free
 * then. w need not be zeroed; its quit starts at 0. */
hr_status hr_worker_start(hr_worker *w, void *(*fn)(void *), void *arg);

/* Set quit, wake the thread, join it (it finishes its queue first) and free the lock and the
 * conditions. Only on a worker that hr_worker_start started: its owner keeps whether it runs. */
void hr_worker_stop(hr_worker *w);

#endif
