/*
 * The op sweep: every op with sample inputs, for every combination of input placements
 * (Replicate, Shard(d) for each dim, Partial(sum) for floating inputs) on meshes of 1, 2,
 * 3, 4 ranks and 2x2, 2x3: full_tensor(op(distributed inputs)) must equal op(full inputs).
 * Shapes are odd so shards are uneven. Ranks are threads (dt_comm_spawn).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sweep_cases.h"

typedef struct sweep {
  int mesh_ndim;
  int mesh_shape[3];
  int max_combos; /* per case: cap the combinations tried (0: all) */
} sweep;

/* Placement choice k for a tensor of ndim dims: 0 = R, 1..ndim = S(k-1), ndim+1 = P(sum). */
static dt_placement choice(int k, int ndim) {
  if (k == 0) return dt_replicate();
  if (k <= ndim) return dt_shard(k - 1);
  return dt_partial(DT_REDUCE_SUM);
}

static dt_status fail(const char *what, const op_case *c, const char *combo) {
  char msg[512];
  snprintf(msg, sizeof msg, "%s", dt_last_error());
  fprintf(stderr, "sweep: %s: %s [%s]: %s\n", c->name, what, combo, msg);
  return DT_ERR_INTERNAL;
}

static _Atomic long checks;

static dt_status run_case(dt_mesh *mesh, const sweep *sw, const op_case *c, uint64_t seed) {
  dt_tensor *full[3] = {0};
  dt_status st = DT_OK;
  for (int i = 0; i < c->n_in; i++) {
    dt_dtype dt = c->dtype[i];
    double lo = c->lo, hi = c->hi;
    if (lo == 0 && hi == 0) lo = -2, hi = 2;
    full[i] = ref_random(c->ndim[i], c->shape[i], dt, lo, hi, seed + (uint64_t)i);
  }
  dt_tensor *expected = NULL;
  if (case_run(c, full, &expected)) {
    st = fail("reference failed", c, "local");
    goto done;
  }
  /* Enumerate combinations: per input, per mesh dim, a choice. */
  int choices[3], total = 1;
  for (int i = 0; i < c->n_in; i++) {
    bool floating = dt_dtype_is_floating(c->dtype[i]) && !(i == 0 && c->no_partial);
    choices[i] = 1 + c->ndim[i] + (floating ? 1 : 0);
    for (int m = 0; m < sw->mesh_ndim; m++) total *= choices[i];
  }
  int step = 1;
  if (sw->max_combos && total > sw->max_combos) step = total / sw->max_combos;
  for (int combo = 0; combo < total; combo += step) {
    checks++;
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
    dt_tensor *dist[3] = {0}, *out = NULL, *gathered = NULL;
    for (int i = 0; i < c->n_in && !st; i++) {
      dt_placement rep[3] = {dt_replicate(), dt_replicate(), dt_replicate()};
      dt_tensor *r = NULL;
      st = dt_dist_distribute_tensor(mesh, full[i], sw->mesh_ndim, rep, &r);
      if (!st) st = dt_dist_redistribute(r, sw->mesh_ndim, pl[i], &dist[i]);
      dt_tensor_release(r);
      if (st) st = fail("making the input", c, desc);
    }
    /* A local-only op (no sharding rule) refuses any distributed argument, naming itself. */
    if (!st && dt__op_has_trait(c->op, DT_TRAIT_LOCAL_ONLY)) {
      dt_status refused = case_run(c, dist, &out);
      if (refused != DT_ERR_UNSUPPORTED || !strstr(dt_last_error(), dt__op_table[c->op].name) ||
          !strstr(dt_last_error(), "runs on local tensors only"))
        st = fail("a local-only op was not refused", c, desc);
      for (int i = 0; i < c->n_in; i++) dt_tensor_release(dist[i]);
      dt_tensor_release(out);
      if (st) break;
      continue;
    }
    if (!st && case_run(c, dist, &out)) st = fail("distributed op failed", c, desc);
    if (!st && dt_dist_full_tensor(out, &gathered)) st = fail("full_tensor failed", c, desc);
    if (!st) {
      int64_t n = dt_tensor_numel(expected);
      bool same_shape = dt_tensor_ndim(gathered) == dt_tensor_ndim(expected) &&
                        memcmp(dt_tensor_shape(gathered), dt_tensor_shape(expected),
                               sizeof(int64_t) * (size_t)dt_tensor_ndim(expected)) == 0 &&
                        dt_tensor_dtype(gathered) == dt_tensor_dtype(expected);
      if (!same_shape) {
        fprintf(stderr, "sweep: %s [%s]: result shape or dtype differs\n", c->name, desc);
        st = DT_ERR_INTERNAL;
      } else {
        double *a = ref_values(gathered), *b = ref_values(expected);
        for (int64_t j = 0; j < n; j++) {
          double tol = c->exact ? 0 : 1e-4 + 1e-4 * fabs(b[j]);
          if (!(fabs(a[j] - b[j]) <= tol) && !(isnan(a[j]) && isnan(b[j]))) {
            fprintf(stderr, "sweep: %s [%s] mesh %lldx%lld: element %lld is %g, expected %g\n",
                    c->name, desc, (long long)sw->mesh_shape[0],
                    (long long)(sw->mesh_ndim > 1 ? sw->mesh_shape[1] : 1), (long long)j, a[j],
                    b[j]);
            st = DT_ERR_INTERNAL;
            break;
          }
        }
        free(a);
        free(b);
      }
    }
    for (int i = 0; i < c->n_in; i++) dt_tensor_release(dist[i]);
    dt_tensor_release(out);
    dt_tensor_release(gathered);
    if (st) break;
  }
done:
  for (int i = 0; i < c->n_in; i++) dt_tensor_release(full[i]);
  dt_tensor_release(expected);
  return st;
}

static dt_status sweep_rank(dt_comm *world, void *arg) {
  const sweep *sw = arg;
  dt_mesh *mesh = NULL;
  dt_status st = dt_mesh_create(world, sw->mesh_ndim, sw->mesh_shape, NULL, &mesh);
  if (st) return st;
  for (size_t i = 0; i < N_CASES && !st; i++) st = run_case(mesh, sw, &cases[i], 100 + i);
  dt_mesh_destroy(mesh);
  return st;
}

/* DT_SWEEP_MAX_COMBOS caps the combinations per case (a spread sample): the sanitizer build
 * sets it for the meshes of 6 and 8 ranks (tests/CMakeLists.txt), which take ~10x longer
 * there; the Release build checks them all. */
static int capped(int max_combos) {
  const char *env = getenv("DT_SWEEP_MAX_COMBOS");
  int cap = env ? atoi(env) : 0;
  return cap > 0 && (max_combos == 0 || max_combos > cap) ? cap : max_combos;
}

static void run_sweep(int ndim, int64_t a, int64_t b, int max_combos) {
  sweep sw = {ndim, {a, b}, capped(max_combos)};
  int world = (int)(ndim == 1 ? a : a * b);
  dt_status st = dt_comm_spawn(world, sweep_rank, &sw);
  fprintf(stderr, "mesh %lldx%lld: %ld placement combinations checked\n", (long long)a,
          (long long)b, (long)checks);
  cr_assert_gt(checks, 0);
  cr_assert_eq(st, DT_OK, "sweep on mesh %lldx%lld failed: %s", (long long)a, (long long)b,
               dt_last_error());
}

Test(dist_sweep, mesh_1) { run_sweep(1, 1, 1, 0); }
Test(dist_sweep, mesh_2) { run_sweep(1, 2, 1, 0); }
Test(dist_sweep, mesh_3) { run_sweep(1, 3, 1, 0); }
Test(dist_sweep, mesh_4) { run_sweep(1, 4, 1, 0); }
Test(dist_sweep, mesh_2x2) { run_sweep(2, 2, 2, 0); }
Test(dist_sweep, mesh_2x3) { run_sweep(2, 2, 3, 0); }
Test(dist_sweep, mesh_2x2x2) {
  /* A 3-D mesh: a spread sample of up to 600 placement combinations per op. */
  sweep sw = {3, {2, 2, 2}, capped(600)};
  dt_status st = dt_comm_spawn(8, sweep_rank, &sw);
  fprintf(stderr, "mesh 2x2x2: %ld placement combinations checked\n", (long)checks);
  cr_assert_eq(st, DT_OK, "sweep on mesh 2x2x2 failed: %s", dt_last_error());
}

/* ---- Chains: a small model-like sequence of ops, with random placements at every input ---- */

static dt_placement random_placement(uint64_t *state, int ndim, bool partial_ok) {
  *state = *state * 6364136223846793005ull + 1442695040888963407ull;
  int k = (int)((*state >> 33) % (uint64_t)(ndim + (partial_ok ? 2 : 1)));
  return choice(k, ndim);
}

/* y = sum_dim0(softmax(relu(x + b) @ w, dim=1)) * 3, then layer_norm-free mean. */
static dt_status chain(dt_tensor *x, dt_tensor *b, dt_tensor *w, dt_tensor **out) {
  dt_tensor *t1 = NULL, *t2 = NULL, *t3 = NULL, *t4 = NULL, *t5 = NULL;
  dt_status st = dt_add(x, b, &t1);
  if (!st) st = dt_relu(t1, &t2);
  if (!st) st = dt_mm(t2, w, &t3);
  if (!st) st = dt_softmax(t3, 1, &t4);
  if (!st) st = dt_sum_dims(t4, 1, (int64_t[]){0}, false, &t5);
  if (!st) st = dt_mul_scalar(t5, 3, out);
  dt_tensor *rel[] = {t1, t2, t3, t4, t5};
  for (int i = 0; i < 5; i++) dt_tensor_release(rel[i]);
  return st;
}

static dt_status chain_rank(dt_comm *world, void *arg) {
  const sweep *sw = arg;
  dt_mesh *mesh = NULL;
  dt_status st = dt_mesh_create(world, sw->mesh_ndim, sw->mesh_shape, NULL, &mesh);
  if (st) return st;
  dt_tensor *x = ref_random(2, (int64_t[]){7, 5}, DT_F32, -1, 1, 1);
  dt_tensor *b = ref_random(1, (int64_t[]){5}, DT_F32, -1, 1, 2);
  dt_tensor *w = ref_random(2, (int64_t[]){5, 6}, DT_F32, -1, 1, 3);
  dt_tensor *expected = NULL;
  st = chain(x, b, w, &expected);
  uint64_t state = 12345;
  for (int trial = 0; trial < 60 && !st; trial++) {
    dt_tensor *full[3] = {x, b, w}, *dist[3] = {0}, *out = NULL, *got = NULL;
    char desc[96] = "";
    for (int i = 0; i < 3 && !st; i++) {
      dt_placement p[2], rep[2] = {dt_replicate(), dt_replicate()};
      for (int m = 0; m < sw->mesh_ndim; m++) {
        p[m] = random_placement(&state, dt_tensor_ndim(full[i]), true);
        char s[16];
        strncat(desc, dt_placement_format(p[m], s, sizeof s), sizeof desc - strlen(desc) - 2);
        strncat(desc, " ", sizeof desc - strlen(desc) - 1);
      }
      dt_tensor *r = NULL;
      st = dt_dist_distribute_tensor(mesh, full[i], sw->mesh_ndim, rep, &r);
      if (!st) st = dt_dist_redistribute(r, sw->mesh_ndim, p, &dist[i]);
      dt_tensor_release(r);
    }
    if (!st) st = chain(dist[0], dist[1], dist[2], &out);
    if (!st) st = dt_dist_full_tensor(out, &got);
    if (!st) {
      double *g = ref_values(got), *e = ref_values(expected);
      for (int64_t j = 0; j < dt_tensor_numel(expected); j++) {
        if (fabs(g[j] - e[j]) > 1e-4 * (1 + fabs(e[j]))) {
          fprintf(stderr, "chain [%s]: element %lld is %g, expected %g\n", desc, (long long)j, g[j],
                  e[j]);
          st = DT_ERR_INTERNAL;
          break;
        }
      }
      free(g);
      free(e);
    } else {
      fprintf(stderr, "chain [%s] failed: %s\n", desc, dt_last_error());
    }
    for (int i = 0; i < 3; i++) dt_tensor_release(dist[i]);
    dt_tensor_release(out);
    dt_tensor_release(got);
  }
  dt_tensor *rel[] = {x, b, w, expected};
  for (int i = 0; i < 4; i++) dt_tensor_release(rel[i]);
  dt_mesh_destroy(mesh);
  return st;
}

static void run_chains(int ndim, int a, int b) {
  sweep sw = {ndim, {a, b}, 0};
  cr_assert_eq(dt_comm_spawn(ndim == 1 ? a : a * b, chain_rank, &sw), DT_OK, "%s", dt_last_error());
}

Test(dist_chain, mesh_3) { run_chains(1, 3, 1); }
Test(dist_chain, mesh_4) { run_chains(1, 4, 1); }
Test(dist_chain, mesh_2x3) { run_chains(2, 2, 3); }
