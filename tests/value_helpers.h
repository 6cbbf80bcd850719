/* Small value helpers shared by the multi-rank tests: a tensor of small integers, an
 * element-wise comparison with a tolerance, and full_tensor compared with the whole. They
 * run on rank threads, so they report through RANK_CHECK (comm_helpers.h). */
#ifndef DT_TESTS_VALUE_HELPERS_H
#define DT_TESTS_VALUE_HELPERS_H

#include <math.h>
#include <stdlib.h>

#include "comm_helpers.h"
#include "reference.h"

#ifndef OK
#define OK(call) cr_assert_eq((call), DT_OK, "%s: %s", #call, dt_last_error())
#endif

/* A tensor of shape `shape` whose element i is i % 7 + 1 (exact in every dtype). */
static inline dt_tensor *iota_t(int ndim, const int64_t *shape, dt_dtype dtype) {
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) n *= shape[d];
  double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; i++) v[i] = (double)(i % 7 + 1);
  dt_tensor *t = ref_tensor(ndim, shape, dtype, v);
  free(v);
  return t;
}

/* DT_OK when t and expect hold the same values (relative tolerance 1e-5). */
static inline dt_status same_values(const char *what, const dt_tensor *t, const dt_tensor *expect) {
  RANK_CHECK(dt_tensor_numel(t) == dt_tensor_numel(expect), "%s: %lld elements, expected %lld",
             what, (long long)dt_tensor_numel(t), (long long)dt_tensor_numel(expect));
  double *x = ref_values(t), *y = ref_values(expect);
  int64_t bad = -1;
  for (int64_t i = 0; i < dt_tensor_numel(t) && bad < 0; i++) {
    if (fabs(x[i] - y[i]) > 1e-5 * (1 + fabs(y[i]))) bad = i;
  }
  double got = bad >= 0 ? x[bad] : 0, want = bad >= 0 ? y[bad] : 0;
  free(x);
  free(y);
  RANK_CHECK(bad < 0, "%s: element %lld is %g, expected %g", what, (long long)bad, got, want);
  return DT_OK;
}

/* DT_OK when the distributed tensor t's full_tensor equals expect. */
static inline dt_status full_equals(const char *what, dt_tensor *t, const dt_tensor *expect) {
  dt_tensor *full = NULL;
  RANK_OK(dt_dist_full_tensor(t, &full));
  dt_status st = same_values(what, full, expect);
  dt_tensor_release(full);
  return st;
}

/* A 1-D f64 leaf of n <= 8 elements lo, lo + 0.25, ... that requires grad. */
static inline dt_tensor *leaf_f64(int64_t n, double lo) {
  double v[8];
  for (int64_t i = 0; i < n; i++) v[i] = lo + 0.25 * (double)i;
  dt_tensor *t = NULL;
  OK(dt_from_data(v, 1, &n, DT_F64, &t));
  OK(dt_tensor_set_requires_grad(t, true));
  return t;
}

/* Asserts (main thread) that a's gradient holds want[0..n) to 1e-9. */
static inline void assert_grad(dt_tensor *a, const double *want, int64_t n, const char *what) {
  dt_tensor *g = NULL;
  OK(dt_tensor_grad(a, &g));
  cr_assert(g, "%s: no gradient", what);
  double *v = ref_values(g);
  for (int64_t i = 0; i < n; i++)
    cr_assert(fabs(v[i] - want[i]) < 1e-9, "%s: grad[%lld] = %g, expected %g", what, (long long)i,
              v[i], want[i]);
  free(v);
  dt_tensor_release(g);
}

#endif
