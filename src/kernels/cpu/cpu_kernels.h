/*
 * CPU kernels. They compute on tensors whose arguments the op layer has already validated
 * (shapes broadcast, dtypes supported, outputs allocated), so they only fail for reasons
 * found while computing (an out-of-range index, say).
 */
#ifndef DT_KERNELS_CPU_H
#define DT_KERNELS_CPU_H

#include "kernels/elementwise.h"
#include "tensor/element.h"
#include "tensor/tensor_impl.h"

/* ---- Integer element access --------------------------------------------------------------- */
/* Integer kernels compute in int64_t; these load and store one element of any dtype so that
 * integer and bool operands never round-trip through double (floats still do): tensor/element.h,
 * which the CUDA kernels share. */
static inline int64_t dt__cpu_load_i64(dt_dtype dtype, const char *p) {
  return dt__elem_load_i64(dtype, p);
}

/* Integers wrap to the dtype's width as C's unsigned conversions do; bool stores v != 0. */
static inline void dt__cpu_store_i64(dt_dtype dtype, char *p, int64_t v) {
  dt__elem_store_i64(dtype, p, v);
}

/* ---- Elementwise binary ----------------------------------------------------------------- */
/* out = a <op> b, with a and b broadcast to out's shape and converted to out's dtype (for
 * comparisons: compared in their promoted type, out is bool). out may alias a (in-place). */
dt_status dt__cpu_binary(dt_binary_op op, double alpha, const dt_tensor *a, const dt_tensor *b,
                         dt_tensor *out);

/* ---- Copies -------------------------------------------------------------------------------- */
/* dst = src converted to dst's dtype; src broadcasts to dst's shape; any strides. */
void dt__cpu_copy(dt_tensor *dst, const dt_tensor *src);

#endif /* DT_KERNELS_CPU_H */
