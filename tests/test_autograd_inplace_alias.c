/* In-place autograd with aliased arguments: y.op_(y) for mul, add, sub, div and copy,
 * a write after a linear op that saved nothing, the other argument a view of self, a node
 * freed without backward, and bad arguments. Gradients against closed forms. */
#include <criterion/criterion.h>
#include <limits.h>

#include "comm_helpers.h"
#include "reference.h"
#include "value_helpers.h"

/* ---- In-place autograd with aliased arguments -------------------------------------------- */

/* y = 1.5 a; y op_= y; loss = sum(y). */
typedef dt_status (*self_op)(dt_tensor *y);
static dt_status self_mul(dt_tensor *y) { return dt_mul_(y, y); }
static dt_status self_add(dt_tensor *y) { return dt_add_(y, y); }
static dt_status self_sub(dt_tensor *y) { return dt_sub_(y, y); }
static dt_status self_div(dt_tensor *y) { return dt_div_(y, y); }
static dt_status self_copy(dt_tensor *y) { return dt_copy_(y, y); }

/* dy is NULL when the formula reads the argument the op overwrote (mul_, div_: PyTorch saves
 * `other`, which is self, and its version check fails): the backward must then fail with a
 * message naming the op. */
static void check_self_op(self_op op, double (*dy)(double a), const char *what) {
  int64_t n = 4;
  dt_tensor *a = leaf_f64(n, 0.5), *y = NULL, *loss = NULL;
  int64_t before = dt_autograd_live_nodes();
  OK(dt_mul_scalar(a, 1.5, &y));
  OK(op(y));
  OK(dt_sum(y, &loss));
  if (!dy) {
    cr_assert_eq(dt_backward(loss, NULL), DT_ERR_INVALID, "%s: backward accepted", what);
    cr_assert(strstr(dt_last_error(), "modified in place"), "%s", dt_last_error());
  } else {
    OK(dt_backward(loss, NULL));
    double want[4];
    for (int i = 0; i < 4; i++) want[i] = dy(0.5 + 0.25 * i);
    assert_grad(a, want, n, what);
    /* a second backward through the freed graph is an error naming dt_backward */
    cr_assert_eq(dt_backward(loss, NULL), DT_ERR_INVALID, "%s: second backward accepted", what);
    cr_assert(strstr(dt_last_error(), "dt_backward"), "%s", dt_last_error());
    assert_grad(a, want, n, "after the refused second backward");
  }
  dt_tensor_release(loss);
  dt_tensor_release(y);
  dt_tensor_release(a);
  cr_assert_eq(dt_autograd_live_nodes(), before, "%s: nodes left", what);
}

static double d_add(double a) {
  (void)a;
  return 3.0;
}
static double d_zero(double a) {
  (void)a;
  return 0.0;
}
static double d_copy(double a) {
  (void)a;
  return 1.5;
}

Test(autograd_inplace_alias, inplace_mul_self) { check_self_op(self_mul, NULL, "y.mul_(y)"); }
Test(autograd_inplace_alias, inplace_add_self) { check_self_op(self_add, d_add, "y.add_(y)"); }
Test(autograd_inplace_alias, inplace_sub_self) { check_self_op(self_sub, d_zero, "y.sub_(y)"); }
Test(autograd_inplace_alias, inplace_div_self) { check_self_op(self_div, NULL, "y.div_(y)"); }
Test(autograd_inplace_alias, inplace_copy_self) { check_self_op(self_copy, d_copy, "y.copy_(y)"); }

/* z = y + w, then w modified in place: add's gradient reads neither value, so the backward
 * still runs (PyTorch too); z = y * w, then w modified: an error. */
Test(autograd_inplace_alias, inplace_after_a_linear_op_reads_nothing) {
  int64_t n = 4;
  dt_tensor *a = leaf_f64(n, 0.5), *b = leaf_f64(n, 2.0), *y = NULL, *w = NULL, *z = NULL;
  dt_tensor *loss = NULL, *p = NULL, *loss2 = NULL;
  OK(dt_mul_scalar(a, 1.5, &y));
  OK(dt_mul_scalar(b, 2.0, &w));
  OK(dt_add(y, w, &z));
  OK(dt_mul(y, w, &p));
  OK(dt_add_scalar_(w, 1.0));
  OK(dt_sum(z, &loss));
  OK(dt_backward(loss, NULL));
  assert_grad(a, (double[]){1.5, 1.5, 1.5, 1.5}, n, "d sum(1.5 a + 2 b) / da");
  assert_grad(b, (double[]){2, 2, 2, 2}, n, "d sum(1.5 a + 2 b) / db");
  OK(dt_sum(p, &loss2));
  cr_assert_eq(dt_backward(loss2, NULL), DT_ERR_INVALID, "mul after its input changed");
  cr_assert(strstr(dt_last_error(), "mul.Tensor") && strstr(dt_last_error(), "modified in place"),
            "%s", dt_last_error());
  dt_tensor_release(loss2);
  dt_tensor_release(p);
  dt_tensor_release(loss);
  dt_tensor_release(z);
  dt_tensor_release(w);
  dt_tensor_release(y);
  dt_tensor_release(b);
  dt_tensor_release(a);
}

/* The other argument is a view of self (y.mul_(y[0:1])): mul_ saves it and the write changes
 * it, so the backward fails as PyTorch's does; nothing should be leaked whether or not a
 * backward runs: narrow's node kept y's handle, whose history then led back to it
 * (y -> mul_ -> narrow -> y); the rebase now swaps that handle for a detached alias. */
Test(autograd_inplace_alias, inplace_mul_by_a_view_of_self) {
  int64_t n = 4, before = dt_autograd_live_nodes();
  for (int run_backward = 0; run_backward < 2; run_backward++) {
    dt_tensor *a = leaf_f64(n, 0.5), *y = NULL, *v = NULL, *loss = NULL;
    OK(dt_mul_scalar(a, 1.5, &y));
    OK(dt_narrow(y, 0, 0, 1, &v)); /* v = y[0:1], broadcast over y */
    OK(dt_mul_(y, v));
    double *got = ref_values(y); /* y_i = 1.5 a_i * 1.5 a_0 */
    for (int i = 0; i < 4; i++)
      cr_assert(fabs(got[i] - 2.25 * 0.5 * (0.5 + 0.25 * i)) < 1e-12, "y[%d] = %g", i, got[i]);
    free(got);
    OK(dt_sum(y, &loss));
    if (run_backward) {
      cr_assert_eq(dt_backward(loss, NULL), DT_ERR_INVALID);
      cr_assert(strstr(dt_last_error(), "mul_.Tensor"), "%s", dt_last_error());
    }
    dt_tensor_release(loss);
    dt_tensor_release(v);
    dt_tensor_release(y);
    dt_tensor_release(a);
    cr_assert_eq(dt_autograd_live_nodes(), before, "backward %d: %lld nodes left", run_backward,
                 (long long)(dt_autograd_live_nodes() - before));
  }
}

/* y.add_(y) with no backward at all frees its node. */
Test(autograd_inplace_alias, inplace_self_alias_without_backward_frees_the_node) {
  int64_t n = 4, before = dt_autograd_live_nodes();
  dt_tensor *a = leaf_f64(n, 0.5), *y = NULL;
  OK(dt_mul_scalar(a, 1.5, &y));
  OK(dt_add_(y, y));
  OK(dt_mul_(y, y));
  dt_tensor_release(y);
  dt_tensor_release(a);
  cr_assert_eq(dt_autograd_live_nodes(), before, "%lld nodes left",
               (long long)(dt_autograd_live_nodes() - before));
}

Test(autograd_inplace_alias, inplace_bad_arguments) {
  int64_t n = 3, z = 0;
  dt_tensor *a = leaf_f64(n, 0.5), *y = NULL, *i = NULL, *e = NULL;
  OK(dt_mul_scalar(a, 2.0, &y));
  cr_assert_eq(dt_add_(NULL, y), DT_ERR_INVALID);
  cr_assert_eq(dt_add_(y, NULL), DT_ERR_INVALID);
  cr_assert_eq(dt_copy_(y, NULL), DT_ERR_INVALID);
  OK(dt_zeros(1, &n, DT_I64, &i));
  /* int64 += float64 would need a cast PyTorch refuses: result type float64 into int64 */
  dt_status st = dt_add_(i, y);
  cr_assert_neq(st, DT_OK, "int64 add_ float64 accepted");
  cr_assert(strstr(dt_last_error(), "add_"), "%s", dt_last_error());
  /* 0-size */
  OK(dt_zeros(1, &z, DT_F64, &e));
  OK(dt_tensor_set_requires_grad(e, true));
  dt_tensor *e2 = NULL, *loss = NULL;
  OK(dt_mul_scalar(e, 2.0, &e2));
  OK(dt_add_(e2, e2));
  OK(dt_sum(e2, &loss));
  OK(dt_backward(loss, NULL));
  dt_tensor_release(loss);
  dt_tensor_release(e2);
  dt_tensor_release(e);
  dt_tensor_release(i);
  dt_tensor_release(y);
  dt_tensor_release(a);
}
