/*
 * Private interface of the op layer: the op definitions (ops/op_def.h), the single dispatch
 * entry point every public op function goes through, and helpers that read the op table.
 *
 * The dispatch files call down: dispatch.c (dt__dispatch: checks, profiling, the branch to
 * modes or autograd) -> mode.c (the mode stack) -> dispatch_local.c (dt__dispatch_inner: the
 * distributed upcall or the local path) -> op_table.c (the table).
 *
 * Adding an op: one X(...) line in ops/op_list.h, an infer function (validates arguments,
 * computes output shapes and dtypes), a kernel, and the public wrapper that fills a
 * dt_op_call and calls dt__dispatch.
 */
#ifndef DT_OP_IMPL_H
#define DT_OP_IMPL_H

#include "dtensor/comm.h" /* dt_reduce_op */
#include "ops/op_def.h"

/* The single entry point of every op: modes, distributed dispatch, or the local path. */
dt_status dt__dispatch(dt_op_call *call);

/* Past the argument checks and the modes: the distributed hook or the local path. */
dt_status dt__dispatch_inner(dt_op_call *call);

/* The op call behind a mode's invocation (for tracers that record attributes). */
struct dt_invocation;
dt_op_call *dt__invocation_call(struct dt_invocation *inv);

/* Runs a call through the calling thread's dispatch modes (ops/mode.c). */
dt_status dt__dispatch_with_modes(dt_op_call *call);
extern _Thread_local int dt__modes_visible;

/* The local path alone: validate, infer, allocate outputs, run the kernel. */
dt_status dt__dispatch_local(dt_op_call *call);

/* An op with a distributed input runs through dt__upcall.dist_dispatch (core/core_impl.h). */

/* How many tensors carry autograd state (src/autograd counts them). While it is zero no
 * tensor requires grad and none is saved for a backward, so dt__dispatch skips autograd with
 * one branch; otherwise it goes through dt__upcall.autograd_dispatch (core/core_impl.h). */
extern atomic_int dt__autograd_live;

/* ---- Helpers shared by infer functions ---------------------------------------------- */

/* NumPy broadcasting of two shapes into out (ndim in *out_ndim). DT_ERR_SHAPE naming op and
 * both shapes when they are incompatible. */
dt_status dt__broadcast_shapes(const char *op, int ndim_a, const int64_t *shape_a, int ndim_b,
                               const int64_t *shape_b, int *out_ndim, int64_t *out_shape);

/* What a reduction op (rule family DT_RULE_REDUCTION) does, for its sharding rule: the reduced
 * dims of an ndim-dim input as a bit mask (the call already inferred), whether every dim is
 * reduced to a 0-d result (keepdim does not apply), how results over the pieces of a reduced
 * dim combine (sum: SUM, mean: AVG, amax/max: MAX, amin/min: MIN) and whether it returns
 * positions, which need the whole dim. (ops/reduction.c) */
typedef struct dt_reduction_facts {
  uint32_t mask;
  bool all;
  dt_reduce_op combine;
  bool indices;
} dt_reduction_facts;
dt_reduction_facts dt__reduction_facts(const dt_op_call *call, int ndim);

/* The strides that view a tensor of (ndim, shape, strides) with new_shape without copying
 * (ops/shape.c: view, reshape); false when no view can (reshape then copies). Every device's
 * reshape uses it. */
bool dt__view_strides(int ndim, const int64_t *shape, const int64_t *strides, int new_ndim,
                      const int64_t *new_shape, int64_t *new_strides);

/* For in-place ops: other must broadcast to self's shape exactly. DT_ERR_SHAPE naming op,
 * what (the argument's name, "other", "mask", "src") and both shapes otherwise. */
dt_status dt__check_broadcasts_to_self(const char *op, const char *what, const dt_tensor *self,
                                       const dt_tensor *other);

/* For kernels that write dst while reading src: when src reads dst's memory through another
 * layout (x.copy_(x.t())), *copy is a new contiguous copy of src to read instead (the caller
 * releases it); otherwise *copy is NULL and src can be read directly. */
dt_status dt__copy_if_overlapping(const dt_tensor *dst, const dt_tensor *src, dt_tensor **copy);

/* Strides of t seen through the broadcast shape (ndim, shape): 0 on broadcast dims. */
void dt__broadcast_strides(const dt_tensor *t, int ndim, const int64_t *shape, int64_t *strides);

static inline bool dt__op_has_trait(int op, unsigned trait) {
  return (dt__op_table[op].traits & trait) != 0;
}

static inline const char *dt__op_name(const dt_op_call *call) {
  return dt__op_table[call->op].name;
}

/* ints[0] as a dim of t, normalized and stored back (ints[0] = the dim, n_ints = 1), and into
 * *d unless d is NULL: the ops whose one dim attribute the kernel reads (softmax, cumsum,
 * index_select, gather, squeeze.dim). */
static inline dt_status dt__call_dim(dt_op_call *call, const dt_tensor *t, int *d) {
  int dim;
  dt_status st = dt__normalize_dim(dt__op_name(call), call->ints[0], t->ndim, &dim);
  if (st) return st;
  call->ints[0] = dim;
  call->n_ints = 1;
  if (d) *d = dim;
  return DT_OK;
}

/* ints[0] and ints[1] as dims of inputs[0] (transpose's dims, flatten's start and end). */
static inline dt_status dt__normalize_dim_pair(const dt_op_call *call, int *d0, int *d1) {
  int ndim = call->inputs[0]->ndim;
  dt_status st = dt__normalize_dim(dt__op_name(call), call->ints[0], ndim, d0);
  return st ? st : dt__normalize_dim(dt__op_name(call), call->ints[1], ndim, d1);
}

/* Dispatches op on inputs {a, b} with scalars[0] = scalar (alpha, a fill value; 0 when the
 * op has none) and one output: the public binary functions' common call. (ops/dispatch.c) */
dt_status dt__dispatch_two(dt_op op, dt_tensor *a, dt_tensor *b, double scalar, dt_tensor **out);

/* Dispatches op on the n tensors `inputs` (n <= DT_OP_MAX_INPUTS; NULL entries stay NULL) with
 * one output and, when n_ints is 1, ints {v} (none when 0): the public functions' common call
 * for the ops whose only attribute, if any, is one int (a dim, a diagonal, a count).
 * (ops/dispatch.c) */
dt_status dt__dispatch_tensors(dt_op op, int n, dt_tensor *const *inputs, int n_ints, int64_t v,
                               dt_tensor **out);

/* Completes per-channel sums (a float64 [C] tensor) across ranks, in place (synchronized
 * batch norm). */
typedef dt_status (*dt__channel_reduce_fn)(void *ctx, dt_tensor *sums);

/* batch_norm_training on call's inputs (this rank's shard) into call->outputs[0] (allocated,
 * the shard's shape) with statistics over `count` values per channel: the per-channel sums of x and
 * then of its squared deviations from the mean are passed to `reduce` (NULL: the shard is
 * the whole batch) before they are divided by count. The kernel is this with reduce NULL;
 * the dist dispatcher passes an all_reduce over the mesh dims that shard the batch.
 * (ops/batch_norm_training.c) */
/* layer_norm (inputs {x, weight?, bias?}) or rms_norm ({x, weight?}; bias unused): the call
 * with normalized_shape borrowed in int_list and eps in scalars[0], dispatched. (ops/norm.c) */
dt_status dt__norm_dispatch(dt_op op, dt_tensor *x, int ndims, const int64_t *normalized_shape,
                            dt_tensor *weight, dt_tensor *bias, double eps, dt_tensor **out);
/* The eps check of the public norms (layer_norm, rms_norm, batch_norm, batch_norm_training):
 * *out (when out is not NULL) is set to NULL; DT_ERR_INVALID "<fn>: eps E must be finite and
 * >= 0" unless it is. (ops/norm.c) */
dt_status dt__norm_check_eps(const char *fn, double eps, dt_tensor **out);

dt_status dt__batch_norm_training_stats(dt_op_call *call, int64_t count,
                                        dt__channel_reduce_fn reduce, void *ctx);

/* Dispatches gelu_backward: grad * gelu'(x), the tanh form when flags has
 * DT_OP_FLAG_GELU_TANH; for gelu's backward formula (src/autograd/backward_activation.c).
 * (ops/unary.c) */
dt_status dt__gelu_backward(dt_tensor *grad, dt_tensor *x, int flags, dt_tensor **out);

/* Dispatch the fused backward ops of softmax (log_softmax when take_log: grad and the
 * forward's output, along dim), and of layer_norm / rms_norm (rms) over the last k dims of
 * input (their sizes in shape): the input's gradient (weight may be NULL), and the parameters'
 * gradients (grad_bias NULL for rms_norm, which has none). For the backward formulas
 * (src/autograd/backward_nn.c). (ops/norm.c) */
dt_status dt__softmax_backward(dt_tensor *grad, dt_tensor *output, int64_t dim, bool take_log,
                               dt_tensor **out);
dt_status dt__norm_backward_input(bool rms, dt_tensor *grad, dt_tensor *input, int k,
                                  const int64_t *shape, dt_tensor *weight, double eps,
                                  dt_tensor **out);
dt_status dt__norm_backward_affine(bool rms, dt_tensor *grad, dt_tensor *input, int k,
                                   const int64_t *shape, double eps, dt_tensor **grad_weight,
                                   dt_tensor **grad_bias);
/* layer_norm_backward_all: the input's, the weight's and the bias's gradients in one pass
 * over grad and input (each read once; the two ops above read them twice). Runs replicated
 * on distributed tensors (its outputs would need two placements: the input's shard and
 * Partial(sum)): the autograd formula takes it for local tensors only. */
dt_status dt__layer_norm_backward_all(dt_tensor *grad, dt_tensor *input, int k,
                                      const int64_t *shape, dt_tensor *weight, double eps,
                                      dt_tensor **grad_input, dt_tensor **grad_weight,
                                      dt_tensor **grad_bias);

/* Dispatches embedding_backward: the weight's gradient from the lookup's indices and
 * grad_output (weight only gives its shape, dtype and placements); for embedding's backward
 * formula. (ops/embedding.c) */
dt_status dt__embedding_backward(dt_tensor *weight, dt_tensor *indices, dt_tensor *grad,
                                 dt_tensor **out);

static inline void dt__meta_set(dt_tensor_meta *m, dt_dtype dtype, int ndim, const int64_t *shape) {
  m->dtype = dtype;
  m->ndim = ndim;
  for (int i = 0; i < ndim; i++) m->shape[i] = shape[i];
}

#endif /* DT_OP_IMPL_H */
