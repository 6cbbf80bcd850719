/* The backward op of scaled_dot_product_attention, for its gradient formula
 * (autograd/backward_attention.c). */
#ifndef DT_OPS_ATTENTION_IMPL_H
#define DT_OPS_ATTENTION_IMPL_H

#include "ops/op_def.h"

/* dq, dk, dv of the recorded forward call `fwd` given grad_and_stats [B, H, T, Ev + 2]: the
 * output's gradient, the forward's lse, and rowsum(grad * out) minus the lse's own gradient,
 * joined on the last dim; through the op scaled_dot_product_attention_backward (so it runs
 * distributed like any op). */
dt_status dt__attention_backward(const dt_op_call *fwd, dt_tensor *grad_and_stats, dt_tensor **dq,
                                 dt_tensor **dk, dt_tensor **dv);

#endif /* DT_OPS_ATTENTION_IMPL_H */
