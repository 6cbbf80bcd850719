/* batch_norm_training: batch normalization with the batch's statistics (PyTorch's
 * batch_norm with training=True): per channel (dim 1 of [N, C, ...]) the mean and the
 * biased variance over every other dim, then (x - mean) / sqrt(var + eps) * weight + bias.
 * Running statistics are not updated here: a training loop updates them under no_grad.
 *
 * Inputs {input, weight?, bias?}; eps in scalars[0]. On distributed tensors a shard of the
 * channel dim runs this kernel as it is (weight and bias sliced alike, distributed/rules.c);
 * a shard of another dim runs dt__batch_norm_training_stats with the per-channel sums
 * all_reduced across ranks (synchronized batch norm, distributed/dispatch.c). */
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

/* Per channel: the sum of x (dev == NULL) or of its squared deviations from dev[c], in
 * double, added into acc. */
static void channel_sums(const dt_tensor *x, const double *dev, double *acc) {
  int64_t n = dt__tensor_numel(x), esize = (int64_t)dt__dtype_sizes[x->dtype];
  const char *base = dt__tensor_base(x);
  dt_index_iter it;
  dt__iter_init(&it, x->ndim, x->shape);
  for (int64_t e = 0; e < n; e++, dt__iter_next(&it)) {
    const char *p = base + dt__offset_of(it.index, x->strides, x->ndim) * esize;
    double v = dt__load_as_double(x->dtype, p);
    if (dev) {
      v -= dev[it.index[1]];
      v *= v;
    }
    acc[it.index[1]] += v;
  }
}

dt_status dt__batch_norm_training_stats(dt_op_call *call, int64_t count,
                                        dt__channel_reduce_fn reduce, void *ctx) {
  const dt_tensor *x = call->inputs[0];
  int64_t channels = x->shape[1];
  if (channels == 0) return DT_OK;
  /* The statistics as two float64 [C] tensors (the mean, then the biased variance around
   * it: two passes), then the inference kernel normalizes. */
  dt_tensor *mean = NULL, *var = NULL;
  dt_status st = dt_zeros(1, &channels, DT_F64, &mean);
  if (!st) st = dt_zeros(1, &channels, DT_F64, &var);
  double *m = st ? NULL : (double *)dt__tensor_base(mean);
  double *v = st ? NULL : (double *)dt__tensor_base(var);
  if (!st) {
    channel_sums(x, NULL, m);
    if (reduce) st = reduce(ctx, mean);
  }
  if (!st) {
    for (int64_t c = 0; c < channels; c++) m[c] /= (double)count;
    channel_sums(x, m, v);
    if (reduce) st = reduce(ctx, var);
  }
  if (!st) {
    for (int64_t c = 0; c < channels; c++) v[c] /= (double)count;
    if (dt__tensor_numel(x) > 0) {
      st = dt__cpu_batch_norm(x, mean, var, call->inputs[1], call->inputs[2], call->scalars[0],
                              call->outputs[0]);
    }
  }
  dt_tensor_release(mean);
  dt_tensor_release(var);
  return st;
}

dt_status dt__kernel_batch_norm_training(dt_op_call *call) {
  const dt_tensor *x = call->inputs[0];
  int64_t channels = x->shape[1];
  if (channels == 0 || dt__tensor_numel(x) == 0) return DT_OK;
  return dt__batch_norm_training_stats(call, dt__tensor_numel(x) / channels, NULL, NULL);
}

dt_status dt_batch_norm_training(dt_tensor *x, dt_tensor *weight, dt_tensor *bias, double eps,
                                 dt_tensor **out) {
  dt_status st = dt__norm_check_eps("batch_norm_training", eps, out);
  if (st) return st;
  dt_op_call call = {.op = DT_OP_BATCH_NORM_TRAINING,
                     .n_inputs = 3,
                     .inputs = {x, weight, bias},
                     .scalars = {eps},
                     .n_outputs = 1,
                     .outputs = out};
  return dt__dispatch(&call);
}
