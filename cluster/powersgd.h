/*
 * powersgd.h: the arithmetic of the low-rank gradient path ([cluster] wire = powersgd), after
 * PowerSGD (Vogels et al., 2019) as PyTorch DDP's hook does it: one power iteration per step,
 * warm-started from the last step's Q.
 *
 * For a gradient matrix M (rows x cols, row-major) and Q (cols x r), every node computes its
 * P_k = M_k Q; the ring sums them (P = sum_k P_k = M Q, M the cluster's sum); every node
 * makes P's columns orthonormal, computes its q_k = M_k^T P, and the ring sums those
 * (Q' = M^T P). The step's matrix is P Q'^T = P P^T M, the projection of M on P's columns,
 * and Q' is the next step's Q. What a node's own share loses, M_k - P q_k^T, is its error
 * feedback: summed over the nodes it is exactly M - P Q'^T.
 *
 * Every function here is fixed-order C, compiled with -ffp-contract=off: the steps that each
 * node computes alone on bits every node holds (the orthonormalisation, P Q'^T) give the same
 * bits on every kind of CPU, so replicas stay identical (I4) without a BLAS whose kernels
 * differ by machine. Loops only ever vectorise across independent outputs; no sum is
 * reassociated.
 */
#ifndef HR_POWERSGD_H
#define HR_POWERSGD_H

#include <stddef.h>
#include <stdint.h>

#define PSGD_MAX_RANK    64 /* [cluster] powersgd_rank's bound (conf/cfg.h: CFG_PSGD_RANK_MAX) */
#define PSGD_MIN_FACTOR  2  /* a matrix is compressed only where it shrinks at least this much */
#define PSGD_MAX_THREADS 64 /* threads a product is split over at most */

/* A matrix of the gradient: grads[off, off + rows*cols), row-major. */
typedef struct {
    size_t off;        /* floats from the gradient's start */
    size_t rows, cols; /* its shape */
} psgd_mat;

/* Whether a rows x cols matrix is worth compressing at rank r: P and Q together at most
 * 1/PSGD_MIN_FACTOR of its floats (as DDP's hook, min_compression_rate = 2). */
int psgd_worth(size_t rows, size_t cols, int r);

/* Q's start (cols x r floats) for a view: uniform in [-1, 1) from (seed, view epoch, matrix
 * index), the same bits on every member. */
void psgd_init_q(float *q, size_t cols, int r, uint64_t seed, uint64_t epoch, int index);

/* The products below split their work over `threads` threads (the caller's among them; at
 * most PSGD_MAX_THREADS, and fewer where a part would be too small to pay for its thread; 1
 * or less: the caller's alone). Each thread computes whole output elements (rows of p and of
 * out, rows of q), each in the order the serial loop takes: the bits never depend on it. */

/* p (rows x r) = m (rows x cols) q (cols x r). */
void psgd_project(const float *m, size_t rows, size_t cols, const float *q, int r, float *p,
                  int threads);

/* Gram-Schmidt on p's r columns (rows x r, row-major), in column order: each column minus its
 * projections on the earlier ones, then divided by its norm; a column with no norm left, or
 * at most 1e-4 of what it had (P of a matrix of rank below r), becomes zero: its direction
 * carries nothing this step. */
void psgd_orthonormalize(float *p, size_t rows, int r);

/* q (cols x r) = m^T (cols x rows) p (rows x r). */
void psgd_back(const float *m, size_t rows, size_t cols, const float *p, int r, float *q,
               int threads);

/* qt (r x cols) = q^T, q (cols x r): psgd_expand's operands. */
void psgd_transpose(const float *q, size_t cols, int r, float *qt);

/* out (rows x cols) = p (rows x r) qt (r x cols), each element's sum over k in order; with lt
 * (r x cols, or NULL), also dropped = m - p lt, this node's error feedback (m may be out: a
 * row of m is read before its out is written). Where that float expression overflows while m
 * is finite (gradients near FLT_MAX), the element is computed again in double and kept within
 * [-FLT_MAX, FLT_MAX], so the residual stays finite; every other element keeps its bits. */
void psgd_expand(const float *p, const float *qt, size_t rows, size_t cols, int r, const float *m,
                 const float *lt, float *dropped, float *out, int threads);

#endif
