/* softmax, log_softmax, layer_norm and batch_norm: argument checks, output metas and the
 * public functions. Every output has the input's shape and dtype. */
#include <inttypes.h>

#include "kernels/cpu/reduce.h"
#include "ops/op_impl.h"

static dt_status check_floating(const dt_op_call *call, const char *arg, const dt_tensor *t) {
  if (dt_dtype_is_floating(t->dtype)) return DT_OK;
  return dt__error(DT_ERR_DTYPE, "%s: %s has dtype %s (expected a floating dtype)",
                   dt__op_name(call), arg, dt_dtype_name(t->dtype));
}

/* ---- softmax, log_softmax ------------------------------------------------------------------ */

dt_status dt__infer_softmax(dt_op_call *call, dt_tensor_meta *metas) {
  const dt_tensor *a = call->inputs[0];
  dt_status st = check_floating(call, "input", a);
  if (st) return st;
  int d;
  st = dt__normalize_dim(dt__op_name(call), call->ints[0], a->ndim, &d);
  if (st) return st;
  call->ints[0] = d;
  call->n_ints = 1;
  dt__meta_set(&metas[0], a->dtype, a->ndim, a->shape);
  return DT_OK;
}

dt_status dt__kernel_softmax(dt_op_call *call) {
  return dt__cpu_softmax(call->inputs[0], (int)call->ints[0], call->op == DT_OP_LOG_SOFTMAX,
                         call->outputs[0]);
}

/* ---- layer_norm ------------------------------------------------------------------------------ */

/* weight or bias, when given, must be floating with exactly normalized_shape. */
static dt_status check_affine(const dt_op_call *call, const char *arg, const dt_tensor *t, int n,
                              const int64_t *shape) {
  if (!t) return DT_OK;
  dt_status st = check_floating(call, arg, t);
  if (st) return st;
  if (t->ndim != n || memcmp(t->shape, shape, sizeof(int64_t) * (size_t)n) != 0) {
    char bt[160], bn[160];
    return dt__error(DT_ERR_SHAPE, "%s: %s of shape %s does not match normalized_shape %s",
                     dt__op_name(call), arg, dt__format_ints(bt, sizeof bt, t->ndim, t->shape),
                     dt__format_ints(bn, sizeof bn, n, shape));
  }
  return DT_OK;
}

dt_status dt__infer_layer_norm(dt_op_call *call, dt_tensor_meta *metas) {
  const dt_tensor *x = call->inputs[0];
  const char *op = dt__op_name(call);
  int n = call->n_int_list;
  const int64_t *shape = call->int_list;
  dt_status st = check_floating(call, "input", x);
  if (st) return st;
  if (n < 1) {
    return dt__error(DT_ERR_INVALID, "%s: normalized_shape has %d dims (expected at least 1)", op,
                     n);
  }
  if (!shape) return dt__error(DT_ERR_INVALID, "%s: normalized_shape is NULL", op);
  int lead = x->ndim - n;
  if (lead < 0 || memcmp(x->shape + lead, shape, sizeof(int64_t) * (size_t)n) != 0) {
    char bx[160], bn[160];
    return dt__error(DT_ERR_SHAPE, "%s: input of shape %s does not end with normalized_shape %s",
                     op, dt__format_ints(bx, sizeof bx, x->ndim, x->shape),
                     dt__format_ints(bn, sizeof bn, n, shape));
  }
  st = check_affine(call, "weight", call->inputs[1], n, shape);
  if (!st) st = check_affine(call, "bias", call->inputs[2], n, shape);
  if (st) return st;
  /* Keep the shape in the call itself: int_list is borrowed from the caller. */
  for (int i = 0; i < n; i++) call->ints[i] = shape[i];
  call->n_ints = n;
  dt__meta_set(&metas[0], x->dtype, x->ndim, x->shape);
  return DT_OK;
}

dt_status dt__kernel_layer_norm(dt_op_call *call) {
  return dt__cpu_layer_norm(call->inputs[0], call->n_ints, call->inputs[1], call->inputs[2],
                            call->scalars[0], call->outputs[0]);
}

/* ---- batch_norm ------------------------------------------------------------------------------ */

/* A per-channel statistic or parameter: floating, shape [C]. */
static dt_status check_channel_vector(const dt_op_call *call, const char *arg, const dt_tensor *t,
                                      const dt_tensor *x) {
  if (!t) return DT_OK;
  dt_status st = check_floating(call, arg, t);
  if (st) return st;
  if (t->ndim != 1 || t->shape[0] != x->shape[1]) {
    char bt[160], bx[160];
    return dt__error(DT_ERR_SHAPE,
                     "%s: %s of shape %s does not match the %" PRId64 " channels of input shape %s",
                     dt__op_name(call), arg, dt__format_ints(bt, sizeof bt, t->ndim, t->shape),
                     x->shape[1], dt__format_ints(bx, sizeof bx, x->ndim, x->shape));
  }
  return DT_OK;
}

dt_status dt__infer_batch_norm(dt_op_call *call, dt_tensor_meta *metas) {
  const dt_tensor *x = call->inputs[0];
  dt_status st = check_floating(call, "input", x);
  if (st) return st;
  if (x->ndim < 2) {
    char bx[160];
    return dt__error(DT_ERR_SHAPE, "%s: input of shape %s needs at least 2 dims [N, C, ...]",
                     dt__op_name(call), dt__format_ints(bx, sizeof bx, x->ndim, x->shape));
  }
  static const char *const names[] = {"running_mean", "running_var", "weight", "bias"};
  for (int i = 0; i < 4 && !st; i++)
    st = check_channel_vector(call, names[i], call->inputs[1 + i], x);
  if (st) return st;
  dt__meta_set(&metas[0], x->dtype, x->ndim, x->shape);
  return DT_OK;
}

dt_status dt__kernel_batch_norm(dt_op_call *call) {
  dt_tensor **in = call->inputs;
  return dt__cpu_batch_norm(in[0], in[1], in[2], in[3], in[4], call->scalars[0], call->outputs[0]);
}

/* ---- Public functions ------------------------------------------------------------------------ */

static dt_status softmax(dt_op op, dt_tensor *a, int64_t dim, dt_tensor **out) {
  dt_op_call call = {.op = op,
                     .n_inputs = 1,
                     .inputs = {a},
                     .n_ints = 1,
                     .ints = {dim},
                     .n_outputs = 1,
                     .outputs = out};
  return dt__dispatch(&call);
}

dt_status dt_softmax(dt_tensor *a, int64_t dim, dt_tensor **out) {
  return softmax(DT_OP_SOFTMAX, a, dim, out);
}

dt_status dt_log_softmax(dt_tensor *a, int64_t dim, dt_tensor **out) {
  return softmax(DT_OP_LOG_SOFTMAX, a, dim, out);
}

dt_status dt__norm_dispatch(dt_op op, dt_tensor *x, int ndims, const int64_t *normalized_shape,
                            dt_tensor *weight, dt_tensor *bias, double eps, dt_tensor **out) {
  dt_op_call call = {.op = op,
                     .n_inputs = op == DT_OP_RMS_NORM ? 2 : 3,
                     .inputs = {x, weight, bias},
                     .int_list = normalized_shape,
                     .n_int_list = ndims,
                     .scalars = {eps},
                     .n_outputs = 1,
                     .outputs = out};
  return dt__dispatch(&call);
}

dt_status dt_layer_norm(dt_tensor *x, int ndims, const int64_t *normalized_shape, dt_tensor *weight,
                        dt_tensor *bias, double eps, dt_tensor **out) {
  return dt__norm_dispatch(DT_OP_LAYER_NORM, x, ndims, normalized_shape, weight, bias, eps, out);
}

dt_status dt_batch_norm(dt_tensor *x, dt_tensor *running_mean, dt_tensor *running_var,
                        dt_tensor *weight, dt_tensor *bias, double eps, dt_tensor **out) {
  dt_op_call call = {.op = DT_OP_BATCH_NORM,
                     .n_inputs = 5,
                     .inputs = {x, running_mean, running_var, weight, bias},
                     .scalars = {eps},
                     .n_outputs = 1,
                     .outputs = out};
  return dt__dispatch(&call);
}
