/*
 * CPU kernels of the pointwise family beyond dt__cpu_binary (declared in cpu_kernels.h):
 * unary math, binary ops with a scalar operand, where, masked_fill and fill. Like every CPU
 * kernel they trust the op layer's validation: shapes broadcast, dtypes are supported and
 * outputs are allocated.
 */
#ifndef DT_KERNELS_CPU_POINTWISE_H
#define DT_KERNELS_CPU_POINTWISE_H

#include "kernels/cpu/cpu_kernels.h"

/* ---- Unary ------------------------------------------------------------------------------ */
/* True for the ops that also take integer dtypes (neg, abs, relu). */
static inline bool dt__unary_takes_integers(dt_unary_op op) { return op <= DT_UNARY_RELU; }

/* out = op(a); out has a's shape and dtype (a floating dtype unless
 * dt__unary_takes_integers(op)); a may have any strides. out may alias a. */
void dt__cpu_unary(dt_unary_op op, const dt_tensor *a, dt_tensor *out);

/* out = g * gelu'(x) (the tanh approximation's derivative when `tanh_form`); g and x of one
 * floating dtype broadcast to out's shape, which has that dtype. Contiguous float32 runs
 * vmath.h's normal CDF and density in one pass; other layouts and dtypes compute in double. */
void dt__cpu_gelu_backward(bool tanh_form, const dt_tensor *g, const dt_tensor *x, dt_tensor *out);

/* ---- Binary with a scalar operand ----------------------------------------------------- */
/* out = a <op> s, the scalar held in scalar_dtype (the dtype the op layer chose so that the
 * computation matches PyTorch's scalar rules) and broadcast to every element without any
 * allocation. out may alias a. */
void dt__cpu_binary_scalar(dt_binary_op op, double alpha, const dt_tensor *a, double s,
                           dt_dtype scalar_dtype, dt_tensor *out);

/* ---- Selection and filling ------------------------------------------------------------- */
/* out = cond ? a : b; cond (bool), a and b broadcast to out's shape and convert to out's
 * dtype. */
void dt__cpu_where(const dt_tensor *cond, const dt_tensor *a, const dt_tensor *b, dt_tensor *out);

/* out = mask ? value : a; mask (bool) broadcasts to a's shape, out has a's shape and dtype.
 * out may alias a. */
void dt__cpu_masked_fill(const dt_tensor *a, const dt_tensor *mask, double value, dt_tensor *out);

/* Every element of t = value converted to t's dtype; any strides. */
void dt__cpu_fill(dt_tensor *t, double value);

#endif /* DT_KERNELS_CPU_POINTWISE_H */
