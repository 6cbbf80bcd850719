/* embedding: rows of a weight table picked by integer indices.
 *
 * Attributes: none for a plain lookup. The dist layer runs a vocabulary-parallel lookup
 * (weight sharded by rows) with ints {row offset of this shard, rows of the whole table}:
 * indices are checked against the whole table, rows outside this shard come out as zeros,
 * and the sum over the shards is the full lookup (a Partial(sum) result). */
#include <inttypes.h>

#include "kernels/cpu/matrix.h"
#include "ops/op_impl.h"

dt_status dt__infer_embedding(dt_op_call *call, dt_tensor_meta *metas) {
  const dt_tensor *weight = call->inputs[0], *indices = call->inputs[1];
  const char *op = dt__op_name(call);
  char buf[160];
  if (weight->ndim != 2) {
    return dt__error(DT_ERR_SHAPE, "%s: weight must be 2-D [num, dim], got shape %s", op,
                     dt__format_ints(buf, sizeof buf, weight->ndim, weight->shape));
  }
  if (indices->dtype != DT_I64 && indices->dtype != DT_I32) {
    return dt__error(DT_ERR_DTYPE, "%s: indices must be int64 or int32, got %s", op,
                     dt_dtype_name(indices->dtype));
  }
  if (indices->ndim >= DT_MAX_DIMS) {
    return dt__error(
        DT_ERR_SHAPE,
        "%s: indices of shape %s leave no room for the embedding dim (at most %d dims)", op,
        dt__format_ints(buf, sizeof buf, indices->ndim, indices->shape), DT_MAX_DIMS);
  }
  /* The window's checks never add: offsets come from the CLI's raw ints as well, and
   * offset + rows past INT64_MAX would wrap and pass. */
  if (call->n_ints != 0 &&
      (call->n_ints != 2 || call->ints[0] < 0 || call->ints[1] < weight->shape[0] ||
       call->ints[0] > call->ints[1] - weight->shape[0])) {
    if (call->n_ints != 2) {
      return dt__error(DT_ERR_INVALID,
                       "%s: a row window takes 2 ints (offset, rows of the whole table), got %d",
                       op, call->n_ints);
    }
    return dt__error(DT_ERR_INVALID,
                     "%s: the row window offset %" PRId64 " of a %" PRId64
                     "-row table does not hold the local weight's %" PRId64 " rows",
                     op, call->ints[0], call->ints[1], weight->shape[0]);
  }
  dt_tensor_meta *m = &metas[0];
  dt__meta_set(m, weight->dtype, indices->ndim, indices->shape);
  m->shape[m->ndim++] = weight->shape[1];
  return DT_OK;
}

dt_status dt__kernel_embedding(dt_op_call *call) {
  if (call->n_ints == 2) {
    return dt__cpu_embedding_window(dt__op_name(call), call->inputs[0], call->inputs[1],
                                    call->ints[0], call->ints[1], call->outputs[0]);
  }
  return dt__cpu_embedding(dt__op_name(call), call->inputs[0], call->inputs[1], call->outputs[0]);
}

dt_status dt_embedding(dt_tensor *weight, dt_tensor *indices, dt_tensor **out) {
  return dt__dispatch_two(DT_OP_EMBEDDING, weight, indices, 0.0, out);
}

/* embedding_backward(weight, indices, grad_output): weight gives only the gradient's geometry
 * (shape, dtype and, distributed, its row window); it is never read. */
dt_status dt__infer_embedding_backward(dt_op_call *call, dt_tensor_meta *metas) {
  const dt_tensor *weight = call->inputs[0], *g = call->inputs[2];
  const char *op = dt__op_name(call);
  dt_tensor_meta lookup;
  dt_op_call probe = *call;
  probe.n_inputs = 2;
  dt_status st = dt__infer_embedding(&probe, &lookup);
  if (st) return st;
  if (!dt_dtype_is_floating(weight->dtype) || g->dtype != weight->dtype) {
    return dt__error(DT_ERR_DTYPE,
                     "%s: grad_output has dtype %s and weight %s (expected one "
                     "floating dtype)",
                     op, dt_dtype_name(g->dtype), dt_dtype_name(weight->dtype));
  }
  if (g->ndim != lookup.ndim ||
      memcmp(g->shape, lookup.shape, sizeof(int64_t) * (size_t)g->ndim) != 0) {
    char bg[160], bl[160];
    return dt__error(DT_ERR_SHAPE, "%s: grad_output of shape %s does not match the lookup's %s", op,
                     dt__format_ints(bg, sizeof bg, g->ndim, g->shape),
                     dt__format_ints(bl, sizeof bl, lookup.ndim, lookup.shape));
  }
  dt__meta_set(&metas[0], weight->dtype, weight->ndim, weight->shape);
  return DT_OK;
}

dt_status dt__kernel_embedding_backward(dt_op_call *call) {
  bool window = call->n_ints == 2;
  int64_t rows = call->inputs[0]->shape[0];
  return dt__cpu_embedding_backward(dt__op_name(call), call->inputs[1], call->inputs[2],
                                    window ? call->ints[0] : 0, window ? call->ints[1] : rows,
                                    call->outputs[0]);
}

dt_status dt__embedding_backward(dt_tensor *weight, dt_tensor *indices, dt_tensor *grad,
                                 dt_tensor **out) {
  return dt__dispatch_tensors(DT_OP_EMBEDDING_BACKWARD, 3, (dt_tensor *[]){weight, indices, grad},
                              0, 0, out);
}
