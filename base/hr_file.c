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
    /* a probe of this process's own beside it: nodes started together may check one path at
     * once (hetring local gives every node the same --summary), and none may see another's */
    char probe[4200];
    if (snprintf(probe, sizeof probe, "%s.probe.%ld", path, (long)getpid()) >= (int)sizeof probe)
        return snprintf(why, n, "%s", strerror(ENAMETOOLONG)), -1;
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return snprintf(why, n, "%s", strerror(errno)), -1;
    close(fd);
    unlink(probe);
    return 0;
}
