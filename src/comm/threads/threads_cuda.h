/* The reduction kernel of the threads backend's CUDA mover (threads_cuda_reduce.cu), in C so
 * that threads_cuda.c (C, the mover) can launch it. A CUDA build only. */
#ifndef DT_COMM_THREADS_CUDA_H
#define DT_COMM_THREADS_CUDA_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "dtensor/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Queues on `stream` the element-wise reduction of nsrc buffers of n elements into ndst
 * buffers (every destination gets the result), with the CPU's semantics (comm/reduce.c:
 * bf16/f16 accumulate in f32 and round as the CPU does, integers wrap, bool is or/and, max
 * and min propagate NaN, avg divides by world). Every pointer is device memory the stream's
 * device can address. Each element is read from every source before it is written to any
 * destination, so a destination may be a source (in place). Sources are summed in rank
 * order, as on the CPU, so f32/f64 results equal the CPU's bit for bit. Returns the launch's
 * error (cudaSuccess when queued). */
cudaError_t dt__cuda_reduce_launch(dt_dtype dtype, dt_reduce_op op, int nsrc,
                                   const void *const *src, int ndst, void *const *dst, int64_t n,
                                   int world, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* DT_COMM_THREADS_CUDA_H */
