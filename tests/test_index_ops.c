/*
 * The ops the decoder models compose (issue 27): sin, cos, arange (local and distributed),
 * tril/triu, cumsum, topk, index_select and gather, against naive loops; their gradients
 * against finite differences; errors; and, on 2-4 ranks with uneven shards, the distributed
 * forms against the whole tensor (the op sweep, tests/test_dist_sweep.c, covers every
 * placement of the forwards; here the shard-specific paths and the backward).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "comm_helpers.h"
#include "dtensor/dtensor.h"
#include "gradcheck.h"
#include "reference.h"

static dt_tensor *ids(int ndim, const int64_t *shape, const int64_t *v) {
  dt_tensor *t = NULL;
  OK(dt_from_data(v, ndim, shape, DT_I64, &t));
  return t;
}

Test(sin_cos, equal_libm_at_small_and_large_arguments) {
  double xs[] = {0, 1e-3, -0.5, 3.14159, 100.25, -2047.5, 123456.75, 1e6 + 0.125};
  dt_tensor *x64 = ref_tensor(1, (int64_t[]){8}, DT_F64, xs), *x32 = NULL, *s = NULL, *c = NULL;
  OK(dt_to(x64, DT_F32, &x32));
  for (int f32 = 0; f32 < 2; f32++) {
    OK(dt_sin(f32 ? x32 : x64, &s));
    OK(dt_cos(f32 ? x32 : x64, &c));
    cr_assert_eq(dt_tensor_dtype(s), f32 ? DT_F32 : DT_F64);
    double *sv = ref_values(s), *cv = ref_values(c);
    for (int i = 0; i < 8; i++) {
      double x = f32 ? (double)(float)xs[i] : xs[i];
      double tol = f32 ? 1e-6 : 1e-15;
      cr_assert(fabs(sv[i] - sin(x)) <= tol, "sin(%g) = %.9g, expected %.9g", x, sv[i], sin(x));
      cr_assert(fabs(cv[i] - cos(x)) <= tol, "cos(%g) = %.9g, expected %.9g", x, cv[i], cos(x));
    }
    free(sv), free(cv);
    dt_tensor_release(s), dt_tensor_release(c);
  }
  dt_tensor *i = NULL;
  OK(dt_arange(0, 3, 1, DT_I64, &i));
  cr_assert_eq(dt_sin(i, &s), DT_ERR_DTYPE); /* integers: convert first */
  cr_assert_null(s);
  dt_tensor_release(i), dt_tensor_release(x64), dt_tensor_release(x32);
}

/* tril/triu of a non-contiguous [2, 5, 4] for diagonals -6..6, float and int64. */
Test(triangle, equals_naive_loops) {
  dt_tensor *base = ref_random(3, (int64_t[]){2, 4, 5}, DT_F32, -2, 2, 1), *x = NULL;
  OK(dt_transpose(base, 1, 2, &x));
  dt_tensor *xi = NULL;
  OK(dt_to(x, DT_I64, &xi));
  double *xv = ref_values(x);
  for (int kind = 0; kind < 4; kind++) {
    bool upper = kind & 1;
    dt_tensor *in = kind < 2 ? x : xi;
    for (int64_t diag = -6; diag <= 6; diag++) {
      dt_tensor *y = NULL;
      OK(upper ? dt_triu(in, diag, &y) : dt_tril(in, diag, &y));
      cr_assert_eq(dt_tensor_dtype(y), dt_tensor_dtype(in));
      double *yv = ref_values(y);
      for (int b = 0; b < 2; b++)
        for (int r = 0; r < 5; r++)
          for (int c = 0; c < 4; c++) {
            int e = (b * 5 + r) * 4 + c;
            bool keep = upper ? c - r >= diag : c - r <= diag;
            double want = keep ? (kind < 2 ? xv[e] : trunc(xv[e])) : 0;
            cr_assert_eq(yv[e], want, "%s diag %lld [%d,%d,%d]: %g, expected %g",
                         upper ? "triu" : "tril", (long long)diag, b, r, c, yv[e], want);
          }
      free(yv);
      dt_tensor_release(y);
    }
  }
  dt_tensor *v = NULL, *y = NULL;
  OK(dt_arange(0, 4, 1, DT_F32, &v));
  cr_assert_eq(dt_tril(v, 0, &y), DT_ERR_SHAPE);
  cr_assert(strstr(dt_last_error(), "tril") && strstr(dt_last_error(), "2 dims"), "%s",
            dt_last_error());
  free(xv);
  dt_tensor_release(v), dt_tensor_release(base), dt_tensor_release(x), dt_tensor_release(xi);
}

Test(cumsum, equals_naive_loops_on_every_dim) {
  dt_tensor *base = ref_random(3, (int64_t[]){3, 4, 5}, DT_F64, -2, 2, 2), *x = NULL;
  OK(dt_transpose(base, 0, 2, &x)); /* [5, 4, 3], not contiguous */
  double *xv = ref_values(x);
  int64_t shape[3] = {5, 4, 3};
  for (int dim = -1; dim < 3; dim++) {
    int d = dim < 0 ? 2 : dim;
    dt_tensor *y = NULL;
    OK(dt_cumsum(x, dim, &y));
    double *yv = ref_values(y);
    for (int64_t e = 0; e < 60; e++) {
      int64_t idx[3];
      ref_unravel(e, 3, shape, idx);
      double want = 0;
      int64_t j[3] = {idx[0], idx[1], idx[2]};
      for (j[d] = 0; j[d] <= idx[d]; j[d]++) want += xv[(j[0] * 4 + j[1]) * 3 + j[2]];
      cr_assert_float_eq(yv[e], want, 1e-12, "dim %d element %lld", dim, (long long)e);
    }
    free(yv);
    dt_tensor_release(y);
  }
  /* Integers and bool sum in int64. */
  int64_t raw[] = {1, 0, 1, 1, 0, 1};
  dt_tensor *b = NULL, *bi = ids(1, (int64_t[]){6}, raw), *y = NULL;
  OK(dt_to(bi, DT_BOOL, &b));
  OK(dt_cumsum(b, 0, &y));
  cr_assert_eq(dt_tensor_dtype(y), DT_I64);
  double *yv = ref_values(y), want[] = {1, 1, 2, 3, 3, 4};
  for (int i = 0; i < 6; i++) cr_assert_eq(yv[i], want[i]);
  free(yv), free(xv);
  dt_tensor_release(y), dt_tensor_release(b), dt_tensor_release(bi);
  cr_assert_eq(dt_cumsum(x, 3, &y), DT_ERR_INVALID);
  dt_tensor_release(base), dt_tensor_release(x);
}

Test(topk, sorted_ties_by_index_nan_largest) {
  double v[] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, NAN, 5};
  dt_tensor *x = ref_tensor(2, (int64_t[]){2, 6}, DT_F64, v), *val = NULL, *idx = NULL;
  OK(dt_topk(x, 3, 1, true, &val, &idx));
  double *vv = ref_values(val), *iv = ref_values(idx);
  cr_assert_eq(dt_tensor_dtype(idx), DT_I64);
  double w0[] = {9, 5, 4}, i0[] = {5, 4, 2},
         i1[] = {4, 1, 2}; /* row 1: NaN, 6, then 5 @2 before 5 @5 */
  for (int j = 0; j < 3; j++) {
    cr_assert_eq(vv[j], w0[j]);
    cr_assert_eq(iv[j], i0[j]);
  }
  cr_assert(isnan(vv[3]) && iv[3] == 4);
  cr_assert(vv[4] == 6 && iv[4] == i1[1] && vv[5] == 5 && iv[5] == i1[2]);
  free(vv), free(iv);
  dt_tensor_release(val), dt_tensor_release(idx);
  /* Smallest along dim 0, a k of 0, int64 values, errors. */
  OK(dt_topk(x, 1, 0, false, &val, &idx));
  vv = ref_values(val), iv = ref_values(idx);
  double ws[] = {2, 1, 4, 1, 5, 5}, is[] = {1, 0, 0, 0, 0, 1};
  for (int j = 0; j < 6; j++) cr_assert(vv[j] == ws[j] && iv[j] == is[j], "column %d", j);
  free(vv), free(iv);
  dt_tensor_release(val), dt_tensor_release(idx);
  OK(dt_topk(x, 0, 1, true, &val, &idx));
  cr_assert_eq(dt_tensor_size(val, 1), 0);
  dt_tensor_release(val), dt_tensor_release(idx);
  cr_assert_eq(dt_topk(x, 7, 1, true, &val, &idx), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "k = 7"), "%s", dt_last_error());
  cr_assert_null(val);
  cr_assert_eq(dt_topk(x, 1, 1, true, NULL, &idx), DT_ERR_INVALID);
  dt_tensor_release(x);
}

/* A random [7, 50] int64 row set: topk of each row equals sorting by (value desc, index asc). */
Test(topk, equals_a_full_sort) {
  dt_tensor *x = ref_random(2, (int64_t[]){7, 50}, DT_I64, -5, 5, 3), *val = NULL, *idx = NULL;
  OK(dt_topk(x, 10, -1, true, &val, &idx));
  double *xv = ref_values(x), *vv = ref_values(val), *iv = ref_values(idx);
  for (int r = 0; r < 7; r++) {
    bool used[50] = {0};
    for (int j = 0; j < 10; j++) {
      int best = -1;
      for (int c = 0; c < 50; c++)
        if (!used[c] && (best < 0 || xv[r * 50 + c] > xv[r * 50 + best])) best = c;
      used[best] = true;
      cr_assert(vv[r * 10 + j] == xv[r * 50 + best] && iv[r * 10 + j] == best, "row %d rank %d", r,
                j);
    }
  }
  free(xv), free(vv), free(iv);
  dt_tensor_release(x), dt_tensor_release(val), dt_tensor_release(idx);
}

Test(index_select, equals_naive_loops_and_checks_indices) {
  dt_tensor *x = ref_random(3, (int64_t[]){4, 5, 3}, DT_F32, -2, 2, 4), *y = NULL;
  double *xv = ref_values(x);
  int64_t pick[] = {4, 0, 4, 2, 1, 3, 0};
  dt_tensor *index = ids(1, (int64_t[]){7}, pick);
  OK(dt_index_select(x, -2, index, &y));
  cr_assert(dt_tensor_size(y, 1) == 7 && dt_tensor_size(y, 0) == 4);
  double *yv = ref_values(y);
  for (int a = 0; a < 4; a++)
    for (int i = 0; i < 7; i++)
      for (int c = 0; c < 3; c++)
        cr_assert_eq(yv[(a * 7 + i) * 3 + c], xv[(a * 5 + pick[i]) * 3 + c]);
  free(yv);
  dt_tensor_release(y);
  int64_t bad[] = {1, 5};
  dt_tensor *bi = ids(1, (int64_t[]){2}, bad), *two = ids(2, (int64_t[]){1, 2}, bad);
  cr_assert_eq(dt_index_select(x, 1, bi, &y), DT_ERR_INDEX);
  cr_assert(strstr(dt_last_error(), "index 5"), "%s", dt_last_error());
  cr_assert_eq(dt_index_select(x, 1, two, &y), DT_ERR_SHAPE);
  cr_assert_eq(dt_index_select(x, 1, x, &y), DT_ERR_DTYPE);
  cr_assert_eq(dt_index_select(x, 1, NULL, &y), DT_ERR_INVALID);
  cr_assert_null(y);
  free(xv);
  dt_tensor_release(x), dt_tensor_release(index), dt_tensor_release(bi), dt_tensor_release(two);
}

Test(gather, equals_naive_loops_and_checks_indices) {
  dt_tensor *x = ref_random(2, (int64_t[]){5, 4}, DT_F64, -2, 2, 5), *y = NULL;
  double *xv = ref_values(x);
  int64_t pick[] = {4, 0, 3, 1, 2, 2, 0, 4, 1, 1, 3, 0};
  dt_tensor *index = ids(2, (int64_t[]){3, 4}, pick);
  OK(dt_gather(x, 0, index, &y));
  double *yv = ref_values(y);
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 4; j++) cr_assert_eq(yv[i * 4 + j], xv[pick[i * 4 + j] * 4 + j]);
  free(yv);
  dt_tensor_release(y);
  /* Along dim 1 with an index narrower than self. */
  int64_t cols[] = {3, 0, 1, 1, 2, 3, 0, 0, 2, 1};
  dt_tensor *ci = ids(2, (int64_t[]){5, 2}, cols);
  OK(dt_gather(x, 1, ci, &y));
  yv = ref_values(y);
  for (int i = 0; i < 5; i++)
    for (int j = 0; j < 2; j++) cr_assert_eq(yv[i * 2 + j], xv[i * 4 + cols[i * 2 + j]]);
  free(yv);
  dt_tensor_release(y);
  dt_tensor *wide = ids(2, (int64_t[]){2, 5}, cols);
  cr_assert_eq(dt_gather(x, 0, wide, &y), DT_ERR_SHAPE);
  cr_assert(strstr(dt_last_error(), "larger than self"), "%s", dt_last_error());
  int64_t big[] = {0, 0, 0, 5};
  dt_tensor *bi = ids(2, (int64_t[]){1, 4}, big);
  cr_assert_eq(dt_gather(x, 0, bi, &y), DT_ERR_INDEX);
  cr_assert_null(y);
  free(xv);
  dt_tensor_release(x), dt_tensor_release(index), dt_tensor_release(ci), dt_tensor_release(wide);
  dt_tensor_release(bi);
}

/* ---- Gradients against finite differences ------------------------------------------------ */

static dt_status g_sin(dt_tensor **x, dt_tensor **o) { return dt_sin(x[0], o); }
static dt_status g_cos(dt_tensor **x, dt_tensor **o) { return dt_cos(x[0], o); }
static dt_status g_tril(dt_tensor **x, dt_tensor **o) { return dt_tril(x[0], 1, o); }
static dt_status g_triu(dt_tensor **x, dt_tensor **o) { return dt_triu(x[0], -1, o); }
static dt_status g_cumsum(dt_tensor **x, dt_tensor **o) { return dt_cumsum(x[0], 1, o); }
static dt_status g_topk(dt_tensor **x, dt_tensor **o) {
  dt_tensor *i = NULL;
  dt_status st = dt_topk(x[0], 2, 0, true, o, &i);
  dt_tensor_release(i);
  return st;
}
static dt_status g_index_select(dt_tensor **x, dt_tensor **o) {
  dt_tensor *i = ids(1, (int64_t[]){4}, (int64_t[]){2, 0, 2, 4});
  dt_status st = dt_index_select(x[0], 1, i, o);
  dt_tensor_release(i);
  return st;
}
static dt_status g_gather(dt_tensor **x, dt_tensor **o) {
  dt_tensor *i = ids(2, (int64_t[]){2, 5}, (int64_t[]){0, 2, 2, 1, 0, 1, 1, 0, 2, 2});
  dt_status st = dt_gather(x[0], 0, i, o);
  dt_tensor_release(i);
  return st;
}

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
static const grad_case grad_cases[] = {
    {"sin", g_sin, 1, {2}, {{3, 5}}, {NONCONTIG}},
    {"cos", g_cos, 1, {1}, {{7}}, {NONCONTIG}},
    {"tril 1", g_tril, 1, {3}, {{2, 4, 5}}, {NONCONTIG}},
    {"triu -1", g_triu, 1, {2}, {{5, 3}}, {PLAIN}},
    {"cumsum", g_cumsum, 1, {3}, {{2, 5, 3}}, {NONCONTIG}},
    {"topk", g_topk, 1, {2}, {{5, 3}}, {NONCONTIG}},
    {"index_select repeated", g_index_select, 1, {2}, {{3, 5}}, {NONCONTIG}},
    {"gather", g_gather, 1, {2}, {{3, 5}}, {PLAIN}},
};

Test(index_ops, gradcheck) {
  for (size_t i = 0; i < sizeof grad_cases / sizeof *grad_cases; i++) grad_check(&grad_cases[i]);
}

/* ---- Distributed ------------------------------------------------------------------------- */

static dt_status distribute(dt_mesh *mesh, dt_tensor *full, dt_placement p, dt_tensor **out) {
  return dt_dist_distribute_tensor(mesh, full, 1, &p, out);
}

/* full_tensor(t) equals want element for element (within tol). */
static dt_status same(dt_tensor *t, dt_tensor *want, double tol, const char *what) {
  dt_tensor *g = NULL;
  RANK_OK(dt_dist_full_tensor(t, &g));
  int64_t n = dt_tensor_numel(want);
  RANK_CHECK(dt_tensor_numel(g) == n, "%s: %lld elements, expected %lld", what,
             (long long)dt_tensor_numel(g), (long long)n);
  double *a = ref_values(g), *b = ref_values(want);
  dt_tensor_release(g);
  for (int64_t i = 0; i < n; i++) {
    if (!(fabs(a[i] - b[i]) <= tol)) {
      double x = a[i], y = b[i];
      free(a), free(b);
      RANK_CHECK(false, "%s: element %lld is %g, expected %g", what, (long long)i, x, y);
    }
  }
  free(a), free(b);
  return DT_OK;
}

static dt_status arange_rank(dt_comm *world, void *arg) {
  (void)arg;
  int n = dt_comm_size(world);
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){n}, NULL, &mesh));
  dt_tensor *whole = NULL, *d = NULL;
  /* 11 values on n ranks: uneven shards, each computed alone. */
  RANK_OK(dt_arange(-3, 2.5, 0.5, DT_F32, &whole));
  RANK_OK(dt_dist_arange(mesh, -3, 2.5, 0.5, DT_F32, 1, (dt_placement[]){dt_shard(0)}, &d));
  dt_status st = same(d, whole, 0, "arange S(0)");
  int64_t chunk = (11 + n - 1) / n, mine = 11 - chunk * dt_comm_rank(world);
  mine = mine < 0 ? 0 : mine > chunk ? chunk : mine;
  if (!st && dt_tensor_numel(d) != mine) st = dt__error(DT_ERR_INTERNAL, "shard size");
  dt_tensor_release(d), dt_tensor_release(whole);
  dt_mesh_destroy(mesh);
  return st;
}

Test(dist_index_ops, arange_shards_equal_the_whole) {
  for (int n = 2; n <= 4; n++)
    cr_assert_eq(dt_comm_spawn(n, arange_rank, NULL), DT_OK, "%s", dt_last_error());
}

/* tril on a [7, 9] sharded by rows and by columns: each shard keeps its part of the global
 * triangle with no communication. */
static dt_status triangle_rank(dt_comm *world, void *arg) {
  (void)arg;
  int n = dt_comm_size(world);
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){n}, NULL, &mesh));
  dt_tensor *x = ref_random(2, (int64_t[]){7, 9}, DT_F32, -1, 1, 9);
  dt_status st = DT_OK;
  for (int dim = 0; dim < 2 && !st; dim++)
    for (int64_t diag = -3; diag <= 3 && !st; diag += 2) {
      dt_tensor *d = NULL, *y = NULL, *want = NULL;
      RANK_OK(distribute(mesh, x, dt_shard(dim), &d));
      RANK_OK(dt_tril(x, diag, &want));
      dt_comm_ledger *ledger = NULL;
      RANK_OK(dt_comm_ledger_start(&ledger));
      RANK_OK(dt_tril(d, diag, &y));
      RANK_OK(dt_comm_ledger_stop(ledger));
      int64_t moved = dt_comm_ledger_bytes(ledger, NULL);
      dt_comm_ledger_destroy(ledger);
      RANK_CHECK(moved == 0, "tril of S(%d) communicated %lld bytes", dim, (long long)moved);
      RANK_CHECK(dt_dist_placements(y)[0].kind == DT_SHARD, "tril kept no shard");
      st = same(y, want, 0, "tril of a shard");
      dt_tensor_release(d), dt_tensor_release(y), dt_tensor_release(want);
    }
  dt_tensor_release(x);
  dt_mesh_destroy(mesh);
  return st;
}

Test(dist_index_ops, tril_of_row_and_column_shards) {
  for (int n = 2; n <= 4; n++)
    cr_assert_eq(dt_comm_spawn(n, triangle_rank, NULL), DT_OK, "%s", dt_last_error());
}

/* The backward of cumsum, index_select and gather on shards: the gradients equal the local
 * ones. loss = sum(f(x) * w). */
typedef dt_status (*unary_fn)(dt_mesh *mesh, dt_tensor *x, dt_tensor **out);
/* The index as a tensor of the mesh (replicated), or local without one. */
static dt_status index_on(dt_mesh *mesh, int ndim, const int64_t *shape, const int64_t *v,
                          dt_tensor **out) {
  dt_tensor *local = NULL;
  dt_status st = dt_from_data(v, ndim, shape, DT_I64, &local);
  if (!st && mesh) st = distribute(mesh, local, dt_replicate(), out);
  if (!st && !mesh) *out = dt_tensor_retain(local);
  dt_tensor_release(local);
  return st;
}
static dt_status b_cumsum(dt_mesh *mesh, dt_tensor *x, dt_tensor **o) {
  (void)mesh;
  return dt_cumsum(x, 0, o);
}
static dt_status b_index_select(dt_mesh *mesh, dt_tensor *x, dt_tensor **o) {
  dt_tensor *i = NULL;
  dt_status st = index_on(mesh, 1, (int64_t[]){5}, (int64_t[]){6, 0, 6, 2, 1}, &i);
  if (!st) st = dt_index_select(x, 1, i, o);
  dt_tensor_release(i);
  return st;
}
static dt_status b_gather(dt_mesh *mesh, dt_tensor *x, dt_tensor **o) {
  int64_t v[35];
  for (int e = 0; e < 35; e++) v[e] = (e * 3) % 5;
  dt_tensor *i = NULL;
  dt_status st = index_on(mesh, 2, (int64_t[]){5, 7}, v, &i);
  if (!st) st = dt_gather(x, 0, i, o);
  dt_tensor_release(i);
  return st;
}

static dt_status grad_of(unary_fn f, dt_mesh *mesh, dt_tensor *x, dt_tensor *w, dt_tensor **grad) {
  dt_tensor *y = NULL, *yw = NULL, *loss = NULL;
  dt_status st = f(mesh, x, &y);
  if (!st) st = dt_mul(y, w, &yw);
  if (!st) st = dt_sum(yw, &loss);
  if (!st) st = dt_backward(loss, NULL);
  if (!st) st = dt_tensor_grad(x, grad);
  dt_tensor_release(y), dt_tensor_release(yw), dt_tensor_release(loss);
  return st;
}

static dt_status backward_rank(dt_comm *world, void *arg) {
  (void)arg;
  int n = dt_comm_size(world);
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){n}, NULL, &mesh));
  unary_fn fns[] = {b_cumsum, b_index_select, b_gather};
  int64_t wshape[3][2] = {{5, 7}, {5, 5}, {5, 7}};
  dt_status st = DT_OK;
  for (int k = 0; k < 3 && !st; k++)
    for (int dim = 0; dim < 2 && !st; dim++) {
      dt_tensor *x = ref_random(2, (int64_t[]){5, 7}, DT_F64, -1, 1, 11);
      dt_tensor *w = ref_random(2, wshape[k], DT_F64, -1, 1, 12);
      dt_tensor *gl = NULL, *xd = NULL, *wd = NULL, *gd = NULL;
      RANK_OK(dt_tensor_set_requires_grad(x, true));
      RANK_OK(grad_of(fns[k], NULL, x, w, &gl));
      dt_tensor *xs = ref_random(2, (int64_t[]){5, 7}, DT_F64, -1, 1, 11);
      RANK_OK(distribute(mesh, xs, dt_shard(dim), &xd));
      RANK_OK(dt_tensor_set_requires_grad(xd, true));
      RANK_OK(distribute(mesh, w, dt_replicate(), &wd));
      RANK_OK(grad_of(fns[k], mesh, xd, wd, &gd));
      st = same(gd, gl, 1e-12,
                k == 0   ? "cumsum grad"
                : k == 1 ? "index_select grad"
                         : "gather grad");
      dt_tensor *rel[] = {x, w, gl, xd, wd, gd, xs};
      for (int i = 0; i < 7; i++) dt_tensor_release(rel[i]);
    }
  dt_mesh_destroy(mesh);
  return st;
}

Test(dist_index_ops, backward_on_shards_equals_local) {
  for (int n = 2; n <= 4; n += 2)
    cr_assert_eq(dt_comm_spawn(n, backward_rank, NULL), DT_OK, "%s", dt_last_error());
}
