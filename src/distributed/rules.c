/*
 * Sharding rules: for one mesh dim, given the arguments' current placements, the candidate
 * strategies (placement each argument must take, placement of the outputs). The
 * propagator (distributed/propagate.c) prices each candidate with the cost model and
 * takes the cheapest. Every rule also offers "all Replicate", which is always correct.
 *
 * Partial placements survive only where the op is linear in them: P(sum)+P(sum), P·R for
 * mul, P/R for div, neg, views (expand included) and copies, cat and stack, sum over
 * anything, and matrix products (mm, matmul, addmm, linear: rules_matmul.c) with one Partial
 * operand and the other replicated (a bias then becomes the same Partial, counted once), and
 * scatter_add (self and src the same Partial). "Partial" here is sum or avg, the same one on
 * every argument of a strategy: a sum and an avg never combine, and a contraction (mm of
 * Shard(1) x Shard(0), linear rowwise) gives a Partial(sum), which a bias joins only as a
 * Partial(sum). Partial(max|min) survive ops
 * that are non-decreasing in their first argument (DT_TRAIT_MONOTONE: exp, relu, adding a
 * replica...). Everything else reduces the Partial first.
 *
 * Where every argument is replicated on the mesh dim being decided (an idle mesh dim), rules
 * also propose sharding a dim the op leaves alone: sharding it first shrinks what another
 * mesh dim must gather, which the propagator's joint search over mesh dims finds.
 */
#include "distributed/dist_impl.h"

static dt_placement R(void) { return dt_replicate(); }
static dt_placement S(int d) { return dt_shard(d); }

static void push(dt_strategies *s, const dt_placement *in, int n_in, dt_placement out) {
  dt__rule_push(s, in, n_in, out);
}

/* push, for a strategy that relies on argument 0's placements on the earlier mesh dims. */
static void push_keeping_outer(dt_strategies *s, const dt_placement *in, int n_in,
                               dt_placement out) {
  int n = s->n;
  push(s, in, n_in, out);
  if (s->n > n) s->keeps_outer |= 1u << n;
}

/* push, for a strategy that relies on no earlier mesh dim sharding argument 0's dims in
 * `dims` (a bit mask). */
static void push_unsharded_before(dt_strategies *s, const dt_placement *in, int n_in,
                                  dt_placement out, uint32_t dims) {
  int n = s->n;
  push(s, in, n_in, out);
  if (s->n > n) s->unsharded_before[n] = dims;
}

static void push_replicated(dt_strategies *s, int n_args) {
  dt_placement in[DT_DIST_MAX_ARGS];
  for (int i = 0; i < n_args; i++) in[i] = R();
  push(s, in, n_args, R());
}

/* A Partial that an op linear in its argument keeps: sum or avg. Linear ops keep it when every
 * Partial argument of the strategy has the same one (sum_r f(x_r) = f(sum_r x_r), and alike
 * for the mean); the two never mix, and a contraction's partial products are a Partial(sum). */
static bool is_linear_partial(dt_placement p) { return dt__is_linear_partial(p); }

static bool is_order_partial(dt_placement p) {
  return p.kind == DT_PARTIAL && (p.op == DT_REDUCE_MAX || p.op == DT_REDUCE_MIN);
}

/* Every present argument is replicated on this mesh dim. */
static bool all_replicated(const dt_rule_ctx *c, const dt_placement *cur) {
  for (int i = 0; i < c->n_args; i++) {
    if (c->args[i] && cur[i].kind != DT_REPLICATE) return false;
  }
  return true;
}

/* ---- Pointwise ---------------------------------------------------------------------------- */

/* Output dim k sharded: an argument takes S(its dim) where it spans k, else R (broadcast);
 * with split_factor f > 0, StridedShard(its dim, f) instead of S. */
static bool pointwise_shard(const dt_rule_ctx *c, int k, int f, dt_placement *in) {
  int out_ndim = c->out[0].ndim;
  for (int i = 0; i < c->n_args; i++) {
    const dt_tensor *a = c->args[i];
    if (!a) {
      in[i] = R();
      continue;
    }
    int d = k - (out_ndim - a->ndim);
    if (d >= 0 && a->shape[d] == c->out[0].shape[k]) {
      in[i] = f > 0 ? dt_strided_shard(d, f) : S(d);
    } else {
      in[i] = R();
    }
  }
  return true;
}

static void rule_pointwise(const dt_rule_ctx *c, const dt_placement *cur, dt_strategies *s) {
  dt_placement in[DT_DIST_MAX_ARGS];
  /* Follow each argument's sharding. */
  for (int i = 0; i < c->n_args; i++) {
    if (cur[i].kind != DT_SHARD || !c->args[i]) continue;
    int k = cur[i].dim + (c->out[0].ndim - c->args[i]->ndim);
    if (c->args[i]->shape[cur[i].dim] != c->out[0].shape[k]) continue;
    pointwise_shard(c, k, 0, in);
    push(s, in, c->n_args, S(k));
  }
  /* A StridedShard is kept like a shard: every argument spanning the dim takes the same
   * blocks. */
  for (int i = 0; i < c->n_args; i++) {
    if (cur[i].kind != DT_STRIDED_SHARD || !c->args[i]) continue;
    int k = cur[i].dim + (c->out[0].ndim - c->args[i]->ndim);
    if (c->args[i]->shape[cur[i].dim] != c->out[0].shape[k]) continue;
    pointwise_shard(c, k, cur[i].split_factor, in);
    push(s, in, c->n_args, dt_strided_shard(k, cur[i].split_factor));
  }
  /* An idle mesh dim may shard any output dim of more than one element. */
  if (all_replicated(c, cur)) {
    for (int k = 0; k < c->out[0].ndim; k++) {
      if (c->out[0].shape[k] < 2) continue;
      pointwise_shard(c, k, 0, in);
      push(s, in, c->n_args, S(k));
    }
  }
  /* Partial(max|min) through an op non-decreasing in its first argument, the others
   * replicated: f(max_r x_r, y) = max_r f(x_r, y). Not into bool (a test, not an order). */
  if ((dt__op_table[c->call->op].traits & DT_TRAIT_MONOTONE) && is_order_partial(cur[0]) &&
      c->out[0].dtype != DT_BOOL) {
    for (int j = 0; j < c->n_args; j++) in[j] = R();
    in[0] = cur[0];
    push(s, in, c->n_args, cur[0]);
  }
  /* Partial where the op is linear. A cast into an integer or bool dtype is not (rounding
   * each partial value is not rounding their sum). */
  unsigned lin = dt__op_table[c->call->op].traits &
                 (DT_TRAIT_LINEAR | DT_TRAIT_LINEAR_FIRST | DT_TRAIT_LINEAR_EACH);
  if (!dt_dtype_is_floating(c->out[0].dtype)) lin = 0;
  for (int i = 0; i < c->n_args && lin; i++) {
    if (!is_linear_partial(cur[i])) continue;
    if (lin & DT_TRAIT_LINEAR) {
      /* Every tensor argument takes the same Partial (others are scaled alike). */
      for (int j = 0; j < c->n_args; j++) in[j] = c->args[j] ? cur[i] : R();
      push(s, in, c->n_args, cur[i]);
    } else if (i == 0 || (lin & DT_TRAIT_LINEAR_EACH)) {
      for (int j = 0; j < c->n_args; j++) in[j] = R();
      in[i] = cur[i];
      push(s, in, c->n_args, cur[i]);
    }
  }
  push_replicated(s, c->n_args);
}

/* *_like: the output takes the input's layout without reading its values. */
static void rule_like(const dt_rule_ctx *c, const dt_placement *cur, dt_strategies *s) {
  dt_placement in[1] = {cur[0]};
  push(s, in, 1, cur[0].kind == DT_PARTIAL ? R() : cur[0]);
}

/* ---- Reductions --------------------------------------------------------------------------- */

/* max/min of an empty shard has no value, so Partial(max/min) needs every shard non-empty:
 * guaranteed by an even split, or by the chunk sizes at each level of nesting (the
 * propagator works them out: [7] on [S(0), S(0)] over 2 x 2 is pieces 2, 2, 2, 1). */
static bool no_empty_shard(const dt_rule_ctx *c, int d, int64_t size) {
  if (size % c->split[d] == 0) return size > 0;
  return c->nonempty[d];
}

static void rule_reduction(const dt_rule_ctx *c, const dt_placement *cur, dt_strategies *s) {
  const dt_tensor *a = c->args[0];
  const dt_reduction_facts f = dt__reduction_facts(c->call, a->ndim);
  const uint32_t reduced = f.mask;
  bool keepdim = (c->call->flags & DT_OP_FLAG_KEEPDIM) != 0 && !f.all;
  dt_placement in[1];
  dt_placement p = cur[0];
  if (p.kind == DT_SHARD) {
    int d = p.dim;
    in[0] = p;
    if (reduced & (1u << d)) {
      /* The pieces' results combine as a Partial; positions need the whole dim. A max or
       * min needs no empty piece; the mean of means is the mean only for equal pieces. */
      bool ok = !f.indices;
      if (ok && (f.combine == DT_REDUCE_MAX || f.combine == DT_REDUCE_MIN))
        ok = no_empty_shard(c, d, a->shape[d]);
      if (ok && f.combine == DT_REDUCE_AVG) ok = a->shape[d] % c->split[d] == 0;
      if (ok) push(s, in, 1, dt_partial(f.combine));
    } else {
      int k = d;
      if (!keepdim) {
        for (int j = 0; j < d; j++) k -= (reduced >> j) & 1u;
      }
      push(s, in, 1, S(k));
    }
  } else if (p.kind == DT_STRIDED_SHARD) {
    int d = p.dim;
    in[0] = p;
    if (reduced & (1u << d)) {
      /* A rank holds a subset of the dim's elements (its chunk of every block), so its
       * result is a partial one exactly as for a Shard. Max/min need no empty chunk and
       * mean equal counts: both hold when the mesh dim divides the block. */
      int64_t block = a->shape[d] / c->outer[d] / p.split_factor; /* of what they leave */
      bool even = block > 0 && block % c->mesh_size == 0;
      bool ok = !f.indices && (f.combine == DT_REDUCE_SUM || even);
      if (ok && f.combine != DT_REDUCE_SUM && c->outer[d] > 1)
        push_keeping_outer(s, in, 1, dt_partial(f.combine));
      else if (ok && f.combine != DT_REDUCE_SUM)
        push_unsharded_before(s, in, 1, dt_partial(f.combine), 1u << d);
      else if (ok)
        push(s, in, 1, dt_partial(f.combine));
    } else {
      /* The dim survives with the same elements on each rank: the same strided shard. */
      int k = d;
      if (!keepdim) {
        for (int j = 0; j < d; j++) k -= (reduced >> j) & 1u;
      }
      push(s, in, 1, dt_strided_shard(k, p.split_factor));
    }
  } else if (p.kind == DT_PARTIAL) {
    in[0] = p;
    /* Sum and mean are linear in a Partial(sum); max of a Partial(max) stays one (min alike). */
    bool linear = !f.indices && (f.combine == DT_REDUCE_SUM || f.combine == DT_REDUCE_AVG) &&
                  is_linear_partial(p);
    bool same = !f.indices && (f.combine == DT_REDUCE_MAX || f.combine == DT_REDUCE_MIN) &&
                p.op == f.combine;
    if (linear || same) push(s, in, 1, p);
  } else {
    /* Idle mesh dim: shard a dim the reduction keeps, or one it reduces (a local slice whose
     * results combine as a Partial, under the conditions above): the other mesh dims then
     * gather a smaller piece (the mean of [3, 6, 6] on [S(0), R] over 2 x 3: mesh dim 1
     * slices dim 1 and mesh dim 0 gathers a third of the tensor). */
    for (int d = 0; d < a->ndim; d++) {
      if (!(reduced & (1u << d)) || a->shape[d] < 2 || f.indices) continue;
      bool ok = f.combine == DT_REDUCE_SUM;
      if (f.combine == DT_REDUCE_MAX || f.combine == DT_REDUCE_MIN)
        ok = no_empty_shard(c, d, a->shape[d]);
      if (f.combine == DT_REDUCE_AVG) ok = a->shape[d] % c->split[d] == 0;
      in[0] = S(d);
      if (ok) push(s, in, 1, dt_partial(f.combine));
    }
    for (int d = 0; d < a->ndim; d++) {
      if ((reduced & (1u << d)) || a->shape[d] < 2) continue;
      int k = d;
      if (!keepdim) {
        for (int j = 0; j < d; j++) k -= (reduced >> j) & 1u;
      }
      in[0] = S(d);
      push(s, in, 1, S(k));
    }
  }
  push_replicated(s, 1);
}

/* ---- NN ops -----------------------------------------------------------------------------------
 */

/* batch_norm and batch_norm_training work per channel (dim 1 of x), and so may keep any dim of
 * x sharded. The channel dim: the per-channel arguments (running statistics, weight, bias, all
 * [C]) are sliced alike (a replica is sliced locally, nothing moves) and each shard normalizes
 * its own channels. Another dim: the per-channel arguments stay replicated; the inference
 * form reads only its channel's constants; the training form's statistics then run over the
 * shards together (synchronized batch norm: the dist dispatcher all_reduces per-channel sums
 * across the mesh dims that shard such a dim, distributed/dispatch.c). */
static void push_per_channel(const dt_rule_ctx *c, int d, dt_strategies *s) {
  dt_placement in[DT_DIST_MAX_ARGS];
  in[0] = S(d);
  for (int i = 1; i < c->n_args; i++) in[i] = d == 1 && c->args[i] ? S(0) : R();
  push(s, in, c->n_args, S(d));
}

static void rule_batch_norm(const dt_rule_ctx *c, const dt_placement *cur, dt_strategies *s) {
  const dt_tensor *x = c->args[0];
  if (cur[0].kind == DT_SHARD) {
    push_per_channel(c, cur[0].dim, s);
    push_replicated(s, c->n_args);
    return;
  }
  /* Replicate first, so that it wins ties; then a dim to keep sharded: on an idle mesh dim a
   * local slice, from a Partial a reduce_scatter in place of an all_reduce. */
  push_replicated(s, c->n_args);
  for (int d = 0; d < x->ndim; d++) {
    if (x->shape[d] >= 2) push_per_channel(c, d, s);
  }
}

static void rule_embedding(const dt_rule_ctx *c, const dt_placement *cur, dt_strategies *s) {
  const dt_tensor *idx = c->args[1];
  dt_placement in[2];
  in[0] = S(1), in[1] = R(); /* embedding dim sharded -> last output dim */
  push(s, in, 2, S(idx->ndim));
  /* Vocabulary-parallel: rows sharded; each shard looks up the rows it holds (zeros for the
   * others), so the output is a Partial(sum). The dist dispatcher passes the row window. */
  in[0] = S(0), in[1] = R();
  push(s, in, 2, dt_partial(DT_REDUCE_SUM));
  if (cur[1].kind == DT_SHARD) { /* indices sharded -> output sharded alike */
    in[0] = R(), in[1] = cur[1];
    push(s, in, 2, cur[1]);
  }
  push_replicated(s, 2);
}

/* embedding_backward(weight, indices, grad): the weight (never read) sharded by rows with the
 * rest replicated, each shard adds the indices in its rows (row window); its dim 1 with
 * grad's last dim; or a batch (indices and grad sharded alike) gives a Partial(sum). */
static void rule_embedding_backward(const dt_rule_ctx *c, const dt_placement *cur,
                                    dt_strategies *s) {
  int last = c->args[1]->ndim;
  if (cur[0].kind == DT_SHARD)
    push(s, (dt_placement[]){cur[0], R(), cur[0].dim ? S(last) : R()}, 3, cur[0]);
  for (int i = 1; i < 3; i++) {
    if (cur[i].kind == DT_SHARD && cur[i].dim < last)
      push(s, (dt_placement[]){R(), cur[i], cur[i]}, 3, dt_partial(DT_REDUCE_SUM));
  }
  push_replicated(s, 3);
}

/* scatter_add(self, dim, index, src) = self plus src's values added at the index rows:
 *  - a dim other than the scatter dim, sharded alike in all three (same size there), stays
 *    sharded: each shard scatters its own slices;
 *  - self's rows sharded along a scatter dim 0, index and src replicated: each shard adds only
 *    the indices in its rows (the dispatcher passes the row window, DT_TRAIT_ROW_WINDOW), so
 *    the output keeps self's sharding (embedding's gradient of a vocabulary-parallel weight);
 *  - linear in self and src together: self and src the same Partial(sum), index replicated;
 *  - index and src sharded along the scatter dim (a batch of lookups): each shard adds its
 *    part into a self that is a Partial(sum) (a replica becomes one locally), output
 *    Partial(sum). */
static void rule_scatter_add(const dt_rule_ctx *c, const dt_placement *cur, dt_strategies *s) {
  const dt_tensor *self = c->args[0], *index = c->args[1], *src = c->args[2];
  int dim = (int)c->call->ints[0];
  dt_placement in[3];
  bool idle = all_replicated(c, cur);
  for (int d = 0; d < self->ndim; d++) {
    if (d == dim || index->shape[d] != self->shape[d] || src->shape[d] != self->shape[d]) continue;
    bool followed = false;
    for (int i = 0; i < 3; i++) followed |= cur[i].kind == DT_SHARD && cur[i].dim == d;
    if (!followed && !(idle && self->shape[d] >= 2)) continue;
    in[0] = in[1] = in[2] = S(d);
    push(s, in, 3, S(d));
  }
  if (dim == 0 && cur[0].kind == DT_SHARD && cur[0].dim == 0) {
    in[0] = S(0), in[1] = R(), in[2] = R();
    push(s, in, 3, S(0));
  }
  if (dt_dtype_is_floating(c->out[0].dtype)) {
    for (int i = 0; i < 3; i += 2) {
      if (!is_linear_partial(cur[i])) continue;
      in[0] = in[2] = cur[i], in[1] = R();
      push(s, in, 3, cur[i]);
    }
    bool batch = (cur[1].kind == DT_SHARD && cur[1].dim == dim) ||
                 (cur[2].kind == DT_SHARD && cur[2].dim == dim);
    if (batch && index->shape[dim] == src->shape[dim]) {
      in[0] = dt_partial(DT_REDUCE_SUM), in[1] = S(dim), in[2] = S(dim);
      push(s, in, 3, dt_partial(DT_REDUCE_SUM));
    }
  }
  push_replicated(s, 3);
}

/* cat/stack: every input takes the sharding of any one of them along a dim other than the
 * cat dim (replicas are sliced locally), or, as the op is linear, the Partial(sum) of any
 * one of them (replicas and shards become that Partial locally). */
static void rule_cat(const dt_rule_ctx *c, const dt_placement *cur, dt_strategies *s, bool stack) {
  int dim = (int)c->call->ints[0];
  dt_placement in[DT_DIST_MAX_ARGS];
  uint32_t tried = 0;
  bool partial_tried = false;
  bool idle = all_replicated(c, cur);
  for (int j = 0; j < c->n_args; j++) {
    if (cur[j].kind == DT_SHARD && (stack || cur[j].dim != dim) && !(tried & (1u << cur[j].dim))) {
      int d = cur[j].dim;
      tried |= 1u << d;
      bool ok = true;
      for (int i = 0; i < c->n_args; i++) {
        const dt_tensor *t = c->args[i];
        if (t->ndim != c->args[j]->ndim || t->shape[d] != c->args[j]->shape[d]) ok = false;
        in[i] = S(d);
      }
      if (ok) push(s, in, c->n_args, S(stack && d >= dim ? d + 1 : d));
    } else if (is_linear_partial(cur[j]) && !partial_tried &&
               dt_dtype_is_floating(c->out[0].dtype)) {
      partial_tried = true;
      for (int i = 0; i < c->n_args; i++) in[i] = cur[j];
      push(s, in, c->n_args, cur[j]);
    }
  }
  if (idle) { /* an idle mesh dim: shard a dim other than the cat dim */
    const dt_tensor *t0 = c->args[0];
    for (int d = 0; d < t0->ndim; d++) {
      if ((!stack && d == dim) || t0->shape[d] < 2) continue;
      bool ok = true;
      for (int i = 0; i < c->n_args; i++) {
        const dt_tensor *t = c->args[i];
        if (t->ndim != t0->ndim || t->shape[d] != t0->shape[d]) ok = false;
        in[i] = S(d);
      }
      if (ok) push(s, in, c->n_args, S(stack && d >= dim ? d + 1 : d));
    }
  }
  push_replicated(s, c->n_args);
}

/* ---- Views -------------------------------------------------------------------------------- */

/* Ops that map input dims to output dims one to one (or drop/insert some): map[d] is the
 * output dim of input dim d, or -1 when d must be whole (replicated) for the op. */
static void rule_dim_map(const dt_rule_ctx *c, const dt_placement *cur, const int *map,
                         bool partial_ok, dt_strategies *s) {
  dt_placement in[DT_DIST_MAX_ARGS];
  for (int i = 0; i < c->n_args; i++) in[i] = R();
  if (cur[0].kind == DT_SHARD && map[cur[0].dim] >= 0) {
    in[0] = cur[0];
    push(s, in, c->n_args, S(map[cur[0].dim]));
  } else if (cur[0].kind == DT_PARTIAL && partial_ok) {
    in[0] = cur[0];
    push(s, in, c->n_args, cur[0]);
  } else if (all_replicated(c, cur)) {
    for (int d = 0; d < c->args[0]->ndim; d++) { /* idle mesh dim */
      if (map[d] < 0 || c->args[0]->shape[d] < 2) continue;
      in[0] = S(d);
      push(s, in, c->n_args, S(map[d]));
    }
  }
  for (int i = 0; i < c->n_args; i++) in[i] = R();
  push(s, in, c->n_args, R());
}

/* The group of view dims holding input dim d: input dims [*gi, *ie) and output dims
 * [*go, *oe) with equal products. False when the shapes do not pair up. */
static bool view_group(const dt_tensor *a, const dt_tensor_meta *o, int d, int *gi, int *ie,
                       int *go, int *oe) {
  int i = 0, j = 0;
  while (i < a->ndim && j < o->ndim) {
    int first_i = i, first_j = j;
    int64_t pa = a->shape[i++], po = o->shape[j++];
    while (pa != po) {
      if (pa < po && i < a->ndim)
        pa *= a->shape[i++];
      else if (po < pa && j < o->ndim)
        po *= o->shape[j++];
      else
        return false;
    }
    if (d >= first_i && d < i) {
      *gi = first_i, *ie = i, *go = first_j, *oe = j;
      return true;
    }
  }
  return false;
}

/* view/reshape/flatten: an input dim keeps its sharding when it maps to an output dim of the
 * same size, or when it is the leading dim of a merge or split whose chunks line up (its
 * size and the leading output dim's size divisible by the mesh size). */
static int view_map_dim(const dt_tensor *a, const dt_tensor_meta *o, int d, int64_t n) {
  /* n: pieces dim d is cut into (all levels of nesting); splits must be even at each. */
  int gi, i, gj, j;
  if (!view_group(a, o, d, &gi, &i, &gj, &j)) return -1;
  int first_in = gi, first_out = gj;
  while (first_in < i - 1 && a->shape[first_in] == 1) first_in++;
  while (first_out < j - 1 && o->shape[first_out] == 1) first_out++;
  if (d != first_in) return -1;
  if (a->shape[d] == o->shape[first_out]) return first_out;
  /* A merge (d leads several output elements) or a split (the leading output dim is a
   * block of d): shard chunks line up when both leading sizes divide evenly. */
  if (a->shape[d] % n == 0 && o->shape[first_out] % n == 0) return first_out;
  return -1;
}

/* A view consuming argument 0's StridedShard of dim d: nested (outer > 1) it relies on the
 * earlier mesh dims as they are, else on none of them sharding d. */
static void push_viewed(dt_strategies *s, const dt_rule_ctx *c, const dt_placement *in, int d,
                        int64_t outer, dt_placement out) {
  if (outer > 1)
    push_keeping_outer(s, in, c->n_args, out);
  else
    push_unsharded_before(s, in, c->n_args, out, 1u << d);
}

/* StridedShard through views (PyTorch's _StridedShard). Produced: input dim d sharded (by
 * this mesh dim only) and merged into one output dim k, as the last non-1 dim of its group or
 * with its chunks even (then each holds whole rows of the dims after it): the dims before it
 * make f blocks, each sharded like d, so the output is StridedShard(k, f) with nothing moved.
 * When Shards on earlier mesh dims evenly split the group's leading dim, k is their Shard and
 * the blocks are counted in what they leave (f = the local size of the dims before d, the
 * nested form; f = 1 is a plain Shard nested under theirs). When later mesh dims shard the
 * group's leading dim (and no earlier one the group), the output's SS(k, f) has their Shard of
 * k after it (the outer form, PyTorch's (_StridedShard(k, f), Shard(k))). Consumed: a
 * StridedShard(d, f) dim split into output dims whose leading ones
 * (locally, under earlier Shards of d) multiply to f and whose next one is the block, or
 * starts it evenly (it is then a plain shard of that dim), or kept whole in an output dim of
 * the same size. Each relies on argument 0's earlier mesh dims staying as they are. */
static void view_strided(const dt_rule_ctx *c, const dt_placement *cur, dt_strategies *s) {
  const dt_tensor *a = c->args[0];
  const dt_tensor_meta *o = &c->out[0];
  if (!dt__is_sharding(cur[0])) return;
  int d = cur[0].dim, gi, ie, go, oe;
  if (!view_group(a, o, d, &gi, &ie, &go, &oe)) return;
  dt_placement in[DT_DIST_MAX_ARGS];
  for (int i = 0; i < c->n_args; i++) in[i] = R();
  in[0] = cur[0];
  int64_t n = c->mesh_size;
  if (cur[0].kind == DT_SHARD) {
    if (c->split[d] != n || oe - go != 1) return; /* nested on d, or not one output dim */
    int lead = gi;
    while (lead < d && a->shape[lead] == 1) lead++;
    int64_t f = 1, whole = 1, rest = 1;
    bool nested = true, nests = false;
    uint32_t group = 0;
    for (int x = gi; x < ie; x++) {
      group |= 1u << x;
      if (x == d) continue;
      int64_t outer = c->outer[x];
      /* Sharded by a later mesh dim: only the leading dim, the group not nested (the output
       * then has the outer form SS(k, f), S(k), which the propagator checks fits). */
      if (c->split[x] != outer * n && (x != lead || outer > 1 || c->split[x] % n != 0)) return;
      if (c->split[x] != outer * n) nested = false;
      /* Nested: only the leading dim sharded by earlier mesh dims, evenly. */
      if (outer > 1) nests = true;
      if (outer > 1 && (x != lead || a->shape[x] % outer != 0)) nested = false;
      if (x < d) f *= a->shape[x] / outer, whole *= a->shape[x];
      if (x > d) rest *= a->shape[x];
    }
    if (rest > 1 && a->shape[d] % n != 0) return; /* a chunk must be whole rows of the rest */
    if (nests && nested && f > 1 && f <= INT32_MAX)
      push_keeping_outer(s, in, c->n_args, dt_strided_shard(go, (int)f));
    /* One block in what they leave: a plain shard nested under them ([2, 6] [S(0), S(1)]
     * flattened on 2x3 is [S(0), S(0)]). */
    if (nests && nested && f == 1) push_keeping_outer(s, in, c->n_args, S(go));
    /* Without the earlier Shards (the caller gathers them first when it picks this). */
    if (whole > 1 && whole <= INT32_MAX)
      push_unsharded_before(s, in, c->n_args, dt_strided_shard(go, (int)whole), group);
    return;
  }
  int64_t f = cur[0].split_factor, outer = c->outer[d];
  if (ie - gi != 1 || a->shape[d] % outer != 0) return; /* d merges with other input dims */
  if (oe - go == 1) {
    push_viewed(s, c, in, d, outer, dt_strided_shard(go, (int)f));
    return;
  }
  int first = go;
  while (first < oe - 1 && o->shape[first] == 1) first++;
  int64_t lead = 1, block = a->shape[d] / outer / f;
  for (int k = go; k < oe; k++) {
    int64_t size = o->shape[k];
    if (k == first && outer > 1) {
      if (size % outer != 0) return; /* the earlier Shards do not map to one output dim */
      size /= outer;
    }
    if (lead == f) {
      if (size == block || (block % size == 0 && size % n == 0))
        push_viewed(s, c, in, d, outer, S(k));
      return;
    }
    lead *= size;
    if (lead > f) return;
  }
}

static void rule_view(const dt_rule_ctx *c, const dt_placement *cur, dt_strategies *s) {
  const dt_tensor *a = c->args[0];
  int map[DT_MAX_DIMS];
  for (int d = 0; d < a->ndim; d++) map[d] = view_map_dim(a, &c->out[0], d, c->split[d]);
  if (!(cur[0].kind == DT_SHARD && map[cur[0].dim] >= 0)) view_strided(c, cur, s);
  rule_dim_map(c, cur, map, true, s);
}

/* scaled_dot_product_attention and its backward: the batch (dim 0) or the heads (dim 1) of
 * every argument together. With as many kv heads as query heads any split of the heads works
 * (both chunk alike). Grouped-query heads (H query heads over Hk kv heads) shard by heads when
 * both counts divide into the pieces the head dim is cut into (ctx->split, nesting included):
 * then every rank's query heads [r H/n, (r+1) H/n) read exactly its kv heads
 * [r Hk/n, (r+1) Hk/n), the groups stay whole and the local kernel's grouping is the global
 * one; the propagator keeps only final choices whose nesting divides that split (splits_hold).
 * Otherwise the heads are not offered. A mask is sharded on the same dim when it has it
 * (size > 1), else replicated. */
static void rule_attention(const dt_rule_ctx *c, const dt_placement *cur, dt_strategies *s) {
  bool backward = c->call->op == DT_OP_SCALED_DOT_PRODUCT_ATTENTION_BACKWARD;
  int qi = backward ? 1 : 0, mi = backward ? 4 : 3;
  const dt_tensor *q = c->args[qi], *k = c->args[qi + 1];
  const dt_tensor *m = mi < c->n_args ? c->args[mi] : NULL;
  dt_placement in[DT_DIST_MAX_ARGS];
  for (int dim = 0; dim < 2; dim++) {
    if (dim == 1 && q->shape[1] != k->shape[1] &&
        (c->split[1] < 1 || q->shape[1] % c->split[1] != 0 || k->shape[1] % c->split[1] != 0))
      continue;
    for (int i = 0; i < c->n_args; i++) in[i] = c->args[i] ? S(dim) : R();
    if (m) {
      int md = dim - (4 - m->ndim);
      in[mi] = md >= 0 && m->shape[md] > 1 ? S(md) : R();
    }
    push(s, in, c->n_args, S(dim));
  }
  /* The forward with the queries sharded on the sequence (dim 2) and k, v whole: each query
   * attends to every key, so a shard of queries runs against the whole k and v and gives its
   * rows of the output and of the log-sum-exp (PyTorch's plan: nothing moves). Not causal: a
   * shard's query i would need its global position to keep keys j <= i. A mask follows the
   * queries' dim when it has it. */
  if (!backward && c->call->ints[0] == 0 && cur[qi].kind == DT_SHARD && cur[qi].dim == 2) {
    for (int i = 0; i < c->n_args; i++) in[i] = R();
    in[qi] = S(2);
    if (m) {
      int md = 2 - (4 - m->ndim);
      in[mi] = md >= 0 && m->shape[md] > 1 ? S(md) : R();
    }
    push(s, in, c->n_args, S(2));
  }
  push_replicated(s, c->n_args);
}

bool dt_op_has_sharding_rule(int op) {
  return op >= 0 && op < DT_OP_COUNT && dt__op_table[op].rule != DT_RULE_REPLICATE;
}

bool dt__sharding_rule(const dt_rule_ctx *c, const dt_placement *cur, dt_strategies *s) {
  const dt_op_call *call = c->call;
  const dt_tensor *a = c->args[0];
  int map[DT_MAX_DIMS];
  s->n = 0;
  s->keeps_outer = 0;
  dt_rule_family rule = dt__op_table[call->op].rule;
  switch (rule) {
  case DT_RULE_POINTWISE: rule_pointwise(c, cur, s); return true;
  case DT_RULE_LIKE: rule_like(c, cur, s); return true;
  case DT_RULE_REDUCTION: rule_reduction(c, cur, s); return true;
  case DT_RULE_MATMUL: dt__rule_matmul(c, cur, s); return true;
  case DT_RULE_ADDMM: dt__rule_addmm(c, cur, s); return true;
  case DT_RULE_LINEAR: dt__rule_linear(c, cur, s); return true;
  case DT_RULE_SOFTMAX:
  case DT_RULE_SOFTMAX_BACKWARD:
    dt__rule_keep_free_dims(c, cur, 1u << call->ints[0], rule == DT_RULE_SOFTMAX ? 1 : 2, false, s);
    return true;
  case DT_RULE_LAYER_NORM:
  case DT_RULE_NORM_BACKWARD:
  case DT_RULE_NORM_AFFINE_GRAD: {
    uint32_t busy = 0;
    for (int i = 0; i < call->n_ints; i++) busy |= 1u << (a->ndim - 1 - i);
    dt__rule_keep_free_dims(c, cur, busy, rule == DT_RULE_LAYER_NORM ? 1 : 2,
                            rule == DT_RULE_NORM_AFFINE_GRAD, s);
    /* rms_norm over the last dim with its weight sharded: each shard normalizes whole rows and
     * scales its columns by its piece of the weight, the output sharded on the last dim
     * (PyTorch's plan, as its rms_norm is x * rsqrt(mean(x^2)) * w: a replicated x moves
     * nothing). The dist dispatcher runs it (dt__dist_rewrites_call). */
    if (call->op == DT_OP_RMS_NORM && call->n_ints == 1 && c->n_args > 1 && c->args[1] &&
        cur[1].kind == DT_SHARD && cur[1].dim == 0)
      push(s, (dt_placement[]){R(), S(0)}, 2, S(a->ndim - 1));
    return true;
  }
  case DT_RULE_BATCH_NORM:
  case DT_RULE_BATCH_NORM_TRAINING: rule_batch_norm(c, cur, s); return true;
  case DT_RULE_ROWS: dt__rule_rows(c, s); return true;
  case DT_RULE_VOCAB_TERMS: dt__rule_vocab_terms(c, cur, s); return true;
  case DT_RULE_ATTENTION: rule_attention(c, cur, s); return true;
  case DT_RULE_EMBEDDING: rule_embedding(c, cur, s); return true;
  case DT_RULE_EMBEDDING_BACKWARD: rule_embedding_backward(c, cur, s); return true;
  case DT_RULE_SCATTER_ADD: rule_scatter_add(c, cur, s); return true;
  case DT_RULE_CAT: rule_cat(c, cur, s, false); return true;
  case DT_RULE_STACK: rule_cat(c, cur, s, true); return true;
  case DT_RULE_TRANSPOSE:
    for (int d = 0; d < a->ndim; d++) map[d] = d;
    if (a->ndim > 0) {
      map[call->ints[0]] = (int)call->ints[1];
      map[call->ints[1]] = (int)call->ints[0];
    }
    rule_dim_map(c, cur, map, true, s);
    return true;
  case DT_RULE_PERMUTE:
    for (int d = 0; d < a->ndim; d++) map[call->ints[d]] = d;
    rule_dim_map(c, cur, map, true, s);
    return true;
  case DT_RULE_UNSQUEEZE:
    for (int d = 0; d < a->ndim; d++) map[d] = d >= call->ints[0] ? d + 1 : d;
    rule_dim_map(c, cur, map, true, s);
    return true;
  case DT_RULE_VIEW: rule_view(c, cur, s); return true;
  case DT_RULE_SELECT:
    for (int d = 0; d < a->ndim; d++) map[d] = d < call->ints[0] ? d : d - 1;
    map[call->ints[0]] = -1;
    rule_dim_map(c, cur, map, true, s);
    return true;
  case DT_RULE_SLICE:
    for (int d = 0; d < a->ndim; d++) map[d] = d;
    /* A narrow or slice covering the whole dim keeps its shards (the dist dispatcher runs a
     * narrow as a whole slice of the shard, its length being the global one). */
    if (!((call->op == DT_OP_NARROW || call->op == DT_OP_SLICE) &&
          c->out[0].shape[call->ints[0]] == a->shape[call->ints[0]]))
      map[call->ints[0]] = -1;
    rule_dim_map(c, cur, map, true, s);
    return true;
  case DT_RULE_EXPAND: {
    int lead = c->out[0].ndim - a->ndim;
    for (int d = 0; d < a->ndim; d++)
      map[d] = a->shape[d] == c->out[0].shape[d + lead] ? d + lead : -1;
    /* Expand repeats elements, so it keeps any Partial: the repeats of the partial values
     * reduce to the repeats of the value (PyTorch's plan moves nothing either). */
    rule_dim_map(c, cur, map, true, s);
    return true;
  }
  case DT_RULE_TRIANGLE: dt__rule_triangle(c, cur, s); return true;
  case DT_RULE_SCAN:
    if (dt__is_linear_partial(cur[0]) && dt_dtype_is_floating(c->out[0].dtype))
      push(s, cur, 1, cur[0]); /* a running sum is linear */
    dt__rule_keep_free_dims(c, cur, 1u << call->ints[0], 1, false, s);
    return true;
  case DT_RULE_ALONG_DIM:
    dt__rule_keep_free_dims(c, cur, 1u << call->ints[1], 1, false, s);
    return true;
  case DT_RULE_INDEX_SELECT: dt__rule_index_select(c, cur, s); return true;
  case DT_RULE_GATHER: dt__rule_gather(c, cur, s); return true;
  case DT_RULE_REPLICATE: break;
  }
  return false;
}
