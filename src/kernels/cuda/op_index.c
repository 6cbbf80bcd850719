/*
 * The CUDA adapters of the index and ordering ops (tril/triu, cumsum, topk, index_select,
 * gather: order.cu) and of the vocabulary-parallel cross-entropy terms and their gradient
 * (rows.cu). Each reads its call as the CPU's adapter in src/ops/ does (index_ops.c, loss.c)
 * and launches on the calling thread's stream. index_select and gather check every index on
 * the device first and wait for that verdict, so a bad index fails the op naming it before
 * anything is written, as on the CPU.
 */
#include "kernels/cuda/op_kernels.h"
#include "kernels/cuda/op_launch.h"

dt_status dt__cuda_kernel_triangle(dt_op_call *call) {
  cudaStream_t s;
  dt_cuda_ref r[2]; /* out, self */
  dt_status st = dt__cuda_call_operands(call, 1, &s, r);
  if (st) return st;
  return dt__cuda_launched(
      call, dt__cuda_launch_triangle(s, &r[1], call->ints[0], call->op == DT_OP_TRIU, &r[0]));
}

dt_status dt__cuda_kernel_cumsum(dt_op_call *call) {
  cudaStream_t s;
  dt_cuda_ref r[2]; /* out, self */
  dt_status st = dt__cuda_call_operands(call, 1, &s, r);
  if (st) return st;
  return dt__cuda_launched(call, dt__cuda_launch_cumsum(s, &r[1], (int)call->ints[0], &r[0]));
}

dt_status dt__cuda_kernel_topk(dt_op_call *call) {
  cudaStream_t s;
  dt_status st = dt__cuda_call_stream(call, call->inputs[0], &s);
  if (st) return st;
  dt_cuda_ref a = dt__cuda_ref(call->inputs[0]), v = dt__cuda_ref(call->outputs[0]),
              i = dt__cuda_ref(call->outputs[1]);
  return dt__cuda_launched(call, dt__cuda_launch_topk(s, &a, call->ints[0], (int)call->ints[1],
                                                      call->ints[2] != 0, &v, &i));
}

/* index_select {self, index (1-D)} and gather {self, index}, ints[0] = dim; a gather's ints
 * {dim, sparse_grad, offset, rows} carry self's row window (src/ops/index_ops.c). */
static dt_status take(dt_op_call *call, bool gather) {
  const dt_tensor *a = call->inputs[0], *index = call->inputs[1];
  int dim = (int)call->ints[0];
  bool window = gather && call->n_ints == 4 && dim == 0;
  int64_t offset = window ? call->ints[2] : 0;
  int64_t limit = window ? call->ints[3] : a->ndim > 0 ? a->shape[dim] : 1;
  cudaStream_t s;
  dt_status st = dt__cuda_call_stream(call, a, &s);
  if (!st) st = dt__cuda_check_dim_indices(call, s, index, dim, limit);
  if (st) return st;
  dt_cuda_ref ra = dt__cuda_ref(a), ri = dt__cuda_ref(index), out = dt__cuda_ref(call->outputs[0]);
  return dt__cuda_launched(call, dt__cuda_launch_take(s, &ra, dim, &ri, gather, offset, &out));
}

dt_status dt__cuda_kernel_index_select(dt_op_call *call) { return take(call, false); }

dt_status dt__cuda_kernel_gather(dt_op_call *call) { return take(call, true); }

/* {logits, max, target} (backward: then grad_output); ints[0] = terms, then the class window
 * when sharded (ints[1] its offset), as src/ops/loss.c. Targets are not range-checked: one
 * outside the window adds nothing, as on the CPU. */
static dt_status vocab_terms(dt_op_call *call, bool backward) {
  cudaStream_t s;
  dt_cuda_ref r[5]; /* out, logits, max, target (, grad_output) */
  dt_status st = dt__cuda_call_operands(call, backward ? 4 : 3, &s, r);
  if (st) return st;
  int64_t offset = call->n_ints == 3 ? call->ints[1] : 0;
  return dt__cuda_launched(
      call,
      dt__cuda_launch_vocab_terms(s, &r[1], &r[2], &r[3], backward ? &r[4] : NULL, offset, &r[0]));
}

dt_status dt__cuda_kernel_vocab_terms(dt_op_call *call) { return vocab_terms(call, false); }

dt_status dt__cuda_kernel_vocab_terms_backward(dt_op_call *call) { return vocab_terms(call, true); }
