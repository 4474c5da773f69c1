/*
 * train.h: the training loop, following DESIGN.md "One iteration".
 *
 *   slice    b = split[rank] samples starting at start = sum of split[q], q < rank (I1)
 *   compute  forward + backward -> gradient SUMS in grads[0, n_params); the compute time is
 *            measured on CLOCK_MONOTONIC, then stretched by sleeping (factor - 1) * t when the
 *            node emulates a slowdown (factor = cfg_node_factor(c, node, iter))
 *   buckets  with bucket_bytes > 0 and more than one node, each finished bucket of the
 *            gradient buffer (overlap.h) is all-reduced on a thread while backward computes
 *            the layers before it. An emulated slow node hands its buckets over before its
 *            stretch; with a balanced split the last node to finish bounds every bucket,
 *            as it would with a truly slower device
 *   stats    this node's slot of the stats tail grads[n_params, n_params + size*TRAIN_NODE_STATS)
 *            gets (b, t, loss sum, correct); the other slots are zero
 *   comm     comm.allreduce(grads, n_params + tail): a SUM over the nodes, in place; the
 *            summed tail is an all-gather of every node's stats. With buckets, a copy of the
 *            tail rides with the last bucket instead (model.h's scratch before grads[0])
 *   update   opt_step divides by B (I2), identically on every node (I4)
 *   decide   ctrl.decide may set the split for the next iteration from the gathered stats
 *
 * One node is the case comm = train_comm_local() (no-op all-reduce), split = {B}. The
 * distributed loop plugs a ring into `comm` and a controller into `ctrl`; nothing else
 * changes. The loop allocates nothing after train_init (metrics go through stdio).
 */
#ifndef HR_TRAIN_H
#define HR_TRAIN_H

#include "cfg.h"
#include "data.h"
#include "hr_status.h"
#include "model.h"
#include "optim.h"
#include "overlap.h"

#include <stdio.h>

/* Per-node statistics slot in the tail of the gradient buffer. Slots 4..7 are free for
 * resource features (memory, queue length, ...) that a controller may want gathered. */
#define TRAIN_NODE_STATS 8
enum {
    TRAIN_STAT_BATCH = 0,   /* b_k, samples this node processed */
    TRAIN_STAT_TIME = 1,    /* t_k, seconds of compute including any emulated stretch */
    TRAIN_STAT_LOSS = 2,    /* sum of the per-sample losses of the slice */
    TRAIN_STAT_CORRECT = 3, /* correct predictions in the slice */
};

/* The communication step: a SUM all-reduce of n floats in place, the same bytes on every
 * node afterwards (I4). rank is this node's ring position, size the number of nodes. */
typedef struct {
    void *ctx;
    int rank, size;
    hr_status (*allreduce)(void *ctx, float *buf, size_t n);
} train_comm;

/* A one-node communicator: the all-reduce leaves the buffer as it is. */
train_comm train_comm_local(void);

/* The batch-size decision after iteration `iter`: `stats` (size, TRAIN_NODE_STATS) is the
 * all-gathered tail, `split` (size) holds the split just used and receives the next one
 * (sum B, each >= 0). Must be a pure function of its inputs and ctx (I5). NULL decide keeps
 * the split. */
typedef struct {
    void *ctx;
    hr_status (*decide)(void *ctx, long iter, const float *stats, int size, long *split);
    /* Optional, before the all-reduce: may fill slots 4..7 of this node's stats `slot`
     * (agreement hashes of the parameters, for instance). */
    hr_status (*annotate)(void *ctx, long iter, float *params, long n_params, float *slot);
} train_ctrl;

/* What one iteration did, as seen after the all-reduce (same on every node). */
typedef struct {
    long iter;        /* global iteration index, 0-based */
    long epoch;       /* epoch of this iteration */
    double loss;      /* mean loss over the B samples */
    double accuracy;  /* fraction correct over the B samples (classification) */
    double lr;        /* learning rate used by the update */
    double t_compute; /* this node's compute seconds, before the emulated stretch */
    double t_node;    /* this node's compute seconds including the stretch (t_k) */
    double t_comm;    /* this node's all-reduce seconds after its compute (not overlapped) */
    double t_iter;    /* this node's wall seconds for the whole iteration */
    double factor;    /* emulated stretch factor applied */
    int changed;      /* the decision after this iteration changed the split */
} train_iter;

typedef struct {
    const cfg *c;         /* configuration (not owned) */
    int node;             /* index of this node in c->nodes */
    train_comm comm;      /* communication step */
    train_ctrl ctrl;      /* batch-size decision */
    data_set train, eval; /* training and held-out sets */
    data_loader dl;       /* permutation and slices (I1) */
    model m;              /* the model; m.grads carries the stats tail */
    opt_sgd opt;          /* optimizer state */
    long B;               /* global batch */
    long ipe;             /* iterations per epoch */
    long total;           /* iterations of the run */
    long iter;            /* next iteration to run */
    long *split;          /* (comm.size) samples per node for the next iteration */
    long *split_prev;     /* (comm.size) the split of the iteration just run */
    float *x;             /* (B, d) input slice */
    int32_t *y;           /* (B) labels, or NULL */
    float *t;             /* (B, n_targets) targets, or NULL */
    float *stats;         /* = m.grads + m.n_params, (comm.size, TRAIN_NODE_STATS) */
    long tail;            /* floats in the stats tail */
    int emulated;         /* any node of the cluster emulates a slowdown */

    /* gradient buckets (overlap.h), used when n_buckets > 1 */
    long cuts[MODEL_MAX_LAYERS + 1]; /* the plan: bucket j = grads[cuts[j+1], cuts[j]) */
    int n_buckets;                   /* buckets in the plan; 0 with one node or bucket_bytes 0 */
    int next_bucket;                 /* next bucket to hand to ow in this iteration */
    overlap_worker ow;               /* all-reduces the buckets while backward runs */
} trainer;

/* Load the data, build the model and optimizer for node `node` of `c`. comm may be NULL
 * (one node). Sets the BLAS thread count from the node's `threads` (0 = all cores).
 * The split starts even: B/size each, the remainder to the lowest ranks. */
hr_status train_init(trainer *t, const cfg *c, int node, const train_comm *comm, char *err,
                     size_t errlen);
void train_free(trainer *t);

/* Run iteration t->iter and advance. */
hr_status train_step(trainer *t, train_iter *out);

/* Loss and accuracy of the current parameters on the held-out split (all of it). */
hr_status train_evaluate(trainer *t, double *loss, double *accuracy);

/* Checkpoint the state (iteration, parameters, optimizer, split) / resume from one. */
hr_status train_save(const trainer *t, const char *path, char *err, size_t errlen);
hr_status train_load(trainer *t, const char *path, char *err, size_t errlen);

/* Progress display on rank 0. */
enum { TRAIN_PROGRESS_NONE, TRAIN_PROGRESS_LINES, TRAIN_PROGRESS_BAR, TRAIN_PROGRESS_AUTO };

typedef struct {
    const char *metrics_path; /* JSONL record per iteration, or NULL */
    const char *summary_path; /* JSON summary at the end, or NULL */
    int progress;             /* TRAIN_PROGRESS_*; AUTO draws a bar when stdout is a TTY */
    FILE *out;                /* progress stream (NULL = stdout) */
    /* Optional: called before every iteration with its index (the application's test fault
     * hooks use it). */
    void (*on_iter)(void *ctx, long iter);
    void *on_iter_ctx;
} train_opts;

typedef struct {
    long iterations;      /* iterations run by this call */
    long samples;         /* samples processed by the cluster in those iterations */
    double wall_s;        /* seconds of the loop */
    double samples_per_s; /* samples / wall_s */
    double final_loss;    /* training loss of the last iteration */
    double eval_loss;     /* held-out loss at the end */
    double eval_accuracy; /* held-out accuracy at the end (classification) */
    int emulated;         /* the run emulated heterogeneity */
} train_result;

/* The whole run: resume from [train] checkpoint when the file exists (unless train_load has
 * already resumed this trainer, t->iter > 0), iterate to `total`,
 * evaluate every eval_interval iterations and at the end, checkpoint every
 * checkpoint_interval iterations and at the end (rank 0), write metrics and summary. */
hr_status train_run(trainer *t, const train_opts *o, train_result *res, char *err, size_t errlen);

/* Write the summary JSON (keys iterations, samples, wall_s, samples_per_s, final_loss,
 * eval_accuracy, emulated, ...). */
hr_status train_write_summary(const trainer *t, const train_result *r, const char *path, char *err,
                              size_t errlen);

#endif
