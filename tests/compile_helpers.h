/* Helpers for the dt_compile tests: a bitwise comparison of two tensors, the ramp inputs the
 * compiled and eager calls share, and the whole of a distributed result. */
#ifndef DT_TESTS_COMPILE_HELPERS_H
#define DT_TESTS_COMPILE_HELPERS_H

#include <stdbool.h>
#include <string.h>

#include "dtensor/dtensor.h"

/* Same dtype, shape and bytes (false when either is NULL). Compared under no_grad:
 * dt_contiguous of a tensor that requires grad would be recorded. */
static inline bool bitwise_equal(dt_tensor *a, dt_tensor *b) {
  if (!a || !b) return false;
  bool mode = dt_grad_mode_set(false);
  dt_tensor *ca = NULL, *cb = NULL;
  bool eq = !dt_contiguous(a, &ca) && !dt_contiguous(b, &cb);
  eq = eq && dt_tensor_dtype(ca) == dt_tensor_dtype(cb) && dt_tensor_ndim(ca) == dt_tensor_ndim(cb);
  for (int d = 0; eq && d < dt_tensor_ndim(ca); d++)
    eq = dt_tensor_shape(ca)[d] == dt_tensor_shape(cb)[d];
  if (eq) {
    size_t bytes = (size_t)dt_tensor_numel(ca) * dt_dtype_size(dt_tensor_dtype(ca));
    eq = bytes == 0 || memcmp(dt_tensor_data(ca), dt_tensor_data(cb), bytes) == 0;
  }
  dt_tensor_release(ca);
  dt_tensor_release(cb);
  dt_grad_mode_set(mode);
  return eq;
}

/* A new f32 tensor with element i = ((37 i + 11 salt) mod 23) / 8 - 1.25 (exact), or NULL
 * when it cannot be made. */
static inline dt_tensor *ramp_f32(int ndim, const int64_t *shape, int salt) {
  dt_tensor *t = NULL;
  if (dt_empty(ndim, shape, DT_F32, &t)) return NULL;
  float *p = dt_tensor_data(t);
  for (int64_t i = 0; i < dt_tensor_numel(t); i++)
    p[i] = (float)((i * 37 + salt * 11) % 23) / 8.0f - 1.25f;
  return t;
}

/* The whole of t (gathered when distributed) as a new contiguous local tensor, made under
 * no_grad. The caller releases *out. */
static inline dt_status whole_contiguous(dt_tensor *t, dt_tensor **out) {
  bool mode = dt_grad_mode_set(false);
  dt_tensor *full = NULL;
  dt_status st = dt_tensor_is_distributed(t) ? dt_dist_full_tensor(t, &full)
                                             : (full = dt_tensor_retain(t), DT_OK);
  if (!st) st = dt_contiguous(full, out);
  dt_tensor_release(full);
  dt_grad_mode_set(mode);
  return st;
}

/* Whether the wholes of a and b (gathered when distributed) hold the same f32 bytes. */
static inline dt_status same_whole(dt_tensor *a, dt_tensor *b, bool *eq) {
  dt_tensor *ca = NULL, *cb = NULL;
  dt_status st = whole_contiguous(a, &ca);
  if (!st) st = whole_contiguous(b, &cb);
  *eq = !st && dt_tensor_numel(ca) == dt_tensor_numel(cb) &&
        memcmp(dt_tensor_data(ca), dt_tensor_data(cb), (size_t)dt_tensor_numel(ca) * 4) == 0;
  dt_tensor_release(ca);
  dt_tensor_release(cb);
  return st;
}

#endif
