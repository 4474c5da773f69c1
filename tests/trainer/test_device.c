/*
 * test_device.c: the device table (trainer/device.h) on the CPU and on the emulated GPU.
 *
 *   bitwise    a small CNN trained 6 steps on the CPU device and on the emulation (each queued
 *              operation delayed 2 ms, so every copy completes after the caller moved on):
 *              each pass's gradient sums, the losses, and after a pull the parameters and
 *              momentum are bitwise equal; so is an evaluation on the device's parameters
 *   chunks     the hook reports offsets that never grow and end at 0, and when it reports
 *              off, grads[off, n_params) on the host hold no NaN (the chunks have landed)
 *   stale      after an emulated step the host parameters and momentum are NaN until a pull:
 *              a caller that forgets to synchronise reads NaN, not yesterday's values
 *   push       a state pushed to the device is what the next pass computes with
 *   cuda       device_cuda_check refuses cuda:4096 with a reason (no CUDA build, no GPU, or
 *              out of range), and cuda:0 too where there is no GPU
 */
#include "tests/check.h"
#include "tests/blas_main.h"
#include "tests/model_spec.h"
#include "trainer/device.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BATCH 8
#define STEPS 6

static void spec_cnn(model_spec *s) {
    *s = spec_of(1, 8, 8, MODEL_LOSS_XENT,
                 "conv 4 3 1 1, relu, pool 2 2, flatten, linear 16, relu, linear 3");
}

/* One node: a model, its optimizer and a device over them. */
typedef struct {
    model m;
    opt_sgd o;
    device d;
} node;

static void node_open(node *n, const device_ops *ops, double delay) {
    char err[HR_ERRLEN] = "";
    model_spec s;
    spec_cnn(&s);
    opt_config oc = {
        .lr = 0.05, .schedule = OPT_LR_CONSTANT, .momentum = 0.9, .weight_decay = 1e-3};
    if (model_init(&n->m, &s, BATCH, 42, err, sizeof err) != HR_OK ||
        opt_init(&n->o, &oc, n->m.n_params, STEPS, err, sizeof err) != HR_OK) {
        fprintf(stderr, "set-up: %s\n", err);
        exit(2);
    }
    n->d.delay_s = delay;
    hr_status st = device_open(&n->d, ops, &n->m, &n->o, 0, err, sizeof err);
    CHECK(st == HR_OK, "%s: open: %s", ops->name, err);
}

static void node_close(node *n) {
    device_close(&n->d);
    opt_free(&n->o);
    model_free(&n->m);
}

/* The hook's record: offsets reported, and whether any was reported over a NaN. */
typedef struct {
    const model *m;
    long last;  /* the last offset reported */
    int calls;  /* reports */
    int grew;   /* an offset larger than the one before */
    int nan_at; /* a report after which grads[off, n) held a NaN */
} hook_log;

static void on_ready(void *ctx, long off) {
    hook_log *h = ctx;
    if (h->calls++ && off > h->last) h->grew = 1;
    h->last = off;
    for (long i = off; i < h->m->n_params; i++)
        if (isnan(h->m->grads[i])) h->nan_at = 1;
}

static int all_nan(const float *v, long n) {
    for (long i = 0; i < n; i++)
        if (!isnan(v[i])) return 0;
    return 1;
}

int main(int argc, char **argv) {
    (void)argc;
    test_blas_main(argv);
    node cpu, emu;
    node_open(&cpu, &device_cpu_ops, 0);
    node_open(&emu, &device_emu_ops, 0.002);
    const long n = cpu.m.n_params, in = cpu.m.in_size;
    float x[BATCH * 64];
    int32_t y[BATCH];
    srand(5);
    for (int step = 0; step < STEPS; step++) {
        for (long i = 0; i < BATCH * in; i++) x[i] = (float)rand() / RAND_MAX - 0.5f;
        for (int i = 0; i < BATCH; i++) y[i] = rand() % 3;
        long b = step % 2 ? BATCH : BATCH / 2 + step; /* batches of several sizes */
        model_stats sc, se;
        hook_log hc = {.m = &cpu.m}, he = {.m = &emu.m};
        model_grad_hook kc = {on_ready, &hc}, ke = {on_ready, &he};
        CHECK(device_pass(&cpu.d, x, y, NULL, b, &sc, &kc) == HR_OK, "cpu pass %d", step);
        CHECK(device_pass(&emu.d, x, y, NULL, b, &se, &ke) == HR_OK, "emu pass %d", step);
        CHECK(memcmp(cpu.m.grads, emu.m.grads, sizeof(float) * (size_t)n) == 0,
              "step %d: the emulated pass's gradient sums differ from the CPU's", step);
        CHECK(sc.loss_sum == se.loss_sum && sc.correct == se.correct,
              "step %d: loss %.17g/%.17g, correct %ld/%ld", step, sc.loss_sum, se.loss_sum,
              sc.correct, se.correct);
        CHECK(he.calls >= 2 && he.last == 0 && !he.grew && !he.nan_at,
              "step %d: emu hook: %d calls, last %ld, grew %d, NaN in a reported part %d", step,
              he.calls, he.last, he.grew, he.nan_at);
        CHECK(hc.last == 0 && !hc.grew, "step %d: cpu hook: last %ld, grew %d", step, hc.last,
              hc.grew);
        opt_scalars s = opt_scalars_at(&cpu.o, 16, step);
        CHECK(device_step(&cpu.d, &s) == HR_OK, "cpu step");
        CHECK(device_step(&emu.d, &s) == HR_OK, "emu step");
        CHECK(all_nan(emu.m.params, n) && all_nan(emu.o.vel, n),
              "step %d: after an emulated step the host parameters and momentum must be stale "
              "(NaN) until a pull",
              step);
    }
    CHECK(device_pull(&emu.d) == HR_OK, "emu pull");
    CHECK(memcmp(cpu.m.params, emu.m.params, sizeof(float) * (size_t)n) == 0,
          "parameters after %d steps differ between the CPU and the emulated device", STEPS);
    CHECK(memcmp(cpu.o.vel, emu.o.vel, sizeof(float) * (size_t)n) == 0,
          "momentum after %d steps differs between the CPU and the emulated device", STEPS);
    model_stats ec = {0}, ee = {0};
    CHECK(device_eval(&cpu.d, x, y, NULL, BATCH, &ec) == HR_OK, "cpu eval");
    CHECK(device_eval(&emu.d, x, y, NULL, BATCH, &ee) == HR_OK, "emu eval");
    CHECK(ec.loss_sum == ee.loss_sum && ec.correct == ee.correct,
          "evaluation: loss %.17g/%.17g, correct %ld/%ld", ec.loss_sum, ee.loss_sum, ec.correct,
          ee.correct);

    /* push: zeroed parameters give zero logits, a loss of b * log(3) */
    memset(emu.m.params, 0, sizeof(float) * (size_t)n);
    memset(emu.o.vel, 0, sizeof(float) * (size_t)n);
    CHECK(device_push(&emu.d) == HR_OK, "emu push");
    model_stats sz = {0};
    CHECK(device_eval(&emu.d, x, y, NULL, BATCH, &sz) == HR_OK, "emu eval after push");
    CHECK(fabs(sz.loss_sum - BATCH * log(3.0)) < 1e-9,
          "after pushing zero parameters the loss is %.17g, not %d log 3", sz.loss_sum, BATCH);

    char err[HR_ERRLEN] = "";
    hr_status cst = device_cuda_check(0, err, sizeof err);
    if (cst == HR_OK)
        printf("cuda:0 here: usable\n");
    else
        CHECK(cst == HR_ERR_CONFIG && err[0], "cuda:0 refused without a reason (status %d)", cst);
    printf("cuda:0 here: %s\n", cst == HR_OK ? "usable" : err);
    CHECK(device_cuda_check(4096, err, sizeof err) == HR_ERR_CONFIG && err[0],
          "cuda:4096 must be refused with a reason");
    printf("cuda:4096 here: %s\n", err);
    node_close(&cpu);
    node_close(&emu);
    return check_exit();
}
