/*
 * The sharding propagator. For each mesh dim the op's rule proposes strategies given the
 * arguments' current placements there. A choice for the call is one strategy per mesh dim;
 * it is priced by the cost model as the redistribution each argument needs from its current
 * placements to the chosen ones, and the cheapest choice wins.
 *
 * Mesh dims are decided jointly: an argument whose placements change on several mesh dims
 * is priced along the cheapest order of its steps (e.g. slicing an idle mesh dim before
 * gathering another halves the gathered buffer), which a decision per mesh dim cannot see.
 * The search walks the product of the per-dim candidate lists (a few dozen choices on a 2-D
 * mesh); past MAX_JOINT choices (meshes of 3 or more dims with many candidates) it decides
 * mesh dims one by one, each priced from the current placements.
 */
#include <math.h>
#include <string.h>

#include "distributed/propagate_impl.h"

#define MAX_JOINT 4096
#define MEMO 32
#define TARGET_BITS 5 /* > DT_RULE_MAX_STRATEGIES targets per mesh dim */

/* For argument 0 under placements `state`: how many pieces each tensor dim is cut into when
 * mesh dim m shards it together with the other mesh dims that shard it (nested sharding). */
static void nested_split(const dt_propagation *p, const dt_placement *state, int m,
                         int64_t *split) {
  for (int d = 0; d < DT_MAX_DIMS; d++) split[d] = p->mesh_size[m];
  for (int j = 0; j < p->mesh_ndim; j++) {
    dt_placement q = state[j];
    if (j != m && q.kind == DT_SHARD && q.dim >= 0 && q.dim < DT_MAX_DIMS)
      split[q.dim] *= p->mesh_size[j];
  }
}

/* Whether every piece of a dim of `size` is non-empty when cut by torch.chunk into sizes[0]
 * pieces, each of those into sizes[1], ... (n levels). Each level leaves at most three
 * distinct piece lengths per length it cuts (full chunks, the last partial one, empty
 * ones), so the few distinct lengths are followed instead of the pieces; past 32 of them the
 * answer is a conservative false. */
static bool chunks_nonempty(int64_t size, int n, const int64_t *sizes) {
  int64_t len[32] = {size}, next[32];
  int count = 1;
  for (int l = 0; l < n; l++) {
    int k = 0;
    for (int i = 0; i < count; i++) {
      int64_t piece = (len[i] + sizes[l] - 1) / sizes[l], parts[2];
      parts[0] = piece;
      parts[1] = len[i] - piece * (dt__chunk_nonempty(len[i], sizes[l]) - 1);
      if (dt__chunk_nonempty(len[i], sizes[l]) < sizes[l]) return false; /* an empty piece */
      for (int j = 0; j < 2; j++) {
        bool seen = false;
        for (int x = 0; x < k; x++) seen |= next[x] == parts[j];
        if (seen) continue;
        if (k == 32) return false;
        next[k++] = parts[j];
      }
    }
    memcpy(len, next, sizeof(int64_t) * (size_t)k);
    count = k;
  }
  for (int i = 0; i < count; i++) {
    if (len[i] <= 0) return false;
  }
  return true;
}

/* For argument 0 under placements `state`, with mesh dim m sharding d as well: whether each
 * dim's pieces are all non-empty (dt_rule_ctx.nonempty). */
static void nested_nonempty(const dt_propagation *p, const dt_placement *state, int m,
                            bool *nonempty) {
  const dt_tensor *a = p->args[0];
  for (int d = 0; d < a->ndim; d++) {
    int64_t sizes[DT_MESH_MAX_DIMS];
    int n = 0;
    for (int j = 0; j < p->mesh_ndim; j++) {
      if (j == m || (state[j].kind == DT_SHARD && state[j].dim == d)) sizes[n++] = p->mesh_size[j];
    }
    nonempty[d] = chunks_nonempty(a->shape[d], n, sizes);
  }
}

/* Attention (or its backward) with fewer kv heads than query heads: its rule's head split
 * relies on the nesting (rules.c, rule_attention). */
static bool grouped_heads(const dt_propagation *p) {
  int qi = p->call->op == DT_OP_SCALED_DOT_PRODUCT_ATTENTION_BACKWARD ? 1 : 0;
  return p->n_args > qi + 1 && p->args[qi] && p->args[qi + 1] && p->args[qi]->ndim == 4 &&
         p->args[qi + 1]->ndim == 4 && p->args[qi]->shape[1] != p->args[qi + 1]->shape[1];
}

static dt_redistribute_geometry geometry_of(const dt_propagation *p, int i) {
  const dt_tensor *t = p->args[i];
  return dt__redistribute_geometry(t->ndim, t->shape, t->dtype, p->mesh_ndim, p->mesh_size);
}

/* Whether either placement tuple has a Partial on some mesh dim. */
static bool has_partial(const dt_placement *a, const dt_placement *b, int mesh_ndim) {
  for (int m = 0; m < mesh_ndim; m++) {
    if (a[m].kind == DT_PARTIAL || b[m].kind == DT_PARTIAL) return true;
  }
  return false;
}

/* The price of moving argument i from its current placements to `target` on the mesh dims
 * listed in `changed` (n of them): the cheapest order of the steps that keeps shards nested.
 * With the default cost, a move that no such order makes (a shard moving between mesh dims,
 * or one that must be unnested first) is priced by the planner's own search, which stops at
 * `budget`: a result at or above the budget only says the price is not below it. */
static double joint_price(const dt_propagation *p, int i, const dt_redistribute_geometry *g,
                          const dt_placement *target, const int *changed, int n, double budget) {
  if (p->fixed_replica[i]) return HUGE_VAL; /* every step in `changed` changes it */
  int order[DT_MESH_MAX_DIMS];
  for (int k = 0; k < n; k++) order[k] = changed[k];
  double best = HUGE_VAL;
  bool any = false;
  for (;;) {
    dt_placement state[DT_MESH_MAX_DIMS];
    memcpy(state, p->current[i], sizeof(dt_placement) * (size_t)p->mesh_ndim);
    double cost = 0;
    bool allowed = true;
    for (int k = 0; k < n && cost < best; k++) {
      int m = order[k];
      if (p->cost) {
        if (!dt__step_allowed(state, p->mesh_ndim, m, target[m])) {
          allowed = false;
          break;
        }
        cost += p->cost(p->user, i, g, state, m, target[m]);
      } else {
        double step = dt__step_price(g, state, m, target[m]);
        if (step >= HUGE_VAL) {
          allowed = false;
          break;
        }
        cost += step;
      }
      state[m] = target[m];
    }
    any |= allowed;
    if (allowed && cost < best) best = cost;
    /* Next permutation of `order` (lexicographic), or stop after the last. */
    int a = n - 2;
    while (a >= 0 && order[a] >= order[a + 1]) a--;
    if (a < 0) break;
    int b = n - 1;
    while (order[b] <= order[a]) b--;
    int t = order[a];
    order[a] = order[b];
    order[b] = t;
    for (int x = a + 1, y = n - 1; x < y; x++, y--) {
      t = order[x];
      order[x] = order[y];
      order[y] = t;
    }
  }
  /* With the default cost, an argument changing on several mesh dims (and paying for it) is
   * also priced by the planner's own search, which passes through placements neither end
   * has: a shard moving between mesh dims as S -> P(sum) on one, a slice on the other and an
   * all_reduce of the smaller buffer ([P(max), S(0)] -> [P(sum), R] on 2x3: 23 bytes, where
   * every order of the two direct steps moves 37). The choice is then priced by the path
   * the executor takes. The search stops once it cannot beat the direct steps' price. Its
   * detours pass through a Partial, and it only has one to pass through when one end has a
   * Partial on some mesh dim: without, it is skipped (most of a 2-D miss's cost otherwise;
   * no loss on the planner-quality sample, see tests/test_planner_quality.c). */
  bool several = n >= 2 && best >= 1.0 && has_partial(p->current[i], target, p->mesh_ndim);
  if ((!any || several) && !p->cost && !p->fixed_replica[i]) {
    double planned = dt__redistribute_cost_below(g, p->current[i], target, fmin(best, budget));
    if (planned < best) best = planned;
  }
  return best;
}

/* The candidates of every mesh dim, after the in-place and `accept` filters. */
typedef struct candidates {
  dt_strategies s[DT_MESH_MAX_DIMS];
  int64_t split[DT_MESH_MAX_DIMS][DT_MAX_DIMS]; /* what each mesh dim's rule assumed */
  bool uses_split;  /* the op's rule family checks sizes against the split */
  bool any_strided; /* some candidate has a StridedShard (else every choice is valid) */
  /* target[m][k][i]: which of argument i's distinct placements on mesh dim m candidate k
   * asks for, 0 being its current one (no change); first[m][i][t] is the first candidate
   * asking for target t. Choices are priced by these small numbers, never by comparing
   * placements again. */
  uint8_t target[DT_MESH_MAX_DIMS][DT_RULE_MAX_STRATEGIES][DT_DIST_MAX_ARGS];
  uint8_t first[DT_MESH_MAX_DIMS][DT_DIST_MAX_ARGS][DT_RULE_MAX_STRATEGIES + 1];
  uint8_t n_targets[DT_MESH_MAX_DIMS][DT_DIST_MAX_ARGS];
  /* single[m][i][t]: argument i's price when only mesh dim m changes, to target t; NAN
   * while it needs the planner's search and none was asked for, single_floor what a
   * bounded search showed it is not below. */
  double single[DT_MESH_MAX_DIMS][DT_DIST_MAX_ARGS][DT_RULE_MAX_STRATEGIES + 1];
  double single_floor[DT_MESH_MAX_DIMS][DT_DIST_MAX_ARGS][DT_RULE_MAX_STRATEGIES + 1];
  /* Prices of arguments changing on several mesh dims, by their targets (TARGET_BITS per
   * mesh dim), so that each is worked out once however many choices share it. */
  int n_memo[DT_DIST_MAX_ARGS];
  uint32_t memo_key[DT_DIST_MAX_ARGS][MEMO];
  double memo_price[DT_DIST_MAX_ARGS][MEMO];
  bool memo_exact[DT_DIST_MAX_ARGS][MEMO];      /* else memo_price is a floor, as single_floor */
  dt_redistribute_geometry g[DT_DIST_MAX_ARGS]; /* each argument's, for the cost model */
} candidates;

/* Whether argument 0's chosen placements cut each dim a mesh dim's rule relied on into a
 * number of pieces dividing what the rule assumed (so its even-split checks still hold). */
static bool splits_hold(const dt_propagation *p, const candidates *c, const int *pick) {
  if (!c->uses_split || p->n_args == 0 || !p->args[0]) return true;
  dt_placement target[DT_MESH_MAX_DIMS];
  for (int m = 0; m < p->mesh_ndim; m++) target[m] = c->s[m].in[pick[m]][0];
  for (int m = 0; m < p->mesh_ndim; m++) {
    if (target[m].kind != DT_SHARD) continue;
    int64_t split[DT_MAX_DIMS];
    nested_split(p, target, m, split);
    int d = target[m].dim;
    if (c->split[m][d] % split[d] != 0) return false;
  }
  return true;
}

/* Whether the choice gives every argument and the output a placement tuple that exists (a
 * StridedShard of a dim, in whole blocks and whole chunks: dt__strided_fits), and
 * keeps argument 0's earlier mesh dims where a strategy relied on them (keeps_outer). */
static bool choice_valid(const dt_propagation *p, const candidates *c, const int *pick) {
  if (!c->any_strided) return true;
  for (int m = 1; m < p->mesh_ndim; m++) {
    bool keeps = c->s[m].keeps_outer >> pick[m] & 1u;
    uint32_t unsharded = c->s[m].unsharded_before[pick[m]];
    for (int j = 0; j < m && (keeps || unsharded); j++) {
      dt_placement q = c->s[j].in[pick[j]][0];
      if (keeps && !dt__placements_equal(1, &q, &p->current[0][j])) return false;
      if (dt__is_sharding(q) && (unsharded >> q.dim & 1u)) return false;
    }
  }
  dt_placement target[DT_MESH_MAX_DIMS];
  for (int i = -1; i < p->n_args; i++) {
    if (i >= 0 && !p->args[i]) continue;
    bool strided = false;
    for (int m = 0; m < p->mesh_ndim; m++) {
      target[m] = i < 0 ? c->s[m].out[pick[m]] : c->s[m].in[pick[m]][i];
      strided |= target[m].kind == DT_STRIDED_SHARD;
    }
    if (!strided || (i < 0 && p->n_out == 0)) continue;
    if (!dt__placements_valid(p->mesh_ndim, target)) return false;
    /* The outer form (SS(d, f), then S(d)) is not a box: only rules that take every mesh dim
     * alike keep it (pointwise, like), and views, whose later mesh dims map S(d) to the first
     * output dim of its group only when it splits evenly (whole blocks); other rules read each
     * mesh dim's shard as a box, so their arguments leave it first. */
    if (dt__strided_outer(p->mesh_ndim, target)) {
      dt_rule_family rule = dt__op_table[p->call->op].rule;
      if (rule != DT_RULE_POINTWISE && rule != DT_RULE_LIKE && rule != DT_RULE_VIEW) return false;
    }
    int ndim = i < 0 ? p->out[0].ndim : p->args[i]->ndim;
    const int64_t *shape = i < 0 ? p->out[0].shape : p->args[i]->shape;
    if (!dt__strided_fits(ndim, shape, p->mesh_ndim, p->mesh_size, target)) return false;
  }
  return true;
}

/* joint_price through the memo of argument i (key packs the targets of every mesh dim):
 * the price if it is below `budget`, else HUGE_VAL. A price found with a budget is exact
 * below it; at or above, only the budget is remembered, as a floor for later asks. */
static double memo_price(const dt_propagation *p, candidates *c, int i, uint32_t key,
                         const dt_placement *target, const int *changed, int n, double budget) {
  int k = 0;
  while (k < c->n_memo[i] && c->memo_key[i][k] != key) k++;
  if (k < c->n_memo[i]) {
    if (c->memo_exact[i][k]) return c->memo_price[i][k] < budget ? c->memo_price[i][k] : HUGE_VAL;
    if (c->memo_price[i][k] >= budget) return HUGE_VAL;
  }
  double price = joint_price(p, i, &c->g[i], target, changed, n, budget);
  bool exact = price < budget || budget >= HUGE_VAL;
  if (k < MEMO) {
    if (k == c->n_memo[i]) c->n_memo[i]++;
    c->memo_key[i][k] = key;
    c->memo_price[i][k] = exact ? price : budget;
    c->memo_exact[i][k] = exact;
  }
  return exact && price < budget ? price : HUGE_VAL;
}

/* Argument i's price when only mesh dim m changes, to its target t there: as memo_price. */
static double single_price(const dt_propagation *p, candidates *c, int m, int i, int t,
                           double budget) {
  double v = c->single[m][i][t];
  if (!isnan(v)) return v < budget ? v : HUGE_VAL;
  if (c->single_floor[m][i][t] >= budget) return HUGE_VAL;
  dt_placement target[DT_MESH_MAX_DIMS];
  memcpy(target, p->current[i], sizeof(dt_placement) * (size_t)p->mesh_ndim);
  target[m] = c->s[m].in[c->first[m][i][t]][i];
  double price = joint_price(p, i, &c->g[i], target, &m, 1, budget);
  if (price < budget || budget >= HUGE_VAL) {
    c->single[m][i][t] = price;
    return price < budget ? price : HUGE_VAL;
  }
  c->single_floor[m][i][t] = budget;
  return HUGE_VAL;
}

/* The price of one choice (candidate pick[m] on every mesh dim m), or HUGE_VAL once it is
 * clear it is not below `bound`. */
static double choice_price(const dt_propagation *p, candidates *c, const int *pick, double bound) {
  double total = 0;
  for (int i = 0; i < p->n_args && total < bound; i++) {
    if (!p->args[i]) continue;
    int changed[DT_MESH_MAX_DIMS], n = 0;
    uint32_t key = 0;
    for (int m = 0; m < p->mesh_ndim; m++) {
      unsigned t = c->target[m][pick[m]][i];
      if (t) changed[n++] = m;
      key |= (uint32_t)t << (TARGET_BITS * m);
    }
    if (n == 1) {
      int m = changed[0];
      total += single_price(p, c, m, i, c->target[m][pick[m]][i], bound - total);
    } else if (n > 1) {
      dt_placement target[DT_MESH_MAX_DIMS];
      for (int m = 0; m < p->mesh_ndim; m++) target[m] = c->s[m].in[pick[m]][i];
      total += memo_price(p, c, i, key, target, changed, n, bound - total);
    }
  }
  return total;
}

/* Asks the rule of every mesh dim for its candidates, keeps those the in-place and
 * `accept` filters let through and prices each as the only change. */
static dt_status build_candidates(const dt_propagation *p, candidates *c, dt_propagation_result *r,
                                  int64_t *choices) {
  const dt_op_def *def = &dt__op_table[p->call->op];
  bool inplace = def->kind == DT_OP_KIND_INPLACE;
  r->fallback = false;
  r->failed_mesh_dim = -1;
  dt_rule_ctx ctx = {.call = p->call, .n_args = p->n_args, .n_out = p->n_out, .out = p->out};
  memcpy(ctx.args, p->args, sizeof(ctx.args[0]) * (size_t)p->n_args);
  dt_redistribute_geometry *g = c->g;
  for (int i = 0; i < p->n_args; i++) {
    if (p->args[i]) g[i] = geometry_of(p, i);
  }
  *choices = 1;
  c->uses_split = def->rule == DT_RULE_REDUCTION || def->rule == DT_RULE_VIEW ||
                  (def->rule == DT_RULE_ATTENTION && grouped_heads(p));
  memset(c->n_memo, 0, sizeof c->n_memo);
  c->any_strided = false;
  for (int m = 0; m < p->mesh_ndim; m++) {
    ctx.mesh_size = p->mesh_size[m];
    nested_split(p, p->current[0], m, ctx.split);
    memcpy(c->split[m], ctx.split, sizeof ctx.split);
    /* Only the reductions read it (max/min of every piece). */
    if (def->rule == DT_RULE_REDUCTION && p->n_args > 0 && p->args[0])
      nested_nonempty(p, p->current[0], m, ctx.nonempty);
    for (int d = 0; d < DT_MAX_DIMS; d++) ctx.outer[d] = 1;
    for (int j = 0; j < m && p->n_args > 0; j++) {
      dt_placement q = p->current[0][j];
      if (q.kind == DT_SHARD && q.dim >= 0 && q.dim < DT_MAX_DIMS)
        ctx.outer[q.dim] *= p->mesh_size[j];
    }
    dt_placement cur[DT_DIST_MAX_ARGS];
    for (int i = 0; i < p->n_args; i++) cur[i] = p->current[i][m];
    dt_strategies all;
    if (!dt__sharding_rule(&ctx, cur, &all)) {
      for (int i = 0; i < p->n_args; i++) all.in[0][i] = dt_replicate();
      all.out[0] = dt_replicate();
      all.n = 1;
      r->fallback = true;
    }
    dt_strategies *s = &c->s[m];
    s->n = 0;
    s->keeps_outer = 0;
    for (int i = 0; i < p->n_args; i++) c->n_targets[m][i] = 1, c->single[m][i][0] = 0;
    for (int k = 0; k < all.n; k++) {
      if (inplace && (!dt__placements_equal(1, &all.in[k][0], &cur[0]) ||
                      !dt__placements_equal(1, &all.out[k], &cur[0]))) {
        continue; /* self keeps its placement */
      }
      if (p->accept && !p->accept(p->user, m, all.in[k], all.out[k])) continue;
      memcpy(s->in[s->n], all.in[k], sizeof(dt_placement) * (size_t)p->n_args);
      s->out[s->n] = all.out[k];
      if (all.keeps_outer >> k & 1u) s->keeps_outer |= 1u << s->n;
      /* Such a strategy may output a plain Shard; its condition is checked with the strided. */
      c->any_strided |= (all.keeps_outer >> k & 1u) || all.unsharded_before[k];
      s->unsharded_before[s->n] = all.unsharded_before[k];
      c->any_strided |= all.out[k].kind == DT_STRIDED_SHARD;
      for (int i = 0; i < p->n_args; i++) c->any_strided |= all.in[k][i].kind == DT_STRIDED_SHARD;
      for (int i = 0; i < p->n_args; i++) {
        /* Number argument i's target on this mesh dim; price it the first time it comes. */
        int t = 0;
        if (p->args[i] && !dt__placements_equal(1, &p->current[i][m], &all.in[k][i])) {
          for (t = 1; t < c->n_targets[m][i]; t++) {
            if (dt__placements_equal(1, &s->in[c->first[m][i][t]][i], &all.in[k][i])) break;
          }
          if (t == c->n_targets[m][i]) {
            /* A step the cost model prices directly now; one that needs the planner's
             * search when a choice asks for it, with the budget that choice leaves. */
            dt_placement target[DT_MESH_MAX_DIMS];
            memcpy(target, p->current[i], sizeof(dt_placement) * (size_t)p->mesh_ndim);
            target[m] = all.in[k][i];
            c->first[m][i][t] = (uint8_t)s->n;
            double price = p->cost || p->fixed_replica[i]
                               ? joint_price(p, i, &g[i], target, &m, 1, HUGE_VAL)
                               : dt__step_price(&g[i], p->current[i], m, target[m]);
            c->single[m][i][t] = price < HUGE_VAL || p->cost || p->fixed_replica[i] ? price : NAN;
            c->single_floor[m][i][t] = 0;
            c->n_targets[m][i]++;
          }
        }
        c->target[m][s->n][i] = (uint8_t)t;
      }
      s->n++;
    }
    if (s->n == 0) {
      r->failed_mesh_dim = m;
      return DT_ERR_UNSUPPORTED;
    }
    *choices *= s->n;
  }
  return DT_OK;
}

/* Steps `pick` to the next choice (mesh dim 0 varying slowest); false after the last. */
static bool next_choice(const dt_propagation *p, const candidates *c, int *pick) {
  int m = p->mesh_ndim - 1;
  while (m >= 0 && ++pick[m] == c->s[m].n) pick[m--] = 0;
  return m >= 0;
}

dt_status dt__propagate_each_choice(const dt_propagation *p, dt_propagate_visit_fn visit,
                                    void *user) {
  candidates *c = dt__alloc(sizeof *c);
  if (!c) return dt__error(DT_ERR_NOMEM, "sharding propagation: cannot allocate candidates");
  dt_propagation_result r;
  int64_t choices = 0;
  dt_status st = build_candidates(p, c, &r, &choices);
  int pick[DT_MESH_MAX_DIMS] = {0};
  while (!st) {
    if (splits_hold(p, c, pick) && choice_valid(p, c, pick)) {
      for (int m = 0; m < p->mesh_ndim; m++) {
        for (int i = 0; i < p->n_args; i++) r.targets[i][m] = c->s[m].in[pick[m]][i];
        r.out[m] = c->s[m].out[pick[m]];
      }
      visit(user, &r);
    }
    if (!next_choice(p, c, pick)) break;
  }
  dt__free(c);
  return st;
}

dt_status dt__propagate(const dt_propagation *p, dt_propagation_result *r) {
  r->cost = 0;
  candidates *c = dt__alloc(sizeof *c);
  if (!c) return dt__error(DT_ERR_NOMEM, "sharding propagation: cannot allocate candidates");
  int64_t choices = 0;
  dt_status st = build_candidates(p, c, r, &choices);
  if (st) goto done;
  int best[DT_MESH_MAX_DIMS] = {0};
  double best_cost = HUGE_VAL;
  bool found = false;
  if (choices <= MAX_JOINT) {
    /* A seed first when there is one: on every mesh dim a candidate that moves no argument.
     * Then every choice, mesh dim 0 varying slowest, each priced against the best so far: it
     * stops, or bounds its searches, as soon as it cannot beat it. The seed wins ties, then
     * the first in that order. */
    int seed[DT_MESH_MAX_DIMS];
    bool seeded = true;
    for (int m = 0; m < p->mesh_ndim && seeded; m++) {
      int k = 0;
      for (; k < c->s[m].n; k++) {
        int i = 0;
        while (i < p->n_args && c->target[m][k][i] == 0) i++;
        if (i == p->n_args) break;
      }
      seed[m] = k;
      seeded = k < c->s[m].n;
    }
    if (seeded && splits_hold(p, c, seed) && choice_valid(p, c, seed)) {
      best_cost = choice_price(p, c, seed, HUGE_VAL);
      found = best_cost < HUGE_VAL;
      memcpy(best, seed, sizeof best);
    }
    int pick[DT_MESH_MAX_DIMS] = {0};
    for (;;) {
      if (splits_hold(p, c, pick) && choice_valid(p, c, pick)) {
        double cost = choice_price(p, c, pick, best_cost);
        if (cost < best_cost) {
          found = true;
          best_cost = cost;
          memcpy(best, pick, sizeof best);
        }
      }
      if (!next_choice(p, c, pick)) break;
    }
  }
  if (!found) {
    /* Too many choices to walk (or none acceptable, which this finds the mesh dim of): each
     * mesh dim by itself, priced from the current state. */
    best_cost = 0;
    for (int m = 0; m < p->mesh_ndim; m++) {
      double dim_best = HUGE_VAL;
      for (int k = 0; k < c->s[m].n; k++) {
        double cost = 0;
        for (int i = 0; i < p->n_args; i++)
          cost += single_price(p, c, m, i, c->target[m][k][i], HUGE_VAL);
        if (cost < dim_best) {
          dim_best = cost;
          best[m] = k;
        }
      }
      if (dim_best >= HUGE_VAL) {
        r->failed_mesh_dim = m;
        st = DT_ERR_UNSUPPORTED;
        goto done;
      }
      best_cost += dim_best;
    }
  }
  for (int m = 0; m < p->mesh_ndim; m++) {
    for (int i = 0; i < p->n_args; i++) r->targets[i][m] = c->s[m].in[best[m]][i];
    r->out[m] = c->s[m].out[best[m]];
  }
  r->cost = best_cost;
done:
  dt__free(c);
  return st;
}
