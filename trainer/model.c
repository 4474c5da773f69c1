/*
 * model.c: model construction from a spec or a model_config, and the forward/backward pass.
 *
 * Layer l reads the activation of layer l-1 (the input x for l = 0). ReLU and flatten run in
 * place: their activation and gradient buffers alias the previous layer's, which halves the
 * activation memory and the traffic of the dense models. The first layer skips its input
 * gradient, which no one needs.
 */
#include "trainer/model.h"

#include "base/hr_status.h"
#include "trainer/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *model_kind_name(int kind) {
    static const char *const names[] = {"linreg", "softmax", "mlp", "cnn"};
    return kind >= 0 && kind < (int)(sizeof names / sizeof names[0]) ? names[kind] : "?";
}

/* ================================================================ specs */

static void spec_add(model_spec *s, layer_kind kind, int units, int k, int stride, int pad) {
    int i = s->n_layers++;
    s->kind[i] = kind;
    s->units[i] = units;
    s->k[i] = k;
    s->stride[i] = stride;
    s->pad[i] = pad;
}

/* A 3x3 or 5x5 convolution of stride 1 and its ReLU. */
static void spec_conv_relu(model_spec *s, int channels, int k, int pad) {
    spec_add(s, LAYER_CONV2D, channels, k, 1, pad);
    spec_add(s, LAYER_RELU, 0, 0, 0, 0);
}

static void spec_pool(model_spec *s) {
    spec_add(s, LAYER_MAXPOOL, 0, 2, 2, 0);
}

/* The classifier of the CNNs: flatten, the hidden linear layers with their ReLUs, the outputs. */
static void spec_head(model_spec *s, const int *hidden, int n_hidden, int outputs) {
    spec_add(s, LAYER_FLATTEN, 0, 0, 0, 0);
    for (int i = 0; i < n_hidden; i++) {
        spec_add(s, LAYER_LINEAR, hidden[i], 0, 0, 0);
        spec_add(s, LAYER_RELU, 0, 0, 0, 0);
    }
    spec_add(s, LAYER_LINEAR, outputs, 0, 0, 0);
}

/* The CNN for the input shape: LeNet-5 style for 28x28x1, a small VGG for 32x32x3. */
static hr_status spec_cnn(model_spec *s, const model_config *c, const char *where, int outputs,
                          char *err, size_t errlen) {
    if (s->in_c == 1 && s->in_h == 28 && s->in_w == 28) { /* LeNet-5 style */
        static const int hidden[] = {120, 84};
        spec_conv_relu(s, 6, 5, 2);
        spec_pool(s);
        spec_conv_relu(s, 16, 5, 0);
        spec_pool(s);
        spec_head(s, hidden, 2, outputs);
    } else if (s->in_c == 3 && s->in_h == 32 && s->in_w == 32) { /* small VGG style */
        static const int widths[2] = {16, 32}, hidden[] = {128};
        for (int blk = 0; blk < 2; blk++) {
            spec_conv_relu(s, widths[blk], 3, 1);
            spec_conv_relu(s, widths[blk], 3, 1);
            spec_pool(s);
        }
        spec_head(s, hidden, 1, outputs);
    } else {
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "%s: [train] model = cnn needs 28x28x1 or 32x32x3 inputs, but the %s "
                       "data is %dx%dx%d (expected dataset = synthetic, synthetic-rgb, mnist "
                       "or cifar10)",
                       where, c->data_name, s->in_h, s->in_w, s->in_c);
    }
    return HR_OK;
}

hr_status model_spec_build(model_spec *s, const model_config *c, int in_c, int in_h, int in_w,
                           int outputs, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    s->in_c = in_c, s->in_h = in_h, s->in_w = in_w;
    long d = (long)in_c * in_h * in_w;
    s->loss = c->kind == MODEL_LINREG ? MODEL_LOSS_MSE : MODEL_LOSS_XENT;
    const char *where = c->origin && c->origin[0] ? c->origin : "configuration";
    switch (c->kind) {
    case MODEL_LINREG:
    case MODEL_SOFTMAX:
        spec_add(s, LAYER_LINEAR, outputs, 0, 0, 0);
        break;
    case MODEL_MLP:
        if (c->layers[0] != d)
            return hr_fail(err, errlen, HR_ERR_CONFIG,
                           "%s: [train] layers starts with %ld, but the %s inputs have %ld "
                           "features (expected layers = %ld,...,%d)",
                           where, c->layers[0], c->data_name, d, d, outputs);
        if (c->layers[c->n_layers - 1] != outputs)
            return hr_fail(err, errlen, HR_ERR_CONFIG,
                           "%s: [train] layers ends with %ld, but the %s data has %d classes "
                           "(expected layers = %ld,...,%d)",
                           where, c->layers[c->n_layers - 1], c->data_name, outputs, d, outputs);
        for (int i = 1; i < c->n_layers; i++) {
            spec_add(s, LAYER_LINEAR, (int)c->layers[i], 0, 0, 0);
            if (i + 1 < c->n_layers) spec_add(s, LAYER_RELU, 0, 0, 0, 0);
        }
        break;
    case MODEL_CNN:
        return spec_cnn(s, c, where, outputs, err, errlen);
    default:
        return hr_fail(err, errlen, HR_ERR_CONFIG, "%s: unknown model %d", where, (int)c->kind);
    }
    return HR_OK;
}

/* ================================================================ init and free */

/* Layer i's output shape and parameter count from its input shape (already in L), with its
 * parameters placed at params[n_params]; raises *col to the conv2d scratch it needs. */
static hr_status layer_shape(model_layer *L, const model_spec *s, int i, long n_params, long *col,
                             char *err, size_t errlen) {
    int c = L->in_c, h = L->in_h, w = L->in_w;
    switch (L->kind) {
    case LAYER_LINEAR:
        L->out_c = s->units[i], L->out_h = 1, L->out_w = 1;
        L->w_off = n_params;
        L->b_off = n_params + (long)L->out_c * L->in_size;
        L->n_params = (long)L->out_c * (L->in_size + 1);
        break;
    case LAYER_CONV2D: {
        conv_geom *g = &L->g;
        g->C = c, g->H = h, g->W = w, g->OC = s->units[i], g->K = s->k[i];
        g->S = s->stride[i] > 0 ? s->stride[i] : 1, g->P = s->pad[i];
        g->OH = (h + 2 * g->P - g->K) / g->S + 1;
        g->OW = (w + 2 * g->P - g->K) / g->S + 1;
        if (g->K < 1 || g->OH < 1 || g->OW < 1)
            return hr_fail(err, errlen, HR_ERR_INVAL, "model: conv layer %d does not fit %dx%d", i,
                           h, w);
        L->out_c = g->OC, L->out_h = g->OH, L->out_w = g->OW;
        L->w_off = n_params;
        L->b_off = n_params + (long)g->OC * c * g->K * g->K;
        L->n_params = (long)g->OC * (c * g->K * g->K + 1);
        long cs = (long)c * g->K * g->K * g->OH * g->OW;
        if (cs > *col) *col = cs;
        break;
    }
    case LAYER_MAXPOOL:
        L->k = s->k[i], L->stride = s->stride[i] > 0 ? s->stride[i] : s->k[i];
        if (L->k < 1 || h < L->k || w < L->k)
            return hr_fail(err, errlen, HR_ERR_INVAL, "model: pool layer %d does not fit %dx%d", i,
                           h, w);
        L->out_c = c, L->out_h = (h - L->k) / L->stride + 1;
        L->out_w = (w - L->k) / L->stride + 1;
        break;
    case LAYER_RELU:
        L->out_c = c, L->out_h = h, L->out_w = w;
        L->inplace = i > 0;
        break;
    case LAYER_FLATTEN:
        L->out_c = c * h * w, L->out_h = 1, L->out_w = 1;
        L->inplace = i > 0;
        break;
    }
    L->out_size = (long)L->out_c * L->out_h * L->out_w;
    return HR_OK;
}

/* Every layer's shapes and parameter offsets, then m->n_layers, out_size and n_params;
 * *col gets the conv2d scratch size (0 without conv layers). Allocates nothing. */
static hr_status model_plan(model *m, const model_spec *s, long *col, char *err, size_t errlen) {
    int c = s->in_c, h = s->in_h, w = s->in_w;
    long n_params = 0;
    *col = 0;
    for (int i = 0; i < s->n_layers; i++) {
        model_layer *L = &m->layers[i];
        L->kind = s->kind[i];
        L->in_c = c, L->in_h = h, L->in_w = w;
        L->in_size = (long)c * h * w;
        HR_CHECK(layer_shape(L, s, i, n_params, col, err, errlen));
        n_params += L->n_params;
        c = L->out_c, h = L->out_h, w = L->out_w;
    }
    m->n_layers = s->n_layers;
    m->out_size = (long)c * h * w;
    m->n_params = n_params;
    return HR_OK;
}

/* params, grads, the conv2d scratch (col floats each) and each layer's activations for max_batch samples; in-place layers share the
 * previous layer's. -1 when out of memory, leaving what was allocated for model_free. */
static int model_alloc(model *m, long col) {
    m->params = calloc((size_t)m->n_params + 1, sizeof *m->params);
    m->grads = calloc((size_t)m->n_params + 1, sizeof *m->grads);
    if (col) {
        m->col = malloc(sizeof *m->col * (size_t)col);
        m->dcol = malloc(sizeof *m->dcol * (size_t)col);
    }
    if (!m->params || !m->grads || (col && (!m->col || !m->dcol))) return -1;
    for (int i = 0; i < m->n_layers; i++) {
        model_layer *L = &m->layers[i];
        if (L->inplace) {
            L->out = m->layers[i - 1].out;
            L->dout = m->layers[i - 1].dout;
            continue;
        }
        size_t n = (size_t)(m->max_batch * L->out_size);
        L->out = malloc(sizeof *L->out * n);
        L->dout = malloc(sizeof *L->dout * n);
        if (!L->out || !L->dout) return -1;
        if (L->kind == LAYER_MAXPOOL && !(L->argmax = malloc(sizeof *L->argmax * n))) return -1;
    }
    return 0;
}

/* Initial weights (biases stay zero): a stream per layer, so a layer's init does not depend
 * on others. He-uniform for a layer feeding a ReLU, 1/sqrt(fan_in) otherwise. */
static void model_init_weights(model *m, uint64_t seed) {
    for (int i = 0; i < m->n_layers; i++) {
        const model_layer *L = &m->layers[i];
        if (!L->n_params) continue;
        long fan_in = L->kind == LAYER_LINEAR ? L->in_size : (long)L->g.C * L->g.K * L->g.K;
        int feeds_relu = i + 1 < m->n_layers && m->layers[i + 1].kind == LAYER_RELU;
        float bound = feeds_relu ? sqrtf(6.0f / (float)fan_in) : 1.0f / sqrtf((float)fan_in);
        rng r;
        rng_init(&r, seed, 0x1000 + (uint64_t)i, 0);
        float *wp = m->params + L->w_off;
        for (long j = 0; j < L->b_off - L->w_off; j++)
            wp[j] = (2.0f * rng_uniform(&r) - 1.0f) * bound;
    }
}

hr_status model_footprint(const model_spec *s, long max_batch, double *bytes, long *n_params,
                          char *err, size_t errlen) {
    model *m = calloc(1, sizeof *m);
    if (!m) return hr_fail(err, errlen, HR_ERR_NOMEM, "model: out of memory");
    long col = 0;
    hr_status st = model_plan(m, s, &col, err, errlen);
    double floats = 2.0 * ((double)m->n_params + 1) + 2.0 * (double)col;
    for (int i = 0; st == HR_OK && i < m->n_layers; i++) {
        const model_layer *L = &m->layers[i];
        double n = (double)max_batch * (double)L->out_size;
        if (!L->inplace) floats += 2 * n + (L->kind == LAYER_MAXPOOL ? n : 0);
    }
    *bytes = 4.0 * floats; /* float and int32_t alike */
    *n_params = m->n_params;
    free(m);
    return st;
}

hr_status model_init(model *m, const model_spec *s, long max_batch, uint64_t seed, char *err,
                     size_t errlen) {
    memset(m, 0, sizeof *m);
    m->spec = *s;
    m->loss = s->loss;
    m->max_batch = max_batch;
    m->in_size = (long)s->in_c * s->in_h * s->in_w;
    if (s->n_layers < 1 || s->n_layers > MODEL_MAX_LAYERS || max_batch < 1)
        return hr_fail(err, errlen, HR_ERR_INVAL, "model: bad spec (%d layers, batch %ld)",
                       s->n_layers, max_batch);
    long col;
    HR_CHECK(model_plan(m, s, &col, err, errlen));
    if (model_alloc(m, col) != 0) {
        double bytes = 0;
        long n = 0;
        model_free(m);
        if (model_footprint(s, max_batch, &bytes, &n, err, errlen) != HR_OK) bytes = 0;
        return hr_fail(err, errlen, HR_ERR_NOMEM,
                       "model: out of memory (%ld parameters at a batch of %ld need %.3g GB)", n,
                       max_batch, bytes / 1e9);
    }
    model_init_weights(m, seed);
    return HR_OK;
}

void model_free(model *m) {
    if (!m) return;
    for (int i = 0; i < m->n_layers; i++) {
        model_layer *L = &m->layers[i];
        if (!L->inplace) {
            free(L->out);
            free(L->dout);
            free(L->argmax);
        }
        L->out = L->dout = NULL;
        L->argmax = NULL;
    }
    free(m->params);
    if (!m->grads_lent) free(m->grads);
    free(m->col);
    free(m->dcol);
    m->params = m->grads = m->col = m->dcol = NULL;
    m->grads_lent = 0;
    m->n_layers = 0;
}

hr_status model_lend_grads(model *m, float *store, char *err, size_t errlen) {
    const size_t bytes = sizeof *m->grads * (size_t)m->n_params;
    const int lend = store != NULL;
    float *to = lend ? store : calloc((size_t)m->n_params + 1, sizeof *to);
    if (to != m->grads) {
        if (to && m->grads) memcpy(to, m->grads, bytes);
        if (!m->grads_lent) free(m->grads);
    }
    m->grads = to, m->grads_lent = lend;
    if (!to) return hr_fail(err, errlen, HR_ERR_NOMEM, "model: out of memory for the gradient");
    return HR_OK;
}

/* ================================================================ forward and backward */

static void forward(model *m, const float *x, int B) {
    layer_prof *prof = m->profile ? &m->prof : NULL;
    const float *in = x;
    for (int i = 0; i < m->n_layers; i++) {
        model_layer *L = &m->layers[i];
        const float *w = m->params + L->w_off, *bias = m->params + L->b_off;
        switch (L->kind) {
        case LAYER_LINEAR:
            linear_forward(L->out, in, w, bias, B, (int)L->in_size, L->out_c, prof);
            break;
        case LAYER_CONV2D:
            conv2d_forward(L->out, in, w, bias, B, &L->g, m->col, prof);
            break;
        case LAYER_RELU:
            relu_forward(L->out, in, (long)B * L->out_size);
            break;
        case LAYER_MAXPOOL:
            maxpool_forward(L->out, L->argmax, in, B, L->in_c, L->in_h, L->in_w, L->k, L->stride);
            break;
        case LAYER_FLATTEN:
            if (!L->inplace) memcpy(L->out, in, sizeof *L->out * (size_t)(B * L->out_size));
            break;
        }
        in = L->out;
    }
}

static void loss(model *m, float *dy, const int32_t *labels, const float *targets, int B,
                 model_stats *st) {
    const float *y = m->layers[m->n_layers - 1].out;
    if (m->loss == MODEL_LOSS_XENT)
        softmax_xent(dy, y, labels, B, (int)m->out_size, &st->loss_sum, &st->correct);
    else
        mse_loss(dy, y, targets, B, (int)m->out_size, &st->loss_sum);
}

static hr_status check_args(const model *m, const int32_t *labels, const float *targets, long b) {
    if (b < 1 || b > m->max_batch) return HR_ERR_INVAL;
    if (m->loss == MODEL_LOSS_XENT ? !labels : !targets) return HR_ERR_INVAL;
    return HR_OK;
}

hr_status model_forward_backward(model *m, const float *x, const int32_t *labels,
                                 const float *targets, long b, model_stats *st) {
    return model_forward_backward_hooked(m, x, labels, targets, b, st, NULL);
}

hr_status model_forward_backward_hooked(model *m, const float *x, const int32_t *labels,
                                        const float *targets, long b, model_stats *st,
                                        const model_grad_hook *hook) {
    HR_CHECK(check_args(m, labels, targets, b));
    int B = (int)b;
    layer_prof *prof = m->profile ? &m->prof : NULL;
    memset(st, 0, sizeof *st);
    forward(m, x, B);
    loss(m, m->layers[m->n_layers - 1].dout, labels, targets, B, st);
    if (hook) hook->ready(hook->ctx, m->n_params);
    for (int i = m->n_layers - 1; i >= 0; i--) {
        model_layer *L = &m->layers[i];
        const float *in = i ? m->layers[i - 1].out : x;
        float *din = i ? m->layers[i - 1].dout : NULL;
        float *dw = m->grads + L->w_off, *db = m->grads + L->b_off;
        const float *w = m->params + L->w_off;
        switch (L->kind) {
        case LAYER_LINEAR:
            linear_backward(din, dw, db, L->dout, in, w, B, (int)L->in_size, L->out_c, prof);
            break;
        case LAYER_CONV2D:
            conv2d_backward(din, dw, db, L->dout, in, w, B, &L->g, m->col, m->dcol, prof);
            break;
        case LAYER_RELU:
            if (din) relu_backward(din, L->dout, L->out, (long)B * L->out_size);
            break;
        case LAYER_MAXPOOL:
            if (din)
                maxpool_backward(din, L->dout, L->argmax, B, L->in_c, L->in_h, L->in_w, L->k,
                                 L->stride);
            break;
        case LAYER_FLATTEN:
            if (din && !L->inplace) memcpy(din, L->dout, sizeof *din * (size_t)(B * L->out_size));
            break;
        }
        if (hook && L->n_params && i > 0) hook->ready(hook->ctx, L->w_off);
    }
    if (hook) hook->ready(hook->ctx, 0);
    return HR_OK;
}

hr_status model_forward(model *m, const float *x, const int32_t *labels, const float *targets,
                        long b, model_stats *st) {
    HR_CHECK(check_args(m, labels, targets, b));
    forward(m, x, (int)b);
    loss(m, NULL, labels, targets, (int)b, st);
    return HR_OK;
}

const float *model_output(const model *m) {
    return m->layers[m->n_layers - 1].out;
}

int model_grad_pieces(const model *m, size_t *off, size_t *count) {
    int k = 0;
    long at = 0;
    for (int i = 0; i < m->n_layers; i++) {
        const model_layer *L = &m->layers[i];
        if (!L->n_params) continue;
        if (L->w_off != at) break; /* the layers do not tile the buffer */
        off[k] = (size_t)at, count[k++] = (size_t)L->n_params;
        at += L->n_params;
    }
    if (at != m->n_params || k == 0) k = 1, off[0] = 0, count[0] = (size_t)m->n_params;
    return k;
}

double model_flops_per_sample(const model *m) {
    double f = 0;
    for (int i = 0; i < m->n_layers; i++) {
        const model_layer *L = &m->layers[i];
        double mac = 0;
        if (L->kind == LAYER_LINEAR) mac = (double)L->in_size * L->out_c;
        if (L->kind == LAYER_CONV2D)
            mac = (double)L->g.OC * L->g.C * L->g.K * L->g.K * L->g.OH * L->g.OW;
        f += 2 * mac * (i == 0 ? 2 : 3); /* forward, weight grad, input grad (not for layer 0) */
    }
    return f;
}

void model_describe(const model *m, char *buf, size_t len) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, len - o, "%ld", m->in_size);
    for (int i = 0; i < m->n_layers && o < len; i++) {
        const model_layer *L = &m->layers[i];
        if (L->kind == LAYER_LINEAR) o += (size_t)snprintf(buf + o, len - o, "-%d", L->out_c);
        if (L->kind == LAYER_CONV2D)
            o += (size_t)snprintf(buf + o, len - o, "-c%dk%d", L->out_c, L->g.K);
        if (L->kind == LAYER_MAXPOOL) o += (size_t)snprintf(buf + o, len - o, "-p%d", L->k);
    }
    if (o < len) snprintf(buf + o, len - o, " (%ld params)", m->n_params);
}
