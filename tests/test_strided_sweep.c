/* StridedShard sweep (issue 16): every tuple of R, S(d), SS(d, f) (f from -1 to 6, d in and
 * out of range) on a 1-D mesh of 4, 2x2, 2x3, 1x4 (and a smaller pool on 2x2x2), over 1-D and
 * 2-D shapes with even, uneven and empty dims: distribute_tensor accepts exactly the tuples
 * dist.h's rules allow (else a message naming the function), an accepted tensor holds the naive
 * slice and full_tensor gives the input back, from_local of that slice too, and every
 * redistribution between them (Partials included, from and to) agrees with explain on status
 * and ledger bytes, never communicates before failing and keeps the values; each entry point
 * names itself, the placement and the shape for a bad factor or dim. 40 ops (pointwise,
 * broadcasting, reductions, softmax, views, mm, cat/stack, narrow/slice/select, where,
 * layer_norm) on SS and nested [S, SS] inputs equal the same ops on the whole tensors. */
#include <criterion/criterion.h>

#include "compile_helpers.h"
#include "strided_helpers.h"

#define POOL_MAX 64

/* Whether the documented rules allow the tuple (dist.h "Placements"): SS(d, f) needs f >= 1 and
 * d in range, no other StridedShard of d, the earlier Shards of d must split it evenly, f must
 * divide what they leave, and the later Shards of d must take whole chunks (the product of their
 * mesh sizes divides f). */
static bool rules_allow(int ndim, const int64_t *shape, int mesh_ndim, const int *mesh_shape,
                        const dt_placement *in) {
  dt_placement pl[DT_MESH_MAX_DIMS] = {{DT_REPLICATE, 0, DT_REDUCE_SUM, 0}};
  for (int m = 0; m < mesh_ndim; m++) {
    pl[m] = in[m];
    if (pl[m].kind != DT_SHARD && pl[m].kind != DT_STRIDED_SHARD) continue;
    if (ndim == 0 || pl[m].dim < -ndim || pl[m].dim >= ndim) return false;
    if (pl[m].dim < 0) pl[m].dim += ndim;
    if (pl[m].kind == DT_STRIDED_SHARD && pl[m].split_factor < 1) return false;
    if (pl[m].kind == DT_STRIDED_SHARD && pl[m].split_factor == 1) pl[m] = dt_shard(pl[m].dim);
  }
  for (int m = 0; m < mesh_ndim; m++) {
    if (pl[m].kind != DT_STRIDED_SHARD) continue;
    int d = pl[m].dim;
    int64_t outer = 1, later = 1;
    for (int j = 0; j < mesh_ndim; j++) {
      if (j == m || pl[j].dim != d) continue;
      if (pl[j].kind == DT_STRIDED_SHARD) return false;
      if (j > m && pl[j].kind == DT_SHARD) later *= mesh_shape[j];
      if (j < m && pl[j].kind == DT_SHARD) outer *= mesh_shape[j];
    }
    if (shape[d] % outer != 0 || (shape[d] / outer) % pl[m].split_factor != 0) return false;
    if (pl[m].split_factor % later != 0) return false;
  }
  return true;
}

/* On a 3-D mesh, sources and targets both take a few placements (the tuples grow as the cube):
 * nests of two Shards under a StridedShard, a StridedShard between Shards of another dim. */
static int small_pool(int ndim, dt_placement *pool) {
  int n = 0;
  pool[n++] = dt_replicate();
  for (int d = 0; d < ndim; d++) pool[n++] = dt_shard(d);
  pool[n++] = dt_strided_shard(0, 2);
  pool[n++] = dt_strided_shard(0, 3);
  pool[n++] = dt_strided_shard(ndim - 1, 2);
  pool[n++] = dt_strided_shard(0, 0);
  return n;
}

/* The placements one mesh dim of a source may take for an ndim-d tensor: good and bad. */
static int source_pool(int ndim, int mesh_ndim, dt_placement *pool) {
  if (mesh_ndim == 3) return small_pool(ndim, pool);
  int n = 0;
  pool[n++] = dt_replicate();
  for (int d = -1; d < ndim; d++) pool[n++] = dt_shard(d);
  for (int d = -1; d <= ndim; d++) {
    for (int f = -1; f <= 6; f++) pool[n++] = dt_strided_shard(d, f);
  }
  return n;
}

/* Those of a target: fewer bad ones (a source's checks are the same), Partials. */
static int target_pool(int ndim, int mesh_ndim, dt_placement *pool) {
  static const int factors[] = {2, 3, 4, 6};
  if (mesh_ndim == 3) {
    int n = small_pool(ndim, pool);
    pool[n++] = dt_partial(DT_REDUCE_SUM);
    return n;
  }
  int n = 0;
  pool[n++] = dt_replicate();
  for (int d = 0; d < ndim; d++) pool[n++] = dt_shard(d);
  for (int d = 0; d < ndim; d++) {
    for (int k = 0; k < 4; k++) pool[n++] = dt_strided_shard(d, factors[k]);
  }
  pool[n++] = dt_strided_shard(-1, 2);
  pool[n++] = dt_strided_shard(0, 0);
  pool[n++] = dt_partial(DT_REDUCE_SUM);
  pool[n++] = dt_partial(DT_REDUCE_MAX);
  return n;
}

typedef struct sweep_case {
  int mesh_ndim;
  int mesh_shape[3];
  int ndim;
  int64_t shape[2];
} sweep_case;

/* Tuple number k of the pool over mesh_ndim mesh dims. */
static void tuple_of(int k, int n_pool, const dt_placement *pool, int mesh_ndim, dt_placement *pl) {
  for (int m = mesh_ndim - 1; m >= 0; m--) {
    pl[m] = pool[k % n_pool];
    k /= n_pool;
  }
}

static bool has_partial(int mesh_ndim, const dt_placement *pl) {
  for (int m = 0; m < mesh_ndim; m++) {
    if (pl[m].kind == DT_PARTIAL) return true;
  }
  return false;
}

static const char *tuple_text(int mesh_ndim, const dt_placement *pl, char *buf, size_t size) {
  size_t used = 0;
  buf[0] = '\0';
  for (int m = 0; m < mesh_ndim && used < size; m++) {
    char one[32];
    used += (size_t)snprintf(buf + used, size - used, "%s%s", m ? "," : "",
                             dt_placement_format(pl[m], one, sizeof one));
  }
  return buf;
}

/* This rank's shard of t (a tuple without Partial) is the naive slice of full. */
static dt_status shard_is_naive(const char *what, dt_tensor *t, dt_tensor *full,
                                const sweep_case *c, const dt_placement *pl, const int *coord) {
  dt_placement norm[DT_MESH_MAX_DIMS];
  for (int m = 0; m < c->mesh_ndim; m++) {
    norm[m] = pl[m];
    if ((norm[m].kind == DT_SHARD || norm[m].kind == DT_STRIDED_SHARD) && norm[m].dim < 0)
      norm[m].dim += c->ndim;
  }
  double *v = ref_values(full);
  dt_tensor *expect = naive_shard(c->ndim, c->shape, v, c->mesh_ndim, norm, c->mesh_shape, coord);
  free(v);
  dt_tensor *local = NULL;
  RANK_OK(dt_dist_to_local(t, &local));
  dt_status st = DT_OK;
  for (int d = 0; d < c->ndim && !st; d++) {
    if (dt_tensor_shape(local)[d] != dt_tensor_shape(expect)[d])
      st = dt__error(DT_ERR_INTERNAL, "%s: local dim %d is %lld, expected %lld", what, d,
                     (long long)dt_tensor_shape(local)[d], (long long)dt_tensor_shape(expect)[d]);
  }
  if (!st) st = same_values_tol(what, local, expect, 0);
  RELEASE_ALL(local, expect);
  return st;
}

/* x to every target: explain and redistribute agree on the status and the bytes, and the
 * values are kept. */
static dt_status moves_checked(const char *from, dt_tensor *x, dt_tensor *full, const sweep_case *c,
                               const int *coord) {
  dt_placement pool[POOL_MAX], dst[3];
  int n_pool = target_pool(c->ndim, c->mesh_ndim, pool), n_targets = 1;
  for (int m = 0; m < c->mesh_ndim; m++) n_targets *= n_pool;
  for (int j = 0; j < n_targets; j++) {
    char b[100], what[220], plan[512];
    tuple_of(j, n_pool, pool, c->mesh_ndim, dst);
    snprintf(what, sizeof what, "%.100s -> [%s]", from, tuple_text(c->mesh_ndim, dst, b, sizeof b));
    int64_t explained = -1;
    dt_status se =
        dt_dist_redistribute_explain(x, c->mesh_ndim, dst, plan, sizeof plan, &explained);
    dt_comm_ledger *l = NULL;
    ledger_counts n;
    dt_tensor *y = NULL;
    LEDGER_BEGIN(l);
    dt_status sr = dt_dist_redistribute(x, c->mesh_ndim, dst, &y);
    LEDGER_END(l, n);
    RANK_CHECK(se == sr, "%s: explain says %s, redistribute %s (%s)", what, dt_status_string(se),
               dt_status_string(sr), dt_last_error());
    if (sr) {
      RANK_CHECK(y == NULL && n.calls == 0, "%s: failed after communicating", what);
      continue;
    }
    RANK_CHECK(n.bytes == explained, "%s: ledger %lld bytes, explain %lld (%.150s)", what,
               (long long)n.bytes, (long long)explained, plan);
    dt_status st =
        has_partial(c->mesh_ndim, dst) ? DT_OK : shard_is_naive(what, y, full, c, dst, coord);
    if (!st) st = full_equals_tol(what, y, full, 0);
    dt_tensor_release(y);
    if (st) return st;
  }
  return DT_OK;
}

static dt_status sweep_rank(dt_comm *world, void *arg) {
  const sweep_case *c = arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, c->mesh_ndim, c->mesh_shape, NULL, &mesh));
  int coord[3] = {0, 0, 0};
  for (int m = 0; m < c->mesh_ndim; m++) coord[m] = dt_mesh_coordinate(mesh, m);
  dt_placement pool[POOL_MAX], src[3], dst[3];
  int n_pool = source_pool(c->ndim, c->mesh_ndim, pool), n_tuples = 1;
  dt_placement tpool[POOL_MAX];
  int n_tpool = target_pool(c->ndim, c->mesh_ndim, tpool), n_targets = 1;
  for (int m = 0; m < c->mesh_ndim; m++) n_tuples *= n_pool, n_targets *= n_tpool;
  dt_tensor *full = iota(c->ndim, c->shape);
  char a[100], b[100];
  for (int i = 0; i < n_tuples; i++) {
    tuple_of(i, n_pool, pool, c->mesh_ndim, src);
    tuple_text(c->mesh_ndim, src, a, sizeof a);
    dt_tensor *x = NULL, *back = NULL, *local = NULL;
    bool allowed = rules_allow(c->ndim, c->shape, c->mesh_ndim, c->mesh_shape, src);
    dt_status st = dt_dist_distribute_tensor(mesh, full, c->mesh_ndim, src, &x);
    if (st) {
      RANK_CHECK(!allowed, "distribute [%s]: refused a tuple the rules allow: %s", a,
                 dt_last_error());
      RANK_CHECK(x == NULL, "distribute [%s]: failed but wrote *out", a);
      RANK_CHECK(strstr(dt_last_error(), "dt_dist_distribute_tensor"),
                 "distribute [%s]: message does not name the function: %s", a, dt_last_error());
      continue;
    }
    RANK_CHECK(allowed, "distribute [%s]: accepted a tuple the rules refuse", a);
    RANK_OK(shard_is_naive(a, x, full, c, src, coord));
    RANK_OK(full_equals_tol(a, x, full, 0));
    /* from_local of the same shard, with the global shape, is the same tensor. */
    RANK_OK(dt_dist_to_local(x, &local));
    dt_dist_from_local_options opt = {.global_shape = c->shape, .global_ndim = c->ndim};
    RANK_OK(dt_dist_from_local(mesh, local, c->mesh_ndim, src, &opt, &back));
    RANK_OK(full_equals_tol(a, back, full, 0));
    RELEASE_ALL(local, back);
    for (int j = 0; j < n_targets; j++) {
      tuple_of(j, n_tpool, tpool, c->mesh_ndim, dst);
      tuple_text(c->mesh_ndim, dst, b, sizeof b);
      char plan[512];
      int64_t explained = -1;
      dt_status se =
          dt_dist_redistribute_explain(x, c->mesh_ndim, dst, plan, sizeof plan, &explained);
      dt_comm_ledger *l = NULL;
      ledger_counts n;
      dt_tensor *y = NULL;
      LEDGER_BEGIN(l);
      dt_status sr = dt_dist_redistribute(x, c->mesh_ndim, dst, &y);
      LEDGER_END(l, n);
      RANK_CHECK(se == sr, "[%s] -> [%s]: explain says %s, redistribute %s (%s)", a, b,
                 dt_status_string(se), dt_status_string(sr), dt_last_error());
      if (sr) {
        RANK_CHECK(y == NULL && n.calls == 0, "[%s] -> [%s]: failed after communicating", a, b);
        RANK_CHECK(strstr(dt_last_error(), "dt_dist_redistribute"),
                   "[%s] -> [%s]: message does not name the function: %s", a, b, dt_last_error());
        bool dst_allowed = rules_allow(c->ndim, c->shape, c->mesh_ndim, c->mesh_shape, dst);
        /* Refusing an allowed target is fine only as DT_ERR_UNSUPPORTED. */
        RANK_CHECK(!dst_allowed || sr == DT_ERR_UNSUPPORTED, "[%s] -> [%s]: %s: %s", a, b,
                   dt_status_string(sr), dt_last_error());
        continue;
      }
      RANK_CHECK(n.bytes == explained, "[%s] -> [%s]: ledger %lld bytes, explain %lld (%.200s)", a,
                 b, (long long)n.bytes, (long long)explained, plan);
      char what[256];
      snprintf(what, sizeof what, "[%s] -> [%s]", a, b);
      if (!has_partial(c->mesh_ndim, dst)) RANK_OK(shard_is_naive(what, y, full, c, dst, coord));
      RANK_OK(full_equals_tol(what, y, full, 0));
      /* From a Partial (made from the replicated source): to every target. */
      if (i == 0 && has_partial(c->mesh_ndim, dst)) RANK_OK(moves_checked(what, y, full, c, coord));
      dt_tensor_release(y);
    }
    dt_tensor_release(x);
  }
  dt_tensor_release(full);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(strided_sweep, strided_sweep_1d_mesh) {
  sweep_case cases[] = {
      {1, {4, 1}, 1, {0, 1}},  {1, {4, 1}, 1, {6, 1}}, {1, {4, 1}, 1, {8, 1}},
      {1, {4, 1}, 1, {12, 1}}, {1, {4, 1}, 2, {6, 4}}, {1, {4, 1}, 2, {3, 0}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) SPAWN_OK(4, sweep_rank, &cases[i]);
}

Test(strided_sweep, strided_sweep_2x2) {
  sweep_case cases[] = {
      {2, {2, 2}, 1, {8, 1}}, {2, {2, 2}, 1, {12, 1}}, {2, {2, 2}, 1, {6, 1}},
      {2, {2, 2}, 2, {4, 6}}, {2, {2, 2}, 1, {9, 1}},  {2, {2, 2}, 2, {5, 4}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) SPAWN_OK(4, sweep_rank, &cases[i]);
}

Test(strided_sweep, strided_sweep_2x3_and_1x4) {
  sweep_case cases[] = {
      {2, {2, 3}, 1, {12, 1}},
      {2, {2, 3}, 2, {4, 6}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) SPAWN_OK(6, sweep_rank, &cases[i]);
  sweep_case narrow = {2, {1, 4}, 2, {2, 8}};
  SPAWN_OK(4, sweep_rank, &narrow);
}

Test(strided_sweep, strided_sweep_2x2x2) {
  sweep_case cases[] = {
      {3, {2, 2, 2}, 1, {16, 1}},
      {3, {2, 2, 2}, 1, {12, 1}},
      {3, {2, 2, 2}, 2, {8, 6}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) SPAWN_OK(8, sweep_rank, &cases[i]);
}

/* ---- Explicit bad StridedShards: every entry point names itself, the placement and the shape */

typedef struct bad_ss {
  int ndim;
  int64_t shape[2];
  dt_placement p;
  const char *needle; /* in the message besides the function's name */
} bad_ss;

static dt_status explicit_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  RANK_OK(mesh_1d(world, &mesh));
  static const bad_ss cases[] = {
      {0, {1, 1}, {DT_STRIDED_SHARD, 0, DT_REDUCE_SUM, 2}, "the tensor has 0 dims"},
      {1, {8, 1}, {DT_STRIDED_SHARD, 0, DT_REDUCE_SUM, 0}, "split factor must be >= 1"},
      {1, {8, 1}, {DT_STRIDED_SHARD, 0, DT_REDUCE_SUM, -1}, "split factor must be >= 1"},
      {1, {8, 1}, {DT_STRIDED_SHARD, 0, DT_REDUCE_SUM, 3}, "has 8 elements"},
      {1, {8, 1}, {DT_STRIDED_SHARD, 0, DT_REDUCE_SUM, 16}, "has 8 elements"},
      {1, {8, 1}, {DT_STRIDED_SHARD, 0, DT_REDUCE_SUM, 2147483647}, "has 8 elements"},
      {1, {8, 1}, {DT_STRIDED_SHARD, 1, DT_REDUCE_SUM, 2}, "the tensor has 1 dims"},
      {1, {8, 1}, {DT_STRIDED_SHARD, -2147483647 - 1, DT_REDUCE_SUM, 2}, "the tensor has 1 dims"},
      {2, {4, 6}, {DT_STRIDED_SHARD, -1, DT_REDUCE_SUM, 4}, "has 6 elements"},
  };
  int64_t one = 1;
  dt_tensor *ok = NULL, *scalar_ok = NULL;
  RANK_OK(dt_dist_constant(mesh, 2, (int64_t[]){4, 6}, 1, DT_F32, 1,
                           (dt_placement[]){dt_replicate()}, &ok));
  RANK_OK(
      dt_dist_constant(mesh, 1, &one, 1, DT_F32, 1, (dt_placement[]){dt_replicate()}, &scalar_ok));
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const bad_ss *c = &cases[i];
    dt_tensor *full = NULL, *out = NULL, *local = NULL;
    RANK_OK(dt_full(c->ndim, c->shape, 1, DT_F32, &full));
    struct {
      const char *fn;
      dt_status st;
    } calls[4];
    calls[0].fn = "dt_dist_distribute_tensor";
    calls[0].st = dt_dist_distribute_tensor(mesh, full, 1, &c->p, &out);
    char msg[4][400];
    snprintf(msg[0], sizeof msg[0], "%s", dt_last_error());
    calls[1].fn = "dt_dist_constant";
    calls[1].st = dt_dist_constant(mesh, c->ndim, c->shape, 1, DT_F32, 1, &c->p, &out);
    snprintf(msg[1], sizeof msg[1], "%s", dt_last_error());
    calls[2].fn = "dt_dist_from_local";
    dt_dist_from_local_options o = {.global_shape = c->shape, .global_ndim = c->ndim};
    RANK_OK(dt_full(c->ndim, c->shape, 1, DT_F32, &local));
    calls[2].st = dt_dist_from_local(mesh, local, 1, &c->p, &o, &out);
    snprintf(msg[2], sizeof msg[2], "%s", dt_last_error());
    calls[3].fn = "dt_dist_redistribute";
    dt_tensor *src = c->ndim == 2 ? ok : c->ndim == 1 ? NULL : NULL;
    dt_tensor *made = NULL;
    if (!src) { /* a replicated tensor of the case's shape */
      RANK_OK(dt_dist_constant(mesh, c->ndim, c->shape, 1, DT_F32, 1,
                               (dt_placement[]){dt_replicate()}, &made));
      src = made;
    }
    calls[3].st = dt_dist_redistribute(src, 1, &c->p, &out);
    snprintf(msg[3], sizeof msg[3], "%s", dt_last_error());
    char plan[256];
    dt_status se = dt_dist_redistribute_explain(src, 1, &c->p, plan, sizeof plan, NULL);
    RANK_CHECK(se == DT_ERR_INVALID && strstr(dt_last_error(), "dt_dist_redistribute_explain") &&
                   strstr(dt_last_error(), c->needle),
               "case %zu: explain: %s: %.300s", i, dt_status_string(se), dt_last_error());
    for (int k = 0; k < 4; k++) {
      RANK_CHECK(calls[k].st == DT_ERR_INVALID && strstr(msg[k], calls[k].fn) &&
                     strstr(msg[k], "placement 0") && strstr(msg[k], c->needle),
                 "case %zu: %s: %s: %.300s", i, calls[k].fn, dt_status_string(calls[k].st), msg[k]);
    }
    RANK_CHECK(out == NULL, "case %zu: *out written on failure", i);
    RELEASE_ALL(full, local, made);
  }
  RELEASE_ALL(ok, scalar_ok);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(strided_sweep, strided_errors_name_function_placement_and_shape) {
  SPAWN_OK(4, explicit_rank, NULL);
}

/* ---- Ops on StridedShard inputs equal the same ops on the whole tensors --------------------- */

#define NOPS 40
/* Op k of the sweep on x [A, B], y [A, B] and col [B, 3]; *name says which. */
static dt_status strided_op(int k, dt_tensor *x, dt_tensor *y, dt_tensor *col, dt_tensor **out,
                            const char **name) {
  int64_t d0 = 0, d1 = 1, both[2] = {0, 1};
  int64_t A = dt_dist_ndim(x) ? dt_dist_global_shape(x)[0] : 0, B = dt_dist_global_shape(x)[1];
  dt_tensor *tmp = NULL, *parts[4] = {0};
  dt_status st;
  switch (k) {
  case 0: *name = "neg"; return dt_neg(x, out);
  case 1: *name = "exp"; return dt_exp(x, out);
  case 2: *name = "add x y"; return dt_add(x, y, out);
  case 3: *name = "mul x y"; return dt_mul(x, y, out);
  case 4: *name = "maximum x y"; return dt_maximum(x, y, out);
  case 5: *name = "sum 0"; return dt_sum_dims(x, 1, &d0, false, out);
  case 6: *name = "sum 1"; return dt_sum_dims(x, 1, &d1, false, out);
  case 7: *name = "sum all"; return dt_sum_dims(x, 2, both, false, out);
  case 8: *name = "mean 0 keep"; return dt_mean_dims(x, 1, &d0, true, out);
  case 9: *name = "amax 0"; return dt_amax(x, 1, &d0, false, out);
  case 10: *name = "amin 1"; return dt_amin(x, 1, &d1, false, out);
  case 11: *name = "softmax 0"; return dt_softmax(x, 0, out);
  case 12: *name = "log_softmax 1"; return dt_log_softmax(x, 1, out);
  case 13:
    *name = "view flat";
    {
      int64_t s = A * B;
      return dt_view(x, 1, &s, out);
    }
  case 14:
    *name = "reshape [B,A]";
    {
      int64_t s[2] = {B, A};
      return dt_reshape(x, 2, s, out);
    }
  case 15: *name = "transpose"; return dt_transpose(x, 0, 1, out);
  case 16: *name = "mm x col"; return dt_mm(x, col, out);
  case 17:
    *name = "mm xT x";
    st = dt_transpose(x, 0, 1, &tmp);
    if (!st) st = dt_mm(tmp, x, out);
    dt_tensor_release(tmp);
    return st;
  case 18: *name = "cat 0 x y"; return dt_cat(2, (dt_tensor *[]){x, y}, 0, out);
  case 19: *name = "cat 1 x y"; return dt_cat(2, (dt_tensor *[]){x, y}, 1, out);
  case 20: *name = "stack 1"; return dt_stack(2, (dt_tensor *[]){x, y}, 1, out);
  case 21: *name = "narrow 0 1 2"; return dt_narrow(x, 0, A > 2 ? 1 : 0, A > 2 ? 2 : A, out);
  case 22: *name = "slice 0 step 2"; return dt_slice(x, 0, 0, A, 2, out);
  case 23: *name = "select 0 1"; return A > 1 ? dt_select(x, 0, 1, out) : dt_neg(x, out);
  case 24: *name = "unsqueeze 1"; return dt_unsqueeze(x, 1, out);
  case 25: *name = "gt x y"; return dt_gt(x, y, out);
  case 26:
    *name = "where";
    st = dt_gt(x, y, &tmp);
    if (!st) st = dt_where(tmp, x, y, out);
    dt_tensor_release(tmp);
    return st;
  case 27: *name = "clone"; return dt_clone(x, out);
  case 28:
    *name = "contiguous of transpose";
    st = dt_transpose(x, 0, 1, &tmp);
    if (!st) st = dt_contiguous(tmp, out);
    dt_tensor_release(tmp);
    return st;
  case 29: *name = "to f64"; return dt_to(x, DT_F64, out);
  case 30: *name = "argmax_dim 0"; return dt_argmax_dim(x, 0, false, out);
  case 31:
    *name = "max_dim 1 values";
    {
      dt_tensor *idx = NULL;
      st = dt_max_dim(x, 1, false, out, &idx);
      dt_tensor_release(idx);
      return st;
    }
  case 32:
    *name = "split 0 chunk0";
    {
      int n = 0;
      st = dt_chunk(x, 2, 0, parts, 4, &n);
      if (!st) {
        *out = parts[0];
        for (int i = 1; i < n; i++) dt_tensor_release(parts[i]);
      }
      return st;
    }
  case 33:
    *name = "add col-broadcast";
    {
      dt_tensor *r = NULL;
      st = dt_sum_dims(y, 1, &d0, true, &r);
      if (!st) st = dt_add(x, r, out);
      dt_tensor_release(r);
      return st;
    }
  case 34:
    *name = "flatten then view back";
    {
      int64_t s = A * B, s2[2] = {A, B};
      st = dt_view(x, 1, &s, &tmp);
      if (!st) st = dt_view(tmp, 2, s2, out);
      dt_tensor_release(tmp);
      return st;
    }
  case 35:
    *name = "flatten + y flat";
    {
      int64_t s = A * B;
      dt_tensor *fy = NULL;
      st = dt_view(x, 1, &s, &tmp);
      if (!st) st = dt_reshape(y, 1, &s, &fy);
      if (!st) st = dt_add(tmp, fy, out);
      RELEASE_ALL(tmp, fy);
      return st;
    }
  case 36: *name = "layer_norm B"; return dt_layer_norm(x, 1, &B, NULL, NULL, 1e-5, out);
  case 37:
    *name = "sum flat";
    {
      int64_t s = A * B;
      st = dt_view(x, 1, &s, &tmp);
      if (!st) st = dt_sum_dims(tmp, 1, &d0, false, out);
      dt_tensor_release(tmp);
      return st;
    }
  case 38:
    *name = "amax flat";
    {
      int64_t s = A * B;
      st = dt_view(x, 1, &s, &tmp);
      if (!st) st = dt_amax(tmp, 1, &d0, false, out);
      dt_tensor_release(tmp);
      return st;
    }
  case 39:
    *name = "softmax flat";
    {
      int64_t s = A * B;
      st = dt_view(x, 1, &s, &tmp);
      if (!st) st = dt_softmax(tmp, 0, out);
      dt_tensor_release(tmp);
      return st;
    }
  }
  return DT_ERR_INTERNAL;
}

typedef struct ops_case {
  int mesh_ndim;
  int mesh[2];
  int64_t rows, cols;
  dt_placement px[2], py[2];
} ops_case;

static dt_status strided_ops_rank(dt_comm *world, void *arg) {
  const ops_case *c = arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, c->mesh_ndim, c->mesh, NULL, &mesh));
  int64_t shape[2] = {c->rows, c->cols}, col_shape[2] = {c->cols, 3};
  dt_tensor *wx = ramp_f32(2, shape, 1), *wy = ramp_f32(2, shape, 2),
            *wc = ramp_f32(2, col_shape, 3);
  dt_tensor *x = NULL, *y = NULL, *col = NULL;
  RANK_OK(dt_dist_distribute_tensor(mesh, wx, c->mesh_ndim, c->px, &x));
  RANK_OK(dt_dist_distribute_tensor(mesh, wy, c->mesh_ndim, c->py, &y));
  RANK_OK(dt_dist_distribute_tensor(mesh, wc, c->mesh_ndim,
                                    (dt_placement[]){dt_replicate(), dt_replicate()}, &col));
  char a[64], b[64];
  tuple_text(c->mesh_ndim, c->px, a, sizeof a);
  tuple_text(c->mesh_ndim, c->py, b, sizeof b);
  for (int k = 0; k < NOPS; k++) {
    dt_tensor *dist = NULL, *local = NULL;
    const char *name = "";
    dt_status sd = strided_op(k, x, y, col, &dist, &name);
    char msg[300];
    snprintf(msg, sizeof msg, "%s", sd ? dt_last_error() : "");
    RANK_OK(strided_op(k, wx, wy, wc, &local, &name));
    RANK_CHECK(sd == DT_OK, "[%lld, %lld] x [%s] y [%s] %s: %s", (long long)c->rows,
               (long long)c->cols, a, b, name, msg);
    char what[200];
    snprintf(what, sizeof what, "[%lld, %lld] x [%s] y [%s] %s", (long long)c->rows,
             (long long)c->cols, a, b, name);
    dt_tensor *expect = NULL;
    RANK_OK(dt_contiguous(local, &expect));
    dt_status st = full_equals_tol(what, dist, expect, 1e-5);
    RELEASE_ALL(dist, local, expect);
    if (st) return st;
  }
  RELEASE_ALL(wx, wy, wc, x, y, col);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

#define SS dt_strided_shard
Test(strided_sweep, ops_on_strided_inputs_equal_ops_on_wholes) {
  const dt_placement R = dt_replicate(), S0 = dt_shard(0), S1 = dt_shard(1);
  const ops_case cases[] = {
      {1, {4, 1}, 6, 4, {SS(0, 2)}, {R}},
      {1, {4, 1}, 6, 4, {SS(0, 3)}, {S0}},
      {1, {4, 1}, 6, 4, {SS(0, 2)}, {SS(0, 2)}},
      {1, {4, 1}, 6, 4, {SS(0, 2)}, {SS(0, 3)}},
      {1, {4, 1}, 6, 4, {SS(1, 2)}, {S1}},
      {1, {4, 1}, 10, 6, {SS(0, 5)}, {SS(1, 3)}},
      {1, {4, 1}, 4, 12, {SS(1, 4)}, {R}},
      {2, {2, 2}, 8, 4, {S0, SS(0, 2)}, {R, R}},
      {2, {2, 2}, 8, 4, {S0, SS(0, 2)}, {S0, S0}},
      {2, {2, 2}, 8, 4, {S0, SS(0, 2)}, {S0, SS(0, 2)}},
      {2, {2, 2}, 8, 6, {SS(0, 2), S1}, {S1, SS(0, 4)}},
      {2, {2, 2}, 8, 6, {S1, SS(0, 4)}, {S0, SS(1, 3)}},
      {2, {2, 2}, 4, 12, {S1, SS(1, 3)}, {S1, S1}},
      {2, {2, 2}, 6, 4, {S0, SS(0, 3)}, {R, S0}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    SPAWN_OK(4, strided_ops_rank, (void *)&cases[i]);
}
