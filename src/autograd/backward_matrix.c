/* Backward formulas of matrix products: d(a @ b) = g @ b^T and a^T @ g, with batch dims
 * summed back to each operand's shape (matmul broadcasts them). */
#include "autograd/autograd_impl.h"
#include "autograd/backward_formula.h"
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

/* The gradient of a matrix product a @ b's operand (slot 0: a, 1: b) before reduce_to, for
 * operands of 2 or more dims (1-D ones are unsqueezed by the caller): scale (g @ b^T) or
 * scale (a^T @ g). */
static dt_status operand_grad(dt_tensor *g, dt_tensor *a, dt_tensor *b, int slot, double scale,
                              dt_tensor **out) {
  dt_tensor *p = NULL;
  dt_status st = slot == 0 ? product(g, false, b, true, &p) : product(a, true, g, false, &p);
  if (!st) st = scaled(p, scale, out);
  dt_tensor_release(p);
  return st;
}

static dt_status mm_grad(const dt_backward_ctx *ctx, dt_tensor *g, int slot, dt_tensor **out) {
  return operand_grad(g, ctx->call->inputs[0], ctx->call->inputs[1], slot, 1.0, out);
}
DT_BACKWARD_SLOTS(mm, mm_grad)

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
 * dropped back; the operand's gradient is then reshaped to its own shape. */
static dt_status matmul_grad(const dt_backward_ctx *ctx, dt_tensor *g, int slot, dt_tensor **out) {
  const dt_tensor_meta *ma = &ctx->input_metas[0], *mb = &ctx->input_metas[1];
  const dt_tensor_meta *m = &ctx->input_metas[slot];
  dt_tensor *a2 = NULL, *b2 = NULL, *g2 = dt_tensor_retain(g), *p = NULL, *r = NULL;
  dt_tensor_meta ma2, mb2;
  dt_status st = as_matrix(ctx->call->inputs[1], mb, 1, -1, &b2, &mb2, &g2);
  if (!st) st = as_matrix(ctx->call->inputs[0], ma, 0, -2, &a2, &ma2, &g2);
  if (!st) st = operand_grad(g2, a2, b2, slot, 1.0, &p);
  if (!st) st = dt__grad_reduce_to(p, slot == 0 ? &ma2 : &mb2, &r);
  if (!st) st = dt_reshape(r, m->ndim, m->shape, out);
  DT_RELEASE_ALL(a2, b2, g2, p, r);
  return st;
}
DT_BACKWARD_SLOTS(matmul, matmul_grad)

/* linear: y = x @ w^T + bias. gx = g @ w; gw = g2^T @ x2 over the flattened batch; gbias =
 * g summed to [out]. */
static dt_status linear_grad(const dt_backward_ctx *ctx, dt_tensor *g, int slot, dt_tensor **out) {
  dt_tensor *x = ctx->call->inputs[0], *w = ctx->call->inputs[1];
  if (slot == 0) return dt_matmul(g, w, out);
  if (slot == 2) return scaled(g, 1.0, out);
  const dt_tensor_meta *mx = &ctx->input_metas[0], *mw = &ctx->input_metas[1];
  int64_t out_f = mw->shape[0], in_f = mw->shape[1];
  int64_t rows = in_f > 0 ? dt__numel(mx->ndim, mx->shape) / in_f : 0;
  dt_tensor *g2 = NULL, *x2 = NULL;
  /* -1 for the rows when it is unambiguous: the same result, and a tracer (compile) sees a
   * size it can keep symbolic instead of the batch as a constant. */
  int64_t r = in_f > 0 && out_f > 0 ? -1 : rows;
  dt_status st = dt_reshape(g, 2, (int64_t[]){r, out_f}, &g2);
  if (!st) st = dt_reshape(x, 2, (int64_t[]){r, in_f}, &x2);
  if (!st) st = product(g2, true, x2, false, out);
  DT_RELEASE_ALL(g2, x2);
  return st;
}
DT_BACKWARD_SLOTS(linear, linear_grad)

/* addmm: out = beta * self + alpha * (mat1 @ mat2); beta in scalars[0], alpha in scalars[1]. */
static dt_status addmm_grad(const dt_backward_ctx *ctx, dt_tensor *g, int slot, dt_tensor **out) {
  double beta = ctx->call->scalars[0], alpha = ctx->call->scalars[1];
  if (slot == 0) return scaled(g, beta, out);
  return operand_grad(g, ctx->call->inputs[1], ctx->call->inputs[2], slot - 1, alpha, out);
}
DT_BACKWARD_SLOTS(addmm, addmm_grad)
