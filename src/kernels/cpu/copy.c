/* Copies with broadcasting and dtype conversion. */
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/loop.h"
#include "kernels/cpu/vmath.h"
#include "tensor/element.h"

typedef struct copy_ctx {
  dt_dtype dst_dtype, src_dtype;
  size_t esize;
} copy_ctx;

/* float32 <-> bfloat16 / float16 without the trip through double (the same bits: a float32
 * converts to double and back exactly, and the 16-bit conversions take the float). The
 * bfloat16 ones are shifts and a rounding add, which the compiler vectorizes over a
 * contiguous row; the float16 ones are per element. */
DT_VECTOR_CLONES static void bf16_to_f32_row(float *restrict d, const uint16_t *restrict s,
                                             int64_t n) {
  for (int64_t i = 0; i < n; i++) d[i] = dt__elem_bf16_to_f32(s[i]);
}

DT_VECTOR_CLONES static void f32_to_bf16_row(uint16_t *restrict d, const float *restrict s,
                                             int64_t n) {
  for (int64_t i = 0; i < n; i++) d[i] = dt__elem_f32_to_bf16(s[i]);
}

/* One of the four float32 <-> 16-bit float conversions; false for other pairs. */
static bool convert_16(dt_dtype dd, dt_dtype sd, char *d, const char *s, int64_t ds, int64_t ss,
                       int64_t n) {
  bool f32_from = sd == DT_F32 && (dd == DT_BF16 || dd == DT_F16);
  bool f32_to = dd == DT_F32 && (sd == DT_BF16 || sd == DT_F16);
  if (!f32_from && !f32_to) return false;
  bool contiguous = ds == (int64_t)dt__dtype_sizes[dd] && ss == (int64_t)dt__dtype_sizes[sd];
  if (contiguous && dd == DT_F32 && sd == DT_BF16) {
    bf16_to_f32_row((float *)d, (const uint16_t *)s, n);
  } else if (contiguous && dd == DT_BF16) {
    f32_to_bf16_row((uint16_t *)d, (const float *)s, n);
  } else if (dd == DT_F32 && sd == DT_BF16) {
    for (int64_t i = 0; i < n; i++, d += ds, s += ss)
      *(float *)d = dt__elem_bf16_to_f32(*(const uint16_t *)s);
  } else if (dd == DT_F32) {
    for (int64_t i = 0; i < n; i++, d += ds, s += ss)
      *(float *)d = dt__elem_f16_to_f32(*(const uint16_t *)s);
  } else if (dd == DT_BF16) {
    for (int64_t i = 0; i < n; i++, d += ds, s += ss)
      *(uint16_t *)d = dt__elem_f32_to_bf16(*(const float *)s);
  } else {
    for (int64_t i = 0; i < n; i++, d += ds, s += ss)
      *(uint16_t *)d = dt__elem_f32_to_f16(*(const float *)s);
  }
  return true;
}

static void inner_copy(char **ptrs, const int64_t *strides, int64_t n, void *opaque) {
  const copy_ctx *ctx = opaque;
  char *d = ptrs[0];
  const char *s = ptrs[1];
  if (ctx->dst_dtype == ctx->src_dtype) {
    size_t es = ctx->esize;
    if (strides[0] == (int64_t)es && strides[1] == (int64_t)es) {
      memcpy(d, s, (size_t)n * es);
      return;
    }
    for (int64_t i = 0; i < n; i++) {
      memcpy(d, s, es);
      d += strides[0];
      s += strides[1];
    }
    return;
  }
  if (ctx->dst_dtype == DT_F32 && ctx->src_dtype == DT_F64) {
    for (int64_t i = 0; i < n; i++) {
      *(float *)d = (float)*(const double *)s;
      d += strides[0];
      s += strides[1];
    }
    return;
  }
  if (convert_16(ctx->dst_dtype, ctx->src_dtype, d, s, strides[0], strides[1], n)) return;
  if (!dt_dtype_is_floating(ctx->dst_dtype) && !dt_dtype_is_floating(ctx->src_dtype)) {
    /* Integer to integer never goes through double: int64 values past 2^53 stay exact, and
     * narrowing wraps as C's unsigned conversions do (the CUDA copy does the same). */
    for (int64_t i = 0; i < n; i++) {
      dt__elem_store_i64(ctx->dst_dtype, d, dt__elem_load_i64(ctx->src_dtype, s));
      d += strides[0];
      s += strides[1];
    }
    return;
  }
  for (int64_t i = 0; i < n; i++) {
    dt__store_from_double(ctx->dst_dtype, d, dt__load_as_double(ctx->src_dtype, s));
    d += strides[0];
    s += strides[1];
  }
}

void dt__cpu_copy(dt_tensor *dst, const dt_tensor *src) {
  copy_ctx ctx = {dst->dtype, src->dtype, dt__dtype_sizes[dst->dtype]};
  dt__loop_tensors_pooled(2, (const dt_tensor *[]){dst, src}, inner_copy, &ctx);
}
