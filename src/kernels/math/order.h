/*
 * The element rules of the index and ordering ops (tril/triu, topk, the vocabulary-parallel
 * cross-entropy terms), written once for the CPU and CUDA (core/host_device.h): the CPU's
 * loops (kernels/cpu/index.c, loss.c) and the CUDA kernels (kernels/cuda/order.cu) decide
 * with these, so both keep the same elements, order them alike and compute the same terms.
 */
#ifndef DT_KERNELS_MATH_ORDER_H
#define DT_KERNELS_MATH_ORDER_H

#include <stdbool.h>

#include "core/host_device.h"

/* Whether tril (upper: triu) keeps the element at (row, col) of a matrix: col - row <=
 * diagonal for tril, >= diagonal for triu. */
static inline DT_HOST_DEVICE bool dt__triangle_keeps(int64_t row, int64_t col, int64_t diagonal,
                                                     bool upper) {
  int64_t off = col - row;
  return upper ? off >= diagonal : off <= diagonal;
}

/* topk's strict total order on (value, position) of floating elements: NaN comes first
 * (it counts as larger than every number, as in PyTorch; when !largest, last), then the larger
 * (smaller) value, then the lower position. Whether (x, i) comes before (y, j). */
static inline DT_HOST_DEVICE bool dt__topk_before_f64(double x, int64_t i, double y, int64_t j,
                                                      bool largest) {
  bool xn = x != x, yn = y != y;
  if (xn != yn) return largest ? xn : yn;
  if (!xn && x != y) return largest ? x > y : x < y;
  return i < j;
}

/* The same order on integer elements. */
static inline DT_HOST_DEVICE bool dt__topk_before_i64(int64_t x, int64_t i, int64_t y, int64_t j,
                                                      bool largest) {
  if (x != y) return largest ? x > y : x < y;
  return i < j;
}

/* The gradient of the vocabulary terms at one class: g0 exp(x - m) + g2, plus g1 at the
 * row's target class (g2 is 0 with two terms). */
static inline DT_HOST_DEVICE double dt__vocab_terms_grad(double g0, double e, double g1, double g2,
                                                         bool is_target) {
  return g0 * e + g2 + (is_target ? g1 : 0.0);
}

#endif /* DT_KERNELS_MATH_ORDER_H */
