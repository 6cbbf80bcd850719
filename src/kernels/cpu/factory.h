/* CPU kernels of the factory family (*_like). */
#ifndef DT_KERNELS_CPU_FACTORY_H
#define DT_KERNELS_CPU_FACTORY_H

#include "tensor/tensor_impl.h"

/* Sets every element of the contiguous tensor t to value, converted to t's dtype. */
void dt__cpu_fill_contiguous(dt_tensor *t, double value);

#endif /* DT_KERNELS_CPU_FACTORY_H */
