/* Learning-rate schedules (issue 28.3): linear warmup then cosine, linear or
 * warmup-stable-decay with a floor, against values worked out by hand from the closed forms;
 * the rate each SGD step actually used (read back from the parameter's change); the schedule's
 * state in the optimizer's state dict (a second optimizer continues with the same rates); the
 * refusals. */
#include <criterion/criterion.h>

#include "comm_helpers.h"

static double value(const dt_lr_schedule *s, int64_t t) {
  double lr = -1;
  cr_assert_eq(dt_lr_schedule_value(s, t, &lr), DT_OK, "%s", dt_last_error());
  return lr;
}

#define NEAR(a, b) cr_expect(fabs((a) - (b)) <= 1e-12, "%.17g vs %.17g", (a), (b))

Test(lr_schedule, closed_form_values) {
  /* Cosine: warmup 4 to peak 1, then cosine over 8 steps to the floor 0.1. */
  dt_lr_schedule c = {DT_LR_DECAY_COSINE, 1.0, 0.1, 4, 12, 0};
  NEAR(value(&c, 0), 0.25); /* 1 * 1/4 */
  NEAR(value(&c, 1), 0.5);  /* 2/4 */
  NEAR(value(&c, 3), 1.0);  /* 4/4 */
  NEAR(value(&c, 4), 1.0);  /* p = 0 */
  NEAR(value(&c, 8), 0.55); /* p = 1/2: 0.1 + 0.9 * (1 + cos(pi/2)) / 2 */
  NEAR(value(&c, 6), 0.1 + 0.9 * (1 + sqrt(0.5)) / 2); /* p = 1/4: cos(pi/4) = sqrt(1/2) */
  NEAR(value(&c, 12), 0.1);                            /* the end */
  NEAR(value(&c, 1000), 0.1);
  /* The floor holds during warmup too: peak 1 over 20 steps starts at 0.05 < 0.1. */
  dt_lr_schedule f = {DT_LR_DECAY_COSINE, 1.0, 0.1, 20, 40, 0};
  NEAR(value(&f, 0), 0.1);
  NEAR(value(&f, 3), 0.2);
  /* Linear: no warmup, from 2 to 0 over 10 steps. */
  dt_lr_schedule l = {DT_LR_DECAY_LINEAR, 2.0, 0.0, 0, 10, 0};
  NEAR(value(&l, 0), 2.0);
  NEAR(value(&l, 5), 1.0);
  NEAR(value(&l, 9), 0.2);
  NEAR(value(&l, 10), 0.0);
  /* Warmup-stable-decay: warmup 2, stable until step 6, linear decay over the last 4. */
  dt_lr_schedule w = {DT_LR_DECAY_WSD, 1.0, 0.2, 2, 10, 4};
  NEAR(value(&w, 0), 0.5);
  NEAR(value(&w, 1), 1.0);
  NEAR(value(&w, 2), 1.0);
  NEAR(value(&w, 5), 1.0);
  NEAR(value(&w, 6), 1.0); /* q = 0 */
  NEAR(value(&w, 7), 0.8); /* q = 1/4: 0.2 + 0.8 * 3/4 */
  NEAR(value(&w, 8), 0.6);
  NEAR(value(&w, 9), 0.4);
  NEAR(value(&w, 10), 0.2);
}

static dt_tensor *param(double v) {
  dt_tensor *t = NULL;
  float f = (float)v;
  cr_assert_eq(dt_from_data(&f, 1, (int64_t[]){1}, DT_F32, &t), DT_OK);
  cr_assert_eq(dt_tensor_set_requires_grad(t, true), DT_OK);
  return t;
}

/* One plain SGD step with gradient 1: the parameter falls by exactly the rate used (in
 * float32: compared within its rounding). */
static double step_rate(dt_optimizer *opt, dt_tensor *p) {
  dt_tensor *g = NULL;
  cr_assert_eq(dt_ones(1, (int64_t[]){1}, DT_F32, &g), DT_OK);
  cr_assert_eq(dt_tensor_set_grad(p, g), DT_OK);
  dt_tensor_release(g);
  double before = *(const float *)dt_tensor_data(p);
  cr_assert_eq(dt_optimizer_step(opt), DT_OK, "%s", dt_last_error());
  return before - *(const float *)dt_tensor_data(p);
}

Test(lr_schedule, sgd_steps_use_the_schedule_and_resume_from_its_state) {
  dt_lr_schedule s = {DT_LR_DECAY_WSD, 0.5, 0.05, 3, 12, 5};
  dt_tensor *a = param(1), *b = param(1);
  dt_optimizer *oa = NULL, *ob = NULL;
  cr_assert_eq(dt_optimizer_create("sgd", 1, &a, 0, NULL, &oa), DT_OK);
  cr_assert_eq(dt_optimizer_set_lr_schedule(oa, &s), DT_OK, "%s", dt_last_error());
  for (int64_t t = 0; t < 6; t++) {
    double lr = 0, want = value(&s, t);
    cr_assert_eq(dt_optimizer_get_hyperparameter(oa, "lr", &lr), DT_OK);
    cr_expect_eq(lr, want, "step %lld: lr %g, schedule %g", (long long)t, lr, want);
    double used = step_rate(oa, a);
    cr_expect(fabs(used - want) <= 1e-5, "step %lld used %.9g, schedule %.9g", (long long)t, used,
              want);
  }
  cr_assert_eq(dt_optimizer_steps_taken(oa), 6);
  /* b (another schedule attached) loads a's state dict and continues with a's rates. */
  cr_assert_eq(dt_optimizer_create("sgd", 1, &b, 0, NULL, &ob), DT_OK);
  dt_lr_schedule other = {DT_LR_DECAY_COSINE, 9.0, 0, 0, 3, 0};
  cr_assert_eq(dt_optimizer_set_lr_schedule(ob, &other), DT_OK);
  dt_optimizer_state_dict sd = {0};
  const char *name = "w";
  cr_assert_eq(dt_optimizer_get_state_dict(oa, &name, NULL, &sd), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_optimizer_load_state_dict(ob, &sd), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_optimizer_steps_taken(ob), 6);
  for (int64_t t = 6; t < 14; t++) {
    double ra = step_rate(oa, a), rb = step_rate(ob, b);
    cr_expect(fabs(ra - value(&s, t)) <= 1e-5 && fabs(rb - value(&s, t)) <= 1e-5,
              "step %lld: %.9g and %.9g, schedule %.9g", (long long)t, ra, rb, value(&s, t));
  }
  /* A state dict whose schedule is broken (total < warmup) is refused; nothing changes. */
  for (int e = 0; e < sd.count; e++) {
    if (strcmp(sd.names[e], "optim.schedule.total_steps") == 0)
      *(double *)dt_tensor_data(sd.tensors[e]) = 1;
  }
  cr_assert_eq(dt_optimizer_load_state_dict(ob, &sd), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "total_steps 1"), "%s", dt_last_error());
  cr_assert_eq(dt_optimizer_steps_taken(ob), 14);
  dt_optimizer_state_dict_clear(&sd);
  dt_optimizer_destroy(oa);
  dt_optimizer_destroy(ob);
  dt_tensor_release(a);
  dt_tensor_release(b);
}

Test(lr_schedule, refusals) {
  double lr;
  const dt_lr_schedule bad[] = {
      {DT_LR_DECAY_COSINE, 0, 0, 0, 10, 0},  /* peak_lr 0 */
      {DT_LR_DECAY_COSINE, 1, 2, 0, 10, 0},  /* min above peak */
      {DT_LR_DECAY_LINEAR, 1, 0, 10, 10, 0}, /* warmup not below total */
      {DT_LR_DECAY_WSD, 1, 0, 2, 10, 9},     /* decay longer than total - warmup */
      {(dt_lr_decay)7, 1, 0, 0, 10, 0},      /* no such decay */
  };
  const char *said[] = {"peak_lr 0", "min_lr 2", "warmup_steps 10", "decay_steps 9", "decay 7"};
  for (int i = 0; i < 5; i++) {
    cr_assert_eq(dt_lr_schedule_value(&bad[i], 0, &lr), DT_ERR_INVALID, "case %d", i);
    cr_assert(strstr(dt_last_error(), said[i]), "case %d: %s", i, dt_last_error());
  }
  cr_assert_eq(dt_lr_schedule_value(&(dt_lr_schedule){DT_LR_DECAY_COSINE, 1, 0, 0, 4, 0}, -1, &lr),
               DT_ERR_INVALID);
  cr_assert_eq(dt_optimizer_set_lr_schedule(NULL, NULL), DT_ERR_INVALID);
}
