/* The optimizer table (issue 23.6): dt_optimizer_create by name with named hyperparameters
 * (an exact zero is zero, no DT_OPTIM_ZERO), Lion (added as one file) against its update rule
 * written out by hand in double, hyperparameters read and set with their checks, and the
 * optimizer's state dict (issue 22.3): its names, its values, loading one into another
 * optimizer, and the refusals. */
#include <criterion/criterion.h>

#include "comm_helpers.h"

enum { N = 7, STEPS = 6 };

static double grad_at(int step, int i) { return sin(1.1 * i + 0.9 * step) * (1 + i % 3); }
static const double p0[N] = {0.5, -1.0, 2.0, 0.0, -0.25, 1.5, 0.125};

static dt_tensor *param(void) {
  dt_tensor *t = NULL;
  float f[N];
  for (int i = 0; i < N; i++) f[i] = (float)p0[i];
  cr_assert_eq(dt_from_data(f, 1, (int64_t[]){N}, DT_F32, &t), DT_OK);
  cr_assert_eq(dt_tensor_set_requires_grad(t, true), DT_OK);
  return t;
}

static void step_with(dt_optimizer *opt, dt_tensor *p, int s) {
  float f[N];
  for (int i = 0; i < N; i++) f[i] = (float)grad_at(s, i);
  dt_tensor *g = NULL;
  cr_assert_eq(dt_from_data(f, 1, (int64_t[]){N}, DT_F32, &g), DT_OK);
  cr_assert_eq(dt_tensor_set_grad(p, g), DT_OK);
  dt_tensor_release(g);
  cr_assert_eq(dt_optimizer_step(opt), DT_OK, "%s", dt_last_error());
}

static void expect_values(dt_tensor *t, const double *want, double tol, const char *what) {
  double got[N];
  cr_assert_eq(dt_tensor_to_doubles(t, got, N), DT_OK);
  for (int i = 0; i < N; i++) {
    cr_expect(fabs(got[i] - want[i]) <= tol * (1 + fabs(want[i])), "%s[%d]: %.9g, want %.9g", what,
              i, got[i], want[i]);
  }
}

/* Lion by hand: c = b1 m + (1 - b1) g; p = p (1 - lr wd) - lr sign(c); m = b2 m + (1 - b2) g. */
Test(optim_table, lion_matches_its_rule_by_hand) {
  const double lr = 0.01, b1 = 0.8, b2 = 0.95, wd = 0.1;
  dt_tensor *p = param();
  dt_optimizer *opt = NULL;
  dt_optimizer_hyperparameter h[] = {
      {"lr", lr}, {"beta1", b1}, {"beta2", b2}, {"weight_decay", wd}};
  cr_assert_eq(dt_optimizer_create("lion", 1, &p, 4, h, &opt), DT_OK, "%s", dt_last_error());
  cr_assert_str_eq(dt_optimizer_name(opt), "lion");
  double want[N], m[N] = {0};
  memcpy(want, p0, sizeof want);
  for (int s = 0; s < STEPS; s++) {
    step_with(opt, p, s);
    for (int i = 0; i < N; i++) {
      double g = grad_at(s, i), c = b1 * m[i] + (1 - b1) * g;
      want[i] = want[i] * (1 - lr * wd) - lr * (c > 0 ? 1 : c < 0 ? -1 : 0);
      m[i] = b2 * m[i] + (1 - b2) * g;
    }
  }
  expect_values(p, want, 1e-6, "lion p");
  dt_tensor *state = NULL;
  int64_t steps = 0;
  cr_assert_eq(dt_optimizer_state(opt, 0, "exp_avg", &state, &steps), DT_OK, "%s", dt_last_error());
  cr_assert_eq(steps, STEPS);
  expect_values(state, m, 1e-6, "lion exp_avg");
  dt_tensor_release(state);
  /* The defaults: lr 1e-4, beta1 0.9, beta2 0.99, weight_decay 0. */
  dt_optimizer *d = NULL;
  cr_assert_eq(dt_optimizer_create("lion", 1, &p, 0, NULL, &d), DT_OK);
  const char *names[] = {"lr", "beta1", "beta2", "weight_decay"};
  const double defaults[] = {1e-4, 0.9, 0.99, 0};
  for (int j = 0; j < 4; j++) {
    double v = -1;
    cr_assert_eq(dt_optimizer_get_hyperparameter(d, names[j], &v), DT_OK);
    cr_expect_eq(v, defaults[j], "%s = %g", names[j], v);
  }
  dt_optimizer_destroy(d);
  dt_optimizer_destroy(opt);
  dt_tensor_release(p);
}

/* An exact zero through the table equals the legacy DT_OPTIM_ZERO, bit for bit. */
Test(optim_table, exact_zero_without_the_sentinel) {
  dt_tensor *a = param(), *b = param();
  dt_optimizer *oa = NULL, *ob = NULL;
  dt_adam_options legacy = {.lr = 0.01, .beta1 = DT_OPTIM_ZERO, .weight_decay = DT_OPTIM_ZERO};
  cr_assert_eq(dt_optimizer_create_adamw(1, &a, &legacy, &oa), DT_OK);
  dt_optimizer_hyperparameter h[] = {{"lr", 0.01}, {"beta1", 0}, {"weight_decay", 0}};
  cr_assert_eq(dt_optimizer_create("adamw", 1, &b, 3, h, &ob), DT_OK, "%s", dt_last_error());
  for (int s = 0; s < STEPS; s++) {
    step_with(oa, a, s);
    step_with(ob, b, s);
  }
  const float *x = dt_tensor_data(a), *y = dt_tensor_data(b);
  for (int i = 0; i < N; i++) cr_expect_eq(x[i], y[i], "[%d] %.9g vs %.9g", i, x[i], y[i]);
  dt_optimizer_destroy(oa);
  dt_optimizer_destroy(ob);
  dt_tensor_release(a);
  dt_tensor_release(b);
}

Test(optim_table, create_and_hyperparameter_errors) {
  dt_tensor *p = param();
  dt_optimizer *opt = NULL;
  cr_assert_eq(dt_optimizer_create("adafactor", 1, &p, 0, NULL, &opt), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "dt_optimizer_create") &&
                strstr(dt_last_error(), "adafactor") && strstr(dt_last_error(), "lion"),
            "%s", dt_last_error());
  dt_optimizer_hyperparameter bad[] = {{"betas", 0.9}};
  cr_assert_eq(dt_optimizer_create("lion", 1, &p, 1, bad, &opt), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "betas"), "%s", dt_last_error());
  dt_optimizer_hyperparameter range[] = {{"beta2", 1.5}};
  cr_assert_eq(dt_optimizer_create("adam", 1, &p, 1, range, &opt), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "beta2 1.5"), "%s", dt_last_error());
  cr_assert_eq(dt_optimizer_create(NULL, 1, &p, 0, NULL, &opt), DT_ERR_INVALID);
  cr_assert_null(opt);

  dt_optimizer_hyperparameter mom[] = {{"momentum", 0.9}, {"lr", 0.1}};
  cr_assert_eq(dt_optimizer_create("sgd", 1, &p, 2, mom, &opt), DT_OK);
  double v = 0;
  cr_assert_eq(dt_optimizer_set_hyperparameter(opt, "lr", 0.25), DT_OK);
  cr_assert_eq(dt_optimizer_get_hyperparameter(opt, "lr", &v), DT_OK);
  cr_assert_eq(v, 0.25);
  cr_assert_eq(dt_optimizer_set_hyperparameter(opt, "lr", -1), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "lr -1"), "%s", dt_last_error());
  /* Dropping the momentum would leave a buffer no step uses: refused. */
  cr_assert_eq(dt_optimizer_set_hyperparameter(opt, "momentum", 0), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "momentum_buffer"), "%s", dt_last_error());
  cr_assert_eq(dt_optimizer_get_hyperparameter(opt, "eps", &v), DT_ERR_INVALID);
  cr_assert_eq(dt_optimizer_get_hyperparameter(opt, "lr", &v), DT_OK);
  cr_assert_eq(v, 0.25);
  dt_optimizer_destroy(opt);
  dt_tensor_release(p);
}

/* The state dict's names and values; another AdamW loads it and continues exactly as the
 * first; an SGD's state dict or a bad step is refused before anything changes. */
Test(optim_table, state_dict_round_trip) {
  dt_tensor *a = param(), *b = param();
  dt_optimizer *oa = NULL, *ob = NULL, *sgd = NULL;
  dt_optimizer_hyperparameter h[] = {{"lr", 0.02}, {"weight_decay", 0.1}};
  cr_assert_eq(dt_optimizer_create("adamw", 1, &a, 2, h, &oa), DT_OK);
  cr_assert_eq(dt_optimizer_create("adamw", 1, &b, 0, NULL, &ob), DT_OK);
  for (int s = 0; s < 3; s++) step_with(oa, a, s);
  dt_optimizer_state_dict sd = {0};
  const char *fqn = "fc.weight";
  cr_assert_eq(dt_optimizer_get_state_dict(oa, &fqn, "opt.", &sd), DT_OK, "%s", dt_last_error());
  const char *want[] = {"opt.state.fc.weight.exp_avg",
                        "opt.state.fc.weight.exp_avg_sq",
                        "opt.state.fc.weight.step",
                        "opt.hyper.lr",
                        "opt.hyper.beta1",
                        "opt.hyper.beta2",
                        "opt.hyper.eps",
                        "opt.hyper.weight_decay",
                        "opt.steps_taken"};
  cr_assert_eq(sd.count, 9);
  for (int e = 0; e < 9; e++) cr_expect_str_eq(sd.names[e], want[e]);
  cr_assert_eq(*(const int64_t *)dt_tensor_data(sd.tensors[8]), 3);
  cr_assert_eq(*(const int64_t *)dt_tensor_data(sd.tensors[2]), 3);
  cr_assert_eq(*(const double *)dt_tensor_data(sd.tensors[3]), 0.02);
  /* b takes a's parameters and state: both then step alike. */
  bool prev = dt_grad_mode_set(false);
  cr_assert_eq(dt_copy_(b, a), DT_OK, "%s", dt_last_error());
  dt_grad_mode_set(prev);
  cr_assert_eq(dt_optimizer_load_state_dict(ob, &sd), DT_OK, "%s", dt_last_error());
  double lr = 0;
  cr_assert_eq(dt_optimizer_get_hyperparameter(ob, "lr", &lr), DT_OK);
  cr_assert_eq(lr, 0.02);
  for (int s = 3; s < STEPS; s++) {
    step_with(oa, a, s);
    step_with(ob, b, s);
  }
  const float *x = dt_tensor_data(a), *y = dt_tensor_data(b);
  for (int i = 0; i < N; i++) cr_expect_eq(x[i], y[i], "[%d] %.9g vs %.9g", i, x[i], y[i]);

  /* Refusals: an AdamW state dict into SGD, a negative step. */
  cr_assert_eq(dt_optimizer_create("sgd", 1, &a, 1,
                                   (dt_optimizer_hyperparameter[]){{"momentum", 0.5}}, &sgd),
               DT_OK);
  cr_assert_eq(dt_optimizer_load_state_dict(sgd, &sd), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "dt_optimizer_load_state_dict") &&
                strstr(dt_last_error(), "exp_avg"),
            "%s", dt_last_error());
  *(int64_t *)dt_tensor_data(sd.tensors[2]) = -4;
  cr_assert_eq(dt_optimizer_load_state_dict(ob, &sd), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "opt.state.fc.weight.step") && strstr(dt_last_error(), "-4"),
            "%s", dt_last_error());
  *(double *)dt_tensor_data(sd.tensors[4]) = 2.0; /* beta1 2 and the step fixed: beta1 refused */
  *(int64_t *)dt_tensor_data(sd.tensors[2]) = 1;
  cr_assert_eq(dt_optimizer_load_state_dict(ob, &sd), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "beta1 2"), "%s", dt_last_error());
  cr_assert_eq(dt_optimizer_get_hyperparameter(ob, "beta1", &lr), DT_OK);
  cr_assert_eq(lr, 0.9); /* unchanged */
  /* A tampered dict whose lr entry is a second beta1 entry (so the count of hyperparameters
   * still matches and lr would silently keep its value) is refused, not half-applied. */
  *(double *)dt_tensor_data(sd.tensors[4]) = 0.9;
  char *saved_name = sd.names[3];
  int saved_role = sd.roles[3];
  sd.names[3] = sd.names[4];
  sd.roles[3] = sd.roles[4];
  cr_assert_eq(dt_optimizer_load_state_dict(ob, &sd), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "opt.hyper.beta1") && strstr(dt_last_error(), "repeats"), "%s",
            dt_last_error());
  sd.names[3] = saved_name;
  sd.roles[3] = saved_role;
  cr_assert_eq(dt_optimizer_load_state_dict(ob, &sd), DT_OK, "%s", dt_last_error());
  dt_optimizer_state_dict_clear(&sd);
  cr_assert_eq(dt_optimizer_get_state_dict(oa, NULL, NULL, &sd), DT_ERR_INVALID);
  cr_assert_eq(sd.count, 0);
  dt_optimizer_state_dict_clear(NULL);
  dt_optimizer_destroy(oa);
  dt_optimizer_destroy(ob);
  dt_optimizer_destroy(sgd);
  dt_tensor_release(a);
  dt_tensor_release(b);
}
