/* scatter_add: the index-accumulation op that backward formulas need (the gradient of
 * embedding and of max.dim/min.dim values), an op of the table like any other so that it
 * runs distributed, is traced and profiled.
 *
 * Attributes: dim in ints[0]. Inputs {self, index, src}. Distributed dispatch runs a self
 * sharded by rows (dim 0) with ints {dim, row offset of this shard, rows of the whole}: on a
 * scatter along dim 0 each shard adds only the indices that fall in its rows (the others
 * contribute nothing there), so the shards together are the whole result; along another dim
 * the window does not matter (index and src are sharded with self). */
#include <inttypes.h>

#include "kernels/cpu/index.h"
#include "ops/op_impl.h"

dt_status dt__infer_scatter_add(dt_op_call *call, dt_tensor_meta *metas) {
  const dt_tensor *self = call->inputs[0], *index = call->inputs[1], *src = call->inputs[2];
  const char *op = dt__op_name(call);
  char bs[160], bi[160], bx[160];
  if (index->dtype != DT_I64 && index->dtype != DT_I32) {
    return dt__error(DT_ERR_DTYPE, "%s: index must be int64 or int32, got %s", op,
                     dt_dtype_name(index->dtype));
  }
  if (src->dtype != self->dtype || self->dtype == DT_BOOL) {
    return dt__error(DT_ERR_DTYPE, "%s: self (%s) and src (%s) must have one non-bool dtype", op,
                     dt_dtype_name(self->dtype), dt_dtype_name(src->dtype));
  }
  if (index->ndim != self->ndim || src->ndim != self->ndim || self->ndim == 0) {
    return dt__error(DT_ERR_SHAPE,
                     "%s: self %s, index %s and src %s must have the same number of dims (at "
                     "least 1)",
                     op, dt__format_ints(bs, sizeof bs, self->ndim, self->shape),
                     dt__format_ints(bi, sizeof bi, index->ndim, index->shape),
                     dt__format_ints(bx, sizeof bx, src->ndim, src->shape));
  }
  int d;
  dt_status st = dt__normalize_dim(op, call->ints[0], self->ndim, &d);
  if (st) return st;
  for (int i = 0; i < self->ndim; i++) {
    if (index->shape[i] > src->shape[i] || (i != d && index->shape[i] > self->shape[i])) {
      return dt__error(DT_ERR_SHAPE,
                       "%s: index %s is larger than src %s or than self %s in dim %d (dim=%d)", op,
                       dt__format_ints(bi, sizeof bi, index->ndim, index->shape),
                       dt__format_ints(bx, sizeof bx, src->ndim, src->shape),
                       dt__format_ints(bs, sizeof bs, self->ndim, self->shape), i, d);
    }
  }
  /* Never adds: the window's ints also come from the CLI's raw ints. */
  if (call->n_ints == 3 && (call->ints[1] < 0 || call->ints[2] < 0 || self->ndim == 0 ||
                            call->ints[1] > call->ints[2] - self->shape[0])) {
    return dt__error(DT_ERR_INVALID,
                     "%s: the row window offset %" PRId64 " of a %" PRId64
                     "-row tensor does not hold self's %" PRId64 " rows",
                     op, call->ints[1], call->ints[2], self->ndim ? self->shape[0] : 0);
  }
  call->ints[0] = d;
  if (call->n_ints != 3) call->n_ints = 1;
  dt__meta_set(&metas[0], self->dtype, self->ndim, self->shape);
  return DT_OK;
}

dt_status dt__kernel_scatter_add(dt_op_call *call) {
  int dim = (int)call->ints[0];
  bool window = call->n_ints == 3 && dim == 0;
  int64_t offset = window ? call->ints[1] : 0;
  int64_t limit = window ? call->ints[2] : call->inputs[0]->shape[dim];
  return dt__cpu_scatter_add(dt__op_name(call), call->inputs[0], dim, call->inputs[1],
                             call->inputs[2], offset, limit, call->outputs[0]);
}

dt_status dt_scatter_add(dt_tensor *self, int64_t dim, dt_tensor *index, dt_tensor *src,
                         dt_tensor **out) {
  return dt__dispatch_tensors(DT_OP_SCATTER_ADD, 3, (dt_tensor *[]){self, index, src}, 1, dim, out);
}
