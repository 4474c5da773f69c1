/*
 * train.c: the training loop (see train.h for the iteration and its invariants).
 *
 * A cluster node's loss and accuracy are the cluster's, from its peer's exchange (every
 * node's stats, all-gathered), so every node reports the same global figures. Evaluation
 * runs on rank 0 only: after each step all replicas hold the same parameters (I4), so one
 * copy is enough.
 */
#include "trainer/train.h"

#include "base/hr_cores.h"
#include "base/hr_file.h"
#include "base/hr_log.h"
#include "base/hr_time.h"
#include "trainer/blas_pick.h"
#include "trainer/ckpt.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ================================================================ init and free */

/* A model this process cannot hold (its parameters, gradients and momentum, the activations of
 * global_batch samples, beyond the memory it may use), or that the nodes at its host cannot
 * hold together, is refused at start, naming the keys; it failed at its first allocation, or,
 * where the kernel lends more than it has, the nodes were killed while they trained. */
static hr_status fits_memory(const train_config *c, const model_spec *spec, long B, long d,
                             char *err, size_t errlen) {
    double bytes = 0, have = hr_memory_bytes(), shared = hr_memory_shared();
    long n = 0;
    const int k = c->host_nodes > 1 ? c->host_nodes : 1;
    HR_CHECK(model_footprint(spec, B, &bytes, &n, err, errlen));
    bytes += 4.0 * ((double)n + 1) + 4.0 * (double)B * (double)d; /* momentum, the batch */
    /* this process cannot hold it, or the nodes at its host cannot together */
    const int alone = have > 0 && bytes > have;
    const int together = !alone && k > 1 && shared > 0 && k * bytes > shared;
    if (!alone && !together) return HR_OK;
    char what[MODEL_MAX_WIDTHS * 21 + 64]; /* the key to change first: the widths, or the batch */
    int at = snprintf(what, sizeof what, "global_batch %ld (model = %s)", B, c->model.name);
    if (c->model.kind == MODEL_MLP)
        for (int i = at = 0; i < c->model.n_layers; i++)
            at += snprintf(what + at, sizeof what - (size_t)at, "%s%ld", i ? "," : "layers ",
                           c->model.layers[i]);
    char need[200];
    snprintf(need, sizeof need,
             "needs %.3g GB of memory at a batch of %ld (%ld parameters, their gradients and "
             "momentum, and the activations)",
             bytes / 1e9, B, n);
    if (alone)
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "%s: [train] %s %s, more than the %.3g GB this process may use here "
                       "(expected a smaller model or global_batch)",
                       c->origin, what, need, have / 1e9);
    return hr_fail(err, errlen, HR_ERR_CONFIG,
                   "%s: [train] %s %s; the %d nodes at this node's host need %.3g GB together, "
                   "more than the %.3g GB of this machine (expected a smaller model or "
                   "global_batch, or fewer nodes on this machine)",
                   c->origin, what, need, k, k * bytes / 1e9, shared / 1e9);
}

/* A linreg model needs regression data; the others, classification data. */
static hr_status check_fits_data(const train_config *c, int regression, char *err, size_t errlen) {
    if (regression == (c->model.kind == MODEL_LINREG)) return HR_OK;
    return hr_fail(err, errlen, HR_ERR_CONFIG,
                   "%s: [train] model = %s does not fit dataset = %s (expected linreg with "
                   "regression data, softmax, mlp or cnn with classification data)",
                   c->origin, c->model.name, c->data.name);
}

hr_status train_check_config(const train_config *c, char *err, size_t errlen) {
    const data_kind kind = c->data.kind;
    if (kind == DATA_MNIST || kind == DATA_CIFAR10) /* classes; the shape is in the files */
        return check_fits_data(c, 0, err, errlen);
    if (kind == DATA_CSV) return check_fits_data(c, c->data.csv_regression, err, errlen);
    data_set shape; /* a synthetic set: what train_init checks against the loaded set */
    data_synthetic_shape(&shape, kind, c->data.samples);
    const int regression = shape.n_targets > 0;
    HR_CHECK(check_fits_data(c, regression, err, errlen));
    model_spec spec;
    return model_spec_build(&spec, &c->model, shape.c, shape.h, shape.w,
                            regression ? shape.n_targets : shape.n_classes, err, errlen);
}

hr_status train_init(trainer *t, const train_config *tc, char *err, size_t errlen) {
    memset(t, 0, sizeof *t);
    t->resumed_node = -1;
    t->conf = *tc;
    const train_config *c = &t->conf;
    t->dl.perm = NULL;
    hr_status st = HR_OK;
    HR_CHECK(train_check_config(c, err, errlen)); /* what the configuration decides: first */
    /* every node writes the checkpoint (nodes need not share a disk): find an unwritable place
     * now, not at the first save */
    if (c->checkpoint[0]) HR_CHECK(ckpt_prepare(c->checkpoint, err, errlen));
    char why[HR_ERRLEN];
    if (blas_set_threads(c->threads, why, sizeof why) != HR_OK)
        return hr_fail(err, errlen, HR_ERR_CONFIG, "%s: [node.%ld] threads = %ld: %s",
                       c->threads_at, c->node_id, c->threads, why);
    long threads = blas_threads();
    blas_pick_log();

    HR_CHECK_GOTO(data_load(&t->train, &t->eval, &c->data, c->seed, err, errlen), st, fail);
    int regression = t->train.n_targets > 0;
    HR_CHECK_GOTO(check_fits_data(c, regression, err, errlen), st, fail);
    model_spec spec;
    int outputs = regression ? t->train.n_targets : t->train.n_classes;
    HR_CHECK_GOTO(model_spec_build(&spec, &c->model, t->train.c, t->train.h, t->train.w, outputs,
                                   err, errlen),
                  st, fail);
    const long B = c->global_batch;
    HR_CHECK_GOTO(data_loader_init(&t->dl, &t->train, c->seed, B, err, errlen), st, fail);
    t->ipe = data_loader_iters_per_epoch(&t->dl, B);
    t->total = c->iterations > 0 ? c->iterations : c->epochs * t->ipe;
    HR_CHECK_GOTO(fits_memory(c, &spec, B, t->train.d, err, errlen), st, fail);
    HR_CHECK_GOTO(model_init(&t->m, &spec, B, c->seed, err, errlen), st, fail);
    HR_CHECK_GOTO(opt_init(&t->opt, &c->opt, t->m.n_params, t->total, err, errlen), st, fail);
    opt_set_threads(&t->opt, (int)threads);
    t->dev.delay_s = c->device_delay_s;
    HR_CHECK_GOTO(device_open(&t->dev, c->device ? c->device : &device_cpu_ops, &t->m, &t->opt,
                              c->device_index, err, errlen),
                  st, fail);
    t->x = malloc(sizeof *t->x * (size_t)(B * t->train.d));
    t->y = regression ? NULL : malloc(sizeof *t->y * (size_t)B);
    t->t = regression ? malloc(sizeof *t->t * (size_t)(B * t->train.n_targets)) : NULL;
    if (!t->x || (!t->y && !t->t)) {
        st = hr_fail(err, errlen, HR_ERR_NOMEM, "train: out of memory");
        goto fail;
    }
    t->batch = B; /* the split of a node alone */
    return HR_OK;
fail:
    train_free(t);
    return st;
}

void train_free(trainer *t) {
    if (!t) return;
    device_close(&t->dev);
    data_set_free(&t->train);
    data_set_free(&t->eval);
    data_loader_free(&t->dl);
    model_free(&t->m);
    opt_free(&t->opt);
    free(t->x);
    free(t->y);
    free(t->t);
    free(t->resumed_residual), free(t->resumed_q);
    t->x = t->t = t->resumed_residual = t->resumed_q = NULL;
    t->y = NULL;
}

long train_global_batch(const trainer *t) {
    return t->conf.global_batch;
}

void train_view_of(const trainer *t, train_view *v) {
    if (t->has_peer) {
        t->peer.view(t->peer.ctx, v);
        return;
    }
    *v = (train_view){.rank = 0, .n = 1, .split = &t->batch, .stats = &t->own, .self_id = -1};
}

int train_lead(const trainer *t) {
    train_view v;
    train_view_of(t, &v);
    return v.rank == 0;
}

/* Nodes of the current view. */
static int view_size(const trainer *t) {
    train_view v;
    train_view_of(t, &v);
    return v.n;
}

/* ================================================================ one iteration */

double train_stretch_factor(const train_stretch *s, long iter) {
    double f = s->slowdown;
    for (int i = 0; i < s->n_phases && s->phases[i].iter <= iter; i++) f = s->phases[i].factor;
    return f;
}

void train_set_peer(trainer *t, const train_peer *peer) {
    t->peer = *peer;
    t->has_peer = 1;
}

/* train_step with a peer: the slice from it, backward reporting its progress to it, and the
 * exchange of the gradient sums for the cluster's; then the update, as without one. */
static hr_status peer_step(trainer *t, train_iter *out) {
    const train_peer *p = &t->peer;
    const long i = t->iter, epoch = i / t->ipe, it = i % t->ipe;
    train_slice s;
    HR_CHECK(p->slice(p->ctx, &s));
    const long B = s.global_batch;
    if (B < 1 || B > train_global_batch(t) || s.b > B) return HR_ERR_INVAL;
    HR_CHECK(device_keep_grads(&t->dev, s.on_device));
    if (s.on_device && s.b <= 0) return HR_ERR_INVAL; /* min_batch >= 1: a member has samples */
    model_stats ms = {0, 0};
    model_grad_hook hook = {p->ready, p->ctx};
    double t0 = hr_now();
    if (s.b > 0) {
        HR_CHECK(data_loader_slice(&t->dl, epoch, it, B, s.start, s.b, t->x, t->y, t->t));
        HR_CHECK(device_pass(&t->dev, t->x, t->y, t->t, s.b, &ms, &hook));
    } else {
        memset(t->m.grads, 0, sizeof *t->m.grads * (size_t)t->m.n_params);
        p->ready(p->ctx, 0);
    }
    double t1 = hr_now();
    train_exchange x = {.compute_s = t1 - t0, .loss_sum = ms.loss_sum, .correct = ms.correct};
    HR_CHECK(p->exchange(p->ctx, &x));
    opt_scalars sc = opt_scalars_at(&t->opt, B, i);
    if (!x.skipped) HR_CHECK(device_step(&t->dev, &sc)); /* a skipped step: no update */
    t->peer_buckets = x.buckets;
    t->iter++;
    if (out) {
        out->iter = i, out->epoch = epoch;
        out->loss = x.loss, out->accuracy = x.accuracy;
        out->lr = opt_lr(&t->opt, i);
        out->t_compute = t1 - t0, out->t_node = x.t_node, out->t_comm = x.t_comm;
        out->t_iter = hr_now() - t0, out->factor = x.factor;
        out->changed = x.changed, out->skipped = x.skipped;
    }
    return HR_OK;
}

/* What of a run alone's step is not finite (TRAIN_NONFINITE_* bits): its loss sum, rounded
 * to a float as a cluster's stats carry it, and its gradient sums. */
static int nonfinite_of(const trainer *t, double loss_sum) {
    return (train_all_finite(t->m.grads, (size_t)t->m.n_params) ? 0 : TRAIN_NONFINITE_GRAD) |
           (isfinite((float)loss_sum) ? 0 : TRAIN_NONFINITE_LOSS);
}

/* train_step alone: the whole batch on this node (its split is {B}), and no exchange. */
static hr_status local_step(trainer *t, train_iter *out) {
    const long i = t->iter, epoch = i / t->ipe, it = i % t->ipe, B = train_global_batch(t);
    model_stats ms = {0, 0};

    /* compute: gradient sums of the B samples, then the emulated stretch */
    double t0 = hr_now();
    HR_CHECK(data_loader_slice(&t->dl, epoch, it, B, 0, B, t->x, t->y, t->t));
    HR_CHECK(device_pass(&t->dev, t->x, t->y, t->t, B, &ms, NULL));
    double t1 = hr_now();
    double factor = train_stretch_factor(&t->conf.stretch, i);
    if (factor > 1.0) hr_sleep((factor - 1.0) * (t1 - t0));
    double t2 = hr_now();

    const int nonfinite = nonfinite_of(t, ms.loss_sum);
    if (out) out->nonfinite = nonfinite, out->skipped = nonfinite != 0;
    const long limit = t->conf.skip_limit;
    if (nonfinite && (!t->conf.skip_nonfinite || (limit > 0 && t->skip_run + 1 >= limit))) {
        if (out) out->iter = i;
        t->skip_run += t->conf.skip_nonfinite; /* the steps in a row, this one included */
        return HR_ERR_NONFINITE; /* nothing applied, the cursor stays: the run stops */
    }
    t->skip_run = nonfinite ? t->skip_run + 1 : 0;
    opt_scalars sc = opt_scalars_at(&t->opt, B, i);
    if (!nonfinite) HR_CHECK(device_step(&t->dev, &sc));

    /* the loss sum rounded to a float, as a cluster's stats carry it, so that one node reports
     * what the same run on several nodes does */
    t->own = (train_stat){.b = B, .t = t2 - t0, .loss = (float)ms.loss_sum, .correct = ms.correct};
    t->iter++;
    if (out) {
        out->iter = i, out->epoch = epoch;
        out->loss = t->own.loss / (double)B;
        out->accuracy = (double)ms.correct / (double)B;
        out->lr = opt_lr(&t->opt, i);
        out->t_compute = t1 - t0, out->t_node = t2 - t0, out->t_comm = 0;
        out->t_iter = hr_now() - t0, out->factor = factor;
        out->changed = 0;
        out->nonfinite = nonfinite, out->skipped = nonfinite != 0;
    }
    return HR_OK;
}

hr_status train_probe(trainer *t, long b, double *seconds) {
    const long i = t->iter < t->total ? t->iter : 0, B = train_global_batch(t);
    if (b > B) b = B;
    if (b < 1) b = 1;
    HR_CHECK(data_loader_slice(&t->dl, i / t->ipe, i % t->ipe, B, 0, b, t->x, t->y, t->t));
    double best = INFINITY, start = 0;
    for (int r = 0; r <= TRAIN_PROBE_PASSES; r++) {
        model_stats ms;
        double t0 = hr_now();
        HR_CHECK(device_pass(&t->dev, t->x, t->y, t->t, b, &ms, NULL));
        double t1 = hr_now();
        if (r == 0) start = t1; /* the first pass warms up */
        if (r > 0 && t1 - t0 < best) best = t1 - t0;
        if (r >= 2 && t1 - start >= TRAIN_PROBE_S) break;
    }
    *seconds = best * train_stretch_factor(&t->conf.stretch, i);
    return HR_OK;
}

float *train_device_grads(trainer *t) {
    return device_grads(&t->dev);
}

hr_status train_step(trainer *t, train_iter *out) {
    return t->has_peer ? peer_step(t, out) : local_step(t, out);
}

hr_status train_evaluate(trainer *t, double *loss, double *accuracy) {
    model_stats st = {0, 0};
    const long n = t->eval.n, B = train_global_batch(t);
    for (long s = 0; s < n; s += B) {
        long b = n - s < B ? n - s : B;
        data_gather(&t->eval, NULL, s, b, t->x, t->y, t->t);
        HR_CHECK(device_eval(&t->dev, t->x, t->y, t->t, b, &st));
    }
    *loss = n ? st.loss_sum / (double)n : NAN;
    *accuracy = n && t->y ? (double)st.correct / (double)n : NAN;
    return HR_OK;
}

/* ================================================================ checkpoints */

/* What identifies this run in its checkpoints, with the model's shape: each layer with
 * parameters as its weight matrix, outputs x inputs per output (a convolution's filters x
 * C*K*K), so that a model of other widths with as many parameters is told apart. */
static ckpt_meta meta_of(const trainer *t, int n_nodes) {
    ckpt_meta m = {.iter = (uint64_t)t->iter,
                   .n_params = (uint64_t)t->m.n_params,
                   .seed = t->conf.seed,
                   .global_batch = (uint64_t)train_global_batch(t),
                   .model = (uint32_t)t->conf.model.kind,
                   .n_nodes = (uint32_t)n_nodes,
                   .n_samples = (uint64_t)t->train.n};
    for (int i = 0; i < t->m.n_layers && m.n_shape < CKPT_MAX_SHAPE; i++) {
        const model_layer *L = &t->m.layers[i];
        const long rows = L->kind == LAYER_CONV2D ? L->g.OC : L->out_c;
        if (!L->n_params || rows < 1) continue;
        m.shape[m.n_shape][0] = (uint64_t)rows;
        m.shape[m.n_shape++][1] = (uint64_t)((L->b_off - L->w_off) / rows);
    }
    return m;
}

hr_status train_sync_host(trainer *t) {
    return device_pull(&t->dev);
}

hr_status train_sync_device(trainer *t) {
    return device_push(&t->dev);
}

hr_status train_save(trainer *t, const char *path, char *err, size_t errlen) {
    hr_status st = train_sync_host(t);
    if (st != HR_OK)
        return hr_fail(err, errlen, st,
                       "%s: the %s device's state did not come back for the "
                       "checkpoint",
                       path, t->dev.ops->name);
    train_view v;
    train_view_of(t, &v);
    ckpt_meta m = meta_of(t, v.n);
    ckpt_residual res = {
        .node = v.self_id, .data = (float *)v.residual, .q = (float *)v.q, .n_q = v.n_q};
    return ckpt_save(path, &m, t->m.params, t->opt.vel, (const int64_t *)v.split,
                     v.residual ? &res : NULL, err, errlen);
}

hr_status train_load(trainer *t, const char *path, long *split, int n_nodes, int *recorded,
                     char *err, size_t errlen) {
    if (!split) n_nodes = 0;
    ckpt_meta m = meta_of(t, n_nodes); /* resumed before any view: a split of every node */
    if (!t->resumed_residual &&
        !(t->resumed_residual = malloc(sizeof(float) * (size_t)t->m.n_params + 1)))
        return hr_fail(err, errlen, HR_ERR_NOMEM, "%s: out of memory", path);
    ckpt_residual res = {.data = t->resumed_residual};
    HR_CHECK(ckpt_load(path, &m, t->m.params, t->opt.vel, (int64_t *)split, n_nodes, &res, err,
                       errlen));
    t->resumed_node = (long)res.node;
    if (res.node < 0) free(t->resumed_residual), t->resumed_residual = NULL;
    free(t->resumed_q);
    t->resumed_q = res.q, t->resumed_n_q = (size_t)res.n_q;
    t->iter = (long)m.iter;
    if (recorded) *recorded = split && m.n_nodes == (uint32_t)n_nodes; /* ckpt_load copied it */
    hr_status st = train_sync_device(t);
    if (st != HR_OK)
        return hr_fail(err, errlen, st, "%s: the %s device did not take the checkpoint's state",
                       path, t->dev.ops->name);
    return HR_OK;
}

/* ================================================================ state transfer */

/* Blob layout, little-endian as on every supported host: a header of u64 magic, iter,
 * n_params, seed, B, model kind, then params f32[n_params], opt_state f32[n_params]. */
#define STATE_MAGIC 0x3174737268ull /* "hrst1" */
#define STATE_HDR   6

size_t train_state_bytes(const trainer *t) {
    return sizeof(uint64_t) * STATE_HDR + sizeof(float) * 2 * (size_t)t->m.n_params;
}

static void state_header(const trainer *t, uint64_t h[STATE_HDR]) {
    h[0] = STATE_MAGIC;
    h[1] = (uint64_t)t->iter;
    h[2] = (uint64_t)t->m.n_params;
    h[3] = t->conf.seed;
    h[4] = (uint64_t)train_global_batch(t);
    h[5] = (uint64_t)t->conf.model.kind;
}

void train_state_pack(const trainer *t, void *blob) {
    uint64_t h[STATE_HDR];
    state_header(t, h);
    uint8_t *p = blob;
    const size_t np = sizeof(float) * (size_t)t->m.n_params;
    memcpy(p, h, sizeof h);
    memcpy(p + sizeof h, t->m.params, np);
    memcpy(p + sizeof h + np, t->opt.vel, np);
}

hr_status train_state_unpack(trainer *t, const void *blob, size_t bytes, char *err, size_t errlen) {
    uint64_t mine[STATE_HDR], h[STATE_HDR];
    static const char *const what[STATE_HDR] = {"format", "iteration",    "parameter count",
                                                "seed",   "global batch", "model"};
    if (bytes != train_state_bytes(t))
        return hr_fail(err, errlen, HR_ERR_DATA, "training state of %zu bytes, expected %zu", bytes,
                       train_state_bytes(t));
    state_header(t, mine);
    memcpy(h, blob, sizeof h);
    for (int i = 0; i < STATE_HDR; i++)
        if (i != 1 && h[i] != mine[i])
            return hr_fail(err, errlen, i ? HR_ERR_MISMATCH : HR_ERR_DATA,
                           "training state: its %s is %llu, this node's %llu", what[i],
                           (unsigned long long)h[i], (unsigned long long)mine[i]);
    if (h[1] > (uint64_t)t->total)
        return hr_fail(err, errlen, HR_ERR_DATA,
                       "training state at iteration %llu, past the %ld "
                       "of the run",
                       (unsigned long long)h[1], t->total);
    const uint8_t *p = blob;
    const size_t np = sizeof(float) * (size_t)t->m.n_params;
    memcpy(t->m.params, p + sizeof h, np);
    memcpy(t->opt.vel, p + sizeof h + np, np);
    t->iter = (long)h[1];
    hr_status st = train_sync_device(t);
    if (st != HR_OK)
        return hr_fail(err, errlen, st, "training state: the %s device did not take it",
                       t->dev.ops->name);
    return HR_OK;
}

uint64_t train_hash_floats(const float *v, long n) {
    /* word-at-a-time multiply-xor; only agreement matters, not cryptographic strength */
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)n;
    long i = 0;
    for (; i + 1 < n; i += 2) {
        uint64_t w;
        memcpy(&w, v + i, sizeof w);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
        h ^= h >> 29;
    }
    if (i < n) {
        uint32_t w;
        memcpy(&w, v + i, sizeof w);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
    }
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
}

int train_all_finite(const float *v, size_t n) {
    /* on the bits: an exponent of all ones is inf or NaN; integer ops vectorise, and no
     * floating-point exception is raised */
    uint32_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t w;
        memcpy(&w, v + i, sizeof w);
        bad |= (w & 0x7f800000u) == 0x7f800000u;
    }
    return !bad;
}

uint64_t train_state_hash(const trainer *t) {
    uint64_t h = train_hash_floats(t->m.params, t->m.n_params);
    h = (h ^ train_hash_floats(t->opt.vel, t->m.n_params)) * 0xff51afd7ed558ccdull;
    return (h ^ (uint64_t)t->iter) * 0xc4ceb9fe1a85ec53ull;
}

/* ================================================================ the run */

static void json_num(FILE *f, const char *key, double v) {
    if (isfinite(v))
        fprintf(f, "\"%s\":%.9g", key, v);
    else
        fprintf(f, "\"%s\":null", key);
}

static void json_field(FILE *f, const char *key, double v) {
    if (isfinite(v))
        fprintf(f, "  \"%s\": %.9g,\n", key, v);
    else
        fprintf(f, "  \"%s\": null,\n", key);
}

/* The end of a metrics record: the wall-clock time and the application's fields. */
static void record_end(FILE *f, const trainer *t, const train_opts *o) {
    fprintf(f, ",\"t_unix\":%.6f", hr_unix_s());
    if (o && o->tag) o->tag(o->member_ctx, t, f, 0);
    fputs("}\n", f);
    fflush(f); /* whoever watches the run (a bench, a dashboard) sees each record at once */
}

static void write_metrics(FILE *f, const trainer *t, const train_opts *o, const train_iter *r,
                          double wall, double eval_loss, double eval_acc, int evaluated) {
    fprintf(f, "{\"iter\":%ld,\"epoch\":%ld,", r->iter, r->epoch);
    json_num(f, "loss", r->loss);
    fputc(',', f);
    json_num(f, "accuracy", t->y ? r->accuracy : NAN);
    train_view v;
    train_view_of(t, &v);
    fprintf(f, ",\"lr\":%.9g,\"b\":[", r->lr);
    for (int k = 0; k < v.n; k++) fprintf(f, "%s%ld", k ? "," : "", v.stats[k].b);
    fprintf(f, "],\"t\":[");
    for (int k = 0; k < v.n; k++) fprintf(f, "%s%.6g", k ? "," : "", v.stats[k].t);
    fprintf(f,
            "],\"changed\":%d,\"skipped\":%d,\"t_compute\":%.6g,\"t_comm\":%.6g,"
            "\"t_iter\":%.6g,\"factor\":%g,\"wall_s\":%.6g",
            r->changed, r->skipped, r->t_compute, r->t_comm, r->t_iter, r->factor, wall);
    if (evaluated) {
        fputc(',', f);
        json_num(f, "eval_loss", eval_loss);
        fputc(',', f);
        json_num(f, "eval_accuracy", eval_acc);
    }
    record_end(f, t, o);
}

static void progress(FILE *out, int bar, const trainer *t, const train_iter *r, double rate,
                     double eval_acc, int evaluated) {
    char acc[32] = "", ev[48] = "", nodes[512] = "";
    train_view v;
    train_view_of(t, &v);
    if (v.n > 1) { /* every node's batch and compute time, from the gathered stats */
        size_t o = (size_t)snprintf(nodes, sizeof nodes, " | batch");
        for (int k = 0; k < v.n && o < sizeof nodes; k++)
            o += (size_t)snprintf(nodes + o, sizeof nodes - o, "%s%ld", k ? "/" : " ",
                                  v.stats[k].b);
        if (o < sizeof nodes) o += (size_t)snprintf(nodes + o, sizeof nodes - o, " compute");
        for (int k = 0; k < v.n && o < sizeof nodes; k++)
            o += (size_t)snprintf(nodes + o, sizeof nodes - o, "%s%.0f", k ? "/" : " ",
                                  1e3 * v.stats[k].t);
        if (o < sizeof nodes) snprintf(nodes + o, sizeof nodes - o, " ms");
    }
    if (t->y) snprintf(acc, sizeof acc, " acc %5.1f%%", 100 * r->accuracy);
    if (evaluated)
        snprintf(ev, sizeof ev, t->y ? " | eval acc %.2f%%" : " | eval mse %.4g",
                 t->y ? 100 * eval_acc : eval_acc);
    if (bar) {
        int w = 24, done = (int)((double)w * (double)(r->iter + 1) / (double)t->total);
        char b[32];
        for (int k = 0; k < w; k++) b[k] = k < done ? '#' : '.';
        b[w] = 0;
        fprintf(out, "\r[%s] %3.0f%% it %ld/%ld ep %ld loss %.4f%s %.0f samples/s%s%s\033[K", b,
                100.0 * (double)(r->iter + 1) / (double)t->total, r->iter + 1, t->total, r->epoch,
                r->loss, acc, rate, nodes, ev);
    } else {
        fprintf(out, "iter %ld/%ld epoch %ld loss %.4f%s %.0f samples/s%s%s\n", r->iter + 1,
                t->total, r->epoch, r->loss, acc, rate, nodes, ev);
    }
    fflush(out);
}

static int exists(const char *p) {
    return access(p, F_OK) == 0;
}

/* Whether a cadence of `interval` iterations (0: never) falls on iteration count iter. */
static int due(long iter, long interval) {
    return interval > 0 && iter % interval == 0;
}

/* Where a run reports after each iteration, and when: set up once before the loop. */
typedef struct {
    FILE *out;                /* progress lines or the bar */
    FILE *metrics;            /* one JSON object per iteration, or NULL */
    const char *metrics_path; /* its name, for the error when closing it fails */
    long metrics_lost;        /* the iteration whose record could not be written first; -1 none */
    int metrics_errno;        /* why */
    int out_errno;            /* why progress output failed (none written since); 0: it works */
    int mode;                 /* TRAIN_PROGRESS_*: shown only while this node is rank 0 */
    const train_opts *o;      /* the options (hooks), or NULL */
    long every;               /* lines mode: a line every `every` iterations */
    double start;             /* hr_now() when the loop began */
    double last_print;        /* hr_now() of the last progress output */
    long last_iter;           /* t->iter at the last progress output */
} run_report;

/* Resume from conf.checkpoint when it exists and train_load has not resumed t already;
 * *resumed says whether the run continues an earlier one. */
static hr_status run_resume(trainer *t, int *resumed, char *err, size_t errlen) {
    const char *ckpt = t->conf.checkpoint;
    *resumed = t->iter > 0;
    if (*resumed || !ckpt[0] || !exists(ckpt)) return HR_OK;
    HR_CHECK(train_load(t, ckpt, NULL, 0, NULL, err, errlen));
    HR_INFO(TRAIN, "resumed from checkpoint %s at iteration %ld", ckpt, t->iter);
    *resumed = 1;
    return HR_OK;
}

/* One output file of the run, --`option` `path`: see train_check_outputs. */
static hr_status check_output(const char *option, const char *path, char *err, size_t errlen) {
    char why[128];
    if (hr_file_writable(path, why, sizeof why) == 0) return HR_OK;
    return hr_fail(err, errlen, HR_ERR_CONFIG,
                   "--%s %s: cannot write it (%s); checked before training (expected a file in "
                   "an existing directory this process may write to)",
                   option, path, why);
}

hr_status train_check_outputs(const train_opts *o, char *err, size_t errlen) {
    if (o->metrics_path) HR_CHECK(check_output("metrics", o->metrics_path, err, errlen));
    if (o->summary_path) HR_CHECK(check_output("summary", o->summary_path, err, errlen));
    return HR_OK;
}

/* Open the metrics file (appended to when resumed) and pick the progress mode. */
static hr_status report_open(run_report *rr, const trainer *t, const train_opts *o, int resumed,
                             char *err, size_t errlen) {
    memset(rr, 0, sizeof *rr);
    rr->out = o && o->out ? o->out : stdout;
    rr->o = o;
    rr->metrics_path = o ? o->metrics_path : NULL;
    rr->metrics_lost = -1;
    if (rr->metrics_path && !(rr->metrics = fopen(rr->metrics_path, resumed ? "a" : "w")))
        return hr_fail(err, errlen, HR_ERR_IO, "%s: cannot create metrics file (%s)",
                       rr->metrics_path, strerror(errno));
    rr->mode = o ? o->progress : TRAIN_PROGRESS_NONE;
    if (rr->mode == TRAIN_PROGRESS_AUTO)
        rr->mode = isatty(fileno(rr->out)) ? TRAIN_PROGRESS_BAR : TRAIN_PROGRESS_LINES;
    rr->every = t->total / 20 > 0 ? t->total / 20 : 1;
    return HR_OK;
}

/* Close the metrics file. Records that could not be written (a full disk) fail the run here,
 * at its end: training went on, as the records are not what it exists for. */
static hr_status report_close(run_report *rr, char *err, size_t errlen) {
    FILE *f = rr->metrics;
    rr->metrics = NULL;
    if (!f) return HR_OK;
    int e = hr_file_close(f, rr->metrics_errno);
    if (!e) return HR_OK;
    if (rr->metrics_lost >= 0)
        return hr_fail(err, errlen, HR_ERR_IO,
                       "%s: write failed (%s): the records from iteration %ld on are missing or "
                       "cut short",
                       rr->metrics_path, strerror(e), rr->metrics_lost);
    return hr_fail(err, errlen, HR_ERR_IO, "%s: write failed (%s)", rr->metrics_path,
                   strerror(e));
}

/* Rank 0 says what it trains, on how many nodes, and how the gradients travel. */
static void announce(const trainer *t) {
    const train_config *c = &t->conf;
    train_view v;
    train_view_of(t, &v);
    if (v.rank != 0) return;
    char desc[160];
    model_describe(&t->m, desc, sizeof desc);
    HR_INFO(TRAIN, "training %s %s on %s: %ld iterations of B = %ld (%ld per epoch), %d node(s)%s",
            c->model.name, desc, c->data.name, t->total, train_global_batch(t), t->ipe, v.n,
            c->emulated ? ", EMULATED heterogeneity" : "");
}

/* After iteration r: its metrics record, and a progress line (or bar) when one is due. */
static void report_iteration(run_report *rr, const trainer *t, const train_iter *r, double el,
                             double ea, int evaluated) {
    const int last = t->iter == t->total, bar = rr->mode == TRAIN_PROGRESS_BAR;
    double now = hr_now();
    if (rr->metrics) {
        errno = 0;
        write_metrics(rr->metrics, t, rr->o, r, now - rr->start, el, ea, evaluated);
        if (rr->metrics_lost < 0 && ferror(rr->metrics)) { /* said once, when it happens */
            rr->metrics_lost = r->iter, rr->metrics_errno = errno ? errno : EIO;
            HR_WARN(TRAIN,
                    "%s: cannot write the record of iteration %ld (%s); training goes on, and "
                    "the run ends with this error",
                    rr->metrics_path, r->iter, strerror(rr->metrics_errno));
        }
    }
    if (rr->mode == TRAIN_PROGRESS_NONE || rr->out_errno || !train_lead(t)) return;
    if (!(bar ? (now - rr->last_print > 0.1 || last || evaluated)
              : (t->iter % rr->every == 0 || last || evaluated)))
        return;
    double rate = (double)(t->iter - rr->last_iter) * (double)train_global_batch(t) /
                  fmax(1e-9, now - rr->last_print);
    errno = 0;
    progress(rr->out, bar, t, r, rate, t->y ? ea : el, evaluated);
    if (bar && (evaluated || last)) fputc('\n', rr->out);
    if (ferror(rr->out)) { /* said once, with its cause: the command's last line cannot know it */
        rr->out_errno = errno ? errno : EIO;
        HR_WARN(TRAIN, "cannot write the progress of iteration %ld to %s (%s); training goes on",
                r->iter, rr->out == stdout ? "standard output" : "its stream",
                strerror(rr->out_errno));
    }
    rr->last_print = now, rr->last_iter = t->iter;
}

/* "gradient is", "loss is", "gradient and loss are": what a step alone found not finite. */
static const char *nonfinite_what(int bits) {
    if (bits == (TRAIN_NONFINITE_GRAD | TRAIN_NONFINITE_LOSS)) return "gradient and loss are";
    return bits == TRAIN_NONFINITE_LOSS ? "loss is" : "gradient is";
}

/* A run alone stops before the update of a step that is not finite (with skip, of the step
 * that would be the skip_limit-th skipped in a row). */
static hr_status nonfinite_error(const trainer *t, const train_iter *r, char *err, size_t errlen) {
    if (t->conf.skip_nonfinite)
        return hr_fail(err, errlen, HR_ERR_NONFINITE,
                       "iteration %ld: the %s not finite (NaN or inf), %ld steps in a row; "
                       "stopping before its update ([train] nonfinite = skip, nonfinite_limit = "
                       "%ld: the parameters have not changed since the first of them, so the "
                       "steps left would likely be skipped too). Try a smaller [train] lr (now "
                       "%g)",
                       r->iter, nonfinite_what(r->nonfinite), t->skip_run, t->conf.skip_limit,
                       t->conf.opt.lr);
    return hr_fail(err, errlen, HR_ERR_NONFINITE,
                   "iteration %ld: the %s not finite (NaN or inf); stopping before its update "
                   "([train] nonfinite = error; skip would skip such steps). Try a smaller "
                   "[train] lr (now %g)",
                   r->iter, nonfinite_what(r->nonfinite), t->conf.opt.lr);
}

/* One iteration of the run: the step and its divergence check, then evaluation, report and
 * checkpoint where they are due. Allocates nothing. */
static hr_status run_iteration(trainer *t, const train_opts *o, run_report *rr, train_result *res,
                               char *err, size_t errlen) {
    const train_config *c = &t->conf;
    train_view v;
    train_view_of(t, &v);
    const int rank0 = v.rank == 0;
    train_iter r = {0};
    if (o && o->on_iter) o->on_iter(o->on_iter_ctx, t->iter, v.n);
    hr_status st = train_step(t, &r);
    if (st == HR_ERR_NONFINITE && r.nonfinite) return nonfinite_error(t, &r, err, errlen);
    HR_CHECK(st);
    if (r.skipped) {
        res->skipped++;
        if (!t->has_peer) /* a peer's library said it on every node */
            HR_WARN(TRAIN, "iteration %ld skipped: its %s not finite ([train] nonfinite = skip)",
                    r.iter, nonfinite_what(r.nonfinite));
    } else if (!isfinite(r.loss))
        return hr_fail(err, errlen, HR_ERR_DATA,
                       "iteration %ld: the loss is %g; training diverged (try a smaller [train] "
                       "lr, now %g)",
                       r.iter, r.loss, c->opt.lr);
    res->iterations++;
    res->final_loss = r.loss;
    const int last = t->iter == t->total;
    int evaluated = 0;
    double el = NAN, ea = NAN;
    if (rank0 && t->eval.n > 0 && (last || due(t->iter, c->eval_interval))) {
        HR_CHECK(train_evaluate(t, &el, &ea));
        evaluated = 1;
        res->eval_loss = el, res->eval_accuracy = ea;
    }
    report_iteration(rr, t, &r, el, ea, evaluated);
    if (c->checkpoint[0] && (last || due(t->iter, c->checkpoint_interval)))
        HR_CHECK(train_save(t, c->checkpoint, err, errlen));
    return HR_OK;
}

/* The summary JSON (keys iterations, samples, wall_s, samples_per_s, final_loss, eval_accuracy,
 * emulated, ...), with the fields of the tag hook. Written whole or not at all: into
 * PATH.tmp.PID.TAG (hr_file_tmp_name), renamed over PATH once complete (over the file it
 * leads to, where PATH is a link), so a full disk never leaves half a JSON object where a
 * reader expects one. */
static hr_status write_summary(const trainer *t, const train_result *r, const train_opts *o,
                               const char *path, char *err, size_t errlen) {
    char tmp[4200];
    FILE *f = hr_file_create(path, tmp, sizeof tmp);
    if (!f && !tmp[0]) return hr_fail(err, errlen, HR_ERR_IO, "%s: %s", path, strerror(errno));
    if (!f) return hr_fail(err, errlen, HR_ERR_IO, "%s: cannot create (%s)", tmp, strerror(errno));
    char desc[160];
    model_describe(&t->m, desc, sizeof desc);
    fprintf(f, "{\n  \"iterations\": %ld,\n  \"samples\": %ld,\n", r->iterations, r->samples);
    json_field(f, "wall_s", r->wall_s);
    json_field(f, "samples_per_s", r->samples_per_s);
    json_field(f, "final_loss", r->final_loss);
    json_field(f, "eval_loss", r->eval_loss);
    json_field(f, "eval_accuracy", r->eval_accuracy);
    fprintf(f, "  \"emulated\": %s,\n", r->emulated ? "true" : "false");
    fprintf(f, "  \"model\": \"%s %s\",\n  \"dataset\": \"%s\",\n  \"nodes\": %d,\n",
            t->conf.model.name, desc, t->conf.data.name, view_size(t));
    fprintf(f, "  \"global_batch\": %ld,\n  \"gradient_buckets\": %d,\n", train_global_batch(t),
            t->has_peer ? t->peer_buckets : 1);
    fprintf(f, "  \"skipped_steps\": %ld,\n", r->skipped);
    fprintf(f, "  \"final_iteration\": %ld", t->iter);
    if (o && o->tag) o->tag(o->member_ctx, t, f, 1);
    fputs("\n}\n", f);
    int e = hr_file_commit(f, errno, tmp, path);
    if (!e) return HR_OK;
    return hr_fail(err, errlen, HR_ERR_IO, "%s: write failed (%s); it was not written", path,
                   strerror(e));
}

hr_status train_run(trainer *t, const train_opts *o, train_result *res, char *err, size_t errlen) {
    memset(res, 0, sizeof *res);
    res->emulated = t->conf.emulated;
    res->eval_loss = res->eval_accuracy = res->final_loss = NAN;
    if (!t->m.grads) /* a loan taken back that could not be replaced (model_lend_grads) */
        return hr_fail(err, errlen, HR_ERR_INVAL, "the model has no gradient buffer");
    int resumed;
    HR_CHECK(run_resume(t, &resumed, err, errlen));
    run_report rr;
    HR_CHECK(report_open(&rr, t, o, resumed, err, errlen));
    announce(t);

    hr_status st = HR_OK;
    const long first = t->iter;
    rr.start = rr.last_print = hr_now();
    rr.last_iter = first;
    t->metrics = rr.metrics;
    while (t->iter < t->total) {
        st = run_iteration(t, o, &rr, res, err, errlen);
        if (st != HR_OK && o && o->on_fail) { /* the membership may repair it: then retry */
            st = o->on_fail(o->member_ctx, t, st, err, errlen);
            if (st == HR_OK) {
                if (err) err[0] = 0;
                rr.last_print = hr_now(), rr.last_iter = t->iter;
                continue;
            }
        } else if (st == HR_OK && o && o->after_iter) {
            st = o->after_iter(o->member_ctx, t, err, errlen);
        }
        if (st == HR_ERR_INTERRUPTED && o && (o->on_fail || o->after_iter)) {
            res->left = 1; /* a hook made this node leave at a boundary: the run ends well */
            st = HR_OK;
            break;
        }
        if (st != HR_OK) goto fail;
    }
    res->wall_s = hr_now() - rr.start;
    res->samples = (t->iter - first) * train_global_batch(t);
    res->samples_per_s = res->wall_s > 0 ? (double)res->samples / res->wall_s : 0;
    if (res->iterations == 0 && train_lead(t) && t->eval.n > 0) /* resumed at the end */
        HR_CHECK_GOTO(train_evaluate(t, &res->eval_loss, &res->eval_accuracy), st, fail);
    HR_CHECK_GOTO(train_sync_host(t), st, fail); /* the end record's hash, the caller's model */
    if (rr.metrics) {
        fprintf(rr.metrics, "{\"event\":\"end\",\"iter\":%ld,\"param_hash\":\"%016llx\"", t->iter,
                (unsigned long long)train_hash_floats(t->m.params, t->m.n_params));
        record_end(rr.metrics, t, o);
    }
    t->metrics = NULL;
    HR_CHECK_GOTO(report_close(&rr, err, errlen), st, fail);
    if (train_lead(t) && o && o->summary_path && !res->left)
        HR_CHECK_GOTO(write_summary(t, res, o, o->summary_path, err, errlen), st, fail);
    return HR_OK;
fail:
    t->metrics = NULL;
    (void)report_close(&rr, NULL, 0);
    if (st != HR_OK && err && !err[0])
        snprintf(err, errlen, "iteration %ld: %s", t->iter, hr_strerror(st));
    return st;
}
