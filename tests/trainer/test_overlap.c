/*
 * test_overlap.c: gradient buckets (overlap.h) and the backward progress hook (model.h).
 *
 *  - the plan cuts at layer boundaries, from the end of the buffer, into buckets of at
 *    least bucket_bytes, and always ends at offset 0;
 *  - the hook reports offsets that never grow and end at 0, and the gradients it declares
 *    final are bitwise the ones backward leaves;
 *  - the worker runs jobs in submission order, skips the rest of a round after a failure,
 *    reports that failure once, and serves the next round normally.
 */
#include "check.h"
#include "overlap.h"

#include <stdlib.h>
#include <string.h>

static model_spec mlp_spec(void) {
    /* 8 -> 16 -> 4 -> 2: parameters at [0, 144), [144, 212), [212, 222) */
    model_spec s;
    memset(&s, 0, sizeof s);
    s.in_c = 8, s.in_h = 1, s.in_w = 1, s.loss = MODEL_LOSS_XENT;
    layer_kind kinds[] = {LAYER_LINEAR, LAYER_RELU, LAYER_LINEAR, LAYER_RELU, LAYER_LINEAR};
    int units[] = {16, 0, 4, 0, 2};
    for (int i = 0; i < 5; i++) s.kind[i] = kinds[i], s.units[i] = units[i];
    s.n_layers = 5;
    return s;
}

static void test_plan(const model *m) {
    long cuts[MODEL_MAX_LAYERS + 1];
    CHECK(m->n_params == 222, "n_params %ld", m->n_params);
    int nb = overlap_plan(m, 1, cuts);
    CHECK(nb == 3 && cuts[0] == 222 && cuts[1] == 212 && cuts[2] == 144 && cuts[3] == 0,
          "one bucket per layer: %d buckets, cuts %ld %ld %ld %ld", nb, cuts[0], cuts[1], cuts[2],
          cuts[3]);
    /* the last layer's 40 bytes are too small alone: it joins the middle layer */
    nb = overlap_plan(m, 160, cuts);
    CHECK(nb == 2 && cuts[0] == 222 && cuts[1] == 144 && cuts[2] == 0,
          "160-byte buckets: %d buckets, cuts %ld %ld %ld", nb, cuts[0], cuts[1], cuts[2]);
    nb = overlap_plan(m, 1 << 20, cuts);
    CHECK(nb == 1 && cuts[0] == 222 && cuts[1] == 0, "one big bucket: %d buckets", nb);
}

typedef struct {
    const model *m;
    float *final;  /* (n_params) gradients as the hook saw them final */
    long last_off; /* previous offset reported */
    int calls;     /* hook calls */
    int monotone;  /* offsets never grew */
} hook_rec;

static void on_ready(void *ctx, long off) {
    hook_rec *h = ctx;
    if (off > h->last_off) h->monotone = 0;
    /* snapshot what is declared final; later layers must not change it */
    memcpy(h->final + off, h->m->grads + off, sizeof(float) * (size_t)(h->last_off - off));
    h->last_off = off;
    h->calls++;
}

static void test_hook(model *m) {
    enum { B = 5 };
    float x[B * 8];
    int32_t y[B];
    for (int i = 0; i < B * 8; i++) x[i] = (float)((i * 37) % 11) / 11.0f - 0.4f;
    for (int i = 0; i < B; i++) y[i] = i % 2;
    hook_rec h = {m, calloc((size_t)m->n_params, sizeof(float)), m->n_params, 0, 1};
    model_grad_hook hook = {on_ready, &h};
    model_stats st;
    CHECK(model_forward_backward_hooked(m, x, y, NULL, B, &st, &hook) == HR_OK, "hooked pass");
    /* after forward, after the layers at 212 and 144, and at the end (0) */
    CHECK(h.calls == 4, "hook calls: %d, expected 4", h.calls);
    CHECK(h.monotone && h.last_off == 0, "offsets must fall to 0 (last %ld)", h.last_off);
    CHECK(memcmp(h.final, m->grads, sizeof(float) * (size_t)m->n_params) == 0,
          "gradients declared final changed afterwards");
    /* the plain pass computes the same gradients */
    float *plain = malloc(sizeof(float) * (size_t)m->n_params);
    memcpy(plain, m->grads, sizeof(float) * (size_t)m->n_params);
    CHECK(model_forward_backward(m, x, y, NULL, B, &st) == HR_OK, "plain pass");
    CHECK(memcmp(plain, m->grads, sizeof(float) * (size_t)m->n_params) == 0,
          "hooked and plain passes differ");
    free(plain);
    free(h.final);
}

typedef struct {
    float *seen[8]; /* buffers in call order */
    int calls;      /* all-reduces run */
    int fail_at;    /* call index that fails, or -1 */
} fake_comm;

static hr_status fake_allreduce(void *ctx, float *buf, size_t n) {
    fake_comm *f = ctx;
    int k = f->calls++;
    if (k < 8) f->seen[k] = buf;
    for (size_t i = 0; i < n; i++) buf[i] *= 2; /* "sum" over two identical nodes */
    return k == f->fail_at ? HR_ERR_TIMEOUT : HR_OK;
}

static void test_worker(void) {
    fake_comm f = {{0}, 0, -1};
    overlap_worker w;
    CHECK(overlap_start(&w, fake_allreduce, &f) == HR_OK, "start");
    float a[4] = {1, 2, 3, 4}, b[2] = {5, 6}, c[1] = {7};
    overlap_submit(&w, a, 4);
    overlap_submit(&w, b, 2);
    overlap_submit(&w, c, 1);
    CHECK(overlap_wait(&w) == HR_OK, "clean round");
    CHECK(f.calls == 3 && f.seen[0] == a && f.seen[1] == b && f.seen[2] == c,
          "jobs out of order or missing (%d calls)", f.calls);
    CHECK(a[3] == 8 && b[1] == 12 && c[0] == 14, "results not written back");

    /* the second job fails: the third is skipped and the failure reported */
    f.fail_at = 4;
    overlap_submit(&w, a, 4);
    overlap_submit(&w, b, 2);
    overlap_submit(&w, c, 1);
    CHECK(overlap_wait(&w) == HR_ERR_TIMEOUT, "failure not reported");
    CHECK(f.calls == 5 && c[0] == 14, "a job after the failure ran (%d calls)", f.calls);

    /* a new round starts clean */
    f.fail_at = -1;
    overlap_submit(&w, c, 1);
    CHECK(overlap_wait(&w) == HR_OK, "round after a failure");
    CHECK(f.calls == 6 && c[0] == 28, "round after a failure did not run");
    CHECK(overlap_wait(&w) == HR_OK, "an empty round");
    overlap_stop(&w);
    overlap_stop(&w); /* idempotent */
    overlap_worker never;
    memset(&never, 0, sizeof never);
    overlap_stop(&never);
}

int main(void) {
    model_spec s = mlp_spec();
    model m;
    char err[HR_ERRLEN];
    CHECK(model_init(&m, &s, 8, 4, 7, err, sizeof err) == HR_OK, "%s", err);
    test_plan(&m);
    test_hook(&m);
    model_free(&m);
    test_worker();
    return check_exit();
}
