/* Direct moves into a StridedShard (issue 16): S(d) -> SS(d,f) and S(e) -> SS(d,f) are one
 * all_to_all of this rank's bytes, P -> SS(d,f) one reduce_scatter of the local buffer; the
 * planner picks them, explain prices them as the comm ledger measures them, and the shards
 * hold what a naive loop slices from the whole tensor, uneven chunks (empty ones too)
 * included. */
#include <criterion/criterion.h>

/* Private header: S -> SS and P -> SS are single steps: the plan and its step kinds are
 * internal. */
#include "distributed/redistribute_impl.h"
#include "strided_helpers.h"

/* ---- One move, checked --------------------------------------------------------------------- */

typedef struct direct_case {
  int mesh_ndim;
  int mesh_shape[2];
  int ndim;
  int64_t shape[2];
  dt_placement from[2], to[2];
  const char *collective; /* the one collective expected */
} direct_case;

/* The contribution of mesh coordinate c to a Partial: the whole value plus c, so that every
 * reduce op gives a different, exactly representable result. */
static double reduce_naive(dt_reduce_op op, double v, int n) {
  double acc = op == DT_REDUCE_MIN ? 1e300 : op == DT_REDUCE_MAX ? -1e300 : 0;
  for (int c = 0; c < n; c++) {
    double x = v + c;
    if (op == DT_REDUCE_MAX)
      acc = x > acc ? x : acc;
    else if (op == DT_REDUCE_MIN)
      acc = x < acc ? x : acc;
    else
      acc += x;
  }
  return op == DT_REDUCE_AVG ? acc / n : acc;
}

static dt_status direct_rank(dt_comm *world, void *arg) {
  const direct_case *c = arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, c->mesh_ndim, c->mesh_shape, NULL, &mesh));
  int coord[2] = {0, 0};
  for (int m = 0; m < c->mesh_ndim; m++) coord[m] = dt_mesh_coordinate(mesh, m);
  int64_t numel = c->shape[0] * (c->ndim == 2 ? c->shape[1] : 1);
  dt_tensor *full = iota(c->ndim, c->shape);
  double *v = ref_values(full);
  /* The source: a Partial mesh dim holds (whole + coordinate) on each rank; the whole tensor
   * is then their reduction. */
  dt_placement placed[2];
  int partial_dim = -1;
  for (int m = 0; m < c->mesh_ndim; m++) {
    placed[m] = c->from[m].kind == DT_PARTIAL ? dt_replicate() : c->from[m];
    if (c->from[m].kind == DT_PARTIAL) partial_dim = m;
  }
  dt_tensor *x = NULL, *expect_full = NULL;
  double *whole = malloc(sizeof(double) * (size_t)numel);
  for (int64_t i = 0; i < numel; i++) whole[i] = v[i];
  if (partial_dim < 0) {
    RANK_OK(dt_dist_distribute_tensor(mesh, full, c->mesh_ndim, c->from, &x));
  } else {
    dt_reduce_op op = c->from[partial_dim].op;
    int n = c->mesh_shape[partial_dim];
    for (int64_t i = 0; i < numel; i++) whole[i] = reduce_naive(op, v[i], n);
    dt_tensor *placed_x = NULL, *local = NULL;
    RANK_OK(dt_dist_distribute_tensor(mesh, full, c->mesh_ndim, placed, &placed_x));
    RANK_OK(dt_dist_to_local(placed_x, &local));
    double *lv = ref_values(local);
    for (int64_t i = 0; i < dt_tensor_numel(local); i++) lv[i] += coord[partial_dim];
    int64_t local_shape[2] = {dt_tensor_shape(local)[0],
                              c->ndim == 2 ? dt_tensor_shape(local)[1] : 1};
    dt_tensor *contribution = ref_tensor(c->ndim, local_shape, DT_F32, lv);
    free(lv);
    dt_dist_from_local_options opts = {.global_shape = c->shape, .global_ndim = c->ndim};
    RANK_OK(dt_dist_from_local(mesh, contribution, c->mesh_ndim, c->from, &opts, &x));
    RELEASE_ALL(contribution, local, placed_x);
  }
  expect_full = ref_tensor(c->ndim, c->shape, DT_F32, whole);
  dt_tensor *x_local = NULL;
  RANK_OK(dt_dist_to_local(x, &x_local));
  int64_t local_bytes = dt_tensor_numel(x_local) * 4;
  dt_tensor_release(x_local);

  /* The planner's choice, as explain tells it: one step, the direct collective. */
  char text[512], a[32], b[32];
  int64_t explained = -1;
  RANK_OK(dt_dist_redistribute_explain(x, c->mesh_ndim, c->to, text, sizeof text, &explained));
  char via[64];
  snprintf(via, sizeof via, "via %.*s", strncmp(c->collective, "reduce_scatter", 14) ? 32 : 14,
           c->collective);
  const char *first = strstr(text, "mesh dim");
  RANK_CHECK(first && !strstr(first + 1, "mesh dim") && strstr(text, via),
             "%s -> %s: expected one step %s, explain says\n%.300s",
             dt_placement_format(c->from[c->mesh_ndim - 1], a, sizeof a),
             dt_placement_format(c->to[c->mesh_ndim - 1], b, sizeof b), via, text);

  dt_comm_ledger *ledger = NULL;
  dt_tensor *moved = NULL;
  RANK_OK(dt_comm_ledger_start(&ledger));
  RANK_OK(dt_dist_redistribute(x, c->mesh_ndim, c->to, &moved));
  RANK_OK(dt_comm_ledger_stop(ledger));
  int64_t calls = dt_comm_ledger_count(ledger, NULL);
  int64_t direct = dt_comm_ledger_count(ledger, c->collective);
  int64_t bytes = dt_comm_ledger_bytes(ledger, NULL);
  dt_comm_ledger_destroy(ledger);
  RANK_CHECK(calls == 1 && direct == 1, "%lld collectives (%lld %s), expected one %s",
             (long long)calls, (long long)direct, c->collective, c->collective);
  RANK_CHECK(bytes == explained, "explain says %lld bytes, the ledger %lld\n%.300s",
             (long long)explained, (long long)bytes, text);
  /* Both collectives move this rank's buffer: B/n for an all_to_all of a shard, B for the
   * reduce_scatter of a whole Partial. */
  RANK_CHECK(bytes == local_bytes, "moved %lld bytes, expected this rank's %lld", (long long)bytes,
             (long long)local_bytes);
  for (int m = 0; m < c->mesh_ndim; m++) RANK_OK(placement_is("moved", moved, m, c->to[m]));

  /* This rank's shard is the naive slice of the whole; gathered, it is the whole. */
  dt_tensor *local = NULL;
  RANK_OK(dt_dist_to_local(moved, &local));
  dt_tensor *expect_local =
      naive_shard(c->ndim, c->shape, whole, c->mesh_ndim, c->to, c->mesh_shape, coord);
  RANK_CHECK(dt_tensor_ndim(local) == c->ndim, "local ndim %d", dt_tensor_ndim(local));
  for (int d = 0; d < c->ndim; d++) {
    RANK_CHECK(dt_tensor_shape(local)[d] == dt_tensor_shape(expect_local)[d],
               "rank %d: local dim %d is %lld, expected %lld", dt_comm_rank(world), d,
               (long long)dt_tensor_shape(local)[d], (long long)dt_tensor_shape(expect_local)[d]);
  }
  RANK_OK(same_values_tol("local shard", local, expect_local, 0));
  RANK_OK(full_equals_tol("whole", moved, expect_full, 0));
  free(whole);
  free(v);
  RELEASE_ALL(expect_local, local, moved, expect_full, x, full);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

#define MESH1(n)                                                                                   \
  1, { n, 1 }
#define MESH2x2                                                                                    \
  2, { 2, 2 }
#define T1(l)                                                                                      \
  1, { l, 1 }
#define T2(r, c)                                                                                   \
  2, { r, c }
#define A2A "all_to_all"
#define RS "reduce_scatter_uneven"

static const dt_reduce_op SUM = DT_REDUCE_SUM;

Test(strided_direct, shard_to_strided_same_dim_1d) {
  direct_case cases[] = {
      /* [6, 5] flattened: blocks of 5, chunks 2, 2, 1, 0 */
      {MESH1(4), T1(30), {dt_shard(0)}, {dt_strided_shard(0, 6)}, A2A},
      /* [10, 3] flattened: blocks of 3, chunks 1, 1, 1, 0 */
      {MESH1(4), T1(30), {dt_shard(0)}, {dt_strided_shard(0, 10)}, A2A},
      {MESH1(4), T1(24), {dt_shard(0)}, {dt_strided_shard(0, 6)}, A2A},
      /* rows: blocks of 2 rows over 4 ranks, chunks 1, 1, 0, 0 */
      {MESH1(4), T2(6, 5), {dt_shard(0)}, {dt_strided_shard(0, 3)}, A2A},
      {MESH1(4), T2(6, 10), {dt_shard(1)}, {dt_strided_shard(1, 2)}, A2A},
      {MESH1(3), T1(30), {dt_shard(0)}, {dt_strided_shard(0, 6)}, A2A},
      {MESH1(2), T2(10, 3), {dt_shard(0)}, {dt_strided_shard(0, 2)}, A2A},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    SPAWN_OK(cases[i].mesh_shape[0], direct_rank, &cases[i]);
}

Test(strided_direct, shard_to_strided_other_dim_1d) {
  direct_case cases[] = {
      {MESH1(4), T2(6, 5), {dt_shard(1)}, {dt_strided_shard(0, 3)}, A2A},
      {MESH1(4), T2(10, 3), {dt_shard(0)}, {dt_strided_shard(1, 3)}, A2A},
      {MESH1(4), T2(10, 3), {dt_shard(1)}, {dt_strided_shard(0, 2)}, A2A},
      {MESH1(3), T2(6, 10), {dt_shard(0)}, {dt_strided_shard(1, 5)}, A2A},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    SPAWN_OK(cases[i].mesh_shape[0], direct_rank, &cases[i]);
}

Test(strided_direct, partial_to_strided_1d) {
  direct_case cases[] = {
      {MESH1(4), T1(30), {dt_partial(SUM)}, {dt_strided_shard(0, 6)}, RS},
      {MESH1(4), T2(10, 3), {dt_partial(DT_REDUCE_MAX)}, {dt_strided_shard(0, 2)}, RS},
      {MESH1(4), T2(6, 5), {dt_partial(DT_REDUCE_MIN)}, {dt_strided_shard(0, 3)}, RS},
      {MESH1(4), T2(6, 5), {dt_partial(DT_REDUCE_AVG)}, {dt_strided_shard(1, 5)}, RS},
      {MESH1(3), T2(10, 3), {dt_partial(SUM)}, {dt_strided_shard(0, 10)}, RS},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    SPAWN_OK(cases[i].mesh_shape[0], direct_rank, &cases[i]);
}

Test(strided_direct, mesh_2x2) {
  direct_case cases[] = {
      /* mesh dim 1: dim 1's 6 columns as 2 blocks of 3, chunks 2, 1 */
      {MESH2x2, T2(10, 6), {dt_shard(0), dt_shard(1)}, {dt_shard(0), dt_strided_shard(1, 2)}, A2A},
      /* mesh dim 0 moves, mesh dim 1 stays */
      {MESH2x2,
       T2(6, 10),
       {dt_shard(1), dt_replicate()},
       {dt_strided_shard(1, 2), dt_replicate()},
       A2A},
      {MESH2x2,
       T2(10, 6),
       {dt_replicate(), dt_shard(1)},
       {dt_replicate(), dt_strided_shard(0, 2)},
       A2A},
      {MESH2x2, T2(6, 5), {dt_shard(1), dt_shard(0)}, {dt_shard(1), dt_strided_shard(0, 3)}, A2A},
      {MESH2x2,
       T2(10, 3),
       {dt_replicate(), dt_partial(SUM)},
       {dt_replicate(), dt_strided_shard(0, 2)},
       RS},
      {MESH2x2,
       T2(10, 3),
       {dt_shard(1), dt_partial(SUM)},
       {dt_shard(1), dt_strided_shard(0, 2)},
       RS},
      {MESH2x2,
       T2(6, 10),
       {dt_partial(DT_REDUCE_MAX), dt_shard(0)},
       {dt_strided_shard(1, 2), dt_shard(0)},
       RS},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) SPAWN_OK(4, direct_rank, &cases[i]);
}

/* ---- The planner and the cost model ------------------------------------------------------ */

/* One step of `kind`, at the cost model's bytes: an all_to_all B/n, a reduce_scatter B. */
Test(strided_direct, planner_takes_the_direct_edge) {
  dt_redistribute_geometry g = {.mesh_ndim = 1, .mesh_size = {4}, .global_bytes = 960};
  struct {
    dt_placement from, to;
    dt_step_kind kind;
    int64_t bytes;
  } cases[] = {
      {dt_shard(0), dt_strided_shard(0, 6), DT_STEP_ALL_TO_ALL, 240},
      {dt_shard(1), dt_strided_shard(0, 6), DT_STEP_ALL_TO_ALL, 240},
      {dt_partial(SUM), dt_strided_shard(0, 6), DT_STEP_REDUCE_SCATTER, 960},
      {dt_partial(DT_REDUCE_MAX), dt_strided_shard(0, 6), DT_STEP_REDUCE_SCATTER, 960},
      {dt_replicate(), dt_strided_shard(0, 6), DT_STEP_SLICE, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    dt_redistribute_plan plan;
    cr_assert_eq(dt__redistribute_plan(&g, &cases[i].from, &cases[i].to, &plan), DT_OK);
    cr_assert_eq(plan.n_steps, 1, "case %zu: %d steps", i, plan.n_steps);
    cr_assert_eq(plan.steps[0].kind, cases[i].kind, "case %zu", i);
    cr_assert_eq(plan.bytes, cases[i].bytes, "case %zu: %lld bytes", i, (long long)plan.bytes);
    /* The propagator's price of the same move is the planner's. */
    double price = dt__transition_cost(&g, &cases[i].from, 0, cases[i].to);
    cr_assert(price < (double)cases[i].bytes + 1, "case %zu: priced %g", i, price);
  }
  /* On 2x2 the move on mesh dim 1 is one all_to_all of the quarter shard. */
  dt_redistribute_geometry g2 = {.mesh_ndim = 2, .mesh_size = {2, 2}, .global_bytes = 960};
  dt_placement from[2] = {dt_shard(0), dt_shard(1)}, to[2] = {dt_shard(0), dt_strided_shard(1, 2)};
  dt_redistribute_plan plan;
  cr_assert_eq(dt__redistribute_plan(&g2, from, to, &plan), DT_OK);
  cr_assert_eq(plan.n_steps, 1);
  cr_assert_eq(plan.steps[0].kind, DT_STEP_ALL_TO_ALL);
  cr_assert_eq(plan.bytes, 240);
  /* A Shard of its dim after a StridedShard (the outer form) is a slice of the rank's chunks,
   * and the StridedShard under it cannot change until it is undone. */
  dt_placement nested[2] = {dt_strided_shard(0, 2), dt_replicate()};
  dt_placement later = dt_shard(0);
  cr_assert_eq(dt__step_kind(nested, 2, 1, nested[1], later), DT_STEP_SLICE);
  dt_placement outer[2] = {dt_strided_shard(0, 2), dt_shard(0)};
  cr_assert_eq(dt__step_kind(outer, 2, 0, outer[0], dt_replicate()), DT_STEP_INVALID);
  cr_assert_eq(dt__step_kind(outer, 2, 1, outer[1], dt_replicate()), DT_STEP_ALL_GATHER);
  /* Two StridedShards of one dim do not exist. */
  cr_assert_eq(dt__step_kind(nested, 2, 1, nested[1], dt_strided_shard(0, 2)), DT_STEP_INVALID);
}

/* Eager dispatch: an in-place add into an SS(0, 6) tensor keeps its placement, so the S(0)
 * operand takes SS(0, 6): one all_to_all of its shard, where it used to be gathered whole. */
static dt_status dispatch_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  int64_t shape[2] = {6, 5};
  dt_tensor *full = NULL, *full_flat = NULL, *x = NULL, *y = NULL, *z = NULL, *z_local = NULL,
            *ref = NULL;
  RANK_OK(flat_of_shard_1(world, 2, shape, &mesh, &full, &full_flat, &x, &y));
  RANK_OK(dt_dist_distribute_tensor(mesh, full_flat, 1, (dt_placement[]){dt_shard(0)}, &z));
  RANK_OK(dt_dist_to_local(z, &z_local));
  int64_t z_bytes = dt_tensor_numel(z_local) * 4;
  dt_comm_ledger *ledger = NULL;
  ledger_counts counts;
  LEDGER_BEGIN(ledger);
  RANK_OK(dt_add_(y, z));
  LEDGER_END(ledger, counts);
  RANK_CHECK(counts.calls == 1 && counts.all_to_all == 1, "%lld collectives, %lld all_to_all",
             (long long)counts.calls, (long long)counts.all_to_all);
  RANK_CHECK(counts.bytes == z_bytes, "moved %lld bytes, expected the S(0) shard's %lld",
             (long long)counts.bytes, (long long)z_bytes);
  RANK_OK(placement_is("add_", y, 0, dt_strided_shard(0, 6)));
  RANK_OK(dt_add(full_flat, full_flat, &ref));
  RANK_OK(full_equals_tol("add_", y, ref, 0));
  RELEASE_ALL(ref, z_local, z, y, x, full_flat, full);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(strided_direct, dispatch_moves_one_shard) { SPAWN_OK(4, dispatch_rank, NULL); }
