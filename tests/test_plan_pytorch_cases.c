/* Never more communication than PyTorch (issue 43 item 4): the patterns where a differential
 * run against PyTorch DTensor found this library moving more bytes, each on its exact case.
 * Every rank runs the op on distributed inputs under a comm ledger and checks the bytes it
 * moved against PyTorch's plan (or a cheaper one), then the values of the full output against
 * the op on the whole tensors. Ranks are threads (dt_comm_spawn). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_helpers.h"
/* Private header: the propagator's predicted bytes for the argmax candidates (internal). */
#include "distributed/propagate_impl.h"
#include "reference.h"

#define MAX_IN 4

/* Placements as constant initializers (the dt_shard() helpers are functions). */
#define R_                                                                                         \
  { DT_REPLICATE, 0, DT_REDUCE_SUM, 0 }
#define S_(d)                                                                                      \
  { DT_SHARD, d, DT_REDUCE_SUM, 0 }
#define P_SUM                                                                                      \
  { DT_PARTIAL, 0, DT_REDUCE_SUM, 0 }

/* The op under test on tensors in[0..n): distributed ones on the ranks, whole ones for the
 * reference. */
typedef dt_status (*op_fn)(dt_tensor **in, dt_tensor **out);

typedef struct input {
  int ndim;
  int64_t shape[4];
  dt_placement placements[2];
  int64_t index_bound; /* > 0: an int64 index tensor with values in [0, index_bound) */
} input;

typedef struct op_case {
  const char *name;
  int mesh_ndim;
  int mesh[2];
  int n_in;
  input in[MAX_IN];
  op_fn fn;
  /* The most bytes any rank may move: PyTorch's plan on this case, or less. */
  int64_t max_bytes;
} op_case;

static dt_tensor *whole_input(const input *x, int k) {
  if (x->index_bound > 0)
    return ref_random(x->ndim, x->shape, DT_I64, 0, (double)x->index_bound, 40 + (uint64_t)k);
  return ref_random(x->ndim, x->shape, DT_F32, -2, 2, 30 + (uint64_t)k);
}

/* x placed as asked: distributed with every Partial replaced by Replicate, then moved to the
 * Partial locally (R -> P moves nothing; the full tensor is unchanged). */
static dt_status placed(dt_mesh *mesh, int mesh_ndim, const input *x, dt_tensor *full,
                        dt_tensor **out) {
  dt_placement first[2];
  for (int m = 0; m < mesh_ndim; m++)
    first[m] = x->placements[m].kind == DT_PARTIAL ? dt_replicate() : x->placements[m];
  dt_tensor *t = NULL;
  dt_status st = dt_dist_distribute_tensor(mesh, full, mesh_ndim, first, &t);
  if (st) return st;
  st = dt_dist_redistribute(t, mesh_ndim, x->placements, out);
  dt_tensor_release(t);
  return st;
}

static dt_status case_rank(dt_comm *world, void *arg) {
  const op_case *c = arg;
  int rank = dt_comm_rank(world);
  dt_mesh *mesh = NULL;
  dt_tensor *whole[MAX_IN] = {NULL}, *dist[MAX_IN] = {NULL};
  dt_tensor *out = NULL, *expect = NULL, *full = NULL;
  RANK_OK(dt_mesh_create(world, c->mesh_ndim, c->mesh, NULL, &mesh));
  for (int k = 0; k < c->n_in; k++) {
    whole[k] = whole_input(&c->in[k], k);
    RANK_OK(placed(mesh, c->mesh_ndim, &c->in[k], whole[k], &dist[k]));
  }
  RANK_OK(c->fn(whole, &expect));
  dt_comm_ledger *ledger = NULL;
  RANK_OK(dt_comm_ledger_start(&ledger));
  dt_status st = c->fn(dist, &out);
  RANK_OK(dt_comm_ledger_stop(ledger));
  char table[2048];
  RANK_OK(dt_comm_ledger_format(ledger, table, sizeof table));
  int64_t moved = dt_comm_ledger_bytes(ledger, NULL);
  dt_comm_ledger_destroy(ledger);
  RANK_OK(st);
  RANK_CHECK(moved <= c->max_bytes, "%s, rank %d: moved %lld bytes, PyTorch's plan %lld\n%.300s",
             c->name, rank, (long long)moved, (long long)c->max_bytes, table);
  RANK_OK(dt_dist_full_tensor(out, &full));
  RANK_CHECK(full->ndim == expect->ndim && dt_tensor_numel(full) == dt_tensor_numel(expect),
             "%s: output of %d dims and %lld elements, expected %d and %lld", c->name, full->ndim,
             (long long)dt_tensor_numel(full), expect->ndim, (long long)dt_tensor_numel(expect));
  double *got = ref_values(full), *want = ref_values(expect);
  for (int64_t i = 0; i < dt_tensor_numel(expect); i++) {
    RANK_CHECK(fabs(got[i] - want[i]) <= 1e-5 * (1 + fabs(want[i])),
               "%s, rank %d: element %lld is %g, expected %g", c->name, rank, (long long)i, got[i],
               want[i]);
  }
  free(got);
  free(want);
  for (int k = 0; k < c->n_in; k++) {
    dt_tensor_release(whole[k]);
    dt_tensor_release(dist[k]);
  }
  dt_tensor_release(out);
  dt_tensor_release(expect);
  dt_tensor_release(full);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

static void run_case(const op_case *c) {
  int world = c->mesh_ndim == 1 ? c->mesh[0] : c->mesh[0] * c->mesh[1];
  cr_assert_eq(dt_comm_spawn(world, case_rank, (void *)c), DT_OK, "%s: %s", c->name,
               dt_last_error());
}

/* ---- The ops ------------------------------------------------------------------------------ */

static dt_status expand_rows(dt_tensor **in, dt_tensor **out) {
  return dt_expand(in[0], 2, (int64_t[]){7, 5}, out);
}

/* expand is linear: a Partial(sum) [1, 5] expanded to [7, 5] stays Partial (PyTorch: 0 bytes;
 * reducing it first moved 20). */
Test(plan_pytorch, expand_of_partial_sum) {
  op_case c = {"expand of P(sum)", 1, {3}, 1, {{2, {1, 5}, {P_SUM}, 0}}, expand_rows, 0};
  run_case(&c);
}

static dt_status narrow_8_rows(dt_tensor **in, dt_tensor **out) {
  return dt_narrow(in[0], 0, 0, 8, out);
}
static dt_status narrow_7_rows(dt_tensor **in, dt_tensor **out) {
  return dt_narrow(in[0], 0, 0, 7, out);
}
static dt_status narrow_7_from_end(dt_tensor **in, dt_tensor **out) {
  return dt_narrow(in[0], 0, -7, 7, out);
}
static dt_status slice_all_rows(dt_tensor **in, dt_tensor **out) {
  return dt_slice(in[0], 0, 0, 7, 1, out);
}

/* A narrow or slice covering the whole sharded dim keeps every shard as it is (PyTorch: 0
 * bytes; gathering it first moved the whole tensor, 192 bytes for [8, 6]). */
Test(plan_pytorch, narrow_or_slice_of_the_whole_sharded_dim) {
  op_case cases[] = {
      {"narrow [8, 6] S(0)", 1, {4}, 1, {{2, {8, 6}, {S_(0)}, 0}}, narrow_8_rows, 0},
      {"narrow [7, 5] S(0)", 1, {4}, 1, {{2, {7, 5}, {S_(0)}, 0}}, narrow_7_rows, 0},
      {"narrow -7 [7, 5] S(0)", 1, {4}, 1, {{2, {7, 5}, {S_(0)}, 0}}, narrow_7_from_end, 0},
      {"slice [7, 6] [S(0), S(1)]",
       2,
       {2, 2},
       1,
       {{2, {7, 6}, {S_(0), S_(1)}, 0}},
       slice_all_rows,
       0},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) run_case(&cases[k]);
}

static dt_status attention(dt_tensor **in, dt_tensor **out) {
  return dt_scaled_dot_product_attention(in[0], in[1], in[2], NULL, NULL, out, NULL);
}
static dt_status attention_masked(dt_tensor **in, dt_tensor **out) {
  return dt_scaled_dot_product_attention(in[0], in[1], in[2], in[3], NULL, out, NULL);
}

/* Queries sharded on the sequence with k, v replicated: each query shard runs against the
 * whole k and v (PyTorch: 0 bytes; an all_to_all of q to the batch dim moved 32). An additive
 * [T, S] mask sharded on its query dim follows. */
Test(plan_pytorch, attention_queries_sharded_on_the_sequence) {
  op_case cases[] = {
      {"attention q S(2)",
       1,
       {4},
       3,
       {{4, {1, 2, 8, 2}, {S_(2)}, 0}, {4, {1, 2, 8, 2}, {R_}, 0}, {4, {1, 2, 8, 3}, {R_}, 0}},
       attention,
       0},
      {"attention q S(2), uneven, mask S(0)",
       1,
       {4},
       4,
       {{4, {2, 2, 7, 2}, {S_(2)}, 0},
        {4, {2, 2, 5, 2}, {R_}, 0},
        {4, {2, 2, 5, 3}, {R_}, 0},
        {2, {7, 5}, {S_(0)}, 0}},
       attention_masked,
       0},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) run_case(&cases[k]);
}

/* Two heads over four ranks: ranks 2 and 3 hold no heads and run (PyTorch runs them). */
Test(plan_pytorch, attention_with_empty_head_shards) {
  op_case c = {
      "attention of 2 heads on 4 ranks",
      1,
      {4},
      3,
      {{4, {1, 2, 3, 2}, {S_(1)}, 0}, {4, {1, 2, 3, 2}, {S_(1)}, 0}, {4, {1, 2, 3, 2}, {S_(1)}, 0}},
      attention,
      0};
  run_case(&c);
}

static dt_status matmul(dt_tensor **in, dt_tensor **out) { return dt_matmul(in[0], in[1], out); }

/* matmul with a broadcast batch dim: [3, 1, 6, 4] S(0) @ [3, 4, 5] R is [3, 3, 6, 5], sharded
 * on dim 0 where only a spans it (PyTorch: 0 bytes; moving a to its rows moved 96). The
 * same with b's batch dim sharded and a broadcasting it. */
Test(plan_pytorch, matmul_with_a_broadcast_batch_dim) {
  op_case cases[] = {
      {"matmul [3,1,6,4] S(0) @ [3,4,5] R",
       1,
       {3},
       2,
       {{4, {3, 1, 6, 4}, {S_(0)}, 0}, {3, {3, 4, 5}, {R_}, 0}},
       matmul,
       0},
      {"matmul [3,1,6,4] R @ [3,4,5] S(0)",
       1,
       {3},
       2,
       {{4, {3, 1, 6, 4}, {R_}, 0}, {3, {3, 4, 5}, {S_(0)}, 0}},
       matmul,
       0},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) run_case(&cases[k]);
}

static dt_status amax_rows(dt_tensor **in, dt_tensor **out) {
  return dt_amax(in[0], 1, (int64_t[]){0}, false, out);
}

/* amax over a dim sharded unevenly on both mesh dims: [7, 6] on [S(0), S(0)] over 2 x 2 is
 * rows 2, 2, 2, 1, none empty, so each rank's amax is a Partial(max) (PyTorch: 0 bytes;
 * gathering the input moved 168). Also 5 rows (3, 2 -> 2, 1, 1, 1) on 2 x 2. */
Test(plan_pytorch, amax_over_a_dim_sharded_unevenly_on_both_mesh_dims) {
  op_case cases[] = {
      {"amax [7, 6] [S(0), S(0)]", 2, {2, 2}, 1, {{2, {7, 6}, {S_(0), S_(0)}, 0}}, amax_rows, 0},
      {"amax [5, 3] [S(0), S(0)]", 2, {2, 2}, 1, {{2, {5, 3}, {S_(0), S_(0)}, 0}}, amax_rows, 0},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) run_case(&cases[k]);
}

static dt_status mean_all(dt_tensor **in, dt_tensor **out) { return dt_mean(in[0], out); }
static dt_status mean_rows(dt_tensor **in, dt_tensor **out) {
  return dt_mean_dims(in[0], 1, (int64_t[]){0}, false, out);
}

/* mean over a dim sharded unevenly (3 rows over 2) on a 2-D mesh: the idle mesh dim slices a
 * dim that divides (6 over 3), so mesh dim 0 gathers a third of the tensor and the result is
 * a Partial(avg) on mesh dim 1 (PyTorch: 192 bytes, moving the shard to the mesh dim that
 * divides; gathering the whole tensor moved 432). */
Test(plan_pytorch, mean_over_an_uneven_shard_on_a_2d_mesh) {
  op_case cases[] = {
      {"mean [3, 6, 6] [S(0), R]", 2, {2, 3}, 1, {{3, {3, 6, 6}, {S_(0), R_}, 0}}, mean_all, 144},
      {"mean dim 0 [3, 6, 6] [S(0), R]",
       2,
       {2, 3},
       1,
       {{3, {3, 6, 6}, {S_(0), R_}, 0}},
       mean_rows,
       144},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) run_case(&cases[k]);
}

static dt_status gather_rows(dt_tensor **in, dt_tensor **out) {
  return dt_gather(in[0], 0, in[1], out);
}

/* gather along self's sharded dim with the index replicated: each shard gathers the indices
 * in its rows and zeros elsewhere, a Partial(sum) (PyTorch's masked partial: 0 bytes;
 * gathering self moved 96 for [6, 4] on 3 ranks). Also nested and uneven on 2 x 2. */
Test(plan_pytorch, gather_along_the_sharded_dim_of_self) {
  op_case cases[] = {
      {"gather [6, 4] S(0), index [5, 4] R",
       1,
       {3},
       2,
       {{2, {6, 4}, {S_(0)}, 0}, {2, {5, 4}, {R_}, 6}},
       gather_rows,
       0},
      {"gather [7, 3] [S(0), S(0)], index [9, 2] R",
       2,
       {2, 2},
       2,
       {{2, {7, 3}, {S_(0), S_(0)}, 0}, {2, {9, 2}, {R_, R_}, 7}},
       gather_rows,
       0},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) run_case(&cases[k]);
}

/* The masked gather still checks every index against self's global rows: 6 is out of range
 * for 6 rows on every rank, including those whose window would skip it. */
static dt_status gather_out_of_range_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){3}, NULL, &mesh));
  dt_tensor *self = ref_random(2, (int64_t[]){6, 4}, DT_F32, -2, 2, 3), *t = NULL, *out = NULL;
  dt_tensor *index = ref_tensor(2, (int64_t[]){1, 4}, DT_I64, (double[]){0, 6, 1, 2}), *ti = NULL;
  RANK_OK(dt_dist_distribute_tensor(mesh, self, 1, (dt_placement[]){dt_shard(0)}, &t));
  RANK_OK(dt_dist_distribute_tensor(mesh, index, 1, (dt_placement[]){dt_replicate()}, &ti));
  dt_status st = dt_gather(t, 0, ti, &out);
  RANK_CHECK(st == DT_ERR_INDEX && strstr(dt_last_error(), "index 6"), "gather returned %s: %s",
             dt_status_string(st), dt_last_error());
  RANK_CHECK(out == NULL, "a failed gather left an output");
  dt_tensor_release(self);
  dt_tensor_release(index);
  dt_tensor_release(t);
  dt_tensor_release(ti);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(plan_pytorch, masked_gather_refuses_an_index_out_of_range) {
  SPAWN_OK(3, gather_out_of_range_rank, NULL);
}

static dt_status rms_norm_last(dt_tensor **in, dt_tensor **out) {
  return dt_rms_norm(in[0], 1, (int64_t[]){6}, in[1], 1e-5, out);
}

/* rms_norm with a sharded weight and a replicated input: each shard normalizes whole rows
 * and scales its columns by its piece of the weight, the output Shard(1) (PyTorch: 0 bytes;
 * gathering the weight moved 24). On 2 x 2 the rows stay sharded on mesh dim 0 as well. */
Test(plan_pytorch, rms_norm_with_a_sharded_weight) {
  op_case cases[] = {
      {"rms_norm [5, 6] R, w [6] S(0)",
       1,
       {3},
       2,
       {{2, {5, 6}, {R_}, 0}, {1, {6}, {S_(0)}, 0}},
       rms_norm_last,
       0},
      {"rms_norm [5, 6] [S(0), R], w [6] [R, S(0)]",
       2,
       {2, 2},
       2,
       {{2, {5, 6}, {S_(0), R_}, 0}, {1, {6}, {R_, S_(0)}, 0}},
       rms_norm_last,
       0},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) run_case(&cases[k]);
}

static dt_status argmax_all(dt_tensor **in, dt_tensor **out) { return dt_argmax(in[0], out); }

/* argmax over every dim of a sharded tensor: each shard's winner (value, global index) is a
 * candidate, gathered along the mesh dims that shard it (PyTorch gathers per-shard candidates:
 * 96 bytes; gathering the [3, 2, 6, 5] tensor moved 720). Also nested and uneven on 2 x 2. */
Test(plan_pytorch, full_argmax_gathers_candidates) {
  op_case cases[] = {
      {"argmax [3, 2, 6, 5] [R, S(2)]",
       2,
       {2, 2},
       1,
       {{4, {3, 2, 6, 5}, {R_, S_(2)}, 0}},
       argmax_all,
       96},
      {"argmax [7, 3] [S(0), S(1)]",
       2,
       {2, 2},
       1,
       {{2, {7, 3}, {S_(0), S_(1)}, 0}},
       argmax_all,
       96},
      {"argmax [3, 2] S(0) on 4", 1, {4}, 1, {{2, {3, 2}, {S_(0)}, 0}}, argmax_all, 96},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) run_case(&cases[k]);
}

/* The propagator's prediction counts the candidates as the ledger does (2 x 16 bytes on
 * mesh dim 1 of 2 x 2). */
static dt_status argmax_predicted_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 2, (int[]){2, 2}, NULL, &mesh));
  dt_tensor *full = ref_random(2, (int64_t[]){6, 5}, DT_F32, -2, 2, 9), *t = NULL, *out = NULL;
  RANK_OK(
      dt_dist_distribute_tensor(mesh, full, 2, (dt_placement[]){dt_replicate(), dt_shard(1)}, &t));
  dt_tensor *outs[1] = {NULL};
  dt_op_call call = {
      .op = DT_OP_ARGMAX, .n_inputs = 1, .inputs = {t}, .n_outputs = 1, .outputs = outs};
  int64_t predicted = -1;
  RANK_OK(dt__dist_predict_bytes(&call, &predicted));
  dt_comm_ledger *ledger = NULL;
  RANK_OK(dt_comm_ledger_start(&ledger));
  RANK_OK(dt_argmax(t, &out));
  RANK_OK(dt_comm_ledger_stop(ledger));
  int64_t moved = dt_comm_ledger_bytes(ledger, NULL);
  dt_comm_ledger_destroy(ledger);
  RANK_CHECK(predicted == moved && moved == 32, "predicted %lld bytes, moved %lld (expected 32)",
             (long long)predicted, (long long)moved);
  dt_tensor_release(full);
  dt_tensor_release(t);
  dt_tensor_release(out);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(plan_pytorch, full_argmax_predicted_bytes_equal_the_ledger) {
  SPAWN_OK(4, argmax_predicted_rank, NULL);
}

/* t whole: the full tensor of a distributed one, else t itself (a new reference). */
static dt_status whole_of(dt_tensor *t, dt_tensor **out) {
  if (dt_tensor_is_distributed(t)) return dt_dist_full_tensor(t, out);
  *out = dt_tensor_retain(t);
  return DT_OK;
}

/* x's and w's gradients (whole) of sum(rms_norm(x, w)^2), a loss whose gradient depends on
 * every column. */
static dt_status rms_norm_grads(dt_tensor *x, dt_tensor *w, dt_tensor **gx, dt_tensor **gw) {
  dt_tensor *y = NULL, *sq = NULL, *loss = NULL, *g = NULL, *h = NULL;
  dt_status st = dt_tensor_set_requires_grad(x, true);
  if (!st) st = dt_tensor_set_requires_grad(w, true);
  if (!st) st = dt_rms_norm(x, 1, (int64_t[]){6}, w, 1e-5, &y);
  if (!st) st = dt_mul(y, y, &sq);
  if (!st) st = dt_sum(sq, &loss);
  if (!st) st = dt_backward(loss, NULL);
  if (!st) st = dt_tensor_grad(x, &g);
  if (!st) st = whole_of(g, gx);
  if (!st) st = dt_tensor_grad(w, &h);
  if (!st) st = whole_of(h, gw);
  dt_tensor_release(g);
  dt_tensor_release(h);
  dt_tensor_release(y);
  dt_tensor_release(sq);
  dt_tensor_release(loss);
  return st;
}

/* The gradients through the rewritten forward are the whole-tensor ones: x replicated, w
 * Shard(0) on 3 ranks. */
static dt_status rms_norm_backward_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){3}, NULL, &mesh));
  dt_tensor *x = ref_random(2, (int64_t[]){5, 6}, DT_F32, -2, 2, 11);
  dt_tensor *w = ref_random(1, (int64_t[]){6}, DT_F32, -2, 2, 12);
  dt_tensor *dx = NULL, *dw = NULL, *gx[2] = {NULL}, *gw[2] = {NULL};
  RANK_OK(dt_dist_distribute_tensor(mesh, x, 1, (dt_placement[]){dt_replicate()}, &dx));
  RANK_OK(dt_dist_distribute_tensor(mesh, w, 1, (dt_placement[]){dt_shard(0)}, &dw));
  RANK_OK(rms_norm_grads(x, w, &gx[0], &gw[0]));
  RANK_OK(rms_norm_grads(dx, dw, &gx[1], &gw[1]));
  for (int k = 0; k < 2; k++) {
    dt_tensor *want = k ? gw[0] : gx[0], *got = k ? gw[1] : gx[1];
    double *a = ref_values(got), *b = ref_values(want);
    for (int64_t i = 0; i < dt_tensor_numel(want); i++)
      RANK_CHECK(fabs(a[i] - b[i]) <= 1e-4 * (1 + fabs(b[i])), "%s grad element %lld: %g vs %g",
                 k ? "w" : "x", (long long)i, a[i], b[i]);
    free(a);
    free(b);
  }
  dt_tensor *all[] = {x, w, dx, dw, gx[0], gx[1], gw[0], gw[1]};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dt_tensor_release(all[i]);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(plan_pytorch, rms_norm_with_a_sharded_weight_backward) {
  SPAWN_OK(3, rms_norm_backward_rank, NULL);
}

/* q's, k's and v's gradients (whole) of sum(attention(q, k, v)^2). */
static dt_status attention_grads(dt_tensor **qkv, dt_tensor **grads) {
  dt_tensor *y = NULL, *sq = NULL, *loss = NULL;
  dt_status st = DT_OK;
  for (int i = 0; i < 3 && !st; i++) st = dt_tensor_set_requires_grad(qkv[i], true);
  if (!st) st = dt_scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], NULL, NULL, &y, NULL);
  if (!st) st = dt_mul(y, y, &sq);
  if (!st) st = dt_sum(sq, &loss);
  if (!st) st = dt_backward(loss, NULL);
  for (int i = 0; i < 3 && !st; i++) {
    dt_tensor *g = NULL;
    st = dt_tensor_grad(qkv[i], &g);
    if (!st) st = whole_of(g, &grads[i]);
    dt_tensor_release(g);
  }
  dt_tensor_release(y);
  dt_tensor_release(sq);
  dt_tensor_release(loss);
  return st;
}

/* Training through the sequence-sharded forward (q [1, 2, 7, 2] S(2), k and v replicated) and
 * through empty head shards (2 heads over 4 ranks): the gradients are the whole-tensor ones. */
static dt_status attention_backward_rank(dt_comm *world, void *arg) {
  bool heads = arg != NULL; /* else the sequence */
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){4}, NULL, &mesh));
  dt_tensor *whole[3], *dist[3], *want[3] = {NULL}, *got[3] = {NULL};
  for (int i = 0; i < 3; i++) {
    int64_t seq = heads ? 3 : i ? 5 : 7;
    whole[i] = ref_random(4, (int64_t[]){1, 2, seq, 2}, DT_F32, -2, 2, 20 + (uint64_t)i);
    dt_placement p = heads ? dt_shard(1) : i ? dt_replicate() : dt_shard(2);
    RANK_OK(dt_dist_distribute_tensor(mesh, whole[i], 1, &p, &dist[i]));
  }
  RANK_OK(attention_grads(whole, want));
  RANK_OK(attention_grads(dist, got));
  for (int k = 0; k < 3; k++) {
    double *a = ref_values(got[k]), *b = ref_values(want[k]);
    for (int64_t i = 0; i < dt_tensor_numel(want[k]); i++)
      RANK_CHECK(fabs(a[i] - b[i]) <= 1e-4 * (1 + fabs(b[i])), "grad %d element %lld: %g vs %g", k,
                 (long long)i, a[i], b[i]);
    free(a);
    free(b);
  }
  for (int i = 0; i < 3; i++) {
    dt_tensor_release(whole[i]);
    dt_tensor_release(dist[i]);
    dt_tensor_release(want[i]);
    dt_tensor_release(got[i]);
  }
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(plan_pytorch, attention_queries_sharded_on_the_sequence_backward) {
  SPAWN_OK(4, attention_backward_rank, NULL);
}

Test(plan_pytorch, attention_with_empty_head_shards_backward) {
  static int heads = 1;
  SPAWN_OK(4, attention_backward_rank, &heads);
}
