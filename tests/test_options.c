/* The options convention (docs/api.md, "Naming"): a zero-initialised options struct and NULL
 * options both mean every default. dt_tp_style_options passes layouts by pointer (NULL: the
 * style's default), the optimizer options read 0 as PyTorch's default and DT_OPTIM_ZERO as
 * an exact zero. */
#include <criterion/criterion.h>

#include "comm_helpers.h"

enum { N = 4 };

static const double p0[N] = {10.0, -10.0, 4.0, -2.0};
static const double g0[N] = {0.5, -1.0, 2.0, 0.25};

static dt_tensor *param(void) {
  float f[N];
  for (int i = 0; i < N; i++) f[i] = (float)p0[i];
  dt_tensor *t = NULL;
  cr_assert_eq(dt_from_data(f, 1, (int64_t[]){N}, DT_F32, &t), DT_OK);
  cr_assert_eq(dt_tensor_set_requires_grad(t, true), DT_OK);
  return t;
}

/* One step with gradient scale * g0; writes the parameter's new values. */
static void step_scaled(dt_optimizer *opt, dt_tensor *p, double scale, double *out) {
  float f[N];
  for (int i = 0; i < N; i++) f[i] = (float)(scale * g0[i]);
  dt_tensor *g = NULL;
  cr_assert_eq(dt_from_data(f, 1, (int64_t[]){N}, DT_F32, &g), DT_OK);
  cr_assert_eq(dt_tensor_set_grad(p, g), DT_OK, "%s", dt_last_error());
  dt_tensor_release(g);
  cr_assert_eq(dt_optimizer_step(opt), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_tensor_to_doubles(p, out, N), DT_OK);
}

static void one_step(dt_optimizer *opt, dt_tensor *p, double *out) { step_scaled(opt, p, 1, out); }

/* Two Adam steps (no weight decay) with gradients g0 and 2 g0, in double as PyTorch. */
static double adam_two_steps(int i, double lr, double b1, double b2, double eps) {
  double p = p0[i], m = 0, v = 0;
  for (int t = 1; t <= 2; t++) {
    double g = t * g0[i];
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    double bc1 = 1 - pow(b1, t), bc2 = 1 - pow(b2, t);
    p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps);
  }
  return p;
}

/* The first AdamW step in double: the weight decays by 1 - lr wd, then moves by
 * lr * g / (|g| + eps) since both bias-corrected moments are g and g^2. */
static double adamw_first(int i, double lr, double wd, double eps) {
  return p0[i] * (1 - lr * wd) - lr * g0[i] / (fabs(g0[i]) + eps);
}

static void check(const double *got, const double *want, const char *what) {
  for (int i = 0; i < N; i++) {
    cr_assert(fabs(got[i] - want[i]) <= 1e-6 * fabs(want[i]) + 1e-7, "%s[%d]: %.9g, want %.9g",
              what, i, got[i], want[i]);
  }
}

Test(options, adamw_zero_and_null_options_are_pytorch_defaults) {
  const dt_adam_options zero = {0};
  const dt_adam_options *cases[] = {NULL, &zero};
  double want[N];
  for (int i = 0; i < N; i++) want[i] = adamw_first(i, 1e-3, 0.01, 1e-8);
  for (int c = 0; c < 2; c++) {
    dt_tensor *p = param();
    dt_optimizer *opt = NULL;
    cr_assert_eq(dt_optimizer_create_adamw(1, &p, cases[c], &opt), DT_OK, "%s", dt_last_error());
    double got[N];
    one_step(opt, p, got);
    check(got, want, c ? "zero struct" : "NULL options");
    /* The decay 0.01 shows: 10 * (1 - 1e-5) - 1e-3 is not 10 - 1e-3. */
    cr_assert(fabs(got[0] - (10.0 - 1e-3)) > 5e-5, "no weight decay: %.9g", got[0]);
    dt_optimizer_destroy(opt);
    dt_tensor_release(p);
  }
}

Test(options, adamw_weight_decay_optim_zero_turns_decay_off) {
  dt_adam_options o = {.lr = 1e-2, .weight_decay = DT_OPTIM_ZERO};
  dt_tensor *p = param();
  dt_optimizer *opt = NULL;
  cr_assert_eq(dt_optimizer_create_adamw(1, &p, &o, &opt), DT_OK, "%s", dt_last_error());
  double got[N], want[N];
  for (int i = 0; i < N; i++) want[i] = adamw_first(i, 1e-2, 0, 1e-8);
  one_step(opt, p, got);
  check(got, want, "no decay");
  dt_optimizer_destroy(opt);
  dt_tensor_release(p);
}

Test(options, adam_beta1_optim_zero_is_an_exact_zero) {
  /* beta1 = 0: the first moment is the last gradient; beta2 and eps keep PyTorch's defaults. */
  dt_adam_options o = {.lr = 0.1, .beta1 = DT_OPTIM_ZERO};
  dt_tensor *p = param();
  dt_optimizer *opt = NULL;
  cr_assert_eq(dt_optimizer_create_adam(1, &p, &o, &opt), DT_OK, "%s", dt_last_error());
  double got[N], want[N];
  one_step(opt, p, got);
  step_scaled(opt, p, 2, got);
  for (int i = 0; i < N; i++) want[i] = adam_two_steps(i, 0.1, 0, 0.999, 1e-8);
  check(got, want, "beta1 0");
  /* The default beta1 (0.9) lands elsewhere: the sentinel was not read as the default. */
  double other = adam_two_steps(0, 0.1, 0.9, 0.999, 1e-8);
  cr_assert(fabs(other - got[0]) > 1e-3, "beta1 0.9 gives %.9g too", other);
  dt_optimizer_destroy(opt);
  dt_tensor_release(p);
}

Test(options, sgd_null_options_use_lr_1e_3) {
  dt_tensor *p = param();
  dt_optimizer *opt = NULL;
  cr_assert_eq(dt_optimizer_create_sgd(1, &p, NULL, &opt), DT_OK, "%s", dt_last_error());
  double got[N], want[N];
  for (int i = 0; i < N; i++) want[i] = p0[i] - 1e-3 * g0[i];
  one_step(opt, p, got);
  check(got, want, "sgd");
  dt_optimizer_destroy(opt);
  dt_tensor_release(p);
}

Test(options, optimizer_values_outside_the_sentinels_are_refused) {
  dt_tensor *p = param();
  dt_optimizer *opt = NULL;
  dt_adam_options bad = {.beta1 = -0.5};
  cr_assert_eq(dt_optimizer_create_adam(1, &p, &bad, &opt), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "dt_optimizer_create_adam") &&
                strstr(dt_last_error(), "beta1 -0.5"),
            "%s", dt_last_error());
  dt_adam_options lr = {.lr = DT_OPTIM_ZERO};
  cr_assert_eq(dt_optimizer_create_adamw(1, &p, &lr, &opt), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "lr -1"), "%s", dt_last_error());
  cr_assert_eq(dt_optimizer_create_sgd(1, &p, NULL, NULL), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "dt_optimizer_create_sgd"), "%s", dt_last_error());
  cr_assert_null(opt);
  dt_tensor_release(p);
}

/* One Linear(4, 6) under Sequential, colwise over 2 ranks with options o; returns the output
 * placement kind of a forward (keep_distributed_output is set) or the status. */
static dt_status colwise_output(dt_comm *world, const dt_tp_style_options *o,
                                dt_placement *out_placement) {
  dt_module *lin = NULL, *model = NULL;
  RANK_OK(dt_nn_linear(4, 6, true, 7, &lin));
  RANK_OK(dt_nn_sequential(1, &lin, &model));
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){2}, NULL, &mesh));
  dt_tp_plan plan = {1, (dt_tp_plan_entry[]){{"0", DT_TP_COLWISE}}};
  dt_status st = dt_parallel_tp_module(model, mesh, &plan, o);
  if (!st) {
    dt_tensor *x = NULL, *y = NULL;
    RANK_OK(dt_ones(2, (int64_t[]){3, 4}, DT_F32, &x));
    RANK_OK(dt_module_forward(model, x, &y));
    RANK_CHECK(dt_tensor_is_distributed(y), "keep_distributed_output: a distributed output");
    *out_placement = dt_dist_placements(y)[0];
    dt_tensor_release(y);
    dt_tensor_release(x);
  }
  dt_module_destroy(model);
  dt_mesh_destroy(mesh);
  return st;
}

static dt_status tp_layouts_rank(dt_comm *world, void *arg) {
  (void)arg;
  /* Zero layouts are the style's defaults: colwise gives Shard(-1), the last dim (1). */
  dt_tp_style_options defaults = {.keep_distributed_output = true};
  dt_placement got = {0};
  RANK_OK(colwise_output(world, &defaults, &got));
  RANK_CHECK(got.kind == DT_SHARD && got.dim == 1, "default output kind %d dim %d", (int)got.kind,
             got.dim);
  /* A given Replicate (the zero dt_placement) is used, not mistaken for "unset". */
  dt_tp_style_options rep = {.output_layout = &(dt_placement){.kind = DT_REPLICATE},
                             .keep_distributed_output = true};
  RANK_OK(colwise_output(world, &rep, &got));
  RANK_CHECK(got.kind == DT_REPLICATE, "replicate output kind %d", (int)got.kind);
  /* A kind outside the enum is refused before anything is parallelized. */
  dt_tp_style_options bad = {.input_layout = &(dt_placement){.kind = (dt_placement_kind)7}};
  RANK_CHECK(colwise_output(world, &bad, &got) == DT_ERR_INVALID, "kind 7 accepted");
  RANK_CHECK(strstr(dt_last_error(), "dt_parallel_tp_module") &&
                 strstr(dt_last_error(), "input_layout") && strstr(dt_last_error(), "kind 7"),
             "%s", dt_last_error());
  return DT_OK;
}

Test(options, tp_style_layouts_null_means_default_and_replicate_is_kept) {
  SPAWN_OK(2, tp_layouts_rank, NULL);
}

/* dt_dist_from_local_options.run_check: its errors start with the public function's name. */
static dt_status run_check_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){2}, NULL, &mesh));
  dt_tensor *local = NULL, *d = NULL;
  int64_t rows = dt_comm_rank(world) == 0 ? 2 : 3; /* rank 1's shard is one row too long */
  RANK_OK(dt_zeros(1, &rows, DT_F32, &local));
  dt_dist_from_local_options o = {
      .global_shape = (int64_t[]){4}, .global_ndim = 1, .run_check = true};
  dt_placement s0 = dt_shard(0);
  dt_status st = dt_dist_from_local(mesh, local, 1, &s0, &o, &d);
  RANK_CHECK(st == DT_ERR_INVALID && d == NULL, "a misfit shard passed run_check (%d)", (int)st);
  const char *want = "dt_dist_from_local: run_check: rank 1";
  RANK_CHECK(strncmp(dt_last_error(), want, strlen(want)) == 0, "%s", dt_last_error());
  dt_tensor_release(local);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(options, from_local_run_check_errors_name_dt_dist_from_local) {
  SPAWN_OK(2, run_check_rank, NULL);
}
