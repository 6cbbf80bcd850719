/*
 * What the sharding-rule files share (distributed/rules.c, rules_index.c): adding a candidate
 * strategy, and the rule of ops that work along some dims and leave the others alone.
 */
#include "distributed/dist_impl.h"

void dt__rule_push(dt_strategies *s, const dt_placement *in, int n_in, dt_placement out) {
  if (s->n >= DT_RULE_MAX_STRATEGIES) return;
  s->unsharded_before[s->n] = 0;
  /* A repeated candidate would only make the propagator's joint search longer. */
  for (int k = 0; k < s->n; k++) {
    if (dt__placements_equal(1, &s->out[k], &out) && dt__placements_equal(n_in, s->in[k], in))
      return;
  }
  for (int i = 0; i < n_in; i++) s->in[s->n][i] = in[i];
  s->out[s->n] = out;
  s->n++;
}

/* The op works along `busy` dims (a bit mask of input 0's dims); other dims may stay sharded.
 * The first `alike` arguments (a backward's gradient and saved tensor) take input 0's
 * placement; the others (weights) are replicated. `reduces`: the op sums over the free dims
 * (a normalization's affine gradients), so a shard of one gives a Partial(sum). */
void dt__rule_keep_free_dims(const dt_rule_ctx *c, const dt_placement *cur, uint32_t busy,
                             int alike, bool reduces, dt_strategies *s) {
  dt_placement in[DT_DIST_MAX_ARGS];
  bool keeps = cur[0].kind == DT_SHARD && !(busy & (1u << cur[0].dim));
  for (int i = 0; i < c->n_args; i++) in[i] = keeps && i < alike ? cur[0] : dt_replicate();
  if (keeps) dt__rule_push(s, in, c->n_args, reduces ? dt_partial(DT_REDUCE_SUM) : cur[0]);
  for (int i = 0; i < alike; i++) in[i] = dt_replicate();
  /* Replicate (first unless a shard is kept, so that it wins ties). Then a dim the op leaves
   * alone: on an idle mesh dim a local slice; from a Partial a reduce_scatter in place of an
   * all_reduce, from a shard of a busy dim an all_to_all in place of a gather: either leaves a
   * smaller buffer for what the other mesh dims move (layer_norm of [P, S(normalized)] on 2x2:
   * reduce-scatter to S(0), then gather half). */
  dt__rule_push(s, in, c->n_args, dt_replicate());
  for (int d = 0; d < c->args[0]->ndim && !keeps && !reduces; d++) {
    if ((busy & (1u << d)) || c->args[0]->shape[d] < 2) continue;
    for (int i = 0; i < alike; i++) in[i] = dt_shard(d);
    dt__rule_push(s, in, c->n_args, dt_shard(d));
  }
}

bool dt__dist_rewrites_call(const dt_op_call *call, int mesh_ndim, const dt_placement *self,
                            const dt_placement *weight) {
  if (call->op != DT_OP_NARROW && call->op != DT_OP_RMS_NORM) return false;
  int ndim = call->n_inputs > 0 && call->inputs[0] ? call->inputs[0]->ndim : 0;
  int64_t d = call->n_ints > 0 && call->ints[0] < 0 ? call->ints[0] + ndim : call->ints[0];
  for (int m = 0; m < mesh_ndim; m++) {
    if (call->op == DT_OP_NARROW && dt__is_sharding(self[m]) && self[m].dim == d) return true;
    if (call->op == DT_OP_RMS_NORM && weight && dt__is_sharding(weight[m])) return true;
  }
  return false;
}
