/*
 * Sharding decisions made at compile time: for a traced distributed call, runs the sharding
 * propagation that dispatch would run and tells whether the call takes its arguments as they
 * are placed (no redistribution, no row window, no shape attribute rewritten for the shard).
 * Such a call then runs on the shards directly on every later call, with the traced output
 * placements, skipping propagation and the sharding cache. Only rule families whose choice
 * does not depend on sizes qualify: a zero-cost choice stays the cheapest at every
 * non-empty size (the caller falls back to dispatch for empty tensors).
 */
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

bool dt__compile_dist_plain(const dt_op_call *call, dt_placement *out) {
  const dt_op_def *def = &dt__op_table[call->op];
  const unsigned special = DT_TRAIT_RANDOM | DT_TRAIT_GLOBAL_SHAPE_ATTR | DT_TRAIT_RUNS_AS_RESHAPE |
                           DT_TRAIT_TUPLE | DT_TRAIT_TENSOR_LIST;
  if (def->kind == DT_OP_KIND_INPLACE || (def->traits & special) || !family_qualifies(def->rule))
    return false;
  int n = call->n_inputs;
  if (n > DT_DIST_MAX_ARGS || call->n_input_list > 0) return false;
  const dt_dist_spec *spec = NULL;
  dt_tensor global[DT_DIST_MAX_ARGS];
  dt_op_call g = *call;
  for (int i = 0; i < n; i++) {
    const dt_tensor *t = call->inputs[i];
    if (!t) continue;
    if (!t->spec) return false; /* a local scalar mixed in: left to dispatch */
    if (!spec)
      spec = t->spec;
    else if (t->spec->mesh_id != spec->mesh_id)
      return false;
    global[i] = *t;
    global[i].ndim = t->spec->ndim;
    memcpy(global[i].shape, t->spec->shape, sizeof(int64_t) * (size_t)t->spec->ndim);
    dt__contiguous_strides(t->spec->ndim, t->spec->shape, global[i].strides);
    global[i].offset = 0;
    g.inputs[i] = &global[i];
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
    const dt_tensor *t = call->inputs[i];
    prop.args[i] = t ? &global[i] : NULL;
    for (int m = 0; m < spec->mesh_ndim; m++)
      prop.current[i][m] = t ? t->spec->placements[m] : dt_replicate();
  }
  dt_propagation_result r;
  if (dt__propagate(&prop, &r)) {
    dt_clear_error();
    return false;
  }
  if (r.fallback) return false;
  for (int i = 0; i < n; i++) {
    const dt_tensor *t = call->inputs[i];
    if (t && !dt__placements_equal(spec->mesh_ndim, t->spec->placements, r.targets[i]))
      return false;
  }
  if (def->traits & DT_TRAIT_ROW_WINDOW) { /* rows sharded: the kernel needs the window */
    for (int m = 0; m < spec->mesh_ndim; m++) {
      if (r.targets[0][m].kind == DT_SHARD && r.targets[0][m].dim == 0) return false;
    }
  }
  memcpy(out, r.out, sizeof(dt_placement) * (size_t)spec->mesh_ndim);
  return true;
}
