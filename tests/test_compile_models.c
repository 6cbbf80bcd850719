/* dt_compile of module forwards (issue 14): the TP seed models — PyTorch's MLPListModule
 * (chunk, two MLPs, ones_like) and Linear + BatchNorm1d — compiled with a dynamic batch (and
 * a dynamic feature dim where the model allows it), run at several sizes, bitwise equal to
 * eager with no recompile; a feature size the model cannot take gives eager's error. After
 * parallelize_module the forward converts traced values (redistribute / from_local), which
 * compile refuses clearly (listed as missing in docs/compile.md). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "comm_helpers.h"
#include "dtensor/compile.h"
#include "reference.h"

static bool bitwise_equal(dt_tensor *a, dt_tensor *b) {
  dt_tensor *ca = NULL, *cb = NULL;
  if (dt_contiguous(a, &ca) || dt_contiguous(b, &cb)) return false;
  bool eq = dt_tensor_numel(ca) == dt_tensor_numel(cb) && dt_tensor_ndim(ca) == dt_tensor_ndim(cb);
  for (int d = 0; eq && d < dt_tensor_ndim(ca); d++)
    eq = dt_tensor_shape(ca)[d] == dt_tensor_shape(cb)[d];
  if (eq)
    eq = memcmp(dt_tensor_data(ca), dt_tensor_data(cb),
                (size_t)dt_tensor_numel(ca) * dt_dtype_size(dt_tensor_dtype(ca))) == 0;
  dt_tensor_release(ca);
  dt_tensor_release(cb);
  return eq;
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

static dt_module *make_mlp_list(void) {
  dt_module *m = NULL, *list = NULL, *mlps[2] = {NULL, NULL};
  dt_status st = dt_module_create("MLPListModule", mlp_list_forward, NULL, &m);
  for (int i = 0; i < 2 && !st; i++)
    st = dt_nn_mlp(6, 18, 6, true, true, 100 + 10 * (uint64_t)i, &mlps[i]);
  if (!st) st = dt_nn_module_list(2, mlps, &list);
  if (!st) st = dt_module_add_child(m, "mlps", list);
  return st ? NULL : m;
}

/* Linear(3 -> 5) then BatchNorm1d(5). */
static dt_status fc_bn_forward(dt_module *m, dt_tensor *x, dt_tensor **out) {
  dt_tensor *h = NULL;
  dt_status st = dt_module_forward(dt_module_find(m, "fc"), x, &h);
  if (!st) st = dt_module_forward(dt_module_find(m, "bn"), h, out);
  dt_tensor_release(h);
  return st;
}

static dt_module *make_fc_bn(void) {
  dt_module *m = NULL, *fc = NULL, *bn = NULL;
  dt_status st = dt_module_create("LinearBN", fc_bn_forward, NULL, &m);
  if (!st) st = dt_nn_linear(3, 5, true, 11, &fc);
  if (!st) st = dt_module_add_child(m, "fc", fc);
  if (!st) st = dt_nn_batch_norm1d(5, 1e-5, &bn);
  if (!st) st = dt_module_add_child(m, "bn", bn);
  return st ? NULL : m;
}

/* The compiled function: the module's forward (user is the module). */
static dt_status module_fn(void *user, int n_in, dt_tensor *const *in, int n_out, dt_tensor **out) {
  (void)n_in;
  (void)n_out;
  return dt_module_forward(user, in[0], &out[0]);
}

/* Compiles model's forward with the given marks and checks it against eager at each shape
 * (rows x cols); returns the recompiles. */
static int64_t check_sizes(dt_module *model, int n_marks, const dt_compile_mark *marks, int n,
                           const int64_t (*shapes)[2]) {
  dt_compiled *c = NULL;
  dt_compile_options o = {.n_marks = n_marks, .marks = marks};
  cr_assert_eq(dt_compile(module_fn, model, 1, 1, &o, &c), DT_OK);
  for (int k = 0; k < n; k++) {
    dt_tensor *x = ref_random(2, shapes[k], DT_F32, -1, 1, 40 + (uint64_t)k), *y = NULL, *e = NULL;
    cr_assert_eq(dt_compiled_call(c, 1, &x, 1, &y), DT_OK, "shape %d: %s", k, dt_last_error());
    cr_assert_eq(dt_module_forward(model, x, &e), DT_OK);
    cr_assert(bitwise_equal(y, e), "shape (%lld, %lld) differs from eager", (long long)shapes[k][0],
              (long long)shapes[k][1]);
    dt_tensor_release(x);
    dt_tensor_release(y);
    dt_tensor_release(e);
  }
  dt_compile_stats s;
  dt_compiled_stats(c, &s);
  dt_compiled_destroy(c);
  return s.recompiles;
}

Test(compile_models, mlp_list_dynamic_batch) {
  dt_module *m = make_mlp_list();
  cr_assert_not_null(m);
  static const int64_t shapes[4][2] = {{4, 12}, {7, 12}, {1, 12}, {33, 12}};
  dt_compile_mark batch = {.input = 0, .dim = 0, .dynamic = true};
  cr_assert_eq(check_sizes(m, 1, &batch, 4, shapes), 0);
  dt_module_destroy(m);
}

/* The features may vary as long as chunk's first piece keeps the 6 the Linear takes: 11 and
 * 12 both give 6 (guard ceil(s1/2) == 6); 14 gives 7, which eager refuses too. */
Test(compile_models, mlp_list_dynamic_features) {
  dt_module *m = make_mlp_list();
  cr_assert_not_null(m);
  static const int64_t shapes[3][2] = {{4, 12}, {5, 11}, {2, 12}};
  dt_compile_mark marks[2] = {{0, 0, true}, {0, 1, true}};
  cr_assert_eq(check_sizes(m, 2, marks, 3, shapes), 0);
  dt_compiled *c = NULL;
  cr_assert_eq(
      dt_compile(module_fn, m, 1, 1, &(dt_compile_options){.n_marks = 2, .marks = marks}, &c),
      DT_OK);
  dt_tensor *x = ref_random(2, (int64_t[]){4, 12}, DT_F32, -1, 1, 1), *y = NULL;
  dt_tensor *bad = ref_random(2, (int64_t[]){4, 14}, DT_F32, -1, 1, 2);
  cr_assert_eq(dt_compiled_call(c, 1, &x, 1, &y), DT_OK);
  dt_tensor_release(y);
  dt_status want = dt_module_forward(m, bad, &y);
  char msg[512];
  snprintf(msg, sizeof msg, "%s", dt_last_error());
  cr_assert_neq(want, DT_OK);
  cr_assert_eq(dt_compiled_call(c, 1, &bad, 1, &y), want);
  cr_assert_str_eq(dt_last_error(), msg);
  char *text = NULL;
  cr_assert_eq(dt_compiled_to_string(c, 0, &text), DT_OK);
  cr_assert(strstr(text, "ceil(s1/2) == 6"), "%s", text);
  dt_free(text);
  dt_tensor_release(x);
  dt_tensor_release(bad);
  dt_compiled_destroy(c);
  dt_module_destroy(m);
}

Test(compile_models, linear_batch_norm_dynamic_batch) {
  dt_module *m = make_fc_bn();
  cr_assert_not_null(m);
  static const int64_t shapes[3][2] = {{8, 3}, {5, 3}, {64, 3}};
  dt_compile_mark batch = {.input = 0, .dim = 0, .dynamic = true};
  cr_assert_eq(check_sizes(m, 1, &batch, 3, shapes), 0);
  dt_module_destroy(m);
}

/* After parallelize_module the forward redistributes traced values: refused, clearly. */
static dt_status parallel_rank(dt_comm *world, void *arg) {
  (void)arg;
  int size = dt_comm_size(world);
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, &size, NULL, &mesh));
  dt_module *m = make_mlp_list();
  RANK_CHECK(m != NULL, "model");
  dt_tp_plan plan = {
      2, (dt_tp_plan_entry[]){{"mlps.0.0", DT_TP_COLWISE}, {"mlps.0.2", DT_TP_ROWWISE}}};
  RANK_OK(dt_parallel_tp_module(m, mesh, &plan, NULL));
  dt_compiled *c = NULL;
  RANK_OK(dt_compile(module_fn, m, 1, 1, &(dt_compile_options){.dynamic = true}, &c));
  dt_tensor *x = ref_random(2, (int64_t[]){4, 12}, DT_F32, -1, 1, 3), *y = NULL;
  dt_status st = dt_compiled_call(c, 1, &x, 1, &y);
  RANK_CHECK(st == DT_ERR_UNSUPPORTED && y == NULL, "status %d", (int)st);
  RANK_CHECK(strstr(dt_last_error(), "inside the compiled function is not supported"), "%s",
             dt_last_error());
  dt_tensor_release(x);
  dt_compiled_destroy(c);
  dt_module_destroy(m);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(compile_models, parallelized_forward_is_refused) { SPAWN_OK(2, parallel_rank, NULL); }
