/* The index and ordering ops the Hugging Face models need (issue 27): tril/triu, cumsum,
 * topk, index_select and gather: argument checks, output shapes and dtypes, kernels and the
 * public functions.
 *
 * Attributes: tril/triu ints[0] = diagonal (the distributed dispatch shifts it by a shard's
 * row offset minus its column offset, so a shard of the matrix dims keeps its part of the
 * global triangle); cumsum ints[0] = dim; topk ints {k, dim, largest}; index_select and
 * gather ints[0] = dim with the index as inputs[1]. */
#include <inttypes.h>

#include "kernels/cpu/index.h"
#include "ops/op_impl.h"

static bool is_index_dtype(dt_dtype d) { return d == DT_I64 || d == DT_I32; }

dt_status dt__infer_triangle(dt_op_call *call, dt_tensor_meta *metas) {
  const dt_tensor *a = call->inputs[0];
  if (a->ndim < 2) {
    return dt__error(DT_ERR_SHAPE, "%s: self must have at least 2 dims (got %d)", dt__op_name(call),
                     a->ndim);
  }
  call->n_ints = 1;
  dt__meta_set(&metas[0], a->dtype, a->ndim, a->shape);
  return DT_OK;
}

dt_status dt__kernel_triangle(dt_op_call *call) {
  dt__cpu_triangle(call->inputs[0], call->ints[0], call->op == DT_OP_TRIU, call->outputs[0]);
  return DT_OK;
}

dt_status dt__infer_cumsum(dt_op_call *call, dt_tensor_meta *metas) {
  const dt_tensor *a = call->inputs[0];
  dt_status st = dt__call_dim(call, a, NULL);
  if (st) return st;
  /* Integers and bool sum in int64, as PyTorch promotes them. */
  dt_dtype out = dt_dtype_is_floating(a->dtype) ? a->dtype : DT_I64;
  dt__meta_set(&metas[0], out, a->ndim, a->shape);
  return DT_OK;
}

dt_status dt__kernel_cumsum(dt_op_call *call) {
  dt__cpu_cumsum(call->inputs[0], (int)call->ints[0], call->outputs[0]);
  return DT_OK;
}

dt_status dt__infer_topk(dt_op_call *call, dt_tensor_meta *metas) {
  const dt_tensor *a = call->inputs[0];
  const char *op = dt__op_name(call);
  if (a->dtype == DT_BOOL)
    return dt__error(DT_ERR_DTYPE, "%s: self has dtype bool, which has no order", op);
  int d;
  dt_status st = dt__normalize_dim(op, call->ints[1], a->ndim, &d);
  if (st) return st;
  if (call->ints[0] < 0 || call->ints[0] > a->shape[d]) {
    return dt__error(DT_ERR_INVALID, "%s: k = %" PRId64 " is outside [0, %" PRId64 "] (dim %d)", op,
                     call->ints[0], a->shape[d], d);
  }
  call->ints[1] = d;
  call->ints[2] = call->ints[2] != 0;
  call->n_ints = 3;
  if (call->n_outputs > 2) call->n_outputs = 2; /* values, indices */
  dt__meta_set(&metas[0], a->dtype, a->ndim, a->shape);
  metas[0].shape[d] = call->ints[0];
  dt__meta_set(&metas[1], DT_I64, a->ndim, metas[0].shape);
  return DT_OK;
}

dt_status dt__kernel_topk(dt_op_call *call) {
  return dt__cpu_topk(dt__op_name(call), call->inputs[0], call->ints[0], (int)call->ints[1],
                      call->ints[2] != 0, call->outputs[0], call->outputs[1]);
}

/* The index argument of index_select (1-D) and gather (self's number of dims). */
static dt_status check_index(const dt_op_call *call, const dt_tensor *index, int want_ndim) {
  const char *op = dt__op_name(call);
  char b[160];
  if (!is_index_dtype(index->dtype))
    return dt__error(DT_ERR_DTYPE, "%s: index must be int64 or int32, got %s", op,
                     dt_dtype_name(index->dtype));
  if (index->ndim != want_ndim) {
    return dt__error(DT_ERR_SHAPE, "%s: index %s must have %d dim%s", op,
                     dt__format_ints(b, sizeof b, index->ndim, index->shape), want_ndim,
                     want_ndim == 1 ? "" : "s");
  }
  return DT_OK;
}

dt_status dt__infer_index_select(dt_op_call *call, dt_tensor_meta *metas) {
  const dt_tensor *a = call->inputs[0], *index = call->inputs[1];
  int d;
  dt_status st = dt__call_dim(call, a, &d);
  if (!st) st = check_index(call, index, 1);
  if (st) return st;
  dt__meta_set(&metas[0], a->dtype, a->ndim, a->shape);
  metas[0].shape[d] = index->shape[0];
  return DT_OK;
}

dt_status dt__kernel_index_select(dt_op_call *call) {
  return dt__cpu_index_select(dt__op_name(call), call->inputs[0], (int)call->ints[0],
                              call->inputs[1], call->outputs[0]);
}

dt_status dt__infer_gather(dt_op_call *call, dt_tensor_meta *metas) {
  const dt_tensor *a = call->inputs[0], *index = call->inputs[1];
  const char *op = dt__op_name(call);
  if (call->n_ints > 1 && call->ints[1] != 0)
    return dt__error(DT_ERR_UNSUPPORTED, "%s: sparse_grad=true is not supported", op);
  /* A row window the dist dispatcher passes after {dim, sparse_grad} survives the dim's
   * normalization (dt__kernel_gather). */
  bool windowed = call->n_ints == 4;
  int64_t window[2] = {call->ints[2], call->ints[3]};
  int d;
  dt_status st = dt__call_dim(call, a, &d);
  if (!st) st = check_index(call, index, a->ndim);
  if (st) return st;
  if (windowed) {
    call->ints[1] = 0, call->ints[2] = window[0], call->ints[3] = window[1];
    call->n_ints = 4;
  }
  for (int i = 0; i < a->ndim; i++) {
    if (i != d && index->shape[i] > a->shape[i]) {
      char bi[160], ba[160];
      return dt__error(DT_ERR_SHAPE, "%s: index %s is larger than self %s in dim %d (dim=%d)", op,
                       dt__format_ints(bi, sizeof bi, index->ndim, index->shape),
                       dt__format_ints(ba, sizeof ba, a->ndim, a->shape), i, d);
    }
  }
  dt__meta_set(&metas[0], a->dtype, index->ndim, index->shape);
  return DT_OK;
}

/* ints {dim, sparse_grad}, then {offset, rows} when the dist dispatcher passes self's row window
 * (self sharded along dim 0, the gather dim). */
dt_status dt__kernel_gather(dt_op_call *call) {
  int dim = (int)call->ints[0];
  bool window = call->n_ints == 4 && dim == 0;
  const dt_tensor *a = call->inputs[0];
  return dt__cpu_gather(dt__op_name(call), a, dim, call->inputs[1], window ? call->ints[2] : 0,
                        window ? call->ints[3] : a->shape[dim], call->outputs[0]);
}

/* ---- Public functions ------------------------------------------------------------------- */

static dt_status one_int(dt_op op, dt_tensor *a, dt_tensor *index, int64_t v, dt_tensor **out) {
  return dt__dispatch_tensors(op, index ? 2 : 1, (dt_tensor *[]){a, index}, 1, v, out);
}

dt_status dt_tril(dt_tensor *a, int64_t diagonal, dt_tensor **out) {
  return one_int(DT_OP_TRIL, a, NULL, diagonal, out);
}

dt_status dt_triu(dt_tensor *a, int64_t diagonal, dt_tensor **out) {
  return one_int(DT_OP_TRIU, a, NULL, diagonal, out);
}

dt_status dt_cumsum(dt_tensor *a, int64_t dim, dt_tensor **out) {
  return one_int(DT_OP_CUMSUM, a, NULL, dim, out);
}

dt_status dt_index_select(dt_tensor *a, int64_t dim, dt_tensor *index, dt_tensor **out) {
  if (!index) {
    if (out) *out = NULL;
    return dt__error(DT_ERR_INVALID, "index_select: index is NULL");
  }
  return one_int(DT_OP_INDEX_SELECT, a, index, dim, out);
}

dt_status dt_gather(dt_tensor *a, int64_t dim, dt_tensor *index, dt_tensor **out) {
  if (!index) {
    if (out) *out = NULL;
    return dt__error(DT_ERR_INVALID, "gather: index is NULL");
  }
  return one_int(DT_OP_GATHER, a, index, dim, out);
}

dt_status dt_topk(dt_tensor *a, int64_t k, int64_t dim, bool largest, dt_tensor **values,
                  dt_tensor **indices) {
  if (values) *values = NULL;
  if (indices) *indices = NULL;
  if (!values || !indices)
    return dt__error(DT_ERR_INVALID, "topk: %s is NULL", values ? "indices" : "values");
  dt_tensor *outs[2] = {NULL, NULL};
  dt_op_call call = {.op = DT_OP_TOPK,
                     .n_inputs = 1,
                     .inputs = {a},
                     .n_ints = 3,
                     .ints = {k, dim, largest ? 1 : 0},
                     .n_outputs = 2,
                     .outputs = outs};
  dt_status st = dt__dispatch(&call);
  if (st) return st;
  *values = outs[0];
  *indices = outs[1];
  return DT_OK;
}
