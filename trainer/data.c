/*
 * data.c: synthetic datasets, batch gathering, and the per-epoch permutation (I1). Loading
 * from files and picking the set a config asks for are in data_io.c.
 *
 * The synthetic image set: each class has a prototype made of three random strokes
 * (anti-aliased line segments), rendered per channel with a class colour. A sample is its
 * class prototype shifted by up to +-3 pixels, scaled in brightness, with a random extra
 * stroke and uniform pixel noise. Every random choice comes from rng(seed, stream, index),
 * so a sample can be regenerated on its own and two runs agree byte for byte.
 */
#include "trainer/data.h"

#include "base/hr_log.h"
#include "trainer/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { STREAM_PROTO = 0x3000, STREAM_TRAIN = 0x3001, STREAM_EVAL = 0x3002, STREAM_PERM = 0x2000 };

void data_set_free(data_set *ds) {
    if (!ds) return;
    free(ds->x8);
    free(ds->xf);
    free(ds->y);
    free(ds->t);
    memset(ds, 0, sizeof *ds);
}

/* ================================================================ synthetic images */

typedef struct {
    float x0, y0, x1, y1; /* end points, pixels */
} stroke;

/* Intensity in [0, 1] of a stroke of half-width ~1.3 pixels at (x, y). */
static float stroke_at(const stroke *s, float x, float y) {
    float dx = s->x1 - s->x0, dy = s->y1 - s->y0;
    float len2 = dx * dx + dy * dy, u = 0.0f;
    if (len2 > 0) u = ((x - s->x0) * dx + (y - s->y0) * dy) / len2;
    u = u < 0 ? 0 : u > 1 ? 1 : u;
    float ex = x - (s->x0 + u * dx), ey = y - (s->y0 + u * dy);
    float d2 = ex * ex + ey * ey;
    return d2 >= 4.0f ? 0.0f : expf(-d2 / 1.7f);
}

static void random_stroke(rng *r, stroke *s, int h, int w) {
    float m = 5.0f;
    s->x0 = m + rng_uniform(r) * (float)(w - 2 * m);
    s->y0 = m + rng_uniform(r) * (float)(h - 2 * m);
    s->x1 = m + rng_uniform(r) * (float)(w - 2 * m);
    s->y1 = m + rng_uniform(r) * (float)(h - 2 * m);
}

/* Class prototypes: (classes, c, h, w) in [0, 1]. */
static float *make_prototypes(uint64_t seed, int c, int h, int w) {
    float *p = calloc((size_t)DATA_CLASSES * c * h * w, sizeof *p);
    if (!p) return NULL;
    for (int k = 0; k < DATA_CLASSES; k++) {
        rng r;
        rng_init(&r, seed, STREAM_PROTO, (uint64_t)k);
        stroke s[3];
        for (int j = 0; j < 3; j++) random_stroke(&r, &s[j], h, w);
        float colour[3] = {1, 1, 1};
        if (c == 3)
            for (int ch = 0; ch < 3; ch++) colour[ch] = 0.35f + 0.65f * rng_uniform(&r);
        for (int ch = 0; ch < c; ch++)
            for (int y = 0; y < h; y++)
                for (int x = 0; x < w; x++) {
                    float v = 0;
                    for (int j = 0; j < 3; j++) {
                        float a = stroke_at(&s[j], (float)x, (float)y);
                        v = a > v ? a : v;
                    }
                    p[(((long)k * c + ch) * h + y) * w + x] = v * colour[ch];
                }
    }
    return p;
}

/* Sample `index` of `stream` into px (c, h, w) and its label. */
static int32_t make_image(uint8_t *px, const float *proto, uint64_t seed, uint64_t stream,
                          uint64_t index, int c, int h, int w) {
    rng r;
    rng_init(&r, seed, stream, index);
    int32_t label = (int32_t)rng_below(&r, DATA_CLASSES);
    int dx = (int)rng_below(&r, 7) - 3, dy = (int)rng_below(&r, 7) - 3;
    float gain = 0.5f + 0.5f * rng_uniform(&r);
    stroke extra;
    random_stroke(&r, &extra, h, w);
    float extra_gain = 0.9f * rng_uniform(&r);
    const float *p = proto + (long)label * c * h * w;
    uint64_t bits = 0;
    int left = 0;
    for (int ch = 0; ch < c; ch++)
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                int sx = x - dx, sy = y - dy;
                float v = 0;
                if (sx >= 0 && sx < w && sy >= 0 && sy < h) v = p[((long)ch * h + sy) * w + sx];
                v *= gain;
                float e = extra_gain * stroke_at(&extra, (float)x, (float)y);
                v = e > v ? e : v;
                if (!left) bits = rng_next(&r), left = 4;
                float noise = (float)(bits & 0xffff) * (1.0f / 65535.0f) - 0.5f;
                bits >>= 16, left--;
                v += 0.6f * noise;
                v = v < 0 ? 0 : v > 1 ? 1 : v;
                px[((long)ch * h + y) * w + x] = (uint8_t)lrintf(v * 255.0f);
            }
    return label;
}

static hr_status synth_images(data_set *ds, const float *proto, uint64_t seed, uint64_t stream,
                              long n, data_kind kind) {
    data_synthetic_shape(ds, kind, n);
    const int c = ds->c, hw = ds->h;
    ds->x8 = malloc((size_t)(n * ds->d) + 1);
    ds->y = malloc(sizeof *ds->y * (size_t)n + 1);
    if (!ds->x8 || !ds->y) return HR_ERR_NOMEM;
    for (long i = 0; i < n; i++)
        ds->y[i] = make_image(ds->x8 + i * ds->d, proto, seed, stream, (uint64_t)i, c, hw, hw);
    return HR_OK;
}

/* ================================================================ synthetic regression */

static hr_status synth_regression(data_set *ds, uint64_t seed, uint64_t stream, long n) {
    data_synthetic_shape(ds, DATA_SYNTHETIC_REGRESSION, n);
    const int D = DATA_REGRESSION_FEATURES;
    ds->xf = malloc(sizeof *ds->xf * (size_t)(n * D) + 1);
    ds->t = malloc(sizeof *ds->t * (size_t)n + 1);
    if (!ds->xf || !ds->t) return HR_ERR_NOMEM;
    double wt[DATA_REGRESSION_FEATURES];
    rng r;
    rng_init(&r, seed, STREAM_PROTO, 1000);
    for (int j = 0; j < D; j++) wt[j] = rng_normal(&r);
    double bias = 0.5;
    for (long i = 0; i < n; i++) {
        rng_init(&r, seed, stream, (uint64_t)i);
        double y = bias;
        for (int j = 0; j < D; j++) {
            float v = (float)rng_normal(&r);
            ds->xf[i * D + j] = v;
            y += wt[j] * v;
        }
        ds->t[i] = (float)(y + DATA_REGRESSION_NOISE * rng_normal(&r));
    }
    return HR_OK;
}

void data_synthetic_shape(data_set *ds, data_kind kind, long n) {
    memset(ds, 0, sizeof *ds);
    ds->n = n;
    if (kind == DATA_SYNTHETIC_REGRESSION) {
        ds->c = DATA_REGRESSION_FEATURES, ds->h = ds->w = 1, ds->n_targets = 1;
    } else {
        ds->c = kind == DATA_SYNTHETIC_RGB ? 3 : 1, ds->h = ds->w = ds->c == 3 ? 32 : 28;
        ds->n_classes = DATA_CLASSES;
    }
    ds->d = (long)ds->c * ds->h * ds->w;
}

double data_synthetic_bytes(data_kind kind, long n) {
    const double per = kind == DATA_SYNTHETIC_REGRESSION ? 4.0 * (DATA_REGRESSION_FEATURES + 1)
                       : kind == DATA_SYNTHETIC_RGB      ? 3 * 32 * 32 + 4
                                                         : 28 * 28 + 4;
    return per * (double)n;
}

hr_status data_synthetic(data_set *train, data_set *eval, data_kind kind, long n, long n_eval,
                         uint64_t seed, char *err, size_t errlen) {
    memset(train, 0, sizeof *train);
    memset(eval, 0, sizeof *eval);
    hr_status st;
    if (kind == DATA_SYNTHETIC_REGRESSION) {
        st = synth_regression(train, seed, STREAM_TRAIN, n);
        if (st == HR_OK) st = synth_regression(eval, seed, STREAM_EVAL, n_eval);
    } else if (kind == DATA_SYNTHETIC || kind == DATA_SYNTHETIC_RGB) {
        data_set shape;
        data_synthetic_shape(&shape, kind, 0);
        float *proto = make_prototypes(seed, shape.c, shape.h, shape.w);
        st = proto ? synth_images(train, proto, seed, STREAM_TRAIN, n, kind) : HR_ERR_NOMEM;
        if (st == HR_OK) st = synth_images(eval, proto, seed, STREAM_EVAL, n_eval, kind);
        free(proto);
    } else {
        return hr_fail(err, errlen, HR_ERR_INVAL, "data: kind %d is not synthetic", (int)kind);
    }
    if (st != HR_OK) {
        data_set_free(train);
        data_set_free(eval);
        return hr_fail(err, errlen, st, "synthetic data: out of memory for %ld + %ld samples", n,
                       n_eval);
    }
    return HR_OK;
}

void data_gather(const data_set *ds, const uint32_t *idx, long first, long b, float *x, int32_t *y,
                 float *t) {
    long d = ds->d;
    for (long i = 0; i < b; i++) {
        long s = idx ? (long)idx[i] : first + i;
        float *xo = x + i * d;
        if (ds->x8) {
            const uint8_t *px = ds->x8 + s * d;
            for (long j = 0; j < d; j++) xo[j] = (float)px[j] * (1.0f / 255.0f);
        } else {
            memcpy(xo, ds->xf + s * d, sizeof *xo * (size_t)d);
        }
        if (y && ds->y) y[i] = ds->y[s];
        if (t && ds->t)
            memcpy(t + i * ds->n_targets, ds->t + s * ds->n_targets,
                   sizeof *t * (size_t)ds->n_targets);
    }
}

/* ================================================================ I1: permutation and slices */

hr_status data_loader_init(data_loader *dl, const data_set *ds, uint64_t seed, long B, char *err,
                           size_t errlen) {
    memset(dl, 0, sizeof *dl);
    dl->ds = ds, dl->seed = seed, dl->epoch = -1;
    if (B < 1 || ds->n < B)
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "the training set has %ld samples, fewer than global_batch = %ld (expected "
                       "samples >= global_batch)",
                       ds->n, B);
    if (ds->n > UINT32_MAX) return hr_fail(err, errlen, HR_ERR_INVAL, "dataset too large");
    dl->perm = malloc(sizeof *dl->perm * (size_t)ds->n);
    if (!dl->perm) return hr_fail(err, errlen, HR_ERR_NOMEM, "data: out of memory");
    return HR_OK;
}

void data_loader_free(data_loader *dl) {
    if (!dl) return;
    free(dl->perm);
    dl->perm = NULL;
}

long data_loader_iters_per_epoch(const data_loader *dl, long B) {
    return dl->ds->n / B;
}

const uint32_t *data_loader_perm(data_loader *dl, long epoch) {
    if (dl->epoch == epoch) return dl->perm;
    long n = dl->ds->n;
    for (long i = 0; i < n; i++) dl->perm[i] = (uint32_t)i;
    rng r; /* Fisher-Yates from (seed, epoch) */
    rng_init(&r, dl->seed, STREAM_PERM, (uint64_t)epoch);
    for (long i = n - 1; i > 0; i--) {
        long j = (long)rng_below(&r, (uint64_t)i + 1);
        uint32_t tmp = dl->perm[i];
        dl->perm[i] = dl->perm[j];
        dl->perm[j] = tmp;
    }
    dl->epoch = epoch;
    return dl->perm;
}

long data_slice_start(const long *split, int rank) {
    long start = 0;
    for (int q = 0; q < rank; q++) start += split[q];
    return start;
}

hr_status data_loader_slice(data_loader *dl, long epoch, long iter, long B, long start, long b,
                            float *x, int32_t *y, float *t) {
    if (B < 1 || iter < 0 || iter >= data_loader_iters_per_epoch(dl, B) || start < 0 || b < 0 ||
        start + b > B)
        return HR_ERR_INVAL;
    const uint32_t *p = data_loader_perm(dl, epoch);
    data_gather(dl->ds, p + iter * B + start, 0, b, x, y, t);
    return HR_OK;
}
