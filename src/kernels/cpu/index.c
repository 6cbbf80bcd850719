/* Index and ordering kernels: tril/triu, cumsum, topk, index_select, gather, scatter_add.
 * Generic over dtypes: elements are moved as bytes (exact), sums and comparisons go through
 * double for floating dtypes and int64 for integers; scatter_add accumulates in the output's
 * dtype through double. */
#include "kernels/cpu/index.h"

#include <inttypes.h>
#include <stdlib.h> /* qsort */
#include <string.h>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/math/order.h"
#include "tensor/dtype_impl.h"

static char *element(const dt_tensor *t, const int64_t *pos) {
  return dt__tensor_base(t) +
         dt__offset_of(pos, t->strides, t->ndim) * (int64_t)dt__dtype_sizes[t->dtype];
}

static int64_t load_index(const dt_tensor *t, const int64_t *pos) {
  const char *p = element(t, pos);
  return t->dtype == DT_I64 ? *(const int64_t *)p : (int64_t) * (const int32_t *)p;
}

/* Every index of `index` lies in [0, size): checked before any output is written. */
static dt_status check_indices(const char *op, const dt_tensor *index, int dim, int64_t size) {
  int64_t n = dt__tensor_numel(index);
  dt_index_iter it;
  dt__iter_init(&it, index->ndim, index->shape);
  for (int64_t e = 0; e < n; e++, dt__iter_next(&it)) {
    int64_t j = load_index(index, it.index);
    if (j < 0 || j >= size) {
      return dt__error(DT_ERR_INDEX,
                       "%s: index %" PRId64 " at position %" PRId64
                       " is out of range for dim %d of size %" PRId64,
                       op, j, e, dim, size);
    }
  }
  return DT_OK;
}

void dt__cpu_triangle(const dt_tensor *a, int64_t diagonal, bool upper, dt_tensor *out) {
  int64_t n = dt__tensor_numel(out);
  size_t esize = dt__dtype_sizes[a->dtype];
  int r = a->ndim - 2, c = a->ndim - 1;
  dt_index_iter it;
  dt__iter_init(&it, out->ndim, out->shape);
  for (int64_t e = 0; e < n; e++, dt__iter_next(&it)) {
    bool keep = dt__triangle_keeps(it.index[r], it.index[c], diagonal, upper);
    char *dst = element(out, it.index);
    if (keep)
      memcpy(dst, element(a, it.index), esize);
    else
      memset(dst, 0, esize); /* zero in every dtype */
  }
}

void dt__cpu_cumsum(const dt_tensor *a, int dim, dt_tensor *out) {
  int64_t outer[DT_MAX_DIMS];
  for (int d = 0; d < a->ndim; d++) outer[d] = d == dim ? 1 : a->shape[d];
  int64_t rows = dt__numel(a->ndim, outer), len = a->shape[dim];
  bool floating = dt_dtype_is_floating(a->dtype);
  int64_t sa = a->strides[dim] * (int64_t)dt__dtype_sizes[a->dtype];
  int64_t so = out->strides[dim] * (int64_t)dt__dtype_sizes[out->dtype];
  dt_index_iter it;
  dt__iter_init(&it, a->ndim, outer);
  for (int64_t r = 0; r < rows; r++, dt__iter_next(&it)) {
    const char *src = element(a, it.index);
    char *dst = element(out, it.index);
    double fs = 0;
    int64_t is = 0;
    for (int64_t i = 0; i < len; i++, src += sa, dst += so) {
      if (floating) {
        fs += dt__load_as_double(a->dtype, src);
        dt__store_from_double(out->dtype, dst, fs);
      } else {
        is = (int64_t)((uint64_t)is + (uint64_t)dt__cpu_load_i64(a->dtype, src));
        dt__cpu_store_i64(out->dtype, dst, is);
      }
    }
  }
}

/* ---- topk ------------------------------------------------------------------------------- */

typedef struct keyed {
  double f;    /* floating dtypes */
  int64_t i;   /* integer dtypes */
  int64_t pos; /* along dim */
} keyed;

/* Orders by kernels/math/order.h's rule (NaN above every number, then by value, equal values
 * by position, so no two elements are equal), which the CUDA kernel applies too. */
static int cmp_float_desc(const void *x, const void *y) {
  const keyed *a = x, *b = y;
  return dt__topk_before_f64(a->f, a->pos, b->f, b->pos, true) ? -1 : a->pos != b->pos;
}
static int cmp_float_asc(const void *x, const void *y) {
  const keyed *a = x, *b = y;
  return dt__topk_before_f64(a->f, a->pos, b->f, b->pos, false) ? -1 : a->pos != b->pos;
}
static int cmp_int_desc(const void *x, const void *y) {
  const keyed *a = x, *b = y;
  return dt__topk_before_i64(a->i, a->pos, b->i, b->pos, true) ? -1 : a->pos != b->pos;
}
static int cmp_int_asc(const void *x, const void *y) {
  const keyed *a = x, *b = y;
  return dt__topk_before_i64(a->i, a->pos, b->i, b->pos, false) ? -1 : a->pos != b->pos;
}

dt_status dt__cpu_topk(const char *op, const dt_tensor *a, int64_t k, int dim, bool largest,
                       dt_tensor *values, dt_tensor *indices) {
  int64_t len = a->shape[dim];
  if (k == 0 || dt__tensor_numel(a) == 0) return DT_OK;
  keyed *row = dt__alloc(sizeof(keyed) * (size_t)len);
  if (!row) return dt__error(DT_ERR_NOMEM, "%s: out of memory for a row of %" PRId64, op, len);
  bool floating = dt_dtype_is_floating(a->dtype);
  int (*cmp)(const void *, const void *) = floating ? (largest ? cmp_float_desc : cmp_float_asc)
                                                    : (largest ? cmp_int_desc : cmp_int_asc);
  size_t esize = dt__dtype_sizes[a->dtype];
  int64_t outer[DT_MAX_DIMS];
  for (int d = 0; d < a->ndim; d++) outer[d] = d == dim ? 1 : a->shape[d];
  int64_t rows = dt__numel(a->ndim, outer);
  int64_t sa = a->strides[dim] * (int64_t)esize;
  int64_t sv = values->strides[dim] * (int64_t)esize;
  int64_t si = indices->strides[dim] * (int64_t)sizeof(int64_t);
  dt_index_iter it;
  dt__iter_init(&it, a->ndim, outer);
  for (int64_t r = 0; r < rows; r++, dt__iter_next(&it)) {
    const char *src = element(a, it.index);
    for (int64_t j = 0; j < len; j++) {
      const char *p = src + j * sa;
      row[j].pos = j;
      if (floating)
        row[j].f = dt__load_as_double(a->dtype, p);
      else
        row[j].i = dt__cpu_load_i64(a->dtype, p);
    }
    qsort(row, (size_t)len, sizeof *row, cmp);
    char *vd = element(values, it.index), *id = element(indices, it.index);
    for (int64_t j = 0; j < k; j++) {
      memcpy(vd + j * sv, src + row[j].pos * sa, esize);
      *(int64_t *)(id + j * si) = row[j].pos;
    }
  }
  dt__free(row);
  return DT_OK;
}

/* ---- index_select, gather --------------------------------------------------------------- */

/* index_select (select: index is 1-D, read at the output's position along dim) and gather
 * (index has the output's shape, read at the output's position). a holds rows [offset, offset +
 * its size) of `limit` along dim; an index outside them reads a zero. */
static dt_status gather_along(const char *op, const dt_tensor *a, int dim, const dt_tensor *index,
                              bool select, int64_t offset, int64_t limit, dt_tensor *out) {
  dt_status st = check_indices(op, index, dim, limit);
  if (st) return st;
  int64_t n = dt__tensor_numel(out), rows = a->shape[dim];
  size_t esize = dt__dtype_sizes[a->dtype];
  dt_index_iter it;
  dt__iter_init(&it, out->ndim, out->shape);
  for (int64_t e = 0; e < n; e++, dt__iter_next(&it)) {
    int64_t pos[DT_MAX_DIMS], ipos[1] = {it.index[dim]};
    memcpy(pos, it.index, sizeof(int64_t) * (size_t)out->ndim);
    pos[dim] = load_index(index, select ? ipos : it.index) - offset;
    if (pos[dim] < 0 || pos[dim] >= rows) /* another shard's row */
      memset(element(out, it.index), 0, esize);
    else
      memcpy(element(out, it.index), element(a, pos), esize);
  }
  return DT_OK;
}

dt_status dt__cpu_index_select(const char *op, const dt_tensor *a, int dim, const dt_tensor *index,
                               dt_tensor *out) {
  return gather_along(op, a, dim, index, true, 0, a->shape[dim], out);
}

dt_status dt__cpu_gather(const char *op, const dt_tensor *a, int dim, const dt_tensor *index,
                         int64_t offset, int64_t limit, dt_tensor *out) {
  return gather_along(op, a, dim, index, false, offset, limit, out);
}

/* ---- scatter_add ------------------------------------------------------------------------ */

dt_status dt__cpu_scatter_add(const char *op, const dt_tensor *self, int dim,
                              const dt_tensor *index, const dt_tensor *src, int64_t offset,
                              int64_t limit, dt_tensor *out) {
  /* Check every index first, so that a bad one leaves out unwritten. */
  dt_status st = check_indices(op, index, dim, limit);
  if (st) return st;
  int64_t rows = self->shape[dim];
  int64_t count = dt__tensor_numel(index);
  int64_t n = dt__tensor_numel(self);
  dt_index_iter it;
  dt__iter_init(&it, self->ndim, self->shape);
  for (int64_t e = 0; e < n; e++, dt__iter_next(&it)) {
    dt__store_from_double(out->dtype, element(out, it.index),
                          dt__load_as_double(self->dtype, element(self, it.index)));
  }
  dt__iter_init(&it, index->ndim, index->shape);
  for (int64_t e = 0; e < count; e++, dt__iter_next(&it)) {
    int64_t pos[DT_MAX_DIMS], j = load_index(index, it.index) - offset;
    if (j < 0 || j >= rows) continue; /* another shard's row */
    for (int d = 0; d < index->ndim; d++) pos[d] = it.index[d];
    pos[dim] = j;
    char *dst = element(out, pos);
    double v = dt__load_as_double(src->dtype, element(src, it.index));
    dt__store_from_double(out->dtype, dst, dt__load_as_double(out->dtype, dst) + v);
  }
  return DT_OK;
}
