/*
 * test_grad_alloc.c: the powersgd path's buffers (psgd_alloc, cluster/grad_path.c) after an
 * allocation that failed. grad_path.c is compiled into this test with its malloc counted, and
 * each of the state's five buffers fails once in turn: the first call says out of memory, the
 * second allocates the buffers missing and nothing else (none leaked, none left NULL), and
 * grad_xfer_free frees them all.
 */
#include <stdlib.h>

static int mallocs, fail_at = -1; /* malloc calls counted; the one that fails */

static void *counted_malloc(size_t n) {
    return ++mallocs == fail_at ? NULL : malloc(n);
}

#define malloc counted_malloc
#include "cluster/grad_path.c"
#undef malloc

#include "check.h"

int main(void) {
    for (int k = 1; k <= 5; k++) {
        float g[64] = {0};
        grad_xfer x = {0};
        x.grads = g, x.n_grad = 64;
        x.psgd.n_q = 16;
        mallocs = 0, fail_at = k;
        const hr_status first = psgd_alloc(&x, 4);
        const int before = mallocs;
        float *const *bufs[] = {&x.psgd.q, &x.psgd.q_next, &x.psgd.local, &x.psgd.qt, &x.psgd.lt};
        int missing = 0;
        for (int i = 0; i < 5; i++) missing += !*bufs[i];
        const hr_status second = psgd_alloc(&x, 4);
        const grad_psgd *s = &x.psgd;
        const int all = s->q && s->q_next && s->local && s->qt && s->lt && s->send;
        printf("buffer %d failing: first call %d, second %d with %d malloc(s), every buffer %s\n",
               k, first, second, mallocs - before, all ? "there" : "NOT there");
        CHECK(first == HR_ERR_NOMEM, "buffer %d failing: the first call returned %d", k, first);
        CHECK(second == HR_OK && all,
              "buffer %d failing: the second call returned %d and left a buffer NULL", k, second);
        CHECK(mallocs - before == missing,
              "buffer %d failing: the second call made %d allocations for the %d buffers missing "
              "(the others leak)",
              k, mallocs - before, missing);
        grad_xfer_free(&x);
    }
    return check_exit();
}
