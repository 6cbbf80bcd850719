/*
 * Tracing for dt_compile: the compiled function runs eagerly under the tracer export uses too
 * (graph/tracer.c), which records every op call (attributes as the caller gave them) as a call
 * node of a dt_graph, tensors recognized by identity; tensors the trace has not seen become
 * constants. This file is compile's part (the tracer's hooks): each recorded value also gets its
 * dims as symbolic expressions (compile/shape_rules.c), checked against the traced sizes, and
 * the guards the rules assumed; sizes the function reads as numbers are pinned. The variant
 * made is planned for running by compile/execute.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "autograd/size_note.h"
#include "compile/compile_impl.h"
#include "distributed/dist_impl.h"
#include "dtensor/autograd.h"
#include "dtensor/dist.h"
#include "dtensor/mesh.h"
#include "dtensor/ops.h"
#include "graph/tracer_impl.h"

/* ---- Tracing ------------------------------------------------------------------------------ */

typedef struct tracer {
  dt_tracer base; /* first: the hooks get &base */
  dt_compile_variant *v;
  bool joint;        /* options.backward: ops on tensors that require grad are traced */
  dt_size_note note; /* the size note of the call being recorded (autograd/size_note.h) */
  int node_cap;
  bool in_backward;       /* the joint trace's backward is running */
  int backward_constants; /* tensors it read that no traced op made */
  dt_shape_cache *cache;  /* NULL with options.no_shape_cache */
  int64_t cache_hits;
  /* The call being recorded: dispatch reports the arguments it redistributes in
   * call->consumed, autograd's slots when it records the call, else these (own). */
  dt_tensor *consumed[DT_DIST_MAX_ARGS];
  bool own;
} tracer;

static dt_value_entry *lookup(tracer *tr, const dt_tensor *x) {
  return dt__tracer_lookup(&tr->base, x);
}

static dt_status map_tensor(tracer *tr, dt_tensor *x, int node, int item) {
  return dt__tracer_map(&tr->base, x, node, item);
}

/* Node i's value k: its type, symbolic dims (NULL: constants of its shape) and placements. */
static dt_status set_value(tracer *tr, int i, int k, const dt_tensor *x, const int *sdims) {
  dt_compile_variant *v = tr->v;
  dt_status st = dt__compile_grow_nodes(v, &tr->node_cap);
  if (st) return st;
  dt_node *n = &v->g->nodes[i];
  if (!v->dims[i]) {
    v->dims[i] = dt__calloc(sizeof(int) * DT_MAX_DIMS * (size_t)(n->n_out ? n->n_out : 1));
    if (!v->dims[i]) return dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
  }
  dt_value_type *t = &n->types[k];
  dt__tracer_type_of(t, x);
  int *dims = v->dims[i] + k * DT_MAX_DIMS;
  for (int d = 0; d < t->ndim; d++) {
    dims[d] = sdims ? sdims[d] : dt__sx_const(&v->pool, t->shape[d]);
    const dt_sx_node *e = &v->pool.nodes[dims[d]];
    t->sym[d] = (int8_t)(e->kind == DT_SX_SYM && e->v < DT_GRAPH_MAX_SYMBOLS ? e->v : DT_NO_SYMBOL);
  }
  if (x->spec && k == 0) {
    v->placements[i] = dt__alloc(sizeof(dt_placement) * DT_MESH_MAX_DIMS);
    if (!v->placements[i]) return dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
    memcpy(v->placements[i], x->spec->placements, sizeof(dt_placement) * DT_MESH_MAX_DIMS);
    v->mesh_ndim[i] = x->spec->mesh_ndim;
    dt_status st2 = dt__compile_set_local_dims(v, i, x, dims);
    if (st2) return st2;
  }
  if (v->pool.oom) return dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
  return DT_OK;
}

/* A new node of one value standing for x (dims as set_value takes them); *node its index. */
static dt_status add_value_node(tracer *tr, dt_node_kind kind, const char *name, dt_tensor *x,
                                const int *sdims, int *node) {
  dt_graph *g = tr->v->g;
  int i = dt__graph_add_node(g, kind, name);
  if (i < 0) return dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
  dt_status st = dt__graph_node_types(g, i, 1);
  if (!st) st = set_value(tr, i, 0, x, sdims);
  if (!st) st = map_tensor(tr, x, i, -1);
  *node = i;
  return st;
}

/* A traced value x is an alias of (another handle on the same elements: autograd saves a
 * detached alias of each output for its formula), or NULL. */
static dt_value_entry *alias_of(tracer *tr, const dt_tensor *x) {
  for (int k = tr->base.map.n - 1; k >= 0; k--) {
    dt_value_entry *e = &tr->base.map.entries[k];
    const dt_tensor *t = e->tensor;
    if (t->storage != x->storage || t->offset != x->offset || t->dtype != x->dtype ||
        t->ndim != x->ndim || (t->spec != NULL) != (x->spec != NULL))
      continue;
    if (memcmp(t->shape, x->shape, sizeof(int64_t) * (size_t)x->ndim) != 0 ||
        memcmp(t->strides, x->strides, sizeof(int64_t) * (size_t)x->ndim) != 0)
      continue;
    if (t->spec &&
        (t->spec->ndim != x->spec->ndim || t->spec->mesh_id != x->spec->mesh_id ||
         !dt__placements_equal(t->spec->mesh_ndim, t->spec->placements, x->spec->placements) ||
         memcmp(t->spec->shape, x->spec->shape, sizeof(int64_t) * (size_t)t->spec->ndim) != 0))
      continue;
    return e;
  }
  return NULL;
}

/* A tensor the trace has not seen (dt__tracer_value): in a joint trace an alias of a traced
 * value is that value; else it becomes a constant of the variant. */
static dt_status unseen(dt_tracer *base, dt_tensor *x) {
  tracer *tr = (tracer *)base;
  dt_compile_variant *v = tr->v;
  dt_value_entry *e = tr->joint ? alias_of(tr, x) : NULL;
  if (e) {
    dt_value_entry found = *e;
    return map_tensor(tr, x, found.node, found.item);
  }
  if (tr->in_backward && tr->backward_constants++ > 0) {
    /* The traced backward reads a tensor no traced op made (dt_backward's seed of ones is the
     * first one): autograd saved a value dispatch made for the forward (a redistributed
     * argument). It would be a constant of this trace, with this call's values. */
    return dt__error(DT_ERR_UNSUPPORTED,
                     "dt_compiled_call: the traced backward reads a %s tensor that no traced op "
                     "made (saved by autograd: a value dispatch made outside the op table); its "
                     "values would be constants of the trace",
                     x->spec ? "distributed" : "local");
  }
  char name[48];
  dt__tracer_constant_name(base, name, sizeof name);
  int i = -1;
  dt_status st = add_value_node(tr, DT_NODE_BUFFER, name, x, NULL, &i);
  if (st) return st;
  v->constants[i] = dt_tensor_retain(x);
  v->const_grad[i] = x->autograd && dt_tensor_requires_grad(x);
  return DT_OK;
}

/* A getitem of tuple node src: item's symbolic dims. */
static dt_status getitem(dt_tracer *base, int i, int src, int item, dt_tensor *x) {
  tracer *tr = (tracer *)base;
  return set_value(tr, i, 0, x, tr->v->dims[src] + item * DT_MAX_DIMS);
}

static dt_status value_of(tracer *tr, dt_tensor *x, int *node) {
  return dt__tracer_value(&tr->base, x, node);
}

/* The symbolic dims of node i: the op's rule when it has one and it agrees with the traced
 * sizes; otherwise the node is specialized (its symbolic input sizes guarded to their traced
 * values, its outputs constants). */
static dt_status infer_symbolic(tracer *tr, int i, const dt_op_call *given, const dt_op_call *done,
                                const int *size_exprs, const dt_tensor_meta *metas, int n_out,
                                int (*out)[DT_MAX_DIMS], bool *inferred) {
  dt_compile_variant *v = tr->v;
  const dt_node *n = &v->g->nodes[i];
  dt_shape_ctx *c = dt__calloc(sizeof *c);
  if (!c) return dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
  c->pool = &v->pool;
  c->symbols = v->hints;
  c->given = given;
  c->done = done;
  c->size_exprs = size_exprs;
  c->n_out = n_out;
  c->metas = metas;
  int n_args = n->n_inputs + n->n_list;
  bool fits = n_args <= (int)(sizeof c->arg_dims / sizeof c->arg_dims[0]);
  for (int k = 0; k < n_args && fits; k++) {
    int j = k < n->n_inputs ? n->inputs[k] : n->list[k - n->n_inputs];
    c->arg_dims[k] = j >= 0 ? v->dims[j] : NULL;
    c->arg_ndim[k] = j >= 0 ? v->g->nodes[j].types[0].ndim : 0;
  }
  c->n_args = fits ? n_args : 0;
  dt_shape_outcome hit;
  bool ok;
  if (fits && dt__shape_cache_find(tr->cache, c, &hit)) { /* an equal call: the same outcome */
    ok = hit.ok;
    memcpy(c->out_dims, hit.out_dims, sizeof c->out_dims);
    c->n_guards = hit.n_guards;
    if (hit.n_guards) memcpy(c->guards, hit.guards, sizeof(dt_guard) * (size_t)hit.n_guards);
    tr->cache_hits++;
  } else {
    ok = fits && dt__shape_rule(c) && !v->pool.oom;
    /* The rule must give the traced sizes at the traced symbol values. */
    for (int k = 0; k < n_out && ok; k++) {
      for (int d = 0; d < metas[k].ndim && ok; d++)
        ok = dt__sx_eval(&v->pool, c->out_dims[k][d], v->hints) == metas[k].shape[d];
    }
    for (int g = 0; g < c->n_guards && ok; g++) {
      const dt_guard *gd = &c->guards[g];
      int64_t a = dt__sx_eval(&v->pool, gd->a, v->hints);
      if (gd->kind == DT_GUARD_EQ) ok = a == dt__sx_eval(&v->pool, gd->b, v->hints);
      if (gd->kind == DT_GUARD_DIVISIBLE) ok = gd->c > 0 && a % gd->c == 0;
      if (gd->kind == DT_GUARD_GE) ok = a >= gd->c;
    }
    if (fits && tr->cache && !v->pool.oom) {
      dt_shape_outcome made = {.ok = ok, .n_guards = ok ? c->n_guards : 0, .guards = c->guards};
      memcpy(made.out_dims, c->out_dims, sizeof made.out_dims);
      dt__shape_cache_add(tr->cache, c, &made);
    }
  }
  dt_status st = DT_OK;
  *inferred = ok;
  if (ok) {
    for (int g = 0; g < c->n_guards && !st; g++) st = dt__compile_add_guard(v, &c->guards[g]);
    for (int k = 0; k < n_out; k++) memcpy(out[k], c->out_dims[k], sizeof out[k]);
  } else {
    for (int k = 0; k < n_args && !st; k++) {
      if (!c->arg_dims[k]) continue;
      for (int d = 0; d < c->arg_ndim[k] && !st; d++) {
        char why[96];
        snprintf(why, sizeof why, "%s: specialized (no symbolic shape rule) at dim %d",
                 dt__op_table[done->op].name, d);
        st = dt__compile_pin(v, c->arg_dims[k][d], why);
      }
    }
    for (int k = 0; k < n_out; k++) {
      for (int d = 0; d < metas[k].ndim; d++) out[k][d] = dt__sx_const(&v->pool, metas[k].shape[d]);
    }
  }
  dt__free(c);
  if (!st && v->pool.oom) st = dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
  return st;
}

/* The traced node of a tensor a size note names, or -1 (an untraced tensor is a constant:
 * its sizes are too). */
static int noted_node(tracer *tr, const dt_tensor *x) {
  dt_value_entry *e = lookup(tr, x);
  if (!e) e = alias_of(tr, x);
  return e && e->item < 0 ? e->node : -1;
}

/* Guards node j's symbolic dims to their traced values: a size note that cannot be followed
 * specializes, as a call without a shape rule does. */
static dt_status specialize_dims(tracer *tr, int j, const char *why) {
  dt_compile_variant *v = tr->v;
  dt_status st = DT_OK;
  for (int d = 0; d < v->g->nodes[j].types[0].ndim && !st; d++) {
    char text[96];
    snprintf(text, sizeof text, "%s: specialized size at dim %d", why, d);
    st = dt__compile_pin(v, v->dims[j][d], text);
  }
  return st;
}

/* A backward formula reuses its forward call's scalar (size_note.h: scalar_input): the traced
 * calls of that op on that input with the same number are the candidates. When they agree on
 * one expression (a constant when none had one) this call takes it; when they disagree each
 * expression is guarded to its traced value (a recompile, never a wrong number). */
static dt_status reuse_scalar(tracer *tr, int i, const dt_op_call *given, const char *name) {
  dt_compile_variant *v = tr->v;
  int j = noted_node(tr, tr->note.scalar_input);
  if (j < 0) return DT_OK;
  int expr = -2; /* -2: no candidate yet; -1: a constant scalar */
  bool ambiguous = false;
  for (int m = i - 1; m >= 0; m--) {
    const dt_node *n = &v->g->nodes[m];
    if (n->kind != DT_NODE_CALL || n->target != tr->note.scalar_op || n->n_inputs < 1 ||
        n->inputs[0] != j || n->scalars[0] != given->scalars[0])
      continue;
    if (expr == -2)
      expr = v->scalar_expr[m];
    else if (expr != v->scalar_expr[m])
      ambiguous = true;
  }
  if (expr < 0) return DT_OK;
  if (!ambiguous) {
    v->scalar_expr[i] = expr;
    return DT_OK;
  }
  dt_status st = DT_OK;
  for (int m = i - 1; m >= 0 && !st; m--) {
    const dt_node *n = &v->g->nodes[m];
    int e = v->scalar_expr[m];
    if (n->kind != DT_NODE_CALL || n->target != tr->note.scalar_op || n->n_inputs < 1 ||
        n->inputs[0] != j || e < 0)
      continue;
    char why[96];
    snprintf(why, sizeof why, "%s: a backward's scalar from one of several forward calls", name);
    st = dt__compile_pin(v, e, why);
  }
  return st;
}

/* A backward formula said where a scalar of this call came from (size_note.h): it becomes an
 * expression of the symbols, set again on each call. */
static dt_status apply_size_note(tracer *tr, int i, const dt_op_call *given) {
  dt_compile_variant *v = tr->v;
  const char *name = dt__op_table[given->op].name;
  if (tr->note.scalar_input) return reuse_scalar(tr, i, given, name);
  int j = noted_node(tr, tr->note.count_of);
  if (j < 0) return DT_OK;
  int e = dt__sx_const(&v->pool, 1);
  for (int d = 0; d < v->g->nodes[j].types[0].ndim; d++) {
    if (tr->note.count_mask & (1u << d)) e = dt__sx_mul(&v->pool, e, v->dims[j][d]);
  }
  if (v->pool.oom) return dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
  if ((double)dt__sx_eval(&v->pool, e, v->hints) == given->scalars[0]) {
    v->scalar_expr[i] = e;
    return DT_OK;
  }
  return specialize_dims(tr, j, name);
}

/* A backward formula said which sizes entries of this call's shape attribute are (size_note.h:
 * shape_of, sizes_of): exprs[k] gets entry k's expression (-1: the number given), *noted true.
 * The shape rule reads them, and a call sets the attribute again from the symbols. A note that
 * does not match the numbers given specializes the noted value's dims. */
static dt_status note_sizes(tracer *tr, const dt_op_call *given, int *exprs, bool *noted) {
  dt_compile_variant *v = tr->v;
  const dt_tensor *of = tr->note.shape_of ? tr->note.shape_of : tr->note.sizes_of;
  int j = noted_node(tr, of);
  *noted = false;
  if (j < 0) return DT_OK; /* an untraced tensor is a constant: so are its sizes */
  const dt_value_type *t = &v->g->nodes[j].types[0];
  bool ok = given->n_ints <= DT_MAX_DIMS && (!tr->note.shape_of || given->n_ints == t->ndim);
  for (int k = 0; k < given->n_ints && ok; k++) {
    int d = tr->note.shape_of ? k : tr->note.size_dim[k] - 1;
    exprs[k] = -1;
    if (d < 0) continue;
    ok = d < t->ndim && given->ints[k] == t->shape[d];
    if (ok) exprs[k] = v->dims[j][d];
  }
  if (!ok) return specialize_dims(tr, j, dt__op_table[given->op].name);
  *noted = true;
  return DT_OK;
}

/* Keeps the expressions of node i's shape attribute (note_sizes) for the calls. */
static dt_status keep_size_exprs(dt_compile_variant *v, int i, const dt_op_call *given,
                                 const int *exprs) {
  v->shape_expr[i] = dt__alloc(sizeof(int) * DT_MAX_DIMS);
  if (!v->shape_expr[i]) return dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
  memcpy(v->shape_expr[i], exprs, sizeof(int) * (size_t)given->n_ints);
  return DT_OK;
}

/* Tensor argument k of call as dispatch numbers them: the inputs, then the tensor list. */
static dt_tensor *arg_at(const dt_op_call *call, int k) {
  return k < call->n_inputs ? call->inputs[k] : call->input_list[k - call->n_inputs];
}

/* The arguments dispatch redistributed for the call (dt_op_call.consumed: the inputs, then the
 * tensor list) become redistribute nodes, which the call then reads: call->inputs[k], or the
 * element of *list (a copy of the caller's tensor list that the trace owns; the caller frees
 * it) becomes the redistributed tensor, so that autograd's saved copy is a traced value.
 * arg_nodes gets each argument's own node, in the same numbering. */
static dt_status add_redistributions(tracer *tr, dt_op_call *call, const dt_op_call *done,
                                     int *arg_nodes, dt_tensor ***list) {
  int n_args = call->n_inputs + call->n_input_list;
  int n = done->n_consumed < n_args ? done->n_consumed : n_args;
  int nodes[DT_DIST_MAX_ARGS], any = 0;
  for (int k = 0; k < n; k++) any |= done->consumed[k] != NULL;
  if (!any) return DT_OK;
  if (n_args > DT_DIST_MAX_ARGS) /* dispatch takes no more */
    return dt__error(DT_ERR_INTERNAL, "dt_compile: %d redistributed arguments", n_args);
  dt_status st = DT_OK;
  for (int k = 0; k < n_args && !st; k++) {
    nodes[k] = -1;
    if (arg_at(call, k)) st = value_of(tr, arg_at(call, k), &nodes[k]);
  }
  if (st) return st;
  if (call->n_input_list > 0) {
    *list = dt__alloc(sizeof **list * (size_t)call->n_input_list);
    if (!*list) return dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
    memcpy(*list, call->input_list, sizeof **list * (size_t)call->n_input_list);
    call->input_list = *list;
  }
  memcpy(arg_nodes, nodes, sizeof(int) * (size_t)n_args);
  for (int k = 0; k < n && !st; k++) {
    dt_tensor *r = done->consumed[k], *x = arg_at(call, k);
    if (!r || !x || !x->spec) continue;
    int node = -1;
    st = dt__compile_add_redistribute(tr->v, nodes[k], x, r, &node);
    if (!st) st = set_value(tr, node, 0, r, tr->v->dims[nodes[k]]);
    if (!st) st = map_tensor(tr, r, node, -1);
    if (k < call->n_inputs)
      call->inputs[k] = r;
    else
      (*list)[k - call->n_inputs] = r;
  }
  return st;
}

/* Records one call; *list receives the trace's copy of the call's tensor list when an element
 * of it was redistributed (the caller frees it once the call is recorded). */
static dt_status record_call(tracer *tr, const dt_op_call *caller, const dt_op_call *done,
                             dt_tensor ***list) {
  dt_compile_variant *v = tr->v;
  const dt_op_def *def = &dt__op_table[caller->op];
  bool inplace = def->kind == DT_OP_KIND_INPLACE;
  int n_out = 0, i = -1;
  dt_op_call call = *caller, *given = &call;
  int redist[DT_DIST_MAX_ARGS];
  redist[0] = -2; /* -2: no redistribution; else the arguments' nodes, inputs then list */
  dt_status st =
      !inplace && done->consumed ? add_redistributions(tr, &call, done, redist, list) : DT_OK;
  if (!st) st = dt__tracer_record_call(&tr->base, given, done, &n_out, &i);
  if (!st) st = dt__compile_grow_nodes(v, &tr->node_cap);
  if (st) return st;
  dt_tensor_meta metas[DT_OP_MAX_META];
  for (int k = 0; k < n_out; k++) {
    dt_tensor *x = inplace ? given->inputs[0] : done->outputs[k];
    dt_value_type t;
    dt__tracer_type_of(&t, x);
    dt__meta_set(&metas[k], t.dtype, t.ndim, t.shape);
  }
  /* The call as infer left it (normalized dims, result dtype), without its tensors. */
  dt_op_call *tp = &v->templates[i];
  *tp = *done;
  memset(tp->inputs, 0, sizeof tp->inputs);
  tp->input_list = NULL;
  tp->n_input_list = 0;
  tp->int_list = NULL;
  tp->n_int_list = 0;
  tp->outputs = NULL;
  int sdims[DT_OP_MAX_META][DT_MAX_DIMS], exprs[DT_MAX_DIMS];
  bool noted = false, inferred = false;
  if (tr->note.shape_of || tr->note.sizes_of) st = note_sizes(tr, given, exprs, &noted);
  if (!st)
    st = infer_symbolic(tr, i, given, done, noted ? exprs : NULL, metas, n_out, sdims, &inferred);
  if (!st && noted && inferred) st = keep_size_exprs(v, i, given, exprs);
  /* Redistributions are pinned over the sizes where the sharding choice stays (guards). */
  bool unplanned = false;
  if (!st && redist[0] != -2)
    st = dt__compile_guard_choice(v, caller, redist, dt__compile_add_guard, &unplanned);
  for (int k = 0; k < caller->n_inputs + caller->n_input_list && unplanned && !st; k++)
    if (redist[k] >= 0) st = specialize_dims(tr, redist[k], "redistribute: no planned choice");
  if (!st && (tr->note.count_of || tr->note.scalar_input)) st = apply_size_note(tr, i, given);
  bool tuple = v->g->nodes[i].is_tuple;
  for (int k = 0; k < n_out && !st; k++) {
    dt_tensor *x = inplace ? given->inputs[0] : done->outputs[k];
    st = set_value(tr, i, k, x, sdims[k]);
    if (!st) st = map_tensor(tr, x, i, tuple ? k : -1);
  }
  /* A distributed call that runs on its shards as they are: decided now, for every call. */
  dt_placement out_pl[DT_MESH_MAX_DIMS];
  const dt_tensor *y = n_out == 1 && !inplace && !tuple ? done->outputs[0] : NULL;
  bool plain = !st && y && y->spec && dt__compile_dist_plain(given, out_pl);
  /* A tensor-list call whose elements were redistributed: the choice its guards pin takes the
   * redistributed values as they are, so the op runs on their shards without dispatch moving
   * them again. */
  if (!st && y && y->spec && !plain && caller->n_input_list > 0 && redist[0] != -2 && !unplanned)
    plain = dt__compile_dist_pinned(caller, given, out_pl);
  if (plain && dt__placements_equal(y->spec->mesh_ndim, out_pl, y->spec->placements)) {
    v->dist_plain[i] = true;
    v->dist_mesh[i] = y->spec->mesh;
  }
  return st;
}

static dt_status record(dt_tracer *base, const dt_op_call *given, const dt_op_call *done) {
  dt_tensor **list = NULL;
  dt_status st = record_call((tracer *)base, given, done, &list);
  dt__free(list);
  return st;
}

static bool any_requires_grad(const dt_op_call *call) {
  for (int k = 0; k < call->n_inputs; k++) {
    if (call->inputs[k] && call->inputs[k]->autograd && dt_tensor_requires_grad(call->inputs[k]))
      return true;
  }
  for (int k = 0; k < call->n_input_list; k++) {
    if (call->input_list[k]->autograd && dt_tensor_requires_grad(call->input_list[k])) return true;
  }
  return false;
}

/* Before a call runs: its size note (for this call only), the refusal of autograd inside the
 * function, and the slots where dispatch reports what it redistributes. */
static void before(dt_tracer *base, dt_op_call *call) {
  tracer *tr = (tracer *)base;
  tr->note = dt__size_note;
  dt__size_note = (dt_size_note){0};
  if (!base->error && !tr->joint && dt_grad_mode_enabled() && any_requires_grad(call)) {
    base->error =
        dt__error(DT_ERR_UNSUPPORTED,
                  "dt_compiled_call: %s of a tensor that requires grad with grad mode turned on "
                  "inside the compiled function (a call is recorded for autograd as a whole: "
                  "turn grad mode on around the call, or compile with options.backward)",
                  dt__op_table[call->op].name);
  }
  tr->own = !call->consumed && dt__op_table[call->op].kind != DT_OP_KIND_INPLACE;
  if (tr->own) { /* the inputs, then the tensor list (dispatch takes DT_DIST_MAX_ARGS at most) */
    int n_args = call->n_inputs + call->n_input_list;
    memset(tr->consumed, 0, sizeof tr->consumed);
    call->consumed = tr->consumed;
    call->n_consumed = n_args < DT_DIST_MAX_ARGS ? n_args : DT_DIST_MAX_ARGS;
  }
}

static void after(dt_tracer *base, dt_op_call *call) {
  tracer *tr = (tracer *)base;
  tr->note = (dt_size_note){0};
  if (!tr->own) return;
  for (int k = 0; k < call->n_consumed; k++) dt_tensor_release(tr->consumed[k]);
  call->consumed = NULL;
  call->n_consumed = 0;
  tr->own = false;
}

/* fn read size `dim` (-1: every size) of x as a number (tensor/tensor_impl.h: dt__size_read):
 * whatever the function does with it is a constant of the trace, so each symbolic dim read is
 * guarded to its traced size and another size traces again (PyTorch specializes a SymInt read
 * as an int). A distributed x's shard dims follow its global ones: those are pinned. */
static void size_read(dt_tracer *base, const dt_tensor *x, int dim, const char *fn) {
  tracer *tr = (tracer *)base;
  const dt_value_entry *e = lookup(tr, x);
  if (!e) e = alias_of(tr, x);
  if (!e) return; /* not a traced value: its sizes are constants */
  dt_compile_variant *v = tr->v;
  int k = e->item < 0 ? 0 : e->item, ndim = v->g->nodes[e->node].types[k].ndim;
  const int *dims = v->dims[e->node] + k * DT_MAX_DIMS;
  for (int d = dim < 0 ? 0 : dim; d < (dim < 0 ? ndim : dim + 1) && d < ndim && !base->error; d++) {
    char why[96];
    snprintf(why, sizeof why, "%s: dim %d of %%%s read as a number", fn, d,
             v->g->nodes[e->node].name);
    base->error = dt__compile_pin(v, dims[d], why);
  }
}

/* In the order of dt_tracer_hooks: who, what, advice; unseen, getitem, before, record, after,
 * size_read. */
static const dt_tracer_hooks compile_hooks = {"dt_compiled_call",
                                              "the compiled function",
                                              "convert before calling the compiled function",
                                              unseen,
                                              getitem,
                                              before,
                                              record,
                                              after,
                                              size_read};

/* Which dims of input i are dynamic. */
static bool dim_is_dynamic(const dt_compiled *c, int i, int d) {
  bool dyn = c->all_dynamic;
  for (int m = 0; m < c->n_marks; m++) {
    if (c->marks[m].input == i && c->marks[m].dim == d) dyn = c->marks[m].dynamic;
  }
  return dyn;
}

/* Placeholders for the inputs, with a symbol for each dynamic dim. */
static dt_status add_inputs(dt_compiled *c, tracer *tr, dt_tensor *const *in) {
  dt_compile_variant *v = tr->v;
  v->inputs = dt__calloc(sizeof *v->inputs * (size_t)(c->n_in ? c->n_in : 1));
  v->hints = dt__calloc(sizeof *v->hints * (size_t)(c->n_in * DT_MAX_DIMS + 1));
  if (!v->inputs || !v->hints) return dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
  for (int i = 0; i < c->n_in; i++) {
    dt_tensor *x = in[i];
    dt_compile_input *desc = &v->inputs[i];
    dt_value_type t;
    dt__tracer_type_of(&t, x);
    desc->dtype = t.dtype;
    desc->ndim = t.ndim;
    desc->dist = x->spec != NULL;
    desc->requires_grad = x->autograd && dt_tensor_requires_grad(x);
    if (desc->dist) {
      desc->mesh_id = x->spec->mesh_id;
      desc->mesh_ndim = x->spec->mesh_ndim;
      memcpy(desc->placements, x->spec->placements, sizeof desc->placements);
    }
    int sdims[DT_MAX_DIMS];
    for (int d = 0; d < t.ndim; d++) {
      desc->shape[d] = t.shape[d];
      desc->sym[d] = -1;
      if (dim_is_dynamic(c, i, d)) {
        desc->sym[d] = v->n_symbols;
        v->hints[v->n_symbols] = t.shape[d];
        sdims[d] = dt__sx_sym(&v->pool, v->n_symbols++);
      } else {
        sdims[d] = dt__sx_const(&v->pool, t.shape[d]);
      }
    }
    char name[16];
    snprintf(name, sizeof name, "in%d", i);
    int node = -1;
    dt_status st = add_value_node(tr, DT_NODE_PLACEHOLDER, name, x, sdims, &node);
    if (st) return st;
  }
  v->g->n_symbols = v->n_symbols < DT_GRAPH_MAX_SYMBOLS ? v->n_symbols : DT_GRAPH_MAX_SYMBOLS;
  for (int s = 0; s < v->g->n_symbols; s++) v->g->symbol_hints[s] = v->hints[s];
  return DT_OK;
}

/* The gradients of a joint trace as graph values: gradient k's node and its leaf. */
/* The traced value g is a copy of: dt_backward's commit copies a gradient whose storage is
 * shared (the tracer's map holds every traced value) block by block, without an op. The
 * candidates are the backward's values of g's dtype and shape with g's bytes; the latest
 * one is the gradient the commit copied (the last op that made it). NULL when none. */
static dt_tensor *copy_source(tracer *tr, const dt_tensor *g, int first_backward) {
  if (g->spec || !dt__is_contiguous(g->ndim, g->shape, g->strides)) return NULL;
  size_t bytes = (size_t)dt__numel(g->ndim, g->shape) * dt__dtype_sizes[g->dtype];
  for (int k = tr->base.map.n - 1; k >= 0; k--) {
    dt_value_entry *e = &tr->base.map.entries[k];
    dt_tensor *t = e->tensor;
    if (e->node < first_backward || e->item >= 0 || t->spec || t->dtype != g->dtype ||
        t->ndim != g->ndim || memcmp(t->shape, g->shape, sizeof(int64_t) * (size_t)g->ndim) ||
        !dt__is_contiguous(t->ndim, t->shape, t->strides))
      continue;
    if (bytes == 0 || memcmp(dt__tensor_base(t), dt__tensor_base(g), bytes) == 0) return t;
  }
  return NULL;
}

static dt_status map_grads(tracer *tr, const dt_compile_joint *j, int first_backward, int **nodes) {
  dt_compile_variant *v = tr->v;
  *nodes = dt__calloc(sizeof(int) * (size_t)(j->n + 1));
  v->grad_input = dt__calloc(sizeof(int) * (size_t)(j->n + 1));
  v->grad_const = dt__calloc(sizeof(int) * (size_t)(j->n + 1));
  if (!*nodes || !v->grad_input || !v->grad_const)
    return dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
  for (int k = 0; k < j->n; k++) {
    if (!j->fresh[k]) continue; /* the backward did not reach it */
    dt_tensor *g = j->fresh[k];
    if (!lookup(tr, g) && !alias_of(tr, g) && (g = copy_source(tr, g, first_backward)) == NULL) {
      return dt__error(DT_ERR_UNSUPPORTED,
                       "dt_compiled_call: the traced backward made the gradient of %s %d outside "
                       "the op table (it would be a constant of this trace)",
                       j->input[k] >= 0 ? "input" : "constant node",
                       j->input[k] >= 0 ? j->input[k] : j->node[k]);
    }
    dt_status st = value_of(tr, g, &(*nodes)[v->n_grads]);
    if (st) return st;
    v->grad_input[v->n_grads] = j->input[k];
    v->grad_const[v->n_grads] = j->node[k];
    v->n_grads++;
  }
  return DT_OK;
}

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* Runs fn eagerly under the tracer; on success out holds fn's results and *made the new
 * variant. A failure of fn itself is returned as fn returned it. */
dt_status dt__compile_trace(dt_compiled *c, dt_tensor *const *in, dt_tensor **out,
                            dt_compile_variant **made) {
  double t0 = now_us();
  tracer tr = {.base.hooks = &compile_hooks, .joint = c->backward};
  dt_compile_joint joint = {0};
  int first_backward = 0;
  tr.v = dt__calloc(sizeof *tr.v);
  if (c->shape_cache) tr.cache = dt__shape_cache_create();
  dt_status st =
      tr.v ? dt__graph_create(&tr.v->g) : dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
  if (!st) tr.base.g = tr.v->g;
  if (!st) st = add_inputs(c, &tr, in);
  bool ran = false;
  if (!st) st = dt__tracer_start(&tr.base);
  if (!st) {
    st = c->fn(c->user, c->n_in, in, c->n_out, out);
    if (!st && c->backward && !tr.base.refused && !tr.base.error && out[0]) {
      tr.v->joint = true;
      first_backward = tr.v->g->n_nodes;
      tr.in_backward = true;
      tr.base.quiet++; /* the backward's size reads are the library's */
      st = dt__compile_joint_backward(tr.v, c->n_in, in, out[0], &joint);
      tr.base.quiet--;
      tr.in_backward = false;
    }
    ran = true;
    if (st) c->stats.failed_traces++;
    st = dt__tracer_stop(&tr.base, st);
  }
  int outputs[DT_COMPILE_MAX_ARGS], *grad_nodes = NULL;
  for (int k = 0; k < c->n_out && !st; k++) {
    if (!out[k]) {
      st = dt__error(DT_ERR_INVALID, "dt_compiled_call: the function left output %d NULL", k);
    } else {
      st = value_of(&tr, out[k], &outputs[k]);
    }
  }
  if (!st && tr.v->joint) st = map_grads(&tr, &joint, first_backward, &grad_nodes);
  if (!st) {
    int o = dt__graph_add_node(tr.v->g, DT_NODE_OUTPUT, "output");
    if (o < 0) st = dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
    if (!st) st = dt__graph_node_types(tr.v->g, o, 0);
    if (!st) st = dt__compile_grow_nodes(tr.v, &tr.node_cap);
    if (!st) {
      dt_node *on = &tr.v->g->nodes[o];
      on->has_list = true;
      int n_list = c->n_out + tr.v->n_grads;
      on->n_list = n_list;
      on->list = dt__arena_alloc(&tr.v->g->arena, sizeof(int) * (size_t)(n_list + 1));
      if (!on->list) st = dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
      for (int k = 0; !st && k < c->n_out; k++) on->list[k] = outputs[k];
      for (int k = 0; !st && k < tr.v->n_grads; k++) on->list[c->n_out + k] = grad_nodes[k];
    }
  }
  dt__free(grad_nodes);
  if (!st) st = dt__compile_plan(tr.v);
  dt__tracer_clear(&tr.base);
  dt__shape_cache_destroy(tr.cache);
  if (tr.v && tr.v->joint) {
    dt_status s2 = dt__compile_joint_finish(&joint, !st);
    if (!st) st = s2;
  }
  /* The outputs of a joint trace come back detached, as a compiled call returns them: their
   * backward has run. */
  if (!st && tr.v->joint) st = dt__compile_detach_outputs(c->n_out, out);
  if (st) {
    if (ran) dt__tensors_clear(out, c->n_out);
    dt__compile_variant_destroy(tr.v);
    return st;
  }
  c->stats.last_compile_us = now_us() - t0;
  c->stats.shape_cache_hits += tr.cache_hits;
  *made = tr.v;
  return DT_OK;
}
