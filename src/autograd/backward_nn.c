/* Backward formulas of softmax, log_softmax, layer_norm, rms_norm and batch_norm (inference
 * form: the running statistics are constants), written with ops. softmax, log_softmax,
 * layer_norm and rms_norm call their fused backward ops; training batch_norm recomputes its
 * statistics from the saved input with ops rather than saving them from the kernel. */
#include "autograd/autograd_impl.h"
#include "autograd/backward_formula.h"
#include "dtensor/dist.h"
#include "dtensor/ops.h"
#include "ops/op_impl.h"

/* softmax: dx = y (g - sum(g y, dim)); log_softmax: dx = g - exp(y) sum(g, dim). Each one op,
 * softmax_backward / log_softmax_backward, from the saved output. */
static dt_status softmax_grad(const dt_backward_ctx *ctx, dt_tensor *g, dt_tensor **out) {
  return dt__softmax_backward(g, ctx->call->outputs[0], ctx->call->ints[0], false, out);
}
DT_BACKWARD_INPUT0(softmax, softmax_grad)

static dt_status log_softmax_grad(const dt_backward_ctx *ctx, dt_tensor *g, dt_tensor **out) {
  return dt__softmax_backward(g, ctx->call->outputs[0], ctx->call->ints[0], true, out);
}
DT_BACKWARD_INPUT0(log_softmax, log_softmax_grad)

/* The normalization shared by layer_norm and training batch_norm, over `dims` of x:
 *   xhat = (x - mean) rstd, rstd = 1 / sqrt(var + eps) (biased variance),
 *   dx = rstd (gy - mean(gy) - xhat mean(gy xhat)) with gy = g w (g without weight).
 * Writes xhat, and dx when dx is not NULL. */
static dt_status normalization_grads(dt_tensor *x, dt_tensor *g, dt_tensor *w, int n,
                                     const int64_t *dims, double eps, dt_tensor **xhat,
                                     dt_tensor **dx) {
  dt_tensor *mu = NULL, *xc = NULL, *sq = NULL, *var = NULL, *ve = NULL, *rstd = NULL, *gy = NULL,
            *m1 = NULL, *gx = NULL, *m2 = NULL, *xm2 = NULL, *d1 = NULL, *d2 = NULL;
  dt_status st = dt_mean_dims(x, n, dims, true, &mu);
  if (!st) st = dt_sub(x, mu, &xc);
  if (!st) st = dt_mul(xc, xc, &sq);
  if (!st) st = dt_mean_dims(sq, n, dims, true, &var);
  if (!st) st = dt_add_scalar(var, eps, &ve);
  if (!st) st = dt_rsqrt(ve, &rstd);
  if (!st) st = dt_mul(xc, rstd, xhat);
  if (!st && dx) {
    if (w) {
      st = dt_mul(g, w, &gy);
    } else {
      gy = dt_tensor_retain(g);
    }
    if (!st) st = dt_mean_dims(gy, n, dims, true, &m1);
    if (!st) st = dt_mul(gy, *xhat, &gx);
    if (!st) st = dt_mean_dims(gx, n, dims, true, &m2);
    if (!st) st = dt_mul(*xhat, m2, &xm2);
    if (!st) st = dt_sub(gy, m1, &d1);
    if (!st) st = dt_sub(d1, xm2, &d2);
    if (!st) st = dt_mul(rstd, d2, dx);
  }
  DT_RELEASE_ALL(mu, xc, sq, var, ve, rstd, gy, m1, gx, m2, xm2, d1, d2);
  return st;
}

/* g with its Partial mesh dims redistributed to x's placements there (g retained when it has
 * none, or either is local). */
static dt_status grad_like_input(dt_tensor *g, dt_tensor *x, dt_tensor **out) {
  const dt_placement *gp = dt_dist_placements(g), *xp = dt_dist_placements(x);
  int nm = gp && xp ? dt_mesh_ndim(dt_dist_mesh(g)) : 0;
  dt_placement to[DT_MESH_MAX_DIMS];
  bool moves = false;
  for (int m = 0; m < nm; m++) {
    bool partial = gp[m].kind == DT_PARTIAL && xp[m].kind != DT_PARTIAL;
    to[m] = partial ? xp[m] : gp[m];
    moves |= partial;
  }
  if (!moves) {
    *out = dt_tensor_retain(g);
    return DT_OK;
  }
  return dt_dist_redistribute(g, nm, to, out);
}

/* The gradient of an affine parameter: src (g xhat for the weight, g for the bias) summed
 * over `dims` into the parameter's shape (no dims: already shaped). */
static dt_status affine_grad(dt_tensor *src, int n, const int64_t *dims, const dt_tensor_meta *meta,
                             dt_tensor **out) {
  if (n == 0) return dt__grad_cast_to(src, meta, out);
  dt_tensor *s = NULL, *r = NULL;
  dt_status st = dt_sum_dims(src, n, dims, false, &s);
  if (!st) st = dt_reshape(s, meta->ndim, meta->shape, &r);
  if (!st) st = dt__grad_cast_to(r, meta, out);
  DT_RELEASE_ALL(s, r);
  return st;
}

/* A normalization's affine gradients: dw = sum over dims of g xhat into slot w_slot and db =
 * sum over dims of g into slot b_slot, each when that parameter is there and wants one (xhat
 * NULL: no dw). */
static dt_status affine_grads(const dt_backward_ctx *ctx, dt_tensor *g, dt_tensor *xhat, int w_slot,
                              int b_slot, int n, const int64_t *dims, dt_tensor **grad_inputs) {
  const dt_op_call *call = ctx->call;
  dt_status st = DT_OK;
  if (xhat && call->inputs[w_slot] && ctx->needs_grad[w_slot]) {
    dt_tensor *gxh = NULL;
    st = dt_mul(g, xhat, &gxh);
    if (!st) st = affine_grad(gxh, n, dims, &ctx->input_metas[w_slot], &grad_inputs[w_slot]);
    dt_tensor_release(gxh);
  }
  if (!st && call->inputs[b_slot] && ctx->needs_grad[b_slot]) {
    st = affine_grad(g, n, dims, &ctx->input_metas[b_slot], &grad_inputs[b_slot]);
  }
  return st;
}

/* The gradients of a normalization of inputs {x, weight?, bias?} (eps = scalars[0]) whose
 * statistics run over norm_dims: dx, then dw = sum of g xhat and db = sum of g over sum_dims.
 * w is the weight as it broadcasts against x (NULL: none). layer_norm and batch_norm_training
 * differ only in these dims. */
static dt_status normalization_backward(const dt_backward_ctx *ctx, dt_tensor *g_in, dt_tensor *w,
                                        int n_norm, const int64_t *norm_dims, int n_sum,
                                        const int64_t *sum_dims, dt_tensor **grad_inputs) {
  const dt_op_call *call = ctx->call;
  dt_tensor *xhat = NULL, *dx = NULL, *g = NULL;
  /* As PyTorch's layer_norm backward strategy: a Partial gradient is first brought to the
   * placements of the saved input (what the forward kernel read). The formula is linear in
   * g, so a Partial g would go through, but its reduction would then happen further down,
   * once per consumer (a row-wise linear's weight and input gradients each). */
  dt_status st = grad_like_input(g_in, call->inputs[0], &g);
  if (!st) {
    st = normalization_grads(call->inputs[0], g, w, n_norm, norm_dims, call->scalars[0], &xhat,
                             ctx->needs_grad[0] ? &dx : NULL);
  }
  if (!st && dx) st = dt__grad_cast_to(dx, &ctx->input_metas[0], &grad_inputs[0]);
  if (!st) st = affine_grads(ctx, g, xhat, 1, 2, n_sum, sum_dims, grad_inputs);
  DT_RELEASE_ALL(xhat, dx, g);
  return st;
}

/* layer_norm's three gradients by layer_norm_backward_all (one pass over g and x) where it
 * can: all three wanted, local CPU tensors (on distributed ones it would run replicated; on a
 * GPU it has no kernel). */
static bool layer_norm_all_applies(const dt_tensor *g, const dt_tensor *x, const dt_tensor *w) {
  const dt_tensor *t[] = {g, x, w};
  for (int i = 0; i < 3; i++)
    if (dt_tensor_is_distributed(t[i]) || dt_tensor_device(t[i]).kind != DT_DEVICE_CPU)
      return false;
  return true;
}

/* layer_norm and rms_norm (rms) over the last k dims (normalized_shape, eps = scalars[0];
 * inputs {x, weight?, bias?}): dx is one op (layer_norm_backward / rms_norm_backward), the
 * affine gradients another (sums over the leading dims), both from the saved input; or, for
 * layer_norm's three on local CPU tensors, layer_norm_backward_all. */
dt_status dt__backward_norm(const dt_backward_ctx *ctx, dt_tensor *const *grad_outputs,
                            dt_tensor **grad_inputs, bool rms) {
  dt_tensor *g_in = grad_outputs[0];
  if (!g_in) return DT_OK;
  const dt_op_call *call = ctx->call;
  const dt_tensor_meta *in = &ctx->input_metas[0];
  /* normalized_shape: in int_list as the caller gave it (infer copies it to ints only on
   * the local path). */
  int k = call->int_list ? call->n_int_list : call->n_ints;
  const int64_t *shape = in->shape + in->ndim - k;
  dt_tensor *x = call->inputs[0], *w = call->inputs[1], *b = rms ? NULL : call->inputs[2];
  bool want_w = w && ctx->needs_grad[1], want_b = b && ctx->needs_grad[2];
  dt_tensor *g = NULL, *dx = NULL, *dw = NULL, *db = NULL;
  dt_status st = grad_like_input(g_in, x, &g);
  if (!st && ctx->needs_grad[0] && want_w && want_b && layer_norm_all_applies(g, x, w)) {
    st = dt__layer_norm_backward_all(g, x, k, shape, w, call->scalars[0], &dx, &dw, &db);
    if (!st) st = dt__grad_cast_to(dx, in, &grad_inputs[0]);
    if (!st) st = dt__grad_cast_to(dw, &ctx->input_metas[1], &grad_inputs[1]);
    if (!st) st = dt__grad_cast_to(db, &ctx->input_metas[2], &grad_inputs[2]);
    DT_RELEASE_ALL(g, dx, dw, db);
    return st;
  }
  if (!st && ctx->needs_grad[0]) {
    st = dt__norm_backward_input(rms, g, x, k, shape, w, call->scalars[0], &dx);
    if (!st) st = dt__grad_cast_to(dx, in, &grad_inputs[0]);
  }
  if (!st && (want_w || want_b)) {
    st = dt__norm_backward_affine(rms, g, x, k, shape, call->scalars[0], &dw, rms ? NULL : &db);
    if (!st && want_w) st = dt__grad_cast_to(dw, &ctx->input_metas[1], &grad_inputs[1]);
    if (!st && want_b) st = dt__grad_cast_to(db, &ctx->input_metas[2], &grad_inputs[2]);
  }
  DT_RELEASE_ALL(g, dx, dw, db);
  return st;
}

dt_status dt__backward_layer_norm(const dt_backward_ctx *ctx, dt_tensor *const *grad_outputs,
                                  dt_tensor **grad_inputs) {
  return dt__backward_norm(ctx, grad_outputs, grad_inputs, false);
}

/* A channel vector [C] viewed as [1, C, 1, ...] against an input of ndim dims. */
static dt_status channel_view(dt_tensor *v, const dt_tensor_meta *in, dt_tensor **out) {
  int64_t shape[DT_MAX_DIMS];
  for (int d = 0; d < in->ndim; d++) shape[d] = d == 1 ? in->shape[1] : 1;
  return dt_reshape(v, in->ndim, shape, out);
}

/* Batch norm's formulas (driver of its two forms): the form's gradients from g, with the
 * input's meta and the dims other than the channel dim 1, over which the affine gradients are
 * summed. */
typedef dt_status (*batch_norm_form)(const dt_backward_ctx *ctx, dt_tensor *g,
                                     const dt_tensor_meta *in, int n_other, const int64_t *other,
                                     dt_tensor **grad_inputs);

static dt_status batch_norm_backward(const dt_backward_ctx *ctx, dt_tensor *const *grad_outputs,
                                     dt_tensor **grad_inputs, batch_norm_form form) {
  dt_tensor *g = grad_outputs[0];
  if (!g) return DT_OK;
  const dt_tensor_meta *in = &ctx->input_metas[0];
  int64_t other[DT_MAX_DIMS];
  int n_other = 0;
  for (int d = 0; d < in->ndim; d++) {
    if (d != 1) other[n_other++] = d;
  }
  return form(ctx, g, in, n_other, other, grad_inputs);
}

/* batch_norm, inference form (inputs {x, running_mean, running_var, weight?, bias?}):
 * y = (x - rm) rstd w + b with rstd = 1 / sqrt(rv + eps) per channel (dim 1). The running
 * statistics are constants: they get no gradient.
 *   dx = g rstd w, dw = sum over dims != 1 of g xhat, db = sum over dims != 1 of g. */
static dt_status batch_norm_inference(const dt_backward_ctx *ctx, dt_tensor *g,
                                      const dt_tensor_meta *in, int n_other, const int64_t *other,
                                      dt_tensor **grad_inputs) {
  const dt_op_call *call = ctx->call;
  dt_tensor *w = call->inputs[3];
  dt_tensor *ve = NULL, *rstd = NULL, *scale = NULL, *scale_b = NULL, *t = NULL, *rm_b = NULL,
            *xc = NULL, *rstd_b = NULL, *xhat = NULL;
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
    st = channel_view(call->inputs[1], in, &rm_b);
    if (!st) st = dt_sub(call->inputs[0], rm_b, &xc);
    if (!st) st = channel_view(rstd, in, &rstd_b);
    if (!st) st = dt_mul(xc, rstd_b, &xhat);
  }
  if (!st) st = affine_grads(ctx, g, xhat, 3, 4, n_other, other, grad_inputs);
  DT_RELEASE_ALL(ve, rstd, scale, scale_b, t, rm_b, xc, rstd_b, xhat);
  return st;
}

DT_BACKWARD_FORMULA(batch_norm, batch_norm_backward, batch_norm_inference)

/* embedding: the weight's gradient is the output's gradient rows added into the rows the
 * indices picked (repeated indices accumulate): one op, embedding_backward, which writes the
 * zeros and accumulates in one pass (the weight gives it only the gradient's geometry). The
 * indices are not differentiable. */
static dt_status embedding_grad(const dt_backward_ctx *ctx, dt_tensor *g, dt_tensor **out) {
  return dt__embedding_backward(ctx->call->inputs[0], ctx->call->inputs[1], g, out);
}
DT_BACKWARD_INPUT0(embedding, embedding_grad)

/* batch_norm_training (inputs {x, weight?, bias?}, eps = scalars[0]): the batch statistics
 * are functions of x, so dx is the normalization's full gradient over every dim but the
 * channel dim 1; dw = sum of g xhat and db = sum of g over those dims. */
static dt_status batch_norm_training(const dt_backward_ctx *ctx, dt_tensor *g,
                                     const dt_tensor_meta *in, int n_other, const int64_t *other,
                                     dt_tensor **grad_inputs) {
  dt_tensor *w_b = NULL, *w = ctx->call->inputs[1];
  dt_status st = w ? channel_view(w, in, &w_b) : DT_OK;
  if (!st) st = normalization_backward(ctx, g, w_b, n_other, other, n_other, other, grad_inputs);
  dt_tensor_release(w_b);
  return st;
}
DT_BACKWARD_FORMULA(batch_norm_training, batch_norm_backward, batch_norm_training)
