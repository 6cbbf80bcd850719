/*
 * THE op list. One X(...) line per op generates the op enum, the name and schema tables and
 * the dispatch table, so they cannot drift apart. The list is split into families only to
 * keep it readable; DT_OP_LIST concatenates them.
 *
 * X(id, name, kind, required, infer, kernel, rule, shape, func, traits, backward, schema)
 *   id        enum suffix: DT_OP_<id>
 *   name      ATen-style overload name, as traces and benchmarks print it
 *   kind      COMPUTE (dispatcher allocates outputs), VIEW (kernel makes outputs),
 *             INPLACE (kernel mutates inputs[0])
 *   required  how many leading inputs must be non-NULL
 *   infer     dt_status infer(dt_op_call *, dt_tensor_meta *): validate, compute out metas
 *   kernel    dt_status kernel(dt_op_call *): the CPU kernel. src/kernels/cpu/ registers this
 *             column as the CPU's kernel table; another device registers its own table, indexed
 *             by the same op ids, from src/kernels/<device>/.
 *   rule      the sharding-rule family (DT_RULE_<rule>, src/distributed/rules.c): how placements
 *             propagate through the op on distributed tensors. REPLICATE says, explicitly,
 *             that the op runs only on replicated inputs.
 *   shape     the symbolic shape rule (DT_SHAPE_<shape>, src/compile/shape_rules.c): how
 *             compile writes the output dims as expressions of the input dims. SPECIALIZE
 *             says, explicitly, that there is none (compile guards the input sizes).
 *   func      the element function a pointwise op applies: a dt_unary_op or dt_binary_op
 *             (kernels/elementwise.h), which every device's kernel reads from the table;
 *             NO_FUNC for the other ops.
 *   traits    DT_TRAIT_* bits (ops/op_impl.h): linearity (which Partial(sum) inputs pass
 *             through), tuple output, a Tensor[] argument, and the facts the distributed
 *             path needs (row window, shard geometry, shape attributes of the global tensor),
 *             and NOT_DIFFERENTIABLE (autograd never records it: detach, comparisons, ...).
 *   backward  BACKWARD(x): the op's gradient formula dt__backward_x (src/autograd/backward_*.c,
 *             written with ops, so that it runs distributed like any op); NO_BACKWARD: none
 *             yet, and a backward that reaches the op fails naming it.
 *   schema    the op's signature in ATen's schema language; attributes map to dt_op_call:
 *             Scalar alpha/other/value -> scalars[0]; int dim(s) -> ints; bool keepdim ->
 *             flags & DT_OP_FLAG_KEEPDIM; ScalarType dtype -> dtype.
 */
#ifndef DT_OP_LIST_H
#define DT_OP_LIST_H

/* Pointwise: unary, binary with broadcasting, scalar and in-place forms, comparisons,
 * where, masked_fill, fill. Scalar forms: Scalar other/exponent -> scalars[0], alpha ->
 * scalars[1]; infer stores the dtype the scalar is computed in into call->dtype. gelu and
 * gelu_backward: approximate='tanh' -> flags & DT_OP_FLAG_GELU_TANH; gelu_backward (the
 * gradient of gelu in one pass: grad_output * gelu'(self)) is gelu's backward formula. */
#define DT_OPS_POINTWISE(X)                                                                        \
  X(NEG, "neg", COMPUTE, 1, dt__infer_unary, dt__kernel_unary, POINTWISE, SAME, DT_UNARY_NEG,      \
    DT_TRAIT_LINEAR, BACKWARD(neg), "neg(Tensor self) -> Tensor")                                  \
  X(ABS, "abs", COMPUTE, 1, dt__infer_unary, dt__kernel_unary, POINTWISE, SAME, DT_UNARY_ABS, 0,   \
    BACKWARD(abs), "abs(Tensor self) -> Tensor")                                                   \
  X(EXP, "exp", COMPUTE, 1, dt__infer_unary, dt__kernel_unary, POINTWISE, SAME, DT_UNARY_EXP,      \
    DT_TRAIT_MONOTONE | DT_TRAIT_SAVES_OUTPUT, BACKWARD(exp), "exp(Tensor self) -> Tensor")        \
  X(LOG, "log", COMPUTE, 1, dt__infer_unary, dt__kernel_unary, POINTWISE, SAME, DT_UNARY_LOG, 0,   \
    BACKWARD(log), "log(Tensor self) -> Tensor")                                                   \
  X(SQRT, "sqrt", COMPUTE, 1, dt__infer_unary, dt__kernel_unary, POINTWISE, SAME, DT_UNARY_SQRT,   \
    DT_TRAIT_SAVES_OUTPUT, BACKWARD(sqrt), "sqrt(Tensor self) -> Tensor")                          \
  X(RSQRT, "rsqrt", COMPUTE, 1, dt__infer_unary, dt__kernel_unary, POINTWISE, SAME,                \
    DT_UNARY_RSQRT, DT_TRAIT_SAVES_OUTPUT, BACKWARD(rsqrt), "rsqrt(Tensor self) -> Tensor")        \
  X(RELU, "relu", COMPUTE, 1, dt__infer_unary, dt__kernel_unary, POINTWISE, SAME, DT_UNARY_RELU,   \
    DT_TRAIT_MONOTONE | DT_TRAIT_SAVES_OUTPUT, BACKWARD(relu), "relu(Tensor self) -> Tensor")      \
  X(GELU, "gelu", COMPUTE, 1, dt__infer_unary, dt__kernel_unary, POINTWISE, SAME, DT_UNARY_GELU,   \
    0, BACKWARD(gelu), "gelu(Tensor self, *, str approximate='none') -> Tensor")                   \
  X(GELU_BACKWARD, "gelu_backward", COMPUTE, 2, dt__infer_gelu_backward, dt__kernel_gelu_backward, \
    POINTWISE, BROADCAST, NO_FUNC, DT_TRAIT_LINEAR_FIRST, NO_BACKWARD,                             \
    "gelu_backward(Tensor grad_output, Tensor self, *, str approximate='none') -> Tensor")         \
  X(SILU, "silu", COMPUTE, 1, dt__infer_unary, dt__kernel_unary, POINTWISE, SAME, DT_UNARY_SILU,   \
    0, BACKWARD(silu), "silu(Tensor self) -> Tensor")                                              \
  X(TANH, "tanh", COMPUTE, 1, dt__infer_unary, dt__kernel_unary, POINTWISE, SAME, DT_UNARY_TANH,   \
    DT_TRAIT_MONOTONE | DT_TRAIT_SAVES_OUTPUT, BACKWARD(tanh), "tanh(Tensor self) -> Tensor")      \
  X(SIGMOID, "sigmoid", COMPUTE, 1, dt__infer_unary, dt__kernel_unary, POINTWISE, SAME,            \
    DT_UNARY_SIGMOID, DT_TRAIT_MONOTONE | DT_TRAIT_SAVES_OUTPUT, BACKWARD(sigmoid),                \
    "sigmoid(Tensor self) -> Tensor")                                                              \
  X(SIN, "sin", COMPUTE, 1, dt__infer_unary, dt__kernel_unary, POINTWISE, SAME, DT_UNARY_SIN, 0,   \
    BACKWARD(sin), "sin(Tensor self) -> Tensor")                                                   \
  X(COS, "cos", COMPUTE, 1, dt__infer_unary, dt__kernel_unary, POINTWISE, SAME, DT_UNARY_COS, 0,   \
    BACKWARD(cos), "cos(Tensor self) -> Tensor")                                                   \
  X(ADD, "add.Tensor", COMPUTE, 2, dt__infer_binary, dt__kernel_binary, POINTWISE, BROADCAST,      \
    DT_BINARY_ADD, DT_TRAIT_LINEAR | DT_TRAIT_MONOTONE, BACKWARD(add_sub),                         \
    "add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor")                          \
  X(SUB, "sub.Tensor", COMPUTE, 2, dt__infer_binary, dt__kernel_binary, POINTWISE, BROADCAST,      \
    DT_BINARY_SUB, DT_TRAIT_LINEAR | DT_TRAIT_MONOTONE, BACKWARD(add_sub),                         \
    "sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor")                          \
  X(MUL, "mul.Tensor", COMPUTE, 2, dt__infer_binary, dt__kernel_binary, POINTWISE, BROADCAST,      \
    DT_BINARY_MUL, DT_TRAIT_LINEAR_EACH, BACKWARD(mul),                                            \
    "mul.Tensor(Tensor self, Tensor other) -> Tensor")                                             \
  X(DIV, "div.Tensor", COMPUTE, 2, dt__infer_binary, dt__kernel_binary, POINTWISE, BROADCAST,      \
    DT_BINARY_DIV, DT_TRAIT_LINEAR_FIRST | DT_TRAIT_SAVES_OUTPUT, BACKWARD(div),                   \
    "div.Tensor(Tensor self, Tensor other) -> Tensor")                                             \
  X(MAXIMUM, "maximum", COMPUTE, 2, dt__infer_binary, dt__kernel_binary, POINTWISE, BROADCAST,     \
    DT_BINARY_MAXIMUM, DT_TRAIT_MONOTONE, BACKWARD(maximum_minimum),                               \
    "maximum(Tensor self, Tensor other) -> Tensor")                                                \
  X(MINIMUM, "minimum", COMPUTE, 2, dt__infer_binary, dt__kernel_binary, POINTWISE, BROADCAST,     \
    DT_BINARY_MINIMUM, DT_TRAIT_MONOTONE, BACKWARD(maximum_minimum),                               \
    "minimum(Tensor self, Tensor other) -> Tensor")                                                \
  X(POW, "pow.Tensor_Tensor", COMPUTE, 2, dt__infer_binary, dt__kernel_binary, POINTWISE,          \
    BROADCAST, DT_BINARY_POW, DT_TRAIT_SAVES_OUTPUT, BACKWARD(pow),                                \
    "pow.Tensor_Tensor(Tensor self, Tensor exponent) -> Tensor")                                   \
  X(ADD_SCALAR, "add.Scalar", COMPUTE, 1, dt__infer_binary_scalar, dt__kernel_binary_scalar,       \
    POINTWISE, SAME, DT_BINARY_ADD, DT_TRAIT_MONOTONE, BACKWARD(pass),                             \
    "add.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor")                             \
  X(SUB_SCALAR, "sub.Scalar", COMPUTE, 1, dt__infer_binary_scalar, dt__kernel_binary_scalar,       \
    POINTWISE, SAME, DT_BINARY_SUB, DT_TRAIT_MONOTONE, BACKWARD(pass),                             \
    "sub.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor")                             \
  X(MUL_SCALAR, "mul.Scalar", COMPUTE, 1, dt__infer_binary_scalar, dt__kernel_binary_scalar,       \
    POINTWISE, SAME, DT_BINARY_MUL, DT_TRAIT_LINEAR, BACKWARD(by_scalar),                          \
    "mul.Scalar(Tensor self, Scalar other) -> Tensor")                                             \
  X(DIV_SCALAR, "div.Scalar", COMPUTE, 1, dt__infer_binary_scalar, dt__kernel_binary_scalar,       \
    POINTWISE, SAME, DT_BINARY_DIV, DT_TRAIT_LINEAR, BACKWARD(by_scalar),                          \
    "div.Scalar(Tensor self, Scalar other) -> Tensor")                                             \
  X(POW_SCALAR, "pow.Tensor_Scalar", COMPUTE, 1, dt__infer_binary_scalar,                          \
    dt__kernel_binary_scalar, POINTWISE, SAME, DT_BINARY_POW, 0, BACKWARD(pow_scalar),             \
    "pow.Tensor_Scalar(Tensor self, Scalar exponent) -> Tensor")                                   \
  X(ADD_, "add_.Tensor", INPLACE, 2, dt__infer_binary_inplace, dt__kernel_binary_inplace,          \
    POINTWISE, BROADCAST_INTO, DT_BINARY_ADD, DT_TRAIT_LINEAR, BACKWARD(add_sub),                  \
    "add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)")                 \
  X(SUB_, "sub_.Tensor", INPLACE, 2, dt__infer_binary_inplace, dt__kernel_binary_inplace,          \
    POINTWISE, BROADCAST_INTO, DT_BINARY_SUB, DT_TRAIT_LINEAR, BACKWARD(add_sub),                  \
    "sub_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)")                 \
  X(MUL_, "mul_.Tensor", INPLACE, 2, dt__infer_binary_inplace, dt__kernel_binary_inplace,          \
    POINTWISE, BROADCAST_INTO, DT_BINARY_MUL, DT_TRAIT_LINEAR_FIRST | DT_TRAIT_SAVES_OLD_SELF,     \
    BACKWARD(mul), "mul_.Tensor(Tensor(a!) self, Tensor other) -> Tensor(a!)")                     \
  X(DIV_, "div_.Tensor", INPLACE, 2, dt__infer_binary_inplace, dt__kernel_binary_inplace,          \
    POINTWISE, BROADCAST_INTO, DT_BINARY_DIV, DT_TRAIT_LINEAR_FIRST | DT_TRAIT_SAVES_OUTPUT,       \
    BACKWARD(div), "div_.Tensor(Tensor(a!) self, Tensor other) -> Tensor(a!)")                     \
  X(ADD_SCALAR_, "add_.Scalar", INPLACE, 1, dt__infer_binary_scalar_inplace,                       \
    dt__kernel_binary_scalar_inplace, POINTWISE, SAME, DT_BINARY_ADD, 0, BACKWARD(pass),           \
    "add_.Scalar(Tensor(a!) self, Scalar other, Scalar alpha=1) -> Tensor(a!)")                    \
  X(MUL_SCALAR_, "mul_.Scalar", INPLACE, 1, dt__infer_binary_scalar_inplace,                       \
    dt__kernel_binary_scalar_inplace, POINTWISE, SAME, DT_BINARY_MUL, DT_TRAIT_LINEAR,             \
    BACKWARD(by_scalar), "mul_.Scalar(Tensor(a!) self, Scalar other) -> Tensor(a!)")               \
  X(FILL_, "fill_.Scalar", INPLACE, 1, dt__infer_fill_, dt__kernel_fill_, POINTWISE, SPECIALIZE,   \
    NO_FUNC, 0, BACKWARD(fill_), "fill_.Scalar(Tensor(a!) self, Scalar value) -> Tensor(a!)")      \
  X(EQ, "eq.Tensor", COMPUTE, 2, dt__infer_binary, dt__kernel_binary, POINTWISE, BROADCAST,        \
    DT_BINARY_EQ, DT_TRAIT_NOT_DIFFERENTIABLE, NO_BACKWARD,                                        \
    "eq.Tensor(Tensor self, Tensor other) -> Tensor")                                              \
  X(NE, "ne.Tensor", COMPUTE, 2, dt__infer_binary, dt__kernel_binary, POINTWISE, BROADCAST,        \
    DT_BINARY_NE, DT_TRAIT_NOT_DIFFERENTIABLE, NO_BACKWARD,                                        \
    "ne.Tensor(Tensor self, Tensor other) -> Tensor")                                              \
  X(LT, "lt.Tensor", COMPUTE, 2, dt__infer_binary, dt__kernel_binary, POINTWISE, BROADCAST,        \
    DT_BINARY_LT, DT_TRAIT_NOT_DIFFERENTIABLE, NO_BACKWARD,                                        \
    "lt.Tensor(Tensor self, Tensor other) -> Tensor")                                              \
  X(LE, "le.Tensor", COMPUTE, 2, dt__infer_binary, dt__kernel_binary, POINTWISE, BROADCAST,        \
    DT_BINARY_LE, DT_TRAIT_NOT_DIFFERENTIABLE, NO_BACKWARD,                                        \
    "le.Tensor(Tensor self, Tensor other) -> Tensor")                                              \
  X(GT, "gt.Tensor", COMPUTE, 2, dt__infer_binary, dt__kernel_binary, POINTWISE, BROADCAST,        \
    DT_BINARY_GT, DT_TRAIT_NOT_DIFFERENTIABLE, NO_BACKWARD,                                        \
    "gt.Tensor(Tensor self, Tensor other) -> Tensor")                                              \
  X(GE, "ge.Tensor", COMPUTE, 2, dt__infer_binary, dt__kernel_binary, POINTWISE, BROADCAST,        \
    DT_BINARY_GE, DT_TRAIT_NOT_DIFFERENTIABLE, NO_BACKWARD,                                        \
    "ge.Tensor(Tensor self, Tensor other) -> Tensor")                                              \
  X(EQ_SCALAR, "eq.Scalar", COMPUTE, 1, dt__infer_binary_scalar, dt__kernel_binary_scalar,         \
    POINTWISE, SAME, DT_BINARY_EQ, DT_TRAIT_NOT_DIFFERENTIABLE, NO_BACKWARD,                       \
    "eq.Scalar(Tensor self, Scalar other) -> Tensor")                                              \
  X(NE_SCALAR, "ne.Scalar", COMPUTE, 1, dt__infer_binary_scalar, dt__kernel_binary_scalar,         \
    POINTWISE, SAME, DT_BINARY_NE, DT_TRAIT_NOT_DIFFERENTIABLE, NO_BACKWARD,                       \
    "ne.Scalar(Tensor self, Scalar other) -> Tensor")                                              \
  X(LT_SCALAR, "lt.Scalar", COMPUTE, 1, dt__infer_binary_scalar, dt__kernel_binary_scalar,         \
    POINTWISE, SAME, DT_BINARY_LT, DT_TRAIT_NOT_DIFFERENTIABLE, NO_BACKWARD,                       \
    "lt.Scalar(Tensor self, Scalar other) -> Tensor")                                              \
  X(LE_SCALAR, "le.Scalar", COMPUTE, 1, dt__infer_binary_scalar, dt__kernel_binary_scalar,         \
    POINTWISE, SAME, DT_BINARY_LE, DT_TRAIT_NOT_DIFFERENTIABLE, NO_BACKWARD,                       \
    "le.Scalar(Tensor self, Scalar other) -> Tensor")                                              \
  X(GT_SCALAR, "gt.Scalar", COMPUTE, 1, dt__infer_binary_scalar, dt__kernel_binary_scalar,         \
    POINTWISE, SAME, DT_BINARY_GT, DT_TRAIT_NOT_DIFFERENTIABLE, NO_BACKWARD,                       \
    "gt.Scalar(Tensor self, Scalar other) -> Tensor")                                              \
  X(GE_SCALAR, "ge.Scalar", COMPUTE, 1, dt__infer_binary_scalar, dt__kernel_binary_scalar,         \
    POINTWISE, SAME, DT_BINARY_GE, DT_TRAIT_NOT_DIFFERENTIABLE, NO_BACKWARD,                       \
    "ge.Scalar(Tensor self, Scalar other) -> Tensor")                                              \
  X(WHERE, "where.self", COMPUTE, 3, dt__infer_where, dt__kernel_where, POINTWISE, WHERE, NO_FUNC, \
    0, BACKWARD(where), "where.self(Tensor condition, Tensor self, Tensor other) -> Tensor")       \
  X(MASKED_FILL, "masked_fill.Scalar", COMPUTE, 2, dt__infer_masked_fill, dt__kernel_masked_fill,  \
    POINTWISE, SPECIALIZE, NO_FUNC, 0, BACKWARD(masked_fill),                                      \
    "masked_fill.Scalar(Tensor self, Tensor mask, Scalar value) -> Tensor")

/* Reductions: sum, mean, max, min, amax, amin, argmax. A dim list (int[1]? dim) arrives
 * borrowed in int_list and infer writes the normalized dims to ints (an empty list means
 * every dim); a single dim is ints[0]; argmax without a dim has n_ints == 0. The dtype=
 * attribute of sum/mean is not supported (always None). */
#define DT_OPS_REDUCTION(X)                                                                        \
  X(SUM, "sum", COMPUTE, 1, dt__infer_reduce, dt__kernel_reduce, REDUCTION, REDUCE, NO_FUNC, 0,    \
    BACKWARD(sum), "sum(Tensor self, *, ScalarType? dtype=None) -> Tensor")                        \
  X(SUM_DIM, "sum.dim_IntList", COMPUTE, 1, dt__infer_reduce, dt__kernel_reduce, REDUCTION,        \
    REDUCE, NO_FUNC, 0, BACKWARD(sum_dim),                                                         \
    "sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> " \
    "Tensor")                                                                                      \
  X(MEAN, "mean", COMPUTE, 1, dt__infer_reduce, dt__kernel_reduce, REDUCTION, REDUCE, NO_FUNC, 0,  \
    BACKWARD(mean), "mean(Tensor self, *, ScalarType? dtype=None) -> Tensor")                      \
  X(MEAN_DIM, "mean.dim", COMPUTE, 1, dt__infer_reduce, dt__kernel_reduce, REDUCTION, REDUCE,      \
    NO_FUNC, 0, BACKWARD(mean_dim),                                                                \
    "mean.dim(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor") \
  X(MAX, "max", COMPUTE, 1, dt__infer_reduce, dt__kernel_reduce, REDUCTION, REDUCE, NO_FUNC,       \
    DT_TRAIT_SAVES_OUTPUT, BACKWARD(extremum), "max(Tensor self) -> Tensor")                       \
  X(MIN, "min", COMPUTE, 1, dt__infer_reduce, dt__kernel_reduce, REDUCTION, REDUCE, NO_FUNC,       \
    DT_TRAIT_SAVES_OUTPUT, BACKWARD(extremum), "min(Tensor self) -> Tensor")                       \
  X(MAX_DIM, "max.dim", COMPUTE, 1, dt__infer_reduce, dt__kernel_reduce, REDUCTION, REDUCE,        \
    NO_FUNC, DT_TRAIT_TUPLE | DT_TRAIT_SAVES_OUTPUT, BACKWARD(extremum_dim),                       \
    "max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)")        \
  X(MIN_DIM, "min.dim", COMPUTE, 1, dt__infer_reduce, dt__kernel_reduce, REDUCTION, REDUCE,        \
    NO_FUNC, DT_TRAIT_TUPLE | DT_TRAIT_SAVES_OUTPUT, BACKWARD(extremum_dim),                       \
    "min.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)")        \
  X(AMAX, "amax", COMPUTE, 1, dt__infer_reduce, dt__kernel_reduce, REDUCTION, REDUCE, NO_FUNC,     \
    DT_TRAIT_SAVES_OUTPUT, BACKWARD(extremum),                                                     \
    "amax(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor")                              \
  X(AMIN, "amin", COMPUTE, 1, dt__infer_reduce, dt__kernel_reduce, REDUCTION, REDUCE, NO_FUNC,     \
    DT_TRAIT_SAVES_OUTPUT, BACKWARD(extremum),                                                     \
    "amin(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor")                              \
  X(ARGMAX, "argmax", COMPUTE, 1, dt__infer_reduce, dt__kernel_reduce, REDUCTION, REDUCE, NO_FUNC, \
    DT_TRAIT_NOT_DIFFERENTIABLE, NO_BACKWARD,                                                      \
    "argmax(Tensor self, int? dim=None, bool keepdim=False) -> Tensor")

/* Matrix products through CBLAS. addmm: beta -> scalars[0], alpha -> scalars[1]; linear's
 * bias is inputs[2] and may be NULL. */
#define DT_OPS_MATRIX(X)                                                                           \
  X(MM, "mm", COMPUTE, 2, dt__infer_mm, dt__kernel_mm, MATMUL, MM, NO_FUNC, 0, BACKWARD(mm),       \
    "mm(Tensor self, Tensor mat2) -> Tensor")                                                      \
  X(BMM, "bmm", COMPUTE, 2, dt__infer_bmm, dt__kernel_mm, MATMUL, SPECIALIZE, NO_FUNC, 0,          \
    BACKWARD(matmul), "bmm(Tensor self, Tensor mat2) -> Tensor")                                   \
  X(MATMUL, "matmul", COMPUTE, 2, dt__infer_matmul, dt__kernel_matmul, MATMUL, MATMUL, NO_FUNC, 0, \
    BACKWARD(matmul), "matmul(Tensor self, Tensor other) -> Tensor")                               \
  X(ADDMM, "addmm", COMPUTE, 3, dt__infer_addmm, dt__kernel_addmm, ADDMM, SPECIALIZE, NO_FUNC, 0,  \
    BACKWARD(addmm),                                                                               \
    "addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor")    \
  X(LINEAR, "linear", COMPUTE, 2, dt__infer_linear, dt__kernel_linear, LINEAR, LINEAR, NO_FUNC, 0, \
    BACKWARD(linear), "linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor")

/* Neural-network ops: embedding, softmax, log_softmax, layer_norm, batch_norm, cat, stack.
 * softmax: dim in ints[0]. layer_norm: inputs {input, weight?, bias?}, normalized_shape
 * borrowed in int_list (copied to ints by infer), eps in scalars[0]. batch_norm (inference):
 * inputs {input, running_mean, running_var, weight?, bias?}, eps in scalars[0];
 * batch_norm_training: inputs {input, weight?, bias?}, eps in scalars[0]. scatter_add (the
 * backward of embedding and max.dim): inputs {self, index, src}, dim in ints[0]. rms_norm:
 * layer_norm's arguments without bias. embedding_backward (embedding's gradient of the weight,
 * grad_output's rows added into zeros at the indices): weight gives only the output's
 * geometry, and its row window when sharded by rows. scaled_dot_product_attention: inputs {q [B, H,
 * T, E], k [B, Hk, S, E], v [B, Hk, S, Ev], attn_mask?}, ints[0] is_causal, scalars[0] the scale
 * (0: 1/sqrt(E)); outputs {out, logsumexp [B, H, T]}. Its backward: inputs {[grad, lse,
 * rowsum(grad * out)] joined on the last dim [B, H, T, Ev + 2], q, k, v, attn_mask?}.
 * The backward ops of softmax, log_softmax (grad_output and the forward's output, dim in
 * ints[0]), layer_norm and rms_norm (grad_output and the saved input, normalized_shape and
 * eps as the forward's): each one pass over its lines (src/kernels/cpu/norm_backward.c);
 * *_backward gives the input's gradient, *_backward_affine / _weight the parameters' (sums
 * over the leading dims). */
#define DT_OPS_NN(X)                                                                               \
  X(SOFTMAX, "softmax.int", COMPUTE, 1, dt__infer_softmax, dt__kernel_softmax, SOFTMAX, SAME,      \
    NO_FUNC, DT_TRAIT_SAVES_OUTPUT, BACKWARD(softmax),                                             \
    "softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor")                         \
  X(LOG_SOFTMAX, "log_softmax.int", COMPUTE, 1, dt__infer_softmax, dt__kernel_softmax, SOFTMAX,    \
    SAME, NO_FUNC, DT_TRAIT_SAVES_OUTPUT, BACKWARD(log_softmax),                                   \
    "log_softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor")                     \
  X(LAYER_NORM, "layer_norm", COMPUTE, 1, dt__infer_layer_norm, dt__kernel_layer_norm, LAYER_NORM, \
    LAYER_NORM, NO_FUNC, 0, BACKWARD(layer_norm),                                                  \
    "layer_norm(Tensor input, int[] normalized_shape, Tensor? weight=None, Tensor? bias=None, "    \
    "float eps=1e-05) -> Tensor")                                                                  \
  X(RMS_NORM, "rms_norm", COMPUTE, 1, dt__infer_layer_norm, dt__kernel_rms_norm, LAYER_NORM,       \
    LAYER_NORM, NO_FUNC, 0, BACKWARD(rms_norm),                                                    \
    "rms_norm(Tensor input, int[] normalized_shape, Tensor? weight=None, float eps=1e-05) -> "     \
    "Tensor")                                                                                      \
  X(SOFTMAX_BACKWARD, "softmax_backward", COMPUTE, 2, dt__infer_softmax_backward,                  \
    dt__kernel_softmax_backward, SOFTMAX_BACKWARD, SAME, NO_FUNC, 0, NO_BACKWARD,                  \
    "softmax_backward(Tensor grad_output, Tensor output, int dim) -> Tensor")                      \
  X(LOG_SOFTMAX_BACKWARD, "log_softmax_backward", COMPUTE, 2, dt__infer_softmax_backward,          \
    dt__kernel_softmax_backward, SOFTMAX_BACKWARD, SAME, NO_FUNC, 0, NO_BACKWARD,                  \
    "log_softmax_backward(Tensor grad_output, Tensor output, int dim) -> Tensor")                  \
  X(LAYER_NORM_BACKWARD, "layer_norm_backward", COMPUTE, 2, dt__infer_norm_backward,               \
    dt__kernel_norm_backward, NORM_BACKWARD, LAYER_NORM, NO_FUNC, 0, NO_BACKWARD,                  \
    "layer_norm_backward(Tensor grad_output, Tensor input, int[] normalized_shape, Tensor? "       \
    "weight=None, float eps=1e-05) -> Tensor")                                                     \
  X(RMS_NORM_BACKWARD, "rms_norm_backward", COMPUTE, 2, dt__infer_norm_backward,                   \
    dt__kernel_norm_backward, NORM_BACKWARD, LAYER_NORM, NO_FUNC, 0, NO_BACKWARD,                  \
    "rms_norm_backward(Tensor grad_output, Tensor input, int[] normalized_shape, Tensor? "         \
    "weight=None, float eps=1e-05) -> Tensor")                                                     \
  X(LAYER_NORM_BACKWARD_AFFINE, "layer_norm_backward_affine", COMPUTE, 2, dt__infer_norm_backward, \
    dt__kernel_norm_backward, NORM_AFFINE_GRAD, SPECIALIZE, NO_FUNC, DT_TRAIT_TUPLE, NO_BACKWARD,  \
    "layer_norm_backward_affine(Tensor grad_output, Tensor input, int[] normalized_shape, "        \
    "float eps=1e-05) -> (Tensor grad_weight, Tensor grad_bias)")                                  \
  /* Local tensors only (DT_TRAIT_LOCAL_ONLY): distributed, layer_norm_backward and                \
   * layer_norm_backward_affine give the same three gradients. */                                  \
  X(LAYER_NORM_BACKWARD_ALL, "layer_norm_backward_all", COMPUTE, 2, dt__infer_norm_backward,       \
    dt__kernel_norm_backward, REPLICATE, SPECIALIZE, NO_FUNC,                                      \
    DT_TRAIT_TUPLE | DT_TRAIT_LOCAL_ONLY, NO_BACKWARD,                                             \
    "layer_norm_backward_all(Tensor grad_output, Tensor input, int[] normalized_shape, Tensor? "   \
    "weight=None, float eps=1e-05) -> (Tensor grad_input, Tensor grad_weight, Tensor grad_bias)")  \
  X(RMS_NORM_BACKWARD_WEIGHT, "rms_norm_backward_weight", COMPUTE, 2, dt__infer_norm_backward,     \
    dt__kernel_norm_backward, NORM_AFFINE_GRAD, SPECIALIZE, NO_FUNC, 0, NO_BACKWARD,               \
    "rms_norm_backward_weight(Tensor grad_output, Tensor input, int[] normalized_shape, "          \
    "float eps=1e-05) -> Tensor")                                                                  \
  X(SCALED_DOT_PRODUCT_ATTENTION, "scaled_dot_product_attention", COMPUTE, 3, dt__infer_attention, \
    dt__kernel_attention, ATTENTION, SPECIALIZE, NO_FUNC, DT_TRAIT_TUPLE | DT_TRAIT_SAVES_OUTPUT,  \
    BACKWARD(attention),                                                                           \
    "scaled_dot_product_attention(Tensor query, Tensor key, Tensor value, Tensor? "                \
    "attn_mask=None, "                                                                             \
    "bool is_causal=False, float scale=0.0) -> (Tensor output, Tensor logsumexp)")                 \
  X(SCALED_DOT_PRODUCT_ATTENTION_BACKWARD, "scaled_dot_product_attention_backward", COMPUTE, 4,    \
    dt__infer_attention_backward, dt__kernel_attention_backward, ATTENTION, SPECIALIZE, NO_FUNC,   \
    DT_TRAIT_TUPLE | DT_TRAIT_NOT_DIFFERENTIABLE, NO_BACKWARD,                                     \
    "scaled_dot_product_attention_backward(Tensor grad_and_stats, Tensor query, Tensor key, "      \
    "Tensor value, Tensor? attn_mask=None, bool is_causal=False, float scale=0.0) -> "             \
    "(Tensor grad_query, Tensor grad_key, Tensor grad_value)")                                     \
  X(BATCH_NORM, "batch_norm", COMPUTE, 3, dt__infer_batch_norm, dt__kernel_batch_norm, BATCH_NORM, \
    BATCH_NORM, NO_FUNC, 0, BACKWARD(batch_norm),                                                  \
    "batch_norm(Tensor input, Tensor running_mean, Tensor running_var, Tensor? weight, Tensor? "   \
    "bias, float eps) -> Tensor")                                                                  \
  X(BATCH_NORM_TRAINING, "batch_norm_training", COMPUTE, 1, dt__infer_batch_norm_training,         \
    dt__kernel_batch_norm_training, BATCH_NORM_TRAINING, BATCH_NORM_TRAINING, NO_FUNC, 0,          \
    BACKWARD(batch_norm_training),                                                                 \
    "batch_norm_training(Tensor input, Tensor? weight, Tensor? bias, float eps) -> Tensor")        \
  X(EMBEDDING, "embedding", COMPUTE, 2, dt__infer_embedding, dt__kernel_embedding, EMBEDDING,      \
    EMBEDDING, NO_FUNC, DT_TRAIT_ROW_WINDOW, BACKWARD(embedding),                                  \
    "embedding(Tensor weight, Tensor indices) -> Tensor")                                          \
  X(EMBEDDING_BACKWARD, "embedding_backward", COMPUTE, 3, dt__infer_embedding_backward,            \
    dt__kernel_embedding_backward, EMBEDDING_BACKWARD, SAME, NO_FUNC, DT_TRAIT_ROW_WINDOW,         \
    NO_BACKWARD,                                                                                   \
    "embedding_backward(Tensor weight, Tensor indices, Tensor grad_output) -> Tensor")             \
  X(SCATTER_ADD, "scatter_add", COMPUTE, 3, dt__infer_scatter_add, dt__kernel_scatter_add,         \
    SCATTER_ADD, SCATTER_ADD, NO_FUNC, DT_TRAIT_ROW_WINDOW, NO_BACKWARD,                           \
    "scatter_add(Tensor self, int dim, Tensor index, Tensor src) -> Tensor")                       \
  X(CAT, "cat", COMPUTE, 0, dt__infer_cat, dt__kernel_cat, CAT, CAT, NO_FUNC,                      \
    DT_TRAIT_TENSOR_LIST, BACKWARD(cat), "cat(Tensor[] tensors, int dim=0) -> Tensor")             \
  X(STACK, "stack", COMPUTE, 0, dt__infer_stack, dt__kernel_stack, STACK, STACK, NO_FUNC,          \
    DT_TRAIT_TENSOR_LIST, BACKWARD(stack), "stack(Tensor[] tensors, int dim=0) -> Tensor")

/* Index and ordering ops (the Hugging Face models, issue 27). tril/triu: ints[0] = diagonal
 * (the distributed dispatch shifts it by a shard's offsets in the two matrix dims); cumsum:
 * ints[0] = dim, integer and bool inputs give int64; topk: ints {k, dim, largest}, always
 * sorted, outputs {values, indices}; index_select: {self, index (1-D)}, ints[0] = dim;
 * gather: {self, index (self's number of dims)}, ints[0] = dim. */
#define DT_OPS_INDEX(X)                                                                            \
  X(TRIL, "tril", COMPUTE, 1, dt__infer_triangle, dt__kernel_triangle, TRIANGLE, SAME, NO_FUNC, 0, \
    BACKWARD(triangle), "tril(Tensor self, int diagonal=0) -> Tensor")                             \
  X(TRIU, "triu", COMPUTE, 1, dt__infer_triangle, dt__kernel_triangle, TRIANGLE, SAME, NO_FUNC, 0, \
    BACKWARD(triangle), "triu(Tensor self, int diagonal=0) -> Tensor")                             \
  X(CUMSUM, "cumsum", COMPUTE, 1, dt__infer_cumsum, dt__kernel_cumsum, SCAN, SAME, NO_FUNC, 0,     \
    BACKWARD(cumsum), "cumsum(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor")         \
  X(TOPK, "topk", COMPUTE, 1, dt__infer_topk, dt__kernel_topk, ALONG_DIM, SPECIALIZE, NO_FUNC,     \
    DT_TRAIT_TUPLE | DT_TRAIT_SAVES_OUTPUT, BACKWARD(topk),                                        \
    "topk(Tensor self, SymInt k, int dim=-1, bool largest=True, bool sorted=True) -> (Tensor "     \
    "values, Tensor indices)")                                                                     \
  X(INDEX_SELECT, "index_select", COMPUTE, 2, dt__infer_index_select, dt__kernel_index_select,     \
    INDEX_SELECT, SPECIALIZE, NO_FUNC, 0, BACKWARD(index_select),                                  \
    "index_select(Tensor self, int dim, Tensor index) -> Tensor")                                  \
  X(GATHER, "gather", COMPUTE, 2, dt__infer_gather, dt__kernel_gather, GATHER, SPECIALIZE,         \
    NO_FUNC, DT_TRAIT_ROW_WINDOW, BACKWARD(gather),                                                \
    "gather(Tensor self, int dim, Tensor index, *, bool sparse_grad=False) -> "                    \
    "Tensor")

/* Views, reshapes, copies and conversions. */
#define DT_OPS_VIEW(X)                                                                             \
  X(TRANSPOSE, "transpose.int", VIEW, 1, dt__infer_transpose, dt__kernel_transpose, TRANSPOSE,     \
    TRANSPOSE, NO_FUNC, 0, BACKWARD(transpose),                                                    \
    "transpose.int(Tensor(a) self, int dim0, int dim1) -> Tensor(a)")                              \
  X(DETACH, "detach", VIEW, 1, dt__infer_same, dt__kernel_detach, POINTWISE, SAME, NO_FUNC,        \
    DT_TRAIT_LINEAR | DT_TRAIT_NOT_DIFFERENTIABLE, NO_BACKWARD,                                    \
    "detach(Tensor(a) self) -> Tensor(a)")                                                         \
  X(CONTIGUOUS, "contiguous", VIEW, 1, dt__infer_same, dt__kernel_contiguous, POINTWISE, SAME,     \
    NO_FUNC, DT_TRAIT_LINEAR, BACKWARD(pass), "contiguous(Tensor(a) self) -> Tensor(a)")           \
  X(CLONE, "clone", COMPUTE, 1, dt__infer_same, dt__kernel_clone, POINTWISE, SAME, NO_FUNC,        \
    DT_TRAIT_LINEAR | DT_TRAIT_MONOTONE, BACKWARD(pass), "clone(Tensor self) -> Tensor")           \
  X(COPY_, "copy_", INPLACE, 2, dt__infer_copy_, dt__kernel_copy_, POINTWISE, SPECIALIZE, NO_FUNC, \
    DT_TRAIT_LINEAR, BACKWARD(copy_), "copy_(Tensor(a!) self, Tensor src) -> Tensor(a!)")          \
  X(VIEW, "view", VIEW, 1, dt__infer_view, dt__kernel_view, VIEW, VIEW, NO_FUNC,                   \
    DT_TRAIT_GLOBAL_SHAPE_ATTR, BACKWARD(reshape_back),                                            \
    "view(Tensor(a) self, SymInt[] size) -> Tensor(a)")                                            \
  X(RESHAPE, "reshape", VIEW, 1, dt__infer_reshape, dt__kernel_reshape, VIEW, VIEW, NO_FUNC,       \
    DT_TRAIT_GLOBAL_SHAPE_ATTR, BACKWARD(reshape_back),                                            \
    "reshape(Tensor(a) self, SymInt[] shape) -> Tensor(a)")                                        \
  X(FLATTEN, "flatten.using_ints", VIEW, 1, dt__infer_flatten, dt__kernel_reshape, VIEW,           \
    SPECIALIZE, NO_FUNC, DT_TRAIT_GLOBAL_SHAPE_ATTR | DT_TRAIT_RUNS_AS_RESHAPE,                    \
    BACKWARD(reshape_back),                                                                        \
    "flatten.using_ints(Tensor(a) self, int start_dim=0, int end_dim=-1) -> Tensor(a)")            \
  X(PERMUTE, "permute", VIEW, 1, dt__infer_permute, dt__kernel_permute, PERMUTE, SPECIALIZE,       \
    NO_FUNC, 0, BACKWARD(permute), "permute(Tensor(a) self, int[] dims) -> Tensor(a)")             \
  X(EXPAND, "expand", VIEW, 1, dt__infer_expand, dt__kernel_expand, EXPAND, EXPAND, NO_FUNC,       \
    DT_TRAIT_GLOBAL_SHAPE_ATTR, BACKWARD(expand),                                                  \
    "expand(Tensor(a) self, SymInt[] size, *, bool implicit=False) -> Tensor(a)")                  \
  X(SQUEEZE, "squeeze", VIEW, 1, dt__infer_squeeze, dt__kernel_squeeze, VIEW, SPECIALIZE, NO_FUNC, \
    DT_TRAIT_GLOBAL_SHAPE_ATTR | DT_TRAIT_RUNS_AS_RESHAPE, BACKWARD(reshape_back),                 \
    "squeeze(Tensor(a) self) -> Tensor(a)")                                                        \
  X(SQUEEZE_DIM, "squeeze.dim", VIEW, 1, dt__infer_squeeze_dim, dt__kernel_squeeze, VIEW,          \
    SPECIALIZE, NO_FUNC, DT_TRAIT_GLOBAL_SHAPE_ATTR | DT_TRAIT_RUNS_AS_RESHAPE,                    \
    BACKWARD(reshape_back), "squeeze.dim(Tensor(a) self, int dim) -> Tensor(a)")                   \
  X(UNSQUEEZE, "unsqueeze", VIEW, 1, dt__infer_unsqueeze, dt__kernel_unsqueeze, UNSQUEEZE,         \
    UNSQUEEZE, NO_FUNC, 0, BACKWARD(reshape_back),                                                 \
    "unsqueeze(Tensor(a) self, int dim) -> Tensor(a)")                                             \
  X(NARROW, "narrow", VIEW, 1, dt__infer_narrow, dt__kernel_slice, SLICE, SPECIALIZE, NO_FUNC, 0,  \
    BACKWARD(slice), "narrow(Tensor(a) self, int dim, SymInt start, SymInt length) -> Tensor(a)")  \
  X(SLICE, "slice.Tensor", VIEW, 1, dt__infer_slice, dt__kernel_slice, SLICE, SPECIALIZE, NO_FUNC, \
    0, BACKWARD(slice),                                                                            \
    "slice.Tensor(Tensor(a) self, int dim=0, SymInt? start=None, SymInt? end=None, "               \
    "SymInt step=1) -> Tensor(a)")                                                                 \
  X(SELECT, "select.int", VIEW, 1, dt__infer_select, dt__kernel_select, SELECT, SPECIALIZE,        \
    NO_FUNC, 0, BACKWARD(select),                                                                  \
    "select.int(Tensor(a) self, int dim, SymInt index) -> Tensor(a)")                              \
  X(SPLIT, "split.Tensor", VIEW, 1, dt__infer_split, dt__kernel_split, SLICE, SPECIALIZE, NO_FUNC, \
    DT_TRAIT_TUPLE, BACKWARD(split),                                                               \
    "split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) -> Tensor(a)[]")              \
  X(SPLIT_WITH_SIZES, "split_with_sizes", VIEW, 1, dt__infer_split_with_sizes, dt__kernel_split,   \
    SLICE, SPECIALIZE, NO_FUNC, DT_TRAIT_TUPLE, BACKWARD(split),                                   \
    "split_with_sizes(Tensor(a -> *) self, SymInt[] split_sizes, int dim=0) -> Tensor(a)[]")       \
  X(CHUNK, "chunk", VIEW, 1, dt__infer_chunk, dt__kernel_split, SLICE, CHUNK, NO_FUNC,             \
    DT_TRAIT_TUPLE, BACKWARD(split),                                                               \
    "chunk(Tensor(a -> *) self, int chunks, int dim=0) -> Tensor(a)[]")                            \
  X(TO, "to.dtype", VIEW, 1, dt__infer_to, dt__kernel_to, POINTWISE, SAME, NO_FUNC,                \
    DT_TRAIT_LINEAR | DT_TRAIT_MONOTONE, BACKWARD(pass),                                           \
    "to.dtype(Tensor(a) self, ScalarType dtype, bool non_blocking=False, bool copy=False, "        \
    "MemoryFormat? memory_format=None) -> Tensor(a)")

/* Factories that take a tensor's shape and dtype: *_like. */
#define DT_OPS_FACTORY(X)                                                                          \
  X(EMPTY_LIKE, "empty_like", COMPUTE, 1, dt__infer_same, dt__kernel_empty_like, LIKE, SAME,       \
    NO_FUNC, DT_TRAIT_NOT_DIFFERENTIABLE, NO_BACKWARD, "empty_like(Tensor self) -> Tensor")        \
  X(ZEROS_LIKE, "zeros_like", COMPUTE, 1, dt__infer_same, dt__kernel_fill_like, LIKE, SAME,        \
    NO_FUNC, DT_TRAIT_NOT_DIFFERENTIABLE, NO_BACKWARD, "zeros_like(Tensor self) -> Tensor")        \
  X(ONES_LIKE, "ones_like", COMPUTE, 1, dt__infer_same, dt__kernel_fill_like, LIKE, SAME, NO_FUNC, \
    DT_TRAIT_NOT_DIFFERENTIABLE, NO_BACKWARD, "ones_like(Tensor self) -> Tensor")                  \
  X(FULL_LIKE, "full_like", COMPUTE, 1, dt__infer_full_like, dt__kernel_fill_like, LIKE, SAME,     \
    NO_FUNC, DT_TRAIT_NOT_DIFFERENTIABLE, NO_BACKWARD,                                             \
    "full_like(Tensor self, Scalar fill_value) -> Tensor")                                         \
  X(UNIFORM_, "uniform_", INPLACE, 1, dt__infer_uniform_, dt__kernel_uniform_, POINTWISE,          \
    SPECIALIZE, NO_FUNC, DT_TRAIT_RANDOM | DT_TRAIT_NOT_DIFFERENTIABLE, NO_BACKWARD,               \
    "uniform_(Tensor(a!) self, float from=0, float to=1, *, int seed) -> Tensor(a!)")

/* Losses. cross_entropy_loss is the per-row loss of reduction='none' with the class dim
 * kept (logits [N, C], target [N, 1] int64 -> [N, 1]); the ROWS rule shards logits, target
 * and output on dim 0 together and never the class dim; dt_cross_entropy (src/ops/loss.c)
 * reduces the rows. ignore_index in ints[0], ints[1] = 1 when an index is ignored (0: none;
 * ints[0] alone, as a call made from the schema has it: ignored, PyTorch's default -100),
 * label_smoothing in scalars[0]. The backward op takes {grad [N, 1], logits, target}.
 * cross_entropy_vocab_terms (the vocabulary-parallel loss, src/nn/loss.c): per row, the sums
 * over this shard's classes [N, terms] from the logits, the detached row max and the target,
 * with the class window of a shard (dim 1) appended to ints; its backward adds grad_output
 * [N, terms] (the max gets no gradient: it only shifts). */
#define DT_OPS_LOSS(X)                                                                             \
  X(CROSS_ENTROPY_LOSS, "cross_entropy_loss", COMPUTE, 2, dt__infer_cross_entropy,                 \
    dt__kernel_cross_entropy, ROWS, CROSS_ENTROPY, NO_FUNC, 0, BACKWARD(cross_entropy),            \
    "cross_entropy_loss(Tensor self, Tensor target, int ignore_index=-100, "                       \
    "float label_smoothing=0.0) -> Tensor")                                                        \
  X(CROSS_ENTROPY_LOSS_BACKWARD, "cross_entropy_loss_backward", COMPUTE, 3,                        \
    dt__infer_cross_entropy_backward, dt__kernel_cross_entropy_backward, ROWS,                     \
    CROSS_ENTROPY_BACKWARD, NO_FUNC, DT_TRAIT_NOT_DIFFERENTIABLE, NO_BACKWARD,                     \
    "cross_entropy_loss_backward(Tensor grad_output, Tensor self, Tensor target, "                 \
    "int ignore_index=-100, float label_smoothing=0.0) -> Tensor")                                 \
  X(CROSS_ENTROPY_VOCAB_TERMS, "cross_entropy_vocab_terms", COMPUTE, 3, dt__infer_vocab_terms,     \
    dt__kernel_vocab_terms, VOCAB_TERMS, SPECIALIZE, NO_FUNC, DT_TRAIT_ROW_WINDOW,                 \
    BACKWARD(vocab_terms),                                                                         \
    "cross_entropy_vocab_terms(Tensor self, Tensor max, Tensor target, int terms=2) -> Tensor")    \
  X(CROSS_ENTROPY_VOCAB_TERMS_BACKWARD, "cross_entropy_vocab_terms_backward", COMPUTE, 4,          \
    dt__infer_vocab_terms_backward, dt__kernel_vocab_terms_backward, VOCAB_TERMS, SPECIALIZE,      \
    NO_FUNC, DT_TRAIT_ROW_WINDOW, NO_BACKWARD,                                                     \
    "cross_entropy_vocab_terms_backward(Tensor self, Tensor max, Tensor target, Tensor "           \
    "grad_output) -> Tensor")

#define DT_OP_LIST(X)                                                                              \
  DT_OPS_POINTWISE(X)                                                                              \
  DT_OPS_REDUCTION(X)                                                                              \
  DT_OPS_MATRIX(X)                                                                                 \
  DT_OPS_NN(X)                                                                                     \
  DT_OPS_INDEX(X)                                                                                  \
  DT_OPS_VIEW(X)                                                                                   \
  DT_OPS_FACTORY(X)                                                                                \
  DT_OPS_LOSS(X)

#endif /* DT_OP_LIST_H */
