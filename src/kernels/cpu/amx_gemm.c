/*
 * Float32 GEMM on AMX tiles: three bfloat16 parts per operand, six tile products per step
 * of 32 k values (numerics in amx_gemm.h).
 *
 * Layout. A tile holds 16 rows of 64 bytes. An A tile is 16 rows of op(a) by 32 k values
 * (bfloat16); a B tile is 16 pairs of k rows by 16 columns, each column's two k values
 * adjacent (the "VNNI" order TDPBF16PS reads). Packing writes, per 16-row strip of op(a)
 * (or 16-column strip of op(b)) and per k step, the three parts' tiles one after the other
 * (3 KiB; a strip's sets are padded by a cache line). The C tiles are float32 and load and
 * store straight from c when whole (through a 16 x 16 buffer at the edges).
 *
 * Blocking. Rows run in blocks of MC_ROWS, k in blocks of KC_STEPS steps (512 values); per k
 * block the row block's rows of op(a) are packed once (rows x 3 KiB per 16 rows), then op(b) in
 * blocks of NC_STRIPS column strips (256 columns: 768 KiB, resident in L2 while every row strip
 * passes over it). The micro-kernel computes a 32 x 32 block of c (4 accumulator tiles, 2 tiles of
 * A parts and 2 of B parts streaming) over one k block: per step 14 tile loads and 24 tile products
 * (fewer where a strip pair's values are bfloat16s already). The first k block stores into c (or
 * adds to it when accumulating); each later one is summed from zero and added to c, a blocked sum.
 */
#define _GNU_SOURCE /* syscall */
#include "kernels/cpu/amx_gemm.h"

#include "core/core_impl.h"
#include "dtensor/core.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__linux__) &&                                                   \
    ((defined(__clang__) && __clang_major__ >= 12) ||                                              \
     (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 11))
#define DT_AMX_BUILD 1
#endif

#ifdef DT_AMX_BUILD
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#define AMX_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,amx-tile,amx-bf16")))

#define KC_STEPS 16  /* k steps of 32 per k block */
#define NC_STRIPS 16 /* column strips of 16 per column block */
/* Rows per call of run(): bounds the packed rows of op(a) (6 MiB per thread) whatever m is;
 * a multiple of 32, so that row pairs of strips fall as in the whole product. */
#define MC_ROWS 2048
#define TILE_ELEMS 512 /* bfloat16 per tile */
/* One strip and step: the three parts' tiles. Part 0 with its infinities made zeros (see
 * kernel_2x2) goes to a parallel array of single tiles, written only when the packed block
 * holds an infinity. */
#define SET_ELEMS (3 * TILE_ELEMS)
/* A strip's sets for `steps` k steps, plus one cache line: strips a power-of-two multiple of
 * 1 KiB apart would put the same row of every strip's set in the same L1 cache set, and the
 * packing loops that write one row into each strip in turn would evict their own lines. */
#define STRIP_ELEMS(steps) ((size_t)(steps)*SET_ELEMS + 32)

/* dt_set_cpu_amx's setting (-1: none, the environment's DT_AMX decides, read once: "0" is
 * off). While off the process never asks the OS for the tile state (which enlarges every
 * signal frame by 8 KiB: a program with a small sigaltstack may want that). */
static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static bool env_off;
static atomic_int setting = -1;
/* the hardware and OS answer, asked once, at the first GEMM that could use it */
static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static atomic_bool hardware_ok;

/* DT_AMX is 0 or 1; any other value is reported once through the log and leaves AMX on, as
 * the project's other integer variables are read (core/env.c). */
static void read_env(void) {
  env_off = dt__env_int("DT_AMX", 0, 1, 1, "1 (AMX where the CPU has it)") == 0;
}

static bool probe_hardware(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return false; /* OSXSAVE */
  if (__get_cpuid_max(0, NULL) < 7) return false;
  __cpuid_count(7, 0, a, b, c, d);
  bool avx512 = (b & (1u << 16)) && (b & (1u << 17)) && (b & (1u << 30)) && (b & (1u << 31));
  bool amx = (d & (1u << 22)) && (d & (1u << 24)); /* AMX-BF16, AMX-TILE */
  if (!avx512 || !amx) return false;
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  (void)hi;
  /* XCR0: SSE, AVX, opmask, ZMM_Hi256, Hi16_ZMM, XTILECFG, XTILEDATA. */
  uint32_t want =
      (1u << 1) | (1u << 2) | (1u << 5) | (1u << 6) | (1u << 7) | (1u << 17) | (1u << 18);
  if ((lo & want) != want) return false;
  /* Linux grants the 8 KiB tile state to a process that asks (ARCH_REQ_XCOMP_PERM with
   * XFEATURE_XTILEDATA); without it the first tile instruction faults. */
  return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
}

static void probe(void) { atomic_store(&hardware_ok, probe_hardware()); }

bool dt__amx_usable(void) {
  int set = atomic_load_explicit(&setting, memory_order_relaxed);
  if (set < 0) {
    pthread_once(&env_once, read_env);
    if (env_off) return false;
  } else if (set == 0) {
    return false;
  }
  pthread_once(&probe_once, probe);
  return atomic_load_explicit(&hardware_ok, memory_order_relaxed);
}

dt_status dt_set_cpu_amx(bool enabled) {
  atomic_store(&setting, enabled ? 1 : 0);
  return DT_OK;
}

bool dt_get_cpu_amx(void) { return dt__amx_usable(); }

void dt__amx_set_enabled(bool on) { (void)dt_set_cpu_amx(on); }

bool dt__amx_worth(int m, int n, int k) {
  /* Measured against OpenBLAS's SkylakeX sgemm on one core (docs/benchmarks.md): faster from
   * 256 x 256 x 128 (1.3x) up; at 256 x 256 x 64 and 128^3 only on hot caches (the batched
   * attention products of a step ran 5-20 % slower), and with 64 columns slower (packing the
   * other operand dominates). */
  return m >= 64 && n >= 128 && k >= 64 && (int64_t)m * n * k >= ((int64_t)1 << 23);
}

/* ---- Per-thread workspace ------------------------------------------------------------- */

typedef struct workspace {
  uint16_t *data;
  size_t elems;
} workspace;

static pthread_key_t ws_key;
static pthread_once_t ws_once = PTHREAD_ONCE_INIT;
static bool ws_key_ok;

static void ws_free(void *p) {
  workspace *w = p;
  if (w) free(w->data);
  free(w);
}
static void ws_init(void) { ws_key_ok = pthread_key_create(&ws_key, ws_free) == 0; }

/* The calling thread's workspace of at least `elems` bfloat16, 64-byte aligned; kept for the
 * thread's next GEMMs (fresh pages cost a fault each), freed when the thread exits. */
static uint16_t *workspace_get(size_t elems) {
  pthread_once(&ws_once, ws_init);
  if (!ws_key_ok) return NULL;
  workspace *w = pthread_getspecific(ws_key);
  if (!w) {
    w = calloc(1, sizeof *w);
    if (!w) return NULL;
    if (pthread_setspecific(ws_key, w) != 0) {
      free(w);
      return NULL;
    }
  }
  if (w->elems < elems) {
    size_t bytes = (elems * sizeof(uint16_t) + 63) / 64 * 64;
    uint16_t *p = aligned_alloc(64, bytes);
    if (!p) return NULL;
    free(w->data);
    w->data = p;
    w->elems = elems;
  }
  return w->data;
}

/* ---- Splitting and packing ------------------------------------------------------------ */

static inline __mmask16 lanes(int n) {
  return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

/* Round-to-nearest-even to bfloat16, kept as a float32 bit pattern with 16 zero low bits. */
AMX_TARGET static inline __m512i round_bf16(__m512i u) {
  const __m512i bias = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1),
                high = _mm512_set1_epi32((int)0xffff0000u);
  __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
  return _mm512_and_si512(_mm512_add_epi32(_mm512_add_epi32(u, bias), odd), high);
}

/* x = p0 + p1 + p2 for 16 floats. A finite x too large to round (p0 would become infinite)
 * is cut into three truncated parts of its sign instead (exact as well), so that no partial
 * sum p0 + p1 overflows where x does not; infinities keep themselves and NaNs a quiet NaN as p0,
 * with zero p1 and p2 (so that inf - inf makes no NaN of a finite product). */
AMX_TARGET static inline void split3(__m512 x, __m512i *p0, __m512i *p1, __m512i *p2,
                                     __mmask16 *infs) {
  const __m512i high = _mm512_set1_epi32((int)0xffff0000u);
  __m512i u = _mm512_castps_si512(x);
  __m512i mag = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  __mmask16 finite = _mm512_cmplt_epu32_mask(mag, _mm512_set1_epi32(0x7f800000));
  __mmask16 nan = _mm512_cmpgt_epu32_mask(mag, _mm512_set1_epi32(0x7f800000));
  __mmask16 huge = _mm512_cmpge_epu32_mask(mag, _mm512_set1_epi32(0x7f7f8000)) & finite;
  *infs |= (__mmask16)(~finite & ~nan);
  __m512i a0 = _mm512_mask_and_epi32(round_bf16(u), (__mmask16)(~finite | huge), u, high);
  a0 = _mm512_mask_or_epi32(a0, nan, a0, _mm512_set1_epi32(0x00400000));
  __m512 r1 = _mm512_maskz_sub_ps(finite, x, _mm512_castsi512_ps(a0));
  __m512i u1 = _mm512_castps_si512(r1);
  __m512i a1 = _mm512_mask_and_epi32(round_bf16(u1), huge, u1, high);
  __m512 r2 = _mm512_sub_ps(r1, _mm512_castsi512_ps(a1));
  __m512i u2 = _mm512_castps_si512(r2);
  *p0 = a0;
  *p1 = a1;
  *p2 = _mm512_mask_and_epi32(round_bf16(u2), huge, u2, high);
}

/* 16 dwords, dword i holding the bfloat16 of k = 2i (low half) and 2i + 1 (high half), from
 * 32 consecutive k values lo (0..15) and hi (16..31) kept as float32 bit patterns. */
AMX_TARGET static inline __m512i pairs_along(__m512i lo, __m512i hi) {
  const __m512i idx =
      _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27,
                       25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  return _mm512_permutex2var_epi16(lo, idx, hi);
}

/* 16 dwords, lane j holding row k0's and row k1's bfloat16 at j. */
AMX_TARGET static inline __m512i pairs_across(__m512i k0, __m512i k1) {
  return _mm512_or_si512(k1, _mm512_srli_epi32(k0, 16));
}

/* Splits x and y and stores the three parts' rows of 16 dwords at d, d + stride, d + 2 stride:
 * pairs along k (x: k 0..15, y: k 16..31 of one row) or across two k rows (x: row k, y: row
 * k + 1, lane j each). Returns whether any value has nonzero parts 1 or 2 (is not a
 * bfloat16 already). */
AMX_TARGET static inline bool store_parts(__m512 x, __m512 y, bool along, uint32_t *d, int stride,
                                          __mmask16 *infs) {
  __m512i x0, x1, x2, y0, y1, y2;
  split3(x, &x0, &x1, &x2, infs);
  split3(y, &y0, &y1, &y2, infs);
  _mm512_store_si512(d, along ? pairs_along(x0, y0) : pairs_across(x0, y0));
  _mm512_store_si512(d + stride, along ? pairs_along(x1, y1) : pairs_across(x1, y1));
  _mm512_store_si512(d + 2 * stride, along ? pairs_along(x2, y2) : pairs_across(x2, y2));
  __m512i low = _mm512_or_si512(_mm512_or_si512(x1, x2), _mm512_or_si512(y1, y2));
  return _mm512_test_epi32_mask(low, low) != 0;
}

/* 32 consecutive values at p (count of them valid) into one row of each part's tile. */
AMX_TARGET static inline bool row_along(const float *p, int count, uint32_t *d, int stride,
                                        __mmask16 *infs) {
  __m512 lo = _mm512_maskz_loadu_ps(lanes(count), p);
  __m512 hi = _mm512_maskz_loadu_ps(lanes(count - 16), p + 16);
  return store_parts(lo, hi, true, d, stride, infs);
}

/* Two rows of 16 values (count valid; a NULL row reads as zeros) into one row of each
 * part's tile. */
AMX_TARGET static inline bool rows_across(const float *k0, const float *k1, int count, uint32_t *d,
                                          int stride, __mmask16 *infs) {
  __m512 x = k0 ? _mm512_maskz_loadu_ps(lanes(count), k0) : _mm512_setzero_ps();
  __m512 y = k1 ? _mm512_maskz_loadu_ps(lanes(count), k1) : _mm512_setzero_ps();
  return store_parts(x, y, false, d, stride, infs);
}

/* Transposes the three parts' 16 x 16 dword tiles of a set in place, in registers: pairs of
 * rows interleave their dwords, then their qwords, then 128-bit lanes twice. */
AMX_TARGET static void transpose_parts(uint32_t *set) {
  for (int p = 0; p < 3; p++) {
    uint32_t *t = set + p * 256;
    __m512i r[16], x[16];
    for (int i = 0; i < 16; i++) r[i] = _mm512_load_si512(t + 16 * i);
    for (int i = 0; i < 8; i++) {
      x[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
      x[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
      r[4 * i + 0] = _mm512_unpacklo_epi64(x[4 * i + 0], x[4 * i + 2]);
      r[4 * i + 1] = _mm512_unpackhi_epi64(x[4 * i + 0], x[4 * i + 2]);
      r[4 * i + 2] = _mm512_unpacklo_epi64(x[4 * i + 1], x[4 * i + 3]);
      r[4 * i + 3] = _mm512_unpackhi_epi64(x[4 * i + 1], x[4 * i + 3]);
    }
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < 4; j++) {
        x[8 * i + j] = _mm512_shuffle_i32x4(r[8 * i + j], r[8 * i + 4 + j], 0x88);
        x[8 * i + 4 + j] = _mm512_shuffle_i32x4(r[8 * i + j], r[8 * i + 4 + j], 0xdd);
      }
    for (int j = 0; j < 8; j++) {
      r[j] = _mm512_shuffle_i32x4(x[j], x[8 + j], 0x88);
      r[8 + j] = _mm512_shuffle_i32x4(x[j], x[8 + j], 0xdd);
    }
    for (int i = 0; i < 16; i++) _mm512_store_si512(t + 16 * i, r[i]);
  }
}

/* When a packed block holds an infinity (infs), writes each set's part 0 with its
 * infinities made zeros, for the kernel's correction products; returns whether it did. */
AMX_TARGET static bool finite_part0(const uint16_t *pack, int strips, int steps, __mmask16 infs,
                                    uint16_t *finite) {
  if (!infs) return false;
  const __m512i magnitude = _mm512_set1_epi16(0x7fff), inf = _mm512_set1_epi16(0x7f80);
  for (size_t i = 0; i < (size_t)strips * steps; i++) {
    const uint16_t *from = pack + i / steps * STRIP_ELEMS(steps) + i % steps * SET_ELEMS;
    uint16_t *to = finite + i * TILE_ELEMS;
    for (int v = 0; v < TILE_ELEMS; v += 32) {
      __m512i x = _mm512_load_si512(from + v);
      __mmask32 is_inf = _mm512_cmpeq_epi16_mask(_mm512_and_si512(x, magnitude), inf);
      _mm512_store_si512(to + v, _mm512_maskz_mov_epi16(~is_inf, x));
    }
  }
  return true;
}

/* Packs rows [0, strips * 16) and k steps [t0, t0 + steps) of op(a) [m, k] into sets
 * [strip][step] (zeros past the ends), reading the source along its rows (op(a)'s, or the
 * stored [k, m]'s across the strips). low[s]: whether strip s holds a value that is not a
 * bfloat16 (nonzero parts 1 or 2). Returns whether the block holds an infinity. */
AMX_TARGET static bool pack_a(const float *a, int lda, bool ta, int m, int k, int strips, int t0,
                              int steps, uint16_t *pack, uint16_t *finite, uint8_t *low) {
  memset(low, 0, (size_t)strips);
  __mmask16 infs = 0;
  if (ta) {
    /* the stored [k, m] read along its rows (across strips): sequential reads matter more
     * here than the writes' L1 sets (measured) */
    for (int t = 0; t < steps; t++)
      for (int kp = 0; kp < 16; kp++) {
        int ka = (t0 + t) * 32 + 2 * kp, kb = ka + 1;
        const float *ra = ka < k ? a + (size_t)ka * lda : NULL;
        const float *rb = kb < k ? a + (size_t)kb * lda : NULL;
        for (int s = 0; s < strips; s++) {
          uint32_t *row =
              (uint32_t *)(pack + s * STRIP_ELEMS(steps) + (size_t)t * SET_ELEMS) + kp * 16;
          low[s] |= rows_across(ra ? ra + s * 16 : NULL, rb ? rb + s * 16 : NULL, m - s * 16, row,
                                256, &infs);
        }
      }
    for (int s = 0; s < strips; s++)
      for (int t = 0; t < steps; t++)
        transpose_parts((uint32_t *)(pack + s * STRIP_ELEMS(steps) + (size_t)t * SET_ELEMS));
    return finite_part0(pack, strips, steps, infs, finite);
  }
  for (int s = 0; s < strips; s++)
    for (int t = 0; t < steps; t++) {
      uint32_t *set = (uint32_t *)(pack + s * STRIP_ELEMS(steps) + (size_t)t * SET_ELEMS);
      int k0 = (t0 + t) * 32;
      for (int r = 0; r < 16; r++) {
        int mi = s * 16 + r;
        if (mi < m) {
          low[s] |= row_along(a + (size_t)mi * lda + k0, k - k0, set + r * 16, 256, &infs);
        } else {
          for (int p = 0; p < 3; p++) memset(set + p * 256 + r * 16, 0, 64);
        }
      }
    }
  return finite_part0(pack, strips, steps, infs, finite);
}

/* Packs column strips [j0, j1) and k steps [t0, t0 + steps) of op(b) [k, n] into sets
 * [strip - j0][step] likewise; low[j - j0] as above. */
AMX_TARGET static bool pack_b(const float *b, int ldb, bool tb, int k, int n, int j0, int j1,
                              int t0, int steps, uint16_t *pack, uint16_t *finite, uint8_t *low) {
  memset(low, 0, (size_t)(j1 - j0));
  __mmask16 infs = 0;
  if (!tb) {
    /* the stored [k, n] read along its rows, across the block's strips */
    for (int t = 0; t < steps; t++)
      for (int kp = 0; kp < 16; kp++) {
        int ka = (t0 + t) * 32 + 2 * kp, kb = ka + 1;
        const float *ra = ka < k ? b + (size_t)ka * ldb : NULL;
        const float *rb = kb < k ? b + (size_t)kb * ldb : NULL;
        for (int j = j0; j < j1; j++) {
          uint32_t *row =
              (uint32_t *)(pack + (j - j0) * STRIP_ELEMS(steps) + (size_t)t * SET_ELEMS) + kp * 16;
          low[j - j0] |= rows_across(ra ? ra + j * 16 : NULL, rb ? rb + j * 16 : NULL, n - j * 16,
                                     row, 256, &infs);
        }
      }
    return finite_part0(pack, j1 - j0, steps, infs, finite);
  }
  for (int j = j0; j < j1; j++)
    for (int t = 0; t < steps; t++) {
      uint32_t *set = (uint32_t *)(pack + (j - j0) * STRIP_ELEMS(steps) + (size_t)t * SET_ELEMS);
      int k0 = (t0 + t) * 32;
      for (int c = 0; c < 16; c++) {
        int ni = j * 16 + c;
        if (ni < n) {
          low[j - j0] |= row_along(b + (size_t)ni * ldb + k0, k - k0, set + c * 16, 256, &infs);
        } else {
          for (int p = 0; p < 3; p++) memset(set + p * 256 + c * 16, 0, 64);
        }
      }
      transpose_parts(set);
    }
  return finite_part0(pack, j1 - j0, steps, infs, finite);
}

/* ---- Micro-kernel --------------------------------------------------------------------- */

/* How a k block meets c: the first block of a product starts from zeros (C_STORE) or, when
 * accumulating, from c (C_LOAD); each later block starts from zeros and is added to c
 * afterwards (C_ADD), so that the sum over k is a sum of per-block sums, as a blocked sgemm
 * makes it (one float32 accumulator over 6 x 8,192 terms had 4x sgemm's largest error). */
typedef enum { C_STORE, C_LOAD, C_ADD } c_mode;

/* One accumulator tile of c: where it loads from and stores to (c itself when whole and not
 * added to; else a 16 x 16 buffer). */
typedef struct c_tile {
  float *at; /* c, or buf */
  int ld;    /* floats */
  float *c;
  int ldc, rows, cols;
  bool add;
} c_tile;

static void c_tile_open(c_tile *t, float *c, int ldc, int rows, int cols, c_mode mode, float *buf) {
  t->c = c;
  t->ldc = ldc;
  t->rows = rows < 0 ? 0 : rows > 16 ? 16 : rows;
  t->cols = cols < 0 ? 0 : cols > 16 ? 16 : cols;
  t->add = mode == C_ADD;
  if (t->rows == 16 && t->cols == 16 && !t->add) {
    t->at = c;
    t->ld = ldc;
    return;
  }
  t->at = buf;
  t->ld = 16;
  if (mode == C_LOAD) {
    memset(buf, 0, 256 * sizeof(float));
    for (int r = 0; r < t->rows; r++)
      memcpy(buf + r * 16, c + (size_t)r * ldc, (size_t)t->cols * sizeof(float));
  }
}

AMX_TARGET static void c_tile_close(const c_tile *t) {
  if (t->add) {
    __mmask16 cols = lanes(t->cols);
    for (int r = 0; r < t->rows; r++) {
      float *row = t->c + (size_t)r * t->ldc;
      __m512 sum = _mm512_add_ps(_mm512_maskz_loadu_ps(cols, row), _mm512_load_ps(t->at + r * 16));
      _mm512_mask_storeu_ps(row, cols, sum);
    }
    return;
  }
  if (t->at == t->c) return;
  for (int r = 0; r < t->rows; r++)
    memcpy(t->c + (size_t)r * t->ldc, t->at + r * 16, (size_t)t->cols * sizeof(float));
}

/* c tiles (0, 1, 2, 3) += (a0 b0, a0 b1, a1 b0, a1 b1) over `steps` k steps, a0/a1 and b0/b1
 * the part sets of two row strips and two column strips. Per step the small products first,
 * x2y0, x1y0 (when a_low: the rows hold values that are not bfloat16s), x1y1 (when both),
 * x0y1, x0y2 (when b_low), and x0y0 last, so that a sum dominated by one term is rounded
 * about once, as sgemm rounds it (x0y0 first: 2.3 ulp off a single product); 14 tile loads
 * for 24 products when both. Products left out have a zero factor in every term: bfloat16
 * operands (a bfloat16 model, or bfloat16 weights against float32 activations) cost one or
 * three products instead of six. An infinite x leaves its parts 1 and 2 zero, and infinity
 * times a zero part of y would make a NaN of an infinite product: when a block holds
 * infinities the corrections read part 0 with its infinities made zeros (finite[]: for a0,
 * a1, b0, b1; NULL where the block has none), and x0y0 alone carries them. */
AMX_TARGET static void kernel_2x2(const uint16_t *a0, const uint16_t *a1, const uint16_t *b0,
                                  const uint16_t *b1, const uint16_t *const *finite, int steps,
                                  const c_tile *ct, bool load, bool a_low, bool b_low,
                                  const float *next, int next_rows, int ldc, const char *ahead,
                                  size_t ahead_bytes) {
  if (load) {
    _tile_loadd(0, ct[0].at, (long)ct[0].ld * 4);
    _tile_loadd(1, ct[1].at, (long)ct[1].ld * 4);
    _tile_loadd(2, ct[2].at, (long)ct[2].ld * 4);
    _tile_loadd(3, ct[3].at, (long)ct[3].ld * 4);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  /* next: the next block's corner in c (NULL: none), whose 32 rows of 128 bytes are fetched
   * into the cache while this block computes; its tiles' loads and stores would otherwise
   * wait for memory, 16 lines each. ahead: packed operand bytes the next calls read first
   * (into L2, spread over the steps). */
  int per_step = next ? (2 * next_rows + steps - 1) / steps : 0, fetched = 0;
  size_t ahead_lines = ahead_bytes / 64, ahead_step = (ahead_lines + steps - 1) / steps;
  size_t ahead_at = 0;
#define DT_AMX_PRODUCTS                                                                            \
  _tile_dpbf16ps(0, 4, 6);                                                                         \
  _tile_dpbf16ps(1, 4, 7);                                                                         \
  _tile_dpbf16ps(2, 5, 6);                                                                         \
  _tile_dpbf16ps(3, 5, 7)
  for (int t = 0; t < steps; t++) {
    for (int i = 0; i < per_step && fetched < 2 * next_rows; i++, fetched++)
      __builtin_prefetch(next + (size_t)(fetched / 2) * ldc + (fetched % 2) * 16, 1, 3);
    for (size_t i = 0; i < ahead_step && ahead_at < ahead_lines; i++, ahead_at++)
      __builtin_prefetch(ahead + ahead_at * 64, 0, 2);
    const uint16_t *ra0 = a0 + (size_t)t * SET_ELEMS, *ra1 = a1 + (size_t)t * SET_ELEMS;
    const uint16_t *rb0 = b0 + (size_t)t * SET_ELEMS, *rb1 = b1 + (size_t)t * SET_ELEMS;
    /* the step's sets of the two row strips (ra0, ra1) and column strips (rb0, rb1), parts
     * at 0, 1, 2 tiles in; part 0 for the corrections (...f): made finite where the block
     * holds infinities. The comments name the parts: x of a, y of b. */
    const uint16_t *ra0f = finite[0] ? finite[0] + (size_t)t * TILE_ELEMS : ra0;
    const uint16_t *ra1f = finite[1] ? finite[1] + (size_t)t * TILE_ELEMS : ra1;
    const uint16_t *rb0f = finite[2] ? finite[2] + (size_t)t * TILE_ELEMS : rb0;
    const uint16_t *rb1f = finite[3] ? finite[3] + (size_t)t * TILE_ELEMS : rb1;
    bool part0_held = false; /* tiles 4, 5 hold the true part 0 of a */
    if (a_low) {
      _tile_loadd(6, rb0f, 64);
      _tile_loadd(7, rb1f, 64);
      _tile_loadd(4, ra0 + 2 * TILE_ELEMS, 64);
      _tile_loadd(5, ra1 + 2 * TILE_ELEMS, 64);
      DT_AMX_PRODUCTS; /* x2 rb0 */
      _tile_loadd(4, ra0 + TILE_ELEMS, 64);
      _tile_loadd(5, ra1 + TILE_ELEMS, 64);
      DT_AMX_PRODUCTS; /* ra1 rb0 */
      if (b_low) {
        _tile_loadd(6, rb0 + TILE_ELEMS, 64);
        _tile_loadd(7, rb1 + TILE_ELEMS, 64);
        DT_AMX_PRODUCTS; /* ra1 rb1 */
      }
    }
    if (b_low) {
      if (!a_low) {
        _tile_loadd(6, rb0 + TILE_ELEMS, 64);
        _tile_loadd(7, rb1 + TILE_ELEMS, 64);
      }
      _tile_loadd(4, ra0f, 64);
      _tile_loadd(5, ra1f, 64);
      DT_AMX_PRODUCTS; /* ra0 rb1 */
      _tile_loadd(6, rb0 + 2 * TILE_ELEMS, 64);
      _tile_loadd(7, rb1 + 2 * TILE_ELEMS, 64);
      DT_AMX_PRODUCTS; /* ra0 y2 */
      part0_held = !finite[0];
    }
    _tile_loadd(6, rb0, 64);
    _tile_loadd(7, rb1, 64);
    if (!part0_held) {
      _tile_loadd(4, ra0, 64);
      _tile_loadd(5, ra1, 64);
    }
    DT_AMX_PRODUCTS; /* ra0 rb0 */
  }
#undef DT_AMX_PRODUCTS
  _tile_stored(0, ct[0].at, (long)ct[0].ld * 4);
  _tile_stored(1, ct[1].at, (long)ct[1].ld * 4);
  _tile_stored(2, ct[2].at, (long)ct[2].ld * 4);
  _tile_stored(3, ct[3].at, (long)ct[3].ld * 4);
}

typedef struct tile_config {
  uint8_t palette, start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} tile_config;

AMX_TARGET static void run(bool ta, bool tb, int m, int n, int k, const float *a, int lda,
                           const float *b, int ldb, bool accumulate, float *c, int ldc,
                           uint16_t *apack, uint16_t *afinite, uint16_t *bpack, uint16_t *bfinite,
                           uint8_t *alow, uint8_t *blow) {
  int strips = (int)(((int64_t)m + 31) / 32 * 2), steps_all = (int)(((int64_t)k + 31) / 32);
  int col_strips = (int)(((int64_t)n + 31) / 32 * 2);
  tile_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int i = 0; i < 8; i++) {
    cfg.colsb[i] = 64;
    cfg.rows[i] = 16;
  }
  _tile_loadconfig(&cfg);
  float buf[4][256] __attribute__((aligned(64)));
  for (int t0 = 0; t0 < steps_all; t0 += KC_STEPS) {
    int steps = steps_all - t0 < KC_STEPS ? steps_all - t0 : KC_STEPS;
    c_mode mode = t0 > 0 ? C_ADD : accumulate ? C_LOAD : C_STORE;
    bool a_inf = pack_a(a, lda, ta, m, k, strips, t0, steps, apack, afinite, alow);
    for (int j0 = 0; j0 < col_strips; j0 += NC_STRIPS) {
      int j1 = j0 + NC_STRIPS < col_strips ? j0 + NC_STRIPS : col_strips;
      bool b_inf = pack_b(b, ldb, tb, k, n, j0, j1, t0, steps, bpack, bfinite, blow);
      for (int s = 0; s < strips; s += 2)
        for (int j = j0; j < j1; j += 2) {
          c_tile ct[4];
          for (int q = 0; q < 4; q++) {
            int si = s + q / 2, ji = j + q % 2;
            c_tile_open(&ct[q], c + (size_t)si * 16 * ldc + (size_t)ji * 16, ldc, m - si * 16,
                        n - ji * 16, mode, buf[q]);
          }
          size_t sa = (size_t)s * steps, sb = (size_t)(j - j0) * steps;
          const uint16_t *finite[4] = {
              a_inf ? afinite + sa * TILE_ELEMS : NULL,
              a_inf ? afinite + (sa + steps) * TILE_ELEMS : NULL,
              b_inf ? bfinite + sb * TILE_ELEMS : NULL,
              b_inf ? bfinite + (sb + steps) * TILE_ELEMS : NULL,
          };
          int ns = j + 2 < j1 ? s : s + 2, nj = j + 2 < j1 ? j + 2 : j0;
          /* the next row pair's part sets, an even share per call of this row pair */
          int pairs = (j1 - j0 + 1) / 2, call = (j - j0) / 2;
          size_t pair_bytes = 2 * STRIP_ELEMS(steps) * sizeof(uint16_t);
          size_t share = (pair_bytes + pairs - 1) / pairs;
          const char *ahead = (const char *)(apack + (s + 2) * STRIP_ELEMS(steps)) + call * share;
          size_t ahead_bytes = s + 2 < strips ? share : 0;
          int next_rows = ns * 16 < m ? (m - ns * 16 < 32 ? m - ns * 16 : 32) : 0;
          const float *next = next_rows ? c + (size_t)ns * 16 * ldc + (size_t)nj * 16 : NULL;
          kernel_2x2(apack + s * STRIP_ELEMS(steps), apack + (s + 1) * STRIP_ELEMS(steps),
                     bpack + (j - j0) * STRIP_ELEMS(steps),
                     bpack + (j + 1 - j0) * STRIP_ELEMS(steps), finite, steps, ct, mode == C_LOAD,
                     alow[s] | alow[s + 1], blow[j - j0] | blow[j + 1 - j0], next, next_rows, ldc,
                     ahead, ahead_bytes);
          for (int q = 0; q < 4; q++) c_tile_close(&ct[q]);
        }
    }
  }
  _tile_release();
}

bool dt__amx_sgemm(bool ta, bool tb, int m, int n, int k, const float *a, int lda, const float *b,
                   int ldb, bool accumulate, float *c, int ldc) {
  if (!dt__amx_usable() || m <= 0 || n <= 0 || k <= 0) return false;
  int rows = m < MC_ROWS ? m : MC_ROWS;
  size_t strips = ((size_t)rows + 31) / 32 * 2;
  size_t steps = ((size_t)k + 31) / 32 < KC_STEPS ? ((size_t)k + 31) / 32 : KC_STEPS;
  /* per k block: the row strips' and a column block's part sets, and their finite part 0 */
  size_t a_strips = strips, b_strips = NC_STRIPS;
  /* and a byte per strip: whether it holds values that are not bfloat16s */
  size_t elems = (a_strips + b_strips) * (STRIP_ELEMS(steps) + steps * TILE_ELEMS + 1);
  uint16_t *w = workspace_get(elems);
  if (!w) return false;
  uint16_t *afinite = w + a_strips * STRIP_ELEMS(steps);
  uint16_t *bpack = afinite + a_strips * steps * TILE_ELEMS;
  uint16_t *bfinite = bpack + b_strips * STRIP_ELEMS(steps);
  uint8_t *alow = (uint8_t *)(bfinite + b_strips * steps * TILE_ELEMS);
  for (int r0 = 0; r0 < m; r0 += MC_ROWS) {
    int r1 = m - r0 < MC_ROWS ? m : r0 + MC_ROWS;
    const float *ar = ta ? a + r0 : a + (size_t)r0 * lda;
    run(ta, tb, r1 - r0, n, k, ar, lda, b, ldb, accumulate, c + (size_t)r0 * ldc, ldc, w, afinite,
        bpack, bfinite, alow, alow + a_strips);
  }
  return true;
}

#else /* no AMX build */

bool dt__amx_usable(void) { return false; }
dt_status dt_set_cpu_amx(bool enabled) {
  (void)enabled;
  return DT_OK;
}
bool dt_get_cpu_amx(void) { return false; }
void dt__amx_set_enabled(bool on) { (void)on; }
bool dt__amx_worth(int m, int n, int k) {
  (void)m;
  (void)n;
  (void)k;
  return false;
}
bool dt__amx_sgemm(bool ta, bool tb, int m, int n, int k, const float *a, int lda, const float *b,
                   int ldb, bool accumulate, float *c, int ldc) {
  (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)a, (void)lda, (void)b, (void)ldb;
  (void)accumulate, (void)c, (void)ldc;
  return false;
}

#endif
