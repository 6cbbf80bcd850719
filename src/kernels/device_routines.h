/*
 * Fused routines a device other than the CPU offers to the layers above ops that update
 * tensors in place without dispatching ops (the optimizers and clip_grad_norm, src/optim/):
 * an optimizer update, a sum of squares, a non-finite test and a scaling, each over count
 * contiguous float32 elements of one device's memory. A device registers them from its
 * folder at start-up (a CUDA build: kernels/cuda/cuda_table.c); the CPU needs none (the
 * optimizers' own loops run on host memory, with the same element functions,
 * kernels/math/optim.h). Every routine queues on the calling thread's stream of device
 * `index`; those returning a value wait for it.
 */
#ifndef DT_KERNELS_DEVICE_ROUTINES_H
#define DT_KERNELS_DEVICE_ROUTINES_H

#include "core/core_impl.h"
#include "kernels/math/optim.h"
#include "tensor/device_impl.h"

typedef struct dt_device_routines {
  /* One optimizer step of count elements: p updated with gradient g and the slots s0, s1
   * (NULL when the optimizer keeps fewer). */
  dt_status (*optim_update)(int index, const dt_optim_update *u, float *p, const float *g,
                            float *s0, float *s1, int64_t count);
  /* *out = the sum of x[k]^2 in double (the same value whatever the launch, up to the last
   * bits of a double: a fixed tree). */
  dt_status (*sum_squares)(int index, const float *x, int64_t count, double *out);
  /* *out = whether any x[k] is NaN or infinite. */
  dt_status (*any_nonfinite)(int index, const float *x, int64_t count, bool *out);
  /* x[k] *= c in float32. */
  dt_status (*scale)(int index, float *x, int64_t count, float c);
} dt_device_routines;

/* Registers kind's routines (NULL: none; r must outlive its use). Not thread-safe: register at
 * start-up. DT_ERR_INVALID for the CPU or a kind outside the table. */
dt_status dt__device_routines_register(int kind, const dt_device_routines *r);

/* kind's routines, NULL when it registered none (and always for the CPU). */
const dt_device_routines *dt__device_routines(int kind);

#endif /* DT_KERNELS_DEVICE_ROUTINES_H */
