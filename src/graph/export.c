/*
 * Export by tracing: the model's forward runs under a dispatch mode that records every op
 * call (with its attributes, before dispatch normalizes them) as a graph node. Tensors are
 * recognized by identity: the model's parameters and buffers become parameter/buffer nodes
 * named by FQN, the input a placeholder, and each op's outputs map to its node. The tracer
 * holds a reference to every tensor it has seen, so no address is reused during the trace.
 * The conversions between local and distributed tensors (from_local, redistribute, ...) are
 * not op-table calls, so a graph cannot record them: converting a traced value is refused
 * (guard_conversion) rather than letting its result become a constant.
 */
#include <stdio.h>
#include <string.h>

#include "dtensor/mode.h"
#include "graph/graph_impl.h"

typedef struct tracer {
  dt_graph *g;
  dt_value_map map;
  int n_state, cap_state;
  const char **state_names;  /* node names (arena) */
  dt_tensor **state_tensors; /* borrowed: the map holds them */
  int n_constants;
  dt_status error;
  const char *refused; /* the conversion guard_conversion refused, if any */
} tracer;

static void type_of(dt_value_type *t, const dt_tensor *x) {
  dt__type_from_tensor(t, x);
  if (x->spec) {
    t->ndim = x->spec->ndim;
    memcpy(t->shape, x->spec->shape, sizeof(int64_t) * (size_t)t->ndim);
  }
}

static dt_value_entry *lookup(tracer *tr, const dt_tensor *x) {
  return dt__value_map_find(&tr->map, x);
}

static dt_status map_tensor(tracer *tr, dt_tensor *x, int node, int item) {
  return dt__value_map_set(&tr->map, x, node, item, "dt_export");
}

static dt_status add_state(tracer *tr, int node, dt_tensor *x) {
  if (!dt__reserve_arrays(tr->n_state, &tr->cap_state, 32, 2,
                          (void *[]){&tr->state_names, &tr->state_tensors},
                          (size_t[]){sizeof *tr->state_names, sizeof *tr->state_tensors})) {
    return dt__error(DT_ERR_NOMEM, "dt_export: out of memory");
  }
  tr->state_names[tr->n_state] = tr->g->nodes[node].name;
  tr->state_tensors[tr->n_state++] = x;
  return DT_OK;
}

/* A node holding x as a state tensor (parameter, buffer or lifted constant). */
static dt_status add_state_node(tracer *tr, dt_node_kind kind, const char *name, dt_tensor *x,
                                int *node) {
  int i = dt__graph_add_node(tr->g, kind, name);
  if (i < 0) return dt__error(DT_ERR_NOMEM, "dt_export: out of memory");
  dt_status st = dt__graph_node_types(tr->g, i, 1);
  if (st) return st;
  type_of(&tr->g->nodes[i].types[0], x);
  st = map_tensor(tr, x, i, -1);
  if (!st) st = add_state(tr, i, x);
  if (node) *node = i;
  return st;
}

/* The node standing for x: a traced value, a getitem made on first use of a tuple element,
 * or a new constant. */
static dt_status value_of(tracer *tr, dt_tensor *x, int *node) {
  dt_value_entry *e = lookup(tr, x);
  if (!e) {
    char name[48];
    snprintf(name, sizeof name, "_tensor_constant%d", tr->n_constants++);
    return add_state_node(tr, DT_NODE_BUFFER, name, x, node);
  }
  if (e->item < 0) {
    *node = e->node;
    return DT_OK;
  }
  int src = e->node, item = e->item;
  int i = dt__graph_add_node(tr->g, DT_NODE_GETITEM, "getitem");
  if (i < 0) return dt__error(DT_ERR_NOMEM, "dt_export: out of memory");
  dt_status st = dt__graph_node_types(tr->g, i, 1);
  if (st) return st;
  dt_node *n = &tr->g->nodes[i];
  n->inputs[0] = src;
  n->n_inputs = 1;
  n->ints[0] = item;
  n->n_ints = 1;
  n->types[0] = tr->g->nodes[src].types[item];
  e = lookup(tr, x);
  e->node = i;
  e->item = -1;
  *node = i;
  return DT_OK;
}

static dt_status value_lookup(void *tr, dt_tensor *x, int *node) { return value_of(tr, x, node); }

static dt_status record(tracer *tr, const dt_op_call *snap, const dt_op_call *done) {
  const dt_op_def *def = &dt__op_table[snap->op];
  bool inplace = def->kind == DT_OP_KIND_INPLACE;
  int n_out = 0, i = -1;
  dt_status st =
      dt__graph_record_call(tr->g, snap, done, value_lookup, tr, "dt_export", &n_out, &i);
  if (st) return st;
  dt_node *n = &tr->g->nodes[i];
  for (int k = 0; k < n_out && !st; k++) {
    dt_tensor *x = inplace ? snap->inputs[0] : done->outputs[k];
    type_of(&n->types[k], x);
    st = map_tensor(tr, x, i, n->is_tuple ? k : -1);
  }
  return st;
}

static dt_status trace_mode(dt_invocation *inv, void *user) {
  tracer *tr = user;
  dt_op_call *call = dt__invocation_call(inv);
  dt_op_call snap = *call; /* attributes as the caller gave them, before infer normalizes */
  dt_status st = dt_invocation_run(inv);
  if (st || tr->error) return st;
  tr->error = record(tr, &snap, call);
  return DT_OK;
}

/* The dist layer's conversion guard while the forward runs. A conversion's result is a
 * tensor the trace has not seen, so it would become a constant holding this trace's values:
 * when its input is a value the trace holds (the input, a parameter or buffer, or anything
 * computed from them) the program would ignore its input, or the state dict, silently. That
 * conversion is refused. A tensor the trace has never seen (dt_ones, ...) converts freely:
 * its result really is a constant. */
static dt_status guard_conversion(void *user, const char *call, const dt_tensor *input) {
  tracer *tr = user;
  const dt_value_entry *e = lookup(tr, input);
  if (!e) return DT_OK;
  tr->refused = call;
  return dt__error(DT_ERR_UNSUPPORTED,
                   "dt_export: %s of the traced value %%%s inside the forward: a graph "
                   "cannot record %s (not an op-table call) and its result would be a "
                   "constant that ignores the input; export the model before "
                   "parallelize_module and use dt_parallel_tp_transform for tensor parallelism",
                   call, tr->g->nodes[e->node].name, call);
}

static dt_status visit_state(const char *fqn, dt_tensor *t, bool is_buffer, void *user) {
  tracer *tr = user;
  if (lookup(tr, t)) return DT_OK; /* a tied tensor: its first name wins */
  return add_state_node(tr, is_buffer ? DT_NODE_BUFFER : DT_NODE_PARAMETER, fqn, t, NULL);
}

typedef struct module_table {
  int n, cap;
  char **fqns, **types;
} module_table;

static dt_status visit_module(const char *fqn, dt_module *m, void *user) {
  module_table *t = user;
  if (!dt__reserve_arrays(t->n, &t->cap, 32, 2, (void *[]){&t->fqns, &t->types},
                          (size_t[]){sizeof *t->fqns, sizeof *t->types})) {
    return dt__error(DT_ERR_NOMEM, "dt_export: out of memory");
  }
  size_t len = strlen(fqn);
  t->fqns[t->n] = dt__alloc(len + 1);
  if (!t->fqns[t->n]) return dt__error(DT_ERR_NOMEM, "dt_export: out of memory");
  memcpy(t->fqns[t->n], fqn, len + 1);
  t->types[t->n++] = (char *)dt_module_type(m);
  return DT_OK;
}

/* Marks dims that follow the symbols: a call's dim is symbol s when it equals s at the traced
 * sizes and at a second probe size. When some dim depends on a symbol in any other way the
 * graph keeps concrete sizes (it is then valid for the traced batch size only). */
static void propagate_symbols(dt_graph *g) {
  int64_t probe[DT_GRAPH_MAX_SYMBOLS];
  for (int s = 0; s < g->n_symbols; s++) probe[s] = g->symbol_hints[s] + 1;
  bool ok = true;
  for (int i = 0; i < g->n_nodes && ok; i++) {
    dt_node *n = &g->nodes[i];
    if (n->kind == DT_NODE_GETITEM) {
      n->types[0] = g->nodes[n->inputs[0]].types[n->ints[0]];
      continue;
    }
    if (n->kind != DT_NODE_CALL) continue;
    dt_tensor_meta metas[DT_OP_MAX_META];
    int n_out = 0;
    if (dt__graph_infer_call(g, i, probe, metas, &n_out) || n_out != n->n_out) {
      ok = false;
      break;
    }
    for (int k = 0; k < n_out && ok; k++) {
      dt_value_type *t = &n->types[k];
      if (metas[k].ndim != t->ndim) ok = false;
      for (int d = 0; d < t->ndim && ok; d++) {
        if (metas[k].shape[d] == t->shape[d]) continue;
        int sym = -1;
        for (int s = 0; s < g->n_symbols; s++) {
          if (t->shape[d] == g->symbol_hints[s] && metas[k].shape[d] == probe[s]) sym = s;
        }
        if (sym < 0)
          ok = false;
        else
          t->sym[d] = (int8_t)sym;
      }
    }
  }
  dt_clear_error();
  if (ok) return;
  dt__log(DT_LOG_WARN,
          "dt_export: a size depends on the batch size in a way the graph cannot express; "
          "the graph keeps the traced sizes");
  for (int i = 0; i < g->n_nodes; i++) {
    for (int k = 0; k < g->nodes[i].n_out; k++)
      memset(g->nodes[i].types[k].sym, DT_NO_SYMBOL, DT_MAX_DIMS);
  }
  g->n_symbols = 0;
}

static dt_status trace(tracer *tr, dt_module *model, dt_tensor *input,
                       const dt_export_options *opt) {
  dt_status st = dt_module_visit_tensors(model, visit_state, tr);
  if (st) return st;
  int x = dt__graph_add_node(tr->g, DT_NODE_PLACEHOLDER, "x");
  if (x < 0) return dt__error(DT_ERR_NOMEM, "dt_export: out of memory");
  st = dt__graph_node_types(tr->g, x, 1);
  if (st) return st;
  dt_value_type *t = &tr->g->nodes[x].types[0];
  type_of(t, input);
  if (opt && opt->dynamic_batch && t->ndim > 0) {
    t->sym[0] = 0;
    tr->g->n_symbols = 1;
    tr->g->symbol_hints[0] = t->shape[0];
  }
  st = map_tensor(tr, input, x, -1);
  if (st) return st;
  st = dt_mode_push(trace_mode, tr);
  if (st) return st;
  dt__dist_convert_guard outer = dt__dist_guard; /* an export inside a traced forward */
  dt__dist_guard = (dt__dist_convert_guard){guard_conversion, tr};
  dt_tensor *y = NULL;
  st = dt_module_forward(model, input, &y);
  dt__dist_guard = outer;
  dt_mode_pop();
  if (!st && tr->refused) {
    /* The forward went on after a refused conversion: the refusal still stands. */
    st = dt__error(DT_ERR_UNSUPPORTED,
                   "dt_export: the forward succeeded without the %s of a traced value that export "
                   "refused; the graph would not be the forward",
                   tr->refused);
  }
  if (!st) st = tr->error;
  int result = -1;
  if (!st) st = value_of(tr, y, &result);
  dt_tensor_release(y);
  if (st) return st;
  int o = dt__graph_add_node(tr->g, DT_NODE_OUTPUT, "output");
  if (o < 0) return dt__error(DT_ERR_NOMEM, "dt_export: out of memory");
  st = dt__graph_node_types(tr->g, o, 0);
  if (st) return st;
  dt_node *on = &tr->g->nodes[o];
  on->has_list = true;
  on->n_list = 1;
  on->list = dt__arena_alloc(&tr->g->arena, sizeof(int));
  if (!on->list) return dt__error(DT_ERR_NOMEM, "dt_export: out of memory");
  on->list[0] = result;
  if (tr->g->n_symbols) propagate_symbols(tr->g);
  return DT_OK;
}

dt_status dt_export(dt_module *model, dt_tensor *input, const dt_export_options *options,
                    dt_program **out) {
  if (!out) return dt__error(DT_ERR_INVALID, "dt_export: out is NULL");
  *out = NULL;
  if (!model || !input) return dt__error(DT_ERR_INVALID, "dt_export: NULL model or input");
  if (dt_mode_depth() >= DT_MAX_MODES)
    return dt__error(DT_ERR_INVALID, "dt_export: no room for the tracing mode");
  tracer tr = {0};
  module_table mt = {0};
  dt_status st = dt__graph_create(&tr.g);
  if (!st) st = trace(&tr, model, input, options);
  if (!st) st = dt_module_visit(model, visit_module, &mt);
  dt_program *p = NULL;
  if (!st) {
    st = dt__program_create_owned("dt_export", tr.g, tr.n_state, tr.state_names, tr.state_tensors,
                                  &p);
    tr.g = NULL; /* owned by the program now, or freed */
  }
  if (!st)
    st = dt__program_set_modules("dt_export", p, mt.n, (const char *const *)mt.fqns,
                                 (const char *const *)mt.types);
  for (int i = 0; i < mt.n; i++) dt__free(mt.fqns[i]);
  dt__free(mt.fqns);
  dt__free(mt.types);
  dt__value_map_clear(&tr.map);
  dt__free(tr.state_names);
  dt__free(tr.state_tensors);
  dt_graph_destroy(tr.g);
  if (st) {
    /* Inner messages that name no public function (out of memory) get dt_export's name. */
    if (strncmp(dt_last_error(), "dt_", 3) != 0) dt__error_prefix("dt_export");
    dt_program_destroy(p);
    return st;
  }
  *out = p;
  return DT_OK;
}
