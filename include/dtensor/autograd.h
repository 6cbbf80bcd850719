/*
 * libdtensor — reverse-mode automatic differentiation (autograd).
 *
 * A tensor that requires grad makes every op it enters record a node (the op, a copy of its
 * attributes, the inputs it saved): the outputs then require grad too and point at that
 * node. dt_backward walks the recorded graph from a loss back to the leaves and adds each
 * leaf's gradient into its `.grad`. The backward formulas are ordinary ops (dt_mul, dt_mm,
 * dt_sum_dims, ...), so gradients of distributed tensors are distributed tensors on the same
 * mesh, computed by ordinary distributed dispatch. See docs/autograd.md for the rules.
 *
 * Conventions: tensors passed in are borrowed; a tensor returned through `dt_tensor **out`
 * is a new reference the caller releases. Grad mode is per thread: each rank of the threads
 * backend has its own.
 */
#ifndef DTENSOR_AUTOGRAD_H
#define DTENSOR_AUTOGRAD_H

#include <stdbool.h>

#include "dtensor/core.h"
#include "dtensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Marks a leaf tensor (one no recorded op produced) as requiring grad, or clears the mark.
 * Ops that take it are then recorded, and dt_backward accumulates its gradient into its
 * `.grad`. Errors: DT_ERR_INVALID (NULL t; t is not a leaf: it was produced by a recorded
 * op, use dt_detach to make a leaf of it), DT_ERR_DTYPE (requires_grad on an integer or bool
 * tensor: only floating dtypes have gradients), DT_ERR_NOMEM. */
DT_API dt_status dt_tensor_set_requires_grad(dt_tensor *t, bool requires_grad);

/* True when t requires grad: a leaf marked with dt_tensor_set_requires_grad, or the output
 * of an op recorded with an input that requires grad. False for NULL. */
DT_API bool dt_tensor_requires_grad(const dt_tensor *t);

/* True when t is a leaf: no recorded op produced it (tensors that do not require grad are
 * leaves, as in PyTorch). False for NULL. */
DT_API bool dt_tensor_is_leaf(const dt_tensor *t);

/* The gradient accumulated into t by dt_backward: a new reference in *out, or NULL when t
 * has none (never reached by a backward, zeroed to NULL, or a non-leaf without
 * dt_tensor_retain_grad). For a distributed t the gradient is a distributed tensor on the
 * same mesh; its placements are whatever the backward ops produced (a Replicate weight used
 * with sharded activations gets a Partial(sum) gradient, as in PyTorch).
 * Errors: DT_ERR_INVALID (NULL t or out). */
DT_API dt_status dt_tensor_grad(const dt_tensor *t, dt_tensor **out);

/* Replaces t's gradient: grad is retained (NULL drops it, PyTorch's `.grad = None`); a grad
 * that requires grad is stored as a detached alias (dt_detach: the same values, no graph), so
 * that t never holds a graph that leads back to t.
 * Errors: DT_ERR_INVALID (NULL t; grad is t; grad whose global shape differs from t's; grad
 * local for a distributed t or the reverse; grad on another device than t's),
 * DT_ERR_DTYPE (grad's dtype differs from t's), DT_ERR_NOMEM. */
DT_API dt_status dt_tensor_set_grad(dt_tensor *t, dt_tensor *grad);

/* Zeroes t's gradient: with set_to_none (PyTorch's default) it drops it, otherwise it fills
 * the existing gradient with zeros in place. A tensor without gradient is left alone.
 * Errors: DT_ERR_INVALID (NULL t), the errors of dt_fill_. */
DT_API dt_status dt_tensor_zero_grad(dt_tensor *t, bool set_to_none);

/* Asks dt_backward to keep the gradient of a non-leaf t (PyTorch's retain_grad); on a leaf
 * it does nothing. Errors: DT_ERR_INVALID (NULL t; t does not require grad), DT_ERR_NOMEM. */
DT_API dt_status dt_tensor_retain_grad(dt_tensor *t);

/* Options of dt_backward_ex. Zero-initialise; NULL options mean all defaults. */
typedef struct dt_backward_options {
  /* Keep the saved tensors of the graph so that a second backward can go through it. By
   * default they are released as the backward passes each node, and a second backward
   * through the same nodes fails with DT_ERR_INVALID. */
  bool retain_graph;
} dt_backward_options;

/* Computes the gradient of `loss` with respect to every leaf that requires grad and that
 * loss depends on, adding it into each leaf's `.grad` (and into the retained gradients of
 * non-leaves). grad is d(something)/d(loss) with loss's (global) shape and dtype; NULL means
 * ones, allowed only for a loss of one element. Recording is off while the backward runs.
 * For a distributed loss, grad must be a distributed tensor (NULL makes a Replicate one) and
 * every rank of the mesh must call dt_backward: the backward ops communicate.
 * Errors: DT_ERR_INVALID (NULL loss; loss does not require grad; NULL grad for a loss of
 * more than one element; a grad of another shape; a graph already freed by an earlier
 * backward; a tensor saved for backward and modified in place since — the message names the
 * op that saved it), DT_ERR_UNSUPPORTED (an op on the path has no backward formula yet: the
 * message names it), DT_ERR_DTYPE (grad's dtype differs from loss's), the errors of the
 * backward ops. On error no `.grad` has been changed. */
DT_API dt_status dt_backward(dt_tensor *loss, dt_tensor *grad);
DT_API dt_status dt_backward_ex(dt_tensor *loss, dt_tensor *grad,
                                const dt_backward_options *options);

/* Turns recording on (true, the default of every thread) or off (false: no_grad) for the
 * calling thread, and returns the previous setting, so that a no_grad scope is
 *   bool prev = dt_grad_mode_set(false); ... ; dt_grad_mode_set(prev);
 * Under no_grad, ops record nothing and their outputs do not require grad. */
DT_API bool dt_grad_mode_set(bool enabled);

/* The calling thread's grad mode. */
DT_API bool dt_grad_mode_enabled(void);

/* How many recorded nodes are alive in the process (for leak checks and tests). */
DT_API int64_t dt_autograd_live_nodes(void);

#ifdef __cplusplus
}
#endif

#endif /* DTENSOR_AUTOGRAD_H */
