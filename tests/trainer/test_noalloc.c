/*
 * test_noalloc.c: the training loop allocates nothing after train_init (train.h), on every
 * thread of a two-node run over a loopback ring with gradient buckets, so the communication
 * thread and the ring's all-reduce are covered as well as the step itself.
 *
 * This executable defines malloc and its relatives, forwarding to glibc's __libc_* entry
 * points; while `counting` is set every call is counted, whatever thread makes it. A
 * self-check first proves that the interposer is live. Sanitizers replace the allocator
 * themselves, so under ASan or TSan the test reports a skip (77).
 */
#include "tests/check.h"
#include "tests/blas_main.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define HR_NOALLOC_SKIP 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define HR_NOALLOC_SKIP 1
#endif
#endif

#ifdef HR_NOALLOC_SKIP
int main(void) {
    printf("SKIP: the allocation counter cannot interpose malloc under a sanitizer\n");
    return 77;
}
#else

#include "tests/trainer/util.h"

#include <errno.h>
#include <malloc.h>
#include <stdatomic.h>

/* ================================================================ the interposer */

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

static atomic_int counting;     /* count calls while set */
static atomic_long n_calls;     /* allocation calls counted */
static atomic_size_t first_len; /* size asked for by the first counted call */

static void counted(size_t len) {
    if (atomic_load_explicit(&counting, memory_order_relaxed) && atomic_fetch_add(&n_calls, 1) == 0)
        atomic_store(&first_len, len);
}

void *malloc(size_t n) {
    counted(n);
    return __libc_malloc(n);
}

void *calloc(size_t k, size_t n) {
    counted(k * n);
    return __libc_calloc(k, n);
}

void *realloc(void *p, size_t n) {
    counted(n);
    return __libc_realloc(p, n);
}

void free(void *p) {
    /* freeing what was allocated before counting started is an allocator call too */
    if (p) counted(0);
    __libc_free(p);
}

void *memalign(size_t a, size_t n) {
    counted(n);
    return __libc_memalign(a, n);
}

void *aligned_alloc(size_t a, size_t n) {
    counted(n);
    return __libc_memalign(a, n);
}

int posix_memalign(void **out, size_t a, size_t n) {
    counted(n);
    if (a % sizeof(void *) != 0 || (a & (a - 1)) != 0) return EINVAL;
    void *p = __libc_memalign(a, n);
    if (!p) return ENOMEM;
    *out = p;
    return 0;
}

void *valloc(size_t n) {
    counted(n);
    return __libc_memalign((size_t)sysconf(_SC_PAGESIZE), n);
}

/* ================================================================ the run */

#define WARMUP 3
#define STEPS  30

static char dir[64];
static pthread_barrier_t bar;
static int failed[2];    /* a node's set-up or a step failed */
static int buckets[2];   /* the node's bucket count */
static long steps_ok[2]; /* counted steps that returned HR_OK */

static void node(int self, const cfg *c, void *arg) {
    (void)arg;
    test_node n;
    train_iter r;
    hr_status st = test_node_up(&n, c, self);
    if (st != HR_OK) fprintf(stderr, "node %d: %s\n", self, n.err);
    for (int i = 0; st == HR_OK && i < WARMUP; i++)
        if ((st = train_step(&n.t, &r)) != HR_OK)
            fprintf(stderr, "node %d: warm-up step %d: %s\n", self, i, hr_strerror(st));
    failed[self] = st != HR_OK;
    buckets[self] = st == HR_OK ? n.t.peer_buckets : 0; /* all-reduces of the last step */
    pthread_barrier_wait(&bar);                         /* main starts counting */
    pthread_barrier_wait(&bar);
    /* a node that failed still waits for the others, which fail on the ring's timeout */
    for (int i = 0; !failed[0] && !failed[1] && i < STEPS; i++) {
        if ((st = train_step(&n.t, &r)) != HR_OK) {
            fprintf(stderr, "node %d: step %d: %s\n", self, WARMUP + i, hr_strerror(st));
            break;
        }
        steps_ok[self]++;
    }
    pthread_barrier_wait(&bar); /* main stops counting */
    pthread_barrier_wait(&bar);
    test_node_down(&n);
}

static void *run_ring(void *arg) {
    run_nodes(arg, 2, node, NULL);
    return NULL;
}

int main(int argc, char **argv) {
    (void)argc;
    test_blas_main(argv);
    /* the counter must see an allocation, or a zero below proves nothing */
    atomic_store(&counting, 1);
    void *volatile probe = malloc(64);
    free(probe);
    atomic_store(&counting, 0);
    CHECK(atomic_load(&n_calls) == 2, "the interposed allocator counted %ld of 2 calls",
          atomic_load(&n_calls));
    atomic_store(&n_calls, 0);

    tmpdir(dir, sizeof dir);
    cfg c;
    /* bucket_bytes = 1024 cuts this MLP's gradients into two buckets */
    ring_cfg(&c, dir,
             "model = mlp\nlayers = 784,32,10\nsamples = 1024\neval_samples = 64\n"
             "global_batch = 64\nlr = 0.05\niterations = 100\nseed = 5\nhash_interval = 1\n"
             "bucket_bytes = 1024",
             "policy = proportional\ninterval = 1", 2, test_port(), NULL);
    pthread_barrier_init(&bar, NULL, 3);
    pthread_t th;
    if (pthread_create(&th, NULL, run_ring, &c) != 0) return 2;
    pthread_barrier_wait(&bar);
    atomic_store(&counting, 1);
    pthread_barrier_wait(&bar);
    pthread_barrier_wait(&bar);
    atomic_store(&counting, 0);
    long calls = atomic_load(&n_calls);
    pthread_barrier_wait(&bar);
    pthread_join(th, NULL);

    CHECK(!failed[0] && !failed[1], "set-up or warm-up failed");
    CHECK(buckets[0] > 1 && buckets[1] > 1,
          "gradient buckets are off (%d, %d): the communication thread never ran", buckets[0],
          buckets[1]);
    CHECK(steps_ok[0] == STEPS && steps_ok[1] == STEPS, "steps that succeeded: %ld and %ld of %d",
          steps_ok[0], steps_ok[1], STEPS);
    printf("%d steps on 2 nodes with %d gradient buckets: %ld allocator calls\n", STEPS, buckets[0],
           calls);
    CHECK(calls == 0, "the training loop made %ld allocator calls in %d steps (first: %zu bytes)",
          calls, STEPS, atomic_load(&first_len));
    pthread_barrier_destroy(&bar);
    cfg_free(&c);
    rm_rf(dir);
    return check_exit();
}
#endif
