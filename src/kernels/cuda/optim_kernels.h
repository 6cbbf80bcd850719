/*
 * The launchers of optim.cu (the optimizers' fused update, clip_grad_norm's sum of squares,
 * non-finite test and scaling), callable from C (cuda_routines.c). Each queues on `stream` (a
 * cudaStream_t) and returns 0 or the cudaError_t of the launch.
 */
#ifndef DT_KERNELS_CUDA_OPTIM_KERNELS_H
#define DT_KERNELS_CUDA_OPTIM_KERNELS_H

#include <stdint.h>

#include "kernels/math/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Blocks of the sum of squares at most: its scratch holds this many doubles. */
#define DT_CUDA_SQUARES_MAX_BLOCKS 1024

/* p, s0, s1 (NULL when unused) updated by u with gradient g, count elements. */
int dt__cuda_launch_optim_update(void *stream, const dt_optim_update *u, float *p, const float *g,
                                 float *s0, float *s1, int64_t count);
/* partial[0] = sum x[k]^2 in double; partial: DT_CUDA_SQUARES_MAX_BLOCKS doubles of device
 * memory. */
int dt__cuda_launch_sum_squares(void *stream, const float *x, int64_t count, double *partial);
/* *flag (an int of device memory) = whether some x[k] is NaN or infinite. */
int dt__cuda_launch_any_nonfinite(void *stream, const float *x, int64_t count, int *flag);
/* x[k] *= c. */
int dt__cuda_launch_scale(void *stream, float *x, int64_t count, float c);

#ifdef __cplusplus
}
#endif

#endif /* DT_KERNELS_CUDA_OPTIM_KERNELS_H */
