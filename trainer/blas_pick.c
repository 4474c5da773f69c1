/*
 * blas_pick.c: see blas_pick.h. OpenBLAS's entry points are looked up at run time
 * (dlsym(RTLD_DEFAULT)), so another BLAS library, or an OpenBLAS built for one target without
 * gotoblas_dynamic_*, links and runs unchanged; it is only described.
 *
 * Why quit + init is safe in OpenBLAS 0.3.21 (driver/others/dynamic.c): gotoblas_dynamic_quit
 * only sets the kernel table pointer `gotoblas` to NULL, and gotoblas_dynamic_init returns at
 * once unless it is NULL, else reads OPENBLAS_CORETYPE (force_coretype; an unknown name falls
 * back to a pick from the feature flags) and calls the new table's init (block sizes). Thread
 * pools and buffers do not depend on the table. No BLAS call may run meanwhile, hence "before
 * the first BLAS call, from one thread".
 */
#include "trainer/blas_pick.h"
#include "base/hr_log.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ================================================================ kernel sets */

/* What a kernel set needs of the CPU, weakest first. */
typedef enum { TIER_SSE, TIER_AVX, TIER_AVX2, TIER_AVX512, TIER_BF16 } tier;

/* OpenBLAS's x86-64 kernel sets (driver/others/dynamic.c's corename[], as
 * openblas_get_corename spells them), less the 32-bit ones a 64-bit build maps to Prescott. */
static const struct {
    const char *name;
    tier need;
} cores[] = {
    {"Prescott", TIER_SSE},    {"Atom", TIER_SSE},         {"Core2", TIER_SSE},
    {"Penryn", TIER_SSE},      {"Dunnington", TIER_SSE},   {"Nehalem", TIER_SSE},
    {"Opteron", TIER_SSE},     {"Opteron_SSE3", TIER_SSE}, {"Barcelona", TIER_SSE},
    {"Nano", TIER_SSE},        {"Bobcat", TIER_SSE},       {"Sandybridge", TIER_AVX},
    {"Bulldozer", TIER_AVX},   {"Piledriver", TIER_AVX},   {"Steamroller", TIER_AVX},
    {"Excavator", TIER_AVX},   {"Haswell", TIER_AVX2},     {"Zen", TIER_AVX2},
    {"SkylakeX", TIER_AVX512}, {"Cooperlake", TIER_BF16},  {"SapphireRapids", TIER_BF16},
};
#define N_CORES ((int)(sizeof cores / sizeof cores[0]))

/* Index of kernel set `name` (any case) in cores[], or -1. */
static int core_index(const char *name) {
    for (int i = 0; name && i < N_CORES; i++)
        if (strcasecmp(name, cores[i].name) == 0) return i;
    return -1;
}

static tier cpu_tier(const blas_cpu *c) {
    int avx2 = c->avx && c->avx2 && c->fma;
    if (avx2 && c->avx512f && c->avx512bw && c->avx512vl && c->avx512dq && c->avx512cd)
        return c->avx512bf16 ? TIER_BF16 : TIER_AVX512;
    if (avx2) return TIER_AVX2;
    return c->avx ? TIER_AVX : TIER_SSE;
}

/* The feature flags behind a tier, for messages. */
static const char *tier_features(tier t) {
    static const char *const names[] = {"sse", "avx", "avx2+fma", "avx512", "avx512bf16"};
    return names[t];
}

#if defined(__x86_64__) || defined(__i386__)
#if (defined(__clang__) && __clang_major__ >= 12) ||                                               \
    (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 10)
#define CPU_HAS(f) __builtin_cpu_supports(f)
#define CPU_BF16() __builtin_cpu_supports("avx512bf16")
#else /* a compiler that does not know avx512bf16: never Cooperlake */
#define CPU_HAS(f) __builtin_cpu_supports(f)
#define CPU_BF16() 0
#endif
void blas_pick_cpu(blas_cpu *cpu) {
    __builtin_cpu_init();
    *cpu = (blas_cpu){.intel = __builtin_cpu_is("intel") != 0,
                      .amd = __builtin_cpu_is("amd") != 0,
                      .avx = CPU_HAS("avx") != 0,
                      .avx2 = CPU_HAS("avx2") != 0,
                      .fma = CPU_HAS("fma") != 0,
                      .avx512f = CPU_HAS("avx512f") != 0,
                      .avx512bw = CPU_HAS("avx512bw") != 0,
                      .avx512vl = CPU_HAS("avx512vl") != 0,
                      .avx512dq = CPU_HAS("avx512dq") != 0,
                      .avx512cd = CPU_HAS("avx512cd") != 0,
                      .avx512bf16 = CPU_BF16() != 0};
}
#else
void blas_pick_cpu(blas_cpu *cpu) {
    memset(cpu, 0, sizeof *cpu); /* not x86: no kernel set here applies */
}
#endif

const char *blas_pick_choose(const blas_cpu *cpu, const char *current) {
    int i = core_index(current);
    tier want = cpu_tier(cpu);
    if (i < 0 || want < TIER_AVX2 || cores[i].need >= want) return NULL;
    if (want == TIER_BF16) return "Cooperlake";
    if (want == TIER_AVX512) return "SkylakeX";
    return cpu->amd ? "Zen" : "Haswell";
}

int blas_pick_runs(const blas_cpu *cpu, const char *name) {
    int i = core_index(name);
    return i < 0 ? -1 : cores[i].need <= cpu_tier(cpu);
}

static char core_list[512]; /* the names, comma-separated, built once */

static void list_cores(void) {
    size_t n = 0;
    for (int i = 0; i < N_CORES; i++)
        n += (size_t)snprintf(core_list + n, sizeof core_list - n, "%s%s", i ? ", " : "",
                              cores[i].name);
}

const char *blas_pick_core_names(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, list_cores);
    return core_list;
}

/* ================================================================ the library */

typedef char *(*str_fn)(void);
typedef void (*void_fn)(void);

/* A function of the process's libraries by name, or NULL. */
static void *sym(const char *name) {
    return dlsym(RTLD_DEFAULT, name);
}

static str_fn str_sym(const char *name) {
    void *p = sym(name);
    str_fn f;
    memcpy(&f, &p, sizeof f);
    return f;
}

static void_fn void_sym(const char *name) {
    void *p = sym(name);
    void_fn f;
    memcpy(&f, &p, sizeof f);
    return f;
}

/* The file name (no folder) of the shared object that holds function `name`, or "". */
static const char *lib_file(const char *name) {
    Dl_info info;
    void *p = sym(name);
    if (!p || !dladdr(p, &info) || !info.dli_fname) return "";
    const char *slash = strrchr(info.dli_fname, '/');
    return slash ? slash + 1 : info.dli_fname;
}

/* ================================================================ the record */

/* How the kernel set in use came to be. */
typedef enum {
    HOW_UNSET,         /* blas_pick_init has not run */
    HOW_NOT_OPENBLAS,  /* another BLAS library: not ours to choose */
    HOW_OWN,           /* OpenBLAS's own pick, kept (as strong as the CPU allows, or unknown) */
    HOW_NOT_TAKEN,     /* OpenBLAS's own pick, kept: the library did not take `target` */
    HOW_SINGLE_TARGET, /* an OpenBLAS built for one target: nothing to switch */
    HOW_CHOSEN,        /* hetring switched to `target` */
    HOW_USER_ENV,      /* OPENBLAS_CORETYPE was set by the user */
    HOW_KNOB,          /* HETRING_BLAS_CORETYPE named the set */
    HOW_OFF,           /* HETRING_BLAS_CORETYPE=off */
} pick_how;

/* What blas_pick_init did; written once under `once`, read-only afterwards. */
static struct {
    pthread_once_t once; /* blas_pick_init runs pick() once */
    hr_status st;        /* its result */
    char err[HR_ERRLEN]; /* its message when st != HR_OK */
    pick_how how;        /* how the kernel set in use came to be */
    char before[32];     /* OpenBLAS's own pick, at load time */
    char target[32];     /* the set hetring asked for, or could have asked for ("") */
    char user[32];       /* OPENBLAS_CORETYPE as the user set it */
    const char *why;     /* the CPU's features behind `target` */
    char line[256];      /* the debug line blas_pick_log writes ("" when there is none) */
    atomic_int logged;   /* blas_pick_log has written it */
} rec = {.once = PTHREAD_ONCE_INIT};

static hr_status fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static hr_status fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rec.err, sizeof rec.err, fmt, ap);
    va_end(ap);
    return rec.st = HR_ERR_CONFIG;
}

/* Make OpenBLAS select kernel set `name` again, from OPENBLAS_CORETYPE, which is restored
 * (unset) afterwards; returns the set it runs now. */
static const char *switch_to(const char *name) {
    setenv("OPENBLAS_CORETYPE", name, 1);
    void_sym("gotoblas_dynamic_quit")();
    void_sym("gotoblas_dynamic_init")();
    unsetenv("OPENBLAS_CORETYPE");
    return str_sym("openblas_get_corename")();
}

/* HETRING_BLAS_CORETYPE=NAME: that set, when this CPU runs it and the library takes it. */
static hr_status pick_named(const blas_cpu *cpu, int i, int dynamic) {
    const char *name = cores[i].name;
    if (!blas_pick_runs(cpu, name))
        return fail("HETRING_BLAS_CORETYPE=%s needs %s, which this CPU lacks (it has %s); use "
                    "auto, off or a set it runs",
                    name, tier_features(cores[i].need), tier_features(cpu_tier(cpu)));
    rec.how = HOW_KNOB;
    snprintf(rec.target, sizeof rec.target, "%s", name);
    if (strcasecmp(name, rec.before) == 0) return HR_OK;
    if (!dynamic)
        return fail("HETRING_BLAS_CORETYPE=%s: this OpenBLAS (%s) is built for %s only and "
                    "cannot switch kernels; unset it or use a DYNAMIC_ARCH build",
                    name, lib_file("openblas_get_corename"), rec.before);
    const char *now = switch_to(name);
    if (strcasecmp(now, name) == 0) return HR_OK;
    switch_to(rec.before); /* the library fell back to a set of its own: undo that */
    rec.how = HOW_OWN;
    return fail("HETRING_BLAS_CORETYPE=%s: this OpenBLAS (%s) does not take that kernel set (it "
                "ran %s instead); back on its own pick, %s",
                name, lib_file("openblas_get_corename"), now, rec.before);
}

/* auto: the set the CPU's features call for, when it is stronger than OpenBLAS's pick. */
static void pick_auto(const blas_cpu *cpu, int dynamic) {
    const char *want = blas_pick_choose(cpu, rec.before);
    rec.how = HOW_OWN;
    if (!want) return;
    snprintf(rec.target, sizeof rec.target, "%s", want);
    rec.why = tier_features(cpu_tier(cpu));
    if (!dynamic) {
        rec.how = HOW_SINGLE_TARGET;
        return;
    }
    const char *now = switch_to(want);
    int was = core_index(rec.before), is = core_index(now);
    if (strcasecmp(now, want) == 0) {
        rec.how = HOW_CHOSEN;
    } else if (is >= 0 && cores[is].need > cores[was].need) {
        rec.how = HOW_CHOSEN; /* the library mapped it onto a stronger set of its own */
    } else {
        switch_to(rec.before);
        rec.how = HOW_NOT_TAKEN;
    }
}

static void pick(void) {
    rec.st = HR_OK;
    const char *knob = getenv("HETRING_BLAS_CORETYPE");
    int named = knob && *knob && strcasecmp(knob, "auto") != 0 && strcasecmp(knob, "off") != 0;
    int ki = named ? core_index(knob) : -1;
    if (named && ki < 0) {
        fail("HETRING_BLAS_CORETYPE='%s' is not auto, off or a kernel set (%s)", knob,
             blas_pick_core_names());
        return;
    }
    str_fn corename = str_sym("openblas_get_corename");
    if (!corename) {
        rec.how = HOW_NOT_OPENBLAS;
        if (named)
            fail("HETRING_BLAS_CORETYPE=%s applies to OpenBLAS only; this process uses %s", knob,
                 lib_file("cblas_sgemm"));
        return;
    }
    snprintf(rec.before, sizeof rec.before, "%s", corename());
    int dynamic = sym("gotoblas_dynamic_init") && sym("gotoblas_dynamic_quit");
    const char *user = getenv("OPENBLAS_CORETYPE");
    if (user) {
        rec.how = HOW_USER_ENV;
        snprintf(rec.user, sizeof rec.user, "%s", user);
        if (named && strcasecmp(user, knob) != 0)
            fail("HETRING_BLAS_CORETYPE=%s and OPENBLAS_CORETYPE=%s disagree; unset one", knob,
                 user);
        return;
    }
    blas_cpu cpu;
    blas_pick_cpu(&cpu);
    if (named) {
        pick_named(&cpu, ki, dynamic);
    } else if (knob && strcasecmp(knob, "off") == 0) {
        rec.how = HOW_OFF;
        const char *could = blas_pick_choose(&cpu, rec.before);
        snprintf(rec.target, sizeof rec.target, "%s", could ? could : "");
    } else {
        pick_auto(&cpu, dynamic);
    }
    snprintf(rec.line, sizeof rec.line,
             "blas: HETRING_BLAS_CORETYPE=%s, OpenBLAS picked %s, this CPU has %s, runs %s",
             knob ? knob : "(unset: auto)", rec.before, tier_features(cpu_tier(&cpu)), corename());
}

hr_status blas_pick_init(char *err, size_t errlen) {
    pthread_once(&rec.once, pick);
    if (rec.st != HR_OK && err && errlen) snprintf(err, errlen, "%s", rec.err);
    return rec.st;
}

void blas_pick_log(void) {
    if (rec.line[0] && atomic_exchange(&rec.logged, 1) == 0) HR_DEBUG(TRAIN, "%s", rec.line);
}

/* ================================================================ description */

/* "OpenBLAS 0.3.21" from openblas_get_config ("OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ..."). */
static void openblas_name(char *buf, size_t len) {
    str_fn config = str_sym("openblas_get_config");
    const char *c = config ? config() : "OpenBLAS";
    size_t n = strcspn(c, " ");
    if (c[n] == ' ') n += 1 + strcspn(c + n + 1, " ");
    snprintf(buf, len, "%.*s", (int)n, c);
}

/* The parenthesis after the kernel set's name: who chose it. */
static void origin(char *buf, size_t len) {
    switch (rec.how) {
    case HOW_UNSET:
    case HOW_NOT_OPENBLAS:
    case HOW_OWN:
        snprintf(buf, len, "OpenBLAS's own pick");
        return;
    case HOW_NOT_TAKEN:
        snprintf(buf, len, "OpenBLAS's own pick; it did not take %s, which this CPU's %s calls for",
                 rec.target, rec.why);
        return;
    case HOW_SINGLE_TARGET:
        snprintf(buf, len, "built for one target; this CPU's %s could run %s", rec.why, rec.target);
        return;
    case HOW_CHOSEN:
        snprintf(buf, len, "chosen by hetring for %s; OpenBLAS picked %s", rec.why, rec.before);
        return;
    case HOW_USER_ENV:
        snprintf(buf, len, "forced by OPENBLAS_CORETYPE=%s", rec.user);
        return;
    case HOW_KNOB:
        snprintf(buf, len, "HETRING_BLAS_CORETYPE=%s; OpenBLAS picked %s", rec.target, rec.before);
        return;
    case HOW_OFF:
        snprintf(buf, len, "OpenBLAS's own pick, HETRING_BLAS_CORETYPE=off%s%s",
                 rec.target[0] ? "; this CPU could run " : "", rec.target);
        return;
    }
}

void blas_pick_describe(char *buf, size_t len) {
    str_fn corename = str_sym("openblas_get_corename");
    if (!corename) {
        const char *f = lib_file("cblas_sgemm");
        snprintf(buf, len, "blas: %s (not OpenBLAS: its kernels are its own choice)",
                 *f ? f : "unknown library");
        return;
    }
    char name[64], why[160];
    openblas_name(name, sizeof name);
    origin(why, sizeof why);
    snprintf(buf, len, "blas: %s (%s), kernels %s (%s)", name, lib_file("openblas_get_corename"),
             corename(), why);
}
