/* Backward formulas of matrix products: d(a @ b) = g @ b^T and a^T @ g, with batch dims
 * summed back to each operand's shape (matmul broadcasts them). */
#include "autograd/autograd_impl.h"
#include "dtensor/ops.h"

static dt_status transposed(dt_tensor *t, dt_tensor **out) { return dt_transpose(t, -2, -1, out); }

/* x @ y^T or x^T @ y through matmul. */
static dt_status product(dt_tensor *x, bool tx, dt_tensor *y, bool ty, dt_tensor **out) {
  dt_tensor *xt = NULL, *yt = NULL;
  dt_status st = tx ? transposed(x, &xt) : DT_OK;
  if (!st && ty) st = transposed(y, &yt);
  if (!st) st = dt_matmul(tx ? xt : x, ty ? yt : y, out);
  DT_RELEASE_ALL(xt, yt);
  return st;
}

/* out = t * scale (a retained t when scale is 1). */
static dt_status scaled(dt_tensor *t, double scale, dt_tensor **out) {
  if (scale == 1.0) {
    *out = dt_tensor_retain(t);
    return DT_OK;
  }
  return dt_mul_scalar(t, scale, out);
}

/* The gradient of a matrix product's operands, for operands of 2 or more dims (1-D ones are
 * unsqueezed by the caller): ga = reduce_to(g @ b^T), gb = reduce_to(a^T @ g). */
static dt_status product_grads(dt_tensor *g, dt_tensor *a, const dt_tensor_meta *ma, bool need_a,
                               dt_tensor *b, const dt_tensor_meta *mb, bool need_b, double scale,
                               dt_tensor **ga, dt_tensor **gb) {
  dt_status st = DT_OK;
  if (need_a) {
    dt_tensor *p = NULL, *s = NULL;
    st = product(g, false, b, true, &p);
    if (!st) st = scaled(p, scale, &s);
    if (!st) st = dt__grad_reduce_to(s, ma, ga);
    DT_RELEASE_ALL(p, s);
  }
  if (!st && need_b) {
    dt_tensor *p = NULL, *s = NULL;
    st = product(a, true, g, false, &p);
    if (!st) st = scaled(p, scale, &s);
    if (!st) st = dt__grad_reduce_to(s, mb, gb);
    DT_RELEASE_ALL(p, s);
  }
  return st;
}

dt_status dt__backward_mm(const dt_backward_ctx *ctx, dt_tensor *const *grad_outputs,
                          dt_tensor **grad_inputs) {
  if (!grad_outputs[0]) return DT_OK;
  return product_grads(grad_outputs[0], ctx->call->inputs[0], &ctx->input_metas[0],
                       ctx->needs_grad[0], ctx->call->inputs[1], &ctx->input_metas[1],
                       ctx->needs_grad[1], 1.0, &grad_inputs[0], &grad_inputs[1]);
}

static dt_tensor_meta unsqueezed_meta(const dt_tensor_meta *m, int at) {
  dt_tensor_meta r = *m;
  r.ndim = m->ndim + 1;
  int pos = at < 0 ? r.ndim + at : at;
  for (int i = r.ndim - 1; i > pos; i--) r.shape[i] = r.shape[i - 1];
  r.shape[pos] = 1;
  return r;
}

/* An operand x of matmul as a matrix: a 1-D one unsqueezed at `at` (with its meta), and the
 * gradient *g given back, at g_at, the dim the product dropped; others as they are. */
static dt_status as_matrix(dt_tensor *x, const dt_tensor_meta *m, int at, int g_at, dt_tensor **x2,
                           dt_tensor_meta *m2, dt_tensor **g) {
  *m2 = *m;
  if (m->ndim != 1) {
    *x2 = dt_tensor_retain(x);
    return DT_OK;
  }
  *m2 = unsqueezed_meta(m, at);
  dt_tensor *u = NULL;
  dt_status st = dt_unsqueeze(x, at, x2);
  if (!st) st = dt_unsqueeze(*g, g_at, &u);
  dt_tensor_release(*g);
  *g = u;
  return st;
}

/* matmul (and bmm): a 1-D a is [1, k], a 1-D b is [k, 1], and g gets the dims the product
 * dropped back; the operands' gradients are then reshaped to their own shapes. */
dt_status dt__backward_matmul(const dt_backward_ctx *ctx, dt_tensor *const *grad_outputs,
                              dt_tensor **grad_inputs) {
  dt_tensor *g = grad_outputs[0];
  if (!g) return DT_OK;
  dt_tensor *a = ctx->call->inputs[0], *b = ctx->call->inputs[1];
  const dt_tensor_meta *ma = &ctx->input_metas[0], *mb = &ctx->input_metas[1];
  dt_tensor *a2 = NULL, *b2 = NULL, *g2 = dt_tensor_retain(g), *ga = NULL, *gb = NULL;
  dt_tensor_meta ma2, mb2;
  dt_status st = as_matrix(b, mb, 1, -1, &b2, &mb2, &g2);
  if (!st) st = as_matrix(a, ma, 0, -2, &a2, &ma2, &g2);
  if (!st) {
    st = product_grads(g2, a2, &ma2, ctx->needs_grad[0], b2, &mb2, ctx->needs_grad[1], 1.0, &ga,
                       &gb);
  }
  if (!st && ga) st = dt_reshape(ga, ma->ndim, ma->shape, &grad_inputs[0]);
  if (!st && gb) st = dt_reshape(gb, mb->ndim, mb->shape, &grad_inputs[1]);
  DT_RELEASE_ALL(a2, b2, g2, ga, gb);
  if (st) {
    DT_RELEASE_ALL(grad_inputs[0], grad_inputs[1]);
    grad_inputs[0] = grad_inputs[1] = NULL;
  }
  return st;
}

/* linear: y = x @ w^T + bias. gx = g @ w; gw = g2^T @ x2 over the flattened batch; gbias =
 * g summed to [out]. */
dt_status dt__backward_linear(const dt_backward_ctx *ctx, dt_tensor *const *grad_outputs,
                              dt_tensor **grad_inputs) {
  dt_tensor *g = grad_outputs[0];
  if (!g) return DT_OK;
  dt_tensor *x = ctx->call->inputs[0], *w = ctx->call->inputs[1];
  const dt_tensor_meta *mx = &ctx->input_metas[0], *mw = &ctx->input_metas[1];
  dt_status st = DT_OK;
  if (ctx->needs_grad[0]) {
    dt_tensor *p = NULL;
    st = dt_matmul(g, w, &p);
    if (!st) st = dt__grad_cast_to(p, mx, &grad_inputs[0]);
    dt_tensor_release(p);
  }
  if (!st && ctx->needs_grad[1]) {
    int64_t out_f = mw->shape[0], in_f = mw->shape[1];
    int64_t rows = in_f > 0 ? dt__numel(mx->ndim, mx->shape) / in_f : 0;
    dt_tensor *g2 = NULL, *x2 = NULL, *p = NULL;
    /* -1 for the rows when it is unambiguous: the same result, and a tracer (compile) sees a
     * size it can keep symbolic instead of the batch as a constant. */
    int64_t r = in_f > 0 && out_f > 0 ? -1 : rows;
    st = dt_reshape(g, 2, (int64_t[]){r, out_f}, &g2);
    if (!st) st = dt_reshape(x, 2, (int64_t[]){r, in_f}, &x2);
    if (!st) st = product(g2, true, x2, false, &p);
    if (!st) st = dt__grad_cast_to(p, mw, &grad_inputs[1]);
    DT_RELEASE_ALL(g2, x2, p);
  }
  if (!st && ctx->call->n_inputs > 2 && ctx->needs_grad[2]) {
    st = dt__grad_reduce_to(g, &ctx->input_metas[2], &grad_inputs[2]);
  }
  if (st) {
    for (int i = 0; i < 3; i++) {
      dt_tensor_release(grad_inputs[i]);
      grad_inputs[i] = NULL;
    }
  }
  return st;
}

/* addmm: out = beta * self + alpha * (mat1 @ mat2); beta in scalars[0], alpha in scalars[1]. */
dt_status dt__backward_addmm(const dt_backward_ctx *ctx, dt_tensor *const *grad_outputs,
                             dt_tensor **grad_inputs) {
  dt_tensor *g = grad_outputs[0];
  if (!g) return DT_OK;
  double beta = ctx->call->scalars[0], alpha = ctx->call->scalars[1];
  dt_status st = DT_OK;
  if (ctx->needs_grad[0]) {
    dt_tensor *s = NULL;
    st = scaled(g, beta, &s);
    if (!st) st = dt__grad_reduce_to(s, &ctx->input_metas[0], &grad_inputs[0]);
    dt_tensor_release(s);
  }
  if (!st) {
    st = product_grads(g, ctx->call->inputs[1], &ctx->input_metas[1], ctx->needs_grad[1],
                       ctx->call->inputs[2], &ctx->input_metas[2], ctx->needs_grad[2], alpha,
                       &grad_inputs[1], &grad_inputs[2]);
  }
  if (st) {
    for (int i = 0; i < 3; i++) {
      dt_tensor_release(grad_inputs[i]);
      grad_inputs[i] = NULL;
    }
  }
  return st;
}
