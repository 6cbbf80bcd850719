/*
 * Sharding rules of the index ops (issue 27): tril/triu, index_select, gather. cumsum and
 * topk use rules.c's keep-free-dims rule (a shard of the dim they run along is gathered
 * first; cumsum also keeps a linear Partial).
 */
#include "distributed/dist_impl.h"

static void push_replicated(dt_strategies *s, int n_args) {
  dt_placement in[DT_DIST_MAX_ARGS];
  for (int i = 0; i < n_args; i++) in[i] = dt_replicate();
  dt__rule_push(s, in, n_args, dt_replicate());
}

static bool all_replicated(const dt_rule_ctx *c, const dt_placement *cur) {
  for (int i = 0; i < c->n_args; i++) {
    if (c->args[i] && cur[i].kind != DT_REPLICATE) return false;
  }
  return true;
}

/* tril/triu keep any Shard, the two matrix dims included: the dist dispatcher shifts the
 * diagonal by the shard's row offset minus its column offset (global element (r0 + i, c0 + j)
 * is kept where (c0 + j) - (r0 + i) <= d, i.e. j - i <= d + r0 - c0). A StridedShard's
 * elements are not one block, so it is gathered first. Linear: a Partial(sum|avg) stays. On
 * an idle mesh dim any dim may be sharded. */
void dt__rule_triangle(const dt_rule_ctx *c, const dt_placement *cur, dt_strategies *s) {
  dt_placement in[1];
  if (cur[0].kind == DT_SHARD || dt__is_linear_partial(cur[0])) {
    in[0] = cur[0];
    dt__rule_push(s, in, 1, cur[0]);
  }
  push_replicated(s, 1);
  if (!all_replicated(c, cur)) return;
  for (int d = 0; d < c->args[0]->ndim; d++) {
    if (c->args[0]->shape[d] < 2) continue;
    in[0] = dt_shard(d);
    dt__rule_push(s, in, 1, dt_shard(d));
  }
}

/* index_select(self, dim, index):
 *  - self sharded on a dim other than `dim`, index replicated: each shard selects from its
 *    own slices, the output keeps the shard;
 *  - index sharded (its only dim), self replicated: each shard selects its positions, the
 *    output is sharded along `dim` alike (index's length is the output's size there);
 *  - linear in self: a Partial(sum|avg) self with the index replicated stays that Partial.
 * A self sharded along `dim` is gathered first (which rows a shard needs is data). */
void dt__rule_index_select(const dt_rule_ctx *c, const dt_placement *cur, dt_strategies *s) {
  const dt_tensor *self = c->args[0];
  int dim = (int)c->call->ints[0];
  bool idle = all_replicated(c, cur);
  dt_placement in[2];
  for (int d = 0; d < self->ndim; d++) {
    if (d == dim) continue;
    bool followed = cur[0].kind == DT_SHARD && cur[0].dim == d;
    if (!followed && !(idle && self->shape[d] >= 2)) continue;
    in[0] = dt_shard(d), in[1] = dt_replicate();
    dt__rule_push(s, in, 2, dt_shard(d));
  }
  if ((cur[1].kind == DT_SHARD && cur[1].dim == 0) || (idle && c->args[1]->shape[0] >= 2)) {
    in[0] = dt_replicate(), in[1] = dt_shard(0);
    dt__rule_push(s, in, 2, dt_shard(dim));
  }
  if (dt__is_linear_partial(cur[0]) && dt_dtype_is_floating(c->out[0].dtype)) {
    in[0] = cur[0], in[1] = dt_replicate();
    dt__rule_push(s, in, 2, cur[0]);
  }
  push_replicated(s, 2);
}

/* gather(self, dim, index): out[p] = self[p with p[dim] = index[p]].
 *  - a dim d other than `dim` where index and self have one size: both sharded on d, the output
 *    too (each shard gathers within its slices; sizes must match so the chunks do);
 *  - index sharded along `dim`, self replicated: a position's own place along `dim` is not
 *    used to read self, so each shard gathers its part, the output sharded alike;
 *  - linear in self: Partial(sum|avg) self, index replicated;
 *  - self sharded along `dim` = 0, index replicated: a masked Partial(sum) (below). */
void dt__rule_gather(const dt_rule_ctx *c, const dt_placement *cur, dt_strategies *s) {
  const dt_tensor *self = c->args[0], *index = c->args[1];
  int dim = (int)c->call->ints[0];
  bool idle = all_replicated(c, cur);
  dt_placement in[2];
  for (int d = 0; d < self->ndim; d++) {
    if (d == dim || index->shape[d] != self->shape[d]) continue;
    bool followed = (cur[0].kind == DT_SHARD && cur[0].dim == d) ||
                    (cur[1].kind == DT_SHARD && cur[1].dim == d);
    if (!followed && !(idle && self->shape[d] >= 2)) continue;
    in[0] = in[1] = dt_shard(d);
    dt__rule_push(s, in, 2, dt_shard(d));
  }
  if ((cur[1].kind == DT_SHARD && cur[1].dim == dim) || (idle && index->shape[dim] >= 2)) {
    in[0] = dt_replicate(), in[1] = dt_shard(dim);
    dt__rule_push(s, in, 2, dt_shard(dim));
  }
  if (dt__is_linear_partial(cur[0]) && dt_dtype_is_floating(c->out[0].dtype)) {
    in[0] = cur[0], in[1] = dt_replicate();
    dt__rule_push(s, in, 2, cur[0]);
  }
  /* self's rows sharded along the gather dim 0, index replicated: each shard gathers the
   * indices in its rows and zeros for the others (the dispatcher passes its row window,
   * DT_TRAIT_ROW_WINDOW), so the output is a Partial(sum) (PyTorch's masked partial). */
  if (dim == 0 && cur[0].kind == DT_SHARD && cur[0].dim == 0 &&
      dt_dtype_is_floating(c->out[0].dtype)) {
    in[0] = dt_shard(0), in[1] = dt_replicate();
    dt__rule_push(s, in, 2, dt_partial(DT_REDUCE_SUM));
  }
  push_replicated(s, 2);
}
