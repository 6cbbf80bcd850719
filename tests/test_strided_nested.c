/* A StridedShard nested under a Shard of the same tensor dim (issue 16): S(d) on mesh dim m and
 * SS(d, f) on a later one, f blocks of what m left each chunked over the later mesh dim (the
 * layout PyTorch's (Shard(0), _StridedShard(0, split_factor=f)) has for a flattened
 * [S(0), S(1)]). Shards are checked element for element against a naive slice of the whole
 * tensor on 2x2 and 2x3 meshes; moves against the comm ledger and explain. */
#include <criterion/criterion.h>

/* Private header: nested StridedShard plans are single steps: the plan is internal. */
#include "distributed/redistribute_impl.h"
#include "strided_helpers.h"

static dt_status nested_rank(dt_comm *world, void *arg) {
  const strided_case *c = arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 2, c->mesh_shape, NULL, &mesh));
  int coord[2] = {dt_mesh_coordinate(mesh, 0), dt_mesh_coordinate(mesh, 1)};
  dt_tensor *full = NULL, *x = NULL, *local = NULL, *back = NULL;
  /* from_local takes the global shape: inner chunks may be uneven. */
  RANK_OK(strided_round_trip(mesh, c, coord, &full, &x, &local, &back));
  RANK_CHECK(dt_dist_global_shape(back)[0] == c->shape[0], "from_local: dim 0 is %lld",
             (long long)dt_dist_global_shape(back)[0]);
  /* Out: SS -> R on the inner mesh dim (all_gather), then the outer; to [S(d), S(d)] by
   * one all_to_all; in: R -> SS, a local slice. */
  int d = c->pl[1].dim;
  int64_t gathered = c->shape[0] * (c->ndim == 2 ? c->shape[1] : 1) * 4;
  int64_t bytes = 0;
  RANK_OK(strided_move_checked("to R", x, full, c, (dt_placement[]){dt_replicate(), dt_replicate()},
                               coord, &bytes));
  /* The inner all_gather of what the outer shard holds, then the outer one of the whole. */
  int64_t expect = gathered / c->mesh_shape[0] + gathered;
  RANK_CHECK(bytes == expect, "to R: %lld bytes, expected %lld", (long long)bytes,
             (long long)expect);
  RANK_OK(strided_move_checked("to S,S", x, full, c, (dt_placement[]){c->pl[0], dt_shard(d)}, coord,
                               &bytes));
  dt_tensor *outer = NULL;
  RANK_OK(dt_dist_redistribute(x, 2, (dt_placement[]){c->pl[0], dt_replicate()}, &outer));
  RANK_OK(strided_move_checked("R -> SS", outer, full, c, c->pl, coord, &bytes));
  RANK_CHECK(bytes == 0, "R -> SS: %lld bytes", (long long)bytes);
  RELEASE_ALL(full, x, local, back, outer);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

#define SS dt_strided_shard
#define S dt_shard

Test(strided_nested, spec_and_redistribution) {
  strided_case cases[] = {
      /* [4, 4] flattened on 2x2: rank (0, 0) holds {0, 1, 4, 5} */
      {{2, 2}, 1, {16, 1}, {S(0), SS(0, 2)}},
      /* [4, 6] flattened on 2x3 */
      {{2, 3}, 1, {24, 1}, {S(0), SS(0, 2)}},
      /* [4, 2, 4] with dims 0 and 2 sharded, flattened: f = 2 * 2 */
      {{2, 2}, 1, {32, 1}, {S(0), SS(0, 4)}},
      /* uneven inner chunks: blocks of 5 over 3 ranks (2, 2, 1) */
      {{2, 3}, 2, {20, 3}, {S(0), SS(0, 2)}},
      /* the other dim of a 2-D tensor */
      {{2, 2}, 2, {3, 12}, {S(1), SS(1, 3)}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    SPAWN_OK(cases[i].mesh_shape[0] * cases[i].mesh_shape[1], nested_rank, &cases[i]);
}

static dt_status errors_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 2, (int[]){2, 2}, NULL, &mesh));
  int64_t n = 16, twelve = 12, nine = 9;
  dt_tensor *full = iota(1, &n), *full12 = iota(1, &twelve), *full9 = iota(1, &nine), *out = NULL;
  /* A StridedShard first, then a shard of its dim not taking whole chunks (3 over 2 ranks:
   * tests/test_strided_outer.c has those that do); two StridedShards of one dim. */
  dt_status st = dt_dist_distribute_tensor(mesh, full12, 2, (dt_placement[]){SS(0, 3), S(0)}, &out);
  RANK_CHECK(st == DT_ERR_UNSUPPORTED && strstr(dt_last_error(), "dt_dist_distribute_tensor") &&
                 strstr(dt_last_error(), "whole chunks"),
             "SS, S: %s", dt_last_error());
  st = dt_dist_distribute_tensor(mesh, full, 2, (dt_placement[]){SS(0, 2), SS(0, 2)}, &out);
  RANK_CHECK(st == DT_ERR_UNSUPPORTED, "SS, SS: %s", dt_last_error());
  /* 12 / 2 = 6 elements per rank are not whole blocks of 4. */
  st = dt_dist_distribute_tensor(mesh, full12, 2, (dt_placement[]){S(0), SS(0, 4)}, &out);
  RANK_CHECK(st == DT_ERR_INVALID && strstr(dt_last_error(), "whole number"), "S, SS(0,4): %s",
             dt_last_error());
  /* An uneven outer shard: 9 over 2 ranks. */
  st = dt_dist_distribute_tensor(mesh, full9, 2, (dt_placement[]){S(0), SS(0, 3)}, &out);
  RANK_CHECK(st == DT_ERR_UNSUPPORTED && strstr(dt_last_error(), "uneven"), "9, S, SS(0,3): %s",
             dt_last_error());
  dt_tensor *x = NULL;
  RANK_OK(dt_dist_distribute_tensor(mesh, full9, 2, (dt_placement[]){S(0), dt_replicate()}, &x));
  st = dt_dist_redistribute(x, 2, (dt_placement[]){S(0), SS(0, 3)}, &out);
  RANK_CHECK(st == DT_ERR_UNSUPPORTED && strstr(dt_last_error(), "dt_dist_redistribute"),
             "redistribute: %s", dt_last_error());
  RELEASE_ALL(full, full12, full9, x);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(strided_nested, errors) { SPAWN_OK(4, errors_rank, NULL); }

/* ---- Views: flatten of [S(0), S(1)] and back ------------------------------------------------ */

typedef struct view_case {
  int mesh_shape[2];
  int ndim;
  int64_t shape[3];
  dt_placement pl[2];
  dt_placement flat[2]; /* the flattened tensor's placements; R on mesh dim 0: it gathers */
  int64_t bytes;        /* what the flatten moves on every rank */
} view_case;

static dt_status view_rank(dt_comm *world, void *arg) {
  const view_case *c = arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 2, c->mesh_shape, NULL, &mesh));
  int coord[2] = {dt_mesh_coordinate(mesh, 0), dt_mesh_coordinate(mesh, 1)};
  int64_t numel = 1;
  for (int d = 0; d < c->ndim; d++) numel *= c->shape[d];
  dt_tensor *full = iota(c->ndim, c->shape), *flat_full = iota(1, &numel);
  dt_tensor *x = NULL, *y = NULL, *z = NULL, *w = NULL;
  RANK_OK(dt_dist_distribute_tensor(mesh, full, 2, c->pl, &x));
  dt_comm_ledger *l = NULL;
  ledger_counts n;
  LEDGER_BEGIN(l);
  RANK_OK(dt_view(x, 1, &numel, &y));
  LEDGER_END(l, n);
  RANK_CHECK(n.bytes == c->bytes, "flatten: %lld bytes, expected %lld", (long long)n.bytes,
             (long long)c->bytes);
  RANK_OK(placement_is("flatten", y, 0, c->flat[0]));
  RANK_OK(placement_is("flatten", y, 1, c->flat[1]));
  strided_case flat = {
      {c->mesh_shape[0], c->mesh_shape[1]}, 1, {numel, 1}, {c->flat[0], c->flat[1]}};
  RANK_OK(strided_shard_is_naive("flatten", y, flat_full, flat.ndim, flat.shape, flat.mesh_shape,
                                 c->flat, coord));
  RANK_OK(full_equals_tol("flatten", y, flat_full, 0));
  if (c->bytes == 0) {
    /* Pointwise keeps it; the view back gives the input's placements, moving nothing. */
    LEDGER_BEGIN(l);
    RANK_OK(dt_add(y, y, &z));
    RANK_OK(dt_view(z, c->ndim, c->shape, &w));
    LEDGER_END_ZERO(l, "add, view back");
    RANK_OK(placement_is("add", z, 1, c->flat[1]));
    RANK_OK(placement_is("view back", w, 0, c->pl[0]));
    RANK_OK(placement_is("view back", w, 1, c->pl[1]));
    dt_tensor *twice = NULL;
    RANK_OK(dt_add(full, full, &twice));
    RANK_OK(full_equals_tol("view back", w, twice, 0));
    dt_tensor_release(twice);
  }
  RELEASE_ALL(full, flat_full, x, y, z, w);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(strided_nested, flatten_and_back) {
  view_case cases[] = {
      /* PyTorch 2.x: (Shard(0), _StridedShard(0, split_factor=2)), rank 0 holds {0, 1, 4, 5} */
      {{2, 2}, 2, {4, 4}, {S(0), S(1)}, {S(0), SS(0, 2)}, 0},
      {{2, 3}, 2, {4, 6}, {S(0), S(1)}, {S(0), SS(0, 2)}, 0},
      /* uneven inner chunks (5 columns over 3: 2, 2, 1) */
      {{2, 3}, 2, {4, 5}, {S(0), S(1)}, {S(0), SS(0, 2)}, 0},
      /* 3-D: split factor 4 = 2 local rows x 2 (PyTorch's too), and a middle dim (2) */
      {{2, 2}, 3, {4, 2, 4}, {S(0), S(2)}, {S(0), SS(0, 4)}, 0},
      {{2, 2}, 3, {4, 2, 4}, {S(0), S(1)}, {S(0), SS(0, 2)}, 0},
      /* an uneven outer shard (3 rows over 2) still gathers mesh dim 0: [3, 2] floats */
      {{2, 2}, 2, {3, 4}, {S(0), S(1)}, {dt_replicate(), SS(0, 3)}, 24},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    SPAWN_OK(cases[i].mesh_shape[0] * cases[i].mesh_shape[1], view_rank, &cases[i]);
}
