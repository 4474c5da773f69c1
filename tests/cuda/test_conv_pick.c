/*
 * test_conv_pick.c: the choice of cuDNN convolution algorithm (trainer/cuda/conv_pick.h), which
 * runs without a GPU: the first of cuDNN's ranked candidates that is available, deterministic,
 * free of tensor cores (no TF32) and within the workspace the context holds; none, and the
 * shape runs on im2col. Also that a cuDNN build reports the library it loaded.
 */
#include "tests/check.h"
#include "trainer/cuda/conv_pick.h"
#include "trainer/cuda/cuda_layers.h"

#include <string.h>

/* A candidate that qualifies under any limit of at least `ws` bytes. */
static conv_algo_cand good(int algo, size_t ws) {
    conv_algo_cand c = {algo, 1, 1, 0, ws};
    return c;
}

int main(void) {
    conv_algo_cand c[4];

    c[0] = good(7, 100), c[1] = good(1, 0);
    CHECK(conv_pick(c, 2, 1000) == 0, "the heuristics' first qualifying choice is taken");

    c[0].deterministic = 0;
    CHECK(conv_pick(c, 2, 1000) == 1, "a non-deterministic algorithm was taken");

    c[0] = good(7, 100), c[0].tensor_op = 1;
    CHECK(conv_pick(c, 2, 1000) == 1, "a tensor-core (TF32) algorithm was taken");

    c[0] = good(7, 100), c[0].available = 0;
    CHECK(conv_pick(c, 2, 1000) == 1, "an algorithm cuDNN cannot run for the shape was taken");

    c[0] = good(7, 1001);
    CHECK(conv_pick(c, 2, 1000) == 1, "an algorithm over the workspace limit was taken");
    c[0] = good(7, 1000);
    CHECK(conv_pick(c, 2, 1000) == 0, "an algorithm needing exactly the limit was refused");

    c[0] = good(7, 5000), c[1] = good(1, 0), c[1].deterministic = 0;
    c[2] = good(2, 10), c[2].tensor_op = 1;
    CHECK(conv_pick(c, 3, 1000) == -1, "none qualifies: im2col, not %d", conv_pick(c, 3, 1000));
    CHECK(conv_pick(c, 0, 1000) == -1, "an empty list picked something");

    const char *v = cuda_cudnn_version();
    printf("%s\n", v);
#ifdef HR_HAVE_CUDNN
    CHECK(!strncmp(v, "cuDNN 9.", 8), "a cuDNN 9 build loaded %s", v);
#else
    CHECK(strstr(v, "built without cuDNN") != NULL, "a build without cuDNN says %s", v);
#endif
    return check_exit();
}
