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
 * where, masked_fill, fill. */
#define DT_OPS_POINTWISE(X)                                                                    \
  X(ADD, "add.Tensor", COMPUTE, 2, dt__infer_binary, dt__kernel_binary,                       \
    "add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor")                      \
  X(ADD_, "add_.Tensor", INPLACE, 2, dt__infer_binary_inplace, dt__kernel_binary_inplace,     \
    "add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)")

/* Reductions: sum, mean, max, min, amax, amin, argmax. */
#define DT_OPS_REDUCTION(X)

/* Matrix products through CBLAS. addmm: beta -> scalars[0], alpha -> scalars[1]; linear's
 * bias is inputs[2] and may be NULL. */
#define DT_OPS_MATRIX(X)                                                                       \
  X(MM, "mm", COMPUTE, 2, dt__infer_mm, dt__kernel_mm, "mm(Tensor self, Tensor mat2) -> Tensor") \
  X(BMM, "bmm", COMPUTE, 2, dt__infer_bmm, dt__kernel_mm,                                       \
    "bmm(Tensor self, Tensor mat2) -> Tensor")                                                 \
  X(MATMUL, "matmul", COMPUTE, 2, dt__infer_matmul, dt__kernel_matmul,                         \
    "matmul(Tensor self, Tensor other) -> Tensor")                                             \
  X(ADDMM, "addmm", COMPUTE, 3, dt__infer_addmm, dt__kernel_addmm,                             \
    "addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor") \
  X(LINEAR, "linear", COMPUTE, 2, dt__infer_linear, dt__kernel_linear,                         \
    "linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor")

/* Neural-network ops: embedding, softmax, log_softmax, layer_norm, batch_norm, cat, stack. */
#define DT_OPS_NN(X)                                                                           \
  X(EMBEDDING, "embedding", COMPUTE, 2, dt__infer_embedding, dt__kernel_embedding,             \
    "embedding(Tensor weight, Tensor indices) -> Tensor")                                      \
  X(CAT, "cat", COMPUTE, 0, dt__infer_cat, dt__kernel_cat,                                     \
    "cat(Tensor[] tensors, int dim=0) -> Tensor")                                              \
  X(STACK, "stack", COMPUTE, 0, dt__infer_stack, dt__kernel_stack,                             \
    "stack(Tensor[] tensors, int dim=0) -> Tensor")

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
