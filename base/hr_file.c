/*
 * hr_file.c: see hr_file.h.
 */
#include "base/hr_file.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static unsigned ns_tag(void);

int hr_file_writable(const char *link, char *why, size_t n) {
    struct stat sb;
    char path[4096]; /* where a link leads: the file hr_file_create writes */
    if (hr_file_target(link, path, sizeof path) != 0)
        return snprintf(why, n, "%s", strerror(errno)), -1;
    if (stat(path, &sb) == 0) {
        if (!S_ISREG(sb.st_mode)) return snprintf(why, n, "not a regular file"), -1;
        if (access(path, W_OK) != 0) return snprintf(why, n, "%s", strerror(errno)), -1;
        return 0;
    }
    /* a probe of this process's own beside it (named as hr_file_tmp_name names): nodes started
     * together, of this or another container, may check one path at once (hetring local gives
     * every node the same --summary), and none may see another's */
    char probe[4200]; /* PATH.probe.PID.TAG: another container's process may run as PID here */
    if (snprintf(probe, sizeof probe, "%s.probe.%ld.%08x", path, (long)getpid(), ns_tag()) >=
        (int)sizeof probe)
        return snprintf(why, n, "%s", strerror(ENAMETOOLONG)), -1;
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return snprintf(why, n, "%s", strerror(errno)), -1;
    close(fd);
    unlink(probe);
    return 0;
}

int hr_file_target(const char *path, char *out, size_t n) {
    char link[4096];
    if (snprintf(out, n, "%s", path) >= (int)n) return errno = ENAMETOOLONG, -1;
    for (int hops = 0;; hops++) {
        struct stat sb;
        /* not a link: a file, or a new one created there (what stops that, open says) */
        if (lstat(out, &sb) != 0 || !S_ISLNK(sb.st_mode)) return 0;
        if (hops == 40) return errno = ELOOP, -1;
        ssize_t len = readlink(out, link, sizeof link - 1);
        if (len < 0) return -1;
        link[len] = 0;
        const char *slash = strrchr(out, '/');
        if (link[0] == '/' || !slash) { /* absolute, or relative to the same directory as out */
            if (snprintf(out, n, "%s", link) >= (int)n) return errno = ENAMETOOLONG, -1;
        } else {
            size_t dl = (size_t)(slash - out) + 1; /* out's directory, with its '/' */
            if (dl + (size_t)len >= n) return errno = ENAMETOOLONG, -1;
            memcpy(out + dl, link, (size_t)len + 1);
        }
    }
}

/* CRC-32 (IEEE, zlib's crc32(0, ...)): the tag's hash, so it stays what checkpoints wrote
 * before the name moved here and a file they left is still known as this namespace's */
static unsigned crc32_bytes(const unsigned char *b, size_t n) {
    unsigned c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= b[i];
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0xedb88320u : c >> 1;
    }
    return ~c;
}

/* The process namespace this process runs in, as 8 hex digits: a hash of the machine's boot id,
 * its PID namespace and its host name. A process id names one process only within it: nodes in
 * two containers (each its own PID namespace, often each its node as process 1) or on two
 * machines that share a directory may run under one process id. */
static unsigned ns_tag(void) {
    char b[512];
    size_t n = 0;
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) n = fread(b, 1, 64, f), fclose(f);
    ssize_t l = readlink("/proc/self/ns/pid", b + n, 128);
    n += l > 0 ? (size_t)l : 0;
    if (gethostname(b + n, sizeof b - n - 1) == 0) n += strnlen(b + n, sizeof b - n - 1);
    return crc32_bytes((const unsigned char *)b, n);
}

int hr_file_tmp_name(char *out, size_t n, const char *path) {
    if (snprintf(out, n, "%s.tmp.%ld.%08x", path, (long)getpid(), ns_tag()) < (int)n) return 0;
    errno = ENAMETOOLONG;
    return -1;
}

/* The process id in `name` when it is `base`.tmp.PID.TAG (hr_file_tmp_name's) or `base`.tmp.PID
 * (as versions before the tag wrote it), else 0; *ours says whether a tag is this namespace's. */
static long tmp_pid(const char *name, const char *base, int *ours) {
    size_t bl = strlen(base);
    if (strncmp(name, base, bl) != 0 || strncmp(name + bl, ".tmp.", 5) != 0) return 0;
    const char *p = name + bl + 5;
    char *end, tag[16];
    errno = 0;
    long pid = strtol(p, &end, 10);
    if (!isdigit((unsigned char)*p) || errno || pid <= 0) return 0;
    snprintf(tag, sizeof tag, ".%08x", ns_tag());
    *ours = !*end || strcmp(end, tag) == 0;
    return !*end || (end[0] == '.' && strlen(end) == 9 && strspn(end + 1, "0123456789abcdef") == 8)
               ? pid
               : 0;
}

void hr_file_remove_stale(const char *path, hr_log_sub sub, const char *what) {
    char dbuf[4200], bbuf[4200];
    snprintf(dbuf, sizeof dbuf, "%s", path);
    snprintf(bbuf, sizeof bbuf, "%s", path);
    const char *d = dirname(dbuf), *base = basename(bbuf);
    DIR *dp = opendir(d);
    if (!dp) return;
    struct dirent *e;
    while ((e = readdir(dp))) {
        int ours = 0;
        long pid = tmp_pid(e->d_name, base, &ours);
        if (pid == 0) continue;
        char full[8500];
        snprintf(full, sizeof full, "%s/%s", d, e->d_name);
        if (!ours) {
            hr_log(sub, HR_LOG_INFO,
                   "kept %s: the temporary file of a %s from another container or machine, which "
                   "may still be writing it (remove it once nothing writes %s there)",
                   full, what, base);
            continue;
        }
        if (pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        if (unlink(full) == 0)
            hr_log(sub, HR_LOG_INFO, "removed %s, left by an interrupted %s of process %ld", full,
                   what, pid);
    }
    closedir(dp);
}

int hr_file_replace(const char *tmp, const char *path) {
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return e;
    }
    /* the directory holds the rename: sync it, so a crash keeps the new file or the old one */
    char dir[4200];
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == path)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return 0;
}

FILE *hr_file_create(const char *path, char *tmp, size_t n) {
    char real[4096];
    if (hr_file_target(path, real, sizeof real) == 0 && hr_file_tmp_name(tmp, n, real) == 0) {
        hr_file_remove_stale(real, HR_SUB_CLI, "write");
        return fopen(tmp, "w");
    }
    tmp[0] = 0; /* no name: errno says why */
    return NULL;
}

int hr_file_commit(FILE *f, int kept, const char *tmp, const char *path) {
    char real[4096];
    /* the data is on the disk before the rename is: a crash never leaves the name on an empty
     * or partial file (and a disk that reports a full disk only now is a failed write) */
    int e = !ferror(f) && (fflush(f) != 0 || fsync(fileno(f)) != 0) ? errno : 0;
    const int closed = hr_file_close(f, kept);
    if (!e) e = closed;
    if (!e && hr_file_target(path, real, sizeof real) != 0) e = errno;
    if (e) {
        unlink(tmp);
        return e;
    }
    return hr_file_replace(tmp, real);
}

int hr_file_close(FILE *f, int kept) {
    int bad = ferror(f);
    int e = bad ? kept : 0;
    if (fclose(f) != 0 && !e) bad = 1, e = errno;
    return bad ? (e ? e : EIO) : 0;
}

int hr_file_open_read(const char *path, struct stat *sb) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) return -1;
    if (fstat(fd, sb) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return fd;
}

int hr_file_mkdirs(const char *path, mode_t mode) {
    char buf[4096];
    size_t len = strlen(path);
    if (len == 0) return errno = ENOENT, -1;
    if (len >= sizeof buf) return errno = ENAMETOOLONG, -1;
    memcpy(buf, path, len + 1);
    /* each parent in turn from the root down; one that exists is not made again (a read-only
     * parent of a writable directory), one another process made meanwhile is fine */
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != 0) continue;
        char c = *p;
        *p = 0;
        struct stat sb;
        if (stat(buf, &sb) != 0 && (mkdir(buf, mode) != 0 || stat(buf, &sb) != 0)) {
            if (errno != EEXIST || stat(buf, &sb) != 0) return -1; /* EEXIST: made meanwhile */
        }
        if (!S_ISDIR(sb.st_mode)) return errno = ENOTDIR, -1;
        *p = c;
        if (c == 0) return 0;
    }
}
