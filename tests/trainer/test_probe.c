/*
 * test_probe.c: train_probe, the timing of a node's passes that sets the first split of a view
 * ([controller] calibrate). On a busy machine a short pass that is preempted measures a time
 * slice longer; the probe must still give the node's speed, or the first split starves it (a
 * run beside a compile once gave an equal node 11 of 90 samples and the 4x slower one 17).
 *   calm   the probe times passes for TRAIN_PROBE_S at least and returns a time
 *   storm  a child process stops this one and lets it go on (SIGSTOP for two passes' time,
 *          SIGCONT for a quarter of one) from the probe's start for 30 passes' time: every pass
 *          begun then is cut and measures 3x or more. The probe, which goes on timing after the
 *          storm, still gives under 2x the calm time; the fastest of two passes, both inside
 *          the storm, did not
 */
#include "base/hr_time.h"
#include "tests/trainer/util.h"

#include <errno.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>

static char dir[64];

/* What the stormer is told: how long to stop this process, to let it run, and for how long. */
typedef struct {
    double stop_s, run_s, storm_s;
} storm_plan;

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* The stormer: waits for a plan on fd, then stops and continues `target` as it says, counting
 * the stops in *stops (shared with the target, which starts probing after the first). */
static void stormer(int fd, pid_t target, volatile int *stops) {
    storm_plan p;
    if (read(fd, &p, sizeof p) != (ssize_t)sizeof p) _exit(0);
    const double t0 = hr_now();
    while (hr_now() - t0 < p.storm_s && getppid() == target) {
        kill(target, SIGSTOP);
        sleep_s(p.stop_s);
        __atomic_add_fetch(stops, 1, __ATOMIC_SEQ_CST);
        kill(target, SIGCONT);
        sleep_s(p.run_s);
    }
    kill(target, SIGCONT);
    _exit(0);
}

static void test_probe(void) {
    cfg c;
    trainer t;
    test_trainer_or_die(&t, &c, dir,
                        "model = mlp\nlayers = 784,256,10\nsamples = 2048\neval_samples = 16\n"
                        "global_batch = 512\niterations = 10");
    /* calm: passes of about 1 ms, the size the storm below is drawn for */
    double s = 0, w0 = hr_now();
    CHECK(train_probe(&t, 64, &s) == HR_OK && s > 0, "probe of 64 samples");
    CHECK(hr_now() - w0 >= TRAIN_PROBE_S, "the probe timed %.3f s of passes (expected %.2f s)",
          hr_now() - w0, TRAIN_PROBE_S);
    long b = (long)(1e-3 / (s / 64));
    b = b < 8 ? 8 : b > 512 ? 512 : b;
    double calm = 0;
    CHECK(train_probe(&t, b, &calm) == HR_OK && calm > 0, "probe of %ld samples", b);
    printf("calm: %ld samples a pass, %.3f ms\n", b, calm * 1e3);

    /* storm: the stormer is forked first, so that it waits for the plan before this probes */
    int p[2];
    volatile int *stops =
        mmap(NULL, sizeof *stops, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(pipe(p) == 0 && stops != MAP_FAILED, "pipe, mmap");
    *stops = 0;
    pid_t me = getpid(), kid = fork();
    if (kid == 0) {
        close(p[1]);
        stormer(p[0], me, stops);
    }
    close(p[0]);
    /* the stops are short and many, so that the two passes after a warm-up one, as the probe
     * timed them, end inside the storm; the storm ends well before TRAIN_PROBE_S */
    storm_plan plan = {calm / 2, calm / 4, 0.6 * TRAIN_PROBE_S};
    double stormed = 0;
    CHECK(write(p[1], &plan, sizeof plan) == (ssize_t)sizeof plan, "plan");
    /* the probe starts as the storm has begun: right after the first stop (1 s at most) */
    for (int i = 0; i < 20000 && __atomic_load_n(stops, __ATOMIC_SEQ_CST) == 0; i++) sleep_s(50e-6);
    hr_status st = train_probe(&t, b, &stormed);
    close(p[1]);
    int ws = 0;
    if (kid > 0) waitpid(kid, &ws, 0);
    CHECK(st == HR_OK, "probe in the storm");
    fprintf(stderr, "stops %d\n", *stops);
    munmap((void *)stops, sizeof *stops);
    printf("stormed for %.1f ms: %.3f ms (%.2fx calm)\n", plan.storm_s * 1e3, stormed * 1e3,
           stormed / calm);
    CHECK(stormed < 2 * calm,
          "a probe whose first passes were preempted gave %.3f ms, %.1fx the calm %.3f ms: a "
          "preempted pass set the node's speed",
          stormed * 1e3, stormed / calm, calm * 1e3);
    train_free(&t);
    cfg_free(&c);
}

int main(int argc, char **argv) {
    (void)argc;
    static void (*const cases[])(void) = {test_probe, NULL};
    return tmpdir_main(argv, dir, sizeof dir, cases);
}
