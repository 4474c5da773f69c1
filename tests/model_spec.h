/*
 * model_spec.h: a model_spec written in one line, for the tests that build their own models:
 *     spec_of(1, 28, 28, MODEL_LOSS_XENT, "conv 6 5 1 2, relu, pool 2 2, flatten, linear 10")
 * Layers are separated by commas: "linear UNITS", "relu", "conv FILTERS WINDOW STRIDE PAD",
 * "pool WINDOW STRIDE" (max-pool), "flatten". A line that says anything else exits 2.
 */
#ifndef HR_TEST_MODEL_SPEC_H
#define HR_TEST_MODEL_SPEC_H

#include "trainer/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* LeNet-5 on 28x28x1 and a small VGG (two blocks of two 3x3 convolutions) on 32x32x3. */
#define SPEC_LENET                                                                                 \
    "conv 6 5 1 2, relu, pool 2 2, conv 16 5 1 0, relu, pool 2 2, flatten, linear 120, relu, "     \
    "linear 84, relu, linear 10"
#define SPEC_VGG                                                                                   \
    "conv 16 3 1 1, relu, conv 16 3 1 1, relu, pool 2 2, conv 32 3 1 1, relu, conv 32 3 1 1, "     \
    "relu, pool 2 2, flatten, linear 128, relu, linear 10"

/* One layer "NAME N..." at *p into s; *p moves past it and its comma. 0, or -1 when malformed. */
static inline int spec_layer(model_spec *s, const char **p) {
    static const struct {
        const char *name;
        layer_kind kind;
        int args; /* numbers after the name: units, window, stride, pad (pool: window, stride) */
    } kinds[] = {{"linear", LAYER_LINEAR, 1},
                 {"relu", LAYER_RELU, 0},
                 {"conv", LAYER_CONV2D, 4},
                 {"pool", LAYER_MAXPOOL, 2},
                 {"flatten", LAYER_FLATTEN, 0}};
    char name[16];
    int used = 0, a[4] = {0, 0, 0, 0}, na = 0;
    if (sscanf(*p, " %15[a-z]%n", name, &used) != 1) return -1;
    const char *q = *p + used;
    char *end;
    for (long v; na < 4 && (v = strtol(q, &end, 10), end != q); q = end) a[na++] = (int)v;
    while (*q == ' ') q++;
    if (*q && *q++ != ',') return -1;
    *p = q;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        if (strcmp(name, kinds[k].name) != 0 || na != kinds[k].args) continue;
        if (s->n_layers == MODEL_MAX_LAYERS) return -1;
        int i = s->n_layers++, pool = kinds[k].kind == LAYER_MAXPOOL;
        s->kind[i] = kinds[k].kind;
        s->units[i] = pool ? 0 : a[0];
        s->k[i] = a[pool ? 0 : 1], s->stride[i] = a[pool ? 1 : 2], s->pad[i] = pool ? 0 : a[3];
        return 0;
    }
    return -1;
}

/* The spec of input (c, h, w), the layers of the line `layers` and the loss. */
static inline model_spec spec_of(int c, int h, int w, model_loss loss, const char *layers) {
    model_spec s;
    memset(&s, 0, sizeof s);
    s.in_c = c, s.in_h = h, s.in_w = w, s.loss = loss;
    for (const char *p = layers; *p;)
        if (spec_layer(&s, &p) != 0) {
            fprintf(stderr, "spec_of: cannot read layer %d of '%s'\n", s.n_layers + 1, layers);
            exit(2);
        }
    return s;
}

#endif
