/* Backward formulas of sin, cos and the index and ordering ops (issue 27), written with ops:
 * sin' = cos, cos' = -sin; tril/triu pass the gradient through the same triangle; cumsum's
 * gradient is the reversed running sum of the gradient; topk, index_select and gather send
 * each output element's gradient back to the element it read, by scatter_add into zeros. */
#include "autograd/autograd_impl.h"
#include "autograd/backward_formula.h"
#include "dtensor/ops.h"

/* scatter_add(zeros like input 0, dim, index, src): each element of src added into the
 * element of the input it was read from. */
static dt_status scatter_into_zeros(const dt_backward_ctx *ctx, int64_t dim, dt_tensor *index,
                                    dt_tensor *src, dt_tensor **out) {
  dt_tensor *zeros = NULL;
  dt_status st = dt_zeros_like(ctx->call->inputs[0], &zeros);
  if (!st) st = dt_scatter_add(zeros, dim, index, src, out);
  dt_tensor_release(zeros);
  return st;
}

/* d sin(x) = cos(x) dx, d cos(x) = -sin(x) dx: g times the other function of x (the op's func
 * tells which), negated for cos. */
static dt_status sin_cos_grad(const dt_backward_ctx *ctx, dt_tensor *g, dt_tensor **out) {
  bool is_sin = dt__op_table[ctx->call->op].func == DT_UNARY_SIN;
  dt_tensor *x = ctx->call->inputs[0], *other = NULL, *t = NULL;
  dt_status st = is_sin ? dt_cos(x, &other) : dt_sin(x, &other);
  if (!st) st = dt_mul(g, other, is_sin ? out : &t);
  if (!st && !is_sin) st = dt_neg(t, out);
  DT_RELEASE_ALL(other, t);
  return st;
}
DT_BACKWARD_INPUT0(sin, sin_cos_grad)
DT_BACKWARD_INPUT0(cos, sin_cos_grad)

/* tril/triu are masks: the gradient is the same triangle of the output's gradient. */
static dt_status triangle_grad(const dt_backward_ctx *ctx, dt_tensor *g, dt_tensor **out) {
  int64_t diagonal = ctx->call->ints[0];
  if (ctx->call->op == DT_OP_TRIU) return dt_triu(g, diagonal, out);
  return dt_tril(g, diagonal, out);
}
DT_BACKWARD_INPUT0(triangle, triangle_grad)

/* y_i = sum_{j <= i} x_j, so dx_j = sum_{i >= j} g_i = total - cumsum(g)_j + g_j. */
static dt_status cumsum_grad(const dt_backward_ctx *ctx, dt_tensor *g, dt_tensor **out) {
  int64_t dim = ctx->call->ints[0];
  dt_tensor *total = NULL, *run = NULL, *rest = NULL;
  dt_status st = dt_sum_dims(g, 1, &dim, true, &total);
  if (!st) st = dt_cumsum(g, dim, &run);
  if (!st) st = dt_sub(total, run, &rest);
  if (!st) st = dt_add(rest, g, out);
  DT_RELEASE_ALL(total, run, rest);
  return st;
}
DT_BACKWARD_INPUT0(cumsum, cumsum_grad)

/* topk: the values' gradient goes to the positions the op chose. */
static dt_status topk_grad(const dt_backward_ctx *ctx, dt_tensor *g, dt_tensor **out) {
  return scatter_into_zeros(ctx, ctx->call->ints[1], ctx->call->outputs[1], g, out);
}
DT_BACKWARD_INPUT0(topk, topk_grad)

/* index_select: the index, viewed along dim and expanded to the gradient's shape, scatters the
 * gradient's slices back (a repeated index accumulates). */
static dt_status index_select_grad(const dt_backward_ctx *ctx, dt_tensor *g, dt_tensor **out) {
  const dt_tensor_meta *gm = &ctx->output_metas[0];
  int dim = (int)ctx->call->ints[0];
  int64_t along[DT_MAX_DIMS];
  for (int d = 0; d < gm->ndim; d++) along[d] = d == dim ? gm->shape[d] : 1;
  dt_tensor *iv = NULL, *ie = NULL;
  dt_status st = dt_reshape(ctx->call->inputs[1], gm->ndim, along, &iv);
  if (!st) st = dt_expand(iv, gm->ndim, gm->shape, &ie);
  if (!st) st = scatter_into_zeros(ctx, dim, ie, g, out);
  DT_RELEASE_ALL(iv, ie);
  return st;
}
DT_BACKWARD_INPUT0(index_select, index_select_grad)

/* gather: scatter_add is its adjoint. */
static dt_status gather_grad(const dt_backward_ctx *ctx, dt_tensor *g, dt_tensor **out) {
  return scatter_into_zeros(ctx, ctx->call->ints[0], ctx->call->inputs[1], g, out);
}
DT_BACKWARD_INPUT0(gather, gather_grad)
