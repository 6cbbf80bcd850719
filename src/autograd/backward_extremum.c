/* Backward formulas of max, min, amax, amin (the gradient is shared evenly among the
 * elements equal to the result, as PyTorch) and of max.dim/min.dim (the values' gradient
 * goes to the selected index alone; the indices output is not differentiable). */
#include "autograd/autograd_impl.h"
#include "autograd/backward_formula.h"
#include "dtensor/ops.h"

/* The input's shape with the reduced dims set to 1 (the keepdim shape of the result), and
 * the reduced dims: amax/amin the dims of their list (int_list: the recorded attributes are
 * the caller's, normalized by infer only on the local path), an empty list meaning every dim;
 * max/min record no list, so they reduce every dim. */
typedef struct reduced_dims {
  int n;
  int64_t dims[DT_MAX_DIMS];
  int64_t keep_shape[DT_MAX_DIMS];
} reduced_dims;

static void reduced_of(const dt_backward_ctx *ctx, reduced_dims *r) {
  const dt_tensor_meta *in = &ctx->input_metas[0];
  const dt_op_call *call = ctx->call;
  unsigned mask = 0;
  if (!call->int_list || call->n_int_list == 0) {
    mask = in->ndim > 0 ? (1u << in->ndim) - 1 : 0;
  } else {
    for (int i = 0; i < call->n_int_list; i++) {
      int64_t d = call->int_list[i] < 0 ? call->int_list[i] + in->ndim : call->int_list[i];
      if (d >= 0 && d < in->ndim) mask |= 1u << d;
    }
  }
  r->n = 0;
  for (int d = 0; d < in->ndim; d++) {
    r->keep_shape[d] = (mask >> d) & 1u ? 1 : in->shape[d];
    if ((mask >> d) & 1u) r->dims[r->n++] = d;
  }
}

/* grad = reshape(g, keep) * (x == reshape(y, keep)) / count of the equal elements. */
static dt_status even_among_ties(const dt_backward_ctx *ctx, dt_tensor *g, dt_tensor **out) {
  const dt_tensor_meta *in = &ctx->input_metas[0];
  reduced_dims r;
  reduced_of(ctx, &r);
  dt_tensor *yk = NULL, *gk = NULL, *eq = NULL, *mask = NULL, *count = NULL, *share = NULL;
  dt_status st = dt_reshape(ctx->call->outputs[0], in->ndim, r.keep_shape, &yk);
  if (!st) st = dt_reshape(g, in->ndim, r.keep_shape, &gk);
  if (!st) st = dt_eq(ctx->call->inputs[0], yk, &eq);
  if (!st) st = dt_to(eq, g->dtype, &mask);
  if (!st) st = dt_sum_dims(mask, r.n, r.dims, true, &count);
  if (!st) st = dt_div(gk, count, &share);
  if (!st) st = dt_mul(mask, share, out);
  DT_RELEASE_ALL(yk, gk, eq, mask, count, share);
  return st;
}

DT_BACKWARD_INPUT0(extremum, even_among_ties)

/* max.dim/min.dim (ints[0] = dim): the values' gradient goes to the index the op selected
 * (one element even among ties, as PyTorch), put there by scatter_add into zeros. */
static dt_status extremum_dim_grad(const dt_backward_ctx *ctx, dt_tensor *g, dt_tensor **out) {
  const dt_tensor_meta *in = &ctx->input_metas[0];
  int dim = (int)(ctx->call->ints[0] < 0 ? ctx->call->ints[0] + in->ndim : ctx->call->ints[0]);
  int64_t keep[DT_MAX_DIMS];
  for (int d = 0; d < in->ndim; d++) keep[d] = d == dim ? 1 : in->shape[d];
  dt_tensor *zeros = NULL, *idx = NULL, *gk = NULL;
  dt_status st = dt_zeros_like(ctx->call->inputs[0], &zeros);
  if (!st) st = dt_reshape(ctx->call->outputs[1], in->ndim, keep, &idx);
  if (!st) st = dt_reshape(g, in->ndim, keep, &gk);
  if (!st) st = dt_scatter_add(zeros, dim, idx, gk, out);
  DT_RELEASE_ALL(zeros, idx, gk);
  return st;
}
DT_BACKWARD_INPUT0(extremum_dim, extremum_dim_grad)
