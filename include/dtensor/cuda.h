/*
 * libdtensor — NVIDIA GPUs: the CUDA runtime as the library uses it.
 *
 * Tensors live on a GPU when their device is {DT_DEVICE_CUDA, index} (dt_empty_ex and the
 * other factories' options, dt_to_device). This header adds what a user needs around them:
 * how many GPUs there are, waiting for queued work, and the caching allocator's figures.
 *
 * Builds: every function exists in every build. A build without CUDA (the default;
 * -DDT_WITH_CUDA=ON adds it) answers DT_ERR_UNSUPPORTED and says so in dt_last_error(). A
 * CUDA build on a machine without a GPU or without a driver counts 0 devices, and every
 * function that needs a device answers DT_ERR_UNSUPPORTED saying "no CUDA device" and why
 * (the CUDA runtime's reason). Nothing here aborts.
 *
 * Streams: every thread has its own current stream per device (taken from a per-device pool
 * the first time the thread uses the device, returned when the thread exits). Ops enqueue
 * their kernels on the calling thread's stream and return without waiting; the host waits
 * only where it must read: a copy to the CPU, a scalar result, communication, and
 * dt_cuda_synchronize. A tensor written on one thread and read on another needs a
 * dt_cuda_synchronize by the writer in between (as with PyTorch's streams).
 */
#ifndef DTENSOR_CUDA_H
#define DTENSOR_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtensor/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The number of CUDA devices this process sees, in *out. A CUDA build without a usable GPU
 * or driver gives 0 and DT_OK (dt_last_error() is not set; dt_cuda_is_available is false).
 * DT_ERR_INVALID for a NULL out; DT_ERR_UNSUPPORTED (and *out = 0) in a build without CUDA. */
DT_API dt_status dt_cuda_device_count(int *out);

/* True when this build has CUDA and at least one device is present. Never fails. */
DT_API bool dt_cuda_is_available(void);

/* Waits until every operation queued on device `device` (by any thread) has finished, and
 * reports an error a kernel raised asynchronously. device is an index below
 * dt_cuda_device_count, or -1 for every device. DT_ERR_INVALID for a bad index,
 * DT_ERR_UNSUPPORTED without CUDA or without a device, DT_ERR_INTERNAL with the CUDA
 * runtime's error name when the device reports one. */
DT_API dt_status dt_cuda_synchronize(int device);

/* The caching allocator's figures for one device, in bytes and counts. Block sizes are the
 * rounded sizes the allocator hands out (512-byte multiples), not the requested ones. */
typedef struct dt_cuda_allocator_stats {
  size_t allocated;       /* bytes in blocks that tensors hold now */
  size_t reserved;        /* bytes held from cudaMalloc (segments), in use or cached */
  size_t peak_allocated;  /* the most `allocated` has been since start or the last reset */
  size_t peak_reserved;   /* the most `reserved` has been since start or the last reset */
  uint64_t n_blocks;      /* blocks tensors hold now */
  uint64_t n_allocs;      /* allocations served, cached or not */
  uint64_t n_cuda_malloc; /* cudaMalloc calls that succeeded (new segments) */
  uint64_t n_cuda_free;   /* cudaFree calls (segments given back: dt_cuda_empty_cache, OOM) */
  uint64_t n_oom_retries; /* allocations that failed, emptied the cache and tried again */
  uint64_t n_ooms;        /* allocations that failed even after emptying the cache */
} dt_cuda_allocator_stats;

/* Copies device `device`'s allocator figures into *out. DT_ERR_INVALID for a NULL out or a
 * bad index, DT_ERR_UNSUPPORTED without CUDA or without a device. */
DT_API dt_status dt_cuda_memory_stats(int device, dt_cuda_allocator_stats *out);

/* Sets peak_allocated and peak_reserved of device `device` (-1: every device) to the
 * current figures. Errors as dt_cuda_memory_stats. */
DT_API dt_status dt_cuda_reset_peak_memory_stats(int device);

/* Gives every cached segment that no tensor uses back to the driver (cudaFree), for device
 * `device` or every device (-1). Memory that tensors hold stays. Waits for the device first
 * (cudaFree does). Errors as dt_cuda_synchronize. */
DT_API dt_status dt_cuda_empty_cache(int device);

/* Whether f32 GEMMs (mm, bmm, matmul, addmm, linear) may use TF32 tensor cores: about 10
 * bits of mantissa in the products, several times faster on sm_80 and later. Off by default,
 * so that results match the CPU's within f32 rounding (PyTorch's
 * torch.backends.cuda.matmul.allow_tf32, also off by default). The setting is the process's
 * and applies to GEMMs enqueued after the call. DT_ERR_UNSUPPORTED in a build without CUDA;
 * a CUDA build without a device accepts it. */
DT_API dt_status dt_cuda_set_allow_tf32(bool allow);

/* The current TF32 setting into *out (false in a build without CUDA, which also answers
 * DT_ERR_UNSUPPORTED). DT_ERR_INVALID for a NULL out. */
DT_API dt_status dt_cuda_get_allow_tf32(bool *out);

#ifdef __cplusplus
}
#endif

#endif /* DTENSOR_CUDA_H */
