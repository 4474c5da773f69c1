/*
 * blas_pick.c: see blas_pick.h. OpenBLAS's entry points are looked up at run time
 * (dlsym(RTLD_DEFAULT)), so another BLAS library, or an OpenBLAS built for one target without
 * gotoblas_dynamic_init, links and runs unchanged; it is only described.
 *
 * Why a new process and never a switch inside this one: OpenBLAS (0.3.21,
 * driver/others/dynamic.c) reads OPENBLAS_CORETYPE once, in its constructor, which also starts
 * its thread pool. Dropping its kernel table (gotoblas_dynamic_quit) and picking again
 * (gotoblas_dynamic_init) while that pool lives races with the pool's first blas_memory_alloc,
 * which initialises the table itself when it finds it NULL, and setenv races with its getenv:
 * 3-5 starts in 100 crashed that way in gotoblas_dynamic_init. So the choice is made from
 * read-only facts (openblas_get_corename, the CPU's features, the environment) and, when it
 * differs from what loaded, the program runs again with OPENBLAS_CORETYPE in a copied
 * environment, from its constructor on.
 */
#include "trainer/blas_pick.h"
#include "base/hr_cores.h"
#include "base/hr_log.h"

#include <cblas.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

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
    tier can = cpu_tier(cpu);
    if (i < 0 || can < TIER_AVX2) return NULL;
    /* AVX-512 BF16 gets SkylakeX too: hetring's GEMMs are fp32, where Cooperlake's kernels are
     * SkylakeX's (it adds the bf16 ones), and OpenBLAS 0.3.21 does not take Cooperlake from
     * OPENBLAS_CORETYPE ("Core not found"). */
    const char *best = can >= TIER_AVX512 ? "SkylakeX" : cpu->amd ? "Zen" : "Haswell";
    return cores[i].need >= cores[core_index(best)].need ? NULL : best;
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
    HOW_NOT_TAKEN,     /* the library did not take `target` from OPENBLAS_CORETYPE */
    HOW_SINGLE_TARGET, /* an OpenBLAS built for one target: nothing to switch */
    HOW_CHOSEN,        /* hetring started this process with OPENBLAS_CORETYPE=`target` */
    HOW_ADVISED,       /* a host process (blas_pick_init): `target` is described, not taken */
    HOW_EXEC_FAILED,   /* the re-execution failed (`exec_errno`): the kernels loaded are kept */
    HOW_USER_ENV,      /* OPENBLAS_CORETYPE was set by the user */
    HOW_KNOB,          /* HETRING_BLAS_CORETYPE named the set */
    HOW_OFF,           /* HETRING_BLAS_CORETYPE=off */
} pick_how;

/* The environment variable that tells a process hetring started what it set: "TARGET:BEFORE",
 * TARGET the OPENBLAS_CORETYPE it gave ("" for none) and BEFORE OpenBLAS's own pick in the
 * process that decided. Inherited by child processes, which then decide alike without a
 * re-execution of their own. */
#define MARK "HETRING_BLAS_PICKED"

/* What pick() found; written once under `once`, read-only afterwards. */
static struct {
    pthread_once_t once; /* pick() runs once */
    int may_exec;        /* blas_pick_main came first: the process may be re-executed */
    hr_status st;        /* the result */
    char err[HR_ERRLEN]; /* its message when st != HR_OK */
    pick_how how;        /* how the kernel set in use came to be */
    char before[32];     /* OpenBLAS's own pick (as loaded, or as MARK carried it) */
    char target[32];     /* the set hetring asked for, or could have asked for ("") */
    char user[32];       /* OPENBLAS_CORETYPE as the user set it */
    const char *why;     /* the CPU's features behind `target` */
    int ours;            /* the environment's OPENBLAS_CORETYPE (or its absence) is hetring's */
    char have[32];       /* OPENBLAS_CORETYPE this process was started with, when ours */
    char want[32];       /* OPENBLAS_CORETYPE this process should run under ("": none) */
    int exec_errno;      /* why the re-execution failed, for HOW_EXEC_FAILED */
    char line[320];      /* the debug line blas_pick_log writes ("" when there is none) */
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

/* MARK, when it describes the environment this process has (its TARGET is the
 * OPENBLAS_CORETYPE that is set, or empty with none set): then the environment is hetring's,
 * and OpenBLAS's own pick is the BEFORE it carries. */
static void read_mark(const char *user) {
    const char *m = getenv(MARK);
    const char *colon = m ? strchr(m, ':') : NULL;
    if (!colon || colon == m + strlen(m) - 1) return;
    size_t tlen = (size_t)(colon - m);
    if (tlen >= sizeof rec.have || strlen(colon + 1) >= sizeof rec.before) return;
    int match = user ? tlen == strlen(user) && strncasecmp(m, user, tlen) == 0 : tlen == 0;
    if (!match) return;
    rec.ours = 1;
    snprintf(rec.have, sizeof rec.have, "%.*s", (int)tlen, m);
    snprintf(rec.before, sizeof rec.before, "%s", colon + 1);
}

/* HETRING_BLAS_CORETYPE=NAME: that set, when this CPU runs it. */
static void pick_named(const blas_cpu *cpu, int i, int dynamic) {
    const char *name = cores[i].name;
    if (!blas_pick_runs(cpu, name)) {
        fail("HETRING_BLAS_CORETYPE=%s needs %s, which this CPU lacks (it has %s); use auto, off "
             "or a set it runs",
             name, tier_features(cores[i].need), tier_features(cpu_tier(cpu)));
        return;
    }
    rec.how = HOW_KNOB;
    snprintf(rec.target, sizeof rec.target, "%s", name);
    if (strcasecmp(name, rec.before) == 0) return;
    if (!dynamic) {
        fail("HETRING_BLAS_CORETYPE=%s: this OpenBLAS (%s) is built for %s only and cannot "
             "switch kernels; unset it or use a DYNAMIC_ARCH build",
             name, lib_file("openblas_get_corename"), rec.before);
        return;
    }
    snprintf(rec.want, sizeof rec.want, "%s", name);
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
    rec.how = HOW_CHOSEN;
    snprintf(rec.want, sizeof rec.want, "%s", want);
}

/* This process was started as wanted: check that the library took the set. */
static void check_taken(const char *now) {
    if (!rec.want[0] || strcasecmp(now, rec.want) == 0) return;
    if (rec.how == HOW_KNOB) {
        fail("HETRING_BLAS_CORETYPE=%s: this OpenBLAS (%s) does not take that kernel set (it runs "
             "%s instead)",
             rec.want, lib_file("openblas_get_corename"), now);
        return;
    }
    int was = core_index(rec.before), is = core_index(now);
    if (!(is >= 0 && was >= 0 && cores[is].need > cores[was].need))
        rec.how = HOW_NOT_TAKEN; /* unless the library mapped it onto a stronger set of its own */
}

/* The process cannot be re-executed (a host of the library, or a failed exec): what runs stays,
 * and a named set that cannot be had is an error. */
static void cannot_exec(pick_how how) {
    if (rec.how == HOW_KNOB)
        fail(
            "HETRING_BLAS_CORETYPE=%s: %s; set OPENBLAS_CORETYPE=%s in the environment that starts "
            "the process instead",
            rec.want,
            how == HOW_ADVISED ? "a library does not restart the process that loads it"
                               : "re-running the program with it failed",
            rec.want);
    else
        rec.how = how;
}

static int exec_needed(void);

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
    const char *user = getenv("OPENBLAS_CORETYPE");
    read_mark(user);
    if (!rec.ours) snprintf(rec.before, sizeof rec.before, "%s", corename());
    if (user && !rec.ours) {
        rec.how = HOW_USER_ENV;
        snprintf(rec.user, sizeof rec.user, "%s", user);
        if (named && strcasecmp(user, knob) != 0)
            fail("HETRING_BLAS_CORETYPE=%s and OPENBLAS_CORETYPE=%s disagree; unset one", knob,
                 user);
        return;
    }
    int dynamic = sym("gotoblas_dynamic_init") != NULL; /* a DYNAMIC_ARCH build */
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
    if (rec.st != HR_OK) return;
    if (exec_needed() && !rec.may_exec) cannot_exec(HOW_ADVISED);
    if (rec.st == HR_OK && !exec_needed()) check_taken(corename());
    snprintf(rec.line, sizeof rec.line,
             "blas: HETRING_BLAS_CORETYPE=%s, OpenBLAS picked %s, this CPU has %s, runs %s%s%s%s",
             knob ? knob : "(unset: auto)", rec.before, tier_features(cpu_tier(&cpu)), corename(),
             rec.have[0] ? " (OPENBLAS_CORETYPE=" : "", rec.have,
             rec.have[0] ? " set by hetring)" : "");
}

static int exec_needed(void) {
    return rec.st == HR_OK && rec.how != HOW_USER_ENV && rec.how != HOW_NOT_OPENBLAS &&
           strcasecmp(rec.ours ? rec.have : "", rec.want) != 0;
}

/* Run this program again, argv unchanged, with OPENBLAS_CORETYPE and MARK as wanted in a copy
 * of the environment (no setenv: other threads, OpenBLAS's own among them, may read it).
 * Returns only when execve failed. */
static void reexec(char **argv) {
    extern char **environ;
    size_t n = 0, k = 0;
    while (environ[n]) n++;
    char **env = malloc((n + 3) * sizeof *env);
    static char core[64], mark[96];
    if (!env) {
        rec.exec_errno = ENOMEM;
        return;
    }
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "OPENBLAS_CORETYPE=", 18) != 0 &&
            strncmp(environ[i], MARK "=", sizeof MARK) != 0)
            env[k++] = environ[i];
    if (rec.want[0]) {
        snprintf(core, sizeof core, "OPENBLAS_CORETYPE=%s", rec.want);
        env[k++] = core;
    }
    snprintf(mark, sizeof mark, MARK "=%s:%s", rec.want, rec.before);
    env[k++] = mark;
    env[k] = NULL;
    fflush(NULL);
    execve("/proc/self/exe", argv, env);
    rec.exec_errno = errno;
    free(env);
}

hr_status blas_pick_main(char **argv, char *err, size_t errlen) {
    rec.may_exec = 1; /* before the once: pick() reads it */
    pthread_once(&rec.once, pick);
    if (exec_needed()) {
        reexec(argv);
        cannot_exec(HOW_EXEC_FAILED);
    }
    if (rec.st != HR_OK && err && errlen) snprintf(err, errlen, "%s", rec.err);
    return rec.st;
}

hr_status blas_pick_init(char *err, size_t errlen) {
    pthread_once(&rec.once, pick);
    if (rec.st != HR_OK && err && errlen) snprintf(err, errlen, "%s", rec.err);
    return rec.st;
}

const char *blas_pick_advice(void) {
    return rec.how == HOW_ADVISED && rec.target[0] && rec.why ? rec.target : NULL;
}

void blas_pick_log(void) {
    if (rec.line[0] && atomic_exchange(&rec.logged, 1) == 0) HR_DEBUG(TRAIN, "%s", rec.line);
}

/* ================================================================ threads */

static pthread_mutex_t threads_lock = PTHREAD_MUTEX_INITIALIZER;
static long threads_set; /* the count OpenBLAS runs since the first call, 0 before it */

/* OpenBLAS's build-time cap on its threads, "MAX_THREADS=N" of openblas_get_config, into out
 * ("" when it does not say). */
static void openblas_max_threads(char *out, size_t len) {
    str_fn config = str_sym("openblas_get_config");
    const char *c = config ? config() : NULL, *m = c ? strstr(c, "MAX_THREADS=") : NULL;
    snprintf(out, len, "%.*s", m ? (int)strcspn(m, " ") : 0, m ? m : "");
}

hr_status blas_set_threads(long threads, char *err, size_t errlen) {
    const int every = threads <= 0;
    if (every) threads = hr_cores();
    pthread_mutex_lock(&threads_lock);
    long was = threads_set, got = threads;
    if (!was) {
        openblas_set_num_threads((int)threads);
        got = openblas_get_num_threads(); /* what it runs: it caps the count it is given */
        threads_set = got > 0 ? got : 1;
    }
    pthread_mutex_unlock(&threads_lock);
    if (!was && got < threads && every) { /* "every core": as many as this OpenBLAS runs */
        HR_INFO(TRAIN, "threads = 0: OpenBLAS runs %ld of this process's %ld cores", got, threads);
        return HR_OK;
    }
    if (!was && got >= threads) return HR_OK;
    if (!was) {
        char cap[48];
        openblas_max_threads(cap, sizeof cap);
        snprintf(err, errlen,
                 "OpenBLAS runs %ld thread(s), not the %ld asked for%s%s (expected threads = "
                 "%ld or fewer, or 0 for as many as it runs)",
                 got, threads, cap[0] ? ": its build's maximum, " : "", cap, got);
        return HR_ERR_CONFIG;
    }
    if (was == threads) return HR_OK;
    snprintf(err, errlen,
             "BLAS threads: this process already runs OpenBLAS on %ld thread(s) and cannot "
             "change to %ld (one thread count per process)",
             was, threads);
    return HR_ERR_CONFIG;
}

long blas_threads(void) {
    pthread_mutex_lock(&threads_lock);
    long n = threads_set;
    pthread_mutex_unlock(&threads_lock);
    return n;
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
        snprintf(buf, len, "OpenBLAS did not take %s, which this CPU's %s calls for", rec.target,
                 rec.why);
        return;
    case HOW_SINGLE_TARGET:
        snprintf(buf, len, "built for one target; this CPU's %s could run %s", rec.why, rec.target);
        return;
    case HOW_CHOSEN:
        snprintf(buf, len, "chosen by hetring for %s; OpenBLAS picked %s", rec.why, rec.before);
        return;
    case HOW_ADVISED:
        if (!rec.target[0] || !rec.why) {
            snprintf(buf, len, "OPENBLAS_CORETYPE=%s, inherited", rec.have);
            return;
        }
        snprintf(buf, len,
                 "OpenBLAS's own pick; this CPU's %s calls for %s: set OPENBLAS_CORETYPE=%s "
                 "before the process starts",
                 rec.why, rec.target, rec.target);
        return;
    case HOW_EXEC_FAILED:
        snprintf(buf, len, "as loaded; running again with OPENBLAS_CORETYPE=%s failed: %s",
                 rec.want[0] ? rec.want : "(unset)", strerror(rec.exec_errno));
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
