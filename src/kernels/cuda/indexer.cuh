/*
 * The strided N-d indexer of the CUDA kernels: a launch over the elements of an output shape
 * with up to DT_CUDA_MAX_OPERANDS operands, each with its byte strides through that shape
 * (0 on broadcast dims). Dims that every operand steps through as one run are merged first
 * (a contiguous tensor is one dim), and when every offset fits, the index arithmetic runs in
 * 32-bit integers (a GPU divides 32-bit integers several times faster than 64-bit ones).
 */
#ifndef DT_KERNELS_CUDA_INDEXER_CUH
#define DT_KERNELS_CUDA_INDEXER_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/dims.h"
#include "tensor/element.h"

#define DT_CUDA_MAX_OPERANDS 4
#define DT_CUDA_THREADS 256

/* Bytes per element of a dtype (dtensor/tensor.h's table, on both sides). */
static inline __host__ __device__ int dt_cuda_esize(int dtype) {
  switch (dtype) {
  case DT_F64:
  case DT_I64: return 8;
  case DT_F32:
  case DT_I32: return 4;
  case DT_BF16:
  case DT_F16: return 2;
  default: return 1;
  }
}

static inline __host__ __device__ bool dt_cuda_floating(int dtype) {
  return dtype == DT_F32 || dtype == DT_F64 || dtype == DT_BF16 || dtype == DT_F16;
}

/* A few dims of an operand (kernels/dims.h), walked row-major on the device: the offset of the
 * linear-th position, in the strides' unit. */
struct dt_cuda_dims : dt_dims {
  __device__ __forceinline__ int64_t offset(int64_t linear) const {
    int64_t off = 0;
    for (int d = n - 1; d >= 0; d--) {
      off += (linear % shape[d]) * stride[d];
      linear /= shape[d];
    }
    return off;
  }
};

/* The dims [from, to) of t except `skip` (-1: none), with t's element strides, unmerged. */
static inline dt_cuda_dims dt_cuda_dims_of(const dt_cuda_ref *t, int from, int to, int skip) {
  dt_cuda_dims w;
  w.n = 0;
  for (int d = from; d < to; d++) {
    if (d == skip) continue;
    w.shape[w.n] = t->shape[d];
    w.stride[w.n] = t->strides[d];
    w.n++;
  }
  return w;
}

/* The merged iteration space on the host. */
struct dt_cuda_space {
  int ndim, nops;
  int64_t numel;
  int64_t shape[DT_CUDA_MAX_DIMS];
  int64_t strides[DT_CUDA_MAX_OPERANDS][DT_CUDA_MAX_DIMS]; /* bytes */
  char *base[DT_CUDA_MAX_OPERANDS];
};

/* Builds the space of ops[0]'s shape with every operand (NULL: a placeholder with no memory,
 * strides 0); operands with fewer dims align at the right, size-1 dims broadcast. */
static inline void dt_cuda_space_init(dt_cuda_space *s, int nops, const dt_cuda_ref *const *ops) {
  const dt_cuda_ref *o = ops[0];
  s->ndim = o->ndim;
  s->nops = nops;
  s->numel = 1;
  for (int d = 0; d < o->ndim; d++) {
    s->shape[d] = o->shape[d];
    s->numel *= o->shape[d];
  }
  for (int k = 0; k < nops; k++) {
    const dt_cuda_ref *t = ops[k];
    s->base[k] = t ? t->data : nullptr;
    int lead = t ? o->ndim - t->ndim : 0;
    int64_t es = t ? dt_cuda_esize(t->dtype) : 0;
    for (int d = 0; d < o->ndim; d++) {
      int td = d - lead;
      bool bc = !t || td < 0 || (t->shape[td] == 1 && o->shape[d] != 1);
      s->strides[k][d] = bc ? 0 : t->strides[td] * es;
    }
  }
  /* drop size-1 dims, then merge dim i into the previous one where every operand allows */
  int n = 0;
  for (int d = 0; d < s->ndim; d++) {
    if (s->shape[d] == 1) continue;
    s->shape[n] = s->shape[d];
    for (int k = 0; k < nops; k++) s->strides[k][n] = s->strides[k][d];
    n++;
  }
  int out = 0;
  for (int d = 1; d < n; d++) {
    bool merge = true;
    for (int k = 0; k < nops; k++)
      merge = merge && s->strides[k][out] == s->strides[k][d] * s->shape[d];
    if (merge) {
      s->shape[out] *= s->shape[d];
      for (int k = 0; k < nops; k++) s->strides[k][out] = s->strides[k][d];
    } else {
      out++;
      s->shape[out] = s->shape[d];
      for (int k = 0; k < nops; k++) s->strides[k][out] = s->strides[k][d];
    }
  }
  s->ndim = n == 0 ? 0 : out + 1;
}

/* Whether every linear index and byte offset of the space fits in int32 (strides are never
 * negative in this library: views only narrow, permute and broadcast). */
static inline bool dt_cuda_space_fits_32(const dt_cuda_space *s) {
  if (s->numel > INT32_MAX) return false;
  for (int k = 0; k < s->nops; k++) {
    int64_t reach = 0;
    for (int d = 0; d < s->ndim; d++) {
      int64_t st = s->strides[k][d] < 0 ? -s->strides[k][d] : s->strides[k][d];
      reach += (s->shape[d] - 1) * st;
    }
    if (reach > INT32_MAX) return false;
  }
  return true;
}

/* The device side: offsets of a linear index, in index type I. */
template <typename I, int N> struct dt_cuda_indexer {
  int ndim;
  I shape[DT_CUDA_MAX_DIMS];
  I strides[N][DT_CUDA_MAX_DIMS];

  __device__ __forceinline__ void offsets(I linear, I *off) const {
#pragma unroll
    for (int k = 0; k < N; k++) off[k] = 0;
    for (int d = ndim - 1; d >= 0; d--) {
      I i = linear % shape[d];
      linear /= shape[d];
#pragma unroll
      for (int k = 0; k < N; k++) off[k] += i * strides[k][d];
    }
  }
};

template <typename I, int N>
static dt_cuda_indexer<I, N> dt_cuda_make_indexer(const dt_cuda_space *s) {
  dt_cuda_indexer<I, N> ix;
  ix.ndim = s->ndim;
  for (int d = 0; d < s->ndim; d++) {
    ix.shape[d] = (I)s->shape[d];
    for (int k = 0; k < N; k++) ix.strides[k][d] = (I)s->strides[k][d];
  }
  return ix;
}

/* Blocks for n elements in a grid-stride loop: enough to fill any current GPU. */
static inline unsigned dt_cuda_blocks(int64_t n) {
  int64_t b = (n + DT_CUDA_THREADS - 1) / DT_CUDA_THREADS;
  if (b > 65536) b = 65536;
  return (unsigned)(b < 1 ? 1 : b);
}

template <int N> struct dt_cuda_ptrs { char *p[N]; };

/* Runs f(ptrs) for every element of the space: ptrs[k] points at operand k's element. I is
 * uint32_t (every offset fits) or int64_t. */
template <typename I, int N, typename F>
__global__ void dt_cuda_elementwise_kernel(dt_cuda_indexer<I, N> ix, dt_cuda_ptrs<N> base, I n,
                                           F f) {
  I step = (I)gridDim.x * blockDim.x;
  for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
    I off[N];
    ix.offsets(i, off);
    char *p[N];
#pragma unroll
    for (int k = 0; k < N; k++) p[k] = base.p[k] + off[k];
    f(p);
  }
}

/* Launches f over the space on stream; the launch's cudaError_t. */
template <int N, typename F>
static int dt_cuda_launch_elementwise(cudaStream_t stream, const dt_cuda_space *s, F f) {
  if (s->numel == 0) return 0;
  dt_cuda_ptrs<N> base;
  for (int k = 0; k < N; k++) base.p[k] = s->base[k];
  unsigned blocks = dt_cuda_blocks(s->numel);
  if (dt_cuda_space_fits_32(s)) {
    dt_cuda_elementwise_kernel<uint32_t, N, F><<<blocks, DT_CUDA_THREADS, 0, stream>>>(
        dt_cuda_make_indexer<uint32_t, N>(s), base, (uint32_t)s->numel, f);
  } else {
    dt_cuda_elementwise_kernel<int64_t, N, F><<<blocks, DT_CUDA_THREADS, 0, stream>>>(
        dt_cuda_make_indexer<int64_t, N>(s), base, s->numel, f);
  }
  return (int)cudaGetLastError();
}

#endif /* DT_KERNELS_CUDA_INDEXER_CUH */
