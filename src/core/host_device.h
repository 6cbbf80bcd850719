/*
 * Code that both the C compiler (the CPU's kernels) and nvcc (the CUDA kernels,
 * src/kernels/cuda/) compile: element conversions (tensor/element.h), Philox
 * (tensor/philox.h) and the element arithmetic of kernels/math/. A function marked
 * DT_HOST_DEVICE is `__host__ __device__` under nvcc and a plain static inline function in C,
 * so the CPU's tests already exercise the arithmetic each CUDA kernel applies.
 *
 * Such code uses only what both sides have: <math.h>'s functions (CUDA's device math library
 * provides the same names), no libc beyond them, no globals, and bit casts through the
 * helpers below.
 */
#ifndef DT_CORE_HOST_DEVICE_H
#define DT_CORE_HOST_DEVICE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define DT_HOST_DEVICE __host__ __device__
#else
#define DT_HOST_DEVICE
#endif

/* Bit casts through memcpy, which device code has too: nvcc -O3 compiles it to the same PTX
 * as __uint_as_float / __float_as_uint (a register move). */
static inline DT_HOST_DEVICE float dt__bits_to_f32(uint32_t bits) {
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

static inline DT_HOST_DEVICE uint32_t dt__f32_to_bits(float f) {
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  return bits;
}

#endif /* DT_CORE_HOST_DEVICE_H */
