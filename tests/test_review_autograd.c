/* Review of the autograd API as a hostile user: a tensor set as its own gradient, a local
 * gradient given to a distributed tensor (and the reverse). Both were accepted before: the
 * first made a reference cycle (the tensor was never freed), the second surfaced only later
 * as an optimizer error far from the call that caused it. */
#include <criterion/criterion.h>

#include "comm_helpers.h"

Test(review_autograd, tensor_cannot_be_its_own_grad) {
  float v[3] = {1, 2, 3};
  dt_tensor *x = NULL, *g = NULL;
  cr_assert_eq(dt_from_data(v, 1, (int64_t[]){3}, DT_F32, &x), DT_OK);
  cr_assert_eq(dt_tensor_set_requires_grad(x, true), DT_OK);
  cr_assert_eq(dt_tensor_set_grad(x, x), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "dt_tensor_set_grad: grad is t itself") != NULL, "%s",
            dt_last_error());
  /* Nothing was installed. */
  cr_assert_eq(dt_tensor_grad(x, &g), DT_OK);
  cr_assert_null(g);
  /* A copy is fine and holds the values. */
  dt_tensor *c = NULL;
  cr_assert_eq(dt_clone(x, &c), DT_OK);
  cr_assert_eq(dt_tensor_set_grad(x, c), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_tensor_grad(x, &g), DT_OK);
  double got[3];
  cr_assert_eq(dt_tensor_to_doubles(g, got, 3), DT_OK);
  cr_assert_float_eq(got[2], 3.0, 0);
  dt_tensor_release(g);
  dt_tensor_release(c);
  dt_tensor_release(x);
}

static dt_status local_grad_for_dist_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){2}, NULL, &mesh));
  float v[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  dt_tensor *full = NULL, *p = NULL, *g = NULL, *dg = NULL;
  RANK_OK(dt_from_data(v, 2, (int64_t[]){4, 2}, DT_F32, &full));
  RANK_OK(dt_dist_distribute_tensor(mesh, full, 1, (dt_placement[]){dt_shard(0)}, &p));
  RANK_OK(dt_tensor_set_requires_grad(p, true));
  /* A local [4, 2] gradient has the distributed tensor's global shape but is not on its mesh. */
  dt_status st = dt_tensor_set_grad(p, full);
  RANK_CHECK(st == DT_ERR_INVALID, "local grad for a distributed t: status %d", st);
  RANK_CHECK(strstr(dt_last_error(), "dt_tensor_set_grad: grad is local but t is distributed"),
             "message: %s", dt_last_error());
  RANK_OK(dt_tensor_grad(p, &g));
  RANK_CHECK(g == NULL, "a gradient was installed");
  /* The reverse: a distributed gradient for a local tensor. */
  RANK_OK(dt_tensor_set_requires_grad(full, true));
  st = dt_tensor_set_grad(full, p);
  RANK_CHECK(st == DT_ERR_INVALID, "distributed grad for a local t: status %d", st);
  RANK_CHECK(strstr(dt_last_error(), "grad is distributed but t is local"), "message: %s",
             dt_last_error());
  /* A distributed gradient on the same mesh is accepted. */
  RANK_OK(dt_dist_distribute_tensor(mesh, full, 1, (dt_placement[]){dt_shard(0)}, &dg));
  RANK_OK(dt_tensor_set_grad(p, dg));
  RANK_OK(dt_tensor_grad(p, &g));
  RANK_CHECK(g == dg, "the gradient is not the one set");
  dt_tensor_release(g);
  dt_tensor_release(dg);
  dt_tensor_release(p);
  dt_tensor_release(full);
  return DT_OK;
}

Test(review_autograd, local_and_distributed_grads_do_not_mix) {
  SPAWN_OK(2, local_grad_for_dist_rank, NULL);
}
