#include "reference.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

dt_tensor *ref_tensor(int ndim, const int64_t *shape, dt_dtype dtype, const double *values) {
  dt_tensor *t = NULL;
  cr_assert_eq(dt_empty(ndim, shape, dtype, &t), DT_OK, "%s", dt_last_error());
  int64_t n = dt_tensor_numel(t);
  int64_t index[DT_MAX_DIMS];
  for (int64_t i = 0; i < n; i++) {
    ref_unravel(i, ndim, shape, index);
    cr_assert_eq(dt_tensor_set(t, index, values[i]), DT_OK);
  }
  return t;
}

static uint64_t next(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static double *random_values(int64_t n, dt_dtype dtype, double lo, double hi, uint64_t seed) {
  double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
  uint64_t state = seed;
  for (int64_t i = 0; i < n; i++) {
    double u = (double)(next(&state) >> 11) / 9007199254740992.0;
    double x = lo + (hi - lo) * u;
    if (!dt_dtype_is_floating(dtype)) x = floor(x);
    if (dtype == DT_BOOL) x = x >= (lo + hi) / 2;
    if (dtype == DT_BF16) x = dt_bf16_to_f32(dt_f32_to_bf16((float)x));
    if (dtype == DT_F16) x = dt_f16_to_f32(dt_f32_to_f16((float)x));
    if (dtype == DT_F32) x = (float)x;
    v[i] = x;
  }
  return v;
}

dt_tensor *ref_random(int ndim, const int64_t *shape, dt_dtype dtype, double lo, double hi,
                      uint64_t seed) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  double *v = random_values(n, dtype, lo, hi, seed);
  dt_tensor *t = ref_tensor(ndim, shape, dtype, v);
  free(v);
  return t;
}

dt_tensor *ref_random_strided(int ndim, const int64_t *shape, dt_dtype dtype, double lo, double hi,
                              uint64_t seed) {
  cr_assert_geq(ndim, 2);
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  double *v = random_values(n, dtype, lo, hi, seed);
  /* Storage laid out with the last two dims swapped. */
  int64_t tshape[DT_MAX_DIMS];
  memcpy(tshape, shape, sizeof(int64_t) * (size_t)ndim);
  tshape[ndim - 1] = shape[ndim - 2];
  tshape[ndim - 2] = shape[ndim - 1];
  dt_tensor *base = NULL;
  cr_assert_eq(dt_empty(ndim, tshape, dtype, &base), DT_OK);
  int64_t index[DT_MAX_DIMS];
  for (int64_t i = 0; i < n; i++) {
    ref_unravel(i, ndim, shape, index);
    int64_t tmp = index[ndim - 1];
    index[ndim - 1] = index[ndim - 2];
    index[ndim - 2] = tmp;
    cr_assert_eq(dt_tensor_set(base, index, v[i]), DT_OK);
  }
  dt_tensor *t = NULL;
  cr_assert_eq(dt_transpose(base, -1, -2, &t), DT_OK, "%s", dt_last_error());
  dt_tensor_release(base);
  free(v);
  return t;
}

double *ref_values(const dt_tensor *t) {
  int64_t n = dt_tensor_numel(t);
  double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
  cr_assert_eq(dt_tensor_to_doubles(t, v, n), DT_OK);
  return v;
}

void ref_unravel(int64_t flat, int ndim, const int64_t *shape, int64_t *index) {
  for (int i = ndim - 1; i >= 0; i--) {
    index[i] = shape[i] ? flat % shape[i] : 0;
    flat = shape[i] ? flat / shape[i] : 0;
  }
}

int64_t ref_ravel(int ndim, const int64_t *shape, const int64_t *index) {
  int64_t flat = 0;
  for (int i = 0; i < ndim; i++) flat = flat * shape[i] + index[i];
  return flat;
}

double ref_broadcast_get(const double *values, int ndim, const int64_t *shape, int out_ndim,
                         const int64_t *out_index) {
  int64_t index[DT_MAX_DIMS];
  for (int i = 0; i < ndim; i++) {
    int64_t oi = out_index[out_ndim - ndim + i];
    index[i] = shape[i] == 1 ? 0 : oi;
  }
  return values[ref_ravel(ndim, shape, index)];
}

void ref_assert_close(const dt_tensor *t, int ndim, const int64_t *shape, dt_dtype dtype,
                      const double *expected, double rtol, double atol) {
  cr_assert_not_null(t);
  cr_assert_eq(dt_tensor_ndim(t), ndim, "ndim %d, expected %d", dt_tensor_ndim(t), ndim);
  for (int i = 0; i < ndim; i++) {
    cr_assert_eq(dt_tensor_shape(t)[i], shape[i], "dim %d: %lld, expected %lld", i,
                 (long long)dt_tensor_shape(t)[i], (long long)shape[i]);
  }
  cr_assert_eq(dt_tensor_dtype(t), dtype, "dtype %s, expected %s",
               dt_dtype_name(dt_tensor_dtype(t)), dt_dtype_name(dtype));
  double *v = ref_values(t);
  int64_t n = dt_tensor_numel(t);
  for (int64_t i = 0; i < n; i++) {
    if (isnan(expected[i])) {
      cr_assert(isnan(v[i]), "element %lld: %g, expected nan", (long long)i, v[i]);
      continue;
    }
    if (isinf(expected[i])) {
      cr_assert_eq(v[i], expected[i], "element %lld: %g, expected %g", (long long)i, v[i],
                   expected[i]);
      continue;
    }
    double tol = atol + rtol * fabs(expected[i]);
    cr_assert(fabs(v[i] - expected[i]) <= tol, "element %lld: %.10g, expected %.10g (tol %g)",
              (long long)i, v[i], expected[i], tol);
  }
  free(v);
}

void ref_assert_error_mentions(const char *a, const char *b) {
  const char *msg = dt_last_error();
  if (a) cr_assert(strstr(msg, a), "error '%s' does not mention '%s'", msg, a);
  if (b) cr_assert(strstr(msg, b), "error '%s' does not mention '%s'", msg, b);
}
