/*
 * dist.c: the ring communicator, the replicated controller and the agreement checks
 * (see dist.h).
 */
#include "cluster/dist.h"
#include "base/hr_log.h"
#include "base/hr_time.h"
#include "cluster/hr_fault.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ================================================================ hashing */

static void put_hash(float *dst, uint64_t h) {
    dst[0] = (float)(h & 0xffffff);
    dst[1] = (float)((h >> 24) & 0xffffff);
}

static int same_hash(const float *a, const float *b) {
    return a[0] == b[0] && a[1] == b[1];
}

/* ================================================================ communicator */

/* A test fault of kind `kind` armed for this node with argument `at`. */
static int fault_at(const dist *d, const char *kind, long at) {
    double arg;
    return hr_fault_get(kind, d->cc->self_id, -1, &arg) && (long)arg == at;
}

hr_status dist_init(dist *d, const cluster_config *cc, const ring_config *rc, char *err,
                    size_t errlen) {
    memset(d, 0, sizeof *d);
    d->cc = cc;
    d->hash_interval = cc->hash_interval;
    double arg;
    nccl_path_init(&d->np,
                   hr_fault_get("fake_nccl", cc->self_id, 0, &arg) ? hr_fault_fake_nccl()
                                                                  : nccl_path_real(),
                   cc->self_device >= 0 ? cc->self_device : 0);
    d->gathered = calloc((size_t)cc->max_nodes, sizeof *d->gathered);
    if (!d->gathered) return hr_fail(err, errlen, HR_ERR_NOMEM, "out of memory");
    d->have_ring = 1;
    return ring_open(&d->r, rc, err, errlen);
}

/* ================================================================ decisions and checks */

/* Test faults: flip the lowest bit of the first (perturb) or the last (perturb_last)
 * parameter, so the replica check is tested at both ends of the buffer it hashes. */
static const char *const perturb_kinds[] = {"perturb", "perturb_last"};

int dist_perturb_due(long node_id, long iter) {
    double at;
    for (int k = 0; k < 2; k++)
        if (hr_fault_get(perturb_kinds[k], node_id, -1, &at) && (long)at == iter) return 1;
    return 0;
}

void dist_perturb(long node_id, long iter, float *params, long n_params) {
    const char *const *kinds = perturb_kinds;
    double at;
    for (int k = 0; k < 2; k++) {
        if (!hr_fault_get(kinds[k], node_id, -1, &at) || (long)at != iter || n_params <= 0)
            continue;
        long i = k ? n_params - 1 : 0;
        HR_WARN(TRAIN, "test fault: flipping a bit of parameter %ld at iteration %ld", i, iter);
        uint32_t w;
        memcpy(&w, &params[i], sizeof w);
        w ^= 1u;
        memcpy(&params[i], &w, sizeof w);
    }
}

int dist_wants_hash(const dist *d, long iter) {
    return iter % d->hash_interval == 0 || d->force_hash;
}

void dist_annotate(dist *d, long iter, uint64_t param_hash, int nonfinite, cluster_stat *mine) {
    if (dist_wants_hash(d, iter)) put_hash(mine->extra + DIST_STAT_PHASH, param_hash);
    put_hash(mine->extra + DIST_STAT_DHASH, d->dhash);
    int flags = nonfinite & DIST_FLAG_NONFINITE;
    if (ring_join_requested(d->r)) flags |= DIST_FLAG_JOIN;
    if (d->leave && *d->leave) flags |= DIST_FLAG_LEAVE;
    mine->extra[DIST_STAT_FLAGS] = (float)flags;
}

/* Whether every node's hash pair at extra[off] equals rank 0's; when one differs, *bad_id and
 * *ref_id get the ids of the first such node and of rank 0. */
static int agree(const dist *d, const cluster_stat *stats, int size, int off, long *bad_id,
                 long *ref_id) {
    const ring_view *v = ring_get_view(d->r);
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

/* A test fault: one sample of this node's split moves from the first member holding more than
 * one to the next member, so that its decision differs from everyone else's whatever the
 * controller decided (a member may hold a single sample: a slow first calibration gives it
 * that). It cannot fire only where every member holds one sample, and says so. */
static void corrupt_decision(long *split, int size, long iter) {
    for (int k = 0; size > 1 && k < size; k++)
        if (split[k] > 1) {
            HR_WARN(TRAIN, "test fault: corrupting this node's decision at iteration %ld", iter);
            split[k]--, split[(k + 1) % size]++;
            return;
        }
    HR_WARN(TRAIN,
            "test fault: cannot corrupt the decision at iteration %ld: no member holds more "
            "than one sample",
            iter);
}

hr_status dist_decide(dist *d, long iter, const cluster_stat *stats, int size, long *split) {
    long bad, ref;
    const int check_params = dist_wants_hash(d, iter);
    d->iter = iter + 1; /* set while the bucket thread is idle: it reads it (test faults) */
    d->force_hash = 0;
    d->change = 0;
    d->leaving_self = 0;
    for (int k = 0; k < size; k++) {
        int f = (int)stats[k].extra[DIST_STAT_FLAGS] & DIST_FLAG_CHANGE;
        d->change |= f;
        if ((f & DIST_FLAG_LEAVE) && k == ring_rank(d->r)) d->leaving_self = 1;
    }
    if (check_params && !agree(d, stats, size, DIST_STAT_PHASH, &bad, &ref))
        return mismatch("replica check failed at iteration %ld: the parameters of node %ld differ "
                        "from node %ld's (every node must hold identical parameters); "
                        "stopping. Likely causes, most likely first: the training loop changed "
                        "one node's state outside the step (a learning rate or other optimizer "
                        "setting, a parameter edited by hand, a checkpoint loaded on one node "
                        "only); a build or math library that differs between nodes; memory "
                        "corruption",
                        iter, bad, ref);
    if (!agree(d, stats, size, DIST_STAT_DHASH, &bad, &ref))
        return mismatch("decision check failed at iteration %ld: node %ld's batch-size controller "
                        "decided differently from node %ld's (decisions must be identical on "
                        "every node); stopping. Check that every node runs the same hetring build "
                        "and config",
                        iter, bad, ref);
    for (int k = 0; k < size; k++)
        d->gathered[k] = (ctrl_stat){.t = stats[k].rec.t, .b = stats[k].rec.b};
    hr_status st = ctrl_observe(&d->ctl, iter, d->gathered);
    if (st != HR_OK) {
        const ring_view *v = ring_get_view(d->r);
        for (int k = 0; k < size; k++) {
            double t = d->gathered[k].t;
            if (!(t >= CTRL_T_MIN && t <= CTRL_T_MAX))
                HR_ERROR(CTRL,
                         "iteration %ld: node %ld reported a compute time of %g s for %ld "
                         "sample(s), outside [%g, %g] s; the controller cannot use it",
                         iter, v->ids[k], t, d->gathered[k].b, CTRL_T_MIN, CTRL_T_MAX);
            else if (d->gathered[k].b != d->ctl.b[k])
                HR_ERROR(CTRL,
                         "iteration %ld: node %ld computed %ld sample(s), where the split gave it "
                         "%ld",
                         iter, v->ids[k], d->gathered[k].b, d->ctl.b[k]);
        }
        HR_ERROR(CTRL, "iteration %ld: the controller rejected the gathered stats", iter);
        return st;
    }
    int epoch_ended = (iter + 1) % d->ipe == 0;
    HR_CHECK(ctrl_decide(&d->ctl, iter, epoch_ended, split, NULL));
    if (fault_at(d, "decision", iter)) corrupt_decision(split, size, iter);
    d->dhash = ctrl_hash(&d->ctl, split);
    return HR_OK;
}

int dist_nonfinite(const dist *d, const cluster_stat *stats, int size, long *ids, int *bits) {
    const ring_view *v = ring_get_view(d->r);
    int n = 0;
    for (int k = 0; k < size; k++) {
        int f = (int)stats[k].extra[DIST_STAT_FLAGS] & DIST_FLAG_NONFINITE;
        if (f) ids[n] = v->ids[k], bits[n++] = f;
    }
    return n;
}

/* ================================================================ views */

void dist_ids_str(char *out, size_t n, const long *ids, int count) {
    size_t o = 0;
    out[0] = 0;
    for (int k = 0; k < count && o < n; k++)
        o += (size_t)snprintf(out + o, n - o, "%s%ld", k ? "," : "", ids[k]);
}

static int has_id(const long *ids, int n, long id) {
    for (int k = 0; k < n; k++)
        if (ids[k] == id) return 1;
    return 0;
}

/* Ids of `a` not in `b`, into out; returns how many. */
static int ids_minus(const ring_view *a, const ring_view *b, long *out) {
    int n = 0;
    for (int k = 0; k < a->n; k++)
        if (!has_id(b->ids, b->n, a->ids[k])) out[n++] = a->ids[k];
    return n;
}

/* Start the controller for the members of the current view, and adopt its split. */
/* The first split's speeds: every member times a pass over its share of B (B/n samples) and
 * the seconds per sample are all-gathered, so every node starts the controller from the same
 * measured speeds (I5). A member that cannot time itself sends 0, and then every node takes the
 * capacity hints, as with calibrate = off or the static policy (whose split is B/n anyway);
 * a view that resumes a checkpoint's split (recorded) needs no speeds.
 * *measured says which; a ring failure is returned as it is (change_view elects again). */
static hr_status calibrate(dist *d, const ring_view *v, int recorded, double *cap, int *measured) {
    const cluster_config *c = d->cc;
    const long B = c->global_batch;
    for (int k = 0; k < v->n; k++) cap[k] = c->nodes[cluster_node_index(c, v->ids[k])].capacity;
    *measured = 0;
    if (recorded || !c->calibrate) return HR_OK;
    double mine = 0, all[RING_MAX_NODES], t = 0;
    long b = B / v->n > 0 ? B / v->n : 1;
    /* the others wait in the all-gather while a member times its passes (TRAIN_PROBE_S of them
     * at least), which take longer than a step: the deadline of a first step (pace() sets the
     * step's again afterwards) */
    ring_set_step_timeout(d->r, c->step_timeout > 0 ? c->connect_timeout : 0);
    if (d->st.probe && d->st.probe(d->st.ctx, b, &t) == HR_OK && t > 0 && isfinite(t))
        mine = t / (double)b;
    HR_CHECK(ring_allgather(d->r, &mine, all, sizeof mine));
    for (int k = 0; k < v->n; k++)
        if (!(all[k] > 0)) {
            HR_INFO(TRAIN,
                    "first split of view %llu from the capacity hints: node %ld cannot time "
                    "its passes",
                    (unsigned long long)v->epoch, v->ids[k]);
            return HR_OK;
        }
    char line[1024];
    int at = 0;
    for (int k = 0; k < v->n && at < (int)sizeof line; k++) {
        cap[k] = 1.0 / all[k];
        at += snprintf(line + at, sizeof line - (size_t)at, "%s%ld %.3g ms", k ? ", " : "",
                       v->ids[k], all[k] * 1e3);
    }
    HR_INFO(TRAIN,
            "first split of view %llu from measured speed (per sample, %ld-sample passes): %s",
            (unsigned long long)v->epoch, b, line);
    *measured = 1;
    return HR_OK;
}

/* The controller of the view just formed, from the speeds cap (calibrate; measured: they were
 * timed, not hinted), or from the recorded split of a resumed checkpoint. */
static hr_status start_controller(dist *d, int use_recorded, const double *cap, int measured,
                                  char *err, size_t errlen) {
    const cluster_config *c = d->cc;
    const ring_view *v = ring_get_view(d->r);
    if (d->have_ctrl) ctrl_free(&d->ctl);
    d->have_ctrl = 0;
    const long B = c->global_batch;
    hr_status st = ctrl_init(&d->ctl, &c->ctrl, v->n, B, cap, NULL);
    if (st == HR_OK && use_recorded && ctrl_set_split(&d->ctl, d->st.recorded) != HR_OK) {
        /* the same on every member: the split is the checkpoint's, the bounds the file's */
        char split[512];
        int at = 0;
        for (int k = 0; k < v->n && at < (int)sizeof split; k++)
            at += snprintf(split + at, sizeof split - (size_t)at, "%s%ld", k ? "," : "",
                           d->st.recorded[k]);
        HR_WARN(TRAIN,
                "view %llu: the checkpoint's split (%s) is outside [controller] min_batch = %ld, "
                "max_batch = %ld now; the first split comes from the capacity hints",
                (unsigned long long)v->epoch, split, c->ctrl.min_batch,
                c->ctrl.max_batch ? c->ctrl.max_batch : B);
    }
    if (st != HR_OK)
        return hr_fail(err, errlen, st,
                       "%s: the [controller] settings do not fit %d nodes and global_batch = %ld",
                       c->path, v->n, B);
    d->have_ctrl = 1;
    if (measured) {
        char split[512];
        int at = 0;
        for (int k = 0; k < v->n && at < (int)sizeof split; k++)
            at +=
                snprintf(split + at, sizeof split - (size_t)at, "%s%ld", k ? "," : "", d->ctl.b[k]);
        HR_INFO(TRAIN, "first split of view %llu: %s", (unsigned long long)v->epoch, split);
    }
    d->st.set_split(d->st.ctx, d->ctl.b);
    d->dhash = ctrl_hash(&d->ctl, NULL);
    return HR_OK;
}

/* Bring every member to the donor's state: a broadcast over the new ring when the lineages
 * differ, then an all-gathered hash of every member's state, which must agree (I4). A
 * failure of the ring itself returns its status (the caller elects again). */
/* The donor's state to every member: its size, then the blob. */
static hr_status send_state(dist *d, int donor, size_t *moved, char *err, size_t errlen) {
    const dist_state *s = &d->st;
    const int rank = ring_rank(d->r);
    const void *src = NULL;
    size_t bytes = 0;
    if (rank == donor) HR_CHECK(s->pack(s->ctx, &src, &bytes, err, errlen));
    uint64_t size = bytes;
    hr_status st = ring_broadcast(d->r, &size, sizeof size, donor);
    if (st == HR_OK && fault_at(d, "crash_xfer", d->views))
        hr_fault_kill_now(rank == donor ? "the state transfer, as its donor: the size is sent, "
                                          "the state is not"
                                        : "the state transfer, as a receiver: the size came, "
                                          "the state did not");
    if (st == HR_OK && rank != donor && size > d->blob_cap) {
        unsigned char *b = size <= SIZE_MAX ? realloc(d->blob, (size_t)size) : NULL;
        if (!b)
            return hr_fail(err, errlen, HR_ERR_NOMEM, "out of memory for a state of %llu bytes",
                           (unsigned long long)size);
        d->blob = b, d->blob_cap = (size_t)size;
    }
    void *buf = rank == donor ? (void *)src : d->blob;
    if (st == HR_OK) st = ring_broadcast(d->r, buf, (size_t)size, donor);
    if (st != HR_OK)
        return hr_fail(err, errlen, st, "state transfer failed: %s", ring_error(d->r));
    if (rank != donor && size > 0 && fault_at(d, "perturb_xfer", d->views)) {
        /* the built-in trainer's blob ends with the momentum */
        HR_WARN(TRAIN, "test fault: changing the last byte of the state received (momentum)");
        d->blob[size - 1] ^= 1u;
    }
    if (rank != donor) HR_CHECK(s->unpack(s->ctx, d->blob, (size_t)size, err, errlen));
    *moved = (size_t)size;
    return HR_OK;
}

static hr_status sync_state(dist *d, const ring_agreement *a, int send, size_t *moved, char *err,
                            size_t errlen) {
    const int n = ring_size(d->r);
    *moved = 0;
    if ((!a->in_sync || send) && n > 1) HR_CHECK(send_state(d, a->donor, moved, err, errlen));
    uint64_t mine, all[RING_MAX_NODES];
    HR_CHECK(d->st.hash(d->st.ctx, &mine, err, errlen));
    hr_status st = ring_allgather(d->r, &mine, all, sizeof mine);
    if (st != HR_OK) return hr_fail(err, errlen, st, "state check failed: %s", ring_error(d->r));
    const ring_view *v = ring_get_view(d->r);
    for (int k = 0; k < n; k++)
        if (all[k] != all[a->donor])
            return hr_fail(err, errlen, HR_ERR_MISMATCH,
                           "view %llu: node %ld's training state differs from node %ld's after "
                           "the transfer (every node must hold an identical state); stopping",
                           (unsigned long long)v->epoch, v->ids[k], v->ids[a->donor]);
    return HR_OK;
}

/* Failures a new view can cure: a peer that died, hung or dropped its link. Not so a frame
 * that fails authentication or breaks the protocol (nodes that disagree on the all-reduce's
 * size, a tampered link): those stop the run, as they would be met again. */
static int ring_trouble(hr_status st) {
    return st == HR_ERR_PEER || st == HR_ERR_TIMEOUT || st == HR_ERR_IO || st == HR_ERR_VIEW;
}

/* The deadline for a silent peer follows the step time: step_timeout times the slowest
 * recent iteration (decaying by 10% an iteration), never below [cluster] timeout; before
 * any step was measured, connect_timeout (peers may still be loading their data). */
static void pace(dist *d, int measured) {
    const cluster_config *c = d->cc;
    double now = hr_now();
    if (measured && d->t_last > 0) {
        double took = now - d->t_last;
        d->t_slow = took > 0.9 * d->t_slow ? took : 0.9 * d->t_slow;
    }
    d->t_last = measured ? now : 0;
    if (c->step_timeout <= 0)
        ring_set_step_timeout(d->r, 0);
    else
        ring_set_step_timeout(d->r,
                              d->t_slow > 0 ? c->step_timeout * d->t_slow : c->connect_timeout);
}

/* What an election ended with: the view agreed on, the state moved and the first split's
 * speeds (calibrate). */
typedef struct {
    ring_agreement a;             /* the view, its lineages and donor */
    size_t moved;                 /* state bytes this node sent or received */
    double cap[RING_MAX_NODES];   /* the members' speeds, by rank */
    int measured;                 /* cap was timed, not hinted */
    int recorded;                 /* the view resumes the checkpoint's split */
} view_start;

/* Elect a view, bring its members to the donor's state, time the first split and set up the
 * view's NCCL, electing again (16 times at most) while the ring fails before training. */
static hr_status elect_and_sync(dist *d, int at_start, view_start *vs, char *err,
                                size_t errlen) {
    const dist_state *s = &d->st;
    for (int attempt = 0;; attempt++) {
        d->lineage.progress = s->iter(s->ctx);
        nccl_path_abort(&d->np, d->r); /* the old view's communicator goes before the election */
        HR_CHECK(ring_elect(d->r, &d->lineage, &vs->a, err, errlen));
        if (fault_at(d, "crash_view", d->views)) hr_fault_kill_after("the view change", 0);
        HR_CHECK(s->set_comm(s->ctx, ring_rank(d->r), vs->a.view.n));
        hr_status st = sync_state(d, &vs->a, at_start && s->send_first, &vs->moved, err, errlen);
        vs->recorded =
            at_start && vs->a.in_sync && s->recorded && vs->a.view.n == d->cc->max_nodes;
        if (st == HR_OK &&
            (st = calibrate(d, &vs->a.view, vs->recorded, vs->cap, &vs->measured)) != HR_OK)
            snprintf(err, errlen, "%s", ring_error(d->r));
        if (st == HR_OK) st = nccl_path_view(&d->np, d->r, d->cc, err, errlen);
        if (st == HR_OK) return HR_OK;
        if (!ring_trouble(st) || attempt >= 16) return st;
        HR_WARN(RING, "view %llu failed before training (%s); agreeing on another",
                (unsigned long long)vs->a.view.epoch, err);
    }
}

/* The nodes a view change dropped (left) and admitted (joined), as its record says them. */
static void view_diff(const dist *d, const ring_view *old, const view_start *vs, int at_start,
                      long *left, int *nl, long *joined, int *nj) {
    const ring_agreement *a = &vs->a;
    *nl = ids_minus(old, &a->view, left);
    *nj = at_start ? 0 : ids_minus(&a->view, old, joined);
    if (at_start && a->lineage[a->donor].epoch > 0) /* a (re)start among nodes that trained: the
                                                     * joiners are those without the view's state */
        for (int k = 0; k < a->view.n; k++)
            if (a->lineage[k].epoch != a->lineage[a->donor].epoch) joined[(*nj)++] = a->view.ids[k];
    if (!at_start) /* in both views, but another process: its lineage is older than the view
                    * this node held (a node killed and started again within one view change) */
        for (int k = 0; k < a->view.n; k++)
            for (int j = 0; j < old->n; j++)
                if (old->ids[j] == a->view.ids[k] && a->lineage[k].epoch < old->epoch &&
                    a->view.ids[k] != d->cc->self_id)
                    joined[(*nj)++] = a->view.ids[k];
    if (!at_start && vs->moved && ring_rank(d->r) != a->donor && *nl == 0 && *nj == 0) {
        /* this node was left out and took the state: it is the one that rejoined */
        joined[0] = d->cc->self_id;
        *nj = 1;
    }
}

/* Rank 0's line for the view change, and every node's view record (the metrics file's, or
 * pending until the file is open). */
static void report_view(dist *d, const ring_view *old, const view_start *vs, const char *why,
                        long first, long iter, double took) {
    const int at_start = old->n == 0;
    const ring_view *v = &vs->a.view;
    long left[RING_MAX_NODES], joined[RING_MAX_NODES];
    int nl, nj;
    view_diff(d, old, vs, at_start, left, &nl, joined, &nj);
    memcpy(d->left, left, sizeof *left * (size_t)nl);
    memcpy(d->joined, joined, sizeof *joined * (size_t)nj);
    d->n_left = nl, d->n_joined = nj, d->change_s = took;
    char members[RING_MAX_NODES * 8], ls[RING_MAX_NODES * 8], js[RING_MAX_NODES * 8];
    dist_ids_str(members, sizeof members, v->ids, v->n);
    dist_ids_str(ls, sizeof ls, left, nl);
    dist_ids_str(js, sizeof js, joined, nj);
    if (ring_rank(d->r) == 0) {
        char lead[HR_ERRLEN + 128] = "", state[96] = "";
        if (vs->moved)
            snprintf(state, sizeof state, ": state %.1f MB in %.2f s", (double)vs->moved / 1e6,
                     took);
        if (at_start && !nj)
            snprintf(lead, sizeof lead, "started at iteration %ld%s; ", iter, state);
        else if (nj && !nl)
            snprintf(lead, sizeof lead, "node%s %.300s %s at iteration %ld%s; ", nj > 1 ? "s" : "",
                     js, nj > 1 ? "joined" : "rejoined", iter, state);
        else if (nl)
            snprintf(lead, sizeof lead, "node%s %.300s left%s%.300s%s at iteration %ld%s; ",
                     nl > 1 ? "s" : "", ls, why[0] ? " (" : "", why, why[0] ? ")" : "", first,
                     nj ? "" : state);
        HR_INFO(RING, "%sview %llu: nodes %s; %s in %.2f s", lead, (unsigned long long)v->epoch,
                members, at_start ? "ready" : "resumed", took);
    }
    char rec[sizeof d->pending];
    snprintf(rec, sizeof rec,
             "{\"event\":\"view\",\"epoch\":%llu,\"nodes\":[%s],\"iter\":%ld,\"left\":[%s],"
             "\"joined\":[%s],\"state_bytes\":%zu,\"elect_s\":%.6f,\"failed_views\":%d,"
             "\"t_unix\":%.6f,\"node\":%ld}\n",
             (unsigned long long)v->epoch, members, iter, ls, js, vs->moved, took,
             vs->a.failed_views, hr_unix_s(), d->cc->self_id);
    FILE *metrics = d->st.metrics ? d->st.metrics(d->st.ctx) : NULL;
    if (metrics) {
        fputs(rec, metrics);
    } else {
        snprintf(d->pending, sizeof d->pending, "%s", rec);
        d->have_pending = 1;
    }
}

/* Agree on a new view, bring every member to the same state and restart the controller.
 * `why` is the failure that started it ("" for a planned change); t0 when it was seen. */
static hr_status change_view(dist *d, const char *why, double t0, char *err, size_t errlen) {
    const dist_state *s = &d->st;
    const ring_view old = *ring_get_view(d->r);
    const long first = s->iter(s->ctx);
    view_start vs = {.moved = 0};
    HR_CHECK(elect_and_sync(d, old.n == 0, &vs, err, errlen));
    const long iter = s->iter(s->ctx);
    d->lineage.epoch = vs.a.view.epoch;
    d->lineage.progress = iter;
    HR_CHECK(start_controller(d, vs.recorded, vs.cap, vs.measured, err, errlen));
    d->force_hash = 1;
    d->change = d->leaving_self = 0;
    d->views++;
    d->iter = iter;
    pace(d, 0); /* the election is no step: the next iteration starts the clock */
    report_view(d, &old, &vs, why, first, iter, hr_now() - t0);
    return HR_OK;
}

hr_status dist_attach_state(dist *d, const dist_state *s, char *err, size_t errlen) {
    d->st = *s;
    d->ipe = s->ipe;
    d->lineage.epoch = 0;
    d->lineage.progress = s->iter(s->ctx);
    return change_view(d, "", hr_now(), err, errlen);
}

hr_status dist_allreduce(dist *d, float *buf, size_t n) {
    if (fault_at(d, "crash_comm", d->iter)) hr_fault_kill_after("the all-reduce", 0.002);
    return ring_allreduce(d->r, buf, n);
}

hr_status dist_allreduce_bf16(dist *d, float *buf, uint16_t *wire, float *dropped, size_t n) {
    if (fault_at(d, "crash_comm", d->iter)) hr_fault_kill_after("the all-reduce", 0.002);
    return ring_allreduce_bf16(d->r, buf, wire, dropped, n);
}

hr_status dist_allreduce_tree(dist *d, float *buf, size_t n) {
    if (fault_at(d, "crash_comm", d->iter)) hr_fault_kill_after("the all-reduce", 0.002);
    return ring_allreduce_tree(d->r, buf, n);
}

int dist_tree_takes(const dist *d, size_t n) {
    return ring_tree_takes_allreduce(d->r, n);
}

int dist_on_nccl(const dist *d) {
    return d->np.on;
}

hr_status dist_nccl_allreduce(dist *d, float *dev_buf, size_t n) {
    if (fault_at(d, "crash_comm", d->iter)) hr_fault_kill_after("the all-reduce", 0.002);
    return nccl_path_allreduce(&d->np, d->r, dev_buf, n, d->iter);
}

/* ================================================================ leaving and recovering */

static void flush_pending(dist *d) {
    FILE *f = d->st.metrics ? d->st.metrics(d->st.ctx) : NULL;
    if (d->have_pending && f) fputs(d->pending, f);
    if (f) d->have_pending = 0;
}

/* Leave the cluster at this boundary, with a checkpoint when one is configured. */
static hr_status leave_now(dist *d, char *err, size_t errlen) {
    const char *ck = d->st.save ? d->cc->checkpoint : "";
    if (d->st.save) HR_CHECK(d->st.save(d->st.ctx, err, errlen));
    HR_INFO(RING, "leaving the cluster at iteration %ld%s%s", d->st.iter(d->st.ctx),
            ck[0]        ? "; checkpoint written to "
            : d->st.save ? " (no checkpoint configured)"
                         : "",
            ck);
    return HR_ERR_INTERRUPTED;
}

/* A view change that a leave request interrupted (ring_elect polls it) ends in leave_now. */
static hr_status change_or_leave(dist *d, const char *why, double t0, char *err, size_t errlen) {
    hr_status st = change_view(d, why, t0, err, errlen);
    if (st == HR_ERR_INTERRUPTED && d->leave && *d->leave) return leave_now(d, err, errlen);
    return st;
}

/* The gist of a ring error for the "node N left (...)" line: "closed the connection (peer
 * died?)" out of "all-reduce #106 (view epoch 1): node 2 (127.0.0.1:29402) closed the
 * connection (peer died?) (reported by node 1 (127.0.0.1:29401))". */
static void gist(const char *e, char *out, size_t n) {
    const char *p = strstr(e, "): ");
    p = p ? p + 3 : e;
    if (strncmp(p, "node ", 5) == 0) { /* "node ID (HOST:PORT) " */
        const char *q = strstr(p, ") ");
        if (q) p = q + 2;
    }
    snprintf(out, n, "%s", p);
    char *r = strstr(out, " (reported by ");
    if (r) *r = 0;
}

/* What failed at data cursor `iter`: "iteration N", or, once every iteration is done, "the
 * run's end" (the barrier that agrees it: iteration N, one past the last, does not exist). */
static const char *what_failed(const dist *d, long iter, char *out, size_t n) {
    const long total = d->cc->iterations > 0 ? d->cc->iterations : d->cc->epochs * d->ipe;
    if (iter >= total)
        snprintf(out, n, "the run's end (agreeing it once all %ld iterations are done)", total);
    else
        snprintf(out, n, "iteration %ld", iter);
    return out;
}

hr_status dist_recover(dist *d, hr_status st, char *err, size_t errlen) {
    flush_pending(d);
    if (ring_status(d->r) == HR_OK) return st;
    if (!ring_trouble(st)) return hr_fail(err, errlen, st, "%s", ring_error(d->r));
    const long iter = d->st.iter(d->st.ctx);
    char what[96];
    what_failed(d, iter, what, sizeof what);
    if (iter == d->fail_iter && ++d->fails >= DIST_MAX_RETRIES)
        return hr_fail(err, errlen, st, "%s failed in %d views in a row; stopping: %s", what,
                       d->fails, ring_error(d->r));
    if (iter != d->fail_iter) d->fail_iter = iter, d->fails = 0;
    double t0 = hr_now();
    char why[HR_ERRLEN];
    gist(ring_error(d->r), why, sizeof why);
    HR_WARN(RING, "%s failed: %s; agreeing on a new view", what, ring_error(d->r));
    return change_or_leave(d, why, t0, err, errlen);
}

hr_status dist_boundary(dist *d, int *changed, char *err, size_t errlen) {
    flush_pending(d);
    pace(d, 1);
    d->lineage.progress = d->st.iter(d->st.ctx);
    *changed = 0;
    if (!d->change) return HR_OK;
    if (d->leaving_self) return leave_now(d, err, errlen);
    *changed = 1;
    return change_or_leave(d, "", hr_now(), err, errlen);
}

void dist_free(dist *d) {
    if (!d) return;
    if (d->have_ctrl) ctrl_free(&d->ctl);
    nccl_path_free(&d->np); /* before the ring the fake's communicator logs */
    if (d->have_ring) ring_free(d->r);
    free(d->gathered);
    free(d->blob);
    memset(d, 0, sizeof *d);
}
