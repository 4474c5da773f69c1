/*
 * cuda_train_bench.c: GPU training throughput of one node: forward, backward and the SGD
 * momentum step on device, for the MLP 784-512-512-10, LeNet (28x28x1) or the small VGG
 * (32x32x3), on random data resident in pinned memory (the input copy is timed, as in
 * training). Prints samples/s; bench/py/torch_gpu_mlp.py times the same models in PyTorch.
 *
 *   cuda_train_bench [--model mlp|lenet|vgg] [--batch N] [--iters N] [--device N]
 *                    [--conv cudnn|im2col]
 *
 * --conv: the convolution implementation (default: cuDNN where the build has it, else im2col;
 * asking for cudnn on a build without it is an error).
 *
 * Exits 77 without a CUDA device.
 */
#include "tests/blas_main.h"
#include "base/hr_time.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/model_spec.h"
#include "trainer/cuda/model_cuda.h"
#include "trainer/model.h"

#include <time.h>

static int spec_for(model_spec *s, const char *name) {
    if (!strcmp(name, "mlp"))
        *s = spec_of(784, 1, 1, MODEL_LOSS_XENT, "linear 512, relu, linear 512, relu, linear 10");
    else if (!strcmp(name, "lenet"))
        *s = spec_of(1, 28, 28, MODEL_LOSS_XENT, SPEC_LENET);
    else if (!strcmp(name, "vgg"))
        *s = spec_of(3, 32, 32, MODEL_LOSS_XENT, SPEC_VGG);
    else
        return -1;
    return 0;
}

int main(int argc, char **argv) {
    test_blas_main(argv);
    const char *name = "mlp";
    long B = 512, iters = 200;
    int device = 0;
    const char *conv = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--model"))
            name = argv[i + 1];
        else if (!strcmp(argv[i], "--batch"))
            B = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--iters"))
            iters = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--device"))
            device = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--conv") &&
                 (!strcmp(argv[i + 1], "cudnn") || !strcmp(argv[i + 1], "im2col")))
            conv = argv[i + 1];
        else {
            fprintf(stderr,
                    "usage: %s [--model mlp|lenet|vgg] [--batch N] [--iters N] "
                    "[--device N] [--conv cudnn|im2col]\n",
                    argv[0]);
            return 2;
        }
    }
    CUDA_SKIP_IF_NO_DEVICE();
    model_spec s;
    if (spec_for(&s, name) || B < 1 || iters < 1) {
        fprintf(stderr, "unknown model '%s' (mlp, lenet, vgg) or bad batch/iters\n", name);
        return 2;
    }
    char err[HR_ERRLEN], desc[128], dev[256];
    model m;
    model_cuda mc;
    if (model_init(&m, &s, B, 1, err, sizeof err) != HR_OK ||
        model_cuda_init(&mc, &m, device, err, sizeof err) != HR_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    if (conv &&
        cuda_ctx_set_conv(&mc.ctx, strcmp(conv, "cudnn") ? CUDA_CONV_IM2COL : CUDA_CONV_CUDNN, err,
                          sizeof err) != HR_OK) {
        fprintf(stderr, "--conv %s: %s\n", conv, err);
        return 2;
    }
    model_describe(&m, desc, sizeof desc);
    double cap = cuda_device_capacity(device, dev, sizeof dev);
    float *x = model_cuda_host_input(&mc);
    fill_uniform(x, B * m.in_size, 3, 1, 1.0f);
    int32_t *y = xmalloc(sizeof(int32_t) * (size_t)B);
    for (long b = 0; b < B; b++) y[b] = (int32_t)(b % m.out_size);
    model_stats st;
    const float lr = 0.01f, mu = 0.9f, wd = 5e-4f, inv_b = 1.0f / (float)B;
    for (int i = 0; i < 10; i++) { /* warm-up: cuBLAS heuristics, clocks */
        HR_DIE(model_cuda_forward_backward(&mc, x, y, NULL, B, &st));
        HR_DIE(model_cuda_sgd_step(&mc, lr, mu, wd, inv_b));
    }
    double t0 = hr_now();
    for (long i = 0; i < iters; i++) {
        HR_DIE(model_cuda_forward_backward(&mc, x, y, NULL, B, &st));
        HR_DIE(model_cuda_sgd_step(&mc, lr, mu, wd, inv_b));
    }
    HR_DIE(cuda_ctx_sync(&mc.ctx)); /* the last step is queued, not yet done */
    double dt = hr_now() - t0, sps = (double)B * iters / dt;
    printf("model %s, batch %ld, %ld iterations on %s (%.1f fp32 TFLOP/s peak), conv %s\n", desc, B,
           iters, dev, cap / 1e12,
           cuda_ctx_conv(&mc.ctx) == CUDA_CONV_CUDNN ? cuda_cudnn_version() : "im2col");
    printf("samples/s %.0f  ms/iter %.3f  GFLOP/s %.0f  final loss %.4f\n", sps,
           1e3 * dt / (double)iters, sps * model_flops_per_sample(&m) / 1e9,
           st.loss_sum / (double)B);
    model_cuda_free(&mc);
    model_free(&m);
    free(y);
    return 0;
}
