/* Facilities that moved to the layer that owns them (issue 11 §1): arenas in core, the mesh
 * summary in mesh. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

/* Private header: arenas and mesh info are the layout facilities under test themselves. */
#include "core/core_impl.h"
#include "dtensor/comm.h"
#include "dtensor/mesh.h"
#include "mesh/mesh_impl.h"

Test(arena, zeroed_aligned_and_freed_at_once) {
  dt__arena arena = {0};
  char *a = dt__arena_alloc(&arena, 3);
  char *b = dt__arena_alloc(&arena, 5);
  cr_assert_not_null(a);
  cr_assert_not_null(b);
  cr_assert_eq((uintptr_t)a % 8, 0);
  cr_assert_eq((uintptr_t)b % 8, 0);
  cr_assert_eq(b - a, 8, "3 bytes round up to 8");
  for (int i = 0; i < 5; i++) cr_assert_eq(b[i], 0);
  /* A request larger than a block gets a block of its own. */
  unsigned char *big = dt__arena_alloc(&arena, 100000);
  cr_assert_not_null(big);
  cr_assert_eq(big[0], 0);
  cr_assert_eq(big[99999], 0);
  char *s = dt__arena_strdup(&arena, "tp.weight");
  cr_assert_str_eq(s, "tp.weight");
  dt__arena_free(&arena);
  cr_assert_null(arena.head);
  cr_assert_eq(arena.used, 0);
  cr_assert_eq(arena.capacity, 0);
  /* Reusable after free. */
  cr_assert_not_null(dt__arena_alloc(&arena, 16));
  dt__arena_free(&arena);
}

/* Rounding SIZE_MAX up to 8 used to wrap to 0 and hand out a pointer to nothing. */
Test(arena, huge_request_fails_instead_of_wrapping) {
  dt__arena arena = {0};
  cr_assert_null(dt__arena_alloc(&arena, SIZE_MAX));
  cr_assert_null(dt__arena_alloc(&arena, SIZE_MAX - 3));
  dt__arena_free(&arena);
}

/* dt__mesh_info used to hold 4 dims (the dist layer's limit) while meshes had up to 8; now
 * both limits are DT_MESH_MAX_DIMS, and the info holds every dim of the deepest mesh. */
Test(mesh_info, every_dim_of_a_deep_mesh) {
  dt_comm *world = NULL;
  cr_assert_eq(
      dt_comm_init(&(dt_comm_options){.backend = "fake", .rank = 13, .world_size = 16}, &world),
      DT_OK, "%s", dt_last_error());
  dt_mesh *mesh = NULL;
  cr_assert_eq(DT_MESH_MAX_DIMS, 4);
  cr_assert_eq(dt_mesh_create(world, 4, (int[]){2, 2, 2, 2}, NULL, &mesh), DT_OK, "%s",
               dt_last_error());
  dt_mesh_info info;
  memset(&info, 0xff, sizeof info);
  dt__mesh_info(mesh, &info);
  cr_assert_eq(info.ndim, 4);
  /* 13 = 0b1101, row-major over four dims of 2. */
  const int64_t coord[4] = {1, 1, 0, 1};
  for (int m = 0; m < 4; m++) {
    cr_assert_eq(info.size[m], 2, "size[%d]", m);
    cr_assert_eq(info.coord[m], coord[m], "coord[%d] = %lld", m, (long long)info.coord[m]);
  }
  dt__mesh_info(NULL, &info);
  cr_assert_eq(info.ndim, 0);
  dt_mesh_destroy(mesh);
  dt_comm_destroy(world);
}
