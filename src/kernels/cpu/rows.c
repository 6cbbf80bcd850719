/* Float32 row primitives (see rows.h). Each loop is its own small function so that gcc
 * vectorizes it; the blocked sums share one shape: lanes over a block, block sums into
 * totals, totals added pairwise. */
#include "kernels/cpu/rows.h"

#include "kernels/cpu/vmath.h"

#define LANES 16
#define BLOCK 1024

static inline float add_lanes(float *v) {
  for (int w = LANES / 2; w > 0; w /= 2)
    for (int k = 0; k < w; k++) v[k] += v[k + w];
  return v[0];
}

/* The maximum by lanes, NaN tracked in its own lanes: a select and an or per element, which
 * vectorize (the "v > m || v != v" of one comparison chain does not). */
DT_VECTOR_CLONES float dt__row_max_f32(const float *x, int64_t n) {
  float m[LANES];
  int nan[LANES] = {0};
  for (int k = 0; k < LANES; k++) m[k] = -INFINITY;
  int64_t i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int k = 0; k < LANES; k++) {
      float v = x[i + k];
      m[k] = v > m[k] ? v : m[k];
      nan[k] |= v != v;
    }
  for (; i < n; i++) {
    m[0] = x[i] > m[0] ? x[i] : m[0];
    nan[0] |= x[i] != x[i];
  }
  float r = m[0];
  int any_nan = nan[0];
  for (int k = 1; k < LANES; k++) {
    r = m[k] > r ? m[k] : r;
    any_nan |= nan[k];
  }
  return any_nan ? NAN : r;
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

DT_VECTOR_CLONES static float exp_sum_only(const float *x, float m, int64_t n) {
  BLOCKED_SUM(n, dt__exp_f32(x[j] - m));
}

DT_VECTOR_CLONES static void exp_store(const float *x, float m, float *y, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = dt__exp_f32(x[i] - m);
}

float dt__row_exp_sum_f32(const float *x, float m, float *y, int64_t n) {
  if (!y) return exp_sum_only(x, m, n);
  exp_store(x, m, y, n);
  return dt__row_sum_f32(y, n);
}
