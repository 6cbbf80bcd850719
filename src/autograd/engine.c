/*
 * The backward engine: from a loss, the recorded nodes it depends on in topological order
 * (Kahn's algorithm over dependency counts, the most recently recorded ready node first, as
 * PyTorch orders by sequence number), each node's backward formula run with recording off,
 * gradients summed per node output, and leaf gradients added into `.grad` only once the
 * whole backward has succeeded.
 */
#include <inttypes.h>
#include <string.h>

#include "autograd/autograd_impl.h"
#include "autograd/meta_of.h"
#include "dtensor/dist.h"
#include "dtensor/mesh.h"
#include "dtensor/ops.h"

/* A growable array of pointers whose first items live inside it: a small graph allocates
 * nothing for its bookkeeping. Used in place (items may point into the struct). */
#define VEC_INLINE 16
typedef struct ptr_vec {
  void **items; /* NULL until the first push: then `small`, or a heap block once it grows */
  int count, capacity;
  void *small[VEC_INLINE];
} ptr_vec;

static dt_status vec_push(ptr_vec *v, void *item) {
  if (!v->items) {
    v->items = v->small;
    v->capacity = VEC_INLINE;
  }
  if (v->count == v->capacity) {
    int cap = v->capacity * 2;
    void **items = dt__alloc(sizeof(void *) * (size_t)cap);
    if (!items) return dt__error(DT_ERR_NOMEM, "dt_backward: out of memory");
    for (int i = 0; i < v->count; i++) items[i] = v->items[i];
    if (v->items != v->small) dt__free(v->items);
    v->items = items;
    v->capacity = cap;
  }
  v->items[v->count++] = item;
  return DT_OK;
}

/* The inline items need no zeroing: only count of them are read. */
static void vec_init(ptr_vec *v) {
  v->items = NULL;
  v->count = v->capacity = 0;
}

static void vec_free(ptr_vec *v) {
  if (v->items != v->small) dt__free(v->items);
}

/* A gradient waiting to be added into a tensor's `.grad` at the end. */
typedef struct pending_grad {
  dt_autograd_meta *meta;
  dt_tensor *target; /* keeps the meta alive */
  dt_tensor *grad;
  bool replace; /* a retained non-leaf gradient: replaced, not accumulated */
} pending_grad;

#define PENDING_INLINE 8
typedef struct engine {
  ptr_vec nodes;   /* every node reached, each retained once */
  ptr_vec pending; /* pending_grad *: the first ones in `small_pending`, then allocated */
  pending_grad small_pending[PENDING_INLINE];
} engine;

static void pending_free(engine *e, pending_grad *p) {
  if (p < e->small_pending || p >= e->small_pending + PENDING_INLINE) dt__free(p);
}

static void engine_free(engine *e) {
  for (int i = 0; i < e->nodes.count; i++) {
    dt_autograd_node *n = e->nodes.items[i];
    for (int k = 0; k < n->n_outputs; k++) { /* a failed backward leaves some */
      dt_tensor_release(n->grads[k]);
      n->grads[k] = NULL;
    }
    n->dependencies = 0;
    dt__autograd_node_release(n);
  }
  for (int i = 0; i < e->pending.count; i++) {
    pending_grad *p = e->pending.items[i];
    dt_tensor_release(p->target);
    dt_tensor_release(p->grad);
    pending_free(e, p);
  }
  vec_free(&e->nodes);
  vec_free(&e->pending);
}

/* out = a + b, or b alone when a is NULL; consumes a and b. */
static dt_status accumulate(dt_tensor **acc, dt_tensor *g) {
  if (!*acc) {
    *acc = g;
    return DT_OK;
  }
  dt_tensor *sum = NULL;
  dt_status st = dt_add(*acc, g, &sum);
  dt_tensor_release(g);
  if (st) return st;
  dt_tensor_release(*acc);
  *acc = sum;
  return DT_OK;
}

static dt_status add_pending(engine *e, dt_tensor *target, dt_autograd_meta *meta, dt_tensor *g,
                             bool replace) {
  for (int i = 0; i < e->pending.count; i++) {
    pending_grad *p = e->pending.items[i];
    if (p->meta == meta) return accumulate(&p->grad, g);
  }
  pending_grad *p = e->pending.count < PENDING_INLINE ? &e->small_pending[e->pending.count]
                                                      : dt__calloc(sizeof *p);
  if (!p) {
    dt_tensor_release(g);
    return dt__error(DT_ERR_NOMEM, "dt_backward: out of memory");
  }
  p->meta = meta;
  p->target = dt_tensor_retain(target);
  p->grad = g;
  p->replace = replace;
  dt_status st = vec_push(&e->pending, p);
  if (st) {
    dt_tensor_release(p->target);
    dt_tensor_release(p->grad);
    pending_free(e, p);
  }
  return st;
}

/* Collects every node reachable from root and counts, for each, the edges that reach it
 * from other reachable nodes. Iterative: graphs can be deep. */
static dt_status collect(engine *e, dt_autograd_node *root) {
  static atomic_ullong backward_ids;
  uint64_t id = atomic_fetch_add_explicit(&backward_ids, 1, memory_order_relaxed) + 1;
  root->visited_by = id;
  dt__autograd_node_retain(root);
  dt_status st = vec_push(&e->nodes, root);
  if (st) {
    dt__autograd_node_release(root);
    return st;
  }
  root->dependencies = 0;
  for (int i = 0; i < e->nodes.count; i++) {
    dt_autograd_node *n = e->nodes.items[i];
    for (int s = 0; s < n->n_slots; s++) {
      dt_autograd_node *next = n->edges[s].node;
      if (!next) continue;
      if (next->visited_by != id) { /* first seen: collect it */
        next->visited_by = id;
        dt__autograd_node_retain(next);
        st = vec_push(&e->nodes, next);
        if (st) {
          dt__autograd_node_release(next);
          return st;
        }
        next->dependencies = 0;
      }
      next->dependencies++;
    }
  }
  return DT_OK;
}

/* Runs one node: its formula, then routes each input gradient along its edge. */
static dt_status run_node(engine *e, dt_autograd_node *n, bool retain_graph) {
  /* Gradients of non-leaves that asked to keep them: the summed gradient of the output. */
  for (int k = 0; k < n->n_outputs; k++) {
    dt_autograd_meta *meta = n->retain_meta[k];
    if (!meta || !n->grads[k]) continue;
    dt_status st = add_pending(e, NULL, meta, dt_tensor_retain(n->grads[k]), true);
    if (st) return st;
  }
  const char *name = dt__autograd_node_name(n);
  const dt_op_backward_fn formula = n->function ? NULL : dt__op_table[n->call.op].backward;
  if (!n->function && !formula) {
    return dt__error(DT_ERR_UNSUPPORTED,
                     "dt_backward: %s has no backward formula yet (its op list entry says "
                     "NO_BACKWARD)",
                     name);
  }
  dt_status st = dt__autograd_check_saved(n);
  if (st) return st;
  dt_tensor *grad_inputs[DT_OP_MAX_INPUTS + 64];
  int n_slots = n->n_slots;
  dt_tensor **gi = grad_inputs;
  if (n_slots > (int)(sizeof grad_inputs / sizeof grad_inputs[0])) {
    gi = dt__calloc(sizeof(dt_tensor *) * (size_t)n_slots);
    if (!gi) return dt__error(DT_ERR_NOMEM, "dt_backward: out of memory");
  }
  for (int i = 0; i < n_slots; i++) gi[i] = NULL;
  dt_backward_ctx ctx = {.call = &n->call,
                         .input_metas = n->input_metas,
                         .output_metas = n->output_metas,
                         .needs_grad = n->needs_grad};
  if (!n->function) {
    st = formula(&ctx, n->grads, gi);
  } else if (n->function == &dt__copy_slices_function) {
    st = dt__copy_slices_backward(n, retain_graph, gi);
  } else if (n->function->backward_n) {
    st = n->function->backward_n(n->function_state, n->n_outputs, n->grads, n_slots, n->needs_grad,
                                 gi);
  } else if (n->grads[0]) {
    st = n->function->backward(n->function_state, n->grads[0], &gi[0]);
  }
  for (int i = 0; i < n_slots && !st; i++) {
    if (!gi[i]) continue;
    dt_tensor *g = gi[i];
    gi[i] = NULL;
    if (!n->needs_grad[i]) {
      dt_tensor_release(g);
      continue;
    }
    if (!dt__autograd_has_shape(g, &n->input_metas[i])) {
      char a[160], b[160];
      dt_tensor_meta gm;
      dt__autograd_meta_of(g, &gm);
      st =
          dt__error(DT_ERR_INTERNAL,
                    "dt_backward: the formula of %s gave input %d a gradient of shape %s, expected "
                    "%s",
                    name, i, dt__format_ints(a, sizeof a, gm.ndim, gm.shape),
                    dt__format_ints(b, sizeof b, n->input_metas[i].ndim, n->input_metas[i].shape));
      dt_tensor_release(g);
      break;
    }
    const dt_autograd_edge *edge = &n->edges[i];
    if (edge->node) {
      st = accumulate(&edge->node->grads[edge->output_nr], g);
    } else if (edge->to_leaf) {
      dt_tensor *leaf = edge->leaf ? edge->leaf : n->saved[i];
      st = add_pending(e, leaf, (dt_autograd_meta *)leaf->autograd, g, false);
    } else {
      dt_tensor_release(g);
    }
  }
  for (int i = 0; i < n_slots; i++) dt_tensor_release(gi[i]);
  if (gi != grad_inputs) dt__free(gi);
  if (st) return st;
  for (int k = 0; k < n->n_outputs; k++) {
    dt_tensor_release(n->grads[k]);
    n->grads[k] = NULL;
  }
  if (!retain_graph) dt__autograd_node_free_saved(n);
  return DT_OK;
}

/* A copy of g with storage of its own. A contiguous g (the seed, most formulas' results) is
 * copied block by block without a dispatch: clone is pointwise, so on a distributed tensor it
 * is each rank copying its local block, and the copy shares g's spec (placements and global
 * shape). A view with gaps or broadcast strides (sum's expand) goes through dt_clone, and so
 * does every copy while a dispatch mode is active: a tracer (dt_compile's joint graph) then
 * sees the copy as the clone op it is. */
static dt_status copy_grad(dt_tensor *g, bool traced, dt_tensor **out) {
  /* (A gradient on another device than the CPU is copied there, by its device's clone.) */
  if (DT_UNLIKELY(traced) || g->storage->device != 0 ||
      !dt__is_contiguous(g->ndim, g->shape, g->strides) || (g->spec && !dt__upcall.spec_retain)) {
    return dt_clone(g, out);
  }
  dt_tensor *copy = NULL;
  dt_status st = dt__tensor_new(g->ndim, g->shape, g->dtype, &copy);
  if (st) return st;
  size_t nbytes = (size_t)dt__tensor_numel(g) * dt__dtype_sizes[g->dtype];
  if (nbytes) memcpy(dt__tensor_base(copy), dt__tensor_base(g), nbytes);
  if (g->spec) copy->spec = dt__upcall.spec_retain(g->spec);
  *out = copy;
  return DT_OK;
}

/* Adds the pending gradients into `.grad`: every new gradient is computed first, then all are
 * swapped in, so that a failing add changes none. */
static dt_status commit(engine *e) {
  bool traced = dt__modes_visible > 0; /* read once: the copies below dispatch under a mode */
  for (int i = 0; i < e->pending.count; i++) {
    pending_grad *p = e->pending.items[i];
    /* A gradient that is a view (an expand of the seed, a reshape of another gradient) or
     * is shared with another tensor's gradient gets storage of its own, so that zeroing it
     * in place touches nothing else. */
    bool shared = atomic_load(&p->grad->refcount) > 1 ||
                  atomic_load(&p->grad->storage->refcount) > 1 ||
                  !dt__is_contiguous(p->grad->ndim, p->grad->shape, p->grad->strides);
    if (shared && !(!p->replace && p->meta->grad)) {
      dt_tensor *copy = NULL;
      dt_status st = copy_grad(p->grad, traced, &copy);
      if (st) return st;
      dt_tensor_release(p->grad);
      p->grad = copy;
    }
    if (p->replace || !p->meta->grad) continue;
    dt_tensor *sum = NULL;
    dt_status st = dt_add(p->meta->grad, p->grad, &sum);
    if (st) return st;
    dt_tensor_release(p->grad);
    p->grad = sum;
  }
  for (int i = 0; i < e->pending.count; i++) {
    pending_grad *p = e->pending.items[i];
    dt_tensor_release(p->meta->grad);
    p->meta->grad = p->grad;
    p->grad = NULL;
  }
  return DT_OK;
}

/* The default seed gradient of a one-element loss: ones on its device, Replicate when distributed
 * (a Partial loss must not be seeded with a Partial one, which would sum to the mesh size). */
static dt_status seed_ones(dt_tensor *loss, const dt_tensor_meta *lm, dt_tensor **out) {
  if (!loss->spec) { /* on the loss's device */
    dt_tensor_options on = {.device = dt_tensor_device(loss)};
    return dt_full_ex(lm->ndim, lm->shape, 1.0, lm->dtype, &on, out);
  }
  dt_mesh *mesh = dt_dist_mesh(loss);
  dt_placement placements[DT_MESH_MAX_DIMS];
  int mesh_ndim = dt_mesh_ndim(mesh);
  for (int i = 0; i < mesh_ndim; i++) placements[i] = dt_replicate();
  return dt_dist_ones(mesh, lm->ndim, lm->shape, lm->dtype, mesh_ndim, placements, out);
}

static dt_status check_seed(dt_tensor *loss, dt_tensor *grad, const dt_tensor_meta *lm) {
  if (grad->dtype != lm->dtype) {
    return dt__error(DT_ERR_DTYPE, "dt_backward: grad is %s but loss is %s",
                     dt_dtype_name(grad->dtype), dt_dtype_name(lm->dtype));
  }
  if (!dt__autograd_has_shape(grad, lm)) {
    char a[160], b[160];
    dt_tensor_meta gm;
    dt__autograd_meta_of(grad, &gm);
    return dt__error(DT_ERR_INVALID, "dt_backward: grad has shape %s but loss has shape %s",
                     dt__format_ints(a, sizeof a, gm.ndim, gm.shape),
                     dt__format_ints(b, sizeof b, lm->ndim, lm->shape));
  }
  if ((grad->spec != NULL) != (loss->spec != NULL)) {
    return dt__error(DT_ERR_INVALID, "dt_backward: grad is %s but loss is %s",
                     grad->spec ? "distributed" : "local", loss->spec ? "distributed" : "local");
  }
  return DT_OK;
}

dt_status dt_backward_ex(dt_tensor *loss, dt_tensor *grad, const dt_backward_options *options) {
  if (!loss) return dt__error(DT_ERR_INVALID, "dt_backward: loss is NULL");
  dt_autograd_meta *lmeta = (dt_autograd_meta *)loss->autograd;
  if (!lmeta || !lmeta->requires_grad) {
    return dt__error(DT_ERR_INVALID,
                     "dt_backward: loss does not require grad (no input of the ops that made it "
                     "requires grad, or they ran under no_grad)");
  }
  /* A view of a base modified in place since reads its base's new history. */
  const dt_autograd_node *lfn = lmeta->grad_fn;
  if (lfn && (lfn->function || dt__op_table[lfn->call.op].kind == DT_OP_KIND_VIEW)) {
    dt_status st = dt__autograd_refresh_view(loss);
    if (st) return st;
    lmeta = (dt_autograd_meta *)loss->autograd; /* the meta may have moved */
  }
  dt_tensor_meta lm;
  dt__autograd_meta_of(loss, &lm);
  int64_t numel = dt__numel(lm.ndim, lm.shape);
  bool retain_graph = options && options->retain_graph;
  dt_status st;
  if (grad) {
    st = check_seed(loss, grad, &lm);
    if (st) return st;
  } else if (numel != 1) {
    char b[160];
    return dt__error(
        DT_ERR_INVALID,
        "dt_backward: grad can be NULL (ones) only for a loss of one element; loss has "
        "shape %s (%" PRId64 " elements): pass its gradient",
        dt__format_ints(b, sizeof b, lm.ndim, lm.shape), numel);
  }

  bool prev_mode = dt_grad_mode_set(false);
  engine e;
  vec_init(&e.nodes);
  vec_init(&e.pending);
  dt_tensor *seed = NULL;
  if (grad) {
    seed = dt_tensor_retain(grad);
    st = DT_OK;
  } else {
    st = seed_ones(loss, &lm, &seed);
  }
  if (st) goto done;
  if (!lmeta->grad_fn) { /* the loss is itself a leaf */
    st = add_pending(&e, loss, lmeta, seed, false);
    seed = NULL;
    if (!st) st = commit(&e);
    goto done;
  }
  st = collect(&e, lmeta->grad_fn);
  if (st) goto done;
  st = accumulate(&lmeta->grad_fn->grads[lmeta->output_nr], seed);
  seed = NULL;
  if (st) goto done;
  /* Kahn's algorithm: a ready node has no unprocessed consumer left. Among ready nodes the
   * latest recorded runs first. */
  ptr_vec ready;
  vec_init(&ready);
  st = vec_push(&ready, lmeta->grad_fn);
  while (!st && ready.count > 0) {
    int best = 0;
    for (int i = 1; i < ready.count; i++) {
      if (((dt_autograd_node *)ready.items[i])->sequence >
          ((dt_autograd_node *)ready.items[best])->sequence)
        best = i;
    }
    dt_autograd_node *n = ready.items[best];
    ready.items[best] = ready.items[--ready.count];
    st = run_node(&e, n, retain_graph);
    for (int s = 0; !st && s < n->n_slots; s++) {
      dt_autograd_node *next = n->edges[s].node;
      if (next && --next->dependencies == 0) st = vec_push(&ready, next);
    }
  }
  vec_free(&ready);
  if (!st) st = commit(&e);
done:
  dt_tensor_release(seed);
  engine_free(&e);
  dt_grad_mode_set(prev_mode);
  return st;
}

dt_status dt_backward(dt_tensor *loss, dt_tensor *grad) { return dt_backward_ex(loss, grad, NULL); }
