/*
 * Fused kernels of the decoder models (src/models/): RMS norm, and scaled dot-product
 * attention as a flash-style tiled loop (online softmax over key tiles: extra memory of a
 * few tiles, never the [T, S] score matrix), forward with the log-sum-exp, and backward.
 */
#ifndef DT_KERNELS_CPU_ATTENTION_H
#define DT_KERNELS_CPU_ATTENTION_H

#include <stdbool.h>

#include "tensor/tensor_impl.h"

/* out = x * rsqrt(mean(x^2 over the last ndims dims) + eps) * weight (weight of those dims'
 * shape, or NULL). Statistics in double. Any strides and floating dtypes. */
dt_status dt__cpu_rms_norm(const dt_tensor *x, int ndims, const dt_tensor *weight, double eps,
                           dt_tensor *out);

/* What an attention call computes: q [B, H, T, E], k [B, Hk, S, E], v [B, Hk, S, Ev], query head
 * h reading kv head h / (H / Hk); scores scale * q.k, plus the mask (NULL; bool: false drops the
 * pair; floating: added), with mask_strides its strides seen as [B, H, T, S] (0 on broadcast
 * dims); causal keeps key j for query i only when j <= i (PyTorch's is_causal: top-left). */
typedef struct dt_attention_args {
  const dt_tensor *q, *k, *v, *mask;
  int64_t mask_strides[4];
  bool causal;
  double scale;
} dt_attention_args;

/* out [B, H, T, Ev] = softmax(scores) v; lse [B, H, T] = log of the sum of exp(scores) over the
 * kept keys (-inf, and a zero output as PyTorch's, for a query that keeps none). */
dt_status dt__cpu_attention(const dt_attention_args *a, dt_tensor *out, dt_tensor *lse);

/* The gradients of dt__cpu_attention given gs [B, H, T, Ev + 2]: the output's gradient in
 * columns [0, Ev), the forward's lse in column Ev, delta = sum over Ev of grad * out in Ev + 1:
 * dq, dk, dv of q's, k's and v's shapes (any of them NULL: not written). */
dt_status dt__cpu_attention_backward(const dt_attention_args *a, const dt_tensor *gs, dt_tensor *dq,
                                     dt_tensor *dk, dt_tensor *dv);

/* The float32 kernels behind the two above (attention_f32.c): blocks through cblas_sgemm, the
 * online softmax in float32, the (batch, head, query block) work on the intra-op pool; any
 * thread count gives the same bits. q, k, v (and gs) of any float32 strides (copied first
 * when CBLAS cannot read their rows), out, lse, dq, dk, dv float32. */
dt_status dt__cpu_attention_f32(const dt_attention_args *a, dt_tensor *out, dt_tensor *lse);
dt_status dt__cpu_attention_backward_f32(const dt_attention_args *a, const dt_tensor *gs,
                                         dt_tensor *dq, dt_tensor *dk, dt_tensor *dv);

#endif /* DT_KERNELS_CPU_ATTENTION_H */
