/*
 * Sharding rules of the losses (see rules.c for how rules are used): the row-wise ops
 * (cross_entropy_loss and its backward) and the vocabulary-parallel cross-entropy terms.
 */
#include "distributed/dist_impl.h"

/* Adds a candidate (these rules never propose the same one twice). */
static void push(dt_strategies *s, const dt_placement *in, int n_in, dt_placement out) {
  if (s->n >= DT_RULE_MAX_STRATEGIES) return;
  s->unsharded_before[s->n] = 0;
  for (int i = 0; i < n_in; i++) s->in[s->n][i] = in[i];
  s->out[s->n] = out;
  s->n++;
}

static void push_all(dt_strategies *s, const dt_rule_ctx *c, dt_placement p, dt_placement out) {
  dt_placement in[DT_DIST_MAX_ARGS];
  for (int i = 0; i < c->n_args; i++) in[i] = c->args[i] ? p : dt_replicate();
  push(s, in, c->n_args, out);
}

/* Row-wise ops (the losses): every argument and the output sharded on dim 0 together, or
 * everything replicated. No other dim: a row needs all its classes. */
void dt__rule_rows(const dt_rule_ctx *c, dt_strategies *s) {
  push_all(s, c, dt_shard(0), dt_shard(0));
  push_all(s, c, dt_replicate(), dt_replicate());
}

/* cross_entropy_vocab_terms(logits [N, C], max [N, 1], target [N, 1]) and its backward
 * (the same, then grad [N, k]): with the logits' classes sharded (dim 1) and the rest
 * replicated, each shard computes its classes' terms (the dispatcher passes its class window):
 * the terms' sums over the shards are a Partial(sum), the backward's output keeps the classes'
 * shard. Or rows: every argument sharded on dim 0. Or all replicated. */
void dt__rule_vocab_terms(const dt_rule_ctx *c, const dt_placement *cur, dt_strategies *s) {
  bool backward = c->call->op == DT_OP_CROSS_ENTROPY_VOCAB_TERMS_BACKWARD;
  if (cur[0].kind == DT_SHARD && cur[0].dim == 1) {
    dt_placement in[DT_DIST_MAX_ARGS];
    for (int i = 0; i < c->n_args; i++) in[i] = i == 0 ? dt_shard(1) : dt_replicate();
    push(s, in, c->n_args, backward ? dt_shard(1) : dt_partial(DT_REDUCE_SUM));
  }
  dt__rule_rows(c, s);
}
