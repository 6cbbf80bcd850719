/* Binary ops with a broadcast operand, the shapes of a transformer's step ([B, T, D] with
 * [B, T, 1], [D], [1, T, D], [B, 1, 1], either operand broadcast) and a transposed operand:
 * every arithmetic op and comparison, float32 and float64, against a naive loop over the
 * broadcast indices computed in double. float32 rows run the fast loops (computed in float32:
 * within 1 ulp of the double result rounded; exact for the comparisons). */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "dtensor/dtensor.h"

typedef dt_status (*binary_fn)(dt_tensor *, dt_tensor *, dt_tensor **);

static double ref_op(int k, double x, double y) {
  switch (k) {
  case 0: return x + y;
  case 1: return x - y;
  case 2: return x * y;
  case 3: return x / y;
  case 4: return x > y ? x : y;
  case 5: return x < y ? x : y;
  case 6: return pow(fabs(x), y);
  case 7: return x == y;
  case 8: return x < y;
  default: return x >= y;
  }
}

static dt_status pow_abs(dt_tensor *a, dt_tensor *b, dt_tensor **out) {
  dt_tensor *m = NULL;
  dt_status st = dt_abs(a, &m);
  if (!st) st = dt_pow(m, b, out);
  dt_tensor_release(m);
  return st;
}

static const binary_fn fns[] = {dt_add,     dt_sub,  dt_mul, dt_div, dt_maximum,
                                dt_minimum, pow_abs, dt_eq,  dt_lt,  dt_ge};

/* Element i of a [4]-d shape, viewed through broadcasting into out_shape. */
static int64_t bcast_index(const int64_t *shape, const int64_t *out_shape, const int64_t *idx) {
  int64_t off = 0;
  for (int d = 0; d < 3; d++) off = off * shape[d] + (shape[d] == 1 ? 0 : idx[d]);
  (void)out_shape;
  return off;
}

static void check_case(dt_dtype dtype, const int64_t *as, const int64_t *bs) {
  int64_t os[3];
  for (int d = 0; d < 3; d++) os[d] = as[d] > bs[d] ? as[d] : bs[d];
  dt_tensor *a = NULL, *b = NULL;
  cr_assert_eq(dt_randn(3, as, dtype, 11, &a), DT_OK);
  cr_assert_eq(dt_randn(3, bs, dtype, 12, &b), DT_OK);
  int64_t na = as[0] * as[1] * as[2], nb = bs[0] * bs[1] * bs[2], no = os[0] * os[1] * os[2];
  double *va = malloc(sizeof(double) * (size_t)na), *vb = malloc(sizeof(double) * (size_t)nb);
  double *vo = malloc(sizeof(double) * (size_t)no);
  cr_assert_eq(dt_tensor_to_doubles(a, va, na), DT_OK);
  cr_assert_eq(dt_tensor_to_doubles(b, vb, nb), DT_OK);
  for (int k = 0; k < (int)(sizeof fns / sizeof *fns); k++) {
    dt_tensor *out = NULL;
    cr_assert_eq(fns[k](a, b, &out), DT_OK, "op %d: %s", k, dt_last_error());
    cr_assert_eq(dt_tensor_numel(out), no);
    cr_assert_eq(dt_tensor_to_doubles(out, vo, no), DT_OK);
    int64_t idx[3];
    for (idx[0] = 0; idx[0] < os[0]; idx[0]++)
      for (idx[1] = 0; idx[1] < os[1]; idx[1]++)
        for (idx[2] = 0; idx[2] < os[2]; idx[2]++) {
          int64_t i = (idx[0] * os[1] + idx[1]) * os[2] + idx[2];
          double x = va[bcast_index(as, os, idx)], y = vb[bcast_index(bs, os, idx)];
          double want = ref_op(k, x, y);
          if (dtype == DT_F32 && k < 7) want = (double)(float)want;
          double tol = dtype == DT_F32 && k < 7 ? 2.4e-7 * fabs(want) : 1e-15 * fabs(want);
          cr_assert(fabs(vo[i] - want) <= tol || (isnan(want) && isnan(vo[i])),
                    "op %d dtype %d a [%lld,%lld,%lld] b [%lld,%lld,%lld] at %lld: %.9g vs %.9g", k,
                    (int)dtype, (long long)as[0], (long long)as[1], (long long)as[2],
                    (long long)bs[0], (long long)bs[1], (long long)bs[2], (long long)i, vo[i],
                    want);
        }
    dt_tensor_release(out);
  }
  free(va);
  free(vb);
  free(vo);
  dt_tensor_release(a);
  dt_tensor_release(b);
}

Test(binary_broadcast, transformer_shapes_both_sides) {
  static const int64_t full[3] = {3, 5, 37};
  static const int64_t others[][3] = {{3, 5, 1}, {1, 1, 37}, {1, 5, 37}, {3, 1, 1}, {3, 1, 37}};
  dt_dtype dtypes[2] = {DT_F32, DT_F64};
  for (int t = 0; t < 2; t++)
    for (size_t k = 0; k < sizeof others / sizeof *others; k++) {
      check_case(dtypes[t], full, others[k]);
      check_case(dtypes[t], others[k], full);
    }
}

/* A transposed operand takes the strided loop; the result must be the same values. */
Test(binary_broadcast, transposed_operand) {
  dt_tensor *a = NULL, *b = NULL, *bt = NULL, *bc = NULL, *r1 = NULL, *r2 = NULL;
  cr_assert_eq(dt_randn(2, (int64_t[]){33, 17}, DT_F32, 1, &a), DT_OK);
  cr_assert_eq(dt_randn(2, (int64_t[]){17, 33}, DT_F32, 2, &b), DT_OK);
  cr_assert_eq(dt_transpose(b, 0, 1, &bt), DT_OK);
  cr_assert_eq(dt_contiguous(bt, &bc), DT_OK);
  cr_assert_eq(dt_mul(a, bt, &r1), DT_OK);
  cr_assert_eq(dt_mul(a, bc, &r2), DT_OK);
  float v1[33 * 17], v2[33 * 17];
  memcpy(v1, dt_tensor_data(r1), sizeof v1);
  memcpy(v2, dt_tensor_data(r2), sizeof v2);
  cr_assert_arr_eq(v1, v2, sizeof v1);
  dt_tensor *all[] = {a, b, bt, bc, r1, r2};
  for (int i = 0; i < 6; i++) dt_tensor_release(all[i]);
}
