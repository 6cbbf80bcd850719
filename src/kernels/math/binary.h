/*
 * The element functions of the binary ops and comparisons (kernels/elementwise.h's
 * dt_binary_op), written once for the CPU and CUDA (core/host_device.h). PyTorch's semantics:
 *   - floating results compute in double (exact for add, sub, mul, div of float32 operands
 *     once rounded back: double holds their exact result to more than twice float32's
 *     precision), integer results in int64, wrapping in two's complement;
 *   - maximum / minimum propagate NaN (either operand NaN gives NaN);
 *   - comparisons with a NaN operand are false, except ne, which is true;
 *   - integer pow by squaring; a negative exponent gives 0 except for bases 1 and -1
 *     (PyTorch raises an error there; this returns the exact integer result instead);
 *   - integer division never reaches here (div promotes integers to the default float).
 * The CPU's contiguous float32 fast loops (kernels/cpu/binary.c) compute in float32; they
 * agree with these bit for bit except for pow (powf against pow) and add/sub with alpha != 1
 * (x + alpha * y rounded twice in float32): the differential test allows 2 ulp there.
 */
#ifndef DT_KERNELS_MATH_BINARY_H
#define DT_KERNELS_MATH_BINARY_H

#include "core/host_device.h"
#include "kernels/elementwise.h"

/* A comparison op's result from the three orderings of its operands; unordered (NaN)
 * operands have all three false, which makes every comparison but ne false. */
static inline DT_HOST_DEVICE int dt__compare_result(dt_binary_op op, int lt, int eq, int gt) {
  switch (op) {
  case DT_BINARY_EQ: return eq;
  case DT_BINARY_NE: return !eq;
  case DT_BINARY_LT: return lt;
  case DT_BINARY_LE: return lt || eq;
  case DT_BINARY_GT: return gt;
  case DT_BINARY_GE: return gt || eq;
  default: return 0; /* not a comparison */
  }
}

static inline DT_HOST_DEVICE double dt__binary_f64(dt_binary_op op, double x, double y,
                                                   double alpha) {
  switch (op) {
  case DT_BINARY_ADD: return x + alpha * y;
  case DT_BINARY_SUB: return x - alpha * y;
  case DT_BINARY_MUL: return x * y;
  case DT_BINARY_DIV: return x / y;
  case DT_BINARY_MAXIMUM: return (x != x || y != y) ? NAN : (x > y ? x : y);
  case DT_BINARY_MINIMUM: return (x != x || y != y) ? NAN : (x < y ? x : y);
  case DT_BINARY_POW: return pow(x, y);
  default: return dt__compare_result(op, x<y, x == y, x> y); /* NaN: all three false */
  }
}

/* Integer pow by squaring (wrapping); see above for negative exponents. */
static inline DT_HOST_DEVICE int64_t dt__ipow_i64(int64_t base, int64_t exp) {
  if (exp < 0) return base == 1 ? 1 : base == -1 ? ((exp & 1) ? -1 : 1) : 0;
  uint64_t result = 1, b = (uint64_t)base;
  while (exp) {
    if (exp & 1) result *= b;
    b *= b;
    exp >>= 1;
  }
  return (int64_t)result;
}

static inline DT_HOST_DEVICE int64_t dt__binary_i64(dt_binary_op op, int64_t x, int64_t y,
                                                    int64_t alpha) {
  switch (op) {
  case DT_BINARY_ADD: return (int64_t)((uint64_t)x + (uint64_t)alpha * (uint64_t)y);
  case DT_BINARY_SUB: return (int64_t)((uint64_t)x - (uint64_t)alpha * (uint64_t)y);
  case DT_BINARY_MUL: return (int64_t)((uint64_t)x * (uint64_t)y);
  case DT_BINARY_MAXIMUM: return x > y ? x : y;
  case DT_BINARY_MINIMUM: return x < y ? x : y;
  case DT_BINARY_POW: return dt__ipow_i64(x, y);
  case DT_BINARY_DIV: return y ? x / y : 0; /* never reached: div promotes to float */
  default: return dt__compare_result(op, x<y, x == y, x> y);
  }
}

/* Whether a binary op's operands compute as integers (exactly, in int64) rather than in
 * double: an integer or bool result, except a comparison of a floating operand. */
static inline DT_HOST_DEVICE int dt__binary_is_integer(int out_floating, int out_bool,
                                                       int operands_integer) {
  return !out_floating && (!out_bool || operands_integer);
}

#endif /* DT_KERNELS_MATH_BINARY_H */
