/*
 * Reductions on CUDA: sum, mean, max, min (with their indices) over any set of dims, any
 * strides. The input's dims split into kept dims (row-major over the contiguous output) and
 * reduced dims, each class merged on its own as on the CPU (kernels/cpu/reduce.c). Large
 * reductions run one block per output element: each thread accumulates a strided share,
 * then the block combines the shares in a fixed tree (deterministic); small ones run one
 * thread per output element. Accumulation is kernels/math/reduce.h's: floating sums in double
 * with Neumaier compensation, integer sums in wrapping int64, extremes by dt__extreme_better,
 * whose tree choice is the serial scan's (first NaN, else first extreme).
 */
#include "kernels/cuda/indexer.cuh"
#include "kernels/math/reduce.h"

struct dt_cuda_reduce_args {
  dt_cuda_reduce_kind kind;
  int dtype, out_dtype;
  bool floating;
  dt_cuda_dims kept, reduced;
  int64_t n_out, count;
  const char *in;
  char *values;
  int64_t *indices;
};

/* One accumulator: a compensated sum, an integer sum, or an extreme with its index. */
struct dt_cuda_acc {
  dt_neumaier sum;
  uint64_t isum;
  double best;
  int64_t ibest, best_index;
};

static __device__ __forceinline__ void acc_init(dt_cuda_acc *s) {
  s->sum.sum = 0;
  s->sum.comp = 0;
  s->isum = 0;
  s->best = 0;
  s->ibest = 0;
  s->best_index = -1;
}

static __device__ __forceinline__ void acc_add(const dt_cuda_reduce_args &a, dt_cuda_acc *s,
                                               const char *p, int64_t r) {
  bool is_max = a.kind == DT_CUDA_MAX;
  if (a.kind == DT_CUDA_SUM || a.kind == DT_CUDA_MEAN) {
    if (a.floating) {
      dt__neumaier_add(&s->sum, dt__elem_load_f64(a.dtype, p));
    } else {
      int64_t v = dt__elem_load_i64(a.dtype, p);
      s->isum += (uint64_t)(a.dtype == DT_BOOL ? v != 0 : v);
    }
  } else if (a.floating) {
    double v = dt__elem_load_f64(a.dtype, p);
    if (dt__extreme_better(is_max, v, r, s->best, s->best_index)) s->best = v, s->best_index = r;
  } else {
    int64_t v = dt__elem_load_i64(a.dtype, p);
    if (dt__extreme_better_i64(is_max, v, r, s->ibest, s->best_index))
      s->ibest = v, s->best_index = r;
  }
}

/* b into a: the tree's step (b holds later or earlier elements: the order does not matter). */
static __device__ __forceinline__ void acc_merge(const dt_cuda_reduce_args &a, dt_cuda_acc *x,
                                                 const dt_cuda_acc &y) {
  bool is_max = a.kind == DT_CUDA_MAX;
  if (a.kind == DT_CUDA_SUM || a.kind == DT_CUDA_MEAN) {
    dt__neumaier_merge(&x->sum, y.sum);
    x->isum += y.isum;
  } else if (y.best_index >= 0) {
    if (a.floating
            ? dt__extreme_better(is_max, y.best, y.best_index, x->best, x->best_index)
            : dt__extreme_better_i64(is_max, y.ibest, y.best_index, x->ibest, x->best_index)) {
      x->best = y.best;
      x->ibest = y.ibest;
      x->best_index = y.best_index;
    }
  }
}

static __device__ void acc_finish(const dt_cuda_reduce_args &a, const dt_cuda_acc &s, int64_t o) {
  if (a.values) {
    char *dst = a.values + o * dt_cuda_esize(a.out_dtype);
    switch (a.kind) {
    case DT_CUDA_SUM:
      if (a.floating) {
        dt__elem_store_f64(a.out_dtype, dst, dt__neumaier_result(s.sum));
      } else {
        dt__elem_store_i64(a.out_dtype, dst, (int64_t)s.isum);
      }
      break;
    case DT_CUDA_MEAN:
      dt__elem_store_f64(a.out_dtype, dst, dt__neumaier_result(s.sum) / (double)a.count);
      break;
    default:
      if (a.floating) {
        dt__elem_store_f64(a.out_dtype, dst, s.best);
      } else {
        dt__elem_store_i64(a.out_dtype, dst, s.ibest);
      }
    }
  }
  if (a.indices) a.indices[o] = s.best_index;
}

/* One thread per output element, the reduced elements in order. */
__global__ void dt_cuda_reduce_thread_kernel(dt_cuda_reduce_args a) {
  int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < a.n_out; o += step) {
    const char *base = a.in + a.kept.offset(o);
    dt_cuda_acc s;
    acc_init(&s);
    for (int64_t r = 0; r < a.count; r++) acc_add(a, &s, base + a.reduced.offset(r), r);
    acc_finish(a, s, o);
  }
}

/* One block per output element; the shares combine in a fixed tree. */
__global__ void dt_cuda_reduce_block_kernel(dt_cuda_reduce_args a) {
  __shared__ dt_cuda_acc shares[DT_CUDA_THREADS];
  for (int64_t o = blockIdx.x; o < a.n_out; o += gridDim.x) {
    const char *base = a.in + a.kept.offset(o);
    dt_cuda_acc s;
    acc_init(&s);
    for (int64_t r = threadIdx.x; r < a.count; r += blockDim.x)
      acc_add(a, &s, base + a.reduced.offset(r), r);
    shares[threadIdx.x] = s;
    __syncthreads();
    for (unsigned width = blockDim.x / 2; width > 0; width /= 2) {
      if (threadIdx.x < width) acc_merge(a, &shares[threadIdx.x], shares[threadIdx.x + width]);
      __syncthreads();
    }
    if (threadIdx.x == 0) acc_finish(a, shares[0], o);
    __syncthreads();
  }
}

extern "C" int dt__cuda_launch_reduce(void *stream, dt_cuda_reduce_kind kind, const dt_cuda_ref *a,
                                      uint32_t mask, const dt_cuda_ref *values,
                                      const dt_cuda_ref *indices) {
  dt_cuda_reduce_args r;
  memset(&r, 0, sizeof r);
  r.kind = kind;
  r.dtype = a->dtype;
  r.out_dtype = values ? values->dtype : a->dtype;
  r.floating = dt_cuda_floating(a->dtype);
  r.in = a->data;
  r.values = values ? values->data : nullptr;
  r.indices = indices ? (int64_t *)indices->data : nullptr;
  int64_t es = dt_cuda_esize(a->dtype);
  dt__dims_split(a->ndim, a->shape, a->strides, es, mask, &r.kept, &r.reduced, &r.n_out, &r.count);
  if (r.n_out == 0) return 0;
  cudaStream_t s = (cudaStream_t)stream;
  if (r.count < 64 || r.n_out >= 8 * r.count) {
    dt_cuda_reduce_thread_kernel<<<dt_cuda_blocks(r.n_out), DT_CUDA_THREADS, 0, s>>>(r);
  } else {
    int64_t blocks = r.n_out < 65536 ? r.n_out : 65536;
    dt_cuda_reduce_block_kernel<<<(unsigned)blocks, DT_CUDA_THREADS, 0, s>>>(r);
  }
  return (int)cudaGetLastError();
}
