/* The loss API under hostile use: mse_loss on integer tensors was computed in
 * integer arithmetic (a truncated mean, no gradient) although the header asks for floating
 * tensors; it now fails with DT_ERR_DTYPE naming both dtypes. Also pinned: cross_entropy's
 * mean over zero counted rows is NaN (PyTorch), local and batch-sharded. */
#include <criterion/criterion.h>

#include "comm_helpers.h"

Test(loss_edge_cases, mse_refuses_integers) {
  int64_t a[3] = {1, 2, 4}, b[3] = {0, 0, 0};
  dt_tensor *x = NULL, *y = NULL, *out = NULL;
  cr_assert_eq(dt_from_data(a, 1, (int64_t[]){3}, DT_I64, &x), DT_OK);
  cr_assert_eq(dt_from_data(b, 1, (int64_t[]){3}, DT_I64, &y), DT_OK);
  /* Before the fix: DT_OK with an int64 mean of 21 / 3 = 7 computed as integers. */
  cr_assert_eq(dt_mse_loss(x, y, DT_LOSS_MEAN, &out), DT_ERR_DTYPE);
  cr_assert_null(out);
  cr_assert(strstr(dt_last_error(), "dt_mse_loss: input int64 and target int64") != NULL, "%s",
            dt_last_error());
  /* A floating input against an integer target too. */
  float f[3] = {1, 2, 4};
  dt_tensor *xf = NULL;
  cr_assert_eq(dt_from_data(f, 1, (int64_t[]){3}, DT_F32, &xf), DT_OK);
  cr_assert_eq(dt_mse_loss(xf, y, DT_LOSS_SUM, &out), DT_ERR_DTYPE);
  cr_assert(strstr(dt_last_error(), "input float32 and target int64") != NULL, "%s",
            dt_last_error());
  /* Floating is still fine: (1 + 4 + 16) / 3 = 7. */
  dt_tensor *yf = NULL;
  float z[3] = {0, 0, 0};
  cr_assert_eq(dt_from_data(z, 1, (int64_t[]){3}, DT_F32, &yf), DT_OK);
  cr_assert_eq(dt_mse_loss(xf, yf, DT_LOSS_MEAN, &out), DT_OK, "%s", dt_last_error());
  double v = 0;
  cr_assert_eq(dt_tensor_to_doubles(out, &v, 1), DT_OK);
  cr_assert_float_eq(v, 7.0, 1e-6);
  dt_tensor_release(out);
  dt_tensor_release(x);
  dt_tensor_release(y);
  dt_tensor_release(xf);
  dt_tensor_release(yf);
}

static dt_status all_ignored_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){2}, NULL, &mesh));
  float lg[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  int64_t tg[3] = {7, 7, 7};
  dt_tensor *logits = NULL, *target = NULL, *dl = NULL, *dt = NULL, *out = NULL, *full = NULL;
  RANK_OK(dt_from_data(lg, 2, (int64_t[]){3, 4}, DT_F32, &logits));
  RANK_OK(dt_from_data(tg, 1, (int64_t[]){3}, DT_I64, &target));
  RANK_OK(dt_dist_distribute_tensor(mesh, logits, 1, (dt_placement[]){dt_shard(0)}, &dl));
  RANK_OK(dt_dist_distribute_tensor(mesh, target, 1, (dt_placement[]){dt_shard(0)}, &dt));
  dt_cross_entropy_options o = {.ignore_index = &(int64_t){7}};
  RANK_OK(dt_cross_entropy_ex(dl, dt, &o, &out));
  RANK_OK(dt_dist_full_tensor(out, &full));
  double v = 0;
  RANK_OK(dt_tensor_to_doubles(full, &v, 1));
  RANK_CHECK(isnan(v), "mean over zero targets is %g, expected NaN", v);
  dt_tensor_release(full);
  dt_tensor_release(out);
  dt_tensor_release(dl);
  dt_tensor_release(dt);
  dt_tensor_release(logits);
  dt_tensor_release(target);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(loss_edge_cases, cross_entropy_mean_over_zero_targets_is_nan) {
  float lg[6] = {1, 2, 3, 4, 5, 6};
  int64_t tg[2] = {7, 7};
  dt_tensor *logits = NULL, *target = NULL, *out = NULL;
  cr_assert_eq(dt_from_data(lg, 2, (int64_t[]){2, 3}, DT_F32, &logits), DT_OK);
  cr_assert_eq(dt_from_data(tg, 1, (int64_t[]){2}, DT_I64, &target), DT_OK);
  dt_cross_entropy_options o = {.ignore_index = &(int64_t){7}};
  cr_assert_eq(dt_cross_entropy_ex(logits, target, &o, &out), DT_OK, "%s", dt_last_error());
  double v = 0;
  cr_assert_eq(dt_tensor_to_doubles(out, &v, 1), DT_OK);
  cr_assert(isnan(v), "got %g", v);
  dt_tensor_release(out);
  dt_tensor_release(logits);
  dt_tensor_release(target);
  SPAWN_OK(2, all_ignored_rank, NULL);
}

/* Arguments on two mesh objects, or a distributed one with a local one, failed inside the
 * first inner op ("eq.Tensor: argument 1 lies on mesh (2) ...", "sub.Tensor: ..."): the
 * message now names the public function and both arguments. */
static dt_status mixed_meshes_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *m1 = NULL, *m2 = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){2}, NULL, &m1));
  RANK_OK(dt_mesh_create(world, 1, (int[]){2}, NULL, &m2));
  float lg[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  int64_t tg[4] = {0, 1, 2, 2};
  dt_tensor *logits = NULL, *target = NULL, *l1 = NULL, *t2 = NULL, *x1 = NULL, *x2 = NULL;
  dt_tensor *out = NULL;
  RANK_OK(dt_from_data(lg, 2, (int64_t[]){4, 3}, DT_F32, &logits));
  RANK_OK(dt_from_data(tg, 1, (int64_t[]){4}, DT_I64, &target));
  RANK_OK(dt_dist_distribute_tensor(m1, logits, 1, (dt_placement[]){dt_shard(1)}, &l1));
  RANK_OK(dt_dist_distribute_tensor(m2, target, 1, (dt_placement[]){dt_replicate()}, &t2));
  dt_status st = dt_cross_entropy(l1, t2, &out);
  RANK_CHECK(st == DT_ERR_INVALID && out == NULL, "status %d", st);
  RANK_CHECK(strstr(dt_last_error(),
                    "dt_cross_entropy_ex: logits and target lie on different mesh objects"),
             "message: %s", dt_last_error());
  st = dt_cross_entropy(l1, target, &out);
  RANK_CHECK(st == DT_ERR_INVALID, "status %d", st);
  RANK_CHECK(strstr(dt_last_error(), "dt_cross_entropy_ex: logits is distributed but target is "
                                     "local"),
             "message: %s", dt_last_error());
  RANK_OK(dt_dist_distribute_tensor(m1, logits, 1, (dt_placement[]){dt_replicate()}, &x1));
  RANK_OK(dt_dist_distribute_tensor(m2, logits, 1, (dt_placement[]){dt_replicate()}, &x2));
  st = dt_mse_loss(x1, x2, DT_LOSS_MEAN, &out);
  RANK_CHECK(st == DT_ERR_INVALID, "status %d", st);
  RANK_CHECK(strstr(dt_last_error(), "dt_mse_loss: input and target lie on different mesh"),
             "message: %s", dt_last_error());
  st = dt_mse_loss(logits, x1, DT_LOSS_MEAN, &out);
  RANK_CHECK(st == DT_ERR_INVALID, "status %d", st);
  RANK_CHECK(strstr(dt_last_error(), "dt_mse_loss: input is local but target is distributed"),
             "message: %s", dt_last_error());
  /* The same mesh still works: vocabulary-parallel equals the local loss. */
  dt_tensor *t1 = NULL, *full = NULL, *ref = NULL;
  RANK_OK(dt_dist_distribute_tensor(m1, target, 1, (dt_placement[]){dt_replicate()}, &t1));
  RANK_OK(dt_cross_entropy(l1, t1, &out));
  RANK_OK(dt_dist_full_tensor(out, &full));
  RANK_OK(dt_cross_entropy(logits, target, &ref));
  double a = 0, b = 0;
  RANK_OK(dt_tensor_to_doubles(full, &a, 1));
  RANK_OK(dt_tensor_to_doubles(ref, &b, 1));
  RANK_CHECK(fabs(a - b) < 1e-6 && fabs(b - 1.1576) < 1e-3, "vocab-parallel %g, local %g", a, b);
  dt_tensor_release(t1);
  dt_tensor_release(full);
  dt_tensor_release(ref);
  dt_tensor_release(out);
  dt_tensor_release(x1);
  dt_tensor_release(x2);
  dt_tensor_release(l1);
  dt_tensor_release(t2);
  dt_tensor_release(logits);
  dt_tensor_release(target);
  dt_mesh_destroy(m1);
  dt_mesh_destroy(m2);
  return DT_OK;
}

Test(loss_edge_cases, arguments_on_different_meshes_are_named) {
  SPAWN_OK(2, mixed_meshes_rank, NULL);
}
