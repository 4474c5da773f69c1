/*
 * cluster_setup.c: cfg -> cluster_config (see cluster_setup.h).
 */
#include "cluster/cluster_setup.h"
#include "base/hr_cores.h"
#include "cluster/powersgd.h"
#include "cluster/trainer_setup.h"

#include <stdio.h>
#include <string.h>

/* This node's fact for bucket_bytes = auto (overlap.h): the nodes on its machine (hetring local,
 * or several nodes per machine: same, app_same_machine), each with its compute threads and a
 * communication thread, against the cores this process may use. */
static overlap_fact machine_of(const cfg *c, int self_idx, const int *same) {
    long threads[CFG_MAX_NODES];
    int n = 0;
    const cfg_node *me = &c->nodes[self_idx];
    for (int k = 0; k < c->n_nodes && n < CFG_MAX_NODES; k++)
        if (app_same_machine(c, self_idx, same, k)) threads[n++] = c->nodes[k].threads;
    return overlap_fact_of(me->id, hr_cores(), threads, n);
}

void app_cluster_config(const cfg *c, int self_idx, const int *same, cluster_config *out) {
    memset(out, 0, sizeof *out);
    out->global_batch = c->global_batch;
    out->seed = c->seed;
    out->iterations = c->iterations;
    out->epochs = c->epochs;
    out->bucket_bytes = c->bucket_bytes == CFG_AUTO ? OVERLAP_AUTO : c->bucket_bytes;
    out->machine = machine_of(c, self_idx, same);
    const long threads =
        c->nodes[self_idx].threads > 0 ? c->nodes[self_idx].threads : out->machine.cores;
    out->threads = threads < PSGD_MAX_THREADS ? (int)threads : PSGD_MAX_THREADS;
    app_train_stretch(c, self_idx, &out->stretch);
    out->max_nodes = c->n_nodes;
    out->skip_nonfinite = c->nonfinite == CFG_NONFINITE_SKIP;
    out->skip_limit = c->nonfinite_limit;
    snprintf(out->path, sizeof out->path, "%s", c->path);
    out->self_id = c->nodes[self_idx].id;
    out->self_device = c->nodes[self_idx].device >= 0 ? (int)c->nodes[self_idx].device : -1;
    for (int k = 0; k < c->n_nodes; k++)
        out->nodes[k] = (cluster_node){.id = c->nodes[k].id,
                                       .capacity = c->nodes[k].capacity,
                                       .gpu = c->nodes[k].device >= 0};
    app_ctrl_config(c, &out->ctrl);
    out->calibrate = c->calibrate && c->policy != CFG_POLICY_STATIC;
    out->hash_interval = c->hash_interval;
    out->connect_timeout = c->connect_timeout;
    out->step_timeout = c->step_timeout;
    out->backend = c->backend;
    out->wire = c->wire;
    out->powersgd_rank = (int)c->powersgd_rank;
    out->wire_auto_gbit = c->wire_auto_gbit;
    out->link_probe = c->link_probe;
    out->security = c->security;
    app_checkpoint_path(c, self_idx, out->checkpoint, sizeof out->checkpoint);
}

int cluster_node_index(const cluster_config *cc, long id) {
    for (int k = 0; k < cc->max_nodes; k++)
        if (cc->nodes[k].id == id) return k;
    return -1;
}
