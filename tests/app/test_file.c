/*
 * test_file.c: base/hr_file's check that this process may write a file (hetring run's --metrics
 * and --summary, a bench's --json):
 *   cases      a new file in an existing directory, an existing regular file: yes, and nothing
 *              is left behind; a missing directory, a directory: no, with the reason
 *   together   8 processes check one new path 300 times each, at once (hetring local gives every
 *              node the same --summary): none may see another's probe and refuse
 */
#include "base/hr_file.h"
#include "tests/check.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int entries(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
    if (d) closedir(d);
    return n;
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
    char rm[300];
    snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
    if (system(rm) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return check_exit();
}
