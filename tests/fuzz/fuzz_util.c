/* fuzz_util.c: the log level of every target and the temporary files the file-parser targets
 * write their input to (fuzz.h). */
#include "tests/fuzz/fuzz.h"
#include "base/hr_log.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define FUZZ_SLOTS 4

static char fuzz_paths[FUZZ_SLOTS][256];

static void fuzz_cleanup(void) {
    for (int i = 0; i < FUZZ_SLOTS; i++)
        if (fuzz_paths[i][0]) unlink(fuzz_paths[i]);
}

void fuzz_quiet(void) {
    char err[128];
    hr_log_configure("error", err, sizeof err);
}

const char *fuzz_file(int slot, const void *data, size_t n) {
    char *path = fuzz_paths[slot];
    if (!path[0]) {
        const char *dir = getenv("TMPDIR");
        snprintf(path, sizeof fuzz_paths[0], "%s/hetring-fuzz.%d.%d", dir && *dir ? dir : "/tmp",
                 (int)getpid(), slot);
        static int registered;
        if (!registered++) atexit(fuzz_cleanup);
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const uint8_t *p = data;
    while (fd >= 0 && n) {
        ssize_t w = write(fd, p, n);
        if (w <= 0) break;
        p += w;
        n -= (size_t)w;
    }
    if (fd < 0 || n || close(fd) != 0) {
        perror(path);
        abort();
    }
    return path;
}
