/*
 * hr_status.h: the project-wide status codes and the propagate macros.
 *
 * Every library function that can fail returns an hr_status. HR_CHECK passes a failure
 * upward and logs a "file:line -> status" breadcrumb at debug level at each level, so one
 * failure prints a short trace with HETRING_LOG=debug. Library code never calls exit().
 * This header depends on libc only, so ctrl/ may use it.
 */
#ifndef HR_STATUS_H
#define HR_STATUS_H

#include <stddef.h>

typedef enum {
    HR_OK = 0,
    HR_ERR_INVAL,       /* invalid argument or state */
    HR_ERR_CONFIG,      /* configuration error */
    HR_ERR_NOMEM,       /* allocation failed */
    HR_ERR_IO,          /* file or socket I/O error */
    HR_ERR_TIMEOUT,     /* a deadline passed */
    HR_ERR_PEER,        /* a peer closed the link or died */
    HR_ERR_PROTO,       /* malformed or unexpected frame */
    HR_ERR_AUTH,        /* authentication or integrity failure */
    HR_ERR_DATA,        /* malformed data or checkpoint file */
    HR_ERR_MISMATCH,    /* replicas or decisions disagree (I4, I5) */
    HR_ERR_VIEW,        /* the membership view changed */
    HR_ERR_UNSUPPORTED, /* not available in this build or on this machine */
    HR_ERR_CUDA,        /* CUDA or cuBLAS error */
    HR_ERR_NCCL,        /* NCCL error */
    HR_ERR_INTERRUPTED, /* stopped by a signal */
    HR_ERR_NONFINITE,   /* a gradient or loss is not finite (NaN, inf) */
    HR_STATUS_COUNT
} hr_status;

/* Short, stable description of a status ("timeout", "peer failure", ...). */
const char *hr_strerror(hr_status s);

/* Length of the caller-owned error buffers that functions fill with a detailed message. */
#define HR_ERRLEN 512

/* Log a breadcrumb; used by the macros below. */
void hr_breadcrumb(const char *file, int line, hr_status s);

/* Propagate a failure to the caller, leaving a breadcrumb. */
#define HR_CHECK(call)                                                                             \
    do {                                                                                           \
        hr_status hr_s_ = (call);                                                                  \
        if (hr_s_ != HR_OK) {                                                                      \
            hr_breadcrumb(__FILE__, __LINE__, hr_s_);                                              \
            return hr_s_;                                                                          \
        }                                                                                          \
    } while (0)

/* Store a failure in `st` and jump to `label` for cleanup, leaving a breadcrumb. */
#define HR_CHECK_GOTO(call, st, label)                                                             \
    do {                                                                                           \
        (st) = (call);                                                                             \
        if ((st) != HR_OK) {                                                                       \
            hr_breadcrumb(__FILE__, __LINE__, (st));                                               \
            goto label;                                                                            \
        }                                                                                          \
    } while (0)

/* Format a message into a caller-owned buffer (may be NULL); returns `s` for one-line use:
 *     return hr_fail(err, errlen, HR_ERR_DATA, "%s: truncated", path); */
hr_status hr_fail(char *err, size_t errlen, hr_status s, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
