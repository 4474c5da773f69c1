/*
 * fuzz_idx.c: the MNIST IDX loader (data_load_idx), image and label file together.
 *
 * Input: u16 little-endian k, then k bytes of the image file (fewer if the input is shorter),
 * then the label file. Either file may be gzipped, as the loader accepts. Seeds: corpus/idx,
 * written by data_write_idx (gen_seeds).
 */
#include "base/hr_log.h"
#include "tests/fuzz/fuzz.h"
#include "trainer/data_io.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    fuzz_quiet();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    size_t k = (size_t)data[0] | (size_t)data[1] << 8;
    if (k > size - 2) k = size - 2;
    const char *images = fuzz_file(0, data + 2, k);
    const char *labels = fuzz_file(1, data + 2 + k, size - 2 - k);
    char err[HR_ERRLEN];
    data_set ds;
    if (data_load_idx(&ds, images, labels, err, sizeof err) == HR_OK) data_set_free(&ds);
    return 0;
}
