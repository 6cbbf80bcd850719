/* Edge cases a review found in the local library: each was a crash or a silent wrong result. */
#include <math.h>
#include <stdlib.h>

#include "reference.h"

Test(edge, randint_ranges_are_checked) {
  dt_tensor *t = (dt_tensor *)0x1;
  /* The full int64 range does not fit a double exactly: refused, not a division by zero. */
  cr_assert_eq(dt_randint(INT64_MIN, INT64_MAX, 1, (int64_t[]){4}, DT_I64, 1, &t), DT_ERR_INVALID);
  cr_assert_null(t);
  cr_assert_eq(dt_randint(-3, 5, 1, (int64_t[]){4}, DT_U8, 1, &t), DT_ERR_INVALID);
  ref_assert_error_mentions("randint", "uint8");
  cr_assert_eq(dt_randint(0, 1000, 1, (int64_t[]){4}, DT_U8, 1, &t), DT_ERR_INVALID);
  cr_assert_eq(dt_randint(0, 256, 1, (int64_t[]){1000}, DT_U8, 1, &t), DT_OK);
  double *v = ref_values(t);
  for (int i = 0; i < 1000; i++) cr_assert(v[i] >= 0 && v[i] < 256);
  free(v);
  dt_tensor_release(t);
}

Test(edge, sizes_that_overflow_are_refused) {
  dt_tensor *one = NULL, *a = NULL, *b = NULL, *out = (dt_tensor *)0x1;
  cr_assert_eq(dt_ones(2, (int64_t[]){1, 1}, DT_F64, &one), DT_OK);
  cr_assert_eq(dt_expand(one, 2, (int64_t[]){1LL << 30, 1}, &a), DT_OK);
  cr_assert_eq(dt_expand(one, 2, (int64_t[]){1, 1LL << 31}, &b), DT_OK);
  cr_assert_eq(dt_add(a, b, &out), DT_ERR_INVALID); /* 2^61 elements x 8 bytes */
  cr_assert_null(out);
  ref_assert_error_mentions("too many elements", NULL);
  dt_tensor *x = NULL, *y = NULL;
  cr_assert_eq(dt_zeros(2, (int64_t[]){1LL << 32, 0}, DT_I64, &x), DT_OK);
  cr_assert_eq(dt_zeros(2, (int64_t[]){0, 1LL << 29}, DT_I64, &y), DT_OK);
  cr_assert_eq(dt_mm(x, y, &out), DT_ERR_INVALID);
  cr_assert_null(out);
  dt_tensor *rel[] = {one, a, b, x, y};
  for (int i = 0; i < 5; i++) dt_tensor_release(rel[i]);
}

Test(edge, copy_from_an_overlapping_view) {
  int64_t shape[] = {3, 3};
  dt_tensor *x = ref_tensor(2, shape, DT_F32, (double[]){0, 1, 2, 3, 4, 5, 6, 7, 8}), *xt = NULL;
  cr_assert_eq(dt_transpose(x, 0, 1, &xt), DT_OK);
  cr_assert_eq(dt_copy_(x, xt), DT_OK);
  ref_assert_close(x, 2, shape, DT_F32, (double[]){0, 3, 6, 1, 4, 7, 2, 5, 8}, 0, 0);
  dt_tensor *v = NULL, *dst = NULL, *src = NULL;
  cr_assert_eq(dt_arange(0, 6, 1, DT_F32, &v), DT_OK);
  cr_assert_eq(dt_slice(v, 0, 1, 5, 1, &dst), DT_OK); /* [1, 5) */
  cr_assert_eq(dt_slice(v, 0, 0, 4, 1, &src), DT_OK); /* [0, 4): overlaps dst shifted by one */
  cr_assert_eq(dt_copy_(dst, src), DT_OK);
  ref_assert_close(v, 1, (int64_t[]){6}, DT_F32, (double[]){0, 0, 1, 2, 3, 5}, 0, 0);
  dt_tensor *rel[] = {x, xt, v, dst, src};
  for (int i = 0; i < 5; i++) dt_tensor_release(rel[i]);
}

Test(edge, writing_in_place_through_an_expanded_view_is_refused) {
  dt_tensor *x = NULL, *e = NULL, *o = NULL;
  cr_assert_eq(dt_ones(1, (int64_t[]){1}, DT_F32, &x), DT_OK);
  cr_assert_eq(dt_expand(x, 1, (int64_t[]){3}, &e), DT_OK);
  cr_assert_eq(dt_ones(1, (int64_t[]){3}, DT_F32, &o), DT_OK);
  cr_assert_eq(dt_add_(e, o), DT_ERR_INVALID);
  ref_assert_error_mentions("add_.Tensor", "one memory location");
  cr_assert_eq(dt_add_scalar_(e, 1), DT_ERR_INVALID);
  cr_assert_eq(dt_copy_(e, o), DT_ERR_INVALID);
  double v;
  cr_assert_eq(dt_tensor_get(x, (int64_t[]){0}, &v), DT_OK);
  cr_assert_eq(v, 1, "nothing was written (%g)", v);
  dt_tensor_release(x);
  dt_tensor_release(e);
  dt_tensor_release(o);
}

Test(edge, half_precision_uniforms_stay_below_one) {
  dt_dtype dtypes[] = {DT_BF16, DT_F16, DT_F64, DT_F32};
  for (int d = 0; d < 4; d++) {
    dt_tensor *t = NULL;
    cr_assert_eq(dt_rand(1, (int64_t[]){200000}, dtypes[d], 42, &t), DT_OK);
    double *v = ref_values(t);
    for (int i = 0; i < 200000; i++)
      cr_assert(v[i] >= 0 && v[i] < 1, "%s: %g", dt_dtype_name(dtypes[d]), v[i]);
    free(v);
    dt_tensor_release(t);
  }
}

Test(edge, masked_fill_values_must_fit) {
  dt_tensor *a = NULL, *m = NULL, *o = (dt_tensor *)0x1;
  cr_assert_eq(dt_zeros(1, (int64_t[]){3}, DT_I32, &a), DT_OK);
  cr_assert_eq(dt_ones(1, (int64_t[]){3}, DT_BOOL, &m), DT_OK);
  cr_assert_eq(dt_masked_fill(a, m, 1e20, &o), DT_ERR_INVALID);
  cr_assert_null(o);
  cr_assert_eq(dt_masked_fill(a, m, NAN, &o), DT_ERR_INVALID);
  cr_assert_eq(dt_masked_fill(a, m, -7, &o), DT_OK);
  dt_tensor_release(o);
  dt_tensor_release(a);
  dt_tensor_release(m);
}
