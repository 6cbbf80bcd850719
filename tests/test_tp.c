/* Tensor parallelism: the seed scenarios of the TP transformation (counts of inserted
 * communication asserted), the eager parallelize_module path, a 4-layer MLP over 1..8 ranks,
 * and bad plans. Ranks are threads (dt_comm_spawn); a rank reports a failed check through its
 * status (RANK_CHECK). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_helpers.h"
#include "reference.h"

static double max_abs_diff(const dt_tensor *a, const dt_tensor *b) {
  if (dt_tensor_numel(a) != dt_tensor_numel(b)) return INFINITY;
  double *x = ref_values(a), *y = ref_values(b), m = 0;
  for (int64_t i = 0; i < dt_tensor_numel(a); i++) m = fmax(m, fabs(x[i] - y[i]));
  free(x);
  free(y);
  return m;
}

/* ---- The scenario models ----------------------------------------------------------------------
 */

/* Linear(3 -> 5) then BatchNorm1d(5). */
static dt_status fc_bn_forward(dt_module *m, dt_tensor *x, dt_tensor **out) {
  dt_tensor *h = NULL;
  dt_status st = dt_module_forward(dt_module_find(m, "fc"), x, &h);
  if (!st) st = dt_module_forward(dt_module_find(m, "bn"), h, out);
  dt_tensor_release(h);
  return st;
}

/* The same with the BatchNorm in training mode (batch statistics), as the seed's module is:
 * PyTorch modules start in training mode. */
static dt_status fc_bn_training_forward(dt_module *m, dt_tensor *x, dt_tensor **out) {
  dt_tensor *h = NULL;
  dt_module *bn = dt_module_find(m, "bn");
  dt_status st = dt_module_forward(dt_module_find(m, "fc"), x, &h);
  if (!st) {
    st = dt_batch_norm_training(h, dt_module_parameter(bn, "weight"),
                                dt_module_parameter(bn, "bias"), 1e-5, out);
  }
  dt_tensor_release(h);
  return st;
}

static dt_status make_fc_bn(bool training, dt_module **out) {
  dt_module *m = NULL, *fc = NULL, *bn = NULL;
  dt_status st =
      dt_module_create("LinearBN", training ? fc_bn_training_forward : fc_bn_forward, NULL, &m);
  if (!st) st = dt_nn_linear(3, 5, true, 11, &fc);
  if (!st) st = dt_module_add_child(m, "fc", fc);
  if (!st) st = dt_nn_batch_norm1d(5, 1e-5, &bn);
  if (!st) st = dt_module_add_child(m, "bn", bn);
  if (!st) { /* running statistics that do something */
    dt_tensor *mean = ref_random(1, (int64_t[]){5}, DT_F32, -1, 1, 3);
    dt_tensor *var = ref_random(1, (int64_t[]){5}, DT_F32, 0.5, 2, 4);
    st = dt_module_set_tensor(bn, "running_mean", mean);
    if (!st) st = dt_module_set_tensor(bn, "running_var", var);
    dt_tensor_release(mean);
    dt_tensor_release(var);
  }
  if (st)
    dt_module_destroy(m);
  else
    *out = m;
  return st;
}

/* PyTorch's MLPListModule: x = chunk(x, 2, dim=1)[0]; x = mlp(x) for each; x + ones_like(x). */
static dt_status mlp_list_forward(dt_module *m, dt_tensor *x, dt_tensor **out) {
  dt_tensor *pieces[2] = {NULL, NULL}, *cur = NULL, *ones = NULL;
  int n = 0;
  dt_status st = dt_chunk(x, 2, 1, pieces, 2, &n);
  if (st) return st;
  cur = pieces[0];
  dt_tensor_release(pieces[1]);
  dt_module *list = dt_module_find(m, "mlps");
  for (int i = 0; i < dt_module_child_count(list) && !st; i++) {
    dt_tensor *next = NULL;
    st = dt_module_forward(dt_module_child(list, i), cur, &next);
    dt_tensor_release(cur);
    cur = next;
  }
  if (!st) st = dt_ones_like(cur, &ones);
  if (!st) st = dt_add(cur, ones, out);
  dt_tensor_release(cur);
  dt_tensor_release(ones);
  return st;
}

static dt_status make_mlp_list(int n, bool bias, dt_module **out) {
  dt_module *m = NULL, *list = NULL, *mlps[4] = {NULL};
  dt_status st = dt_module_create("MLPListModule", mlp_list_forward, NULL, &m);
  for (int i = 0; i < n && !st; i++)
    st = dt_nn_mlp(6, 18, 6, bias, bias, 100 + 10 * (uint64_t)i, &mlps[i]);
  if (!st)
    st = dt_nn_module_list(n, mlps, &list);
  else
    for (int i = 0; i < n; i++) dt_module_destroy(mlps[i]);
  if (!st) st = dt_module_add_child(m, "mlps", list);
  if (st)
    dt_module_destroy(m);
  else
    *out = m;
  return st;
}

/* ---- Running a scenario on every rank -----------------------------------------------------------
 */

typedef struct scenario {
  int which;          /* 1: Linear+BN, 2: two MLPs, 3: one MLP without bias */
  bool bn_training;   /* 1: the BatchNorm with batch statistics (else running statistics) */
  bool dynamic_batch; /* exported with a symbolic batch size (the seed exports statically) */
  int n_plan;
  dt_tp_plan_entry plan[4];
  int64_t input_shape[2];
  /* Expected counts of inserted nodes. */
  int all_gather, all_reduce, reduce_scatter, all_to_all, wait;
} scenario;

static dt_status make_model(const scenario *sc, dt_module **m) {
  return sc->which == 1 ? make_fc_bn(sc->bn_training, m)
                        : make_mlp_list(sc->which == 2 ? 2 : 1, sc->which == 2, m);
}

static dt_status scenario_rank(dt_comm *world, void *arg) {
  const scenario *sc = arg;
  int rank = dt_comm_rank(world), size = dt_comm_size(world);
  dt_module *model = NULL;
  dt_program *prog = NULL, *tp = NULL;
  dt_tensor *x = ref_random(2, sc->input_shape, DT_F32, -2, 2, 77), *ref = NULL, *y = NULL,
            *eager = NULL;
  RANK_OK(make_model(sc, &model));
  RANK_OK(dt_module_forward(model, x, &eager));
  dt_export_options opt = {.dynamic_batch = sc->dynamic_batch};
  RANK_OK(dt_export(model, x, &opt, &prog));
  RANK_OK(dt_program_run(prog, 1, &x, 1, &ref, NULL));
  RANK_CHECK(max_abs_diff(ref, eager) == 0, "export changed the result");
  dt_tp_plan plan = {sc->n_plan, sc->plan};
  RANK_OK(dt_parallel_tp_transform(prog, rank, size, &plan, &tp));
  const dt_graph *g = dt_program_graph(tp);
  char *text = dt_graph_to_string(g);
  /* The transformed graph round-trips through its text too. */
  dt_graph *back = NULL;
  RANK_OK(dt_graph_parse(text, &back));
  char *again = dt_graph_to_string(back);
  RANK_CHECK(strcmp(text, again) == 0, "round trip of the transformed graph differs");
  dt_free(again);
  dt_graph_destroy(back);
  int ag = dt_graph_count_target(g, "all_gather_into_tensor"),
      ar = dt_graph_count_target(g, "all_reduce");
  int rs = dt_graph_count_target(g, "reduce_scatter_tensor"),
      a2a = dt_graph_count_target(g, "all_to_all");
  int wt = dt_graph_count_target(g, "wait_tensor");
  RANK_CHECK(ag == sc->all_gather && ar == sc->all_reduce && rs == sc->reduce_scatter &&
                 a2a == sc->all_to_all && wt == sc->wait,
             "scenario %d (%s, %s export) world %d rank %d: inserted all_gather %d, all_reduce "
             "%d, reduce_scatter %d, all_to_all %d, wait %d\n%s",
             sc->which, sc->bn_training ? "batch statistics" : "running statistics",
             sc->dynamic_batch ? "dynamic" : "static", size, rank, ag, ar, rs, a2a, wt, text);
  if (getenv("TP_DEBUG") && rank == 1) fprintf(stderr, "%s\n", text);
  dt_free(text);
  dt_run_stats stats = {0};
  dt_run_options ro = {.comm = world, .stats = &stats};
  RANK_OK(dt_program_run(tp, 1, &x, 1, &y, &ro));
  double diff = max_abs_diff(y, ref);
  RANK_CHECK(diff <= 1e-5, "scenario %d world %d: max abs diff %g", sc->which, size, diff);
  RANK_CHECK(stats.comm_calls[0] == sc->all_gather && stats.comm_calls[1] == sc->all_reduce,
             "run stats");
  /* The eager path gives the same result. */
  dt_mesh *mesh = NULL;
  dt_tensor *y2 = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){size}, (const char *const[]){"tp"}, &mesh));
  /* BatchNorm is not parallelized: the Linear before it hands it whole features. */
  dt_tp_style_options to_replicate = {.output_layout = &(dt_placement){.kind = DT_REPLICATE}};
  RANK_OK(dt_parallel_tp_module(model, mesh, &plan, sc->which == 1 ? &to_replicate : NULL));
  RANK_OK(dt_module_forward(model, x, &y2));
  RANK_CHECK(!dt_tensor_is_distributed(y2), "the eager output is local");
  diff = max_abs_diff(y2, ref);
  RANK_CHECK(diff <= 1e-5, "scenario %d world %d eager: max abs diff %g", sc->which, size, diff);
  dt_tensor_release(y2);
  dt_module_destroy(model);
  dt_mesh_destroy(mesh);
  dt_tensor_release(x);
  dt_tensor_release(ref);
  dt_tensor_release(y);
  dt_tensor_release(eager);
  dt_program_destroy(tp);
  dt_program_destroy(prog);
  return DT_OK;
}

/* Worlds 2, 3 and 4, exported statically (as the seed exports) and with a dynamic batch. */
static void run_scenario(scenario sc) {
  for (int dynamic = 0; dynamic < 2; dynamic++) {
    sc.dynamic_batch = dynamic;
    for (int world = 2; world <= 4; world++) SPAWN_OK(world, scenario_rank, &sc);
  }
}

/* Seed 003, test_tp_transform_with_uncovered_op: the batch norm is per channel, so the
 * colwise Linear's channel shard goes through it (its [C] statistics and affine parameters
 * sliced locally) and one all_gather at the end returns the whole output, in both modes. */
Test(tp_transform, linear_then_uncovered_batch_norm) {
  run_scenario((scenario){.which = 1,
                          .n_plan = 1,
                          .plan = {{"fc", DT_TP_COLWISE}},
                          .input_shape = {7, 3},
                          .all_gather = 1,
                          .wait = 1});
}

Test(tp_transform, linear_then_uncovered_batch_norm_training) {
  run_scenario((scenario){.which = 1,
                          .bn_training = true,
                          .n_plan = 1,
                          .plan = {{"fc", DT_TP_COLWISE}},
                          .input_shape = {7, 3},
                          .all_gather = 1,
                          .wait = 1});
}

Test(tp_transform, two_mlps_colwise_rowwise) {
  run_scenario((scenario){.which = 2,
                          .n_plan = 4,
                          .plan = {{"mlps.0.0", DT_TP_COLWISE},
                                   {"mlps.0.2", DT_TP_ROWWISE},
                                   {"mlps.1.0", DT_TP_COLWISE},
                                   {"mlps.1.2", DT_TP_ROWWISE}},
                          .input_shape = {10, 12},
                          .all_reduce = 2,
                          .wait = 2});
}

Test(tp_transform, one_mlp_without_bias) {
  run_scenario((scenario){.which = 3,
                          .n_plan = 2,
                          .plan = {{"mlps.0.0", DT_TP_COLWISE}, {"mlps.0.2", DT_TP_ROWWISE}},
                          .input_shape = {10, 12},
                          .all_reduce = 1,
                          .wait = 1});
}

/* ---- A 4-layer MLP of hidden 1024 over 1..8 ranks
 * ------------------------------------------------ */

typedef struct big_case {
  const dt_program *prog;
  const dt_tensor *x;
  const dt_tensor *expect;
} big_case;

static const dt_tp_plan_entry big_plan[] = {
    {"0", DT_TP_COLWISE}, {"2", DT_TP_ROWWISE}, {"4", DT_TP_COLWISE}, {"6", DT_TP_ROWWISE}};

static dt_status big_rank(dt_comm *world, void *arg) {
  const big_case *c = arg;
  dt_tp_plan plan = {4, big_plan};
  dt_program *tp = NULL;
  dt_tensor *y = NULL, *x = (dt_tensor *)c->x;
  RANK_OK(dt_parallel_tp_transform(c->prog, dt_comm_rank(world), dt_comm_size(world), &plan, &tp));
  const dt_graph *g = dt_program_graph(tp);
  int size = dt_comm_size(world);
  /* Colwise -> rowwise pairs need one all_reduce each, and nothing else. */
  RANK_CHECK(dt_graph_count_target(g, "all_reduce") == 2 &&
                 dt_graph_count_target(g, "all_gather_into_tensor") == 0,
             "unexpected communication");
  dt_run_options ro = {.comm = world};
  RANK_OK(dt_program_run(tp, 1, &x, 1, &y, &ro));
  double diff = max_abs_diff(y, c->expect);
  RANK_CHECK(diff <= 1e-4, "world %d: max abs diff %g", size, diff);
  dt_tensor_release(y);
  dt_program_destroy(tp);
  return DT_OK;
}

Test(tp_transform, mlp_4_layers_hidden_1024_over_1_to_8_ranks) {
  dt_module *layers[7] = {NULL}, *model = NULL;
  for (int i = 0; i < 7; i++) {
    if (i % 2)
      cr_assert_eq(dt_nn_relu(&layers[i]), DT_OK);
    else
      cr_assert_eq(dt_nn_linear(1024, 1024, true, 1000 + (uint64_t)i, &layers[i]), DT_OK);
  }
  cr_assert_eq(dt_nn_sequential(7, layers, &model), DT_OK);
  dt_tensor *x = ref_random(2, (int64_t[]){8, 1024}, DT_F32, -1, 1, 5), *y = NULL;
  cr_assert_eq(dt_module_forward(model, x, &y), DT_OK);
  dt_program *prog = NULL;
  cr_assert_eq(dt_export(model, x, NULL, &prog), DT_OK, "%s", dt_last_error());
  big_case c = {prog, x, y};
  for (int world = 1; world <= 8; world++) SPAWN_OK(world, big_rank, &c);
  dt_tensor_release(x);
  dt_tensor_release(y);
  dt_program_destroy(prog);
  dt_module_destroy(model);
}

/* ---- Bad input ----------------------------------------------------------------------------------
 */

static dt_program *export_mlp_list(dt_module **model) {
  cr_assert_eq(make_mlp_list(1, true, model), DT_OK);
  dt_tensor *x = ref_random(2, (int64_t[]){4, 12}, DT_F32, -1, 1, 5);
  dt_program *p = NULL;
  cr_assert_eq(dt_export(*model, x, NULL, &p), DT_OK, "%s", dt_last_error());
  dt_tensor_release(x);
  return p;
}

static void expect_transform_error(const dt_program *p, int rank, int world, int n,
                                   const dt_tp_plan_entry *entries, dt_status status, const char *a,
                                   const char *b) {
  dt_tp_plan plan = {n, entries};
  dt_program *out = (dt_program *)&plan; /* must come back NULL */
  cr_assert_eq(dt_parallel_tp_transform(p, rank, world, &plan, &out), status, "%s",
               dt_last_error());
  cr_assert_null(out);
  ref_assert_error_mentions(a, b);
}

Test(tp_transform, bad_plans) {
  dt_module *model = NULL;
  dt_program *p = export_mlp_list(&model);
  expect_transform_error(p, 0, 2, 1, (dt_tp_plan_entry[]){{"mlps.0.5", DT_TP_COLWISE}},
                         DT_ERR_INVALID, "mlps.0.5", "not a module");
  expect_transform_error(p, 0, 2, 1, (dt_tp_plan_entry[]){{"mlps.0.1", DT_TP_ROWWISE}},
                         DT_ERR_UNSUPPORTED, "ReLU", "Linear");
  expect_transform_error(p, 0, 2, 1, (dt_tp_plan_entry[]){{"mlps", DT_TP_ROWWISE}},
                         DT_ERR_UNSUPPORTED, "ModuleList", "Linear");
  expect_transform_error(
      p, 0, 2, 2, (dt_tp_plan_entry[]){{"mlps.0.0", DT_TP_COLWISE}, {"mlps.0.0", DT_TP_ROWWISE}},
      DT_ERR_INVALID, "mlps.0.0", "twice");
  expect_transform_error(p, 0, 2, 1, (dt_tp_plan_entry[]){{"mlps.0.0", (dt_tp_style)7}},
                         DT_ERR_INVALID, "mlps.0.0", "style");
  expect_transform_error(p, 2, 2, 1, (dt_tp_plan_entry[]){{"mlps.0.0", DT_TP_COLWISE}},
                         DT_ERR_INVALID, "rank 2", "world 2");
  expect_transform_error(p, 0, 0, 1, (dt_tp_plan_entry[]){{"mlps.0.0", DT_TP_COLWISE}},
                         DT_ERR_INVALID, "rank", "world 0");
  /* A transformed program is not transformed again. */
  dt_tp_plan plan = {1, (dt_tp_plan_entry[]){{"mlps.0.0", DT_TP_COLWISE}}};
  dt_program *tp = NULL;
  cr_assert_eq(dt_parallel_tp_transform(p, 0, 2, &plan, &tp), DT_OK);
  expect_transform_error(tp, 0, 2, 1, plan.entries, DT_ERR_INVALID, "already", "transformed");
  /* Running it without a group is an error, not a crash. */
  dt_tensor *x = ref_random(2, (int64_t[]){4, 12}, DT_F32, -1, 1, 5), *y = NULL;
  cr_assert_eq(dt_program_run(tp, 1, &x, 1, &y, NULL), DT_ERR_INVALID);
  cr_assert_null(y);
  ref_assert_error_mentions("program_run: node %all_reduce", "no group");
  dt_tensor_release(x);
  dt_program_destroy(tp);
  dt_program_destroy(p);
  dt_module_destroy(model);
}

/* A parsed program knows no module types: a style needs a 2-D "<fqn>.weight" parameter. */
Test(tp_transform, parsed_program_unshardable_weight) {
  const char *text = "graph() {\n"
                     "  %fc.weight = parameter() : f32[4]\n"
                     "  %x = placeholder() : f32[3, 4]\n"
                     "  %mul = mul.Tensor(%x, %fc.weight) : f32[3, 4]\n"
                     "  return (%mul)\n"
                     "}\n";
  dt_graph *g = NULL;
  cr_assert_eq(dt_graph_parse(text, &g), DT_OK, "%s", dt_last_error());
  dt_tensor *w = ref_random(1, (int64_t[]){4}, DT_F32, -1, 1, 1);
  dt_program *p = NULL;
  cr_assert_eq(dt_program_create(g, 1, (const char *const[]){"fc.weight"}, &w, &p), DT_OK, "%s",
               dt_last_error());
  expect_transform_error(p, 0, 2, 1, (dt_tp_plan_entry[]){{"fc", DT_TP_COLWISE}}, DT_ERR_INVALID,
                         "fc", "not 2-D");
  expect_transform_error(p, 0, 2, 1, (dt_tp_plan_entry[]){{"gc", DT_TP_COLWISE}}, DT_ERR_INVALID,
                         "gc", "gc.weight");
  /* A state dict that does not match the graph is refused. */
  dt_program *q = (dt_program *)g;
  cr_assert_eq(dt_program_create(g, 0, NULL, NULL, &q), DT_ERR_INVALID);
  cr_assert_null(q);
  ref_assert_error_mentions("fc.weight", "no state");
  dt_tensor *w2 = ref_random(1, (int64_t[]){5}, DT_F32, -1, 1, 1);
  cr_assert_eq(dt_program_create(g, 1, (const char *const[]){"fc.weight"}, &w2, &q),
               DT_ERR_INVALID);
  ref_assert_error_mentions("fc.weight", "f32[5]");
  dt_tensor *twice[2] = {w, w};
  cr_assert_eq(dt_program_create(g, 2, (const char *const[]){"fc.weight", "fc.weight"}, twice, &q),
               DT_ERR_INVALID);
  ref_assert_error_mentions("fc.weight", "appears twice");
  dt_tensor_release(w2);
  dt_tensor_release(w);
  dt_program_destroy(p);
  dt_graph_destroy(g);
}

typedef struct eager_bad {
  int step;
} eager_bad;

static dt_status eager_bad_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_module *model = NULL;
  RANK_OK(make_mlp_list(1, true, &model));
  dt_mesh *mesh = NULL, *mesh2 = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){2}, NULL, &mesh));
  RANK_OK(dt_mesh_create(world, 2, (int[]){1, 2}, NULL, &mesh2));
  dt_tp_plan missing = {1, (dt_tp_plan_entry[]){{"mlps.0.9", DT_TP_COLWISE}}};
  RANK_CHECK(dt_parallel_tp_module(model, mesh, &missing, NULL) == DT_ERR_INVALID, "missing FQN");
  RANK_CHECK(strstr(dt_last_error(), "mlps.0.9") != NULL, "%s", dt_last_error());
  dt_tp_plan relu = {1, (dt_tp_plan_entry[]){{"mlps.0.1", DT_TP_COLWISE}}};
  RANK_CHECK(dt_parallel_tp_module(model, mesh, &relu, NULL) == DT_ERR_UNSUPPORTED,
             "style on ReLU");
  RANK_CHECK(strstr(dt_last_error(), "ReLU") != NULL, "%s", dt_last_error());
  dt_tp_plan ok = {1, (dt_tp_plan_entry[]){{"mlps.0.0", DT_TP_COLWISE}}};
  RANK_CHECK(dt_parallel_tp_module_on_dim(model, mesh2, 2, &ok, NULL) == DT_ERR_INVALID,
             "tp_dim 2 of a 2-D mesh");
  RANK_CHECK(strstr(dt_last_error(),
                    "dt_parallel_tp_module_on_dim: tp_dim 2 is not a dim of a 2-D mesh") != NULL,
             "%s", dt_last_error());
  /* Nothing was changed by the failures. */
  RANK_CHECK(!dt_tensor_is_distributed(dt_module_get_tensor(model, "mlps.0.0.weight")),
             "half-built");
  /* A layout sharding a dim the input lacks fails at forward time, clearly. */
  dt_tp_style_options bad = {.input_layout = &(dt_placement){.kind = DT_SHARD, .dim = 3}};
  RANK_OK(dt_parallel_tp_module(model, mesh, &ok, &bad));
  dt_tensor *x = ref_random(2, (int64_t[]){4, 6}, DT_F32, -1, 1, 5), *y = NULL;
  dt_module *fc = dt_module_find(model, "mlps.0.0");
  RANK_CHECK(dt_module_forward(fc, x, &y) == DT_ERR_INVALID && y == NULL, "S(3) of a 2-D input");
  RANK_CHECK(strstr(dt_last_error(), "S(3)") != NULL, "%s", dt_last_error());
  RANK_CHECK(dt_parallel_tp_module(model, mesh, &ok, NULL) == DT_ERR_INVALID, "parallelized twice");
  dt_tensor_release(x);
  dt_module_destroy(model);
  dt_mesh_destroy(mesh2);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(parallelize_module, bad_input) { SPAWN_OK(2, eager_bad_rank, NULL); }

/* ---- Communication nodes, run: every collective on uneven shards
 * ---------------------------------- */

static int64_t piece(int64_t size, int world, int r, int64_t *start) {
  int64_t p = (size + world - 1) / world, s = p * r < size ? p * r : size;
  *start = s;
  return size - s < p ? size - s : p;
}

static dt_status comm_nodes_rank(dt_comm *world, void *arg) {
  (void)arg;
  int rank = dt_comm_rank(world), size = dt_comm_size(world);
  int64_t c0, r0, cols = piece(7, size, rank, &c0), rows = piece(5, size, rank, &r0);
  char text[2048];
  snprintf(text, sizeof text,
           "graph() world=%d rank=%d {\n"
           "  %%x = placeholder() : f32[5, %lld] S(1)\n"
           "  %%ag = all_gather_into_tensor(%%x, dim=1) : f32[5, 7] R\n"
           "  %%w1 = wait_tensor(%%ag) : f32[5, 7] R\n"
           "  %%a2a = all_to_all(%%x, dim=1, new_dim=0) : f32[%lld, 7] S(0)\n"
           "  %%w2 = wait_tensor(%%a2a) : f32[%lld, 7] S(0)\n"
           "  %%rs = reduce_scatter_tensor(%%w1, dim=1, op=sum) : f32[5, %lld] S(1)\n"
           "  %%w3 = wait_tensor(%%rs) : f32[5, %lld] S(1)\n"
           "  %%ar = all_reduce(%%w1, op=max) : f32[5, 7] R\n"
           "  %%w4 = wait_tensor(%%ar) : f32[5, 7] R\n"
           "  return (%%w1, %%w2, %%w3, %%w4)\n"
           "}\n",
           size, rank, (long long)cols, (long long)rows, (long long)rows, (long long)cols,
           (long long)cols);
  dt_graph *g = NULL;
  RANK_OK(dt_graph_parse(text, &g));
  dt_program *p = NULL;
  RANK_OK(dt_program_create(g, 0, NULL, NULL, &p));
  dt_tensor *full = ref_random(2, (int64_t[]){5, 7}, DT_F32, -3, 3, 21), *x = NULL, *xc = NULL;
  RANK_OK(dt_narrow(full, 1, c0, cols, &x));
  RANK_OK(dt_contiguous(x, &xc));
  dt_tensor *out[4] = {NULL};
  dt_run_stats stats = {0};
  dt_run_options ro = {.comm = world, .stats = &stats};
  RANK_OK(dt_program_run(p, 1, &xc, 4, out, &ro));
  double *f = ref_values(full), *o[4];
  for (int k = 0; k < 4; k++) o[k] = ref_values(out[k]);
  for (int i = 0; i < 5; i++) {
    for (int j = 0; j < 7; j++) {
      RANK_CHECK(o[0][i * 7 + j] == f[i * 7 + j], "all_gather (%d, %d)", i, j);
      RANK_CHECK(o[3][i * 7 + j] == f[i * 7 + j], "all_reduce max (%d, %d)", i, j);
      if (i >= r0 && i < r0 + rows)
        RANK_CHECK(o[1][(i - r0) * 7 + j] == f[i * 7 + j], "all_to_all (%d, %d)", i, j);
      if (j >= c0 && j < c0 + cols) {
        double want = size * f[i * 7 + j], got = o[2][i * cols + (j - c0)];
        RANK_CHECK(fabs(got - want) <= 1e-5 * (1 + fabs(want)), "reduce_scatter (%d, %d): %g vs %g",
                   i, j, got, want);
      }
    }
  }
  RANK_CHECK(stats.comm_calls[0] == 1 && stats.comm_calls[1] == 1 && stats.comm_calls[2] == 1 &&
                 stats.comm_calls[3] == 1,
             "one call of each kind");
  free(f);
  for (int k = 0; k < 4; k++) {
    free(o[k]);
    dt_tensor_release(out[k]);
  }
  dt_tensor_release(full);
  dt_tensor_release(x);
  dt_tensor_release(xc);
  dt_program_destroy(p);
  dt_graph_destroy(g);
  return DT_OK;
}

Test(interpreter, every_collective_on_uneven_shards) {
  for (int world = 1; world <= 4; world++) SPAWN_OK(world, comm_nodes_rank, NULL);
}

/* ---- Review regressions: tied embedding weights, symbolic views with empty shards -------- */

static dt_status tied_forward(dt_module *m, dt_tensor *x, dt_tensor **out) {
  dt_tensor *h = NULL;
  dt_status st = dt_module_forward(dt_module_find(m, "emb"), x, &h);
  if (!st) st = dt_module_forward(dt_module_find(m, "lm_head"), h, out);
  dt_tensor_release(h);
  return st;
}

typedef struct tied_case {
  dt_program *prog;
  dt_tensor *x, *ref;
  const char *plan_fqn;
} tied_case;

static dt_status tied_rank(dt_comm *w, void *arg) {
  tied_case *c = arg;
  dt_tp_plan plan = {1, (dt_tp_plan_entry[]){{c->plan_fqn, DT_TP_COLWISE}}};
  dt_program *tp = NULL;
  dt_tensor *y = NULL;
  dt_status st = dt_parallel_tp_transform(c->prog, dt_comm_rank(w), dt_comm_size(w), &plan, &tp);
  dt_run_options ro = {.comm = w};
  if (!st) st = dt_program_run(tp, 1, &c->x, 1, &y, &ro);
  if (!st && max_abs_diff(y, c->ref) > 1e-5) {
    st = DT_ERR_INTERNAL;
    fprintf(stderr, "tied weights: rank %d differs by %g\n", dt_comm_rank(w),
            max_abs_diff(y, c->ref));
  }
  dt_tensor_release(y);
  dt_program_destroy(tp);
  return st;
}

Test(tp_review, tied_embedding_weight_stays_correct) {
  /* lm_head registered first, so export names the shared table "lm_head.weight"; a colwise
   * plan on it shards the table by rows, which the embedding must not read as a vocabulary-
   * parallel shard with global indices. */
  dt_module *m = NULL, *emb = NULL, *lm = NULL;
  cr_assert_eq(dt_module_create("Tied", tied_forward, NULL, &m), DT_OK);
  cr_assert_eq(dt_nn_linear(4, 8, false, 9, &lm), DT_OK);
  cr_assert_eq(dt_nn_embedding(8, 4, 3, &emb), DT_OK);
  cr_assert_eq(dt_module_set_tensor(lm, "weight", dt_module_parameter(emb, "weight")), DT_OK);
  cr_assert_eq(dt_module_add_child(m, "lm_head", lm), DT_OK);
  cr_assert_eq(dt_module_add_child(m, "emb", emb), DT_OK);
  tied_case c = {.plan_fqn = "lm_head"};
  int64_t idx[] = {0, 1, 2, 7};
  cr_assert_eq(dt_from_data(idx, 1, (int64_t[]){4}, DT_I64, &c.x), DT_OK);
  cr_assert_eq(dt_module_forward(m, c.x, &c.ref), DT_OK);
  cr_assert_eq(dt_export(m, c.x, NULL, &c.prog), DT_OK, "%s", dt_last_error());
  for (int world = 2; world <= 3; world++) {
    cr_assert_eq(dt_comm_spawn(world, tied_rank, &c), DT_OK, "world %d: %s", world,
                 dt_last_error());
  }
  dt_program_destroy(c.prog);
  dt_tensor_release(c.x);
  dt_tensor_release(c.ref);
  dt_module_destroy(m);
}

static dt_status heads_forward(dt_module *m, dt_tensor *x, dt_tensor **out) {
  dt_tensor *h = NULL, *r = NULL;
  dt_status st = dt_module_forward(dt_module_find(m, "fc"), x, &h);
  if (!st) st = dt_reshape(h, 3, (int64_t[]){-1, 2, 1}, &r); /* two heads of size 1 */
  if (!st) st = dt_relu(r, out);
  dt_tensor_release(h);
  dt_tensor_release(r);
  return st;
}

static dt_status heads_rank(dt_comm *w, void *arg) {
  tied_case *c = arg;
  return tied_rank(w, c);
}

Test(tp_review, symbolic_view_with_an_empty_shard_transforms_on_every_rank) {
  dt_module *m = NULL, *fc = NULL;
  cr_assert_eq(dt_module_create("Heads", heads_forward, NULL, &m), DT_OK);
  cr_assert_eq(dt_nn_linear(4, 2, true, 1, &fc), DT_OK);
  cr_assert_eq(dt_module_add_child(m, "fc", fc), DT_OK);
  tied_case c = {.plan_fqn = "fc"};
  cr_assert_eq(dt_randn(2, (int64_t[]){3, 4}, DT_F32, 1, &c.x), DT_OK);
  cr_assert_eq(dt_module_forward(m, c.x, &c.ref), DT_OK);
  dt_export_options o = {.dynamic_batch = true};
  cr_assert_eq(dt_export(m, c.x, &o, &c.prog), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_comm_spawn(3, heads_rank, &c), DT_OK, "%s",
               dt_last_error()); /* 2 features, 3 ranks */
  dt_program_destroy(c.prog);
  dt_tensor_release(c.x);
  dt_tensor_release(c.ref);
  dt_module_destroy(m);
}
