/* Regressions: shape and stride products that overflowed int64 (creation, dt_wrap, views,
 * cat, broadcasting outputs), dt_wrap's buffer size, and dt_nn_mlp's per-layer bias flags. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "dtensor/nn.h"
#include "reference.h"

#define BIG INT64_MAX

/* Each creation function refuses an empty shape whose other sizes multiply past int64 (its
 * contiguous strides would overflow), naming itself and the shape. */
Test(shape_overflow, creation_refuses_overflowing_empty_shapes) {
  int64_t shapes[][3] = {{0, BIG, BIG}, {BIG, BIG, 0}, {0, (int64_t)1 << 32, (int64_t)1 << 32}};
  for (int s = 0; s < 3; s++) {
    dt_tensor *t = (dt_tensor *)0x1;
    cr_assert_eq(dt_empty(3, shapes[s], DT_F32, &t), DT_ERR_INVALID);
    cr_assert_null(t);
    ref_assert_error_mentions("empty: shape [", "strides would overflow");
    cr_assert_eq(dt_zeros(3, shapes[s], DT_F32, &t), DT_ERR_INVALID);
    ref_assert_error_mentions("zeros: shape [", NULL);
    cr_assert_eq(dt_ones(3, shapes[s], DT_I64, &t), DT_ERR_INVALID);
    ref_assert_error_mentions("ones: shape [", NULL);
    cr_assert_eq(dt_full(3, shapes[s], 2.0, DT_F64, &t), DT_ERR_INVALID);
    ref_assert_error_mentions("full: shape [", NULL);
    cr_assert_eq(dt_from_data(NULL, 3, shapes[s], DT_F32, &t), DT_ERR_INVALID);
    ref_assert_error_mentions("from_data: shape [", NULL);
    cr_assert_eq(dt_rand(3, shapes[s], DT_F32, 1, &t), DT_ERR_INVALID);
    ref_assert_error_mentions("shape [", "strides would overflow");
    cr_assert_null(t);
  }
  /* The message shows the offending sizes. */
  dt_tensor *t = NULL;
  cr_assert_eq(dt_empty(3, shapes[0], DT_F32, &t), DT_ERR_INVALID);
  ref_assert_error_mentions("[0, 9223372036854775807, 9223372036854775807]", NULL);
  /* A non-empty shape past the limit still has too many elements. */
  cr_assert_eq(dt_empty(2, (int64_t[]){(int64_t)1 << 31, (int64_t)1 << 31}, DT_U8, &t),
               DT_ERR_INVALID);
  ref_assert_error_mentions("empty: shape [2147483648, 2147483648]", "too many elements");
}

/* An empty shape whose sizes stay in range works and has exact contiguous strides. */
Test(shape_overflow, empty_shapes_in_range_have_exact_strides) {
  int64_t big = (int64_t)1 << 29;
  dt_tensor *t = NULL, *n = NULL;
  cr_assert_eq(dt_zeros(3, (int64_t[]){0, big, big}, DT_F32, &t), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_tensor_numel(t), 0);
  cr_assert_eq(dt_tensor_strides(t)[0], big * big);
  cr_assert_eq(dt_tensor_strides(t)[1], big);
  cr_assert_eq(dt_tensor_strides(t)[2], 1);
  /* narrow to the end of the huge dims: the offset is size * stride, 2^58, no overflow. */
  cr_assert_eq(dt_narrow(t, 1, big, 0, &n), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_tensor_offset(n), big * big);
  cr_assert_eq(dt_tensor_size(n, 1), 0);
  dt_tensor_release(n);
  cr_assert_eq(dt_narrow(t, 2, big - 3, 3, &n), DT_OK);
  cr_assert_eq(dt_tensor_offset(n), big - 3);
  cr_assert_eq(dt_tensor_size(n, 2), 3);
  dt_tensor_release(n);
  cr_assert_eq(dt_unsqueeze(t, 1, &n), DT_OK);
  cr_assert_eq(dt_tensor_strides(n)[1], big * big);
  dt_tensor_release(n);
  dt_tensor_release(t);
}

/* The case from the issue: strides [INT64_MAX, 1] made the extent overflow, were accepted,
 * and dt_contiguous then read outside the buffer. */
Test(shape_overflow, wrap_refuses_overflowing_strides) {
  float data[6] = {1, 2, 3, 4, 5, 6};
  dt_tensor *t = (dt_tensor *)0x1;
  cr_assert_eq(dt_wrap(data, sizeof data, 2, (int64_t[]){2, 3}, (int64_t[]){BIG, 1}, DT_F32, &t),
               DT_ERR_INVALID);
  cr_assert_null(t);
  ref_assert_error_mentions("wrap: strides [9223372036854775807, 1]", "shape [2, 3]");
  /* A size-1 dim whose stride alone passes the bound: narrow(0, 1, 0) would compute it. */
  cr_assert_eq(dt_wrap(data, sizeof data, 2, (int64_t[]){1, 3}, (int64_t[]){BIG, 1}, DT_F32, &t),
               DT_ERR_INVALID);
  ref_assert_error_mentions("wrap: strides", NULL);
  /* Two dims whose products fit alone but whose sum overflows. */
  cr_assert_eq(
      dt_wrap(data, sizeof data, 2, (int64_t[]){2, 2}, (int64_t[]){BIG / 2, BIG / 2}, DT_F32, &t),
      DT_ERR_INVALID);
  ref_assert_error_mentions("wrap: strides", NULL);
  cr_assert_eq(dt_wrap(data, sizeof data, 2, (int64_t[]){2, 3}, (int64_t[]){-3, 1}, DT_F32, &t),
               DT_ERR_INVALID);
  ref_assert_error_mentions("wrap: negative stride -3 at dim 0", NULL);
  cr_assert_eq(dt_wrap(data, sizeof data, 3, (int64_t[]){0, BIG, BIG}, NULL, DT_F32, &t),
               DT_ERR_INVALID);
  ref_assert_error_mentions("wrap: shape [0, 9223372036854775807", NULL);
}

/* The buffer must hold every element the geometry reads; the error names nbytes and the
 * bytes needed. */
Test(shape_overflow, wrap_checks_the_buffer_size) {
  float data[12];
  for (int i = 0; i < 12; i++) data[i] = (float)i;
  dt_tensor *t = (dt_tensor *)0x1, *c = NULL;
  /* Strides [10, 1] on [2, 3] read up to element 12: 13 floats, 52 bytes. */
  cr_assert_eq(dt_wrap(data, sizeof data, 2, (int64_t[]){2, 3}, (int64_t[]){10, 1}, DT_F32, &t),
               DT_ERR_INVALID);
  cr_assert_null(t);
  ref_assert_error_mentions("wrap: nbytes 48 is too small", "needs 52 bytes");
  cr_assert_eq(dt_wrap(data, 5 * sizeof(float), 1, (int64_t[]){6}, NULL, DT_F32, &t),
               DT_ERR_INVALID);
  ref_assert_error_mentions("wrap: nbytes 20", "needs 24 bytes");
  /* Exactly enough: [2, 3] with strides [5, 2] reads up to element 9. */
  cr_assert_eq(
      dt_wrap(data, 10 * sizeof(float), 2, (int64_t[]){2, 3}, (int64_t[]){5, 2}, DT_F32, &t), DT_OK,
      "%s", dt_last_error());
  cr_assert_eq(dt_contiguous(t, &c), DT_OK);
  ref_assert_close(c, 2, (int64_t[]){2, 3}, DT_F32, (double[]){0, 2, 4, 5, 7, 9}, 0, 0);
  dt_tensor_release(c);
  dt_tensor_release(t);
  /* Stride 0 (broadcast) needs one element per run; an empty shape needs none. */
  cr_assert_eq(dt_wrap(data, sizeof(float), 2, (int64_t[]){4, 5}, (int64_t[]){0, 0}, DT_F32, &t),
               DT_OK);
  cr_assert_eq(dt_contiguous(t, &c), DT_OK);
  cr_assert_eq(dt_tensor_numel(c), 20);
  dt_tensor_release(c);
  dt_tensor_release(t);
  cr_assert_eq(dt_wrap(NULL, 0, 2, (int64_t[]){0, 3}, (int64_t[]){BIG / 64, 1}, DT_F32, &t), DT_OK,
               "%s", dt_last_error());
  cr_assert_eq(dt_tensor_numel(t), 0);
  dt_tensor_release(t);
}

/* view and reshape of an empty tensor used to accept any target with a 0 in it and compute
 * its contiguous strides, which overflowed. */
Test(shape_overflow, view_and_reshape_refuse_overflowing_empty_targets) {
  dt_tensor *a = NULL, *v = (dt_tensor *)0x1;
  cr_assert_eq(dt_zeros(1, (int64_t[]){0}, DT_F32, &a), DT_OK);
  cr_assert_eq(dt_view(a, 3, (int64_t[]){0, BIG, BIG}, &v), DT_ERR_INVALID);
  cr_assert_null(v);
  ref_assert_error_mentions("view: shape [0, 9223372036854775807", "strides would overflow");
  cr_assert_eq(dt_reshape(a, 3, (int64_t[]){BIG, BIG, 0}, &v), DT_ERR_SHAPE);
  ref_assert_error_mentions("reshape: shape [", NULL);
  cr_assert_eq(dt_reshape(a, 3, (int64_t[]){0, (int64_t)1 << 32, (int64_t)1 << 32}, &v),
               DT_ERR_INVALID);
  ref_assert_error_mentions("reshape: shape [0, 4294967296, 4294967296]", NULL);
  /* In range, the strides are exact. */
  cr_assert_eq(dt_view(a, 3, (int64_t[]){0, 1000, 7}, &v), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_tensor_strides(v)[0], 7000);
  cr_assert_eq(dt_tensor_strides(v)[1], 7);
  dt_tensor_release(v);
  dt_tensor_release(a);
}

/* expand checks its target like a created shape; the expanded view reads the right values. */
Test(shape_overflow, expand_refuses_overflowing_targets) {
  dt_tensor *a = NULL, *e = (dt_tensor *)0x1;
  cr_assert_eq(dt_zeros(2, (int64_t[]){0, 1}, DT_F32, &a), DT_OK);
  cr_assert_eq(dt_expand(a, 3, (int64_t[]){BIG, 0, BIG}, &e), DT_ERR_INVALID);
  cr_assert_null(e);
  ref_assert_error_mentions("expand: shape [9223372036854775807, 0, 9223372036854775807]",
                            "strides would overflow");
  dt_tensor_release(a);
  cr_assert_eq(dt_full(2, (int64_t[]){1, 1}, 3.0, DT_F32, &a), DT_OK);
  cr_assert_eq(dt_expand(a, 2, (int64_t[]){BIG, BIG}, &e), DT_ERR_INVALID);
  ref_assert_error_mentions("expand: shape [", "too many elements");
  cr_assert_eq(dt_expand(a, 2, (int64_t[]){2, 3}, &e), DT_OK);
  ref_assert_close(e, 2, (int64_t[]){2, 3}, DT_F32, (double[]){3, 3, 3, 3, 3, 3}, 0, 0);
  dt_tensor_release(e);
  dt_tensor_release(a);
}

/* A broadcast output that is empty but whose contiguous strides overflow: [0, 2^32, 1] +
 * [2^32] (an expanded view, no memory) is [0, 2^32, 2^32]. */
Test(shape_overflow, broadcast_output_refuses_overflowing_empty_shape) {
  int64_t big = (int64_t)1 << 32;
  dt_tensor *a = NULL, *one = NULL, *b = NULL, *out = (dt_tensor *)0x1;
  cr_assert_eq(dt_zeros(3, (int64_t[]){0, big, 1}, DT_F32, &a), DT_OK);
  cr_assert_eq(dt_zeros(1, (int64_t[]){1}, DT_F32, &one), DT_OK);
  cr_assert_eq(dt_expand(one, 1, (int64_t[]){big}, &b), DT_OK);
  cr_assert_eq(dt_add(a, b, &out), DT_ERR_INVALID);
  cr_assert_null(out);
  ref_assert_error_mentions("[0, 4294967296, 4294967296]", "too many elements");
  dt_tensor_release(a);
  dt_tensor_release(b);
  dt_tensor_release(one);
}

/* cat of many large empty tensors summed their sizes into a wrapped int64. */
Test(shape_overflow, cat_refuses_overflowing_size_sum) {
  int64_t big = INT64_MAX / 16;
  dt_tensor *a = NULL, *list[17], *out = (dt_tensor *)0x1;
  cr_assert_eq(dt_zeros(2, (int64_t[]){0, big}, DT_F32, &a), DT_OK, "%s", dt_last_error());
  for (int i = 0; i < 17; i++) list[i] = a;
  cr_assert_eq(dt_cat(17, list, 1, &out), DT_ERR_INVALID);
  cr_assert_null(out);
  ref_assert_error_mentions("cat", "dim 1");
  cr_assert_eq(dt_cat(2, list, 1, &out), DT_ERR_INVALID);
  ref_assert_error_mentions("cat: shape [0, ", "strides would overflow");
  cr_assert_eq(dt_cat(2, list, 0, &out), DT_OK);
  cr_assert_eq(dt_tensor_numel(out), 0);
  dt_tensor_release(out);
  dt_tensor_release(a);
}

/* ---- dt_nn_mlp: one bias flag per layer ---------------------------------------------------- */

typedef struct names {
  int n;
  char fqn[8][32];
} names;

static dt_status collect(const char *fqn, dt_tensor *t, bool is_buffer, void *user) {
  (void)t;
  names *nm = user;
  if (!is_buffer && nm->n < 8) snprintf(nm->fqn[nm->n++], sizeof nm->fqn[0], "%s", fqn);
  return DT_OK;
}

/* y = relu(x @ w0^T + b0) @ w2^T + b2 by loops, biases optional. */
static void naive_mlp(const double *x, int rows, int in, int hidden, int out, const double *w0,
                      const double *b0, const double *w2, const double *b2, double *y) {
  for (int r = 0; r < rows; r++) {
    double h[16];
    for (int j = 0; j < hidden; j++) {
      double s = b0 ? b0[j] : 0;
      for (int k = 0; k < in; k++) s += x[r * in + k] * w0[j * in + k];
      h[j] = s > 0 ? s : 0;
    }
    for (int j = 0; j < out; j++) {
      double s = b2 ? b2[j] : 0;
      for (int k = 0; k < hidden; k++) s += h[k] * w2[j * hidden + k];
      y[r * out + j] = s;
    }
  }
}

static void check_mlp(bool hidden_bias, bool output_bias, int n_expected,
                      const char *const *expected) {
  enum { ROWS = 4, IN = 3, HIDDEN = 8, OUT = 5 };
  dt_module *m = NULL;
  cr_assert_eq(dt_nn_mlp(IN, HIDDEN, OUT, hidden_bias, output_bias, 7, &m), DT_OK, "%s",
               dt_last_error());
  names nm = {0};
  cr_assert_eq(dt_module_visit_tensors(m, collect, &nm), DT_OK);
  cr_assert_eq(nm.n, n_expected, "%d parameters for biases (%d, %d)", nm.n, hidden_bias,
               output_bias);
  for (int i = 0; i < n_expected; i++) cr_assert_str_eq(nm.fqn[i], expected[i]);
  cr_assert_eq(dt_module_get_tensor(m, "0.bias") != NULL, hidden_bias);
  cr_assert_eq(dt_module_get_tensor(m, "2.bias") != NULL, output_bias);

  double w0[HIDDEN * IN], b0[HIDDEN], w2[OUT * HIDDEN], b2[OUT], x[ROWS * IN], y[ROWS * OUT];
  cr_assert_eq(dt_tensor_to_doubles(dt_module_get_tensor(m, "0.weight"), w0, HIDDEN * IN), DT_OK);
  cr_assert_eq(dt_tensor_to_doubles(dt_module_get_tensor(m, "2.weight"), w2, OUT * HIDDEN), DT_OK);
  if (hidden_bias)
    cr_assert_eq(dt_tensor_to_doubles(dt_module_get_tensor(m, "0.bias"), b0, HIDDEN), DT_OK);
  if (output_bias)
    cr_assert_eq(dt_tensor_to_doubles(dt_module_get_tensor(m, "2.bias"), b2, OUT), DT_OK);
  dt_tensor *xt = ref_random(2, (int64_t[]){ROWS, IN}, DT_F32, -2, 2, 11), *yt = NULL;
  cr_assert_eq(dt_tensor_to_doubles(xt, x, ROWS * IN), DT_OK);
  naive_mlp(x, ROWS, IN, HIDDEN, OUT, w0, hidden_bias ? b0 : NULL, w2, output_bias ? b2 : NULL, y);
  cr_assert_eq(dt_module_forward(m, xt, &yt), DT_OK, "%s", dt_last_error());
  ref_assert_close(yt, 2, (int64_t[]){ROWS, OUT}, DT_F32, y, 1e-5, 1e-5);
  dt_tensor_release(yt);
  dt_tensor_release(xt);
  dt_module_destroy(m);
}

Test(shape_overflow, mlp_bias_per_layer) {
  check_mlp(true, true, 4, (const char *[]){"0.weight", "0.bias", "2.weight", "2.bias"});
  /* PyTorch's models that drop only the second bias. */
  check_mlp(true, false, 3, (const char *[]){"0.weight", "0.bias", "2.weight"});
  check_mlp(false, true, 3, (const char *[]){"0.weight", "2.weight", "2.bias"});
  check_mlp(false, false, 2, (const char *[]){"0.weight", "2.weight"});
}

/* Each Linear is seeded alone (seed, seed + 1): its weight does not depend on the flags. */
Test(shape_overflow, mlp_bias_flags_keep_seeds) {
  dt_module *a = NULL, *b = NULL;
  cr_assert_eq(dt_nn_mlp(3, 8, 5, true, false, 7, &a), DT_OK);
  cr_assert_eq(dt_nn_mlp(3, 8, 5, false, true, 7, &b), DT_OK);
  double wa[40], wb[40];
  cr_assert_eq(dt_tensor_to_doubles(dt_module_get_tensor(a, "2.weight"), wa, 40), DT_OK);
  cr_assert_eq(dt_tensor_to_doubles(dt_module_get_tensor(b, "2.weight"), wb, 40), DT_OK);
  for (int i = 0; i < 40; i++) cr_assert_eq(wa[i], wb[i]);
  dt_module_destroy(a);
  dt_module_destroy(b);
}
