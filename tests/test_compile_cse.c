/* Common subexpression elimination and dead calls in a compiled variant (issue 26.5,
 * src/compile/cse.c, src/compile/fuse.c): equal calls run once and give eager's bits; a call
 * after an in-place write, a random draw and two returned values are never merged; mse's
 * training step computes its backward's mul(expand, sub) once, drops the expand and reads
 * through the reshapes to their own dims. Every dim dynamic, several sizes, one compile; values
 * against eager bitwise and naive loops. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "compile_helpers.h"

static dt_tensor *ramp(int ndim, const int64_t *shape, int salt) {
  dt_tensor *t = ramp_f32(ndim, shape, salt);
  cr_assert_not_null(t);
  return t;
}

static char *variant_text(dt_compiled *c) {
  char *text = NULL;
  cr_assert_eq(dt_compiled_to_string(c, 0, &text), DT_OK, "%s", dt_last_error());
  return text;
}

static int count_of(const char *text, const char *what) {
  int n = 0;
  for (const char *p = strstr(text, what); p; p = strstr(p + 1, what)) n++;
  return n;
}

static void assert_one_compile(dt_compiled *c) {
  dt_compile_stats stats = {0};
  cr_assert_eq(dt_compiled_stats(c, &stats), DT_OK);
  cr_assert_eq(stats.compiles, 1, "one compile, got %lld", (long long)stats.compiles);
  cr_assert_eq(stats.recompiles, 0);
}

/* exp(x * y) + exp(x * y): the product and its exp are each computed once. */
static dt_status twice(void *user, int n_in, dt_tensor *const *in, int n_out, dt_tensor **out) {
  (void)user, (void)n_in, (void)n_out;
  dt_tensor *m1 = NULL, *m2 = NULL, *e1 = NULL, *e2 = NULL;
  dt_status st = dt_mul(in[0], in[1], &m1);
  if (!st) st = dt_mul(in[0], in[1], &m2);
  if (!st) st = dt_exp(m1, &e1);
  if (!st) st = dt_exp(m2, &e2);
  if (!st) st = dt_add(e1, e2, &out[0]);
  dt_tensor *all[] = {m1, m2, e1, e2};
  for (int k = 0; k < 4; k++) dt_tensor_release(all[k]);
  return st;
}

Test(compile_cse, equal_calls_run_once_with_eager_bits) {
  dt_compiled *c = NULL;
  cr_assert_eq(dt_compile(twice, NULL, 2, 1, &(dt_compile_options){.dynamic = true}, &c), DT_OK);
  static const int64_t shapes[3][2] = {{4, 6}, {7, 3}, {2, 9}};
  for (int s = 0; s < 3; s++) {
    dt_tensor *x = ramp(2, shapes[s], 1 + s), *y = ramp(2, shapes[s], 5 + s);
    dt_tensor *in[2] = {x, y}, *got = NULL, *want = NULL;
    cr_assert_eq(dt_compiled_call(c, 2, in, 1, &got), DT_OK, "%s", dt_last_error());
    cr_assert_eq(twice(NULL, 2, in, 1, &want), DT_OK);
    cr_assert(bitwise_equal(got, want), "compiled equals eager at size %d", s);
    const float *px = dt_tensor_data(x), *py = dt_tensor_data(y), *pg = dt_tensor_data(got);
    for (int64_t i = 0; i < dt_tensor_numel(x); i++) {
      float e = expf(px[i] * py[i]);
      cr_assert_float_eq(pg[i], e + e, 1e-5f * fabsf(e + e) + 1e-6f, "element %lld", (long long)i);
    }
    dt_tensor *all[] = {x, y, got, want};
    for (int k = 0; k < 4; k++) dt_tensor_release(all[k]);
  }
  char *text = variant_text(c);
  cr_assert_eq(count_of(text, "(common subexpression)"), 2, "%s", text);
  cr_assert(strstr(text, "add.Tensor(%exp, %exp") != NULL, "%s", text);
  dt_free(text);
  assert_one_compile(c);
  dt_compiled_destroy(c);
}

/* t = transpose(c); a = exp(t); c += y; b = exp(t): the two exps read the same view node,
 * before and after a write through its base. */
static dt_status around_write(void *user, int n_in, dt_tensor *const *in, int n_out,
                              dt_tensor **out) {
  (void)user, (void)n_in, (void)n_out;
  dt_tensor *cl = NULL, *t = NULL, *a = NULL, *b = NULL;
  dt_status st = dt_clone(in[0], &cl);
  if (!st) st = dt_transpose(cl, 0, 1, &t);
  if (!st) st = dt_exp(t, &a);
  if (!st) st = dt_add_(cl, in[1]);
  if (!st) st = dt_exp(t, &b);
  if (!st) st = dt_sub(b, a, &out[0]);
  dt_tensor *all[] = {cl, t, a, b};
  for (int k = 0; k < 4; k++) dt_tensor_release(all[k]);
  return st;
}

Test(compile_cse, a_call_after_an_in_place_write_is_not_merged) {
  dt_compiled *c = NULL;
  cr_assert_eq(dt_compile(around_write, NULL, 2, 1, &(dt_compile_options){.dynamic = true}, &c),
               DT_OK);
  static const int64_t shapes[3][2] = {{3, 5}, {6, 2}, {1, 7}};
  for (int s = 0; s < 3; s++) {
    dt_tensor *x = ramp(2, shapes[s], 2 + s), *y = ramp(2, shapes[s], 9 + s);
    dt_tensor *in[2] = {x, y}, *got = NULL, *want = NULL;
    cr_assert_eq(dt_compiled_call(c, 2, in, 1, &got), DT_OK, "%s", dt_last_error());
    cr_assert_eq(around_write(NULL, 2, in, 1, &want), DT_OK);
    cr_assert(bitwise_equal(got, want), "compiled equals eager at size %d", s);
    const float *px = dt_tensor_data(x), *py = dt_tensor_data(y), *pg = dt_tensor_data(got);
    int64_t rows = shapes[s][0], cols = shapes[s][1];
    for (int64_t i = 0; i < rows; i++) {
      for (int64_t j = 0; j < cols; j++) {
        float hi = expf(px[i * cols + j] + py[i * cols + j]), e = hi - expf(px[i * cols + j]);
        cr_assert_float_eq(pg[j * rows + i], e, 1e-5f * hi + 1e-6f, "element (%lld, %lld)",
                           (long long)j, (long long)i);
      }
    }
    dt_tensor *all[] = {x, y, got, want};
    for (int k = 0; k < 4; k++) dt_tensor_release(all[k]);
  }
  char *text = variant_text(c);
  cr_assert_eq(count_of(text, "(common subexpression)"), 0, "%s", text);
  dt_free(text);
  assert_one_compile(c);
  dt_compiled_destroy(c);
}

/* Two clones of x, each filled by its own uniform_ draw: the clones look equal but are not. */
static dt_status two_draws(void *user, int n_in, dt_tensor *const *in, int n_out, dt_tensor **out) {
  (void)user, (void)n_in, (void)n_out;
  dt_tensor *c1 = NULL, *c2 = NULL;
  dt_status st = dt_clone(in[0], &c1);
  if (!st) st = dt_clone(in[0], &c2);
  if (!st) st = dt_uniform_(c1, 0.0, 1.0, 7);
  if (!st) st = dt_uniform_(c2, 0.0, 1.0, 8);
  if (!st) st = dt_sub(c1, c2, &out[0]);
  dt_tensor_release(c1);
  dt_tensor_release(c2);
  return st;
}

Test(compile_cse, random_draws_are_not_merged) {
  dt_compiled *c = NULL;
  cr_assert_eq(dt_compile(two_draws, NULL, 1, 1, &(dt_compile_options){.dynamic = true}, &c),
               DT_OK);
  static const int64_t shapes[2][2] = {{4, 8}, {5, 3}};
  for (int s = 0; s < 2; s++) {
    dt_tensor *x = ramp(2, shapes[s], 4 + s), *got = NULL, *want = NULL;
    cr_assert_eq(dt_compiled_call(c, 1, &x, 1, &got), DT_OK, "%s", dt_last_error());
    cr_assert_eq(two_draws(NULL, 1, &x, 1, &want), DT_OK);
    cr_assert(bitwise_equal(got, want), "compiled equals eager at size %d", s);
    const float *pg = dt_tensor_data(got);
    bool differ = false;
    for (int64_t i = 0; i < dt_tensor_numel(got); i++) differ |= pg[i] != 0.0f;
    cr_assert(differ, "the two draws differ");
    dt_tensor_release(x);
    dt_tensor_release(got);
    dt_tensor_release(want);
  }
  char *text = variant_text(c);
  cr_assert_eq(count_of(text, "(common subexpression)"), 0, "%s", text);
  dt_free(text);
  dt_compiled_destroy(c);
}

/* x * y returned twice: the caller gets two tensors of its own. */
static dt_status two_outputs(void *user, int n_in, dt_tensor *const *in, int n_out,
                             dt_tensor **out) {
  (void)user, (void)n_in, (void)n_out;
  dt_status st = dt_mul(in[0], in[1], &out[0]);
  if (!st) st = dt_mul(in[0], in[1], &out[1]);
  return st;
}

Test(compile_cse, returned_values_stay_distinct) {
  dt_compiled *c = NULL;
  cr_assert_eq(dt_compile(two_outputs, NULL, 2, 2, &(dt_compile_options){.dynamic = true}, &c),
               DT_OK);
  static const int64_t shapes[2][2] = {{3, 4}, {6, 5}};
  for (int s = 0; s < 2; s++) {
    dt_tensor *x = ramp(2, shapes[s], 1), *y = ramp(2, shapes[s], 2), *in[2] = {x, y};
    dt_tensor *out[2] = {NULL, NULL};
    cr_assert_eq(dt_compiled_call(c, 2, in, 2, out), DT_OK, "%s", dt_last_error());
    cr_assert(bitwise_equal(out[0], out[1]));
    float *p0 = dt_tensor_data(out[0]), *p1 = dt_tensor_data(out[1]);
    cr_assert(p0 != p1, "two outputs, two buffers");
    const float *px = dt_tensor_data(x), *py = dt_tensor_data(y);
    p0[0] = 1234.5f; /* writing one leaves the other */
    cr_assert_eq(p1[0], px[0] * py[0]);
    dt_tensor_release(x);
    dt_tensor_release(y);
    dt_tensor_release(out[0]);
    dt_tensor_release(out[1]);
  }
  dt_compiled_destroy(c);
}

/* Linear + mse: the backward's mul(expand, sub) twice (one for each side of sub * sub). */
static dt_status mse_step(void *user, int n_in, dt_tensor *const *in, int n_out, dt_tensor **out) {
  (void)user, (void)n_in, (void)n_out;
  dt_tensor *p = NULL;
  dt_status st = dt_linear(in[0], in[2], in[3], &p);
  if (!st) st = dt_mse_loss(p, in[1], DT_LOSS_MEAN, &out[0]);
  dt_tensor_release(p);
  return st;
}

Test(compile_cse, mse_backward_multiplies_once) {
  dt_tensor *we = ramp(2, (int64_t[]){3, 5}, 3), *be = ramp(1, (int64_t[]){3}, 4);
  dt_tensor *wc = ramp(2, (int64_t[]){3, 5}, 3), *bc = ramp(1, (int64_t[]){3}, 4);
  dt_tensor *params[4] = {we, be, wc, bc};
  for (int k = 0; k < 4; k++) cr_assert_eq(dt_tensor_set_requires_grad(params[k], true), DT_OK);
  dt_compile_mark marks[2] = {{.input = 0, .dim = 0, .dynamic = true},
                              {.input = 1, .dim = 0, .dynamic = true}};
  dt_compiled *c = NULL;
  cr_assert_eq(dt_compile(mse_step, NULL, 4, 1,
                          &(dt_compile_options){.n_marks = 2, .marks = marks, .backward = true},
                          &c),
               DT_OK);
  static const int64_t batches[3] = {5, 2, 9};
  for (int s = 0; s < 3; s++) {
    dt_tensor *x = ramp(2, (int64_t[]){batches[s], 5}, 6 + s);
    dt_tensor *y = ramp(2, (int64_t[]){batches[s], 3}, 8 + s);
    dt_tensor *ein[4] = {x, y, we, be}, *cin[4] = {x, y, wc, bc}, *el = NULL, *cl = NULL;
    cr_assert_eq(mse_step(NULL, 4, ein, 1, &el), DT_OK);
    cr_assert_eq(dt_backward(el, NULL), DT_OK);
    cr_assert_eq(dt_compiled_call(c, 4, cin, 1, &cl), DT_OK, "%s", dt_last_error());
    cr_assert(bitwise_equal(el, cl), "loss at batch %lld", (long long)batches[s]);
    for (int k = 0; k < 2; k++) {
      dt_tensor *eg = NULL, *cg = NULL;
      cr_assert_eq(dt_tensor_grad(params[k], &eg), DT_OK);
      cr_assert_eq(dt_tensor_grad(params[k + 2], &cg), DT_OK);
      cr_assert(bitwise_equal(eg, cg), "grad %d at batch %lld", k, (long long)batches[s]);
      dt_tensor_release(eg);
      dt_tensor_release(cg);
    }
    dt_tensor *all[] = {x, y, el, cl};
    for (int k = 0; k < 4; k++) dt_tensor_release(all[k]);
  }
  /* The bias's gradient, accumulated over the three steps, against a naive loop:
   * sum over steps and rows of 2 (p - y) / numel. */
  double want[3] = {0, 0, 0};
  const float *pw = dt_tensor_data(wc), *pb = dt_tensor_data(bc);
  for (int s = 0; s < 3; s++) {
    dt_tensor *x = ramp(2, (int64_t[]){batches[s], 5}, 6 + s);
    dt_tensor *y = ramp(2, (int64_t[]){batches[s], 3}, 8 + s);
    const float *px = dt_tensor_data(x), *py = dt_tensor_data(y);
    for (int64_t r = 0; r < batches[s]; r++) {
      for (int j = 0; j < 3; j++) {
        double p = pb[j];
        for (int i = 0; i < 5; i++) p += (double)px[r * 5 + i] * pw[j * 5 + i];
        want[j] += 2.0 * (p - py[r * 3 + j]) / (double)(batches[s] * 3);
      }
    }
    dt_tensor_release(x);
    dt_tensor_release(y);
  }
  dt_tensor *gb = NULL;
  cr_assert_eq(dt_tensor_grad(bc, &gb), DT_OK);
  const float *pg = dt_tensor_data(gb);
  for (int j = 0; j < 3; j++) cr_assert_float_eq(pg[j], want[j], 1e-5, "bias grad %d", j);
  dt_tensor_release(gb);
  char *text = variant_text(c);
  cr_assert_eq(count_of(text, "(common subexpression)"), 1, "%s", text);
  /* linear's backward reshapes the gradient and x with -1 rows: their own dims. */
  cr_assert_geq(count_of(text, "(a reshape to its own dims)"), 2, "%s", text);
  dt_free(text);
  assert_one_compile(c);
  dt_compiled_destroy(c);
  for (int k = 0; k < 4; k++) dt_tensor_release(params[k]);
}

/* -(x * expand(s) + x * expand(s)): after the merge, add(p, p) of a product by one element runs as
 * one loop (compile/fuse.c); its bits against eager's two kernels with signed zeros,
 * infinities, NaN and an overflowing doubling. */
static dt_status doubled(void *user, int n_in, dt_tensor *const *in, int n_out, dt_tensor **out) {
  (void)user, (void)n_in, (void)n_out;
  dt_tensor *e = NULL, *m1 = NULL, *m2 = NULL, *sum = NULL;
  dt_status st = dt_expand(in[1], 2, (int64_t[]){-1, dt_tensor_size(in[0], 1)}, &e);
  if (!st) st = dt_mul(in[0], e, &m1);
  if (!st) st = dt_mul(in[0], e, &m2);
  if (!st) st = dt_add(m1, m2, &sum);
  if (!st) st = dt_neg(sum, &out[0]); /* the sum itself is not returned: it may be rewritten */
  dt_tensor *all[] = {e, m1, m2, sum};
  for (int k = 0; k < 4; k++) dt_tensor_release(all[k]);
  return st;
}

Test(compile_cse, doubled_product_keeps_eager_bits) {
  dt_compile_mark marks[1] = {{.input = 0, .dim = 0, .dynamic = true}};
  dt_compiled *c = NULL;
  cr_assert_eq(
      dt_compile(doubled, NULL, 2, 1, &(dt_compile_options){.n_marks = 1, .marks = marks}, &c),
      DT_OK);
  static const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 3e38f, -1.5f, 7.25f};
  static const float scales[] = {-0.5f, 0.0f, 3e38f};
  static const int64_t rows[] = {3, 5, 1};
  for (int s = 0; s < 3; s++) {
    dt_tensor *x = ramp(2, (int64_t[]){rows[s], 9}, 3 + s), *u = NULL, *got = NULL, *want = NULL;
    float *px = dt_tensor_data(x);
    for (int k = 0; k < 8; k++) px[(k * 5 + s) % (rows[s] * 9)] = specials[k];
    cr_assert_eq(dt_full(2, (int64_t[]){1, 1}, scales[s], DT_F32, &u), DT_OK);
    dt_tensor *in[2] = {x, u};
    cr_assert_eq(dt_compiled_call(c, 2, in, 1, &got), DT_OK, "%s", dt_last_error());
    cr_assert_eq(doubled(NULL, 2, in, 1, &want), DT_OK);
    cr_assert(bitwise_equal(got, want), "compiled equals eager at %lld rows", (long long)rows[s]);
    const float *pg = dt_tensor_data(got);
    for (int64_t i = 0; i < rows[s] * 9; i++) {
      float q = px[i] * scales[s], e = -(q + q);
      cr_assert(memcmp(&pg[i], &e, sizeof e) == 0 || (isnan(pg[i]) && isnan(e)),
                "element %lld: %g, naive %g", (long long)i, pg[i], e);
    }
    dt_tensor *all[] = {x, u, got, want};
    for (int k = 0; k < 4; k++) dt_tensor_release(all[k]);
  }
  char *text = variant_text(c);
  cr_assert_eq(count_of(text, "(common subexpression)"), 1, "%s", text);
  dt_free(text);
  assert_one_compile(c);
  dt_compiled_destroy(c);
}
