/* The naming scheme's ownership and limit rules (issue 11 §5): one dt_free for every buffer
 * the library hands out, _format/_to_string agreeing, and one mesh-dimension limit
 * (DT_MESH_MAX_DIMS) that the mesh and the distributed tensors on it both honour. */
#include <criterion/criterion.h>
#include <string.h>

/* Private header: every message starts with the function name: dt__error_prefix is the formatter
 * under test. */
#include "core/core_impl.h"
#include "dtensor/dtensor.h"

/* A counting allocator: every block dt_free releases must be one the library allocated. */
static int live_blocks;

static void *counting_alloc(size_t size, size_t alignment, void *user) {
  (void)user;
  void *p = NULL;
  if (posix_memalign(&p, alignment < sizeof(void *) ? sizeof(void *) : alignment, size) != 0)
    return NULL;
  live_blocks++;
  return p;
}

static void counting_free(void *ptr, void *user) {
  (void)user;
  if (!ptr) return;
  live_blocks--;
  free(ptr);
}

Test(naming, dt_free_releases_gathered_objects_and_graph_text) {
  dt_set_allocator(&(dt_allocator){.alloc = counting_alloc, .free = counting_free});
  live_blocks = 0;
  dt_comm *world = NULL;
  cr_assert_eq(
      dt_comm_init(&(dt_comm_options){.backend = "fake", .rank = 1, .world_size = 3}, &world),
      DT_OK, "%s", dt_last_error());
  int before = live_blocks;
  dt_objects *objects = NULL;
  cr_assert_eq(dt_comm_all_gather_object(world, "abcd", 4, &objects), DT_OK, "%s", dt_last_error());
  cr_assert_eq(objects->count, 3);
  cr_assert_eq(objects->lengths[2], 4);
  cr_assert_eq(memcmp(objects->data + objects->offsets[2], "abcd", 4), 0);
  cr_assert_gt(live_blocks, before);
  dt_free(objects);
  cr_assert_eq(live_blocks, before, "dt_free left %d blocks", live_blocks - before);
  dt_comm_destroy(world);

  const char *text = "graph() {\n  %x = placeholder() : f32[2, 3]\n"
                     "  %y = add.Tensor(%x, %x) : f32[2, 3]\n  return (%y)\n}\n";
  dt_graph *graph = NULL;
  cr_assert_eq(dt_graph_parse(text, &graph), DT_OK, "%s", dt_last_error());
  before = live_blocks;
  char *owned = dt_graph_to_string(graph);
  cr_assert_not_null(owned);
  char buf[512];
  size_t needed = 0;
  cr_assert_eq(dt_graph_format(graph, buf, sizeof buf, &needed), DT_OK, "%s", dt_last_error());
  cr_assert_str_eq(owned, buf);
  cr_assert_eq(needed, strlen(buf));
  dt_free(owned);
  cr_assert_eq(live_blocks, before);
  dt_free(NULL); /* a no-op, as documented */
  dt_graph_destroy(graph);
  dt_set_allocator(NULL);
}

/* A fake-backend mesh of `ndim` dims of size 2 (rank 0 of 2^ndim). */
static dt_status make_mesh(int ndim, dt_comm **world, dt_mesh **mesh) {
  static const char *const names[] = {"a", "b", "c", "d", "e", "f", "g", "h", "i"};
  int shape[9] = {2, 2, 2, 2, 2, 2, 2, 2, 2};
  dt_status st = dt_comm_init(
      &(dt_comm_options){.backend = "fake", .rank = 0, .world_size = 1 << ndim}, world);
  if (st != DT_OK) return st;
  return dt_mesh_create(*world, ndim, shape, names, mesh);
}

Test(naming, mesh_max_dims_is_one_limit) {
  cr_assert_eq(DT_MESH_MAX_DIMS, 4);
  /* At the limit: the mesh and a distributed tensor sharded on every mesh dim work. */
  dt_comm *world = NULL;
  dt_mesh *mesh = NULL;
  cr_assert_eq(make_mesh(DT_MESH_MAX_DIMS, &world, &mesh), DT_OK, "%s", dt_last_error());
  dt_placement placements[DT_MESH_MAX_DIMS];
  for (int d = 0; d < DT_MESH_MAX_DIMS; d++) placements[d] = dt_shard(d);
  dt_tensor *t = NULL;
  cr_assert_eq(
      dt_dist_ones(mesh, 4, (int64_t[]){2, 4, 6, 8}, DT_F32, DT_MESH_MAX_DIMS, placements, &t),
      DT_OK, "%s", dt_last_error());
  dt_tensor *local = NULL;
  cr_assert_eq(dt_dist_to_local(t, &local), DT_OK, "%s", dt_last_error());
  const int64_t *shape = dt_tensor_shape(local);
  cr_assert(shape[0] == 1 && shape[1] == 2 && shape[2] == 3 && shape[3] == 4);
  dt_tensor_release(local);
  dt_tensor_release(t);
  dt_mesh_destroy(mesh);
  dt_comm_destroy(world);

  /* One past it: the mesh refuses, naming the function and the values. */
  world = NULL;
  mesh = NULL;
  cr_assert_eq(make_mesh(DT_MESH_MAX_DIMS + 1, &world, &mesh), DT_ERR_INVALID);
  cr_assert_null(mesh);
  cr_assert(strstr(dt_last_error(), "dt_mesh_create") != NULL, "%s", dt_last_error());
  cr_assert(strstr(dt_last_error(), "ndim is 5, expected 1..4") != NULL, "%s", dt_last_error());
  dt_comm_destroy(world);
}

/* Messages start with the public C function's name, once. */
Test(naming, error_messages_name_the_public_function) {
  cr_assert_eq(dt_mode_push(NULL, NULL), DT_ERR_INVALID);
  cr_assert_str_eq(dt_last_error(), "dt_mode_push: fn is NULL");
  int64_t four = 4;
  dt_tensor *t = NULL;
  cr_assert_eq(dt_zeros(1, &four, DT_F32, &t), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_comm_all_reduce(NULL, t, DT_REDUCE_SUM), DT_ERR_INVALID);
  cr_assert(strncmp(dt_last_error(), "dt_comm_all_reduce: ", 20) == 0, "%s", dt_last_error());
  cr_assert_eq(dt_dist_to_local(t, &(dt_tensor *){NULL}), DT_ERR_INVALID);
  cr_assert(strncmp(dt_last_error(), "dt_dist_to_local: ", 18) == 0, "%s", dt_last_error());
  dt_tensor_release(t);
  /* A wrapper adding context keeps one function name: it used to read
   * "program_run: node %x: program_run: ...". */
  dt__error(DT_ERR_INVALID, "dt_program_run: input 0 is NULL");
  dt__error_prefix("dt_program_run: node %x");
  cr_assert_str_eq(dt_last_error(), "dt_program_run: node %x: input 0 is NULL");
  /* Context that is not a function name is kept as it was. */
  dt__error(DT_ERR_SHAPE, "add.Tensor: shapes differ");
  dt__error_prefix("on this rank's shard");
  cr_assert_str_eq(dt_last_error(), "on this rank's shard: add.Tensor: shapes differ");
}
