/*
 * Sharding decisions made at compile time: for a traced distributed call, runs the sharding
 * propagation that dispatch would run and tells whether the call takes its arguments as they
 * are placed (no redistribution, no row window, no shape attribute rewritten for the shard).
 * Such a call then runs on the shards directly on every later call, with the traced output
 * placements, skipping propagation and the sharding cache. Only rule families whose choice
 * does not depend on sizes qualify: a zero-cost choice stays the cheapest at every
 * non-empty size (the caller falls back to dispatch for empty tensors). A call that
 * redistributes gets redistribute nodes (compile/redist_node.c) when the propagator's choice
 * for it holds: each symbol is guarded to the range where it does (dt__compile_dist_range).
 * Arguments are numbered as dispatch numbers them: the inputs, then the tensor list.
 */
#include <stdint.h>
#include <string.h>

#include "compile/compile_impl.h"
#include "distributed/propagate_impl.h"
#include "mesh/mesh_impl.h"

static bool family_qualifies(dt_rule_family rule) {
  switch (rule) {
  case DT_RULE_POINTWISE:
  case DT_RULE_LIKE:
  case DT_RULE_SOFTMAX:
  case DT_RULE_EMBEDDING:
  case DT_RULE_LINEAR:
  case DT_RULE_MATMUL:
  case DT_RULE_ADDMM:
  case DT_RULE_REDUCTION:
  case DT_RULE_TRANSPOSE:
  case DT_RULE_UNSQUEEZE:
  case DT_RULE_LAYER_NORM:
  case DT_RULE_BATCH_NORM: return true;
  default: return false;
  }
}

/* Tensor argument i of call as dispatch numbers them: the inputs, then the tensor list. */
static const dt_tensor *arg_at(const dt_op_call *call, int i) {
  return i < call->n_inputs ? call->inputs[i] : call->input_list[i - call->n_inputs];
}

/* The propagator's choice for call with argument i's global shape shapes[i] (NULL: as
 * traced), arguments numbered as arg_at; false when it cannot be made here (mixed meshes or
 * local arguments, a failed infer). */
static bool choose(const dt_op_call *call, const int64_t (*shapes)[DT_MAX_DIMS],
                   dt_propagation_result *r, int *mesh_ndim) {
  const dt_op_def *def = &dt__op_table[call->op];
  int n = call->n_inputs + call->n_input_list;
  if (n > DT_DIST_MAX_ARGS) return false;
  const dt_dist_spec *spec = NULL;
  dt_tensor global[DT_DIST_MAX_ARGS];
  dt_tensor *global_list[DT_DIST_MAX_ARGS];
  dt_op_call g = *call;
  g.input_list = global_list;
  for (int i = 0; i < n; i++) {
    const dt_tensor *t = arg_at(call, i);
    if (!t) continue;
    if (!t->spec) return false; /* a local scalar mixed in: left to dispatch */
    if (!spec)
      spec = t->spec;
    else if (t->spec->mesh_id != spec->mesh_id)
      return false;
    global[i] = *t;
    global[i].ndim = t->spec->ndim;
    memcpy(global[i].shape, shapes ? shapes[i] : t->spec->shape,
           sizeof(int64_t) * (size_t)t->spec->ndim);
    dt__contiguous_strides(t->spec->ndim, global[i].shape, global[i].strides);
    global[i].offset = 0;
    if (i < call->n_inputs)
      g.inputs[i] = &global[i];
    else
      global_list[i - call->n_inputs] = &global[i];
  }
  if (!spec) return false;
  dt_tensor_meta metas[DT_OP_MAX_META];
  if (def->infer(&g, metas) || g.n_outputs != 1) {
    dt_clear_error();
    return false;
  }
  dt_mesh_info mi;
  dt__mesh_info(spec->mesh, &mi);
  dt_propagation prop = {
      .call = &g, .n_args = n, .n_out = 1, .out = metas, .mesh_ndim = spec->mesh_ndim};
  memcpy(prop.mesh_size, mi.size, sizeof prop.mesh_size);
  for (int i = 0; i < n; i++) {
    const dt_tensor *t = arg_at(call, i);
    prop.args[i] = t ? &global[i] : NULL;
    for (int m = 0; m < spec->mesh_ndim; m++)
      prop.current[i][m] = t ? t->spec->placements[m] : dt_replicate();
  }
  if (dt__propagate(&prop, r)) {
    dt_clear_error();
    return false;
  }
  *mesh_ndim = spec->mesh_ndim;
  return true;
}

bool dt__compile_dist_plain(const dt_op_call *call, dt_placement *out) {
  const dt_op_def *def = &dt__op_table[call->op];
  const unsigned special = DT_TRAIT_RANDOM | DT_TRAIT_GLOBAL_SHAPE_ATTR | DT_TRAIT_RUNS_AS_RESHAPE |
                           DT_TRAIT_TUPLE | DT_TRAIT_TENSOR_LIST;
  if (def->kind == DT_OP_KIND_INPLACE || (def->traits & special) || !family_qualifies(def->rule))
    return false;
  dt_propagation_result r;
  int nd = 0;
  if (!choose(call, NULL, &r, &nd) || r.fallback) return false;
  for (int i = 0; i < call->n_inputs; i++) {
    const dt_tensor *t = call->inputs[i];
    if (t && !dt__placements_equal(nd, t->spec->placements, r.targets[i])) return false;
  }
  if (def->traits & DT_TRAIT_ROW_WINDOW) { /* rows sharded: the kernel needs the window */
    for (int m = 0; m < nd; m++) {
      if (r.targets[0][m].kind == DT_SHARD && r.targets[0][m].dim == 0) return false;
    }
  }
  /* The dispatcher runs the shard's call otherwise. */
  if (dt__dist_rewrites_call(call, nd, r.targets[0], call->n_inputs > 1 ? r.targets[1] : NULL))
    return false;
  memcpy(out, r.out, sizeof(dt_placement) * (size_t)nd);
  return true;
}

bool dt__compile_dist_pinned(const dt_op_call *caller, const dt_op_call *given, dt_placement *out) {
  const dt_op_def *def = &dt__op_table[caller->op];
  const unsigned special = DT_TRAIT_RANDOM | DT_TRAIT_GLOBAL_SHAPE_ATTR | DT_TRAIT_RUNS_AS_RESHAPE |
                           DT_TRAIT_TUPLE | DT_TRAIT_ROW_WINDOW;
  if (def->kind == DT_OP_KIND_INPLACE || (def->traits & special)) return false;
  if (given->n_inputs != caller->n_inputs || given->n_input_list != caller->n_input_list)
    return false;
  dt_propagation_result r;
  int nd = 0;
  if (!choose(caller, NULL, &r, &nd) || r.fallback) return false;
  for (int i = 0; i < given->n_inputs + given->n_input_list; i++) {
    const dt_tensor *t = arg_at(given, i);
    if (t && (!t->spec || !dt__placements_equal(nd, t->spec->placements, r.targets[i])))
      return false;
  }
  if (dt__dist_rewrites_call(caller, nd, r.targets[0], caller->n_inputs > 1 ? r.targets[1] : NULL))
    return false; /* the dispatcher runs the shard's call otherwise */
  memcpy(out, r.out, sizeof(dt_placement) * (size_t)nd);
  return true;
}

/* Whether two choices agree on every argument's targets and the output's placements. */
static bool same_choice(const dt_propagation_result *a, const dt_propagation_result *b, int n,
                        int nd) {
  if (a->fallback != b->fallback || !dt__placements_equal(nd, a->out, b->out)) return false;
  for (int i = 0; i < n; i++) {
    if (!dt__placements_equal(nd, a->targets[i], b->targets[i])) return false;
  }
  return true;
}

/* Whether the choice for call at symbol values sym is traced's; a size the guards so far
 * exclude, or one the op rejects (a broadcast the guards hold), counts as the same. */
static bool same_at(const dt_compile_variant *v, const dt_op_call *call, const int *nodes,
                    const int64_t *sym, const dt_propagation_result *traced) {
  for (int g = 0; g < v->n_guards; g++) {
    const dt_guard *gd = &v->guards[g];
    int64_t a = dt__sx_eval(&v->pool, gd->a, sym);
    if ((gd->kind == DT_GUARD_EQ && a != dt__sx_eval(&v->pool, gd->b, sym)) ||
        (gd->kind == DT_GUARD_DIVISIBLE && a % gd->c != 0) ||
        (gd->kind == DT_GUARD_GE && a < gd->c))
      return true;
  }
  int64_t shapes[DT_DIST_MAX_ARGS][DT_MAX_DIMS];
  int n = call->n_inputs + call->n_input_list;
  for (int i = 0; i < n; i++) {
    if (!arg_at(call, i) || nodes[i] < 0) continue;
    for (int d = 0; d < v->g->nodes[nodes[i]].types[0].ndim; d++)
      shapes[i][d] = dt__sx_eval(&v->pool, v->dims[nodes[i]][d], sym);
  }
  dt_propagation_result r;
  int nd = 0;
  return !choose(call, (const int64_t(*)[DT_MAX_DIMS])shapes, &r, &nd) ||
         same_choice(traced, &r, n, nd);
}

/* The largest value of symbol s between good (the choice holds) and bad (it does not). */
static int64_t boundary(const dt_compile_variant *v, const dt_op_call *call, const int *nodes,
                        int64_t *sym, int s, int64_t good, int64_t bad,
                        const dt_propagation_result *traced) {
  while (good + 1 < bad) {
    int64_t mid = good + (bad - good) / 2;
    sym[s] = mid;
    if (same_at(v, call, nodes, sym, traced))
      good = mid;
    else
      bad = mid;
  }
  return good;
}

bool dt__compile_dist_range(const dt_compile_variant *v, const dt_op_call *call, const int *nodes,
                            int64_t *lo, int64_t *hi) {
  dt_propagation_result traced;
  int nd = 0;
  if (!choose(call, NULL, &traced, &nd)) return false;
  int64_t *sym = dt__alloc(sizeof(int64_t) * (size_t)(v->n_symbols + 1));
  if (!sym) return false;
  for (int s = 0; s < v->n_symbols; s++) {
    int64_t h = v->hints[s];
    memcpy(sym, v->hints, sizeof(int64_t) * (size_t)v->n_symbols);
    lo[s] = 0;
    hi[s] = INT64_MAX;
    for (int64_t x = h, y = 2 * h + 1; y <= ((int64_t)1 << 40); x = y, y = 2 * y + 1) {
      sym[s] = y; /* upwards by doubling, then the exact boundary */
      if (same_at(v, call, nodes, sym, &traced)) continue;
      hi[s] = boundary(v, call, nodes, sym, s, x, y, &traced);
      break;
    }
    for (int64_t x = h, y = h / 2; x > 0; x = y, y /= 2) {
      sym[s] = y; /* downwards by halving to 0 */
      if (same_at(v, call, nodes, sym, &traced)) {
        if (y == 0) break;
        continue;
      }
      /* the smallest value that holds: the boundary from above, mirrored */
      int64_t good = x, bad = y;
      while (bad + 1 < good) {
        int64_t mid = bad + (good - bad) / 2;
        sym[s] = mid;
        if (same_at(v, call, nodes, sym, &traced))
          good = mid;
        else
          bad = mid;
      }
      lo[s] = good;
      break;
    }
    sym[s] = h;
  }
  dt__free(sym);
  return true;
}
