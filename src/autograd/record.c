/*
 * Recording: dt__dispatch comes here (dt__upcall.autograd_dispatch) instead of its plain
 * path while any autograd meta is alive (dt__autograd_live != 0). Under no_grad, or when no input
 * requires grad, the op runs unrecorded; otherwise a node saves what the op's backward formula may
 * read.
 */
#include <inttypes.h>

#include "autograd/autograd_impl.h"
#include "dtensor/ops.h"

static dt_autograd_meta *meta_of(const dt_tensor *t) {
  return t ? (dt_autograd_meta *)t->autograd : NULL;
}

static bool requires_grad(const dt_tensor *t) {
  const dt_autograd_meta *meta = meta_of(t);
  return meta && meta->requires_grad;
}

static dt_tensor *slot_tensor(const dt_op_call *call, int i) {
  return i < call->n_inputs ? call->inputs[i] : call->input_list[i - call->n_inputs];
}

static bool any_input_requires_grad(const dt_op_call *call) {
  for (int i = 0; i < call->n_inputs + call->n_input_list; i++) {
    if (requires_grad(slot_tensor(call, i))) return true;
  }
  return false;
}

/* A handle on the output's storage without autograd meta, so that a node can keep its
 * output without the output's meta pointing back at the node (a reference cycle). */
static dt_status detached_alias(dt_tensor *t, dt_tensor **out) {
  if (!t->spec) return dt__tensor_view(t, t->ndim, t->shape, t->strides, t->offset, out);
  return dt_detach(t, out); /* grad mode is off here: not recorded */
}

/* A node with its per-slot arrays and room for n_ints attributes, in one allocation (one
 * malloc per recorded op keeps recording cheap): the node, then the per-slot arrays, then
 * the int list. Slots hold saved inputs, then (for ops) the call's tensor list. */
static dt_autograd_node *node_alloc(int n_slots, size_t n_ints) {
  size_t per_slot = sizeof(dt_tensor *) * 2 + sizeof(uint32_t) + sizeof(dt_tensor_meta) +
                    sizeof(bool) + sizeof(dt_autograd_edge);
  size_t head = (sizeof(dt_autograd_node) + 15) & ~(size_t)15;
  size_t slots_bytes = (per_slot * (size_t)n_slots + 15) & ~(size_t)15;
  dt_autograd_node *node = dt__calloc(head + slots_bytes + sizeof(int64_t) * n_ints);
  if (!node) return NULL;
  char *block = (char *)node + head;
  atomic_init(&node->refcount, 1);
  node->sequence = dt__autograd_node_born();
  node->n_slots = n_slots;
  /* Carve the block: pointers first, then the 8-byte aligned metas, then the rest. */
  node->saved = (dt_tensor **)block;
  dt_tensor **list = node->saved + n_slots;
  node->input_metas = (dt_tensor_meta *)(list + n_slots);
  node->edges = (dt_autograd_edge *)(node->input_metas + n_slots);
  node->saved_versions = (uint32_t *)(node->edges + n_slots);
  node->needs_grad = (bool *)(node->saved_versions + n_slots);
  node->int_list = n_ints ? (int64_t *)(block + slots_bytes) : NULL;
  return node;
}

/* Points output at node (as output 0) once nothing else can fail. */
static void attach_output(dt_autograd_node *node, dt_tensor *output, int output_nr) {
  dt_autograd_meta *meta = meta_of(output);
  meta->requires_grad = true;
  meta->grad_fn = node;
  meta->output_nr = output_nr;
  dt__autograd_node_retain(node);
}

/* The node of a successful call whose inputs require grad. The slots' layout: one per
 * tensor argument, inputs first, then the tensor list. */
static dt_status record(dt_op_call *call) {
  const dt_op_def *def = &dt__op_table[call->op];
  int n_slots = call->n_inputs + call->n_input_list;
  int n_out = def->kind == DT_OP_KIND_INPLACE ? 0 : call->n_outputs;
  bool any_float_output = false;
  for (int k = 0; k < n_out; k++) {
    any_float_output |= call->outputs[k] && dt_dtype_is_floating(call->outputs[k]->dtype);
  }
  if (!any_float_output) return DT_OK; /* integer and bool results are not differentiable */
  if (n_out > DT_OP_MAX_META) {
    return dt__error(DT_ERR_INTERNAL, "%s: autograd records at most %d outputs", def->name,
                     DT_OP_MAX_META);
  }

  size_t n_ints = call->n_int_list > 0 && call->int_list ? (size_t)call->n_int_list : 0;
  dt_autograd_node *node = node_alloc(n_slots, n_ints);
  if (!node) return dt__error(DT_ERR_NOMEM, "%s: cannot allocate its autograd node", def->name);
  dt_tensor **list = node->saved + n_slots;
  int64_t *int_list = node->int_list;
  node->call = *call;
  node->call.outputs = node->outputs;
  node->call.input_list = list;
  if (int_list) {
    for (int i = 0; i < call->n_int_list; i++) int_list[i] = call->int_list[i];
  }
  node->call.int_list = int_list;

  for (int i = 0; i < n_slots; i++) {
    dt_tensor *t = slot_tensor(call, i);
    if (!t) continue;
    node->saved[i] = dt_tensor_retain(t);
    node->saved_versions[i] = t->storage->version;
    dt__autograd_meta_of(t, &node->input_metas[i]);
    if (i < call->n_inputs) {
      node->call.inputs[i] = t;
    } else {
      list[i - call->n_inputs] = t;
    }
    dt_autograd_meta *meta = meta_of(t);
    if (!meta || !meta->requires_grad) continue;
    node->needs_grad[i] = true;
    if (meta->grad_fn) {
      node->edges[i].node = meta->grad_fn;
      node->edges[i].output_nr = meta->output_nr;
      dt__autograd_node_retain(meta->grad_fn);
    } else {
      node->edges[i].to_leaf = true;
    }
  }

  node->n_outputs = n_out;
  dt_status st = DT_OK;
  for (int k = 0; k < n_out && !st; k++) {
    dt_tensor *out = call->outputs[k];
    if (!out) continue;
    dt__autograd_meta_of(out, &node->output_metas[k]);
    node->output_versions[k] = out->storage->version;
    st = detached_alias(out, &node->outputs[k]);
  }
  /* The outputs point at the node last, once nothing can fail. */
  for (int k = 0; k < n_out && !st; k++) {
    dt_tensor *out = call->outputs[k];
    if (!out || !dt_dtype_is_floating(out->dtype)) continue;
    if (!dt__autograd_meta_get(out)) st = DT_ERR_NOMEM;
  }
  if (st) {
    dt__autograd_node_release(node);
    return st;
  }
  for (int k = 0; k < n_out; k++) {
    dt_tensor *out = call->outputs[k];
    if (!out || !dt_dtype_is_floating(out->dtype)) continue;
    attach_output(node, out, k);
  }
  dt__autograd_node_release(node); /* the outputs hold it now */
  return DT_OK;
}

dt_status dt__autograd_record_function(const dt_autograd_function *fn, void *state,
                                       dt_tensor *input, dt_tensor *output) {
  dt_autograd_node *node = node_alloc(1, 0);
  if (!node) {
    if (fn->release) fn->release(state);
    return dt__error(DT_ERR_NOMEM, "%s: cannot allocate its autograd node", fn->name);
  }
  node->function = fn;
  node->function_state = state;
  dt__autograd_meta_of(input, &node->input_metas[0]);
  dt__autograd_meta_of(output, &node->output_metas[0]);
  node->needs_grad[0] = true;
  dt_autograd_meta *in_meta = meta_of(input);
  if (in_meta->grad_fn) {
    /* The backward reads no saved value (only the layouts in state), so a non-leaf input is
     * not kept: its storage can go as soon as the forward drops it. */
    node->edges[0].node = in_meta->grad_fn;
    node->edges[0].output_nr = in_meta->output_nr;
    dt__autograd_node_retain(in_meta->grad_fn);
  } else {
    node->edges[0].to_leaf = true;
    node->saved[0] = dt_tensor_retain(input);
    node->saved_versions[0] = input->storage->version;
  }
  node->n_outputs = 1;
  if (!dt__autograd_meta_get(output)) {
    dt__autograd_node_release(node);
    return DT_ERR_NOMEM;
  }
  attach_output(node, output, 0);
  dt__autograd_node_release(node); /* the output holds it now */
  return DT_OK;
}

dt_status dt__autograd_dispatch(dt_op_call *call) {
  const dt_op_def *def = &dt__op_table[call->op];
  bool recording = !dt__grad_disabled && !dt__op_has_trait(call->op, DT_TRAIT_NOT_DIFFERENTIABLE) &&
                   any_input_requires_grad(call);
  if (recording && def->kind == DT_OP_KIND_INPLACE) {
    return dt__error(DT_ERR_UNSUPPORTED,
                     "%s: in-place op on a tensor that requires grad (or with an argument that "
                     "does): autograd does not record in-place ops yet; use the out-of-place "
                     "form, or run it under no_grad (dt_grad_mode_set(false))",
                     def->name);
  }
  if (!recording && def->kind == DT_OP_KIND_INPLACE && !dt__grad_disabled &&
      requires_grad(call->inputs[0])) {
    /* A NOT_DIFFERENTIABLE in-place op (uniform_) on a tensor that requires grad. */
    return dt__error(DT_ERR_UNSUPPORTED,
                     "%s: in-place op on a tensor that requires grad; run it under no_grad "
                     "(dt_grad_mode_set(false))",
                     def->name);
  }
  dt_status st =
      DT_UNLIKELY(dt__modes_visible > 0) ? dt__dispatch_with_modes(call) : dt__dispatch_inner(call);
  if (st) return st;
  if (def->kind == DT_OP_KIND_INPLACE) {
    /* Tensors saved for backward remember the version they had; a write bumps it. */
    call->inputs[0]->storage->version++;
    return DT_OK;
  }
  if (!recording) return DT_OK;
  /* Saving a detached alias must not itself be recorded. */
  dt__grad_disabled = true;
  st = record(call);
  dt__grad_disabled = false;
  if (st) {
    for (int k = 0; k < call->n_outputs; k++) {
      dt_tensor_release(call->outputs[k]);
      call->outputs[k] = NULL;
    }
  }
  return st;
}
