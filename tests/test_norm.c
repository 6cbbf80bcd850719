/* softmax, log_softmax, layer_norm and batch_norm against hand-computed values and naive
 * reference loops over random shapes, dims, dtypes and strides; bad input for every op. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "reference.h"

/* A non-NULL shape for 0-d tensors: dt_empty copies the shape even when ndim is 0. */
static const int64_t scalar_shape[1] = {1};

static double tolerance(dt_dtype dtype) {
  switch (dtype) {
  case DT_F32: return 1e-5;
  case DT_F64: return 1e-12;
  case DT_BF16: return 2e-2;
  case DT_F16: return 2e-3;
  default: return 0;
  }
}

/* ---- softmax ------------------------------------------------------------------------------- */

Test(softmax, hand_computed) {
  dt_tensor *a = ref_tensor(2, (int64_t[]){2, 3}, DT_F32, (double[]){1, 2, 3, 1000, 1001, 1000});
  dt_tensor *out = NULL;
  cr_assert_eq(dt_softmax(a, -1, &out), DT_OK, "%s", dt_last_error());
  ref_assert_close(
      out, 2, (int64_t[]){2, 3}, DT_F32,
      (double[]){0.09003057, 0.24472847, 0.66524096, 0.21194156, 0.57611688, 0.21194156}, 1e-6,
      1e-7);
  dt_tensor_release(out);
  cr_assert_eq(dt_log_softmax(a, 1, &out), DT_OK);
  ref_assert_close(
      out, 2, (int64_t[]){2, 3}, DT_F32,
      (double[]){-2.40760596, -1.40760596, -0.40760596, -1.55144471, -0.55144471, -1.55144471},
      1e-6, 1e-6);
  dt_tensor_release(out);
  cr_assert_eq(dt_softmax(a, 0, &out), DT_OK);
  ref_assert_close(out, 2, (int64_t[]){2, 3}, DT_F32, (double[]){0, 0, 0, 1, 1, 1}, 0, 1e-30);
  dt_tensor_release(out);
  dt_tensor_release(a);
  /* A NaN poisons its own line only. */
  a = ref_tensor(2, (int64_t[]){2, 2}, DT_F64, (double[]){NAN, 0, 0, 0});
  cr_assert_eq(dt_softmax(a, 1, &out), DT_OK);
  ref_assert_close(out, 2, (int64_t[]){2, 2}, DT_F64, (double[]){NAN, NAN, 0.5, 0.5}, 0, 1e-15);
  dt_tensor_release(out);
  dt_tensor_release(a);
  /* A 0-d tensor is a line of one element. */
  a = ref_tensor(0, scalar_shape, DT_F32, (double[]){3});
  cr_assert_eq(dt_softmax(a, 0, &out), DT_OK);
  ref_assert_close(out, 0, NULL, DT_F32, (double[]){1}, 0, 0);
  dt_tensor_release(out);
  cr_assert_eq(dt_log_softmax(a, -1, &out), DT_OK);
  ref_assert_close(out, 0, NULL, DT_F32, (double[]){0}, 0, 0);
  dt_tensor_release(out);
  dt_tensor_release(a);
}

static void check_softmax(dt_tensor *a, int dim, bool take_log) {
  int ndim = dt_tensor_ndim(a);
  const int64_t *shape = dt_tensor_shape(a);
  int64_t n = dt_tensor_numel(a), index[DT_MAX_DIMS];
  double *v = ref_values(a), *expected = malloc(sizeof(double) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; i++) {
    ref_unravel(i, ndim, shape, index);
    int64_t stride = 1;
    for (int d = ndim - 1; d > dim; d--) stride *= shape[d];
    int64_t first = i - index[dim] * stride;
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < shape[dim]; j++) m = fmax(m, v[first + j * stride]);
    for (int64_t j = 0; j < shape[dim]; j++) s += exp(v[first + j * stride] - m);
    expected[i] = take_log ? v[i] - m - log(s) : exp(v[i] - m) / s;
  }
  dt_tensor *out = NULL;
  cr_assert_eq((take_log ? dt_log_softmax : dt_softmax)(a, dim - (dim % 2) * ndim, &out), DT_OK,
               "%s", dt_last_error());
  double tol = tolerance(dt_tensor_dtype(a));
  ref_assert_close(out, ndim, shape, dt_tensor_dtype(a), expected, tol, tol);
  dt_tensor_release(out);
  free(v);
  free(expected);
}

Test(softmax, reference_shapes_dims_dtypes_strides) {
  static const int64_t shapes[][4] = {{7}, {5, 3}, {3, 4, 5}, {2, 3, 1, 5}, {3, 37}, {1, 4, 2, 9}};
  static const int ndims[] = {1, 2, 3, 4, 2, 4};
  static const dt_dtype dtypes[] = {DT_F32, DT_F64, DT_BF16, DT_F16};
  for (size_t s = 0; s < sizeof ndims / sizeof *ndims; s++) {
    for (size_t t = 0; t < 4; t++) {
      for (int strided = 0; strided < 2; strided++) {
        if (strided && ndims[s] < 2) continue;
        dt_tensor *a = strided ? ref_random_strided(ndims[s], shapes[s], dtypes[t], -8, 8, s + t)
                               : ref_random(ndims[s], shapes[s], dtypes[t], -8, 8, s + t);
        for (int dim = 0; dim < ndims[s]; dim++) {
          check_softmax(a, dim, false);
          check_softmax(a, dim, true);
        }
        dt_tensor_release(a);
      }
    }
  }
}

/* Packed float32 rows (contiguous, the last dim) take one function for all rows; a narrowed
 * view of a wider buffer (rows not packed) the line-by-line path. Both give the same bits
 * (the same maximum, exp and blocked sum), close to the double reference, with the
 * specials: a NaN of either sign poisons its row, an all -inf row is NaN (as PyTorch), an
 * +inf takes the row's weight (its exp(inf - inf) is NaN: NaN row, as PyTorch). */
Test(softmax, packed_rows_match_the_line_path_and_the_reference) {
  const int64_t rows = 40, n = 256, wide = 300;
  dt_tensor *buf = ref_random(2, (int64_t[]){rows, wide}, DT_F32, -10, 10, 7);
  float *p = dt_tensor_data(buf);
  uint32_t neg_nan_bits = 0xffc00000u;
  float neg_nan;
  memcpy(&neg_nan, &neg_nan_bits, sizeof neg_nan);
  p[1 * wide + 17] = NAN;
  p[2 * wide + 255] = neg_nan;
  for (int64_t i = 0; i < n; i++) p[3 * wide + i] = -INFINITY;
  p[4 * wide + 3] = INFINITY;
  p[5 * wide + 100] = 1000.0f; /* one term dominates: the rest underflow */
  p[6 * wide + 0] = -1e30f;
  dt_tensor *view = NULL, *packed = NULL, *y_view = NULL, *y_packed = NULL;
  cr_assert_eq(dt_narrow(buf, 1, 0, n, &view), DT_OK);
  cr_assert_eq(dt_contiguous(view, &packed), DT_OK);
  cr_assert_eq(dt_softmax(view, 1, &y_view), DT_OK);
  cr_assert_eq(dt_softmax(packed, -1, &y_packed), DT_OK);
  const float *a = dt_tensor_data(y_view), *b = dt_tensor_data(y_packed);
  const float *x = dt_tensor_data(packed);
  for (int64_t r = 0; r < rows; r++) {
    double m = -INFINITY, s = 0;
    bool nan = false;
    for (int64_t i = 0; i < n; i++) nan |= isnan(x[r * n + i]), m = fmax(m, x[r * n + i]);
    for (int64_t i = 0; i < n; i++) s += exp((double)x[r * n + i] - m);
    for (int64_t i = 0; i < n; i++) {
      int64_t k = r * n + i;
      cr_assert(memcmp(&a[k], &b[k], sizeof(float)) == 0 || (isnan(a[k]) && isnan(b[k])),
                "row %lld, %lld: line path %.9g, packed %.9g", (long long)r, (long long)i,
                (double)a[k], (double)b[k]);
      double want = exp((double)x[k] - m) / s;
      if (nan || isinf(m)) {
        cr_assert(isnan(b[k]), "row %lld: NaN expected, got %.9g", (long long)r, (double)b[k]);
      } else {
        /* x - m rounds in float32: half an ulp of |x - m| relative, then a few ulp. */
        double rel = 4e-7 + 6e-8 * fabs((double)x[k] - m);
        cr_assert(fabs((double)b[k] - want) <= rel * want + 1e-38, "row %lld, %lld: %.9g vs %.9g",
                  (long long)r, (long long)i, (double)b[k], want);
      }
    }
  }
  dt_tensor *all[] = {buf, view, packed, y_view, y_packed};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) dt_tensor_release(all[i]);
}

/* ---- layer_norm ---------------------------------------------------------------------------- */

Test(layer_norm, hand_computed) {
  dt_tensor *x = ref_tensor(2, (int64_t[]){2, 3}, DT_F32, (double[]){1, 2, 3, 4, 6, 8});
  dt_tensor *w = ref_tensor(1, (int64_t[]){3}, DT_F32, (double[]){1, 2, 3});
  dt_tensor *b = ref_tensor(1, (int64_t[]){3}, DT_F32, (double[]){0, 1, 0});
  dt_tensor *out = NULL;
  double r = sqrt(1.5); /* (x - mean) / sqrt(biased var) = -r, 0, r in both rows */
  cr_assert_eq(dt_layer_norm(x, 1, (int64_t[]){3}, NULL, NULL, 0, &out), DT_OK, "%s",
               dt_last_error());
  ref_assert_close(out, 2, (int64_t[]){2, 3}, DT_F32, (double[]){-r, 0, r, -r, 0, r}, 1e-6, 1e-7);
  dt_tensor_release(out);
  cr_assert_eq(dt_layer_norm(x, 1, (int64_t[]){3}, w, b, 0, &out), DT_OK);
  ref_assert_close(out, 2, (int64_t[]){2, 3}, DT_F32, (double[]){-r, 1, 3 * r, -r, 1, 3 * r}, 1e-6,
                   1e-7);
  dt_tensor_release(out);
  /* Over both dims: mean 4, biased variance (9 + 4 + 1 + 0 + 4 + 16) / 6. */
  cr_assert_eq(dt_layer_norm(x, 2, (int64_t[]){2, 3}, NULL, NULL, 1e-5, &out), DT_OK);
  double rs = 1 / sqrt(34.0 / 6 + 1e-5);
  ref_assert_close(out, 2, (int64_t[]){2, 3}, DT_F32,
                   (double[]){-3 * rs, -2 * rs, -1 * rs, 0, 2 * rs, 4 * rs}, 1e-6, 1e-7);
  dt_tensor_release(out);
  dt_tensor_release(x);
  dt_tensor_release(w);
  dt_tensor_release(b);
}

static void check_layer_norm(dt_tensor *x, int k, dt_tensor *w, dt_tensor *b, double eps) {
  int ndim = dt_tensor_ndim(x);
  const int64_t *shape = dt_tensor_shape(x);
  int64_t len = 1, n = dt_tensor_numel(x);
  for (int d = ndim - k; d < ndim; d++) len *= shape[d];
  double *v = ref_values(x), *expected = malloc(sizeof(double) * (size_t)(n ? n : 1));
  double *wv = w ? ref_values(w) : NULL, *bv = b ? ref_values(b) : NULL;
  for (int64_t row = 0; row * len < n; row++) {
    const double *p = v + row * len;
    double mean = 0, var = 0;
    for (int64_t i = 0; i < len; i++) mean += p[i];
    mean /= (double)len;
    for (int64_t i = 0; i < len; i++) var += (p[i] - mean) * (p[i] - mean);
    var /= (double)len;
    for (int64_t i = 0; i < len; i++) {
      expected[row * len + i] =
          (p[i] - mean) / sqrt(var + eps) * (wv ? wv[i] : 1.0) + (bv ? bv[i] : 0.0);
    }
  }
  dt_tensor *out = NULL;
  cr_assert_eq(dt_layer_norm(x, k, shape + ndim - k, w, b, eps, &out), DT_OK, "%s",
               dt_last_error());
  double tol = tolerance(dt_tensor_dtype(x));
  ref_assert_close(out, ndim, shape, dt_tensor_dtype(x), expected, tol, tol * 4);
  dt_tensor_release(out);
  free(v);
  free(wv);
  free(bv);
  free(expected);
}

Test(layer_norm, reference_shapes_dtypes_strides) {
  static const int64_t shapes[][4] = {{7}, {5, 3}, {3, 4, 5}, {2, 3, 1, 5}, {3, 67}};
  static const int ndims[] = {1, 2, 3, 4, 2};
  static const dt_dtype dtypes[] = {DT_F32, DT_F64, DT_BF16, DT_F16};
  for (size_t s = 0; s < sizeof ndims / sizeof *ndims; s++) {
    int nd = ndims[s];
    for (size_t t = 0; t < 4; t++) {
      for (int strided = 0; strided < 2; strided++) {
        if (strided && nd < 2) continue;
        dt_tensor *x = strided ? ref_random_strided(nd, shapes[s], dtypes[t], -5, 9, s * 7 + t)
                               : ref_random(nd, shapes[s], dtypes[t], -5, 9, s * 7 + t);
        for (int k = 1; k <= nd; k++) {
          const int64_t *ns = shapes[s] + nd - k;
          dt_tensor *w = strided && k >= 2 ? ref_random_strided(k, ns, DT_F32, 0.5, 2, 3)
                                           : ref_random(k, ns, dtypes[t], 0.5, 2, 3);
          dt_tensor *b = ref_random(k, ns, DT_F64, -1, 1, 4);
          check_layer_norm(x, k, NULL, NULL, 1e-5);
          check_layer_norm(x, k, w, b, 1e-5);
          check_layer_norm(x, k, w, NULL, 0.1);
          check_layer_norm(x, k, NULL, b, 1e-5);
          dt_tensor_release(w);
          dt_tensor_release(b);
        }
        dt_tensor_release(x);
      }
    }
  }
}

/* ---- batch_norm ---------------------------------------------------------------------------- */

Test(batch_norm, hand_computed) {
  dt_tensor *x = ref_tensor(2, (int64_t[]){2, 2}, DT_F32, (double[]){1, 2, 3, 4});
  dt_tensor *mean = ref_tensor(1, (int64_t[]){2}, DT_F32, (double[]){1, 2});
  dt_tensor *var = ref_tensor(1, (int64_t[]){2}, DT_F32, (double[]){4, 1});
  dt_tensor *w = ref_tensor(1, (int64_t[]){2}, DT_F32, (double[]){2, 1});
  dt_tensor *b = ref_tensor(1, (int64_t[]){2}, DT_F32, (double[]){0, 10});
  dt_tensor *out = NULL;
  cr_assert_eq(dt_batch_norm(x, mean, var, w, b, 0, &out), DT_OK, "%s", dt_last_error());
  ref_assert_close(out, 2, (int64_t[]){2, 2}, DT_F32, (double[]){0, 10, 2, 12}, 1e-7, 0);
  dt_tensor_release(out);
  cr_assert_eq(dt_batch_norm(x, mean, var, NULL, NULL, 0, &out), DT_OK);
  ref_assert_close(out, 2, (int64_t[]){2, 2}, DT_F32, (double[]){0, 0, 1, 2}, 1e-7, 0);
  dt_tensor_release(out);
  dt_tensor_release(x);
  dt_tensor_release(mean);
  dt_tensor_release(var);
  dt_tensor_release(w);
  dt_tensor_release(b);
}

static void check_batch_norm(dt_tensor *x, bool affine, double eps, uint64_t seed) {
  int ndim = dt_tensor_ndim(x);
  const int64_t *shape = dt_tensor_shape(x);
  int64_t c = shape[1], n = dt_tensor_numel(x), index[DT_MAX_DIMS];
  dt_tensor *mean = ref_random(1, &c, DT_F32, -2, 2, seed);
  dt_tensor *var = ref_random(1, &c, DT_F64, 0.1, 3, seed + 1);
  dt_tensor *w = affine ? ref_random(1, &c, DT_BF16, 0.5, 2, seed + 2) : NULL;
  dt_tensor *b = affine ? ref_random(1, &c, DT_F32, -1, 1, seed + 3) : NULL;
  double *v = ref_values(x), *mv = ref_values(mean), *vv = ref_values(var);
  double *wv = affine ? ref_values(w) : NULL, *bv = affine ? ref_values(b) : NULL;
  double *expected = malloc(sizeof(double) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; i++) {
    ref_unravel(i, ndim, shape, index);
    int64_t ch = index[1];
    expected[i] =
        (v[i] - mv[ch]) / sqrt(vv[ch] + eps) * (affine ? wv[ch] : 1) + (affine ? bv[ch] : 0);
  }
  dt_tensor *out = NULL;
  cr_assert_eq(dt_batch_norm(x, mean, var, w, b, eps, &out), DT_OK, "%s", dt_last_error());
  double tol = tolerance(dt_tensor_dtype(x));
  ref_assert_close(out, ndim, shape, dt_tensor_dtype(x), expected, tol, tol * 4);
  dt_tensor_release(out);
  dt_tensor_release(mean);
  dt_tensor_release(var);
  dt_tensor_release(w);
  dt_tensor_release(b);
  free(v);
  free(mv);
  free(vv);
  free(wv);
  free(bv);
  free(expected);
}

Test(batch_norm, reference_shapes_dtypes_strides) {
  static const int64_t shapes[][4] = {{5, 3}, {2, 3, 7}, {2, 3, 4, 5}, {3, 1, 2, 9}, {1, 4, 1, 1}};
  static const int ndims[] = {2, 3, 4, 4, 4};
  static const dt_dtype dtypes[] = {DT_F32, DT_F64, DT_BF16, DT_F16};
  for (size_t s = 0; s < sizeof ndims / sizeof *ndims; s++) {
    for (size_t t = 0; t < 4; t++) {
      for (int strided = 0; strided < 2; strided++) {
        dt_tensor *x = strided ? ref_random_strided(ndims[s], shapes[s], dtypes[t], -5, 5, s + t)
                               : ref_random(ndims[s], shapes[s], dtypes[t], -5, 5, s + t);
        check_batch_norm(x, true, 1e-5, s * 10 + t);
        check_batch_norm(x, false, 1e-3, s * 10 + t);
        dt_tensor_release(x);
      }
    }
  }
}

/* ---- Bad input ------------------------------------------------------------------------------ */

#define EXPECT_FAIL(call, status, op, detail)                                                      \
  do {                                                                                             \
    out = (dt_tensor *)0x1;                                                                        \
    cr_assert_eq((call), (status), "%s", dt_last_error());                                         \
    cr_assert_null(out);                                                                           \
    ref_assert_error_mentions(op, detail);                                                         \
  } while (0)

Test(softmax, bad_input) {
  dt_tensor *a = ref_random(2, (int64_t[]){2, 3}, DT_F32, 0, 1, 1);
  dt_tensor *ia = ref_random(2, (int64_t[]){2, 3}, DT_I32, 0, 5, 1);
  dt_tensor *out;
  EXPECT_FAIL(dt_softmax(a, 2, &out), DT_ERR_INVALID, "softmax.int", "dim 2");
  EXPECT_FAIL(dt_log_softmax(a, -3, &out), DT_ERR_INVALID, "log_softmax.int", "dim -3");
  EXPECT_FAIL(dt_softmax(ia, 0, &out), DT_ERR_DTYPE, "softmax.int", "int32");
  EXPECT_FAIL(dt_log_softmax(ia, 0, &out), DT_ERR_DTYPE, "log_softmax.int", "int32");
  EXPECT_FAIL(dt_softmax(NULL, 0, &out), DT_ERR_INVALID, "softmax.int", "NULL");
  cr_assert_eq(dt_log_softmax(a, 0, NULL), DT_ERR_INVALID);
  ref_assert_error_mentions("log_softmax.int", "out");
  dt_tensor_release(a);
  dt_tensor_release(ia);
}

Test(layer_norm, bad_input) {
  dt_tensor *x = ref_random(3, (int64_t[]){2, 3, 4}, DT_F32, 0, 1, 1);
  dt_tensor *ix = ref_random(3, (int64_t[]){2, 3, 4}, DT_I64, 0, 5, 1);
  dt_tensor *w4 = ref_random(1, (int64_t[]){4}, DT_F32, 0, 1, 2);
  dt_tensor *w5 = ref_random(1, (int64_t[]){5}, DT_F32, 0, 1, 2);
  dt_tensor *iw = ref_random(1, (int64_t[]){4}, DT_I32, 0, 3, 2);
  dt_tensor *out;
  EXPECT_FAIL(dt_layer_norm(x, 1, (int64_t[]){5}, NULL, NULL, 1e-5, &out), DT_ERR_SHAPE,
              "layer_norm", "[2, 3, 4] does not end with normalized_shape [5]");
  EXPECT_FAIL(dt_layer_norm(x, 2, (int64_t[]){4, 3}, NULL, NULL, 1e-5, &out), DT_ERR_SHAPE,
              "layer_norm", "[4, 3]");
  EXPECT_FAIL(dt_layer_norm(x, 4, (int64_t[]){1, 2, 3, 4}, NULL, NULL, 1e-5, &out), DT_ERR_SHAPE,
              "layer_norm", "[1, 2, 3, 4]");
  EXPECT_FAIL(dt_layer_norm(x, 0, (int64_t[]){4}, NULL, NULL, 1e-5, &out), DT_ERR_INVALID,
              "layer_norm", "normalized_shape");
  EXPECT_FAIL(dt_layer_norm(x, 1, NULL, NULL, NULL, 1e-5, &out), DT_ERR_INVALID, "layer_norm",
              "NULL");
  EXPECT_FAIL(dt_layer_norm(x, 1, (int64_t[]){4}, w5, NULL, 1e-5, &out), DT_ERR_SHAPE, "layer_norm",
              "weight of shape [5]");
  EXPECT_FAIL(dt_layer_norm(x, 1, (int64_t[]){4}, w4, w5, 1e-5, &out), DT_ERR_SHAPE, "layer_norm",
              "bias of shape [5]");
  EXPECT_FAIL(dt_layer_norm(x, 1, (int64_t[]){4}, iw, NULL, 1e-5, &out), DT_ERR_DTYPE, "layer_norm",
              "weight");
  EXPECT_FAIL(dt_layer_norm(ix, 1, (int64_t[]){4}, NULL, NULL, 1e-5, &out), DT_ERR_DTYPE,
              "layer_norm", "int64");
  EXPECT_FAIL(dt_layer_norm(NULL, 1, (int64_t[]){4}, NULL, NULL, 1e-5, &out), DT_ERR_INVALID,
              "layer_norm", "input 0");
  /* eps is checked as rms_norm's: finite and >= 0 (a NaN eps made every output NaN). */
  EXPECT_FAIL(dt_layer_norm(x, 1, (int64_t[]){4}, NULL, NULL, NAN, &out), DT_ERR_INVALID,
              "layer_norm", "eps nan must be finite and >= 0");
  EXPECT_FAIL(dt_layer_norm(x, 1, (int64_t[]){4}, NULL, NULL, -1e-5, &out), DT_ERR_INVALID,
              "layer_norm", "eps -1e-05");
  EXPECT_FAIL(dt_layer_norm(x, 1, (int64_t[]){4}, NULL, NULL, INFINITY, &out), DT_ERR_INVALID,
              "layer_norm", "eps inf");
  cr_assert_eq(dt_layer_norm(x, 1, (int64_t[]){4}, NULL, NULL, 0.0, &out), DT_OK);
  dt_tensor_release(out);
  dt_tensor_release(x);
  dt_tensor_release(ix);
  dt_tensor_release(w4);
  dt_tensor_release(w5);
  dt_tensor_release(iw);
}

Test(batch_norm, bad_input) {
  dt_tensor *x = ref_random(3, (int64_t[]){2, 3, 4}, DT_F32, 0, 1, 1);
  dt_tensor *x1 = ref_random(1, (int64_t[]){3}, DT_F32, 0, 1, 1);
  dt_tensor *ix = ref_random(3, (int64_t[]){2, 3, 4}, DT_I32, 0, 5, 1);
  dt_tensor *c3 = ref_random(1, (int64_t[]){3}, DT_F32, 0.5, 1, 2);
  dt_tensor *c4 = ref_random(1, (int64_t[]){4}, DT_F32, 0.5, 1, 2);
  dt_tensor *c3x1 = ref_random(2, (int64_t[]){3, 1}, DT_F32, 0.5, 1, 2);
  dt_tensor *i3 = ref_random(1, (int64_t[]){3}, DT_I64, 1, 3, 2);
  dt_tensor *out;
  EXPECT_FAIL(dt_batch_norm(x, c4, c3, NULL, NULL, 1e-5, &out), DT_ERR_SHAPE, "batch_norm",
              "running_mean of shape [4] does not match the 3 channels of input shape [2, 3, 4]");
  EXPECT_FAIL(dt_batch_norm(x, c3, c4, NULL, NULL, 1e-5, &out), DT_ERR_SHAPE, "batch_norm",
              "running_var of shape [4]");
  EXPECT_FAIL(dt_batch_norm(x, c3, c3, c4, NULL, 1e-5, &out), DT_ERR_SHAPE, "batch_norm",
              "weight of shape [4]");
  EXPECT_FAIL(dt_batch_norm(x, c3, c3, c3, c3x1, 1e-5, &out), DT_ERR_SHAPE, "batch_norm",
              "bias of shape [3, 1]");
  EXPECT_FAIL(dt_batch_norm(x1, c3, c3, NULL, NULL, 1e-5, &out), DT_ERR_SHAPE, "batch_norm", "[3]");
  EXPECT_FAIL(dt_batch_norm(ix, c3, c3, NULL, NULL, 1e-5, &out), DT_ERR_DTYPE, "batch_norm",
              "int32");
  EXPECT_FAIL(dt_batch_norm(x, c3, i3, NULL, NULL, 1e-5, &out), DT_ERR_DTYPE, "batch_norm",
              "running_var");
  EXPECT_FAIL(dt_batch_norm(x, NULL, c3, NULL, NULL, 1e-5, &out), DT_ERR_INVALID, "batch_norm",
              "input 1");
  EXPECT_FAIL(dt_batch_norm(x, c3, NULL, c3, c3, 1e-5, &out), DT_ERR_INVALID, "batch_norm",
              "input 2");
  EXPECT_FAIL(dt_batch_norm(x, c3, c3, NULL, NULL, NAN, &out), DT_ERR_INVALID, "batch_norm",
              "eps nan must be finite and >= 0");
  EXPECT_FAIL(dt_batch_norm_training(x, NULL, NULL, -1.0, &out), DT_ERR_INVALID,
              "batch_norm_training", "eps -1 must be finite and >= 0");
  dt_tensor_release(x);
  dt_tensor_release(x1);
  dt_tensor_release(ix);
  dt_tensor_release(c3);
  dt_tensor_release(c4);
  dt_tensor_release(c3x1);
  dt_tensor_release(i3);
}

Test(norm, op_table_names) {
  const char *want[] = {"softmax.int", "log_softmax.int", "layer_norm", "batch_norm"};
  for (size_t w = 0; w < sizeof want / sizeof *want; w++) {
    bool found = false;
    for (int i = 0; i < dt_op_count(); i++) found = found || strcmp(dt_op_name(i), want[w]) == 0;
    cr_assert(found, "op %s is missing from the table", want[w]);
  }
}
