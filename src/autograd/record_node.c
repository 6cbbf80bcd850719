/* Building a recorded node (record.c's and the in-place recorder's): the node's one
 * allocation, its output links and its input edges. */
#include <string.h>

#include "autograd/autograd_impl.h"
#include "dtensor/ops.h"

/* A handle on the output's storage without autograd meta, so that a node can keep its
 * output without the output's meta pointing back at the node (a reference cycle). */
dt_status dt__autograd_detached_alias(dt_tensor *t, dt_tensor **out) {
  if (!t->spec) return dt__tensor_view(t, t->ndim, t->shape, t->strides, t->offset, out);
  return dt_detach(t, out); /* grad mode is off here: not recorded */
}

/* A node with its per-slot and per-output arrays and room for n_ints attributes, in one
 * allocation (one allocation per recorded op keeps recording cheap, and the outputs' metas
 * live in it too). Only what the recorder does not always write is zeroed, with one memset at
 * the front of the block: the per-slot pointers, edges and flags, then the per-output
 * pointers. Then the metas and versions (the caller fills them, and call), then the int
 * list. Slots hold saved inputs, then (for ops) the call's tensor list. */
dt_autograd_node *dt__autograd_node_alloc(int n_slots, int n_out, size_t n_ints) {
  size_t head = (sizeof(dt_autograd_node) + 15) & ~(size_t)15;
  size_t zeroed_slots = (sizeof(dt_tensor *) * 2 + sizeof(dt_autograd_edge)) * (size_t)n_slots +
                        (((size_t)n_slots + 7) & ~(size_t)7);
  size_t zeroed = zeroed_slots + sizeof(dt_tensor *) * 3 * (size_t)n_out;
  size_t rest =
      (sizeof(dt_tensor_meta) + sizeof(uint32_t)) * (size_t)n_slots +
      (sizeof(dt_autograd_meta) + sizeof(dt_tensor_meta) + sizeof(uint32_t)) * (size_t)n_out;
  rest = (rest + 15) & ~(size_t)15;
  dt_autograd_node *node = dt__alloc(head + zeroed + rest + sizeof(int64_t) * n_ints);
  if (!node) return NULL;
  char *block = (char *)node + head;
  memset(block, 0, zeroed);
  atomic_init(&node->refcount, 1);
  node->sequence = dt__autograd_node_born();
  node->n_slots = n_slots;
  node->n_outputs = n_out;
  node->freed = false;
  node->function = NULL;
  node->function_state = NULL;
  node->release_next = NULL;
  node->visited_by = 0;
  node->dependencies = 0;
  /* Carve the block: the zeroed part, then the 8-byte aligned metas, then the versions. */
  node->saved = (dt_tensor **)block;
  dt_tensor **list = node->saved + n_slots;
  node->edges = (dt_autograd_edge *)(list + n_slots);
  node->needs_grad = (bool *)(node->edges + n_slots);
  node->outputs = (dt_tensor **)(block + zeroed_slots);
  node->grads = node->outputs + n_out;
  node->retain_meta = (dt_autograd_meta **)(node->grads + n_out);
  node->input_metas = (dt_tensor_meta *)(node->retain_meta + n_out);
  node->metas = (dt_autograd_meta *)(node->input_metas + n_slots);
  node->output_metas = (dt_tensor_meta *)(node->metas + n_out);
  node->saved_versions = (uint32_t *)(node->output_metas + n_out);
  node->output_versions = node->saved_versions + n_slots;
  node->int_list = n_ints ? (int64_t *)(block + zeroed + rest) : NULL;
  return node;
}

/* Points output at node (as output 0) once nothing else can fail. */
void dt__autograd_attach_output(dt_autograd_node *node, dt_tensor *output, int output_nr) {
  dt_autograd_meta *meta = (dt_autograd_meta *)output->autograd;
  meta->requires_grad = true;
  meta->grad_fn = node;
  meta->output_nr = output_nr;
  dt__autograd_node_retain(node);
}

/* Slot i's edge: to the node that made t, or into t's .grad when t is a leaf (leaf, when not
 * NULL, is the tensor whose .grad receives it, retained: t itself when the slot saved another
 * tensor). Nothing when t does not require grad. */
void dt__autograd_set_edge(dt_autograd_node *node, int i, dt_tensor *t, dt_tensor *leaf) {
  dt_autograd_meta *meta = (dt_autograd_meta *)t->autograd;
  if (meta && meta->requires_grad) dt__autograd_set_edge_meta(node, i, meta, leaf);
}

void dt__autograd_set_edge_meta(dt_autograd_node *node, int i, dt_autograd_meta *meta,
                                dt_tensor *leaf) {
  node->needs_grad[i] = true;
  if (meta->grad_fn) {
    node->edges[i].node = meta->grad_fn;
    node->edges[i].output_nr = meta->output_nr;
    dt__autograd_node_retain(meta->grad_fn);
  } else {
    node->edges[i].to_leaf = true;
    if (leaf) node->edges[i].leaf = dt_tensor_retain(leaf);
  }
}
