/* Hostile optimizer state (issue 35, item 7): every number a state dict carries is bounded
 * before it is used. A step count of INT64_MAX used to pass the ">= 0" check and overflow on
 * the next step (bias corrections inf, parameters NaN); steps_taken likewise; a schedule's
 * decay of 1e300 or NaN was cast to int before its range check (undefined behaviour). Each is
 * refused with a message naming the entry and the field, and the optimizer is left as it was.
 * A count at the bound 2^53 loads, and the step that would pass it is refused. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "dtensor/dtensor.h"

#define OK(x) cr_assert_eq((x), DT_OK, "%s", dt_last_error())

typedef struct fixture {
  dt_tensor *p;
  dt_optimizer *opt;
  dt_optimizer_state_dict sd;
} fixture;

/* Adam over one [4] parameter with a cosine schedule, one step taken, and its state dict. */
static void setup_fixture(fixture *f) {
  memset(f, 0, sizeof *f);
  OK(dt_randn(1, (int64_t[]){4}, DT_F32, 3, &f->p));
  OK(dt_tensor_set_requires_grad(f->p, true));
  OK(dt_optimizer_create_adam(1, &f->p, NULL, &f->opt));
  dt_lr_schedule s = {.decay = DT_LR_DECAY_COSINE,
                      .peak_lr = 1e-3,
                      .min_lr = 1e-5,
                      .warmup_steps = 2,
                      .total_steps = 100};
  OK(dt_optimizer_set_lr_schedule(f->opt, &s));
  dt_tensor *g = NULL;
  OK(dt_full(1, (int64_t[]){4}, 0.25, DT_F32, &g));
  OK(dt_tensor_set_grad(f->p, g));
  dt_tensor_release(g);
  OK(dt_optimizer_step(f->opt));
  OK(dt_optimizer_get_state_dict(f->opt, (const char *[]){"w"}, NULL, &f->sd));
}

static void teardown_fixture(fixture *f) {
  dt_optimizer_state_dict_clear(&f->sd);
  dt_optimizer_destroy(f->opt);
  dt_tensor_release(f->p);
}

static dt_tensor *entry(fixture *f, const char *name) {
  for (int e = 0; e < f->sd.count; e++)
    if (strcmp(f->sd.names[e], name) == 0) return f->sd.tensors[e];
  cr_assert_fail("no entry %s", name);
  return NULL;
}

/* Loading the state dict with `name` set to v (an int64 or a double entry) is refused with
 * `phrase` in the message (the entry's name for each value checked alone); the optimizer's
 * step counts and lr are as they were. */
static void expect_refused_i64(fixture *f, const char *name, int64_t v, const char *phrase) {
  dt_tensor *t = entry(f, name);
  int64_t *at = dt_tensor_data(t), old = *at;
  int64_t steps_before = 0;
  dt_tensor *state = NULL;
  OK(dt_optimizer_state(f->opt, 0, "exp_avg", &state, &steps_before));
  dt_tensor_release(state);
  int64_t taken_before = dt_optimizer_steps_taken(f->opt);
  *at = v;
  cr_assert_eq(dt_optimizer_load_state_dict(f->opt, &f->sd), DT_ERR_INVALID, "%s = %lld loaded",
               name, (long long)v);
  const char *m = dt_last_error();
  cr_assert(strstr(m, "dt_optimizer_load_state_dict") && strstr(m, name) && strstr(m, phrase),
            "%s = %lld: `%s` in: %s", name, (long long)v, phrase, m);
  *at = old;
  int64_t steps_after = 0;
  OK(dt_optimizer_state(f->opt, 0, "exp_avg", &state, &steps_after));
  dt_tensor_release(state);
  cr_assert_eq(steps_after, steps_before);
  cr_assert_eq(dt_optimizer_steps_taken(f->opt), taken_before);
}

static void expect_refused_f64(fixture *f, const char *name, double v, const char *phrase) {
  dt_tensor *t = entry(f, name);
  double *at = dt_tensor_data(t), old = *at;
  double lr_before = 0, lr_after = 0;
  OK(dt_optimizer_get_hyperparameter(f->opt, "lr", &lr_before));
  *at = v;
  cr_assert_eq(dt_optimizer_load_state_dict(f->opt, &f->sd), DT_ERR_INVALID, "%s = %g loaded", name,
               v);
  const char *m = dt_last_error();
  cr_assert(strstr(m, "dt_optimizer_load_state_dict: ") == m && strstr(m, phrase),
            "%s = %g: `%s` in: %s", name, v, phrase, m);
  *at = old;
  OK(dt_optimizer_get_hyperparameter(f->opt, "lr", &lr_after));
  cr_assert_eq(lr_after, lr_before);
}

Test(optim_state_bounds, step_counts_out_of_range_are_refused) {
  fixture f;
  setup_fixture(&f);
  const int64_t max = (int64_t)1 << 53;
  const char *step = "optim.state.w.step", *taken = "optim.steps_taken";
  expect_refused_i64(&f, step, INT64_MAX, "(a step count) holds step 9223372036854775807");
  expect_refused_i64(&f, step, max + 1, "expected 0 to 2^53");
  expect_refused_i64(&f, step, -1, "holds step -1");
  expect_refused_i64(&f, step, INT64_MIN, "expected 0 to 2^53");
  expect_refused_i64(&f, taken, INT64_MAX, "(steps_taken) holds 9223372036854775807 steps");
  expect_refused_i64(&f, taken, max + 1, "expected 0 to 2^53");
  expect_refused_i64(&f, taken, -5, "holds -5 steps");
  /* The unaltered state dict still loads. */
  OK(dt_optimizer_load_state_dict(f.opt, &f.sd));
  teardown_fixture(&f);
}

Test(optim_state_bounds, schedule_fields_are_checked_as_doubles_before_any_cast) {
  fixture f;
  setup_fixture(&f);
  const char *decay = "optim.schedule.decay";
  expect_refused_f64(&f, decay, 1e300,
                     "entry `optim.schedule.decay` (schedule field decay) holds 1e+300");
  expect_refused_f64(&f, decay, NAN,
                     "entry `optim.schedule.decay` (schedule field decay) holds nan");
  expect_refused_f64(&f, decay, -1, "expected 0 (COSINE), 1 (LINEAR) or 2 (WSD)");
  expect_refused_f64(&f, decay, 3, "expected 0 (COSINE), 1 (LINEAR) or 2 (WSD)");
  expect_refused_f64(&f, decay, 1.5, "holds 1.5");
  expect_refused_f64(&f, decay, INFINITY, "holds inf");
  const char *ints[] = {"warmup_steps", "total_steps", "decay_steps"};
  for (int i = 0; i < 3; i++) {
    char name[64];
    snprintf(name, sizeof name, "optim.schedule.%s", ints[i]);
    char phrase[160];
    snprintf(phrase, sizeof phrase,
             "entry `%s` (schedule field %s) holds 1e+300 (expected an integer of magnitude at "
             "most 2^53)",
             name, ints[i]);
    expect_refused_f64(&f, name, 1e300, phrase);
    expect_refused_f64(&f, name, -1e300, "an integer of magnitude at most 2^53");
    expect_refused_f64(&f, name, NAN, "an integer of magnitude at most 2^53");
    expect_refused_f64(&f, name, 9.5, "holds 9.5");
  }
  expect_refused_f64(&f, "optim.schedule.peak_lr", NAN,
                     "entry `optim.schedule.peak_lr` (schedule field peak_lr) holds nan");
  expect_refused_f64(&f, "optim.schedule.min_lr", INFINITY,
                     "entry `optim.schedule.min_lr` (schedule field min_lr) holds inf");
  /* Finite values in range for the cast but not for the schedule: its own check names them. */
  expect_refused_f64(&f, "optim.schedule.warmup_steps", -3,
                     "the state dict's schedule: warmup_steps -3");
  expect_refused_f64(&f, "optim.schedule.peak_lr", -1, "the state dict's schedule: peak_lr -1");
  OK(dt_optimizer_load_state_dict(f.opt, &f.sd));
  teardown_fixture(&f);
}

Test(optim_state_bounds, hyperparameters_out_of_range_are_refused) {
  fixture f;
  setup_fixture(&f);
  expect_refused_f64(&f, "optim.hyper.beta1", NAN, "the state dict's hyperparameters: beta1 nan");
  expect_refused_f64(&f, "optim.hyper.beta2", 1.0, "the state dict's hyperparameters: beta2 1");
  expect_refused_f64(&f, "optim.hyper.eps", -1e300,
                     "the state dict's hyperparameters: eps -1e+300");
  expect_refused_f64(&f, "optim.hyper.weight_decay", INFINITY,
                     "the state dict's hyperparameters: weight_decay inf");
  teardown_fixture(&f);
}

/* The bound itself loads; the step that would pass it is refused before anything changes,
 * so ++ never overflows and the parameter keeps its values. */
Test(optim_state_bounds, the_step_at_the_bound_is_refused_not_overflowed) {
  fixture f;
  setup_fixture(&f);
  const int64_t max = (int64_t)1 << 53;
  const char *fields[] = {"optim.state.w.step", "optim.steps_taken"};
  const char *phrases[] = {"parameter 0's step count is 9007199254740992",
                           "steps_taken is 9007199254740992"};
  for (int k = 0; k < 2; k++) {
    int64_t *at = dt_tensor_data(entry(&f, fields[k]));
    int64_t old = *at;
    *at = max;
    OK(dt_optimizer_load_state_dict(f.opt, &f.sd));
    float before[4], after[4];
    memcpy(before, dt_tensor_data(f.p), sizeof before);
    cr_assert_eq(dt_optimizer_step(f.opt), DT_ERR_INVALID, "%s at 2^53 stepped", fields[k]);
    cr_assert(strstr(dt_last_error(), "dt_optimizer_step") && strstr(dt_last_error(), phrases[k]) &&
                  strstr(dt_last_error(), "(2^53)"),
              "%s", dt_last_error());
    memcpy(after, dt_tensor_data(f.p), sizeof after);
    cr_assert_eq(memcmp(before, after, sizeof before), 0, "the parameter changed");
    int64_t steps = 0;
    dt_tensor *state = NULL;
    OK(dt_optimizer_state(f.opt, 0, "exp_avg", &state, &steps));
    dt_tensor_release(state);
    cr_assert_eq(steps, k == 0 ? max : 1);
    cr_assert_eq(dt_optimizer_steps_taken(f.opt), k == 1 ? max : 1);
    /* Back below the bound, the step runs and its values are finite. */
    *at = max - 1;
    OK(dt_optimizer_load_state_dict(f.opt, &f.sd));
    OK(dt_optimizer_step(f.opt));
    for (int i = 0; i < 4; i++)
      cr_assert(isfinite(((float *)dt_tensor_data(f.p))[i]), "element %d is not finite", i);
    *at = old;
    OK(dt_optimizer_load_state_dict(f.opt, &f.sd));
  }
  teardown_fixture(&f);
}
