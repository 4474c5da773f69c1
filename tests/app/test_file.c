/*
 * test_file.c: base/hr_file, the file handling every reader and writer shares: the check that
 * this process may write a file (hetring run's --metrics and --summary, a bench's --json):
 *   cases      a new file in an existing directory, an existing regular file: yes, and nothing
 *              is left behind; a missing directory, a directory: no, with the reason; a link,
 *              where it leads
 *   together   8 processes check one new path 300 times each, at once (hetring local gives every
 *              node the same --summary): none may see another's probe and refuse, nor for the
 *              probe of a process of another container under this process's id
 *   replace    the temporary name is PATH.tmp.PID.TAG (TAG: the process namespace's); a file
 *              written under it replaces the old one whole; a rename
 *              that fails leaves the old file and no temporary one; a name too long is refused
 *   stale      hr_file_create removes the temporary files of killed writes of this namespace,
 *              and keeps live processes', another namespace's and files that only look alike
 *   create     hr_file_create and hr_file_commit: the same for a stream; through a link, the
 *              file it leads to is replaced and the link kept; a loop of links opens nothing
 *   close      a write error that the stream kept is returned when it is closed (/dev/full), with
 *              the errno the caller kept; a stream written whole closes with 0
 *   target     a file, a new file: itself; a chain of links, relative and absolute, dangling
 *              at its end: the file it leads to; a loop: ELOOP
 *   open_read  a FIFO that no one writes opens at once and says what it is; the descriptor reads
 *              blocking again; a missing file is -1 with errno
 */
#include "base/hr_file.h"
#include "tests/check.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int entries(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
    if (d) closedir(d);
    return n;
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (f) fputs(text, f), fclose(f);
}

static int holds(const char *path, const char *text) {
    char buf[64] = {0};
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    return n == strlen(text) && memcmp(buf, text, n) == 0;
}

static void test_replace(const char *dir) {
    char path[256], tmp[300], expect[300];
    snprintf(path, sizeof path, "%s/r.json", dir);
    write_text(path, "old");
    CHECK(hr_file_tmp_name(tmp, sizeof tmp, path) == 0, "tmp name");
    snprintf(expect, sizeof expect, "%s.tmp.%ld.", path, (long)getpid());
    CHECK(strncmp(tmp, expect, strlen(expect)) == 0 && strlen(tmp) == strlen(expect) + 8 &&
              strspn(tmp + strlen(expect), "0123456789abcdef") == 8,
          "tmp name '%s' (expected '%sTAG', TAG 8 hex digits naming the process namespace: a "
          "process id alone is shared by processes of two containers)",
          tmp, expect);
    write_text(tmp, "new");
    CHECK(hr_file_replace(tmp, path) == 0, "replace: %s", strerror(errno));
    CHECK(holds(path, "new"), "the new file did not replace the old one");
    CHECK(access(tmp, F_OK) != 0, "the temporary file is left after a replace");

    char bad[300];
    snprintf(bad, sizeof bad, "%s/nodir/r.json", dir);
    write_text(tmp, "newer");
    CHECK(hr_file_replace(tmp, bad) == ENOENT, "a rename into a missing directory");
    CHECK(access(tmp, F_OK) != 0, "a failed rename left its temporary file");
    CHECK(holds(path, "new"), "a failed rename touched the file it would not replace");
    unlink(path);

    char small[8];
    errno = 0;
    CHECK(hr_file_tmp_name(small, sizeof small, path) == -1 && errno == ENAMETOOLONG,
          "a temporary name that does not fit is refused");
}

/* The temporary files writes of a path left when killed: hr_file_create removes this
 * namespace's whose process is gone (tagged, or PATH.tmp.PID of versions before the tag) and
 * keeps those of live processes, of another namespace (its process ids mean nothing here) and
 * files that only look alike. */
static void test_stale(const char *dir) {
    char path[256], tmp[300], stale[300], old[300], live[300], foreign[300], other[300];
    snprintf(path, sizeof path, "%s/s.json", dir);
    CHECK(hr_file_tmp_name(tmp, sizeof tmp, path) == 0, "tmp name");
    const char *tag = tmp + strlen(tmp) - 8;
    pid_t dead = fork();
    if (dead == 0) _exit(0);
    waitpid(dead, NULL, 0);
    snprintf(stale, sizeof stale, "%s.tmp.%ld.%s", path, (long)dead, tag);
    snprintf(old, sizeof old, "%s.tmp.%ld", path, (long)dead);
    snprintf(live, sizeof live, "%s.tmp.%ld.%s", path, (long)getppid(), tag);
    snprintf(foreign, sizeof foreign, "%s.tmp.%ld.%08x", path, (long)dead,
             (unsigned)strtoul(tag, NULL, 16) ^ 1u);
    snprintf(other, sizeof other, "%s.tmp.12x", path);
    const char *all[] = {stale, old, live, foreign, other};
    for (int i = 0; i < 5; i++) write_text(all[i], "x");
    FILE *f = hr_file_create(path, tmp, sizeof tmp);
    CHECK(f != NULL, "create: %s", strerror(errno));
    if (f) {
        fputs("new", f);
        CHECK(hr_file_commit(f, 0, tmp, path) == 0, "commit");
    }
    CHECK(access(stale, F_OK) != 0 && access(old, F_OK) != 0,
          "a killed write's temporary file %s, or %s, is still there", stale, old);
    CHECK(access(live, F_OK) == 0 && access(foreign, F_OK) == 0 && access(other, F_OK) == 0,
          "a live process's, another namespace's or an unrelated file was removed");
    for (int i = 0; i < 5; i++) unlink(all[i]);
    unlink(path);
}

/* hr_file_create and hr_file_commit: a stream written whole replaces the old file; one whose
 * write failed leaves the old file and no temporary one; a name that does not fit opens nothing
 * and says so. */
static void test_create_commit(const char *dir) {
    char path[256], tmp[300];
    snprintf(path, sizeof path, "%s/c.csv", dir);
    write_text(path, "old");
    FILE *f = hr_file_create(path, tmp, sizeof tmp);
    CHECK(f != NULL, "create: %s", strerror(errno));
    if (!f) return;
    fputs("new", f);
    CHECK(holds(path, "old"), "the old file changed before the commit");
    CHECK(hr_file_commit(f, 0, tmp, path) == 0, "commit: %s", strerror(errno));
    CHECK(holds(path, "new") && access(tmp, F_OK) != 0, "the commit did not replace the file");

    f = hr_file_create(path, tmp, sizeof tmp);
    CHECK(f != NULL, "create again: %s", strerror(errno));
    if (!f) return;
    fputs("partial", f); /* buffered: the close's flush fails, as on a full disk */
    close(fileno(f));
    CHECK(hr_file_commit(f, 0, tmp, path) != 0, "a failed write was committed");
    CHECK(holds(path, "new") && access(tmp, F_OK) != 0,
          "a failed write replaced the file or left its temporary one");
    unlink(path);

    char small[8] = "x";
    errno = 0;
    CHECK(hr_file_create(path, small, sizeof small) == NULL && errno == ENAMETOOLONG &&
              small[0] == 0,
          "a temporary name that does not fit opened a file");

    /* through a link (a --summary that points to another disk): the file it leads to is
     * replaced, beside itself, and the link stays */
    char link[256], real[256], loop[256];
    snprintf(link, sizeof link, "%s/link.csv", dir);
    snprintf(real, sizeof real, "%s/real.csv", dir);
    snprintf(loop, sizeof loop, "%s/loop.csv", dir);
    CHECK(symlink("real.csv", link) == 0 && symlink("loop.csv", loop) == 0, "symlink: %s",
          strerror(errno));
    for (int k = 0; k < 2; k++) { /* first to a missing file, then over it */
        f = hr_file_create(link, tmp, sizeof tmp);
        CHECK(f != NULL, "create through a link: %s", strerror(errno));
        if (!f) break;
        fputs(k ? "second" : "first", f);
        CHECK(hr_file_commit(f, 0, tmp, link) == 0, "commit through a link: %s", strerror(errno));
        struct stat sb;
        CHECK(lstat(link, &sb) == 0 && S_ISLNK(sb.st_mode) && holds(real, k ? "second" : "first"),
              "a commit through a link replaced the link, or not the file it leads to");
    }
    errno = 0;
    CHECK(hr_file_create(loop, tmp, sizeof tmp) == NULL && errno == ELOOP && tmp[0] == 0,
          "a loop of links opened a file (errno %d)", errno);
    unlink(link), unlink(real), unlink(loop);
}

static void test_close(const char *dir) {
    FILE *f = fopen("/dev/full", "w");
    if (f) {
        setvbuf(f, NULL, _IONBF, 0);
        fputs("lost", f);
        int kept = errno;
        CHECK(hr_file_close(f, kept) == ENOSPC, "a write to /dev/full closes with ENOSPC");
    }
    f = fopen("/dev/full", "w");
    if (f) {
        fputs("lost", f); /* buffered: the error comes at fclose */
        CHECK(hr_file_close(f, 0) == ENOSPC, "a buffered write to /dev/full fails at close");
    }
    f = fopen("/dev/full", "w");
    if (f) {
        setvbuf(f, NULL, _IONBF, 0);
        fputs("lost", f);
        CHECK(hr_file_close(f, 0) == EIO, "an error no one kept closes with EIO");
    }
    char path[256];
    snprintf(path, sizeof path, "%s/c.txt", dir);
    f = fopen(path, "w");
    if (f) {
        fputs("kept", f);
        CHECK(hr_file_close(f, EPERM) == 0, "a stream written whole closes with 0");
    }
    CHECK(holds(path, "kept"), "the closed stream's text is not in its file");
    unlink(path);
}

static void test_target(const char *dir) {
    char a[256], b[256], c[256], out[512], loop[256];
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    snprintf(c, sizeof c, "%s/sub/c", dir);
    snprintf(loop, sizeof loop, "%s/loop", dir);
    CHECK(hr_file_target(c, out, sizeof out) == 0 && strcmp(out, c) == 0, "a new file: '%s'", out);
    /* a -> b (relative), b -> DIR/sub/c (absolute), c missing */
    CHECK(symlink("b", a) == 0 && symlink(c, b) == 0 && symlink("loop", loop) == 0, "symlink: %s",
          strerror(errno));
    CHECK(hr_file_target(a, out, sizeof out) == 0 && strcmp(out, c) == 0,
          "a chain of links to a missing file: '%s' (expected '%s')", out, c);
    char sub[256], d[256], expect[300];
    snprintf(sub, sizeof sub, "%s/sub", dir);
    snprintf(d, sizeof d, "%s/sub/d", dir);
    snprintf(expect, sizeof expect, "%s/sub/../sub/e", dir);
    CHECK(mkdir(sub, 0700) == 0 && symlink("../sub/e", d) == 0, "mkdir, symlink");
    write_text(c, "x");
    CHECK(hr_file_target(d, out, sizeof out) == 0 && strcmp(out, expect) == 0,
          "a relative link read from its own directory: '%s' (expected '%s')", out, expect);
    CHECK(hr_file_target(b, out, sizeof out) == 0 && strcmp(out, c) == 0,
          "a link to an existing file: '%s'", out);
    errno = 0;
    CHECK(hr_file_target(loop, out, sizeof out) == -1 && errno == ELOOP, "a loop: errno %d", errno);
    unlink(a), unlink(b), unlink(loop), unlink(d), unlink(c), rmdir(sub);
}

static void test_open_read(const char *dir) {
    char fifo[256];
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    CHECK(mkfifo(fifo, 0600) == 0, "mkfifo: %s", strerror(errno));
    struct stat sb;
    int fd = hr_file_open_read(fifo, &sb); /* would wait for a writer for ever if it blocked */
    CHECK(fd >= 0 && S_ISFIFO(sb.st_mode), "a FIFO no one writes: fd %d", fd);
    if (fd >= 0) {
        CHECK(!(fcntl(fd, F_GETFL) & O_NONBLOCK), "the descriptor is left non-blocking");
        close(fd);
    }
    unlink(fifo);
    char path[256];
    snprintf(path, sizeof path, "%s/missing", dir);
    errno = 0;
    CHECK(hr_file_open_read(path, &sb) == -1 && errno == ENOENT, "a missing file");
    snprintf(path, sizeof path, "%s/plain", dir);
    write_text(path, "x");
    fd = hr_file_open_read(path, &sb);
    CHECK(fd >= 0 && S_ISREG(sb.st_mode) && sb.st_size == 1, "a regular file");
    if (fd >= 0) close(fd);
    unlink(path);
}

int main(void) {
    char dir[] = "/tmp/hetring-test-file-XXXXXX", path[256], why[128];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(path, sizeof path, "%s/s.json", dir);
    CHECK(hr_file_writable(path, why, sizeof why) == 0, "a new file: %s", why);
    CHECK(entries(dir) == 0, "the check left %d file(s) behind", entries(dir));
    FILE *f = fopen(path, "w");
    if (f) fclose(f);
    CHECK(hr_file_writable(path, why, sizeof why) == 0, "an existing file: %s", why);
    unlink(path);
    CHECK(hr_file_writable(dir, why, sizeof why) != 0 && strcmp(why, "not a regular file") == 0,
          "a directory: '%s'", why);
    snprintf(path, sizeof path, "%s/nodir/s.json", dir);
    CHECK(hr_file_writable(path, why, sizeof why) != 0 && strstr(why, "No such file"),
          "a missing directory: '%s'", why);
    /* a link is checked where it leads: into a missing directory, no (the write at the end of
     * the run would fail); to a file in this one, yes */
    char link[256];
    snprintf(link, sizeof link, "%s/link.json", dir);
    CHECK(symlink("nodir/s.json", link) == 0, "symlink: %s", strerror(errno));
    CHECK(hr_file_writable(link, why, sizeof why) != 0 && strstr(why, "No such file"),
          "a link into a missing directory: '%s'", why);
    unlink(link);
    CHECK(symlink("s.json", link) == 0, "symlink: %s", strerror(errno));
    CHECK(hr_file_writable(link, why, sizeof why) == 0, "a link to a new file: %s", why);
    unlink(link);

    snprintf(path, sizeof path, "%s/together.json", dir);
    enum { PROCS = 8, ROUNDS = 300 };
    pid_t pid[PROCS];
    for (int p = 0; p < PROCS; p++)
        if ((pid[p] = fork()) == 0) {
            int refused = 0;
            for (int r = 0; r < ROUNDS; r++)
                refused += hr_file_writable(path, why, sizeof why) != 0;
            _exit(refused > 0);
        }
    int refused = 0;
    for (int p = 0; p < PROCS; p++) {
        int st = 0;
        if (pid[p] > 0) waitpid(pid[p], &st, 0);
        refused += pid[p] < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    CHECK(refused == 0, "%d of %d processes checking one path at once were refused", refused,
          PROCS);
    unlink(path);
    CHECK(entries(dir) == 0, "the checks left %d file(s) behind", entries(dir));
    /* a probe of a process of another container that runs under this process's id: not this
     * process's (it was PATH.probe.PID, and the check refused: "File exists") */
    char other[300];
    snprintf(other, sizeof other, "%s.probe.%ld", path, (long)getpid());
    write_text(other, "");
    CHECK(hr_file_writable(path, why, sizeof why) == 0,
          "a probe of another container's process of this id refused the check: %s", why);
    CHECK(access(other, F_OK) == 0, "another process's probe %s was removed", other);
    unlink(other);

    test_replace(dir);
    test_stale(dir);
    test_create_commit(dir);
    test_close(dir);
    test_target(dir);
    test_open_read(dir);
    CHECK(entries(dir) == 0, "the cases left %d file(s) behind", entries(dir));
    char rm[300];
    snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
    if (system(rm) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return check_exit();
}
