/*
 * The element functions of the unary ops (kernels/elementwise.h's dt_unary_op) and of
 * gelu_backward, written once for the CPU and CUDA (core/host_device.h):
 *   float32 (and bfloat16 / float16, computed in float32): kernels/math/vmath.h's
 *     approximations for exp, log, tanh and the normal CDF; sqrt and rsqrt correctly rounded;
 *     sin and cos the math library's sinf/cosf (exact argument reduction at any angle);
 *   float64: the math library's functions;
 *   integers (neg, abs, relu only): int64, wrapping in two's complement like PyTorch.
 * The CPU's contiguous float32 loops apply these same functions (kernels/cpu/unary.c), so a
 * CUDA kernel built on them gives the CPU's float32 bits; float64 differs only by the two math
 * libraries' last-place rounding (CUDA's exp, log, tanh, erfc are within 1-2 ulp).
 */
#ifndef DT_KERNELS_MATH_UNARY_H
#define DT_KERNELS_MATH_UNARY_H

#include "kernels/elementwise.h"
#include "kernels/math/vmath.h"

#define DT_SQRT_HALF 0.70710678118654752440
#define DT_SQRT_2_OVER_PI 0.79788456080286535588
#define DT_INV_SQRT_2PI 0.398942280401432678

static inline DT_HOST_DEVICE float dt__neg_f32(float x) { return -x; }
static inline DT_HOST_DEVICE float dt__abs_f32(float x) { return fabsf(x); }
static inline DT_HOST_DEVICE float dt__relu_f32(float x) { return x < 0.0f ? 0.0f : x; }
static inline DT_HOST_DEVICE float dt__sqrt_f32(float x) { return sqrtf(x); }
static inline DT_HOST_DEVICE float dt__rsqrt_f32(float x) { return 1.0f / sqrtf(x); }
static inline DT_HOST_DEVICE float dt__sigmoid_f32(float x) {
  return 1.0f / (1.0f + dt__exp_f32(-x));
}
static inline DT_HOST_DEVICE float dt__silu_f32(float x) { return x / (1.0f + dt__exp_f32(-x)); }

/* 0.5 x (1 + tanh(u)) = x * sigmoid(2u), which does not cancel for negative x. */
static inline DT_HOST_DEVICE float dt__gelu_tanh_f32(float x) {
  float u = (float)DT_SQRT_2_OVER_PI * (x + 0.044715f * x * x * x);
  return x / (1.0f + dt__exp_f32(-2.0f * u));
}

/* x Phi(x): the division-free central formula for |x| <= 3.75, x times the CDF's tail formula
 * beyond (NaN and +-inf too). A function of x alone: the CPU's loop (kernels/cpu/unary.c),
 * which skips the tail formula where a run of inputs has none beyond 3.75, gives these bits. */
static inline DT_HOST_DEVICE float dt__gelu_f32(float x) {
  return dt__select_f32(fabsf(x) <= DT_GELU_CENTRAL_MAX, dt__gelu_central_f32(x),
                        x * dt__normal_cdf_f32(x));
}

static inline DT_HOST_DEVICE float dt__unary_f32(dt_unary_op op, float x) {
  switch (op) {
  case DT_UNARY_NEG: return -x;
  case DT_UNARY_ABS: return fabsf(x);
  case DT_UNARY_RELU: return dt__relu_f32(x);
  case DT_UNARY_EXP: return dt__exp_f32(x);
  case DT_UNARY_LOG: return dt__log_f32(x);
  case DT_UNARY_SQRT: return sqrtf(x);
  case DT_UNARY_RSQRT: return dt__rsqrt_f32(x);
  case DT_UNARY_GELU: return dt__gelu_f32(x);
  case DT_UNARY_GELU_TANH: return dt__gelu_tanh_f32(x);
  case DT_UNARY_SILU: return dt__silu_f32(x);
  case DT_UNARY_TANH: return dt__tanh_f32(x);
  case DT_UNARY_SIGMOID: return dt__sigmoid_f32(x);
  case DT_UNARY_SIN: return sinf(x);
  case DT_UNARY_COS: return cosf(x);
  }
  return x;
}

static inline DT_HOST_DEVICE double dt__unary_f64(dt_unary_op op, double x) {
  switch (op) {
  case DT_UNARY_NEG: return -x;
  case DT_UNARY_ABS: return fabs(x);
  case DT_UNARY_RELU: return x < 0.0 ? 0.0 : x;
  case DT_UNARY_EXP: return exp(x);
  case DT_UNARY_LOG: return log(x);
  case DT_UNARY_SQRT: return sqrt(x);
  case DT_UNARY_RSQRT: return 1.0 / sqrt(x);
  case DT_UNARY_GELU: return 0.5 * x * erfc(-x * DT_SQRT_HALF);
  case DT_UNARY_GELU_TANH: {
    double u = DT_SQRT_2_OVER_PI * (x + 0.044715 * x * x * x);
    return x / (1.0 + exp(-2.0 * u));
  }
  case DT_UNARY_SILU: return x / (1.0 + exp(-x));
  case DT_UNARY_TANH: return tanh(x);
  case DT_UNARY_SIGMOID: return 1.0 / (1.0 + exp(-x));
  case DT_UNARY_SIN: return sin(x);
  case DT_UNARY_COS: return cos(x);
  }
  return x;
}

/* Integer ops wrap in two's complement, as PyTorch does (neg and abs of the minimum). */
static inline DT_HOST_DEVICE int64_t dt__unary_i64(dt_unary_op op, int64_t x) {
  int64_t neg = (int64_t)((uint64_t)0 - (uint64_t)x);
  switch (op) {
  case DT_UNARY_NEG: return neg;
  case DT_UNARY_ABS: return x < 0 ? neg : x;
  case DT_UNARY_RELU: return x < 0 ? 0 : x;
  default: return x; /* the op layer never sends a float-only op here */
  }
}

/* ---- gelu's derivative ------------------------------------------------------------------- */

/* d/dx of x Phi(x) for |x| <= 3.75 given a = |x|: Phi(x) + x phi(x) in one fmaf, both from
 * one exp(-a^2 / 2) (the central formula's: no division, no clamp). */
static inline DT_HOST_DEVICE float dt__gelu_grad_central_parts_f32(float x, float a) {
  float e = dt__gauss_central_f32(a);
  float q = e * dt__normal_ratio_central_f32(a); /* Phi(-a) */
  return fmaf(x, dt__normal_pdf_parts_f32(e), dt__select_f32(x < 0.0f, q, 1.0f - q));
}

/* d/dx of x Phi(x): the central formula for |x| <= 3.75; beyond (NaN and +-inf too)
 * Phi(x) + x phi(x) by the CDF's tail formula, both from one exp(-x^2 / 2). A function of x
 * alone: the CPU's loop (kernels/cpu/unary.c) gives these bits. */
static inline DT_HOST_DEVICE float dt__gelu_grad_f32(float x) {
  float a = dt__gauss_arg_f32(x), e = dt__gauss_x_f32(x, a);
  return dt__select_f32(fabsf(x) <= DT_GELU_CENTRAL_MAX,
                        dt__gelu_grad_central_parts_f32(x, fabsf(x)),
                        dt__normal_cdf_parts_f32(x, a, e) + x * dt__normal_pdf_parts_f32(e));
}

/* d/dx of 0.5 x (1 + t), t = tanh(k (x + c x^3)): 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2). */
static inline DT_HOST_DEVICE float dt__gelu_tanh_grad_f32(float x) {
  const float k = (float)DT_SQRT_2_OVER_PI, c = 0.044715f;
  float t = dt__tanh_f32(k * (x + c * x * x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * k * (1.0f + 3.0f * c * x * x);
}

static inline DT_HOST_DEVICE double dt__gelu_grad_f64(int tanh_form, double x) {
  if (tanh_form) {
    const double k = DT_SQRT_2_OVER_PI, c = 0.044715;
    double t = tanh(k * (x + c * x * x * x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * c * x * x);
  }
  return 0.5 * erfc(-x * DT_SQRT_HALF) + x * exp(-0.5 * x * x) * DT_INV_SQRT_2PI;
}

#endif /* DT_KERNELS_MATH_UNARY_H */
