/* What the optimizers and clip_grad_norm share: parameter checks, gradient resolution (a
 * Partial gradient reduced to its parameter's placements), access to local shards, and the
 * table entry each optimizer file fills (dt__optim_kind). */
#ifndef DT_OPTIM_IMPL_H
#define DT_OPTIM_IMPL_H

#include <string.h>

#include "core/core_impl.h"
#include "dtensor/autograd.h"
#include "dtensor/comm.h"
#include "dtensor/dist.h"
#include "dtensor/mesh.h"
#include "dtensor/optim.h"
#include "dtensor/ops.h"
#include "kernels/device_routines.h"
#include "kernels/math/optim.h"

/* Checks the parameter list (see dt_optimizer_create_*): *mesh is the distributed
 * parameters' one mesh, NULL when every parameter is local (local ones may mix with them).
 * check_repeats looks for a parameter listed twice (quadratic in n: done when the list is made, not
 * at every step). Not collective. */
dt_status dt__optim_check_params(const char *fn, int n, dt_tensor *const *params,
                                 bool check_repeats, dt_mesh **mesh);

/* A value of the resolved gradients that sums over the ranks (clip_grad_norm's squares, the
 * step's count of non-finite gradients); mesh: the parameters' (NULL when all are local). */
typedef dt_status (*dt__optim_measure)(int n, dt_tensor **grads, dt_mesh *mesh, double *value);

/* Checks the parameters (dt__optim_check_params) and their gradients and makes grads[i]
 * params[i]'s gradient ready for a fused loop (a new reference, NULL when it has none):
 * float32, placed like its parameter (Partial gradients reduced, stored back as .grad), with a
 * contiguous local shard. With distributed parameters, when the call communicates at all
 * (always_agree, or a gradient to redistribute), the verdict is collective: one all_reduce
 * over the mesh's world, before any other collective, tells every rank whether one refused
 * (mine, the caller's own refusal of an argument, counts as one), so that a refusal on one
 * rank fails every rank at once instead of leaving the others waiting in the next collective
 * (the refusing rank keeps its message, the others name it). A call that does not communicate
 * checks locally. measure (may be NULL; only with always_agree when distributed) rides on that
 * all_reduce when no gradient needs a reduction, else takes one more after the reductions;
 * *value receives its sum over the ranks. On error every grads[i] is NULL. */
dt_status dt__optim_prepare(const char *fn, dt_status mine, int n, dt_tensor *const *params,
                            bool check_repeats, bool always_agree, dt_tensor **grads,
                            dt_mesh **mesh, dt__optim_measure measure, double *value);

/* measure: 1 when any of this rank's gradients holds NaN or Inf, else 0. */
dt_status dt__optim_count_nonfinite(int n, dt_tensor **grads, dt_mesh *mesh, double *count);

/* This rank's elements of t: local or the local shard; contiguous float32 (checked before).
 * Host memory, or the device's memory for a tensor on another device (then only that device's
 * routines may touch it: dt__optim_routines). */
float *dt__optim_floats(dt_tensor *t, int64_t *count);

/* The fused routines of t's device (kernels/device_routines.h), NULL for host memory (the
 * optimizers' own loops); *index the device's index. */
static inline const dt_device_routines *dt__optim_routines(const dt_tensor *t, int *index) {
  dt_device d = dt_tensor_device(t);
  *index = d.index;
  return d.kind == DT_DEVICE_CPU ? NULL : dt__device_routines(d.kind);
}

void dt__optim_release_all(int n, dt_tensor **tensors);

/* ---- The optimizer table ------------------------------------------------------------------
 * An optimizer is one file (sgd.c, adam.c, lion.c) defining one dt__optim_kind: its named
 * state slots (tensors placed like the parameter, zero at creation), its hyperparameters
 * (doubles in the order of `hyper`, each with its default), their check, and its fused update
 * of one parameter's local float32 shard. optimizer.c lists the kinds in its registry and does
 * everything else (parameters, gradients, steps, state dicts) the same way for all. */
#define DT__OPTIM_MAX_SLOTS 2
#define DT__OPTIM_MAX_HYPER 8
/* Scratch shared by the parameters of one optimizer step (zeroed at its start): an update
 * keeps there what depends only on the step count (Adam's bias corrections). */
#define DT__OPTIM_CACHE_BYTES 64

typedef struct dt__optim_hyper {
  const char *name;
  double default_value;
} dt__optim_hyper;

/* A kind's slot names and hyperparameters with their counts, which the lists give: in a
 * dt__optim_kind initializer, DT__OPTIM_SLOTS("exp_avg") and
 * DT__OPTIM_HYPER({"lr", 1e-4}, {"beta1", 0.9}). */
#define DT__OPTIM_SLOTS(...)                                                                       \
  .n_slots = (int)(sizeof((const char *[]){__VA_ARGS__}) / sizeof(const char *)),                  \
  .slots = {__VA_ARGS__}
#define DT__OPTIM_HYPER(...)                                                                       \
  .n_hyper = (int)(sizeof((dt__optim_hyper[]){__VA_ARGS__}) / sizeof(dt__optim_hyper)),            \
  .hyper = {__VA_ARGS__}

typedef struct dt__optim_kind {
  const char *name;      /* "sgd": dt_optimizer_create's name */
  const char *create_fn; /* the public function messages name */
  int n_slots;
  const char *slots[DT__OPTIM_MAX_SLOTS]; /* "momentum_buffer", "exp_avg", ... */
  int n_hyper;
  dt__optim_hyper hyper[DT__OPTIM_MAX_HYPER];
  /* Checks h (n_hyper values); the message names fn, the hyperparameter and its value. */
  dt_status (*check)(const char *fn, const double *h);
  /* Whether slot k is kept with these hyperparameters (SGD without momentum keeps no
   * buffer); NULL: every slot. An unused slot's pointer is NULL in update. */
  bool (*slot_used)(const double *h, int k);
  /* One update of count elements: p the parameter, g its gradient, s[k] slot k's state;
   * step is the parameter's step count including this one (1 on its first update). */
  void (*update)(const double *h, int64_t step, float *p, const float *g, float *const *s,
                 int64_t count, void *cache);
  /* The same update described for a device's kernel (kernels/math/optim.h: the element
   * functions update uses): its scalar factors for step. */
  void (*factors)(const double *h, int64_t step, dt_optim_update *u);
} dt__optim_kind;

extern const dt__optim_kind dt__optim_sgd, dt__optim_adam, dt__optim_adamw, dt__optim_lion;

/* An optimizer: its kind, hyperparameters and, per parameter, the parameter, its slots'
 * state (DT__OPTIM_MAX_SLOTS per parameter, NULL when unused) and its step count. */
struct dt_optimizer {
  const dt__optim_kind *kind;
  double hyper[DT__OPTIM_MAX_HYPER];
  int n;
  dt_tensor **params;
  dt_tensor **state;
  int64_t *steps;    /* per parameter, as PyTorch's state["step"] */
  dt_tensor **grads; /* scratch for a step */
  /* Scratch for a step: the float32 data of each parameter, gradient and slot (2 +
   * DT__OPTIM_MAX_SLOTS per parameter) and its element count, gathered in one pass before the
   * updates. */
  float **data;
  int64_t *counts;
  /* params, state, grads, data, steps and counts share one allocation (see create). */
  int64_t steps_taken;     /* steps that updated (dt_optimizer_steps_taken) */
  bool has_schedule;       /* a learning-rate schedule sets lr before each step */
  dt_lr_schedule schedule; /* checked when attached */
};

/* The most steps a step count holds (per parameter and the optimizer's steps taken): 2^53,
 * the last count a double (the bias corrections' pow, the schedule's fractions) holds exactly
 * and far from int64's overflow. A loaded state dict is checked against it and a step that
 * would pass it is refused (dt_optimizer_step). */
#define DT__OPTIM_MAX_STEPS ((int64_t)1 << 53)

/* Checks a schedule's settings (the message names fn, the setting and its value). */
dt_status dt__optim_check_schedule(const char *fn, const dt_lr_schedule *s);

/* Sets opt's lr from its schedule for the step about to run (nothing without one). */
void dt__optim_apply_schedule(dt_optimizer *opt);

/* Whether opt keeps slot k (its kind's slot_used). */
static inline bool dt__optim_slot_used(const dt_optimizer *opt, int k) {
  return k < opt->kind->n_slots && (!opt->kind->slot_used || opt->kind->slot_used(opt->hyper, k));
}

/* The index of hyperparameter `name` in kind, or -1. */
static inline int dt__optim_hyper_index(const dt__optim_kind *kind, const char *name) {
  for (int j = 0; j < kind->n_hyper; j++)
    if (strcmp(kind->hyper[j].name, name) == 0) return j;
  return -1;
}

#endif /* DT_OPTIM_IMPL_H */
