/*
 * cmd_gen_data.c: `hetring gen-data`, write a synthetic dataset in a real file format.
 *
 * synthetic            -> MNIST IDX: train-images-idx3-ubyte, train-labels-idx1-ubyte,
 *                         t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte (.gz with --gzip)
 * synthetic-rgb        -> CIFAR-10 binary: data_batch_1.bin .. data_batch_5.bin, test_batch.bin
 * synthetic-regression -> CSV: train.csv, test.csv (target first, then the features)
 *
 * The files hold exactly the samples that dataset = synthetic* generates from the same seed,
 * so a run on the files follows the same trajectory as a run on the generator. A file may hold
 * no sample (--eval-samples 0; --samples below 5 leaves CIFAR batches empty): the loaders take
 * it as an empty set, and refuse only a training set with no sample at all.
 *
 * Each file is written whole beside its name and renamed over it (a full disk keeps what was
 * there), and a file of those names that DIR holds is refused unless --force: DIR may hold a
 * user's real MNIST files.
 */
#include "base/hr_cores.h"
#include "base/hr_file.h"
#include "cli/cli.h"
#include "trainer/data_io.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void usage(FILE *out) {
    fprintf(out, "usage: hetring gen-data --kind KIND --out DIR [--samples N] [--eval-samples M]\n"
                 "                        [--seed S] [--gzip] [--force]\n"
                 "\n"
                 "Write a synthetic dataset as files, for the mnist, cifar10 and csv loaders.\n"
                 "\n"
                 "  --kind KIND        synthetic (MNIST IDX), synthetic-rgb (CIFAR-10 binary) or\n"
                 "                     synthetic-regression (CSV)\n"
                 "  --out DIR          output directory, made with any missing parents\n"
                 "  --samples N        training samples (default 60000)\n"
                 "  --eval-samples M   held-out samples (default 10000); with 0 the held-out\n"
                 "                     file is empty, which the loaders take as no held-out set\n"
                 "  --seed S           generator seed, as [train] seed (default 1)\n"
                 "  --gzip             gzip the IDX files (and remove plain ones of the same\n"
                 "                     name; without --gzip, gzipped ones)\n"
                 "  --force            replace (or remove) files of those names in DIR; without\n"
                 "                     it, any such file is refused and nothing is written\n"
                 "  --help             this text\n");
}

static int parse_count(const char *s, long lo, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo) return -1;
    *out = v;
    return 0;
}

typedef struct {
    const char *kind; /* --kind, as given */
    const char *dir;  /* --out */
    long n, n_eval;   /* training and held-out samples */
    unsigned long long seed;
    int gz;    /* gzip the IDX files */
    int force; /* replace files that DIR holds */
} gen_opts;

/* Read the command line into `g`. Returns -1 to go on, or the exit code to return now. */
static int parse_args(int argc, char **argv, gen_opts *g) {
    static const struct option opts[] = {{"kind", required_argument, 0, 'k'},
                                         {"out", required_argument, 0, 'o'},
                                         {"samples", required_argument, 0, 'n'},
                                         {"eval-samples", required_argument, 0, 'e'},
                                         {"seed", required_argument, 0, 's'},
                                         {"gzip", no_argument, 0, 'z'},
                                         {"force", no_argument, 0, 'f'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int ch;
    char *end;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 'h':
            usage(stdout);
            return CLI_OK;
        case 'k':
            g->kind = optarg;
            break;
        case 'o':
            g->dir = optarg;
            break;
        case 'n':
            if (parse_count(optarg, 1, &g->n))
                return cli_usage_error("gen-data", "--samples '%s' (expected an integer >= 1)",
                                       optarg);
            break;
        case 'e':
            if (parse_count(optarg, 0, &g->n_eval))
                return cli_usage_error("gen-data", "--eval-samples '%s' (expected an integer >= 0)",
                                       optarg);
            break;
        case 's':
            errno = 0;
            g->seed = strtoull(optarg, &end, 10);
            if (errno || end == optarg || *end)
                return cli_usage_error("gen-data", "--seed '%s' (expected an unsigned integer)",
                                       optarg);
            break;
        case 'z':
            g->gz = 1;
            break;
        case 'f':
            g->force = 1;
            break;
        default:
            usage(stderr);
            return CLI_USAGE;
        }
    }
    if (optind < argc) return cli_usage_error("gen-data", "unexpected argument '%s'", argv[optind]);
    if (!g->kind || !g->dir) return cli_usage_error("gen-data", "--kind and --out are required");
    return -1;
}

/* The files each kind writes, in DIR; the IDX ones also as NAME.gz (the one of the two that
 * is not written is removed). */
static const char *const idx_files[] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                        "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte", NULL};
static const char *const cifar_files[] = {"data_batch_1.bin",
                                          "data_batch_2.bin",
                                          "data_batch_3.bin",
                                          "data_batch_4.bin",
                                          "data_batch_5.bin",
                                          "test_batch.bin",
                                          NULL};
static const char *const csv_files[] = {"train.csv", "test.csv", NULL};

/* The other variant of IDX file DIR/NAME that a gen-data with (or without) --gzip wrote,
 * removed: the loader refuses a directory that holds both NAME and NAME.gz. */
static hr_status remove_other(const gen_opts *g, const char *name, char *err, size_t errlen) {
    char p[4200];
    snprintf(p, sizeof p, "%s/%s%s", g->dir, name, g->gz ? "" : ".gz");
    if (unlink(p) == 0 || errno == ENOENT) return HR_OK;
    return hr_fail(err, errlen, HR_ERR_IO,
                   "%s: cannot remove it (%s), and the loader refuses it beside the file just "
                   "written",
                   p, strerror(errno));
}

/* synthetic: MNIST IDX files, training then t10k. */
static hr_status write_idx(const gen_opts *g, const data_set *tr, const data_set *ev, char *err,
                           size_t errlen) {
    const char *const *names = idx_files;
    const char *z = g->gz ? ".gz" : "";
    char a[4200], b[4200];
    hr_status st = HR_OK;
    for (int k = 0; k < 2 && st == HR_OK; k++) {
        snprintf(a, sizeof a, "%s/%s%s", g->dir, names[2 * k], z);
        snprintf(b, sizeof b, "%s/%s%s", g->dir, names[2 * k + 1], z);
        st = data_write_idx(k ? ev : tr, a, b, g->gz, err, errlen);
    }
    for (int k = 0; k < 4 && st == HR_OK; k++) st = remove_other(g, names[k], err, errlen);
    return st;
}

/* synthetic-rgb: CIFAR-10 binary, five training batches and a test batch. */
static hr_status write_cifar(const gen_opts *g, const data_set *tr, const data_set *ev, char *err,
                             size_t errlen) {
    char a[4200];
    hr_status st = HR_OK;
    for (int k = 0; k < 5 && st == HR_OK; k++) {
        long from = g->n * k / 5, to = g->n * (k + 1) / 5;
        snprintf(a, sizeof a, "%s/data_batch_%d.bin", g->dir, k + 1);
        st = data_write_cifar(tr, from, to - from, a, err, errlen);
    }
    snprintf(a, sizeof a, "%s/test_batch.bin", g->dir);
    if (st == HR_OK) st = data_write_cifar(ev, 0, ev->n, a, err, errlen);
    return st;
}

/* synthetic-regression: CSV, target first. */
static hr_status write_csv(const gen_opts *g, const data_set *tr, const data_set *ev, char *err,
                           size_t errlen) {
    char a[4200];
    snprintf(a, sizeof a, "%s/train.csv", g->dir);
    hr_status st = data_write_csv(tr, a, err, errlen);
    snprintf(a, sizeof a, "%s/test.csv", g->dir);
    if (st == HR_OK) st = data_write_csv(ev, a, err, errlen);
    return st;
}

/* Without --force, a file of a name gen-data writes or removes that DIR already holds (real
 * MNIST files, another set's) is refused before anything is written: CLI_FAIL naming it; else
 * -1 to go on. */
static int refuse_existing(const gen_opts *g, const char *const *files, int idx) {
    if (g->force) return -1;
    for (int i = 0; files[i]; i++)
        for (int z = 0; z <= idx; z++) {
            char p[4200];
            struct stat sb;
            snprintf(p, sizeof p, "%s/%s%s", g->dir, files[i], z ? ".gz" : "");
            if (lstat(p, &sb) != 0) continue;
            fprintf(stderr,
                    "hetring gen-data: %s exists; nothing written (expected a directory without "
                    "the data set's files, or --force to replace them)\n",
                    p);
            return CLI_FAIL;
        }
    return -1;
}

typedef hr_status (*writer)(const gen_opts *g, const data_set *tr, const data_set *ev, char *err,
                            size_t errlen);

static const struct {
    const char *name;
    data_kind kind;
    writer write;
    const char *const *files; /* the files it writes */
    int idx;                  /* 1: IDX files, each also as NAME.gz */
} kinds[] = {
    {"synthetic", DATA_SYNTHETIC, write_idx, idx_files, 1},
    {"synthetic-rgb", DATA_SYNTHETIC_RGB, write_cifar, cifar_files, 0},
    {"synthetic-regression", DATA_SYNTHETIC_REGRESSION, write_csv, csv_files, 0},
};

int cmd_gen_data(int argc, char **argv) {
    gen_opts g = {.n = 60000, .n_eval = 10000, .seed = 1};
    int rc = parse_args(argc, argv, &g);
    if (rc >= 0) return rc;
    int k = 0, n_kinds = (int)(sizeof kinds / sizeof kinds[0]);
    while (k < n_kinds && strcmp(g.kind, kinds[k].name) != 0) k++;
    if (k == n_kinds)
        return cli_usage_error("gen-data",
                               "--kind '%s' (expected synthetic, synthetic-rgb or "
                               "synthetic-regression)",
                               g.kind);
    const double bytes = data_synthetic_bytes(kinds[k].kind, g.n + g.n_eval),
                 have = hr_memory_bytes();
    if (have > 0 && bytes > have)
        return cli_usage_error("gen-data",
                               "--samples %ld (and --eval-samples %ld) of %s data need %.3g GB of "
                               "memory, more than the %.3g GB this process may use here (expected "
                               "fewer samples)",
                               g.n, g.n_eval, g.kind, bytes / 1e9, have / 1e9);
    if (hr_file_mkdirs(g.dir, 0755) != 0) {
        fprintf(stderr, "hetring gen-data: cannot create %s (%s)\n", g.dir, strerror(errno));
        return CLI_FAIL;
    }
    if ((rc = refuse_existing(&g, kinds[k].files, kinds[k].idx)) >= 0) return rc;
    data_set tr, ev;
    char err[HR_ERRLEN] = "";
    hr_status st = data_synthetic(&tr, &ev, kinds[k].kind, g.n, g.n_eval, g.seed, err, sizeof err);
    if (st == HR_OK) st = kinds[k].write(&g, &tr, &ev, err, sizeof err);
    data_set_free(&tr);
    data_set_free(&ev);
    if (st != HR_OK) {
        fprintf(stderr, "hetring gen-data: %s\n", err[0] ? err : hr_strerror(st));
        return CLI_FAIL;
    }
    printf("wrote %s: %ld training and %ld held-out samples (seed %llu) to %s\n", g.kind, g.n,
           g.n_eval, g.seed, g.dir);
    return CLI_OK;
}
