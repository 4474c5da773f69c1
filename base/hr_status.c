/* hr_status.c: status strings, breadcrumbs and the error-buffer helper. */
#include "base/hr_status.h"
#include "base/hr_log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *hr_strerror(hr_status s) {
    static const char *const names[HR_STATUS_COUNT] = {
        [HR_OK] = "success",
        [HR_ERR_INVAL] = "invalid argument",
        [HR_ERR_CONFIG] = "configuration error",
        [HR_ERR_NOMEM] = "out of memory",
        [HR_ERR_IO] = "I/O error",
        [HR_ERR_TIMEOUT] = "timeout",
        [HR_ERR_PEER] = "peer failure",
        [HR_ERR_PROTO] = "protocol error",
        [HR_ERR_AUTH] = "authentication failure",
        [HR_ERR_DATA] = "bad data",
        [HR_ERR_MISMATCH] = "replica mismatch",
        [HR_ERR_VIEW] = "membership view changed",
        [HR_ERR_UNSUPPORTED] = "not supported in this build",
        [HR_ERR_CUDA] = "CUDA error",
        [HR_ERR_NCCL] = "NCCL error",
        [HR_ERR_INTERRUPTED] = "interrupted",
        [HR_ERR_NONFINITE] = "gradient or loss not finite",
    };
    if ((int)s < 0 || s >= HR_STATUS_COUNT) return "unknown status";
    return names[s];
}

void hr_breadcrumb(const char *file, int line, hr_status s) {
    const char *base = strrchr(file, '/');
    HR_DEBUG(CLI, "%s:%d -> %d (%s)", base ? base + 1 : file, line, (int)s, hr_strerror(s));
}

hr_status hr_fail(char *err, size_t errlen, hr_status s, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return s;
}
