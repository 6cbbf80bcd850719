/* The cost model: the bytes the planner and the propagator predict for a transition are the
 * bytes the comm ledger measures when it runs, for redistributions on 1-D and 2-D meshes
 * (even and uneven shapes), for eager dispatch of ops whose inputs must move, and for the
 * collectives a TP transformation inserts. Ranks are threads (dt_comm_spawn). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_helpers.h"
/* Private header: the cost model's predicted bytes equal the comm ledger's: the predictions are
 * internal. */
#include "distributed/propagate_impl.h"
#include "parallel/parallel_impl.h"
#include "reference.h"

/* Placements as constant initializers (the dt_shard() helpers are functions). */
#define R_                                                                                         \
  { DT_REPLICATE, 0, DT_REDUCE_SUM, 0 }
#define S_(d)                                                                                      \
  { DT_SHARD, d, DT_REDUCE_SUM, 0 }
#define P_SUM                                                                                      \
  { DT_PARTIAL, 0, DT_REDUCE_SUM, 0 }

/* ---- Redistributions ----------------------------------------------------------------------- */

typedef struct transition {
  int mesh_ndim;
  int mesh[2];
  int64_t shape[2];
  dt_placement from[2], to[2];
  /* What this rank should move, by rank (1-D cases worked out by hand); -1: not checked. */
  int64_t expect[4];
} transition;

static const transition transitions[] = {
    /* [8, 6] f32 = 192 bytes on 4 ranks: each rank's shard of dim 0 is 2 x 6 = 48 bytes. */
    {1, {4}, {8, 6}, {S_(0)}, {R_}, {192, 192, 192, 192}},    /* gathered */
    {1, {4}, {8, 6}, {R_}, {S_(0)}, {0, 0, 0, 0}},            /* a slice */
    {1, {4}, {8, 6}, {P_SUM}, {R_}, {192, 192, 192, 192}},    /* all_reduce */
    {1, {4}, {8, 6}, {P_SUM}, {S_(0)}, {192, 192, 192, 192}}, /* reduce_scatter */
    {1, {4}, {8, 6}, {S_(0)}, {S_(1)}, {48, 48, 48, 48}},     /* all_to_all */
    {1, {4}, {8, 6}, {S_(0)}, {P_SUM}, {0, 0, 0, 0}},         /* local: shard in zeros */
    /* Uneven [7, 5] f32 = 140 bytes: dim 0 in chunks 2, 2, 2, 1; dim 1 in 2, 2, 1, 0. */
    {1, {4}, {7, 5}, {S_(0)}, {R_}, {140, 140, 140, 140}},
    {1, {4}, {7, 5}, {S_(1)}, {S_(0)}, {56, 56, 28, 0}},
    {1, {4}, {7, 5}, {S_(0)}, {S_(1)}, {40, 40, 40, 20}},
    {1, {4}, {7, 5}, {P_SUM}, {S_(1)}, {140, 140, 140, 140}},
    {1, {3}, {7, 5}, {S_(0)}, {R_}, {140, 140, 140, -1}},
    /* [8, 4] f32 = 128 bytes divides evenly: the planner's estimate is exact too. */
    {1, {4}, {8, 4}, {S_(0)}, {R_}, {128, 128, 128, 128}},
    {1, {4}, {8, 4}, {P_SUM}, {S_(1)}, {128, 128, 128, 128}},
    {1, {4}, {8, 4}, {S_(0)}, {S_(1)}, {32, 32, 32, 32}},
    {2, {2, 2}, {8, 4}, {S_(0), S_(1)}, {S_(1), S_(0)}, {-1, -1, -1, -1}},
    {2, {2, 2}, {8, 4}, {P_SUM, S_(0)}, {R_, R_}, {-1, -1, -1, -1}},
    /* 2-D meshes: the planner's exact bytes against the ledger. */
    {2, {2, 2}, {8, 6}, {S_(0), S_(1)}, {R_, R_}, {-1, -1, -1, -1}},
    {2, {2, 2}, {8, 6}, {S_(0), S_(1)}, {S_(1), S_(0)}, {-1, -1, -1, -1}},
    {2, {2, 2}, {8, 6}, {P_SUM, S_(0)}, {R_, S_(1)}, {-1, -1, -1, -1}},
    {2, {2, 2}, {8, 6}, {R_, P_SUM}, {S_(0), S_(1)}, {-1, -1, -1, -1}},
    {2, {2, 2}, {7, 5}, {S_(0), S_(0)}, {R_, R_}, {-1, -1, -1, -1}},
    {2, {2, 2}, {5, 3}, {P_SUM, P_SUM}, {R_, S_(1)}, {-1, -1, -1, -1}},
    {2, {2, 2}, {5, 3}, {S_(1), P_SUM}, {S_(0), R_}, {-1, -1, -1, -1}},
    {2, {2, 2}, {7, 5}, {S_(0), S_(1)}, {S_(1), R_}, {-1, -1, -1, -1}},
};
#define N_TRANSITIONS ((int)(sizeof transitions / sizeof transitions[0]))

/* A tensor of global shape `shape` placed `placements`: distributed with every Partial
 * replaced by Replicate, then moved to the Partial locally (R -> P moves nothing). */
static dt_status placed(dt_mesh *mesh, int mesh_ndim, const int64_t *shape,
                        const dt_placement *placements, dt_tensor **out) {
  dt_placement first[2];
  for (int m = 0; m < mesh_ndim; m++)
    first[m] = placements[m].kind == DT_PARTIAL ? dt_replicate() : placements[m];
  dt_tensor *full = ref_random(2, shape, DT_F32, -2, 2, 7), *t = NULL;
  dt_status st = dt_dist_distribute_tensor(mesh, full, mesh_ndim, first, &t);
  dt_tensor_release(full);
  if (st) return st;
  st = dt_dist_redistribute(t, mesh_ndim, placements, out);
  dt_tensor_release(t);
  return st;
}

static dt_status transition_rank(dt_comm *world, void *arg) {
  const transition *c = arg;
  int rank = dt_comm_rank(world);
  dt_mesh *mesh = NULL;
  dt_tensor *t = NULL, *moved = NULL, *full = NULL;
  RANK_OK(dt_mesh_create(world, c->mesh_ndim, c->mesh, NULL, &mesh));
  RANK_OK(placed(mesh, c->mesh_ndim, c->shape, c->from, &t));
  char text[1024];
  int64_t planned = -1;
  RANK_OK(dt_dist_redistribute_explain(t, c->mesh_ndim, c->to, text, sizeof text, &planned));
  dt_comm_ledger *ledger = NULL;
  RANK_OK(dt_comm_ledger_start(&ledger));
  RANK_OK(dt_dist_redistribute(t, c->mesh_ndim, c->to, &moved));
  RANK_OK(dt_comm_ledger_stop(ledger));
  int64_t measured = dt_comm_ledger_bytes(ledger, NULL);
  dt_comm_ledger_destroy(ledger);
  char a[32], b[32];
  RANK_CHECK(
      planned == measured, "rank %d %s -> %s: planned %lld bytes, the ledger measured %lld\n%.300s",
      rank, dt_placement_format(c->from[0], a, sizeof a),
      dt_placement_format(c->to[0], b, sizeof b), (long long)planned, (long long)measured, text);
  RANK_CHECK(c->expect[rank] < 0 || measured == c->expect[rank],
             "rank %d: moved %lld bytes, expected %lld\n%.300s", rank, (long long)measured,
             (long long)c->expect[rank], text);
  /* Where every dim divides evenly among all ranks, the planner's own estimate (what it
   * ranks paths by) is already the measured figure: one cost model, not two. */
  int world_size = dt_comm_size(world);
  if (c->shape[0] % world_size == 0 && c->shape[1] % world_size == 0) {
    dt_redistribute_plan plan;
    RANK_OK(dt__redistribute_plan_cached(t->spec, c->to, &plan));
    RANK_CHECK(plan.bytes == measured, "rank %d: the planner estimated %lld bytes, moved %lld",
               rank, (long long)plan.bytes, (long long)measured);
  }
  /* The values survive the move: a Partial(sum) source made from a replica sums to it. */
  RANK_OK(dt_dist_full_tensor(moved, &full));
  dt_tensor *src = ref_random(2, c->shape, DT_F32, -2, 2, 7);
  bool partial_target = false;
  for (int m = 0; m < c->mesh_ndim; m++) partial_target |= c->to[m].kind == DT_PARTIAL;
  if (!partial_target) {
    double *x = ref_values(full), *y = ref_values(src);
    for (int64_t i = 0; i < c->shape[0] * c->shape[1]; i++)
      RANK_CHECK(x[i] == y[i], "element %lld is %g, expected %g", (long long)i, x[i], y[i]);
    free(x);
    free(y);
  }
  dt_tensor_release(src);
  dt_tensor_release(full);
  dt_tensor_release(moved);
  dt_tensor_release(t);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(cost_model, planner_bytes_equal_ledger_bytes) {
  for (int k = 0; k < N_TRANSITIONS; k++) {
    const transition *c = &transitions[k];
    int world = c->mesh_ndim == 1 ? c->mesh[0] : c->mesh[0] * c->mesh[1];
    cr_assert_eq(dt_comm_spawn(world, transition_rank, (void *)c), DT_OK, "case %d: %s", k,
                 dt_last_error());
  }
}

/* ---- Eager dispatch ----------------------------------------------------------------------- */

typedef struct op_case {
  dt_op op;
  int mesh_ndim;
  int mesh[2];
  int64_t a_shape[2], b_shape[2];
  dt_placement a[2], b[2];
} op_case;

static const op_case op_cases[] = {
    {DT_OP_ADD, 1, {4}, {8, 6}, {8, 6}, {S_(0)}, {S_(1)}},
    {DT_OP_MM, 1, {4}, {7, 5}, {5, 3}, {P_SUM}, {S_(1)}},
    {DT_OP_MM, 1, {4}, {8, 6}, {6, 5}, {S_(0)}, {S_(0)}},
    {DT_OP_MM, 1, {4}, {7, 5}, {5, 3}, {S_(1)}, {S_(1)}},
    /* An add of these would move nothing now (a's S(1) becomes a Partial(sum) locally). */
    {DT_OP_MM, 2, {2, 2}, {8, 6}, {6, 5}, {S_(0), S_(1)}, {R_, P_SUM}},
    {DT_OP_MM, 2, {2, 2}, {7, 6}, {6, 5}, {S_(1), S_(0)}, {P_SUM, S_(1)}},
};
#define N_OP_CASES ((int)(sizeof op_cases / sizeof op_cases[0]))

static dt_status op_rank(dt_comm *world, void *arg) {
  const op_case *c = arg;
  dt_mesh *mesh = NULL;
  dt_tensor *a = NULL, *b = NULL, *out = NULL;
  RANK_OK(dt_mesh_create(world, c->mesh_ndim, c->mesh, NULL, &mesh));
  RANK_OK(placed(mesh, c->mesh_ndim, c->a_shape, c->a, &a));
  RANK_OK(placed(mesh, c->mesh_ndim, c->b_shape, c->b, &b));
  dt_tensor *outs[1] = {NULL};
  dt_op_call call = {.op = c->op,
                     .n_inputs = 2,
                     .inputs = {a, b},
                     .scalars = {1.0, 0},
                     .n_outputs = 1,
                     .outputs = outs};
  int64_t predicted = -1;
  RANK_OK(dt__dist_predict_bytes(&call, &predicted));
  dt_comm_ledger *ledger = NULL;
  RANK_OK(dt_comm_ledger_start(&ledger));
  RANK_OK(c->op == DT_OP_ADD ? dt_add(a, b, &out) : dt_mm(a, b, &out));
  RANK_OK(dt_comm_ledger_stop(ledger));
  int64_t measured = dt_comm_ledger_bytes(ledger, NULL);
  int64_t calls = dt_comm_ledger_count(ledger, NULL);
  char table[2048];
  RANK_OK(dt_comm_ledger_format(ledger, table, sizeof table));
  dt_comm_ledger_destroy(ledger);
  RANK_CHECK(predicted == measured && calls > 0,
             "rank %d: the propagator predicted %lld bytes, the ledger measured %lld\n%.300s",
             dt_comm_rank(world), (long long)predicted, (long long)measured, table);
  dt_tensor_release(a);
  dt_tensor_release(b);
  dt_tensor_release(out);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(cost_model, eager_dispatch_predicted_bytes_equal_ledger_bytes) {
  for (int k = 0; k < N_OP_CASES; k++) {
    const op_case *c = &op_cases[k];
    int world = c->mesh_ndim == 1 ? c->mesh[0] : c->mesh[0] * c->mesh[1];
    cr_assert_eq(dt_comm_spawn(world, op_rank, (void *)c), DT_OK, "case %d: %s", k,
                 dt_last_error());
  }
}

/* ---- A TP-transformed MLP ----------------------------------------------------------------- */

typedef struct tp_case {
  const dt_program *prog;
  dt_tensor *x, *expect;
  int n_plan;
  const dt_tp_plan_entry *plan;
  int64_t expect_bytes; /* on every rank; -1: not checked */
} tp_case;

static dt_status tp_rank(dt_comm *world, void *arg) {
  const tp_case *c = arg;
  dt_tp_plan plan = {c->n_plan, c->plan};
  dt_program *tp = NULL;
  dt_tensor *y = NULL;
  RANK_OK(dt_parallel_tp_transform(c->prog, dt_comm_rank(world), dt_comm_size(world), &plan, &tp));
  int64_t predicted = dt__tp_predicted_comm_bytes(dt_program_graph(tp));
  dt_comm_ledger *ledger = NULL;
  RANK_OK(dt_comm_ledger_start(&ledger));
  dt_run_stats stats = {0};
  dt_run_options ro = {.comm = world, .stats = &stats};
  RANK_OK(dt_program_run(tp, 1, &c->x, 1, &y, &ro));
  RANK_OK(dt_comm_ledger_stop(ledger));
  int64_t measured = dt_comm_ledger_bytes(ledger, NULL);
  int64_t run_bytes = 0;
  for (int k = 0; k < 4; k++) run_bytes += stats.comm_bytes[k];
  RANK_CHECK(run_bytes == measured, "dt_run_stats counted %lld bytes, the ledger %lld",
             (long long)run_bytes, (long long)measured);
  int64_t calls = dt_comm_ledger_count(ledger, NULL);
  dt_comm_ledger_destroy(ledger);
  char *text = dt_graph_to_string(dt_program_graph(tp));
  RANK_CHECK(predicted == measured && calls > 0,
             "world %d rank %d: predicted %lld bytes, the ledger measured %lld\n%.300s",
             dt_comm_size(world), dt_comm_rank(world), (long long)predicted, (long long)measured,
             text);
  RANK_CHECK(c->expect_bytes < 0 || measured == c->expect_bytes,
             "moved %lld, expected %lld\n%.300s", (long long)measured, (long long)c->expect_bytes,
             text);
  dt_free(text);
  double *got = ref_values(y), *want = ref_values(c->expect);
  for (int64_t i = 0; i < dt_tensor_numel(c->expect); i++)
    RANK_CHECK(fabs(got[i] - want[i]) <= 1e-4, "element %lld: %g vs %g", (long long)i, got[i],
               want[i]);
  free(got);
  free(want);
  dt_tensor_release(y);
  dt_program_destroy(tp);
  return DT_OK;
}

Test(cost_model, tp_transformed_mlp_predicted_bytes_equal_ledger_bytes) {
  /* Linear(12 -> 10), ReLU, Linear(10 -> 12) on x of [6, 12] f32. */
  dt_module *layers[3] = {NULL}, *model = NULL;
  cr_assert_eq(dt_nn_linear(12, 10, true, 31, &layers[0]), DT_OK);
  cr_assert_eq(dt_nn_relu(&layers[1]), DT_OK);
  cr_assert_eq(dt_nn_linear(10, 12, true, 32, &layers[2]), DT_OK);
  cr_assert_eq(dt_nn_sequential(3, layers, &model), DT_OK);
  dt_tensor *x = ref_random(2, (int64_t[]){6, 12}, DT_F32, -1, 1, 9), *y = NULL;
  cr_assert_eq(dt_module_forward(model, x, &y), DT_OK);
  dt_program *prog = NULL;
  cr_assert_eq(dt_export(model, x, NULL, &prog), DT_OK, "%s", dt_last_error());
  const dt_tp_plan_entry colwise_rowwise[] = {{"0", DT_TP_COLWISE}, {"2", DT_TP_ROWWISE}};
  const dt_tp_plan_entry colwise_only[] = {{"0", DT_TP_COLWISE}};
  const dt_tp_plan_entry rowwise_only[] = {{"2", DT_TP_ROWWISE}};
  /* Colwise then rowwise: one all_reduce of the [6, 12] f32 output, 288 bytes. */
  tp_case cases[] = {{prog, x, y, 2, colwise_rowwise, 288},
                     {prog, x, y, 1, colwise_only, -1},
                     {prog, x, y, 1, rowwise_only, -1}};
  for (int k = 0; k < 3; k++) {
    for (int world = 2; world <= 4; world++) {
      cr_assert_eq(dt_comm_spawn(world, tp_rank, &cases[k]), DT_OK, "plan %d world %d: %s", k,
                   world, dt_last_error());
    }
  }
  dt_tensor_release(x);
  dt_tensor_release(y);
  dt_program_destroy(prog);
  dt_module_destroy(model);
}
