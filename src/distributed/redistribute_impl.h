/* Redistribution plans and their execution. */
#ifndef DT_REDISTRIBUTE_IMPL_H
#define DT_REDISTRIBUTE_IMPL_H

#include "distributed/dist_impl.h"

typedef enum dt_step_kind {
  DT_STEP_INVALID = 0,
  DT_STEP_ALL_GATHER,
  DT_STEP_ALL_TO_ALL,
  DT_STEP_ALL_REDUCE,
  DT_STEP_REDUCE_SCATTER,
  DT_STEP_SLICE,
  DT_STEP_TO_PARTIAL,
  /* S(d) -> P(sum): the shard in place in a block of zeros the size of the unsplit dim, so
   * that the ranks' blocks sum to the whole. Local. */
  DT_STEP_SHARD_TO_PARTIAL,
} dt_step_kind;

typedef struct dt_redistribute_step {
  int mesh_dim;
  dt_placement from, to;
  dt_step_kind kind;
  int64_t bytes; /* estimated bytes through this rank */
} dt_redistribute_step;

#define DT_MAX_REDISTRIBUTE_STEPS (4 * DT_MESH_MAX_DIMS)

typedef struct dt_redistribute_plan {
  int n_steps;
  dt_redistribute_step steps[DT_MAX_REDISTRIBUTE_STEPS];
  int64_t bytes;
} dt_redistribute_plan;

/* What the cost model needs of the tensor and the mesh: the global shape and element size
 * (ndim 0 with only global_bytes set: shards are taken as even), made by
 * dt__redistribute_geometry. */
typedef struct dt_redistribute_geometry {
  int mesh_ndim;
  int64_t mesh_size[DT_MESH_MAX_DIMS];
  double global_bytes;
  int ndim;
  int64_t shape[DT_MAX_DIMS];
  double element_bytes;
  bool even; /* every dim divides by the product of the mesh sizes: Shards split evenly */
} dt_redistribute_geometry;

/* The geometry of a tensor of the given global shape and dtype on a mesh. */
dt_redistribute_geometry dt__redistribute_geometry(int ndim, const int64_t *shape, dt_dtype dtype,
                                                   int mesh_ndim, const int64_t *mesh_size);

/* ---- The cost model ----------------------------------------------------------------------
 * The one place that says what a transition costs. Everything that prices or reports
 * communication (the planner, dt_dist_redistribute_explain, the propagator ranking strategies in
 * eager dispatch and in the TP transformation) goes through these functions, and their
 * byte counts are what the comm ledger measures: the larger buffer of the collective on this
 * rank (an all_gather's gathered result; the input of an all_reduce, reduce_scatter or
 * all_to_all). Local steps (a slice, making a partial) move nothing. */

/* The collective a step from p to q on mesh dim m needs, given the whole placement tuple
 * `state`, or DT_STEP_INVALID (S -> P(avg|max|min), P -> P', or a split that nesting
 * forbids). */
dt_step_kind dt__step_kind(const dt_placement *state, int mesh_ndim, int m, dt_placement p,
                           dt_placement q);

/* Bytes one rank's collective moves for a step of `kind` on a mesh dim of mesh_size ranks,
 * from its local bytes before and after the step. */
int64_t dt__step_bytes(dt_step_kind kind, int64_t mesh_size, int64_t before, int64_t after);

/* The price a plan or a strategy pays for a step: its bytes plus a tie-breaker (2^-6 per
 * collective, 2^-12 for a local step) so that, at equal traffic, fewer and local steps win;
 * bytes are never traded for fewer collectives. */
double dt__step_cost(dt_step_kind kind, int64_t mesh_size, double before, double after);

/* The ranking estimate of the bytes a rank holds under `state`: the shard of the first rank,
 * the largest under torch.chunk's rule (each Shard keeps ceil(extent / ranks) of its dim), so
 * that uneven shards are priced as the rank that moves most moves them and the choice is
 * the same on every rank. Exact byte counts come from dt__redistribute_exact_bytes. */
double dt__local_bytes_estimate(const dt_redistribute_geometry *g, const dt_placement *state);

/* The price of changing mesh dim m of a tensor placed `state` to `to`: one step, or two
 * through Replicate (S -> P(avg|max|min), P -> P'). A step that nesting forbids is priced as if it
 * were allowed; the planner then finds the real path. 0 when nothing changes. */
double dt__transition_cost(const dt_redistribute_geometry *g, const dt_placement *state, int m,
                           dt_placement to);

/* Whether mesh dim m of a tensor placed `state` can change to `to` in one step, or two
 * through Replicate, without breaking the nesting of shards. */
bool dt__step_allowed(const dt_placement *state, int mesh_ndim, int m, dt_placement to);

/* Both at once: dt__transition_cost when dt__step_allowed, else HUGE_VAL (the propagator's
 * price of one step of an argument, asked for every candidate on a cache miss). */
double dt__step_price(const dt_redistribute_geometry *g, const dt_placement *state, int m,
                      dt_placement to);

/* The price of the planner's cheapest path from `from` to `to` (what the planner ranks by:
 * the sum of its steps' dt__step_cost), HUGE_VAL when there is none. */
double dt__redistribute_cost(const dt_redistribute_geometry *g, const dt_placement *from,
                             const dt_placement *to);
/* The same, but HUGE_VAL as soon as it is clear no path costs less than `bound` (the search
 * stops there): what the propagator asks when it already has a price to beat. */
double dt__redistribute_cost_below(const dt_redistribute_geometry *g, const dt_placement *from,
                                   const dt_placement *to, double bound);

dt_status dt__redistribute_plan(const dt_redistribute_geometry *g, const dt_placement *from,
                                const dt_placement *to, dt_redistribute_plan *plan);
void dt__redistribute_plan_format(const dt_redistribute_plan *plan, char *buf, size_t size);

/* Replaces a plan's estimated bytes with what this rank's collectives will move (the larger
 * buffer of each, as the comm ledger counts them), from the exact shard geometry. */
void dt__redistribute_exact_bytes(const dt_dist_spec *from, dt_redistribute_plan *plan);

/* R -> StridedShard(d, f) on a mesh dim of n ranks: a new contiguous tensor holding this
 * rank's (`coord`) chunk of each of the f blocks of `local`'s dim d. Local. */
dt_status dt__strided_slice(dt_tensor *local, int d, int64_t f, int n, int coord, dt_tensor **out);

/* Runs a plan on this rank's shard of a tensor with spec `from`. */
dt_status dt__redistribute_execute(dt_tensor *local, const dt_dist_spec *from,
                                   const dt_redistribute_plan *plan, dt_tensor **out);

#endif
