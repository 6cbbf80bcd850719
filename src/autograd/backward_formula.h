/*
 * Defining a backward formula from its core (autograd_impl.h, dt__backward_input0 and
 * dt__backward_slots): most formulas make one input's gradient from the output's, and a driver
 * does the rest (skipping a missing gradient or an input that wants none, reducing to the
 * input's shape and dtype, releasing on failure). Included by the backward_*.c files that
 * define their formulas this way.
 */
#ifndef DT_AUTOGRAD_BACKWARD_FORMULA_H
#define DT_AUTOGRAD_BACKWARD_FORMULA_H

#include "autograd/autograd_impl.h"

/* Defines the formula dt__backward_<name> (the op list's BACKWARD(name)) as driver with core. */
#define DT_BACKWARD_FORMULA(name, driver, core)                                                    \
  dt_status dt__backward_##name(const dt_backward_ctx *ctx, dt_tensor *const *grad_outputs,        \
                                dt_tensor **grad_inputs) {                                         \
    return driver(ctx, grad_outputs, grad_inputs, core);                                           \
  }

/* A formula whose gradient goes to input slot 0 alone: DT_BACKWARD_INPUT0(tanh, tanh_grad). */
#define DT_BACKWARD_INPUT0(name, core) DT_BACKWARD_FORMULA(name, dt__backward_input0, core)

/* A formula whose inputs each get their own gradient: DT_BACKWARD_SLOTS(mul, mul_grad). */
#define DT_BACKWARD_SLOTS(name, core) DT_BACKWARD_FORMULA(name, dt__backward_slots, core)

#endif /* DT_AUTOGRAD_BACKWARD_FORMULA_H */
