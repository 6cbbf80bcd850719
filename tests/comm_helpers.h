/* Helpers for the multi-rank tests. Criterion's asserts must not run on a rank's thread, so
 * a rank reports a failed check by returning DT_ERR_INTERNAL with a message (RANK_CHECK);
 * the test body asserts on dt_comm_spawn's status, whose message names the failing rank. */
#ifndef DT_TESTS_COMM_HELPERS_H
#define DT_TESTS_COMM_HELPERS_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Private header: rank functions report failures through dt__error, and test tensors are built
 * with dt__tensor_view / dt__store_from_double. */
#include "core/core_impl.h"
#include "dtensor/dtensor.h"
#include "tensor/tensor_impl.h"

#define RANK_CHECK(cond, ...)                                                                      \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      char rank_check_msg_[512];                                                                   \
      snprintf(rank_check_msg_, sizeof rank_check_msg_, __VA_ARGS__);                              \
      return dt__error(DT_ERR_INTERNAL, "%s:%d: check '%s' failed: %s", __FILE__, __LINE__, #cond, \
                       rank_check_msg_);                                                           \
    }                                                                                              \
  } while (0)

/* Runs a status-returning call on a rank; a failure fails the rank with its message. */
#define RANK_OK(call)                                                                              \
  do {                                                                                             \
    dt_status rank_ok_status_ = (call);                                                            \
    if (rank_ok_status_ != DT_OK) {                                                                \
      char rank_ok_msg_[1024];                                                                     \
      snprintf(rank_ok_msg_, sizeof rank_ok_msg_, "%s", dt_last_error());                          \
      return dt__error(DT_ERR_INTERNAL, "%s:%d: %s returned %s: %s", __FILE__, __LINE__, #call,    \
                       dt_status_string(rank_ok_status_), rank_ok_msg_);                           \
    }                                                                                              \
  } while (0)

#define SPAWN_OK(world, fn, arg)                                                                   \
  do {                                                                                             \
    dt_status spawn_status_ = dt_comm_spawn((world), (fn), (arg));                                 \
    cr_assert_eq(spawn_status_, DT_OK, "world %d: %s", (int)(world), dt_last_error());             \
  } while (0)

static const dt_dtype all_dtypes[] = {DT_F32, DT_F64, DT_BF16, DT_F16,
                                      DT_I64, DT_I32, DT_U8,   DT_BOOL};
#define N_DTYPES ((int)(sizeof all_dtypes / sizeof all_dtypes[0]))

/* A value of rank r at element i that every dtype holds exactly (small integers). For prod
 * the values are 1 or 2 so that products of 8 ranks stay exact in bf16. */
static inline double test_value(dt_dtype dtype, dt_reduce_op op, int r, int64_t i) {
  int64_t k = (int64_t)r * 7 + i * 3 + 1;
  if (dtype == DT_BOOL)
    return op == DT_REDUCE_PROD || op == DT_REDUCE_MIN ? (k % 4 != 0) : (k % 3 == 0);
  if (op == DT_REDUCE_PROD) return (double)((r + i) % 2 + 1);
  if (dtype == DT_U8) return (double)(k % 9);
  return (double)(k % 9 - 4);
}

static inline dt_tensor *test_tensor(int ndim, const int64_t *shape, dt_dtype dtype,
                                     dt_reduce_op op, int rank) {
  dt_tensor *t = NULL;
  if (dt_empty(ndim, shape, dtype, &t) != DT_OK) return NULL;
  int64_t n = dt_tensor_numel(t);
  char *p = dt_tensor_data(t);
  size_t es = dt_dtype_size(dtype);
  for (int64_t i = 0; i < n; i++)
    dt__store_from_double(dtype, p + i * (int64_t)es, test_value(dtype, op, rank, i));
  return t;
}

/* Rows [start, start + length) of t as a view (dt_narrow belongs to another family). */
static inline dt_tensor *narrow_rows(dt_tensor *t, int64_t start, int64_t length) {
  int64_t shape[DT_MAX_DIMS];
  memcpy(shape, t->shape, sizeof shape);
  shape[0] = length;
  dt_tensor *view = NULL;
  dt__tensor_view(t, t->ndim, shape, t->strides, t->offset + start * t->strides[0], &view);
  return view;
}

/* A 1-D mesh over every rank of world (the caller destroys it). */
static inline dt_status mesh_1d(dt_comm *world, dt_mesh **mesh) {
  int size = dt_comm_size(world);
  return dt_mesh_create(world, 1, &size, NULL, mesh);
}

/* Copies src's bytes into dst (both contiguous, same size). */
static inline void copy_bytes(dt_tensor *dst, const dt_tensor *src) {
  memcpy(dt_tensor_data(dst), dt_tensor_data(src),
         (size_t)dt_tensor_numel(src) * dt_dtype_size(dt_tensor_dtype(src)));
}

static inline double tolerance(dt_dtype dtype) {
  return dtype == DT_BF16 ? 1e-2 : dtype == DT_F16 ? 1e-3 : dtype == DT_F32 ? 1e-6 : 0;
}

/* Compares t (any dtype) with expected values; returns DT_OK or an error naming the first
 * differing element. */
static inline dt_status compare(const dt_tensor *t, const double *expected, int64_t n,
                                const char *what) {
  if (dt_tensor_numel(t) != n) {
    return dt__error(DT_ERR_INTERNAL, "%s: %lld elements, expected %lld", what,
                     (long long)dt_tensor_numel(t), (long long)n);
  }
  double *got = malloc(sizeof *got * (size_t)(n ? n : 1));
  dt_tensor_to_doubles(t, got, n);
  double tol = tolerance(dt_tensor_dtype(t));
  for (int64_t i = 0; i < n; i++) {
    double e = expected[i];
    bool ok = (isnan(e) && isnan(got[i])) || fabs(got[i] - e) <= tol * fabs(e) + tol;
    if (!ok) {
      double g = got[i];
      free(got);
      return dt__error(DT_ERR_INTERNAL, "%s (%s): element %lld is %g, expected %g", what,
                       dt_dtype_name(dt_tensor_dtype(t)), (long long)i, g, e);
    }
  }
  free(got);
  return DT_OK;
}

#endif
