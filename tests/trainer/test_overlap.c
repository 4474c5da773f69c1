/*
 * test_overlap.c: gradient buckets (cluster/overlap.h) and the backward progress hook and
 * layer pieces (trainer/model.h).
 *
 *  - the model's gradient pieces are its layers with parameters; the plan cuts at their
 *    boundaries, from the end of the buffer, into buckets of at least bucket_bytes, always
 *    ends at offset 0, and grows its buckets rather than overflow the job table;
 *  - the hook reports offsets that never grow and end at 0, and the gradients it declares
 *    final are bitwise the ones backward leaves;
 *  - the worker runs jobs in submission order, skips the rest of a round after a failure,
 *    reports that failure once, and serves the next round normally;
 *  - bucket_bytes = auto (overlap_choose): an explicit setting is obeyed; auto uses the
 *    buckets only with a plan of two or more, two nodes or more, and a core to spare on every
 *    node, or, where a node has none (it is named), an all-reduce measured in the view on every
 *    node that waits on the wire (least wall time against the longest compute, most CPU
 *    against that wall time); a node's threads are its machine's compute threads (0: every
 *    core) plus one communication thread per node;
 *  - the gradient path (grad_path_choose) as a table of view facts -> path: nccl in an NCCL
 *    view, buckets where overlap_choose says so, else the tree where it takes the exchange,
 *    else whole;
 *  - the cluster's config gets auto by default with this node's facts, and the description
 *    of a node that may join a cluster names the plan of its layers (the library's choice
 *    itself is tested through hetring run in tests/dist/test_overlap_auto.sh).
 */
#include "base/hr_cores.h"
#include "cluster/cluster_setup.h"
#include "cluster/grad_path.h"
#include "cluster/overlap.h"
#include "tests/check.h"
#include "tests/blas_main.h"
#include "tests/model_spec.h"
#include "tests/trainer/util.h"

#include <stdlib.h>
#include <string.h>

/* A node's machine fact: id, cores, threads, hands over at the end, alone on its host; then
 * what it measured in the view (all-reduce wall and CPU seconds, compute seconds: measured). */
#define FACT(id_, cores_, demand_, at_end_)                                                        \
    ((overlap_fact){                                                                               \
        .id = (id_), .cores = (cores_), .demand = (demand_), .at_end = (at_end_), .hosted = 1})
static overlap_fact measured(overlap_fact f, double comm_s, double cpu_s, double compute_s) {
    f.comm_s = comm_s, f.comm_cpu_s = cpu_s, f.compute_s = compute_s;
    return f;
}

static model_spec mlp_spec(void) {
    /* 8 -> 16 -> 4 -> 2: parameters at [0, 144), [144, 212), [212, 222) */
    return spec_of(8, 1, 1, MODEL_LOSS_XENT, "linear 16, relu, linear 4, relu, linear 2");
}

static void test_plan(const model *m) {
    size_t off[MODEL_MAX_LAYERS], count[MODEL_MAX_LAYERS];
    long cuts[OVERLAP_MAX_JOBS + 1];
    CHECK(m->n_params == 222, "n_params %ld", m->n_params);
    const int k = model_grad_pieces(m, off, count);
    CHECK(k == 3 && off[0] == 0 && count[0] == 144 && off[1] == 144 && count[1] == 68 &&
              off[2] == 212 && count[2] == 10,
          "the layer pieces: %d", k);
    int nb = overlap_plan(count, k, 1, cuts);
    CHECK(nb == 3 && cuts[0] == 222 && cuts[1] == 212 && cuts[2] == 144 && cuts[3] == 0,
          "one bucket per layer: %d buckets, cuts %ld %ld %ld %ld", nb, cuts[0], cuts[1], cuts[2],
          cuts[3]);
    /* the last layer's 40 bytes are too small alone: it joins the middle layer */
    nb = overlap_plan(count, k, 160, cuts);
    CHECK(nb == 2 && cuts[0] == 222 && cuts[1] == 144 && cuts[2] == 0,
          "160-byte buckets: %d buckets, cuts %ld %ld %ld", nb, cuts[0], cuts[1], cuts[2]);
    nb = overlap_plan(count, k, 1 << 20, cuts);
    CHECK(nb == 1 && cuts[0] == 222 && cuts[1] == 0, "one big bucket: %d buckets", nb);
    nb = overlap_plan(count, k, 0, cuts);
    CHECK(nb == 1 && cuts[0] == 222 && cuts[1] == 0, "bucket_bytes = 0: %d buckets", nb);
    /* more buffers than the job table: larger buckets, never more than it holds */
    static size_t many[200];
    for (int i = 0; i < 200; i++) many[i] = 10;
    nb = overlap_plan(many, 200, 4, cuts);
    CHECK(nb > 1 && nb <= OVERLAP_MAX_JOBS && cuts[0] == 2000 && cuts[nb] == 0,
          "200 buffers in buckets of >= 4 bytes: %d buckets (the table holds %d)", nb,
          OVERLAP_MAX_JOBS);
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

/* ---------------------------------------------------------------- bucket_bytes = auto */

static void test_facts(void) {
    long one[] = {1}, four[] = {1, 1, 1, 1}, mixed[] = {4, 0};
    overlap_fact f = overlap_fact_of(7, 16, one, 1);
    CHECK(f.id == 7 && f.cores == 16 && f.demand == 2 && overlap_fact_spare(&f),
          "one node, one thread, 16 cores: demand %ld", f.demand);
    f = overlap_fact_of(0, 2, four, 4); /* four nodes of hetero.ini on two cores */
    CHECK(f.demand == 8 && !overlap_fact_spare(&f) && f.hosted == 4,
          "4 x 1 thread on 2 cores: demand %ld, hosted %ld", f.demand, f.hosted);
    f = overlap_fact_of(0, 16, four, 4); /* the same on 16 cores */
    CHECK(f.demand == 8 && overlap_fact_spare(&f), "4 x 1 thread on 16 cores: demand %ld",
          f.demand);
    f = overlap_fact_of(0, 8, mixed, 2); /* threads = 0 takes every core */
    CHECK(f.demand == 4 + 1 + 8 + 1 && !overlap_fact_spare(&f), "threads 4 and 0 on 8 cores: %ld",
          f.demand);
    f = overlap_fact_of(0, 2, one, 1); /* exactly one core for the communication thread */
    CHECK(overlap_fact_spare(&f), "1 thread on 2 cores must leave a core to spare");
    overlap_fact unknown = FACT(3, 0, 0, 0);
    CHECK(!overlap_fact_spare(&unknown), "a node whose cores are unknown has none to spare");
    CHECK(hr_cores() >= 1, "hr_cores %ld", hr_cores());
}

typedef struct {
    const char *name;
    long bucket_bytes;     /* the setting */
    int n_buckets;         /* buckets of the plan */
    int n;                 /* nodes with facts */
    overlap_fact facts[4]; /* their facts */
    int want;              /* buckets used */
    const char *why;       /* a part of the reason */
} choose_case;

static void test_choose(void) {
    const overlap_fact roomy = FACT(0, 16, 8, 0), roomy1 = FACT(1, 16, 2, 0),
                       tight = FACT(2, 2, 4, 0), exact = FACT(3, 2, 2, 0),
                       unknown = FACT(4, 0, 0, 0), at_end = FACT(5, 16, 2, 1);
    /* four nodes on two cores (hetero.ini's, 8 threads), measured on a slow link: 30 ms of
     * wire, 2-4 ms of CPU, 20-25 ms of compute; the fast nodes also waited for the slowest */
    const overlap_fact w0 = measured(FACT(0, 2, 8, 0), 0.040, 0.002, 0.020),
                       w1 = measured(FACT(1, 2, 8, 0), 0.030, 0.004, 0.025),
                       w2 = measured(FACT(2, 2, 8, 0), 0.035, 0.003, 0.022);
    /* the same on loopback: 3 ms of all-reduce, 2.5 of it CPU (copies and sums) */
    const overlap_fact c0 = measured(FACT(0, 2, 8, 0), 0.004, 0.002, 0.020),
                       c1 = measured(FACT(1, 2, 8, 0), 0.003, 0.0025, 0.025);
    /* a fast link beside a long compute: 1 ms of wire, no CPU, 100 ms of compute */
    const overlap_fact s0 = measured(FACT(0, 2, 8, 0), 0.001, 0.0001, 0.100),
                       s1 = measured(FACT(1, 2, 8, 0), 0.002, 0.0001, 0.050);
    const overlap_fact half = measured(FACT(1, 2, 8, 0), 0.030, 0.0, 0.025); /* no CPU */
    overlap_fact shared = w1; /* w1 with two more nodes on its host */
    shared.hosted = 3;
    const choose_case cases[] = {
        {"explicit 0", 0, 3, 2, {roomy, roomy1}, 0, "bucket_bytes = 0"},
        {"explicit 0, before facts", 0, 3, 0, {{0}}, 0, "bucket_bytes = 0"},
        {"explicit N overrides a tight node", 1024, 2, 2, {roomy, tight}, 1, "bucket_bytes = 1024"},
        {"explicit N without facts", 1024, 2, 0, {{0}}, 1, "bucket_bytes = 1024"},
        {"explicit N, one bucket", 1 << 30, 1, 2, {roomy, roomy1}, 0, "fit one bucket"},
        {"auto, every node roomy",
         OVERLAP_AUTO,
         2,
         2,
         {roomy, roomy1},
         1,
         "fewest: node 0, 16 cores for 8 threads"},
        {"auto, exactly a core each",
         OVERLAP_AUTO,
         2,
         2,
         {roomy1, exact},
         1,
         "fewest: node 3, 2 cores for 2 threads"},
        {"auto, one tight node",
         OVERLAP_AUTO,
         3,
         3,
         {roomy, tight, roomy1},
         0,
         "node 2 has no core to spare, 2 cores for 4 threads"},
        {"auto, the first tight node is named",
         OVERLAP_AUTO,
         3,
         3,
         {tight, unknown, roomy},
         0,
         "node 2 has no core"},
        {"auto, a roomy node whose loop hands over at the end",
         OVERLAP_AUTO,
         2,
         3,
         {roomy, at_end, roomy1},
         0,
         "node 5 hands its gradients over only after its compute"},
        {"auto, unknown cores", OVERLAP_AUTO, 2, 2, {roomy, unknown}, 0, "node 4 has no core"},
        {"auto, model too small", OVERLAP_AUTO, 1, 2, {roomy, roomy1}, 0, "fit one 1 MiB bucket"},
        {"auto, no plan (one node config)", OVERLAP_AUTO, 0, 2, {roomy, roomy1}, 0, "fit one"},
        {"auto, facts not gathered", OVERLAP_AUTO, 2, 0, {{0}}, 0, "not gathered"},
        {"auto, a view of one node", OVERLAP_AUTO, 2, 1, {roomy}, 0, "one node"},
        {"auto, tight, waits on the wire",
         OVERLAP_AUTO,
         2,
         3,
         {w0, w1, w2},
         1,
         "took 30.0 ms (node 1, the least), 4.0 ms of CPU at most (node 1), the compute 25.0 ms "
         "at most (node 1): it waits on the wire"},
        {"auto, tight, a roomy node among them",
         OVERLAP_AUTO,
         2,
         3,
         {roomy, w1, w2},
         0,
         "node 1 has no core to spare, 2 cores for 8 threads; the all-reduce is not measured"},
        {"auto, tight, one node not measured", OVERLAP_AUTO, 2, 2, {w0, FACT(1, 2, 8, 0)}, 0,
         "not measured yet"},
        {"auto, tight, CPU-bound all-reduce",
         OVERLAP_AUTO,
         2,
         2,
         {c0, c1},
         0,
         "it keeps a core busy"},
        {"auto, tight, the wire too short to pay",
         OVERLAP_AUTO,
         2,
         2,
         {s0, s1},
         0,
         "too short beside the compute"},
        {"auto, tight, wire-bound but at_end",
         OVERLAP_AUTO,
         2,
         3,
         {w0, at_end, w2},
         0,
         "node 5 hands its gradients over only after"},
        {"auto, tight, all-reduce with no CPU", OVERLAP_AUTO, 2, 2, {w0, half}, 1, "waits on the wire"},
        {"auto, tight, a node shares its host",
         OVERLAP_AUTO,
         2,
         3,
         {w0, shared, w2},
         0,
         "node 0 has no core to spare, 2 cores for 8 threads; node 1 shares its host with 2 other "
         "nodes"},
        {"auto, a third of the all-reduce is CPU",
         OVERLAP_AUTO,
         2,
         2,
         {measured(FACT(0, 2, 8, 0), 0.030, 0.010, 0.02), w1},
         0,
         "it keeps a core busy"},
        {"explicit 0 beats a wire-bound view", 0, 3, 2, {w0, w1}, 0, "bucket_bytes = 0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const choose_case *c = &cases[i];
        char why[384] = "";
        int got = overlap_choose(c->bucket_bytes, c->n_buckets, c->n ? c->facts : NULL, c->n, why,
                                 sizeof why);
        printf("%-40s -> %d (%s)\n", c->name, got, why);
        CHECK(got == c->want, "%s: chose %d, expected %d (%s)", c->name, got, c->want, why);
        CHECK(strstr(why, c->why) != NULL, "%s: the reason '%s' lacks '%s'", c->name, why, c->why);
    }
    char b[32];
    overlap_bytes_str(1L << 20, b, sizeof b);
    CHECK(strcmp(b, "1 MiB") == 0, "1 MiB: %s", b);
    overlap_bytes_str(1000, b, sizeof b);
    CHECK(strcmp(b, "1000 B") == 0, "1000 B: %s", b);
}

/* grad_path_choose, one pure function of the view: its table. */
static void test_paths(void) {
    const overlap_fact roomy = FACT(0, 16, 8, 0), roomy1 = FACT(1, 16, 2, 0),
                       tight = FACT(2, 2, 4, 0);
    const overlap_fact two[2] = {roomy, roomy1}, mixed[2] = {roomy, tight},
                       wired[2] = {measured(tight, 0.03, 0.001, 0.02),
                                   measured(FACT(3, 2, 4, 0), 0.04, 0.001, 0.02)},
                       slowc[2] = {measured(tight, 0.03, 0.001, 0.4),
                                   measured(FACT(3, 2, 4, 0), 0.04, 0.001, 0.02)};
    const struct {
        const char *name;
        grad_view v;
        const grad_path *want;
    } cases[] = {
        {"an NCCL view", {1, OVERLAP_AUTO, 2, two, 2, 1, 0, 0, 0, 0}, &grad_path_nccl},
        {"an NCCL view, buckets set", {1, 1024, 2, two, 2, 0, 0, 0, 0, 0}, &grad_path_nccl},
        {"buckets set, the tree would take it", {0, 1024, 2, NULL, 4, 1, 0, 0, 0, 0}, &grad_path_buckets},
        {"auto, roomy nodes", {0, OVERLAP_AUTO, 2, two, 2, 0, 0, 0, 0, 0}, &grad_path_buckets},
        {"auto, a tight node", {0, OVERLAP_AUTO, 2, mixed, 2, 0, 0, 0, 0, 0}, &grad_path_whole},
        {"auto, a tight node, the tree takes it", {0, OVERLAP_AUTO, 2, mixed, 2, 1, 0, 0, 0, 0}, &grad_path_tree},
        {"auto, tight nodes, wire-bound", {0, OVERLAP_AUTO, 2, wired, 2, 0, 0, 0, 0, 0}, &grad_path_buckets},
        {"auto, tight, wire-bound, tree", {0, OVERLAP_AUTO, 2, wired, 2, 1, 0, 0, 0, 0}, &grad_path_buckets},
        {"auto before facts, the tree takes it", {0, OVERLAP_AUTO, 1, NULL, 8, 1, 0, 0, 0, 0}, &grad_path_tree},
        {"off, too big for the tree", {0, 0, 3, two, 2, 0, 0, 0, 0, 0}, &grad_path_whole},
        {"off, the tree takes it", {0, 0, 3, two, 2, 1, 0, 0, 0, 0}, &grad_path_tree},
        /* bf16 (1): buckets where float32's would overlap, each with bf16 on the wire */
        {"wire = bf16, auto, roomy nodes", {0, OVERLAP_AUTO, 2, two, 2, 0, 1, 0, 0, 0}, &grad_path_bf16_buckets},
        {"wire = bf16, auto, a tight node", {0, OVERLAP_AUTO, 2, mixed, 2, 0, 1, 0, 0, 0}, &grad_path_bf16},
        {"wire = bf16, auto, tight nodes, wire-bound", {0, OVERLAP_AUTO, 2, wired, 2, 0, 1, 0, 0, 0}, &grad_path_bf16_buckets},
        {"wire = bf16, auto before facts", {0, OVERLAP_AUTO, 2, NULL, 2, 0, 1, 0, 0, 0}, &grad_path_bf16},
        {"wire = bf16, buckets set", {0, 1024, 2, NULL, 2, 0, 1, 0, 0, 0}, &grad_path_bf16_buckets},
        {"wire = bf16, one bucket", {0, 1024, 1, NULL, 2, 0, 1, 0, 0, 0}, &grad_path_bf16},
        {"wire = bf16, the tree would take it", {0, OVERLAP_AUTO, 1, NULL, 8, 1, 1, 0, 0, 0}, &grad_path_bf16},
        {"wire = bf16, off", {0, 0, 3, two, 2, 0, 1, 0, 0, 0}, &grad_path_bf16},
        {"wire = bf16, an NCCL view", {1, OVERLAP_AUTO, 2, two, 2, 1, 1, 0, 0, 0}, &grad_path_nccl},
        {"wire = powersgd, auto, roomy nodes", {0, OVERLAP_AUTO, 2, two, 2, 0, 2, 0, 0, 0},
         &grad_path_powersgd},
        {"wire = powersgd, the tree would take it", {0, OVERLAP_AUTO, 1, NULL, 8, 1, 2, 0, 0, 0},
         &grad_path_powersgd},
        /* wire = auto (3): 2.68 MB in 30 ms between two nodes is 0.71 Gbit/s of bus bandwidth */
        {"wire = auto, a slow link", {0, 0, 3, wired, 2, 0, 3, 2680000, 54, 2}, &grad_path_powersgd},
        {"wire = auto, a slow link, buckets auto", {0, OVERLAP_AUTO, 3, wired, 2, 0, 3, 2680000, 54, 2},
         &grad_path_powersgd},
        {"wire = auto, a link above wire_auto_gbit", {0, 0, 3, wired, 2, 0, 3, 2680000, 54, 0.5},
         &grad_path_whole},
        {"wire = auto, above, buckets auto and wire-bound",
         {0, OVERLAP_AUTO, 3, wired, 2, 0, 3, 2680000, 54, 0.5}, &grad_path_buckets},
        {"wire = auto, not measured yet", {0, 0, 3, NULL, 2, 0, 3, 2680000, 54, 2}, &grad_path_whole},
        {"wire = auto, unmeasured facts", {0, 0, 3, two, 2, 1, 3, 2680000, 54, 2}, &grad_path_tree},
        {"wire = auto, unmeasured facts of roomy nodes, buckets auto",
         {0, OVERLAP_AUTO, 3, two, 2, 0, 3, 2680000, 54, 2}, &grad_path_whole},
        {"wire = auto, below 1 MiB (latency)", {0, 0, 3, wired, 2, 0, 3, 400000, 54, 2},
         &grad_path_whole},
        {"wire = auto, powersgd would save little", {0, 0, 3, wired, 2, 0, 3, 2680000, 3.9, 2},
         &grad_path_whole},
        {"wire = auto, no plan", {0, 0, 3, wired, 2, 0, 3, 2680000, 0, 2}, &grad_path_whole},
        {"wire = auto, the wire short beside the compute", {0, 0, 3, slowc, 2, 0, 3, 2680000, 54, 2},
         &grad_path_whole},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char why[384] = "";
        const grad_path *got = grad_path_choose(&cases[i].v, why, sizeof why);
        printf("%-40s -> %s (%s)\n", cases[i].name, got->name, why);
        CHECK(got == cases[i].want, "%s: chose %s, expected %s", cases[i].name, got->name,
              cases[i].want->name);
        /* wire = auto says why it keeps float32 or takes powersgd */
        static const char *const auto_why[][2] = {
            {"a slow link", "powersgd; the all-reduce of 2.68 MB took 30.0 ms"},
            {"above wire_auto_gbit", "float32; the all-reduce of 2.68 MB took 30.0 ms (node 2, "
                                     "the least), 0.71 Gbit/s of bus bandwidth above"},
            {"not measured", "float32 until the view's all-reduce is measured"},
            {"unmeasured facts", "float32 until the view's all-reduce is measured"},
            {"below 1 MiB", "too small to be rate-bound"},
            {"save little", "powersgd would send 3.9x fewer floats, less than 4x"},
            {"no plan", "powersgd would send 0.0x fewer floats"},
            {"short beside", "against 400.0 ms of compute at most (node 2), too short to matter"}};
        for (size_t k = 0; cases[i].v.wire == CFG_WIRE_AUTO && k < 8; k++) {
            if (!strstr(cases[i].name, auto_why[k][0])) continue;
            grad_wire_auto(&cases[i].v, why, sizeof why);
            CHECK(strstr(why, auto_why[k][1]), "%s: auto's reason '%s' lacks '%s'", cases[i].name,
                  why, auto_why[k][1]);
        }
    }
}

/* The cluster's side of auto: the default reaches the cluster's config with this node's
 * facts, and the description (the dry run and the start line) says that one node trains
 * alone and that two nodes use the plan the library cuts from the layers (the library's
 * choice itself is tested through hetring run, tests/dist). */
static void test_cluster_plan(const char *dir) {
    static const char *const mlp = "model = mlp\nlayers = 784,512,512,10\nsamples = 256\n"
                                   "eval_samples = 16\nglobal_batch = 32\niterations = 10";
    cfg c;
    one_node_cfg(&c, dir, mlp);
    CHECK(c.bucket_bytes == CFG_AUTO, "bucket_bytes defaults to auto, not %ld", c.bucket_bytes);
    cluster_config cc;
    app_cluster_config(&c, 0, NULL, &cc);
    CHECK(cc.bucket_bytes == OVERLAP_AUTO, "auto reaches the cluster as %ld", cc.bucket_bytes);
    CHECK(cc.machine.id == 0 && cc.machine.cores == hr_cores() && cc.machine.demand == 2,
          "one node of one thread: %ld cores for %ld threads", cc.machine.cores, cc.machine.demand);
    trainer t;
    char err[HR_ERRLEN], line[400];
    CHECK(test_train_init(&t, &c, 0, err, sizeof err) == HR_OK, "train_init: %s", err);
    hr_node_describe_overlap(&t, &c, 0, NULL, line, sizeof line);
    CHECK(strstr(line, "off (one node trains alone)") != NULL, "one node alone: %s", line);
    train_free(&t);
    cfg_free(&c);
    ring_cfg(&c, dir, mlp, "", 2, test_port(), NULL);
    CHECK(test_train_init(&t, &c, 0, err, sizeof err) == HR_OK, "train_init: %s", err);
    hr_node_describe_overlap(&t, &c, 0, NULL, line, sizeof line);
    CHECK(strstr(line, "auto, chosen after the first iteration: 2 buckets of >= 1 MiB") != NULL,
          "the 2.7 MB of gradients must make 2 buckets of 1 MiB: %s", line);
    train_free(&t);
    cfg_free(&c);
}

int main(int argc, char **argv) {
    (void)argc;
    test_blas_main(argv);
    model_spec s = mlp_spec();
    model m;
    char err[HR_ERRLEN];
    CHECK(model_init(&m, &s, 8, 7, err, sizeof err) == HR_OK, "%s", err);
    test_plan(&m);
    test_hook(&m);
    model_free(&m);
    test_worker();
    test_facts();
    test_choose();
    test_paths();
    char dir[64];
    tmpdir(dir, sizeof dir);
    test_cluster_plan(dir);
    rm_rf(dir);
    return check_exit();
}
