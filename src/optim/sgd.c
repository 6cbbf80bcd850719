/*
 * SGD (torch.optim.SGD, _single_tensor_sgd), one entry of the optimizer table: one slot,
 * "momentum_buffer" (kept only with momentum), and the hyperparameters lr, momentum,
 * dampening, weight_decay and nesterov (0 or 1). The arithmetic is PyTorch's in float32.
 */
#include <math.h>

#include "optim/optim_impl.h"

enum { LR, MOMENTUM, DAMPENING, WEIGHT_DECAY, NESTEROV };

static dt_status sgd_check(const char *fn, const double *h) {
  if (!(h[LR] >= 0) || !isfinite(h[LR]))
    return dt__error(DT_ERR_INVALID, "%s: lr %g (expected a finite number >= 0)", fn, h[LR]);
  if (!(h[MOMENTUM] >= 0) || !isfinite(h[MOMENTUM]))
    return dt__error(DT_ERR_INVALID, "%s: momentum %g (expected a finite number >= 0)", fn,
                     h[MOMENTUM]);
  if (!(h[WEIGHT_DECAY] >= 0) || !isfinite(h[WEIGHT_DECAY]))
    return dt__error(DT_ERR_INVALID, "%s: weight_decay %g (expected a finite number >= 0)", fn,
                     h[WEIGHT_DECAY]);
  if (!isfinite(h[DAMPENING]))
    return dt__error(DT_ERR_INVALID, "%s: dampening %g is not finite", fn, h[DAMPENING]);
  if (h[NESTEROV] != 0 && h[NESTEROV] != 1)
    return dt__error(DT_ERR_INVALID, "%s: nesterov %g (expected 0 or 1)", fn, h[NESTEROV]);
  if (h[NESTEROV] != 0 && (h[MOMENTUM] <= 0 || h[DAMPENING] != 0)) {
    return dt__error(DT_ERR_INVALID,
                     "%s: nesterov needs momentum > 0 and dampening 0 (momentum %g, "
                     "dampening %g)",
                     fn, h[MOMENTUM], h[DAMPENING]);
  }
  return DT_OK;
}

static bool sgd_slot_used(const double *h, int k) {
  (void)k;
  return h[MOMENTUM] != 0;
}

static void sgd_factors(const double *h, int64_t step, dt_optim_update *u) {
  u->rule = DT_OPTIM_SGD;
  u->f.sgd = (dt_sgd_factors){.wd = (float)h[WEIGHT_DECAY],
                              .mom = (float)h[MOMENTUM],
                              .keep = (float)(1.0 - h[DAMPENING]),
                              .neg_lr = (float)-h[LR],
                              .decay = h[WEIGHT_DECAY] != 0,
                              .nesterov = h[NESTEROV] != 0,
                              .first = step == 1,
                              .has_buf = h[MOMENTUM] != 0};
}

/* d = g + wd p; buf = d on the first step, else momentum buf + (1 - dampening) d;
 * d = d + momentum buf (nesterov) or buf; p -= lr d (dt__sgd_element). The common cases get
 * their own branch-free loops (restrict: the compiler vectorizes them), which are that
 * function's arithmetic with its branches decided (1.0f * g is g exactly); the general loop
 * calls it. */
static void sgd_update(const double *h, int64_t step, float *restrict p, const float *restrict g,
                       float *const *s, int64_t count, void *cache) {
  (void)cache;
  float *restrict buf = s[0];
  dt_optim_update u;
  sgd_factors(h, step, &u);
  const dt_sgd_factors f = u.f.sgd;
  const float mom = f.mom, keep = f.keep, neg_lr = f.neg_lr;
  if (!buf && !f.decay) {
    for (int64_t k = 0; k < count; k++) p[k] = p[k] + neg_lr * g[k];
    return;
  }
  if (buf && !f.first && !f.decay && !f.nesterov && keep == 1.0f) {
    /* dampening 0 (the default): keep * g is g exactly, so the loop skips that multiply
     * (a quarter of this loop's vector arithmetic). */
    for (int64_t k = 0; k < count; k++) {
      float b = buf[k] * mom + g[k];
      buf[k] = b;
      p[k] = p[k] + neg_lr * b;
    }
    return;
  }
  if (buf && !f.first && !f.decay && !f.nesterov) {
    for (int64_t k = 0; k < count; k++) {
      float b = buf[k] * mom + keep * g[k];
      buf[k] = b;
      p[k] = p[k] + neg_lr * b;
    }
    return;
  }
  for (int64_t k = 0; k < count; k++) dt__sgd_element(&f, &p[k], g[k], buf ? &buf[k] : NULL);
}

const dt__optim_kind dt__optim_sgd = {
    .name = "sgd",
    .create_fn = "dt_optimizer_create_sgd",
    DT__OPTIM_SLOTS("momentum_buffer"),
    DT__OPTIM_HYPER({"lr", 1e-3}, {"momentum", 0}, {"dampening", 0}, {"weight_decay", 0},
                    {"nesterov", 0}),
    .check = sgd_check,
    .slot_used = sgd_slot_used,
    .update = sgd_update,
    .factors = sgd_factors,
};
