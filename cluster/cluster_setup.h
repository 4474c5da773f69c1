/*
 * cluster_setup.h: the cluster engine's own small config (dist.c and libhetring, hetring.c),
 * made from the INI config once per node.
 *
 * B lives here for the cluster: dist.c hands it to the controller, and hetring.c cuts every
 * iteration's slices (I1) and scales the sums (I2) by it; nothing else in cluster/ keeps a
 * copy. The trainer keeps its own (train_config.global_batch) for a run alone and for its
 * optimizer, and the controller the one it is initialised with.
 *
 * It also holds everything of the file that the views need (dist.c, nccl_path.c), converted
 * once here, the controller's config included: dist.c reads no cfg.
 */
#ifndef HR_CLUSTER_SETUP_H
#define HR_CLUSTER_SETUP_H

#include "cluster/overlap.h"
#include "conf/cfg.h"
#include "ctrl/ctrl.h"
#include "trainer/train.h"

#include <stdint.h>

/* A node of the file, as the views need it. */
typedef struct {
    long id;         /* its node id */
    double capacity; /* [node] capacity: its speed hint for a first split */
    int gpu;         /* device = cuda:N */
} cluster_node;

typedef struct {
    long global_batch;     /* B, samples per iteration across the nodes of a view */
    uint64_t seed;         /* every epoch's permutation (I1) */
    long iterations;       /* iterations of the run; 0: `epochs` passes over the samples */
    long epochs;           /* passes over the samples when iterations is 0 */
    long bucket_bytes;     /* gradient buckets: OVERLAP_AUTO, 0 (one all-reduce) or bytes */
    overlap_fact machine;  /* this node's cores and its machine's threads (bucket_bytes = auto) */
    train_stretch stretch; /* this node's emulated slowdown, applied by hetring_step */
    int max_nodes;         /* nodes of the configuration: the most a view can have */
    int skip_nonfinite;    /* a step whose global gradient or loss is not finite: 1 skips it
                            * (HETRING_SKIPPED), 0 stops every node (HETRING_ENONFINITE) */
    long skip_limit;       /* skip_nonfinite: every node stops at the step that would be this
                            * many skipped in a row in one view (0: never) */
    /* what the views need of the file */
    char path[CFG_PATH];                 /* the file, for messages */
    long self_id;                        /* this node's id */
    int self_device;                     /* this node's cuda:N, or -1 */
    cluster_node nodes[CFG_MAX_NODES];   /* (max_nodes) every node of the file, in its order */
    ctrl_config ctrl;                    /* the controller's settings */
    int calibrate;                       /* time a view's first split ([controller] calibrate,
                                          * not under the static policy) */
    long hash_interval;                  /* iterations between parameter hash checks */
    double connect_timeout;              /* [cluster] connect_timeout, seconds */
    double step_timeout;                 /* [cluster] step_timeout (times the slowest step), 0: off */
    int backend;                         /* cfg_backend */
    int wire;                            /* cfg_wire: the gradient's format on the wire */
    int powersgd_rank;                   /* wire = powersgd: each matrix's rank */
    int threads;                         /* [node] threads, 0 resolved to the cores this process
                                          * may use: the low-rank products split over them */
    double wire_auto_gbit;               /* wire = auto: powersgd below this bus rate */
    int link_probe;                      /* time the links at each view's first step and tune
                                          * the tree's cut-off and buckets (link_tune.h) */
    int security;                        /* cfg_security, resolved */
    char checkpoint[CFG_PATH];           /* this node's checkpoint file ("{id}" replaced), written on
                                          * leaving; "" for none */
} cluster_config;

/* The index in cc->nodes of node `id`, or -1. */
int cluster_node_index(const cluster_config *cc, long id);

/* Fill `out` for node c->nodes[self_idx]; its machine fact counts the cores this process may
 * use now (hr_cores) against the threads of the nodes on its machine (same: app_same_machine,
 * cluster/trainer_setup.h). */
void app_cluster_config(const cfg *c, int self_idx, const int *same, cluster_config *out);

#endif
