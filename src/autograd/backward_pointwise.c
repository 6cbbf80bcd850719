/* Backward formulas of pointwise ops, written with ops. Binary ops broadcast and promote:
 * each input's gradient is summed back to its shape and cast back to its dtype. */
#include "autograd/autograd_impl.h"
#include "autograd/backward_formula.h"
#include "autograd/size_note.h"
#include "dtensor/ops.h"

typedef dt_status (*scalar_op)(dt_tensor *a, double s, dt_tensor **out);

/* The gradient passing unchanged (but for the broadcasting and dtype dt__grad_reduce_to
 * undoes): add.Scalar, sub.Scalar, to.dtype, clone, contiguous (the pass formula). */
static dt_status unchanged(const dt_backward_ctx *ctx, dt_tensor *g, dt_tensor **out) {
  (void)ctx;
  *out = dt_tensor_retain(g);
  return DT_OK;
}
DT_BACKWARD_INPUT0(pass, unchanged)

/* No gradient reaches the input: values it had were overwritten (fill_, copy_'s self). */
static dt_status zeros(const dt_backward_ctx *ctx, dt_tensor *g, dt_tensor **out) {
  (void)ctx;
  return dt_zeros_like(g, out);
}
DT_BACKWARD_INPUT0(fill_, zeros)

static dt_status neg_grad(const dt_backward_ctx *ctx, dt_tensor *g, dt_tensor **out) {
  (void)ctx;
  return dt_neg(g, out);
}
DT_BACKWARD_INPUT0(neg, neg_grad)

/* d exp(x) = exp(x) dx: the saved output. */
static dt_status exp_grad(const dt_backward_ctx *ctx, dt_tensor *g, dt_tensor **out) {
  return dt_mul(g, ctx->call->outputs[0], out);
}
DT_BACKWARD_INPUT0(exp, exp_grad)

static dt_status log_grad(const dt_backward_ctx *ctx, dt_tensor *g, dt_tensor **out) {
  return dt_div(g, ctx->call->inputs[0], out);
}
DT_BACKWARD_INPUT0(log, log_grad)

/* The gradient flows where the output is positive (PyTorch: 0 at x == 0). */
static dt_status relu_grad(const dt_backward_ctx *ctx, dt_tensor *g, dt_tensor **out) {
  dt_tensor *mask = NULL, *fmask = NULL;
  dt_status st = dt_gt_scalar(ctx->call->outputs[0], 0.0, &mask);
  if (!st) st = dt_to(mask, g->dtype, &fmask);
  if (!st) st = dt_mul(g, fmask, out);
  DT_RELEASE_ALL(mask, fmask);
  return st;
}
DT_BACKWARD_INPUT0(relu, relu_grad)

/* add/sub (the op's binary function tells which): out = a +- alpha * b. */
static dt_status add_sub_grad(const dt_backward_ctx *ctx, dt_tensor *g, int slot, dt_tensor **out) {
  double sign = dt__op_table[ctx->call->op].func == DT_BINARY_SUB ? -1.0 : 1.0;
  double scale = slot == 0 ? 1.0 : sign * ctx->call->scalars[0];
  return scale == 1.0 ? unchanged(ctx, g, out) : dt_mul_scalar(g, scale, out);
}
DT_BACKWARD_SLOTS(add_sub, add_sub_grad)

/* out = a b: da = g b, db = g a. */
static dt_status mul_grad(const dt_backward_ctx *ctx, dt_tensor *g, int slot, dt_tensor **out) {
  return dt_mul(g, ctx->call->inputs[1 - slot], out);
}
DT_BACKWARD_SLOTS(mul, mul_grad)

/* out = a / b: da = g / b, db = -g * out / b. */
static dt_status div_grad(const dt_backward_ctx *ctx, dt_tensor *g, int slot, dt_tensor **out) {
  dt_tensor *b = ctx->call->inputs[1];
  if (slot == 0) return dt_div(g, b, out);
  dt_tensor *go = NULL, *q = NULL;
  dt_status st = dt_mul(g, ctx->call->outputs[0], &go);
  if (!st) st = dt_div(go, b, &q);
  if (!st) st = dt_neg(q, out);
  DT_RELEASE_ALL(go, q);
  return st;
}
DT_BACKWARD_SLOTS(div, div_grad)

/* mul.Scalar, div.Scalar: the forward's own binary function (the op's func) applied to g and
 * the forward's scalar. That scalar may be a size (a loss's count): a tracer reuses the
 * forward's expression for it. */
static dt_status by_forward_scalar(const dt_backward_ctx *ctx, dt_tensor *g, dt_tensor **out) {
  scalar_op op = dt__op_table[ctx->call->op].func == DT_BINARY_DIV ? dt_div_scalar : dt_mul_scalar;
  dt__size_note = (dt_size_note){.scalar_input = ctx->call->inputs[0], .scalar_op = ctx->call->op};
  dt_status st = op(g, ctx->call->scalars[0], out);
  dt__size_note = (dt_size_note){0};
  return st;
}
DT_BACKWARD_INPUT0(by_scalar, by_forward_scalar)

/* d x^s = s * x^(s-1) dx (zero for s == 0, as PyTorch). */
static dt_status pow_scalar_grad(const dt_backward_ctx *ctx, dt_tensor *g, dt_tensor **out) {
  double s = ctx->call->scalars[0];
  if (s == 0.0) return dt_zeros_like(g, out);
  dt_tensor *p = NULL, *ps = NULL;
  dt_status st = dt_pow_scalar(ctx->call->inputs[0], s - 1.0, &p);
  if (!st) st = dt_mul_scalar(p, s, &ps);
  if (!st) st = dt_mul(g, ps, out);
  DT_RELEASE_ALL(p, ps);
  return st;
}
DT_BACKWARD_INPUT0(pow_scalar, pow_scalar_grad)

/* copy_(self, src): self's old values are overwritten (zeros for its history); src was
 * broadcast and cast into self's shape and dtype, so its gradient is summed and cast back. */
static dt_status copy_grad(const dt_backward_ctx *ctx, dt_tensor *g, int slot, dt_tensor **out) {
  return slot == 0 ? zeros(ctx, g, out) : unchanged(ctx, g, out);
}
DT_BACKWARD_SLOTS(copy_, copy_grad)
