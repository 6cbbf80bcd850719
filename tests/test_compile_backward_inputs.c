/* dt_compile with options.backward on unusual inputs: the same tensor as both inputs (and
 * twice, accumulating), inputs that do not require grad, grad mode off, wrong counts and
 * NULLs, a function that fails while tracing (nothing left behind). */
#include <criterion/criterion.h>
#include <limits.h>

#include "comm_helpers.h"
#include "reference.h"
#include "value_helpers.h"

/* ---- dt_compile with options.backward: unusual inputs -------------------------------------- */

/* loss = sum(in[0] * in[1]) */
static dt_status dot_fn(void *user, int n_in, dt_tensor *const *in, int n_out, dt_tensor **out) {
  (void)user, (void)n_in, (void)n_out;
  dt_tensor *p = NULL;
  dt_status st = dt_mul(in[0], in[1], &p);
  if (!st) st = dt_sum(p, &out[0]);
  dt_tensor_release(p);
  return st;
}

static dt_status failing_fn(void *user, int n_in, dt_tensor *const *in, int n_out,
                            dt_tensor **out) {
  (void)user, (void)n_in, (void)n_out, (void)in, (void)out;
  dt_tensor *bad = NULL;
  return dt_mm(in[0], in[1], &bad); /* 1-D: a shape error */
}

Test(compile_backward_inputs, compile_backward_unusual_inputs) {
  int64_t n = 4, before = dt_autograd_live_nodes();
  dt_compile_options opts = {.backward = true};
  dt_compiled *c = NULL;
  cr_assert_eq(dt_compile(dot_fn, NULL, 2, 0, &opts, &c), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "dt_compile"), "%s", dt_last_error());
  OK(dt_compile(dot_fn, NULL, 2, 1, &opts, &c));
  dt_tensor *a = leaf_f64(n, 0.5), *out = NULL;
  /* The same tensor as both inputs: loss = sum(a^2), grad 2a, as eager. */
  dt_tensor *in[2] = {a, a};
  OK(dt_compiled_call(c, 2, in, 1, &out));
  cr_assert(fabs(((double *)dt_tensor_data(out))[0] - (0.25 + 0.5625 + 1 + 1.5625)) < 1e-12);
  dt_tensor_release(out);
  out = NULL;
  assert_grad(a, (double[]){1.0, 1.5, 2.0, 2.5}, n, "compiled sum(a * a)");
  /* Twice: accumulates. */
  OK(dt_compiled_call(c, 2, in, 1, &out));
  dt_tensor_release(out);
  out = NULL;
  assert_grad(a, (double[]){2.0, 3.0, 4.0, 5.0}, n, "compiled twice");
  /* Inputs that do not require grad: out[0] does not require grad, an error naming the call. */
  dt_tensor *x = NULL;
  OK(dt_ones(1, &n, DT_F64, &x));
  dt_tensor *plain[2] = {x, x};
  dt_status st = dt_compiled_call(c, 2, plain, 1, &out);
  cr_assert_neq(st, DT_OK, "no input requires grad, backward accepted");
  cr_assert(strstr(dt_last_error(), "dt_compiled_call"), "%s", dt_last_error());
  cr_assert_null(out);
  /* Grad mode off. */
  bool mode = dt_grad_mode_set(false);
  st = dt_compiled_call(c, 2, in, 1, &out);
  dt_grad_mode_set(mode);
  cr_assert_eq(st, DT_ERR_INVALID, "grad mode off: %s", dt_last_error());
  /* Wrong counts and NULLs. */
  cr_assert_eq(dt_compiled_call(c, 1, in, 1, &out), DT_ERR_INVALID);
  cr_assert_eq(dt_compiled_call(c, 2, (dt_tensor *[]){a, NULL}, 1, &out), DT_ERR_INVALID);
  cr_assert_eq(dt_compiled_call(NULL, 2, in, 1, &out), DT_ERR_INVALID);
  dt_compiled_destroy(c);
  c = NULL;
  /* A function that fails while tracing: its error comes back, nothing is left. */
  OK(dt_compile(failing_fn, NULL, 2, 1, &opts, &c));
  st = dt_compiled_call(c, 2, in, 1, &out);
  cr_assert_eq(st, DT_ERR_SHAPE, "%s: %s", dt_status_string(st), dt_last_error());
  cr_assert_null(out);
  dt_compiled_destroy(c);
  dt_tensor_release(x);
  dt_tensor_release(a);
  cr_assert_eq(dt_autograd_live_nodes(), before, "%lld nodes left",
               (long long)(dt_autograd_live_nodes() - before));
}
