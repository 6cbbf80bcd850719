/* A StridedShard with a Shard of the same tensor dim on a later mesh dim (issue 16): SS(d, f) on
 * mesh dim m then S(d) on a later one, which chunks what the rank holds (its f chunks in block
 * order); supported when the later mesh dims take whole chunks (their sizes divide f). It is
 * PyTorch's (_StridedShard(d, f), Shard(d)): a flattened [S(1), S(0)], and FSDP2 x TP's
 * parameter layout (dp: _StridedShard(0, tp), tp: Shard(0)). Shards are checked element for
 * element against the naive slice of the whole tensor (tests/strided_helpers.h, which applies
 * the mesh dims in order as PyTorch does) on 2x2 and 2x3 meshes; moves against the comm ledger
 * and explain. */
#include <criterion/criterion.h>

/* Private header: the outer StridedShard form is recognised: dt__strided_outer is internal. */
#include "distributed/redistribute_impl.h"
#include "strided_helpers.h"

#define SS dt_strided_shard
#define S dt_shard
#define R dt_replicate

/* How many elements this rank holds under pl (the naive slice). */
static int64_t naive_numel(const strided_case *c, const dt_placement *pl, const int *coord) {
  int64_t idx[NAIVE_MAX_LEN], numel = 1;
  for (int d = 0; d < c->ndim; d++)
    numel *= naive_indices(c->shape[d], d, 2, pl, c->mesh_shape, coord, idx, NAIVE_MAX_LEN);
  return numel;
}

static dt_status outer_rank(dt_comm *world, void *arg) {
  const strided_case *c = arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 2, c->mesh_shape, NULL, &mesh));
  int coord[2] = {dt_mesh_coordinate(mesh, 0), dt_mesh_coordinate(mesh, 1)};
  dt_tensor *full = NULL, *x = NULL, *local = NULL, *back = NULL;
  RANK_OK(strided_round_trip(mesh, c, coord, &full, &x, &local, &back));
  /* from_local of a wrong local shape fails. */
  dt_dist_from_local_options opt = {.global_shape = c->shape, .global_ndim = c->ndim};
  int64_t wrong_shape[2] = {local->shape[0] + 1, c->ndim == 2 ? local->shape[1] : 1};
  dt_tensor *wrong = iota(c->ndim, wrong_shape), *none = NULL;
  dt_status st = dt_dist_from_local(mesh, wrong, 2, c->pl, &opt, &none);
  RANK_CHECK(st == DT_ERR_INVALID && strstr(dt_last_error(), "dt_dist_from_local"),
             "from_local of a wrong shape: %s", dt_last_error());
  /* Out: the later Shard first (all_gather of the rank's chunks), then the StridedShard (all_gather
   * of the whole); in: two local slices. */
  int d = c->pl[0].dim;
  int64_t bytes = 0, whole = dt_tensor_numel(full) * 4;
  dt_placement rr[2] = {R(), R()}, ss_r[2] = {c->pl[0], R()};
  RANK_OK(strided_move_checked("to R", x, full, c, rr, coord, &bytes));
  int64_t expect = naive_numel(c, ss_r, coord) * 4 + whole;
  RANK_CHECK(bytes == expect, "to R: %lld bytes, expected %lld", (long long)bytes,
             (long long)expect);
  dt_tensor *rep = NULL;
  RANK_OK(dt_dist_redistribute(x, 2, rr, &rep));
  RANK_OK(strided_move_checked("R -> outer", rep, full, c, c->pl, coord, &bytes));
  RANK_CHECK(bytes == 0, "R -> outer: %lld bytes", (long long)bytes);
  /* To plain shards of d in either order and to a shard of the other dim: whatever the planner
   * picks, exact and priced as it runs. */
  RANK_OK(strided_move_checked("to S,S", x, full, c, (dt_placement[]){S(d), S(d)}, coord, &bytes));
  RANK_OK(strided_move_checked("to SS,R", x, full, c, ss_r, coord, &bytes));
  RANK_OK(strided_move_checked("to R,S", x, full, c, (dt_placement[]){R(), S(d)}, coord, &bytes));
  if (c->ndim == 2)
    RANK_OK(strided_move_checked("to S(e)", x, full, c, (dt_placement[]){S(1 - d), R()}, coord,
                                 &bytes));
  RELEASE_ALL(full, x, local, back, wrong, rep);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(strided_outer, spec_and_redistribution) {
  strided_case cases[] = {
      /* [4, 4] [S(1), S(0)] flattened on 2x2: rank (0, 1) holds {8, 9, 12, 13} (PyTorch's) */
      {{2, 2}, 1, {16, 1}, {SS(0, 4), S(0)}},
      /* [3, 5] flattened on 2x3: uneven chunks (5 over 2: 3, 2), one block per rank (a box) */
      {{2, 3}, 1, {15, 1}, {SS(0, 3), S(0)}},
      /* two blocks per rank on 2x3 */
      {{2, 3}, 1, {24, 1}, {SS(0, 6), S(0)}},
      /* FSDP2 x TP: [8, 6] with dp = 2, tp = 2: (_StridedShard(0, 2), Shard(0)) */
      {{2, 2}, 2, {8, 6}, {SS(0, 2), S(0)}},
      /* uneven chunks of 2-D rows, and the other dim on 2x3 */
      {{2, 2}, 2, {6, 5}, {SS(0, 2), S(0)}},
      {{2, 3}, 2, {3, 12}, {SS(1, 6), S(1)}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    SPAWN_OK(cases[i].mesh_shape[0] * cases[i].mesh_shape[1], outer_rank, &cases[i]);
}

static dt_status errors_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 2, (int[]){2, 3}, NULL, &mesh));
  int64_t n = 12;
  dt_tensor *full = iota(1, &n), *out = NULL, *x = NULL;
  /* 3 ranks after SS(0, 2) would cut its 2 chunks into pieces of chunks. */
  dt_status st = dt_dist_distribute_tensor(mesh, full, 2, (dt_placement[]){SS(0, 2), S(0)}, &out);
  RANK_CHECK(st == DT_ERR_UNSUPPORTED && strstr(dt_last_error(), "dt_dist_distribute_tensor") &&
                 strstr(dt_last_error(), "whole chunks"),
             "SS(0,2), S(0) on 2x3: %s", dt_last_error());
  RANK_OK(dt_dist_distribute_tensor(mesh, full, 2, (dt_placement[]){R(), R()}, &x));
  st = dt_dist_redistribute(x, 2, (dt_placement[]){SS(0, 4), S(0)}, &out);
  RANK_CHECK(st == DT_ERR_UNSUPPORTED && strstr(dt_last_error(), "dt_dist_redistribute"),
             "redistribute: %s", dt_last_error());
  /* Two StridedShards of one dim. */
  st = dt_dist_redistribute(x, 2, (dt_placement[]){SS(0, 2), SS(0, 3)}, &out);
  RANK_CHECK(st == DT_ERR_UNSUPPORTED && strstr(dt_last_error(), "StridedShard"), "SS, SS: %s",
             dt_last_error());
  RELEASE_ALL(full, x);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(strided_outer, errors) { SPAWN_OK(6, errors_rank, NULL); }

/* ---- Views: flatten of [S(1), S(0)], pointwise keeping it ----------------------------------- */

typedef struct view_case {
  int mesh_shape[2];
  int ndim;
  int64_t shape[3];
  dt_placement pl[2];
  dt_placement flat[2]; /* the flattened tensor's placements */
} view_case;

static dt_status view_rank(dt_comm *world, void *arg) {
  const view_case *c = arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 2, c->mesh_shape, NULL, &mesh));
  int coord[2] = {dt_mesh_coordinate(mesh, 0), dt_mesh_coordinate(mesh, 1)};
  int64_t numel = 1;
  for (int d = 0; d < c->ndim; d++) numel *= c->shape[d];
  int64_t flat_shape[2] = {numel, 1};
  dt_tensor *full = iota(c->ndim, c->shape), *flat_full = iota(1, &numel);
  dt_tensor *x = NULL, *y = NULL, *f = NULL, *z = NULL, *e = NULL, *twice = NULL;
  RANK_OK(dt_dist_distribute_tensor(mesh, full, 2, c->pl, &x));
  dt_comm_ledger *l = NULL;
  LEDGER_BEGIN(l);
  RANK_OK(dt_view(x, 1, &numel, &y));
  RANK_OK(dt_flatten(x, 0, -1, &f));
  /* Pointwise keeps it. */
  RANK_OK(dt_add(y, f, &z));
  RANK_OK(dt_exp(y, &e));
  LEDGER_END_ZERO(l, "flatten, add, exp");
  for (int m = 0; m < 2; m++) {
    RANK_OK(placement_is("view", y, m, c->flat[m]));
    RANK_OK(placement_is("flatten", f, m, c->flat[m]));
    RANK_OK(placement_is("add", z, m, c->flat[m]));
    RANK_OK(placement_is("exp", e, m, c->flat[m]));
  }
  /* The view back gives the input's placements, moving nothing (the outer form; a plain
   * nested [S(0), S(0)] split back into two dims still gathers). */
  dt_tensor *back = NULL;
  bool outer = dt__strided_outer(2, c->flat);
  if (outer) LEDGER_BEGIN(l);
  RANK_OK(dt_view(z, c->ndim, c->shape, &back));
  if (outer) LEDGER_END_ZERO(l, "view back");
  for (int m = 0; m < 2 && outer; m++) RANK_OK(placement_is("view back", back, m, c->pl[m]));
  dt_tensor *twice_full = NULL;
  RANK_OK(dt_add(full, full, &twice_full));
  RANK_OK(full_equals_tol("view back", back, twice_full, 0));
  RELEASE_ALL(back, twice_full);
  /* Rules that read shards as boxes take the tensor out of the outer form first: exact. */
  dt_tensor *sum = NULL, *sum_full = NULL, *sm = NULL, *sm_full = NULL;
  RANK_OK(dt_sum(y, &sum));
  RANK_OK(dt_sum(flat_full, &sum_full));
  RANK_OK(full_equals_tol("sum", sum, sum_full, 1e-6));
  RANK_OK(dt_softmax(y, 0, &sm));
  RANK_OK(dt_softmax(flat_full, 0, &sm_full));
  RANK_OK(full_equals_tol("softmax", sm, sm_full, 1e-5));
  RELEASE_ALL(sum, sum_full, sm, sm_full);
  RANK_OK(
      strided_shard_is_naive("view", y, flat_full, 1, flat_shape, c->mesh_shape, c->flat, coord));
  RANK_OK(full_equals_tol("view", y, flat_full, 0));
  RANK_OK(full_equals_tol("flatten", f, flat_full, 0));
  RANK_OK(dt_add(flat_full, flat_full, &twice));
  RANK_OK(full_equals_tol("add", z, twice, 0));
  dt_tensor *exp_full = NULL;
  RANK_OK(dt_exp(flat_full, &exp_full));
  RANK_OK(full_equals_tol("exp", e, exp_full, 1e-6));
  RELEASE_ALL(full, flat_full, x, y, f, z, e, twice, exp_full);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(strided_outer, flatten_moves_nothing) {
  view_case cases[] = {
      /* PyTorch: [3, 5] and [3, 8] [S(1), S(0)] on 2x3 flatten to (_StridedShard(0, 3), Shard(0))
       */
      {{2, 3}, 2, {3, 5}, {S(1), S(0)}, {SS(0, 3), S(0)}},
      {{2, 3}, 2, {3, 8}, {S(1), S(0)}, {SS(0, 3), S(0)}},
      {{2, 2}, 2, {4, 4}, {S(1), S(0)}, {SS(0, 4), S(0)}},
      /* 3-D: f = 2 * 3 blocks of the last dim */
      {{2, 2}, 3, {2, 3, 4}, {S(2), S(0)}, {SS(0, 6), S(0)}},
      /* [2, 6] [S(0), S(1)] on 2x3: one block of what mesh dim 0 leaves, plain nested shards
       * (PyTorch: (Shard(0), _StridedShard(0, 1))) */
      {{2, 3}, 2, {2, 6}, {S(0), S(1)}, {S(0), S(0)}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    SPAWN_OK(cases[i].mesh_shape[0] * cases[i].mesh_shape[1], view_rank, &cases[i]);
}

/* ---- visualize_sharding ------------------------------------------------------------------- */

static dt_status visualize_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 2, (int[]){2, 2}, NULL, &mesh));
  int64_t n = 16;
  dt_tensor *full = iota(1, &n), *x = NULL, *y = NULL;
  RANK_OK(dt_dist_distribute_tensor(mesh, full, 2, (dt_placement[]){SS(0, 4), S(0)}, &x));
  RANK_OK(dt_dist_distribute_tensor(mesh, full, 2, (dt_placement[]){S(0), SS(0, 2)}, &y));
  char text[512];
  RANK_OK(dt_dist_visualize_sharding(x, text, sizeof text));
  /* Rank (i, j) = 2i + j holds chunk i of blocks 2j and 2j + 1 (blocks of 4). */
  const char *want = "global shape [16], placements (SS(0,4), S(0))\n"
                     "0:2 -> ranks 0\n2:4 -> ranks 2\n4:6 -> ranks 0\n6:8 -> ranks 2\n"
                     "8:10 -> ranks 1\n10:12 -> ranks 3\n12:14 -> ranks 1\n14:16 -> ranks 3\n";
  RANK_CHECK(strcmp(text, want) == 0, "outer: got\n%.400s", text);
  /* The nested form: rank (i, j) holds chunk j of both blocks of 4 in half i. */
  RANK_OK(dt_dist_visualize_sharding(y, text, sizeof text));
  want = "global shape [16], placements (S(0), SS(0,2))\n"
         "0:2 -> ranks 0\n2:4 -> ranks 1\n4:6 -> ranks 0\n6:8 -> ranks 1\n"
         "8:10 -> ranks 2\n10:12 -> ranks 3\n12:14 -> ranks 2\n14:16 -> ranks 3\n";
  RANK_CHECK(strcmp(text, want) == 0, "nested: got\n%.400s", text);
  RELEASE_ALL(full, x, y);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(strided_outer, visualize) { SPAWN_OK(4, visualize_rank, NULL); }
