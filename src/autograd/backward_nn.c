/* Backward formulas of softmax, log_softmax, layer_norm and batch_norm (inference form:
 * the running statistics are constants), written with ops. The normalizations recompute
 * their statistics from the saved input with ops rather than saving them from the kernel. */
#include "autograd/autograd_impl.h"
#include "dtensor/ops.h"

static void release_all(dt_tensor **t, size_t n) {
  for (size_t i = 0; i < n; i++) dt_tensor_release(t[i]);
}

/* softmax: dx = y (g - sum(g y, dim)). */
dt_status dt__backward_softmax(const dt_backward_ctx *ctx, dt_tensor *const *grad_outputs,
                               dt_tensor **grad_inputs) {
  dt_tensor *g = grad_outputs[0];
  if (!g) return DT_OK;
  dt_tensor *y = ctx->call->outputs[0], *gy = NULL, *s = NULL, *diff = NULL, *t = NULL;
  int64_t dim = ctx->call->ints[0];
  dt_status st = dt_mul(g, y, &gy);
  if (!st) st = dt_sum_dims(gy, 1, &dim, true, &s);
  if (!st) st = dt_sub(g, s, &diff);
  if (!st) st = dt_mul(y, diff, &t);
  if (!st) st = dt__grad_cast_to(t, &ctx->input_metas[0], &grad_inputs[0]);
  dt_tensor *all[] = {gy, s, diff, t};
  release_all(all, 4);
  return st;
}

/* log_softmax: dx = g - exp(y) sum(g, dim). */
dt_status dt__backward_log_softmax(const dt_backward_ctx *ctx, dt_tensor *const *grad_outputs,
                                   dt_tensor **grad_inputs) {
  dt_tensor *g = grad_outputs[0];
  if (!g) return DT_OK;
  dt_tensor *p = NULL, *s = NULL, *ps = NULL, *t = NULL;
  int64_t dim = ctx->call->ints[0];
  dt_status st = dt_exp(ctx->call->outputs[0], &p);
  if (!st) st = dt_sum_dims(g, 1, &dim, true, &s);
  if (!st) st = dt_mul(p, s, &ps);
  if (!st) st = dt_sub(g, ps, &t);
  if (!st) st = dt__grad_cast_to(t, &ctx->input_metas[0], &grad_inputs[0]);
  dt_tensor *all[] = {p, s, ps, t};
  release_all(all, 4);
  return st;
}

/* layer_norm over the last k dims (ints[0..k) = normalized_shape, eps = scalars[0]):
 *   xhat = (x - mean) rstd, gy = g w (g without weight),
 *   dx = rstd (gy - mean(gy) - xhat mean(gy xhat)),
 *   dw = sum over the leading dims of g xhat, db = sum over the leading dims of g. */
dt_status dt__backward_layer_norm(const dt_backward_ctx *ctx, dt_tensor *const *grad_outputs,
                                  dt_tensor **grad_inputs) {
  dt_tensor *g = grad_outputs[0];
  if (!g) return DT_OK;
  const dt_op_call *call = ctx->call;
  const dt_tensor_meta *in = &ctx->input_metas[0];
  /* normalized_shape: in int_list as the caller gave it (infer copies it to ints only on
   * the local path). */
  int k = call->int_list ? call->n_int_list : call->n_ints, lead = in->ndim - k;
  int64_t norm_dims[DT_MAX_DIMS], lead_dims[DT_MAX_DIMS];
  for (int i = 0; i < k; i++) norm_dims[i] = lead + i;
  for (int i = 0; i < lead; i++) lead_dims[i] = i;
  dt_tensor *x = call->inputs[0], *w = call->inputs[1];
  dt_tensor *mu = NULL, *xc = NULL, *sq = NULL, *var = NULL, *ve = NULL, *rstd = NULL, *xhat = NULL,
            *gy = NULL, *m1 = NULL, *gx = NULL, *m2 = NULL, *xm2 = NULL, *d1 = NULL, *d2 = NULL,
            *dx = NULL, *gxh = NULL;
  dt_status st = dt_mean_dims(x, k, norm_dims, true, &mu);
  if (!st) st = dt_sub(x, mu, &xc);
  if (!st) st = dt_mul(xc, xc, &sq);
  if (!st) st = dt_mean_dims(sq, k, norm_dims, true, &var);
  if (!st) st = dt_add_scalar(var, call->scalars[0], &ve);
  if (!st) st = dt_rsqrt(ve, &rstd);
  if (!st) st = dt_mul(xc, rstd, &xhat);
  if (!st && ctx->needs_grad[0]) {
    st = w ? dt_mul(g, w, &gy) : DT_OK;
    if (!w) gy = dt_tensor_retain(g);
    if (!st) st = dt_mean_dims(gy, k, norm_dims, true, &m1);
    if (!st) st = dt_mul(gy, xhat, &gx);
    if (!st) st = dt_mean_dims(gx, k, norm_dims, true, &m2);
    if (!st) st = dt_mul(xhat, m2, &xm2);
    if (!st) st = dt_sub(gy, m1, &d1);
    if (!st) st = dt_sub(d1, xm2, &d2);
    if (!st) st = dt_mul(rstd, d2, &dx);
    if (!st) st = dt__grad_cast_to(dx, &ctx->input_metas[0], &grad_inputs[0]);
  }
  /* The affine parameters' gradients: summed over the leading dims (none: already shaped). */
  for (int slot = 1; slot <= 2 && !st; slot++) {
    if (!call->inputs[slot] || !ctx->needs_grad[slot]) continue;
    dt_tensor *src = g;
    if (slot == 1) {
      st = dt_mul(g, xhat, &gxh);
      src = gxh;
    }
    if (st) break;
    if (lead == 0) {
      st = dt__grad_cast_to(src, &ctx->input_metas[slot], &grad_inputs[slot]);
    } else {
      dt_tensor *s = NULL;
      st = dt_sum_dims(src, lead, lead_dims, false, &s);
      if (!st) st = dt__grad_cast_to(s, &ctx->input_metas[slot], &grad_inputs[slot]);
      dt_tensor_release(s);
    }
  }
  dt_tensor *all[] = {mu, xc, sq, var, ve, rstd, xhat, gy, m1, gx, m2, xm2, d1, d2, dx, gxh};
  release_all(all, sizeof all / sizeof all[0]);
  return st;
}

/* A channel vector [C] viewed as [1, C, 1, ...] against an input of ndim dims. */
static dt_status channel_view(dt_tensor *v, const dt_tensor_meta *in, dt_tensor **out) {
  int64_t shape[DT_MAX_DIMS];
  for (int d = 0; d < in->ndim; d++) shape[d] = d == 1 ? in->shape[1] : 1;
  return dt_reshape(v, in->ndim, shape, out);
}

/* batch_norm, inference form (inputs {x, running_mean, running_var, weight?, bias?}):
 * y = (x - rm) rstd w + b with rstd = 1 / sqrt(rv + eps) per channel (dim 1). The running
 * statistics are constants: they get no gradient.
 *   dx = g rstd w, dw = sum over dims != 1 of g xhat, db = sum over dims != 1 of g. */
dt_status dt__backward_batch_norm(const dt_backward_ctx *ctx, dt_tensor *const *grad_outputs,
                                  dt_tensor **grad_inputs) {
  dt_tensor *g = grad_outputs[0];
  if (!g) return DT_OK;
  const dt_op_call *call = ctx->call;
  const dt_tensor_meta *in = &ctx->input_metas[0];
  int64_t other[DT_MAX_DIMS];
  int n_other = 0;
  for (int d = 0; d < in->ndim; d++) {
    if (d != 1) other[n_other++] = d;
  }
  dt_tensor *w = call->inputs[3];
  dt_tensor *ve = NULL, *rstd = NULL, *scale = NULL, *scale_b = NULL, *t = NULL, *rm_b = NULL,
            *xc = NULL, *rstd_b = NULL, *xhat = NULL, *gxh = NULL;
  dt_status st = dt_add_scalar(call->inputs[2], call->scalars[0], &ve);
  if (!st) st = dt_rsqrt(ve, &rstd);
  if (!st && ctx->needs_grad[0]) {
    if (w) {
      st = dt_mul(rstd, w, &scale);
    } else {
      scale = dt_tensor_retain(rstd);
    }
    if (!st) st = channel_view(scale, in, &scale_b);
    if (!st) st = dt_mul(g, scale_b, &t);
    if (!st) st = dt__grad_cast_to(t, in, &grad_inputs[0]);
  }
  if (!st && w && ctx->needs_grad[3]) {
    dt_tensor *s = NULL;
    st = channel_view(call->inputs[1], in, &rm_b);
    if (!st) st = dt_sub(call->inputs[0], rm_b, &xc);
    if (!st) st = channel_view(rstd, in, &rstd_b);
    if (!st) st = dt_mul(xc, rstd_b, &xhat);
    if (!st) st = dt_mul(g, xhat, &gxh);
    if (!st) st = dt_sum_dims(gxh, n_other, other, false, &s);
    if (!st) st = dt__grad_cast_to(s, &ctx->input_metas[3], &grad_inputs[3]);
    dt_tensor_release(s);
  }
  if (!st && call->inputs[4] && ctx->needs_grad[4]) {
    dt_tensor *s = NULL;
    st = dt_sum_dims(g, n_other, other, false, &s);
    if (!st) st = dt__grad_cast_to(s, &ctx->input_metas[4], &grad_inputs[4]);
    dt_tensor_release(s);
  }
  dt_tensor *all[] = {ve, rstd, scale, scale_b, t, rm_b, xc, rstd_b, xhat, gxh};
  release_all(all, sizeof all / sizeof all[0]);
  return st;
}

/* embedding: the weight's gradient is the output's gradient rows added into the rows the
 * indices picked (repeated indices accumulate): scatter_add along dim 0 of zeros like the
 * weight. The indices are not differentiable. */
dt_status dt__backward_embedding(const dt_backward_ctx *ctx, dt_tensor *const *grad_outputs,
                                 dt_tensor **grad_inputs) {
  dt_tensor *g = grad_outputs[0];
  if (!g || !ctx->needs_grad[0]) return DT_OK;
  const dt_tensor_meta *w = &ctx->input_metas[0], *idx = &ctx->input_metas[1];
  int64_t n = dt__numel(idx->ndim, idx->shape), d = w->shape[1];
  dt_tensor *zeros = NULL, *rows = NULL, *col = NULL, *index = NULL, *g2 = NULL, *t = NULL;
  dt_status st = dt_zeros_like(ctx->call->inputs[0], &zeros);
  if (!st) st = dt_reshape(ctx->call->inputs[1], 2, (int64_t[]){n, 1}, &col);
  if (!st) st = dt_expand(col, 2, (int64_t[]){n, d}, &index);
  if (!st) st = dt_reshape(g, 2, (int64_t[]){n, d}, &g2);
  if (!st) st = dt_scatter_add(zeros, 0, index, g2, &t);
  if (!st) st = dt__grad_cast_to(t, w, &grad_inputs[0]);
  dt_tensor *all[] = {zeros, rows, col, index, g2, t};
  release_all(all, sizeof all / sizeof all[0]);
  return st;
}
