/*
 * test_layers.c: every layer's gradients against central finite differences in double.
 *
 * The analytic gradients come from the float model (model_forward_backward). The numeric
 * ones come from a double-precision re-implementation of the forward pass in this file,
 * differenced with h = 1e-6, so the comparison measures the float backward pass and not
 * float rounding in the differences. Each model puts the layer under test in front of
 * others, so the input gradients of every layer are exercised through the parameter
 * gradients upstream of it. Target: relative error < 1e-3.
 */
#include "tests/check.h"
#include "tests/blas_main.h"
#include "tests/model_spec.h"
#include "trainer/layers.h"
#include "trainer/model.h"
#include "trainer/rng.h"

#include <float.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- double reference */

/* Loss of the model in double, with the parameters p (n_params doubles). */
static double ref_loss(const model *m, const double *p, const float *x, const int32_t *y,
                       const float *t, int B) {
    long maxsz = m->in_size;
    for (int i = 0; i < m->n_layers; i++)
        if (m->layers[i].out_size > maxsz) maxsz = m->layers[i].out_size;
    double *a = malloc(sizeof *a * (size_t)(B * maxsz)),
           *o = malloc(sizeof *o * (size_t)(B * maxsz));
    for (long i = 0; i < B * m->in_size; i++) a[i] = x[i];
    for (int l = 0; l < m->n_layers; l++) {
        const model_layer *L = &m->layers[l];
        const double *w = p + L->w_off, *bias = p + L->b_off;
        for (int b = 0; b < B; b++) {
            const double *in = a + b * L->in_size;
            double *out = o + b * L->out_size;
            switch (L->kind) {
            case LAYER_LINEAR:
                for (int j = 0; j < L->out_c; j++) {
                    double s = bias[j];
                    for (long i = 0; i < L->in_size; i++) s += w[j * L->in_size + i] * in[i];
                    out[j] = s;
                }
                break;
            case LAYER_CONV2D: {
                const conv_geom *g = &L->g;
                for (int oc = 0; oc < g->OC; oc++)
                    for (int oy = 0; oy < g->OH; oy++)
                        for (int ox = 0; ox < g->OW; ox++) {
                            double s = bias[oc];
                            for (int c = 0; c < g->C; c++)
                                for (int ky = 0; ky < g->K; ky++)
                                    for (int kx = 0; kx < g->K; kx++) {
                                        int yy = oy * g->S - g->P + ky, xx = ox * g->S - g->P + kx;
                                        if (yy < 0 || yy >= g->H || xx < 0 || xx >= g->W) continue;
                                        s += w[((oc * g->C + c) * g->K + ky) * g->K + kx] *
                                             in[(c * g->H + yy) * g->W + xx];
                                    }
                            out[(oc * g->OH + oy) * g->OW + ox] = s;
                        }
                break;
            }
            case LAYER_RELU:
                for (long i = 0; i < L->out_size; i++) out[i] = in[i] > 0 ? in[i] : 0;
                break;
            case LAYER_MAXPOOL:
                for (int c = 0; c < L->out_c; c++)
                    for (int oy = 0; oy < L->out_h; oy++)
                        for (int ox = 0; ox < L->out_w; ox++) {
                            double best = -DBL_MAX;
                            for (int ky = 0; ky < L->k; ky++)
                                for (int kx = 0; kx < L->k; kx++) {
                                    double v = in[(c * L->in_h + oy * L->stride + ky) * L->in_w +
                                                  ox * L->stride + kx];
                                    if (v > best) best = v;
                                }
                            out[(c * L->out_h + oy) * L->out_w + ox] = best;
                        }
                break;
            case LAYER_FLATTEN:
                memcpy(out, in, sizeof *out * (size_t)L->out_size);
                break;
            }
        }
        double *tmp = a;
        a = o, o = tmp;
    }
    double loss = 0;
    for (int b = 0; b < B; b++) {
        const double *z = a + b * m->out_size;
        if (m->loss == MODEL_LOSS_XENT) {
            double mx = z[0], s = 0;
            for (long c = 1; c < m->out_size; c++) mx = z[c] > mx ? z[c] : mx;
            for (long c = 0; c < m->out_size; c++) s += exp(z[c] - mx);
            loss += log(s) + mx - z[y[b]];
        } else {
            for (long c = 0; c < m->out_size; c++) {
                double e = z[c] - t[b * m->out_size + c];
                loss += e * e;
            }
        }
    }
    free(a), free(o);
    return loss;
}

/* ---------------------------------------------------------------- the check */

static void gradcheck(const char *name, const model_spec *s, int B, long max_checked) {
    model m;
    char err[HR_ERRLEN];
    CHECK(model_init(&m, s, B, 42, err, sizeof err) == HR_OK, "%s", err);
    /* backward writes into a lent gradient buffer and nothing around it */
    float *lent = malloc(sizeof *lent * (size_t)(m.n_params + 6));
    for (long i = 0; i < m.n_params + 6; i++) lent[i] = 123.0f;
    CHECK(model_lend_grads(&m, lent + 3, err, sizeof err) == HR_OK, "%s", err);
    CHECK(m.grads == lent + 3 && lent[3] == 0.0f && lent[2 + m.n_params] == 0.0f,
          "%s: the lent buffer does not hold the model's zeroed gradient", name);
    rng r;
    rng_init(&r, 7, 1, 0);
    /* non-zero biases so that ReLU and pooling see a mix of signs */
    for (long i = 0; i < m.n_params; i++)
        if (m.params[i] == 0.0f) m.params[i] = 0.2f * (rng_uniform(&r) - 0.5f);
    float *x = malloc(sizeof *x * (size_t)(B * m.in_size));
    float *t = malloc(sizeof *t * (size_t)(B * m.out_size));
    int32_t *y = malloc(sizeof *y * (size_t)B);
    for (long i = 0; i < B * m.in_size; i++) x[i] = 2.0f * rng_uniform(&r) - 1.0f;
    for (long i = 0; i < B * m.out_size; i++) t[i] = 2.0f * rng_uniform(&r) - 1.0f;
    for (int b = 0; b < B; b++) y[b] = (int32_t)rng_below(&r, (uint64_t)m.out_size);

    model_stats st;
    CHECK(model_forward_backward(&m, x, y, t, B, &st) == HR_OK, "forward_backward");
    for (int k = 0; k < 3; k++)
        CHECK(lent[k] == 123.0f && lent[3 + m.n_params + k] == 123.0f,
              "%s: backward wrote around the lent gradient", name);

    double *p = malloc(sizeof *p * (size_t)m.n_params);
    for (long i = 0; i < m.n_params; i++) p[i] = m.params[i];
    double l0 = ref_loss(&m, p, x, y, t, B);
    CHECK(fabs(l0 - st.loss_sum) <= 1e-4 * fmax(1.0, fabs(l0)), "%s: loss %.9g vs double %.9g",
          name, st.loss_sum, l0);

    /* every parameter, or an evenly spaced subset of large models */
    long stride = m.n_params > max_checked ? m.n_params / max_checked : 1;
    double dd = 0, nn = 0, aa = 0, maxd = 0, maxn = 0;
    long n = 0;
    for (long i = 0; i < m.n_params; i += stride, n++) {
        const double h = 1e-6;
        double keep = p[i];
        p[i] = keep + h;
        double lp = ref_loss(&m, p, x, y, t, B);
        p[i] = keep - h;
        double lm = ref_loss(&m, p, x, y, t, B);
        p[i] = keep;
        double num = (lp - lm) / (2 * h), ana = m.grads[i];
        dd += (num - ana) * (num - ana), nn += num * num, aa += ana * ana;
        if (fabs(num - ana) > maxd) maxd = fabs(num - ana);
        if (fabs(num) > maxn) maxn = fabs(num);
    }
    double rel = sqrt(dd) / fmax(1e-12, fmax(sqrt(nn), sqrt(aa)));
    double relmax = maxd / fmax(1e-12, maxn);
    printf("%-28s %6ld params, %5ld checked: rel err (norm) %.2e, max |diff|/max|grad| %.2e\n",
           name, m.n_params, n, rel, relmax);
    CHECK(rel < 1e-3 && relmax < 1e-3, "%s: gradient relative error %.3g / %.3g", name, rel,
          relmax);
    CHECK(nn > 0, "%s: all-zero gradient, the check would be vacuous", name);
    free(p), free(x), free(t), free(y);
    /* taken back: the model's own buffer again, holding what the lent one held */
    CHECK(model_lend_grads(&m, NULL, err, sizeof err) == HR_OK, "%s", err);
    CHECK(m.grads != lent + 3 && !m.grads_lent &&
              memcmp(m.grads, lent + 3, sizeof *lent * (size_t)m.n_params) == 0,
          "%s: the gradient taken back differs from the lent one", name);
    free(lent);
    model_free(&m);
}

/* ---------------------------------------------------------------- max-pool ties */

/* The window scan (ew.h, which the GPU's kernel runs too) takes the first of equal values in
 * row-major order, and the top-left corner of a window of -FLT_MAX; the gradient goes there. */
static void maxpool_ties(void) {
    /* a 4x4 plane row by row; its k2 s2 windows hold four 1s, a 0 then three 2s, four -FLT_MAX,
     * and 3, 1, 1, 3 */
    const float m = -FLT_MAX;
    const float in[16] = {1, 1, 0, 2, 1, 1, 2, 2, m, m, 3, 1, m, m, 1, 3};
    const int32_t want[4] = {0, 3, 8, 10};
    const float dout[4] = {1, 2, 3, 4};
    float out[4], din[16];
    int32_t am[4];
    maxpool_forward(out, am, in, 1, 1, 4, 4, 2, 2);
    maxpool_backward(din, dout, am, 1, 1, 4, 4, 2, 2);
    for (int i = 0; i < 4; i++) {
        CHECK(am[i] == want[i], "maxpool tie: window %d chose %d, not %d", i, am[i], want[i]);
        CHECK(out[i] == in[want[i]], "maxpool tie: window %d gave %g", i, out[i]);
        CHECK(din[want[i]] == dout[i], "maxpool tie: din[%d] = %g, not %g", want[i], din[want[i]],
              dout[i]);
    }
    printf("maxpool ties                 first in row-major order, as the GPU\n");
}

int main(int argc, char **argv) {
    (void)argc;
    test_blas_main(argv);
    maxpool_ties();
    model_spec s;

    s = spec_of(7, 1, 1, MODEL_LOSS_MSE, "linear 3"); /* linear + MSE (linreg) */
    gradcheck("linear+mse", &s, 5, 1 << 20);

    s = spec_of(6, 1, 1, MODEL_LOSS_XENT, "linear 4"); /* softmax regression */
    gradcheck("linear+xent", &s, 5, 1 << 20);

    /* MLP: linear, relu, linear (din of linear, relu) */
    s = spec_of(8, 1, 1, MODEL_LOSS_XENT, "linear 9, relu, linear 7, relu, linear 5");
    gradcheck("mlp (linear, relu)", &s, 6, 1 << 20);

    /* conv with stride 2 and padding 1, flatten */
    s = spec_of(2, 7, 6, MODEL_LOSS_MSE, "conv 3 3 2 1, flatten, linear 2");
    gradcheck("conv2d s2 p1 + flatten", &s, 3, 1 << 20);

    /* conv din through a second conv; max-pool with overlapping windows (k3 s2) and k2 s2 */
    s = spec_of(2, 9, 9, MODEL_LOSS_XENT,
                "conv 3 3 1 1, relu, pool 3 2, conv 4 2 1 0, pool 2 2, flatten, linear 3");
    gradcheck("conv, relu, maxpool, conv", &s, 3, 1 << 20);

    /* the configured CNNs (subset of parameters) */
    model_config c = {.kind = MODEL_CNN, .name = "cnn", .data_name = "synthetic", .origin = ""};
    char err[HR_ERRLEN];
    CHECK(model_spec_build(&s, &c, 1, 28, 28, 10, err, sizeof err) == HR_OK, "%s", err);
    gradcheck("cnn lenet 28x28x1", &s, 2, 300);
    CHECK(model_spec_build(&s, &c, 3, 32, 32, 10, err, sizeof err) == HR_OK, "%s", err);
    gradcheck("cnn vgg 32x32x3", &s, 2, 120);
    CHECK(model_spec_build(&s, &c, 3, 28, 28, 10, err, sizeof err) == HR_ERR_CONFIG,
          "cnn on 28x28x3 must be refused");
    return check_exit();
}
