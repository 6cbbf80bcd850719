/* Autograd's state: the per-tensor meta and the lifetime of recorded nodes (the per-thread
 * grad mode is in grad_mode.c). Below record.c, engine.c and the public API (autograd.c). */
#include <inttypes.h>

#include "autograd/autograd_impl.h"
#include "distributed/dist_impl.h"

static void meta_destroy(dt_tensor_ext *ext) {
  dt_autograd_meta *meta = (dt_autograd_meta *)ext;
  dt_autograd_node *node = meta->grad_fn;
  /* A node that was asked to keep this tensor's gradient must forget it. */
  if (node && meta->output_nr < node->n_outputs && node->retain_meta[meta->output_nr] == meta) {
    node->retain_meta[meta->output_nr] = NULL;
  }
  dt_tensor_release(meta->grad);
  atomic_fetch_sub_explicit(&dt__autograd_live, 1, memory_order_relaxed);
  /* A meta in its node's block goes with the block: the node's release comes last. */
  if (!meta->in_node) dt__free(meta);
  dt__autograd_node_release(node);
}

dt_autograd_meta *dt__autograd_meta_get(dt_tensor *t) {
  if (t->autograd) return (dt_autograd_meta *)t->autograd;
  dt_autograd_meta *meta = dt__calloc(sizeof *meta);
  if (!meta) {
    dt__error(DT_ERR_NOMEM, "out of memory for a tensor's autograd state");
    return NULL;
  }
  meta->ext.destroy = meta_destroy;
  atomic_fetch_add_explicit(&dt__autograd_live, 1, memory_order_release);
  t->autograd = &meta->ext;
  return meta;
}

dt_autograd_meta *dt__autograd_meta_in_node(dt_tensor *t, dt_autograd_node *node, int k) {
  if (t->autograd) return (dt_autograd_meta *)t->autograd;
  dt_autograd_meta *meta = &node->metas[k];
  *meta = (dt_autograd_meta){.ext.destroy = meta_destroy, .in_node = true};
  atomic_fetch_add_explicit(&dt__autograd_live, 1, memory_order_release);
  t->autograd = &meta->ext;
  return meta;
}

bool dt__autograd_has_shape(const dt_tensor *t, const dt_tensor_meta *meta) {
  int ndim = t->spec ? t->spec->ndim : t->ndim;
  if (ndim != meta->ndim) return false;
  const int64_t *shape = t->spec ? t->spec->shape : t->shape; /* not the accessor: no size read */
  for (int i = 0; i < ndim; i++) {
    if (shape[i] != meta->shape[i]) return false;
  }
  return true;
}

void dt__autograd_dist_meta_of(const dt_tensor *t, dt_tensor_meta *meta) {
  meta->dtype = t->dtype;
  meta->ndim = t->spec ? t->spec->ndim : t->ndim;
  const int64_t *shape = t->spec ? t->spec->shape : t->shape; /* the fields: no size read */
  for (int i = 0; i < meta->ndim; i++) meta->shape[i] = shape[i];
}

static atomic_llong live_nodes;
static atomic_ullong next_sequence;

int64_t dt_autograd_live_nodes(void) { return (int64_t)atomic_load(&live_nodes); }

uint64_t dt__autograd_node_born(void) {
  atomic_fetch_add_explicit(&live_nodes, 1, memory_order_relaxed);
  return atomic_fetch_add_explicit(&next_sequence, 1, memory_order_relaxed);
}

void dt__autograd_node_retain(dt_autograd_node *node) {
  if (node) atomic_fetch_add_explicit(&node->refcount, 1, memory_order_relaxed);
}

void dt__autograd_node_free_saved(dt_autograd_node *node) {
  for (int i = 0; i < node->n_slots; i++) {
    dt_tensor_release(node->saved[i]);
    node->saved[i] = NULL;
    dt_tensor_release(node->edges[i].leaf);
    node->edges[i].leaf = NULL;
  }
  for (int k = 0; k < node->n_outputs; k++) {
    dt_tensor_release(node->outputs[k]);
    node->outputs[k] = NULL;
  }
  node->freed = true;
}

/* Nodes whose last reference went while this thread was already freeing nodes. Freeing a
 * node releases its input nodes and saved tensors, whose metas release their nodes in turn:
 * done recursively, a chain of 100,000 recorded ops would need 100,000 stack frames (a rank
 * thread's stack overflows). So only the outermost release frees; nested ones queue their
 * node here, and the outermost loop drains the queue. */
static _Thread_local dt_autograd_node *release_queue;
static _Thread_local bool releasing;

/* One pass over the slots and one over the outputs; most entries are NULL (a leaf input has
 * no edge node, few formulas keep outputs), so they are tested before any call. */
static void node_free(dt_autograd_node *node) {
  for (int i = 0; i < node->n_slots; i++) {
    if (node->saved[i]) dt_tensor_release(node->saved[i]);
    if (node->edges[i].leaf) dt_tensor_release(node->edges[i].leaf);
    if (node->edges[i].node) dt__autograd_node_release(node->edges[i].node);
  }
  for (int k = 0; k < node->n_outputs; k++) {
    if (node->outputs[k]) dt_tensor_release(node->outputs[k]);
    if (node->grads[k]) dt_tensor_release(node->grads[k]);
  }
  if (node->function && node->function->release) node->function->release(node->function_state);
  dt__free(node); /* the per-slot arrays and the int list live in the same block */
  atomic_fetch_sub_explicit(&live_nodes, 1, memory_order_relaxed);
}

void dt__autograd_node_release(dt_autograd_node *node) {
  if (!node) return;
  if (atomic_fetch_sub_explicit(&node->refcount, 1, memory_order_acq_rel) != 1) return;
  node->release_next = release_queue;
  release_queue = node;
  if (releasing) return; /* the outermost release below frees it */
  releasing = true;
  while (release_queue) {
    dt_autograd_node *next = release_queue;
    release_queue = next->release_next;
    node_free(next);
  }
  releasing = false;
}

const char *dt__autograd_node_name(const dt_autograd_node *node) {
  return node->function ? node->function->name : dt__op_table[node->call.op].name;
}

/* Below the engine and the copy-slices backward (inplace_view.c), which both check saved
 * values before a formula runs. */
dt_status dt__autograd_check_saved(const dt_autograd_node *n) {
  const char *op = dt__autograd_node_name(n);
  if (n->freed) {
    return dt__error(DT_ERR_INVALID,
                     "dt_backward: trying to go through the graph a second time (the saved tensors "
                     "of %s were freed by the first backward); pass retain_graph to "
                     "dt_backward_ex the first time",
                     op);
  }
  /* A function node keeps only a leaf input, as the destination of its gradient: its backward
   * reads no saved value, so an in-place update of that leaf does not matter. */
  if (n->function) return DT_OK;
  /* An op linear in all its arguments (add, sub, copy_, clone, to, ...) has a gradient that
   * reads no argument's value, only the shapes kept in input_metas: an in-place write since
   * (y.add_(y), y.copy_(y), or w.add_(1) after z = y + w) changes nothing, as in PyTorch. */
  bool reads_inputs = !dt__op_has_trait(n->call.op, DT_TRAIT_LINEAR);
  for (int i = 0; reads_inputs && i < n->n_slots; i++) {
    const dt_tensor *t = n->saved[i];
    if (t && t->storage->version != n->saved_versions[i]) {
      return dt__error(DT_ERR_INVALID,
                       "dt_backward: input %d of %s, saved for its gradient, was modified in place "
                       "since (version %" PRIu32 ", saved at version %" PRIu32 ")",
                       i, op, t->storage->version, n->saved_versions[i]);
    }
  }
  for (int k = 0; k < n->n_outputs; k++) {
    const dt_tensor *t = n->outputs[k];
    if (t && t->storage->version != n->output_versions[k]) {
      return dt__error(
          DT_ERR_INVALID,
          "dt_backward: output %d of %s, saved for its gradient, was modified in place "
          "since (version %" PRIu32 ", saved at version %" PRIu32 ")",
          k, op, t->storage->version, n->output_versions[k]);
    }
  }
  return DT_OK;
}
