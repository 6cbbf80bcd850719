/*
 * Index kernels on CUDA: the index check that runs before any write (the CPU checks every
 * index first too, so a bad one leaves the output unwritten), embedding rows (whole table or
 * a vocabulary-parallel window) and scatter_add. scatter_add is deterministic without
 * atomics: a thread owns one position off the scatter dim and adds along the dim in order,
 * so each output element receives its contributions in the CPU's order, rounded alike.
 */
#include "kernels/cuda/indexer.cuh"

static __device__ __forceinline__ int64_t load_index(const char *base, int dtype, int64_t off) {
  return dtype == DT_I64 ? ((const int64_t *)base)[off] : (int64_t)((const int32_t *)base)[off];
}

static int64_t numel_of(const dt_cuda_ref *t) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
  return n;
}

/* ---- index check ----------------------------------------------------------------------------- */

__global__ void dt_cuda_check_init_kernel(int64_t *first) {
  first[0] = INT64_MAX;
  first[1] = 0;
}

__global__ void dt_cuda_check_kernel(const char *base, int dtype, dt_cuda_dims w, int64_t n,
                                     int64_t lo, int64_t hi, bool allow, int64_t allowed,
                                     int64_t *first) {
  int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < n; r += step) {
    int64_t v = load_index(base, dtype, w.offset(r));
    if ((v < lo || v >= hi) && !(allow && v == allowed))
      atomicMin((unsigned long long *)first, (unsigned long long)r);
  }
}

/* first[0] = -1 when every index is valid; else first[1] = the first bad index's value. */
__global__ void dt_cuda_check_done_kernel(const char *base, int dtype, dt_cuda_dims w,
                                          int64_t *first) {
  if (first[0] == INT64_MAX) {
    first[0] = -1;
    return;
  }
  first[1] = load_index(base, dtype, w.offset(first[0]));
}

extern "C" int dt__cuda_launch_check_index(void *stream, const dt_cuda_ref *idx, int64_t lo,
                                           int64_t hi, bool allow, int64_t allowed,
                                           int64_t *first) {
  cudaStream_t s = (cudaStream_t)stream;
  dt_cuda_dims w = dt_cuda_dims_of(idx, 0, idx->ndim, -1);
  int64_t n = numel_of(idx);
  dt_cuda_check_init_kernel<<<1, 1, 0, s>>>(first);
  if (n > 0)
    dt_cuda_check_kernel<<<dt_cuda_blocks(n), DT_CUDA_THREADS, 0, s>>>(
        idx->data, idx->dtype, w, n, lo, hi, allow, allowed, first);
  dt_cuda_check_done_kernel<<<1, 1, 0, s>>>(idx->data, idx->dtype, w, first);
  return (int)cudaGetLastError();
}

/* ---- embedding --------------------------------------------------------------------------------
 */

__global__ void dt_cuda_embedding_kernel(dt_cuda_ref weight, const char *idx, int idx_dtype,
                                         dt_cuda_dims iw, int64_t offset, int64_t count,
                                         char *out) {
  int64_t rows = weight.shape[0], dim = weight.shape[1], total = count * dim;
  int es = dt_cuda_esize(weight.dtype);
  int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += step) {
    int64_t r = e / dim, j = e % dim;
    int64_t local = load_index(idx, idx_dtype, iw.offset(r)) - offset;
    char *d = out + e * es;
    if (local < 0 || local >= rows) { /* another shard holds this row */
      for (int b = 0; b < es; b++) d[b] = 0;
      continue;
    }
    const char *s = weight.data + (local * weight.strides[0] + j * weight.strides[1]) * es;
    for (int b = 0; b < es; b++) d[b] = s[b];
  }
}

extern "C" int dt__cuda_launch_embedding(void *stream, const dt_cuda_ref *weight,
                                         const dt_cuda_ref *idx, int64_t offset,
                                         const dt_cuda_ref *out) {
  int64_t count = numel_of(idx), total = count * weight->shape[1];
  if (total == 0) return 0;
  dt_cuda_embedding_kernel<<<dt_cuda_blocks(total), DT_CUDA_THREADS, 0, (cudaStream_t)stream>>>(
      *weight, idx->data, idx->dtype, dt_cuda_dims_of(idx, 0, idx->ndim, -1), offset, count,
      out->data);
  return (int)cudaGetLastError();
}

/* ---- scatter_add -------------------------------------------------------------------------------
 */

struct dt_cuda_scatter_args {
  dt_cuda_ref out, index, src;
  int dim;
  int64_t columns, len, offset;
  dt_cuda_dims index_cols, src_cols, out_cols; /* index's dims without dim */
};

__global__ void dt_cuda_scatter_add_kernel(dt_cuda_scatter_args a) {
  int64_t rows = a.out.shape[a.dim], step = (int64_t)gridDim.x * blockDim.x;
  int os = dt_cuda_esize(a.out.dtype), ss = dt_cuda_esize(a.src.dtype);
  for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < a.columns; c += step) {
    int64_t io = a.index_cols.offset(c), so = a.src_cols.offset(c), oo = a.out_cols.offset(c);
    for (int64_t k = 0; k < a.len; k++) {
      int64_t j =
          load_index(a.index.data, a.index.dtype, io + k * a.index.strides[a.dim]) - a.offset;
      if (j < 0 || j >= rows) continue; /* another shard's row */
      char *d = a.out.data + (oo + j * a.out.strides[a.dim]) * os;
      double v = dt__elem_load_f64(a.src.dtype, a.src.data + (so + k * a.src.strides[a.dim]) * ss);
      dt__elem_store_f64(a.out.dtype, d, dt__elem_load_f64(a.out.dtype, d) + v);
    }
  }
}

extern "C" int dt__cuda_launch_scatter_add(void *stream, const dt_cuda_ref *out, int dim,
                                           const dt_cuda_ref *index, const dt_cuda_ref *src,
                                           int64_t offset) {
  dt_cuda_scatter_args a;
  memset(&a, 0, sizeof a);
  a.out = *out;
  a.index = *index;
  a.src = *src;
  a.dim = dim;
  a.offset = offset;
  a.len = index->ndim > 0 ? index->shape[dim] : 1;
  a.columns = a.len > 0 ? numel_of(index) / a.len : 0;
  /* the columns walk index's shape off dim, through each tensor's own strides */
  a.index_cols = dt_cuda_dims_of(index, 0, index->ndim, dim);
  dt_cuda_ref src_view = *src, out_view = *out;
  for (int d = 0; d < index->ndim; d++) src_view.shape[d] = out_view.shape[d] = index->shape[d];
  a.src_cols = dt_cuda_dims_of(&src_view, 0, src_view.ndim, dim);
  a.out_cols = dt_cuda_dims_of(&out_view, 0, out_view.ndim, dim);
  if (a.columns == 0) return 0;
  dt_cuda_scatter_add_kernel<<<dt_cuda_blocks(a.columns), DT_CUDA_THREADS, 0,
                               (cudaStream_t)stream>>>(a);
  return (int)cudaGetLastError();
}
