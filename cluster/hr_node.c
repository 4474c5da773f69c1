/*
 * hr_node.c: the built-in trainer as a libhetring node (see hr_node.h).
 */
#include "cluster/hr_node.h"

#include "base/hr_log.h"
#include "cluster/cluster_setup.h"
#include "cluster/dist.h"
#include "cluster/hetring_app.h"
#include "cluster/stats.h"
#include "cluster/trainer_setup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A libhetring status as the trainer's: the same codes up to HETRING_EUNSUPPORTED. */
static hr_status status_of(int st) {
    switch (st) {
    case HETRING_OK:
        return HR_OK;
    case HETRING_LEFT:
        return HR_ERR_INTERRUPTED;
    case HETRING_RETRY:
        return HR_ERR_VIEW;
    case HETRING_ENONFINITE:
        return HR_ERR_NONFINITE;
    default:
        return st > 0 && st <= HETRING_EUNSUPPORTED ? (hr_status)st : HR_ERR_INVAL;
    }
}

/* ================================================================ the state and the views */

static int get_state(void *user, const void **data, size_t *bytes) {
    hr_node *n = user;
    size_t need = train_state_bytes(n->t);
    if (need > n->blob_cap) {
        unsigned char *b = realloc(n->blob, need);
        if (!b) return 1;
        n->blob = b, n->blob_cap = need;
    }
    if (train_sync_host(n->t) != HR_OK) return 1; /* the device's parameters and momentum */
    train_state_pack(n->t, n->blob);
    *data = n->blob, *bytes = need;
    return 0;
}

static int put_state(void *user, const void *data, size_t bytes) {
    hr_node *n = user;
    char err[HR_ERRLEN];
    if (train_state_unpack(n->t, data, bytes, err, sizeof err) == HR_OK) return 0;
    HR_ERROR(TRAIN, "%s", err); /* the library's message only says the state was refused */
    return 1;
}

static void on_view(void *user, const hetring_view *v) {
    hr_node *n = user;
    n->epoch = v->epoch;
    n->n = v->n;
    memcpy(n->ids, v->ids, sizeof *n->ids * (size_t)v->n);
    n->views++;
}

/* Leaving: this node's checkpoint, when one is configured. */
/* The first split of a view follows measured speed: time this node's passes. */
static hr_status probe(void *user, long b, double *seconds) {
    hr_node *n = user;
    return train_probe(n->t, b, seconds);
}

/* A resumed checkpoint's error-feedback residual (the bf16 or powersgd wire's: what this node's
 * share lost on the wire and has not yet sent): this node's own is taken up again (its next
 * lossy step adds it, whichever of the two wires it runs now), another node's is not (taking
 * it up here would count it twice). */
static hr_status resume_residual(hr_node *n, char *err, size_t errlen) {
    const trainer *t = n->t;
    const long id = n->c->nodes[n->self].id;
    if (!t->resumed_residual) return HR_OK;
    if (t->resumed_node != id) {
        HR_INFO(TRAIN,
                "the checkpoint's error-feedback residual is node %ld's, not this node's: "
                "starting without one",
                t->resumed_node);
        return HR_OK;
    }
    if (n->c->wire == CFG_WIRE_FP32) {
        HR_INFO(TRAIN, "the checkpoint holds an error-feedback residual; [cluster] wire = fp32 "
                       "has no use for it");
        return HR_OK;
    }
    int st = hr_lib_resume_residual(n->h, t->resumed_residual, (size_t)t->m.n_params);
    if (st == HETRING_SKIPPED) {
        HR_INFO(TRAIN, "%s", hetring_last_error(n->h));
        return HR_OK;
    }
    if (st != HETRING_OK)
        return hr_fail(err, errlen, HR_ERR_NOMEM, "the checkpoint's residual: out of memory");
    HR_INFO(TRAIN,
            "resumed this node's error-feedback residual from the checkpoint (%ld floats, wire "
            "= %s)",
            t->m.n_params, cfg_wire_name(n->c->wire));
    return HR_OK;
}

/* A resumed checkpoint's powersgd Q: replicated state, the same in every node's checkpoint
 * of an iteration, so taken up whoever wrote it; the first view starts from it. */
static hr_status resume_q(hr_node *n, char *err, size_t errlen) {
    const trainer *t = n->t;
    if (!t->resumed_q) return HR_OK;
    if (n->c->wire != CFG_WIRE_POWERSGD && n->c->wire != CFG_WIRE_AUTO) {
        HR_INFO(TRAIN, "the checkpoint holds a powersgd Q; [cluster] wire = %s has no use for it",
                cfg_wire_name(n->c->wire));
        return HR_OK;
    }
    int st = hetring_resume_powersgd_q(n->h, t->resumed_q, t->resumed_n_q);
    if (st == HETRING_SKIPPED) {
        HR_INFO(TRAIN, "%s", hetring_last_error(n->h));
        return HR_OK;
    }
    if (st != HETRING_OK)
        return hr_fail(err, errlen, HR_ERR_NOMEM, "the checkpoint's Q: %s",
                       hetring_last_error(n->h));
    HR_INFO(TRAIN, "resumed the powersgd Q from the checkpoint (%zu floats)", t->resumed_n_q);
    return HR_OK;
}

static hr_status save(void *user, char *err, size_t errlen) {
    hr_node *n = user;
    const char *ck = n->t->conf.checkpoint; /* this node's: "{id}" replaced */
    return ck[0] ? train_save(n->t, ck, err, errlen) : HR_OK;
}

static FILE *metrics(void *user) {
    return ((hr_node *)user)->t->metrics;
}

static void listening(void *user) {
    hr_node *n = user;
    if (n->on_listen) n->on_listen(n->listen_ctx);
}

/* ================================================================ the trainer's peer */

/* hetring_next: the next iteration's batch (none once the run is done), checked against the
 * trainer's own cursor and data order (both follow I1 from the same seed; a difference is a
 * bug, not a peer's fault). */
static hr_status fetch(hr_node *n) {
    trainer *t = n->t;
    n->have_batch = 0;
    int st = hetring_next(n->h, &n->batch);
    if (st == HETRING_DONE && t->iter >= t->total) return HR_OK;
    if (st == HETRING_DONE) {
        HR_ERROR(TRAIN, "the library ended the run at iteration %ld of the trainer's %ld", t->iter,
                 t->total);
        return HR_ERR_MISMATCH;
    }
    if (st != HETRING_OK) return status_of(st);
    const hetring_batch *b = &n->batch;
    const uint32_t *perm =
        data_loader_perm(&t->dl, b->epoch) + (b->iter % t->ipe) * b->global_batch;
    int same = b->iter == t->iter;
    for (long i = 0; same && i < b->batch; i++)
        same = (uint32_t)b->indices[i] == perm[b->start + i];
    if (!same) {
        HR_ERROR(TRAIN, "iteration %ld: the library's slice differs from the trainer's (at %ld)",
                 b->iter, t->iter);
        return HR_ERR_MISMATCH;
    }
    n->have_batch = 1;
    return HR_OK;
}

static hr_status slice(void *ctx, train_slice *s) {
    hr_node *n = ctx;
    if (!n->have_batch) HR_CHECK(fetch(n));
    if (!n->have_batch) return HR_ERR_MISMATCH; /* done: train_run never steps past the end */
    n->have_batch = 0;
    *s = (train_slice){.start = n->batch.start,
                       .b = n->batch.batch,
                       .global_batch = n->batch.global_batch,
                       .rank = n->batch.rank,
                       .size = n->batch.size,
                       .on_device = hr_lib_on_device(n->h)}; /* the view's NCCL */
    n->next_ready = n->n_bufs;
    n->ready_status = HETRING_OK;
    return HR_OK;
}

static hetring_grads grads_of(const hr_node *n) {
    return (hetring_grads){.bufs = n->bufs, .counts = n->counts, .n_bufs = n->n_bufs};
}

/* Backward finished grads[off, n_params): hand over every layer it completed. */
static void ready(void *ctx, long off) {
    hr_node *n = ctx;
    const hetring_grads g = grads_of(n);
    while (n->next_ready > 0 && (long)n->offs[n->next_ready - 1] >= off) {
        int st = hetring_ready(n->h, &g, --n->next_ready);
        if (st != HETRING_OK && n->ready_status == HETRING_OK) n->ready_status = st;
    }
}

static hr_status exchange(void *ctx, train_exchange *x) {
    hr_node *n = ctx;
    trainer *t = n->t;
    if (n->ready_status != HETRING_OK) return status_of(n->ready_status);
    hetring_grads g = grads_of(n);
    g.compute_s = x->compute_s;
    g.loss_sum = x->loss_sum;
    g.correct = x->correct;
    const long id = n->c->nodes[n->self].id;
    const int perturb = dist_perturb_due(id, n->batch.iter);
    if (n->batch.check_hash || perturb) HR_CHECK(train_sync_host(t)); /* the device's params */
    if (perturb) {
        dist_perturb(id, n->batch.iter, t->m.params, t->m.n_params);
        HR_CHECK(train_sync_device(t));
    }
    if (n->batch.check_hash) g.param_hash = train_hash_floats(t->m.params, t->m.n_params);
    hetring_result r;
    int st = hetring_step(n->h, &g, &r);
    if (st == HETRING_RETRY) n->retry = 1;
    x->skipped = st == HETRING_SKIPPED; /* committed; the trainer makes no update */
    if (st != HETRING_OK && !x->skipped) return status_of(st);
    x->loss = r.loss, x->accuracy = r.accuracy;
    x->t_node = r.t_node, x->t_comm = r.t_comm, x->factor = n->batch.slowdown;
    x->changed = r.changed, x->buckets = r.buckets;
    return HR_OK;
}

/* The trainer's view (train_view): this node's rank, the next split (what a checkpoint
 * records) and every node's stats of the last step, as the library has them now. */
static void view(void *ctx, train_view *v) {
    hr_node *n = ctx;
    const int members = hetring_members(n->h, n->members, n->c->n_nodes);
    for (int k = 0; k < members; k++)
        n->stats[k] = (train_stat){.b = n->members[k].batch, .t = n->members[k].compute_s};
    *v = (train_view){.rank = hetring_rank(n->h),
                      .n = hr_lib_split(n->h, n->split, n->c->n_nodes),
                      .split = n->split,
                      .stats = n->stats,
                      .self_id = n->c->nodes[n->self].id,
                      .residual = hr_lib_residual(n->h)};
    v->q = v->residual ? hr_lib_powersgd_q(n->h, &v->n_q) : NULL;
}

/* ================================================================ train_run's hooks */

/* The library's message for a failure of the run, unless the run has one already. */
static hr_status failed(hr_node *n, hr_status st, char *err, size_t errlen) {
    const char *why = hetring_last_error(n->h);
    if (err && errlen && !err[0] && why[0]) snprintf(err, errlen, "%s", why);
    return st;
}

/* After an iteration: fetch the next, which runs any view change a member asked for (and after
 * the last, the library's agreement on the run's end). */
static hr_status after_iter(void *ctx, trainer *t, char *err, size_t errlen) {
    hr_node *n = ctx;
    (void)t;
    hr_status st = fetch(n);
    return st == HR_OK || st == HR_ERR_INTERRUPTED ? st : failed(n, st, err, errlen);
}

/* train_step failed: a view change the library made is a retry of the iteration; where the new
 * view's state is the run's end (the others applied the last step), that end is agreed on as
 * after a last iteration of this node's own. */
static hr_status on_fail(void *ctx, trainer *t, hr_status st, char *err, size_t errlen) {
    hr_node *n = ctx;
    n->have_batch = 0;
    if (n->retry) {
        n->retry = 0;
        return t->iter >= t->total ? after_iter(ctx, t, err, errlen) : HR_OK;
    }
    return st == HR_ERR_INTERRUPTED ? st : failed(n, st, err, errlen);
}

/* Every metrics record and the summary: who wrote it and in which view. */
static void tag(void *ctx, const trainer *t, FILE *f, int summary) {
    const hr_node *n = ctx;
    (void)t;
    char members[RING_MAX_NODES * 8];
    dist_ids_str(members, sizeof members, n->ids, n->n);
    if (summary)
        fprintf(f, ",\n  \"views\": %d,\n  \"nodes_final\": [%s]", n->views, members);
    else
        fprintf(f, ",\"node\":%ld,\"view\":%llu,\"nodes\":[%s]", n->c->nodes[n->self].id,
                (unsigned long long)n->epoch, members);
}

void hr_node_hooks(hr_node *n, train_opts *o) {
    o->on_fail = on_fail;
    o->after_iter = after_iter;
    o->tag = tag;
    o->member_ctx = n;
}

/* ================================================================ gradient buckets */

/* Buckets in the plan the library cuts from the model's layers, this node's buffers. */
static int plan_buckets(const trainer *t, const cluster_config *cc) {
    size_t off[MODEL_MAX_LAYERS], count[MODEL_MAX_LAYERS];
    long cuts[OVERLAP_MAX_JOBS + 1];
    const int k = model_grad_pieces(&t->m, off, count);
    return overlap_plan(count, k, cc->bucket_bytes, cuts);
}

void hr_node_describe_overlap(const trainer *t, const cfg *c, int self, const int *same, char *out,
                              size_t n) {
    cluster_config cc;
    app_cluster_config(c, self, same, &cc);
    overlap_describe(cc.bucket_bytes, plan_buckets(t, &cc), cc.max_nodes, &cc.machine, out, n);
}

/* With bucket_bytes = auto every node of a cluster says its own cores at the start; the
 * choice itself (and an explicit setting's) is the library's to say, on rank 0, once it is
 * made (cluster/hetring.c). */
static void announce_overlap(const hr_node *n) {
    cluster_config cc;
    app_cluster_config(n->c, n->self, hr_lib_same_machine(n->h), &cc);
    const int nb = plan_buckets(n->t, &cc);
    if (cc.max_nodes < 2 || cc.bucket_bytes != OVERLAP_AUTO || nb < 2) return;
    char line[400];
    overlap_describe(cc.bucket_bytes, nb, cc.max_nodes, &cc.machine, line, sizeof line);
    HR_INFO(TRAIN, "%s", line);
}

/* ================================================================ open and close */

/* Each piece's weight matrix (out x the rest: a linear layer's out x in, a convolution's
 * filters x C*K*K), ahead of its bias, for the powersgd wire; 0 x 0 for a piece that is not
 * one layer's. */
static int declare_matrices(hr_node *n, const size_t *off, int k) {
    const model *m = &n->t->m;
    size_t rows[MODEL_MAX_LAYERS] = {0}, cols[MODEL_MAX_LAYERS] = {0};
    for (int i = 0; i < k; i++)
        for (int j = 0; j < m->n_layers; j++) {
            const model_layer *L = &m->layers[j];
            const long out = L->kind == LAYER_CONV2D ? L->g.OC : L->out_c;
            if (!L->n_params || L->w_off != (long)off[i] || out < 1) continue;
            rows[i] = (size_t)out, cols[i] = (size_t)((L->b_off - L->w_off) / out);
        }
    return hetring_matrices(n->h, rows, cols, k);
}

/* One buffer per layer with parameters, in the model's order: consecutive pieces of grads
 * (model_grad_pieces). */
static hr_status layer_buffers(hr_node *n, char *err, size_t errlen) {
    const model *m = &n->t->m;
    size_t off[MODEL_MAX_LAYERS], count[MODEL_MAX_LAYERS];
    const int k = model_grad_pieces(m, off, count);
    n->bufs = malloc(sizeof *n->bufs * (size_t)k);
    n->counts = malloc(sizeof *n->counts * (size_t)k);
    n->offs = malloc(sizeof *n->offs * (size_t)k);
    if (!n->bufs || !n->counts || !n->offs)
        return hr_fail(err, errlen, HR_ERR_NOMEM, "out of memory");
    for (int i = 0; i < k; i++) n->bufs[i] = m->grads + off[i];
    memcpy(n->counts, count, sizeof *count * (size_t)k);
    memcpy(n->offs, off, sizeof *off * (size_t)k);
    n->n_bufs = k;
    const int st = declare_matrices(n, off, k);
    if (st != HETRING_OK)
        return hr_fail(err, errlen, status_of(st), "%s", hetring_last_error(n->h));
    return HR_OK;
}

hr_status hr_node_open(hr_node *n, const cfg *c, int self, const int *same, trainer *t,
                       const long *start_split, volatile sig_atomic_t *leave,
                       void (*on_listen)(void *ctx), void *ctx, char *err, size_t errlen) {
    memset(n, 0, sizeof *n);
    n->t = t, n->c = c, n->self = self;
    n->on_listen = on_listen, n->listen_ctx = ctx;
    const size_t nn = (size_t)c->n_nodes;
    n->members = calloc(nn, sizeof *n->members);
    n->stats = calloc(nn, sizeof *n->stats);
    n->split = calloc(nn, sizeof *n->split);
    if (!n->members || !n->stats || !n->split)
        return hr_fail(err, errlen, HR_ERR_NOMEM, "out of memory");
    hetring_options o;
    hetring_options_init(&o);
    o.n_samples = t->train.n;
    o.sync_first = 0; /* replicas built from one seed agree; the state hash checks it */
    o.start_iter = t->iter;
    o.leave_flag = leave;
    o.cb = (hetring_callbacks){
        .user = n, .get_state = get_state, .put_state = put_state, .on_view = on_view};
    const hetring_app app = {.c = c,
                             .self = self,
                             .n_grads = (size_t)t->m.n_params,
                             .device_grads = train_device_grads(t), /* NULL on the CPU */
                             .start_split = start_split,
                             .save = save,
                             .metrics = metrics,
                             .on_listen = listening,
                             .probe = probe,
                             .same = same};
    int st = hr_lib_open(&n->h, &o, &app, err, errlen);
    if (st != HETRING_OK) return status_of(st);
    if (app_checkpoint_shared(c, self, hr_lib_same_machine(n->h))) {
        char at[CFG_PATH + 64];
        HR_WARN(TRAIN,
                "%s: checkpoint = %s has no {id}, and the other nodes on this machine (host %s) "
                "write that file too: it keeps the last writer's error-feedback residual "
                "(wire = %s) alone, and the others resume without theirs, losing one step's "
                "roundings each (expected {id} in the path, which becomes each node's id)",
                cfg_where(c, -1, "checkpoint", at, sizeof at), c->checkpoint, c->nodes[self].host,
                cfg_wire_name(c->wire));
    }
    HR_CHECK(resume_residual(n, err, errlen));
    HR_CHECK(resume_q(n, err, errlen));
    /* the model computes its gradient into the library's buffer, after the stats tail: the
     * iteration's all-reduce then needs no copy */
    HR_CHECK(model_lend_grads(&t->m, hr_lib_grads(n->h), err, errlen));
    n->lent = 1;
    HR_CHECK(layer_buffers(n, err, errlen));
    announce_overlap(n);
    const train_peer peer = {
        .ctx = n, .slice = slice, .ready = ready, .exchange = exchange, .view = view};
    train_set_peer(t, &peer);
    return HR_OK;
}

const char *hr_node_ring_error(const hr_node *n) {
    return n->h ? hr_lib_ring_error(n->h) : "";
}

void hr_node_close(hr_node *n) {
    if (!n) return;
    char err[HR_ERRLEN];
    if (n->lent && model_lend_grads(&n->t->m, NULL, err, sizeof err) != HR_OK)
        HR_WARN(TRAIN, "%s", err); /* the trainer then has no gradient; train_run says so */
    hetring_free(n->h);
    free(n->bufs);
    free(n->counts);
    free(n->offs);
    free(n->members);
    free(n->stats);
    free(n->split);
    free(n->blob);
    memset(n, 0, sizeof *n);
}
