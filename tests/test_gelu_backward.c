/* gelu_backward, the one-pass gradient of gelu (both forms): against the derivative written
 * out here in double (from erfc, exp and tanh), float32 and float64, over [-8, 8]; against
 * central finite differences of dt_gelu through dt_backward (float64); with a broadcast
 * incoming gradient; and its dtype error. Includes ops/op_impl.h: dt__gelu_backward is the
 * op's internal dispatch function (the public path to it is dt_backward through gelu). */
#include <criterion/criterion.h>
#include <math.h>

#include "dtensor/dtensor.h"
#include "ops/op_impl.h"

static double ref_grad(bool tanh_form, double x) {
  if (tanh_form) {
    const double k = sqrt(2.0 / 3.14159265358979323846), c = 0.044715;
    double u = k * (x + c * x * x * x), t = tanh(u);
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * c * x * x);
  }
  return 0.5 * erfc(-x / sqrt(2.0)) + x * exp(-0.5 * x * x) / sqrt(2 * 3.14159265358979323846);
}

#define N 4001

static void check_against_formula(dt_dtype dtype, bool tanh_form) {
  static double xs[N], gs[N], got[N];
  for (int i = 0; i < N; i++) {
    xs[i] = -8.0 + 16.0 * i / (N - 1);
    gs[i] = 0.5 + 0.25 * sin(i);
  }
  dt_tensor *x64 = NULL, *g64 = NULL, *x = NULL, *g = NULL, *out = NULL;
  cr_assert_eq(dt_from_data(xs, 1, (int64_t[]){N}, DT_F64, &x64), DT_OK);
  cr_assert_eq(dt_from_data(gs, 1, (int64_t[]){N}, DT_F64, &g64), DT_OK);
  cr_assert_eq(dt_to(x64, dtype, &x), DT_OK);
  cr_assert_eq(dt_to(g64, dtype, &g), DT_OK);
  cr_assert_eq(dt__gelu_backward(g, x, tanh_form ? DT_OP_FLAG_GELU_TANH : 0, &out), DT_OK, "%s",
               dt_last_error());
  cr_assert_eq(dt_tensor_to_doubles(out, got, N), DT_OK);
  for (int i = 0; i < N; i++) {
    /* The inputs as the kernel saw them (float32 rounds x and g). */
    double xi = dtype == DT_F32 ? (double)(float)xs[i] : xs[i];
    double gi = dtype == DT_F32 ? (double)(float)gs[i] : gs[i];
    double want = gi * ref_grad(tanh_form, xi);
    double tol = dtype == DT_F32 ? 2e-6 + 4e-6 * fabs(want) : 1e-14 + 1e-13 * fabs(want);
    cr_assert(fabs(got[i] - want) <= tol, "%s %s x = %.9g: %.9g, want %.9g",
              tanh_form ? "tanh" : "exact", dtype == DT_F32 ? "f32" : "f64", xi, got[i], want);
  }
  dt_tensor *all[] = {x64, g64, x, g, out};
  for (int i = 0; i < 5; i++) dt_tensor_release(all[i]);
}

Test(gelu_backward, matches_the_derivative_f32_and_f64) {
  check_against_formula(DT_F32, false);
  check_against_formula(DT_F32, true);
  check_against_formula(DT_F64, false);
  check_against_formula(DT_F64, true);
}

/* dt_backward through gelu (the backward formula runs gelu_backward) against central
 * differences of dt_gelu in float64. */
Test(gelu_backward, autograd_matches_finite_differences) {
  for (int form = 0; form < 2; form++) {
    double xs[41], g[41], grad[41];
    for (int i = 0; i < 41; i++) xs[i] = -5.0 + 0.25 * i + 0.01, g[i] = 1.0 + 0.1 * i;
    dt_tensor *x = NULL, *y = NULL, *gt = NULL, *xg = NULL;
    cr_assert_eq(dt_from_data(xs, 1, (int64_t[]){41}, DT_F64, &x), DT_OK);
    cr_assert_eq(dt_from_data(g, 1, (int64_t[]){41}, DT_F64, &gt), DT_OK);
    cr_assert_eq(dt_tensor_set_requires_grad(x, true), DT_OK);
    cr_assert_eq(form ? dt_gelu_tanh(x, &y) : dt_gelu(x, &y), DT_OK);
    cr_assert_eq(dt_backward(y, gt), DT_OK, "%s", dt_last_error());
    cr_assert_eq(dt_tensor_grad(x, &xg), DT_OK);
    cr_assert_eq(dt_tensor_to_doubles(xg, grad, 41), DT_OK);
    const double h = 1e-6;
    for (int i = 0; i < 41; i++) {
      double pm[2];
      for (int s = 0; s < 2; s++) {
        dt_tensor *p = NULL, *q = NULL;
        double v = xs[i] + (s ? -h : h);
        cr_assert_eq(dt_from_data(&v, 1, (int64_t[]){1}, DT_F64, &p), DT_OK);
        cr_assert_eq(form ? dt_gelu_tanh(p, &q) : dt_gelu(p, &q), DT_OK);
        cr_assert_eq(dt_tensor_to_doubles(q, &pm[s], 1), DT_OK);
        dt_tensor_release(p);
        dt_tensor_release(q);
      }
      double want = g[i] * (pm[0] - pm[1]) / (2 * h);
      cr_assert(fabs(grad[i] - want) <= 1e-7 * (1 + fabs(want)), "form %d x = %g: %.12g vs %.12g",
                form, xs[i], grad[i], want);
    }
    dt_tensor *all[] = {x, y, gt, xg};
    for (int i = 0; i < 4; i++) dt_tensor_release(all[i]);
  }
}

/* A [3, 1] gradient broadcast over x [3, 4]; a mixed dtype is refused naming both. */
Test(gelu_backward, broadcast_and_dtype_error) {
  float xs[12], gs[3] = {1.0f, -2.0f, 0.5f}, got[12];
  for (int i = 0; i < 12; i++) xs[i] = -3.0f + 0.5f * (float)i;
  dt_tensor *x = NULL, *g = NULL, *out = NULL, *g64 = NULL, *bad = NULL;
  cr_assert_eq(dt_from_data(xs, 2, (int64_t[]){3, 4}, DT_F32, &x), DT_OK);
  cr_assert_eq(dt_from_data(gs, 2, (int64_t[]){3, 1}, DT_F32, &g), DT_OK);
  cr_assert_eq(dt__gelu_backward(g, x, 0, &out), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_tensor_ndim(out), 2);
  cr_assert_eq(dt_tensor_shape(out)[1], 4);
  memcpy(got, dt_tensor_data(out), sizeof got);
  for (int i = 0; i < 12; i++) {
    double want = (double)gs[i / 4] * ref_grad(false, (double)xs[i]);
    cr_assert(fabs((double)got[i] - want) <= 2e-6 + 4e-6 * fabs(want), "%d: %g vs %g", i,
              (double)got[i], want);
  }
  cr_assert_eq(dt_to(g, DT_F64, &g64), DT_OK);
  cr_assert_eq(dt__gelu_backward(g64, x, 0, &bad), DT_ERR_DTYPE);
  cr_assert(strstr(dt_last_error(), "gelu_backward") && strstr(dt_last_error(), "float64"), "%s",
            dt_last_error());
  dt_tensor *all[] = {x, g, out, g64};
  for (int i = 0; i < 4; i++) dt_tensor_release(all[i]);
}
