/*
 * fuzz_cifar.c: the CIFAR-10 binary loader (data_load_cifar). Input: one batch file, given
 * to the loader twice (as data_batch_1 and _2 would be). Seeds: corpus/cifar, written by
 * data_write_cifar (gen_seeds).
 */
#include "base/hr_log.h"
#include "tests/fuzz/fuzz.h"
#include "trainer/data_io.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    fuzz_quiet();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file(0, data, size);
    const char *files[2] = {path, path};
    char err[HR_ERRLEN];
    data_set ds;
    if (data_load_cifar(&ds, files, 2, err, sizeof err) == HR_OK) data_set_free(&ds);
    return 0;
}
