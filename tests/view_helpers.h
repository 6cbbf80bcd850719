/* Helpers shared by the view-op tests (test_views.c, test_slices.c, test_copy.c): inputs in
 * several layouts and checks of view results against naive index arithmetic. */
#ifndef DT_TESTS_VIEW_HELPERS_H
#define DT_TESTS_VIEW_HELPERS_H

#include <stdlib.h>
#include <string.h>

#include "reference.h"

static const dt_dtype all_dtypes[] = {DT_F32, DT_F64, DT_BF16, DT_F16,
                                      DT_I64, DT_I32, DT_U8,   DT_BOOL};
#define N_DTYPES (int)(sizeof all_dtypes / sizeof *all_dtypes)

/* 0, 1, 2, ... in the given shape. */
static inline dt_tensor *iota(int ndim, const int64_t *shape, dt_dtype dtype) {
  dt_tensor *t = NULL;
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  cr_assert_eq(dt_arange(0, (double)n, 1, DT_F64, &t), DT_OK, "%s", dt_last_error());
  dt_tensor *shaped = NULL, *typed = NULL;
  cr_assert_eq(dt_reshape(t, ndim, shape, &shaped), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_to(shaped, dtype, &typed), DT_OK, "%s", dt_last_error());
  dt_tensor_release(t);
  dt_tensor_release(shaped);
  return typed;
}

/* Inputs of three layouts: contiguous, last two dims transposed in storage, and every other
 * row of a taller tensor (gaps between rows). */
static inline dt_tensor *make_input(int layout, int ndim, const int64_t *shape, dt_dtype dtype,
                                    uint64_t seed) {
  if (layout == 1 && ndim >= 2) return ref_random_strided(ndim, shape, dtype, -20, 20, seed);
  if (layout == 2 && ndim >= 1) {
    int64_t tall[DT_MAX_DIMS];
    memcpy(tall, shape, sizeof(int64_t) * (size_t)ndim);
    tall[0] = 2 * shape[0] + 1;
    dt_tensor *base = ref_random(ndim, tall, dtype, -20, 20, seed), *t = NULL;
    cr_assert_eq(dt_slice(base, 0, 1, INT64_MAX, 2, &t), DT_OK, "%s", dt_last_error());
    dt_tensor_release(base);
    return t;
  }
  return ref_random(ndim, shape, dtype, -20, 20, seed);
}

/* Maps an output multi-index to the input multi-index it reads. */
typedef void (*index_map)(const int64_t *out_index, int64_t *in_index, const void *ctx);

/* Checks every element of out against the input element map() names (naive reference). */
static inline void check_gather(const dt_tensor *in, const dt_tensor *out, index_map map,
                                const void *ctx) {
  double *vin = ref_values(in), *vout = ref_values(out);
  int64_t n = dt_tensor_numel(out), oi[DT_MAX_DIMS], ii[DT_MAX_DIMS];
  for (int64_t f = 0; f < n; f++) {
    ref_unravel(f, dt_tensor_ndim(out), dt_tensor_shape(out), oi);
    map(oi, ii, ctx);
    double want = vin[ref_ravel(dt_tensor_ndim(in), dt_tensor_shape(in), ii)];
    cr_assert_eq(vout[f], want, "element %lld: %g, expected %g", (long long)f, vout[f], want);
  }
  free(vin);
  free(vout);
}

/* out holds the same elements as in, in the same row-major order (view, reshape, flatten,
 * squeeze, unsqueeze). */
static inline void check_same_order(const dt_tensor *in, const dt_tensor *out) {
  cr_assert_eq(dt_tensor_numel(in), dt_tensor_numel(out));
  double *vin = ref_values(in), *vout = ref_values(out);
  for (int64_t i = 0; i < dt_tensor_numel(in); i++) cr_assert_eq(vin[i], vout[i]);
  free(vin);
  free(vout);
}

static inline void check_shape(const dt_tensor *t, int ndim, const int64_t *shape) {
  cr_assert_eq(dt_tensor_ndim(t), ndim, "ndim %d, expected %d", dt_tensor_ndim(t), ndim);
  for (int i = 0; i < ndim; i++) {
    cr_assert_eq(dt_tensor_shape(t)[i], shape[i], "dim %d: %lld, expected %lld", i,
                 (long long)dt_tensor_shape(t)[i], (long long)shape[i]);
  }
}

/* Writing through the view at out_index must change the base at in_index. */
static inline void check_write_through(dt_tensor *base, dt_tensor *view, const int64_t *out_index,
                                       const int64_t *in_index) {
  cr_assert(dt_tensor_shares_storage(base, view));
  cr_assert_eq(dt_tensor_set(view, out_index, 77), DT_OK);
  double v = 0;
  cr_assert_eq(dt_tensor_get(base, in_index, &v), DT_OK);
  cr_assert_eq(v, 77);
}

/* narrow/slice/select/split as an index map: output index i along dim reads start + i*step. */
typedef struct slice_ctx {
  int ndim, dim;
  int64_t start, step;
  bool select; /* the output lacks dim */
} slice_ctx;

static inline void slice_map(const int64_t *oi, int64_t *ii, const void *opaque) {
  const slice_ctx *c = opaque;
  for (int i = 0, j = 0; i < c->ndim; i++) {
    if (i == c->dim)
      ii[i] = c->start + (c->select ? 0 : oi[j++] * c->step);
    else
      ii[i] = oi[j++];
  }
}

#endif /* DT_TESTS_VIEW_HELPERS_H */
