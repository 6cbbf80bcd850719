/*
 * One element of any dtype, read and written the same way on every device: the 16-bit float
 * conversions (round to nearest even), loads and stores through double (floating results)
 * and through int64 (integer results, exact). Host and device code (core/host_device.h):
 * dtype.c's public conversions and dt__load_as_double / dt__store_from_double are these, and
 * the CUDA kernels (src/kernels/cuda/) convert with them, so a value converts to the same
 * bits on the CPU and on a GPU. `dtype` is a dt_dtype's value.
 */
#ifndef DT_TENSOR_ELEMENT_H
#define DT_TENSOR_ELEMENT_H

#include "core/host_device.h"
#include "dtensor/tensor.h"

static inline DT_HOST_DEVICE uint16_t dt__elem_f32_to_bf16(float value) {
  uint32_t bits = dt__f32_to_bits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x40); /* NaN */
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return (uint16_t)((bits + rounding) >> 16);
}

static inline DT_HOST_DEVICE float dt__elem_bf16_to_f32(uint16_t bits) {
  return dt__bits_to_f32((uint32_t)bits << 16);
}

static inline DT_HOST_DEVICE uint16_t dt__elem_f32_to_f16(float value) {
  uint32_t x = dt__f32_to_bits(value);
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

static inline DT_HOST_DEVICE float dt__elem_f16_to_f32(uint16_t h) {
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
  return dt__bits_to_f32(bits);
}

/* Float-to-integer casts of out-of-range values are undefined in C (and differ between a CPU
 * and a GPU): NaN is 0, the rest saturate to int64's range. */
static inline DT_HOST_DEVICE int64_t dt__elem_clamp_to_i64(double v) {
  if (v != v) return 0;
  if (v >= 9223372036854775807.0) return INT64_MAX;
  if (v <= -9223372036854775808.0) return INT64_MIN;
  return (int64_t)v;
}

static inline DT_HOST_DEVICE double dt__elem_load_f64(int dtype, const void *p) {
  switch (dtype) {
  case DT_F32: return *(const float *)p;
  case DT_F64: return *(const double *)p;
  case DT_BF16: return dt__elem_bf16_to_f32(*(const uint16_t *)p);
  case DT_F16: return dt__elem_f16_to_f32(*(const uint16_t *)p);
  case DT_I64: return (double)*(const int64_t *)p;
  case DT_I32: return *(const int32_t *)p;
  case DT_U8: return *(const uint8_t *)p;
  case DT_BOOL: return *(const uint8_t *)p ? 1.0 : 0.0;
  default: return 0.0;
  }
}

static inline DT_HOST_DEVICE void dt__elem_store_f64(int dtype, void *p, double v) {
  switch (dtype) {
  case DT_F32: *(float *)p = (float)v; break;
  case DT_F64: *(double *)p = v; break;
  case DT_BF16: *(uint16_t *)p = dt__elem_f32_to_bf16((float)v); break;
  case DT_F16: *(uint16_t *)p = dt__elem_f32_to_f16((float)v); break;
  case DT_I64: *(int64_t *)p = dt__elem_clamp_to_i64(v); break;
  case DT_I32: *(int32_t *)p = (int32_t)(uint32_t)(uint64_t)dt__elem_clamp_to_i64(v); break;
  case DT_U8: *(uint8_t *)p = (uint8_t)(uint64_t)dt__elem_clamp_to_i64(v); break;
  case DT_BOOL: *(uint8_t *)p = v != 0.0; break;
  default: break;
  }
}

/* Integer loads and stores: exact for integer and bool elements (floating ones go through
 * double); integers wrap to the dtype's width as C's unsigned conversions do, bool stores
 * v != 0. */
static inline DT_HOST_DEVICE int64_t dt__elem_load_i64(int dtype, const void *p) {
  switch (dtype) {
  case DT_I64: return *(const int64_t *)p;
  case DT_I32: return *(const int32_t *)p;
  case DT_U8:
  case DT_BOOL: return *(const uint8_t *)p;
  default: return (int64_t)dt__elem_load_f64(dtype, p);
  }
}

static inline DT_HOST_DEVICE void dt__elem_store_i64(int dtype, void *p, int64_t v) {
  switch (dtype) {
  case DT_I64: *(int64_t *)p = v; break;
  case DT_I32: *(int32_t *)p = (int32_t)(uint32_t)(uint64_t)v; break;
  case DT_U8: *(uint8_t *)p = (uint8_t)(uint64_t)v; break;
  case DT_BOOL: *(uint8_t *)p = v != 0; break;
  default: dt__elem_store_f64(dtype, p, (double)v); break;
  }
}

#endif /* DT_TENSOR_ELEMENT_H */
