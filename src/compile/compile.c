/*
 * dt_compile: traces a function over tensors into variants (a graph, symbolic shapes and
 * guards each) and runs the first variant whose guards hold. See include/dtensor/compile.h.
 *
 * Tracing reuses export's approach: the function runs eagerly under a dispatch mode that
 * records every op call (attributes as the caller gave them) as a call node of a dt_graph,
 * tensors recognized by identity; tensors the trace has not seen become constants. Each
 * recorded value also gets its dims as symbolic expressions (compile/shape_rules.c), checked
 * against the traced sizes, and the guards the rules assumed.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "compile/compile_impl.h"
#include "dtensor/autograd.h"
#include "dtensor/dist.h"
#include "dtensor/mesh.h"
#include "dtensor/mode.h"

#define MAX_ARGS 64
#define DEFAULT_CACHE_LIMIT 8

/* What a variant requires of input i beyond the symbolic guards. */
typedef struct input_desc {
  dt_dtype dtype;
  int ndim;
  bool dist;
  uint64_t mesh_id;
  int mesh_ndim;
  dt_placement placements[DT_MESH_MAX_DIMS];
  int64_t shape[DT_MAX_DIMS]; /* traced sizes (the required ones for static dims) */
  int sym[DT_MAX_DIMS];       /* the dim's symbol, or -1 when static */
} input_desc;

/* A direct node's precomputed work: its call (attributes as infer left them; inputs filled
 * on each call), output handle, kernel, symbolic dims and buffer slot, together in one place
 * so that a call touches one cache line or two per node. */
typedef struct direct_step {
  dt_op_call call;
  dt_tensor *handle;
  dt_op_kernel_fn kernel;
  int ndim, slot, n_inputs;
  size_t elem_size;
  int dims[DT_MAX_DIMS];
  int inputs[DT_OP_MAX_INPUTS];
} direct_step;

typedef struct variant {
  dt_graph *g;
  input_desc *inputs;
  int n_symbols;
  int64_t *hints; /* the symbols' traced values */
  dt_sx_pool pool;
  int **dims;                /* per node: n_out * DT_MAX_DIMS expressions of its global dims */
  dt_placement **placements; /* per node: its traced placements, NULL when local */
  int **local_dims;          /* per node: this rank's shard dims as expressions, NULL when local */
  /* Per node: a distributed call whose sharding was decided at trace time (see dist_plan.c),
   * its mesh and the spec its last output had (retained, reused while the global shape
   * stays). */
  bool *dist_plain;
  dt_mesh **dist_mesh;
  dt_dist_spec **dist_spec;
  int *mesh_ndim;
  int n_guards, cap_guards;
  dt_guard *guards;
  dt_tensor **constants; /* per node: the constant a buffer node holds (retained) */
  int *last_use;
  int *tuple_base; /* per node: its first slot in tuple_vals, or -1 */
  /* The direct path (see plan_buffers): per node the call as infer left it, whether the node
   * runs its kernel directly into a planned buffer, its buffer slot and output handle. */
  dt_op_call *templates;
  bool *direct;
  int *slot_of;
  dt_tensor **handles;
  int n_slots;
  dt_tensor **slot_buf; /* per slot: a byte tensor whose storage the handles point into */
  size_t *slot_bytes;
  struct direct_step *steps; /* per node; filled for direct nodes */
  /* Per node: the owned values whose last use it is (release_list[release_at[i] ..
   * release_at[i + 1])), so that a call does not scan every input of every node. */
  int *release_at, *release_list;
  /* Call-time scratch, allocated once: one thread calls a dt_compiled at a time. */
  dt_tensor **values;
  dt_tensor **tuple_vals;
  bool *owned;
  int64_t *symvals, *exprvals;
} variant;

struct dt_compiled {
  dt_compile_fn fn;
  void *user;
  int n_in, n_out;
  bool all_dynamic;
  int n_marks;
  dt_compile_mark *marks;
  int cache_limit;
  bool log_recompiles;
  bool warned_eager;
  int n_variants;
  variant *variants[64];
  dt_compile_stats stats;
  int n_reasons;
  char **reasons;
};

/* ---- Variants -------------------------------------------------------------------------- */

static void variant_destroy(variant *v) {
  if (!v) return;
  int n = v->g ? v->g->n_nodes : 0;
  for (int i = 0; i < n; i++) {
    if (v->dims) dt__free(v->dims[i]);
    if (v->placements) dt__free(v->placements[i]);
    if (v->local_dims) dt__free(v->local_dims[i]);
    if (v->dist_spec && v->dist_spec[i]) dt__spec_release(v->dist_spec[i]);
    if (v->constants) dt_tensor_release(v->constants[i]);
  }
  for (int i = 0; v->handles && i < n; i++) {
    /* Planned handles point into their slot's storage without holding it. */
    if (v->handles[i]) dt__free(v->handles[i]);
  }
  for (int k = 0; k < v->n_slots; k++) dt_tensor_release(v->slot_buf[k]);
  dt__free(v->handles);
  dt__free(v->steps);
  dt__free(v->release_at);
  dt__free(v->release_list);
  dt__free(v->slot_buf);
  dt__free(v->slot_bytes);
  dt__free(v->slot_of);
  dt__free(v->direct);
  dt__free(v->templates);
  dt__free(v->dims);
  dt__free(v->placements);
  dt__free(v->local_dims);
  dt__free(v->dist_plain);
  dt__free(v->dist_mesh);
  dt__free(v->dist_spec);
  dt__free(v->mesh_ndim);
  dt__free(v->constants);
  dt__free(v->inputs);
  dt__free(v->hints);
  dt__sx_pool_free(&v->pool);
  dt__free(v->guards);
  dt__free(v->last_use);
  dt__free(v->tuple_base);
  dt__free(v->values);
  dt__free(v->tuple_vals);
  dt__free(v->owned);
  dt__free(v->symvals);
  dt__free(v->exprvals);
  dt_graph_destroy(v->g);
  dt__free(v);
}

/* Grows the per-node arrays to the graph's node count. */
static dt_status grow_nodes(variant *v, int *cap) {
  if (v->g->n_nodes <= *cap) return DT_OK;
  int n = *cap ? 2 * *cap : 64;
  while (n < v->g->n_nodes) n *= 2;
  int **dims = dt__calloc(sizeof *dims * (size_t)n);
  dt_placement **pl = dt__calloc(sizeof *pl * (size_t)n);
  int *mnd = dt__calloc(sizeof *mnd * (size_t)n);
  dt_tensor **consts = dt__calloc(sizeof *consts * (size_t)n);
  dt_op_call *templates = dt__calloc(sizeof *templates * (size_t)n);
  int **local = dt__calloc(sizeof *local * (size_t)n);
  bool *plain = dt__calloc(sizeof *plain * (size_t)n);
  dt_mesh **meshes = dt__calloc(sizeof *meshes * (size_t)n);
  dt_dist_spec **specs = dt__calloc(sizeof *specs * (size_t)n);
  if (!dims || !pl || !mnd || !consts || !templates || !local || !plain || !meshes || !specs) {
    dt__free(plain);
    dt__free(meshes);
    dt__free(specs);
    dt__free(local);
    dt__free(templates);
    dt__free(dims);
    dt__free(pl);
    dt__free(mnd);
    dt__free(consts);
    return dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
  }
  if (*cap) {
    memcpy(dims, v->dims, sizeof *dims * (size_t)*cap);
    memcpy(pl, v->placements, sizeof *pl * (size_t)*cap);
    memcpy(mnd, v->mesh_ndim, sizeof *mnd * (size_t)*cap);
    memcpy(consts, v->constants, sizeof *consts * (size_t)*cap);
    memcpy(templates, v->templates, sizeof *templates * (size_t)*cap);
    memcpy(local, v->local_dims, sizeof *local * (size_t)*cap);
    memcpy(plain, v->dist_plain, sizeof *plain * (size_t)*cap);
    memcpy(meshes, v->dist_mesh, sizeof *meshes * (size_t)*cap);
  }
  dt__free(v->dist_plain);
  dt__free(v->dist_mesh);
  dt__free(v->dist_spec);
  v->dist_plain = plain;
  v->dist_mesh = meshes;
  v->dist_spec = specs;
  dt__free(v->local_dims);
  v->local_dims = local;
  dt__free(v->templates);
  v->templates = templates;
  dt__free(v->dims);
  dt__free(v->placements);
  dt__free(v->mesh_ndim);
  dt__free(v->constants);
  v->dims = dims;
  v->placements = pl;
  v->mesh_ndim = mnd;
  v->constants = consts;
  *cap = n;
  return DT_OK;
}

static dt_status add_guard(variant *v, const dt_guard *g) {
  for (int i = 0; i < v->n_guards; i++) { /* the same fact once */
    const dt_guard *o = &v->guards[i];
    if (o->kind == g->kind && o->a == g->a && o->b == g->b && o->c == g->c) return DT_OK;
  }
  if (v->n_guards == v->cap_guards) {
    int cap = v->cap_guards ? 2 * v->cap_guards : 16;
    dt_guard *gs = dt__alloc(sizeof *gs * (size_t)cap);
    if (!gs) return dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
    if (v->n_guards) memcpy(gs, v->guards, sizeof *gs * (size_t)v->n_guards);
    dt__free(v->guards);
    v->guards = gs;
    v->cap_guards = cap;
  }
  v->guards[v->n_guards++] = *g;
  return DT_OK;
}

/* ---- Tracing ------------------------------------------------------------------------------ */

typedef struct trace_entry {
  dt_tensor *tensor; /* retained */
  int node;
  int item; /* element of a tuple node, or -1 */
} trace_entry;

typedef struct tracer {
  variant *v;
  int node_cap;
  trace_entry *map;
  int n_map, cap_map;
  int n_constants;
  dt_status error;
  const char *refused;
} tracer;

static trace_entry *lookup(tracer *tr, const dt_tensor *x) {
  for (int i = tr->n_map - 1; i >= 0; i--) {
    if (tr->map[i].tensor == x) return &tr->map[i];
  }
  return NULL;
}

static dt_status map_tensor(tracer *tr, dt_tensor *x, int node, int item) {
  trace_entry *e = lookup(tr, x);
  if (e) { /* an in-place op: the handle now stands for the new node */
    e->node = node;
    e->item = item;
    return DT_OK;
  }
  if (tr->n_map == tr->cap_map) {
    int cap = tr->cap_map ? tr->cap_map * 2 : 64;
    trace_entry *m = dt__alloc(sizeof *m * (size_t)cap);
    if (!m) return dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
    if (tr->n_map) memcpy(m, tr->map, sizeof *m * (size_t)tr->n_map);
    dt__free(tr->map);
    tr->map = m;
    tr->cap_map = cap;
  }
  tr->map[tr->n_map++] = (trace_entry){dt_tensor_retain(x), node, item};
  return DT_OK;
}

/* Global dims and dtype of x (a distributed tensor's, not its shard's). */
static void type_of(dt_value_type *t, const dt_tensor *x) {
  dt__type_from_tensor(t, x);
  if (x->spec) {
    t->ndim = x->spec->ndim;
    memcpy(t->shape, x->spec->shape, sizeof(int64_t) * (size_t)t->ndim);
  }
}

/* The size of this rank's piece of a dim of size n split over W ranks as torch.chunk splits
 * it (pieces of ceil(n / W), the last ones smaller or empty), r being this rank's coordinate:
 * max(0, min(ceil(n / W), n - r * ceil(n / W))). */
static int shard_size(dt_sx_pool *p, int n, int w, int r) {
  if (w == 1) return n;
  int chunk = dt__sx_ceildiv(p, n, dt__sx_const(p, w));
  int rest = dt__sx_sub(p, n, dt__sx_mul(p, chunk, dt__sx_const(p, r)));
  return dt__sx_max(p, dt__sx_const(p, 0), dt__sx_min(p, chunk, rest));
}

/* The local dims of a distributed value as expressions of its global dims, mesh dim by mesh
 * dim (a dim sharded on several mesh dims is split again on each); kept only when they give
 * the traced shard's shape. */
static dt_status set_local_dims(variant *v, int i, const dt_tensor *x, const int *dims) {
  const dt_dist_spec *spec = x->spec;
  int local[DT_MAX_DIMS];
  memcpy(local, dims, sizeof(int) * (size_t)spec->ndim);
  for (int m = 0; m < spec->mesh_ndim; m++) {
    dt_placement pl = spec->placements[m];
    if (pl.kind != DT_SHARD || pl.dim < 0 || pl.dim >= spec->ndim) continue;
    local[pl.dim] = shard_size(&v->pool, local[pl.dim], dt_mesh_size(spec->mesh, m),
                               dt_mesh_coordinate(spec->mesh, m));
  }
  if (v->pool.oom) return dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
  for (int d = 0; d < spec->ndim; d++) {
    if (x->ndim != spec->ndim || dt__sx_eval(&v->pool, local[d], v->hints) != x->shape[d])
      return DT_OK;
  }
  v->local_dims[i] = dt__alloc(sizeof(int) * DT_MAX_DIMS);
  if (!v->local_dims[i]) return dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
  memcpy(v->local_dims[i], local, sizeof(int) * (size_t)spec->ndim);
  return DT_OK;
}

/* Node i's value k: its type, symbolic dims (NULL: constants of its shape) and placements. */
static dt_status set_value(tracer *tr, int i, int k, const dt_tensor *x, const int *sdims) {
  variant *v = tr->v;
  dt_status st = grow_nodes(v, &tr->node_cap);
  if (st) return st;
  dt_node *n = &v->g->nodes[i];
  if (!v->dims[i]) {
    v->dims[i] = dt__calloc(sizeof(int) * DT_MAX_DIMS * (size_t)(n->n_out ? n->n_out : 1));
    if (!v->dims[i]) return dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
  }
  dt_value_type *t = &n->types[k];
  type_of(t, x);
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
    dt_status st2 = set_local_dims(v, i, x, dims);
    if (st2) return st2;
  }
  if (v->pool.oom) return dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
  return DT_OK;
}

/* The node standing for x: a traced value, a getitem made on first use of a tuple element,
 * or a new constant. */
static dt_status value_of(tracer *tr, dt_tensor *x, int *node) {
  variant *v = tr->v;
  trace_entry *e = lookup(tr, x);
  dt_status st;
  if (!e) {
    char name[48];
    snprintf(name, sizeof name, "_tensor_constant%d", tr->n_constants++);
    int i = dt__graph_add_node(v->g, DT_NODE_BUFFER, name);
    if (i < 0) return dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
    st = dt__graph_node_types(v->g, i, 1);
    if (!st) st = set_value(tr, i, 0, x, NULL);
    if (!st) st = map_tensor(tr, x, i, -1);
    if (st) return st;
    v->constants[i] = dt_tensor_retain(x);
    *node = i;
    return DT_OK;
  }
  if (e->item < 0) {
    *node = e->node;
    return DT_OK;
  }
  int src = e->node, item = e->item;
  int i = dt__graph_add_node(v->g, DT_NODE_GETITEM, "getitem");
  if (i < 0) return dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
  st = dt__graph_node_types(v->g, i, 1);
  if (!st) st = set_value(tr, i, 0, x, v->dims[src] + item * DT_MAX_DIMS);
  if (st) return st;
  dt_node *n = &v->g->nodes[i];
  n->inputs[0] = src;
  n->n_inputs = 1;
  n->ints[0] = item;
  n->n_ints = 1;
  e = lookup(tr, x);
  e->node = i;
  e->item = -1;
  *node = i;
  return DT_OK;
}

/* The symbolic dims of node i: the op's rule when it has one and it agrees with the traced
 * sizes; otherwise the node is specialized (its symbolic input sizes guarded to their traced
 * values, its outputs constants). */
static dt_status infer_symbolic(tracer *tr, int i, const dt_op_call *given, const dt_op_call *done,
                                const dt_tensor_meta *metas, int n_out, int (*out)[DT_MAX_DIMS]) {
  variant *v = tr->v;
  const dt_node *n = &v->g->nodes[i];
  dt_shape_ctx *c = dt__calloc(sizeof *c);
  if (!c) return dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
  c->pool = &v->pool;
  c->symbols = v->hints;
  c->given = given;
  c->done = done;
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
  bool ok = fits && dt__shape_rule(c) && !v->pool.oom;
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
  dt_status st = DT_OK;
  if (ok) {
    for (int g = 0; g < c->n_guards && !st; g++) st = add_guard(v, &c->guards[g]);
    for (int k = 0; k < n_out; k++) memcpy(out[k], c->out_dims[k], sizeof out[k]);
  } else {
    for (int k = 0; k < n_args && !st; k++) {
      if (!c->arg_dims[k]) continue;
      for (int d = 0; d < c->arg_ndim[k] && !st; d++) {
        int e = c->arg_dims[k][d];
        if (dt__sx_is_const(&v->pool, e, NULL)) continue;
        int64_t value = dt__sx_eval(&v->pool, e, v->hints);
        dt_guard gd = {.kind = DT_GUARD_EQ, .a = e, .b = dt__sx_const(&v->pool, value)};
        snprintf(gd.why, sizeof gd.why, "%s: specialized (no symbolic shape rule) at dim %d",
                 dt__op_table[done->op].name, d);
        st = add_guard(v, &gd);
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

static dt_status record(tracer *tr, const dt_op_call *given, const dt_op_call *done) {
  variant *v = tr->v;
  const dt_op_def *def = &dt__op_table[given->op];
  int inputs[DT_OP_MAX_INPUTS];
  int *list = NULL;
  dt_status st = DT_OK;
  for (int k = 0; k < given->n_inputs && !st; k++) {
    inputs[k] = -1;
    if (given->inputs[k]) st = value_of(tr, given->inputs[k], &inputs[k]);
  }
  if (!st && given->n_input_list > 0) {
    list = dt__alloc(sizeof(int) * (size_t)given->n_input_list);
    if (!list) st = dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
    for (int k = 0; k < given->n_input_list && !st; k++)
      st = value_of(tr, given->input_list[k], &list[k]);
  }
  bool inplace = def->kind == DT_OP_KIND_INPLACE;
  int n_out = inplace ? 1 : done->n_outputs;
  if (!st && n_out > DT_OP_MAX_META) {
    st = dt__error(DT_ERR_UNSUPPORTED, "dt_compile: %s gave %d results; graphs hold at most %d",
                   def->name, n_out, DT_OP_MAX_META);
  }
  int i = -1;
  if (!st) st = dt__graph_add_call(v->g, NULL, given, inputs, given->n_input_list, list, n_out, &i);
  dt__free(list);
  if (!st) st = grow_nodes(v, &tr->node_cap);
  if (st) return st;
  dt_tensor_meta metas[DT_OP_MAX_META];
  for (int k = 0; k < n_out; k++) {
    dt_tensor *x = inplace ? given->inputs[0] : done->outputs[k];
    dt_value_type t;
    type_of(&t, x);
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
  int sdims[DT_OP_MAX_META][DT_MAX_DIMS];
  st = infer_symbolic(tr, i, given, done, metas, n_out, sdims);
  bool tuple = v->g->nodes[i].is_tuple;
  for (int k = 0; k < n_out && !st; k++) {
    dt_tensor *x = inplace ? given->inputs[0] : done->outputs[k];
    st = set_value(tr, i, k, x, sdims[k]);
    if (!st) st = map_tensor(tr, x, i, tuple ? k : -1);
  }
  /* A distributed call that runs on its shards as they are: decided now, for every call. */
  dt_placement out_pl[DT_MESH_MAX_DIMS];
  const dt_tensor *y = n_out == 1 && !inplace && !tuple ? done->outputs[0] : NULL;
  if (!st && y && y->spec && dt__compile_dist_plain(given, out_pl) &&
      dt__placements_equal(y->spec->mesh_ndim, out_pl, y->spec->placements)) {
    v->dist_plain[i] = true;
    v->dist_mesh[i] = y->spec->mesh;
  }
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

static const char *const grad_message =
    "the joint forward+backward graph is not implemented: call the compiled function under "
    "dt_grad_mode_set(false) or with inputs that do not require grad";

static dt_status trace_mode(dt_invocation *inv, void *user) {
  tracer *tr = user;
  dt_op_call *call = dt__invocation_call(inv);
  if (!tr->error && dt_grad_mode_enabled() && any_requires_grad(call)) {
    tr->error =
        dt__error(DT_ERR_UNSUPPORTED, "dt_compiled_call: %s of a tensor that requires grad: %s",
                  dt__op_table[call->op].name, grad_message);
  }
  dt_op_call given = *call; /* attributes as the caller gave them, before infer normalizes */
  dt_status st = dt_invocation_run(inv);
  if (st || tr->error) return st;
  tr->error = record(tr, &given, call);
  return DT_OK;
}

/* A conversion between local and distributed tensors is not an op-table call: its result
 * would be a constant of this trace's values. Refused when its input is a traced value. */
static dt_status guard_conversion(void *user, const char *call, const dt_tensor *input) {
  tracer *tr = user;
  const trace_entry *e = lookup(tr, input);
  if (!e) return DT_OK;
  tr->refused = call;
  return dt__error(DT_ERR_UNSUPPORTED,
                   "dt_compiled_call: %s of the traced value %%%s inside the compiled function "
                   "is not supported (not an op-table call); convert before calling it",
                   call, tr->v->g->nodes[e->node].name);
}

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
  variant *v = tr->v;
  v->inputs = dt__calloc(sizeof *v->inputs * (size_t)(c->n_in ? c->n_in : 1));
  v->hints = dt__calloc(sizeof *v->hints * (size_t)(c->n_in * DT_MAX_DIMS + 1));
  if (!v->inputs || !v->hints) return dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
  for (int i = 0; i < c->n_in; i++) {
    dt_tensor *x = in[i];
    input_desc *desc = &v->inputs[i];
    dt_value_type t;
    type_of(&t, x);
    desc->dtype = t.dtype;
    desc->ndim = t.ndim;
    desc->dist = x->spec != NULL;
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
    int node = dt__graph_add_node(v->g, DT_NODE_PLACEHOLDER, name);
    if (node < 0) return dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
    dt_status st = dt__graph_node_types(v->g, node, 1);
    if (!st) st = set_value(tr, node, 0, x, sdims);
    if (!st) st = map_tensor(tr, x, node, -1);
    if (st) return st;
  }
  v->g->n_symbols = v->n_symbols < DT_GRAPH_MAX_SYMBOLS ? v->n_symbols : DT_GRAPH_MAX_SYMBOLS;
  for (int s = 0; s < v->g->n_symbols; s++) v->g->symbol_hints[s] = v->hints[s];
  return DT_OK;
}

/* Whether node i may run its kernel directly into a planned buffer: a single-output compute
 * op on local tensors whose infer (the one thing the direct path skips) only computes shapes
 * and dtypes from the inputs' geometry, which the guards and the symbolic dims already give.
 * Distributed nodes keep going through dispatch (sharding propagation). */
static bool direct_eligible(const variant *v, int i) {
  const dt_node *n = &v->g->nodes[i];
  if (n->kind != DT_NODE_CALL || n->is_tuple || n->n_out != 1 || n->has_list) return false;
  const dt_op_def *def = &dt__op_table[n->target];
  if (def->kind != DT_OP_KIND_COMPUTE || v->placements[i]) return false;
  for (int k = 0; k < n->n_inputs; k++) {
    if (n->inputs[k] >= 0 && v->placements[n->inputs[k]]) return false;
  }
  dt_op_infer_fn f = def->infer;
  if (f == dt__infer_embedding) return v->templates[i].n_ints == 0;
  return f == dt__infer_unary || f == dt__infer_binary || f == dt__infer_binary_scalar ||
         f == dt__infer_softmax || f == dt__infer_mm || f == dt__infer_linear ||
         f == dt__infer_same;
}

/* True for nodes whose value is (a view of) their first input's storage. */
static bool aliases_input(const dt_node *n) {
  if (n->kind == DT_NODE_GETITEM) return true;
  if (n->kind != DT_NODE_CALL) return false;
  dt_op_kind kind = dt__op_table[n->target].kind;
  return kind == DT_OP_KIND_VIEW || kind == DT_OP_KIND_INPLACE;
}

/* Buffers planned by liveness: each direct node that does not reach the outputs (where the
 * caller would keep its storage) writes into a slot's buffer, and a slot is reused once the
 * storage of its previous value (views included) is dead. Sizes are symbolic, so a slot's
 * buffer is sized on the call, growing when a larger size comes. */
static dt_status plan_buffers(variant *v) {
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
  int o = dt__graph_output_node(g);
  for (int k = 0; k < g->nodes[o].n_list; k++) escapes[g->nodes[o].list[k]] = true;
  for (int i = 0; i < n; i++) storage_last[i] = v->last_use[i];
  for (int i = n - 1; i >= 0; i--) {
    const dt_node *nd = &g->nodes[i];
    if (!aliases_input(nd) || nd->inputs[0] < 0) continue;
    int src = nd->inputs[0];
    escapes[src] |= escapes[i];
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
    direct_step *sp = &v->steps[i];
    sp->call = v->templates[i];
    sp->call.n_outputs = 1;
    sp->call.outputs = &v->handles[i];
    sp->handle = v->handles[i];
    sp->kernel = dt__op_table[nd->target].kernel;
    sp->ndim = nd->types[0].ndim;
    sp->slot = v->slot_of[i];
    sp->elem_size = dt__dtype_sizes[nd->types[0].dtype];
    memcpy(sp->dims, v->dims[i], sizeof sp->dims);
    sp->n_inputs = nd->n_inputs;
    memcpy(sp->inputs, nd->inputs, sizeof sp->inputs);
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
    if (g->nodes[j].kind == DT_NODE_CALL && !v->direct[j]) v->release_at[v->last_use[j] + 1]++;
  }
  for (int i = 0; i < n; i++) v->release_at[i + 1] += v->release_at[i];
  for (int i = 0; i < n; i++) free_at[i] = v->release_at[i]; /* now each node's fill position */
  for (int j = 0; j < n; j++) {
    if (g->nodes[j].kind == DT_NODE_CALL && !v->direct[j])
      v->release_list[free_at[v->last_use[j]]++] = j;
  }
done:
  dt__free(storage_last);
  dt__free(escapes);
  dt__free(free_at);
  return st;
}

/* Last uses, tuple slots, planned buffers and the call-time scratch. */
static dt_status plan(variant *v) {
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
  for (size_t i = 0; i < n; i++) {
    const dt_node *nd = &g->nodes[i];
    v->last_use[i] = (int)i;
    v->tuple_base[i] = nd->is_tuple ? slots : -1;
    if (nd->is_tuple) slots += nd->n_out;
    for (int k = 0; k < nd->n_inputs; k++) {
      if (nd->inputs[k] >= 0) v->last_use[nd->inputs[k]] = (int)i;
    }
    for (int k = 0; k < nd->n_list; k++) v->last_use[nd->list[k]] = (int)i;
  }
  /* A tuple lives as long as its last getitem's value. */
  for (int i = (int)n - 1; i >= 0; i--) {
    const dt_node *nd = &g->nodes[i];
    if (nd->kind == DT_NODE_GETITEM && v->last_use[i] > v->last_use[nd->inputs[0]])
      v->last_use[nd->inputs[0]] = v->last_use[i];
  }
  v->tuple_vals = dt__calloc(sizeof(dt_tensor *) * (size_t)(slots + 1));
  if (!v->tuple_vals) return dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
  return plan_buffers(v);
}

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* Runs fn eagerly under the tracer; on success out holds fn's results and *made the new
 * variant. A failure of fn itself is returned as fn returned it. */
static dt_status trace(dt_compiled *c, dt_tensor *const *in, dt_tensor **out, variant **made) {
  double t0 = now_us();
  tracer tr = {0};
  tr.v = dt__calloc(sizeof *tr.v);
  dt_status st =
      tr.v ? dt__graph_create(&tr.v->g) : dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
  if (!st) st = add_inputs(c, &tr, in);
  if (!st && dt_mode_depth() >= DT_MAX_MODES)
    st = dt__error(DT_ERR_INVALID, "dt_compiled_call: no room for the tracing mode");
  bool ran = false;
  if (!st) st = dt_mode_push(trace_mode, &tr);
  if (!st) {
    dt__dist_convert_guard outer = dt__dist_guard;
    dt__dist_guard = (dt__dist_convert_guard){guard_conversion, &tr};
    st = c->fn(c->user, c->n_in, in, c->n_out, out);
    dt__dist_guard = outer;
    dt_mode_pop();
    ran = true;
    if (st) c->stats.failed_traces++;
  }
  if (ran && !st && tr.refused) {
    st = dt__error(DT_ERR_UNSUPPORTED,
                   "dt_compiled_call: the function succeeded without the %s of a traced value that "
                   "compile refused",
                   tr.refused);
  }
  if (!st) st = tr.error;
  int outputs[MAX_ARGS];
  for (int k = 0; k < c->n_out && !st; k++) {
    if (!out[k]) {
      st = dt__error(DT_ERR_INVALID, "dt_compiled_call: the function left output %d NULL", k);
    } else {
      st = value_of(&tr, out[k], &outputs[k]);
    }
  }
  if (!st) {
    int o = dt__graph_add_node(tr.v->g, DT_NODE_OUTPUT, "output");
    if (o < 0) st = dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
    if (!st) st = dt__graph_node_types(tr.v->g, o, 0);
    if (!st) st = grow_nodes(tr.v, &tr.node_cap);
    if (!st) {
      dt_node *on = &tr.v->g->nodes[o];
      on->has_list = true;
      on->n_list = c->n_out;
      on->list = dt__arena_alloc(&tr.v->g->arena, sizeof(int) * (size_t)(c->n_out + 1));
      if (!on->list) st = dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
      for (int k = 0; !st && k < c->n_out; k++) on->list[k] = outputs[k];
    }
  }
  if (!st) st = plan(tr.v);
  for (int i = 0; i < tr.n_map; i++) dt_tensor_release(tr.map[i].tensor);
  dt__free(tr.map);
  if (st) {
    if (ran) {
      for (int k = 0; k < c->n_out; k++) {
        dt_tensor_release(out[k]);
        out[k] = NULL;
      }
    }
    variant_destroy(tr.v);
    return st;
  }
  c->stats.last_compile_us = now_us() - t0;
  *made = tr.v;
  return DT_OK;
}

/* ---- Guards ------------------------------------------------------------------------------- */

/* True when the variant takes these inputs; otherwise why (when why is not NULL). */
static bool guards_hold(variant *v, int n_in, dt_tensor *const *in, char *why, size_t size) {
  for (int i = 0; i < n_in; i++) {
    const dt_tensor *x = in[i];
    const input_desc *d = &v->inputs[i];
    const dt_dist_spec *spec = x->spec;
    int ndim = spec ? spec->ndim : x->ndim;
    const int64_t *shape = spec ? spec->shape : x->shape;
    if (x->dtype != d->dtype) {
      if (why)
        snprintf(why, size, "input %d: dtype is %s, the trace had %s", i, dt_dtype_name(x->dtype),
                 dt_dtype_name(d->dtype));
      return false;
    }
    if ((spec != NULL) != d->dist) {
      if (why)
        snprintf(why, size, "input %d: %s, the trace had a %s tensor", i,
                 spec ? "distributed" : "local", d->dist ? "distributed" : "local");
      return false;
    }
    if (ndim != d->ndim) {
      if (why) snprintf(why, size, "input %d: %d dims, the trace had %d", i, ndim, d->ndim);
      return false;
    }
    if (spec) {
      if (spec->mesh_id != d->mesh_id || spec->mesh_ndim != d->mesh_ndim) {
        if (why) snprintf(why, size, "input %d: another mesh than the trace's", i);
        return false;
      }
      for (int m = 0; m < d->mesh_ndim; m++) {
        dt_placement a = spec->placements[m], b = d->placements[m];
        if (a.kind != b.kind || (a.kind == DT_SHARD && a.dim != b.dim) ||
            (a.kind == DT_PARTIAL && a.op != b.op)) {
          if (why) {
            char pa[32], pb[32];
            snprintf(why, size, "input %d: placement %s on mesh dim %d, the trace had %s", i,
                     dt_placement_format(a, pa, sizeof pa), m,
                     dt_placement_format(b, pb, sizeof pb));
          }
          return false;
        }
      }
    }
    for (int k = 0; k < ndim; k++) {
      if (d->sym[k] >= 0) {
        v->symvals[d->sym[k]] = shape[k];
      } else if (shape[k] != d->shape[k]) {
        if (why)
          snprintf(why, size, "input %d: dim %d is %lld, static in the trace at %lld", i, k,
                   (long long)shape[k], (long long)d->shape[k]);
        return false;
      }
    }
  }
  dt__sx_eval_all(&v->pool, v->symvals, v->exprvals);
  const int64_t *e = v->exprvals;
  for (int g = 0; g < v->n_guards; g++) {
    const dt_guard *gd = &v->guards[g];
    bool ok = gd->kind == DT_GUARD_EQ          ? e[gd->a] == e[gd->b]
              : gd->kind == DT_GUARD_DIVISIBLE ? e[gd->a] % gd->c == 0
                                               : e[gd->a] >= gd->c;
    if (ok) continue;
    if (why) {
      char a[128], b[128];
      dt__sx_format(&v->pool, gd->a, a, sizeof a);
      if (gd->kind == DT_GUARD_EQ) {
        dt__sx_format(&v->pool, gd->b, b, sizeof b);
        snprintf(why, size, "guard %s == %s (%s) failed: %lld != %lld", a, b, gd->why,
                 (long long)e[gd->a], (long long)e[gd->b]);
      } else {
        snprintf(why, size, "guard %s %s %lld (%s) failed: %s = %lld", a,
                 gd->kind == DT_GUARD_DIVISIBLE ? "divisible by" : ">=", (long long)gd->c, gd->why,
                 a, (long long)e[gd->a]);
      }
    }
    return false;
  }
  return true;
}

/* ---- Running a variant ---------------------------------------------------------------------- */

static void release_value(variant *v, int j) {
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
static inline dt_status run_direct(variant *v, int i) {
  direct_step *sp = &v->steps[i];
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
  dt_status st = sp->kernel(&sp->call);
  v->values[i] = h;
  return st;
}

static dt_status run_call(variant *v, int i) {
  const dt_node *n = &v->g->nodes[i];
  const dt_op_def *def = &dt__op_table[n->target];
  dt_tensor *list_storage[64];
  dt_tensor **list =
      n->n_list <= 64 ? list_storage : dt__alloc(sizeof(dt_tensor *) * (size_t)n->n_list);
  if (!list) return dt__error(DT_ERR_NOMEM, "dt_compiled_call: out of memory");
  dt_tensor *outs[DT_OP_MAX_META] = {0};
  dt_op_call call;
  if (n->has_list) {
    dt__graph_build_call(v->g, i, v->values, list, outs, &call);
  } else {
    call = v->steps[i].call;
    for (int k = 0; k < n->n_inputs; k++)
      call.inputs[k] = n->inputs[k] >= 0 ? v->values[n->inputs[k]] : NULL;
    call.outputs = outs;
  }
  bool dist = false;
  for (int k = 0; k < call.n_inputs; k++) dist |= call.inputs[k] && call.inputs[k]->spec;
  for (int k = 0; k < call.n_input_list; k++) dist |= call.input_list[k]->spec != NULL;
  /* Past the argument checks, the modes and autograd: the trace checked the arguments and
   * guards hold them; a distributed call still goes through sharding propagation. */
  dt_status st = dist ? dt__dispatch_inner(&call) : dt__dispatch_local(&call);
  if (list != list_storage) dt__free(list);
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
static dt_status run_dist_plain(variant *v, int i) {
  const dt_node *n = &v->g->nodes[i];
  for (int k = 0; k < n->n_inputs; k++) {
    int j = n->inputs[k];
    const dt_tensor *x = j >= 0 ? v->values[j] : NULL;
    if (!x) continue;
    /* An input placed otherwise than in the trace (a value dispatch planned differently at
     * this size) or empty: dispatch decides. */
    if (!x->spec || !v->placements[j] || dt__numel(x->spec->ndim, x->spec->shape) == 0 ||
        !dt__placements_equal(x->spec->mesh_ndim, x->spec->placements, v->placements[j]))
      return run_call(v, i);
  }
  dt_tensor *outs[DT_OP_MAX_META] = {0};
  dt_op_call call;
  call = v->steps[i].call; /* dist-plain calls take no tensor list */
  for (int k = 0; k < n->n_inputs; k++)
    call.inputs[k] = n->inputs[k] >= 0 ? v->values[n->inputs[k]] : NULL;
  call.outputs = outs;
  dt_status st = dt__dispatch_local(&call);
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

static dt_status run_variant(variant *v, dt_tensor *const *in, int n_out, dt_tensor **out) {
  const dt_graph *g = v->g;
  int input_index = 0;
  dt_status st = DT_OK;
  for (int i = 0; i < g->n_nodes; i++) {
    if (v->direct[i]) { /* the common case first, without reading the node */
      st = run_direct(v, i);
    } else {
      const dt_node *n = &g->nodes[i];
      switch (n->kind) {
      case DT_NODE_PLACEHOLDER: v->values[i] = in[input_index++]; break;
      case DT_NODE_PARAMETER:
      case DT_NODE_BUFFER: v->values[i] = v->constants[i]; break;
      case DT_NODE_GETITEM:
        v->values[i] = v->tuple_vals[v->tuple_base[n->inputs[0]] + n->ints[0]];
        break;
      case DT_NODE_CALL: st = v->dist_plain[i] ? run_dist_plain(v, i) : run_call(v, i); break;
      case DT_NODE_COMM:
        st = dt__error(DT_ERR_INTERNAL, "dt_compiled_call: a communication node");
        break;
      case DT_NODE_OUTPUT:
        for (int k = 0; k < n_out; k++) out[k] = dt_tensor_retain(v->values[n->list[k]]);
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
  for (int k = 0; k < n_out; k++) {
    dt_tensor_release(out[k]);
    out[k] = NULL;
  }
  return st;
}

/* ---- Public API --------------------------------------------------------------------------- */

dt_status dt_compile(dt_compile_fn fn, void *user, int n_in, int n_out,
                     const dt_compile_options *options, dt_compiled **out) {
  if (!out) return dt__error(DT_ERR_INVALID, "dt_compile: out is NULL");
  *out = NULL;
  if (!fn) return dt__error(DT_ERR_INVALID, "dt_compile: fn is NULL");
  if (n_in < 0 || n_in > MAX_ARGS || n_out < 0 || n_out > MAX_ARGS) {
    return dt__error(DT_ERR_INVALID, "dt_compile: n_in %d and n_out %d must be in [0, %d]", n_in,
                     n_out, MAX_ARGS);
  }
  dt_compile_options o = options ? *options : (dt_compile_options){0};
  if (o.cache_limit < 0 || o.cache_limit > 64) {
    return dt__error(DT_ERR_INVALID, "dt_compile: cache_limit %d must be in [0, 64]",
                     o.cache_limit);
  }
  if (o.n_marks < 0 || (o.n_marks > 0 && !o.marks)) {
    return dt__error(DT_ERR_INVALID, "dt_compile: %d marks with marks %s", o.n_marks,
                     o.marks ? "given" : "NULL");
  }
  for (int m = 0; m < o.n_marks; m++) {
    if (o.marks[m].input < 0 || o.marks[m].input >= n_in || o.marks[m].dim < 0 ||
        o.marks[m].dim >= DT_MAX_DIMS) {
      return dt__error(DT_ERR_INVALID, "dt_compile: mark %d names input %d dim %d (%d inputs)", m,
                       o.marks[m].input, o.marks[m].dim, n_in);
    }
  }
  dt_compiled *c = dt__calloc(sizeof *c);
  if (!c) return dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
  if (o.n_marks) {
    c->marks = dt__alloc(sizeof *c->marks * (size_t)o.n_marks);
    if (!c->marks) {
      dt__free(c);
      return dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
    }
    memcpy(c->marks, o.marks, sizeof *c->marks * (size_t)o.n_marks);
  }
  c->fn = fn;
  c->user = user;
  c->n_in = n_in;
  c->n_out = n_out;
  c->all_dynamic = o.dynamic;
  c->n_marks = o.n_marks;
  c->cache_limit = o.cache_limit ? o.cache_limit : DEFAULT_CACHE_LIMIT;
  const char *env = getenv("DT_COMPILE_LOG");
  c->log_recompiles = env && strstr(env, "recompiles") != NULL;
  *out = c;
  return DT_OK;
}

void dt_compiled_destroy(dt_compiled *c) {
  if (!c) return;
  for (int i = 0; i < c->n_variants; i++) variant_destroy(c->variants[i]);
  for (int i = 0; i < c->n_reasons; i++) dt__free(c->reasons[i]);
  dt__free(c->reasons);
  dt__free(c->marks);
  dt__free(c);
}

static dt_status note_recompile(dt_compiled *c, const char *why) {
  size_t len = strlen(why);
  char *copy = dt__alloc(len + 1);
  char **reasons = dt__alloc(sizeof *reasons * (size_t)(c->n_reasons + 1));
  if (!copy || !reasons) {
    dt__free(copy);
    dt__free(reasons);
    return dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
  }
  memcpy(copy, why, len + 1);
  if (c->n_reasons) memcpy(reasons, c->reasons, sizeof *reasons * (size_t)c->n_reasons);
  dt__free(c->reasons);
  c->reasons = reasons;
  c->reasons[c->n_reasons++] = copy;
  if (c->log_recompiles) fprintf(stderr, "dtensor compile: recompile %d: %s\n", c->n_reasons, why);
  return DT_OK;
}

dt_status dt_compiled_call(dt_compiled *c, int n_in, dt_tensor *const *in, int n_out,
                           dt_tensor **out) {
  if (!c) return dt__error(DT_ERR_INVALID, "dt_compiled_call: compiled is NULL");
  if (n_out > 0 && !out) return dt__error(DT_ERR_INVALID, "dt_compiled_call: out is NULL");
  for (int k = 0; k < n_out; k++) out[k] = NULL;
  if (n_in != c->n_in || n_out != c->n_out) {
    return dt__error(
        DT_ERR_INVALID,
        "dt_compiled_call: %d inputs and %d outputs given, the function takes %d and %d", n_in,
        n_out, c->n_in, c->n_out);
  }
  if (n_in > 0 && !in) return dt__error(DT_ERR_INVALID, "dt_compiled_call: in is NULL");
  /* While no tensor carries autograd state none requires grad: one load, as dispatch does. */
  bool grad =
      atomic_load_explicit(&dt__autograd_live, memory_order_relaxed) != 0 && dt_grad_mode_enabled();
  for (int i = 0; i < n_in; i++) {
    if (!in[i]) return dt__error(DT_ERR_INVALID, "dt_compiled_call: input %d is NULL", i);
    int ndim = in[i]->spec ? in[i]->spec->ndim : in[i]->ndim;
    for (int m = 0; m < c->n_marks; m++) {
      if (c->marks[m].input == i && c->marks[m].dim >= ndim) {
        return dt__error(DT_ERR_INVALID,
                         "dt_compiled_call: a mark names dim %d of input %d (%d dims)",
                         c->marks[m].dim, i, ndim);
      }
    }
    if (grad && in[i]->autograd && dt_tensor_requires_grad(in[i])) {
      return dt__error(DT_ERR_UNSUPPORTED, "dt_compiled_call: input %d requires grad: %s", i,
                       grad_message);
    }
  }
  c->stats.calls++;
  char why[512];
  why[0] = '\0'; /* written only when a guard fails */
  for (int k = 0; k < c->n_variants; k++) {
    variant *v = c->variants[k];
    if (!guards_hold(v, n_in, in, why, sizeof why)) continue;
    if (grad) { /* a constant set to require grad after the trace */
      for (int i = 0; i < v->g->n_nodes; i++) {
        if (v->constants[i] && v->constants[i]->autograd &&
            dt_tensor_requires_grad(v->constants[i]))
          return dt__error(DT_ERR_UNSUPPORTED, "dt_compiled_call: constant %%%s requires grad: %s",
                           v->g->nodes[i].name, grad_message);
      }
    }
    return run_variant(v, in, n_out, out);
  }
  if (c->n_variants >= c->cache_limit) {
    if (!c->warned_eager) {
      c->warned_eager = true;
      dt__log(DT_LOG_WARN,
              "dt_compile: %d variants (the cache limit) and none takes these inputs (%s); running "
              "eagerly from now on for such inputs",
              c->n_variants, why);
    }
    c->stats.eager_calls++;
    return c->fn(c->user, n_in, in, n_out, out);
  }
  variant *v = NULL;
  dt_status st = trace(c, in, out, &v);
  if (st) return st;
  if (c->n_variants > 0) {
    st = note_recompile(c, why);
    if (st) {
      variant_destroy(v);
      for (int k = 0; k < n_out; k++) {
        dt_tensor_release(out[k]);
        out[k] = NULL;
      }
      return st;
    }
    c->stats.recompiles++;
  }
  c->stats.compiles++;
  c->variants[c->n_variants++] = v;
  c->stats.variants = c->n_variants;
  return DT_OK;
}

int dt__compiled_find_variant(dt_compiled *c, int n_in, dt_tensor *const *in) {
  for (int k = 0; k < c->n_variants; k++) {
    if (guards_hold(c->variants[k], n_in, in, NULL, 0)) return k;
  }
  return -1;
}

dt_status dt_compiled_stats(const dt_compiled *c, dt_compile_stats *out) {
  if (!c || !out) return dt__error(DT_ERR_INVALID, "dt_compiled_stats: NULL compiled or out");
  *out = c->stats;
  return DT_OK;
}

const char *dt_compiled_recompile_reason(const dt_compiled *c, int i) {
  return c && i >= 0 && i < c->n_reasons ? c->reasons[i] : NULL;
}

/* A growing string for dt_compiled_format. */
typedef struct text {
  char *buf;
  size_t len, cap;
  bool oom;
} text;

DT_PRINTF(2, 3) static void put(text *t, const char *fmt, ...) {
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0 || t->oom) {
    va_end(ap2);
    return;
  }
  if (t->len + (size_t)n + 1 > t->cap) {
    size_t cap = t->cap ? t->cap : 1024;
    while (cap < t->len + (size_t)n + 1) cap *= 2;
    char *b = dt__alloc(cap);
    if (!b) {
      t->oom = true;
      va_end(ap2);
      return;
    }
    if (t->len) memcpy(b, t->buf, t->len);
    dt__free(t->buf);
    t->buf = b;
    t->cap = cap;
  }
  vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap2);
  va_end(ap2);
  t->len += (size_t)n;
}

dt_status dt_compiled_format(const dt_compiled *c, int i, char **out) {
  if (!out) return dt__error(DT_ERR_INVALID, "dt_compiled_format: out is NULL");
  *out = NULL;
  if (!c || i < 0 || i >= c->n_variants) {
    return dt__error(DT_ERR_INVALID, "dt_compiled_format: variant %d of %d", i,
                     c ? c->n_variants : 0);
  }
  const variant *v = c->variants[i];
  char *graph = dt_graph_to_string(v->g);
  if (!graph) return dt__error(DT_ERR_NOMEM, "dt_compiled_format: out of memory");
  text t = {0};
  put(&t, "%s", graph);
  dt_free(graph);
  put(&t, "symbolic shapes {\n");
  for (int j = 0; j < v->g->n_nodes; j++) {
    const dt_node *n = &v->g->nodes[j];
    for (int k = 0; k < n->n_out && v->dims[j]; k++) {
      put(&t, "  %%%s%s", n->name, n->is_tuple ? "" : "");
      if (n->is_tuple) put(&t, "[%d]", k);
      put(&t, " : [");
      for (int d = 0; d < n->types[k].ndim; d++) {
        char e[256];
        put(&t, "%s%s", d ? ", " : "",
            dt__sx_format(&v->pool, v->dims[j][k * DT_MAX_DIMS + d], e, sizeof e));
      }
      put(&t, "]");
      if (v->placements[j] && k == 0) {
        if (n->kind == DT_NODE_CALL)
          put(&t, v->dist_plain[j] ? " on the shards" : " planned per call");
        put(&t, " (");
        for (int m = 0; m < v->mesh_ndim[j]; m++) {
          char p[32];
          put(&t, "%s%s", m ? ", " : "", dt_placement_format(v->placements[j][m], p, sizeof p));
        }
        put(&t, ")");
        if (v->local_dims[j]) {
          put(&t, " local [");
          for (int d = 0; d < n->types[0].ndim; d++) {
            char e[256];
            put(&t, "%s%s", d ? ", " : "",
                dt__sx_format(&v->pool, v->local_dims[j][d], e, sizeof e));
          }
          put(&t, "]");
        }
      }
      put(&t, "\n");
    }
  }
  put(&t, "}\nguards {\n");
  for (int k = 0; k < v->n_guards; k++) {
    const dt_guard *gd = &v->guards[k];
    char a[256], b[256];
    dt__sx_format(&v->pool, gd->a, a, sizeof a);
    if (gd->kind == DT_GUARD_EQ)
      put(&t, "  %s == %s  # %s\n", a, dt__sx_format(&v->pool, gd->b, b, sizeof b), gd->why);
    else
      put(&t, "  %s %s %lld  # %s\n", a,
          gd->kind == DT_GUARD_DIVISIBLE ? "divisible by" : ">=", (long long)gd->c, gd->why);
  }
  put(&t, "}\n");
  if (t.oom) {
    dt__free(t.buf);
    return dt__error(DT_ERR_NOMEM, "dt_compiled_format: out of memory");
  }
  *out = t.buf;
  return DT_OK;
}
