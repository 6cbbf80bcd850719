/*
 * Elementwise unary kernels. float32, bfloat16 and float16 compute in float32 through
 * kernels/math/unary.h; float64 computes in double with libm; the integer ops (neg, abs,
 * relu) compute in int64 and wrap like PyTorch.
 *
 * The element functions live in kernels/math/unary.h, which the CUDA kernels compile too.
 * exp, log, tanh, sigmoid, silu, gelu and gelu_tanh use our own float32 approximations
 * (kernels/math/vmath.h: range reduction plus short polynomials, a few ulp, documented and
 * tested there) written without branches, so that gcc -O3 vectorizes the contiguous loops;
 * libm's expf/logf/erfcf are scalar calls. sqrt and rsqrt are sqrtf, which the library's
 * -fno-math-errno (CMakeLists.txt) lets gcc vectorize (correctly rounded: the same bits as
 * libm's). sin and cos are libm's sinf/cosf (float32) and
 * sin/cos (float64): correctly reduced for any argument, as rotary tables need at large
 * positions.
 */
#include <math.h>

#include "kernels/cpu/loop.h"
#include "kernels/cpu/pointwise.h"
#include "kernels/cpu/vmath.h"
#include "kernels/math/unary.h"

/* ---- Loops ------------------------------------------------------------------------------ */

/* One loop function per op with the switch outside them, so that each loop body is one
 * inlined expression gcc vectorizes (inside one large function gcc 12 gives up on the
 * longer ones), each compiled for AVX-512, AVX2 and the baseline (DT_VECTOR_CLONES). */
#define DT_UNARY_F32_FN(name, fn)                                                                  \
  DT_VECTOR_CLONES static void name(const float *a, float *o, int64_t n) {                         \
    for (int64_t i = 0; i < n; i++) o[i] = fn(a[i]);                                               \
  }

DT_UNARY_F32_FN(neg_loop, dt__neg_f32)
DT_UNARY_F32_FN(abs_loop, dt__abs_f32)
DT_UNARY_F32_FN(relu_loop, dt__relu_f32)
DT_UNARY_F32_FN(exp_loop, dt__exp_f32)
DT_UNARY_F32_FN(log_loop, dt__log_f32)
DT_UNARY_F32_FN(sqrt_loop, dt__sqrt_f32)
DT_UNARY_F32_FN(rsqrt_loop, dt__rsqrt_f32)
DT_UNARY_F32_FN(gelu_tanh_loop, dt__gelu_tanh_f32)
DT_UNARY_F32_FN(silu_loop, dt__silu_f32)
DT_UNARY_F32_FN(tanh_loop, dt__tanh_f32)
DT_UNARY_F32_FN(sigmoid_loop, dt__sigmoid_f32)
DT_UNARY_F32_FN(sin_loop, sinf)
DT_UNARY_F32_FN(cos_loop, cosf)

/* gelu in runs of GELU_RUN: every element gets the division-free central formula, and a run
 * whose largest magnitude exceeds 3.75 (rare for a network's activations: N(0, 1) has 1 in
 * 5,600 beyond) is then patched in groups of GELU_GROUP, each element beyond 3.75 taking
 * dt__gelu_f32 (the CDF's tail formula). The largest magnitude costs one vector operation in
 * the pass that computes; a check pass before it would read memory without computing and
 * stall (measured 20 % slower). So each element gets dt__gelu_f32's bits whatever the run or
 * thread boundaries. In place (a == o) the patch would read outputs: that case takes
 * dt__gelu_f32 element by element. */
enum { GELU_RUN = 512, GELU_GROUP = 16 };

static inline uint32_t magnitude_bits(float x) { return dt__f32_to_bits(x) & 0x7fffffffu; }

/* Writes the central formula of a[0, n) and returns the largest magnitude as bits (NaN
 * above every finite value and inf). */
static inline uint32_t gelu_central_run(const float *a, float *o, int64_t n) {
  uint32_t m = 0;
  for (int64_t i = 0; i < n; i++) {
    uint32_t b = magnitude_bits(a[i]);
    m = b > m ? b : m;
    o[i] = dt__gelu_central_parts_f32(a[i], dt__bits_to_f32(b)); /* |x| by the same and */
  }
  return m;
}

/* A clone of its own (rarely called): a plain static function would run the baseline
 * build's code (fmaf a libm call) inside the vector clones. Forward (g NULL): o = gelu(x);
 * backward: o = g gelu'(x), for the elements beyond 3.75. */
DT_VECTOR_CLONES static void gelu_patch_run(const float *g, const float *x, float *o, int64_t n) {
  const uint32_t central_max = dt__f32_to_bits(DT_GELU_CENTRAL_MAX);
  for (int64_t j = 0; j < n; j += GELU_GROUP) {
    int64_t e = n - j < GELU_GROUP ? n : j + GELU_GROUP;
    uint32_t m = 0;
    for (int64_t i = j; i < e; i++) m = magnitude_bits(x[i]) > m ? magnitude_bits(x[i]) : m;
    if (m <= central_max) continue;
    for (int64_t i = j; i < e; i++) {
      float full = g ? g[i] * dt__gelu_grad_f32(x[i]) : dt__gelu_f32(x[i]);
      o[i] = dt__select_f32(magnitude_bits(x[i]) > central_max, full, o[i]);
    }
  }
}

DT_VECTOR_CLONES static void gelu_loop(const float *a, float *o, int64_t n) {
  if (a == o) {
    for (int64_t i = 0; i < n; i++) o[i] = dt__gelu_f32(a[i]);
    return;
  }
  for (int64_t i = 0; i < n; i += GELU_RUN) {
    int64_t count = n - i < GELU_RUN ? n - i : GELU_RUN;
    if (gelu_central_run(a + i, o + i, count) > dt__f32_to_bits(DT_GELU_CENTRAL_MAX)) {
      gelu_patch_run(NULL, a + i, o + i, count);
    }
  }
}

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
  case DT_UNARY_SIN: sin_loop(a, o, n); return;
  case DT_UNARY_COS: cos_loop(a, o, n); return;
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
      *(float *)o = dt__unary_f32(ctx->op, *(const float *)a);
    }
    return;
  case DT_F64:
    for (int64_t i = 0; i < n; i++, o += so, a += sa) {
      *(double *)o = dt__unary_f64(ctx->op, *(const double *)a);
    }
    return;
  case DT_BF16:
    for (int64_t i = 0; i < n; i++, o += so, a += sa) {
      float x = dt_bf16_to_f32(*(const uint16_t *)a);
      *(uint16_t *)o = dt_f32_to_bf16(dt__unary_f32(ctx->op, x));
    }
    return;
  case DT_F16:
    for (int64_t i = 0; i < n; i++, o += so, a += sa) {
      float x = dt_f16_to_f32(*(const uint16_t *)a);
      *(uint16_t *)o = dt_f32_to_f16(dt__unary_f32(ctx->op, x));
    }
    return;
  default:
    for (int64_t i = 0; i < n; i++, o += so, a += sa) {
      store_int(ctx->dtype, o, dt__unary_i64(ctx->op, load_int(ctx->dtype, a)));
    }
    return;
  }
}

/* A contiguous float32 unary loop or gelu_backward for the pool, split in blocks of BLOCK
 * elements: every chunk but the last starts and ends on a block boundary, so the vector loop
 * and its scalar tail cover the same elements whatever the thread count (the same bits). */
enum { BLOCK = 64 };

typedef struct f32_job {
  dt_unary_op op;
  const float *a, *b;
  float *o;
  int64_t n; /* elements */
} f32_job;

/* Elements of blocks [begin, end): the first one and the count (the last block shorter). */
static int64_t block_range(const f32_job *j, int64_t begin, int64_t end, int64_t *count) {
  int64_t first = begin * BLOCK, last = end * BLOCK < j->n ? end * BLOCK : j->n;
  *count = last - first;
  return first;
}

static void run_blocks(f32_job *j, dt_chunk_fn fn) {
  dt__parallel_for((j->n + BLOCK - 1) / BLOCK, DT_PARALLEL_GRAIN / BLOCK, fn, j);
}

static void unary_chunk(void *p, int64_t begin, int64_t end) {
  const f32_job *j = p;
  int64_t count, first = block_range(j, begin, end, &count);
  contiguous_f32(j->op, j->a + first, j->o + first, count);
}

void dt__cpu_unary(dt_unary_op op, const dt_tensor *a, dt_tensor *out) {
  if (a->dtype == DT_F32 && dt__is_contiguous(a->ndim, a->shape, a->strides) &&
      dt__is_contiguous(out->ndim, out->shape, out->strides)) {
    f32_job j = {.op = op,
                 .a = (const float *)dt__tensor_base(a),
                 .o = (float *)dt__tensor_base(out),
                 .n = dt__tensor_numel(out)};
    run_blocks(&j, unary_chunk);
    return;
  }
  unary_ctx ctx = {.op = op, .dtype = a->dtype};
  dt__loop_tensors(2, (const dt_tensor *[]){out, a}, inner_unary, &ctx);
}

/* ---- gelu_backward ------------------------------------------------------------------------ */

/* gelu's backward as its forward (gelu_loop): the central formula over runs, the rare run
 * with an input beyond 3.75 patched; in place (o is g or x) element by element. */
static inline uint32_t gelu_grad_central_run(const float *g, const float *x, float *o, int64_t n) {
  uint32_t m = 0;
  for (int64_t i = 0; i < n; i++) {
    uint32_t b = magnitude_bits(x[i]);
    m = b > m ? b : m;
    o[i] = g[i] * dt__gelu_grad_central_parts_f32(x[i], dt__bits_to_f32(b));
  }
  return m;
}

DT_VECTOR_CLONES DT_VECTOR_FLATTEN static void gelu_grad_loop(const float *g, const float *x,
                                                              float *o, int64_t n) {
  if (o == g || o == x) {
    for (int64_t i = 0; i < n; i++) o[i] = g[i] * dt__gelu_grad_f32(x[i]);
    return;
  }
  for (int64_t i = 0; i < n; i += GELU_RUN) {
    int64_t count = n - i < GELU_RUN ? n - i : GELU_RUN;
    if (gelu_grad_central_run(g + i, x + i, o + i, count) > dt__f32_to_bits(DT_GELU_CENTRAL_MAX)) {
      gelu_patch_run(g + i, x + i, o + i, count);
    }
  }
}

DT_VECTOR_CLONES static void gelu_tanh_grad_loop(const float *g, const float *x, float *o,
                                                 int64_t n) {
  for (int64_t i = 0; i < n; i++) o[i] = g[i] * dt__gelu_tanh_grad_f32(x[i]);
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
               dt__gelu_grad_f64(tanh_form, dt__load_as_double(ctx->dtype, x));
    dt__store_from_double(ctx->dtype, o, v);
  }
}

static void gelu_backward_chunk(void *p, int64_t begin, int64_t end) {
  const f32_job *j = p;
  int64_t count, first = block_range(j, begin, end, &count);
  (j->op == DT_UNARY_GELU_TANH ? gelu_tanh_grad_loop : gelu_grad_loop)(j->a + first, j->b + first,
                                                                       j->o + first, count);
}

static bool same_contiguous_f32(const dt_tensor *t, const dt_tensor *out) {
  return t->dtype == DT_F32 && t->ndim == out->ndim &&
         memcmp(t->shape, out->shape, sizeof(int64_t) * (size_t)t->ndim) == 0 &&
         dt__is_contiguous(t->ndim, t->shape, t->strides);
}

void dt__cpu_gelu_backward(bool tanh_form, const dt_tensor *g, const dt_tensor *x, dt_tensor *out) {
  if (out->dtype == DT_F32 && same_contiguous_f32(g, out) && same_contiguous_f32(x, out) &&
      dt__is_contiguous(out->ndim, out->shape, out->strides)) {
    f32_job j = {.op = tanh_form ? DT_UNARY_GELU_TANH : DT_UNARY_GELU,
                 .a = (const float *)dt__tensor_base(g),
                 .b = (const float *)dt__tensor_base(x),
                 .o = (float *)dt__tensor_base(out),
                 .n = dt__tensor_numel(out)};
    run_blocks(&j, gelu_backward_chunk);
    return;
  }
  unary_ctx ctx = {.op = tanh_form ? DT_UNARY_GELU_TANH : DT_UNARY_GELU, .dtype = x->dtype};
  dt__loop_tensors(3, (const dt_tensor *[]){out, g, x}, inner_gelu_backward, &ctx);
}
