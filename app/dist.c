/*
 * dist.c: the ring communicator, the replicated controller and the agreement checks
 * (see dist.h).
 */
#include "dist.h"
#include "hr_fault.h"
#include "hr_log.h"
#include "trainer_setup.h"
#include "ring_setup.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================ hashing */

uint64_t dist_hash_floats(const float *v, long n) {
    /* word-at-a-time multiply-xor; only agreement matters, not cryptographic strength */
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)n;
    long i = 0;
    for (; i + 1 < n; i += 2) {
        uint64_t w;
        memcpy(&w, v + i, sizeof w);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
        h ^= h >> 29;
    }
    if (i < n) {
        uint32_t w;
        memcpy(&w, v + i, sizeof w);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
    }
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
}

static void put_hash(float *dst, uint64_t h) {
    dst[0] = (float)(h & 0xffffff);
    dst[1] = (float)((h >> 24) & 0xffffff);
}

static int same_hash(const float *a, const float *b) {
    return a[0] == b[0] && a[1] == b[1];
}

/* ================================================================ communicator */

static hr_status ring_allreduce_cb(void *ctx, float *buf, size_t n) {
    dist *d = ctx;
    hr_status st = ring_allreduce(&d->r, buf, n);
    if (st != HR_OK) HR_ERROR(RING, "all-reduce failed: %s", ring_error(&d->r));
    return st;
}

hr_status dist_init(dist *d, const cfg *c, int self, char *err, size_t errlen) {
    memset(d, 0, sizeof *d);
    d->c = c;
    d->self = self;
    d->hash_interval = c->hash_interval;
    d->gathered = calloc((size_t)c->n_nodes, sizeof *d->gathered);
    if (!d->gathered) return hr_fail(err, errlen, HR_ERR_NOMEM, "out of memory");
    ring_config rc;
    hr_status st = app_ring_config(c, self, &rc, err, errlen);
    if (st != HR_OK) return st;
    d->have_ring = 1;
    st = ring_init(&d->r, &rc, err, errlen);
    ring_config_wipe(&rc); /* the ring keeps its own copy of the PSK */
    return st;
}

train_comm dist_comm(dist *d) {
    train_comm tc = {.ctx = d,
                     .rank = ring_rank(&d->r),
                     .size = ring_size(&d->r),
                     .allreduce = ring_allreduce_cb};
    return tc;
}

/* ================================================================ decisions and checks */

/* Test faults: flip the lowest bit of the first (perturb) or the last (perturb_last)
 * parameter, so the replica check is tested at both ends of the buffer it hashes. */
static void perturb(const dist *d, long iter, float *params, long n_params) {
    static const char *const kinds[] = {"perturb", "perturb_last"};
    double at;
    for (int k = 0; k < 2; k++) {
        if (!hr_fault_get(kinds[k], d->c->nodes[d->self].id, -1, &at) || (long)at != iter ||
            n_params <= 0)
            continue;
        long i = k ? n_params - 1 : 0;
        HR_WARN(TRAIN, "test fault: flipping a bit of parameter %ld at iteration %ld", i, iter);
        uint32_t w;
        memcpy(&w, &params[i], sizeof w);
        w ^= 1u;
        memcpy(&params[i], &w, sizeof w);
    }
}

/* Before the all-reduce: the test fault hook, then this node's hashes into its slot. */
static hr_status annotate(void *ctx, long iter, float *params, long n_params, train_stat *mine) {
    dist *d = ctx;
    perturb(d, iter, params, n_params);
    if (iter % d->hash_interval == 0)
        put_hash(mine->extra + DIST_STAT_PHASH, dist_hash_floats(params, n_params));
    put_hash(mine->extra + DIST_STAT_DHASH, d->dhash);
    return HR_OK;
}

/* Whether every node's hash pair at extra[off] equals rank 0's; when one differs, *bad_id and
 * *ref_id get the ids of the first such node and of rank 0. */
static int agree(const dist *d, const train_stat *stats, int size, int off, long *bad_id,
                 long *ref_id) {
    const ring_view *v = ring_get_view(&d->r);
    for (int k = 1; k < size; k++)
        if (!same_hash(stats[k].extra + off, stats[0].extra + off)) {
            *bad_id = v->ids[k], *ref_id = v->ids[0];
            return 0;
        }
    return 1;
}

/* Log why the nodes disagree and stop: a mismatch is never trained through (I4, I5). */
__attribute__((format(printf, 1, 2))) static hr_status mismatch(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    hr_vlog(HR_SUB_TRAIN, HR_LOG_ERROR, fmt, ap);
    va_end(ap);
    return HR_ERR_MISMATCH;
}

static hr_status decide(void *ctx, long iter, const train_stat *stats, int size, long *split) {
    dist *d = ctx;
    long bad, ref;
    if (iter % d->hash_interval == 0 && !agree(d, stats, size, DIST_STAT_PHASH, &bad, &ref))
        return mismatch("replica check failed at iteration %ld: the parameters of node %ld differ "
                        "from node %ld's (I4: every node must hold identical parameters); "
                        "stopping. This points to memory corruption or a build that differs "
                        "between nodes",
                        iter, bad, ref);
    if (!agree(d, stats, size, DIST_STAT_DHASH, &bad, &ref))
        return mismatch("decision check failed at iteration %ld: node %ld's batch-size controller "
                        "decided differently from node %ld's (I5: decisions must be identical on "
                        "every node); stopping. Check that every node runs the same hetring build "
                        "and config",
                        iter, bad, ref);
    for (int k = 0; k < size; k++) d->gathered[k] = (ctrl_stat){.t = stats[k].t, .b = stats[k].b};
    hr_status st = ctrl_observe(&d->ctl, iter, d->gathered);
    if (st != HR_OK) {
        HR_ERROR(CTRL, "iteration %ld: the controller rejected the gathered stats", iter);
        return st;
    }
    int epoch_ended = (iter + 1) % d->ipe == 0;
    HR_CHECK(ctrl_decide(&d->ctl, iter, epoch_ended, split, NULL));
    double at;
    if (hr_fault_get("decision", d->c->nodes[d->self].id, -1, &at) && (long)at == iter &&
        size > 1 && split[0] > 1) {
        HR_WARN(TRAIN, "test fault: corrupting this node's decision at iteration %ld", iter);
        split[0]--, split[1]++;
    }
    d->dhash = ctrl_hash(&d->ctl, split);
    return HR_OK;
}

hr_status dist_attach(dist *d, trainer *t, char *err, size_t errlen) {
    const cfg *c = d->c;
    int n = t->comm.size;
    ctrl_config cc;
    app_ctrl_config(c, &cc); /* the policy enums are checked to agree there */
    double *cap = malloc(sizeof *cap * (size_t)n);
    if (!cap) return hr_fail(err, errlen, HR_ERR_NOMEM, "out of memory");
    const ring_view *v = ring_get_view(&d->r);
    for (int k = 0; k < n; k++) cap[k] = c->nodes[cfg_node_index(c, v->ids[k])].capacity;
    /* the controller owns the split: its first one from the capacities, or the one a resumed
     * checkpoint recorded, which it checks (I6) before adopting it */
    const long B = train_global_batch(t);
    hr_status st = ctrl_init(&d->ctl, &cc, n, B, cap, NULL);
    if (st == HR_OK && t->has_recorded && (st = ctrl_set_split(&d->ctl, t->recorded)) != HR_OK)
        ctrl_free(&d->ctl);
    free(cap);
    if (st != HR_OK)
        return hr_fail(err, errlen, st,
                       "%s: the [controller] settings do not fit %d nodes and global_batch = %ld",
                       c->path, n, B);
    d->have_ctrl = 1;
    d->ipe = t->ipe;
    train_set_split(t, d->ctl.b);
    d->dhash = ctrl_hash(&d->ctl, NULL);
    t->ctrl.ctx = d;
    t->ctrl.decide = decide;
    t->ctrl.annotate = annotate;
    return HR_OK;
}

void dist_free(dist *d) {
    if (!d) return;
    if (d->have_ctrl) ctrl_free(&d->ctl);
    if (d->have_ring) ring_free(&d->r);
    free(d->gathered);
    memset(d, 0, sizeof *d);
}
