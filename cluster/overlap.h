/*
 * overlap.h: gradient buckets all-reduced on a communication thread while backward runs, for
 * libhetring (hetring.c).
 *
 * Backward finishes the gradient from its end towards its start (trainer/model.h). The
 * library's user hands it over buffer by buffer (hetring_ready; the built-in trainer, one
 * buffer per layer). A plan (overlap_plan, the one bucket-cut rule) cuts it at buffer
 * boundaries into buckets of at least bucket_bytes, taken in that order; as soon as every
 * buffer of a bucket is in, the library hands the bucket to the worker, whose thread
 * all-reduces it while the user computes the next layers.
 *
 * Invariants:
 *  - the plan depends only on the buffers' layout and bucket_bytes, so every node cuts the
 *    same buckets and submits them in the same order (a differing config fails in the ring's
 *    frame checks, it never mixes buckets);
 *  - a bucket's floats belong to the worker from overlap_submit until overlap_wait returns;
 *    backward writes only lower offsets meanwhile;
 *  - after the first failed all-reduce the worker skips the remaining jobs of the round and
 *    overlap_wait returns that failure, so the communicator is idle whenever the caller
 *    holds the result.
 *
 * bucket_bytes = auto (OVERLAP_AUTO) chooses whether the buckets are used. Overlap pays only
 * where every node can run its communication thread beside its compute threads: a bucket's
 * all-reduce needs every node, so one node that cannot overlap holds up all the others, and
 * where cores are short the thread takes CPU from backward (four nodes on two cores ran 2-5%
 * slower, bench/README.md). Two things keep every node's frames alike (I7) while the cores
 * are a fact of each machine:
 *  - the plan (where the buckets are cut) depends only on the layout and OVERLAP_AUTO_BYTES,
 *    the same on every node (the configurations agree on bucket_bytes before training);
 *  - whether the plan is used is decided after every iteration by overlap_choose, a pure
 *    function of the facts every node put in its slot of that iteration's stats tail (an
 *    all-gather, stats.h), so every node decides alike, as the controller does (I5). The
 *    first iteration of every view uses one all-reduce: no facts are gathered yet.
 * A node's fact: the cores its process may use, against the threads its machine runs while
 * overlapping: the compute threads of every node the configuration places on its machine
 * (its `host` written alike, or resolving to a common address: node_id_check_hosts), plus one
 * communication thread each; and, measured in the view,
 * its last all-reduce after backward (wall and CPU time) beside its compute: where cores are
 * short, buckets still pay when that all-reduce mostly waits on the wire (overlap_choose).
 * A node measures only while it does not overlap (and not the view's first all-reduce), so the
 * library makes the choice once a view, from the first measured facts, and keeps it.
 */
#ifndef HR_OVERLAP_H
#define HR_OVERLAP_H

#include "base/hr_status.h"
#include "base/hr_worker.h"
#include "trainer/model.h"

#include <stddef.h>

#define OVERLAP_MAX_JOBS (MODEL_MAX_LAYERS + 1) /* a bucket per layer of the built-in models */

/* A SUM all-reduce of n floats in place (dist_allreduce's signature). */
typedef hr_status (*overlap_allreduce)(void *ctx, float *buf, size_t n);

typedef struct {
    overlap_allreduce allreduce;  /* the communicator, used by the thread only */
    void *ctx;                    /* its context */
    hr_worker t;                  /* the thread; t.mu guards t.quit and every field below */
    float *buf[OVERLAP_MAX_JOBS]; /* jobs of this round, in submission order */
    size_t n[OVERLAP_MAX_JOBS];   /* floats per job */
    int submitted;                /* jobs submitted this round */
    int finished;                 /* jobs finished (or skipped) this round */
    int running;                  /* the thread was started */
    hr_status st;                 /* first failure of the round, or HR_OK */
} overlap_worker;

#define OVERLAP_AUTO (-1L) /* bucket_bytes = auto: overlap_choose decides */
#define OVERLAP_AUTO_BYTES                                                                         \
    (1L << 20) /* auto's bucket size, about the best measured on 16 cores                          \
                */

/* What one node tells the others about its machine (its slot of the stats tail, stats.h). */
typedef struct {
    long id;     /* the node's id, to name it */
    long cores;  /* cores its process may run on (hr_cores); 0: unknown */
    long demand; /* threads its machine runs while overlapping: every co-located node's
                  * compute threads, plus one communication thread per node */
    long at_end; /* 1: it hands its gradients over only once its compute is done (a libhetring
                  * loop that does not call hetring_ready), so buckets overlap nothing there;
                  * 0: bucket by bucket during backward (the built-in trainer) */
    long hosted; /* nodes of the configuration on its machine, itself included */
    /* measured in this view (0: not yet): */
    double comm_s;     /* wall seconds of its last all-reduce after backward (no overlap) */
    double comm_cpu_s; /* CPU seconds the threads that ran it spent: what a communication thread
                        * beside backward would take from the compute */
    double compute_s;  /* seconds of its last compute */
    double alpha_s;    /* its link probe of the view (ring_probe_links): a hop's latency */
    double beta_s;     /* and a byte's time; 0: not probed */
} overlap_fact;

/* auto on a machine with no core to spare: buckets overlap when the all-reduce waits on the
 * wire (see overlap_choose) */
#define OVERLAP_WIRE_FRAC 0.1  /* the wire time is at least this share of the compute */
#define OVERLAP_CPU_FRAC  0.25 /* and the CPU the all-reduce takes at most this share of it */

/* The fact of node `id` whose process has `cores` cores, on a machine the configuration
 * shares among n nodes with compute threads threads[0, n) (this node's included; 0 means
 * every core). */
overlap_fact overlap_fact_of(long id, long cores, const long *threads, int n);

/* Whether node `f` has a core to spare for its communication thread. */
int overlap_fact_spare(const overlap_fact *f);

/* Whether the next iteration all-reduces its n_buckets buckets during backward, for the
 * setting bucket_bytes (OVERLAP_AUTO, 0 or bytes) and the facts of the n nodes of the view
 * (n = 0: none gathered yet). An explicit setting is obeyed; auto needs two buckets or more,
 * two nodes or more, gradients handed over during backward (no node at_end), and either a
 * core to spare on every node, or, where some node has none but has its host to itself (a
 * node sharing its cores with another node waits in the all-reduce for that node's compute,
 * not for a wire), an all-reduce measured in this view that mostly waits on the wire: its
 * wall time W (the least of any node's: the others also waited for the slowest node's
 * compute) at least OVERLAP_WIRE_FRAC of the longest compute, and the most CPU any node's
 * process took meanwhile at most OVERLAP_CPU_FRAC of W. Then the communication thread mostly
 * sleeps on its sockets: it takes little from backward and hides up to W (a slow link, a
 * core-short machine). `why` gets the reason ("auto: node 3
 * has no core to spare, 2 cores for 4 threads; ..."). A pure function: every node that holds
 * the same facts decides the same. */
int overlap_choose(long bucket_bytes, int n_buckets, const overlap_fact *facts, int n, char *why,
                   size_t whylen);

/* Whether each of the n facts holds a measured all-reduce (comm_s > 0). */
int overlap_measured(const overlap_fact *facts, int n);

/* "1 MiB", "64 KiB" or "1000 B": a bucket size for messages. */
void overlap_bytes_str(long bytes, char *out, size_t n);

/* The choice, in one line: "overlap: 2 buckets of >= 1 MiB, all-reduced during backward (why)"
 * when `on`, else "overlap: off, one all-reduce after backward (why)". */
void overlap_choice_str(long bucket_bytes, int n_buckets, int on, const char *why, char *out,
                        size_t n);

/* How a node overlaps before the first iteration, in one line for the start and the dry run:
 * the choice when it is known already, or with auto the plan and whether this node, fact f,
 * has a core to spare. n_nodes is the configuration's (1: the node trains alone). */
void overlap_describe(long bucket_bytes, int n_buckets, int n_nodes, const overlap_fact *f,
                      char *out, size_t n);

/* The bucket plan of a gradient made of n_bufs consecutive buffers, buffer i holding counts[i]
 * floats: cut at buffer boundaries into buckets of at least bucket_bytes (OVERLAP_AUTO:
 * OVERLAP_AUTO_BYTES; 0: one bucket), from the last buffer towards the first as backward
 * finishes them, unless that makes more buckets than the worker's job table holds: then larger
 * ones. It depends on the layout and the setting alone, the same on every node. cuts[0] = the
 * floats in all > cuts[1] > ... > cuts[nb] = 0, bucket j = [cuts[j+1], cuts[j]); cuts needs
 * OVERLAP_MAX_JOBS + 1 entries. Returns nb >= 1. */
int overlap_plan(const size_t *counts, int n_bufs, long bucket_bytes, long *cuts);

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
