/* Gathers and block copies: embedding rows, cat and stack. */
#include <inttypes.h>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/matrix.h"
#include "kernels/cpu/reduce.h"
#include "kernels/cpu/vmath.h"

/* ---- embedding ------------------------------------------------------------------------------ */

static int64_t load_index(dt_dtype dtype, const char *p) {
  return dtype == DT_I64 ? *(const int64_t *)p : (int64_t) * (const int32_t *)p;
}

/* Walks the indices in row-major order whatever their strides. */
typedef struct index_walk {
  const dt_tensor *t;
  const char *base;
  size_t esize;
  bool contiguous;
  dt_index_iter it;
} index_walk;

static void index_walk_init(index_walk *w, const dt_tensor *t) {
  w->t = t;
  w->base = dt__tensor_base(t);
  w->esize = dt__dtype_sizes[t->dtype];
  w->contiguous = dt__is_contiguous(t->ndim, t->shape, t->strides);
  dt__iter_init(&w->it, t->ndim, t->shape);
}

/* The index at row-major position r; positions must be visited in order 0, 1, 2, ... */
static int64_t index_walk_get(index_walk *w, int64_t r) {
  int64_t off = r;
  if (!w->contiguous) {
    off = dt__offset_of(w->it.index, w->t->strides, w->t->ndim);
    dt__iter_next(&w->it);
  }
  return load_index(w->t->dtype, w->base + off * (int64_t)w->esize);
}

/* Every index is checked before the first row is written: a bad index never leaves a
 * half-filled output behind, and nothing is read outside the table. */
static dt_status check_indices(const char *op, const dt_tensor *indices, int64_t rows) {
  int64_t count = dt__tensor_numel(indices);
  index_walk w;
  index_walk_init(&w, indices);
  for (int64_t r = 0; r < count; r++) {
    int64_t idx = index_walk_get(&w, r);
    if (idx < 0 || idx >= rows) {
      char buf[160];
      return dt__error(DT_ERR_INDEX,
                       "%s: index %" PRId64 " (element %" PRId64
                       " of indices %s) is out of range for a weight of %" PRId64 " rows",
                       op, idx, r, dt__format_ints(buf, sizeof buf, indices->ndim, indices->shape),
                       rows);
    }
  }
  return DT_OK;
}

/* Rows outside [offset, offset + rows) belong to another shard and come out as zeros; the
 * whole-table embedding is the window at offset 0 over all rows. */
dt_status dt__cpu_embedding_window(const char *op, const dt_tensor *weight,
                                   const dt_tensor *indices, int64_t offset, int64_t total,
                                   dt_tensor *out) {
  int64_t rows = weight->shape[0], dim = weight->shape[1];
  int64_t count = dt__tensor_numel(indices);
  index_walk w;
  dt_status st = check_indices(op, indices, total);
  if (st || dim == 0) return st;
  size_t es = dt__dtype_sizes[weight->dtype], row_bytes = (size_t)dim * es;
  int64_t row_stride = weight->strides[0] * (int64_t)es,
          col_stride = weight->strides[1] * (int64_t)es;
  bool rows_contiguous = dim == 1 || weight->strides[1] == 1;
  const char *wbase = dt__tensor_base(weight);
  char *dst = dt__tensor_base(out);
  index_walk_init(&w, indices);
  for (int64_t r = 0; r < count; r++, dst += row_bytes) {
    int64_t local = index_walk_get(&w, r) - offset;
    if (local < 0 || local >= rows) {
      memset(dst, 0, row_bytes); /* another shard holds this row */
      continue;
    }
    const char *src = wbase + local * row_stride;
    if (rows_contiguous) {
      memcpy(dst, src, row_bytes);
    } else {
      for (int64_t j = 0; j < dim; j++) memcpy(dst + j * (int64_t)es, src + j * col_stride, es);
    }
  }
  return DT_OK;
}

dt_status dt__cpu_embedding(const char *op, const dt_tensor *weight, const dt_tensor *indices,
                            dt_tensor *out) {
  return dt__cpu_embedding_window(op, weight, indices, 0, weight->shape[0], out);
}

/* ---- embedding's weight gradient ------------------------------------------------------------ */

DT_VECTOR_CLONES static void add_row_f32(float *restrict dst, const float *restrict src,
                                         int64_t n) {
  for (int64_t j = 0; j < n; j++) dst[j] += src[j];
}

dt_status dt__cpu_embedding_backward(const char *op, const dt_tensor *indices,
                                     const dt_tensor *grad, int64_t offset, int64_t total,
                                     dt_tensor *out) {
  int64_t rows = out->shape[0], dim = out->shape[1], count = dt__tensor_numel(indices);
  dt_status st = check_indices(op, indices, total);
  if (st) return st;
  size_t os = dt__dtype_sizes[out->dtype];
  memset(dt__tensor_base(out), 0, (size_t)(rows * dim) * os);
  if (dim == 0) return DT_OK;
  bool fast = grad->dtype == DT_F32 && out->dtype == DT_F32 &&
              dt__is_contiguous(grad->ndim, grad->shape, grad->strides);
  int64_t gs = (int64_t)dt__dtype_sizes[grad->dtype], last = grad->strides[grad->ndim - 1];
  index_walk w;
  index_walk_init(&w, indices);
  for (int64_t r = 0; r < count; r++) {
    int64_t local = index_walk_get(&w, r) - offset;
    if (local < 0 || local >= rows) continue; /* another shard's row */
    if (fast) {
      add_row_f32((float *)dt__tensor_base(out) + local * dim,
                  (const float *)dt__tensor_base(grad) + r * dim, dim);
      continue;
    }
    const char *g =
        dt__tensor_base(grad) + dt__line_offset(grad, grad->ndim - 1, grad->ndim, r) * gs;
    char *o = dt__tensor_base(out) + local * dim * (int64_t)os;
    for (int64_t j = 0; j < dim; j++) {
      double v = dt__load_as_double(grad->dtype, g + j * last * gs);
      dt__store_from_double(out->dtype, o + j * (int64_t)os,
                            dt__load_as_double(out->dtype, o + j * (int64_t)os) + v);
    }
  }
  return DT_OK;
}

/* ---- cat and stack -------------------------------------------------------------------------- */

void dt__cpu_concat(int n, dt_tensor *const *tensors, int dim, bool stack, dt_tensor *out) {
  if (dt__tensor_numel(out) == 0) return;
  size_t es = dt__dtype_sizes[out->dtype];
  int64_t outer = dt__numel(dim, out->shape);
  int64_t inner = dt__numel(out->ndim - dim - 1, out->shape + dim + 1);
  int64_t out_block = out->shape[dim] * inner; /* elements of out per outer index */
  char *obase = dt__tensor_base(out);
  int64_t pos = 0; /* where the next tensor starts along dim */
  for (int i = 0; i < n; i++) {
    const dt_tensor *t = tensors[i];
    if (dt__tensor_numel(t) == 0) continue;
    int64_t extent = stack ? 1 : t->shape[dim];
    int64_t block = extent * inner; /* elements of t per outer index */
    if (t->dtype == out->dtype && dt__is_contiguous(t->ndim, t->shape, t->strides)) {
      const char *src = dt__tensor_base(t);
      char *dst = obase + pos * inner * (int64_t)es;
      for (int64_t o = 0; o < outer; o++) {
        memcpy(dst, src, (size_t)block * es);
        dst += out_block * (int64_t)es;
        src += block * (int64_t)es;
      }
    } else {
      /* The slab of out this tensor fills, seen with t's shape: the strided copy converts
       * the dtype and follows any strides. */
      int64_t shape[DT_MAX_DIMS], strides[DT_MAX_DIMS];
      int nd = 0;
      for (int d = 0; d < out->ndim; d++) {
        if (stack && d == dim) continue;
        shape[nd] = d == dim ? extent : out->shape[d];
        strides[nd] = out->strides[d];
        nd++;
      }
      dt_tensor slab;
      dt__tensor_alias(&slab, out, nd, shape, strides, out->offset + pos * out->strides[dim]);
      dt__cpu_copy(&slab, t);
    }
    pos += extent;
  }
}
