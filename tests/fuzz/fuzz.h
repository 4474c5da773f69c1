/*
 * fuzz.h: what every fuzz target shares.
 *
 * A target is one libFuzzer entry point, LLVMFuzzerTestOneInput, that hands its input to one
 * parser through the parser's public API and must return without a sanitizer report, whatever
 * the input. With HETRING_FUZZ=ON (clang) a target links libFuzzer; otherwise it links
 * replay.c, a small main that runs files (a seed corpus, or a crash file) through the same
 * entry point, so every build exercises the seeds.
 */
#ifndef HR_FUZZ_H
#define HR_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* Optional, once before the first input (libFuzzer calls it too). */
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* Log errors only: a parser's warnings on odd inputs would drown the fuzzer's output. */
void fuzz_quiet(void);

/* Write `n` bytes to a file of this process (created on first use in $TMPDIR, removed at
 * exit; `slot` picks one of 4) and return its path. Aborts when the disk refuses. */
const char *fuzz_file(int slot, const void *data, size_t n);

#endif
