/*
 * test_cuda_layers.c: every CUDA layer against its CPU twin in layers.h on random inputs,
 * printing the largest absolute difference per tensor, plus bitwise determinism of the
 * backward passes (two runs, same bits). conv2d runs on both implementations, im2col and, where
 * the build has it, cuDNN. Exits 77 without a CUDA device.
 */
#include "tests/check.h"
#include "tests/blas_main.h"
#include "tests/cuda/cuda_test_util.h"
#include "trainer/layers.h"

#include <float.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static cuda_ctx ctx;

/* The device tensor d_x (n floats, copied into the host scratch h) against the CPU's x within
 * tol, named by the printf-style fmt. */
static void close_to(float *h, const float *d_x, const float *x, long n, double tol,
                     const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static void close_to(float *h, const float *d_x, const float *x, long n, double tol,
                     const char *fmt, ...) {
    char what[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    to_host(h, d_x, sizeof(float) * n);
    CHECK_CLOSE(h, x, n, tol, what);
}

/* ================================================================ linear */

static void test_linear(int B, int I, int O) {
    long nin = (long)B * I, nw = (long)O * I, nout = (long)B * O;
    float *in = xmalloc(sizeof(float) * nin), *w = xmalloc(sizeof(float) * nw);
    float *bias = xmalloc(sizeof(float) * O), *dout = xmalloc(sizeof(float) * nout);
    float *out = xmalloc(sizeof(float) * nout), *dw = xmalloc(sizeof(float) * nw);
    float *db = xmalloc(sizeof(float) * O), *din = xmalloc(sizeof(float) * nin);
    long nmax = nin > nw ? nin : nw;
    nmax = nmax > nout ? nmax : nout;
    float *g = xmalloc(sizeof(float) * nmax), *g2 = xmalloc(sizeof(float) * nw);
    fill_uniform(in, nin, 1, 1, 1.0f);
    fill_uniform(w, nw, 1, 2, 0.5f);
    fill_uniform(bias, O, 1, 3, 0.5f);
    fill_uniform(dout, nout, 1, 4, 1.0f);
    linear_forward(out, in, w, bias, B, I, O, NULL);
    linear_backward(din, dw, db, dout, in, w, B, I, O, NULL);

    float *d_in = dev_copy(in, sizeof(float) * nin), *d_w = dev_copy(w, sizeof(float) * nw);
    float *d_bias = dev_copy(bias, sizeof(float) * O);
    float *d_dout = dev_copy(dout, sizeof(float) * nout);
    float *d_out = dev_alloc(sizeof(float) * nout), *d_dw = dev_alloc(sizeof(float) * nw);
    float *d_db = dev_alloc(sizeof(float) * O), *d_din = dev_alloc(sizeof(float) * nin);
    HR_DIE(cuda_linear_forward(&ctx, d_out, d_in, d_w, d_bias, B, I, O));
    HR_DIE(cuda_linear_backward(&ctx, d_din, d_dw, d_db, d_dout, d_in, d_w, B, I, O));

    close_to(g, d_out, out, nout, gemm_tol(out, nout, I), "linear %dx%d->%d out", B, I, O);
    close_to(g, d_dw, dw, nw, gemm_tol(dw, nw, B), "linear %dx%d->%d dw", B, I, O);
    close_to(g, d_db, db, O, gemm_tol(db, O, B), "linear %dx%d->%d dbias", B, I, O);
    close_to(g, d_din, din, nin, gemm_tol(din, nin, O), "linear %dx%d->%d din", B, I, O);

    /* determinism: a second backward gives the same bits; din = NULL leaves din alone */
    to_host(g, d_dw, sizeof(float) * nw);
    HR_DIE(cuda_linear_backward(&ctx, NULL, d_dw, d_db, d_dout, d_in, d_w, B, I, O));
    to_host(g2, d_dw, sizeof(float) * nw);
    CHECK(memcmp(g, g2, sizeof(float) * nw) == 0, "linear dw differs between two runs");

    cudaFree(d_in), cudaFree(d_w), cudaFree(d_bias), cudaFree(d_dout), cudaFree(d_out);
    cudaFree(d_dw), cudaFree(d_db), cudaFree(d_din);
    free(in), free(w), free(bias), free(dout), free(out), free(dw), free(db), free(din), free(g);
    free(g2);
}

/* ================================================================ relu */

static void test_relu(long n) {
    float *in = xmalloc(sizeof(float) * n), *dout = xmalloc(sizeof(float) * n);
    float *out = xmalloc(sizeof(float) * n), *din = xmalloc(sizeof(float) * n);
    float *g = xmalloc(sizeof(float) * n);
    fill_uniform(in, n, 2, 1, 1.0f);
    fill_uniform(dout, n, 2, 2, 1.0f);
    in[0] = 0.0f;
    relu_forward(out, in, n);
    relu_backward(din, dout, out, n);
    float *d_x = dev_copy(in, sizeof(float) * n), *d_d = dev_copy(dout, sizeof(float) * n);
    HR_DIE(cuda_relu_forward(&ctx, d_x, d_x, n)); /* in place, as the models run it */
    HR_DIE(cuda_relu_backward(&ctx, d_d, d_d, d_x, n));
    close_to(g, d_x, out, n, 0.0, "relu forward (in place)");
    close_to(g, d_d, din, n, 0.0, "relu backward (in place)");
    cudaFree(d_x), cudaFree(d_d);
    free(in), free(dout), free(out), free(din), free(g);
}

/* ================================================================ conv2d */

/* conv2d on the device with implementation `impl` against the CPU (out, dw, db, din), and
 * its backward pass twice (same bits). Returns 0 when the context cannot use `impl`. */
static int conv_on(cuda_conv_impl impl, const char *tag, int B, const conv_geom *g, const float *in,
                   const float *w, const float *bias, const float *dout, const float *out,
                   const float *dw, const float *db, const float *din) {
    char err[HR_ERRLEN];
    const char *name = impl == CUDA_CONV_CUDNN ? "cudnn" : "im2col";
    if (cuda_ctx_set_conv(&ctx, impl, err, sizeof err) != HR_OK) {
        printf("%s: %s not available: %s\n", tag, name, err);
        return 0;
    }
    long ckk = (long)g->C * g->K * g->K, ohw = (long)g->OH * g->OW;
    long nin = (long)B * g->C * g->H * g->W, nw = g->OC * ckk, nout = (long)B * g->OC * ohw;
    long nmax = nin > nout ? nin : nout;
    nmax = nmax > nw ? nmax : nw;
    float *h = xmalloc(sizeof(float) * nmax), *h2 = xmalloc(sizeof(float) * nmax);
    float *d_in = dev_copy(in, sizeof(float) * nin), *d_w = dev_copy(w, sizeof(float) * nw);
    float *d_bias = dev_copy(bias, sizeof(float) * g->OC);
    float *d_dout = dev_copy(dout, sizeof(float) * nout);
    float *d_out = dev_alloc(sizeof(float) * nout), *d_dw = dev_alloc(sizeof(float) * nw);
    float *d_db = dev_alloc(sizeof(float) * g->OC), *d_din = dev_alloc(sizeof(float) * nin);
    long fallbacks = ctx.conv_fallbacks;
    HR_DIE(cuda_conv2d_forward(&ctx, d_out, d_in, d_w, d_bias, B, g));
    HR_DIE(cuda_conv2d_backward(&ctx, d_din, d_dw, d_db, d_dout, d_in, d_w, B, g));

    close_to(h, d_out, out, nout, gemm_tol(out, nout, ckk), "%s %s out", tag, name);
    close_to(h, d_dw, dw, nw, gemm_tol(dw, nw, B * ohw), "%s %s dw", tag, name);
    close_to(h, d_db, db, g->OC, gemm_tol(db, g->OC, B * ohw), "%s %s dbias", tag, name);
    close_to(h, d_din, din, nin, gemm_tol(din, nin, (long)g->OC * g->K * g->K), "%s %s din", tag,
             name);

    /* determinism of the batch reductions (im2col: col2im; cuDNN: its algorithm choice) */
    to_host(h, d_out, sizeof(float) * nout);
    HR_DIE(cuda_conv2d_forward(&ctx, d_out, d_in, d_w, d_bias, B, g));
    to_host(h2, d_out, sizeof(float) * nout);
    CHECK(memcmp(h, h2, sizeof(float) * nout) == 0, "%s %s: out differs between runs", tag, name);
    to_host(h, d_din, sizeof(float) * nin);
    HR_DIE(cuda_conv2d_backward(&ctx, d_din, d_dw, d_db, d_dout, d_in, d_w, B, g));
    to_host(h2, d_din, sizeof(float) * nin);
    CHECK(memcmp(h, h2, sizeof(float) * nin) == 0, "%s %s: din differs between runs", tag, name);
    to_host(h, d_dw, sizeof(float) * nw);
    HR_DIE(cuda_conv2d_backward(&ctx, NULL, d_dw, d_db, d_dout, d_in, d_w, B, g));
    to_host(h2, d_dw, sizeof(float) * nw);
    CHECK(memcmp(h, h2, sizeof(float) * nw) == 0, "%s %s: dw differs between runs", tag, name);
    /* a context on cuDNN ran every call of this shape there, not on the im2col fallback */
    if (impl == CUDA_CONV_CUDNN)
        CHECK(ctx.conv_fallbacks == fallbacks, "%s: %ld call(s) fell back to im2col", tag,
              ctx.conv_fallbacks - fallbacks);

    cudaFree(d_in), cudaFree(d_w), cudaFree(d_bias), cudaFree(d_dout), cudaFree(d_out);
    cudaFree(d_dw), cudaFree(d_db), cudaFree(d_din);
    free(h), free(h2);
    return 1;
}

/* Each implementation against the CPU's conv2d; where the build has cuDNN, the cuDNN path
 * must run (it is the default). */
static void test_conv(int B, int C, int H, int W, int OC, int K, int S, int P) {
    conv_geom g = {C, H, W, OC, K, S, P, (H + 2 * P - K) / S + 1, (W + 2 * P - K) / S + 1};
    char tag[64];
    snprintf(tag, sizeof tag, "conv B%d %dx%dx%d k%d s%d p%d ->%d", B, C, H, W, K, S, P, OC);
    long ckk = (long)C * K * K, ohw = (long)g.OH * g.OW;
    long nin = (long)B * C * H * W, nw = OC * ckk, nout = (long)B * OC * ohw;
    float *in = xmalloc(sizeof(float) * nin), *w = xmalloc(sizeof(float) * nw);
    float *bias = xmalloc(sizeof(float) * OC), *dout = xmalloc(sizeof(float) * nout);
    float *out = xmalloc(sizeof(float) * nout), *dw = xmalloc(sizeof(float) * nw);
    float *db = xmalloc(sizeof(float) * OC), *din = xmalloc(sizeof(float) * nin);
    float *col = xmalloc(sizeof(float) * ckk * ohw), *dcol = xmalloc(sizeof(float) * ckk * ohw);
    fill_uniform(in, nin, 3, 1, 1.0f);
    fill_uniform(w, nw, 3, 2, 0.3f);
    fill_uniform(bias, OC, 3, 3, 0.3f);
    fill_uniform(dout, nout, 3, 4, 1.0f);
    conv2d_forward(out, in, w, bias, B, &g, col, NULL);
    conv2d_backward(din, dw, db, dout, in, w, B, &g, col, dcol, NULL);

    CHECK(conv_on(CUDA_CONV_IM2COL, tag, B, &g, in, w, bias, dout, out, dw, db, din),
          "%s: im2col must always be available", tag);
    int dnn = conv_on(CUDA_CONV_CUDNN, tag, B, &g, in, w, bias, dout, out, dw, db, din);
#ifdef HR_HAVE_CUDNN
    CHECK(dnn, "%s: the build has cuDNN but the context cannot use it", tag);
#else
    CHECK(!dnn, "%s: a build without cuDNN accepted CUDA_CONV_CUDNN", tag);
#endif
    free(in), free(w), free(bias), free(dout), free(out), free(dw), free(db), free(din);
    free(col), free(dcol);
}

/* ================================================================ max-pool */

static void test_maxpool(int B, int C, int H, int W, int K, int S) {
    int OH = (H - K) / S + 1, OW = (W - K) / S + 1;
    long nin = (long)B * C * H * W, nout = (long)B * C * OH * OW;
    float *in = xmalloc(sizeof(float) * nin), *dout = xmalloc(sizeof(float) * nout);
    float *out = xmalloc(sizeof(float) * nout), *din = xmalloc(sizeof(float) * nin);
    int32_t *am = xmalloc(sizeof(int32_t) * nout), *gam = xmalloc(sizeof(int32_t) * nout);
    float *h = xmalloc(sizeof(float) * nin);
    fill_uniform(in, nin, 4, 1, 1.0f);
    for (long i = 0; i < nin; i++) in[i] = floorf(in[i] * 3.0f); /* many ties */
    in[0] = -FLT_MAX;
    fill_uniform(dout, nout, 4, 2, 1.0f);
    maxpool_forward(out, am, in, B, C, H, W, K, S);
    maxpool_backward(din, dout, am, B, C, H, W, K, S);
    float *d_in = dev_copy(in, sizeof(float) * nin), *d_dout = dev_copy(dout, sizeof(float) * nout);
    float *d_out = dev_alloc(sizeof(float) * nout), *d_din = dev_alloc(sizeof(float) * nin);
    int32_t *d_am = dev_alloc(sizeof(int32_t) * nout);
    HR_DIE(cuda_maxpool_forward(&ctx, d_out, d_am, d_in, B, C, H, W, K, S));
    HR_DIE(cuda_maxpool_backward(&ctx, d_din, d_dout, d_am, B, C, H, W, K, S));
    close_to(h, d_out, out, nout, 0.0, "maxpool %dx%d k%d s%d out", H, W, K, S);
    to_host(gam, d_am, sizeof(int32_t) * nout);
    CHECK(memcmp(am, gam, sizeof(int32_t) * nout) == 0, "maxpool %dx%d k%d s%d: argmax differs", H,
          W, K, S);
    close_to(h, d_din, din, nin, 0.0, "maxpool %dx%d k%d s%d din", H, W, K, S);
    cudaFree(d_in), cudaFree(d_dout), cudaFree(d_out), cudaFree(d_din), cudaFree(d_am);
    free(in), free(dout), free(out), free(din), free(am), free(gam), free(h);
}

/* ================================================================ losses */

static void test_xent(int B, int C) {
    long n = (long)B * C;
    float *z = xmalloc(sizeof(float) * n), *d = xmalloc(sizeof(float) * n);
    float *h = xmalloc(sizeof(float) * n);
    int32_t *y = xmalloc(sizeof(int32_t) * B);
    fill_uniform(z, n, 5, 1, 4.0f);
    rng r;
    rng_init(&r, 5, 2, 0);
    for (int b = 0; b < B; b++) y[b] = (int32_t)rng_below(&r, (uint64_t)C);
    double loss = 0;
    long correct = 0;
    softmax_xent(d, z, y, B, C, &loss, &correct);
    float *d_z = dev_copy(z, sizeof(float) * n), *d_d = dev_alloc(sizeof(float) * n);
    int32_t *d_y = dev_copy(y, sizeof(int32_t) * B);
    double *d_st = dev_alloc(sizeof(double) * 2), st[2];
    HR_DIE(cuda_softmax_xent(&ctx, d_d, d_z, d_y, B, C, d_st));
    to_host(h, d_d, sizeof(float) * n);
    to_host(st, d_st, sizeof st);
    char what[64];
    snprintf(what, sizeof what, "softmax xent B%d C%d dlogits", B, C);
    CHECK_CLOSE(h, d, n, 1e-6, what);
    printf("softmax xent B%d C%d: loss %.9g vs %.9g, correct %ld vs %ld\n", B, C, st[0], loss,
           (long)st[1], correct);
    CHECK(fabs(st[0] - loss) <= 1e-9 * (1 + fabs(loss)), "xent loss %.12g vs %.12g", st[0], loss);
    CHECK((long)st[1] == correct, "xent correct %ld vs %ld", (long)st[1], correct);
    HR_DIE(cuda_softmax_xent(&ctx, NULL, d_z, d_y, B, C, d_st)); /* evaluation form */
    double st2[2];
    to_host(st2, d_st, sizeof st2);
    CHECK(st2[0] == st[0] && st2[1] == st[1], "xent without dlogits gives other stats");
    cudaFree(d_z), cudaFree(d_d), cudaFree(d_y), cudaFree(d_st);
    free(z), free(d), free(h), free(y);
}

static void test_mse(int B, int T) {
    long n = (long)B * T;
    float *yv = xmalloc(sizeof(float) * n), *t = xmalloc(sizeof(float) * n);
    float *d = xmalloc(sizeof(float) * n), *h = xmalloc(sizeof(float) * n);
    fill_uniform(yv, n, 6, 1, 2.0f);
    fill_uniform(t, n, 6, 2, 2.0f);
    double loss = 0;
    mse_loss(d, yv, t, B, T, &loss);
    float *d_y = dev_copy(yv, sizeof(float) * n), *d_t = dev_copy(t, sizeof(float) * n);
    float *d_d = dev_alloc(sizeof(float) * n);
    double *d_st = dev_alloc(sizeof(double) * 2), st[2];
    HR_DIE(cuda_mse_loss(&ctx, d_d, d_y, d_t, B, T, d_st));
    to_host(h, d_d, sizeof(float) * n);
    to_host(st, d_st, sizeof st);
    CHECK_CLOSE(h, d, n, 0.0, "mse dy");
    printf("mse B%d T%d: loss %.12g vs %.12g\n", B, T, st[0], loss);
    CHECK(fabs(st[0] - loss) <= 1e-12 * (1 + loss), "mse loss %.15g vs %.15g", st[0], loss);
    cudaFree(d_y), cudaFree(d_t), cudaFree(d_d), cudaFree(d_st);
    free(yv), free(t), free(d), free(h);
}

int main(int argc, char **argv) {
    (void)argc;
    test_blas_main(argv);
    CUDA_SKIP_IF_NO_DEVICE();
    char err[HR_ERRLEN];
    if (cuda_ctx_init(&ctx, 0, err, sizeof err) != HR_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    char name[256];
    double cap = cuda_device_capacity(0, name, sizeof name);
    printf("device 0: %s, %.1f fp32 TFLOP/s peak; %s\n", name, cap / 1e12, cuda_cudnn_version());
#ifdef HR_HAVE_CUDNN
    CHECK(cuda_ctx_conv(&ctx) == CUDA_CONV_CUDNN, "a context of a cuDNN build starts on im2col");
#endif

    /* HR_CUDA_TEST_SMALL=1 leaves out the large shapes, for compute-sanitizer's racecheck,
     * which runs cuDNN's convolutions at batch 128 for minutes: the small shapes run the same
     * kernels (verify.sh's sanitizer check; ctest and the other tools run every shape) */
    const char *small_env = getenv("HR_CUDA_TEST_SMALL");
    int large = !(small_env && strcmp(small_env, "1") == 0);
    if (!large) printf("HR_CUDA_TEST_SMALL=1: the large shapes are left out\n");
    test_linear(37, 129, 65);
    if (large) test_linear(512, 784, 512);
    test_linear(1, 3, 1);
    test_relu(100003);
    test_conv(5, 1, 28, 28, 6, 5, 1, 2);
    test_conv(4, 3, 11, 9, 5, 3, 2, 1);
    test_conv(3, 6, 14, 14, 16, 5, 1, 0);
    test_conv(2, 2, 7, 7, 4, 3, 3, 2);
    if (large) {
        test_conv(128, 16, 32, 32, 32, 3, 1, 1); /* more than one chunk of the workspace */
        test_conv(512, 16, 16, 16, 32, 3, 1, 1); /* VGG's second block at batch 512 */
    }
    test_conv(1, 3, 32, 32, 16, 3, 1, 1); /* the smallest batch: the least workspace */
    test_maxpool(3, 4, 9, 8, 2, 2);
    test_maxpool(2, 3, 11, 11, 3, 2);
    test_xent(300, 10);
    test_xent(7, 1000);
    test_mse(50, 3);
    if (large) test_mse(100000, 1);

    cuda_ctx_free(&ctx);
    return check_exit();
}
