/*
 * nccl_path.c: the per-view NCCL set-up, the gradient all-reduce over it, and the abort before
 * every election (see nccl_path.h). Every collective here is the TCP ring's, so every wait is
 * bounded by the ring's deadlines; the NCCL init and all-reduce carry their own.
 */
#include "cluster/nccl_path.h"

#include "base/hr_log.h"
#include "cluster/transport.h"

#include <stdio.h>
#include <string.h>

#define WHY_BYTES 200 /* a member's init error, as all-gathered */

/* A member's facts on the wire: bit 0 device gradients, bit 1 NCCL runs here (can_nccl). */
enum { FACT_DEVICE_GRADS = 1, FACT_NCCL = 2 };

/* What rank 0 broadcasts: whether it made an id, and the id. */
typedef struct {
    int32_t ok;                     /* 1: id is valid */
    uint8_t id[NCCL_PATH_ID_BYTES]; /* the view's unique id */
    char why[WHY_BYTES];            /* rank 0's error when !ok */
} id_msg;

/* What every member all-gathers after its init. */
typedef struct {
    int32_t status;      /* hr_status of its init */
    char why[WHY_BYTES]; /* its error, "" on success */
} init_msg;

void nccl_path_init(nccl_path *p, const nccl_path_ops *ops, int cuda_index) {
    memset(p, 0, sizeof *p);
    p->ops = ops, p->device = cuda_index, p->told = -1;
}

void nccl_path_abort(nccl_path *p, const ring *r) {
    (void)r;
    if (p->comm) p->ops->abort(p->comm);
    p->comm = NULL, p->on = 0;
}

void nccl_path_free(nccl_path *p) {
    nccl_path_abort(p, NULL);
}

/* Rank 0 says which transport the view uses, when it differs from the last one it said and
 * NCCL was in question: backend = nccl, or auto with a GPU node in the view (an all-CPU
 * cluster, or backend = tcp, has nothing to say). */
static void tell(nccl_path *p, const ring *r, const cluster_config *c, transport_kind k,
                 const char *why) {
    const ring_view *v = ring_get_view(r);
    int gpu = 0;
    for (int q = 0; q < v->n; q++) gpu |= c->nodes[cluster_node_index(c, v->ids[q])].gpu;
    if (c->backend == CFG_BACKEND_TCP || (c->backend == CFG_BACKEND_AUTO && !gpu)) return;
    if (ring_rank(r) != 0 || (int)k == p->told) return;
    HR_INFO(RING, "view %llu: gradients over %s (%s)", (unsigned long long)ring_get_view(r)->epoch,
            transport_name(k), why);
    p->told = (int)k;
}

/* Whether this process can run NCCL: an implementation, and its library loads (once per
 * process; said once where it does not). A member that could not would fail its init at once
 * while the others wait in theirs for it until connect_timeout, in every view. */
static int can_nccl(const nccl_path *p) {
    char why[HR_ERRLEN];
    if (!p->ops) return 0;
    if (p->ops->load(why, sizeof why) == HR_OK) return 1;
    static int said;
    if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
        HR_WARN(RING, "NCCL cannot be used here, so views with this node stay on TCP: %s", why);
    return 0;
}

/* The members' facts: the INI's for everyone, the members' own when `gathered`. */
static transport_kind choose(nccl_path *p, ring *r, const cluster_config *c, int gather, char *why,
                             size_t len, hr_status *st) {
    const ring_view *v = ring_get_view(r);
    transport_member m[RING_MAX_NODES];
    uint32_t all[RING_MAX_NODES] = {0};
    *st = HR_OK;
    if (gather) {
        uint32_t mine = (p->device_grads ? FACT_DEVICE_GRADS : 0) | (can_nccl(p) ? FACT_NCCL : 0);
        if ((*st = ring_allgather(r, &mine, all, sizeof mine)) != HR_OK) return TRANSPORT_TCP;
    }
    for (int k = 0; k < v->n; k++) {
        const cluster_node *nd = &c->nodes[cluster_node_index(c, v->ids[k])];
        m[k] = (transport_member){.id = v->ids[k],
                                  .gpu = nd->gpu,
                                  .device_grads = (all[k] & FACT_DEVICE_GRADS) != 0,
                                  .nccl = (all[k] & FACT_NCCL) != 0};
    }
    const transport_facts f = {
        .backend = c->backend, .wire = c->wire, .security = c->security, .n = v->n, .m = m,
        .gathered = gather};
    return transport_choose(&f, why, len);
}

/* Every member says whether it can make a communicator at all (ready) before any enters the
 * collective init, where the others would wait for one that fails at once until
 * connect_timeout; the first that cannot, by rank, or -1 in *q. Rank 0 names it. */
static hr_status gather_ready(nccl_path *p, ring *r, init_msg *all, int *q) {
    const ring_view *v = ring_get_view(r);
    init_msg mine = {0};
    char e[HR_ERRLEN] = "";
    mine.status = p->ops->ready(p->device, v->ids[ring_rank(r)], v->epoch, e, sizeof e);
    if (mine.status != HR_OK) snprintf(mine.why, sizeof mine.why, "%s", e);
    *q = -1;
    HR_CHECK(ring_allgather(r, &mine, all, sizeof mine));
    for (int k = 0; k < v->n && *q < 0; k++)
        if (all[k].status != HR_OK) *q = k;
    if (*q >= 0 && ring_rank(r) == 0) {
        all[*q].why[WHY_BYTES - 1] = 0;
        HR_WARN(RING,
                "view %llu: node %ld cannot take part in NCCL (%s: %s); this view's gradients "
                "go over TCP, and no member waited in NCCL's init for it",
                (unsigned long long)v->epoch, v->ids[*q], hr_strerror((hr_status)all[*q].status),
                all[*q].why);
    }
    return HR_OK;
}

/* Rank 0's id to every member over the TCP ring. */
static hr_status share_id(nccl_path *p, ring *r, long node_id, id_msg *msg) {
    memset(msg, 0, sizeof *msg);
    if (ring_rank(r) == 0) {
        char e[HR_ERRLEN] = "";
        msg->ok =
            p->ops->unique_id(msg->id, node_id, ring_get_view(r)->epoch, e, sizeof e) == HR_OK;
        if (!msg->ok) snprintf(msg->why, sizeof msg->why, "%s", e);
    }
    return ring_broadcast(r, msg, sizeof *msg, 0);
}

/* All-gather the members' init results. NCCL's init is collective: a member waits in it for
 * every other until connect_timeout, so one whose init failed at once, or finished early, waits
 * here as long, and the ring's own deadline on top, before it counts a member as silent. */
static hr_status gather_inits(ring *r, const cluster_config *c, const init_msg *mine,
                              init_msg *all) {
    const double was = ring_timeout(r);
    ring_set_step_timeout(r, c->connect_timeout + was);
    hr_status st = ring_allgather(r, mine, all, sizeof *mine);
    ring_set_step_timeout(r, was);
    return st;
}

/* The member whose init failed, by rank, -1 when none: the first that failed for a reason of
 * its own, else the first that timed out (those waited for a member that never came). */
static int init_failure(init_msg *all, int n) {
    int first = -1;
    for (int q = 0; q < n; q++) {
        all[q].why[WHY_BYTES - 1] = 0;
        if (all[q].status == HR_OK) continue;
        if (all[q].status != HR_ERR_TIMEOUT) return q;
        if (first < 0) first = q;
    }
    return first;
}

/* Rank 0's one line for a view whose init failed on the member at rank q. */
static void say_init_failure(const ring_view *v, const cluster_config *c, const init_msg *all,
                             int q) {
    char waited[RING_MAX_NODES * 8] = "";
    size_t len = 0;
    for (int k = 0; k < v->n && len < sizeof waited; k++)
        if (k != q && all[k].status == HR_ERR_TIMEOUT)
            len += (size_t)snprintf(waited + len, sizeof waited - len, "%s%ld", len ? "," : "",
                                    v->ids[k]);
    char also[sizeof waited + 96] = "";
    if (waited[0] && all[q].status != HR_ERR_TIMEOUT)
        snprintf(also, sizeof also, " (node(s) %s waited for it until connect_timeout, %g s)",
                 waited, c->connect_timeout);
    HR_WARN(RING,
            "view %llu: NCCL init failed on node %ld (%s: %s); this view's gradients go over "
            "TCP%s",
            (unsigned long long)v->epoch, v->ids[q], hr_strerror((hr_status)all[q].status),
            all[q].why, also);
}

hr_status nccl_path_view(nccl_path *p, ring *r, const cluster_config *c, char *err,
                         size_t errlen) {
    const ring_view *v = ring_get_view(r);
    char why[256];
    hr_status st;
    nccl_path_abort(p, r); /* a view that failed before training may have left one */
    transport_kind k = choose(p, r, c, 0, why, sizeof why, &st);
    if (k == TRANSPORT_GATHER) k = choose(p, r, c, 1, why, sizeof why, &st);
    if (st != HR_OK) return hr_fail(err, errlen, st, "transport choice: %s", ring_error(r));
    if (k != TRANSPORT_NCCL) {
        tell(p, r, c, k, why);
        return HR_OK;
    }
    const long self_id = v->ids[ring_rank(r)];
    init_msg mine = {0}, all[RING_MAX_NODES];
    int q;
    if ((st = gather_ready(p, r, all, &q)) != HR_OK)
        return hr_fail(err, errlen, st, "NCCL readiness: %s", ring_error(r));
    if (q >= 0) {
        p->told = TRANSPORT_TCP;
        return HR_OK;
    }
    id_msg idm;
    if ((st = share_id(p, r, self_id, &idm)) != HR_OK)
        return hr_fail(err, errlen, st, "NCCL unique id: %s", ring_error(r));
    if (!idm.ok) {
        mine.status = HR_ERR_NCCL;
        snprintf(mine.why, sizeof mine.why, "no unique id: %.180s", idm.why);
    } else {
        const nccl_path_args a = {.rank = ring_rank(r),
                                  .n = v->n,
                                  .id = idm.id,
                                  .device = p->device,
                                  .timeout_s = c->connect_timeout,
                                  .epoch = v->epoch,
                                  .node_id = self_id,
                                  .r = r};
        char e[HR_ERRLEN] = "";
        mine.status = p->ops->init(&p->comm, &a, e, sizeof e);
        if (mine.status != HR_OK) p->comm = NULL, snprintf(mine.why, sizeof mine.why, "%s", e);
    }
    if ((st = gather_inits(r, c, &mine, all)) != HR_OK) {
        nccl_path_abort(p, r);
        return hr_fail(err, errlen, st, "NCCL init results: %s", ring_error(r));
    }
    q = init_failure(all, v->n);
    if (q >= 0) {
        nccl_path_abort(p, r); /* every member: TCP for this view */
        if (ring_rank(r) == 0) say_init_failure(v, c, all, q);
        p->told = TRANSPORT_TCP;
        return HR_OK;
    }
    p->on = 1, p->epoch = v->epoch;
    tell(p, r, c, TRANSPORT_NCCL, why);
    return HR_OK;
}

hr_status nccl_path_allreduce(nccl_path *p, ring *r, float *dev_buf, size_t count, long iter) {
    double timeout = ring_timeout(r);
    char e[HR_ERRLEN] = "";
    hr_status st = p->ops->allreduce(p->comm, dev_buf, count, timeout, iter, e, sizeof e);
    if (st == HR_OK) return HR_OK;
    nccl_path_abort(p, r);
    hr_status failed = ring_status(r);
    if (failed != HR_OK) return failed; /* the fake's ring all-reduce failed: the ring's */
    char what[HR_ERRLEN + 32];
    snprintf(what, sizeof what, "NCCL all-reduce failed: %.400s", e);
    return ring_fail_view(r, st == HR_ERR_TIMEOUT ? HR_ERR_TIMEOUT : HR_ERR_IO, what);
}
