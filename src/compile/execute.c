/*
 * Running a dt_compile variant: the plan made once after the trace (last uses, buffers planned
 * by liveness for the nodes that call their kernel directly, the calls ready to copy), then
 * each call walking the nodes: direct kernel calls into planned buffers, distributed calls
 * on the shards when the trace decided their sharding, dispatch for the rest.
 */
#include <stdio.h>
#include <string.h>

#include "compile/compile_impl.h"
#include "kernels/kernel_table.h"
#include "dtensor/dist.h"

/* ---- Variants ---------------------------------------------------------------------------- */

/* Frees a variant: its graph's per-node facts and the buffers its plan made. Here, the bottom
 * file of the module, so that tracing (which discards a failed variant) and the handle both
 * call down. */
void dt__compile_variant_destroy(dt_compile_variant *v) {
  if (!v) return;
  int n = v->g ? v->g->n_nodes : 0;
  for (int i = 0; i < n; i++) {
    if (v->dims) dt__free(v->dims[i]);
    if (v->placements) dt__free(v->placements[i]);
    if (v->local_dims) dt__free(v->local_dims[i]);
    if (v->shape_expr) dt__free(v->shape_expr[i]);
    if (v->dist_spec && v->dist_spec[i]) dt__spec_release(v->dist_spec[i]);
    if (v->constants) dt_tensor_release(v->constants[i]);
    if (i < v->redist_cap) dt__free(v->redist[i]);
  }
  dt__free(v->redist);
  for (int i = 0; v->handles && i < n; i++) {
    /* Planned handles point into their slot's storage without holding it. */
    if (v->handles[i]) dt__free(v->handles[i]);
  }
  for (int k = 0; k < v->n_slots; k++) dt_tensor_release(v->slot_buf[k]);
  DT__FREE_EACH(v->handles, v->steps, v->release_at, v->release_list, v->fused, v->slot_buf,
                v->slot_bytes, v->slot_of, v->direct, v->view_direct, v->templates, v->dims,
                v->placements, v->local_dims, v->dist_plain, v->dist_mesh, v->dist_spec,
                v->mesh_ndim, v->constants, v->const_grad, v->scalar_expr, v->shape_expr,
                v->grad_input, v->grad_const, v->inputs, v->hints, v->guards, v->last_use,
                v->tuple_base, v->values, v->tuple_vals, v->owned, v->symvals, v->exprvals);
  dt__sx_pool_free(&v->pool);
  dt_graph_destroy(v->g);
  dt__free(v);
}

/* ---- Planning ------------------------------------------------------------------------------ */

/* Whether node i may run its kernel directly into a planned buffer: a single-output compute
 * op on local tensors whose infer (the one thing the direct path skips) only computes shapes
 * and dtypes from the inputs' geometry, which the guards and the symbolic dims already give.
 * Distributed nodes keep going through dispatch (sharding propagation). */
static bool direct_eligible(const dt_compile_variant *v, int i) {
  const dt_node *n = &v->g->nodes[i];
  if (n->kind != DT_NODE_CALL || n->is_tuple || n->n_out != 1 || n->has_list) return false;
  const dt_op_def *def = &dt__op_table[n->target];
  if (def->kind != DT_OP_KIND_COMPUTE || v->placements[i]) return false;
  for (int k = 0; k < n->n_inputs; k++) {
    if (n->inputs[k] >= 0 && v->placements[n->inputs[k]]) return false;
  }
  if (v->fused[i].folded) return false;
  dt_op_infer_fn f = def->infer;
  if (f == dt__infer_embedding) return v->templates[i].n_ints == 0;
  /* Sums and means (max and min refuse an empty dim in infer, so they keep dispatch). */
  if (f == dt__infer_reduce)
    return n->target == DT_OP_SUM || n->target == DT_OP_SUM_DIM || n->target == DT_OP_MEAN ||
           n->target == DT_OP_MEAN_DIM;
  return f == dt__infer_unary || f == dt__infer_binary || f == dt__infer_binary_scalar ||
         f == dt__infer_softmax || f == dt__infer_mm || f == dt__infer_matmul ||
         f == dt__infer_linear || f == dt__infer_same;
}

/* View calls whose strides run_view computes from the output's symbolic dims and the input's
 * geometry (compile/execute.c), local. */
static bool view_op(const dt_compile_variant *v, int i) {
  const dt_node *n = &v->g->nodes[i];
  if (n->kind != DT_NODE_CALL || n->n_inputs != 1 || n->inputs[0] < 0 || v->placements[i] ||
      v->placements[n->inputs[0]] || v->fused[i].folded)
    return false;
  switch ((dt_op)n->target) {
  case DT_OP_VIEW:
  case DT_OP_RESHAPE:
  case DT_OP_FLATTEN:
  case DT_OP_SQUEEZE:
  case DT_OP_SQUEEZE_DIM:
  case DT_OP_UNSQUEEZE:
  case DT_OP_EXPAND:
  case DT_OP_TRANSPOSE: return true;
  default: return false;
  }
}

/* Views made without dispatch (v->view_direct): a handle of the variant pointed at the input's
 * storage, which the input's lifetime covers (last uses follow views, dt__compile_plan). Only
 * views nobody outside the direct path reads: a kernel never keeps its inputs, while a
 * dispatched op may hand its input back as its result. From the last node back, so that a
 * view of a view qualifies; bad_reader: room for the node count, false on entry. */
static dt_status plan_views(dt_compile_variant *v, const bool *escapes, bool *bad_reader) {
  const dt_graph *g = v->g;
  int o = dt__graph_output_node(g);
  int roots = o < 0 ? 0 : g->nodes[o].n_list - v->n_grads; /* gradients: as planned values */
  for (int k = 0; k < roots; k++) bad_reader[g->nodes[o].list[k]] = true;
  for (int i = g->n_nodes - 1; i >= 0; i--) {
    const dt_node *nd = &g->nodes[i];
    if (!escapes[i] && !bad_reader[i] && view_op(v, i)) {
      dt_tensor *h = dt__calloc(sizeof *h);
      if (!h) return dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
      atomic_init(&h->refcount, 1);
      h->dtype = nd->types[0].dtype;
      h->ndim = nd->types[0].ndim;
      v->handles[i] = h;
      v->view_direct[i] = true;
      continue;
    }
    if (v->direct[i] || v->fused[i].folded || nd->kind == DT_NODE_OUTPUT) continue;
    for (int k = 0; k < nd->n_inputs; k++) {
      if (nd->inputs[k] >= 0) bad_reader[nd->inputs[k]] = true;
    }
    for (int k = 0; k < nd->n_list; k++) bad_reader[nd->list[k]] = true;
  }
  return DT_OK;
}

/* True for nodes whose value is (a view of) their first input's storage. */
static bool aliases_input(const dt_node *n) {
  if (n->kind == DT_NODE_GETITEM) return true;
  if (n->kind != DT_NODE_CALL) return false;
  dt_op_kind kind = dt__op_table[n->target].kind;
  return kind == DT_OP_KIND_VIEW || kind == DT_OP_KIND_INPLACE;
}

/* Whether node j's value is a reference the call owns (released after its last use). */
static bool owns_value(const dt_compile_variant *v, int j) {
  dt_node_kind k = v->g->nodes[j].kind;
  return (k == DT_NODE_CALL && !v->direct[j]) || k == DT_NODE_REDISTRIBUTE;
}

/* Buffers planned by liveness: each direct node that does not reach the outputs (where the
 * caller would keep its storage) writes into a slot's buffer, and a slot is reused once the
 * storage of its previous value (views included) is dead. Sizes are symbolic, so a slot's
 * buffer is sized on the call, growing when a larger size comes. */
static dt_status plan_buffers(dt_compile_variant *v) {
  const dt_graph *g = v->g;
  int n = g->n_nodes;
  int *storage_last = dt__alloc(sizeof(int) * (size_t)n);
  bool *escapes = dt__calloc(sizeof(bool) * (size_t)n);
  int *free_at = dt__alloc(sizeof(int) * (size_t)n);
  v->direct = dt__calloc(sizeof(bool) * (size_t)n);
  v->slot_of = dt__alloc(sizeof(int) * (size_t)n);
  v->handles = dt__calloc(sizeof(dt_tensor *) * (size_t)n);
  v->slot_buf = dt__calloc(sizeof(dt_tensor *) * (size_t)n);
  v->slot_bytes = dt__calloc(sizeof(size_t) * (size_t)n);
  dt_status st = DT_OK;
  if (!storage_last || !escapes || !free_at || !v->direct || !v->slot_of || !v->handles ||
      !v->slot_buf || !v->slot_bytes) {
    st = dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
    goto done;
  }
  /* Gradients are planned too: dt__compile_apply_grads reads them before the next call and
   * copies one it keeps (a planned handle is shared: the run's reference and the variant's). */
  dt__compile_escapes(v, false, escapes);
  for (int i = 0; i < n; i++) storage_last[i] = v->last_use[i];
  for (int i = n - 1; i >= 0; i--) {
    const dt_node *nd = &g->nodes[i];
    if (!aliases_input(nd) || nd->inputs[0] < 0) continue;
    int src = nd->inputs[0];
    if (storage_last[i] > storage_last[src]) storage_last[src] = storage_last[i];
  }
  for (int i = 0; i < n; i++) {
    v->slot_of[i] = -1;
    if (escapes[i] || !direct_eligible(v, i)) continue;
    int slot = -1;
    for (int k = 0; k < v->n_slots && slot < 0; k++) {
      if (free_at[k] < i) slot = k;
    }
    if (slot < 0) slot = v->n_slots++;
    free_at[slot] = storage_last[i];
    dt_tensor *h = dt__calloc(sizeof *h);
    if (!h) {
      st = dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
      goto done;
    }
    atomic_init(&h->refcount, 1);
    h->dtype = g->nodes[i].types[0].dtype;
    h->ndim = g->nodes[i].types[0].ndim;
    v->handles[i] = h;
    v->slot_of[i] = slot;
    v->direct[i] = true;
  }
  bool *bad_reader = dt__calloc(sizeof(bool) * (size_t)n);
  v->view_direct = dt__calloc(sizeof(bool) * (size_t)n);
  st = bad_reader && v->view_direct ? plan_views(v, escapes, bad_reader)
                                    : dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
  dt__free(bad_reader);
  if (st) goto done;
  v->steps = dt__calloc(sizeof *v->steps * (size_t)n);
  v->release_at = dt__calloc(sizeof(int) * (size_t)(n + 1));
  v->release_list = dt__calloc(sizeof(int) * (size_t)(n + 1));
  if (!v->steps || !v->release_at || !v->release_list) {
    st = dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
    goto done;
  }
  for (int i = 0; i < n; i++) {
    if (!v->direct[i]) continue;
    const dt_node *nd = &g->nodes[i];
    dt_compile_step *sp = &v->steps[i];
    sp->call = v->templates[i];
    sp->call.n_outputs = 1;
    sp->call.outputs = &v->handles[i];
    sp->handle = v->handles[i];
    sp->kernel = dt__cpu_kernels[nd->target]; /* compiled schedules run on the CPU */
    sp->ndim = nd->types[0].ndim;
    sp->slot = v->slot_of[i];
    sp->elem_size = dt__dtype_sizes[nd->types[0].dtype];
    memcpy(sp->dims, v->dims[i], sizeof sp->dims);
    sp->n_inputs = nd->n_inputs;
    sp->scalar_expr = v->scalar_expr[i];
    memcpy(sp->inputs, nd->inputs, sizeof sp->inputs);
    const dt_compile_fused *f = &v->fused[i];
    if (f->n_inputs > 0) { /* a rewrite (compile/fuse.c) */
      sp->n_inputs = f->n_inputs;
      memcpy(sp->inputs, f->inputs, sizeof(int) * (size_t)f->n_inputs);
    }
    if (f->kernel) {
      sp->kernel = f->kernel;
      sp->call.scalars[0] = f->scalar;
    }
  }
  /* Other calls keep their attributes as the caller gave them (dispatch infers again), ready
   * to copy: only the tensors change between calls. v->values is all NULL here. */
  for (int i = 0; i < n; i++) {
    const dt_node *nd = &g->nodes[i];
    if (nd->kind == DT_NODE_CALL && !v->direct[i] && !nd->has_list)
      dt__graph_build_call(g, i, v->values, NULL, NULL, &v->steps[i].call);
  }
  /* Values a call owns: those of calls that are not direct (tuples included). Each is
   * released after its last use. */
  for (int j = 0; j < n; j++) {
    if (owns_value(v, j)) v->release_at[v->last_use[j] + 1]++;
  }
  for (int i = 0; i < n; i++) v->release_at[i + 1] += v->release_at[i];
  for (int i = 0; i < n; i++) free_at[i] = v->release_at[i]; /* now each node's fill position */
  for (int j = 0; j < n; j++) {
    if (owns_value(v, j)) v->release_list[free_at[v->last_use[j]]++] = j;
  }
done:
  dt__free(storage_last);
  dt__free(escapes);
  dt__free(free_at);
  return st;
}

/* Last uses, tuple slots, planned buffers and the call-time scratch. */
dt_status dt__compile_plan(dt_compile_variant *v) {
  const dt_graph *g = v->g;
  size_t n = (size_t)g->n_nodes;
  int slots = 0;
  v->last_use = dt__alloc(sizeof(int) * n);
  v->tuple_base = dt__alloc(sizeof(int) * n);
  v->values = dt__calloc(sizeof(dt_tensor *) * n);
  v->owned = dt__calloc(sizeof(bool) * n);
  v->symvals = dt__calloc(sizeof(int64_t) * (size_t)(v->n_symbols + 1));
  v->exprvals = dt__calloc(sizeof(int64_t) * (size_t)(v->pool.n + 1));
  if (!v->last_use || !v->tuple_base || !v->values || !v->owned || !v->symvals || !v->exprvals)
    return dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
  dt_status st = dt__compile_fuse(v);
  if (st) return st;
  for (size_t i = 0; i < n; i++) {
    const dt_node *nd = &g->nodes[i];
    const dt_compile_fused *f = &v->fused[i];
    v->last_use[i] = (int)i;
    v->tuple_base[i] = nd->is_tuple ? slots : -1;
    if (nd->is_tuple) slots += nd->n_out;
    if (f->folded) continue; /* not run: reads nothing */
    int n_in = f->n_inputs > 0 ? f->n_inputs : nd->n_inputs;
    const int *ins = f->n_inputs > 0 ? f->inputs : nd->inputs;
    for (int k = 0; k < n_in; k++) {
      if (ins[k] >= 0 && v->last_use[ins[k]] < (int)i) v->last_use[ins[k]] = (int)i;
    }
    for (int k = 0; k < nd->n_list; k++) v->last_use[nd->list[k]] = (int)i;
  }
  /* A tuple lives as long as its last getitem's value, and a value as long as its views (a
   * direct view holds no reference to the storage). */
  for (int i = (int)n - 1; i >= 0; i--) {
    const dt_node *nd = &g->nodes[i];
    bool view = nd->kind == DT_NODE_CALL && dt__op_table[nd->target].kind == DT_OP_KIND_VIEW &&
                !v->fused[i].folded;
    if ((nd->kind == DT_NODE_GETITEM || view) && nd->inputs[0] >= 0 &&
        v->last_use[i] > v->last_use[nd->inputs[0]])
      v->last_use[nd->inputs[0]] = v->last_use[i];
  }
  v->tuple_vals = dt__calloc(sizeof(dt_tensor *) * (size_t)(slots + 1));
  if (!v->tuple_vals) return dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
  return plan_buffers(v);
}

/* ---- Running a variant ---------------------------------------------------------------------- */

static void release_value(dt_compile_variant *v, int j) {
  const dt_node *n = &v->g->nodes[j];
  if (v->owned[j]) dt_tensor_release(v->values[j]);
  v->owned[j] = false;
  v->values[j] = NULL;
  if (v->tuple_base[j] >= 0) {
    for (int k = 0; k < n->n_out; k++) {
      dt_tensor_release(v->tuple_vals[v->tuple_base[j] + k]);
      v->tuple_vals[v->tuple_base[j] + k] = NULL;
    }
  }
}

/* Runs a direct step: its output shape from the symbolic dims (evaluated by the guard
 * check), its buffer from its slot, then the kernel alone. */
static inline dt_status run_direct(dt_compile_variant *v, int i) {
  dt_compile_step *sp = &v->steps[i];
  dt_tensor *h = sp->handle;
  int64_t numel = 1;
  for (int d = sp->ndim - 1; d >= 0; d--) {
    h->shape[d] = v->exprvals[sp->dims[d]];
    h->strides[d] = numel;
    numel *= h->shape[d];
  }
  size_t bytes = (size_t)numel * sp->elem_size;
  int s = sp->slot;
  dt_tensor *buf = v->slot_buf[s];
  /* A buffer whose storage someone else holds (it should not happen: values that reach the
   * outputs are not planned) is left to them. */
  if (DT_UNLIKELY(!buf || v->slot_bytes[s] < bytes ||
                  atomic_load_explicit(&buf->storage->refcount, memory_order_relaxed) != 1)) {
    size_t want = bytes > v->slot_bytes[s] ? bytes : v->slot_bytes[s];
    if (want < 64) want = 64;
    dt_tensor *fresh = NULL;
    dt_status st = dt__tensor_new(1, (int64_t[]){(int64_t)want}, DT_U8, &fresh);
    if (st) return st;
    dt_tensor_release(buf);
    v->slot_buf[s] = buf = fresh;
    v->slot_bytes[s] = want;
  }
  h->storage = buf->storage;
  h->offset = 0; /* dt__tensor_new's data starts at its storage's */
  for (int k = 0; k < sp->n_inputs; k++)
    sp->call.inputs[k] = sp->inputs[k] >= 0 ? v->values[sp->inputs[k]] : NULL;
  if (DT_UNLIKELY(sp->scalar_expr >= 0)) sp->call.scalars[0] = (double)v->exprvals[sp->scalar_expr];
  dt_status st = sp->kernel(&sp->call);
  v->values[i] = h;
  return st;
}

static dt_status run_call(dt_compile_variant *v, int i);

/* Runs a direct view: the output's shape from the symbolic dims, its strides from the input's
 * (as the op's kernel computes them), the input's storage and offset; no handle is made. A
 * reshape the input's strides cannot express (it needs a copy) goes through dispatch. */
static dt_status run_view(dt_compile_variant *v, int i) {
  const dt_node *n = &v->g->nodes[i];
  const dt_tensor *x = v->values[n->inputs[0]];
  dt_tensor *h = v->handles[i];
  const int *dims = v->dims[i];
  for (int d = 0; d < h->ndim; d++) h->shape[d] = v->exprvals[dims[d]];
  if (n->target == DT_OP_TRANSPOSE) {
    memcpy(h->strides, x->strides, sizeof(int64_t) * (size_t)x->ndim);
    if (x->ndim > 0) {
      int d0 = (int)v->templates[i].ints[0], d1 = (int)v->templates[i].ints[1];
      h->strides[d0] = x->strides[d1];
      h->strides[d1] = x->strides[d0];
    }
  } else if (n->target == DT_OP_EXPAND) {
    for (int d = 0, lead = h->ndim - x->ndim; d < h->ndim; d++) {
      int j = d - lead;
      h->strides[d] = (j < 0 || x->shape[j] != h->shape[d]) ? 0 : x->strides[j];
    }
  } else if (!dt__view_strides(x->ndim, x->shape, x->strides, h->ndim, h->shape, h->strides)) {
    return run_call(v, i);
  }
  h->storage = x->storage;
  h->offset = x->offset;
  v->values[i] = h;
  return DT_OK;
}

/* The sizes a backward formula noted (compile_impl.h): this call's values of them. */
static inline void patch_sizes(const dt_compile_variant *v, int i, dt_op_call *call) {
  if (v->scalar_expr[i] >= 0) call->scalars[0] = (double)v->exprvals[v->scalar_expr[i]];
  const int *e = v->shape_expr[i];
  if (e) {
    for (int d = 0; d < call->n_ints; d++) {
      if (e[d] >= 0) call->ints[d] = v->exprvals[e[d]];
    }
    if (call->int_list) {
      call->int_list = call->ints;
      call->n_int_list = call->n_ints;
    }
  }
}

/* Node i's call at this call's values: a tensor-list call rebuilt into `list`, any other from
 * the step's prepared record; outputs into `outs`, the noted sizes patched in. On success
 * the caller frees `list`. */
static dt_status prepare_call(dt_compile_variant *v, int i, dt_call_list *list, dt_tensor **outs,
                              dt_op_call *call) {
  const dt_node *n = &v->g->nodes[i];
  if (n->has_list) {
    if (!dt__call_list_init(list, n->n_list))
      return dt__error(DT_ERR_NOMEM, "dt_compiled_call: out of memory");
    dt__graph_build_call(v->g, i, v->values, list->entries, outs, call);
  } else {
    dt__call_list_init(list, 0);
    *call = v->steps[i].call;
    for (int k = 0; k < n->n_inputs; k++)
      call->inputs[k] = n->inputs[k] >= 0 ? v->values[n->inputs[k]] : NULL;
    call->outputs = outs;
  }
  patch_sizes(v, i, call);
  return DT_OK;
}

static dt_status run_call(dt_compile_variant *v, int i) {
  const dt_node *n = &v->g->nodes[i];
  const dt_op_def *def = &dt__op_table[n->target];
  dt_call_list list;
  dt_tensor *outs[DT_OP_MAX_META] = {0};
  dt_op_call call;
  dt_status st = prepare_call(v, i, &list, outs, &call);
  if (st) return st;
  bool dist = false;
  for (int k = 0; k < call.n_inputs; k++) dist |= call.inputs[k] && call.inputs[k]->spec;
  for (int k = 0; k < call.n_input_list; k++) dist |= call.input_list[k]->spec != NULL;
  /* Past the argument checks, the modes and autograd: the trace checked the arguments and
   * guards hold them; a distributed call still goes through sharding propagation. */
  st = dist ? dt__dispatch_inner(&call) : dt__dispatch_local(&call);
  dt__call_list_free(&list);
  if (st) return st;
  if (def->kind == DT_OP_KIND_INPLACE) {
    v->values[i] = dt_tensor_retain(call.inputs[0]);
    v->owned[i] = true;
  } else if (n->is_tuple) {
    if (call.n_outputs != n->n_out) {
      for (int k = 0; k < call.n_outputs; k++) dt_tensor_release(outs[k]);
      return dt__error(DT_ERR_INTERNAL, "%s gave %d results, the trace had %d", def->name,
                       call.n_outputs, n->n_out);
    }
    memcpy(v->tuple_vals + v->tuple_base[i], outs, sizeof(dt_tensor *) * (size_t)n->n_out);
  } else {
    v->values[i] = outs[0];
    v->owned[i] = true;
  }
  return DT_OK;
}

/* Runs a distributed call whose sharding the trace decided: the op on this rank's shards
 * (their local geometry) and the output wrapped with the traced placements and the global
 * shape the symbolic dims give; no propagation, no sharding-cache lookup. Empty tensors go
 * through dispatch (sharding choices may differ for them). */
static dt_status run_dist_plain(dt_compile_variant *v, int i) {
  const dt_node *n = &v->g->nodes[i];
  for (int k = 0; k < n->n_inputs + n->n_list; k++) { /* the inputs, then the tensor list */
    int j = k < n->n_inputs ? n->inputs[k] : n->list[k - n->n_inputs];
    const dt_tensor *x = j >= 0 ? v->values[j] : NULL;
    if (!x) continue;
    /* An input placed otherwise than in the trace (a value dispatch planned differently at
     * this size) or empty: dispatch decides. */
    if (!x->spec || !v->placements[j] || dt__numel(x->spec->ndim, x->spec->shape) == 0 ||
        !dt__placements_equal(x->spec->mesh_ndim, x->spec->placements, v->placements[j]))
      return run_call(v, i);
  }
  /* A tensor-list call's elements are placed by its redistribute nodes. */
  dt_tensor *outs[DT_OP_MAX_META] = {0};
  dt_call_list list;
  dt_op_call call;
  dt_status st = prepare_call(v, i, &list, outs, &call);
  if (st) return st;
  st = dt__dispatch_local(&call);
  dt__call_list_free(&list);
  if (st) {
    dt__error_prefix("on this rank's shard"); /* as dispatch says it: shapes are local */
    return st;
  }
  dt_tensor *o = outs[0];
  if (o->spec) { /* an input handed back (to() of its own dtype): a new handle */
    dt_tensor *fresh = NULL;
    st = dt__local_view(o, &fresh);
    dt_tensor_release(o);
    if (st) return st;
    o = fresh;
  }
  const dt_value_type *t = &n->types[0];
  int64_t shape[DT_MAX_DIMS];
  for (int d = 0; d < t->ndim; d++) shape[d] = v->exprvals[v->dims[i][d]];
  dt_dist_spec *spec = v->dist_spec[i];
  if (!spec || memcmp(spec->shape, shape, sizeof(int64_t) * (size_t)t->ndim) != 0) {
    dt_dist_spec *made = NULL;
    st = dt__spec_create(v->dist_mesh[i], v->placements[i], t->ndim, shape, t->dtype, &made);
    if (st) {
      dt_tensor_release(o);
      return st;
    }
    if (spec) dt__spec_release(spec);
    v->dist_spec[i] = spec = made;
  }
  o->spec = dt__spec_retain(spec);
  v->values[i] = o;
  v->owned[i] = true;
  return DT_OK;
}

dt_status dt__compile_run(dt_compile_variant *v, dt_tensor *const *in, int n_out, dt_tensor **out,
                          dt_tensor **grads) {
  const dt_graph *g = v->g;
  int input_index = 0;
  dt_status st = DT_OK;
  for (int i = 0; i < g->n_nodes; i++) {
    if (v->direct[i]) { /* the common case first, without reading the node */
      st = run_direct(v, i);
    } else if (v->view_direct[i]) {
      st = run_view(v, i);
    } else if (!v->fused[i].folded) {
      const dt_node *n = &g->nodes[i];
      switch (n->kind) {
      case DT_NODE_PLACEHOLDER: v->values[i] = in[input_index++]; break;
      case DT_NODE_PARAMETER:
      case DT_NODE_BUFFER: v->values[i] = v->constants[i]; break;
      case DT_NODE_GETITEM:
        v->values[i] = v->tuple_vals[v->tuple_base[n->inputs[0]] + n->ints[0]];
        break;
      case DT_NODE_CALL: st = v->dist_plain[i] ? run_dist_plain(v, i) : run_call(v, i); break;
      case DT_NODE_REDISTRIBUTE: st = dt__compile_run_redistribute(v, i); break;
      case DT_NODE_COMM:
        st = dt__error(DT_ERR_INTERNAL, "dt_compiled_call: a communication node");
        break;
      case DT_NODE_OUTPUT:
        for (int k = 0; k < n_out; k++) out[k] = dt_tensor_retain(v->values[n->list[k]]);
        for (int k = 0; k < v->n_grads; k++)
          grads[k] = dt_tensor_retain(v->values[n->list[n_out + k]]);
        break;
      }
    }
    if (DT_UNLIKELY(st)) {
      char prefix[200];
      snprintf(prefix, sizeof prefix, "dt_compiled_call: node %%%s", g->nodes[i].name);
      dt__error_prefix(prefix);
      break;
    }
    for (int k = v->release_at[i]; k < v->release_at[i + 1]; k++)
      release_value(v, v->release_list[k]);
  }
  if (!st) return DT_OK; /* every owned value was released after its last use */
  for (int i = 0; i < g->n_nodes; i++) {
    if (v->owned[i] || (v->tuple_base[i] >= 0 && v->tuple_vals[v->tuple_base[i]]))
      release_value(v, i);
  }
  dt__tensors_clear(out, n_out);
  dt__tensors_clear(grads, v->n_grads);
  return st;
}
