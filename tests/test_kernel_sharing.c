/* Pins the behaviour of code that the duplicate removal of issue 11 merged: the matrix
 * products' shape messages (one formatter now), the embedding kernel (now the window kernel
 * at offset 0, with one row-copy loop for contiguous and strided weights) and integer matrix
 * products (one integer load/store shared with the binary kernels). */
#include <string.h>

#include "reference.h"

static void assert_message(const char *expected) { cr_assert_str_eq(dt_last_error(), expected); }

Test(kernel_sharing, matrix_shape_messages_are_exact) {
  dt_tensor *a2 = ref_random(2, (int64_t[]){2, 3}, DT_F32, -1, 1, 1);
  dt_tensor *b2 = ref_random(2, (int64_t[]){4, 5}, DT_F32, -1, 1, 2);
  dt_tensor *a3 = ref_random(3, (int64_t[]){2, 3, 4}, DT_F32, -1, 1, 3);
  dt_tensor *b3 = ref_random(3, (int64_t[]){3, 4, 5}, DT_F32, -1, 1, 4);
  dt_tensor *s = ref_tensor(0, NULL, DT_F32, (double[]){1});
  dt_tensor *bias = ref_random(1, (int64_t[]){5}, DT_F32, -1, 1, 5);
  dt_tensor *out = NULL;
  cr_assert_eq(dt_mm(a2, b2, &out), DT_ERR_SHAPE);
  assert_message("mm: a [2, 3] and b [4, 5]: inner dims 3 and 4 differ");
  cr_assert_eq(dt_addmm(bias, a2, b2, &out), DT_ERR_SHAPE);
  assert_message("addmm: a [2, 3] and b [4, 5]: inner dims 3 and 4 differ");
  cr_assert_eq(dt_bmm(a3, b3, &out), DT_ERR_SHAPE);
  assert_message("bmm: a [2, 3, 4] and b [3, 4, 5]: batch sizes 2 and 3 differ");
  cr_assert_eq(dt_matmul(a3, b3, &out), DT_ERR_SHAPE);
  assert_message("matmul: a [2, 3, 4] and b [3, 4, 5]: batch dims do not broadcast (2 vs 3)");
  cr_assert_eq(dt_matmul(s, b2, &out), DT_ERR_SHAPE);
  assert_message("matmul: a [] and b [4, 5]: both operands need at least 1 dim");
  cr_assert_null(out);
  dt_tensor *all[] = {a2, b2, a3, b3, s, bias};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dt_tensor_release(all[i]);
}

Test(kernel_sharing, embedding_rows_contiguous_and_strided) {
  /* w = [[0, 1, 2], [10, 11, 12], [20, 21, 22], [30, 31, 32]] */
  double wv[12];
  for (int r = 0; r < 4; r++) {
    for (int c = 0; c < 3; c++) wv[r * 3 + c] = r * 10 + c;
  }
  dt_tensor *w = ref_tensor(2, (int64_t[]){4, 3}, DT_F32, wv);
  /* The same table through a transpose of its transpose: strides {1, 4}, not row-major. */
  double wtv[12];
  for (int c = 0; c < 3; c++) {
    for (int r = 0; r < 4; r++) wtv[c * 4 + r] = wv[r * 3 + c];
  }
  dt_tensor *wt = ref_tensor(2, (int64_t[]){3, 4}, DT_F32, wtv), *ws = NULL;
  cr_assert_eq(dt_transpose(wt, 0, 1, &ws), DT_OK);
  dt_tensor *idx = ref_tensor(2, (int64_t[]){2, 2}, DT_I64, (double[]){3, 0, 2, 3});
  const double expected[] = {30, 31, 32, 0, 1, 2, 20, 21, 22, 30, 31, 32};
  dt_tensor *tables[] = {w, ws};
  for (int t = 0; t < 2; t++) {
    dt_tensor *y = NULL;
    cr_assert_eq(dt_embedding(tables[t], idx, &y), DT_OK, "%s", dt_last_error());
    ref_assert_close(y, 3, (int64_t[]){2, 2, 3}, DT_F32, expected, 0, 0);
    dt_tensor_release(y);
  }
  dt_tensor *bad = ref_tensor(1, (int64_t[]){2}, DT_I64, (double[]){1, 4}), *y = NULL;
  cr_assert_eq(dt_embedding(w, bad, &y), DT_ERR_INDEX);
  cr_assert(strstr(dt_last_error(), "index 4 (element 1 of indices [2]) is out of range for a "
                                    "weight of 4 rows") != NULL,
            "%s", dt_last_error());
  dt_tensor *all[] = {w, wt, ws, idx, bad};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dt_tensor_release(all[i]);
}

Test(kernel_sharing, integer_matrix_products) {
  dt_tensor *a = ref_tensor(2, (int64_t[]){2, 3}, DT_I32, (double[]){1, 2, 3, 4, 5, 6});
  dt_tensor *b = ref_tensor(2, (int64_t[]){3, 2}, DT_I64, (double[]){7, 8, 9, 10, 11, 12});
  dt_tensor *y = NULL;
  cr_assert_eq(dt_mm(a, b, &y), DT_OK, "%s", dt_last_error());
  ref_assert_close(y, 2, (int64_t[]){2, 2}, DT_I64, (double[]){58, 64, 139, 154}, 0, 0);
  dt_tensor_release(y);
  /* u8 wraps modulo 256 as PyTorch's does: 200 * 2 + 100 * 1 = 500 = 244 (mod 256). */
  dt_tensor *u = ref_tensor(2, (int64_t[]){1, 2}, DT_U8, (double[]){200, 100});
  dt_tensor *v = ref_tensor(2, (int64_t[]){2, 1}, DT_U8, (double[]){2, 1});
  cr_assert_eq(dt_mm(u, v, &y), DT_OK, "%s", dt_last_error());
  ref_assert_close(y, 2, (int64_t[]){1, 1}, DT_U8, (double[]){244}, 0, 0);
  dt_tensor_release(y);
  dt_tensor *all[] = {a, b, u, v};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dt_tensor_release(all[i]);
}
