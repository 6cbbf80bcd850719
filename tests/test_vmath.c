/* The float32 approximations of kernels/cpu/vmath.h against double libm over the ranges its
 * header documents: the largest error in ulp of the float32 result (its spacing at the
 * reference value, the subnormal spacing below the normal range) must stay within the bound
 * stated there. Inputs: a regular sweep over each range plus its edges, about a million per
 * function. Includes the private header: the functions are static inline kernels' helpers,
 * reachable only from there. */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>

#include "kernels/cpu/vmath.h"
#include "kernels/math/unary.h"

/* The spacing of float32 numbers at |v| (subnormal spacing below FLT_MIN). */
static double ulp_at(double v) {
  double a = fabs(v);
  if (a < FLT_MIN) return ldexp(1.0, -149);
  int e;
  frexp(a, &e); /* a = m 2^e, m in [0.5, 1) */
  return ldexp(1.0, e - 24);
}

typedef float (*approx_fn)(float);
typedef double (*exact_fn)(double);

/* The largest error in ulp over n points of [lo, hi] and the edges. */
static double max_ulp(approx_fn f, exact_fn ref, double lo, double hi, int n, float *worst) {
  double max = 0;
  for (int i = 0; i <= n; i++) {
    float x = (float)(lo + (hi - lo) * i / n);
    double want = ref((double)x), got = (double)f(x);
    double err = fabs(got - want) / ulp_at(want);
    if (!(err <= max)) {
      max = err;
      *worst = x;
    }
  }
  return max;
}

static float exp_f(float x) { return dt__exp_f32(x); }
static float log_f(float x) { return dt__log_f32(x); }
static float tanh_f(float x) { return dt__tanh_f32(x); }
static float cdf_f(float x) { return dt__normal_cdf_f32(x); }
static float pdf_f(float x) { return dt__normal_pdf_f32(x); }
static float gelu_central_f(float x) { return dt__gelu_central_f32(x); }
static float gelu_f(float x) { return dt__gelu_f32(x); }
static double gelu_d(double x) { return 0.5 * x * erfc(-x / sqrt(2.0)); }
static double cdf_d(double x) { return 0.5 * erfc(-x / sqrt(2.0)); }
static double pdf_d(double x) { return exp(-0.5 * x * x) / sqrt(2.0 * 3.14159265358979323846); }

#define CHECK(f, ref, lo, hi, bound)                                                               \
  do {                                                                                             \
    float worst = NAN;                                                                             \
    double e = max_ulp(f, ref, lo, hi, 1000000, &worst);                                           \
    cr_assert(e <= (bound), "%s on [%g, %g]: %.2f ulp at x = %.9g (bound %g)", #f, (double)(lo),   \
              (double)(hi), e, (double)worst, (double)(bound));                                    \
  } while (0)

Test(vmath, exp_within_2_ulp) {
  CHECK(exp_f, exp, -87.0, 88.0, 2);
  CHECK(exp_f, exp, -1.0, 1.0, 2);
  CHECK(exp_f, exp, -103.0, -87.0, 2); /* subnormal results */
}

Test(vmath, log_within_3_ulp) {
  CHECK(log_f, log, 1e-30, 1e-20, 3);
  CHECK(log_f, log, 0.5, 2.0, 3);
  CHECK(log_f, log, 1.0, 1e30, 3);
  CHECK(log_f, log, 1e-44, 1e-38, 3); /* subnormal inputs */
}

Test(vmath, tanh_within_3_ulp) {
  CHECK(tanh_f, tanh, -10.0, 10.0, 3);
  CHECK(tanh_f, tanh, -0.6, 0.6, 3);
}

Test(vmath, normal_cdf_within_7_ulp) {
  CHECK(cdf_f, cdf_d, -13.0, 13.0, 7);
  CHECK(cdf_f, cdf_d, -1.0, 1.0, 7); /* both sides of the switch at |x| = 0.75 */
  CHECK(cdf_f, cdf_d, -13.0, -5.0, 7);
}

Test(vmath, normal_pdf_within_4_ulp) {
  CHECK(pdf_f, pdf_d, -13.0, 13.0, 4);
  CHECK(pdf_f, pdf_d, 3.0, 6.0, 4);
}

/* GELU: the division-free central formula on its range (both signs, near 0, the ends), and
 * dt__gelu_f32 (central within 3.75, x times the CDF beyond) over the CDF's range. */
Test(vmath, gelu_within_5_ulp) {
  CHECK(gelu_central_f, gelu_d, -3.75, 3.75, 5);
  CHECK(gelu_central_f, gelu_d, -1e-3, 1e-3, 5);
  CHECK(gelu_central_f, gelu_d, -3.75, -3.0, 5);
  CHECK(gelu_central_f, gelu_d, 3.0, 3.75, 5);
  CHECK(gelu_f, gelu_d, -13.0, 13.0, 7);
  CHECK(gelu_f, gelu_d, -4.5, -3.5, 7); /* both sides of the switch at |x| = 3.75 */
  CHECK(gelu_f, gelu_d, 3.5, 4.5, 7);
  cr_assert(dt__gelu_f32(0.0f) == 0.0f && !signbit(dt__gelu_f32(0.0f)));
  cr_assert(dt__gelu_f32(-0.0f) == 0.0f && signbit(dt__gelu_f32(-0.0f)), "-0 * Phi(-0) is -0");
  cr_assert(signbit(dt__gelu_central_f32(-0.0f)) && !signbit(dt__gelu_central_f32(0.0f)));
  cr_assert(isnan(dt__gelu_f32(NAN)));
  cr_assert_eq(dt__gelu_f32(INFINITY), INFINITY);
  cr_assert(isnan(dt__gelu_f32(-INFINITY))); /* -inf * 0, as PyTorch */
}

/* Beyond |x| = 13.1 (exp(-x^2 / 2) leaves the normal range) the CDF's lower tail and the
 * density are 0 and the upper tail 1; below it they are still the exact values' nearest
 * floats or close (within the bounds above, subnormals in their spacing). */
Test(vmath, normal_tail_ends) {
  cr_assert_eq(dt__normal_cdf_f32(-13.2f), 0.0f);
  cr_assert_eq(dt__normal_cdf_f32(-100.0f), 0.0f);
  cr_assert_eq(dt__normal_cdf_f32(13.2f), 1.0f);
  cr_assert_eq(dt__normal_pdf_f32(13.2f), 0.0f);
  cr_assert_eq(dt__normal_pdf_f32(-1e30f), 0.0f);
  CHECK(cdf_f, cdf_d, -13.1, -12.5, 7);
  CHECK(pdf_f, pdf_d, 12.5, 13.1, 4);
}

Test(vmath, special_values) {
  cr_assert(isnan(dt__normal_cdf_f32(NAN)) && isnan(dt__exp_f32(NAN)) && isnan(dt__tanh_f32(NAN)));
  cr_assert_eq(dt__normal_cdf_f32(INFINITY), 1.0f);
  cr_assert_eq(dt__normal_cdf_f32(-INFINITY), 0.0f);
  cr_assert_eq(dt__normal_cdf_f32(0.0f), 0.5f);
  cr_assert_eq(dt__normal_pdf_f32(INFINITY), 0.0f);
  cr_assert_eq(dt__exp_f32(-INFINITY), 0.0f);
  cr_assert_eq(dt__exp_f32(INFINITY), INFINITY);
  cr_assert_eq(dt__tanh_f32(INFINITY), 1.0f);
  cr_assert_eq(dt__log_f32(0.0f), -INFINITY);
}
