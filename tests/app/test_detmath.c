/*
 * test_detmath.c: base/hr_detmath, the log, cos(pi f) and integer powers every node must compute
 * to the same bits (the controller's jump test, the learning-rate schedule, synthetic normals):
 *   accuracy  against long double references (logl, cosl, powl) over a spread of arguments: log
 *             within 4 ulp, cospi within 3e-16, powi within |n| ulp and exact where every
 *             partial product is
 *   special   log of 0, 1, negative, inf, NaN; cospi exactly 1, 0, -1 at 0, 1/2, 1 (a cosine
 *             schedule ends at a learning rate of exactly 0), even and of period 2
 *   bits      a table of arguments and the exact bits they give: the bits are the contract (every
 *             node of a mixed cluster computes these with its own CPU and must agree), so a change
 *             of the code or of its compile flags that moves one bit fails here
 */
#include "base/hr_detmath.h"
#include "tests/check.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static uint64_t bits(double x) {
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* |got - ref| in units of the last place of the double nearest ref */
static double ulps(double got, long double ref) {
    double r = (double)ref;
    double ulp = nextafter(fabs(r), INFINITY) - fabs(r);
    return (double)(fabsl((long double)got - ref) / (long double)ulp);
}

static void test_log(void) {
    double worst = 0, at = 0;
    /* 200,000 arguments from 1e-310 (subnormal) to 1e308, and a dense band around 1 */
    for (int i = 0; i < 200000; i++) {
        double x = pow(10.0, -310.0 + 618.0 * (double)i / 200000.0) * (1.0 + 1e-7 * (i % 97));
        double e = ulps(hr_det_log(x), logl((long double)x));
        if (x != 1.0 && e > worst) worst = e, at = x;
    }
    for (int i = -50000; i <= 50000; i++) {
        double x = 1.0 + (double)i * 1e-9;
        if (x == 1.0) continue;
        double e = ulps(hr_det_log(x), logl((long double)x));
        if (e > worst) worst = e, at = x;
    }
    printf("log: worst %.2f ulp at %.17g\n", worst, at);
    CHECK(worst <= 4.0, "log: %.2f ulp at %.17g (bound 4)", worst, at);
    CHECK(hr_det_log(1.0) == 0.0, "log(1) = %a", hr_det_log(1.0));
    CHECK(hr_det_log(0.0) == -INFINITY, "log(0) = %a", hr_det_log(0.0));
    CHECK(isnan(hr_det_log(-1.0)), "log(-1) = %a", hr_det_log(-1.0));
    CHECK(isnan(hr_det_log(NAN)), "log(NaN) = %a", hr_det_log(NAN));
    CHECK(hr_det_log(INFINITY) == INFINITY, "log(inf) = %a", hr_det_log(INFINITY));
    CHECK(hr_det_log(DBL_TRUE_MIN) < -744.0 && hr_det_log(DBL_TRUE_MIN) > -745.0,
          "log(smallest subnormal) = %.17g", hr_det_log(DBL_TRUE_MIN));
}

static void test_cospi(void) {
    const long double pi = 3.141592653589793238462643383279502884L;
    double worst = 0, at = 0;
    for (int i = -300000; i <= 300000; i++) {
        double f = (double)i / 100000.0 + 1e-9 * (i % 13);
        double d = fabs(hr_det_cospi(f) - (double)cosl(pi * (long double)f));
        if (d > worst) worst = d, at = f;
    }
    printf("cospi: worst %.3g at %.17g\n", worst, at);
    CHECK(worst <= 3e-16, "cospi: %.3g at %.17g (bound 3e-16)", worst, at);
    CHECK(hr_det_cospi(0.0) == 1.0, "cospi(0) = %a", hr_det_cospi(0.0));
    CHECK(hr_det_cospi(0.5) == 0.0, "cospi(1/2) = %a", hr_det_cospi(0.5));
    CHECK(hr_det_cospi(1.0) == -1.0, "cospi(1) = %a", hr_det_cospi(1.0));
    CHECK(hr_det_cospi(2.0) == 1.0, "cospi(2) = %a", hr_det_cospi(2.0));
    CHECK(fabs(hr_det_cospi(1.0 / 3.0) - 0.5) < 2e-16, "cospi(1/3) = %.17g",
          hr_det_cospi(1.0 / 3.0));
    for (int i = 0; i < 1000; i++) {
        double f = (double)i / 256.0; /* f + 4 exact */
        CHECK(bits(hr_det_cospi(f)) == bits(hr_det_cospi(-f)), "cospi not even at %g", f);
        CHECK(bits(hr_det_cospi(f)) == bits(hr_det_cospi(f + 4.0)), "cospi period at %g", f);
    }
    CHECK(isnan(hr_det_cospi(INFINITY)) && isnan(hr_det_cospi(NAN)), "cospi(inf), cospi(NaN)");
}

static void test_powi(void) {
    CHECK(hr_det_powi(0.5, 10) == 0x1p-10, "0.5^10 = %a", hr_det_powi(0.5, 10));
    CHECK(hr_det_powi(2.0, -3) == 0.125, "2^-3 = %a", hr_det_powi(2.0, -3));
    CHECK(hr_det_powi(7.0, 0) == 1.0 && hr_det_powi(0.0, 0) == 1.0, "x^0");
    CHECK(hr_det_powi(0.0, 3) == 0.0, "0^3");
    double p3 = 1.0; /* 3^33 < 2^53: every partial product exact */
    for (int k = 0; k <= 33; k++, p3 *= 3.0)
        CHECK(hr_det_powi(3.0, k) == p3, "3^%d = %.17g, expected %.17g", k, hr_det_powi(3.0, k),
              p3);
    double worst = 0; /* relative to the bound |n| ulp */
    for (int k = 1; k <= 60; k++) {
        double e = ulps(hr_det_powi(0.1, k), powl((long double)0.1, k));
        CHECK(e <= k, "0.1^%d: %.2f ulp (bound %d)", k, e, k);
        if (e / k > worst) worst = e / k;
    }
    printf("powi(0.1, 1..60): worst %.2f ulp per unit of n\n", worst);
}

/* The contract: these arguments give these bits on every CPU. */
static void test_bits(void) {
    static const struct {
        int fn; /* 0 log, 1 cospi, 2 powi */
        double x;
        long n;
        uint64_t want;
    } t[] = {
#include "detmath_bits.inc"
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        double y = t[i].fn == 0   ? hr_det_log(t[i].x)
                   : t[i].fn == 1 ? hr_det_cospi(t[i].x)
                                  : hr_det_powi(t[i].x, t[i].n);
        CHECK(bits(y) == t[i].want, "%s(%a%s): bits %016llx, expected %016llx",
              t[i].fn == 0   ? "log"
              : t[i].fn == 1 ? "cospi"
                             : "powi",
              t[i].x, t[i].fn == 2 ? ", n" : "", (unsigned long long)bits(y),
              (unsigned long long)t[i].want);
    }
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "--print-bits") == 0) { /* regenerates detmath_bits.inc */
        static const double lx[] = {0.3, 1.0000001, 2.5, 1e-300, 12345.678, 0.999};
        static const double cx[] = {0.1, 0.3, 0.49, 0.77, 1.3, 0.123456789};
        static const double px[] = {0.1, 0.95, 1.0001};
        static const long pn[] = {7, 100, 12345};
        for (int i = 0; i < 6; i++)
            printf("{0, %a, 0, 0x%016llxULL},\n", lx[i],
                   (unsigned long long)bits(hr_det_log(lx[i])));
        for (int i = 0; i < 6; i++)
            printf("{1, %a, 0, 0x%016llxULL},\n", cx[i],
                   (unsigned long long)bits(hr_det_cospi(cx[i])));
        for (int i = 0; i < 3; i++)
            printf("{2, %a, %ld, 0x%016llxULL},\n", px[i], pn[i],
                   (unsigned long long)bits(hr_det_powi(px[i], pn[i])));
        return 0;
    }
    test_log();
    test_cospi();
    test_powi();
    test_bits();
    return check_exit();
}
