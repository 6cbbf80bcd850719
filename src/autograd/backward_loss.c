/* Backward formulas of cross_entropy_loss and the vocabulary-parallel terms: the gradient of
 * the logits is one op each (cross_entropy_loss_backward, which recomputes each row's softmax
 * from the saved logits; cross_entropy_vocab_terms_backward). */
#include "autograd/autograd_impl.h"
#include "autograd/backward_formula.h"
#include "ops/loss_impl.h"

static dt_status cross_entropy_grad(const dt_backward_ctx *ctx, dt_tensor *g, dt_tensor **out) {
  const dt_op_call *call = ctx->call;
  return dt__cross_entropy_backward(call, g, call->inputs[0], call->inputs[1], out);
}
DT_BACKWARD_INPUT0(cross_entropy, cross_entropy_grad)

/* cross_entropy_vocab_terms: the logits' gradient is one op (the max is held constant; the
 * target is not differentiable). */
static dt_status vocab_terms_grad(const dt_backward_ctx *ctx, dt_tensor *g, dt_tensor **out) {
  dt_tensor *const *in = ctx->call->inputs;
  return dt__cross_entropy_vocab_terms_backward(in[0], in[1], in[2], g, out);
}
DT_BACKWARD_INPUT0(vocab_terms, vocab_terms_grad)
