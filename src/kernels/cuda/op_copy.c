/*
 * The CUDA adapters of the copies: clone, contiguous, copy_, to.dtype, reshape and flatten
 * (a view when the strides allow, else a copy), cat and stack. Every copy is pointwise.cu's
 * strided copy with conversion; the views are the CPU's own adapters (metadata only).
 */
#include "kernels/cuda/op_kernels.h"
#include "kernels/cuda/op_launch.h"

/* dst = src (converted, broadcast) on the calling thread's stream. */
static dt_status copy(const dt_op_call *call, const dt_cuda_ref *dst, const dt_tensor *src) {
  cudaStream_t s;
  dt_status st = dt__cuda_call_stream(call, src, &s);
  if (st) return st;
  dt_cuda_ref r = dt__cuda_ref(src);
  return dt__cuda_launched(call, dt__cuda_launch_copy(s, dst, &r));
}

/* A new contiguous copy of a with dtype on a's device into *out. */
static dt_status copy_new(const dt_op_call *call, const dt_tensor *a, int ndim,
                          const int64_t *shape, dt_dtype dtype, dt_tensor **out) {
  dt_tensor *t = NULL;
  dt_status st = dt__cuda_new_like(a, ndim, shape, dtype, &t);
  if (st) return st;
  /* written through a's shape, row-major (reshape's new shape has the same elements) */
  dt_cuda_ref d = dt__cuda_ref(t);
  d.ndim = a->ndim;
  dt__contiguous_strides(a->ndim, a->shape, d.strides);
  for (int i = 0; i < a->ndim; i++) d.shape[i] = a->shape[i];
  st = copy(call, &d, a);
  if (st) {
    dt_tensor_release(t);
    return st;
  }
  *out = t;
  return DT_OK;
}

dt_status dt__cuda_kernel_clone(dt_op_call *call) {
  dt_cuda_ref d = dt__cuda_ref(call->outputs[0]);
  return copy(call, &d, call->inputs[0]);
}

dt_status dt__cuda_kernel_contiguous(dt_op_call *call) {
  dt_tensor *a = call->inputs[0];
  if (dt__is_contiguous(a->ndim, a->shape, a->strides)) {
    call->outputs[0] = dt_tensor_retain(a);
    return DT_OK;
  }
  return copy_new(call, a, a->ndim, a->shape, a->dtype, &call->outputs[0]);
}

dt_status dt__cuda_kernel_copy_(dt_op_call *call) {
  dt_tensor *dst = call->inputs[0], *src = call->inputs[1], *tmp = NULL;
  dt_status st = DT_OK;
  if (dt__overlaps_differently(dst, src)) /* x.copy_(x.t()): read a copy */
    st = copy_new(call, src, src->ndim, src->shape, src->dtype, &tmp);
  if (st) return st;
  dt_cuda_ref d = dt__cuda_ref(dst);
  st = copy(call, &d, tmp ? tmp : src);
  dt_tensor_release(tmp);
  return st;
}

dt_status dt__cuda_kernel_to(dt_op_call *call) {
  const dt_tensor *a = call->inputs[0];
  if (call->dtype == a->dtype)
    return dt__tensor_view(a, a->ndim, a->shape, a->strides, a->offset, &call->outputs[0]);
  return copy_new(call, a, a->ndim, a->shape, call->dtype, &call->outputs[0]);
}

/* reshape and flatten: a view when the strides allow one, else a contiguous copy. */
dt_status dt__cuda_kernel_reshape(dt_op_call *call) {
  const dt_tensor *a = call->inputs[0];
  int64_t strides[DT_MAX_DIMS];
  if (dt__view_strides(a->ndim, a->shape, a->strides, call->n_ints, call->ints, strides))
    return dt__tensor_view(a, call->n_ints, call->ints, strides, a->offset, &call->outputs[0]);
  return copy_new(call, a, call->n_ints, call->ints, a->dtype, &call->outputs[0]);
}

/* ---- cat, stack ----------------------------------------------------------------------------- */

/* Each tensor fills its slab of out along dim (stack: index i of a new dim), converted. */
static dt_status concat(dt_op_call *call, bool stack) {
  dt_tensor *out = call->outputs[0];
  if (dt__tensor_numel(out) == 0) return DT_OK;
  int dim = (int)call->ints[0];
  dt_cuda_ref o = dt__cuda_ref(out);
  int64_t pos = 0, es = (int64_t)dt__dtype_sizes[out->dtype];
  for (int i = 0; i < call->n_input_list; i++) {
    const dt_tensor *t = call->input_list[i];
    if (dt__tensor_numel(t) == 0) continue; /* cat's legacy empty tensors among them */
    int64_t extent = stack ? 1 : t->shape[dim];
    dt_cuda_ref slab = o;
    slab.ndim = 0;
    for (int d = 0; d < out->ndim; d++) {
      if (stack && d == dim) continue;
      slab.shape[slab.ndim] = d == dim ? extent : out->shape[d];
      slab.strides[slab.ndim] = out->strides[d];
      slab.ndim++;
    }
    slab.data = o.data + pos * out->strides[dim] * es;
    dt_status st = copy(call, &slab, t);
    if (st) return st;
    pos += extent;
  }
  return DT_OK;
}

dt_status dt__cuda_kernel_cat(dt_op_call *call) { return concat(call, false); }

dt_status dt__cuda_kernel_stack(dt_op_call *call) { return concat(call, true); }
