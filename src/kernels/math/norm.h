/*
 * The element formulas of softmax, the normalizations and cross-entropy, written once for the
 * CPU and CUDA (core/host_device.h). The row walks differ by device (a CPU loop, a GPU block
 * reduction) but each one's statistics and outputs come from these, in double.
 */
#ifndef DT_KERNELS_MATH_NORM_H
#define DT_KERNELS_MATH_NORM_H

#include "core/host_device.h"

/* The row maximum step of softmax: a NaN anywhere makes the maximum NaN (and the whole row
 * NaN), as in PyTorch. */
static inline DT_HOST_DEVICE double dt__max_nan(double v, double best) {
  return (v > best || v != v) ? v : best;
}

/* softmax's element from x, the row max m and the row's sum of exp(x - m); log_softmax's
 * from the log of that sum. (x - m) first: subtracting m + log(s) at once would round at the
 * scale of m. */
static inline DT_HOST_DEVICE double dt__softmax_value(double x, double m, double sum) {
  return exp(x - m) / sum;
}
static inline DT_HOST_DEVICE double dt__log_softmax_value(double x, double m, double log_sum) {
  return (x - m) - log_sum;
}

/* 1 / sqrt(biased variance + eps) from the sum of squared deviations over n elements (layer
 * norm: two passes, mean first) or, for RMS norm, the sum of squares. */
static inline DT_HOST_DEVICE double dt__norm_rstd(double sq_sum, double n, double eps) {
  return 1.0 / sqrt(sq_sum / n + eps);
}

/* Inference batch norm as y = x * scale + shift per channel. */
static inline DT_HOST_DEVICE void dt__batch_norm_affine(double w, double b, double mean, double var,
                                                        double eps, double *scale, double *shift) {
  *scale = w / sqrt(var + eps);
  *shift = b - mean * *scale;
}

/* Cross-entropy of one row with label smoothing eps over `classes`: log_z is the row's
 * log-sum-exp (max + log(sum(exp(x - max)))), x_t the target's logit, x_sum the sum of the
 * row's logits (read only when eps != 0). */
static inline DT_HOST_DEVICE double dt__cross_entropy_row(double log_z, double x_t, double x_sum,
                                                          double eps, double classes) {
  double loss = (1.0 - eps) * (log_z - x_t);
  if (eps != 0.0) loss += eps * (log_z - x_sum / classes);
  return loss;
}

/* Its gradient at one logit: g * (softmax - want), want = (1 - eps) [is_target] + eps / C. */
static inline DT_HOST_DEVICE double dt__cross_entropy_grad(double g, double softmax, int is_target,
                                                           double eps, double classes) {
  double want = (is_target ? 1.0 - eps : 0.0) + eps / classes;
  return g * (softmax - want);
}

#endif /* DT_KERNELS_MATH_NORM_H */
