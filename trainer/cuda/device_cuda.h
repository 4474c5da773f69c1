/*
 * device_cuda.h: the CUDA implementation of the device table (trainer/device.h), for
 * trainer/device.c, which makes it device_cuda_ops in builds with CUDA.
 */
#ifndef HR_DEVICE_CUDA_H
#define HR_DEVICE_CUDA_H

#include "trainer/device.h"

#include <stddef.h>

/* The table of device_cuda.c. */
extern const device_ops device_cuda_impl;

/* The CUDA devices this process can use; 0 with the reason in `why` when none, -1 with the
 * library and what dlopen or its version check said when the GPU libraries cannot be used
 * (cuda_libs_load: they are loaded here, at a GPU node's start-up, and kept). */
int device_cuda_count(char *why, size_t len);

#endif
