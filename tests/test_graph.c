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
  char *text = dt_graph_to_text(g);
  cr_assert_not_null(text);
  dt_graph *back = NULL;
  dt_status st = dt_graph_parse(text, &back);
  cr_assert_eq(st, DT_OK, "parse failed: %s\n%s", dt_last_error(), text);
  char *again = dt_graph_to_text(back);
  cr_assert_str_eq(again, text);
  dt_graph_text_free(again);
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
  cr_assert_eq(dt_nn_mlp(6, 18, 6, true, 1, &mlps[0]), DT_OK);
  cr_assert_eq(dt_nn_mlp(6, 18, 6, true, 3, &mlps[1]), DT_OK);
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
  ref_assert_error_mentions("Linear", "in_features");
  cr_assert_eq(dt_nn_layer_norm(4, -1, &m), DT_ERR_INVALID);
  ref_assert_error_mentions("LayerNorm", "eps");
  cr_assert_eq(dt_nn_embedding(4, 0, 1, &m), DT_ERR_INVALID);
  cr_assert_eq(dt_nn_sequential(-1, NULL, &m), DT_ERR_INVALID);
}

/* ---- Export and the interpreter -------------------------------------------------------------- */

Test(export, mlp_graph_runs_like_forward) {
  dt_module *m = NULL;
  cr_assert_eq(dt_nn_mlp(3, 8, 5, true, 7, &m), DT_OK);
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
  dt_graph_text_free(text);
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
