/*
 * cmd_gen_data.c: `hetring gen-data`, write a synthetic dataset in a real file format.
 *
 * synthetic            -> MNIST IDX: train-images-idx3-ubyte, train-labels-idx1-ubyte,
 *                         t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte (.gz with --gzip)
 * synthetic-rgb        -> CIFAR-10 binary: data_batch_1.bin .. data_batch_5.bin, test_batch.bin
 * synthetic-regression -> CSV: train.csv, test.csv (target first, then the features)
 *
 * The files hold exactly the samples that dataset = synthetic* generates from the same seed,
 * so a run on the files follows the same trajectory as a run on the generator.
 */
#include "cli.h"
#include "data_io.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void usage(FILE *out) {
    fprintf(out, "usage: hetring gen-data --kind KIND --out DIR [--samples N] [--eval-samples M]\n"
                 "                        [--seed S] [--gzip]\n"
                 "\n"
                 "Write a synthetic dataset as files, for the mnist, cifar10 and csv loaders.\n"
                 "\n"
                 "  --kind KIND        synthetic (MNIST IDX), synthetic-rgb (CIFAR-10 binary) or\n"
                 "                     synthetic-regression (CSV)\n"
                 "  --out DIR          output directory (created if missing)\n"
                 "  --samples N        training samples (default 60000)\n"
                 "  --eval-samples M   held-out samples (default 10000)\n"
                 "  --seed S           generator seed, as [train] seed (default 1)\n"
                 "  --gzip             gzip the IDX files\n"
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

int cmd_gen_data(int argc, char **argv) {
    static const struct option opts[] = {
        {"kind", required_argument, 0, 'k'},    {"out", required_argument, 0, 'o'},
        {"samples", required_argument, 0, 'n'}, {"eval-samples", required_argument, 0, 'e'},
        {"seed", required_argument, 0, 's'},    {"gzip", no_argument, 0, 'z'},
        {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
    const char *kind_s = NULL, *dir = NULL;
    long n = 60000, n_eval = 10000;
    unsigned long long seed = 1;
    int gz = 0, ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 'h':
            usage(stdout);
            return CLI_OK;
        case 'k':
            kind_s = optarg;
            break;
        case 'o':
            dir = optarg;
            break;
        case 'n':
            if (parse_count(optarg, 1, &n))
                return cli_usage_error("gen-data", "--samples '%s' (expected an integer >= 1)",
                                       optarg);
            break;
        case 'e':
            if (parse_count(optarg, 0, &n_eval))
                return cli_usage_error("gen-data", "--eval-samples '%s' (expected an integer >= 0)",
                                       optarg);
            break;
        case 's': {
            char *end;
            errno = 0;
            seed = strtoull(optarg, &end, 10);
            if (errno || end == optarg || *end)
                return cli_usage_error("gen-data", "--seed '%s' (expected an unsigned integer)",
                                       optarg);
            break;
        }
        case 'z':
            gz = 1;
            break;
        default:
            usage(stderr);
            return CLI_USAGE;
        }
    }
    if (optind < argc) return cli_usage_error("gen-data", "unexpected argument '%s'", argv[optind]);
    if (!kind_s || !dir) return cli_usage_error("gen-data", "--kind and --out are required");
    data_kind kind;
    if (strcmp(kind_s, "synthetic") == 0)
        kind = DATA_SYNTHETIC;
    else if (strcmp(kind_s, "synthetic-rgb") == 0)
        kind = DATA_SYNTHETIC_RGB;
    else if (strcmp(kind_s, "synthetic-regression") == 0)
        kind = DATA_SYNTHETIC_REGRESSION;
    else
        return cli_usage_error("gen-data",
                               "--kind '%s' (expected synthetic, synthetic-rgb or "
                               "synthetic-regression)",
                               kind_s);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "hetring gen-data: cannot create %s (%s)\n", dir, strerror(errno));
        return CLI_FAIL;
    }
    data_set tr, ev;
    char err[HR_ERRLEN] = "", a[4200], b[4200];
    hr_status st = data_synthetic(&tr, &ev, kind, n, n_eval, seed, err, sizeof err);
    const char *z = gz ? ".gz" : "";
    if (st == HR_OK && kind == DATA_SYNTHETIC) {
        snprintf(a, sizeof a, "%s/train-images-idx3-ubyte%s", dir, z);
        snprintf(b, sizeof b, "%s/train-labels-idx1-ubyte%s", dir, z);
        st = data_write_idx(&tr, a, b, gz, err, sizeof err);
        snprintf(a, sizeof a, "%s/t10k-images-idx3-ubyte%s", dir, z);
        snprintf(b, sizeof b, "%s/t10k-labels-idx1-ubyte%s", dir, z);
        if (st == HR_OK) st = data_write_idx(&ev, a, b, gz, err, sizeof err);
    } else if (st == HR_OK && kind == DATA_SYNTHETIC_RGB) {
        for (int k = 0; k < 5 && st == HR_OK; k++) { /* five batches, like CIFAR-10 */
            long from = n * k / 5, to = n * (k + 1) / 5;
            snprintf(a, sizeof a, "%s/data_batch_%d.bin", dir, k + 1);
            st = data_write_cifar(&tr, from, to - from, a, err, sizeof err);
        }
        snprintf(a, sizeof a, "%s/test_batch.bin", dir);
        if (st == HR_OK) st = data_write_cifar(&ev, 0, ev.n, a, err, sizeof err);
    } else if (st == HR_OK) {
        snprintf(a, sizeof a, "%s/train.csv", dir);
        st = data_write_csv(&tr, a, err, sizeof err);
        snprintf(a, sizeof a, "%s/test.csv", dir);
        if (st == HR_OK) st = data_write_csv(&ev, a, err, sizeof err);
    }
    data_set_free(&tr);
    data_set_free(&ev);
    if (st != HR_OK) {
        fprintf(stderr, "hetring gen-data: %s\n", err[0] ? err : hr_strerror(st));
        return CLI_FAIL;
    }
    printf("wrote %s: %ld training and %ld held-out samples (seed %llu) to %s\n", kind_s, n, n_eval,
           seed, dir);
    return CLI_OK;
}
