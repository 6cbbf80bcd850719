/* dt_compile with options.backward (issue 14): the joint forward+backward graph of a training
 * step. A 2-layer MLP with a mean-squared-error loss (mean of (pred - y)^2), its four
 * parameters inputs that require grad, compiled with a dynamic batch: at three batch sizes
 * the compiled step's loss and every .grad equal eager's (forward, then dt_backward) bitwise,
 * with one compile and no recompile; a second step accumulates .grad as eager does; a loss
 * with more than one element is refused; relu's mask multiply with special values. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "compile_helpers.h"

static dt_tensor *ramp(int ndim, const int64_t *shape, int salt) {
  dt_tensor *t = ramp_f32(ndim, shape, salt);
  cr_assert_not_null(t);
  return t;
}

/* in: x [B, 4], y [B, 3], w1 [8, 4], b1 [8], w2 [3, 8], b2 [3]; out: the loss. */
static dt_status mlp_step(void *user, int n_in, dt_tensor *const *in, int n_out, dt_tensor **out) {
  (void)user, (void)n_in, (void)n_out;
  dt_tensor *h = NULL, *a = NULL, *p = NULL, *d = NULL, *sq = NULL;
  dt_status st = dt_linear(in[0], in[2], in[3], &h);
  if (!st) st = dt_relu(h, &a);
  if (!st) st = dt_linear(a, in[4], in[5], &p);
  if (!st) st = dt_sub(p, in[1], &d);
  if (!st) st = dt_mul(d, d, &sq);
  if (!st) st = dt_mean(sq, &out[0]);
  dt_tensor_release(h);
  dt_tensor_release(a);
  dt_tensor_release(p);
  dt_tensor_release(d);
  dt_tensor_release(sq);
  return st;
}

typedef struct params {
  dt_tensor *t[4];
} params;

static params make_params(void) {
  static const int64_t shapes[4][2] = {{8, 4}, {8, 0}, {3, 8}, {3, 0}};
  params ps;
  for (int k = 0; k < 4; k++) {
    ps.t[k] = ramp(shapes[k][1] ? 2 : 1, shapes[k], 3 + k);
    cr_assert_eq(dt_tensor_set_requires_grad(ps.t[k], true), DT_OK);
  }
  return ps;
}

static void free_params(params *ps) {
  for (int k = 0; k < 4; k++) dt_tensor_release(ps->t[k]);
}

/* Eager: the loss and the grads, then both steps compared. */
static void check_step(dt_compiled *c, params *eager, params *compiled, int64_t batch, int salt) {
  int64_t xs[2] = {batch, 4}, ys[2] = {batch, 3};
  dt_tensor *x = ramp(2, xs, salt), *y = ramp(2, ys, salt + 1);
  dt_tensor *ein[6] = {x, y, eager->t[0], eager->t[1], eager->t[2], eager->t[3]};
  dt_tensor *cin[6] = {x, y, compiled->t[0], compiled->t[1], compiled->t[2], compiled->t[3]};
  dt_tensor *eloss = NULL, *closs = NULL;
  cr_assert_eq(mlp_step(NULL, 6, ein, 1, &eloss), DT_OK);
  cr_assert_eq(dt_backward(eloss, NULL), DT_OK);
  cr_assert_eq(dt_compiled_call(c, 6, cin, 1, &closs), DT_OK, "%s", dt_last_error());
  cr_assert(!dt_tensor_requires_grad(closs), "the compiled loss comes back detached");
  cr_assert(bitwise_equal(eloss, closs), "loss at batch %lld", (long long)batch);
  for (int k = 0; k < 4; k++) {
    dt_tensor *eg = NULL, *cg = NULL;
    cr_assert_eq(dt_tensor_grad(eager->t[k], &eg), DT_OK);
    cr_assert_eq(dt_tensor_grad(compiled->t[k], &cg), DT_OK);
    cr_assert(cg != NULL, "param %d has a grad", k);
    cr_assert(bitwise_equal(eg, cg), "grad of param %d at batch %lld", k, (long long)batch);
    dt_tensor_release(eg);
    dt_tensor_release(cg);
  }
  dt_tensor_release(eloss);
  dt_tensor_release(closs);
  dt_tensor_release(x);
  dt_tensor_release(y);
}

Test(compile_backward, mlp_mse_three_batches_equal_eager) {
  params eager = make_params(), compiled = make_params();
  dt_compile_mark marks[2] = {{0, 0, true}, {1, 0, true}};
  dt_compile_options o = {.n_marks = 2, .marks = marks, .backward = true};
  dt_compiled *c = NULL;
  cr_assert_eq(dt_compile(mlp_step, NULL, 6, 1, &o, &c), DT_OK);
  const int64_t batches[3] = {5, 2, 17};
  for (int b = 0; b < 3; b++) {
    /* Fresh .grad each step (zero_grad to None), as a training loop does. */
    for (int k = 0; k < 4; k++) {
      cr_assert_eq(dt_tensor_zero_grad(eager.t[k], true), DT_OK);
      cr_assert_eq(dt_tensor_zero_grad(compiled.t[k], true), DT_OK);
    }
    check_step(c, &eager, &compiled, batches[b], b);
  }
  /* Without zeroing: the gradients accumulate (old + new) in both. */
  check_step(c, &eager, &compiled, 9, 7);
  dt_compile_stats s;
  cr_assert_eq(dt_compiled_stats(c, &s), DT_OK);
  cr_assert_eq(s.compiles, 1);
  cr_assert_eq(s.recompiles, 0, "reason: %s", dt_compiled_recompile_reason(c, 0));
  char *text = NULL;
  cr_assert_eq(dt_compiled_to_string(c, 0, &text), DT_OK);
  cr_assert(strstr(text, "matmul") != NULL, "the backward's matrix products are in the graph");
  dt_free(text);
  dt_compiled_destroy(c);
  free_params(&eager);
  free_params(&compiled);
  cr_assert_eq(dt_autograd_live_nodes(), 0);
}

static dt_status elementwise(void *user, int n_in, dt_tensor *const *in, int n_out,
                             dt_tensor **out) {
  (void)user, (void)n_in, (void)n_out;
  return dt_mul(in[0], in[0], &out[0]);
}

Test(compile_backward, refuses_a_loss_of_several_elements) {
  int64_t s[1] = {3};
  dt_tensor *x = ramp(1, s, 1), *out = NULL;
  cr_assert_eq(dt_tensor_set_requires_grad(x, true), DT_OK);
  dt_compile_options o = {.backward = true};
  dt_compiled *c = NULL;
  cr_assert_eq(dt_compile(elementwise, NULL, 1, 1, &o, &c), DT_OK);
  cr_assert_eq(dt_compiled_call(c, 1, &x, 1, &out), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "one element") != NULL, "%s", dt_last_error());
  cr_assert_null(out);
  dt_tensor *g = NULL;
  cr_assert_eq(dt_tensor_grad(x, &g), DT_OK);
  cr_assert_null(g, "no gradient left behind");
  dt_compiled_destroy(c);
  cr_assert_eq(dt_compile(elementwise, NULL, 1, 0, &o, &c), DT_ERR_INVALID);
  dt_tensor_release(x);
}

/* sum(relu(w * k) * y) with k all ones: w's gradient is (y * (relu(w k) > 0)) * k, whose inner
 * product is the mask multiply the compiled step runs as one vectorized loop (it is rewritten
 * only where its value does not leave the graph, hence k). Signed zeros, infinities and NaN on
 * both sides, 33 elements (vector blocks and a tail), two steps: the compiled .grad equals
 * eager's bitwise and a naive loop's. */
static dt_status relu_weighted(void *user, int n_in, dt_tensor *const *in, int n_out,
                               dt_tensor **out) {
  (void)user, (void)n_in, (void)n_out;
  dt_tensor *s = NULL, *a = NULL, *p = NULL;
  dt_status st = dt_mul(in[1], in[2], &s);
  if (!st) st = dt_relu(s, &a);
  if (!st) st = dt_mul(a, in[0], &p);
  if (!st) st = dt_sum(p, &out[0]);
  dt_tensor_release(s);
  dt_tensor_release(a);
  dt_tensor_release(p);
  return st;
}

Test(compile_backward, relu_mask_with_special_values_equals_eager) {
  enum { N = 33 };
  float wv[N], yv[N];
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-38f, -1e-38f, 2.5f, -3.0f};
  for (int i = 0; i < N; i++) {
    wv[i] = specials[i % 9];
    yv[i] = i % 4 == 0 ? INFINITY : i % 7 == 0 ? NAN : i % 5 == 0 ? -0.0f : (float)(i - 16) / 8;
  }
  int64_t shape[2] = {3, 11};
  dt_tensor *y = NULL, *we = NULL, *wc = NULL, *k = NULL;
  cr_assert_eq(dt_ones(2, shape, DT_F32, &k), DT_OK);
  cr_assert_eq(dt_from_data(yv, 2, shape, DT_F32, &y), DT_OK);
  cr_assert_eq(dt_from_data(wv, 2, shape, DT_F32, &we), DT_OK);
  cr_assert_eq(dt_from_data(wv, 2, shape, DT_F32, &wc), DT_OK);
  cr_assert_eq(dt_tensor_set_requires_grad(we, true), DT_OK);
  cr_assert_eq(dt_tensor_set_requires_grad(wc, true), DT_OK);
  dt_tensor *eloss = NULL, *closs = NULL, *eg = NULL, *cg = NULL;
  /* Two steps each: the first compiled call traces (and runs eagerly), the second runs the
   * planned variant with the rewrite; .grad accumulates over both. */
  for (int step = 0; step < 2; step++) {
    dt_tensor_release(eloss);
    eloss = NULL;
    cr_assert_eq(relu_weighted(NULL, 3, (dt_tensor *[]){y, we, k}, 1, &eloss), DT_OK);
    cr_assert_eq(dt_backward(eloss, NULL), DT_OK);
  }
  dt_compile_options o = {.backward = true};
  dt_compiled *c = NULL;
  cr_assert_eq(dt_compile(relu_weighted, NULL, 3, 1, &o, &c), DT_OK);
  for (int step = 0; step < 2; step++) {
    dt_tensor_release(closs);
    closs = NULL;
    cr_assert_eq(dt_compiled_call(c, 3, (dt_tensor *[]){y, wc, k}, 1, &closs), DT_OK, "%s",
                 dt_last_error());
  }
  cr_assert_eq(dt_tensor_grad(we, &eg), DT_OK);
  cr_assert_eq(dt_tensor_grad(wc, &cg), DT_OK);
  cr_assert(bitwise_equal(eg, cg), "w's gradient");
  cr_assert(bitwise_equal(eloss, closs), "the loss");
  const float *g = dt_tensor_data(cg);
  for (int i = 0; i < N; i++) {
    float relu = wv[i] > 0 ? wv[i] : wv[i] != wv[i] ? wv[i] : 0.0f;
    float once = yv[i] * (relu > 0 ? 1.0f : 0.0f) * 1.0f, want = once + once;
    cr_assert(memcmp(&g[i], &want, sizeof want) == 0 || (want != want && g[i] != g[i]),
              "element %d: %g, expected %g", i, (double)g[i], (double)want);
  }
  dt_tensor_release(eg);
  dt_tensor_release(cg);
  dt_tensor_release(eloss);
  dt_tensor_release(closs);
  dt_compiled_destroy(c);
  dt_tensor_release(y);
  dt_tensor_release(we);
  dt_tensor_release(wc);
  dt_tensor_release(k);
}
