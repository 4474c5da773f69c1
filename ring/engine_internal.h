/*
 * engine_internal.h: the schedule of a collective's frames and the engines that run it:
 * engine.c (schedules, the single-threaded engine, the header check of a received frame) and
 * engine_mt.c (the threaded engine). coll.c picks the engine, tree.c runs single-frame steps.
 */
#ifndef HR_ENGINE_INTERNAL_H
#define HR_ENGINE_INTERNAL_H

#include "ring/ring_internal.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Collectives receiving more than this run on the threaded engine (where it is on): below it
 * the hand-offs between threads cost about what they save (bench/README.md, "All-reduce"). */
#define RING_MT_BYTES (1 << 20)
/* Most workers the threaded engine runs beside its sender (ring_workers). */
#define MT_WORKERS_MAX 8

/* ---------------------------------------------------------------- schedules (engine.c) */

/* What a received frame does to its place: copy its bytes, add its floats, OR its bytes (the
 * tree's all-gather: blocks are disjoint and zero elsewhere), or add its bf16 values to the
 * float32 accumulator r->bf16_acc and put the rounded sums in its place (eng_add_bf16). */
enum { RX_COPY = 0, RX_ADD = 1, RX_OR = 2, RX_ADD_BF16 = 3 };

/* Per-call schedule of frames (r->sched). */
struct ring_sched {
    size_t *tx_off, *tx_len; /* byte range of the i-th frame sent */
    size_t *tx_need;         /* frames that must have arrived before frame i is sent */
    size_t *rx_off, *rx_len; /* byte range of the i-th frame received */
    uint8_t *rx_add;         /* RX_COPY, RX_ADD, RX_OR or RX_ADD_BF16 (the threaded engine:
                              * no RX_OR) */
    size_t n_tx, n_rx;       /* frames in each direction */
    size_t cap;              /* entries allocated per array */
};

/* Allocate a ring's schedule scratch (r->sched, empty until a collective reserves room) for
 * ring_init and ring_open; sched_free frees it (ring_free) and does nothing where there is none. */
hr_status sched_alloc(ring *r);
void sched_free(ring *r);

/* Blocks of a ring step schedule: byte offset and length of each rank's block. */
typedef struct {
    const size_t *off, *len;
} sched_blocks;

/* Room for `n` frames each way in `s`. */
hr_status sched_reserve(ring_sched *s, size_t n);

/* Segments of at most `seg` bytes that `bytes` bytes are cut into (1 for none). */
static inline size_t sched_nseg(size_t bytes, size_t seg) {
    return bytes <= seg ? 1 : (bytes + seg - 1) / seg;
}

/* Where part i of `e` units cut into `ns` near-equal parts starts: floor(i * e / ns) for
 * i <= ns, without forming i * e, which overflows size_t for a large buffer cut into small
 * segments (a 34 GB state broadcast in 64-byte segments); exact while ns < 2^32. */
static inline size_t sched_cut(size_t i, size_t e, size_t ns) {
    return i * (e / ns) + i * (e % ns) / ns;
}

/* Build the schedule of a sequence of ring steps into r->sched (see engine.c). */
hr_status sched_steps(ring *r, const sched_blocks *b, const int *tx_blk, const int *rx_blk,
                      const uint8_t *add, int steps, size_t esz);

/* ---------------------------------------------------------------- the engine (engine.c) */

/* One collective in progress: where the schedule stands in each direction. */
typedef struct {
    const ring_sched *s; /* the schedule (r->sched) */
    int coll;            /* FRAME_COLL_* of this collective */
    int rx_link;         /* the link frames come from (FROM_PRED but on the tree) */
    uint8_t *base;       /* the caller's buffer the schedule's offsets refer to */
    int secure;          /* frames are sealed (auth or encrypt) */
    size_t tag;          /* bytes of tag per frame: SEC_TAG or 0 */
    size_t ti, ri;       /* next frame to send, next frame to receive */
    txf t;               /* the outgoing frame in flight */
    int tx_ready;        /* t holds frame ti, partly sent */
    int rx_body;         /* 0: reading frame ri's header, 1: its payload and tag */
    size_t rx_len;       /* payload bytes of frame ri on the wire (known once its header is in) */
    size_t rx_got;       /* bytes of the current header or payload read so far */
    size_t rx_want;      /* bytes the current header or payload has */
    int progress;        /* something moved in this round */
} eng;

/* dst[i] += src[i] for the n floats of a frame: the reduction. */
static inline void eng_add_floats(float *restrict dst, const float *restrict src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

/* float32 to bfloat16, rounded to nearest, ties to even (NaN stays NaN, quiet), except that a
 * finite float stays finite: one that would round to inf (bits 0x7f7f8000 and up, about
 * 3.396e38) saturates at the largest finite bf16, 0x7f7f with its sign, so only an inf (or a
 * float32 sum that overflowed) is inf on the wire, and what the rounding drops, f minus that,
 * is finite for the error feedback to carry. Integer arithmetic on the bits, so every machine
 * rounds alike. */
static inline uint16_t eng_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    if (a >= 0x7f7f8000u && a < 0x7f800000u) return (uint16_t)(((u >> 16) & 0x8000u) | 0x7f7fu);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* bfloat16 to float32 (exact). */
static inline float eng_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* A bf16 frame of the reduce-scatter: acc[i] += src[i] in float32, and dst[i], the place the
 * next hop's frame is cut from, becomes acc[i] rounded to bf16. */
static inline void eng_add_bf16(uint16_t *restrict dst, float *restrict acc,
                                const uint16_t *restrict src, size_t n) {
    for (size_t i = 0; i < n; i++) {
        acc[i] += eng_f32(src[i]);
        dst[i] = eng_bf16(acc[i]);
    }
}

/* Check the header of frame e->ri (in rx_stage) against the one expected. */
hr_status eng_header(ring *r, eng *e);

/* Run r->sched on the calling thread with its frames sent on link `tx` and received from link
 * `rx` (FROM_SUCC and FROM_PRED round the ring; a tree link for the tree's single-frame steps). */
hr_status eng_run_links(ring *r, int coll, uint8_t *base, int tx, int rx);

/* ---------------------------------------------------------------- the threaded engine
 * (engine_mt.c) */

/* Start the engine's threads and staging, once (HR_OK when they run already); HR_ERR_NOMEM
 * when memory or a thread could not be had, leaving nothing behind. */
hr_status mt_start(ring *r);
/* Run r->sched over `base` on the engine's threads (mt_start first). */
hr_status mt_run(ring *r, int coll, uint8_t *base);
/* Stop the threaded engine's threads and free its staging (ring_free). */
void mt_free(ring *r);

#endif
