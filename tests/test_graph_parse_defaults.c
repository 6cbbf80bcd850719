/* Graph text regressions (issue 10, items 5 and 6): omitted scalars take the schema's
 * defaults, extra tensor arguments are refused for every op, and names are found by hash so
 * a long chain parses (and runs) in linear time. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Private header: every op's schema defaults parse and print: graphs are built node by node from
 * dt__op_table. */
#include "graph/graph_impl.h"
#include "reference.h"

#define HDR "graph() {\n  %x = placeholder() : f32[2, 3]\n  %y = placeholder() : f32[2, 3]\n"

static const double x_values[6] = {1, 2, 3, 4, 5, 6};
static const double y_values[6] = {10, 20, 30, 40, 50, 60};

/* Parses text, runs it on x and y above and returns the single output (caller releases). */
static dt_tensor *run_text(const char *text) {
  dt_graph *g = NULL;
  cr_assert_eq(dt_graph_parse(text, &g), DT_OK, "%s\n%s", dt_last_error(), text);
  dt_program *p = NULL;
  cr_assert_eq(dt_program_create(g, 0, NULL, NULL, &p), DT_OK, "%s", dt_last_error());
  dt_graph_destroy(g);
  int64_t shape[] = {2, 3};
  dt_tensor *in[2] = {ref_tensor(2, shape, DT_F32, x_values),
                      ref_tensor(2, shape, DT_F32, y_values)};
  dt_tensor *out = NULL;
  int n_in = dt_graph_input_count(dt_program_graph(p));
  cr_assert_eq(dt_program_run(p, n_in, in, 1, &out, NULL), DT_OK, "%s", dt_last_error());
  dt_tensor_release(in[0]);
  dt_tensor_release(in[1]);
  dt_program_destroy(p);
  return out;
}

static void expect_values(const char *body, const double *expected) {
  char text[1024];
  snprintf(text, sizeof text, "%s%s  return (%%r)\n}", HDR, body);
  dt_tensor *out = run_text(text);
  ref_assert_close(out, 2, (int64_t[]){2, 3}, DT_F32, expected, 0, 1e-6);
  dt_tensor_release(out);
}

static void expect_parse_error(const char *text, const char *a, const char *b) {
  dt_graph *g = (dt_graph *)text;
  cr_assert_eq(dt_graph_parse(text, &g), DT_ERR_INVALID, "accepted:\n%s", text);
  cr_assert_null(g);
  ref_assert_error_mentions(a, b);
}

/* ---- Defaults from the schema -------------------------------------------------------------- */

Test(graph_parse_defaults, omitted_alpha_is_one) {
  double sum[6], diff[6], plus2[6], minus2[6];
  for (int i = 0; i < 6; i++) {
    sum[i] = x_values[i] + y_values[i];
    diff[i] = x_values[i] - y_values[i];
    plus2[i] = x_values[i] + 2;
    minus2[i] = x_values[i] - 2;
  }
  /* Before the fix these ran with alpha = 0 and returned x. */
  expect_values("  %r = add.Tensor(%x, %y) : f32[2, 3]\n", sum);
  expect_values("  %r = sub.Tensor(%x, %y) : f32[2, 3]\n", diff);
  expect_values("  %r = add.Scalar(%x, scalars=[2]) : f32[2, 3]\n", plus2);
  expect_values("  %r = sub.Scalar(%x, scalars=[2]) : f32[2, 3]\n", minus2);
  expect_values("  %c = clone(%x) : f32[2, 3]\n  %r = add_.Tensor(%c, %y) : f32[2, 3]\n", sum);
  expect_values("  %c = clone(%x) : f32[2, 3]\n  %r = sub_.Tensor(%c, %y) : f32[2, 3]\n", diff);
  expect_values("  %c = clone(%x) : f32[2, 3]\n  %r = add_.Scalar(%c, scalars=[2]) : f32[2, 3]\n",
                plus2);
  /* An explicit alpha still wins. */
  double x_plus_3y[6];
  for (int i = 0; i < 6; i++) x_plus_3y[i] = x_values[i] + 3 * y_values[i];
  expect_values("  %r = add.Tensor(%x, %y, scalars=[3]) : f32[2, 3]\n", x_plus_3y);
}

Test(graph_parse_defaults, omitted_addmm_beta_and_alpha_are_one) {
  /* x + x @ I: beta = alpha = 1 gives 2x; the old zeros gave 0. */
  double twice[6];
  for (int i = 0; i < 6; i++) twice[i] = 2 * x_values[i];
  const char *text = HDR "  %e = placeholder() : f32[3, 3]\n"
                         "  %r = addmm(%x, %x, %e) : f32[2, 3]\n  return (%r)\n}";
  dt_graph *g = NULL;
  cr_assert_eq(dt_graph_parse(text, &g), DT_OK, "%s", dt_last_error());
  dt_program *p = NULL;
  cr_assert_eq(dt_program_create(g, 0, NULL, NULL, &p), DT_OK, "%s", dt_last_error());
  dt_graph_destroy(g);
  double eye[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1};
  dt_tensor *in[3] = {ref_tensor(2, (int64_t[]){2, 3}, DT_F32, x_values),
                      ref_tensor(2, (int64_t[]){2, 3}, DT_F32, y_values),
                      ref_tensor(2, (int64_t[]){3, 3}, DT_F32, eye)};
  dt_tensor *out = NULL;
  cr_assert_eq(dt_program_run(p, 3, in, 1, &out, NULL), DT_OK, "%s", dt_last_error());
  ref_assert_close(out, 2, (int64_t[]){2, 3}, DT_F32, twice, 0, 1e-6);
  dt_tensor_release(out);
  for (int i = 0; i < 3; i++) dt_tensor_release(in[i]);
  dt_program_destroy(p);
}

/* Every op's Scalar / float parameters, as the schema gives them: slot defaults or required
 * (NAN here). Ops not listed have none. */
typedef struct scalar_case {
  const char *op;
  int n;
  double defaults[2];
} scalar_case;

static const scalar_case scalar_cases[] = {
    {"add.Tensor", 1, {1}},
    {"sub.Tensor", 1, {1}},
    {"add_.Tensor", 1, {1}},
    {"sub_.Tensor", 1, {1}},
    {"add.Scalar", 2, {NAN, 1}},
    {"sub.Scalar", 2, {NAN, 1}},
    {"add_.Scalar", 2, {NAN, 1}},
    {"mul.Scalar", 1, {NAN}},
    {"div.Scalar", 1, {NAN}},
    {"mul_.Scalar", 1, {NAN}},
    {"pow.Tensor_Scalar", 1, {NAN}},
    {"fill_.Scalar", 1, {NAN}},
    {"eq.Scalar", 1, {NAN}},
    {"ne.Scalar", 1, {NAN}},
    {"lt.Scalar", 1, {NAN}},
    {"le.Scalar", 1, {NAN}},
    {"gt.Scalar", 1, {NAN}},
    {"ge.Scalar", 1, {NAN}},
    {"masked_fill.Scalar", 1, {NAN}},
    {"addmm", 2, {1, 1}},
    {"layer_norm", 1, {1e-05}},
    {"rms_norm", 1, {1e-05}},
    {"layer_norm_backward", 1, {1e-05}},
    {"rms_norm_backward", 1, {1e-05}},
    {"layer_norm_backward_affine", 1, {1e-05}},
    {"layer_norm_backward_all", 1, {1e-05}},
    {"rms_norm_backward_weight", 1, {1e-05}},
    {"scaled_dot_product_attention", 1, {0.0}},
    {"scaled_dot_product_attention_backward", 1, {0.0}},
    {"batch_norm", 1, {NAN}},
    {"batch_norm_training", 1, {NAN}},
    {"cross_entropy_loss", 1, {0.0}},
    {"cross_entropy_loss_backward", 1, {0.0}},
    {"full_like", 1, {NAN}},
    {"uniform_", 2, {0, 1}},
};

Test(graph_parse_defaults, every_op_scalar_defaults_come_from_its_schema) {
  int matched = 0;
  for (int op = 0; op < DT_OP_COUNT; op++) {
    const dt_op_def *def = &dt__op_table[op];
    dt_op_signature sig;
    dt__op_signature(op, &sig);
    cr_assert(sig.max_inputs >= def->n_required && sig.max_inputs <= DT_OP_MAX_INPUTS,
              "%s: %d tensor parameters, %d required", def->name, sig.max_inputs, def->n_required);
    const scalar_case *c = NULL;
    for (size_t k = 0; k < sizeof scalar_cases / sizeof *scalar_cases; k++) {
      if (strcmp(scalar_cases[k].op, def->name) == 0) c = &scalar_cases[k];
    }
    int n = c ? c->n : 0;
    matched += c != NULL;
    cr_assert_eq(sig.n_scalars, n, "%s: %d scalars, expected %d", def->name, sig.n_scalars, n);
    for (int k = 0; k < n; k++) {
      bool required = isnan(c->defaults[k]);
      cr_assert_eq(sig.scalar_has_default[k], !required, "%s: scalar %d", def->name, k);
      if (!required) {
        cr_assert_eq(sig.scalar_default[k], c->defaults[k], "%s: scalar %d default %g", def->name,
                     k, sig.scalar_default[k]);
      }
    }
  }
  cr_assert_eq(matched, (int)(sizeof scalar_cases / sizeof *scalar_cases));
}

Test(graph_parse_defaults, defaults_print_and_round_trip) {
  const char *text = HDR "  %a = add.Tensor(%x, %y) : f32[2, 3]\n"
                         "  %n = layer_norm(%a, None, None, int_list=[3]) : f32[2, 3]\n"
                         "  %m = mul.Tensor(%n, %y) : f32[2, 3]\n"
                         "  return (%m)\n}";
  dt_graph *g = NULL;
  cr_assert_eq(dt_graph_parse(text, &g), DT_OK, "%s", dt_last_error());
  char *printed = dt_graph_to_string(g);
  cr_assert(strstr(printed, "add.Tensor(%x, %y, scalars=[1]) : f32[2, 3]"), "%s", printed);
  cr_assert(strstr(printed, "layer_norm(%a, None, None, int_list=[3], scalars=[1e-05])"), "%s",
            printed);
  cr_assert(strstr(printed, "mul.Tensor(%n, %y) : f32[2, 3]"), "%s", printed);
  dt_graph *back = NULL;
  cr_assert_eq(dt_graph_parse(printed, &back), DT_OK, "%s", dt_last_error());
  char *again = dt_graph_to_string(back);
  cr_assert_str_eq(again, printed);
  dt_free(again);
  dt_free(printed);
  dt_graph_destroy(back);
  dt_graph_destroy(g);
  /* A scalar explicitly zero stays zero through the text (it is not an absent one). */
  const char *zero = HDR "  %r = layer_norm(%x, None, None, int_list=[3], scalars=[0]) : f32[2, 3]"
                         "\n  return (%r)\n}";
  cr_assert_eq(dt_graph_parse(zero, &g), DT_OK, "%s", dt_last_error());
  printed = dt_graph_to_string(g);
  cr_assert(strstr(printed, "int_list=[3], scalars=[0])"), "%s", printed);
  dt_free(printed);
  dt_graph_destroy(g);
}

Test(graph_parse_defaults, a_scalar_without_default_must_be_given) {
  expect_parse_error(HDR "  %r = mul.Scalar(%x) : f32[2, 3]\n  return (%r)\n}", "mul.Scalar",
                     "'other' has no default");
  expect_parse_error(HDR "  %r = full_like(%x) : f32[2, 3]\n  return (%r)\n}", "full_like",
                     "'fill_value' has no default");
}

/* ---- Arity --------------------------------------------------------------------------------- */

Test(graph_parse_defaults, extra_tensor_arguments_are_refused) {
  expect_parse_error(HDR "  %r = relu(%x, %y, %y) : f32[2, 3]\n  return (%r)\n}",
                     "relu takes 1 tensor argument, 3 given", "line 4");
  expect_parse_error(HDR "  %r = add.Tensor(%x, %x, %y) : f32[2, 3]\n  return (%r)\n}",
                     "add.Tensor takes 2 tensor arguments, 3 given", "graph_parse");
  expect_parse_error(HDR "  %r = linear(%x, %y, None, %y) : f32[2, 2]\n  return (%r)\n}",
                     "linear takes 2 to 3 tensor arguments, 4 given", "graph_parse");
  expect_parse_error(HDR "  %r = cat(%x, [%x, %y], ints=[0]) : f32[4, 3]\n  return (%r)\n}",
                     "cat takes 0 tensor arguments, 1 given", "graph_parse");
  /* The largest arity is still accepted. */
  const char *text =
      HDR "  %w = placeholder() : f32[3]\n"
          "  %r = layer_norm(%x, %w, %w, int_list=[3]) : f32[2, 3]\n  return (%r)\n}";
  dt_graph *g = NULL;
  cr_assert_eq(dt_graph_parse(text, &g), DT_OK, "%s", dt_last_error());
  dt_graph_destroy(g);
}

/* One more tensor than the schema has, for every op of every family: refused by arity, before
 * anything looks at types or attributes. */
Test(graph_parse_defaults, every_op_refuses_an_extra_tensor) {
  for (int op = 0; op < DT_OP_COUNT; op++) {
    const dt_op_def *def = &dt__op_table[op];
    dt_op_signature sig;
    dt__op_signature(op, &sig);
    char text[1024], args[256] = "", expected[160];
    for (int k = 0; k <= sig.max_inputs; k++) strcat(args, k ? ", %x" : "%x");
    if (strcmp(def->name, "cat") == 0 || strcmp(def->name, "stack") == 0) strcat(args, ", [%x]");
    snprintf(text, sizeof text, "%s  %%r = %s(%s) : %s\n  return (%%r)\n}", HDR, def->name, args,
             dt__op_returns_tuple(op) ? "(f32[2, 3],)" : "f32[2, 3]");
    snprintf(expected, sizeof expected, "%s takes ", def->name);
    char given[64];
    snprintf(given, sizeof given, "tensor argument%s, %d given", sig.max_inputs == 1 ? "" : "s",
             sig.max_inputs + 1);
    expect_parse_error(text, expected, given);
  }
}

/* ---- Size ---------------------------------------------------------------------------------- */

/* A chain of n add.Tensor nodes: a_i = a_{i-1} + x, so the result is (n + 1) * x. */
static char *chain_text(int n) {
  size_t cap = (size_t)n * 64 + 256, used = 0;
  char *text = malloc(cap);
  cr_assert_not_null(text);
  used += (size_t)snprintf(text, cap,
                           "graph() {\n  %%x = placeholder() : f32[2, 3]\n"
                           "  %%a0 = clone(%%x) : f32[2, 3]\n");
  for (int i = 1; i <= n; i++) {
    used += (size_t)snprintf(text + used, cap - used,
                             "  %%a%d = add.Tensor(%%a%d, %%x) : f32[2, 3]\n", i, i - 1);
  }
  snprintf(text + used, cap - used, "  return (%%a%d)\n}\n", n);
  return text;
}

Test(graph_parse_defaults, a_chain_of_100000_nodes_parses_and_runs, .timeout = 120) {
  int n = 100000;
  char *text = chain_text(n);
  dt_graph *g = NULL;
  cr_assert_eq(dt_graph_parse(text, &g), DT_OK, "%s", dt_last_error());
  free(text);
  cr_assert_eq(dt_graph_node_count(g), n + 3); /* x, a0..an, the return */
  cr_assert_eq(dt_graph_count_target(g, "add"), n);
  dt_program *p = NULL;
  cr_assert_eq(dt_program_create(g, 0, NULL, NULL, &p), DT_OK, "%s", dt_last_error());
  dt_graph_destroy(g);
  dt_tensor *x = ref_tensor(2, (int64_t[]){2, 3}, DT_F32, x_values), *out = NULL;
  cr_assert_eq(dt_program_run(p, 1, &x, 1, &out, NULL), DT_OK, "%s", dt_last_error());
  double expected[6];
  for (int i = 0; i < 6; i++) expected[i] = (n + 1) * x_values[i];
  ref_assert_close(out, 2, (int64_t[]){2, 3}, DT_F32, expected, 0, 0);
  dt_tensor_release(out);
  dt_tensor_release(x);
  dt_program_destroy(p);
}

Test(graph_parse_defaults, names_are_found_among_many) {
  /* References far back, redefinitions and unknown names still behave in a large graph. */
  char *text = chain_text(5000);
  char *ret = strstr(text, "  return");
  cr_assert_not_null(ret);
  size_t head = (size_t)(ret - text);
  char *bad = malloc(head + 256);
  memcpy(bad, text, head);
  snprintf(bad + head, 256, "  %%a17 = relu(%%x) : f32[2, 3]\n  return (%%a17)\n}\n");
  expect_parse_error(bad, "'%a17' is defined twice", "line 5004");
  snprintf(bad + head, 256, "  %%z = relu(%%a5001) : f32[2, 3]\n  return (%%z)\n}\n");
  expect_parse_error(bad, "'%a5001' is not defined", "graph_parse");
  snprintf(bad + head, 256, "  %%z = add.Tensor(%%a1, %%a4999) : f32[2, 3]\n  return (%%z)\n}\n");
  dt_graph *g = NULL;
  cr_assert_eq(dt_graph_parse(bad, &g), DT_OK, "%s", dt_last_error());
  dt_graph_destroy(g);
  free(bad);
  free(text);
}

Test(graph_parse_defaults, node_limit_is_documented_and_enforced) {
  cr_assert_eq(DT_GRAPH_MAX_NODES, 1 << 22);
  /* Appending past the limit fails without touching the graph. */
  dt_graph *g = NULL;
  cr_assert_eq(dt__graph_create(&g), DT_OK);
  g->n_nodes = DT_GRAPH_MAX_NODES; /* pretend: the check comes before any node is read */
  cr_assert_eq(dt__graph_add_node(g, DT_NODE_PLACEHOLDER, "x"), -1);
  g->n_nodes = 0;
  cr_assert_eq(dt__graph_add_node(g, DT_NODE_PLACEHOLDER, "x"), 0);
  cr_assert_eq(dt__graph_add_node(g, DT_NODE_PLACEHOLDER, "x"), 1);
  cr_assert_str_eq(g->nodes[1].name, "x_1");
  cr_assert_eq(dt__graph_find(g, "x_1"), 1);
  cr_assert_eq(dt__graph_find(g, "x"), 0);
  cr_assert_eq(dt__graph_find(g, "x_2"), -1);
  dt_graph_destroy(g);
}
