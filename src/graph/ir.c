/* The graph IR: nodes, value types, and inference of a call node's output types. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "graph/graph_impl.h"

const char *const dt__comm_target_names[DT_COMM_TARGET_COUNT] = {
    "all_gather_into_tensor", "all_reduce", "reduce_scatter_tensor", "all_to_all", "wait_tensor"};

const char *dt_comm_node_name(int kind) {
  return kind >= 0 && kind < DT_COMM_WAIT ? dt__comm_target_names[kind] : NULL;
}

/* ---- Ops ------------------------------------------------------------------------------------- */

bool dt__op_returns_tuple(int op) { return dt__op_has_trait(op, DT_TRAIT_TUPLE); }

int dt__op_by_name(const char *name, size_t len) {
  for (int i = 0; i < DT_OP_COUNT; i++) {
    const char *n = dt__op_table[i].name;
    if (strlen(n) == len && memcmp(n, name, len) == 0) return i;
  }
  return -1;
}

/* ---- Graphs -------------------------------------------------------------------------------------
 */

dt_status dt__graph_create(dt_graph **out) {
  dt_graph *g = dt__calloc(sizeof *g);
  if (!g) return dt__error(DT_ERR_NOMEM, "out of memory building a graph");
  *out = g;
  return DT_OK;
}

dt_status dt__graph_create_from(const char *fn, const void *input, const char *input_name,
                                dt_graph **out, dt_graph **g) {
  *g = NULL;
  if (!out) return dt__error(DT_ERR_INVALID, "%s: out is NULL", fn);
  *out = NULL;
  if (!input) return dt__error(DT_ERR_INVALID, "%s: %s is NULL", fn, input_name);
  return dt__graph_create(g);
}

void dt_graph_destroy(dt_graph *graph) {
  if (!graph) return;
  dt__free(graph->nodes);
  dt__free(graph->name_slots);
  dt__arena_free(&graph->arena);
  dt__free(graph);
}

/* ---- Name index ---------------------------------------------------------------------------- */

struct dt_name_slot {
  int node; /* -1: empty */
  uint32_t hash;
};

/* The name's bytes taken 8 at a time through the core's hash mix. */
static uint32_t name_hash(const char *name) {
  size_t len = strlen(name);
  uint64_t h = len;
  for (size_t i = 0; i < len; i += 8) {
    uint64_t word = 0;
    memcpy(&word, name + i, len - i < 8 ? len - i : 8);
    h = dt__hash_mix(h, word);
  }
  return (uint32_t)(dt__hash_mix(h, 0) >> 32);
}

/* Puts node i with this hash into a slot array of n_slots (a power of two, with room). */
static void index_insert(struct dt_name_slot *slots, size_t n_slots, int i, uint32_t hash) {
  size_t k = hash & (n_slots - 1);
  while (slots[k].node >= 0) k = (k + 1) & (n_slots - 1);
  slots[k].node = i;
  slots[k].hash = hash;
}

/* Makes room in the index for one more node, keeping it at most half full. */
static bool index_reserve(dt_graph *g) {
  if ((size_t)(g->n_nodes + 1) * 2 <= g->n_name_slots) return true;
  size_t n_slots = g->n_name_slots ? g->n_name_slots * 2 : 64;
  struct dt_name_slot *slots = dt__alloc(sizeof *slots * n_slots);
  if (!slots) return false;
  for (size_t k = 0; k < n_slots; k++) slots[k].node = -1;
  for (size_t k = 0; k < g->n_name_slots; k++) {
    const struct dt_name_slot *old = &g->name_slots[k];
    if (old->node >= 0) index_insert(slots, n_slots, old->node, old->hash);
  }
  dt__free(g->name_slots);
  g->name_slots = slots;
  g->n_name_slots = n_slots;
  return true;
}

static int find_hashed(const dt_graph *g, const char *name, uint32_t hash) {
  if (g->n_name_slots == 0) return -1;
  size_t mask = g->n_name_slots - 1;
  for (size_t k = hash & mask; g->name_slots[k].node >= 0; k = (k + 1) & mask) {
    const struct dt_name_slot *slot = &g->name_slots[k];
    if (slot->hash == hash && strcmp(g->nodes[slot->node].name, name) == 0) return slot->node;
  }
  return -1;
}

int dt__graph_find(const dt_graph *g, const char *name) {
  return find_hashed(g, name, name_hash(name));
}

int dt__graph_add_node(dt_graph *g, dt_node_kind kind, const char *name) {
  if (g->n_nodes >= DT_GRAPH_MAX_NODES || !index_reserve(g)) return -1;
  if (!dt__reserve_arrays(g->n_nodes, &g->capacity, 32, 1, (void *[]){&g->nodes},
                          (size_t[]){sizeof *g->nodes})) {
    return -1;
  }
  char unique[160];
  snprintf(unique, sizeof unique, "%s", name);
  uint32_t hash = name_hash(unique);
  for (int k = 1; find_hashed(g, unique, hash) >= 0; k++) {
    snprintf(unique, sizeof unique, "%s_%d", name, k);
    hash = name_hash(unique);
  }
  char *copy = dt__arena_strdup(&g->arena, unique);
  if (!copy) return -1;
  dt_node *n = &g->nodes[g->n_nodes];
  memset(n, 0, sizeof *n);
  n->kind = kind;
  n->name = copy;
  for (int k = 0; k < DT_OP_MAX_INPUTS; k++) n->inputs[k] = -1;
  index_insert(g->name_slots, g->n_name_slots, g->n_nodes, hash);
  return g->n_nodes++;
}

dt_status dt__graph_node_types(dt_graph *g, int i, int n_out) {
  dt_value_type *t = dt__arena_alloc(&g->arena, sizeof *t * (size_t)(n_out > 0 ? n_out : 1));
  if (!t) return dt__error(DT_ERR_NOMEM, "out of memory building a graph");
  for (int k = 0; k < n_out; k++) memset(t[k].sym, DT_NO_SYMBOL, sizeof t[k].sym);
  g->nodes[i].types = t;
  g->nodes[i].n_out = n_out;
  return DT_OK;
}

dt_status dt__graph_node_set_call(dt_graph *g, int i, const dt_op_call *call) {
  dt_node *n = &g->nodes[i];
  n->target = (int)call->op;
  n->n_ints = call->n_ints < 0 ? 0 : call->n_ints > DT_OP_MAX_INTS ? DT_OP_MAX_INTS : call->n_ints;
  memcpy(n->ints, call->ints, sizeof n->ints);
  for (int k = n->n_ints; k < DT_OP_MAX_INTS; k++) n->ints[k] = 0;
  n->n_int_list = call->int_list && call->n_int_list > 0 ? call->n_int_list : 0;
  if (n->n_int_list) {
    n->int_list = dt__arena_alloc(&g->arena, sizeof(int64_t) * (size_t)n->n_int_list);
    if (!n->int_list) return dt__error(DT_ERR_NOMEM, "out of memory building a graph");
    memcpy(n->int_list, call->int_list, sizeof(int64_t) * (size_t)n->n_int_list);
  }
  n->scalars[0] = call->scalars[0];
  n->scalars[1] = call->scalars[1];
  n->dtype = call->dtype;
  n->flags = call->flags;
  n->is_tuple = dt__op_returns_tuple(call->op);
  return DT_OK;
}

int dt__graph_output_node(const dt_graph *g) {
  return g->n_nodes > 0 && g->nodes[g->n_nodes - 1].kind == DT_NODE_OUTPUT ? g->n_nodes - 1 : -1;
}

dt_status dt_graph_clone(const dt_graph *graph, dt_graph **out) {
  dt_graph *g = NULL;
  dt_status st = dt__graph_create_from("dt_graph_clone", graph, "graph", out, &g);
  if (st) return st;
  g->n_symbols = graph->n_symbols;
  memcpy(g->symbol_hints, graph->symbol_hints, sizeof g->symbol_hints);
  g->world_size = graph->world_size;
  g->rank = graph->rank;
  for (int i = 0; i < graph->n_nodes && !st; i++) {
    const dt_node *src = &graph->nodes[i];
    int j = dt__graph_add_node(g, src->kind, src->name);
    if (j < 0) {
      st = dt__error(DT_ERR_NOMEM, "dt_graph_clone: out of memory");
      break;
    }
    dt_node *n = &g->nodes[j];
    const char *name = n->name;
    *n = *src;
    n->name = name;
    n->list = NULL;
    n->int_list = NULL;
    n->types = NULL;
    if (src->n_list) {
      n->list = dt__arena_alloc(&g->arena, sizeof(int) * (size_t)src->n_list);
      if (n->list) memcpy(n->list, src->list, sizeof(int) * (size_t)src->n_list);
    }
    if (src->n_int_list) {
      n->int_list = dt__arena_alloc(&g->arena, sizeof(int64_t) * (size_t)src->n_int_list);
      if (n->int_list)
        memcpy(n->int_list, src->int_list, sizeof(int64_t) * (size_t)src->n_int_list);
    }
    if (src->n_out) {
      n->types = dt__arena_alloc(&g->arena, sizeof *n->types * (size_t)src->n_out);
      if (n->types) memcpy(n->types, src->types, sizeof *n->types * (size_t)src->n_out);
    }
    if ((src->n_list && !n->list) || (src->n_int_list && !n->int_list) ||
        (src->n_out && !n->types)) {
      st = dt__error(DT_ERR_NOMEM, "dt_graph_clone: out of memory");
    }
  }
  if (st) {
    dt_graph_destroy(g);
    return st;
  }
  *out = g;
  return DT_OK;
}

/* ---- Inspection --------------------------------------------------------------------------------
 */

int dt_graph_node_count(const dt_graph *graph) { return graph ? graph->n_nodes : 0; }

int dt_graph_count_target(const dt_graph *graph, const char *target) {
  if (!graph || !target) return 0;
  size_t len = strlen(target);
  int count = 0;
  for (int i = 0; i < graph->n_nodes; i++) {
    const dt_node *n = &graph->nodes[i];
    const char *name = NULL;
    if (n->kind == DT_NODE_CALL)
      name = dt__op_table[n->target].name;
    else if (n->kind == DT_NODE_COMM)
      name = dt__comm_target_names[n->target];
    if (!name) continue;
    if (strcmp(name, target) == 0 || (strncmp(name, target, len) == 0 && name[len] == '.')) count++;
  }
  return count;
}

int dt_graph_input_count(const dt_graph *graph) {
  int count = 0;
  for (int i = 0; graph && i < graph->n_nodes; i++)
    count += graph->nodes[i].kind == DT_NODE_PLACEHOLDER;
  return count;
}

int dt_graph_output_count(const dt_graph *graph) {
  int o = graph ? dt__graph_output_node(graph) : -1;
  return o < 0 ? 0 : graph->nodes[o].n_list;
}

int dt_graph_world_size(const dt_graph *graph) { return graph ? graph->world_size : 0; }
int dt_graph_rank(const dt_graph *graph) { return graph ? graph->rank : 0; }

/* ---- Value types --------------------------------------------------------------------------------
 */

void dt__type_from_tensor(dt_value_type *t, const dt_tensor *x) {
  t->dtype = x->dtype;
  t->ndim = x->ndim;
  memset(t->shape, 0, sizeof t->shape);
  memcpy(t->shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
  memset(t->sym, DT_NO_SYMBOL, sizeof t->sym);
}

bool dt__type_equal(const dt_value_type *a, const dt_value_type *b) {
  if (a->dtype != b->dtype || a->ndim != b->ndim) return false;
  for (int d = 0; d < a->ndim; d++) {
    if (a->shape[d] != b->shape[d] || a->sym[d] != b->sym[d]) return false;
  }
  return true;
}

static const char *const short_dtype[DT_DTYPE_COUNT] = {"f32", "f64", "bf16", "f16",
                                                        "i64", "i32", "u8",   "b8"};

char *dt__type_format(char *buf, size_t size, const dt_value_type *t) {
  size_t used = 0;
  int n = snprintf(buf, size, "%s[", dt__dtype_valid(t->dtype) ? short_dtype[t->dtype] : "?");
  used = n > 0 ? (size_t)n : 0;
  for (int d = 0; d < t->ndim && used < size; d++) {
    if (t->sym[d] >= 0)
      n = snprintf(buf + used, size - used, "%ss%d", d ? ", " : "", t->sym[d]);
    else
      n = snprintf(buf + used, size - used, "%s%" PRId64, d ? ", " : "", t->shape[d]);
    used += n > 0 ? (size_t)n : 0;
  }
  if (used < size) snprintf(buf + used, size - used, "]");
  return buf;
}

const char *dt__placement_text(dt_placement p, char *buf, size_t size) {
  switch (p.kind) {
  case DT_SHARD: snprintf(buf, size, "S(%d)", p.dim); break;
  case DT_PARTIAL: snprintf(buf, size, "P(%s)", dt_reduce_op_name(p.op)); break;
  case DT_STRIDED_SHARD: snprintf(buf, size, "SS(%d,%d)", p.dim, p.split_factor); break;
  default: snprintf(buf, size, "R"); break;
  }
  return buf;
}

void dt__fake_tensor(dt_tensor *fake, const dt_value_type *t, const int64_t *symbol_values) {
  memset(fake, 0, sizeof *fake);
  fake->dtype = t->dtype;
  fake->ndim = t->ndim;
  for (int d = 0; d < t->ndim; d++) {
    fake->shape[d] = t->sym[d] >= 0 && symbol_values ? symbol_values[t->sym[d]] : t->shape[d];
  }
  dt__contiguous_strides(fake->ndim, fake->shape, fake->strides);
  atomic_init(&fake->refcount, 1);
}

/* Every attribute lives in this one copy so that a new node field reaches all call builders. */
void dt__node_call_attributes(const dt_node *n, dt_op_call *call) {
  memset(call, 0, sizeof *call);
  call->op = (dt_op)n->target;
  call->n_inputs = n->n_inputs;
  call->n_ints = n->n_ints;
  memcpy(call->ints, n->ints, sizeof call->ints);
  call->int_list = n->int_list;
  call->n_int_list = n->n_int_list;
  call->scalars[0] = n->scalars[0];
  call->scalars[1] = n->scalars[1];
  call->dtype = n->dtype;
  call->flags = n->flags;
}

void dt__graph_build_call(const dt_graph *g, int i, dt_tensor *const *values,
                          dt_tensor **list_storage, dt_tensor **outs, dt_op_call *call) {
  const dt_node *n = &g->nodes[i];
  dt__node_call_attributes(n, call);
  for (int k = 0; k < n->n_inputs; k++)
    call->inputs[k] = n->inputs[k] >= 0 ? values[n->inputs[k]] : NULL;
  if (n->has_list) {
    for (int k = 0; k < n->n_list; k++) list_storage[k] = values[n->list[k]];
    call->input_list = list_storage;
    call->n_input_list = n->n_list;
  }
  call->n_outputs = dt__op_table[n->target].kind == DT_OP_KIND_INPLACE ? 0 : n->n_out;
  call->outputs = outs;
}

dt_status dt__graph_infer_call(const dt_graph *g, int i, const int64_t *symbol_values,
                               dt_tensor_meta *metas, int *n_out) {
  const dt_node *n = &g->nodes[i];
  dt_tensor fakes[DT_OP_MAX_INPUTS + 1];
  int nl = n->n_list;
  dt_tensor *list_fakes = nl ? dt__alloc(sizeof(dt_tensor) * (size_t)nl) : NULL;
  dt_tensor **list_ptrs = nl ? dt__alloc(sizeof(dt_tensor *) * (size_t)nl) : NULL;
  if (nl && (!list_fakes || !list_ptrs)) {
    dt__free(list_fakes);
    dt__free(list_ptrs);
    return dt__error(DT_ERR_NOMEM, "out of memory building a graph");
  }
  dt_op_call call;
  dt__node_call_attributes(n, &call);
  dt_tensor *outs[DT_OP_MAX_META];
  for (int k = 0; k < n->n_inputs; k++) {
    if (n->inputs[k] < 0) continue;
    dt__fake_tensor(&fakes[k], dt__value_type(g, n->inputs[k]), symbol_values);
    call.inputs[k] = &fakes[k];
  }
  for (int k = 0; k < nl; k++) {
    dt__fake_tensor(&list_fakes[k], dt__value_type(g, n->list[k]), symbol_values);
    list_ptrs[k] = &list_fakes[k];
  }
  call.input_list = list_ptrs;
  call.n_input_list = n->has_list ? nl : 0;
  const dt_op_def *def = &dt__op_table[n->target];
  int capacity = n->n_out > 0 && n->n_out <= DT_OP_MAX_META ? n->n_out : DT_OP_MAX_META;
  call.n_outputs = def->kind == DT_OP_KIND_INPLACE ? 0 : n->is_tuple ? capacity : 1;
  call.outputs = outs;
  dt_status st = DT_OK;
  for (int k = 0; k < def->n_required && !st; k++) {
    if (!call.inputs[k]) st = dt__error(DT_ERR_INVALID, "%s: input %d is None", def->name, k);
  }
  if (!st) st = def->infer(&call, metas);
  if (!st && def->kind == DT_OP_KIND_INPLACE) {
    /* The value of an in-place node is its (mutated) first input. */
    dt__meta_set(&metas[0], fakes[0].dtype, fakes[0].ndim, fakes[0].shape);
    call.n_outputs = 1;
  }
  if (!st) *n_out = call.n_outputs;
  dt__free(list_fakes);
  dt__free(list_ptrs);
  return st;
}
