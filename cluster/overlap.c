/*
 * overlap.c: the bucket plan, the choice of bucket_bytes = auto and its messages, and the
 * communication thread (see overlap.h).
 */
#include "cluster/overlap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================ choosing */

overlap_fact overlap_fact_of(long id, long cores, const long *threads, int n) {
    overlap_fact f = {.id = id, .cores = cores, .hosted = n};
    for (int k = 0; k < n; k++) f.demand += (threads[k] > 0 ? threads[k] : cores) + 1;
    return f;
}

int overlap_fact_spare(const overlap_fact *f) {
    return f->cores > 0 && f->cores >= f->demand;
}

int overlap_measured(const overlap_fact *facts, int n) {
    for (int k = 0; k < n; k++)
        if (!(facts[k].comm_s > 0)) return 0;
    return facts != NULL && n > 0;
}

void overlap_bytes_str(long bytes, char *out, size_t n) {
    if (bytes >= 1L << 20 && bytes % (1L << 20) == 0)
        snprintf(out, n, "%ld MiB", bytes >> 20);
    else if (bytes >= 1L << 10 && bytes % (1L << 10) == 0)
        snprintf(out, n, "%ld KiB", bytes >> 10);
    else
        snprintf(out, n, "%ld B", bytes);
}

/* auto where node `tight` has no core to spare: overlap when the all-reduce measured in this
 * view waits on the wire (overlap.h). */
static int choose_wire(const overlap_fact *facts, int n, int tight, char *why, size_t whylen) {
    const overlap_fact *t = &facts[tight];
    char lead[96];
    snprintf(lead, sizeof lead, "auto: node %ld has no core to spare, %ld core%s for %ld threads",
             t->id, t->cores, t->cores == 1 ? "" : "s", t->demand);
    for (int k = 0; k < n; k++)
        if (!overlap_fact_spare(&facts[k]) && facts[k].hosted > 1) {
            snprintf(why, whylen, "%s; node %ld shares its host with %ld other node%s", lead,
                     facts[k].id, facts[k].hosted - 1, facts[k].hosted == 2 ? "" : "s");
            return 0;
        }
    int wire = 0, busy = 0, slow = 0; /* least wall time, most CPU, longest compute */
    for (int k = 0; k < n; k++) {
        const overlap_fact *f = &facts[k];
        if (!(f->comm_s > 0)) {
            snprintf(why, whylen, "%s; the all-reduce is not measured yet in this view", lead);
            return 0;
        }
        if (f->comm_s < facts[wire].comm_s) wire = k;
        if (f->comm_cpu_s > facts[busy].comm_cpu_s) busy = k;
        if (f->compute_s > facts[slow].compute_s) slow = k;
    }
    const double w = facts[wire].comm_s, c = facts[busy].comm_cpu_s, s = facts[slow].compute_s;
    const int on = w >= OVERLAP_WIRE_FRAC * s && c <= OVERLAP_CPU_FRAC * w;
    snprintf(why, whylen,
             "%s; the all-reduce took %.1f ms (node %ld, the least), %.1f ms of CPU at most "
             "(node %ld), the compute %.1f ms at most (node %ld): %s",
             lead, w * 1e3, facts[wire].id, c * 1e3, facts[busy].id, s * 1e3, facts[slow].id,
             on                         ? "it waits on the wire, buckets hide it"
             : c > OVERLAP_CPU_FRAC * w ? "it keeps a core busy, a thread would slow backward"
                                        : "too short beside the compute to pay");
    return on;
}

/* auto with a plan of two buckets or more and two nodes or more: a core to spare on each, or
 * an all-reduce that waits on the wire. */
static int choose_auto(const overlap_fact *facts, int n, char *why, size_t whylen) {
    int fewest = 0, tight = -1;
    for (int k = 0; k < n; k++) {
        const overlap_fact *f = &facts[k];
        if (f->at_end) {
            snprintf(why, whylen,
                     "auto: node %ld hands its gradients over only after its compute (its loop "
                     "does not call hetring_ready)",
                     f->id);
            return 0;
        }
        if (!overlap_fact_spare(f) && tight < 0) tight = k;
        if (f->cores - f->demand < facts[fewest].cores - facts[fewest].demand) fewest = k;
    }
    if (tight >= 0) return choose_wire(facts, n, tight, why, whylen);
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

void overlap_choice_str(long bucket_bytes, int n_buckets, int on, const char *why, char *out,
                        size_t n) {
    char size[32];
    overlap_bytes_str(bucket_bytes == OVERLAP_AUTO ? OVERLAP_AUTO_BYTES : bucket_bytes, size,
                      sizeof size);
    if (on)
        snprintf(out, n, "overlap: %d buckets of >= %s, all-reduced during backward (%s)",
                 n_buckets, size, why);
    else
        snprintf(out, n, "overlap: off, one all-reduce after backward (%s)", why);
}

void overlap_describe(long bucket_bytes, int n_buckets, int n_nodes, const overlap_fact *f,
                      char *out, size_t n) {
    char why[384], size[32];
    if (n_nodes < 2) {
        snprintf(out, n, "overlap: off (one node trains alone)");
    } else if (bucket_bytes != OVERLAP_AUTO || n_buckets < 2) {
        int on = overlap_choose(bucket_bytes, n_buckets, NULL, 0, why, sizeof why);
        overlap_choice_str(bucket_bytes, n_buckets, on, why, out, n);
    } else {
        overlap_bytes_str(OVERLAP_AUTO_BYTES, size, sizeof size);
        snprintf(out, n,
                 "overlap: auto, chosen after the first iteration: %d buckets of >= %s during "
                 "backward if every node has a core to spare; node %ld has %ld core%s for %ld "
                 "threads (compute, and communication, of the nodes on its host): %s",
                 n_buckets, size, f->id, f->cores, f->cores == 1 ? "" : "s", f->demand,
                 overlap_fact_spare(f) ? "a core to spare" : "no core to spare");
    }
}

/* ================================================================ the plan and the thread */

/* Cut at buffer boundaries into buckets of at least `bytes` (0: one bucket), from the last
 * buffer towards the first; with cuts NULL only count them. */
static int cut(const size_t *counts, int n_bufs, long bytes, long *cuts) {
    size_t at = 0; /* where buffer i starts, walking down from the end */
    for (int i = 0; i < n_bufs; i++) at += counts[i];
    int nb = 0;
    long acc = 0;
    if (cuts) cuts[0] = (long)at;
    for (int i = n_bufs - 1; bytes > 0 && i > 0; i--) {
        at -= counts[i];
        acc += (long)(counts[i] * sizeof(float));
        if (acc >= bytes && at > 0) {
            if (cuts) cuts[nb + 1] = (long)at;
            nb++, acc = 0;
        }
    }
    if (cuts) cuts[nb + 1] = 0; /* cuts are at offsets > 0: the last bucket starts at 0 */
    return nb + 1;
}

int overlap_plan(const size_t *counts, int n_bufs, long bucket_bytes, long *cuts) {
    long bytes = bucket_bytes == OVERLAP_AUTO ? OVERLAP_AUTO_BYTES : bucket_bytes;
    size_t total = 0;
    for (int i = 0; i < n_bufs; i++) total += counts[i];
    const long floor =
        (long)((total * sizeof(float) + OVERLAP_MAX_JOBS - 2) / (OVERLAP_MAX_JOBS - 1));
    if (bytes > 0 && cut(counts, n_bufs, bytes, NULL) > OVERLAP_MAX_JOBS) bytes = floor;
    return cut(counts, n_bufs, bytes, cuts);
}

static void *worker_main(void *arg) {
    overlap_worker *w = arg;
    pthread_mutex_lock(&w->t.mu);
    for (;;) {
        while (!w->t.quit && w->finished == w->submitted) pthread_cond_wait(&w->t.wake, &w->t.mu);
        if (w->finished == w->submitted) break; /* quit, and nothing left to do */
        int j = w->finished;
        float *buf = w->buf[j];
        size_t n = w->n[j];
        hr_status st = w->st;
        pthread_mutex_unlock(&w->t.mu);
        /* after a failure the rest of the round is skipped: the peers have failed too, or
         * will by their deadlines */
        if (st == HR_OK) st = w->allreduce(w->ctx, buf, n);
        pthread_mutex_lock(&w->t.mu);
        if (w->st == HR_OK) w->st = st;
        w->finished++;
        pthread_cond_broadcast(&w->t.done);
    }
    pthread_mutex_unlock(&w->t.mu);
    return NULL;
}

hr_status overlap_start(overlap_worker *w, overlap_allreduce allreduce, void *ctx) {
    memset(w, 0, sizeof *w);
    w->allreduce = allreduce, w->ctx = ctx;
    hr_status st = hr_worker_start(&w->t, worker_main, w);
    if (st == HR_OK) w->running = 1;
    return st;
}

void overlap_submit(overlap_worker *w, float *buf, size_t n) {
    pthread_mutex_lock(&w->t.mu);
    if (w->submitted < OVERLAP_MAX_JOBS) {
        w->buf[w->submitted] = buf;
        w->n[w->submitted] = n;
        w->submitted++;
    } else if (w->st == HR_OK) {
        w->st = HR_ERR_INVAL; /* a plan larger than the job table: a bug, reported at wait */
    }
    pthread_cond_signal(&w->t.wake);
    pthread_mutex_unlock(&w->t.mu);
}

hr_status overlap_wait(overlap_worker *w) {
    pthread_mutex_lock(&w->t.mu);
    while (w->finished < w->submitted) pthread_cond_wait(&w->t.done, &w->t.mu);
    hr_status st = w->st;
    w->submitted = w->finished = 0;
    w->st = HR_OK;
    pthread_mutex_unlock(&w->t.mu);
    return st;
}

void overlap_stop(overlap_worker *w) {
    if (!w || !w->running) return;
    hr_worker_stop(&w->t);
    w->running = 0;
}
