/* Helpers of the backward formulas: undoing broadcasting and dtype promotion with ops. */
#include "autograd/autograd_impl.h"
#include "autograd/meta_of.h"
#include "dtensor/ops.h"

dt_status dt__grad_sum_to(dt_tensor *grad, const dt_tensor_meta *meta, dt_tensor **out) {
  *out = NULL;
  dt_tensor_meta gm;
  dt__autograd_meta_of(grad, &gm);
  int lead = gm.ndim - meta->ndim;
  if (lead < 0) {
    return dt__error(DT_ERR_INTERNAL, "dt_backward: a gradient of %d dims cannot sum to %d dims",
                     gm.ndim, meta->ndim);
  }
  int64_t dims[DT_MAX_DIMS];
  int n = 0;
  for (int i = 0; i < gm.ndim; i++) {
    if (i < lead || (meta->shape[i - lead] == 1 && gm.shape[i] != 1)) dims[n++] = i;
  }
  if (n == 0 && lead == 0) {
    *out = dt_tensor_retain(grad);
    return DT_OK;
  }
  dt_tensor *summed = NULL;
  dt_status st = dt_sum_dims(grad, n, dims, true, &summed);
  if (st) return st;
  st = dt_reshape(summed, meta->ndim, meta->shape, out);
  dt_tensor_release(summed);
  return st;
}

dt_status dt__grad_cast_to(dt_tensor *grad, const dt_tensor_meta *meta, dt_tensor **out) {
  if (grad->dtype == meta->dtype) {
    *out = dt_tensor_retain(grad);
    return DT_OK;
  }
  return dt_to(grad, meta->dtype, out);
}

dt_status dt__grad_reduce_to(dt_tensor *grad, const dt_tensor_meta *meta, dt_tensor **out) {
  if (grad->dtype == meta->dtype && dt__autograd_has_shape(grad, meta)) { /* the common case */
    *out = dt_tensor_retain(grad);
    return DT_OK;
  }
  dt_tensor *summed = NULL;
  dt_status st = dt__grad_sum_to(grad, meta, &summed);
  if (st) {
    *out = NULL;
    return st;
  }
  st = dt__grad_cast_to(summed, meta, out);
  dt_tensor_release(summed);
  return st;
}

dt_status dt__grad_give(const dt_backward_ctx *ctx, int slot, dt_tensor *t, dt_status st,
                        dt_tensor **grad_inputs) {
  if (!st) st = dt__grad_reduce_to(t, &ctx->input_metas[slot], &grad_inputs[slot]);
  dt_tensor_release(t);
  return st;
}

dt_status dt__backward_input0(const dt_backward_ctx *ctx, dt_tensor *const *grad_outputs,
                              dt_tensor **grad_inputs, dt_grad_input0_fn grad) {
  dt_tensor *g = grad_outputs[0];
  if (!g || !ctx->needs_grad[0]) return DT_OK;
  dt_tensor *t = NULL;
  dt_status st = grad(ctx, g, &t);
  return dt__grad_give(ctx, 0, t, st, grad_inputs);
}

dt_status dt__backward_slots(const dt_backward_ctx *ctx, dt_tensor *const *grad_outputs,
                             dt_tensor **grad_inputs, dt_grad_slot_fn grad) {
  dt_tensor *g = grad_outputs[0];
  if (!g) return DT_OK;
  int n = ctx->call->n_inputs + ctx->call->n_input_list;
  dt_status st = DT_OK;
  for (int slot = 0; slot < n && !st; slot++) {
    if (!ctx->needs_grad[slot]) continue;
    dt_tensor *t = NULL;
    st = grad(ctx, g, slot, &t);
    st = dt__grad_give(ctx, slot, t, st, grad_inputs);
  }
  for (int slot = 0; slot < n && st; slot++) {
    dt_tensor_release(grad_inputs[slot]);
    grad_inputs[slot] = NULL;
  }
  return st;
}

void dt__grad_release(dt_tensor *const *tensors, size_t n) {
  for (size_t i = 0; i < n; i++) dt_tensor_release(tensors[i]);
}
