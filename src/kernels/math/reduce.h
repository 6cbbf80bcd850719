/*
 * The element steps of the reductions, written once for the CPU and CUDA
 * (core/host_device.h):
 *   - floating sums: Neumaier's compensated sum in double (dt_neumaier), and how two partial
 *     sums combine (a GPU block reduces in a tree: each thread's partial, then pairs);
 *   - max / min with their index: NaN propagates (the first NaN wins), otherwise the extreme,
 *     ties to the first (smallest) index. dt__extreme_better orders two candidates so that a
 *     tree of pairwise choices picks exactly the element a serial left-to-right scan picks,
 *     whatever the tree's shape: deterministic on any device.
 */
#ifndef DT_KERNELS_MATH_REDUCE_H
#define DT_KERNELS_MATH_REDUCE_H

#include "core/host_device.h"

/* A compensated sum: the exact sum is about sum + comp. */
typedef struct dt_neumaier {
  double sum, comp;
} dt_neumaier;

static inline DT_HOST_DEVICE void dt__neumaier_add(dt_neumaier *s, double v) {
  double t = s->sum + v;
  if (fabs(s->sum) >= fabs(v)) {
    s->comp += (s->sum - t) + v;
  } else {
    s->comp += (v - t) + s->sum;
  }
  s->sum = t;
}

/* Adds partial sum b into a (a tree's combine step). */
static inline DT_HOST_DEVICE void dt__neumaier_merge(dt_neumaier *a, dt_neumaier b) {
  dt__neumaier_add(a, b.sum);
  a->comp += b.comp;
}

static inline DT_HOST_DEVICE double dt__neumaier_result(dt_neumaier s) {
  /* Once the sum overflowed or met a NaN the compensation is meaningless (inf - inf). */
  return isfinite(s.sum) ? s.sum + s.comp : s.sum;
}

/* Whether candidate (v, i) replaces the current choice (best, best_i) of a max (is_max) or
 * min: a NaN beats any number and the earlier of two NaNs wins; otherwise the larger (the
 * smaller for min) value wins and equal values go to the earlier index. A serial scan that
 * starts from (-inf or +inf, index -1 treated as "none") and a pairwise tree give the same
 * choice. best_i < 0 means no choice yet. */
static inline DT_HOST_DEVICE int dt__extreme_better(int is_max, double v, int64_t i, double best,
                                                    int64_t best_i) {
  if (best_i < 0) return 1;
  int v_nan = v != v, b_nan = best != best;
  if (v_nan || b_nan) return v_nan && (!b_nan || i < best_i);
  if (v == best) return i < best_i;
  return is_max ? v > best : v < best;
}

/* The same for integers (no NaN). */
static inline DT_HOST_DEVICE int dt__extreme_better_i64(int is_max, int64_t v, int64_t i,
                                                        int64_t best, int64_t best_i) {
  if (best_i < 0) return 1;
  if (v == best) return i < best_i;
  return is_max ? v > best : v < best;
}

#endif /* DT_KERNELS_MATH_REDUCE_H */
