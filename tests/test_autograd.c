/* Autograd: gradients of every op with a backward formula against central finite
 * differences in float64 (odd sizes, broadcasting, non-contiguous inputs), the API's errors,
 * no_grad, memory over a training-like loop. Distributed gradients: tests/test_autograd_dist.c. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"
#include "counting_alloc.h" /* live_bytes, peak_bytes, live_blocks */

/* ---- The ops ----------------------------------------------------------------------------- */

static dt_status f_add(dt_tensor **x, dt_tensor **o) { return dt_add(x[0], x[1], o); }
static dt_status f_add_alpha(dt_tensor **x, dt_tensor **o) { return dt_add_ex(x[0], x[1], 2.5, o); }
static dt_status f_sub_alpha(dt_tensor **x, dt_tensor **o) {
  return dt_sub_ex(x[0], x[1], 0.75, o);
}
static dt_status f_mul(dt_tensor **x, dt_tensor **o) { return dt_mul(x[0], x[1], o); }
static dt_status f_div(dt_tensor **x, dt_tensor **o) { return dt_div(x[0], x[1], o); }
static dt_status f_neg(dt_tensor **x, dt_tensor **o) { return dt_neg(x[0], o); }
static dt_status f_exp(dt_tensor **x, dt_tensor **o) { return dt_exp(x[0], o); }
static dt_status f_log(dt_tensor **x, dt_tensor **o) { return dt_log(x[0], o); }
static dt_status f_relu(dt_tensor **x, dt_tensor **o) { return dt_relu(x[0], o); }
static dt_status f_add_scalar(dt_tensor **x, dt_tensor **o) { return dt_add_scalar(x[0], 1.5, o); }
static dt_status f_sub_scalar(dt_tensor **x, dt_tensor **o) { return dt_sub_scalar(x[0], 1.5, o); }
static dt_status f_mul_scalar(dt_tensor **x, dt_tensor **o) { return dt_mul_scalar(x[0], -3, o); }
static dt_status f_div_scalar(dt_tensor **x, dt_tensor **o) { return dt_div_scalar(x[0], 4, o); }
static dt_status f_pow_scalar(dt_tensor **x, dt_tensor **o) { return dt_pow_scalar(x[0], 2.5, o); }
static dt_status f_sum(dt_tensor **x, dt_tensor **o) { return dt_sum(x[0], o); }
static dt_status f_sum_dim(dt_tensor **x, dt_tensor **o) {
  return dt_sum_dims(x[0], 1, (int64_t[]){-2}, false, o);
}
static dt_status f_sum_dims_keep(dt_tensor **x, dt_tensor **o) {
  return dt_sum_dims(x[0], 2, (int64_t[]){0, 2}, true, o);
}
static dt_status f_mean(dt_tensor **x, dt_tensor **o) { return dt_mean(x[0], o); }
static dt_status f_mean_dim(dt_tensor **x, dt_tensor **o) {
  return dt_mean_dims(x[0], 1, (int64_t[]){1}, false, o);
}
static dt_status f_mean_dims_keep(dt_tensor **x, dt_tensor **o) {
  return dt_mean_dims(x[0], 2, (int64_t[]){2, 0}, true, o);
}
static dt_status f_mm(dt_tensor **x, dt_tensor **o) { return dt_mm(x[0], x[1], o); }
static dt_status f_bmm(dt_tensor **x, dt_tensor **o) { return dt_bmm(x[0], x[1], o); }
static dt_status f_matmul(dt_tensor **x, dt_tensor **o) { return dt_matmul(x[0], x[1], o); }
static dt_status f_linear(dt_tensor **x, dt_tensor **o) { return dt_linear(x[0], x[1], x[2], o); }
static dt_status f_linear_nobias(dt_tensor **x, dt_tensor **o) {
  return dt_linear(x[0], x[1], NULL, o);
}
static dt_status f_addmm(dt_tensor **x, dt_tensor **o) {
  return dt_addmm_ex(x[0], x[1], x[2], 0.5, 2.0, o);
}
static dt_status f_view(dt_tensor **x, dt_tensor **o) {
  return dt_view(x[0], 2, (int64_t[]){5, 3}, o);
}
static dt_status f_reshape(dt_tensor **x, dt_tensor **o) {
  return dt_reshape(x[0], 3, (int64_t[]){3, 1, 5}, o);
}
static dt_status f_flatten(dt_tensor **x, dt_tensor **o) { return dt_flatten(x[0], 0, 1, o); }
static dt_status f_transpose(dt_tensor **x, dt_tensor **o) { return dt_transpose(x[0], 0, -1, o); }
static dt_status f_permute(dt_tensor **x, dt_tensor **o) {
  return dt_permute(x[0], 3, (int64_t[]){2, 0, -2}, o);
}
static dt_status f_expand(dt_tensor **x, dt_tensor **o) {
  return dt_expand(x[0], 3, (int64_t[]){2, 3, 5}, o);
}
static dt_status f_unsqueeze(dt_tensor **x, dt_tensor **o) { return dt_unsqueeze(x[0], 1, o); }
static dt_status f_squeeze(dt_tensor **x, dt_tensor **o) { return dt_squeeze(x[0], o); }
static dt_status f_squeeze_dim(dt_tensor **x, dt_tensor **o) { return dt_squeeze_dim(x[0], -2, o); }
static dt_status f_clone(dt_tensor **x, dt_tensor **o) { return dt_clone(x[0], o); }
static dt_status f_contiguous(dt_tensor **x, dt_tensor **o) { return dt_contiguous(x[0], o); }
/* f64 -> f32 -> f64: the gradient is cast back at each step. */
static dt_status f_to(dt_tensor **x, dt_tensor **o) {
  dt_tensor *y = NULL;
  dt_status st = dt_to(x[0], DT_F32, &y);
  if (st) return st;
  st = dt_to(y, DT_F64, o);
  dt_tensor_release(y);
  return st;
}
/* A chain: the same input used twice, through several ops (accumulation per node input). */
static dt_status f_chain(dt_tensor **x, dt_tensor **o) {
  dt_tensor *a = NULL, *b = NULL, *c = NULL;
  dt_status st = dt_mul(x[0], x[0], &a);
  if (!st) st = dt_exp(a, &b);
  if (!st) st = dt_add(b, x[0], &c);
  if (!st) st = dt_linear(c, x[1], NULL, o);
  dt_tensor_release(a);
  dt_tensor_release(b);
  dt_tensor_release(c);
  return st;
}

#define S1(a)                                                                                      \
  { a }
#define S2(a, b)                                                                                   \
  { a, b }
#define S3(a, b, c)                                                                                \
  { a, b, c }

static const grad_case cases[] = {
    {"add broadcast", f_add, 2, {2, 1}, {S2(3, 5), S1(5)}, {PLAIN, NONCONTIG}, 0, 0},
    {"add alpha 3-d broadcast",
     f_add_alpha,
     2,
     {3, 2},
     {S3(4, 1, 3), S2(5, 1)},
     {NONCONTIG, 0},
     0,
     0},
    {"sub alpha", f_sub_alpha, 2, {2, 2}, {S2(3, 5), S2(3, 1)}, {NONCONTIG, PLAIN}, 0, 0},
    {"mul broadcast", f_mul, 2, {3, 2}, {S3(2, 3, 5), S2(3, 1)}, {PLAIN, NONCONTIG}, 0, 0},
    {"div broadcast", f_div, 2, {2, 1}, {S2(3, 5), S1(5)}, {NONCONTIG, POSITIVE}, 0, 0},
    {"neg", f_neg, 1, {2}, {S2(3, 5)}, {NONCONTIG}, 0, 0},
    {"exp", f_exp, 1, {2}, {S2(3, 5)}, {NONCONTIG}, 0, 0},
    {"log", f_log, 1, {2}, {S2(3, 5)}, {POSITIVE | NONCONTIG}, 0, 0},
    {"relu", f_relu, 1, {3}, {S3(2, 3, 5)}, {PLAIN}, 0, 0},
    {"add.Scalar", f_add_scalar, 1, {2}, {S2(3, 5)}, {NONCONTIG}, 0, 0},
    {"sub.Scalar", f_sub_scalar, 1, {1}, {S1(7)}, {NONCONTIG}, 0, 0},
    {"mul.Scalar", f_mul_scalar, 1, {2}, {S2(3, 5)}, {PLAIN}, 0, 0},
    {"div.Scalar", f_div_scalar, 1, {2}, {S2(3, 5)}, {NONCONTIG}, 0, 0},
    {"pow.Tensor_Scalar", f_pow_scalar, 1, {2}, {S2(3, 5)}, {POSITIVE}, 0, 0},
    {"sum", f_sum, 1, {3}, {S3(2, 3, 5)}, {NONCONTIG}, 0, 0},
    {"sum.dim_IntList", f_sum_dim, 1, {3}, {S3(2, 3, 5)}, {NONCONTIG}, 0, 0},
    {"sum.dim_IntList keepdim", f_sum_dims_keep, 1, {3}, {S3(2, 3, 5)}, {PLAIN}, 0, 0},
    {"mean", f_mean, 1, {2}, {S2(3, 5)}, {NONCONTIG}, 0, 0},
    {"mean.dim", f_mean_dim, 1, {3}, {S3(2, 3, 5)}, {PLAIN}, 0, 0},
    {"mean.dim keepdim", f_mean_dims_keep, 1, {3}, {S3(2, 3, 5)}, {NONCONTIG}, 0, 0},
    {"mm", f_mm, 2, {2, 2}, {S2(3, 4), S2(4, 5)}, {NONCONTIG, PLAIN}, 0, 0},
    {"bmm", f_bmm, 2, {3, 3}, {S3(2, 3, 4), S3(2, 4, 5)}, {PLAIN, NONCONTIG}, 0, 0},
    {"matmul 2-d", f_matmul, 2, {2, 2}, {S2(3, 4), S2(4, 5)}, {PLAIN, NONCONTIG}, 0, 0},
    {"matmul batched broadcast",
     f_matmul,
     2,
     {3, 2},
     {S3(2, 3, 4), S2(4, 5)},
     {NONCONTIG, 0},
     0,
     0},
    {"matmul batch dims broadcast", f_matmul, 2, {4, 3}, {{3, 1, 2, 4}, S3(2, 4, 3)}, {0, 0}, 0, 0},
    {"matmul 1-d @ 2-d", f_matmul, 2, {1, 2}, {S1(4), S2(4, 3)}, {NONCONTIG, PLAIN}, 0, 0},
    {"matmul 2-d @ 1-d", f_matmul, 2, {2, 1}, {S2(3, 4), S1(4)}, {PLAIN, NONCONTIG}, 0, 0},
    {"matmul 1-d @ 1-d", f_matmul, 2, {1, 1}, {S1(5), S1(5)}, {PLAIN, PLAIN}, 0, 0},
    {"matmul 3-d @ 1-d", f_matmul, 2, {3, 1}, {S3(2, 3, 4), S1(4)}, {PLAIN, PLAIN}, 0, 0},
    {"matmul 1-d @ 3-d", f_matmul, 2, {1, 3}, {S1(3), S3(2, 3, 4)}, {PLAIN, PLAIN}, 0, 0},
    {"linear",
     f_linear,
     3,
     {3, 2, 1},
     {S3(2, 3, 4), S2(5, 4), S1(5)},
     {NONCONTIG, NONCONTIG, 0},
     0,
     0},
    {"linear 1-d input", f_linear, 3, {1, 2, 1}, {S1(4), S2(3, 4), S1(3)}, {0, 0, 0}, 0, 0},
    {"linear no bias", f_linear_nobias, 2, {2, 2}, {S2(3, 4), S2(5, 4)}, {PLAIN, PLAIN}, 0, 0},
    {"addmm broadcast bias",
     f_addmm,
     3,
     {1, 2, 2},
     {S1(5), S2(3, 4), S2(4, 5)},
     {0, NONCONTIG, 0},
     0,
     0},
    {"addmm full bias",
     f_addmm,
     3,
     {2, 2, 2},
     {S2(3, 5), S2(3, 4), S2(4, 5)},
     {NONCONTIG, 0, 0},
     0,
     0},
    {"view", f_view, 1, {2}, {S2(3, 5)}, {PLAIN}, 0, 0},
    {"reshape of a non-contiguous input", f_reshape, 1, {2}, {S2(3, 5)}, {NONCONTIG}, 0, 0},
    {"flatten", f_flatten, 1, {3}, {S3(2, 3, 5)}, {NONCONTIG}, 0, 0},
    {"transpose", f_transpose, 1, {3}, {S3(2, 3, 5)}, {PLAIN}, 0, 0},
    {"permute", f_permute, 1, {3}, {S3(2, 3, 5)}, {NONCONTIG}, 0, 0},
    {"expand", f_expand, 1, {2}, {S2(3, 1)}, {PLAIN}, 0, 0},
    {"unsqueeze", f_unsqueeze, 1, {2}, {S2(3, 5)}, {NONCONTIG}, 0, 0},
    {"squeeze", f_squeeze, 1, {3}, {S3(3, 1, 5)}, {PLAIN}, 0, 0},
    {"squeeze.dim", f_squeeze_dim, 1, {3}, {S3(3, 1, 5)}, {PLAIN}, 0, 0},
    {"clone", f_clone, 1, {2}, {S2(3, 5)}, {NONCONTIG}, 0, 0},
    {"contiguous", f_contiguous, 1, {2}, {S2(3, 5)}, {NONCONTIG}, 0, 0},
    {"to.dtype", f_to, 1, {2}, {S2(3, 5)}, {NONCONTIG}, 1e-2, 1e-4},
    {"chain with reuse", f_chain, 2, {2, 2}, {S2(3, 4), S2(2, 4)}, {PLAIN, NONCONTIG}, 0, 0},
};

Test(autograd, gradcheck_every_formula) {
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) grad_check(&cases[i]);
}

/* ---- API and errors ---------------------------------------------------------------------- */

static dt_tensor *leaf(int ndim, const int64_t *shape, double value) {
  dt_tensor *t = NULL;
  OK(dt_full(ndim, shape, value, DT_F64, &t));
  OK(dt_tensor_set_requires_grad(t, true));
  return t;
}

static double element(dt_tensor *t, int64_t i) {
  double v[64];
  OK(dt_tensor_to_doubles(t, v, 64));
  return v[i];
}

Test(autograd, simple_values_and_accumulation) {
  dt_tensor *x = leaf(1, (int64_t[]){3}, 2.0), *y = NULL, *loss = NULL, *g = NULL;
  OK(dt_mul(x, x, &y)); /* d sum(x^2) = 2x = 4 */
  OK(dt_sum(y, &loss));
  cr_assert(!dt_tensor_is_leaf(y));
  cr_assert(dt_tensor_is_leaf(x));
  OK(dt_backward_ex(loss, NULL, &(dt_backward_options){.retain_graph = true}));
  OK(dt_tensor_grad(x, &g));
  cr_assert_float_eq(element(g, 2), 4.0, 1e-12);
  dt_tensor_release(g);
  /* A second backward through the kept graph accumulates. */
  OK(dt_backward(loss, NULL));
  OK(dt_tensor_grad(x, &g));
  cr_assert_float_eq(element(g, 0), 8.0, 1e-12);
  dt_tensor_release(g);
  /* zero_grad in place, then to none. */
  OK(dt_tensor_zero_grad(x, false));
  OK(dt_tensor_grad(x, &g));
  cr_assert_float_eq(element(g, 1), 0.0, 1e-12);
  dt_tensor_release(g);
  OK(dt_tensor_zero_grad(x, true));
  OK(dt_tensor_grad(x, &g));
  cr_assert_null(g);
  dt_tensor_release(loss);
  dt_tensor_release(y);
  dt_tensor_release(x);
  cr_assert_eq(dt_autograd_live_nodes(), 0);
}

Test(autograd, grads_of_add_are_not_shared) {
  /* add gives both inputs the same gradient tensor: zeroing one in place must not zero the
   * other. */
  dt_tensor *a = leaf(1, (int64_t[]){4}, 1.0), *b = leaf(1, (int64_t[]){4}, 2.0);
  dt_tensor *y = NULL, *ga = NULL, *gb = NULL;
  OK(dt_add(a, b, &y));
  cr_assert_eq(dt_backward(y, NULL), DT_ERR_INVALID); /* 4 elements need a grad */
  dt_tensor *seed = NULL;
  OK(dt_full(1, (int64_t[]){4}, 3.0, DT_F64, &seed));
  OK(dt_backward(y, seed));
  OK(dt_tensor_zero_grad(a, false));
  OK(dt_tensor_grad(a, &ga));
  OK(dt_tensor_grad(b, &gb));
  cr_assert_float_eq(element(ga, 0), 0.0, 1e-12);
  cr_assert_float_eq(element(gb, 0), 3.0, 1e-12);
  cr_assert(!dt_tensor_shares_storage(gb, seed));
  dt_tensor_release(ga);
  dt_tensor_release(gb);
  dt_tensor_release(seed);
  dt_tensor_release(y);
  dt_tensor_release(a);
  dt_tensor_release(b);
}

Test(autograd, backward_errors) {
  dt_tensor *x = leaf(2, (int64_t[]){2, 3}, 1.5), *y = NULL, *loss = NULL, *plain = NULL;
  OK(dt_exp(x, &y));
  /* Non-scalar without grad. */
  cr_assert_eq(dt_backward(y, NULL), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "one element") && strstr(dt_last_error(), "[2, 3]"), "%s",
            dt_last_error());
  /* A grad of the wrong shape and dtype. */
  dt_tensor *bad = NULL;
  OK(dt_ones(1, (int64_t[]){6}, DT_F64, &bad));
  cr_assert_eq(dt_backward(y, bad), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "shape"), "%s", dt_last_error());
  dt_tensor_release(bad);
  OK(dt_ones(2, (int64_t[]){2, 3}, DT_F32, &bad));
  cr_assert_eq(dt_backward(y, bad), DT_ERR_DTYPE);
  dt_tensor_release(bad);
  /* NULL and a loss that does not require grad. */
  cr_assert_eq(dt_backward(NULL, NULL), DT_ERR_INVALID);
  OK(dt_ones(0, NULL, DT_F64, &plain));
  cr_assert_eq(dt_backward(plain, NULL), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "does not require grad"), "%s", dt_last_error());
  /* Twice through a freed graph. */
  OK(dt_sum(y, &loss));
  OK(dt_backward(loss, NULL));
  cr_assert_eq(dt_backward(loss, NULL), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "second time") && strstr(dt_last_error(), "retain_graph"), "%s",
            dt_last_error());
  dt_tensor_release(loss);
  dt_tensor_release(y);
  dt_tensor_release(plain);
  dt_tensor_release(x);
}

Test(autograd, modified_saved_tensor_is_an_error_naming_the_op) {
  dt_tensor *x = leaf(1, (int64_t[]){3}, 2.0), *w = NULL, *y = NULL, *loss = NULL, *g = NULL;
  OK(dt_full(1, (int64_t[]){3}, 5.0, DT_F64, &w));
  OK(dt_mul(x, w, &y));
  OK(dt_sum(y, &loss));
  OK(dt_mul_scalar_(w, 2.0)); /* w does not require grad: allowed, but mul saved it */
  cr_assert_eq(dt_backward(loss, NULL), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "mul.Tensor") && strstr(dt_last_error(), "modified in place"),
            "%s", dt_last_error());
  OK(dt_tensor_grad(x, &g));
  cr_assert_null(g, "a failed backward must not change .grad");
  dt_tensor_release(loss);
  dt_tensor_release(y);
  dt_tensor_release(w);
  dt_tensor_release(x);
}

Test(autograd, requires_grad_errors) {
  dt_tensor *i = NULL, *x = leaf(1, (int64_t[]){2}, 1.0), *y = NULL;
  OK(dt_zeros(1, (int64_t[]){2}, DT_I64, &i));
  cr_assert_eq(dt_tensor_set_requires_grad(i, true), DT_ERR_DTYPE);
  cr_assert(strstr(dt_last_error(), "int64") && strstr(dt_last_error(), "floating"), "%s",
            dt_last_error());
  cr_assert_eq(dt_tensor_set_requires_grad(NULL, true), DT_ERR_INVALID);
  OK(dt_tensor_set_requires_grad(i, false)); /* clearing is always fine */
  OK(dt_neg(x, &y));
  cr_assert_eq(dt_tensor_set_requires_grad(y, false), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "not a leaf") && strstr(dt_last_error(), "neg"), "%s",
            dt_last_error());
  /* In place on a leaf that requires grad (tests/test_autograd_inplace.c has the rest). */
  cr_assert_eq(dt_mul_scalar_(x, 2.0), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "mul_.Scalar") && strstr(dt_last_error(), "leaf") &&
                strstr(dt_last_error(), "no_grad"),
            "%s", dt_last_error());
  bool prev = dt_grad_mode_set(false);
  OK(dt_mul_scalar_(x, 2.0)); /* as an optimizer step does */
  dt_grad_mode_set(prev);
  /* An op without a backward formula (scatter_add: no double backward yet). */
  dt_tensor *t = NULL, *loss = NULL;
  OK(dt_scatter_add(x, 0, i, x, &t));
  cr_assert(dt_tensor_requires_grad(t));
  OK(dt_sum(t, &loss));
  cr_assert_eq(dt_backward(loss, NULL), DT_ERR_UNSUPPORTED);
  cr_assert(strstr(dt_last_error(), "scatter_add"), "%s", dt_last_error());
  /* Integer and bool outputs never require grad; detach's output neither. */
  dt_tensor *am = NULL, *cmp = NULL, *d = NULL;
  OK(dt_argmax(x, &am));
  OK(dt_gt_scalar(x, 0.0, &cmp));
  OK(dt_detach(x, &d));
  cr_assert(!dt_tensor_requires_grad(am) && !dt_tensor_requires_grad(cmp) &&
            !dt_tensor_requires_grad(d));
  cr_assert_eq(dt_tensor_retain_grad(d), DT_ERR_INVALID);
  dt_tensor *r = NULL, *rl = NULL, *gr = NULL;
  cr_assert(dt_tensor_shares_storage(d, x));
  dt_tensor_release(am);
  dt_tensor_release(cmp);
  dt_tensor_release(d);
  /* retain_grad keeps a non-leaf's gradient. */
  OK(dt_mul_scalar(x, 3.0, &r));
  OK(dt_tensor_retain_grad(r));
  OK(dt_sum(r, &rl));
  OK(dt_backward(rl, NULL));
  OK(dt_tensor_grad(r, &gr));
  cr_assert_not_null(gr);
  cr_assert_float_eq(element(gr, 1), 1.0, 1e-12);
  dt_tensor_release(gr);
  dt_tensor_release(rl);
  dt_tensor_release(r);
  dt_tensor_release(loss);
  dt_tensor_release(t);
  dt_tensor_release(y);
  dt_tensor_release(x);
  dt_tensor_release(i);
  cr_assert_eq(dt_autograd_live_nodes(), 0);
}

Test(autograd, no_grad_records_nothing) {
  dt_tensor *x = leaf(2, (int64_t[]){3, 4}, 1.0), *w = leaf(2, (int64_t[]){5, 4}, 0.5);
  int64_t before = dt_autograd_live_nodes();
  cr_assert(dt_grad_mode_enabled());
  bool prev = dt_grad_mode_set(false);
  cr_assert(prev);
  cr_assert(!dt_grad_mode_enabled());
  dt_tensor *y = NULL, *z = NULL;
  OK(dt_linear(x, w, NULL, &y));
  OK(dt_relu(y, &z));
  cr_assert(!dt_tensor_requires_grad(y) && !dt_tensor_requires_grad(z));
  cr_assert(dt_tensor_is_leaf(z));
  cr_assert_eq(dt_autograd_live_nodes(), before);
  cr_assert_eq(dt_backward(z, NULL), DT_ERR_INVALID);
  cr_assert_eq(dt_grad_mode_set(prev), false);
  dt_tensor_release(y);
  dt_tensor_release(z);
  dt_tensor_release(x);
  dt_tensor_release(w);
}

/* ---- Memory: a 20-layer MLP trained for 200 steps keeps its allocations flat ------------ */

static void mlp_step(dt_tensor **w, int layers, dt_tensor *input) {
  dt_tensor *h = dt_tensor_retain(input);
  for (int l = 0; l < layers; l++) {
    dt_tensor *lin = NULL, *act = NULL;
    OK(dt_linear(h, w[l], NULL, &lin));
    OK(dt_relu(lin, &act));
    dt_tensor_release(lin);
    dt_tensor_release(h);
    h = act;
  }
  dt_tensor *loss = NULL;
  OK(dt_mean(h, &loss));
  dt_tensor_release(h);
  OK(dt_backward(loss, NULL));
  dt_tensor_release(loss);
  /* SGD under no_grad, then zero the grads to none. */
  bool prev = dt_grad_mode_set(false);
  for (int l = 0; l < layers; l++) {
    dt_tensor *g = NULL, *step = NULL;
    OK(dt_tensor_grad(w[l], &g));
    cr_assert_not_null(g);
    OK(dt_mul_scalar(g, -0.01, &step));
    OK(dt_add_(w[l], step));
    dt_tensor_release(step);
    dt_tensor_release(g);
    OK(dt_tensor_zero_grad(w[l], true));
  }
  dt_grad_mode_set(prev);
}

Test(autograd, mlp_loop_memory_is_flat) {
  dt_set_allocator(&(dt_allocator){.alloc = count_alloc, .free = count_free});
  enum { LAYERS = 20, STEPS = 200 };
  dt_tensor *w[LAYERS], *input = NULL;
  for (int l = 0; l < LAYERS; l++) {
    OK(dt_rand(2, (int64_t[]){16, 16}, DT_F32, 100 + (uint64_t)l, &w[l]));
    OK(dt_tensor_set_requires_grad(w[l], true));
  }
  OK(dt_rand(2, (int64_t[]){8, 16}, DT_F32, 7, &input));
  long after_warmup = 0;
  for (int s = 0; s < STEPS; s++) {
    mlp_step(w, LAYERS, input);
    cr_assert_eq(dt_autograd_live_nodes(), 0, "step %d left nodes alive", s);
    if (s == 9) after_warmup = atomic_load(&live_blocks);
  }
  long at_end = atomic_load(&live_blocks);
  cr_assert_eq(at_end, after_warmup, "allocations grew from %ld to %ld blocks over %d steps",
               after_warmup, at_end, STEPS - 10);
  for (int l = 0; l < LAYERS; l++) dt_tensor_release(w[l]);
  dt_tensor_release(input);
  dt_set_allocator(NULL);
}
