/*
 * Elementwise unary kernels. float32, bfloat16 and float16 compute in float32 through the
 * inline functions below; float64 computes in double with libm; the integer ops (neg, abs,
 * relu) compute in int64 and wrap like PyTorch.
 *
 * exp, log, tanh, sigmoid, silu, gelu and gelu_tanh use our own float32 approximations
 * (kernels/cpu/vmath.h: range reduction plus short polynomials, a few ulp, documented and
 * tested there) written without branches, so that gcc -O3 vectorizes the contiguous loops;
 * libm's expf/logf/erfcf are scalar calls. sqrt and rsqrt stay libm calls: without
 * -fno-math-errno gcc cannot vectorize sqrtf.
 */
#include <math.h>

#include "kernels/cpu/loop.h"
#include "kernels/cpu/pointwise.h"
#include "kernels/cpu/vmath.h"

#define DT_SQRT_HALF 0.70710678118654752440
#define DT_SQRT_2_OVER_PI 0.79788456080286535588

static inline float sigmoid_f32(float x) { return 1.0f / (1.0f + dt__exp_f32(-x)); }

/* 0.5 x (1 + tanh(u)) = x * sigmoid(2u), which does not cancel for negative x. */
static inline float gelu_tanh_f32(float x) {
  float u = (float)DT_SQRT_2_OVER_PI * (x + 0.044715f * x * x * x);
  return x / (1.0f + dt__exp_f32(-2.0f * u));
}

static inline float gelu_f32(float x) { return x * dt__normal_cdf_f32(x); }

static inline float unary_f32(dt_unary_op op, float x) {
  switch (op) {
  case DT_UNARY_NEG: return -x;
  case DT_UNARY_ABS: return fabsf(x);
  case DT_UNARY_RELU: return x < 0.0f ? 0.0f : x;
  case DT_UNARY_EXP: return dt__exp_f32(x);
  case DT_UNARY_LOG: return dt__log_f32(x);
  case DT_UNARY_SQRT: return sqrtf(x);
  case DT_UNARY_RSQRT: return 1.0f / sqrtf(x);
  case DT_UNARY_GELU: return gelu_f32(x);
  case DT_UNARY_GELU_TANH: return gelu_tanh_f32(x);
  case DT_UNARY_SILU: return x / (1.0f + dt__exp_f32(-x));
  case DT_UNARY_TANH: return dt__tanh_f32(x);
  case DT_UNARY_SIGMOID: return sigmoid_f32(x);
  }
  return x;
}

static inline double unary_f64(dt_unary_op op, double x) {
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
  }
  return x;
}

/* Integer ops wrap in two's complement, as PyTorch does (neg and abs of the minimum). */
static inline int64_t unary_i64(dt_unary_op op, int64_t x) {
  int64_t neg = (int64_t)((uint64_t)0 - (uint64_t)x);
  switch (op) {
  case DT_UNARY_NEG: return neg;
  case DT_UNARY_ABS: return x < 0 ? neg : x;
  case DT_UNARY_RELU: return x < 0 ? 0 : x;
  default: return x; /* the op layer never sends a float-only op here */
  }
}

/* ---- Loops ------------------------------------------------------------------------------ */

/* One loop function per op with the switch outside them, so that each loop body is one
 * inlined expression gcc vectorizes (inside one large function gcc 12 gives up on the
 * longer ones), each compiled for AVX-512, AVX2 and the baseline (DT_VECTOR_CLONES). */
#define DT_UNARY_F32_FN(name, fn)                                                                  \
  DT_VECTOR_CLONES static void name(const float *a, float *o, int64_t n) {                         \
    for (int64_t i = 0; i < n; i++) o[i] = fn(a[i]);                                               \
  }

static inline float neg_f32(float x) { return -x; }
static inline float relu_f32(float x) { return x < 0.0f ? 0.0f : x; }
static inline float rsqrt_f32(float x) { return 1.0f / sqrtf(x); }
static inline float silu_f32(float x) { return x / (1.0f + dt__exp_f32(-x)); }

DT_UNARY_F32_FN(neg_loop, neg_f32)
DT_UNARY_F32_FN(abs_loop, fabsf)
DT_UNARY_F32_FN(relu_loop, relu_f32)
DT_UNARY_F32_FN(exp_loop, dt__exp_f32)
DT_UNARY_F32_FN(log_loop, dt__log_f32)
DT_UNARY_F32_FN(sqrt_loop, sqrtf)
DT_UNARY_F32_FN(rsqrt_loop, rsqrt_f32)
DT_UNARY_F32_FN(gelu_loop, gelu_f32)
DT_UNARY_F32_FN(gelu_tanh_loop, gelu_tanh_f32)
DT_UNARY_F32_FN(silu_loop, silu_f32)
DT_UNARY_F32_FN(tanh_loop, dt__tanh_f32)
DT_UNARY_F32_FN(sigmoid_loop, sigmoid_f32)

static void contiguous_f32(dt_unary_op op, const float *a, float *o, int64_t n) {
  switch (op) {
  case DT_UNARY_NEG: neg_loop(a, o, n); return;
  case DT_UNARY_ABS: abs_loop(a, o, n); return;
  case DT_UNARY_RELU: relu_loop(a, o, n); return;
  case DT_UNARY_EXP: exp_loop(a, o, n); return;
  case DT_UNARY_LOG: log_loop(a, o, n); return;
  case DT_UNARY_SQRT: sqrt_loop(a, o, n); return;
  case DT_UNARY_RSQRT: rsqrt_loop(a, o, n); return;
  case DT_UNARY_GELU: gelu_loop(a, o, n); return;
  case DT_UNARY_GELU_TANH: gelu_tanh_loop(a, o, n); return;
  case DT_UNARY_SILU: silu_loop(a, o, n); return;
  case DT_UNARY_TANH: tanh_loop(a, o, n); return;
  case DT_UNARY_SIGMOID: sigmoid_loop(a, o, n); return;
  }
}

typedef struct unary_ctx {
  dt_unary_op op;
  dt_dtype dtype; /* of input and output */
} unary_ctx;

static int64_t load_int(dt_dtype dtype, const char *p) {
  switch (dtype) {
  case DT_I64: return *(const int64_t *)p;
  case DT_I32: return *(const int32_t *)p;
  default: return *(const uint8_t *)p;
  }
}

static void store_int(dt_dtype dtype, char *p, int64_t v) {
  switch (dtype) {
  case DT_I64: *(int64_t *)p = v; break;
  case DT_I32: *(int32_t *)p = (int32_t)(uint32_t)(uint64_t)v; break;
  default: *(uint8_t *)p = (uint8_t)(uint64_t)v; break;
  }
}

static void inner_unary(char **ptrs, const int64_t *strides, int64_t n, void *opaque) {
  const unary_ctx *ctx = opaque;
  char *o = ptrs[0];
  const char *a = ptrs[1];
  int64_t so = strides[0], sa = strides[1];
  switch (ctx->dtype) {
  case DT_F32:
    if (so == 4 && sa == 4) {
      contiguous_f32(ctx->op, (const float *)a, (float *)o, n);
      return;
    }
    for (int64_t i = 0; i < n; i++, o += so, a += sa) {
      *(float *)o = unary_f32(ctx->op, *(const float *)a);
    }
    return;
  case DT_F64:
    for (int64_t i = 0; i < n; i++, o += so, a += sa) {
      *(double *)o = unary_f64(ctx->op, *(const double *)a);
    }
    return;
  case DT_BF16:
    for (int64_t i = 0; i < n; i++, o += so, a += sa) {
      float x = dt_bf16_to_f32(*(const uint16_t *)a);
      *(uint16_t *)o = dt_f32_to_bf16(unary_f32(ctx->op, x));
    }
    return;
  case DT_F16:
    for (int64_t i = 0; i < n; i++, o += so, a += sa) {
      float x = dt_f16_to_f32(*(const uint16_t *)a);
      *(uint16_t *)o = dt_f32_to_f16(unary_f32(ctx->op, x));
    }
    return;
  default:
    for (int64_t i = 0; i < n; i++, o += so, a += sa) {
      store_int(ctx->dtype, o, unary_i64(ctx->op, load_int(ctx->dtype, a)));
    }
    return;
  }
}

void dt__cpu_unary(dt_unary_op op, const dt_tensor *a, dt_tensor *out) {
  if (a->dtype == DT_F32 && dt__is_contiguous(a->ndim, a->shape, a->strides) &&
      dt__is_contiguous(out->ndim, out->shape, out->strides)) {
    contiguous_f32(op, (const float *)dt__tensor_base(a), (float *)dt__tensor_base(out),
                   dt__tensor_numel(out));
    return;
  }
  unary_ctx ctx = {.op = op, .dtype = a->dtype};
  dt__loop_tensors(2, (const dt_tensor *[]){out, a}, inner_unary, &ctx);
}

/* ---- gelu_backward ------------------------------------------------------------------------ */

/* d/dx of x Phi(x): Phi(x) + x phi(x). */
static inline float gelu_grad_f32(float x) {
  return dt__normal_cdf_f32(x) + x * dt__normal_pdf_f32(x);
}

/* d/dx of 0.5 x (1 + t), t = tanh(k (x + c x^3)): 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2). */
static inline float gelu_tanh_grad_f32(float x) {
  const float k = (float)DT_SQRT_2_OVER_PI, c = 0.044715f;
  float t = dt__tanh_f32(k * (x + c * x * x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * k * (1.0f + 3.0f * c * x * x);
}

static inline double gelu_grad_f64(bool tanh_form, double x) {
  if (tanh_form) {
    const double k = DT_SQRT_2_OVER_PI, c = 0.044715;
    double t = tanh(k * (x + c * x * x * x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * c * x * x);
  }
  return 0.5 * erfc(-x * DT_SQRT_HALF) + x * exp(-0.5 * x * x) * 0.398942280401432678;
}

DT_VECTOR_CLONES static void gelu_grad_loop(const float *g, const float *x, float *o, int64_t n) {
  for (int64_t i = 0; i < n; i++) o[i] = g[i] * gelu_grad_f32(x[i]);
}

DT_VECTOR_CLONES static void gelu_tanh_grad_loop(const float *g, const float *x, float *o,
                                                 int64_t n) {
  for (int64_t i = 0; i < n; i++) o[i] = g[i] * gelu_tanh_grad_f32(x[i]);
}

static void inner_gelu_backward(char **ptrs, const int64_t *strides, int64_t n, void *opaque) {
  const unary_ctx *ctx = opaque;
  bool tanh_form = ctx->op == DT_UNARY_GELU_TANH;
  char *o = ptrs[0];
  const char *g = ptrs[1], *x = ptrs[2];
  if (ctx->dtype == DT_F32 && strides[0] == 4 && strides[1] == 4 && strides[2] == 4) {
    (tanh_form ? gelu_tanh_grad_loop : gelu_grad_loop)((const float *)g, (const float *)x,
                                                       (float *)o, n);
    return;
  }
  for (int64_t i = 0; i < n; i++, o += strides[0], g += strides[1], x += strides[2]) {
    double v = dt__load_as_double(ctx->dtype, g) *
               gelu_grad_f64(tanh_form, dt__load_as_double(ctx->dtype, x));
    dt__store_from_double(ctx->dtype, o, v);
  }
}

void dt__cpu_gelu_backward(bool tanh_form, const dt_tensor *g, const dt_tensor *x, dt_tensor *out) {
  unary_ctx ctx = {.op = tanh_form ? DT_UNARY_GELU_TANH : DT_UNARY_GELU, .dtype = x->dtype};
  dt__loop_tensors(3, (const dt_tensor *[]){out, g, x}, inner_gelu_backward, &ctx);
}
