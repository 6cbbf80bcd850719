/* The backward op of scaled_dot_product_attention, for its gradient formula
 * (autograd/backward_attention.c) and ring attention's (parallel/ring_attention.c). */
#ifndef DT_OPS_ATTENTION_IMPL_H
#define DT_OPS_ATTENTION_IMPL_H

#include "ops/op_def.h"

/* dq, dk, dv of the recorded forward call `fwd` given grad_and_stats [B, H, T, Ev + 2]: the
 * output's gradient, the forward's lse, and rowsum(grad * out) minus the lse's own gradient,
 * joined on the last dim; through the op scaled_dot_product_attention_backward (so it runs
 * distributed like any op). */
dt_status dt__attention_backward(const dt_op_call *fwd, dt_tensor *grad_and_stats, dt_tensor **dq,
                                 dt_tensor **dk, dt_tensor **dv);

/* *gs = [g, lse, rowsum(g * out) - gl] joined on the last dim, in lse's dtype: what
 * dt__attention_backward reads. g (NULL: zeros) is out's gradient [B, H, T, Ev], gl (may be
 * NULL) lse's [B, H, T]. The products and their row sum are computed in lse's dtype (float32
 * for float16 / bfloat16 outputs, as PyTorch's CPU kernel accumulates them), never rounded to
 * the half dtype: D and dP = g v^T nearly cancel in dS = P (dP - D), so a rounded D gave a
 * causal first query (one key, dq exactly 0) a dq of ~2^-8 of the tensor's scale. Made of ops,
 * so it runs on distributed tensors. */
dt_status dt__attention_grad_and_stats(dt_tensor *out, dt_tensor *lse, dt_tensor *g, dt_tensor *gl,
                                       dt_tensor **gs);

#endif /* DT_OPS_ATTENTION_IMPL_H */
