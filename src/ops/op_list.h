/*
 * THE op list. One X(...) line per op generates the op enum, the name and schema tables and
 * the dispatch table, so they cannot drift apart. The list is split into families only to
 * keep it readable; DT_OP_LIST concatenates them.
 *
 * X(id, name, kind, required, infer, kernel, schema)
 *   id        enum suffix: DT_OP_<id>
 *   name      ATen-style overload name, as traces and benchmarks print it
 *   kind      COMPUTE (dispatcher allocates outputs), VIEW (kernel makes outputs),
 *             INPLACE (kernel mutates inputs[0])
 *   required  how many leading inputs must be non-NULL
 *   infer     dt_status infer(dt_op_call *, dt_tensor_meta *): validate, compute out metas
 *   kernel    dt_status kernel(dt_op_call *): compute
 *   schema    the op's signature in ATen's schema language; attributes map to dt_op_call:
 *             Scalar alpha/other/value -> scalars[0]; int dim(s) -> ints; bool keepdim ->
 *             flags & DT_OP_FLAG_KEEPDIM; ScalarType dtype -> dtype.
 */
#ifndef DT_OP_LIST_H
#define DT_OP_LIST_H

/* Pointwise: unary, binary with broadcasting, scalar and in-place forms, comparisons,
 * where, masked_fill, fill. Scalar forms: Scalar other/exponent -> scalars[0], alpha ->
 * scalars[1]; infer stores the dtype the scalar is computed in into call->dtype. gelu:
 * approximate='tanh' -> flags & DT_OP_FLAG_GELU_TANH. */
#define DT_OPS_POINTWISE(X)                                                                        \
  X(NEG, "neg", COMPUTE, 1, dt__infer_unary, dt__kernel_unary, "neg(Tensor self) -> Tensor")       \
  X(ABS, "abs", COMPUTE, 1, dt__infer_unary, dt__kernel_unary, "abs(Tensor self) -> Tensor")       \
  X(EXP, "exp", COMPUTE, 1, dt__infer_unary, dt__kernel_unary, "exp(Tensor self) -> Tensor")       \
  X(LOG, "log", COMPUTE, 1, dt__infer_unary, dt__kernel_unary, "log(Tensor self) -> Tensor")       \
  X(SQRT, "sqrt", COMPUTE, 1, dt__infer_unary, dt__kernel_unary, "sqrt(Tensor self) -> Tensor")    \
  X(RSQRT, "rsqrt", COMPUTE, 1, dt__infer_unary, dt__kernel_unary, "rsqrt(Tensor self) -> Tensor") \
  X(RELU, "relu", COMPUTE, 1, dt__infer_unary, dt__kernel_unary, "relu(Tensor self) -> Tensor")    \
  X(GELU, "gelu", COMPUTE, 1, dt__infer_unary, dt__kernel_unary,                                   \
    "gelu(Tensor self, *, str approximate='none') -> Tensor")                                      \
  X(SILU, "silu", COMPUTE, 1, dt__infer_unary, dt__kernel_unary, "silu(Tensor self) -> Tensor")    \
  X(TANH, "tanh", COMPUTE, 1, dt__infer_unary, dt__kernel_unary, "tanh(Tensor self) -> Tensor")    \
  X(SIGMOID, "sigmoid", COMPUTE, 1, dt__infer_unary, dt__kernel_unary,                             \
    "sigmoid(Tensor self) -> Tensor")                                                              \
  X(ADD, "add.Tensor", COMPUTE, 2, dt__infer_binary, dt__kernel_binary,                            \
    "add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor")                          \
  X(SUB, "sub.Tensor", COMPUTE, 2, dt__infer_binary, dt__kernel_binary,                            \
    "sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor")                          \
  X(MUL, "mul.Tensor", COMPUTE, 2, dt__infer_binary, dt__kernel_binary,                            \
    "mul.Tensor(Tensor self, Tensor other) -> Tensor")                                             \
  X(DIV, "div.Tensor", COMPUTE, 2, dt__infer_binary, dt__kernel_binary,                            \
    "div.Tensor(Tensor self, Tensor other) -> Tensor")                                             \
  X(MAXIMUM, "maximum", COMPUTE, 2, dt__infer_binary, dt__kernel_binary,                           \
    "maximum(Tensor self, Tensor other) -> Tensor")                                                \
  X(MINIMUM, "minimum", COMPUTE, 2, dt__infer_binary, dt__kernel_binary,                           \
    "minimum(Tensor self, Tensor other) -> Tensor")                                                \
  X(POW, "pow.Tensor_Tensor", COMPUTE, 2, dt__infer_binary, dt__kernel_binary,                     \
    "pow.Tensor_Tensor(Tensor self, Tensor exponent) -> Tensor")                                   \
  X(ADD_SCALAR, "add.Scalar", COMPUTE, 1, dt__infer_binary_scalar, dt__kernel_binary_scalar,       \
    "add.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor")                             \
  X(SUB_SCALAR, "sub.Scalar", COMPUTE, 1, dt__infer_binary_scalar, dt__kernel_binary_scalar,       \
    "sub.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor")                             \
  X(MUL_SCALAR, "mul.Scalar", COMPUTE, 1, dt__infer_binary_scalar, dt__kernel_binary_scalar,       \
    "mul.Scalar(Tensor self, Scalar other) -> Tensor")                                             \
  X(DIV_SCALAR, "div.Scalar", COMPUTE, 1, dt__infer_binary_scalar, dt__kernel_binary_scalar,       \
    "div.Scalar(Tensor self, Scalar other) -> Tensor")                                             \
  X(POW_SCALAR, "pow.Tensor_Scalar", COMPUTE, 1, dt__infer_binary_scalar,                          \
    dt__kernel_binary_scalar, "pow.Tensor_Scalar(Tensor self, Scalar exponent) -> Tensor")         \
  X(ADD_, "add_.Tensor", INPLACE, 2, dt__infer_binary_inplace, dt__kernel_binary_inplace,          \
    "add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)")                 \
  X(SUB_, "sub_.Tensor", INPLACE, 2, dt__infer_binary_inplace, dt__kernel_binary_inplace,          \
    "sub_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)")                 \
  X(MUL_, "mul_.Tensor", INPLACE, 2, dt__infer_binary_inplace, dt__kernel_binary_inplace,          \
    "mul_.Tensor(Tensor(a!) self, Tensor other) -> Tensor(a!)")                                    \
  X(DIV_, "div_.Tensor", INPLACE, 2, dt__infer_binary_inplace, dt__kernel_binary_inplace,          \
    "div_.Tensor(Tensor(a!) self, Tensor other) -> Tensor(a!)")                                    \
  X(ADD_SCALAR_, "add_.Scalar", INPLACE, 1, dt__infer_binary_scalar_inplace,                       \
    dt__kernel_binary_scalar_inplace,                                                              \
    "add_.Scalar(Tensor(a!) self, Scalar other, Scalar alpha=1) -> Tensor(a!)")                    \
  X(MUL_SCALAR_, "mul_.Scalar", INPLACE, 1, dt__infer_binary_scalar_inplace,                       \
    dt__kernel_binary_scalar_inplace, "mul_.Scalar(Tensor(a!) self, Scalar other) -> Tensor(a!)")  \
  X(FILL_, "fill_.Scalar", INPLACE, 1, dt__infer_fill_, dt__kernel_fill_,                          \
    "fill_.Scalar(Tensor(a!) self, Scalar value) -> Tensor(a!)")                                   \
  X(EQ, "eq.Tensor", COMPUTE, 2, dt__infer_binary, dt__kernel_binary,                              \
    "eq.Tensor(Tensor self, Tensor other) -> Tensor")                                              \
  X(NE, "ne.Tensor", COMPUTE, 2, dt__infer_binary, dt__kernel_binary,                              \
    "ne.Tensor(Tensor self, Tensor other) -> Tensor")                                              \
  X(LT, "lt.Tensor", COMPUTE, 2, dt__infer_binary, dt__kernel_binary,                              \
    "lt.Tensor(Tensor self, Tensor other) -> Tensor")                                              \
  X(LE, "le.Tensor", COMPUTE, 2, dt__infer_binary, dt__kernel_binary,                              \
    "le.Tensor(Tensor self, Tensor other) -> Tensor")                                              \
  X(GT, "gt.Tensor", COMPUTE, 2, dt__infer_binary, dt__kernel_binary,                              \
    "gt.Tensor(Tensor self, Tensor other) -> Tensor")                                              \
  X(GE, "ge.Tensor", COMPUTE, 2, dt__infer_binary, dt__kernel_binary,                              \
    "ge.Tensor(Tensor self, Tensor other) -> Tensor")                                              \
  X(EQ_SCALAR, "eq.Scalar", COMPUTE, 1, dt__infer_binary_scalar, dt__kernel_binary_scalar,         \
    "eq.Scalar(Tensor self, Scalar other) -> Tensor")                                              \
  X(NE_SCALAR, "ne.Scalar", COMPUTE, 1, dt__infer_binary_scalar, dt__kernel_binary_scalar,         \
    "ne.Scalar(Tensor self, Scalar other) -> Tensor")                                              \
  X(LT_SCALAR, "lt.Scalar", COMPUTE, 1, dt__infer_binary_scalar, dt__kernel_binary_scalar,         \
    "lt.Scalar(Tensor self, Scalar other) -> Tensor")                                              \
  X(LE_SCALAR, "le.Scalar", COMPUTE, 1, dt__infer_binary_scalar, dt__kernel_binary_scalar,         \
    "le.Scalar(Tensor self, Scalar other) -> Tensor")                                              \
  X(GT_SCALAR, "gt.Scalar", COMPUTE, 1, dt__infer_binary_scalar, dt__kernel_binary_scalar,         \
    "gt.Scalar(Tensor self, Scalar other) -> Tensor")                                              \
  X(GE_SCALAR, "ge.Scalar", COMPUTE, 1, dt__infer_binary_scalar, dt__kernel_binary_scalar,         \
    "ge.Scalar(Tensor self, Scalar other) -> Tensor")                                              \
  X(WHERE, "where.self", COMPUTE, 3, dt__infer_where, dt__kernel_where,                            \
    "where.self(Tensor condition, Tensor self, Tensor other) -> Tensor")                           \
  X(MASKED_FILL, "masked_fill.Scalar", COMPUTE, 2, dt__infer_masked_fill, dt__kernel_masked_fill,  \
    "masked_fill.Scalar(Tensor self, Tensor mask, Scalar value) -> Tensor")

/* Reductions: sum, mean, max, min, amax, amin, argmax. */
#define DT_OPS_REDUCTION(X)

/* Matrix products through CBLAS. */
#define DT_OPS_MATRIX(X)

/* Neural-network ops: embedding, softmax, log_softmax, layer_norm, batch_norm, cat, stack. */
#define DT_OPS_NN(X)

/* Views, reshapes, copies and conversions. */
#define DT_OPS_VIEW(X)                                                                         \
  X(TRANSPOSE, "transpose.int", VIEW, 1, dt__infer_transpose, dt__kernel_transpose,           \
    "transpose.int(Tensor(a) self, int dim0, int dim1) -> Tensor(a)")                          \
  X(DETACH, "detach", VIEW, 1, dt__infer_same, dt__kernel_detach,                              \
    "detach(Tensor(a) self) -> Tensor(a)")                                                     \
  X(CONTIGUOUS, "contiguous", VIEW, 1, dt__infer_same, dt__kernel_contiguous,                  \
    "contiguous(Tensor(a) self) -> Tensor(a)")                                                 \
  X(CLONE, "clone", COMPUTE, 1, dt__infer_same, dt__kernel_clone, "clone(Tensor self) -> Tensor") \
  X(COPY_, "copy_", INPLACE, 2, dt__infer_copy_, dt__kernel_copy_,                             \
    "copy_(Tensor(a!) self, Tensor src) -> Tensor(a!)")

/* Factories that take a tensor's shape and dtype: *_like. */
#define DT_OPS_FACTORY(X)

#define DT_OP_LIST(X)                                                                          \
  DT_OPS_POINTWISE(X)                                                                          \
  DT_OPS_REDUCTION(X)                                                                          \
  DT_OPS_MATRIX(X)                                                                             \
  DT_OPS_NN(X)                                                                                 \
  DT_OPS_VIEW(X)                                                                               \
  DT_OPS_FACTORY(X)

#endif /* DT_OP_LIST_H */
