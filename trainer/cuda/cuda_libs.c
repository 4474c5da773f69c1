/*
 * cuda_libs.c: the GPU libraries of trainer/cuda, opened at run time (cuda_libs.h): the CUDA
 * driver (libcuda.so.1, checked here so that a missing or old driver is named at start-up; the
 * static CUDA runtime opens it again on first use), cuBLAS and, in builds with it, cuDNN.
 * cuda_libs_load opens and checks them once per process and keeps them; cuda_libs_describe
 * opens each, asks its version and closes it again (`hetring version`).
 */
#include "trainer/cuda/cuda_libs.h"

#include "base/hr_dl.h"
#include "base/hr_log.h"
#include "trainer/cuda/cuda_layers.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>

#define STR_(x) #x
#define STR(x)  STR_(x)

cuda_libs cuda_lib;

/* ================================================================ versions */

static hr_status driver_version(void *h, char *ver, size_t len, char *err, size_t errlen) {
    int (*get)(int *) = NULL;
    hr_dl_sym sym = {"cuDriverGetVersion", 0};
    HR_CHECK(hr_dl_bind(h, "the CUDA driver", &sym, 1, (void *)&get, err, errlen));
    int v = 0, need = CUDART_VERSION / 1000 * 1000, rc = get(&v);
    if (rc != 0)
        return hr_fail(err, errlen, HR_ERR_UNSUPPORTED, "cuDriverGetVersion failed (error %d)", rc);
    snprintf(ver, len, "CUDA %d.%d", v / 1000, v % 1000 / 10);
    if (v < need)
        return hr_fail(err, errlen, HR_ERR_UNSUPPORTED,
                       "the driver supports CUDA %d.%d, this build's runtime is CUDA %d.%d: "
                       "update the NVIDIA driver",
                       v / 1000, v % 1000 / 10, CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
    return HR_OK;
}

static hr_status blas_version(void *h, char *ver, size_t len, char *err, size_t errlen) {
    cublasStatus_t (*get)(libraryPropertyType, int *) = NULL;
    hr_dl_sym sym = {"cublasGetProperty", 0};
    HR_CHECK(hr_dl_bind(h, "cuBLAS", &sym, 1, (void *)&get, err, errlen));
    int v[3] = {0, 0, 0};
    if (get(MAJOR_VERSION, &v[0]) || get(MINOR_VERSION, &v[1]) || get(PATCH_LEVEL, &v[2]))
        return hr_fail(err, errlen, HR_ERR_UNSUPPORTED, "cublasGetProperty failed");
    snprintf(ver, len, "cuBLAS %d.%d.%d", v[0], v[1], v[2]);
    if (v[0] != CUBLAS_VER_MAJOR)
        return hr_fail(err, errlen, HR_ERR_UNSUPPORTED, "%s, but this build needs cuBLAS %d.x", ver,
                       CUBLAS_VER_MAJOR);
    return HR_OK;
}

#ifdef HR_HAVE_CUDNN
static hr_status dnn_version(void *h, char *ver, size_t len, char *err, size_t errlen) {
    size_t (*get)(void) = NULL;
    hr_dl_sym sym = {"cudnnGetVersion", 0};
    HR_CHECK(hr_dl_bind(h, "cuDNN", &sym, 1, (void *)&get, err, errlen));
    size_t n = get();
    snprintf(ver, len, "cuDNN %zu.%zu.%zu", n / 10000, n / 100 % 100, n % 100);
    if (n / 10000 != CUDNN_MAJOR)
        return hr_fail(err, errlen, HR_ERR_UNSUPPORTED, "%s, but this build needs cuDNN %d.x", ver,
                       CUDNN_MAJOR);
    return HR_OK;
}
#endif

#define CUDA_LIBS_SYM(f) {#f, offsetof(cuda_libs, f)},
#define N_SYMS(a)        ((int)(sizeof a / sizeof a[0]))

static const hr_dl_sym blas_syms[] = {CUDA_LIBS_BLAS(CUDA_LIBS_SYM)};
#ifdef HR_HAVE_CUDNN
static const hr_dl_sym dnn_syms[] = {CUDA_LIBS_DNN(CUDA_LIBS_SYM)};
#endif

enum { LIB_DRIVER, LIB_BLAS, LIB_DNN };

static const hr_dl_lib libs[] = {
    {"CUDA driver", {"libcuda.so.1", "libcuda.so"}, driver_version, NULL, 0},
    {"cuBLAS",
     {"libcublas.so." STR(CUBLAS_VER_MAJOR), "libcublas.so"},
     blas_version,
     blas_syms,
     N_SYMS(blas_syms)},
#ifdef HR_HAVE_CUDNN
    {"cuDNN",
     {"libcudnn.so." STR(CUDNN_MAJOR), "libcudnn.so"},
     dnn_version,
     dnn_syms,
     N_SYMS(dnn_syms)},
#endif
};
#define N_LIBS ((int)(sizeof libs / sizeof libs[0]))

/* ================================================================ load */

static hr_status load_all(char *err, size_t errlen) {
    return hr_dl_load(libs, N_LIBS, &cuda_lib, sizeof cuda_lib, HR_SUB_CUDA, err, errlen);
}

hr_status cuda_libs_load(char *err, size_t errlen) {
    static hr_dl_once once = HR_DL_ONCE_INIT;
    return hr_dl_once_run(&once, load_all, err, errlen);
}

/* ================================================================ describe */

void cuda_libs_describe(char *out, size_t len) {
    hr_dl_describe(libs, N_LIBS, out, len);
}

const char *cuda_cudnn_version(void) {
#ifdef HR_HAVE_CUDNN
    static _Thread_local char v[HR_ERRLEN];
    char why[HR_ERRLEN];
    void *h = hr_dl_open_checked(&libs[LIB_DNN], v, sizeof v, why, sizeof why);
    if (!h) snprintf(v, sizeof v, "%s", why);
    hr_dl_close(h);
    return v;
#else
    return "none (built without cuDNN)";
#endif
}
