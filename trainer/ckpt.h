/*
 * ckpt.h: checkpoints of the training state.
 *
 * A checkpoint holds the iteration to run next, the parameters, the optimizer state and the
 * current batch split, behind a fixed header, and where the node that wrote it sends a lossy
 * gradient ([cluster] wire = bf16 or powersgd), that node's error-feedback residual with its
 * id: the residual is the writer's own, so only the writer takes it up again; with powersgd
 * also Q, which is the same on every node and taken up by whoever resumes. It is written
 * atomically: to a temporary file in the same directory, fsync'ed, renamed over the target, then
 * the directory is fsync'ed; a crash leaves either the old or the new checkpoint (and a temporary
 * file, which ckpt_prepare removes when the next run starts). A path that is a symbolic link is
 * followed: the file it leads to is replaced, in its own directory, and the link kept; a FIFO,
 * device or directory where the file belongs is refused by save and load alike, never
 * replaced and never opened in a way that waits. A CRC-32 over header and payload
 * detects corruption, and a checkpoint from another model (kind, or shape: the layers' widths,
 * even with as many parameters), seed, batch or training-set size is refused. The data order needs
 * no state: perm_e is a function of (seed, epoch) over the n training samples (I1), so resuming at
 * iteration i replays exactly what an uninterrupted run would have done.
 */
#ifndef HR_CKPT_H
#define HR_CKPT_H

#include "base/hr_status.h"

#include <stdint.h>

#define CKPT_MAX_SHAPE 40 /* layers with parameters a checkpoint records (MODEL_MAX_LAYERS) */

/* What identifies the run a checkpoint belongs to, and where it stands. */
typedef struct {
    uint64_t iter;         /* next iteration to run */
    uint64_t n_params;     /* floats in params and in the optimizer state */
    uint64_t seed;         /* [train] seed */
    uint64_t global_batch; /* B */
    uint32_t model;        /* model_kind (model.h), which shares cfg_model's values */
    uint32_t n_nodes;      /* entries of the batch split */
    uint64_t n_samples;    /* training samples, which every epoch's order depends on (I1); 0:
                            * not recorded (files before version 4) or, expected, not checked */
    uint32_t n_shape;      /* entries of shape: the model's layers with parameters, in order; 0:
                            * not recorded (files before version 5) or, expected, not checked */
    uint32_t reserved;     /* 0 */
    uint64_t shape[CKPT_MAX_SHAPE][2]; /* each such layer's weight matrix, rows (outputs) x
                                        * cols (inputs per output), its bias `rows` floats */
} ckpt_meta;

/* Get `path` ready before a run writes it: remove the temporary files `path`.tmp.PID.TAG that
 * saves of processes no longer running left behind (hr_file_remove_stale: a save killed
 * part-way; TAG names the process namespace, and files of another one, a container or machine
 * sharing the directory, are kept and named, since their process ids mean nothing here), then
 * create and remove this process's own to prove that the directory takes new files (HR_ERR_IO
 * naming the file when not, or when `path` exists and is not a regular file). */
hr_status ckpt_prepare(const char *path, char *err, size_t errlen);

/* A node's error-feedback residual (the bf16 or powersgd wire's): n_params floats, and the
 * node they belong to; with powersgd also its Q, replicated state (every node's checkpoint of
 * an iteration holds the same), written only beside a residual. */
typedef struct {
    int64_t node; /* the id of the node whose roundings dropped it */
    float *data;  /* n_params floats; NULL: no residual */
    float *q;     /* n_q floats of Q; NULL: none (ckpt_load allocates it: the caller frees) */
    uint64_t n_q;
} ckpt_residual;

/* Write meta, params (n_params), opt_state (n_params), split (n_nodes) and, when res is not
 * NULL and res->data is set, the residual (n_params) and, when res->q is set too, Q (n_q) to
 * `path`. */
hr_status ckpt_save(const char *path, const ckpt_meta *meta, const float *params,
                    const float *opt_state, const int64_t *split, const ckpt_residual *res,
                    char *err, size_t errlen);

/* Read `path` into params, opt_state and split (each sized as in `expect`) and, when the file
 * holds a residual and res is not NULL, into res->data (n_params floats, the caller's) with
 * res->node, and its Q (when it holds one) into res->q, allocated (the caller frees; NULL and
 * n_q 0 without one); a file without a residual sets res->node to -1 and leaves res->data
 * alone. Refuses a file
 * whose model, n_params, seed, global batch or (where both give them) n_samples or shape
 * differ from `expect` (HR_ERR_MISMATCH; a shape's message names both, e.g. 784-512-512-10),
 * a bad or truncated file (HR_ERR_DATA), and one that cannot be read (HR_ERR_IO: not a regular
 * file, or a read error, which is never called a bad file). On success expect->iter and
 * expect->n_nodes hold the file's values; a file with a different n_nodes leaves `split`
 * alone. Version 1 files (before
 * residuals) are read as files without one, version 2 files (before Q) as files without Q,
 * files before version 4 with n_samples 0 and files before version 5 with no shape. */
hr_status ckpt_load(const char *path, ckpt_meta *expect, float *params, float *opt_state,
                    int64_t *split, int max_nodes, ckpt_residual *res, char *err, size_t errlen);

#endif
