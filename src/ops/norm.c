/* softmax, log_softmax, layer_norm and batch_norm: argument checks, output metas and the
 * public functions. Every output has the input's shape and dtype. */
#include <inttypes.h>
#include <math.h>

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
  if (!st) st = dt__call_dim(call, a, NULL);
  if (st) return st;
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

/* ---- backward ops ------------------------------------------------------------------------ */

/* grad_output and the saved tensor: one floating dtype, one shape. */
static dt_status check_grad_pair(const dt_op_call *call, const char *saved) {
  const dt_tensor *g = call->inputs[0], *t = call->inputs[1];
  dt_status st = check_floating(call, saved, t);
  if (st) return st;
  if (g->dtype != t->dtype) {
    return dt__error(DT_ERR_DTYPE, "%s: grad_output has dtype %s and %s %s (expected one dtype)",
                     dt__op_name(call), dt_dtype_name(g->dtype), saved, dt_dtype_name(t->dtype));
  }
  if (g->ndim != t->ndim || memcmp(g->shape, t->shape, sizeof(int64_t) * (size_t)g->ndim) != 0) {
    char bg[160], bt[160];
    return dt__error(DT_ERR_SHAPE, "%s: grad_output of shape %s does not match %s of shape %s",
                     dt__op_name(call), dt__format_ints(bg, sizeof bg, g->ndim, g->shape), saved,
                     dt__format_ints(bt, sizeof bt, t->ndim, t->shape));
  }
  return DT_OK;
}

/* softmax_backward, log_softmax_backward: {grad_output, output}, dim in ints[0]. */
dt_status dt__infer_softmax_backward(dt_op_call *call, dt_tensor_meta *metas) {
  const dt_tensor *y = call->inputs[1];
  dt_status st = check_grad_pair(call, "output");
  if (!st) st = dt__call_dim(call, y, NULL);
  if (st) return st;
  dt__meta_set(&metas[0], y->dtype, y->ndim, y->shape);
  return DT_OK;
}

dt_status dt__kernel_softmax_backward(dt_op_call *call) {
  return dt__cpu_softmax_backward(call->inputs[0], call->inputs[1], (int)call->ints[0],
                                  call->op == DT_OP_LOG_SOFTMAX_BACKWARD, call->outputs[0]);
}

static bool is_rms_backward(dt_op op) {
  return op == DT_OP_RMS_NORM_BACKWARD || op == DT_OP_RMS_NORM_BACKWARD_WEIGHT;
}

/* The five normalization backward ops: {grad_output, input, weight?}, normalized_shape in
 * int_list as layer_norm's (copied to ints). *_backward gives the input's gradient (input's
 * metas); layer_norm_backward_affine the weight's and the bias's, rms_norm_backward_weight
 * the weight's (normalized_shape, the gradient's dtype); layer_norm_backward_all all three. */
dt_status dt__infer_norm_backward(dt_op_call *call, dt_tensor_meta *metas) {
  dt_status st = check_grad_pair(call, "input");
  if (st) return st;
  dt_tensor *g = call->inputs[0];
  /* layer_norm's checks on {input, weight}, then the call back to this op's inputs. */
  call->inputs[0] = call->inputs[1];
  call->inputs[1] = call->inputs[2];
  call->inputs[2] = NULL;
  st = dt__infer_layer_norm(call, metas);
  call->inputs[2] = call->inputs[1];
  call->inputs[1] = call->inputs[0];
  call->inputs[0] = g;
  if (st) return st;
  dt_op op = call->op;
  if (op == DT_OP_LAYER_NORM_BACKWARD || op == DT_OP_RMS_NORM_BACKWARD) return DT_OK;
  bool all = op == DT_OP_LAYER_NORM_BACKWARD_ALL;
  int n_out = all ? 3 : op == DT_OP_LAYER_NORM_BACKWARD_AFFINE ? 2 : 1;
  for (int i = all ? 1 : 0; i < n_out; i++)
    dt__meta_set(&metas[i], g->dtype, call->n_ints, call->ints);
  if (call->n_outputs > n_out) call->n_outputs = n_out;
  return DT_OK;
}

dt_status dt__kernel_norm_backward(dt_op_call *call) {
  dt_tensor **in = call->inputs;
  bool rms = is_rms_backward(call->op);
  if (call->op == DT_OP_LAYER_NORM_BACKWARD || call->op == DT_OP_RMS_NORM_BACKWARD) {
    return dt__cpu_norm_backward_input(rms, in[0], in[1], call->n_ints, in[2], call->scalars[0],
                                       call->outputs[0]);
  }
  if (call->op == DT_OP_LAYER_NORM_BACKWARD_ALL) {
    return dt__cpu_layer_norm_backward_all(in[0], in[1], call->n_ints, in[2], call->scalars[0],
                                           call->outputs[0], call->outputs[1], call->outputs[2]);
  }
  return dt__cpu_norm_backward_affine(rms, in[0], in[1], call->n_ints, call->scalars[0],
                                      call->outputs[0], rms ? NULL : call->outputs[1]);
}

dt_status dt__softmax_backward(dt_tensor *grad, dt_tensor *output, int64_t dim, bool take_log,
                               dt_tensor **out) {
  return dt__dispatch_tensors(take_log ? DT_OP_LOG_SOFTMAX_BACKWARD : DT_OP_SOFTMAX_BACKWARD, 2,
                              (dt_tensor *[]){grad, output}, 1, dim, out);
}

/* A normalization backward op over the last k dims of input, of sizes `shape`. */
static dt_status norm_backward(dt_op op, dt_tensor *grad, dt_tensor *input, int k,
                               const int64_t *shape, dt_tensor *weight, double eps, int n_out,
                               dt_tensor **outs) {
  dt_op_call call = {.op = op,
                     .n_inputs = 3,
                     .inputs = {grad, input, weight},
                     .int_list = shape,
                     .n_int_list = k,
                     .scalars = {eps},
                     .n_outputs = n_out,
                     .outputs = outs};
  return dt__dispatch(&call);
}

dt_status dt__norm_backward_input(bool rms, dt_tensor *grad, dt_tensor *input, int k,
                                  const int64_t *shape, dt_tensor *weight, double eps,
                                  dt_tensor **out) {
  dt_op op = rms ? DT_OP_RMS_NORM_BACKWARD : DT_OP_LAYER_NORM_BACKWARD;
  return norm_backward(op, grad, input, k, shape, weight, eps, 1, out);
}

dt_status dt__norm_backward_affine(bool rms, dt_tensor *grad, dt_tensor *input, int k,
                                   const int64_t *shape, double eps, dt_tensor **grad_weight,
                                   dt_tensor **grad_bias) {
  dt_tensor *outs[2] = {NULL, NULL};
  dt_op op = rms ? DT_OP_RMS_NORM_BACKWARD_WEIGHT : DT_OP_LAYER_NORM_BACKWARD_AFFINE;
  dt_status st = norm_backward(op, grad, input, k, shape, NULL, eps, rms ? 1 : 2, outs);
  *grad_weight = outs[0];
  if (grad_bias) {
    *grad_bias = outs[1];
  } else {
    dt_tensor_release(outs[1]);
  }
  return st;
}

dt_status dt__layer_norm_backward_all(dt_tensor *grad, dt_tensor *input, int k,
                                      const int64_t *shape, dt_tensor *weight, double eps,
                                      dt_tensor **grad_input, dt_tensor **grad_weight,
                                      dt_tensor **grad_bias) {
  dt_tensor *outs[3] = {NULL, NULL, NULL};
  dt_status st =
      norm_backward(DT_OP_LAYER_NORM_BACKWARD_ALL, grad, input, k, shape, weight, eps, 3, outs);
  *grad_input = outs[0];
  *grad_weight = outs[1];
  *grad_bias = outs[2];
  return st;
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

dt_status dt_softmax(dt_tensor *a, int64_t dim, dt_tensor **out) {
  return dt__dispatch_tensors(DT_OP_SOFTMAX, 1, &a, 1, dim, out);
}

dt_status dt_log_softmax(dt_tensor *a, int64_t dim, dt_tensor **out) {
  return dt__dispatch_tensors(DT_OP_LOG_SOFTMAX, 1, &a, 1, dim, out);
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

dt_status dt__norm_check_eps(const char *fn, double eps, dt_tensor **out) {
  if (out) *out = NULL;
  if (!(eps >= 0) || !isfinite(eps))
    return dt__error(DT_ERR_INVALID, "%s: eps %g must be finite and >= 0", fn, eps);
  return DT_OK;
}

dt_status dt_layer_norm(dt_tensor *x, int ndims, const int64_t *normalized_shape, dt_tensor *weight,
                        dt_tensor *bias, double eps, dt_tensor **out) {
  dt_status st = dt__norm_check_eps("layer_norm", eps, out);
  if (st) return st;
  return dt__norm_dispatch(DT_OP_LAYER_NORM, x, ndims, normalized_shape, weight, bias, eps, out);
}

dt_status dt_batch_norm(dt_tensor *x, dt_tensor *running_mean, dt_tensor *running_var,
                        dt_tensor *weight, dt_tensor *bias, double eps, dt_tensor **out) {
  dt_status st = dt__norm_check_eps("batch_norm", eps, out);
  if (st) return st;
  dt_op_call call = {.op = DT_OP_BATCH_NORM,
                     .n_inputs = 5,
                     .inputs = {x, running_mean, running_var, weight, bias},
                     .scalars = {eps},
                     .n_outputs = 1,
                     .outputs = out};
  return dt__dispatch(&call);
}
