/*
 * data_io.h: loading datasets: the sets a data_config asks for, and the file formats (MNIST
 * IDX, CIFAR-10 binary, CSV) with their writers for `hetring gen-data`.
 *
 * It sits on data.h (data_set, the synthetic sets); data.h knows nothing of files.
 */
#ifndef HR_DATA_IO_H
#define HR_DATA_IO_H

#include "base/hr_status.h"
#include "trainer/data.h"

#include <stdint.h>

/* Room for where a key was given: "FILE:LINE", or the override that set it. */
#define DATA_WHERE_LEN 640

/* The dataset settings ([train] dataset, data_dir, samples, eval_samples of the config). */
typedef struct {
    data_kind kind;    /* which set */
    const char *dir;   /* directory of the files, or the CSV file (borrowed); "" for none */
    long samples;      /* training samples: synthetic, the set's size; the training files,
                        * their first samples when samples_at says the key was given (more
                        * than they hold is an error), else all of them */
    long eval_samples; /* held-out samples: synthetic, the set's size; a held-out file (mnist,
                        * cifar10, a CSV directory), its first eval_samples when eval_at
                        * says the key was given (more than the file holds is an error), else
                        * all of it; one CSV file, the last eval_samples rows (given: at most a
                        * fifth of the file, else capped there) */
    char eval_at[DATA_WHERE_LEN]; /* where eval_samples was given ("FILE:LINE", or the override
                                   * that set it: cfg_where), for messages; "": its default */
    char samples_at[DATA_WHERE_LEN]; /* the same for samples */
    int csv_regression; /* CSV: the first column is a regression target, not a class label */
    const char *name;   /* the dataset's name in messages, e.g. "mnist" (borrowed) */
    const char *origin; /* the config file named in errors (borrowed) */
} data_config;

/* The training and held-out sets that dc asks for; synthetic sets are made from `seed`. The
 * training set must hold samples; the held-out set may be empty, in every format. */
hr_status data_load(data_set *train, data_set *eval, const data_config *dc, uint64_t seed,
                    char *err, size_t errlen);

/* MNIST IDX: an idx3-ubyte image file and an idx1-ubyte label file, plain or gzipped. */
hr_status data_load_idx(data_set *ds, const char *images, const char *labels, char *err,
                        size_t errlen);
hr_status data_write_idx(const data_set *ds, const char *images, const char *labels, int gz,
                         char *err, size_t errlen);
/* The loaders below take a file that holds no samples (an IDX header of 0 items, an empty
 * CIFAR-10 batch or CSV file) as an empty set: `hetring gen-data` writes such files. */
/* CIFAR-10 binary: records of 1 label byte and 3072 pixel bytes (R, G, B planes of 32x32). */
hr_status data_load_cifar(data_set *ds, const char *const *files, int n_files, char *err,
                          size_t errlen);
/* Write samples [first, first+n) of a 32x32x3 set as one CIFAR-10 batch file. */
hr_status data_write_cifar(const data_set *ds, long first, long n, const char *path, char *err,
                           size_t errlen);
/* CSV: one sample per line, label (or regression target) first, then the features. */
hr_status data_load_csv(data_set *ds, const char *path, int regression, char *err, size_t errlen);
hr_status data_write_csv(const data_set *ds, const char *path, char *err, size_t errlen);
/* Move the last `k` samples of `all` into a new set `tail`; `all` keeps the first n - k. */
hr_status data_split_tail(data_set *all, data_set *tail, long k, char *err, size_t errlen);

#endif
