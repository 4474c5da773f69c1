/*
 * blas_pick.h: BLAS kernels the CPU supports.
 *
 * Debian's OpenBLAS is a DYNAMIC_ARCH build: when it loads, it picks a kernel set (a "core")
 * from the CPU's vendor, family and model. A CPU newer than the library gets an old set:
 * OpenBLAS 0.3.21 runs its SSE3 `Prescott` kernels on Intel family 6 model 207, about a fifth
 * of what that core does with AVX-512. blas_pick_init, called once before the first BLAS call,
 * compares that pick with the CPU's feature flags and, when the CPU can run a stronger set,
 * makes OpenBLAS select again: OPENBLAS_CORETYPE is set to the set's name for the moment of
 * gotoblas_dynamic_quit() + gotoblas_dynamic_init() (which drop the kernel table and pick it
 * anew from that variable, calling the set's own init), then restored, so child processes
 * decide for themselves.
 *
 * The choice (blas_pick_choose, a pure function): a CPU with AVX-512 F, BW, VL, DQ and CD gets
 * SkylakeX, and Cooperlake when it also has AVX512_BF16; a CPU with AVX2 and FMA gets Haswell
 * (Intel and others) or Zen (AMD). A set is replaced only when it belongs to a weaker tier
 * (SSE, AVX, AVX2, AVX-512, AVX-512 BF16) than the CPU's; a CPU without AVX2 is left alone.
 *
 * HETRING_BLAS_CORETYPE (read once, by blas_pick_init):
 *   auto (default or empty)  the choice above
 *   off                      keep OpenBLAS's own pick
 *   NAME                     that kernel set (SkylakeX, Haswell, ...: blas_pick_core_names);
 *                            an unknown name, one this CPU cannot run, or one the library does
 *                            not take is an error
 * OPENBLAS_CORETYPE set by the user is respected: nothing changes (and a different NAME in
 * HETRING_BLAS_CORETYPE is an error). With a BLAS other than OpenBLAS, or an OpenBLAS built
 * for one target, nothing changes and blas_pick_describe says so.
 *
 * The record of what was done is process-wide, as the BLAS library's kernel table is: it is
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

/* Choose the kernels as described above. Call once, from one thread, before any BLAS call;
 * later calls return the first one's result. Returns HR_OK, or HR_ERR_CONFIG with a message
 * (a bad HETRING_BLAS_CORETYPE, a conflict with OPENBLAS_CORETYPE, a set the library did not
 * take; OpenBLAS then runs its own pick again). */
hr_status blas_pick_init(char *err, size_t errlen);

/* Log at debug level, once per process, what blas_pick_init chose and why. blas_pick_init
 * itself logs nothing: it runs before a node knows its id, and every line a node logs carries
 * that id (hr_log_set_node). The trainer calls this from train_init. */
void blas_pick_log(void);

/* One line naming the BLAS library, the kernel set in use and who chose it, e.g.
 * "blas: OpenBLAS 0.3.21 (libopenblas.so.0), kernels SkylakeX (chosen by hetring for avx512;
 * OpenBLAS picked Prescott)". Before blas_pick_init it describes the library as loaded. */
void blas_pick_describe(char *buf, size_t len);

#endif
