/*
 * fuzz_ckpt.c: the checkpoint reader (ckpt_load), against the run the seeds were saved for
 * (FUZZ_CKPT_META: what gen_seeds passes to ckpt_save).
 *
 * The input is the file. A CRC-32 guards it, and mutations would almost never get past it, so
 * each input is loaded twice: as it is, and with the checksum field (bytes 12-15, ckpt.c's
 * layout) recomputed over the bytes after it, which lets the fuzzer reach the checks made on
 * a well-formed file.
 */
#include "base/hr_log.h"
#include "tests/fuzz/fuzz.h"
#include "tests/fuzz/fuzz_seeds.h"
#include "trainer/ckpt.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    fuzz_quiet();
    return 0;
}

static void load(const uint8_t *data, size_t size) {
    const char *path = fuzz_file(0, data, size);
    ckpt_meta expect = FUZZ_CKPT_META;
    float params[FUZZ_CKPT_PARAMS], opt[FUZZ_CKPT_PARAMS], resid[FUZZ_CKPT_PARAMS];
    int64_t split[FUZZ_CKPT_MAX_NODES];
    char err[HR_ERRLEN];
    ckpt_residual res = {.data = resid};
    (void)ckpt_load(path, &expect, params, opt, split, FUZZ_CKPT_MAX_NODES, &res, err, sizeof err);
    free(res.q); /* a Q block's, allocated by ckpt_load */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    load(data, size);
    if (size < 16) return 0;
    uint8_t *fixed = malloc(size);
    memcpy(fixed, data, size);
    uint32_t crc = (uint32_t)crc32(0, fixed + 16, (uInt)(size - 16));
    for (int i = 0; i < 4; i++) fixed[12 + i] = (uint8_t)(crc >> (8 * i));
    load(fixed, size);
    free(fixed);
    return 0;
}
