/* Pipeline parallelism trains PyTorch's fixtures (../shared/fixtures/training): the fixture
 * MLPs split into two stages ([Linear, ReLU] and [Linear]) on pp = 2, alone (threads, local
 * tensors), with DDP or FSDP on dp = 2 (4 ranks) and with DDP x TP or FSDP x TP in 3-D
 * dp = 2 x pp = 2 x tp = 2 (8 rank threads): PyTorch's loss at every step (relative 1e-5) and
 * its final weights (relative 1e-4 plus 1e-6), for GPipe and 1F1B with 1 and 2 microbatches. */
#include <criterion/criterion.h>

#include "comm_helpers.h"
#include "dtensor/parallel.h"
#include "dtensor/pipeline.h"

#define STEPS 20
#include "training_fixtures.h"
#include "fixture_mlp.h"
#include "fixture_main.h"
#define LOSS_RTOL 1e-5
#define WEIGHT_RTOL 1e-4
#define WEIGHT_ATOL 1e-6

typedef enum layout { PP, DP_PP, DP_PP_TP, DP_PP_FSDP, DP_PP_TP_FSDP } layout;

typedef struct train_arg {
  const run *r;
  layout layout;
  dt_pp_schedule_kind kind;
  int microbatches;
} train_arg;

static dt_status fixture_loss(dt_tensor *out, dt_tensor *target, void *user, dt_tensor **loss) {
  const run *r = user;
  return r->cross_entropy ? dt_cross_entropy(out, target, loss)
                          : dt_mse_loss(out, target, DT_LOSS_MEAN, loss);
}

static dt_status require_grad(const char *fqn, dt_tensor *t, bool is_buffer, void *user) {
  (void)fqn;
  (void)user;
  return is_buffer || dt_tensor_requires_grad(t) ? DT_OK : dt_tensor_set_requires_grad(t, true);
}

/* This rank's stage of the fixture model, parallelized as the layout says. */
static dt_status build_stage(const train_arg *a, int pp_rank, dt_mesh *stage_mesh,
                             dt_module **out) {
  dt_module *model = NULL, *stages[2];
  RANK_OK(build_model(a->r, &model));
  RANK_OK(dt_pp_split_model(model, 2, (int[]){2, 1}, stages));
  dt_module_destroy(model);
  dt_module_destroy(stages[1 - pp_rank]);
  dt_module *stage = stages[pp_rank];
  bool tp = a->layout == DP_PP_TP || a->layout == DP_PP_TP_FSDP;
  bool fsdp = a->layout == DP_PP_FSDP || a->layout == DP_PP_TP_FSDP;
  if (tp) {
    dt_tp_plan_entry entry = pp_rank == 0 ? (dt_tp_plan_entry){"0", DT_TP_COLWISE}
                                          : (dt_tp_plan_entry){"2", DT_TP_ROWWISE};
    dt_tp_plan plan = {1, &entry};
    RANK_OK(dt_parallel_tp_module_on_dim(stage, stage_mesh, 1, &plan, NULL));
  }
  if (fsdp) {
    RANK_OK(dt_parallel_fsdp(stage, stage_mesh, &(dt_fsdp_options){.mesh_dim = 0}));
  } else if (a->layout != PP) {
    RANK_OK(dt_parallel_ddp(stage, stage_mesh, 0, NULL));
  }
  RANK_OK(dt_module_visit_tensors(stage, require_grad, NULL));
  *out = stage;
  return DT_OK;
}

/* The batch: local on pp alone, else Shard(0) over dp (Replicate over tp). */
static dt_status load_batch(const train_arg *a, dt_mesh *stage_mesh, const char *name,
                            dt_tensor **out) {
  dt_safetensors *data = NULL;
  RANK_OK(open_fixture(a->r->name, "data", &data));
  dt_status st;
  if (a->layout == PP) {
    st = dt_safetensors_load(data, name, DT_SAFETENSORS_COPY, out);
  } else {
    dt_placement batch[2] = {dt_shard(0), dt_replicate()};
    st = dt_safetensors_load_distributed(data, name, stage_mesh, dt_mesh_ndim(stage_mesh), batch,
                                         out);
  }
  dt_safetensors_destroy(data);
  return st;
}

static dt_status train_rank(dt_comm *world, void *varg) {
  train_arg *a = varg;
  const run *r = a->r;
  dt_pp_mesh *pm = NULL;
  if (a->layout == PP) {
    RANK_OK(dt_pp_mesh_create(world, 1, (int[]){2}, (const char *[]){"pp"}, "pp", &pm));
  } else if (a->layout == DP_PP) {
    RANK_OK(dt_pp_mesh_create(world, 2, (int[]){2, 2}, (const char *[]){"dp", "pp"}, "pp", &pm));
  } else if (a->layout == DP_PP_FSDP) {
    RANK_OK(dt_pp_mesh_create(world, 2, (int[]){2, 2}, (const char *[]){"dp", "pp"}, "pp", &pm));
  } else {
    RANK_OK(dt_pp_mesh_create(world, 3, (int[]){2, 2, 2}, (const char *[]){"dp", "pp", "tp"}, "pp",
                              &pm));
  }
  dt_comm *pp = dt_pp_mesh_group(pm);
  dt_mesh *stage_mesh = dt_pp_mesh_stage_mesh(pm);
  int pp_rank = dt_comm_rank(pp);
  RANK_CHECK((a->layout == PP) == (stage_mesh == NULL), "stage mesh %p", (void *)stage_mesh);
  dt_module *stage = NULL;
  RANK_OK(build_stage(a, pp_rank, stage_mesh, &stage));
  params_ctx pc = {0};
  RANK_OK(dt_module_visit_tensors(stage, collect, &pc));
  RANK_CHECK(pc.n == 2, "%d parameters in stage %d", pc.n, pp_rank);
  const char *names[2] = {pc.names[0], pc.names[1]};
  RANK_CHECK(strcmp(names[0], param_names[2 * pp_rank]) == 0, "stage %d holds %s", pp_rank,
             names[0]);

  dt_tensor *x = NULL, *y = NULL;
  if (pp_rank == 0) RANK_OK(load_batch(a, stage_mesh, "x", &x));
  if (pp_rank == 1) RANK_OK(load_batch(a, stage_mesh, "y", &y));
  dt_optimizer *opt = NULL;
  if (r->adamw) {
    dt_adam_options o = {
        .lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01};
    RANK_OK(dt_optimizer_create_adamw(2, pc.t, &o, &opt));
  } else {
    dt_sgd_options o = {.lr = 0.05, .momentum = 0.9};
    RANK_OK(dt_optimizer_create_sgd(2, pc.t, &o, &opt));
  }
  dt_pp_schedule *sched = NULL;
  dt_pipeline *pipe = NULL;
  RANK_OK(dt_pp_schedule_create(a->kind, 2, 1, a->microbatches, &sched));
  dt_pipeline_options po = {.stage_mesh = stage_mesh};
  RANK_OK(dt_pipeline_create(pp, sched, 1, &stage, fixture_loss, (void *)r, &po, &pipe));
  double want[STEPS];
  RANK_CHECK(expected_losses(r->name, want), "no losses for %s", r->name);
  for (int s = 0; s < STEPS; s++) {
    double loss = 0;
    RANK_OK(dt_optimizer_zero_grad(opt, true));
    RANK_OK(dt_pipeline_step(pipe, x, y, &loss));
    RANK_CHECK(fabs(loss - want[s]) <= LOSS_RTOL * fabs(want[s]),
               "%s step %d: loss %.9g, "
               "PyTorch %.9g",
               r->name, s, loss, want[s]);
    if (a->layout == DP_PP || a->layout == DP_PP_TP)
      RANK_OK(dt_parallel_ddp_reduce_gradients(2, pc.t, 0, NULL, NULL));
    RANK_OK(dt_optimizer_step(opt));
  }
  RANK_OK(fixture_compare_final(r->name, pc.t, names, 2, WEIGHT_RTOL, WEIGHT_ATOL, false));
  dt_pipeline_destroy(pipe);
  dt_pp_schedule_destroy(sched);
  dt_optimizer_destroy(opt);
  dt_tensor_release(x);
  dt_tensor_release(y);
  dt_module_destroy(stage);
  dt_pp_mesh_destroy(pm);
  return DT_OK;
}

static void train_all(layout which, int world) {
  (void)loss_value; /* training_fixtures.h's; the pipeline returns the loss as a double */
  if (!fixtures_present()) cr_skip_test("no fixtures at %s", DT_FIXTURES_DIR);
  for (int i = 0; i < 2; i++) {
    for (int kind = DT_PP_GPIPE; kind <= DT_PP_1F1B; kind++) {
      for (int m = 1; m <= 2; m++) {
        train_arg a = {&runs[i], which, (dt_pp_schedule_kind)kind, m};
        dt_status st = dt_comm_spawn(world, train_rank, &a);
        cr_assert_eq(st, DT_OK, "%s, layout %d, schedule %d, %d microbatches: %s", runs[i].name,
                     which, kind, m, dt_last_error());
      }
    }
  }
}

Test(pipeline_train, fixtures_on_pp2) { train_all(PP, 2); }
Test(pipeline_train, fixtures_on_dp2_pp2_ddp) { train_all(DP_PP, 4); }
Test(pipeline_train, fixtures_on_dp2_pp2_tp2_ddp) { train_all(DP_PP_TP, 8); }
Test(pipeline_train, fixtures_on_dp2_pp2_fsdp) { train_all(DP_PP_FSDP, 4); }
Test(pipeline_train, fixtures_on_dp2_pp2_tp2_fsdp) { train_all(DP_PP_TP_FSDP, 8); }
