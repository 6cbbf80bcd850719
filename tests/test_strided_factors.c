/* StridedShard with unusual split factors (huge, negative, not dividing) on 3 and 4 ranks,
 * ops on a flattened uneven StridedShard, and a gradient through a StridedShard flatten on 3
 * ranks with one rank holding nothing. Values are compared with the local reference. */
#include <criterion/criterion.h>
#include <limits.h>

#include "comm_helpers.h"
#include "reference.h"
#include "value_helpers.h"

/* ---- StridedShard with unusual split factors and meshes ---------------------------------- */

static dt_status strided_rank(dt_comm *world, void *arg) {
  (void)arg;
  int n = dt_comm_size(world);
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){n}, NULL, &mesh));
  int64_t shape[1] = {6};
  dt_tensor *full = iota_t(1, shape, DT_F32), *out = NULL;
  int factors[] = {INT_MAX, -2, INT_MIN, 12};
  for (int k = 0; k < 4; k++) {
    dt_status st = dt_dist_distribute_tensor(
        mesh, full, 1, (dt_placement[]){dt_strided_shard(0, factors[k])}, &out);
    RANK_CHECK(st == DT_ERR_INVALID && strstr(dt_last_error(), "dt_dist_distribute_tensor"),
               "factor %d: %s: %s", factors[k], dt_status_string(st), dt_last_error());
    RANK_CHECK(out == NULL, "out set on error");
  }
  int dims[] = {1, -2, 7};
  for (int k = 0; k < 3; k++) {
    dt_status st = dt_dist_distribute_tensor(mesh, full, 1,
                                             (dt_placement[]){dt_strided_shard(dims[k], 2)}, &out);
    RANK_CHECK(st != DT_OK && strstr(dt_last_error(), "dt_dist_distribute_tensor"),
               "dim %d: %s: %s", dims[k], dt_status_string(st), dt_last_error());
  }
  /* -1 counts from the end; factor 1 and factor 6 with 6 elements on n ranks (uneven). */
  int okf[] = {1, 2, 3, 6};
  for (int k = 0; k < 4; k++) {
    dt_tensor *x = NULL, *r = NULL, *back = NULL;
    RANK_OK(dt_dist_distribute_tensor(mesh, full, 1, (dt_placement[]){dt_strided_shard(-1, okf[k])},
                                      &x));
    RANK_OK(full_equals("strided distribute", x, full));
    RANK_OK(dt_dist_redistribute(x, 1, (dt_placement[]){dt_shard(0)}, &r));
    RANK_OK(full_equals("strided -> S(0)", r, full));
    RANK_OK(
        dt_dist_redistribute(r, 1, (dt_placement[]){dt_strided_shard(0, okf[(k + 1) % 4])}, &back));
    RANK_OK(full_equals("S(0) -> strided", back, full));
    dt_tensor *y = NULL;
    RANK_OK(
        dt_dist_redistribute(x, 1, (dt_placement[]){dt_strided_shard(0, okf[(k + 2) % 4])}, &y));
    RANK_OK(full_equals("strided -> other factor", y, full));
    dt_tensor *s = NULL, *want = NULL;
    RANK_OK(dt_add(x, y, &s));
    RANK_OK(dt_add(full, full, &want));
    RANK_OK(full_equals("strided + strided of another factor", s, want));
    dt_tensor_release(s);
    dt_tensor_release(want);
    dt_tensor_release(y);
    dt_tensor_release(back);
    dt_tensor_release(r);
    dt_tensor_release(x);
  }
  /* split_factor on a Shard placement is not meaningful. */
  dt_placement odd = dt_shard(0);
  odd.split_factor = 3;
  dt_status st = dt_dist_distribute_tensor(mesh, full, 1, &odd, &out);
  if (st == DT_OK) {
    RANK_OK(full_equals("Shard with split_factor", out, full));
    dt_tensor_release(out);
    out = NULL;
  }
  /* from_local with the wrong local size for a strided placement */
  dt_tensor *local = NULL;
  RANK_OK(dt_zeros(1, (int64_t[]){5}, DT_F32, &local));
  int64_t g = 6;
  dt_dist_from_local_options o = {.global_shape = &g, .global_ndim = 1};
  st = dt_dist_from_local(mesh, local, 1, (dt_placement[]){dt_strided_shard(0, 2)}, &o, &out);
  RANK_CHECK(st != DT_OK && strstr(dt_last_error(), "dt_dist_from_local"), "from_local: %s: %s",
             dt_status_string(st), dt_last_error());
  dt_tensor_release(local);
  dt_tensor_release(full);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(strided_factors, strided_shard_factors_world_3) { SPAWN_OK(3, strided_rank, NULL); }
Test(strided_factors, strided_shard_factors_world_4) { SPAWN_OK(4, strided_rank, NULL); }

/* A flattened [2, 3] S(1) on 3 ranks, then views, a reduction and a matmul. */
static dt_status strided_ops_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){3}, NULL, &mesh));
  int64_t shape[2] = {2, 2}, flat = 4;
  dt_tensor *full = iota_t(2, shape, DT_F32), *ff = NULL;
  RANK_OK(dt_reshape(full, 1, &flat, &ff));
  dt_tensor *x = NULL, *y = NULL, *s = NULL, *ws = NULL, *v2 = NULL, *wv2 = NULL;
  RANK_OK(dt_dist_distribute_tensor(mesh, full, 1, (dt_placement[]){dt_shard(1)}, &x));
  RANK_OK(dt_view(x, 1, &flat, &y));
  RANK_OK(full_equals("flatten on 3 ranks", y, ff));
  RANK_OK(dt_sum(y, &s));
  RANK_OK(dt_sum(ff, &ws));
  RANK_OK(full_equals("sum of strided", s, ws));
  int64_t other[2] = {4, 1};
  RANK_OK(dt_view(y, 2, other, &v2));
  RANK_OK(dt_reshape(ff, 2, other, &wv2));
  RANK_OK(full_equals("strided viewed as [4, 1]", v2, wv2));
  dt_tensor *c = NULL, *wc = NULL;
  RANK_OK(dt_contiguous(y, &c));
  RANK_OK(full_equals("contiguous", c, ff));
  int64_t start = 1, len = 2;
  RANK_OK(dt_narrow(y, 0, start, len, &wc));
  dt_tensor *wn = NULL;
  RANK_OK(dt_narrow(ff, 0, start, len, &wn));
  RANK_OK(full_equals("narrow of strided", wc, wn));
  dt_tensor_release(wn);
  dt_tensor_release(wc);
  dt_tensor_release(c);
  dt_tensor_release(wv2);
  dt_tensor_release(v2);
  dt_tensor_release(ws);
  dt_tensor_release(s);
  dt_tensor_release(y);
  dt_tensor_release(x);
  dt_tensor_release(ff);
  dt_tensor_release(full);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(strided_factors, strided_shard_ops_uneven) { SPAWN_OK(3, strided_ops_rank, NULL); }

/* ---- Gradient through a StridedShard flatten on 3 ranks, one holding nothing ---------------- */

static dt_status strided_grad_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){3}, NULL, &mesh));
  int64_t shape[2] = {3, 2}, flat = 6;
  dt_tensor *full = iota_t(2, shape, DT_F32), *x = NULL, *y = NULL, *sq = NULL, *loss = NULL;
  dt_tensor *grad = NULL, *twice = NULL;
  RANK_OK(dt_dist_distribute_tensor(mesh, full, 1, (dt_placement[]){dt_shard(1)}, &x));
  RANK_OK(dt_tensor_set_requires_grad(x, true));
  RANK_OK(dt_view(x, 1, &flat, &y));
  RANK_OK(dt_mul(y, y, &sq));
  RANK_OK(dt_sum(sq, &loss));
  RANK_OK(dt_backward(loss, NULL));
  RANK_OK(dt_tensor_grad(x, &grad));
  RANK_CHECK(grad != NULL, "no gradient");
  RANK_OK(dt_add(full, full, &twice));
  RANK_OK(full_equals("gradient through the strided flatten", grad, twice));
  dt_status st = dt_backward(loss, NULL);
  RANK_CHECK(st == DT_ERR_INVALID && strstr(dt_last_error(), "dt_backward"), "second: %s: %s",
             dt_status_string(st), dt_last_error());
  dt_tensor_release(twice);
  dt_tensor_release(grad);
  dt_tensor_release(loss);
  dt_tensor_release(sq);
  dt_tensor_release(y);
  dt_tensor_release(x);
  dt_tensor_release(full);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(strided_factors, strided_gradient_three_ranks) { SPAWN_OK(3, strided_grad_rank, NULL); }
