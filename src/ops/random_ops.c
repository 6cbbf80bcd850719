/* uniform_: an in-place random fill that gives every shard its part of the global stream. */
#include "kernels/cpu/cpu_kernels.h"
#include "ops/op_impl.h"

/* Attributes: scalars {lo, hi}; ints[0] the seed. On a shard the dist layer adds the global
 * shape and the shard's offset in int_list (2 * ndim entries), so each rank draws exactly
 * its elements of the global stream. */
dt_status dt__infer_uniform_(dt_op_call *call, dt_tensor_meta *metas) {
  const dt_tensor *a = call->inputs[0];
  if (!dt_dtype_is_floating(a->dtype)) {
    return dt__error(DT_ERR_DTYPE, "uniform_: needs a floating tensor, got %s",
                     dt_dtype_name(a->dtype));
  }
  if (!(call->scalars[1] >= call->scalars[0])) {
    return dt__error(DT_ERR_INVALID, "uniform_: range [%g, %g) is empty or not a number",
                     call->scalars[0], call->scalars[1]);
  }
  if (call->n_int_list != 0 && call->n_int_list != 2 * a->ndim) {
    return dt__error(DT_ERR_INTERNAL, "uniform_: shard geometry of %d entries for a %d-d tensor",
                     call->n_int_list, a->ndim);
  }
  dt__meta_set(&metas[0], a->dtype, a->ndim, a->shape);
  return DT_OK;
}

dt_status dt__kernel_uniform_(dt_op_call *call) {
  dt_tensor *a = call->inputs[0];
  uint64_t seed = (uint64_t)call->ints[0];
  bool contiguous = dt__is_contiguous(a->ndim, a->shape, a->strides);
  dt_tensor *target = a;
  if (!contiguous) {
    dt_status st = dt__tensor_new(a->ndim, a->shape, a->dtype, &target);
    if (st) return st;
  }
  dt_status st;
  if (call->n_int_list) {
    st = dt__random_fill_block(target, DT_RANDOM_UNIFORM, call->scalars[0], call->scalars[1], seed,
                               a->ndim, call->int_list, call->int_list + a->ndim);
  } else {
    dt__random_fill_checked(target, DT_RANDOM_UNIFORM, call->scalars[0], call->scalars[1], seed, 0);
    st = DT_OK; /* infer checked the dtype and the range */
  }
  if (!contiguous) {
    if (!st) dt__cpu_copy(a, target);
    dt_tensor_release(target);
  }
  return st;
}

dt_status dt_uniform_(dt_tensor *a, double lo, double hi, uint64_t seed) {
  dt_op_call call = {.op = DT_OP_UNIFORM_,
                     .n_inputs = 1,
                     .inputs = {a},
                     .n_ints = 1,
                     .ints = {(int64_t)seed},
                     .scalars = {lo, hi}};
  return dt__dispatch(&call);
}
