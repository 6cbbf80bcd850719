/*
 * CPU kernels of the losses: the per-row cross-entropy and its gradient. The op layer
 * (src/ops/loss.c) has validated shapes and dtypes; the kernels check the target values,
 * which only they read.
 */
#ifndef DT_KERNELS_CPU_LOSS_H
#define DT_KERNELS_CPU_LOSS_H

#include <stdbool.h>

#include "tensor/tensor_impl.h"

/* Which target value is ignored (its row's loss and gradient are zero), and the label
 * smoothing of the loss. */
typedef struct dt_cross_entropy_params {
  bool has_ignore_index;
  int64_t ignore_index;
  double label_smoothing;
} dt_cross_entropy_params;

/* out[i, 0] = the cross-entropy of row i of logits [N, C] against target[i, 0] (int64 in
 * [0, C) or the ignored index). Any strides. Errors: DT_ERR_INVALID (a target out of
 * range: the message names the row and the value). */
dt_status dt__cpu_cross_entropy(const dt_tensor *logits, const dt_tensor *target,
                                const dt_cross_entropy_params *p, dt_tensor *out);

/* grad_in[i, j] = grad[i, 0] * (softmax(logits[i])[j] - (1 - s) * [j == target[i]] - s / C),
 * zero for ignored rows. Any strides. Errors: as dt__cpu_cross_entropy. */
dt_status dt__cpu_cross_entropy_backward(const dt_tensor *grad, const dt_tensor *logits,
                                         const dt_tensor *target, const dt_cross_entropy_params *p,
                                         dt_tensor *grad_in);

/* The vocabulary-parallel cross-entropy terms of a shard of classes [offset, offset + C) of
 * logits [N, C], with max [N, 1] the row maxima over all shards and target [N, 1] int64:
 * terms[i] = (sum_c exp(x_ic - m_i), x_it - m_i when target t_i is in the shard else 0, and
 * when terms has 3 columns sum_c (x_ic - m_i)). Summed over the shards they give the whole
 * row's terms. Targets are not range-checked (a target outside the shard adds nothing). */
dt_status dt__cpu_vocab_terms(const dt_tensor *logits, const dt_tensor *max,
                              const dt_tensor *target, int64_t offset, dt_tensor *terms);

/* The terms' gradient with m held constant: out[i, c] = grad[i, 0] exp(x_ic - m_i)
 * + grad[i, 1] [offset + c == t_i] (+ grad[i, 2] with 3 terms). */
dt_status dt__cpu_vocab_terms_backward(const dt_tensor *logits, const dt_tensor *max,
                                       const dt_tensor *target, const dt_tensor *grad,
                                       int64_t offset, dt_tensor *out);

#endif /* DT_KERNELS_CPU_LOSS_H */
