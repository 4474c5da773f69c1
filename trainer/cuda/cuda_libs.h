/*
 * cuda_libs.h: the cuBLAS and cuDNN functions trainer/cuda calls, as a table filled at run
 * time (not a public header; cuda_layers.h declares cuda_libs_load and cuda_libs_describe).
 *
 * The kernels and the CUDA runtime are linked in (the static runtime, which opens the driver,
 * libcuda.so.1, itself on first use); cuBLAS and cuDNN are opened by cuda_libs_load
 * (base/hr_dl.h) when a node's device is cuda:N, so no binary has them in NEEDED and a CPU
 * process never maps them. Each field has the type of the function it points at, taken from
 * the library's own header, and its exported name (cublas_v2.h maps cublasCreate to
 * cublasCreate_v2, so `cuda_lib.cublasCreate(...)` reads as the API). The table is the
 * process's: it is filled once, under a lock, before any context exists, and never changes
 * afterwards, as the loader's own state.
 */
#ifndef HR_CUDA_LIBS_H
#define HR_CUDA_LIBS_H

#include <cublas_v2.h>
#ifdef HR_HAVE_CUDNN
#include <cudnn.h>
#endif

#define CUDA_LIBS_BLAS(X)                                                                          \
    X(cublasCreate_v2)                                                                             \
    X(cublasDestroy_v2)                                                                            \
    X(cublasSetStream_v2)                                                                          \
    X(cublasSetMathMode)                                                                           \
    X(cublasSgemm_v2)                                                                              \
    X(cublasGetStatusString)                                                                       \
    X(cublasGetProperty)

#define CUDA_LIBS_DNN(X)                                                                           \
    X(cudnnGetVersion)                                                                             \
    X(cudnnGetErrorString)                                                                         \
    X(cudnnCreate)                                                                                 \
    X(cudnnDestroy)                                                                                \
    X(cudnnSetStream)                                                                              \
    X(cudnnCreateTensorDescriptor)                                                                 \
    X(cudnnDestroyTensorDescriptor)                                                                \
    X(cudnnSetTensor4dDescriptor)                                                                  \
    X(cudnnCreateFilterDescriptor)                                                                 \
    X(cudnnDestroyFilterDescriptor)                                                                \
    X(cudnnSetFilter4dDescriptor)                                                                  \
    X(cudnnCreateConvolutionDescriptor)                                                            \
    X(cudnnDestroyConvolutionDescriptor)                                                           \
    X(cudnnSetConvolution2dDescriptor)                                                             \
    X(cudnnSetConvolutionMathType)                                                                 \
    X(cudnnGetConvolution2dForwardOutputDim)                                                       \
    X(cudnnGetConvolutionForwardAlgorithm_v7)                                                      \
    X(cudnnGetConvolutionBackwardDataAlgorithm_v7)                                                 \
    X(cudnnGetConvolutionBackwardFilterAlgorithm_v7)                                               \
    X(cudnnGetConvolutionForwardWorkspaceSize)                                                     \
    X(cudnnGetConvolutionBackwardDataWorkspaceSize)                                                \
    X(cudnnGetConvolutionBackwardFilterWorkspaceSize)                                              \
    X(cudnnConvolutionForward)                                                                     \
    X(cudnnConvolutionBackwardData)                                                                \
    X(cudnnConvolutionBackwardFilter)

/* A field: the function's own type, by its global name (C++ would not let a member reuse an
 * unqualified name it has just used). */
#ifdef __cplusplus
#define CUDA_LIBS_FIELD(f) decltype(&::f) f;
#else
#define CUDA_LIBS_FIELD(f) __typeof__(&f) f;
#endif

typedef struct {
    CUDA_LIBS_BLAS(CUDA_LIBS_FIELD) /* cuBLAS (libcublas.so.N, which brings cuBLASLt) */
#ifdef HR_HAVE_CUDNN
    CUDA_LIBS_DNN(CUDA_LIBS_FIELD) /* cuDNN (libcudnn.so.N) */
#endif
} cuda_libs;

#ifdef __cplusplus
extern "C" {
#endif
/* The table; its pointers are valid once cuda_libs_load returned HR_OK. */
extern cuda_libs cuda_lib;
#ifdef __cplusplus
}
#endif

#endif
