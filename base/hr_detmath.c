/*
 * hr_detmath.c: log, cos(pi f) and integer powers with the same bits on every CPU (see the
 * header). Built with -ffp-contract=off (base/CMakeLists.txt): a fused multiply-add where one
 * CPU has it and not another would change the last bit. The coefficients are the nearest doubles
 * to the exact series terms (1/(2k+1), ±1/n!), written in hexadecimal so that no compiler's
 * decimal conversion enters.
 */
#include "base/hr_detmath.h"

#include <math.h>

/* log(m) = 2 atanh(s) = 2 (s + s^3/3 + s^5/5 + ...), s = (m - 1) / (m + 1), |s| <= 0.1716 for
 * m in [sqrt(1/2), sqrt(2)): the 14 terms reach s^27, below 2^-60 of the sum. */
static const double atanh_c[] = {
    0x1.0000000000000p+0, 0x1.5555555555555p-2, 0x1.999999999999ap-3, 0x1.2492492492492p-3,
    0x1.c71c71c71c71cp-4, 0x1.745d1745d1746p-4, 0x1.3b13b13b13b14p-4, 0x1.1111111111111p-4,
    0x1.e1e1e1e1e1e1ep-5, 0x1.af286bca1af28p-5, 0x1.8618618618618p-5, 0x1.642c8590b2164p-5,
    0x1.47ae147ae147bp-5, 0x1.2f684bda12f68p-5,
};
/* ln 2 split so that e * LN2_HI is exact for every binary exponent e of a double */
#define LN2_HI    0x1.62e42fee00000p-1
#define LN2_LO    0x1.a39ef35793c76p-33
#define SQRT_HALF 0x1.6a09e667f3bcdp-1

double hr_det_log(double x) {
    if (isnan(x) || x < 0) return NAN;
    if (x == 0) return -INFINITY;
    if (isinf(x)) return x;
    int e;
    double m = frexp(x, &e); /* x = m 2^e, m in [1/2, 1), exact */
    if (m < SQRT_HALF) m *= 2.0, e -= 1;
    double f = m - 1.0; /* exact: m is within a factor 2 of 1 */
    double s = f / (2.0 + f);
    double s2 = s * s;
    int n = (int)(sizeof atanh_c / sizeof atanh_c[0]);
    double p = atanh_c[n - 1];
    for (int k = n - 2; k >= 0; k--) p = p * s2 + atanh_c[k];
    double lm = 2.0 * s * p;
    return (double)e * LN2_HI + ((double)e * LN2_LO + lm);
}

/* cos x and sin x for |x| <= pi/4 by their Taylor series to x^20 and x^21 (the next terms are
 * below 2^-66). */
static const double cos_c[] = {
    0x1.0000000000000p+0,  -0x1.0000000000000p-1,  0x1.5555555555555p-5,  -0x1.6c16c16c16c17p-10,
    0x1.a01a01a01a01ap-16, -0x1.27e4fb7789f5cp-22, 0x1.1eed8eff8d898p-29, -0x1.93974a8c07c9dp-37,
    0x1.ae7f3e733b81fp-45, -0x1.6827863b97d97p-53, 0x1.e542ba4020225p-62,
};
static const double sin_c[] = {
    0x1.0000000000000p+0,  -0x1.5555555555555p-3,  0x1.1111111111111p-7,  -0x1.a01a01a01a01ap-13,
    0x1.71de3a556c734p-19, -0x1.ae64567f544e4p-26, 0x1.6124613a86d09p-33, -0x1.ae7f3e733b81fp-41,
    0x1.952c77030ad4ap-49, -0x1.2f49b46814157p-57, 0x1.71b8ef6dcf572p-66,
};
#define PI_HI 0x1.921fb54442d18p+1
#define PI_LO 0x1.1a62633145c07p-53

static double series(const double *c, int n, double x2) {
    double p = c[n - 1];
    for (int k = n - 2; k >= 0; k--) p = p * x2 + c[k];
    return p;
}

double hr_det_cospi(double f) {
    if (!isfinite(f)) return NAN;
    f = fmod(fabs(f), 2.0);   /* cos is even and of period 2 in f; fmod is exact */
    if (f > 1.0) f = 2.0 - f; /* exact (Sterbenz), as are the two below */
    double sign = 1.0;
    if (f > 0.5) f = 1.0 - f, sign = -1.0;
    int use_sin = f > 0.25; /* cos(pi f) = sin(pi (1/2 - f)) */
    if (use_sin) f = 0.5 - f;
    double x = f * PI_HI + f * PI_LO; /* |x| <= pi/4 */
    double x2 = x * x;
    double v = use_sin ? x * series(sin_c, (int)(sizeof sin_c / sizeof sin_c[0]), x2)
                       : series(cos_c, (int)(sizeof cos_c / sizeof cos_c[0]), x2);
    return sign * v;
}

double hr_det_powi(double x, long n) {
    unsigned long k = n < 0 ? 0UL - (unsigned long)n : (unsigned long)n;
    double r = 1.0, b = x;
    for (; k; k >>= 1) {
        if (k & 1) r *= b;
        if (k > 1) b *= b;
    }
    return n < 0 ? 1.0 / r : r;
}
