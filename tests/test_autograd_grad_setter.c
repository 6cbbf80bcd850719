/* The autograd API under hostile use: a tensor set as its own gradient, or as a
 * gradient a recorded tensor made from it (a reference cycle: neither was ever freed), and a
 * local gradient given to a distributed tensor (and the reverse), which surfaced only later
 * as an optimizer error far from the call that caused it. */
#include <criterion/criterion.h>

#include "comm_helpers.h"

Test(autograd_grad_setter, tensor_cannot_be_its_own_grad) {
  int64_t live = dt_autograd_live_nodes();
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
  /* A recorded copy of x (its node leads back to x) is stored detached: same values, no graph,
   * so x does not keep its own graph alive. Before, the node outlived every handle. */
  dt_tensor *c = NULL;
  cr_assert_eq(dt_clone(x, &c), DT_OK);
  cr_assert(dt_tensor_requires_grad(c));
  cr_assert_eq(dt_autograd_live_nodes(), live + 1);
  cr_assert_eq(dt_tensor_set_grad(x, c), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_tensor_grad(x, &g), DT_OK);
  cr_assert(!dt_tensor_requires_grad(g));
  double got[3];
  cr_assert_eq(dt_tensor_to_doubles(g, got, 3), DT_OK);
  cr_assert_float_eq(got[2], 3.0, 0);
  /* An alias: writing through the gradient is seen through c. */
  cr_assert_eq(dt_fill_(g, 5.0), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_tensor_to_doubles(c, got, 3), DT_OK);
  cr_assert_float_eq(got[0], 5.0, 0);
  dt_tensor_release(g);
  dt_tensor_release(c);
  dt_tensor_release(x);
  cr_assert_eq(dt_autograd_live_nodes(), live, "recorded nodes leaked: %lld alive, %lld before",
               (long long)dt_autograd_live_nodes(), (long long)live);
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
  /* A distributed gradient on the same mesh is accepted (full requires grad now, so dg was
   * recorded and is stored as a detached alias with the same shard). */
  RANK_OK(dt_dist_distribute_tensor(mesh, full, 1, (dt_placement[]){dt_shard(0)}, &dg));
  RANK_OK(dt_tensor_set_grad(p, dg));
  RANK_OK(dt_tensor_grad(p, &g));
  RANK_CHECK(g != NULL && dt_tensor_is_distributed(g) && !dt_tensor_requires_grad(g),
             "the gradient is missing, local or recorded");
  dt_tensor *gl = NULL, *dl = NULL;
  RANK_OK(dt_dist_to_local(g, &gl));
  RANK_OK(dt_dist_to_local(dg, &dl));
  RANK_CHECK(dt_tensor_data(gl) == dt_tensor_data(dl), "the gradient does not alias the one set");
  double got[4];
  RANK_OK(dt_tensor_to_doubles(gl, got, 4));
  int rank = dt_comm_rank(world);
  RANK_CHECK(got[0] == v[rank * 4] && got[3] == v[rank * 4 + 3], "rank %d shard %g..%g", rank,
             got[0], got[3]);
  dt_tensor_release(gl);
  dt_tensor_release(dl);
  dt_tensor_release(g);
  dt_tensor_release(dg);
  dt_tensor_release(p);
  dt_tensor_release(full);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(autograd_grad_setter, local_and_distributed_grads_do_not_mix) {
  SPAWN_OK(2, local_grad_for_dist_rank, NULL);
}
