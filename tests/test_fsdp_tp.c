/* 2-D FSDP x TP as TorchTitan trains (dt_parallel_tp_module on "tp", then dt_parallel_fsdp on
 * "dp", of a 2 x 2 mesh): PyTorch's training fixtures (../shared/fixtures/training) must give
 * PyTorch's loss at every step (relative 1e-5) and its final weights (relative 1e-4). Each
 * parameter is sharded over dp on a tensor dim that tp does not shard (colwise weight
 * [Shard(1), Shard(0)], rowwise weight [Shard(0), Shard(1)]); a colwise bias has no free dim
 * and stays [Replicate, Shard(0)]. Gradients come back with the parameters' placements; the
 * forward all-gathers move exactly the tp-local shards (nothing is ever gathered over tp).
 * Also: the hook list of dt_module_add_hooks (order, replacement, errors). */
#include <criterion/criterion.h>

#include "comm_helpers.h"
#include "dtensor/parallel.h"

#define STEPS 20
#include "training_fixtures.h"
#include "fixture_mlp.h"
#include "fixture_main.h"
#define LOSS_RTOL 1e-5
#define WEIGHT_RTOL 1e-4
#define WEIGHT_ATOL 1e-6

/* The placements each parameter must have after both calls, as [dp, tp]. */
static const dt_placement want_p[4][2] = {
    {{.kind = DT_SHARD, .dim = 1}, {.kind = DT_SHARD, .dim = 0}},
    {{.kind = DT_REPLICATE}, {.kind = DT_SHARD, .dim = 0}},
    {{.kind = DT_SHARD, .dim = 0}, {.kind = DT_SHARD, .dim = 1}},
    {{.kind = DT_SHARD, .dim = 0}, {.kind = DT_REPLICATE}},
};
/* Whether tp shards the parameter (so its tp-local piece is half of it). */
static const bool tp_sharded[4] = {true, true, true, false};

typedef struct train_arg {
  const run *r;
  dt_dtype param_dtype, reduce_dtype; /* the mixed precision policy (DT_F32: none) */
  double weight_rtol;
  bool norm_compare;    /* relative L2 distance per parameter instead of per element */
  double losses[STEPS]; /* filled by rank 0 */
  char ledger_text[2048];
} train_arg;

static bool same_placement(dt_placement a, dt_placement b) {
  return a.kind == b.kind && (a.kind != DT_SHARD || a.dim == b.dim);
}

static dt_status compare_final(const train_arg *arg, dt_tensor *const *w) {
  /* float32: every element; mixed precision: the relative L2 distance of each parameter
   * (Adam moves a weight near zero by lr per step whichever way a bf16 rounding tips its
   * gradient's sign, so single elements say little). */
  return fixture_compare_final(arg->r->name, w, param_names, 4, arg->weight_rtol, WEIGHT_ATOL,
                               arg->norm_compare);
}

static dt_status train(train_arg *arg, dt_mesh *mesh, double *losses, char *ledger_text,
                       size_t ledger_size) {
  const run *r = arg->r;
  dt_module *model = NULL;
  RANK_OK(build_model(r, &model));
  /* TorchTitan's order: tensor parallelism on "tp" (the last dim, the default), then FSDP on
   * "dp" around it. */
  dt_tp_plan plan = {2, (dt_tp_plan_entry[]){{"0", DT_TP_COLWISE}, {"2", DT_TP_ROWWISE}}};
  RANK_OK(dt_parallel_tp_module(model, mesh, &plan, NULL));
  dt_fsdp_options fo = {
      .mesh_dim = 0, .param_dtype = arg->param_dtype, .reduce_dtype = arg->reduce_dtype};
  RANK_OK(dt_parallel_fsdp(model, mesh, &fo));

  params_ctx pc = {0};
  RANK_OK(dt_module_visit_tensors(model, collect, &pc));
  RANK_CHECK(pc.n == 4, "%d parameters after fully_shard", pc.n);
  dt_tensor *w[4];
  int64_t tp_local_bytes = 0; /* what the forward all-gathers must move */
  for (int i = 0; i < 4; i++) {
    w[i] = pc.t[i];
    RANK_CHECK(strcmp(pc.names[i], param_names[i]) == 0, "parameter %d is %s", i, pc.names[i]);
    RANK_CHECK(dt_tensor_is_distributed(w[i]) && dt_tensor_is_leaf(w[i]) &&
                   dt_tensor_requires_grad(w[i]) && dt_dist_mesh(w[i]) == mesh,
               "%s is not a distributed leaf on the mesh requiring grad", param_names[i]);
    for (int d = 0; d < 2; d++) {
      RANK_CHECK(same_placement(dt_dist_placements(w[i])[d], want_p[i][d]),
                 "%s: mesh dim %d has kind %d dim %d", param_names[i], d,
                 (int)dt_dist_placements(w[i])[d].kind, dt_dist_placements(w[i])[d].dim);
    }
    if (want_p[i][0].kind == DT_SHARD) {
      int64_t numel = 1;
      for (int k = 0; k < dt_dist_ndim(w[i]); k++) numel *= dt_dist_global_shape(w[i])[k];
      tp_local_bytes += numel / (tp_sharded[i] ? 2 : 1) * 4;
    }
    dt_tensor_retain(w[i]);
  }

  dt_safetensors *data = NULL;
  dt_tensor *x = NULL, *y = NULL;
  dt_placement batch[2] = {dt_shard(0), dt_replicate()};
  RANK_OK(open_fixture(r->name, "data", &data));
  RANK_OK(dt_safetensors_load_distributed(data, "x", mesh, 2, batch, &x));
  RANK_OK(dt_safetensors_load_distributed(data, "y", mesh, 2, batch, &y));
  dt_safetensors_destroy(data);

  dt_optimizer *opt = NULL;
  if (r->adamw) {
    dt_adam_options o = {
        .lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01};
    RANK_OK(dt_optimizer_create_adamw(4, w, &o, &opt));
  } else {
    dt_sgd_options o = {.lr = 0.05, .momentum = 0.9};
    RANK_OK(dt_optimizer_create_sgd(4, w, &o, &opt));
  }
  for (int s = 0; s < STEPS; s++) {
    dt_tensor *out = NULL, *loss = NULL;
    dt_comm_ledger *fwd = NULL, *bwd = NULL;
    RANK_OK(dt_optimizer_zero_grad(opt, true));
    if (s == 0) RANK_OK(dt_comm_ledger_start(&fwd));
    RANK_OK(dt_module_forward(model, x, &out));
    if (s == 0) RANK_OK(dt_comm_ledger_stop(fwd));
    /* Resharded after forward: the module holds the 2-D shards again. */
    for (int i = 0; i < 4; i++) {
      RANK_CHECK(dt_module_get_tensor(model, param_names[i]) == w[i],
                 "after forward %s is not the sharded leaf", param_names[i]);
    }
    RANK_CHECK(dt_tensor_dtype(out) == (arg->param_dtype == DT_F32 ? DT_F32 : arg->param_dtype),
               "output dtype %s", dt_dtype_name(dt_tensor_dtype(out)));
    RANK_OK(r->cross_entropy ? dt_cross_entropy(out, y, &loss)
                             : dt_mse_loss(out, y, DT_LOSS_MEAN, &loss));
    dt_tensor_release(out);
    if (s == 0) RANK_OK(dt_comm_ledger_start(&bwd));
    RANK_OK(dt_backward(loss, NULL));
    if (s == 0) RANK_OK(dt_comm_ledger_stop(bwd));
    if (s == 0) {
      size_t used = (size_t)snprintf(ledger_text, ledger_size, "forward:\n");
      dt_comm_ledger_format(fwd, ledger_text + used, ledger_size - used);
      used = strlen(ledger_text);
      snprintf(ledger_text + used, ledger_size - used, "backward:\n");
      used = strlen(ledger_text);
      dt_comm_ledger_format(bwd, ledger_text + used, ledger_size - used);
      /* Three dp-sharded parameters: one all-gather each over dp, whose buffers are the
       * tp-local pieces (a gather over tp would move twice as much); in backward one
       * reduce-scatter each back to the 2-D shard. */
      int64_t ag = dt_comm_ledger_count(fwd, "all_gather") +
                   dt_comm_ledger_count(fwd, "all_gather_uneven"),
              ag_bytes = dt_comm_ledger_bytes(fwd, "all_gather") +
                         dt_comm_ledger_bytes(fwd, "all_gather_uneven"),
              rs = dt_comm_ledger_count(bwd, "reduce_scatter") +
                   dt_comm_ledger_count(bwd, "reduce_scatter_uneven"),
              bwd_ag = dt_comm_ledger_count(bwd, "all_gather") +
                       dt_comm_ledger_count(bwd, "all_gather_uneven");
      RANK_CHECK(ag == 3, "forward all-gathers: %lld\n%s", (long long)ag, ledger_text);
      /* bf16 parameters are cast before the gather: half the bytes; the gradients are
       * reduced in reduce_dtype. */
      int64_t want_ag = tp_local_bytes / (int64_t)(4 / dt_dtype_size(arg->param_dtype)),
              want_rs = tp_local_bytes / (int64_t)(4 / dt_dtype_size(arg->reduce_dtype)),
              rs_bytes = dt_comm_ledger_bytes(bwd, "reduce_scatter") +
                         dt_comm_ledger_bytes(bwd, "reduce_scatter_uneven");
      RANK_CHECK(ag_bytes == want_ag, "forward all-gathered %lld bytes, expected %lld\n%s",
                 (long long)ag_bytes, (long long)want_ag, ledger_text);
      RANK_CHECK(rs_bytes == want_rs, "backward reduce-scattered %lld bytes, expected %lld\n%s",
                 (long long)rs_bytes, (long long)want_rs, ledger_text);
      RANK_CHECK(rs == 3, "backward reduce-scatters: %lld\n%s", (long long)rs, ledger_text);
      /* Reshard after forward freed the gathered parameters: the pre-backward gathers the
       * same three again, the same bytes. */
      int64_t bwd_ag_bytes =
          dt_comm_ledger_bytes(bwd, "all_gather") + dt_comm_ledger_bytes(bwd, "all_gather_uneven");
      RANK_CHECK(bwd_ag == 3 && bwd_ag_bytes == want_ag, "backward all-gathers: %lld (%lld B)\n%s",
                 (long long)bwd_ag, (long long)bwd_ag_bytes, ledger_text);
      dt_comm_ledger_destroy(fwd);
      dt_comm_ledger_destroy(bwd);
      /* Gradients land on the leaves with the leaves' placements, already reduced over dp. */
      for (int i = 0; i < 4; i++) {
        dt_tensor *g = NULL;
        RANK_OK(dt_tensor_grad(w[i], &g));
        RANK_CHECK(g && dt_tensor_is_distributed(g), "%s has no distributed grad", param_names[i]);
        for (int d = 0; d < 2; d++) {
          RANK_CHECK(same_placement(dt_dist_placements(g)[d], want_p[i][d]),
                     "grad of %s: mesh dim %d has kind %d", param_names[i], d,
                     (int)dt_dist_placements(g)[d].kind);
        }
        dt_tensor_release(g);
      }
    }
    RANK_OK(loss_value(loss, &losses[s]));
    dt_tensor_release(loss);
    RANK_OK(dt_optimizer_step(opt));
  }
  RANK_OK(compare_final(arg, w));
  dt_optimizer_destroy(opt);
  for (int i = 0; i < 4; i++) dt_tensor_release(w[i]);
  dt_tensor_release(x);
  dt_tensor_release(y);
  dt_module_destroy(model);
  return DT_OK;
}

static dt_status rank_main(dt_comm *world, void *varg) {
  train_arg *arg = varg;
  dt_mesh *mesh = NULL;
  double losses[STEPS];
  char text[2048] = "";
  RANK_OK(dt_mesh_create(world, 2, (int[]){2, 2}, (const char *[]){"dp", "tp"}, &mesh));
  dt_status st = train(arg, mesh, losses, text, sizeof text);
  if (!st && dt_comm_rank(world) == 0) {
    memcpy(arg->losses, losses, sizeof losses);
    memcpy(arg->ledger_text, text, sizeof text);
  }
  dt_mesh_destroy(mesh);
  return st;
}

static void check_losses(const run *r, const char *what, const double *got, double rtol) {
  double want[STEPS];
  cr_assert(expected_losses(r->name, want), "cannot read expected.json for %s", r->name);
  for (int s = 0; s < STEPS; s++) {
    cr_expect(fabs(got[s] - want[s]) <= rtol * fabs(want[s]),
              "%s %s step %d: loss %.9g, PyTorch %.9g (rel %.2g)", r->name, what, s + 1, got[s],
              want[s], fabs(got[s] - want[s]) / fabs(want[s]));
  }
}

static void train_2x2(dt_dtype param_dtype, dt_dtype reduce_dtype, double loss_rtol,
                      double weight_rtol, const char *what) {
  if (!fixtures_present()) cr_skip_test("no fixtures at %s", DT_FIXTURES_DIR);
  for (int i = 0; i < 2; i++) {
    train_arg arg = {.r = &runs[i],
                     .param_dtype = param_dtype,
                     .reduce_dtype = reduce_dtype,
                     .weight_rtol = weight_rtol,
                     .norm_compare = param_dtype != DT_F32 || reduce_dtype != DT_F32};
    dt_status st = dt_comm_spawn(4, rank_main, &arg);
    cr_assert_eq(st, DT_OK, "%s %s: %s", runs[i].name, what, dt_last_error());
    check_losses(&runs[i], what, arg.losses, loss_rtol);
    if (getenv("FSDP_DEBUG")) {
      double want[STEPS];
      expected_losses(runs[i].name, want);
      double worst = 0;
      for (int s = 0; s < STEPS; s++) {
        double rel = fabs(arg.losses[s] - want[s]) / fabs(want[s]);
        worst = rel > worst ? rel : worst;
      }
      printf("%s %s: worst loss rel %.3g\n%s\n", runs[i].name, what, worst, arg.ledger_text);
    }
  }
}

Test(fsdp_tp, trains_like_pytorch_on_2x2, .timeout = 120) {
  train_2x2(DT_F32, DT_F32, LOSS_RTOL, WEIGHT_RTOL, "FSDP(dp) x TP(tp) on 2x2");
}

/* Mixed precision: bf16 compute against PyTorch's float32 run, so bf16 tolerances (8 bits of
 * mantissa: ~4e-3 per rounding, over 20 steps). */
#define BF16_LOSS_RTOL 2e-2
#define BF16_WEIGHT_RTOL 3e-2

Test(fsdp_tp, mixed_precision_bf16_params_and_reduce, .timeout = 120) {
  train_2x2(DT_BF16, DT_BF16, BF16_LOSS_RTOL, BF16_WEIGHT_RTOL, "bf16 params, bf16 reduce on 2x2");
}

Test(fsdp_tp, mixed_precision_bf16_params_f32_reduce, .timeout = 120) {
  train_2x2(DT_BF16, DT_F32, BF16_LOSS_RTOL, BF16_WEIGHT_RTOL, "bf16 params, f32 reduce on 2x2");
}

/* ---- The hook list ---------------------------------------------------------------------- */

typedef struct trace {
  char log[64];
  int released;
} trace;

typedef struct tagged {
  trace *t;
  char tag;
} tagged;

static dt_status log_pre(dt_module *m, dt_tensor *in, dt_tensor **out, void *user) {
  (void)m;
  tagged *g = user;
  size_t n = strlen(g->t->log);
  g->t->log[n] = g->tag;
  g->t->log[n + 1] = '<';
  *out = dt_tensor_retain(in);
  return DT_OK;
}

static dt_status log_post(dt_module *m, dt_tensor *in, dt_tensor **out, void *user) {
  (void)m;
  tagged *g = user;
  size_t n = strlen(g->t->log);
  g->t->log[n] = g->tag;
  g->t->log[n + 1] = '>';
  *out = dt_tensor_retain(in);
  return DT_OK;
}

static void count_release(void *user) { ((tagged *)user)->t->released++; }

Test(fsdp_tp, hooks_nest_in_the_order_added) {
  dt_module *relu = NULL;
  dt_tensor *x = NULL, *y = NULL;
  cr_assert_eq(dt_nn_relu(&relu), DT_OK);
  cr_assert_eq(dt_full(1, (int64_t[]){3}, 1.0, DT_F32, &x), DT_OK);
  trace t = {{0}, 0};
  tagged a = {&t, 'a'}, b = {&t, 'b'}, c = {&t, 'c'};
  dt_module_set_hooks(relu, log_pre, log_post, &a, count_release);
  cr_assert_eq(dt_module_add_hooks(relu, log_pre, log_post, &b, count_release), DT_OK);
  cr_assert_eq(dt_module_add_hooks(relu, log_pre, NULL, &c, count_release), DT_OK);
  cr_assert_eq(dt_module_forward(relu, x, &y), DT_OK);
  /* The pair added last is the outermost. */
  cr_assert_str_eq(t.log, "c<b<a<a>b>");
  dt_tensor_release(y);
  /* Full: DT_MODULE_MAX_HOOKS pairs; the refused one is released at once. */
  tagged d = {&t, 'd'}, e = {&t, 'e'};
  cr_assert_eq(dt_module_add_hooks(relu, log_pre, log_post, &d, count_release), DT_OK);
  cr_assert_eq(dt_module_add_hooks(relu, log_pre, log_post, &e, count_release), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "dt_module_add_hooks:") != NULL, "%s", dt_last_error());
  cr_assert_eq(t.released, 1);
  cr_assert_eq(dt_module_add_hooks(relu, NULL, NULL, &e, count_release), DT_ERR_INVALID);
  cr_assert_eq(t.released, 2);
  cr_assert_eq(dt_module_add_hooks(NULL, log_pre, NULL, &e, count_release), DT_ERR_INVALID);
  cr_assert_eq(t.released, 3);
  /* set_hooks replaces all four (each released), as documented. */
  dt_module_set_hooks(relu, log_pre, log_post, &e, count_release);
  cr_assert_eq(t.released, 7);
  memset(t.log, 0, sizeof t.log);
  cr_assert_eq(dt_module_forward(relu, x, &y), DT_OK);
  cr_assert_str_eq(t.log, "e<e>");
  dt_tensor_release(y);
  dt_module_set_hooks(relu, NULL, NULL, NULL, NULL);
  cr_assert_eq(t.released, 8);
  dt_module_destroy(relu);
  dt_tensor_release(x);
}

/* Misuse: a non-floating policy dtype, fully_shard twice over dp, a parameter on another
 * mesh, a tp dim outside the mesh. */
static dt_status bad_on_rank(dt_comm *world, void *varg) {
  (void)varg;
  dt_mesh *mesh = NULL, *other = NULL;
  dt_module *mlp = NULL;
  RANK_OK(dt_mesh_create(world, 2, (int[]){2, 2}, (const char *[]){"dp", "tp"}, &mesh));
  RANK_OK(dt_mesh_create(world, 2, (int[]){2, 2}, NULL, &other));
  RANK_OK(dt_nn_mlp(4, 6, 2, true, true, 3, &mlp));
  dt_fsdp_options bad_dtype = {.param_dtype = DT_I64};
  RANK_CHECK(dt_parallel_fsdp(mlp, mesh, &bad_dtype) == DT_ERR_INVALID &&
                 strstr(dt_last_error(), "dt_parallel_fsdp: options->param_dtype is int64"),
             "%s", dt_last_error());
  dt_tp_plan plan = {2, (dt_tp_plan_entry[]){{"0", DT_TP_COLWISE}, {"2", DT_TP_ROWWISE}}};
  RANK_CHECK(dt_parallel_tp_module_on_dim(mlp, mesh, -1, &plan, NULL) == DT_ERR_INVALID &&
                 strstr(dt_last_error(), "tp_dim -1 is not a dim of a 2-D mesh"),
             "%s", dt_last_error());
  RANK_OK(dt_parallel_tp_module(mlp, mesh, &plan, NULL));
  RANK_CHECK(dt_parallel_fsdp(mlp, other, NULL) == DT_ERR_INVALID &&
                 strstr(dt_last_error(), "distributed on another mesh"),
             "%s", dt_last_error());
  RANK_OK(dt_parallel_fsdp(mlp, mesh, NULL));
  RANK_CHECK(dt_parallel_fsdp(mlp, mesh, NULL) == DT_ERR_UNSUPPORTED &&
                 strstr(dt_last_error(), "already distributed as Shard on mesh dim 0"),
             "%s", dt_last_error());
  dt_module_destroy(mlp);
  dt_mesh_destroy(other);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(fsdp_tp, bad_arguments_on_2x2) { SPAWN_OK(4, bad_on_rank, NULL); }
