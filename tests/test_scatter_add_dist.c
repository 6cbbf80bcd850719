/* scatter_add on distributed tensors with unusual input: every placement of self, index and
 * src with both signs of dim, uneven row windows on 3 ranks, a bad index on a sharded self
 * (an error on every rank), the local edge cases, and Partial arguments. Values are compared
 * with the local reference. */
#include <criterion/criterion.h>
#include <limits.h>

#include "comm_helpers.h"
#include "reference.h"
#include "value_helpers.h"

/* ---- scatter_add distributed: every placement of self/index/src and both signs of dim ---- */

typedef struct scatter_case {
  int world;
  int64_t rows, cols;
  int64_t dim; /* as passed, maybe negative */
  dt_placement self_p, index_p, src_p;
} scatter_case;

static dt_status scatter_rank(dt_comm *world, void *arg) {
  const scatter_case *c = arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){c->world}, NULL, &mesh));
  int64_t shape[2] = {c->rows, c->cols};
  int d = (int)(c->dim < 0 ? c->dim + 2 : c->dim);
  /* index [rows, cols] with values in [0, shape[d]) */
  double iv[64];
  for (int64_t i = 0; i < c->rows * c->cols; i++) iv[i] = (double)((i * 5 + 3) % shape[d]);
  dt_tensor *self = iota_t(2, shape, DT_F32), *src = iota_t(2, shape, DT_F32);
  dt_tensor *index = ref_tensor(2, shape, DT_I64, iv);
  dt_tensor *want = NULL;
  RANK_OK(dt_scatter_add(self, c->dim, index, src, &want));
  dt_tensor *ds = NULL, *di = NULL, *dx = NULL, *got = NULL;
  RANK_OK(dt_dist_distribute_tensor(mesh, self, 1, &c->self_p, &ds));
  RANK_OK(dt_dist_distribute_tensor(mesh, index, 1, &c->index_p, &di));
  RANK_OK(dt_dist_distribute_tensor(mesh, src, 1, &c->src_p, &dx));
  RANK_OK(dt_scatter_add(ds, c->dim, di, dx, &got));
  char what[64];
  snprintf(what, sizeof what, "scatter_add dim %lld", (long long)c->dim);
  RANK_OK(full_equals(what, got, want));
  dt_tensor_release(got);
  dt_tensor_release(dx);
  dt_tensor_release(di);
  dt_tensor_release(ds);
  dt_tensor_release(want);
  dt_tensor_release(index);
  dt_tensor_release(src);
  dt_tensor_release(self);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(scatter_add_dist, scatter_add_negative_dim_all_sharded_on_it) {
  /* dim -1 is dim 1: sharding all three along it must not be taken as "another dim". */
  scatter_case c = {2, 3, 4, -1, dt_shard(1), dt_shard(1), dt_shard(1)};
  SPAWN_OK(2, scatter_rank, &c);
  scatter_case d = {2, 4, 3, -2, dt_shard(0), dt_shard(0), dt_shard(0)};
  SPAWN_OK(2, scatter_rank, &d);
}

Test(scatter_add_dist, scatter_add_row_window_uneven_three_ranks) {
  /* 2 rows on 3 ranks: one rank holds no row. */
  scatter_case c = {3, 2, 3, 0, dt_shard(0), dt_replicate(), dt_replicate()};
  SPAWN_OK(3, scatter_rank, &c);
  scatter_case d = {3, 2, 3, -2, dt_shard(0), dt_replicate(), dt_replicate()};
  SPAWN_OK(3, scatter_rank, &d);
  scatter_case e = {3, 5, 2, 0, dt_shard(0), dt_shard(0), dt_shard(0)};
  SPAWN_OK(3, scatter_rank, &e);
  scatter_case f = {3, 5, 2, 1, dt_shard(1), dt_replicate(), dt_shard(0)};
  SPAWN_OK(3, scatter_rank, &f);
}

/* A bad index on a sharded self is DT_ERR_INDEX on every rank (a rank whose window does not
 * hold it must not pass it by). */
static dt_status scatter_bad_index_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){3}, NULL, &mesh));
  int64_t shape[2] = {4, 2};
  dt_tensor *self = iota_t(2, shape, DT_F32), *src = iota_t(2, shape, DT_F32);
  double bad[8] = {0, 1, 4, 0, 1, 1, -1, 0};
  dt_tensor *index = ref_tensor(2, shape, DT_I64, bad);
  dt_tensor *ds = NULL, *out = NULL;
  RANK_OK(dt_dist_distribute_tensor(mesh, self, 1, (dt_placement[]){dt_shard(0)}, &ds));
  dt_tensor *di = NULL, *dx = NULL;
  RANK_OK(dt_dist_distribute_tensor(mesh, index, 1, (dt_placement[]){dt_replicate()}, &di));
  RANK_OK(dt_dist_distribute_tensor(mesh, src, 1, (dt_placement[]){dt_replicate()}, &dx));
  dt_status st = dt_scatter_add(ds, 0, di, dx, &out);
  RANK_CHECK(st == DT_ERR_INDEX && strstr(dt_last_error(), "scatter_add"), "got %s: %s",
             dt_status_string(st), dt_last_error());
  RANK_CHECK(out == NULL, "out set on error");
  dt_tensor_release(dx);
  dt_tensor_release(di);
  dt_tensor_release(ds);
  dt_tensor_release(index);
  dt_tensor_release(src);
  dt_tensor_release(self);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(scatter_add_dist, scatter_add_bad_index_on_every_rank) {
  SPAWN_OK(3, scatter_bad_index_rank, NULL);
}

Test(scatter_add_dist, scatter_add_local_edges) {
  int64_t shape[2] = {2, 3}, zero[2] = {0, 3};
  dt_tensor *self = iota_t(2, shape, DT_F32), *index = NULL, *src = iota_t(2, shape, DT_F32);
  dt_tensor *out = NULL;
  OK(dt_zeros(2, zero, DT_I64, &index));
  /* 0-size index: out equals self */
  OK(dt_scatter_add(self, 0, index, src, &out));
  cr_assert_eq(dt_tensor_numel(out), 6);
  dt_tensor_release(out);
  out = NULL;
  cr_assert_eq(dt_scatter_add(self, 2, index, src, &out), DT_ERR_INVALID, "%s", dt_last_error());
  cr_assert(strstr(dt_last_error(), "scatter_add"), "%s", dt_last_error());
  cr_assert_eq(dt_scatter_add(self, -3, index, src, &out), DT_ERR_INVALID, "%s", dt_last_error());
  cr_assert_eq(dt_scatter_add(NULL, 0, index, src, &out), DT_ERR_INVALID);
  cr_assert_eq(dt_scatter_add(self, 0, index, src, NULL), DT_ERR_INVALID);
  /* self as src (aliasing): a copy of self with self added at the index rows */
  double iv[6] = {1, 0, 1, 1, 1, 0};
  dt_tensor *idx = ref_tensor(2, shape, DT_I64, iv);
  OK(dt_scatter_add(self, 0, idx, self, &out));
  double *v = ref_values(out);
  /* self = 1..6: rows [1 2 3],[4 5 6]. */
  double want[6] = {1, 2 + 2, 3 + 6, 4 + 1 + 4, 5 + 5, 6 + 3};
  for (int i = 0; i < 6; i++) cr_assert_eq(v[i], want[i], "element %d: %g vs %g", i, v[i], want[i]);
  free(v);
  dt_tensor_release(out);
  out = NULL;
  dt_tensor_release(idx);
  dt_tensor_release(index);
  dt_tensor_release(src);
  dt_tensor_release(self);
}

/* ---- scatter_add with Partial arguments ---------------------------------------------------- */

/* A Partial(op) tensor whose value is full: rank 0 holds full, the others the op's identity
 * (0 for sum; full itself for max). */
static dt_status partial_of(dt_mesh *mesh, dt_tensor *full, dt_reduce_op op, int rank,
                            dt_tensor **out) {
  dt_tensor *local = NULL;
  if (rank == 0 || op == DT_REDUCE_MAX) {
    RANK_OK(dt_clone(full, &local));
  } else {
    RANK_OK(dt_zeros_like(full, &local));
  }
  dt_dist_from_local_options o = {.global_shape = dt_tensor_shape(full),
                                  .global_ndim = dt_tensor_ndim(full)};
  dt_status st = dt_dist_from_local(mesh, local, 1, (dt_placement[]){dt_partial(op)}, &o, out);
  dt_tensor_release(local);
  return st;
}

static dt_status scatter_partial_rank(dt_comm *world, void *arg) {
  (void)arg;
  int rank = dt_comm_rank(world);
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){3}, NULL, &mesh));
  int64_t shape[2] = {3, 2};
  dt_tensor *self = iota_t(2, shape, DT_F32), *src = iota_t(2, shape, DT_F32), *want = NULL;
  double iv[6] = {2, 0, 0, 1, 2, 2};
  dt_tensor *index = ref_tensor(2, shape, DT_I64, iv);
  RANK_OK(dt_scatter_add(self, 0, index, src, &want));
  dt_tensor *di = NULL;
  RANK_OK(dt_dist_distribute_tensor(mesh, index, 1, (dt_placement[]){dt_replicate()}, &di));
  dt_reduce_op ops[2] = {DT_REDUCE_SUM, DT_REDUCE_MAX};
  for (int o = 0; o < 2; o++) {
    /* 0: self Partial, src Replicate; 1: self Replicate, src Partial; 2: both Partial */
    for (int k = 0; k < 3; k++) {
      dt_tensor *ds = NULL, *dx = NULL, *got = NULL;
      if (k == 1) {
        RANK_OK(dt_dist_distribute_tensor(mesh, self, 1, (dt_placement[]){dt_replicate()}, &ds));
      } else {
        RANK_OK(partial_of(mesh, self, ops[o], rank, &ds));
      }
      if (k == 0) {
        RANK_OK(dt_dist_distribute_tensor(mesh, src, 1, (dt_placement[]){dt_replicate()}, &dx));
      } else {
        RANK_OK(partial_of(mesh, src, ops[o], rank, &dx));
      }
      RANK_OK(dt_scatter_add(ds, 0, di, dx, &got));
      char what[64];
      snprintf(what, sizeof what, "scatter_add partial op %d case %d", o, k);
      RANK_OK(full_equals(what, got, want));
      dt_tensor_release(got);
      dt_tensor_release(dx);
      dt_tensor_release(ds);
    }
  }
  dt_tensor_release(di);
  dt_tensor_release(want);
  dt_tensor_release(index);
  dt_tensor_release(src);
  dt_tensor_release(self);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(scatter_add_dist, scatter_add_partial_arguments) { SPAWN_OK(3, scatter_partial_rank, NULL); }
