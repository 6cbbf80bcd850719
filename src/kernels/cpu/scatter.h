/* scatter_add's CPU kernel. */
#ifndef DT_KERNELS_CPU_SCATTER_H
#define DT_KERNELS_CPU_SCATTER_H

#include "tensor/tensor_impl.h"

/* out = self, then out[..., index[i], ...] += src[i] along dim for every position i of index
 * (PyTorch's scatter_add). Every index is checked against self's size along dim before out
 * is written: a bad one fails naming op, the position and the value. */
dt_status dt__cpu_scatter_add(const char *op, const dt_tensor *self, int dim,
                              const dt_tensor *index, const dt_tensor *src, dt_tensor *out);

#endif /* DT_KERNELS_CPU_SCATTER_H */
