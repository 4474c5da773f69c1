/*
 * overlap.c: the bucket plan, the choice of bucket_bytes = auto and the communication thread
 * (see overlap.h).
 */
#include "cluster/overlap.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ================================================================ choosing */

/* The cgroup v2 CPU quota in whole cores, rounded up, or 0 when there is none ("max") or no
 * cgroup v2 file to read (a container sees its own cgroup at the root). */
static long quota_cores(void) {
    FILE *f = fopen("/sys/fs/cgroup/cpu.max", "r");
    if (!f) return 0;
    char quota[32] = "";
    long period = 0;
    int got = fscanf(f, "%31s %ld", quota, &period);
    fclose(f);
    long q;
    char *end;
    if (got != 2 || period <= 0 || strcmp(quota, "max") == 0) return 0;
    q = strtol(quota, &end, 10);
    if (*end || q <= 0) return 0;
    return (q + period - 1) / period;
}

long overlap_cores(void) {
    long cores = 0;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) cores = CPU_COUNT(&set);
    if (cores <= 0) cores = sysconf(_SC_NPROCESSORS_ONLN);
    long q = quota_cores();
    if (q > 0 && q < cores) cores = q;
    return cores > 0 ? cores : 1;
}

overlap_fact overlap_fact_of(long id, long cores, const long *threads, int n) {
    overlap_fact f = {id, cores, 0, 0};
    for (int k = 0; k < n; k++) f.demand += (threads[k] > 0 ? threads[k] : cores) + 1;
    return f;
}

int overlap_fact_spare(const overlap_fact *f) {
    return f->cores > 0 && f->cores >= f->demand;
}

void overlap_bytes_str(long bytes, char *out, size_t n) {
    if (bytes >= 1L << 20 && bytes % (1L << 20) == 0)
        snprintf(out, n, "%ld MiB", bytes >> 20);
    else if (bytes >= 1L << 10 && bytes % (1L << 10) == 0)
        snprintf(out, n, "%ld KiB", bytes >> 10);
    else
        snprintf(out, n, "%ld B", bytes);
}

/* auto with a plan of two buckets or more and two nodes or more: a core to spare on each. */
static int choose_auto(const overlap_fact *facts, int n, char *why, size_t whylen) {
    int fewest = 0;
    for (int k = 0; k < n; k++) {
        const overlap_fact *f = &facts[k];
        if (f->at_end) {
            snprintf(why, whylen,
                     "auto: node %ld hands its gradients over only after its compute (its loop "
                     "does not call hetring_ready)",
                     f->id);
            return 0;
        }
        if (!overlap_fact_spare(f)) {
            snprintf(why, whylen, "auto: node %ld has no core to spare, %ld core%s for %ld threads",
                     f->id, f->cores, f->cores == 1 ? "" : "s", f->demand);
            return 0;
        }
        if (f->cores - f->demand < facts[fewest].cores - facts[fewest].demand) fewest = k;
    }
    const overlap_fact *f = &facts[fewest];
    snprintf(why, whylen,
             "auto: every node has a core to spare; fewest: node %ld, %ld core%s for %ld threads",
             f->id, f->cores, f->cores == 1 ? "" : "s", f->demand);
    return 1;
}

int overlap_choose(long bucket_bytes, int n_buckets, const overlap_fact *facts, int n, char *why,
                   size_t whylen) {
    char size[32];
    overlap_bytes_str(bucket_bytes == OVERLAP_AUTO ? OVERLAP_AUTO_BYTES : bucket_bytes, size,
                      sizeof size);
    if (bucket_bytes == 0) return snprintf(why, whylen, "bucket_bytes = 0"), 0;
    if (bucket_bytes != OVERLAP_AUTO) {
        if (n_buckets < 2)
            return snprintf(why, whylen, "bucket_bytes = %ld: the gradients fit one bucket",
                            bucket_bytes),
                   0;
        return snprintf(why, whylen, "bucket_bytes = %ld", bucket_bytes), 1;
    }
    if (n_buckets < 2)
        return snprintf(why, whylen, "auto: the gradients fit one %s bucket", size), 0;
    if (n < 1) return snprintf(why, whylen, "auto: the nodes' cores are not gathered yet"), 0;
    if (n < 2) return snprintf(why, whylen, "auto: one node, nothing to all-reduce"), 0;
    return choose_auto(facts, n, why, whylen);
}

/* ================================================================ the plan and the thread */

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
