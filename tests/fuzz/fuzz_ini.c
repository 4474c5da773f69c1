/*
 * fuzz_ini.c: the INI reader. The input is the whole file: cfg_load reads, validates and
 * fills the typed config, then cfg_free releases it. Seeds: tests/conf/good, tests/conf/bad,
 * conf/examples and corpus/ini.
 */
#include "base/hr_log.h"
#include "conf/cfg.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    fuzz_quiet(); /* the reader warns on some good files */
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file(0, data, size);
    char err[HR_ERRLEN];
    cfg c;
    cfg_init(&c);
    (void)cfg_load(&c, path, err, sizeof err);
    cfg_free(&c);
    return 0;
}
