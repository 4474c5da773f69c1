/*
 * powersgd.c: the low-rank path's arithmetic (powersgd.h). Built with -ffp-contract=off and
 * no BLAS: every sum runs in the order written here, on every machine. The products take the
 * common ranks (1, 2, 4, 8) as constants, which lets the compiler turn the loop over k into one
 * vector operation per element of M: the same sums in the same order, about twice as fast
 * (app.powersgd checks the bits at each and prints the times).
 */
#include "cluster/powersgd.h"

#include "trainer/rng.h"

#include <math.h>

#define PSGD_GONE 1e-4 /* a column left with at most this share of its norm is dropped */
#include <string.h>

int psgd_worth(size_t rows, size_t cols, int r) {
    if (r < 1 || rows < 2 || cols < 2) return 0;
    return (double)rows * (double)cols >= PSGD_MIN_FACTOR * (double)(rows + cols) * r;
}

void psgd_init_q(float *q, size_t cols, int r, uint64_t seed, uint64_t epoch, int index) {
    rng g;
    rng_init(&g, seed ^ 0x5053474451ULL, epoch, (uint64_t)index);
    for (size_t i = 0; i < cols * (size_t)r; i++) q[i] = 2.0f * rng_uniform(&g) - 1.0f;
}

/* The rank as a constant where it is a common one, so that the loop over k unrolls into one
 * vector operation: the same sums, in the same order, as with r only known at run time. */
#define PSGD_BY_RANK(call, r)                                                                      \
    switch (r) {                                                                                   \
    case 1: call(1); break;                                                                        \
    case 2: call(2); break;                                                                        \
    case 4: call(4); break;                                                                        \
    case 8: call(8); break;                                                                        \
    default: call(r); break;                                                                       \
    }

static inline void project_r(const float *m, size_t rows, size_t cols, const float *q, int r,
                             float *p) {
    float acc[PSGD_MAX_RANK];
    for (size_t i = 0; i < rows; i++) {
        const float *mi = m + i * cols;
        for (int k = 0; k < r; k++) acc[k] = 0.0f;
        for (size_t j = 0; j < cols; j++) {
            const float v = mi[j], *qj = q + j * (size_t)r;
            for (int k = 0; k < r; k++) acc[k] += v * qj[k];
        }
        memcpy(p + i * (size_t)r, acc, sizeof *acc * (size_t)r);
    }
}

void psgd_project(const float *m, size_t rows, size_t cols, const float *q, int r, float *p) {
#define PROJECT(R) project_r(m, rows, cols, q, R, p)
    PSGD_BY_RANK(PROJECT, r)
#undef PROJECT
}

static double col_norm(const float *p, size_t rows, int r, int c) {
    double ss = 0;
    for (size_t i = 0; i < rows; i++) {
        const double v = p[i * (size_t)r + c];
        ss += v * v;
    }
    return sqrt(ss);
}

void psgd_orthonormalize(float *p, size_t rows, int r) {
    double was[PSGD_MAX_RANK];
    for (int c = 0; c < r; c++) was[c] = col_norm(p, rows, r, c);
    for (int c = 0; c < r; c++) {
        const double norm = col_norm(p, rows, r, c);
        /* a column the earlier ones took (nearly) all of is rounding noise, which scaled up
         * would point anywhere, the earlier directions too: it becomes zero, as one with no
         * norm; a NaN or inf norm stays in the column, so a step that is not finite still
         * shows as such */
        const int gone = norm == 0 || norm <= PSGD_GONE * was[c];
        const float inv = gone ? 0.0f : (float)(1.0 / norm);
        for (size_t i = 0; i < rows; i++) p[i * (size_t)r + c] *= inv;
        for (int d = c + 1; d < r; d++) { /* modified Gram-Schmidt: the later columns lose c */
            double dot = 0;
            for (size_t i = 0; i < rows; i++)
                dot += (double)p[i * (size_t)r + c] * (double)p[i * (size_t)r + d];
            const float f = (float)dot;
            for (size_t i = 0; i < rows; i++) p[i * (size_t)r + d] -= f * p[i * (size_t)r + c];
        }
    }
}

static inline void back_r(const float *m, size_t rows, size_t cols, const float *p, int r,
                          float *q) {
    memset(q, 0, sizeof *q * cols * (size_t)r);
    for (size_t i = 0; i < rows; i++) {
        const float *mi = m + i * cols, *pi = p + i * (size_t)r;
        for (size_t j = 0; j < cols; j++) {
            const float v = mi[j];
            float *qj = q + j * (size_t)r;
            for (int k = 0; k < r; k++) qj[k] += v * pi[k];
        }
    }
}

void psgd_back(const float *m, size_t rows, size_t cols, const float *p, int r, float *q) {
#define BACK(R) back_r(m, rows, cols, p, R, q)
    PSGD_BY_RANK(BACK, r)
#undef BACK
}

void psgd_transpose(const float *q, size_t cols, int r, float *qt) {
    for (size_t j = 0; j < cols; j++)
        for (int k = 0; k < r; k++) qt[(size_t)k * cols + j] = q[j * (size_t)r + k];
}

/* row (cols) = sum over k of p[k] qt[k] (r x cols), k in order from 0.0f: element j gets
 * ((0 + p0 q0j) + p1 q1j) + ..., the order of a dot product over k, vectorised across j. */
static void row_of(const float *p, const float *qt, size_t cols, int r, float *row) {
    for (size_t j = 0; j < cols; j++) row[j] = 0.0f;
    for (int k = 0; k < r; k++) {
        const float pk = p[k], *qk = qt + (size_t)k * cols;
        for (size_t j = 0; j < cols; j++) row[j] += pk * qk[j];
    }
}

void psgd_expand(const float *p, const float *qt, size_t rows, size_t cols, int r, const float *m,
                 const float *lt, float *dropped, float *out) {
    for (size_t i = 0; i < rows; i++) {
        const float *pi = p + i * (size_t)r;
        if (lt) { /* first, while m's row is whole (out may be m) */
            float *d = dropped + i * cols;
            const float *mi = m + i * cols;
            row_of(pi, lt, cols, r, d);
            for (size_t j = 0; j < cols; j++) d[j] = mi[j] - d[j];
        }
        row_of(pi, qt, cols, r, out + i * cols);
    }
}
