/*
 * What a rank function hands out may be released after dt_comm_spawn returned, in any order:
 * a local tensor gathered from a parameter that requires grad (its autograd node holds the
 * distributed input, and so the mesh and its groups), a distributed tensor itself, and a mesh
 * whose dt_mesh_destroy comes only after the ranks ended. None of it is a use after free
 * (the sanitizer build and valgrind see the frees), and the values stay readable.
 */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "comm_helpers.h"
#include "dtensor/dtensor.h"

#define WORLD 2

typedef struct kept {
  dt_tensor *full[WORLD];  /* local, its graph reaching the distributed parameter */
  dt_tensor *param[WORLD]; /* distributed, requires grad */
  dt_mesh *mesh[WORLD];    /* destroyed after the spawn, or NULL when the rank did */
  double first[WORLD];     /* full[r]'s element 0 as the rank read it */
  bool destroy_mesh_in_rank;
  bool keep_param;
} kept;

static dt_status rank_fn(dt_comm *world, void *arg) {
  kept *k = arg;
  int r = dt_comm_rank(world);
  dt_mesh *mesh = NULL;
  dt_tensor *whole = NULL, *param = NULL, *full = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){WORLD}, (const char *[]){"dp"}, &mesh));
  RANK_OK(dt_randn(2, (int64_t[]){5, 3}, DT_F32, 7, &whole));
  RANK_OK(dt_dist_distribute_tensor(mesh, whole, 1, (dt_placement[]){dt_shard(0)}, &param));
  RANK_OK(dt_tensor_set_requires_grad(param, true));
  RANK_OK(dt_dist_full_tensor(param, &full));
  RANK_CHECK(!dt_tensor_is_distributed(full), "full_tensor gave a distributed tensor");
  double v = 0;
  RANK_OK(dt_tensor_get(full, (int64_t[]){0, 0}, &v));
  k->first[r] = v;
  k->full[r] = full;
  if (k->keep_param) {
    k->param[r] = param;
  } else {
    dt_tensor_release(param);
  }
  dt_tensor_release(whole);
  if (k->destroy_mesh_in_rank) {
    dt_mesh_destroy(mesh);
  } else {
    k->mesh[r] = mesh;
  }
  return DT_OK;
}

static void run(bool destroy_mesh_in_rank, bool keep_param, bool full_first) {
  kept k = {.destroy_mesh_in_rank = destroy_mesh_in_rank, .keep_param = keep_param};
  SPAWN_OK(WORLD, rank_fn, &k);
  for (int r = 0; r < WORLD; r++) {
    double v = 0;
    cr_assert_eq(dt_tensor_get(k.full[r], (int64_t[]){0, 0}, &v), DT_OK, "%s", dt_last_error());
    cr_expect_eq(v, k.first[r], "rank %d: element 0 reads %g after the spawn, %g inside", r, v,
                 k.first[r]);
  }
  /* Both orders of the three releases. */
  for (int r = 0; r < WORLD; r++) {
    if (full_first) dt_tensor_release(k.full[r]);
    dt_tensor_release(k.param[r]);
    dt_mesh_destroy(k.mesh[r]);
    if (!full_first) dt_tensor_release(k.full[r]);
  }
}

Test(lifetime_after_spawn, gathered_grad_tensor_released_after_the_ranks_ended) {
  run(true, false, true);
}
Test(lifetime_after_spawn, distributed_parameter_released_after_the_ranks_ended) {
  run(true, true, true);
  run(true, true, false);
}
Test(lifetime_after_spawn, mesh_destroyed_after_the_ranks_ended) {
  run(false, false, true);
  run(false, true, false);
  run(false, true, true);
}

/* A one-rank world of dt_comm_init destroyed before the mesh made on it and its tensors. */
Test(lifetime_after_spawn, world_destroyed_before_its_mesh) {
  dt_comm *world = NULL;
  cr_assert_eq(dt_comm_init(&(dt_comm_options){.backend = "threads", .world_size = 1}, &world),
               DT_OK, "%s", dt_last_error());
  dt_mesh *mesh = NULL;
  dt_tensor *whole = NULL, *param = NULL, *full = NULL;
  cr_assert_eq(dt_mesh_create(world, 1, (int[]){1}, NULL, &mesh), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_randn(1, (int64_t[]){4}, DT_F32, 3, &whole), DT_OK);
  cr_assert_eq(dt_dist_distribute_tensor(mesh, whole, 1, (dt_placement[]){dt_shard(0)}, &param),
               DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_tensor_set_requires_grad(param, true), DT_OK);
  cr_assert_eq(dt_dist_full_tensor(param, &full), DT_OK, "%s", dt_last_error());
  dt_comm_destroy(world);
  dt_tensor_release(param);
  dt_mesh_destroy(mesh);
  dt_tensor_release(full);
  dt_tensor_release(whole);
}
