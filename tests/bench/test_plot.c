/*
 * test_plot.c: bench/plot.c's promises on a PNG that exists from an earlier run ("old"):
 *   missing input  a series' CSV that cannot be read: -1, nothing drawn, the old PNG kept
 *                  (gnuplot left it empty) and no temporary file
 *   stale          a.png.tmp.PID.TAG of this namespace and a.png.tmp.PID of a process that is
 *                  gone (a killed run's gnuplot left them) are removed when plots are drawn
 *                  again; one of another namespace's tag is kept (its writer may run)
 *   gnuplot fails  a CSV with no data: -1, the old PNG kept, no temporary file
 *   drawn          a CSV with data: 0, the PNG replaced by a whole one, no temporary file
 * The last two need gnuplot; without it they are skipped (and say so).
 *   CSV            bench_open_out/bench_commit, as the benches write the CSVs the plots read: a
 *                  write cut short (a 4 KiB file size limit for a full disk) fails and keeps
 *                  the old file whole, with no temporary file; a whole write replaces it
 */
#include "base/hr_file.h"
#include "bench/bench_util.h"
#include "bench/plot.h"
#include "tests/check.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/wait.h>

static char g_dir[64];

static void put(const char *name, const char *text) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "w");
    if (f) fputs(text, f), fclose(f);
}

/* the first 8 bytes of dir/name ("" when absent), and its size */
static long head(const char *name, char *out) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    memset(out, 0, 9);
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    size_t n = fread(out, 1, 8, f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fclose(f);
    return n ? size : 0;
}

/* files of the directory whose name holds ".tmp." */
static int temporaries(void) {
    DIR *d = opendir(g_dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += strstr(e->d_name, ".tmp.") != NULL;
    if (d) closedir(d);
    return n;
}

static int render(const char *csv) {
    static plot_spec p;
    char path[128], script[128], log[128];
    memset(&p, 0, sizeof p);
    snprintf(p.png, sizeof p.png, "%s/a.png", g_dir);
    snprintf(p.title, sizeof p.title, "test");
    snprintf(path, sizeof path, "%s/%s", g_dir, csv);
    plot_add(&p, path, 1, 2, 1, "y");
    snprintf(script, sizeof script, "%s/a.gp", g_dir);
    snprintf(log, sizeof log, "%s/gnuplot.log", g_dir);
    return plot_render(script, &p, 1, log);
}

int main(void) {
    char buf[9];
    snprintf(g_dir, sizeof g_dir, "/tmp/hetring-test-plot-XXXXXX");
    if (!mkdtemp(g_dir)) return perror("mkdtemp"), 1;
    put("a.png", "old png");

    int rc = render("missing.csv");
    long size = head("a.png", buf);
    CHECK(rc == -1, "missing input: plot_render returned %d", rc);
    CHECK(size == 7 && strcmp(buf, "old png") == 0,
          "missing input: a.png was replaced (%ld bytes, '%s')", size, buf);
    CHECK(temporaries() == 0, "missing input: %d temporary file(s) left", temporaries());

    /* stale: a process id no process has now (a child's, reaped), in the names left behind */
    pid_t dead;
    do {
        if ((dead = fork()) == 0) _exit(0);
        waitpid(dead, NULL, 0);
    } while (kill(dead, 0) == 0 || errno != ESRCH);
    char png[128], name[200], ours[200], plain[200], theirs[200];
    snprintf(png, sizeof png, "%s/a.png", g_dir);
    hr_file_tmp_name(name, sizeof name, png); /* a.png.tmp.OURPID.TAG: this namespace's tag */
    const char *tag = strrchr(name, '.') + 1;
    unsigned other = (unsigned)strtoul(tag, NULL, 16) ^ 1u;
    snprintf(ours, sizeof ours, "a.png.tmp.%ld.%s", (long)dead, tag);
    snprintf(plain, sizeof plain, "a.png.tmp.%ld", (long)dead);
    snprintf(theirs, sizeof theirs, "a.png.tmp.%ld.%08x", (long)dead, other);
    put(ours, "x"), put(plain, "x"), put(theirs, "x");
    put("empty.csv", "x,y\n");
    render("empty.csv"); /* -1 either way: no data, or no gnuplot */
    CHECK(head(ours, buf) == -1, "stale: %s was kept", ours);
    CHECK(head(plain, buf) == -1, "stale: %s was kept", plain);
    CHECK(head(theirs, buf) == 1, "stale: %s (another namespace's) was removed", theirs);
    snprintf(name, sizeof name, "%s/%s", g_dir, theirs);
    unlink(name);

    int gnuplot = system("command -v gnuplot > /dev/null 2>&1") == 0;
    if (gnuplot) {
        put("empty.csv", "x,y\n");
        rc = render("empty.csv");
        size = head("a.png", buf);
        CHECK(rc == -1, "no data: plot_render returned %d", rc);
        CHECK(size == 7 && strcmp(buf, "old png") == 0,
              "no data: a.png was replaced (%ld bytes, '%s')", size, buf);
        CHECK(temporaries() == 0, "no data: %d temporary file(s) left", temporaries());

        put("data.csv", "x,y\n0,1\n1,3\n2,2\n");
        rc = render("data.csv");
        size = head("a.png", buf);
        CHECK(rc == 0, "data: plot_render returned %d", rc);
        CHECK(size > 100 && memcmp(buf, "\x89PNG", 4) == 0, "data: a.png is no PNG (%ld bytes)",
              size);
        CHECK(temporaries() == 0, "data: %d temporary file(s) left", temporaries());
    } else {
        printf("gnuplot not found: the cases that draw were skipped\n");
    }
    /* CSV: 20000 rows do not fit under a 4 KiB limit; 10 do */
    char csv[128], tmp[160];
    snprintf(csv, sizeof csv, "%s/a.csv", g_dir);
    put("a.csv", "old csv");
    struct rlimit old_lim, lim;
    getrlimit(RLIMIT_FSIZE, &old_lim);
    lim = old_lim, lim.rlim_cur = 4096;
    signal(SIGXFSZ, SIG_IGN);
    setrlimit(RLIMIT_FSIZE, &lim);
    for (int rows = 20000; rows >= 10; rows /= 2000) {
        FILE *f = bench_open_out(csv, tmp, sizeof tmp);
        CHECK(f != NULL, "csv: bench_open_out failed");
        if (!f) break;
        for (int i = 0; i < rows; i++) fprintf(f, "%d,%d\n", i, 2 * i);
        rc = bench_commit(f, tmp, csv);
        size = head("a.csv", buf);
        if (rows > 10) {
            CHECK(rc == -1, "csv cut short: bench_commit returned %d", rc);
            CHECK(size == 7 && strcmp(buf, "old csv") == 0,
                  "csv cut short: a.csv was replaced (%ld bytes, '%s')", size, buf);
        } else {
            CHECK(rc == 0 && size > 7 && strncmp(buf, "0,0\n", 4) == 0,
                  "csv: a whole write did not replace a.csv (%d, %ld bytes)", rc, size);
        }
        CHECK(temporaries() == 0, "csv: %d temporary file(s) left", temporaries());
    }
    setrlimit(RLIMIT_FSIZE, &old_lim);

    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    if (check_failures_) return 1;
    printf("ok\n");
    return 0;
}
