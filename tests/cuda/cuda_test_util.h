/*
 * cuda_test_util.h: device helpers for the GPU tests (die on any CUDA error; tests only).
 */
#ifndef HR_CUDA_TEST_UTIL_H
#define HR_CUDA_TEST_UTIL_H

#include "trainer/cuda/cuda_layers.h"
#include "trainer/rng.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CUDA_SKIP_IF_NO_DEVICE()                                                                   \
    do {                                                                                           \
        if (cuda_device_count() < 1) {                                                             \
            printf("SKIP: no CUDA device\n");                                                      \
            return 77;                                                                             \
        }                                                                                          \
    } while (0)

/* Run call, whose status of `type` is s_; where `failed` holds, print the call and `why` and exit
 * 1. CUDA_DIE and HR_DIE are its instances. */
#define TEST_DIE_IF(type, call, text, failed, why)                                                 \
    do {                                                                                           \
        type s_ = (call);                                                                          \
        if (failed) {                                                                              \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, text, why);                     \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
#define CUDA_DIE(call)                                                                             \
    TEST_DIE_IF(cudaError_t, call, #call, s_ != cudaSuccess, cudaGetErrorString(s_))
#define HR_DIE(call) TEST_DIE_IF(hr_status, call, #call, s_ != HR_OK, hr_strerror(s_))

static inline void *xmalloc(size_t n) {
    void *p = calloc(1, n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return p;
}

/* n values uniform in [-scale, scale) from (seed, stream). */
static inline void fill_uniform(float *a, long n, uint64_t seed, uint64_t stream, float scale) {
    rng r;
    rng_init(&r, seed, stream, 0);
    for (long i = 0; i < n; i++) a[i] = (2.0f * rng_uniform(&r) - 1.0f) * scale;
}

/* The layers run on the context's stream, which is created non-blocking: it does not wait for
 * work on the legacy default stream that cudaMemset and cudaMemcpy use, and a cudaMemcpy from
 * pageable memory may return before its DMA has landed. So the helpers that write device
 * memory sync the whole device before (no kernel still reads or writes the buffer) and after
 * (the bytes are in place before the next kernel of any stream). Without that, a layer's
 * kernel could read its input before the copy landed, or see its output zeroed after it
 * wrote it (test_cuda_layers once: "linear 1x3->1 out: max abs diff 0.302", about a bias). */
static inline void dev_sync(void) {
    CUDA_DIE(cudaDeviceSynchronize());
}

static inline void *dev_alloc(size_t bytes) {
    void *p = NULL;
    CUDA_DIE(cudaMalloc(&p, bytes ? bytes : 4));
    CUDA_DIE(cudaMemset(p, 0, bytes ? bytes : 4));
    dev_sync();
    return p;
}

static inline void to_device(void *d, const void *h, size_t bytes) {
    dev_sync();
    CUDA_DIE(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    dev_sync();
}

static inline void *dev_copy(const void *h, size_t bytes) {
    void *p = dev_alloc(bytes);
    to_device(p, h, bytes);
    return p;
}

static inline void to_host(void *h, const void *d, size_t bytes) {
    dev_sync();
    CUDA_DIE(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
}

static inline double max_abs(const float *a, long n) {
    double m = 0;
    for (long i = 0; i < n; i++) m = fabs((double)a[i]) > m ? fabs((double)a[i]) : m;
    return m;
}

/* fp32 GEMM tolerance for sums of k products of values up to the reference's scale. */
static inline double gemm_tol(const float *ref, long n, long k) {
    return 2e-6 * sqrt((double)k) * (1.0 + max_abs(ref, n)) + 1e-6;
}

#endif
