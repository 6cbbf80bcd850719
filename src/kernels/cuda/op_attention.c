/*
 * The CUDA adapters of scaled_dot_product_attention and its backward op: the call read as
 * src/ops/attention.c reads it (q, k, v, mask; is_causal in ints[0]; scale in scalars[0], 0
 * meaning 1/sqrt(E)), launched on attention.cu's kernels.
 */
#include <math.h>

#include "kernels/cuda/op_kernels.h"
#include "kernels/cuda/op_launch.h"

/* q, k, v at `first`, the mask after them; its strides seen as [B, H, T, S]. */
typedef struct attn_refs {
  dt_cuda_ref q, k, v, mask;
  bool has_mask, causal;
  int64_t mask_strides[4];
  double scale;
} attn_refs;

/* Also the calling thread's stream on inputs[0]'s device, in *s. */
static dt_status refs_of(const dt_op_call *call, int first, attn_refs *r, cudaStream_t *s) {
  const dt_tensor *q = call->inputs[first], *k = call->inputs[first + 1];
  const dt_tensor *mask = call->inputs[first + 3];
  r->q = dt__cuda_ref(q);
  r->k = dt__cuda_ref(k);
  r->v = dt__cuda_ref(call->inputs[first + 2]);
  r->has_mask = mask != NULL;
  if (mask) {
    int64_t full[4] = {q->shape[0], q->shape[1], q->shape[2], k->shape[2]};
    r->mask = dt__cuda_ref(mask);
    dt__broadcast_strides(mask, 4, full, r->mask_strides);
  }
  r->causal = call->ints[0] != 0;
  r->scale = call->scalars[0] > 0 ? call->scalars[0] : 1.0 / sqrt((double)q->shape[3]);
  return dt__cuda_call_stream(call, call->inputs[0], s);
}

/* The kernel keeps a query row, a key row and their sums in shared memory: 2 E + 2 Ev + 3 x 256
 * doubles within the 48 KB a launch gets without opting in (attention.cu's attn_smem). */
#define ATTN_MAX_HEAD_DIMS ((48 * 1024 / 8 - 3 * 256) / 2)

/* The head dims are checked here, before the launch, so that an invalid-value error from the
 * launch itself is reported as the CUDA error it is, not as a size limit. */
static dt_status too_large(const dt_op_call *call, const attn_refs *r) {
  int64_t e = r->q.shape[3], ev = r->v.shape[3];
  if (e + ev <= ATTN_MAX_HEAD_DIMS) return DT_OK;
  return dt__error(DT_ERR_UNSUPPORTED,
                   "%s: head dims E = %lld and Ev = %lld are too large for the CUDA kernel's "
                   "shared memory (E + Ev = %lld; at most %d with 48 KB per block)",
                   dt__op_name(call), (long long)e, (long long)ev, (long long)(e + ev),
                   ATTN_MAX_HEAD_DIMS);
}

dt_status dt__cuda_kernel_attention(dt_op_call *call) {
  if (call->inputs[1]->shape[1] == 0) return DT_OK; /* no heads (an empty head shard) */
  attn_refs r;
  cudaStream_t s;
  dt_status st = refs_of(call, 0, &r, &s);
  if (st) return st;
  st = too_large(call, &r);
  if (st) return st;
  dt_cuda_ref out = dt__cuda_ref(call->outputs[0]), lse = dt__cuda_ref(call->outputs[1]);
  int error = dt__cuda_launch_attention(s, &r.q, &r.k, &r.v, r.has_mask ? &r.mask : NULL,
                                        r.mask_strides, r.causal, r.scale, &out, &lse);
  return dt__cuda_launched(call, error);
}

dt_status dt__cuda_kernel_attention_backward(dt_op_call *call) {
  if (call->inputs[2]->shape[1] == 0) return DT_OK; /* no heads (an empty head shard) */
  attn_refs r;
  cudaStream_t s;
  dt_status st = refs_of(call, 1, &r, &s);
  if (st) return st;
  st = too_large(call, &r);
  if (st) return st;
  dt_cuda_ref gs = dt__cuda_ref(call->inputs[0]), d[3];
  for (int i = 0; i < 3; i++)
    if (call->outputs[i]) d[i] = dt__cuda_ref(call->outputs[i]);
  int error = dt__cuda_launch_attention_backward(
      s, &r.q, &r.k, &r.v, r.has_mask ? &r.mask : NULL, r.mask_strides, r.causal, r.scale, &gs,
      call->outputs[0] ? &d[0] : NULL, call->outputs[1] ? &d[1] : NULL,
      call->outputs[2] ? &d[2] : NULL);
  return dt__cuda_launched(call, error);
}
