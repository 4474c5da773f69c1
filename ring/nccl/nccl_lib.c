/*
 * nccl_lib.c: libnccl.so.2, opened at run time (nccl_lib.h). nccl_lib_load opens it, checks
 * its version and binds the table once per process, and keeps it; nccl_lib_describe opens it,
 * asks its version and closes it again (`hetring version`).
 */
#include "ring/nccl/nccl_lib.h"

#include "base/hr_dl.h"
#include "base/hr_log.h"
#include "ring/nccl/nccl_comm.h"

#include <stdio.h>
#include <string.h>

#define STR_(x) #x
#define STR(x)  STR_(x)

/* Non-blocking communicators (ncclConfig_t) and ncclCommFinalize came with NCCL 2.14. */
#define NCCL_LIB_NEED NCCL_VERSION(2, 14, 0)

nccl_lib_fns nccl_lib;

/* ncclGetVersion's answer ("NCCL 2.28.9" in ver), and whether this build can use it. */
static hr_status nccl_version(void *h, char *ver, size_t len, char *err, size_t errlen) {
    ncclResult_t (*get)(int *) = NULL;
    hr_dl_sym sym = {"ncclGetVersion", 0};
    HR_CHECK(hr_dl_bind(h, "NCCL", &sym, 1, (void *)&get, err, errlen));
    int v = 0;
    if (get(&v) != ncclSuccess)
        return hr_fail(err, errlen, HR_ERR_UNSUPPORTED, "ncclGetVersion failed");
    snprintf(ver, len, "NCCL %d.%d.%d", v / 10000, v / 100 % 100, v % 100);
    if (v < NCCL_LIB_NEED || v / 10000 != NCCL_MAJOR)
        return hr_fail(err, errlen, HR_ERR_UNSUPPORTED,
                       "%s, but this build needs NCCL %d.x from 2.14", ver, NCCL_MAJOR);
    return HR_OK;
}

#define NCCL_LIB_SYM(f) {#f, offsetof(nccl_lib_fns, f)},

static const hr_dl_sym syms[] = {NCCL_LIB_FNS(NCCL_LIB_SYM)};
static const hr_dl_lib lib = {"NCCL",
                              {"libnccl.so." STR(NCCL_MAJOR), "libnccl.so"},
                              nccl_version,
                              syms,
                              (int)(sizeof syms / sizeof syms[0])};

static hr_status load(char *err, size_t errlen) {
    return hr_dl_load(&lib, 1, &nccl_lib, sizeof nccl_lib, HR_SUB_RING, err, errlen);
}

hr_status nccl_lib_load(char *err, size_t errlen) {
    static hr_dl_once once = HR_DL_ONCE_INIT;
    return hr_dl_once_run(&once, load, err, errlen);
}

void nccl_lib_describe(char *out, size_t len) {
    hr_dl_describe(&lib, 1, out, len);
}
