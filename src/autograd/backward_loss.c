/* Backward formulas of cross_entropy_loss and the vocabulary-parallel terms: the gradient of
 * the logits is one op each (cross_entropy_loss_backward, which recomputes each row's softmax
 * from the saved logits; cross_entropy_vocab_terms_backward). */
#include "autograd/autograd_impl.h"
#include "ops/loss_impl.h"

dt_status dt__backward_cross_entropy(const dt_backward_ctx *ctx, dt_tensor *const *grad_outputs,
                                     dt_tensor **grad_inputs) {
  dt_tensor *g = grad_outputs[0];
  if (!g || !ctx->needs_grad[0]) return DT_OK;
  const dt_op_call *call = ctx->call;
  dt_tensor *t = NULL;
  dt_status st = dt__cross_entropy_backward(call, g, call->inputs[0], call->inputs[1], &t);
  if (!st) st = dt__grad_reduce_to(t, &ctx->input_metas[0], &grad_inputs[0]);
  dt_tensor_release(t);
  return st;
}

/* cross_entropy_vocab_terms: the logits' gradient is one op (the max is held constant; the
 * target is not differentiable). */
dt_status dt__backward_vocab_terms(const dt_backward_ctx *ctx, dt_tensor *const *grad_outputs,
                                   dt_tensor **grad_inputs) {
  dt_tensor *g = grad_outputs[0];
  if (!g || !ctx->needs_grad[0]) return DT_OK;
  dt_tensor *const *in = ctx->call->inputs;
  dt_tensor *t = NULL;
  dt_status st = dt__cross_entropy_vocab_terms_backward(in[0], in[1], in[2], g, &t);
  if (!st) st = dt__grad_cast_to(t, &ctx->input_metas[0], &grad_inputs[0]);
  dt_tensor_release(t);
  return st;
}
