/*
 * The optimizers' fused kernels on CUDA (kernels/device_routines.h, registered by
 * cuda_routines.c): one launch per parameter applies kernels/math/optim.h's element update, the
 * CPU's own function, so a float32 step gives the CPU's bits (nvcc --fmad=false); and
 * clip_grad_norm's sum of squares (double, blocks' partial sums then one block summing them in
 * order: deterministic), non-finite test and scaling. Grid-stride loops over 64-bit indices.
 */
#include "kernels/cuda/indexer.cuh"
#include "kernels/cuda/optim_kernels.h"
#include "kernels/math/optim.h"

__global__ void dt_cuda_optim_kernel(dt_optim_update u, float *p, const float *g, float *s0,
                                     float *s1, int64_t count) {
  int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < count; k += step)
    dt__optim_element(&u, &p[k], g[k], s0 ? &s0[k] : nullptr, s1 ? &s1[k] : nullptr);
}

extern "C" int dt__cuda_launch_optim_update(void *stream, const dt_optim_update *u, float *p,
                                            const float *g, float *s0, float *s1, int64_t count) {
  if (count <= 0) return 0;
  dt_cuda_optim_kernel<<<dt_cuda_blocks(count), DT_CUDA_THREADS, 0, (cudaStream_t)stream>>>(
      *u, p, g, s0, s1, count);
  return (int)cudaGetLastError();
}

/* The block's sum of v in a fixed tree (thread 0 gets it). */
static __device__ double block_sum(double v) {
  __shared__ double buf[DT_CUDA_THREADS];
  buf[threadIdx.x] = v;
  __syncthreads();
  for (unsigned width = blockDim.x / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) buf[threadIdx.x] += buf[threadIdx.x + width];
    __syncthreads();
  }
  return buf[0];
}

/* partial[b] = block b's share of sum x^2 (thread t of block b takes k = b * T + t, then
 * strides by the grid). */
__global__ void dt_cuda_squares_kernel(const float *x, int64_t count, double *partial) {
  double s = 0;
  int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < count; k += step)
    s += (double)x[k] * (double)x[k];
  s = block_sum(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

/* partial[0] = the sum of partial[0, n), one block. */
__global__ void dt_cuda_sum_partials_kernel(double *partial, unsigned n) {
  double s = 0;
  for (unsigned b = threadIdx.x; b < n; b += blockDim.x) s += partial[b];
  s = block_sum(s);
  if (threadIdx.x == 0) partial[0] = s;
}

static unsigned squares_blocks(int64_t count) {
  unsigned b = dt_cuda_blocks(count);
  return b < DT_CUDA_SQUARES_MAX_BLOCKS ? b : DT_CUDA_SQUARES_MAX_BLOCKS;
}

extern "C" int dt__cuda_launch_sum_squares(void *stream, const float *x, int64_t count,
                                           double *partial) {
  cudaStream_t s = (cudaStream_t)stream;
  unsigned blocks = squares_blocks(count);
  dt_cuda_squares_kernel<<<blocks, DT_CUDA_THREADS, 0, s>>>(x, count, partial);
  dt_cuda_sum_partials_kernel<<<1, DT_CUDA_THREADS, 0, s>>>(partial, blocks);
  return (int)cudaGetLastError();
}

/* *flag = 1 when some element is NaN or infinite (flag zeroed before). */
__global__ void dt_cuda_nonfinite_kernel(const float *x, int64_t count, int *flag) {
  int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < count; k += step)
    if (!isfinite(x[k])) *flag = 1;
}

extern "C" int dt__cuda_launch_any_nonfinite(void *stream, const float *x, int64_t count,
                                             int *flag) {
  cudaStream_t s = (cudaStream_t)stream;
  cudaError_t e = cudaMemsetAsync(flag, 0, sizeof *flag, s);
  if (e) return (int)e;
  if (count > 0)
    dt_cuda_nonfinite_kernel<<<dt_cuda_blocks(count), DT_CUDA_THREADS, 0, s>>>(x, count, flag);
  return (int)cudaGetLastError();
}

__global__ void dt_cuda_scale_kernel(float *x, int64_t count, float c) {
  int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < count; k += step) x[k] *= c;
}

extern "C" int dt__cuda_launch_scale(void *stream, float *x, int64_t count, float c) {
  if (count <= 0) return 0;
  dt_cuda_scale_kernel<<<dt_cuda_blocks(count), DT_CUDA_THREADS, 0, (cudaStream_t)stream>>>(
      x, count, c);
  return (int)cudaGetLastError();
}
