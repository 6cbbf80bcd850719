/* Pointwise ops against hand-computed values and a naive broadcasting reference. */
#include <math.h>
#include <stdlib.h>

#include "reference.h"

Test(add, hand_computed) {
  int64_t shape[] = {2, 3};
  dt_tensor *a = ref_tensor(2, shape, DT_F32, (double[]){1, 2, 3, 4, 5, 6});
  dt_tensor *b = ref_tensor(1, (int64_t[]){3}, DT_F32, (double[]){10, 20, 30});
  dt_tensor *out = NULL;
  cr_assert_eq(dt_add(a, b, &out), DT_OK, "%s", dt_last_error());
  ref_assert_close(out, 2, shape, DT_F32, (double[]){11, 22, 33, 14, 25, 36}, 0, 0);
  dt_tensor_release(out);
  cr_assert_eq(dt_add_ex(a, b, -2, &out), DT_OK);
  ref_assert_close(out, 2, shape, DT_F32, (double[]){-19, -38, -57, -16, -35, -54}, 0, 0);
  dt_tensor_release(out);
  cr_assert_eq(dt_add_(a, b), DT_OK);
  ref_assert_close(a, 2, shape, DT_F32, (double[]){11, 22, 33, 14, 25, 36}, 0, 0);
  dt_tensor_release(a);
  dt_tensor_release(b);
}

/* a + alpha*b over random broadcast shapes, dtypes and strides against a naive loop. */
static void check_add(int nda, const int64_t *sa, int ndb, const int64_t *sb, dt_dtype da,
                      dt_dtype db, bool strided, uint64_t seed) {
  dt_tensor *a = strided && nda >= 2 ? ref_random_strided(nda, sa, da, -50, 50, seed)
                                     : ref_random(nda, sa, da, -50, 50, seed);
  dt_tensor *b = ref_random(ndb, sb, db, -50, 50, seed + 1);
  double *va = ref_values(a), *vb = ref_values(b);
  dt_tensor *out = NULL;
  cr_assert_eq(dt_add_ex(a, b, 3, &out), DT_OK, "%s", dt_last_error());
  int nd = dt_tensor_ndim(out);
  const int64_t *so = dt_tensor_shape(out);
  int64_t n = dt_tensor_numel(out);
  double *expected = malloc(sizeof(double) * (size_t)(n ? n : 1));
  int64_t index[DT_MAX_DIMS];
  for (int64_t i = 0; i < n; i++) {
    ref_unravel(i, nd, so, index);
    expected[i] = ref_broadcast_get(va, nda, sa, nd, index) + 3 * ref_broadcast_get(vb, ndb, sb, nd, index);
  }
  dt_dtype rd = dt_dtype_promote(da, db);
  double rtol = rd == DT_BF16 ? 1e-2 : rd == DT_F16 ? 1e-3 : rd == DT_F32 ? 1e-6 : 0;
  ref_assert_close(out, nd, so, rd, expected, rtol, rtol * 100);
  free(expected);
  free(va);
  free(vb);
  dt_tensor_release(a);
  dt_tensor_release(b);
  dt_tensor_release(out);
}

Test(add, broadcasting_dtypes_and_strides) {
  dt_dtype dtypes[] = {DT_F32, DT_F64, DT_BF16, DT_F16, DT_I64, DT_I32, DT_U8};
  for (size_t i = 0; i < sizeof dtypes / sizeof *dtypes; i++) {
    for (size_t j = 0; j < sizeof dtypes / sizeof *dtypes; j++) {
      if (dtypes[i] == DT_U8 || dtypes[j] == DT_U8) continue; /* u8 wraps; checked below */
      check_add(3, (int64_t[]){5, 7, 3}, 2, (int64_t[]){7, 1}, dtypes[i], dtypes[j], false, i * 10 + j);
      check_add(3, (int64_t[]){5, 7, 3}, 3, (int64_t[]){5, 7, 3}, dtypes[i], dtypes[j], true, i * 10 + j);
    }
  }
  check_add(2, (int64_t[]){33, 17}, 0, NULL, DT_F32, DT_F32, false, 1);
  check_add(1, (int64_t[]){0}, 1, (int64_t[]){1}, DT_F32, DT_F32, false, 1);
  check_add(4, (int64_t[]){2, 1, 3, 5}, 3, (int64_t[]){4, 1, 5}, DT_F64, DT_F32, true, 2);
}

Test(add, int64_is_exact) {
  int64_t shape[] = {1};
  dt_tensor *a = NULL, *b = NULL, *out = NULL;
  int64_t big = (1LL << 60) + 1;
  cr_assert_eq(dt_from_data(&big, 1, shape, DT_I64, &a), DT_OK);
  cr_assert_eq(dt_from_data(&big, 1, shape, DT_I64, &b), DT_OK);
  cr_assert_eq(dt_add(a, b, &out), DT_OK);
  cr_assert_eq(*(int64_t *)dt_tensor_data(out), 2 * big);
  dt_tensor_release(a);
  dt_tensor_release(b);
  dt_tensor_release(out);
}

Test(add, bad_input) {
  dt_tensor *a = ref_random(2, (int64_t[]){2, 3}, DT_F32, 0, 1, 1);
  dt_tensor *b = ref_random(1, (int64_t[]){4}, DT_F32, 0, 1, 2);
  dt_tensor *out = (dt_tensor *)0x1;
  cr_assert_eq(dt_add(a, b, &out), DT_ERR_SHAPE);
  cr_assert_null(out);
  ref_assert_error_mentions("add.Tensor", "[2, 3] and [4]");
  cr_assert_eq(dt_add(a, NULL, &out), DT_ERR_INVALID);
  ref_assert_error_mentions("add.Tensor", "input 1");
  cr_assert_eq(dt_add(a, a, NULL), DT_ERR_INVALID);
  cr_assert_eq(dt_add_(b, a), DT_ERR_SHAPE); /* [2,3] does not broadcast into [4] */
  dt_tensor_release(a);
  dt_tensor_release(b);
}
