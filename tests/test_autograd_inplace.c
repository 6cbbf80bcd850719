/* Autograd of in-place ops, as PyTorch's: on a non-leaf (or on a tensor that does not require
 * grad, with an argument that does) the op is recorded and the tensor's history rebased onto
 * it; gradients are checked against central finite differences in float64. On a leaf that
 * requires grad the op is an error; a value saved for backward and then modified in place makes
 * the backward fail; a distributed case runs on the threads backend (2 ranks). */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "comm_helpers.h"
#include "inplace_dist_helpers.h"

#define OK(call) cr_assert_eq((call), DT_OK, "%s: %s", #call, dt_last_error())

static uint64_t lcg_state = 0x9e3779b97f4a7c15ull;
static double next_uniform(void) { /* in [0, 1) */
  lcg_state = lcg_state * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(lcg_state >> 11) / 9007199254740992.0;
}

/* A float64 leaf that requires grad, values in [lo, lo + 1). */
static dt_tensor *leaf(int ndim, const int64_t *shape, double lo) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  double values[64];
  cr_assert(n <= 64);
  for (int64_t i = 0; i < n; i++) values[i] = lo + next_uniform();
  dt_tensor *t = NULL;
  OK(dt_from_data(values, ndim, shape, DT_F64, &t));
  OK(dt_tensor_set_requires_grad(t, true));
  return t;
}

/* A case: the loss of leaves a and b, built with in-place ops. */
typedef dt_status (*case_fn)(dt_tensor *a, dt_tensor *b, dt_tensor **loss);

static dt_status finish(dt_tensor *y, dt_tensor *a, dt_status st, dt_tensor **loss) {
  /* loss = sum(y * y * a): every element of y matters, with a weight that depends on a. */
  dt_tensor *yy = NULL, *yya = NULL;
  if (!st) st = dt_mul(y, y, &yy);
  if (!st) st = dt_mul(yy, a, &yya);
  if (!st) st = dt_sum(yya, loss);
  dt_tensor_release(yy);
  dt_tensor_release(yya);
  dt_tensor_release(y);
  return st;
}

/* y = 1.5 a (a non-leaf), then y op_= b. */
static dt_status nonleaf(dt_tensor *a, dt_tensor **y) { return dt_mul_scalar(a, 1.5, y); }

static dt_status case_add_(dt_tensor *a, dt_tensor *b, dt_tensor **loss) {
  dt_tensor *y = NULL;
  dt_status st = nonleaf(a, &y);
  if (!st) st = dt_add_(y, b);
  return finish(y, a, st, loss);
}

static dt_status case_sub_(dt_tensor *a, dt_tensor *b, dt_tensor **loss) {
  dt_tensor *y = NULL;
  dt_status st = dt_exp(a, &y); /* saves its output y */
  dt_tensor *z = NULL;
  if (!st) st = dt_mul_scalar(y, 1.0, &z); /* modify a copy: y must stay as exp saved it */
  dt_tensor_release(y);
  if (!st) st = dt_sub_(z, b);
  return finish(z, a, st, loss);
}

static dt_status case_mul_(dt_tensor *a, dt_tensor *b, dt_tensor **loss) {
  dt_tensor *y = NULL;
  dt_status st = nonleaf(a, &y);
  if (!st) st = dt_mul_(y, b); /* b's gradient needs y's old value */
  return finish(y, a, st, loss);
}

static dt_status case_div_(dt_tensor *a, dt_tensor *b, dt_tensor **loss) {
  dt_tensor *y = NULL;
  dt_status st = nonleaf(a, &y);
  if (!st) st = dt_div_(y, b); /* b's gradient reads the result */
  return finish(y, a, st, loss);
}

static dt_status case_scalars_(dt_tensor *a, dt_tensor *b, dt_tensor **loss) {
  dt_tensor *y = NULL;
  dt_status st = dt_mul(a, b, &y);
  if (!st) st = dt_add_scalar_(y, 0.75);
  if (!st) st = dt_mul_scalar_(y, -2.5);
  return finish(y, a, st, loss);
}

/* fill_ cuts the history: b reaches the loss only through the zeros of fill_'s backward. */
static dt_status case_fill_(dt_tensor *a, dt_tensor *b, dt_tensor **loss) {
  dt_tensor *y = NULL;
  dt_status st = dt_mul(a, b, &y);
  if (!st) st = dt_fill_(y, 0.5);
  return finish(y, a, st, loss);
}

/* copy_ with broadcasting: b's rows are copied into every row of y. */
static dt_status case_copy_(dt_tensor *a, dt_tensor *b, dt_tensor **loss) {
  dt_tensor *y = NULL, *row = NULL;
  dt_status st = nonleaf(a, &y);
  if (!st) st = dt_narrow(b, 0, 1, 1, &row); /* [1, 3] broadcast into [4, 3] */
  if (!st) st = dt_copy_(y, row);
  dt_tensor_release(row);
  return finish(y, a, st, loss);
}

/* A tensor that does not require grad, modified with an argument that does: it now requires
 * grad, and its old value (a constant) enters b's gradient through mul_. */
static dt_status case_plain_self(dt_tensor *a, dt_tensor *b, dt_tensor **loss) {
  dt_tensor *x = NULL;
  dt_status st = dt_full(2, (int64_t[]){4, 3}, 0.25, DT_F64, &x);
  if (!st) st = dt_add_(x, a);
  /* Finite differences run under no_grad: only a recorded forward makes x require grad. */
  if (!st && dt_grad_mode_enabled() && !dt_tensor_requires_grad(x)) {
    st = dt__error(DT_ERR_INTERNAL, "x does not require grad after add_");
  }
  if (!st) st = dt_mul_(x, b);
  return finish(x, a, st, loss);
}

/* Broadcast argument: b's gradient is summed back to [3]. */
static dt_status case_broadcast(dt_tensor *a, dt_tensor *b, dt_tensor **loss) {
  dt_tensor *y = NULL, *b1 = NULL;
  dt_status st = nonleaf(a, &y);
  if (!st) st = dt_select(b, 0, 2, &b1); /* [3] */
  if (!st) st = dt_mul_(y, b1);
  if (!st) st = dt_add_(y, b1);
  dt_tensor_release(b1);
  return finish(y, a, st, loss);
}

static double loss_value(case_fn fn, dt_tensor *a, dt_tensor *b) {
  bool prev = dt_grad_mode_set(false);
  dt_tensor *loss = NULL;
  OK(fn(a, b, &loss));
  double v = 0;
  OK(dt_tensor_to_doubles(loss, &v, 1));
  dt_tensor_release(loss);
  dt_grad_mode_set(prev);
  return v;
}

/* d loss / d t[e] by central differences, t contiguous [4, 3]. */
static double numeric(case_fn fn, dt_tensor *a, dt_tensor *b, dt_tensor *t, int64_t e) {
  const double h = 1e-6;
  int64_t index[2] = {e / 3, e % 3};
  double v0 = 0;
  OK(dt_tensor_get(t, index, &v0));
  bool prev = dt_grad_mode_set(false);
  OK(dt_tensor_set(t, index, v0 + h));
  dt_grad_mode_set(prev);
  double up = loss_value(fn, a, b);
  prev = dt_grad_mode_set(false);
  OK(dt_tensor_set(t, index, v0 - h));
  dt_grad_mode_set(prev);
  double down = loss_value(fn, a, b);
  prev = dt_grad_mode_set(false);
  OK(dt_tensor_set(t, index, v0));
  dt_grad_mode_set(prev);
  return (up - down) / (2 * h);
}

static void check_case(const char *name, case_fn fn, double b_low) {
  int64_t shape[2] = {4, 3};
  dt_tensor *a = leaf(2, shape, -0.5), *b = leaf(2, shape, b_low), *loss = NULL;
  OK(fn(a, b, &loss));
  cr_assert(dt_tensor_requires_grad(loss), "%s: loss does not require grad", name);
  OK(dt_backward(loss, NULL));
  dt_tensor_release(loss);
  dt_tensor *leaves[2] = {a, b};
  for (int l = 0; l < 2; l++) {
    dt_tensor *g = NULL;
    OK(dt_tensor_grad(leaves[l], &g));
    double got[12] = {0};
    if (g) OK(dt_tensor_to_doubles(g, got, 12));
    dt_tensor_release(g);
    for (int64_t e = 0; e < 12; e++) {
      double want = numeric(fn, a, b, leaves[l], e);
      cr_assert(fabs(got[e] - want) <= 1e-6 * (1 + fabs(want)),
                "%s: d loss / d %c[%lld] = %.12g, finite differences %.12g", name, "ab"[l],
                (long long)e, got[e], want);
    }
  }
  dt_tensor_release(a);
  dt_tensor_release(b);
  cr_assert_eq(dt_autograd_live_nodes(), 0, "%s: nodes left alive", name);
}

Test(autograd_inplace, add_) { check_case("add_", case_add_, -0.5); }
Test(autograd_inplace, sub_) { check_case("sub_", case_sub_, -0.5); }
Test(autograd_inplace, mul_) { check_case("mul_", case_mul_, -0.5); }
Test(autograd_inplace, div_) { check_case("div_", case_div_, 1.0); }
Test(autograd_inplace, add_scalar_and_mul_scalar_) { check_case("scalars", case_scalars_, -0.5); }
Test(autograd_inplace, fill_) { check_case("fill_", case_fill_, -0.5); }
Test(autograd_inplace, copy_broadcast) { check_case("copy_", case_copy_, -0.5); }
Test(autograd_inplace, self_without_grad_takes_the_history) {
  check_case("plain self", case_plain_self, -0.5);
}
Test(autograd_inplace, broadcast_argument) { check_case("broadcast", case_broadcast, -0.5); }

Test(autograd_inplace, leaf_requiring_grad_is_refused) {
  dt_tensor *a = leaf(2, (int64_t[]){4, 3}, 0), *b = leaf(2, (int64_t[]){4, 3}, 0);
  cr_assert_eq(dt_add_(a, b), DT_ERR_INVALID);
  const char *msg = dt_last_error();
  cr_assert(strstr(msg, "add_.Tensor") && strstr(msg, "leaf") && strstr(msg, "[4, 3]"), "%s", msg);
  cr_assert_eq(dt_fill_(a, 0.0), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "fill_.Scalar"), "%s", dt_last_error());
  /* Nothing was written. */
  dt_tensor *g = NULL;
  OK(dt_tensor_grad(a, &g));
  cr_assert_null(g);
  /* Under no_grad it is an update, as an optimizer step. */
  bool prev = dt_grad_mode_set(false);
  OK(dt_add_(a, b));
  dt_grad_mode_set(prev);
  cr_assert(dt_tensor_is_leaf(a) && dt_tensor_requires_grad(a));
  dt_tensor_release(a);
  dt_tensor_release(b);
}

/* In-place ops on views of a tensor that requires grad: tests/test_autograd_inplace_view.c. */

/* A value saved for backward and then modified by a recorded in-place op fails the backward
 * naming the op, as PyTorch's version counter check; a value nobody saved may be modified. */
Test(autograd_inplace, saved_value_modified_fails_backward) {
  dt_tensor *a = leaf(2, (int64_t[]){4, 3}, 0), *y = NULL, *z = NULL, *loss = NULL;
  OK(dt_mul_scalar(a, 2.0, &y));
  OK(dt_mul(y, y, &z)); /* saves y */
  OK(dt_add_scalar_(y, 1.0));
  OK(dt_sum(z, &loss));
  cr_assert_eq(dt_backward(loss, NULL), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "mul.Tensor") && strstr(dt_last_error(), "modified in place"),
            "%s", dt_last_error());
  dt_tensor_release(loss);
  dt_tensor_release(z);
  /* exp saves its output: modifying the output fails too. */
  dt_tensor *e = NULL;
  OK(dt_exp(a, &e));
  OK(dt_mul_scalar_(e, 3.0));
  OK(dt_sum(e, &loss));
  cr_assert_eq(dt_backward(loss, NULL), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "output 0 of exp"), "%s", dt_last_error());
  dt_tensor_release(loss);
  dt_tensor_release(e);
  /* add saves nothing it reads: y + 1 modified in place, then backward is fine (grad 2). */
  dt_tensor *s = NULL, *g = NULL;
  OK(dt_add_scalar(y, 0.0, &s));
  OK(dt_mul_scalar_(s, 1.0));
  OK(dt_sum(s, &loss));
  OK(dt_backward(loss, NULL));
  OK(dt_tensor_grad(a, &g));
  double got[12];
  OK(dt_tensor_to_doubles(g, got, 12));
  for (int i = 0; i < 12; i++) cr_assert_float_eq(got[i], 2.0, 1e-12);
  dt_tensor_release(g);
  dt_tensor_release(loss);
  dt_tensor_release(s);
  dt_tensor_release(y);
  dt_tensor_release(a);
  cr_assert_eq(dt_autograd_live_nodes(), 0);
}

/* retain_grad follows the rebased history: the kept gradient is the one after the op. */
Test(autograd_inplace, retain_grad_after_rebase) {
  dt_tensor *a = leaf(1, (int64_t[]){3}, 0), *y = NULL, *loss = NULL, *g = NULL;
  OK(dt_mul_scalar(a, 2.0, &y));
  OK(dt_tensor_retain_grad(y));
  OK(dt_mul_scalar_(y, 3.0));
  OK(dt_sum(y, &loss));
  OK(dt_backward(loss, NULL));
  OK(dt_tensor_grad(y, &g));
  double got[3];
  OK(dt_tensor_to_doubles(g, got, 3));
  for (int i = 0; i < 3; i++) cr_assert_float_eq(got[i], 1.0, 1e-12);
  dt_tensor_release(g);
  OK(dt_tensor_grad(a, &g));
  OK(dt_tensor_to_doubles(g, got, 3));
  for (int i = 0; i < 3; i++) cr_assert_float_eq(got[i], 6.0, 1e-12);
  dt_tensor_release(g);
  dt_tensor_release(loss);
  dt_tensor_release(y);
  dt_tensor_release(a);
}

/* ---- Distributed (threads backend, 2 ranks) -------------------------------------------- */

/* y = 2 x (Shard(0), uneven), y.mul_(w), y.add_(w), loss = sum(y * y): with
 * y = 2 x w + w, d/dx = 2 y 2 w, d/dw = 2 y (2 x + 1). */
static dt_status rank_inplace(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){RANKS}, NULL, &mesh));
  dt_tensor *x = NULL, *w = NULL, *y = NULL, *yy = NULL, *loss = NULL;
  RANK_OK(dist_leaf(mesh, X, &x));
  RANK_OK(dist_leaf(mesh, W, &w));
  RANK_OK(dt_mul_scalar(x, 2.0, &y));
  RANK_OK(dt_mul_(y, w));
  RANK_OK(dt_add_(y, w));
  RANK_OK(dt_mul(y, y, &yy));
  RANK_OK(dt_sum(yy, &loss));
  RANK_OK(dt_backward(loss, NULL));
  double gx[15], gw[15];
  for (int i = 0; i < 15; i++) {
    double yv = 2 * X[i] * W[i] + W[i];
    gx[i] = 2 * yv * 2 * W[i];
    gw[i] = 2 * yv * (2 * X[i] + 1);
  }
  RANK_OK(check_dist_grad("x.grad", x, gx));
  RANK_OK(check_dist_grad("w.grad", w, gw));
  RANK_CHECK(dt_add_(x, w) == DT_ERR_INVALID, "in place on a distributed leaf");
  dt_tensor_release(loss);
  dt_tensor_release(yy);
  dt_tensor_release(y);
  dt_tensor_release(w);
  dt_tensor_release(x);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(autograd_inplace, distributed_on_two_ranks) { SPAWN_OK(RANKS, rank_inplace, NULL); }
