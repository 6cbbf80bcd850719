/*
 * What the CUDA adapters of the op list (op_pointwise.c, op_copy.c, op_rows.c) share: a
 * tensor seen as a dt_cuda_ref (cuda_kernels.h), the calling thread's stream on the tensor's
 * device, launch errors as dt_status, device scratch tensors and reading a few int64 values
 * back. They rank with ops (they read dt_op_call); the device code is in the .cu files.
 */
#ifndef DT_KERNELS_CUDA_OP_LAUNCH_H
#define DT_KERNELS_CUDA_OP_LAUNCH_H

#include "kernels/cuda/cuda_impl.h"
#include "kernels/cuda/cuda_kernels.h"
#include "ops/op_impl.h"

static inline dt_cuda_ref dt__cuda_ref(const dt_tensor *t) {
  dt_cuda_ref r;
  memset(&r, 0, sizeof r);
  r.data = dt__tensor_base(t);
  r.dtype = (int)t->dtype;
  r.ndim = t->ndim;
  for (int d = 0; d < t->ndim; d++) {
    r.shape[d] = t->shape[d];
    r.strides[d] = t->strides[d];
  }
  return r;
}

static inline int dt__cuda_index_of(const dt_tensor *t) { return (int)(t->storage->device >> 8); }

/* The calling thread's stream on t's device (and that device made current). */
static inline dt_status dt__cuda_call_stream(const dt_op_call *call, const dt_tensor *t,
                                             cudaStream_t *stream) {
  return dt__cuda_stream(dt__op_name(call), dt__cuda_index_of(t), stream);
}

/* The operands of a kernel that writes outputs[0] from inputs[0, n): the calling thread's
 * stream on inputs[0]'s device in *stream, refs[0] = outputs[0], refs[1 + i] = inputs[i]
 * (refs holds n + 1). */
static inline dt_status dt__cuda_call_operands(const dt_op_call *call, int n, cudaStream_t *stream,
                                               dt_cuda_ref *refs) {
  dt_status st = dt__cuda_call_stream(call, call->inputs[0], stream);
  if (st) return st;
  refs[0] = dt__cuda_ref(call->outputs[0]);
  for (int i = 0; i < n; i++) refs[1 + i] = dt__cuda_ref(call->inputs[i]);
  return DT_OK;
}

/* A launcher's result as a dt_status naming the op. */
static inline dt_status dt__cuda_launched(const dt_op_call *call, int error) {
  if (!error) return DT_OK;
  return dt__cuda_error(dt__op_name(call), "kernel launch", (cudaError_t)error);
}

/* A new contiguous tensor on like's device (the caching allocator's memory). */
static inline dt_status dt__cuda_new_like(const dt_tensor *like, int ndim, const int64_t *shape,
                                          dt_dtype dtype, dt_tensor **out) {
  return dt__tensor_new_on(dt__device_of_key(like->storage->device), ndim, shape, dtype, out);
}

/* Runs the index check of cuda_kernels.h on idx against [lo, hi) (a value equal to `allowed`
 * passes too when `allow`: cross-entropy's ignored index) and waits for its verdict:
 * *bad_position = -1 when every index is valid, else the first bad one's row-major position
 * and *bad_value its value. The one place the CUDA kernels wait for the device: an index out
 * of range must fail the op before anything is written, as on the CPU. */
dt_status dt__cuda_check_indices(const dt_op_call *call, cudaStream_t stream, const dt_tensor *idx,
                                 int64_t lo, int64_t hi, bool allow, int64_t allowed,
                                 int64_t *bad_position, int64_t *bad_value);

/* The same check of index against [0, size) along dim, failing with DT_ERR_INDEX naming the
 * first bad index, its position and the dim, as the CPU's index_select, gather and
 * scatter_add do (op_rows.c). */
dt_status dt__cuda_check_dim_indices(const dt_op_call *call, cudaStream_t stream,
                                     const dt_tensor *index, int dim, int64_t size);

#endif /* DT_KERNELS_CUDA_OP_LAUNCH_H */
