/* cmd_version.c: `hetring version`, the version and the features of this build. */
#include "cli.h"

#include <stdio.h>
#include <string.h>

int cmd_version(int argc, char **argv) {
    if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        printf("usage: hetring version\n\nPrint the version and the features of this build.\n");
        return CLI_OK;
    }
    printf("hetring %s\n", HR_VERSION);
#ifdef HR_HAVE_CUDA
    printf("cuda: yes (CUDA kernels and the NCCL backend are built)\n");
#else
    printf("cuda: no (built without CUDA; cuda:N devices and the nccl backend are unavailable)\n");
#endif
#ifdef HR_TEST_HOOKS
    printf("test hooks: yes (HETRING_FAULT is honoured)\n");
#else
    printf("test hooks: no\n");
#endif
    return CLI_OK;
}
