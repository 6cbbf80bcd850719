/*
 * Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"; the update of the
 * reference lion-pytorch), one entry of the optimizer table: one slot "exp_avg",
 * hyperparameters lr (1e-4), beta1 (0.9), beta2 (0.99) and weight_decay (0, decoupled).
 *   c = beta1 m + (1 - beta1) g;  p = p (1 - lr wd) - lr sign(c);  m = beta2 m + (1 - beta2) g
 * in float32; sign(0) is 0.
 */
#include <math.h>

#include "optim/optim_impl.h"

enum { LR, BETA1, BETA2, WEIGHT_DECAY };

static dt_status lion_check(const char *fn, const double *h) {
  if (!(h[LR] >= 0) || !isfinite(h[LR]))
    return dt__error(DT_ERR_INVALID, "%s: lr %g (expected a finite number >= 0)", fn, h[LR]);
  if (!(h[BETA1] >= 0 && h[BETA1] <= 1))
    return dt__error(DT_ERR_INVALID, "%s: beta1 %g (expected in [0, 1])", fn, h[BETA1]);
  if (!(h[BETA2] >= 0 && h[BETA2] <= 1))
    return dt__error(DT_ERR_INVALID, "%s: beta2 %g (expected in [0, 1])", fn, h[BETA2]);
  if (!(h[WEIGHT_DECAY] >= 0) || !isfinite(h[WEIGHT_DECAY]))
    return dt__error(DT_ERR_INVALID, "%s: weight_decay %g (expected a finite number >= 0)", fn,
                     h[WEIGHT_DECAY]);
  return DT_OK;
}

static void lion_factors(const double *h, int64_t step, dt_optim_update *u) {
  (void)step;
  u->rule = DT_OPTIM_LION;
  u->f.lion = (dt_lion_factors){.b1 = (float)h[BETA1],
                                .w1 = (float)(1.0 - h[BETA1]),
                                .b2 = (float)h[BETA2],
                                .w2 = (float)(1.0 - h[BETA2]),
                                .scale = (float)(1.0 - h[LR] * h[WEIGHT_DECAY]),
                                .lr = (float)h[LR]};
}

/* dt__lion_element over the shard, its factors in a local nothing the loop stores aliases. */
static void lion_update(const double *h, int64_t step, float *restrict p, const float *restrict g,
                        float *const *s, int64_t count, void *cache) {
  (void)cache;
  float *restrict m = s[0];
  dt_optim_update u;
  lion_factors(h, step, &u);
  const dt_lion_factors f = u.f.lion;
  for (int64_t k = 0; k < count; k++) dt__lion_element(&f, &p[k], g[k], &m[k]);
}

const dt__optim_kind dt__optim_lion = {
    .name = "lion",
    .create_fn = "dt_optimizer_create",
    DT__OPTIM_SLOTS("exp_avg"),
    DT__OPTIM_HYPER({"lr", 1e-4}, {"beta1", 0.9}, {"beta2", 0.99}, {"weight_decay", 0}),
    .check = lion_check,
    .update = lion_update,
    .factors = lion_factors,
};
