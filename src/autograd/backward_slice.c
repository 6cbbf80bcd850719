/* Backward formulas of the ops that cut or join along one dim: narrow, slice (with step),
 * select, split, split_with_sizes, chunk, cat, stack. Cutting ops put the gradient back in
 * place by concatenating it with zero blocks (cut from zeros_like of the saved input, so they
 * carry the input's placements); joining ops cut the gradient into the inputs' pieces.
 * Every size comes from the recorded global shapes, so the formulas run distributed. */
#include "autograd/autograd_impl.h"
#include "autograd/backward_formula.h"
#include "dtensor/ops.h"

/* The recorded attributes are the caller's: normalized by infer on the local path, as given
 * on the distributed path (whose infer runs on a copy). These helpers normalize both alike. */
static int norm_dim(int64_t dim, int ndim) { return (int)(dim < 0 ? dim + ndim : dim); }

/* Python's start of a slice: negative counts from the end, then clamped into [0, size]. */
static int64_t norm_start(int64_t start, int64_t size) {
  if (start < 0) start = start < -size ? 0 : start + size;
  return start > size ? size : start;
}

/* The gradient of a cut: g (the piece's gradient, m = its size along dim) placed at
 * start, start + step, ... of a zero tensor like the input. With step > 1 each row of g is
 * followed by step - 1 zero rows (an interleave made by cat on a new dim and a reshape),
 * and the result is cut to the span the slice covered. */
static dt_status place(dt_tensor *input, const dt_tensor_meta *in, dt_tensor *g,
                       const dt_tensor_meta *gm, int dim, int64_t start, int64_t step,
                       dt_tensor **out) {
  *out = NULL;
  int64_t size = in->shape[dim], m = gm->shape[dim];
  dt_tensor *zeros = NULL;
  dt_status st = dt_zeros_like(input, &zeros);
  if (st) return st;
  if (m == 0) {
    *out = zeros;
    return DT_OK;
  }
  dt_tensor *mid = NULL, *made[5] = {NULL};
  int64_t span = m;
  if (step <= 1) {
    mid = dt_tensor_retain(g);
  } else {
    /* g: [..., m, ...] -> [..., m, 1, ...] next to zeros [..., m, step - 1, ...]. */
    int64_t wide[DT_MAX_DIMS + 1];
    int nd = gm->ndim + 1;
    for (int d = 0, k = 0; d < nd; d++) wide[d] = d == dim + 1 ? step - 1 : gm->shape[k++];
    int64_t flat[DT_MAX_DIMS];
    for (int d = 0; d < gm->ndim; d++) flat[d] = d == dim ? m * step : gm->shape[d];
    span = m * step < size - start ? m * step : size - start;
    dt_tensor *gz = NULL, *zu = NULL, *ze = NULL, *gu = NULL, *both = NULL, *flat_t = NULL;
    st = dt_zeros_like(g, &gz);
    if (!st) st = dt_unsqueeze(gz, dim + 1, &zu);
    if (!st) st = dt_expand(zu, nd, wide, &ze);
    if (!st) st = dt_unsqueeze(g, dim + 1, &gu);
    if (!st) st = dt_cat(2, (dt_tensor *[]){gu, ze}, dim + 1, &both);
    if (!st) st = dt_reshape(both, gm->ndim, flat, &flat_t);
    if (!st) st = dt_narrow(flat_t, dim, 0, span, &mid);
    DT_RELEASE_ALL(gz, zu, ze, gu, both, flat_t);
  }
  int n = 0;
  if (!st && start > 0) st = dt_narrow(zeros, dim, 0, start, &made[n++]);
  if (!st) made[n++] = dt_tensor_retain(mid);
  if (!st && start + span < size) {
    st = dt_narrow(zeros, dim, start + span, size - start - span, &made[n++]);
  }
  if (!st) {
    if (n == 1) {
      *out = dt_tensor_retain(made[0]);
    } else {
      st = dt_cat(n, made, dim, out);
    }
  }
  dt__grad_release(made, (size_t)n);
  DT_RELEASE_ALL(mid, zeros);
  return st;
}

/* narrow and slice.Tensor: ints = {dim, start, end or length, step} (narrow's step is 1);
 * the piece's length comes from the output's shape. */
static dt_status slice_grad(const dt_backward_ctx *ctx, dt_tensor *g, dt_tensor **out) {
  const dt_op_call *call = ctx->call;
  const dt_tensor_meta *in = &ctx->input_metas[0];
  int dim = norm_dim(call->ints[0], in->ndim);
  int64_t start = norm_start(call->ints[1], in->shape[dim]);
  int64_t step = call->ints[3] > 1 ? call->ints[3] : 1;
  return place(call->inputs[0], in, g, &ctx->output_metas[0], dim, start, step, out);
}
DT_BACKWARD_INPUT0(slice, slice_grad)

/* select.int: ints = {dim, index}; the gradient gets its dim back, then is placed. */
static dt_status select_grad(const dt_backward_ctx *ctx, dt_tensor *g, dt_tensor **out) {
  const dt_op_call *call = ctx->call;
  const dt_tensor_meta *in = &ctx->input_metas[0];
  int dim = norm_dim(call->ints[0], in->ndim);
  int64_t index = call->ints[1] < 0 ? call->ints[1] + in->shape[dim] : call->ints[1];
  const dt_tensor_meta *om = &ctx->output_metas[0];
  dt_tensor_meta um = {.dtype = om->dtype, .ndim = om->ndim + 1};
  for (int d = 0, k = 0; d < um.ndim; d++) um.shape[d] = d == dim ? 1 : om->shape[k++];
  dt_tensor *u = NULL;
  dt_status st = dt_unsqueeze(g, dim, &u);
  if (!st) st = place(call->inputs[0], in, u, &um, dim, index, 1, out);
  dt_tensor_release(u);
  return st;
}
DT_BACKWARD_INPUT0(select, select_grad)

/* split, split_with_sizes, chunk: the pieces' gradients concatenated, a zero block for each
 * piece that received none. The split dim is read from the shapes (the one where a piece
 * differs from the input), since the attributes' layout differs before and after infer. The
 * recorded n_outputs is the piece count (the node saves no output: only their shapes). */
dt_status dt__backward_split(const dt_backward_ctx *ctx, dt_tensor *const *grad_outputs,
                             dt_tensor **grad_inputs) {
  const dt_op_call *call = ctx->call;
  const dt_tensor_meta *in = &ctx->input_metas[0];
  int n = call->n_outputs < DT_OP_MAX_META ? call->n_outputs : DT_OP_MAX_META;
  if (n < call->n_outputs) {
    return dt__error(DT_ERR_UNSUPPORTED, "%s backward: %d pieces (at most %d are recorded)",
                     dt__op_table[call->op].name, call->n_outputs, DT_OP_MAX_META);
  }
  int dim = 0;
  for (int k = 0; k < n; k++) {
    for (int d = 0; d < in->ndim; d++) {
      if (ctx->output_metas[k].shape[d] != in->shape[d]) dim = d;
    }
  }
  bool any = false;
  for (int k = 0; k < n; k++) any |= grad_outputs[k] != NULL;
  if (!any) return DT_OK;
  dt_tensor *zeros = NULL, *pieces[DT_OP_MAX_META] = {NULL};
  dt_status st = DT_OK;
  int64_t offset = 0;
  for (int k = 0; k < n && !st; k++) {
    int64_t len = ctx->output_metas[k].shape[dim];
    if (grad_outputs[k]) {
      pieces[k] = dt_tensor_retain(grad_outputs[k]);
    } else {
      if (!zeros) st = dt_zeros_like(call->inputs[0], &zeros);
      if (!st) st = dt_narrow(zeros, dim, offset, len, &pieces[k]);
    }
    offset += len;
  }
  if (!st && n == 1) {
    grad_inputs[0] = dt_tensor_retain(pieces[0]);
  } else if (!st) {
    st = dt_cat(n, pieces, dim, &grad_inputs[0]);
  }
  dt__grad_release(pieces, (size_t)n);
  dt_tensor_release(zeros);
  return st;
}

/* cat: each input's gradient is its block of the output's gradient (a legacy empty 1-D
 * input, skipped by cat, gets zeros). */
static dt_status cat_grad(const dt_backward_ctx *ctx, dt_tensor *g, int slot, dt_tensor **out) {
  const dt_op_call *call = ctx->call;
  int ndim = ctx->output_metas[0].ndim, dim = norm_dim(call->ints[0], ndim);
  int64_t offset = 0;
  for (int s = call->n_inputs; s < slot; s++) {
    const dt_tensor_meta *before = &ctx->input_metas[s];
    offset += before->ndim != ndim ? 0 : before->shape[dim];
  }
  const dt_tensor_meta *in = &ctx->input_metas[slot];
  if (in->ndim != ndim) return dt_zeros_like(call->input_list[slot - call->n_inputs], out);
  return dt_narrow(g, dim, offset, in->shape[dim], out);
}
DT_BACKWARD_SLOTS(cat, cat_grad)

/* stack: input i's gradient is select(g, dim, i). */
static dt_status stack_grad(const dt_backward_ctx *ctx, dt_tensor *g, int slot, dt_tensor **out) {
  int dim = norm_dim(ctx->call->ints[0], ctx->output_metas[0].ndim);
  return dt_select(g, dim, slot - ctx->call->n_inputs, out);
}
DT_BACKWARD_SLOTS(stack, stack_grad)
