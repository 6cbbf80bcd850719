/*
 * The element updates of the optimizers (SGD, Adam/AdamW, Lion), written once for the CPU and
 * CUDA (core/host_device.h). An optimizer computes its step's scalar factors on the host
 * (src/optim/: in double as PyTorch's Python does, rounded to float32 once) into a
 * dt_optim_update; every element is then updated in float32, operation by operation as
 * PyTorch's _single_tensor_* loops, by these functions: the CPU's loops (src/optim/) and the
 * CUDA kernel (kernels/cuda/optim.cu) alike, so both give the same bits.
 */
#ifndef DT_KERNELS_MATH_OPTIM_H
#define DT_KERNELS_MATH_OPTIM_H

#include <stdbool.h>

#include "core/host_device.h"

typedef enum dt_optim_rule { DT_OPTIM_SGD, DT_OPTIM_ADAM, DT_OPTIM_LION } dt_optim_rule;

/* SGD: d = g + wd p (decay); buf = d on the first step, else mom buf + keep d;
 * d = d + mom buf (nesterov) or buf; p += neg_lr d. has_buf: momentum is kept. */
typedef struct dt_sgd_factors {
  float wd, mom, keep, neg_lr;
  bool decay, nesterov, first, has_buf;
} dt_sgd_factors;

/* Adam/AdamW: p *= p_scale (AdamW's decay, else 1); g += g_decay p (Adam's, else 0);
 * m = m + w1 (g - m); v = b2 v + w2 g^2; p += neg_step_size m / (sqrt(v) / bc2_sqrt + eps). */
typedef struct dt_adam_factors {
  int64_t step; /* the step they were computed for (0: none yet) */
  float p_scale, g_decay, w1, b2, w2, neg_step_size, bc2_sqrt, eps;
} dt_adam_factors;

/* Lion: c = b1 m + w1 g; p = p scale - lr sign(c); m = b2 m + w2 g. */
typedef struct dt_lion_factors {
  float b1, w1, b2, w2, scale, lr;
} dt_lion_factors;

/* One step's update of one parameter, as a device's kernel takes it. */
typedef struct dt_optim_update {
  dt_optim_rule rule;
  union {
    dt_sgd_factors sgd;
    dt_adam_factors adam;
    dt_lion_factors lion;
  } f;
} dt_optim_update;

/* p and buf (NULL without momentum) updated with gradient g. */
static inline DT_HOST_DEVICE void dt__sgd_element(const dt_sgd_factors *f, float *p, float g,
                                                  float *buf) {
  float d = g;
  if (f->decay) d = d + f->wd * *p;
  if (f->has_buf) {
    float b = f->first ? d : *buf * f->mom + f->keep * d;
    *buf = b;
    d = f->nesterov ? d + f->mom * b : b;
  }
  *p = *p + f->neg_lr * d;
}

static inline DT_HOST_DEVICE void dt__adam_element(const dt_adam_factors *f, float *p, float g,
                                                   float *m, float *v) {
  float pk = *p * f->p_scale;
  float gk = g + f->g_decay * pk;
  float mk = *m + f->w1 * (gk - *m);
  float vk = *v * f->b2 + f->w2 * gk * gk;
  *m = mk;
  *v = vk;
  *p = pk + f->neg_step_size * (mk / (sqrtf(vk) / f->bc2_sqrt + f->eps));
}

/* sign(0) is 0. */
static inline DT_HOST_DEVICE void dt__lion_element(const dt_lion_factors *f, float *p, float g,
                                                   float *m) {
  float c = *m * f->b1 + f->w1 * g;
  float sign = (float)(c > 0.0f) - (float)(c < 0.0f);
  *p = *p * f->scale - f->lr * sign;
  *m = *m * f->b2 + f->w2 * g;
}

/* Element k of an update: s0, s1 the slots (NULL when unused). */
static inline DT_HOST_DEVICE void dt__optim_element(const dt_optim_update *u, float *p, float g,
                                                    float *s0, float *s1) {
  switch (u->rule) {
  case DT_OPTIM_SGD: dt__sgd_element(&u->f.sgd, p, g, s0); break;
  case DT_OPTIM_ADAM: dt__adam_element(&u->f.adam, p, g, s0, s1); break;
  case DT_OPTIM_LION: dt__lion_element(&u->f.lion, p, g, s0); break;
  }
}

#endif /* DT_KERNELS_MATH_OPTIM_H */
