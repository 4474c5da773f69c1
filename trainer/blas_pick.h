/*
 * blas_pick.h: BLAS kernels the CPU supports, and OpenBLAS's thread count.
 *
 * Debian's OpenBLAS is a DYNAMIC_ARCH build: when it loads, it picks a kernel set (a "core")
 * from the CPU's vendor, family and model, or takes the one OPENBLAS_CORETYPE names. A CPU
 * newer than the library gets an old set: OpenBLAS 0.3.21 runs its SSE3 `Prescott` kernels on
 * Intel family 6 model 207, about a fifth of what that core does with AVX-512. The set is fixed
 * for the life of a process: it is read once, when the library loads and starts its threads.
 *
 * A program (hetring, hetring-bench, the test programs that train) calls blas_pick_main first
 * thing in main, before any thread of its own and any BLAS call. It compares OpenBLAS's pick
 * with the CPU's feature flags and, when the CPU can run a stronger set, runs the same program
 * again (execve of /proc/self/exe, the same argv) with OPENBLAS_CORETYPE set in a copy of the
 * environment, plus HETRING_BLAS_PICKED=SET:OPENBLAS'S-PICK, which tells the new process (and
 * the processes it starts, which inherit both) that the variable is hetring's. The new process
 * decides the same from the same facts, so there is at most one re-execution, and checks that
 * the library took the set. Children of a hetring process (hetring local's nodes,
 * hetring-bench) inherit the choice and start once.
 *
 * A library user's process is not ours to restart: blas_pick_init decides the same but only
 * describes. A program that loads libhetring (or the Python package) gets the same kernels by
 * setting OPENBLAS_CORETYPE to the set `hetring version` names before the process starts
 * (blas_pick_describe says so when the CPU could run a stronger set).
 *
 * The choice (blas_pick_choose, a pure function): a CPU with AVX-512 F, BW, VL, DQ and CD gets
 * SkylakeX (with AVX512_BF16 too: Cooperlake's fp32 kernels are SkylakeX's, and OpenBLAS 0.3.21
 * does not take Cooperlake by name); a CPU with AVX2 and FMA gets Haswell (Intel and others) or
 * Zen (AMD). A set is replaced only when it belongs to a weaker tier (SSE, AVX, AVX2, AVX-512,
 * AVX-512 BF16) than the one chosen; a CPU without AVX2 is left alone.
 *
 * HETRING_BLAS_CORETYPE (read once):
 *   auto (default or empty)  the choice above
 *   off                      keep OpenBLAS's own pick
 *   NAME                     that kernel set (SkylakeX, Haswell, ...: blas_pick_core_names);
 *                            an unknown name, one this CPU cannot run, or one the library does
 *                            not take is an error, and so is a NAME in a process that cannot
 *                            be re-executed (blas_pick_init)
 * OPENBLAS_CORETYPE set by the user (not hetring's) is respected: nothing changes (and a
 * different NAME in HETRING_BLAS_CORETYPE is an error). With a BLAS other than OpenBLAS, or an
 * OpenBLAS built for one target, nothing changes and blas_pick_describe says so.
 *
 * The record of what was decided is process-wide, as the BLAS library's kernel table is: it is
 * written once, under pthread_once, and read-only afterwards.
 */
#ifndef HR_BLAS_PICK_H
#define HR_BLAS_PICK_H

#include "base/hr_status.h"

#include <stddef.h>

/* A CPU's vendor and the feature flags the kernel sets need (1 = present and enabled by the
 * OS). */
typedef struct {
    int intel, amd;                                      /* vendor */
    int avx, avx2, fma;                                  /* AVX and AVX2 sets */
    int avx512f, avx512bw, avx512vl, avx512dq, avx512cd; /* SkylakeX needs all five */
    int avx512bf16;                                      /* Cooperlake */
} blas_cpu;

/* The CPU this process runs on (__builtin_cpu_supports, __builtin_cpu_is). */
void blas_pick_cpu(blas_cpu *cpu);

/* The kernel set to switch to when OpenBLAS runs `current` (a name as openblas_get_corename
 * gives it, any case) on `cpu`, or NULL to keep it: `current` is at least as strong as the CPU
 * allows, unknown, or the CPU has no AVX2. Pure. */
const char *blas_pick_choose(const blas_cpu *cpu, const char *current);

/* Whether `cpu` can run kernel set `name` (any case); -1 when the name is no OpenBLAS x86-64
 * kernel set. */
int blas_pick_runs(const blas_cpu *cpu, const char *name);

/* The kernel set names HETRING_BLAS_CORETYPE accepts, comma-separated. */
const char *blas_pick_core_names(void);

/* Choose the kernels as described above; call first thing in a program's main, before any
 * thread of the program exists and any BLAS call. When the choice differs from what this
 * process loaded, the program is executed again with the same argv and does not return;
 * should execve fail, the kernels loaded are kept and described (a NAME from
 * HETRING_BLAS_CORETYPE is then an error). Returns HR_OK, or HR_ERR_CONFIG with a message (a
 * bad HETRING_BLAS_CORETYPE, a conflict with OPENBLAS_CORETYPE, a set the library did not
 * take). Later calls return the first one's result. */
hr_status blas_pick_main(char **argv, char *err, size_t errlen);

/* The same decision in a process that must not be restarted (a library's host): it describes
 * only; HETRING_BLAS_CORETYPE=NAME for a set not loaded is an error telling the user to set
 * OPENBLAS_CORETYPE instead. */
hr_status blas_pick_init(char *err, size_t errlen);

/* The kernel set the user should put in OPENBLAS_CORETYPE, when blas_pick_init found a
 * stronger one than OpenBLAS's pick that it may not switch to; else NULL. */
const char *blas_pick_advice(void);

/* Give OpenBLAS `threads` threads (0: every core this process may use, hr_cores), once per
 * process and before any thread of ours exists: OpenBLAS resizes its pool in the call. Fewer
 * than asked (OpenBLAS caps the count at its build's MAX_THREADS, and a single-threaded build
 * runs one) is refused with a message that says what it runs, except for 0, which takes what
 * it runs. A later call with the same
 * count does nothing; one with another count is refused (HR_ERR_CONFIG with a message), since
 * the process would otherwise run on a count it did not ask for. */
hr_status blas_set_threads(long threads, char *err, size_t errlen);

/* The count OpenBLAS runs since blas_set_threads; 0 before the first call. */
long blas_threads(void);

/* Log at debug level, once per process, what blas_pick_init chose and why. blas_pick_init
 * itself logs nothing: it runs before a node knows its id, and every line a node logs carries
 * that id (hr_log_set_node). The trainer calls this from train_init. */
void blas_pick_log(void);

/* One line naming the BLAS library, the kernel set in use and who chose it, e.g.
 * "blas: OpenBLAS 0.3.21 (libopenblas.so.0), kernels SkylakeX (chosen by hetring for avx512;
 * OpenBLAS picked Prescott)". Before blas_pick_init it describes the library as loaded. */
void blas_pick_describe(char *buf, size_t len);

#endif
