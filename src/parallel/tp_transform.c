/*
 * The tensor-parallel transformation of a program (PyTorch's tensor_parallel_transformation)
 * for one rank of a 1-D mesh of world_size ranks.
 *
 * Parameters take the plan's placements (COLWISE: weight S(0), bias S(0); ROWWISE: weight
 * S(1), bias R; the rest R) and the new state dict holds this rank's shards. Then every call
 * node is placed by the sharding propagator (dt__propagate, the one eager dispatch uses):
 * the op's rule proposes candidates, the cost model prices their input transitions and the
 * cheapest wins. Where an input's placement differs from the chosen one, the transition is
 * made explicit, with nodes appended through the graph builder:
 *
 *   R -> S(d)      narrow (local)           S(d) -> R     all_gather_into_tensor + wait_tensor
 *   R -> P(sum)    zeros_like off rank 0    S(d) -> S(e)  all_to_all + wait_tensor
 *   P -> R         all_reduce + wait_tensor P -> S(d)     reduce_scatter_tensor + wait_tensor
 *
 * Values of the new graph carry local shapes and placements; returned values are Replicate.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dtensor/parallel.h"
#include "distributed/propagate_impl.h"
#include "parallel/parallel_impl.h"

#define CACHE_WAYS 4

static bool has_symbolic(const dt_value_type *t) {
  for (int d = 0; d < t->ndim; d++) {
    if (t->sym[d] >= 0) return true;
  }
  return false;
}

/* Whether torch.chunk of `size` into `world` pieces leaves some piece empty. */
static bool has_empty_chunk(int64_t size, int world) {
  int64_t piece = (size + world - 1) / world;
  return piece * (world - 1) >= size;
}

typedef struct tp_value {
  int node; /* in the new graph: the value at its own placement */
  dt_placement placement;
  /* The same value moved to other placements, made once and reused by every consumer. */
  int n_cached;
  dt_placement cached_placement[CACHE_WAYS];
  int cached_node[CACHE_WAYS];
} tp_value;

typedef struct tp {
  const dt_graph *src;
  dt_graph *g;
  int rank, world;
  tp_value *values; /* per source node */
  int n_state;
  char **state_names;
  dt_tensor **state_tensors;
} tp;

const char *dt_parallel_tp_style_name(dt_tp_style style) {
  return style == DT_TP_COLWISE             ? "colwise"
         : style == DT_TP_ROWWISE           ? "rowwise"
         : style == DT_TP_SEQUENCE_PARALLEL ? "sequence_parallel"
                                            : "invalid";
}

static int64_t chunk_len(int64_t size, int world, int r) {
  int64_t start, len;
  dt__chunk_range(size, world, r, &start, &len);
  return len;
}

static int64_t chunk_start(int64_t size, int world, int r) {
  int64_t start, len;
  dt__chunk_range(size, world, r, &start, &len);
  return start;
}

/* The local type of a value of global type t placed p on this rank. */
static void local_type(const tp *s, const dt_value_type *t, dt_placement p, dt_value_type *out) {
  *out = *t;
  if (p.kind == DT_SHARD) {
    out->shape[p.dim] = chunk_len(t->shape[p.dim], s->world, s->rank);
    out->sym[p.dim] = DT_NO_SYMBOL;
  }
}

static bool same_placement(dt_placement a, dt_placement b) {
  return dt__placements_equal(1, &a, &b);
}

/* ---- Plan ------------------------------------------------------------------------------------ */

dt_status dt__tp_plan_entry_check(const char *fn, const dt_tp_plan *plan, int k) {
  const dt_tp_plan_entry *e = &plan->entries[k];
  if (!e->fqn) return dt__error(DT_ERR_INVALID, "%s: plan entry %d has no FQN", fn, k);
  if (e->style != DT_TP_COLWISE && e->style != DT_TP_ROWWISE &&
      e->style != DT_TP_SEQUENCE_PARALLEL) {
    return dt__error(DT_ERR_INVALID, "%s: plan entry '%s' has an unknown style %d", fn, e->fqn,
                     (int)e->style);
  }
  for (int j = 0; j < k; j++) {
    if (strcmp(plan->entries[j].fqn, e->fqn) == 0) {
      return dt__error(DT_ERR_INVALID, "%s: plan names '%s' twice", fn, e->fqn);
    }
  }
  return DT_OK;
}

static dt_status check_plan(const dt_program *prog, const dt_tp_plan *plan) {
  for (int k = 0; k < plan->n; k++) {
    const dt_tp_plan_entry *e = &plan->entries[k];
    dt_status st = dt__tp_plan_entry_check("dt_parallel_tp_transform", plan, k);
    if (st) return st;
    if (e->style == DT_TP_SEQUENCE_PARALLEL) {
      return dt__error(
          DT_ERR_UNSUPPORTED,
          "dt_parallel_tp_transform: sequence_parallel style on '%s': the graph path has "
          "colwise and rowwise Linear only (use dt_parallel_tp_module)",
          e->fqn);
    }
    char weight[300];
    snprintf(weight, sizeof weight, "%s%sweight", e->fqn, e->fqn[0] ? "." : "");
    const char *type = dt_program_module_type(prog, e->fqn);
    if (prog->n_modules > 0 && !type) {
      return dt__error(
          DT_ERR_INVALID,
          "dt_parallel_tp_transform: plan names '%s', which is not a module of the program",
          e->fqn);
    }
    if (type && strcmp(type, "Linear") != 0) {
      return dt__error(
          DT_ERR_UNSUPPORTED,
          "dt_parallel_tp_transform: %s style on '%s', a %s (styles apply to Linear modules only)",
          dt_parallel_tp_style_name(e->style), e->fqn, type);
    }
    if (!type) { /* a parsed program: the FQN must own a 2-D weight */
      int w = dt__graph_find(prog->graph, weight);
      if (w < 0 || prog->graph->nodes[w].kind != DT_NODE_PARAMETER) {
        return dt__error(DT_ERR_INVALID,
                         "dt_parallel_tp_transform: plan names '%s', which has no parameter '%s'",
                         e->fqn, weight);
      }
      if (prog->graph->nodes[w].types[0].ndim != 2) {
        return dt__error(DT_ERR_INVALID,
                         "dt_parallel_tp_transform: %s style on '%s', whose weight is not 2-D",
                         dt_parallel_tp_style_name(e->style), e->fqn);
      }
    }
  }
  return DT_OK;
}

/* The placement the plan gives the state tensor `name` (Replicate when it names none). */
static dt_placement plan_placement(const dt_tp_plan *plan, const char *name) {
  for (int k = 0; k < plan->n; k++) {
    const char *fqn = plan->entries[k].fqn;
    size_t len = strlen(fqn);
    const char *rest = name;
    if (len) {
      if (strncmp(name, fqn, len) != 0 || name[len] != '.') continue;
      rest = name + len + 1;
    }
    bool colwise = plan->entries[k].style == DT_TP_COLWISE;
    if (strcmp(rest, "weight") == 0) return dt_shard(colwise ? 0 : 1);
    if (strcmp(rest, "bias") == 0) return colwise ? dt_shard(0) : dt_replicate();
  }
  return dt_replicate();
}

/* ---- Building the new graph --------------------------------------------------------------------
 */

static dt_status nomem(void) {
  return dt__error(DT_ERR_NOMEM, "dt_parallel_tp_transform: out of memory");
}

/* A new single-valued node of local type t and placement p. */
static int add_node(tp *s, dt_node_kind kind, const char *name, const dt_value_type *t,
                    dt_placement p) {
  int i = dt__graph_add_node(s->g, kind, name);
  if (i < 0 || dt__graph_node_types(s->g, i, 1)) return -1;
  s->g->nodes[i].types[0] = *t;
  s->g->nodes[i].has_placement = true;
  s->g->nodes[i].placement = p;
  return i;
}

/* Gives node i of the new graph the placement of its value. */
static void set_placement(tp *s, int i, dt_placement p) {
  s->g->nodes[i].has_placement = true;
  s->g->nodes[i].placement = p;
}

/* A collective and its wait through the graph builder; the wait's index, or -1. */
static int add_comm(tp *s, dt_comm_target kind, int input, const dt_value_type *t, dt_placement p,
                    int dim, int new_dim, dt_reduce_op op) {
  int w = -1;
  if (dt__graph_add_comm(s->g, kind, input, dim, new_dim, op, t, &w)) return -1;
  set_placement(s, w - 1, p); /* the collective, appended just before its wait */
  set_placement(s, w, p);
  return w;
}

/* A local op on one input with integer attributes (narrow, zeros_like), through the graph
 * builder; its index, or -1. */
static int add_local_op(tp *s, dt_op op, int input, int n_ints, const int64_t *ints,
                        const dt_value_type *t, dt_placement p) {
  dt_op_call call = {.op = op, .n_inputs = 1, .n_ints = n_ints};
  for (int k = 0; k < n_ints; k++) call.ints[k] = ints[k];
  int i = -1;
  if (dt__graph_add_call(s->g, NULL, &call, &input, 0, NULL, 1, &i)) return -1;
  s->g->nodes[i].types[0] = *t;
  set_placement(s, i, p);
  return i;
}

/* Node of the new graph holding source value v at placement `to` (made on first request). */
static dt_status value_at(tp *s, int v, dt_placement to, int *out) {
  tp_value *tv = &s->values[v];
  if (same_placement(tv->placement, to)) {
    *out = tv->node;
    return DT_OK;
  }
  for (int k = 0; k < tv->n_cached; k++) {
    if (same_placement(tv->cached_placement[k], to)) {
      *out = tv->cached_node[k];
      return DT_OK;
    }
  }
  const dt_value_type *global = dt__value_type(s->src, v);
  dt_value_type lt;
  local_type(s, global, to, &lt);
  dt_placement from = tv->placement;
  int node = -1;
  char a[16], b[16];
  if (from.kind == DT_STRIDED_SHARD || to.kind == DT_STRIDED_SHARD) {
    return dt__error(DT_ERR_UNSUPPORTED,
                     "dt_parallel_tp_transform: %%%s: moving %s to %s (StridedShard)",
                     s->src->nodes[v].name, dt__placement_text(from, a, sizeof a),
                     dt__placement_text(to, b, sizeof b));
  }
  if (from.kind == DT_REPLICATE && to.kind == DT_SHARD) {
    int d = to.dim;
    if (global->sym[d] >= 0) {
      return dt__error(DT_ERR_UNSUPPORTED,
                       "dt_parallel_tp_transform: %%%s would be sharded along symbolic dim %d",
                       s->src->nodes[v].name, d);
    }
    int64_t ints[4] = {d, chunk_start(global->shape[d], s->world, s->rank), lt.shape[d], 1};
    node = add_local_op(s, DT_OP_NARROW, tv->node, 4, ints, &lt, to);
  } else if (from.kind == DT_REPLICATE && to.kind == DT_PARTIAL) {
    /* A replica becomes a partial sum by keeping it on rank 0 only; for avg, max and min
     * every replica already is a valid partial value. */
    if (to.op != DT_REDUCE_SUM || s->rank == 0) {
      node = tv->node;
    } else {
      node = add_local_op(s, DT_OP_ZEROS_LIKE, tv->node, 0, NULL, &lt, to);
    }
  } else if (from.kind == DT_SHARD && to.kind == DT_REPLICATE) {
    node = add_comm(s, DT_COMM_ALL_GATHER, tv->node, &lt, to, from.dim, 0, DT_REDUCE_SUM);
  } else if (from.kind == DT_SHARD && to.kind == DT_SHARD) {
    if (global->sym[to.dim] >= 0) {
      return dt__error(DT_ERR_UNSUPPORTED,
                       "dt_parallel_tp_transform: %%%s would be sharded along symbolic dim %d",
                       s->src->nodes[v].name, to.dim);
    }
    node = add_comm(s, DT_COMM_ALL_TO_ALL, tv->node, &lt, to, from.dim, to.dim, DT_REDUCE_SUM);
  } else if (from.kind == DT_PARTIAL && to.kind == DT_REPLICATE) {
    node = add_comm(s, DT_COMM_ALL_REDUCE, tv->node, &lt, to, 0, 0, from.op);
  } else if (from.kind == DT_PARTIAL && to.kind == DT_SHARD) {
    if (global->sym[to.dim] >= 0) {
      return dt__error(DT_ERR_UNSUPPORTED,
                       "dt_parallel_tp_transform: %%%s would be sharded along symbolic dim %d",
                       s->src->nodes[v].name, to.dim);
    }
    node = add_comm(s, DT_COMM_REDUCE_SCATTER, tv->node, &lt, to, to.dim, 0, from.op);
  } else {
    /* Shard or partial to partial, partial to another partial: through Replicate. */
    int mid = -1;
    dt_status st = value_at(s, v, dt_replicate(), &mid);
    if (st) return st;
    tp_value saved = *tv;
    tv->node = mid;
    tv->placement = dt_replicate();
    st = value_at(s, v, to, &node);
    *tv = saved;
    tv = &s->values[v];
    if (st) return st;
  }
  if (node < 0) {
    return dt__error(DT_ERR_NOMEM, "dt_parallel_tp_transform: out of memory moving %s to %s",
                     dt__placement_text(from, a, sizeof a), dt__placement_text(to, b, sizeof b));
  }
  if (tv->n_cached < CACHE_WAYS) {
    tv->cached_placement[tv->n_cached] = to;
    tv->cached_node[tv->n_cached++] = node;
  }
  *out = node;
  return DT_OK;
}

/* ---- Placing a call
 * ------------------------------------------------------------------------------- */

/* What the propagator's callbacks need to know of the node being placed. */
typedef struct tp_call {
  const tp *s;
  const dt_node *node;
  const int *arg_node;
  const dt_op_call *call; /* with global shapes, its attributes normalized by infer */
} tp_call;

/* The cost model's price for one argument's move, with one rank pricing moves as two
 * would, so that every world size gets the same graph; sharding a symbolic dim is
 * forbidden. */
static double tp_cost(void *user, int arg, const dt_redistribute_geometry *g,
                      const dt_placement *state, int m, dt_placement to) {
  const tp_call *c = user;
  const dt_value_type *t = dt__value_type(c->s->src, c->arg_node[arg]);
  if (to.kind == DT_SHARD && t->sym[to.dim] >= 0) return HUGE_VAL;
  if (to.kind == DT_STRIDED_SHARD) return HUGE_VAL;
  dt_redistribute_geometry priced = *g;
  if (priced.mesh_size[m] < 2) priced.mesh_size[m] = 2;
  return dt__transition_cost(&priced, state, m, to);
}

/* What a graph node cannot express: an output sharded on a symbolic or missing dim, the
 * vocabulary-parallel embedding, a view whose -1 would be ambiguous on an empty shard. */
static bool tp_accept(void *user, int m, const dt_placement *in, dt_placement o) {
  (void)m;
  const tp_call *c = user;
  const dt_node *n = c->node;
  const dt_value_type *out_type = &n->types[0];
  /* A strided shard has no graph form here (no local type, no collective node for it): a
   * view that would produce one gathers instead. */
  if (o.kind == DT_STRIDED_SHARD) return false;
  for (int k = 0; k < n->n_inputs + n->n_list; k++)
    if (in[k].kind == DT_STRIDED_SHARD) return false;
  if (o.kind == DT_SHARD && (o.dim >= out_type->ndim || out_type->sym[o.dim] >= 0)) return false;
  /* A shard's call that the dist dispatcher rewrites (a whole narrow of a sharded dim,
   * rms_norm with its weight sharded) has no graph form. */
  if (dt__dist_rewrites_call(c->call, 1, &in[0], c->call->n_inputs > 1 ? &in[1] : NULL))
    return false;
  /* Vocabulary-parallel embedding (weight rows sharded) needs each shard's row window at
   * run time, which a graph node does not carry: the eager path only. */
  if (dt__op_has_trait(n->target, DT_TRAIT_ROW_WINDOW) && in[0].kind == DT_SHARD &&
      in[0].dim == 0) {
    return false;
  }
  /* Synchronized batch norm (batch_norm_training keeping a shard of a dim other than the
   * channel dim) reduces its statistics inside the op, which a graph node does not: the
   * eager path only. */
  if (dt__op_table[n->target].rule == DT_RULE_BATCH_NORM_TRAINING && dt__is_sharding(in[0]) &&
      in[0].dim != 1) {
    return false;
  }
  /* A view with a symbolic dim is rewritten with -1 for it; if some rank's shard of the
   * output is empty, its -1 is ambiguous there. Decided from global sizes, so every rank
   * makes the same choice. */
  if (o.kind == DT_SHARD && has_symbolic(out_type) &&
      dt__op_has_trait(n->target, DT_TRAIT_GLOBAL_SHAPE_ATTR) &&
      dt__op_table[n->target].rule != DT_RULE_EXPAND &&
      has_empty_chunk(out_type->shape[o.dim], c->s->world)) {
    return false;
  }
  return true;
}

static dt_status place_call(tp *s, int i) {
  const dt_graph *src = s->src;
  const dt_node *n = &src->nodes[i];
  const dt_op_def *def = &dt__op_table[n->target];
  int n_args = n->n_inputs + n->n_list;
  if (n_args > DT_DIST_MAX_ARGS) {
    return dt__error(DT_ERR_UNSUPPORTED,
                     "dt_parallel_tp_transform: %%%s has more than %d tensor arguments", n->name,
                     DT_DIST_MAX_ARGS);
  }
  int arg_node[DT_DIST_MAX_ARGS];
  for (int k = 0; k < n->n_inputs; k++) arg_node[k] = n->inputs[k];
  for (int k = 0; k < n->n_list; k++) arg_node[n->n_inputs + k] = n->list[k];
  /* Global geometry: the op's infer on fake tensors normalizes the attributes, as the
   * distributed dispatcher does before it asks the rule. */
  dt_tensor fakes[DT_DIST_MAX_ARGS], *list[DT_DIST_MAX_ARGS], *outs[DT_OP_MAX_META];
  dt_op_call call;
  dt__node_call_attributes(n, &call);
  for (int k = 0; k < n_args; k++) {
    if (arg_node[k] >= 0) dt__fake_tensor(&fakes[k], dt__value_type(src, arg_node[k]), NULL);
  }
  for (int k = 0; k < n->n_inputs; k++) call.inputs[k] = arg_node[k] >= 0 ? &fakes[k] : NULL;
  for (int k = 0; k < n->n_list; k++) list[k] = &fakes[n->n_inputs + k];
  call.input_list = list;
  call.n_input_list = n->n_list;
  call.n_outputs = def->kind == DT_OP_KIND_INPLACE ? 0 : n->n_out;
  call.outputs = outs;
  dt_tensor_meta metas[DT_OP_MAX_META];
  dt_status st = def->infer(&call, metas);
  if (st) return st;
  int n_out = def->kind == DT_OP_KIND_INPLACE ? 1 : call.n_outputs;
  if (def->kind == DT_OP_KIND_INPLACE)
    dt__meta_set(&metas[0], fakes[0].dtype, fakes[0].ndim, fakes[0].shape);
  tp_call user = {.s = s, .node = n, .arg_node = arg_node, .call = &call};
  dt_propagation prop = {.call = &call,
                         .n_args = n_args,
                         .n_out = n_out,
                         .out = metas,
                         .mesh_ndim = 1,
                         .mesh_size = {s->world},
                         .cost = tp_cost,
                         .accept = tp_accept,
                         .user = &user};
  for (int k = 0; k < n_args; k++) {
    prop.args[k] = arg_node[k] >= 0 ? &fakes[k] : NULL;
    prop.current[k][0] = arg_node[k] >= 0 ? s->values[arg_node[k]].placement : dt_replicate();
  }
  dt_propagation_result chosen;
  if (dt__propagate(&prop, &chosen)) {
    return dt__error(
        DT_ERR_UNSUPPORTED,
        "dt_parallel_tp_transform: %%%s (%s) cannot be placed without sharding a symbolic dim or "
        "moving an in-place op's input",
        n->name, def->name);
  }
  const dt_value_type *out_type = &n->types[0];
  /* Inputs at the chosen placements. */
  int new_args[DT_DIST_MAX_ARGS];
  for (int k = 0; k < n_args && !st; k++) {
    new_args[k] = -1;
    if (arg_node[k] >= 0) st = value_at(s, arg_node[k], chosen.targets[k][0], &new_args[k]);
  }
  if (st) return st;
  /* The node as the source holds it (attributes before any infer), with the new inputs. */
  dt_op_call attrs;
  dt__node_call_attributes(n, &attrs);
  int j = -1;
  st = dt__graph_add_call(s->g, n->name, &attrs, new_args, n->n_list, new_args + n->n_inputs,
                          n->n_out, &j);
  if (st) return st;
  dt_node *m = &s->g->nodes[j];
  dt_placement out_p = chosen.out[0];
  /* Sizes written in attributes (view, reshape, expand: global-shape ops that do not run as a
   * reshape) become this rank's local sizes; expand's -1 keeps the input's size. */
  bool expands = def->rule == DT_RULE_EXPAND;
  bool shape_attr = dt__op_has_trait(n->target, DT_TRAIT_GLOBAL_SHAPE_ATTR) &&
                    !dt__op_has_trait(n->target, DT_TRAIT_RUNS_AS_RESHAPE);
  if (shape_attr && out_p.kind == DT_SHARD) {
    dt_value_type lt;
    local_type(s, out_type, out_p, &lt);
    int n_sym = 0;
    for (int d = 0; d < lt.ndim; d++) n_sym += lt.sym[d] >= 0;
    m->n_ints = lt.ndim;
    m->n_int_list = lt.ndim;
    m->int_list = dt__arena_alloc(&s->g->arena, sizeof(int64_t) * (size_t)(lt.ndim ? lt.ndim : 1));
    if (!m->int_list) return nomem();
    int lead = expands ? lt.ndim - src->nodes[n->inputs[0]].types[0].ndim : 0;
    for (int d = 0; d < lt.ndim; d++) {
      m->ints[d] = lt.sym[d] >= 0 && (n_sym == 1 || expands) && d >= lead ? -1 : lt.shape[d];
      m->int_list[d] = m->ints[d];
    }
  }
  set_placement(s, j, out_p);
  /* Local types: what the op infers on the local inputs, checked against the shard geometry. */
  int got = 0;
  for (int k = 0; k < n->n_out; k++) local_type(s, &n->types[k], out_p, &m->types[k]);
  st = dt__graph_infer_call(s->g, j, NULL, metas, &got);
  if (st) return st;
  for (int k = 0; k < got && k < n->n_out; k++) {
    const dt_value_type *want = &m->types[k];
    bool ok = metas[k].ndim == want->ndim && metas[k].dtype == want->dtype;
    for (int d = 0; ok && d < want->ndim; d++) ok = metas[k].shape[d] == want->shape[d];
    if (!ok || got != n->n_out) {
      char p[16];
      return dt__error(
          DT_ERR_UNSUPPORTED,
          "dt_parallel_tp_transform: %%%s (%s) placed %s gives a local shape that is not its shard",
          n->name, def->name, dt__placement_text(out_p, p, sizeof p));
    }
  }
  s->values[i].node = j;
  s->values[i].placement = out_p;
  return DT_OK;
}

/* ---- The transformation
 * ---------------------------------------------------------------------------- */

static dt_status add_state_entry(tp *s, const char *name, dt_tensor *t) {
  s->state_names[s->n_state] = dt__strdup(name);
  if (!s->state_names[s->n_state]) {
    dt_tensor_release(t);
    return nomem();
  }
  s->state_tensors[s->n_state++] = t;
  return DT_OK;
}

static dt_status place_state(tp *s, const dt_program *prog, const dt_tp_plan *plan, int i) {
  const dt_node *n = &s->src->nodes[i];
  dt_tensor *full = dt_program_state(prog, n->name);
  if (!full)
    return dt__error(DT_ERR_INVALID, "dt_parallel_tp_transform: no state entry '%s'", n->name);
  if (full->spec)
    return dt__error(DT_ERR_UNSUPPORTED,
                     "dt_parallel_tp_transform: state entry '%s' is already distributed", n->name);
  dt_placement p = n->kind == DT_NODE_PARAMETER ? plan_placement(plan, n->name) : dt_replicate();
  if (p.kind == DT_SHARD && p.dim >= n->types[0].ndim) {
    return dt__error(DT_ERR_SHAPE,
                     "dt_parallel_tp_transform: cannot shard dim %d of '%s', which has %d dims",
                     p.dim, n->name, n->types[0].ndim);
  }
  dt_value_type lt;
  local_type(s, &n->types[0], p, &lt);
  dt_tensor *local = NULL;
  dt_status st = DT_OK;
  if (p.kind == DT_SHARD) {
    dt_tensor *view = NULL;
    int64_t size = n->types[0].shape[p.dim];
    st = dt_narrow(full, p.dim, chunk_start(size, s->world, s->rank), lt.shape[p.dim], &view);
    if (!st) st = dt_clone(view, &local);
    dt_tensor_release(view);
    if (st) return st;
  } else {
    local = dt_tensor_retain(full);
  }
  st = add_state_entry(s, n->name, local);
  if (st) return st;
  int j = add_node(s, n->kind, n->name, &lt, p);
  if (j < 0) return nomem();
  s->values[i].node = j;
  s->values[i].placement = p;
  return DT_OK;
}

static dt_status transform(tp *s, const dt_program *prog, const dt_tp_plan *plan) {
  const dt_graph *src = s->src;
  dt_status st = DT_OK;
  for (int i = 0; i < src->n_nodes && !st; i++) {
    const dt_node *n = &src->nodes[i];
    switch (n->kind) {
    case DT_NODE_PARAMETER:
    case DT_NODE_BUFFER: st = place_state(s, prog, plan, i); break;
    case DT_NODE_PLACEHOLDER: {
      int j = add_node(s, DT_NODE_PLACEHOLDER, n->name, &n->types[0], dt_replicate());
      if (j < 0) return nomem();
      s->values[i].node = j;
      s->values[i].placement = dt_replicate();
      break;
    }
    case DT_NODE_GETITEM: {
      const tp_value *tuple = &s->values[n->inputs[0]];
      dt_value_type lt;
      local_type(s, &n->types[0], tuple->placement, &lt);
      int j = add_node(s, DT_NODE_GETITEM, n->name, &lt, tuple->placement);
      if (j < 0) return nomem();
      s->g->nodes[j].n_inputs = 1;
      s->g->nodes[j].inputs[0] = tuple->node;
      s->g->nodes[j].ints[0] = n->ints[0];
      s->g->nodes[j].n_ints = 1;
      s->values[i].node = j;
      s->values[i].placement = tuple->placement;
      break;
    }
    case DT_NODE_CALL: st = place_call(s, i); break;
    case DT_NODE_COMM:
    case DT_NODE_REDISTRIBUTE:
      st = dt__error(DT_ERR_INVALID,
                     "dt_parallel_tp_transform: the program already communicates (%%%s)", n->name);
      break;
    case DT_NODE_OUTPUT: {
      int *list = dt__arena_alloc(&s->g->arena, sizeof(int) * (size_t)(n->n_list ? n->n_list : 1));
      if (!list) return nomem();
      for (int k = 0; k < n->n_list && !st; k++)
        st = value_at(s, n->list[k], dt_replicate(), &list[k]);
      if (st) return st;
      int o = dt__graph_add_node(s->g, DT_NODE_OUTPUT, "output");
      if (o < 0 || dt__graph_node_types(s->g, o, 0)) return nomem();
      s->g->nodes[o].has_list = true;
      s->g->nodes[o].n_list = n->n_list;
      s->g->nodes[o].list = list;
      break;
    }
    }
    if (st && n->kind == DT_NODE_CALL) {
      char prefix[200];
      snprintf(prefix, sizeof prefix, "dt_parallel_tp_transform: node %%%s", n->name);
      if (strncmp(dt_last_error(), "dt_parallel_tp_transform", 15) != 0) dt__error_prefix(prefix);
    }
  }
  return st;
}

/* Frees the transformation's scratch: the state names and tensor references (a program made
 * from them holds its own), the value table, and the graph unless a program took it over
 * (s->g is NULL then). */
static void tp_free(tp *s) {
  dt__free_strings(s->state_names, s->n_state);
  dt__tensors_free(s->state_tensors, s->n_state);
  dt__free(s->values);
  dt_graph_destroy(s->g);
}

dt_status dt_parallel_tp_transform(const dt_program *program, int rank, int world_size,
                                   const dt_tp_plan *plan, dt_program **out) {
  if (!out) return dt__error(DT_ERR_INVALID, "dt_parallel_tp_transform: out is NULL");
  *out = NULL;
  if (!program || !plan || (plan->n > 0 && !plan->entries) || plan->n < 0) {
    return dt__error(DT_ERR_INVALID, "dt_parallel_tp_transform: NULL program or plan");
  }
  if (world_size < 1 || world_size > DT_COMM_MAX_WORLD || rank < 0 || rank >= world_size) {
    return dt__error(DT_ERR_INVALID, "dt_parallel_tp_transform: rank %d of world %d is not a rank",
                     rank, world_size);
  }
  if (program->graph->world_size > 0) {
    return dt__error(DT_ERR_INVALID,
                     "dt_parallel_tp_transform: the program is already transformed (world %d)",
                     program->graph->world_size);
  }
  dt_status st = check_plan(program, plan);
  if (st) return st;
  const dt_graph *src = program->graph;
  tp s = {.src = src, .rank = rank, .world = world_size};
  size_t n = (size_t)src->n_nodes;
  s.values = dt__calloc(sizeof *s.values * (n ? n : 1));
  s.state_names = dt__calloc(sizeof *s.state_names * (n ? n : 1));
  s.state_tensors = dt__calloc(sizeof *s.state_tensors * (n ? n : 1));
  if (!s.values || !s.state_names || !s.state_tensors) st = nomem();
  if (!st) st = dt__graph_create(&s.g);
  if (!st) {
    s.g->n_symbols = src->n_symbols;
    memcpy(s.g->symbol_hints, src->symbol_hints, sizeof s.g->symbol_hints);
    s.g->world_size = world_size;
    s.g->rank = rank;
    st = transform(&s, program, plan);
  }
  dt_program *p = NULL;
  if (!st) {
    st = dt__program_create_owned("dt_parallel_tp_transform", s.g, s.n_state,
                                  (const char *const *)s.state_names, s.state_tensors, &p);
    s.g = NULL;
  }
  if (!st && program->n_modules) {
    const char **fqns = dt__alloc(sizeof(char *) * (size_t)program->n_modules);
    const char **types = dt__alloc(sizeof(char *) * (size_t)program->n_modules);
    if (!fqns || !types) st = nomem();
    for (int i = 0; !st && i < program->n_modules; i++) {
      fqns[i] = program->modules[i].fqn;
      types[i] = program->modules[i].type;
    }
    if (!st)
      st = dt__program_set_modules("dt_parallel_tp_transform", p, program->n_modules, fqns, types);
    dt__free(fqns);
    dt__free(types);
  }
  tp_free(&s);
  if (st) {
    dt_program_destroy(p);
    return st;
  }
  *out = p;
  return DT_OK;
}

static int64_t type_bytes(const dt_value_type *t) {
  int64_t n = (int64_t)dt_dtype_size(t->dtype);
  for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
  return n;
}

int64_t dt__tp_predicted_comm_bytes(const dt_graph *g) {
  static const dt_step_kind kinds[] = {
      [DT_COMM_ALL_GATHER] = DT_STEP_ALL_GATHER,
      [DT_COMM_ALL_REDUCE] = DT_STEP_ALL_REDUCE,
      [DT_COMM_REDUCE_SCATTER] = DT_STEP_REDUCE_SCATTER,
      [DT_COMM_ALL_TO_ALL] = DT_STEP_ALL_TO_ALL,
  };
  int64_t bytes = 0;
  for (int i = 0; g && i < g->n_nodes; i++) {
    const dt_node *n = &g->nodes[i];
    if (n->kind != DT_NODE_COMM || n->target == DT_COMM_WAIT || n->inputs[0] < 0) continue;
    bytes += dt__step_bytes(kinds[n->target], g->world_size,
                            type_bytes(dt__value_type(g, n->inputs[0])), type_bytes(&n->types[0]));
  }
  return bytes;
}
