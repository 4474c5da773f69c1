/* cmd_version.c: `hetring version`, the version, the features of this build, the BLAS library
 * and kernels in use and, in a CUDA build, the GPU libraries a GPU node would load, with their
 * versions (each opened, asked and closed again). */
#include "cli/cli.h"
#include "cluster/hr_fault.h"
#include "trainer/blas_pick.h"
#ifdef HR_HAVE_CUDA
#include "ring/nccl/nccl_comm.h"
#include "trainer/cuda/cuda_layers.h"
#endif

#include <stdio.h>
#include <string.h>

int cmd_version(int argc, char **argv) {
    if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        printf("usage: hetring version\n\n"
               "Print the version, the features of this build, the BLAS kernels in use and, in a\n"
               "CUDA build, the GPU libraries a GPU node would load and their versions.\n"
               "HETRING_BLAS_CORETYPE=auto|off|NAME chooses the kernels (README, BLAS kernels).\n");
        return CLI_OK;
    }
    if (argc > 1) return cli_usage_error("version", "unexpected argument '%s'", argv[1]);
    printf("hetring %s\n", HR_VERSION);
    char blas[512];
    blas_pick_describe(blas, sizeof blas); /* main chose the kernels */
    printf("%s\n", blas);
#ifdef HR_HAVE_CUDA
    char libs[2048], nccl[HR_ERRLEN + 64];
    cuda_libs_describe(libs, sizeof libs); /* each opened, asked and closed: none stays */
    nccl_lib_describe(nccl, sizeof nccl);
    printf("cuda: yes (CUDA kernels and the NCCL backend are built; the libraries below are\n"
           "loaded only by a node with device = cuda:N, NCCL only when a view chooses it)\n"
           "%s\n%s\n",
           libs, nccl);
#else
    printf("cuda: no (built without CUDA; cuda:N devices and the nccl backend are unavailable)\n");
#endif
    if (hr_fault_hooks_built())
        printf("test hooks: yes (HETRING_FAULT is honoured)\n");
    else
        printf("test hooks: no\n");
    return CLI_OK;
}
