/*
 * test_api.c: libhetring (cluster/hetring.h) from a training loop of its own, on loopback rings
 * of forked processes.
 *
 *   test_api text     a cluster from an INI in memory; backend = nccl refused at open (a
 *                     user's gradients are host buffers)
 *   test_api misuse   one node: wrong sizes, calls out of order (hetring_allreduce's too),
 *                     after close, bad options
 *   test_api ring     three nodes, node 1 emulating a 3x slowdown: every iteration's slices
 *                     are disjoint and fill the global batch (I1, I6), no sample is used twice
 *                     in an epoch, the gradient comes back as sum / B (I2), the controller
 *                     moves samples off the slow node, and the replicas' parameter hashes
 *                     agree (I4, checked by the library)
 *   test_api rejoin   node 2 dies inside an iteration (the others' hetring_step returns
 *                     HETRING_RETRY and they go on as two), then starts again and joins: its
 *                     put_state receives the others' model, which then agrees with theirs
 *   test_api leave    node 2 calls hetring_leave (as from a signal handler): its hetring_next
 *                     returns HETRING_LEFT at the boundary the others agree on, and they
 *                     finish as two without a retry, every sample of an epoch used once
 *   test_api overlap  ring's checks with bucket_bytes = 64 (two buckets: the count buffer,
 *                     then w's with the stats): node 1 hands the count buffer over with
 *                     hetring_ready before it computes w's gradient, node 2 hands both over
 *                     in the other order, node 0 never calls it; every node's iterations
 *                     run in 2 all-reduces, those that called hetring_ready sent 1 early
 *   test_api overlap_rejoin  rejoin with those buckets: node 2 dies after its first bucket
 *                     went out, the others' hetring_step returns HETRING_RETRY
 *   test_api resume   a run of three nodes, then the same run again from node 0's checkpoint
 *                     of iteration 15 (mid-epoch): nodes 0 and 1 resume it (start_iter 15),
 *                     node 2 starts from nothing and receives their state; the resumed run
 *                     begins at iteration 15, uses the same samples at every iteration as the
 *                     first run (I8) and ends with its model
 *   test_api leave_open  node 0 of 3 alone waits in hetring_open for a quorum; a signal
 *                     handler sets the options' leave_flag and hetring_open returns
 *                     HETRING_LEFT at once instead of after rejoin_timeout
 *   test_api nonfinite, nonfinite_skip  three nodes with buckets of 64 bytes; node 1 hands
 *                     over a count buffer holding an inf with hetring_ready at iteration 4,
 *                     node 2's loss_sum is NaN at 7, and at 10 every node's w gradient holds
 *                     3e38, finite, whose sum is not. With nonfinite = error every node's
 *                     hetring_step returns HETRING_ENONFINITE at iteration 4 naming node 1,
 *                     nothing applied and the node ended; with skip each of the three returns
 *                     HETRING_SKIPPED on every node with its culprits (1; 2; none), the
 *                     cursor goes on (every iteration run once), 37 steps are applied and the
 *                     replicas' hashes agree
 *   test_api nonfinite_wire  wire = bf16, then powersgd, with nonfinite = skip: node 1's
 *                     finite share whose resumed residual makes it overflow is named as the
 *                     culprit, finite shares whose sum overflows name none, and a finite
 *                     3.3966e38 (bf16 inf once rounded to nearest) is applied
 *   test_api end_close  node 2 stops on its own count after the last step and closes: its
 *                     hetring_close agrees on the run's end with nodes 0 and 1, which end in
 *                     the view they began in
 *   test_api fork     node 0 forks mid-run: in the child every call but
 *                     hetring_close/hetring_free returns HETRING_EINVAL, and its hetring_free
 *                     leaves the parent's connections alone: every node runs to HETRING_DONE
 *                     in the first view
 *   test_api mismatch  node 1's param_hash differs: every node stops with HETRING_EMISMATCH
 *                     and logs the replica check with the likely causes, the loop's own
 *                     change of one node's state first
 *   test_api churn    node 1 joins and leaves CHURN_CYCLES times (hetring_leave, then
 *                     SIGKILL, in turn) while nodes 0 and 2 train on: node 0 holds as many
 *                     descriptors (/proc/self/fd) and threads (/proc/self/task) in its last
 *                     view without node 1 as in its first (the least over each view's steps,
 *                     so a connection still closing does not count)
 *   test_api plan     one node, 200 buffers: bucket_bytes = 4 asks for a bucket per buffer,
 *                     and the plan grows its buckets to stay within the communication
 *                     thread's job table (every buffer still comes back as sum / B);
 *                     bucket_bytes = 0 runs one all-reduce
 *
 * The "model" is w (D floats) with per-sample gradient w - x_i, x_i[j] = sin(i + j); a
 * second buffer counts each sample's use (1 at its index), so after the all-reduce and the
 * division by B, count * B is how often the cluster used each sample in the iteration.
 */
#include "check.h"
#include "hetring.h"
#include "ports.h"

#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define D       8
#define SAMPLES 240
#define BATCH   24
#define ITERS   40

typedef struct {
    float w[D];      /* the model */
    long steps;      /* steps applied */
    int puts;        /* put_state calls */
    size_t received; /* state bytes of the last view change */
    int left2;       /* views that reported node 2 gone (hetring_view.left) */
    int joined2;     /* views that reported node 2 admitted (hetring_view.joined) */
    int views;       /* on_view calls */
} model;

static int get_state(void *user, const void **data, size_t *bytes) {
    model *m = user;
    *data = m, *bytes = sizeof m->w + sizeof m->steps;
    return 0;
}

static int put_state(void *user, const void *data, size_t bytes) {
    model *m = user;
    if (bytes != sizeof m->w + sizeof m->steps) return -1;
    memcpy(m, data, bytes);
    m->puts++;
    return 0;
}

static void on_view(void *user, const hetring_view *v) {
    model *m = user;
    m->views++;
    m->received = v->state_bytes;
    for (int k = 0; k < v->n_left; k++) m->left2 += v->left[k] == 2;
    for (int k = 0; k < v->n_joined; k++) m->joined2 += v->joined[k] == 2;
    printf("view %llu: %d nodes from iteration %ld, rank %d, state %zu bytes, %d left, %d "
           "joined, %.3f s\n",
           (unsigned long long)v->epoch, v->n, v->iter, v->rank, v->state_bytes, v->n_left,
           v->n_joined, v->change_s);
}

static const char *train_extra = ""; /* more [train] keys */

static const char *write_ini(const char *dir, int nodes, int port, const char *extra) {
    static char path[512];
    snprintf(path, sizeof path, "%s/api.ini", dir);
    FILE *f = fopen(path, "w");
    if (!f) return NULL;
    fprintf(f,
            "[cluster]\nsecurity = none\nconnect_timeout = 10\ntimeout = 5\nrejoin_timeout = 20\n"
            "[train]\nsamples = %d\nglobal_batch = %d\niterations = %d\nseed = 3\n"
            "hash_interval = 5\n%s\n"
            "[controller]\npolicy = proportional\ninterval = 1\nmin_batch = 2\n",
            SAMPLES, BATCH, ITERS, train_extra);
    for (int k = 0; k < nodes; k++)
        fprintf(f, "[node.%d]\nhost = 127.0.0.1\nport = %d\n%s\n", k, port + k,
                k == 1 ? extra : "");
    fclose(f);
    return path;
}

/* ================================================================ misuse */

static int misuse(const char *dir, int port) {
    const char *ini = write_ini(dir, 1, port, "");
    char err[512];
    hetring *h = NULL;
    hetring_options o;
    hetring_options_init(&o);
    CHECK(hetring_open(&h, &o, err, sizeof err) == HETRING_EINVAL && !h, "no conf: EINVAL");
    o.conf = "/nonexistent/api.ini";
    o.node_id = 0;
    int st = hetring_open(&h, &o, err, sizeof err);
    CHECK(st == HETRING_ECONFIG || st == HETRING_EIO, "a missing file: %d (%s)", st, err);
    CHECK(strstr(err, "/nonexistent/api.ini") != NULL, "the error names the file: %s", err);
    o.conf = ini;
    o.node_id = 7;
    st = hetring_open(&h, &o, err, sizeof err);
    CHECK(st == HETRING_ECONFIG && !h, "node 7 of a 1-node file: %d (%s)", st, err);
    const char *bad[] = {"train.global_batch=0", NULL};
    o.node_id = 0, o.set = bad;
    st = hetring_open(&h, &o, err, sizeof err);
    CHECK(st == HETRING_ECONFIG, "global_batch = 0: %d (%s)", st, err);
    o.set = NULL;
    model m = {{0}, 0, 0, 0, 0, 0, 0};
    o.cb = (hetring_callbacks){.user = &m, .get_state = get_state};
    CHECK(hetring_open(&h, &o, err, sizeof err) == HETRING_EINVAL, "get_state without put_state");
    o.cb.put_state = put_state;
    o.start_iter = ITERS + 1;
    st = hetring_open(&h, &o, err, sizeof err);
    CHECK(st == HETRING_EINVAL && !h && strstr(err, "start_iter 41"),
          "start_iter past the run: %d (%s)", st, err);
    o.start_iter = -1;
    CHECK(hetring_open(&h, &o, err, sizeof err) == HETRING_EINVAL && !h, "start_iter -1: EINVAL");
    o.start_iter = 0;
    st = hetring_open(&h, &o, err, sizeof err);
    CHECK(st == HETRING_OK && h, "open: %d (%s)", st, err);
    if (!h) return check_exit();
    printf("%s: %s, B %ld, %ld iterations\n", hetring_version(), ini, hetring_global_batch(h),
           hetring_iterations(h));

    float g[D], count[SAMPLES];
    float *bufs[2] = {g, count};
    size_t counts[2] = {D, SAMPLES};
    hetring_grads gr = {.bufs = bufs, .counts = counts, .n_bufs = 2, .compute_s = 0.001};
    CHECK(hetring_step(h, &gr, NULL) == HETRING_EINVAL, "step before next: EINVAL");
    printf("step before next: %s\n", hetring_last_error(h));
    hetring_batch b;
    CHECK(hetring_next(h, NULL) == HETRING_EINVAL, "next(NULL): EINVAL");
    CHECK(hetring_next(h, &b) == HETRING_OK && b.batch == BATCH && b.size == 1, "next");
    memset(g, 0, sizeof g), memset(count, 0, sizeof count);
    gr.n_bufs = 0;
    CHECK(hetring_step(h, &gr, NULL) == HETRING_EINVAL, "no buffers: EINVAL");
    gr.n_bufs = 2, gr.compute_s = NAN;
    CHECK(hetring_step(h, &gr, NULL) == HETRING_EINVAL, "NaN compute time: EINVAL");
    /* 0 s (a coarse clock, or none) is refused here, by this node, and the node goes on: the
     * controller refused it on every node, which stopped as "the nodes disagree" */
    gr.compute_s = 0;
    CHECK(hetring_step(h, &gr, NULL) == HETRING_EINVAL &&
              strstr(hetring_last_error(h), "compute_s must be the seconds this node's compute "
                                            "took, above 0"),
          "0 s compute time: %s", hetring_last_error(h));
    gr.compute_s = 0.001;
    hetring_result r;
    CHECK(hetring_members(h, NULL, 0) == 0, "no members before the first step");
    /* wire = fp32: no residual to give or take */
    CHECK(hetring_resume_residual(h, g, D) == HETRING_EINVAL &&
              strstr(hetring_last_error(h), "wire = fp32") && hetring_residual(h, NULL, 0) == 0,
          "a residual with wire = fp32: %s", hetring_last_error(h));
    CHECK(hetring_resume_powersgd_q(h, g, D) == HETRING_EINVAL &&
              strstr(hetring_last_error(h), "wire = fp32 has no low-rank Q") &&
              hetring_powersgd_q(h, NULL, 0) == 0,
          "a Q with wire = fp32: %s", hetring_last_error(h));
    CHECK(hetring_step(h, &gr, &r) == HETRING_OK && r.iter == 0, "first step");
    hetring_member mb[2] = {{-1, -1, -1}, {-1, -1, -1}};
    CHECK(hetring_members(h, mb, 2) == 1 && mb[0].id == 0 && mb[0].batch == BATCH &&
              fabs(mb[0].compute_s - 0.001) < 1e-9 && mb[1].id == -1,
          "members after the first step: id %ld, batch %ld, %g s", mb[0].id, mb[0].batch,
          mb[0].compute_s);
    CHECK(hetring_step(h, &gr, &r) == HETRING_EINVAL, "two steps for one next: EINVAL");
    CHECK(hetring_next(h, &b) == HETRING_OK && b.iter == 1, "next after a step");
    counts[1] = SAMPLES - 1;
    st = hetring_step(h, &gr, &r);
    CHECK(st == HETRING_EINVAL, "a buffer of another size: %d", st);
    printf("wrong size: %s\n", hetring_last_error(h));
    CHECK(strstr(hetring_last_error(h), "buffer 1 holds 239 floats") != NULL, "names the buffer");
    counts[1] = SAMPLES;
    gr.n_bufs = 1;
    CHECK(hetring_step(h, &gr, &r) == HETRING_EINVAL, "fewer buffers: EINVAL");
    gr.n_bufs = 2;
    CHECK(hetring_step(h, &gr, &r) == HETRING_OK && r.iter == 1, "a misuse leaves it usable");

    /* hetring_ready */
    CHECK(hetring_ready(h, &gr, 1) == HETRING_EINVAL, "ready before next: EINVAL");
    float v[3] = {1, 2, 3};
    CHECK(hetring_allreduce(h, v, 3) == HETRING_EINVAL, "allreduce before next: EINVAL");
    CHECK(hetring_next(h, &b) == HETRING_OK && b.iter == 2, "next for ready");
    CHECK(hetring_allreduce(h, v, 3) == HETRING_OK && v[0] == 1 && v[1] == 2 && v[2] == 3,
          "allreduce on one node: %s", hetring_last_error(h));
    CHECK(hetring_allreduce(h, NULL, 3) == HETRING_EINVAL, "allreduce of NULL: EINVAL");
    CHECK(hetring_ready(h, &gr, 2) == HETRING_EINVAL && hetring_ready(h, &gr, -1) == HETRING_EINVAL,
          "ready of a buffer that is not there: EINVAL");
    printf("ready(2): %s\n", hetring_last_error(h));
    memset(g, 0, sizeof g), memset(count, 0, sizeof count);
    count[0] = 2;
    CHECK(hetring_ready(h, &gr, 1) == HETRING_OK, "ready(1): %s", hetring_last_error(h));
    CHECK(hetring_allreduce(h, v, 3) == HETRING_EINVAL &&
              strstr(hetring_last_error(h), "handed over") != NULL,
          "allreduce after ready: %s", hetring_last_error(h));
    count[0] = 99; /* after the hand-over: must not be read */
    st = hetring_ready(h, &gr, 1);
    CHECK(st == HETRING_EINVAL && strstr(hetring_last_error(h), "handed over already"),
          "ready twice: %d (%s)", st, hetring_last_error(h));
    CHECK(hetring_next(h, &b) == HETRING_EINVAL, "next with a buffer handed over: EINVAL");
    printf("next after ready: %s\n", hetring_last_error(h));
    float other[SAMPLES];
    bufs[1] = other;
    CHECK(hetring_step(h, &gr, &r) == HETRING_EINVAL, "step with another buffer 1: EINVAL");
    bufs[1] = count;
    st = hetring_step(h, &gr, &r);
    CHECK(st == HETRING_OK && r.iter == 2 && r.buckets == 1 && r.early == 0,
          "step after ready: %d, iteration %ld, %d all-reduces, %d early", st, r.iter, r.buckets,
          r.early);
    CHECK(count[0] == 2.0f / BATCH, "the copy taken at hetring_ready comes back: %g, not %g",
          count[0], 2.0 / BATCH);
    CHECK(hetring_close(h) == HETRING_OK && hetring_close(h) == HETRING_OK, "close twice");
    CHECK(hetring_next(h, &b) == HETRING_ECLOSED, "next after close: ECLOSED");
    CHECK(hetring_step(h, &gr, &r) == HETRING_ECLOSED, "step after close: ECLOSED");
    printf("after close: %s\n", hetring_last_error(h));
    hetring_free(h);
    hetring_free(NULL);
    CHECK(hetring_next(NULL, &b) == HETRING_EINVAL, "NULL handle: EINVAL");
    CHECK(strcmp(hetring_strerror(HETRING_RETRY), "unknown status") != 0, "strerror");
    return check_exit();
}

/* ================================================================ the bucket plan */

#define PLAN_BUFS 200

static int plan_run(const char *dir, int port, const char *bytes, int lo, int hi) {
    const char *ini = write_ini(dir, 1, port, "");
    char set[64], err[512];
    snprintf(set, sizeof set, "train.bucket_bytes=%s", bytes);
    const char *sets[] = {set, "train.iterations=3", NULL};
    hetring_options o;
    hetring_options_init(&o);
    o.conf = ini, o.node_id = 0, o.set = sets;
    hetring *h = NULL;
    int st = hetring_open(&h, &o, err, sizeof err);
    CHECK(st == HETRING_OK, "open: %s", err);
    if (st != HETRING_OK) return check_exit();
    static float data[PLAN_BUFS][10];
    float *bufs[PLAN_BUFS];
    size_t counts[PLAN_BUFS];
    for (int i = 0; i < PLAN_BUFS; i++) bufs[i] = data[i], counts[i] = 10;
    hetring_grads gr = {.bufs = bufs, .counts = counts, .n_bufs = PLAN_BUFS, .compute_s = 1e-4};
    hetring_batch b;
    hetring_result r = {0};
    while ((st = hetring_next(h, &b)) == HETRING_OK) {
        for (int i = PLAN_BUFS - 1; i >= 0; i--) { /* as backward would: the last one first */
            for (int j = 0; j < 10; j++) data[i][j] = (float)(BATCH * (i + j));
            CHECK(hetring_ready(h, &gr, i) == HETRING_OK, "ready(%d): %s", i,
                  hetring_last_error(h));
        }
        st = hetring_step(h, &gr, &r);
        CHECK(st == HETRING_OK, "step %ld: %s", b.iter, hetring_last_error(h));
        if (st != HETRING_OK) break;
        long bad = 0;
        for (int i = 0; i < PLAN_BUFS; i++)
            for (int j = 0; j < 10; j++) bad += data[i][j] != (float)(i + j);
        CHECK(bad == 0, "iteration %ld: %ld floats are not sum / B", b.iter, bad);
        CHECK(r.buckets >= lo && r.buckets <= hi && r.early == (r.buckets > 1 ? r.buckets - 1 : 0),
              "bucket_bytes = %s: %d all-reduces, %d early; expected %d..%d, all but the last "
              "early",
              bytes, r.buckets, r.early, lo, hi);
    }
    CHECK(st == HETRING_DONE, "ended with %d: %s", st, hetring_last_error(h));
    printf("bucket_bytes = %s, %d buffers of 40 bytes: %d all-reduces, %d sent by hetring_ready\n",
           bytes, PLAN_BUFS, r.buckets, r.early);
    hetring_free(h);
    return check_exit();
}

static int plan(const char *dir, int port) {
    /* 41 jobs at most (OVERLAP_MAX_JOBS): 8000 bytes in buckets of >= 200 bytes */
    plan_run(dir, port, "4", 30, 41);
    return plan_run(dir, port, "0", 1, 1);
}

/* ================================================================ the INI in memory */

/* hetring_options.conf_text: a 1-node cluster from text runs as from a file; exactly one of
 * conf and conf_text; an error in the text names "conf_text" and its line, a key only the
 * built-in trainer reads included. */
static int text(const char *dir, int port) {
    char ini[1024], err[512];
    snprintf(ini, sizeof ini,
             "[cluster]\nsecurity = none\n[train]\nsamples = %d\nglobal_batch = %d\n"
             "iterations = 3\nseed = 3\n[node.0]\nhost = 127.0.0.1\nport = %d\n",
             SAMPLES, BATCH, port);
    hetring *h = NULL;
    hetring_options o;
    hetring_options_init(&o);
    o.node_id = 0;
    o.conf = write_ini(dir, 1, port, "");
    o.conf_text = ini;
    CHECK(hetring_open(&h, &o, err, sizeof err) == HETRING_EINVAL && !h, "both: EINVAL");
    CHECK(strstr(err, "exactly one of conf") != NULL, "says which: %s", err);
    o.conf = NULL;
    o.conf_text = "[cluster]\nsecurity = none\n[train]\nsampels = 5\n";
    int st = hetring_open(&h, &o, err, sizeof err);
    CHECK(st == HETRING_ECONFIG && !h, "a misspelt key: %d (%s)", st, err);
    CHECK(strstr(err, "conf_text:4") != NULL && strstr(err, "sampels") != NULL,
          "names the text's line and the key: %s", err);
    printf("misspelt key: %s\n", err);
    /* a [train] key only the built-in trainer reads would be ignored: refused, at its line */
    char lr[1024];
    snprintf(lr, sizeof lr,
             "[cluster]\nsecurity = none\n[train]\nsamples = %d\nlr = 0.1\nglobal_batch = %d\n"
             "[node.0]\nhost = 127.0.0.1\nport = %d\n",
             SAMPLES, BATCH, port);
    o.conf_text = lr;
    st = hetring_open(&h, &o, err, sizeof err);
    CHECK(st == HETRING_ECONFIG && !h, "[train] lr: %d (%s)", st, err);
    CHECK(strstr(err, "conf_text:5: [train] lr is set, but libhetring does not use it") &&
              strstr(err, "hetring run"),
          "names the line and the key, and says why: %s", err);
    printf("trainer-only key: %s\n", err);
    /* so is a node's device: the user's code places its model */
    snprintf(lr, sizeof lr,
             "[cluster]\nsecurity = none\n[train]\nsamples = %d\nglobal_batch = %d\n"
             "[node.0]\nhost = 127.0.0.1\nport = %d\ndevice = cuda:0\n",
             SAMPLES, BATCH, port);
    st = hetring_open(&h, &o, err, sizeof err);
    CHECK(st == HETRING_ECONFIG && !h, "[node.0] device: %d (%s)", st, err);
    CHECK(strstr(err, "conf_text:9: [node.0] device = cuda:0, but libhetring does not place") &&
              strstr(err, "hetring run"),
          "names the line and the key, and says why: %s", err);
    printf("device: %s\n", err);
    /* backend = nccl from a user's loop: host buffers cannot go over NCCL, and the library
     * says so at open instead of training over TCP (a build without NCCL says that first) */
    char nccl[1024];
    snprintf(nccl, sizeof nccl,
             "[cluster]\nsecurity = none\nbackend = nccl\n[train]\nsamples = %d\n"
             "global_batch = %d\niterations = 3\n[node.0]\nhost = 127.0.0.1\nport = %d\n"
             "device = cuda:0\n",
             SAMPLES, BATCH, port);
    o.conf_text = nccl;
    st = hetring_open(&h, &o, err, sizeof err);
    CHECK(st == HETRING_ECONFIG && !h, "backend = nccl with host buffers: %d (%s)", st, err);
    CHECK(strstr(err, "[cluster] backend = nccl") &&
              (strstr(err, "host buffers") || strstr(err, "no NCCL")),
          "says why: %s", err);
    printf("backend = nccl: %s\n", err);
    /* one endpoint written two ways (127.1 is 127.0.0.1): the library, which looks the hosts
     * up itself for a user, refuses it, naming both nodes and the address (short timeouts:
     * a node that went on would wait for a quorum it cannot have) */
    char dup[1024], want[160];
    snprintf(dup, sizeof dup,
             "[cluster]\nsecurity = none\nconnect_timeout = 2\nrejoin_timeout = "
             "1\n[train]\nsamples = %d\nglobal_batch = %d\n"
             "[node.0]\nhost = 127.0.0.1\nport = %d\n[node.1]\nhost = 127.1\nport = %d\n",
             SAMPLES, BATCH, port, port);
    o.conf_text = dup;
    st = hetring_open(&h, &o, err, sizeof err);
    CHECK(st == HETRING_ECONFIG && !h, "one endpoint twice: %d (%s)", st, err);
    snprintf(want, sizeof want,
             "conf_text:12: [node.1] 127.1:%d and conf_text:9: [node.0] 127.0.0.1:%d are the "
             "same endpoint (127.0.0.1:%d)",
             port, port, port);
    CHECK(strstr(err, want) != NULL, "names both nodes and the address: %s", err);
    printf("one endpoint twice: %s\n", err);
    o.conf_text = ini;
    st = hetring_open(&h, &o, err, sizeof err);
    CHECK(st == HETRING_OK && h, "open from text: %d (%s)", st, err);
    if (!h) return check_exit();
    CHECK(hetring_global_batch(h) == BATCH && hetring_samples(h) == SAMPLES &&
              hetring_iterations(h) == 3,
          "the text's values: B %ld, samples %ld, %ld iterations", hetring_global_batch(h),
          hetring_samples(h), hetring_iterations(h));
    float g[D];
    float *bufs[1] = {g};
    size_t counts[1] = {D};
    hetring_grads gr = {.bufs = bufs, .counts = counts, .n_bufs = 1, .compute_s = 0.001};
    hetring_batch b;
    int steps = 0;
    while ((st = hetring_next(h, &b)) == HETRING_OK) {
        for (int j = 0; j < D; j++) g[j] = (float)BATCH;
        CHECK(hetring_step(h, &gr, NULL) == HETRING_OK, "step %ld", b.iter);
        CHECK(g[0] == 1.0f, "the mean over B: %g", g[0]);
        steps++;
    }
    CHECK(st == HETRING_DONE && steps == 3, "3 iterations then DONE: %d after %d", st, steps);
    hetring_free(h);
    return check_exit();
}

/* ================================================================ one node of a ring */

typedef struct {
    const char *ini;
    long id;
    long die_at;   /* _exit inside this iteration (after next, before step); -1: never */
    int joiner;    /* started late: must receive the state */
    int pace;      /* rejoin: iterations take 50 ms while a node is missing, so it can rejoin */
    long leave_at; /* hetring_leave at this iteration; -1: never */
} node_args;

/* test_api resume: the first run's node 0 writes its model after RESUME_AT iterations and
 * every iteration's sample set; the second run's nodes 0 and 1 resume that model */
#define RESUME_AT 15
static const char *resume_dir;
static int resume_phase; /* 1: the first run, 2: the resumed one */
typedef struct {
    model m;              /* node 0's model after RESUME_AT iterations */
    uint64_t used[ITERS]; /* a hash of each iteration's samples */
    float w_end[D];       /* the model at the end */
} resume_record;

static int resume_file(resume_record *r, int save) {
    char path[600];
    snprintf(path, sizeof path, "%s/resume.bin", resume_dir);
    FILE *f = fopen(path, save ? "wb" : "rb");
    if (!f) return 0;
    size_t n = save ? fwrite(r, sizeof *r, 1, f) : fread(r, sizeof *r, 1, f);
    return (fclose(f) == 0) & (n == 1);
}

static int overlap_run; /* test_api overlap*: bucket_bytes = 64, nodes 1 and 2 call ready */

static int leave_run; /* test_api leave: no node is slow */

static float x_of(long i, int j) {
    return sinf((float)(i + j));
}

static int run_node(const node_args *a) {
    model m = {{0}, 0, 0, 0, 0, 0, 0};
    hetring_options o;
    hetring_options_init(&o);
    o.conf = a->ini, o.node_id = a->id;
    static resume_record rec; /* node 0's, and in the resumed run what the first one wrote */
    if (resume_phase == 2) {
        CHECK(resume_file(&rec, 0), "read %s/resume.bin", resume_dir);
        if (a->id < 2) m = rec.m, o.start_iter = RESUME_AT; /* node 2 resumes nothing */
    }
    o.cb = (hetring_callbacks){
        .user = &m, .get_state = get_state, .put_state = put_state, .on_view = on_view};
    if (a->joiner)
        for (int j = 0; j < D; j++) m.w[j] = 100; /* differs: the transfer must replace it */
    hetring *h;
    char err[512];
    int st = hetring_open(&h, &o, err, sizeof err);
    CHECK(st == HETRING_OK, "node %ld: open: %s", a->id, err);
    if (st != HETRING_OK) return 1;
    if (resume_phase == 2)
        CHECK(memcmp(m.w, rec.m.w, sizeof m.w) == 0 && m.steps == RESUME_AT,
              "node %ld after open: the model of the checkpoint (%ld steps, w[0] %g vs %g)", a->id,
              m.steps, m.w[0], rec.m.w[0]);
    if (a->joiner) {
        CHECK(m.puts == 1 && m.received > 0 && m.w[0] != 100,
              "joiner: %d put_state calls, %zu bytes, w[0] %g", m.puts, m.received, m.w[0]);
    }
    static unsigned char used[ITERS * BATCH / SAMPLES + 2][SAMPLES];
    float g[D], count[SAMPLES];
    float *bufs[2] = {g, count};
    size_t counts[2] = {D, SAMPLES};
    int retries = 0, last_b = 0;
    long first = -1, done = 0;
    hetring_batch b;
    while ((st = hetring_next(h, &b)) == HETRING_OK) {
        if (first < 0) first = b.iter;
        if (b.iter == a->die_at && !overlap_run) _exit(3); /* a crash mid-iteration */
        if (a->pace && (retries > 0 || b.size < 3)) usleep(50 * 1000);
        if (b.iter == a->leave_at) hetring_leave(h);
        hetring_grads gr = {.bufs = bufs, .counts = counts, .n_bufs = 2};
        const int early = overlap_run && a->id > 0; /* nodes 1 and 2 call hetring_ready */
        memset(count, 0, sizeof count);
        for (long s = 0; s < b.batch; s++) count[b.indices[s]] += 1;
        if (early && a->id == 1) CHECK(hetring_ready(h, &gr, 1) == HETRING_OK, "ready(1)");
        if (b.iter == a->die_at) {
            CHECK(hetring_ready(h, &gr, 1) == HETRING_OK, "ready(1) before dying");
            usleep(20 * 1000); /* the count bucket is on its way: die during its all-reduce */
            _exit(3);
        }
        for (int j = 0; j < D; j++) g[j] = 0;
        for (long s = 0; s < b.batch; s++) {
            long i = b.indices[s];
            CHECK(i >= 0 && i < SAMPLES, "index %ld", i);
            for (int j = 0; j < D; j++) g[j] += m.w[j] - x_of(i, j);
        }
        if (early && a->id == 2) /* the other order: buckets still go out count first */
            CHECK(hetring_ready(h, &gr, 0) == HETRING_OK && hetring_ready(h, &gr, 1) == HETRING_OK,
                  "ready(0), ready(1): %s", hetring_last_error(h));
        gr.compute_s = 2e-4 * (double)b.batch;
        gr.loss_sum = (double)b.batch;
        gr.param_hash = b.check_hash ? hetring_hash(m.w, sizeof m.w, 0) : 0;
        hetring_result r;
        st = hetring_step(h, &gr, &r);
        if (st == HETRING_RETRY) {
            retries++;
            continue;
        }
        CHECK(st == HETRING_OK, "node %ld: step %ld: %s", a->id, b.iter, hetring_last_error(h));
        if (st != HETRING_OK) break;
        if (overlap_run)
            CHECK(r.buckets == 2 && r.early == early,
                  "node %ld, iteration %ld: %d all-reduces, "
                  "%d early; expected 2 and %d",
                  a->id, b.iter, r.buckets, r.early, early);
        long total = 0, bad = 0, twice = 0;
        for (long i = 0; i < SAMPLES; i++) {
            double c = (double)count[i] * BATCH;
            long k = lround(c);
            bad += fabs(c - (double)k) > 1e-3 || k < 0 || k > 1;
            total += k;
            if (k && used[b.epoch][i]++) twice++;
        }
        CHECK(bad == 0 && total == BATCH, "iteration %ld: %ld bad counts, %ld samples of %d",
              b.iter, bad, total, BATCH);
        CHECK(twice == 0, "iteration %ld: %ld samples used twice in epoch %ld", b.iter, twice,
              b.epoch);
        CHECK(fabs(r.loss - 1.0) < 1e-6, "mean loss %g, expected 1", r.loss);
        hetring_member mb[3];
        const int nm = hetring_members(h, mb, 3);
        long sum = 0;
        for (int k = 0; k < nm && k < 3; k++) sum += mb[k].batch;
        CHECK(nm == b.size && nm <= 3 && sum == BATCH && mb[b.rank].id == a->id &&
                  mb[b.rank].batch == b.batch && fabs(mb[b.rank].compute_s - r.t_node) < 1e-6,
              "iteration %ld: %d members of %d, batches summing to %ld, this node's %ld of %ld "
              "in %g s (%g)",
              b.iter, nm, b.size, sum, mb[b.rank].batch, b.batch, mb[b.rank].compute_s, r.t_node);
        if (resume_phase) {
            uint64_t hs = hetring_hash(count, sizeof count, 0);
            if (resume_phase == 1 && a->id == 0) rec.used[b.iter] = hs;
            if (resume_phase == 2)
                CHECK(rec.used[b.iter] == hs,
                      "node %ld, iteration %ld: other samples than the "
                      "first run's",
                      a->id, b.iter);
        }
        for (int j = 0; j < D; j++) m.w[j] -= 0.5f * g[j];
        m.steps++, done++;
        if (resume_phase == 1 && a->id == 0 && b.iter + 1 == RESUME_AT) rec.m = m;
        last_b = (int)r.next_batch;
    }
    if (a->leave_at >= 0) {
        CHECK(st == HETRING_LEFT && first + done <= a->leave_at + 2,
              "the leaver ended with %d after iteration %ld: %s", st, first + done - 1,
              hetring_last_error(h));
        CHECK(hetring_next(h, &b) == HETRING_LEFT, "next after leaving: HETRING_LEFT");
        printf("node %ld left after iteration %ld\n", a->id, first + done - 1);
        hetring_free(h);
        return check_exit();
    }
    CHECK(st == HETRING_DONE, "node %ld ended with %d: %s", a->id, st, hetring_last_error(h));
    if (resume_phase == 1 && a->id == 0) {
        memcpy(rec.w_end, m.w, sizeof m.w);
        CHECK(resume_file(&rec, 1), "write %s/resume.bin", resume_dir);
    }
    if (resume_phase == 2) {
        float diff = 0;
        for (int j = 0; j < D; j++) diff = fmaxf(diff, fabsf(m.w[j] - rec.w_end[j]));
        CHECK(first == RESUME_AT && m.steps == ITERS && diff < 1e-5f,
              "node %ld resumed at iteration %ld, %ld steps, model %g from the first run's", a->id,
              first, m.steps, diff);
        CHECK(a->id == 0 ? m.puts == 0 : m.puts == 1,
              "node %ld: %d put_state calls (node 0, the lowest node furthest along, gives its "
              "state; the others receive it)",
              a->id, m.puts);
        printf("node %ld resumed at iteration %ld; model within %g of the first run's\n", a->id,
               first, diff);
    }
    printf("node %ld: iterations %ld..%ld, %d retries, last batch %d, w[0] %.6f\n", a->id, first,
           first + done - 1, retries, last_b, m.w[0]);
    if (a->id == 1 && !a->pace && !leave_run)
        CHECK(last_b < BATCH / 3, "the slow node 1 still computes %d of %d", last_b, BATCH);
    if (!a->joiner && a->die_at < 0 && a->id == 0)
        CHECK(m.steps == ITERS, "node 0 applied %ld steps", m.steps);
    if (a->joiner)
        CHECK(done > 0 && m.steps == ITERS, "the joiner ran %ld iterations, %ld steps", done,
              m.steps);
    if (a->pace && !a->joiner) CHECK(retries > 0, "node %ld never saw HETRING_RETRY", a->id);
    if (a->pace && !a->joiner)
        CHECK(m.left2 == 1 && m.joined2 == 1,
              "node %ld: views reported node 2 gone %d times and admitted %d times, not once "
              "each",
              a->id, m.left2, m.joined2);
    if (leave_run)
        CHECK(retries == 0, "node %ld retried %d iterations: a leave is planned", a->id, retries);
    if (leave_run && !resume_phase)
        CHECK(m.left2 == 1 && m.joined2 == 0,
              "node %ld: views reported node 2 gone %d times and admitted %d times", a->id, m.left2,
              m.joined2);
    hetring_free(h);
    return check_exit();
}

/* ================================================================ steps not finite */

#define NF_GRAD 4  /* node 1's count buffer holds an inf (handed over by hetring_ready) */
#define NF_LOSS 7  /* node 2's loss_sum is NaN */
#define NF_SUM  10 /* every node's w gradient holds 3e38: finite shares, a sum that is not */

static int nonfinite_skip; /* test_api nonfinite_skip: [train] nonfinite = skip */

/* What a step not finite must say on every node: its status, the culprits, the message. */
static void nonfinite_expect(hetring *h, long id, long iter, int st) {
    const int want = nonfinite_skip ? HETRING_SKIPPED : HETRING_ENONFINITE;
    const long culprit = iter == NF_GRAD ? 1 : iter == NF_LOSS ? 2 : -1;
    long ids[3] = {-1, -1, -1};
    const int n = hetring_nonfinite(h, ids, 3);
    const char *e = hetring_last_error(h);
    char who[64], at[32];
    snprintf(who, sizeof who, "node %ld (%s)", culprit, iter == NF_GRAD ? "gradient" : "loss");
    snprintf(at, sizeof at, "iteration %ld: ", iter);
    printf("node %ld, iteration %ld: status %d, %d culprit(s): %s\n", id, iter, st, n, e);
    CHECK(st == want, "node %ld, iteration %ld: status %d, expected %d (%s)", id, iter, st, want,
          e);
    CHECK(culprit < 0 ? n == 0 : n == 1 && ids[0] == culprit,
          "node %ld, iteration %ld: %d culprits, the first %ld; expected %ld", id, iter, n, ids[0],
          culprit);
    CHECK(strstr(e, at) && strstr(e, culprit < 0 ? "their sum overflowed" : who),
          "node %ld: the message names neither iteration %ld nor the culprit: %s", id, iter, e);
}

/* Node id of ini with the overrides `sets` and m's state callbacks; NULL after a failed CHECK. */
static hetring *open_node(const char *ini, long id, const char **sets, model *m) {
    hetring_options o;
    hetring_options_init(&o);
    o.conf = ini, o.node_id = id, o.set = sets;
    o.cb = (hetring_callbacks){
        .user = m, .get_state = get_state, .put_state = put_state, .on_view = on_view};
    hetring *h;
    char err[512];
    int st = hetring_open(&h, &o, err, sizeof err);
    CHECK(st == HETRING_OK, "node %ld: open: %s", id, err);
    return st == HETRING_OK ? h : NULL;
}

static int nonfinite_node(const char *ini, long id) {
    model m = {{0}, 0, 0, 0, 0, 0, 0};
    const char *sets[] = {"train.bucket_bytes=64",
                          nonfinite_skip ? "train.nonfinite=skip" : "train.nonfinite=error", NULL};
    hetring *h = open_node(ini, id, sets, &m);
    if (!h) return 1;
    int st;
    float g[D], count[SAMPLES];
    float *bufs[2] = {g, count};
    size_t counts[2] = {D, SAMPLES};
    int runs[ITERS] = {0}, odd = 0;
    hetring_batch b;
    while ((st = hetring_next(h, &b)) == HETRING_OK) {
        runs[b.iter]++;
        hetring_grads gr = {.bufs = bufs, .counts = counts, .n_bufs = 2};
        memset(count, 0, sizeof count);
        for (long s = 0; s < b.batch; s++) count[b.indices[s]] += 1;
        if (b.iter == NF_GRAD && id == 1) count[b.indices[0]] = INFINITY;
        if (id == 1) CHECK(hetring_ready(h, &gr, 1) == HETRING_OK, "ready(1)");
        for (int j = 0; j < D; j++) g[j] = 0;
        for (long s = 0; s < b.batch; s++)
            for (int j = 0; j < D; j++) g[j] += m.w[j] - x_of(b.indices[s], j);
        if (b.iter == NF_SUM) g[0] = 3e38f;
        gr.compute_s = 2e-4 * (double)b.batch;
        gr.loss_sum = b.iter == NF_LOSS && id == 2 ? NAN : (double)b.batch;
        gr.param_hash = b.check_hash ? hetring_hash(m.w, sizeof m.w, 0) : 0;
        hetring_result r = {0};
        st = hetring_step(h, &gr, &r);
        const int bad = b.iter == NF_GRAD || b.iter == NF_LOSS || b.iter == NF_SUM;
        if (bad) nonfinite_expect(h, id, b.iter, st);
        if (!bad)
            CHECK(st == HETRING_OK, "node %ld, step %ld: %s", id, b.iter, hetring_last_error(h));
        if (st == HETRING_SKIPPED) {
            odd += r.iter != b.iter; /* committed: res filled, nothing applied */
            continue;
        }
        if (st != HETRING_OK) break;
        for (int j = 0; j < D; j++) m.w[j] -= 0.5f * g[j];
        m.steps++;
    }
    long once = 0;
    for (int i = 0; i < ITERS; i++) once += runs[i] == 1;
    if (nonfinite_skip) {
        CHECK(st == HETRING_DONE && once == ITERS && odd == 0 && m.steps == ITERS - 3 &&
                  hetring_skipped(h) == 3,
              "node %ld: ended with %d, %ld iterations run once, %ld steps applied, %ld "
              "skipped, %d results of another iteration: %s",
              id, st, once, m.steps, hetring_skipped(h), odd, hetring_last_error(h));
    } else {
        CHECK(st == HETRING_ENONFINITE && m.steps == NF_GRAD && once == NF_GRAD + 1 &&
                  hetring_next(h, &b) == HETRING_ENONFINITE && hetring_skipped(h) == 0,
              "node %ld: ended with %d after %ld steps (%ld iterations run); the node must stay "
              "ended",
              id, st, m.steps, once);
    }
    printf("node %ld: %ld steps applied, %ld skipped, w[0] %.6f\n", id, m.steps, hetring_skipped(h),
           m.w[0]);
    hetring_free(h);
    return check_exit();
}

/* Three nodes of a fresh cluster file, each node(ini, id) in a process of its own; every one
 * must exit 0. */
static int three_nodes(const char *dir, int port, int (*node)(const char *, long)) {
    const char *ini = write_ini(dir, 3, port, "");
    pid_t p[3];
    for (int k = 0; k < 3; k++) {
        fflush(stdout);
        if ((p[k] = fork()) == 0) {
            int rc = node(ini, k);
            fflush(stdout);
            _exit(rc);
        }
    }
    for (int k = 0; k < 3; k++) {
        int ws;
        CHECK(waitpid(p[k], &ws, 0) == p[k] && WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
              "node %d failed", k);
    }
    return check_exit();
}

static int nonfinite(const char *dir, int port) {
    return three_nodes(dir, port, nonfinite_node);
}

/* ================================================================ the run's end */

/* test_api end_close: node 2's loop stops on its own count after the last step and closes the
 * handle, without the hetring_next that would say HETRING_DONE. Nodes 0 and 1 agree on the end
 * with the view before their hetring_next says DONE (a barrier): hetring_close runs node 2's
 * part of it, so they end in the view they began in. Had node 2 left at once, their barrier
 * would fail and they would elect a view of two first. */
static int end_close_node(const char *ini, long id) {
    model m = {{0}, 0, 0, 0, 0, 0, 0};
    hetring *h = open_node(ini, id, NULL, &m);
    if (!h) return 1;
    float g[D];
    float *bufs[1] = {g};
    size_t counts[1] = {D};
    int st = HETRING_OK;
    long steps = 0;
    hetring_batch b;
    while (id == 2 ? steps < ITERS : (st = hetring_next(h, &b)) == HETRING_OK) {
        if (id == 2 && (st = hetring_next(h, &b)) != HETRING_OK) break;
        for (int j = 0; j < D; j++) g[j] = (float)b.batch;
        hetring_grads gr = {.bufs = bufs, .counts = counts, .n_bufs = 1, .compute_s = 1e-4};
        st = hetring_step(h, &gr, NULL);
        if (st == HETRING_OK) steps++;
        else if (st != HETRING_RETRY) break;
    }
    printf("node %ld: %ld steps, %d view(s), ended with %d\n", id, steps, m.views, st);
    CHECK(steps == ITERS && st == (id == 2 ? HETRING_OK : HETRING_DONE),
          "node %ld: %ld steps, ended with %d: %s", id, steps, st, hetring_last_error(h));
    hetring_free(h); /* node 2: after its last step, without the hetring_next that says DONE */
    CHECK(m.views == 1, "node %ld: %d views: the end was not agreed in the first", id, m.views);
    return check_exit();
}

static int end_close(const char *dir, int port) {
    return three_nodes(dir, port, end_close_node);
}

/* test_api fork: node 0 forks after its step of iteration FORK_AT. In the child, hetring_next
 * and hetring_step return HETRING_EINVAL naming both processes, and hetring_close/hetring_free
 * release the child's copy without touching the parent's connections or joining the
 * communication thread (node 0 sends buckets with hetring_ready), which the child does not
 * have: every node
 * runs its iterations on in the view it began in, and ends it with HETRING_DONE. */
#define FORK_AT (ITERS / 2)

static int fork_node(const char *ini, long id) {
    model m = {{0}, 0, 0, 0, 0, 0, 0};
    const char *sets[] = {"train.bucket_bytes=64", NULL}; /* node 0: buckets on a thread */
    hetring *h = open_node(ini, id, sets, &m);
    if (!h) return 1;
    float g[D], count[SAMPLES] = {0};
    float *bufs[2] = {g, count};
    size_t counts[2] = {D, SAMPLES};
    hetring_grads gr = {.bufs = bufs, .counts = counts, .n_bufs = 2, .compute_s = 1e-4};
    int st;
    long steps = 0;
    hetring_batch b;
    while ((st = hetring_next(h, &b)) == HETRING_OK) {
        for (int j = 0; j < D; j++) g[j] = (float)b.batch;
        if (id == 0 && (st = hetring_ready(h, &gr, 1)) != HETRING_OK) break;
        if ((st = hetring_step(h, &gr, NULL)) != HETRING_OK) break;
        steps++;
        if (id != 0 || b.iter != FORK_AT) continue;
        fflush(stdout);
        const pid_t parent = getpid(), child = fork();
        if (child == 0) {
            char want[128];
            snprintf(want, sizeof want, "this node belongs to process %ld; process %ld, forked",
                     (long)parent, (long)getpid());
            int cst = hetring_next(h, &b);
            CHECK(cst == HETRING_EINVAL && strstr(hetring_last_error(h), want),
                  "child: hetring_next returned %d: %s", cst, hetring_last_error(h));
            cst = hetring_step(h, &gr, NULL);
            CHECK(cst == HETRING_EINVAL && strstr(hetring_last_error(h), want),
                  "child: hetring_step returned %d: %s", cst, hetring_last_error(h));
            CHECK(hetring_close(h) == HETRING_OK, "child: hetring_close");
            hetring_free(h);
            fflush(stdout);
            _exit(check_exit());
        }
        int ws = 0, done = 0; /* a child that joins threads it does not have waits forever */
        for (int k = 0; k < 600 && child > 0 && !(done = waitpid(child, &ws, WNOHANG) == child);
             k++)
            usleep(100 * 1000);
        if (child > 0 && !done) kill(child, SIGKILL), waitpid(child, &ws, 0);
        CHECK(done && WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "node 0's forked child failed (%s)",
              done ? "its checks" : "still running after 60 s");
    }
    printf("node %ld: %ld steps, %d view(s), ended with %d\n", id, steps, m.views, st);
    CHECK(steps == ITERS && st == HETRING_DONE, "node %ld: %ld steps, ended with %d: %s", id, steps,
          st, hetring_last_error(h));
    CHECK(m.views == 1, "node %ld: %d views: the child's free disturbed the ring", id, m.views);
    hetring_free(h);
    return check_exit();
}

static int fork_run(const char *dir, int port) {
    return three_nodes(dir, port, fork_node);
}

/* test_api mismatch: node 1 passes another param_hash than nodes 0 and 2 at the first hash
 * iteration. Every node stops with HETRING_EMISMATCH, and its log (stderr, read back) names the
 * replica check and, first among the likely causes, a loop that changed one node's state. */
static int mismatch_node(const char *ini, long id) {
    model m = {{0}, 0, 0, 0, 0, 0, 0};
    char path[600];
    snprintf(path, sizeof path, "%s.err%ld", ini, id);
    fflush(stderr);
    const int saved = dup(2), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (saved < 0 || fd < 0 || dup2(fd, 2) < 0) return 1;
    close(fd);
    hetring *h = open_node(ini, id, NULL, &m);
    float g[D];
    float *bufs[1] = {g};
    size_t counts[1] = {D};
    int st = HETRING_EINVAL;
    long hashed = -1;
    hetring_batch b;
    while (h && (st = hetring_next(h, &b)) == HETRING_OK) {
        for (int j = 0; j < D; j++) g[j] = (float)b.batch;
        hetring_grads gr = {.bufs = bufs, .counts = counts, .n_bufs = 1, .compute_s = 1e-4};
        if (b.check_hash && hashed < 0) hashed = b.iter;
        gr.param_hash = b.check_hash ? 7 + (uint64_t)(id == 1) : 0;
        if ((st = hetring_step(h, &gr, NULL)) != HETRING_OK) break;
    }
    fflush(stderr);
    dup2(saved, 2), close(saved);
    char text[1 << 16] = "";
    FILE *f = fopen(path, "r");
    const size_t got = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    text[got] = 0;
    char want[128];
    snprintf(want, sizeof want, "replica check failed at iteration %ld: the parameters of node",
             hashed);
    CHECK(st == HETRING_EMISMATCH && hashed >= 0 && strstr(text, want) &&
              strstr(text, "Likely causes, most likely first: the training loop changed one "
                           "node's state outside the step (a learning rate"),
          "node %ld: ended with %d after hash iteration %ld; its log:\n%s", id, st, hashed, text);
    hetring_free(h);
    return check_exit();
}

static int mismatch(const char *dir, int port) {
    return three_nodes(dir, port, mismatch_node);
}

/* ================================================================ bf16 */

/* test_api bf16: [cluster] wire = bf16 on 3 nodes. Every node hands over v[j] times its share
 * of every global batch, so the average over the cluster is v[j], which bf16 cannot hold: each
 * result is v[j] rounded on the way. With error feedback what a rounding dropped goes into
 * the next step, so the results summed over the steps stay within a few roundings of the
 * exact total however many steps; without it the same rounding would add up step after step.
 * At iteration BF_INF node 1's gradient holds an inf ([train] nonfinite = skip): the step is
 * skipped on every node, and its residual must not be taken up (it would make every later
 * result NaN). The replica hash covers the running totals: every node the same bits (I4). */
#define BF_N   20000 /* values: above what the ring sends as one small message */
#define BF_INF 10

static float bf_v(int j) {
    return 1.0f / 3.0f + (float)(j % 97) * 0x1p-12f;
}

static int bf16_buckets; /* test_api bf16_buckets: four buffers, buckets of 64 bytes */

static int bf16_node(const char *ini, long id) {
    model m = {{0}, 0, 0, 0, 0, 0, 0};
    const char *sets[] = {"cluster.wire=bf16", "train.nonfinite=skip",
                          bf16_buckets ? "train.bucket_bytes=64" : NULL, NULL};
    hetring *h = open_node(ini, id, sets, &m);
    if (!h) return 1;
    /* buckets of 40 KB each: above what the ring sends as one small message in float32 */
    const int N = bf16_buckets ? 4 * 10000 : BF_N, Q = N / 4;
    int st;
    float *g = malloc(N * sizeof *g);
    double *total = calloc(N, sizeof *total);
    if (!g || !total) return 1;
    float *bufs[4] = {g, g + Q, g + 2 * Q, g + 3 * Q};
    size_t counts[4] = {Q, Q, Q, N - 3 * Q};
    if (!bf16_buckets) counts[0] = N;
    const int nb = bf16_buckets ? 4 : 1;
    long applied = 0, skipped = 0, overlapped = 0;
    uint64_t hash = 0;
    hetring_batch b;
    while ((st = hetring_next(h, &b)) == HETRING_OK) {
        hetring_grads gr = {.bufs = bufs, .counts = counts, .n_bufs = nb};
        for (int j = 0; j < N; j++) g[j] = bf_v(j) * (float)b.batch;
        if (b.iter == BF_INF && id == 1) g[5] = INFINITY;
        gr.compute_s = 1e-4;
        gr.loss_sum = (double)b.batch;
        gr.param_hash = b.check_hash ? hash : 0;
        /* the buffers as backward finishes them, last first (node 2 leaves it to the step) */
        for (int i = nb - 1; bf16_buckets && id != 2 && i >= 0; i--)
            CHECK(hetring_ready(h, &gr, i) == HETRING_OK, "node %ld: ready %d: %s", id, i,
                  hetring_last_error(h));
        hetring_result r = {0};
        st = hetring_step(h, &gr, &r);
        overlapped += r.buckets > 1;
        if (st == HETRING_SKIPPED) {
            skipped++;
            continue;
        }
        if (st != HETRING_OK) break;
        for (int j = 0; j < N; j++) total[j] += g[j];
        hash = hetring_hash(total, N * sizeof *total, 0);
        applied++;
    }
    double worst = 0, mean_one = 0; /* the totals' error, and one step's, relative to v */
    for (int j = 0; j < N; j++) {
        double want = (double)applied * bf_v(j), e = fabs(total[j] - want) / bf_v(j);
        if (!(e <= worst)) worst = e;
        mean_one += fabs((double)g[j] - bf_v(j)) / bf_v(j) / N;
    }
    printf("node %ld: %ld steps applied, %ld skipped; the totals within %.3g of the exact ones "
           "(relative to v); the last step alone %.3g off on average\n",
           id, applied, skipped, worst, mean_one);
    CHECK(st == HETRING_DONE && applied == ITERS - 1 && skipped == 1,
          "node %ld: ended with %d after %ld steps applied, %ld skipped: %s", id, st, applied,
          skipped, hetring_last_error(h));
    /* the totals: error feedback keeps them within 0.02 v (measured 0.0048); without it they
     * drift step after step (measured 0.179 v off after 39 steps) */
    CHECK(worst <= 0.02,
          "node %ld: the totals are %.3g (relative to v) off the exact sums: "
          "what the roundings dropped is not fed back",
          id, worst);
    CHECK(mean_one > 1e-5, "node %ld: the results are exact (%.3g): bf16 did not take effect", id,
          mean_one);
    CHECK(bf16_buckets ? overlapped == applied + skipped : overlapped == 0,
          "node %ld: %ld of %ld steps went in buckets", id, overlapped, applied + skipped);
    free(g), free(total);
    hetring_free(h);
    return check_exit();
}

static int bf16(const char *dir, int port) {
    return three_nodes(dir, port, bf16_node);
}

/* ================================================================ powersgd */

/* test_api powersgd: [cluster] wire = powersgd at rank 2 on 3 nodes. Buffer 0 is a PS_R x PS_C
 * matrix V (rank PS_R, well above 2) then a bias of PS_B floats; buffer 1 a plain vector
 * (declared 0 x 0). Every node hands over its batch times V, so the mean is V: one step gives
 * V's rank-2 approximation, and with error feedback the results summed over the steps stay
 * within a few steps' error of the exact total; without it the same error adds up. The bias
 * and the vector go as float32. At iteration BF_INF node 1's matrix holds an inf ([train]
 * nonfinite = skip): skipped everywhere, its residual and Q' must not be taken up. The replica
 * hash covers the totals (I4). Node 0's first step comes without hetring_matrices, node 1's
 * with a matrix larger than its buffer: each must fail with a message saying so, and the
 * declared layout then trains. */
#define PS_R 48
#define PS_C 40
#define PS_B 7
#define PS_V 300

static float ps_v(int i, int j) {
    return sinf(0.37f * (float)i + 1.3f * (float)j) + 0.05f * (float)((i * j) % 7);
}

static int powersgd_node(const char *ini, long id) {
    model m = {{0}, 0, 0, 0, 0, 0, 0};
    const char *sets[] = {"cluster.wire=powersgd", "cluster.powersgd_rank=2",
                          "train.nonfinite=skip", NULL};
    hetring *h = open_node(ini, id, sets, &m);
    if (!h) return 1;
    enum { NM = PS_R * PS_C + PS_B, N = NM + PS_V };
    float *g = malloc(N * sizeof *g), want[N];
    double *total = calloc(N, sizeof *total);
    if (!g || !total) return 1;
    for (int k = 0; k < N; k++)
        want[k] = k < PS_R * PS_C ? ps_v(k / PS_C, k % PS_C) : 0.25f + (float)(k % 13) * 0.5f;
    float *bufs[2] = {g, g + NM};
    size_t counts[2] = {NM, PS_V}, rows[2] = {PS_R, 0}, cols[2] = {PS_C, 0};
    /* rows x cols is 80 floats modulo 2^64: a size a wrapped product would take for small */
    size_t too_many[2] = {SIZE_MAX / PS_C + 2, 0};
    if (id == 1) CHECK(hetring_matrices(h, too_many, cols, 2) == HETRING_OK, "matrices");
    if (id == 2) CHECK(hetring_matrices(h, rows, cols, 2) == HETRING_OK, "matrices");
    if (id == 2) CHECK(hetring_resume_residual(h, want, N - 1) == HETRING_OK, "resume");
    long applied = 0, skipped = 0, refused = 0;
    uint64_t hash = 0;
    int st;
    hetring_batch b;
    while ((st = hetring_next(h, &b)) == HETRING_OK) {
        hetring_grads gr = {.bufs = bufs, .counts = counts, .n_bufs = 2};
        for (int k = 0; k < N; k++) g[k] = want[k] * (float)b.batch;
        if (b.iter == BF_INF && id == 1) g[5] = INFINITY;
        gr.compute_s = 1e-4;
        gr.loss_sum = (double)b.batch;
        gr.param_hash = b.check_hash ? hash : 0;
        hetring_result r = {0};
        st = hetring_step(h, &gr, &r);
        if (st == HETRING_EINVAL && refused++ == 0) { /* once, then declared right */
            char big[80];
            snprintf(big, sizeof big, "fewer than its declared %zu x 40", SIZE_MAX / PS_C + 2);
            const char *const why[] = {"hetring_matrices", big,
                                       "the resumed residual holds 2226 floats, the "
                                       "buffers 2227"};
            const char *e = hetring_last_error(h);
            CHECK(strstr(e, why[id]), "node %ld: the refusal does not say why: %s", id, e);
            CHECK(hetring_matrices(h, rows, cols, 2) == HETRING_OK, "node %ld: matrices", id);
            float zero[N] = {0};
            if (id == 2) CHECK(hetring_resume_residual(h, zero, N) == HETRING_OK, "resume");
            st = hetring_step(h, &gr, &r);
        }
        if (st == HETRING_SKIPPED) {
            skipped++;
            continue;
        }
        if (st != HETRING_OK) break;
        for (int k = 0; k < N; k++) total[k] += g[k];
        hash = hetring_hash(total, N * sizeof *total, 0);
        applied++;
    }
    double worst = 0, plain = 0, one = 0, vmax = 0; /* relative to V's largest element */
    for (int k = 0; k < PS_R * PS_C; k++) vmax = fmax(vmax, fabs(want[k]));
    for (int k = 0; k < N; k++) {
        const double e = fabs(total[k] - (double)applied * want[k]) / vmax;
        if (k < PS_R * PS_C) {
            if (!(e <= worst)) worst = e;
            one = fmax(one, fabs((double)g[k] - want[k]) / vmax);
        } else if (!(e <= plain))
            plain = e;
    }
    printf("node %ld: %ld steps applied, %ld skipped; the matrix totals within %.3g steps' worth "
           "of V of the exact ones, the float32 ones within %.3g; the last step alone %.3g off\n",
           id, applied, skipped, worst, plain, one);
    /* the residual for a checkpoint: the buffers' floats, only into room of that size */
    float *res = malloc(N * sizeof *res);
    const long nres = hetring_residual(h, NULL, 0);
    int finite = res && hetring_residual(h, res, N - 1) == -1 && hetring_residual(h, res, N) == N;
    for (int k = 0; finite && k < N; k++) finite = isfinite(res[k]);
    CHECK(nres == N && finite,
          "node %ld: the residual holds %ld floats (expected %d), or its copy is wrong", id, nres,
          N);
    free(res);
    /* Q for a checkpoint: cols x r of the one matrix compressed */
    float q[(PS_C)*2];
    CHECK(hetring_powersgd_q(h, NULL, 0) == PS_C * 2 && hetring_powersgd_q(h, q, PS_C) == -1 &&
              hetring_powersgd_q(h, q, PS_C * 2) == PS_C * 2,
          "node %ld: Q holds %ld floats (expected %d)", id, hetring_powersgd_q(h, NULL, 0),
          PS_C * 2);
    CHECK(hetring_resume_powersgd_q(h, q, PS_C * 2) == HETRING_EINVAL &&
              strstr(hetring_last_error(h), "give Q before it"),
          "node %ld: Q resumed after the first step: %s", id, hetring_last_error(h));
    CHECK(st == HETRING_DONE && applied == ITERS - 1 && skipped == 1 && refused == 1,
          "node %ld: ended with %d after %ld steps applied, %ld skipped, %ld refused: %s", id, st,
          applied, skipped, refused, hetring_last_error(h));
    /* with error feedback the totals' error is what the residuals hold, bounded (measured 2.71
     * V after 39 steps); without it each step's 0.263 V adds up (measured 10.8 V) */
    CHECK(worst <= 5.0,
          "node %ld: the matrix totals are %.3g of V off the exact sums: what the approximation "
          "dropped is not fed back",
          id, worst);
    CHECK(plain <= 1e-5 * ITERS, "node %ld: the float32 floats are %.3g off", id, plain);
    CHECK(one > 1e-3, "node %ld: a step gives V exactly (%.3g): powersgd did not take effect", id,
          one);
    free(g), free(total);
    hetring_free(h);
    return check_exit();
}

static int powersgd(const char *dir, int port) {
    return three_nodes(dir, port, powersgd_node);
}

/* ================================================================ lossy wires, not finite */

/* test_api nonfinite_wire: wire = bf16, then wire = powersgd (rank 2), on 3 nodes with
 * [train] nonfinite = skip. Node 1 resumes a residual holding 3e38 at element AT, E the floats
 * from there on (buffer 0 with bf16; with powersgd the plain vector after the matrix, which goes
 * as float32). At iteration NW_FB its gradient holds 3e38 there too: a finite share whose
 * residual makes it overflow, named as such (not "their sum overflowed"); at NW_SUM every node's
 * gradient holds 3e38 at AT + 2, finite shares whose sum overflows; at NW_MAX node 1's holds
 * 0x7f7f9000 (3.3966e38) at AT + 1, finite, and the step must be applied (bf16 rounded it to inf
 * once), its residual finite. Every node must reach the same verdicts with the same culprits. */
#define NW_FB  0
#define NW_SUM 2
#define NW_MAX 3

static int nw_psgd; /* the powersgd round */

static float nw_of_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static int nonfinite_wire_node(const char *ini, long id) {
    model m = {{0}, 0, 0, 0, 0, 0, 0};
    const char *sets[] = {"train.nonfinite=skip",
                          nw_psgd ? "cluster.wire=powersgd" : "cluster.wire=bf16",
                          nw_psgd ? "cluster.powersgd_rank=2" : NULL, NULL};
    hetring *h = open_node(ini, id, sets, &m);
    if (!h) return 1;
    enum { NM = PS_R * PS_C + PS_B, N = BF_N };
    const int AT = nw_psgd ? NM : 0;
    float *g = malloc(N * sizeof *g), *res = calloc(N, sizeof *res);
    if (!g || !res) return 1;
    float *bufs[2] = {g, g + NM};
    size_t counts[2] = {NM, N - NM}, rows[2] = {PS_R, 0}, cols[2] = {PS_C, 0};
    if (!nw_psgd) counts[0] = N;
    if (nw_psgd) CHECK(hetring_matrices(h, rows, cols, 2) == HETRING_OK, "matrices");
    res[AT] = 3e38f;
    if (id == 1) CHECK(hetring_resume_residual(h, res, N) == HETRING_OK, "resume");
    long applied = 0, skipped = 0;
    int st;
    hetring_batch b;
    while ((st = hetring_next(h, &b)) == HETRING_OK) {
        hetring_grads gr = {.bufs = bufs, .counts = counts, .n_bufs = nw_psgd ? 2 : 1};
        for (int k = 0; k < N; k++) g[k] = (0.25f + (float)(k % 13) * 0.5f) * (float)b.batch;
        if (b.iter == NW_FB && id == 1) g[AT] = 3e38f;
        if (b.iter == NW_SUM) g[AT + 2] = 3e38f;
        if (b.iter == NW_MAX && id == 1) g[AT + 1] = nw_of_bits(0x7f7f9000u);
        gr.compute_s = 1e-4;
        gr.loss_sum = (double)b.batch;
        hetring_result r = {0};
        st = hetring_step(h, &gr, &r);
        const char *e = hetring_last_error(h);
        long ids[3] = {-1, -1, -1};
        const int n = hetring_nonfinite(h, ids, 3);
        if (b.iter == NW_FB || b.iter == NW_SUM)
            printf("node %ld, %s, iteration %ld: status %d, %d culprit(s): %s\n", id,
                   nw_psgd ? "powersgd" : "bf16", b.iter, st, n, e);
        if (b.iter == NW_FB)
            CHECK(st == HETRING_SKIPPED && n == 1 && ids[0] == 1 &&
                      strstr(e, "node 1 (gradient plus its error-feedback residual)") &&
                      !strstr(e, "overflowed"),
                  "node %ld: node 1's finite share with its residual overflowing: status %d, "
                  "%d culprit(s), the first %ld: %s",
                  id, st, n, ids[0], e);
        if (b.iter == NW_SUM)
            CHECK(st == HETRING_SKIPPED && n == 0 &&
                      strstr(e, nw_psgd ? "(every share was finite: their low-rank products or "
                                          "their sums overflowed)"
                                        : "(every share was finite: their sum overflowed)"),
                  "node %ld: finite shares whose sum overflows: status %d, %d culprit(s): %s", id,
                  st, n, e);
        if (b.iter == NW_MAX)
            CHECK(st == HETRING_OK && isfinite(g[AT + 1]),
                  "node %ld: a finite 3.3966e38 on node 1: status %d, result %g: %s", id, st,
                  g[AT + 1], e);
        if (b.iter == NW_MAX && st == HETRING_OK) {
            CHECK(hetring_residual(h, res, N) == N, "node %ld: the residual", id);
            int finite = 1;
            for (int k = 0; k < N; k++) finite &= isfinite(res[k]) != 0;
            CHECK(finite, "node %ld: the residual after a finite 3.3966e38 is not finite", id);
        }
        if (st == HETRING_SKIPPED) {
            skipped++;
            continue;
        }
        if (st != HETRING_OK) break;
        applied++;
    }
    printf("node %ld, %s: %ld steps applied, %ld skipped\n", id, nw_psgd ? "powersgd" : "bf16",
           applied, skipped);
    CHECK(st == HETRING_DONE && applied == ITERS - 2 && skipped == 2,
          "node %ld: ended with %d after %ld steps applied, %ld skipped: %s", id, st, applied,
          skipped, hetring_last_error(h));
    free(g), free(res);
    hetring_free(h);
    return check_exit();
}

static int nonfinite_wire(const char *dir, int port) {
    nw_psgd = 0;
    int rc = three_nodes(dir, port, nonfinite_wire_node);
    nw_psgd = 1; /* whatever the first round did: each round's failures are its own */
    const int rc2 = three_nodes(dir, port, nonfinite_wire_node);
    return rc ? rc : rc2;
}

/* test_api powersgd_threads: wire = powersgd at rank 2 on 3 nodes on 1, 2 and 3 threads
 * ([node] threads), one PT_R x PT_C matrix: big enough for each product to split over 2 or 3
 * threads (powersgd.h). The products' bits do not depend on the threads, so the three nodes'
 * steps are the same bits: the replica hash covers the totals of every step (I4), and a split
 * that loses or repeats a part fails it. */
#define PT_R 600
#define PT_C 520

static int powersgd_threads_node(const char *ini, long id) {
    model m = {{0}, 0, 0, 0, 0, 0, 0};
    const char *sets[] = {"cluster.wire=powersgd", "cluster.powersgd_rank=2", "node.1.threads=2",
                          "node.2.threads=3", NULL};
    hetring *h = open_node(ini, id, sets, &m);
    if (!h) return 1;
    enum { N = PT_R * PT_C };
    float *g = malloc(N * sizeof *g);
    double *total = calloc(N, sizeof *total);
    if (!g || !total) return 1;
    float *bufs[1] = {g};
    size_t counts[1] = {N}, rows[1] = {PT_R}, cols[1] = {PT_C};
    CHECK(hetring_matrices(h, rows, cols, 1) == HETRING_OK, "matrices");
    long applied = 0;
    uint64_t hash = 0;
    int st;
    hetring_batch b;
    while ((st = hetring_next(h, &b)) == HETRING_OK) {
        hetring_grads gr = {.bufs = bufs, .counts = counts, .n_bufs = 1};
        for (int k = 0; k < N; k++) /* another matrix on every node, full rank */
            g[k] = ps_v(k / PT_C + (int)id, k % PT_C) * (float)b.batch;
        gr.compute_s = 1e-4;
        gr.loss_sum = (double)b.batch;
        gr.param_hash = b.check_hash ? hash : 0;
        hetring_result r = {0};
        if ((st = hetring_step(h, &gr, &r)) != HETRING_OK) break;
        for (int k = 0; k < N; k++) total[k] += g[k];
        hash = hetring_hash(total, N * sizeof *total, 0);
        applied++;
    }
    printf("node %ld on %ld thread(s): %ld steps applied, totals' hash %016llx\n", id, id + 1,
           applied, (unsigned long long)hash);
    CHECK(st == HETRING_DONE && applied == ITERS, "node %ld: ended with %d after %ld steps: %s", id,
          st, applied, hetring_last_error(h));
    free(g), free(total);
    hetring_free(h);
    return check_exit();
}

static int powersgd_threads(const char *dir, int port) {
    return three_nodes(dir, port, powersgd_threads_node);
}

/* test_api auto_flush: [cluster] wire = auto on 3 nodes, with a rate no link goes below
 * (wire_auto_gbit = 1e-6), so every step goes float32; node 2 resumes a residual R from its
 * checkpoint. A float32 step loses nothing on the wire, so it sends what lossy steps left
 * with it: the first step's mean is V + R / B on every node, the second V again, and node 2's
 * residual is then empty. Without the flush R would wait for a lossy step that never comes. */
static int auto_flush_node(const char *ini, long id) {
    model m = {{0}, 0, 0, 0, 0, 0, 0};
    const char *sets[] = {"cluster.wire=auto", "cluster.wire_auto_gbit=1e-6", NULL};
    hetring *h = open_node(ini, id, sets, &m);
    if (!h) return 1;
    enum { NM = PS_R * PS_C + PS_B, N = NM + PS_V };
    float *g = malloc(N * sizeof *g), want[N], carry[N];
    if (!g) return 1;
    for (int k = 0; k < N; k++) {
        want[k] = k < PS_R * PS_C ? ps_v(k / PS_C, k % PS_C) : 0.25f + (float)(k % 13) * 0.5f;
        carry[k] = 0.5f + (float)(k % 5); /* node 2's resumed residual, in sums */
    }
    float *bufs[2] = {g, g + NM};
    size_t counts[2] = {NM, PS_V}, rows[2] = {PS_R, 0}, cols[2] = {PS_C, 0};
    CHECK(hetring_matrices(h, rows, cols, 2) == HETRING_OK, "matrices");
    if (id == 2) CHECK(hetring_resume_residual(h, carry, N) == HETRING_OK, "resume");
    double off[2] = {0, 0}; /* the first two steps' largest error against what they must be */
    long steps = 0;
    int st;
    hetring_batch b;
    while ((st = hetring_next(h, &b)) == HETRING_OK) {
        hetring_grads gr = {.bufs = bufs, .counts = counts, .n_bufs = 2};
        for (int k = 0; k < N; k++) g[k] = want[k] * (float)b.batch;
        gr.compute_s = 1e-4;
        gr.loss_sum = (double)b.batch;
        hetring_result r = {0};
        if ((st = hetring_step(h, &gr, &r)) != HETRING_OK) break;
        for (int k = 0; steps < 2 && k < N; k++) {
            const double must = want[k] + (steps == 0 ? carry[k] / (double)b.global_batch : 0);
            off[steps] = fmax(off[steps], fabs(g[k] - must) / fabs(must));
        }
        steps++;
    }
    printf("node %ld: %ld steps; the first step %.3g off V + R / B, the second %.3g off V\n", id,
           steps, off[0], off[1]);
    CHECK(st == HETRING_DONE && steps == ITERS, "node %ld: ended with %d after %ld steps: %s", id,
          st, steps, hetring_last_error(h));
    CHECK(off[0] <= 1e-5,
          "node %ld: the first step is %.3g off V + R / B: node 2's resumed "
          "residual was not sent",
          id, off[0]);
    CHECK(off[1] <= 1e-5, "node %ld: the second step is %.3g off V: the residual went twice", id,
          off[1]);
    float *res = malloc(N * sizeof *res);
    const long nres = hetring_residual(h, NULL, 0);
    int zero = res && (nres == 0 || hetring_residual(h, res, (size_t)nres) == nres);
    for (long k = 0; zero && k < nres; k++) zero = res[k] == 0.0f;
    CHECK(zero && nres == (id == 2 ? N : 0),
          "node %ld: the residual after the steps holds %ld floats, not all zero", id, nres);
    free(res), free(g);
    hetring_free(h);
    return check_exit();
}

static int auto_flush(const char *dir, int port) {
    return three_nodes(dir, port, auto_flush_node);
}

static pid_t spawn(const node_args *a) {
    fflush(stdout);
    pid_t p = fork();
    if (p == 0) {
        int rc = run_node(a);
        fflush(stdout);
        _exit(rc);
    }
    return p;
}

static int wait_ok(pid_t p, int expect) {
    int ws;
    if (waitpid(p, &ws, 0) != p) return 0;
    return WIFEXITED(ws) && WEXITSTATUS(ws) == expect;
}

/* ================================================================ churn */

#define CHURN_CYCLES 8

/* Entries of a /proc directory (this process's fds or threads), less the DIR's own fd. */
static int proc_count(const char *path) {
    DIR *d = opendir(path);
    if (!d) return -1;
    int n = strcmp(path, "/proc/self/fd") == 0 ? -1 : 0;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static int churn_grads(hetring *h) {
    float g[D] = {0};
    float *bufs[1] = {g};
    size_t counts[1] = {D};
    hetring_grads gr = {.bufs = bufs, .counts = counts, .n_bufs = 1, .compute_s = 1e-3};
    return hetring_step(h, &gr, NULL);
}

/* Node 1's life in cycle c: join, three steps, then leave (even c) or die (odd c). */
static int churn_joiner(const char *ini, int c) {
    hetring *h = open_node(ini, 1, NULL, &(model){{0}, 0, 0, 0, 0, 0, 0});
    if (!h) return 1;
    hetring_batch b;
    int st, steps = 0;
    while ((st = hetring_next(h, &b)) == HETRING_OK) {
        if (++steps == 3) {
            if (c % 2) raise(SIGKILL);
            hetring_leave(h);
        }
        st = churn_grads(h);
        if (st != HETRING_OK && st != HETRING_RETRY) break;
    }
    (void)hetring_close(h);
    hetring_free(h);
    return st == HETRING_LEFT ? 0 : 1;
}

/* Nodes 0 (id 0, measuring) and 2: train until `stop` exists, then node 0 leaves. */
static int churn_survivor(const char *ini, long id, const char *stop) {
    model m = {{0}, 0, 0, 0, 0, 0, 0};
    hetring *h = open_node(ini, id, NULL, &m);
    if (!h) return 1;
    /* the least descriptors and threads of the first view without node 1, and of the latest */
    int fds[2] = {-1, -1}, thr[2] = {-1, -1}, views = 0, seen = -1, st;
    hetring_batch b;
    while ((st = hetring_next(h, &b)) == HETRING_OK) {
        st = churn_grads(h);
        if (st != HETRING_OK && st != HETRING_RETRY) break;
        if (st == HETRING_OK && b.size == 2) {
            if (m.views != seen) { /* a new view without node 1 */
                if (views == 1) fds[0] = fds[1], thr[0] = thr[1];
                fds[1] = thr[1] = -1;
                views++, seen = m.views;
            }
            const int f = proc_count("/proc/self/fd"), t = proc_count("/proc/self/task");
            if (fds[1] < 0 || f < fds[1]) fds[1] = f;
            if (thr[1] < 0 || t < thr[1]) thr[1] = t;
            if (id == 0 && access(stop, F_OK) == 0) hetring_leave(h);
        }
        usleep(2000);
    }
    if (id == 0) {
        printf("node 0: %d views without node 1: first %d fds %d threads, last %d fds %d threads\n",
               views, fds[0], thr[0], fds[1], thr[1]);
        CHECK(st == HETRING_LEFT, "node 0 ended with %d, not HETRING_LEFT: %s", st,
              hetring_last_error(h));
        CHECK(views >= 3, "node 0 saw %d views without node 1 in %d cycles", views, CHURN_CYCLES);
        CHECK(fds[1] == fds[0], "node 0 holds %d descriptors after %d views, %d after the first",
              fds[1], views, fds[0]);
        CHECK(thr[1] == thr[0], "node 0 runs %d threads after %d views, %d after the first", thr[1],
              views, thr[0]);
    }
    (void)hetring_close(h);
    hetring_free(h);
    fflush(stdout);
    return check_exit();
}

static int churn(const char *dir, int port) {
    char ini[512], stop[512];
    snprintf(ini, sizeof ini, "%s/churn.ini", dir);
    snprintf(stop, sizeof stop, "%s/churn.stop", dir);
    FILE *f = fopen(ini, "w");
    if (!f) return 2;
    fprintf(f,
            "[cluster]\nsecurity = none\nconnect_timeout = 10\ntimeout = 5\n"
            "rejoin_timeout = 30\n[train]\nsamples = %d\nglobal_batch = %d\n"
            "iterations = 100000000\nseed = 3\n[controller]\npolicy = proportional\n"
            "interval = 1\nmin_batch = 2\n",
            SAMPLES, BATCH);
    for (int k = 0; k < 3; k++) fprintf(f, "[node.%d]\nhost = 127.0.0.1\nport = %d\n", k, port + k);
    fclose(f);
    pid_t surv[2];
    for (int k = 0; k < 2; k++) {
        fflush(stdout);
        if ((surv[k] = fork()) == 0) _exit(churn_survivor(ini, 2 * k, stop));
    }
    for (int c = 0; c < CHURN_CYCLES; c++) {
        fflush(stdout);
        pid_t p = fork();
        if (p == 0) _exit(churn_joiner(ini, c));
        int ws;
        CHECK(waitpid(p, &ws, 0) == p &&
                  (c % 2 ? WIFSIGNALED(ws) : WIFEXITED(ws) && WEXITSTATUS(ws) == 0),
              "node 1's cycle %d ended wrongly (status 0x%x)", c, ws);
        usleep(200000); /* the others train a while without it */
    }
    fclose(fopen(stop, "w"));
    CHECK(wait_ok(surv[0], 0), "node 0 failed");
    kill(surv[1], SIGKILL); /* alone below the quorum it would wait for rejoin_timeout */
    waitpid(surv[1], NULL, 0);
    return check_exit();
}

static int ring(const char *dir, int port, int rejoin, int leave) {
    if (overlap_run) train_extra = "bucket_bytes = 64";
    const char *ini =
        write_ini(dir, 3, port, rejoin || leave || resume_phase ? "" : "slowdown = 3");
    node_args a[3];
    pid_t p[3];
    for (int k = 0; k < 3; k++) {
        a[k] =
            (node_args){ini, k, rejoin && k == 2 ? 12 : -1, 0, rejoin, leave && k == 2 ? 10 : -1};
        p[k] = spawn(&a[k]);
    }
    if (rejoin) {
        CHECK(wait_ok(p[2], 3), "node 2 died as planned");
        usleep(300 * 1000);
        a[2] = (node_args){ini, 2, -1, 1, 1, -1};
        p[2] = spawn(&a[2]);
    }
    for (int k = 0; k < 3; k++) CHECK(wait_ok(p[k], 0), "node %d failed", k);
    return check_exit();
}

static volatile sig_atomic_t stop_flag;
static void on_alarm(int sig) {
    (void)sig;
    stop_flag = 1; /* all a signal handler may do: the library polls the flag */
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Alone of 3 nodes, hetring_open waits for a quorum (rejoin_timeout 20 s); SIGALRM after
 * 0.5 s sets leave_flag, which ends the wait. */
static int leave_open(const char *dir, int port) {
    const char *ini = write_ini(dir, 3, port, "");
    hetring_options o;
    hetring_options_init(&o);
    o.conf = ini, o.node_id = 0, o.leave_flag = &stop_flag;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 0}, {0, 500 * 1000}};
    setitimer(ITIMER_REAL, &it, NULL);
    hetring *h = NULL;
    char err[512] = "";
    const double t0 = now_s();
    int st = hetring_open(&h, &o, err, sizeof err);
    const double took = now_s() - t0;
    printf("hetring_open: %d after %.2f s: %s\n", st, took, err);
    CHECK(st == HETRING_LEFT && !h, "a set leave_flag ends the wait: status %d (%s)", st, err);
    CHECK(took >= 0.4 && took < 5, "hetring_open returned after %.2f s, not soon after 0.5 s",
          took);
    hetring_free(h);
    return check_exit();
}

/* The same run twice: the second from node 0's checkpoint of the first (nodes 0 and 1). */
static int resume(const char *dir, int port) {
    resume_dir = dir, leave_run = 1; /* no slow node, as in leave */
    resume_phase = 1;
    int rc = ring(dir, port, 0, 0);
    if (rc) return rc;
    resume_phase = 2;
    return ring(dir, port, 0, 0);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr,
                "usage: test_api misuse|text|ring|rejoin|leave|overlap|overlap_rejoin|plan|"
                "resume|leave_open|nonfinite|nonfinite_skip|bf16|bf16_buckets|powersgd|"
                "powersgd_threads|auto_flush|nonfinite_wire|end_close|fork|mismatch|churn\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    char dir[] = "/tmp/hetring-api.XXXXXX";
    if (!mkdtemp(dir)) return 2;
    int port = port_block(); /* claimed as tests/ports.sh claims them */
    int rc = 2;
    if (strcmp(argv[1], "misuse") == 0) rc = misuse(dir, port);
    if (strcmp(argv[1], "text") == 0) rc = text(dir, port);
    if (strcmp(argv[1], "plan") == 0) rc = plan(dir, port);
    if (strcmp(argv[1], "churn") == 0) rc = churn(dir, port);
    if (strcmp(argv[1], "nonfinite") == 0) rc = nonfinite(dir, port);
    if (strcmp(argv[1], "end_close") == 0) rc = end_close(dir, port);
    if (strcmp(argv[1], "fork") == 0) rc = fork_run(dir, port);
    if (strcmp(argv[1], "mismatch") == 0) rc = mismatch(dir, port);
    if (strcmp(argv[1], "bf16") == 0) rc = bf16(dir, port);
    if (strcmp(argv[1], "bf16_buckets") == 0) bf16_buckets = 1, rc = bf16(dir, port);
    if (strcmp(argv[1], "powersgd") == 0) rc = powersgd(dir, port);
    if (strcmp(argv[1], "powersgd_threads") == 0) rc = powersgd_threads(dir, port);
    if (strcmp(argv[1], "auto_flush") == 0) rc = auto_flush(dir, port);
    if (strcmp(argv[1], "nonfinite_wire") == 0) rc = nonfinite_wire(dir, port);
    if (strcmp(argv[1], "nonfinite_skip") == 0) nonfinite_skip = 1, rc = nonfinite(dir, port);
    if (strcmp(argv[1], "resume") == 0) rc = resume(dir, port);
    if (strcmp(argv[1], "leave_open") == 0) rc = leave_open(dir, port);
    if (strcmp(argv[1], "ring") == 0) rc = ring(dir, port, 0, 0);
    if (strcmp(argv[1], "rejoin") == 0) rc = ring(dir, port, 1, 0);
    if (strcmp(argv[1], "leave") == 0) leave_run = 1, rc = ring(dir, port, 0, 1);
    if (strcmp(argv[1], "overlap") == 0) overlap_run = 1, rc = ring(dir, port, 0, 0);
    if (strcmp(argv[1], "overlap_rejoin") == 0) overlap_run = 1, rc = ring(dir, port, 1, 0);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) rc = rc ? rc : 1;
    return rc;
}
