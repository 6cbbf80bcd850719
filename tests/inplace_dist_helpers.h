/* Shared by the distributed in-place autograd tests (test_autograd_inplace.c,
 * test_autograd_inplace_view.c): two [5, 3] f64 leaves placed Shard(0) on 2 ranks (uneven:
 * 3 + 2 rows) and a check of a leaf's gathered gradient against closed-form values. */
#ifndef DT_TESTS_INPLACE_DIST_HELPERS_H
#define DT_TESTS_INPLACE_DIST_HELPERS_H

#include <math.h>

#include "comm_helpers.h"

#define RANKS 2
static const double X[15] = {1, -2, 3, 0.5, 4, -1, 2, 2, -3, 1.5, -0.5, 6, -4, 1, 2.5};
static const double W[15] = {0.5, 1, -1, 2, 0.25, 3, -2, 1, 1, -0.5, 2, 0.75, 1.5, -1, 0.5};

/* A [5, 3] leaf holding `values`, Shard(0) on mesh, requiring grad. */
static inline dt_status dist_leaf(dt_mesh *mesh, const double *values, dt_tensor **out) {
  dt_tensor *full = NULL;
  dt_status st = dt_from_data(values, 2, (int64_t[]){5, 3}, DT_F64, &full);
  if (!st) st = dt_dist_distribute_tensor(mesh, full, 1, (dt_placement[]){dt_shard(0)}, out);
  if (!st) st = dt_tensor_set_requires_grad(*out, true);
  dt_tensor_release(full);
  return st;
}

/* The leaf's gradient is distributed and, gathered, equals want (15 values). */
static inline dt_status check_dist_grad(const char *what, dt_tensor *leaf, const double *want) {
  dt_tensor *g = NULL, *full = NULL;
  RANK_OK(dt_tensor_grad(leaf, &g));
  RANK_CHECK(g && dt_tensor_is_distributed(g), "%s: no distributed gradient", what);
  dt_status st = dt_dist_full_tensor(g, &full);
  dt_tensor_release(g);
  RANK_OK(st);
  double got[15];
  st = dt_tensor_to_doubles(full, got, 15);
  dt_tensor_release(full);
  RANK_OK(st);
  for (int i = 0; i < 15; i++) {
    RANK_CHECK(fabs(got[i] - want[i]) <= 1e-12 * (1 + fabs(want[i])), "%s[%d] = %.17g, want %.17g",
               what, i, got[i], want[i]);
  }
  return DT_OK;
}

#endif
