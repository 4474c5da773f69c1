/*
 * stats.c: packing and unpacking the stats tail (see stats.h). The slot holds floats because
 * the all-reduce is a float SUM.
 */
#include "cluster/stats.h"

#include <string.h>

void cluster_stats_pack(float *tail, int rank, int size, const cluster_stat *mine) {
    memset(tail, 0, sizeof *tail * (size_t)size * CLUSTER_NODE_STATS);
    float *slot = tail + (long)rank * CLUSTER_NODE_STATS;
    slot[0] = (float)mine->rec.b;
    slot[1] = (float)mine->rec.t;
    slot[2] = (float)mine->rec.loss;
    slot[3] = (float)mine->rec.correct;
    slot[4] = (float)mine->machine.id;
    slot[5] = (float)mine->machine.cores;
    slot[6] = (float)mine->machine.demand;
    slot[7] = (float)mine->machine.at_end;
    slot[8] = (float)mine->machine.comm_s;
    slot[9] = (float)mine->machine.comm_cpu_s;
    slot[10] = (float)mine->machine.hosted;
    slot[11] = (float)mine->machine.alpha_s;
    slot[12] = (float)mine->machine.beta_s;
    memcpy(slot + 13, mine->extra, sizeof mine->extra);
}

void cluster_stats_unpack(const float *tail, int size, cluster_stat *out) {
    for (int k = 0; k < size; k++) {
        const float *slot = tail + (long)k * CLUSTER_NODE_STATS;
        out[k].rec = (train_stat){(long)slot[0], slot[1], slot[2], (long)slot[3]};
        out[k].machine = (overlap_fact){.id = (long)slot[4],
                                        .cores = (long)slot[5],
                                        .demand = (long)slot[6],
                                        .at_end = (long)slot[7],
                                        .comm_s = slot[8],
                                        .comm_cpu_s = slot[9],
                                        .compute_s = slot[1],
                                        .hosted = (long)slot[10],
                                        .alpha_s = slot[11],
                                        .beta_s = slot[12]};
        memcpy(out[k].extra, slot + 13, sizeof out[k].extra);
    }
}
