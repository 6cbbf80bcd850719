/* Helpers shared by the tests: tensors with known values, comparison against references. */
#ifndef DT_TESTS_REFERENCE_H
#define DT_TESTS_REFERENCE_H

#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdint.h>

#include "dtensor/dtensor.h"

/* A tensor of `dtype` with values from `values` (row-major, numel entries), via doubles. */
dt_tensor *ref_tensor(int ndim, const int64_t *shape, dt_dtype dtype, const double *values);

/* A tensor with deterministic pseudo-random values in [lo, hi) (integers for integer dtypes). */
dt_tensor *ref_random(int ndim, const int64_t *shape, dt_dtype dtype, double lo, double hi,
                      uint64_t seed);

/* A non-contiguous tensor with the same values as ref_random(shape): built transposed
 * (last two dims swapped) and transposed back through strides, so its strides are not
 * row-major. Needs ndim >= 2. */
dt_tensor *ref_random_strided(int ndim, const int64_t *shape, dt_dtype dtype, double lo, double hi,
                              uint64_t seed);

/* All elements as doubles (caller frees). */
double *ref_values(const dt_tensor *t);

/* Multi-index <-> flat row-major index. */
void ref_unravel(int64_t flat, int ndim, const int64_t *shape, int64_t *index);
int64_t ref_ravel(int ndim, const int64_t *shape, const int64_t *index);

/* Value of a broadcast operand at the output's multi-index. */
double ref_broadcast_get(const double *values, int ndim, const int64_t *shape, int out_ndim,
                         const int64_t *out_index);

/* Asserts t has this shape and dtype and its values are within atol + rtol*|expected| of
 * `expected` (NaNs must match NaNs). */
void ref_assert_close(const dt_tensor *t, int ndim, const int64_t *shape, dt_dtype dtype,
                      const double *expected, double rtol, double atol);

/* Asserts the last error message contains every one of the given substrings. */
void ref_assert_error_mentions(const char *a, const char *b);

#endif
