/*
 * hr_dl.h: the GPU libraries opened at run time (DESIGN.md, "The GPU path"). trainer/cuda and
 * ring/nccl each keep a table of the functions they call, filled from a library opened here,
 * so no GPU library is in a binary's NEEDED entries and a process that never uses the GPU
 * never maps one.
 *
 * A library is opened by the first of its names that loads: the versioned soname first
 * ("libcublas.so.13"), then the unversioned one. HETRING_CUDA_LIBS=DIR opens each name as
 * DIR/NAME instead of through the loader's search (a test and diagnostic knob: with a
 * directory that does not hold them, a CUDA build behaves as on a machine without the
 * libraries). Every failure message names the library and says what dlopen or dlsym said.
 */
#ifndef HR_DL_H
#define HR_DL_H

#include "base/hr_log.h"
#include "base/hr_status.h"

#include <pthread.h>
#include <stddef.h>

/* One function of a table: its exported name and the offset of its pointer in the table. */
typedef struct {
    const char *name;
    size_t off;
} hr_dl_sym;

/* Open the first of names[0..n) that loads (RTLD_LAZY | RTLD_LOCAL). NULL with a message in
 * err ("libnccl.so.2: cannot open shared object file: ..., also tried libnccl.so") when none
 * does. */
void *hr_dl_open(const char *const *names, int n, char *err, size_t errlen);

/* Fill the pointers of table (syms[0..n)) from h. HR_ERR_UNSUPPORTED naming lib and the
 * missing function (a library older than this build needs) when one is absent. */
hr_status hr_dl_bind(void *h, const char *lib, const hr_dl_sym *syms, int n, void *table, char *err,
                     size_t errlen);

/* The file h was opened from (its full path), in out. */
void hr_dl_path(void *h, char *out, size_t len);

void hr_dl_close(void *h); /* safe on NULL */

/* One library a table's functions come from: its label in messages ("cuBLAS"), its names
 * (versioned soname first), the check of its version (HR_OK with the version in ver, "cuBLAS
 * 13.1.0"; HR_ERR_UNSUPPORTED saying why this build cannot use it) and the functions bound from
 * it (none for a library that is only checked, the CUDA driver). */
typedef struct {
    const char *label;
    const char *names[2];
    hr_status (*version)(void *h, char *ver, size_t len, char *err, size_t errlen);
    const hr_dl_sym *syms;
    int n_syms;
} hr_dl_lib;

/* Open l and check its version; NULL with the reason (which names the file) in err. */
void *hr_dl_open_checked(const hr_dl_lib *l, char *ver, size_t vlen, char *err, size_t errlen);

/* Open and check libs[0..n) and fill table (size bytes) from them. On failure everything is
 * closed, the table zeroed and err says "<label>: <why>" of the first library that failed;
 * on success "loaded <version>, <version>" is logged (info, under sub) and the handles stay
 * open for the process's life. */
hr_status hr_dl_load(const hr_dl_lib *libs, int n, void *table, size_t size, hr_log_sub sub,
                     char *err, size_t errlen);

/* A line per library of libs[0..n) into out (`hetring version`): "  <label>: <version>
 * (<path>)", or "  <label>: cannot be used: <why>". Each is opened and closed again. */
void hr_dl_describe(const hr_dl_lib *libs, int n, char *out, size_t len);

/* A library table's load, run once per process: its status and message, kept for every later
 * caller (a failed load is not retried). Initialise with HR_DL_ONCE_INIT. */
typedef struct {
    pthread_mutex_t mu;  /* guards the fields below */
    int tried;           /* load has run */
    hr_status st;        /* what it returned */
    char why[HR_ERRLEN]; /* its message, where st is not HR_OK */
} hr_dl_once;
#define HR_DL_ONCE_INIT                                                                            \
    { PTHREAD_MUTEX_INITIALIZER, 0, HR_OK, "" }

/* Run load the first time, under o's lock; every call returns its status, with its message in
 * err on failure. */
hr_status hr_dl_once_run(hr_dl_once *o, hr_status (*load)(char *err, size_t errlen), char *err,
                         size_t errlen);

#endif
