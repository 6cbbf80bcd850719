/*
 * Recorded functions that are not ops of the table (dt__autograd_record_function and its form of
 * several inputs and outputs): the distributed layer's conversions, FSDP's gathers, activation
 * checkpointing and compiled calls record themselves here; the engine calls back through the
 * function's pointers.
 */
#include "autograd/autograd_impl.h"
#include "autograd/meta_of.h"

static dt_autograd_meta *meta_of(const dt_tensor *t) {
  return t ? (dt_autograd_meta *)t->autograd : NULL;
}

/* Slot i of a function node: the edge to input's node, or to input itself when it is a leaf
 * (kept, with its version). Skipped for an input that does not require grad, unless always
 * (the one-input form, whose callers pass an input that requires grad). */
static void function_slot(dt_autograd_node *node, int i, dt_tensor *input, bool always) {
  node->saved_versions[i] = 0;
  dt__autograd_meta_of(input, &node->input_metas[i]);
  dt_autograd_meta *in_meta = meta_of(input);
  if (!always && (!in_meta || !in_meta->requires_grad)) return;
  dt__autograd_set_edge_meta(node, i, in_meta, NULL);
  /* The backward reads no saved value (only what its state keeps), so a non-leaf input is not
   * kept: its storage can go as soon as the forward drops it. A leaf is, as the gradient's
   * destination. */
  if (node->edges[i].to_leaf) {
    node->saved[i] = dt_tensor_retain(input);
    node->saved_versions[i] = input->storage->version;
  }
}

static dt_status record_function(const dt_autograd_function *fn, void *state, int n_in,
                                 dt_tensor *const *inputs, int n_out, dt_tensor *const *outputs,
                                 bool always) {
  dt_autograd_node *node = dt__autograd_node_alloc(n_in, n_out, 0);
  if (!node) {
    if (fn->release) fn->release(state);
    return dt__error(DT_ERR_NOMEM, "%s: cannot allocate its autograd node", fn->name);
  }
  memset(&node->call, 0, sizeof node->call);
  node->function = fn;
  node->function_state = state;
  for (int i = 0; i < n_in; i++) function_slot(node, i, inputs[i], always);
  node->n_outputs = n_out;
  for (int k = 0; k < n_out; k++) {
    node->output_versions[k] = 0;
    dt__autograd_meta_of(outputs[k], &node->output_metas[k]);
    dt__autograd_meta_in_node(outputs[k], node, k);
    dt__autograd_attach_output(node, outputs[k], k);
  }
  dt__autograd_node_release(node); /* the outputs hold it now */
  return DT_OK;
}

dt_status dt__autograd_record_function(const dt_autograd_function *fn, void *state,
                                       dt_tensor *input, dt_tensor *output) {
  return record_function(fn, state, 1, &input, 1, &output, true);
}

dt_status dt__autograd_record_function_n(const dt_autograd_function *fn, void *state, int n_in,
                                         dt_tensor *const *inputs, int n_out,
                                         dt_tensor *const *outputs) {
  return record_function(fn, state, n_in, inputs, n_out, outputs, false);
}
