/*
 * Reductions over any set of dims, for any strides.
 *
 * The input's dims are split into kept dims (which index the output, row-major) and reduced
 * dims; each class is coalesced on its own, so a contiguous input reduced over a suffix is
 * one row per output element. Floating sums accumulate in double with Neumaier compensation
 * (so a million float32 values sum to within an ulp of the exact result), integer sums in
 * wrapping 64-bit integers (exact, as PyTorch's int64 result), max/min compare floating
 * values in double (exact for every floating dtype) and integers in int64. The accumulation
 * and the choice of an extreme are kernels/math/reduce.h's, which the CUDA kernels share.
 *
 * Fast paths: a contiguous float32 input whose reduced dims form one block [A, R, B] runs
 * row loops (B == 1, eight double lanes) or column loops (B > 1, vectorizable over B).
 */
#include <math.h>

#include "core/core_impl.h"
#include "kernels/cpu/reduce.h"
#include "kernels/cpu/vmath.h"
#include "kernels/dims.h"
#include "kernels/math/reduce.h"

/* Running state of one output element's reduction. */
typedef struct acc {
  dt_neumaier sum; /* compensated (kernels/math/reduce.h) */
  uint64_t isum;   /* integer sums wrap like int64 arithmetic, without overflow UB */
  double best;
  int64_t ibest;
  int64_t best_index;
  int64_t seen; /* elements visited so far: the row-major position of the next one */
} acc;

typedef struct reduce_ctx {
  dt_cpu_reduce_kind kind;
  dt_dtype dtype;
  bool floating;
  dt_dims kept, reduced; /* strides in bytes (kernels/dims.h) */
  int64_t count;         /* reduced elements per output element */
} reduce_ctx;

static void acc_init(acc *s) {
  *s = (acc){0};
  s->best_index = -1; /* no choice yet (dt__extreme_better) */
}

/* One strided row of n elements of C type T converted by CONV; BODY sees `v` and `i`. */
#define ROW_LOOP(T, CONV, ...)                                                                     \
  for (int64_t i = 0; i < n; i++, p += stride) {                                                   \
    double v = (double)CONV(*(const T *)p);                                                        \
    __VA_ARGS__                                                                                    \
  }
#define ROW_LOOP_INT(T, ...)                                                                       \
  for (int64_t i = 0; i < n; i++, p += stride) {                                                   \
    int64_t v = (int64_t) * (const T *)p;                                                          \
    __VA_ARGS__                                                                                    \
  }
#define AS_IS(x) (x)
#define FLOAT_ROWS(...)                                                                            \
  switch (dtype) {                                                                                 \
  case DT_F32: ROW_LOOP(float, AS_IS, __VA_ARGS__) break;                                          \
  case DT_F64: ROW_LOOP(double, AS_IS, __VA_ARGS__) break;                                         \
  case DT_BF16: ROW_LOOP(uint16_t, dt_bf16_to_f32, __VA_ARGS__) break;                             \
  case DT_F16: ROW_LOOP(uint16_t, dt_f16_to_f32, __VA_ARGS__) break;                               \
  default: break;                                                                                  \
  }
#define INT_ROWS(...)                                                                              \
  switch (dtype) {                                                                                 \
  case DT_I64: ROW_LOOP_INT(int64_t, __VA_ARGS__) break;                                           \
  case DT_I32: ROW_LOOP_INT(int32_t, __VA_ARGS__) break;                                           \
  case DT_U8: ROW_LOOP_INT(uint8_t, __VA_ARGS__) break;                                            \
  case DT_BOOL: ROW_LOOP_INT(uint8_t, v = v != 0; __VA_ARGS__) break;                              \
  default: break;                                                                                  \
  }

static void reduce_row(const reduce_ctx *c, const char *p, int64_t stride, int64_t n, acc *s) {
  dt_dtype dtype = c->dtype;
  int64_t first = s->seen;
  switch (c->kind) {
  case DT_CPU_SUM:
  case DT_CPU_MEAN:
    if (c->floating) {
      FLOAT_ROWS(dt__neumaier_add(&s->sum, v);)
    } else {
      INT_ROWS(s->isum += (uint64_t)v;)
    }
    break;
  case DT_CPU_MAX:
  case DT_CPU_MIN: {
    int is_max = c->kind == DT_CPU_MAX;
    if (c->floating) {
      FLOAT_ROWS(if (dt__extreme_better(is_max, v, first + i, s->best, s->best_index)) {
        s->best = v;
        s->best_index = first + i;
      })
    } else {
      INT_ROWS(if (dt__extreme_better_i64(is_max, v, first + i, s->ibest, s->best_index)) {
        s->ibest = v;
        s->best_index = first + i;
      })
    }
    break;
  }
  }
  s->seen += n;
}

/* Visits every reduced element of one output element, innermost dim as a strided row. */
static void reduce_one(const reduce_ctx *c, const char *base, acc *s) {
  const dt_dims *r = &c->reduced;
  if (r->n == 0) {
    reduce_row(c, base, 0, 1, s);
    return;
  }
  int last = r->n - 1;
  int64_t index[DT_MAX_DIMS] = {0};
  for (;;) {
    const char *p = base;
    for (int d = 0; d < last; d++) p += index[d] * r->stride[d];
    reduce_row(c, p, r->stride[last], r->shape[last], s);
    int d = last - 1;
    for (; d >= 0; d--) {
      if (++index[d] < r->shape[d]) break;
      index[d] = 0;
    }
    if (d < 0) return;
  }
}

static void store_int(dt_dtype dtype, char *p, int64_t v) {
  switch (dtype) {
  case DT_I64: *(int64_t *)p = v; break;
  case DT_I32: *(int32_t *)p = (int32_t)v; break;
  case DT_U8: *(uint8_t *)p = (uint8_t)v; break;
  case DT_BOOL: *(uint8_t *)p = v != 0; break;
  default: dt__store_from_double(dtype, p, (double)v); break;
  }
}

static void finish(const reduce_ctx *c, const acc *s, dt_tensor *values, dt_tensor *indices,
                   int64_t o) {
  if (values) {
    char *dst = dt__tensor_base(values) + o * (int64_t)dt__dtype_sizes[values->dtype];
    switch (c->kind) {
    case DT_CPU_SUM:
      if (c->floating) {
        dt__store_from_double(values->dtype, dst, dt__neumaier_result(s->sum));
      } else {
        store_int(values->dtype, dst, (int64_t)s->isum);
      }
      break;
    case DT_CPU_MEAN:
      dt__store_from_double(values->dtype, dst, dt__neumaier_result(s->sum) / (double)c->count);
      break;
    case DT_CPU_MAX:
    case DT_CPU_MIN:
      if (c->floating) {
        dt__store_from_double(values->dtype, dst, s->best);
      } else {
        store_int(values->dtype, dst, s->ibest);
      }
      break;
    }
  }
  if (indices) ((int64_t *)dt__tensor_base(indices))[o] = s->best_index;
}

/* ---- Contiguous float32 fast paths ------------------------------------------------------ */

/* Eight independent double lanes keep double accuracy; lane j sums p[j], p[j + 8], ... and
 * the lanes are added last, in order, so every variant below gives the same bits. */
static double sum_f32_lanes_done(const float *p, int64_t i, int64_t n, const double *lanes) {
  double s = 0;
  for (; i < n; i++) s += p[i];
  for (int j = 0; j < 8; j++) s += lanes[j];
  return s;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* AVX: two 4-double accumulators hold the eight lanes. gcc 12 at -O2 keeps the portable loop
 * scalar (a cvtss2sd and an addsd per element), which read large arrays at ~0.6x memcpy
 * bandwidth; this one converts and adds four at a time and keeps up with memory. */
__attribute__((target("avx"))) static double sum_f32_row_avx(const float *p, int64_t n) {
  __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm_loadu_ps(p + i)));
    hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm_loadu_ps(p + i + 4)));
  }
  double lanes[8];
  _mm256_storeu_pd(lanes, lo);
  _mm256_storeu_pd(lanes + 4, hi);
  return sum_f32_lanes_done(p, i, n, lanes);
}
#endif

static double sum_f32_row(const float *p, int64_t n) {
#if defined(__x86_64__) && defined(__GNUC__)
  /* The check is one load of a flag libgcc filled at startup. */
  if (n >= 64 && __builtin_cpu_supports("avx")) return sum_f32_row_avx(p, n);
#endif
  double lanes[8] = {0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; j++) lanes[j] += p[i + j];
  }
  return sum_f32_lanes_done(p, i, n, lanes);
}

/* The select keeps a NaN once seen (nothing compares greater than it) and takes a new one. */
#define PICK_MAX(v, best) (((v) > (best) || (v) != (v)) ? (v) : (best))
#define PICK_MIN(v, best) (((v) < (best) || (v) != (v)) ? (v) : (best))

static float extreme_f32_row(const float *p, int64_t n, bool is_max) {
  float lanes[8];
  for (int j = 0; j < 8; j++) lanes[j] = is_max ? -INFINITY : INFINITY;
  int64_t i = 0;
  if (is_max) {
    for (; i + 8 <= n; i += 8) {
      for (int j = 0; j < 8; j++) lanes[j] = PICK_MAX(p[i + j], lanes[j]);
    }
  } else {
    for (; i + 8 <= n; i += 8) {
      for (int j = 0; j < 8; j++) lanes[j] = PICK_MIN(p[i + j], lanes[j]);
    }
  }
  float best = lanes[0];
  for (int j = 1; j < 8; j++) best = is_max ? PICK_MAX(lanes[j], best) : PICK_MIN(lanes[j], best);
  for (; i < n; i++) best = is_max ? PICK_MAX(p[i], best) : PICK_MIN(p[i], best);
  return best;
}

#define COLUMN_CHUNK 256

/* Reduces columns [c0, c0 + w) of [R, B] (row stride B, w <= COLUMN_CHUNK) into out, the
 * partial sums in a small stack buffer; compiled per vector width (DT_VECTOR_CLONES: each
 * column's additions are the same in every clone, so the same bits). */
DT_VECTOR_CLONES
static void reduce_f32_column_chunk(dt_cpu_reduce_kind kind, const float *restrict p, int64_t rows,
                                    int64_t cols, int64_t c0, int64_t w, float *restrict out) {
  if (kind == DT_CPU_SUM || kind == DT_CPU_MEAN) {
    /* 16 columns at a time down all the rows, their sums held in registers (a block of the
     * sums in memory was loaded and stored again for every row); each column still adds its
     * rows in order, in double. */
    double div = kind == DT_CPU_MEAN ? (double)rows : 1.0;
    int64_t j = 0;
    for (; j + 16 <= w; j += 16) {
      double sums[16] = {0};
      for (int64_t r = 0; r < rows; r++) {
        const float *restrict row = p + r * cols + c0 + j;
        for (int k = 0; k < 16; k++) sums[k] += row[k];
      }
      for (int k = 0; k < 16; k++) out[c0 + j + k] = (float)(sums[k] / div);
    }
    for (; j < w; j++) {
      double sum = 0;
      for (int64_t r = 0; r < rows; r++) sum += p[r * cols + c0 + j];
      out[c0 + j] = (float)(sum / div);
    }
  } else {
    float *o = out + c0;
    for (int64_t j = 0; j < w; j++) o[j] = p[c0 + j];
    for (int64_t r = 1; r < rows; r++) {
      const float *row = p + r * cols + c0;
      if (kind == DT_CPU_MAX) {
        for (int64_t j = 0; j < w; j++) o[j] = PICK_MAX(row[j], o[j]);
      } else {
        for (int64_t j = 0; j < w; j++) o[j] = PICK_MIN(row[j], o[j]);
      }
    }
  }
}

typedef struct columns_job {
  dt_cpu_reduce_kind kind;
  const float *p;
  int64_t rows, cols;
  float *out;
} columns_job;

static void columns_chunk(void *ctx, int64_t begin, int64_t end) {
  const columns_job *j = ctx;
  for (int64_t c = begin; c < end; c++) {
    int64_t c0 = c * COLUMN_CHUNK, w = j->cols - c0 < COLUMN_CHUNK ? j->cols - c0 : COLUMN_CHUNK;
    reduce_f32_column_chunk(j->kind, j->p, j->rows, j->cols, c0, w, j->out);
  }
}

/* Reduces [R, B] (row stride B) into out[B], COLUMN_CHUNK columns at a time; the chunks are
 * split over the intra-op pool (a linear's bias gradient: [B T, N] summed over its rows),
 * each computed by one thread, so 1 and N threads give the same bits. */
static void reduce_f32_columns(dt_cpu_reduce_kind kind, const float *p, int64_t rows, int64_t cols,
                               float *out) {
  columns_job j = {.kind = kind, .p = p, .rows = rows, .cols = cols, .out = out};
  int64_t chunks = (cols + COLUMN_CHUNK - 1) / COLUMN_CHUNK;
  int64_t per_chunk = rows * COLUMN_CHUNK, grain = DT_PARALLEL_GRAIN / per_chunk;
  dt__parallel_for(chunks, grain < 1 ? 1 : grain, columns_chunk, &j);
}

/* Splits a contiguous input into [A, R, B] when the reduced dims are one block. */
static bool block_split(const dt_tensor *a, uint32_t mask, int64_t *A, int64_t *R, int64_t *B) {
  int64_t seg[3] = {1, 1, 1}; /* kept before, reduced, kept after */
  int state = 0;              /* 0: in leading kept dims, 1: in reduced block, 2: after it */
  for (int d = 0; d < a->ndim; d++) {
    if (a->shape[d] == 1) continue;
    bool red = (mask >> d) & 1u;
    if (red) {
      if (state == 2) return false;
      state = 1;
      seg[1] *= a->shape[d];
    } else {
      if (state == 1) state = 2;
      seg[state == 0 ? 0 : 2] *= a->shape[d];
    }
  }
  *A = seg[0];
  *R = seg[1];
  *B = seg[2];
  return true;
}

static bool try_fast_f32(dt_cpu_reduce_kind kind, const dt_tensor *a, uint32_t mask,
                         dt_tensor *values, dt_tensor *indices) {
  if (a->dtype != DT_F32 || !values || values->dtype != DT_F32 || indices) return false;
  if (dt__tensor_numel(a) == 0 || !dt__is_contiguous(a->ndim, a->shape, a->strides)) return false;
  int64_t A, R, B;
  if (!block_split(a, mask, &A, &R, &B)) return false;
  const float *p = (const float *)dt__tensor_base(a);
  float *o = (float *)dt__tensor_base(values);
  for (int64_t i = 0; i < A; i++) {
    const float *block = p + i * R * B;
    if (B > 1) {
      reduce_f32_columns(kind, block, R, B, o + i * B);
    } else if (kind == DT_CPU_SUM) {
      o[i] = (float)sum_f32_row(block, R);
    } else if (kind == DT_CPU_MEAN) {
      o[i] = (float)(sum_f32_row(block, R) / (double)R);
    } else {
      o[i] = extreme_f32_row(block, R, kind == DT_CPU_MAX);
    }
  }
  return true;
}

/* ---- Entry point ------------------------------------------------------------------------ */

dt_status dt__cpu_reduce(dt_cpu_reduce_kind kind, const dt_tensor *a, uint32_t mask,
                         dt_tensor *values, dt_tensor *indices) {
  if (try_fast_f32(kind, a, mask, values, indices)) return DT_OK;
  reduce_ctx c = {.kind = kind, .dtype = a->dtype, .floating = dt_dtype_is_floating(a->dtype)};
  int64_t esize = (int64_t)dt__dtype_sizes[a->dtype];
  int64_t n_out;
  dt__dims_split(a->ndim, a->shape, a->strides, esize, mask, &c.kept, &c.reduced, &n_out, &c.count);
  if (n_out == 0) return DT_OK;
  const char *base = dt__tensor_base(a);
  int64_t index[DT_MAX_DIMS] = {0};
  for (int64_t o = 0; o < n_out; o++) {
    const char *p = base;
    for (int d = 0; d < c.kept.n; d++) p += index[d] * c.kept.stride[d];
    acc s;
    acc_init(&s);
    if (c.count > 0) reduce_one(&c, p, &s);
    finish(&c, &s, values, indices, o);
    for (int d = c.kept.n - 1; d >= 0; d--) {
      if (++index[d] < c.kept.shape[d]) break;
      index[d] = 0;
    }
  }
  return DT_OK;
}
