/*
 * data.h: datasets, the per-epoch global permutation and batch slices (DESIGN.md I1).
 *
 * A data_set holds n samples of one shape, as bytes (images, scaled to [0, 1] when gathered)
 * or floats (CSV, regression features), with integer labels or float targets.
 *
 * I1: epoch e has a permutation perm_e of [0, n) that depends on (seed, e) only. Iteration i
 * of epoch e uses perm_e[i*B, (i+1)*B); a node whose slice starts at `start` with `b` samples
 * takes perm_e[i*B + start, i*B + start + b). The last n mod B samples of an epoch are not
 * used (every iteration has exactly B samples). How a batch is split never changes which
 * samples it holds.
 *
 * Synthetic sets are pure functions of (seed, sample index): the same seed gives the same
 * bytes, and the held-out split uses a separate stream so it never overlaps the training set.
 * `hetring gen-data` writes them as MNIST IDX, CIFAR-10 binary or CSV, and the loaders
 * (data_io.h) read those back bit for bit.
 */
#ifndef HR_DATA_H
#define HR_DATA_H

#include "base/hr_status.h"

#include <stdint.h>

#define DATA_CLASSES             10   /* classes of the synthetic image sets */
#define DATA_REGRESSION_FEATURES 16   /* inputs of the synthetic regression set */
#define DATA_REGRESSION_NOISE    0.1f /* its noise standard deviation: the MSE floor is 0.01 */

/* The datasets a config can ask for. */
typedef enum {
    DATA_SYNTHETIC,            /* image-like classification set, 28x28x1, 10 classes */
    DATA_SYNTHETIC_RGB,        /* the same at 32x32x3 */
    DATA_SYNTHETIC_REGRESSION, /* linear target plus Gaussian noise */
    DATA_MNIST,                /* IDX files (optionally .gz) in a directory */
    DATA_CIFAR10,              /* CIFAR-10 binary batches in a directory */
    DATA_CSV                   /* a CSV file, or a directory with train.csv and test.csv */
} data_kind;

typedef struct {
    long n;        /* samples */
    int c, h, w;   /* shape per sample (C, H, W); feature vectors are (D, 1, 1) */
    long d;        /* c*h*w */
    int n_classes; /* classes, labels in [0, n_classes); 0 for regression */
    int n_targets; /* regression outputs; 0 for classification */
    uint8_t *x8;   /* (n, d) pixels 0..255 (image sets), or NULL */
    float *xf;     /* (n, d) features (CSV, regression), or NULL */
    int32_t *y;    /* (n) labels, or NULL */
    float *t;      /* (n, n_targets) regression targets, or NULL */
} data_set;

void data_set_free(data_set *ds);

/* The bytes data_synthetic holds for n samples of `kind` (each one's pixels and label, or its
 * float features and target), so that a set the process cannot hold is refused by its key
 * before it is written page by page until the kernel kills the process. */
double data_synthetic_bytes(data_kind kind, long n);

/* The shape of a synthetic set of n samples of `kind` (n, c, h, w, d, n_classes, n_targets),
 * without the samples (x8, xf, y and t NULL): what the configuration alone decides, for the
 * checks made before any data is made. */
void data_synthetic_shape(data_set *ds, data_kind kind, long n);

/* Synthetic sets (kind is DATA_SYNTHETIC, _RGB or _REGRESSION): n training and n_eval
 * held-out samples from `seed`. */
hr_status data_synthetic(data_set *train, data_set *eval, data_kind kind, long n, long n_eval,
                         uint64_t seed, char *err, size_t errlen);

/* Copy samples idx[0..b) (or rows first..first+b when idx is NULL) into x (b, d) as floats
 * and y (b) or t (b, n_targets); y and t may be NULL when the set has none. */
void data_gather(const data_set *ds, const uint32_t *idx, long first, long b, float *x, int32_t *y,
                 float *t);

/* ---------------------------------------------------------------- I1: permutation and slices */

/* The loader does not keep B: its caller passes its global batch to every call that needs it. */
typedef struct {
    const data_set *ds; /* training set (not owned) */
    uint64_t seed;      /* permutation seed */
    long epoch;         /* epoch whose permutation is in perm, -1 for none */
    uint32_t *perm;     /* (n) perm_epoch */
} data_loader;

/* Where the slice of the node at ring position `rank` starts in its iteration's batch, for
 * the split b[0, size): start = sum of b[q], q < rank (I1). */
long data_slice_start(const long *split, int rank);

/* Refuses a set smaller than one global batch B (HR_ERR_CONFIG). */
hr_status data_loader_init(data_loader *dl, const data_set *ds, uint64_t seed, long B, char *err,
                           size_t errlen);
void data_loader_free(data_loader *dl);
/* Iterations per epoch: floor(n / B). */
long data_loader_iters_per_epoch(const data_loader *dl, long B);
/* perm_e (computed on first use of an epoch; no allocation). */
const uint32_t *data_loader_perm(data_loader *dl, long epoch);
/* The samples perm_e[iter*B + start, iter*B + start + b) into x (b, d), y (b) / t (b, T);
 * HR_ERR_INVAL unless iter < floor(n / B) and the slice lies within the batch. */
hr_status data_loader_slice(data_loader *dl, long epoch, long iter, long B, long start, long b,
                            float *x, int32_t *y, float *t);

#endif
