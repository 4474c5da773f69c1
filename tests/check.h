/*
 * check.h: the assertion helper every test uses. A failed CHECK prints where and why and
 * counts; the test's main returns check_exit() so ctest sees the failure.
 */
#ifndef HR_CHECK_TEST_H
#define HR_CHECK_TEST_H
#include <math.h>
#include <stdio.h>
static int check_failures_;
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            check_failures_++;                                                                     \
            fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
        }                                                                                          \
    } while (0)
/* Compare two float arrays; reports the largest absolute and relative difference. NaN-safe: a
 * NaN or infinite difference (NaN against a number, Inf against Inf) makes the largest
 * difference NaN, which no tolerance accepts, and the first such element is named. */
#define CHECK_CLOSE(a, b, n, tol, what)                                                            \
    do {                                                                                           \
        double md_ = 0, mr_ = 0;                                                                   \
        long bad_ = -1;                                                                            \
        for (long i_ = 0; i_ < (long)(n); i_++) {                                                  \
            double d_ = fabs((double)(a)[i_] - (double)(b)[i_]);                                   \
            double r_ = d_ / fmax(1e-12, fmax(fabs((double)(a)[i_]), fabs((double)(b)[i_])));      \
            if (!isfinite(d_)) {                                                                   \
                if (bad_ < 0) bad_ = i_;                                                           \
                md_ = mr_ = NAN;                                                                   \
            }                                                                                      \
            if (d_ > md_) md_ = d_; /* false once md_ is NaN: the NaN sticks */                    \
            if (r_ > mr_) mr_ = r_;                                                                \
        }                                                                                          \
        printf("%s: max abs diff %.3g, max rel diff %.3g\n", what, md_, mr_);                      \
        if (bad_ >= 0)                                                                             \
            fprintf(stderr, "%s: first non-finite difference at index %ld\n", what, bad_);         \
        CHECK(md_ <= (tol), "%s: max abs diff %.3g > tol %.3g", what, md_, (double)(tol));         \
    } while (0)
static inline int check_exit(void) {
    if (check_failures_) fprintf(stderr, "%d check(s) failed\n", check_failures_);
    return check_failures_ ? 1 : 0;
}
#endif
