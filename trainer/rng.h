/*
 * rng.h: the counter-based random numbers behind every seeded thing in trainer/.
 *
 * Everything random (synthetic samples, per-epoch permutations, initial weights) is a pure
 * function of (seed, stream, index), so two runs with one seed are bitwise identical and any
 * sample can be regenerated on its own. splitmix64 is the mixer; it is not cryptographic.
 */
#ifndef HR_RNG_H
#define HR_RNG_H

#include "base/hr_detmath.h"

#include <math.h>
#include <stdint.h>

typedef struct {
    uint64_t s; /* splitmix64 state */
} rng;

static inline uint64_t rng_mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* A generator for (seed, stream, index): independent streams from one seed. */
static inline void rng_init(rng *r, uint64_t seed, uint64_t stream, uint64_t index) {
    r->s = rng_mix(rng_mix(seed ^ 0x9e3779b97f4a7c15ULL) + rng_mix(stream * 0xd1b54a32d192ed03ULL) +
                   index * 0x9e3779b97f4a7c15ULL);
}

static inline uint64_t rng_next(rng *r) {
    r->s += 0x9e3779b97f4a7c15ULL;
    return rng_mix(r->s);
}

/* Uniform in [0, 1), 24 bits, exactly representable as float. */
static inline float rng_uniform(rng *r) {
    return (float)(rng_next(r) >> 40) * (1.0f / 16777216.0f);
}

/* Uniform integer in [0, n), n > 0 (multiply-shift, bias below 2^-32 for n < 2^32). */
static inline uint64_t rng_below(rng *r, uint64_t n) {
    return (uint64_t)(((unsigned __int128)rng_next(r) * n) >> 64);
}

/* Standard normal (Box-Muller, one value per call; the same bits on every CPU, not fast). */
static inline double rng_normal(rng *r) {
    double u1 = ((double)(rng_next(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    double u2 = (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
    return sqrt(-2.0 * hr_det_log(u1)) * hr_det_cospi(2.0 * u2);
}

#endif
