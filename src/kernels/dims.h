/*
 * A few dims of a tensor walked row-major, as the reductions and the row kernels of every
 * device see their operands: sizes and strides (elements or bytes, as the user says). Plain C
 * on the host, compiled by the C compiler (kernels/cpu/) and by nvcc (kernels/cuda/, whose
 * dt_cuda_dims adds the device's offset walk): a reduction splits and merges its dims the same
 * way on every device.
 */
#ifndef DT_KERNELS_DIMS_H
#define DT_KERNELS_DIMS_H

#include <stdint.h>

#include "dtensor/tensor.h"

typedef struct dt_dims {
  int n;
  int64_t shape[DT_MAX_DIMS];
  int64_t stride[DT_MAX_DIMS];
} dt_dims;

/* Appends a dim of `size` with `stride` to s: a size-1 dim is dropped, and one that steps
 * through memory as one run with the last dim is merged into it, which keeps row-major
 * positions intact. */
static inline void dt__dims_add(dt_dims *s, int64_t size, int64_t stride) {
  if (size == 1) return;
  if (s->n > 0 && s->stride[s->n - 1] == stride * size) {
    s->shape[s->n - 1] *= size;
    s->stride[s->n - 1] = stride;
    return;
  }
  s->shape[s->n] = size;
  s->stride[s->n] = stride;
  s->n++;
}

/* A reduction's dims: dim d of an input of ndim dims (shape, strides in elements of esize
 * bytes) goes to *reduced when bit d of mask is set, to *kept otherwise, each class merged on
 * its own (dt__dims_add) with strides in bytes. kept and reduced start empty (n = 0); *n_out
 * and *count are the element counts of the two classes (output elements, reduced elements per
 * output element). */
static inline void dt__dims_split(int ndim, const int64_t *shape, const int64_t *strides,
                                  int64_t esize, uint32_t mask, dt_dims *kept, dt_dims *reduced,
                                  int64_t *n_out, int64_t *count) {
  *n_out = 1;
  *count = 1;
  for (int d = 0; d < ndim; d++) {
    if ((mask >> d) & 1u) {
      dt__dims_add(reduced, shape[d], strides[d] * esize);
      *count *= shape[d];
    } else {
      dt__dims_add(kept, shape[d], strides[d] * esize);
      *n_out *= shape[d];
    }
  }
}

#endif /* DT_KERNELS_DIMS_H */
