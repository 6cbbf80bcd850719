/*
 * The library's counter-based random stream, element by element, for every device:
 * Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011) and
 * the mapping of its outputs to elements (tensor/random.c fills CPU tensors with it, the
 * CUDA kernels of src/kernels/cuda/ fill GPU tensors with it: the same seed and element index
 * give the same bits on both, so the mesh-invariant random tensors hold on a GPU).
 *
 * Mapping: the 128-bit counter is (index, 0) and the key is the 64-bit seed. float32
 * uniforms take 24 bits each, five per block: element i is slot i % 5 of block i / 5. Every
 * other dtype takes one block per element (two 32-bit words form a 53-bit double uniform;
 * normals use Box-Muller on the block's two uniforms). This is the library's own layout, not
 * PyTorch's (curand's Philox offsets): values are reproducible across devices and shardings
 * of this library, not bit-equal to torch.rand.
 */
#ifndef DT_TENSOR_PHILOX_H
#define DT_TENSOR_PHILOX_H

#include "core/host_device.h"
#include "tensor/element.h"

#define DT_PHILOX_M0 0xD2511F53u
#define DT_PHILOX_M1 0xCD9E8D57u
#define DT_PHILOX_W0 0x9E3779B9u
#define DT_PHILOX_W1 0xBB67AE85u

/* The block function runs once per element or five: always inlined on the CPU, where the fill
 * loops are measured. */
#if defined(__GNUC__) && !defined(__CUDACC__)
#define DT_PHILOX_INLINE __attribute__((always_inline))
#else
#define DT_PHILOX_INLINE
#endif

typedef struct dt_philox_block {
  uint32_t v[4];
} dt_philox_block;

/* Philox4x32 with 10 rounds on counter (c0..c3) and key (k0, k1). */
static inline DT_HOST_DEVICE DT_PHILOX_INLINE dt_philox_block
dt__philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; round++) {
    uint64_t p0 = (uint64_t)DT_PHILOX_M0 * c0, p1 = (uint64_t)DT_PHILOX_M1 * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
    uint32_t n1 = (uint32_t)p1;
    uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    uint32_t n3 = (uint32_t)p0;
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += DT_PHILOX_W0;
    k1 += DT_PHILOX_W1;
  }
  dt_philox_block r = {{c0, c1, c2, c3}};
  return r;
}

/* Block `index` of the stream of `seed`. */
static inline DT_HOST_DEVICE DT_PHILOX_INLINE dt_philox_block dt__philox_block(uint64_t seed,
                                                                               uint64_t index) {
  return dt__philox4x32_10((uint32_t)index, (uint32_t)(index >> 32), 0, 0, (uint32_t)seed,
                           (uint32_t)(seed >> 32));
}

/* Slot s (0..4) of a block: 24 bits at bit 24 * s of the 128-bit output. */
static inline DT_HOST_DEVICE uint32_t dt__philox_bits24(const dt_philox_block *r, unsigned s) {
  switch (s) {
  case 0: return r->v[0] & 0xffffffu;
  case 1: return (r->v[0] >> 24) | ((r->v[1] & 0xffffu) << 8);
  case 2: return (r->v[1] >> 16) | ((r->v[2] & 0xffu) << 16);
  case 3: return r->v[2] >> 8;
  default: return r->v[3] & 0xffffffu;
  }
}

/* A float32 uniform from 24 bits: lo + step * bits, capped at `below` (the largest float
 * below the upper bound: rounding can land on it). step = (hi - lo) / 2^24. */
static inline DT_HOST_DEVICE float dt__philox_uniform_f32(uint32_t bits24, float lo, float step,
                                                          float below) {
  float v = lo + step * (float)bits24;
  return v < below ? v : below;
}

/* Element `index` of a float32 uniform stream (slot index % 5 of block index / 5). */
static inline DT_HOST_DEVICE float dt__philox_uniform_f32_at(uint64_t seed, uint64_t index,
                                                             float lo, float step, float below) {
  dt_philox_block r = dt__philox_block(seed, index / 5);
  return dt__philox_uniform_f32(dt__philox_bits24(&r, (unsigned)(index % 5)), lo, step, below);
}

/* A double in [0, 1) from 53 random bits of two words. */
static inline DT_HOST_DEVICE double dt__philox_unit_f64(uint32_t hi, uint32_t lo) {
  uint64_t bits = ((uint64_t)hi << 21) ^ (uint64_t)(lo >> 11);
  return (double)(bits & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
}

/* Element `index` of a uniform stream on [a, b) of any dtype but float32, before rounding to
 * the dtype (the caller steps a value that rounded up to b back below it). */
static inline DT_HOST_DEVICE double dt__philox_uniform_f64_at(uint64_t seed, uint64_t index,
                                                              double a, double b) {
  dt_philox_block r = dt__philox_block(seed, index);
  return a + (b - a) * dt__philox_unit_f64(r.v[0], r.v[1]);
}

/* Stores a uniform draw v of [a, b) as dtype (not float32, which has its own stream): a
 * value that rounding to the dtype carried up to b becomes the largest value of the dtype
 * below b (toward a). */
static inline DT_HOST_DEVICE void dt__philox_store_uniform(int dtype, void *e, double v, double a,
                                                           double b) {
  dt__elem_store_f64(dtype, e, v);
  if (!(b > a) || dt__elem_load_f64(dtype, e) < b) return;
  if (dtype == DT_F64) {
    *(double *)e = nextafter(b, a);
  } else if (dtype == DT_F32) {
    *(float *)e = nextafterf((float)b, (float)a);
  } else if (dtype == DT_BF16 || dtype == DT_F16) { /* step the bit pattern of b toward a */
    dt__elem_store_f64(dtype, e, b);
    uint16_t bits = *(uint16_t *)e;
    if (bits == 0x0000u || bits == 0x8000u) {
      bits = 0x8001u; /* below +-0: the smallest negative value */
    } else if (bits & 0x8000u) {
      bits++; /* negative: a larger magnitude is smaller */
    } else {
      bits--;
    }
    *(uint16_t *)e = bits;
  }
}

#endif /* DT_TENSOR_PHILOX_H */
