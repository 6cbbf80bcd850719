/* Comparisons (Tensor and Scalar forms), where, masked_fill and fill_. */
#include <math.h>
#include <stdlib.h>

#include "reference.h"

typedef dt_status (*binary_fn)(dt_tensor *, dt_tensor *, dt_tensor **);
typedef dt_status (*scalar_fn)(dt_tensor *, double, dt_tensor **);

enum { EQ, NE, LT, LE, GT, GE };
static const binary_fn tensor_fns[] = {dt_eq, dt_ne, dt_lt, dt_le, dt_gt, dt_ge};
static const scalar_fn scalar_fns[] = {dt_eq_scalar, dt_ne_scalar, dt_lt_scalar,
                                       dt_le_scalar, dt_gt_scalar, dt_ge_scalar};
static const char *const names[] = {"eq", "ne", "lt", "le", "gt", "ge"};

static double compare(int op, double x, double y) {
  switch (op) {
  case EQ: return x == y;
  case NE: return x != y;
  case LT: return x < y;
  case LE: return x <= y;
  case GT: return x > y;
  default: return x >= y;
  }
}

Test(compare, hand_computed_with_broadcasting) {
  dt_tensor *a = ref_tensor(2, (int64_t[]){2, 3}, DT_F32, (double[]){1, 2, 3, 4, 5, NAN});
  dt_tensor *b = ref_tensor(1, (int64_t[]){3}, DT_F32, (double[]){2, 2, 2});
  double expected[6][6] = {{0, 1, 0, 0, 0, 0}, {1, 0, 1, 1, 1, 1}, {1, 0, 0, 0, 0, 0},
                           {1, 1, 0, 0, 0, 0}, {0, 0, 1, 1, 1, 0}, {0, 1, 1, 1, 1, 0}};
  for (int op = 0; op < 6; op++) {
    dt_tensor *out = NULL;
    cr_assert_eq(tensor_fns[op](a, b, &out), DT_OK, "%s", dt_last_error());
    ref_assert_close(out, 2, (int64_t[]){2, 3}, DT_BOOL, expected[op], 0, 0);
    dt_tensor_release(out);
    cr_assert_eq(scalar_fns[op](a, 2, &out), DT_OK, "%s", dt_last_error());
    ref_assert_close(out, 2, (int64_t[]){2, 3}, DT_BOOL, expected[op], 0, 0);
    dt_tensor_release(out);
  }
  dt_tensor_release(a);
  dt_tensor_release(b);
}

/* Random operands of every dtype pair, broadcast and strided, against a naive loop. */
Test(compare, random_vs_reference) {
  dt_dtype dtypes[] = {DT_F32, DT_F64, DT_BF16, DT_F16, DT_I64, DT_I32, DT_U8, DT_BOOL};
  for (size_t i = 0; i < 8; i++) {
    for (size_t j = 0; j < 8; j++) {
      int64_t sa[] = {4, 5, 6}, sb[] = {5, 1};
      /* Small integer ranges make equal elements common. */
      dt_tensor *a = ref_random_strided(3, sa, dtypes[i], 0, 4, i * 8 + j);
      dt_tensor *b = ref_random(2, sb, dtypes[j], 0, 4, i * 8 + j + 100);
      double *va = ref_values(a), *vb = ref_values(b), expected[120];
      int64_t index[3];
      for (int op = 0; op < 6; op++) {
        for (int64_t k = 0; k < 120; k++) {
          ref_unravel(k, 3, sa, index);
          expected[k] = compare(op, va[k], ref_broadcast_get(vb, 2, sb, 3, index));
        }
        dt_tensor *out = NULL;
        cr_assert_eq(tensor_fns[op](a, b, &out), DT_OK, "%s", dt_last_error());
        ref_assert_close(out, 3, sa, DT_BOOL, expected, 0, 0);
        dt_tensor_release(out);
        for (int64_t k = 0; k < 120; k++) expected[k] = compare(op, va[k], 2);
        cr_assert_eq(scalar_fns[op](a, 2, &out), DT_OK, "%s", dt_last_error());
        ref_assert_close(out, 3, sa, DT_BOOL, expected, 0, 0);
        dt_tensor_release(out);
      }
      free(va);
      free(vb);
      dt_tensor_release(a);
      dt_tensor_release(b);
    }
  }
}

Test(compare, integers_compare_exactly) {
  int64_t big[] = {(1LL << 53), (1LL << 53) + 1};
  int64_t other[] = {(1LL << 53) + 1, (1LL << 53) + 1};
  dt_tensor *a = NULL, *b = NULL, *out = NULL;
  cr_assert_eq(dt_from_data(big, 1, (int64_t[]){2}, DT_I64, &a), DT_OK);
  cr_assert_eq(dt_from_data(other, 1, (int64_t[]){2}, DT_I64, &b), DT_OK);
  cr_assert_eq(dt_eq(a, b, &out), DT_OK);
  const uint8_t *o = dt_tensor_data(out);
  cr_assert(o[0] == 0 && o[1] == 1); /* equal as doubles, not as integers */
  dt_tensor_release(out);
  cr_assert_eq(dt_lt(a, b, &out), DT_OK);
  o = dt_tensor_data(out);
  cr_assert(o[0] == 1 && o[1] == 0);
  dt_tensor_release(out);
  dt_tensor_release(a);
  dt_tensor_release(b);

  /* An integer tensor against a non-integral scalar compares numerically. */
  a = ref_tensor(1, (int64_t[]){3}, DT_I32, (double[]){2, 3, 4});
  cr_assert_eq(dt_gt_scalar(a, 2.5, &out), DT_OK);
  ref_assert_close(out, 1, (int64_t[]){3}, DT_BOOL, (double[]){0, 1, 1}, 0, 0);
  dt_tensor_release(out);
  dt_tensor_release(a);

  /* A float32 tensor compares against the scalar rounded to float32, as in PyTorch. */
  a = ref_tensor(1, (int64_t[]){1}, DT_F32, (double[]){0.1});
  cr_assert_eq(dt_eq_scalar(a, 0.1, &out), DT_OK);
  ref_assert_close(out, 1, (int64_t[]){1}, DT_BOOL, (double[]){1}, 0, 0);
  dt_tensor_release(out);
  dt_tensor_release(a);
}

Test(compare, bad_input) {
  dt_tensor *a = ref_random(2, (int64_t[]){2, 3}, DT_F32, 0, 1, 1);
  dt_tensor *b = ref_random(1, (int64_t[]){4}, DT_F32, 0, 1, 2);
  for (int op = 0; op < 6; op++) {
    dt_tensor *out = (dt_tensor *)0x1;
    cr_assert_eq(tensor_fns[op](a, b, &out), DT_ERR_SHAPE);
    cr_assert_null(out);
    ref_assert_error_mentions(names[op], "[2, 3] and [4]");
    out = (dt_tensor *)0x1;
    cr_assert_eq(tensor_fns[op](NULL, b, &out), DT_ERR_INVALID);
    cr_assert_null(out);
    ref_assert_error_mentions(names[op], "input 0");
    out = (dt_tensor *)0x1;
    cr_assert_eq(scalar_fns[op](NULL, 1, &out), DT_ERR_INVALID);
    cr_assert_null(out);
    ref_assert_error_mentions(names[op], ".Scalar");
    cr_assert_eq(scalar_fns[op](a, 1, NULL), DT_ERR_INVALID);
  }
  dt_tensor_release(a);
  dt_tensor_release(b);
}

/* ---- where ---------------------------------------------------------------------------- */

Test(where, hand_computed_broadcast_and_promotion) {
  dt_tensor *cond = ref_tensor(2, (int64_t[]){2, 1}, DT_BOOL, (double[]){1, 0});
  dt_tensor *a = ref_tensor(1, (int64_t[]){3}, DT_I32, (double[]){1, 2, 3});
  dt_tensor *b = ref_tensor(0, NULL, DT_F32, (double[]){-1.5});
  dt_tensor *out = NULL;
  cr_assert_eq(dt_where(cond, a, b, &out), DT_OK, "%s", dt_last_error());
  ref_assert_close(out, 2, (int64_t[]){2, 3}, DT_F32, (double[]){1, 2, 3, -1.5, -1.5, -1.5}, 0, 0);
  dt_tensor_release(out);
  dt_tensor_release(b);

  /* int32 with int64 promotes to int64 exactly. */
  int64_t big[] = {(1LL << 62) + 1};
  cr_assert_eq(dt_from_data(big, 1, (int64_t[]){1}, DT_I64, &b), DT_OK);
  cr_assert_eq(dt_where(cond, a, b, &out), DT_OK);
  cr_assert_eq(dt_tensor_dtype(out), DT_I64);
  const int64_t *o = dt_tensor_data(out);
  cr_assert(o[0] == 1 && o[2] == 3 && o[3] == big[0] && o[5] == big[0]);
  dt_tensor_release(out);
  dt_tensor_release(b);
  dt_tensor_release(a);
  dt_tensor_release(cond);
}

Test(where, random_strided_vs_reference) {
  dt_dtype dtypes[] = {DT_F32, DT_F64, DT_BF16, DT_F16, DT_I64, DT_I32, DT_U8};
  for (size_t i = 0; i < 7; i++) {
    int64_t sc[] = {3, 1, 7}, sa[] = {3, 5, 7}, sb[] = {5, 1};
    dt_tensor *cond = ref_random(3, sc, DT_BOOL, 0, 2, i);
    dt_tensor *a = ref_random_strided(3, sa, dtypes[i], -20, 20, i + 1);
    dt_tensor *b = ref_random(2, sb, dtypes[(i + 1) % 7], 0, 20, i + 2);
    double *vc = ref_values(cond), *va = ref_values(a), *vb = ref_values(b), expected[105];
    int64_t index[3];
    for (int64_t k = 0; k < 105; k++) {
      ref_unravel(k, 3, sa, index);
      expected[k] =
          ref_broadcast_get(vc, 3, sc, 3, index) ? va[k] : ref_broadcast_get(vb, 2, sb, 3, index);
    }
    dt_tensor *out = NULL;
    cr_assert_eq(dt_where(cond, a, b, &out), DT_OK, "%s", dt_last_error());
    dt_dtype rd = dt_dtype_promote(dtypes[i], dtypes[(i + 1) % 7]);
    double tol = rd == DT_BF16 ? 1e-2 : rd == DT_F16 ? 1e-3 : 0;
    ref_assert_close(out, 3, sa, rd, expected, tol, tol);
    dt_tensor_release(out);
    free(vc);
    free(va);
    free(vb);
    dt_tensor_release(cond);
    dt_tensor_release(a);
    dt_tensor_release(b);
  }
}

Test(where, bad_input) {
  dt_tensor *c = ref_random(1, (int64_t[]){3}, DT_F32, 0, 1, 1);
  dt_tensor *m = ref_random(1, (int64_t[]){3}, DT_BOOL, 0, 2, 1);
  dt_tensor *a = ref_random(1, (int64_t[]){3}, DT_F32, 0, 1, 2);
  dt_tensor *bad = ref_random(1, (int64_t[]){4}, DT_F32, 0, 1, 3);
  dt_tensor *out = (dt_tensor *)0x1;
  cr_assert_eq(dt_where(c, a, a, &out), DT_ERR_DTYPE);
  cr_assert_null(out);
  ref_assert_error_mentions("where.self", "float32");
  cr_assert_eq(dt_where(m, a, bad, &out), DT_ERR_SHAPE);
  cr_assert_null(out);
  ref_assert_error_mentions("where.self", "[4]");
  cr_assert_eq(dt_where(m, NULL, a, &out), DT_ERR_INVALID);
  ref_assert_error_mentions("where.self", "input 1");
  cr_assert_eq(dt_where(m, a, a, NULL), DT_ERR_INVALID);
  dt_tensor_release(c);
  dt_tensor_release(m);
  dt_tensor_release(a);
  dt_tensor_release(bad);
}

/* ---- masked_fill and fill_ ---------------------------------------------------------- */

Test(masked_fill, hand_computed_and_dtypes) {
  dt_tensor *mask = ref_tensor(1, (int64_t[]){3}, DT_BOOL, (double[]){1, 0, 1});
  dt_dtype dtypes[] = {DT_F32, DT_F64, DT_BF16, DT_F16, DT_I64, DT_I32, DT_U8, DT_BOOL};
  for (size_t i = 0; i < 8; i++) {
    dt_tensor *a = ref_random_strided(2, (int64_t[]){2, 3}, dtypes[i], 0, 2, i);
    double *va = ref_values(a);
    double value = dtypes[i] == DT_BOOL ? 1 : 5;
    double expected[6] = {value, va[1], value, value, va[4], value};
    dt_tensor *out = NULL;
    cr_assert_eq(dt_masked_fill(a, mask, value, &out), DT_OK, "%s", dt_last_error());
    ref_assert_close(out, 2, (int64_t[]){2, 3}, dtypes[i], expected, 0, 0);
    dt_tensor_release(out);
    free(va);
    dt_tensor_release(a);
  }
  /* The value converts to the tensor's dtype (float into int truncates). */
  dt_tensor *a = ref_tensor(1, (int64_t[]){3}, DT_I64, (double[]){5, 6, 7}), *out = NULL;
  cr_assert_eq(dt_masked_fill(a, mask, 2.75, &out), DT_OK);
  ref_assert_close(out, 1, (int64_t[]){3}, DT_I64, (double[]){2, 6, 2}, 0, 0);
  dt_tensor_release(out);
  dt_tensor_release(a);
  dt_tensor_release(mask);
}

Test(masked_fill, bad_input) {
  dt_tensor *a = ref_random(1, (int64_t[]){3}, DT_F32, 0, 1, 1);
  dt_tensor *fmask = ref_random(1, (int64_t[]){3}, DT_F32, 0, 1, 2);
  dt_tensor *big = ref_random(2, (int64_t[]){2, 3}, DT_BOOL, 0, 2, 3);
  dt_tensor *out = (dt_tensor *)0x1;
  cr_assert_eq(dt_masked_fill(a, fmask, 0, &out), DT_ERR_DTYPE);
  cr_assert_null(out);
  ref_assert_error_mentions("masked_fill.Scalar", "mask");
  cr_assert_eq(dt_masked_fill(a, big, 0, &out), DT_ERR_SHAPE);
  cr_assert_null(out);
  ref_assert_error_mentions("masked_fill.Scalar", "[2, 3]");
  cr_assert_eq(dt_masked_fill(a, NULL, 0, &out), DT_ERR_INVALID);
  ref_assert_error_mentions("masked_fill.Scalar", "input 1");
  cr_assert_eq(dt_masked_fill(a, big, 0, NULL), DT_ERR_INVALID);
  dt_tensor_release(a);
  dt_tensor_release(fmask);
  dt_tensor_release(big);
}

Test(fill_, every_dtype_and_strided_views) {
  dt_dtype dtypes[] = {DT_F32, DT_F64, DT_BF16, DT_F16, DT_I64, DT_I32, DT_U8, DT_BOOL};
  for (size_t i = 0; i < 8; i++) {
    dt_tensor *base = ref_random(2, (int64_t[]){4, 6}, dtypes[i], 0, 2, i), *t = NULL;
    cr_assert_eq(dt_transpose(base, 0, 1, &t), DT_OK);
    cr_assert_eq(dt_fill_(t, 3), DT_OK, "%s", dt_last_error());
    double e = dtypes[i] == DT_BOOL ? 1 : 3, expected[24];
    for (int k = 0; k < 24; k++) expected[k] = e;
    ref_assert_close(base, 2, (int64_t[]){4, 6}, dtypes[i], expected, 0, 0);
    dt_tensor_release(t);
    dt_tensor_release(base);
  }
  dt_tensor *t = ref_tensor(1, (int64_t[]){2}, DT_I32, (double[]){1, 2});
  cr_assert_eq(dt_fill_(t, -2.5), DT_OK);
  ref_assert_close(t, 1, (int64_t[]){2}, DT_I32, (double[]){-2, -2}, 0, 0);
  dt_tensor_release(t);
  cr_assert_eq(dt_fill_(NULL, 1), DT_ERR_INVALID);
  ref_assert_error_mentions("fill_.Scalar", "input 0");
}
