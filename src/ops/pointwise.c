/* Pointwise ops: argument checks, output shapes and dtypes, and the public functions. */
#include "kernels/cpu/cpu_kernels.h"
#include "ops/op_impl.h"

/* Which elementwise kernel op an op-table entry runs. */
static dt_binary_op binary_op_of(dt_op op) {
  switch (op) {
  case DT_OP_ADD:
  case DT_OP_ADD_: return DT_BINARY_ADD;
  default: break;
  }
  DT_ASSERT(!"not a binary op");
  return DT_BINARY_ADD;
}

static bool is_comparison(dt_binary_op op) { return op >= DT_BINARY_EQ; }

/* The dtype a binary op produces from operands of dtypes a and b. */
static dt_dtype binary_result_dtype(dt_binary_op op, dt_dtype a, dt_dtype b) {
  if (is_comparison(op)) return DT_BOOL;
  dt_dtype promoted = dt_dtype_promote(a, b);
  if (op == DT_BINARY_DIV && !dt_dtype_is_floating(promoted)) return DT_F32;
  return promoted;
}

dt_status dt__infer_binary(dt_op_call *call, dt_tensor_meta *metas) {
  const dt_tensor *a = call->inputs[0], *b = call->inputs[1];
  dt_binary_op op = binary_op_of(call->op);
  metas[0].dtype = binary_result_dtype(op, a->dtype, b->dtype);
  return dt__broadcast_shapes(dt__op_name(call), a->ndim, a->shape, b->ndim, b->shape,
                              &metas[0].ndim, metas[0].shape);
}

dt_status dt__kernel_binary(dt_op_call *call) {
  return dt__cpu_binary(binary_op_of(call->op), call->scalars[0], call->inputs[0],
                        call->inputs[1], call->outputs[0]);
}

/* In place: b must broadcast to a's shape exactly; the result is cast to a's dtype. */
dt_status dt__infer_binary_inplace(dt_op_call *call, dt_tensor_meta *metas) {
  const dt_tensor *a = call->inputs[0], *b = call->inputs[1];
  int ndim;
  int64_t shape[DT_MAX_DIMS];
  dt_status st = dt__broadcast_shapes(dt__op_name(call), a->ndim, a->shape, b->ndim, b->shape,
                                      &ndim, shape);
  if (st) return st;
  if (ndim != a->ndim || memcmp(shape, a->shape, sizeof(int64_t) * (size_t)ndim) != 0) {
    char sa[160], sb[160];
    return dt__error(DT_ERR_SHAPE, "%s: other of shape %s does not broadcast to self of shape %s",
                     dt__op_name(call), dt__format_ints(sb, sizeof sb, b->ndim, b->shape),
                     dt__format_ints(sa, sizeof sa, a->ndim, a->shape));
  }
  dt__meta_set(&metas[0], a->dtype, a->ndim, a->shape);
  return DT_OK;
}

dt_status dt__kernel_binary_inplace(dt_op_call *call) {
  dt_tensor *a = call->inputs[0];
  return dt__cpu_binary(binary_op_of(call->op), call->scalars[0], a, call->inputs[1], a);
}

/* ---- Public functions ------------------------------------------------------------------- */

static dt_status binary(dt_op op, dt_tensor *a, dt_tensor *b, double alpha, dt_tensor **out) {
  dt_op_call call = {.op = op,
                     .n_inputs = 2,
                     .inputs = {a, b},
                     .scalars = {alpha},
                     .n_outputs = 1,
                     .outputs = out};
  return dt__dispatch(&call);
}

static dt_status binary_inplace(dt_op op, dt_tensor *a, dt_tensor *b, double alpha) {
  dt_op_call call = {.op = op, .n_inputs = 2, .inputs = {a, b}, .scalars = {alpha}};
  return dt__dispatch(&call);
}

dt_status dt_add(dt_tensor *a, dt_tensor *b, dt_tensor **out) { return binary(DT_OP_ADD, a, b, 1.0, out); }
dt_status dt_add_ex(dt_tensor *a, dt_tensor *b, double alpha, dt_tensor **out) {
  return binary(DT_OP_ADD, a, b, alpha, out);
}
dt_status dt_add_(dt_tensor *a, dt_tensor *b) { return binary_inplace(DT_OP_ADD_, a, b, 1.0); }
