/* Graphs: modules and FQNs, export by tracing, the text format (exact round trip, bad
 * input), and the interpreter against eager forward. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reference.h"

static double max_abs_diff(const dt_tensor *a, const dt_tensor *b) {
  cr_assert_eq(dt_tensor_numel(a), dt_tensor_numel(b));
  double *x = ref_values(a), *y = ref_values(b), m = 0;
  for (int64_t i = 0; i < dt_tensor_numel(a); i++) m = fmax(m, fabs(x[i] - y[i]));
  free(x);
  free(y);
  return m;
}

/* Asserts print(parse(print(g))) == print(g) and returns the text (caller frees). */
static char *assert_round_trip(const dt_graph *g) {
  char *text = dt_graph_to_string(g);
  cr_assert_not_null(text);
  dt_graph *back = NULL;
  dt_status st = dt_graph_parse(text, &back);
  cr_assert_eq(st, DT_OK, "parse failed: %s\n%s", dt_last_error(), text);
  char *again = dt_graph_to_string(back);
  cr_assert_str_eq(again, text);
  dt_free(again);
  dt_graph_destroy(back);
  return text;
}

/* ---- Modules ------------------------------------------------------------------------------ */

static dt_status visit_count(const char *fqn, dt_tensor *t, bool is_buffer, void *user) {
  char *names = user;
  strcat(names, fqn);
  strcat(names, is_buffer ? "(b) " : " ");
  (void)t;
  return DT_OK;
}

Test(modules, fqns_and_layout) {
  dt_module *mlps[2] = {NULL, NULL};
  cr_assert_eq(dt_nn_mlp(6, 18, 6, true, true, 1, &mlps[0]), DT_OK);
  cr_assert_eq(dt_nn_mlp(6, 18, 6, true, true, 3, &mlps[1]), DT_OK);
  dt_module *list = NULL, *root = NULL, *bn = NULL;
  cr_assert_eq(dt_nn_module_list(2, mlps, &list), DT_OK);
  cr_assert_eq(dt_module_create("Model", NULL, NULL, &root), DT_OK);
  cr_assert_eq(dt_module_add_child(root, "mlps", list), DT_OK);
  cr_assert_eq(dt_nn_batch_norm1d(6, 1e-5, &bn), DT_OK);
  cr_assert_eq(dt_module_add_child(root, "bn", bn), DT_OK);
  char names[1024] = "";
  cr_assert_eq(dt_module_visit_tensors(root, visit_count, names), DT_OK);
  cr_assert_str_eq(
      names, "mlps.0.0.weight mlps.0.0.bias mlps.0.2.weight mlps.0.2.bias mlps.1.0.weight "
             "mlps.1.0.bias mlps.1.2.weight mlps.1.2.bias bn.weight bn.bias bn.running_mean(b) "
             "bn.running_var(b) bn.num_batches_tracked(b) ");
  dt_tensor *w = dt_module_get_tensor(root, "mlps.1.0.weight");
  cr_assert_not_null(w);
  cr_assert_eq(dt_tensor_shape(w)[0], 18);
  cr_assert_eq(dt_tensor_shape(w)[1], 6);
  cr_assert_str_eq(dt_module_type(dt_module_find(root, "mlps.1.2")), "Linear");
  cr_assert_str_eq(dt_module_type(dt_module_find(root, "mlps.1")), "Sequential");
  cr_assert_null(dt_module_find(root, "mlps.2"));
  cr_assert_null(dt_module_find(root, "mlps."));
  /* Linear init is U(-1/sqrt(in), 1/sqrt(in)). */
  double *v = ref_values(w);
  for (int i = 0; i < 18 * 6; i++) cr_assert(fabs(v[i]) <= 1 / sqrt(6.0) + 1e-7);
  free(v);
  dt_tensor *x = ref_random(2, (int64_t[]){4, 6}, DT_F32, -1, 1, 5), *y = NULL;
  cr_assert_eq(dt_module_forward(list, x, &y), DT_ERR_INVALID); /* ModuleList has no forward */
  cr_assert_null(y);
  ref_assert_error_mentions("ModuleList", "forward");
  /* Duplicate names are refused and the child is freed. */
  dt_module *extra = NULL;
  cr_assert_eq(dt_nn_relu(&extra), DT_OK);
  cr_assert_eq(dt_module_add_child(root, "bn", extra), DT_ERR_INVALID);
  ref_assert_error_mentions("bn", "already");
  dt_tensor_release(x);
  dt_module_destroy(root);
}

Test(modules, bad_sizes) {
  dt_module *m = NULL;
  cr_assert_eq(dt_nn_linear(0, 3, true, 1, &m), DT_ERR_INVALID);
  cr_assert_null(m);
  ref_assert_error_mentions("dt_nn_linear", "in_features");
  cr_assert_eq(dt_nn_layer_norm(4, -1, &m), DT_ERR_INVALID);
  ref_assert_error_mentions("LayerNorm", "eps");
  cr_assert_eq(dt_nn_embedding(4, 0, 1, &m), DT_ERR_INVALID);
  cr_assert_eq(dt_nn_sequential(-1, NULL, &m), DT_ERR_INVALID);
}

/* ---- Export and the interpreter -------------------------------------------------------------- */

Test(export, mlp_graph_runs_like_forward) {
  dt_module *m = NULL;
  cr_assert_eq(dt_nn_mlp(3, 8, 5, true, true, 7, &m), DT_OK);
  dt_tensor *x = ref_random(2, (int64_t[]){4, 3}, DT_F32, -1, 1, 9), *y = NULL, *z = NULL;
  cr_assert_eq(dt_module_forward(m, x, &y), DT_OK);
  dt_program *p = NULL;
  dt_export_options opt = {.dynamic_batch = true};
  cr_assert_eq(dt_export(m, x, &opt, &p), DT_OK, "%s", dt_last_error());
  const dt_graph *g = dt_program_graph(p);
  char *text = assert_round_trip(g);
  cr_assert(strstr(text, "%linear = linear(%x, %0.weight, %0.bias) : f32[s0, 8]"), "%s", text);
  cr_assert(strstr(text, "%relu = relu(%linear) : f32[s0, 8]"), "%s", text);
  cr_assert(strstr(text, "%2.weight = parameter() : f32[5, 8]"), "%s", text);
  cr_assert_eq(dt_graph_count_target(g, "linear"), 2);
  dt_free(text);
  cr_assert_eq(dt_program_run(p, 1, &x, 1, &z, NULL), DT_OK, "%s", dt_last_error());
  cr_assert_eq(max_abs_diff(y, z), 0);
  /* The batch is symbolic: another batch size runs too. */
  dt_tensor *x2 = ref_random(2, (int64_t[]){9, 3}, DT_F32, -1, 1, 10), *y2 = NULL, *z2 = NULL;
  cr_assert_eq(dt_module_forward(m, x2, &y2), DT_OK);
  cr_assert_eq(dt_program_run(p, 1, &x2, 1, &z2, NULL), DT_OK, "%s", dt_last_error());
  cr_assert_eq(max_abs_diff(y2, z2), 0);
  /* A wrong feature size is refused with the node's name. */
  dt_tensor *bad = ref_random(2, (int64_t[]){4, 4}, DT_F32, -1, 1, 10), *out = NULL;
  cr_assert_eq(dt_program_run(p, 1, &bad, 1, &out, NULL), DT_ERR_INVALID);
  cr_assert_null(out);
  ref_assert_error_mentions("program_run", "%x");
  dt_tensor_release(bad);
  dt_tensor_release(x);
  dt_tensor_release(x2);
  dt_tensor_release(y);
  dt_tensor_release(y2);
  dt_tensor_release(z);
  dt_tensor_release(z2);
  dt_program_destroy(p);
  dt_module_destroy(m);
}

/* A forward touching the awkward parts of the IR: tensor lists (cat), tuples (split,
 * max.dim), in-place ops, a constant made outside the op table, scalars and dtypes. */
static dt_status odd_forward(dt_module *m, dt_tensor *x, dt_tensor **out) {
  dt_tensor *parts[3] = {NULL}, *t[12] = {NULL};
  int n = 0;
  dt_status st = dt_split(x, 2, 1, parts, 3, &n); /* [B, 5] -> [B,2], [B,2], [B,1] */
  if (!st) st = dt_cat(2, (dt_tensor *[]){parts[1], parts[0]}, 1, &t[0]);
  if (!st) st = dt_layer_norm(t[0], 1, (int64_t[]){4}, NULL, NULL, 1e-5, &t[1]);
  if (!st) st = dt_max_dim(t[1], 1, true, &t[2], &t[3]);
  if (!st) st = dt_to(t[3], DT_F32, &t[4]);
  if (!st) st = dt_mul_scalar_(t[4], 0.25);
  if (!st) st = dt_full((int)1, (int64_t[]){4}, 0.5, DT_F32, &t[5]); /* a constant */
  if (!st) st = dt_add(t[1], t[5], &t[6]);
  if (!st) st = dt_sub(t[6], t[4], &t[7]);
  if (!st) st = dt_linear(t[7], dt_module_parameter(m, "w"), NULL, &t[8]);
  if (!st) st = dt_softmax(t[8], -1, &t[9]);
  if (!st) st = dt_cat(1, &parts[2], 1, &t[10]);
  if (!st) st = dt_mul(t[9], t[10], out);
  for (int i = 0; i < 3; i++) dt_tensor_release(parts[i]);
  for (int i = 0; i < 12; i++) dt_tensor_release(t[i]);
  return st;
}

Test(export, lists_tuples_inplace_constants) {
  dt_module *m = NULL;
  cr_assert_eq(dt_module_create("Odd", odd_forward, NULL, &m), DT_OK);
  dt_tensor *w = ref_random(2, (int64_t[]){3, 4}, DT_F32, -1, 1, 2);
  cr_assert_eq(dt_module_add_parameter(m, "w", w), DT_OK);
  dt_tensor *x = ref_random(2, (int64_t[]){6, 5}, DT_F32, -1, 1, 3), *y = NULL, *z = NULL;
  cr_assert_eq(dt_module_forward(m, x, &y), DT_OK, "%s", dt_last_error());
  dt_program *p = NULL;
  dt_export_options opt = {.dynamic_batch = true};
  cr_assert_eq(dt_export(m, x, &opt, &p), DT_OK, "%s", dt_last_error());
  char *text = assert_round_trip(dt_program_graph(p));
  cr_assert(strstr(text, "= split.Tensor(%x, ints=[2, 1]) : (f32[s0, 2], f32[s0, 2], f32[s0, 1])"),
            "%s", text);
  cr_assert(strstr(text, "= cat([%getitem, %getitem_1], ints=[1]) : f32[s0, 4]") ||
                strstr(text, "= cat([%getitem_1, %getitem], ints=[1]) : f32[s0, 4]"),
            "%s", text);
  cr_assert(
      strstr(text, "layer_norm(%cat, None, None, int_list=[4], scalars=[1e-05]) : f32[s0, 4]"),
      "%s", text);
  cr_assert(strstr(text, "%_tensor_constant0 = buffer() : f32[4]"), "%s", text);
  cr_assert(strstr(text, "mul_.Scalar(%to, scalars=[0.25, 1]) : f32[s0, 1]"), "%s", text);
  cr_assert(strstr(text, "linear(%sub, %w, None) : f32[s0, 3]"), "%s", text);
  dt_free(text);
  cr_assert_not_null(dt_program_state(p, "_tensor_constant0"));
  cr_assert_eq(dt_program_run(p, 1, &x, 1, &z, NULL), DT_OK, "%s", dt_last_error());
  cr_assert_eq(max_abs_diff(y, z), 0);
  dt_tensor_release(z);
  dt_tensor *x2 = ref_random(2, (int64_t[]){3, 5}, DT_F32, -1, 1, 4), *y2 = NULL;
  cr_assert_eq(dt_module_forward(m, x2, &y2), DT_OK);
  cr_assert_eq(dt_program_run(p, 1, &x2, 1, &z, NULL), DT_OK, "%s", dt_last_error());
  cr_assert_eq(max_abs_diff(y2, z), 0);
  dt_tensor_release(x2);
  dt_tensor_release(y2);
  dt_tensor_release(z);
  dt_tensor_release(x);
  dt_tensor_release(y);
  dt_tensor_release(w);
  dt_program_destroy(p);
  dt_module_destroy(m);
}

/* A reshape of the batch cannot be written with s0: the graph keeps the traced sizes. */
static dt_status flat_forward(dt_module *m, dt_tensor *x, dt_tensor **out) {
  (void)m;
  return dt_reshape(x, 1, (int64_t[]){dt_tensor_numel(x)}, out);
}

Test(export, sizes_that_depend_on_the_batch_stay_concrete) {
  dt_module *m = NULL;
  cr_assert_eq(dt_module_create("Flat", flat_forward, NULL, &m), DT_OK);
  dt_tensor *x = ref_random(2, (int64_t[]){3, 4}, DT_F32, -1, 1, 3);
  dt_program *p = NULL;
  dt_export_options opt = {.dynamic_batch = true};
  cr_assert_eq(dt_export(m, x, &opt, &p), DT_OK, "%s", dt_last_error());
  char *text = assert_round_trip(dt_program_graph(p));
  cr_assert(strstr(text, "graph() {"), "%s", text);
  cr_assert(strstr(text, "%x = placeholder() : f32[3, 4]"), "%s", text);
  dt_free(text);
  dt_tensor_release(x);
  dt_program_destroy(p);
  dt_module_destroy(m);
}

/* ---- The text format: bad input
 * ------------------------------------------------------------------ */

static void expect_parse_error(const char *text, const char *mention) {
  dt_graph *g = (dt_graph *)text;
  cr_assert_eq(dt_graph_parse(text, &g), DT_ERR_INVALID, "accepted:\n%s", text);
  cr_assert_null(g);
  ref_assert_error_mentions("graph_parse: line", mention);
}

#define HDR "graph() {\n  %x = placeholder() : f32[2, 3]\n"

Test(graph_text, malformed) {
  expect_parse_error("", "expected 'graph('");
  expect_parse_error("graph(", "expected a symbol");
  expect_parse_error(HDR, "expected a node");
  expect_parse_error(HDR "  return (%x)\n", "ended");
  expect_parse_error(HDR "  return (%x)\n} extra", "after the end");
  expect_parse_error(HDR "  return (%y)\n}", "not defined");
  expect_parse_error(HDR "  %x = placeholder() : f32[2, 3]\n  return (%x)\n}", "defined twice");
  expect_parse_error(HDR "  %r = frobnicate(%x) : f32[2, 3]\n  return (%r)\n}",
                     "unknown op 'frobnicate'");
  expect_parse_error(HDR "  %r = relu(%x) : f32[2, 4]\n  return (%r)\n}",
                     "relu gives f32[2, 3] but f32[2, 4]");
  expect_parse_error(HDR "  %r = relu(%x) : f99[2, 3]\n  return (%r)\n}", "unknown dtype");
  expect_parse_error(HDR "  %r = relu(%x) : f32[s0, 3]\n  return (%r)\n}", "not declared");
  expect_parse_error(HDR "  %r = relu(%x, bogus=1) : f32[2, 3]\n  return (%r)\n}",
                     "unknown attribute");
  expect_parse_error(HDR "  %r = add.Tensor(%x) : f32[2, 3]\n  return (%r)\n}", "None");
  expect_parse_error(HDR "  %r = relu(%x) : f32[99999999999999999999, 3]\n  return (%r)\n}",
                     "out of range");
  expect_parse_error(HDR "  %r = chunk(%x, ints=[2, 0]) : f32[1, 3]\n  return (%r)\n}", "tuple");
  expect_parse_error(HDR "  %r = chunk(%x, ints=[2, 0]) : (f32[1, 3], f32[1, 3])\n  return (%r)\n}",
                     "getitem");
  expect_parse_error(HDR "  %r = getitem(%x, 0) : f32[2, 3]\n  return (%r)\n}", "not a tuple");
  expect_parse_error(HDR "  %r = cat(%x, ints=[0]) : f32[2, 3]\n  return (%r)\n}", "tensor list");
  expect_parse_error("graph() world=2 rank=0 {\n  %x = placeholder() : f32[2, 3] R\n"
                     "  %r = wait_tensor(%x) : f32[2, 3] R\n  return (%r)\n}",
                     "wait for a collective");
  expect_parse_error(HDR "  %r = all_reduce(%x, op=sum) : f32[2, 3]\n  return (%r)\n}",
                     "transformed graph");
  expect_parse_error("graph() world=2 rank=2 {\n", "out of range");
  expect_parse_error(
      "graph() world=2 rank=0 {\n  %x = placeholder() : f32[2, 3] S(2)\n  return (%x)\n}",
      "S(2) of a value with 2 dims");
  expect_parse_error("graph() world=2 rank=0 {\n  %x = placeholder() : f32[2, 3] R\n"
                     "  %r = all_gather_into_tensor(%x, dim=5) : f32[2, 3] R\n  return (%r)\n}",
                     "out of range");
  expect_parse_error("graph(s1=3) {\n", "expected s0");
  /* A collective's value is in flight until a wait_tensor takes it. */
  expect_parse_error("graph() world=2 rank=0 { %x = placeholder() : f32[4] P(sum) "
                     "%a = all_reduce(%x, op=sum) : f32[4] R return (%a) }",
                     "in flight");
  expect_parse_error("graph() world=2 rank=0 { %x = placeholder() : f32[4] S(0) "
                     "%a = all_gather_into_tensor(%x, dim=0) : f32[8] R %r = relu(%a) : f32[8] R "
                     "%w = wait_tensor(%a) : f32[8] R return (%w) }",
                     "in flight");
  expect_parse_error("graph() world=2 rank=0 { %x = placeholder() : f32[4] S(0) "
                     "%a = all_gather_into_tensor(%x, dim=0) : f32[8] R "
                     "%w = wait_tensor(%a) : f32[8] S(0) return (%w) }",
                     "placement must be its collective's");
}

Test(graph_text, comm_nodes_round_trip) {
  const char *text =
      "graph(s0=4) world=2 rank=1 {\n"
      "  %x = placeholder() : f32[s0, 3] S(1)\n"
      "  %all_gather_into_tensor = all_gather_into_tensor(%x, dim=1) : f32[s0, 5] R\n"
      "  %wait_tensor = wait_tensor(%all_gather_into_tensor) : f32[s0, 5] R\n"
      "  %all_to_all = all_to_all(%x, dim=1, new_dim=0) : f32[s0, 5] S(0)\n"
      "  %wait_tensor_1 = wait_tensor(%all_to_all) : f32[s0, 5] S(0)\n"
      "  %reduce_scatter_tensor = reduce_scatter_tensor(%wait_tensor, dim=1, op=max) : f32[s0, 2] "
      "S(1)\n"
      "  %wait_tensor_2 = wait_tensor(%reduce_scatter_tensor) : f32[s0, 2] S(1)\n"
      "  return (%wait_tensor_1, %wait_tensor_2)\n"
      "}\n";
  dt_graph *g = NULL;
  cr_assert_eq(dt_graph_parse(text, &g), DT_OK, "%s", dt_last_error());
  char *again = dt_graph_to_string(g);
  cr_assert_str_eq(again, text);
  cr_assert_eq(dt_graph_world_size(g), 2);
  cr_assert_eq(dt_graph_rank(g), 1);
  cr_assert_eq(dt_graph_count_target(g, "wait_tensor"), 3);
  cr_assert_eq(dt_graph_output_count(g), 2);
  /* print with a small buffer truncates and reports the size needed */
  char small[16];
  size_t needed = 0;
  cr_assert_eq(dt_graph_format(g, small, sizeof small, &needed), DT_OK);
  cr_assert_eq(needed, strlen(text));
  cr_assert_eq(strlen(small), 15);
  dt_free(again);
  dt_graph_destroy(g);
}

/* ---- The interpreter on distributed tensors ----------------------------------------------------
 */

#include "comm_helpers.h"

static dt_status dist_rank(dt_comm *world, void *arg) {
  const dt_program *local = arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){dt_comm_size(world)}, NULL, &mesh));
  /* The same graph with replicated distributed parameters, fed a batch-sharded input. */
  int n = dt_program_state_count(local);
  const char *names[16];
  dt_tensor *state[16] = {NULL};
  for (int i = 0; i < n; i++) {
    names[i] = dt_program_state_name(local, i);
    RANK_OK(dt_dist_distribute_tensor(mesh, dt_program_state_tensor(local, i), 1,
                                      (dt_placement[]){dt_replicate()}, &state[i]));
  }
  dt_program *p = NULL;
  RANK_OK(dt_program_create(dt_program_graph(local), n, names, state, &p));
  dt_tensor *x = ref_random(2, (int64_t[]){7, 3}, DT_F32, -1, 1, 9), *dx = NULL, *dy = NULL,
            *full = NULL, *y = NULL;
  RANK_OK(dt_dist_distribute_tensor(mesh, x, 1, (dt_placement[]){dt_shard(0)}, &dx));
  RANK_OK(dt_program_run(p, 1, &dx, 1, &dy, NULL));
  RANK_CHECK(dt_tensor_is_distributed(dy), "distributed in, distributed out");
  RANK_OK(dt_dist_full_tensor(dy, &full));
  RANK_OK(dt_program_run(local, 1, &x, 1, &y, NULL));
  RANK_CHECK(max_abs_diff(full, y) <= 1e-6, "distributed run differs");
  for (int i = 0; i < n; i++) dt_tensor_release(state[i]);
  dt_tensor_release(x);
  dt_tensor_release(dx);
  dt_tensor_release(dy);
  dt_tensor_release(full);
  dt_tensor_release(y);
  dt_program_destroy(p);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(interpreter, runs_on_distributed_tensors) {
  dt_module *m = NULL;
  cr_assert_eq(dt_nn_mlp(3, 8, 5, true, true, 7, &m), DT_OK);
  dt_tensor *x = ref_random(2, (int64_t[]){7, 3}, DT_F32, -1, 1, 9);
  dt_program *p = NULL;
  dt_export_options opt = {.dynamic_batch = true};
  cr_assert_eq(dt_export(m, x, &opt, &p), DT_OK);
  SPAWN_OK(2, dist_rank, p);
  SPAWN_OK(3, dist_rank, p);
  dt_tensor_release(x);
  dt_program_destroy(p);
  dt_module_destroy(m);
}
