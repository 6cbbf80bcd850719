/*
 * Learning-rate schedules (optim.h): linear warmup, then cosine, linear or
 * warmup-stable-decay, with a floor. A schedule attached to an optimizer sets its "lr" before
 * each step from the optimizer's steps taken; its state travels in the optimizer's state dict.
 */
#include <math.h>

#include "optim/optim_impl.h"

static dt_status check_schedule(const char *fn, const dt_lr_schedule *s) {
  if (s->decay != DT_LR_DECAY_COSINE && s->decay != DT_LR_DECAY_LINEAR &&
      s->decay != DT_LR_DECAY_WSD) {
    return dt__error(DT_ERR_INVALID, "%s: decay %d (expected COSINE, LINEAR or WSD)", fn,
                     (int)s->decay);
  }
  if (!(s->peak_lr > 0) || !isfinite(s->peak_lr))
    return dt__error(DT_ERR_INVALID, "%s: peak_lr %g (expected > 0)", fn, s->peak_lr);
  if (!(s->min_lr >= 0 && s->min_lr <= s->peak_lr)) {
    return dt__error(DT_ERR_INVALID, "%s: min_lr %g (expected in [0, peak_lr %g])", fn, s->min_lr,
                     s->peak_lr);
  }
  if (s->warmup_steps < 0 || s->total_steps <= s->warmup_steps) {
    return dt__error(DT_ERR_INVALID,
                     "%s: warmup_steps %lld, total_steps %lld (expected 0 <= warmup < total)", fn,
                     (long long)s->warmup_steps, (long long)s->total_steps);
  }
  if (s->decay == DT_LR_DECAY_WSD &&
      (s->decay_steps < 1 || s->decay_steps > s->total_steps - s->warmup_steps)) {
    return dt__error(DT_ERR_INVALID, "%s: decay_steps %lld (expected 1 to total - warmup = %lld)",
                     fn, (long long)s->decay_steps, (long long)(s->total_steps - s->warmup_steps));
  }
  return DT_OK;
}

/* The closed form of optim.h, for a checked schedule. */
static double value_at(const dt_lr_schedule *s, int64_t t) {
  double peak = s->peak_lr, floor = s->min_lr, lr;
  if (t < s->warmup_steps) {
    lr = peak * (double)(t + 1) / (double)s->warmup_steps;
  } else if (t >= s->total_steps) {
    lr = floor;
  } else if (s->decay == DT_LR_DECAY_WSD) {
    int64_t decay_from = s->total_steps - s->decay_steps;
    double q = t < decay_from ? 0.0 : (double)(t - decay_from) / (double)s->decay_steps;
    lr = floor + (peak - floor) * (1.0 - q);
  } else {
    double p = (double)(t - s->warmup_steps) / (double)(s->total_steps - s->warmup_steps);
    double shape =
        s->decay == DT_LR_DECAY_COSINE ? 0.5 * (1.0 + cos(3.14159265358979323846 * p)) : 1.0 - p;
    lr = floor + (peak - floor) * shape;
  }
  return lr < floor ? floor : lr;
}

dt_status dt_lr_schedule_value(const dt_lr_schedule *s, int64_t t, double *lr) {
  static const char fn[] = "dt_lr_schedule_value";
  if (!s || !lr) return dt__error(DT_ERR_INVALID, "%s: NULL argument", fn);
  if (t < 0) return dt__error(DT_ERR_INVALID, "%s: step %lld (expected >= 0)", fn, (long long)t);
  dt_status st = check_schedule(fn, s);
  if (st) return st;
  *lr = value_at(s, t);
  return DT_OK;
}

dt_status dt__optim_check_schedule(const char *fn, const dt_lr_schedule *s) {
  return check_schedule(fn, s);
}

void dt__optim_apply_schedule(dt_optimizer *opt) {
  if (!opt->has_schedule) return;
  int j = dt__optim_hyper_index(opt->kind, "lr");
  if (j >= 0) opt->hyper[j] = value_at(&opt->schedule, opt->steps_taken);
}

dt_status dt_optimizer_set_lr_schedule(dt_optimizer *opt, const dt_lr_schedule *s) {
  static const char fn[] = "dt_optimizer_set_lr_schedule";
  if (!opt) return dt__error(DT_ERR_INVALID, "%s: opt is NULL", fn);
  if (!s) {
    opt->has_schedule = false;
    return DT_OK;
  }
  if (dt__optim_hyper_index(opt->kind, "lr") < 0) {
    return dt__error(DT_ERR_INVALID, "%s: %s has no hyperparameter \"lr\"", fn, opt->kind->name);
  }
  dt_status st = check_schedule(fn, s);
  if (st) return st;
  opt->schedule = *s;
  opt->has_schedule = true;
  dt__optim_apply_schedule(opt);
  return DT_OK;
}

int64_t dt_optimizer_steps_taken(const dt_optimizer *opt) { return opt ? opt->steps_taken : -1; }
