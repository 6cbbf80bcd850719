/* Device meshes: layout, per-dimension groups and their collectives (threads backend, 2x2
 * and 2x3, plus 1-D and 3-D), names, and bad arguments; large meshes on the fake backend. */
#include <criterion/criterion.h>

#include "comm_helpers.h"
#include "log_capture.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define LEAKS_EXPECTED_BEGIN() __lsan_disable()
#define LEAKS_EXPECTED_END() __lsan_enable()
#else
#define LEAKS_EXPECTED_BEGIN() ((void)0)
#define LEAKS_EXPECTED_END() ((void)0)
#endif

typedef struct mesh_case {
  int ndim;
  int shape[3];
} mesh_case;

static dt_status mesh_rank(dt_comm *world, void *arg) {
  const mesh_case *c = arg;
  int rank = dt_comm_rank(world);
  static const char *const names3[] = {"pp", "dp", "tp"};
  const char *const *names = names3 + (3 - c->ndim);
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, c->ndim, c->shape, names, &mesh));
  RANK_CHECK(dt_mesh_ndim(mesh) == c->ndim && dt_mesh_world(mesh) == world, "ndim");
  /* Row-major coordinates. */
  int coords[3], rest = rank;
  for (int d = c->ndim - 1; d >= 0; d--) {
    coords[d] = rest % c->shape[d];
    rest /= c->shape[d];
  }
  RANK_CHECK(dt_mesh_rank_at(mesh, coords) == rank, "rank_at");
  for (int d = 0; d < c->ndim; d++) {
    RANK_CHECK(dt_mesh_coordinate(mesh, d) == coords[d], "coordinate %d", d);
    RANK_CHECK(dt_mesh_size(mesh, d) == c->shape[d] && dt_mesh_shape(mesh)[d] == c->shape[d],
               "size");
    int found = -1;
    RANK_OK(dt_mesh_dim_by_name(mesh, names[d], &found));
    RANK_CHECK(found == d && strcmp(dt_mesh_dim_name(mesh, d), names[d]) == 0, "name %s", names[d]);
    dt_comm *group = dt_mesh_group(mesh, d);
    RANK_CHECK(dt_comm_size(group) == c->shape[d] && dt_comm_rank(group) == coords[d],
               "group of dim %d: size %d rank %d", d, dt_comm_size(group), dt_comm_rank(group));
    RANK_CHECK(strstr(dt_comm_name(group), names[d]) != NULL, "group name %s", dt_comm_name(group));
    /* all_reduce of world ranks along d: the sum over the ranks sharing the other coords. */
    dt_tensor *t = NULL;
    RANK_OK(dt_full(1, (int64_t[]){5}, rank, DT_I64, &t));
    RANK_OK(dt_comm_all_reduce(group, t, DT_REDUCE_SUM));
    int64_t expected = 0;
    int other[3];
    memcpy(other, coords, sizeof other);
    for (int k = 0; k < c->shape[d]; k++) {
      other[d] = k;
      expected += dt_mesh_rank_at(mesh, other);
    }
    RANK_CHECK(((int64_t *)dt_tensor_data(t))[4] == expected, "dim %d sum %lld, expected %lld", d,
               (long long)((int64_t *)dt_tensor_data(t))[4], (long long)expected);
    /* all_gather along d lists the group's world ranks in coordinate order. */
    dt_tensor *mine = NULL, *all = NULL;
    RANK_OK(dt_full(1, (int64_t[]){1}, rank, DT_I32, &mine));
    RANK_OK(dt_zeros(1, (int64_t[]){c->shape[d]}, DT_I32, &all));
    RANK_OK(dt_comm_all_gather_into_tensor(group, mine, all));
    for (int k = 0; k < c->shape[d]; k++) {
      other[d] = k;
      RANK_CHECK(((int32_t *)dt_tensor_data(all))[k] == dt_mesh_rank_at(mesh, other), "gather");
    }
    dt_tensor_release(mine);
    dt_tensor_release(all);
    dt_tensor_release(t);
  }
  RANK_CHECK(dt_mesh_group(mesh, c->ndim) == NULL && dt_mesh_size(mesh, -1) == -1 &&
                 dt_mesh_coordinate(mesh, 9) == -1 && dt_mesh_dim_name(mesh, 5) == NULL,
             "out-of-range dims");
  int found = 0;
  dt_status status = dt_mesh_dim_by_name(mesh, "ep", &found);
  RANK_CHECK(status == DT_ERR_INVALID && strstr(dt_last_error(), "\"ep\"") &&
                 strstr(dt_last_error(), "\"tp\""),
             "%s", dt_last_error());
  /* Ids agree across ranks and differ between meshes. */
  dt_mesh *second = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){dt_comm_size(world)}, NULL, &second));
  RANK_CHECK(dt_mesh_id(second) != dt_mesh_id(mesh), "distinct ids");
  RANK_CHECK(dt_mesh_dim_name(second, 0) == NULL, "unnamed");
  uint64_t id = dt_mesh_id(mesh);
  dt_objects *ids = NULL;
  RANK_OK(dt_comm_all_gather_object(world, &id, sizeof id, &ids));
  for (int r = 0; r < ids->count; r++) {
    RANK_CHECK(memcmp(ids->data + ids->offsets[r], &id, sizeof id) == 0, "mesh id of rank %d", r);
  }
  dt_free(ids);
  dt_mesh_destroy(second);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(mesh, two_by_two) {
  mesh_case c = {2, {2, 2}};
  SPAWN_OK(4, mesh_rank, &c);
}

Test(mesh, two_by_three_and_three_by_two) {
  mesh_case c = {2, {2, 3}};
  SPAWN_OK(6, mesh_rank, &c);
  mesh_case d = {2, {3, 2}};
  SPAWN_OK(6, mesh_rank, &d);
}

Test(mesh, one_and_three_dims) {
  mesh_case c = {1, {5}};
  SPAWN_OK(5, mesh_rank, &c);
  mesh_case d = {3, {2, 1, 3}};
  SPAWN_OK(6, mesh_rank, &d);
}

static dt_status bad_mesh_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = (dt_mesh *)1;
  dt_status status = dt_mesh_create(world, 2, (int[]){2, 3}, NULL, &mesh);
  RANK_CHECK(status == DT_ERR_INVALID && mesh == NULL &&
                 strstr(dt_last_error(), "[2, 3] holds 6 ranks but group 'world' has 4"),
             "%s", dt_last_error());
  status = dt_mesh_create(world, 2, (int[]){2, 2}, (const char *const[]){"dp", "dp"}, &mesh);
  RANK_CHECK(status == DT_ERR_INVALID && strstr(dt_last_error(), "both \"dp\""), "%s",
             dt_last_error());
  status = dt_mesh_create(world, 2, (int[]){2, 2}, (const char *const[]){"dp", ""}, &mesh);
  RANK_CHECK(status == DT_ERR_INVALID && strstr(dt_last_error(), "empty"), "%s", dt_last_error());
  status = dt_mesh_create(world, 0, (int[]){4}, NULL, &mesh);
  RANK_CHECK(status == DT_ERR_INVALID && strstr(dt_last_error(), "ndim is 0"), "%s",
             dt_last_error());
  status = dt_mesh_create(world, 2, (int[]){0, 4}, NULL, &mesh);
  RANK_CHECK(status == DT_ERR_INVALID && strstr(dt_last_error(), "shape[0] is 0"), "%s",
             dt_last_error());
  status = dt_mesh_create(NULL, 1, (int[]){4}, NULL, &mesh);
  RANK_CHECK(status == DT_ERR_INVALID && strstr(dt_last_error(), "world is NULL"), "%s",
             dt_last_error());
  status = dt_mesh_create(world, 1, NULL, NULL, &mesh);
  RANK_CHECK(status == DT_ERR_INVALID && strstr(dt_last_error(), "shape is NULL"), "%s",
             dt_last_error());
  RANK_CHECK(dt_mesh_create(world, 1, (int[]){4}, NULL, NULL) == DT_ERR_INVALID, "NULL out");
  /* Nothing above communicated: a valid mesh still builds in step. */
  RANK_OK(dt_mesh_create(world, 2, (int[]){4, 1}, NULL, &mesh));
  int dim = 0;
  RANK_CHECK(dt_mesh_dim_by_name(mesh, "tp", &dim) == DT_ERR_INVALID &&
                 strstr(dt_last_error(), "unnamed") && dim == -1,
             "%s", dt_last_error());
  RANK_CHECK(dt_mesh_dim_by_name(NULL, "tp", &dim) == DT_ERR_INVALID, "NULL mesh");
  dt_mesh_destroy(mesh);
  dt_mesh_destroy(NULL);
  return DT_OK;
}

Test(mesh, bad_arguments) { SPAWN_OK(4, bad_mesh_rank, NULL); }

/* Every rank makes and destroys a 2 x 2 mesh; ranks 1 and 3 leave a 1-D mesh undestroyed and
 * rank 3 a dt_comm_split group too (the test leaks them on purpose: LeakSanitizer is told). */
static dt_status leaky_rank(dt_comm *world, void *arg) {
  (void)arg;
  int rank = dt_comm_rank(world);
  dt_mesh *square = NULL, *line = NULL;
  dt_comm *group = NULL;
  RANK_OK(dt_mesh_create(world, 2, (int[]){2, 2}, NULL, &square));
  dt_mesh_destroy(square);
  LEAKS_EXPECTED_BEGIN();
  dt_status st = dt_mesh_create(world, 1, (int[]){4}, NULL, &line);
  if (!st) st = dt_comm_split(world, rank % 2, rank, &group);
  LEAKS_EXPECTED_END();
  RANK_OK(st);
  if (rank % 2 == 0) dt_mesh_destroy(line);
  if (rank != 3) dt_comm_destroy(group);
  return DT_OK;
}

/* dt_comm_spawn says which rank returned with how many meshes and groups undestroyed, through
 * the log callback (a warning: the run's status stays DT_OK), and says nothing of a clean run. */
Test(mesh, spawn_reports_meshes_a_rank_leaves) {
  log_capture_start();
  SPAWN_OK(4, leaky_rank, NULL);
  cr_assert_eq(warnings, 2, "one warning per leaking rank, got %d", warnings);
  cr_assert(strstr(warning_text[0], "dt_comm_spawn: rank 1 ") &&
                strstr(warning_text[0], " 1 mesh ") && strstr(warning_text[0], " 1 group "),
            "%s", warning_text[0]);
  cr_assert(strstr(warning_text[1], "dt_comm_spawn: rank 3 ") &&
                strstr(warning_text[1], " 1 mesh ") && strstr(warning_text[1], " 2 groups "),
            "%s", warning_text[1]);
  warnings = 0;
  mesh_case c = {2, {2, 2}};
  SPAWN_OK(4, mesh_rank, &c);
  cr_assert_eq(warnings, 0, "a clean run: %s", warning_text[0]);
  log_capture_stop();
}

/* Rank 0 destroys its mesh but keeps a tensor on it: the mesh's group stays alive and is
 * reported (0 meshes, 1 group). */
static dt_status tensor_kept_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  dt_tensor *local = NULL, *d = NULL;
  RANK_OK(dt_zeros(1, (int64_t[]){3}, DT_F32, &local));
  LEAKS_EXPECTED_BEGIN();
  dt_status st = dt_mesh_create(world, 1, (int[]){2}, NULL, &mesh);
  if (!st) st = dt_dist_from_local(mesh, local, 1, (dt_placement[]){dt_replicate()}, NULL, &d);
  LEAKS_EXPECTED_END();
  dt_tensor_release(local);
  dt_mesh_destroy(mesh);
  RANK_OK(st);
  if (dt_comm_rank(world) == 1) dt_tensor_release(d);
  return DT_OK;
}

Test(mesh, spawn_reports_groups_a_kept_tensor_holds) {
  log_capture_start();
  SPAWN_OK(2, tensor_kept_rank, NULL);
  cr_assert_eq(warnings, 1, "got %d", warnings);
  cr_assert(strstr(last_warning, "dt_comm_spawn: rank 0 ") && strstr(last_warning, " 0 meshes ") &&
                strstr(last_warning, " 1 group ") && strstr(last_warning, "last tensor released"),
            "%s", last_warning);
  log_capture_stop();
}

/* dt_mesh_destroy twice while a tensor still holds the mesh: the second call is reported and
 * ignored (it dropped the tensor's reference, so the mesh was freed under the tensor, which
 * then used and released freed memory); the tensor still works and frees the mesh. */
Test(mesh, a_second_destroy_while_tensors_hold_it_is_ignored) {
  dt_comm *world = NULL;
  dt_comm_options o = {.backend = "fake", .rank = 0, .world_size = 2};
  cr_assert_eq(dt_comm_init(&o, &world), DT_OK, "%s", dt_last_error());
  dt_mesh *mesh = NULL;
  dt_tensor *local = NULL, *d = NULL, *twice = NULL;
  cr_assert_eq(dt_mesh_create(world, 1, (int[]){2}, NULL, &mesh), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_full(1, (int64_t[]){3}, 2.0, DT_F32, &local), DT_OK);
  cr_assert_eq(dt_dist_from_local(mesh, local, 1, (dt_placement[]){dt_replicate()}, NULL, &d),
               DT_OK, "%s", dt_last_error());
  log_capture_start();
  dt_mesh_destroy(mesh);
  cr_assert_eq(warnings, 0, "%s", last_warning);
  dt_mesh_destroy(mesh);
  cr_assert_eq(warnings, 1);
  cr_assert(strstr(last_warning, "dt_mesh_destroy: mesh (2)") &&
                strstr(last_warning, "already destroyed; ignored"),
            "%s", last_warning);
  cr_assert_eq(dt_dist_mesh(d), mesh);
  cr_assert_eq(dt_add(d, d, &twice), DT_OK, "%s", dt_last_error());
  double v[3];
  dt_tensor *lt = NULL;
  cr_assert_eq(dt_dist_to_local(twice, &lt), DT_OK);
  cr_assert_eq(dt_tensor_to_doubles(lt, v, 3), DT_OK);
  cr_assert(v[0] == 4 && v[1] == 4 && v[2] == 4, "%g %g %g", v[0], v[1], v[2]);
  dt_tensor_release(lt), dt_tensor_release(twice), dt_tensor_release(d), dt_tensor_release(local);
  dt_comm_destroy(world); /* no warning: the mesh is gone with its last tensor */
  cr_assert_eq(warnings, 1, "%s", last_warning);
  log_capture_stop();
}

/* A world destroyed before a mesh made on it (the world must outlive its meshes): reported,
 * naming the group, the rank and the count; a world whose meshes are gone says nothing. */
Test(mesh, destroying_the_world_first_is_reported) {
  dt_comm *world = NULL;
  dt_comm_options o = {.backend = "fake", .rank = 1, .world_size = 4};
  cr_assert_eq(dt_comm_init(&o, &world), DT_OK, "%s", dt_last_error());
  dt_mesh *kept = NULL, *gone = NULL;
  cr_assert_eq(dt_mesh_create(world, 2, (int[]){2, 2}, NULL, &gone), DT_OK, "%s", dt_last_error());
  dt_mesh_destroy(gone);
  LEAKS_EXPECTED_BEGIN();
  cr_assert_eq(dt_mesh_create(world, 1, (int[]){4}, NULL, &kept), DT_OK, "%s", dt_last_error());
  LEAKS_EXPECTED_END();
  log_capture_start();
  dt_comm_destroy(world);
  cr_assert_eq(warnings, 1);
  cr_assert(strstr(last_warning, "dt_comm_destroy: group 'world' (rank 1 of 4)") &&
                strstr(last_warning, "while 1 mesh made on it is not destroyed"),
            "%s", last_warning);
  cr_assert_eq(dt_comm_init(&o, &world), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_mesh_create(world, 2, (int[]){2, 2}, NULL, &gone), DT_OK, "%s", dt_last_error());
  dt_mesh_destroy(gone);
  dt_comm_destroy(world);
  cr_assert_eq(warnings, 1, "%s", last_warning);
  log_capture_stop();
}

Test(mesh, fake_backend_4096_ranks) {
  dt_comm *world = NULL;
  cr_assert_eq(
      dt_comm_init(&(dt_comm_options){.backend = "fake", .rank = 1234, .world_size = 4096}, &world),
      DT_OK, "%s", dt_last_error());
  dt_mesh *mesh = NULL;
  cr_assert_eq(
      dt_mesh_create(world, 3, (int[]){16, 16, 16}, (const char *const[]){"pp", "dp", "tp"}, &mesh),
      DT_OK, "%s", dt_last_error());
  /* 1234 = 4*256 + 13*16 + 2 */
  cr_assert_eq(dt_mesh_coordinate(mesh, 0), 4);
  cr_assert_eq(dt_mesh_coordinate(mesh, 1), 13);
  cr_assert_eq(dt_mesh_coordinate(mesh, 2), 2);
  for (int d = 0; d < 3; d++) {
    cr_assert_eq(dt_comm_size(dt_mesh_group(mesh, d)), 16);
    cr_assert_eq(dt_comm_rank(dt_mesh_group(mesh, d)), dt_mesh_coordinate(mesh, d));
    cr_assert_str_eq(dt_comm_backend_name(dt_mesh_group(mesh, d)), "fake");
  }
  dt_tensor *in = NULL, *out = NULL;
  cr_assert_eq(dt_ones(1, (int64_t[]){3}, DT_F32, &in), DT_OK);
  cr_assert_eq(dt_zeros(1, (int64_t[]){48}, DT_F32, &out), DT_OK);
  cr_assert_eq(dt_comm_all_gather_into_tensor(dt_mesh_group(mesh, 2), in, out), DT_OK, "%s",
               dt_last_error());
  cr_assert_eq(dt_comm_all_gather_into_tensor(world, in, out), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "expected [12288]") != NULL, "%s", dt_last_error());
  dt_tensor_release(in);
  dt_tensor_release(out);
  dt_mesh_destroy(mesh);
  dt_comm_destroy(world);
}
