/*
 * test_cuda_model.c: the GPU executor against the CPU model on the same weights and batch:
 * loss, correct count, output and every layer's gradient (largest difference printed per
 * tensor), for the MLP, linear regression, LeNet and the small VGG. Also checks that the
 * chunked gradient download equals the whole-buffer copy bit for bit, that two passes give the
 * same bits, that the pinned input buffer works, and the upload + SGD path. Exits 77 without
 * a CUDA device.
 */
#include "tests/check.h"
#include "tests/blas_main.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/model_spec.h"
#include "trainer/cuda/model_cuda.h"
#include "trainer/model.h"

#include <stdlib.h>

static double tol_of(const float *ref, long n) {
    return 1e-4 * (1.0 + max_abs(ref, n));
}

static void run(const char *name, model_spec s, long max_batch, long B) {
    char err[HR_ERRLEN], what[128];
    model m;
    model_cuda mc;
    if (model_init(&m, &s, max_batch, 42, err, sizeof err) != HR_OK) {
        CHECK(0, "%s: model_init: %s", name, err);
        return;
    }
    if (model_cuda_init(&mc, &m, 0, err, sizeof err) != HR_OK) {
        CHECK(0, "%s: model_cuda_init: %s", name, err);
        model_free(&m);
        return;
    }
    long np = m.n_params, nx = B * m.in_size, ny = B * m.out_size;
    float *x = xmalloc(sizeof(float) * nx), *t = xmalloc(sizeof(float) * ny);
    int32_t *y = xmalloc(sizeof(int32_t) * B);
    fill_uniform(x, nx, 7, 1, 1.0f);
    fill_uniform(t, ny, 7, 2, 1.0f);
    rng r;
    rng_init(&r, 7, 3, 0);
    for (long b = 0; b < B; b++) y[b] = (int32_t)rng_below(&r, (uint64_t)m.out_size);
    const int32_t *labels = m.loss == MODEL_LOSS_XENT ? y : NULL;
    const float *targets = m.loss == MODEL_LOSS_MSE ? t : NULL;

    model_stats sc, sg;
    HR_DIE(model_forward_backward(&m, x, labels, targets, B, &sc));
    HR_DIE(model_cuda_forward_backward(&mc, x, labels, targets, B, &sg));
    printf("%s B%ld: loss %.9g vs %.9g, correct %ld vs %ld, %d grad chunks\n", name, B, sg.loss_sum,
           sc.loss_sum, sg.correct, sc.correct, model_cuda_grad_chunks(&mc));
    CHECK(fabs(sg.loss_sum - sc.loss_sum) <= 1e-5 * (1 + fabs(sc.loss_sum)), "%s: loss", name);
    CHECK(labs(sg.correct - sc.correct) <= 1, "%s: correct %ld vs %ld", name, sg.correct,
          sc.correct);

    float *out = xmalloc(sizeof(float) * ny);
    HR_DIE(model_cuda_output_to_host(&mc, out, B));
    snprintf(what, sizeof what, "%s output", name);
    CHECK_CLOSE(out, model_output(&m), ny, tol_of(model_output(&m), ny), what);

    float *g = xmalloc(sizeof(float) * (size_t)np);
    HR_DIE(model_cuda_grads_to_host(&mc, g, NULL));
    for (int i = 0; i < m.n_layers; i++) {
        const model_layer *L = &m.layers[i];
        if (!L->n_params) continue;
        long nw = L->b_off - L->w_off, nb = L->n_params - nw;
        snprintf(what, sizeof what, "%s layer %d dw", name, i);
        CHECK_CLOSE(g + L->w_off, m.grads + L->w_off, nw, tol_of(m.grads + L->w_off, nw), what);
        snprintf(what, sizeof what, "%s layer %d dbias", name, i);
        CHECK_CLOSE(g + L->b_off, m.grads + L->b_off, nb, tol_of(m.grads + L->b_off, nb), what);
    }

    /* second pass through the pinned input and the chunked download: same bits */
    memcpy(model_cuda_host_input(&mc), x, sizeof(float) * (size_t)nx);
    model_cuda_set_download(&mc, 1);
    HR_DIE(model_cuda_forward_backward(&mc, model_cuda_host_input(&mc), labels, targets, B, &sg));
    const float *hg = model_cuda_host_grads(&mc);
    for (int i = model_cuda_grad_chunks(&mc) - 1; i >= 0; i--) {
        HR_DIE(model_cuda_grad_chunk_wait(&mc, i));
        CHECK(model_cuda_grad_chunk_ready(&mc, i) == 1, "%s: chunk %d not ready after wait", name,
              i);
    }
    CHECK(memcmp(hg, g, sizeof(float) * (size_t)np) == 0,
          "%s: chunked download differs from the first pass", name);

    /* evaluation adds to the stats */
    model_stats e1 = {0}, e2 = {0};
    HR_DIE(model_forward(&m, x, labels, targets, B, &e1));
    HR_DIE(model_cuda_forward(&mc, x, labels, targets, B, &e2));
    HR_DIE(model_cuda_forward(&mc, x, labels, targets, B, &e2));
    CHECK(fabs(e2.loss_sum - 2 * e1.loss_sum) <= 2e-5 * (1 + fabs(e1.loss_sum)),
          "%s: eval loss %.9g vs 2 x %.9g", name, e2.loss_sum, e1.loss_sum);

    /* upload a summed gradient and step: p' = p - v exactly (lr 1, no momentum or decay) */
    float *v = xmalloc(sizeof(float) * (size_t)np), *p = xmalloc(sizeof(float) * (size_t)np);
    fill_uniform(v, np, 7, 4, 0.01f);
    HR_DIE(model_cuda_grads_from_host(&mc, v));
    HR_DIE(model_cuda_sgd_step(&mc, 1.0f, 0.0f, 0.0f, 1.0f));
    HR_DIE(model_cuda_to_host(&mc, MODEL_CUDA_PARAMS, p));
    long bad = 0;
    for (long i = 0; i < np; i++) bad += p[i] != m.params[i] - v[i];
    CHECK(bad == 0, "%s: %ld params differ after upload + step", name, bad);

    model_cuda_free(&mc);
    model_cuda_free(&mc); /* twice is safe */
    model_free(&m);
    free(x), free(t), free(y), free(out), free(g), free(v), free(p);
}

int main(int argc, char **argv) {
    (void)argc;
    test_blas_main(argv);
    CUDA_SKIP_IF_NO_DEVICE();
    run("mlp", spec_of(20, 1, 1, MODEL_LOSS_XENT, "linear 32, relu, linear 16, relu, linear 7"), 40,
        33);
    run("linreg", spec_of(10, 1, 1, MODEL_LOSS_MSE, "linear 3"), 64, 64);
    run("lenet", spec_of(1, 28, 28, MODEL_LOSS_XENT, SPEC_LENET), 8, 6);
    run("vgg", spec_of(3, 32, 32, MODEL_LOSS_XENT, SPEC_VGG), 8, 5);
    return check_exit();
}
