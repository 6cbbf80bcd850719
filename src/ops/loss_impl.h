/* The cross-entropy backward op, for the backward formula (src/autograd/backward_loss.c), and
 * the vocabulary-parallel terms. */
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

/* Dispatches cross_entropy_vocab_terms: per row of logits [N, C] (max [N, 1] its row maxima,
 * held constant; target [N, 1] int64), the terms (sum_c exp(x_c - m), x_t - m, and with
 * terms = 3 sum_c (x_c - m)) as [N, terms]; with logits sharded on the classes, each shard's
 * terms of its own classes, a Partial(sum). For the vocabulary-parallel cross-entropy
 * (src/nn/loss.c). */
dt_status dt__cross_entropy_vocab_terms(dt_tensor *logits, dt_tensor *max, dt_tensor *target,
                                        int terms, dt_tensor **out);

/* Its backward: the gradient of the logits from grad [N, terms] (the terms' backward formula,
 * src/autograd/backward_loss.c). */
dt_status dt__cross_entropy_vocab_terms_backward(dt_tensor *logits, dt_tensor *max,
                                                 dt_tensor *target, dt_tensor *grad,
                                                 dt_tensor **out);

#endif /* DT_OPS_LOSS_IMPL_H */
