/* Factories shaped like an existing tensor: empty_like, zeros_like, ones_like, full_like.
 * Results are new contiguous tensors of the input's shape and dtype. */
#include <inttypes.h>
#include <math.h>

#include "kernels/cpu/factory.h"
#include "ops/op_impl.h"

/* Like PyTorch, refuse a fill value the dtype cannot hold (dt__check_fill_value). */
dt_status dt__infer_full_like(dt_op_call *call, dt_tensor_meta *metas) {
  const dt_tensor *a = call->inputs[0];
  dt_status st = dt__check_fill_value(dt__op_name(call), call->scalars[0], a->dtype);
  if (st) return st;
  dt__meta_set(&metas[0], a->dtype, a->ndim, a->shape);
  return DT_OK;
}

dt_status dt__kernel_empty_like(dt_op_call *call) {
  (void)call; /* contents are left uninitialised, as the name says */
  return DT_OK;
}

dt_status dt__kernel_fill_like(dt_op_call *call) {
  dt__cpu_fill_contiguous(call->outputs[0], call->scalars[0]);
  return DT_OK;
}

/* ---- Public functions ------------------------------------------------------------------------ */

static dt_status like(dt_op op, dt_tensor *a, double value, dt_tensor **out) {
  dt_op_call call = {
      .op = op, .n_inputs = 1, .inputs = {a}, .scalars = {value}, .n_outputs = 1, .outputs = out};
  return dt__dispatch(&call);
}

dt_status dt_empty_like(dt_tensor *a, dt_tensor **out) { return like(DT_OP_EMPTY_LIKE, a, 0, out); }
dt_status dt_zeros_like(dt_tensor *a, dt_tensor **out) { return like(DT_OP_ZEROS_LIKE, a, 0, out); }
dt_status dt_ones_like(dt_tensor *a, dt_tensor **out) { return like(DT_OP_ONES_LIKE, a, 1, out); }
dt_status dt_full_like(dt_tensor *a, double value, dt_tensor **out) {
  return like(DT_OP_FULL_LIKE, a, value, out);
}
