/*
 * The CUDA adapters of the reductions, softmax, the norms, embedding, scatter_add and the
 * cross-entropy pair: each reads its call as the CPU's adapter in src/ops/ does and launches
 * reduce.cu's, rows.cu's or index.cu's kernels on the calling thread's stream. Index and target
 * values are checked on the device before anything is written; the op waits for that verdict
 * (the only wait in these kernels), so a bad index fails the op naming it, as on the CPU.
 */
#include <inttypes.h>

#include "kernels/cuda/op_kernels.h"
#include "kernels/cuda/op_launch.h"
#include "ops/loss_impl.h"

dt_status dt__cuda_check_indices(const dt_op_call *call, cudaStream_t stream, const dt_tensor *idx,
                                 int64_t lo, int64_t hi, bool allow, int64_t allowed,
                                 int64_t *bad_position, int64_t *bad_value) {
  dt_tensor *flag = NULL;
  dt_status st = dt__cuda_new_like(idx, 1, (int64_t[]){2}, DT_I64, &flag);
  if (st) return st;
  dt_cuda_ref r = dt__cuda_ref(idx);
  int64_t host[2] = {0, 0};
  int error = dt__cuda_launch_check_index(stream, &r, lo, hi, allow, allowed,
                                          (int64_t *)dt__tensor_base(flag));
  if (!error)
    error = (int)cudaMemcpyAsync(host, dt__tensor_base(flag), sizeof host, cudaMemcpyDeviceToHost,
                                 stream);
  if (!error) error = (int)cudaStreamSynchronize(stream);
  dt_tensor_release(flag);
  if (error) return dt__cuda_error(dt__op_name(call), "checking the indices", (cudaError_t)error);
  *bad_position = host[0];
  *bad_value = host[1];
  return DT_OK;
}

dt_status dt__cuda_check_dim_indices(const dt_op_call *call, cudaStream_t stream,
                                     const dt_tensor *index, int dim, int64_t size) {
  int64_t bad = -1, value = 0;
  dt_status st = dt__cuda_check_indices(call, stream, index, 0, size, false, 0, &bad, &value);
  if (st || bad < 0) return st;
  return dt__error(DT_ERR_INDEX,
                   "%s: index %" PRId64 " at position %" PRId64
                   " is out of range for dim %d of size %" PRId64,
                   dt__op_name(call), value, bad, dim, size);
}

/* ---- reductions ------------------------------------------------------------------------------ */

dt_status dt__cuda_kernel_reduce(dt_op_call *call) {
  const dt_tensor *a = call->inputs[0];
  dt_reduction_facts f = dt__reduction_facts(call, a->ndim);
  static const dt_cuda_reduce_kind kinds[] = {
      [DT_REDUCE_SUM] = DT_CUDA_SUM,
      [DT_REDUCE_AVG] = DT_CUDA_MEAN,
      [DT_REDUCE_MAX] = DT_CUDA_MAX,
      [DT_REDUCE_MIN] = DT_CUDA_MIN,
  };
  bool has_values = call->op != DT_OP_ARGMAX;
  dt_tensor *values = has_values ? call->outputs[0] : NULL;
  dt_tensor *indices = f.indices ? call->outputs[has_values ? 1 : 0] : NULL;
  cudaStream_t s;
  dt_status st = dt__cuda_call_stream(call, a, &s);
  if (st) return st;
  dt_cuda_ref ra = dt__cuda_ref(a), rv, ri;
  if (values) rv = dt__cuda_ref(values);
  if (indices) ri = dt__cuda_ref(indices);
  return dt__cuda_launched(call, dt__cuda_launch_reduce(s, kinds[f.combine], &ra, f.mask,
                                                        values ? &rv : NULL, indices ? &ri : NULL));
}

/* ---- softmax, norms ------------------------------------------------------------------------- */

dt_status dt__cuda_kernel_softmax(dt_op_call *call) {
  cudaStream_t s;
  dt_cuda_ref r[2]; /* out, a */
  dt_status st = dt__cuda_call_operands(call, 1, &s, r);
  if (st) return st;
  return dt__cuda_launched(call, dt__cuda_launch_softmax(s, &r[1], (int)call->ints[0],
                                                         call->op == DT_OP_LOG_SOFTMAX, &r[0]));
}

/* layer_norm {input, weight?, bias?} and rms_norm {input, weight?}: normalized_shape in ints. */
static dt_status norm(dt_op_call *call, bool rms) {
  cudaStream_t s;
  dt_status st = dt__cuda_call_stream(call, call->inputs[0], &s);
  if (st) return st;
  const dt_tensor *w = call->inputs[1], *b = rms ? NULL : call->inputs[2];
  dt_cuda_ref x = dt__cuda_ref(call->inputs[0]), out = dt__cuda_ref(call->outputs[0]), rw, rb;
  if (w) rw = dt__cuda_ref(w);
  if (b) rb = dt__cuda_ref(b);
  return dt__cuda_launched(call,
                           dt__cuda_launch_layer_norm(s, rms, &x, call->n_ints, w ? &rw : NULL,
                                                      b ? &rb : NULL, call->scalars[0], &out));
}

dt_status dt__cuda_kernel_layer_norm(dt_op_call *call) { return norm(call, false); }

dt_status dt__cuda_kernel_rms_norm(dt_op_call *call) { return norm(call, true); }

/* batch_norm {input, running_mean, running_var, weight?, bias?} (training: {input, weight?,
 * bias?}, the batch's statistics in a device scratch of 2 C doubles). */
static dt_status batch_norm(dt_op_call *call, bool training) {
  dt_tensor *x = call->inputs[0], *scratch = NULL;
  dt_tensor *const *p = training ? call->inputs + 1 : call->inputs + 3;
  cudaStream_t s;
  dt_status st = dt__cuda_call_stream(call, x, &s);
  if (!st && training) st = dt__cuda_new_like(x, 1, (int64_t[]){2 * x->shape[1]}, DT_F64, &scratch);
  if (st) return st;
  dt_cuda_ref rx = dt__cuda_ref(x), out = dt__cuda_ref(call->outputs[0]), rm, rv, rw, rb;
  if (!training) rm = dt__cuda_ref(call->inputs[1]), rv = dt__cuda_ref(call->inputs[2]);
  if (p[0]) rw = dt__cuda_ref(p[0]);
  if (p[1]) rb = dt__cuda_ref(p[1]);
  st = dt__cuda_launched(
      call, dt__cuda_launch_batch_norm(s, &rx, training ? NULL : &rm, training ? NULL : &rv,
                                       p[0] ? &rw : NULL, p[1] ? &rb : NULL, call->scalars[0],
                                       scratch ? (double *)dt__tensor_base(scratch) : NULL, &out));
  dt_tensor_release(scratch);
  return st;
}

dt_status dt__cuda_kernel_batch_norm(dt_op_call *call) { return batch_norm(call, false); }

dt_status dt__cuda_kernel_batch_norm_training(dt_op_call *call) {
  const dt_tensor *x = call->inputs[0];
  if (x->shape[1] == 0 || dt__tensor_numel(x) == 0) return DT_OK;
  return batch_norm(call, true);
}

/* ---- embedding, scatter_add ------------------------------------------------------------------ */

/* embedding and its backward: weight's stream in *s, and every index checked against the
 * table's rows [0, total) before anything is written; *offset is the first row of weight's
 * window (ints {offset, total} when the table is sharded by rows, else 0 and all its rows). */
static dt_status embedding_indices(const dt_op_call *call, const dt_tensor *weight,
                                   const dt_tensor *idx, cudaStream_t *s, int64_t *offset) {
  bool window = call->n_ints == 2;
  int64_t total = window ? call->ints[1] : weight->shape[0];
  *offset = window ? call->ints[0] : 0;
  dt_status st = dt__cuda_call_stream(call, weight, s);
  int64_t bad = -1, value = 0;
  if (!st) st = dt__cuda_check_indices(call, *s, idx, 0, total, false, 0, &bad, &value);
  if (st) return st;
  if (bad >= 0) {
    char buf[160];
    return dt__error(DT_ERR_INDEX,
                     "%s: index %" PRId64 " (element %" PRId64
                     " of indices %s) is out of range for a weight of %" PRId64 " rows",
                     dt__op_name(call), value, bad,
                     dt__format_ints(buf, sizeof buf, idx->ndim, idx->shape), total);
  }
  return DT_OK;
}

dt_status dt__cuda_kernel_embedding(dt_op_call *call) {
  const dt_tensor *weight = call->inputs[0], *idx = call->inputs[1];
  cudaStream_t s;
  int64_t offset;
  dt_status st = embedding_indices(call, weight, idx, &s, &offset);
  if (st) return st;
  dt_cuda_ref w = dt__cuda_ref(weight), i = dt__cuda_ref(idx), out = dt__cuda_ref(call->outputs[0]);
  return dt__cuda_launched(call, dt__cuda_launch_embedding(s, &w, &i, offset, &out));
}

dt_status dt__cuda_kernel_scatter_add(dt_op_call *call) {
  const dt_tensor *self = call->inputs[0], *index = call->inputs[1], *src = call->inputs[2];
  int dim = (int)call->ints[0];
  bool window = call->n_ints == 3 && dim == 0;
  int64_t offset = window ? call->ints[1] : 0, limit = window ? call->ints[2] : self->shape[dim];
  cudaStream_t s;
  dt_status st = dt__cuda_call_stream(call, self, &s);
  if (!st) st = dt__cuda_check_dim_indices(call, s, index, dim, limit);
  if (st) return st;
  dt_cuda_ref out = dt__cuda_ref(call->outputs[0]), rs = dt__cuda_ref(self),
              ri = dt__cuda_ref(index), rx = dt__cuda_ref(src);
  st = dt__cuda_launched(call, dt__cuda_launch_copy(s, &out, &rs));
  if (st) return st;
  return dt__cuda_launched(call, dt__cuda_launch_scatter_add(s, &out, dim, &ri, &rx, offset));
}

/* ---- cross-entropy ----------------------------------------------------------------------------
 */

/* logits and target are inputs[first], inputs[first + 1]; grad (backward) inputs[0]. */
static dt_status cross_entropy(dt_op_call *call, bool backward) {
  const dt_tensor *grad = backward ? call->inputs[0] : NULL;
  const dt_tensor *logits = call->inputs[backward], *target = call->inputs[backward + 1];
  int64_t ignore, classes = logits->shape[1];
  bool has_ignore = dt__cross_entropy_ignores(call, &ignore);
  cudaStream_t s;
  dt_status st = dt__cuda_call_stream(call, logits, &s);
  if (st) return st;
  /* a target outside [0, C) fails unless it is the ignored index */
  int64_t bad = -1, value = 0;
  st = dt__cuda_check_indices(call, s, target, 0, classes, has_ignore, ignore, &bad, &value);
  if (st) return st;
  if (bad >= 0) {
    return dt__error(DT_ERR_INVALID,
                     "%s: target[%" PRId64 "] = %" PRId64 " is out of range for %" PRId64
                     " classes",
                     dt__op_name(call), bad, value, classes);
  }
  dt_cuda_ref rg, rl = dt__cuda_ref(logits), rt = dt__cuda_ref(target),
                  out = dt__cuda_ref(call->outputs[0]);
  if (grad) rg = dt__cuda_ref(grad);
  return dt__cuda_launched(call,
                           dt__cuda_launch_cross_entropy(s, grad ? &rg : NULL, &rl, &rt, has_ignore,
                                                         ignore, call->scalars[0], &out));
}

dt_status dt__cuda_kernel_cross_entropy(dt_op_call *call) { return cross_entropy(call, false); }

dt_status dt__cuda_kernel_cross_entropy_backward(dt_op_call *call) {
  return cross_entropy(call, true);
}

/* ---- the fused backward ops ------------------------------------------------------------------ */

dt_status dt__cuda_kernel_softmax_backward(dt_op_call *call) {
  cudaStream_t s;
  dt_cuda_ref r[3]; /* out, g, y */
  dt_status st = dt__cuda_call_operands(call, 2, &s, r);
  if (st) return st;
  bool take_log = call->op == DT_OP_LOG_SOFTMAX_BACKWARD;
  return dt__cuda_launched(
      call, dt__cuda_launch_softmax_backward(s, &r[1], &r[2], (int)call->ints[0], take_log, &r[0]));
}

/* layer_norm_backward / rms_norm_backward {grad, input, weight?} -> the input's gradient;
 * layer_norm_backward_affine -> (grad_weight, grad_bias), rms_norm_backward_weight ->
 * grad_weight {grad, input}: normalized_shape in ints, eps in scalars[0]. */
dt_status dt__cuda_kernel_norm_backward(dt_op_call *call) {
  dt_tensor *g = call->inputs[0], *x = call->inputs[1], *scratch = NULL;
  bool rms = call->op == DT_OP_RMS_NORM_BACKWARD || call->op == DT_OP_RMS_NORM_BACKWARD_WEIGHT;
  bool input = call->op == DT_OP_LAYER_NORM_BACKWARD || call->op == DT_OP_RMS_NORM_BACKWARD;
  cudaStream_t s;
  dt_status st = dt__cuda_call_stream(call, x, &s);
  if (st) return st;
  dt_cuda_ref rg = dt__cuda_ref(g), rx = dt__cuda_ref(x), rw, o0, o1;
  const dt_tensor *w = input ? call->inputs[2] : NULL;
  if (w) rw = dt__cuda_ref(w);
  o0 = dt__cuda_ref(call->outputs[0]);
  bool has_db = !input && !rms;
  if (has_db) o1 = dt__cuda_ref(call->outputs[1]);
  if (!input) {
    int64_t rows = dt__numel(x->ndim - call->n_ints, x->shape);
    st = dt__cuda_new_like(x, 1, (int64_t[]){2 * rows}, DT_F64, &scratch);
    if (st) return st;
  }
  st = dt__cuda_launched(call, dt__cuda_launch_norm_backward(
                                   s, rms, &rg, &rx, call->n_ints, w ? &rw : NULL, call->scalars[0],
                                   scratch ? (double *)dt__tensor_base(scratch) : NULL,
                                   input ? &o0 : NULL, input ? NULL : &o0, has_db ? &o1 : NULL));
  dt_tensor_release(scratch);
  return st;
}

/* embedding_backward {weight, indices, grad}: zeros, then grad's rows added at the indices (in
 * the window [offset, offset + rows) when sharded by rows): scatter_add's kernel on the indices
 * and grad made contiguous, [count] and [count, dim]. */
dt_status dt__cuda_kernel_embedding_backward(dt_op_call *call) {
  const dt_tensor *weight = call->inputs[0], *idx = call->inputs[1], *grad = call->inputs[2];
  dt_tensor *out = call->outputs[0], *idx64 = NULL, *gc = NULL;
  int64_t count = dt__tensor_numel(idx), dim = out->shape[1];
  cudaStream_t s;
  int64_t offset;
  dt_status st = embedding_indices(call, weight, idx, &s, &offset);
  if (st) return st;
  dt_cuda_ref ro = dt__cuda_ref(out);
  st = dt__cuda_launched(call, dt__cuda_launch_masked_fill(s, &ro, NULL, NULL, 0.0));
  if (st || count == 0 || dim == 0) return st;
  st = dt__cuda_new_like(idx, idx->ndim, idx->shape, DT_I64, &idx64);
  if (!st && !dt__is_contiguous(grad->ndim, grad->shape, grad->strides))
    st = dt__cuda_new_like(grad, grad->ndim, grad->shape, grad->dtype, &gc);
  dt_cuda_ref ri = dt__cuda_ref(idx), r64, rg = dt__cuda_ref(grad), rc;
  if (!st)
    r64 = dt__cuda_ref(idx64), st = dt__cuda_launched(call, dt__cuda_launch_copy(s, &r64, &ri));
  if (!st && gc)
    rc = dt__cuda_ref(gc), st = dt__cuda_launched(call, dt__cuda_launch_copy(s, &rc, &rg));
  if (!st) {
    dt_cuda_ref index = r64, src = gc ? rc : rg;
    index.ndim = src.ndim = 2;
    index.shape[0] = src.shape[0] = count;
    index.shape[1] = src.shape[1] = dim;
    index.strides[0] = 1, index.strides[1] = 0;
    src.strides[0] = dim, src.strides[1] = 1;
    st = dt__cuda_launched(call, dt__cuda_launch_scatter_add(s, &ro, 0, &index, &src, offset));
  }
  dt_tensor_release(idx64);
  dt_tensor_release(gc);
  return st;
}
