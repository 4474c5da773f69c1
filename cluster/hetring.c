/*
 * hetring.c: libhetring over the application's distributed machinery (hetring.h).
 *
 * A handle is a dist (dist.h: the ring, the replicated controller, the agreement checks
 * and the view changes) whose dist_state is the user's: the iteration cursor, the split and a
 * state blob of a small header (format, iteration, B, samples, seed) followed by the bytes of
 * the user's get_state. `hetring run` is such a user too (hr_node.c, with the extras of
 * hetring_app.h), so every cluster test and bench of the built-in trainer runs this code.
 *
 * One iteration:
 *   slice   perm_e[it*B + start, it*B + start + b) from trainer/data.c's loader (I1)
 *   step    the user's buffers are copied into one contiguous buffer led by the stats tail
 *           (stats.h: CLUSTER_NODE_STATS floats per node, this node's slot filled,
 *           zeros elsewhere), the SUM all-reduce hands every node every slot, dist_decide
 *           checks the hashes and decides the next split (I4, I5, I6), and the buffers get
 *           sum / B back (I2). hetring run's trainer computes its gradient into that buffer
 *           instead (app.n_grads, hr_lib_grads: no copy) and keeps the sums
 *   path    the gradient goes the way of the view's grad_path (grad_path.h: whole, tree, buckets,
 *           nccl), chosen once per view (and with bucket_bytes = auto after every iteration,
 *           from the gathered machine facts); hetring_ready and hetring_step call through it
 *   overlap hetring_ready copies a buffer as soon as the user finished it; with buckets on,
 *           a bucket whose buffers are all in goes to the communication thread (overlap.h)
 *           while the user computes the rest. Buckets are cut at buffer boundaries from the
 *           last buffer towards the first, as backward finishes them, and go out in that
 *           order whatever the order of the hetring_ready calls, so every node's frames are
 *           alike; the last bucket (buffer 0's) waits for hetring_step and carries the stats
 *           tail just before it
 *   nccl    in a view whose transport is NCCL (transport.h, nccl_path.h; hetring run's GPU
 *           nodes only, app.device_grads), the gradient is all-reduced on the device and only
 *           the stats tail goes over the TCP ring; no buckets
 *   finite  each buffer is checked as it is handed over (before its bucket can go out) and
 *           the loss sum with the stats; the node's flags say what was not finite, so after the
 *           all-reduce every node knows the same culprits, checks the same summed bytes and
 *           stops (HETRING_ENONFINITE) or skips (HETRING_SKIPPED: committed, not applied)
 *   commit  the cursor advances only when the all-reduce completed; a failure elects a new
 *           view and the same iteration is run again (I8)
 *   boundary  a view change a member asked for (a join, a leave) runs at the next
 *           hetring_next, after the user applied the step, so the state moved is the
 *           committed one
 */
#include "cluster/hetring.h"
#include "cluster/hetring_app.h"

#include "base/hr_log.h"
#include "base/hr_time.h"
#include "cluster/cluster_setup.h"
#include "cluster/dist.h"
#include "cluster/grad_path.h"
#include "cluster/hr_fault.h"
#include "cluster/link_tune.h"
#include "cluster/node_id.h"
#include "cluster/overlap.h"
#include "cluster/ring_setup.h"
#include "cluster/stats.h"
#include "cluster/transport.h"
#include "conf/cfg.h"
#include "ring/ring.h"
#include "ring/tcp.h"
#include "trainer/blas_pick.h"
#include "trainer/data.h"
#include "trainer/train.h"

#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

_Static_assert((int)HETRING_EUNSUPPORTED == (int)HR_ERR_UNSUPPORTED &&
                   (int)HETRING_EMISMATCH == (int)HR_ERR_MISMATCH &&
                   (int)HETRING_EINVAL == (int)HR_ERR_INVAL,
               "hetring_status must match hr_status up to HR_ERR_UNSUPPORTED");

#define STATE_MAGIC 0x3173757268ull /* "hrus1" */
#define STATE_HDR   6               /* magic, iter, B, samples, seed, user bytes */

/* A view's link probe and tuning ([cluster] link_probe; link_tune.h). */
enum {
    LINK_DONE,  /* tuned, or nothing to do (link_probe = off, one member) */
    LINK_PROBE, /* the view's first step probes: before its all-reduce, or after it on a path
                 * with buckets (the ring is the communication thread's while they go out) */
    LINK_TUNE   /* probed: the first step whose gathered facts all hold a probe tunes */
};

struct hetring {
    cfg own;                /* the configuration this handle loaded (without app->c) */
    int have_cfg;           /* own was loaded */
    const cfg *c;           /* the cluster's configuration: &own or the application's */
    hetring_app app;        /* the application's extras (hetring_app.h), zero for a user */
    int self;               /* index of this node in c.nodes */
    dist d;                 /* ring, controller, checks and views */
    int have_dist;          /* d was initialised (and not yet freed) */
    cluster_config cc;      /* this node's cluster settings: B, seed, run length, buckets and
                             * its emulated slowdown */
    hetring_callbacks cb;   /* the user's side of view changes */
    long n_samples;         /* dataset size the indices range over */
    long ipe;               /* iterations per epoch: n_samples / B */
    long total;             /* iterations of the run */
    data_set ds;            /* n_samples only: the loader's permutation needs no data */
    data_loader dl;         /* perm_e (I1) */
    int have_dl;            /* dl was initialised */
    long iter;              /* next iteration to run: the data cursor */
    int rank, size;         /* ring position and view size */
    long *split;            /* (c.n_nodes) samples per node of the current view */
    long *next;             /* (c.n_nodes) where dist_decide writes the next split */
    cluster_stat *gathered; /* (c.n_nodes) every node's stats of the last iteration */
    long *member_ids;       /* (c.n_nodes) the ids of the nodes in gathered, in ring order */
    int n_members;          /* entries of gathered and member_ids: the last completed step's */
    int64_t *idx;           /* (B) this node's indices for the iteration fetched */
    float *buf;             /* (n_nodes * CLUSTER_NODE_STATS + n_grad) room for the tail,
                             * then the gradients: allocated at the first step, or at open
                             * for an application that computes into it (app.n_grads) */
    size_t *counts;         /* (n_bufs) floats per buffer */
    size_t *off;            /* (n_bufs) each buffer's offset in grads */
    size_t *mat_shape;      /* (2 * n_mat) rows and cols of each buffer's leading matrix, as
                             * hetring_matrices declared them (0 x 0: none), or NULL */
    int n_mat;              /* buffers declared */
    /* the gradient's path (grad_path.h; see the top of this file) */
    grad_xfer x;                     /* layout, bucket plan and communication thread */
    const grad_path *path;           /* this view's path, NULL until its first step */
    const grad_path *sent;           /* the path of the last exchange (which may choose the next) */
    int told;                        /* path->overlaps last logged (-1: none) */
    int told_measured;               /* a choice from measured facts was logged in this view */
    char told_why[384];              /* the reason last logged */
    const grad_path *told_path;      /* the path last logged (NULL: none) */
    unsigned char *given;            /* (n_bufs) handed over this iteration */
    float **ptrs;                    /* (n_bufs) the buffers as this iteration's first ready gave */
    int n_given;                     /* buffers handed over this iteration (hetring_ready) */
    int readied;                     /* hetring_ready was called in this iteration */
    int share_bad;                   /* DIST_FLAG_NONFINITE_* of this iteration's own share */
    long *bad_ids;                   /* (c.n_nodes) culprits of the last step not finite */
    int n_bad;                       /* entries of bad_ids */
    long skipped;                    /* steps skipped as not finite ([train] nonfinite = skip) */
    long skip_run;                   /* steps skipped in a row in this view, just before the
                                      * next: the same on every member (cc.skip_limit) */
    overlap_fact *facts;             /* (c.n_nodes) the view's facts, gathered */
    int *same;                       /* (c.n_nodes) 1: the node runs on this node's machine
                                      * (node_id_check_hosts) */
    double comm_s, comm_cpu_s;       /* the last all-reduce after backward in this view: wall
                                      * seconds, and CPU seconds of the threads that ran it (0:
                                      * none yet; overlap.h) */
    int comm_n;                      /* all-reduces after backward timed in this view, up to 2 */
    int path_final;                  /* the view's path was chosen from measured facts: kept */
    int link_state;                  /* LINK_*: this view's link probe and tuning (link_tune.h) */
    ring_link link;                  /* this node's probe of the view's links (0s: none yet) */
    unsigned char *blob;             /* (blob_cap) the state blob this node packs */
    size_t blob_cap;                 /* bytes allocated for blob */
    size_t moved;                    /* state bytes sent or received in the last view change */
    int fetched;                     /* hetring_next handed out iteration `iter` */
    int boundary;                    /* an iteration completed: run dist_boundary first */
    int view_changed;                /* a view change since the last hetring_next */
    int closed;                      /* hetring_close ran */
    int left;                        /* this node left the cluster */
    int ended;                       /* the view agreed on the run's end (end_of_run) */
    pid_t owner;                     /* the process that opened the node: its connections and
                                      * threads are that process's, not a forked child's */
    long start_iter;                 /* hetring_options.start_iter: where the user's state is */
    hr_status failed;                /* a failure that ended the node (later calls return it) */
    volatile sig_atomic_t leave;     /* hetring_leave: leave at the next boundary */
    volatile sig_atomic_t *leave_at; /* the flag polled: &leave, or the options' leave_flag */
    char err[HR_ERRLEN];             /* the last failure's message */
};

/* ================================================================ status and messages */

static int status_of(hr_status st) {
    if (st == HR_ERR_INTERRUPTED) return HETRING_LEFT;
    if (st == HR_ERR_NONFINITE) return HETRING_ENONFINITE;
    if (st == HR_ERR_CUDA || st == HR_ERR_NCCL) return HETRING_EIO;
    return (int)st;
}

const char *hetring_strerror(int status) {
    switch (status) {
    case HETRING_RETRY:
        return "the view changed: run the iteration again";
    case HETRING_DONE:
        return "the run's iterations are done";
    case HETRING_LEFT:
        return "this node left the cluster";
    case HETRING_ECLOSED:
        return "the handle was closed";
    case HETRING_ENONFINITE:
        return hr_strerror(HR_ERR_NONFINITE);
    case HETRING_SKIPPED:
        return "the step was not finite and is skipped: do not apply it";
    default:
        if (status >= 0 && status <= HETRING_EUNSUPPORTED) return hr_strerror((hr_status)status);
        return "unknown status";
    }
}

const char *hetring_version(void) {
    return HR_VERSION;
}

const char *hetring_last_error(const hetring *h) {
    return h ? h->err : "no handle";
}

/* A failure of this call: the message into h->err, the status as the user sees it. */
__attribute__((format(printf, 3, 4))) static int fail(hetring *h, int status, const char *fmt,
                                                      ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h->err, sizeof h->err, fmt, ap);
    va_end(ap);
    return status;
}

/* A failure that ends the node: later calls return it too. */
static int fatal(hetring *h, hr_status st) {
    h->failed = st;
    if (!h->err[0]) snprintf(h->err, sizeof h->err, "%s", hr_strerror(st));
    HR_ERROR(CLI, "node %ld: %s", hetring_node_id(h), h->err);
    return status_of(st);
}

/* A process forked from the one that opened the node holds a copy of the handle: its sockets
 * are the owner's connections and the threads behind them do not exist in the copy. */
static int forked(const hetring *h) {
    return h->owner != getpid();
}

/* The checks every call makes first. */
static int usable(hetring *h) {
    if (!h) return HETRING_EINVAL;
    if (forked(h))
        return fail(h, HETRING_EINVAL,
                    "this node belongs to process %ld; process %ld, forked from it, cannot use "
                    "it (only hetring_free, which releases this process's copy)",
                    (long)h->owner, (long)getpid());
    if (h->closed) return fail(h, HETRING_ECLOSED, "the handle was closed (hetring_close)");
    if (h->left) return fail(h, HETRING_LEFT, "this node left the cluster");
    if (h->failed != HR_OK) return status_of(h->failed); /* h->err still says why */
    return HETRING_OK;
}

uint64_t hetring_hash(const void *data, size_t bytes, uint64_t seed) {
    /* word-at-a-time multiply-xor (train.c's hash of floats, over bytes) */
    const unsigned char *p = data;
    uint64_t h = 0x9e3779b97f4a7c15ull ^ seed ^ (uint64_t)bytes;
    size_t i = 0;
    for (; i + 8 <= bytes; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, sizeof w);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
        h ^= h >> 29;
    }
    if (i < bytes) {
        uint64_t w = 0;
        memcpy(&w, p + i, bytes - i);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
    }
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
}

/* ================================================================ the user's state */

static long st_iter(void *ctx) {
    return ((hetring *)ctx)->iter;
}

static void round_reset(hetring *h);

static hr_status st_set_comm(void *ctx, int rank, int size) {
    hetring *h = ctx;
    if (size < 1 || size > h->c->n_nodes || rank < 0 || rank >= size) return HR_ERR_INVAL;
    h->rank = rank, h->size = size;
    h->path = NULL; /* chosen again at the view's first step */
    h->comm_s = h->comm_cpu_s = 0; /* measured again on the view's ring */
    h->comm_n = h->path_final = 0;
    h->told_measured = 0;
    h->link = (ring_link){0, 0};
    h->link_state = h->cc.link_probe && size > 1 ? LINK_PROBE : LINK_DONE;
    /* every member of the new view starts from the constant plan (a joiner knows no other) */
    if (h->x.n_bufs && h->x.plan_bytes != h->cc.bucket_bytes) {
        grad_xfer_plan(&h->x, h->counts, h->off, h->x.n_bufs, h->cc.bucket_bytes);
        round_reset(h);
    }
    return HR_OK;
}

static void st_set_split(void *ctx, const long *b) {
    hetring *h = ctx;
    memcpy(h->split, b, sizeof *h->split * (size_t)h->size);
}

static hr_status user_state(hetring *h, const void **data, size_t *bytes, char *err,
                            size_t errlen) {
    *data = NULL, *bytes = 0;
    if (!h->cb.get_state) return HR_OK;
    if (h->cb.get_state(h->cb.user, data, bytes) != 0 || (*bytes && !*data))
        return hr_fail(err, errlen, HR_ERR_DATA, "the get_state callback failed");
    return HR_OK;
}

static void header(const hetring *h, uint64_t hdr[STATE_HDR], size_t user_bytes) {
    hdr[0] = STATE_MAGIC;
    hdr[1] = (uint64_t)h->iter;
    hdr[2] = (uint64_t)h->cc.global_batch;
    hdr[3] = (uint64_t)h->n_samples;
    hdr[4] = (uint64_t)h->cc.seed;
    hdr[5] = (uint64_t)user_bytes;
}

static hr_status st_pack(void *ctx, const void **blob, size_t *bytes, char *err, size_t errlen) {
    hetring *h = ctx;
    const void *user;
    size_t ub;
    HR_CHECK(user_state(h, &user, &ub, err, errlen));
    uint64_t hdr[STATE_HDR];
    const size_t n = sizeof hdr + ub;
    if (n > h->blob_cap) {
        unsigned char *b = realloc(h->blob, n);
        if (!b) return hr_fail(err, errlen, HR_ERR_NOMEM, "out of memory for a %zu-byte state", n);
        h->blob = b, h->blob_cap = n;
    }
    header(h, hdr, ub);
    memcpy(h->blob, hdr, sizeof hdr);
    if (ub) memcpy(h->blob + sizeof hdr, user, ub);
    *blob = h->blob, *bytes = n;
    h->moved = n;
    return HR_OK;
}

static hr_status st_unpack(void *ctx, const void *blob, size_t bytes, char *err, size_t errlen) {
    static const char *const what[STATE_HDR] = {"format",       "iteration", "global batch",
                                                "sample count", "seed",      "size"};
    hetring *h = ctx;
    uint64_t hdr[STATE_HDR], mine[STATE_HDR];
    if (bytes < sizeof hdr)
        return hr_fail(err, errlen, HR_ERR_DATA, "a state of %zu bytes is too short", bytes);
    memcpy(hdr, blob, sizeof hdr);
    header(h, mine, bytes - sizeof hdr);
    for (int i = 0; i < STATE_HDR; i++)
        if (i != 1 && hdr[i] != mine[i])
            return hr_fail(err, errlen, i ? HR_ERR_MISMATCH : HR_ERR_DATA,
                           "the state received: its %s is %llu, this node's %llu (every node "
                           "must use the same configuration and dataset)",
                           what[i], (unsigned long long)hdr[i], (unsigned long long)mine[i]);
    if (hdr[1] > (uint64_t)h->total)
        return hr_fail(err, errlen, HR_ERR_DATA,
                       "the state received is at iteration %llu, past "
                       "the %ld of the run",
                       (unsigned long long)hdr[1], h->total);
    const size_t ub = bytes - sizeof hdr;
    const int past = (long)hdr[1] > h->iter; /* the step this node's exchange failed was applied */
    if (h->cb.put_state &&
        h->cb.put_state(h->cb.user, (const unsigned char *)blob + sizeof hdr, ub) != 0)
        return hr_fail(err, errlen, HR_ERR_DATA,
                       "the put_state callback refused the state received (%zu bytes)", ub);
    h->iter = (long)hdr[1];
    h->moved = bytes;
    if (past) grad_xfer_passed(&h->x);
    return HR_OK;
}

static hr_status st_hash(void *ctx, uint64_t *out, char *err, size_t errlen) {
    hetring *h = ctx;
    const void *user;
    size_t ub;
    HR_CHECK(user_state(h, &user, &ub, err, errlen));
    *out = hetring_hash(user, ub, (uint64_t)h->iter);
    return HR_OK;
}

static hr_status st_save(void *ctx, char *err, size_t errlen) {
    hetring *h = ctx;
    return h->app.save(h->cb.user, err, errlen);
}

static hr_status st_probe(void *ctx, long b, double *seconds) {
    hetring *h = ctx;
    return h->app.probe(h->cb.user, b, seconds);
}

static FILE *st_metrics(void *ctx) {
    hetring *h = ctx;
    return h->app.metrics(h->cb.user);
}

/* ================================================================ views */

static void report_view(hetring *h) {
    if (!h->cb.on_view) return;
    const ring_view *v = ring_get_view(h->d.r);
    hetring_view hv = {.epoch = v->epoch,
                       .n = v->n,
                       .ids = v->ids,
                       .rank = h->rank,
                       .iter = h->iter,
                       .state_bytes = h->moved,
                       .left = h->d.left,
                       .n_left = h->d.n_left,
                       .joined = h->d.joined,
                       .n_joined = h->d.n_joined,
                       .change_s = h->d.change_s};
    h->cb.on_view(h->cb.user, &hv);
}

/* ================================================================ open and close */

void hetring_options_init(hetring_options *o) {
    memset(o, 0, sizeof *o);
    o->node_id = -1;
    o->sync_first = 1;
}

/* A user's file gives no [train] key that only the built-in trainer reads, and no node a
 * device: the model, its device, its data, the optimizer, the evaluations and the checkpoints
 * are the user's program's, so such a key would be ignored. (samples is the default of
 * hetring_options.n_samples.) */
static hr_status check_library_keys(const cfg *c, char *err, size_t errlen) {
    static const char *const trainer_only[] = {
        "model",    "layers",       "dataset",       "data_dir",   "eval_samples",
        "lr",       "lr_schedule",  "lr_step",       "lr_gamma",   "warmup",
        "momentum", "weight_decay", "eval_interval", "checkpoint", "checkpoint_interval"};
    char at[CFG_PATH + 64];
    for (size_t i = 0; i < sizeof trainer_only / sizeof *trainer_only; i++) {
        if (cfg_key_line(c, -1, trainer_only[i]) == 0) continue;
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "%s: [train] %s is set, but libhetring does not use it: your own code "
                       "trains the model, with its own data, optimizer, evaluation and checkpoints "
                       "(expected no %s in a file for hetring_open; `hetring run` is the built-in "
                       "trainer that reads it)",
                       cfg_where(c, -1, trainer_only[i], at, sizeof at), trainer_only[i],
                       trainer_only[i]);
    }
    for (int k = 0; k < c->n_nodes; k++) { /* the user's code places its model */
        if (c->nodes[k].device < 0 || cfg_key_line(c, k, "device") == 0) continue;
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "%s: [node.%ld] device = cuda:%ld, but libhetring does not place your "
                       "model: your own code chooses its device (expected no device in a file "
                       "for hetring_open; `hetring run` is the built-in trainer that uses it)",
                       cfg_where(c, k, "device", at, sizeof at), c->nodes[k].id,
                       c->nodes[k].device);
    }
    return HR_OK;
}

static hr_status load_config(hetring *h, const hetring_options *o) {
    char *e = h->err;
    const size_t n = sizeof h->err;
    if (h->app.c) { /* the application's, loaded and checked */
        h->c = h->app.c, h->self = h->app.self;
        return HR_OK;
    }
    cfg_init(&h->own);
    h->have_cfg = 1;
    h->c = &h->own;
    if (o->conf)
        HR_CHECK(cfg_parse_file(&h->own, o->conf, e, n));
    else
        HR_CHECK(cfg_parse_text(&h->own, o->conf_text, "conf_text", e, n));
    HR_CHECK(cfg_apply_env(&h->own, e, n));
    for (const char *const *s = o->set; s && *s; s++) HR_CHECK(cfg_set(&h->own, *s, e, n));
    HR_CHECK(cfg_validate(&h->own, e, n));
    char id[32];
    if (o->node_id >= 0) snprintf(id, sizeof id, "%ld", o->node_id);
    return node_id_resolve(&h->own, o->node_id >= 0 ? id : NULL, &h->self, e, n);
}

/* backend = nccl: refused with security, without NCCL in the build (unless the test fake is
 * armed for this node) and for a user whose gradients are host buffers: NCCL all-reduces device
 * memory, which only the built-in trainer hands over (app.device_grads). */
static hr_status check_backend(hetring *h) {
    const cfg *c = h->c;
    double arg;
    const int fake =
        hr_fault_fake_nccl() && hr_fault_get("fake_nccl", c->nodes[h->self].id, 0, &arg);
    HR_CHECK(transport_check_config(c, nccl_path_real() || fake, h->err, sizeof h->err));
    if (c->backend == CFG_BACKEND_NCCL && !h->app.device_grads)
        return hr_fail(h->err, sizeof h->err, HR_ERR_CONFIG,
                       "%s: [cluster] backend = nccl: libhetring takes this node's gradients in "
                       "host buffers (hetring_ready, hetring_step), and NCCL all-reduces device "
                       "memory; use backend = auto or tcp (the gradients then go over the TCP "
                       "ring)",
                       c->path);
    return HR_OK;
}

/* A library user's process: its BLAS kernels are described, never switched (blas_pick.h), and
 * a CPU that could run stronger ones than OpenBLAS picked is told what to set. */
static hr_status describe_blas(char *err, size_t errlen) {
    char why[HR_ERRLEN], line[320];
    if (blas_pick_init(why, sizeof why) != HR_OK)
        return hr_fail(err, errlen, HR_ERR_CONFIG, "hetring_open: %s", why);
    const char *set = blas_pick_advice();
    blas_pick_describe(line, sizeof line);
    if (set)
        HR_INFO(TRAIN, "%s", line);
    else
        HR_DEBUG(TRAIN, "%s", line);
    return HR_OK;
}

static hr_status setup(hetring *h, const hetring_options *o) {
    char *e = h->err;
    const size_t n = sizeof h->err;
    HR_CHECK(load_config(h, o));
    HR_CHECK(check_backend(h));
    if (!h->app.c) HR_CHECK(check_library_keys(h->c, e, n)); /* after backend = nccl's reason */
    const cfg *c = h->c;
    hr_log_set_node((int)c->nodes[h->self].id);
    if (!h->app.c) HR_CHECK(describe_blas(e, n));
    if (!(h->same = calloc((size_t)c->n_nodes, sizeof *h->same)))
        return hr_fail(e, n, HR_ERR_NOMEM, "out of memory");
    if (h->app.same)
        memcpy(h->same, h->app.same, (size_t)c->n_nodes * sizeof *h->same);
    else
        HR_CHECK(node_id_check_hosts(c, h->self, h->same, e, n));
    app_cluster_config(c, h->self, h->same, &h->cc);
    const long B = h->cc.global_batch;
    h->n_samples = o->n_samples > 0 ? o->n_samples : c->samples;
    h->ds.n = h->n_samples;
    HR_CHECK(data_loader_init(&h->dl, &h->ds, h->cc.seed, B, e, n));
    h->have_dl = 1;
    h->ipe = data_loader_iters_per_epoch(&h->dl, B);
    h->total = h->cc.iterations > 0 ? h->cc.iterations : h->cc.epochs * h->ipe;
    const size_t nn = (size_t)c->n_nodes;
    h->split = calloc(nn, sizeof *h->split);
    h->next = calloc(nn, sizeof *h->next);
    h->gathered = calloc(nn, sizeof *h->gathered);
    h->idx = calloc((size_t)B, sizeof *h->idx);
    h->facts = calloc(nn, sizeof *h->facts);
    h->member_ids = calloc(nn, sizeof *h->member_ids);
    h->bad_ids = calloc(nn, sizeof *h->bad_ids);
    h->told = -1;
    if (!h->split || !h->next || !h->gathered || !h->idx || !h->facts || !h->member_ids ||
        !h->bad_ids)
        return hr_fail(e, n, HR_ERR_NOMEM, "out of memory");
    if (o->start_iter < 0 || o->start_iter > h->total)
        return hr_fail(e, n, HR_ERR_INVAL,
                       "hetring_open: start_iter %ld is outside the run's iterations 0..%ld",
                       o->start_iter, h->total);
    h->iter = h->start_iter = o->start_iter; /* the election takes the furthest member's state */
    h->size = 1, h->split[0] = B;
    ring_config rc;
    HR_CHECK(node_id_check_reachable(c, h->self, h->same, e, n));
    HR_CHECK(app_ring_config(c, h->self, &rc, e, n));
    hr_status st = dist_init(&h->d, &h->cc, &rc, e, n);
    ring_config_wipe(&rc); /* the ring keeps its own copy of the PSK */
    h->have_dist = 1;
    HR_CHECK(st); /* a busy port names its FILE:LINE (rc.port_where) */
    h->d.np.device_grads = h->app.device_grads != NULL; /* a member fact of the choice */
    h->x.d = &h->d, h->x.device_grads = h->app.device_grads;
    if (h->app.on_listen) h->app.on_listen(h->cb.user);
    h->d.leave = h->leave_at;
    ring_set_stop(h->d.r, h->leave_at); /* a leave request ends an election waiting for quorum */
    const dist_state s = {.ctx = h,
                          .iter = st_iter,
                          .set_comm = st_set_comm,
                          .pack = st_pack,
                          .unpack = st_unpack,
                          .hash = st_hash,
                          .set_split = st_set_split,
                          .save = h->app.save ? st_save : NULL,
                          .metrics = h->app.metrics ? st_metrics : NULL,
                          .probe = h->app.probe ? st_probe : NULL,
                          .ipe = h->ipe,
                          .recorded = h->app.start_split,
                          .send_first = o->sync_first};
    h->moved = 0;
    HR_CHECK(dist_attach_state(&h->d, &s, e, n));
    report_view(h);
    return HR_OK;
}

int hetring_open(hetring **out, const hetring_options *o, char *err, size_t errlen) {
    return hr_lib_open(out, o, NULL, err, errlen);
}

int hr_lib_open(hetring **out, const hetring_options *o, const hetring_app *app, char *err,
                size_t errlen) {
    if (err && errlen) err[0] = 0;
    if (!out) return HETRING_EINVAL;
    *out = NULL;
    if (!o || (!app && !o->conf == !o->conf_text)) {
        if (err && errlen)
            snprintf(err, errlen,
                     "hetring_open: options need exactly one of conf (an INI file) and conf_text "
                     "(the INI in memory)");
        return HETRING_EINVAL;
    }
    if (!o->cb.get_state != !o->cb.put_state) {
        if (err && errlen)
            snprintf(err, errlen, "hetring_open: get_state and put_state go together");
        return HETRING_EINVAL;
    }
    char log_err[256]; /* with `app`, the application (hetring run) set its log up itself */
    if (!app && hr_log_init_from_env(log_err, sizeof log_err) != 0) {
        if (err && errlen) snprintf(err, errlen, "%s", log_err);
        return HETRING_ECONFIG;
    }
    hetring *h = calloc(1, sizeof *h);
    if (!h) return HETRING_ENOMEM;
    h->owner = getpid();
    if (app) h->app = *app;
    h->cb = o->cb;
    h->leave_at = o->leave_flag ? o->leave_flag : &h->leave;
    hr_status st = setup(h, o);
    if (st == HR_OK && h->app.n_grads &&
        !(h->buf = calloc((size_t)h->c->n_nodes * CLUSTER_NODE_STATS + h->app.n_grads,
                          sizeof *h->buf))) {
        snprintf(h->err, sizeof h->err, "out of memory for %zu floats of gradient",
                 h->app.n_grads);
        st = HR_ERR_NOMEM;
    }
    if (st != HR_OK) {
        if (!h->err[0]) snprintf(h->err, sizeof h->err, "%s", hr_strerror(st));
        if (err && errlen) snprintf(err, errlen, "%s", h->err);
        hetring_free(h);
        return status_of(st);
    }
    *out = h;
    return HETRING_OK;
}

float *hr_lib_grads(hetring *h) {
    return h->app.n_grads ? h->buf + (size_t)h->c->n_nodes * CLUSTER_NODE_STATS : NULL;
}

static int end_of_run(hetring *h);

int hetring_close(hetring *h) {
    if (!h) return HETRING_EINVAL;
    /* a forked child's copy: the end of the run, the connections and the communication threads
     * are the owner's; the child leaves them alone (its ring and control state stay allocated
     * until it exits, since freeing them would close and join what the owner still runs) */
    if (forked(h)) {
        h->have_dist = 0;
        h->closed = 1;
        return HETRING_OK;
    }
    /* a loop that stopped on its own count after the last step, without the hetring_next that
     * says DONE: the others wait on this node to agree on the end (end_of_run), so it does */
    if (!h->closed && !h->left && h->failed == HR_OK && h->have_dist && h->iter >= h->total &&
        !h->ended)
        (void)end_of_run(h);
    grad_xfer_stop(&h->x); /* waits for buckets still in flight (the ring's deadlines bound it) */
    if (h->have_dist) dist_free(&h->d);
    h->have_dist = 0;
    h->closed = 1;
    return HETRING_OK;
}

void hetring_free(hetring *h) {
    if (!h) return;
    hetring_close(h); /* in a forked child, touches neither the network nor threads */
    grad_xfer_free(&h->x);
    if (h->have_dl) data_loader_free(&h->dl);
    if (h->have_cfg) cfg_free(&h->own);
    free(h->split);
    free(h->next);
    free(h->gathered);
    free(h->idx);
    free(h->buf);
    free(h->counts);
    free(h->off);
    free(h->mat_shape);
    free(h->x.bucket_of);
    free(h->given);
    free(h->ptrs);
    free(h->facts);
    free(h->same);
    free(h->member_ids);
    free(h->bad_ids);
    free(h->blob);
    free(h);
}

void hetring_leave(hetring *h) {
    if (h) *h->leave_at = 1;
}

long hetring_node_id(const hetring *h) {
    return h && h->c ? h->c->nodes[h->self].id : -1;
}

int hr_lib_split(const hetring *h, long *out, int max) {
    if (!h) return 0;
    for (int k = 0; k < h->size && k < max; k++) out[k] = h->split[k];
    return h->size;
}

const float *hr_lib_residual(const hetring *h) {
    return h ? grad_xfer_residual(&h->x) : NULL;
}

/* hetring_residual's and hetring_powersgd_q's contract: `have` floats at src (0 without
 * any), their count, copied into out unless out is NULL; -1 when n is not that count. */
static long copy_out(const float *src, size_t have, float *out, size_t n) {
    if (!src || !have) return 0;
    if (!out) return (long)have;
    if (n != have) return -1;
    memcpy(out, src, sizeof *out * n);
    return (long)have;
}

long hetring_residual(const hetring *h, float *out, size_t n) {
    const float *r = h ? grad_xfer_residual(&h->x) : NULL;
    return copy_out(r, r ? (h->x.residual ? h->x.n_grad : h->x.n_resume) : 0, out, n);
}

/* A checkpoint's residual or Q is of the iteration the user resumed (start_iter). Where the
 * first view's state is further along, steps after the checkpoint were applied: a residual
 * this node had sent in them (it crashed after the checkpoint) or that they went without (it
 * left), and a Q they moved on from; either way it is not taken up (HETRING_SKIPPED), so a
 * residual is never counted twice. */
static int past_checkpoint(hetring *h, const char *fn, const char *what) {
    if (h->iter == h->start_iter) return 0;
    snprintf(h->err, sizeof h->err,
             "%s: the cluster is at iteration %ld, past the checkpoint's %ld: the steps since "
             "were applied with or without this %s, so it is not taken up",
             fn, h->iter, h->start_iter, what);
    return 1;
}

int hetring_resume_residual(hetring *h, const float *r, size_t n) {
    int us = usable(h);
    if (us != HETRING_OK) return us;
    if (!r || !n) return fail(h, HETRING_EINVAL, "hetring_resume_residual: no residual given");
    if (h->cc.wire == CFG_WIRE_FP32)
        return fail(h, HETRING_EINVAL,
                    "hetring_resume_residual: [cluster] wire = fp32 loses nothing on the wire "
                    "and has no use for a residual");
    if (h->x.n_bufs)
        return fail(h, HETRING_EINVAL,
                    "hetring_resume_residual: the first step was taken; give the residual "
                    "before it");
    if (past_checkpoint(h, "hetring_resume_residual", "node's residual")) return HETRING_SKIPPED;
    if (grad_xfer_resume(&h->x, r, n) != HR_OK)
        return fail(h, HETRING_ENOMEM, "hetring_resume_residual: out of memory");
    return HETRING_OK;
}

long hetring_powersgd_q(const hetring *h, float *out, size_t n) {
    size_t have = 0;
    const float *q = h ? grad_xfer_q(&h->x, &have) : NULL;
    return copy_out(q, have, out, n);
}

int hetring_resume_powersgd_q(hetring *h, const float *q, size_t n) {
    int us = usable(h);
    if (us != HETRING_OK) return us;
    if (!q || !n) return fail(h, HETRING_EINVAL, "hetring_resume_powersgd_q: no Q given");
    if (h->cc.wire != CFG_WIRE_POWERSGD && h->cc.wire != CFG_WIRE_AUTO)
        return fail(h, HETRING_EINVAL,
                    "hetring_resume_powersgd_q: [cluster] wire = %s has no low-rank Q",
                    cfg_wire_name(h->cc.wire));
    if (h->x.n_bufs)
        return fail(h, HETRING_EINVAL,
                    "hetring_resume_powersgd_q: the first step was taken; give Q before it");
    if (past_checkpoint(h, "hetring_resume_powersgd_q", "Q")) return HETRING_SKIPPED;
    if (grad_xfer_resume_q(&h->x, q, n) != HR_OK)
        return fail(h, HETRING_ENOMEM, "hetring_resume_powersgd_q: out of memory");
    return HETRING_OK;
}

const float *hr_lib_powersgd_q(const hetring *h, size_t *n) {
    *n = 0;
    return h ? grad_xfer_q(&h->x, n) : NULL;
}

int hr_lib_resume_residual(hetring *h, const float *r, size_t n) {
    if (!h || !r || !h->app.n_grads || n != h->app.n_grads || h->cc.wire == CFG_WIRE_FP32)
        return HETRING_EINVAL;
    if (past_checkpoint(h, "the checkpoint's residual", "node's residual")) return HETRING_SKIPPED;
    return grad_xfer_resume(&h->x, r, n) == HR_OK ? HETRING_OK : HETRING_ENOMEM;
}

int hr_lib_on_device(const hetring *h) {
    return h && h->have_dist && dist_on_nccl(&h->d);
}

const int *hr_lib_same_machine(const hetring *h) {
    return h ? h->same : NULL;
}

const char *hr_lib_ring_error(const hetring *h) {
    return h && h->have_dist ? ring_error(h->d.r) : "";
}
int hetring_rank(const hetring *h) {
    return h ? h->rank : -1;
}
int hetring_size(const hetring *h) {
    return h ? h->size : 0;
}
long hetring_global_batch(const hetring *h) {
    return h ? h->cc.global_batch : 0;
}
long hetring_samples(const hetring *h) {
    return h ? h->n_samples : 0;
}
long hetring_iterations(const hetring *h) {
    return h ? h->total : 0;
}

int hetring_nonfinite(const hetring *h, long *out, int max) {
    if (!h) return 0;
    for (int k = 0; out && k < max && k < h->n_bad; k++) out[k] = h->bad_ids[k];
    return h->n_bad;
}

long hetring_skipped(const hetring *h) {
    return h ? h->skipped : 0;
}

int hetring_members(const hetring *h, hetring_member *out, int max) {
    if (!h) return 0;
    for (int k = 0; out && k < max && k < h->n_members; k++)
        out[k] = (hetring_member){.id = h->member_ids[k],
                                  .batch = h->gathered[k].rec.b,
                                  .compute_s = h->gathered[k].rec.t};
    return h->n_members;
}

/* ================================================================ one iteration */

/* This node left: the ring closes so the others' view change does not wait for it. */
static int left(hetring *h) {
    h->left = 1;
    grad_xfer_stop(&h->x);
    if (h->have_dist) dist_free(&h->d);
    h->have_dist = 0;
    snprintf(h->err, sizeof h->err, "this node left the cluster at iteration %ld", h->iter);
    return HETRING_LEFT;
}

int hetring_next(hetring *h, hetring_batch *out) {
    int us = usable(h);
    if (us != HETRING_OK) return us;
    if (!out) return fail(h, HETRING_EINVAL, "hetring_next: no batch to fill");
    if (h->n_given)
        return fail(h, HETRING_EINVAL,
                    "hetring_next: iteration %ld has buffers handed over (hetring_ready); finish "
                    "it with hetring_step",
                    h->iter);
    h->err[0] = 0;
    if (h->boundary) {
        int changed = 0;
        h->boundary = 0;
        h->moved = 0;
        hr_status st = dist_boundary(&h->d, &changed, h->err, sizeof h->err);
        if (st == HR_ERR_INTERRUPTED) return left(h);
        if (st != HR_OK) return fatal(h, st);
        if (changed) h->view_changed = 1, h->skip_run = 0, report_view(h);
    }
    if (h->iter >= h->total && end_of_run(h) == HETRING_DONE) return HETRING_DONE;
    if (h->left) return HETRING_LEFT;
    const long start = data_slice_start(h->split, h->rank);
    const long B = h->cc.global_batch, b = h->split[h->rank], it = h->iter % h->ipe;
    const uint32_t *p = data_loader_perm(&h->dl, h->iter / h->ipe) + it * B + start;
    for (long i = 0; i < b; i++) h->idx[i] = p[i];
    *out = (hetring_batch){.iter = h->iter,
                           .epoch = h->iter / h->ipe,
                           .global_batch = B,
                           .batch = b,
                           .start = start,
                           .indices = h->idx,
                           .rank = h->rank,
                           .size = h->size,
                           .check_hash = dist_wants_hash(&h->d, h->iter),
                           .view_changed = h->view_changed,
                           .slowdown = train_stretch_factor(&h->cc.stretch, h->iter)};
    h->view_changed = 0;
    h->fetched = 1;
    return HETRING_OK;
}

/* ================================================================ buckets */

/* "overlap: ..." on rank 0 when whether buckets overlap differs from what was logged last, and
 * once a view when the facts are first measured, if that changes the reason (an off that
 * waited for the measurement says what it found). */
static void tell_choice(hetring *h, const char *why, int measured) {
    if (h->rank != 0) return;
    const int first_measured = measured && !h->told_measured;
    if (first_measured) h->told_measured = 1;
    if (h->path->overlaps == h->told && (!first_measured || strcmp(why, h->told_why) == 0)) return;
    snprintf(h->told_why, sizeof h->told_why, "%s", why);
    char line[600];
    overlap_choice_str(h->x.plan_bytes, h->x.n_buckets, h->path->overlaps, why, line,
                       sizeof line);
    HR_INFO(TRAIN, "%s", line);
    h->told = h->path->overlaps;
}

/* The float32 all-reduce's floats over the powersgd path's (0 without a plan): what wire =
 * auto weighs. */
static double psgd_ratio(const hetring *h) {
    const grad_psgd *s = &h->x.psgd;
    const double tail = (double)h->size * CLUSTER_NODE_STATS;
    if (!s->n_mats) return 0;
    return (tail + (double)h->x.n_grad) / (tail + (double)(s->n_plain + s->n_p + s->n_q));
}

/* The path of the current view (grad_path_choose), from the members' machine facts of the
 * last iteration when `gathered`. A bucket_bytes of its own is logged when the view's first
 * step chooses; auto, once the facts are in. */
static void choose_path(hetring *h, int gathered) {
    if (h->path && h->path_final) return;
    for (int k = 0; gathered && k < h->size; k++) h->facts[k] = h->gathered[k].machine;
    const grad_view v = {.nccl = dist_on_nccl(&h->d),
                         .bucket_bytes = h->cc.bucket_bytes,
                         .n_buckets = h->x.n_buckets,
                         .facts = gathered ? h->facts : NULL,
                         .n = h->size,
                         .tree = dist_tree_takes(&h->d, (size_t)h->size * CLUSTER_NODE_STATS +
                                                            h->x.n_grad),
                         .wire = h->cc.wire,
                         .bytes = sizeof(float) *
                                  ((size_t)h->size * CLUSTER_NODE_STATS + h->x.n_grad),
                         .psgd_ratio = psgd_ratio(h),
                         .auto_gbit = h->cc.wire_auto_gbit};
    char why[384];
    h->path = grad_path_choose(&v, why, sizeof why);
    /* chosen once a view from measured facts: a node measures only without buckets, and a
     * choice that followed each new measurement would go back and forth */
    const int measured = gathered && overlap_measured(h->facts, h->size);
    if (measured) h->path_final = 1;
    if (measured && h->cc.wire == CFG_WIRE_AUTO && h->rank == 0) { /* once a view */
        char w[400];
        grad_wire_auto(&v, w, sizeof w);
        HR_INFO(TRAIN, "%s", w);
    }
    if (h->path != &grad_path_nccl && (gathered || h->cc.bucket_bytes != OVERLAP_AUTO))
        tell_choice(h, why, measured);
    if (h->rank == 0 && h->path != h->told_path) {
        HR_INFO(TRAIN, "gradient path: %s%s", h->path->name,
                h->path == &grad_path_tree ? " (the view's tree takes the stats and the "
                                             "gradient: within tree_bytes, fewer hops)"
                                           : "");
        h->told_path = h->path;
    }
}

/* Whether the path is chosen again from the members' measured facts (bucket_bytes = auto,
 * wire = auto), which the all-reduce after backward then measures. */
static int chooses_later(const hetring *h) {
    return h->cc.bucket_bytes == OVERLAP_AUTO || h->cc.wire == CFG_WIRE_AUTO;
}

/* A new iteration's hand-over: nothing given yet, on the view's path. */
static void round_reset(hetring *h) {
    if (h->n_given) memset(h->given, 0, (size_t)h->x.n_bufs);
    h->n_given = 0;
    h->share_bad = 0;
    grad_xfer_reset(&h->x);
}

/* wire = powersgd needs the matrices declared (hetring_matrices), one shape per buffer, each
 * within its buffer; checked before the first step fixes the layout. */
static int check_matrices(hetring *h, const hetring_grads *g, const char *fn) {
    if (h->cc.wire != CFG_WIRE_POWERSGD && !(h->cc.wire == CFG_WIRE_AUTO && h->mat_shape))
        return HETRING_OK; /* auto without matrices stays float32 */
    if (!h->mat_shape)
        return fail(h, HETRING_EINVAL,
                    "%s: wire = powersgd compresses the gradient's matrices, and none was "
                    "declared (call hetring_matrices before the first step, or set wire = fp32)",
                    fn);
    if (h->n_mat != g->n_bufs)
        return fail(h, HETRING_EINVAL, "%s: %d buffers given, hetring_matrices declared %d", fn,
                    g->n_bufs, h->n_mat);
    for (int i = 0; i < g->n_bufs; i++) {
        const size_t rows = h->mat_shape[2 * i], cols = h->mat_shape[2 * i + 1];
        if (cols && rows > g->counts[i] / cols) /* rows * cols > counts, without overflow */
            return fail(h, HETRING_EINVAL,
                        "%s: buffer %d holds %zu floats, fewer than its declared %zu x %zu matrix",
                        fn, i, g->counts[i], rows, cols);
    }
    return HETRING_OK;
}

/* The powersgd path's matrices, from the declared shapes and the fixed layout; rank 0 says
 * what goes on the wire. Out of memory ends the node: the layout is fixed, and a path without
 * its plan would send everything as float32 without a word. */
static int plan_matrices(hetring *h, const char *fn) {
    psgd_mat *m = malloc(sizeof *m * (size_t)(h->x.n_bufs + 1));
    if (!m) {
        snprintf(h->err, sizeof h->err, "%s: out of memory for the powersgd plan", fn);
        return fatal(h, HR_ERR_NOMEM);
    }
    int n = 0;
    for (int i = 0; i < h->x.n_bufs; i++)
        if (h->mat_shape[2 * i] && h->mat_shape[2 * i + 1])
            m[n++] = (psgd_mat){h->off[i], h->mat_shape[2 * i], h->mat_shape[2 * i + 1]};
    const int kept =
        grad_xfer_matrices(&h->x, m, n, h->cc.powersgd_rank, h->cc.seed, h->cc.threads);
    free(m);
    if (kept < 0) {
        snprintf(h->err, sizeof h->err, "%s: out of memory for the powersgd plan", fn);
        return fatal(h, HR_ERR_NOMEM);
    }
    const grad_psgd *s = &h->x.psgd;
    const size_t sent = s->n_plain + s->n_p + s->n_q;
    if (!grad_xfer_q_fits(&h->x)) { /* the first view then starts Q from the seed */
        HR_WARN(TRAIN,
                "powersgd: the resumed Q holds %zu floats, this plan's %zu (another model or "
                "powersgd_rank?): starting Q from the seed",
                s->n_resume, s->n_q);
        (void)grad_xfer_resume_q(&h->x, NULL, 0);
    }
    if (h->rank == 0 && kept == 0)
        HR_WARN(TRAIN,
                "powersgd: none of the %d declared matrices would halve at rank %d (P and Q "
                "at most half its floats): the whole gradient goes as float32; a lower "
                "powersgd_rank compresses them",
                n, s->r);
    else if (h->rank == 0)
        HR_INFO(TRAIN,
                "powersgd: %d of %d declared matrices at rank %d (the others would not halve); "
                "%zu floats on the wire a step for %zu of gradient (%.1fx fewer)",
                kept, n, s->r, sent, h->x.n_grad, (double)h->x.n_grad / (double)sent);
    return HETRING_OK;
}

/* The buffers' layout: fixed by the first step (or hetring_ready), the same at every later
 * one. */
static int check_layout(hetring *h, const hetring_grads *g, const char *fn) {
    if (!g || g->n_bufs < 1 || !g->bufs || !g->counts)
        return fail(h, HETRING_EINVAL, "%s: no gradient buffers given", fn);
    if (h->x.n_bufs && g->n_bufs != h->x.n_bufs)
        return fail(h, HETRING_EINVAL, "%s: %d buffers given, the first step had %d", fn, g->n_bufs,
                    h->x.n_bufs);
    size_t total = 0;
    for (int i = 0; i < g->n_bufs; i++) {
        if (!g->bufs[i] && g->counts[i])
            return fail(h, HETRING_EINVAL, "%s: buffer %d is NULL", fn, i);
        if (h->x.n_bufs && g->counts[i] != h->counts[i])
            return fail(h, HETRING_EINVAL, "%s: buffer %d holds %zu floats, at the first step %zu",
                        fn, i, g->counts[i], h->counts[i]);
        total += g->counts[i];
    }
    if (total == 0) return fail(h, HETRING_EINVAL, "%s: the buffers hold no floats", fn);
    if (!h->x.n_bufs && h->x.resume && h->x.n_resume != total)
        return fail(h, HETRING_EINVAL,
                    "%s: the resumed residual holds %zu floats, the buffers %zu (a checkpoint "
                    "of another model?)",
                    fn, h->x.n_resume, total);
    if (h->app.n_grads) { /* in place: the buffers are consecutive pieces of hr_lib_grads */
        if (total > h->app.n_grads)
            return fail(h, HETRING_EINVAL, "%s: the buffers hold %zu floats, the gradient %zu",
                        fn, total, h->app.n_grads);
        for (size_t i = 0, o = 0; i < (size_t)g->n_bufs; o += g->counts[i], i++)
            if (g->counts[i] && g->bufs[i] != hr_lib_grads(h) + o)
                return fail(h, HETRING_EINVAL, "%s: buffer %zu is not in place", fn, i);
    }
    if (h->x.n_bufs) return HETRING_OK;
    const int mats_ok = check_matrices(h, g, fn);
    if (mats_ok != HETRING_OK) return mats_ok;
    const size_t n = (size_t)g->n_bufs, tail = (size_t)h->c->n_nodes * CLUSTER_NODE_STATS;
    size_t *counts = malloc(sizeof *counts * n), *off = malloc(sizeof *off * n);
    int *bucket_of = malloc(sizeof *bucket_of * n);
    unsigned char *given = calloc(n, 1);
    float **ptrs = malloc(sizeof *ptrs * n);
    float *buf = h->app.n_grads ? h->buf : malloc(sizeof *buf * (tail + total));
    if (!counts || !off || !bucket_of || !given || !ptrs || !buf) {
        if (h->app.n_grads) buf = NULL; /* the handle's, from open */
        /* nothing adopted: the next call tries again with nothing leaked */
        free(counts), free(off), free(bucket_of), free(given), free(ptrs), free(buf);
        return fail(h, HETRING_ENOMEM, "out of memory for %zu floats of gradient", total);
    }
    h->counts = counts, h->off = off, h->x.bucket_of = bucket_of;
    h->given = given, h->ptrs = ptrs, h->buf = buf;
    memcpy(h->counts, g->counts, sizeof *h->counts * n);
    for (size_t i = 0, o = 0; i < n; o += g->counts[i], i++) h->off[i] = o;
    h->x.n_bufs = g->n_bufs, h->x.n_grad = total;
    h->x.grads = h->buf + tail;
    grad_xfer_plan(&h->x, h->counts, h->off, g->n_bufs, h->cc.bucket_bytes);
    round_reset(h);
    const int psgd = h->cc.wire == CFG_WIRE_POWERSGD || (h->cc.wire == CFG_WIRE_AUTO && h->mat_shape);
    return psgd ? plan_matrices(h, fn) : HETRING_OK;
}

/* Test faults: the first float of every buffer node NODE hands over at iteration ITER becomes
 * NaN (nan_grad:NODE:ITER) or 3e38, finite but whose sum over two nodes is not (big_grad). */
static void fault_share(const hetring *h, float *buf, size_t n) {
    double at;
    const long id = hetring_node_id(h);
    if (n && hr_fault_get("nan_grad", id, -1, &at) && (long)at == h->iter) buf[0] = NAN;
    if (n && hr_fault_get("big_grad", id, -1, &at) && (long)at == h->iter) buf[0] = 3e38f;
}

/* Buffer i into its place in grads, checked (it may go out at once, and the communication
 * thread then owns it); with buckets on, the buckets it completes go out. In an NCCL view the
 * gradient is on the device and the host buffers hold none: only the loss is checked. */
static int give(hetring *h, const hetring_grads *g, int i) {
    if (g->counts[i] && !h->app.n_grads)
        memcpy(h->x.grads + h->off[i], g->bufs[i], sizeof *h->x.grads * g->counts[i]);
    if (h->path->host_grads) {
        fault_share(h, h->x.grads + h->off[i], g->counts[i]);
        h->share_bad |= grad_xfer_nonfinite(&h->x, h->off[i], h->off[i] + g->counts[i]);
    }
    h->given[i] = 1;
    h->n_given++;
    hr_status st = h->path->ready(&h->x, i);
    if (st != HR_OK)
        return fail(h, status_of(st), "could not start the communication thread (%s)",
                    hr_strerror(st));
    return HETRING_OK;
}

int hetring_ready(hetring *h, const hetring_grads *g, int i) {
    int us = usable(h);
    if (us != HETRING_OK) return us;
    if (!h->fetched)
        return fail(h, HETRING_EINVAL, "hetring_ready: call hetring_next first (iteration %ld)",
                    h->iter);
    if (h->n_given == 0) {
        if ((us = check_layout(h, g, "hetring_ready")) != HETRING_OK) return us;
        if (!h->path) choose_path(h, 0);
        memcpy(h->ptrs, g->bufs, sizeof *h->ptrs * (size_t)h->x.n_bufs);
    } else if (!g || g->n_bufs != h->x.n_bufs || !g->bufs) {
        return fail(h, HETRING_EINVAL,
                    "hetring_ready: the buffers differ from the ones of the first hetring_ready "
                    "of iteration %ld",
                    h->iter);
    }
    if (i < 0 || i >= h->x.n_bufs)
        return fail(h, HETRING_EINVAL, "hetring_ready: no buffer %d (there are %d)", i, h->x.n_bufs);
    if (g->bufs[i] != h->ptrs[i])
        return fail(h, HETRING_EINVAL,
                    "hetring_ready: buffer %d is not the one of the first hetring_ready of "
                    "iteration %ld",
                    i, h->iter);
    if (h->given[i])
        return fail(h, HETRING_EINVAL,
                    "hetring_ready: buffer %d was handed over already in "
                    "iteration %ld",
                    i, h->iter);
    h->err[0] = 0;
    h->readied = 1;
    return give(h, g, i);
}

/* A collective of the view failed with st: agree on a new view with the others (dist_recover:
 * its state may move this node on), HR_OK once it formed. */
static hr_status reform(hetring *h, hr_status st) {
    h->moved = 0;
    grad_xfer_failed(&h->x); /* the iteration runs again, unless the others applied it */
    st = dist_recover(&h->d, st, h->err, sizeof h->err);
    if (st != HR_OK) return st;
    h->view_changed = 1;
    h->skip_run = 0; /* a view counts its skipped steps anew, on every member alike */
    report_view(h);
    return HR_OK;
}

/* The all-reduce failed: a new view, and the iteration again (or the end of this node). */
static int recover(hetring *h, hr_status st) {
    st = reform(h, st);
    if (st == HR_ERR_INTERRUPTED) return left(h);
    if (st != HR_OK) return fatal(h, st);
    snprintf(h->err, sizeof h->err, "iteration %ld: the view changed; run it again", h->iter);
    return HETRING_RETRY;
}

/* The run's end, agreed with the view before HETRING_DONE: a barrier. A member whose last
 * all-reduce failed runs it again in a new view, and that view needs this node, the furthest
 * along, to take the state from: had it gone at once, the others could be left below the quorum,
 * or run the last step again with another split and end on other parameters. A failed barrier
 * is recovered from as a failed step is (the view that forms takes this node's state); where no
 * view forms, this node's own iterations are still done, and it says so. */
static int end_of_run(hetring *h) {
    while (!h->ended && h->iter >= h->total) {
        ring_set_ending(h->d.r, 1); /* an election here agrees the end: training is done */
        hr_status st = ring_barrier(h->d.r);
        if (st == HR_OK) {
            h->ended = 1;
            break;
        }
        HR_WARN(RING,
                "the run's end: this node's %ld iterations are done, but agreeing the end with "
                "the others failed; waiting up to rejoin_timeout %g s for a view to agree it in: "
                "a member whose last step failed runs it again in that view from this node's "
                "state, the furthest along, and without this node the others could be left "
                "below the quorum or end on other parameters (a leave ends the wait)",
                h->total, h->c->rejoin_timeout);
        st = reform(h, st); /* then the barrier again, in the new view */
        if (st == HR_ERR_INTERRUPTED) return left(h);
        if (st != HR_OK) {
            HR_WARN(RING,
                    "the run's end was not agreed with the other nodes (%s); this node's %ld "
                    "iterations are done",
                    h->err, h->total);
            h->err[0] = 0;
            h->ended = 1;
        }
    }
    if (h->iter < h->total && h->have_dist) ring_set_ending(h->d.r, 0); /* training goes on */
    return h->iter >= h->total ? HETRING_DONE : HETRING_OK;
}

/* A collective of the user's own inside an iteration (hetring.h). */
int hetring_allreduce(hetring *h, float *buf, size_t count) {
    int us = usable(h);
    if (us != HETRING_OK) return us;
    if (!h->fetched)
        return fail(h, HETRING_EINVAL, "hetring_allreduce: call hetring_next first (iteration %ld)",
                    h->iter);
    if (h->n_given)
        return fail(h, HETRING_EINVAL,
                    "hetring_allreduce: iteration %ld has buffers handed over (hetring_ready), "
                    "whose buckets use the ring; all-reduce before the first hetring_ready",
                    h->iter);
    if (!buf && count) return fail(h, HETRING_EINVAL, "hetring_allreduce: buf is NULL");
    h->err[0] = 0;
    if (count == 0) return HETRING_OK;
    hr_status st = dist_allreduce(&h->d, buf, count);
    if (st == HR_OK) return HETRING_OK;
    h->fetched = 0; /* the iteration is dropped: hetring_next gives it again */
    return recover(h, st);
}

/* This node's stats of the iteration into its slot of the tail before grads, with what its own
 * share held that is not finite (its buffers, checked as they were handed over, and its loss
 * sum as the float the slot carries). */
static void pack_stats(hetring *h, const hetring_grads *g, double factor, float *head) {
    const long b = h->split[h->rank];
    cluster_stat mine = {
        .rec = {.b = b, .t = factor * g->compute_s, .loss = g->loss_sum, .correct = g->correct},
        .machine = h->cc.machine};
    double at;
    if (hr_fault_get("nan_loss", hetring_node_id(h), -1, &at) && (long)at == h->iter)
        mine.rec.loss = NAN; /* a test fault: this node's loss */
    if (hr_fault_get("leave", hetring_node_id(h), -1, &at) && (long)at == h->iter)
        *h->leave_at = 1; /* a test fault: a leave asked for in this iteration, as by SIGTERM */
    if (!isfinite((float)mine.rec.loss)) h->share_bad |= DIST_FLAG_NONFINITE_LOSS;
    mine.machine.at_end = !h->readied; /* buckets overlap nothing in a loop without ready */
    mine.machine.comm_s = h->comm_s;
    mine.machine.comm_cpu_s = h->comm_cpu_s;
    mine.machine.alpha_s = h->link.alpha_s;
    mine.machine.beta_s = h->link.beta_s;
    h->readied = 0;
    dist_annotate(&h->d, h->iter, g->param_hash, h->share_bad, &mine);
    cluster_stats_pack(head, h->rank, h->size, &mine);
}

/* "node 1 (gradient), node 2 (gradient plus its error-feedback residual, loss)": the culprits
 * of a step, or "none". */
static void culprits_str(const long *ids, const int *bits, int n, char *out, size_t len) {
    size_t o = 0;
    snprintf(out, len, "none");
    for (int k = 0; k < n && o < len; k++) {
        const char *grad = bits[k] & DIST_FLAG_NONFINITE_GRAD ? "gradient"
                           : bits[k] & DIST_FLAG_NONFINITE_FEEDBACK
                               ? "gradient plus its error-feedback residual"
                               : "";
        const int loss = (bits[k] & DIST_FLAG_NONFINITE_LOSS) != 0;
        o += (size_t)snprintf(out + o, len - o, "%snode %ld (%s%s%s)", k ? ", " : "", ids[k], grad,
                              *grad && loss ? ", " : "", loss ? "loss" : "");
    }
}

/* Whether a step that is not finite stops every node: with nonfinite = error always; with skip
 * when it would be the skip_limit-th skipped in a row in this view (a run whose parameters
 * diverged would skip every step left). skip_run follows the verdicts every member reached
 * alike on the same bytes, from the view's start, so every member decides alike. */
static int nonfinite_stops(const hetring *h) {
    return !h->cc.skip_nonfinite || (h->cc.skip_limit > 0 && h->skip_run + 1 >= h->cc.skip_limit);
}

/* After the all-reduce: whether the step is finite, the same verdict on every node (the
 * culprits come from the gathered flags, the sums are the same bytes everywhere). When it is
 * not, h->err says so, naming the iteration and the culprits. */
static int step_finite(hetring *h) {
    int bits[RING_MAX_NODES];
    long ids[RING_MAX_NODES];
    const int n = dist_nonfinite(&h->d, h->gathered, h->size, ids, bits);
    double loss = 0;
    for (int k = 0; k < h->size; k++) loss += h->gathered[k].rec.loss;
    int any = 0; /* an NCCL view's sum is on the device: its shares' flags say for it */
    for (int k = 0; k < n; k++) any |= bits[k];
    const int grad_ok = !(any & (DIST_FLAG_NONFINITE_GRAD | DIST_FLAG_NONFINITE_FEEDBACK)) &&
                        (!h->path->host_grads || train_all_finite(h->x.grads, h->x.n_grad));
    const int loss_ok = !(any & DIST_FLAG_NONFINITE_LOSS) && isfinite(loss);
    if (grad_ok && loss_ok) return 1;
    memcpy(h->bad_ids, ids, sizeof *ids * (size_t)n);
    h->n_bad = n;
    char who[512];
    culprits_str(ids, bits, n, who, sizeof who);
    /* every share was finite as sent (each checked with the residual its exchange added):
     * what overflowed came after, the sum, or with powersgd the low-rank products too */
    const char *overflowed =
        h->sent == &grad_path_powersgd
            ? " (every share was finite: their low-rank products or their sums overflowed)"
            : " (every share was finite: their sum overflowed)";
    const int skip = h->cc.skip_nonfinite, stop = nonfinite_stops(h);
    char why[160];
    if (!skip)
        snprintf(why, sizeof why,
                 "stopping every node ([train] nonfinite = error; skip would "
                 "skip such steps)");
    else if (stop)
        snprintf(why, sizeof why,
                 "stopping every node: %ld steps in a row in this view were not finite ([train] "
                 "nonfinite = skip, nonfinite_limit = %ld)",
                 h->skip_run + 1, h->cc.skip_limit);
    else
        snprintf(why, sizeof why, "the step is skipped ([train] nonfinite = skip)");
    snprintf(h->err, sizeof h->err,
             "iteration %ld: the global %s not finite (NaN or inf); not finite before the "
             "all-reduce: %.170s%s; %s",
             h->iter,
             !grad_ok && !loss_ok ? "gradient and loss are"
             : !grad_ok           ? "gradient is"
                                  : "loss is",
             who, n ? "" : overflowed, why);
    return 0;
}

/* CPU seconds of the threads an all-reduce after backward runs on: this one and the ring's
 * engine threads. Not the process's: OpenBLAS's threads spin on for a while after each
 * product, and counted they made every all-reduce look busy (bench/README.md, "Overlap where
 * cores are short"). */
static double comm_cpu_s(const hetring *h) {
    return hr_thread_cpu_s() + ring_engine_cpu_s(h->d.r);
}

/* This view's probe of its links, once (LINK_PROBE): a collective, at the same point on every
 * member. An NCCL view's gradient does not take the TCP ring's tuning: none. */
static hr_status probe_links(hetring *h) {
    if (h->link_state != LINK_PROBE) return HR_OK;
    if (dist_on_nccl(&h->d)) {
        h->link_state = LINK_DONE;
        return HR_OK;
    }
    HR_CHECK(ring_probe_links(h->d.r, &h->link));
    h->link_state = LINK_TUNE;
    return HR_OK;
}

/* Once every member's probe is gathered: the view's tree cut-off and, with bucket_bytes =
 * auto, its bucket plan (link_tune, the same on every member, applied at the same point of
 * the view's collectives: after the step's all-reduce), and the path again, which the cut
 * may move off the tree. Logged once a view on rank 0. */
static void tune_links(hetring *h) {
    if (h->link_state != LINK_TUNE) return;
    for (int k = 0; k < h->size; k++) h->facts[k] = h->gathered[k].machine;
    link_choice c;
    char why[384];
    if (!link_tune(h->facts, h->size, ring_tree_bytes(h->d.r), h->cc.bucket_bytes, h->counts,
                   h->x.n_bufs, &c, why, sizeof why))
        return; /* a member without its probe yet (it probed after its all-reduce) */
    h->link_state = LINK_DONE;
    ring_set_tree_cut(h->d.r, c.tree_cut);
    if (h->cc.bucket_bytes == OVERLAP_AUTO && c.bucket_bytes != h->x.plan_bytes) {
        grad_xfer_plan(&h->x, h->counts, h->off, h->x.n_bufs, c.bucket_bytes);
        round_reset(h);
    }
    if (h->rank == 0) HR_INFO(TRAIN, "%s", why);
    h->path_final = 0;
    if (!chooses_later(h)) choose_path(h, 1); /* else the caller chooses next */
}

/* The iteration's all-reduce of this node's buffers and stats: every node's stats into
 * h->gathered. A failure elects a new view (HETRING_RETRY) or ends the node. */
static int step_exchange(hetring *h, const hetring_grads *g, double factor) {
    for (int i = 0; i < g->n_bufs; i++)
        if (!h->given[i]) (void)give(h, g, i); /* a failed thread start shows in exchange */
    const size_t tail = (size_t)h->size * CLUSTER_NODE_STATS;
    float *head = h->x.grads - tail; /* the tail leads the last bucket */
    h->fetched = 0;
    /* before the all-reduce, or after it on a path whose buckets may be out (the ring is the
     * communication thread's then): a fact of the path, the same on every member, not of how
     * far this node's buckets got */
    hr_status st = h->path->overlaps ? HR_OK : probe_links(h);
    if (st != HR_OK) {
        round_reset(h);
        return recover(h, st);
    }
    pack_stats(h, g, factor, head);
    /* what overlap would hide, and what its thread would take: timed only for bucket_bytes =
     * auto, the one reader, and not the view's first all-reduce (new links, first touches) */
    const int timed = chooses_later(h) && !h->path->overlaps;
    const double t0 = timed ? hr_now() : 0, c0 = timed ? comm_cpu_s(h) : 0;
    h->sent = h->path;
    st = h->path->exchange(&h->x, head, tail);
    const double t1 = timed ? hr_now() : 0, c1 = timed ? comm_cpu_s(h) : 0;
    if (st == HR_OK) st = probe_links(h); /* the ring is idle now, whatever the path */
    double at;
    if (st == HR_OK && hr_fault_get("fail_view", hetring_node_id(h), -1, &at) &&
        (long)at == h->iter) /* a test fault: this node's links fail once its all-reduce is in */
        st = ring_fail_view(h->d.r, HR_ERR_IO, "test fault: the view failed after the all-reduce");
    round_reset(h);
    if (st != HR_OK) return recover(h, st);
    if (timed && h->comm_n < 2) h->comm_n++; /* stops at 2: a view may last 2^31 steps */
    if (timed && h->comm_n >= 2) h->comm_s = t1 - t0, h->comm_cpu_s = c1 - c0;
    cluster_stats_unpack(head, h->size, h->gathered);
    memcpy(h->member_ids, ring_get_view(h->d.r)->ids, sizeof *h->member_ids * (size_t)h->size);
    h->n_members = h->size;
    tune_links(h);
    if (chooses_later(h)) choose_path(h, 1);
    return HETRING_OK;
}

/* The buffers get the sum over the cluster times 1/B (I2); in place (hetring run) the sums
 * stay, for the trainer's optimizer divides by B itself. */
static void scale_back(hetring *h, const hetring_grads *g) {
    const float inv = 1.0f / (float)h->cc.global_batch;
    for (int i = 0; !h->app.n_grads && i < g->n_bufs; i++) {
        float *dst = g->bufs[i];
        const float *src = h->x.grads + h->off[i];
        for (size_t j = 0; j < g->counts[i]; j++) dst[j] = src[j] * inv;
    }
}

int hetring_matrices(hetring *h, const size_t *rows, const size_t *cols, int n_bufs) {
    int us = usable(h);
    if (us != HETRING_OK) return us;
    if (!rows || !cols || n_bufs < 1)
        return fail(h, HETRING_EINVAL, "hetring_matrices: no shapes given");
    if (h->x.n_bufs)
        return fail(h, HETRING_EINVAL,
                    "hetring_matrices: the first step fixed the layout; declare the matrices "
                    "before it");
    size_t *shape = malloc(sizeof *shape * 2 * (size_t)n_bufs);
    if (!shape) return fail(h, HETRING_ENOMEM, "hetring_matrices: out of memory");
    for (int i = 0; i < n_bufs; i++) shape[2 * i] = rows[i], shape[2 * i + 1] = cols[i];
    free(h->mat_shape);
    h->mat_shape = shape, h->n_mat = n_bufs;
    return HETRING_OK;
}

int hetring_step(hetring *h, const hetring_grads *g, hetring_result *res) {
    int us = usable(h);
    if (us != HETRING_OK) return us;
    if (!h->fetched)
        return fail(h, HETRING_EINVAL, "hetring_step: call hetring_next first (iteration %ld)",
                    h->iter);
    if ((us = check_layout(h, g, "hetring_step")) != HETRING_OK) return us;
    if (!h->path) choose_path(h, 0);
    for (int i = 0; h->n_given && i < g->n_bufs; i++)
        if (h->given[i] && g->bufs[i] != h->ptrs[i])
            return fail(h, HETRING_EINVAL,
                        "hetring_step: buffer %d is not the one hetring_ready was given", i);
    if (!(g->compute_s >= CTRL_T_MIN && g->compute_s <= CTRL_T_MAX))
        return fail(h, HETRING_EINVAL,
                    "hetring_step: compute_s must be the seconds this node's compute took, above "
                    "0 and at most %g, not %g (time it with a fine clock, e.g. "
                    "time.perf_counter())",
                    CTRL_T_MAX, g->compute_s);
    h->err[0] = 0;
    const double factor = train_stretch_factor(&h->cc.stretch, h->iter);
    hr_sleep((factor - 1) * g->compute_s); /* an emulated slow node (labelled as such) */
    const double t0 = hr_now();
    const int early = h->path->overlaps ? h->x.next_bucket : 0; /* sent while the user computed */
    const int buckets = h->path->overlaps ? h->x.n_buckets : 1;
    if ((us = step_exchange(h, g, factor)) != HETRING_OK) return us;
    memcpy(h->next, h->split, sizeof *h->next * (size_t)h->size);
    hr_status st = dist_decide(&h->d, h->iter, h->gathered, h->size, h->next);
    if (st != HR_OK) {
        snprintf(h->err, sizeof h->err, "iteration %ld: %s", h->iter,
                 st == HR_ERR_MISMATCH
                     ? "the nodes disagree (the log names them); stopped"
                     : "the controller refused the gathered timings (the log names the node)");
        return fatal(h, st);
    }
    const int finite = step_finite(h);
    if (!finite && nonfinite_stops(h)) return fatal(h, HR_ERR_NONFINITE); /* nothing applied */
    int changed = memcmp(h->next, h->split, sizeof *h->next * (size_t)h->size) != 0;
    st_set_split(h, h->next);
    scale_back(h, g);
    const long B = h->cc.global_batch;
    double loss = 0, correct = 0;
    for (int k = 0; k < h->size; k++)
        loss += h->gathered[k].rec.loss, correct += h->gathered[k].rec.correct;
    if (res)
        *res = (hetring_result){.iter = h->iter,
                                .loss = loss / (double)B,
                                .accuracy = correct / (double)B,
                                .next_batch = h->split[h->rank],
                                .changed = changed,
                                .t_compute = g->compute_s,
                                .t_node = factor * g->compute_s,
                                .t_comm = hr_now() - t0,
                                .buckets = buckets,
                                .early = early};
    if (finite) /* the lossy paths' residual, of an applied step */
        grad_xfer_commit(&h->x);
    else
        grad_xfer_discard(&h->x);
    h->iter++; /* the commit, skipped or not: the samples count as used (I8) */
    h->boundary = 1;
    h->skip_run = finite ? 0 : h->skip_run + 1;
    if (finite) return HETRING_OK;
    h->skipped++;
    HR_WARN(TRAIN, "%s; %ld step(s) skipped", h->err, h->skipped);
    return HETRING_SKIPPED;
}
