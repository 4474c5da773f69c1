/*
 * nccl_lib.h: the NCCL functions ring/nccl calls, as a table filled at run time (not a public
 * header; nccl_comm.h declares nccl_lib_load and nccl_lib_describe).
 *
 * libnccl.so.2 is opened (base/hr_dl.h) by the first NCCL call of a process, which happens
 * only when a view chooses NCCL (or a node with backend = nccl starts), so no binary has it
 * in NEEDED and a process that never all-reduces over NCCL never maps it. Each field has the
 * type of the function it points at, from nccl.h, and its name. The table is the process's:
 * filled once, under a lock, and never changed afterwards, as the loader's own state.
 */
#ifndef HR_NCCL_LIB_H
#define HR_NCCL_LIB_H

#include <nccl.h>

#define NCCL_LIB_FNS(X)                                                                            \
    X(ncclGetVersion)                                                                              \
    X(ncclGetUniqueId)                                                                             \
    X(ncclCommInitRankConfig)                                                                      \
    X(ncclCommGetAsyncError)                                                                       \
    X(ncclGetErrorString)                                                                          \
    X(ncclGetLastError)                                                                            \
    X(ncclAllReduce)                                                                               \
    X(ncclCommAbort)                                                                               \
    X(ncclCommFinalize)                                                                            \
    X(ncclCommDestroy)

#define NCCL_LIB_FIELD(f) __typeof__(&f) f;

typedef struct {
    NCCL_LIB_FNS(NCCL_LIB_FIELD)
} nccl_lib_fns;

/* The table; its pointers are valid once nccl_lib_load returned HR_OK. */
extern nccl_lib_fns nccl_lib;

#endif
