/* Reproduces PyTorch's training fixtures (../shared/fixtures/training, see its README): for
 * each run, zero_grad, forward, loss, backward and an optimizer step, 20 times, from the
 * initial weights; every step's loss must equal PyTorch's (relative 1e-5) and the final
 * weights PyTorch's final weights (relative 1e-4, absolute 1e-6). On 1 rank with local
 * tensors, and on 2, 3 and 4 ranks (threads backend) data-parallel (batch Shard(0),
 * parameters Replicate, Partial gradients reduced by the step) and tensor-parallel (first
 * Linear colwise: weight and bias Shard(0); second rowwise: weight Shard(1), bias
 * Replicate). Batches of 10 and 24 rows and 18 and 32 hidden units give uneven shards. */
#include <criterion/criterion.h>

#include "comm_helpers.h"

#define STEPS 20
#include "training_fixtures.h"
#include "fixture_main.h"
#define LOSS_RTOL 1e-5
#define WEIGHT_RTOL 1e-4
#define WEIGHT_ATOL 1e-6

typedef enum layout { LOCAL, DATA_PARALLEL, TENSOR_PARALLEL } layout;

typedef struct run {
  const char *name;
  bool cross_entropy; /* else mse */
  bool adamw;         /* else SGD */
} run;

static const run runs[] = {{"mlp_mse_sgd", false, false}, {"mlp_ce_adamw", true, true}};
static const char *const param_names[4] = {"0.weight", "0.bias", "2.weight", "2.bias"};

typedef struct train_arg {
  const run *r;
  layout l;
  double losses[STEPS]; /* filled by rank 0 */
} train_arg;

/* A tensor of file as a local tensor or distributed with one placement on a 1-D mesh. */
static dt_status load(dt_safetensors *file, const char *name, dt_mesh *mesh, dt_placement p,
                      dt_tensor **out) {
  if (!mesh) return dt_safetensors_load(file, name, DT_SAFETENSORS_COPY, out);
  return dt_safetensors_load_distributed(file, name, mesh, 1, &p, out);
}

static dt_status placements_of(layout l, dt_placement *params, dt_placement *data) {
  dt_placement R = dt_replicate();
  for (int i = 0; i < 4; i++) params[i] = R;
  *data = R;
  if (l == DATA_PARALLEL) *data = dt_shard(0);
  if (l == TENSOR_PARALLEL) {
    params[0] = dt_shard(0); /* colwise: output features */
    params[1] = dt_shard(0);
    params[2] = dt_shard(1); /* rowwise: input features */
  }
  return DT_OK;
}

static dt_status forward_loss(const run *r, dt_tensor *const *w, dt_tensor *x, dt_tensor *y,
                              dt_tensor **loss) {
  dt_tensor *h = NULL, *a = NULL, *out = NULL;
  dt_status st = dt_linear(x, w[0], w[1], &h);
  if (!st) st = dt_relu(h, &a);
  if (!st) st = dt_linear(a, w[2], w[3], &out);
  if (!st)
    st =
        r->cross_entropy ? dt_cross_entropy(out, y, loss) : dt_mse_loss(out, y, DT_LOSS_MEAN, loss);
  dt_tensor_release(h);
  dt_tensor_release(a);
  dt_tensor_release(out);
  return st;
}

static dt_status compare_final(const run *r, dt_tensor *const *w) {
  return fixture_compare_final(r->name, w, param_names, 4, WEIGHT_RTOL, WEIGHT_ATOL, false);
}

/* Trains run r under layout l on mesh (NULL: local), recording each step's loss. */
static dt_status train(const run *r, layout l, dt_mesh *mesh, double *losses) {
  dt_placement pp[4], dp;
  placements_of(l, pp, &dp);
  dt_safetensors *init = NULL, *data = NULL;
  dt_tensor *w[4] = {0}, *x = NULL, *y = NULL;
  dt_optimizer *opt = NULL;
  RANK_OK(open_fixture(r->name, "init", &init));
  RANK_OK(open_fixture(r->name, "data", &data));
  for (int i = 0; i < 4; i++) {
    RANK_OK(load(init, param_names[i], mesh, pp[i], &w[i]));
    RANK_OK(dt_tensor_set_requires_grad(w[i], true));
  }
  RANK_OK(load(data, "x", mesh, dp, &x));
  RANK_OK(load(data, "y", mesh, dp, &y));
  dt_safetensors_destroy(init);
  dt_safetensors_destroy(data);
  if (r->adamw) {
    /* PyTorch's AdamW defaults but lr: betas 0.9, 0.999, eps 1e-8, weight_decay 0.01. */
    dt_adam_options o = {.lr = 1e-2};
    RANK_OK(dt_optimizer_create_adamw(4, w, &o, &opt));
  } else {
    dt_sgd_options o = {.lr = 0.05, .momentum = 0.9};
    RANK_OK(dt_optimizer_create_sgd(4, w, &o, &opt));
  }
  for (int s = 0; s < STEPS; s++) {
    dt_tensor *loss = NULL;
    RANK_OK(dt_optimizer_zero_grad(opt, true));
    RANK_OK(forward_loss(r, w, x, y, &loss));
    RANK_OK(dt_backward(loss, NULL));
    RANK_OK(loss_value(loss, &losses[s]));
    dt_tensor_release(loss);
    RANK_OK(dt_optimizer_step(opt));
  }
  /* State placed like its parameter: the second layer's weight under TP is Shard(1). */
  dt_tensor *state = NULL;
  RANK_OK(dt_optimizer_state(opt, 2, r->adamw ? "exp_avg" : "momentum_buffer", &state, NULL));
  RANK_CHECK(dt_tensor_is_distributed(state) == (mesh != NULL), "state placement");
  if (mesh) {
    dt_placement sp = dt_dist_placements(state)[0];
    RANK_CHECK(sp.kind == pp[2].kind && sp.dim == pp[2].dim, "state of 2.weight is not like it");
  }
  dt_tensor_release(state);
  RANK_OK(compare_final(r, w));
  dt_optimizer_destroy(opt);
  for (int i = 0; i < 4; i++) dt_tensor_release(w[i]);
  dt_tensor_release(x);
  dt_tensor_release(y);
  return DT_OK;
}

static dt_status rank_main(dt_comm *world, void *varg) {
  train_arg *arg = varg;
  dt_mesh *mesh = NULL;
  double losses[STEPS];
  RANK_OK(dt_mesh_create(world, 1, (int[]){dt_comm_size(world)}, NULL, &mesh));
  dt_status st = train(arg->r, arg->l, mesh, losses);
  if (!st && dt_comm_rank(world) == 0) memcpy(arg->losses, losses, sizeof losses);
  dt_mesh_destroy(mesh);
  return st;
}

static void check_losses(const run *r, const char *what, const double *got) {
  double want[STEPS];
  cr_assert(expected_losses(r->name, want), "cannot read expected.json for %s", r->name);
  for (int s = 0; s < STEPS; s++) {
    cr_expect(fabs(got[s] - want[s]) <= LOSS_RTOL * fabs(want[s]),
              "%s %s step %d: loss %.9g, PyTorch %.9g (rel %.2g)", r->name, what, s + 1, got[s],
              want[s], fabs(got[s] - want[s]) / fabs(want[s]));
  }
}

Test(train_fixtures, one_rank_local) {
  if (!fixtures_present()) cr_skip_test("no fixtures at %s", DT_FIXTURES_DIR);
  for (int i = 0; i < 2; i++) {
    double losses[STEPS];
    dt_status st = train(&runs[i], LOCAL, NULL, losses);
    cr_assert_eq(st, DT_OK, "%s: %s", runs[i].name, dt_last_error());
    check_losses(&runs[i], "local", losses);
  }
}

static void distributed(layout l, const char *what) {
  if (!fixtures_present()) cr_skip_test("no fixtures at %s", DT_FIXTURES_DIR);
  for (int ranks = 1; ranks <= 4; ranks++) {
    for (int i = 0; i < 2; i++) {
      train_arg arg = {.r = &runs[i], .l = l};
      dt_status st = dt_comm_spawn(ranks, rank_main, &arg);
      cr_assert_eq(st, DT_OK, "%s %s on %d ranks: %s", runs[i].name, what, ranks, dt_last_error());
      char label[64];
      snprintf(label, sizeof label, "%s on %d ranks", what, ranks);
      check_losses(&runs[i], label, arg.losses);
    }
  }
}

Test(train_fixtures, data_parallel_1_to_4_ranks, .timeout = 120) {
  distributed(DATA_PARALLEL, "data-parallel");
}

Test(train_fixtures, tensor_parallel_1_to_4_ranks, .timeout = 120) {
  distributed(TENSOR_PARALLEL, "tensor-parallel");
}
