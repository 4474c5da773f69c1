/*
 * test_ckpt.c: checkpoints (ckpt.h) are atomic, and a refused checkpoint changes nothing.
 *
 *  - atomicity: a save that dies part-way (a child process killed by SIGXFSZ when its file
 *    size limit is below the checkpoint's size) leaves the previous checkpoint bitwise as it
 *    was, and it still loads; a save whose write fails (SIGXFSZ ignored, EFBIG) reports the
 *    error, leaves the previous checkpoint alone and no temporary file behind; the temporary
 *    file of a killed save is removed when the next run starts (ckpt_prepare), and that of
 *    another process namespace (a container or machine sharing the directory) is kept;
 *  - an unwritable checkpoint (missing directory, a directory as the file) fails train_init;
 *  - links and special files: a save through a symbolic link (relative, or dangling) replaces
 *    the file it leads to and keeps the link; a FIFO or a directory where the file was is
 *    refused by a save, naming it, and stays as it was; a load of a FIFO is refused at once
 *    (not held in open() for ever), with the trainer unchanged;
 *  - the bf16 residual block: saved with its node's id, read back bit for bit; a file without
 *    one reads as node -1 and leaves the caller's buffer alone; a version 1 file (before the
 *    block) still loads, one with a block declared version 1 does not, and a cut block is
 *    refused with every buffer unchanged;
 *  - the powersgd Q block after the residual: read back bit for bit; refused in a version 2
 *    file and with a count that disagrees with the payload;
 *  - refusal: corrupt, truncated, padded or foreign-version files, and checkpoints of runs
 *    with another seed, global batch, parameter count, model kind, training-set size or model
 *    shape (an mlp of other widths with as many parameters, 784-31-20-15-10 against 784-32-10,
 *    the message naming both) are refused (a version 3 file, which records no size, and a
 *    version 4 file, which records no shape, still load) with a message that names the file
 *    and the reason, and leave every parameter, the whole optimizer state, the iteration and
 *    the split of the trainer exactly as they were;
 *  - each node's file: "{id}" in [train] checkpoint becomes the node's id (trainer and cluster
 *    configs alike), and a path without it is shared by the nodes of one host, which matters
 *    only where the wire keeps a residual (app_checkpoint_shared).
 */
#include "tests/check.h"
#include "tests/blas_main.h"
#include "cluster/cluster_setup.h"
#include "tests/trainer/util.h"
#include "trainer/ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <zlib.h>

static char dir[64];

#define MLP(layers, batch, seed)                                                                   \
    "model = mlp\nlayers = " layers "\nsamples = 2000\neval_samples = 100\nglobal_batch = " batch  \
    "\nlr = 0.05\nmomentum = 0.9\niterations = 40\nseed = " seed

static void steps(trainer *t, int n) {
    train_iter r;
    for (int i = 0; i < n; i++) CHECK(train_step(t, &r) == HR_OK, "step %ld", t->iter);
}

/* Contents of a whole file (malloc'ed, *len bytes), or NULL. */
static char *slurp(const char *path, long *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *len = ftell(f);
    rewind(f);
    char *b = malloc((size_t)*len + 1);
    if (b && fread(b, 1, (size_t)*len, f) != (size_t)*len) free(b), b = NULL;
    fclose(f);
    return b;
}

static void spit(const char *path, const char *b, long len) {
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(b, 1, (size_t)len, f) == (size_t)len, "cannot write %s", path);
    if (f) fclose(f);
}

/* Entries of dir whose name contains `part`. */
static int count_entries(const char *part) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strstr(e->d_name, part)) n++;
    if (d) closedir(d);
    return n;
}

/* ================================================================ atomicity */

/* In a child: save t to path with the file size limited to `limit` bytes; SIGXFSZ is left
 * fatal (the process dies in the middle of the write) or ignored (write fails with EFBIG).
 * Exits 0 when the save reported an error naming the path, saying that the previous checkpoint
 * is kept and that a save needs room for a whole copy; else 1. */
static pid_t save_limited(trainer *t, const char *path, rlim_t limit, int ignore) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid != 0) return pid;
    signal(SIGXFSZ, ignore ? SIG_IGN : SIG_DFL);
    struct rlimit rl = {limit, limit};
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0) _exit(3);
    char err[HR_ERRLEN] = "";
    hr_status st = train_save(t, path, err, sizeof err);
    if (st != HR_OK) fprintf(stderr, "save refused as expected: %s\n", err);
    /* the message says what the user needs to know: the old file is kept, a save needs room */
    _exit(st != HR_OK && strstr(err, path) &&
                  strstr(err, "previous checkpoint, if any, is unchanged") &&
                  strstr(err, "expected room for the")
              ? 0
              : 1);
}

static void test_atomic_save(void) {
    cfg c;
    trainer a, b;
    char path[128], err[HR_ERRLEN];
    snprintf(path, sizeof path, "%s/atomic.ckpt", dir);
    test_trainer_or_die(&a, &c, dir, MLP("784,32,10", "100", "11"));
    steps(&a, 3);
    CHECK(train_save(&a, path, err, sizeof err) == HR_OK, "%s", err);
    long old_len = 0, len = 0;
    char *old = slurp(path, &old_len);
    CHECK(old && old_len > 200000, "checkpoint of %ld bytes", old_len);
    float *p3 = malloc(sizeof(float) * (size_t)a.m.n_params);
    memcpy(p3, a.m.params, sizeof(float) * (size_t)a.m.n_params);
    steps(&a, 3); /* the next save carries other parameters */

    /* killed in the middle of writing: the old checkpoint is untouched and loads */
    int status = 0;
    pid_t pid = save_limited(&a, path, (rlim_t)old_len / 2, 0);
    CHECK(waitpid(pid, &status, 0) == pid && WIFSIGNALED(status) && WTERMSIG(status) == SIGXFSZ,
          "the save was not killed part-way (status %#x)", status);
    char *now = slurp(path, &len);
    CHECK(now && len == old_len && memcmp(now, old, (size_t)len) == 0,
          "a save killed part-way changed the previous checkpoint (%ld bytes, was %ld)", len,
          old_len);
    free(now);
    cfg c2;
    test_trainer_or_die(&b, &c2, dir, MLP("784,32,10", "100", "11"));
    CHECK(train_load(&b, path, NULL, 0, NULL, err, sizeof err) == HR_OK, "after a killed save: %s",
          err);
    CHECK(b.iter == 3 && memcmp(b.m.params, p3, sizeof(float) * (size_t)a.m.n_params) == 0,
          "after a killed save the checkpoint holds iteration %ld, not the saved state", b.iter);
    /* a crash leaves its temporary file, PATH.tmp.PID.TAG (TAG: this process namespace's);
     * the next run removes it at start (its process is gone), and one of an older version
     * (PATH.tmp.PID), and keeps those of live processes, files that only look alike, and those
     * of another namespace (a container or machine sharing the directory, whose process ids
     * mean nothing here: its save of that id may be running) */
    char stale[256] = "", old_stale[256], live[256], other[256], foreign[256], prefix[64];
    snprintf(prefix, sizeof prefix, "atomic.ckpt.tmp.%ld.", (long)pid);
    DIR *dp = opendir(dir);
    for (struct dirent *e; dp && (e = readdir(dp));)
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0 &&
            strlen(e->d_name) == strlen(prefix) + 8)
            snprintf(stale, sizeof stale, "%s/%s", dir, e->d_name);
    if (dp) closedir(dp);
    CHECK(stale[0], "the killed save left no temporary file %s/%sTAG", dir, prefix);
    unsigned tag = 0;
    if (stale[0]) sscanf(stale + strlen(stale) - 8, "%8x", &tag);
    snprintf(old_stale, sizeof old_stale, "%s.tmp.%ld", path, (long)pid);
    snprintf(live, sizeof live, "%s.tmp.%ld.%08x", path, (long)getppid(), tag);
    snprintf(other, sizeof other, "%s.tmp.12x", path);
    snprintf(foreign, sizeof foreign, "%s.tmp.%ld.%08x", path, (long)pid, tag ^ 1u);
    spit(old_stale, "x", 1), spit(live, "x", 1), spit(other, "x", 1), spit(foreign, "x", 1);
    CHECK(ckpt_prepare(path, err, sizeof err) == HR_OK, "%s", err);
    CHECK(access(stale, F_OK) != 0 && access(old_stale, F_OK) != 0,
          "the killed save's temporary file %s, or %s, is still there", stale, old_stale);
    CHECK(access(live, F_OK) == 0 && access(other, F_OK) == 0,
          "a temporary file of a live process, or another file, was removed");
    CHECK(access(foreign, F_OK) == 0,
          "%s, another namespace's temporary file (its process id means nothing here), was "
          "removed",
          foreign);
    unlink(live), unlink(other), unlink(foreign);

    /* the write fails (EFBIG): an error, the old checkpoint untouched, no temporary left */
    pid = save_limited(&a, path, (rlim_t)old_len / 2, 1);
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "a failed write was not reported as an error naming the file and saying what it kept and "
          "needs (status %#x)",
          status);
    now = slurp(path, &len);
    CHECK(now && len == old_len && memcmp(now, old, (size_t)len) == 0,
          "a failed save changed the previous checkpoint");
    free(now);
    int left = count_entries(".tmp");
    CHECK(left == 0, "a failed save left %d temporary file(s) in %s", left, dir);

    /* and with room, the new state replaces the old */
    CHECK(train_save(&a, path, err, sizeof err) == HR_OK, "%s", err);
    CHECK(train_load(&b, path, NULL, 0, NULL, err, sizeof err) == HR_OK, "%s", err);
    CHECK(b.iter == 6 && memcmp(b.m.params, a.m.params, sizeof(float) * (size_t)a.m.n_params) == 0,
          "the new checkpoint did not replace the old one");
    CHECK(count_entries(".tmp") == 0, "a good save left a temporary file");
    free(old);
    free(p3);
    train_free(&b);
    cfg_free(&c2);
    train_free(&a);
    cfg_free(&c);
}

/* ================================================================ refusal */

/* Everything a load may change. */
typedef struct {
    float *params, *vel;
    long iter;
    long split[1]; /* what the caller's split buffer held before the load */
} snapshot;

static void snap(snapshot *s, const trainer *t) {
    size_t n = sizeof(float) * (size_t)t->m.n_params;
    s->params = malloc(n), s->vel = malloc(n);
    memcpy(s->params, t->m.params, n);
    memcpy(s->vel, t->opt.vel, n);
    s->iter = t->iter, s->split[0] = -7; /* a value no checkpoint records */
}

/* Is t exactly as in s? Reports how many parameters and momentum values changed. */
static int unchanged(const snapshot *s, const trainer *t, const long *split, int recorded,
                     const char *what) {
    long dp = 0, dv = 0;
    for (long i = 0; i < t->m.n_params; i++) {
        dp += memcmp(&s->params[i], &t->m.params[i], sizeof(float)) != 0;
        dv += memcmp(&s->vel[i], &t->opt.vel[i], sizeof(float)) != 0;
    }
    CHECK(dp == 0 && dv == 0 && s->iter == t->iter && s->split[0] == split[0] && !recorded,
          "%s: the refused checkpoint changed %ld parameters, %ld momentum values, iteration "
          "%ld -> %ld, split %ld -> %ld (recorded %d)",
          what, dp, dv, s->iter, t->iter, s->split[0], split[0], recorded);
    return dp == 0 && dv == 0;
}

/* Load `path` into t: it must be refused with `want`, an error naming the file and every
 * string of `words`, and leave t alone. */
static void refused(trainer *t, const snapshot *s, const char *path, hr_status want,
                    const char *what, const char *const *words) {
    char err[HR_ERRLEN] = "";
    long split[1] = {s->split[0]};
    int recorded = 0;
    hr_status st = train_load(t, path, split, 1, &recorded, err, sizeof err);
    CHECK(st == want, "%s: status %s, expected %s (%s)", what, hr_strerror(st), hr_strerror(want),
          err);
    CHECK(strstr(err, path) != NULL, "%s: the error does not name the file: %s", what, err);
    for (int k = 0; words && words[k]; k++)
        CHECK(strstr(err, words[k]) != NULL, "%s: the error lacks '%s': %s", what, words[k], err);
    printf("%-18s refused: %s\n", what, err);
    unchanged(s, t, split, recorded, what);
}

/* Save a checkpoint of a run of config `train`, after a few steps, to path. */
static void foreign(const char *train, const char *path) {
    cfg c;
    trainer o;
    char err[HR_ERRLEN];
    test_trainer_or_die(&o, &c, dir, train);
    steps(&o, 2);
    CHECK(train_save(&o, path, err, sizeof err) == HR_OK, "%s", err);
    train_free(&o);
    cfg_free(&c);
}

/* The header's bytes, as ckpt_save writes it now (version 5): magic, version and checksum (16),
 * ckpt_meta (696: n_samples at 40, the shape from 48), payload size (8). */
#define HEADER 720

/* Rewrite checkpoint bytes b (*len of them, as ckpt_save writes them now) as a file of an older
 * `version` holds them: no shape in the header before version 5 (bytes 64-711), no n_samples
 * before version 4 (bytes 56-63), the checksum over the bytes after its field computed again.
 * The payload is left as it is. */
static void as_version(char *b, long *len, char version) {
    const long from = version >= 4 ? 64 : 56, to = 16 + 696;
    memmove(b + from, b + to, (size_t)(*len - to));
    *len -= to - from;
    b[8] = version;
    uint32_t crc = (uint32_t)crc32(0, (const Bytef *)b + 16, (uInt)(*len - 16));
    memcpy(b + 12, &crc, 4);
}

static void test_refusal(void) {
    cfg c;
    trainer t;
    char good[128], bad[128], err[HR_ERRLEN];
    snprintf(good, sizeof good, "%s/good.ckpt", dir);
    snprintf(bad, sizeof bad, "%s/bad.ckpt", dir);
    /* the checkpoint another trainer of the same run wrote at iteration 2 */
    foreign(MLP("784,32,10", "100", "11"), good);
    test_trainer_or_die(&t, &c, dir, MLP("784,32,10", "100", "11"));
    long rec_split[1] = {-7};
    int recorded = 0;
    CHECK(train_load(&t, good, rec_split, 1, &recorded, err, sizeof err) == HR_OK, "%s", err);
    CHECK(recorded && rec_split[0] == 100,
          "the split a one-node run recorded, {100}, came back as %s%ld", recorded ? "" : "none, ",
          rec_split[0]);
    steps(&t, 5); /* now at iteration 7, with momentum */
    long len = 0;
    char *bytes = slurp(good, &len);
    snapshot s;
    snap(&s, &t);

    /* damaged files; the header is HEADER bytes, the payload params, momentum, split */
    const long n = t.m.n_params;
    const long flips[] = {12,
                          20,
                          30,
                          40,
                          56,
                          64,
                          64 + 16,
                          HEADER + 8,
                          HEADER + 4 * (n - 1),
                          HEADER + 4 * (2 * n - 1),
                          len - 1};
    for (size_t k = 0; k < sizeof flips / sizeof flips[0]; k++) {
        bytes[flips[k]] ^= 0x10;
        spit(bad, bytes, len);
        bytes[flips[k]] ^= 0x10;
        char what[64];
        snprintf(what, sizeof what, "byte %ld flipped", flips[k]);
        refused(&t, &s, bad, HR_ERR_DATA, what, (const char *const[]){"corrupt", NULL});
    }
    const char version = bytes[8];
    bytes[8] = 0x7f; /* the version field, outside the checksum: a version from the future */
    spit(bad, bytes, len);
    bytes[8] = version;
    refused(&t, &s, bad, HR_ERR_DATA, "other version",
            (const char *const[]){"format version 127, from a newer hetring", "reads versions 1 to",
                                  "left as it is", NULL});
    bytes[8] = 0; /* and one before the first */
    spit(bad, bytes, len);
    bytes[8] = version;
    refused(&t, &s, bad, HR_ERR_DATA, "version 0",
            (const char *const[]){"corrupt", "format version is 0", NULL});
    const long cuts[] = {0, 30, 400, HEADER + 4 * n, len - 1};
    for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
        spit(bad, bytes, cuts[k]);
        char what[64];
        snprintf(what, sizeof what, "cut at %ld", cuts[k]);
        refused(&t, &s, bad, HR_ERR_DATA, what, NULL);
    }
    char *padded = malloc((size_t)len + 1);
    memcpy(padded, bytes, (size_t)len);
    padded[len] = 0;
    spit(bad, padded, len + 1);
    free(padded);
    refused(&t, &s, bad, HR_ERR_DATA, "one byte more", (const char *const[]){"corrupt", NULL});

    /* checkpoints of other runs */
    const char *other[] = {"belongs to another run", NULL, NULL};
    foreign(MLP("784,32,10", "100", "12"), bad);
    other[1] = "seed 12";
    refused(&t, &s, bad, HR_ERR_MISMATCH, "other seed", other);
    foreign(MLP("784,32,10", "50", "11"), bad);
    other[1] = "global_batch 50";
    refused(&t, &s, bad, HR_ERR_MISMATCH, "other batch", other);
    foreign(MLP("784,16,10", "100", "11"), bad);
    other[1] = "12730 params";
    refused(&t, &s, bad, HR_ERR_MISMATCH, "other shape", other);
    /* another training-set size: every epoch's order differs (it resumed, and used some samples
     * of the epoch twice and others never) */
    foreign("model = mlp\nlayers = 784,32,10\nsamples = 3000\neval_samples = 100\n"
            "global_batch = 100\nlr = 0.05\nmomentum = 0.9\niterations = 40\nseed = 11",
            bad);
    other[1] = "trained on 3000 samples; this run has 2000";
    refused(&t, &s, bad, HR_ERR_MISMATCH, "other samples", other);
    /* an mlp of other widths with as many parameters (25450): only the shape tells them apart */
    foreign(MLP("784,31,20,15,10", "100", "11"), bad);
    refused(&t, &s, bad, HR_ERR_MISMATCH, "other layers",
            (const char *const[]){"belongs to another run", "mlp 784-31-20-15-10",
                                  "this run's mlp 784-32-10", "25450", NULL});
    /* another model kind with as many parameters: only the model field tells them apart */
    ckpt_meta m = {.iter = 3,
                   .n_params = (uint64_t)n,
                   .seed = 11,
                   .global_batch = 100,
                   .model = CFG_MODEL_SOFTMAX,
                   .n_nodes = 1};
    int64_t split = 100;
    CHECK(ckpt_save(bad, &m, t.m.params, t.opt.vel, &split, NULL, err, sizeof err) == HR_OK, "%s",
          err);
    other[1] = "model softmax with 25450 params";
    refused(&t, &s, bad, HR_ERR_MISMATCH, "other model", other);

    /* the good file still loads and does change the state: the checks above can fail */
    CHECK(train_load(&t, good, NULL, 0, NULL, err, sizeof err) == HR_OK, "%s", err);
    CHECK(t.iter == 2 && memcmp(s.params, t.m.params, sizeof(float) * (size_t)n) != 0,
          "the good checkpoint did not restore iteration 2 (now %ld)", t.iter);
    /* as a version 4 file, which records no shape, and a version 3 file, which records no
     * sample count either */
    char *b4 = malloc((size_t)len);
    long len4 = len;
    memcpy(b4, bytes, (size_t)len);
    as_version(b4, &len4, 4);
    spit(bad, b4, len4);
    free(b4);
    t.iter = 0;
    CHECK(train_load(&t, bad, NULL, 0, NULL, err, sizeof err) == HR_OK && t.iter == 2,
          "a version 4 checkpoint: %s", err);
    as_version(bytes, &len, 3);
    spit(bad, bytes, len);
    t.iter = 0;
    CHECK(train_load(&t, bad, NULL, 0, NULL, err, sizeof err) == HR_OK && t.iter == 2,
          "a version 3 checkpoint: %s", err);
    free(bytes);
    free(s.params);
    free(s.vel);
    train_free(&t);
    cfg_free(&c);
}

/* ================================================================ links, special files */

static void on_hung(int sig) {
    (void)sig;
    static const char m[] = "FAIL: a checkpoint load or save waited for ever on a FIFO\n";
    if (write(2, m, sizeof m - 1) < 0) _exit(2);
    _exit(1);
}

/* Whether `path` is a symbolic link leading to `to`. */
static int links_to(const char *path, const char *to) {
    char b[256];
    ssize_t n = readlink(path, b, sizeof b - 1);
    return n >= 0 && (b[n] = 0, strcmp(b, to) == 0);
}

static void test_links(void) {
    cfg c;
    trainer t;
    char sub[96], real[128], link[128], dangle[128], fifo[128], adir[128], lf[128], err[HR_ERRLEN];
    snprintf(sub, sizeof sub, "%s/disk", dir);
    snprintf(real, sizeof real, "%s/disk/run.ckpt", dir);
    snprintf(link, sizeof link, "%s/link.ckpt", dir);
    snprintf(dangle, sizeof dangle, "%s/dangle.ckpt", dir);
    snprintf(fifo, sizeof fifo, "%s/fifo.ckpt", dir);
    snprintf(adir, sizeof adir, "%s/adir.ckpt", dir);
    snprintf(lf, sizeof lf, "%s/to-fifo.ckpt", dir);
    CHECK(mkdir(sub, 0700) == 0 && symlink("disk/run.ckpt", link) == 0 &&
              symlink("disk/new.ckpt", dangle) == 0 && mkfifo(fifo, 0600) == 0 &&
              mkdir(adir, 0700) == 0 && symlink("fifo.ckpt", lf) == 0,
          "setting up %s: %s", dir, strerror(errno));
    signal(SIGALRM, on_hung);
    alarm(30);
    foreign(MLP("784,32,10", "100", "11"), real); /* iteration 2, on the other disk */
    test_trainer_or_die(&t, &c, dir, MLP("784,32,10", "100", "11"));
    CHECK(ckpt_prepare(link, err, sizeof err) == HR_OK, "%s", err);
    CHECK(train_load(&t, link, NULL, 0, NULL, err, sizeof err) == HR_OK && t.iter == 2, "%s", err);
    steps(&t, 3);
    /* a save through the link replaces the file it leads to; the link stays a link */
    CHECK(train_save(&t, link, err, sizeof err) == HR_OK, "%s", err);
    CHECK(links_to(link, "disk/run.ckpt"), "the save replaced the link %s by a file", link);
    t.iter = 0;
    CHECK(train_load(&t, real, NULL, 0, NULL, err, sizeof err) == HR_OK && t.iter == 5,
          "the file the link leads to holds iteration %ld, not the saved 5 (%s)", t.iter, err);
    CHECK(ckpt_prepare(dangle, err, sizeof err) == HR_OK, "%s", err);
    CHECK(train_save(&t, dangle, err, sizeof err) == HR_OK, "%s", err);
    char made[128];
    snprintf(made, sizeof made, "%s/disk/new.ckpt", dir);
    CHECK(links_to(dangle, "disk/new.ckpt") && access(made, F_OK) == 0,
          "a save through a link to a missing file did not create %s", made);

    /* a FIFO or a directory where the checkpoint was: refused, left as it is */
    const char *special[] = {fifo, lf, adir};
    for (int k = 0; k < 3; k++) {
        CHECK(train_save(&t, special[k], err, sizeof err) == HR_ERR_IO && strstr(err, special[k]) &&
                  strstr(err, "not a regular file"),
              "a save to %s: %s", special[k], err);
        printf("save refused as expected: %s\n", err);
    }
    struct stat sb;
    CHECK(stat(fifo, &sb) == 0 && S_ISFIFO(sb.st_mode) && stat(adir, &sb) == 0 &&
              S_ISDIR(sb.st_mode) && links_to(lf, "fifo.ckpt"),
          "a refused save replaced the FIFO, the directory or the link");
    snapshot s;
    snap(&s, &t);
    refused(&t, &s, fifo, HR_ERR_IO, "a FIFO", (const char *const[]){"not a regular file", NULL});
    refused(&t, &s, lf, HR_ERR_IO, "a link to a FIFO",
            (const char *const[]){"not a regular file", NULL});
    alarm(0);
    CHECK(count_entries(".tmp") == 0, "a save left a temporary file in %s", dir);
    free(s.params);
    free(s.vel);
    train_free(&t);
    cfg_free(&c);
}

/* A checkpoint that cannot be written is found by train_init, before any training, with a
 * message naming the file: a missing directory, a directory where a file is expected. */
static void test_unwritable(void) {
    for (int i = 0; i < 2; i++) {
        char path[160], train[600], err[HR_ERRLEN] = "";
        snprintf(path, sizeof path, "%s/%s", dir, i == 0 ? "missing/run.ckpt" : "adir");
        if (i == 1) CHECK(mkdir(path, 0700) == 0, "mkdir %s", path);
        snprintf(train, sizeof train, "%s\ncheckpoint = %s", MLP("784,32,10", "100", "11"), path);
        cfg c;
        trainer t;
        one_node_cfg(&c, dir, train);
        hr_status st = test_train_init(&t, &c, 0, err, sizeof err);
        CHECK(st == HR_ERR_IO && strstr(err, path), "train_init with checkpoint %s: %d (%s)", path,
              st, err);
        printf("refused at start as expected: %s\n", err);
        if (st == HR_OK) train_free(&t);
        cfg_free(&c);
    }
}

static void test_residual(void) {
    enum { N = 37 };
    char with[96], without[96], err[HR_ERRLEN] = "";
    snprintf(with, sizeof with, "%s/with.ckpt", dir);
    snprintf(without, sizeof without, "%s/without.ckpt", dir);
    float p[N], v[N], r[N], p2[N], v2[N], r2[N];
    for (int i = 0; i < N; i++) p[i] = (float)i, v[i] = -(float)i, r[i] = 1e-4f * (float)(i - 9);
    int64_t split[2] = {30, 70}, split2[2];
    ckpt_meta m = {.iter = 5,
                   .n_params = N,
                   .seed = 11,
                   .global_batch = 100,
                   .model = CFG_MODEL_MLP,
                   .n_nodes = 2},
              got = m;
    ckpt_residual res = {.node = 7, .data = r}, back = {.node = 99, .data = r2};
    CHECK(ckpt_save(with, &m, p, v, split, &res, err, sizeof err) == HR_OK, "%s", err);
    CHECK(ckpt_save(without, &m, p, v, split, NULL, err, sizeof err) == HR_OK, "%s", err);
    memset(r2, 0, sizeof r2);
    CHECK(ckpt_load(with, &got, p2, v2, split2, 2, &back, err, sizeof err) == HR_OK, "%s", err);
    CHECK(back.node == 7 && memcmp(r, r2, sizeof r) == 0 && memcmp(p, p2, sizeof p) == 0 &&
              memcmp(v, v2, sizeof v) == 0 && split2[1] == 70,
          "the residual did not come back (node %lld)", (long long)back.node);
    CHECK(ckpt_load(with, &got, p2, v2, split2, 2, NULL, err, sizeof err) == HR_OK,
          "a caller that wants no residual: %s", err);
    memset(r2, 0x5a, sizeof r2);
    back.node = 99;
    CHECK(ckpt_load(without, &got, p2, v2, split2, 2, &back, err, sizeof err) == HR_OK, "%s", err);
    CHECK(back.node == -1 && r2[0] == r2[N - 1] && ((unsigned char *)r2)[0] == 0x5a,
          "a file without a residual: node %lld, buffer changed", (long long)back.node);

    long len;
    char *b = slurp(without, &len);
    CHECK(b != NULL, "read %s", without);
    as_version(b, &len, 1); /* a file from before the block */
    spit(without, b, len);
    back.node = 99;
    CHECK(ckpt_load(without, &got, p2, v2, split2, 2, &back, err, sizeof err) == HR_OK,
          "a version 1 file: %s", err);
    CHECK(back.node == -1, "a version 1 file has no residual, node %lld", (long long)back.node);
    free(b);
    b = slurp(with, &len);
    CHECK(b != NULL, "read %s", with);
    as_version(b, &len, 1); /* version 1 declares no block: the payload then disagrees */
    spit(without, b, len);
    CHECK(ckpt_load(without, &got, p2, v2, split2, 2, &back, err, sizeof err) == HR_ERR_DATA &&
              strstr(err, "corrupt"),
          "a version 1 file with a block: %s", err);
    b[8] = 2;
    spit(without, b, len - 4); /* the block cut short */
    memcpy(p2, v, sizeof p2), memcpy(r2, v, sizeof r2);
    CHECK(ckpt_load(without, &got, p2, v2, split2, 2, &back, err, sizeof err) == HR_ERR_DATA,
          "a residual cut short: %s", err);
    CHECK(memcmp(p2, v, sizeof p2) == 0 && memcmp(r2, v, sizeof r2) == 0,
          "a refused file changed the caller's buffers");
    printf(
        "residual: saved with node 7 and read back; version 1 files read; bad ones refused (%s)\n",
        err);
    free(b);
}

/* The powersgd Q block: after the residual, read back bit for bit into a buffer ckpt_load
 * allocates; a version 2 file (before the block) with one is refused, one without still loads
 * with no Q; a Q whose count disagrees with the payload is refused, and a refused file changes
 * nothing of the caller's. */
static void test_q(void) {
    enum { N = 11, NQ = 6 };
    char path[96], err[HR_ERRLEN] = "";
    snprintf(path, sizeof path, "%s/q.ckpt", dir);
    float p[N], v[N], r[N], q[NQ], p2[N], v2[N], r2[N];
    for (int i = 0; i < N; i++) p[i] = (float)i, v[i] = 0.5f * (float)i, r[i] = 1e-3f * (float)i;
    for (int i = 0; i < NQ; i++) q[i] = 1.0f / (float)(i + 1);
    int64_t split[2] = {50, 50}, split2[2];
    ckpt_meta m = {.iter = 9,
                   .n_params = N,
                   .seed = 11,
                   .global_batch = 100,
                   .model = CFG_MODEL_MLP,
                   .n_nodes = 2},
              got = m;
    ckpt_residual res = {.node = 4, .data = r, .q = q, .n_q = NQ}, back = {.data = r2};
    CHECK(ckpt_save(path, &m, p, v, split, &res, err, sizeof err) == HR_OK, "%s", err);
    CHECK(ckpt_load(path, &got, p2, v2, split2, 2, &back, err, sizeof err) == HR_OK, "%s", err);
    CHECK(back.node == 4 && back.q && back.n_q == NQ && memcmp(back.q, q, sizeof q) == 0 &&
              memcmp(r, r2, sizeof r) == 0,
          "Q did not come back (%llu floats)", (unsigned long long)back.n_q);
    free(back.q);
    long len;
    char *b = slurp(path, &len);
    CHECK(b != NULL, "read %s", path);
    char *old = malloc((size_t)len);
    long old_len = len;
    memcpy(old, b, (size_t)len);
    as_version(old, &old_len, 2); /* version 2 knew no Q block: the payload then disagrees */
    spit(path, old, old_len);
    free(old);
    back.q = NULL;
    CHECK(ckpt_load(path, &got, p2, v2, split2, 2, &back, err, sizeof err) == HR_ERR_DATA &&
              strstr(err, "corrupt") && !back.q,
          "a version 2 file with a Q block: %s", err);
    const long at = len - (long)sizeof q - 8; /* n_q, outside nothing: the checksum covers it */
    b[at] = NQ + 1;
    spit(path, b, len);
    memcpy(p2, v, sizeof p2);
    CHECK(ckpt_load(path, &got, p2, v2, split2, 2, &back, err, sizeof err) == HR_ERR_DATA &&
              strstr(err, "its Q says 7 floats") && !back.q && memcmp(p2, v, sizeof p2) == 0,
          "a Q count that disagrees with the payload: %s", err);
    free(b);
    res.q = NULL; /* without Q: none comes back */
    CHECK(ckpt_save(path, &m, p, v, split, &res, err, sizeof err) == HR_OK, "%s", err);
    back.q = q, back.n_q = 99;
    CHECK(ckpt_load(path, &got, p2, v2, split2, 2, &back, err, sizeof err) == HR_OK && !back.q &&
              back.n_q == 0 && back.node == 4,
          "a file without Q: %s", err);
    printf("Q: saved beside the residual and read back; a version 2 file with it and a wrong "
           "count refused (%s)\n",
           err);
}

/* Shapes that are not a chain of widths (a cnn's weight matrices) are named matrix by matrix;
 * a file of the same shape loads, and one whose expected shape is not given is not checked. */
static void test_shape(void) {
    enum { N = 50 }; /* 4x6 + 4, then 2x10 + 2 or 1x21 + 1 */
    char path[96], err[HR_ERRLEN] = "";
    snprintf(path, sizeof path, "%s/shape.ckpt", dir);
    float p[N] = {0}, v[N] = {0};
    int64_t split[1] = {100};
    ckpt_meta m = {.iter = 3,
                   .n_params = N,
                   .seed = 11,
                   .global_batch = 100,
                   .model = CFG_MODEL_CNN,
                   .n_nodes = 1,
                   .n_shape = 2,
                   .shape = {{4, 6}, {2, 10}}};
    CHECK(ckpt_save(path, &m, p, v, split, NULL, err, sizeof err) == HR_OK, "%s", err);
    ckpt_meta got = m;
    CHECK(ckpt_load(path, &got, p, v, split, 1, NULL, err, sizeof err) == HR_OK, "same: %s", err);
    got = m, got.n_shape = 0;
    CHECK(ckpt_load(path, &got, p, v, split, 1, NULL, err, sizeof err) == HR_OK, "unchecked: %s",
          err);
    got = m, got.shape[1][0] = 1, got.shape[1][1] = 21;
    CHECK(ckpt_load(path, &got, p, v, split, 1, NULL, err, sizeof err) == HR_ERR_MISMATCH &&
              strstr(err, "cnn 4x6, 2x10, this run's cnn 4x6, 1x21"),
          "another shape of as many parameters: %s", err);
    printf("other matrices refused: %s\n", err);
}

/* Load a cluster of nodes 0 and 1 on 127.0.0.1 and node 2 on 127.0.0.2 with `lines` in [cluster]
 * and checkpoint = `ckpt`. */
static void three_nodes(cfg *c, const char *lines, const char *ckpt) {
    char path[600];
    FILE *f = cfg_create(dir, "three.ini", path, sizeof path);
    fprintf(f,
            "[cluster]\nsecurity = none\n%s\n[train]\niterations = 2\ncheckpoint = %s\n"
            "[node.0]\nhost = 127.0.0.1\nport = 7001\n[node.1]\nhost = 127.0.0.1\nport = 7002\n"
            "[node.2]\nhost = 127.0.0.2\nport = 7003\n",
            lines, ckpt);
    cfg_close_load(c, f, path);
}

/* Each node's checkpoint file: "{id}" in [train] checkpoint becomes its id, in the trainer's
 * config and the cluster's (written on leaving) alike; and which nodes share one file while
 * their wire keeps a residual (the nodes of one host, without {id}, with bf16, powersgd or
 * auto; not with fp32, whose nodes write the same bytes). */
static void test_node_path(void) {
    cfg c;
    char want[600];
    three_nodes(&c, "wire = bf16", "run-{id}.ckpt");
    for (int k = 0; k < 3; k++) {
        train_config tc;
        cluster_config cc;
        app_train_config(&c, k, NULL, &tc);
        app_cluster_config(&c, k, NULL, &cc);
        snprintf(want, sizeof want, "%s/run-%d.ckpt", dir, k);
        CHECK(strcmp(tc.checkpoint, want) == 0 && strcmp(cc.checkpoint, want) == 0,
              "node %d's checkpoint: %s and %s, expected %s", k, tc.checkpoint, cc.checkpoint,
              want);
        CHECK(!app_checkpoint_shared(&c, k, NULL), "node %d: a file with {id} is shared", k);
    }
    cfg_free(&c);
    static const struct {
        const char *wire;
        int shared[3];
    } cases[] = {{"wire = bf16", {1, 1, 0}},
                 {"wire = powersgd", {1, 1, 0}},
                 {"wire = auto", {1, 1, 0}},
                 {"wire = fp32", {0, 0, 0}}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        three_nodes(&c, cases[i].wire, "run.ckpt");
        for (int k = 0; k < 3; k++)
            CHECK(app_checkpoint_shared(&c, k, NULL) == cases[i].shared[k],
                  "%s, no {id}: node %d shares its file %d, expected %d", cases[i].wire, k,
                  app_checkpoint_shared(&c, k, NULL), cases[i].shared[k]);
        cfg_free(&c);
    }
}

int main(int argc, char **argv) {
    (void)argc;
    static void (*const cases[])(void) = {test_atomic_save, test_refusal,   test_links,
                                          test_unwritable,  test_residual,  test_q,
                                          test_shape,       test_node_path, NULL};
    return tmpdir_main(argv, dir, sizeof dir, cases);
}
