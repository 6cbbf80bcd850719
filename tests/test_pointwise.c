/* Pointwise ops against hand-computed values and a naive broadcasting reference. */
#include <math.h>
#include <stdlib.h>

#include "reference.h"

#define M_SQRT2 1.41421356237309504880

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
    expected[i] =
        ref_broadcast_get(va, nda, sa, nd, index) + 3 * ref_broadcast_get(vb, ndb, sb, nd, index);
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
      check_add(3, (int64_t[]){5, 7, 3}, 2, (int64_t[]){7, 1}, dtypes[i], dtypes[j], false,
                i * 10 + j);
      check_add(3, (int64_t[]){5, 7, 3}, 3, (int64_t[]){5, 7, 3}, dtypes[i], dtypes[j], true,
                i * 10 + j);
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

/* ---- sub, mul, div, maximum, minimum, pow --------------------------------------------- */

typedef dt_status (*binary_fn)(dt_tensor *, dt_tensor *, dt_tensor **);

enum { SUB, MUL, DIV, MAXIMUM, MINIMUM, POW, N_BINARY };
static const binary_fn binary_fns[] = {dt_sub, dt_mul, dt_div, dt_maximum, dt_minimum, dt_pow};
static const char *const binary_names[] = {"sub.Tensor", "mul.Tensor", "div.Tensor",
                                           "maximum",    "minimum",    "pow.Tensor_Tensor"};

/* Integer pow with PyTorch's negative-exponent results. */
static double ref_ipow(double x, double y) {
  if (y < 0) return x == 1 ? 1 : x == -1 ? (fmod(y, 2) != 0 ? -1 : 1) : 0;
  return pow(x, y);
}

static double ref_binary(int op, double x, double y, bool integer) {
  switch (op) {
  case SUB: return x - y;
  case MUL: return x * y;
  case DIV: return x / y;
  case MAXIMUM: return isnan(x) || isnan(y) ? NAN : x > y ? x : y;
  case MINIMUM: return isnan(x) || isnan(y) ? NAN : x < y ? x : y;
  default: return integer ? ref_ipow(x, y) : pow(x, y);
  }
}

static double rtol_of(dt_dtype d) {
  return d == DT_BF16 ? 1e-2 : d == DT_F16 ? 1e-3 : d == DT_F32 ? 1e-6 : d == DT_F64 ? 1e-13 : 0;
}

static void check_binary(int op, int nda, const int64_t *sa, int ndb, const int64_t *sb,
                         dt_dtype da, dt_dtype db, bool strided, uint64_t seed) {
  bool is_pow = op == POW, is_div = op == DIV;
  double alo = is_pow ? 0.25 : -50, ahi = is_pow ? 4 : 50;
  double blo = is_pow ? -3 : is_div ? 1 : -50, bhi = is_pow ? 4 : 50;
  if (is_pow && !dt_dtype_is_floating(da)) alo = -4;
  dt_tensor *a = strided && nda >= 2 ? ref_random_strided(nda, sa, da, alo, ahi, seed)
                                     : ref_random(nda, sa, da, alo, ahi, seed);
  dt_tensor *b = ref_random(ndb, sb, db, blo, bhi, seed + 1);
  double *va = ref_values(a), *vb = ref_values(b);
  dt_tensor *out = NULL;
  cr_assert_eq(binary_fns[op](a, b, &out), DT_OK, "%s", dt_last_error());
  dt_dtype rd = dt_dtype_promote(da, db);
  if (is_div && !dt_dtype_is_floating(rd)) rd = DT_F32;
  int nd = dt_tensor_ndim(out);
  const int64_t *so = dt_tensor_shape(out);
  int64_t n = dt_tensor_numel(out);
  double *expected = malloc(sizeof(double) * (size_t)(n ? n : 1));
  int64_t index[DT_MAX_DIMS];
  for (int64_t i = 0; i < n; i++) {
    ref_unravel(i, nd, so, index);
    expected[i] = ref_binary(op, ref_broadcast_get(va, nda, sa, nd, index),
                             ref_broadcast_get(vb, ndb, sb, nd, index), !dt_dtype_is_floating(rd));
  }
  double rtol = rtol_of(rd);
  ref_assert_close(out, nd, so, rd, expected, rtol, rtol * (is_pow ? 1 : 100));
  free(expected);
  free(va);
  free(vb);
  dt_tensor_release(a);
  dt_tensor_release(b);
  dt_tensor_release(out);
}

Test(binary, hand_computed) {
  int64_t shape[] = {2, 3};
  dt_tensor *a = ref_tensor(2, shape, DT_F32, (double[]){1, -2, 3, 4, 5, 6});
  dt_tensor *b = ref_tensor(1, (int64_t[]){3}, DT_F32, (double[]){2, 4, -1});
  double expected[N_BINARY][6] = {
      {-1, -6, 4, 2, 1, 7}, {2, -8, -3, 8, 20, -6}, {0.5, -0.5, -3, 2, 1.25, -6},
      {2, 4, 3, 4, 5, 6},   {1, -2, -1, 2, 4, -1},  {1, 16, 1.0 / 3, 16, 625, 1.0 / 6},
  };
  for (int op = 0; op < N_BINARY; op++) {
    dt_tensor *out = NULL;
    cr_assert_eq(binary_fns[op](a, b, &out), DT_OK, "%s", dt_last_error());
    ref_assert_close(out, 2, shape, DT_F32, expected[op], 1e-7, 0);
    dt_tensor_release(out);
  }
  dt_tensor *out = NULL;
  cr_assert_eq(dt_sub_ex(a, b, 0.5, &out), DT_OK);
  ref_assert_close(out, 2, shape, DT_F32, (double[]){0, -4, 3.5, 3, 3, 6.5}, 0, 0);
  dt_tensor_release(out);
  dt_tensor_release(a);
  dt_tensor_release(b);
}

Test(binary, broadcasting_dtypes_and_strides) {
  dt_dtype dtypes[] = {DT_F32, DT_F64, DT_BF16, DT_F16, DT_I64, DT_I32};
  for (int op = 0; op < N_BINARY; op++) {
    for (size_t i = 0; i < 6; i++) {
      for (size_t j = 0; j < 6; j++) {
        uint64_t seed = (uint64_t)op * 100 + i * 10 + j;
        check_binary(op, 3, (int64_t[]){5, 7, 3}, 2, (int64_t[]){7, 1}, dtypes[i], dtypes[j], false,
                     seed);
        check_binary(op, 3, (int64_t[]){5, 7, 3}, 3, (int64_t[]){5, 7, 3}, dtypes[i], dtypes[j],
                     true, seed);
      }
    }
    /* Contiguous fast paths: same shape, scalar operand, odd lengths. */
    check_binary(op, 1, (int64_t[]){1029}, 1, (int64_t[]){1029}, DT_F32, DT_F32, false, op);
    check_binary(op, 1, (int64_t[]){1029}, 0, NULL, DT_F32, DT_F32, false, op);
    check_binary(op, 1, (int64_t[]){1029}, 1, (int64_t[]){1029}, DT_F64, DT_F64, false, op);
    check_binary(op, 2, (int64_t[]){33, 17}, 0, NULL, DT_F64, DT_F64, false, op);
    check_binary(op, 4, (int64_t[]){2, 1, 3, 5}, 3, (int64_t[]){4, 1, 5}, DT_F64, DT_F32, true, op);
    check_binary(op, 1, (int64_t[]){0}, 1, (int64_t[]){1}, DT_F32, DT_F32, false, op);
  }
}

Test(binary, maximum_minimum_propagate_nan) {
  dt_dtype dtypes[] = {DT_F32, DT_F64, DT_BF16, DT_F16};
  for (size_t i = 0; i < 4; i++) {
    dt_tensor *a = ref_tensor(1, (int64_t[]){4}, dtypes[i], (double[]){NAN, 1, NAN, -2});
    dt_tensor *b = ref_tensor(1, (int64_t[]){4}, dtypes[i], (double[]){0, NAN, NAN, 3});
    dt_tensor *out = NULL;
    cr_assert_eq(dt_maximum(a, b, &out), DT_OK);
    ref_assert_close(out, 1, (int64_t[]){4}, dtypes[i], (double[]){NAN, NAN, NAN, 3}, 0, 0);
    dt_tensor_release(out);
    cr_assert_eq(dt_minimum(b, a, &out), DT_OK);
    ref_assert_close(out, 1, (int64_t[]){4}, dtypes[i], (double[]){NAN, NAN, NAN, -2}, 0, 0);
    dt_tensor_release(out);
    dt_tensor *s = ref_tensor(0, NULL, dtypes[i], (double[]){NAN});
    cr_assert_eq(dt_maximum(b, s, &out), DT_OK); /* broadcast NaN scalar */
    ref_assert_close(out, 1, (int64_t[]){4}, dtypes[i], (double[]){NAN, NAN, NAN, NAN}, 0, 0);
    dt_tensor_release(out);
    dt_tensor_release(s);
    dt_tensor_release(a);
    dt_tensor_release(b);
  }
}

Test(binary, integer_semantics) {
  /* div of integers is true division into float32; pow of integers is exact. */
  dt_tensor *a = ref_tensor(1, (int64_t[]){4}, DT_I32, (double[]){7, -7, 1, 0});
  dt_tensor *b = ref_tensor(1, (int64_t[]){4}, DT_I64, (double[]){2, 2, 0, 0});
  dt_tensor *out = NULL;
  cr_assert_eq(dt_div(a, b, &out), DT_OK);
  ref_assert_close(out, 1, (int64_t[]){4}, DT_F32, (double[]){3.5, -3.5, INFINITY, NAN}, 0, 0);
  dt_tensor_release(out);
  dt_tensor_release(a);
  dt_tensor_release(b);
  int64_t base[] = {3, 2, -1, 5, 1}, exps[] = {39, 62, -3, -1, -7};
  cr_assert_eq(dt_from_data(base, 1, (int64_t[]){5}, DT_I64, &a), DT_OK);
  cr_assert_eq(dt_from_data(exps, 1, (int64_t[]){5}, DT_I64, &b), DT_OK);
  cr_assert_eq(dt_pow(a, b, &out), DT_OK);
  const int64_t *o = dt_tensor_data(out);
  cr_assert_eq(o[0], 4052555153018976267LL);
  cr_assert_eq(o[1], 1LL << 62);
  cr_assert(o[2] == -1 && o[3] == 0 && o[4] == 1);
  dt_tensor_release(out);
  dt_tensor_release(a);
  dt_tensor_release(b);
  /* u8 wraps; bool * bool stays bool. */
  a = ref_tensor(1, (int64_t[]){2}, DT_U8, (double[]){3, 200});
  b = ref_tensor(1, (int64_t[]){2}, DT_U8, (double[]){5, 100});
  cr_assert_eq(dt_sub(a, b, &out), DT_OK);
  ref_assert_close(out, 1, (int64_t[]){2}, DT_U8, (double[]){254, 100}, 0, 0);
  dt_tensor_release(out);
  dt_tensor_release(a);
  dt_tensor_release(b);
  a = ref_tensor(1, (int64_t[]){2}, DT_BOOL, (double[]){1, 1});
  b = ref_tensor(1, (int64_t[]){2}, DT_BOOL, (double[]){1, 0});
  cr_assert_eq(dt_mul(a, b, &out), DT_OK);
  ref_assert_close(out, 1, (int64_t[]){2}, DT_BOOL, (double[]){1, 0}, 0, 0);
  dt_tensor_release(out);
  dt_tensor_release(a);
  dt_tensor_release(b);
}

Test(binary, bad_input) {
  dt_tensor *a = ref_random(2, (int64_t[]){2, 3}, DT_F32, 0, 1, 1);
  dt_tensor *b = ref_random(1, (int64_t[]){4}, DT_F32, 0, 1, 2);
  dt_tensor *flags = ref_random(1, (int64_t[]){3}, DT_BOOL, 0, 2, 3);
  dt_tensor *ints = ref_random(1, (int64_t[]){3}, DT_I32, 0, 5, 3);
  for (int op = 0; op < N_BINARY; op++) {
    dt_tensor *out = (dt_tensor *)0x1;
    cr_assert_eq(binary_fns[op](a, b, &out), DT_ERR_SHAPE);
    cr_assert_null(out);
    ref_assert_error_mentions(binary_names[op], "[2, 3] and [4]");
    out = (dt_tensor *)0x1;
    cr_assert_eq(binary_fns[op](a, NULL, &out), DT_ERR_INVALID);
    cr_assert_null(out);
    ref_assert_error_mentions(binary_names[op], "input 1");
    cr_assert_eq(binary_fns[op](a, a, NULL), DT_ERR_INVALID);
  }
  dt_tensor *out = (dt_tensor *)0x1;
  cr_assert_eq(dt_sub(flags, flags, &out), DT_ERR_DTYPE);
  cr_assert_null(out);
  ref_assert_error_mentions("sub.Tensor", "bool");
  cr_assert_eq(dt_add_ex(ints, ints, 0.5, &out), DT_ERR_INVALID);
  cr_assert_null(out);
  ref_assert_error_mentions("add.Tensor", "alpha");
  dt_tensor_release(a);
  dt_tensor_release(b);
  dt_tensor_release(flags);
  dt_tensor_release(ints);
}

/* ---- Scalar forms ------------------------------------------------------------------------ */

typedef dt_status (*scalar_fn)(dt_tensor *, double, dt_tensor **);

Test(scalar, hand_computed_and_result_dtypes) {
  struct {
    scalar_fn fn;
    dt_dtype in;
    double s;
    dt_dtype out;
    double expected[3];
  } rows[] = {
      {dt_add_scalar, DT_F32, 0.5, DT_F32, {1.5, 2.5, -2.5}},
      {dt_sub_scalar, DT_F64, 0.5, DT_F64, {0.5, 1.5, -3.5}},
      {dt_mul_scalar, DT_BF16, 2, DT_BF16, {2, 4, -6}},
      {dt_div_scalar, DT_F16, 4, DT_F16, {0.25, 0.5, -0.75}},
      {dt_pow_scalar, DT_F32, 2, DT_F32, {1, 4, 9}},
      {dt_pow_scalar, DT_F32, 3, DT_F32, {1, 8, -27}},
      {dt_pow_scalar, DT_F32, -1, DT_F32, {1, 0.5, -1.0 / 3}},
      {dt_pow_scalar, DT_F64, 0.5, DT_F64, {1, M_SQRT2, NAN}},
      {dt_add_scalar, DT_I32, 2, DT_I32, {3, 4, -1}},
      {dt_add_scalar, DT_I32, 2.5, DT_F32, {3.5, 4.5, -0.5}},
      {dt_mul_scalar, DT_I64, -3, DT_I64, {-3, -6, 9}},
      {dt_div_scalar, DT_I64, 2, DT_F32, {0.5, 1, -1.5}},
      {dt_pow_scalar, DT_I32, 3, DT_I32, {1, 8, -27}},
      {dt_pow_scalar, DT_I32, 0.5, DT_F32, {1, M_SQRT2, NAN}},
      {dt_sub_scalar, DT_U8, 1, DT_U8, {0, 1, 252}},
  };
  for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
    dt_tensor *a = ref_tensor(1, (int64_t[]){3}, rows[i].in, (double[]){1, 2, -3});
    dt_tensor *out = NULL;
    cr_assert_eq(rows[i].fn(a, rows[i].s, &out), DT_OK, "row %zu: %s", i, dt_last_error());
    ref_assert_close(out, 1, (int64_t[]){3}, rows[i].out, rows[i].expected, 1e-6, 0);
    dt_tensor_release(out);
    dt_tensor_release(a);
  }
  /* bool with an integral scalar gives int64, as in PyTorch. */
  dt_tensor *a = ref_tensor(1, (int64_t[]){2}, DT_BOOL, (double[]){1, 0}), *out = NULL;
  cr_assert_eq(dt_add_scalar(a, 1, &out), DT_OK);
  ref_assert_close(out, 1, (int64_t[]){2}, DT_I64, (double[]){2, 1}, 0, 0);
  dt_tensor_release(out);
  dt_tensor_release(a);
  /* int64 arithmetic with a scalar is exact. */
  int64_t big = (1LL << 60) + 1;
  cr_assert_eq(dt_from_data(&big, 0, NULL, DT_I64, &a), DT_OK);
  cr_assert_eq(dt_mul_scalar(a, 4, &out), DT_OK);
  cr_assert_eq(*(int64_t *)dt_tensor_data(out), (int64_t)((uint64_t)big * 4));
  dt_tensor_release(out);
  dt_tensor_release(a);
}

Test(scalar, random_vs_reference) {
  scalar_fn fns[] = {dt_add_scalar, dt_sub_scalar, dt_mul_scalar, dt_div_scalar, dt_pow_scalar};
  dt_dtype dtypes[] = {DT_F32, DT_F64, DT_BF16, DT_F16};
  double scalars[] = {2, -1.5, 0.25, 3};
  for (size_t f = 0; f < 5; f++) {
    for (size_t d = 0; d < 4; d++) {
      for (size_t k = 0; k < 4; k++) {
        double s = scalars[k];
        for (int strided = 0; strided < 2; strided++) {
          int64_t shape[] = {7, 9};
          dt_tensor *a = strided ? ref_random_strided(2, shape, dtypes[d], 0.5, 5, f + d + k)
                                 : ref_random(2, shape, dtypes[d], 0.5, 5, f + d + k);
          double *va = ref_values(a), expected[63];
          for (int i = 0; i < 63; i++) {
            double x = va[i];
            expected[i] = f == 0   ? x + s
                          : f == 1 ? x - s
                          : f == 2 ? x * s
                          : f == 3 ? x / s
                                   : pow(x, s);
          }
          dt_tensor *out = NULL;
          cr_assert_eq(fns[f](a, s, &out), DT_OK, "%s", dt_last_error());
          double rtol = rtol_of(dtypes[d]) * 2;
          ref_assert_close(out, 2, shape, dtypes[d], expected, rtol, rtol);
          dt_tensor_release(out);
          free(va);
          dt_tensor_release(a);
        }
      }
    }
  }
}

Test(scalar, bad_input) {
  dt_tensor *ints = ref_random(1, (int64_t[]){3}, DT_I32, 0, 5, 1);
  dt_tensor *flags = ref_random(1, (int64_t[]){3}, DT_BOOL, 0, 2, 1);
  dt_tensor *out = (dt_tensor *)0x1;
  cr_assert_eq(dt_pow_scalar(ints, -2, &out), DT_ERR_INVALID);
  cr_assert_null(out);
  ref_assert_error_mentions("pow.Tensor_Scalar", "negative");
  cr_assert_eq(dt_sub_scalar(flags, 1, &out), DT_ERR_DTYPE);
  cr_assert_null(out);
  ref_assert_error_mentions("sub.Scalar", "bool");
  scalar_fn fns[] = {dt_add_scalar, dt_sub_scalar, dt_mul_scalar, dt_div_scalar, dt_pow_scalar};
  const char *names[] = {"add.Scalar", "sub.Scalar", "mul.Scalar", "div.Scalar",
                         "pow.Tensor_Scalar"};
  for (int i = 0; i < 5; i++) {
    out = (dt_tensor *)0x1;
    cr_assert_eq(fns[i](NULL, 1, &out), DT_ERR_INVALID);
    cr_assert_null(out);
    ref_assert_error_mentions(names[i], "input 0");
    cr_assert_eq(fns[i](ints, 1, NULL), DT_ERR_INVALID);
  }
  dt_tensor_release(ints);
  dt_tensor_release(flags);
}

/* ---- In-place forms -------------------------------------------------------------------- */

Test(inplace, tensor_forms_broadcast_and_cast) {
  int64_t shape[] = {2, 3};
  dt_tensor *b = ref_tensor(1, (int64_t[]){3}, DT_F64, (double[]){2, 4, 8});
  dt_tensor *a = ref_tensor(2, shape, DT_F32, (double[]){1, 2, 3, 4, 5, 6});
  cr_assert_eq(dt_sub_(a, b), DT_OK, "%s", dt_last_error());
  ref_assert_close(a, 2, shape, DT_F32, (double[]){-1, -2, -5, 2, 1, -2}, 0, 0);
  cr_assert_eq(dt_mul_(a, b), DT_OK);
  ref_assert_close(a, 2, shape, DT_F32, (double[]){-2, -8, -40, 4, 4, -16}, 0, 0);
  cr_assert_eq(dt_div_(a, b), DT_OK);
  ref_assert_close(a, 2, shape, DT_F32, (double[]){-1, -2, -5, 2, 1, -2}, 0, 0);
  cr_assert_eq(dt_add_scalar_(a, 0.5), DT_OK);
  ref_assert_close(a, 2, shape, DT_F32, (double[]){-0.5, -1.5, -4.5, 2.5, 1.5, -1.5}, 0, 0);
  cr_assert_eq(dt_mul_scalar_(a, -2), DT_OK);
  ref_assert_close(a, 2, shape, DT_F32, (double[]){1, 3, 9, -5, -3, 3}, 0, 0);
  dt_tensor_release(a);
  dt_tensor_release(b);

  /* Integer in place stays integer and exact. */
  a = ref_tensor(1, (int64_t[]){3}, DT_I64, (double[]){1, 2, 3});
  b = ref_tensor(1, (int64_t[]){3}, DT_I32, (double[]){5, 5, 5});
  cr_assert_eq(dt_mul_(a, b), DT_OK);
  cr_assert_eq(dt_add_scalar_(a, 7), DT_OK);
  ref_assert_close(a, 1, (int64_t[]){3}, DT_I64, (double[]){12, 17, 22}, 0, 0);
  dt_tensor_release(a);
  dt_tensor_release(b);
}

/* a <op>= b on strided bf16/f32 views, with a aliasing b exactly and through a transpose. */
Test(inplace, aliasing_and_strides) {
  dt_dtype dtypes[] = {DT_F32, DT_BF16, DT_F64, DT_I32};
  for (size_t d = 0; d < 4; d++) {
    int64_t shape[] = {6, 6};
    dt_tensor *a = ref_random_strided(2, shape, dtypes[d], -8, 8, d);
    double *va = ref_values(a), expected[36];
    cr_assert_eq(dt_mul_(a, a), DT_OK, "%s", dt_last_error());
    for (int i = 0; i < 36; i++) expected[i] = va[i] * va[i];
    double rtol = rtol_of(dtypes[d]);
    ref_assert_close(a, 2, shape, dtypes[d], expected, rtol, rtol);
    free(va);
    /* a += a^T reads elements the loop has already overwritten unless b is copied first. */
    va = ref_values(a);
    dt_tensor *t = NULL;
    cr_assert_eq(dt_transpose(a, 0, 1, &t), DT_OK);
    cr_assert_eq(dt_sub_(a, t), DT_OK);
    for (int i = 0; i < 6; i++) {
      for (int j = 0; j < 6; j++) expected[i * 6 + j] = va[i * 6 + j] - va[j * 6 + i];
    }
    ref_assert_close(a, 2, shape, dtypes[d], expected, rtol, rtol * 64);
    dt_tensor_release(t);
    free(va);
    dt_tensor_release(a);
  }
}

Test(inplace, bad_input) {
  dt_tensor *ints = ref_random(1, (int64_t[]){3}, DT_I32, 0, 5, 1);
  dt_tensor *f = ref_random(1, (int64_t[]){3}, DT_F32, 0, 5, 1);
  dt_tensor *big = ref_random(2, (int64_t[]){2, 3}, DT_F32, 0, 5, 1);
  dt_tensor *flags = ref_random(1, (int64_t[]){3}, DT_BOOL, 0, 2, 1);
  cr_assert_eq(dt_div_(ints, ints), DT_ERR_DTYPE);
  ref_assert_error_mentions("div_.Tensor", "int32");
  cr_assert_eq(dt_mul_(ints, f), DT_ERR_DTYPE); /* float result into int32 */
  ref_assert_error_mentions("mul_.Tensor", "float32");
  cr_assert_eq(dt_add_scalar_(ints, 0.5), DT_ERR_DTYPE);
  ref_assert_error_mentions("add_.Scalar", "int32");
  cr_assert_eq(dt_mul_scalar_(flags, 2), DT_ERR_DTYPE);
  ref_assert_error_mentions("mul_.Scalar", "bool");
  cr_assert_eq(dt_sub_(flags, flags), DT_ERR_DTYPE);
  ref_assert_error_mentions("sub_.Tensor", "bool");
  cr_assert_eq(dt_sub_(f, big), DT_ERR_SHAPE);
  ref_assert_error_mentions("sub_.Tensor", "[2, 3]");
  cr_assert_eq(dt_mul_(f, NULL), DT_ERR_INVALID);
  ref_assert_error_mentions("mul_.Tensor", "input 1");
  cr_assert_eq(dt_div_(NULL, f), DT_ERR_INVALID);
  ref_assert_error_mentions("div_.Tensor", "input 0");
  cr_assert_eq(dt_add_scalar_(NULL, 1), DT_ERR_INVALID);
  ref_assert_error_mentions("add_.Scalar", "input 0");
  cr_assert_eq(dt_mul_scalar_(NULL, 1), DT_ERR_INVALID);
  ref_assert_error_mentions("mul_.Scalar", "input 0");
  /* Nothing was written by the failed calls. */
  double *v = ref_values(f);
  dt_tensor *f2 = ref_random(1, (int64_t[]){3}, DT_F32, 0, 5, 1);
  double *v2 = ref_values(f2);
  for (int i = 0; i < 3; i++) cr_assert_eq(v[i], v2[i]);
  free(v);
  free(v2);
  dt_tensor_release(f2);
  dt_tensor_release(ints);
  dt_tensor_release(f);
  dt_tensor_release(big);
  dt_tensor_release(flags);
}
