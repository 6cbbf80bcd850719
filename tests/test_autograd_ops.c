/* Gradients of the pointwise activations, max/min reductions, nn ops (softmax, layer_norm,
 * batch_norm, embedding, cat/stack) and cutting views (narrow, slice, select, split, chunk)
 * against central finite differences in float64 (odd sizes, broadcasting, non-contiguous
 * inputs); PyTorch's tie rules with exact values; and the coverage of the backward column:
 * every op of the table has a formula or is listed below as not differentiable with the
 * reason. */
#include <stdio.h>

#include "gradcheck.h"
/* Private header: every op with a backward is checked: the test walks dt__op_table and its
 * traits. */
#include "ops/op_impl.h"

/* A bool tensor with true at every third element (row-major), as a fixed condition. */
static dt_tensor *pattern_mask(int ndim, const int64_t *shape) {
  dt_tensor *m = NULL;
  OK(dt_zeros(ndim, shape, DT_BOOL, &m));
  int64_t n = dt_tensor_numel(m), index[8] = {0};
  for (int64_t e = 0; e < n; e++) {
    OK(dt_tensor_set(m, index, e % 3 == 0 ? 1.0 : 0.0));
    for (int d = ndim - 1; d >= 0; d--) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
  return m;
}

/* ---- The ops ----------------------------------------------------------------------------- */

static dt_status f_sqrt(dt_tensor **x, dt_tensor **o) { return dt_sqrt(x[0], o); }
static dt_status f_rsqrt(dt_tensor **x, dt_tensor **o) { return dt_rsqrt(x[0], o); }
static dt_status f_gelu(dt_tensor **x, dt_tensor **o) { return dt_gelu(x[0], o); }
static dt_status f_gelu_tanh(dt_tensor **x, dt_tensor **o) { return dt_gelu_tanh(x[0], o); }
static dt_status f_silu(dt_tensor **x, dt_tensor **o) { return dt_silu(x[0], o); }
static dt_status f_tanh(dt_tensor **x, dt_tensor **o) { return dt_tanh(x[0], o); }
static dt_status f_sigmoid(dt_tensor **x, dt_tensor **o) { return dt_sigmoid(x[0], o); }
static dt_status f_abs(dt_tensor **x, dt_tensor **o) { return dt_abs(x[0], o); }
static dt_status f_maximum(dt_tensor **x, dt_tensor **o) { return dt_maximum(x[0], x[1], o); }
static dt_status f_minimum(dt_tensor **x, dt_tensor **o) { return dt_minimum(x[0], x[1], o); }
static dt_status f_pow(dt_tensor **x, dt_tensor **o) { return dt_pow(x[0], x[1], o); }
static dt_status f_where(dt_tensor **x, dt_tensor **o) {
  dt_tensor *c = pattern_mask(2, (int64_t[]){3, 5});
  dt_status st = dt_where(c, x[0], x[1], o);
  dt_tensor_release(c);
  return st;
}
static dt_status f_masked_fill(dt_tensor **x, dt_tensor **o) {
  dt_tensor *m = pattern_mask(1, (int64_t[]){5});
  dt_status st = dt_masked_fill(x[0], m, 2.5, o);
  dt_tensor_release(m);
  return st;
}
static dt_status f_max(dt_tensor **x, dt_tensor **o) { return dt_max(x[0], o); }
static dt_status f_min(dt_tensor **x, dt_tensor **o) { return dt_min(x[0], o); }
static dt_status f_amax_keep(dt_tensor **x, dt_tensor **o) {
  return dt_amax(x[0], 2, (int64_t[]){0, 2}, true, o);
}
static dt_status f_amin(dt_tensor **x, dt_tensor **o) {
  return dt_amin(x[0], 1, (int64_t[]){-1}, false, o);
}
static dt_status f_max_dim(dt_tensor **x, dt_tensor **o) {
  dt_tensor *idx = NULL;
  dt_status st = dt_max_dim(x[0], 1, false, o, &idx);
  dt_tensor_release(idx);
  return st;
}
static dt_status f_min_dim_keep(dt_tensor **x, dt_tensor **o) {
  dt_tensor *idx = NULL;
  dt_status st = dt_min_dim(x[0], 0, true, o, &idx);
  dt_tensor_release(idx);
  return st;
}
static dt_status f_softmax1(dt_tensor **x, dt_tensor **o) { return dt_softmax(x[0], 1, o); }
static dt_status f_softmax_last(dt_tensor **x, dt_tensor **o) { return dt_softmax(x[0], -1, o); }
static dt_status f_log_softmax0(dt_tensor **x, dt_tensor **o) { return dt_log_softmax(x[0], 0, o); }
static dt_status f_layer_norm1(dt_tensor **x, dt_tensor **o) {
  return dt_layer_norm(x[0], 1, (int64_t[]){5}, x[1], x[2], 1e-5, o);
}
static dt_status f_layer_norm2(dt_tensor **x, dt_tensor **o) {
  return dt_layer_norm(x[0], 2, (int64_t[]){4, 5}, x[1], x[2], 1e-5, o);
}
static dt_status f_layer_norm_plain(dt_tensor **x, dt_tensor **o) {
  return dt_layer_norm(x[0], 1, (int64_t[]){5}, NULL, NULL, 1e-5, o);
}
static dt_status f_layer_norm_all(dt_tensor **x, dt_tensor **o) {
  return dt_layer_norm(x[0], 1, (int64_t[]){7}, x[1], NULL, 1e-5, o);
}
static dt_status f_batch_norm(dt_tensor **x, dt_tensor **o) {
  return dt_batch_norm(x[0], x[1], x[2], x[3], x[4], 1e-5, o);
}
static dt_status f_batch_norm_plain(dt_tensor **x, dt_tensor **o) {
  return dt_batch_norm(x[0], x[1], x[2], NULL, NULL, 1e-5, o);
}
static dt_status f_batch_norm_training(dt_tensor **x, dt_tensor **o) {
  return dt_batch_norm_training(x[0], x[1], x[2], 1e-5, o);
}
static dt_status f_batch_norm_training_plain(dt_tensor **x, dt_tensor **o) {
  return dt_batch_norm_training(x[0], NULL, NULL, 1e-5, o);
}
/* Indices [2, 3] with repeats: rows 1 and 4 are picked twice, row 0 never. */
static dt_status f_embedding(dt_tensor **x, dt_tensor **o) {
  int64_t values[] = {1, 4, 6, 4, 1, 2};
  dt_tensor *idx = NULL;
  dt_status st = dt_zeros(2, (int64_t[]){2, 3}, DT_I64, &idx);
  for (int e = 0; e < 6 && !st; e++) {
    st = dt_tensor_set(idx, (int64_t[]){e / 3, e % 3}, (double)values[e]);
  }
  if (!st) st = dt_embedding(x[0], idx, o);
  dt_tensor_release(idx);
  return st;
}
static dt_status f_cat1(dt_tensor **x, dt_tensor **o) { return dt_cat(3, x, 1, o); }
static dt_status f_cat0(dt_tensor **x, dt_tensor **o) { return dt_cat(2, x, 0, o); }
static dt_status f_stack0(dt_tensor **x, dt_tensor **o) { return dt_stack(2, x, 0, o); }
static dt_status f_stack2(dt_tensor **x, dt_tensor **o) { return dt_stack(2, x, 2, o); }
static dt_status f_narrow(dt_tensor **x, dt_tensor **o) { return dt_narrow(x[0], 1, 1, 3, o); }
static dt_status f_narrow_whole(dt_tensor **x, dt_tensor **o) {
  return dt_narrow(x[0], 0, 0, 7, o);
}
static dt_status f_slice2(dt_tensor **x, dt_tensor **o) { return dt_slice(x[0], 1, 1, 7, 2, o); }
static dt_status f_slice3(dt_tensor **x, dt_tensor **o) { return dt_slice(x[0], 0, 0, 8, 3, o); }
static dt_status f_slice_mid(dt_tensor **x, dt_tensor **o) { return dt_slice(x[0], 0, 2, 5, 2, o); }
static dt_status f_select_last(dt_tensor **x, dt_tensor **o) { return dt_select(x[0], 0, -1, o); }
static dt_status f_select_mid(dt_tensor **x, dt_tensor **o) { return dt_select(x[0], 1, 2, o); }
/* split into [3,2] [3,2] [3,1]; pieces 2 and 0 joined, piece 1 unused (a zero gradient). */
static dt_status f_split(dt_tensor **x, dt_tensor **o) {
  dt_tensor *p[4] = {NULL};
  int n = 0;
  dt_status st = dt_split(x[0], 2, 1, p, 4, &n);
  if (!st) st = dt_cat(2, (dt_tensor *[]){p[2], p[0]}, 1, o);
  for (int k = 0; k < n; k++) dt_tensor_release(p[k]);
  return st;
}
static dt_status f_split_with_sizes(dt_tensor **x, dt_tensor **o) {
  dt_tensor *p[3] = {NULL};
  int n = 0;
  dt_status st = dt_split_with_sizes(x[0], 3, (int64_t[]){1, 4, 2}, 1, p, 3, &n);
  if (!st) st = dt_cat(2, (dt_tensor *[]){p[1], p[2]}, 1, o);
  for (int k = 0; k < n; k++) dt_tensor_release(p[k]);
  return st;
}
static dt_status f_chunk(dt_tensor **x, dt_tensor **o) {
  dt_tensor *p[3] = {NULL};
  int n = 0;
  dt_status st = dt_chunk(x[0], 3, 0, p, 3, &n);
  if (!st) {
    *o = p[0];
    p[0] = NULL;
  }
  for (int k = 0; k < n; k++) dt_tensor_release(p[k]);
  return st;
}

/* Rows leave eps and tol to their defaults. */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#define S1(a)                                                                                      \
  { a }
#define S2(a, b)                                                                                   \
  { a, b }
#define S3(a, b, c)                                                                                \
  { a, b, c }

static const grad_case cases[] = {
    {"sqrt", f_sqrt, 1, {2}, {S2(3, 5)}, {POSITIVE | NONCONTIG}},
    {"rsqrt", f_rsqrt, 1, {1}, {S1(7)}, {POSITIVE | NONCONTIG}},
    {"gelu", f_gelu, 1, {2}, {S2(3, 5)}, {NONCONTIG}},
    {"gelu tanh", f_gelu_tanh, 1, {3}, {S3(2, 3, 5)}, {PLAIN}},
    {"silu", f_silu, 1, {2}, {S2(3, 5)}, {NONCONTIG}},
    {"tanh", f_tanh, 1, {2}, {S2(3, 5)}, {PLAIN}},
    {"sigmoid", f_sigmoid, 1, {1}, {S1(7)}, {NONCONTIG}},
    {"abs", f_abs, 1, {2}, {S2(3, 5)}, {NONCONTIG}},
    {"maximum broadcast", f_maximum, 2, {2, 1}, {S2(3, 5), S1(5)}, {NONCONTIG, PLAIN}},
    {"minimum broadcast both", f_minimum, 2, {2, 2}, {S2(4, 1), S2(1, 5)}, {PLAIN, PLAIN}},
    {"pow.Tensor_Tensor broadcast", f_pow, 2, {2, 1}, {S2(3, 5), S1(5)}, {POSITIVE, PLAIN}},
    {"pow.Tensor_Tensor", f_pow, 2, {2, 2}, {S2(3, 5), S2(3, 5)}, {POSITIVE, NONCONTIG}},
    {"where broadcast", f_where, 2, {2, 1}, {S2(3, 5), S1(5)}, {NONCONTIG, PLAIN}},
    {"masked_fill", f_masked_fill, 1, {2}, {S2(3, 5)}, {NONCONTIG}},
    {"max", f_max, 1, {2}, {S2(3, 5)}, {NONCONTIG}},
    {"min", f_min, 1, {1}, {S1(7)}, {PLAIN}},
    {"amax keepdim", f_amax_keep, 1, {3}, {S3(3, 4, 5)}, {NONCONTIG}},
    {"amin", f_amin, 1, {2}, {S2(3, 5)}, {NONCONTIG}},
    {"max.dim", f_max_dim, 1, {2}, {S2(3, 5)}, {NONCONTIG}},
    {"min.dim keepdim", f_min_dim_keep, 1, {3}, {S3(3, 4, 5)}, {PLAIN}},
    {"softmax", f_softmax1, 1, {3}, {S3(3, 5, 4)}, {NONCONTIG}},
    {"softmax last dim", f_softmax_last, 1, {2}, {S2(3, 5)}, {PLAIN}},
    {"log_softmax", f_log_softmax0, 1, {2}, {S2(3, 5)}, {NONCONTIG}},
    {"layer_norm", f_layer_norm1, 3, {3, 1, 1}, {S3(3, 4, 5), S1(5), S1(5)}, {0, 0, NONCONTIG}},
    {"layer_norm 2 dims",
     f_layer_norm2,
     3,
     {3, 2, 2},
     {S3(3, 4, 5), S2(4, 5), S2(4, 5)},
     {NONCONTIG, NONCONTIG, 0}},
    {"layer_norm no affine", f_layer_norm_plain, 1, {2}, {S2(3, 5)}, {NONCONTIG}},
    {"layer_norm of a vector", f_layer_norm_all, 2, {1, 1}, {S1(7), S1(7)}, {NONCONTIG, 0}},
    {"batch_norm",
     f_batch_norm,
     5,
     {3, 1, 1, 1, 1},
     {S3(4, 3, 5), S1(3), S1(3), S1(3), S1(3)},
     {NONCONTIG, CONSTANT, POSITIVE | CONSTANT, PLAIN, NONCONTIG}},
    {"batch_norm no affine 2-d",
     f_batch_norm_plain,
     3,
     {2, 1, 1},
     {S2(5, 3), S1(3), S1(3)},
     {NONCONTIG, CONSTANT, POSITIVE | CONSTANT}},
    {"batch_norm_training",
     f_batch_norm_training,
     3,
     {3, 1, 1},
     {S3(4, 3, 5), S1(3), S1(3)},
     {NONCONTIG, PLAIN, NONCONTIG}},
    {"batch_norm_training no affine 2-d",
     f_batch_norm_training_plain,
     1,
     {2},
     {S2(5, 3)},
     {NONCONTIG}},
    {"embedding repeated indices", f_embedding, 1, {2}, {S2(7, 4)}, {NONCONTIG}},
    {"cat dim 1", f_cat1, 3, {2, 2, 2}, {S2(3, 2), S2(3, 5), S2(3, 1)}, {PLAIN, NONCONTIG, PLAIN}},
    {"cat 1-d", f_cat0, 2, {1, 1}, {S1(3), S1(4)}, {NONCONTIG, PLAIN}},
    {"stack dim 0", f_stack0, 2, {2, 2}, {S2(3, 5), S2(3, 5)}, {NONCONTIG, PLAIN}},
    {"stack last dim", f_stack2, 2, {2, 2}, {S2(3, 5), S2(3, 5)}, {PLAIN, NONCONTIG}},
    {"narrow", f_narrow, 1, {2}, {S2(3, 5)}, {NONCONTIG}},
    {"narrow whole", f_narrow_whole, 1, {1}, {S1(7)}, {NONCONTIG}},
    {"slice step 2", f_slice2, 1, {2}, {S2(3, 7)}, {NONCONTIG}},
    {"slice step 3 past the end", f_slice3, 1, {2}, {S2(8, 3)}, {PLAIN}},
    {"slice step 2 inside", f_slice_mid, 1, {1}, {S1(7)}, {NONCONTIG}},
    {"select -1", f_select_last, 1, {2}, {S2(3, 5)}, {NONCONTIG}},
    {"select dim 1", f_select_mid, 1, {3}, {S3(3, 5, 4)}, {NONCONTIG}},
    {"split, a piece unused", f_split, 1, {2}, {S2(3, 5)}, {NONCONTIG}},
    {"split_with_sizes", f_split_with_sizes, 1, {2}, {S2(3, 7)}, {PLAIN}},
    {"chunk, one piece used", f_chunk, 1, {2}, {S2(7, 3)}, {NONCONTIG}},
};

Test(autograd_ops, gradcheck) {
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) grad_check(&cases[i]);
}

/* ---- Ties, exactly as PyTorch ------------------------------------------------------------ */

static dt_tensor *from_values(int ndim, const int64_t *shape, const double *values) {
  dt_tensor *t = NULL;
  OK(dt_zeros(ndim, shape, DT_F64, &t));
  int64_t n = dt_tensor_numel(t), index[8] = {0};
  for (int64_t e = 0; e < n; e++) {
    OK(dt_tensor_set(t, index, values[e]));
    for (int d = ndim - 1; d >= 0; d--) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
  return t;
}

static void expect_grad(dt_tensor *x, const double *expected, const char *what) {
  dt_tensor *g = NULL;
  OK(dt_tensor_grad(x, &g));
  cr_assert_not_null(g, "%s: no gradient", what);
  double got[16];
  int64_t n = dt_tensor_numel(g);
  OK(dt_tensor_to_doubles(g, got, (size_t)n));
  for (int64_t e = 0; e < n; e++) {
    cr_assert_float_eq(got[e], expected[e], 1e-12, "%s: element %lld is %g, expected %g", what,
                       (long long)e, got[e], expected[e]);
  }
  dt_tensor_release(g);
}

/* loss = sum(y * (1, 2, 3, ...)): each output element has its own weight. */
static void backward_weighted(dt_tensor *y) {
  int64_t n = dt_tensor_numel(y);
  double w[16];
  for (int64_t e = 0; e < n; e++) w[e] = (double)(e + 1);
  dt_tensor *wt = from_values(dt_tensor_ndim(y), dt_tensor_shape(y), w), *yw = NULL, *loss = NULL;
  OK(dt_mul(y, wt, &yw));
  OK(dt_sum(yw, &loss));
  OK(dt_backward(loss, NULL));
  dt_tensor_release(wt);
  dt_tensor_release(yw);
  dt_tensor_release(loss);
}

Test(autograd_ops, maximum_minimum_ties_split_half) {
  dt_tensor *a = from_values(1, (int64_t[]){3}, (double[]){1, 5, 2});
  dt_tensor *b = from_values(1, (int64_t[]){3}, (double[]){1, 4, 3});
  OK(dt_tensor_set_requires_grad(a, true));
  OK(dt_tensor_set_requires_grad(b, true));
  dt_tensor *y = NULL;
  OK(dt_maximum(a, b, &y));
  backward_weighted(y); /* weights 1, 2, 3 */
  expect_grad(a, (double[]){0.5, 2, 0}, "maximum a");
  expect_grad(b, (double[]){0.5, 0, 3}, "maximum b");
  dt_tensor_release(y);
  OK(dt_tensor_zero_grad(a, true));
  OK(dt_tensor_zero_grad(b, true));
  OK(dt_minimum(a, b, &y));
  backward_weighted(y);
  expect_grad(a, (double[]){0.5, 0, 3}, "minimum a");
  expect_grad(b, (double[]){0.5, 2, 0}, "minimum b");
  dt_tensor_release(y);
  dt_tensor_release(a);
  dt_tensor_release(b);
}

Test(autograd_ops, amax_max_share_evenly_among_ties) {
  dt_tensor *x = from_values(2, (int64_t[]){2, 3}, (double[]){3, 1, 3, 2, 2, 0});
  OK(dt_tensor_set_requires_grad(x, true));
  dt_tensor *y = NULL;
  OK(dt_max(x, &y));
  backward_weighted(y);
  expect_grad(x, (double[]){0.5, 0, 0.5, 0, 0, 0}, "max");
  dt_tensor_release(y);
  OK(dt_tensor_zero_grad(x, true));
  OK(dt_amax(x, 1, (int64_t[]){1}, false, &y)); /* rows: 3 twice, 2 twice; weights 1, 2 */
  backward_weighted(y);
  expect_grad(x, (double[]){0.5, 0, 0.5, 1, 1, 0}, "amax dim 1");
  dt_tensor_release(y);
  OK(dt_tensor_zero_grad(x, true));
  OK(dt_amin(x, 0, NULL, false, &y)); /* every dim: the single 0 */
  backward_weighted(y);
  expect_grad(x, (double[]){0, 0, 0, 0, 0, 1}, "amin all");
  dt_tensor_release(y);
  dt_tensor_release(x);
}

Test(autograd_ops, max_dim_gives_the_selected_index_only) {
  dt_tensor *x = from_values(2, (int64_t[]){2, 3}, (double[]){3, 1, 3, 0, 0, 0});
  OK(dt_tensor_set_requires_grad(x, true));
  dt_tensor *v = NULL, *idx = NULL;
  OK(dt_max_dim(x, 1, false, &v, &idx));
  int64_t picked[2];
  double pd[2];
  OK(dt_tensor_to_doubles(idx, pd, 2));
  picked[0] = (int64_t)pd[0];
  picked[1] = (int64_t)pd[1];
  cr_assert(picked[0] == 0 || picked[0] == 2, "max.dim picked %lld", (long long)picked[0]);
  cr_assert(dt_tensor_requires_grad(v));
  cr_assert(!dt_tensor_requires_grad(idx), "indices are not differentiable");
  backward_weighted(v); /* weights 1, 2 */
  double expected[6] = {0};
  expected[picked[0]] = 1;
  expected[3 + picked[1]] = 2;
  expect_grad(x, expected, "max.dim");
  dt_tensor_release(v);
  dt_tensor_release(idx);
  dt_tensor_release(x);
}

Test(autograd_ops, embedding_accumulates_repeated_rows) {
  dt_tensor *w = from_values(2, (int64_t[]){3, 2}, (double[]){1, 2, 3, 4, 5, 6});
  OK(dt_tensor_set_requires_grad(w, true));
  dt_tensor *idx = NULL, *y = NULL;
  OK(dt_zeros(1, (int64_t[]){4}, DT_I64, &idx));
  double rows[] = {2, 0, 2, 2};
  for (int e = 0; e < 4; e++) OK(dt_tensor_set(idx, (int64_t[]){e}, rows[e]));
  OK(dt_embedding(w, idx, &y));
  backward_weighted(y); /* y [4, 2], weights 1..8 */
  /* Row 0: weights (3, 4); row 1 unused; row 2: (1+5+7, 2+6+8). */
  expect_grad(w, (double[]){3, 4, 0, 0, 13, 16}, "embedding");
  dt_tensor_release(y);
  dt_tensor_release(idx);
  dt_tensor_release(w);
}

Test(autograd_ops, split_missing_pieces_are_zeros) {
  dt_tensor *x = from_values(1, (int64_t[]){5}, (double[]){1, 2, 3, 4, 5});
  OK(dt_tensor_set_requires_grad(x, true));
  dt_tensor *p[3] = {NULL};
  int n = 0;
  OK(dt_split(x, 2, 0, p, 3, &n));
  cr_assert_eq(n, 3);
  backward_weighted(p[1]); /* elements 2 and 3 with weights 1, 2 */
  expect_grad(x, (double[]){0, 0, 1, 2, 0}, "split piece 1");
  for (int k = 0; k < n; k++) dt_tensor_release(p[k]);
  dt_tensor_release(x);
}

/* cat and stack promote their inputs' dtypes: each input's gradient is cast back to its own
 * dtype (PyTorch's rule), with its block's values. */
Test(autograd_ops, cat_stack_give_each_input_its_dtype) {
  dt_tensor *d = from_values(1, (int64_t[]){2}, (double[]){1, 2}), *x = NULL;
  OK(dt_to(d, DT_F32, &x));
  dt_tensor *z = from_values(1, (int64_t[]){2}, (double[]){3, 4});
  OK(dt_tensor_set_requires_grad(x, true));
  OK(dt_tensor_set_requires_grad(z, true));
  dt_tensor *c = NULL, *s = NULL, *g = NULL;
  OK(dt_cat(2, (dt_tensor *[]){x, z}, 0, &c));
  cr_assert_eq(dt_tensor_dtype(c), DT_F64);
  backward_weighted(c); /* weights 1..4 */
  OK(dt_tensor_grad(x, &g));
  cr_assert_eq(dt_tensor_dtype(g), DT_F32, "cat: the float32 input's gradient is float32");
  dt_tensor_release(g);
  expect_grad(x, (double[]){1, 2}, "cat, float32 input");
  expect_grad(z, (double[]){3, 4}, "cat, float64 input");
  OK(dt_tensor_zero_grad(x, true));
  OK(dt_tensor_zero_grad(z, true));
  OK(dt_stack(2, (dt_tensor *[]){x, z}, 1, &s)); /* [[x0, z0], [x1, z1]], weights 1..4 */
  backward_weighted(s);
  OK(dt_tensor_grad(x, &g));
  cr_assert_eq(dt_tensor_dtype(g), DT_F32, "stack: the float32 input's gradient is float32");
  dt_tensor_release(g);
  expect_grad(x, (double[]){1, 3}, "stack, float32 input");
  expect_grad(z, (double[]){2, 4}, "stack, float64 input");
  dt_tensor *made[] = {d, x, z, c, s};
  for (int i = 0; i < 5; i++) dt_tensor_release(made[i]);
}

Test(autograd_ops, slice_with_step_places_the_gradient) {
  dt_tensor *x = from_values(1, (int64_t[]){7}, (double[]){0, 1, 2, 3, 4, 5, 6});
  OK(dt_tensor_set_requires_grad(x, true));
  dt_tensor *y = NULL;
  OK(dt_slice(x, 0, 1, 7, 3, &y)); /* elements 1 and 4 */
  backward_weighted(y);
  expect_grad(x, (double[]){0, 1, 0, 0, 2, 0, 0}, "slice step 3");
  dt_tensor_release(y);
  dt_tensor_release(x);
}

Test(autograd_ops, where_and_masked_fill_route_the_gradient) {
  dt_tensor *a = from_values(1, (int64_t[]){3}, (double[]){1, 2, 3});
  dt_tensor *b = from_values(1, (int64_t[]){1}, (double[]){9});
  OK(dt_tensor_set_requires_grad(a, true));
  OK(dt_tensor_set_requires_grad(b, true));
  dt_tensor *c = pattern_mask(1, (int64_t[]){3}); /* true, false, false */
  dt_tensor *y = NULL;
  OK(dt_where(c, a, b, &y));
  backward_weighted(y);
  expect_grad(a, (double[]){1, 0, 0}, "where self");
  expect_grad(b, (double[]){5}, "where other (broadcast, summed)");
  dt_tensor_release(y);
  OK(dt_tensor_zero_grad(a, true));
  OK(dt_masked_fill(a, c, -1, &y));
  backward_weighted(y);
  expect_grad(a, (double[]){0, 2, 3}, "masked_fill");
  dt_tensor_release(y);
  dt_tensor_release(c);
  dt_tensor_release(a);
  dt_tensor_release(b);
}

/* ---- Training batch norm: values and errors ---------------------------------------------- */

Test(autograd_ops, batch_norm_training_uses_batch_statistics) {
  /* Channel 0 holds {1, 3}: mean 2, variance 1; channel 1 holds {2, 6}: mean 4, variance 4. */
  dt_tensor *x = from_values(2, (int64_t[]){2, 2}, (double[]){1, 2, 3, 6});
  dt_tensor *w = from_values(1, (int64_t[]){2}, (double[]){2, 3});
  dt_tensor *b = from_values(1, (int64_t[]){2}, (double[]){0.5, -1});
  dt_tensor *y = NULL;
  OK(dt_batch_norm_training(x, w, b, 0.0, &y));
  double got[4];
  OK(dt_tensor_to_doubles(y, got, 4));
  double expected[] = {-1.5, -4, 2.5, 2};
  for (int e = 0; e < 4; e++) cr_assert_float_eq(got[e], expected[e], 1e-12, "element %d", e);
  dt_tensor_release(y);
  /* The gradient of sum(y) w.r.t. x is 0: the normalization removes any shift. */
  OK(dt_tensor_set_requires_grad(x, true));
  dt_tensor *loss = NULL;
  OK(dt_batch_norm_training(x, w, b, 0.0, &y));
  OK(dt_sum(y, &loss));
  OK(dt_backward(loss, NULL));
  expect_grad(x, (double[]){0, 0, 0, 0}, "batch_norm_training of a sum");
  dt_tensor_release(loss);
  dt_tensor_release(y);
  /* Errors name the op and the offending shapes. */
  dt_tensor *one = from_values(2, (int64_t[]){1, 2}, (double[]){1, 2});
  cr_assert_eq(dt_batch_norm_training(one, NULL, NULL, 1e-5, &y), DT_ERR_SHAPE);
  cr_assert(strstr(dt_last_error(), "batch_norm_training") && strstr(dt_last_error(), "[1, 2]"),
            "%s", dt_last_error());
  cr_assert_eq(dt_batch_norm_training(x, b, x, 1e-5, &y), DT_ERR_SHAPE);
  cr_assert(strstr(dt_last_error(), "bias") && strstr(dt_last_error(), "[2, 2]"), "%s",
            dt_last_error());
  cr_assert_eq(dt_batch_norm_training(NULL, NULL, NULL, 1e-5, &y), DT_ERR_INVALID);
  dt_tensor_release(one);
  dt_tensor_release(x);
  dt_tensor_release(w);
  dt_tensor_release(b);
}

Test(autograd_ops, scatter_add_values_and_errors) {
  dt_tensor *self = from_values(2, (int64_t[]){2, 3}, (double[]){1, 1, 1, 1, 1, 1});
  dt_tensor *src = from_values(2, (int64_t[]){2, 2}, (double[]){1, 2, 3, 4});
  dt_tensor *idx = NULL, *y = NULL;
  OK(dt_zeros(2, (int64_t[]){2, 2}, DT_I64, &idx));
  double cols[] = {2, 2, 0, 1};
  for (int e = 0; e < 4; e++) OK(dt_tensor_set(idx, (int64_t[]){e / 2, e % 2}, cols[e]));
  OK(dt_scatter_add(self, 1, idx, src, &y)); /* row 0: col 2 += 1 + 2; row 1: col 0 += 3, 1 += 4 */
  double got[6], expected[] = {1, 1, 4, 4, 5, 1};
  OK(dt_tensor_to_doubles(y, got, 6));
  for (int e = 0; e < 6; e++) cr_assert_float_eq(got[e], expected[e], 1e-12, "element %d", e);
  dt_tensor_release(y);
  OK(dt_tensor_set(idx, (int64_t[]){1, 1}, 3));
  cr_assert_eq(dt_scatter_add(self, 1, idx, src, &y), DT_ERR_INDEX);
  cr_assert(strstr(dt_last_error(), "scatter_add") && strstr(dt_last_error(), "index 3"), "%s",
            dt_last_error());
  cr_assert_null(y);
  cr_assert_eq(dt_scatter_add(self, 1, src, src, &y), DT_ERR_DTYPE);
  cr_assert(strstr(dt_last_error(), "index must be int64"), "%s", dt_last_error());
  dt_tensor_release(self);
  dt_tensor_release(src);
  dt_tensor_release(idx);
}

/* ---- Coverage of the backward column ----------------------------------------------------- */

/* Ops without a backward formula, by name, with the reason. */
static const struct {
  const char *op;
  const char *reason;
} not_differentiable[] = {
    {"eq.Tensor", "comparison: bool output"},
    {"ne.Tensor", "comparison: bool output"},
    {"lt.Tensor", "comparison: bool output"},
    {"le.Tensor", "comparison: bool output"},
    {"gt.Tensor", "comparison: bool output"},
    {"ge.Tensor", "comparison: bool output"},
    {"eq.Scalar", "comparison: bool output"},
    {"ne.Scalar", "comparison: bool output"},
    {"lt.Scalar", "comparison: bool output"},
    {"le.Scalar", "comparison: bool output"},
    {"gt.Scalar", "comparison: bool output"},
    {"ge.Scalar", "comparison: bool output"},
    {"argmax", "integer output"},
    {"detach", "cuts the graph by definition"},
    {"empty_like", "factory: the values do not depend on the input"},
    {"zeros_like", "factory: the values do not depend on the input"},
    {"ones_like", "factory: the values do not depend on the input"},
    {"full_like", "factory: the values do not depend on the input"},
    {"uniform_", "random fill: the values do not depend on the input"},
    {"scatter_add", "a helper of backward formulas (embedding, max.dim); its own gradient "
                    "(a gather) is needed only for double backward"},
    {"scaled_dot_product_attention_backward",
     "the backward op of scaled_dot_product_attention; no double backward yet"},
    {"cross_entropy_loss_backward", "the backward op of cross_entropy_loss; its own gradient is "
                                    "needed only for double backward"},
    {"gelu_backward", "the backward op of gelu; its own gradient is needed only for double "
                      "backward"},
    {"softmax_backward", "a backward op (softmax's); needed only for double backward"},
    {"log_softmax_backward", "a backward op (log_softmax's); needed only for double backward"},
    {"layer_norm_backward", "a backward op (layer_norm's); needed only for double backward"},
    {"rms_norm_backward", "a backward op (rms_norm's); needed only for double backward"},
    {"layer_norm_backward_affine", "a backward op (layer_norm's); needed only for double "
                                   "backward"},
    {"layer_norm_backward_all", "a backward op (layer_norm's, all three gradients); needed "
                                "only for double backward"},
    {"rms_norm_backward_weight", "a backward op (rms_norm's); needed only for double backward"},
    {"embedding_backward", "a backward op (embedding's); needed only for double backward"},
    {"cross_entropy_vocab_terms_backward", "a backward op (the vocabulary-parallel terms'); "
                                           "needed only for double backward"},
};

static const char *reason_of(const char *name) {
  for (size_t i = 0; i < sizeof not_differentiable / sizeof *not_differentiable; i++) {
    if (strcmp(not_differentiable[i].op, name) == 0) return not_differentiable[i].reason;
  }
  return NULL;
}

Test(autograd_ops, every_op_has_a_backward_or_a_reason) {
  int with = 0, without = 0;
  for (int op = 0; op < DT_OP_COUNT; op++) {
    const dt_op_def *def = &dt__op_table[op];
    const char *reason = reason_of(def->name);
    if (def->backward) {
      cr_assert_null(reason, "%s has a backward formula but is listed as not differentiable (%s)",
                     def->name, reason);
      with++;
    } else {
      cr_assert_not_null(reason,
                         "%s has no backward formula (NO_BACKWARD) and is not listed in "
                         "tests/test_autograd_ops.c with a reason",
                         def->name);
      without++;
    }
    if (dt__op_has_trait(op, DT_TRAIT_NOT_DIFFERENTIABLE)) {
      cr_assert_null(def->backward, "%s is not differentiable but has a formula", def->name);
    }
  }
  /* Every listed name is an op of the table: a renamed op must not leave a stale entry. */
  for (size_t i = 0; i < sizeof not_differentiable / sizeof *not_differentiable; i++) {
    bool found = false;
    for (int op = 0; op < DT_OP_COUNT && !found; op++) {
      found = strcmp(dt__op_table[op].name, not_differentiable[i].op) == 0;
    }
    cr_assert(found, "listed op %s is not in the table", not_differentiable[i].op);
  }
  printf("backward coverage: %d ops with a formula, %d not differentiable\n", with, without);
}
