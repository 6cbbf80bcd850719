/* embedding, cat and stack against hand-computed values and naive references. */
#include <stdio.h>
#include <stdlib.h>

#include "reference.h"

/* The shape of a 0-d tensor: a valid pointer to no sizes (the creation functions copy from
 * it, and a NULL source is undefined behaviour even for zero bytes). */
static const int64_t NO_DIMS[1] = {0};

/* ---- embedding ------------------------------------------------------------------------------ */

Test(embedding, hand_computed) {
  dt_tensor *w = ref_tensor(2, (int64_t[]){4, 3}, DT_F32,
                            (double[]){0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32});
  dt_tensor *idx = ref_tensor(2, (int64_t[]){2, 2}, DT_I64, (double[]){0, 3, 2, 0});
  dt_tensor *out = NULL;
  cr_assert_eq(dt_embedding(w, idx, &out), DT_OK, "%s", dt_last_error());
  ref_assert_close(out, 3, (int64_t[]){2, 2, 3}, DT_F32,
                   (double[]){0, 1, 2, 30, 31, 32, 20, 21, 22, 0, 1, 2}, 0, 0);
  dt_tensor_release(out);
  dt_tensor_release(idx);
  idx = ref_tensor(1, (int64_t[]){3}, DT_I32, (double[]){1, 1, 3});
  cr_assert_eq(dt_embedding(w, idx, &out), DT_OK);
  ref_assert_close(out, 2, (int64_t[]){3, 3}, DT_F32,
                   (double[]){10, 11, 12, 10, 11, 12, 30, 31, 32}, 0, 0);
  dt_tensor_release(out);
  dt_tensor_release(idx);
  dt_tensor_release(w);
}

static void check_embedding(dt_dtype wd, dt_dtype id, bool strided_w, bool strided_i, int ndi,
                            const int64_t *si, uint64_t seed) {
  int64_t num = 11, dim = 5;
  int64_t sw[2] = {num, dim};
  dt_tensor *w =
      strided_w ? ref_random_strided(2, sw, wd, -3, 3, seed) : ref_random(2, sw, wd, -3, 3, seed);
  dt_tensor *idx = strided_i && ndi >= 2 ? ref_random_strided(ndi, si, id, 0, (double)num, seed + 1)
                                         : ref_random(ndi, si, id, 0, (double)num, seed + 1);
  dt_tensor *out = NULL;
  cr_assert_eq(dt_embedding(w, idx, &out), DT_OK, "%s", dt_last_error());
  double *vw = ref_values(w), *vi = ref_values(idx);
  int64_t count = dt_tensor_numel(idx);
  double *e = malloc(sizeof(double) * (size_t)(count * dim + 1));
  for (int64_t r = 0; r < count; r++) {
    for (int64_t j = 0; j < dim; j++) e[r * dim + j] = vw[(int64_t)vi[r] * dim + j];
  }
  int64_t so[DT_MAX_DIMS];
  memcpy(so, si, sizeof(int64_t) * (size_t)ndi);
  so[ndi] = dim;
  ref_assert_close(out, ndi + 1, so, wd, e, 0, 0);
  free(vw);
  free(vi);
  free(e);
  dt_tensor_release(out);
  dt_tensor_release(w);
  dt_tensor_release(idx);
}

Test(embedding, random_dtypes_strides) {
  dt_dtype wds[] = {DT_F32, DT_F64, DT_BF16, DT_F16, DT_I64};
  dt_dtype ids[] = {DT_I64, DT_I32};
  uint64_t seed = 1;
  for (int w = 0; w < 5; w++) {
    for (int i = 0; i < 2; i++) {
      for (int s = 0; s < 4; s++) {
        check_embedding(wds[w], ids[i], s & 1, s & 2, 2, (int64_t[]){3, 7}, seed++);
        check_embedding(wds[w], ids[i], s & 1, s & 2, 1, (int64_t[]){9}, seed++);
        check_embedding(wds[w], ids[i], s & 1, s & 2, 0, NO_DIMS, seed++);
        check_embedding(wds[w], ids[i], s & 1, s & 2, 3, (int64_t[]){2, 0, 3}, seed++);
      }
    }
  }
}

Test(embedding, out_of_range_indices) {
  dt_tensor *w = ref_random(2, (int64_t[]){4, 3}, DT_F32, 0, 1, 1);
  double bad[] = {-1, 4, 1000, -4};
  dt_dtype ids[] = {DT_I64, DT_I32};
  for (int d = 0; d < 2; d++) {
    for (int b = 0; b < 4; b++) {
      dt_tensor *idx = ref_tensor(2, (int64_t[]){2, 2}, ids[d], (double[]){0, 1, bad[b], 2});
      dt_tensor *out = (dt_tensor *)0x1;
      cr_assert_eq(dt_embedding(w, idx, &out), DT_ERR_INDEX, "index %g", bad[b]);
      cr_assert_null(out);
      char text[64];
      snprintf(text, sizeof text, "index %lld ", (long long)bad[b]);
      ref_assert_error_mentions("embedding", text);
      ref_assert_error_mentions("4 rows", NULL);
      dt_tensor_release(idx);
    }
  }
  dt_tensor_release(w);
}

Test(embedding, bad_input) {
  dt_tensor *w = ref_random(2, (int64_t[]){4, 3}, DT_F32, 0, 1, 1);
  dt_tensor *w1 = ref_random(1, (int64_t[]){4}, DT_F32, 0, 1, 2);
  dt_tensor *fi = ref_tensor(1, (int64_t[]){1}, DT_F32, (double[]){1});
  dt_tensor *ui = ref_tensor(1, (int64_t[]){1}, DT_U8, (double[]){1});
  dt_tensor *ii = ref_tensor(1, (int64_t[]){1}, DT_I64, (double[]){1});
  dt_tensor *deep = ref_random(8, (int64_t[]){1, 1, 1, 1, 1, 1, 1, 1}, DT_I64, 0, 1, 3);
  dt_tensor *out = (dt_tensor *)0x1;
  cr_assert_eq(dt_embedding(w, fi, &out), DT_ERR_DTYPE);
  cr_assert_null(out);
  ref_assert_error_mentions("embedding", "float32");
  cr_assert_eq(dt_embedding(w, ui, &out), DT_ERR_DTYPE);
  ref_assert_error_mentions("embedding", "uint8");
  cr_assert_eq(dt_embedding(w1, ii, &out), DT_ERR_SHAPE);
  ref_assert_error_mentions("embedding", "[4]");
  cr_assert_eq(dt_embedding(w, deep, &out), DT_ERR_SHAPE);
  ref_assert_error_mentions("embedding", "no room");
  cr_assert_eq(dt_embedding(NULL, ii, &out), DT_ERR_INVALID);
  ref_assert_error_mentions("embedding", "input 0");
  cr_assert_eq(dt_embedding(w, NULL, &out), DT_ERR_INVALID);
  cr_assert_null(out);
  dt_tensor_release(w);
  dt_tensor_release(w1);
  dt_tensor_release(fi);
  dt_tensor_release(ui);
  dt_tensor_release(ii);
  dt_tensor_release(deep);
}

/* ---- cat ------------------------------------------------------------------------------------- */

Test(cat, hand_computed) {
  dt_tensor *a = ref_tensor(2, (int64_t[]){2, 2}, DT_F32, (double[]){1, 2, 3, 4});
  dt_tensor *b = ref_tensor(2, (int64_t[]){1, 2}, DT_F32, (double[]){5, 6});
  dt_tensor *c = ref_tensor(2, (int64_t[]){2, 1}, DT_I64, (double[]){7, 8});
  dt_tensor *out = NULL;
  cr_assert_eq(dt_cat(2, (dt_tensor *[]){a, b}, 0, &out), DT_OK, "%s", dt_last_error());
  ref_assert_close(out, 2, (int64_t[]){3, 2}, DT_F32, (double[]){1, 2, 3, 4, 5, 6}, 0, 0);
  dt_tensor_release(out);
  cr_assert_eq(dt_cat(3, (dt_tensor *[]){c, a, c}, -1, &out), DT_OK, "%s", dt_last_error());
  ref_assert_close(out, 2, (int64_t[]){2, 4}, DT_F32, (double[]){7, 1, 2, 7, 8, 3, 4, 8}, 0, 0);
  dt_tensor_release(out);
  cr_assert_eq(dt_cat(1, (dt_tensor *[]){c}, 1, &out), DT_OK);
  ref_assert_close(out, 2, (int64_t[]){2, 1}, DT_I64, (double[]){7, 8}, 0, 0);
  cr_assert(!dt_tensor_shares_storage(out, c));
  dt_tensor_release(out);
  dt_tensor_release(a);
  dt_tensor_release(b);
  dt_tensor_release(c);
}

/* Inputs of shape base with base[dim] replaced by sizes[i], each of dtypes[i]; every other
 * one non-contiguous when strided. Checked against a naive placement of each element. */
static void check_cat(int nd, const int64_t *base, int dim, int n, const int64_t *sizes,
                      const dt_dtype *dtypes, bool strided, uint64_t seed) {
  dt_tensor *ts[8];
  dt_dtype rd = dtypes[0];
  int64_t total = 0;
  for (int i = 0; i < n; i++) {
    int64_t s[DT_MAX_DIMS];
    memcpy(s, base, sizeof(int64_t) * (size_t)nd);
    s[dim] = sizes[i];
    ts[i] = strided && (i & 1) ? ref_random_strided(nd, s, dtypes[i], -9, 9, seed + (uint64_t)i)
                               : ref_random(nd, s, dtypes[i], -9, 9, seed + (uint64_t)i);
    rd = dt_dtype_promote(rd, dtypes[i]);
    total += sizes[i];
  }
  int64_t so[DT_MAX_DIMS];
  memcpy(so, base, sizeof(int64_t) * (size_t)nd);
  so[dim] = total;
  int64_t count = 1;
  for (int i = 0; i < nd; i++) count *= so[i];
  double *e = malloc(sizeof(double) * (size_t)(count + 1));
  int64_t offset = 0, idx[DT_MAX_DIMS];
  for (int i = 0; i < n; i++) {
    double *v = ref_values(ts[i]);
    const int64_t *s = dt_tensor_shape(ts[i]);
    for (int64_t f = 0; f < dt_tensor_numel(ts[i]); f++) {
      ref_unravel(f, nd, s, idx);
      idx[dim] += offset;
      e[ref_ravel(nd, so, idx)] = v[f];
    }
    offset += sizes[i];
    free(v);
  }
  dt_tensor *out = NULL;
  cr_assert_eq(dt_cat(n, ts, dim - (seed & 1 ? nd : 0), &out), DT_OK, "%s", dt_last_error());
  ref_assert_close(out, nd, so, rd, e, rd == DT_BF16 ? 1e-2 : 0, 0);
  dt_tensor_release(out);
  for (int i = 0; i < n; i++) dt_tensor_release(ts[i]);
  free(e);
}

Test(cat, every_dim_dtypes_strides) {
  int64_t base[] = {3, 4, 5};
  int64_t sizes[] = {2, 1, 3, 0};
  dt_dtype same[] = {DT_F32, DT_F32, DT_F32, DT_F32};
  dt_dtype mixed[] = {DT_I64, DT_F32, DT_BF16, DT_I32};
  dt_dtype ints[] = {DT_I32, DT_U8, DT_I32, DT_BOOL};
  uint64_t seed = 1;
  for (int dim = 0; dim < 3; dim++) {
    for (int s = 0; s < 2; s++) {
      check_cat(3, base, dim, 4, sizes, same, s, seed++);
      check_cat(3, base, dim, 4, sizes, same, s, seed++); /* the negative form of dim */
      check_cat(3, base, dim, 3, sizes, mixed, s, seed++);
      check_cat(3, base, dim, 4, sizes, ints, s, seed++);
    }
  }
  check_cat(1, (int64_t[]){1}, 0, 3, (int64_t[]){4, 0, 2}, mixed, false, 7);
  check_cat(2, (int64_t[]){0, 3}, 1, 2, (int64_t[]){1, 2}, same, true, 8);
}

Test(cat, legacy_empty_tensors_are_skipped) {
  dt_tensor *a = ref_tensor(2, (int64_t[]){2, 1}, DT_F32, (double[]){1, 2});
  dt_tensor *b = ref_tensor(2, (int64_t[]){2, 2}, DT_F32, (double[]){3, 4, 5, 6});
  dt_tensor *e = NULL, *ei = NULL, *out = NULL;
  cr_assert_eq(dt_empty(1, (int64_t[]){0}, DT_F32, &e), DT_OK);
  cr_assert_eq(dt_empty(1, (int64_t[]){0}, DT_I64, &ei), DT_OK);
  cr_assert_eq(dt_cat(4, (dt_tensor *[]){e, a, ei, b}, 1, &out), DT_OK, "%s", dt_last_error());
  ref_assert_close(out, 2, (int64_t[]){2, 3}, DT_F32, (double[]){1, 3, 4, 2, 5, 6}, 0, 0);
  dt_tensor_release(out);
  cr_assert_eq(dt_cat(3, (dt_tensor *[]){a, e, b}, -1, &out), DT_OK);
  ref_assert_close(out, 2, (int64_t[]){2, 3}, DT_F32, (double[]){1, 3, 4, 2, 5, 6}, 0, 0);
  dt_tensor_release(out);
  cr_assert_eq(dt_cat(2, (dt_tensor *[]){e, ei}, 0, &out), DT_OK);
  ref_assert_close(out, 1, (int64_t[]){0}, DT_F32, NULL, 0, 0);
  dt_tensor_release(out);
  dt_tensor_release(a);
  dt_tensor_release(b);
  dt_tensor_release(e);
  dt_tensor_release(ei);
}

Test(cat, bad_input) {
  dt_tensor *a = ref_random(2, (int64_t[]){2, 3}, DT_F32, 0, 1, 1);
  dt_tensor *b = ref_random(2, (int64_t[]){4, 5}, DT_F32, 0, 1, 2);
  dt_tensor *c = ref_random(3, (int64_t[]){2, 3, 1}, DT_F32, 0, 1, 3);
  dt_tensor *s = ref_random(0, NO_DIMS, DT_F32, 0, 1, 4);
  dt_tensor *out = (dt_tensor *)0x1;
  cr_assert_eq(dt_cat(2, (dt_tensor *[]){a, b}, 0, &out), DT_ERR_SHAPE);
  cr_assert_null(out);
  ref_assert_error_mentions("cat: tensor 1 has shape [4, 5]", "tensor 0 has shape [2, 3]");
  cr_assert_eq(dt_cat(2, (dt_tensor *[]){a, c}, 0, &out), DT_ERR_SHAPE);
  ref_assert_error_mentions("cat", "[2, 3, 1]");
  cr_assert_eq(dt_cat(2, (dt_tensor *[]){a, a}, 2, &out), DT_ERR_INVALID);
  ref_assert_error_mentions("cat", "dim 2");
  cr_assert_eq(dt_cat(2, (dt_tensor *[]){a, a}, -3, &out), DT_ERR_INVALID);
  cr_assert_eq(dt_cat(2, (dt_tensor *[]){s, s}, 0, &out), DT_ERR_SHAPE);
  ref_assert_error_mentions("cat", "zero-dimensional");
  cr_assert_eq(dt_cat(0, (dt_tensor *[]){a}, 0, &out), DT_ERR_INVALID);
  ref_assert_error_mentions("cat", "non-empty");
  cr_assert_eq(dt_cat(-1, (dt_tensor *[]){a}, 0, &out), DT_ERR_INVALID);
  cr_assert_eq(dt_cat(2, (dt_tensor *[]){a, NULL}, 0, &out), DT_ERR_INVALID);
  ref_assert_error_mentions("cat", "tensor 1");
  cr_assert_eq(dt_cat(1, NULL, 0, &out), DT_ERR_INVALID);
  cr_assert_null(out);
  cr_assert_eq(dt_cat(1, (dt_tensor *[]){a}, 0, NULL), DT_ERR_INVALID);
  dt_tensor_release(a);
  dt_tensor_release(b);
  dt_tensor_release(c);
  dt_tensor_release(s);
}

/* ---- stack ----------------------------------------------------------------------------------- */

Test(stack, hand_computed) {
  dt_tensor *a = ref_tensor(1, (int64_t[]){2}, DT_F32, (double[]){1, 2});
  dt_tensor *b = ref_tensor(1, (int64_t[]){2}, DT_I32, (double[]){3, 4});
  dt_tensor *out = NULL;
  cr_assert_eq(dt_stack(2, (dt_tensor *[]){a, b}, 0, &out), DT_OK, "%s", dt_last_error());
  ref_assert_close(out, 2, (int64_t[]){2, 2}, DT_F32, (double[]){1, 2, 3, 4}, 0, 0);
  dt_tensor_release(out);
  cr_assert_eq(dt_stack(2, (dt_tensor *[]){a, b}, -1, &out), DT_OK);
  ref_assert_close(out, 2, (int64_t[]){2, 2}, DT_F32, (double[]){1, 3, 2, 4}, 0, 0);
  dt_tensor_release(out);
  dt_tensor *s = ref_tensor(0, NO_DIMS, DT_I64, (double[]){5});
  cr_assert_eq(dt_stack(3, (dt_tensor *[]){s, s, s}, 0, &out), DT_OK);
  ref_assert_close(out, 1, (int64_t[]){3}, DT_I64, (double[]){5, 5, 5}, 0, 0);
  dt_tensor_release(out);
  dt_tensor_release(s);
  dt_tensor_release(a);
  dt_tensor_release(b);
}

static void check_stack(int nd, const int64_t *shape, int dim, int n, const dt_dtype *dtypes,
                        bool strided, uint64_t seed) {
  dt_tensor *ts[8];
  dt_dtype rd = dtypes[0];
  for (int i = 0; i < n; i++) {
    ts[i] = strided && (i & 1) && nd >= 2
                ? ref_random_strided(nd, shape, dtypes[i], -9, 9, seed + (uint64_t)i)
                : ref_random(nd, shape, dtypes[i], -9, 9, seed + (uint64_t)i);
    rd = dt_dtype_promote(rd, dtypes[i]);
  }
  int64_t so[DT_MAX_DIMS];
  for (int d = 0, s = 0; d <= nd; d++) so[d] = d == dim ? n : shape[s++];
  int64_t count = n;
  for (int i = 0; i < nd; i++) count *= shape[i];
  double *e = malloc(sizeof(double) * (size_t)(count + 1));
  int64_t idx[DT_MAX_DIMS], oidx[DT_MAX_DIMS];
  for (int i = 0; i < n; i++) {
    double *v = ref_values(ts[i]);
    for (int64_t f = 0; f < dt_tensor_numel(ts[i]); f++) {
      ref_unravel(f, nd, shape, idx);
      for (int d = 0, s = 0; d <= nd; d++) oidx[d] = d == dim ? i : idx[s++];
      e[ref_ravel(nd + 1, so, oidx)] = v[f];
    }
    free(v);
  }
  dt_tensor *out = NULL;
  cr_assert_eq(dt_stack(n, ts, dim - (seed & 1 ? nd + 1 : 0), &out), DT_OK, "%s", dt_last_error());
  ref_assert_close(out, nd + 1, so, rd, e, rd == DT_BF16 ? 1e-2 : 0, 0);
  dt_tensor_release(out);
  for (int i = 0; i < n; i++) dt_tensor_release(ts[i]);
  free(e);
}

Test(stack, every_dim_dtypes_strides) {
  int64_t shape[] = {2, 3, 4};
  dt_dtype same[] = {DT_F64, DT_F64, DT_F64};
  dt_dtype mixed[] = {DT_I64, DT_BF16, DT_U8};
  uint64_t seed = 1;
  for (int dim = 0; dim <= 3; dim++) {
    for (int s = 0; s < 2; s++) {
      check_stack(3, shape, dim, 3, same, s, seed++);
      check_stack(3, shape, dim, 3, same, s, seed++);
      check_stack(3, shape, dim, 3, mixed, s, seed++);
      check_stack(3, shape, dim, 1, mixed, s, seed++);
    }
  }
  check_stack(2, (int64_t[]){0, 3}, 1, 2, same, true, 5);
}

Test(stack, bad_input) {
  dt_tensor *a = ref_random(2, (int64_t[]){2, 3}, DT_F32, 0, 1, 1);
  dt_tensor *b = ref_random(2, (int64_t[]){3, 2}, DT_F32, 0, 1, 2);
  dt_tensor *deep = ref_random(8, (int64_t[]){1, 1, 1, 1, 1, 1, 1, 1}, DT_F32, 0, 1, 3);
  dt_tensor *out = (dt_tensor *)0x1;
  cr_assert_eq(dt_stack(2, (dt_tensor *[]){a, b}, 0, &out), DT_ERR_SHAPE);
  cr_assert_null(out);
  ref_assert_error_mentions("stack: tensor 1 has shape [3, 2]", "tensor 0 has shape [2, 3]");
  cr_assert_eq(dt_stack(2, (dt_tensor *[]){a, a}, 3, &out), DT_ERR_INVALID);
  ref_assert_error_mentions("stack", "dim 3");
  cr_assert_eq(dt_stack(2, (dt_tensor *[]){a, a}, -4, &out), DT_ERR_INVALID);
  cr_assert_eq(dt_stack(1, (dt_tensor *[]){deep}, 0, &out), DT_ERR_SHAPE);
  cr_assert_eq(dt_stack(0, (dt_tensor *[]){a}, 0, &out), DT_ERR_INVALID);
  ref_assert_error_mentions("stack", "non-empty");
  cr_assert_eq(dt_stack(2, (dt_tensor *[]){NULL, a}, 0, &out), DT_ERR_INVALID);
  cr_assert_null(out);
  dt_tensor_release(a);
  dt_tensor_release(b);
  dt_tensor_release(deep);
}
