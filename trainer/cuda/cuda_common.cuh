/*
 * cuda_common.cuh: helpers shared by the .cu files of trainer/cuda (not a public header).
 *
 * cuBLAS and cuDNN are called through the table of cuda_libs.h (`cuda_lib.cublasSgemm(...)`),
 * filled at run time. CU_CHECK and BLAS_CHECK turn a CUDA or cuBLAS failure into HR_ERR_CUDA,
 * logging the call
 * and its file:line under the cuda subsystem; LAUNCH_CHECK does the same for the launch that
 * precedes it. Grid sizes are pure functions of the shapes, never of the device, so the
 * reduction order (and with it every bit of the result) is fixed by the input.
 */
#ifndef HR_CUDA_COMMON_CUH
#define HR_CUDA_COMMON_CUH

#include "trainer/cuda/cuda_layers.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include "trainer/cuda/cuda_check.h"
#include "trainer/cuda/cuda_libs.h"

extern "C" {
#include "base/hr_log.h"
}

#define BLAS_CHECK(call)                                                                           \
    HR_CUDA_CHECK_STATUS(cublasStatus_t, call, #call, s_ != CUBLAS_STATUS_SUCCESS,                 \
                         cuda_lib.cublasGetStatusString(s_))

#define LAUNCH_CHECK() CU_CHECK(cudaGetLastError())

/* Threads per block of the elementwise and reduction kernels (a power of two). */
#define HR_CUDA_THREADS 256

/* A grid-stride loop: `long i` takes this thread's items of [0, n), one grid's width apart. */
#define HR_CUDA_GRID_LOOP(i, n)                                                                    \
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < (n);                            \
         i += (long)gridDim.x * blockDim.x)

/* Blocks for a grid-stride loop over n items: fixed by n alone. */
static inline int hr_cuda_blocks(long n, int cap) {
    long b = (n + HR_CUDA_THREADS - 1) / HR_CUDA_THREADS;
    if (b < 1) b = 1;
    return (int)(b < cap ? b : cap);
}

/* Row-major C (M, N) = alpha op(A) op(B) + beta C through column-major cuBLAS: the
 * column-major view of a row-major matrix is its transpose, so compute C^T = op(B)^T op(A)^T
 * by swapping the operands. */
static inline hr_status hr_cuda_gemm(cuda_ctx *c, int ta, int tb, int M, int N, int K,
                                     const float *A, int lda, const float *B, int ldb, float beta,
                                     float *C, int ldc) {
    const float one = 1.0f;
    BLAS_CHECK(cuda_lib.cublasSgemm(c->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                    ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &one, B, ldb, A, lda,
                                    &beta, C, ldc));
    return HR_OK;
}

/* Block-wide sum of one value per thread (float or double) in a fixed tree order; every thread
 * gets the total. `sh` holds HR_CUDA_THREADS values. */
template <typename T> static __device__ inline T hr_block_sum(T v, T *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = HR_CUDA_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    T r = sh[0];
    __syncthreads();
    return r;
}

/* out (C) = sums of x (B, C, S) over the batch and the S positions of each channel, without
 * atomics (defined in cuda_dense.cu; linear and conv2d bias gradients). */
hr_status hr_cuda_channel_sum(cuda_ctx *c, float *out, const float *x, int B, int C, int S);

/* conv2d through cuDNN (cuda_cudnn.cu) on a context whose dnn is set: HR_ERR_UNSUPPORTED,
 * before anything is enqueued, when no algorithm qualifies for the shape (the caller then runs
 * im2col). hr_dnn_set creates (on) or destroys (off) the context's cuDNN state. */
hr_status hr_dnn_conv_forward(cuda_ctx *c, float *out, const float *in, const float *w,
                              const float *bias, int B, const conv_geom *g);
hr_status hr_dnn_conv_backward(cuda_ctx *c, float *din, float *dw, float *dbias, const float *dout,
                               const float *in, const float *w, int B, const conv_geom *g);
hr_status hr_dnn_set(cuda_ctx *c, int on, char *err, size_t errlen);

/* Sum the (nparts, 2) partials of a loss reduction into stats[0..1] (defined in
 * cuda_dense.cu, used by both loss kernels). */
hr_status hr_cuda_finish_stats(cuda_ctx *c, int nparts, double *stats);

#endif
