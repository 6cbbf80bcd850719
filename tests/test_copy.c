/* Copies, conversions and new tensors: copy_ (broadcasting, dtype conversion, strided
 * destinations), contiguous, clone, the copying path of reshape, detach and to (views when
 * nothing changes), and the *_like factories. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "view_helpers.h"

/* What a value becomes when stored in dtype (values here are small and integral or exact). */
static double as_dtype(dt_dtype dtype, double v) { return dtype == DT_BOOL ? (v != 0) : v; }

/* ---- copy_ ----------------------------------------------------------------------------------- */

Test(copy_, hand_computed_broadcast) {
  dt_tensor *dst = NULL;
  cr_assert_eq(dt_zeros(2, (int64_t[]){2, 3}, DT_F32, &dst), DT_OK);
  dt_tensor *row = ref_tensor(1, (int64_t[]){3}, DT_I64, (double[]){1, 2, 3});
  cr_assert_eq(dt_copy_(dst, row), DT_OK, "%s", dt_last_error());
  ref_assert_close(dst, 2, (int64_t[]){2, 3}, DT_F32, (double[]){1, 2, 3, 1, 2, 3}, 0, 0);
  dt_tensor *col = ref_tensor(2, (int64_t[]){2, 1}, DT_F64, (double[]){-1.5, 4.25});
  cr_assert_eq(dt_copy_(dst, col), DT_OK);
  ref_assert_close(dst, 2, (int64_t[]){2, 3}, DT_F32,
                   (double[]){-1.5, -1.5, -1.5, 4.25, 4.25, 4.25}, 0, 0);
  dt_tensor *scalar = NULL;
  cr_assert_eq(dt_full(0, NULL, 9, DT_U8, &scalar), DT_OK);
  cr_assert_eq(dt_copy_(dst, scalar), DT_OK);
  ref_assert_close(dst, 2, (int64_t[]){2, 3}, DT_F32, (double[]){9, 9, 9, 9, 9, 9}, 0, 0);
  dt_tensor_release(scalar);
  dt_tensor_release(col);
  dt_tensor_release(row);
  dt_tensor_release(dst);
}

/* copy_ into a strided view of a bigger tensor from a broadcast source of another dtype,
 * against a naive loop; elements outside the view must stay untouched. */
Test(copy_, strided_destination_every_dtype_pair) {
  for (int i = 0; i < N_DTYPES; i++) {
    for (int j = 0; j < N_DTYPES; j++) {
      dt_dtype dd = all_dtypes[i], sd = all_dtypes[j];
      dt_tensor *base = NULL, *t = NULL, *dst = NULL;
      cr_assert_eq(dt_full(2, (int64_t[]){5, 8}, 5, dd, &base), DT_OK);
      cr_assert_eq(dt_transpose(base, 0, 1, &t), DT_OK);          /* [8, 5] */
      cr_assert_eq(dt_slice(t, 0, 1, INT64_MAX, 2, &dst), DT_OK); /* [4, 5] */
      /* Small integers: exact in every dtype, so the check can be exact. */
      double vs[5];
      for (int c = 0; c < 5; c++) vs[c] = as_dtype(sd, (double)((c * 7 + i + j) % 11));
      dt_tensor *src = ref_tensor(2, (int64_t[]){1, 5}, sd, vs);
      cr_assert_eq(dt_copy_(dst, src), DT_OK, "%s", dt_last_error());
      double *vb = ref_values(base);
      for (int r = 0; r < 5; r++) {
        for (int c = 0; c < 8; c++) {
          /* base[r][c] is dst[(c - 1) / 2][r] when c is odd, untouched otherwise. */
          double want = c % 2 == 1 ? as_dtype(dd, vs[r]) : as_dtype(dd, 5);
          cr_assert_eq(vb[r * 8 + c], want, "%s <- %s at [%d][%d]: %g, expected %g",
                       dt_dtype_name(dd), dt_dtype_name(sd), r, c, vb[r * 8 + c], want);
        }
      }
      free(vb);
      dt_tensor_release(src);
      dt_tensor_release(dst);
      dt_tensor_release(t);
      dt_tensor_release(base);
    }
  }
}

Test(copy_, bad_input) {
  dt_tensor *dst = NULL, *src = ref_random(2, (int64_t[]){2, 4}, DT_F32, 0, 1, 1);
  cr_assert_eq(dt_zeros(2, (int64_t[]){2, 3}, DT_F32, &dst), DT_OK);
  cr_assert_eq(dt_copy_(dst, src), DT_ERR_SHAPE);
  ref_assert_error_mentions("copy_", "[2, 4]");
  dt_tensor *bigger = ref_random(3, (int64_t[]){2, 2, 3}, DT_F32, 0, 1, 1);
  cr_assert_eq(dt_copy_(dst, bigger), DT_ERR_SHAPE); /* src may not grow dst */
  ref_assert_error_mentions("copy_", "[2, 2, 3]");
  cr_assert_eq(dt_copy_(dst, NULL), DT_ERR_INVALID);
  ref_assert_error_mentions("copy_", "input 1");
  cr_assert_eq(dt_copy_(NULL, src), DT_ERR_INVALID);
  double *v = ref_values(dst);
  for (int i = 0; i < 6; i++) cr_assert_eq(v[i], 0); /* nothing written */
  free(v);
  dt_tensor_release(bigger);
  dt_tensor_release(dst);
  dt_tensor_release(src);
}

/* ---- contiguous, clone, reshape copies ------------------------------------------------------ */

Test(contiguous, strided_views) {
  for (int k = 0; k < N_DTYPES; k++) {
    dt_tensor *s = ref_random_strided(3, (int64_t[]){3, 5, 4}, all_dtypes[k], -9, 9, k);
    dt_tensor *n = NULL, *c = NULL, *cl = NULL;
    cr_assert_eq(dt_narrow(s, 1, 1, 3, &n), DT_OK);
    cr_assert(!dt_tensor_is_contiguous(n));
    double *vn = ref_values(n);
    cr_assert_eq(dt_contiguous(n, &c), DT_OK, "%s", dt_last_error());
    cr_assert(dt_tensor_is_contiguous(c));
    cr_assert(!dt_tensor_shares_storage(n, c));
    ref_assert_close(c, 3, (int64_t[]){3, 3, 4}, all_dtypes[k], vn, 0, 0);
    cr_assert_eq(dt_clone(n, &cl), DT_OK, "%s", dt_last_error());
    cr_assert(dt_tensor_is_contiguous(cl));
    cr_assert(!dt_tensor_shares_storage(n, cl));
    ref_assert_close(cl, 3, (int64_t[]){3, 3, 4}, all_dtypes[k], vn, 0, 0);
    /* contiguous of a contiguous tensor is the tensor itself; clone always copies. */
    dt_tensor *again = NULL, *cl2 = NULL;
    cr_assert_eq(dt_contiguous(c, &again), DT_OK);
    cr_assert_eq(again, c);
    cr_assert_eq(dt_clone(c, &cl2), DT_OK);
    cr_assert(!dt_tensor_shares_storage(c, cl2));
    free(vn);
    dt_tensor_release(cl2);
    dt_tensor_release(again);
    dt_tensor_release(cl);
    dt_tensor_release(c);
    dt_tensor_release(n);
    dt_tensor_release(s);
  }
  /* A broadcast (stride-0) view materializes every repeated element. */
  dt_tensor *row = ref_tensor(1, (int64_t[]){3}, DT_F32, (double[]){1, 2, 3}), *e = NULL, *c = NULL;
  cr_assert_eq(dt_expand(row, 2, (int64_t[]){2, 3}, &e), DT_OK);
  cr_assert_eq(dt_contiguous(e, &c), DT_OK);
  ref_assert_close(c, 2, (int64_t[]){2, 3}, DT_F32, (double[]){1, 2, 3, 1, 2, 3}, 0, 0);
  cr_assert_eq(dt_tensor_strides(c)[0], 3);
  dt_tensor_release(c);
  dt_tensor_release(e);
  dt_tensor_release(row);
  dt_tensor *out = (dt_tensor *)0x1;
  cr_assert_eq(dt_contiguous(NULL, &out), DT_ERR_INVALID);
  ref_assert_error_mentions("contiguous", "input 0");
  cr_assert_eq(dt_clone(NULL, &out), DT_ERR_INVALID);
  ref_assert_error_mentions("clone", "input 0");
  cr_assert_null(out);
}

/* reshape of a non-viewable tensor copies, in row-major order, and is independent of it. */
Test(reshape, copies_when_not_viewable) {
  dt_tensor *a = ref_random(2, (int64_t[]){4, 6}, DT_F64, -5, 5, 3), *t = NULL, *r = NULL;
  cr_assert_eq(dt_transpose(a, 0, 1, &t), DT_OK);
  double *vt = ref_values(t);
  cr_assert_eq(dt_reshape(t, 3, (int64_t[]){2, 12, 1}, &r), DT_OK, "%s", dt_last_error());
  ref_assert_close(r, 3, (int64_t[]){2, 12, 1}, DT_F64, vt, 0, 0);
  cr_assert(!dt_tensor_shares_storage(t, r));
  cr_assert(dt_tensor_is_contiguous(r));
  cr_assert_eq(dt_tensor_set(r, (int64_t[]){0, 1, 0}, 1000), DT_OK);
  double v = 0;
  cr_assert_eq(dt_tensor_get(t, (int64_t[]){0, 1}, &v), DT_OK);
  cr_assert_eq(v, vt[1]);
  free(vt);
  dt_tensor_release(r);
  dt_tensor_release(t);
  dt_tensor_release(a);
}

/* ---- detach, to ------------------------------------------------------------------------------ */

Test(to, same_dtype_and_detach_never_copy) {
  dt_tensor *big = NULL, *same = NULL, *d = NULL;
  /* 200 MiB that is never touched: a copy would show as a new storage. */
  cr_assert_eq(dt_empty(2, (int64_t[]){202048, 256}, DT_F32, &big), DT_OK);
  cr_assert_eq(dt_to(big, DT_F32, &same), DT_OK, "%s", dt_last_error());
  cr_assert(dt_tensor_shares_storage(big, same));
  cr_assert_eq(dt_tensor_data(big), dt_tensor_data(same));
  cr_assert_eq(dt_detach(big, &d), DT_OK);
  cr_assert(dt_tensor_shares_storage(big, d));
  cr_assert_eq(dt_tensor_data(big), dt_tensor_data(d));
  dt_tensor_release(same);
  dt_tensor_release(d);
  dt_tensor_release(big);
  /* A strided input keeps its strides. */
  dt_tensor *s = make_input(1, 2, (int64_t[]){3, 4}, DT_I32, 5);
  cr_assert_eq(dt_to(s, DT_I32, &same), DT_OK);
  cr_assert(dt_tensor_shares_storage(s, same));
  cr_assert(!dt_tensor_is_contiguous(same));
  check_same_order(s, same);
  check_write_through(s, same, (int64_t[]){2, 1}, (int64_t[]){2, 1});
  dt_tensor_release(same);
  dt_tensor_release(s);
}

Test(to, every_dtype_pair) {
  /* Values every dtype holds exactly, except where conversion rules say otherwise. */
  const double values[] = {0, 1, 2, 3, 7, 100, 0, 1};
  for (int i = 0; i < N_DTYPES; i++) {
    for (int j = 0; j < N_DTYPES; j++) {
      dt_dtype from = all_dtypes[i], to = all_dtypes[j];
      double in[8];
      for (int k = 0; k < 8; k++) in[k] = from == DT_BOOL ? (values[k] != 0) : values[k];
      for (int layout = 0; layout < 2; layout++) {
        dt_tensor *a = ref_tensor(2, (int64_t[]){2, 4}, from, in), *src = a, *t = NULL;
        if (layout == 1) cr_assert_eq(dt_transpose(a, 0, 1, &src), DT_OK);
        cr_assert_eq(dt_to(src, to, &t), DT_OK, "%s", dt_last_error());
        double expected[8];
        int64_t idx[2];
        for (int k = 0; k < 8; k++) {
          ref_unravel(k, 2, dt_tensor_shape(src), idx);
          double v = layout ? in[idx[1] * 4 + idx[0]] : in[k];
          expected[k] = to == DT_BOOL ? (v != 0) : v;
        }
        ref_assert_close(t, 2, dt_tensor_shape(src), to, expected, 0, 0);
        cr_assert_eq(dt_tensor_shares_storage(src, t), from == to);
        if (from != to) cr_assert(dt_tensor_is_contiguous(t));
        dt_tensor_release(t);
        if (src != a) dt_tensor_release(src);
        dt_tensor_release(a);
      }
    }
  }
  /* Rounding and truncation: f32 -> i32 truncates, f32 -> bf16 rounds, 0.5 -> bool is true. */
  dt_tensor *f = ref_tensor(1, (int64_t[]){3}, DT_F32, (double[]){2.75, -2.75, 0.5}), *t = NULL;
  cr_assert_eq(dt_to(f, DT_I32, &t), DT_OK);
  ref_assert_close(t, 1, (int64_t[]){3}, DT_I32, (double[]){2, -2, 0}, 0, 0);
  dt_tensor_release(t);
  cr_assert_eq(dt_to(f, DT_BOOL, &t), DT_OK);
  ref_assert_close(t, 1, (int64_t[]){3}, DT_BOOL, (double[]){1, 1, 1}, 0, 0);
  dt_tensor_release(t);
  cr_assert_eq(dt_to(f, DT_BF16, &t), DT_OK);
  ref_assert_close(t, 1, (int64_t[]){3}, DT_BF16, (double[]){2.75, -2.75, 0.5}, 0, 0);
  dt_tensor_release(t);
  dt_tensor_release(f);
}

Test(to, bad_input) {
  dt_tensor *a = iota(1, (int64_t[]){3}, DT_F32), *out = (dt_tensor *)0x1;
  cr_assert_eq(dt_to(a, (dt_dtype)99, &out), DT_ERR_DTYPE);
  cr_assert_null(out);
  ref_assert_error_mentions("to.dtype", "dtype 99");
  cr_assert_eq(dt_to(a, (dt_dtype)-1, &out), DT_ERR_DTYPE);
  cr_assert_eq(dt_to(NULL, DT_F32, &out), DT_ERR_INVALID);
  ref_assert_error_mentions("to.dtype", "input 0");
  cr_assert_eq(dt_to(a, DT_F32, NULL), DT_ERR_INVALID);
  cr_assert_eq(dt_detach(NULL, &out), DT_ERR_INVALID);
  ref_assert_error_mentions("detach", "input 0");
  cr_assert_eq(dt_detach(a, NULL), DT_ERR_INVALID);
  cr_assert_null(out);
  dt_tensor_release(a);
}

/* A view keeps the storage alive after its base is gone; ASan would flag a use after free,
 * LeakSanitizer a leak. */

/* ---- *_like factories ----------------------------------------------------------------------- */

Test(factory, like_every_dtype) {
  for (int k = 0; k < N_DTYPES; k++) {
    dt_dtype dt = all_dtypes[k];
    dt_tensor *s = ref_random_strided(3, (int64_t[]){2, 3, 5}, dt, 0, 9, k), *out = NULL;
    int64_t shape[] = {2, 3, 5};
    double expected[30];
    cr_assert_eq(dt_empty_like(s, &out), DT_OK, "%s", dt_last_error());
    cr_assert(dt_tensor_is_contiguous(out));
    cr_assert(!dt_tensor_shares_storage(s, out));
    cr_assert_eq(dt_tensor_dtype(out), dt);
    cr_assert_eq(dt_tensor_numel(out), 30);
    dt_tensor_release(out);
    for (int i = 0; i < 30; i++) expected[i] = 0;
    cr_assert_eq(dt_zeros_like(s, &out), DT_OK);
    ref_assert_close(out, 3, shape, dt, expected, 0, 0);
    cr_assert(dt_tensor_is_contiguous(out));
    dt_tensor_release(out);
    for (int i = 0; i < 30; i++) expected[i] = 1;
    cr_assert_eq(dt_ones_like(s, &out), DT_OK);
    ref_assert_close(out, 3, shape, dt, expected, 0, 0);
    dt_tensor_release(out);
    for (int i = 0; i < 30; i++) expected[i] = as_dtype(dt, 7);
    cr_assert_eq(dt_full_like(s, 7, &out), DT_OK, "%s", dt_last_error());
    ref_assert_close(out, 3, shape, dt, expected, 0, 0);
    dt_tensor_release(out);
    dt_tensor_release(s);
  }
  /* Fractions, negative zero, 0-d and empty inputs. */
  dt_tensor *f = NULL, *out = NULL;
  cr_assert_eq(dt_zeros(1, (int64_t[]){37}, DT_F16, &f), DT_OK);
  cr_assert_eq(dt_full_like(f, -0.0, &out), DT_OK);
  cr_assert(signbit(dt_f16_to_f32(((uint16_t *)dt_tensor_data(out))[36])));
  dt_tensor_release(out);
  cr_assert_eq(dt_full_like(f, 2.5, &out), DT_OK);
  double v = 0;
  cr_assert_eq(dt_tensor_get(out, (int64_t[]){36}, &v), DT_OK);
  cr_assert_eq(v, 2.5);
  dt_tensor_release(out);
  dt_tensor_release(f);
  dt_tensor *i = NULL;
  cr_assert_eq(dt_zeros(0, NULL, DT_I32, &i), DT_OK);
  cr_assert_eq(dt_full_like(i, -3.9, &out), DT_OK); /* truncates toward zero */
  ref_assert_close(out, 0, NULL, DT_I32, (double[]){-3}, 0, 0);
  dt_tensor_release(out);
  dt_tensor_release(i);
  dt_tensor *e = NULL;
  cr_assert_eq(dt_zeros(2, (int64_t[]){0, 3}, DT_F32, &e), DT_OK);
  cr_assert_eq(dt_ones_like(e, &out), DT_OK);
  cr_assert_eq(dt_tensor_numel(out), 0);
  dt_tensor_release(out);
  dt_tensor_release(e);
}

Test(factory, bad_input) {
  dt_tensor *u = NULL, *out = (dt_tensor *)0x1;
  cr_assert_eq(dt_zeros(1, (int64_t[]){2}, DT_U8, &u), DT_OK);
  cr_assert_eq(dt_full_like(u, -1, &out), DT_ERR_INVALID);
  cr_assert_null(out);
  ref_assert_error_mentions("full_like", "uint8");
  cr_assert_eq(dt_full_like(u, 256, &out), DT_ERR_INVALID);
  cr_assert_eq(dt_full_like(u, NAN, &out), DT_ERR_INVALID);
  dt_tensor *i = NULL;
  cr_assert_eq(dt_zeros(1, (int64_t[]){2}, DT_I32, &i), DT_OK);
  cr_assert_eq(dt_full_like(i, 3e9, &out), DT_ERR_INVALID);
  ref_assert_error_mentions("full_like", "int32");
  cr_assert_eq(dt_full_like(i, INFINITY, &out), DT_ERR_INVALID);
  cr_assert_null(out);
  cr_assert_eq(dt_empty_like(NULL, &out), DT_ERR_INVALID);
  ref_assert_error_mentions("empty_like", "input 0");
  cr_assert_eq(dt_zeros_like(NULL, &out), DT_ERR_INVALID);
  ref_assert_error_mentions("zeros_like", "input 0");
  cr_assert_eq(dt_ones_like(i, NULL), DT_ERR_INVALID);
  ref_assert_error_mentions("ones_like", "out");
  cr_assert_eq(dt_full_like(NULL, 1, &out), DT_ERR_INVALID);
  cr_assert_null(out);
  dt_tensor_release(i);
  dt_tensor_release(u);
}

/* float32 <-> bfloat16 / float16 conversions (their own loops in kernels/cpu/copy.c, not the
 * trip through double) give the element functions' bits: every 16-bit pattern up, and
 * 300,000 float32 patterns (NaNs, infinities, subnormals, ties) down, contiguous and read
 * across a transposed view. Includes tensor/element.h: internal. */
#include "tensor/element.h"

Test(to, sixteen_bit_floats_match_the_element_functions) {
  const dt_dtype halves[2] = {DT_BF16, DT_F16};
  int64_t n16 = 65536, shape16[1] = {n16};
  for (int h = 0; h < 2; h++) {
    dt_tensor *t = NULL, *f = NULL;
    cr_assert_eq(dt_empty(1, shape16, halves[h], &t), DT_OK);
    uint16_t *p = dt_tensor_data(t);
    for (int64_t i = 0; i < n16; i++) p[i] = (uint16_t)i;
    cr_assert_eq(dt_to(t, DT_F32, &f), DT_OK, "%s", dt_last_error());
    const float *q = dt_tensor_data(f);
    for (int64_t i = 0; i < n16; i++) {
      float want = halves[h] == DT_BF16 ? dt__elem_bf16_to_f32((uint16_t)i)
                                        : dt__elem_f16_to_f32((uint16_t)i);
      cr_assert_eq(memcmp(&q[i], &want, 4), 0, "%s 0x%04x", dt_dtype_name(halves[h]), (int)i);
    }
    dt_tensor_release(t);
    dt_tensor_release(f);
  }
  int64_t rows = 600, cols = 500, shape[2] = {rows, cols};
  dt_tensor *x = NULL;
  cr_assert_eq(dt_empty(2, shape, DT_F32, &x), DT_OK);
  uint32_t *bits = dt_tensor_data(x), state = 12345;
  for (int64_t i = 0; i < rows * cols; i++) {
    state = state * 1664525u + 1013904223u;
    uint32_t u = state;
    if (i % 7 == 0) u = (u & 0xffff0000u) | 0x8000u; /* bfloat16 ties */
    if (i % 11 == 0) u = (u & 0x80000000u) | 0x7f800000u | (i % 22 == 0 ? 0 : (u & 0x7fffffu));
    if (i % 13 == 0) u &= 0x807fffffu; /* subnormals */
    bits[i] = u;
  }
  for (int h = 0; h < 2; h++)
    for (int layout = 0; layout < 2; layout++) {
      dt_tensor *src = x, *y = NULL;
      if (layout) cr_assert_eq(dt_transpose(x, 0, 1, &src), DT_OK);
      cr_assert_eq(dt_to(src, halves[h], &y), DT_OK, "%s", dt_last_error());
      const uint16_t *q = dt_tensor_data(y);
      for (int64_t i = 0; i < rows * cols; i++) {
        int64_t r = layout ? i % rows : i / cols, c = layout ? i / rows : i % cols;
        float v;
        memcpy(&v, &bits[r * cols + c], 4);
        uint16_t want = halves[h] == DT_BF16 ? dt__elem_f32_to_bf16(v) : dt__elem_f32_to_f16(v);
        cr_assert_eq(q[i], want, "%s from 0x%08x: 0x%04x, want 0x%04x (layout %d)",
                     dt_dtype_name(halves[h]), bits[r * cols + c], q[i], want, layout);
      }
      dt_tensor_release(y);
      if (src != x) dt_tensor_release(src);
    }
  dt_tensor_release(x);
}
