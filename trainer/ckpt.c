/*
 * ckpt.c: atomic, checksummed checkpoints (see ckpt.h).
 *
 * Layout, little-endian as in memory on the supported machines:
 *   header: magic "HRCKPT\0\1" (8), version u32, crc32 u32 (of all bytes after this field),
 *           ckpt_meta (696; before version 5 its first 48 bytes, without the shape, and before
 *           version 4 its first 40, without n_samples), payload bytes u64
 *   payload: params f32[n], opt_state f32[n], split i64[n_nodes], and in version 2 a residual
 *            block, present or not: node i64, residual f32[n] (the payload's size says which),
 *            and in version 3 after a residual block a Q block, present or not: n_q u64,
 *            Q f32[n_q] (the powersgd wire's)
 */
#include "trainer/ckpt.h"
#include "base/hr_file.h"
#include "base/hr_log.h"
#include "trainer/model.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* 1: no residual block, 2: no Q block, 3: no n_samples, 4: no shape; all still read */
#define CKPT_VERSION 5u
static const char ckpt_magic[8] = {'H', 'R', 'C', 'K', 'P', 'T', 0, 1};

typedef struct {
    char magic[8];
    uint32_t version;
    uint32_t crc;
    ckpt_meta meta;
    uint64_t payload;
} ckpt_header;
_Static_assert(sizeof(ckpt_header) == 720 && offsetof(ckpt_meta, n_samples) == 40 &&
                   offsetof(ckpt_meta, n_shape) == 48 && sizeof(ckpt_meta) == 696,
               "the header as the file holds it, with no padding");
_Static_assert(CKPT_MAX_SHAPE >= MODEL_MAX_LAYERS, "every model's shape must fit a checkpoint");

/* Bytes of ckpt_meta a file of `version` holds: n_samples came with version 4, the shape with
 * version 5. */
static size_t meta_bytes(uint32_t version) {
    return version >= 5   ? sizeof(ckpt_meta)
           : version == 4 ? offsetof(ckpt_meta, n_shape)
                          : offsetof(ckpt_meta, n_samples);
}

static uint32_t crc_more(uint32_t crc, const void *p, size_t n) {
    const unsigned char *b = p;
    while (n) {
        uInt chunk = n > (1u << 30) ? (1u << 30) : (uInt)n;
        crc = (uint32_t)crc32(crc, b, chunk);
        b += chunk, n -= chunk;
    }
    return crc;
}

static int write_all(int fd, const void *p, size_t n) {
    const char *b = p;
    while (n) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        b += w, n -= (size_t)w;
    }
    return 0;
}

/* The file a save of checkpoint `path` writes, in real[0..n): where its symbolic links lead
 * (hr_file_target), so a link to another disk keeps its checkpoint there. */
static hr_status ckpt_target(const char *path, char *real, size_t n, char *err, size_t errlen) {
    if (hr_file_target(path, real, n) == 0) return HR_OK;
    return hr_fail(err, errlen, HR_ERR_IO, "checkpoint %s: cannot follow its link (%s)", path,
                   strerror(errno));
}

hr_status ckpt_prepare(const char *path, char *err, size_t errlen) {
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
        return hr_fail(err, errlen, HR_ERR_IO,
                       "checkpoint %s: not a regular file (expected a file name for the "
                       "checkpoint, e.g. %s/run.ckpt)",
                       path, path);
    char real[4096], tmp[4200];
    HR_CHECK(ckpt_target(path, real, sizeof real, err, errlen));
    hr_file_remove_stale(real, HR_SUB_TRAIN, "checkpoint save");
    int fd = hr_file_tmp_name(tmp, sizeof tmp, real) == 0
                 ? open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)
                 : -1;
    if (fd < 0)
        return hr_fail(err, errlen, HR_ERR_IO,
                       "checkpoint %s: cannot create %s (%s); checked before training (expected "
                       "an existing directory this process may write to)",
                       path, tmp, strerror(errno));
    close(fd);
    unlink(tmp);
    return HR_OK;
}

hr_status ckpt_save(const char *path, const ckpt_meta *meta, const float *params,
                    const float *opt_state, const int64_t *split, const ckpt_residual *res,
                    char *err, size_t errlen) {
    ckpt_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, ckpt_magic, 8);
    h.version = CKPT_VERSION;
    h.meta = *meta;
    size_t np = sizeof(float) * meta->n_params, ns = sizeof(int64_t) * meta->n_nodes;
    const int has_res = res && res->data, has_q = has_res && res->q && res->n_q;
    const size_t nr = has_res ? np : 0, nn = has_res ? sizeof res->node : 0;
    const size_t nq = has_q ? sizeof(float) * (size_t)res->n_q : 0,
                 nqn = has_q ? sizeof res->n_q : 0;
    h.payload = 2 * np + ns + nn + nr + nqn + nq;
    uint32_t crc = crc_more(0, &h.meta, sizeof h - offsetof(ckpt_header, meta));
    crc = crc_more(crc, params, np);
    crc = crc_more(crc, opt_state, np);
    crc = crc_more(crc, split, ns);
    if (has_res) crc = crc_more(crc_more(crc, &res->node, nn), res->data, nr);
    if (has_q) crc = crc_more(crc_more(crc, &res->n_q, nqn), res->q, nq);
    h.crc = crc;

    /* written beside the file the path leads to and renamed over it; never over a device, a
     * FIFO or a directory that took the file's place since ckpt_prepare */
    char real[4096], tmp[4200];
    HR_CHECK(ckpt_target(path, real, sizeof real, err, errlen));
    struct stat sb;
    if (lstat(real, &sb) == 0 && !S_ISREG(sb.st_mode))
        return hr_fail(err, errlen, HR_ERR_IO,
                       "checkpoint %s: %s is not a regular file; not replaced (expected the "
                       "checkpoint file there, or no file)",
                       path, real);
    int fd = hr_file_tmp_name(tmp, sizeof tmp, real) == 0
                 ? open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)
                 : -1;
    if (fd < 0)
        return hr_fail(err, errlen, HR_ERR_IO,
                       "checkpoint %s: cannot create %s (%s); the previous checkpoint, if any, is "
                       "unchanged (expected a directory this process may write to)",
                       path, tmp, strerror(errno));
    int e = 0;
    if (write_all(fd, &h, sizeof h) || write_all(fd, params, np) || write_all(fd, opt_state, np) ||
        write_all(fd, split, ns) || (has_res && write_all(fd, &res->node, nn)) ||
        (has_res && write_all(fd, res->data, nr)) || (has_q && write_all(fd, &res->n_q, nqn)) ||
        (has_q && write_all(fd, res->q, nq)) || fsync(fd))
        e = errno;
    if (close(fd) != 0 && !e) e = errno; /* a file system that reports a full disk at close */
    if (e) {
        unlink(tmp);
        return hr_fail(err, errlen, HR_ERR_IO,
                       "checkpoint %s: write failed (%s); the previous checkpoint, if any, is "
                       "unchanged (expected room for the %llu bytes of a whole new copy beside "
                       "it, which then replaces the old one)",
                       path, strerror(e), (unsigned long long)(sizeof h + h.payload));
    }
    e = hr_file_replace(tmp, real); /* removes tmp itself when it fails */
    if (e)
        return hr_fail(err, errlen, HR_ERR_IO,
                       "checkpoint %s: cannot rename %s into place (%s); the previous checkpoint, "
                       "if any, is unchanged",
                       path, tmp, strerror(e));
    return HR_OK;
}

/* A read that failed (EIO from a disk, a network file system): not the file's fault, so not
 * called truncated or corrupt, whose advice is to delete it. */
static hr_status read_failed(const char *path, const char *what, int e, char *err, size_t errlen) {
    return hr_fail(err, errlen, HR_ERR_IO,
                   "checkpoint %s: read error in the %s (%s); nothing was loaded and the file is "
                   "left as it is (expected a readable disk: the file may well be whole, so keep "
                   "it and try again)",
                   path, what, strerror(e ? e : EIO));
}

static hr_status read_exact(FILE *f, void *p, size_t n, uint32_t *crc, const char *path,
                            const char *what, char *err, size_t errlen) {
    errno = 0;
    size_t got = fread(p, 1, n, f);
    if (got != n && ferror(f)) return read_failed(path, what, errno, err, errlen);
    if (got != n)
        return hr_fail(err, errlen, HR_ERR_DATA,
                       "checkpoint %s is truncated in the %s (%zu of %zu bytes); it is unusable: "
                       "delete it to start over",
                       path, what, got, n);
    *crc = crc_more(*crc, p, n);
    return HR_OK;
}

/* Read and check the header of an open checkpoint: magic, version, and a payload that is what
 * the file holds and that its counts add up to, before anything is allocated for it (a corrupt
 * count never asks for more memory than the file's size). A header before version 4 reads with
 * n_samples 0. */
static hr_status read_header(FILE *f, const char *path, ckpt_header *h, char *err, size_t errlen) {
    const size_t pre = offsetof(ckpt_header, meta);
    memset(h, 0, sizeof *h);
    errno = 0;
    const int whole = fread(h, 1, pre, f) == pre;
    if (!whole && ferror(f)) return read_failed(path, "header", errno, err, errlen);
    if (!whole || memcmp(h->magic, ckpt_magic, 8) != 0)
        return hr_fail(err, errlen, HR_ERR_DATA,
                       "%s is not a hetring checkpoint (wrong magic or too short)", path);
    if (h->version > CKPT_VERSION)
        return hr_fail(err, errlen, HR_ERR_DATA,
                       "checkpoint %s has format version %u, from a newer hetring: this one "
                       "reads versions 1 to %u (expected the hetring that wrote it, or point "
                       "[train] checkpoint elsewhere); the file is left as it is",
                       path, h->version, CKPT_VERSION);
    if (h->version < 1)
        return hr_fail(err, errlen, HR_ERR_DATA,
                       "checkpoint %s is corrupt: its format version is 0 (expected 1 to %u)", path,
                       CKPT_VERSION);
    const size_t mb = meta_bytes(h->version), hb = pre + mb + sizeof h->payload;
    errno = 0;
    if (fread(&h->meta, 1, mb, f) != mb || fread(&h->payload, 1, sizeof h->payload, f) != 8)
        return ferror(f)
                   ? read_failed(path, "header", errno, err, errlen)
                   : hr_fail(err, errlen, HR_ERR_DATA,
                             "%s is not a hetring checkpoint (wrong magic or too short)", path);
    const ckpt_meta *m = &h->meta;
    struct stat fs;
    if (fstat(fileno(f), &fs) != 0 || fs.st_size < (off_t)hb ||
        h->payload != (uint64_t)fs.st_size - hb || m->n_params > h->payload / 8)
        return hr_fail(err, errlen, HR_ERR_DATA,
                       "checkpoint %s is corrupt: its header declares %llu bytes of payload and "
                       "%llu parameters, the file holds %lld bytes",
                       path, (unsigned long long)h->payload, (unsigned long long)m->n_params,
                       (long long)fs.st_size);
    size_t np = sizeof(float) * m->n_params, ns = sizeof(int64_t) * m->n_nodes;
    const uint64_t with_res = 2 * np + ns + sizeof(int64_t) + np; /* version 2's residual block */
    const int q_block = h->version >= 3 && h->payload > with_res + sizeof(uint64_t) &&
                        (h->payload - with_res - sizeof(uint64_t)) % sizeof(float) == 0;
    if (m->n_nodes > 65536 || m->n_shape > CKPT_MAX_SHAPE ||
        (h->payload != 2 * np + ns && (h->version < 2 || (h->payload != with_res && !q_block))))
        return hr_fail(err, errlen, HR_ERR_DATA,
                       "checkpoint %s is corrupt: its header is inconsistent (payload %llu bytes)",
                       path, (unsigned long long)h->payload);
    return HR_OK;
}

/* A shape as its widths where each layer takes the last one's outputs ("784-512-512-10": an
 * mlp, softmax or linreg), else as its weight matrices ("16x75, 32x400, 10x800": a cnn's). */
static void shape_str(const ckpt_meta *m, char *out, size_t n) {
    int chain = 1;
    for (uint32_t i = 1; i < m->n_shape; i++) chain &= m->shape[i][1] == m->shape[i - 1][0];
    size_t o = 0;
    out[0] = 0;
    for (uint32_t i = 0; i < m->n_shape && o < n; i++) {
        const unsigned long long rows = m->shape[i][0], cols = m->shape[i][1];
        const int w = !chain ? snprintf(out + o, n - o, "%s%llux%llu", i ? ", " : "", rows, cols)
                      : i    ? snprintf(out + o, n - o, "-%llu", rows)
                             : snprintf(out + o, n - o, "%llu-%llu", cols, rows);
        o += w > 0 ? (size_t)w : 0;
    }
}

/* Whether both record a shape and the shapes differ. */
static int other_shape(const ckpt_meta *m, const ckpt_meta *expect) {
    if (!m->n_shape || !expect->n_shape) return 0;
    return m->n_shape != expect->n_shape ||
           memcmp(m->shape, expect->shape, sizeof m->shape[0] * m->n_shape) != 0;
}

/* Whether the checkpoint's run (m) is this one (expect): the same model, parameter count, seed
 * and global batch, and the same training-set size and model shape where both say them. */
static hr_status same_run(const char *path, const ckpt_meta *m, const ckpt_meta *expect, char *err,
                          size_t errlen) {
    if (m->n_samples && expect->n_samples && m->n_samples != expect->n_samples)
        return hr_fail(err, errlen, HR_ERR_MISMATCH,
                       "checkpoint %s belongs to another run (trained on %llu samples; this run "
                       "has %llu): every epoch's order depends on the count, so resuming would "
                       "use some samples twice and skip others (expected the same dataset and "
                       "[train] samples, or point [train] checkpoint elsewhere)",
                       path, (unsigned long long)m->n_samples,
                       (unsigned long long)expect->n_samples);
    const int same = m->model == expect->model && m->n_params == expect->n_params &&
                     m->seed == expect->seed && m->global_batch == expect->global_batch;
    if (same && other_shape(m, expect)) { /* as many parameters, in other layers */
        char was[CKPT_MAX_SHAPE * 44], is[CKPT_MAX_SHAPE * 44];
        shape_str(m, was, sizeof was), shape_str(expect, is, sizeof is);
        return hr_fail(err, errlen, HR_ERR_MISMATCH,
                       "checkpoint %s belongs to another run: its model is %s %s, this run's %s "
                       "%s, with as many parameters (%llu) in other layers (expected the same "
                       "[train] layers, or point [train] checkpoint elsewhere)",
                       path, model_kind_name((int)m->model), was,
                       model_kind_name((int)expect->model), is, (unsigned long long)m->n_params);
    }
    if (same) return HR_OK;
    return hr_fail(err, errlen, HR_ERR_MISMATCH,
                   "checkpoint %s belongs to another run (model %s with %llu params, seed "
                   "%llu, global_batch %llu; this run has model %s with %llu params, seed "
                   "%llu, global_batch %llu): point [train] checkpoint elsewhere",
                   path, model_kind_name((int)m->model), (unsigned long long)m->n_params,
                   (unsigned long long)m->seed, (unsigned long long)m->global_batch,
                   model_kind_name((int)expect->model), (unsigned long long)expect->n_params,
                   (unsigned long long)expect->seed, (unsigned long long)expect->global_batch);
}

hr_status ckpt_load(const char *path, ckpt_meta *expect, float *params, float *opt_state,
                    int64_t *split, int max_nodes, ckpt_residual *res, char *err, size_t errlen) {
    /* opened without waiting: a FIFO would hold the node in open() for ever */
    struct stat sb;
    int fd = hr_file_open_read(path, &sb);
    if (fd < 0)
        return hr_fail(err, errlen, HR_ERR_IO, "checkpoint %s: cannot open (%s)", path,
                       strerror(errno));
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return hr_fail(err, errlen, HR_ERR_IO,
                       "checkpoint %s: not a regular file (expected a checkpoint file)", path);
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        close(fd);
        return hr_fail(err, errlen, HR_ERR_IO, "checkpoint %s: cannot open (%s)", path,
                       strerror(e));
    }
    hr_status st = HR_OK;
    ckpt_header h;
    int64_t *sp = NULL;
    float *buf = NULL, *q = NULL;
    st = read_header(f, path, &h, err, errlen);
    if (st != HR_OK) goto out;
    const ckpt_meta *m = &h.meta;
    size_t np = sizeof(float) * m->n_params, ns = sizeof(int64_t) * m->n_nodes;
    const size_t nr = h.payload > 2 * np + ns ? np : 0; /* a residual block (read_header) */
    const uint64_t with_res = 2 * np + ns + sizeof(int64_t) + np;
    const size_t nq = h.payload > with_res ? (size_t)(h.payload - with_res - sizeof(uint64_t)) : 0;
    uint64_t n_q = 0;
    int64_t node = -1;
    /* the header's bytes after the checksum field, as the file holds them */
    uint32_t crc = crc_more(crc_more(0, &h.meta, meta_bytes(h.version)), &h.payload, 8);
    /* read into scratch first: the caller's buffers change only for a verified file */
    buf = malloc(3 * np + 1);
    sp = malloc(ns + 1);
    if (!buf || !sp) {
        st = hr_fail(err, errlen, HR_ERR_NOMEM, "checkpoint %s: out of memory", path);
        goto out;
    }
    HR_CHECK_GOTO(read_exact(f, buf, 2 * np, &crc, path, "parameters", err, errlen), st, out);
    HR_CHECK_GOTO(read_exact(f, sp, ns, &crc, path, "batch split", err, errlen), st, out);
    if (nr) {
        HR_CHECK_GOTO(read_exact(f, &node, sizeof node, &crc, path, "residual", err, errlen), st,
                      out);
        HR_CHECK_GOTO(read_exact(f, (char *)buf + 2 * np, nr, &crc, path, "residual", err, errlen),
                      st, out);
    }
    if (nq) { /* at most the file's size (read_header), allocated only for what it holds */
        HR_CHECK_GOTO(read_exact(f, &n_q, sizeof n_q, &crc, path, "Q", err, errlen), st, out);
        if (n_q != nq / sizeof(float)) {
            st = hr_fail(err, errlen, HR_ERR_DATA,
                         "checkpoint %s is corrupt: its Q says %llu floats, the payload holds %zu",
                         path, (unsigned long long)n_q, nq / sizeof(float));
            goto out;
        }
        if (!(q = malloc(nq))) {
            st = hr_fail(err, errlen, HR_ERR_NOMEM, "checkpoint %s: out of memory", path);
            goto out;
        }
        HR_CHECK_GOTO(read_exact(f, q, nq, &crc, path, "Q", err, errlen), st, out);
    }
    if (fgetc(f) != EOF) {
        st = hr_fail(err, errlen, HR_ERR_DATA,
                     "checkpoint %s is corrupt: bytes after the declared payload", path);
        goto out;
    }
    if (crc != h.crc) {
        st = hr_fail(err, errlen, HR_ERR_DATA,
                     "checkpoint %s is corrupt: checksum mismatch (crc32 %08x, header says %08x); "
                     "refusing to resume from it: delete it to start over",
                     path, crc, h.crc);
        goto out;
    }
    st = same_run(path, m, expect, err, errlen);
    if (st != HR_OK) goto out;
    memcpy(params, buf, np);
    memcpy(opt_state, (char *)buf + np, np);
    if ((int)m->n_nodes <= max_nodes && m->n_nodes == expect->n_nodes) memcpy(split, sp, ns);
    if (res) {
        res->node = nr ? node : -1;
        if (nr && res->data) memcpy(res->data, (char *)buf + 2 * np, nr);
        res->q = q, res->n_q = q ? n_q : 0;
        q = NULL; /* the caller's now */
    }
    expect->iter = m->iter;
    expect->n_nodes = m->n_nodes;
out:
    free(buf);
    free(sp);
    free(q);
    fclose(f);
    return st;
}
