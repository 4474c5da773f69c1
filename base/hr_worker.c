/* hr_worker.c: see hr_worker.h. */
#include "base/hr_worker.h"

static void destroy(hr_worker *w) {
    pthread_cond_destroy(&w->done);
    pthread_cond_destroy(&w->wake);
    pthread_mutex_destroy(&w->mu);
}

hr_status hr_worker_start(hr_worker *w, void *(*fn)(void *), void *arg) {
    w->quit = 0;
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
    if (pthread_create(&w->thread, NULL, fn, arg) != 0) {
        destroy(w);
        return HR_ERR_IO;
    }
    return HR_OK;
}

void hr_worker_stop(hr_worker *w) {
    pthread_mutex_lock(&w->mu);
    w->quit = 1;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    destroy(w);
}
