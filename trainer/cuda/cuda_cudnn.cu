/*
 * cuda_cudnn.cu: conv2d through cuDNN, where the build has it (HR_HAVE_CUDNN).
 *
 * Same contract as the im2col path of cuda_conv.cu (cuda_layers.h): NCHW activations,
 * filters (OC, C, K, K), cross-correlation with stride S and zero padding P, gradients WRITTEN
 * as sums over the batch. Two rules keep runs repeatable bit for bit:
 *   - every convolution descriptor asks for FMA math, and conv_pick() refuses tensor-core
 *     algorithms, so fp32 stays fp32 (no TF32);
 *   - conv_pick() takes only deterministic algorithms, chosen from cuDNN's heuristics (never by
 *     timing, which could choose differently from one run to the next), so a shape and a
 *     device always run the same algorithm.
 * An algorithm may use at most cuda_conv2d_workspace(g, B) floats of the context's scratch,
 * which the model reserves before training, so the training loop never allocates. A shape for
 * which no algorithm qualifies runs on im2col (HR_ERR_UNSUPPORTED from here). The choices are
 * cached per (geometry, batch): dynamic batching changes B from one iteration to the next.
 * The bias gradient is the module's own deterministic channel sum, as on the im2col path.
 */
#include "trainer/cuda/cuda_common.cuh"

#include <stdio.h>
#include <string.h>

#ifdef HR_HAVE_CUDNN

#include <cudnn.h>

#include "trainer/cuda/conv_pick.h"

#define DNN_CHECK(call)                                                                            \
    HR_CUDA_CHECK_STATUS(cudnnStatus_t, call, #call, s_ != CUDNN_STATUS_SUCCESS,                   \
                         cuda_lib.cudnnGetErrorString(s_))

/* One pass's choice for one (geometry, batch): algo < 0 means im2col. */
typedef struct {
    int algo;
    size_t workspace;
} dnn_choice;

typedef struct {
    conv_geom g;
    int B, used;
    dnn_choice fwd, data, filter;
} dnn_plan;

#define DNN_PLANS 64

typedef struct {
    cudnnHandle_t h;
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    conv_geom set_g; /* the geometry and batch the descriptors hold now */
    int set_B;
    dnn_plan plan[DNN_PLANS];
    int next; /* the slot the next new plan replaces */
} hr_dnn;

static int dnn_version_ok(void) {
    return cuda_lib.cudnnGetVersion() / 10000 == CUDNN_MAJOR;
}

static void dnn_destroy(hr_dnn *d) {
    if (!d) return;
    if (d->conv) cuda_lib.cudnnDestroyConvolutionDescriptor(d->conv);
    if (d->w) cuda_lib.cudnnDestroyFilterDescriptor(d->w);
    if (d->y) cuda_lib.cudnnDestroyTensorDescriptor(d->y);
    if (d->x) cuda_lib.cudnnDestroyTensorDescriptor(d->x);
    if (d->h) cuda_lib.cudnnDestroy(d->h);
    free(d);
}

static hr_status dnn_create(cuda_ctx *c, hr_dnn **out, char *err, size_t errlen) {
    *out = NULL;
    if (!dnn_version_ok())
        return hr_fail(err, errlen, HR_ERR_UNSUPPORTED, "%s", cuda_cudnn_version());
    hr_dnn *d = (hr_dnn *)calloc(1, sizeof *d);
    if (!d) return hr_fail(err, errlen, HR_ERR_NOMEM, "out of memory for the cuDNN state");
    d->set_B = -1;
    cudnnStatus_t s = cuda_lib.cudnnCreate(&d->h);
    if (s == CUDNN_STATUS_SUCCESS) s = cuda_lib.cudnnSetStream(d->h, c->stream);
    if (s == CUDNN_STATUS_SUCCESS) s = cuda_lib.cudnnCreateTensorDescriptor(&d->x);
    if (s == CUDNN_STATUS_SUCCESS) s = cuda_lib.cudnnCreateTensorDescriptor(&d->y);
    if (s == CUDNN_STATUS_SUCCESS) s = cuda_lib.cudnnCreateFilterDescriptor(&d->w);
    if (s == CUDNN_STATUS_SUCCESS) s = cuda_lib.cudnnCreateConvolutionDescriptor(&d->conv);
    if (s != CUDNN_STATUS_SUCCESS) {
        dnn_destroy(d);
        return hr_fail(err, errlen, HR_ERR_UNSUPPORTED, "cuda:%d: cuDNN: %s", c->device,
                       cuda_lib.cudnnGetErrorString(s));
    }
    *out = d;
    return HR_OK;
}

/* Point the descriptors at (g, B), unless they hold it already. */
static hr_status dnn_describe(hr_dnn *d, const conv_geom *g, int B) {
    if (d->set_B == B && !memcmp(&d->set_g, g, sizeof *g)) return HR_OK;
    d->set_B = -1;
    DNN_CHECK(cuda_lib.cudnnSetTensor4dDescriptor(d->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, B,
                                                  g->C, g->H, g->W));
    DNN_CHECK(cuda_lib.cudnnSetTensor4dDescriptor(d->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, B,
                                                  g->OC, g->OH, g->OW));
    DNN_CHECK(cuda_lib.cudnnSetFilter4dDescriptor(d->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, g->OC,
                                                  g->C, g->K, g->K));
    DNN_CHECK(cuda_lib.cudnnSetConvolution2dDescriptor(d->conv, g->P, g->P, g->S, g->S, 1, 1,
                                                       CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    DNN_CHECK(cuda_lib.cudnnSetConvolutionMathType(d->conv, CUDNN_FMA_MATH));
    int n, oc, oh, ow;
    DNN_CHECK(
        cuda_lib.cudnnGetConvolution2dForwardOutputDim(d->conv, d->x, d->w, &n, &oc, &oh, &ow));
    if (n != B || oc != g->OC || oh != g->OH || ow != g->OW) {
        HR_ERROR(CUDA, "cuDNN computes a %dx%dx%dx%d output for a geometry of %dx%dx%dx%d", n, oc,
                 oh, ow, B, g->OC, g->OH, g->OW);
        return HR_ERR_CUDA;
    }
    d->set_g = *g;
    d->set_B = B;
    return HR_OK;
}

static int is_tensor_op(cudnnMathType_t m) {
    return m == CUDNN_TENSOR_OP_MATH || m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
}

/* Fill cand[] from one pass's perf results (the three perf types share these fields). */
template <typename Perf> static int dnn_candidates(conv_algo_cand *cand, const Perf *perf, int n) {
    for (int i = 0; i < n; i++) {
        cand[i].algo = (int)perf[i].algo;
        cand[i].available = perf[i].status == CUDNN_STATUS_SUCCESS;
        cand[i].deterministic = perf[i].determinism == CUDNN_DETERMINISTIC;
        cand[i].tensor_op = is_tensor_op(perf[i].mathType);
        cand[i].workspace = perf[i].memory;
    }
    return n;
}

/* The workspace one pass needs for an algorithm (the heuristics' figure is an estimate). */
static cudnnStatus_t dnn_workspace(hr_dnn *d, int pass, int algo, size_t *bytes) {
    switch (pass) {
    case 0:
        return cuda_lib.cudnnGetConvolutionForwardWorkspaceSize(
            d->h, d->x, d->w, d->conv, d->y, (cudnnConvolutionFwdAlgo_t)algo, bytes);
    case 1:
        return cuda_lib.cudnnGetConvolutionBackwardDataWorkspaceSize(
            d->h, d->w, d->y, d->conv, d->x, (cudnnConvolutionBwdDataAlgo_t)algo, bytes);
    default:
        return cuda_lib.cudnnGetConvolutionBackwardFilterWorkspaceSize(
            d->h, d->x, d->y, d->conv, d->w, (cudnnConvolutionBwdFilterAlgo_t)algo, bytes);
    }
}

/* Choose one pass's algorithm: forward (0), backward data (1) or backward filter (2). */
static hr_status dnn_choose(hr_dnn *d, int pass, size_t limit, dnn_choice *out) {
    enum { MAXC = 16 };
    conv_algo_cand cand[MAXC];
    int n = 0;
    if (pass == 0) {
        cudnnConvolutionFwdAlgoPerf_t perf[MAXC];
        DNN_CHECK(cuda_lib.cudnnGetConvolutionForwardAlgorithm_v7(d->h, d->x, d->w, d->conv, d->y,
                                                                  MAXC, &n, perf));
        dnn_candidates(cand, perf, n);
    } else if (pass == 1) {
        cudnnConvolutionBwdDataAlgoPerf_t perf[MAXC];
        DNN_CHECK(cuda_lib.cudnnGetConvolutionBackwardDataAlgorithm_v7(d->h, d->w, d->y, d->conv,
                                                                       d->x, MAXC, &n, perf));
        dnn_candidates(cand, perf, n);
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[MAXC];
        DNN_CHECK(cuda_lib.cudnnGetConvolutionBackwardFilterAlgorithm_v7(d->h, d->x, d->y, d->conv,
                                                                         d->w, MAXC, &n, perf));
        dnn_candidates(cand, perf, n);
    }
    out->algo = -1;
    out->workspace = 0;
    for (int tries = 0; tries < n; tries++) {
        int i = conv_pick(cand, n, limit);
        if (i < 0) break;
        size_t ws = 0;
        if (dnn_workspace(d, pass, cand[i].algo, &ws) == CUDNN_STATUS_SUCCESS && ws <= limit) {
            out->algo = cand[i].algo;
            out->workspace = ws;
            break;
        }
        cand[i].available = 0; /* its real workspace does not fit: take the next one */
    }
    return HR_OK;
}

/* The plan for (g, B), chosen on first use and cached; descriptors set to (g, B). */
static hr_status dnn_plan_for(hr_dnn *d, const conv_geom *g, int B, size_t limit,
                              const dnn_plan **out) {
    HR_CHECK(dnn_describe(d, g, B));
    for (int i = 0; i < DNN_PLANS; i++)
        if (d->plan[i].used && d->plan[i].B == B && !memcmp(&d->plan[i].g, g, sizeof *g)) {
            *out = &d->plan[i];
            return HR_OK;
        }
    dnn_plan *p = &d->plan[d->next];
    d->next = (d->next + 1) % DNN_PLANS;
    memset(p, 0, sizeof *p);
    HR_CHECK(dnn_choose(d, 0, limit, &p->fwd));
    HR_CHECK(dnn_choose(d, 1, limit, &p->data));
    HR_CHECK(dnn_choose(d, 2, limit, &p->filter));
    p->g = *g;
    p->B = B;
    p->used = 1;
    HR_DEBUG(CUDA,
             "conv %dx%dx%d k%d s%d p%d ->%d, batch %d: cuDNN algorithms forward %d, data %d, "
             "filter %d (-1: im2col)",
             g->C, g->H, g->W, g->K, g->S, g->P, g->OC, B, p->fwd.algo, p->data.algo,
             p->filter.algo);
    *out = p;
    return HR_OK;
}

/* out (B, OC, OHW) += bias (OC). */
static __global__ void add_bias_kernel(float *out, const float *bias, long n, int OC, long ohw) {
    HR_CUDA_GRID_LOOP(t, n) out[t] += bias[(t / ohw) % OC];
}

static size_t dnn_limit(const conv_geom *g, int B) {
    return sizeof(float) * cuda_conv2d_workspace(g, B);
}

hr_status hr_dnn_conv_forward(cuda_ctx *c, float *out, const float *in, const float *w,
                              const float *bias, int B, const conv_geom *g) {
    hr_dnn *d = (hr_dnn *)c->dnn;
    const dnn_plan *p;
    HR_CHECK(cuda_ctx_reserve(c, cuda_conv2d_workspace(g, B)));
    HR_CHECK(dnn_plan_for(d, g, B, dnn_limit(g, B), &p));
    if (p->fwd.algo < 0) return HR_ERR_UNSUPPORTED;
    const float one = 1.0f, zero = 0.0f;
    DNN_CHECK(cuda_lib.cudnnConvolutionForward(d->h, &one, d->x, in, d->w, w, d->conv,
                                               (cudnnConvolutionFwdAlgo_t)p->fwd.algo, c->scratch,
                                               p->fwd.workspace, &zero, d->y, out));
    long ohw = (long)g->OH * g->OW, n = (long)B * g->OC * ohw;
    add_bias_kernel<<<hr_cuda_blocks(n, 16384), HR_CUDA_THREADS, 0, c->stream>>>(out, bias, n,
                                                                                 g->OC, ohw);
    LAUNCH_CHECK();
    return HR_OK;
}

hr_status hr_dnn_conv_backward(cuda_ctx *c, float *din, float *dw, float *dbias, const float *dout,
                               const float *in, const float *w, int B, const conv_geom *g) {
    hr_dnn *d = (hr_dnn *)c->dnn;
    const dnn_plan *p;
    HR_CHECK(cuda_ctx_reserve(c, cuda_conv2d_workspace(g, B)));
    HR_CHECK(dnn_plan_for(d, g, B, dnn_limit(g, B), &p));
    if (p->filter.algo < 0 || (din && p->data.algo < 0)) return HR_ERR_UNSUPPORTED;
    const float one = 1.0f, zero = 0.0f;
    HR_CHECK(hr_cuda_channel_sum(c, dbias, dout, B, g->OC, g->OH * g->OW));
    DNN_CHECK(cuda_lib.cudnnConvolutionBackwardFilter(
        d->h, &one, d->x, in, d->y, dout, d->conv, (cudnnConvolutionBwdFilterAlgo_t)p->filter.algo,
        c->scratch, p->filter.workspace, &zero, d->w, dw));
    if (din)
        DNN_CHECK(cuda_lib.cudnnConvolutionBackwardData(
            d->h, &one, d->w, w, d->y, dout, d->conv, (cudnnConvolutionBwdDataAlgo_t)p->data.algo,
            c->scratch, p->data.workspace, &zero, d->x, din));
    return HR_OK;
}

hr_status hr_dnn_set(cuda_ctx *c, int on, char *err, size_t errlen) {
    if (!on) {
        dnn_destroy((hr_dnn *)c->dnn);
        c->dnn = NULL;
        return HR_OK;
    }
    if (c->dnn) return HR_OK;
    hr_dnn *d;
    HR_CHECK(dnn_create(c, &d, err, errlen));
    c->dnn = d;
    return HR_OK;
}

#else /* built without cuDNN: convolutions are im2col */

hr_status hr_dnn_conv_forward(cuda_ctx *, float *, const float *, const float *, const float *, int,
                              const conv_geom *) {
    return HR_ERR_UNSUPPORTED;
}

hr_status hr_dnn_conv_backward(cuda_ctx *, float *, float *, float *, const float *, const float *,
                               const float *, int, const conv_geom *) {
    return HR_ERR_UNSUPPORTED;
}

hr_status hr_dnn_set(cuda_ctx *, int on, char *err, size_t errlen) {
    if (!on) return HR_OK;
    return hr_fail(err, errlen, HR_ERR_UNSUPPORTED,
                   "this build has no cuDNN (configure with -DHETRING_CUDNN=ON where it is "
                   "installed)");
}

#endif

extern "C" hr_status cuda_ctx_set_conv(cuda_ctx *c, cuda_conv_impl impl, char *err, size_t errlen) {
    return hr_dnn_set(c, impl == CUDA_CONV_CUDNN, err, errlen);
}

extern "C" cuda_conv_impl cuda_ctx_conv(const cuda_ctx *c) {
    return c->dnn ? CUDA_CONV_CUDNN : CUDA_CONV_IM2COL;
}
