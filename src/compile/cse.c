/*
 * Common subexpression elimination of a compiled variant (issue 26.5), decided once when it is
 * planned: a call equal to an earlier one (the same op on the same values with the same
 * attributes, sizes noted for a backward formula included) reads the earlier one's value and
 * is not run. mse's backward, for one, multiplies the expanded gradient by the difference
 * twice (mul(expand, sub) for each side of sub * sub).
 *
 * A reshape or view to its input's own dims is folded the same way (its readers read the input).
 *
 * Merged only when it is certain to give the same bits: local single-output compute calls, no
 * random op (each call draws other numbers), no tensor list, and no in-place call anywhere after
 * the earlier one (it could change an input between the two, or the earlier value before the
 * later one's readers). A value the outputs return is never merged away (the caller gets
 * distinct tensors, as eager's).
 */
#include <string.h>

#include "compile/compile_impl.h"

/* Whether node j may be merged (as the later one) or serve as the earlier one. */
static bool candidate(const dt_compile_variant *v, int j) {
  const dt_node *n = &v->g->nodes[j];
  if (n->kind != DT_NODE_CALL || n->is_tuple || n->n_out != 1 || n->has_list || v->placements[j])
    return false;
  const dt_op_def *def = &dt__op_table[n->target];
  if (def->kind != DT_OP_KIND_COMPUTE || (def->traits & DT_TRAIT_RANDOM)) return false;
  for (int k = 0; k < n->n_inputs; k++) {
    if (n->inputs[k] >= 0 && v->placements[n->inputs[k]]) return false;
  }
  return !v->fused[j].folded;
}

static bool same_ints(int n, const int64_t *a, const int64_t *b) {
  return n == 0 || (a && b && memcmp(a, b, sizeof(int64_t) * (size_t)n) == 0);
}

/* Nodes a and b compute the same value from the same values. */
static bool same_call(const dt_compile_variant *v, int a, int b) {
  const dt_node *x = &v->g->nodes[a], *y = &v->g->nodes[b];
  if (x->target != y->target || x->n_inputs != y->n_inputs || x->n_ints != y->n_ints ||
      x->n_int_list != y->n_int_list || x->dtype != y->dtype || x->flags != y->flags ||
      x->reduce_op != y->reduce_op || memcmp(x->scalars, y->scalars, sizeof x->scalars) != 0 ||
      memcmp(x->inputs, y->inputs, sizeof(int) * (size_t)x->n_inputs) != 0 ||
      !same_ints(x->n_ints, x->ints, y->ints) ||
      !same_ints(x->n_int_list, x->int_list, y->int_list))
    return false;
  const dt_value_type *tx = &x->types[0], *ty = &y->types[0];
  if (tx->dtype != ty->dtype || tx->ndim != ty->ndim ||
      memcmp(v->dims[a], v->dims[b], sizeof(int) * (size_t)tx->ndim) != 0)
    return false;
  /* Sizes a backward formula noted are set on each call: they must be the same expressions. */
  if (v->scalar_expr[a] != v->scalar_expr[b]) return false;
  const int *ea = v->shape_expr[a], *eb = v->shape_expr[b];
  if (!ea != !eb) return false;
  return !ea || memcmp(ea, eb, sizeof(int) * (size_t)x->n_ints) == 0;
}

static uint64_t hash_call(const dt_node *n) {
  uint64_t h = 1469598103934665603ull ^ (uint64_t)n->target;
  for (int k = 0; k < n->n_inputs; k++) h = (h ^ (uint64_t)(n->inputs[k] + 2)) * 1099511628211ull;
  for (int k = 0; k < n->n_ints; k++) h = (h ^ (uint64_t)n->ints[k]) * 1099511628211ull;
  uint64_t s;
  memcpy(&s, &n->scalars[0], sizeof s);
  return (h ^ s) * 1099511628211ull;
}

/* Rewrites every read of node `from` (inputs, tensor lists, the output list) to node `to`. */
static void redirect(dt_graph *g, int from, int to) {
  for (int i = from + 1; i < g->n_nodes; i++) {
    dt_node *nd = &g->nodes[i];
    for (int k = 0; k < nd->n_inputs; k++) {
      if (nd->inputs[k] == from) nd->inputs[k] = to;
    }
    for (int k = 0; k < nd->n_list; k++) {
      if (nd->list[k] == from) nd->list[k] = to;
    }
  }
}

/* A reshape or view to the dims its input already has (linear's backward reshapes its
 * gradient with -1 rows) is the input itself, in the same geometry: its readers read the
 * input. returned: the nodes the outputs list. */
static void fold_identity_views(dt_compile_variant *v, const bool *returned) {
  dt_graph *g = v->g;
  for (int j = 0; j < g->n_nodes; j++) {
    const dt_node *nd = &g->nodes[j];
    if (nd->kind != DT_NODE_CALL || returned[j] || v->placements[j] || v->fused[j].folded ||
        (nd->target != DT_OP_RESHAPE && nd->target != DT_OP_VIEW) || nd->inputs[0] < 0)
      continue;
    int x = nd->inputs[0];
    const dt_value_type *tx = &g->nodes[x].types[0], *tj = &nd->types[0];
    if (v->placements[x] || g->nodes[x].is_tuple || tx->dtype != tj->dtype ||
        tx->ndim != tj->ndim || memcmp(v->dims[x], v->dims[j], sizeof(int) * (size_t)tj->ndim))
      continue;
    redirect(g, j, x);
    v->fused[j].folded = true;
    v->fused[j].same_as = x + 1;
    v->fused[j].identity = true;
  }
}

dt_status dt__compile_cse(dt_compile_variant *v) {
  dt_graph *g = v->g;
  int n = g->n_nodes, last_inplace = -1;
  for (int i = 0; i < n; i++) {
    const dt_node *nd = &g->nodes[i];
    if (nd->kind == DT_NODE_CALL && dt__op_table[nd->target].kind == DT_OP_KIND_INPLACE)
      last_inplace = i;
  }
  /* Open addressing over node indices, at most half full. */
  int cap = 16;
  while (cap < 2 * n) cap *= 2;
  int *table = dt__alloc(sizeof(int) * (size_t)cap);
  bool *returned = dt__calloc(sizeof(bool) * (size_t)(n + 1));
  if (!table || !returned) {
    dt__free(table);
    dt__free(returned);
    return dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
  }
  for (int k = 0; k < cap; k++) table[k] = -1;
  int o = dt__graph_output_node(g);
  for (int k = 0; o >= 0 && k < g->nodes[o].n_list; k++) returned[g->nodes[o].list[k]] = true;
  fold_identity_views(v, returned);
  for (int j = last_inplace + 1; j < n; j++) {
    if (!candidate(v, j)) continue;
    size_t slot = (size_t)(hash_call(&g->nodes[j]) & (uint64_t)(cap - 1));
    while (table[slot] >= 0 && !same_call(v, table[slot], j)) slot = (slot + 1) & (size_t)(cap - 1);
    if (table[slot] < 0) {
      table[slot] = j;
    } else if (!returned[j]) {
      redirect(g, j, table[slot]);
      v->fused[j].folded = true;
      v->fused[j].same_as = table[slot] + 1;
    }
  }
  dt__free(table);
  dt__free(returned);
  return DT_OK;
}
