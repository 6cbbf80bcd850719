/*
 * The cross_entropy_loss ops (argument checks, output metas, kernels) and the dispatch of its
 * backward. The public losses written with these and other ops (dt_mse_loss, dt_cross_entropy)
 * are in src/nn/loss.c: they distribute tensors and turn grad mode off, which only a layer
 * above distributed and autograd may do.
 */
#include <math.h>

#include "kernels/cpu/loss.h"
#include "ops/loss_impl.h"

/* ---- cross_entropy_loss and its backward: infer and kernels ------------------------------ */

/* ints = {ignore_index, is set}; ignore_index alone (a call made from the schema, as
 * ops/op_args.c makes it) is PyTorch's: always in force, -100 by default. */
static dt_cross_entropy_params params_of(const dt_op_call *call) {
  int64_t ignore;
  bool has = dt__cross_entropy_ignores(call, &ignore);
  return (dt_cross_entropy_params){
      .has_ignore_index = has, .ignore_index = ignore, .label_smoothing = call->scalars[0]};
}

/* logits [N, C] floating, target [N, 1] int64. */
static dt_status check_logits_target(const dt_op_call *call, const dt_tensor *logits,
                                     const dt_tensor *target) {
  const char *op = dt__op_name(call);
  char b1[160], b2[160];
  if (!dt_dtype_is_floating(logits->dtype)) {
    return dt__error(DT_ERR_DTYPE, "%s: self has dtype %s (expected a floating dtype)", op,
                     dt_dtype_name(logits->dtype));
  }
  if (target->dtype != DT_I64) {
    return dt__error(DT_ERR_DTYPE, "%s: target has dtype %s (expected int64)", op,
                     dt_dtype_name(target->dtype));
  }
  if (logits->ndim != 2 || target->ndim != 2 || target->shape[1] != 1 ||
      target->shape[0] != logits->shape[0]) {
    return dt__error(DT_ERR_SHAPE, "%s: self %s and target %s (expected [N, C] and [N, 1])", op,
                     dt__format_ints(b1, sizeof b1, logits->ndim, logits->shape),
                     dt__format_ints(b2, sizeof b2, target->ndim, target->shape));
  }
  return DT_OK;
}

/* t (grad_output, max) must be [N, 1] with logits' N and dtype. */
static dt_status check_column(const dt_op_call *call, const char *arg, const dt_tensor *t,
                              const dt_tensor *logits) {
  if (t->dtype == logits->dtype && t->ndim == 2 && t->shape[0] == logits->shape[0] &&
      t->shape[1] == 1)
    return DT_OK;
  char b[160];
  return dt__error(DT_ERR_SHAPE, "%s: %s %s %s (expected [%lld, 1] %s)", dt__op_name(call), arg,
                   dt__format_ints(b, sizeof b, t->ndim, t->shape), dt_dtype_name(t->dtype),
                   (long long)logits->shape[0], dt_dtype_name(logits->dtype));
}

dt_status dt__infer_cross_entropy(dt_op_call *call, dt_tensor_meta *metas) {
  const dt_tensor *logits = call->inputs[0];
  dt_status st = check_logits_target(call, logits, call->inputs[1]);
  if (st) return st;
  dt__meta_set(&metas[0], logits->dtype, 2, (int64_t[]){logits->shape[0], 1});
  return DT_OK;
}

dt_status dt__kernel_cross_entropy(dt_op_call *call) {
  dt_cross_entropy_params p = params_of(call);
  return dt__cpu_cross_entropy(call->inputs[0], call->inputs[1], &p, call->outputs[0]);
}

dt_status dt__infer_cross_entropy_backward(dt_op_call *call, dt_tensor_meta *metas) {
  const dt_tensor *grad = call->inputs[0], *logits = call->inputs[1];
  dt_status st = check_logits_target(call, logits, call->inputs[2]);
  if (!st) st = check_column(call, "grad_output", grad, logits);
  if (st) return st;
  dt__meta_set(&metas[0], logits->dtype, 2, logits->shape);
  return DT_OK;
}

dt_status dt__kernel_cross_entropy_backward(dt_op_call *call) {
  dt_cross_entropy_params p = params_of(call);
  return dt__cpu_cross_entropy_backward(call->inputs[0], call->inputs[1], call->inputs[2], &p,
                                        call->outputs[0]);
}

dt_status dt__cross_entropy_backward(const dt_op_call *fwd, dt_tensor *grad, dt_tensor *logits,
                                     dt_tensor *target, dt_tensor **out) {
  dt_op_call call = {.op = DT_OP_CROSS_ENTROPY_LOSS_BACKWARD,
                     .n_inputs = 3,
                     .inputs = {grad, logits, target},
                     .n_ints = 2,
                     .ints = {fwd->ints[0], params_of(fwd).has_ignore_index},
                     .scalars = {fwd->scalars[0]},
                     .n_outputs = 1,
                     .outputs = out};
  return dt__dispatch(&call);
}

/* ---- Vocabulary-parallel terms ---------------------------------------------------------- */

/* {logits [N, C], max [N, 1] of logits' dtype, target [N, 1] int64}; ints[0] the number of
 * terms (2, or 3 with the sum for label smoothing), then the class window when sharded. */
static dt_status check_vocab_terms(const dt_op_call *call) {
  const dt_tensor *logits = call->inputs[0], *max = call->inputs[1];
  dt_status st = check_logits_target(call, logits, call->inputs[2]);
  if (!st) st = check_column(call, "max", max, logits);
  if (st) return st;
  if (call->n_ints < 1 || (call->ints[0] != 2 && call->ints[0] != 3)) {
    return dt__error(DT_ERR_INVALID, "%s: terms = %lld (expected 2 or 3)", dt__op_name(call),
                     call->n_ints < 1 ? 0LL : (long long)call->ints[0]);
  }
  return DT_OK;
}

dt_status dt__infer_vocab_terms(dt_op_call *call, dt_tensor_meta *metas) {
  dt_status st = check_vocab_terms(call);
  if (st) return st;
  const dt_tensor *logits = call->inputs[0];
  dt__meta_set(&metas[0], logits->dtype, 2, (int64_t[]){logits->shape[0], call->ints[0]});
  return DT_OK;
}

/* The class window the dist dispatcher appended, or the whole of logits' classes. */
static int64_t class_offset(const dt_op_call *call) {
  return call->n_ints == 3 ? call->ints[1] : 0;
}

dt_status dt__kernel_vocab_terms(dt_op_call *call) {
  dt_tensor **in = call->inputs;
  return dt__cpu_vocab_terms(in[0], in[1], in[2], class_offset(call), call->outputs[0]);
}

/* The same inputs, then grad_output [N, terms]. */
dt_status dt__infer_vocab_terms_backward(dt_op_call *call, dt_tensor_meta *metas) {
  dt_status st = check_vocab_terms(call);
  if (st) return st;
  const dt_tensor *logits = call->inputs[0], *g = call->inputs[3];
  if (g->dtype != logits->dtype || g->ndim != 2 || g->shape[0] != logits->shape[0] ||
      g->shape[1] != call->ints[0]) {
    char b[160];
    return dt__error(DT_ERR_SHAPE, "%s: grad_output %s %s (expected [%lld, %lld] %s)",
                     dt__op_name(call), dt__format_ints(b, sizeof b, g->ndim, g->shape),
                     dt_dtype_name(g->dtype), (long long)logits->shape[0], (long long)call->ints[0],
                     dt_dtype_name(logits->dtype));
  }
  dt__meta_set(&metas[0], logits->dtype, 2, logits->shape);
  return DT_OK;
}

dt_status dt__kernel_vocab_terms_backward(dt_op_call *call) {
  dt_tensor **in = call->inputs;
  return dt__cpu_vocab_terms_backward(in[0], in[1], in[2], in[3], class_offset(call),
                                      call->outputs[0]);
}

dt_status dt__cross_entropy_vocab_terms(dt_tensor *logits, dt_tensor *max, dt_tensor *target,
                                        int terms, dt_tensor **out) {
  return dt__dispatch_tensors(DT_OP_CROSS_ENTROPY_VOCAB_TERMS, 3,
                              (dt_tensor *[]){logits, max, target}, 1, terms, out);
}

dt_status dt__cross_entropy_vocab_terms_backward(dt_tensor *logits, dt_tensor *max,
                                                 dt_tensor *target, dt_tensor *grad,
                                                 dt_tensor **out) {
  int64_t classes = dt_tensor_ndim(grad) == 2 ? dt_tensor_size(grad, 1) : 0;
  return dt__dispatch_tensors(DT_OP_CROSS_ENTROPY_VOCAB_TERMS_BACKWARD, 4,
                              (dt_tensor *[]){logits, max, target, grad}, 1, classes, out);
}
