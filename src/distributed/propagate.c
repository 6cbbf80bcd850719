/*
 * The sharding propagator. For each mesh dim the op's rule proposes strategies given the
 * arguments' current placements there; each is priced by the cost model (the bytes its
 * input transitions would move, see redistribute_impl.h) and the cheapest wins. Mesh dims
 * are decided one after another, each priced from the arguments' current placements.
 */
#include <math.h>

#include "distributed/propagate_impl.h"

/* For argument 0: how many pieces each tensor dim is cut into when mesh dim m shards it
 * together with the other mesh dims that already shard it (nested sharding). */
static void nested_split(const dt_propagation *p, int m, int64_t *split) {
  for (int d = 0; d < DT_MAX_DIMS; d++) split[d] = p->mesh_size[m];
  if (p->n_args == 0 || !p->args[0]) return;
  for (int j = 0; j < p->mesh_ndim; j++) {
    dt_placement q = p->current[0][j];
    if (j != m && q.kind == DT_SHARD && q.dim >= 0 && q.dim < DT_MAX_DIMS)
      split[q.dim] *= p->mesh_size[j];
  }
}

static double price(const dt_propagation *p, int i, int m, dt_placement to) {
  const dt_placement *state = p->current[i];
  if (dt__placements_equal(1, &state[m], &to)) return 0;
  if (p->fixed_replica[i]) return HUGE_VAL;
  const dt_tensor *t = p->args[i];
  dt_redistribute_geometry g = {.mesh_ndim = p->mesh_ndim,
                                .global_bytes = (double)dt__tensor_numel(t) *
                                                (double)dt__dtype_sizes[t->dtype]};
  memcpy(g.mesh_size, p->mesh_size, sizeof(int64_t) * (size_t)p->mesh_ndim);
  if (p->cost) return p->cost(p->user, i, &g, state, m, to);
  return dt__transition_cost(&g, state, m, to);
}

dt_status dt__propagate(const dt_propagation *p, dt_propagation_result *r) {
  const dt_op_def *def = &dt__op_table[p->call->op];
  bool inplace = def->kind == DT_OP_KIND_INPLACE;
  r->cost = 0;
  r->fallback = false;
  r->failed_mesh_dim = -1;
  dt_rule_ctx ctx = {.call = p->call, .n_args = p->n_args, .n_out = p->n_out, .out = p->out};
  memcpy(ctx.args, p->args, sizeof(ctx.args[0]) * (size_t)p->n_args);
  for (int m = 0; m < p->mesh_ndim; m++) {
    ctx.mesh_size = p->mesh_size[m];
    nested_split(p, m, ctx.split);
    dt_placement cur[DT_DIST_MAX_ARGS];
    for (int i = 0; i < p->n_args; i++) cur[i] = p->current[i][m];
    dt_strategies s;
    if (!dt__sharding_rule(&ctx, cur, &s)) {
      for (int i = 0; i < p->n_args; i++) s.in[0][i] = dt_replicate();
      s.out[0] = dt_replicate();
      s.n = 1;
      r->fallback = true;
    }
    int best = -1;
    double best_cost = HUGE_VAL;
    for (int k = 0; k < s.n; k++) {
      if (inplace && (!dt__placements_equal(1, &s.in[k][0], &cur[0]) ||
                      !dt__placements_equal(1, &s.out[k], &cur[0]))) {
        continue; /* self keeps its placement */
      }
      if (p->accept && !p->accept(p->user, m, s.in[k], s.out[k])) continue;
      double cost = 0;
      for (int i = 0; i < p->n_args && cost < HUGE_VAL; i++) {
        if (p->args[i]) cost += price(p, i, m, s.in[k][i]);
      }
      if (cost < best_cost) {
        best = k;
        best_cost = cost;
      }
    }
    if (best < 0) {
      r->failed_mesh_dim = m;
      return DT_ERR_UNSUPPORTED;
    }
    for (int i = 0; i < p->n_args; i++) r->targets[i][m] = s.in[best][i];
    r->out[m] = s.out[best];
    r->cost += best_cost;
  }
  return DT_OK;
}
