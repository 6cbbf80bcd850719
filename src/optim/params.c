/*
 * Parameters and gradients of the optimizers: the checks that run before anything is
 * updated, the reduction of Partial gradients, and clip_grad_norm.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "distributed/dist_impl.h"
#include "optim/optim_impl.h"
#include "tensor/tensor_impl.h"

float *dt__optim_floats(dt_tensor *t, int64_t *count) {
  dt_tensor *local = NULL;
  if (!t->spec) { /* local: the fields directly, no calls (this runs for every parameter) */
    *count = dt__tensor_numel(t);
    return (float *)dt__tensor_base(t);
  }
  if (dt_dist_to_local(t, &local)) {
    *count = 0;
    return NULL;
  }
  *count = dt_tensor_numel(local);
  float *data = (float *)dt__tensor_base(local); /* host or device memory */
  dt_tensor_release(local);
  return data;
}

void dt__optim_release_all(int n, dt_tensor **tensors) {
  for (int i = 0; i < n; i++) {
    dt_tensor_release(tensors[i]);
    tensors[i] = NULL;
  }
}

static bool dist_local_contiguous(dt_tensor *t) {
  dt_tensor *local = NULL;
  if (dt_dist_to_local(t, &local)) return false;
  bool contiguous = dt_tensor_is_contiguous(local);
  dt_tensor_release(local);
  return contiguous;
}

/* Local tensors read their fields directly: this runs for every parameter and gradient at
 * every step. */
static inline bool local_contiguous(dt_tensor *t) {
  if (!t->spec) return dt__is_contiguous(t->ndim, t->shape, t->strides);
  return dist_local_contiguous(t);
}

dt_status dt__optim_check_params(const char *fn, int n, dt_tensor *const *params,
                                 bool check_repeats, dt_mesh **mesh) {
  *mesh = NULL;
  if (!params || n < 1) {
    return dt__error(DT_ERR_INVALID, "%s: params %p with n = %d (expected at least one)", fn,
                     (void *)params, n);
  }
  int first = -1; /* the first distributed parameter */
  for (int i = 0; i < n; i++) {
    dt_tensor *p = params[i];
    if (!p) return dt__error(DT_ERR_INVALID, "%s: parameter %d is NULL", fn, i);
    for (int j = 0; check_repeats && j < i; j++) {
      if (params[j] == p)
        return dt__error(DT_ERR_INVALID, "%s: parameter %d repeats parameter %d", fn, i, j);
    }
    if (p->dtype != DT_F32) {
      return dt__error(DT_ERR_DTYPE,
                       "%s: parameter %d has dtype %s (expected float32): keep float32 master "
                       "weights and compute with a dt_to copy of each in the step (its gradient "
                       "lands float32 on the master; docs/training.md, \"Mixed precision\")",
                       fn, i, dt_dtype_name(p->dtype));
    }
    if (!dt_tensor_is_leaf(p)) {
      return dt__error(DT_ERR_INVALID,
                       "%s: parameter %d is not a leaf (an op's result): pass the tensor the "
                       "model holds",
                       fn, i);
    }
    if (!dt_tensor_requires_grad(p)) {
      return dt__error(DT_ERR_INVALID,
                       "%s: parameter %d does not require grad (a module's parameters start "
                       "without: call dt_tensor_set_requires_grad on each, or parallelize the "
                       "model first with dt_parallel_tp_module, dt_parallel_fsdp or "
                       "dt_parallel_ddp, which set it)",
                       fn, i);
    }
    int index;
    if (dt_tensor_device(p).kind != DT_DEVICE_CPU && !dt__optim_routines(p, &index)) {
      char d[64];
      return dt__error(DT_ERR_UNSUPPORTED,
                       "%s: parameter %d is on %s, whose kind has no optimizer kernels (move it "
                       "with dt_to_device)",
                       fn, i, dt_device_format(dt_tensor_device(p), d, sizeof d));
    }
    if (!local_contiguous(p)) {
      return dt__error(DT_ERR_INVALID, "%s: parameter %d's local data is not contiguous", fn, i);
    }
    /* Local parameters mix with distributed ones (a TP model leaves the modules its plan does
     * not name local); the distributed ones share one mesh, which the step's and the clip's
     * collectives run over. */
    dt_mesh *m = p->spec ? dt_dist_mesh(p) : NULL;
    if (!m) continue;
    if (!*mesh) {
      *mesh = m;
      first = i;
    } else if (m != *mesh) {
      char a[128], b[128];
      return dt__error(DT_ERR_INVALID,
                       "%s: parameter %d is on %s but parameter %d is on %s (the distributed "
                       "parameters must share one mesh object: the norm and the skip decision "
                       "reduce over it; use one optimizer per mesh)",
                       fn, i, dt_mesh_format(m, a, sizeof a), first,
                       dt_mesh_format(*mesh, b, sizeof b));
    }
  }
  return DT_OK;
}

/* Checks parameter i's gradient g without communicating; *reduce is set when g has other
 * placements than the parameter's, to redistribute to them. */
static dt_status check_grad(const char *fn, int i, dt_tensor *p, dt_tensor *g, bool *reduce) {
  *reduce = false;
  if (g->dtype != DT_F32) {
    return dt__error(DT_ERR_DTYPE, "%s: parameter %d's gradient has dtype %s (expected float32)",
                     fn, i, dt_dtype_name(dt_tensor_dtype(g)));
  }
  bool pd = p->spec != NULL, gd = g->spec != NULL;
  if (pd != gd) {
    return dt__error(DT_ERR_INVALID, "%s: parameter %d is %s but its gradient is %s", fn, i,
                     pd ? "distributed" : "local", gd ? "distributed" : "local");
  }
  if (!pd) {
    if (p->ndim != g->ndim || memcmp(p->shape, g->shape, sizeof(int64_t) * (size_t)p->ndim)) {
      char a[160], b[160];
      return dt__error(DT_ERR_SHAPE, "%s: parameter %d has shape %s but its gradient %s", fn, i,
                       dt__format_ints(a, sizeof a, dt_tensor_ndim(p), dt_tensor_shape(p)),
                       dt__format_ints(b, sizeof b, dt_tensor_ndim(g), dt_tensor_shape(g)));
    }
    return DT_OK;
  }
  if (dt_dist_mesh(g) != dt_dist_mesh(p)) {
    return dt__error(DT_ERR_INVALID, "%s: parameter %d's gradient is on another mesh", fn, i);
  }
  if (dt_dist_ndim(p) != dt_dist_ndim(g) || memcmp(dt_dist_global_shape(p), dt_dist_global_shape(g),
                                                   sizeof(int64_t) * (size_t)dt_dist_ndim(p))) {
    char a[160], b[160];
    return dt__error(DT_ERR_SHAPE, "%s: parameter %d has shape %s but its gradient %s", fn, i,
                     dt__format_ints(a, sizeof a, dt_dist_ndim(p), dt_dist_global_shape(p)),
                     dt__format_ints(b, sizeof b, dt_dist_ndim(g), dt_dist_global_shape(g)));
  }
  int n = dt_mesh_ndim(dt_dist_mesh(p));
  const dt_placement *pp = dt_dist_placements(p), *gp = dt_dist_placements(g);
  /* The whole placement, split factor included: SS(0,6) and SS(0,3) hold different elements.
   * Any other placements are redistributed to the parameter's (a Partial reduced, a Replicate
   * sliced, a shard moved), as PyTorch's sharding propagation does for the update's ops. */
  *reduce = !dt__placements_equal(n, pp, gp);
  return DT_OK;
}

/* Makes every gradient ready for the fused loops: redistributed to its parameter's placements
 * where reduce[i] (a collective: every rank in parameter order), else made contiguous. */
static dt_status fix_grads(int n, dt_tensor *const *params, dt_tensor **grads, const bool *reduce) {
  dt_status st = DT_OK;
  bool prev = dt_grad_mode_set(false);
  for (int i = 0; i < n && !st; i++) {
    dt_tensor *g = grads[i], *fixed = NULL;
    if (!g) continue;
    if (reduce[i]) {
      dt_mesh *mesh = dt_dist_mesh(params[i]);
      st = dt_dist_redistribute(g, dt_mesh_ndim(mesh), dt_dist_placements(params[i]), &fixed);
    } else if (!local_contiguous(g)) {
      st = dt_contiguous(g, &fixed);
    }
    if (!st && fixed && !local_contiguous(fixed)) {
      dt_tensor *c = NULL;
      st = dt_contiguous(fixed, &c);
      dt_tensor_release(fixed);
      fixed = c;
    }
    if (fixed) {
      /* The reduced gradient has the same values: it replaces .grad at once, so a later
       * failure leaves every parameter's gradient valid. */
      dt_tensor_release(grads[i]);
      grads[i] = fixed;
      if (!st) st = dt_tensor_set_grad(params[i], fixed);
    }
  }
  dt_grad_mode_set(prev);
  return st;
}

/* The mesh of the first distributed parameter, looked for even when a check failed before the
 * checks reached it: the refusing rank must join its peers' agreement. */
static dt_mesh *first_mesh(int n, dt_tensor *const *params) {
  for (int i = 0; params && i < n; i++)
    if (params[i] && params[i]->spec) return dt_dist_mesh(params[i]);
  return NULL;
}

/* One all_reduce (sum, in double) over mesh's world of this rank's verdict (mine) and its
 * n_values values, which receive the sums: every rank learns whether one refused, so none is
 * left waiting in a later collective for a rank that returned. Returns mine, with its own
 * message, on a rank that refused; DT_ERR_INVALID naming the refusing rank on the others; else
 * the collective's status. Without a mesh: mine, the values unchanged. */
static dt_status agree(const char *fn, dt_mesh *mesh, dt_status mine, double *values,
                       int n_values) {
  if (!mesh) return mine;
  dt_comm *world = dt_mesh_world(mesh);
  double v[2 + 4] = {mine ? 1.0 : 0.0, mine ? (double)dt_comm_rank(world) : 0.0};
  DT_ASSERT(n_values <= 4);
  memcpy(v + 2, values, sizeof(double) * (size_t)n_values);
  char message[512];
  snprintf(message, sizeof message, "%s", mine ? dt_last_error() : "");
  dt_tensor *t = NULL;
  dt_status st = dt_from_data(v, 1, (int64_t[]){2 + n_values}, DT_F64, &t);
  if (!st) st = dt_comm_all_reduce(world, t, DT_REDUCE_SUM);
  if (!st) memcpy(v, dt_tensor_data(t), sizeof(double) * (size_t)(2 + n_values));
  dt_tensor_release(t);
  if (mine) return dt__error(mine, "%s", message);
  if (st) return st;
  memcpy(values, v + 2, sizeof(double) * (size_t)n_values);
  if (v[0] == 1)
    return dt__error(DT_ERR_INVALID,
                     "%s: rank %d refused its parameters or gradients (its error says why); "
                     "nothing was changed on any rank",
                     fn, (int)v[1]);
  if (v[0] > 1)
    return dt__error(DT_ERR_INVALID,
                     "%s: %d ranks refused their parameters or gradients (their errors say why); "
                     "nothing was changed on any rank",
                     fn, (int)v[0]);
  return DT_OK;
}

/* Whether a gradient is placed otherwise than its distributed parameter (then the step
 * redistributes it: a collective), read without the checks: a rank whose checks failed must
 * still know whether its peers will communicate, to join their agreement. */
static bool any_to_reduce(int n, dt_tensor *const *params) {
  bool any = false;
  for (int i = 0; params && i < n && !any; i++) {
    dt_tensor *p = params[i], *g = NULL;
    if (!p || !p->spec || dt_tensor_grad(p, &g) || !g) continue;
    int dims = dt_mesh_ndim(dt_dist_mesh(p));
    any = g->spec && dt_mesh_ndim(dt_dist_mesh(g)) == dims &&
          !dt__placements_equal(dims, dt_dist_placements(p), dt_dist_placements(g));
    dt_tensor_release(g);
  }
  return any;
}

dt_status dt__optim_prepare(const char *fn, dt_status mine, int n, dt_tensor *const *params,
                            bool check_repeats, bool always_agree, dt_tensor **grads,
                            dt_mesh **mesh, dt__optim_measure measure, double *value) {
  *value = 0.0;
  *mesh = NULL;
  dt_status st = mine ? mine : dt__optim_check_params(fn, n, params, check_repeats, mesh);
  if (st) *mesh = first_mesh(n, params);
  bool *reduce = NULL, any = false;
  if (!st && !(reduce = dt__calloc(sizeof(bool) * (size_t)n)))
    st = dt__error(DT_ERR_NOMEM, "%s: out of memory for %d parameters", fn, n);
  for (int i = 0; i < n && !st; i++) {
    st = dt_tensor_grad(params[i], &grads[i]);
    if (!st && grads[i]) st = check_grad(fn, i, params[i], grads[i], &reduce[i]);
    any = any || reduce[i];
  }
  if (st) any = any_to_reduce(n, params); /* the checks stopped early: read past them */
  /* The agreement is the call's first collective: a call without one (a step with nothing to
   * reduce and no skip_if_nonfinite) leaves no peer waiting and needs none. */
  bool agreeing = *mesh && (always_agree || any);
  /* v: the ranks with gradients to reduce, and the measure, which rides on the agreement when
   * no rank reduces (their gradients are final: only local copies were made). */
  double v[2] = {any ? 1.0 : 0.0, 0.0};
  if (!st && !any) st = fix_grads(n, params, grads, reduce);
  if (!st && !any && measure) st = measure(n, grads, *mesh, &v[1]);
  if (agreeing) st = agree(fn, *mesh, st, v, 2);
  int ranks = agreeing ? dt_comm_size(dt_mesh_world(*mesh)) : 1;
  if (!st && v[0] != 0 && v[0] != ranks)
    st = dt__error(DT_ERR_INVALID,
                   "%s: %d of %d ranks hold gradients placed otherwise than their parameters "
                   "(every rank must hold the same placements)",
                   fn, (int)v[0], ranks);
  if (!st && v[0] == 0) {
    *value = v[1];
  } else if (!st) { /* every rank reduces, then measures and sums again */
    st = fix_grads(n, params, grads, reduce);
    if (!st && measure) st = measure(n, grads, *mesh, &v[1]);
    if (measure) st = agree(fn, *mesh, st, &v[1], 1);
    *value = v[1];
  }
  dt__free(reduce);
  if (st) dt__optim_release_all(n, grads);
  return st;
}

dt_status dt__optim_count_nonfinite(int n, dt_tensor **grads, dt_mesh *mesh, double *count) {
  (void)mesh;
  *count = 0.0;
  for (int i = 0; i < n && *count == 0.0; i++) {
    if (!grads[i]) continue;
    int64_t elements;
    int index;
    const float *g = dt__optim_floats(grads[i], &elements);
    const dt_device_routines *r = dt__optim_routines(grads[i], &index);
    if (r) {
      bool bad = false;
      dt_status st = r->any_nonfinite(index, g, elements, &bad);
      if (st) return st;
      *count = bad ? 1.0 : 0.0;
      continue;
    }
    for (int64_t k = 0; k < elements; k++) {
      if (!isfinite(g[k])) {
        *count = 1.0;
        break;
      }
    }
  }
  return DT_OK;
}

/* Whether this rank's shard of t is the copy that counts: the rank at coordinate 0 of
 * every mesh dim along which t is replicated (the other ranks of that dim hold the same
 * values). */
static bool counts_here(dt_tensor *t) {
  if (!dt_tensor_is_distributed(t)) return true;
  dt_mesh *mesh = dt_dist_mesh(t);
  for (int d = 0; d < dt_mesh_ndim(mesh); d++) {
    if (dt_dist_placements(t)[d].kind == DT_REPLICATE && dt_mesh_coordinate(mesh, d) != 0)
      return false;
  }
  return true;
}

/* The squares of the gradients' local shards that count. A local gradient beside distributed
 * ones counts once: each rank adds its squares divided by the rank count, so ranks whose local
 * gradients agree (a TP model's LayerNorms) add them once, and ranks whose local gradients
 * differ still agree on the norm (the mean of their squares: PyTorch's get_total_norm
 * replicates a plain tensor's norm the same way). */
static dt_status clip_squares(int n, dt_tensor **grads, dt_mesh *mesh, double *out) {
  int ranks = mesh ? dt_comm_size(dt_mesh_world(mesh)) : 1;
  double squares = 0.0, local_squares = 0.0;
  dt_status st = DT_OK;
  for (int i = 0; i < n && !st; i++) {
    if (!grads[i] || !counts_here(grads[i])) continue;
    double *sum = grads[i]->spec ? &squares : &local_squares;
    int64_t count;
    int index;
    const float *g = dt__optim_floats(grads[i], &count);
    const dt_device_routines *r = dt__optim_routines(grads[i], &index);
    if (r) { /* on the device, in double; its sum joins the host's */
      double part = 0.0;
      st = r->sum_squares(index, g, count, &part);
      *sum += part;
      continue;
    }
    for (int64_t k = 0; k < count; k++) *sum += (double)g[k] * (double)g[k];
  }
  *out = squares + local_squares / ranks;
  return st;
}

dt_status dt_clip_grad_norm(int n, dt_tensor *const *params, double max_norm,
                            const dt_clip_grad_options *options, double *total_norm) {
  static const char fn[] = "dt_clip_grad_norm";
  dt_clip_grad_options o = options ? *options : (dt_clip_grad_options){0};
  if (total_norm) *total_norm = 0.0;
  dt_status st = DT_OK;
  /* 0 is PyTorch's too: every gradient becomes 0. A negative max_norm (PyTorch flips the
   * gradients' signs) or NaN (PyTorch makes them NaN) is refused. */
  if (!(max_norm >= 0.0))
    st = dt__error(DT_ERR_INVALID, "%s: max_norm %g (expected >= 0)", fn, max_norm);
  dt_tensor **grads = dt__calloc(sizeof(dt_tensor *) * (size_t)(n > 0 ? n : 1));
  if (!grads) return dt__error(DT_ERR_NOMEM, "%s: out of memory for %d parameters", fn, n);
  /* The checks agreed on by every rank; then the sum of the squares over every rank, on the
   * same all_reduce when no gradient needs a reduction (else on one after them). */
  dt_mesh *mesh = NULL;
  double squares = 0.0;
  st = dt__optim_prepare(fn, st, n, params, true, true, grads, &mesh, clip_squares, &squares);
  double norm = sqrt(squares);
  if (!st && total_norm) *total_norm = norm;
  if (!st && !isfinite(norm) && o.error_if_nonfinite) {
    st = dt__error(DT_ERR_INVALID,
                   "%s: the total norm of the gradients is %g (non-finite; error_if_nonfinite)", fn,
                   norm);
  }
  double coef = max_norm / (norm + 1e-6);
  if (!st && isfinite(norm) && coef < 1.0) {
    float c = (float)coef;
    for (int i = 0; i < n && !st; i++) {
      if (!grads[i]) continue;
      int64_t count;
      int index;
      float *g = dt__optim_floats(grads[i], &count);
      const dt_device_routines *r = dt__optim_routines(grads[i], &index);
      if (r) {
        st = r->scale(index, g, count, c);
        continue;
      }
      for (int64_t k = 0; k < count; k++) g[k] *= c;
    }
  }
  dt__optim_release_all(n, grads);
  dt__free(grads);
  return st;
}
