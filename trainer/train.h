/*
 * train.h: the training loop, following DESIGN.md "One iteration".
 *
 *   slice    b samples of the global batch B from offset start (I1): alone, the whole batch
 *            (split = {B}); with a peer, the slice the peer gives
 *   compute  forward + backward -> gradient SUMS in grads[0, n_params); the compute time is
 *            measured on CLOCK_MONOTONIC, then stretched by sleeping (factor - 1) * t when the
 *            node emulates a slowdown (train_config's stretch; a peer applies its own)
 *   exchange alone, nothing: the sums are the batch's; with a peer, the peer turns them into
 *            the sums over the cluster and hands back every node's train_stat (t->gathered)
 *   update   opt_step divides by B (I2), identically on every node (I4)
 *
 * A cluster node hands the distributed part of every iteration to a peer (train_peer: the
 * libhetring node of cluster/hr_node.h, which gives the slice, overlaps the gradient's buckets
 * with backward, all-reduces it with the stats, checks the replicas and decides the next
 * split). The loop allocates nothing after train_init (metrics go through stdio).
 */
#ifndef HR_TRAIN_H
#define HR_TRAIN_H

#include "base/hr_status.h"
#include "trainer/data.h"
#include "trainer/data_io.h"
#include "trainer/device.h"
#include "trainer/model.h"
#include "trainer/optim.h"

#include <stdio.h>

/* ---------------------------------------------------------------- settings */

#define TRAIN_MAX_PHASES 32 /* interference schedule entries */

/* One step of an emulated interference schedule: from iteration `iter` on, compute is
 * stretched by `factor` (replacing the slowdown). */
typedef struct {
    long iter;     /* first iteration the factor applies to */
    double factor; /* >= 1 stretches compute, 1 is full speed */
} train_phase;

/* A node's emulated slowdown: its compute is stretched by `slowdown`, then by each phase's
 * factor from that phase's iteration on (train_stretch_factor). */
typedef struct {
    double slowdown;                      /* >= 1, before the first phase */
    train_phase phases[TRAIN_MAX_PHASES]; /* the interference schedule, ascending iter */
    int n_phases;                         /* entries used in phases[] */
} train_stretch;

#define TRAIN_PATH 512 /* a checkpoint path's bytes, its NUL included */

/* What one node's training is built from: the [train] section and this node's emulation
 * settings, converted from the INI config once by the cluster (cluster/trainer_setup.h).
 * Strings are borrowed and must outlive the trainer. */
typedef struct {
    model_config model;       /* the model to build */
    data_config data;         /* the data to train on */
    opt_config opt;           /* the optimizer */
    long global_batch;        /* B, samples per iteration across all nodes: the trainer's copy,
                               * for a run alone and for its optimizer (a cluster's B is its
                               * cluster_config's, cluster/cluster_setup.h) */
    uint64_t seed;            /* weights, synthetic data and every epoch's permutation */
    long iterations;          /* iterations of the run; 0: `epochs` passes over the data */
    long epochs;              /* passes over the data when iterations is 0 */
    long eval_interval;       /* iterations between evaluations; 0: at the end only */
    char checkpoint[TRAIN_PATH]; /* this node's checkpoint file; "": none */
    long checkpoint_interval; /* iterations between checkpoints; 0: at the end only */
    long threads;             /* BLAS threads of this node; 0: all cores */
    long node_id;             /* this node's id */
    int host_nodes;           /* nodes of the cluster on this node's machine (its own included; 0
                               * counts as 1): they share the machine's memory */
    /* where its threads key was set ("FILE:LINE", or the override: cfg_where), for messages */
    char threads_at[DATA_WHERE_LEN];
    train_stretch stretch;    /* this node's emulated slowdown, when it trains alone */
    int emulated;             /* some node of the cluster emulates a slowdown (labels the run) */
    const char *origin;       /* the config file, named in errors */
    const device_ops *device; /* where the model computes (device.h); NULL: the CPU */
    int device_index;         /* cuda:N's N */
    double device_delay_s;    /* the emulated device's delay per operation (tests) */
    int skip_nonfinite;       /* a step whose gradient or loss is not finite: 1 skips its
                               * update (its samples count as used), 0 stops the run */
    long skip_limit;          /* skip_nonfinite: alone, the run stops at the step that would
                               * be this many skipped in a row (0: never); a cluster's library
                               * decides it for every node */
} train_config;

/* ---------------------------------------------------------------- one iteration */

/* One node's record of one iteration: what the metrics and the progress line show of each
 * node. Alone the trainer makes its own; a cluster node's peer hands every node's back. */
typedef struct {
    long b;       /* b_k, samples this node processed */
    double t;     /* t_k, seconds of compute including any emulated stretch */
    double loss;  /* sum of the per-sample losses of the slice */
    long correct; /* correct predictions in the slice */
} train_stat;

/* What the cluster says of its current view, for the trainer's reports and checkpoints
 * (train_view_of); alone, rank 0 of one node whose split is {B}. */
typedef struct {
    int rank;                /* this node's position: only rank 0 prints progress, evaluates and
                              * writes the summary */
    int n;                   /* nodes of the view */
    const long *split;       /* (n) samples per node of the next iteration, what a checkpoint
                              * records */
    const train_stat *stats; /* (n) every node's stats of the last iteration (b and t at least) */
    long self_id;            /* this node's id (-1 alone) */
    const float *residual;   /* (n_params) this node's bf16 error-feedback residual, what a
                              * checkpoint records with self_id; NULL: none */
    const float *q;          /* (n_q) the powersgd wire's Q, recorded beside it; NULL: none */
    size_t n_q;
} train_view;

/* A peer: the distributed part of every iteration is run by the cluster node of
 * cluster/hr_node.h (a libhetring handle): it gives the iteration's slice, takes the gradient
 * buffer as backward finishes it, and exchanges the gradient sums and this node's stats for
 * the cluster's sums, every node's stats (t->gathered) and the next split. */
typedef struct {
    long start, b;  /* this node's slice: b samples from offset start of the global batch */
    long global_batch; /* the cluster's B, which the slice is cut from and the update divides
                        * by (at most the trainer's own, which sized its buffers) */
    int rank, size; /* this node's ring position and the view's size */
    int on_device;  /* this iteration's gradient all-reduce runs on the device (NCCL): the pass
                     * keeps the gradient there and the step takes it from there (device.h);
                     * ready is not called, exchange all-reduces train_device_grads */
} train_slice;

typedef struct {
    double compute_s; /* in: this node's compute seconds, before any emulated stretch */
    double loss_sum;  /* in: the sum of the slice's per-sample losses */
    long correct;     /* in: correct predictions in the slice */
    double loss;      /* out: mean loss over the B samples */
    double accuracy;  /* out: fraction correct over the B samples */
    double t_node;    /* out: compute seconds with the emulated stretch (the peer applies it) */
    double factor;    /* out: that stretch's factor */
    double t_comm;    /* out: seconds of the exchange */
    int changed;      /* out: the next split differs from this one */
    int buckets;      /* out: all-reduces the gradient went in */
    int skipped;      /* out: the cluster's gradient or loss was not finite and the peer
                       * skips the step: the iteration is done, its update must not be made */
} train_exchange;

typedef struct {
    void *ctx;
    /* The slice of iteration t->iter; a status other than HR_OK ends the step (the run's
     * on_fail hook sees it). */
    hr_status (*slice)(void *ctx, train_slice *s);
    /* grads[off, n_params) hold their final sums (model_grad_hook's ready). */
    void (*ready)(void *ctx, long off);
    /* grads[0, n_params) become the sums over the cluster, and the view (below) every node's
     * stats of the iteration; on failure nothing was applied. */
    hr_status (*exchange)(void *ctx, train_exchange *x);
    /* The view as the cluster knows it now (train_view). */
    void (*view)(void *ctx, train_view *v);
} train_peer;

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
    int skipped;      /* its gradient or loss was not finite: no update (skip_nonfinite) */
    int nonfinite;    /* TRAIN_NONFINITE_* bits of a run alone: what was not finite */
} train_iter;

/* What a run alone found not finite in a step (train_iter.nonfinite). */
enum { TRAIN_NONFINITE_GRAD = 1, TRAIN_NONFINITE_LOSS = 2 };

typedef struct {
    train_config conf;    /* settings (strings borrowed); conf.global_batch is B */
    data_set train, eval; /* training and held-out sets */
    data_loader dl;       /* permutation and slices (I1) */
    model m;              /* the model (its gradient may be lent: model_lend_grads) */
    opt_sgd opt;          /* optimizer state; opt.vel and m.params are the device's host copy */
    device dev;           /* where the model computes; its host copy is current after
                           * train_sync_host (device.h) */
    long ipe;             /* iterations per epoch */
    long total;           /* iterations of the run */
    long iter;            /* next iteration to run */
    float *x;             /* (B, d) input slice */
    int32_t *y;           /* (B) labels, or NULL */
    float *t;             /* (B, n_targets) targets, or NULL */
    long batch;           /* B, the split of a node alone */
    train_stat own;       /* alone: this node's stats of the iteration just run */
    FILE *metrics;        /* the metrics file while train_run runs, else NULL: the hooks of
                           * train_opts may add their own records */

    train_peer peer;  /* the distributed part, when has_peer (train_set_peer) */
    int has_peer;     /* peer is set: it runs the distributed part */
    int peer_buckets; /* all-reduces of the last exchange (the summary's) */
    long skip_run;    /* alone: steps skipped in a row just before the next (skip_limit) */
    float *resumed_residual; /* (n_params) a resumed checkpoint's residual, for its node to take
                              * up (hr_node_open), or NULL */
    long resumed_node;       /* the node that residual is of (-1: none) */
    float *resumed_q;        /* (resumed_n_q) a resumed checkpoint's powersgd Q, or NULL */
    size_t resumed_n_q;
} trainer;

/* Load the data, build the model and optimizer from tc. Sets the BLAS thread count from
 * tc->threads (0 = all cores). The trainer starts alone, with the split {B}; a cluster
 * node's slices come from its peer (train_set_peer). */
hr_status train_init(trainer *t, const train_config *tc, char *err, size_t errlen);
void train_free(trainer *t);
/* The checks of train_init that the configuration alone decides, made without loading any data
 * or taking memory for it: the model against the kind of data (regression or classification),
 * and for a synthetic set, whose shape the configuration fixes, the model's layers against that
 * shape (its size against global_batch is cfg_validate's). HR_ERR_CONFIG with train_init's
 * message, else HR_OK. */
hr_status train_check_config(const train_config *tc, char *err, size_t errlen);

/* The trainer's global batch B, t->conf.global_batch: its data loader and optimizer are
 * handed it, and the rest of the trainer asks here. A cluster node's library keeps the
 * cluster's own (cluster/cluster_setup.h), made from the same [train] global_batch. */
long train_global_batch(const trainer *t);

/* The view: the peer's (train_peer.view), or alone rank 0 of one node, split {B}. */
void train_view_of(const trainer *t, train_view *v);
/* Whether this node is rank 0 of its view: the one that prints, evaluates and summarises. */
int train_lead(const trainer *t);

/* Hand the distributed part of every iteration to peer (see train_peer): the view, the split
 * and every node's stats are the peer's from then on. */
void train_set_peer(trainer *t, const train_peer *peer);

/* The training state as one blob, for a node that joins or falls behind: the iteration to run
 * next, the parameters and the optimizer state (the data order and the learning rate follow
 * from the iteration, I1). Every replica's blob has the same size. */
size_t train_state_bytes(const trainer *t);
void train_state_pack(const trainer *t, void *blob);
/* Make the host copy of the parameters and momentum current (the device's, after its steps):
 * before train_state_pack, train_state_hash or a hash of m.params. And the other way: the
 * device takes the host copy (after the host copy was changed in place). */
hr_status train_sync_host(trainer *t);
hr_status train_sync_device(trainer *t);
/* Adopt a blob packed by a trainer of the same model, seed and B (HR_ERR_MISMATCH naming what
 * differs, HR_ERR_DATA for a malformed one); nothing changes on failure. */
hr_status train_state_unpack(trainer *t, const void *blob, size_t bytes, char *err, size_t errlen);
/* A 64-bit hash of the state (iteration, parameters, optimizer state): replicas that agree on
 * it hold the same state. */
uint64_t train_state_hash(const trainer *t);
/* The same hash of any float array (the parameter agreement check uses it). */
uint64_t train_hash_floats(const float *v, long n);
/* Whether all n floats of v are finite (no NaN, no inf): the check of a gradient, a node's
 * share and a cluster's sum alike ([train] nonfinite). */
int train_all_finite(const float *v, size_t n);

/* The device's gradient (n_params floats of device memory, device.h), where an NCCL view
 * all-reduces it; NULL on the CPU. */
float *train_device_grads(trainer *t);

/* The emulated stretch of iteration `iter`: the slowdown, or the factor of the last
 * interference phase begun by then. */
double train_stretch_factor(const train_stretch *s, long iter);

/* Time forward and backward over the first b samples of iteration t->iter's batch (b at most
 * B), as the iteration would run them on this node's device, its emulated stretch included:
 * one untimed pass, then the fastest of the timed ones, in *seconds. Passes are timed for
 * TRAIN_PROBE_S at least (two at least; TRAIN_PROBE_PASSES bounds them should the clock stand
 * still), so that a short pass that a busy machine preempted (a time slice is several of them)
 * does not set the node's speed. Changes no state (parameters, momentum, iteration); the
 * gradient buffer is overwritten. */
#define TRAIN_PROBE_S 0.05
#define TRAIN_PROBE_PASSES 10000
hr_status train_probe(trainer *t, long b, double *seconds);

/* Run iteration t->iter and advance: alone, the whole batch; with a peer, its slice. A step
 * whose gradient or loss is not finite (alone: this node's; with a peer: the cluster's, the
 * peer decides) makes no update: with skip_nonfinite it advances with out->skipped set (its
 * samples count as used), else it returns HR_ERR_NONFINITE and does not advance (alone,
 * out->nonfinite says what was not finite; a peer says why itself). */
hr_status train_step(trainer *t, train_iter *out);

/* Loss and accuracy of the current parameters on the held-out split (all of it). */
hr_status train_evaluate(trainer *t, double *loss, double *accuracy);

/* Checkpoint the state (iteration, parameters, optimizer, the view's split and, where the
 * view gives one, this node's bf16 residual with its id) / resume from one. A resumed
 * checkpoint's split is not the trainer's: train_load writes it to `split` (room for n_nodes
 * entries; NULL: not wanted) when it records one of n_nodes nodes, and says so in *recorded;
 * the controller adopts it (hr_node_open hands it to the library). Its residual goes to
 * t->resumed_residual and t->resumed_node, its Q to t->resumed_q, for hr_node_open too. */
hr_status train_save(trainer *t, const char *path, char *err, size_t errlen);
hr_status train_load(trainer *t, const char *path, long *split, int n_nodes, int *recorded,
                     char *err, size_t errlen);

/* Progress display on rank 0. */
enum { TRAIN_PROGRESS_NONE, TRAIN_PROGRESS_LINES, TRAIN_PROGRESS_BAR, TRAIN_PROGRESS_AUTO };

typedef struct {
    const char *metrics_path; /* JSONL record per iteration, or NULL */
    const char *summary_path; /* JSON summary at the end, or NULL */
    int progress;             /* TRAIN_PROGRESS_*; AUTO draws a bar when stdout is a TTY */
    FILE *out;                /* progress stream (NULL = stdout) */
    /* Optional: called before every iteration with its index and the nodes of its view (the
     * application's test fault hooks use it). */
    void (*on_iter)(void *ctx, long iter, int members); /* members: nodes in the view */
    void *on_iter_ctx;
    /* Optional membership hooks (the application's elastic training), with ctx member_ctx:
     *  - on_fail: train_step failed with `st`; return HR_OK once the trainer may retry
     *    t->iter (possibly in another view, with another split and state), else the status
     *    to stop with;
     *  - after_iter: after every completed iteration (its checkpoint written); return HR_OK to
     *    go on, HR_ERR_INTERRUPTED to end the run here as a success, else a status to stop;
     *  - tag: adds fields to every metrics record, or with `summary` to the summary (written
     *    as ",\"key\":value...").
     * The hooks may write their own records to t->metrics. */
    hr_status (*on_fail)(void *ctx, trainer *t, hr_status st, char *err, size_t errlen);
    hr_status (*after_iter)(void *ctx, trainer *t, char *err, size_t errlen);
    void (*tag)(void *ctx, const trainer *t, FILE *f, int summary);
    void *member_ctx;
} train_opts;

/* The files train_run will write (o->metrics_path, o->summary_path), checked before anything
 * runs: each must be a regular file this process may write, or a new one its directory takes
 * (created and removed again), so that a run never trains to find out at its first record or
 * at its end. HR_ERR_CONFIG naming the option and the file otherwise. */
hr_status train_check_outputs(const train_opts *o, char *err, size_t errlen);

typedef struct {
    long iterations;      /* iterations run by this call */
    long samples;         /* samples processed by the cluster in those iterations */
    double wall_s;        /* seconds of the loop */
    double samples_per_s; /* samples / wall_s */
    double final_loss;    /* training loss of the last iteration */
    double eval_loss;     /* held-out loss at the end */
    double eval_accuracy; /* held-out accuracy at the end (classification) */
    int emulated;         /* the run emulated heterogeneity */
    int left;             /* after_iter ended the run early (this node left the cluster) */
    long skipped;         /* iterations of this call whose update was skipped (not finite) */
} train_result;

/* The whole run: resume from conf.checkpoint when the file exists (unless train_load has
 * already resumed this trainer, t->iter > 0), iterate to `total`,
 * evaluate every eval_interval iterations and at the end, checkpoint every
 * checkpoint_interval iterations and at the end (rank 0), write metrics and summary. */
hr_status train_run(trainer *t, const train_opts *o, train_result *res, char *err, size_t errlen);

#endif
