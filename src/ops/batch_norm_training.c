/* batch_norm_training: batch normalization with the batch's statistics (PyTorch's
 * batch_norm with training=True): per channel (dim 1 of [N, C, ...]) the mean and the
 * biased variance over every other dim, then (x - mean) / sqrt(var + eps) * weight + bias.
 * Running statistics are not updated here: a training loop updates them under no_grad.
 *
 * Inputs {input, weight?, bias?}; eps in scalars[0]. On distributed tensors a shard of the
 * channel dim stays (weight and bias sliced alike, distributed/rules.c): its statistics need
 * the whole batch and every spatial position of a channel, which such a shard has. */
#include <inttypes.h>

#include "kernels/cpu/reduce.h"
#include "ops/op_impl.h"
#include "tensor/dtype_impl.h"

dt_status dt__infer_batch_norm_training(dt_op_call *call, dt_tensor_meta *metas) {
  const dt_tensor *x = call->inputs[0];
  const char *op = dt__op_name(call);
  char bx[160], bt[160];
  if (!dt_dtype_is_floating(x->dtype)) {
    return dt__error(DT_ERR_DTYPE, "%s: input dtype %s is not floating", op,
                     dt_dtype_name(x->dtype));
  }
  if (x->ndim < 2) {
    return dt__error(DT_ERR_SHAPE, "%s: input of shape %s needs at least 2 dims [N, C, ...]", op,
                     dt__format_ints(bx, sizeof bx, x->ndim, x->shape));
  }
  int64_t per_channel = dt__numel(x->ndim, x->shape) / (x->shape[1] > 0 ? x->shape[1] : 1);
  if (x->shape[1] > 0 && per_channel <= 1) {
    return dt__error(DT_ERR_SHAPE,
                     "%s: input of shape %s has %" PRId64
                     " value per channel (batch statistics need more than 1)",
                     op, dt__format_ints(bx, sizeof bx, x->ndim, x->shape), per_channel);
  }
  static const char *const names[] = {"weight", "bias"};
  for (int i = 0; i < 2; i++) {
    const dt_tensor *t = call->inputs[1 + i];
    if (!t) continue;
    if (!dt_dtype_is_floating(t->dtype)) {
      return dt__error(DT_ERR_DTYPE, "%s: %s dtype %s is not floating", op, names[i],
                       dt_dtype_name(t->dtype));
    }
    if (t->ndim != 1 || t->shape[0] != x->shape[1]) {
      return dt__error(DT_ERR_SHAPE,
                       "%s: %s of shape %s does not match the %" PRId64
                       " channels of input shape %s",
                       op, names[i], dt__format_ints(bt, sizeof bt, t->ndim, t->shape), x->shape[1],
                       dt__format_ints(bx, sizeof bx, x->ndim, x->shape));
    }
  }
  dt__meta_set(&metas[0], x->dtype, x->ndim, x->shape);
  return DT_OK;
}

/* Per channel: the mean, then the biased variance around it (two passes, in double). */
static void batch_statistics(const dt_tensor *x, double *mean, double *var) {
  int64_t channels = x->shape[1], n = dt__tensor_numel(x);
  int64_t count = n / channels, esize = (int64_t)dt__dtype_sizes[x->dtype];
  const char *base = dt__tensor_base(x);
  for (int64_t c = 0; c < channels; c++) mean[c] = var[c] = 0.0;
  dt_index_iter it;
  dt__iter_init(&it, x->ndim, x->shape);
  for (int64_t e = 0; e < n; e++, dt__iter_next(&it)) {
    const char *p = base + dt__offset_of(it.index, x->strides, x->ndim) * esize;
    mean[it.index[1]] += dt__load_as_double(x->dtype, p);
  }
  for (int64_t c = 0; c < channels; c++) mean[c] /= (double)count;
  dt__iter_init(&it, x->ndim, x->shape);
  for (int64_t e = 0; e < n; e++, dt__iter_next(&it)) {
    const char *p = base + dt__offset_of(it.index, x->strides, x->ndim) * esize;
    double d = dt__load_as_double(x->dtype, p) - mean[it.index[1]];
    var[it.index[1]] += d * d;
  }
  for (int64_t c = 0; c < channels; c++) var[c] /= (double)count;
}

dt_status dt__kernel_batch_norm_training(dt_op_call *call) {
  const dt_tensor *x = call->inputs[0];
  int64_t channels = x->shape[1];
  if (channels == 0 || dt__tensor_numel(x) == 0) return DT_OK;
  /* The statistics as two float64 [C] tensors, then the inference kernel normalizes. */
  dt_tensor *mean = NULL, *var = NULL;
  dt_status st = dt_zeros(1, &channels, DT_F64, &mean);
  if (!st) st = dt_zeros(1, &channels, DT_F64, &var);
  if (!st) {
    batch_statistics(x, (double *)dt__tensor_base(mean), (double *)dt__tensor_base(var));
    st = dt__cpu_batch_norm(x, mean, var, call->inputs[1], call->inputs[2], call->scalars[0],
                            call->outputs[0]);
  }
  dt_tensor_release(mean);
  dt_tensor_release(var);
  return st;
}

dt_status dt_batch_norm_training(dt_tensor *x, dt_tensor *weight, dt_tensor *bias, double eps,
                                 dt_tensor **out) {
  dt_op_call call = {.op = DT_OP_BATCH_NORM_TRAINING,
                     .n_inputs = 3,
                     .inputs = {x, weight, bias},
                     .scalars = {eps},
                     .n_outputs = 1,
                     .outputs = out};
  return dt__dispatch(&call);
}
