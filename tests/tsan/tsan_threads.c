/*
 * A ThreadSanitizer workout of the threads backend, without Criterion (whose forked test
 * runner cannot start under TSan): 4 ranks run every collective, sync and async, on the
 * world and on a 2x2 mesh's groups, then distributed ops that redistribute, then autograd on every
 * rank at once. Values are checked; the closing line is "N passed, N failed". Built and run by
 * `make test-tsan`.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dtensor/dtensor.h"

#define WORLD 4

static _Atomic int passed, failed;

#define EXPECT(cond, what)                                                                         \
  do {                                                                                             \
    if (cond) {                                                                                    \
      passed++;                                                                                    \
    } else {                                                                                       \
      failed++;                                                                                    \
      fprintf(stderr, "rank %d: %s failed (%s)\n", rank, what, dt_last_error());                   \
    }                                                                                              \
  } while (0)

static double at(dt_tensor *t, int64_t i) {
  double v = NAN;
  dt_tensor_get(t, &i, &v);
  return v;
}

static double at2(dt_tensor *t, int64_t i, int64_t j) {
  double v = NAN;
  dt_tensor_get(t, (int64_t[]){i, j}, &v);
  return v;
}

static dt_status rank_fn(dt_comm *world, void *arg) {
  (void)arg;
  int rank = dt_comm_rank(world);
  for (int round = 0; round < 20; round++) {
    dt_tensor *t = NULL, *g = NULL, *rs = NULL, *a2a = NULL;
    dt_full(1, (int64_t[]){6}, rank + 1, DT_F32, &t);
    EXPECT(!dt_comm_all_reduce(world, t, DT_REDUCE_SUM) && at(t, 0) == 10, "all_reduce");
    dt_empty(1, (int64_t[]){24}, DT_F32, &g);
    dt_tensor *mine = NULL;
    dt_full(1, (int64_t[]){6}, rank, DT_F32, &mine);
    EXPECT(!dt_comm_all_gather_into_tensor(world, mine, g) && at(g, 23) == 3, "all_gather");
    dt_empty(1, (int64_t[]){6}, DT_F32, &rs);
    dt_tensor *big = NULL;
    dt_full(1, (int64_t[]){24}, 1, DT_F32, &big);
    dt_work *w = NULL;
    EXPECT(!dt_comm_reduce_scatter_tensor_async(world, big, rs, DT_REDUCE_SUM, &w) &&
               !dt_work_wait(w) && at(rs, 0) == 4,
           "reduce_scatter async");
    dt_work_destroy(w);
    dt_empty(1, (int64_t[]){24}, DT_F32, &a2a);
    EXPECT(!dt_comm_all_to_all(world, g, a2a, NULL, NULL), "all_to_all");
    EXPECT(!dt_comm_broadcast(world, mine, 2) && at(mine, 0) == 2, "broadcast");
    EXPECT(!dt_comm_barrier(world), "barrier");
    dt_tensor *rel[] = {t, g, rs, a2a, mine, big};
    for (int i = 0; i < 6; i++) dt_tensor_release(rel[i]);
  }
  dt_mesh *mesh = NULL;
  EXPECT(!dt_mesh_create(world, 2, (int[]){2, 2}, (const char *[]){"dp", "tp"}, &mesh), "mesh");
  if (!mesh) return DT_ERR_INTERNAL;
  for (int round = 0; round < 10; round++) {
    dt_tensor *x = NULL, *y = NULL, *z = NULL, *s = NULL, *full = NULL;
    dt_dist_rand(mesh, 2, (int64_t[]){9, 7}, DT_F32, 1, 2,
                 (dt_placement[]){dt_shard(0), dt_shard(1)}, &x);
    dt_dist_rand(mesh, 2, (int64_t[]){7, 5}, DT_F32, 2, 2,
                 (dt_placement[]){dt_shard(0), dt_replicate()}, &y);
    EXPECT(!dt_mm(x, y, &z), "dist mm");
    EXPECT(!dt_sum(z, &s) && !dt_dist_full_tensor(s, &full), "dist sum");
    dt_tensor *rel[] = {x, y, z, s, full};
    for (int i = 0; i < 5; i++) dt_tensor_release(rel[i]);
  }
  /* Autograd on every rank at once: each rank's first dt_tensor_set_requires_grad installs
   * autograd's dispatch while the other ranks dispatch ops. d(sum(x*x))/dx = 2x. */
  for (int round = 0; round < 5; round++) {
    dt_tensor *x = NULL, *y = NULL, *s = NULL, *grad = NULL, *gfull = NULL, *xfull = NULL;
    dt_dist_rand(mesh, 2, (int64_t[]){6, 5}, DT_F32, 3, 2,
                 (dt_placement[]){dt_shard(0), dt_replicate()}, &x);
    EXPECT(!dt_tensor_set_requires_grad(x, true), "requires_grad");
    EXPECT(!dt_mul(x, x, &y) && !dt_sum(y, &s) && !dt_backward(s, NULL), "backward");
    EXPECT(!dt_tensor_grad(x, &grad) && grad && !dt_dist_full_tensor(grad, &gfull) &&
               !dt_dist_full_tensor(x, &xfull) &&
               fabs(at2(gfull, 4, 3) - 2 * at2(xfull, 4, 3)) < 1e-6,
           "grad = 2x");
    dt_tensor *rel[] = {x, y, s, grad, gfull, xfull};
    for (int i = 0; i < 6; i++) dt_tensor_release(rel[i]);
  }
  dt_mesh_destroy(mesh);
  return DT_OK;
}

int main(void) {
  dt_status st = dt_comm_spawn(WORLD, rank_fn, NULL);
  if (st) {
    fprintf(stderr, "spawn: %s\n", dt_last_error());
    failed++;
  }
  printf("%d passed, %d failed\n", (int)passed, (int)failed);
  return failed ? 1 : 0;
}
