/*
 * The op sweep's cases: every op of the table with sample inputs. Shared by the distributed
 * sweep (tests/test_dist_sweep.c) and the coverage check (tests/test_op_coverage.c), which
 * fails when an op of the table is swept by no case. Shapes are odd so shards are uneven.
 */
#ifndef DT_TEST_SWEEP_CASES_H
#define DT_TEST_SWEEP_CASES_H

/* Private header: cross_entropy's backward kernel is swept directly. */
#include "ops/loss_impl.h"
#include "reference.h"

typedef dt_status (*op_fn)(dt_tensor **in, dt_tensor **out);

typedef struct op_case {
  const char *name;
  op_fn fn;
  int n_in;
  int ndim[3];
  int64_t shape[3][4];
  dt_dtype dtype[3]; /* DT_F32 unless set (0 is DT_F32) */
  double lo, hi;     /* value range of inputs */
  bool exact;        /* integer results: compare exactly */
  bool no_partial;   /* in place, not linear: a Partial first input is refused, not swept */
} op_case;

#define IN2(a, b)                                                                                  \
  (dt_tensor *[]) { a, b }

static dt_status f_add(dt_tensor **i, dt_tensor **o) { return dt_add(i[0], i[1], o); }
static dt_status f_sub(dt_tensor **i, dt_tensor **o) { return dt_sub_ex(i[0], i[1], 2, o); }
static dt_status f_mul(dt_tensor **i, dt_tensor **o) { return dt_mul(i[0], i[1], o); }
static dt_status f_div(dt_tensor **i, dt_tensor **o) { return dt_div(i[0], i[1], o); }
static dt_status f_maximum(dt_tensor **i, dt_tensor **o) { return dt_maximum(i[0], i[1], o); }
static dt_status f_relu(dt_tensor **i, dt_tensor **o) { return dt_relu(i[0], o); }
static dt_status f_neg(dt_tensor **i, dt_tensor **o) { return dt_neg(i[0], o); }
static dt_status f_exp(dt_tensor **i, dt_tensor **o) { return dt_exp(i[0], o); }
static dt_status f_gelu(dt_tensor **i, dt_tensor **o) { return dt_gelu(i[0], o); }
static dt_status f_gelu_backward(dt_tensor **i, dt_tensor **o) {
  return dt__gelu_backward(i[0], i[1], 0, o);
}
static dt_status f_mul_scalar(dt_tensor **i, dt_tensor **o) { return dt_mul_scalar(i[0], 3, o); }
static dt_status f_add_scalar(dt_tensor **i, dt_tensor **o) { return dt_add_scalar(i[0], 3, o); }
static dt_status f_gt(dt_tensor **i, dt_tensor **o) { return dt_gt(i[0], i[1], o); }
static dt_status f_where(dt_tensor **i, dt_tensor **o) {
  dt_tensor *c = NULL;
  dt_status st = dt_gt_scalar(i[0], 0, &c);
  if (!st) st = dt_where(c, i[0], i[1], o);
  dt_tensor_release(c);
  return st;
}
static dt_status f_masked_fill(dt_tensor **i, dt_tensor **o) {
  dt_tensor *c = NULL;
  dt_status st = dt_lt_scalar(i[1], 0, &c);
  if (!st) st = dt_masked_fill(i[0], c, -7, o);
  dt_tensor_release(c);
  return st;
}
static dt_status f_sum(dt_tensor **i, dt_tensor **o) { return dt_sum(i[0], o); }
static dt_status f_sum0(dt_tensor **i, dt_tensor **o) {
  return dt_sum_dims(i[0], 1, (int64_t[]){0}, false, o);
}
static dt_status f_sum1k(dt_tensor **i, dt_tensor **o) {
  return dt_sum_dims(i[0], 1, (int64_t[]){1}, true, o);
}
static dt_status f_mean1(dt_tensor **i, dt_tensor **o) {
  return dt_mean_dims(i[0], 1, (int64_t[]){-1}, false, o);
}
static dt_status f_mean(dt_tensor **i, dt_tensor **o) { return dt_mean(i[0], o); }
static dt_status f_amax0(dt_tensor **i, dt_tensor **o) {
  return dt_amax(i[0], 1, (int64_t[]){0}, false, o);
}
static dt_status f_max(dt_tensor **i, dt_tensor **o) { return dt_max(i[0], o); }
static dt_status f_argmax1(dt_tensor **i, dt_tensor **o) {
  return dt_argmax_dim(i[0], 1, false, o);
}
static dt_status f_softmax1(dt_tensor **i, dt_tensor **o) { return dt_softmax(i[0], 1, o); }
static dt_status f_log_softmax0(dt_tensor **i, dt_tensor **o) { return dt_log_softmax(i[0], 0, o); }
static dt_status f_layer_norm(dt_tensor **i, dt_tensor **o) {
  int64_t ns[] = {7};
  return dt_layer_norm(i[0], 1, ns, NULL, NULL, 1e-5, o);
}
static dt_status f_rms_norm(dt_tensor **i, dt_tensor **o) {
  int64_t ns[] = {7};
  return dt_rms_norm(i[0], 1, ns, NULL, 1e-5, o);
}
static dt_status f_attention(dt_tensor **i, dt_tensor **o) {
  dt_attention_options opt = {.is_causal = true};
  return dt_scaled_dot_product_attention(i[0], i[1], i[2], NULL, &opt, o, NULL);
}
static dt_status f_mm(dt_tensor **i, dt_tensor **o) { return dt_mm(i[0], i[1], o); }
static dt_status f_bmm(dt_tensor **i, dt_tensor **o) { return dt_bmm(i[0], i[1], o); }
static dt_status f_matmul(dt_tensor **i, dt_tensor **o) { return dt_matmul(i[0], i[1], o); }
static dt_status f_addmm(dt_tensor **i, dt_tensor **o) { return dt_addmm(i[2], i[0], i[1], o); }
static dt_status f_linear(dt_tensor **i, dt_tensor **o) { return dt_linear(i[0], i[1], i[2], o); }
static dt_status f_linear_nobias(dt_tensor **i, dt_tensor **o) {
  return dt_linear(i[0], i[1], NULL, o);
}
/* Losses: per-row cross-entropy (reduction none) and its backward op, reached through the
 * internal dispatcher the backward formula uses (the forward call carries the attributes). */
static dt_status f_cross_entropy(dt_tensor **i, dt_tensor **o) {
  dt_cross_entropy_options opt = {.reduction = DT_LOSS_NONE, .label_smoothing = 0.1};
  return dt_cross_entropy_ex(i[0], i[1], &opt, o);
}
static dt_status f_cross_entropy_backward(dt_tensor **i, dt_tensor **o) {
  dt_op_call fwd = {.n_ints = 2, .ints = {3, 1}, .scalars = {0.1}};
  return dt__cross_entropy_backward(&fwd, i[0], i[1], i[2], o);
}
static dt_status f_embedding(dt_tensor **i, dt_tensor **o) { return dt_embedding(i[0], i[1], o); }
static dt_status f_scatter_add(dt_tensor **i, dt_tensor **o) {
  return dt_scatter_add(i[0], 0, i[1], i[2], o);
}
static dt_status f_cat0(dt_tensor **i, dt_tensor **o) { return dt_cat(2, i, 0, o); }
static dt_status f_cat1(dt_tensor **i, dt_tensor **o) { return dt_cat(2, i, 1, o); }
static dt_status f_stack1(dt_tensor **i, dt_tensor **o) { return dt_stack(2, i, 1, o); }
static dt_status f_transpose(dt_tensor **i, dt_tensor **o) { return dt_transpose(i[0], 0, 1, o); }
static dt_status f_permute(dt_tensor **i, dt_tensor **o) {
  return dt_permute(i[0], 3, (int64_t[]){2, 0, 1}, o);
}
static dt_status f_view(dt_tensor **i, dt_tensor **o) {
  return dt_view(i[0], 2, (int64_t[]){6, 5}, o);
}
static dt_status f_reshape(dt_tensor **i, dt_tensor **o) {
  return dt_reshape(i[0], 1, (int64_t[]){-1}, o);
}
static dt_status f_flatten(dt_tensor **i, dt_tensor **o) { return dt_flatten(i[0], 1, 2, o); }
static dt_status f_unsqueeze(dt_tensor **i, dt_tensor **o) { return dt_unsqueeze(i[0], 1, o); }
static dt_status f_select(dt_tensor **i, dt_tensor **o) { return dt_select(i[0], 0, 2, o); }
static dt_status f_narrow(dt_tensor **i, dt_tensor **o) { return dt_narrow(i[0], 1, 1, 4, o); }
static dt_status f_chunk(dt_tensor **i, dt_tensor **o) {
  dt_tensor *pieces[4] = {0};
  int n = 0;
  dt_status st = dt_chunk(i[0], 3, 1, pieces, 4, &n);
  if (st) return st;
  *o = pieces[1];
  for (int k = 0; k < n; k++) {
    if (k != 1) dt_tensor_release(pieces[k]);
  }
  return DT_OK;
}
static dt_status f_expand(dt_tensor **i, dt_tensor **o) {
  return dt_expand(i[0], 3, (int64_t[]){3, 5, 7}, o);
}
static dt_status f_clone(dt_tensor **i, dt_tensor **o) { return dt_clone(i[0], o); }
static dt_status f_detach(dt_tensor **i, dt_tensor **o) { return dt_detach(i[0], o); }
static dt_status f_contiguous_t(dt_tensor **i, dt_tensor **o) {
  dt_tensor *t = NULL;
  dt_status st = dt_transpose(i[0], 0, 1, &t);
  if (!st) st = dt_contiguous(t, o);
  dt_tensor_release(t);
  return st;
}
static dt_status f_to64(dt_tensor **i, dt_tensor **o) { return dt_to(i[0], DT_F64, o); }
static dt_status f_ones_like(dt_tensor **i, dt_tensor **o) { return dt_ones_like(i[0], o); }
static dt_status f_add_inplace(dt_tensor **i, dt_tensor **o) {
  dt_tensor *c = NULL;
  dt_status st = dt_clone(i[0], &c);
  if (!st) st = dt_add_(c, i[1]);
  if (st) {
    dt_tensor_release(c);
    return st;
  }
  *o = c;
  return DT_OK;
}

/* Cases added so that every op of the table is swept (tests/test_op_coverage.c checks). */
static dt_status f_abs(dt_tensor **i, dt_tensor **o) { return dt_abs(i[0], o); }
static dt_status f_log(dt_tensor **i, dt_tensor **o) { return dt_log(i[0], o); }
static dt_status f_sqrt(dt_tensor **i, dt_tensor **o) { return dt_sqrt(i[0], o); }
static dt_status f_rsqrt(dt_tensor **i, dt_tensor **o) { return dt_rsqrt(i[0], o); }
static dt_status f_silu(dt_tensor **i, dt_tensor **o) { return dt_silu(i[0], o); }
static dt_status f_tanh(dt_tensor **i, dt_tensor **o) { return dt_tanh(i[0], o); }
static dt_status f_sigmoid(dt_tensor **i, dt_tensor **o) { return dt_sigmoid(i[0], o); }
static dt_status f_minimum(dt_tensor **i, dt_tensor **o) { return dt_minimum(i[0], i[1], o); }
static dt_status f_pow(dt_tensor **i, dt_tensor **o) { return dt_pow(i[0], i[1], o); }
static dt_status f_sub_scalar(dt_tensor **i, dt_tensor **o) { return dt_sub_scalar(i[0], 2, o); }
static dt_status f_div_scalar(dt_tensor **i, dt_tensor **o) { return dt_div_scalar(i[0], 4, o); }
static dt_status f_pow_scalar(dt_tensor **i, dt_tensor **o) { return dt_pow_scalar(i[0], 2, o); }
static dt_status f_eq(dt_tensor **i, dt_tensor **o) { return dt_eq(i[0], i[1], o); }
static dt_status f_ne(dt_tensor **i, dt_tensor **o) { return dt_ne(i[0], i[1], o); }
static dt_status f_lt(dt_tensor **i, dt_tensor **o) { return dt_lt(i[0], i[1], o); }
static dt_status f_le(dt_tensor **i, dt_tensor **o) { return dt_le(i[0], i[1], o); }
static dt_status f_ge(dt_tensor **i, dt_tensor **o) { return dt_ge(i[0], i[1], o); }
static dt_status f_eq_scalar(dt_tensor **i, dt_tensor **o) { return dt_eq_scalar(i[0], 0, o); }
static dt_status f_ne_scalar(dt_tensor **i, dt_tensor **o) { return dt_ne_scalar(i[0], 0, o); }
static dt_status f_lt_scalar(dt_tensor **i, dt_tensor **o) { return dt_lt_scalar(i[0], 0, o); }
static dt_status f_le_scalar(dt_tensor **i, dt_tensor **o) { return dt_le_scalar(i[0], 0, o); }
static dt_status f_ge_scalar(dt_tensor **i, dt_tensor **o) { return dt_ge_scalar(i[0], 0, o); }
static dt_status f_min(dt_tensor **i, dt_tensor **o) { return dt_min(i[0], o); }
static dt_status f_amin1(dt_tensor **i, dt_tensor **o) {
  return dt_amin(i[0], 1, (int64_t[]){1}, false, o);
}
static dt_status f_max_dim0(dt_tensor **i, dt_tensor **o) {
  dt_tensor *idx = NULL;
  dt_status st = dt_max_dim(i[0], 0, false, o, &idx);
  dt_tensor_release(idx);
  return st;
}
static dt_status f_min_dim1_indices(dt_tensor **i, dt_tensor **o) {
  dt_tensor *values = NULL;
  dt_status st = dt_min_dim(i[0], 1, true, &values, o);
  dt_tensor_release(values);
  return st;
}
static dt_status f_batch_norm(dt_tensor **i, dt_tensor **o) {
  return dt_batch_norm(i[0], i[1], i[2], NULL, NULL, 1e-5, o);
}
static dt_status f_batch_norm_training(dt_tensor **i, dt_tensor **o) {
  return dt_batch_norm_training(i[0], i[1], i[2], 1e-5, o);
}
static dt_status f_squeeze(dt_tensor **i, dt_tensor **o) { return dt_squeeze(i[0], o); }
static dt_status f_squeeze_dim(dt_tensor **i, dt_tensor **o) { return dt_squeeze_dim(i[0], 1, o); }
static dt_status f_slice(dt_tensor **i, dt_tensor **o) { return dt_slice(i[0], 1, 1, 7, 2, o); }
static dt_status keep_piece(dt_status st, dt_tensor **pieces, int n, int keep, dt_tensor **o) {
  if (st) return st;
  *o = pieces[keep];
  for (int k = 0; k < n; k++) {
    if (k != keep) dt_tensor_release(pieces[k]);
  }
  return DT_OK;
}
static dt_status f_split(dt_tensor **i, dt_tensor **o) {
  dt_tensor *pieces[4] = {0};
  int n = 0;
  /* n is read after dt_split wrote it: the call is not an argument of keep_piece, whose
   * arguments may be evaluated in any order. */
  dt_status st = dt_split(i[0], 2, 0, pieces, 4, &n);
  return keep_piece(st, pieces, n, 1, o);
}
static dt_status f_split_with_sizes(dt_tensor **i, dt_tensor **o) {
  dt_tensor *pieces[3] = {0};
  int n = 0;
  dt_status st = dt_split_with_sizes(i[0], 3, (int64_t[]){1, 4, 2}, 1, pieces, 3, &n);
  return keep_piece(st, pieces, n, 1, o);
}
/* In-place ops run on a clone of the first input, which becomes the result. */
static dt_status on_clone(dt_tensor *a, dt_tensor **o, dt_tensor **c) {
  *o = NULL;
  return dt_clone(a, c);
}
static dt_status done_clone(dt_status st, dt_tensor *c, dt_tensor **o) {
  if (st) {
    dt_tensor_release(c);
    return st;
  }
  *o = c;
  return DT_OK;
}
static dt_status f_sub_inplace(dt_tensor **i, dt_tensor **o) {
  dt_tensor *c = NULL;
  dt_status st = on_clone(i[0], o, &c);
  return done_clone(st ? st : dt_sub_(c, i[1]), c, o);
}
static dt_status f_mul_inplace(dt_tensor **i, dt_tensor **o) {
  dt_tensor *c = NULL;
  dt_status st = on_clone(i[0], o, &c);
  return done_clone(st ? st : dt_mul_(c, i[1]), c, o);
}
static dt_status f_div_inplace(dt_tensor **i, dt_tensor **o) {
  dt_tensor *c = NULL;
  dt_status st = on_clone(i[0], o, &c);
  return done_clone(st ? st : dt_div_(c, i[1]), c, o);
}
static dt_status f_add_scalar_inplace(dt_tensor **i, dt_tensor **o) {
  dt_tensor *c = NULL;
  dt_status st = on_clone(i[0], o, &c);
  return done_clone(st ? st : dt_add_scalar_(c, 1.5), c, o);
}
static dt_status f_mul_scalar_inplace(dt_tensor **i, dt_tensor **o) {
  dt_tensor *c = NULL;
  dt_status st = on_clone(i[0], o, &c);
  return done_clone(st ? st : dt_mul_scalar_(c, -2), c, o);
}
static dt_status f_copy_inplace(dt_tensor **i, dt_tensor **o) {
  dt_tensor *c = NULL;
  dt_status st = on_clone(i[0], o, &c);
  return done_clone(st ? st : dt_copy_(c, i[1]), c, o);
}
static dt_status f_uniform_inplace(dt_tensor **i, dt_tensor **o) {
  dt_tensor *c = NULL;
  dt_status st = on_clone(i[0], o, &c);
  return done_clone(st ? st : dt_uniform_(c, -1, 1, 11), c, o);
}
static dt_status f_empty_like_fill(dt_tensor **i, dt_tensor **o) {
  dt_tensor *c = NULL;
  dt_status st = dt_empty_like(i[0], &c);
  *o = NULL;
  return done_clone(st ? st : dt_fill_(c, 2.5), c, o);
}
static dt_status f_zeros_like(dt_tensor **i, dt_tensor **o) { return dt_zeros_like(i[0], o); }
static dt_status f_full_like(dt_tensor **i, dt_tensor **o) { return dt_full_like(i[0], 7, o); }

/* Table rows leave trailing fields (dtypes, ranges) to their zero defaults. */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#define S2(a, b)                                                                                   \
  { a, b }
static const op_case cases[] = {
    {"add", f_add, 2, {2, 2}, {S2(5, 7), S2(5, 7)}},
    {"add broadcast", f_add, 2, {2, 1}, {S2(5, 7), {7}}},
    {"add size-1 dims", f_add, 2, {2, 2}, {S2(1, 7), S2(1, 7)}},
    {"mul size-1 vs broadcast", f_mul, 2, {2, 2}, {S2(1, 7), S2(3, 1)}},
    {"sum of 1 element", f_sum, 1, {1}, {{1}}},
    {"sub alpha", f_sub, 2, {2, 2}, {S2(5, 7), S2(1, 7)}},
    {"mul", f_mul, 2, {2, 2}, {S2(5, 7), S2(5, 7)}},
    {"div", f_div, 2, {2, 2}, {S2(5, 7), S2(5, 7)}, .lo = 1, .hi = 3},
    {"maximum", f_maximum, 2, {2, 2}, {S2(5, 7), S2(5, 7)}},
    {"gt", f_gt, 2, {2, 2}, {S2(5, 7), S2(5, 7)}, .exact = true},
    {"where", f_where, 2, {2, 2}, {S2(5, 7), S2(5, 7)}},
    {"masked_fill", f_masked_fill, 2, {2, 2}, {S2(5, 7), S2(5, 7)}},
    {"relu", f_relu, 1, {2}, {S2(5, 7)}},
    {"neg", f_neg, 1, {2}, {S2(5, 7)}},
    {"exp", f_exp, 1, {2}, {S2(5, 7)}},
    {"gelu", f_gelu, 1, {2}, {S2(5, 7)}},
    {"gelu_backward", f_gelu_backward, 2, {2, 2}, {S2(5, 7), S2(5, 7)}},
    {"mul.Scalar", f_mul_scalar, 1, {2}, {S2(5, 7)}},
    {"add.Scalar", f_add_scalar, 1, {2}, {S2(5, 7)}},
    {"add_", f_add_inplace, 2, {2, 2}, {S2(5, 7), S2(5, 7)}},
    {"sum", f_sum, 1, {2}, {S2(5, 7)}},
    {"sum dim 0", f_sum0, 1, {2}, {S2(5, 7)}},
    {"sum dim 1 keepdim", f_sum1k, 1, {2}, {S2(5, 7)}},
    {"mean dim -1", f_mean1, 1, {2}, {S2(5, 8)}},
    {"mean", f_mean, 1, {2}, {S2(5, 7)}},
    {"amax dim 0", f_amax0, 1, {2}, {S2(5, 7)}},
    {"max", f_max, 1, {2}, {S2(5, 7)}},
    {"argmax dim 1", f_argmax1, 1, {2}, {S2(5, 7)}, .exact = true},
    {"softmax", f_softmax1, 1, {2}, {S2(5, 7)}},
    {"log_softmax", f_log_softmax0, 1, {2}, {S2(5, 7)}},
    {"layer_norm", f_layer_norm, 1, {2}, {S2(5, 7)}},
    {"rms_norm", f_rms_norm, 1, {2}, {S2(5, 7)}},
    {"scaled_dot_product_attention",
     f_attention,
     3,
     {4, 4, 4},
     {{3, 4, 5, 6}, {3, 2, 7, 6}, {3, 2, 7, 5}}},
    {"mm", f_mm, 2, {2, 2}, {S2(5, 6), S2(6, 7)}},
    {"bmm", f_bmm, 2, {3, 3}, {{3, 5, 6}, {3, 6, 4}}},
    {"matmul 3d@2d", f_matmul, 2, {3, 2}, {{3, 5, 6}, S2(6, 4)}},
    {"addmm", f_addmm, 3, {2, 2, 1}, {S2(5, 6), S2(6, 7), {7}}},
    {"linear", f_linear, 3, {2, 2, 1}, {S2(5, 6), S2(7, 6), {7}}},
    {"linear no bias 3d", f_linear_nobias, 2, {3, 2}, {{3, 5, 6}, S2(7, 6)}},
    {"cross_entropy none",
     f_cross_entropy,
     2,
     {2, 1},
     {S2(5, 7), {5}},
     {DT_F32, DT_I64},
     .lo = 0,
     .hi = 7},
    {"cross_entropy_loss_backward",
     f_cross_entropy_backward,
     3,
     {2, 2, 2},
     {S2(5, 1), S2(5, 7), S2(5, 1)},
     {DT_F32, DT_F32, DT_I64},
     .lo = 0,
     .hi = 7},
    {"embedding", f_embedding, 2, {2, 1}, {S2(10, 6), {5}}, {DT_F32, DT_I64}, .lo = 0, .hi = 10},
    {"scatter_add dim 0",
     f_scatter_add,
     3,
     {2, 2, 2},
     {S2(5, 7), S2(3, 7), S2(3, 7)},
     {DT_F32, DT_I64, DT_F32},
     .lo = 0,
     .hi = 5},
    {"cat 0", f_cat0, 2, {2, 2}, {S2(5, 7), S2(3, 7)}},
    {"cat 1", f_cat1, 2, {2, 2}, {S2(5, 7), S2(5, 2)}},
    {"stack 1", f_stack1, 2, {2, 2}, {S2(5, 7), S2(5, 7)}},
    {"transpose", f_transpose, 1, {2}, {S2(5, 7)}},
    {"permute", f_permute, 1, {3}, {{3, 5, 7}}},
    {"view 6x5", f_view, 1, {2}, {S2(10, 3)}},
    {"reshape -1", f_reshape, 1, {2}, {S2(4, 7)}},
    {"flatten 1..2", f_flatten, 1, {3}, {{3, 4, 5}}},
    {"unsqueeze", f_unsqueeze, 1, {2}, {S2(5, 7)}},
    {"select", f_select, 1, {2}, {S2(5, 7)}},
    {"narrow", f_narrow, 1, {2}, {S2(5, 7)}},
    {"chunk", f_chunk, 1, {2}, {S2(5, 7)}},
    {"expand", f_expand, 1, {2}, {S2(1, 7)}},
    {"clone", f_clone, 1, {2}, {S2(5, 7)}},
    {"detach", f_detach, 1, {2}, {S2(5, 7)}},
    {"contiguous of transpose", f_contiguous_t, 1, {2}, {S2(5, 7)}},
    {"to float64", f_to64, 1, {2}, {S2(5, 7)}},
    {"ones_like", f_ones_like, 1, {2}, {S2(5, 7)}},
    {"abs", f_abs, 1, {2}, {S2(5, 7)}},
    {"log", f_log, 1, {2}, {S2(5, 7)}, .lo = 0.5, .hi = 3},
    {"sqrt", f_sqrt, 1, {2}, {S2(5, 7)}, .lo = 0.5, .hi = 3},
    {"rsqrt", f_rsqrt, 1, {2}, {S2(5, 7)}, .lo = 0.5, .hi = 3},
    {"silu", f_silu, 1, {2}, {S2(5, 7)}},
    {"tanh", f_tanh, 1, {2}, {S2(5, 7)}},
    {"sigmoid", f_sigmoid, 1, {2}, {S2(5, 7)}},
    {"minimum", f_minimum, 2, {2, 2}, {S2(5, 7), S2(5, 7)}},
    {"pow", f_pow, 2, {2, 1}, {S2(5, 7), {7}}, .lo = 0.5, .hi = 2},
    {"sub.Scalar", f_sub_scalar, 1, {2}, {S2(5, 7)}},
    {"div.Scalar", f_div_scalar, 1, {2}, {S2(5, 7)}},
    {"pow.Scalar", f_pow_scalar, 1, {2}, {S2(5, 7)}},
    {"eq",
     f_eq,
     2,
     {2, 2},
     {S2(5, 7), S2(5, 7)},
     {DT_I64, DT_I64},
     .lo = 0,
     .hi = 3,
     .exact = true},
    {"ne",
     f_ne,
     2,
     {2, 2},
     {S2(5, 7), S2(5, 7)},
     {DT_I64, DT_I64},
     .lo = 0,
     .hi = 3,
     .exact = true},
    {"lt", f_lt, 2, {2, 2}, {S2(5, 7), S2(5, 7)}, .exact = true},
    {"le", f_le, 2, {2, 2}, {S2(5, 7), S2(5, 7)}, .exact = true},
    {"ge", f_ge, 2, {2, 2}, {S2(5, 7), S2(5, 7)}, .exact = true},
    {"eq.Scalar", f_eq_scalar, 1, {2}, {S2(5, 7)}, {DT_I64}, .lo = -2, .hi = 2, .exact = true},
    {"ne.Scalar", f_ne_scalar, 1, {2}, {S2(5, 7)}, {DT_I64}, .lo = -2, .hi = 2, .exact = true},
    {"lt.Scalar", f_lt_scalar, 1, {2}, {S2(5, 7)}, .exact = true},
    {"le.Scalar", f_le_scalar, 1, {2}, {S2(5, 7)}, .exact = true},
    {"ge.Scalar", f_ge_scalar, 1, {2}, {S2(5, 7)}, .exact = true},
    {"min", f_min, 1, {2}, {S2(5, 7)}},
    {"amin dim 1", f_amin1, 1, {2}, {S2(5, 7)}},
    {"max.dim 0 values", f_max_dim0, 1, {2}, {S2(5, 7)}},
    {"min.dim 1 indices", f_min_dim1_indices, 1, {2}, {S2(5, 7)}, .exact = true},
    {"batch_norm", f_batch_norm, 3, {3, 1, 1}, {{4, 3, 5}, {3}, {3}}, .lo = 0.5, .hi = 2},
    {"batch_norm_training", f_batch_norm_training, 3, {3, 1, 1}, {{4, 3, 5}, {3}, {3}}},
    {"squeeze", f_squeeze, 1, {3}, {{5, 1, 7}}},
    {"squeeze dim 1", f_squeeze_dim, 1, {3}, {{5, 1, 7}}},
    {"slice step 2", f_slice, 1, {2}, {S2(5, 7)}},
    {"split", f_split, 1, {2}, {S2(5, 7)}},
    {"split_with_sizes", f_split_with_sizes, 1, {2}, {S2(5, 7)}},
    {"sub_", f_sub_inplace, 2, {2, 2}, {S2(5, 7), S2(5, 7)}},
    {"mul_", f_mul_inplace, 2, {2, 2}, {S2(5, 7), S2(5, 7)}},
    {"div_", f_div_inplace, 2, {2, 1}, {S2(5, 7), {7}}, .lo = 1, .hi = 3},
    {"add_.Scalar", f_add_scalar_inplace, 1, {2}, {S2(5, 7)}, .no_partial = true},
    {"mul_.Scalar", f_mul_scalar_inplace, 1, {2}, {S2(5, 7)}},
    {"copy_", f_copy_inplace, 2, {2, 2}, {S2(5, 7), S2(5, 7)}},
    {"uniform_", f_uniform_inplace, 1, {2}, {S2(5, 7)}, .no_partial = true},
    {"empty_like + fill_", f_empty_like_fill, 1, {2}, {S2(5, 7)}},
    {"zeros_like", f_zeros_like, 1, {2}, {S2(5, 7)}},
    {"full_like", f_full_like, 1, {2}, {S2(5, 7)}},
};
#define N_CASES (sizeof cases / sizeof *cases)

#endif /* DT_TEST_SWEEP_CASES_H */
