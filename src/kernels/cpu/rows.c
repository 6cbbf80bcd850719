/* Float32 row primitives (see rows.h). Each loop is its own small function so that gcc
 * vectorizes it; the blocked sums share one shape: lanes over a block, block sums into
 * totals, totals added pairwise. */
#include "kernels/cpu/rows.h"

#include "kernels/cpu/vmath.h"

#define LANES 64
#define BLOCK 1024

static inline float add_lanes(float *v) {
  for (int w = LANES / 2; w > 0; w /= 2)
    for (int k = 0; k < w; k++) v[k] += v[k + w];
  return v[0];
}

/* The maximum through integer keys: a float's bits with the magnitude bits flipped when the
 * sign is set order as signed integers as the floats do (-0 below +0), and an integer
 * maximum vectorizes where a float one with NaN semantics does not (gcc 12 keeps "v > m ?
 * v : m" scalar without -ffinite-math-only). NaN is found by the largest magnitude bits,
 * also an integer maximum. */
static inline int32_t order_key(int32_t bits) { return bits ^ ((bits >> 31) & 0x7fffffff); }

DT_VECTOR_CLONES float dt__row_max_f32(const float *x, int64_t n) {
  int32_t m = order_key((int32_t)dt__f32_to_bits(-INFINITY));
  uint32_t mag = 0;
  for (int64_t i = 0; i < n; i++) {
    int32_t b = (int32_t)dt__f32_to_bits(x[i]), key = order_key(b);
    m = key > m ? key : m;
    uint32_t a = (uint32_t)b & 0x7fffffffu;
    mag = a > mag ? a : mag;
  }
  return mag > 0x7f800000u ? NAN : dt__bits_to_f32((uint32_t)order_key(m));
}

/* Blocked sum of term(i) over [0, n): the body of every sum below. */
#define BLOCKED_SUM(n, term)                                                                       \
  float total_[LANES] = {0};                                                                       \
  for (int64_t b_ = 0; b_ < (n); b_ += BLOCK) {                                                    \
    int64_t e_ = (n)-b_ < BLOCK ? (n) : b_ + BLOCK, i = b_;                                        \
    float acc_[LANES] = {0};                                                                       \
    for (; i + LANES <= e_; i += LANES)                                                            \
      for (int k_ = 0; k_ < LANES; k_++) {                                                         \
        int64_t j = i + k_;                                                                        \
        acc_[k_] += (term);                                                                        \
      }                                                                                            \
    for (; i < e_; i++) {                                                                          \
      int64_t j = i;                                                                               \
      acc_[0] += (term);                                                                           \
    }                                                                                              \
    for (int k_ = 0; k_ < LANES; k_++) total_[k_] += acc_[k_];                                     \
  }                                                                                                \
  return add_lanes(total_)

DT_VECTOR_CLONES float dt__row_sum_f32(const float *x, int64_t n) { BLOCKED_SUM(n, x[j]); }

DT_VECTOR_CLONES float dt__row_dot_f32(const float *a, const float *b, int64_t n) {
  BLOCKED_SUM(n, a[j] * b[j]);
}

DT_VECTOR_CLONES float dt__row_sq_dev_sum_f32(const float *x, float mean, int64_t n) {
  BLOCKED_SUM(n, (x[j] - mean) * (x[j] - mean));
}

DT_VECTOR_CLONES void dt__row_norm_grad_sums_f32(const float *g, const float *w, const float *x,
                                                 float mean, int64_t n, float *sums) {
  float ta[LANES] = {0}, tb[LANES] = {0};
  for (int64_t b = 0; b < n; b += BLOCK) {
    int64_t e = n - b < BLOCK ? n : b + BLOCK, i = b;
    float a[LANES] = {0}, c[LANES] = {0};
    for (; i + LANES <= e; i += LANES)
      for (int k = 0; k < LANES; k++) {
        float gy = g[i + k] * w[i + k];
        a[k] += gy;
        c[k] += gy * (x[i + k] - mean);
      }
    for (; i < e; i++) {
      float gy = g[i] * w[i];
      a[0] += gy;
      c[0] += gy * (x[i] - mean);
    }
    for (int k = 0; k < LANES; k++) ta[k] += a[k], tb[k] += c[k];
  }
  sums[0] = add_lanes(ta);
  sums[1] = add_lanes(tb);
}

DT_VECTOR_CLONES static float exp_sum_only(const float *x, float m, int64_t n) {
  BLOCKED_SUM(n, dt__exp_f32(x[j] - m));
}

/* exp stored and summed in one pass (the term's assignment is the store). */
DT_VECTOR_CLONES static float exp_store_sum(const float *x, float m, float *y, int64_t n) {
  BLOCKED_SUM(n, y[j] = dt__exp_f32(x[j] - m));
}

float dt__row_exp_sum_f32(const float *x, float m, float *y, int64_t n) {
  return y ? exp_store_sum(x, m, y, n) : exp_sum_only(x, m, n);
}

/* ---- softmax over packed rows --------------------------------------------------------------- */

/* The keys' maximum (dt__row_max_f32's order) without its NaN pass: a NaN with the sign clear
 * orders above +inf and becomes the maximum, one with the sign set below -inf and is passed
 * over; either way the softmax's exp and sum turn NaN, as they should. */
DT_VECTOR_INLINE float row_key_max(const float *x, int64_t n) {
  int32_t m = order_key((int32_t)dt__f32_to_bits(-INFINITY));
  for (int64_t i = 0; i < n; i++) {
    int32_t key = order_key((int32_t)dt__f32_to_bits(x[i]));
    m = key > m ? key : m;
  }
  return dt__bits_to_f32((uint32_t)order_key(m));
}

DT_VECTOR_INLINE float row_exp_store_sum(const float *x, float m, float *y, int64_t n) {
  BLOCKED_SUM(n, y[j] = dt__exp_nonpositive_f32(x[j] - m));
}

DT_VECTOR_CLONES void dt__rows_softmax_f32(const float *x, float *y, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; r++) {
    const float *xr = x + r * n;
    float *yr = y + r * n;
    float inv = 1.0f / row_exp_store_sum(xr, row_key_max(xr, n), yr, n);
    for (int64_t i = 0; i < n; i++) yr[i] *= inv;
  }
}
