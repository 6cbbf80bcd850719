/*
 * Private interface of the graph layer: the IR (nodes in an arena per graph), shape
 * inference over a graph, programs, and the module tree.
 */
#ifndef DT_GRAPH_IMPL_H
#define DT_GRAPH_IMPL_H

#include "distributed/dist_impl.h"
#include "dtensor/graph.h"
#include "dtensor/nn.h"
#include "ops/op_impl.h"

/* ---- Values and nodes ----------------------------------------------------------------------- */

#define DT_GRAPH_MAX_SYMBOLS 16
#define DT_NO_SYMBOL (-1)

/* Type of a value: dtype and shape, where dim d is symbol sym[d] when sym[d] >= 0 (shape[d]
 * then holds the size the symbol had when traced, its hint). */
typedef struct dt_value_type {
  dt_dtype dtype;
  int ndim;
  int64_t shape[DT_MAX_DIMS];
  int8_t sym[DT_MAX_DIMS];
} dt_value_type;

typedef enum dt_node_kind {
  DT_NODE_PLACEHOLDER = 0,
  DT_NODE_PARAMETER,
  DT_NODE_BUFFER,
  DT_NODE_CALL,
  DT_NODE_GETITEM,
  DT_NODE_COMM,
  DT_NODE_OUTPUT,
  /* Compiled graphs only (src/compile/redist_node.c): inputs[0] redistributed; int_list holds
   * the mesh's dim count, then the source and the target placements. */
  DT_NODE_REDISTRIBUTE,
} dt_node_kind;

/* Communication node targets; the first four index dt_run_stats. */
typedef enum dt_comm_target {
  DT_COMM_ALL_GATHER = 0,
  DT_COMM_ALL_REDUCE = 1,
  DT_COMM_REDUCE_SCATTER = 2,
  DT_COMM_ALL_TO_ALL = 3,
  DT_COMM_WAIT = 4,
  DT_COMM_TARGET_COUNT
} dt_comm_target;

extern const char *const dt__comm_target_names[DT_COMM_TARGET_COUNT];

typedef struct dt_node {
  dt_node_kind kind;
  const char *name; /* unique in the graph; for parameters and buffers the FQN */
  int target;       /* CALL: dt_op; COMM: dt_comm_target */
  int n_inputs;
  int inputs[DT_OP_MAX_INPUTS]; /* node indices; -1 for an absent optional input */
  bool has_list;                /* CALL: the op takes a tensor list; OUTPUT: returned values */
  int n_list;
  int *list;
  /* CALL attributes, as dt_op_call holds them before dispatch. GETITEM: ints[0] = index.
   * COMM: ints[0] = dim (gather/scatter dim; all_to_all: the dim sharded before),
   * ints[1] = all_to_all's new shard dim, reduce_op for all_reduce / reduce_scatter. */
  int n_ints;
  int64_t ints[DT_OP_MAX_INTS];
  int n_int_list;
  int64_t *int_list;
  double scalars[2];
  dt_dtype dtype;
  int flags;
  dt_reduce_op reduce_op;
  /* Result: one value, or a tuple of n_out values (multi-output ops). */
  bool is_tuple;
  int n_out;
  dt_value_type *types;
  bool has_placement; /* transformed graphs */
  dt_placement placement;
} dt_node;

/* The most nodes a graph holds, its return node included. Nodes are addressed by int and
 * parsing holds every node in memory (a few hundred bytes each), so this bounds both. */
#define DT_GRAPH_MAX_NODES (1 << 22)

struct dt_graph {
  dt__arena arena; /* nodes, names and types: freed with the graph */
  dt_node *nodes;
  int n_nodes, capacity;
  /* Name index: open addressing, at most half full, so that finding a node by name does not
   * scan the graph. A slot keeps the name's hash so that probing past other names does not
   * touch their nodes. */
  struct dt_name_slot *name_slots;
  size_t n_name_slots; /* 0 or a power of two */
  int n_symbols;
  int64_t symbol_hints[DT_GRAPH_MAX_SYMBOLS];
  int world_size, rank; /* 0, 0 unless transformed */
};

/* What a call node of an op may hold, read from the op's ATen schema (src/graph/schema.c):
 * the positional tensor arguments (Tensor and Tensor? parameters; a Tensor[] is the list)
 * and the Scalar / float parameters, which fill scalars[] in schema order, with their
 * defaults. Slots past n_scalars are not the schema's (the binary ops keep an unused alpha
 * there). */
typedef struct dt_op_signature {
  int max_inputs;
  int n_scalars;
  bool scalar_has_default[2];
  double scalar_default[2];
  char scalar_name[2][24];
} dt_op_signature;

void dt__op_signature(int op, dt_op_signature *sig);

/* True for ops that return a tuple (split, chunk, max.dim, ...). */
bool dt__op_returns_tuple(int op);
/* The op called name (ATen overload name) or -1. */
int dt__op_by_name(const char *name, size_t len);

dt_status dt__graph_create(dt_graph **out);
/* The start of a public function `fn` that makes a graph from `input` (named input_name in
 * messages): refuses a NULL out or input, sets *out to NULL and creates an empty graph in *g. */
dt_status dt__graph_create_from(const char *fn, const void *input, const char *input_name,
                                dt_graph **out, dt_graph **g);
/* Appends a zeroed node named `name` (made unique: name, name_1, ...) and returns its index,
 * or -1 when out of memory or the graph already holds DT_GRAPH_MAX_NODES nodes. Pointers to
 * nodes are invalidated by the next append. */
int dt__graph_add_node(dt_graph *g, dt_node_kind kind, const char *name);
/* Gives node i n_out types (zeroed) in the arena. */
dt_status dt__graph_node_types(dt_graph *g, int i, int n_out);
/* Copies a call record's attributes (not its tensors) into node i. */
dt_status dt__graph_node_set_call(dt_graph *g, int i, const dt_op_call *call);
/* The index of the node called name, or -1 (a hash lookup). */
int dt__graph_find(const dt_graph *g, const char *name);
/* The node of the return node; -1 when the graph has none. */
int dt__graph_output_node(const dt_graph *g);

/* ---- The builder (src/graph/builder.c): export and the TP transformation append nodes
 * through it. ------------------------------------------------------------------------------ */

/* Appends a call node of call->op with the call's attributes (not its tensors), inputs
 * inputs[0..call->n_inputs) (node indices, -1 for an absent optional), the tensor list
 * list[0..n_list) (copied) and n_out zeroed types. name NULL: the op's ATen name without
 * its overload. *out gets the node's index. */
dt_status dt__graph_add_call(dt_graph *g, const char *name, const dt_op_call *call,
                             const int *inputs, int n_list, const int *list, int n_out, int *out);

/* A tracer's map from a tensor argument to its graph value (a node, made if needed). */
typedef dt_status (*dt_graph_value_fn)(void *tracer, dt_tensor *x, int *node);

/* Records a traced op call as a node (export and compile): each tensor argument becomes a
 * value through value_of, an in-place op has one result (its first input), done is the call
 * that ran (its n_outputs). Errors name fn. *out is the new node's index. */
dt_status dt__graph_record_call(dt_graph *g, const dt_op_call *given, const dt_op_call *done,
                                dt_graph_value_fn value_of, void *tracer, const char *fn,
                                int *n_out, int *out);

/* Appends a collective of `kind` on node `input` (dim: the gather / scatter dim or the dim
 * all_to_all shards before, new_dim: all_to_all's new shard dim, op: the reduction) and the
 * wait_tensor that completes it, both of type t; *out gets the wait node's index. */
dt_status dt__graph_add_comm(dt_graph *g, dt_comm_target kind, int input, int dim, int new_dim,
                             dt_reduce_op op, const dt_value_type *t, int *out);

/* Value type helpers. */
void dt__type_from_tensor(dt_value_type *t, const dt_tensor *x);
bool dt__type_equal(const dt_value_type *a, const dt_value_type *b);
char *dt__type_format(char *buf, size_t size, const dt_value_type *t);

/* A tensor handle without storage carrying t's geometry (shape at the symbols' values), for
 * running infer functions and sharding rules on metadata. */
void dt__fake_tensor(dt_tensor *fake, const dt_value_type *t, const int64_t *symbol_values);

/* Clears *call and copies node n's op, input count and attributes (ints, int list, scalars,
 * dtype, flags) into it; the caller sets inputs and outputs. */
void dt__node_call_attributes(const dt_node *n, dt_op_call *call);

/* Rebuilds a call record from node i: inputs from `values` (per node; NULL absent),
 * attributes from the node, outputs into `outs` (capacity n_out). list_storage must hold
 * node->n_list entries. */
void dt__graph_build_call(const dt_graph *g, int i, dt_tensor *const *values,
                          dt_tensor **list_storage, dt_tensor **outs, dt_op_call *call);

/* The tensor-list array a call rebuilt from a node needs: the inline entries when the list
 * fits (the common case, no allocation), else a heap array. */
typedef struct dt_call_list {
  dt_tensor *inline_entries[64];
  dt_tensor **entries;
} dt_call_list;

/* Points l->entries at room for n entries; returns it, NULL when out of memory. */
static inline dt_tensor **dt__call_list_init(dt_call_list *l, int n) {
  l->entries = n <= 64 ? l->inline_entries : dt__alloc(sizeof(dt_tensor *) * (size_t)n);
  return l->entries;
}

static inline void dt__call_list_free(dt_call_list *l) {
  if (l->entries != l->inline_entries) dt__free(l->entries);
}

/* Runs the op's infer on fake inputs of the types of node i's inputs (sizes at the symbol
 * values) and writes the output metas; *n_out gets the output count. */
dt_status dt__graph_infer_call(const dt_graph *g, int i, const int64_t *symbol_values,
                               dt_tensor_meta *metas, int *n_out);

/* The type of node j's value k (k = 0 unless j is a tuple). */
static inline const dt_value_type *dt__value_type(const dt_graph *g, int j) {
  return &g->nodes[j].types[0];
}

/* Text of a placement ("R", "S(1)", "P(sum)"). */
const char *dt__placement_text(dt_placement p, char *buf, size_t size);

/* ---- Programs ------------------------------------------------------------------------------ */

typedef struct dt_module_info {
  char *fqn;
  char *type;
} dt_module_info;

struct dt_program {
  dt_graph *graph;
  int n_state;
  char **state_names;
  dt_tensor **state_tensors;
  int n_modules;
  dt_module_info *modules;
};

/* Makes a program that takes ownership of graph (destroyed on failure too). */
dt_status dt__program_create_owned(const char *fn, dt_graph *graph, int n, const char *const *names,
                                   dt_tensor *const *tensors, dt_program **out);
/* Records the module table (copied). */
dt_status dt__program_set_modules(const char *fn, dt_program *p, int n, const char *const *fqns,
                                  const char *const *types);

/* ---- The tracers' tensor -> value map (graph/value_map.c) ------------------------------ */

/* What a traced tensor handle stands for: a node, or an element of a tuple node. */
typedef struct dt_value_entry {
  dt_tensor *tensor; /* retained by the map */
  int node;
  int item; /* element of a tuple node, or -1 */
} dt_value_entry;

/* Zero-initialized: empty. Lookups are hashed on the handle's address. */
typedef struct dt_value_map {
  dt_value_entry *entries;
  int n, cap;
  int *index; /* open addressing: entry numbers, -1 empty; index_cap a power of two */
  int index_cap;
} dt_value_map;

/* The entry of x, or NULL. */
dt_value_entry *dt__value_map_find(const dt_value_map *m, const dt_tensor *x);
/* Maps x to (node, item), retaining it; an x already mapped (an in-place op) is re-pointed.
 * DT_ERR_NOMEM names fn. */
dt_status dt__value_map_set(dt_value_map *m, dt_tensor *x, int node, int item, const char *fn);
/* Releases every tensor and the map's memory; the map is empty again. */
void dt__value_map_clear(dt_value_map *m);

#endif /* DT_GRAPH_IMPL_H */
