/* Backward formulas of sin, cos and the index and ordering ops (issue 27), written with ops:
 * sin' = cos, cos' = -sin; tril/triu pass the gradient through the same triangle; cumsum's
 * gradient is the reversed running sum of the gradient; topk, index_select and gather send
 * each output element's gradient back to the element it read, by scatter_add into zeros. */
#include "autograd/autograd_impl.h"
#include "dtensor/ops.h"

/* d sin(x) = cos(x) dx. */
dt_status dt__backward_sin(const dt_backward_ctx *ctx, dt_tensor *const *grad_outputs,
                           dt_tensor **grad_inputs) {
  dt_tensor *g = grad_outputs[0], *c = NULL, *t = NULL;
  if (!g) return DT_OK;
  dt_status st = dt_cos(ctx->call->inputs[0], &c);
  if (!st) st = dt_mul(g, c, &t);
  if (!st) st = dt__grad_reduce_to(t, &ctx->input_metas[0], &grad_inputs[0]);
  DT_RELEASE_ALL(c, t);
  return st;
}

/* d cos(x) = -sin(x) dx. */
dt_status dt__backward_cos(const dt_backward_ctx *ctx, dt_tensor *const *grad_outputs,
                           dt_tensor **grad_inputs) {
  dt_tensor *g = grad_outputs[0], *sn = NULL, *t = NULL, *n = NULL;
  if (!g) return DT_OK;
  dt_status st = dt_sin(ctx->call->inputs[0], &sn);
  if (!st) st = dt_mul(g, sn, &t);
  if (!st) st = dt_neg(t, &n);
  if (!st) st = dt__grad_reduce_to(n, &ctx->input_metas[0], &grad_inputs[0]);
  DT_RELEASE_ALL(sn, t, n);
  return st;
}

/* tril/triu are masks: the gradient is the same triangle of the output's gradient. */
dt_status dt__backward_triangle(const dt_backward_ctx *ctx, dt_tensor *const *grad_outputs,
                                dt_tensor **grad_inputs) {
  dt_tensor *g = grad_outputs[0];
  if (!g) return DT_OK;
  int64_t diagonal = ctx->call->ints[0];
  if (ctx->call->op == DT_OP_TRIU) return dt_triu(g, diagonal, &grad_inputs[0]);
  return dt_tril(g, diagonal, &grad_inputs[0]);
}

/* y_i = sum_{j <= i} x_j, so dx_j = sum_{i >= j} g_i = total - cumsum(g)_j + g_j. */
dt_status dt__backward_cumsum(const dt_backward_ctx *ctx, dt_tensor *const *grad_outputs,
                              dt_tensor **grad_inputs) {
  dt_tensor *g = grad_outputs[0];
  if (!g) return DT_OK;
  int64_t dim = ctx->call->ints[0];
  dt_tensor *total = NULL, *run = NULL, *rest = NULL;
  dt_status st = dt_sum_dims(g, 1, &dim, true, &total);
  if (!st) st = dt_cumsum(g, dim, &run);
  if (!st) st = dt_sub(total, run, &rest);
  if (!st) st = dt_add(rest, g, &grad_inputs[0]);
  DT_RELEASE_ALL(total, run, rest);
  return st;
}

/* topk: the values' gradient goes to the positions the op chose. */
dt_status dt__backward_topk(const dt_backward_ctx *ctx, dt_tensor *const *grad_outputs,
                            dt_tensor **grad_inputs) {
  dt_tensor *g = grad_outputs[0], *zeros = NULL;
  if (!g) return DT_OK;
  dt_status st = dt_zeros_like(ctx->call->inputs[0], &zeros);
  if (!st)
    st = dt_scatter_add(zeros, ctx->call->ints[1], ctx->call->outputs[1], g, &grad_inputs[0]);
  dt_tensor_release(zeros);
  return st;
}

/* index_select: the index, viewed along dim and expanded to the gradient's shape, scatters the
 * gradient's slices back (a repeated index accumulates). */
dt_status dt__backward_index_select(const dt_backward_ctx *ctx, dt_tensor *const *grad_outputs,
                                    dt_tensor **grad_inputs) {
  dt_tensor *g = grad_outputs[0];
  if (!g || !ctx->needs_grad[0]) return DT_OK;
  const dt_tensor_meta *gm = &ctx->output_metas[0];
  int dim = (int)ctx->call->ints[0];
  int64_t along[DT_MAX_DIMS];
  for (int d = 0; d < gm->ndim; d++) along[d] = d == dim ? gm->shape[d] : 1;
  dt_tensor *zeros = NULL, *iv = NULL, *ie = NULL;
  dt_status st = dt_zeros_like(ctx->call->inputs[0], &zeros);
  if (!st) st = dt_reshape(ctx->call->inputs[1], gm->ndim, along, &iv);
  if (!st) st = dt_expand(iv, gm->ndim, gm->shape, &ie);
  if (!st) st = dt_scatter_add(zeros, dim, ie, g, &grad_inputs[0]);
  DT_RELEASE_ALL(zeros, iv, ie);
  return st;
}

/* gather: scatter_add is its adjoint. */
dt_status dt__backward_gather(const dt_backward_ctx *ctx, dt_tensor *const *grad_outputs,
                              dt_tensor **grad_inputs) {
  dt_tensor *g = grad_outputs[0], *zeros = NULL;
  if (!g || !ctx->needs_grad[0]) return DT_OK;
  dt_status st = dt_zeros_like(ctx->call->inputs[0], &zeros);
  if (!st) st = dt_scatter_add(zeros, ctx->call->ints[0], ctx->call->inputs[1], g, &grad_inputs[0]);
  dt_tensor_release(zeros);
  return st;
}
