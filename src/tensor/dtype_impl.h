/* Private interface of dtypes (dtype.c): the size table and element access through double.
 * dtype.c includes only this header, not tensor_impl.h, whose inline functions read the
 * size table: calls go from tensor_impl.h down to dtype.c, never back. */
#ifndef DT_DTYPE_IMPL_H
#define DT_DTYPE_IMPL_H

#include <stdbool.h>
#include <stddef.h>

#include "dtensor/tensor.h"

/* Element size table, indexed by dtype (no bounds check: dtype must be valid). */
extern const size_t dt__dtype_sizes[DT_DTYPE_COUNT];

static inline bool dt__dtype_valid(dt_dtype dtype) {
  return (int)dtype >= 0 && dtype < DT_DTYPE_COUNT;
}

/* Element access converting through double (any dtype), used by generic kernels and tests.
 * `p` points at the element. */
double dt__load_as_double(dt_dtype dtype, const void *p);
void dt__store_from_double(dt_dtype dtype, void *p, double value);

#endif /* DT_DTYPE_IMPL_H */
