/* fuzz_seeds.h: what gen_seeds.c writes and the targets read back the same way. */
#ifndef HR_FUZZ_SEEDS_H
#define HR_FUZZ_SEEDS_H

/* The run of the seed checkpoints: 40 parameters, 4 nodes, an MLP 4-4-4 (the seeds of version 5
 * record the shape; the earlier ones, kept in corpus/ckpt, do not). */
#define FUZZ_CKPT_PARAMS    40
#define FUZZ_CKPT_MAX_NODES 8
#define FUZZ_CKPT_META                                                                             \
    (ckpt_meta) {                                                                                  \
        .iter = 7, .n_params = FUZZ_CKPT_PARAMS, .seed = 42, .global_batch = 64, .model = 2,       \
        .n_nodes = 4, .n_shape = 2, .shape = {                                                     \
            {4, 4},                                                                                \
            {4, 4}                                                                                 \
        }                                                                                          \
    }

#endif
