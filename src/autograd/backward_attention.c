/* Backward formulas of rms_norm (through backward_nn.c's) and scaled_dot_product_attention,
 * written with ops (the attention's through its backward op) so that they run distributed like any
 * op. */
#include "autograd/autograd_impl.h"
#include "dtensor/ops.h"
#include "ops/attention_impl.h"

/* rms_norm: its fused backward ops, as layer_norm's (backward_nn.c). */
dt_status dt__backward_rms_norm(const dt_backward_ctx *ctx, dt_tensor *const *grad_outputs,
                                dt_tensor **grad_inputs) {
  return dt__backward_norm(ctx, grad_outputs, grad_inputs, true);
}

/* scaled_dot_product_attention: with P the probabilities and D = rowsum(g * out),
 *   dS = P (dP - D + g_lse), dP = g v^T, dq = scale dS k, dk = scale dS^T q, dv = P^T g,
 * computed tile by tile from the saved log-sum-exp by the backward op (given [g, lse, D - g_lse],
 * D in float32 for float16 / bfloat16: dt__attention_grad_and_stats).
 * A float mask gets no gradient. */
dt_status dt__backward_attention(const dt_backward_ctx *ctx, dt_tensor *const *grad_outputs,
                                 dt_tensor **grad_inputs) {
  const dt_op_call *call = ctx->call;
  dt_tensor *g = grad_outputs[0], *gl = grad_outputs[1];
  if (!g && !gl) return DT_OK;
  dt_tensor *gs = NULL, *dq = NULL, *dk = NULL, *dv = NULL;
  dt_status st = dt__attention_grad_and_stats(call->outputs[0], call->outputs[1], g, gl, &gs);
  if (!st) st = dt__attention_backward(call, gs, &dq, &dk, &dv);
  if (!st && ctx->needs_grad[0]) st = dt__grad_cast_to(dq, &ctx->input_metas[0], &grad_inputs[0]);
  if (!st && ctx->needs_grad[1]) st = dt__grad_cast_to(dk, &ctx->input_metas[1], &grad_inputs[1]);
  if (!st && ctx->needs_grad[2]) st = dt__grad_cast_to(dv, &ctx->input_metas[2], &grad_inputs[2]);
  DT_RELEASE_ALL(gs, dq, dk, dv);
  return st;
}
