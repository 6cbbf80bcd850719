/* Tensor handles: creation, dtypes, refcounts, element access, random numbers. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "reference.h"

Test(tensor, zeros_ones_full_arange) {
  int64_t shape[] = {2, 3};
  dt_tensor *z = NULL, *o = NULL, *f = NULL, *r = NULL;
  cr_assert_eq(dt_zeros(2, shape, DT_F32, &z), DT_OK);
  cr_assert_eq(dt_ones(2, shape, DT_I64, &o), DT_OK);
  cr_assert_eq(dt_full(2, shape, -2.5, DT_F64, &f), DT_OK);
  cr_assert_eq(dt_arange(1, 7, 2, DT_I32, &r), DT_OK);
  double zeros[6] = {0}, ones[6] = {1, 1, 1, 1, 1, 1},
         fulls[6] = {-2.5, -2.5, -2.5, -2.5, -2.5, -2.5};
  ref_assert_close(z, 2, shape, DT_F32, zeros, 0, 0);
  ref_assert_close(o, 2, shape, DT_I64, ones, 0, 0);
  ref_assert_close(f, 2, shape, DT_F64, fulls, 0, 0);
  int64_t n3[] = {3};
  ref_assert_close(r, 1, n3, DT_I32, (double[]){1, 3, 5}, 0, 0);
  dt_tensor_release(z);
  dt_tensor_release(o);
  dt_tensor_release(f);
  dt_tensor_release(r);
}

Test(tensor, every_dtype_round_trips_small_integers) {
  int64_t shape[] = {4};
  double values[] = {0, 1, 2, 3};
  for (int d = 0; d < DT_DTYPE_COUNT; d++) {
    double v[4];
    for (int i = 0; i < 4; i++) v[i] = d == DT_BOOL ? (values[i] != 0) : values[i];
    dt_tensor *t = ref_tensor(1, shape, (dt_dtype)d, v);
    ref_assert_close(t, 1, shape, (dt_dtype)d, v, 0, 0);
    cr_assert_eq(dt_tensor_is_contiguous(t), true);
    dt_tensor_release(t);
  }
}

/* Integer to integer conversions are exact past 2^53 and wrap when narrowing (as a C cast
 * through the unsigned type, and as torch's .to(torch.int32)). */
Test(tensor, integer_conversions_are_exact) {
  const int64_t big[3] = {(INT64_C(1) << 53) + 1, INT64_MAX, INT64_C(0x100000005)};
  dt_tensor *a = NULL, *b = NULL, *c = NULL;
  cr_assert_eq(dt_from_data(big, 1, (int64_t[]){3}, DT_I64, &a), DT_OK);
  cr_assert_eq(dt_to(a, DT_I32, &b), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_to(b, DT_I64, &c), DT_OK, "%s", dt_last_error());
  const int32_t *narrow = dt_tensor_data(b);
  const int64_t *wide = dt_tensor_data(c);
  for (int i = 0; i < 3; i++) {
    int32_t want = (int32_t)(uint32_t)(uint64_t)big[i];
    cr_assert_eq(narrow[i], want, "element %d: %d, want %d", i, narrow[i], want);
    cr_assert_eq(wide[i], want);
  }
  dt_tensor *d = NULL;
  cr_assert_eq(dt_empty(1, (int64_t[]){3}, DT_I64, &d), DT_OK);
  cr_assert_eq(dt_copy_(d, a), DT_OK);
  cr_assert_eq(memcmp(dt_tensor_data(d), big, sizeof big), 0);
  dt_tensor_release(a), dt_tensor_release(b), dt_tensor_release(c), dt_tensor_release(d);
}

Test(tensor, half_precision_conversions) {
  cr_assert_eq(dt_f32_to_bf16(1.0f), 0x3f80);
  cr_assert_eq(dt_bf16_to_f32(0x3f80), 1.0f);
  cr_assert_eq(dt_f32_to_f16(1.0f), 0x3c00);
  cr_assert_eq(dt_f32_to_f16(-2.0f), 0xc000);
  cr_assert_eq(dt_f32_to_f16(65504.0f), 0x7bff);
  cr_assert_eq(dt_f32_to_f16(1e6f), 0x7c00);              /* overflow to inf */
  cr_assert_eq(dt_f16_to_f32(0x0001), ldexpf(1.0f, -24)); /* smallest subnormal */
  cr_assert_eq(dt_f32_to_f16(ldexpf(1.0f, -24)), 0x0001);
  cr_assert(isnan(dt_f16_to_f32(dt_f32_to_f16(NAN))));
  /* Round to nearest even: 1 + 2^-11 is halfway between two f16 values. */
  cr_assert_eq(dt_f32_to_f16(1.0f + ldexpf(1.0f, -11)), 0x3c00);
  cr_assert_eq(dt_f32_to_bf16(1.00390625f), 0x3f80); /* halfway, rounds to even */
  for (uint32_t h = 0; h < 0x7c00; h++) {            /* every finite positive f16 round-trips */
    cr_assert_eq(dt_f32_to_f16(dt_f16_to_f32((uint16_t)h)), h, "f16 0x%x", h);
  }
}

Test(tensor, promotion) {
  cr_assert_eq(dt_dtype_promote(DT_I32, DT_F32), DT_F32);
  cr_assert_eq(dt_dtype_promote(DT_I64, DT_I32), DT_I64);
  cr_assert_eq(dt_dtype_promote(DT_BF16, DT_F16), DT_F32);
  cr_assert_eq(dt_dtype_promote(DT_BOOL, DT_U8), DT_U8);
  cr_assert_eq(dt_dtype_promote(DT_F64, DT_F32), DT_F64);
  cr_assert_eq(dt_dtype_promote(DT_I64, DT_BF16), DT_BF16);
}

Test(tensor, wrap_borrows_and_from_data_copies) {
  float data[6] = {1, 2, 3, 4, 5, 6};
  int64_t shape[] = {2, 3};
  dt_tensor *w = NULL, *c = NULL;
  cr_assert_eq(dt_wrap(data, sizeof data, 2, shape, NULL, DT_F32, &w), DT_OK);
  cr_assert_eq(dt_from_data(data, 2, shape, DT_F32, &c), DT_OK);
  data[0] = 42;
  double v;
  cr_assert_eq(dt_tensor_get(w, (int64_t[]){0, 0}, &v), DT_OK);
  cr_assert_eq(v, 42);
  cr_assert_eq(dt_tensor_get(c, (int64_t[]){0, 0}, &v), DT_OK);
  cr_assert_eq(v, 1);
  cr_assert_eq(dt_tensor_data(w), (void *)data);
  dt_tensor_release(w);
  dt_tensor_release(c);
}

Test(tensor, refcounts_and_views_share_storage) {
  int64_t shape[] = {3, 4};
  dt_tensor *t = ref_random(2, shape, DT_F32, -1, 1, 7);
  dt_tensor *v = NULL;
  cr_assert_eq(dt_transpose(t, 0, 1, &v), DT_OK);
  cr_assert(dt_tensor_shares_storage(t, v));
  cr_assert_eq(dt_tensor_refcount(t), 1);
  dt_tensor_retain(t);
  cr_assert_eq(dt_tensor_refcount(t), 2);
  dt_tensor_release(t);
  dt_tensor_release(t); /* the view keeps the storage alive */
  double x;
  cr_assert_eq(dt_tensor_get(v, (int64_t[]){3, 2}, &x), DT_OK);
  dt_tensor_release(v);
  dt_tensor_release(NULL);
}

Test(tensor, bad_creation_arguments) {
  dt_tensor *t = (dt_tensor *)0x1;
  int64_t bad[] = {2, -1};
  cr_assert_eq(dt_zeros(2, bad, DT_F32, &t), DT_ERR_INVALID);
  cr_assert_null(t);
  ref_assert_error_mentions("zeros", "[2, -1]");
  cr_assert_eq(dt_zeros(9, bad, DT_F32, &t), DT_ERR_INVALID);
  ref_assert_error_mentions("ndim 9", NULL);
  cr_assert_eq(dt_zeros(1, NULL, DT_F32, &t), DT_ERR_INVALID);
  cr_assert_eq(dt_zeros(1, (int64_t[]){2}, (dt_dtype)99, &t), DT_ERR_DTYPE);
  cr_assert_eq(dt_zeros(1, (int64_t[]){2}, DT_F32, NULL), DT_ERR_INVALID);
  cr_assert_eq(dt_arange(0, 5, 0, DT_F32, &t), DT_ERR_INVALID);
  cr_assert_eq(dt_arange(0, 5, -1, DT_F32, &t), DT_ERR_INVALID);
  /* Integer values the dtype cannot hold were stored wrapped (uint8 256 -> 0) or saturated. */
  cr_assert_eq(dt_arange(0, 300, 1, DT_U8, &t), DT_ERR_INVALID);
  ref_assert_error_mentions("dt_arange", "uint8");
  cr_assert_eq(dt_arange(-1, 5, 1, DT_U8, &t), DT_ERR_INVALID);
  cr_assert_eq(dt_arange(0, 1e10, 1e9, DT_I32, &t), DT_ERR_INVALID);
  ref_assert_error_mentions("int32", "9000000000");
  cr_assert_eq(dt_arange(9.3e18, 9.4e18, 5e16, DT_I64, &t), DT_ERR_INVALID);
  ref_assert_error_mentions("int64", NULL);
  cr_assert_eq(dt_arange(0, 2, 1, DT_BOOL, &t), DT_ERR_DTYPE);
  ref_assert_error_mentions("dt_arange", "bool");
  cr_assert_null(t);
  /* The edges of the range still fit: uint8 0..255, int32 down to INT32_MIN. */
  cr_assert_eq(dt_arange(0, 256, 1, DT_U8, &t), DT_OK);
  cr_assert_eq(dt_tensor_size(t, 0), 256);
  cr_assert_eq(((const uint8_t *)dt_tensor_data(t))[255], 255);
  dt_tensor_release(t);
  cr_assert_eq(dt_arange(-2147483648.0, -2147483646.0, 1, DT_I32, &t), DT_OK);
  cr_assert_eq(((const int32_t *)dt_tensor_data(t))[0], INT32_MIN);
  cr_assert_eq(((const int32_t *)dt_tensor_data(t))[1], INT32_MIN + 1);
  dt_tensor_release(t);
  t = NULL;
  cr_assert_eq(dt_from_data(NULL, 1, (int64_t[]){3}, DT_F32, &t), DT_ERR_INVALID);
  cr_assert_eq(dt_rand(1, (int64_t[]){3}, DT_I64, 1, &t), DT_ERR_DTYPE);
  cr_assert_eq(dt_randint(5, 5, 1, (int64_t[]){3}, DT_I64, 1, &t), DT_ERR_INVALID);
  int64_t shape[] = {2, 2};
  dt_tensor *z = NULL;
  cr_assert_eq(dt_zeros(2, shape, DT_F32, &z), DT_OK);
  double v;
  cr_assert_eq(dt_tensor_get(z, (int64_t[]){2, 0}, &v), DT_ERR_INDEX);
  ref_assert_error_mentions("[2, 0]", "[2, 2]");
  /* Messages start with the public function's name (docs/api.md, "Naming"). */
  cr_assert_eq(strncmp(dt_last_error(), "dt_tensor_get: ", 15), 0, "%s", dt_last_error());
  cr_assert_eq(dt_tensor_set(z, NULL, 1.0), DT_ERR_INVALID);
  cr_assert_eq(strncmp(dt_last_error(), "dt_tensor_set: index is NULL", 28), 0, "%s",
               dt_last_error());
  dt_tensor_release(z);
  /* A 0-d tensor (a loss) takes a NULL index. */
  dt_tensor *s = NULL;
  cr_assert_eq(dt_full(0, NULL, 2.5, DT_F32, &s), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_tensor_get(s, NULL, &v), DT_OK, "%s", dt_last_error());
  cr_assert_eq(v, 2.5);
  dt_tensor_release(s);
}

Test(random, slices_equal_the_whole) {
  int64_t shape[] = {37, 11};
  dt_tensor *whole = NULL;
  cr_assert_eq(dt_randn(2, shape, DT_F64, 1234, &whole), DT_OK);
  double *w = ref_values(whole);
  /* Rows 10..20 generated alone. */
  int64_t part_shape[] = {10, 11};
  dt_tensor *part = NULL;
  cr_assert_eq(dt_empty(2, part_shape, DT_F64, &part), DT_OK);
  cr_assert_eq(dt_random_fill(part, DT_RANDOM_NORMAL, 0, 1, 1234, 10 * 11), DT_OK);
  ref_assert_close(part, 2, part_shape, DT_F64, w + 110, 0, 0);
  dt_tensor_release(part);
  dt_tensor_release(whole);
  free(w);
}

Test(random, distributions_have_the_right_moments) {
  int64_t n = 200000;
  dt_tensor *u = NULL, *g = NULL, *k = NULL;
  cr_assert_eq(dt_rand(1, &n, DT_F32, 1, &u), DT_OK);
  cr_assert_eq(dt_randn(1, &n, DT_F32, 2, &g), DT_OK);
  cr_assert_eq(dt_randint(-3, 4, 1, &n, DT_I64, 3, &k), DT_OK);
  double *uv = ref_values(u), *gv = ref_values(g), *kv = ref_values(k);
  double su = 0, sg = 0, sg2 = 0, sk = 0;
  int seen[7] = {0};
  for (int64_t i = 0; i < n; i++) {
    cr_assert(uv[i] >= 0 && uv[i] < 1);
    cr_assert(kv[i] >= -3 && kv[i] < 4 && kv[i] == floor(kv[i]));
    seen[(int)kv[i] + 3] = 1;
    su += uv[i];
    sg += gv[i];
    sg2 += gv[i] * gv[i];
    sk += kv[i];
  }
  cr_assert(fabs(su / n - 0.5) < 0.01);
  cr_assert(fabs(sg / n) < 0.01);
  cr_assert(fabs(sg2 / n - 1.0) < 0.02);
  cr_assert(fabs(sk / n) < 0.05);
  for (int i = 0; i < 7; i++) cr_assert(seen[i]);
  /* Different seeds give different streams; the same seed the same one. */
  dt_tensor *u2 = NULL;
  cr_assert_eq(dt_rand(1, &n, DT_F32, 1, &u2), DT_OK);
  ref_assert_close(u2, 1, &n, DT_F32, uv, 0, 0);
  free(uv);
  free(gv);
  free(kv);
  dt_tensor_release(u);
  dt_tensor_release(u2);
  dt_tensor_release(g);
  dt_tensor_release(k);
}

Test(tensor, format) {
  int64_t shape[] = {2, 2};
  dt_tensor *t = ref_tensor(2, shape, DT_I64, (double[]){1, 2, 3, 4});
  char buf[128];
  cr_assert_eq(dt_tensor_format(t, buf, sizeof buf), DT_OK);
  cr_assert_str_eq(buf, "tensor([[1, 2], [3, 4]], dtype=int64)");
  dt_tensor_release(t);
}
