/*
 * The op sweep, backward: for every case of tests/sweep_cases.h whose op is differentiable
 * (its output is floating and requires grad), with input placements Replicate, Shard(d) and
 * Partial(sum) for floating inputs: every combination on meshes 2 and 4, a spread sample of
 * at most 150 (2x2) and 60 (2x2x2) per case. Forward on distributed leaves, loss =
 * sum(output * weights) with fixed random weights, backward; every input gradient, gathered
 * with full_tensor, must equal the gradient of the same loss on the full tensors. Ranks are
 * threads (dt_comm_spawn).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sweep_cases.h"

typedef struct sweep {
  int mesh_ndim;
  int mesh_shape[3];
  int max_combos; /* per case: a spread sample of at most this many combinations */
} sweep;

static _Atomic long checks, cases_run, cases_skipped;

/* Placement choice k for a tensor of ndim dims: 0 = R, 1..ndim = S(k-1), ndim+1 = P(sum). */
static dt_placement choice(int k, int ndim) {
  if (k == 0) return dt_replicate();
  if (k <= ndim) return dt_shard(k - 1);
  return dt_partial(DT_REDUCE_SUM);
}

static dt_status fail(const char *what, const op_case *c, const char *combo) {
  char msg[512];
  snprintf(msg, sizeof msg, "%s", dt_last_error());
  fprintf(stderr, "autograd sweep: %s: %s [%s]: %s\n", c->name, what, combo, msg);
  return DT_ERR_INTERNAL;
}

/* loss = sum(fn(x) * weights); *out_shape_of receives fn(x) when weights is NULL. */
static dt_status loss_of(const op_case *c, dt_tensor **x, dt_tensor *weights, dt_tensor **loss) {
  dt_tensor *y = NULL, *yw = NULL;
  dt_status st = case_run(c, x, &y);
  if (!st) st = dt_mul(y, weights, &yw);
  if (!st) st = dt_sum(yw, loss);
  dt_tensor_release(y);
  dt_tensor_release(yw);
  return st;
}

static bool close_enough(const dt_tensor *got, const dt_tensor *want) {
  if (dt_tensor_ndim(got) != dt_tensor_ndim(want) ||
      memcmp(dt_tensor_shape(got), dt_tensor_shape(want),
             sizeof(int64_t) * (size_t)dt_tensor_ndim(want)) != 0) {
    return false;
  }
  int64_t n = dt_tensor_numel(want);
  double *a = ref_values(got), *b = ref_values(want);
  bool ok = true;
  for (int64_t j = 0; j < n && ok; j++) ok = fabs(a[j] - b[j]) <= 2e-3 + 2e-3 * fabs(b[j]);
  free(a);
  free(b);
  return ok;
}

/* The local reference: gradients of the loss on the full tensors (NULL where none).
 * Returns false when the case is not differentiable (output without grad, an in-place op
 * refused on a tensor that requires grad, an op without a formula). */
static bool reference_grads(const op_case *c, dt_tensor **full, dt_tensor *weights,
                            dt_tensor **grads) {
  for (int i = 0; i < c->n_in; i++) {
    if (dt_dtype_is_floating(c->dtype[i])) dt_tensor_set_requires_grad(full[i], true);
  }
  dt_tensor *loss = NULL;
  dt_status st = loss_of(c, full, weights, &loss);
  bool differentiable = !st && dt_tensor_requires_grad(loss);
  if (differentiable) {
    st = dt_backward(loss, NULL);
    differentiable = st == DT_OK;
    cr_assert(!st || st == DT_ERR_UNSUPPORTED, "%s: local backward: %s", c->name, dt_last_error());
  } else {
    cr_assert(!st || st == DT_ERR_UNSUPPORTED, "%s: local forward: %s", c->name, dt_last_error());
  }
  dt_tensor_release(loss);
  for (int i = 0; i < c->n_in; i++) {
    grads[i] = NULL;
    if (differentiable) dt_tensor_grad(full[i], &grads[i]);
    dt_tensor_set_requires_grad(full[i], false);
  }
  return differentiable;
}

static dt_status run_case(dt_mesh *mesh, const sweep *sw, const op_case *c, uint64_t seed,
                          bool count) {
  dt_tensor *full[3] = {0}, *ref[3] = {0}, *weights = NULL, *y = NULL;
  dt_status st = DT_OK;
  for (int i = 0; i < c->n_in; i++) {
    double lo = c->lo, hi = c->hi;
    if (lo == 0 && hi == 0) lo = -2, hi = 2;
    full[i] = ref_random(c->ndim[i], c->shape[i], c->dtype[i], lo, hi, seed + (uint64_t)i);
  }
  /* The weights take the output's shape and dtype. */
  bool prev = dt_grad_mode_set(false);
  st = case_run(c, full, &y);
  dt_grad_mode_set(prev);
  if (st || !dt_dtype_is_floating(dt_tensor_dtype(y))) {
    st = DT_OK; /* integer or bool output: not differentiable */
    if (count) cases_skipped++;
    goto done;
  }
  weights = ref_random(dt_tensor_ndim(y), dt_tensor_shape(y), dt_tensor_dtype(y), -1, 1, seed + 77);
  if (!reference_grads(c, full, weights, ref)) {
    if (count) cases_skipped++;
    goto done;
  }
  if (count) cases_run++;
  int choices[3], total = 1;
  for (int i = 0; i < c->n_in; i++) {
    bool floating = dt_dtype_is_floating(c->dtype[i]) && !(i == 0 && c->no_partial);
    choices[i] = 1 + c->ndim[i] + (floating ? 1 : 0);
    for (int m = 0; m < sw->mesh_ndim; m++) total *= choices[i];
  }
  int step = 1;
  if (sw->max_combos && total > sw->max_combos) step = total / sw->max_combos;
  dt_placement rep[3] = {dt_replicate(), dt_replicate(), dt_replicate()};
  dt_tensor *wd = NULL;
  st = dt_dist_distribute_tensor(mesh, weights, sw->mesh_ndim, rep, &wd);
  if (st) st = fail("distributing the weights", c, "R");
  for (int combo = 0; combo < total && !st; combo += step) {
    if (count) checks++;
    int k = combo;
    dt_placement pl[3][3];
    char desc[128] = "";
    for (int i = 0; i < c->n_in; i++) {
      for (int m = 0; m < sw->mesh_ndim; m++) {
        pl[i][m] = choice(k % choices[i], c->ndim[i]);
        k /= choices[i];
        char p[16];
        strncat(desc, dt_placement_format(pl[i][m], p, sizeof p), sizeof desc - strlen(desc) - 2);
        strncat(desc, m + 1 < sw->mesh_ndim ? "," : (i + 1 < c->n_in ? " | " : ""),
                sizeof desc - strlen(desc) - 1);
      }
    }
    dt_tensor *dist[3] = {0}, *loss = NULL;
    for (int i = 0; i < c->n_in && !st; i++) {
      dt_tensor *r = NULL;
      st = dt_dist_distribute_tensor(mesh, full[i], sw->mesh_ndim, rep, &r);
      if (!st) st = dt_dist_redistribute(r, sw->mesh_ndim, pl[i], &dist[i]);
      if (!st && ref[i]) st = dt_tensor_set_requires_grad(dist[i], true);
      dt_tensor_release(r);
      if (st) st = fail("making the input", c, desc);
    }
    if (!st && loss_of(c, dist, wd, &loss)) st = fail("distributed forward failed", c, desc);
    if (!st && dt_backward(loss, NULL)) st = fail("distributed backward failed", c, desc);
    for (int i = 0; i < c->n_in && !st; i++) {
      dt_tensor *g = NULL, *gathered = NULL;
      st = dt_tensor_grad(dist[i], &g);
      if (!st && !g != !ref[i]) {
        fprintf(stderr, "autograd sweep: %s [%s]: input %d: gradient %s locally, %s distributed\n",
                c->name, desc, i, ref[i] ? "present" : "absent", g ? "present" : "absent");
        st = DT_ERR_INTERNAL;
      }
      if (!st && g && dt_dist_full_tensor(g, &gathered))
        st = fail("full_tensor of a grad", c, desc);
      if (!st && g && !close_enough(gathered, ref[i])) {
        fprintf(stderr, "autograd sweep: %s [%s]: input %d: gradient differs\n", c->name, desc, i);
        st = DT_ERR_INTERNAL;
      }
      dt_tensor_release(g);
      dt_tensor_release(gathered);
    }
    for (int i = 0; i < c->n_in; i++) dt_tensor_release(dist[i]);
    dt_tensor_release(loss);
  }
  dt_tensor_release(wd);
done:
  for (int i = 0; i < c->n_in; i++) {
    dt_tensor_release(full[i]);
    dt_tensor_release(ref[i]);
  }
  dt_tensor_release(weights);
  dt_tensor_release(y);
  return st;
}

static dt_status sweep_rank(dt_comm *world, void *arg) {
  const sweep *sw = arg;
  dt_mesh *mesh = NULL;
  dt_status st = dt_mesh_create(world, sw->mesh_ndim, sw->mesh_shape, NULL, &mesh);
  if (st) return st;
  bool count = dt_comm_rank(world) == 0;
  for (size_t i = 0; i < N_CASES && !st; i++) st = run_case(mesh, sw, &cases[i], 300 + i, count);
  dt_mesh_destroy(mesh);
  return st;
}

static void run_sweep(int ndim, const int *shape, int max_combos) {
  sweep sw = {ndim, {shape[0], ndim > 1 ? shape[1] : 1, ndim > 2 ? shape[2] : 1}, max_combos};
  int world = sw.mesh_shape[0] * sw.mesh_shape[1] * sw.mesh_shape[2];
  checks = cases_run = cases_skipped = 0;
  dt_status st = dt_comm_spawn(world, sweep_rank, &sw);
  fprintf(stderr,
          "autograd sweep, mesh %dx%dx%d: %ld differentiable cases, %ld skipped, %ld "
          "placement combinations checked\n",
          sw.mesh_shape[0], sw.mesh_shape[1], sw.mesh_shape[2], (long)cases_run,
          (long)cases_skipped, (long)checks);
  cr_assert_eq(st, DT_OK, "autograd sweep failed: %s", dt_last_error());
  cr_assert_gt(cases_run, 40, "too few differentiable cases ran");
}

Test(autograd_sweep, mesh_2) { run_sweep(1, (int[]){2}, 0); }
Test(autograd_sweep, mesh_4) { run_sweep(1, (int[]){4}, 0); }
Test(autograd_sweep, mesh_2x2) { run_sweep(2, (int[]){2, 2}, 150); }
Test(autograd_sweep, mesh_2x2x2) { run_sweep(3, (int[]){2, 2, 2}, 60); }
