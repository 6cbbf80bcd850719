/*
 * The element functions of the pointwise ops, named once for every device: the op list's
 * func column says which one an op applies (ops/op_list.h), and each device's kernels
 * (src/kernels/<device>/) implement them. Pure data: this header includes nothing.
 */
#ifndef DT_KERNELS_ELEMENTWISE_H
#define DT_KERNELS_ELEMENTWISE_H

/* Unary math. */
typedef enum dt_unary_op {
  DT_UNARY_NEG,
  DT_UNARY_ABS,
  DT_UNARY_RELU,
  DT_UNARY_EXP,
  DT_UNARY_LOG,
  DT_UNARY_SQRT,
  DT_UNARY_RSQRT,
  DT_UNARY_GELU,      /* exact: x * Phi(x) */
  DT_UNARY_GELU_TANH, /* PyTorch's approximate="tanh" */
  DT_UNARY_SILU,
  DT_UNARY_TANH,
  DT_UNARY_SIGMOID,
  DT_UNARY_SIN,
  DT_UNARY_COS,
} dt_unary_op;

/* Binary arithmetic and comparisons (comparisons last: dt_binary_op >= DT_BINARY_EQ). */
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

#endif /* DT_KERNELS_ELEMENTWISE_H */
