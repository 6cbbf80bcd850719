/* narrow, slice, select, split, split_with_sizes and chunk against hand-computed values and
 * naive index arithmetic, on contiguous and strided inputs of every dtype. */
#include "view_helpers.h"

/* ---- narrow, slice, select ------------------------------------------------------------------ */

Test(slice, python_clamping_hand_computed) {
  dt_tensor *a = iota(1, (int64_t[]){10}, DT_I64), *s = NULL;
  struct {
    int64_t start, end, step;
    int n;
    double v[10];
  } cases[] = {
      {-3, INT64_MAX, 1, 3, {7, 8, 9}},
      {-100, 3, 1, 3, {0, 1, 2}},
      {5, 2, 1, 0, {0}},
      {1, 10, 3, 3, {1, 4, 7}},
      {2, 100, INT64_MAX, 1, {2}},
      {12, 20, 1, 0, {0}},
      {-1, -100, 1, 0, {0}},
      {INT64_MIN, INT64_MAX, 4, 3, {0, 4, 8}},
      {0, -1, 2, 5, {0, 2, 4, 6, 8}},
      {9, 10, 1, 1, {9}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    cr_assert_eq(dt_slice(a, 0, cases[i].start, cases[i].end, cases[i].step, &s), DT_OK, "%s",
                 dt_last_error());
    ref_assert_close(s, 1, (int64_t[]){cases[i].n}, DT_I64, cases[i].v, 0, 0);
    cr_assert(dt_tensor_shares_storage(a, s));
    dt_tensor_release(s);
  }
  cr_assert_eq(dt_slice(a, 0, 1, 10, 3, &s), DT_OK);
  check_write_through(a, s, (int64_t[]){2}, (int64_t[]){7});
  dt_tensor_release(s);
  dt_tensor_release(a);
}

Test(slice, narrow_select_against_reference) {
  int64_t shape[] = {5, 4, 6};
  for (int layout = 0; layout < 3; layout++) {
    for (int k = 0; k < N_DTYPES; k++) {
      dt_tensor *in = make_input(layout, 3, shape, all_dtypes[k], (uint64_t)(layout * 10 + k));
      for (int dim = 0; dim < 3; dim++) {
        int64_t size = shape[dim];
        dt_tensor *out = NULL;
        /* slice start:end:step with negative start */
        cr_assert_eq(dt_slice(in, dim - 3, -size + 1, size, 2, &out), DT_OK, "%s", dt_last_error());
        slice_ctx c = {3, dim, 1, 2, false};
        check_gather(in, out, slice_map, &c);
        cr_assert_eq(dt_tensor_shape(out)[dim], size / 2);
        dt_tensor_release(out);
        /* narrow with a negative start */
        cr_assert_eq(dt_narrow(in, dim, -3, 2, &out), DT_OK, "%s", dt_last_error());
        c = (slice_ctx){3, dim, size - 3, 1, false};
        check_gather(in, out, slice_map, &c);
        cr_assert_eq(dt_tensor_shape(out)[dim], 2);
        dt_tensor_release(out);
        /* select, negative index too */
        for (int64_t idx = -size; idx < size; idx += 3) {
          cr_assert_eq(dt_select(in, dim, idx, &out), DT_OK, "%s", dt_last_error());
          c = (slice_ctx){3, dim, idx < 0 ? idx + size : idx, 0, true};
          cr_assert_eq(dt_tensor_ndim(out), 2);
          check_gather(in, out, slice_map, &c);
          cr_assert(dt_tensor_shares_storage(in, out));
          dt_tensor_release(out);
        }
      }
      dt_tensor_release(in);
    }
  }
  /* Hand-computed select and narrow, with writes through the views. */
  dt_tensor *a = iota(2, (int64_t[]){3, 4}, DT_F32), *v = NULL;
  cr_assert_eq(dt_select(a, 1, -1, &v), DT_OK);
  ref_assert_close(v, 1, (int64_t[]){3}, DT_F32, (double[]){3, 7, 11}, 0, 0);
  check_write_through(a, v, (int64_t[]){1}, (int64_t[]){1, 3});
  dt_tensor_release(v);
  cr_assert_eq(dt_narrow(a, 0, 1, 2, &v), DT_OK);
  ref_assert_close(v, 2, (int64_t[]){2, 4}, DT_F32, (double[]){4, 5, 6, 77, 8, 9, 10, 11}, 0, 0);
  dt_tensor_release(v);
  cr_assert_eq(dt_narrow(a, 0, 3, 0, &v), DT_OK); /* empty, at the end */
  check_shape(v, 2, (int64_t[]){0, 4});
  dt_tensor_release(v);
  dt_tensor *row = NULL;
  cr_assert_eq(dt_select(a, 0, 2, &row), DT_OK);
  cr_assert_eq(dt_select(row, 0, 1, &v), DT_OK); /* down to 0-d */
  ref_assert_close(v, 0, NULL, DT_F32, (double[]){9}, 0, 0);
  dt_tensor_release(v);
  dt_tensor_release(row);
  dt_tensor_release(a);
}

Test(slice, bad_input) {
  dt_tensor *a = iota(2, (int64_t[]){3, 4}, DT_F32), *out = (dt_tensor *)0x1, *s = NULL;
  cr_assert_eq(dt_slice(a, 1, 0, 4, 0, &out), DT_ERR_INVALID);
  cr_assert_null(out);
  ref_assert_error_mentions("slice.Tensor", "step 0");
  cr_assert_eq(dt_slice(a, 1, 0, 4, -1, &out), DT_ERR_INVALID);
  cr_assert_eq(dt_slice(a, 2, 0, 4, 1, &out), DT_ERR_INVALID);
  ref_assert_error_mentions("slice.Tensor", "dim 2");
  cr_assert_eq(dt_select(a, 0, 3, &out), DT_ERR_INDEX);
  ref_assert_error_mentions("select.int", "index 3");
  cr_assert_eq(dt_select(a, 1, -5, &out), DT_ERR_INDEX);
  ref_assert_error_mentions("select.int", "[3, 4]");
  cr_assert_eq(dt_select(a, -3, 0, &out), DT_ERR_INVALID);
  cr_assert_eq(dt_narrow(a, 1, 5, 0, &out), DT_ERR_INDEX);
  ref_assert_error_mentions("narrow", "start 5");
  cr_assert_eq(dt_narrow(a, 1, 2, 3, &out), DT_ERR_INDEX);
  ref_assert_error_mentions("narrow", "length 3");
  cr_assert_eq(dt_narrow(a, 1, -5, 1, &out), DT_ERR_INDEX);
  cr_assert_eq(dt_narrow(a, 1, 0, -1, &out), DT_ERR_INVALID);
  cr_assert_eq(dt_narrow(a, 1, 1, INT64_MAX, &out), DT_ERR_INDEX);
  cr_assert_eq(dt_narrow(NULL, 0, 0, 1, &out), DT_ERR_INVALID);
  cr_assert_eq(dt_select(a, 0, 0, NULL), DT_ERR_INVALID);
  cr_assert_null(out);
  cr_assert_eq(dt_full(0, NULL, 1, DT_F32, &s), DT_OK);
  cr_assert_eq(dt_select(s, 0, 0, &out), DT_ERR_INVALID);
  ref_assert_error_mentions("select.int", "0-d");
  cr_assert_eq(dt_narrow(s, 0, 0, 1, &out), DT_ERR_INVALID);
  cr_assert_eq(dt_slice(s, 0, 0, 1, 1, &out), DT_ERR_INVALID);
  cr_assert_null(out);
  dt_tensor_release(s);
  dt_tensor_release(a);
}

/* ---- split, split_with_sizes, chunk ------------------------------------------------------- */

/* Checks pieces: sizes along dim, shared storage, and values against the input. */
static void check_pieces(dt_tensor *in, int dim, dt_tensor **outs, int n, const int64_t *sizes) {
  int64_t start = 0;
  for (int i = 0; i < n; i++) {
    cr_assert_not_null(outs[i]);
    cr_assert_eq(dt_tensor_shape(outs[i])[dim], sizes[i], "piece %d: size %lld, expected %lld", i,
                 (long long)dt_tensor_shape(outs[i])[dim], (long long)sizes[i]);
    cr_assert(dt_tensor_shares_storage(in, outs[i]));
    slice_ctx c = {dt_tensor_ndim(in), dim, start, 1, false};
    check_gather(in, outs[i], slice_map, &c);
    start += sizes[i];
    dt_tensor_release(outs[i]);
  }
}

Test(chunk, torch_semantics) {
  struct {
    int64_t size, chunks;
    int n;
    int64_t sizes[8];
  } cases[] = {
      {5, 4, 3, {2, 2, 1}}, {7, 3, 3, {3, 3, 1}}, {2, 5, 2, {1, 1}},
      {6, 4, 3, {2, 2, 2}}, {0, 3, 3, {0, 0, 0}}, {8, 8, 8, {1, 1, 1, 1, 1, 1, 1, 1}},
      {1, 1, 1, {1}},       {9, 2, 2, {5, 4}},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    for (int layout = 0; layout < 3; layout++) {
      dt_tensor *in = make_input(layout, 2, (int64_t[]){3, cases[k].size}, DT_F32, k);
      dt_tensor *outs[8];
      int n = -1;
      cr_assert_eq(dt_chunk(in, cases[k].chunks, -1, outs, 8, &n), DT_OK, "%s", dt_last_error());
      cr_assert_eq(n, cases[k].n, "size %lld in %lld chunks: %d pieces", (long long)cases[k].size,
                   (long long)cases[k].chunks, n);
      check_pieces(in, 1, outs, n, cases[k].sizes);
      dt_tensor_release(in);
    }
  }
  /* More pieces than DT_OP_MAX_META (8) still work: views need no metas. */
  dt_tensor *a = iota(1, (int64_t[]){20}, DT_I32), *outs[20];
  int n = 0;
  cr_assert_eq(dt_chunk(a, 20, 0, outs, 20, &n), DT_OK, "%s", dt_last_error());
  cr_assert_eq(n, 20);
  int64_t ones[20];
  for (int i = 0; i < 20; i++) ones[i] = 1;
  check_pieces(a, 0, outs, n, ones);
  dt_tensor_release(a);
}

Test(split, uneven_and_with_sizes) {
  dt_tensor *a = make_input(1, 3, (int64_t[]){2, 7, 3}, DT_F64, 9), *outs[8];
  int n = -1;
  cr_assert_eq(dt_split(a, 3, 1, outs, 8, &n), DT_OK, "%s", dt_last_error());
  cr_assert_eq(n, 3);
  check_pieces(a, 1, outs, n, (int64_t[]){3, 3, 1});
  cr_assert_eq(dt_split(a, 10, 1, outs, 1, &n), DT_OK);
  cr_assert_eq(n, 1);
  check_pieces(a, 1, outs, n, (int64_t[]){7});
  cr_assert_eq(dt_split(a, 1, -1, outs, 8, &n), DT_OK);
  check_pieces(a, 2, outs, n, (int64_t[]){1, 1, 1});
  cr_assert_eq(dt_split_with_sizes(a, 4, (int64_t[]){2, 0, 4, 1}, 1, outs, 4, &n), DT_OK, "%s",
               dt_last_error());
  cr_assert_eq(n, 4);
  check_pieces(a, 1, outs, n, (int64_t[]){2, 0, 4, 1});
  dt_tensor_release(a);
  /* A dim of size 0: split gives one empty piece, split_size 0 is allowed. */
  dt_tensor *e = NULL;
  cr_assert_eq(dt_zeros(2, (int64_t[]){0, 3}, DT_F32, &e), DT_OK);
  cr_assert_eq(dt_split(e, 2, 0, outs, 8, &n), DT_OK);
  cr_assert_eq(n, 1);
  check_pieces(e, 0, outs, n, (int64_t[]){0});
  cr_assert_eq(dt_split(e, 0, 0, outs, 8, &n), DT_OK);
  check_pieces(e, 0, outs, n, (int64_t[]){0});
  cr_assert_eq(dt_split_with_sizes(e, 0, NULL, 0, outs, 8, &n), DT_OK, "%s", dt_last_error());
  cr_assert_eq(n, 0);
  dt_tensor_release(e);
  /* Writes through a piece land in the base. */
  dt_tensor *b = iota(1, (int64_t[]){6}, DT_F32);
  cr_assert_eq(dt_split(b, 4, 0, outs, 2, &n), DT_OK);
  check_write_through(b, outs[1], (int64_t[]){1}, (int64_t[]){5});
  dt_tensor_release(outs[0]);
  dt_tensor_release(outs[1]);
  dt_tensor_release(b);
}

Test(split, bad_input) {
  dt_tensor *a = iota(2, (int64_t[]){3, 5}, DT_F32), *outs[4], *s = NULL;
  for (int i = 0; i < 4; i++) outs[i] = (dt_tensor *)0x1;
  int n = 7;
  cr_assert_eq(dt_chunk(a, 5, 1, outs, 4, &n), DT_ERR_INVALID); /* 5 pieces, capacity 4 */
  ref_assert_error_mentions("chunk", "capacity 4");
  cr_assert_eq(n, 0);
  for (int i = 0; i < 4; i++) cr_assert_null(outs[i]);
  cr_assert_eq(dt_chunk(a, 0, 1, outs, 4, &n), DT_ERR_INVALID);
  ref_assert_error_mentions("chunk", "chunks 0");
  cr_assert_eq(dt_chunk(a, 2, 2, outs, 4, &n), DT_ERR_INVALID);
  ref_assert_error_mentions("chunk", "dim 2");
  cr_assert_eq(dt_split(a, 0, 1, outs, 4, &n), DT_ERR_INVALID);
  ref_assert_error_mentions("split.Tensor", "split_size 0");
  cr_assert_eq(dt_split(a, -2, 1, outs, 4, &n), DT_ERR_INVALID);
  cr_assert_eq(dt_split(a, 1, 1, outs, 4, &n), DT_ERR_INVALID);
  ref_assert_error_mentions("split.Tensor", "5 pieces");
  cr_assert_eq(dt_split_with_sizes(a, 2, (int64_t[]){2, 2}, 1, outs, 4, &n), DT_ERR_SHAPE);
  ref_assert_error_mentions("split_with_sizes", "[2, 2]");
  cr_assert_eq(dt_split_with_sizes(a, 2, (int64_t[]){6, -1}, 1, outs, 4, &n), DT_ERR_INVALID);
  cr_assert_eq(dt_split_with_sizes(a, 2, (int64_t[]){INT64_MAX, INT64_MAX}, 1, outs, 4, &n),
               DT_ERR_SHAPE);
  cr_assert_eq(dt_split_with_sizes(a, 5, (int64_t[]){1, 1, 1, 1, 1}, 1, outs, 4, &n),
               DT_ERR_INVALID);
  cr_assert_eq(dt_split_with_sizes(a, 2, NULL, 1, outs, 4, &n), DT_ERR_INVALID);
  cr_assert_eq(dt_split(a, 2, 1, outs, 4, NULL), DT_ERR_INVALID);
  ref_assert_error_mentions("split.Tensor", "n_out");
  cr_assert_eq(dt_split(a, 2, 1, NULL, 4, &n), DT_ERR_INVALID);
  cr_assert_eq(dt_split(NULL, 2, 1, outs, 4, &n), DT_ERR_INVALID);
  cr_assert_eq(dt_chunk(a, 2, 1, outs, -1, &n), DT_ERR_INVALID);
  cr_assert_eq(dt_full(0, NULL, 1, DT_F32, &s), DT_OK);
  cr_assert_eq(dt_chunk(s, 1, 0, outs, 4, &n), DT_ERR_INVALID);
  ref_assert_error_mentions("chunk", "0-d");
  cr_assert_eq(n, 0);
  for (int i = 0; i < 4; i++) cr_assert_null(outs[i]);
  dt_tensor_release(s);
  dt_tensor_release(a);
}
