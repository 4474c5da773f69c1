/*
 * test_state.c: the training state that moves to a joiner (train_state_*), and a trainer
 * set up for a cluster that trains alone until a peer plugs in.
 *
 *  - a blob packed after some steps and unpacked into a fresh trainer gives the same
 *    iteration, parameters, optimizer state and state hash, and the two trainers then take
 *    bitwise identical steps;
 *  - a blob of another seed, batch or model, or a cut or padded one, is refused with the
 *    reason, and leaves the receiving trainer exactly as it was;
 *  - the state hash changes with the iteration, one parameter bit and one momentum bit;
 *  - a trainer set up for a cluster of 4 is alone (rank 0 of 1, split {B}) without a peer.
 */
#include "tests/check.h"
#include "tests/blas_main.h"
#include "tests/trainer/util.h"

static char dir[64];

#define MLP(batch, seed)                                                                           \
    "model = mlp\nlayers = 784,24,10\nsamples = 1000\neval_samples = 50\nglobal_batch = " batch    \
    "\nlr = 0.05\nmomentum = 0.9\niterations = 40\nseed = " seed

static void steps(trainer *t, int n) {
    train_iter r;
    for (int i = 0; i < n; i++) CHECK(train_step(t, &r) == HR_OK, "step %ld", t->iter);
}

static void flip(float *v) {
    uint32_t w;
    memcpy(&w, v, sizeof w);
    w ^= 1u;
    memcpy(v, &w, sizeof w);
}

static void test_round_trip(void) {
    cfg ca, cb;
    trainer a, b;
    test_trainer_or_die(&a, &ca, dir, MLP("32", "7"));
    test_trainer_or_die(&b, &cb, dir, MLP("32", "7"));
    steps(&a, 5);
    size_t n = train_state_bytes(&a);
    CHECK(n == train_state_bytes(&b), "blob sizes differ");
    void *blob = malloc(n);
    train_state_pack(&a, blob);
    char err[HR_ERRLEN] = "";
    CHECK(train_state_unpack(&b, blob, n, err, sizeof err) == HR_OK, "unpack: %s", err);
    CHECK(b.iter == 5, "iteration %ld after unpack, expected 5", b.iter);
    CHECK(memcmp(a.m.params, b.m.params, sizeof(float) * (size_t)a.m.n_params) == 0,
          "parameters differ after unpack");
    CHECK(memcmp(a.opt.vel, b.opt.vel, sizeof(float) * (size_t)a.m.n_params) == 0,
          "optimizer state differs after unpack");
    CHECK(train_state_hash(&a) == train_state_hash(&b), "state hashes differ after unpack");
    steps(&a, 3);
    steps(&b, 3);
    CHECK(memcmp(a.m.params, b.m.params, sizeof(float) * (size_t)a.m.n_params) == 0,
          "the trainers diverge after the transfer");

    /* the hash sees the iteration, a parameter bit and a momentum bit */
    uint64_t h = train_state_hash(&b);
    b.iter++;
    CHECK(train_state_hash(&b) != h, "the state hash ignores the iteration");
    b.iter--;
    flip(&b.m.params[b.m.n_params / 2]);
    CHECK(train_state_hash(&b) != h, "the state hash ignores a parameter bit");
    flip(&b.m.params[b.m.n_params / 2]);
    flip(&b.opt.vel[b.m.n_params - 1]);
    CHECK(train_state_hash(&b) != h, "the state hash ignores a momentum bit");
    flip(&b.opt.vel[b.m.n_params - 1]);
    CHECK(train_state_hash(&b) == h, "the hash is not a function of the state");
    free(blob);
    train_free(&a);
    train_free(&b);
    cfg_free(&ca);
    cfg_free(&cb);
}

/* unpack `blob` into t: must fail with `want`, an error containing `why`, and change nothing */
static void refused(trainer *t, const void *blob, size_t n, hr_status want, const char *why,
                    const char *what) {
    size_t np = sizeof(float) * (size_t)t->m.n_params;
    float *p0 = malloc(np), *v0 = malloc(np);
    memcpy(p0, t->m.params, np);
    memcpy(v0, t->opt.vel, np);
    long it = t->iter;
    char err[HR_ERRLEN] = "";
    hr_status st = train_state_unpack(t, blob, n, err, sizeof err);
    CHECK(st == want, "%s: status %s, expected %s (%s)", what, hr_strerror(st), hr_strerror(want),
          err);
    CHECK(strstr(err, why) != NULL, "%s: error '%s' does not say '%s'", what, err, why);
    CHECK(t->iter == it && memcmp(p0, t->m.params, np) == 0 && memcmp(v0, t->opt.vel, np) == 0,
          "%s: the refused state changed the trainer", what);
    free(p0);
    free(v0);
}

static void test_refusal(void) {
    cfg cr, co;
    trainer r, o;
    test_trainer_or_die(&r, &cr, dir, MLP("32", "7"));
    steps(&r, 2);
    struct {
        const char *train, *why, *what;
    } others[] = {{MLP("32", "8"), "seed", "another seed"},
                  {MLP("16", "7"), "global batch", "another batch"},
                  {"model = mlp\nlayers = 784,20,10\nsamples = 1000\neval_samples = 50\n"
                   "global_batch = 32\niterations = 40\nseed = 7",
                   "bytes", "another model shape"}};
    for (size_t i = 0; i < sizeof others / sizeof *others; i++) {
        test_trainer_or_die(&o, &co, dir, others[i].train);
        steps(&o, 3);
        size_t n = train_state_bytes(&o);
        void *blob = malloc(n);
        train_state_pack(&o, blob);
        refused(&r, blob, n, strcmp(others[i].why, "bytes") ? HR_ERR_MISMATCH : HR_ERR_DATA,
                others[i].why, others[i].what);
        free(blob);
        train_free(&o);
        cfg_free(&co);
    }
    size_t n = train_state_bytes(&r);
    unsigned char *blob = calloc(1, n + 8);
    train_state_pack(&r, blob);
    refused(&r, blob, n - 4, HR_ERR_DATA, "bytes", "a cut blob");
    refused(&r, blob, n + 8, HR_ERR_DATA, "bytes", "a padded blob");
    blob[0] ^= 0x40;
    refused(&r, blob, n, HR_ERR_DATA, "format", "a blob with a bad magic");
    train_free(&r);
    cfg_free(&cr);
    free(blob);
}

/* A trainer set up for a cluster of 4 (as `hetring run` converts the config) knows nothing of
 * the cluster until a peer plugs in: alone its view is rank 0 of one node, split {B}. */
static void test_max_nodes(void) {
    cfg c;
    trainer t;
    ring_cfg(&c, dir, MLP("32", "7"), "", 4, test_port(), NULL);
    char err[HR_ERRLEN];
    CHECK(test_train_init(&t, &c, 0, err, sizeof err) == HR_OK, "train_init: %s", err);
    train_view v;
    train_view_of(&t, &v);
    CHECK(v.rank == 0 && v.n == 1 && v.split[0] == 32, "one node does not get the whole batch");
    train_iter r;
    CHECK(train_step(&t, &r) == HR_OK, "one node cannot step");
    train_free(&t);
    cfg_free(&c);
}

int main(int argc, char **argv) {
    (void)argc;
    static void (*const cases[])(void) = {test_round_trip, test_refusal, test_max_nodes, NULL};
    return tmpdir_main(argv, dir, sizeof dir, cases);
}
