/*
 * Elementwise binary kernels. Fast paths: contiguous float32 and float64 operands of the
 * same shape or with a broadcast scalar (arithmetic, maximum/minimum, pow, comparisons) run
 * a tight loop the compiler vectorizes, and so does each row of a broadcast whose operands
 * step by one element or repeat one (a [B, T, D] with a [B, T, 1] or a [D]). Every other
 * case runs the strided loop: integer results are computed in int64 (exact), floating
 * results in double, then stored in the output dtype, by kernels/math/binary.h's element
 * functions (the CUDA kernels apply the same).
 */
#include <math.h>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/loop.h"
#include "kernels/cpu/pointwise.h"
#include "kernels/cpu/vmath.h"
#include "kernels/math/binary.h"

typedef struct binary_ctx {
  dt_binary_op op;
  double alpha;
  dt_dtype a_dtype, b_dtype, out_dtype;
  bool compare_as_int; /* comparisons of two integer operands: exact in int64 */
  int64_t fast_size;   /* 4 or 8: the operands suit the fast loops (fast_dtypes); else 0 */
} binary_ctx;

static bool fast_row_f32(dt_binary_op op, double alpha_d, void *out, const void *va, const void *vb,
                         int64_t n, int64_t a_step, int64_t b_step);
static bool fast_row_f64(dt_binary_op op, double alpha_d, void *out, const void *va, const void *vb,
                         int64_t n, int64_t a_step, int64_t b_step);

static void inner_generic(char **ptrs, const int64_t *strides, int64_t n, void *opaque) {
  const binary_ctx *ctx = opaque;
  char *o = ptrs[0];
  const char *a = ptrs[1], *b = ptrs[2];
  if (ctx->fast_size) { /* a row of a broadcast: the fast loops when every step is 0 or 1 */
    int64_t e = ctx->fast_size, os = ctx->out_dtype == DT_BOOL ? 1 : e;
    bool steps = strides[0] == os && (strides[1] == e || strides[1] == 0) &&
                 (strides[2] == e || strides[2] == 0) && (strides[1] || strides[2]);
    if (steps && (e == 4 ? fast_row_f32 : fast_row_f64)(ctx->op, ctx->alpha, o, a, b, n,
                                                        strides[1] / e, strides[2] / e))
      return;
  }
  bool integer = dt__binary_is_integer(dt_dtype_is_floating(ctx->out_dtype),
                                       ctx->out_dtype == DT_BOOL, ctx->compare_as_int);
  if (integer) {
    int64_t alpha = (int64_t)ctx->alpha;
    for (int64_t i = 0; i < n; i++) {
      int64_t v = dt__binary_i64(ctx->op, dt__cpu_load_i64(ctx->a_dtype, a),
                                 dt__cpu_load_i64(ctx->b_dtype, b), alpha);
      dt__cpu_store_i64(ctx->out_dtype, o, v);
      o += strides[0];
      a += strides[1];
      b += strides[2];
    }
    return;
  }
  for (int64_t i = 0; i < n; i++) {
    double v = dt__binary_f64(ctx->op, dt__load_as_double(ctx->a_dtype, a),
                              dt__load_as_double(ctx->b_dtype, b), ctx->alpha);
    dt__store_from_double(ctx->out_dtype, o, v);
    o += strides[0];
    a += strides[1];
    b += strides[2];
  }
}

/* Contiguous fast paths: out and each operand step by one element (`a_step`/`b_step` 1) or
 * repeat one element (0: a broadcast operand, hoisted out of the loop), so that every form
 * vectorizes. They serve whole tensors (same shape, or a scalar operand) and each row of the
 * strided loop (a [B, T, D] times a [B, T, 1] or a [D] runs rows of D with one operand
 * stepping and the other repeated or stepping): float32 never converts to double.
 * maximum/minimum propagate NaN through selects, not branches. Each loop is its own small
 * function: inside one large function gcc 12 gives up vectorizing them. */
#define DT_FAST_FN(name, T, OT, expr)                                                              \
  DT_VECTOR_CLONES static void name(OT *o, const T *a, const T *b, int64_t n, int64_t a_step,      \
                                    int64_t b_step, T alpha) {                                     \
    (void)alpha;                                                                                   \
    if (a_step && b_step) {                                                                        \
      for (int64_t i = 0; i < n; i++) {                                                            \
        T x = a[i], y = b[i];                                                                      \
        (void)y;                                                                                   \
        o[i] = (OT)(expr);                                                                         \
      }                                                                                            \
    } else if (a_step) {                                                                           \
      const T y = b[0];                                                                            \
      (void)y;                                                                                     \
      for (int64_t i = 0; i < n; i++) {                                                            \
        T x = a[i];                                                                                \
        o[i] = (OT)(expr);                                                                         \
      }                                                                                            \
    } else {                                                                                       \
      const T x = a[0];                                                                            \
      for (int64_t i = 0; i < n; i++) {                                                            \
        T y = b[i];                                                                                \
        (void)y;                                                                                   \
        o[i] = (OT)(expr);                                                                         \
      }                                                                                            \
    }                                                                                              \
  }

#define DT_FAST_FNS(T, sfx, POW)                                                                   \
  DT_FAST_FN(add1_##sfx, T, T, x + y)                                                              \
  DT_FAST_FN(add_##sfx, T, T, x + alpha * y)                                                       \
  DT_FAST_FN(sub1_##sfx, T, T, x - y)                                                              \
  DT_FAST_FN(sub_##sfx, T, T, x - alpha * y)                                                       \
  DT_FAST_FN(mul_##sfx, T, T, x *y)                                                                \
  DT_FAST_FN(div_##sfx, T, T, x / y)                                                               \
  DT_FAST_FN(max_##sfx, T, T, x != x ? x : y != y ? y : x > y ? x : y)                             \
  DT_FAST_FN(min_##sfx, T, T, x != x ? x : y != y ? y : x < y ? x : y)                             \
  DT_FAST_FN(square_##sfx, T, T, x *x)                                                             \
  DT_FAST_FN(cube_##sfx, T, T, x *x *x)                                                            \
  DT_FAST_FN(ident_##sfx, T, T, x)                                                                 \
  DT_FAST_FN(recip_##sfx, T, T, 1 / x)                                                             \
  DT_FAST_FN(pow_##sfx, T, T, POW(x, y))                                                           \
  DT_FAST_FN(eq_##sfx, T, uint8_t, x == y)                                                         \
  DT_FAST_FN(ne_##sfx, T, uint8_t, x != y)                                                         \
  DT_FAST_FN(lt_##sfx, T, uint8_t, x < y)                                                          \
  DT_FAST_FN(le_##sfx, T, uint8_t, x <= y)                                                         \
  DT_FAST_FN(gt_##sfx, T, uint8_t, x > y)                                                          \
  DT_FAST_FN(ge_##sfx, T, uint8_t, x >= y)

DT_FAST_FNS(float, f32, powf)
DT_FAST_FNS(double, f64, pow)

/* Runs the fast loop of op on n elements of T operands stepping as a_step and b_step (each 0
 * or 1; not both 0); false when op has none. */
#define DT_FAST_ROW(T, sfx)                                                                        \
  static bool fast_row_##sfx(dt_binary_op op, double alpha_d, void *out, const void *va,           \
                             const void *vb, int64_t n, int64_t a_step, int64_t b_step) {          \
    const T *a = va, *b = vb;                                                                      \
    T *o = out;                                                                                    \
    uint8_t *ob = out;                                                                             \
    T alpha = (T)alpha_d;                                                                          \
    int64_t as = a_step, bs = b_step;                                                              \
    switch (op) {                                                                                  \
    case DT_BINARY_ADD: (alpha == 1 ? add1_##sfx : add_##sfx)(o, a, b, n, as, bs, alpha); break;   \
    case DT_BINARY_SUB: (alpha == 1 ? sub1_##sfx : sub_##sfx)(o, a, b, n, as, bs, alpha); break;   \
    case DT_BINARY_MUL: mul_##sfx(o, a, b, n, as, bs, alpha); break;                               \
    case DT_BINARY_DIV: div_##sfx(o, a, b, n, as, bs, alpha); break;                               \
    case DT_BINARY_MAXIMUM: max_##sfx(o, a, b, n, as, bs, alpha); break;                           \
    case DT_BINARY_MINIMUM: min_##sfx(o, a, b, n, as, bs, alpha); break;                           \
    case DT_BINARY_POW:                                                                            \
      /* Common exponents become multiplications, as PyTorch does. */                              \
      if (as && !bs && b[0] == 2)                                                                  \
        square_##sfx(o, a, b, n, as, bs, alpha);                                                   \
      else if (as && !bs && b[0] == 3)                                                             \
        cube_##sfx(o, a, b, n, as, bs, alpha);                                                     \
      else if (as && !bs && b[0] == 1)                                                             \
        ident_##sfx(o, a, b, n, as, bs, alpha);                                                    \
      else if (as && !bs && b[0] == -1)                                                            \
        recip_##sfx(o, a, b, n, as, bs, alpha);                                                    \
      else                                                                                         \
        pow_##sfx(o, a, b, n, as, bs, alpha);                                                      \
      break;                                                                                       \
    case DT_BINARY_EQ: eq_##sfx(ob, a, b, n, as, bs, alpha); break;                                \
    case DT_BINARY_NE: ne_##sfx(ob, a, b, n, as, bs, alpha); break;                                \
    case DT_BINARY_LT: lt_##sfx(ob, a, b, n, as, bs, alpha); break;                                \
    case DT_BINARY_LE: le_##sfx(ob, a, b, n, as, bs, alpha); break;                                \
    case DT_BINARY_GT: gt_##sfx(ob, a, b, n, as, bs, alpha); break;                                \
    case DT_BINARY_GE: ge_##sfx(ob, a, b, n, as, bs, alpha); break;                                \
    default: return false;                                                                         \
    }                                                                                              \
    return true;                                                                                   \
  }

DT_FAST_ROW(float, f32)
DT_FAST_ROW(double, f64)

/* The fast loops take T operands of one floating dtype and an output of that dtype (bool for
 * comparisons). */
static bool fast_dtypes(dt_binary_op op, dt_dtype a, dt_dtype b, dt_dtype out) {
  return (a == DT_F32 || a == DT_F64) && b == a && out == (op >= DT_BINARY_EQ ? DT_BOOL : a);
}

/* One contiguous fast loop, split on the pool by runs of elements (each element computed
 * alone: the same bits on any thread count). */
typedef struct fast_job {
  dt_binary_op op;
  double alpha;
  char *o;
  const char *a, *b;
  int64_t b_step, esize, osize;
} fast_job;

static bool fast_chunk_run(const fast_job *j, int64_t begin, int64_t end) {
  char *o = j->o + begin * j->osize;
  const char *a = j->a + begin * j->esize, *b = j->b + begin * j->b_step * j->esize;
  if (j->esize == 4) return fast_row_f32(j->op, j->alpha, o, a, b, end - begin, 1, j->b_step);
  return fast_row_f64(j->op, j->alpha, o, a, b, end - begin, 1, j->b_step);
}

static void fast_chunk(void *ctx, int64_t begin, int64_t end) { fast_chunk_run(ctx, begin, end); }

static bool try_fast(dt_binary_op op, double alpha_d, const dt_tensor *ta, const dt_tensor *tb,
                     dt_tensor *tout) {
  if (!fast_dtypes(op, ta->dtype, tb->dtype, tout->dtype)) return false;
  int64_t n = dt__tensor_numel(tout);
  if (!dt__is_contiguous(tout->ndim, tout->shape, tout->strides)) return false;
  if (ta != tout &&
      (dt__tensor_numel(ta) != n || !dt__is_contiguous(ta->ndim, ta->shape, ta->strides)))
    return false;
  int64_t nb = dt__tensor_numel(tb);
  int64_t b_step;
  bool same_shape = ta->ndim == tb->ndim;
  for (int i = 0; i < ta->ndim && same_shape; i++) same_shape = ta->shape[i] == tb->shape[i];
  if (nb == n && same_shape && dt__is_contiguous(tb->ndim, tb->shape, tb->strides)) {
    b_step = 1;
  } else if (nb == 1) {
    b_step = 0;
  } else {
    return false;
  }
  void *o = dt__tensor_base(tout);
  const void *a = dt__tensor_base(ta), *b = dt__tensor_base(tb);
  if (n <= DT_PARALLEL_GRAIN) { /* one chunk: on the caller, no job to describe */
    if (ta->dtype == DT_F32) return fast_row_f32(op, alpha_d, o, a, b, n, 1, b_step);
    return fast_row_f64(op, alpha_d, o, a, b, n, 1, b_step);
  }
  fast_job j = {.op = op, .alpha = alpha_d, .o = o, .a = a, .b = b, .b_step = b_step};
  j.esize = (int64_t)dt__dtype_sizes[ta->dtype];
  j.osize = (int64_t)dt__dtype_sizes[tout->dtype];
  if (!fast_chunk_run(&j, 0, 0)) return false; /* the op has no fast loop */
  dt__parallel_for(n, DT_PARALLEL_GRAIN, fast_chunk, &j);
  return true;
}

dt_status dt__cpu_binary(dt_binary_op op, double alpha, const dt_tensor *a, const dt_tensor *b,
                         dt_tensor *out) {
  if (try_fast(op, alpha, a, b, out)) return DT_OK;
  binary_ctx ctx = {
      .op = op,
      .alpha = alpha,
      .a_dtype = a->dtype,
      .b_dtype = b->dtype,
      .out_dtype = out->dtype,
      .compare_as_int = !dt_dtype_is_floating(a->dtype) && !dt_dtype_is_floating(b->dtype),
      .fast_size =
          fast_dtypes(op, a->dtype, b->dtype, out->dtype) ? (int64_t)dt__dtype_sizes[a->dtype] : 0,
  };
  dt__loop_tensors_pooled(3, (const dt_tensor *[]){out, a, b}, inner_generic, &ctx);
  return DT_OK;
}

void dt__cpu_binary_scalar(dt_binary_op op, double alpha, const dt_tensor *a, double s,
                           dt_dtype scalar_dtype, dt_tensor *out) {
  /* A 0-d tensor on the stack viewing the scalar: the fast paths and the strided loop then
   * treat it as a broadcast operand, with no allocation. */
  union {
    double f64;
    int64_t i64;
    float f32;
    uint16_t f16;
  } value;
  dt__store_from_double(scalar_dtype, &value, s);
  dt_storage storage = {.owns_data = false, .data = &value, .nbytes = sizeof value};
  dt_tensor scalar = {.dtype = scalar_dtype, .ndim = 0, .storage = &storage};
  dt__cpu_binary(op, alpha, a, &scalar, out);
}
