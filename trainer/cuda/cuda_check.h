/*
 * cuda_check.h: CU_CHECK, shared by the C and CUDA sources of trainer/cuda (not public).
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

#define CU_CHECK(call)                                                                             \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            HR_ERROR(CUDA, "%s:%d: %s: %s", __FILE__, __LINE__, #call, cudaGetErrorString(e_));    \
            return HR_ERR_CUDA;                                                                    \
        }                                                                                          \
    } while (0)

#endif
