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

static const char *const names[2] = {"libnccl.so." STR(NCCL_MAJOR), "libnccl.so"};

/* Open the library and check its version ("NCCL 2.28.9" in ver); NULL with the reason, which
 * names the library, in err. */
static void *open_checked(char *ver, size_t vlen, char *err, size_t errlen) {
    char why[HR_ERRLEN];
    ncclResult_t (*get)(int *) = NULL;
    hr_dl_sym sym = {"ncclGetVersion", 0};
    int v = 0;
    void *h = hr_dl_open(names, 2, why, sizeof why);
    if (h && hr_dl_bind(h, "NCCL", &sym, 1, (void *)&get, why, sizeof why) != HR_OK)
        hr_dl_close(h), h = NULL;
    if (h && get(&v) != ncclSuccess)
        snprintf(why, sizeof why, "ncclGetVersion failed"), hr_dl_close(h), h = NULL;
    if (h) {
        snprintf(ver, vlen, "NCCL %d.%d.%d", v / 10000, v / 100 % 100, v % 100);
        if (v < NCCL_LIB_NEED || v / 10000 != NCCL_MAJOR) {
            char path[HR_ERRLEN];
            hr_dl_path(h, path, sizeof path);
            hr_fail(why, sizeof why, HR_ERR_UNSUPPORTED,
                    "%s: %s, but this build needs NCCL %d.x from 2.14", path, ver, NCCL_MAJOR);
            hr_dl_close(h), h = NULL;
        }
    }
    if (!h) hr_fail(err, errlen, HR_ERR_UNSUPPORTED, "NCCL: %s", why);
    return h;
}

#define NCCL_LIB_SYM(f) {#f, offsetof(nccl_lib_fns, f)},

static hr_status load(char *err, size_t errlen) {
    static const hr_dl_sym syms[] = {NCCL_LIB_FNS(NCCL_LIB_SYM)};
    char ver[64];
    void *h = open_checked(ver, sizeof ver, err, errlen);
    if (!h) return HR_ERR_UNSUPPORTED;
    hr_status st =
        hr_dl_bind(h, "NCCL", syms, (int)(sizeof syms / sizeof syms[0]), &nccl_lib, err, errlen);
    if (st != HR_OK) {
        hr_dl_close(h);
        memset(&nccl_lib, 0, sizeof nccl_lib);
        return st;
    }
    HR_INFO(RING, "loaded %s", ver); /* the handle stays open for the process's life */
    return HR_OK;
}

hr_status nccl_lib_load(char *err, size_t errlen) {
    static hr_dl_once once = HR_DL_ONCE_INIT;
    return hr_dl_once_run(&once, load, err, errlen);
}

void nccl_lib_describe(char *out, size_t len) {
    char ver[64], path[512], why[HR_ERRLEN];
    void *h = open_checked(ver, sizeof ver, why, sizeof why);
    hr_dl_path(h, path, sizeof path);
    if (h)
        snprintf(out, len, "  NCCL: %s (%s)", ver, path);
    else
        snprintf(out, len, "  NCCL: cannot be used: %s", why + strlen("NCCL: "));
    hr_dl_close(h);
}
