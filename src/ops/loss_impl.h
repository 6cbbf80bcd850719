/* The cross-entropy backward op, for the backward formula (src/autograd/backward_loss.c). */
#ifndef DT_OPS_LOSS_IMPL_H
#define DT_OPS_LOSS_IMPL_H

#include "ops/op_impl.h"

/* Dispatches cross_entropy_loss_backward: grad [N, 1], logits [N, C], target [N, 1] with the
 * attributes of the forward call `fwd` -> the gradient of the logits [N, C]. */
dt_status dt__cross_entropy_backward(const dt_op_call *fwd, dt_tensor *grad, dt_tensor *logits,
                                     dt_tensor *target, dt_tensor **out);

#endif /* DT_OPS_LOSS_IMPL_H */
