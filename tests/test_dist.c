/* Distributed tensors: redistribution, creation, caching, random invariance, bad input,
 * dispatch modes. Ranks are threads (dt_comm_spawn); each rank checks and returns a status. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_helpers.h"
#include "reference.h"

static bool equal_values(dt_tensor *a, dt_tensor *b) {
  if (dt_tensor_numel(a) != dt_tensor_numel(b) || dt_tensor_ndim(a) != dt_tensor_ndim(b))
    return false;
  double *x = ref_values(a), *y = ref_values(b);
  bool same = true;
  for (int64_t i = 0; i < dt_tensor_numel(a); i++)
    same &= fabs(x[i] - y[i]) <= 1e-5 * (1 + fabs(y[i]));
  free(x);
  free(y);
  return same;
}

typedef struct mesh_arg {
  int ndim;
  int shape[3];
} mesh_arg;

static int world_of(const mesh_arg *m) {
  return (int)(m->ndim == 1 ? m->shape[0] : m->shape[0] * m->shape[1]);
}

/* ---- Redistribution sweep ---------------------------------------------------------------------
 */

static dt_placement pick(int k) {
  switch (k) {
  case 0: return dt_replicate();
  case 1: return dt_shard(0);
  case 2: return dt_shard(1);
  case 3: return dt_partial(DT_REDUCE_SUM);
  default: return dt_partial(DT_REDUCE_MAX);
  }
}

static dt_status redistribute_rank(dt_comm *world, void *arg) {
  const mesh_arg *ma = arg;
  dt_mesh *mesh = NULL;
  dt_status st = dt_mesh_create(world, ma->ndim, ma->shape, NULL, &mesh);
  if (st) return st;
  int64_t shape[] = {5, 7};
  dt_tensor *full = ref_random(2, shape, DT_F32, -3, 3, 11);
  int choices = 5, total = 1, checked = 0;
  for (int m = 0; m < ma->ndim; m++) total *= choices;
  for (int from = 0; from < total && !st; from++) {
    for (int to = 0; to < total && !st; to++) {
      checked++;
      dt_placement pf[3], pt[3];
      for (int m = 0, f = from, t = to; m < ma->ndim; m++, f /= choices, t /= choices) {
        pf[m] = pick(f % choices);
        pt[m] = pick(t % choices);
      }
      dt_placement rep[3] = {dt_replicate(), dt_replicate(), dt_replicate()};
      dt_tensor *r = NULL, *a = NULL, *b = NULL, *back = NULL, *local = NULL;
      st = dt_dist_distribute_tensor(mesh, full, ma->ndim, rep, &r);
      if (!st) st = dt_dist_redistribute(r, ma->ndim, pf, &a);
      if (!st) st = dt_dist_redistribute(a, ma->ndim, pt, &b);
      if (!st) st = dt_dist_full_tensor(b, &back);
      if (!st) st = dt_dist_to_local(b, &local);
      char pa[16], pb[16], pc[16], pd[16];
      if (!st && !equal_values(back, full)) {
        fprintf(stderr, "redistribute (%s,%s) -> (%s,%s) changed the values\n",
                dt_placement_format(pf[0], pa, 16),
                ma->ndim > 1 ? dt_placement_format(pf[1], pb, 16) : "",
                dt_placement_format(pt[0], pc, 16),
                ma->ndim > 1 ? dt_placement_format(pt[1], pd, 16) : "");
        st = DT_ERR_INTERNAL;
      }
      /* The local shard has the chunk geometry of the target placements. */
      if (!st) {
        int64_t expect[2] = {5, 7};
        for (int m = 0; m < ma->ndim; m++) {
          if (pt[m].kind != DT_SHARD) continue;
          int64_t n = dt_mesh_size(mesh, m), c = dt_mesh_coordinate(mesh, m);
          int64_t piece = (expect[pt[m].dim] + n - 1) / n, start = piece * c;
          if (start > expect[pt[m].dim]) start = expect[pt[m].dim];
          int64_t len = expect[pt[m].dim] - start;
          expect[pt[m].dim] = len < piece ? len : piece;
        }
        if (dt_tensor_shape(local)[0] != expect[0] || dt_tensor_shape(local)[1] != expect[1]) {
          fprintf(stderr, "redistribute: local shape [%lld, %lld], expected [%lld, %lld]\n",
                  (long long)dt_tensor_shape(local)[0], (long long)dt_tensor_shape(local)[1],
                  (long long)expect[0], (long long)expect[1]);
          st = DT_ERR_INTERNAL;
        }
      }
      dt_tensor_release(r);
      dt_tensor_release(a);
      dt_tensor_release(b);
      dt_tensor_release(back);
      dt_tensor_release(local);
    }
  }
  if (ma->ndim == 3 && dt_comm_rank(world) == 0)
    fprintf(stderr, "2x2x2: %d pairs checked\n", checked);
  dt_tensor_release(full);
  dt_mesh_destroy(mesh);
  return st;
}

static void run_on(int ndim, int64_t a, int64_t b, dt_rank_fn fn) {
  mesh_arg ma = {ndim, {a, b}};
  dt_status st = dt_comm_spawn(world_of(&ma), fn, &ma);
  cr_assert_eq(st, DT_OK, "mesh %lldx%lld: %s", (long long)a, (long long)b, dt_last_error());
}

Test(redistribute, every_pair_1d) {
  for (int n = 1; n <= 4; n++) run_on(1, n, 1, redistribute_rank);
}
Test(redistribute, every_pair_2x2) { run_on(2, 2, 2, redistribute_rank); }
Test(redistribute, every_pair_2x3) { run_on(2, 2, 3, redistribute_rank); }
Test(redistribute, every_pair_2x2x2) {
  mesh_arg ma = {3, {2, 2, 2}};
  cr_assert_eq(dt_comm_spawn(8, redistribute_rank, &ma), DT_OK, "mesh 2x2x2: %s", dt_last_error());
}

/* (S0, S1) -> (S1, S0) must not gather the whole tensor anywhere: its plan moves fewer
 * bytes than one full replica and uses an all_to_all. */
static dt_status transpose_plan_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  dt_status st = dt_mesh_create(world, 2, (int[]){2, 2}, NULL, &mesh);
  if (st) return st;
  dt_tensor *t = NULL;
  st = dt_dist_rand(mesh, 2, (int64_t[]){64, 64}, DT_F32, 3, 2,
                    (dt_placement[]){dt_shard(0), dt_shard(1)}, &t);
  CHECK(!st, "dist_rand");
  char text[1024];
  int64_t bytes = 0;
  st = dt_dist_redistribute_explain(t, 2, (dt_placement[]){dt_shard(1), dt_shard(0)}, text,
                                    sizeof text, &bytes);
  CHECK(!st, "explain");
  CHECK(strstr(text, "all_to_all") != NULL, "plan has no all_to_all: %s", text);
  /* No step handles a whole replica: every collective's buffer is at most half the tensor. */
  for (const char *p = strstr(text, "via "); p; p = strstr(p + 1, "via ")) {
    const char *comma = strchr(p, ',');
    long long step_bytes = comma ? atoll(comma + 1) : 0;
    CHECK(step_bytes <= 64 * 64 * 4 / 2, "a step handles %lld bytes of a %d-byte tensor: %s",
          step_bytes, 64 * 64 * 4, text);
  }
  st = dt_dist_redistribute_explain(t, 2, (dt_placement[]){dt_shard(0), dt_shard(1)}, text,
                                    sizeof text, &bytes);
  CHECK(!st && bytes == 0 && strstr(text, "nothing"), "identity plan: %s", text);
  dt_tensor_release(t);
  dt_mesh_destroy(mesh);
  return DT_OK;
}
Test(redistribute, transposed_sharding_avoids_replicate) {
  cr_assert_eq(dt_comm_spawn(4, transpose_plan_rank, NULL), DT_OK, "%s", dt_last_error());
}

/* ---- Random tensors do not depend on the mesh -------------------------------------------------
 */

static dt_status rand_rank(dt_comm *world, void *arg) {
  const mesh_arg *ma = arg;
  dt_mesh *mesh = NULL;
  dt_status st = dt_mesh_create(world, ma->ndim, ma->shape, NULL, &mesh);
  if (st) return st;
  int64_t shape[] = {9, 13};
  dt_tensor *whole = NULL;
  CHECK(!dt_randn(2, shape, DT_F32, 77, &whole), "randn");
  for (int k = 0; k < 9 && !st; k++) {
    dt_placement p[2] = {pick(k % 3), pick(k / 3)};
    dt_tensor *d = NULL, *full = NULL;
    st = dt_dist_randn(mesh, 2, shape, DT_F32, 77, ma->ndim, p, &d);
    if (!st) st = dt_dist_full_tensor(d, &full);
    CHECK(!st, "dist_randn");
    CHECK(equal_values(full, whole), "dist_randn with placements %d differs from randn", k);
    dt_tensor_release(d);
    dt_tensor_release(full);
  }
  dt_tensor_release(whole);
  dt_mesh_destroy(mesh);
  return st;
}
Test(dist_random, same_values_on_every_mesh) {
  run_on(1, 1, 1, rand_rank);
  run_on(1, 4, 1, rand_rank);
  run_on(2, 2, 3, rand_rank);
}

/* ---- from_local, to_local, factories, visualize -------------------------------------------------
 */

static dt_status from_local_rank(dt_comm *world, void *arg) {
  (void)arg;
  int rank = dt_comm_rank(world);
  dt_mesh *mesh = NULL;
  dt_status st = dt_mesh_create(world, 1, (int[]){3}, (const char *[]){"tp"}, &mesh);
  if (st) return st;
  int tp = -1;
  CHECK(!dt_mesh_dim_by_name(mesh, "tp", &tp) && tp == 0, "dim by name");
  /* Even: each rank 2x4 -> global 6x4. */
  dt_tensor *local = NULL, *d = NULL, *full = NULL;
  CHECK(!dt_full(2, (int64_t[]){2, 4}, rank, DT_F32, &local), "full");
  CHECK(!dt_dist_from_local(mesh, local, 1, (dt_placement[]){dt_shard(0)}, NULL, &d), "from_local");
  CHECK(dt_dist_global_shape(d)[0] == 6 && dt_dist_global_shape(d)[1] == 4, "global shape");
  CHECK(dt_tensor_shares_storage(d, local), "from_local must not copy");
  CHECK(!dt_dist_full_tensor(d, &full), "full_tensor");
  double v;
  CHECK(!dt_tensor_get(full, (int64_t[]){5, 3}, &v) && v == 2, "row 5 comes from rank 2");
  dt_tensor_release(full);
  dt_tensor_release(d);
  dt_tensor_release(local);
  /* Uneven with an explicit global shape: 7 rows over 3 ranks = 3, 3, 1. */
  int64_t rows = rank < 2 ? 3 : 1;
  CHECK(!dt_full(1, &rows, rank + 1, DT_I64, &local), "full");
  dt_dist_from_local_options opts = {
      .global_shape = (int64_t[]){7}, .global_ndim = 1, .run_check = true};
  CHECK(!dt_dist_from_local(mesh, local, 1, (dt_placement[]){dt_shard(0)}, &opts, &d),
        "uneven from_local");
  dt_tensor *sum = NULL;
  CHECK(!dt_sum(d, &sum) && !dt_dist_full_tensor(sum, &full), "sum");
  CHECK(!dt_tensor_get(full, NULL, &v) && v == 3 * 1 + 3 * 2 + 1 * 3, "sum of uneven shards is %g",
        v);
  dt_tensor_release(full);
  dt_tensor_release(sum);
  char text[512];
  CHECK(!dt_dist_visualize_sharding(d, text, sizeof text), "visualize");
  CHECK(strstr(text, "0:3 -> ranks 0") && strstr(text, "3:6 -> ranks 1") &&
            strstr(text, "6:7 -> ranks 2"),
        "visualize_sharding gave:\n%s", text);
  dt_tensor_release(d);
  /* run_check: a shard that does not fit fails on every rank. */
  dt_tensor_release(local);
  int64_t wrong = 2;
  CHECK(!dt_full(1, &wrong, 1, DT_I64, &local), "full");
  opts.run_check = true;
  st = dt_dist_from_local(mesh, local, 1, (dt_placement[]){dt_shard(0)}, &opts, &d);
  CHECK(st == DT_ERR_INVALID && d == NULL, "a misfit shard must fail (got %d)", st);
  CHECK(strstr(dt_last_error(), "from_local"), "message names from_local");
  /* Replicas that differ are caught by run_check on every rank. */
  dt_tensor_release(local);
  CHECK(!dt_full(1, (int64_t[]){4}, rank == 1 ? 9 : 1, DT_F32, &local), "full");
  opts = (dt_dist_from_local_options){.run_check = true};
  st = dt_dist_from_local(mesh, local, 1, (dt_placement[]){dt_replicate()}, &opts, &d);
  CHECK(st == DT_ERR_INVALID, "differing replicas must fail (got %d)", st);
  CHECK(strstr(dt_last_error(), "different values"), "message");
  dt_tensor_release(local);
  dt_mesh_destroy(mesh);
  return DT_OK;
}
Test(dist, from_local_to_local_visualize) {
  cr_assert_eq(dt_comm_spawn(3, from_local_rank, NULL), DT_OK, "%s", dt_last_error());
}

/* ---- Cache ----------------------------------------------------------------------------------- */

static dt_status cache_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  dt_status st = dt_mesh_create(world, 1, (int[]){2}, NULL, &mesh);
  if (st) return st;
  dt_tensor *a = NULL, *b = NULL, *c = NULL;
  CHECK(!dt_dist_ones(mesh, 2, (int64_t[]){4, 4}, DT_F32, 1, (dt_placement[]){dt_shard(0)}, &a),
        "ones");
  CHECK(!dt_dist_ones(mesh, 2, (int64_t[]){4, 4}, DT_F32, 1, (dt_placement[]){dt_shard(0)}, &b),
        "ones");
  dt_dist_sharding_cache_clear();
  dt_dist_sharding_cache_info s;
  for (int i = 0; i < 5; i++) {
    CHECK(!dt_add(a, b, &c), "add");
    dt_tensor_release(c);
  }
  dt_dist_sharding_cache_stats(&s);
  CHECK(s.misses == 1 && s.hits == 4 && s.entries >= 1, "5 adds: %llu misses, %llu hits",
        (unsigned long long)s.misses, (unsigned long long)s.hits);
  CHECK(!dt_mul(a, b, &c), "mul"); /* another op: another miss */
  dt_tensor_release(c);
  dt_dist_sharding_cache_stats(&s);
  CHECK(s.misses == 2, "mul is a new key");
  dt_dist_sharding_cache_clear();
  dt_dist_sharding_cache_stats(&s);
  CHECK(s.entries == 0 && s.hits == 0 && s.misses == 0, "clear empties the cache");
  dt_tensor_release(a);
  dt_tensor_release(b);
  dt_mesh_destroy(mesh);
  return DT_OK;
}
Test(dist, sharding_cache_hits_and_misses) {
  cr_assert_eq(dt_comm_spawn(2, cache_rank, NULL), DT_OK, "%s", dt_last_error());
}

/* ---- Bad input: a clear error on every rank, no hang
 * --------------------------------------------- */

static dt_status bad_input_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL, *other = NULL;
  dt_status st = dt_mesh_create(world, 1, (int[]){2}, NULL, &mesh);
  if (!st) st = dt_mesh_create(world, 1, (int[]){2}, NULL, &other);
  if (st) return st;
  dt_tensor *full = NULL, *d = NULL, *e = NULL, *out = (dt_tensor *)0x1;
  CHECK(!dt_ones(2, (int64_t[]){4, 4}, DT_F32, &full), "ones");
  st = dt_dist_distribute_tensor(mesh, full, 1, (dt_placement[]){dt_shard(2)}, &d);
  CHECK(st == DT_ERR_INVALID && strstr(dt_last_error(), "Shard(2)") &&
            strstr(dt_last_error(), "2 dims"),
        "shard dim out of range");
  st = dt_dist_distribute_tensor(mesh, full, 2, (dt_placement[]){dt_shard(0), dt_shard(1)}, &d);
  CHECK(st == DT_ERR_INVALID && strstr(dt_last_error(), "2 placements"), "placement count");
  st = dt_dist_distribute_tensor(mesh, full, 1, (dt_placement[]){dt_partial(DT_REDUCE_SUM)}, &d);
  CHECK(st == DT_ERR_INVALID, "distribute with Partial");
  CHECK(!dt_dist_distribute_tensor(mesh, full, 1, (dt_placement[]){dt_shard(0)}, &d), "distribute");
  CHECK(!dt_dist_distribute_tensor(other, full, 1, (dt_placement[]){dt_shard(0)}, &e),
        "distribute");
  st = dt_add(d, e, &out);
  CHECK(st == DT_ERR_INVALID && out == NULL && strstr(dt_last_error(), "mesh"), "different meshes");
  st = dt_add(d, full, &out);
  CHECK(st == DT_ERR_INVALID && strstr(dt_last_error(), "local tensor of shape [4, 4]") &&
            strstr(dt_last_error(), "make it distributed: dt_dist_distribute_tensor if every "
                                    "rank holds the whole tensor, dt_dist_from_local if it is "
                                    "this rank's shard"),
        "mixing local (the message says how to make it distributed)");
  dt_tensor *bad_shape = NULL;
  CHECK(
      !dt_dist_ones(mesh, 1, (int64_t[]){5}, DT_F32, 1, (dt_placement[]){dt_shard(0)}, &bad_shape),
      "ones");
  st = dt_add(d, bad_shape, &out);
  CHECK(st == DT_ERR_SHAPE && strstr(dt_last_error(), "[4, 4] and [5]"),
        "global shapes in errors: %s", dt_last_error());
  st = dt_dist_redistribute(d, 1, (dt_placement[]){dt_shard(-3)}, &out);
  CHECK(st == DT_ERR_INVALID, "redistribute to a bad dim");
  /* A 0-d local tensor mixes in as a replica. */
  dt_tensor *scalar = NULL, *sum = NULL, *back = NULL;
  CHECK(!dt_full(0, NULL, 2, DT_F32, &scalar), "scalar");
  CHECK(!dt_mul(d, scalar, &sum) && !dt_dist_full_tensor(sum, &back), "dist * scalar");
  double v;
  CHECK(!dt_tensor_get(back, (int64_t[]){3, 3}, &v) && v == 2, "value");
  /* d is [4, 4] Shard(0) on 2 ranks: element [3, 0] is not in the local [2, 4] shard. */
  st = dt_tensor_get(d, (int64_t[]){3, 0}, &v);
  CHECK(st == DT_ERR_INDEX && strstr(dt_last_error(), "local shard's shape [2, 4]") &&
            strstr(dt_last_error(), "dt_dist_full_tensor"),
        "get past the local shard: %s", dt_last_error());
  dt_tensor_release(scalar);
  dt_tensor_release(sum);
  dt_tensor_release(back);
  dt_tensor_release(bad_shape);
  dt_tensor_release(full);
  dt_tensor_release(d);
  dt_tensor_release(e);
  dt_mesh_destroy(mesh);
  dt_mesh_destroy(other);
  return DT_OK;
}
Test(dist, bad_input_fails_on_every_rank) {
  cr_assert_eq(dt_comm_spawn(2, bad_input_rank, NULL), DT_OK, "%s", dt_last_error());
}

/* ---- Dispatch modes
 * -------------------------------------------------------------------------------- */

typedef struct counter {
  int calls;
  int runs;
  char last[32];
  char order[16];
} counter;

static dt_status repeat3(dt_invocation *inv, void *user) {
  counter *c = user;
  c->calls++;
  strncat(c->order, "A", sizeof c->order - strlen(c->order) - 1);
  snprintf(c->last, sizeof c->last, "%s", dt_invocation_op_name(inv));
  dt_status st = DT_OK;
  for (int i = 0; i < 3 && !st; i++) {
    st = dt_invocation_run(inv);
    c->runs++;
  }
  return st;
}

static dt_status outer(dt_invocation *inv, void *user) {
  counter *c = user;
  strncat(c->order, "B", sizeof c->order - strlen(c->order) - 1);
  /* An op called from inside a mode is not seen by this mode again. */
  dt_tensor *x = NULL;
  dt_status st = dt_ones(1, (int64_t[]){1}, DT_F32, &x);
  dt_tensor *y = NULL;
  if (!st) st = dt_neg(x, &y);
  dt_tensor_release(x);
  dt_tensor_release(y);
  if (st) return st;
  return dt_invocation_run(inv);
}

Test(modes, stack_repeat_and_no_recursion) {
  counter inner = {0}, out = {0};
  dt_tensor *a = NULL, *b = NULL;
  cr_assert_eq(dt_ones(1, (int64_t[]){3}, DT_F32, &a), DT_OK);
  cr_assert_eq(dt_mode_push(repeat3, &inner), DT_OK);
  cr_assert_eq(dt_add(a, a, &b), DT_OK);
  cr_assert_eq(inner.calls, 1);
  cr_assert_eq(inner.runs, 3);
  cr_assert_str_eq(inner.last, "add.Tensor");
  ref_assert_close(b, 1, (int64_t[]){3}, DT_F32, (double[]){2, 2, 2}, 0, 0);
  dt_tensor_release(b);
  cr_assert_eq(dt_mode_push(outer, &out), DT_OK);
  cr_assert_eq(dt_mode_depth(), 2);
  cr_assert_eq(dt_mul(a, a, &b), DT_OK);
  /* outer (pushed last) sees mul first; its own neg goes to repeat3 only, then mul. */
  cr_assert_str_eq(out.order, "B");
  cr_assert_eq(inner.calls, 3, "neg and mul reach the inner mode (%d)", inner.calls);
  cr_assert_str_eq(inner.last, "mul.Tensor");
  dt_tensor_release(b);
  cr_assert_eq(dt_mode_pop(), DT_OK);
  cr_assert_eq(dt_mode_pop(), DT_OK);
  cr_assert_eq(dt_mode_pop(), DT_ERR_INVALID);
  cr_assert_eq(dt_mode_push(NULL, NULL), DT_ERR_INVALID);
  dt_tensor_release(a);
}

static dt_status lazy(dt_invocation *inv, void *user) {
  (void)inv;
  (void)user;
  return DT_OK; /* forgets to run the op */
}

Test(modes, a_mode_that_does_not_run_the_op_is_an_error) {
  dt_tensor *a = NULL, *b = (dt_tensor *)0x1;
  cr_assert_eq(dt_ones(1, (int64_t[]){3}, DT_F32, &a), DT_OK);
  cr_assert_eq(dt_mode_push(lazy, NULL), DT_OK);
  cr_assert_eq(dt_add(a, a, &b), DT_ERR_INVALID);
  cr_assert_null(b);
  ref_assert_error_mentions("add.Tensor", "without running");
  cr_assert_eq(dt_mode_pop(), DT_OK);
  dt_tensor_release(a);
}

/* ---- uniform_ and is_same_size ------------------------------------------------------------------
 */

static dt_status uniform_rank(dt_comm *world, void *arg) {
  const mesh_arg *ma = arg;
  dt_mesh *mesh = NULL;
  dt_status st = dt_mesh_create(world, ma->ndim, ma->shape, NULL, &mesh);
  if (st) return st;
  int64_t shape[] = {7, 5};
  dt_tensor *whole = NULL, *d = NULL, *full = NULL;
  CHECK(!dt_zeros(2, shape, DT_F32, &whole) && !dt_uniform_(whole, -1, 1, 9), "local uniform_");
  for (int k = 0; k < 3; k++) {
    dt_placement p[2] = {pick(k), pick(2 - k)};
    CHECK(!dt_dist_zeros(mesh, 2, shape, DT_F32, ma->ndim, p, &d), "zeros");
    CHECK(!dt_uniform_(d, -1, 1, 9), "dist uniform_");
    CHECK(!dt_dist_full_tensor(d, &full), "full_tensor");
    CHECK(equal_values(full, whole), "uniform_ on placements %d differs from the local fill", k);
    bool same = false;
    CHECK(!dt_is_same_size(d, whole, &same) && same, "is_same_size compares global shapes");
    dt_tensor_release(d);
    dt_tensor_release(full);
  }
  double *v = ref_values(whole);
  for (int i = 0; i < 35; i++) CHECK(v[i] >= -1 && v[i] < 1, "uniform_ range");
  free(v);
  bool same = true;
  dt_tensor *other = NULL;
  CHECK(!dt_zeros(1, (int64_t[]){35}, DT_F32, &other), "zeros");
  CHECK(!dt_is_same_size(whole, other, &same) && !same, "different shapes");
  CHECK(dt_is_same_size(NULL, other, &same) == DT_ERR_INVALID, "NULL");
  CHECK(dt_uniform_(other, 1, 0, 1) == DT_ERR_INVALID, "empty range");
  dt_tensor_release(other);
  dt_tensor_release(whole);
  dt_mesh_destroy(mesh);
  return DT_OK;
}
Test(dist_random, uniform_inplace_and_is_same_size) {
  run_on(1, 3, 1, uniform_rank);
  run_on(2, 2, 2, uniform_rank);
}

/* ---- The comm ledger: counts per op, and plans' bytes match what moved --------------------------
 */

static dt_status ledger_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  dt_status st = dt_mesh_create(world, 2, (int[]){2, 2}, NULL, &mesh);
  if (st) return st;
  dt_tensor *a = NULL, *b = NULL, *c = NULL, *r = NULL;
  CHECK(!dt_dist_rand(mesh, 2, (int64_t[]){9, 6}, DT_F32, 1, 2,
                      (dt_placement[]){dt_shard(0), dt_shard(1)}, &a),
        "rand");
  CHECK(dt_dist_rand(mesh, 2, (int64_t[]){9, 6}, DT_F32, 2, 2,
                     (dt_placement[]){dt_replicate(), dt_partial(DT_REDUCE_SUM)},
                     &b) == DT_ERR_INVALID,
        "factories refuse Partial");
  /* b: Partial(sum) on mesh dim 1, made from a replica. */
  dt_tensor *rep = NULL;
  CHECK(!dt_dist_rand(mesh, 2, (int64_t[]){9, 6}, DT_F32, 2, 2,
                      (dt_placement[]){dt_replicate(), dt_replicate()}, &rep),
        "rand");
  CHECK(!dt_dist_redistribute(rep, 2, (dt_placement[]){dt_replicate(), dt_partial(DT_REDUCE_SUM)},
                              &b),
        "to partial");
  dt_comm_ledger *ledger = NULL;
  CHECK(!dt_comm_ledger_start(&ledger), "ledger start");
  /* mul is linear in each factor, not in both: b must be reduced (an add would not need it:
   * a's shard becomes a Partial(sum) locally). */
  CHECK(!dt_mul(a, b, &c), "mul");
  CHECK(dt_comm_ledger_count(ledger, NULL) > 0, "mul of S,S with R,P needs communication");
  int64_t before = dt_comm_ledger_bytes(ledger, NULL);
  /* A plan's bytes are exactly what its collectives move. */
  char text[1024];
  int64_t planned = 0;
  dt_placement target[2] = {dt_replicate(), dt_replicate()};
  CHECK(!dt_dist_redistribute_explain(a, 2, target, text, sizeof text, &planned), "explain");
  CHECK(!dt_dist_redistribute(a, 2, target, &r), "redistribute");
  int64_t moved = dt_comm_ledger_bytes(ledger, NULL) - before;
  CHECK(moved == planned, "planned %lld bytes, moved %lld:\n%s", (long long)planned,
        (long long)moved, text);
  CHECK(!dt_comm_ledger_stop(ledger), "stop");
  CHECK(dt_comm_ledger_stop(ledger) == DT_ERR_INVALID, "stop twice");
  char table[2048];
  CHECK(!dt_comm_ledger_format(ledger, table, sizeof table), "format");
  CHECK(strstr(table, "mul.Tensor") && strstr(table, "(no op)") && strstr(table, "total"),
        "table:\n%s", table);
  dt_comm_ledger_destroy(ledger);
  dt_tensor *rel[] = {a, b, c, r, rep};
  for (int i = 0; i < 5; i++) dt_tensor_release(rel[i]);
  dt_mesh_destroy(mesh);
  return DT_OK;
}
Test(dist, comm_ledger_counts_and_plan_bytes) {
  cr_assert_eq(dt_comm_spawn(4, ledger_rank, NULL), DT_OK, "%s", dt_last_error());
}

/* ---- Vocabulary-parallel embedding
 * ------------------------------------------------------------------ */

static dt_status vocab_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  dt_status st = dt_mesh_create(world, 1, (int[]){3}, NULL, &mesh);
  if (st) return st;
  dt_tensor *full_w = ref_random(2, (int64_t[]){10, 4}, DT_F32, -1, 1, 5);
  int64_t ids[] = {0, 9, 3, 3, 7, 5};
  dt_tensor *idx = NULL, *w = NULL, *out = NULL, *gathered = NULL, *expected = NULL;
  CHECK(!dt_from_data(ids, 1, (int64_t[]){6}, DT_I64, &idx), "indices");
  CHECK(!dt_dist_distribute_tensor(mesh, full_w, 1, (dt_placement[]){dt_shard(0)}, &w),
        "weight rows sharded");
  dt_comm_ledger *ledger = NULL;
  CHECK(!dt_comm_ledger_start(&ledger), "ledger");
  dt_tensor *didx = NULL;
  CHECK(!dt_dist_distribute_tensor(mesh, idx, 1, (dt_placement[]){dt_replicate()}, &didx),
        "indices replicated");
  CHECK(!dt_embedding(w, didx, &out), "embedding");
  CHECK(dt_comm_ledger_count(ledger, NULL) == 0, "the lookup itself moves nothing");
  CHECK(!dt_comm_ledger_stop(ledger), "stop");
  dt_comm_ledger_destroy(ledger);
  CHECK(dt_dist_placements(out)[0].kind == DT_PARTIAL,
        "vocabulary-parallel lookup gives Partial(sum)");
  CHECK(!dt_dist_full_tensor(out, &gathered) && !dt_embedding(full_w, idx, &expected), "full");
  CHECK(equal_values(gathered, expected), "lookup values");
  /* An index past the table fails on every rank, whichever shard holds the rows. */
  int64_t bad[] = {2, 10};
  dt_tensor *bidx = NULL, *dbad = NULL, *o2 = NULL;
  CHECK(!dt_from_data(bad, 1, (int64_t[]){2}, DT_I64, &bidx), "indices");
  CHECK(!dt_dist_distribute_tensor(mesh, bidx, 1, (dt_placement[]){dt_replicate()}, &dbad),
        "bad indices");
  st = dt_embedding(w, dbad, &o2);
  CHECK(st == DT_ERR_INDEX && o2 == NULL && strstr(dt_last_error(), "index 10"), "bad index: %d",
        st);
  dt_tensor *rel[] = {full_w, idx, w, out, gathered, expected, didx, bidx, dbad};
  for (int i = 0; i < 9; i++) dt_tensor_release(rel[i]);
  dt_mesh_destroy(mesh);
  return DT_OK;
}
Test(dist, vocabulary_parallel_embedding) {
  cr_assert_eq(dt_comm_spawn(3, vocab_rank, NULL), DT_OK, "%s", dt_last_error());
}

/* ---- 1-D matmul: once an op without a rule (replicated, counted as a fallback), now a local
 * dot with a Partial(sum) result (issue 16): no fallback, the right value ------------------ */

static dt_status fallback_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  dt_status st = dt_mesh_create(world, 1, (int[]){2}, NULL, &mesh);
  if (st) return st;
  dt_tensor *a = NULL, *b = NULL, *dot = NULL, *full = NULL;
  CHECK(!dt_dist_ones(mesh, 1, (int64_t[]){5}, DT_F32, 1, (dt_placement[]){dt_shard(0)}, &a),
        "ones");
  CHECK(!dt_dist_constant(mesh, 1, (int64_t[]){5}, 2, DT_F32, 1, (dt_placement[]){dt_shard(0)}, &b),
        "full");
  dt_dist_sharding_cache_clear();
  CHECK(!dt_matmul(a, b, &dot), "1-D matmul");
  dt_dist_sharding_cache_info s;
  dt_dist_sharding_cache_stats(&s);
  CHECK(s.fallbacks == 0, "no fallback counted (%llu)", (unsigned long long)s.fallbacks);
  CHECK(dt_dist_placements(dot)[0].kind == DT_PARTIAL, "the dot is a Partial(sum)");
  double v = 0;
  CHECK(!dt_dist_full_tensor(dot, &full) && !dt_tensor_get(full, NULL, &v) && v == 10, "dot = %g",
        v);
  dt_tensor *rel[] = {a, b, dot, full};
  for (int i = 0; i < 4; i++) dt_tensor_release(rel[i]);
  dt_mesh_destroy(mesh);
  return DT_OK;
}
Test(dist, one_dimensional_matmul_has_a_rule) {
  cr_assert_eq(dt_comm_spawn(2, fallback_rank, NULL), DT_OK, "%s", dt_last_error());
}

/* ---- The cache stays bounded: more distinct calls than slots evict old plans ---------------- */

static dt_status bounded_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  dt_status st = dt_mesh_create(world, 1, (int[]){2}, NULL, &mesh);
  if (st) return st;
  dt_dist_sharding_cache_clear();
  for (int64_t n = 1; n <= 1500 && !st; n++) {
    dt_tensor *a = NULL, *b = NULL, *s = NULL, *full = NULL;
    st = dt_dist_ones(mesh, 1, &n, DT_F32, 1, (dt_placement[]){dt_shard(0)}, &a);
    if (!st) st = dt_add(a, a, &b);
    if (!st) st = dt_sum(b, &s);
    if (!st) st = dt_dist_full_tensor(s, &full);
    double v = 0;
    if (!st) dt_tensor_get(full, NULL, &v);
    CHECK(!st && v == 2.0 * (double)n, "sum of 2s over %lld elements is %g", (long long)n, v);
    dt_tensor *rel[] = {a, b, s, full};
    for (int i = 0; i < 4; i++) dt_tensor_release(rel[i]);
  }
  dt_dist_sharding_cache_info stats;
  dt_dist_sharding_cache_stats(&stats);
  CHECK(stats.entries <= 1024 + 256, "the cache holds %llu entries",
        (unsigned long long)stats.entries);
  dt_mesh_destroy(mesh);
  return st;
}
Test(dist, sharding_cache_is_bounded) {
  cr_assert_eq(dt_comm_spawn(2, bounded_rank, NULL), DT_OK, "%s", dt_last_error());
}

/* ---- Squeeze on shards, split counts, casts of Partials --------- */

static dt_status squeeze_split_cast_rank(dt_comm *world, void *arg) {
  (void)arg;
  int rank = dt_comm_rank(world);
  dt_mesh *mesh = NULL;
  dt_status st = dt_mesh_create(world, 1, (int[]){3}, NULL, &mesh);
  if (st) return st;
  /* squeeze drops dims by the global size: [4, 1, 3] S(2) has local [4, 1, 1]. */
  dt_tensor *x = NULL, *sq = NULL, *full = NULL, *sqd = NULL;
  CHECK(
      !dt_dist_rand(mesh, 3, (int64_t[]){4, 1, 3}, DT_F32, 1, 1, (dt_placement[]){dt_shard(2)}, &x),
      "rand");
  CHECK(!dt_squeeze(x, &sq) && dt_dist_ndim(sq) == 2 && dt_tensor_ndim(sq) == 2,
        "squeeze keeps the sharded dim");
  CHECK(!dt_dist_full_tensor(sq, &full) && dt_tensor_shape(full)[0] == 4 &&
            dt_tensor_shape(full)[1] == 3,
        "full");
  CHECK(!dt_squeeze_dim(x, -1, &sqd) && dt_dist_ndim(sqd) == 3,
        "squeeze_dim of a global size-3 dim is a no-op");
  dt_tensor_release(sq);
  dt_tensor_release(sqd);
  dt_tensor_release(full);
  /* split / chunk report the piece count when the split dim had to be gathered first. */
  dt_tensor *y = NULL, *pieces[8] = {0};
  int n = -1;
  CHECK(!dt_dist_rand(mesh, 2, (int64_t[]){5, 3}, DT_F32, 2, 1, (dt_placement[]){dt_shard(0)}, &y),
        "rand");
  CHECK(!dt_split(y, 2, 0, pieces, 8, &n) && n == 3,
        "split of a sharded dim gives 3 pieces (got %d)", n);
  for (int i = 0; i < 8; i++) {
    CHECK((i < n) == (pieces[i] != NULL), "piece %d", i);
    dt_tensor_release(pieces[i]);
    pieces[i] = NULL;
  }
  CHECK(!dt_chunk(y, 4, 0, pieces, 8, &n) && n == 3, "chunk(5, 4) gives 3 pieces (got %d)", n);
  for (int i = 0; i < n; i++) dt_tensor_release(pieces[i]);
  /* A cast into an integer dtype reduces a Partial first. */
  dt_tensor *local = NULL, *p = NULL, *c = NULL, *cf = NULL;
  CHECK(!dt_full(1, (int64_t[]){2},
                 rank == 0   ? 0.6
                 : rank == 1 ? 0.6
                             : 0.0,
                 DT_F32, &local),
        "full");
  CHECK(!dt_dist_from_local(mesh, local, 1, (dt_placement[]){dt_partial(DT_REDUCE_SUM)}, NULL, &p),
        "partial");
  double v = 0;
  CHECK(!dt_to(p, DT_I32, &c) && !dt_dist_full_tensor(c, &cf) &&
            !dt_tensor_get(cf, (int64_t[]){0}, &v) && v == 1,
        "to(int32) of P(sum) 0.6 + 0.6 is 1 (got %g)", v);
  /* Fill values an integer dtype cannot hold are refused. */
  dt_tensor *bad = (dt_tensor *)0x1;
  CHECK(dt_dist_constant(mesh, 1, (int64_t[]){3}, 1e20, DT_I32, 1, (dt_placement[]){dt_shard(0)},
                         &bad) == DT_ERR_INVALID &&
            bad == NULL,
        "dist_full overflow");
  dt_tensor *rel[] = {x, y, local, p, c, cf};
  for (int i = 0; i < 6; i++) dt_tensor_release(rel[i]);
  dt_mesh_destroy(mesh);
  return DT_OK;
}
Test(dist, squeeze_split_counts_and_partial_casts) {
  cr_assert_eq(dt_comm_spawn(3, squeeze_split_cast_rank, NULL), DT_OK, "%s", dt_last_error());
}

Test(tensor, fill_values_that_do_not_fit_are_refused) {
  dt_tensor *t = (dt_tensor *)0x1;
  cr_assert_eq(dt_full(1, (int64_t[]){2}, 1e20, DT_I32, &t), DT_ERR_INVALID);
  cr_assert_null(t);
  cr_assert_eq(dt_full(1, (int64_t[]){2}, 300, DT_U8, &t), DT_ERR_INVALID);
  cr_assert_eq(dt_full(1, (int64_t[]){2}, NAN, DT_I64, &t), DT_ERR_INVALID);
  cr_assert_eq(dt_full(1, (int64_t[]){2}, -1.5, DT_I32, &t), DT_OK); /* truncates toward zero */
  cr_assert_eq(dt_fill_(t, NAN), DT_ERR_INVALID);
  ref_assert_error_mentions("fill_", "int32");
  dt_tensor_release(t);
}

/* run_check compares replicas even when the rank's allocator hands back dirty blocks. */
static dt_status run_check_rank(dt_comm *world, void *arg) {
  (void)arg;
  int rank = dt_comm_rank(world);
  dt_mesh *mesh = NULL;
  dt_status st = dt_mesh_create(world, 1, (int[]){2}, NULL, &mesh);
  if (st) return st;
  dt_tensor *dirty = NULL, *local = NULL, *d = NULL;
  CHECK(!dt_ones(8, (int64_t[]){1, 1, 1, 1, 1, 1, 1, rank + 2}, DT_F32, &dirty), "ones");
  dt_tensor_release(dirty);
  CHECK(!dt_full(1, (int64_t[]){4}, rank, DT_F32, &local), "full");
  dt_dist_from_local_options o = {.run_check = true};
  st = dt_dist_from_local(mesh, local, 1, (dt_placement[]){dt_replicate()}, &o, &d);
  CHECK(st == DT_ERR_INVALID && d == NULL, "differing replicas must be caught (got %d)", st);
  dt_tensor_release(local);
  dt_mesh_destroy(mesh);
  return DT_OK;
}
Test(dist, run_check_with_reused_memory) {
  cr_assert_eq(dt_comm_spawn(2, run_check_rank, NULL), DT_OK, "%s", dt_last_error());
}
