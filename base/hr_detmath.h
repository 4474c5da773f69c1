/*
 * hr_detmath.h: the few transcendental functions whose results every node must agree on bit for
 * bit: the controller's jump test (ctrl/), the learning-rate schedule (trainer/optim.c) and the
 * synthetic data's normal samples (trainer/rng.h).
 *
 * libm gives no such promise: glibc picks an FMA or a plain version of log, pow and cos by the
 * CPU it runs on, other C libraries use other algorithms, and none rounds every result
 * correctly, so two nodes of a mixed cluster may differ in the last bit. A controller that then
 * decides differently, or a learning rate one ulp apart, breaks I4/I5. These are written in
 * fixed-order IEEE double arithmetic (add, multiply, divide, frexp: every one rounded the same
 * on every CPU), compiled with -ffp-contract=off, so they give the same bits everywhere. They
 * are accurate to a few ulp, not correctly rounded: what matters is that every node agrees.
 */
#ifndef HR_DETMATH_H
#define HR_DETMATH_H

/* Natural logarithm: NaN for x < 0 or NaN, -inf for 0, +inf for +inf; within 4 ulp. */
double hr_det_log(double x);

/* cos(pi * f), for any finite f (NaN for inf or NaN); exactly 1, 0 and -1 at f = 0, 0.5 and 1;
 * within 3e-16 of the true value. */
double hr_det_cospi(double f);

/* x to the integer power n (n < 0: 1 / x^-n), by repeated squaring in a fixed order: within |n|
 * ulp, and exact when every partial product is. */
double hr_det_powi(double x, long n);

#endif
