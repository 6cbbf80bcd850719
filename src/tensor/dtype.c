/* Dtype names, sizes, promotion, 16-bit float conversions and element load/store. */
#include <math.h>
#include <string.h>

#include "core/core_impl.h"
#include "tensor/dtype_impl.h"

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

uint16_t dt_f32_to_bf16(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x40); /* NaN */
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return (uint16_t)((bits + rounding) >> 16);
}

float dt_bf16_to_f32(uint16_t bits) {
  uint32_t wide = (uint32_t)bits << 16;
  float value;
  memcpy(&value, &wide, sizeof value);
  return value;
}

uint16_t dt_f32_to_f16(float value) {
  uint32_t x;
  memcpy(&x, &value, sizeof x);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);  /* NaN */
  if (abs >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* overflow to inf */
  if (abs < 0x38800000u) {                                   /* subnormal or zero */
    if (abs < 0x33000000u) return (uint16_t)sign;            /* rounds to zero */
    uint32_t exponent = abs >> 23;
    uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - exponent; /* 14 .. 24 */
    uint32_t half = mantissa >> shift;
    uint32_t remainder = mantissa & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (remainder > halfway || (remainder == halfway && (half & 1u))) half++;
    return (uint16_t)(sign | half);
  }
  uint32_t rebias = abs - 0x38000000u; /* exponent 127 -> 15 */
  uint32_t rounded = rebias + 0xfffu + ((rebias >> 13) & 1u);
  return (uint16_t)(sign | (rounded >> 13));
}

float dt_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else { /* subnormal: normalize */
      int e = -1;
      do {
        e++;
        mantissa <<= 1;
      } while ((mantissa & 0x400u) == 0);
      bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((mantissa & 0x3ffu) << 13);
    }
  } else if (exponent == 31) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  float value;
  memcpy(&value, &bits, sizeof value);
  return value;
}

double dt__load_as_double(dt_dtype dtype, const void *p) {
  switch (dtype) {
  case DT_F32: return *(const float *)p;
  case DT_F64: return *(const double *)p;
  case DT_BF16: return dt_bf16_to_f32(*(const uint16_t *)p);
  case DT_F16: return dt_f16_to_f32(*(const uint16_t *)p);
  case DT_I64: return (double)*(const int64_t *)p;
  case DT_I32: return *(const int32_t *)p;
  case DT_U8: return *(const uint8_t *)p;
  case DT_BOOL: return *(const uint8_t *)p ? 1.0 : 0.0;
  default: return 0.0;
  }
}

/* Float-to-integer casts of out-of-range values are undefined in C; clamp them first. */
static int64_t clamp_to_i64(double v) {
  if (isnan(v)) return 0;
  if (v >= 9223372036854775807.0) return INT64_MAX;
  if (v <= -9223372036854775808.0) return INT64_MIN;
  return (int64_t)v;
}

void dt__store_from_double(dt_dtype dtype, void *p, double v) {
  switch (dtype) {
  case DT_F32: *(float *)p = (float)v; break;
  case DT_F64: *(double *)p = v; break;
  case DT_BF16: *(uint16_t *)p = dt_f32_to_bf16((float)v); break;
  case DT_F16: *(uint16_t *)p = dt_f32_to_f16((float)v); break;
  case DT_I64: *(int64_t *)p = clamp_to_i64(v); break;
  case DT_I32: *(int32_t *)p = (int32_t)(uint32_t)(uint64_t)clamp_to_i64(v); break;
  case DT_U8: *(uint8_t *)p = (uint8_t)(uint64_t)clamp_to_i64(v); break;
  case DT_BOOL: *(uint8_t *)p = v != 0.0; break;
  default: break;
  }
}
