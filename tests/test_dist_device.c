/*
 * Device meshes without a GPU: DTensor programs on a mesh of a stand-in device kind ("mirror":
 * host memory the library must treat as unreadable, 8 devices, rank r on mirror:r) against the
 * same programs on a CPU mesh (tests/dist_device_cases.h), on the threads backend. The
 * stand-in's kernels are the CPU's, its mover copies with memcpy and reduces with the CPU's
 * reduction; what this exercises is everything around them that a CUDA mesh runs too: the
 * mesh's device per rank, the device checks of distribute_tensor and from_local, and the
 * redistribution executor and factories keeping every buffer on the mesh's device (through the
 * device's kernels and copies, never host reads: the kind is not host-accessible).
 * tests/cuda/test_cuda_dist.c runs the same cases on CUDA meshes.
 *
 * Private headers: registering a device kind, its kernels and its mover is internal.
 */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "comm/threads/threads_impl.h"
#include "dist_device_cases.h"
#include "kernels/kernel_table.h"
#include "mirror_device.h"
#include "tensor/device_impl.h"

/* The mover: markers are tokens (the rank threads' rendezvous orders the host copies). */
static int token;
static dt_status mover_mark(const char *op, int device, void **out) {
  (void)op, (void)device;
  *out = &token;
  return DT_OK;
}
static dt_status mover_begin(const char *op, int device, void *const *markers, int n, void **out) {
  (void)op, (void)device, (void)markers, (void)n;
  *out = &token;
  return DT_OK;
}
static dt_status mover_copy(void *run, int dst_device, void *dst, int src_device, const void *src,
                            size_t bytes) {
  (void)run, (void)dst_device, (void)src_device;
  memcpy(dst, src, bytes);
  return DT_OK;
}
static dt_status mover_reduce(void *run, dt_dtype dtype, dt_reduce_op op, int nsrc,
                              const void *const *src, const int *src_devices, int ndst,
                              void *const *dst, const int *dst_devices, int64_t n, int world) {
  (void)run, (void)src_devices, (void)dst_devices;
  dt__reduce_buffers(dtype, op, nsrc, src, ndst, dst, n, world, false);
  return DT_OK;
}
static dt_status mover_end(void *run, dt_status so_far, void **done) {
  (void)run;
  *done = so_far == DT_OK ? &token : NULL;
  return so_far;
}
static dt_status mover_wait(const char *op, int device, void *done) {
  (void)op, (void)device, (void)done;
  return DT_OK;
}
static void mover_release(void *marker) { (void)marker; }

static const th_device_ops mirror_mover = {.mark = mover_mark,
                                           .begin = mover_begin,
                                           .copy = mover_copy,
                                           .reduce = mover_reduce,
                                           .end = mover_end,
                                           .wait = mover_wait,
                                           .release = mover_release};

static void setup(void) {
  cr_assert_eq(dt__device_register_memory(MIRROR, &mirror_memory), DT_OK);
  cr_assert_eq(dt__th_register_device(MIRROR, &mirror_mover), DT_OK);
  cr_assert_eq(dt__kernels_register(MIRROR, dt__cpu_kernels), DT_OK);
}

static void teardown(void) {
  cr_assert_eq(atomic_load(&live_blocks), 0, "%d mirror blocks leaked", atomic_load(&live_blocks));
  dt__th_register_device(MIRROR, NULL);
  dt__kernels_register(MIRROR, NULL);
  dt__device_register_memory(MIRROR, NULL);
}

TestSuite(dist_device, .init = setup, .fini = teardown);

typedef struct mesh_case {
  int ndim;
  int shape[2];
} mesh_case;

static dt_status run_cases(dt_comm *world, void *arg) {
  const mesh_case *c = arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create_on("mirror", world, c->ndim, c->shape, NULL, &mesh));
  dt_device device = dt_mesh_device(mesh);
  dt_mesh_destroy(mesh);
  RANK_CHECK(device.kind == (dt_device_kind)MIRROR && device.index == dt_comm_rank(world),
             "rank %d: mesh device %d:%d, expected mirror:%d", dt_comm_rank(world),
             (int)device.kind, device.index, dt_comm_rank(world));
  return dist_device_cases(world, world, "mirror", c->ndim, c->shape);
}

Test(dist_device, two_ranks_one_dim) {
  mesh_case c = {1, {2}};
  SPAWN_OK(2, run_cases, &c);
}

Test(dist_device, three_ranks_uneven) {
  mesh_case c = {1, {3}};
  SPAWN_OK(3, run_cases, &c);
}

Test(dist_device, four_ranks_two_by_two) {
  mesh_case c = {2, {2, 2}};
  SPAWN_OK(4, run_cases, &c);
}

Test(dist_device, four_ranks_one_dim) {
  mesh_case c = {1, {4}};
  SPAWN_OK(4, run_cases, &c);
}

/* A tensor on another device of the mesh's kind than this rank's: refused, naming both. */
static dt_status wrong_index(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create_on("mirror", world, 1, (int[]){2}, NULL, &mesh));
  int other = (dt_comm_rank(world) + 1) % 8;
  float v[4] = {1, 2, 3, 4};
  dt_tensor *t = NULL, *d = NULL;
  dt_tensor_options o = {.device = {(dt_device_kind)MIRROR, other}};
  RANK_OK(dt_from_data_ex(v, 1, (int64_t[]){4}, DT_F32, &o, &t));
  dt_status st = dt_dist_distribute_tensor(mesh, t, 1, (dt_placement[]){dt_shard(0)}, &d);
  char want[32];
  snprintf(want, sizeof want, "mirror:%d", other);
  bool named =
      strstr(dt_last_error(), "dt_dist_distribute_tensor") && strstr(dt_last_error(), want) != NULL;
  dt_tensor_release(t);
  dt_mesh_destroy(mesh);
  RANK_CHECK(st == DT_ERR_INVALID && !d, "status %s", dt_status_string(st));
  RANK_CHECK(named, "%s", dt_last_error());
  return DT_OK;
}

Test(dist_device, a_tensor_on_another_device_of_the_kind) { SPAWN_OK(2, wrong_index, NULL); }

/* The fake backend moves no device memory: a device mesh over it is refused. */
Test(dist_device, refused_where_the_backend_moves_no_device_memory) {
  dt_comm *fake = NULL;
  cr_assert_eq(
      dt_comm_init(&(dt_comm_options){.backend = "fake", .rank = 0, .world_size = 2}, &fake),
      DT_OK);
  dt_mesh *mesh = NULL;
  cr_assert_eq(dt_mesh_create_on("mirror", fake, 1, (int[]){2}, NULL, &mesh), DT_ERR_UNSUPPORTED);
  cr_assert(strstr(dt_last_error(), "dt_mesh_create_on") && strstr(dt_last_error(), "fake"), "%s",
            dt_last_error());
  cr_assert_null(mesh);
  dt_comm_destroy(fake);
}
