/*
 * test_cuda_sgd.c: the device SGD step against opt_step (optim.h) over several iterations
 * with warm-up, momentum and weight decay. The two must agree BIT FOR BIT: that is what keeps
 * a GPU replica identical to CPU replicas that all-reduced the same gradient (I4). Exits 77
 * without a CUDA device.
 */
#include "tests/check.h"
#include "tests/blas_main.h"
#include "tests/cuda/cuda_test_util.h"
#include "trainer/optim.h"

int main(int argc, char **argv) {
    (void)argc;
    test_blas_main(argv);
    CUDA_SKIP_IF_NO_DEVICE();
    const long n = 1000003, B = 384;
    char err[HR_ERRLEN];
    cuda_ctx ctx;
    if (cuda_ctx_init(&ctx, 0, err, sizeof err) != HR_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    opt_sgd o;
    memset(&o, 0, sizeof o);
    o.lr = 0.05, o.schedule = OPT_LR_COSINE, o.warmup = 3, o.total = 10;
    o.momentum = 0.9, o.weight_decay = 5e-4, o.n = n;
    o.vel = xmalloc(sizeof(float) * n);
    float *p = xmalloc(sizeof(float) * n), *g = xmalloc(sizeof(float) * n);
    float *hp = xmalloc(sizeof(float) * n), *hv = xmalloc(sizeof(float) * n);
    fill_uniform(p, n, 9, 1, 1.0f);
    float *d_p = dev_copy(p, sizeof(float) * n), *d_v = dev_alloc(sizeof(float) * n);
    float *d_g = dev_alloc(sizeof(float) * n);
    for (long it = 0; it < 10; it++) {
        fill_uniform(g, n, 9, 100 + (uint64_t)it, 50.0f); /* gradient sums over B samples */
        to_device(d_g, g, sizeof(float) * n); /* after the last step's queued kernel read it */
        opt_step(&o, p, g, B, it);
        HR_DIE(cuda_sgd_step(&ctx, d_p, d_v, d_g, n, (float)opt_lr(&o, it), (float)o.momentum,
                             (float)o.weight_decay, 1.0f / (float)B));
    }
    HR_DIE(cuda_ctx_sync(&ctx));
    to_host(hp, d_p, sizeof(float) * n);
    to_host(hv, d_v, sizeof(float) * n);
    CHECK_CLOSE(hp, p, n, 0.0, "sgd params after 10 steps");
    CHECK_CLOSE(hv, o.vel, n, 0.0, "sgd momentum after 10 steps");
    CHECK(memcmp(hp, p, sizeof(float) * n) == 0, "params are not bitwise equal");
    CHECK(memcmp(hv, o.vel, sizeof(float) * n) == 0, "momentum is not bitwise equal");
    cudaFree(d_p), cudaFree(d_v), cudaFree(d_g);
    free(p), free(g), free(hp), free(hv), free(o.vel);
    cuda_ctx_free(&ctx);
    return check_exit();
}
