/* The propagator and the redistribution planner never move more than PyTorch's DTensor on
 * the patterns of issue 16: each case runs an op on distributed inputs (ranks are threads),
 * asserts the collectives and bytes the comm ledger counts on every rank and the output's
 * placements, and checks the values against the same op on the whole tensors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_helpers.h"
/* Private header: the planner's chosen placements: compared with dt__placements_equal. */
#include "distributed/propagate_impl.h"
#include "reference.h"

#define R_                                                                                         \
  { DT_REPLICATE, 0, DT_REDUCE_SUM, 0 }
#define S_(d)                                                                                      \
  { DT_SHARD, d, DT_REDUCE_SUM, 0 }
#define P_SUM                                                                                      \
  { DT_PARTIAL, 0, DT_REDUCE_SUM, 0 }

typedef dt_status (*op_fn)(dt_tensor *const *in, dt_tensor **out);

typedef struct planner_case {
  const char *name;
  op_fn fn;
  int mesh_ndim;
  int mesh[2];
  int n_in;
  int ndim[3];
  int64_t shape[3][2];
  dt_placement place[3][2];
  dt_dtype dtype;
  int64_t collectives; /* on every rank */
  int64_t bytes;       /* on every rank */
  dt_placement out[2]; /* the output's placements */
} planner_case;

/* A tensor of global shape `shape` placed `placements`: distributed with every Partial
 * replaced by Replicate, then moved to the Partial locally (S/R -> P move nothing). */
static dt_status placed(dt_mesh *mesh, int mesh_ndim, dt_tensor *full,
                        const dt_placement *placements, dt_tensor **out) {
  dt_placement first[2];
  for (int m = 0; m < mesh_ndim; m++)
    first[m] = placements[m].kind == DT_PARTIAL ? dt_replicate() : placements[m];
  dt_tensor *t = NULL;
  dt_status st = dt_dist_distribute_tensor(mesh, full, mesh_ndim, first, &t);
  if (st) return st;
  st = dt_dist_redistribute(t, mesh_ndim, placements, out);
  dt_tensor_release(t);
  return st;
}

static dt_status case_rank(dt_comm *world, void *arg) {
  const planner_case *c = arg;
  int rank = dt_comm_rank(world);
  dt_mesh *mesh = NULL;
  dt_tensor *full[3] = {NULL}, *in[3] = {NULL}, *out = NULL, *expect = NULL, *got = NULL;
  RANK_OK(dt_mesh_create(world, c->mesh_ndim, c->mesh, NULL, &mesh));
  for (int i = 0; i < c->n_in; i++) {
    full[i] = ref_random(c->ndim[i], c->shape[i], c->dtype, -2, 2, 11 + (uint64_t)i);
    RANK_OK(placed(mesh, c->mesh_ndim, full[i], c->place[i], &in[i]));
  }
  dt_comm_ledger *ledger = NULL;
  RANK_OK(dt_comm_ledger_start(&ledger));
  RANK_OK(c->fn(in, &out));
  RANK_OK(dt_comm_ledger_stop(ledger));
  int64_t calls = dt_comm_ledger_count(ledger, NULL);
  int64_t bytes = dt_comm_ledger_bytes(ledger, NULL);
  char table[1024];
  RANK_OK(dt_comm_ledger_format(ledger, table, sizeof table));
  dt_comm_ledger_destroy(ledger);
  RANK_CHECK(calls == c->collectives && bytes == c->bytes,
             "%s, rank %d: %lld collectives moving %lld bytes, expected %lld moving %lld\n%.200s",
             c->name, rank, (long long)calls, (long long)bytes, (long long)c->collectives,
             (long long)c->bytes, table);
  const dt_placement *p = dt_dist_placements(out);
  char a[32], b[32];
  for (int m = 0; m < c->mesh_ndim; m++) {
    RANK_CHECK(dt__placements_equal(1, &p[m], &c->out[m]),
               "%s: output placement on mesh dim %d is %s, expected %s", c->name, m,
               dt_placement_format(p[m], a, sizeof a), dt_placement_format(c->out[m], b, sizeof b));
  }
  /* The values: the same op on the whole tensors. */
  RANK_OK(c->fn(full, &expect));
  RANK_OK(dt_dist_full_tensor(out, &got));
  RANK_CHECK(dt_tensor_numel(got) == dt_tensor_numel(expect), "%s: %lld elements, expected %lld",
             c->name, (long long)dt_tensor_numel(got), (long long)dt_tensor_numel(expect));
  double *x = ref_values(got), *y = ref_values(expect);
  for (int64_t i = 0; i < dt_tensor_numel(got); i++) {
    RANK_CHECK(fabs(x[i] - y[i]) <= 1e-4 * (1 + fabs(y[i])), "%s: element %lld is %g, expected %g",
               c->name, (long long)i, x[i], y[i]);
  }
  free(x);
  free(y);
  dt_tensor_release(got);
  dt_tensor_release(expect);
  dt_tensor_release(out);
  for (int i = 0; i < c->n_in; i++) {
    dt_tensor_release(in[i]);
    dt_tensor_release(full[i]);
  }
  dt_mesh_destroy(mesh);
  return DT_OK;
}

static void run_case(const planner_case *c) {
  int world = c->mesh_ndim == 1 ? c->mesh[0] : c->mesh[0] * c->mesh[1];
  cr_assert_eq(dt_comm_spawn(world, case_rank, (void *)c), DT_OK, "%s: %s", c->name,
               dt_last_error());
}

/* ---- The ops ------------------------------------------------------------------------------ */

static dt_status op_redistribute_to_partial(dt_tensor *const *in, dt_tensor **out) {
  if (!dt_dist_mesh(in[0])) { /* the reference: the whole tensor is its own sum */
    *out = dt_tensor_retain(in[0]);
    return DT_OK;
  }
  return dt_dist_redistribute(in[0], 1, (dt_placement[]){dt_partial(DT_REDUCE_SUM)}, out);
}
static dt_status op_matmul(dt_tensor *const *in, dt_tensor **out) {
  return dt_matmul(in[0], in[1], out);
}
static dt_status op_cat0(dt_tensor *const *in, dt_tensor **out) { return dt_cat(2, in, 0, out); }
static dt_status op_stack3(dt_tensor *const *in, dt_tensor **out) {
  return dt_stack(3, in, 0, out);
}
static dt_status op_exp_amax(dt_tensor *const *in, dt_tensor **out) {
  dt_tensor *m = NULL;
  dt_status st = dt_amax(in[0], 1, (int64_t[]){0}, false, &m);
  if (!st) st = dt_exp(m, out);
  dt_tensor_release(m);
  return st;
}
static dt_status op_relu_add_amin(dt_tensor *const *in, dt_tensor **out) {
  dt_tensor *m = NULL, *s = NULL;
  dt_status st = dt_amin(in[0], 1, (int64_t[]){1}, false, &m);
  if (!st) st = dt_add_scalar(m, 0.25, &s);
  if (!st) st = dt_relu(s, out);
  dt_tensor_release(m);
  dt_tensor_release(s);
  return st;
}
static dt_status op_linear(dt_tensor *const *in, dt_tensor **out) {
  return dt_linear(in[0], in[1], in[2], out);
}
static dt_status op_addmm(dt_tensor *const *in, dt_tensor **out) {
  return dt_addmm(in[0], in[1], in[2], out);
}
static dt_status op_log_softmax1(dt_tensor *const *in, dt_tensor **out) {
  return dt_log_softmax(in[0], 1, out);
}

/* ---- 1. S(d) -> P(sum) is local ----------------------------------------------------------- */

Test(planner, shard_to_partial_sum_is_local) {
  /* [8, 6] and uneven [7, 5]: the shard in place, zeros elsewhere; nothing moves. */
  planner_case c = {"S(0) -> P(sum)",
                    op_redistribute_to_partial,
                    1,
                    {4},
                    1,
                    {2},
                    {{8, 6}},
                    {{S_(0)}},
                    DT_F32,
                    0,
                    0,
                    {P_SUM}};
  run_case(&c);
  planner_case uneven = {"S(1) -> P(sum) uneven",
                         op_redistribute_to_partial,
                         1,
                         {4},
                         1,
                         {2},
                         {{7, 5}},
                         {{S_(1)}},
                         DT_F32,
                         0,
                         0,
                         {P_SUM}};
  run_case(&uneven);
}

/* ---- 2. Contractions with a 1-D operand ---------------------------------------------------- */

Test(planner, dot_of_sharded_vectors_is_local) {
  /* Before: two all_gathers of [6] f32 (24 bytes each). Now a local dot, Partial(sum). */
  planner_case c = {"dot [6] S(0) . [6] S(0)", op_matmul, 1, {4}, 2,      {1, 1}, {{6}, {6}},
                    {{S_(0)}, {S_(0)}},        DT_F32,    0, 0,   {P_SUM}};
  run_case(&c);
  /* Matrix times vector: rows of the matrix stay sharded, the vector replicated. */
  planner_case mv = {"mv [8, 6] S(0) @ [6] R", op_matmul, 1, {4}, 2,      {2, 1}, {{8, 6}, {6}},
                     {{S_(0)}, {R_}},          DT_F32,    0, 0,   {S_(0)}};
  run_case(&mv);
  planner_case vm = {"vm [6] S(0) @ [6, 4] S(0)", op_matmul, 1, {2}, 2,      {1, 2}, {{6}, {6, 4}},
                     {{S_(0)}, {S_(0)}},          DT_F32,    0, 0,   {P_SUM}};
  run_case(&vm);
}

/* ---- 3. cat / stack ------------------------------------------------------------------------ */

Test(planner, cat_of_partials_stays_partial) {
  planner_case c = {"cat P(sum), P(sum)", op_cat0, 1, {4}, 2,      {2, 2}, {{4, 6}, {2, 6}},
                    {{P_SUM}, {P_SUM}},   DT_F32,  0, 0,   {P_SUM}};
  run_case(&c);
}

Test(planner, stack_keeps_the_shard_of_any_input) {
  /* [R, S(1), R]: the replicas are sliced locally; before, the shard was gathered. */
  planner_case c = {
      "stack R, S(1), R",    op_stack3, 1, {2}, 3,      {2, 2, 2}, {{4, 6}, {4, 6}, {4, 6}},
      {{R_}, {S_(1)}, {R_}}, DT_F32,    0, 0,   {S_(2)}};
  run_case(&c);
}

/* ---- 4. Monotone ops keep Partial(max|min) ------------------------------------------------- */

Test(planner, monotone_ops_keep_partial_max_and_min) {
  /* exp(amax(x, 0)) with x [8, 6] S(0): amax gives P(max), exp keeps it. Before: an
   * all_reduce of the [6] result. */
  planner_case c = {
      "exp(amax(x, 0))", op_exp_amax, 1,      {4}, 1, {2},
      {{8, 6}},          {{S_(0)}},   DT_F32, 0,   0, {{DT_PARTIAL, 0, DT_REDUCE_MAX, 0}}};
  run_case(&c);
  planner_case d = {"relu(amin(x, 1) + 0.25)",
                    op_relu_add_amin,
                    1,
                    {2},
                    1,
                    {2},
                    {{4, 6}},
                    {{S_(1)}},
                    DT_F32,
                    0,
                    0,
                    {{DT_PARTIAL, 0, DT_REDUCE_MIN, 0}}};
  run_case(&d);
}

/* ---- 6. linear / addmm with a Partial input ------------------------------------------------ */

Test(planner, linear_and_addmm_are_linear_in_each_operand) {
  /* linear(x P(sum) [4, 6], w R [8, 6], b R [8]): the bias becomes a Partial locally and the
   * output stays P(sum). Before: a reduce_scatter of x. */
  planner_case lin = {
      "linear P(sum) x, bias", op_linear, 1, {4}, 3,      {2, 2, 1}, {{4, 6}, {8, 6}, {8}},
      {{P_SUM}, {R_}, {R_}},   DT_F32,    0, 0,   {P_SUM}};
  run_case(&lin);
  planner_case w = {
      "linear P(sum) weight", op_linear, 1, {2}, 3,      {2, 2, 1}, {{4, 6}, {8, 6}, {8}},
      {{R_}, {P_SUM}, {R_}},  DT_F32,    0, 0,   {P_SUM}};
  run_case(&w);
  planner_case addmm = {
      "addmm P(sum) factor", op_addmm, 1, {4}, 3,      {1, 2, 2}, {{5}, {4, 6}, {6, 5}},
      {{R_}, {P_SUM}, {R_}}, DT_F32,   0, 0,   {P_SUM}};
  run_case(&addmm);
  /* Only the bias Partial: a replicated factor becomes Partial locally and the bias's
   * partials stay (PyTorch does the same); before, the bias was reduced. On 2x2, with the
   * other mesh dim contracting over a's column shard. */
  planner_case bias = {"addmm P(sum) bias",
                       op_addmm,
                       2,
                       {2, 2},
                       3,
                       {2, 2, 2},
                       {{7, 5}, {7, 3}, {3, 5}},
                       {{P_SUM, P_SUM}, {R_, S_(1)}, {R_, R_}},
                       DT_F32,
                       0,
                       0,
                       {P_SUM, P_SUM}};
  run_case(&bias);
  planner_case lbias = {
      "linear P(sum) bias",  op_linear, 1, {4}, 3,      {2, 2, 1}, {{4, 6}, {8, 6}, {8}},
      {{R_}, {R_}, {P_SUM}}, DT_F32,    0, 0,   {P_SUM}};
  run_case(&lbias);
}

/* ---- 7. Idle mesh dims --------------------------------------------------------------------- */

Test(planner, idle_mesh_dim_is_sharded_before_a_gather) {
  /* log_softmax over dim 1 of [8, 6] f64 placed [S(1), R] on 2x2: mesh dim 0 must unshard
   * dim 1. Gathering it whole moves 384 bytes; slicing dim 0 on the idle mesh dim 1 first
   * gathers a [4, 6] half (192 bytes, output [R, S(0)]); one all_to_all handing mesh dim 0
   * the rows instead (S(1) -> S(0), output [S(0), R]) moves the same 192 bytes with no local
   * step, and is chosen. */
  planner_case c = {"log_softmax [S(1), R]", op_log_softmax1, 2, {2, 2}, 1,          {2}, {{8, 6}},
                    {{S_(1), R_}},           DT_F64,          1, 192,    {S_(0), R_}};
  run_case(&c);
}
