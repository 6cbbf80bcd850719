/*
 * Binary pointwise ops (arithmetic and comparisons) in their Tensor, Scalar and in-place
 * forms: argument checks, output shapes and dtypes, and the public functions.
 */
#include <math.h>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/pointwise.h"
#include "ops/op_impl.h"

/* Which element function an op applies: the op list's func column. */
static dt_binary_op binary_op_of(dt_op op) {
  DT_ASSERT(dt__op_table[op].func != NO_FUNC);
  return (dt_binary_op)dt__op_table[op].func;
}

static bool is_comparison(dt_binary_op op) { return op >= DT_BINARY_EQ; }

static bool is_integral(double s) { return isfinite(s) && floor(s) == s; }

/* Dtype categories for PyTorch's in-place cast rule: a result may be written into a tensor
 * of the same or a higher category only (float into int, or int into bool, is refused). */
static int category(dt_dtype d) { return d == DT_BOOL ? 0 : dt_dtype_is_floating(d) ? 2 : 1; }

/* The dtype a binary op produces from operands of dtypes a and b. */
static dt_dtype binary_result_dtype(dt_binary_op op, dt_dtype a, dt_dtype b) {
  if (is_comparison(op)) return DT_BOOL;
  dt_dtype promoted = dt_dtype_promote(a, b);
  if (op == DT_BINARY_DIV && !dt_dtype_is_floating(promoted)) return DT_F32;
  return promoted;
}

/* Checks shared by every form: subtraction refuses bool (PyTorch points to logical_not or
 * xor instead), and an integer result needs an integral alpha. */
static dt_status check_operands(const dt_op_call *call, dt_binary_op op, dt_dtype a, dt_dtype b,
                                dt_dtype result, double alpha) {
  if (op == DT_BINARY_SUB && (a == DT_BOOL || b == DT_BOOL)) {
    return dt__error(DT_ERR_DTYPE, "%s: subtraction with a bool operand is not supported",
                     dt__op_name(call));
  }
  if ((op == DT_BINARY_ADD || op == DT_BINARY_SUB) && !dt_dtype_is_floating(result) &&
      !is_integral(alpha)) {
    return dt__error(DT_ERR_INVALID, "%s: alpha %g must be integral for a %s result",
                     dt__op_name(call), alpha, dt_dtype_name(result));
  }
  return DT_OK;
}

/* In place, the result (of dtype result) is cast to self's dtype within its category. */
static dt_status check_inplace_cast(const dt_op_call *call, dt_dtype result, dt_dtype self) {
  if (category(result) > category(self)) {
    return dt__error(DT_ERR_DTYPE,
                     "%s: result type %s cannot be written in place into self of dtype %s",
                     dt__op_name(call), dt_dtype_name(result), dt_dtype_name(self));
  }
  return DT_OK;
}

/* ---- Tensor forms -------------------------------------------------------------------------- */

dt_status dt__infer_binary(dt_op_call *call, dt_tensor_meta *metas) {
  const dt_tensor *a = call->inputs[0], *b = call->inputs[1];
  dt_binary_op op = binary_op_of(call->op);
  metas[0].dtype = binary_result_dtype(op, a->dtype, b->dtype);
  dt_status st = check_operands(call, op, a->dtype, b->dtype, metas[0].dtype, call->scalars[0]);
  if (DT_UNLIKELY(st)) return st;
  return dt__broadcast_shapes(dt__op_name(call), a->ndim, a->shape, b->ndim, b->shape,
                              &metas[0].ndim, metas[0].shape);
}

dt_status dt__kernel_binary(dt_op_call *call) {
  return dt__cpu_binary(binary_op_of(call->op), call->scalars[0], call->inputs[0], call->inputs[1],
                        call->outputs[0]);
}

/* In place: b must broadcast to a's shape exactly; the result is cast to a's dtype. */
dt_status dt__infer_binary_inplace(dt_op_call *call, dt_tensor_meta *metas) {
  const dt_tensor *a = call->inputs[0], *b = call->inputs[1];
  if (dt__has_internal_overlap(a)) return dt__error_internal_overlap(dt__op_name(call));
  dt_binary_op op = binary_op_of(call->op);
  dt_dtype result = binary_result_dtype(op, a->dtype, b->dtype);
  dt_status st = check_operands(call, op, a->dtype, b->dtype, result, call->scalars[0]);
  if (!st) st = check_inplace_cast(call, result, a->dtype);
  if (st) return st;
  bool same_shape = a->ndim == b->ndim;
  for (int i = 0; i < a->ndim && same_shape; i++) same_shape = a->shape[i] == b->shape[i];
  if (same_shape) { /* the common case needs no broadcasting */
    dt__meta_set(&metas[0], a->dtype, a->ndim, a->shape);
    return DT_OK;
  }
  st = dt__check_broadcasts_to_self(dt__op_name(call), "other", a, b);
  if (st) return st;
  dt__meta_set(&metas[0], a->dtype, a->ndim, a->shape);
  return DT_OK;
}

dt_status dt__kernel_binary_inplace(dt_op_call *call) {
  dt_tensor *a = call->inputs[0], *b = call->inputs[1];
  dt_tensor *copy; /* rare: b reads a's memory through another layout */
  dt_status st = dt__copy_if_overlapping(a, b, &copy);
  if (st) return st;
  st = dt__cpu_binary(binary_op_of(call->op), call->scalars[0], a, copy ? copy : b, a);
  dt_tensor_release(copy);
  return st;
}

/* ---- Scalar forms ----------------------------------------------------------------------- */

/* PyTorch's rules for a tensor of dtype t with a Python scalar s: the scalar does not
 * promote the tensor, except that a non-integral scalar with an integer or bool tensor gives
 * float32 and an integral one with a bool tensor gives int64 (comparisons always give bool).
 * *scalar_dtype is what the scalar is held in so the kernel computes like PyTorch: the
 * tensor's float dtype (float32 for bf16/f16 arithmetic, PyTorch's "opmath"; the tensor's
 * dtype for comparisons), int64 for exact integer math, float64 otherwise. */
static dt_dtype scalar_result_dtype(dt_binary_op op, dt_dtype t, double s, dt_dtype *scalar_dtype) {
  bool compare = is_comparison(op);
  if (dt_dtype_is_floating(t)) {
    *scalar_dtype = !compare && (t == DT_BF16 || t == DT_F16) ? DT_F32 : t;
    return compare ? DT_BOOL : t;
  }
  bool integral = is_integral(s);
  *scalar_dtype = integral ? DT_I64 : DT_F64;
  if (compare) return DT_BOOL;
  if (op == DT_BINARY_DIV || !integral) {
    *scalar_dtype = DT_F64;
    return DT_F32;
  }
  return t == DT_BOOL ? DT_I64 : t;
}

/* Validates a scalar-form call and returns its result dtype; records the scalar's dtype in
 * call->dtype for the kernel. */
static dt_status infer_scalar_dtype(dt_op_call *call, dt_dtype *result) {
  const dt_tensor *a = call->inputs[0];
  dt_binary_op op = binary_op_of(call->op);
  double s = call->scalars[0];
  dt_dtype scalar_dtype;
  *result = scalar_result_dtype(op, a->dtype, s, &scalar_dtype);
  call->dtype = scalar_dtype;
  dt_status st = check_operands(call, op, a->dtype, scalar_dtype, *result, call->scalars[1]);
  if (st) return st;
  if (op == DT_BINARY_POW && !dt_dtype_is_floating(*result) && s < 0) {
    return dt__error(DT_ERR_INVALID,
                     "%s: integers to negative integer powers are not allowed "
                     "(self %s, exponent %g)",
                     dt__op_name(call), dt_dtype_name(a->dtype), s);
  }
  return DT_OK;
}

dt_status dt__infer_binary_scalar(dt_op_call *call, dt_tensor_meta *metas) {
  const dt_tensor *a = call->inputs[0];
  dt_dtype result;
  dt_status st = infer_scalar_dtype(call, &result);
  if (st) return st;
  dt__meta_set(&metas[0], result, a->ndim, a->shape);
  return DT_OK;
}

dt_status dt__kernel_binary_scalar(dt_op_call *call) {
  dt__cpu_binary_scalar(binary_op_of(call->op), call->scalars[1], call->inputs[0], call->scalars[0],
                        call->dtype, call->outputs[0]);
  return DT_OK;
}

dt_status dt__infer_binary_scalar_inplace(dt_op_call *call, dt_tensor_meta *metas) {
  if (dt__has_internal_overlap(call->inputs[0]))
    return dt__error_internal_overlap(dt__op_name(call));
  const dt_tensor *a = call->inputs[0];
  dt_dtype result;
  dt_status st = infer_scalar_dtype(call, &result);
  if (!st) st = check_inplace_cast(call, result, a->dtype);
  if (st) return st;
  dt__meta_set(&metas[0], a->dtype, a->ndim, a->shape);
  return DT_OK;
}

dt_status dt__kernel_binary_scalar_inplace(dt_op_call *call) {
  dt_tensor *a = call->inputs[0];
  dt__cpu_binary_scalar(binary_op_of(call->op), call->scalars[1], a, call->scalars[0], call->dtype,
                        a);
  return DT_OK;
}

/* ---- Public functions ------------------------------------------------------------------- */

static dt_status binary_inplace(dt_op op, dt_tensor *a, dt_tensor *b, double alpha) {
  dt_op_call call = {.op = op, .n_inputs = 2, .inputs = {a, b}, .scalars = {alpha}};
  return dt__dispatch(&call);
}

static dt_status binary_scalar(dt_op op, dt_tensor *a, double s, dt_tensor **out) {
  dt_op_call call = {
      .op = op, .n_inputs = 1, .inputs = {a}, .scalars = {s, 1.0}, .n_outputs = 1, .outputs = out};
  return dt__dispatch(&call);
}

static dt_status binary_scalar_inplace(dt_op op, dt_tensor *a, double s) {
  dt_op_call call = {.op = op, .n_inputs = 1, .inputs = {a}, .scalars = {s, 1.0}};
  return dt__dispatch(&call);
}

/* The public functions below differ only in their op, so each is one line of these. */
#define BINARY_FUNCTION(fn, op)                                                                    \
  dt_status fn(dt_tensor *a, dt_tensor *b, dt_tensor **out) {                                      \
    return dt__dispatch_two(op, a, b, 1.0, out);                                                   \
  }
#define SCALAR_FUNCTION(fn, op)                                                                    \
  dt_status fn(dt_tensor *a, double s, dt_tensor **out) { return binary_scalar(op, a, s, out); }

BINARY_FUNCTION(dt_add, DT_OP_ADD)
dt_status dt_add_ex(dt_tensor *a, dt_tensor *b, double alpha, dt_tensor **out) {
  return dt__dispatch_two(DT_OP_ADD, a, b, alpha, out);
}
BINARY_FUNCTION(dt_sub, DT_OP_SUB)
dt_status dt_sub_ex(dt_tensor *a, dt_tensor *b, double alpha, dt_tensor **out) {
  return dt__dispatch_two(DT_OP_SUB, a, b, alpha, out);
}
BINARY_FUNCTION(dt_mul, DT_OP_MUL)
BINARY_FUNCTION(dt_div, DT_OP_DIV)
BINARY_FUNCTION(dt_maximum, DT_OP_MAXIMUM)
BINARY_FUNCTION(dt_minimum, DT_OP_MINIMUM)
BINARY_FUNCTION(dt_pow, DT_OP_POW)

SCALAR_FUNCTION(dt_add_scalar, DT_OP_ADD_SCALAR)
SCALAR_FUNCTION(dt_sub_scalar, DT_OP_SUB_SCALAR)
SCALAR_FUNCTION(dt_mul_scalar, DT_OP_MUL_SCALAR)
SCALAR_FUNCTION(dt_div_scalar, DT_OP_DIV_SCALAR)
SCALAR_FUNCTION(dt_pow_scalar, DT_OP_POW_SCALAR)

dt_status dt_add_(dt_tensor *a, dt_tensor *b) { return binary_inplace(DT_OP_ADD_, a, b, 1.0); }
dt_status dt_sub_(dt_tensor *a, dt_tensor *b) { return binary_inplace(DT_OP_SUB_, a, b, 1.0); }
dt_status dt_mul_(dt_tensor *a, dt_tensor *b) { return binary_inplace(DT_OP_MUL_, a, b, 1.0); }
dt_status dt_div_(dt_tensor *a, dt_tensor *b) { return binary_inplace(DT_OP_DIV_, a, b, 1.0); }
dt_status dt_add_scalar_(dt_tensor *a, double s) {
  return binary_scalar_inplace(DT_OP_ADD_SCALAR_, a, s);
}
dt_status dt_mul_scalar_(dt_tensor *a, double s) {
  return binary_scalar_inplace(DT_OP_MUL_SCALAR_, a, s);
}

BINARY_FUNCTION(dt_eq, DT_OP_EQ)
BINARY_FUNCTION(dt_ne, DT_OP_NE)
BINARY_FUNCTION(dt_lt, DT_OP_LT)
BINARY_FUNCTION(dt_le, DT_OP_LE)
BINARY_FUNCTION(dt_gt, DT_OP_GT)
BINARY_FUNCTION(dt_ge, DT_OP_GE)
SCALAR_FUNCTION(dt_eq_scalar, DT_OP_EQ_SCALAR)
SCALAR_FUNCTION(dt_ne_scalar, DT_OP_NE_SCALAR)
SCALAR_FUNCTION(dt_lt_scalar, DT_OP_LT_SCALAR)
SCALAR_FUNCTION(dt_le_scalar, DT_OP_LE_SCALAR)
SCALAR_FUNCTION(dt_gt_scalar, DT_OP_GT_SCALAR)
SCALAR_FUNCTION(dt_ge_scalar, DT_OP_GE_SCALAR)
