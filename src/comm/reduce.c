/* Element-wise reduction of several buffers into several, for every dtype. Backends that
 * combine buffers themselves (threads) use it. Work goes block by block: a block of every
 * source is folded into an accumulator on the stack before any destination is written, so
 * a destination may be one of the sources (in-place collectives). */
#include <string.h>

#include "comm/comm_impl.h"
#include "tensor/tensor_impl.h"

/* Elements per block: 1024 accumulators of at most 8 bytes stay in L1. */
#define BLOCK 1024

/* Floating max/min that propagate NaN from either side. */
#define FMAX(a, b) (((b) > (a) || (b) != (b)) ? (b) : (a))
#define FMIN(a, b) (((b) < (a) || (b) != (b)) ? (b) : (a))
#define IMAX(a, b) ((b) > (a) ? (b) : (a))
#define IMIN(a, b) ((b) < (a) ? (b) : (a))

static inline float load_bf16(uint16_t bits) { return dt_bf16_to_f32(bits); }
static inline uint16_t store_bf16(float v) { return dt_f32_to_bf16(v); }
static inline float load_f16(uint16_t bits) { return dt_f16_to_f32(bits); }
static inline uint16_t store_f16(float v) { return dt_f32_to_f16(v); }
#define IDENTITY(x) (x)

/* acc[i] = COMBINE over the block, with v the source's element i loaded as the accumulator
 * type. */
#define FOLD(A, LOAD, COMBINE)                                                                     \
  for (int64_t i = 0; i < m; i++) {                                                                \
    A v = (A)LOAD(s[i]);                                                                           \
    acc[i] = COMBINE;                                                                              \
  }

/* One function per dtype. T: element type, A: accumulator type, U: the type integer sums
 * and products are done in (unsigned, so they wrap instead of overflowing). */
#define DEFINE_REDUCE(NAME, T, A, U, LOAD, STORE, MAXF, MINF, AVG_OK)                              \
  static void NAME(dt_reduce_op op, int nsrc, const void *const *src, int ndst, void *const *dst,  \
                   int64_t n, int world) {                                                         \
    A acc[BLOCK];                                                                                  \
    for (int64_t base = 0; base < n; base += BLOCK) {                                              \
      int64_t m = n - base < BLOCK ? n - base : BLOCK;                                             \
      const T *first = (const T *)src[0] + base;                                                   \
      for (int64_t i = 0; i < m; i++) acc[i] = (A)LOAD(first[i]);                                  \
      for (int r = 1; r < nsrc; r++) {                                                             \
        const T *s = (const T *)src[r] + base;                                                     \
        switch (op) {                                                                              \
        case DT_REDUCE_SUM:                                                                        \
        case DT_REDUCE_AVG: FOLD(A, LOAD, (A)((U)acc[i] + (U)v)) break;                            \
        case DT_REDUCE_PROD: FOLD(A, LOAD, (A)((U)acc[i] * (U)v)) break;                           \
        case DT_REDUCE_MAX: FOLD(A, LOAD, MAXF(acc[i], v)) break;                                  \
        case DT_REDUCE_MIN: FOLD(A, LOAD, MINF(acc[i], v)) break;                                  \
        }                                                                                          \
      }                                                                                            \
      if (AVG_OK && op == DT_REDUCE_AVG) {                                                         \
        for (int64_t i = 0; i < m; i++) acc[i] = (A)(acc[i] / (A)world);                           \
      }                                                                                            \
      T *out = (T *)dst[0] + base;                                                                 \
      for (int64_t i = 0; i < m; i++) out[i] = (T)STORE(acc[i]);                                   \
      for (int r = 1; r < ndst; r++) {                                                             \
        T *d = (T *)dst[r] + base;                                                                 \
        if (d != out) memcpy(d, out, sizeof(T) * (size_t)m);                                       \
      }                                                                                            \
    }                                                                                              \
  }

DEFINE_REDUCE(reduce_f32, float, float, float, IDENTITY, IDENTITY, FMAX, FMIN, 1)
DEFINE_REDUCE(reduce_f64, double, double, double, IDENTITY, IDENTITY, FMAX, FMIN, 1)
DEFINE_REDUCE(reduce_bf16, uint16_t, float, float, load_bf16, store_bf16, FMAX, FMIN, 1)
DEFINE_REDUCE(reduce_f16, uint16_t, float, float, load_f16, store_f16, FMAX, FMIN, 1)
DEFINE_REDUCE(reduce_i64, int64_t, int64_t, uint64_t, IDENTITY, IDENTITY, IMAX, IMIN, 0)
DEFINE_REDUCE(reduce_i32, int32_t, int32_t, uint32_t, IDENTITY, IDENTITY, IMAX, IMIN, 0)
DEFINE_REDUCE(reduce_u8, uint8_t, uint8_t, uint32_t, IDENTITY, IDENTITY, IMAX, IMIN, 0)

/* bool: sum and max are "or", prod and min are "and"; any nonzero byte reads as true. */
static void reduce_bool(dt_reduce_op op, int nsrc, const void *const *src, int ndst,
                        void *const *dst, int64_t n, int world) {
  (void)world;
  bool any = op == DT_REDUCE_SUM || op == DT_REDUCE_MAX || op == DT_REDUCE_AVG;
  uint8_t acc[BLOCK];
  for (int64_t base = 0; base < n; base += BLOCK) {
    int64_t m = n - base < BLOCK ? n - base : BLOCK;
    const uint8_t *first = (const uint8_t *)src[0] + base;
    for (int64_t i = 0; i < m; i++) acc[i] = first[i] != 0;
    for (int r = 1; r < nsrc; r++) {
      const uint8_t *s = (const uint8_t *)src[r] + base;
      if (any) {
        for (int64_t i = 0; i < m; i++) acc[i] |= s[i] != 0;
      } else {
        for (int64_t i = 0; i < m; i++) acc[i] &= s[i] != 0;
      }
    }
    for (int r = 0; r < ndst; r++) memcpy((uint8_t *)dst[r] + base, acc, (size_t)m);
  }
}

#if defined(__SSE2__)
#include <emmintrin.h>

/* f32 sum of buffers larger than the caches: one pass, results written with non-temporal
 * stores (no read-for-ownership of the destinations, as a large memcpy does). Sums in the
 * same order as reduce_f32, so results are identical. Returns false when a destination is
 * not 16-byte aligned. */
static bool sum_f32_streaming(int nsrc, const void *const *src, int ndst, void *const *dst,
                              int64_t n) {
  for (int r = 0; r < ndst; r++) {
    if (((uintptr_t)dst[r] & 15) != 0) return false;
  }
  const float *const *s = (const float *const *)src;
  float *const *d = (float *const *)dst;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128 lo = _mm_loadu_ps(s[0] + i), hi = _mm_loadu_ps(s[0] + i + 4);
    for (int r = 1; r < nsrc; r++) {
      lo = _mm_add_ps(lo, _mm_loadu_ps(s[r] + i));
      hi = _mm_add_ps(hi, _mm_loadu_ps(s[r] + i + 4));
    }
    for (int r = 0; r < ndst; r++) {
      _mm_stream_ps(d[r] + i, lo);
      _mm_stream_ps(d[r] + i + 4, hi);
    }
  }
  for (; i < n; i++) {
    float v = s[0][i];
    for (int r = 1; r < nsrc; r++) v += s[r][i];
    for (int r = 0; r < ndst; r++) d[r][i] = v;
  }
  /* Streaming stores are weakly ordered: make them visible before completion is signalled. */
  _mm_sfence();
  return true;
}
#endif

/* The two-rank in-place f32 sum (each rank's share of a threads all_reduce on 2 ranks): one
 * pass that reads an element of both buffers and writes the sum to both, 30-35 % less time
 * than the blocked path (which folds into a stack accumulator, then copies it out twice) on
 * an AMD EPYC. Same order of addition as reduce_f32 (x + y), so results are identical. The
 * caller guarantees x and y do not overlap. */
static void sum2_f32_in_place(float *restrict x, float *restrict y, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    float v = x[i] + y[i];
    x[i] = v;
    y[i] = v;
  }
}

/* True when some destination's bytes overlap some source's. */
static bool dst_overlaps_src(int nsrc, const void *const *src, int ndst, void *const *dst,
                             size_t bytes) {
  for (int d = 0; d < ndst; d++) {
    uintptr_t d0 = (uintptr_t)dst[d], d1 = d0 + bytes;
    for (int s = 0; s < nsrc; s++) {
      uintptr_t s0 = (uintptr_t)src[s], s1 = s0 + bytes;
      if (d0 < s1 && s0 < d1) return true;
    }
  }
  return false;
}

void dt__reduce_buffers(dt_dtype dtype, dt_reduce_op op, int nsrc, const void *const *src, int ndst,
                        void *const *dst, int64_t n, int world, bool streaming) {
  if (n <= 0 || nsrc <= 0 || ndst <= 0) return;
  if (dtype == DT_F32 && op == DT_REDUCE_SUM && nsrc == 2 && ndst == 2 && dst[0] == src[0] &&
      dst[1] == src[1] &&
      !dst_overlaps_src(1, &src[0], 1, (void *const *)&dst[1], sizeof(float) * (size_t)n)) {
    sum2_f32_in_place(dst[0], dst[1], n);
    return;
  }
#if defined(__SSE2__)
  /* Non-temporal stores only pay when the destination is not in the cache. In place (a
   * destination is a source, as in every in-place all_reduce) the lines were just read, and
   * streaming over them measured 4-7x slower than ordinary stores on an AMD EPYC (Zen 3)
   * under KVM: the store must first evict the line it hits. */
  if (streaming && dtype == DT_F32 && op == DT_REDUCE_SUM &&
      !dst_overlaps_src(nsrc, src, ndst, dst, sizeof(float) * (size_t)n) &&
      sum_f32_streaming(nsrc, src, ndst, dst, n)) {
    return;
  }
#else
  (void)streaming;
#endif
  switch (dtype) {
  case DT_F32: reduce_f32(op, nsrc, src, ndst, dst, n, world); return;
  case DT_F64: reduce_f64(op, nsrc, src, ndst, dst, n, world); return;
  case DT_BF16: reduce_bf16(op, nsrc, src, ndst, dst, n, world); return;
  case DT_F16: reduce_f16(op, nsrc, src, ndst, dst, n, world); return;
  case DT_I64: reduce_i64(op, nsrc, src, ndst, dst, n, world); return;
  case DT_I32: reduce_i32(op, nsrc, src, ndst, dst, n, world); return;
  case DT_U8: reduce_u8(op, nsrc, src, ndst, dst, n, world); return;
  case DT_BOOL: reduce_bool(op, nsrc, src, ndst, dst, n, world); return;
  case DT_DTYPE_COUNT: break;
  }
  DT_ASSERT(!"dt__reduce_buffers: invalid dtype");
}
