/* A finite-difference gradient check for tests: random float64 leaves (odd sizes,
 * non-contiguous on request), loss = sum(f(x) * weights) with random weights, analytic
 * gradients from dt_backward compared with central differences element by element; inputs
 * flagged CONSTANT (non-differentiable) must get no gradient. The one harness of
 * test_autograd.c and test_autograd_ops.c. */
#ifndef DT_TEST_GRADCHECK_H
#define DT_TEST_GRADCHECK_H

#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "dtensor/dtensor.h"

#define OK(call) cr_assert_eq((call), DT_OK, "%s: %s", #call, dt_last_error())

static uint64_t gc_state = 88172645463325252ull;
static double gc_uniform(void) { /* in [0, 1) */
  gc_state = gc_state * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(gc_state >> 11) / 9007199254740992.0;
}

/* POSITIVE: values in [0.5, 1.5) instead of [-1, 1). NONCONTIG: a transposed view (2+ dims)
 * or a stride-2 slice (1-D). CONSTANT: the input does not require grad and is not checked
 * (running statistics, say). */
enum { PLAIN = 0, POSITIVE = 1, NONCONTIG = 2, CONSTANT = 4 };

static dt_tensor *gc_input(int ndim, const int64_t *shape, int flags) {
  int64_t numel = 1;
  for (int i = 0; i < ndim; i++) numel *= shape[i];
  dt_tensor *t = NULL;
  if ((flags & NONCONTIG) && ndim >= 2) {
    int64_t swapped[8];
    memcpy(swapped, shape, sizeof(int64_t) * (size_t)ndim);
    swapped[ndim - 1] = shape[ndim - 2];
    swapped[ndim - 2] = shape[ndim - 1];
    dt_tensor *base = NULL;
    OK(dt_zeros(ndim, swapped, DT_F64, &base));
    OK(dt_transpose(base, -1, -2, &t));
    dt_tensor_release(base);
  } else if ((flags & NONCONTIG) && ndim == 1) {
    dt_tensor *base = NULL;
    OK(dt_zeros(1, (int64_t[]){2 * shape[0]}, DT_F64, &base));
    OK(dt_slice(base, 0, 0, 2 * shape[0], 2, &t));
    dt_tensor_release(base);
  } else {
    OK(dt_zeros(ndim, shape, DT_F64, &t));
  }
  int64_t index[8] = {0};
  for (int64_t e = 0; e < numel; e++) {
    double u = gc_uniform();
    OK(dt_tensor_set(t, index, (flags & POSITIVE) ? 0.5 + u : 2.0 * u - 1.0));
    for (int d = ndim - 1; d >= 0; d--) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
  bool can_be_strided =
      ndim == 1 ? shape[0] > 1 : ndim >= 2 && shape[ndim - 1] > 1 && shape[ndim - 2] > 1;
  if ((flags & NONCONTIG) && can_be_strided) cr_assert(!dt_tensor_is_contiguous(t));
  return t;
}

static void gc_unflatten(const dt_tensor *t, int64_t e, int64_t *index) {
  for (int d = dt_tensor_ndim(t) - 1; d >= 0; d--) {
    int64_t size = dt_tensor_size(t, d);
    index[d] = e % size;
    e /= size;
  }
}

typedef dt_status (*gc_forward_fn)(dt_tensor **x, dt_tensor **out);

typedef struct grad_case {
  const char *name;
  gc_forward_fn fn;
  int n_inputs;
  int ndim[5];
  int64_t shape[5][4];
  int flags[5];
  double eps, tol; /* 0: 1e-6 and 1e-6 */
} grad_case;

static dt_status gc_loss(const grad_case *c, dt_tensor **x, dt_tensor *weights, dt_tensor **loss) {
  dt_tensor *y = NULL, *yw = NULL;
  dt_status st = c->fn(x, &y);
  if (st) return st;
  st = dt_mul(y, weights, &yw);
  dt_tensor_release(y);
  if (!st) st = dt_sum(yw, loss);
  dt_tensor_release(yw);
  return st;
}

static double gc_scalar(dt_tensor *t) {
  double v = 0;
  OK(dt_tensor_to_doubles(t, &v, 1));
  return v;
}

static void grad_check(const grad_case *c) {
  double eps = c->eps > 0 ? c->eps : 1e-6, tol = c->tol > 0 ? c->tol : 1e-6;
  dt_tensor *x[5] = {NULL};
  for (int i = 0; i < c->n_inputs; i++) {
    x[i] = gc_input(c->ndim[i], c->shape[i], c->flags[i]);
    if (!(c->flags[i] & CONSTANT)) OK(dt_tensor_set_requires_grad(x[i], true));
  }
  dt_tensor *y = NULL, *weights = NULL, *loss = NULL;
  OK(c->fn(x, &y));
  cr_assert(dt_tensor_requires_grad(y), "%s: output does not require grad", c->name);
  weights = gc_input(dt_tensor_ndim(y), dt_tensor_shape(y), PLAIN);
  if (dt_tensor_dtype(y) != DT_F64) {
    dt_tensor *cast = NULL;
    OK(dt_to(weights, dt_tensor_dtype(y), &cast));
    dt_tensor_release(weights);
    weights = cast;
  }
  dt_tensor_release(y);
  OK(gc_loss(c, x, weights, &loss));
  OK(dt_backward(loss, NULL));
  dt_tensor_release(loss);

  bool prev = dt_grad_mode_set(false);
  for (int i = 0; i < c->n_inputs; i++) {
    if (c->flags[i] & CONSTANT) {
      dt_tensor *g = NULL;
      OK(dt_tensor_grad(x[i], &g));
      cr_assert_null(g, "%s: constant input %d got a gradient", c->name, i);
      continue;
    }
    dt_tensor *g = NULL;
    OK(dt_tensor_grad(x[i], &g));
    cr_assert_not_null(g, "%s: input %d has no gradient", c->name, i);
    int64_t n = dt_tensor_numel(x[i]);
    cr_assert_eq(dt_tensor_numel(g), n, "%s: grad of input %d has the wrong size", c->name, i);
    cr_assert_eq(dt_tensor_ndim(g), dt_tensor_ndim(x[i]), "%s: grad %d ndim", c->name, i);
    for (int d = 0; d < dt_tensor_ndim(g); d++) {
      cr_assert_eq(dt_tensor_size(g, d), dt_tensor_size(x[i], d), "%s: grad %d dim %d", c->name, i,
                   d);
    }
    for (int64_t e = 0; e < n; e++) {
      int64_t index[8];
      gc_unflatten(x[i], e, index);
      double orig, analytic;
      OK(dt_tensor_get(x[i], index, &orig));
      OK(dt_tensor_get(g, index, &analytic));
      OK(dt_tensor_set(x[i], index, orig + eps));
      OK(gc_loss(c, x, weights, &loss));
      double up = gc_scalar(loss);
      dt_tensor_release(loss);
      OK(dt_tensor_set(x[i], index, orig - eps));
      OK(gc_loss(c, x, weights, &loss));
      double down = gc_scalar(loss);
      dt_tensor_release(loss);
      OK(dt_tensor_set(x[i], index, orig));
      double numeric = (up - down) / (2 * eps);
      cr_assert(fabs(numeric - analytic) <= tol * (1 + fabs(numeric)),
                "%s: d/d input %d element %lld: analytic %.10g, numeric %.10g", c->name, i,
                (long long)e, analytic, numeric);
    }
    dt_tensor_release(g);
  }
  dt_grad_mode_set(prev);
  for (int i = 0; i < c->n_inputs; i++) dt_tensor_release(x[i]);
  dt_tensor_release(weights);
  cr_assert_eq(dt_autograd_live_nodes(), 0, "%s: nodes leaked", c->name);
}

#endif /* DT_TEST_GRADCHECK_H */
