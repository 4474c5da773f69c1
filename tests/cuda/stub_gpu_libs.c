/*
 * stub_gpu_libs.c: stand-ins for the GPU libraries, for cuda.libs (test_gpu_libs.sh), so the
 * version checks of a CUDA build's start-up run on machines without a GPU: built as a
 * libcuda.so.1 whose cuDriverGetVersion reports STUB_DRIVER, and as a libcublas.so.N whose
 * cublasGetProperty reports major version STUB_BLAS_MAJOR. Nothing else is defined, so a
 * process that got further than the checks would fail at the first missing function.
 */
int cuDriverGetVersion(int *v);
int cublasGetProperty(int type, int *v);

#ifdef STUB_DRIVER
int cuDriverGetVersion(int *v) {
    *v = STUB_DRIVER;
    return 0;
}
#endif

#ifdef STUB_BLAS_MAJOR
int cublasGetProperty(int type, int *v) { /* 0: MAJOR_VERSION, 1: MINOR, 2: PATCH */
    *v = type == 0 ? STUB_BLAS_MAJOR : 0;
    return 0;
}
#endif
