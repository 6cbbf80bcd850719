/*
 * Activation checkpointing per module (dt_module_set_checkpoint; PyTorch's reentrant
 * torch.utils.checkpoint around a module's call). The forward runs with recording off, so
 * none of the module's intermediate activations are saved; its output gets one node that
 * keeps only the input. That node's backward turns recording on, runs the module's forward
 * again on a detached copy of the input (a leaf that requires grad when the input did), and
 * back-propagates the incoming gradient through the recomputed graph: the parameters'
 * gradients accumulate into their `.grad` as in the plain backward, and the input's gradient
 * is returned to the outer backward. Kernels are deterministic, so the recomputation gives the
 * same values and the gradients are bitwise those of the plain backward.
 */
#include <stdio.h>
#include <string.h>

#include "autograd/autograd_impl.h"
#include "core/core_impl.h"
#include "dtensor/ops.h"
#include "nn/nn_impl.h"

typedef struct checkpoint_state {
  dt_module *module; /* borrowed: the module outlives the graphs made by its forward */
  const char *type;  /* borrowed, lives with the module */
  dt__plain_forward_fn plain;
  dt_tensor *input;    /* a detached alias of the input (the only activation kept) */
  uint32_t version;    /* its storage's version at the forward: the recomputation reads it */
  bool input_requires; /* the input requires grad: its gradient is computed and returned */
} checkpoint_state;

static void checkpoint_release(void *p) {
  checkpoint_state *s = p;
  dt_tensor_release(s->input);
  dt__free(s);
}

static dt_status recompute_backward(void *p, dt_tensor *grad_output, dt_tensor **grad_input) {
  checkpoint_state *s = p;
  /* The plain backward would refuse an input its ops saved that was written since; the
   * recomputation reads the whole input, so it refuses any write. */
  if (s->input->storage->version != s->version) {
    return dt__error(DT_ERR_INVALID,
                     "dt_backward: the input of checkpointed %s was modified in place after its "
                     "forward (version %u, saved at version %u); its backward recomputes the "
                     "forward from that input",
                     s->type, (unsigned)s->input->storage->version, (unsigned)s->version);
  }
  dt_tensor *x = NULL, *y = NULL;
  dt_status st = dt_detach(s->input, &x);
  if (!st && s->input_requires) st = dt_tensor_set_requires_grad(x, true);
  bool prev = dt_grad_mode_set(true);
  if (!st) st = s->plain(s->module, x, &y);
  dt_grad_mode_set(prev);
  if (!st && !dt_tensor_requires_grad(y)) {
    st = dt__error(DT_ERR_INTERNAL, "checkpoint of %s: the recomputed output does not require grad",
                   s->type);
  }
  if (!st) st = dt_backward(y, grad_output);
  if (!st && s->input_requires) st = dt_tensor_grad(x, grad_input);
  if (!st && !*grad_input) st = dt_zeros_like(s->input, grad_input);
  dt_tensor_release(y);
  dt_tensor_release(x);
  return st;
}

static const dt_autograd_function checkpoint_function = {.name = "checkpoint (recompute)",
                                                         .backward = recompute_backward,
                                                         .release = checkpoint_release};

dt_status dt__checkpoint_forward(dt_module *m, const char *type, bool params,
                                 dt__plain_forward_fn plain, dt_tensor *input, dt_tensor **out) {
  bool input_requires = dt_tensor_requires_grad(input);
  bool prev = dt_grad_mode_set(false);
  dt_tensor *y = NULL, *alias = NULL, *saved = NULL, *anchor = NULL;
  dt_status st = plain(m, input, &y);
  if (!st) st = dt_detach(y, &alias); /* a fresh handle without autograd state */
  if (!st) st = dt_detach(input, &saved);
  /* The node's one input: the input itself when it requires grad, else a throw-away leaf
   * (the node must exist for the parameters' gradients). */
  if (!st && !input_requires && params) st = dt_zeros_like(input, &anchor);
  dt_grad_mode_set(prev);
  dt_tensor_release(y);
  if (!st && anchor) st = dt_tensor_set_requires_grad(anchor, true);
  if (st || (!input_requires && !params)) {
    dt_tensor_release(anchor);
    dt_tensor_release(saved);
    if (st) {
      dt_tensor_release(alias);
      return st;
    }
    *out = alias; /* nothing to differentiate: a plain no-grad forward */
    return DT_OK;
  }
  checkpoint_state *s = dt__calloc(sizeof *s);
  if (!s) {
    dt_tensor_release(anchor);
    dt_tensor_release(saved);
    dt_tensor_release(alias);
    return dt__error(DT_ERR_NOMEM, "checkpoint of %s: out of memory", type);
  }
  s->module = m;
  s->type = type;
  s->plain = plain;
  s->input = saved;
  s->version = saved->storage->version;
  s->input_requires = input_requires;
  st = dt__autograd_record_function(&checkpoint_function, s, anchor ? anchor : input, alias);
  dt_tensor_release(anchor);
  if (st) {
    dt_tensor_release(alias);
    return st;
  }
  *out = alias;
  return DT_OK;
}
