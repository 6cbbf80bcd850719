/*
 * Index and ordering kernels on CUDA: tril/triu, cumsum, topk, index_select and gather, as the
 * CPU's (kernels/cpu/index.c). The rules are kernels/math/order.h's, which the CPU applies
 * too: which triangle is kept, topk's total order (NaN first, then by value, equal values by
 * position). Elements are moved as bytes (exact in every dtype); cumsum accumulates floating
 * dtypes in double and integers in int64 (wrapping), one thread per line in order, as the CPU.
 * Indices are checked by the caller before any of these runs (op_index.c). Every loop is a
 * grid-stride loop over 64-bit indices; offsets are in elements until the last multiply.
 */
#include "kernels/cuda/indexer.cuh"
#include "kernels/math/order.h"

/* One shape walked row-major from a linear index, with up to three operands' element strides
 * through it (0 for an absent operand or a dim it does not step through). */
struct dt_cuda_order_walk {
  int n;
  int64_t shape[DT_CUDA_MAX_DIMS];
  int64_t stride[3][DT_CUDA_MAX_DIMS];

  __device__ __forceinline__ void offsets(int64_t linear, int64_t *off) const {
    off[0] = off[1] = off[2] = 0;
    for (int d = n - 1; d >= 0; d--) {
      int64_t c = linear % shape[d];
      linear /= shape[d];
      off[0] += c * stride[0][d];
      off[1] += c * stride[1][d];
      off[2] += c * stride[2][d];
    }
  }
};

/* The dims of shape_of except `skip` (-1: none), with the strides of r0, r1, r2 (NULL: 0)
 * on the same dims. */
static dt_cuda_order_walk order_walk(const dt_cuda_ref *shape_of, int skip, const dt_cuda_ref *r0,
                                     const dt_cuda_ref *r1, const dt_cuda_ref *r2) {
  const dt_cuda_ref *r[3] = {r0, r1, r2};
  dt_cuda_order_walk w;
  memset(&w, 0, sizeof w);
  for (int d = 0; d < shape_of->ndim; d++) {
    if (d == skip) continue;
    w.shape[w.n] = shape_of->shape[d];
    for (int k = 0; k < 3; k++) w.stride[k][w.n] = r[k] ? r[k]->strides[d] : 0;
    w.n++;
  }
  return w;
}

/* A line along dim: its length and a tensor's step along it (a 0-d tensor is one line of one
 * element). */
static int64_t line_length(const dt_cuda_ref *a, int dim) { return a->ndim ? a->shape[dim] : 1; }
static int64_t line_step(const dt_cuda_ref *t, int dim) { return t->ndim ? t->strides[dim] : 0; }

static int64_t count_of(const dt_cuda_ref *t) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
  return n;
}

/* One element of es bytes (1, 2, 4 or 8; elements are aligned to their size). */
static __device__ __forceinline__ void copy_element(char *dst, const char *src, int es) {
  switch (es) {
  case 8: *(uint64_t *)dst = *(const uint64_t *)src; break;
  case 4: *(uint32_t *)dst = *(const uint32_t *)src; break;
  case 2: *(uint16_t *)dst = *(const uint16_t *)src; break;
  default: *dst = *src; break;
  }
}

static __device__ __forceinline__ void zero_element(char *dst, int es) {
  switch (es) {
  case 8: *(uint64_t *)dst = 0; break;
  case 4: *(uint32_t *)dst = 0; break;
  case 2: *(uint16_t *)dst = 0; break;
  default: *dst = 0; break;
  }
}

static __device__ __forceinline__ int64_t index_value(const char *base, int dtype, int64_t off) {
  return dtype == DT_I64 ? ((const int64_t *)base)[off] : (int64_t)((const int32_t *)base)[off];
}

/* ---- tril, triu ------------------------------------------------------------------------- */

/* w walks out's shape: stride[0] out's, stride[1] a's. */
__global__ void dt_cuda_triangle_kernel(dt_cuda_order_walk w, const char *a, char *out, int es,
                                        int64_t n, int64_t rows, int64_t cols, int64_t diagonal,
                                        bool upper) {
  int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += step) {
    int64_t off[3];
    w.offsets(e, off);
    int64_t col = e % cols, row = (e / cols) % rows;
    char *d = out + off[0] * es;
    if (dt__triangle_keeps(row, col, diagonal, upper))
      copy_element(d, a + off[1] * es, es);
    else
      zero_element(d, es);
  }
}

extern "C" int dt__cuda_launch_triangle(void *stream, const dt_cuda_ref *a, int64_t diagonal,
                                        bool upper, const dt_cuda_ref *out) {
  int64_t n = count_of(out);
  if (n == 0 || out->ndim < 2) return 0;
  dt_cuda_order_walk w = order_walk(out, -1, out, a, nullptr);
  dt_cuda_triangle_kernel<<<dt_cuda_blocks(n), DT_CUDA_THREADS, 0, (cudaStream_t)stream>>>(
      w, a->data, out->data, dt_cuda_esize(a->dtype), n, out->shape[out->ndim - 2],
      out->shape[out->ndim - 1], diagonal, upper);
  return (int)cudaGetLastError();
}

/* ---- cumsum ------------------------------------------------------------------------------ */

struct dt_cuda_cumsum_args {
  dt_cuda_ref a, out;
  dt_cuda_order_walk lines; /* stride[0] out's, stride[1] a's */
  int64_t n_lines, len, a_step, out_step;
};

/* A thread per line, adding along it in order (the CPU's order and rounding). */
__global__ void dt_cuda_cumsum_kernel(dt_cuda_cumsum_args a) {
  int ea = dt_cuda_esize(a.a.dtype), eo = dt_cuda_esize(a.out.dtype);
  bool floating = dt_cuda_floating(a.a.dtype);
  int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t l = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; l < a.n_lines; l += step) {
    int64_t off[3];
    a.lines.offsets(l, off);
    const char *src = a.a.data + off[1] * ea;
    char *dst = a.out.data + off[0] * eo;
    double fs = 0;
    uint64_t is = 0;
    for (int64_t i = 0; i < a.len; i++, src += a.a_step * ea, dst += a.out_step * eo) {
      if (floating) {
        fs += dt__elem_load_f64(a.a.dtype, src);
        dt__elem_store_f64(a.out.dtype, dst, fs);
      } else {
        is += (uint64_t)dt__elem_load_i64(a.a.dtype, src);
        dt__elem_store_i64(a.out.dtype, dst, (int64_t)is);
      }
    }
  }
}

extern "C" int dt__cuda_launch_cumsum(void *stream, const dt_cuda_ref *a, int dim,
                                      const dt_cuda_ref *out) {
  dt_cuda_cumsum_args r;
  memset(&r, 0, sizeof r);
  r.a = *a, r.out = *out;
  r.len = line_length(a, dim), r.a_step = line_step(a, dim), r.out_step = line_step(out, dim);
  int64_t n = count_of(a);
  if (n == 0) return 0;
  r.n_lines = n / r.len;
  r.lines = order_walk(a, a->ndim ? dim : -1, out, a, nullptr);
  dt_cuda_cumsum_kernel<<<dt_cuda_blocks(r.n_lines), DT_CUDA_THREADS, 0, (cudaStream_t)stream>>>(r);
  return (int)cudaGetLastError();
}

/* ---- topk -------------------------------------------------------------------------------- */

/* An element of a line as topk orders it: its value (f for floating dtypes, i for integers)
 * and position; pos < 0 is "none", after every element. */
struct dt_cuda_topk_key {
  double f;
  int64_t i;
  int64_t pos;
};

static __device__ __forceinline__ bool
key_before(const dt_cuda_topk_key &x, const dt_cuda_topk_key &y, bool floating, bool largest) {
  if (x.pos < 0) return false;
  if (y.pos < 0) return true;
  return floating ? dt__topk_before_f64(x.f, x.pos, y.f, y.pos, largest)
                  : dt__topk_before_i64(x.i, x.pos, y.i, y.pos, largest);
}

struct dt_cuda_topk_args {
  dt_cuda_ref a, values, indices;
  dt_cuda_order_walk lines; /* stride[0] a's, stride[1] values', stride[2] indices' */
  int64_t n_lines, len, k, a_step, v_step, i_step;
  bool largest;
};

/* A block per line. The order is strict (equal values by position), so the j-th output is
 * the first element, in that order, of those after the (j-1)-th: k passes over the line, each
 * a block-wide minimum in a fixed tree, no scratch memory. O(k len) per line: written for the
 * k of top-k sampling, correct for any k. */
__global__ void dt_cuda_topk_kernel(dt_cuda_topk_args a) {
  __shared__ dt_cuda_topk_key buf[DT_CUDA_THREADS];
  bool floating = dt_cuda_floating(a.a.dtype);
  int es = dt_cuda_esize(a.a.dtype);
  for (int64_t l = blockIdx.x; l < a.n_lines; l += gridDim.x) {
    int64_t off[3];
    a.lines.offsets(l, off);
    const char *src = a.a.data + off[0] * es;
    dt_cuda_topk_key prev;
    prev.f = 0, prev.i = 0, prev.pos = -1;
    for (int64_t j = 0; j < a.k; j++) {
      dt_cuda_topk_key best;
      best.f = 0, best.i = 0, best.pos = -1;
      for (int64_t p = threadIdx.x; p < a.len; p += blockDim.x) {
        const char *e = src + p * a.a_step * es;
        dt_cuda_topk_key c;
        c.pos = p;
        c.f = floating ? dt__elem_load_f64(a.a.dtype, e) : 0.0;
        c.i = floating ? 0 : dt__elem_load_i64(a.a.dtype, e);
        if (prev.pos >= 0 && !key_before(prev, c, floating, a.largest)) continue;
        if (key_before(c, best, floating, a.largest)) best = c;
      }
      buf[threadIdx.x] = best;
      __syncthreads();
      for (unsigned width = blockDim.x / 2; width > 0; width /= 2) {
        if (threadIdx.x < width &&
            key_before(buf[threadIdx.x + width], buf[threadIdx.x], floating, a.largest))
          buf[threadIdx.x] = buf[threadIdx.x + width];
        __syncthreads();
      }
      prev = buf[0];
      __syncthreads(); /* everyone has read buf[0] before the next pass writes buf */
      if (threadIdx.x == 0 && prev.pos >= 0) {
        copy_element(a.values.data + (off[1] + j * a.v_step) * es, src + prev.pos * a.a_step * es,
                     es);
        ((int64_t *)a.indices.data)[off[2] + j * a.i_step] = prev.pos;
      }
    }
  }
}

extern "C" int dt__cuda_launch_topk(void *stream, const dt_cuda_ref *a, int64_t k, int dim,
                                    bool largest, const dt_cuda_ref *values,
                                    const dt_cuda_ref *indices) {
  dt_cuda_topk_args r;
  memset(&r, 0, sizeof r);
  r.a = *a, r.values = *values, r.indices = *indices;
  r.len = line_length(a, dim), r.a_step = line_step(a, dim);
  r.v_step = line_step(values, dim), r.i_step = line_step(indices, dim);
  r.k = k, r.largest = largest;
  int64_t n = count_of(a);
  if (n == 0 || k == 0) return 0;
  r.n_lines = n / r.len;
  r.lines = order_walk(a, a->ndim ? dim : -1, a, values, indices);
  unsigned blocks = (unsigned)(r.n_lines < 65536 ? r.n_lines : 65536);
  dt_cuda_topk_kernel<<<blocks, DT_CUDA_THREADS, 0, (cudaStream_t)stream>>>(r);
  return (int)cudaGetLastError();
}

/* ---- index_select, gather ------------------------------------------------------------------ */

/* out at p = a at p with p[dim] replaced by the index read at p: w walks out's shape with
 * stride[0] out's, stride[1] a's (0 along dim) and stride[2] the index's (index_select: only
 * along dim). */
__global__ void dt_cuda_take_kernel(dt_cuda_order_walk w, const char *a, int64_t a_dim_stride,
                                    int64_t offset, int64_t rows, const char *idx, int idx_dtype,
                                    char *out, int es, int64_t n) {
  int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += step) {
    int64_t off[3];
    w.offsets(e, off);
    int64_t j = index_value(idx, idx_dtype, off[2]) - offset;
    if (j < 0 || j >= rows) { /* another shard's row: a zero */
      for (int b = 0; b < es; b++) out[off[0] * es + b] = 0;
      continue;
    }
    copy_element(out + off[0] * es, a + (off[1] + j * a_dim_stride) * es, es);
  }
}

extern "C" int dt__cuda_launch_take(void *stream, const dt_cuda_ref *a, int dim,
                                    const dt_cuda_ref *index, bool gather, int64_t offset,
                                    const dt_cuda_ref *out) {
  int64_t n = count_of(out);
  if (n == 0) return 0;
  dt_cuda_ref a_off = *a, idx = *index;
  a_off.strides[dim] = 0;
  if (!gather) { /* the 1-D index steps along out's dim only */
    idx.ndim = out->ndim;
    for (int d = 0; d < out->ndim; d++) idx.strides[d] = d == dim ? index->strides[0] : 0;
  }
  dt_cuda_order_walk w = order_walk(out, -1, out, &a_off, &idx);
  dt_cuda_take_kernel<<<dt_cuda_blocks(n), DT_CUDA_THREADS, 0, (cudaStream_t)stream>>>(
      w, a->data, a->strides[dim], offset, a->shape[dim], index->data, index->dtype, out->data,
      dt_cuda_esize(a->dtype), n);
  return (int)cudaGetLastError();
}
