/*
 * CPU kernels. They compute on tensors whose arguments the op layer has already validated
 * (shapes broadcast, dtypes supported, outputs allocated), so they only fail for reasons
 * found while computing (an out-of-range index, say).
 */
#ifndef DT_KERNELS_CPU_H
#define DT_KERNELS_CPU_H

#include "tensor/tensor_impl.h"

/* ---- Elementwise binary ----------------------------------------------------------------- */
typedef enum dt_binary_op {
  DT_BINARY_ADD, /* a + alpha * b */
  DT_BINARY_SUB, /* a - alpha * b */
  DT_BINARY_MUL,
  DT_BINARY_DIV,
  DT_BINARY_MAXIMUM,
  DT_BINARY_MINIMUM,
  DT_BINARY_POW,
  DT_BINARY_EQ,
  DT_BINARY_NE,
  DT_BINARY_LT,
  DT_BINARY_LE,
  DT_BINARY_GT,
  DT_BINARY_GE,
} dt_binary_op;

/* out = a <op> b, with a and b broadcast to out's shape and converted to out's dtype (for
 * comparisons: compared in their promoted type, out is bool). out may alias a (in-place). */
dt_status dt__cpu_binary(dt_binary_op op, double alpha, const dt_tensor *a, const dt_tensor *b,
                         dt_tensor *out);

/* ---- Copies -------------------------------------------------------------------------------- */
/* dst = src converted to dst's dtype; src broadcasts to dst's shape; any strides. */
void dt__cpu_copy(dt_tensor *dst, const dt_tensor *src);

#endif /* DT_KERNELS_CPU_H */
