/* Shape ops against hand-computed values and naive index arithmetic: view, reshape, flatten,
 * permute, expand, squeeze, unsqueeze. Every view must share storage with its input and see
 * writes through it; whether view succeeds is checked against a brute-force oracle. */
#include "view_helpers.h"

/* Brute-force oracle: a view of t with `shape` exists iff the storage offset of the i-th
 * element (row-major) is affine in the target multi-index of i. */
static bool ref_viewable(const dt_tensor *t, int ndim, const int64_t *shape) {
  int64_t n = dt_tensor_numel(t);
  if (n <= 1) return true;
  int64_t *off = malloc(sizeof(int64_t) * (size_t)n), idx[DT_MAX_DIMS];
  for (int64_t i = 0; i < n; i++) {
    ref_unravel(i, dt_tensor_ndim(t), dt_tensor_shape(t), idx);
    off[i] = 0;
    for (int d = 0; d < dt_tensor_ndim(t); d++) off[i] += idx[d] * dt_tensor_strides(t)[d];
  }
  int64_t stride[DT_MAX_DIMS];
  for (int d = 0; d < ndim; d++) {
    memset(idx, 0, sizeof idx);
    idx[d] = 1;
    stride[d] = shape[d] > 1 ? off[ref_ravel(ndim, shape, idx)] - off[0] : 0;
  }
  bool ok = true;
  for (int64_t i = 0; i < n && ok; i++) {
    ref_unravel(i, ndim, shape, idx);
    int64_t o = off[0];
    for (int d = 0; d < ndim; d++) o += idx[d] * stride[d];
    ok = o == off[i];
  }
  free(off);
  return ok;
}

/* ---- view / reshape ---------------------------------------------------------------------- */

Test(view, hand_computed) {
  dt_tensor *a = iota(1, (int64_t[]){6}, DT_F32), *v = NULL;
  cr_assert_eq(dt_view(a, 2, (int64_t[]){-1, 3}, &v), DT_OK, "%s", dt_last_error());
  ref_assert_close(v, 2, (int64_t[]){2, 3}, DT_F32, (double[]){0, 1, 2, 3, 4, 5}, 0, 0);
  check_write_through(a, v, (int64_t[]){1, 2}, (int64_t[]){5});
  dt_tensor_release(v);
  cr_assert_eq(dt_view(a, 4, (int64_t[]){1, 3, 1, 2}, &v), DT_OK);
  check_shape(v, 4, (int64_t[]){1, 3, 1, 2});
  dt_tensor_release(v);
  /* A transposed [4, 6] seen as [6, 2, 2]: only the contiguous dim is split. */
  dt_tensor *b = iota(2, (int64_t[]){4, 6}, DT_F32), *t = NULL;
  cr_assert_eq(dt_transpose(b, 0, 1, &t), DT_OK);
  cr_assert_eq(dt_view(t, 3, (int64_t[]){6, 2, 2}, &v), DT_OK, "%s", dt_last_error());
  /* v[i][j][k] = t[i][2j + k] = b[2j + k][i] = (2j + k) * 6 + i */
  double expected[24];
  for (int i = 0; i < 6; i++)
    for (int j = 0; j < 2; j++)
      for (int k = 0; k < 2; k++) expected[i * 4 + j * 2 + k] = (2 * j + k) * 6 + i;
  ref_assert_close(v, 3, (int64_t[]){6, 2, 2}, DT_F32, expected, 0, 0);
  check_write_through(b, v, (int64_t[]){5, 1, 0}, (int64_t[]){2, 5});
  dt_tensor_release(v);
  dt_tensor *out = (dt_tensor *)0x1;
  cr_assert_eq(dt_view(t, 1, (int64_t[]){24}, &out), DT_ERR_SHAPE);
  cr_assert_null(out);
  ref_assert_error_mentions("view", "[6, 4]");
  ref_assert_error_mentions("reshape", "[1, 6]");
  /* permute(2, 0, 1) of [2, 3, 4]: the old dims 0 and 1 stay adjacent and mergeable. */
  dt_tensor *c = iota(3, (int64_t[]){2, 3, 4}, DT_F64), *p = NULL;
  cr_assert_eq(dt_permute(c, 3, (int64_t[]){2, 0, 1}, &p), DT_OK);
  cr_assert_eq(dt_view(p, 2, (int64_t[]){4, 6}, &v), DT_OK, "%s", dt_last_error());
  check_same_order(p, v);
  cr_assert(dt_tensor_shares_storage(c, v));
  dt_tensor_release(v);
  cr_assert_eq(dt_view(p, 2, (int64_t[]){8, 3}, &out), DT_ERR_SHAPE);
  cr_assert_null(out);
  dt_tensor_release(a);
  dt_tensor_release(b);
  dt_tensor_release(t);
  dt_tensor_release(c);
  dt_tensor_release(p);
}

/* Splits numel into up to `max_dims` random factors (with some size-1 dims). */
static int random_factor_shape(int64_t numel, int max_dims, uint64_t *state, int64_t *shape) {
  int nd = 0;
  int64_t left = numel;
  while (nd < max_dims - 1) {
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    int64_t pick = (int64_t)((*state >> 33) % 6) + 1;
    if (pick == 6) {
      shape[nd++] = 1;
      continue;
    }
    if (left % pick != 0 || pick == 1) break;
    shape[nd++] = pick;
    left /= pick;
  }
  shape[nd++] = left;
  return nd;
}

Test(view, random_against_oracle) {
  const int64_t shapes[][4] = {{4, 6, 1, 5}, {3, 1, 2, 4}, {2, 3, 4, 2}, {5, 4, 3, 1}};
  const int64_t perms[][4] = {{0, 1, 2, 3}, {1, 0, 2, 3}, {0, 1, 3, 2}, {2, 3, 0, 1}, {3, 2, 1, 0}};
  uint64_t state = 12345;
  int viewed = 0, refused = 0;
  for (int s = 0; s < 4; s++) {
    for (int layout = 0; layout < 3; layout++) {
      for (int p = 0; p < 5; p++) {
        dt_tensor *base = make_input(layout, 4, shapes[s], DT_F32, (uint64_t)(s * 31 + layout));
        dt_tensor *in = NULL;
        cr_assert_eq(dt_permute(base, 4, perms[p], &in), DT_OK, "%s", dt_last_error());
        for (int trial = 0; trial < 12; trial++) {
          int64_t target[DT_MAX_DIMS];
          int nd = random_factor_shape(dt_tensor_numel(in), 5, &state, target);
          if (trial == 0) nd = 1, target[0] = dt_tensor_numel(in);
          bool can = ref_viewable(in, nd, target);
          dt_tensor *v = (dt_tensor *)0x1, *r = NULL;
          dt_status st = dt_view(in, nd, target, &v);
          cr_assert_eq(st, can ? DT_OK : DT_ERR_SHAPE, "view: status %d, oracle %d", st, can);
          cr_assert_eq(dt_reshape(in, nd, target, &r), DT_OK, "%s", dt_last_error());
          check_shape(r, nd, target);
          check_same_order(in, r);
          cr_assert_eq(dt_tensor_shares_storage(in, r), can);
          if (can) {
            viewed++;
            check_shape(v, nd, target);
            check_same_order(in, v);
            cr_assert(dt_tensor_shares_storage(in, v));
          } else {
            refused++;
            cr_assert_null(v);
          }
          dt_tensor_release(v == (dt_tensor *)0x1 ? NULL : v);
          dt_tensor_release(r);
        }
        dt_tensor_release(in);
        dt_tensor_release(base);
      }
    }
  }
  cr_assert_gt(viewed, 50);
  cr_assert_gt(refused, 50);
}

Test(view, every_dtype_and_edge_shapes) {
  for (int i = 0; i < N_DTYPES; i++) {
    dt_tensor *a = make_input(1, 2, (int64_t[]){3, 4}, all_dtypes[i], (uint64_t)i), *r = NULL;
    cr_assert_eq(dt_reshape(a, 3, (int64_t[]){2, -1, 3}, &r), DT_OK, "%s", dt_last_error());
    cr_assert_eq(dt_tensor_dtype(r), all_dtypes[i]);
    check_same_order(a, r);
    cr_assert(!dt_tensor_shares_storage(a, r));
    dt_tensor_release(a);
    dt_tensor_release(r);
  }
  /* 0-d <-> [1, 1], and empty tensors. */
  dt_tensor *s = NULL, *v = NULL, *back = NULL;
  cr_assert_eq(dt_full(0, NULL, 4.5, DT_F32, &s), DT_OK);
  cr_assert_eq(dt_view(s, 2, (int64_t[]){1, -1}, &v), DT_OK, "%s", dt_last_error());
  ref_assert_close(v, 2, (int64_t[]){1, 1}, DT_F32, (double[]){4.5}, 0, 0);
  cr_assert_eq(dt_view(v, 0, NULL, &back), DT_OK, "%s", dt_last_error());
  ref_assert_close(back, 0, NULL, DT_F32, (double[]){4.5}, 0, 0);
  dt_tensor_release(s);
  dt_tensor_release(v);
  dt_tensor_release(back);
  dt_tensor *e = NULL;
  cr_assert_eq(dt_zeros(2, (int64_t[]){0, 4}, DT_F32, &e), DT_OK);
  cr_assert_eq(dt_view(e, 3, (int64_t[]){2, 0, 2}, &v), DT_OK, "%s", dt_last_error());
  check_shape(v, 3, (int64_t[]){2, 0, 2});
  dt_tensor_release(v);
  cr_assert_eq(dt_view(e, 2, (int64_t[]){0, -1}, &v), DT_ERR_SHAPE);
  ref_assert_error_mentions("view", "could be any size");
  dt_tensor_release(e);
  /* An expanded (stride-0) tensor: merging the broadcast dim with a real one needs a copy. */
  dt_tensor *row = iota(1, (int64_t[]){4}, DT_F32), *x = NULL, *r = NULL;
  cr_assert_eq(dt_expand(row, 2, (int64_t[]){3, 4}, &x), DT_OK);
  cr_assert_eq(dt_view(x, 1, (int64_t[]){12}, &v), DT_ERR_SHAPE);
  cr_assert_eq(dt_view(x, 3, (int64_t[]){3, 2, 2}, &v), DT_OK, "%s", dt_last_error());
  check_same_order(x, v);
  dt_tensor_release(v);
  cr_assert_eq(dt_reshape(x, 1, (int64_t[]){12}, &r), DT_OK);
  ref_assert_close(r, 1, (int64_t[]){12}, DT_F32, (double[]){0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3}, 0,
                   0);
  cr_assert(!dt_tensor_shares_storage(x, r));
  dt_tensor_release(r);
  dt_tensor_release(x);
  dt_tensor_release(row);
}

Test(view, bad_input) {
  dt_tensor *a = iota(2, (int64_t[]){2, 3}, DT_F32), *out = (dt_tensor *)0x1;
  cr_assert_eq(dt_view(a, 2, (int64_t[]){4, 2}, &out), DT_ERR_SHAPE);
  cr_assert_null(out);
  ref_assert_error_mentions("view", "[4, 2]");
  ref_assert_error_mentions("[2, 3]", "6 elements");
  cr_assert_eq(dt_reshape(a, 2, (int64_t[]){-1, -1}, &out), DT_ERR_INVALID);
  ref_assert_error_mentions("reshape", "more than one -1");
  cr_assert_eq(dt_reshape(a, 2, (int64_t[]){-2, 3}, &out), DT_ERR_INVALID);
  ref_assert_error_mentions("reshape", "-2");
  cr_assert_eq(dt_reshape(a, 2, (int64_t[]){4, -1}, &out), DT_ERR_SHAPE);
  ref_assert_error_mentions("reshape", "[4, -1]");
  cr_assert_eq(dt_view(a, 9, (int64_t[]){1, 1, 1, 1, 1, 1, 1, 2, 3}, &out), DT_ERR_INVALID);
  ref_assert_error_mentions("view", "9 entries");
  cr_assert_eq(dt_view(a, -1, NULL, &out), DT_ERR_INVALID);
  cr_assert_eq(dt_view(a, 2, NULL, &out), DT_ERR_INVALID);
  ref_assert_error_mentions("view", "NULL");
  cr_assert_null(out);
  cr_assert_eq(dt_view(NULL, 1, (int64_t[]){6}, &out), DT_ERR_INVALID);
  ref_assert_error_mentions("view", "input 0");
  cr_assert_eq(dt_view(a, 1, (int64_t[]){6}, NULL), DT_ERR_INVALID);
  cr_assert_eq(dt_reshape(a, 3, (int64_t[]){INT64_MAX / 2, 4, 0}, &out), DT_ERR_SHAPE);
  cr_assert_eq(dt_reshape(a, 3, (int64_t[]){INT64_MAX / 2, 4, -1}, &out), DT_ERR_SHAPE);
  cr_assert_null(out);
  dt_tensor_release(a);
}

/* ---- flatten, squeeze, unsqueeze ----------------------------------------------------------- */

Test(flatten, shapes_views_and_copies) {
  dt_tensor *a = make_input(0, 4, (int64_t[]){2, 3, 4, 5}, DT_F32, 1), *f = NULL;
  cr_assert_eq(dt_flatten(a, 1, 2, &f), DT_OK, "%s", dt_last_error());
  check_shape(f, 3, (int64_t[]){2, 12, 5});
  check_same_order(a, f);
  cr_assert(dt_tensor_shares_storage(a, f));
  dt_tensor_release(f);
  cr_assert_eq(dt_flatten(a, 0, -1, &f), DT_OK);
  check_shape(f, 1, (int64_t[]){120});
  dt_tensor_release(f);
  cr_assert_eq(dt_flatten(a, -2, -2, &f), DT_OK);
  check_shape(f, 4, (int64_t[]){2, 3, 4, 5});
  cr_assert(dt_tensor_shares_storage(a, f));
  dt_tensor_release(f);
  dt_tensor_release(a);
  /* Strided: the last two dims are transposed in storage, so merging them copies, while
   * merging the first two does not. */
  dt_tensor *b = make_input(1, 4, (int64_t[]){2, 3, 4, 5}, DT_I32, 2);
  cr_assert_eq(dt_flatten(b, 2, 3, &f), DT_OK);
  check_shape(f, 3, (int64_t[]){2, 3, 20});
  check_same_order(b, f);
  cr_assert(!dt_tensor_shares_storage(b, f));
  cr_assert(dt_tensor_is_contiguous(f));
  dt_tensor_release(f);
  cr_assert_eq(dt_flatten(b, 0, 1, &f), DT_OK);
  check_shape(f, 3, (int64_t[]){6, 4, 5});
  check_same_order(b, f);
  cr_assert(dt_tensor_shares_storage(b, f));
  dt_tensor_release(f);
  dt_tensor_release(b);
  /* A 0-d tensor flattens to [1]. */
  dt_tensor *s = NULL;
  cr_assert_eq(dt_full(0, NULL, 3, DT_I64, &s), DT_OK);
  cr_assert_eq(dt_flatten(s, 0, -1, &f), DT_OK, "%s", dt_last_error());
  ref_assert_close(f, 1, (int64_t[]){1}, DT_I64, (double[]){3}, 0, 0);
  dt_tensor_release(f);
  dt_tensor_release(s);
}

Test(flatten, bad_input) {
  dt_tensor *a = iota(3, (int64_t[]){2, 3, 4}, DT_F32), *out = (dt_tensor *)0x1;
  cr_assert_eq(dt_flatten(a, 2, 1, &out), DT_ERR_INVALID);
  cr_assert_null(out);
  ref_assert_error_mentions("flatten.using_ints", "start_dim 2");
  cr_assert_eq(dt_flatten(a, 0, 3, &out), DT_ERR_INVALID);
  ref_assert_error_mentions("flatten.using_ints", "dim 3");
  cr_assert_eq(dt_flatten(NULL, 0, 1, &out), DT_ERR_INVALID);
  cr_assert_eq(dt_flatten(a, 0, 1, NULL), DT_ERR_INVALID);
  dt_tensor_release(a);
}

Test(squeeze, shapes_and_values) {
  dt_tensor *a = make_input(1, 5, (int64_t[]){1, 3, 1, 4, 1}, DT_F64, 3), *s = NULL;
  cr_assert_eq(dt_squeeze(a, &s), DT_OK, "%s", dt_last_error());
  check_shape(s, 2, (int64_t[]){3, 4});
  check_same_order(a, s);
  check_write_through(a, s, (int64_t[]){2, 1}, (int64_t[]){0, 2, 0, 1, 0});
  dt_tensor_release(s);
  cr_assert_eq(dt_squeeze_dim(a, -3, &s), DT_OK);
  check_shape(s, 4, (int64_t[]){1, 3, 4, 1});
  check_same_order(a, s);
  dt_tensor_release(s);
  cr_assert_eq(dt_squeeze_dim(a, 1, &s), DT_OK); /* size 3: a no-op view */
  check_shape(s, 5, (int64_t[]){1, 3, 1, 4, 1});
  cr_assert(dt_tensor_shares_storage(a, s));
  dt_tensor_release(s);
  dt_tensor_release(a);
  dt_tensor *z = NULL;
  cr_assert_eq(dt_full(0, NULL, 2, DT_F32, &z), DT_OK);
  cr_assert_eq(dt_squeeze(z, &s), DT_OK);
  check_shape(s, 0, NULL);
  dt_tensor_release(s);
  cr_assert_eq(dt_squeeze_dim(z, -1, &s), DT_OK);
  check_shape(s, 0, NULL);
  dt_tensor_release(s);
  dt_tensor_release(z);
}

Test(unsqueeze, every_position) {
  dt_tensor *a = make_input(1, 3, (int64_t[]){2, 3, 4}, DT_BF16, 4);
  for (int64_t d = -4; d <= 3; d++) {
    dt_tensor *u = NULL;
    cr_assert_eq(dt_unsqueeze(a, d, &u), DT_OK, "%s", dt_last_error());
    int pos = (int)(d < 0 ? d + 4 : d);
    int64_t want[4];
    for (int i = 0, j = 0; i < 4; i++) want[i] = i == pos ? 1 : dt_tensor_shape(a)[j++];
    check_shape(u, 4, want);
    check_same_order(a, u);
    cr_assert(dt_tensor_shares_storage(a, u));
    dt_tensor *back = NULL;
    cr_assert_eq(dt_squeeze_dim(u, d, &back), DT_OK);
    check_shape(back, 3, (int64_t[]){2, 3, 4});
    dt_tensor_release(back);
    dt_tensor_release(u);
  }
  dt_tensor *c = iota(2, (int64_t[]){2, 3}, DT_F32), *u = NULL;
  cr_assert_eq(dt_unsqueeze(c, 2, &u), DT_OK);
  cr_assert(dt_tensor_is_contiguous(u));
  dt_tensor_release(u);
  dt_tensor_release(c);
  dt_tensor_release(a);
}

Test(squeeze, bad_input) {
  dt_tensor *a = iota(2, (int64_t[]){2, 1}, DT_F32), *out = (dt_tensor *)0x1;
  cr_assert_eq(dt_squeeze_dim(a, 2, &out), DT_ERR_INVALID);
  cr_assert_null(out);
  ref_assert_error_mentions("squeeze.dim", "dim 2");
  cr_assert_eq(dt_unsqueeze(a, 3, &out), DT_ERR_INVALID);
  ref_assert_error_mentions("unsqueeze", "dim 3");
  cr_assert_eq(dt_unsqueeze(a, -4, &out), DT_ERR_INVALID);
  cr_assert_eq(dt_squeeze(NULL, &out), DT_ERR_INVALID);
  ref_assert_error_mentions("squeeze", "input 0");
  cr_assert_eq(dt_squeeze(a, NULL), DT_ERR_INVALID);
  dt_tensor *big = NULL;
  cr_assert_eq(dt_zeros(8, (int64_t[]){1, 1, 1, 1, 1, 1, 1, 2}, DT_F32, &big), DT_OK);
  cr_assert_eq(dt_unsqueeze(big, 0, &out), DT_ERR_INVALID);
  ref_assert_error_mentions("unsqueeze", "8-d");
  cr_assert_null(out);
  dt_tensor_release(big);
  dt_tensor_release(a);
}

/* ---- permute, expand ------------------------------------------------------------------------ */

static void permute_map(const int64_t *oi, int64_t *ii, const void *ctx) {
  const int64_t *dims = ctx; /* normalized, 4 entries */
  for (int i = 0; i < 4; i++) ii[dims[i]] = oi[i];
}

Test(permute, against_reference) {
  dt_tensor *a = iota(2, (int64_t[]){2, 3}, DT_F32), *p = NULL;
  cr_assert_eq(dt_permute(a, 2, (int64_t[]){-1, 0}, &p), DT_OK, "%s", dt_last_error());
  ref_assert_close(p, 2, (int64_t[]){3, 2}, DT_F32, (double[]){0, 3, 1, 4, 2, 5}, 0, 0);
  check_write_through(a, p, (int64_t[]){2, 0}, (int64_t[]){0, 2});
  dt_tensor_release(p);
  dt_tensor_release(a);
  const int64_t perms[][4] = {{3, 1, 0, 2}, {0, 1, 2, 3}, {1, 3, 2, 0}};
  for (int layout = 0; layout < 3; layout++) {
    for (int k = 0; k < 3; k++) {
      dt_dtype dt = all_dtypes[(layout * 3 + k) % N_DTYPES];
      dt_tensor *in = make_input(layout, 4, (int64_t[]){3, 1, 4, 5}, dt, (uint64_t)k);
      cr_assert_eq(dt_permute(in, 4, perms[k], &p), DT_OK, "%s", dt_last_error());
      check_gather(in, p, permute_map, perms[k]);
      cr_assert(dt_tensor_shares_storage(in, p));
      dt_tensor_release(p);
      dt_tensor_release(in);
    }
  }
}

Test(permute, bad_input) {
  dt_tensor *a = iota(3, (int64_t[]){2, 3, 4}, DT_F32), *out = (dt_tensor *)0x1;
  cr_assert_eq(dt_permute(a, 2, (int64_t[]){0, 1}, &out), DT_ERR_INVALID);
  cr_assert_null(out);
  ref_assert_error_mentions("permute", "2 entries for a 3-d");
  cr_assert_eq(dt_permute(a, 3, (int64_t[]){0, 1, -3}, &out), DT_ERR_INVALID);
  ref_assert_error_mentions("permute", "repeat dim 0");
  cr_assert_eq(dt_permute(a, 3, (int64_t[]){0, 1, 3}, &out), DT_ERR_INVALID);
  ref_assert_error_mentions("permute", "dim 3");
  cr_assert_eq(dt_permute(a, 3, NULL, &out), DT_ERR_INVALID);
  cr_assert_eq(dt_permute(NULL, 3, (int64_t[]){0, 1, 2}, &out), DT_ERR_INVALID);
  cr_assert_null(out);
  dt_tensor_release(a);
}

typedef struct expand_ctx {
  int in_ndim, out_ndim;
  const int64_t *in_shape;
} expand_ctx;

static void expand_map(const int64_t *oi, int64_t *ii, const void *opaque) {
  const expand_ctx *c = opaque;
  int lead = c->out_ndim - c->in_ndim;
  for (int i = 0; i < c->in_ndim; i++) ii[i] = c->in_shape[i] == 1 ? 0 : oi[i + lead];
}

Test(expand, against_reference) {
  dt_tensor *a = iota(2, (int64_t[]){3, 1}, DT_F32), *e = NULL;
  cr_assert_eq(dt_expand(a, 3, (int64_t[]){2, -1, 4}, &e), DT_OK, "%s", dt_last_error());
  double expected[24];
  for (int i = 0; i < 24; i++) expected[i] = (i / 4) % 3;
  ref_assert_close(e, 3, (int64_t[]){2, 3, 4}, DT_F32, expected, 0, 0);
  cr_assert_eq(dt_tensor_strides(e)[0], 0);
  cr_assert_eq(dt_tensor_strides(e)[2], 0);
  check_write_through(a, e, (int64_t[]){1, 2, 3}, (int64_t[]){2, 0});
  dt_tensor_release(e);
  dt_tensor_release(a);
  for (int layout = 0; layout < 3; layout++) {
    for (int k = 0; k < N_DTYPES; k++) {
      int64_t in_shape[] = {4, 1, 3};
      dt_tensor *in = make_input(layout, 3, in_shape, all_dtypes[k], (uint64_t)k);
      int64_t target[] = {2, 4, 5, -1};
      cr_assert_eq(dt_expand(in, 4, target, &e), DT_OK, "%s", dt_last_error());
      check_shape(e, 4, (int64_t[]){2, 4, 5, 3});
      expand_ctx ctx = {3, 4, in_shape};
      check_gather(in, e, expand_map, &ctx);
      cr_assert(dt_tensor_shares_storage(in, e));
      dt_tensor_release(e);
      dt_tensor_release(in);
    }
  }
  /* Size-1 dims may also expand to 0. */
  dt_tensor *s = iota(1, (int64_t[]){1}, DT_F32);
  cr_assert_eq(dt_expand(s, 2, (int64_t[]){3, 0}, &e), DT_OK);
  check_shape(e, 2, (int64_t[]){3, 0});
  dt_tensor_release(e);
  dt_tensor_release(s);
}

Test(expand, bad_input) {
  dt_tensor *a = iota(2, (int64_t[]){3, 2}, DT_F32), *out = (dt_tensor *)0x1;
  cr_assert_eq(dt_expand(a, 2, (int64_t[]){3, 4}, &out), DT_ERR_SHAPE);
  cr_assert_null(out);
  ref_assert_error_mentions("expand", "size 2 to 4");
  cr_assert_eq(dt_expand(a, 1, (int64_t[]){2}, &out), DT_ERR_SHAPE);
  ref_assert_error_mentions("expand", "fewer dims");
  cr_assert_eq(dt_expand(a, 3, (int64_t[]){-1, 3, 2}, &out), DT_ERR_INVALID);
  ref_assert_error_mentions("expand", "leading dim 0");
  cr_assert_eq(dt_expand(a, 2, (int64_t[]){-3, 2}, &out), DT_ERR_INVALID);
  cr_assert_eq(dt_expand(a, 2, NULL, &out), DT_ERR_INVALID);
  cr_assert_eq(dt_expand(NULL, 2, (int64_t[]){3, 2}, &out), DT_ERR_INVALID);
  cr_assert_null(out);
  dt_tensor_release(a);
}

Test(view, outlives_base_and_frees) {
  dt_tensor *a = iota(2, (int64_t[]){4, 6}, DT_F32), *t = NULL, *v = NULL, *pieces[4];
  cr_assert_eq(dt_transpose(a, 0, 1, &t), DT_OK);
  cr_assert_eq(dt_tensor_refcount(a), 1); /* views hold the storage, not the handle */
  cr_assert_eq(dt_narrow(t, 0, 2, 3, &v), DT_OK);
  int n = 0;
  cr_assert_eq(dt_chunk(v, 2, 1, pieces, 4, &n), DT_OK);
  dt_tensor_release(a);
  dt_tensor_release(t);
  cr_assert_eq(dt_tensor_refcount(v), 1);
  /* v[i][j] = a[j][2 + i] = 6j + 2 + i */
  ref_assert_close(v, 2, (int64_t[]){3, 4}, DT_F32,
                   (double[]){2, 8, 14, 20, 3, 9, 15, 21, 4, 10, 16, 22}, 0, 0);
  dt_tensor_release(v);
  ref_assert_close(pieces[1], 2, (int64_t[]){3, 2}, DT_F32, (double[]){14, 20, 15, 21, 16, 22}, 0,
                   0);
  for (int i = 0; i < n; i++) dt_tensor_release(pieces[i]);
}
