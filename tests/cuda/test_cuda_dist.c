/*
 * DTensor on CUDA meshes (docs/gpu-distributed.md, "Device meshes"): the cases of
 * tests/dist_device_cases.h (distribute_tensor, every redistribution between Shard, Replicate
 * and Partial, add/mul/relu/mm/sum on sharded tensors, from_local with Partial, the
 * factories, the device refusals) on a CUDA mesh against the same program on a CPU mesh, bit
 * for bit (the values are exact in float32 in any order of summation):
 *   - the threads backend: 2 ranks (1-D), 4 ranks (1-D and 2 x 2), rank r on cuda:r % count
 *     (on a one-GPU machine all ranks share cuda:0);
 *   - the NCCL backend at world size 1 (a mesh over dt_comm_nccl_create's group, on its GPU),
 *     against a CPU mesh over the bootstrap threads world.
 * Skips (77) without a GPU.
 */
#include "cuda/cuda_test.h"
#include "dist_device_cases.h"

typedef struct mesh_case {
  int ndim;
  int shape[2];
} mesh_case;

static dt_status run_threads(dt_comm *world, void *arg) {
  const mesh_case *c = arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create_on("cuda", world, c->ndim, c->shape, NULL, &mesh));
  dt_device device = dt_mesh_device(mesh);
  dt_mesh_destroy(mesh);
  int count = 1;
  RANK_OK(dt_cuda_device_count(&count));
  int want = dt_comm_rank(world) % count;
  RANK_CHECK(device.kind == DT_DEVICE_CUDA && device.index == want,
             "rank %d: mesh device %d:%d, expected cuda:%d", dt_comm_rank(world), (int)device.kind,
             device.index, want);
  return dist_device_cases(world, world, "cuda", c->ndim, c->shape);
}

#ifdef DT_HAVE_NCCL
static dt_status run_nccl(dt_comm *world, void *arg) {
  (void)arg;
  dt_comm *group = NULL;
  RANK_OK(dt_comm_nccl_create(world, -1, &group));
  dt_status st = dist_device_cases(group, world, "cuda", 1, (int[]){1});
  dt_comm_destroy(group);
  return st;
}
#endif

static void spawn(int ranks, dt_rank_fn fn, void *arg, const char *what) {
  dt_status st = dt_comm_spawn(ranks, fn, arg);
  CHECK(st == DT_OK, "%s: %s", what, dt_last_error());
  if (st == DT_OK) printf("%s: passed\n", what);
}

int main(void) {
  dt_test_require_gpu("test_cuda_dist");
  mesh_case two = {1, {2}}, four = {1, {4}}, square = {2, {2, 2}};
  spawn(2, run_threads, &two, "threads, 2 ranks, mesh (2)");
  spawn(4, run_threads, &four, "threads, 4 ranks, mesh (4)");
  spawn(4, run_threads, &square, "threads, 4 ranks, mesh (2, 2)");
#ifdef DT_HAVE_NCCL
  spawn(1, run_nccl, NULL, "nccl, world size 1, mesh (1)");
#else
  printf("nccl: not in this build, skipped\n");
#endif
  return dt_test_result("test_cuda_dist");
}
