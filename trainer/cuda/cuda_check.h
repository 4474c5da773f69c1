/*
 * cuda_check.h: CU_CHECK, shared by the C and CUDA sources of trainer/cuda (not public), and the
 * shape of the cuBLAS and cuDNN checks.
 * A failing CUDA runtime call returns HR_ERR_CUDA after logging the call and its file:line
 * under the cuda subsystem.
 */
#ifndef HR_CUDA_CHECK_H
#define HR_CUDA_CHECK_H

#include "base/hr_status.h"

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif
#include "base/hr_log.h"
#ifdef __cplusplus
}
#endif

/* The one shape of every check of a CUDA-library call: `s_` holds the call's status of `type`;
 * where `failed` holds, log `text` (the call as written), its file:line and `why` under the cuda
 * subsystem and return HR_ERR_CUDA. CU_CHECK here, BLAS_CHECK (cuda_common.cuh) and DNN_CHECK
 * (cuda_cudnn.cu) are its instances. */
#define HR_CUDA_CHECK_STATUS(type, call, text, failed, why)                                        \
    do {                                                                                           \
        type s_ = (call);                                                                          \
        if (failed) {                                                                              \
            HR_ERROR(CUDA, "%s:%d: %s: %s", __FILE__, __LINE__, text, why);                        \
            return HR_ERR_CUDA;                                                                    \
        }                                                                                          \
    } while (0)

#define CU_CHECK(call)                                                                             \
    HR_CUDA_CHECK_STATUS(cudaError_t, call, #call, s_ != cudaSuccess, cudaGetErrorString(s_))

#endif
