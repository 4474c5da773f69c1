/*
 * hetring.h: libhetring, dynamic batching and elastic ring all-reduce for a training loop of
 * your own (your model, your framework, your optimizer).
 *
 * A node is one process of the cluster described by an INI file (the same file `hetring run`
 * reads; [train] model and dataset are ignored, global_batch, seed, samples, iterations or
 * epochs, hash_interval and the [controller] and [cluster] sections apply). Each iteration:
 *
 *     hetring_batch b;
 *     while (hetring_next(h, &b) == HETRING_OK) {
 *         // compute the gradient SUMS over samples b.indices[0 .. b.batch) (global dataset
 *         // indices), time that compute (seconds), then:
 *         int st = hetring_step(h, &grads, &res);
 *         if (st == HETRING_RETRY) continue;   // the view changed: run the iteration again
 *         if (st == HETRING_SKIPPED) continue; // not finite, nonfinite = skip: no update
 *         if (st != HETRING_OK) break;         // hetring_last_error(h) says why
 *         // grads' buffers now hold the global mean gradient (sum / B): take your step
 *     }
 *
 * Overlap: call hetring_ready(h, &grads, i) as soon as buffer i holds its final sums (for
 * instance from a backward hook, where the last layers finish first); with buckets on, the
 * library all-reduces them on its own thread while you compute the rest, as DDP does.
 * hetring_step then sends what is left. [train] bucket_bytes decides: auto (the default)
 * uses buckets where every node calls hetring_ready and has a core to spare for the thread,
 * N uses buckets of at least N bytes, 0 none; hetring_result says what an iteration did.
 *
 * What it keeps for you:
 *  - I1 exact global batch: iteration i of epoch e is perm_e[i*B, (i+1)*B) of the dataset,
 *    perm_e a permutation from (seed, e); this node's slice follows the replicated split.
 *  - I2 weighted averaging: the buffers come back as the sum over the cluster divided by B.
 *  - I5 replicated decisions: every node runs the same controller on the same all-gathered
 *    (batch, compute time) and gets the same next split; a hash of each decision is checked.
 *  - I4 replica identity: on hash iterations (hetring_batch.check_hash) pass a hash of your
 *    parameters (hetring_hash) and a node that differs stops the cluster with a clear error.
 *  - I8 nothing lost: a node that dies or leaves mid-iteration makes the others agree on a new
 *    view; the interrupted iteration is run again from the same data cursor (HETRING_RETRY).
 *    A node that joins receives the state of the others through your get_state/put_state
 *    callbacks, checked by a hash of every member's get_state after the transfer. A run
 *    resumed from your own checkpoint (hetring_options.start_iter) goes on from that
 *    iteration's cursor, and nodes that resumed nothing receive the state.
 *  - nothing trained on NaN: each node checks its own buffers (as hetring_ready or
 *    hetring_step takes them) and loss_sum before the all-reduce and says so in its stats, and
 *    every node checks the summed gradient and loss after it. A step that is not finite stops
 *    every node with HETRING_ENONFINITE ([train] nonfinite = error, the default) or is skipped
 *    with HETRING_SKIPPED (nonfinite = skip: the iteration is done, its samples count as used,
 *    as PyTorch AMP's GradScaler skips a step; the step that would be the nonfinite_limit-th,
 *    10 by default, skipped in a row in one view stops every node with HETRING_ENONFINITE,
 *    for parameters that diverged would skip every step left); either way hetring_last_error
 *    names the
 *    iteration and hetring_nonfinite the nodes whose share was not finite, the same on every
 *    node.
 *
 * Errors: every call returns a hetring_status (0 is success); hetring_strerror names it and
 * hetring_last_error(h) gives the detailed message of the handle's last failure. Nothing in
 * the library calls exit() or keeps state outside the handle but the process-wide log
 * settings (the HETRING_LOG environment variable).
 *
 * Threads: a handle belongs to one thread at a time; calls on one handle must not overlap.
 * Your callbacks run on the thread that called into the library (inside hetring_open,
 * hetring_next or hetring_step). hetring_leave alone may be called from any thread or from a
 * signal handler. Several handles in one process are independent.
 *
 * fork(): a handle belongs to the process that opened it. In a process forked from that one,
 * every call that would use the cluster (hetring_next, hetring_step, hetring_ready,
 * hetring_allreduce, hetring_matrices, hetring_resume_*) returns HETRING_EINVAL and
 * hetring_last_error says so; hetring_close and hetring_free there release the child's copy
 * only: they neither agree on the run's end nor close the owner's connections, and the owner
 * runs on undisturbed.
 */
#ifndef HETRING_H
#define HETRING_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HETRING_VERSION_MAJOR 0
#define HETRING_VERSION_MINOR 3
#define HETRING_VERSION_PATCH 1

#if defined(__GNUC__)
#define HETRING_API    __attribute__((visibility("default")))
#define HETRING_RESULT __attribute__((warn_unused_result))
#else
#define HETRING_API
#define HETRING_RESULT
#endif

typedef struct hetring hetring; /* one node, opaque */

typedef enum {
    HETRING_OK = 0,
    HETRING_EINVAL = 1,        /* a bad argument, or a call out of order */
    HETRING_ECONFIG = 2,       /* the INI file or an override is wrong */
    HETRING_ENOMEM = 3,        /* out of memory */
    HETRING_EIO = 4,           /* file or socket error */
    HETRING_ETIMEOUT = 5,      /* a peer stayed silent past its deadline */
    HETRING_EPEER = 6,         /* a peer failed and no new view could be formed */
    HETRING_EPROTO = 7,        /* a peer broke the protocol (e.g. nodes disagree on sizes) */
    HETRING_EAUTH = 8,         /* a peer failed authentication */
    HETRING_EDATA = 9,         /* malformed data (a state blob, a callback's failure) */
    HETRING_EMISMATCH = 10,    /* replicas or decisions differ between nodes (I4, I5) */
    HETRING_EVIEW = 11,        /* the membership view changed under a collective */
    HETRING_EUNSUPPORTED = 12, /* not available in this build */
    HETRING_ENONFINITE = 13,   /* hetring_step: the step's global gradient or loss was not finite
                                * (NaN, inf) and [train] nonfinite = error, or skip and it
                                * would be the nonfinite_limit-th skipped in a row: every node
                                * stops, nothing applied (hetring_nonfinite names the culprits) */
    HETRING_RETRY = 100,       /* the view changed during hetring_step: the iteration's
                                * gradients were dropped; call hetring_next and compute again */
    HETRING_DONE = 101,        /* hetring_next: the run's iterations are done */
    HETRING_LEFT = 102,        /* hetring_next: this node left the cluster (hetring_leave);
                                * hetring_step, hetring_allreduce: it left in the view change
                                * after a failure (see hetring_step) */
    HETRING_ECLOSED = 103,     /* the handle was closed (hetring_close) */
    HETRING_SKIPPED = 104      /* hetring_step with [train] nonfinite = skip: the step's global
                                * gradient or loss was not finite. The iteration is done (the
                                * cursor moved on, its samples count as used, res is filled,
                                * the same on every node) but its gradient must not be applied:
                                * skip your optimizer step and call hetring_next; and
                                * hetring_resume_residual / _powersgd_q: not taken up, the
                                * cluster is past the checkpoint */
} hetring_status;

/* A membership view, as the on_view callback sees it. */
typedef struct {
    uint64_t epoch;     /* view epoch, increasing */
    int n;              /* members */
    const long *ids;    /* (n) member node ids in ring order; valid during the callback */
    int rank;           /* this node's position in ids */
    long iter;          /* the iteration the view starts at */
    size_t state_bytes; /* bytes of state this node sent or received (0: none moved) */
    const long *left;   /* (n_left) nodes the view dropped (failed or left); valid during the
                         * callback */
    int n_left;
    const long *joined; /* (n_joined) nodes it admitted (this node's own id when it is the
                         * one that rejoined; none in the first view) */
    int n_joined;
    double change_s; /* seconds from the failure or request to the new view */
} hetring_view;

/* Your side of a view change. Callbacks return 0 on success, nonzero to fail the call that
 * ran them (HETRING_EDATA). Without get_state/put_state only the iteration cursor moves, so a
 * node that joins late starts from its own state. */
typedef struct {
    void *user; /* passed back to every callback */
    /* Your whole training state (parameters, optimizer state, ...) as bytes: *data must stay
     * valid until the next call into the library. Called on the donor of a transfer and on
     * every member for the state hash. */
    int (*get_state)(void *user, const void **data, size_t *bytes);
    /* Adopt the donor's state (bytes as its get_state gave them). */
    int (*put_state)(void *user, const void *data, size_t bytes);
    /* A view was installed (the first one inside hetring_open). May be NULL. */
    void (*on_view)(void *user, const hetring_view *v);
} hetring_callbacks;

typedef struct {
    const char *conf;       /* the cluster's INI file, or NULL with conf_text */
    long node_id;           /* which [node.ID] this process is; -1: HETRING_NODE or a
                             * launcher's rank, as `hetring run` reads them */
    long n_samples;         /* samples of your training set; 0: the INI's [train] samples */
    const char *const *set; /* "section.key=value" overrides, NULL-terminated, or NULL */
    int sync_first;         /* 1 (default): the first view sends the lowest member's state to
                             * every member (as DDP broadcasts rank 0's); 0: the states must
                             * already agree (the hash check says so when they do not) */
    hetring_callbacks cb;   /* your side of view changes */
    const char *conf_text;  /* instead of conf: the INI itself, in memory (e.g. built by your
                             * program; "conf_text:LINE" in messages, relative paths from the
                             * current directory). Exactly one of conf and conf_text. */
    long start_iter;        /* the iteration your state is at: 0 for a new run, N when you
                             * resumed your own checkpoint written after N iterations. The
                             * first view takes the state of the member furthest along (the
                             * lowest of them with sync_first), so nodes that resumed nothing
                             * receive it; the data cursor goes on from there (I8) */
    volatile sig_atomic_t *leave_flag; /* NULL, or a flag of yours (a signal handler's) that
                                        * hetring_leave then sets too: nonzero makes this node leave
                                        * at the next boundary, and also ends hetring_open's wait
                                        * for a quorum (HETRING_LEFT), when no handle exists yet to
                                        * call hetring_leave on. It must outlive the handle. */
} hetring_options;

/* This node's part of the iteration to run, from hetring_next. */
typedef struct {
    long iter;              /* global iteration, 0-based */
    long epoch;             /* its epoch */
    long global_batch;      /* B */
    long batch;             /* b: samples this node computes */
    long start;             /* its offset in the global batch (sum of the batches before it) */
    const int64_t *indices; /* (batch) dataset indices; valid until the next call */
    int rank, size;         /* this node's ring position and the view's size */
    int check_hash;         /* pass a hash of your parameters to hetring_step this time */
    int view_changed;       /* the view changed since the last iteration */
    double slowdown;        /* emulated stretch of this node's compute (1: none); applied by
                             * hetring_step, which sleeps (slowdown - 1) x your compute time */
} hetring_batch;

/* What you hand to hetring_step: your gradient SUMS over the batch's samples. */
typedef struct {
    float *const *bufs;   /* (n_bufs) float32 buffers, overwritten with the mean over B */
    const size_t *counts; /* (n_bufs) floats in each; the same on every node and iteration */
    int n_bufs;           /* >= 1 */
    double compute_s;     /* seconds this node spent computing them (not waiting), above 0 */
    double loss_sum;      /* sum of the per-sample losses of the batch (0 if none) */
    long correct;         /* correct predictions in the batch (classification; else 0) */
    uint64_t param_hash;  /* with hetring_batch.check_hash: hetring_hash of your parameters */
} hetring_grads;

/* What one iteration did, the same on every node but for the t_ fields. */
typedef struct {
    long iter;        /* the iteration just completed */
    double loss;      /* mean loss over the B samples */
    double accuracy;  /* correct / B */
    long next_batch;  /* this node's batch at the next iteration */
    int changed;      /* the controller changed the split */
    double t_compute; /* this node's compute seconds as passed in */
    double t_node;    /* with the emulated stretch */
    double t_comm;    /* seconds in the all-reduce and the decision */
    int buckets;      /* all-reduces the gradients went in (1: no overlap this iteration) */
    int early;        /* of them, sent by hetring_ready while this node computed */
} hetring_result;

/* One member's part in an iteration (hetring_members). */
typedef struct {
    long id;          /* its node id */
    long batch;       /* samples it computed */
    double compute_s; /* its compute seconds, with any emulated stretch */
} hetring_member;

/* "0.3.1": the library's version (which may differ from the header's HETRING_VERSION_*). */
HETRING_API const char *hetring_version(void);

/* A short name of a status ("peer failure", "retry the iteration", ...). */
HETRING_API const char *hetring_strerror(int status);

/* Defaults: node_id -1, sync_first 1, the rest 0 (start options this way: fields may be
 * added at the end in later versions). */
HETRING_API void hetring_options_init(hetring_options *o);

/* Start node o->node_id of o->conf (or o->conf_text): read the INI, open the ring, agree on the
 * first view with the reachable nodes (waiting up to [cluster] rejoin_timeout for a quorum), take
 * the state of the member the election names and start the controller. *out is NULL on failure,
 * with err (errlen bytes, may be NULL) saying why. */
HETRING_API HETRING_RESULT int hetring_open(hetring **out, const hetring_options *o, char *err,
                                            size_t errlen);

/* The next iteration's slice for this node. Runs any view change the last iteration asked
 * for first (a node joining or leaving). HETRING_DONE when the INI's iterations (or epochs)
 * are done and the view agreed on that (a barrier: a member whose last step failed takes this
 * node's state in a new view first), HETRING_LEFT once hetring_leave took effect. */
HETRING_API HETRING_RESULT int hetring_next(hetring *h, hetring_batch *out);

/* Buffer i of g holds its final gradient sums for this iteration: the library copies it now,
 * and with buckets on sends every bucket it completes. Buckets go out in one order (from the
 * last buffer towards the first) whatever the order of the calls, so nodes may call it in
 * different orders, or not at all. g must hold the buffers hetring_step is then given; call
 * it at most once per buffer and iteration, after hetring_next. A buffer handed over is not
 * read again: write it no more until hetring_step returns the mean into it. */
HETRING_API HETRING_RESULT int hetring_ready(hetring *h, const hetring_grads *g, int i);

/* A SUM all-reduce of count floats at buf over the current view, inside an iteration: for a
 * model whose forward or backward needs a collective of its own (PyTorch's synchronised
 * BatchNorm: each node's per-channel sums). Call it after hetring_next and before
 * hetring_step, before any hetring_ready of the iteration (the communication thread owns the
 * ring once buffers are handed over: HETRING_EINVAL); every member must make the same calls,
 * with the same counts, in the same order. buf gets the sum over the members (no division).
 * HETRING_RETRY: a node failed and the others formed a new view, as for hetring_step: drop the
 * iteration, call hetring_next and compute it again. HETRING_LEFT: as for hetring_step. */
HETRING_API HETRING_RESULT int hetring_allreduce(hetring *h, float *buf, size_t count);

/* The matrices of your buffers, for [cluster] wire = powersgd (declaring them with another
 * wire is harmless): buffer i's first rows[i] x cols[i] floats are a row-major matrix (a
 * linear layer's weight, a convolution's reshaped to out_channels x the rest), 0 x 0 where it
 * holds none; the floats after it (a bias) and the matrices too small to halve at
 * powersgd_rank go as float32. n_bufs is hetring_grads.n_bufs. Call it before the first
 * hetring_step or hetring_ready; with wire = powersgd that step fails without it. */
HETRING_API HETRING_RESULT int hetring_matrices(hetring *h, const size_t *rows, const size_t *cols,
                                                int n_bufs);

/* This node's error-feedback residual ([cluster] wire = bf16 or powersgd): what its share lost
 * on the wire and has not sent yet, as of its last applied step, in the buffers' layout (the
 * sum of their counts, in order), for your checkpoint. It is this node's own, not replicated
 * state: record it with hetring_node_id, and give it back (hetring_resume_residual) only to
 * the node that wrote it, or it is counted twice. Returns the floats it holds, 0 where there
 * is none (wire = fp32, or no lossy step yet and nothing resumed), and copies them into out
 * unless out is NULL; -1 (nothing copied) when n is not that count. */
HETRING_API long hetring_residual(const hetring *h, float *out, size_t n);
/* Take up this node's residual from your checkpoint (n floats, copied) before the first step,
 * whose lossy all-reduce adds it. HETRING_EINVAL with wire = fp32 or after the first step; the
 * first step fails when n is not the floats of its buffers. HETRING_SKIPPED, nothing taken up,
 * when the first view's state is past your checkpoint's iteration (start_iter): the steps
 * since were applied, with this residual (this node sent it, then crashed) or without it (it
 * left), so taking it up could count it twice; hetring_last_error says so. */
HETRING_API HETRING_RESULT int hetring_resume_residual(hetring *h, const float *r, size_t n);

/* The powersgd wire's Q ([cluster] wire = powersgd, or auto once it took powersgd): the
 * low-rank basis every node holds alike, as of the last applied step, for your checkpoint
 * beside the residual. Unlike the residual it is replicated state: every node's checkpoint of
 * the same iteration holds the same Q. Returns its floats, 0 where there is none (no powersgd
 * step yet, and nothing resumed), and copies them into out unless out is NULL; -1 (nothing
 * copied) when n is not that count. */
HETRING_API long hetring_powersgd_q(const hetring *h, float *out, size_t n);
/* Start the first view's Q from your checkpoint (n floats, copied) instead of the seed, before
 * the first step: with every node resuming its own checkpoint (residual and Q), a job cut in
 * two ends bit for bit where the uninterrupted one does. Later views start Q from the seed on
 * every member (a joiner needs none sent). HETRING_EINVAL with a wire other than powersgd or
 * auto, or after the first step; HETRING_SKIPPED as for the residual, when the first view's
 * state is past the checkpoint; a Q of another size than the plan's is dropped with a
 * warning (Q starts from the seed). */
HETRING_API HETRING_RESULT int hetring_resume_powersgd_q(hetring *h, const float *q, size_t n);

/* All-reduce g's buffers over the cluster with the stats of this node, check the agreement
 * hashes, run the controller and return the mean gradient in g->bufs and the next split.
 * HETRING_RETRY: a node failed and the others formed a new view (your put_state may have
 * run): call hetring_next and compute the iteration again. res may be NULL.
 * HETRING_LEFT: a node failed while a leave was asked for (hetring_leave, or the options'
 * leave_flag, before or during the election that follows the failure): this node left in
 * that view change instead of joining the new view; the iteration is dropped (apply nothing)
 * and every later call returns HETRING_LEFT, as after hetring_next's.
 * A share (g's buffers, g->loss_sum) or a sum that is not finite: HETRING_SKIPPED with
 * [train] nonfinite = skip (g->bufs then hold the mean, not finite: do not apply it), else
 * HETRING_ENONFINITE, which ends the node as every error does. */
HETRING_API HETRING_RESULT int hetring_step(hetring *h, const hetring_grads *g,
                                            hetring_result *res);

/* Ask to leave the cluster at the next iteration boundary the others agree on; hetring_next
 * then returns HETRING_LEFT. Safe from any thread and from a signal handler. */
HETRING_API void hetring_leave(hetring *h);

/* This node's id, ring position and the current view's size. */
HETRING_API long hetring_node_id(const hetring *h);
HETRING_API int hetring_rank(const hetring *h);
HETRING_API int hetring_size(const hetring *h);
/* B, the dataset size the indices range over, and the run's iterations. */
HETRING_API long hetring_global_batch(const hetring *h);
HETRING_API long hetring_samples(const hetring *h);
HETRING_API long hetring_iterations(const hetring *h);

/* Every member's part in the last iteration completed (by hetring_step), in ring order (the
 * view of that iteration, which a view change since may have replaced): the first max of
 * them into out (out may be NULL with max 0). Returns how many members that iteration had, 0
 * before the first step. The same on every node. */
HETRING_API int hetring_members(const hetring *h, hetring_member *out, int max);

/* The nodes whose share (buffers, with the error-feedback residual a lossy wire adds to them,
 * or loss_sum) was not finite before the all-reduce of the last step that returned
 * HETRING_SKIPPED or HETRING_ENONFINITE: the first max ids into out (out may be NULL with max
 * 0); returns how many, the same on every node. 0 with such a step: every share was finite and
 * their sum (with wire = powersgd, their low-rank products or their sums) overflowed. */
HETRING_API int hetring_nonfinite(const hetring *h, long *out, int max);

/* Steps this handle skipped because they were not finite ([train] nonfinite = skip). */
HETRING_API long hetring_skipped(const hetring *h);

/* The detailed message of the handle's last failure ("" when none). */
HETRING_API const char *hetring_last_error(const hetring *h);

/* A 64-bit hash of bytes, for hetring_grads.param_hash (replicas compare it). */
HETRING_API uint64_t hetring_hash(const void *data, size_t bytes, uint64_t seed);

/* Leave the ring: the other nodes see this node fail. Later calls on h return HETRING_ECLOSED;
 * h stays valid until hetring_free. Closing twice is harmless. A node whose last step is done
 * but whose hetring_next has not said HETRING_DONE agrees on the run's end first, as that call
 * would (the others wait on it there). */
HETRING_API int hetring_close(hetring *h);

/* Close if needed and release h (NULL is fine). In a process forked from the one that opened
 * h, only that process's copy is released (see fork() above). */
HETRING_API void hetring_free(hetring *h);

#ifdef __cplusplus
}
#endif

#endif
