/*
 * test_train.c: learning targets, determinism, split invariance of the gradient sums (I3),
 * the learning-rate schedules and checkpoint resume (refusal and atomicity: test_ckpt.c).
 */
#include "cluster/cluster_setup.h"
#include "tests/check.h"
#include "tests/blas_main.h"
#include "tests/trainer/util.h"
#include "trainer/ckpt.h"
#include "trainer/train.h"

#include <sys/stat.h>

static char dir[64];

static void run_all(trainer *t, double *losses) {
    train_iter r;
    while (t->iter < t->total) {
        long i = t->iter;
        CHECK(train_step(t, &r) == HR_OK, "step %ld", i);
        if (losses) losses[i] = r.loss;
    }
}

static void test_learning(void) {
    struct {
        const char *name, *train;
        int regression;
        double target; /* accuracy >= target, or mse <= target */
    } cases[] = {
        {"mlp",
         "model = mlp\nlayers = 784,128,10\nsamples = 60000\neval_samples = 5000\n"
         "global_batch = 128\nlr = 0.05\nepochs = 2\nseed = 4",
         0, 0.97},
        {"softmax",
         "model = softmax\nsamples = 6000\neval_samples = 2000\nglobal_batch = 64\n"
         "lr = 0.02\nepochs = 2\nseed = 4",
         0, 0.70},
        {"cnn",
         "model = cnn\nsamples = 3000\neval_samples = 1000\nglobal_batch = 32\nlr = 0.02\n"
         "iterations = 150\nseed = 4",
         0, 0.60},
        {"linreg",
         "model = linreg\ndataset = synthetic-regression\nsamples = 4000\n"
         "eval_samples = 4000\nglobal_batch = 64\nlr = 0.01\nepochs = 5\nseed = 4",
         1, 1.1 * DATA_REGRESSION_NOISE * DATA_REGRESSION_NOISE},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        cfg c;
        trainer t;
        test_trainer_or_die(&t, &c, dir, cases[k].train);
        run_all(&t, NULL);
        double loss, acc;
        CHECK(train_evaluate(&t, &loss, &acc) == HR_OK, "evaluate");
        if (cases[k].regression) {
            printf("%-8s held-out mse %.5f (noise floor %.5f)\n", cases[k].name, loss,
                   (double)(DATA_REGRESSION_NOISE * DATA_REGRESSION_NOISE));
            CHECK(loss <= cases[k].target, "%s: mse %.5f > %.5f", cases[k].name, loss,
                  cases[k].target);
        } else {
            printf("%-8s held-out accuracy %.4f (target %.2f)\n", cases[k].name, acc,
                   cases[k].target);
            CHECK(acc >= cases[k].target, "%s: accuracy %.4f < %.2f", cases[k].name, acc,
                  cases[k].target);
        }
        train_free(&t);
        cfg_free(&c);
    }
}

static const char *small = "model = mlp\nlayers = 784,32,10\nsamples = 2000\neval_samples = 200\n"
                           "global_batch = 100\nlr = 0.05\nweight_decay = 0.0005\niterations = 40\n"
                           "warmup = 5\nlr_schedule = cosine\nseed = 11";

static void test_determinism_and_resume(void) {
    cfg c1, c2;
    trainer a, b;
    double la[40], lb[40];
    test_trainer_or_die(&a, &c1, dir, small);
    run_all(&a, la);
    test_trainer_or_die(&b, &c2, dir, small);
    run_all(&b, lb);
    CHECK(memcmp(la, lb, sizeof la) == 0, "same seed: loss trajectories differ");
    CHECK(memcmp(a.m.params, b.m.params, sizeof(float) * a.m.n_params) == 0,
          "same seed: parameters differ");
    CHECK(la[39] < la[0], "loss did not fall: %g -> %g", la[0], la[39]);
    train_free(&b);
    cfg_free(&c2);

    /* 17 iterations, checkpoint, a fresh trainer resumes: bitwise the same run */
    char path[128], err[HR_ERRLEN];
    snprintf(path, sizeof path, "%s/ck.bin", dir);
    test_trainer_or_die(&b, &c2, dir, small);
    b.total = 17;
    run_all(&b, lb);
    CHECK(train_save(&b, path, err, sizeof err) == HR_OK, "%s", err);
    train_free(&b);
    cfg_free(&c2);
    test_trainer_or_die(&b, &c2, dir, small);
    CHECK(train_load(&b, path, NULL, 0, NULL, err, sizeof err) == HR_OK, "%s", err);
    CHECK(b.iter == 17, "resumed at %ld", b.iter);
    run_all(&b, lb);
    CHECK(memcmp(la, lb, sizeof la) == 0, "resumed run: loss trajectory differs");
    CHECK(memcmp(a.m.params, b.m.params, sizeof(float) * a.m.n_params) == 0,
          "resumed run: parameters differ");
    CHECK(memcmp(a.opt.vel, b.opt.vel, sizeof(float) * a.m.n_params) == 0,
          "resumed run: optimizer state differs");

    train_free(&b);
    cfg_free(&c2);
    train_free(&a);
    cfg_free(&c1);
}

/* I3 at the level of one iteration: the gradient sums of any split of the batch add up to
 * the sums of the whole batch, up to float summation order. */
static void test_split_invariance(void) {
    cfg c;
    trainer t;
    test_trainer_or_die(&t, &c, dir,
                        "model = mlp\nlayers = 784,64,32,10\nsamples = 1000\nglobal_batch = 120\n"
                        "iterations = 2\nseed = 3");
    long n = t.m.n_params, d = t.train.d;
    float *whole = malloc(sizeof(float) * n), *sum = calloc((size_t)n, sizeof(float));
    model_stats st, part;
    CHECK(data_loader_slice(&t.dl, 0, 1, 120, 0, 120, t.x, t.y, NULL) == HR_OK, "slice");
    CHECK(model_forward_backward(&t.m, t.x, t.y, NULL, 120, &st) == HR_OK, "fb");
    memcpy(whole, t.m.grads, sizeof(float) * n);
    const long split[3] = {7, 80, 33};
    double loss = 0;
    long correct = 0;
    for (int k = 0; k < 3; k++) {
        CHECK(data_loader_slice(&t.dl, 0, 1, 120, data_slice_start(split, k), split[k], t.x, t.y,
                                NULL) == HR_OK,
              "slice");
        CHECK(model_forward_backward(&t.m, t.x, t.y, NULL, split[k], &part) == HR_OK, "fb");
        for (long i = 0; i < n; i++) sum[i] += t.m.grads[i];
        loss += part.loss_sum, correct += part.correct;
    }
    double gmax = 0;
    for (long i = 0; i < n; i++) gmax = fmax(gmax, fabs(whole[i]));
    CHECK_CLOSE(whole, sum, n, 1e-5 * gmax, "gradient sums: whole batch vs 3 slices");
    CHECK(fabs(loss - st.loss_sum) < 1e-5 * st.loss_sum && correct == st.correct,
          "loss %.9g vs %.9g", loss, st.loss_sum);
    (void)d;
    free(whole), free(sum);
    train_free(&t);
    cfg_free(&c);
}

static void test_schedules(void) {
    opt_sgd o;
    char err[HR_ERRLEN];
    opt_config c = {.lr = 0.1, .warmup = 10, .schedule = OPT_LR_STEP, .step = 100, .gamma = 0.5};
    CHECK(opt_init(&o, &c, 4, 1000, err, sizeof err) == HR_OK, "%s", err);
    CHECK(fabs(opt_lr(&o, 0) - 0.01) < 1e-12 && fabs(opt_lr(&o, 9) - 0.1) < 1e-12, "warm-up");
    CHECK(fabs(opt_lr(&o, 109) - 0.1) < 1e-12 && fabs(opt_lr(&o, 110) - 0.05) < 1e-12 &&
              fabs(opt_lr(&o, 310) - 0.0125) < 1e-12,
          "step");
    o.schedule = OPT_LR_COSINE;
    CHECK(fabs(opt_lr(&o, 10) - 0.1) < 1e-12 && fabs(opt_lr(&o, 505) - 0.05) < 1e-9 &&
              opt_lr(&o, 999) < 1e-5,
          "cosine");
    o.schedule = OPT_LR_CONSTANT, o.warmup = 0;
    CHECK(opt_lr(&o, 0) == 0.1 && opt_lr(&o, 999) == 0.1, "constant");
    /* the step divides the gradient sums by B: p -= lr * (g/B + wd p) with momentum */
    float p[4] = {1, 1, 1, 1}, g[4] = {4, 8, 0, -4};
    o.momentum = 0.5, o.weight_decay = 0.1;
    opt_step(&o, p, g, 4, 0);
    CHECK(fabsf(p[0] - (1 - 0.1f * (1 + 0.1f))) < 1e-6f, "step value %g", (double)p[0]);
    opt_step(&o, p, g, 4, 1);
    float v = 0.5f * 1.1f + (1 + 0.1f * (1 - 0.11f));
    CHECK(fabsf(p[0] - (1 - 0.11f - 0.1f * v)) < 1e-6f, "momentum value %g", (double)p[0]);
    opt_free(&o);
}

/* opt_step on several threads gives bitwise the parameters and momentum of one thread, for
 * sizes that do not divide evenly, and touches every parameter exactly once. */
static void test_opt_threads(void) {
    char err[HR_ERRLEN];
    opt_config c = {.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-4};
    const long sizes[] = {(1L << 16) + 37, 200003, 669706};
    const int threads[] = {2, 3, 4, 7, 16};
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        long n = sizes[si];
        float *g = malloc(sizeof *g * (size_t)n), *p1 = malloc(sizeof *p1 * (size_t)n);
        float *pk = malloc(sizeof *pk * (size_t)n);
        CHECK(g && p1 && pk, "out of memory");
        for (long i = 0; i < n; i++) {
            g[i] = (float)((i * 2654435761u) % 1000) / 250.0f - 2.0f;
            p1[i] = (float)(i % 97) / 50.0f - 1.0f;
        }
        opt_sgd o1;
        CHECK(opt_init(&o1, &c, n, 100, err, sizeof err) == HR_OK, "%s", err);
        for (int it = 0; it < 3; it++) opt_step(&o1, p1, g, 8, it);
        for (size_t ti = 0; ti < sizeof threads / sizeof *threads; ti++) {
            opt_sgd ok;
            CHECK(opt_init(&ok, &c, n, 100, err, sizeof err) == HR_OK, "%s", err);
            opt_set_threads(&ok, threads[ti]);
            for (long i = 0; i < n; i++) pk[i] = (float)(i % 97) / 50.0f - 1.0f;
            for (int it = 0; it < 3; it++) opt_step(&ok, pk, g, 8, it);
            CHECK(memcmp(pk, p1, sizeof *pk * (size_t)n) == 0 &&
                      memcmp(ok.vel, o1.vel, sizeof *pk * (size_t)n) == 0,
                  "n = %ld, %d threads: parameters or momentum differ from one thread's", n,
                  threads[ti]);
            opt_free(&ok);
        }
        opt_free(&o1);
        free(g), free(p1), free(pk);
    }
}

/* A node's slowdown and interference schedule reach the trainer's stretch factor (a node
 * alone) and the cluster's (hetring_step applies it): the slowdown before the first phase,
 * then each phase's factor from its iteration on. */
static void test_stretch(void) {
    char path[512], err[HR_ERRLEN] = "";
    snprintf(path, sizeof path, "%s/stretch.ini", dir);
    FILE *f = fopen(path, "w");
    fputs("[cluster]\nsecurity = none\n[node.0]\nhost = 127.0.0.1\nport = 7001\n"
          "slowdown = 2\ninterference = 10:4, 20:1\n",
          f);
    fclose(f);
    cfg c;
    CHECK(cfg_load(&c, path, err, sizeof err) == HR_OK, "%s", err);
    train_config tc;
    cluster_config cc;
    app_train_config(&c, 0, NULL, &tc);
    app_cluster_config(&c, 0, NULL, &cc);
    const train_stretch *s[2] = {&tc.stretch, &cc.stretch};
    for (int k = 0; k < 2; k++) {
        const char *who = k ? "cluster" : "trainer";
        CHECK(train_stretch_factor(s[k], 0) == 2, "%s: before interference", who);
        CHECK(train_stretch_factor(s[k], 10) == 4, "%s: during interference", who);
        CHECK(train_stretch_factor(s[k], 25) == 1, "%s: after interference", who);
    }
    CHECK(tc.emulated, "the run is labelled emulated");
    cfg_free(&c);
}

int main(int argc, char **argv) {
    (void)argc;
    static void (*const cases[])(void) = {test_schedules,
                                          test_opt_threads,
                                          test_stretch,
                                          test_split_invariance,
                                          test_determinism_and_resume,
                                          test_learning,
                                          NULL};
    return tmpdir_main(argv, dir, sizeof dir, cases);
}
