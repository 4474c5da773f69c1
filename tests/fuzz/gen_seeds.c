/*
 * gen_seeds.c: writes the seed corpora of the file-format targets with the trainer's own
 * writers, so the seeds are files the project itself produces.
 *
 *   fuzz_gen_seeds DIR   writes DIR/{idx,cifar,csv,ckpt}/ (corpus/ in this folder was made so)
 *
 * IDX seeds are u16 k | image file (k bytes) | label file, as fuzz_idx.c reads them; CSV seeds
 * start with fuzz_csv.c's mode byte. The handshake and frame seeds are recorded by their
 * targets (FUZZ_RECORD, see fuzz_handshake.c and fuzz_frame.c).
 */
#include "tests/fuzz/fuzz_seeds.h"
#include "trainer/ckpt.h"
#include "trainer/data_io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[512];

static void die(const char *what, const char *err) {
    fprintf(stderr, "gen_seeds: %s: %s\n", what, err);
    exit(1);
}

static uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) die(path, "cannot open");
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*n + 1);
    if (fread(b, 1, *n, f) != *n) die(path, "short read");
    fclose(f);
    return b;
}

static void put(const char *sub, const char *name, const void *a, size_t na, const void *b,
                size_t nb) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", g_dir, sub);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/%s", g_dir, sub, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(a, 1, na, f) != na || (nb && fwrite(b, 1, nb, f) != nb) || fclose(f) != 0)
        die(path, "cannot write");
}

/* A tiny one-channel image set: n images of h x w, labels 0..9. */
static data_set tiny_set(long n, int c, int h, int w) {
    data_set ds = {.n = n, .c = c, .h = h, .w = w, .d = (long)c * h * w, .n_classes = 10};
    ds.x8 = malloc((size_t)(n * ds.d));
    ds.y = malloc(sizeof(int32_t) * (size_t)n);
    for (long i = 0; i < n * ds.d; i++) ds.x8[i] = (uint8_t)(i * 37);
    for (long i = 0; i < n; i++) ds.y[i] = (int32_t)(i % 10);
    return ds;
}

static void idx_seed(const data_set *ds, int gz, const char *name) {
    char err[HR_ERRLEN], img[600], lab[600];
    snprintf(img, sizeof img, "%s/tmp.img", g_dir);
    snprintf(lab, sizeof lab, "%s/tmp.lab", g_dir);
    if (data_write_idx(ds, img, lab, gz, err, sizeof err) != HR_OK) die("idx", err);
    size_t ni, nl;
    uint8_t *bi = slurp(img, &ni), *bl = slurp(lab, &nl);
    uint8_t *in = malloc(2 + ni);
    in[0] = (uint8_t)ni, in[1] = (uint8_t)(ni >> 8);
    memcpy(in + 2, bi, ni);
    put("idx", name, in, 2 + ni, bl, nl);
    unlink(img), unlink(lab);
    free(bi), free(bl), free(in);
}

static void file_seed(const char *sub, const char *name, const char *path, uint8_t prefix,
                      int use_prefix) {
    size_t n;
    uint8_t *b = slurp(path, &n);
    put(sub, name, &prefix, use_prefix ? 1 : 0, b, n);
    unlink(path);
    free(b);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    snprintf(g_dir, sizeof g_dir, "%s", argv[1]);
    mkdir(g_dir, 0755);
    char err[HR_ERRLEN], path[600];
    snprintf(path, sizeof path, "%s/tmp.out", g_dir);

    /* IDX: 3 images of 4x4, plain and gzipped; 2 MNIST-sized images */
    data_set small = tiny_set(3, 1, 4, 4), mnist = tiny_set(2, 1, 28, 28);
    idx_seed(&small, 0, "small");
    idx_seed(&small, 1, "small_gz");
    idx_seed(&mnist, 0, "mnist2");
    /* CIFAR-10: one record, and two */
    data_set rgb = tiny_set(2, 3, 32, 32);
    if (data_write_cifar(&rgb, 0, 1, path, err, sizeof err) != HR_OK) die("cifar", err);
    file_seed("cifar", "one", path, 0, 0);
    if (data_write_cifar(&rgb, 0, 2, path, err, sizeof err) != HR_OK) die("cifar", err);
    file_seed("cifar", "two", path, 0, 0);
    /* CSV: classification (pixels as features) and regression */
    if (data_write_csv(&small, path, err, sizeof err) != HR_OK) die("csv", err);
    file_seed("csv", "class", path, 0, 1);
    data_set tr, ev;
    if (data_synthetic(&tr, &ev, DATA_SYNTHETIC_REGRESSION, 4, 1, 2, err, sizeof err) != HR_OK)
        die("synthetic", err);
    if (data_write_csv(&tr, path, err, sizeof err) != HR_OK) die("csv", err);
    file_seed("csv", "regression", path, 1, 1);
    /* checkpoints of FUZZ_CKPT_META's run, and of another run (refused as a mismatch) */
    ckpt_meta m = FUZZ_CKPT_META;
    float params[FUZZ_CKPT_PARAMS], opt[FUZZ_CKPT_PARAMS];
    int64_t split[FUZZ_CKPT_MAX_NODES] = {10, 20, 30, 4};
    for (int i = 0; i < FUZZ_CKPT_PARAMS; i++) params[i] = 0.25f * (float)i, opt[i] = -1.0f;
    if (ckpt_save(path, &m, params, opt, split, NULL, err, sizeof err) != HR_OK) die("ckpt", err);
    file_seed("ckpt", "run", path, 0, 0);
    float resid[FUZZ_CKPT_PARAMS];
    for (int i = 0; i < FUZZ_CKPT_PARAMS; i++) resid[i] = 1e-3f * (float)(i % 7) - 2e-3f;
    ckpt_residual res = {.node = 3, .data = resid};
    if (ckpt_save(path, &m, params, opt, split, &res, err, sizeof err) != HR_OK) die("ckpt", err);
    file_seed("ckpt", "residual", path, 0, 0);
    float q[6] = {0.5f, -0.25f, 1.0f, 0.0f, 2.0f, -1.5f};
    res.q = q, res.n_q = 6;
    if (ckpt_save(path, &m, params, opt, split, &res, err, sizeof err) != HR_OK) die("ckpt", err);
    file_seed("ckpt", "residual_q", path, 0, 0);
    m.n_nodes = 2, m.seed = 43;
    if (ckpt_save(path, &m, params, opt, split, NULL, err, sizeof err) != HR_OK) die("ckpt", err);
    file_seed("ckpt", "other_run", path, 0, 0);
    m = FUZZ_CKPT_META; /* an MLP 4-8 of as many parameters: refused for its shape */
    m.n_shape = 1, m.shape[0][0] = 8, m.shape[1][0] = m.shape[1][1] = 0;
    if (ckpt_save(path, &m, params, opt, split, NULL, err, sizeof err) != HR_OK) die("ckpt", err);
    file_seed("ckpt", "other_layers", path, 0, 0);

    data_set_free(&small), data_set_free(&mnist), data_set_free(&rgb);
    data_set_free(&tr), data_set_free(&ev);
    printf("seeds written under %s\n", g_dir);
    return 0;
}
