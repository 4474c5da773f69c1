/*
 * fuzz_csv.c: the CSV loader (data_load_csv). Input: one byte whose low bit asks for a
 * regression file (first column a target, not a label), then the file. Seeds: corpus/csv,
 * written by data_write_csv (gen_seeds), and a few hand-made lines.
 */
#include "base/hr_log.h"
#include "tests/fuzz/fuzz.h"
#include "trainer/data_io.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    fuzz_quiet();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const char *path = fuzz_file(0, data + 1, size - 1);
    char err[HR_ERRLEN];
    data_set ds;
    if (data_load_csv(&ds, path, data[0] & 1, err, sizeof err) == HR_OK) data_set_free(&ds);
    return 0;
}
