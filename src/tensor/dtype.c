/* Dtype names, sizes, promotion, 16-bit float conversions and element load/store. */
#include <math.h>
#include <string.h>

#include "core/core_impl.h"
#include "tensor/dtype_impl.h"
#include "tensor/element.h"

const size_t dt__dtype_sizes[DT_DTYPE_COUNT] = {
#define DT_DTYPE_SIZE(name, text, size) [name] = size,
    DT_DTYPE_MAP(DT_DTYPE_SIZE)
#undef DT_DTYPE_SIZE
};

static const char *const dtype_names[DT_DTYPE_COUNT] = {
#define DT_DTYPE_NAME(name, text, size) [name] = text,
    DT_DTYPE_MAP(DT_DTYPE_NAME)
#undef DT_DTYPE_NAME
};

const char *dt_dtype_name(dt_dtype dtype) {
  return dt__dtype_valid(dtype) ? dtype_names[dtype] : "invalid";
}

size_t dt_dtype_size(dt_dtype dtype) { return dt__dtype_valid(dtype) ? dt__dtype_sizes[dtype] : 0; }

bool dt_dtype_is_floating(dt_dtype dtype) {
  return dtype == DT_F32 || dtype == DT_F64 || dtype == DT_BF16 || dtype == DT_F16;
}

/* Rank in the promotion lattice: bool < u8 < i32 < i64 < f16/bf16 < f32 < f64. */
static int promotion_rank(dt_dtype d) {
  switch (d) {
  case DT_BOOL: return 0;
  case DT_U8: return 1;
  case DT_I32: return 2;
  case DT_I64: return 3;
  case DT_F16: return 4;
  case DT_BF16: return 4;
  case DT_F32: return 5;
  case DT_F64: return 6;
  default: return -1;
  }
}

dt_dtype dt_dtype_promote(dt_dtype a, dt_dtype b) {
  if (a == b) return a;
  if ((a == DT_F16 && b == DT_BF16) || (a == DT_BF16 && b == DT_F16)) return DT_F32;
  return promotion_rank(a) >= promotion_rank(b) ? a : b;
}

/* The conversions are tensor/element.h's, which the CUDA kernels share. */
uint16_t dt_f32_to_bf16(float value) { return dt__elem_f32_to_bf16(value); }

float dt_bf16_to_f32(uint16_t bits) { return dt__elem_bf16_to_f32(bits); }

uint16_t dt_f32_to_f16(float value) { return dt__elem_f32_to_f16(value); }

float dt_f16_to_f32(uint16_t h) { return dt__elem_f16_to_f32(h); }

double dt__load_as_double(dt_dtype dtype, const void *p) { return dt__elem_load_f64(dtype, p); }

void dt__store_from_double(dt_dtype dtype, void *p, double v) { dt__elem_store_f64(dtype, p, v); }
