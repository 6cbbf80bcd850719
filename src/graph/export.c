/*
 * Export by tracing: the model's forward runs under the tracer (graph/tracer.c), which records
 * every op call (with its attributes, before dispatch normalizes them) as a graph node and
 * refuses a conversion between local and distributed tensors of a traced value (not an
 * op-table call, its result would become a constant). Tensors are recognized by identity: the
 * model's parameters and buffers become parameter/buffer nodes named by FQN, the input a
 * placeholder, each op's outputs map to its node, and a tensor the trace has not seen becomes a
 * constant lifted into the state dict.
 */
#include <stdio.h>
#include <string.h>

#include "graph/tracer_impl.h"

typedef struct exporter {
  dt_tracer tr; /* first: the hooks get &tr */
  int n_state, cap_state;
  const char **state_names;  /* node names (arena) */
  dt_tensor **state_tensors; /* borrowed: the map holds them */
} exporter;

static dt_status add_state(exporter *ex, int node, dt_tensor *x) {
  if (!dt__reserve_arrays(ex->n_state, &ex->cap_state, 32, 2,
                          (void *[]){&ex->state_names, &ex->state_tensors},
                          (size_t[]){sizeof *ex->state_names, sizeof *ex->state_tensors})) {
    return dt__error(DT_ERR_NOMEM, "dt_export: out of memory");
  }
  ex->state_names[ex->n_state] = ex->tr.g->nodes[node].name;
  ex->state_tensors[ex->n_state++] = x;
  return DT_OK;
}

/* A node holding x as a state tensor (parameter, buffer or lifted constant). */
static dt_status add_state_node(exporter *ex, dt_node_kind kind, const char *name, dt_tensor *x) {
  dt_graph *g = ex->tr.g;
  int i = dt__graph_add_node(g, kind, name);
  if (i < 0) return dt__error(DT_ERR_NOMEM, "dt_export: out of memory");
  dt_status st = dt__graph_node_types(g, i, 1);
  if (st) return st;
  dt__tracer_type_of(&g->nodes[i].types[0], x);
  st = dt__tracer_map(&ex->tr, x, i, -1);
  if (!st) st = add_state(ex, i, x);
  return st;
}

/* A tensor the trace has not seen is a constant of the graph, lifted into its state dict. */
static dt_status unseen(dt_tracer *tr, dt_tensor *x) {
  char name[48];
  dt__tracer_constant_name(tr, name, sizeof name);
  return add_state_node((exporter *)tr, DT_NODE_BUFFER, name, x);
}

static dt_status record(dt_tracer *tr, const dt_op_call *given, const dt_op_call *done) {
  bool inplace = dt__op_table[given->op].kind == DT_OP_KIND_INPLACE;
  int n_out = 0, i = -1;
  dt_status st = dt__tracer_record_call(tr, given, done, &n_out, &i);
  if (st) return st;
  dt_node *n = &tr->g->nodes[i];
  for (int k = 0; k < n_out && !st; k++) {
    dt_tensor *x = inplace ? given->inputs[0] : done->outputs[k];
    dt__tracer_type_of(&n->types[k], x);
    st = dt__tracer_map(tr, x, i, n->is_tuple ? k : -1);
  }
  return st;
}

static const dt_tracer_hooks export_hooks = {
    .who = "dt_export",
    .what = "the forward",
    .advice = "its result would be a constant that ignores the input; export the model before "
              "parallelize_module and use dt_parallel_tp_transform for tensor parallelism",
    .unseen = unseen,
    .record = record,
};

static dt_status visit_state(const char *fqn, dt_tensor *t, bool is_buffer, void *user) {
  exporter *ex = user;
  if (dt__tracer_lookup(&ex->tr, t)) return DT_OK; /* a tied tensor: its first name wins */
  return add_state_node(ex, is_buffer ? DT_NODE_BUFFER : DT_NODE_PARAMETER, fqn, t);
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
  t->fqns[t->n] = dt__strdup(fqn);
  if (!t->fqns[t->n]) return dt__error(DT_ERR_NOMEM, "dt_export: out of memory");
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

static dt_status trace(exporter *ex, dt_module *model, dt_tensor *input,
                       const dt_export_options *opt) {
  dt_tracer *tr = &ex->tr;
  dt_status st = dt_module_visit_tensors(model, visit_state, ex);
  if (st) return st;
  int x = dt__graph_add_node(tr->g, DT_NODE_PLACEHOLDER, "x");
  if (x < 0) return dt__error(DT_ERR_NOMEM, "dt_export: out of memory");
  st = dt__graph_node_types(tr->g, x, 1);
  if (st) return st;
  dt_value_type *t = &tr->g->nodes[x].types[0];
  dt__tracer_type_of(t, input);
  if (opt && opt->dynamic_batch && t->ndim > 0) {
    t->sym[0] = 0;
    tr->g->n_symbols = 1;
    tr->g->symbol_hints[0] = t->shape[0];
  }
  st = dt__tracer_map(tr, input, x, -1);
  if (!st) st = dt__tracer_start(tr);
  if (st) return st;
  dt_tensor *y = NULL;
  st = dt__tracer_stop(tr, dt_module_forward(model, input, &y));
  int result = -1;
  if (!st) st = dt__tracer_value(tr, y, &result);
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
  exporter ex = {.tr.hooks = &export_hooks};
  module_table mt = {0};
  dt_status st = dt__graph_create(&ex.tr.g);
  if (!st) st = trace(&ex, model, input, options);
  if (!st) st = dt_module_visit(model, visit_module, &mt);
  dt_program *p = NULL;
  if (!st) {
    st = dt__program_create_owned("dt_export", ex.tr.g, ex.n_state, ex.state_names,
                                  ex.state_tensors, &p);
    ex.tr.g = NULL; /* owned by the program now, or freed */
  }
  if (!st)
    st = dt__program_set_modules("dt_export", p, mt.n, (const char *const *)mt.fqns,
                                 (const char *const *)mt.types);
  dt__free_strings(mt.fqns, mt.n);
  dt__free(mt.types);
  dt__tracer_clear(&ex.tr);
  dt__free(ex.state_names);
  dt__free(ex.state_tensors);
  dt_graph_destroy(ex.tr.g);
  if (st) {
    /* Inner messages that name no public function (out of memory) get dt_export's name. */
    if (strncmp(dt_last_error(), "dt_", 3) != 0) dt__error_prefix("dt_export");
    dt_program_destroy(p);
    return st;
  }
  *out = p;
  return DT_OK;
}
