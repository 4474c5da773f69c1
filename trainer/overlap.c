/*
 * overlap.c: the bucket plan and the communication thread (see overlap.h).
 */
#include "overlap.h"

#include <string.h>

int overlap_plan(const model *m, long bucket_bytes, long *cuts) {
    if (m->n_params == 0) return 0;
    int nb = 0;
    long acc = 0;
    cuts[0] = m->n_params;
    /* layer 0's parameters start at offset 0, which the last cut below covers */
    for (int i = m->n_layers - 1; i > 0; i--) {
        const model_layer *L = &m->layers[i];
        if (!L->n_params) continue;
        acc += L->n_params * (long)sizeof(float);
        if (acc >= bucket_bytes && L->w_off > 0) {
            cuts[++nb] = L->w_off;
            acc = 0;
        }
    }
    if (cuts[nb] != 0) cuts[++nb] = 0;
    return nb;
}

static void *worker_main(void *arg) {
    overlap_worker *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->quit && w->finished == w->submitted) pthread_cond_wait(&w->wake, &w->mu);
        if (w->finished == w->submitted) break; /* quit, and nothing left to do */
        int j = w->finished;
        float *buf = w->buf[j];
        size_t n = w->n[j];
        hr_status st = w->st;
        pthread_mutex_unlock(&w->mu);
        /* after a failure the rest of the round is skipped: the peers have failed too, or
         * will by their deadlines */
        if (st == HR_OK) st = w->allreduce(w->ctx, buf, n);
        pthread_mutex_lock(&w->mu);
        if (w->st == HR_OK) w->st = st;
        w->finished++;
        pthread_cond_broadcast(&w->done);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

hr_status overlap_start(overlap_worker *w, overlap_allreduce allreduce, void *ctx) {
    memset(w, 0, sizeof *w);
    w->allreduce = allreduce, w->ctx = ctx;
    if (pthread_mutex_init(&w->mu, NULL) != 0) return HR_ERR_NOMEM;
    if (pthread_cond_init(&w->wake, NULL) != 0) {
        pthread_mutex_destroy(&w->mu);
        return HR_ERR_NOMEM;
    }
    if (pthread_cond_init(&w->done, NULL) != 0) {
        pthread_cond_destroy(&w->wake);
        pthread_mutex_destroy(&w->mu);
        return HR_ERR_NOMEM;
    }
    if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
        pthread_cond_destroy(&w->done);
        pthread_cond_destroy(&w->wake);
        pthread_mutex_destroy(&w->mu);
        return HR_ERR_IO;
    }
    w->running = 1;
    return HR_OK;
}

void overlap_submit(overlap_worker *w, float *buf, size_t n) {
    pthread_mutex_lock(&w->mu);
    if (w->submitted < OVERLAP_MAX_JOBS) {
        w->buf[w->submitted] = buf;
        w->n[w->submitted] = n;
        w->submitted++;
    } else if (w->st == HR_OK) {
        w->st = HR_ERR_INVAL; /* a plan larger than the job table: a bug, reported at wait */
    }
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->mu);
}

hr_status overlap_wait(overlap_worker *w) {
    pthread_mutex_lock(&w->mu);
    while (w->finished < w->submitted) pthread_cond_wait(&w->done, &w->mu);
    hr_status st = w->st;
    w->submitted = w->finished = 0;
    w->st = HR_OK;
    pthread_mutex_unlock(&w->mu);
    return st;
}

void overlap_stop(overlap_worker *w) {
    if (!w || !w->running) return;
    pthread_mutex_lock(&w->mu);
    w->quit = 1;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->done);
    pthread_cond_destroy(&w->wake);
    pthread_mutex_destroy(&w->mu);
    w->running = 0;
}
