/* Pipeline parallelism (dtensor/pipeline.h): schedules and their validation, and training
 * steps on 2 and 4 pp ranks (threads) for GPipe, 1F1B and interleaved 1F1B with 1 and several
 * microbatches. The step's loss must equal the sum of the microbatch losses computed on the
 * whole model one microbatch at a time, and every parameter's gradient the unpipelined model's
 * (one forward and backward of the whole batch), relative 1e-5. */
#include <criterion/criterion.h>

#include "comm_helpers.h"
#include "dtensor/pipeline.h"
#include "pipeline_mlp.h"

/* ---- Schedules ------------------------------------------------------------------------------ */

static dt_pp_schedule *make(dt_pp_schedule_kind kind, int p, int v, int m) {
  dt_pp_schedule *s = NULL;
  dt_status st = dt_pp_schedule_create(kind, p, v, m, &s);
  cr_assert_eq(st, DT_OK, "kind %d p %d v %d m %d: %s", kind, p, v, m, dt_last_error());
  return s;
}

Test(pipeline_schedule, one_f_one_b_bubble_is_the_theory) {
  for (int p = 1; p <= 4; p++) {
    for (int m = 1; m <= 8; m++) {
      for (int kind = DT_PP_GPIPE; kind <= DT_PP_1F1B; kind++) {
        dt_pp_schedule *s = make((dt_pp_schedule_kind)kind, p, 1, m);
        for (double cost = 1; cost <= 2; cost++) {
          double bubble = -1;
          cr_assert_eq(dt_pp_schedule_bubble(s, cost, &bubble), DT_OK);
          double theory = (double)(p - 1) / (m + p - 1);
          cr_assert(fabs(bubble - theory) < 1e-12, "kind %d p %d m %d cost %g: %g vs %g", kind, p,
                    m, cost, bubble, theory);
        }
        dt_pp_schedule_destroy(s);
      }
    }
  }
}

Test(pipeline_schedule, interleaved_has_a_smaller_bubble) {
  for (int p = 2; p <= 4; p += 2) {
    for (int m = p; m <= 4 * p; m += p) {
      dt_pp_schedule *one = make(DT_PP_1F1B, p, 1, m), *two = make(DT_PP_INTERLEAVED_1F1B, p, 2, m);
      double b1 = 0, b2 = 0;
      cr_assert_eq(dt_pp_schedule_bubble(one, 2, &b1), DT_OK);
      cr_assert_eq(dt_pp_schedule_bubble(two, 2, &b2), DT_OK);
      cr_assert_eq(dt_pp_schedule_stages(two), 2 * p);
      /* Megatron: the bubble shrinks to (p - 1) / (v m + p - 1) with v stages per rank. */
      cr_assert(b2 < b1, "p %d m %d: interleaved %g vs 1F1B %g", p, m, b2, b1);
      double theory = (double)(p - 1) / (2 * m + p - 1);
      cr_assert(fabs(b2 - theory) < 1e-12, "p %d m %d: interleaved %g vs %g", p, m, b2, theory);
      dt_pp_schedule_destroy(one);
      dt_pp_schedule_destroy(two);
    }
  }
}

Test(pipeline_schedule, one_f_one_b_lists) {
  /* Rank 0 of 2 with 3 microbatches: one warm-up forward, then F B pairs, then the cool-down. */
  dt_pp_schedule *s = make(DT_PP_1F1B, 2, 1, 3);
  int n = 0;
  const dt_pp_action *a = NULL;
  cr_assert_eq(dt_pp_schedule_actions(s, 0, &n, &a), DT_OK);
  char text[512] = "", name[32];
  for (int i = 0; i < n; i++) {
    strcat(text, dt_pp_action_format(a[i], name, sizeof name));
    strcat(text, " ");
  }
  cr_assert_str_eq(text, "0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0F2 0SEND_F2 0RECV_B1 0B1 "
                         "0RECV_B2 0B2 ");
  dt_pp_schedule_destroy(s);
}

Test(pipeline_schedule, refusals) {
  dt_pp_schedule *s = NULL;
  cr_assert_eq(dt_pp_schedule_create(DT_PP_1F1B, 2, 2, 4, &s), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "one stage per rank"), "%s", dt_last_error());
  cr_assert_eq(dt_pp_schedule_create(DT_PP_INTERLEAVED_1F1B, 2, 2, 3, &s), DT_ERR_UNSUPPORTED);
  cr_assert(strstr(dt_last_error(), "not a multiple"), "%s", dt_last_error());
  cr_assert_eq(dt_pp_schedule_create(DT_PP_GPIPE, 0, 1, 4, &s), DT_ERR_INVALID);
  cr_assert_eq(dt_pp_schedule_create(DT_PP_GPIPE, 2, 1, 0, &s), DT_ERR_INVALID);
  cr_assert_eq(dt_pp_schedule_create((dt_pp_schedule_kind)7, 2, 1, 1, &s), DT_ERR_INVALID);
  cr_assert_eq(dt_pp_schedule_create(DT_PP_GPIPE, 2, 1, 1, NULL), DT_ERR_INVALID);
  cr_assert_null(s);
}

/* One microbatch, two ranks: the lists as given, checked for the message's words. */
static void refused(const dt_pp_action *r0, int n0, const dt_pp_action *r1, int n1,
                    const char *words) {
  const dt_pp_action *lists[2] = {r0, r1};
  int counts[2] = {n0, n1};
  dt_pp_schedule *s = NULL;
  dt_status st = dt_pp_schedule_create_custom(2, 2, 2, counts, lists, &s);
  cr_assert_eq(st, DT_ERR_INVALID, "accepted; expected '%s'", words);
  cr_assert(strstr(dt_last_error(), words), "'%s' lacks '%s'", dt_last_error(), words);
  cr_assert(strncmp(dt_last_error(), "dt_pp_schedule_create_custom: ", 30) == 0, "%s",
            dt_last_error());
  cr_assert_null(s);
}

#define F(s, m)                                                                                    \
  { DT_PP_FORWARD, s, m }
#define B(s, m)                                                                                    \
  { DT_PP_BACKWARD, s, m }
#define SA(s, m)                                                                                   \
  { DT_PP_SEND_ACTIVATION, s, m }
#define RA(s, m)                                                                                   \
  { DT_PP_RECV_ACTIVATION, s, m }
#define SG(s, m)                                                                                   \
  { DT_PP_SEND_GRAD, s, m }
#define RG(s, m)                                                                                   \
  { DT_PP_RECV_GRAD, s, m }

Test(pipeline_schedule, bad_schedules_are_refused) {
  const dt_pp_action good0[] = {F(0, 0),  SA(0, 0), F(0, 1),  SA(0, 1),
                                RG(0, 0), B(0, 0),  RG(0, 1), B(0, 1)};
  const dt_pp_action good1[] = {RA(1, 0), F(1, 0), B(1, 0), SG(1, 0),
                                RA(1, 1), F(1, 1), B(1, 1), SG(1, 1)};
  const dt_pp_action *lists[2] = {good0, good1};
  int counts[2] = {8, 8};
  dt_pp_schedule *s = NULL;
  cr_assert_eq(dt_pp_schedule_create_custom(2, 2, 2, counts, lists, &s), DT_OK, "%s",
               dt_last_error());
  dt_pp_schedule_destroy(s);

  const dt_pp_action back_first[] = {RA(1, 0), B(1, 0), F(1, 0), SG(1, 0),
                                     RA(1, 1), F(1, 1), B(1, 1), SG(1, 1)};
  refused(good0, 8, back_first, 8, "every forward comes before its backward");
  const dt_pp_action no_recv[] = {F(1, 0), B(1, 0), SG(1, 0), RA(1, 1), F(1, 1), B(1, 1), SG(1, 1)};
  refused(good0, 8, no_recv, 7, "never runs 1RECV_F0");
  const dt_pp_action use_before_recv[] = {F(1, 0),  RA(1, 0), B(1, 0), SG(1, 0),
                                          RA(1, 1), F(1, 1),  B(1, 1), SG(1, 1)};
  refused(good0, 8, use_before_recv, 8, "needs the activation it receives");
  const dt_pp_action twice[] = {F(0, 0),  SA(0, 0), F(0, 0),  SA(0, 1),
                                RG(0, 0), B(0, 0),  RG(0, 1), B(0, 1)};
  refused(twice, 8, good1, 8, "runs 0F0 twice");
  const dt_pp_action wrong_rank[] = {F(1, 0),  SA(0, 0), F(0, 1),  SA(0, 1),
                                     RG(0, 0), B(0, 0),  RG(0, 1), B(0, 1)};
  refused(wrong_rank, 8, good1, 8, "stage 1 lives on rank 1");
  /* Rank 0 waits for a gradient before sending anything: rank 1 waits for the activation. */
  const dt_pp_action deadlock0[] = {RG(0, 0), F(0, 0), SA(0, 0), F(0, 1),
                                    SA(0, 1), B(0, 0), RG(0, 1), B(0, 1)};
  refused(deadlock0, 8, good1, 8, "deadlock");
  /* Rank 1 receives microbatch 1 first: no tags, so it would take microbatch 0's data. */
  const dt_pp_action swapped[] = {RA(1, 1), F(1, 1), B(1, 1), SG(1, 1),
                                  RA(1, 0), F(1, 0), B(1, 0), SG(1, 0)};
  refused(good0, 8, swapped, 8, "would receive rank 0's 0SEND_F0, not 0SEND_F1");
  const dt_pp_action out_of_range[] = {F(0, 0),  SA(0, 0), F(0, 2),  SA(0, 1),
                                       RG(0, 0), B(0, 0),  RG(0, 1), B(0, 1)};
  refused(out_of_range, 8, good1, 8, "microbatch outside 0..1");
  const dt_pp_action needless[] = {RA(0, 0), F(0, 0), SA(0, 0), F(0, 1), SA(0, 1),
                                   RG(0, 0), B(0, 0), RG(0, 1), B(0, 1)};
  refused(needless, 9, good1, 8, "no previous stage");
}

/* ---- The model and its unpipelined reference --------------------------------------------------
 */

static dt_status mse_loss(dt_tensor *y, dt_tensor *target, void *user, dt_tensor **loss) {
  (void)user;
  return dt_mse_loss(y, target, DT_LOSS_MEAN, loss);
}

typedef struct reference {
  double loss;         /* the whole batch's mean */
  double micro_sum[9]; /* [m]: sum over microbatches of loss_i * rows_i / ROWS, per m */
  int n_params;
  char names[MAX_PARAMS][32];
  double grads[MAX_PARAMS][HIDDEN * HIDDEN];
  int64_t numel[MAX_PARAMS];
} reference;

static dt_tensor *g_x, *g_y;
static reference g_ref;

static dt_status grab_grad(const char *fqn, dt_tensor *t, bool is_buffer, void *user) {
  reference *r = user;
  if (is_buffer) return DT_OK;
  dt_tensor *g = NULL;
  dt_status st = dt_tensor_grad(t, &g);
  if (st || !g) return st ? st : dt__error(DT_ERR_INTERNAL, "%s has no gradient", fqn);
  int i = r->n_params++;
  snprintf(r->names[i], sizeof r->names[i], "%s", fqn);
  r->numel[i] = dt_tensor_numel(g);
  st = dt_tensor_to_doubles(g, r->grads[i], r->numel[i]);
  dt_tensor_release(g);
  return st;
}

static void make_reference(void) {
  if (g_x) return;
  cr_assert_eq(dt_randn(2, (int64_t[]){ROWS, IN}, DT_F32, 5, &g_x), DT_OK);
  cr_assert_eq(dt_randn(2, (int64_t[]){ROWS, OUT}, DT_F32, 6, &g_y), DT_OK);
  dt_module *model = NULL;
  cr_assert_eq(build_model(&model), DT_OK);
  dt_tensor *y = NULL, *loss = NULL;
  cr_assert_eq(dt_module_forward(model, g_x, &y), DT_OK);
  cr_assert_eq(mse_loss(y, g_y, NULL, &loss), DT_OK);
  cr_assert_eq(dt_tensor_to_doubles(loss, &g_ref.loss, 1), DT_OK);
  cr_assert_eq(dt_backward(loss, NULL), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_module_visit_tensors(model, grab_grad, &g_ref), DT_OK, "%s", dt_last_error());
  dt_tensor_release(y);
  dt_tensor_release(loss);
  /* The microbatch sums, one microbatch at a time through the whole model (no grad). */
  bool prev = dt_grad_mode_set(false);
  for (int m = 1; m <= 8; m++) {
    double sum = 0;
    int start = 0;
    for (int i = 0; i < m; i++) {
      int rows = ROWS / m + (i < ROWS % m);
      dt_tensor *xs = NULL, *ys = NULL, *out = NULL, *l = NULL;
      double v = 0;
      cr_assert_eq(dt_narrow(g_x, 0, start, rows, &xs), DT_OK);
      cr_assert_eq(dt_narrow(g_y, 0, start, rows, &ys), DT_OK);
      cr_assert_eq(dt_module_forward(model, xs, &out), DT_OK);
      cr_assert_eq(mse_loss(out, ys, NULL, &l), DT_OK);
      cr_assert_eq(dt_tensor_to_doubles(l, &v, 1), DT_OK);
      sum += v * rows / ROWS;
      start += rows;
      dt_tensor_release(xs);
      dt_tensor_release(ys);
      dt_tensor_release(out);
      dt_tensor_release(l);
    }
    g_ref.micro_sum[m] = sum;
  }
  dt_grad_mode_set(prev);
  dt_module_destroy(model);
}

/* ---- Pipelined training steps ------------------------------------------------------------------
 */

typedef struct run_arg {
  dt_pp_schedule_kind kind;
  int p, v, m;
} run_arg;

static bool close_to(double a, double b, double rtol) {
  return fabs(a - b) <= rtol * fabs(b) + 1e-7;
}

static dt_status check_stage_grads(dt_module *stage) {
  reference got = {0};
  RANK_OK(dt_module_visit_tensors(stage, grab_grad, &got));
  for (int i = 0; i < got.n_params; i++) {
    int k = 0;
    while (k < g_ref.n_params && strcmp(g_ref.names[k], got.names[i]) != 0) k++;
    RANK_CHECK(k < g_ref.n_params, "%s is not a parameter of the model", got.names[i]);
    RANK_CHECK(got.numel[i] == g_ref.numel[k], "%s: %lld elements", got.names[i],
               (long long)got.numel[i]);
    for (int64_t e = 0; e < got.numel[i]; e++) {
      RANK_CHECK(close_to(got.grads[i][e], g_ref.grads[k][e], 1e-5), "%s[%lld]: %.9g vs %.9g",
                 got.names[i], (long long)e, got.grads[i][e], g_ref.grads[k][e]);
    }
  }
  return DT_OK;
}

static dt_status pipelined_rank(dt_comm *world, void *varg) {
  run_arg *a = varg;
  int rank = dt_comm_rank(world), n_stages = a->p * a->v;
  dt_module *model = NULL, *stages[16] = {0}, *mine[8] = {0};
  RANK_OK(build_model(&model));
  RANK_OK(dt_pp_split_model(model, n_stages, NULL, stages));
  dt_module_destroy(model);
  int n_mine = 0;
  for (int s = 0; s < n_stages; s++) {
    if (s % a->p == rank) {
      mine[n_mine++] = stages[s];
    } else {
      dt_module_destroy(stages[s]);
    }
  }
  dt_pp_schedule *sched = NULL;
  dt_pipeline *pipe = NULL;
  RANK_OK(dt_pp_schedule_create(a->kind, a->p, a->v, a->m, &sched));
  RANK_OK(dt_pipeline_create(world, sched, n_mine, mine, mse_loss, NULL, NULL, &pipe));
  bool last = rank == (n_stages - 1) % a->p;
  double loss = 0;
  RANK_OK(dt_pipeline_step(pipe, rank == 0 ? g_x : NULL, last ? g_y : NULL, &loss));
  RANK_CHECK(close_to(loss, g_ref.micro_sum[a->m], 1e-5), "loss %.9g, microbatch sum %.9g", loss,
             g_ref.micro_sum[a->m]);
  RANK_CHECK(close_to(loss, g_ref.loss, 1e-5), "loss %.9g, whole batch %.9g", loss, g_ref.loss);
  for (int i = 0; i < n_mine; i++) RANK_OK(check_stage_grads(mine[i]));
  /* A second step from zeroed gradients: the same gradients, and no new buffers. */
  int64_t buffers = dt_pipeline_buffers_allocated(pipe);
  for (int i = 0; i < n_mine; i++) {
    dt_module *st = mine[i];
    for (int c = 0; c < dt_module_child_count(st); c++) {
      dt_module *child = dt_module_child(st, c);
      dt_tensor *w = dt_module_parameter(child, "weight"), *b = dt_module_parameter(child, "bias");
      if (w) RANK_OK(dt_tensor_zero_grad(w, true));
      if (b) RANK_OK(dt_tensor_zero_grad(b, true));
    }
  }
  RANK_OK(dt_pipeline_step(pipe, rank == 0 ? g_x : NULL, last ? g_y : NULL, &loss));
  for (int i = 0; i < n_mine; i++) RANK_OK(check_stage_grads(mine[i]));
  RANK_CHECK(dt_pipeline_buffers_allocated(pipe) == buffers,
             "%lld buffers after the second step, "
             "%lld after the first",
             (long long)dt_pipeline_buffers_allocated(pipe), (long long)buffers);
  dt_pipeline_destroy(pipe);
  dt_pp_schedule_destroy(sched);
  for (int i = 0; i < n_mine; i++) dt_module_destroy(mine[i]);
  return DT_OK;
}

static void run_case(dt_pp_schedule_kind kind, int p, int v, int m) {
  make_reference();
  run_arg a = {kind, p, v, m};
  dt_status st = dt_comm_spawn(p, pipelined_rank, &a);
  cr_assert_eq(st, DT_OK, "kind %d, %d ranks x %d stages, %d microbatches: %s", kind, p, v, m,
               dt_last_error());
}

Test(pipeline, gpipe) {
  for (int p = 2; p <= 4; p += 2) {
    run_case(DT_PP_GPIPE, p, 1, 1);
    run_case(DT_PP_GPIPE, p, 1, 4);
  }
}

Test(pipeline, one_f_one_b) {
  for (int p = 2; p <= 4; p += 2) {
    run_case(DT_PP_1F1B, p, 1, 1);
    run_case(DT_PP_1F1B, p, 1, 3);
    run_case(DT_PP_1F1B, p, 1, 8);
  }
}

Test(pipeline, interleaved_one_f_one_b) {
  for (int p = 2; p <= 4; p += 2) {
    run_case(DT_PP_INTERLEAVED_1F1B, p, 2, p);
    run_case(DT_PP_INTERLEAVED_1F1B, p, 2, 2 * p);
  }
  /* One rank with 4 stages: the boundaries are handed over in memory, nothing is sent. */
  run_case(DT_PP_INTERLEAVED_1F1B, 1, 4, 2);
}
