/*
 * The optimizers, one table: each optimizer is a dt__optim_kind in a file of its own
 * (sgd.c, adam.c, lion.c) with its slots, hyperparameters and fused update; this file keeps
 * the registry and does the rest the same way for all of them. The state lives beside each
 * parameter with its placements; a step checks and reduces every gradient first
 * (src/optim/params.c), then runs the kind's update per parameter over this rank's float32
 * shard.
 */
#include <stdio.h>
#include <string.h>

#include "optim/optim_impl.h"
#include "tensor/tensor_impl.h"

/* The registry: dt_optimizer_create looks names up here. */
static const dt__optim_kind *const kinds[] = {&dt__optim_sgd, &dt__optim_adam, &dt__optim_adamw,
                                              &dt__optim_lion};
#define N_KINDS ((int)(sizeof kinds / sizeof kinds[0]))

/* Zeros with p's layout: local, or a distributed tensor with p's mesh, placements and global
 * shape whose shard has the shape of p's shard. */
static dt_status zeros_like_param(dt_tensor *p, dt_tensor **out) {
  dt_tensor_options on = {.device = dt_tensor_device(p)}; /* the state lives with p */
  if (!dt_tensor_is_distributed(p)) {
    return dt_full_ex(dt_tensor_ndim(p), dt_tensor_shape(p), 0.0, DT_F32, &on, out);
  }
  dt_tensor *local = NULL, *zeros = NULL;
  dt_status st = dt_dist_to_local(p, &local);
  if (!st) st = dt_full_ex(dt_tensor_ndim(local), dt_tensor_shape(local), 0.0, DT_F32, &on, &zeros);
  if (!st) {
    dt_mesh *mesh = dt_dist_mesh(p);
    dt_dist_from_local_options o = {.global_shape = dt_dist_global_shape(p),
                                    .global_ndim = dt_dist_ndim(p)};
    st = dt_dist_from_local(mesh, zeros, dt_mesh_ndim(mesh), dt_dist_placements(p), &o, out);
  }
  dt_tensor_release(local);
  dt_tensor_release(zeros);
  return st;
}

/* Makes the optimizer of kind over params with hyperparameters h (checked by the caller). */
static dt_status create(const dt__optim_kind *kind, const char *fn, int n, dt_tensor *const *params,
                        const double *h, dt_optimizer **out) {
  dt_mesh *mesh = NULL;
  dt_status st = dt__optim_check_params(fn, n, params, true, &mesh);
  if (!st) st = kind->check(fn, h);
  if (st) return st;
  dt_optimizer *opt = dt__calloc(sizeof *opt);
  if (!opt) return dt__error(DT_ERR_NOMEM, "%s: out of memory", fn);
  opt->kind = kind;
  memcpy(opt->hyper, h, sizeof(double) * (size_t)kind->n_hyper);
  opt->n = n;
  /* The per-parameter arrays share one zeroed block that starts with params: tensor pointers
   * (params, the slots, grads), float pointers (data), then 2 int64 (steps, counts) per
   * parameter; the pointers take a multiple of 8 bytes, so the int64 stay aligned. */
  size_t np = (size_t)n, slots = DT__OPTIM_MAX_SLOTS, per_data = 2 + DT__OPTIM_MAX_SLOTS;
  opt->params = dt__calloc(
      np * ((2 + slots) * sizeof(dt_tensor *) + per_data * sizeof(float *) + 2 * sizeof(int64_t)));
  if (!opt->params) {
    dt_optimizer_destroy(opt);
    return dt__error(DT_ERR_NOMEM, "%s: out of memory for %d parameters", fn, n);
  }
  opt->state = opt->params + np;
  opt->grads = opt->state + slots * np;
  opt->data = (float **)(void *)(opt->grads + np);
  opt->steps = (int64_t *)(void *)(opt->data + per_data * np);
  opt->counts = opt->steps + np;
  for (int i = 0; i < n && !st; i++) {
    opt->params[i] = dt_tensor_retain(params[i]);
    for (int k = 0; k < kind->n_slots && !st; k++) {
      if (dt__optim_slot_used(opt, k)) st = zeros_like_param(params[i], &opt->state[slots * i + k]);
    }
  }
  if (st) {
    dt_optimizer_destroy(opt);
    return st;
  }
  *out = opt;
  return DT_OK;
}

/* The refusal of a hyperparameter name the optimizer does not take: the message lists the names
 * it does take, so a caller who wrote "learning_rate" or "weight-decay" sees the spelling. */
static dt_status unknown_hyper(const char *fn, const dt__optim_kind *kind, const char *name,
                               int entry) {
  char known[256] = "";
  size_t len = 0;
  for (int j = 0; j < kind->n_hyper && len < sizeof known; j++) {
    int w = snprintf(known + len, sizeof known - len, "%s%s", j ? ", " : "", kind->hyper[j].name);
    if (w < 0) break;
    len += (size_t)w;
  }
  char where[32] = "";
  if (entry >= 0) snprintf(where, sizeof where, " (entry %d)", entry);
  return dt__error(DT_ERR_INVALID, "%s: %s has no hyperparameter \"%s\"%s; it takes: %s", fn,
                   kind->name, name ? name : "(NULL)", where, known);
}

dt_status dt_optimizer_create(const char *name, int n, dt_tensor *const *params, int n_hyper,
                              const dt_optimizer_hyperparameter *hyper, dt_optimizer **out) {
  static const char fn[] = "dt_optimizer_create";
  if (!out) return dt__error(DT_ERR_INVALID, "%s: NULL out", fn);
  *out = NULL;
  if (!name) return dt__error(DT_ERR_INVALID, "%s: NULL name", fn);
  if (n_hyper < 0 || (n_hyper > 0 && !hyper)) {
    return dt__error(DT_ERR_INVALID, "%s: %d hyperparameters at %p", fn, n_hyper,
                     (const void *)hyper);
  }
  const dt__optim_kind *kind = NULL;
  for (int i = 0; i < N_KINDS && !kind; i++)
    if (strcmp(kinds[i]->name, name) == 0) kind = kinds[i];
  if (!kind) {
    return dt__error(DT_ERR_INVALID, "%s: no optimizer \"%s\" (known: sgd, adam, adamw, lion)", fn,
                     name);
  }
  double h[DT__OPTIM_MAX_HYPER];
  int given[DT__OPTIM_MAX_HYPER];
  for (int j = 0; j < kind->n_hyper; j++) h[j] = kind->hyper[j].default_value, given[j] = -1;
  for (int i = 0; i < n_hyper; i++) {
    int j = hyper[i].name ? dt__optim_hyper_index(kind, hyper[i].name) : -1;
    if (j < 0) return unknown_hyper(fn, kind, hyper[i].name, i);
    /* Two values for one name: which one the caller meant is unknown. */
    if (given[j] >= 0) {
      return dt__error(DT_ERR_INVALID, "%s: hyperparameter \"%s\" given twice (entries %d and %d)",
                       fn, hyper[i].name, given[j], i);
    }
    given[j] = i;
    h[j] = hyper[i].value; /* exactly as given, zero included */
  }
  return create(kind, fn, n, params, h, out);
}

/* The options convention of the legacy option structs (optim.h): 0 is the field's PyTorch
 * default, DT_OPTIM_ZERO an exact zero; any other value, valid or not, is kept for the kind's
 * check to judge. */
static double resolve(double given, double pytorch_default) {
  if (given == 0) return pytorch_default;
  if (given == DT_OPTIM_ZERO) return 0;
  return given;
}

dt_status dt_optimizer_create_sgd(int n, dt_tensor *const *params, const dt_sgd_options *options,
                                  dt_optimizer **out) {
  if (!out) return dt__error(DT_ERR_INVALID, "dt_optimizer_create_sgd: NULL out");
  *out = NULL;
  dt_sgd_options o = options ? *options : (dt_sgd_options){0};
  /* An exact 0 is no rate: no DT_OPTIM_ZERO for lr. */
  double h[] = {o.lr == 0 ? 1e-3 : o.lr, o.momentum, o.dampening, o.weight_decay,
                o.nesterov ? 1.0 : 0.0};
  return create(&dt__optim_sgd, dt__optim_sgd.create_fn, n, params, h, out);
}

static dt_status create_adam(const dt__optim_kind *kind, int n, dt_tensor *const *params,
                             const dt_adam_options *options, dt_optimizer **out) {
  if (!out) return dt__error(DT_ERR_INVALID, "%s: NULL out", kind->create_fn);
  *out = NULL;
  dt_adam_options o = options ? *options : (dt_adam_options){0};
  double h[] = {o.lr == 0 ? 1e-3 : o.lr, resolve(o.beta1, 0.9), resolve(o.beta2, 0.999),
                resolve(o.eps, 1e-8), resolve(o.weight_decay, kind->hyper[4].default_value)};
  return create(kind, kind->create_fn, n, params, h, out);
}

dt_status dt_optimizer_create_adam(int n, dt_tensor *const *params, const dt_adam_options *options,
                                   dt_optimizer **out) {
  return create_adam(&dt__optim_adam, n, params, options, out);
}

dt_status dt_optimizer_create_adamw(int n, dt_tensor *const *params, const dt_adam_options *options,
                                    dt_optimizer **out) {
  return create_adam(&dt__optim_adamw, n, params, options, out);
}

void dt_optimizer_destroy(dt_optimizer *opt) {
  if (!opt) return;
  if (opt->params) {
    dt__optim_release_all(opt->n, opt->params);
    dt__optim_release_all(DT__OPTIM_MAX_SLOTS * opt->n, opt->state);
    dt__optim_release_all(opt->n, opt->grads);
  }
  dt__free(opt->params); /* the block of every per-parameter array */
  dt__free(opt);
}

/* dt__optim_floats with the local case inline: the step reads several tensors per parameter. */
static inline float *floats_of(dt_tensor *t, int64_t *count) {
  if (!t->spec) {
    *count = dt__tensor_numel(t);
    return (float *)dt__tensor_base(t);
  }
  return dt__optim_floats(t, count);
}

dt_status dt_optimizer_step(dt_optimizer *opt) { return dt_optimizer_step_ex(opt, NULL, NULL); }

dt_status dt_optimizer_step_ex(dt_optimizer *opt, const dt_optimizer_step_options *options,
                               bool *skipped) {
  static const char fn[] = "dt_optimizer_step";
  if (skipped) *skipped = false;
  if (!opt) return dt__error(DT_ERR_INVALID, "%s: opt is NULL", fn);
  dt_optimizer_step_options o = options ? *options : (dt_optimizer_step_options){0};
  /* Parameters may have been turned into non-leaves or moved since creation: check again, on
   * every rank together (the count of ranks with non-finite gradients rides along). */
  dt_mesh *mesh = NULL;
  double nonfinite = 0.0;
  /* The counts a step increments never pass DT__OPTIM_MAX_STEPS (a loaded state dict is held
   * to it too), so ++ below cannot overflow. Refused through the agreement, so every rank
   * stops together. */
  dt_status mine = DT_OK;
  if (opt->steps_taken >= DT__OPTIM_MAX_STEPS)
    mine = dt__error(DT_ERR_INVALID, "%s: steps_taken is %lld, the most an optimizer counts (2^53)",
                     fn, (long long)opt->steps_taken);
  for (int i = 0; i < opt->n && !mine; i++)
    if (opt->steps[i] >= DT__OPTIM_MAX_STEPS)
      mine = dt__error(DT_ERR_INVALID,
                       "%s: parameter %d's step count is %lld, the most an optimizer counts (2^53)",
                       fn, i, (long long)opt->steps[i]);
  dt_status st =
      dt__optim_prepare(fn, mine, opt->n, opt->params, false, o.skip_if_nonfinite, opt->grads,
                        &mesh, o.skip_if_nonfinite ? dt__optim_count_nonfinite : NULL, &nonfinite);
  bool skip = !st && nonfinite != 0.0;
  if (st || skip) {
    dt__optim_release_all(opt->n, opt->grads);
    if (skipped) *skipped = skip;
    return st;
  }
  /* Every check passed: from here nothing fails, so every parameter is updated. First the
   * data of every tensor in one pass over the handles, whose cache misses overlap one
   * another; then the updates stream through the data without touching a handle (reading
   * them between the loops made each miss wait for the previous loop). */
  enum { PER = 2 + DT__OPTIM_MAX_SLOTS };
  float **data = opt->data;
  for (int i = 0; i < opt->n; i++) {
    if (!opt->grads[i]) continue;
    int64_t gcount, unused;
    data[PER * i] = floats_of(opt->params[i], &opt->counts[i]);
    data[PER * i + 1] = floats_of(opt->grads[i], &gcount);
    for (int k = 0; k < DT__OPTIM_MAX_SLOTS; k++) {
      dt_tensor *s = opt->state[DT__OPTIM_MAX_SLOTS * i + k];
      data[PER * i + 2 + k] = s ? floats_of(s, &unused) : NULL;
    }
    DT_ASSERT(opt->counts[i] == gcount);
  }
  dt__optim_apply_schedule(opt);
  _Alignas(16) unsigned char cache[DT__OPTIM_CACHE_BYTES] = {0};
  const dt__optim_kind *kind = opt->kind;
  for (int i = 0; i < opt->n; i++) {
    if (!opt->grads[i]) continue;
    float **d = data + PER * i;
    int index;
    const dt_device_routines *r = dt__optim_routines(opt->params[i], &index);
    if (r) { /* device memory: the kind's update as the device's kernel */
      dt_optim_update u;
      kind->factors(opt->hyper, ++opt->steps[i], &u);
      st = r->optim_update(index, &u, d[0], d[1], d[2], d[3], opt->counts[i]);
      if (st) break; /* a launch failure: the device is unusable, the step incomplete */
      continue;
    }
    kind->update(opt->hyper, ++opt->steps[i], d[0], d[1], d + 2, opt->counts[i], cache);
  }
  dt__optim_release_all(opt->n, opt->grads);
  if (st) return st;
  opt->steps_taken++;
  dt__optim_apply_schedule(opt); /* the next step's rate, readable now (PyTorch's scheduler) */
  return DT_OK;
}

dt_status dt_optimizer_zero_grad(dt_optimizer *opt, bool set_to_none) {
  if (!opt) return dt__error(DT_ERR_INVALID, "dt_optimizer_zero_grad: opt is NULL");
  for (int i = 0; i < opt->n; i++) {
    dt_status st = dt_tensor_zero_grad(opt->params[i], set_to_none);
    if (st) return st;
  }
  return DT_OK;
}

dt_status dt_optimizer_state(const dt_optimizer *opt, int index, const char *name, dt_tensor **out,
                             int64_t *steps) {
  static const char fn[] = "dt_optimizer_state";
  if (!opt || !name || !out) {
    return dt__error(DT_ERR_INVALID, "%s: NULL argument (opt %p, name %p, out %p)", fn,
                     (const void *)opt, (const void *)name, (void *)out);
  }
  *out = NULL;
  if (index < 0 || index >= opt->n) {
    return dt__error(DT_ERR_INVALID, "%s: index %d out of range for %d parameters", fn, index,
                     opt->n);
  }
  int k = -1;
  for (int j = 0; j < opt->kind->n_slots && k < 0; j++)
    if (strcmp(opt->kind->slots[j], name) == 0) k = j;
  dt_tensor *s = k >= 0 ? opt->state[DT__OPTIM_MAX_SLOTS * index + k] : NULL;
  if (!s)
    return dt__error(DT_ERR_INVALID, "%s: this %s has no state \"%s\"", fn, opt->kind->name, name);
  *out = dt_tensor_retain(s);
  if (steps) *steps = opt->steps[index];
  return DT_OK;
}

const char *dt_optimizer_name(const dt_optimizer *opt) { return opt ? opt->kind->name : NULL; }

dt_status dt_optimizer_get_hyperparameter(const dt_optimizer *opt, const char *name,
                                          double *value) {
  static const char fn[] = "dt_optimizer_get_hyperparameter";
  if (!opt || !name || !value) {
    return dt__error(DT_ERR_INVALID, "%s: NULL argument (opt %p, name %p, value %p)", fn,
                     (const void *)opt, (const void *)name, (void *)value);
  }
  int j = dt__optim_hyper_index(opt->kind, name);
  if (j < 0) return unknown_hyper(fn, opt->kind, name, -1);
  *value = opt->hyper[j];
  return DT_OK;
}

dt_status dt_optimizer_set_hyperparameter(dt_optimizer *opt, const char *name, double value) {
  static const char fn[] = "dt_optimizer_set_hyperparameter";
  if (!opt || !name) {
    return dt__error(DT_ERR_INVALID, "%s: NULL argument (opt %p, name %p)", fn, (void *)opt,
                     (const void *)name);
  }
  int j = dt__optim_hyper_index(opt->kind, name);
  if (j < 0) return unknown_hyper(fn, opt->kind, name, -1);
  double h[DT__OPTIM_MAX_HYPER];
  memcpy(h, opt->hyper, sizeof h);
  h[j] = value;
  dt_status st = opt->kind->check(fn, h);
  if (st) return st;
  /* A change that adds or drops a slot (SGD's momentum from or to 0) would leave state that
   * does not match: refused. */
  for (int k = 0; k < opt->kind->n_slots; k++) {
    bool now = dt__optim_slot_used(opt, k);
    bool then = !opt->kind->slot_used || opt->kind->slot_used(h, k);
    if (now != then) {
      return dt__error(DT_ERR_INVALID, "%s: %s = %g would %s the state \"%s\"", fn, name, value,
                       now ? "drop" : "need", opt->kind->slots[k]);
    }
  }
  opt->hyper[j] = value;
  return DT_OK;
}
