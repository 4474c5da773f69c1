/*
 * conv_pick.h: which cuDNN convolution algorithm a context runs (not a public header).
 *
 * cuDNN's heuristics list candidate algorithms for a shape, best first. hetring runs the first
 * one that keeps results repeatable and in plain fp32: it must be available for the shape,
 * deterministic (no atomics: the same input gives the same bits on every run), free of tensor
 * cores (no TF32 rounding), and need no more workspace than the context holds for that shape.
 * The choice is a pure function of the list, so it is tested on machines without a GPU.
 */
#ifndef HR_CONV_PICK_H
#define HR_CONV_PICK_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int algo;          /* cuDNN's enum value */
    int available;     /* the heuristics returned CUDNN_STATUS_SUCCESS for it */
    int deterministic; /* CUDNN_DETERMINISTIC */
    int tensor_op;     /* math type uses tensor cores (TF32 for fp32 data) */
    size_t workspace;  /* bytes */
} conv_algo_cand;

/* Index into cand[0..n) of the algorithm to run, or -1 when none qualifies (the caller then
 * uses im2col for the shape). */
int conv_pick(const conv_algo_cand *cand, int n, size_t workspace_limit);

#ifdef __cplusplus
}
#endif

#endif
