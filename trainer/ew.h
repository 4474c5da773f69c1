/*
 * ew.h: the element-wise math of the layers and the optimizer, written once for both devices.
 *
 * Every function here is compiled by the C compiler into the CPU layers (layers.c) and the
 * optimizer (optim.c), and by nvcc into the CUDA kernels (trainer/cuda/), so the tests that run
 * on every machine test the arithmetic a GPU runs (DESIGN.md, "The GPU path").
 *
 * Rounding: each operation rounds on its own, never fused into a multiply-add. hr_trainer is
 * built with -ffp-contract=off and hr_cuda with --fmad=false (trainer/CMakeLists.txt,
 * trainer/cuda/CMakeLists.txt), so an SGD step on a GPU gives the CPU's bits, and CPU and GPU
 * replicas that apply the same all-reduced sum stay bitwise equal (I4).
 */
#ifndef HR_EW_H
#define HR_EW_H

#include <float.h>
#include <stdint.h>

#ifdef __CUDACC__
#define HR_EW static inline __host__ __device__
#else
#define HR_EW static inline
#endif

/* ReLU of one activation. */
HR_EW float ew_relu(float x) {
    return x > 0.0f ? x : 0.0f;
}

/* ReLU's backward: the gradient w.r.t. the input from the layer's output and the gradient
 * w.r.t. it. */
HR_EW float ew_relu_grad(float out, float dout) {
    return out > 0.0f ? dout : 0.0f;
}

/* The gradient of the squared error e * e w.r.t. the prediction, e = prediction - target. */
HR_EW float ew_mse_grad(float e) {
    return 2.0f * e;
}

/* One parameter's SGD step with momentum and weight decay, from its gradient SUM over the
 * global batch (I2):
 *     g = g_sum * inv_b + wd * p;   v = mu * v + g;   p = p - lr * v
 * lr, mu, wd and inv_b = 1 / B are floats computed once per step (opt_step). */
HR_EW void ew_sgd(float *p, float *v, float g_sum, float lr, float mu, float wd, float inv_b) {
    float g = g_sum * inv_b + wd * *p;
    float vi = mu * *v + g;
    *v = vi;
    *p = *p - lr * vi;
}

/* The max-pool window of output (oy, ox) over one H x W plane (W wide), K x K at stride S: the
 * index into the plane of its largest value. Ties go to the first in row-major order, and a
 * window of -FLT_MAX values (or NaNs) to its top-left corner, so the CPU and the GPU choose the
 * same argmax and route the gradient to the same input. */
HR_EW int32_t ew_maxpool_argmax(const float *plane, int W, int K, int S, int oy, int ox) {
    float best = -FLT_MAX;
    int32_t bi = (oy * S) * W + ox * S;
    for (int ky = 0; ky < K; ky++)
        for (int kx = 0; kx < K; kx++) {
            int32_t i = (oy * S + ky) * W + ox * S + kx;
            if (plane[i] > best) best = plane[i], bi = i;
        }
    return bi;
}

#endif
