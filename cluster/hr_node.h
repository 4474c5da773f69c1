/*
 * hr_node.h: the built-in trainer as one node of a cluster, through libhetring (hetring.h).
 *
 * `hetring run` trains a cluster of several nodes as any libhetring user would: the trainer's
 * state travels through get_state/put_state, every iteration's slice comes from hetring_next,
 * backward hands each layer's gradient to hetring_ready as it finishes it (the library sends
 * the buckets it completes), and hetring_step all-reduces the rest with the stats, checks the
 * agreement hashes and returns the next split. The trainer plugs in as a train_peer; the
 * membership hooks of train_run (on_fail, after_iter, tag) turn the library's statuses into the
 * run's: HETRING_RETRY re-runs the iteration, HETRING_LEFT ends the run as a success.
 *
 * The few things the public API leaves out come through hetring_app.h: the configuration the
 * command already loaded and the nodes on its machine it looked up, the gradient buffer in
 * place, a resumed split, the checkpoint on leaving, the metrics file for view records and the
 * moment the port is bound.
 *
 * Iteration order, as train_run sees it:
 *   on_iter(k)      test faults (crash:NODE:ITER)
 *   train_step      slice (the batch after_iter fetched, or hetring_next after a retry),
 *                   compute with ready calls, hetring_step (exchange), the update
 *   after_iter      hetring_next for k + 1: a view change a member asked for at k runs here,
 *                   after this node applied k and wrote its checkpoint
 */
#ifndef HR_NODE_H
#define HR_NODE_H

#include "cluster/hetring.h"
#include "conf/cfg.h"
#include "ring/ring.h"
#include "trainer/train.h"

#include <signal.h>
#include <stdint.h>

typedef struct {
    trainer *t;              /* the node's trainer (borrowed) */
    const cfg *c;            /* configuration (borrowed) */
    int self;                /* index of this node in c->nodes */
    hetring *h;              /* the library's node */
    hetring_batch batch;     /* the iteration fetched and not yet run */
    int have_batch;          /* batch is valid */
    int retry;               /* the last exchange ended in HETRING_RETRY */
    int lent;                /* the model computes into the library's buffer (hr_lib_grads) */
    int n_bufs;              /* gradient buffers: one per layer with parameters */
    float **bufs;            /* (n_bufs) */
    size_t *counts;          /* (n_bufs) */
    size_t *offs;            /* (n_bufs) each buffer's offset in the model's gradient */
    int next_ready;          /* buffers [next_ready, n_bufs) were handed over this iteration */
    int ready_status;        /* the first hetring_ready failure of the iteration, or 0 */
    hetring_member *members; /* (c->n_nodes) the last step's */
    train_stat *stats;       /* (c->n_nodes) the same as the trainer's view gives them */
    long *split;             /* (c->n_nodes) the next split, as the trainer's view gives it */
    unsigned char *blob;     /* the state as get_state gives it */
    size_t blob_cap;         /* bytes allocated for blob */
    /* the view, as the last on_view said it (metrics records are tagged with it) */
    uint64_t epoch;
    long ids[RING_MAX_NODES];
    int n;
    int views;                    /* views installed */
    void (*on_listen)(void *ctx); /* the port is bound (may be NULL) */
    void *listen_ctx;
} hr_node;

/* Join the cluster as node `self` of c with trainer t (built with app_train_config, resumed
 * from its own checkpoint if it had one, whose split of every node is start_split, or NULL when
 * it recorded none), `same` the nodes on its machine as node_id_check_hosts found them for the
 * trainer (NULL: the library looks them up): bind the port (then on_listen), elect the first view
 * with the reachable nodes and take the newest state any of them holds; with bucket_bytes =
 * auto, say this node's cores (hr_node_describe_overlap).
 * `leave` (may be NULL) makes this node leave at the next boundary, and ends the wait for a
 * quorum. On failure err says why, and hr_node_close is still needed. */
hr_status hr_node_open(hr_node *n, const cfg *c, int self, const int *same, trainer *t,
                       const long *start_split, volatile sig_atomic_t *leave,
                       void (*on_listen)(void *ctx), void *ctx, char *err, size_t errlen);

/* How node `self` of c, with trainer t's model, overlaps communication with backward, in one
 * line for the start and the dry run: "overlap: 2 buckets of >= 1 MiB, ... (auto: ...)", with
 * this node's cores and the nodes on its machine (same: app_same_machine). The library cuts
 * the same buckets from the model's layers. */
void hr_node_describe_overlap(const trainer *t, const cfg *c, int self, const int *same, char *out,
                              size_t n);

/* train_run's membership hooks for this node (on_fail, after_iter, tag). */
void hr_node_hooks(hr_node *n, train_opts *o);

/* The ring's account of its last failure ("" when none). */
const char *hr_node_ring_error(const hr_node *n);

void hr_node_close(hr_node *n);

#endif
