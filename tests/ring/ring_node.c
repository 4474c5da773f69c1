/*
 * ring_node.c: one node of a multi-process ring test, spawned N times by the test scripts.
 *
 *   ring_node CONF ID correct COUNT...  all-reduce (float32, and bf16 up to 4 Mi values),
 *                                       all-gather(v), broadcast and barrier for each
 *                                       COUNT, checked against a serial reference and, for the
 *                                       all-reduce, checked bitwise-identical on every node
 *   ring_node CONF ID loop COUNT        all-reduce COUNT floats until an error ("running" once,
 *                                       after the first, with the tree's collectives so far)
 *   ring_node CONF ID reduce COUNT K    K all-reduces of COUNT floats, each checked
 *   ring_node CONF ID reduce_bf16 COUNT K  the same with ring_allreduce_bf16
 *   ring_node CONF ID probe COUNT       ring_probe_links (alpha >= 0, beta > 0 and finite, the
 *                                       tree's cut as before it), then COUNT floats checked as
 *                                       `correct` does with the cut set to 4 KiB (every node
 *                                       alike), and again with it back at tree_bytes
 *   ring_node CONF ID init              form the ring, one barrier, exit
 *   ring_node CONF ID reform DROP COUNT  leave and rejoin: check COUNT in view epoch 0 (all
 *                                       nodes); the others re-form as epoch 1 without node
 *                                       DROP and check again, while DROP goes straight on to
 *                                       epoch 2; then everyone re-forms as epoch 2 (all nodes)
 *                                       and checks a third time
 *   ring_node CONF ID elastic STOPFILE [REJOIN_S [MIN_NODES]]
 *                                       elastic membership: ring_open, then elect a view and
 *                                       run rounds of all-reduce in it, re-electing after a
 *                                       failure or when a node asks to be admitted, until
 *                                       STOPFILE exists (120 s at most); see elastic_main
 *   ring_node keygen FILE               write an identity key file, print its public key
 *
 * Exit status: 0 success, 1 a wrong result, 2 usage or config error, 3 a ring error (its
 * message, naming the peer, is printed as "node ID: ring error: ...").
 */
#include "base/hr_log.h"
#include "base/hr_time.h"
#include "cluster/ring_setup.h"
#include "conf/cfg.h"
#include "ring/ring.h"
#include "ring/sec.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long g_id;

/* A deterministic float in [-1, 1) for (rank, index). */
static float value(int rank, size_t i) {
    uint64_t x = (uint64_t)i * 0x9E3779B97F4A7C15ull + (uint64_t)(rank + 1) * 0xBF58476D1CE4E5B9ull;
    x ^= x >> 31;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 29;
    return (float)((double)(x >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

static uint64_t fnv(const void *p, size_t n) {
    const uint8_t *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static int ring_fail(ring *r, const char *what) {
    fprintf(stderr, "node %ld: ring error in %s: %s\n", g_id, what, ring_error(r));
    return 3;
}

static int wrong(const char *what, size_t count, const char *detail) {
    fprintf(stderr, "node %ld: WRONG %s (count %zu): %s\n", g_id, what, count, detail);
    return 1;
}

/* Rank k's result of `what` hashes to h: all-gather the hashes and fail unless every rank's is
 * the same (I4). */
static int same_on_every_rank(ring *r, uint64_t h, int n, int k, const char *what, size_t count) {
    uint64_t hs[RING_MAX_NODES];
    if (ring_allgather(r, &h, hs, sizeof h) != HR_OK) return ring_fail(r, "all-gather of hashes");
    for (int q = 0; q < n; q++)
        if (hs[q] != h) {
            char msg[96];
            snprintf(msg, sizeof msg, "rank %d's result differs bitwise from rank %d's (I4)", q, k);
            return wrong(what, count, msg);
        }
    return 0;
}

/* The buffers of a bf16 all-reduce check: the COUNT values and results, this rank's dropped
 * parts (then every rank's, summed) and the bf16 values the wire carried. */
typedef struct {
    float *buf, *dropped;
    uint16_t *wire;
} bf16_bufs;

static void bf16_free(bf16_bufs *b) {
    free(b->buf), free(b->dropped), free(b->wire);
}

/* ring_allreduce_bf16 of COUNT values into b, rank k's value of element i fill(k, i): 0, or
 * what the check returns (2 out of memory, ring_fail's status); b is the caller's to free
 * (bf16_free) either way. */
static int bf16_run(ring *r, size_t count, float (*fill)(int, size_t), const char *what,
                    bf16_bufs *b) {
    const size_t c1 = count ? count : 1;
    const int k = ring_rank(r);
    b->buf = malloc(c1 * sizeof *b->buf), b->dropped = malloc(c1 * sizeof *b->dropped);
    b->wire = malloc(c1 * sizeof *b->wire);
    if (!b->buf || !b->dropped || !b->wire) return 2;
    for (size_t i = 0; i < count; i++) b->buf[i] = fill(k, i), b->dropped[i] = NAN;
    if (ring_allreduce_bf16(r, b->buf, b->wire, b->dropped, count) != HR_OK)
        return ring_fail(r, what);
    return 0;
}

/* ring_allreduce_bf16 of COUNT values, a count that goes round the ring with bf16 on the wire:
 * every rank ends with the same bits (I4), every result is a bf16 value, within n^2 2^-9 of the
 * exact sum, and the exact sum is the result plus every rank's dropped part (error feedback
 * loses nothing). With one node it is exact and drops nothing. */
static int check_bf16(ring *r, size_t count) {
    int n = ring_size(r), k = ring_rank(r);
    char msg[256];
    bf16_bufs b;
    const int rc = bf16_run(r, count, value, "bf16 all-reduce", &b);
    if (rc) return bf16_free(&b), rc;
    float *buf = b.buf, *dropped = b.dropped;
    size_t narrow = 0; /* results that are bf16 values */
    for (size_t i = 0; i < count; i++) {
        uint32_t u;
        memcpy(&u, &buf[i], sizeof u);
        narrow += (u & 0xffffu) == 0;
    }
    const int on_bf16 = n > 1 && narrow == count;
    /* every rank's dropped parts, summed: exact sum = result + that */
    if (ring_allreduce(r, dropped, count) != HR_OK)
        return bf16_free(&b), ring_fail(r, "all-reduce of the dropped");
    double maxd = 0, maxe = 0, bound = (double)n * n / 512;
    for (size_t i = 0; i < count; i++) {
        double ref = 0;
        for (int q = 0; q < n; q++) ref += value(q, i);
        double d = fabs(ref - buf[i]), e = fabs(ref - ((double)buf[i] + dropped[i]));
        if (!(d <= maxd)) maxd = d;
        if (!(e <= maxe)) maxe = e;
    }
    printf("node %ld: bf16 all-reduce count %zu: max abs diff %.3g (bound %.3g), with every "
           "rank's dropped part %.3g, %s\n",
           g_id, count, maxd, bound, maxe, on_bf16 ? "bf16 on the ring" : "float32");
    if (n > 1 && !on_bf16)
        snprintf(msg, sizeof msg, "%zu of %zu results are not bf16 values", count - narrow, count);
    else if (!(maxd <= (on_bf16 ? bound : 1e-5 * n)))
        snprintf(msg, sizeof msg, "max abs diff %.3g over the bound", maxd);
    else if (!(maxe <= 1e-5 * n))
        snprintf(msg, sizeof msg, "result + dropped parts is %.3g off the exact sum", maxe);
    else
        msg[0] = 0;
    const uint64_t h = fnv(buf, count * sizeof *buf);
    bf16_free(&b);
    if (msg[0]) return wrong("bf16 all-reduce", count, msg);
    return same_on_every_rank(r, h, n, k, "bf16 all-reduce", count);
}

/* The float of bits u. */
static float of_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Rank k's value of element i for check_bf16_max, by i mod 4: 0, rank 0 alone holds a finite
 * float that rounds to nearest at or past bf16 inf (bits 0x7f7f8000 to 0x7f7fffff, either
 * sign); 1, ranks 0 and 1 each hold 0x7eff8000, whose sum 0x7f7f8000 is there too (a partial
 * sum saturates on its hop); 2, rank 0 alone holds 0x7f7f7fff, just below; 3, every rank
 * value(k, i). The other ranks hold 0. */
static float near_max(int k, size_t i) {
    const uint32_t sign = (uint32_t)(i / 4 & 1) << 31;
    switch (i % 4) {
    case 0:
        return k == 0 ? of_bits(sign | (0x7f7f8000u + (uint32_t)(i / 4 * 2654435761u) % 0x8000u))
                      : 0;
    case 1:
        return k <= 1 ? of_bits(sign | 0x7eff8000u) : 0;
    case 2:
        return k == 0 ? of_bits(sign | 0x7f7f7fffu) : 0;
    default:
        return value(k, i);
    }
}

/* ring_allreduce_bf16 of COUNT values near FLT_MAX (near_max), on two nodes or more: a finite
 * float never becomes inf on the wire, it saturates at the largest finite bf16 (0x7f7f, with its
 * sign); every result is finite, every rank's dropped part is finite, the result plus every
 * rank's dropped part is the exact sum (bit for bit where only near-max values take part), and
 * every rank ends with the same bits (I4). */
static int check_bf16_max(ring *r, size_t count) {
    int n = ring_size(r), k = ring_rank(r);
    char msg[256] = "";
    bf16_bufs b;
    const int rc = bf16_run(r, count, near_max, "bf16 all-reduce near FLT_MAX", &b);
    if (rc) return bf16_free(&b), rc;
    float *buf = b.buf, *dropped = b.dropped;
    size_t saturated = 0;
    for (size_t i = 0; i < count && !msg[0]; i++) {
        if (!isfinite(buf[i]) || !isfinite(dropped[i]))
            snprintf(msg, sizeof msg,
                     "element %zu: result %g, this rank's dropped part %g (its value %a): "
                     "not finite",
                     i, buf[i], dropped[i], near_max(k, i));
        saturated += fabsf(buf[i]) == of_bits(0x7f7f0000u);
    }
    if (ring_allreduce(r, dropped, count) != HR_OK)
        return bf16_free(&b), ring_fail(r, "all-reduce of the dropped");
    double maxe = 0;
    for (size_t i = 0; i < count && !msg[0]; i++) {
        double ref = 0;
        for (int q = 0; q < n; q++) ref += near_max(q, i);
        const double e = fabs(ref - ((double)buf[i] + dropped[i]));
        if (i % 4 == 3 ? !(e <= 1e-5 * n) : e != 0)
            snprintf(msg, sizeof msg,
                     "element %zu: result %a + dropped parts %a is %g off the exact sum %a", i,
                     buf[i], dropped[i], e, ref);
        if (i % 4 == 3 && !(e <= maxe)) maxe = e;
    }
    if (!msg[0])
        printf(
            "node %ld: bf16 all-reduce near FLT_MAX count %zu: %zu results saturated at %g, every "
            "result and dropped part finite, with every rank's dropped part %.3g off\n",
            g_id, count, saturated, (double)of_bits(0x7f7f0000u), maxe);
    const uint64_t h = fnv(buf, count * sizeof *buf);
    bf16_free(&b);
    if (msg[0]) return wrong("bf16 all-reduce near FLT_MAX", count, msg);
    return same_on_every_rank(r, h, n, k, "bf16 all-reduce near FLT_MAX", count);
}

static int check_count(ring *r, size_t count);

/* The link probe, then COUNT floats with the tree's cut lowered to 4 KiB and back (probe mode). */
static int probe_links(ring *r, size_t count) {
    const long cut = ring_tree_cut(r);
    ring_link l;
    const double t0 = hr_now();
    if (ring_probe_links(r, &l) != HR_OK) return ring_fail(r, "link probe");
    printf("node %ld: probe: %.1f us a hop, %.3f ns a byte in %.1f ms; tree cut %ld before, %ld "
           "after\n",
           g_id, 1e6 * l.alpha_s, 1e9 * l.beta_s, 1e3 * (hr_now() - t0), cut, ring_tree_cut(r));
    if (!(l.alpha_s >= 0) || !(l.beta_s > 0) || !isfinite(l.alpha_s) || !isfinite(l.beta_s))
        return wrong("link probe", 0, "alpha or beta out of range");
    if (ring_tree_cut(r) != cut) return wrong("link probe", 0, "the tree's cut not restored");
    ring_set_tree_cut(r, 4096);
    printf("node %ld: cut 4096\n", g_id);
    int rc = check_count(r, count);
    ring_set_tree_cut(r, 1L << 30); /* clamped to tree_bytes */
    if (ring_tree_cut(r) != ring_tree_bytes(r)) return wrong("link probe", 0, "cut not clamped");
    printf("node %ld: cut %ld\n", g_id, ring_tree_cut(r));
    return rc ? rc : check_count(r, count);
}

static int check_count(ring *r, size_t count) {
    int n = ring_size(r), k = ring_rank(r);
    char msg[256];
    /* all-reduce */
    float *buf = malloc((count ? count : 1) * sizeof *buf);
    if (!buf) return 2;
    for (size_t i = 0; i < count; i++) buf[i] = value(k, i);
    uint64_t tree0 = ring_tree_runs(r);
    if (ring_allreduce(r, buf, count) != HR_OK) return free(buf), ring_fail(r, "all-reduce");
    const char *path = ring_tree_runs(r) > tree0 ? "tree" : "ring";
    /* NaN-safe: a NaN difference sticks in maxd and fails the <= test below */
    double maxd = 0;
    size_t worst = 0;
    for (size_t i = 0; i < count; i++) {
        double ref = 0;
        for (int q = 0; q < n; q++) ref += value(q, i);
        double d = fabs(ref - buf[i]);
        if (!isnan(maxd) && !(d <= maxd)) maxd = d, worst = i;
    }
    printf("node %ld: all-reduce count %zu: max abs diff %.3g on the %s\n", g_id, count, maxd,
           path);
    if (!(maxd <= 1e-5 * n)) {
        snprintf(msg, sizeof msg, "max abs diff %.3g at element %zu", maxd, worst);
        return free(buf), wrong("all-reduce", count, msg);
    }
    const uint64_t h = fnv(buf, count * sizeof *buf);
    free(buf);
    const int src = same_on_every_rank(r, h, n, k, "all-reduce", count);
    if (src) return src;
    /* the bf16 all-reduce where it goes round the ring with bf16 on the wire: above the small
     * all-reduce's 8192 floats and beyond the tree (below, it is ring_allreduce, checked above,
     * and ring_test.sh's tree case counts the collectives on the tree), up to 4 Mi values
     * (1000003 runs it on the threaded engine; the big case's 16 Mi would only repeat it at five
     * times the suite's time) */
    int brc = count > 8192 && count <= (1u << 22) && !ring_tree_takes_allreduce(r, count)
                  ? check_bf16(r, count)
                  : 0;
    if (!brc && n > 1 && count > 8192 && count <= (1u << 22) &&
        !ring_tree_takes_allreduce(r, count))
        brc = check_bf16_max(r, count);
    if (brc) return brc;
    /* all-gather, equal sizes (capped so that N copies stay small) */
    size_t m = count < (1u << 20) ? count : (1u << 20);
    float *mine = malloc((m ? m : 1) * sizeof *mine), *all = malloc((m ? m : 1) * n * sizeof *all);
    if (!mine || !all) return 2;
    for (size_t i = 0; i < m; i++) mine[i] = value(k, i);
    if (ring_allgather(r, mine, all, m * sizeof *mine) != HR_OK)
        return free(mine), free(all), ring_fail(r, "all-gather");
    for (int q = 0; q < n; q++)
        for (size_t i = 0; i < m; i++)
            if (all[(size_t)q * m + i] != value(q, i)) {
                snprintf(msg, sizeof msg, "block %d element %zu", q, i);
                return free(mine), free(all), wrong("all-gather", count, msg);
            }
    free(mine);
    free(all);
    /* all-gather, variable sizes in bytes (some zero, none a multiple of 4) */
    size_t sizes[RING_MAX_NODES], tot = 0, off = 0;
    for (int q = 0; q < n; q++) {
        sizes[q] = (q % 3 == 2) ? 0 : ((size_t)q * 131 + count) % 70001;
        tot += sizes[q];
    }
    for (int q = 0; q < k; q++) off += sizes[q];
    uint8_t *vb = malloc(tot + 1);
    if (!vb) return 2;
    for (size_t i = 0; i < sizes[k]; i++) vb[off + i] = (uint8_t)(k * 31 + i * 7);
    /* in place: my part already sits at its offset */
    if (ring_allgatherv(r, vb + off, sizes[k], vb, sizes) != HR_OK)
        return free(vb), ring_fail(r, "all-gatherv");
    off = 0;
    for (int q = 0; q < n; q++) {
        for (size_t i = 0; i < sizes[q]; i++)
            if (vb[off + i] != (uint8_t)(q * 31 + i * 7)) {
                snprintf(msg, sizeof msg, "block %d byte %zu", q, i);
                return free(vb), wrong("all-gatherv", count, msg);
            }
        off += sizes[q];
    }
    free(vb);
    /* broadcast from every root */
    float *bb = malloc((count ? count : 1) * sizeof *bb);
    if (!bb) return 2;
    for (int root = 0; root < n; root++) {
        for (size_t i = 0; i < count; i++) bb[i] = k == root ? value(root + 7, i) : -1.0f;
        if (ring_broadcast(r, bb, count * sizeof *bb, root) != HR_OK)
            return free(bb), ring_fail(r, "broadcast");
        for (size_t i = 0; i < count; i++)
            if (bb[i] != value(root + 7, i)) {
                snprintf(msg, sizeof msg, "root %d element %zu", root, i);
                return free(bb), wrong("broadcast", count, msg);
            }
    }
    free(bb);
    if (ring_barrier(r) != HR_OK) return ring_fail(r, "barrier");
    return 0;
}

/* Re-form as `v` and check that the ring has its epoch and size, then run check_count. */
static int reform_and_check(ring *r, const ring_view *v, size_t count) {
    char err[HR_ERRLEN];
    if (ring_reform(r, v, err, sizeof err) != HR_OK) {
        fprintf(stderr, "node %ld: ring error in re-form to epoch %llu: %s\n", g_id,
                (unsigned long long)v->epoch, err);
        return 3;
    }
    const ring_view *got = ring_get_view(r);
    printf("node %ld: view epoch %llu formed, rank %d of %d\n", g_id,
           (unsigned long long)got->epoch, ring_rank(r), ring_size(r));
    if (got->epoch != v->epoch || ring_size(r) != v->n)
        return wrong("re-form", count, "view epoch or size differs from the one asked for");
    return check_count(r, count);
}

static int leave_and_rejoin(ring *r, const cfg *c, long drop, size_t count) {
    int rc = check_count(r, count);
    if (rc) return rc;
    ring_view without = {.epoch = 1}, all = {.epoch = 2};
    for (int i = 0; i < c->n_nodes; i++) {
        all.ids[all.n++] = c->nodes[i].id;
        if (c->nodes[i].id != drop) without.ids[without.n++] = c->nodes[i].id;
    }
    if (g_id != drop && (rc = reform_and_check(r, &without, count)) != 0) return rc;
    return reform_and_check(r, &all, count);
}

/* ================================================================ elastic mode
 *
 * Round k of a view: every member contributes (id + 1) * (k + 1) + (i % 7) to element i of
 * ELASTIC_COUNT floats (large enough for the reduce-scatter path), plus two flags: "a node asks
 * to be admitted" and "STOPFILE exists". Each result is checked against the sum over the view's
 * members, so a member that took another round number (another donor), or a frame from another
 * view, shows as a wrong sum. The flags are summed too, so every member re-elects or stops at
 * the same round. After an election every member takes the donor's progress, as the trainer
 * takes the donor's state. Lines, for elastic_test.sh:
 *   node ID: view E members A,B,C rank R donor D in_sync S prev P progress K t=REALTIME
 *   node ID: round K view E ok
 *   node ID: failed in view E round K: ERROR t=REALTIME
 *   node ID: admit requested at round K of view E
 *   node ID: elect failed: ERROR t=REALTIME
 *   node ID: ok rounds N (on the stop flag)
 */
#define ELASTIC_COUNT 20000

#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void print_view(const ring_agreement *a, int rank, int64_t progress) {
    char ids[RING_MAX_NODES * 8] = "";
    size_t o = 0;
    for (int i = 0; i < a->view.n; i++)
        o += (size_t)snprintf(ids + o, sizeof ids - o, "%s%ld", i ? "," : "", a->view.ids[i]);
    printf("node %ld: view %llu members %s rank %d donor %d in_sync %d prev %llu progress %lld "
           "t=%.3f\n",
           g_id, (unsigned long long)a->view.epoch, ids, rank, a->donor, a->in_sync,
           (unsigned long long)a->prev_epoch, (long long)progress, hr_unix_s());
}

/* Rounds in the current view until a failure (3), an admit request (0), the stop flag (4) or a
 * wrong sum (1). */
static int elastic_rounds(ring *r, float *buf, ring_lineage *me, long *rounds,
                          const char *stopfile) {
    const ring_view *v = ring_get_view(r);
    double members = 0;
    for (int q = 0; q < v->n; q++) members += (double)(v->ids[q] + 1);
    for (;;) {
        int64_t k = me->progress;
        struct stat sb;
        for (size_t i = 0; i < ELASTIC_COUNT; i++)
            buf[i] = (float)((g_id + 1) * (k + 1) + (int64_t)(i % 7));
        buf[ELASTIC_COUNT] = (float)ring_join_requested(r);
        buf[ELASTIC_COUNT + 1] = (float)(stat(stopfile, &sb) == 0);
        if (ring_allreduce(r, buf, ELASTIC_COUNT + 2) != HR_OK) {
            printf("node %ld: failed in view %llu round %lld: %s t=%.3f\n", g_id,
                   (unsigned long long)v->epoch, (long long)k, ring_error(r), hr_unix_s());
            return 3;
        }
        for (size_t i = 0; i < ELASTIC_COUNT; i++) {
            double want = members * (double)(k + 1) + (double)(v->n * (int)(i % 7));
            if (!(buf[i] == (float)want)) {
                char msg[160];
                snprintf(msg, sizeof msg, "view %llu round %lld element %zu: %g, expected %g",
                         (unsigned long long)v->epoch, (long long)k, i, buf[i], want);
                return wrong("elastic all-reduce", ELASTIC_COUNT, msg);
            }
        }
        me->progress = k + 1; /* applied: the all-reduce completed here */
        (*rounds)++;
        printf("node %ld: round %lld view %llu ok\n", g_id, (long long)k,
               (unsigned long long)v->epoch);
        if (buf[ELASTIC_COUNT + 1] > 0) return 4;
        if (buf[ELASTIC_COUNT] > 0) {
            printf("node %ld: admit requested at round %lld of view %llu\n", g_id, (long long)k,
                   (unsigned long long)v->epoch);
            return 0;
        }
        usleep(10000); /* "compute" */
    }
}

static int elastic_main(const ring_config *rcfg, const char *stopfile) {
    ring *r;
    char err[HR_ERRLEN];
    if (ring_open(&r, rcfg, err, sizeof err) != HR_OK) {
        fprintf(stderr, "node %ld: ring error in open: %s\n", g_id, err);
        ring_free(r);
        return 3;
    }
    float *buf = malloc((ELASTIC_COUNT + 2) * sizeof *buf);
    ring_lineage me = {0, RING_PROGRESS_NONE};
    ring_agreement *a = malloc(sizeof *a);
    long rounds = 0;
    int rc = 2;
    double end = hr_unix_s() + 120;
    while (buf && a && hr_unix_s() < end) {
        if (ring_elect(r, &me, a, err, sizeof err) != HR_OK) {
            printf("node %ld: elect failed: %s t=%.3f\n", g_id, err, hr_unix_s());
            continue;
        }
        /* the agreement's contract: this node's lineage at its rank; the donor is the lowest
         * rank of the highest (epoch, progress); in_sync when all equal the donor's */
        int rank = ring_rank(r), d = 0, sync = 1;
        for (int q = 0; q < a->view.n; q++) {
            const ring_lineage *l = &a->lineage[q], *b = &a->lineage[d];
            if (l->epoch > b->epoch || (l->epoch == b->epoch && l->progress > b->progress)) d = q;
        }
        for (int q = 0; q < a->view.n; q++)
            sync &= a->lineage[q].epoch == a->lineage[d].epoch &&
                    a->lineage[q].progress == a->lineage[d].progress;
        if (rank < 0 || a->lineage[rank].epoch != me.epoch ||
            a->lineage[rank].progress != me.progress || a->donor != d || a->in_sync != sync) {
            char msg[160];
            snprintf(msg, sizeof msg, "view %llu: donor %d (expected %d), in_sync %d (expected %d)",
                     (unsigned long long)a->view.epoch, a->donor, d, a->in_sync, sync);
            rc = wrong("agreement", 0, msg);
            break;
        }
        /* take the donor's state */
        int64_t p = a->lineage[a->donor].progress;
        me.epoch = a->view.epoch;
        me.progress = p < 0 ? 0 : p;
        print_view(a, ring_rank(r), me.progress);
        rc = elastic_rounds(r, buf, &me, &rounds, stopfile);
        if (rc == 1) break;
        if (rc == 4) {
            printf("node %ld: ok rounds %ld\n", g_id, rounds);
            rc = 0;
            break;
        }
        rc = 2;
    }
    free(buf);
    free(a);
    ring_free(r);
    return rc;
}

int main(int argc, char **argv) {
    char log_err[256];
    if (hr_log_init_from_env(log_err, sizeof log_err) != 0) {
        fprintf(stderr, "%s\n", log_err);
        return 2;
    }
    if (argc == 3 && strcmp(argv[1], "keygen") == 0) {
        uint8_t seed[32], pk[32];
        char err[HR_ERRLEN], hex[65];
        if (sodium_init() < 0) return 2;
        randombytes_buf(seed, sizeof seed);
        if (sec_write_key_file(argv[2], seed, "hetring identity secret key (test)", 1, err,
                               sizeof err) != HR_OK) {
            fprintf(stderr, "%s\n", err);
            return 2;
        }
        sec_identity_public(seed, pk);
        sodium_memzero(seed, sizeof seed);
        cfg_hex_encode(pk, 32, hex);
        printf("%s\n", hex);
        return 0;
    }
    if (argc < 4) {
        fprintf(stderr,
                "usage: ring_node CONF ID correct|loop|reduce|init|reform|elastic [ARGS]\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    cfg c;
    char err[HR_ERRLEN];
    if (cfg_load(&c, argv[1], err, sizeof err) != HR_OK) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    g_id = atol(argv[2]);
    int self = cfg_node_index(&c, g_id);
    if (self < 0) {
        fprintf(stderr, "node %ld is not in %s\n", g_id, argv[1]);
        return 2;
    }
    hr_log_set_node((int)g_id);
    ring_config rcfg;
    if (app_ring_config(&c, self, &rcfg, err, sizeof err) != HR_OK) {
        fprintf(stderr, "%s\n", err);
        cfg_free(&c);
        return 2;
    }
    if (strcmp(argv[3], "elastic") == 0 && argc >= 5) {
        rcfg.rejoin_timeout = argc > 5 ? atof(argv[5]) : 30;
        rcfg.min_nodes = argc > 6 ? atoi(argv[6]) : 0;
        int erc = elastic_main(&rcfg, argv[4]);
        ring_config_wipe(&rcfg);
        cfg_free(&c);
        return erc;
    }
    ring *r;
    int rc = 0;
    hr_status st = ring_init(&r, &rcfg, err, sizeof err);
    ring_config_wipe(&rcfg);
    if (st != HR_OK) {
        fprintf(stderr, "node %ld: ring error in init: %s\n", g_id, err);
        rc = 3;
        goto out;
    }
    printf("node %ld: ring formed, rank %d of %d\n", g_id, ring_rank(r), ring_size(r));
    const char *mode = argv[3];
    if (strcmp(mode, "init") == 0) {
        if (ring_barrier(r) != HR_OK) rc = ring_fail(r, "barrier");
    } else if (strcmp(mode, "correct") == 0) {
        for (int i = 4; i < argc && rc == 0; i++) rc = check_count(r, (size_t)atoll(argv[i]));
    } else if (strcmp(mode, "probe") == 0 && argc == 5) {
        rc = probe_links(r, (size_t)atoll(argv[4]));
    } else if (strcmp(mode, "reform") == 0 && argc == 6) {
        rc = leave_and_rejoin(r, &c, atol(argv[4]), (size_t)atoll(argv[5]));
    } else if (strcmp(mode, "loop") == 0 || strcmp(mode, "reduce") == 0 ||
               strcmp(mode, "reduce_bf16") == 0) {
        size_t count = argc > 4 ? (size_t)atoll(argv[4]) : 1 << 20;
        long iters = strcmp(mode, "loop") == 0 ? -1 : (argc > 5 ? atol(argv[5]) : 1);
        /* bf16: values of 8 significant bits, so every partial sum is exact on the wire */
        const int bf16 = strcmp(mode, "reduce_bf16") == 0;
        const size_t period = bf16 ? 64 : 1000;
        float *buf = malloc(count * sizeof *buf);
        uint16_t *wire = bf16 ? malloc(count * sizeof *wire) : NULL;
        if (!buf || (bf16 && !wire)) return 2;
        int n = ring_size(r);
        for (long it = 0; iters < 0 || it < iters; it++) {
            for (size_t i = 0; i < count; i++) buf[i] = (float)((i % period) + ring_rank(r));
            hr_status st = bf16 ? ring_allreduce_bf16(r, buf, wire, NULL, count)
                                : ring_allreduce(r, buf, count);
            if (st != HR_OK) {
                rc = ring_fail(r, "all-reduce");
                break;
            }
            for (size_t i = 0; i < count; i++)
                if (buf[i] != (float)(n * (i % period)) + (float)(n * (n - 1) / 2)) {
                    rc = wrong("all-reduce", count, "wrong sum");
                    break;
                }
            if (rc) break;
            if (it == 0)
                printf("node %ld: running, %llu collective(s) on the tree so far\n", g_id,
                       (unsigned long long)ring_tree_runs(r));
        }
        free(buf);
        free(wire);
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        rc = 2;
    }
    if (rc == 0) printf("node %ld: ok\n", g_id);
    printf("node %ld: %llu collective(s) on the threaded engine\n", g_id,
           (unsigned long long)ring_threaded_runs(r));
    printf("node %ld: %llu collective(s) on the tree\n", g_id,
           (unsigned long long)ring_tree_runs(r));
out:
    ring_free(r);
    cfg_free(&c);
    return rc;
}
