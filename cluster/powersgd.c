/*
 * powersgd.c: the low-rank path's arithmetic (powersgd.h). Built with -ffp-contract=off and
 * no BLAS: every sum runs in the order written here, on every machine. The products take the
 * common ranks (1, 2, 4, 8) as constants, which lets the compiler turn the loop over k into one
 * vector operation per element of M: the same sums in the same order, about twice as fast
 * (app.powersgd checks the bits at each and prints the times). Each product splits over the
 * threads it is given (run_parts): a thread computes whole output elements, each in the
 * serial loop's order, so the bits do not depend on how many (app.powersgd checks 2-64).
 */
#include "cluster/powersgd.h"

#include "trainer/rng.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#define PSGD_GONE 1e-4 /* a column left with at most this share of its norm is dropped */

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

/* One product's arguments, and the rows (or, for back, the columns) [lo, hi) a thread takes. */
typedef struct {
    const float *m, *a, *lt; /* M; Q (project), P (back) or P (expand); expand's lt */
    const float *qt;         /* expand's Q'^T */
    float *out, *dropped;    /* the product; expand's error feedback */
    size_t rows, cols, lo, hi;
    int r;
    void (*part)(const void *job); /* the kernel of [lo, hi) */
} psgd_job;

static void *job_main(void *arg) {
    const psgd_job *j = arg;
    j->part(j);
    return NULL;
}

/* Run job over [0, n) in `threads` contiguous parts (at most one per min_part items), the
 * caller taking the first; a part whose thread cannot start runs here after the first. Every
 * output element is one part's alone and is computed as the serial loop computes it, so the
 * bits do not depend on the number of threads. */
static void run_parts(const psgd_job *job, size_t n, size_t min_part, int threads) {
    size_t most = min_part ? n / min_part : n;
    int nt = threads < 1 ? 1 : threads > PSGD_MAX_THREADS ? PSGD_MAX_THREADS : threads;
    if ((size_t)nt > most) nt = most > 1 ? (int)most : 1;
    psgd_job part[PSGD_MAX_THREADS];
    pthread_t th[PSGD_MAX_THREADS];
    int started[PSGD_MAX_THREADS] = {0};
    for (int k = 0; k < nt; k++) {
        part[k] = *job;
        part[k].lo = n * (size_t)k / (size_t)nt;
        part[k].hi = n * (size_t)(k + 1) / (size_t)nt;
    }
    for (int k = 1; k < nt; k++) started[k] = pthread_create(&th[k], NULL, job_main, &part[k]) == 0;
    job->part(&part[0]);
    for (int k = 1; k < nt; k++) {
        if (started[k])
            pthread_join(th[k], NULL);
        else
            job->part(&part[k]);
    }
}

/* Multiply-adds a thread's part takes at the least: starting a thread costs tens of
 * microseconds, a part about a hundred. */
#define PSGD_PART_MACS (1u << 18)

/* The rows (or columns) of a part: at least PSGD_PART_MACS multiply-adds of `per_item`. */
static size_t min_part(size_t per_item) {
    return per_item >= PSGD_PART_MACS ? 1 : (PSGD_PART_MACS + per_item - 1) / per_item;
}

/* p's rows [lo, hi) of m q. */
static inline void project_r(const float *m, size_t lo, size_t hi, size_t cols, const float *q,
                             int r, float *p) {
    float acc[PSGD_MAX_RANK];
    for (size_t i = lo; i < hi; i++) {
        const float *mi = m + i * cols;
        for (int k = 0; k < r; k++) acc[k] = 0.0f;
        for (size_t j = 0; j < cols; j++) {
            const float v = mi[j], *qj = q + j * (size_t)r;
            for (int k = 0; k < r; k++) acc[k] += v * qj[k];
        }
        memcpy(p + i * (size_t)r, acc, sizeof *acc * (size_t)r);
    }
}

static void project_part(const void *arg) {
    const psgd_job *j = arg;
#define PROJECT(R) project_r(j->m, j->lo, j->hi, j->cols, j->a, R, j->out)
    PSGD_BY_RANK(PROJECT, j->r)
#undef PROJECT
}

void psgd_project(const float *m, size_t rows, size_t cols, const float *q, int r, float *p,
                  int threads) {
    const psgd_job job = {
        .m = m, .a = q, .out = p, .rows = rows, .cols = cols, .r = r, .part = project_part};
    run_parts(&job, rows, min_part(cols * (size_t)r), threads);
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

/* q's rows [lo, hi) (columns of m) of m^T p: each a sum over m's rows in order, the part
 * of the columns it reads from each row. */
static inline void back_r(const float *m, size_t rows, size_t cols, size_t lo, size_t hi,
                          const float *p, int r, float *q) {
    memset(q + lo * (size_t)r, 0, sizeof *q * (hi - lo) * (size_t)r);
    for (size_t i = 0; i < rows; i++) {
        const float *mi = m + i * cols, *pi = p + i * (size_t)r;
        for (size_t j = lo; j < hi; j++) {
            const float v = mi[j];
            float *qj = q + j * (size_t)r;
            for (int k = 0; k < r; k++) qj[k] += v * pi[k];
        }
    }
}

static void back_part(const void *arg) {
    const psgd_job *j = arg;
#define BACK(R) back_r(j->m, j->rows, j->cols, j->lo, j->hi, j->a, R, j->out)
    PSGD_BY_RANK(BACK, j->r)
#undef BACK
}

void psgd_back(const float *m, size_t rows, size_t cols, const float *p, int r, float *q,
               int threads) {
    const psgd_job job = {
        .m = m, .a = p, .out = q, .rows = rows, .cols = cols, .r = r, .part = back_part};
    run_parts(&job, cols, min_part(rows * (size_t)r), threads);
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

/* A dropped row d = mi - pi lt whose float arithmetic overflowed where mi is finite (gradients
 * near FLT_MAX: the difference of two values near it, or a partial sum over k): those elements
 * again in double, kept within [-FLT_MAX, FLT_MAX]. The residual then stays finite, so one
 * such step does not make every later one non-finite; what lies beyond float's range is lost.
 * Elements that did not overflow keep the bits of the float expression. */
static void dropped_in_range(const float *pi, const float *lt, size_t cols, int r, const float *mi,
                             float *d) {
    for (size_t c = 0; c < cols; c++) {
        if (isfinite(d[c]) || !isfinite(mi[c])) continue;
        double v = mi[c];
        for (int k = 0; k < r; k++) v -= (double)pi[k] * (double)lt[(size_t)k * cols + c];
        d[c] = v > FLT_MAX ? FLT_MAX : v < -FLT_MAX ? -FLT_MAX : (float)v; /* NaN stays */
    }
}

static void expand_part(const void *arg) {
    const psgd_job *j = arg;
    const size_t cols = j->cols;
    for (size_t i = j->lo; i < j->hi; i++) {
        const float *pi = j->a + i * (size_t)j->r;
        if (j->lt) { /* first, while m's row is whole (out may be m) */
            float *d = j->dropped + i * cols;
            const float *mi = j->m + i * cols;
            row_of(pi, j->lt, cols, j->r, d);
            int over = 0;
            for (size_t c = 0; c < cols; c++) {
                d[c] = mi[c] - d[c];
                over |= !isfinite(d[c]);
            }
            if (over) dropped_in_range(pi, j->lt, cols, j->r, mi, d);
        }
        row_of(pi, j->qt, cols, j->r, j->out + i * cols);
    }
}

void psgd_expand(const float *p, const float *qt, size_t rows, size_t cols, int r, const float *m,
                 const float *lt, float *dropped, float *out, int threads) {
    const psgd_job job = {.m = m,
                          .a = p,
                          .lt = lt,
                          .qt = qt,
                          .out = out,
                          .dropped = dropped,
                          .rows = rows,
                          .cols = cols,
                          .r = r,
                          .part = expand_part};
    run_parts(&job, rows, min_part(cols * (size_t)r * (lt ? 2 : 1)), threads);
}
