/*
 * cuda_ctx.cu: device discovery, the capacity hint, and the per-device context (stream,
 * cuBLAS handle, scratch). The context allocates only in init and in cuda_ctx_reserve, so a
 * training loop that reserves up front never allocates device memory per iteration.
 */
#include "trainer/cuda/cuda_common.cuh"

#include <stdio.h>
#include <string.h>

/* ================================================================ devices */

extern "C" int cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky "no device/driver" error */
        return 0;
    }
    return n;
}

/* fp32 FLOP per clock per SM: 2 (FMA) x fp32 lanes per SM, by compute capability. */
static int fp32_lanes_per_sm(int major, int minor) {
    switch (major) {
    case 3:
        return 192;
    case 5:
        return 128;
    case 6:
        return minor == 0 ? 64 : 128;
    case 7:
        return 64;
    case 8:
        return minor == 0 ? 64 : 128;
    default:
        return 128; /* 9.x and later */
    }
}

extern "C" double cuda_device_capacity(int device, char *name, size_t namelen) {
    int sms = 0, khz = 0, major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
        cudaGetLastError();
        if (name && namelen) name[0] = 0;
        return 0.0;
    }
    if (name && namelen) {
        cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, device) == cudaSuccess)
            snprintf(name, namelen, "%s", p.name);
        else
            name[0] = 0, cudaGetLastError(); /* a launch check must not read it later */
    }
    return (double)sms * khz * 1e3 * 2.0 * fp32_lanes_per_sm(major, minor);
}

/* ================================================================ context */

/* Start the context's convolutions on cuDNN where the build has it; say once per process
 * which implementation runs them, and why when cuDNN is built in but unusable. */
static void conv_on_cudnn(cuda_ctx *c) {
    static int said;
    char why[256] = "";
    hr_status st = hr_dnn_set(c, 1, why, sizeof why);
    if (__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED)) return;
#ifdef HR_HAVE_CUDNN
    if (st == HR_OK)
        HR_INFO(CUDA, "convolutions: %s, deterministic algorithms, fp32 without TF32",
                cuda_cudnn_version());
    else
        HR_WARN(CUDA, "convolutions: im2col and cuBLAS, because cuDNN cannot be used: %s", why);
#else
    (void)st;
    HR_DEBUG(CUDA, "convolutions: im2col and cuBLAS (built without cuDNN)");
#endif
}

extern "C" hr_status cuda_ctx_init(cuda_ctx *c, int device, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    c->device = device;
    int n = cuda_device_count();
    if (device < 0 || device >= n)
        return hr_fail(err, errlen, HR_ERR_UNSUPPORTED,
                       "cuda:%d requested, but this machine has %d CUDA device(s) (use device = "
                       "cpu or a device below %d)",
                       device, n, n);
    HR_CHECK(cuda_libs_load(err, errlen)); /* cuBLAS and cuDNN, once per process */
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (e == cudaSuccess) c->owns_stream = 1;
    if (e == cudaSuccess)
        e = cudaMalloc((void **)&c->partials, sizeof(double) * 2 * (CUDA_MAX_PARTIALS + 1));
    if (e != cudaSuccess) {
        cuda_ctx_free(c);
        return hr_fail(err, errlen, HR_ERR_CUDA, "cuda:%d: %s", device, cudaGetErrorString(e));
    }
    cublasStatus_t s = cuda_lib.cublasCreate(&c->blas);
    if (s == CUBLAS_STATUS_SUCCESS) s = cuda_lib.cublasSetStream(c->blas, c->stream);
    /* plain fp32: no TF32 tensor-core rounding, so results track the CPU's sgemm */
    if (s == CUBLAS_STATUS_SUCCESS) s = cuda_lib.cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH);
    if (s != CUBLAS_STATUS_SUCCESS) {
        cuda_ctx_free(c);
        return hr_fail(err, errlen, HR_ERR_CUDA, "cuda:%d: cuBLAS: %s", device,
                       cuda_lib.cublasGetStatusString(s));
    }
    conv_on_cudnn(c);
    return HR_OK;
}

extern "C" void cuda_ctx_free(cuda_ctx *c) {
    if (!c) return;
    if (c->blas || c->stream || c->scratch || c->partials) cudaSetDevice(c->device);
    if (c->stream) cudaStreamSynchronize(c->stream);
    hr_dnn_set(c, 0, NULL, 0);
    if (c->blas) cuda_lib.cublasDestroy(c->blas);
    if (c->scratch) cudaFree(c->scratch);
    if (c->partials) cudaFree(c->partials);
    if (c->stream && c->owns_stream) cudaStreamDestroy(c->stream);
    c->blas = NULL;
    c->scratch = NULL;
    c->partials = NULL;
    c->stream = NULL;
    c->scratch_floats = 0;
    c->owns_stream = 0;
}

extern "C" hr_status cuda_ctx_reserve(cuda_ctx *c, size_t floats) {
    if (floats <= c->scratch_floats) return HR_OK;
    CU_CHECK(cudaStreamSynchronize(c->stream));
    if (c->scratch) CU_CHECK(cudaFree(c->scratch));
    c->scratch = NULL;
    c->scratch_floats = 0;
    CU_CHECK(cudaMalloc((void **)&c->scratch, sizeof(float) * floats));
    c->scratch_floats = floats;
    return HR_OK;
}

extern "C" hr_status cuda_ctx_sync(cuda_ctx *c) {
    CU_CHECK(cudaStreamSynchronize(c->stream));
    return HR_OK;
}
