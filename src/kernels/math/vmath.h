/*
 * Branch-free float32 math that gcc -O3 vectorizes inside a contiguous loop (libm's expf,
 * logf and erfcf are scalar calls): exp, log, tanh and the standard normal CDF (exact GELU
 * and its derivative). Shared by the CPU's unary, softmax, norm and loss kernels, and compiled
 * by nvcc for the CUDA kernels (core/host_device.h), which then give the same float32 bits as
 * the CPU (the CUDA build compiles with --fmad=false, as the C build has -ffp-contract=off).
 *
 * Accuracy over float32 inputs, measured against double libm by tests/test_vmath.c (which
 * sweeps these ranges and asserts the bounds):
 *   dt__exp_f32            [-87, 88]: max 2 ulp (results in the subnormal range: 1 ulp of
 *                          the subnormal spacing)
 *   dt__log_f32            (0, inf): max 3 ulp
 *   dt__tanh_f32           [-10, 10]: max 3 ulp
 *   dt__normal_cdf_f32     [-13, 13]: max 7 ulp (relative, so the far negative tail, where
 *                          GELU is tiny, keeps its digits; the 7 come from the tail's two
 *                          exps and t's three roundings)
 *   dt__normal_pdf_f32     [-13, 13]: max 4 ulp
 * NaN propagates; +-inf give the limits except where a product with x is inf * 0 (as libm).
 */
#ifndef DT_KERNELS_MATH_VMATH_H
#define DT_KERNELS_MATH_VMATH_H

#include "core/host_device.h"

/* cond ? a : b through a bit mask. Written as a ternary, gcc threads the constant arm
 * through the computation that follows and the loop no longer vectorizes. */
static inline DT_HOST_DEVICE float dt__select_f32(int cond, float a, float b) {
  uint32_t mask = (uint32_t)0 - (uint32_t)cond;
  return dt__bits_to_f32((dt__f32_to_bits(a) & mask) | (dt__f32_to_bits(b) & ~mask));
}

/* e^x = 2^n * e^r with n = round(x / ln 2) and |r| <= ln(2)/2; e^r by Taylor to degree 7
 * (truncation below 1e-8). 2^n is applied in two halves so that results in the subnormal
 * range round once. NaN passes through the clamps and the arithmetic. */
static inline DT_HOST_DEVICE float dt__exp_f32(float x) {
  float xc = dt__select_f32(x < -104.0f, -104.0f, x);
  xc = dt__select_f32(xc > 89.0f, 89.0f, xc);
  const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
  float t = xc * 1.44269504f + magic;
  float n = t - magic;
  float r = xc - n * 0.693359375f; /* ln 2 split in a short head (exact products) ... */
  r = r + n * 2.12194440e-4f;      /* ... and the tail */
  float p =
      1.0f +
      r * (1.0f + r * (0.5f + r * (1.0f / 6 +
                                   r * (1.0f / 24 +
                                        r * (1.0f / 120 + r * (1.0f / 720 + r * (1.0f / 5040)))))));
  int32_t ni = (int32_t)(dt__f32_to_bits(t) & 0xfffu) - 2048; /* n from t's low mantissa bits */
  int32_t n1 = ni / 2, n2 = ni - n1;
  return p * dt__bits_to_f32((uint32_t)(n1 + 127) << 23) *
         dt__bits_to_f32((uint32_t)(n2 + 127) << 23);
}

/* log x = e ln 2 + log m with m in [sqrt(1/2), sqrt(2)); log m = 2 atanh(s), s = (m-1)/(m+1),
 * |s| < 0.172, by its odd series to s^11 (truncation below 1e-10). Subnormals are scaled
 * by 2^23 first; zero, negatives, inf and NaN are patched at the end. */
static inline DT_HOST_DEVICE float dt__log_f32(float x) {
  int subnormal = x < 1.17549435e-38f;
  float xs = dt__select_f32(subnormal, x * 8388608.0f, x);
  uint32_t bits = dt__f32_to_bits(xs);
  int32_t e = (int32_t)((bits >> 23) & 0xffu) - 127 - 23 * subnormal;
  float m = dt__bits_to_f32((bits & 0x7fffffu) | 0x3f800000u);
  int big = m > 1.41421356f;
  m = dt__select_f32(big, m * 0.5f, m);
  e += big;
  float s = (m - 1.0f) / (m + 1.0f);
  float s2 = s * s;
  float series =
      2.0f * s *
      (1.0f + s2 * (1.0f / 3 + s2 * (1.0f / 5 + s2 * (1.0f / 7 + s2 * (1.0f / 9 + s2 / 11)))));
  float ef = (float)e;
  float y = ef * 0.693359375f + (series - ef * 2.12194440e-4f);
  y = dt__select_f32(x == 0.0f, -INFINITY, y);
  y = dt__select_f32(x < 0.0f, NAN, y);
  y = dt__select_f32(x == INFINITY, INFINITY, y);
  return dt__select_f32(x != x, x, y);
}

/* Near 0, 1 - 2/(e^2x + 1) cancels; there tanh's Taylor series to x^15 is used (its next
 * term is below 1e-8 relative for |x| < 0.55). */
static inline DT_HOST_DEVICE float dt__tanh_f32(float x) {
  float ax = fabsf(x);
  float far = 1.0f - 2.0f / (dt__exp_f32(2.0f * ax) + 1.0f);
  float x2 = x * x;
  float near =
      x * (1.0f +
           x2 * (-1.0f / 3 +
                 x2 * (2.0f / 15 + x2 * (-17.0f / 315 +
                                         x2 * (62.0f / 2835 +
                                               x2 * (-1382.0f / 155925 +
                                                     x2 * (21844.0f / 6081075 +
                                                           x2 * (-929569.0f / 638512875.0f))))))));
  return dt__select_f32(ax < 0.55f, near, copysignf(far, x));
}

/* exp(-x^2 / 2) for x >= 0 without the rounding of x^2, which exp would scale by x^2 (8 ulp
 * at x = 4): x = h + l with h holding 12 significant bits, so h^2 / 2 is exact; the small
 * rest y = -(h l + l^2 / 2) (|y| < 0.1 below the clamp, since l < 2^-11 x) goes through
 * exp's Taylor series to degree 7 (truncation below 1e-11). Inputs clamped to 14.5 (the
 * result is below 1e-45 there: 0 in float32). */
static inline DT_HOST_DEVICE float dt__exp_neg_half_square_f32(float ax) {
  ax = dt__select_f32(ax > 14.5f, 14.5f, ax);
  float h = dt__bits_to_f32(dt__f32_to_bits(ax) & 0xfffff000u);
  float l = ax - h;
  float y = -(h * l + 0.5f * l * l);
  float e =
      1.0f +
      y * (1.0f +
           y * (0.5f +
                y * (1.0f / 6 + y * (1.0f / 24 + y * (1.0f / 120 + y * (1.0f / 720 + y / 5040))))));
  return dt__exp_f32(-0.5f * (h * h)) * e;
}

/* The standard normal density exp(-x^2 / 2) / sqrt(2 pi). */
static inline DT_HOST_DEVICE float dt__normal_pdf_f32(float x) {
  return 0.398942280401432678f * dt__exp_neg_half_square_f32(fabsf(x));
}

/* Phi(x) = P(N(0, 1) <= x) = erfc(-x / sqrt 2) / 2.
 *   |x| < 0.75: 1/2 + x P(x^2) / 2, P(s) ~ erf(sqrt(s / 2)) / sqrt(s) (degree 5, relative
 *               error 2.5e-11 on [0, 0.5625]);
 *   otherwise:  q = Phi(-|x|) = exp(-x^2 / 2) R(t) / 2 with z = |x| / sqrt 2, t = 1 / (1 + z / 2)
 *               and R(t) ~ erfc(z) e^(z^2) (degree 9 in t, relative error 5.5e-9 for z in
 *               [0.53, 10]); Phi = q below zero, 1 - q above (q <= 0.23: no cancellation).
 * The coefficients are Chebyshev fits made with mpmath (chebyfit, 30 digits). Beyond
 * |x| = 14.1 (z = 10) the tail keeps R's value at z = 10 and the exp factor dominates; the
 * result is below 1e-44 there. */
static inline DT_HOST_DEVICE float dt__normal_cdf_f32(float x) {
  float ax = fabsf(x), s = x * x;
  float p = -1.6781785420443273e-5f;
  p = p * s + 0.00022956374699981802f;
  p = p * s - 0.002374279406593363f;
  p = p * s + 0.019947064573838276f;
  p = p * s - 0.13298075775581156f;
  p = p * s + 0.79788456078429632f;
  float center = 0.5f + 0.5f * x * p;
  float z = dt__select_f32(ax > 14.1f, 14.1f, ax) * 0.707106781186547524f;
  float t = 1.0f / (1.0f + 0.5f * z);
  float r = -0.077904606188514404f;
  r = r * t + 0.36596451686053939f;
  r = r * t - 0.63782728824299947f;
  r = r * t + 0.43416760974308553f;
  r = r * t - 0.12605943519767937f;
  r = r * t + 0.24290174293940773f;
  r = r * t + 0.23281366966731983f;
  r = r * t + 0.28397711761409709f;
  r = r * t + 0.28194901054853255f;
  r = r * t + 4.9467274216323336e-6f;
  float q = 0.5f * dt__exp_neg_half_square_f32(ax) * r;
  float tail = dt__select_f32(x < 0.0f, q, 1.0f - q);
  return dt__select_f32(ax < 0.75f, center, tail);
}

#endif /* DT_KERNELS_MATH_VMATH_H */
