/*
 * Partial inputs of every kind through every op whose sharding rule can keep or combine
 * Partials: each argument takes Replicate, Shard(d) or Partial(sum|avg|max|min) (every
 * combination on 1-D meshes of 3 and 4 ranks, a seeded sample on 2x2 and 2x3), and
 * full_tensor(op(inputs)) must equal op(whole inputs). Unlike the op sweep, whose Partials
 * come from redistributing a replica (the value on one rank, or the same value on all), the
 * Partial inputs here are built with from_local from per-rank values that differ on every
 * rank and reduce to the whole tensor: a rule that combines two Partials of different kinds,
 * or keeps one through an op that is not linear (or monotone) in it, gives wrong values.
 * Shapes are odd so that shards are uneven.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_helpers.h"
#include "reference.h"

typedef dt_status (*op_fn)(dt_tensor **in, dt_tensor **out);

typedef struct pc_case {
  const char *name;
  op_fn fn;
  int n_in;
  int ndim[3];
  int64_t shape[3][3];
  dt_dtype dtype[3]; /* DT_F32 unless set */
  double lo, hi;     /* value range of the whole inputs (default [-2, 2)) */
  /* In place on argument 0: where self's placement would have to change, the op is refused
   * (as PyTorch refuses it) and that refusal is what is checked. */
  bool inplace;
} pc_case;

static dt_status f_add(dt_tensor **i, dt_tensor **o) { return dt_add(i[0], i[1], o); }
static dt_status f_add_alpha(dt_tensor **i, dt_tensor **o) {
  return dt_add_ex(i[0], i[1], -1.5, o);
}
static dt_status f_sub_alpha(dt_tensor **i, dt_tensor **o) { return dt_sub_ex(i[0], i[1], 2, o); }
static dt_status f_sub_neg_alpha(dt_tensor **i, dt_tensor **o) {
  return dt_sub_ex(i[0], i[1], -0.5, o);
}
static dt_status f_add_inplace(dt_tensor **i, dt_tensor **o) {
  dt_tensor *c = NULL;
  dt_status st = dt_clone(i[0], &c);
  if (!st) st = dt_add_(c, i[1]);
  if (st) {
    dt_tensor_release(c);
    return st;
  }
  *o = c;
  return DT_OK;
}
static dt_status f_mul(dt_tensor **i, dt_tensor **o) { return dt_mul(i[0], i[1], o); }
static dt_status f_div(dt_tensor **i, dt_tensor **o) { return dt_div(i[0], i[1], o); }
static dt_status f_maximum(dt_tensor **i, dt_tensor **o) { return dt_maximum(i[0], i[1], o); }
static dt_status f_minimum(dt_tensor **i, dt_tensor **o) { return dt_minimum(i[0], i[1], o); }
static dt_status f_neg(dt_tensor **i, dt_tensor **o) { return dt_neg(i[0], o); }
static dt_status f_exp(dt_tensor **i, dt_tensor **o) { return dt_exp(i[0], o); }
static dt_status f_relu(dt_tensor **i, dt_tensor **o) { return dt_relu(i[0], o); }
static dt_status f_mul_scalar(dt_tensor **i, dt_tensor **o) { return dt_mul_scalar(i[0], -2, o); }
static dt_status f_add_scalar(dt_tensor **i, dt_tensor **o) { return dt_add_scalar(i[0], 3, o); }
static dt_status f_sub_scalar(dt_tensor **i, dt_tensor **o) { return dt_sub_scalar(i[0], 3, o); }
static dt_status f_clone(dt_tensor **i, dt_tensor **o) { return dt_clone(i[0], o); }
static dt_status f_to64(dt_tensor **i, dt_tensor **o) { return dt_to(i[0], DT_F64, o); }
static dt_status f_sum(dt_tensor **i, dt_tensor **o) { return dt_sum(i[0], o); }
static dt_status f_sum0(dt_tensor **i, dt_tensor **o) {
  return dt_sum_dims(i[0], 1, (int64_t[]){0}, false, o);
}
static dt_status f_mean(dt_tensor **i, dt_tensor **o) { return dt_mean(i[0], o); }
static dt_status f_mean1(dt_tensor **i, dt_tensor **o) {
  return dt_mean_dims(i[0], 1, (int64_t[]){1}, true, o);
}
static dt_status f_amax0(dt_tensor **i, dt_tensor **o) {
  return dt_amax(i[0], 1, (int64_t[]){0}, false, o);
}
static dt_status f_amin1(dt_tensor **i, dt_tensor **o) {
  return dt_amin(i[0], 1, (int64_t[]){1}, false, o);
}
static dt_status f_max(dt_tensor **i, dt_tensor **o) { return dt_max(i[0], o); }
static dt_status f_min(dt_tensor **i, dt_tensor **o) { return dt_min(i[0], o); }
static dt_status f_mm(dt_tensor **i, dt_tensor **o) { return dt_mm(i[0], i[1], o); }
static dt_status f_matmul(dt_tensor **i, dt_tensor **o) { return dt_matmul(i[0], i[1], o); }
static dt_status f_addmm(dt_tensor **i, dt_tensor **o) { return dt_addmm(i[0], i[1], i[2], o); }
static dt_status f_addmm_scaled(dt_tensor **i, dt_tensor **o) {
  return dt_addmm_ex(i[0], i[1], i[2], -0.5, 2, o);
}
static dt_status f_linear(dt_tensor **i, dt_tensor **o) { return dt_linear(i[0], i[1], i[2], o); }
static dt_status f_linear_nobias(dt_tensor **i, dt_tensor **o) {
  return dt_linear(i[0], i[1], NULL, o);
}
static dt_status f_scatter_add(dt_tensor **i, dt_tensor **o) {
  return dt_scatter_add(i[0], 0, i[1], i[2], o);
}
static dt_status f_cat0(dt_tensor **i, dt_tensor **o) { return dt_cat(2, i, 0, o); }
static dt_status f_stack1(dt_tensor **i, dt_tensor **o) { return dt_stack(2, i, 1, o); }
static dt_status f_transpose(dt_tensor **i, dt_tensor **o) { return dt_transpose(i[0], 0, 1, o); }
static dt_status f_view(dt_tensor **i, dt_tensor **o) {
  return dt_reshape(i[0], 1, (int64_t[]){-1}, o);
}
static dt_status f_select(dt_tensor **i, dt_tensor **o) { return dt_select(i[0], 0, 2, o); }
static dt_status f_expand(dt_tensor **i, dt_tensor **o) {
  return dt_expand(i[0], 3, (int64_t[]){3, 5, 7}, o);
}

#define S2(a, b)                                                                                   \
  { a, b }

/* Fields left out of a case are zero (dtype F32, default range). */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
static const pc_case cases[] = {
    {"add", f_add, 2, {2, 2}, {S2(5, 7), S2(5, 7)}},
    {"add broadcast", f_add, 2, {2, 1}, {S2(5, 7), {7}}},
    {"add alpha -1.5", f_add_alpha, 2, {2, 2}, {S2(5, 7), S2(1, 7)}},
    {"sub alpha 2", f_sub_alpha, 2, {2, 2}, {S2(5, 7), S2(5, 7)}},
    {"sub alpha -0.5", f_sub_neg_alpha, 2, {1, 2}, {{7}, S2(5, 7)}},
    {"add_", f_add_inplace, 2, {2, 2}, {S2(5, 7), S2(5, 7)}, .inplace = true},
    {"mul", f_mul, 2, {2, 2}, {S2(5, 7), S2(5, 7)}},
    {"div", f_div, 2, {2, 1}, {S2(5, 7), {7}}, .lo = 1, .hi = 3},
    {"maximum", f_maximum, 2, {2, 2}, {S2(5, 7), S2(5, 7)}},
    {"minimum", f_minimum, 2, {2, 1}, {S2(5, 7), {7}}},
    {"neg", f_neg, 1, {2}, {S2(5, 7)}},
    {"exp", f_exp, 1, {2}, {S2(5, 7)}},
    {"relu", f_relu, 1, {2}, {S2(5, 7)}},
    {"mul.Scalar -2", f_mul_scalar, 1, {2}, {S2(5, 7)}},
    {"add.Scalar", f_add_scalar, 1, {2}, {S2(5, 7)}},
    {"sub.Scalar", f_sub_scalar, 1, {2}, {S2(5, 7)}},
    {"clone", f_clone, 1, {2}, {S2(5, 7)}},
    {"to float64", f_to64, 1, {2}, {S2(5, 7)}},
    {"sum", f_sum, 1, {2}, {S2(5, 7)}},
    {"sum dim 0", f_sum0, 1, {2}, {S2(5, 7)}},
    {"mean", f_mean, 1, {2}, {S2(5, 7)}},
    {"mean dim 1 keepdim", f_mean1, 1, {2}, {S2(5, 7)}},
    {"amax dim 0", f_amax0, 1, {2}, {S2(5, 7)}},
    {"amin dim 1", f_amin1, 1, {2}, {S2(5, 7)}},
    {"max", f_max, 1, {2}, {S2(5, 7)}},
    {"min", f_min, 1, {2}, {S2(5, 7)}},
    {"mm", f_mm, 2, {2, 2}, {S2(5, 6), S2(6, 7)}},
    {"matmul 3d@2d", f_matmul, 2, {3, 2}, {{3, 5, 6}, S2(6, 4)}},
    {"addmm bias [7]", f_addmm, 3, {1, 2, 2}, {{7}, S2(5, 6), S2(6, 7)}},
    {"addmm bias [5,7]", f_addmm, 3, {2, 2, 2}, {S2(5, 7), S2(5, 6), S2(6, 7)}},
    {"addmm beta -0.5 alpha 2", f_addmm_scaled, 3, {1, 2, 2}, {{7}, S2(5, 6), S2(6, 7)}},
    {"linear with bias", f_linear, 3, {2, 2, 1}, {S2(5, 6), S2(7, 6), {7}}},
    {"linear 3d with bias", f_linear, 3, {3, 2, 1}, {{3, 5, 6}, S2(7, 6), {7}}},
    {"linear no bias", f_linear_nobias, 2, {2, 2}, {S2(5, 6), S2(7, 6)}},
    {"scatter_add dim 0",
     f_scatter_add,
     3,
     {2, 2, 2},
     {S2(5, 7), S2(3, 7), S2(3, 7)},
     {DT_F32, DT_I64, DT_F32},
     .lo = 0,
     .hi = 5},
    {"cat 0", f_cat0, 2, {2, 2}, {S2(5, 7), S2(3, 7)}},
    {"stack 1", f_stack1, 2, {2, 2}, {S2(5, 7), S2(5, 7)}},
    {"transpose", f_transpose, 1, {2}, {S2(5, 7)}},
    {"reshape -1", f_view, 1, {2}, {S2(5, 7)}},
    {"select", f_select, 1, {2}, {S2(5, 7)}},
    {"expand", f_expand, 1, {2}, {S2(1, 7)}},
};
#define N_CASES (sizeof cases / sizeof cases[0])

static const dt_reduce_op kinds[4] = {DT_REDUCE_SUM, DT_REDUCE_AVG, DT_REDUCE_MAX, DT_REDUCE_MIN};

/* Placement choice k for an argument of ndim dims: 0 = R, 1..ndim = S(k-1), then P(sum),
 * P(avg), P(max), P(min) for floating arguments. */
static int n_choices(const pc_case *c, int i) {
  return 1 + c->ndim[i] + (dt_dtype_is_floating(c->dtype[i]) ? 4 : 0);
}
static dt_placement choice(int k, int ndim) {
  if (k == 0) return dt_replicate();
  if (k <= ndim) return dt_shard(k - 1);
  return dt_partial(kinds[k - ndim - 1]);
}

/* A value in [-1, 1) from its coordinates (splitmix64). */
static double noise(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  uint64_t z = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull) * 0xBF58476D1CE4E5B9ull ^
               (c + 17) * 0x94D049BB133111EBull ^ (d + 101) * 0x2545F4914F6CDD1Dull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (double)(z >> 11) / (double)(1ull << 52) - 1.0;
}

/* This rank's part of the whole value v at element e of argument `arg`. Each Partial mesh
 * dim m splits the value as T(v) + e_j, where j is the rank's coordinate on m, T(v) = v / n
 * for sum and v for the others, and e_j depends on j and the element only: for sum and avg
 * the e_j sum to zero; for max they are <= 0 and 0 on one rank (which varies by element),
 * for min >= 0 alike. Because e_j does not depend on the other mesh dims' coordinates, the
 * mesh dims' reductions give v in any order. */
static double part_of(double v, const dt_placement *pl, const dt_mesh *mesh, int arg, int64_t e) {
  for (int m = 0; m < dt_mesh_ndim(mesh); m++) {
    if (pl[m].kind != DT_PARTIAL) continue;
    int n = dt_mesh_size(mesh, m), j = dt_mesh_coordinate(mesh, m);
    double mean = 0;
    for (int k = 0; k < n; k++) mean += noise((uint64_t)arg, (uint64_t)m, (uint64_t)k, (uint64_t)e);
    mean /= n;
    double u = noise((uint64_t)arg, (uint64_t)m, (uint64_t)j, (uint64_t)e);
    bool top = j == (int)((e * 7 + arg + m) % n);
    switch (pl[m].op) {
    case DT_REDUCE_SUM: v = v / n + (u - mean); break;
    case DT_REDUCE_AVG: v = v + (u - mean); break;
    case DT_REDUCE_MAX: v = top ? v : v - (fabs(u) + 0.25); break;
    default: v = top ? v : v + (fabs(u) + 0.25); break;
    }
  }
  return v;
}

/* The distributed argument whose whole value is `full`, placed `pl`: each rank's part (above)
 * sliced by the Shards and wrapped with from_local. */
static dt_status make_input(dt_mesh *mesh, dt_tensor *full, const dt_placement *pl, int arg,
                            dt_tensor **out) {
  int mesh_ndim = dt_mesh_ndim(mesh);
  int64_t n = dt_tensor_numel(full);
  double *v = ref_values(full);
  dt_tensor *part = NULL, *spread = NULL, *local = NULL;
  for (int64_t e = 0; e < n; e++) v[e] = part_of(v[e], pl, mesh, arg, e);
  dt_status st = DT_OK;
  if (dt_dtype_is_floating(dt_tensor_dtype(full))) {
    part = ref_tensor(dt_tensor_ndim(full), dt_tensor_shape(full), dt_tensor_dtype(full), v);
    if (!part) st = dt__error(DT_ERR_NOMEM, "make_input: no memory");
  } else {
    part = dt_tensor_retain(full);
  }
  free(v);
  dt_placement sliced[DT_MESH_MAX_DIMS];
  for (int m = 0; m < mesh_ndim; m++) sliced[m] = pl[m].kind == DT_PARTIAL ? dt_replicate() : pl[m];
  if (!st) st = dt_dist_distribute_tensor(mesh, part, mesh_ndim, sliced, &spread);
  if (!st) st = dt_dist_to_local(spread, &local);
  dt_dist_from_local_options opt = {.global_shape = dt_tensor_shape(full),
                                    .global_ndim = dt_tensor_ndim(full)};
  if (!st) st = dt_dist_from_local(mesh, local, mesh_ndim, pl, &opt, out);
  dt_tensor_release(part);
  dt_tensor_release(spread);
  dt_tensor_release(local);
  return st;
}

typedef struct pc_run {
  int mesh_ndim;
  int mesh_shape[2];
  int sample; /* 0: every combination; else this many, drawn with a fixed seed */
  /* Checks made with a Partial(kind) on argument i of case c (rank 0 counts). */
  long covered[N_CASES][3][4];
  _Atomic long checks;
} pc_run;

static dt_status check_one(dt_mesh *mesh, pc_run *run, size_t ci, dt_tensor **full,
                           dt_tensor *expected, dt_placement pl[3][2]) {
  const pc_case *c = &cases[ci];
  char desc[160] = "";
  for (int i = 0; i < c->n_in; i++) {
    for (int m = 0; m < run->mesh_ndim; m++) {
      char p[24];
      strncat(desc, dt_placement_format(pl[i][m], p, sizeof p), sizeof desc - strlen(desc) - 4);
      strncat(desc, m + 1 < run->mesh_ndim ? "," : (i + 1 < c->n_in ? " | " : ""),
              sizeof desc - strlen(desc) - 4);
    }
  }
  dt_tensor *dist[3] = {0}, *out = NULL, *got = NULL;
  dt_status st = DT_OK;
  for (int i = 0; i < c->n_in && !st; i++) st = make_input(mesh, full[i], pl[i], i, &dist[i]);
  if (st) {
    st = dt__error(DT_ERR_INTERNAL, "%s [%s]: making the inputs: %s", c->name, desc,
                   dt_last_error());
  }
  bool refused = false;
  if (!st && c->fn(dist, &out)) {
    refused = c->inplace && strstr(dt_last_error(), "would need its placement changed");
    if (!refused) {
      st = dt__error(DT_ERR_INTERNAL, "%s [%s]: the op failed: %s", c->name, desc, dt_last_error());
    }
  }
  if (refused) {
    /* Refused in place: self's placement is not one the op can keep. */
    st = pl[0][0].kind == DT_PARTIAL || (run->mesh_ndim > 1 && pl[0][1].kind == DT_PARTIAL)
             ? DT_OK
             : dt__error(DT_ERR_INTERNAL, "%s [%s]: refused without a Partial self", c->name, desc);
    goto done;
  }
  if (!st && dt_dist_full_tensor(out, &got))
    st = dt__error(DT_ERR_INTERNAL, "%s [%s]: full_tensor: %s", c->name, desc, dt_last_error());
  if (!st) {
    int64_t n = dt_tensor_numel(expected);
    if (dt_tensor_numel(got) != n || dt_tensor_dtype(got) != dt_tensor_dtype(expected)) {
      st = dt__error(DT_ERR_INTERNAL, "%s [%s]: result shape or dtype differs", c->name, desc);
    } else {
      double *a = ref_values(got), *b = ref_values(expected);
      for (int64_t j = 0; j < n && !st; j++) {
        if (!(fabs(a[j] - b[j]) <= 1e-4 * (1 + fabs(b[j])))) {
          char o[24];
          st = dt__error(DT_ERR_INTERNAL,
                         "%s [%s] on %dx%d: element %lld is %g, expected %g (output placed %s)",
                         c->name, desc, run->mesh_shape[0],
                         run->mesh_ndim > 1 ? run->mesh_shape[1] : 1, (long long)j, a[j], b[j],
                         dt_placement_format(dt_dist_placements(out)[0], o, sizeof o));
        }
      }
      free(a);
      free(b);
    }
  }
done:
  for (int i = 0; i < c->n_in; i++) dt_tensor_release(dist[i]);
  dt_tensor_release(out);
  dt_tensor_release(got);
  if (!st && dt_comm_rank(dt_mesh_world(mesh)) == 0) {
    run->checks++;
    for (int i = 0; i < c->n_in; i++) {
      for (int m = 0; m < run->mesh_ndim; m++) {
        if (pl[i][m].kind != DT_PARTIAL) continue;
        for (int k = 0; k < 4; k++) run->covered[ci][i][k] += pl[i][m].op == kinds[k];
      }
    }
  }
  return st;
}

static dt_status run_case(dt_mesh *mesh, pc_run *run, size_t ci) {
  const pc_case *c = &cases[ci];
  dt_tensor *full[3] = {0}, *expected = NULL;
  for (int i = 0; i < c->n_in; i++) {
    double lo = c->lo, hi = c->hi;
    if (lo == 0 && hi == 0) lo = -2, hi = 2;
    full[i] = ref_random(c->ndim[i], c->shape[i], c->dtype[i], lo, hi, 300 + ci * 3 + (size_t)i);
  }
  dt_status st = c->fn(full, &expected);
  if (st) st = dt__error(DT_ERR_INTERNAL, "%s: the whole-tensor op failed", c->name);
  int per_arg[3], total = 1;
  for (int i = 0; i < c->n_in; i++) {
    per_arg[i] = 1;
    for (int m = 0; m < run->mesh_ndim; m++) per_arg[i] *= n_choices(c, i);
    total *= per_arg[i];
  }
  int count = run->sample ? run->sample : total;
  uint64_t state = 0x5eed + ci;
  for (int t = 0; t < count && !st; t++) {
    int combo = t;
    if (run->sample) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      combo = (int)((state >> 33) % (uint64_t)total);
    }
    dt_placement pl[3][2];
    for (int i = 0; i < c->n_in; i++) {
      for (int m = 0; m < run->mesh_ndim; m++) {
        pl[i][m] = choice(combo % n_choices(c, i), c->ndim[i]);
        combo /= n_choices(c, i);
      }
    }
    st = check_one(mesh, run, ci, full, expected, pl);
  }
  for (int i = 0; i < c->n_in; i++) dt_tensor_release(full[i]);
  dt_tensor_release(expected);
  return st;
}

static dt_status pc_rank(dt_comm *world, void *arg) {
  pc_run *run = arg;
  dt_mesh *mesh = NULL;
  dt_status st = dt_mesh_create(world, run->mesh_ndim, run->mesh_shape, NULL, &mesh);
  for (size_t ci = 0; ci < N_CASES && !st; ci++) st = run_case(mesh, run, ci);
  dt_mesh_destroy(mesh);
  return st;
}

static void run_mesh(int ndim, int a, int b, int sample) {
  pc_run *run = calloc(1, sizeof *run);
  cr_assert_not_null(run);
  run->mesh_ndim = ndim;
  run->mesh_shape[0] = a;
  run->mesh_shape[1] = b;
  run->sample = sample;
  SPAWN_OK(ndim == 1 ? a : a * b, pc_rank, run);
  fprintf(stderr, "mesh %dx%d: %ld placement combinations checked\n", a, ndim > 1 ? b : 1,
          (long)run->checks);
  /* Every Partial kind reached every floating argument of every case. */
  for (size_t ci = 0; ci < N_CASES; ci++) {
    for (int i = 0; i < cases[ci].n_in; i++) {
      if (!dt_dtype_is_floating(cases[ci].dtype[i])) continue;
      for (int k = 0; k < 4; k++) {
        cr_expect_gt(run->covered[ci][i][k], 0, "%s: argument %d never Partial(%s) on %dx%d",
                     cases[ci].name, i, dt_reduce_op_name(kinds[k]), a, b);
      }
    }
  }
  free(run);
}

Test(partial_combinations, mesh_3) { run_mesh(1, 3, 1, 0); }
Test(partial_combinations, mesh_4) { run_mesh(1, 4, 1, 0); }
Test(partial_combinations, mesh_2x2) { run_mesh(2, 2, 2, 160); }
Test(partial_combinations, mesh_2x3) { run_mesh(2, 2, 3, 160); }

/* The case of issue 22.1 as reported: addmm on 3 ranks with self Partial(avg) and the factors
 * Shard(1) x Shard(0) (whose product is a Partial(sum)): PyTorch's values, not a Partial(avg)
 * of the sum. */
static dt_status addmm_avg_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  RANK_OK(mesh_1d(world, &mesh));
  dt_tensor *full[3] = {ref_random(1, (int64_t[]){7}, DT_F32, -2, 2, 1),
                        ref_random(2, (int64_t[]){5, 6}, DT_F32, -2, 2, 2),
                        ref_random(2, (int64_t[]){6, 7}, DT_F32, -2, 2, 3)};
  dt_tensor *expected = NULL;
  RANK_OK(dt_addmm(full[0], full[1], full[2], &expected));
  dt_placement pl[3][2] = {{dt_partial(DT_REDUCE_AVG)}, {dt_shard(1)}, {dt_shard(0)}};
  pc_run run = {.mesh_ndim = 1, .mesh_shape = {3, 1}};
  dt_status st = check_one(mesh, &run, 28, full, expected, pl);
  for (int i = 0; i < 3; i++) dt_tensor_release(full[i]);
  dt_tensor_release(expected);
  dt_mesh_destroy(mesh);
  return st;
}

Test(partial_combinations, addmm_avg_bias_with_contraction) {
  cr_assert_str_eq(cases[28].name, "addmm bias [7]");
  SPAWN_OK(3, addmm_avg_rank, NULL);
}
