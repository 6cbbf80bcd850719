/*
 * Adam and AdamW (torch.optim.Adam / AdamW, _single_tensor_adam), two entries of the
 * optimizer table that share their update: slots "exp_avg" and "exp_avg_sq", hyperparameters
 * lr, beta1, beta2, eps and weight_decay (Adam adds it to the gradient, AdamW decays the
 * weight). The arithmetic is PyTorch's operation by operation in float32, the scalar factors
 * (bias corrections, step size) in double as Python computes them.
 */
#include <math.h>
#include <string.h>

#include "kernels/cpu/vmath.h"
#include "optim/optim_impl.h"

enum { LR, BETA1, BETA2, EPS, WEIGHT_DECAY };

static dt_status adam_check(const char *fn, const double *h) {
  if (!(h[LR] >= 0) || !isfinite(h[LR]))
    return dt__error(DT_ERR_INVALID, "%s: lr %g (expected a finite number >= 0)", fn, h[LR]);
  if (!(h[BETA1] >= 0 && h[BETA1] < 1))
    return dt__error(DT_ERR_INVALID, "%s: beta1 %g (expected in [0, 1))", fn, h[BETA1]);
  if (!(h[BETA2] >= 0 && h[BETA2] < 1))
    return dt__error(DT_ERR_INVALID, "%s: beta2 %g (expected in [0, 1))", fn, h[BETA2]);
  if (!(h[EPS] >= 0) || !isfinite(h[EPS]))
    return dt__error(DT_ERR_INVALID, "%s: eps %g (expected a finite number >= 0)", fn, h[EPS]);
  if (!(h[WEIGHT_DECAY] >= 0) || !isfinite(h[WEIGHT_DECAY]))
    return dt__error(DT_ERR_INVALID, "%s: weight_decay %g (expected a finite number >= 0)", fn,
                     h[WEIGHT_DECAY]);
  return DT_OK;
}

/* The scalar factors of one step (kernels/math/optim.h), in double and rounded to float32
 * once: parameters usually share their step count, so a step computes them once (two pow
 * calls per parameter were a fifth of the per-parameter cost); they live in the step's
 * cache. */
_Static_assert(sizeof(dt_adam_factors) <= DT__OPTIM_CACHE_BYTES, "dt_adam_factors fits the cache");

static void factors_for(const double *h, bool decoupled, int64_t step, dt_adam_factors *f) {
  if (f->step == step) return;
  f->step = step;
  const float wd = (float)h[WEIGHT_DECAY], decay = (float)(1.0 - h[LR] * h[WEIGHT_DECAY]);
  f->w1 = (float)(1.0 - h[BETA1]);
  f->b2 = (float)h[BETA2];
  f->w2 = (float)(1.0 - h[BETA2]);
  double bc1 = 1.0 - pow(h[BETA1], (double)step), bc2 = 1.0 - pow(h[BETA2], (double)step);
  f->neg_step_size = (float)(-(h[LR] / bc1));
  f->bc2_sqrt = (float)sqrt(bc2);
  f->eps = (float)h[EPS];
  /* Which weight decay, decided once: 1.0f and 0.0f leave p and g unchanged exactly. */
  f->p_scale = h[WEIGHT_DECAY] != 0 && decoupled ? decay : 1.0f;
  f->g_decay = h[WEIGHT_DECAY] != 0 && !decoupled ? wd : 0.0f;
}

/* m = lerp(m, g, 1 - beta1); v = beta2 v + (1 - beta2) g^2;
 * p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps), AdamW decaying p by (1 - lr wd) first
 * (dt__adam_element; the factors copied to a local, which nothing the loop stores aliases).
 * Compiled per vector width (DT_VECTOR_CLONES): each element's arithmetic is the same, so
 * every width gives the same bits. */
DT_VECTOR_CLONES
static void update_range(const dt_adam_factors *f, float *restrict p, const float *restrict g,
                         float *restrict m, float *restrict v, int64_t count) {
  const dt_adam_factors local = *f;
  for (int64_t k = 0; k < count; k++) {
    float pk = p[k], mk = m[k], vk = v[k];
    dt__adam_element(&local, &pk, g[k], &mk, &vk);
    p[k] = pk;
    m[k] = mk;
    v[k] = vk;
  }
}

typedef struct adam_job {
  const dt_adam_factors *f;
  float *p, *m, *v;
  const float *g;
} adam_job;

static void adam_chunk(void *ctx, int64_t begin, int64_t end) {
  const adam_job *j = ctx;
  update_range(j->f, j->p + begin, j->g + begin, j->m + begin, j->v + begin, end - begin);
}

/* A parameter's elements split over the intra-op pool (dt__parallel_for): each element is
 * updated by one thread with the same code, so 1 and N threads give the same bits. */
static void update(const dt_adam_factors *f, float *p, const float *g, float *m, float *v,
                   int64_t count) {
  adam_job j = {.f = f, .p = p, .m = m, .v = v, .g = g};
  dt__parallel_for(count, DT_PARALLEL_GRAIN, adam_chunk, &j);
}

static void adam_update(const double *h, int64_t step, float *p, const float *g, float *const *s,
                        int64_t count, void *cache) {
  factors_for(h, false, step, cache);
  update(cache, p, g, s[0], s[1], count);
}

static void adamw_update(const double *h, int64_t step, float *p, const float *g, float *const *s,
                         int64_t count, void *cache) {
  factors_for(h, true, step, cache);
  update(cache, p, g, s[0], s[1], count);
}

static void adam_factors(const double *h, int64_t step, dt_optim_update *u) {
  u->rule = DT_OPTIM_ADAM;
  u->f.adam.step = 0;
  factors_for(h, false, step, &u->f.adam);
}

static void adamw_factors(const double *h, int64_t step, dt_optim_update *u) {
  u->rule = DT_OPTIM_ADAM;
  u->f.adam.step = 0;
  factors_for(h, true, step, &u->f.adam);
}

#define ADAM_HYPER(weight_decay)                                                                   \
  DT__OPTIM_SLOTS("exp_avg", "exp_avg_sq"),                                                        \
      DT__OPTIM_HYPER({"lr", 1e-3}, {"beta1", 0.9}, {"beta2", 0.999}, {"eps", 1e-8},               \
                      {"weight_decay", weight_decay}),                                             \
      .check = adam_check

const dt__optim_kind dt__optim_adam = {.name = "adam",
                                       .create_fn = "dt_optimizer_create_adam",
                                       ADAM_HYPER(0.0),
                                       .update = adam_update,
                                       .factors = adam_factors};

const dt__optim_kind dt__optim_adamw = {.name = "adamw",
                                        .create_fn = "dt_optimizer_create_adamw",
                                        ADAM_HYPER(0.01),
                                        .update = adamw_update,
                                        .factors = adamw_factors};
