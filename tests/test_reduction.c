/* Reductions against hand-computed values and a naive reference loop over random shapes,
 * dims, dtypes and strides; accuracy of long float32 sums; bad input for every op. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "reference.h"

/* A non-NULL shape for 0-d tensors: dt_empty copies the shape even when ndim is 0. */
static const int64_t scalar_shape[1] = {1};

/* ---- Hand-computed values ------------------------------------------------------------------ */

Test(reduction, hand_computed_full) {
  int64_t shape[] = {2, 3};
  dt_tensor *a = ref_tensor(2, shape, DT_F32, (double[]){1, 5, 3, 4, 2, 6});
  dt_tensor *out = NULL;
  cr_assert_eq(dt_sum(a, &out), DT_OK, "%s", dt_last_error());
  ref_assert_close(out, 0, NULL, DT_F32, (double[]){21}, 0, 0);
  dt_tensor_release(out);
  cr_assert_eq(dt_mean(a, &out), DT_OK);
  ref_assert_close(out, 0, NULL, DT_F32, (double[]){3.5}, 0, 0);
  dt_tensor_release(out);
  cr_assert_eq(dt_max(a, &out), DT_OK);
  ref_assert_close(out, 0, NULL, DT_F32, (double[]){6}, 0, 0);
  dt_tensor_release(out);
  cr_assert_eq(dt_min(a, &out), DT_OK);
  ref_assert_close(out, 0, NULL, DT_F32, (double[]){1}, 0, 0);
  dt_tensor_release(out);
  cr_assert_eq(dt_argmax(a, &out), DT_OK);
  ref_assert_close(out, 0, NULL, DT_I64, (double[]){5}, 0, 0);
  dt_tensor_release(out);
  dt_tensor_release(a);
}

Test(reduction, hand_computed_dims) {
  int64_t shape[] = {2, 3};
  dt_tensor *a = ref_tensor(2, shape, DT_F64, (double[]){3, 1, 3, 2, 2, 0});
  dt_tensor *out = NULL, *idx = NULL;
  cr_assert_eq(dt_sum_dims(a, 1, (int64_t[]){0}, false, &out), DT_OK);
  ref_assert_close(out, 1, (int64_t[]){3}, DT_F64, (double[]){5, 3, 3}, 0, 0);
  dt_tensor_release(out);
  cr_assert_eq(dt_sum_dims(a, 1, (int64_t[]){-1}, true, &out), DT_OK);
  ref_assert_close(out, 2, (int64_t[]){2, 1}, DT_F64, (double[]){7, 4}, 0, 0);
  dt_tensor_release(out);
  cr_assert_eq(dt_mean_dims(a, 2, (int64_t[]){1, 0}, true, &out), DT_OK);
  ref_assert_close(out, 2, (int64_t[]){1, 1}, DT_F64, (double[]){11.0 / 6}, 1e-15, 0);
  dt_tensor_release(out);
  cr_assert_eq(dt_amax(a, 1, (int64_t[]){1}, false, &out), DT_OK);
  ref_assert_close(out, 1, (int64_t[]){2}, DT_F64, (double[]){3, 2}, 0, 0);
  dt_tensor_release(out);
  cr_assert_eq(dt_amin(a, 0, NULL, false, &out), DT_OK);
  ref_assert_close(out, 0, NULL, DT_F64, (double[]){0}, 0, 0);
  dt_tensor_release(out);
  /* Ties: the first occurrence wins. */
  cr_assert_eq(dt_max_dim(a, 1, false, &out, &idx), DT_OK, "%s", dt_last_error());
  ref_assert_close(out, 1, (int64_t[]){2}, DT_F64, (double[]){3, 2}, 0, 0);
  ref_assert_close(idx, 1, (int64_t[]){2}, DT_I64, (double[]){0, 0}, 0, 0);
  dt_tensor_release(out);
  dt_tensor_release(idx);
  cr_assert_eq(dt_min_dim(a, 0, true, &out, &idx), DT_OK);
  ref_assert_close(out, 2, (int64_t[]){1, 3}, DT_F64, (double[]){2, 1, 0}, 0, 0);
  ref_assert_close(idx, 2, (int64_t[]){1, 3}, DT_I64, (double[]){1, 0, 1}, 0, 0);
  dt_tensor_release(out);
  dt_tensor_release(idx);
  cr_assert_eq(dt_argmax_dim(a, 0, false, &out), DT_OK);
  ref_assert_close(out, 1, (int64_t[]){3}, DT_I64, (double[]){0, 1, 0}, 0, 0);
  dt_tensor_release(out);
  dt_tensor_release(a);
}

Test(reduction, integer_and_bool_sums_are_int64) {
  dt_tensor *a = ref_tensor(1, (int64_t[]){4}, DT_BOOL, (double[]){1, 0, 1, 1});
  dt_tensor *out = NULL;
  cr_assert_eq(dt_sum(a, &out), DT_OK);
  ref_assert_close(out, 0, NULL, DT_I64, (double[]){3}, 0, 0);
  dt_tensor_release(out);
  cr_assert_eq(dt_max(a, &out), DT_OK);
  ref_assert_close(out, 0, NULL, DT_BOOL, (double[]){1}, 0, 0);
  dt_tensor_release(out);
  dt_tensor_release(a);
  /* int32 values whose sum overflows int32 and int64 values beyond double's 53 bits. */
  int32_t i32[] = {2000000000, 2000000000, 2000000000};
  cr_assert_eq(dt_from_data(i32, 1, (int64_t[]){3}, DT_I32, &a), DT_OK);
  cr_assert_eq(dt_sum(a, &out), DT_OK);
  cr_assert_eq(dt_tensor_dtype(out), DT_I64);
  cr_assert_eq(*(int64_t *)dt_tensor_data(out), 6000000000LL);
  dt_tensor_release(out);
  dt_tensor_release(a);
  int64_t i64[] = {(1LL << 60) + 1, (1LL << 60) + 3, 5};
  cr_assert_eq(dt_from_data(i64, 1, (int64_t[]){3}, DT_I64, &a), DT_OK);
  cr_assert_eq(dt_sum(a, &out), DT_OK);
  cr_assert_eq(*(int64_t *)dt_tensor_data(out), (1LL << 61) + 9);
  dt_tensor_release(out);
  cr_assert_eq(dt_max(a, &out), DT_OK);
  cr_assert_eq(*(int64_t *)dt_tensor_data(out), (1LL << 60) + 3);
  dt_tensor_release(out);
  cr_assert_eq(dt_argmax(a, &out), DT_OK);
  cr_assert_eq(*(int64_t *)dt_tensor_data(out), 1);
  dt_tensor_release(out);
  dt_tensor_release(a);
}

Test(reduction, nan_propagates_and_wins_index) {
  for (int dtype = DT_F32; dtype <= DT_F16; dtype++) {
    dt_tensor *a = ref_tensor(2, (int64_t[]){2, 10}, (dt_dtype)dtype,
                              (double[]){1,  NAN, 3,  NAN, 9,  0,  0,  0,  0, 0, /* row 1: */
                                         -1, -2,  -3, -4,  -5, -6, -7, -8, 9, NAN});
    dt_tensor *out = NULL, *idx = NULL;
    cr_assert_eq(dt_max(a, &out), DT_OK);
    ref_assert_close(out, 0, NULL, (dt_dtype)dtype, (double[]){NAN}, 0, 0);
    dt_tensor_release(out);
    cr_assert_eq(dt_argmax(a, &out), DT_OK);
    ref_assert_close(out, 0, NULL, DT_I64, (double[]){1}, 0, 0);
    dt_tensor_release(out);
    cr_assert_eq(dt_amax(a, 1, (int64_t[]){1}, false, &out), DT_OK);
    ref_assert_close(out, 1, (int64_t[]){2}, (dt_dtype)dtype, (double[]){NAN, NAN}, 0, 0);
    dt_tensor_release(out);
    cr_assert_eq(dt_amin(a, 1, (int64_t[]){0}, false, &out), DT_OK);
    ref_assert_close(out, 1, (int64_t[]){10}, (dt_dtype)dtype,
                     (double[]){-1, NAN, -3, NAN, -5, -6, -7, -8, 0, NAN}, 0, 0);
    dt_tensor_release(out);
    cr_assert_eq(dt_max_dim(a, 1, false, &out, &idx), DT_OK);
    ref_assert_close(idx, 1, (int64_t[]){2}, DT_I64, (double[]){1, 9}, 0, 0);
    dt_tensor_release(out);
    dt_tensor_release(idx);
    cr_assert_eq(dt_min_dim(a, 1, false, &out, &idx), DT_OK);
    ref_assert_close(out, 1, (int64_t[]){2}, (dt_dtype)dtype, (double[]){NAN, NAN}, 0, 0);
    ref_assert_close(idx, 1, (int64_t[]){2}, DT_I64, (double[]){1, 9}, 0, 0);
    dt_tensor_release(out);
    dt_tensor_release(idx);
    cr_assert_eq(dt_sum(a, &out), DT_OK);
    ref_assert_close(out, 0, NULL, (dt_dtype)dtype, (double[]){NAN}, 0, 0);
    dt_tensor_release(out);
    dt_tensor_release(a);
  }
}

Test(reduction, infinities) {
  dt_tensor *a = ref_tensor(1, (int64_t[]){3}, DT_F32, (double[]){-INFINITY, -INFINITY, -INFINITY});
  dt_tensor *out = NULL, *idx = NULL;
  cr_assert_eq(dt_max_dim(a, 0, false, &out, &idx), DT_OK);
  ref_assert_close(out, 0, NULL, DT_F32, (double[]){-INFINITY}, 0, 0);
  ref_assert_close(idx, 0, NULL, DT_I64, (double[]){0}, 0, 0);
  dt_tensor_release(out);
  dt_tensor_release(idx);
  cr_assert_eq(dt_sum(a, &out), DT_OK);
  ref_assert_close(out, 0, NULL, DT_F32, (double[]){-INFINITY}, 0, 0);
  dt_tensor_release(out);
  dt_tensor_release(a);
}

Test(reduction, empty_and_scalar) {
  dt_tensor *a = NULL, *out = NULL, *idx = NULL;
  cr_assert_eq(dt_zeros(2, (int64_t[]){3, 0}, DT_F32, &a), DT_OK);
  cr_assert_eq(dt_sum_dims(a, 1, (int64_t[]){1}, false, &out), DT_OK);
  ref_assert_close(out, 1, (int64_t[]){3}, DT_F32, (double[]){0, 0, 0}, 0, 0);
  dt_tensor_release(out);
  cr_assert_eq(dt_mean_dims(a, 1, (int64_t[]){1}, true, &out), DT_OK);
  ref_assert_close(out, 2, (int64_t[]){3, 1}, DT_F32, (double[]){NAN, NAN, NAN}, 0, 0);
  dt_tensor_release(out);
  /* Reducing the non-empty dim of an empty tensor gives an empty result, not an error. */
  cr_assert_eq(dt_amax(a, 1, (int64_t[]){0}, false, &out), DT_OK);
  ref_assert_close(out, 1, (int64_t[]){0}, DT_F32, NULL, 0, 0);
  dt_tensor_release(out);
  cr_assert_eq(dt_sum(a, &out), DT_OK);
  ref_assert_close(out, 0, NULL, DT_F32, (double[]){0}, 0, 0);
  dt_tensor_release(out);
  dt_tensor_release(a);

  a = ref_tensor(0, scalar_shape, DT_I32, (double[]){-7});
  cr_assert_eq(dt_sum_dims(a, 1, (int64_t[]){-1}, true, &out), DT_OK);
  ref_assert_close(out, 0, NULL, DT_I64, (double[]){-7}, 0, 0);
  dt_tensor_release(out);
  cr_assert_eq(dt_max_dim(a, 0, false, &out, &idx), DT_OK);
  ref_assert_close(out, 0, NULL, DT_I32, (double[]){-7}, 0, 0);
  ref_assert_close(idx, 0, NULL, DT_I64, (double[]){0}, 0, 0);
  dt_tensor_release(out);
  dt_tensor_release(idx);
  cr_assert_eq(dt_argmax(a, &out), DT_OK);
  ref_assert_close(out, 0, NULL, DT_I64, (double[]){0}, 0, 0);
  dt_tensor_release(out);
  dt_tensor_release(a);
}

/* ---- Naive reference ----------------------------------------------------------------------- */

typedef enum ref_kind { REF_SUM, REF_MEAN, REF_MAX, REF_MIN } ref_kind;

/* Reduces row-major values over the dims in mask; vals/idx are indexed row-major by the kept
 * dims and idx is the row-major position among the reduced dims (first occurrence, NaN
 * wins). Returns the number of outputs. */
static int64_t ref_reduce(ref_kind kind, const double *v, int ndim, const int64_t *shape,
                          unsigned mask, double *vals, int64_t *idx) {
  int64_t kshape[DT_MAX_DIMS], rshape[DT_MAX_DIMS], kindex[DT_MAX_DIMS], rindex[DT_MAX_DIMS];
  int nk = 0, nr = 0;
  for (int d = 0; d < ndim; d++) {
    if ((mask >> d) & 1u) {
      rshape[nr++] = shape[d];
    } else {
      kshape[nk++] = shape[d];
    }
  }
  int64_t n_out = 1, count = 1, n = 1;
  for (int d = 0; d < nk; d++) n_out *= kshape[d];
  for (int d = 0; d < nr; d++) count *= rshape[d];
  for (int d = 0; d < ndim; d++) n *= shape[d];
  bool *seen = calloc((size_t)(n_out ? n_out : 1), 1);
  for (int64_t o = 0; o < n_out; o++) vals[o] = 0;
  int64_t index[DT_MAX_DIMS];
  for (int64_t i = 0; i < n; i++) {
    ref_unravel(i, ndim, shape, index);
    nk = nr = 0;
    for (int d = 0; d < ndim; d++) {
      if ((mask >> d) & 1u) {
        rindex[nr++] = index[d];
      } else {
        kindex[nk++] = index[d];
      }
    }
    int64_t o = ref_ravel(nk, kshape, kindex), pos = ref_ravel(nr, rshape, rindex);
    double x = v[i];
    if (kind == REF_SUM || kind == REF_MEAN) {
      vals[o] += x;
      continue;
    }
    bool better = kind == REF_MAX ? x > vals[o] : x < vals[o];
    if (!seen[o] || (!isnan(vals[o]) && (better || isnan(x)))) {
      vals[o] = x;
      idx[o] = pos;
      seen[o] = true;
    }
  }
  if (kind == REF_MEAN) {
    for (int64_t o = 0; o < n_out; o++) vals[o] /= (double)count;
  }
  free(seen);
  return n_out;
}

static double tolerance(dt_dtype dtype) {
  switch (dtype) {
  case DT_F32: return 1e-6;
  case DT_F64: return 1e-12;
  case DT_BF16: return 1e-2;
  case DT_F16: return 2e-3;
  default: return 0;
  }
}

/* Output shape of a reduction over mask. */
static int out_shape(int ndim, const int64_t *shape, unsigned mask, bool keepdim, int64_t *out) {
  int n = 0;
  for (int d = 0; d < ndim; d++) {
    if (!((mask >> d) & 1u)) {
      out[n++] = shape[d];
    } else if (keepdim) {
      out[n++] = 1;
    }
  }
  return n;
}

/* Every dim-list op (and, for one dim, the index ops) on one input against ref_reduce. */
static void check_dims(dt_tensor *a, unsigned mask, bool keepdim) {
  int ndim = dt_tensor_ndim(a);
  const int64_t *shape = dt_tensor_shape(a);
  dt_dtype dtype = dt_tensor_dtype(a);
  double *v = ref_values(a);
  int64_t dims[DT_MAX_DIMS];
  int nd = 0;
  /* Mixed signs and descending order: neither should matter. */
  for (int d = ndim - 1; d >= 0; d--) {
    if ((mask >> d) & 1u) dims[nd++] = (d % 2) ? d - ndim : d;
  }
  int64_t oshape[DT_MAX_DIMS];
  int ond = out_shape(ndim, shape, mask, keepdim, oshape);
  int64_t n_out = dt_tensor_numel(a) + 1;
  double *expected = malloc(sizeof(double) * (size_t)n_out);
  int64_t *eidx = malloc(sizeof(int64_t) * (size_t)n_out);
  double *eidx_d = malloc(sizeof(double) * (size_t)n_out);
  dt_tensor *out = NULL, *idx = NULL;
  bool floating = dt_dtype_is_floating(dtype);
  double tol = tolerance(dtype);

  ref_reduce(REF_SUM, v, ndim, shape, mask, expected, eidx);
  cr_assert_eq(dt_sum_dims(a, nd, dims, keepdim, &out), DT_OK, "%s", dt_last_error());
  ref_assert_close(out, ond, oshape, floating ? dtype : DT_I64, expected, tol, tol);
  dt_tensor_release(out);
  if (floating) {
    ref_reduce(REF_MEAN, v, ndim, shape, mask, expected, eidx);
    cr_assert_eq(dt_mean_dims(a, nd, dims, keepdim, &out), DT_OK, "%s", dt_last_error());
    ref_assert_close(out, ond, oshape, dtype, expected, tol, tol);
    dt_tensor_release(out);
  }
  for (int k = 0; k < 2; k++) {
    ref_kind kind = k == 0 ? REF_MAX : REF_MIN;
    int64_t m = ref_reduce(kind, v, ndim, shape, mask, expected, eidx);
    for (int64_t i = 0; i < m; i++) eidx_d[i] = (double)eidx[i];
    cr_assert_eq((k == 0 ? dt_amax : dt_amin)(a, nd, dims, keepdim, &out), DT_OK, "%s",
                 dt_last_error());
    ref_assert_close(out, ond, oshape, dtype, expected, 0, 0);
    dt_tensor_release(out);
    if (nd != 1) continue;
    cr_assert_eq((k == 0 ? dt_max_dim : dt_min_dim)(a, dims[0], keepdim, &out, &idx), DT_OK);
    ref_assert_close(out, ond, oshape, dtype, expected, 0, 0);
    ref_assert_close(idx, ond, oshape, DT_I64, eidx_d, 0, 0);
    dt_tensor_release(out);
    dt_tensor_release(idx);
    if (k == 0) {
      cr_assert_eq(dt_argmax_dim(a, dims[0], keepdim, &out), DT_OK);
      ref_assert_close(out, ond, oshape, DT_I64, eidx_d, 0, 0);
      dt_tensor_release(out);
    }
  }
  free(expected);
  free(eidx);
  free(eidx_d);
  free(v);
}

/* The full reductions (0-d results) against ref_reduce over every dim. */
static void check_full(dt_tensor *a) {
  int ndim = dt_tensor_ndim(a);
  const int64_t *shape = dt_tensor_shape(a);
  dt_dtype dtype = dt_tensor_dtype(a);
  double *v = ref_values(a);
  unsigned all = (1u << ndim) - 1u;
  double e[1], ed[1];
  int64_t ei[1];
  dt_tensor *out = NULL;
  bool floating = dt_dtype_is_floating(dtype);
  double tol = tolerance(dtype);
  ref_reduce(REF_SUM, v, ndim, shape, all, e, ei);
  cr_assert_eq(dt_sum(a, &out), DT_OK);
  ref_assert_close(out, 0, NULL, floating ? dtype : DT_I64, e, tol, tol);
  dt_tensor_release(out);
  if (floating) {
    ref_reduce(REF_MEAN, v, ndim, shape, all, e, ei);
    cr_assert_eq(dt_mean(a, &out), DT_OK);
    ref_assert_close(out, 0, NULL, dtype, e, tol, tol);
    dt_tensor_release(out);
  }
  ref_reduce(REF_MIN, v, ndim, shape, all, e, ei);
  cr_assert_eq(dt_min(a, &out), DT_OK);
  ref_assert_close(out, 0, NULL, dtype, e, 0, 0);
  dt_tensor_release(out);
  ref_reduce(REF_MAX, v, ndim, shape, all, e, ei);
  cr_assert_eq(dt_max(a, &out), DT_OK);
  ref_assert_close(out, 0, NULL, dtype, e, 0, 0);
  dt_tensor_release(out);
  ed[0] = (double)ei[0];
  cr_assert_eq(dt_argmax(a, &out), DT_OK);
  ref_assert_close(out, 0, NULL, DT_I64, ed, 0, 0);
  dt_tensor_release(out);
  free(v);
}

static dt_tensor *random_input(int ndim, const int64_t *shape, dt_dtype dtype, bool strided,
                               uint64_t seed) {
  /* Small integer ranges make ties, which exercise first-occurrence indices. */
  double lo = dtype == DT_BOOL ? 0 : dt_dtype_is_floating(dtype) ? -10 : -5;
  double hi = dtype == DT_BOOL ? 2 : dt_dtype_is_floating(dtype) ? 10 : 5;
  return strided && ndim >= 2 ? ref_random_strided(ndim, shape, dtype, lo, hi, seed)
                              : ref_random(ndim, shape, dtype, lo, hi, seed);
}

static const dt_dtype all_dtypes[] = {DT_F32, DT_F64, DT_BF16, DT_F16,
                                      DT_I64, DT_I32, DT_U8,   DT_BOOL};
#define N_DTYPES (sizeof all_dtypes / sizeof *all_dtypes)

Test(reduction, every_subset_of_a_3d_tensor) {
  int64_t shape[] = {5, 3, 7};
  for (size_t t = 0; t < N_DTYPES; t++) {
    for (int strided = 0; strided < 2; strided++) {
      dt_tensor *a = random_input(3, shape, all_dtypes[t], strided, 100 + t);
      for (unsigned mask = 1; mask < 8; mask++) {
        check_dims(a, mask, false);
        check_dims(a, mask, true);
      }
      check_full(a);
      dt_tensor_release(a);
    }
  }
}

Test(reduction, random_shapes) {
  static const int64_t shapes[][4] = {{7},       {5, 3},       {1, 9},       {9, 1},
                                      {3, 4, 5}, {2, 3, 1, 5}, {3, 1, 4, 2}, {4, 11, 2, 3},
                                      {13, 300}, {3, 5, 300}};
  static const int ndims[] = {1, 2, 2, 2, 3, 4, 4, 4, 2, 3};
  for (size_t s = 0; s < sizeof ndims / sizeof *ndims; s++) {
    int nd = ndims[s];
    for (size_t t = 0; t < N_DTYPES; t += (nd == 4 ? 1 : 3)) {
      for (int strided = 0; strided < 2; strided++) {
        dt_tensor *a = random_input(nd, shapes[s], all_dtypes[t], strided, s * 31 + t);
        for (unsigned mask = 1; mask < (1u << nd); mask++) check_dims(a, mask, mask & 1u);
        check_full(a);
        dt_tensor_release(a);
      }
    }
  }
}

Test(reduction, broadcast_view_and_offset_view) {
  /* A stride-0 broadcast view of 6 floats and a view at an offset into a larger buffer,
   * both wrapped over caller memory. */
  float row[6] = {2.5f, -1, 7, 7, -3, 0.5f};
  dt_tensor *e = NULL;
  cr_assert_eq(dt_wrap(row, sizeof row, 3, (int64_t[]){4, 5, 6}, (int64_t[]){0, 0, 1}, DT_F32, &e),
               DT_OK);
  for (unsigned mask = 1; mask < 8; mask++) check_dims(e, mask, mask & 2u);
  check_full(e);
  dt_tensor_release(e);
  double big[4 * 9 * 5];
  for (int i = 0; i < 4 * 9 * 5; i++) big[i] = (double)((i * 37) % 23) - 11.5;
  cr_assert_eq(dt_wrap(big + 10, sizeof big - 10 * sizeof big[0], 3, (int64_t[]){4, 5, 5},
                       (int64_t[]){45, 5, 1}, DT_F64, &e),
               DT_OK);
  for (unsigned mask = 1; mask < 8; mask++) check_dims(e, mask, false);
  check_full(e);
  dt_tensor_release(e);
}

Test(reduction, million_f32_sum_is_accurate) {
  int64_t n = 1000000;
  dt_tensor *a = NULL, *out = NULL, *t = NULL;
  cr_assert_eq(dt_rand(1, &n, DT_F32, 42, &a), DT_OK);
  const float *p = dt_tensor_data(a);
  double exact = 0;
  for (int64_t i = 0; i < n; i++) exact += p[i];
  cr_assert_eq(dt_sum(a, &out), DT_OK);
  double got = *(const float *)dt_tensor_data(out);
  /* Only the final rounding to float32 may differ (half an ulp, ~3e-8 relative). */
  cr_assert(fabs(got - exact) <= 6e-8 * exact, "sum %.9g vs %.9g", got, exact);
  dt_tensor_release(out);
  cr_assert_eq(dt_mean(a, &out), DT_OK);
  got = *(const float *)dt_tensor_data(out);
  cr_assert(fabs(got - exact / (double)n) <= 6e-8 * exact / (double)n);
  dt_tensor_release(out);
  /* The same through the strided path: the data seen as a transposed [1000, 1000]. */
  cr_assert_eq(dt_wrap((void *)p, (size_t)n * sizeof *p, 2, (int64_t[]){1000, 1000},
                       (int64_t[]){1, 1000}, DT_F32, &t),
               DT_OK);
  cr_assert_eq(dt_sum_dims(t, 0, NULL, false, &out), DT_OK);
  got = *(const float *)dt_tensor_data(out);
  cr_assert(fabs(got - exact) <= 6e-8 * exact, "strided sum %.9g vs %.9g", got, exact);
  dt_tensor_release(out);
  dt_tensor_release(t);
  dt_tensor_release(a);
}

/* ---- Bad input ------------------------------------------------------------------------------ */

#define EXPECT_FAIL(call, status, op, detail)                                                      \
  do {                                                                                             \
    out = (dt_tensor *)0x1;                                                                        \
    cr_assert_eq((call), (status), "%s", dt_last_error());                                         \
    cr_assert_null(out);                                                                           \
    ref_assert_error_mentions(op, detail);                                                         \
  } while (0)

Test(reduction, bad_input) {
  dt_tensor *a = ref_random(2, (int64_t[]){2, 3}, DT_F32, 0, 1, 1);
  dt_tensor *ia = ref_random(2, (int64_t[]){2, 3}, DT_I64, 0, 5, 1);
  dt_tensor *empty = NULL, *out, *idx;
  cr_assert_eq(dt_zeros(2, (int64_t[]){2, 0}, DT_F32, &empty), DT_OK);
  EXPECT_FAIL(dt_sum_dims(a, 1, (int64_t[]){2}, false, &out), DT_ERR_INVALID, "sum.dim_IntList",
              "dim 2");
  EXPECT_FAIL(dt_sum_dims(a, 2, (int64_t[]){1, -1}, false, &out), DT_ERR_INVALID, "sum.dim_IntList",
              "more than once");
  EXPECT_FAIL(dt_sum_dims(a, 1, NULL, false, &out), DT_ERR_INVALID, "sum.dim_IntList", "NULL");
  EXPECT_FAIL(dt_sum_dims(a, -1, NULL, false, &out), DT_ERR_INVALID, "sum.dim_IntList", "-1");
  EXPECT_FAIL(dt_sum(NULL, &out), DT_ERR_INVALID, "sum", "NULL");
  EXPECT_FAIL(dt_mean(ia, &out), DT_ERR_DTYPE, "mean", "int64");
  EXPECT_FAIL(dt_mean_dims(ia, 1, (int64_t[]){0}, false, &out), DT_ERR_DTYPE, "mean.dim", "int64");
  EXPECT_FAIL(dt_mean_dims(a, 1, (int64_t[]){-3}, false, &out), DT_ERR_INVALID, "mean.dim", "-3");
  EXPECT_FAIL(dt_amax(a, 3, (int64_t[]){0, 1, 0}, true, &out), DT_ERR_INVALID, "amax",
              "more than once");
  EXPECT_FAIL(dt_amin(a, 1, (int64_t[]){5}, true, &out), DT_ERR_INVALID, "amin", "dim 5");
  EXPECT_FAIL(dt_amax(empty, 1, (int64_t[]){1}, false, &out), DT_ERR_INVALID, "amax",
              "zero-size dim");
  EXPECT_FAIL(dt_max(empty, &out), DT_ERR_INVALID, "max", "zero-size dim");
  EXPECT_FAIL(dt_min(empty, &out), DT_ERR_INVALID, "min", "zero-size dim");
  EXPECT_FAIL(dt_argmax(empty, &out), DT_ERR_INVALID, "argmax", "zero-size dim");
  EXPECT_FAIL(dt_argmax_dim(a, 2, false, &out), DT_ERR_INVALID, "argmax", "dim 2");
  EXPECT_FAIL(dt_argmax_dim(empty, -1, false, &out), DT_ERR_INVALID, "argmax", "[2, 0]");
  EXPECT_FAIL(dt_max(NULL, &out), DT_ERR_INVALID, "max", "input 0");
  cr_assert_eq(dt_sum(a, NULL), DT_ERR_INVALID);
  ref_assert_error_mentions("sum", "out");

  idx = (dt_tensor *)0x1;
  EXPECT_FAIL(dt_max_dim(a, 7, false, &out, &idx), DT_ERR_INVALID, "max.dim", "dim 7");
  cr_assert_null(idx);
  idx = (dt_tensor *)0x1;
  EXPECT_FAIL(dt_min_dim(empty, 1, true, &out, &idx), DT_ERR_INVALID, "min.dim", "zero-size dim");
  cr_assert_null(idx);
  EXPECT_FAIL(dt_max_dim(a, 0, false, &out, NULL), DT_ERR_INVALID, "max.dim", "indices");
  idx = (dt_tensor *)0x1;
  cr_assert_eq(dt_min_dim(a, 0, false, NULL, &idx), DT_ERR_INVALID);
  cr_assert_null(idx);
  ref_assert_error_mentions("min.dim", "values");
  idx = (dt_tensor *)0x1;
  EXPECT_FAIL(dt_min_dim(NULL, 0, false, &out, &idx), DT_ERR_INVALID, "min.dim", "NULL");
  cr_assert_null(idx);
  dt_tensor_release(a);
  dt_tensor_release(ia);
  dt_tensor_release(empty);
}

Test(reduction, op_table_names) {
  const char *want[] = {"sum", "sum.dim_IntList", "mean", "mean.dim", "max",   "max.dim",
                        "min", "min.dim",         "amax", "amin",     "argmax"};
  for (size_t w = 0; w < sizeof want / sizeof *want; w++) {
    bool found = false;
    for (int i = 0; i < dt_op_count(); i++) found = found || strcmp(dt_op_name(i), want[w]) == 0;
    cr_assert(found, "op %s is missing from the table", want[w]);
  }
}
