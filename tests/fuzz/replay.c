/*
 * replay.c: the main of a fuzz target in builds without libFuzzer.
 *
 *   fuzz_x FILE|DIR...   run every file given, and every file of every directory given (in
 *                        name order), through LLVMFuzzerTestOneInput
 *
 * Exit 0 when every input ran, 1 when one could not be read or the list was empty. A crash
 * (or a sanitizer report in a sanitizer build) ends the process, as under libFuzzer, so a
 * crash file saved by a fuzzing run reproduces here with a backtrace under gdb.
 */
#include "tests/fuzz/fuzz.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

__attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv) {
    return 0;
}

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    for (size_t r; buf && (r = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += r;
        if (n == cap) buf = realloc(buf, cap *= 2);
    }
    int bad = !buf || ferror(f);
    fclose(f);
    if (bad) {
        fprintf(stderr, "%s: cannot read\n", path);
        free(buf);
        return -1;
    }
    /* a copy of exactly n bytes, so that ASan sees a read past the input as libFuzzer would */
    uint8_t *in = malloc(n ? n : 1);
    memcpy(in, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(in, n);
    free(in);
    return 0;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Run every regular file of `dir`, in name order; returns the count, or -1. */
static int run_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) {
        perror(dir);
        return -1;
    }
    char **names = NULL;
    size_t n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        names = realloc(names, (n + 1) * sizeof *names);
        names[n] = malloc(strlen(dir) + strlen(e->d_name) + 2);
        sprintf(names[n++], "%s/%s", dir, e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_str);
    int count = 0;
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        if (stat(names[i], &st) == 0 && S_ISREG(st.st_mode)) {
            if (run_file(names[i]) != 0) count = -1;
            if (count >= 0) count++;
        }
        free(names[i]);
    }
    free(names);
    return count;
}

int main(int argc, char **argv) {
    LLVMFuzzerInitialize(&argc, &argv);
    int total = 0, bad = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        int k = stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode) ? run_dir(argv[i])
                                                               : (run_file(argv[i]) ? -1 : 1);
        if (k < 0)
            bad = 1;
        else
            total += k;
    }
    printf("%s: %d inputs ran\n", argv[0], total);
    return bad || total == 0;
}
