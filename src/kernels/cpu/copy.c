/* Copies with broadcasting and dtype conversion. */
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/loop.h"

typedef struct copy_ctx {
  dt_dtype dst_dtype, src_dtype;
  size_t esize;
} copy_ctx;

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
