/*
 * Device code of the .cu files in src/kernels/cuda/ as the C files call it: plain arguments
 * (pointers, sizes, strides, a stream), no tensor or op types, each declaration with C linkage for
 * nvcc. Every launcher queues its work on `stream` and returns the launch's error (cudaSuccess when
 * queued); errors while the kernel runs surface at the next synchronization.
 */
#ifndef DT_KERNELS_CUDA_LAUNCH_H
#define DT_KERNELS_CUDA_LAUNCH_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#define DT__CUDA_C extern "C"
#else
#define DT__CUDA_C
#endif

/* Dims a strided launch takes (DT_MAX_DIMS of dtensor/tensor.h). */
#define DT__CUDA_MAX_DIMS 8

/* An N-d strided view of device memory: sizes and strides in elements. */
typedef struct dt_cuda_strided {
  int ndim;
  int64_t shape[DT__CUDA_MAX_DIMS];
  int64_t strides[DT__CUDA_MAX_DIMS];
} dt_cuda_strided;

/* dst[i] = src[i] for every index i of the shape they share (src's strides may be 0: a
 * broadcast), elements of elem_size bytes (1, 2, 4 or 8); dst and src do not overlap. n is the
 * element count. cudaErrorInvalidValue for another element size or ndim. */
DT__CUDA_C cudaError_t dt__cuda_launch_copy_strided(char *dst, const dt_cuda_strided *dst_view,
                                                    const char *src,
                                                    const dt_cuda_strided *src_view,
                                                    size_t elem_size, int64_t n,
                                                    cudaStream_t stream);

#endif /* DT_KERNELS_CUDA_LAUNCH_H */
