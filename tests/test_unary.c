/* Unary pointwise ops against hand-computed values and libm on doubles. */
#include <math.h>
#include <stdlib.h>

#include "reference.h"

#define PI 3.14159265358979323846
#define E 2.71828182845904523536

typedef dt_status (*unary_fn)(dt_tensor *, dt_tensor **);

static double ref_gelu(double x) { return 0.5 * x * erfc(-x / sqrt(2.0)); }
/* 0.5 x (1 + tanh u) written as x * sigmoid(2u), which keeps the far negative tail. */
static double ref_gelu_tanh(double x) {
  double u = sqrt(2.0 / PI) * (x + 0.044715 * x * x * x);
  return x / (1.0 + exp(-2.0 * u));
}
static double ref_silu(double x) { return x / (1.0 + exp(-x)); }
static double ref_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
static double ref_relu(double x) { return x < 0 ? 0 : x; }
static double ref_rsqrt(double x) { return 1.0 / sqrt(x); }
static double ref_neg(double x) { return -x; }

typedef struct unary_case {
  const char *name;
  unary_fn fn;
  double (*ref)(double);
  double lo, hi; /* input range for random tests */
} unary_case;

static const unary_case cases[] = {
    {"neg", dt_neg, ref_neg, -10, 10},
    {"abs", dt_abs, fabs, -10, 10},
    {"exp", dt_exp, exp, -10, 10},
    {"log", dt_log, log, 0.001, 100},
    {"sqrt", dt_sqrt, sqrt, 0, 100},
    {"rsqrt", dt_rsqrt, ref_rsqrt, 0.01, 100},
    {"relu", dt_relu, ref_relu, -10, 10},
    {"gelu", dt_gelu, ref_gelu, -8, 8},
    {"gelu_tanh", dt_gelu_tanh, ref_gelu_tanh, -8, 8},
    {"silu", dt_silu, ref_silu, -20, 20},
    {"tanh", dt_tanh, tanh, -6, 6},
    {"sigmoid", dt_sigmoid, ref_sigmoid, -20, 20},
};
#define N_CASES (sizeof cases / sizeof *cases)

static void tolerance(dt_dtype d, double *rtol, double *atol) {
  switch (d) {
  case DT_F64: *rtol = 1e-12, *atol = 1e-14; break;
  case DT_F32: *rtol = 2e-6, *atol = 1e-7; break;
  case DT_F16: *rtol = 2e-3, *atol = 1e-4; break;
  default: *rtol = 1.6e-2, *atol = 1e-3; break; /* bf16 */
  }
}

static void check_unary(const unary_case *c, int ndim, const int64_t *shape, dt_dtype dtype,
                        bool strided, uint64_t seed) {
  dt_tensor *a = strided ? ref_random_strided(ndim, shape, dtype, c->lo, c->hi, seed)
                         : ref_random(ndim, shape, dtype, c->lo, c->hi, seed);
  double *va = ref_values(a);
  int64_t n = dt_tensor_numel(a);
  double *expected = malloc(sizeof(double) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; i++) expected[i] = c->ref(va[i]);
  dt_tensor *out = NULL;
  cr_assert_eq(c->fn(a, &out), DT_OK, "%s: %s", c->name, dt_last_error());
  double rtol, atol;
  tolerance(dtype, &rtol, &atol);
  ref_assert_close(out, ndim, shape, dtype, expected, rtol, atol);
  free(expected);
  free(va);
  dt_tensor_release(a);
  dt_tensor_release(out);
}

Test(unary, every_op_every_float_dtype_vs_libm) {
  dt_dtype dtypes[] = {DT_F32, DT_F64, DT_BF16, DT_F16};
  for (size_t c = 0; c < N_CASES; c++) {
    for (size_t d = 0; d < 4; d++) {
      uint64_t seed = c * 10 + d;
      check_unary(&cases[c], 3, (int64_t[]){5, 7, 3}, dtypes[d], false, seed);
      check_unary(&cases[c], 3, (int64_t[]){5, 7, 3}, dtypes[d], true, seed);
      check_unary(&cases[c], 1, (int64_t[]){1031}, dtypes[d], false, seed); /* odd tail */
      check_unary(&cases[c], 0, NULL, dtypes[d], false, seed);
      check_unary(&cases[c], 2, (int64_t[]){0, 3}, dtypes[d], false, seed);
    }
  }
}

/* Our float32 exp/log/tanh/sigmoid are own approximations: sweep them densely across their
 * whole range against libm in double, a few ulp at most. */
static void sweep(unary_fn fn, double (*ref)(double), double lo, double hi, int n, bool geometric,
                  double rtol, double atol) {
  double *x = malloc(sizeof(double) * (size_t)n), *e = malloc(sizeof(double) * (size_t)n);
  for (int i = 0; i < n; i++) {
    double t = (double)i / (n - 1);
    x[i] = (float)(geometric ? lo * pow(hi / lo, t) : lo + (hi - lo) * t);
    e[i] = ref(x[i]);
  }
  dt_tensor *a = ref_tensor(1, (int64_t[]){n}, DT_F32, x), *out = NULL;
  cr_assert_eq(fn(a, &out), DT_OK);
  ref_assert_close(out, 1, (int64_t[]){n}, DT_F32, e, rtol, atol);
  dt_tensor_release(a);
  dt_tensor_release(out);
  free(x);
  free(e);
}

Test(unary, f32_approximations_are_accurate) {
  sweep(dt_exp, exp, -87, 88.7, 20001, false, 3e-7, 0);
  sweep(dt_exp, exp, -103.9, -87, 2001, false, 0, 1.5e-45); /* subnormal results */
  sweep(dt_log, log, 1e-44, 3e38, 20001, true, 3e-7, 0);
  sweep(dt_log, log, 0.5, 2, 20001, false, 3e-7, 1e-12);
  sweep(dt_tanh, tanh, -12, 12, 20001, false, 3e-7, 0);
  sweep(dt_tanh, tanh, 1e-30, 1, 2001, true, 3e-7, 0);
  sweep(dt_sigmoid, ref_sigmoid, -80, 80, 20001, false, 5e-7, 0);
  sweep(dt_silu, ref_silu, -80, 80, 20001, false, 5e-7, 1e-38);
  /* u = c (x + 0.044715 x^3) rounds in float32: relative error grows with |u| in the tail. */
  sweep(dt_gelu_tanh, ref_gelu_tanh, -9, 9, 20001, false, 1e-5, 1e-38);
  sweep(dt_gelu, ref_gelu, -9, 9, 20001, false, 1e-5, 1e-38); /* same for x / sqrt(2) */
}

/* gelu keeps the sign of a zero (x Phi(x): -0 * 1/2 is -0, as PyTorch's), in the vector loop's
 * runs (with and without a run beyond 3.75 to patch) and a strided input. */
Test(unary, gelu_of_signed_zeros) {
  enum { N = 1100 };
  float v[N];
  for (int i = 0; i < N; i++) v[i] = i % 2 ? -0.0f : 0.0f;
  v[700] = -5.0f; /* the second run of 512 takes the tail formula's patch */
  dt_tensor *a = NULL, *s = NULL, *out = NULL, *out_s = NULL;
  cr_assert_eq(dt_from_data(v, 1, (int64_t[]){N}, DT_F32, &a), DT_OK);
  cr_assert_eq(dt_slice(a, 0, 1, N, 2, &s), DT_OK); /* the -0s, strided */
  cr_assert_eq(dt_gelu(a, &out), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_gelu(s, &out_s), DT_OK, "%s", dt_last_error());
  const float *o = dt_tensor_data(out), *os = dt_tensor_data(out_s);
  for (int i = 0; i < N; i++) {
    if (i == 700) continue;
    cr_assert(o[i] == 0.0f && signbit(o[i]) == signbit(v[i]), "gelu(%s0) at %d gave %g",
              signbit(v[i]) ? "-" : "+", i, (double)o[i]);
  }
  cr_assert(fabs(o[700] - 5.0 * -0.5 * erfc(5.0 / sqrt(2.0))) < 1e-12);
  for (int i = 0; i < N / 2; i++) {
    if (2 * i + 1 == 700) continue;
    cr_assert(os[i] == 0.0f && signbit(os[i]), "strided gelu(-0) at %d gave %g", i, (double)os[i]);
  }
  dt_tensor_release(a), dt_tensor_release(s), dt_tensor_release(out), dt_tensor_release(out_s);
}

Test(unary, hand_computed_and_special_values) {
  int64_t shape[] = {6};
  dt_tensor *a = ref_tensor(1, shape, DT_F32, (double[]){0, 1, -1, INFINITY, -INFINITY, NAN});
  dt_tensor *out = NULL;
  struct {
    unary_fn fn;
    double expected[6];
  } rows[] = {
      {dt_neg, {-0.0, -1, 1, -INFINITY, INFINITY, NAN}},
      {dt_abs, {0, 1, 1, INFINITY, INFINITY, NAN}},
      {dt_relu, {0, 1, 0, INFINITY, 0, NAN}},
      {dt_exp, {1, E, 1 / E, INFINITY, 0, NAN}},
      {dt_log, {-INFINITY, 0, NAN, INFINITY, NAN, NAN}},
      {dt_sqrt, {0, 1, NAN, INFINITY, NAN, NAN}},
      {dt_rsqrt, {INFINITY, 1, NAN, 0, NAN, NAN}},
      {dt_tanh, {0, 0.7615941559557649, -0.7615941559557649, 1, -1, NAN}},
      {dt_sigmoid, {0.5, 0.7310585786300049, 0.2689414213699951, 1, 0, NAN}},
      {dt_silu, {0, 0.7310585786300049, -0.2689414213699951, INFINITY, NAN, NAN}},
      {dt_gelu, {0, 0.8413447460685429, -0.15865525393145707, INFINITY, NAN, NAN}},
      {dt_gelu_tanh, {0, 0.8411919906082768, -0.15880800939172324, INFINITY, NAN, NAN}},
  };
  for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
    cr_assert_eq(rows[i].fn(a, &out), DT_OK, "%s", dt_last_error());
    ref_assert_close(out, 1, shape, DT_F32, rows[i].expected, 1e-6, 0);
    dt_tensor_release(out);
  }
  dt_tensor_release(a);
}

Test(unary, integer_neg_abs_relu) {
  int64_t v64[] = {INT64_MIN, -5, 0, 7, INT64_MAX};
  dt_tensor *a = NULL, *out = NULL;
  cr_assert_eq(dt_from_data(v64, 1, (int64_t[]){5}, DT_I64, &a), DT_OK);
  cr_assert_eq(dt_neg(a, &out), DT_OK);
  cr_assert_eq(dt_tensor_dtype(out), DT_I64);
  const int64_t *o = dt_tensor_data(out);
  cr_assert(o[0] == INT64_MIN && o[1] == 5 && o[2] == 0 && o[3] == -7 && o[4] == -INT64_MAX);
  dt_tensor_release(out);
  cr_assert_eq(dt_abs(a, &out), DT_OK);
  o = dt_tensor_data(out);
  cr_assert(o[0] == INT64_MIN && o[1] == 5 && o[3] == 7 && o[4] == INT64_MAX); /* wraps */
  dt_tensor_release(out);
  cr_assert_eq(dt_relu(a, &out), DT_OK);
  o = dt_tensor_data(out);
  cr_assert(o[0] == 0 && o[1] == 0 && o[2] == 0 && o[3] == 7 && o[4] == INT64_MAX);
  dt_tensor_release(out);
  dt_tensor_release(a);

  a = ref_random_strided(2, (int64_t[]){4, 5}, DT_I32, -100, 100, 3);
  double *va = ref_values(a), e[20];
  cr_assert_eq(dt_abs(a, &out), DT_OK);
  for (int i = 0; i < 20; i++) e[i] = fabs(va[i]);
  ref_assert_close(out, 2, (int64_t[]){4, 5}, DT_I32, e, 0, 0);
  dt_tensor_release(out);
  cr_assert_eq(dt_neg(a, &out), DT_OK);
  for (int i = 0; i < 20; i++) e[i] = -va[i];
  ref_assert_close(out, 2, (int64_t[]){4, 5}, DT_I32, e, 0, 0);
  dt_tensor_release(out);
  free(va);
  dt_tensor_release(a);

  a = ref_tensor(1, (int64_t[]){3}, DT_U8, (double[]){0, 1, 200});
  cr_assert_eq(dt_neg(a, &out), DT_OK);
  ref_assert_close(out, 1, (int64_t[]){3}, DT_U8, (double[]){0, 255, 56}, 0, 0);
  dt_tensor_release(out);
  cr_assert_eq(dt_relu(a, &out), DT_OK);
  ref_assert_close(out, 1, (int64_t[]){3}, DT_U8, (double[]){0, 1, 200}, 0, 0);
  dt_tensor_release(out);
  dt_tensor_release(a);
}

Test(unary, op_names) {
  bool found_gelu = false;
  for (int i = 0; i < dt_op_count(); i++) {
    if (strcmp(dt_op_name(i), "gelu") == 0) found_gelu = true;
  }
  cr_assert(found_gelu);
}

Test(unary, bad_input) {
  dt_tensor *i64 = ref_random(1, (int64_t[]){4}, DT_I64, 0, 9, 1);
  dt_tensor *b = ref_random(1, (int64_t[]){4}, DT_BOOL, 0, 2, 1);
  dt_tensor *out = (dt_tensor *)0x1;
  const char *float_only[] = {"exp",  "log",  "sqrt", "rsqrt",  "gelu",
                              "gelu", "silu", "tanh", "sigmoid"};
  unary_fn float_fns[] = {dt_exp,       dt_log,  dt_sqrt, dt_rsqrt,  dt_gelu,
                          dt_gelu_tanh, dt_silu, dt_tanh, dt_sigmoid};
  for (size_t i = 0; i < sizeof float_fns / sizeof *float_fns; i++) {
    out = (dt_tensor *)0x1;
    cr_assert_eq(float_fns[i](i64, &out), DT_ERR_DTYPE);
    cr_assert_null(out);
    ref_assert_error_mentions(float_only[i], "int64");
  }
  unary_fn int_fns[] = {dt_neg, dt_abs, dt_relu};
  const char *int_names[] = {"neg", "abs", "relu"};
  for (size_t i = 0; i < 3; i++) {
    out = (dt_tensor *)0x1;
    cr_assert_eq(int_fns[i](b, &out), DT_ERR_DTYPE);
    cr_assert_null(out);
    ref_assert_error_mentions(int_names[i], "bool");
  }
  for (size_t c = 0; c < N_CASES; c++) {
    out = (dt_tensor *)0x1;
    cr_assert_eq(cases[c].fn(NULL, &out), DT_ERR_INVALID);
    cr_assert_null(out);
    ref_assert_error_mentions("input 0", NULL);
    cr_assert_eq(cases[c].fn(i64, NULL), DT_ERR_INVALID);
  }
  dt_tensor_release(i64);
  dt_tensor_release(b);
}
