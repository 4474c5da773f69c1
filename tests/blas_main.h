/*
 * blas_main.h: the first call of a test program that trains, as in hetring's own main: the BLAS
 * kernels are chosen, and the program run again with them where they differ from OpenBLAS's
 * pick, before anything else runs (trainer/blas_pick.h). So a test trains on the kernels that
 * hetring's processes run on the same machine, and never switches them in a running process.
 */
#ifndef HR_TEST_BLAS_MAIN_H
#define HR_TEST_BLAS_MAIN_H

#include "trainer/blas_pick.h"

#include <stdio.h>
#include <stdlib.h>

static inline void test_blas_main(char **argv) {
    char err[HR_ERRLEN];
    if (blas_pick_main(argv, err, sizeof err) != HR_OK) {
        fprintf(stderr, "%s\n", err);
        exit(2);
    }
}

#endif
