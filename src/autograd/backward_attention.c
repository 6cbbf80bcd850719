/* Backward formulas of rms_norm and scaled_dot_product_attention, written with ops (the
 * attention's through its backward op) so that they run distributed like any op. */
#include "autograd/autograd_impl.h"
#include "dtensor/ops.h"
#include "ops/attention_impl.h"

/* rms_norm over the last k dims, r = rsqrt(mean(x^2) + eps), gw = g * w:
 *   dx = r * (gw - x * r^2 * mean(gw * x)),  dw = sum over the leading dims of g * x * r. */
dt_status dt__backward_rms_norm(const dt_backward_ctx *ctx, dt_tensor *const *grad_outputs,
                                dt_tensor **grad_inputs) {
  dt_tensor *g = grad_outputs[0];
  if (!g) return DT_OK;
  const dt_op_call *call = ctx->call;
  dt_tensor *x = call->inputs[0], *w = call->inputs[1];
  const dt_tensor_meta *in = &ctx->input_metas[0];
  int k = call->int_list ? call->n_int_list : call->n_ints, lead = in->ndim - k;
  int64_t norm_dims[DT_MAX_DIMS], lead_dims[DT_MAX_DIMS];
  for (int i = 0; i < k; i++) norm_dims[i] = lead + i;
  for (int i = 0; i < lead; i++) lead_dims[i] = i;
  dt_tensor *sq = NULL, *ms = NULL, *mse = NULL, *r = NULL, *gw = NULL, *gx = NULL, *dot = NULL;
  dt_tensor *r2 = NULL, *t = NULL, *t2 = NULL, *d = NULL, *dx = NULL, *xr = NULL, *gxr = NULL,
            *dw = NULL;
  dt_status st = dt_mul(x, x, &sq);
  if (!st) st = dt_mean_dims(sq, k, norm_dims, true, &ms);
  if (!st) st = dt_add_scalar(ms, call->scalars[0], &mse);
  if (!st) st = dt_rsqrt(mse, &r);
  if (!st) st = w ? dt_mul(g, w, &gw) : (gw = dt_tensor_retain(g), DT_OK);
  if (!st && ctx->needs_grad[0]) {
    st = dt_mul(gw, x, &gx);
    if (!st) st = dt_mean_dims(gx, k, norm_dims, true, &dot);
    if (!st) st = dt_mul(r, r, &r2);
    if (!st) st = dt_mul(x, r2, &t);
    if (!st) st = dt_mul(t, dot, &t2);
    if (!st) st = dt_sub(gw, t2, &d);
    if (!st) st = dt_mul(d, r, &dx);
    if (!st) st = dt__grad_cast_to(dx, in, &grad_inputs[0]);
  }
  if (!st && w && ctx->needs_grad[1]) {
    st = dt_mul(x, r, &xr);
    if (!st) st = dt_mul(g, xr, &gxr);
    if (!st && lead > 0) st = dt_sum_dims(gxr, lead, lead_dims, false, &dw);
    if (!st && lead == 0) dw = dt_tensor_retain(gxr);
    if (!st) st = dt__grad_cast_to(dw, &ctx->input_metas[1], &grad_inputs[1]);
  }
  DT_RELEASE_ALL(sq, ms, mse, r, gw, gx, dot, r2, t, t2, d, dx, xr, gxr, dw);
  return st;
}

/* scaled_dot_product_attention: with P the probabilities and D = rowsum(g * out),
 *   dS = P (dP - D + g_lse), dP = g v^T, dq = scale dS k, dk = scale dS^T q, dv = P^T g,
 * computed tile by tile from the saved log-sum-exp by the backward op (given [g, lse, D - g_lse]).
 * A float mask gets no gradient. */
dt_status dt__backward_attention(const dt_backward_ctx *ctx, dt_tensor *const *grad_outputs,
                                 dt_tensor **grad_inputs) {
  const dt_op_call *call = ctx->call;
  dt_tensor *g = grad_outputs[0], *gl = grad_outputs[1];
  if (!g && !gl) return DT_OK;
  dt_tensor *out = call->outputs[0], *lse = call->outputs[1];
  dt_tensor *zero = NULL, *go = NULL, *dsum = NULL, *dl = NULL, *dc = NULL, *stats = NULL;
  dt_tensor *gc = NULL, *gs = NULL;
  dt_tensor *dq = NULL, *dk = NULL, *dv = NULL;
  dt_status st = DT_OK;
  if (!g) {
    st = dt_zeros_like(out, &zero);
    g = zero;
  }
  int64_t last = -1;
  if (!st) st = dt_mul(g, out, &go);
  if (!st) st = dt_sum_dims(go, 1, &last, false, &dsum);
  if (!st && gl) st = dt_sub(dsum, gl, &dl);
  if (!st) st = dt_to(dl ? dl : dsum, ctx->output_metas[1].dtype, &dc);
  if (!st) st = dt_stack(2, (dt_tensor *[]){lse, dc}, -1, &stats);
  if (!st) st = dt_to(g, ctx->output_metas[1].dtype, &gc);
  if (!st) st = dt_cat(2, (dt_tensor *[]){gc, stats}, -1, &gs);
  if (!st) st = dt__attention_backward(call, gs, &dq, &dk, &dv);
  if (!st && ctx->needs_grad[0]) st = dt__grad_cast_to(dq, &ctx->input_metas[0], &grad_inputs[0]);
  if (!st && ctx->needs_grad[1]) st = dt__grad_cast_to(dk, &ctx->input_metas[1], &grad_inputs[1]);
  if (!st && ctx->needs_grad[2]) st = dt__grad_cast_to(dv, &ctx->input_metas[2], &grad_inputs[2]);
  DT_RELEASE_ALL(zero, go, dsum, dl, dc, stats, gc, gs, dq, dk, dv);
  return st;
}
