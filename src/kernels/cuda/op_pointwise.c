/*
 * The CUDA adapters of the pointwise family (the op list's DT_OPS_POINTWISE, the *_like
 * factories and uniform_): each reads its call as the CPU's adapter in src/ops/ does and
 * launches pointwise.cu's or random.cu's kernel on the calling thread's stream.
 */
#include "kernels/cuda/op_kernels.h"
#include "kernels/cuda/op_launch.h"

static dt_unary_op unary_op_of(const dt_op_call *call) {
  dt_unary_op op = (dt_unary_op)dt__op_table[call->op].func;
  return op == DT_UNARY_GELU && (call->flags & DT_OP_FLAG_GELU_TANH) ? DT_UNARY_GELU_TANH : op;
}

dt_status dt__cuda_kernel_unary(dt_op_call *call) {
  cudaStream_t s;
  dt_cuda_ref r[2]; /* out, a */
  dt_status st = dt__cuda_call_operands(call, 1, &s, r);
  if (st) return st;
  return dt__cuda_launched(call, dt__cuda_launch_unary(s, unary_op_of(call), &r[0], &r[1]));
}

dt_status dt__cuda_kernel_gelu_backward(dt_op_call *call) {
  cudaStream_t s;
  dt_cuda_ref r[3]; /* out, g, x */
  dt_status st = dt__cuda_call_operands(call, 2, &s, r);
  if (st) return st;
  bool tanh_form = (call->flags & DT_OP_FLAG_GELU_TANH) != 0;
  return dt__cuda_launched(call, dt__cuda_launch_gelu_backward(s, tanh_form, &r[0], &r[1], &r[2]));
}

static dt_binary_op binary_op_of(const dt_op_call *call) {
  return (dt_binary_op)dt__op_table[call->op].func;
}

/* out = a <op> b with b a tensor, or (b NULL) the call's scalar. */
static dt_status binary(dt_op_call *call, dt_tensor *a, dt_tensor *b, dt_tensor *out) {
  cudaStream_t s;
  dt_status st = dt__cuda_call_stream(call, a, &s);
  if (st) return st;
  dt_cuda_ref ro = dt__cuda_ref(out), ra = dt__cuda_ref(a), rb;
  dt_cuda_scalar scalar = {.dtype = (int)call->dtype, .value = call->scalars[0]};
  double alpha = b ? call->scalars[0] : call->scalars[1];
  if (b) rb = dt__cuda_ref(b);
  return dt__cuda_launched(
      call, dt__cuda_launch_binary(s, binary_op_of(call), alpha, &ro, &ra, b ? &rb : NULL, scalar));
}

dt_status dt__cuda_kernel_binary(dt_op_call *call) {
  return binary(call, call->inputs[0], call->inputs[1], call->outputs[0]);
}

/* A copy of src on its device (contiguous), for an in-place op whose other operand reads
 * self's memory through another layout (a.add_(a.t())). */
static dt_status device_copy(const dt_op_call *call, const dt_tensor *src, dt_tensor **copy) {
  dt_status st = dt__cuda_new_like(src, src->ndim, src->shape, src->dtype, copy);
  if (st) return st;
  cudaStream_t s;
  st = dt__cuda_call_stream(call, src, &s);
  dt_cuda_ref d = dt__cuda_ref(*copy), r = dt__cuda_ref(src);
  if (!st) st = dt__cuda_launched(call, dt__cuda_launch_copy(s, &d, &r));
  if (st) {
    dt_tensor_release(*copy);
    *copy = NULL;
  }
  return st;
}

dt_status dt__cuda_kernel_binary_inplace(dt_op_call *call) {
  dt_tensor *a = call->inputs[0], *b = call->inputs[1], *copy = NULL;
  if (dt__overlaps_differently(a, b)) {
    dt_status st = device_copy(call, b, &copy);
    if (st) return st;
  }
  dt_status st = binary(call, a, copy ? copy : b, a);
  dt_tensor_release(copy); /* the stream orders the free after the kernel */
  return st;
}

dt_status dt__cuda_kernel_binary_scalar(dt_op_call *call) {
  return binary(call, call->inputs[0], NULL, call->outputs[0]);
}

dt_status dt__cuda_kernel_binary_scalar_inplace(dt_op_call *call) {
  return binary(call, call->inputs[0], NULL, call->inputs[0]);
}

/* ---- where, masked_fill, fills ------------------------------------------------------------ */

dt_status dt__cuda_kernel_where(dt_op_call *call) {
  cudaStream_t s;
  dt_cuda_ref r[4]; /* out, cond, a, b */
  dt_status st = dt__cuda_call_operands(call, 3, &s, r);
  if (st) return st;
  return dt__cuda_launched(call, dt__cuda_launch_where(s, &r[0], &r[1], &r[2], &r[3]));
}

dt_status dt__cuda_kernel_masked_fill(dt_op_call *call) {
  cudaStream_t s;
  dt_cuda_ref r[3]; /* out, a, mask */
  dt_status st = dt__cuda_call_operands(call, 2, &s, r);
  if (st) return st;
  return dt__cuda_launched(call,
                           dt__cuda_launch_masked_fill(s, &r[0], &r[1], &r[2], call->scalars[0]));
}

/* Every element of t = value (t's dtype). */
static dt_status fill(const dt_op_call *call, dt_tensor *t, double value) {
  cudaStream_t s;
  dt_status st = dt__cuda_call_stream(call, t, &s);
  if (st) return st;
  dt_cuda_ref r = dt__cuda_ref(t);
  return dt__cuda_launched(call, dt__cuda_launch_masked_fill(s, &r, NULL, NULL, value));
}

dt_status dt__cuda_kernel_fill_(dt_op_call *call) {
  return fill(call, call->inputs[0], call->scalars[0]);
}

/* zeros_like, ones_like, full_like (the CPU's dt__kernel_fill_like reads scalars[0], which
 * each public function sets). */
dt_status dt__cuda_kernel_fill_like(dt_op_call *call) {
  return fill(call, call->outputs[0], call->scalars[0]);
}

/* ---- uniform_ ------------------------------------------------------------------------------ */

dt_status dt__cuda_kernel_uniform_(dt_op_call *call) {
  dt_tensor *a = call->inputs[0], *target = a;
  bool contiguous = dt__is_contiguous(a->ndim, a->shape, a->strides);
  dt_status st = DT_OK;
  if (!contiguous) st = dt__cuda_new_like(a, a->ndim, a->shape, a->dtype, &target);
  if (st) return st;
  cudaStream_t s;
  st = dt__cuda_call_stream(call, a, &s);
  dt_cuda_ref r = dt__cuda_ref(target);
  const int64_t *global = call->n_int_list ? call->int_list : NULL;
  const int64_t *offset = call->n_int_list ? call->int_list + a->ndim : NULL;
  if (!st)
    st = dt__cuda_launched(call, dt__cuda_launch_uniform(s, &r, call->scalars[0], call->scalars[1],
                                                         (uint64_t)call->ints[0], a->ndim, global,
                                                         offset));
  if (!contiguous) {
    dt_cuda_ref d = dt__cuda_ref(a);
    if (!st) st = dt__cuda_launched(call, dt__cuda_launch_copy(s, &d, &r));
    dt_tensor_release(target);
  }
  return st;
}
