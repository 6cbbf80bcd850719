/*
 * The redistribution planner: the cheapest sequence of single-mesh-dim steps from one
 * placement tuple to another, by Dijkstra over placement tuples with a bytes-moved cost
 * model. Each step changes one mesh dim's placement with one collective (or none):
 *
 *   S(d) -> R      all_gather along d          S(d) -> S(e)   all_to_all
 *   P    -> R      all_reduce                  P    -> S(d)   reduce_scatter along d
 *   R    -> S(d)   local slice (no comm)       R    -> P      local (value on coord 0)
 *   S(d) -> P(sum) local: the shard in place, zeros elsewhere (its blocks sum to the whole)
 *   SS(d,f) -> R   all_gather + local reorder  R    -> SS(d,f) local strided slice
 *   SS(d,f) -> S(e) all_to_all (+ local reorder) S(e) -> SS(d,f) all_to_all (+ local reorder)
 *   P    -> SS(d,f) reduce_scatter of the rows grouped by the strided rank that keeps them
 *
 * A step that splits or unsplits tensor dim d on mesh dim m is only possible when m is the
 * innermost mesh dim sharding d (no later mesh dim shards d), because shards nest in
 * mesh-dim order. That rule is what makes e.g. (S(0), S(1)) -> (S(1), S(0)) go
 * S(1)->R on dim 1, S(0)->S(1) on dim 0, R->S(0) on dim 1 — never through a full gather.
 */
#include <math.h>
#include <stdio.h>

#include "distributed/redistribute_impl.h"

#define MAX_CODES 16
#define STACK_STATES 256

/* The placements a plan may pass through, as small codes. */
typedef struct code_book {
  int count;
  dt_placement placements[MAX_CODES];
} code_book;

static int code_of(const code_book *book, dt_placement p) {
  for (int i = 0; i < book->count; i++) {
    if (dt__placements_equal(1, &book->placements[i], &p)) return i;
  }
  return -1;
}

static void book_add(code_book *book, dt_placement p) {
  if (code_of(book, p) < 0 && book->count < MAX_CODES) book->placements[book->count++] = p;
}

static inline bool shards_dim_after(const dt_placement *state, int mesh_ndim, int m, int d) {
  for (int j = m + 1; j < mesh_ndim; j++) {
    if (dt__is_sharding(state[j]) && state[j].dim == d) return true;
  }
  return false;
}

/* dt__step_kind, inline for this file's hot loops (the planner's search, the propagator's
 * step prices). */
static inline dt_step_kind step_kind(const dt_placement *state, int mesh_ndim, int m,
                                     dt_placement p, dt_placement q) {
  /* StridedShard(d, f): gathered back to Replicate (all_gather, then each rank reorders
   * the chunks into blocks locally), sliced from it, turned into a Shard and made from one
   * by one all_to_all (each rank sends the elements of its chunks that another's shard
   * holds), or reduce-scattered from a Partial; SS -> SS' and SS -> P pass through
   * Replicate. One StridedShard per dim (dt__strided_conflict): nested under Shards of d on
   * earlier mesh dims, it works on the extent they leave, and those cannot change before it
   * is undone (shards_dim_after counts it); under Shards of d on later mesh dims (the outer
   * form) it changes only after they are undone, as a Shard would. */
  if (dt__strided_conflict(state, mesh_ndim, m, q)) return DT_STEP_INVALID;
  if (p.kind == DT_STRIDED_SHARD) {
    /* Under later Shards of d (the outer form) they go first. */
    if (shards_dim_after(state, mesh_ndim, m, p.dim)) return DT_STEP_INVALID;
    if (q.kind == DT_REPLICATE) return DT_STEP_ALL_GATHER;
    if (q.kind == DT_SHARD && !shards_dim_after(state, mesh_ndim, m, q.dim))
      return DT_STEP_ALL_TO_ALL;
    return DT_STEP_INVALID;
  }
  if (q.kind == DT_STRIDED_SHARD) {
    if (shards_dim_after(state, mesh_ndim, m, q.dim)) return DT_STEP_INVALID;
    if (p.kind == DT_REPLICATE) return DT_STEP_SLICE;
    if (p.kind == DT_PARTIAL) return DT_STEP_REDUCE_SCATTER;
    if (p.kind == DT_SHARD && !shards_dim_after(state, mesh_ndim, m, p.dim))
      return DT_STEP_ALL_TO_ALL;
    return DT_STEP_INVALID;
  }
  if (p.kind == DT_SHARD && q.kind == DT_REPLICATE) {
    return shards_dim_after(state, mesh_ndim, m, p.dim) ? DT_STEP_INVALID : DT_STEP_ALL_GATHER;
  }
  if (p.kind == DT_SHARD && q.kind == DT_SHARD) {
    if (shards_dim_after(state, mesh_ndim, m, p.dim) ||
        shards_dim_after(state, mesh_ndim, m, q.dim)) {
      return DT_STEP_INVALID;
    }
    return DT_STEP_ALL_TO_ALL;
  }
  if (p.kind == DT_REPLICATE && q.kind == DT_SHARD) {
    return shards_dim_after(state, mesh_ndim, m, q.dim) ? DT_STEP_INVALID : DT_STEP_SLICE;
  }
  if (p.kind == DT_PARTIAL && q.kind == DT_REPLICATE) return DT_STEP_ALL_REDUCE;
  if (p.kind == DT_PARTIAL && q.kind == DT_SHARD) {
    return shards_dim_after(state, mesh_ndim, m, q.dim) ? DT_STEP_INVALID : DT_STEP_REDUCE_SCATTER;
  }
  if (p.kind == DT_REPLICATE && q.kind == DT_PARTIAL) return DT_STEP_TO_PARTIAL;
  if (p.kind == DT_SHARD && q.kind == DT_PARTIAL && q.op == DT_REDUCE_SUM) {
    /* Unsplitting d: allowed where an all_gather of d would be. */
    return shards_dim_after(state, mesh_ndim, m, p.dim) ? DT_STEP_INVALID
                                                        : DT_STEP_SHARD_TO_PARTIAL;
  }
  return DT_STEP_INVALID; /* S -> P(avg|max|min) and P -> P' go through R */
}

dt_step_kind dt__step_kind(const dt_placement *state, int mesh_ndim, int m, dt_placement p,
                           dt_placement q) {
  return step_kind(state, mesh_ndim, m, p, q);
}

/* ---- The cost model ---------------------------------------------------------------------- */

int64_t dt__step_bytes(dt_step_kind kind, int64_t mesh_size, int64_t before, int64_t after) {
  if (mesh_size <= 1) return 0; /* one rank: every step keeps the data where it is */
  switch (kind) {
  case DT_STEP_ALL_GATHER: return after; /* the gathered buffer */
  case DT_STEP_ALL_TO_ALL:
  case DT_STEP_ALL_REDUCE:
  case DT_STEP_REDUCE_SCATTER: return before; /* the buffer sent or reduced */
  default: return 0;                          /* local: a slice, or zeros off coordinate 0 */
  }
}

/* Bytes first: a collective adds 2^-6 and a local step 2^-12, tie-breakers that make fewer
 * and local steps win at equal bytes without ever trading bytes for fewer collectives. */
#define COLLECTIVE_TIE 0.015625
#define LOCAL_TIE 0.000244140625

double dt__step_cost(dt_step_kind kind, int64_t mesh_size, double before, double after) {
  if (mesh_size <= 1 || kind == DT_STEP_SLICE || kind == DT_STEP_TO_PARTIAL ||
      kind == DT_STEP_SHARD_TO_PARTIAL) {
    return LOCAL_TIE;
  }
  switch (kind) {
  case DT_STEP_ALL_GATHER: return after + COLLECTIVE_TIE;
  case DT_STEP_ALL_TO_ALL:
  case DT_STEP_ALL_REDUCE:
  case DT_STEP_REDUCE_SCATTER: return before + COLLECTIVE_TIE;
  default: return COLLECTIVE_TIE;
  }
}

dt_redistribute_geometry dt__redistribute_geometry(int ndim, const int64_t *shape, dt_dtype dtype,
                                                   int mesh_ndim, const int64_t *mesh_size) {
  dt_redistribute_geometry g = {
      .mesh_ndim = mesh_ndim, .ndim = ndim, .element_bytes = (double)dt__dtype_sizes[dtype]};
  memcpy(g.mesh_size, mesh_size, sizeof(int64_t) * (size_t)mesh_ndim);
  memcpy(g.shape, shape, sizeof(int64_t) * (size_t)ndim);
  g.global_bytes = (double)dt__numel(ndim, shape) * g.element_bytes;
  int64_t ranks = 1;
  for (int m = 0; m < mesh_ndim; m++) ranks *= mesh_size[m];
  g.even = true;
  for (int d = 0; d < ndim; d++) g.even &= shape[d] % ranks == 0;
  return g;
}

double dt__local_bytes_estimate(const dt_redistribute_geometry *g, const dt_placement *state) {
  if (g->ndim <= 0 || g->even) { /* even Shards (or no shape given): bytes over ranks */
    double bytes = g->global_bytes;
    bool strided = false;
    for (int m = 0; m < g->mesh_ndim; m++) {
      if (dt__is_sharding(state[m])) bytes /= (double)g->mesh_size[m];
      strided |= state[m].kind == DT_STRIDED_SHARD;
    }
    if (!strided || g->ndim <= 0) return bytes;
  }
  if (g->global_bytes <= 0) return 0;
  /* The extents of the dims some mesh dim shards (at most one per mesh dim), cut in mesh-dim
   * order as shards nest; the other dims keep their size (`rest` elements in all). */
  int dims[DT_MESH_MAX_DIMS], n = 0;
  int64_t extent[DT_MESH_MAX_DIMS];
  double rest = g->global_bytes / g->element_bytes;
  for (int m = 0; m < g->mesh_ndim; m++) {
    dt_placement p = state[m];
    if (!dt__is_sharding(p) || p.dim < 0 || p.dim >= g->ndim) continue;
    int k = 0;
    while (k < n && dims[k] != p.dim) k++;
    if (k == n) {
      dims[n] = p.dim, extent[n++] = g->shape[p.dim];
      rest /= (double)g->shape[p.dim]; /* exact: shape[d] divides the element count */
    }
    int64_t size = g->mesh_size[m], e = extent[k];
    if (p.kind == DT_SHARD || p.split_factor < 1 || e % p.split_factor != 0) {
      extent[k] = (e + size - 1) / size;
    } else { /* f blocks, each chunked: the first rank's chunk of every block */
      int64_t f = p.split_factor;
      extent[k] = f * ((e / f + size - 1) / size);
    }
  }
  double elements = rest;
  for (int k = 0; k < n; k++) elements *= (double)extent[k];
  return elements * g->element_bytes;
}

/* The price of one step on mesh dim m from `state`, the nesting rule set aside. */
static double one_step_cost(const dt_redistribute_geometry *g, const dt_placement *state, int m,
                            dt_placement to) {
  dt_step_kind kind = step_kind(state, g->mesh_ndim, m, state[m], to);
  if (kind == DT_STEP_INVALID) kind = step_kind(&state[m], 1, 0, state[m], to);
  dt_placement after[DT_MESH_MAX_DIMS];
  memcpy(after, state, sizeof(dt_placement) * (size_t)g->mesh_ndim);
  after[m] = to;
  return dt__step_cost(kind, g->mesh_size[m], dt__local_bytes_estimate(g, state),
                       dt__local_bytes_estimate(g, after));
}

double dt__transition_cost(const dt_redistribute_geometry *g, const dt_placement *state, int m,
                           dt_placement to) {
  dt_placement from = state[m];
  if (dt__placements_equal(1, &from, &to)) return 0;
  if (step_kind(&from, 1, 0, from, to) != DT_STEP_INVALID) return one_step_cost(g, state, m, to);
  /* S -> P(avg|max|min) and P -> P' pass through Replicate. */
  dt_placement mid[DT_MESH_MAX_DIMS];
  memcpy(mid, state, sizeof(dt_placement) * (size_t)g->mesh_ndim);
  mid[m] = dt_replicate();
  return one_step_cost(g, state, m, dt_replicate()) + one_step_cost(g, mid, m, to);
}

double dt__step_price(const dt_redistribute_geometry *g, const dt_placement *state, int m,
                      dt_placement to) {
  dt_placement from = state[m];
  if (dt__placements_equal(1, &from, &to)) return 0;
  int mesh_ndim = g->mesh_ndim;
  dt_placement after[DT_MESH_MAX_DIMS];
  memcpy(after, state, sizeof(dt_placement) * (size_t)mesh_ndim);
  after[m] = to;
  double before = dt__local_bytes_estimate(g, state);
  dt_step_kind kind = step_kind(state, mesh_ndim, m, from, to);
  if (kind != DT_STEP_INVALID)
    return dt__step_cost(kind, g->mesh_size[m], before, dt__local_bytes_estimate(g, after));
  /* Through Replicate (S -> P(avg|max|min), P -> P'), both steps keeping shards nested. */
  dt_placement mid[DT_MESH_MAX_DIMS];
  memcpy(mid, state, sizeof(dt_placement) * (size_t)mesh_ndim);
  mid[m] = dt_replicate();
  dt_step_kind first = step_kind(state, mesh_ndim, m, from, mid[m]);
  dt_step_kind second = step_kind(mid, mesh_ndim, m, mid[m], to);
  if (first == DT_STEP_INVALID || second == DT_STEP_INVALID) return HUGE_VAL;
  double middle = dt__local_bytes_estimate(g, mid);
  return dt__step_cost(first, g->mesh_size[m], before, middle) +
         dt__step_cost(second, g->mesh_size[m], middle, dt__local_bytes_estimate(g, after));
}

static int encode(const int *codes, int mesh_ndim, int base) {
  int s = 0;
  for (int m = mesh_ndim - 1; m >= 0; m--) s = s * base + codes[m];
  return s;
}

static void decode(int s, int mesh_ndim, int base, int *codes) {
  for (int m = 0; m < mesh_ndim; m++) {
    codes[m] = s % base;
    s /= base;
  }
}

/* The plan of the path the search found: walks back from goal along prev, then lists the
 * steps in order with their kinds and estimated bytes. */
static void fill_plan(const dt_redistribute_geometry *g, const code_book *book, int base, int start,
                      int goal, const int *prev, dt_redistribute_plan *plan) {
  int mesh_ndim = g->mesh_ndim;
  int path[64];
  int length = 0;
  for (int s = goal; s != start && length < 64; s = prev[s]) path[length++] = s;
  plan->n_steps = 0;
  plan->bytes = 0;
  int cur = start;
  for (int i = length - 1; i >= 0; i--) {
    int a[DT_MESH_MAX_DIMS], b[DT_MESH_MAX_DIMS];
    decode(cur, mesh_ndim, base, a);
    decode(path[i], mesh_ndim, base, b);
    dt_placement before[DT_MESH_MAX_DIMS];
    for (int m = 0; m < mesh_ndim; m++) before[m] = book->placements[a[m]];
    for (int m = 0; m < mesh_ndim; m++) {
      if (a[m] == b[m]) continue;
      dt_redistribute_step *step = &plan->steps[plan->n_steps++];
      step->mesh_dim = m;
      step->from = book->placements[a[m]];
      step->to = book->placements[b[m]];
      step->kind = step_kind(before, mesh_ndim, m, step->from, step->to);
      dt_placement after[DT_MESH_MAX_DIMS];
      memcpy(after, before, sizeof after);
      after[m] = step->to;
      /* Even-shard estimate; dt__redistribute_exact_bytes replaces it with this rank's. */
      step->bytes =
          dt__step_bytes(step->kind, g->mesh_size[m], (int64_t)dt__local_bytes_estimate(g, before),
                         (int64_t)dt__local_bytes_estimate(g, after));
      plan->bytes += step->bytes;
    }
    cur = path[i];
  }
}

/* Dijkstra from `from` to `to`. Stops as soon as nothing cheaper than `bound` is left
 * (then *cost is HUGE_VAL); fills `plan` when given and the goal is reached. */
static dt_status plan_search(const dt_redistribute_geometry *g, const dt_placement *from,
                             const dt_placement *to, double bound, dt_redistribute_plan *plan,
                             double *cost) {
  int mesh_ndim = g->mesh_ndim;
  code_book book = {0};
  book_add(&book, dt_replicate());
  for (int m = 0; m < mesh_ndim; m++) {
    book_add(&book, from[m]);
    book_add(&book, to[m]);
  }
  int base = book.count;
  int states = 1, stride[DT_MESH_MAX_DIMS];
  for (int m = 0; m < mesh_ndim; m++) stride[m] = states, states *= base;
  /* Up to 256 states (a 2-D mesh always) the tables live on the stack: the propagator
   * runs this search for every argument that changes on several mesh dims. */
  double dist_small[STACK_STATES];
  int prev_small[STACK_STATES];
  bool done_small[STACK_STATES];
  bool small = states <= STACK_STATES;
  double *dist = small ? dist_small : dt__alloc(sizeof(double) * (size_t)states);
  int *prev = small ? prev_small : dt__alloc(sizeof(int) * (size_t)states);
  bool *done = small ? done_small : dt__alloc(sizeof(bool) * (size_t)states);
  if (!dist || !prev || !done) {
    dt__free(dist);
    dt__free(prev);
    dt__free(done);
    return dt__error(DT_ERR_NOMEM, "dt_dist_redistribute: cannot allocate the planner's tables");
  }
  memset(done, 0, sizeof(bool) * (size_t)states);
  int start_codes[DT_MESH_MAX_DIMS], goal_codes[DT_MESH_MAX_DIMS];
  for (int m = 0; m < mesh_ndim; m++) {
    start_codes[m] = code_of(&book, from[m]);
    goal_codes[m] = code_of(&book, to[m]);
  }
  int start = encode(start_codes, mesh_ndim, base), goal = encode(goal_codes, mesh_ndim, base);
  /* A nested StridedShard (S(d) then SS(d, f), or SS(d, f) then S(d)) exists only where the
   * Shards split d into whole blocks or whole chunks (dt__strided_fits): the search may start or
   * end at one (checked by the caller) and passes through one only when the geometry has the
   * shape and it fits (R -> [SS(0, 4), S(0), S(0)] on 2x2x2 slices one mesh dim at a time). */
  bool strided = false;
  for (int i = 0; i < book.count; i++) strided |= book.placements[i].kind == DT_STRIDED_SHARD;
  for (int s = 0; s < states; s++) {
    dist[s] = 1e300;
    prev[s] = -1;
  }
  dist[start] = 0;
  /* Dense Dijkstra: the state space is tiny (at most 16^4, usually a few dozen). Reached
   * states not yet settled are listed in `open`, so that picking the next one does not
   * scan every state. */
  int open[STACK_STATES]; /* used with the small tables; larger ones are scanned */
  int n_open = 0;
  if (small) open[n_open++] = start;
  for (;;) {
    int best = -1, best_at = -1;
    if (small) {
      for (int k = 0; k < n_open; k++) {
        int o = open[k]; /* the cheapest, the lowest state on ties (as the scan below) */
        if (best < 0 || dist[o] < dist[best] || (dist[o] == dist[best] && o < best))
          best = o, best_at = k;
      }
    } else {
      for (int s = 0; s < states; s++) {
        if (!done[s] && dist[s] < 1e299 && (best < 0 || dist[s] < dist[best])) best = s;
      }
    }
    if (best < 0 || best == goal || dist[best] >= bound) break;
    if (small) open[best_at] = open[--n_open];
    done[best] = true;
    int codes[DT_MESH_MAX_DIMS];
    dt_placement state[DT_MESH_MAX_DIMS];
    decode(best, mesh_ndim, base, codes);
    for (int m = 0; m < mesh_ndim; m++) state[m] = book.placements[codes[m]];
    /* The state's bytes, once; the next state's only for an all_gather (the only step priced
     * by what it produces). */
    double state_bytes = dt__local_bytes_estimate(g, state);
    for (int m = 0; m < mesh_ndim; m++) {
      for (int c = 0; c < base; c++) {
        if (c == codes[m]) continue;
        int next = best + (c - codes[m]) * stride[m];
        if (done[next]) continue; /* settled: no step makes it cheaper */
        dt_step_kind kind = step_kind(state, mesh_ndim, m, state[m], book.placements[c]);
        if (kind == DT_STEP_INVALID) continue;
        if (strided && next != goal && dt__is_sharding(book.placements[c])) {
          dt_placement next_state[DT_MESH_MAX_DIMS];
          memcpy(next_state, state, sizeof(dt_placement) * (size_t)mesh_ndim);
          next_state[m] = book.placements[c];
          if (dt__strided_nested(mesh_ndim, next_state) &&
              (g->ndim <= 0 ||
               !dt__strided_fits(g->ndim, g->shape, mesh_ndim, g->mesh_size, next_state)))
            continue;
        }
        double next_bytes = 0;
        if (kind == DT_STEP_ALL_GATHER) {
          dt_placement next_state[DT_MESH_MAX_DIMS];
          memcpy(next_state, state, sizeof(dt_placement) * (size_t)mesh_ndim);
          next_state[m] = book.placements[c];
          next_bytes = dt__local_bytes_estimate(g, next_state);
        }
        double d = dist[best] + dt__step_cost(kind, g->mesh_size[m], state_bytes, next_bytes);
        if (d < dist[next]) {
          if (small && dist[next] >= 1e299) open[n_open++] = next;
          dist[next] = d;
          prev[next] = best;
        }
      }
    }
  }
  dt_status st = DT_OK;
  *cost = dist[goal] < bound && dist[goal] < 1e299 ? dist[goal] : HUGE_VAL;
  if (!plan) goto done;
  if (dist[goal] >= 1e299) {
    st = dt__error(DT_ERR_INTERNAL, "dt_dist_redistribute: no plan found");
    goto done;
  }
  fill_plan(g, &book, base, start, goal, prev, plan);
done:
  if (!small) {
    dt__free(dist);
    dt__free(prev);
    dt__free(done);
  }
  return st;
}

dt_status dt__redistribute_plan(const dt_redistribute_geometry *g, const dt_placement *from,
                                const dt_placement *to, dt_redistribute_plan *plan) {
  double cost;
  return plan_search(g, from, to, HUGE_VAL, plan, &cost);
}

double dt__redistribute_cost_below(const dt_redistribute_geometry *g, const dt_placement *from,
                                   const dt_placement *to, double bound) {
  double cost = HUGE_VAL;
  if (plan_search(g, from, to, bound, NULL, &cost)) return HUGE_VAL;
  return cost;
}

double dt__redistribute_cost(const dt_redistribute_geometry *g, const dt_placement *from,
                             const dt_placement *to) {
  return dt__redistribute_cost_below(g, from, to, HUGE_VAL);
}

bool dt__step_allowed(const dt_placement *state, int mesh_ndim, int m, dt_placement to) {
  dt_placement from = state[m];
  if (dt__placements_equal(1, &from, &to)) return true;
  if (step_kind(state, mesh_ndim, m, from, to) != DT_STEP_INVALID) return true;
  /* Through Replicate (S -> P(avg|max|min), P -> P'). */
  dt_placement mid[DT_MESH_MAX_DIMS];
  memcpy(mid, state, sizeof(dt_placement) * (size_t)mesh_ndim);
  mid[m] = dt_replicate();
  return step_kind(state, mesh_ndim, m, from, mid[m]) != DT_STEP_INVALID &&
         step_kind(mid, mesh_ndim, m, mid[m], to) != DT_STEP_INVALID;
}

static const char *step_name(dt_step_kind kind) {
  switch (kind) {
  case DT_STEP_ALL_GATHER: return "all_gather";
  case DT_STEP_ALL_TO_ALL: return "all_to_all";
  case DT_STEP_ALL_REDUCE: return "all_reduce";
  case DT_STEP_REDUCE_SCATTER: return "reduce_scatter";
  case DT_STEP_SLICE: return "local slice";
  case DT_STEP_TO_PARTIAL: return "local partial";
  case DT_STEP_SHARD_TO_PARTIAL: return "local partial (shard in zeros)";
  default: return "invalid";
  }
}

void dt__redistribute_plan_format(const dt_redistribute_plan *plan, char *buf, size_t size) {
  size_t used = 0;
  if (size == 0) return;
  buf[0] = '\0';
  if (plan->n_steps == 0) {
    snprintf(buf, size, "nothing to move (0 bytes)");
    return;
  }
  for (int i = 0; i < plan->n_steps && used < size; i++) {
    const dt_redistribute_step *s = &plan->steps[i];
    char a[32], b[32];
    int n =
        snprintf(buf + used, size - used, "%smesh dim %d: %s -> %s via %s, %lld bytes",
                 i ? "\n" : "", s->mesh_dim, dt_placement_format(s->from, a, sizeof a),
                 dt_placement_format(s->to, b, sizeof b), step_name(s->kind), (long long)s->bytes);
    if (n < 0) break;
    used += (size_t)n;
  }
  if (used < size) snprintf(buf + used, size - used, "\ntotal: %lld bytes", (long long)plan->bytes);
}
