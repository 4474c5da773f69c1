/*
 * test_check.c: the assertion helper itself. CHECK_CLOSE must flag a NaN (on either side, at any
 * position), an infinity, and a difference just over the tolerance, and must accept a difference
 * at or under it. Each expected failure is counted and taken back, so the helper's own messages
 * for them appear in the log between "expect a failure" lines.
 */
#include "tests/check.h"

#include <math.h>

/* Run CHECK_CLOSE on (a, b) and report whether it counted a failure; the count is restored. */
static int flags(const float *a, const float *b, long n, double tol, const char *what) {
    int before = check_failures_;
    printf("-- %s: expect a failure:\n", what);
    fflush(stdout);
    CHECK_CLOSE(a, b, n, tol, what);
    int flagged = check_failures_ - before;
    check_failures_ = before;
    return flagged == 1;
}

int main(void) {
    const float ref[3] = {1, 2, 3};
    const float nan_mid[3] = {1, NAN, 3}, nan_first[3] = {NAN, 2, 3}, nan_last[3] = {1, 2, NAN};
    const float inf_mid[3] = {1, INFINITY, 3}, both_inf[3] = {1, 2, INFINITY};
    const float over[3] = {1, 2.001f, 3};
    CHECK(flags(nan_mid, ref, 3, 1e-6, "{1,NaN,3} vs {1,2,3}"), "a NaN in the middle passed");
    CHECK(flags(ref, nan_mid, 3, 1e-6, "{1,2,3} vs {1,NaN,3}"), "a NaN on the right passed");
    CHECK(flags(nan_first, ref, 3, 1e-6, "{NaN,2,3} vs {1,2,3}"), "a NaN first passed");
    CHECK(flags(nan_last, ref, 3, 1e-6, "{1,2,NaN} vs {1,2,3}"), "a NaN last passed");
    CHECK(flags(nan_mid, nan_mid, 3, 1e-6, "NaN vs NaN"), "NaN against NaN passed");
    CHECK(flags(inf_mid, ref, 3, 1e-6, "{1,Inf,3} vs {1,2,3}"), "an infinity passed");
    CHECK(flags(both_inf, both_inf, 3, 0.0, "Inf vs Inf"), "Inf against Inf passed");
    CHECK(flags(over, ref, 3, 1e-4, "diff 1e-3 over tol 1e-4"), "an over-tolerance diff passed");
    CHECK(flags(ref, ref, 3, NAN, "tol NaN"), "a NaN tolerance accepted");
    /* accepted: equal arrays at tolerance 0, a difference under the tolerance, empty arrays */
    int before = check_failures_;
    CHECK_CLOSE(ref, ref, 3, 0.0, "equal arrays, tol 0");
    CHECK_CLOSE(over, ref, 3, 1e-2, "diff 1e-3 under tol 1e-2");
    CHECK_CLOSE(ref, nan_mid, 0, 0.0, "empty arrays");
    CHECK(check_failures_ == before, "CHECK_CLOSE refused arrays within tolerance");
    /* CHECK itself counts a false condition and only that */
    before = check_failures_;
    CHECK(1 + 1 == 2, "a true condition counted as a failure");
    int ok = check_failures_ == before;
    printf("-- a false CHECK: expect a failure:\n");
    fflush(stdout);
    CHECK(0, "deliberately false");
    ok &= check_failures_ == before + 1;
    check_failures_ = before;
    CHECK(ok, "CHECK did not count exactly the false condition");
    if (!check_failures_) printf("check.h: every expected failure was flagged\n");
    return check_exit();
}
