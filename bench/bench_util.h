/*
 * bench_util.h: small helpers shared by the bench suites: reading numbers out of one-line
 * JSON records (the metrics and summary files hetring writes), list and number options,
 * medians, cluster files built over a template, running the hetring executable (or gnuplot,
 * or a Python baseline) as a child with a deadline, stopping on SIGINT and SIGTERM, and the
 * header lines every suite prints (BLAS kernels, the PyTorch found).
 */
#ifndef HR_BENCH_UTIL_H
#define HR_BENCH_UTIL_H

#include "conf/cfg.h"

#include <stddef.h>
#include <stdio.h>

/* Find "key": NUMBER in a one-line JSON object. Returns 0 and stores it, or -1. */
int json_number(const char *line, const char *key, double *out);
/* Find "key": [N, N, ...]; stores up to `max` numbers and returns how many were read. */
int json_array(const char *line, const char *key, double *out, int max);
/* Is `item` one of the comma-separated entries of `list`? */
int list_has(const char *list, const char *item);
/* The first entry of the comma-separated `list` (NULL: none) that is none of names[0, n), its
 * length in *len; NULL when every entry is one of them. With `joined`, names[0, n) joined by
 * ", " there, for the message that lists them. */
const char *list_unknown(const char *list, const char *const *names, int n, size_t *len,
                         char *joined, size_t joined_len);
/* Median of v[0..n) (sorts v in place); NAN for n = 0. */
double bench_median(double *v, int n);

/* Parse the value `arg` of option --`name` as an integer in [lo, hi]. Returns 0, or prints
 * "hetring bench SUITE: --NAME 'ARG' (expected LO..HI)" and returns -1. */
int bench_long_opt(const char *suite, const char *name, const char *arg, long lo, long hi,
                   long *out);

/* How bench_parse_opts stores an option's value at `dst`. A value that is not whole (trailing
 * characters, no digits) or out of range is a usage error naming the option. */
typedef enum {
    BENCH_OPT_FLAG, /* no value; int = 1 */
    BENCH_OPT_STR,  /* const char * = the argument */
    BENCH_OPT_OUT,  /* the same, a file the suite writes: checked now (hr_file_writable) */
    BENCH_OPT_LONG, /* long in [lo, hi], checked by bench_long_opt */
    BENCH_OPT_INT,  /* int in [lo, hi], the same way */
    BENCH_OPT_REAL, /* double, a finite number; its range is the suite's to check */
    BENCH_OPT_SIZE, /* size_t bytes in [lo, hi]: a number >= 0, then K, M or G (x1024) */
    BENCH_OPT_FN,   /* fn(suite, argument, dst) */
} bench_opt_kind;

/* One --NAME option of a suite; a table of them ends with {NULL}. */
typedef struct {
    const char *name;    /* without the dashes */
    bench_opt_kind kind; /* how the value is read */
    void *dst;           /* where it goes (the type the kind names) */
    long lo, hi;         /* BENCH_OPT_LONG, _INT and _SIZE: the accepted range */
    int (*fn)(const char *suite, const char *arg, void *dst); /* BENCH_OPT_FN: 0, or -1 after
                                                                 printing a usage error */
} bench_opt;

/* The most options one table may hold. */
#define BENCH_MAX_OPTS 24

/* Parse the command line of `hetring bench SUITE` (argv[0] is the suite) with getopt_long,
 * taking --help and -h besides the table. Returns -1 when the suite goes on, else its exit
 * status: CLI_OK after --help (usage to stdout); CLI_USAGE after an unknown option or a
 * missing value (getopt's message, then usage to stderr), a bad value (its message) or a
 * leftover argument ("hetring bench SUITE: unexpected argument 'ARG'"). Options are read in
 * order, so the first of these to appear decides. */
int bench_parse_opts(const char *suite, const bench_opt *opts, void (*usage)(FILE *), int argc,
                     char **argv);

/* --set SECTION.KEY=VALUE overrides of a suite, kept in order. */
#define BENCH_MAX_SETS 16
typedef struct {
    const char *v[BENCH_MAX_SETS]; /* the overrides as given */
    int n;                         /* how many */
} bench_sets;

/* The BENCH_OPT_FN of --set: append arg to the bench_sets at dst; -1 after a usage error past
 * BENCH_MAX_SETS. */
int bench_add_set(const char *suite, const char *arg, void *dst);

/* Close `f`, written as `path`: 0, or -1 after a message naming the file when any write to it
 * failed (a full disk), so that a result cut short is never taken for a whole one. NULL closes
 * nothing (0). */
int bench_close(FILE *f, const char *path);

/* A file written whole or not at all (the CSVs the plots read): bench_open_out opens
 * PATH.tmp.PID.TAG beside `path` (hr_file_create: what killed writes left there is removed
 * first), its name in tmp[0..n); bench_commit closes it and renames it over `path` when every
 * write reached it, else removes it and leaves `path` as it was (-1, after a message naming
 * `path`). bench_open_out gives NULL, after a message, when it cannot. */
FILE *bench_open_out(const char *path, char *tmp, size_t n);
int bench_commit(FILE *f, const char *tmp, const char *path);

/* Apply one printf-formatted SECTION.KEY=VALUE to `c` (cfg_set, the same assignments as
 * --set). */
hr_status bench_cfg_set(cfg *c, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Write `c` to `path` as cfg_print does, after a "; comment" line. cfg_print writes an unset
 * key as "key = ", which the parser refuses for keys (psk, pubkey); an empty value always means
 * the default, so such lines are left out. Returns 0, or -1 when the file could not be written. */
int bench_write_cfg(const cfg *c, const char *path, const char *comment);

/* Path of the executable `name` in the directory of the running one (the build root, where
 * hetring and hetring-bench both land). Returns 0 when it is there and executable; else -1,
 * with `buf` still holding the path looked for. */
int bench_sibling_exe(const char *name, char *buf, size_t len);

/* The start of a suite that runs clusters: the hetring next to this executable into hetring
 * (len bytes) and the output directory out_dir made (it may exist). -1 when both are there,
 * else the exit status after the message: CLI_USAGE when hetring is not built ("hetring bench
 * SUITE: PATH not found; build the hetring target"), CLI_FAIL when out_dir cannot be made. */
int bench_prepare_runs(const char *suite, char *hetring, size_t len, const char *out_dir);

/* bench_spawn and bench_capture: the bench was asked to stop (bench_stop_on_signals). */
#define BENCH_STOPPED (-2)

/* Run argv (argv[0] a path, or a name looked up in PATH) as a child with stdout and stderr
 * going to `log` (truncated, or appended when `append`; NULL keeps the bench's own), and wait
 * at most `deadline_s` seconds: past it the child gets SIGTERM and, 5 s later, SIGKILL. The
 * child gets SIGTERM too when the bench dies. Returns the child's exit status, 128 + signal
 * when a signal ended it, 124 when the deadline passed, -1 when it could not be started, and
 * BENCH_STOPPED when the bench was asked to stop: the child then got SIGTERM (SIGKILL 10 s
 * later) and was reaped, or was never started. */
int bench_spawn(char *const argv[], const char *log, int append, double deadline_s);

/* bench_spawn with the child's stdout thrown away (/dev/null) and its stderr the bench's own:
 * for a check whose complaints alone matter (`hetring config` prints the configuration). */
int bench_spawn_quiet(char *const argv[], double deadline_s);

/* bench_spawn for a helper whose output the bench reads (a Python baseline): the child runs in
 * a process group of its own, which SIGTERM and SIGKILL reach as a whole (multiprocessing
 * workers included); its stdout lands in out[0..outlen) and the last line of its stderr in
 * err[0..errlen) (either may be NULL), NUL-terminated. Returns as bench_spawn does. */
int bench_capture(char *const argv[], double deadline_s, char *out, size_t outlen, char *err,
                  size_t errlen);

/* From now on SIGINT and SIGTERM ask the bench to stop instead of killing it: the child in
 * progress is stopped (see bench_spawn), no new one starts, and the suite reports what it has
 * measured and exits 128 + the signal. */
void bench_stop_on_signals(void);
/* The signal that asked the bench to stop, or 0. */
int bench_stopped(void);
/* The end of a suite's report: when a signal stopped the bench, "bench SUITE: stopped by SIGINT
 * after DONE of TOTAL runs (FAILED failed); the table above holds the runs completed before it"
 * on stdout (and the stop on stderr), and 128 + the signal to exit with; else -1. */
int bench_stop_status(const char *suite, int done, int total, int failed);

/* ================================================================ headers */

/* "PREFIXblas: OpenBLAS 0.3.21 (...), kernels SkylakeX (...)" and a newline: the BLAS library
 * and the kernels every bench header names (blas_pick_describe). */
void bench_print_blas(FILE *out, const char *prefix);
/* Whether this process could listen on 127.0.0.1:port (1-65535) right now. */
int bench_port_free(int port);
/* The first of `n` consecutive ports in 10000-30799 that this process could listen on at
 * 127.0.0.1 just now (a bench's local nodes then bind them), or -1 when 200 tries found none. */
int bench_free_ports(int n);

/* The first executable `name` in PATH into buf: 0, or -1 (buf "") when there is none. */
int bench_in_path(const char *name, char *buf, size_t len);

/* Where the PyTorch baselines come from. */
typedef struct {
    char path[1024]; /* the interpreter that has torch, or "" */
    char torch[64];  /* torch.__version__ there */
    char python[32]; /* its Python version */
    char how[32];    /* "--python", "python3 on PATH" or "after python3 on PATH" */
    char why[1200];  /* each interpreter tried before, or without, success and what it said */
} bench_python;

/* Find PyTorch: the interpreter `given` (--python PATH) when not NULL, else `python3` on PATH,
 * then /usr/bin/python3: the first that imports torch. Returns 0 when one does; -1 with
 * py->why saying what each one tried answered; -2 when `given` is not an executable file
 * (py->why says so; a usage error). BENCH_STOPPED when the bench was asked to stop. */
int bench_find_python(const char *given, bench_python *py);
/* "torch 2.11.0, Python 3.11.2, /usr/bin/python3 (python3 on PATH)", "..., /usr/bin/python3
 * (python3 on PATH has none: WHY)" or "not available (WHY)" */
void bench_python_describe(const bench_python *py, char *buf, size_t len);

#endif
