/*
 * Expert parallelism (dt_parallel_expert_parallel) against one rank holding every expert: each
 * rank routes its own tokens; its outputs, its input's gradient, and each expert's gradient on
 * the rank that holds it (summed over every rank's tokens) equal the one-rank values. Over 2
 * and 4 ranks with 3 and 4 experts: uneven splits, a rank without experts.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_helpers.h"
#include "dtensor/dtensor.h"

enum { NT = 7, D = 6, K = 2, F = 5, MAX_RANKS = 4, MAX_E = 4 };

typedef struct ep_case {
  int world;
  int64_t experts;
  double y[MAX_RANKS][NT * D], gx[MAX_RANKS][NT * D];
  double gexp[MAX_E][F * D]; /* experts.e.gate_proj.weight's gradient, summed over the ranks */
} ep_case;

static dt_status make(int64_t experts, dt_module **out) {
  dt_nn_moe_options o = {
      .n_experts = experts, .top_k = K, .hidden = F, .norm_topk_prob = true, .seed = 9};
  RANK_OK(dt_nn_moe(D, &o, out));
  for (int64_t e = 0; e < experts; e++) {
    const char *parts[] = {"gate_proj", "up_proj", "down_proj"};
    for (int p = 0; p < 3; p++) {
      char name[64];
      snprintf(name, sizeof name, "experts.%lld.%s.weight", (long long)e, parts[p]);
      RANK_OK(dt_tensor_set_requires_grad(dt_module_get_tensor(*out, name), true));
    }
  }
  return dt_tensor_set_requires_grad(dt_module_get_tensor(*out, "gate.weight"), true);
}

/* Rank r's tokens x [NT, D] and the loss weights [NT, D]. */
static dt_status inputs(int r, dt_tensor **x, dt_tensor **w) {
  RANK_OK(dt_randn(2, (int64_t[]){NT, D}, DT_F32, 100 + (uint64_t)r, x));
  RANK_OK(dt_tensor_set_requires_grad(*x, true));
  return dt_randn(2, (int64_t[]){NT, D}, DT_F32, 200 + (uint64_t)r, w);
}

/* forward, loss sum(y * w), backward; y and x's gradient to doubles. */
static dt_status step(dt_module *m, int r, double *y_out, double *gx_out) {
  dt_tensor *x = NULL, *w = NULL, *y = NULL, *yw = NULL, *l = NULL, *g = NULL;
  RANK_OK(inputs(r, &x, &w));
  RANK_OK(dt_module_forward(m, x, &y));
  RANK_OK(dt_mul(y, w, &yw));
  RANK_OK(dt_sum(yw, &l));
  RANK_OK(dt_backward(l, NULL));
  RANK_OK(dt_tensor_to_doubles(y, y_out, NT * D));
  RANK_OK(dt_tensor_grad(x, &g));
  RANK_CHECK(g != NULL, "rank %d: x has no gradient", r);
  RANK_OK(dt_tensor_to_doubles(g, gx_out, NT * D));
  dt_tensor *rel[] = {x, w, y, yw, l, g};
  for (int i = 0; i < 6; i++) dt_tensor_release(rel[i]);
  return DT_OK;
}

static bool close(double a, double b) { return fabs(a - b) <= 1e-5 * (1 + fabs(b)); }

static dt_status ep_rank(dt_comm *world, void *arg) {
  ep_case *c = arg;
  int r = dt_comm_rank(world);
  dt_mesh *mesh = NULL;
  dt_module *m = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){c->world}, (const char *[]){"ep"}, &mesh));
  RANK_OK(make(c->experts, &m));
  RANK_OK(dt_parallel_expert_parallel(m, mesh, 0));
  double y[NT * D], gx[NT * D];
  RANK_OK(step(m, r, y, gx));
  for (int i = 0; i < NT * D; i++) {
    RANK_CHECK(close(y[i], c->y[r][i]), "rank %d y[%d] %.7g, one rank %.7g", r, i, y[i],
               c->y[r][i]);
    RANK_CHECK(close(gx[i], c->gx[r][i]), "rank %d dx[%d] %.7g, one rank %.7g", r, i, gx[i],
               c->gx[r][i]);
  }
  int64_t chunk = (c->experts + c->world - 1) / c->world, held = 0;
  for (int64_t e = 0; e < c->experts; e++) {
    char name[64];
    snprintf(name, sizeof name, "experts.%lld.gate_proj.weight", (long long)e);
    dt_tensor *w = dt_module_get_tensor(m, name);
    bool mine = e >= r * chunk && e < (r + 1) * chunk;
    RANK_CHECK((w != NULL) == mine, "rank %d %s expert %lld", r, w ? "holds" : "lacks",
               (long long)e);
    if (!w) continue;
    held++;
    dt_tensor *g = NULL;
    double gv[F * D] = {0};
    RANK_OK(dt_tensor_grad(w, &g));
    if (g) RANK_OK(dt_tensor_to_doubles(g, gv, F * D));
    for (int i = 0; i < F * D; i++)
      RANK_CHECK(close(gv[i], c->gexp[e][i]), "rank %d expert %lld grad[%d] %.7g, one rank %.7g", r,
                 (long long)e, i, gv[i], c->gexp[e][i]);
    dt_tensor_release(g);
  }
  (void)held;
  dt_module_destroy(m);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

static void run(int world, int64_t experts) {
  ep_case *c = calloc(1, sizeof *c);
  c->world = world, c->experts = experts;
  dt_module *m = NULL;
  cr_assert_eq(make(experts, &m), DT_OK, "%s", dt_last_error());
  /* One rank with every expert, fed each rank's tokens in turn: the expert gradients sum. */
  for (int r = 0; r < world; r++)
    cr_assert_eq(step(m, r, c->y[r], c->gx[r]), DT_OK, "%s", dt_last_error());
  for (int64_t e = 0; e < experts; e++) {
    char name[64];
    snprintf(name, sizeof name, "experts.%lld.gate_proj.weight", (long long)e);
    dt_tensor *g = NULL;
    cr_assert_eq(dt_tensor_grad(dt_module_get_tensor(m, name), &g), DT_OK);
    if (g) cr_assert_eq(dt_tensor_to_doubles(g, c->gexp[e], F * D), DT_OK);
    dt_tensor_release(g);
  }
  dt_module_destroy(m);
  SPAWN_OK(world, ep_rank, c);
  free(c);
}

Test(nn_moe_ep, two_ranks_four_experts, .timeout = 60) { run(2, 4); }
Test(nn_moe_ep, two_ranks_three_experts_uneven, .timeout = 60) { run(2, 3); }
Test(nn_moe_ep, four_ranks_three_experts_one_without, .timeout = 60) { run(4, 3); }

/* The backward runs after the model and the mesh were released: the exchanges' autograd nodes
 * keep what they need (was a use after free). */
static dt_status late_backward_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  dt_module *m = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){2}, (const char *[]){"ep"}, &mesh));
  RANK_OK(make(4, &m));
  RANK_OK(dt_parallel_expert_parallel(m, mesh, 0));
  dt_tensor *x = NULL, *w = NULL, *y = NULL, *s = NULL, *g = NULL;
  RANK_OK(inputs(dt_comm_rank(world), &x, &w));
  RANK_OK(dt_module_forward(m, x, &y));
  RANK_OK(dt_sum(y, &s));
  dt_module_destroy(m);
  dt_mesh_destroy(mesh);
  RANK_OK(dt_backward(s, NULL));
  RANK_OK(dt_tensor_grad(x, &g));
  RANK_CHECK(g != NULL, "x has no gradient");
  dt_tensor *rel[] = {x, w, y, s, g};
  for (int i = 0; i < 5; i++) dt_tensor_release(rel[i]);
  return DT_OK;
}

Test(nn_moe_ep, backward_after_the_model_and_mesh_are_gone, .timeout = 60) {
  SPAWN_OK(2, late_backward_rank, NULL);
}

Test(nn_moe_ep, bad_arguments_are_refused_by_name) {
  dt_module *lin = NULL;
  cr_assert_eq(dt_nn_linear(2, 2, false, 1, &lin), DT_OK);
  cr_assert_eq(dt_parallel_expert_parallel(lin, NULL, 0), DT_ERR_INVALID);
  dt_comm *world = NULL;
  cr_assert_eq(dt_comm_init(&(dt_comm_options){.backend = "threads", .world_size = 1}, &world),
               DT_OK);
  dt_mesh *mesh = NULL;
  cr_assert_eq(dt_mesh_create(world, 1, (int[]){1}, NULL, &mesh), DT_OK);
  cr_assert_eq(dt_parallel_expert_parallel(lin, mesh, 0), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "holds no MoE"), "%s", dt_last_error());
  cr_assert_eq(dt_parallel_expert_parallel(lin, mesh, 1), DT_ERR_INVALID);
  dt_module *moe = NULL;
  cr_assert_eq(make(3, &moe), DT_OK);
  cr_assert_eq(dt_parallel_expert_parallel(moe, mesh, 0), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_parallel_expert_parallel(moe, mesh, 0), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "already split"), "%s", dt_last_error());
  dt_module_destroy(moe), dt_module_destroy(lin);
  dt_mesh_destroy(mesh);
  dt_comm_destroy(world);
}
