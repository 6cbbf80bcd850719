/*
 * Branch-free float32 math that gcc -O3 vectorizes inside a contiguous loop (libm's expf,
 * logf and erfcf are scalar calls): exp, log, tanh and the standard normal CDF (exact GELU
 * and its derivative). Shared by the CPU's unary, softmax, norm and loss kernels, and compiled
 * by nvcc for the CUDA kernels (core/host_device.h), which then give the same float32 bits as
 * the CPU (the CUDA build compiles with --fmad=false, as the C build has -ffp-contract=off).
 * Polynomials and range reductions use explicit fmaf, which is correctly rounded everywhere
 * (one rounding of a * b + c), so every vector clone, the baseline and CUDA still give the same
 * bits: the AVX2 and AVX-512 clones inline it as one instruction; the x86-64 baseline clone
 * (CPUs without FMA only) calls libm's fmaf, slower but exact.
 *
 * Accuracy over float32 inputs, measured against double libm by tests/test_vmath.c (which
 * sweeps these ranges and asserts the bounds):
 *   dt__exp_f32            [-87, 88]: max 2 ulp (results in the subnormal range: 1 ulp of
 *                          the subnormal spacing)
 *   dt__log_f32            (0, inf): max 3 ulp
 *   dt__tanh_f32           [-10, 10]: max 3 ulp
 *   dt__normal_cdf_f32     [-13, 13]: max 7 ulp (relative, so the far negative tail, where
 *                          GELU is tiny, keeps its digits; measured 6.2 at x = -0.71)
 *   dt__normal_pdf_f32     [-13, 13]: max 4 ulp (measured 1.9)
 *   dt__gelu_central_f32   [-3.75, 3.75]: x Phi(x) without a division (where a network's
 *                          GELU inputs lie): max 5 ulp (every float32 of the range checked
 *                          once: 4.5 at x = -3.66; near 0 2.8)
 *   dt__gelu_f32 (math/unary.h, central within 3.75, x times the CDF beyond) [-13, 13]: max 7
 *                          ulp (measured 4.9 at x = -4.19)
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

/* e^r for |r| <= ln(2) / 2: a degree-6 minimax polynomial (error 2e-9 on that interval, an
 * mpmath Chebyshev fit) in fmaf steps. */
static inline DT_HOST_DEVICE float dt__exp_reduced_f32(float r) {
  float p = 0.0013941108433972674f;
  p = fmaf(p, r, 0.0083751263981533351f);
  p = fmaf(p, r, 0.041666352896775158f);
  p = fmaf(p, r, 0.16666415514653277f);
  p = fmaf(p, r, 0.50000000471177575f);
  p = fmaf(p, r, 1.0000000377162139f);
  p = fmaf(p, r, 1.0f);
  return p;
}

/* e^x for x clamped to [-104, 89] (or NaN): 2^n * e^r with n = round(x / ln 2) and |r| <= ln(2)/2
 * (the reduction by fmaf, ln 2 in a head and a tail); e^r by dt__exp_reduced_f32. 2^n is applied in
 * two halves so that results in the subnormal range round once. NaN passes through the clamps and
 * the arithmetic. */
static inline DT_HOST_DEVICE float dt__exp_clamped_f32(float xc) {
  const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
  float t = fmaf(xc, 1.44269504f, magic);
  float n = t - magic;
  float r = fmaf(n, -0.693145752f, xc);
  r = fmaf(n, -1.42860677e-06f, r);
  float p = dt__exp_reduced_f32(r);
  int32_t ni = (int32_t)(dt__f32_to_bits(t) & 0xfffu) - 2048; /* n from t's low mantissa bits */
  int32_t n1 = ni / 2, n2 = ni - n1;
  return p * dt__bits_to_f32((uint32_t)(n1 + 127) << 23) *
         dt__bits_to_f32((uint32_t)(n2 + 127) << 23);
}

static inline DT_HOST_DEVICE float dt__exp_f32(float x) {
  float xc = dt__select_f32(x < -104.0f, -104.0f, x);
  return dt__exp_clamped_f32(dt__select_f32(xc > 89.0f, 89.0f, xc));
}

/* dt__exp_f32 for x <= 0 or NaN (x - max in a softmax): the same bits without the upper
 * clamp, which cannot apply. */
static inline DT_HOST_DEVICE float dt__exp_nonpositive_f32(float x) {
  return dt__exp_clamped_f32(dt__select_f32(x < -104.0f, -104.0f, x));
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

/* ---- The normal distribution (GELU) ------------------------------------------------------- */

/* |x| clamped to 13.1, the largest |x| whose exp(-x^2 / 2) (e^-85.8) is a normal float32:
 * dt__gauss_f32's domain. NaN passes. */
static inline DT_HOST_DEVICE float dt__gauss_arg_f32(float x) {
  float ax = fabsf(x);
  return dt__select_f32(ax > 13.1f, 13.1f, ax);
}

/* exp(-a^2 / 2) for a in [0, 13.1] (dt__gauss_arg_f32). s = a^2 rounds, and exp would scale
 * that rounding by s / 2 (8 ulp at a = 4): its exact error fmaf(a, a, -s) is added to the
 * reduced argument instead, after the reduction -s / 2 = n ln 2 + r (|r| <= ln(2) / 2, ln 2 in
 * a head and a tail). e^r by dt__exp_reduced_f32, 2^n added to its exponent bits (n >= -124 in the
 * domain: the result stays normal). */
static inline DT_HOST_DEVICE float dt__gauss_f32(float a) {
  float s = a * a;
  float err = fmaf(a, a, -s);
  float h = -0.5f * s;             /* exact */
  const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
  float t = fmaf(h, 1.44269504f, magic);
  float n = t - magic;
  float r = fmaf(n, -0.693145752f, h);
  r = fmaf(n, -1.42860677e-06f, r);
  r = fmaf(err, -0.5f, r);
  float p = dt__exp_reduced_f32(r);
  /* t's low bits hold n + 1.5 * 2^23; shifted by 23 the 1.5 * 2^23 part leaves 32 bits. */
  return dt__bits_to_f32(dt__f32_to_bits(p) + (dt__f32_to_bits(t) << 23));
}

/* exp(-x^2 / 2) given a = dt__gauss_arg_f32(x): 0 beyond |x| = 13.1 (the exact value is below
 * 3e-38 there), so that the CDF's tails and the density reach 0 and 1 without a select of
 * their own. */
static inline DT_HOST_DEVICE float dt__gauss_x_f32(float x, float a) {
  return dt__select_f32(fabsf(x) > 13.1f, 0.0f, dt__gauss_f32(a));
}

/* Phi(x) from a = dt__gauss_arg_f32(x) and e = dt__gauss_x_f32(x, a): q = Phi(-|x|) =
 * erfc(z) / 2 with z = a / sqrt 2, erfc(z) = e t G(t), t = 1 / (1 + z / 2), G(t) ~ e^(z^2)
 * erfc(z) / t by a degree-8 polynomial (relative error 5.2e-8 for z in [0, 10], a Chebyshev
 * fit made with mpmath, 30 digits; the coefficients below are G's halves, so the product is
 * q); Phi = q below zero, 1 - q above (q <= 1/2: no cancellation). One formula from 0 to the
 * tail: no switch, one exp. Below x = -13.1 the result is 0 (the exact value is below
 * 2e-39), above 13.1 it is 1. */
static inline DT_HOST_DEVICE float dt__normal_cdf_parts_f32(float x, float a, float e) {
  float t = 1.0f / fmaf(0.353553390593273762f, a, 1.0f); /* 1 / (1 + z / 2) */
  float g = -0.029857459480674017f;
  g = fmaf(g, t, 0.14388415475680594f);
  g = fmaf(g, t, -0.24693182437036512f);
  g = fmaf(g, t, 0.14284885513083534f);
  g = fmaf(g, t, -0.015920878688410058f);
  g = fmaf(g, t, 0.10242682756020392f);
  g = fmaf(g, t, 0.12128644647780604f);
  g = fmaf(g, t, 0.1412225209844164f);
  g = fmaf(g, t, 0.14104133683329906f);
  float q = e * (t * g);
  return dt__select_f32(x < 0.0f, q, 1.0f - q);
}

/* Phi(x) = P(N(0, 1) <= x) = erfc(-x / sqrt 2) / 2. */
static inline DT_HOST_DEVICE float dt__normal_cdf_f32(float x) {
  float a = dt__gauss_arg_f32(x);
  return dt__normal_cdf_parts_f32(x, a, dt__gauss_x_f32(x, a));
}

/* The density exp(-x^2 / 2) / sqrt(2 pi) from e = dt__gauss_x_f32(x, a); 0 beyond |x| = 13.1
 * (the exact value is below 3e-38). */
static inline DT_HOST_DEVICE float dt__normal_pdf_parts_f32(float e) {
  return 0.398942280401432678f * e;
}

static inline DT_HOST_DEVICE float dt__normal_pdf_f32(float x) {
  return dt__normal_pdf_parts_f32(dt__gauss_x_f32(x, dt__gauss_arg_f32(x)));
}

/* ---- GELU's central range ----------------------------------------------------------------- */

/* The |x| up to which dt__gelu_f32 takes dt__gelu_central_f32 (a float32 constant: 3.75). */
#define DT_GELU_CENTRAL_MAX 3.75f

/* Phi(-a) for a in [0, 3.75] without a division or a clamp: exp(-a^2 / 2) R(a), R(a) =
 * e^(a^2 / 2) Phi(-a) (erfcx(a / sqrt 2) / 2, smooth on the range) by a degree-13 polynomial
 * in a - 1.875 (relative error 1.3e-8, a Chebyshev fit made with mpmath, 30 digits; centred,
 * its terms add up to at most 5x the result). */
static inline DT_HOST_DEVICE float dt__normal_ratio_central_f32(float a) {
  float u = a - 1.875f;
  float p = -1.1093139254750033e-08f;
  p = fmaf(p, u, 5.4123909349842226e-08f);
  p = fmaf(p, u, -1.2099637499830156e-07f);
  p = fmaf(p, u, 5.2692728955802402e-07f);
  p = fmaf(p, u, -2.8650301905140462e-06f);
  p = fmaf(p, u, 1.2039160858741747e-05f);
  p = fmaf(p, u, -4.7184581079747573e-05f);
  p = fmaf(p, u, 0.00018212568567340198f);
  p = fmaf(p, u, -0.00067305824150189686f);
  p = fmaf(p, u, 0.0023571672443434624f);
  p = fmaf(p, u, -0.0077843243296515886f);
  p = fmaf(p, u, 0.024023340195018936f);
  p = fmaf(p, u, -0.068396859460857745f);
  p = fmaf(p, u, 0.17629089315444432f);
  return p;
}

/* exp(-a^2 / 2) for a in [0, 3.75]. The exponent's reduction -a^2 / 2 = n ln 2 + r rounds
 * once: fmaf(-a / 2, a, -n ln2_hi) is exact up to its rounding (n ln2_hi is exact: n >= -11
 * and ln2_hi has 15 significant bits), so no correction for a^2's rounding is needed; n comes
 * from the rounded a^2 (any nearby integer keeps |r| small). */
static inline DT_HOST_DEVICE float dt__gauss_central_f32(float a) {
  const float magic = 12582912.0f;             /* 1.5 * 2^23: adding it rounds to an integer */
  float t = fmaf(a * a, -0.721347520f, magic); /* -a^2 / 2 / ln 2 + magic */
  float n = t - magic;
  float r = fmaf(-0.5f * a, a, n * -0.693145752f);
  r = fmaf(n, -1.42860677e-06f, r);
  float e = dt__exp_reduced_f32(r);
  /* 2^n into e's exponent bits (as dt__gauss_f32; n >= -11 keeps the result normal). */
  e = dt__bits_to_f32(dt__f32_to_bits(e) + (dt__f32_to_bits(t) << 23));
  return e;
}

static inline DT_HOST_DEVICE float dt__normal_cdf_central_neg_f32(float a) {
  return dt__gauss_central_f32(a) * dt__normal_ratio_central_f32(a);
}

/* GELU, x Phi(x), for |x| <= 3.75 given a = |x|: relu(x) - a Phi(-a) in one fmaf (x Phi(x)
 * for x < 0, x (1 - Phi(-x)) above; no cancellation: Phi(-a) <= 1/2). relu's part is a zero
 * of x's sign for x <= 0, so that -0 gives -0 as x Phi(x) does (+0 added to -0 gave +0): x's
 * bits with the magnitude cleared when the sign is set, three integer operations (a select of
 * x and x * 0 compiled to five). */
static inline DT_HOST_DEVICE float dt__gelu_central_parts_f32(float x, float a) {
  int32_t bits = (int32_t)dt__f32_to_bits(x);
  uint32_t magnitude_mask = (uint32_t)(bits >> 31) >> 1; /* 0x7fffffff when negative, else 0 */
  float relu = dt__bits_to_f32((uint32_t)bits & ~magnitude_mask);
  return fmaf(-a, dt__normal_cdf_central_neg_f32(a), relu);
}

static inline DT_HOST_DEVICE float dt__gelu_central_f32(float x) {
  return dt__gelu_central_parts_f32(x, fabsf(x));
}

#endif /* DT_KERNELS_MATH_VMATH_H */
