/* The cross-entropy backward op, for the backward formula (src/autograd/backward_loss.c). */
#ifndef DT_OPS_LOSS_IMPL_H
#define DT_OPS_LOSS_IMPL_H

#include "ops/op_impl.h"

/* Dispatches cross_entropy_loss_backward: grad [N, 1], logits [N, C], target [N, 1] with the
 * attributes of the forward call `fwd` -> the gradient of the logits [N, C]. */
dt_status dt__cross_entropy_backward(const dt_op_call *fwd, dt_tensor *grad, dt_tensor *logits,
                                     dt_tensor *target, dt_tensor **out);

/* Whether a cross_entropy_loss(_backward) call ignores a target value, and which: ints[1]
 * != 0 when given, else ignore_index alone in ints (a schema-made call: PyTorch's default
 * -100 stays in force). Every device's kernel reads the call this way. */
static inline bool dt__cross_entropy_ignores(const dt_op_call *call, int64_t *ignore_index) {
  *ignore_index = call->ints[0];
  return call->n_ints > 1 ? call->ints[1] != 0 : call->n_ints == 1;
}

#endif /* DT_OPS_LOSS_IMPL_H */
