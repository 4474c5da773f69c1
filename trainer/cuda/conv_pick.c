/* conv_pick.c: the choice of cuDNN convolution algorithm (conv_pick.h). */
#include "trainer/cuda/conv_pick.h"

int conv_pick(const conv_algo_cand *cand, int n, size_t workspace_limit) {
    for (int i = 0; i < n; i++)
        if (cand[i].available && cand[i].deterministic && !cand[i].tensor_op &&
            cand[i].workspace <= workspace_limit)
            return i;
    return -1;
}
