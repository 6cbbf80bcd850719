/* The pipeline API's refusals (dtensor/pipeline.h): splitting a model, the pp mesh, making a
 * pipeline and running a step with bad arguments return the documented status with a message
 * naming the function and the offending value; nothing crashes or hangs. Also: checkpointed
 * stages give the same gradients as plain ones, and a frozen first stage (no parameter that
 * requires grad) is skipped in backward. */
#include <criterion/criterion.h>
#include <limits.h>
#include <math.h>

#include "comm_helpers.h"
#include "dtensor/pipeline.h"

static dt_module *mlp3(void) {
  dt_module *c[5], *m = NULL;
  cr_assert_eq(dt_nn_linear(4, 6, true, 1, &c[0]), DT_OK);
  cr_assert_eq(dt_nn_relu(&c[1]), DT_OK);
  cr_assert_eq(dt_nn_linear(6, 6, true, 2, &c[2]), DT_OK);
  cr_assert_eq(dt_nn_relu(&c[3]), DT_OK);
  cr_assert_eq(dt_nn_linear(6, 2, true, 3, &c[4]), DT_OK);
  cr_assert_eq(dt_nn_sequential(5, c, &m), DT_OK);
  return m;
}

static void expect(dt_status got, dt_status want, const char *words) {
  cr_assert_eq(got, want, "status %d, want %d: %s", got, want, dt_last_error());
  cr_assert(strstr(dt_last_error(), words), "'%s' lacks '%s'", dt_last_error(), words);
}

Test(pipeline_errors, split_model) {
  dt_module *m = mlp3(), *stages[8] = {0};
  expect(dt_pp_split_model(NULL, 2, NULL, stages), DT_ERR_INVALID, "dt_pp_split_model");
  expect(dt_pp_split_model(m, 0, NULL, stages), DT_ERR_INVALID, "0 stages for a model of 5");
  expect(dt_pp_split_model(m, 6, NULL, stages), DT_ERR_INVALID, "6 stages for a model of 5");
  expect(dt_pp_split_model(m, 2, (int[]){2, 2}, stages), DT_ERR_INVALID, "add up to 4");
  expect(dt_pp_split_model(m, 2, (int[]){5, 0}, stages), DT_ERR_INVALID, "sizes[1] = 0");
  cr_assert_eq(dt_module_child_count(m), 5, "a refused split moved children");
  /* The default split of 5 children into 3 stages: one extra each, the middle stage first,
   * then the first; the last holds fewer. */
  cr_assert_eq(dt_pp_split_model(m, 3, NULL, stages), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_module_child_count(m), 0);
  int want[3] = {2, 2, 1};
  const char *first[3] = {"0", "2", "4"};
  for (int k = 0; k < 3; k++) {
    cr_assert_eq(dt_module_child_count(stages[k]), want[k], "stage %d", k);
    cr_assert_str_eq(dt_module_child_name(stages[k], 0), first[k]);
    cr_assert_str_eq(dt_module_type(stages[k]), "PipelineStage");
  }
  /* FQNs stay the model's. */
  cr_assert_not_null(dt_module_get_tensor(stages[1], "2.weight"));
  cr_assert_not_null(dt_module_get_tensor(stages[2], "4.bias"));
  for (int k = 0; k < 3; k++) dt_module_destroy(stages[k]);
  dt_module_destroy(m);

  dt_module *c = NULL;
  expect(dt_module_take_child(NULL, 0, &c), DT_ERR_INVALID, "dt_module_take_child");
  m = mlp3();
  expect(dt_module_take_child(m, 5, &c), DT_ERR_INVALID, "index 5 outside 0..4");
  cr_assert_null(c);
  dt_module_destroy(m);
}

Test(pipeline_errors, schedule_queries) {
  dt_pp_schedule *s = NULL;
  cr_assert_eq(dt_pp_schedule_create(DT_PP_GPIPE, 2, 1, 2, &s), DT_OK);
  int n = 0;
  const dt_pp_action *a = NULL;
  expect(dt_pp_schedule_actions(s, 2, &n, &a), DT_ERR_INVALID, "rank 2 outside 0..1");
  expect(dt_pp_schedule_actions(NULL, 0, &n, &a), DT_ERR_INVALID, "dt_pp_schedule_actions");
  double b = 0;
  expect(dt_pp_schedule_bubble(s, 0, &b), DT_ERR_INVALID, "backward_cost 0");
  expect(dt_pp_schedule_bubble(s, INFINITY, &b), DT_ERR_INVALID, "backward_cost inf");
  expect(dt_pp_schedule_bubble(s, NAN, &b), DT_ERR_INVALID, "not a finite number > 0");
  /* GPipe's bubble is (p - 1) / (m + p - 1) = 1/3 whatever the backward costs; a huge finite
   * cost overflowed the simulated clocks to inf and gave NaN. */
  const double costs[] = {1e308, 1e200, 1e16, 3.0, 1e-300};
  for (int i = 0; i < 5; i++) {
    b = -1;
    cr_assert_eq(dt_pp_schedule_bubble(s, costs[i], &b), DT_OK, "%s", dt_last_error());
    cr_assert(fabs(b - 1.0 / 3.0) < 1e-12, "cost %g: bubble %.17g", costs[i], b);
  }
  dt_pp_schedule *big = NULL;
  expect(dt_pp_schedule_create(DT_PP_INTERLEAVED_1F1B, 2, 70000, 2, &big), DT_ERR_INVALID,
         "stages_per_rank at most 65536");
  expect(dt_pp_schedule_bubble(NULL, 1, &b), DT_ERR_INVALID, "dt_pp_schedule_bubble");
  cr_assert_eq(dt_pp_schedule_ranks(NULL), 0);
  cr_assert_eq(dt_pp_schedule_microbatches(s), 2);
  const dt_pp_action *lists[2] = {a, a};
  /* A failed create sets its out to NULL: a second handle, so that s is still destroyed. */
  dt_pp_schedule *bad = NULL;
  expect(dt_pp_schedule_create_custom(2, 3, 2, (int[]){0, 0}, lists, &bad), DT_ERR_INVALID,
         "3 stages do not divide over 2 ranks");
  cr_assert_null(bad);
  dt_pp_schedule_destroy(s);
  char buf[32];
  cr_assert_str_eq(dt_pp_action_format((dt_pp_action){DT_PP_RECV_GRAD, 3, 7}, buf, sizeof buf),
                   "3RECV_B7");
}

static dt_status mse(dt_tensor *y, dt_tensor *t, void *user, dt_tensor **loss) {
  (void)user;
  return dt_mse_loss(y, t, DT_LOSS_MEAN, loss);
}

static dt_status create_errors_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_pp_schedule *s2 = NULL, *s4 = NULL;
  dt_pipeline *p = NULL;
  dt_module *m = NULL;
  RANK_OK(dt_nn_relu(&m));
  RANK_OK(dt_pp_schedule_create(DT_PP_1F1B, 2, 1, 2, &s2));
  RANK_OK(dt_pp_schedule_create(DT_PP_1F1B, 4, 1, 2, &s4));
  RANK_CHECK(dt_pipeline_create(world, s4, 1, &m, mse, NULL, NULL, &p) == DT_ERR_INVALID &&
                 strstr(dt_last_error(), "the pp group has 2 ranks, the schedule 4"),
             "%s", dt_last_error());
  RANK_CHECK(dt_pipeline_create(world, s2, 2, &m, mse, NULL, NULL, &p) == DT_ERR_INVALID &&
                 strstr(dt_last_error(), "2 local stages given, the schedule has 1"),
             "%s", dt_last_error());
  RANK_CHECK(dt_pipeline_create(world, s2, 1, &m, NULL, NULL, NULL, &p) == DT_ERR_INVALID, "%s",
             dt_last_error());
  dt_pipeline_options bad = {.loss_scale = (dt_pp_loss_scale)9};
  RANK_CHECK(dt_pipeline_create(world, s2, 1, &m, mse, NULL, &bad, &p) == DT_ERR_INVALID &&
                 strstr(dt_last_error(), "loss_scale 9"),
             "%s", dt_last_error());
  RANK_CHECK(p == NULL, "a pipeline after a refusal");
  /* A step without the input on pp rank 0 / the target on pp rank 1: refused before any
   * transfer, on the rank that lacks it. Then only pp rank 1 lacks its target: pp rank 0 is
   * told (no hang), and the group still works. */
  RANK_OK(dt_pipeline_create(world, s2, 1, &m, mse, NULL, NULL, &p));
  dt_tensor *x = NULL;
  RANK_OK(dt_randn(2, (int64_t[]){1, 4}, DT_F32, 1, &x));
  int rank = dt_comm_rank(world);
  dt_status st = dt_pipeline_step(p, NULL, NULL, NULL);
  RANK_CHECK(st == DT_ERR_INVALID &&
                 strstr(dt_last_error(), rank == 0 ? "needs the input" : "needs the target"),
             "%s", dt_last_error());
  dt_tensor *rows = NULL;
  RANK_OK(dt_randn(2, (int64_t[]){4, 4}, DT_F32, 2, &rows));
  st = dt_pipeline_step(p, rows, NULL, NULL);
  RANK_CHECK(st == DT_ERR_INVALID && strstr(dt_last_error(), rank == 0 ? "pp rank 1 refused its "
                                                                         "arguments"
                                                                       : "needs the target"),
             "%s", dt_last_error());
  double loss = 0;
  RANK_OK(dt_pipeline_step(p, rows, rows, &loss));
  RANK_CHECK(loss > 0, "loss %g", loss);
  dt_tensor_release(rows);
  /* One row for 2 microbatches. */
  st = dt_pipeline_step(p, x, x, NULL);
  RANK_CHECK(st == DT_ERR_INVALID && strstr(dt_last_error(), "1 rows, fewer than the 2"), "%s",
             dt_last_error());
  RANK_CHECK(dt_pipeline_step(NULL, x, x, NULL) == DT_ERR_INVALID, "NULL pipeline");
  dt_tensor_release(x);
  dt_pipeline_destroy(p);
  dt_pp_schedule_destroy(s2);
  dt_pp_schedule_destroy(s4);
  dt_module_destroy(m);
  return DT_OK;
}

Test(pipeline_errors, create_and_step) { SPAWN_OK(2, create_errors_rank, NULL); }

static dt_status pp_mesh_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_pp_mesh *pm = NULL;
  RANK_CHECK(dt_pp_mesh_create(world, 2, (int[]){2, 2}, (const char *[]){"dp", "tp"}, "pp", &pm) ==
                     DT_ERR_INVALID &&
                 strstr(dt_last_error(), "no mesh dim is named 'pp'"),
             "%s", dt_last_error());
  RANK_CHECK(dt_pp_mesh_create(world, 2, (int[]){2, 1}, (const char *[]){"dp", "pp"}, "pp", &pm) ==
                     DT_ERR_INVALID &&
                 strstr(dt_last_error(), "the shape holds 2 ranks, the world has 4"),
             "%s", dt_last_error());
  RANK_CHECK(pm == NULL, "a pp mesh after a refusal");
  RANK_OK(dt_pp_mesh_create(world, 2, (int[]){2, 2}, (const char *[]){"dp", "pp"}, "pp", &pm));
  /* Rank r sits at (r / 2, r % 2): its pp coordinate is r % 2, its dp coordinate r / 2. */
  int rank = dt_comm_rank(world);
  RANK_CHECK(dt_comm_rank(dt_pp_mesh_group(pm)) == rank % 2, "pp rank %d",
             dt_comm_rank(dt_pp_mesh_group(pm)));
  dt_mesh *stage = dt_pp_mesh_stage_mesh(pm);
  RANK_CHECK(stage && dt_mesh_ndim(stage) == 1 && dt_mesh_coordinate(stage, 0) == rank / 2 &&
                 strcmp(dt_mesh_dim_name(stage, 0), "dp") == 0,
             "stage mesh");
  dt_pp_mesh_destroy(pm);
  return DT_OK;
}

Test(pipeline_errors, pp_mesh) { SPAWN_OK(4, pp_mesh_rank, NULL); }

/* A refusal in one pp group stops the step in the others too (their stages share stage
 * meshes with it, whose collectives would wait for the ranks that returned): on a dp 2 x pp 2
 * mesh only world rank 0 passes no input, and all four ranks return the refusal. */
static dt_status other_group_rank(dt_comm *world, void *arg) {
  (void)arg;
  int rank = dt_comm_rank(world);
  dt_pp_mesh *pm = NULL;
  dt_pp_schedule *s = NULL;
  dt_pipeline *p = NULL;
  dt_module *m = NULL;
  dt_tensor *x = NULL, *y = NULL;
  RANK_OK(dt_pp_mesh_create(world, 2, (int[]){2, 2}, (const char *[]){"dp", "pp"}, "pp", &pm));
  RANK_OK(dt_nn_relu(&m));
  RANK_OK(dt_pp_schedule_create(DT_PP_1F1B, 2, 1, 2, &s));
  dt_pipeline_options opt = {.stage_mesh = dt_pp_mesh_stage_mesh(pm)};
  RANK_OK(dt_pipeline_create(dt_pp_mesh_group(pm), s, 1, &m, mse, NULL, &opt, &p));
  RANK_OK(dt_randn(2, (int64_t[]){4, 3}, DT_F32, 1, &x));
  RANK_OK(dt_randn(2, (int64_t[]){4, 3}, DT_F32, 2, &y));
  dt_status st = dt_pipeline_step(p, rank == 0 ? NULL : x, y, NULL);
  RANK_CHECK(st == DT_ERR_INVALID, "rank %d: status %d (%s)", rank, st, dt_last_error());
  const char *want = rank == 0   ? "needs the input"
                     : rank == 1 ? "pp rank 0 refused"
                                 : "another pp group refused";
  RANK_CHECK(strstr(dt_last_error(), want), "rank %d: %s", rank, dt_last_error());
  /* Nothing was sent: the same pipeline steps once every rank passes its arguments. */
  RANK_OK(dt_pipeline_step(p, x, y, NULL));
  dt_pipeline_destroy(p);
  dt_pp_schedule_destroy(s);
  dt_module_destroy(m);
  dt_tensor_release(x);
  dt_tensor_release(y);
  dt_pp_mesh_destroy(pm);
  return DT_OK;
}

Test(pipeline_errors, refusal_reaches_other_pp_groups) { SPAWN_OK(4, other_group_rank, NULL); }

/* ---- Checkpointed and frozen stages ------------------------------------------------------- */

static dt_status requires_grad(const char *fqn, dt_tensor *t, bool is_buffer, void *user) {
  (void)fqn;
  bool *on = user;
  return is_buffer ? DT_OK : dt_tensor_set_requires_grad(t, *on);
}

typedef struct variant_arg {
  bool checkpoint, freeze_first;
  float grads[2][64]; /* per pp rank: its last Linear's weight gradient, plain run */
} variant_arg;

static dt_status variant_rank(dt_comm *world, void *varg) {
  variant_arg *a = varg;
  int rank = dt_comm_rank(world);
  for (int pass = 0; pass < 2; pass++) { /* 0: plain, 1: the variant */
    dt_module *m = mlp3(), *stages[2];
    RANK_OK(dt_pp_split_model(m, 2, (int[]){2, 3}, stages));
    dt_module_destroy(m);
    dt_module_destroy(stages[1 - rank]);
    dt_module *mine = stages[rank];
    bool on = !(pass == 1 && a->freeze_first && rank == 0);
    RANK_OK(dt_module_visit_tensors(mine, requires_grad, &on));
    if (pass == 1 && a->checkpoint) {
      for (int c = 0; c < dt_module_child_count(mine); c++)
        RANK_OK(dt_module_set_checkpoint(dt_module_child(mine, c), true));
    }
    dt_pp_schedule *s = NULL;
    dt_pipeline *p = NULL;
    dt_tensor *x = NULL, *y = NULL, *g = NULL;
    RANK_OK(dt_pp_schedule_create(DT_PP_1F1B, 2, 1, 3, &s));
    RANK_OK(dt_pipeline_create(world, s, 1, &mine, mse, NULL, NULL, &p));
    RANK_OK(dt_randn(2, (int64_t[]){7, 4}, DT_F32, 1, &x));
    RANK_OK(dt_randn(2, (int64_t[]){7, 2}, DT_F32, 2, &y));
    RANK_OK(dt_pipeline_step(p, x, y, NULL));
    dt_tensor *w = dt_module_get_tensor(mine, rank == 0 ? "0.weight" : "4.weight");
    RANK_OK(dt_tensor_grad(w, &g));
    if (pass == 1 && a->freeze_first && rank == 0) {
      RANK_CHECK(g == NULL, "a frozen weight got a gradient");
    } else {
      RANK_CHECK(g != NULL, "no gradient");
      int64_t n = dt_tensor_numel(g);
      if (pass == 0) {
        memcpy(a->grads[rank], dt_tensor_data(g), sizeof(float) * (size_t)n);
      } else {
        RANK_CHECK(memcmp(a->grads[rank], dt_tensor_data(g), sizeof(float) * (size_t)n) == 0,
                   "pp rank %d: the gradient differs from the plain pipeline's", rank);
      }
    }
    dt_tensor_release(g);
    dt_tensor_release(x);
    dt_tensor_release(y);
    dt_pipeline_destroy(p);
    dt_pp_schedule_destroy(s);
    dt_module_destroy(mine);
  }
  return DT_OK;
}

Test(pipeline_errors, checkpointed_stages_bitwise) {
  variant_arg a = {.checkpoint = true};
  SPAWN_OK(2, variant_rank, &a);
}

Test(pipeline_errors, frozen_first_stage) {
  variant_arg a = {.freeze_first = true};
  SPAWN_OK(2, variant_rank, &a);
}

/* ---- Hostile sizes: schedules with more ranks or (stage, microbatch) pairs than the
 * validation's simulation can hold, a pp mesh whose shape's product overflows or that names
 * the pp dim twice, stage sizes that overflow their sum. Each is refused quickly, never
 * undefined behaviour or an allocation of gigabytes. */

static void expect_message(const char *a, const char *b) {
  cr_assert(strstr(dt_last_error(), a), "message lacks \"%s\": %s", a, dt_last_error());
  if (b) cr_assert(strstr(dt_last_error(), b), "message lacks \"%s\": %s", b, dt_last_error());
}

Test(pipeline_errors, schedules_past_the_bounds_are_refused, .timeout = 30) {
  dt_pp_schedule *s = NULL;
  /* 65536 ranks: the simulation's pair indexes would overflow an int. */
  cr_assert_eq(dt_pp_schedule_create(DT_PP_GPIPE, 65536, 1, 1, &s), DT_ERR_INVALID);
  cr_assert_null(s);
  expect_message("dt_pp_schedule_create", "65536 ranks");
  cr_assert_eq(dt_pp_schedule_create(DT_PP_1F1B, DT_PP_MAX_RANKS + 1, 1, 1, &s), DT_ERR_INVALID);
  /* 2 stages x 2^23 microbatches: gigabytes of simulation. */
  cr_assert_eq(dt_pp_schedule_create(DT_PP_GPIPE, 2, 1, 1 << 23, &s), DT_ERR_INVALID);
  expect_message("dt_pp_schedule_create", "too many");
  int counts[1] = {0};
  const dt_pp_action *lists[1] = {NULL};
  cr_assert_eq(dt_pp_schedule_create_custom(1 << 20, 1 << 20, 1, counts, lists, &s),
               DT_ERR_INVALID);
  expect_message("dt_pp_schedule_create_custom", "ranks");
  /* The largest allowed degree is made and validated. */
  cr_assert_eq(dt_pp_schedule_create(DT_PP_1F1B, 64, 1, 64, &s), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_pp_schedule_ranks(s), 64);
  double bubble = 0;
  cr_assert_eq(dt_pp_schedule_bubble(s, 1.0, &bubble), DT_OK);
  cr_assert_float_eq(bubble, 63.0 / 127.0, 1e-12);
  dt_pp_schedule_destroy(s);
}

static dt_status pp_mesh_overflow_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_pp_mesh *pm = NULL;
  const char *names[3] = {"pp", "dp", "tp"};
  /* INT_MAX^3 ranks: the product overflows int64. */
  dt_status st = dt_pp_mesh_create(world, 3, (int[]){INT_MAX, INT_MAX, INT_MAX}, names, "pp", &pm);
  RANK_CHECK(st == DT_ERR_INVALID && !pm, "status %d: %s", st, dt_last_error());
  RANK_CHECK(strstr(dt_last_error(), "more than"), "%s", dt_last_error());
  /* Two dims named pp. */
  const char *twice[2] = {"pp", "pp"};
  st = dt_pp_mesh_create(world, 2, (int[]){1, 2}, twice, "pp", &pm);
  RANK_CHECK(st == DT_ERR_INVALID && !pm, "status %d: %s", st, dt_last_error());
  RANK_CHECK(strstr(dt_last_error(), "both named 'pp'"), "%s", dt_last_error());
  /* The good one still works. */
  RANK_OK(dt_pp_mesh_create(world, 2, (int[]){2, 1}, names, "pp", &pm));
  RANK_CHECK(dt_comm_size(dt_pp_mesh_group(pm)) == 2, "pp group of %d",
             dt_comm_size(dt_pp_mesh_group(pm)));
  dt_pp_mesh_destroy(pm);
  return DT_OK;
}

Test(pipeline_errors, pp_mesh_shapes_that_overflow_or_repeat_pp_are_refused, .timeout = 30) {
  dt_status st = dt_comm_spawn(2, pp_mesh_overflow_rank, NULL);
  cr_assert_eq(st, DT_OK, "%s", dt_last_error());
}

Test(pipeline_errors, stage_sizes_that_overflow_are_refused) {
  dt_module *c[3] = {NULL, NULL, NULL}, *model = NULL;
  for (int i = 0; i < 3; i++) cr_assert_eq(dt_nn_relu(&c[i]), DT_OK);
  cr_assert_eq(dt_nn_sequential(3, c, &model), DT_OK);
  dt_module *stages[2] = {NULL, NULL};
  /* INT_MAX + INT_MAX + 5 wraps to 3 in int arithmetic. */
  cr_assert_eq(dt_pp_split_model(model, 2, (int[]){INT_MAX, INT_MAX}, stages), DT_ERR_INVALID);
  expect_message("dt_pp_split_model", "sizes[0]");
  cr_assert_null(stages[0]);
  cr_assert_eq(dt_module_child_count(model), 3, "children moved on a refusal");
  cr_assert_eq(dt_pp_split_model(model, 2, (int[]){1, 2}, stages), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_module_child_count(stages[0]), 1);
  cr_assert_eq(dt_module_child_count(stages[1]), 2);
  dt_module_destroy(stages[0]);
  dt_module_destroy(stages[1]);
  dt_module_destroy(model);
}

static dt_status sum_loss(dt_tensor *y, dt_tensor *target, void *user, dt_tensor **loss) {
  (void)user;
  return dt_mse_loss(y, target, DT_LOSS_SUM, loss);
}

/* Rank 0 makes GPipe over 2 microbatches, rank 1 over 4: without a check rank 1 waits for a
 * third activation that never comes while rank 0 waits for a gradient (a hang until the
 * comm's timeout). Both ranks must fail at once, naming the mismatch; a
 * matching pair still runs. */
static dt_status mismatched_rank(dt_comm *world, void *arg) {
  bool mismatch = *(const bool *)arg;
  int rank = dt_comm_rank(world);
  dt_module *stage = NULL;
  RANK_OK(dt_nn_linear(3, 3, true, 5 + (uint64_t)rank, &stage));
  dt_pp_schedule *sched = NULL;
  dt_pipeline *pipe = NULL;
  int m = mismatch && rank == 1 ? 4 : 2;
  RANK_OK(dt_pp_schedule_create(DT_PP_GPIPE, 2, 1, m, &sched));
  RANK_OK(dt_pipeline_create(world, sched, 1, &stage, sum_loss, NULL, NULL, &pipe));
  /* Two rows per microbatch on each rank, so every microbatch's shapes agree and only the
   * count differs. */
  float v[24];
  for (int i = 0; i < 24; i++) v[i] = (float)(i % 7) - 3.0f;
  dt_tensor *x = NULL;
  RANK_OK(dt_from_data(v, 2, (int64_t[]){2 * m, 3}, DT_F32, &x));
  double loss = 0;
  dt_status st = dt_pipeline_step(pipe, x, x, &loss);
  char message[256];
  snprintf(message, sizeof message, "%s", dt_last_error());
  dt_tensor_release(x);
  dt_pipeline_destroy(pipe);
  dt_pp_schedule_destroy(sched);
  dt_module_destroy(stage);
  if (mismatch) {
    RANK_CHECK(st == DT_ERR_INVALID, "rank %d: %s: %s", rank, dt_status_string(st), message);
    RANK_CHECK(strstr(message, "different schedules"), "rank %d: %s", rank, message);
  } else {
    RANK_CHECK(st == DT_OK, "rank %d: %s: %s", rank, dt_status_string(st), message);
    RANK_CHECK(loss > 0, "loss %g", loss);
  }
  return DT_OK;
}

Test(pipeline_errors, ranks_with_different_schedules_fail_at_once, .timeout = 60) {
  bool mismatch = true;
  cr_assert_eq(dt_comm_spawn(2, mismatched_rank, &mismatch), DT_OK, "%s", dt_last_error());
  mismatch = false;
  cr_assert_eq(dt_comm_spawn(2, mismatched_rank, &mismatch), DT_OK, "%s", dt_last_error());
}

/* The pp mesh (and so the pp group) destroyed before the pipeline: dt_pipeline_destroy must
 * not touch the group (it read its size from the freed group). */
static dt_status group_first_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_pp_mesh *pm = NULL;
  RANK_OK(dt_pp_mesh_create(world, 1, (int[]){2}, (const char *[]){"pp"}, "pp", &pm));
  int rank = dt_comm_rank(world);
  dt_module *stage = NULL;
  RANK_OK(dt_nn_linear(3, 3, true, 9 + (uint64_t)rank, &stage));
  dt_pp_schedule *sched = NULL;
  dt_pipeline *pipe = NULL;
  RANK_OK(dt_pp_schedule_create(DT_PP_1F1B, 2, 1, 2, &sched));
  RANK_OK(dt_pipeline_create(dt_pp_mesh_group(pm), sched, 1, &stage, sum_loss, NULL, NULL, &pipe));
  float v[12];
  for (int i = 0; i < 12; i++) v[i] = (float)(i % 5) - 2.0f;
  dt_tensor *x = NULL;
  RANK_OK(dt_from_data(v, 2, (int64_t[]){4, 3}, DT_F32, &x));
  double loss = 0;
  RANK_OK(dt_pipeline_step(pipe, x, x, &loss));
  dt_tensor_release(x);
  dt_pp_schedule_destroy(sched);
  dt_pp_mesh_destroy(pm);
  dt_pipeline_destroy(pipe);
  dt_module_destroy(stage);
  return DT_OK;
}

Test(pipeline_errors, the_pp_group_may_go_before_the_pipeline, .timeout = 60) {
  SPAWN_OK(2, group_first_rank, NULL);
}
