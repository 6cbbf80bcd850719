/*
 * Sharding rules of the matrix products (split from rules.c): mm, bmm and matmul (batch dims
 * broadcasting), addmm and linear. Rows, columns and batch dims follow a shard of the operand
 * that has them; the contraction gives a Partial(sum); a Partial(sum|avg) operand times a
 * replica stays that Partial.
 */
#include "distributed/dist_impl.h"

static dt_placement R(void) { return dt_replicate(); }
static dt_placement S(int d) { return dt_shard(d); }

static void push(dt_strategies *s, const dt_placement *in, int n_in, dt_placement out) {
  dt__rule_push(s, in, n_in, out);
}

static void push_replicated(dt_strategies *s, int n_args) {
  dt_placement in[DT_DIST_MAX_ARGS];
  for (int i = 0; i < n_args; i++) in[i] = R();
  push(s, in, n_args, R());
}

/* ---- Matrix products ---------------------------------------------------------------------- */

/* mm / bmm / matmul: a [.., n, k], b [.., k, m], the batch dims broadcasting. */
void dt__rule_matmul(const dt_rule_ctx *c, const dt_placement *cur, dt_strategies *s) {
  const dt_tensor *a = c->args[0], *b = c->args[1];
  int na = a->ndim, nb = b->ndim, no = c->out[0].ndim;
  dt_placement in[2];
  if (na == 1 && nb == 1) { /* dot: the contraction is the only dim */
    in[0] = S(0), in[1] = S(0), push(s, in, 2, dt_partial(DT_REDUCE_SUM));
  } else if (na >= 2 && nb == 1) { /* [.., n, k] @ [k] -> [.., n] */
    in[0] = S(na - 2), in[1] = R(), push(s, in, 2, S(no - 1));
    in[0] = S(na - 1), in[1] = S(0), push(s, in, 2, dt_partial(DT_REDUCE_SUM));
    for (int d = 0; d < na - 2; d++) in[0] = S(d), in[1] = R(), push(s, in, 2, S(d));
  } else if (na == 1 && nb >= 2) { /* [k] @ [.., k, m] -> [.., m] */
    in[0] = R(), in[1] = S(nb - 1), push(s, in, 2, S(no - 1));
    in[0] = S(0), in[1] = S(nb - 2), push(s, in, 2, dt_partial(DT_REDUCE_SUM));
    for (int d = 0; d < nb - 2; d++) in[0] = R(), in[1] = S(d), push(s, in, 2, S(d));
  } else {
    in[0] = S(na - 2), in[1] = R(), push(s, in, 2, S(no - 2)); /* rows of a */
    in[0] = R(), in[1] = S(nb - 1), push(s, in, 2, S(no - 1)); /* columns of b */
    in[0] = S(na - 1), in[1] = S(nb - 2), push(s, in, 2, dt_partial(DT_REDUCE_SUM)); /* k */
    /* Batch dims (broadcast as PyTorch's matmul does): an output batch dim is sharded where
     * each operand that spans it at full size is sharded alike and one that broadcasts it
     * (size 1, or absent) is replicated: [3, 1, 6, 4] S(0) @ [3, 4, 5] R moves nothing. */
    for (int k = 0; k < no - 2; k++) {
      int da = k - (no - na), db = k - (no - nb);
      bool sa = da >= 0 && a->shape[da] == c->out[0].shape[k];
      bool sb = db >= 0 && b->shape[db] == c->out[0].shape[k];
      if (!sa && !sb) continue;
      in[0] = sa ? S(da) : R(), in[1] = sb ? S(db) : R();
      push(s, in, 2, S(k));
    }
  }
  for (int i = 0; i < 2; i++) {
    if (dt__is_linear_partial(cur[i])) {
      in[i] = cur[i];
      in[1 - i] = R();
      push(s, in, 2, cur[i]);
    }
  }
  push_replicated(s, 2);
}

/* addmm(bias, a, b): mm's strategies with the bias following the output. */
void dt__rule_addmm(const dt_rule_ctx *c, const dt_placement *cur, dt_strategies *s) {
  const dt_tensor *bias = c->args[0];
  int nb = bias->ndim;
  dt_placement in[3];
  /* rows */
  in[0] = (nb == 2 && bias->shape[0] != 1) ? S(0) : R(), in[1] = S(0), in[2] = R();
  push(s, in, 3, S(0));
  /* columns */
  in[0] = (nb >= 1 && bias->shape[nb - 1] != 1) ? S(nb - 1) : R(), in[1] = R(), in[2] = S(1);
  push(s, in, 3, S(1));
  /* contraction: the bias must be counted once, so it becomes a Partial too */
  in[0] = dt_partial(DT_REDUCE_SUM), in[1] = S(1), in[2] = S(0);
  push(s, in, 3, dt_partial(DT_REDUCE_SUM));
  /* Linear in each factor: a Partial factor times a replica, plus the bias as the same
   * Partial (bias + sum_r a_r b = sum_r (bias_r + a_r b) with the bias's partials). Also
   * when only the bias is Partial: a replicated factor becomes Partial locally (R -> P)
   * and the bias's partials are kept instead of reduced. */
  for (int i = 1; i < 3; i++) {
    dt_placement p = dt__is_linear_partial(cur[i]) ? cur[i] : cur[0];
    if (!dt__is_linear_partial(p)) continue;
    in[0] = p, in[1] = R(), in[2] = R();
    in[i] = p;
    push(s, in, 3, p);
  }
  /* The contraction with a Partial bias: the factors' partial products are a Partial(sum),
   * so only a Partial(sum) bias joins them (the strategy above). A Partial(avg) bias would
   * average the products instead of summing them: it is reduced (or rescaled) first. */
  push_replicated(s, 3);
}

/* linear(x [.., in], w [out, in], bias [out]?). */
void dt__rule_linear(const dt_rule_ctx *c, const dt_placement *cur, dt_strategies *s) {
  const dt_tensor *x = c->args[0];
  bool has_bias = c->n_args > 2 && c->args[2];
  int nx = x->ndim;
  dt_placement in[3] = {R(), R(), R()};
  /* colwise: weight rows -> output features */
  in[0] = R(), in[1] = S(0), in[2] = has_bias ? S(c->args[2]->ndim - 1) : R();
  if (has_bias && c->args[2]->shape[c->args[2]->ndim - 1] == 1) in[2] = R();
  push(s, in, c->n_args, S(c->out[0].ndim - 1));
  /* rowwise: contraction over in-features -> Partial(sum), bias counted once */
  in[0] = S(nx - 1), in[1] = S(1), in[2] = has_bias ? dt_partial(DT_REDUCE_SUM) : R();
  push(s, in, c->n_args, dt_partial(DT_REDUCE_SUM));
  /* batch dims of x */
  for (int d = 0; d < nx - 1; d++) {
    in[0] = S(d), in[1] = R(), in[2] = R();
    push(s, in, c->n_args, S(d));
  }
  /* Linear in each of x and w: a Partial one times a replica of the other; a bias becomes
   * the same Partial so that it is counted once. A Partial bias alone makes x or w Partial
   * locally (R -> P) to keep its partials. */
  for (int i = 0; i < 2; i++) {
    dt_placement p = dt__is_linear_partial(cur[i]) ? cur[i] : has_bias ? cur[2] : R();
    if (!dt__is_linear_partial(p)) continue;
    in[0] = R(), in[1] = R(), in[2] = has_bias ? p : R();
    in[i] = p;
    push(s, in, c->n_args, p);
  }
  /* Idle mesh dim: batch dims of x (already proposed above) or output features. */
  push_replicated(s, c->n_args);
}
