/*
 * model.h: models built from the configuration, with flat parameter and gradient buffers.
 *
 * A model is a list of layers plus a loss. All parameters live in ONE contiguous buffer
 * `params` (n_params floats) and all gradients in ONE buffer `grads`; each layer holds
 * offsets into both. The model allocates its own `grads`; a caller that wants the gradient
 * computed where it will use it lends n_params floats of its own buffer (model_lend_grads), so
 * that, say, an all-reduce of that buffer needs no copy.
 *
 * model_forward_backward writes gradient SUMS over the b samples it is given (not means;
 * DESIGN.md I2). Adding the sums of two slices gives the sum of the whole batch, up to
 * float summation order (I3).
 *
 * Activations are allocated once for `max_batch` samples; forward/backward never allocate.
 */
#ifndef HR_MODEL_H
#define HR_MODEL_H

#include "base/hr_status.h"
#include "trainer/layers.h"

#include <stdint.h>

#define MODEL_MAX_LAYERS 40
#define MODEL_MAX_WIDTHS 16 /* mlp widths in a model_config, input and output included */

/* The model families. The values are stored in checkpoints (ckpt_meta.model): never reorder. */
typedef enum { MODEL_LINREG, MODEL_SOFTMAX, MODEL_MLP, MODEL_CNN } model_kind;

/* "linreg", "softmax", "mlp", "cnn" (the config's spelling), or "?" for another value. */
const char *model_kind_name(int kind);

/* What the configuration asks for; model_spec_build makes a spec of it once the data's shape
 * is known. The strings are borrowed and only name things in messages. */
typedef struct {
    model_kind kind;               /* family */
    long layers[MODEL_MAX_WIDTHS]; /* mlp: layer widths, input first, output last */
    int n_layers;                  /* entries used in layers[] */
    const char *name;              /* the family's name, e.g. "mlp" */
    const char *data_name;         /* the dataset's name, e.g. "synthetic" */
    const char *origin;            /* the config file, or "" */
} model_config;

typedef enum { LAYER_LINEAR, LAYER_RELU, LAYER_CONV2D, LAYER_MAXPOOL, LAYER_FLATTEN } layer_kind;
typedef enum { MODEL_LOSS_XENT, MODEL_LOSS_MSE } model_loss;

/* What a model is built from: the input shape, the layers and the loss. */
typedef struct {
    int in_c, in_h, in_w; /* input shape per sample (C, H, W); dense inputs are (D, 1, 1) */
    int n_layers;         /* entries used in the arrays below */
    layer_kind kind[MODEL_MAX_LAYERS];
    int units[MODEL_MAX_LAYERS]; /* linear: outputs; conv2d: filters */
    int k[MODEL_MAX_LAYERS];     /* conv2d, maxpool: window */
    int stride[MODEL_MAX_LAYERS];
    int pad[MODEL_MAX_LAYERS];
    model_loss loss;
} model_spec;

typedef struct {
    layer_kind kind;
    int in_c, in_h, in_w;    /* input shape per sample */
    int out_c, out_h, out_w; /* output shape per sample */
    long in_size, out_size;  /* C*H*W of input and output */
    conv_geom g;             /* conv2d geometry */
    int k, stride;           /* maxpool window and stride */
    long w_off, b_off;       /* offsets of weights and bias into params/grads */
    long n_params;           /* weights + bias */
    int inplace;             /* relu/flatten: out and dout alias the previous layer's */
    float *out;              /* (max_batch, out_size) activations */
    float *dout;             /* (max_batch, out_size) gradient w.r.t. the activations */
    int32_t *argmax;         /* maxpool: (max_batch, out_size) */
} model_layer;

typedef struct {
    model_spec spec;
    int n_layers;
    model_layer layers[MODEL_MAX_LAYERS];
    model_loss loss;
    long in_size;      /* floats per input sample */
    long out_size;     /* classes (xent) or regression targets (mse) */
    long max_batch;    /* most samples per forward/backward */
    long n_params;     /* floats in params and in grads */
    float *params;     /* (n_params) */
    float *grads;      /* (n_params) gradient sums: the model's own, or lent by the caller */
    int grads_lent;    /* grads is the caller's (model_lend_grads): model_free leaves it */
    float *col, *dcol; /* conv2d scratch, (largest C*K*K*OH*OW) each */
    layer_prof prof;   /* sgemm time and flops, accumulated when profile is set */
    int profile;       /* accumulate prof */
} model;

/* Outcome of a forward pass over b samples. */
typedef struct {
    double loss_sum; /* summed per-sample loss */
    long correct;    /* correct argmax predictions (xent only) */
} model_stats;

/* Spec for model mc (linreg, softmax, mlp, cnn) on inputs of shape (C, H, W) with `outputs`
 * classes (or regression targets). Errors name the config key at fault. */
hr_status model_spec_build(model_spec *s, const model_config *mc, int in_c, int in_h, int in_w,
                           int outputs, char *err, size_t errlen);

/* The host memory model_init allocates for spec s at max_batch (parameters and gradients, the
 * conv2d scratch, every layer's activations) in *bytes, and the parameter count in *n_params.
 * Allocates nothing of that size. */
hr_status model_footprint(const model_spec *s, long max_batch, double *bytes, long *n_params,
                          char *err, size_t errlen);

/* Build the model, allocate its buffers and initialise the weights from `seed`
 * (He-uniform for layers feeding a ReLU, 1/sqrt(fan_in) otherwise, biases zero). */
hr_status model_init(model *m, const model_spec *s, long max_batch, uint64_t seed, char *err,
                     size_t errlen);
void model_free(model *m);

/* Compute the gradient into `store` (n_params floats of the caller's, which it keeps until it
 * takes them back) from now on: the model's own gradient buffer is freed, and the values it
 * held are copied into store. model_lend_grads(m, NULL) takes the loan back before the caller
 * frees store: the model allocates its own again (HR_ERR_NOMEM when it cannot, leaving grads
 * NULL, which train_run refuses). */
hr_status model_lend_grads(model *m, float *store, char *err, size_t errlen);

/* Forward, loss and backward over b <= max_batch samples x (b, in_size) with integer
 * labels (xent) or float targets (b, out_size) (mse). Writes gradient sums into
 * grads[0, n_params) and nothing around it. */
hr_status model_forward_backward(model *m, const float *x, const int32_t *labels,
                                 const float *targets, long b, model_stats *st);

/* Progress of a backward pass, for overlapping communication with it: ready(ctx, off) says
 * that grads[off, n_params) hold their final values. It is called once after the forward
 * pass and the loss (off = n_params), after every layer that has parameters, and once at
 * the end (off = 0); off never grows. Layers own ascending offsets, so backward finishes
 * the gradient buffer from its end towards its start. */
typedef struct {
    void (*ready)(void *ctx, long off);
    void *ctx;
} model_grad_hook;

/* The gradient as consecutive pieces, one per layer with parameters in the model's order:
 * piece i is grads[off[i], off[i] + count[i]), and the hook's offsets are their starts, as
 * backward finishes them from the last to the first. When the layers do not tile
 * grads[0, n_params), one piece, the whole buffer. off and count need MODEL_MAX_LAYERS
 * entries. Returns the number of pieces (at least 1). */
int model_grad_pieces(const model *m, size_t *off, size_t *count);

/* model_forward_backward that reports its progress to hook (NULL: none). */
hr_status model_forward_backward_hooked(model *m, const float *x, const int32_t *labels,
                                        const float *targets, long b, model_stats *st,
                                        const model_grad_hook *hook);

/* Forward and loss only (evaluation); adds to *st. */
hr_status model_forward(model *m, const float *x, const int32_t *labels, const float *targets,
                        long b, model_stats *st);

/* Output of the last forward pass: (b, out_size) logits or predictions. */
const float *model_output(const model *m);

/* FLOPs of one forward+backward of one sample in the dense and conv layers (for reports). */
double model_flops_per_sample(const model *m);

/* One-line description, e.g. "mlp 784-512-512-10 (669706 params)". */
void model_describe(const model *m, char *buf, size_t len);

#endif
