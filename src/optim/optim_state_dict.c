/*
 * The optimizer's state dict: its slots' state tensors, step counts and hyperparameters as
 * named tensors for a distributed checkpoint, and their values set back after a load.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "autograd/autograd_impl.h"
#include "optim/optim_impl.h"
#include "tensor/tensor_impl.h"

/* roles[e] >= 0: parameter roles[e] / ROLE_STRIDE, slot roles[e] % ROLE_STRIDE (ROLE_STEP: its
 * step count); < 0: hyperparameter -1 - roles[e]. */
#define ROLE_STRIDE (DT__OPTIM_MAX_SLOTS + 1)
#define ROLE_STEP DT__OPTIM_MAX_SLOTS
/* Below the hyperparameters' roles (-1 - j, j < DT__OPTIM_MAX_HYPER): the optimizer's step
 * count, and the schedule's field f at ROLE_SCHEDULE - f. */
#define ROLE_STEPS_TAKEN (-50)
#define ROLE_SCHEDULE (-100)

/* The schedule's fields, as doubles, in the order of their roles. */
static const char *const schedule_fields[] = {"decay",        "peak_lr",     "min_lr",
                                              "warmup_steps", "total_steps", "decay_steps"};
enum { N_SCHEDULE_FIELDS = 6 };

static double schedule_get(const dt_lr_schedule *s, int f) {
  switch (f) {
  case 0: return (double)s->decay;
  case 1: return s->peak_lr;
  case 2: return s->min_lr;
  case 3: return (double)s->warmup_steps;
  case 4: return (double)s->total_steps;
  default: return (double)s->decay_steps;
  }
}

/* Sets field f from v, checked as a double before any cast (a cast of NaN or of a value
 * outside the target's range is undefined): false when v is not finite, or not an integer in
 * [-DT__OPTIM_MAX_STEPS, DT__OPTIM_MAX_STEPS] where one is needed, or not a known decay.
 * The schedule's own ranges (peak_lr > 0, warmup < total, ...) are checked after. */
static bool schedule_set(dt_lr_schedule *s, int f, double v) {
  if (!isfinite(v)) return false;
  bool integral = v == floor(v) && fabs(v) <= (double)DT__OPTIM_MAX_STEPS;
  switch (f) {
  case 0:
    if (!integral || v < DT_LR_DECAY_COSINE || v > DT_LR_DECAY_WSD) return false;
    s->decay = (dt_lr_decay)(int)v;
    return true;
  case 1: s->peak_lr = v; return true;
  case 2: s->min_lr = v; return true;
  case 3: s->warmup_steps = integral ? (int64_t)v : 0; return integral;
  case 4: s->total_steps = integral ? (int64_t)v : 0; return integral;
  default: s->decay_steps = integral ? (int64_t)v : 0; return integral;
  }
}

/* What schedule_set expects of field f, for its message. */
static const char *schedule_expected(int f) {
  switch (f) {
  case 0: return "0 (COSINE), 1 (LINEAR) or 2 (WSD)";
  case 1:
  case 2: return "a finite number";
  default: return "an integer of magnitude at most 2^53";
  }
}

void dt_optimizer_state_dict_clear(dt_optimizer_state_dict *sd) {
  if (!sd) return;
  dt__free_strings(sd->names, sd->count);
  dt__tensors_free(sd->tensors, sd->count);
  dt__free(sd->roles);
  memset(sd, 0, sizeof *sd);
}

static char *join(const char *a, const char *b, const char *c, const char *d) {
  size_t n = strlen(a) + strlen(b) + strlen(c) + strlen(d) + 1;
  char *s = dt__alloc(n);
  if (s) snprintf(s, n, "%s%s%s%s", a, b, c, d);
  return s;
}

/* A local [1] tensor of dtype holding value. */
static dt_status scalar_tensor(dt_dtype dtype, double value, int64_t ivalue, dt_tensor **out) {
  dt_status st = dt_empty(1, (int64_t[]){1}, dtype, out);
  if (st) return st;
  if (dtype == DT_I64) {
    *(int64_t *)dt_tensor_data(*out) = ivalue;
  } else {
    *(double *)dt_tensor_data(*out) = value;
  }
  return DT_OK;
}

/* Appends entry (name, tensor, role) to sd; takes the name and the tensor reference. */
static dt_status add(dt_optimizer_state_dict *sd, char *name, dt_tensor *t, int role) {
  if (!name || !t) {
    dt__free(name);
    dt_tensor_release(t);
    return dt__error(DT_ERR_NOMEM, "dt_optimizer_get_state_dict: out of memory");
  }
  sd->names[sd->count] = name;
  sd->tensors[sd->count] = t;
  sd->roles[sd->count++] = role;
  return DT_OK;
}

dt_status dt_optimizer_get_state_dict(const dt_optimizer *opt, const char *const *param_names,
                                      const char *prefix, dt_optimizer_state_dict *out) {
  static const char fn[] = "dt_optimizer_get_state_dict";
  if (out) memset(out, 0, sizeof *out);
  if (!opt || !param_names || !out) {
    return dt__error(DT_ERR_INVALID, "%s: NULL argument (opt %p, param_names %p, out %p)", fn,
                     (const void *)opt, (const void *)param_names, (void *)out);
  }
  const dt__optim_kind *kind = opt->kind;
  for (int i = 0; i < opt->n; i++) {
    if (!param_names[i]) return dt__error(DT_ERR_INVALID, "%s: param_names[%d] is NULL", fn, i);
    for (int j = 0; j < i; j++) {
      if (strcmp(param_names[i], param_names[j]) == 0) {
        return dt__error(DT_ERR_INVALID, "%s: param_names[%d] repeats param_names[%d] (\"%s\")", fn,
                         i, j, param_names[i]);
      }
    }
  }
  const char *p = prefix ? prefix : "optim.";
  size_t most = (size_t)opt->n * ROLE_STRIDE + (size_t)kind->n_hyper + 1 + N_SCHEDULE_FIELDS;
  out->names = dt__calloc(sizeof *out->names * most);
  out->tensors = dt__calloc(sizeof *out->tensors * most);
  out->roles = dt__calloc(sizeof *out->roles * most);
  dt_status st = out->names && out->tensors && out->roles
                     ? DT_OK
                     : dt__error(DT_ERR_NOMEM, "%s: out of memory for %zu entries", fn, most);
  for (int i = 0; i < opt->n && !st; i++) {
    for (int k = 0; k < kind->n_slots && !st; k++) {
      dt_tensor *s = opt->state[DT__OPTIM_MAX_SLOTS * i + k];
      if (!s) continue;
      st =
          add(out, join(p, "state.", param_names[i], ""), dt_tensor_retain(s), i * ROLE_STRIDE + k);
      /* The slot's name after the FQN: join takes four parts, so it is appended here. */
      if (!st) {
        char *full = join(out->names[out->count - 1], ".", kind->slots[k], "");
        if (!full) st = dt__error(DT_ERR_NOMEM, "%s: out of memory", fn);
        dt__free(out->names[out->count - 1]);
        out->names[out->count - 1] = full;
      }
    }
    dt_tensor *step = NULL;
    if (!st) st = scalar_tensor(DT_I64, 0, opt->steps[i], &step);
    if (!st)
      st = add(out, join(p, "state.", param_names[i], ".step"), step, i * ROLE_STRIDE + ROLE_STEP);
  }
  for (int j = 0; j < kind->n_hyper && !st; j++) {
    dt_tensor *h = NULL;
    st = scalar_tensor(DT_F64, opt->hyper[j], 0, &h);
    if (!st) st = add(out, join(p, "hyper.", kind->hyper[j].name, ""), h, -1 - j);
  }
  dt_tensor *taken = NULL;
  if (!st) st = scalar_tensor(DT_I64, 0, opt->steps_taken, &taken);
  if (!st) st = add(out, join(p, "steps_taken", "", ""), taken, ROLE_STEPS_TAKEN);
  for (int f = 0; opt->has_schedule && f < N_SCHEDULE_FIELDS && !st; f++) {
    dt_tensor *v = NULL;
    st = scalar_tensor(DT_F64, schedule_get(&opt->schedule, f), 0, &v);
    if (!st) st = add(out, join(p, "schedule.", schedule_fields[f], ""), v, ROLE_SCHEDULE - f);
  }
  if (st) dt_optimizer_state_dict_clear(out);
  return st;
}

static bool ends_with(const char *s, const char *a, const char *b) {
  size_t n = strlen(s), na = strlen(a), nb = strlen(b);
  return n >= na + nb && memcmp(s + n - na - nb, a, na) == 0 && memcmp(s + n - nb, b, nb) == 0;
}

/* A local [1] tensor of dtype (a step or a hyperparameter entry). */
static dt_status check_scalar(const char *fn, const char *name, dt_tensor *t, dt_dtype dtype) {
  if (dt_tensor_device(t).kind != DT_DEVICE_CPU) {
    char dev[64];
    return dt__error(DT_ERR_INVALID, "%s: entry `%s` is on %s (expected the CPU: it is read there)",
                     fn, name, dt_device_format(dt_tensor_device(t), dev, sizeof dev));
  }
  if (dt_tensor_is_distributed(t) || dt_tensor_dtype(t) != dtype || dt_tensor_numel(t) != 1) {
    return dt__error(DT_ERR_INVALID,
                     "%s: entry `%s` is %s %s with %lld elements (expected a "
                     "local %s [1])",
                     fn, name, dt_tensor_is_distributed(t) ? "a distributed" : "a local",
                     dt_dtype_name(dt_tensor_dtype(t)), (long long)dt_tensor_numel(t),
                     dt_dtype_name(dtype));
  }
  return DT_OK;
}

/* A slot tensor t of another state dict against opt's state s: the same dtype, global shape,
 * device, mesh and placements (a copy across devices would fail after other entries were
 * applied). */
static dt_status check_slot(const char *fn, const char *name, dt_tensor *t, dt_tensor *s) {
  dt_device td = dt_tensor_device(t), ds = dt_tensor_device(s);
  if (td.kind != ds.kind || td.index != ds.index) {
    char a[64], b[64];
    return dt__error(DT_ERR_INVALID, "%s: entry `%s` is on %s and the optimizer's state on %s", fn,
                     name, dt_device_format(td, a, sizeof a), dt_device_format(ds, b, sizeof b));
  }
  bool dist = dt_tensor_is_distributed(s);
  bool same = dt_tensor_is_distributed(t) == dist && dt_tensor_dtype(t) == DT_F32;
  if (same && dist) {
    int m = dt_mesh_ndim(dt_dist_mesh(s));
    same = dt_dist_mesh(t) == dt_dist_mesh(s) && dt_dist_ndim(t) == dt_dist_ndim(s) &&
           !memcmp(dt_dist_global_shape(t), dt_dist_global_shape(s),
                   sizeof(int64_t) * (size_t)dt_dist_ndim(s)) &&
           !memcmp(dt_dist_placements(t), dt_dist_placements(s), sizeof(dt_placement) * (size_t)m);
  } else if (same) {
    same = dt_tensor_ndim(t) == dt_tensor_ndim(s) &&
           !memcmp(dt_tensor_shape(t), dt_tensor_shape(s), sizeof(int64_t) * (size_t)t->ndim);
  }
  if (!same) {
    return dt__error(DT_ERR_SHAPE,
                     "%s: entry `%s` differs from the optimizer's state in dtype, "
                     "shape, mesh or placements",
                     fn, name);
  }
  return DT_OK;
}

/* What dt_optimizer_load_state_dict reads from a state dict, checked entry by entry. */
typedef struct loaded {
  double h[DT__OPTIM_MAX_HYPER];
  int steps, hypers, schedule_fields_seen;
  int64_t taken;
  dt_lr_schedule schedule;
  bool *seen; /* per role: every role once, so a repeated entry cannot stand in for a missing
               * one in the counts */
} loaded;

/* The index of a role in loaded.seen (roles are checked against their ranges first). */
static size_t seen_index(const dt_optimizer *opt, int role) {
  size_t params = (size_t)opt->n * ROLE_STRIDE;
  if (role >= 0) return (size_t)role;
  if (role == ROLE_STEPS_TAKEN) return params;
  if (role <= ROLE_SCHEDULE) return params + 1 + (size_t)(ROLE_SCHEDULE - role);
  return params + 1 + N_SCHEDULE_FIELDS + (size_t)(-1 - role);
}

static dt_status check_entry(const char *fn, dt_optimizer *opt, const dt_optimizer_state_dict *sd,
                             int e, loaded *l) {
  const dt__optim_kind *kind = opt->kind;
  const char *name = sd->names[e];
  dt_tensor *t = sd->tensors[e];
  int role = sd->roles[e];
  if (!name || !t) return dt__error(DT_ERR_INVALID, "%s: entry %d is NULL", fn, e);
  bool in_range = role == ROLE_STEPS_TAKEN ||
                  (role <= ROLE_SCHEDULE && ROLE_SCHEDULE - role < N_SCHEDULE_FIELDS) ||
                  (role < 0 && role > ROLE_STEPS_TAKEN && -1 - role < kind->n_hyper) ||
                  (role >= 0 && role / ROLE_STRIDE < opt->n);
  if (in_range) {
    size_t k = seen_index(opt, role);
    if (l->seen[k]) {
      return dt__error(DT_ERR_INVALID, "%s: entry `%s` repeats an earlier entry's role", fn, name);
    }
    l->seen[k] = true;
  }
  if (role == ROLE_STEPS_TAKEN) {
    dt_status st = check_scalar(fn, name, t, DT_I64);
    if (st) return st;
    l->taken = *(const int64_t *)dt_tensor_data(t);
    if (l->taken < 0 || l->taken > DT__OPTIM_MAX_STEPS) {
      return dt__error(DT_ERR_INVALID,
                       "%s: entry `%s` (steps_taken) holds %lld steps (expected 0 to 2^53 = %lld)",
                       fn, name, (long long)l->taken, (long long)DT__OPTIM_MAX_STEPS);
    }
    return DT_OK;
  }
  if (role <= ROLE_SCHEDULE) {
    int f = ROLE_SCHEDULE - role;
    dt_status st = f < N_SCHEDULE_FIELDS ? check_scalar(fn, name, t, DT_F64)
                                         : dt__error(DT_ERR_INVALID, "%s: entry `%s`", fn, name);
    if (st) return st;
    double v = *(const double *)dt_tensor_data(t);
    if (!schedule_set(&l->schedule, f, v)) {
      return dt__error(DT_ERR_INVALID, "%s: entry `%s` (schedule field %s) holds %g (expected %s)",
                       fn, name, schedule_fields[f], v, schedule_expected(f));
    }
    l->schedule_fields_seen++;
    return DT_OK;
  }
  if (role < 0) {
    int j = -1 - role;
    if (j >= kind->n_hyper || !ends_with(name, "hyper.", kind->hyper[j].name)) {
      return dt__error(DT_ERR_INVALID, "%s: entry `%s` is no hyperparameter of %s", fn, name,
                       kind->name);
    }
    dt_status st = check_scalar(fn, name, t, DT_F64);
    if (st) return st;
    l->h[j] = *(const double *)dt_tensor_data(t);
    l->hypers++;
    return DT_OK;
  }
  int i = role / ROLE_STRIDE, k = role % ROLE_STRIDE;
  if (i >= opt->n) {
    return dt__error(DT_ERR_INVALID, "%s: entry `%s` is for parameter %d of %d", fn, name, i,
                     opt->n);
  }
  if (k == ROLE_STEP) {
    dt_status st = check_scalar(fn, name, t, DT_I64);
    if (st) return st;
    int64_t v = *(const int64_t *)dt_tensor_data(t);
    if (v < 0 || v > DT__OPTIM_MAX_STEPS)
      return dt__error(DT_ERR_INVALID,
                       "%s: entry `%s` (a step count) holds step %lld (expected 0 to 2^53 = %lld)",
                       fn, name, (long long)v, (long long)DT__OPTIM_MAX_STEPS);
    l->steps++;
    return DT_OK;
  }
  dt_tensor *s = opt->state[DT__OPTIM_MAX_SLOTS * i + k];
  if (k >= kind->n_slots || !s || !ends_with(name, ".", kind->slots[k])) {
    return dt__error(DT_ERR_INVALID, "%s: entry `%s` is no state slot of this %s", fn, name,
                     kind->name);
  }
  if (t != s) {
    dt_status st = check_slot(fn, name, t, s);
    if (st) return st;
  }
  return DT_OK;
}

dt_status dt_optimizer_load_state_dict(dt_optimizer *opt, const dt_optimizer_state_dict *sd) {
  static const char fn[] = "dt_optimizer_load_state_dict";
  if (!opt || !sd || (sd->count > 0 && (!sd->names || !sd->tensors || !sd->roles))) {
    return dt__error(DT_ERR_INVALID, "%s: NULL argument (opt %p, sd %p) or an empty state dict", fn,
                     (void *)opt, (const void *)sd);
  }
  const dt__optim_kind *kind = opt->kind;
  loaded l = {.taken = opt->steps_taken};
  memcpy(l.h, opt->hyper, sizeof l.h);
  /* Everything checked first. */
  l.seen = dt__calloc((size_t)opt->n * ROLE_STRIDE + 1 + N_SCHEDULE_FIELDS + DT__OPTIM_MAX_HYPER);
  if (!l.seen) return dt__error(DT_ERR_NOMEM, "%s: out of memory", fn);
  dt_status checked = DT_OK;
  for (int e = 0; e < sd->count && !checked; e++) checked = check_entry(fn, opt, sd, e, &l);
  dt__free(l.seen);
  if (checked) return checked;
  double *h = l.h;
  int steps = l.steps, hypers = l.hypers, schedule_fields_seen = l.schedule_fields_seen;
  int64_t taken = l.taken;
  dt_lr_schedule schedule = l.schedule;
  if (steps != opt->n || hypers != kind->n_hyper) {
    return dt__error(DT_ERR_INVALID,
                     "%s: the state dict has %d step counts and %d hyperparameters; this %s has "
                     "%d parameters and %d hyperparameters",
                     fn, steps, hypers, kind->name, opt->n, kind->n_hyper);
  }
  if (schedule_fields_seen != 0 && schedule_fields_seen != N_SCHEDULE_FIELDS) {
    return dt__error(DT_ERR_INVALID, "%s: the state dict has %d of the schedule's %d fields", fn,
                     schedule_fields_seen, N_SCHEDULE_FIELDS);
  }
  /* The ranges of the values together (each entry alone was checked above), said as the
   * state dict's so that the reader knows where the value came from. */
  dt_status st = kind->check("dt_optimizer_load_state_dict: the state dict's hyperparameters", h);
  if (!st && schedule_fields_seen)
    st = dt__optim_check_schedule("dt_optimizer_load_state_dict: the state dict's schedule",
                                  &schedule);
  if (st) return st;
  for (int k = 0; k < kind->n_slots; k++) {
    bool then = !kind->slot_used || kind->slot_used(h, k);
    if (then != dt__optim_slot_used(opt, k)) {
      return dt__error(DT_ERR_INVALID, "%s: the state dict's hyperparameters %s the state \"%s\"",
                       fn, then ? "need" : "drop", kind->slots[k]);
    }
  }
  /* Then applied: the slot copies first, the only step that can still fail (out of memory),
   * so that a failure leaves the step counts and hyperparameters as they were. */
  for (int e = 0; e < sd->count && !st; e++) {
    int role = sd->roles[e];
    if (role < 0 || role % ROLE_STRIDE == ROLE_STEP) continue;
    int i = role / ROLE_STRIDE, k = role % ROLE_STRIDE;
    if (sd->tensors[e] != opt->state[DT__OPTIM_MAX_SLOTS * i + k])
      st = dt__copy_values_no_grad(opt->state[DT__OPTIM_MAX_SLOTS * i + k], sd->tensors[e]);
  }
  if (st) return st;
  for (int e = 0; e < sd->count; e++) {
    int role = sd->roles[e];
    if (role >= 0 && role % ROLE_STRIDE == ROLE_STEP)
      opt->steps[role / ROLE_STRIDE] = *(const int64_t *)dt_tensor_data(sd->tensors[e]);
  }
  memcpy(opt->hyper, l.h, sizeof l.h);
  opt->steps_taken = taken;
  if (schedule_fields_seen) {
    opt->schedule = schedule;
    opt->has_schedule = true;
  }
  dt__optim_apply_schedule(opt);
  return DT_OK;
}
