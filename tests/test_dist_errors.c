/* Regression tests of the dist layer (issue 10, items 7, 11, 12): a mesh destroyed before its
 * tensors, Partial(avg) on integer dtypes, to_local / full_tensor on local tensors, the
 * from_local message for uneven shards, meshes and timeouts named readably in messages. */
#include <criterion/criterion.h>
#include <time.h>

#include "comm_helpers.h"

static bool mentions(const char *text, const char *part) { return strstr(text, part) != NULL; }

/* A [rows, cols] f32 tensor whose element (i, j) is 10 * i + j. */
static dt_tensor *iota_2d(int64_t rows, int64_t cols) {
  dt_tensor *t = NULL;
  if (dt_empty(2, (int64_t[]){rows, cols}, DT_F32, &t) != DT_OK) return NULL;
  float *p = dt_tensor_data(t);
  for (int64_t i = 0; i < rows; i++) {
    for (int64_t j = 0; j < cols; j++) p[i * cols + j] = (float)(10 * i + j);
  }
  return t;
}

/* ---- Item 7: the mesh lives as long as its tensors ---------------------------------------- */

static dt_status destroy_mesh_first_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 2, (int[]){2, 2}, (const char *[]){"dp", "tp"}, &mesh));
  dt_tensor *full = iota_2d(6, 4);
  RANK_CHECK(full != NULL, "iota");
  dt_tensor *x = NULL, *y = NULL, *sum = NULL, *moved = NULL, *gathered = NULL;
  RANK_OK(dt_dist_distribute_tensor(mesh, full, 2, (dt_placement[]){dt_shard(0), dt_shard(1)}, &x));
  RANK_OK(
      dt_dist_distribute_tensor(mesh, full, 2, (dt_placement[]){dt_replicate(), dt_shard(0)}, &y));
  /* Warm this thread's sharding cache with plans on the mesh, then drop the user's mesh. */
  RANK_OK(dt_add(x, y, &sum));
  dt_tensor_release(sum);
  sum = NULL;
  dt_mesh_destroy(mesh);
  mesh = NULL;
  /* Everything still works: ops (cached plans were dropped, new ones are not cached),
   * redistribution over the mesh's groups, full_tensor. */
  RANK_OK(dt_add(x, y, &sum));
  RANK_OK(dt_dist_redistribute(sum, 2, (dt_placement[]){dt_shard(1), dt_replicate()}, &moved));
  RANK_OK(dt_dist_full_tensor(moved, &gathered));
  RANK_CHECK(dt_tensor_numel(gathered) == 24, "numel %lld", (long long)dt_tensor_numel(gathered));
  const float *g = dt_tensor_data(gathered);
  for (int64_t i = 0; i < 24; i++) {
    float expect = 2.0f * (float)(10 * (i / 4) + i % 4);
    RANK_CHECK(g[i] == expect, "element %lld is %g, expected %g", (long long)i, (double)g[i],
               (double)expect);
  }
  /* The mesh is reachable from the tensors and still answers. */
  RANK_CHECK(dt_mesh_size(dt_dist_mesh(x), 1) == 2, "mesh size");
  dt_tensor_release(gathered);
  dt_tensor_release(moved);
  dt_tensor_release(sum);
  dt_tensor_release(y);
  dt_tensor_release(full);
  dt_tensor_release(x); /* the last reference: the mesh and its groups go here */
  return DT_OK;
}

Test(dist_errors, mesh_destroyed_before_its_tensors_threads) {
  SPAWN_OK(4, destroy_mesh_first_rank, NULL);
  /* Run twice: a stale cache entry or a freed group would show on the second run. */
  SPAWN_OK(4, destroy_mesh_first_rank, NULL);
}

Test(dist_errors, mesh_destroyed_before_its_tensors_fake) {
  dt_comm *world = NULL;
  cr_assert_eq(
      dt_comm_init(&(dt_comm_options){.backend = "fake", .rank = 1, .world_size = 4}, &world),
      DT_OK, "%s", dt_last_error());
  dt_mesh *mesh = NULL;
  cr_assert_eq(dt_mesh_create(world, 1, (int[]){4}, (const char *[]){"tp"}, &mesh), DT_OK, "%s",
               dt_last_error());
  dt_tensor *full = iota_2d(8, 3), *x = NULL, *sum = NULL, *local = NULL, *moved = NULL;
  cr_assert_eq(dt_dist_distribute_tensor(mesh, full, 1, (dt_placement[]){dt_shard(0)}, &x), DT_OK,
               "%s", dt_last_error());
  dt_mesh_destroy(mesh);
  cr_assert_eq(dt_add(x, x, &sum), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_dist_to_local(sum, &local), DT_OK, "%s", dt_last_error());
  /* Rank 1 of 4 holds rows 2 and 3. */
  const float *p = dt_tensor_data(local);
  cr_assert_eq(dt_tensor_shape(local)[0], 2);
  for (int64_t i = 0; i < 6; i++) {
    float expect = 2.0f * (float)(10 * (2 + i / 3) + i % 3);
    cr_assert_eq(p[i], expect, "element %lld is %g, expected %g", (long long)i, (double)p[i],
                 (double)expect);
  }
  /* A collective on the mesh's group after the user's destroy (fake moves no data). */
  cr_assert_eq(dt_dist_redistribute(sum, 1, (dt_placement[]){dt_replicate()}, &moved), DT_OK, "%s",
               dt_last_error());
  cr_assert_eq(dt_dist_global_shape(moved)[0], 8);
  dt_tensor_release(moved);
  dt_tensor_release(local);
  dt_tensor_release(sum);
  dt_tensor_release(x);
  dt_tensor_release(full);
  dt_comm_destroy(world);
}

/* ---- Item 11: semantics ------------------------------------------------------------------- */

static dt_status int_avg_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){2}, NULL, &mesh));
  dt_tensor *full = NULL, *x = NULL, *p = NULL, *local = NULL, *wrapped = NULL;
  RANK_OK(dt_full(1, (int64_t[]){4}, 3.0, DT_I64, &full));
  RANK_OK(dt_dist_distribute_tensor(mesh, full, 1, (dt_placement[]){dt_replicate()}, &x));
  dt_status st = dt_dist_redistribute(x, 1, (dt_placement[]){dt_partial(DT_REDUCE_AVG)}, &p);
  RANK_CHECK(st == DT_ERR_INVALID && p == NULL, "redistribute to P(avg) on int64: %s",
             dt_status_string(st));
  RANK_CHECK(mentions(dt_last_error(), "redistribute") && mentions(dt_last_error(), "avg") &&
                 mentions(dt_last_error(), "int64"),
             "message: %s", dt_last_error());
  /* Partial(sum) of the same tensor is fine, and from_local with Partial(avg) is refused. */
  RANK_OK(dt_dist_redistribute(x, 1, (dt_placement[]){dt_partial(DT_REDUCE_SUM)}, &p));
  RANK_OK(dt_dist_to_local(x, &local));
  st = dt_dist_from_local(mesh, local, 1, (dt_placement[]){dt_partial(DT_REDUCE_AVG)}, NULL,
                          &wrapped);
  RANK_CHECK(st == DT_ERR_INVALID && wrapped == NULL && mentions(dt_last_error(), "from_local") &&
                 mentions(dt_last_error(), "Partial(avg)"),
             "from_local P(avg) int64: %s", dt_last_error());
  /* A floating Partial(avg) stays accepted. */
  dt_tensor *f = NULL, *fx = NULL, *favg = NULL, *fall = NULL;
  RANK_OK(dt_full(1, (int64_t[]){4}, 2.0, DT_F32, &f));
  RANK_OK(dt_dist_from_local(mesh, f, 1, (dt_placement[]){dt_partial(DT_REDUCE_AVG)}, NULL, &favg));
  RANK_OK(dt_dist_full_tensor(favg, &fall));
  RANK_CHECK(((float *)dt_tensor_data(fall))[3] == 2.0f, "avg of 2 and 2");
  (void)fx;
  dt_tensor_release(fall);
  dt_tensor_release(favg);
  dt_tensor_release(f);
  dt_tensor_release(local);
  dt_tensor_release(p);
  dt_tensor_release(x);
  dt_tensor_release(full);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(dist_errors, partial_avg_refused_for_integers) { SPAWN_OK(2, int_avg_rank, NULL); }

Test(dist_errors, to_local_and_full_tensor_refuse_local_tensors) {
  dt_tensor *t = NULL, *out = (dt_tensor *)1;
  cr_assert_eq(dt_ones(1, (int64_t[]){3}, DT_F32, &t), DT_OK);
  cr_assert_eq(dt_dist_to_local(t, &out), DT_ERR_INVALID);
  cr_assert_null(out);
  cr_assert(mentions(dt_last_error(), "to_local") && mentions(dt_last_error(), "not distributed"),
            "%s", dt_last_error());
  out = (dt_tensor *)1;
  cr_assert_eq(dt_dist_full_tensor(t, &out), DT_ERR_INVALID);
  cr_assert_null(out);
  cr_assert(mentions(dt_last_error(), "full_tensor") &&
                mentions(dt_last_error(), "not distributed"),
            "%s", dt_last_error());
  dt_tensor_release(t);
}

static dt_status uneven_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){2}, NULL, &mesh));
  /* 5 rows over 2 ranks: 3 and 2. Without global_shape each rank guesses from its own shard
   * (6 and 4 rows) and both fit their guess; the first collective then mismatches, and its
   * message must point at the option. */
  int rank = dt_comm_rank(world);
  dt_tensor *local = iota_2d(rank == 0 ? 3 : 2, 2), *x = NULL, *whole = NULL;
  RANK_OK(dt_dist_from_local(mesh, local, 1, (dt_placement[]){dt_shard(0)}, NULL, &x));
  dt_status st = dt_dist_full_tensor(x, &whole);
  RANK_CHECK(st == DT_ERR_MISMATCH && whole == NULL, "full_tensor of uneven guesses: %s",
             dt_status_string(st));
  RANK_CHECK(mentions(dt_last_error(), "global_shape"), "message: %s", dt_last_error());
  dt_tensor_release(x);
  x = NULL;
  /* run_check finds the differing guesses at once, and says the same. */
  dt_dist_from_local_options check = {.run_check = true};
  st = dt_dist_from_local(mesh, local, 1, (dt_placement[]){dt_shard(0)}, &check, &x);
  RANK_CHECK(st == DT_ERR_INVALID && x == NULL && mentions(dt_last_error(), "global_shape"),
             "run_check: %s", dt_last_error());
  /* With it, the same shards are accepted. */
  dt_dist_from_local_options opt = {.global_shape = (int64_t[]){5, 2}, .global_ndim = 2};
  RANK_OK(dt_dist_from_local(mesh, local, 1, (dt_placement[]){dt_shard(0)}, &opt, &x));
  RANK_CHECK(dt_dist_global_shape(x)[0] == 5, "global rows");
  /* A misfit despite global_shape does not blame the missing option. */
  dt_tensor *y = NULL;
  opt.global_shape = (int64_t[]){7, 2};
  st = dt_dist_from_local(mesh, local, 1, (dt_placement[]){dt_shard(0)}, &opt, &y);
  RANK_CHECK(st == DT_ERR_INVALID && !mentions(dt_last_error(), "no options.global_shape"), "%s",
             dt_last_error());
  dt_tensor_release(x);
  dt_tensor_release(local);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(dist_errors, from_local_uneven_message_names_global_shape) { SPAWN_OK(2, uneven_rank, NULL); }

/* ---- Item 12: messages -------------------------------------------------------------------- */

static dt_status mesh_names_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *a = NULL, *b = NULL, *c = NULL;
  RANK_OK(dt_mesh_create(world, 2, (int[]){2, 2}, (const char *[]){"dp", "tp"}, &a));
  RANK_OK(dt_mesh_create(world, 1, (int[]){4}, NULL, &b));
  RANK_OK(dt_mesh_create(world, 2, (int[]){2, 2}, (const char *[]){"dp", "tp"}, &c));
  char text[64];
  RANK_CHECK(strcmp(dt_mesh_format(a, text, sizeof text), "mesh (dp=2, tp=2)") == 0, "%s", text);
  RANK_CHECK(strcmp(dt_mesh_format(b, text, sizeof text), "mesh (4)") == 0, "%s", text);
  RANK_CHECK(strcmp(dt_comm_name(dt_mesh_group(a, 1)), "mesh (dp=2, tp=2) dim 'tp'") == 0, "%s",
             dt_comm_name(dt_mesh_group(a, 1)));
  RANK_CHECK(strcmp(dt_comm_name(dt_mesh_group(b, 0)), "mesh (4) dim 0") == 0, "%s",
             dt_comm_name(dt_mesh_group(b, 0)));
  int dim = 0;
  RANK_CHECK(dt_mesh_dim_by_name(a, "pp", &dim) == DT_ERR_INVALID &&
                 mentions(dt_last_error(), "mesh (dp=2, tp=2) has no dimension named \"pp\""),
             "%s", dt_last_error());
  /* Tensors on two meshes: the op names both by shape, never by internal id. */
  dt_tensor *x = NULL, *y = NULL, *z = NULL, *w = NULL;
  int64_t shape[] = {4, 4};
  RANK_OK(dt_dist_ones(a, 2, shape, DT_F32, 2, (dt_placement[]){dt_replicate(), dt_shard(0)}, &x));
  RANK_OK(dt_dist_ones(b, 2, shape, DT_F32, 1, (dt_placement[]){dt_shard(0)}, &y));
  RANK_OK(dt_dist_ones(c, 2, shape, DT_F32, 2, (dt_placement[]){dt_replicate(), dt_shard(0)}, &w));
  char id[32];
  snprintf(id, sizeof id, "%llu", (unsigned long long)dt_mesh_id(a));
  RANK_CHECK(dt_add(x, y, &z) == DT_ERR_INVALID, "add across meshes");
  RANK_CHECK(mentions(dt_last_error(), "mesh (4)") &&
                 mentions(dt_last_error(), "mesh (dp=2, tp=2)") && !mentions(dt_last_error(), id),
             "%s", dt_last_error());
  RANK_CHECK(dt_add(x, w, &z) == DT_ERR_INVALID, "add across alike meshes");
  RANK_CHECK(mentions(dt_last_error(), "another mesh object of the same shape"), "%s",
             dt_last_error());
  dt_tensor_release(x);
  dt_tensor_release(y);
  dt_tensor_release(w);
  dt_mesh_destroy(a);
  dt_mesh_destroy(b);
  dt_mesh_destroy(c);
  return DT_OK;
}

Test(dist_errors, messages_name_meshes_by_shape) { SPAWN_OK(4, mesh_names_rank, NULL); }

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Rank 3 of 4 comes late to an all_reduce; every other rank times out after 200 ms and the
 * message names the waiting rank and the missing one apart. */
static dt_status late_rank(dt_comm *world, void *arg) {
  (void)arg;
  int rank = dt_comm_rank(world);
  RANK_OK(dt_comm_set_timeout(world, 200));
  dt_tensor *t = NULL;
  RANK_OK(dt_ones(1, (int64_t[]){4}, DT_F32, &t));
  if (rank == 3) {
    sleep_ms(500);
    dt_status st = dt_comm_all_reduce(world, t, DT_REDUCE_SUM);
    dt_tensor_release(t);
    RANK_CHECK(st == DT_ERR_ABORTED, "late rank got %s", dt_status_string(st));
    return DT_OK;
  }
  dt_status st = dt_comm_all_reduce(world, t, DT_REDUCE_SUM);
  dt_tensor_release(t);
  const char *msg = dt_last_error();
  RANK_CHECK(st == DT_ERR_TIMEOUT, "got %s: %s", dt_status_string(st), msg);
  /* The rank that timed out first may be any of 0..2: every waiter reports its message. */
  bool names_waiter = mentions(msg, "rank 0 waited 200 ms in all_reduce") ||
                      mentions(msg, "rank 1 waited 200 ms in all_reduce") ||
                      mentions(msg, "rank 2 waited 200 ms in all_reduce");
  RANK_CHECK(names_waiter && mentions(msg, "for rank 3, which never arrived") &&
                 mentions(msg, "of 4 ranks") && mentions(msg, "'world'") &&
                 !mentions(msg, "all_reduce: all_reduce"),
             "message: %s", msg);
  return DT_OK;
}

Test(dist_errors, timeout_names_waiting_and_missing_rank) { SPAWN_OK(4, late_rank, NULL); }
