/*
 * nccl_fake.h: the recording fake of the NCCL operations (nccl_fake.c), for the fault hooks
 * (hr_fault.c's hr_fault_fake_nccl). Defined only where hr_nccl_fake is linked: the hooks
 * variant of the fault hooks, never libhetring or the installed hetring.
 */
#ifndef HR_NCCL_FAKE_H
#define HR_NCCL_FAKE_H

#include "cluster/nccl_path.h"

extern const nccl_path_ops nccl_fake_ops;

#endif
