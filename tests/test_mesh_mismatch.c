/* A mesh of another world and mismatched placement counts: errors on every rank, no hang. */
#include <criterion/criterion.h>
#include <limits.h>

#include "comm_helpers.h"
#include "reference.h"
#include "value_helpers.h"

/* A mesh of another world and mismatched placement counts: errors on every rank, no hang. */
static dt_status wrong_mesh_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL, *other = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){2}, NULL, &mesh));
  RANK_OK(dt_mesh_create(world, 2, (int[]){1, 2}, NULL, &other));
  int64_t shape[2] = {4, 2};
  dt_tensor *full = iota_t(2, shape, DT_F32), *a = NULL, *b = NULL, *out = NULL;
  RANK_OK(dt_dist_distribute_tensor(mesh, full, 1, (dt_placement[]){dt_strided_shard(0, 2)}, &a));
  RANK_OK(
      dt_dist_distribute_tensor(other, full, 2, (dt_placement[]){dt_replicate(), dt_shard(0)}, &b));
  dt_status st = dt_add(a, b, &out);
  RANK_CHECK(st != DT_OK && strstr(dt_last_error(), "mesh"), "two meshes: %s: %s",
             dt_status_string(st), dt_last_error());
  st = dt_dist_redistribute(a, 2, (dt_placement[]){dt_replicate(), dt_replicate()}, &out);
  RANK_CHECK(st == DT_ERR_INVALID && strstr(dt_last_error(), "dt_dist_redistribute"), "%s: %s",
             dt_status_string(st), dt_last_error());
  st = dt_dist_distribute_tensor(mesh, full, 1, (dt_placement[]){dt_strided_shard(0, 3)}, &out);
  RANK_CHECK(st == DT_ERR_INVALID, "factor 3 of 4 rows: %s", dt_status_string(st));
  /* int64 overflow of the element count: refused by name, nothing allocated */
  st = dt_dist_constant(mesh, 2, (int64_t[]){INT64_MAX, 2}, 1.0, DT_F32, 1,
                        (dt_placement[]){dt_strided_shard(0, 2)}, &out);
  RANK_CHECK(st == DT_ERR_INVALID && strstr(dt_last_error(), "dt_dist_constant") && out == NULL,
             "overflow: %s: %s", dt_status_string(st), dt_last_error());
  st = dt_dist_zeros(mesh, 1, (int64_t[]){-1}, DT_F32, 1, (dt_placement[]){dt_shard(0)}, &out);
  RANK_CHECK(st == DT_ERR_INVALID && strstr(dt_last_error(), "dt_dist_zeros"), "%s: %s",
             dt_status_string(st), dt_last_error());
  dt_tensor_release(b);
  dt_tensor_release(a);
  dt_tensor_release(full);
  dt_mesh_destroy(other);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(mesh_mismatch, mesh_mismatches) { SPAWN_OK(2, wrong_mesh_rank, NULL); }
