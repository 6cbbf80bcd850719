/* Backward formulas of views: the gradient takes the input's geometry back. */
#include "autograd/autograd_impl.h"
#include "dtensor/ops.h"

/* view, reshape, flatten, squeeze, unsqueeze: reshape to the input's (global) shape. */
dt_status dt__backward_reshape_back(const dt_backward_ctx *ctx, dt_tensor *const *grad_outputs,
                                    dt_tensor **grad_inputs) {
  if (!grad_outputs[0]) return DT_OK;
  const dt_tensor_meta *in = &ctx->input_metas[0];
  return dt_reshape(grad_outputs[0], in->ndim, in->shape, &grad_inputs[0]);
}

dt_status dt__backward_transpose(const dt_backward_ctx *ctx, dt_tensor *const *grad_outputs,
                                 dt_tensor **grad_inputs) {
  if (!grad_outputs[0]) return DT_OK;
  return dt_transpose(grad_outputs[0], ctx->call->ints[0], ctx->call->ints[1], &grad_inputs[0]);
}

/* The inverse permutation: output dim i came from input dim dims[i]. */
dt_status dt__backward_permute(const dt_backward_ctx *ctx, dt_tensor *const *grad_outputs,
                               dt_tensor **grad_inputs) {
  if (!grad_outputs[0]) return DT_OK;
  int ndim = ctx->input_metas[0].ndim;
  int64_t inverse[DT_MAX_DIMS];
  for (int i = 0; i < ndim; i++) {
    int64_t d = ctx->call->ints[i] < 0 ? ctx->call->ints[i] + ndim : ctx->call->ints[i];
    inverse[d] = i;
  }
  return dt_permute(grad_outputs[0], ndim, inverse, &grad_inputs[0]);
}

/* expand: sum over the expanded and the added leading dims. */
dt_status dt__backward_expand(const dt_backward_ctx *ctx, dt_tensor *const *grad_outputs,
                              dt_tensor **grad_inputs) {
  if (!grad_outputs[0]) return DT_OK;
  return dt__grad_sum_to(grad_outputs[0], &ctx->input_metas[0], &grad_inputs[0]);
}
