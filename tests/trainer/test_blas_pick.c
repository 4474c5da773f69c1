/*
 * test_blas_pick.c: the BLAS kernel choice (trainer/blas_pick.h).
 *
 *   test_trainer_blas_pick table        the choice as a pure function of CPU features and the
 *                                       set OpenBLAS picked, over a table of cases
 *   test_trainer_blas_pick switch SET   run with OPENBLAS_CORETYPE=SET and
 *                                       HETRING_BLAS_PICKED=SET:SET, as if OpenBLAS had picked
 *                                       that weak set on its own (as on a CPU it does not know):
 *                                       blas_pick_main runs the program again, which must run
 *                                       the choice for this CPU, say so, keep both variables
 *                                       for its children, and GEMM stay correct
 *   test_trainer_blas_pick host SET     the same start through blas_pick_init (a library's
 *                                       host): nothing changes; the description says what to set
 *   test_trainer_blas_pick keep         HETRING_BLAS_CORETYPE=off: OpenBLAS's own pick
 * Each exits 77 on a CPU without AVX2, where there is nothing to switch to. test_blas_pick.sh
 * runs them under OPENBLAS_VERBOSE=2 and counts OpenBLAS's own "Core:" lines, one per process
 * start.
 */
#include "tests/check.h"
#include "trainer/blas_pick.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* ================================================================ the pure choice */

static const blas_cpu sse = {.intel = 1};
static const blas_cpu avx = {.intel = 1, .avx = 1};
static const blas_cpu avx2_intel = {.intel = 1, .avx = 1, .avx2 = 1, .fma = 1};
static const blas_cpu avx2_amd = {.amd = 1, .avx = 1, .avx2 = 1, .fma = 1};
static const blas_cpu avx2_nofma = {.intel = 1, .avx = 1, .avx2 = 1};
/* the AVX-512 subsets every AVX-512 machine below has (VL and BF16 vary) */
#define AVX512_BASE                                                                                \
    .avx = 1, .avx2 = 1, .fma = 1, .avx512f = 1, .avx512bw = 1, .avx512dq = 1, .avx512cd = 1
static const blas_cpu avx512 = {.intel = 1, AVX512_BASE, .avx512vl = 1};
static const blas_cpu avx512_novl = {.intel = 1, AVX512_BASE};
static const blas_cpu bf16 = {.intel = 1, AVX512_BASE, .avx512vl = 1, .avx512bf16 = 1};
static const blas_cpu zen4 = {.amd = 1, AVX512_BASE, .avx512vl = 1, .avx512bf16 = 1};

static void test_choose(void) {
    static const struct {
        const char *what;
        const blas_cpu *cpu;
        const char *current; /* OpenBLAS's pick */
        const char *want;    /* NULL: keep it */
    } cases[] = {
        {"a Xeon of family 6 model 207 (AVX-512 BF16, AMX), Prescott", &bf16, "Prescott",
         "SkylakeX"},
        {"AVX-512 without BF16, Prescott", &avx512, "Prescott", "SkylakeX"},
        {"AVX-512, Core2", &avx512, "Core2", "SkylakeX"},
        {"AVX-512, Nehalem", &avx512, "Nehalem", "SkylakeX"},
        {"AVX-512, Sandybridge", &avx512, "Sandybridge", "SkylakeX"},
        {"AVX-512, Atom", &avx512, "Atom", "SkylakeX"},
        {"AVX-512, Haswell", &avx512, "Haswell", "SkylakeX"},
        {"AVX-512, already SkylakeX", &avx512, "SkylakeX", NULL},
        {"AVX-512 BF16, SkylakeX: the same fp32 kernels", &bf16, "SkylakeX", NULL},
        {"AVX-512 BF16, already Cooperlake", &bf16, "Cooperlake", NULL},
        {"AVX-512 BF16, SapphireRapids is as strong", &bf16, "SapphireRapids", NULL},
        {"Zen 4/5 (AMD AVX-512 BF16), Haswell", &zen4, "Haswell", "SkylakeX"},
        {"Zen 4/5, Zen", &zen4, "Zen", "SkylakeX"},
        {"AVX-512F without VL is not enough: AVX2 tier", &avx512_novl, "Prescott", "Haswell"},
        {"AVX-512F without VL, Haswell kept", &avx512_novl, "Haswell", NULL},
        {"Intel AVX2, Prescott", &avx2_intel, "Prescott", "Haswell"},
        {"Intel AVX2, Sandybridge", &avx2_intel, "Sandybridge", "Haswell"},
        {"Intel AVX2, already Haswell", &avx2_intel, "Haswell", NULL},
        {"Intel AVX2, Zen is the same tier", &avx2_intel, "Zen", NULL},
        {"AMD AVX2, Barcelona", &avx2_amd, "Barcelona", "Zen"},
        {"AMD AVX2, Excavator", &avx2_amd, "Excavator", "Zen"},
        {"AMD AVX2, Haswell is the same tier", &avx2_amd, "Haswell", NULL},
        {"AVX2 without FMA: left alone", &avx2_nofma, "Prescott", NULL},
        {"AVX only: left alone", &avx, "Prescott", NULL},
        {"SSE only: left alone", &sse, "Prescott", NULL},
        {"a stronger set than the CPU is never lowered", &avx2_intel, "SkylakeX", NULL},
        {"a name in another case", &avx512, "PRESCOTT", "SkylakeX"},
        {"an unknown set is left alone", &bf16, "Zen7000", NULL},
        {"no name is left alone", &bf16, NULL, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *got = blas_pick_choose(cases[i].cpu, cases[i].current);
        int same = got && cases[i].want ? strcmp(got, cases[i].want) == 0 : got == cases[i].want;
        CHECK(same, "%s: chose %s, expected %s", cases[i].what, got ? got : "(keep)",
              cases[i].want ? cases[i].want : "(keep)");
    }
}

static void test_runs(void) {
    CHECK(blas_pick_runs(&avx2_intel, "Haswell") == 1, "an AVX2 CPU runs Haswell");
    CHECK(blas_pick_runs(&avx2_intel, "SkylakeX") == 0, "an AVX2 CPU does not run SkylakeX");
    CHECK(blas_pick_runs(&avx512, "cooperlake") == 0, "AVX-512 without BF16 runs no Cooperlake");
    CHECK(blas_pick_runs(&bf16, "Cooperlake") == 1, "an AVX-512 BF16 CPU runs Cooperlake");
    CHECK(blas_pick_runs(&sse, "Prescott") == 1, "every x86-64 CPU runs Prescott");
    CHECK(blas_pick_runs(&bf16, "Bogus") == -1, "an unknown set is -1");
    const char *names = blas_pick_core_names();
    CHECK(strstr(names, "Prescott") && strstr(names, "SkylakeX") && strstr(names, "Cooperlake") &&
              strstr(names, "Haswell") && strstr(names, "Zen"),
          "the names list misses a set: %s", names);
}

/* ================================================================ the switch, for real */

char *openblas_get_corename(void);

/* C = A B with A (m, k), B (k, n) through cblas_sgemm, against a double-precision loop. */
static double gemm_error(void) {
    enum { M = 67, N = 131, K = 203 };
    static float a[M * K], b[K * N], c[M * N];
    unsigned s = 12345;
    for (int i = 0; i < M * K; i++)
        a[i] = (float)((s = s * 1103515245u + 12345u) >> 16) / 65536.0f - 0.5f;
    for (int i = 0; i < K * N; i++)
        b[i] = (float)((s = s * 1103515245u + 12345u) >> 16) / 65536.0f - 0.5f;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, a, K, b, N, 0.0f, c, N);
    double worst = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double ref = 0;
            for (int p = 0; p < K; p++) ref += (double)a[i * K + p] * b[p * N + j];
            double d = c[i * N + j] - ref;
            d = d < 0 ? -d : d;
            if (!(d <= worst)) worst = d; /* NaN sticks */
        }
    return worst;
}

/* GFLOP/s of 20 sgemm of 256 x 256 x 256 on 1 thread, after one to warm up: printed for the record,
 * never asserted (a shared machine's timings are noise to a test). */
static double gemm_gflops(void) {
    enum { S = 256, REPS = 20 };
    static float a[S * S], b[S * S], c[S * S];
    for (int i = 0; i < S * S; i++) a[i] = b[i] = (float)(i % 7) * 0.1f;
    openblas_set_num_threads(1);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, S, S, S, 1.0f, a, S, b, S, 0.0f, c, S);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int r = 0; r < REPS; r++)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, S, S, S, 1.0f, a, S, b, S, 0.0f, c,
                    S);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double dt = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    return 2.0 * S * S * S * REPS / dt * 1e-9;
}

/* The set blas_pick chooses for this CPU over `loaded`, or NULL after a SKIP line (no AVX2:
 * nothing stronger to offer). */
static const char *stronger_than(const char *loaded) {
    blas_cpu cpu;
    blas_pick_cpu(&cpu);
    const char *want = blas_pick_choose(&cpu, loaded);
    if (!want) printf("SKIP: this CPU has nothing stronger than %s to offer (no AVX2)\n", loaded);
    return want;
}

/* `switch`: started as if OpenBLAS had picked the set in OPENBLAS_CORETYPE on its own
 * (HETRING_BLAS_PICKED=SET:SET says so), so blas_pick_main ran this program again with the
 * choice for this CPU: it must run that set, say so, leave both variables set for children,
 * and GEMM stay correct. */
static int test_switch(const char *loaded) {
    char line[512];
    const char *want = stronger_than(loaded);
    if (!want) return 77;
    const char *now = openblas_get_corename();
    blas_pick_describe(line, sizeof line);
    printf("%s\n", line);
    CHECK(strcasecmp(now, want) == 0, "kernels %s after the re-execution, expected %s (from %s)",
          now, want, loaded);
    char expect[128];
    snprintf(expect, sizeof expect, "kernels %s (chosen by hetring for ", now);
    CHECK(strstr(line, expect), "the line does not say '%s': %s", expect, line);
    snprintf(expect, sizeof expect, "OpenBLAS picked %s)", loaded);
    CHECK(strstr(line, expect), "the line does not say '%s': %s", expect, line);
    const char *env = getenv("OPENBLAS_CORETYPE"), *mark = getenv("HETRING_BLAS_PICKED");
    snprintf(expect, sizeof expect, "%s:%s", want, loaded);
    CHECK(env && strcmp(env, want) == 0 && mark && strcmp(mark, expect) == 0,
          "children would not inherit the choice: OPENBLAS_CORETYPE=%s HETRING_BLAS_PICKED=%s",
          env ? env : "(unset)", mark ? mark : "(unset)");
    double after = gemm_error();
    printf("GEMM max abs error %.3g on %s; sgemm 256^3, 1 thread: %.1f GFLOP/s (not asserted)\n",
           after, now, gemm_gflops());
    CHECK(after < 1e-3, "GEMM on %s: max abs error %.3g", now, after);
    return check_exit();
}

/* `host`: the same start in a process that may not be re-executed (blas_pick_init, as a
 * library's host): nothing changes, and the description tells the user what to set. */
static int test_host(const char *loaded) {
    char err[HR_ERRLEN] = "", line[512];
    hr_status st = blas_pick_init(err, sizeof err);
    CHECK(st == HR_OK, "blas_pick_init: %s", err);
    const char *want = stronger_than(loaded);
    if (!want) return 77;
    blas_pick_describe(line, sizeof line);
    printf("%s\n", line);
    CHECK(strcasecmp(openblas_get_corename(), loaded) == 0, "the kernels changed in a host: %s",
          openblas_get_corename());
    char expect[128];
    snprintf(expect, sizeof expect, "set OPENBLAS_CORETYPE=%s before the process starts", want);
    CHECK(strstr(line, expect), "the line does not say '%s': %s", expect, line);
    CHECK(gemm_error() < 1e-3, "GEMM on %s", loaded);
    return check_exit();
}

/* `keep`: HETRING_BLAS_CORETYPE=off keeps OpenBLAS's own pick. */
static int test_keep(void) {
    char line[512];
    blas_pick_describe(line, sizeof line);
    printf("%s\n", line);
    CHECK(strstr(line, "(OpenBLAS's own pick, HETRING_BLAS_CORETYPE=off"),
          "the line does not say off: %s", line);
    CHECK(!getenv("OPENBLAS_CORETYPE"), "OPENBLAS_CORETYPE set to %s", getenv("OPENBLAS_CORETYPE"));
    CHECK(gemm_error() < 1e-3, "GEMM on %s", openblas_get_corename());
    return check_exit();
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "table";
    if (strcmp(mode, "host") == 0) return test_host(argc > 2 ? argv[2] : "");
    char err[HR_ERRLEN] = "";
    hr_status st = blas_pick_main(argv, err, sizeof err); /* may run this program again */
    CHECK(st == HR_OK, "blas_pick_main: %s", err);
    if (strcmp(mode, "switch") == 0) return test_switch(argc > 2 ? argv[2] : "");
    if (strcmp(mode, "keep") == 0) return test_keep();
    test_choose();
    test_runs();
    return check_exit();
}
