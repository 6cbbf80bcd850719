/*
 * uniform_ on CUDA: one thread per element, each computing its element of the library's
 * Philox stream (tensor/philox.h) from the seed and the element's flat index in the global
 * tensor. The CPU fills the same elements with the same functions (tensor/random.c), so a
 * tensor drawn on a GPU equals the CPU's bit for bit, and a shard equals its slice of the
 * whole on either device.
 */
#include "kernels/cuda/indexer.cuh"
#include "tensor/philox.h"

struct dt_cuda_uniform_args {
  char *out;
  int dtype, ndim;
  int64_t n;
  int64_t shape[DT_CUDA_MAX_DIMS];  /* the block's */
  int64_t global[DT_CUDA_MAX_DIMS]; /* the whole tensor's */
  int64_t offset[DT_CUDA_MAX_DIMS]; /* the block's start in it */
  double lo, hi;
  float flo, step, below;
  uint64_t seed;
};

__global__ void dt_cuda_uniform_kernel(dt_cuda_uniform_args a) {
  int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < a.n; e += step) {
    /* the element's global row-major index */
    uint64_t flat = 0, mul = 1;
    int64_t rest = e;
    for (int d = a.ndim - 1; d >= 0; d--) {
      int64_t i = rest % a.shape[d] + a.offset[d];
      rest /= a.shape[d];
      flat += (uint64_t)i * mul;
      mul *= (uint64_t)a.global[d];
    }
    if (a.ndim == 0) flat = (uint64_t)e;
    if (a.dtype == DT_F32) {
      ((float *)a.out)[e] = dt__philox_uniform_f32_at(a.seed, flat, a.flo, a.step, a.below);
    } else {
      dt__philox_store_uniform(a.dtype, a.out + e * dt_cuda_esize(a.dtype),
                               dt__philox_uniform_f64_at(a.seed, flat, a.lo, a.hi), a.lo, a.hi);
    }
  }
}

extern "C" int dt__cuda_launch_uniform(void *stream, const dt_cuda_ref *out, double lo, double hi,
                                       uint64_t seed, int ndim, const int64_t *global_shape,
                                       const int64_t *offset) {
  dt_cuda_uniform_args a;
  memset(&a, 0, sizeof a);
  a.out = out->data;
  a.dtype = out->dtype;
  a.n = 1;
  for (int d = 0; d < out->ndim; d++) a.n *= out->shape[d];
  if (a.n == 0) return 0;
  bool block = global_shape && ndim == out->ndim;
  a.ndim = out->ndim;
  for (int d = 0; d < out->ndim; d++) {
    a.shape[d] = out->shape[d];
    a.global[d] = block ? global_shape[d] : out->shape[d];
    a.offset[d] = block ? offset[d] : 0;
  }
  a.lo = lo;
  a.hi = hi;
  a.seed = seed;
  /* float32's constants exactly as tensor/random.c forms them */
  a.flo = (float)lo;
  a.below = nextafterf((float)hi, (float)lo);
  a.step = (float)(hi - lo) * (1.0f / 16777216.0f);
  dt_cuda_uniform_kernel<<<dt_cuda_blocks(a.n), DT_CUDA_THREADS, 0, (cudaStream_t)stream>>>(a);
  return (int)cudaGetLastError();
}
