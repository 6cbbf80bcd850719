/* Backward formulas of the activations and the other non-linear pointwise ops (sqrt, rsqrt,
 * tanh, sigmoid, silu, gelu in both forms, abs, maximum/minimum, pow.Tensor_Tensor), written
 * with ops. Each derivative is computed from the saved input or output with pointwise ops,
 * then multiplied by the output's gradient and reduced to the input's shape and dtype. */
#include <math.h>

#include "autograd/autograd_impl.h"
#include "autograd/backward_formula.h"
#include "dtensor/ops.h"

/* *out = g * d, consuming d (NULL after a failure st, which is returned as it is). */
static dt_status times(dt_tensor *g, dt_tensor *d, dt_status st, dt_tensor **out) {
  if (!st) st = dt_mul(g, d, out);
  dt_tensor_release(d);
  return st;
}

/* A bool mask as a 0/1 tensor of dtype like: consumes mask. */
static dt_status mask_as(dt_tensor *mask, dt_dtype dtype, dt_status st, dt_tensor **out) {
  *out = NULL;
  if (!st) st = dt_to(mask, dtype, out);
  dt_tensor_release(mask);
  return st;
}

/* 1 - s for a tensor s. */
static dt_status one_minus(dt_tensor *s, dt_tensor **out) {
  dt_tensor *n = NULL;
  dt_status st = dt_neg(s, &n);
  if (!st) st = dt_add_scalar(n, 1.0, out);
  dt_tensor_release(n);
  return st;
}

/* d sqrt(x) = 0.5 / sqrt(x): (g / y) 0.5 from the saved output. */
static dt_status sqrt_grad(const dt_backward_ctx *ctx, dt_tensor *g, dt_tensor **out) {
  dt_tensor *q = NULL;
  dt_status st = dt_div(g, ctx->call->outputs[0], &q);
  if (!st) st = dt_mul_scalar(q, 0.5, out);
  dt_tensor_release(q);
  return st;
}
DT_BACKWARD_INPUT0(sqrt, sqrt_grad)

/* y = x^(-1/2): dy/dx = -0.5 x^(-3/2) = -0.5 y^3. */
static dt_status rsqrt_grad(const dt_backward_ctx *ctx, dt_tensor *g, dt_tensor **out) {
  dt_tensor *cube = NULL, *d = NULL;
  dt_status st = dt_pow_scalar(ctx->call->outputs[0], 3.0, &cube);
  if (!st) st = dt_mul_scalar(cube, -0.5, &d);
  dt_tensor_release(cube);
  return times(g, d, st, out);
}
DT_BACKWARD_INPUT0(rsqrt, rsqrt_grad)

/* dy/dx = 1 - y^2. */
static dt_status tanh_grad(const dt_backward_ctx *ctx, dt_tensor *g, dt_tensor **out) {
  dt_tensor *y = ctx->call->outputs[0], *sq = NULL, *d = NULL;
  dt_status st = dt_mul(y, y, &sq);
  if (!st) st = one_minus(sq, &d);
  dt_tensor_release(sq);
  return times(g, d, st, out);
}
DT_BACKWARD_INPUT0(tanh, tanh_grad)

/* dy/dx = y (1 - y). */
static dt_status sigmoid_grad(const dt_backward_ctx *ctx, dt_tensor *g, dt_tensor **out) {
  dt_tensor *y = ctx->call->outputs[0], *c = NULL, *d = NULL;
  dt_status st = one_minus(y, &c);
  if (!st) st = dt_mul(y, c, &d);
  dt_tensor_release(c);
  return times(g, d, st, out);
}
DT_BACKWARD_INPUT0(sigmoid, sigmoid_grad)

/* y = x s(x): dy/dx = s (1 + x (1 - s)). */
static dt_status silu_grad(const dt_backward_ctx *ctx, dt_tensor *g, dt_tensor **out) {
  dt_tensor *x = ctx->call->inputs[0], *s = NULL, *c = NULL, *xc = NULL, *e = NULL, *d = NULL;
  dt_status st = dt_sigmoid(x, &s);
  if (!st) st = one_minus(s, &c);
  if (!st) st = dt_mul(x, c, &xc);
  if (!st) st = dt_add_scalar(xc, 1.0, &e);
  if (!st) st = dt_mul(s, e, &d);
  DT_RELEASE_ALL(s, c, xc, e);
  return times(g, d, st, out);
}
DT_BACKWARD_INPUT0(silu, silu_grad)

/* gelu: one op, gelu_backward (grad * gelu'(x) in one pass over x; the exact form's
 * Phi(x) + x phi(x), or the tanh form's 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2)). */
static dt_status gelu_grad(const dt_backward_ctx *ctx, dt_tensor *g, dt_tensor **out) {
  return dt__gelu_backward(g, ctx->call->inputs[0], ctx->call->flags, out);
}
DT_BACKWARD_INPUT0(gelu, gelu_grad)

/* d|x| = sign(x) dx, 0 at x == 0 (as PyTorch). */
static dt_status abs_grad(const dt_backward_ctx *ctx, dt_tensor *g, dt_tensor **out) {
  dt_tensor *x = ctx->call->inputs[0], *gt = NULL, *lt = NULL, *pos = NULL, *neg = NULL, *d = NULL;
  dt_status st = dt_gt_scalar(x, 0.0, &gt);
  st = mask_as(gt, g->dtype, st, &pos);
  if (!st) st = dt_lt_scalar(x, 0.0, &lt);
  st = mask_as(lt, g->dtype, st, &neg);
  if (!st) st = dt_sub(pos, neg, &d);
  DT_RELEASE_ALL(pos, neg);
  return times(g, d, st, out);
}
DT_BACKWARD_INPUT0(abs, abs_grad)

/* maximum/minimum: the gradient goes to the selected input, half to each where they tie
 * (PyTorch's rule). wins(a, b) is a > b for maximum and a < b for minimum. */
static dt_status select_weight(dt_tensor *a, dt_tensor *b, bool maximum, dt_dtype dtype,
                               dt_tensor **out) {
  dt_tensor *win = NULL, *tie = NULL, *wf = NULL, *tf = NULL, *half = NULL;
  dt_status st = maximum ? dt_gt(a, b, &win) : dt_lt(a, b, &win);
  st = mask_as(win, dtype, st, &wf);
  if (!st) st = dt_eq(a, b, &tie);
  st = mask_as(tie, dtype, st, &tf);
  if (!st) st = dt_mul_scalar(tf, 0.5, &half);
  if (!st) st = dt_add(wf, half, out);
  DT_RELEASE_ALL(wf, tf, half);
  return st;
}

static dt_status maximum_minimum_grad(const dt_backward_ctx *ctx, dt_tensor *g, int slot,
                                      dt_tensor **out) {
  bool maximum = dt__op_table[ctx->call->op].func == DT_BINARY_MAXIMUM;
  dt_tensor *mine = ctx->call->inputs[slot], *other = ctx->call->inputs[1 - slot], *w = NULL;
  dt_status st = select_weight(mine, other, maximum, g->dtype, &w);
  return times(g, w, st, out);
}
DT_BACKWARD_SLOTS(maximum_minimum, maximum_minimum_grad)

/* out = a^b. da = b a^(b-1) (0 where b == 0); db = out log(a) (0 where a == 0 and b >= 0),
 * the masks PyTorch applies so that 0^0 and 0^b give finite gradients. */
static dt_status pow_grad(const dt_backward_ctx *ctx, dt_tensor *g, int slot, dt_tensor **out) {
  dt_tensor *a = ctx->call->inputs[0], *b = ctx->call->inputs[1];
  dt_status st = DT_OK;
  if (slot == 0) {
    dt_tensor *bm1 = NULL, *p = NULL, *bp = NULL, *zero = NULL, *d = NULL;
    st = dt_sub_scalar(b, 1.0, &bm1);
    if (!st) st = dt_pow(a, bm1, &p);
    if (!st) st = dt_mul(b, p, &bp);
    if (!st) st = dt_eq_scalar(b, 0.0, &zero);
    if (!st) st = dt_masked_fill(bp, zero, 0.0, &d);
    DT_RELEASE_ALL(bm1, p, bp, zero);
    return times(g, d, st, out);
  }
  dt_tensor *la = NULL, *ol = NULL, *az = NULL, *bn = NULL, *azf = NULL, *bnf = NULL, *both = NULL,
            *mask = NULL, *d = NULL;
  st = dt_log(a, &la);
  if (!st) st = dt_mul(ctx->call->outputs[0], la, &ol);
  if (!st) st = dt_eq_scalar(a, 0.0, &az);
  st = mask_as(az, g->dtype, st, &azf);
  if (!st) st = dt_ge_scalar(b, 0.0, &bn);
  st = mask_as(bn, g->dtype, st, &bnf);
  if (!st) st = dt_mul(azf, bnf, &both);
  if (!st) st = dt_gt_scalar(both, 0.5, &mask);
  if (!st) st = dt_masked_fill(ol, mask, 0.0, &d);
  DT_RELEASE_ALL(la, ol, azf, bnf, both, mask);
  return times(g, d, st, out);
}
DT_BACKWARD_SLOTS(pow, pow_grad)

/* where(cond, a, b): a's gradient where cond holds, b's elsewhere; cond has none. */
dt_status dt__backward_where(const dt_backward_ctx *ctx, dt_tensor *const *grad_outputs,
                             dt_tensor **grad_inputs) {
  dt_tensor *g = grad_outputs[0];
  if (!g) return DT_OK;
  dt_tensor *cond = ctx->call->inputs[0], *zeros = NULL;
  dt_status st = dt_zeros_like(g, &zeros);
  for (int slot = 1; slot <= 2 && !st; slot++) {
    if (!ctx->needs_grad[slot]) continue;
    dt_tensor *t = NULL;
    st = slot == 1 ? dt_where(cond, g, zeros, &t) : dt_where(cond, zeros, g, &t);
    if (!st) st = dt__grad_reduce_to(t, &ctx->input_metas[slot], &grad_inputs[slot]);
    dt_tensor_release(t);
  }
  dt_tensor_release(zeros);
  return st;
}

/* masked_fill: the filled elements get no gradient; the mask has none. */
static dt_status masked_fill_grad(const dt_backward_ctx *ctx, dt_tensor *g, dt_tensor **out) {
  return dt_masked_fill(g, ctx->call->inputs[1], 0.0, out);
}
DT_BACKWARD_INPUT0(masked_fill, masked_fill_grad)
