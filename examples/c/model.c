/*
 * model.c: a model of your own, trained on a hetring cluster through libhetring (hetring.h).
 *
 * A linear regression y = w.x + c on a synthetic set, with SGD and momentum. hetring tells
 * each node which samples of every global batch it computes (a share that follows the node's
 * speed), all-reduces the gradient sums with that weighting and moves the model and optimizer
 * state to a node that joins (get_state/put_state). Everything else is the loop you would
 * write for one machine.
 *
 * SIGTERM (a scheduler's pre-emption), SIGINT (Ctrl-C) and SIGHUP (a closed terminal) make the
 * node leave cleanly at the next iteration boundary, as `hetring run` does: the others log its
 * leave and go on without it. A second one, half a second or more later, ends the node at once.
 *
 *     ./model cluster.ini NODE_ID [SECTION.KEY=VALUE ...]
 */
#define _POSIX_C_SOURCE 200809L /* sigaction */
#include <hetring.h>

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N  8192 /* samples */
#define D  16   /* features */
#define LR 0.05f
#define MU 0.9f

typedef struct {
    float w[D + 1]; /* weights, then the bias */
    float v[D + 1]; /* momentum */
} state;

/* The synthetic set: x_ij uniform in [-1, 1) from a hash of (i, j), y_i = w*.x_i + 0.5. */
static float feature(long i, int j) {
    uint64_t h = hetring_hash(&i, sizeof i, (uint64_t)j + 1);
    return (float)((double)(h >> 11) / 4503599627370496.0 - 1.0);
}
static float true_w(int j) {
    return 0.1f * (float)(j - D / 2);
}
static float target(long i) {
    float y = 0.5f;
    for (int j = 0; j < D; j++) y += true_w(j) * feature(i, j);
    return y;
}

static int get_state(void *user, const void **data, size_t *bytes) {
    *data = user, *bytes = sizeof(state);
    return 0;
}
static int put_state(void *user, const void *data, size_t bytes) {
    if (bytes != sizeof(state)) return -1;
    memcpy(user, data, bytes);
    return 0;
}
static void on_view(void *user, const hetring_view *v) {
    (void)user;
    if (v->rank == 0)
        printf("view %llu: %d nodes from iteration %ld\n", (unsigned long long)v->epoch, v->n,
               v->iter);
}

static volatile sig_atomic_t leave; /* a leave signal came: hetring reads it (leave_flag) */
static struct timespec leave_at;    /* when */
/* The first signal asks to leave; one 0.5 s or more later kills (Ctrl-C twice). A repeat within
 * 0.5 s is the same signal sent twice (timeout(1) sends its child one and its group one). */
static void on_leave_signal(int sig) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    if (!leave) {
        leave_at = t;
        leave = 1;
    } else if ((t.tv_sec - leave_at.tv_sec) + (t.tv_nsec - leave_at.tv_nsec) * 1e-9 >= 0.5) {
        signal(sig, SIG_DFL);
        raise(sig);
    }
}
static void catch_leave_signals(void) {
    struct sigaction sa = {.sa_handler = on_leave_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s CLUSTER.ini NODE_ID [SECTION.KEY=VALUE ...]\n", argv[0]);
        return 2;
    }
    state s;
    memset(&s, 0, sizeof s);
    hetring_options o;
    hetring_options_init(&o);
    o.conf = argv[1];
    o.node_id = atol(argv[2]);
    o.n_samples = N;
    o.set = (const char *const *)(argv + 3); /* argv is NULL-terminated */
    o.leave_flag = &leave;                   /* also ends the wait for the others in open */
    o.cb = (hetring_callbacks){
        .user = &s, .get_state = get_state, .put_state = put_state, .on_view = on_view};
    char err[512];
    hetring *h;
    catch_leave_signals();
    int st = hetring_open(&h, &o, err, sizeof err);
    if (st == HETRING_LEFT) return 0; /* asked to leave before the cluster formed */
    if (st != HETRING_OK) {
        fprintf(stderr, "model: %s\n", err);
        return 1;
    }
    float gw[D], gc; /* gradient sums, then the global means */
    float *bufs[2] = {gw, &gc};
    size_t counts[2] = {D, 1};
    hetring_batch b;
    hetring_result r = {0};
    while ((st = hetring_next(h, &b)) == HETRING_OK) {
        double t0 = now_s(), loss = 0;
        memset(gw, 0, sizeof gw), gc = 0;
        for (long k = 0; k < b.batch; k++) {
            long i = (long)b.indices[k];
            float x[D], e = s.w[D] - target(i);
            for (int j = 0; j < D; j++) x[j] = feature(i, j), e += s.w[j] * x[j];
            for (int j = 0; j < D; j++) gw[j] += e * x[j];
            gc += e;
            loss += 0.5 * e * e;
        }
        hetring_grads g = {.bufs = bufs,
                           .counts = counts,
                           .n_bufs = 2,
                           .compute_s = now_s() - t0,
                           .loss_sum = loss,
                           .param_hash = b.check_hash ? hetring_hash(s.w, sizeof s.w, 0) : 0};
        st = hetring_step(h, &g, &r);
        if (st == HETRING_RETRY) continue; /* a node failed: this iteration runs again */
        if (st != HETRING_OK) break;
        for (int j = 0; j <= D; j++) { /* SGD with momentum on the global mean gradient */
            s.v[j] = MU * s.v[j] + (j < D ? gw[j] : gc);
            s.w[j] -= LR * s.v[j];
        }
        if (b.rank == 0 && r.iter % 50 == 0)
            printf("iter %4ld  loss %.6f  my batch %ld of %ld\n", r.iter, r.loss, b.batch,
                   b.global_batch);
    }
    int ok = st == HETRING_DONE || st == HETRING_LEFT;
    if (!ok) fprintf(stderr, "model: %s\n", hetring_last_error(h));
    if (st == HETRING_LEFT)
        printf("node %s left the cluster after iteration %ld\n", argv[2], r.iter);
    double dw = 0;
    for (int j = 0; j < D; j++) dw = fmax(dw, fabs(s.w[j] - true_w(j)));
    if (ok && hetring_rank(h) == 0)
        printf("done: final loss %.3g, largest weight error %.3g, bias %.4f (true 0.5)\n", r.loss,
               dw, s.w[D]);
    hetring_free(h);
    return ok ? 0 : 1;
}
