/* Unary pointwise ops: argument checks and the public functions. */
#include "kernels/cpu/pointwise.h"
#include "ops/op_impl.h"

/* Which unary kernel an op-table entry runs; gelu picks its tanh form from the flags. */
static dt_unary_op unary_op_of(const dt_op_call *call) {
  dt_unary_op op = (dt_unary_op)dt__op_table[call->op].func;
  DT_ASSERT(dt__op_table[call->op].func != NO_FUNC);
  return op == DT_UNARY_GELU && (call->flags & DT_OP_FLAG_GELU_TANH) ? DT_UNARY_GELU_TANH : op;
}

/* Floating dtypes for every op; neg, abs and relu also keep integer dtypes. PyTorch would
 * promote an integer input of exp, log, ... to float; we ask for an explicit conversion
 * instead, and (like PyTorch) refuse bool for neg, abs and relu. */
dt_status dt__infer_unary(dt_op_call *call, dt_tensor_meta *metas) {
  const dt_tensor *a = call->inputs[0];
  dt_unary_op op = unary_op_of(call);
  if (!dt_dtype_is_floating(a->dtype)) {
    if (a->dtype == DT_BOOL || !dt__unary_takes_integers(op)) {
      return dt__error(DT_ERR_DTYPE, "%s: self has dtype %s; expected a floating dtype%s",
                       dt__op_name(call), dt_dtype_name(a->dtype),
                       dt__unary_takes_integers(op) ? " or an integer dtype other than bool"
                                                    : " (convert with dt_to first)");
    }
  }
  dt__meta_set(&metas[0], a->dtype, a->ndim, a->shape);
  return DT_OK;
}

dt_status dt__kernel_unary(dt_op_call *call) {
  dt__cpu_unary(unary_op_of(call), call->inputs[0], call->outputs[0]);
  return DT_OK;
}

/* gelu_backward: grad_output and self floating of one dtype, broadcasting together. */
dt_status dt__infer_gelu_backward(dt_op_call *call, dt_tensor_meta *metas) {
  const dt_tensor *g = call->inputs[0], *x = call->inputs[1];
  if (!dt_dtype_is_floating(x->dtype) || g->dtype != x->dtype) {
    return dt__error(DT_ERR_DTYPE,
                     "%s: grad_output has dtype %s and self %s; expected one floating dtype",
                     dt__op_name(call), dt_dtype_name(g->dtype), dt_dtype_name(x->dtype));
  }
  metas[0].dtype = x->dtype;
  return dt__broadcast_shapes(dt__op_name(call), g->ndim, g->shape, x->ndim, x->shape,
                              &metas[0].ndim, metas[0].shape);
}

dt_status dt__kernel_gelu_backward(dt_op_call *call) {
  dt__cpu_gelu_backward((call->flags & DT_OP_FLAG_GELU_TANH) != 0, call->inputs[0], call->inputs[1],
                        call->outputs[0]);
  return DT_OK;
}

dt_status dt__gelu_backward(dt_tensor *grad, dt_tensor *x, int flags, dt_tensor **out) {
  dt_op_call call = {.op = DT_OP_GELU_BACKWARD,
                     .n_inputs = 2,
                     .inputs = {grad, x},
                     .flags = flags & DT_OP_FLAG_GELU_TANH,
                     .n_outputs = 1,
                     .outputs = out};
  return dt__dispatch(&call);
}

/* ---- Public functions ------------------------------------------------------------------- */

static dt_status unary(dt_op op, int flags, dt_tensor *a, dt_tensor **out) {
  dt_op_call call = {
      .op = op, .n_inputs = 1, .inputs = {a}, .flags = flags, .n_outputs = 1, .outputs = out};
  return dt__dispatch(&call);
}

dt_status dt_neg(dt_tensor *a, dt_tensor **out) { return unary(DT_OP_NEG, 0, a, out); }
dt_status dt_abs(dt_tensor *a, dt_tensor **out) { return unary(DT_OP_ABS, 0, a, out); }
dt_status dt_exp(dt_tensor *a, dt_tensor **out) { return unary(DT_OP_EXP, 0, a, out); }
dt_status dt_log(dt_tensor *a, dt_tensor **out) { return unary(DT_OP_LOG, 0, a, out); }
dt_status dt_sqrt(dt_tensor *a, dt_tensor **out) { return unary(DT_OP_SQRT, 0, a, out); }
dt_status dt_rsqrt(dt_tensor *a, dt_tensor **out) { return unary(DT_OP_RSQRT, 0, a, out); }
dt_status dt_relu(dt_tensor *a, dt_tensor **out) { return unary(DT_OP_RELU, 0, a, out); }
dt_status dt_gelu(dt_tensor *a, dt_tensor **out) { return unary(DT_OP_GELU, 0, a, out); }
dt_status dt_gelu_tanh(dt_tensor *a, dt_tensor **out) {
  return unary(DT_OP_GELU, DT_OP_FLAG_GELU_TANH, a, out);
}
dt_status dt_silu(dt_tensor *a, dt_tensor **out) { return unary(DT_OP_SILU, 0, a, out); }
dt_status dt_tanh(dt_tensor *a, dt_tensor **out) { return unary(DT_OP_TANH, 0, a, out); }
dt_status dt_sigmoid(dt_tensor *a, dt_tensor **out) { return unary(DT_OP_SIGMOID, 0, a, out); }
dt_status dt_sin(dt_tensor *a, dt_tensor **out) { return unary(DT_OP_SIN, 0, a, out); }
dt_status dt_cos(dt_tensor *a, dt_tensor **out) { return unary(DT_OP_COS, 0, a, out); }
