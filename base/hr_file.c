/*
 * hr_file.c: see hr_file.h.
 */
#include "base/hr_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int hr_file_writable(const char *path, char *why, size_t n) {
    struct stat sb;
    if (stat(path, &sb) == 0) {
        if (!S_ISREG(sb.st_mode)) return snprintf(why, n, "not a regular file"), -1;
        if (access(path, W_OK) != 0) return snprintf(why, n, "%s", strerror(errno)), -1;
        return 0;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return snprintf(why, n, "%s", strerror(errno)), -1;
    close(fd);
    unlink(path);
    return 0;
}
