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
    "copy_(Tensor(a!) self, Tensor src) -> Tensor(a!)")                                        \
  X(VIEW, "view", VIEW, 1, dt__infer_view, dt__kernel_view,                                    \
    "view(Tensor(a) self, SymInt[] size) -> Tensor(a)")                                        \
  X(RESHAPE, "reshape", VIEW, 1, dt__infer_reshape, dt__kernel_reshape,                        \
    "reshape(Tensor(a) self, SymInt[] shape) -> Tensor(a)")                                    \
  X(FLATTEN, "flatten.using_ints", VIEW, 1, dt__infer_flatten, dt__kernel_reshape,             \
    "flatten.using_ints(Tensor(a) self, int start_dim=0, int end_dim=-1) -> Tensor(a)")        \
  X(PERMUTE, "permute", VIEW, 1, dt__infer_permute, dt__kernel_permute,                        \
    "permute(Tensor(a) self, int[] dims) -> Tensor(a)")                                        \
  X(EXPAND, "expand", VIEW, 1, dt__infer_expand, dt__kernel_expand,                            \
    "expand(Tensor(a) self, SymInt[] size, *, bool implicit=False) -> Tensor(a)")              \
  X(SQUEEZE, "squeeze", VIEW, 1, dt__infer_squeeze, dt__kernel_squeeze,                        \
    "squeeze(Tensor(a) self) -> Tensor(a)")                                                    \
  X(SQUEEZE_DIM, "squeeze.dim", VIEW, 1, dt__infer_squeeze_dim, dt__kernel_squeeze,            \
    "squeeze.dim(Tensor(a) self, int dim) -> Tensor(a)")                                       \
  X(UNSQUEEZE, "unsqueeze", VIEW, 1, dt__infer_unsqueeze, dt__kernel_unsqueeze,                \
    "unsqueeze(Tensor(a) self, int dim) -> Tensor(a)")                                         \
  X(NARROW, "narrow", VIEW, 1, dt__infer_narrow, dt__kernel_slice,                             \
    "narrow(Tensor(a) self, int dim, SymInt start, SymInt length) -> Tensor(a)")               \
  X(SLICE, "slice.Tensor", VIEW, 1, dt__infer_slice, dt__kernel_slice,                         \
    "slice.Tensor(Tensor(a) self, int dim=0, SymInt? start=None, SymInt? end=None, "           \
    "SymInt step=1) -> Tensor(a)")                                                             \
  X(SELECT, "select.int", VIEW, 1, dt__infer_select, dt__kernel_select,                        \
    "select.int(Tensor(a) self, int dim, SymInt index) -> Tensor(a)")                          \
  X(SPLIT, "split.Tensor", VIEW, 1, dt__infer_split, dt__kernel_split,                         \
    "split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) -> Tensor(a)[]")          \
  X(SPLIT_WITH_SIZES, "split_with_sizes", VIEW, 1, dt__infer_split_with_sizes, dt__kernel_split,\
    "split_with_sizes(Tensor(a -> *) self, SymInt[] split_sizes, int dim=0) -> Tensor(a)[]")   \
  X(CHUNK, "chunk", VIEW, 1, dt__infer_chunk, dt__kernel_split,                                \
    "chunk(Tensor(a -> *) self, int chunks, int dim=0) -> Tensor(a)[]")                        \
  X(TO, "to.dtype", VIEW, 1, dt__infer_to, dt__kernel_to,                                      \
    "to.dtype(Tensor(a) self, ScalarType dtype, bool non_blocking=False, bool copy=False, "    \
    "MemoryFormat? memory_format=None) -> Tensor(a)")

/* Factories that take a tensor's shape and dtype: *_like. */
#define DT_OPS_FACTORY(X)                                                                      \
  X(EMPTY_LIKE, "empty_like", COMPUTE, 1, dt__infer_same, dt__kernel_empty_like,               \
    "empty_like(Tensor self) -> Tensor")                                                       \
  X(ZEROS_LIKE, "zeros_like", COMPUTE, 1, dt__infer_same, dt__kernel_fill_like,                \
    "zeros_like(Tensor self) -> Tensor")                                                       \
  X(ONES_LIKE, "ones_like", COMPUTE, 1, dt__infer_same, dt__kernel_fill_like,                  \
    "ones_like(Tensor self) -> Tensor")                                                        \
  X(FULL_LIKE, "full_like", COMPUTE, 1, dt__infer_full_like, dt__kernel_fill_like,             \
    "full_like(Tensor self, Scalar fill_value) -> Tensor")

#define DT_OP_LIST(X)                                                                          \
  DT_OPS_POINTWISE(X)                                                                          \
  DT_OPS_REDUCTION(X)                                                                          \
  DT_OPS_MATRIX(X)                                                                             \
  DT_OPS_NN(X)                                                                                 \
  DT_OPS_VIEW(X)                                                                               \
  DT_OPS_FACTORY(X)

#endif /* DT_OP_LIST_H */
