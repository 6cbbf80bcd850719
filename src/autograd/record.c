/*
 * Recording: dt__dispatch comes here (dt__upcall.autograd_dispatch) instead of its plain
 * path while any autograd meta is alive (dt__autograd_live != 0). Under no_grad, or when no input
 * requires grad, the op runs unrecorded; otherwise a node saves what the op's backward formula may
 * read.
 */
#include <inttypes.h>

#include "autograd/autograd_impl.h"
#include "autograd/meta_of.h"
#include "dtensor/dist.h"
#include "dtensor/mesh.h"
#include "dtensor/ops.h"

/* Arguments whose redistributed form a node can save (inputs, then the first list entries). */
#define CONSUMED_SLOTS 8

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

/* Whether n is a view: a view op's node, or a view-of-base node. */
static bool is_view_node(const dt_autograd_node *n) {
  if (n->function) return n->function == &dt__view_of_base_function;
  return dt__op_table[n->call.op].kind == DT_OP_KIND_VIEW;
}

/* dt__autograd_refresh_view when t's history is a view: the common case is a call less. */
static inline dt_status refresh_if_view(dt_tensor *t) {
  const dt_autograd_meta *m = meta_of(t);
  if (!m || !m->grad_fn || !is_view_node(m->grad_fn)) return DT_OK;
  return dt__autograd_refresh_view(t);
}

/* Whether an argument requires grad, and (in *any_distributed) whether one is distributed. */
static bool any_input_requires_grad(const dt_op_call *call, bool *any_distributed) {
  bool any = false, dist = false;
  for (int i = 0; i < call->n_inputs + call->n_input_list; i++) {
    const dt_tensor *t = slot_tensor(call, i);
    if (!t) continue;
    any |= requires_grad(t);
    dist |= t->spec != NULL;
  }
  *any_distributed = dist;
  return any;
}

/* The node of a successful call whose inputs require grad. The slots' layout: one per
 * tensor argument, inputs first, then the tensor list. */
static dt_status record(dt_op_call *call, dt_tensor **consumed, int n_consumed) {
  const dt_op_def *def = &dt__op_table[call->op];
  int n_slots = call->n_inputs + call->n_input_list;
  int n_out = def->kind == DT_OP_KIND_INPLACE ? 0 : call->n_outputs;
  /* A multi-output view (split) may leave room it did not use: only the pieces count. */
  while (n_out > 0 && !call->outputs[n_out - 1]) n_out--;
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
  dt_autograd_node *node = dt__autograd_node_alloc(n_slots, n_out, n_ints);
  if (!node) return dt__error(DT_ERR_NOMEM, "%s: cannot allocate its autograd node", def->name);
  dt_tensor **list = node->saved + n_slots;
  int64_t *int_list = node->int_list;
  node->call = *call;
  node->call.n_outputs = n_out;
  node->call.outputs = node->outputs;
  node->call.input_list = list;
  if (int_list) {
    for (int i = 0; i < call->n_int_list; i++) int_list[i] = call->int_list[i];
  }
  node->call.int_list = int_list;

  for (int i = 0; i < n_slots; i++) {
    dt_tensor *t = slot_tensor(call, i);
    if (!t) {
      memset(&node->input_metas[i], 0, sizeof node->input_metas[i]);
      node->saved_versions[i] = 0;
      continue;
    }
    /* An argument the distributed dispatch redistributed is saved as the kernel consumed it
     * (the node takes the reference): its backward then reads the forward's value without
     * redistributing it again. The version recorded is the saved tensor's: a copy in its own
     * storage cannot be written by anyone, a view of the argument's storage shares its
     * counter. */
    /* An argument that is a view whose base was modified in place since reads the base's new
     * history (PyTorch regenerates a view's grad_fn from its base's version). */
    dt_status rst = refresh_if_view(t);
    if (rst) {
      dt__autograd_node_release(node);
      return rst;
    }
    dt_tensor *s = i < n_consumed ? consumed[i] : NULL;
    if (s) {
      consumed[i] = NULL;
    } else {
      s = dt_tensor_retain(t);
    }
    node->saved[i] = s;
    node->saved_versions[i] = s->storage->version;
    dt__autograd_meta_of(t, &node->input_metas[i]);
    if (i < call->n_inputs) {
      node->call.inputs[i] = s;
    } else {
      list[i - call->n_inputs] = s;
    }
    dt__autograd_set_edge(node, i, t, s != t ? t : NULL);
  }

  node->n_outputs = n_out;
  /* Only a formula that reads the outputs gets them (call.outputs[k] stays NULL otherwise):
   * the alias costs a handle per output, and keeps the output's storage alive. */
  bool save_outputs = dt__op_has_trait(call->op, DT_TRAIT_SAVES_OUTPUT);
  dt_status st = DT_OK;
  for (int k = 0; k < n_out && !st; k++) {
    dt_tensor *out = call->outputs[k];
    node->output_versions[k] = 0;
    if (!out) {
      memset(&node->output_metas[k], 0, sizeof node->output_metas[k]);
      continue;
    }
    dt__autograd_meta_of(out, &node->output_metas[k]);
    if (!save_outputs) continue;
    node->output_versions[k] = out->storage->version;
    st = dt__autograd_detached_alias(out, &node->outputs[k]);
  }
  if (st) {
    dt__autograd_node_release(node);
    return st;
  }
  /* The outputs point at the node last, once nothing can fail; their metas live in its
   * block. */
  for (int k = 0; k < n_out; k++) {
    dt_tensor *out = call->outputs[k];
    if (!out || !dt_dtype_is_floating(out->dtype)) continue;
    dt__autograd_meta_in_node(out, node, k);
    dt__autograd_attach_output(node, out, k);
  }
  dt__autograd_node_release(node); /* the outputs hold it now */
  return DT_OK;
}

/* ---- In-place ops ---------------------------------------------------------------------------
 * As PyTorch's: refused on a leaf that requires grad; otherwise self's history is rebased onto
 * a node of the op, whose inputs are self's previous history and the other arguments. */

/* The base whose storage self shares through its history of views (the view op nodes and
 * view-of-base nodes back to the first tensor that is not such a view of the same storage),
 * borrowed in *base, and the view ops from it to self in *chain (owned). *base = NULL when
 * self's history makes no view of another tensor's storage (contiguous that copied). op names
 * the in-place op in messages; NULL: a quiet walk, the status only. */
#define MAX_VIEW_STEPS 64
/* find_view_base's errors; with op NULL (a quiet walk) no message is formatted. */
#define REFUSE(code, ...) return op ? dt__error(code, __VA_ARGS__) : (code)
static dt_status find_view_base(const char *op, dt_tensor *self, dt_tensor **base,
                                dt_view_chain **chain) {
  const dt_autograd_node *steps[MAX_VIEW_STEPS];
  int outputs[MAX_VIEW_STEPS];
  int n = 0;
  const dt_view_chain *prefix = NULL; /* a view-of-base node's chain, from the base on */
  dt_tensor *t = self;
  *base = NULL;
  *chain = NULL;
  for (;;) {
    const dt_autograd_meta *m = meta_of(t);
    const dt_autograd_node *g = m ? m->grad_fn : NULL;
    if (!g || !is_view_node(g)) break;
    dt_tensor *in = g->saved[0];
    if (!g->function && in && in->storage != t->storage) break; /* the view op copied */
    if (!in || !meta_of(in) || !meta_of(in)->requires_grad) {
      REFUSE(DT_ERR_UNSUPPORTED,
             "%s: self is a view whose base the graph no longer keeps (a backward "
             "without retain_graph freed it, or the base was modified in place "
             "through another tensor); apply it to a copy (dt_clone) instead",
             op);
    }
    if (g->function) {
      prefix = g->function_state;
      t = in;
      break;
    }
    if (n == MAX_VIEW_STEPS) {
      REFUSE(DT_ERR_UNSUPPORTED,
             "%s: self is a chain of more than %d views of its base; apply it to a "
             "copy (dt_clone) instead",
             op, MAX_VIEW_STEPS);
    }
    steps[n] = g;
    outputs[n] = m->output_nr;
    n++;
    t = in;
  }
  if (t == self) return DT_OK;
  const dt_autograd_meta *bm = meta_of(t);
  if (!bm->grad_fn) {
    if (!op) return DT_ERR_INVALID;
    char shape[160];
    dt_tensor_meta m;
    dt__autograd_meta_of(t, &m);
    REFUSE(DT_ERR_INVALID,
           "%s: self is a view of a leaf tensor (shape %s) that requires grad, which "
           "cannot be modified in place while grad mode is on; run the update under "
           "no_grad (dt_grad_mode_set(false)) or use the out-of-place form",
           op, dt__format_ints(shape, sizeof shape, m.ndim, m.shape));
  }
  if (t->spec) { /* (self then is too: it shares t's storage through view ops) */
    const dt_placement *pl = dt_dist_placements(t);
    for (int i = 0; i < dt_mesh_ndim(dt_dist_mesh(t)); i++) {
      if (pl[i].kind == DT_PARTIAL) {
        REFUSE(DT_ERR_UNSUPPORTED,
               "%s: self is a view of a distributed tensor that requires grad and is Partial on "
               "mesh dim %d: in-place ops on its views are not recorded yet; redistribute it "
               "first, or apply the op to a copy (dt_clone)",
               op, i);
      }
    }
  }
  if (!dt__is_contiguous(t->ndim, t->shape, t->strides)) {
    REFUSE(DT_ERR_UNSUPPORTED,
           "%s: self is a view of a tensor that requires grad and is not contiguous: "
           "in-place ops on its views are not recorded yet; apply it to a copy "
           "(dt_clone), or take the view of a dt_contiguous copy",
           op);
  }
  dt_view_chain *c = dt__view_chain_new(t);
  if (!c) return DT_ERR_NOMEM;
  dt_status st = prefix ? dt__view_chain_append(c, prefix) : DT_OK;
  for (int i = n - 1; i >= 0 && !st; i--) st = dt__view_chain_push(c, steps[i], outputs[i]);
  if (st) {
    dt__view_chain_free(c);
    return st;
  }
  *base = t;
  *chain = c;
  return DT_OK;
}

#undef REFUSE

/* Whether an in-place op may be recorded on self (before it runs). When self is a view of
 * another tensor's storage, *base and *chain are that tensor (borrowed) and the view ops to
 * self (owned); NULL otherwise. */
static dt_status check_inplace(const dt_op_call *call, const dt_op_def *def, dt_tensor **base,
                               dt_view_chain **chain) {
  dt_tensor *self = call->inputs[0];
  const dt_autograd_meta *meta = meta_of(self);
  *base = NULL;
  *chain = NULL;
  if (meta && meta->requires_grad && !meta->grad_fn) {
    char shape[160];
    dt_tensor_meta m;
    dt__autograd_meta_of(self, &m);
    return dt__error(DT_ERR_INVALID,
                     "%s: self (a leaf tensor of shape %s) requires grad and cannot be modified in "
                     "place while grad mode is on; run the update under no_grad "
                     "(dt_grad_mode_set(false)), as an optimizer step does, or use the "
                     "out-of-place form",
                     def->name, dt__format_ints(shape, sizeof shape, m.ndim, m.shape));
  }
  if (!def->backward) {
    return dt__error(DT_ERR_UNSUPPORTED,
                     "%s: in-place op with an argument that requires grad has no backward formula "
                     "yet; run it under no_grad (dt_grad_mode_set(false))",
                     def->name);
  }
  if (meta && meta->grad_fn) {
    dt_tensor *root = self;
    if (is_view_node(meta->grad_fn)) {
      dt_status st = find_view_base(def->name, self, base, chain);
      if (st) return st;
      if (*base) root = *base;
    }
    const dt_autograd_node *n = meta_of(root)->grad_fn;
    if (n->function && n->function != &dt__copy_slices_function) {
      dt__view_chain_free(*chain);
      *chain = NULL;
      *base = NULL;
      return dt__error(DT_ERR_UNSUPPORTED,
                       "%s: self is (a view of) the output of %s, a conversion sharing storage "
                       "with a tensor that requires grad: in-place ops on it are not recorded "
                       "yet; apply it to a copy (dt_clone) instead",
                       def->name, dt__autograd_node_name(n));
    }
  }
  return DT_OK;
}

/* Breaks the cycles an in-place rebase of self would close. A node recorded earlier that saved
 * self's handle (w = y * 2 saved y; y[0:1] saved y) and that node's history reaches, once self
 * points at node, leads back to node through self's meta (y -> add_ -> mul -> y): nothing
 * frees that ring unless a backward releases the saved tensors. Those nodes swap the handle
 * for a detached alias (same storage, shape and version counter, no meta), so a later write
 * is still caught by the version check. Only the in-place path pays: nothing to do when the
 * caller holds self's only reference, and the walk over node's history stops once every
 * other reference has been found. A slot whose edge accumulates into self as a leaf keeps the
 * handle (its .grad is the destination). Errors: DT_ERR_NOMEM (the nodes already switched
 * stay valid). */
#if defined(__GNUC__)
__attribute__((noinline)) /* kept out of dt__autograd_dispatch's frame */
#endif
static dt_status
unsave_self(dt_autograd_node *node, dt_tensor *self) {
  int remaining = dt_tensor_refcount(self) - 1; /* the caller's reference stays */
  if (remaining <= 0) return DT_OK;
  static atomic_ullong walk_ids;
  /* The top bit keeps the walk's marks apart from the engine's backward ids. */
  uint64_t id =
      (UINT64_C(1) << 63) | (atomic_fetch_add_explicit(&walk_ids, 1, memory_order_relaxed) + 1);
  dt_autograd_node *small[32], **stack = small;
  size_t count = 0, cap = sizeof small / sizeof small[0];
  dt_status st = DT_OK;
  node->visited_by = id;
  stack[count++] = node;
  while (count > 0 && remaining > 0 && !st) {
    dt_autograd_node *n = stack[--count];
    for (int i = 0; i < n->n_slots && remaining > 0; i++) {
      if (n->saved[i] != self || (n->edges[i].to_leaf && !n->edges[i].leaf)) continue;
      dt_tensor *alias = NULL;
      st = dt__autograd_detached_alias(self, &alias);
      if (st) break;
      n->saved[i] = alias;
      if (i < n->call.n_inputs) {
        n->call.inputs[i] = alias;
      } else if (n->call.input_list) {
        ((dt_tensor **)n->call.input_list)[i - n->call.n_inputs] = alias;
      }
      dt_tensor_release(self);
      remaining--;
    }
    for (int i = 0; i < n->n_slots && !st; i++) {
      dt_autograd_node *next = n->edges[i].node;
      if (!next || next->visited_by == id) continue;
      next->visited_by = id;
      if (count == cap) {
        dt_autograd_node **grown = dt__alloc(2 * cap * sizeof *grown);
        if (!grown) {
          st = dt__error(DT_ERR_NOMEM, "%s: cannot allocate the walk over self's history",
                         dt__autograd_node_name(node));
          break;
        }
        memcpy(grown, stack, count * sizeof *grown);
        if (stack != small) dt__free(stack);
        stack = grown;
        cap *= 2;
      }
      stack[count++] = next;
    }
  }
  if (stack != small) dt__free(stack);
  return st;
}

/* The node of an in-place op that ran on self: slot 0 is self's old value (old_self, a copy
 * taken before the write, consumed; NULL when the formula does not read it), the other slots
 * as for any op with the versions they had before the write (pre_versions), output 0 is self
 * after the write. Self's history is not changed yet. */
static dt_status inplace_node(dt_op_call *call, dt_tensor *old_self, const uint32_t *pre_versions,
                              dt_autograd_node **out) {
  const dt_op_def *def = &dt__op_table[call->op];
  dt_tensor *self = call->inputs[0];
  int n_slots = call->n_inputs;
  size_t n_ints = call->n_int_list > 0 && call->int_list ? (size_t)call->n_int_list : 0;
  dt_autograd_node *node = dt__autograd_node_alloc(n_slots, 1, n_ints);
  if (!node) {
    dt_tensor_release(old_self);
    return dt__error(DT_ERR_NOMEM, "%s: cannot allocate its autograd node", def->name);
  }
  node->call = *call;
  node->call.n_outputs = 1;
  node->call.outputs = node->outputs;
  node->call.input_list = NULL;
  node->call.n_input_list = 0;
  if (node->int_list) {
    for (int i = 0; i < call->n_int_list; i++) node->int_list[i] = call->int_list[i];
  }
  node->call.int_list = node->int_list;
  for (int i = 0; i < n_slots; i++) {
    dt_tensor *t = call->inputs[i];
    if (!t) {
      memset(&node->input_metas[i], 0, sizeof node->input_metas[i]);
      node->saved_versions[i] = 0;
      continue;
    }
    dt__autograd_meta_of(t, &node->input_metas[i]);
    if (i == 0) {
      node->saved[0] = old_self;
      node->saved_versions[0] = old_self ? old_self->storage->version : 0;
    } else if (t->storage == self->storage && meta_of(t) && meta_of(t)->grad_fn) {
      /* self itself or a view of it (y.mul_(y), y.add_(y[0:1])): the handle would lead back
       * to this node through self's history (self -> node -> t -> ... -> self), a cycle that
       * is never freed when no backward runs; a detached alias keeps the values and the
       * storage's version counter. The edge below still follows t's history. */
      dt_status st = dt__autograd_detached_alias(t, &node->saved[i]);
      if (st) {
        dt__autograd_node_release(node); /* it owns old_self since slot 0 */
        return st;
      }
      node->saved_versions[i] = pre_versions[i];
    } else {
      node->saved[i] = dt_tensor_retain(t);
      node->saved_versions[i] = pre_versions[i];
    }
    node->call.inputs[i] = node->saved[i];
    dt__autograd_set_edge(node, i, t, NULL); /* a leaf is never slot 0: check_inplace refused it */
  }
  node->n_outputs = 1;
  dt__autograd_meta_of(self, &node->output_metas[0]);
  node->output_versions[0] = 0;
  if (dt__op_has_trait(call->op, DT_TRAIT_SAVES_OUTPUT)) {
    node->output_versions[0] = self->storage->version;
    dt_status st = dt__autograd_detached_alias(self, &node->outputs[0]);
    if (st) {
      dt__autograd_node_release(node);
      return st;
    }
  }
  *out = node;
  return DT_OK;
}

/* Rebase: t's history is now node (output 0), which consumes the caller's reference. t's meta
 * moves into the node's block: a meta in the previous node's block must not outlive that
 * node, which t no longer keeps alive. */
static void rebase(dt_autograd_node *node, dt_tensor *t) {
  dt_autograd_meta *old = meta_of(t);
  dt_autograd_node *previous = old ? old->grad_fn : NULL;
  if (previous && old->output_nr < previous->n_outputs &&
      previous->retain_meta[old->output_nr] == old) {
    previous->retain_meta[old->output_nr] = NULL;
  }
  dt_autograd_meta *meta;
  if (old) {
    meta = &node->metas[0];
    *meta = *old; /* the count of live metas is unchanged: the meta moved */
    meta->in_node = true;
    t->autograd = &meta->ext;
    if (!old->in_node) dt__free(old);
  } else {
    meta = dt__autograd_meta_in_node(t, node, 0);
  }
  if (meta->retains_grad) node->retain_meta[0] = meta;
  dt__autograd_attach_output(node, t, 0);
  dt__autograd_node_release(previous);
  dt__autograd_node_release(node); /* t holds it now */
}

/* An in-place op that ran on self, not a view of another tensor's storage: self's history is
 * rebased onto the op's node (which holds the previous one as edge 0). */
static dt_status record_inplace(dt_op_call *call, dt_tensor *old_self,
                                const uint32_t *pre_versions) {
  dt_autograd_node *node = NULL;
  dt_status st = inplace_node(call, old_self, pre_versions, &node);
  if (st) return st;
  st = unsave_self(node, call->inputs[0]);
  if (st) {
    dt__autograd_node_release(node);
    return st;
  }
  rebase(node, call->inputs[0]);
  return DT_OK;
}

/* Fills a fresh one-slot node as self's view-of-base node: the region (chain, consumed) of
 * base's history, whose node is base_fn (retained). It keeps base, to find it again, and the
 * storage's version, to tell when the view's history is stale (refresh_view). */
static void fill_view_of_base(dt_autograd_node *view, dt_tensor *base, dt_view_chain *chain,
                              dt_autograd_node *base_fn, dt_tensor *self) {
  memset(&view->call, 0, sizeof view->call);
  view->function = &dt__view_of_base_function;
  view->function_state = chain;
  view->saved[0] = dt_tensor_retain(base);
  view->saved_versions[0] = self->storage->version;
  dt__autograd_meta_of(base, &view->input_metas[0]);
  view->needs_grad[0] = true;
  view->edges[0].node = base_fn;
  view->edges[0].output_nr = 0;
  dt__autograd_node_retain(base_fn);
  view->n_outputs = 1;
  dt__autograd_meta_of(self, &view->output_metas[0]);
  view->output_versions[0] = 0;
}

dt_status dt__autograd_refresh_view(dt_tensor *t) {
  const dt_autograd_meta *m = meta_of(t);
  const dt_autograd_node *g = m ? m->grad_fn : NULL;
  if (!g || !is_view_node(g)) return DT_OK;
  /* Only views of t's storage whose version moved since the view was taken (or since its
   * view-of-base node was made) are stale. */
  if (g->saved_versions[0] == t->storage->version || !g->saved[0] ||
      g->saved[0]->storage != t->storage) {
    return DT_OK;
  }
  dt_tensor *base = NULL;
  dt_view_chain *chain = NULL;
  /* A view whose base cannot be found (a leaf, freed, distributed) keeps its history. */
  if (find_view_base(NULL, t, &base, &chain) || !base) return DT_OK;
  const dt_autograd_meta *bm = meta_of(base);
  dt_autograd_node *view = dt__autograd_node_alloc(1, 1, 0);
  if (!view) {
    dt__view_chain_free(chain);
    return dt__error(DT_ERR_NOMEM, "cannot allocate the autograd node of a view");
  }
  fill_view_of_base(view, base, chain, bm->grad_fn, t);
  view->edges[0].output_nr = bm->output_nr;
  rebase(view, t);
  return DT_OK;
}

/* An in-place op that ran on self, a view of base (chain: the view ops from base to self,
 * consumed). As PyTorch's CopySlices: base's history is rebased onto a copy-slices node
 * whose slot 0 is base's previous history and whose other slots are the op's other
 * arguments; it runs the op's node (inner, without edges of its own) on the region of the
 * gradient the view covers. Self's history becomes that region of base's new history (a
 * view-of-base node, which keeps base to find it again). */
static dt_status record_inplace_view(dt_op_call *call, dt_tensor *old_self,
                                     const uint32_t *pre_versions, dt_tensor *base,
                                     dt_view_chain *chain) {
  const dt_op_def *def = &dt__op_table[call->op];
  dt_tensor *self = call->inputs[0];
  dt_autograd_node *inner = NULL, *slices = NULL, *view = NULL;
  dt__copy_slices_state *state = NULL;
  dt_view_chain *view_chain = NULL;
  dt_status st = inplace_node(call, old_self, pre_versions, &inner);
  if (st) {
    dt__view_chain_free(chain);
    return st;
  }
  int n_slots = inner->n_slots;
  dt_tensor_meta base_meta;
  dt__autograd_meta_of(base, &base_meta);
  state = dt__calloc(sizeof *state);
  view_chain = dt__view_chain_copy(chain);
  st = view_chain ? DT_OK : DT_ERR_NOMEM;
  slices = st || !state ? NULL : dt__autograd_node_alloc(n_slots, 1, 0);
  view = slices ? dt__autograd_node_alloc(1, 1, 0) : NULL;
  if (!view) {
    dt__autograd_node_release(slices); /* a fresh node owns nothing yet */
    dt__free(state);
    dt__view_chain_free(chain);
    dt__view_chain_free(view_chain);
    dt__autograd_node_release(inner);
    return st ? st : dt__error(DT_ERR_NOMEM, "%s: cannot allocate its autograd nodes", def->name);
  }
  /* The copy-slices node takes the inner node's edges for slots 1..; slot 0 goes to the
   * base's previous history, the view's previous history is dropped. */
  state->chain = chain;
  state->inner = inner;
  memset(&slices->call, 0, sizeof slices->call);
  slices->function = &dt__copy_slices_function;
  slices->function_state = state;
  for (int i = 0; i < n_slots; i++) {
    slices->saved_versions[i] = 0;
    slices->input_metas[i] = inner->input_metas[i];
    if (i == 0) continue;
    slices->needs_grad[i] = inner->needs_grad[i];
    slices->edges[i] = inner->edges[i];
    if (slices->edges[i].to_leaf && !slices->edges[i].leaf) {
      slices->edges[i].leaf = dt_tensor_retain(inner->saved[i]);
    }
    memset(&inner->edges[i], 0, sizeof inner->edges[i]);
  }
  dt__autograd_node_release(inner->edges[0].node);
  memset(&inner->edges[0], 0, sizeof inner->edges[0]);
  slices->input_metas[0] = base_meta;
  slices->needs_grad[0] = true;
  dt__autograd_set_edge(slices, 0, base, NULL);
  slices->n_outputs = 1;
  slices->output_metas[0] = base_meta;
  slices->output_versions[0] = 0;
  /* Older nodes the new history reaches that saved base's or self's handle would close a
   * ring through those tensors' metas (unsave_self). */
  st = unsave_self(slices, base);
  if (!st) st = unsave_self(slices, self);
  if (st) {
    dt__view_chain_free(view_chain);
    dt__autograd_node_release(view);   /* a fresh node owns nothing yet */
    dt__autograd_node_release(slices); /* releases state: chain and inner */
    return st;
  }
  fill_view_of_base(view, base, view_chain, slices, self);
  rebase(slices, base);
  rebase(view, self);
  return DT_OK;
}

dt_status dt__autograd_dispatch(dt_op_call *call) {
  const dt_op_def *def = &dt__op_table[call->op];
  bool inplace = def->kind == DT_OP_KIND_INPLACE;
  bool distributed = false;
  bool recording = !dt__grad_disabled && !dt__op_has_trait(call->op, DT_TRAIT_NOT_DIFFERENTIABLE) &&
                   any_input_requires_grad(call, &distributed);
  dt_tensor *old_self = NULL, *view_base = NULL;
  dt_view_chain *view_chain = NULL;
  uint32_t pre_versions[DT_OP_MAX_INPUTS] = {0};
  if (recording && inplace) {
    dt_status st = check_inplace(call, def, &view_base, &view_chain);
    if (st) return st;
    bool others_need_grad = false;
    for (int i = 0; i < call->n_inputs && i < DT_OP_MAX_INPUTS; i++) {
      if (!call->inputs[i]) continue;
      /* Before the write: a view of self's storage is brought up to date while its version
       * still tells whether it is stale (self's own history is rebased below). */
      if (i > 0) {
        st = refresh_if_view(call->inputs[i]);
        if (st) {
          dt__view_chain_free(view_chain);
          return st;
        }
      }
      pre_versions[i] = call->inputs[i]->storage->version;
      others_need_grad |= i > 0 && requires_grad(call->inputs[i]);
    }
    if (others_need_grad && dt__op_has_trait(call->op, DT_TRAIT_SAVES_OLD_SELF)) {
      dt__grad_disabled = true;
      st = dt_clone(call->inputs[0], &old_self);
      dt__grad_disabled = false;
      if (st) {
        dt__view_chain_free(view_chain);
        return st;
      }
    }
  }
  if (!recording && inplace && !dt__grad_disabled && requires_grad(call->inputs[0])) {
    /* A NOT_DIFFERENTIABLE in-place op (uniform_) on a tensor that requires grad. */
    return dt__error(DT_ERR_UNSUPPORTED,
                     "%s: in-place op on a tensor that requires grad; run it under no_grad "
                     "(dt_grad_mode_set(false))",
                     def->name);
  }
  /* Out-of-place recorded ops learn which arguments the distributed dispatch redistributed
   * (dt_op_call.consumed): the node saves those as consumed. In-place ops save their
   * arguments as given (self is never redistributed; the others re-redistribute in the
   * backward). Only distributed arguments are ever redistributed. */
  dt_tensor *consumed[CONSUMED_SLOTS];
  int n_consumed = 0;
  if (recording && !inplace && distributed) {
    n_consumed = call->n_inputs + call->n_input_list;
    if (n_consumed > CONSUMED_SLOTS) n_consumed = CONSUMED_SLOTS;
    for (int i = 0; i < n_consumed; i++) consumed[i] = NULL;
    call->consumed = consumed;
    call->n_consumed = n_consumed;
  }
  dt_status st =
      DT_UNLIKELY(dt__modes_visible > 0) ? dt__dispatch_with_modes(call) : dt__dispatch_inner(call);
  call->consumed = NULL;
  call->n_consumed = 0;
  if (st) {
    for (int i = 0; i < n_consumed; i++) dt_tensor_release(consumed[i]);
    dt_tensor_release(old_self);
    dt__view_chain_free(view_chain);
    return st;
  }
  if (inplace) {
    /* Tensors saved for backward remember the version they had; a write bumps it. */
    call->inputs[0]->storage->version++;
    if (!recording || !dt_dtype_is_floating(call->inputs[0]->dtype)) {
      dt_tensor_release(old_self);
      dt__view_chain_free(view_chain);
      return DT_OK;
    }
    dt__grad_disabled = true;
    st = view_base ? record_inplace_view(call, old_self, pre_versions, view_base, view_chain)
                   : record_inplace(call, old_self, pre_versions);
    dt__grad_disabled = false;
    return st;
  }
  if (!recording) return DT_OK;
  /* An op that returned its input handle (dt_contiguous of a contiguous tensor) made nothing
   * new: the result carries the input's history, as PyTorch's contiguous returns self. A node
   * would rewrite that history and save the tensor that points at it (a cycle: a leak). */
  if (call->n_outputs == 1 && call->outputs[0] == call->inputs[0]) return DT_OK;
  /* Saving a detached alias must not itself be recorded. */
  dt__grad_disabled = true;
  st = record(call, consumed, n_consumed);
  dt__grad_disabled = false;
  for (int i = 0; i < n_consumed; i++) dt_tensor_release(consumed[i]); /* the ones not saved */
  if (st) {
    for (int k = 0; k < call->n_outputs; k++) {
      dt_tensor_release(call->outputs[k]);
      call->outputs[k] = NULL;
    }
  }
  return st;
}
