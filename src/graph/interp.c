/*
 * The interpreter: runs a program's graph node by node. A call node becomes a dt_op_call for
 * the op table (so local and distributed tensors both work and dispatch modes see each op);
 * communication nodes run collectives. Each value is released right after its last use.
 */
#include <stdio.h>

#include "graph/graph_exec.h"

typedef struct run_state {
  const dt_graph *g;
  dt_tensor **values;        /* per node: its value (single-valued nodes) */
  dt_tensor ***tuples;       /* per node: its tuple (multi-output nodes) */
  dt_pending_comm **pending; /* per node: a started collective */
  int *last_use;
  int64_t symbols[DT_GRAPH_MAX_SYMBOLS];
  bool bound[DT_GRAPH_MAX_SYMBOLS];
} run_state;

static void release_node(run_state *s, int j) {
  const dt_node *n = &s->g->nodes[j];
  dt_tensor_release(s->values[j]);
  s->values[j] = NULL;
  if (s->tuples[j]) {
    for (int k = 0; k < n->n_out; k++) dt_tensor_release(s->tuples[j][k]);
    dt__free(s->tuples[j]);
    s->tuples[j] = NULL;
  }
  dt__pending_comm_free(s->pending[j]);
  s->pending[j] = NULL;
}

static void compute_last_use(run_state *s) {
  const dt_graph *g = s->g;
  for (int i = 0; i < g->n_nodes; i++) s->last_use[i] = i;
  for (int i = 0; i < g->n_nodes; i++) {
    const dt_node *n = &g->nodes[i];
    for (int k = 0; k < n->n_inputs; k++) {
      if (n->inputs[k] >= 0) s->last_use[n->inputs[k]] = i;
    }
    for (int k = 0; k < n->n_list; k++) s->last_use[n->list[k]] = i;
  }
}

/* Checks an input against its placeholder's type and binds its symbols. */
static dt_status bind_input(run_state *s, int node, int index, dt_tensor *x) {
  const dt_node *n = &s->g->nodes[node];
  const dt_value_type *t = &n->types[0];
  if (!x)
    return dt__error(DT_ERR_INVALID, "dt_program_run: input %d (%%%s) is NULL", index, n->name);
  int ndim = x->spec ? dt_dist_ndim(x) : x->ndim;
  const int64_t *shape = x->spec ? dt_dist_global_shape(x) : x->shape;
  char a[256], b[160];
  if (x->dtype != t->dtype || ndim != t->ndim) {
    return dt__error(DT_ERR_INVALID, "dt_program_run: input %d (%%%s) is %s %s, the graph takes %s",
                     index, n->name, dt_dtype_name(x->dtype),
                     dt__format_ints(b, sizeof b, ndim, shape), dt__type_format(a, sizeof a, t));
  }
  for (int d = 0; d < ndim; d++) {
    int sym = t->sym[d];
    if (sym < 0 && shape[d] != t->shape[d]) {
      return dt__error(
          DT_ERR_INVALID, "dt_program_run: input %d (%%%s) has shape %s, the graph takes %s", index,
          n->name, dt__format_ints(b, sizeof b, ndim, shape), dt__type_format(a, sizeof a, t));
    }
    if (sym >= 0) {
      if (s->bound[sym] && s->symbols[sym] != shape[d]) {
        return dt__error(
            DT_ERR_INVALID,
            "dt_program_run: input %d (%%%s) gives s%d = %lld but an earlier input gave %lld",
            index, n->name, sym, (long long)shape[d], (long long)s->symbols[sym]);
      }
      s->symbols[sym] = shape[d];
      s->bound[sym] = true;
    }
  }
  return DT_OK;
}

static dt_status run_call(run_state *s, int i) {
  const dt_graph *g = s->g;
  const dt_node *n = &g->nodes[i];
  const dt_op_def *def = &dt__op_table[n->target];
  dt_call_list list;
  if (!dt__call_list_init(&list, n->n_list))
    return dt__error(DT_ERR_NOMEM, "out of memory building a graph");
  dt_tensor *outs[DT_OP_MAX_META] = {0};
  dt_op_call call;
  dt__graph_build_call(g, i, s->values, list.entries, outs, &call);
  dt_status st = dt__dispatch(&call);
  dt__call_list_free(&list);
  if (st) return st;
  if (def->kind == DT_OP_KIND_INPLACE) {
    s->values[i] = dt_tensor_retain(call.inputs[0]);
  } else if (n->is_tuple) {
    if (call.n_outputs != n->n_out) {
      for (int k = 0; k < call.n_outputs; k++) dt_tensor_release(outs[k]);
      return dt__error(DT_ERR_SHAPE, "%s gave %d results at these sizes, the graph has %d",
                       def->name, call.n_outputs, n->n_out);
    }
    s->tuples[i] = dt__calloc(sizeof(dt_tensor *) * (size_t)n->n_out);
    if (!s->tuples[i]) {
      for (int k = 0; k < call.n_outputs; k++) dt_tensor_release(outs[k]);
      return dt__error(DT_ERR_NOMEM, "out of memory building a graph");
    }
    memcpy(s->tuples[i], outs, sizeof(dt_tensor *) * (size_t)n->n_out);
  } else {
    s->values[i] = outs[0];
  }
  return DT_OK;
}

static dt_status run_nodes(run_state *s, const dt_program *prog, int n_inputs,
                           dt_tensor *const *inputs, const dt_run_options *opt) {
  const dt_graph *g = s->g;
  dt_comm *comm = opt ? opt->comm : NULL;
  dt_run_stats *stats = opt ? opt->stats : NULL;
  int input_index = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const dt_node *n = &g->nodes[i];
    dt_status st = DT_OK;
    switch (n->kind) {
    case DT_NODE_PLACEHOLDER:
      st = input_index < n_inputs ? bind_input(s, i, input_index, inputs[input_index]) : DT_OK;
      if (!st) s->values[i] = dt_tensor_retain(inputs[input_index]);
      input_index++;
      break;
    case DT_NODE_PARAMETER:
    case DT_NODE_BUFFER:
      s->values[i] = dt_tensor_retain(dt_program_state(prog, n->name));
      if (!s->values[i])
        st = dt__error(DT_ERR_INVALID, "dt_program_run: no state entry '%s'", n->name);
      break;
    case DT_NODE_GETITEM:
      s->values[i] = dt_tensor_retain(s->tuples[n->inputs[0]][n->ints[0]]);
      break;
    case DT_NODE_CALL: st = run_call(s, i); break;
    case DT_NODE_COMM:
      if (n->target == DT_COMM_WAIT) {
        st = dt__comm_node_wait(s->pending[n->inputs[0]], stats, &s->values[i]);
      } else {
        bool consumable = s->last_use[n->inputs[0]] == i &&
                          g->nodes[n->inputs[0]].kind != DT_NODE_PARAMETER &&
                          g->nodes[n->inputs[0]].kind != DT_NODE_BUFFER &&
                          g->nodes[n->inputs[0]].kind != DT_NODE_PLACEHOLDER;
        if (!comm) {
          st = dt__error(DT_ERR_INVALID, "the graph communicates but no group was given");
        } else {
          st = dt__comm_node_start(g, i, s->values[n->inputs[0]], consumable, s->symbols, comm,
                                   stats, &s->pending[i]);
        }
      }
      break;
    case DT_NODE_OUTPUT: break;
    case DT_NODE_REDISTRIBUTE:
      st = dt__error(DT_ERR_UNSUPPORTED, "a redistribute node runs only in a compiled function");
      break;
    }
    if (st) {
      char prefix[200];
      snprintf(prefix, sizeof prefix, "dt_program_run: node %%%s", n->name);
      dt__error_prefix(prefix);
      return st;
    }
    /* Release inputs whose last use this was (outputs live until the end). */
    if (n->kind == DT_NODE_OUTPUT) continue;
    for (int k = 0; k < n->n_inputs; k++) {
      int j = n->inputs[k];
      if (j >= 0 && s->last_use[j] == i) release_node(s, j);
    }
    for (int k = 0; k < n->n_list; k++) {
      if (s->last_use[n->list[k]] == i) release_node(s, n->list[k]);
    }
  }
  return DT_OK;
}

dt_status dt_program_run(const dt_program *program, int n_inputs, dt_tensor *const *inputs,
                         int n_outputs, dt_tensor **outputs, const dt_run_options *options) {
  for (int k = 0; outputs && k < n_outputs; k++) outputs[k] = NULL;
  if (!program) return dt__error(DT_ERR_INVALID, "dt_program_run: program is NULL");
  const dt_graph *g = program->graph;
  int want_in = dt_graph_input_count(g), want_out = dt_graph_output_count(g);
  if (n_inputs > 0 && !inputs) return dt__error(DT_ERR_INVALID, "dt_program_run: inputs is NULL");
  if (n_outputs > 0 && !outputs)
    return dt__error(DT_ERR_INVALID, "dt_program_run: outputs is NULL");
  if (n_inputs != want_in) {
    return dt__error(DT_ERR_INVALID, "dt_program_run: %d inputs given, the graph takes %d",
                     n_inputs, want_in);
  }
  if (n_outputs != want_out) {
    return dt__error(DT_ERR_INVALID, "dt_program_run: room for %d outputs, the graph returns %d",
                     n_outputs, want_out);
  }
  dt_comm *comm = options ? options->comm : NULL;
  if (comm && g->world_size > 0 &&
      (dt_comm_size(comm) != g->world_size || dt_comm_rank(comm) != g->rank)) {
    return dt__error(
        DT_ERR_INVALID,
        "dt_program_run: the graph is rank %d of %d but the group makes this rank %d of %d",
        g->rank, g->world_size, dt_comm_rank(comm), dt_comm_size(comm));
  }
  run_state s = {.g = g};
  size_t n = (size_t)g->n_nodes;
  s.values = dt__calloc(sizeof *s.values * n);
  s.tuples = dt__calloc(sizeof *s.tuples * n);
  s.pending = dt__calloc(sizeof *s.pending * n);
  s.last_use = dt__calloc(sizeof *s.last_use * n);
  dt_status st = DT_OK;
  if (!s.values || !s.tuples || !s.pending || !s.last_use) {
    st = dt__error(DT_ERR_NOMEM, "dt_program_run: out of memory");
  }
  if (!st) {
    compute_last_use(&s);
    st = run_nodes(&s, program, n_inputs, inputs, options);
  }
  if (!st) {
    const dt_node *o = &g->nodes[dt__graph_output_node(g)];
    for (int k = 0; k < n_outputs; k++) outputs[k] = dt_tensor_retain(s.values[o->list[k]]);
  }
  for (size_t i = 0; s.values && s.tuples && s.pending && i < n; i++) release_node(&s, (int)i);
  dt__free(s.values);
  dt__free(s.tuples);
  dt__free(s.pending);
  dt__free(s.last_use);
  return st;
}
