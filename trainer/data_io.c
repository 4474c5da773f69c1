/*
 * data_io.c: the dataset file formats: MNIST IDX (plain or gzipped), CIFAR-10 binary, CSV;
 * and data_load, which picks the set a data_config asks for.
 *
 * Every reader goes through zlib's gzread, which reads plain files as they are, so any of
 * these files may also be gzipped. A bad file is refused with a message that names the file
 * and the problem: wrong magic, truncated, size mismatch, label out of range, bad number; and
 * held-out files whose samples have another shape than the training samples (the model and
 * the batch buffers are sized for the training shape).
 */
#include "trainer/data_io.h"

#include "base/hr_cores.h"
#include "base/hr_file.h"
#include "base/hr_log.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* ================================================================ helpers */

/* Open data file `path` for reading, gzipped or not. Only a regular file is taken: a FIFO (or a
 * device) would block the node for ever in open or read, so it is opened without blocking and
 * refused by what it is. */
static gzFile open_read(const char *path, char *err, size_t errlen, hr_status *st) {
    struct stat sb;
    int fd = hr_file_open_read(path, &sb);
    if (fd < 0) {
        *st = hr_fail(err, errlen, HR_ERR_IO, "%s: cannot open (%s)", path, strerror(errno));
        return NULL;
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        *st = hr_fail(err, errlen, HR_ERR_DATA, "%s: not a regular file (expected a data file)",
                      path);
        return NULL;
    }
    errno = 0;
    gzFile f = gzdopen(fd, "rb");
    if (!f) {
        close(fd);
        *st = hr_fail(err, errlen, HR_ERR_IO, "%s: cannot open (%s)", path,
                      errno ? strerror(errno) : "out of memory");
    }
    return f;
}

/* Whether f's gzip stream ended before its end (the file was cut short): gzread then returns
 * the bytes it has, without an error, and only gzerror says Z_BUF_ERROR. */
static int cut_short(gzFile f) {
    int zerr;
    gzerror(f, &zerr);
    return zerr == Z_BUF_ERROR;
}

/* Read exactly n bytes; returns the number read (< n at end of file), or -1 on an error,
 * a gzip stream that ends early included (read_error says which). */
static long read_full(gzFile f, void *buf, size_t n) {
    size_t got = 0;
    while (got < n) {
        unsigned chunk = n - got > (1u << 30) ? (1u << 30) : (unsigned)(n - got);
        int r = gzread(f, (char *)buf + got, chunk);
        if (r < 0) return -1;
        if (r == 0) return cut_short(f) ? -1 : (long)got;
        got += (size_t)r;
    }
    return (long)got;
}

static hr_status read_error(gzFile f, const char *path, char *err, size_t errlen) {
    int zerr;
    const char *m = gzerror(f, &zerr);
    if (zerr == Z_BUF_ERROR)
        return hr_fail(err, errlen, HR_ERR_DATA,
                       "%s: truncated: the file ends inside its gzip stream, so the end of its "
                       "data is missing (expected the whole file: copy or fetch it again)",
                       path);
    return hr_fail(err, errlen, HR_ERR_IO, "%s: read error (%s)", path,
                   zerr == Z_ERRNO ? strerror(errno) : m);
}

/* Bytes left after the expected payload (0 when the file ends there), or -1 on a read error,
 * a gzip stream that ends early included. */
static long trailing(gzFile f) {
    char buf[4096];
    long n = 0;
    int r;
    while ((r = gzread(f, buf, sizeof buf)) > 0) n += r;
    return r < 0 || cut_short(f) ? -1 : n;
}

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8),
    p[3] = (uint8_t)v;
}

/* A data file being written: into hr_file_tmp_name's temporary name beside the file `path`
 * leads to (hr_file_target), renamed over it once whole and on the disk, so a full disk or a
 * crash keeps the file it replaces. */
typedef struct {
    gzFile f;        /* the stream, on the temporary file */
    int sync;        /* a second descriptor of it, fsynced after gzclose has written the end */
    char tmp[4200];  /* the temporary file */
    char real[4096]; /* the file it replaces */
} out_file;

static hr_status open_write(out_file *o, const char *path, int gz, char *err, size_t errlen) {
    o->f = NULL, o->sync = -1;
    if (hr_file_target(path, o->real, sizeof o->real) != 0 ||
        hr_file_tmp_name(o->tmp, sizeof o->tmp, o->real) != 0)
        return hr_fail(err, errlen, HR_ERR_IO, "%s: cannot create (%s)", path, strerror(errno));
    hr_file_remove_stale(o->real, HR_SUB_DATA, "data file write");
    int fd = open(o->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return hr_fail(err, errlen, HR_ERR_IO, "%s: cannot create %s (%s)", path, o->tmp,
                       strerror(errno));
    o->sync = dup(fd);
    errno = 0;
    if (o->sync < 0 || !(o->f = gzdopen(fd, gz ? "wb6" : "wbT"))) {
        int e = errno;
        close(fd);
        if (o->sync >= 0) close(o->sync);
        unlink(o->tmp);
        return hr_fail(err, errlen, HR_ERR_IO, "%s: cannot create (%s)", path,
                       e ? strerror(e) : "out of memory");
    }
    return HR_OK;
}

static hr_status write_full(gzFile f, const void *buf, size_t n, const char *path, char *err,
                            size_t errlen) {
    size_t done = 0;
    while (done < n) {
        unsigned chunk = n - done > (1u << 30) ? (1u << 30) : (unsigned)(n - done);
        int w = gzwrite(f, (const char *)buf + done, chunk);
        if (w <= 0) {
            int zerr;
            const char *why = gzerror(f, &zerr);
            return hr_fail(err, errlen, HR_ERR_IO, "%s: write failed (%s)", path,
                           zerr == Z_ERRNO ? strerror(errno) : why);
        }
        done += (size_t)w;
    }
    return HR_OK;
}

/* Close o after writing it (st: how the writing went) and rename it over the file it
 * replaces. A file that could not be written whole (a full disk) is removed and the old one
 * kept: what is left is never a cut-short data set that a later run reads. */
static hr_status close_write(out_file *o, const char *path, hr_status st, char *err,
                             size_t errlen) {
    if (gzclose(o->f) != Z_OK && st == HR_OK)
        st = hr_fail(err, errlen, HR_ERR_IO, "%s: write failed on close (%s)", path,
                     strerror(errno));
    if (st == HR_OK && fsync(o->sync) != 0)
        st = hr_fail(err, errlen, HR_ERR_IO, "%s: write failed (%s)", path, strerror(errno));
    close(o->sync);
    if (st != HR_OK) {
        unlink(o->tmp);
        return st;
    }
    int e = hr_file_replace(o->tmp, o->real);
    if (e)
        return hr_fail(err, errlen, HR_ERR_IO, "%s: cannot rename %s into place (%s)", path, o->tmp,
                       strerror(e));
    return HR_OK;
}

/* ================================================================ memory */

/* A data file whose samples this process cannot hold is refused, naming the file, its size on
 * disk, what its samples need and the memory there is (hr_memory_bytes): under a cgroup memory
 * limit the kernel lends the pages and then kills the node, with no word of why. `held` says
 * what needs `need` bytes. */
static hr_status too_big(const char *path, const char *held, double need, double have, char *err,
                         size_t errlen) {
    struct stat sb;
    char size[64] = "size unknown";
    if (stat(path, &sb) == 0) snprintf(size, sizeof size, "%.3g GB", (double)sb.st_size / 1e9);
    return hr_fail(err, errlen, HR_ERR_DATA,
                   "%s (%s on disk): %s need %.3g GB of memory, more than the %.3g GB this "
                   "process may use here (expected a smaller file, or more memory for this node; "
                   "[train] samples cuts the set only after the whole file is read)",
                   path, size, held, need / 1e9, have / 1e9);
}

/* The part of file `path` (plain or gzipped) that stream f has read so far, in (0, 1]: 1 where
 * it is not known. */
static double read_part(gzFile f, const char *path) {
    struct stat sb;
    const double at = (double)gzoffset(f);
    if (stat(path, &sb) != 0 || sb.st_size <= 0 || at <= 0) return 1;
    return at < (double)sb.st_size ? at / (double)sb.st_size : 1;
}

/* The samples of file `path` counted on a stream of its own, reading it through: its bytes over
 * `rec` (a file of rec-byte records), or with rec 0 its CSV data lines (neither blank nor a
 * comment: each is a row, or the load stops on it). -1 where it cannot be read to its end (the
 * load itself then says why). Memory: 64 KiB whatever the file. */
static long count_samples(const char *path, long rec) {
    hr_status st;
    char e[8];
    gzFile f = open_read(path, e, sizeof e, &st);
    if (!f) return -1;
    enum { CHUNK = 1 << 16 };
    char *buf = malloc(CHUNK);
    long n = 0, bytes = 0;
    int r = 0, seen = 0, skip = 0; /* the line so far: holds data (seen), or is skipped */
    while (buf && (r = gzread(f, buf, CHUNK)) > 0) {
        int i = 0;
        if (!rec && bytes == 0 && r >= 3 && memcmp(buf, "\xef\xbb\xbf", 3) == 0) i = 3; /* BOM */
        bytes += r;
        for (; !rec && i < r; i++) { /* as data_load_csv skips lines: by their first character */
            const char c = buf[i];
            if (c == '\n')
                n += seen, seen = 0, skip = 0;
            else if (!seen && !skip && c != ' ' && c != '\t')
                *(c == '\r' || c == '#' || c == 0 ? &skip : &seen) = 1;
        }
    }
    const int ok = buf && r == 0 && !cut_short(f);
    free(buf);
    gzclose(f);
    if (!ok) return -1;
    return rec ? bytes / rec : n + seen;
}

/* Samples of `row` bytes each held in memory, `before` of earlier files and `n` of this one,
 * `part` of it read (read_part): the capacity *cap grows to when sample before + n does not
 * fit it, doubled but never beyond the memory this process may use. HR_ERR_DATA (too_big) when the
 * whole file does not fit there, or sample n itself does not: found early, before the node holds
 * that memory, which under a cgroup limit the kernel would kill it for. The whole file's samples
 * are projected at the rate of those so far, which overshoots where the first ones are shorter
 * on disk than the rest (shorter text, or gzipped better); so a projection that does not fit is
 * only a reason to count them, once (count_samples with `rec`, its record size or 0 for CSV
 * lines, into *total: -1 until then, -2 where they cannot be counted), and the count decides.
 * `what` names the samples in the message ("rows of 500 floats"). */
static hr_status grow_cap(long before, long n, double row, double part, long rec, long *total,
                          long *cap, const char *path, const char *what, char *err, size_t errlen) {
    const double have = hr_memory_bytes();
    double need = ((double)before + (double)(n + 1) / part) * row;
    if (have > 0 && need > have && *total == -1) {
        const long counted = count_samples(path, rec);
        *total = counted < 0 ? -2 : counted;
    }
    const long whole = *total > n + 1 ? *total : n + 1; /* n + 1 where they cannot be counted */
    if (*total != -1) need = ((double)before + (double)whole) * row;
    if (have > 0 && need > have) {
        char held[128];
        snprintf(held, sizeof held, "its %s (%ld %s)%s", what, *total >= 0 ? *total : n + 1,
                 *total >= 0 ? "counted" : "read",
                 before ? ", with those of the files before" : "");
        return too_big(path, held, need, have, err, errlen);
    }
    const double fit = have > 0 ? have / row : 9e18;
    long grown = *cap ? 2 * *cap : 1024;
    *cap = (double)grown > fit ? (long)fit : grown;
    return HR_OK;
}

/* ================================================================ MNIST IDX */

/* The 16-byte header of IDX image file `path`: n images of rows x cols bytes each. */
static hr_status idx_image_header(gzFile f, const char *path, long *n, long *rows, long *cols,
                                  char *err, size_t errlen) {
    uint8_t h[16];
    long r = read_full(f, h, 16);
    if (r < 0) return read_error(f, path, err, errlen);
    if (r < 4 || be32(h) != 0x00000803)
        return hr_fail(
            err, errlen, HR_ERR_DATA,
            "%s: wrong magic %s0x%08x (expected 0x00000803, an IDX file of unsigned-byte "
            "images)",
            path, r < 4 ? "(file too short) " : "", r < 4 ? 0 : be32(h));
    if (r < 16)
        return hr_fail(err, errlen, HR_ERR_DATA, "%s: truncated in the header (%ld of 16 bytes)",
                       path, r);
    *n = be32(h + 4), *rows = be32(h + 8), *cols = be32(h + 12);
    if (*rows < 1 || *cols < 1 || *rows > 4096 || *cols > 4096)
        return hr_fail(err, errlen, HR_ERR_DATA, "%s: bad image size %ldx%ld in the header", path,
                       *rows, *cols);
    return HR_OK;
}

/* Image file `path` into ds: its shape and x8 (n, rows*cols). Also allocates ds->y, which
 * idx_read_labels fills; the file must end right after the images the header declares. */
static hr_status idx_read_images(data_set *ds, gzFile f, const char *path, char *err,
                                 size_t errlen) {
    long n = 0, rows = 0, cols = 0;
    HR_CHECK(idx_image_header(f, path, &n, &rows, &cols, err, errlen));
    ds->n = n, ds->c = 1, ds->h = (int)rows, ds->w = (int)cols, ds->d = rows * cols;
    ds->n_classes = DATA_CLASSES;
    size_t bytes = (size_t)(n * ds->d);
    /* the header's count is not trusted with memory: the buffer grows as the images arrive
     * (a 64-byte file may declare 2^56 bytes), and the labels are allocated once the images
     * are all there */
    size_t cap = bytes < ((size_t)64 << 20) ? bytes : ((size_t)64 << 20), got = 0;
    ds->x8 = malloc(cap + 1);
    if (!ds->x8)
        return hr_fail(err, errlen, HR_ERR_NOMEM, "%s: out of memory for %ld images", path, n);
    long r = 0;
    for (;;) {
        r = read_full(f, ds->x8 + got, cap - got);
        if (r < 0) return read_error(f, path, err, errlen);
        got += (size_t)r;
        if (got < cap || cap == bytes) break;
        /* past 64 MiB, the file holds many images: the set the header declares must fit */
        const double need = (double)bytes + (double)sizeof *ds->y * (double)n,
                     have = hr_memory_bytes();
        if (have > 0 && need > have) {
            char held[160];
            snprintf(held, sizeof held, "the %ld images of %ldx%ld its header declares", n, rows,
                     cols);
            return too_big(path, held, need, have, err, errlen);
        }
        size_t grown = cap * 2 < bytes ? cap * 2 : bytes;
        uint8_t *x = realloc(ds->x8, grown + 1);
        if (!x)
            return hr_fail(err, errlen, HR_ERR_NOMEM, "%s: out of memory for %ld images", path, n);
        ds->x8 = x, cap = grown;
    }
    r = (long)got;
    if ((size_t)r == bytes) ds->y = malloc(sizeof *ds->y * (size_t)n + 1);
    if ((size_t)r == bytes && !ds->y)
        return hr_fail(err, errlen, HR_ERR_NOMEM, "%s: out of memory for %ld labels", path, n);
    if ((size_t)r < bytes)
        return hr_fail(err, errlen, HR_ERR_DATA,
                       "%s: truncated: the header declares %ld images of %ldx%ld (%zu bytes) but "
                       "the file holds only %ld bytes of them",
                       path, n, rows, cols, bytes, r);
    long extra = trailing(f);
    if (extra < 0) return read_error(f, path, err, errlen);
    if (extra)
        return hr_fail(err, errlen, HR_ERR_DATA,
                       "%s: size mismatch: %ld bytes after the %ld images the header declares",
                       path, extra, n);
    return HR_OK;
}

/* Label file `path` into ds->y: one label 0..DATA_CLASSES-1 per image of ds (read from
 * `images`, named in messages), and nothing after them. */
static hr_status idx_read_labels(data_set *ds, gzFile f, const char *path, const char *images,
                                 char *err, size_t errlen) {
    long n = ds->n;
    uint8_t h[8];
    long r = read_full(f, h, 8);
    if (r < 0) return read_error(f, path, err, errlen);
    if (r < 8 || be32(h) != 0x00000801)
        return hr_fail(err, errlen, HR_ERR_DATA,
                       "%s: wrong magic %s0x%08x (expected 0x00000801, an IDX file of labels)",
                       path, r < 8 ? "(file too short) " : "", r < 4 ? 0 : be32(h));
    if ((long)be32(h + 4) != n)
        return hr_fail(err, errlen, HR_ERR_DATA,
                       "%s: size mismatch: %u labels for the %ld images of %s", path, be32(h + 4),
                       n, images);
    uint8_t *lab = (uint8_t *)ds->y + sizeof *ds->y * (size_t)n - (size_t)n; /* tail of y */
    r = read_full(f, lab, (size_t)n);
    if (r < 0) return read_error(f, path, err, errlen);
    if (r < n)
        return hr_fail(err, errlen, HR_ERR_DATA,
                       "%s: truncated: the header declares %ld labels but the file holds %ld", path,
                       n, r);
    long extra = trailing(f);
    if (extra < 0) return read_error(f, path, err, errlen);
    if (extra)
        return hr_fail(err, errlen, HR_ERR_DATA,
                       "%s: size mismatch: %ld bytes after the %ld labels the header declares",
                       path, extra, n);
    for (long i = 0; i < n; i++) { /* widen in place, front to back is safe: y[i] ends at 4i+4 */
        uint8_t v = lab[i];
        if (v >= DATA_CLASSES)
            return hr_fail(err, errlen, HR_ERR_DATA,
                           "%s: label %u of sample %ld is out of range (expected 0..%d)", path, v,
                           i, DATA_CLASSES - 1);
        ds->y[i] = v;
    }
    return HR_OK;
}

hr_status data_load_idx(data_set *ds, const char *images, const char *labels, char *err,
                        size_t errlen) {
    memset(ds, 0, sizeof *ds);
    hr_status st = HR_OK;
    gzFile fi = NULL, fl = NULL;
    if (!(fi = open_read(images, err, errlen, &st))) goto fail;
    HR_CHECK_GOTO(idx_read_images(ds, fi, images, err, errlen), st, fail);
    if (!(fl = open_read(labels, err, errlen, &st))) goto fail;
    HR_CHECK_GOTO(idx_read_labels(ds, fl, labels, images, err, errlen), st, fail);
    gzclose(fi);
    gzclose(fl);
    return HR_OK;
fail:
    if (fi) gzclose(fi);
    if (fl) gzclose(fl);
    data_set_free(ds);
    return st;
}

hr_status data_write_idx(const data_set *ds, const char *images, const char *labels, int gz,
                         char *err, size_t errlen) {
    if (!ds->x8 || !ds->y || ds->c != 1)
        return hr_fail(err, errlen, HR_ERR_INVAL, "%s: IDX needs a one-channel image set", images);
    uint8_t h[16];
    out_file o;
    HR_CHECK(open_write(&o, images, gz, err, errlen));
    put_be32(h, 0x00000803), put_be32(h + 4, (uint32_t)ds->n);
    put_be32(h + 8, (uint32_t)ds->h), put_be32(h + 12, (uint32_t)ds->w);
    hr_status st = write_full(o.f, h, 16, images, err, errlen);
    if (st == HR_OK) st = write_full(o.f, ds->x8, (size_t)(ds->n * ds->d), images, err, errlen);
    HR_CHECK(close_write(&o, images, st, err, errlen));
    HR_CHECK(open_write(&o, labels, gz, err, errlen));
    put_be32(h, 0x00000801), put_be32(h + 4, (uint32_t)ds->n);
    st = write_full(o.f, h, 8, labels, err, errlen);
    for (long i = 0; i < ds->n && st == HR_OK; i++) {
        uint8_t v = (uint8_t)ds->y[i];
        st = write_full(o.f, &v, 1, labels, err, errlen);
    }
    return close_write(&o, labels, st, err, errlen);
}

/* ================================================================ CIFAR-10 binary */

#define CIFAR_PIXELS 3072
#define CIFAR_RECORD (1 + CIFAR_PIXELS)

hr_status data_load_cifar(data_set *ds, const char *const *files, int n_files, char *err,
                          size_t errlen) {
    memset(ds, 0, sizeof *ds);
    ds->c = 3, ds->h = 32, ds->w = 32, ds->d = CIFAR_PIXELS, ds->n_classes = DATA_CLASSES;
    hr_status st = HR_OK;
    long cap = 0;
    uint8_t *rec = malloc(CIFAR_RECORD);
    if (!rec) return hr_fail(err, errlen, HR_ERR_NOMEM, "cifar: out of memory");
    for (int fi = 0; fi < n_files; fi++) {
        gzFile f = open_read(files[fi], err, errlen, &st);
        if (!f) goto fail;
        long total = -1; /* this file's records, once counted (grow_cap) */
        for (long k = 0;; k++) {
            long r = read_full(f, rec, CIFAR_RECORD);
            if (r < 0) {
                st = read_error(f, files[fi], err, errlen);
                gzclose(f);
                goto fail;
            }
            if (r == 0) break; /* an empty file holds no records (data_load wants training ones) */
            if (r < CIFAR_RECORD) {
                st = hr_fail(err, errlen, HR_ERR_DATA,
                             "%s: size mismatch: truncated record %ld (%ld of %d bytes; the file "
                             "must hold whole %d-byte records)",
                             files[fi], k, r, CIFAR_RECORD, CIFAR_RECORD);
                gzclose(f);
                goto fail;
            }
            if (rec[0] >= DATA_CLASSES) {
                st = hr_fail(err, errlen, HR_ERR_DATA,
                             "%s: label %u of record %ld is out of range (expected 0..%d; is this "
                             "a CIFAR-10 binary file?)",
                             files[fi], rec[0], k, DATA_CLASSES - 1);
                gzclose(f);
                goto fail;
            }
            if (ds->n == cap) {
                if ((st = grow_cap(ds->n - k, k, sizeof *ds->y + CIFAR_PIXELS,
                                   read_part(f, files[fi]), CIFAR_RECORD, &total, &cap, files[fi],
                                   "records", err, errlen)) != HR_OK) {
                    gzclose(f);
                    goto fail;
                }
                uint8_t *x = realloc(ds->x8, (size_t)(cap * CIFAR_PIXELS));
                int32_t *y = x ? realloc(ds->y, sizeof *y * (size_t)cap) : NULL;
                if (x) ds->x8 = x;
                if (y) ds->y = y;
                if (!x || !y) {
                    st = hr_fail(err, errlen, HR_ERR_NOMEM, "%s: out of memory", files[fi]);
                    gzclose(f);
                    goto fail;
                }
            }
            ds->y[ds->n] = rec[0];
            memcpy(ds->x8 + ds->n * CIFAR_PIXELS, rec + 1, CIFAR_PIXELS);
            ds->n++;
        }
        gzclose(f);
    }
    free(rec);
    return HR_OK;
fail:
    free(rec);
    data_set_free(ds);
    return st;
}

hr_status data_write_cifar(const data_set *ds, long first, long n, const char *path, char *err,
                           size_t errlen) {
    if (!ds->x8 || !ds->y || ds->d != CIFAR_PIXELS || ds->c != 3)
        return hr_fail(err, errlen, HR_ERR_INVAL, "%s: CIFAR needs a 32x32x3 image set", path);
    out_file o;
    HR_CHECK(open_write(&o, path, 0, err, errlen));
    hr_status st = HR_OK;
    for (long i = first; i < first + n && st == HR_OK; i++) {
        uint8_t lab = (uint8_t)ds->y[i];
        st = write_full(o.f, &lab, 1, path, err, errlen);
        if (st == HR_OK)
            st = write_full(o.f, ds->x8 + i * CIFAR_PIXELS, CIFAR_PIXELS, path, err, errlen);
    }
    return close_write(&o, path, st, err, errlen);
}

/* ================================================================ CSV */

/* The next line of f into *line (grown as needed; *cap bytes): 1 when a line was read, 0 at
 * the end of the file or on a read error (gzeof tells them apart), -1 out of memory. */
static int csv_read_line(gzFile f, char **line, size_t *cap) {
    if (!gzgets(f, *line, (int)*cap)) return 0;
    size_t len = strlen(*line);
    while (len == *cap - 1 && (*line)[len - 1] != '\n') { /* grow for long lines */
        char *g = realloc(*line, *cap * 2);
        if (!g) return -1;
        *line = g;
        if (!gzgets(f, *line + len, (int)(*cap + 1))) break;
        *cap *= 2;
        len = strlen(*line);
    }
    return 1;
}

/* The first data line fixes the shape: `cols` fields, a label (or target) and cols-1 features;
 * *row gets room for one line's fields. */
static hr_status csv_shape(data_set *ds, long cols, int regression, float **row, const char *path,
                           long lineno, char *err, size_t errlen) {
    if (cols < 2)
        return hr_fail(err, errlen, HR_ERR_DATA,
                       "%s:%ld: one column only (expected a label, then the features)", path,
                       lineno);
    if (!(*row = malloc(sizeof **row * (size_t)cols)))
        return hr_fail(err, errlen, HR_ERR_NOMEM, "%s: out of memory", path);
    ds->c = (int)(cols - 1), ds->h = 1, ds->w = 1, ds->d = cols - 1;
    ds->n_targets = regression ? 1 : 0;
    return HR_OK;
}

/* The cols fields of data line p into row, each a finite number; a class label must be an
 * integer 0..65535. A value too small for a float32 (1e-40, 1e-300: strtof's ERANGE on
 * underflow) is taken as strtof rounds it, to a subnormal or 0; one too large is refused. */
static hr_status csv_parse_row(char *p, float *row, long cols, int regression, const char *path,
                               long lineno, char *err, size_t errlen) {
    for (long j = 0; j < cols; j++) {
        char *end;
        errno = 0;
        row[j] = strtof(p, &end);
        const int overflow = errno == ERANGE && isinf(row[j]);
        while (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n') end++;
        if (overflow) {
            int w = (int)strcspn(p, ", \t\r\n");
            return hr_fail(err, errlen, HR_ERR_DATA,
                           "%s:%ld: column %ld: '%.*s' is beyond float32's range (expected "
                           "values of magnitude below 3.4e38)",
                           path, lineno, j + 1, w > 40 ? 40 : w, p);
        }
        if (end == p || (*end != ',' && *end != 0) || (j + 1 < cols && *end != ',')) {
            char *stop = strchr(p, ',');
            int w = stop ? (int)(stop - p) : (int)strcspn(p, "\r\n");
            return hr_fail(err, errlen, HR_ERR_DATA, "%s:%ld: column %ld: bad number '%.*s'", path,
                           lineno, j + 1, w > 40 ? 40 : w, p);
        }
        if (!isfinite(row[j])) { /* strtof takes nan and inf: they would reach the gradient */
            int w = (int)strcspn(p, ", \t\r\n");
            return hr_fail(err, errlen, HR_ERR_DATA,
                           "%s:%ld: column %ld: '%.*s' is not a finite number (expected every "
                           "value finite; drop or fill in the missing ones)",
                           path, lineno, j + 1, w > 40 ? 40 : w, p);
        }
        p = *end == ',' ? end + 1 : end;
    }
    /* the range first: casting a float beyond long's range (or NaN) is undefined */
    if (!regression && (!(row[0] >= 0 && row[0] <= 65535) || row[0] != (float)(long)row[0]))
        return hr_fail(err, errlen, HR_ERR_DATA,
                       "%s:%ld: label %g is out of range (expected an integer class 0..65535)",
                       path, lineno, (double)row[0]);
    return HR_OK;
}

/* Append a parsed row as sample ds->n, growing the arrays to room for `cap` samples (grow_cap's)
 * when they are full (`grow`); -1 when out of memory. */
static int csv_append(data_set *ds, const float *row, int regression, int grow, long cap) {
    if (grow) {
        float *x = realloc(ds->xf, sizeof *x * (size_t)(cap * ds->d));
        if (x) ds->xf = x;
        void *yt = x ? (regression ? realloc(ds->t, sizeof *ds->t * (size_t)cap)
                                   : realloc(ds->y, sizeof *ds->y * (size_t)cap))
                     : NULL;
        if (yt) {
            if (regression)
                ds->t = yt;
            else
                ds->y = yt;
        }
        if (!x || !yt) return -1;
    }
    memcpy(ds->xf + ds->n * ds->d, row + 1, sizeof *row * (size_t)ds->d);
    if (regression) {
        ds->t[ds->n] = row[0];
    } else {
        ds->y[ds->n] = (int32_t)row[0];
        if (ds->y[ds->n] + 1 > ds->n_classes) ds->n_classes = ds->y[ds->n] + 1;
    }
    ds->n++;
    return 0;
}

hr_status data_load_csv(data_set *ds, const char *path, int regression, char *err, size_t errlen) {
    memset(ds, 0, sizeof *ds);
    hr_status st = HR_OK;
    gzFile f = open_read(path, err, errlen, &st);
    if (!f) return st;
    size_t cap_line = 1 << 16;
    char *line = malloc(cap_line);
    float *row = NULL;
    long cols = -1, cap = 0, lineno = 0, total = -1; /* total: the rows counted (grow_cap) */
    int got;
    if (!line) goto nomem;
    while ((got = csv_read_line(f, &line, &cap_line)) > 0) {
        lineno++;
        char *p = line;
        if (lineno == 1 && strncmp(p, "\xef\xbb\xbf", 3) == 0) p += 3; /* a UTF-8 byte order mark */
        while (*p == ' ' || *p == '\t') p++;
        if (*p == '\n' || *p == '\r' || *p == 0 || *p == '#') continue;
        long nf = 1;
        for (char *q = p; *q; q++) nf += *q == ',';
        if (cols < 0) {
            cols = nf;
            HR_CHECK_GOTO(csv_shape(ds, cols, regression, &row, path, lineno, err, errlen), st,
                          fail);
        }
        if (nf != cols) {
            st = hr_fail(err, errlen, HR_ERR_DATA,
                         "%s:%ld: size mismatch: %ld columns (expected %ld, as on the first line)",
                         path, lineno, nf, cols);
            goto fail;
        }
        HR_CHECK_GOTO(csv_parse_row(p, row, cols, regression, path, lineno, err, errlen), st, fail);
        const int grow = ds->n == cap;
        if (grow) {
            char what[64];
            snprintf(what, sizeof what, "rows of %ld floats", cols);
            HR_CHECK_GOTO(grow_cap(0, ds->n, 4.0 * (double)cols, read_part(f, path), 0, &total,
                                   &cap, path, what, err, errlen),
                          st, fail);
        }
        if (csv_append(ds, row, regression, grow, cap) != 0) goto nomem;
    }
    if (got < 0) goto nomem;
    if (!gzeof(f) || cut_short(f)) {
        st = read_error(f, path, err, errlen);
        goto fail;
    }
    if (!regression && ds->n_classes < 2) ds->n_classes = 2;
    free(line);
    free(row);
    gzclose(f);
    return HR_OK;
nomem:
    st = hr_fail(err, errlen, HR_ERR_NOMEM, "%s: out of memory", path);
fail:
    free(line);
    free(row);
    gzclose(f);
    data_set_free(ds);
    return st;
}

hr_status data_write_csv(const data_set *ds, const char *path, char *err, size_t errlen) {
    char tmp[4200]; /* written whole beside it and renamed over it, as open_write */
    FILE *f = hr_file_create(path, tmp, sizeof tmp);
    if (!f)
        return hr_fail(err, errlen, HR_ERR_IO, "%s: cannot create %s (%s)", path,
                       tmp[0] ? tmp : path, strerror(errno));
    for (long i = 0; i < ds->n; i++) {
        if (ds->t)
            fprintf(f, "%.9g", (double)ds->t[i * ds->n_targets]);
        else
            fprintf(f, "%d", ds->y[i]);
        for (long j = 0; j < ds->d; j++)
            fprintf(f, ",%.9g",
                    ds->xf ? (double)ds->xf[i * ds->d + j] : (double)ds->x8[i * ds->d + j] / 255.0);
        fputc('\n', f);
    }
    int e = hr_file_commit(f, errno, tmp, path);
    if (!e) return HR_OK; /* else the old file is kept and no cut-short data set is left */
    return hr_fail(err, errlen, HR_ERR_IO, "%s: write failed (%s)", path, strerror(e));
}

hr_status data_split_tail(data_set *all, data_set *tail, long k, char *err, size_t errlen) {
    *tail = *all;
    tail->x8 = NULL, tail->xf = NULL, tail->y = NULL, tail->t = NULL;
    tail->n = k;
    long keep = all->n - k, d = all->d, T = all->n_targets;
    if (k < 0 || keep < 1)
        return hr_fail(err, errlen, HR_ERR_INVAL, "cannot hold out %ld samples", k);
    if (k == 0) return HR_OK;
    if (all->x8 && !(tail->x8 = malloc((size_t)(k * d)))) goto nomem;
    if (all->xf && !(tail->xf = malloc(sizeof *tail->xf * (size_t)(k * d)))) goto nomem;
    if (all->y && !(tail->y = malloc(sizeof *tail->y * (size_t)k))) goto nomem;
    if (all->t && !(tail->t = malloc(sizeof *tail->t * (size_t)(k * T)))) goto nomem;
    if (all->x8) memcpy(tail->x8, all->x8 + keep * d, (size_t)(k * d));
    if (all->xf) memcpy(tail->xf, all->xf + keep * d, sizeof *tail->xf * (size_t)(k * d));
    if (all->y) memcpy(tail->y, all->y + keep, sizeof *tail->y * (size_t)k);
    if (all->t) memcpy(tail->t, all->t + keep * T, sizeof *tail->t * (size_t)(k * T));
    all->n = keep;
    return HR_OK;
nomem:
    data_set_free(tail);
    return hr_fail(err, errlen, HR_ERR_NOMEM, "out of memory");
}

/* ================================================================ the set a config asks for */

#define DATA_PATH (512 + 64) /* a file name in data_dir: the directory and a file name */

static int is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* DIR/NAME or DIR/NAME.gz, whichever exists (NAME when neither, for the error message). Both
 * is refused, naming both: they may hold different sets (one left from an earlier gen-data with
 * or without --gzip), and the images and labels are picked each on its own. */
static hr_status pick(char *out, size_t len, const char *dir, const char *name, char *err,
                      size_t errlen) {
    char gz[DATA_PATH];
    snprintf(gz, sizeof gz, "%s/%s.gz", dir, name);
    snprintf(out, len, "%s/%s", dir, name);
    if (!exists(gz)) return HR_OK;
    if (exists(out))
        return hr_fail(err, errlen, HR_ERR_DATA,
                       "%s and %s both exist, and either may be the data set meant (expected one "
                       "of them: remove the other, e.g. a stale copy that hetring gen-data wrote "
                       "with or without --gzip)",
                       out, gz);
    snprintf(out, len, "%s", gz);
    return HR_OK;
}

/* The model is built for the training set's sample shape, and the held-out set is gathered
 * into the same buffers: its samples must have that shape. `train_file` and `eval_file` name
 * the sets in the message. */
static hr_status check_eval_shape(const data_set *train, const data_set *eval,
                                  const char *train_file, const char *eval_file, char *err,
                                  size_t errlen) {
    if (eval->n == 0 || (eval->c == train->c && eval->h == train->h && eval->w == train->w))
        return HR_OK;
    return hr_fail(err, errlen, HR_ERR_DATA,
                   "%s: size mismatch: held-out samples of %dx%dx%d, but the training samples in "
                   "%s are %dx%dx%d (expected the held-out files of the same dataset)",
                   eval_file, eval->h, eval->w, eval->c, train_file, train->h, train->w, train->c);
}

/* Set `s` (`set`: "training" or "held-out", its files `file`, which the run would `use`) cut to
 * its first n samples when the key (`key`, given at `at`; "" not given) asks for them; more than
 * it holds is refused. */
static hr_status take_first(data_set *s, const char *set, const char *use, const char *file,
                            const char *key, long n, const char *at, char *err, size_t errlen) {
    if (!at[0] || n == s->n) return HR_OK;
    if (n > s->n)
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "%s: %s = %ld, but the %s set %s holds %ld samples (expected %s <= %ld, or "
                       "no %s to %s all of them)",
                       at, key, n, set, file, s->n, key, s->n, key, use);
    s->n = n; /* its first samples; the buffers keep their size */
    return HR_OK;
}

/* A held-out file's set cut to its first eval_samples when the key was given. */
static hr_status take_eval(data_set *eval, const data_config *c, const char *file, char *err,
                           size_t errlen) {
    return take_first(eval, "held-out", "evaluate on", file, "eval_samples", c->eval_samples,
                      c->eval_at, err, errlen);
}

/* The training set holds samples; a held-out set may be empty (as eval_samples = 0 makes it),
 * in every format. `what` names the training files. */
static hr_status check_train(const data_set *train, const char *what, char *err, size_t errlen) {
    if (train->n > 0) return HR_OK;
    return hr_fail(err, errlen, HR_ERR_DATA,
                   "%s: no training samples (expected at least one; only the held-out set may be "
                   "empty)",
                   what);
}

/* The training set (its files `what`) cut to its first samples when the key was given. */
static hr_status take_train(data_set *train, const data_config *c, const char *what, char *err,
                            size_t errlen) {
    return take_first(train, "training", "train on", what, "samples", c->samples, c->samples_at,
                      err, errlen);
}

/* One CSV file: its last rows are held out, eval_samples of them; a fifth of the file at most,
 * an error when the key asks for more. */
static hr_status split_csv(data_set *train, data_set *eval, const data_config *c, const char *file,
                           char *err, size_t errlen) {
    long cap = train->n / 5, k = c->eval_samples < cap ? c->eval_samples : cap;
    if (c->eval_at[0] && c->eval_samples > cap)
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "%s: eval_samples = %ld, but %s has %ld rows and at most a fifth of them, "
                       "%ld, are held out (expected eval_samples <= %ld, or a directory with "
                       "train.csv and test.csv)",
                       c->eval_at, c->eval_samples, file, train->n, cap, cap);
    return data_split_tail(train, eval, k, err, errlen);
}

hr_status data_load(data_set *train, data_set *eval, const data_config *c, uint64_t seed, char *err,
                    size_t errlen) {
    memset(train, 0, sizeof *train);
    memset(eval, 0, sizeof *eval);
    const char *dir = c->dir ? c->dir : "";
    data_kind kind = c->kind;
    if (kind == DATA_SYNTHETIC || kind == DATA_SYNTHETIC_RGB || kind == DATA_SYNTHETIC_REGRESSION) {
        /* a set this process cannot hold is refused, naming the key, rather than written page
         * by page until the kernel kills the node */
        const double bytes = data_synthetic_bytes(kind, c->samples + c->eval_samples),
                     have = hr_memory_bytes();
        if (have > 0 && bytes > have)
            return hr_fail(err, errlen, HR_ERR_CONFIG,
                           "%s: [train] samples %ld (and eval_samples %ld) of %s data need %.3g GB "
                           "of memory, more than the %.3g GB this process may use here (expected "
                           "fewer samples)",
                           c->origin, c->samples, c->eval_samples, c->name, bytes / 1e9,
                           have / 1e9);
        return data_synthetic(train, eval, kind, c->samples, c->eval_samples, seed, err, errlen);
    }
    if (!dir[0])
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "%s: dataset = %s needs [train] data_dir (expected the directory of the "
                       "files, e.g. from `hetring gen-data`)",
                       c->origin, c->name);
    hr_status st = HR_OK;
    char a[DATA_PATH], b[DATA_PATH], ta[DATA_PATH]; /* held-out files; training images */
    snprintf(ta, sizeof ta, "%s", dir);
    snprintf(a, sizeof a, "%s", dir);
    if (kind == DATA_MNIST) {
        HR_CHECK_GOTO(pick(ta, sizeof ta, dir, "train-images-idx3-ubyte", err, errlen), st, fail);
        HR_CHECK_GOTO(pick(b, sizeof b, dir, "train-labels-idx1-ubyte", err, errlen), st, fail);
        HR_CHECK_GOTO(data_load_idx(train, ta, b, err, errlen), st, fail);
        HR_CHECK_GOTO(check_train(train, ta, err, errlen), st, fail);
        HR_CHECK_GOTO(take_train(train, c, ta, err, errlen), st, fail);
        HR_CHECK_GOTO(pick(a, sizeof a, dir, "t10k-images-idx3-ubyte", err, errlen), st, fail);
        HR_CHECK_GOTO(pick(b, sizeof b, dir, "t10k-labels-idx1-ubyte", err, errlen), st, fail);
        HR_CHECK_GOTO(data_load_idx(eval, a, b, err, errlen), st, fail);
        HR_CHECK_GOTO(take_eval(eval, c, a, err, errlen), st, fail);
    } else if (kind == DATA_CIFAR10) {
        char names[5][DATA_PATH];
        const char *files[5];
        int nf = 0;
        for (int i = 1; i <= 5; i++) {
            snprintf(names[nf], sizeof names[nf], "%s/data_batch_%d.bin", dir, i);
            if (i > 1 && !exists(names[nf])) break;
            files[nf] = names[nf];
            nf++;
        }
        for (int i = nf + 2; i <= 5; i++) { /* a later batch after the missing one: a gap */
            snprintf(b, sizeof b, "%s/data_batch_%d.bin", dir, i);
            if (!exists(b)) continue;
            st = hr_fail(err, errlen, HR_ERR_DATA,
                         "%s is missing, but %s exists (expected data_batch_1.bin, "
                         "data_batch_2.bin, ... with none left out: is the copy incomplete?)",
                         names[nf], b);
            goto fail;
        }
        HR_CHECK_GOTO(data_load_cifar(train, files, nf, err, errlen), st, fail);
        if (nf > 1)
            snprintf(ta, sizeof ta, "%s/data_batch_1.bin .. data_batch_%d.bin", dir, nf);
        else
            snprintf(ta, sizeof ta, "%s", files[0]);
        HR_CHECK_GOTO(check_train(train, ta, err, errlen), st, fail);
        HR_CHECK_GOTO(take_train(train, c, ta, err, errlen), st, fail);
        snprintf(a, sizeof a, "%s/test_batch.bin", dir);
        files[0] = a;
        HR_CHECK_GOTO(data_load_cifar(eval, files, 1, err, errlen), st, fail);
        HR_CHECK_GOTO(take_eval(eval, c, a, err, errlen), st, fail);
    } else if (kind == DATA_CSV) {
        int regression = c->csv_regression;
        if (is_dir(dir)) {
            snprintf(ta, sizeof ta, "%s/train.csv", dir);
            snprintf(a, sizeof a, "%s/test.csv", dir);
            HR_CHECK_GOTO(data_load_csv(train, ta, regression, err, errlen), st, fail);
            HR_CHECK_GOTO(check_train(train, ta, err, errlen), st, fail);
            HR_CHECK_GOTO(take_train(train, c, ta, err, errlen), st, fail);
            HR_CHECK_GOTO(data_load_csv(eval, a, regression, err, errlen), st, fail);
            HR_CHECK_GOTO(take_eval(eval, c, a, err, errlen), st, fail);
        } else {
            HR_CHECK_GOTO(data_load_csv(train, dir, regression, err, errlen), st, fail);
            HR_CHECK_GOTO(check_train(train, dir, err, errlen), st, fail);
            HR_CHECK_GOTO(split_csv(train, eval, c, dir, err, errlen), st, fail);
            HR_CHECK_GOTO(take_train(train, c, dir, err, errlen), st, fail);
        }
        if (!regression) { /* one class count for both splits */
            int k = train->n_classes > eval->n_classes ? train->n_classes : eval->n_classes;
            train->n_classes = eval->n_classes = k;
        }
        if (train->d != eval->d && eval->n > 0) {
            st = hr_fail(err, errlen, HR_ERR_DATA,
                         "%s: train.csv has %ld features but test.csv has %ld", dir, train->d,
                         eval->d);
            goto fail;
        }
    } else {
        return hr_fail(err, errlen, HR_ERR_CONFIG, "unknown dataset %d", (int)kind);
    }
    HR_CHECK_GOTO(check_eval_shape(train, eval, ta, a, err, errlen), st, fail);
    HR_INFO(DATA, "loaded %s from %s: %ld training and %ld held-out samples of %dx%dx%d", c->name,
            dir, train->n, eval->n, train->h, train->w, train->c);
    return HR_OK;
fail:
    data_set_free(train);
    data_set_free(eval);
    return st;
}

/* ================================================================ gathering */
