/*
 * test_powersgd.c: the low-rank wire's arithmetic (cluster/powersgd.h).
 *
 *  - each product against a double-precision reference, and bit for bit against the plain
 *    loops in the order powersgd.h states (this file is built with -ffp-contract=off as
 *    powersgd.c is): a kernel that reorders its sums, or a BLAS, fails here;
 *  - P's columns orthonormal after psgd_orthonormalize; a zero column stays zero, a NaN stays;
 *  - a matrix of rank <= r comes back whole from one power iteration;
 *  - the error feedback: two nodes' dropped parts plus the step are exactly their sum
 *    (within float rounding); with gradients near FLT_MAX (3.3e38 and -3e38) and a finite
 *    step, a dropped part whose float difference overflows stays finite (FLT_MAX), and every
 *    other element keeps the bits of m - p lt;
 *  - Q's start: the same bits for one (seed, epoch, matrix), another for another epoch;
 *  - psgd_worth's rule (P and Q at most half the matrix);
 *  - the products split over 2-64 threads give the bits of one thread.
 * The kernels' times for a 784 x 512 matrix at rank 4, on one thread and two, are printed, not
 * checked (bench/ keeps speed targets).
 */
#include "check.h"
#include "cluster/powersgd.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static float val(size_t i, size_t j, int salt) {
    return sinf(0.731f * (float)i + 0.377f * (float)j + (float)salt) * 0.5f +
           0.01f * (float)((i * 7 + j * 3 + (size_t)salt) % 11);
}

static void fill(float *m, size_t rows, size_t cols, int salt) {
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < cols; j++) m[i * cols + j] = val(i, j, salt);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The products at rank K against double references and the stated order, bit for bit (the
 * kernels take the common ranks as constants: 1, 2, 4 and 8 are checked besides 3). */
static void products(int K) {
    enum { R = 37, C = 29, KM = 8 };
    float m[R * C], q[C * KM], p[R * KM], p2[R * KM], back[C * KM], back2[C * KM];
    printf("rank %d:\n", K);
    fill(m, R, C, 1);
    psgd_init_q(q, C, K, 7, 1, 0);
    psgd_project(m, R, C, q, K, p, 1);
    double dref[R * KM];
    for (int i = 0; i < R; i++)
        for (int k = 0; k < K; k++) {
            double s = 0;
            float f = 0.0f;
            for (int j = 0; j < C; j++) s += (double)m[i * C + j] * q[j * K + k];
            for (int j = 0; j < C; j++) f += m[i * C + j] * q[j * K + k];
            dref[i * K + k] = s, p2[i * K + k] = f;
        }
    float fref[R * KM];
    for (int i = 0; i < R * K; i++) fref[i] = (float)dref[i];
    CHECK_CLOSE(p, fref, R * K, 1e-5, "project against double");
    CHECK(memcmp(p, p2, sizeof *p * R * K) == 0,
          "rank %d, project: not the bits of the sum over j "
          "in order",
          K);

    psgd_orthonormalize(p, R, K);
    psgd_back(m, R, C, p, K, back, 1);
    for (int j = 0; j < C; j++)
        for (int k = 0; k < K; k++) {
            float f = 0.0f;
            for (int i = 0; i < R; i++) f += m[i * C + j] * p[i * K + k];
            back2[j * K + k] = f;
        }
    CHECK(memcmp(back, back2, sizeof *back * C * K) == 0,
          "rank %d, back: not the bits of the sum "
          "over i in order",
          K);

    float qt[KM * C], out[R * C], out2[R * C];
    psgd_transpose(back, C, K, qt);
    for (int j = 0; j < C; j++)
        for (int k = 0; k < K; k++)
            CHECK(qt[k * C + j] == back[j * K + k], "transpose: (%d, %d) moved", j, k);
    psgd_expand(p, qt, R, C, K, NULL, NULL, NULL, out, 1);
    double worst = 0;
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) {
            float f = 0.0f;
            double d = 0;
            for (int k = 0; k < K; k++) f += p[i * K + k] * back[j * K + k];
            for (int k = 0; k < K; k++) d += (double)p[i * K + k] * back[j * K + k];
            out2[i * C + j] = f;
            worst = fmax(worst, fabs(d - out[i * C + j]));
        }
    CHECK(memcmp(out, out2, sizeof out) == 0,
          "rank %d, expand: not the bits of the sum over k in "
          "order",
          K);
    CHECK(worst < 1e-5, "expand: %.3g off the double product", worst);
}

/* Orthonormal columns; a zero column stays zero; a NaN stays. */
static void orthonormal(void) {
    enum { R = 50, K = 4 };
    float p[R * K];
    for (int i = 0; i < R; i++)
        for (int k = 0; k < K; k++) p[i * K + k] = val((size_t)i, (size_t)k, 3) + (k == 2 ? 0 : 1);
    psgd_orthonormalize(p, R, K);
    double worst = 0;
    for (int a = 0; a < K; a++)
        for (int b = 0; b < K; b++) {
            double d = 0;
            for (int i = 0; i < R; i++) d += (double)p[i * K + a] * p[i * K + b];
            worst = fmax(worst, fabs(d - (a == b)));
        }
    printf("orthonormal: P^T P within %.3g of I\n", worst);
    CHECK(worst < 1e-5, "P^T P is %.3g off the identity", worst);

    for (int i = 0; i < R; i++) p[i * K + 1] = 0.0f, p[i * K + 0] = (float)(i % 3);
    psgd_orthonormalize(p, R, K);
    int zero = 1, finite = 1;
    for (int i = 0; i < R; i++) zero &= p[i * K + 1] == 0.0f;
    for (int i = 0; i < R * K; i++) finite &= isfinite(p[i]);
    CHECK(zero && finite, "a zero column: zero %d, every value finite %d", zero, finite);

    for (int i = 0; i < R * K; i++) p[i] = 1.0f;
    p[3 * K + 2] = NAN;
    psgd_orthonormalize(p, R, K);
    CHECK(isnan(p[0 * K + 2]), "a NaN in a column was hidden: %g", p[0 * K + 2]);
}

/* A matrix of rank 2 at rank 3: one power iteration gives it back. */
static void low_rank_exact(void) {
    enum { R = 40, C = 30, K = 3 };
    float m[R * C], q[C * K], p[R * K], back[C * K], qt[K * C], out[R * C];
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++)
            m[i * C + j] = val((size_t)i, 0, 1) * val(0, (size_t)j, 2) +
                           0.5f * val((size_t)i, 1, 5) * val(1, (size_t)j, 4);
    psgd_init_q(q, C, K, 3, 1, 0);
    psgd_project(m, R, C, q, K, p, 1);
    psgd_orthonormalize(p, R, K);
    psgd_back(m, R, C, p, K, back, 1);
    psgd_transpose(back, C, K, qt);
    psgd_expand(p, qt, R, C, K, NULL, NULL, NULL, out, 1);
    CHECK_CLOSE(out, m, R * C, 1e-5, "rank 2 at rank 3");
}

/* Two nodes: M1 + M2 = step + dropped1 + dropped2. */
static void feedback(void) {
    enum { R = 33, C = 41, K = 2 };
    float m1[R * C], m2[R * C], sum[R * C], q[C * K], p[R * K], p1[R * K], q1[C * K], q2[C * K];
    float qs[C * K], qt[K * C], lt[K * C], d1[R * C], d2[R * C], out[R * C], want[R * C];
    fill(m1, R, C, 1), fill(m2, R, C, 9);
    for (int i = 0; i < R * C; i++) sum[i] = m1[i] + m2[i];
    psgd_init_q(q, C, K, 5, 2, 1);
    psgd_project(m1, R, C, q, K, p1, 1);
    psgd_project(m2, R, C, q, K, p, 1);
    for (int i = 0; i < R * K; i++) p[i] += p1[i]; /* the ring's sum */
    psgd_orthonormalize(p, R, K);
    psgd_back(m1, R, C, p, K, q1, 1);
    psgd_back(m2, R, C, p, K, q2, 1);
    for (int i = 0; i < C * K; i++) qs[i] = q1[i] + q2[i];
    psgd_transpose(qs, C, K, qt);
    psgd_transpose(q1, C, K, lt);
    psgd_expand(p, qt, R, C, K, m1, lt, d1, out, 1);
    psgd_transpose(q2, C, K, lt);
    psgd_expand(p, qt, R, C, K, m2, lt, d2, m2, 1); /* in place, as the path does it */
    for (int i = 0; i < R * C; i++) want[i] = out[i] + d1[i] + d2[i];
    CHECK_CLOSE(want, sum, R * C, 1e-5, "step + dropped parts against the sum");
    CHECK(memcmp(m2, out, sizeof out) == 0, "the step in place differs from the step");
    double lost = 0;
    for (int i = 0; i < R * C; i++) lost = fmax(lost, fabs(sum[i] - out[i]));
    CHECK(lost > 1e-2, "rank 2 of a full matrix lost nothing (%.3g): the test is too easy", lost);
}

/* Gradients near FLT_MAX: node 1's column 0 holds 3.3e38 and -3e38, and Q keeps P off that
 * column (its row 0 is 0), so P Q'^T, the step, is finite (column 0 about -5.6e37 and
 * -1.2e38), while node 1's 3.3e38 - P q_1^T overflows in float: the dropped part must stay
 * finite, FLT_MAX where the exact value is beyond it, for a residual of inf would make every
 * later step non-finite. Every other element keeps the bits of the float expression m - p lt. */
static void feedback_near_max(void) {
    enum { R = 2, C = 5, K = 1 };
    const float m1[R * C] = {3.3e38f, 0.6f, 0.6f, 0.3f, -0.1f, -3e38f, 0.8f, 0.8f, 0.4f, 0.2f};
    const float q[C * K] = {0.0f, 1.0f, 1.0f, 0.0f, 0.0f};
    float m2[R * C], p[R * K], p1[R * K], q1[C * K], q2[C * K], qs[C * K], qt[K * C];
    float lt[K * C], d1[R * C], d2[R * C], out[R * C];
    fill(m2, R, C, 4);
    psgd_project(m1, R, C, q, K, p1, 1);
    psgd_project(m2, R, C, q, K, p, 1);
    for (int i = 0; i < R * K; i++) p[i] += p1[i];
    psgd_orthonormalize(p, R, K);
    psgd_back(m1, R, C, p, K, q1, 1);
    psgd_back(m2, R, C, p, K, q2, 1);
    for (int i = 0; i < C * K; i++) qs[i] = q1[i] + q2[i];
    psgd_transpose(qs, C, K, qt);
    psgd_transpose(q1, C, K, lt);
    psgd_expand(p, qt, R, C, K, m1, lt, d1, out, 2);
    psgd_transpose(q2, C, K, lt);
    psgd_expand(p, qt, R, C, K, m2, lt, d2, m2, 1);
    int step_finite = 1, finite = 1, same = 1, over = 0;
    psgd_transpose(q1, C, K, lt);
    for (int i = 0; i < R * C; i++) {
        step_finite &= isfinite(out[i]) && isfinite(m2[i]);
        finite &= isfinite(d1[i]) && isfinite(d2[i]);
        float f = 0.0f; /* the float expression, as before the overflow check */
        for (int k = 0; k < K; k++) f += p[i / C * K + k] * lt[k * C + i % C];
        f = m1[i] - f;
        if (!isfinite(f)) {
            over++;
            double exact = m1[i];
            for (int k = 0; k < K; k++) exact -= (double)p[i / C * K + k] * lt[k * C + i % C];
            CHECK(exact > FLT_MAX && d1[i] == FLT_MAX, "element %d: %g beyond float, kept as %g", i,
                  exact, d1[i]);
        } else {
            same &= memcmp(&f, &d1[i], sizeof f) == 0;
        }
    }
    printf("near FLT_MAX: P (%g, %g), step column 0 (%g, %g), node 1's dropped (%g, %g)\n", p[0],
           p[1], out[0], out[C], d1[0], d1[C]);
    CHECK(over == 1, "%d elements overflowed in float, expected 1: the test lost its point", over);
    CHECK(step_finite, "the step is not finite: the test lost its point");
    CHECK(finite, "a dropped part is not finite (node 1's %g, %g)", d1[0], d1[C]);
    CHECK(same, "an element that did not overflow lost the bits of m - p lt");
}

static void start_and_rule(void) {
    float a[64], b[64], c[64];
    psgd_init_q(a, 16, 4, 11, 3, 2);
    psgd_init_q(b, 16, 4, 11, 3, 2);
    psgd_init_q(c, 16, 4, 11, 4, 2);
    int in_range = 1;
    for (int i = 0; i < 64; i++) in_range &= a[i] >= -1.0f && a[i] < 1.0f;
    CHECK(memcmp(a, b, sizeof a) == 0, "Q's start differs for one (seed, epoch, matrix)");
    CHECK(memcmp(a, c, sizeof a) != 0, "Q's start is the same in another view");
    CHECK(in_range, "Q's start outside [-1, 1)");
    static const struct {
        size_t rows, cols;
        int r, worth;
    } rule[] = {{784, 512, 4, 1},  {512, 10, 4, 1}, {6, 25, 4, 0},
                {16, 16, 4, 1},    {15, 16, 4, 0},  {100, 100, 25, 1},
                {100, 100, 26, 0}, {1, 1000, 1, 0}, {1000, 1, 1, 0}};
    for (size_t i = 0; i < sizeof rule / sizeof rule[0]; i++)
        CHECK(psgd_worth(rule[i].rows, rule[i].cols, rule[i].r) == rule[i].worth,
              "psgd_worth(%zu, %zu, %d) is not %d", rule[i].rows, rule[i].cols, rule[i].r,
              rule[i].worth);
}

/* The products split over threads give the bits of one thread: each thread's outputs whole
 * and in the serial order (a part boundary that skips a row fails here: the outputs start as
 * NaNs, so that one left unwritten shows). The matrix is big enough for every
 * product to take 16 parts and more; 64 asks for more parts than a product makes. */
static void threads_same_bits(int K) {
    enum { R = 1000, C = 1300, KM = 4 };
    static float m[R * C], m2[R * C], d1[R * C], d2[R * C], o1[R * C];
    static float q[C * KM], p1[R * KM], p2[R * KM], b1[C * KM], b2[C * KM], qt[KM * C];
    static const int counts[] = {2, 3, 5, 16, 64};
    fill(m, R, C, 3);
    psgd_init_q(q, C, K, 9, 1, 0);
    psgd_project(m, R, C, q, K, p1, 1);
    psgd_orthonormalize(p1, R, K);
    psgd_back(m, R, C, p1, K, b1, 1);
    psgd_transpose(b1, C, K, qt);
    psgd_expand(p1, qt, R, C, K, m, qt, d1, o1, 1);
    for (size_t t = 0; t < sizeof counts / sizeof counts[0]; t++) {
        const int nt = counts[t];
        memset(p2, 0xff, sizeof p2), memset(b2, 0xff, sizeof b2), memset(d2, 0xff, sizeof d2);
        psgd_project(m, R, C, q, K, p2, nt);
        psgd_orthonormalize(p2, R, K);
        CHECK(memcmp(p1, p2, sizeof *p1 * R * (size_t)K) == 0,
              "rank %d: project on %d threads differs from one thread", K, nt);
        psgd_back(m, R, C, p1, K, b2, nt);
        CHECK(memcmp(b1, b2, sizeof *b1 * C * (size_t)K) == 0,
              "rank %d: back on %d threads differs from one thread", K, nt);
        memcpy(m2, m, sizeof m);
        psgd_expand(p1, qt, R, C, K, m2, qt, d2, m2, nt); /* in place, as the path does it */
        CHECK(memcmp(o1, m2, sizeof o1) == 0 && memcmp(d1, d2, sizeof d1) == 0,
              "rank %d: expand on %d threads differs from one thread", K, nt);
    }
}

/* The kernels' times on the demo MLP's first matrix, on one thread and on two (printed only). */
static void timing(int threads) {
    enum { R = 512, C = 784, K = 4 };
    float *m = malloc(sizeof *m * R * C), *d = malloc(sizeof *d * R * C);
    float q[C * K], p[R * K], back[C * K], qt[K * C];
    if (!m || !d) return;
    fill(m, R, C, 2);
    psgd_init_q(q, C, K, 1, 1, 0);
    double t[4] = {0};
    for (int rep = 0; rep < 5; rep++) {
        double t0 = now_s();
        psgd_project(m, R, C, q, K, p, threads);
        double t1 = now_s();
        psgd_orthonormalize(p, R, K);
        psgd_back(m, R, C, p, K, back, threads);
        double t2 = now_s();
        psgd_transpose(back, C, K, qt);
        psgd_expand(p, qt, R, C, K, m, qt, d, m, threads);
        double t3 = now_s();
        t[0] += t1 - t0, t[1] += t2 - t1, t[2] += t3 - t2;
    }
    printf("timing (512 x 784, rank 4, mean of 5, %d thread(s)): project %.2f ms, "
           "orthonormalize + back %.2f ms, expand with feedback %.2f ms\n",
           threads, t[0] / 5e-3, t[1] / 5e-3, t[2] / 5e-3);
    free(m), free(d);
}

int main(void) {
    for (int k = 1; k <= 8; k++)
        if (k <= 4 || k == 8) products(k);
    orthonormal();
    low_rank_exact();
    feedback();
    feedback_near_max();
    start_and_rule();
    threads_same_bits(4);
    threads_same_bits(3);
    timing(1);
    timing(2);
    return check_exit();
}
