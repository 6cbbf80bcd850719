/* Matrix products against hand-computed values and a naive triple loop, over odd shapes,
 * dtypes, and every kind of operand layout CBLAS may or may not take directly. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>

#include "reference.h"

/* The shape of a 0-d tensor: a valid pointer to no sizes (the creation functions copy from
 * it, and a NULL source is undefined behaviour even for zero bytes). */
static const int64_t NO_DIMS[1] = {0};

/* ---- Reference ---------------------------------------------------------------------------- */

/* Flat index into an operand's batch dims (nbd of them, right-aligned against the output's
 * obd batch dims, size-1 dims broadcast). */
static int64_t batch_flat(int nbd, const int64_t *bshape, int obd, const int64_t *oidx) {
  int64_t flat = 0;
  for (int i = 0; i < nbd; i++) {
    int64_t oi = oidx[obd - nbd + i];
    flat = flat * bshape[i] + (bshape[i] == 1 ? 0 : oi);
  }
  return flat;
}

/* torch.matmul on doubles: the expected values of the output of shape (ndo, so). */
static double *ref_matmul(const double *va, int nda, const int64_t *sa, const double *vb, int ndb,
                          const int64_t *sb, int ndo, const int64_t *so) {
  bool a1 = nda == 1, b1 = ndb == 1;
  int64_t n = a1 ? 1 : sa[nda - 2], k = sa[nda - 1], m = b1 ? 1 : sb[ndb - 1];
  int obd = ndo - (a1 ? 0 : 1) - (b1 ? 0 : 1);
  int64_t total = 1;
  for (int i = 0; i < ndo; i++) total *= so[i];
  double *e = malloc(sizeof(double) * (size_t)(total ? total : 1));
  int64_t idx[DT_MAX_DIMS];
  for (int64_t f = 0; f < total; f++) {
    ref_unravel(f, ndo, so, idx);
    int64_t row = a1 ? 0 : idx[obd], col = b1 ? 0 : idx[ndo - 1];
    int64_t ab = batch_flat(a1 ? 0 : nda - 2, sa, obd, idx);
    int64_t bb = batch_flat(b1 ? 0 : ndb - 2, sb, obd, idx);
    double acc = 0;
    for (int64_t p = 0; p < k; p++) acc += va[(ab * n + row) * k + p] * vb[(bb * k + p) * m + col];
    e[f] = acc;
  }
  return e;
}

static double rtol_of(dt_dtype d) {
  switch (d) {
  case DT_F32: return 1e-5;
  case DT_F64: return 1e-12;
  case DT_BF16: return 1e-2;
  case DT_F16: return 2e-3;
  default: return 0;
  }
}

/* Values: small integers for integer dtypes so that products are exact. */
static dt_tensor *rnd(int nd, const int64_t *shape, dt_dtype d, uint64_t seed) {
  return dt_dtype_is_floating(d) ? ref_random(nd, shape, d, -2, 2, seed)
                                 : ref_random(nd, shape, d, -5, 5, seed);
}

/* ---- Operands with chosen layouts -------------------------------------------------------- */

typedef enum layout {
  CONTIGUOUS,
  TRANSPOSED,     /* column-major: CBLAS takes it with a transpose flag */
  STEPPED,        /* both strides > 1: needs a copy */
  BROADCAST_ROWS, /* stride 0 on the row dim */
  BROADCAST_COLS, /* stride 0 on the column dim */
  LAYOUT_COUNT,
} layout;

/* A [r, c] matrix with layout l. Wrapped views borrow *keep's memory; release both. */
static dt_tensor *make_matrix(int64_t r, int64_t c, dt_dtype d, layout l, uint64_t seed,
                              dt_tensor **keep) {
  *keep = NULL;
  int64_t shape[2] = {r, c};
  if (l == CONTIGUOUS) return rnd(2, shape, d, seed);
  if (l == TRANSPOSED) {
    dt_tensor *t = rnd(2, (int64_t[]){c, r}, d, seed), *v = NULL;
    cr_assert_eq(dt_transpose(t, 0, 1, &v), DT_OK);
    dt_tensor_release(t);
    return v;
  }
  int64_t strides[2], extent;
  if (l == STEPPED) {
    strides[0] = 2 * c + 1;
    strides[1] = 2;
    extent = r * strides[0] + 2 * c + 1;
  } else if (l == BROADCAST_ROWS) {
    strides[0] = 0;
    strides[1] = 1;
    extent = c + 1;
  } else {
    strides[0] = 1;
    strides[1] = 0;
    extent = r + 1;
  }
  *keep = rnd(1, (int64_t[]){extent}, d, seed);
  dt_tensor *v = NULL;
  cr_assert_eq(
      dt_wrap(dt_tensor_data(*keep), (size_t)extent * dt_dtype_size(d), 2, shape, strides, d, &v),
      DT_OK, "%s", dt_last_error());
  return v;
}

/* Runs dt_matmul (or dt_mm/dt_bmm per `which`) on a and b and checks against the reference. */
static void check_product(int which, dt_tensor *a, dt_tensor *b) {
  dt_tensor *out = NULL;
  dt_status st = which == 0   ? dt_mm(a, b, &out)
                 : which == 1 ? dt_bmm(a, b, &out)
                              : dt_matmul(a, b, &out);
  cr_assert_eq(st, DT_OK, "%s", dt_last_error());
  double *va = ref_values(a), *vb = ref_values(b);
  double *e = ref_matmul(va, dt_tensor_ndim(a), dt_tensor_shape(a), vb, dt_tensor_ndim(b),
                         dt_tensor_shape(b), dt_tensor_ndim(out), dt_tensor_shape(out));
  dt_dtype rd = dt_dtype_promote(dt_tensor_dtype(a), dt_tensor_dtype(b));
  double k = (double)dt_tensor_shape(a)[dt_tensor_ndim(a) - 1];
  ref_assert_close(out, dt_tensor_ndim(out), dt_tensor_shape(out), rd, e, rtol_of(rd),
                   rtol_of(rd) * (k + 1) * 4);
  free(va);
  free(vb);
  free(e);
  dt_tensor_release(out);
}

/* ---- mm ------------------------------------------------------------------------------------ */

Test(mm, hand_computed) {
  dt_tensor *a = ref_tensor(2, (int64_t[]){2, 3}, DT_F32, (double[]){1, 2, 3, 4, 5, 6});
  dt_tensor *b = ref_tensor(2, (int64_t[]){3, 2}, DT_F32, (double[]){7, 8, 9, 10, 11, 12});
  dt_tensor *out = NULL;
  cr_assert_eq(dt_mm(a, b, &out), DT_OK, "%s", dt_last_error());
  ref_assert_close(out, 2, (int64_t[]){2, 2}, DT_F32, (double[]){58, 64, 139, 154}, 0, 0);
  dt_tensor_release(out);
  dt_tensor *bt = NULL; /* a @ a^T through a transposed view */
  cr_assert_eq(dt_transpose(a, 0, 1, &bt), DT_OK);
  cr_assert_eq(dt_mm(a, bt, &out), DT_OK);
  ref_assert_close(out, 2, (int64_t[]){2, 2}, DT_F32, (double[]){14, 32, 32, 77}, 0, 0);
  dt_tensor_release(out);
  dt_tensor_release(bt);
  dt_tensor_release(a);
  dt_tensor_release(b);
}

Test(mm, shapes_dtypes_layouts) {
  /* Shapes of one row (n = 1) go through a matrix-vector product. */
  static const int64_t shapes[][3] = {{7, 5, 3},   {1, 1, 1},   {4, 0, 3},  {0, 3, 2},
                                      {3, 4, 0},   {33, 17, 9}, {2, 64, 5}, {1, 6, 1},
                                      {1, 37, 23}, {1, 1, 9},   {1, 70, 2}};
  static const dt_dtype dtypes[] = {DT_F32, DT_F64, DT_BF16, DT_F16, DT_I64, DT_I32, DT_U8};
  uint64_t seed = 1;
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
    int64_t n = shapes[s][0], k = shapes[s][1], m = shapes[s][2];
    for (size_t d = 0; d < sizeof dtypes / sizeof *dtypes; d++) {
      for (int la = 0; la < LAYOUT_COUNT; la++) {
        for (int lb = 0; lb < LAYOUT_COUNT; lb++) {
          dt_dtype dt = dtypes[d];
          if (dt == DT_U8 && (la || lb)) continue; /* u8 wraps; one layout is enough */
          dt_tensor *ka, *kb;
          dt_tensor *a = make_matrix(n, k, dt, (layout)la, seed++, &ka);
          dt_tensor *b = make_matrix(k, m, dt, (layout)lb, seed++, &kb);
          if (dt == DT_U8) { /* keep products in range: values 0..4 */
            dt_tensor_release(a);
            dt_tensor_release(b);
            a = ref_random(2, (int64_t[]){n, k}, DT_U8, 0, 3, seed++);
            b = ref_random(2, (int64_t[]){k, m}, DT_U8, 0, 3, seed++);
          }
          check_product(0, a, b);
          dt_tensor_release(a);
          dt_tensor_release(b);
          dt_tensor_release(ka);
          dt_tensor_release(kb);
        }
      }
    }
  }
}

Test(mm, mixed_dtypes_promote) {
  static const dt_dtype dtypes[] = {DT_F32, DT_F64, DT_BF16, DT_F16, DT_I64, DT_I32, DT_BOOL};
  int nd = (int)(sizeof dtypes / sizeof *dtypes);
  for (int i = 0; i < nd; i++) {
    for (int j = 0; j < nd; j++) {
      if (dtypes[i] == DT_BOOL && dtypes[j] == DT_BOOL) continue;
      dt_tensor *a = rnd(2, (int64_t[]){5, 4}, dtypes[i], (uint64_t)(i * 7 + j));
      dt_tensor *b = rnd(2, (int64_t[]){4, 6}, dtypes[j], (uint64_t)(i * 7 + j + 100));
      check_product(0, a, b);
      dt_tensor_release(a);
      dt_tensor_release(b);
    }
  }
}

/* The contiguous f32 path is a plain sgemm: bit-identical to calling CBLAS directly. */
Test(mm, contiguous_f32_equals_cblas) {
  int n = 37, k = 29, m = 41;
  dt_tensor *a = rnd(2, (int64_t[]){n, k}, DT_F32, 5), *b = rnd(2, (int64_t[]){k, m}, DT_F32, 6);
  dt_tensor *out = NULL;
  cr_assert_eq(dt_mm(a, b, &out), DT_OK);
  float *expected = malloc(sizeof(float) * (size_t)(n * m));
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, m, k, 1.0f, dt_tensor_data(a), k,
              dt_tensor_data(b), m, 0.0f, expected, m);
  cr_assert(memcmp(expected, dt_tensor_data(out), sizeof(float) * (size_t)(n * m)) == 0);
  cr_assert(dt_tensor_is_contiguous(out));
  free(expected);
  dt_tensor_release(out);
  dt_tensor_release(a);
  dt_tensor_release(b);
}

Test(mm, k_zero_gives_zeros) {
  dt_dtype dtypes[] = {DT_F32, DT_F64, DT_BF16, DT_I64};
  for (int i = 0; i < 4; i++) {
    dt_tensor *a = NULL, *b = NULL, *out = NULL;
    cr_assert_eq(dt_empty(2, (int64_t[]){3, 0}, dtypes[i], &a), DT_OK);
    cr_assert_eq(dt_empty(2, (int64_t[]){0, 2}, dtypes[i], &b), DT_OK);
    cr_assert_eq(dt_mm(a, b, &out), DT_OK, "%s", dt_last_error());
    ref_assert_close(out, 2, (int64_t[]){3, 2}, dtypes[i], (double[]){0, 0, 0, 0, 0, 0}, 0, 0);
    dt_tensor_release(a);
    dt_tensor_release(b);
    dt_tensor_release(out);
  }
}

Test(mm, bad_input) {
  dt_tensor *a = rnd(2, (int64_t[]){2, 3}, DT_F32, 1), *b = rnd(2, (int64_t[]){4, 5}, DT_F32, 2);
  dt_tensor *v = rnd(1, (int64_t[]){3}, DT_F32, 3);
  dt_tensor *bools = ref_random(2, (int64_t[]){3, 2}, DT_BOOL, 0, 2, 4);
  dt_tensor *bools2 = ref_random(2, (int64_t[]){2, 3}, DT_BOOL, 0, 2, 5);
  dt_tensor *out = (dt_tensor *)0x1;
  cr_assert_eq(dt_mm(a, b, &out), DT_ERR_SHAPE);
  cr_assert_null(out);
  ref_assert_error_mentions("mm: a [2, 3] and b [4, 5]", "inner dims 3 and 4 differ");
  out = (dt_tensor *)0x1;
  cr_assert_eq(dt_mm(a, v, &out), DT_ERR_SHAPE);
  cr_assert_null(out);
  ref_assert_error_mentions("mm", "[3]");
  cr_assert_eq(dt_mm(v, a, &out), DT_ERR_SHAPE);
  cr_assert_eq(dt_mm(bools2, bools, &out), DT_ERR_DTYPE);
  cr_assert_null(out);
  ref_assert_error_mentions("mm", "bool");
  cr_assert_eq(dt_mm(NULL, b, &out), DT_ERR_INVALID);
  ref_assert_error_mentions("mm", "input 0");
  cr_assert_eq(dt_mm(a, NULL, &out), DT_ERR_INVALID);
  cr_assert_eq(dt_mm(a, b, NULL), DT_ERR_INVALID);
  ref_assert_error_mentions("mm", "out");
  dt_tensor_release(a);
  dt_tensor_release(b);
  dt_tensor_release(v);
  dt_tensor_release(bools);
  dt_tensor_release(bools2);
}

/* ---- bmm ----------------------------------------------------------------------------------- */

Test(bmm, hand_computed_and_random) {
  dt_tensor *a = ref_tensor(3, (int64_t[]){2, 1, 2}, DT_F64, (double[]){1, 2, 3, 4});
  dt_tensor *b = ref_tensor(3, (int64_t[]){2, 2, 1}, DT_F64, (double[]){5, 6, 7, 8});
  dt_tensor *out = NULL;
  cr_assert_eq(dt_bmm(a, b, &out), DT_OK, "%s", dt_last_error());
  ref_assert_close(out, 3, (int64_t[]){2, 1, 1}, DT_F64, (double[]){17, 53}, 0, 0);
  dt_tensor_release(out);
  dt_tensor_release(a);
  dt_tensor_release(b);

  dt_dtype dtypes[] = {DT_F32, DT_F64, DT_BF16, DT_I64};
  for (int d = 0; d < 4; d++) {
    for (int strided = 0; strided < 2; strided++) {
      int64_t sa[] = {3, 7, 5}, sb[] = {3, 5, 4};
      a = strided ? ref_random_strided(3, sa, dtypes[d], -2, 2, 10 + d)
                  : rnd(3, sa, dtypes[d], 10 + d);
      b = strided ? ref_random_strided(3, sb, dtypes[d], -2, 2, 20 + d)
                  : rnd(3, sb, dtypes[d], 20 + d);
      check_product(1, a, b);
      dt_tensor_release(a);
      dt_tensor_release(b);
    }
  }
}

Test(bmm, stride_zero_batch_and_stepped) {
  /* b is one [5, 4] matrix repeated over a batch of 3 through a 0 batch stride. */
  dt_tensor *keep = rnd(1, (int64_t[]){20}, DT_F32, 3), *b = NULL;
  cr_assert_eq(dt_wrap(dt_tensor_data(keep), 20 * sizeof(float), 3, (int64_t[]){3, 5, 4},
                       (int64_t[]){0, 4, 1}, DT_F32, &b),
               DT_OK);
  dt_tensor *a = rnd(3, (int64_t[]){3, 6, 5}, DT_F32, 4);
  check_product(1, a, b);
  /* a with batch stride not a multiple of its matrix: matrices overlap, still correct. */
  dt_tensor *keep2 = rnd(1, (int64_t[]){64}, DT_F32, 5), *a2 = NULL;
  cr_assert_eq(dt_wrap(dt_tensor_data(keep2), 64 * sizeof(float), 3, (int64_t[]){3, 6, 5},
                       (int64_t[]){7, 5, 1}, DT_F32, &a2),
               DT_OK);
  check_product(1, a2, b);
  check_product(2, a2, b);
  dt_tensor_release(a2);
  dt_tensor_release(keep2);
  dt_tensor_release(a);
  dt_tensor_release(b);
  dt_tensor_release(keep);
}

Test(bmm, bad_input) {
  dt_tensor *a = rnd(3, (int64_t[]){2, 3, 4}, DT_F32, 1),
            *b = rnd(3, (int64_t[]){3, 4, 5}, DT_F32, 2);
  dt_tensor *c = rnd(3, (int64_t[]){2, 5, 5}, DT_F32, 3), *m = rnd(2, (int64_t[]){4, 5}, DT_F32, 4);
  dt_tensor *out = (dt_tensor *)0x1;
  cr_assert_eq(dt_bmm(a, b, &out), DT_ERR_SHAPE);
  cr_assert_null(out);
  ref_assert_error_mentions("bmm: a [2, 3, 4] and b [3, 4, 5]", "batch sizes 2 and 3");
  cr_assert_eq(dt_bmm(a, c, &out), DT_ERR_SHAPE);
  ref_assert_error_mentions("bmm", "inner dims 4 and 5");
  cr_assert_eq(dt_bmm(a, m, &out), DT_ERR_SHAPE);
  ref_assert_error_mentions("bmm", "3-D");
  cr_assert_eq(dt_bmm(a, NULL, &out), DT_ERR_INVALID);
  cr_assert_null(out);
  dt_tensor_release(a);
  dt_tensor_release(b);
  dt_tensor_release(c);
  dt_tensor_release(m);
}

/* ---- matmul -------------------------------------------------------------------------------- */

Test(matmul, vector_cases_hand_computed) {
  dt_tensor *u = ref_tensor(1, (int64_t[]){3}, DT_F32, (double[]){1, 2, 3});
  dt_tensor *v = ref_tensor(1, (int64_t[]){3}, DT_F32, (double[]){4, 5, 6});
  dt_tensor *m = ref_tensor(2, (int64_t[]){3, 2}, DT_F32, (double[]){1, 2, 3, 4, 5, 6});
  dt_tensor *mt = ref_tensor(2, (int64_t[]){2, 3}, DT_F32, (double[]){1, 3, 5, 2, 4, 6});
  dt_tensor *out = NULL;
  cr_assert_eq(dt_matmul(u, v, &out), DT_OK, "%s", dt_last_error());
  ref_assert_close(out, 0, NULL, DT_F32, (double[]){32}, 0, 0);
  dt_tensor_release(out);
  cr_assert_eq(dt_matmul(u, m, &out), DT_OK);
  ref_assert_close(out, 1, (int64_t[]){2}, DT_F32, (double[]){22, 28}, 0, 0);
  dt_tensor_release(out);
  cr_assert_eq(dt_matmul(mt, u, &out), DT_OK);
  ref_assert_close(out, 1, (int64_t[]){2}, DT_F32, (double[]){22, 28}, 0, 0);
  dt_tensor_release(out);
  dt_tensor_release(u);
  dt_tensor_release(v);
  dt_tensor_release(m);
  dt_tensor_release(mt);
}

static void check_matmul_shapes(int nda, const int64_t *sa, int ndb, const int64_t *sb, dt_dtype d,
                                bool strided, int ndo, const int64_t *so) {
  dt_tensor *a =
      strided && nda >= 2 ? ref_random_strided(nda, sa, d, -2, 2, 7) : rnd(nda, sa, d, 7);
  dt_tensor *b =
      strided && ndb >= 2 ? ref_random_strided(ndb, sb, d, -2, 2, 8) : rnd(ndb, sb, d, 8);
  dt_tensor *out = NULL;
  cr_assert_eq(dt_matmul(a, b, &out), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_tensor_ndim(out), ndo);
  for (int i = 0; i < ndo; i++) cr_assert_eq(dt_tensor_shape(out)[i], so[i], "dim %d", i);
  dt_tensor_release(out);
  check_product(2, a, b);
  dt_tensor_release(a);
  dt_tensor_release(b);
}

Test(matmul, broadcasting_and_vectors) {
  dt_dtype dtypes[] = {DT_F32, DT_F64, DT_BF16, DT_I64};
  for (int d = 0; d < 4; d++) {
    for (int s = 0; s < 2; s++) {
      dt_dtype t = dtypes[d];
      check_matmul_shapes(1, (int64_t[]){5}, 1, (int64_t[]){5}, t, s, 0, NULL);
      check_matmul_shapes(1, (int64_t[]){5}, 2, (int64_t[]){5, 3}, t, s, 1, (int64_t[]){3});
      check_matmul_shapes(2, (int64_t[]){4, 5}, 1, (int64_t[]){5}, t, s, 1, (int64_t[]){4});
      check_matmul_shapes(3, (int64_t[]){2, 4, 5}, 1, (int64_t[]){5}, t, s, 2, (int64_t[]){2, 4});
      check_matmul_shapes(1, (int64_t[]){5}, 3, (int64_t[]){2, 5, 3}, t, s, 2, (int64_t[]){2, 3});
      check_matmul_shapes(4, (int64_t[]){2, 1, 5, 4}, 3, (int64_t[]){3, 4, 6}, t, s, 4,
                          (int64_t[]){2, 3, 5, 6});
      check_matmul_shapes(2, (int64_t[]){4, 5}, 3, (int64_t[]){2, 5, 3}, t, s, 3,
                          (int64_t[]){2, 4, 3});
      check_matmul_shapes(3, (int64_t[]){3, 7, 5}, 2, (int64_t[]){5, 2}, t, s, 3,
                          (int64_t[]){3, 7, 2});
      check_matmul_shapes(3, (int64_t[]){1, 7, 5}, 3, (int64_t[]){3, 5, 2}, t, s, 3,
                          (int64_t[]){3, 7, 2});
      check_matmul_shapes(3, (int64_t[]){3, 0, 5}, 2, (int64_t[]){5, 2}, t, s, 3,
                          (int64_t[]){3, 0, 2});
      check_matmul_shapes(3, (int64_t[]){3, 4, 0}, 2, (int64_t[]){0, 2}, t, s, 3,
                          (int64_t[]){3, 4, 2});
      check_matmul_shapes(1, (int64_t[]){0}, 1, (int64_t[]){0}, t, s, 0, NULL);
    }
  }
}

Test(matmul, permuted_batch_cannot_fold) {
  /* a: [3, 4, 5] whose batch dim is innermost in memory: rows do not fold into one run. */
  dt_tensor *keep = rnd(1, (int64_t[]){60}, DT_F32, 9), *a = NULL;
  cr_assert_eq(dt_wrap(dt_tensor_data(keep), 60 * sizeof(float), 3, (int64_t[]){3, 4, 5},
                       (int64_t[]){1, 15, 3}, DT_F32, &a),
               DT_OK);
  dt_tensor *b = rnd(2, (int64_t[]){5, 6}, DT_F32, 10);
  check_product(2, a, b);
  dt_tensor_release(a);
  dt_tensor_release(b);
  dt_tensor_release(keep);
}

Test(matmul, bad_input) {
  dt_tensor *s = rnd(0, NO_DIMS, DT_F32, 1), *v = rnd(1, (int64_t[]){3}, DT_F32, 2);
  dt_tensor *a = rnd(3, (int64_t[]){2, 3, 4}, DT_F32, 3),
            *b = rnd(3, (int64_t[]){3, 4, 5}, DT_F32, 4);
  dt_tensor *out = (dt_tensor *)0x1;
  cr_assert_eq(dt_matmul(s, v, &out), DT_ERR_SHAPE);
  cr_assert_null(out);
  ref_assert_error_mentions("matmul", "at least 1 dim");
  cr_assert_eq(dt_matmul(a, b, &out), DT_ERR_SHAPE);
  ref_assert_error_mentions("matmul: a [2, 3, 4] and b [3, 4, 5]", "batch dims");
  cr_assert_eq(dt_matmul(a, v, &out), DT_ERR_SHAPE);
  ref_assert_error_mentions("matmul", "inner dims 4 and 3");
  cr_assert_eq(dt_matmul(NULL, v, &out), DT_ERR_INVALID);
  cr_assert_null(out);
  dt_tensor_release(s);
  dt_tensor_release(v);
  dt_tensor_release(a);
  dt_tensor_release(b);
}

/* ---- addmm --------------------------------------------------------------------------------- */

Test(addmm, hand_computed) {
  dt_tensor *a = ref_tensor(2, (int64_t[]){2, 2}, DT_F32, (double[]){1, 2, 3, 4});
  dt_tensor *b = ref_tensor(2, (int64_t[]){2, 2}, DT_F32, (double[]){5, 6, 7, 8});
  dt_tensor *bias = ref_tensor(1, (int64_t[]){2}, DT_F32, (double[]){10, 20});
  dt_tensor *out = NULL;
  cr_assert_eq(dt_addmm(bias, a, b, &out), DT_OK, "%s", dt_last_error());
  ref_assert_close(out, 2, (int64_t[]){2, 2}, DT_F32, (double[]){29, 42, 53, 70}, 0, 0);
  dt_tensor_release(out);
  cr_assert_eq(dt_addmm_ex(bias, a, b, 0.5, 2, &out), DT_OK);
  ref_assert_close(out, 2, (int64_t[]){2, 2}, DT_F32, (double[]){43, 54, 91, 110}, 0, 0);
  dt_tensor_release(out);
  dt_tensor_release(a);
  dt_tensor_release(b);
  dt_tensor_release(bias);
}

static void check_addmm(int bnd, const int64_t *bs, int64_t n, int64_t k, int64_t m, dt_dtype d,
                        double beta, double alpha, uint64_t seed) {
  dt_tensor *bias = rnd(bnd, bs, d, seed), *ka, *kb;
  dt_tensor *a = make_matrix(n, k, d, (layout)(seed % LAYOUT_COUNT), seed + 1, &ka);
  dt_tensor *b = make_matrix(k, m, d, (layout)((seed / 2) % LAYOUT_COUNT), seed + 2, &kb);
  dt_tensor *out = NULL;
  cr_assert_eq(dt_addmm_ex(bias, a, b, beta, alpha, &out), DT_OK, "%s", dt_last_error());
  double *va = ref_values(a), *vb = ref_values(b), *vc = ref_values(bias);
  int64_t so[2] = {n, m};
  double *e = ref_matmul(va, 2, (int64_t[]){n, k}, vb, 2, (int64_t[]){k, m}, 2, so);
  int64_t idx[2];
  for (int64_t i = 0; i < n * m; i++) {
    ref_unravel(i, 2, so, idx);
    e[i] = beta * ref_broadcast_get(vc, bnd, bs, 2, idx) + alpha * e[i];
  }
  ref_assert_close(out, 2, so, d, e, rtol_of(d), rtol_of(d) * (double)(k + 2) * 8);
  free(va);
  free(vb);
  free(vc);
  free(e);
  dt_tensor_release(out);
  dt_tensor_release(a);
  dt_tensor_release(b);
  dt_tensor_release(ka);
  dt_tensor_release(kb);
  dt_tensor_release(bias);
}

Test(addmm, random_bias_shapes) {
  dt_dtype dtypes[] = {DT_F32, DT_F64, DT_BF16, DT_I64, DT_I32};
  uint64_t seed = 1;
  for (int d = 0; d < 5; d++) {
    check_addmm(1, (int64_t[]){3}, 7, 5, 3, dtypes[d], 1, 1, seed++);
    check_addmm(2, (int64_t[]){7, 1}, 7, 5, 3, dtypes[d], 2, -1, seed++);
    check_addmm(2, (int64_t[]){7, 3}, 7, 5, 3, dtypes[d], -3, 2, seed++);
    check_addmm(0, NO_DIMS, 7, 5, 3, dtypes[d], 1, 3, seed++);
    check_addmm(2, (int64_t[]){4, 6}, 4, 0, 6, dtypes[d], 2, 1, seed++); /* k = 0: beta * bias */
    check_addmm(1, (int64_t[]){1}, 1, 1, 1, dtypes[d], 1, 1, seed++);
    check_addmm(2, (int64_t[]){9, 11}, 9, 13, 11, dtypes[d], 0, 1, seed++);
    check_addmm(1, (int64_t[]){11}, 1, 13, 11, dtypes[d], 2, -1, seed++); /* one row: gemv */
    check_addmm(2, (int64_t[]){1, 11}, 1, 13, 11, dtypes[d], 0, 1, seed++);
  }
}

Test(addmm, beta_zero_ignores_nan_bias) {
  dt_tensor *bias = ref_tensor(1, (int64_t[]){2}, DT_F32, (double[]){NAN, NAN});
  dt_tensor *a = ref_tensor(2, (int64_t[]){1, 1}, DT_F32, (double[]){3});
  dt_tensor *b = ref_tensor(2, (int64_t[]){1, 2}, DT_F32, (double[]){1, 2});
  dt_tensor *out = NULL;
  cr_assert_eq(dt_addmm_ex(bias, a, b, 0, 1, &out), DT_OK);
  ref_assert_close(out, 2, (int64_t[]){1, 2}, DT_F32, (double[]){3, 6}, 0, 0);
  dt_tensor_release(out);
  dt_tensor_release(bias);
  dt_tensor_release(a);
  dt_tensor_release(b);
}

Test(addmm, bad_input) {
  dt_tensor *a = rnd(2, (int64_t[]){2, 3}, DT_F32, 1), *b = rnd(2, (int64_t[]){3, 4}, DT_F32, 2);
  dt_tensor *bias = rnd(1, (int64_t[]){3}, DT_F32, 3),
            *big = rnd(3, (int64_t[]){1, 2, 4}, DT_F32, 4);
  dt_tensor *ia = rnd(2, (int64_t[]){2, 3}, DT_I64, 5), *ib = rnd(2, (int64_t[]){3, 4}, DT_I64, 6);
  dt_tensor *ibias = rnd(1, (int64_t[]){4}, DT_I64, 7);
  dt_tensor *out = (dt_tensor *)0x1;
  cr_assert_eq(dt_addmm(bias, a, b, &out), DT_ERR_SHAPE);
  cr_assert_null(out);
  ref_assert_error_mentions("addmm: bias [3]", "[2, 4]");
  cr_assert_eq(dt_addmm(big, a, b, &out), DT_ERR_SHAPE);
  ref_assert_error_mentions("addmm", "[1, 2, 4]");
  cr_assert_eq(dt_addmm(bias, a, a, &out), DT_ERR_SHAPE);
  ref_assert_error_mentions("addmm", "inner dims 3 and 2");
  cr_assert_eq(dt_addmm_ex(ibias, ia, ib, 1, 0.5, &out), DT_ERR_INVALID);
  ref_assert_error_mentions("addmm", "alpha");
  cr_assert_eq(dt_addmm_ex(ibias, ia, ib, 1, 2, &out), DT_OK);
  dt_tensor_release(out);
  cr_assert_eq(dt_addmm(NULL, a, b, &out), DT_ERR_INVALID);
  cr_assert_null(out);
  ref_assert_error_mentions("addmm", "input 0");
  dt_tensor_release(a);
  dt_tensor_release(b);
  dt_tensor_release(bias);
  dt_tensor_release(big);
  dt_tensor_release(ia);
  dt_tensor_release(ib);
  dt_tensor_release(ibias);
}

/* ---- linear -------------------------------------------------------------------------------- */

Test(linear, hand_computed) {
  dt_tensor *x = ref_tensor(2, (int64_t[]){1, 2}, DT_F32, (double[]){1, 2});
  dt_tensor *w = ref_tensor(2, (int64_t[]){3, 2}, DT_F32, (double[]){1, 0, 0, 1, 1, 1});
  dt_tensor *bias = ref_tensor(1, (int64_t[]){3}, DT_F32, (double[]){10, 20, 30});
  dt_tensor *out = NULL;
  cr_assert_eq(dt_linear(x, w, bias, &out), DT_OK, "%s", dt_last_error());
  ref_assert_close(out, 2, (int64_t[]){1, 3}, DT_F32, (double[]){11, 22, 33}, 0, 0);
  dt_tensor_release(out);
  cr_assert_eq(dt_linear(x, w, NULL, &out), DT_OK);
  ref_assert_close(out, 2, (int64_t[]){1, 3}, DT_F32, (double[]){1, 2, 3}, 0, 0);
  dt_tensor_release(out);
  dt_tensor_release(x);
  dt_tensor_release(w);
  dt_tensor_release(bias);
}

static void check_linear(int ndx, const int64_t *sx, int64_t out_f, dt_dtype d, bool with_bias,
                         bool strided, uint64_t seed) {
  int64_t in_f = sx[ndx - 1];
  int64_t sw[2] = {out_f, in_f};
  dt_tensor *x =
      strided && ndx >= 2 ? ref_random_strided(ndx, sx, d, -2, 2, seed) : rnd(ndx, sx, d, seed);
  dt_tensor *w = strided ? ref_random_strided(2, sw, d, -2, 2, seed + 1) : rnd(2, sw, d, seed + 1);
  dt_tensor *bias = with_bias ? rnd(1, &out_f, d, seed + 2) : NULL;
  dt_tensor *out = NULL;
  cr_assert_eq(dt_linear(x, w, bias, &out), DT_OK, "%s", dt_last_error());
  double *vx = ref_values(x), *vw = ref_values(w), *vb = bias ? ref_values(bias) : NULL;
  int64_t so[DT_MAX_DIMS];
  memcpy(so, sx, sizeof(int64_t) * (size_t)ndx);
  so[ndx - 1] = out_f;
  int64_t rows = 1;
  for (int i = 0; i < ndx - 1; i++) rows *= sx[i];
  double *e = malloc(sizeof(double) * (size_t)(rows * out_f + 1));
  for (int64_t r = 0; r < rows; r++) {
    for (int64_t o = 0; o < out_f; o++) {
      double acc = vb ? vb[o] : 0;
      for (int64_t p = 0; p < in_f; p++) acc += vx[r * in_f + p] * vw[o * in_f + p];
      e[r * out_f + o] = acc;
    }
  }
  ref_assert_close(out, ndx, so, d, e, rtol_of(d), rtol_of(d) * (double)(in_f + 2) * 4);
  free(vx);
  free(vw);
  free(vb);
  free(e);
  dt_tensor_release(out);
  dt_tensor_release(x);
  dt_tensor_release(w);
  dt_tensor_release(bias);
}

Test(linear, batch_dims_bias_dtypes_strides) {
  dt_dtype dtypes[] = {DT_F32, DT_F64, DT_BF16, DT_F16, DT_I64};
  uint64_t seed = 1;
  for (int d = 0; d < 5; d++) {
    for (int bias = 0; bias < 2; bias++) {
      for (int s = 0; s < 2; s++) {
        check_linear(3, (int64_t[]){2, 5, 7}, 3, dtypes[d], bias, s, seed++);
        check_linear(2, (int64_t[]){9, 4}, 6, dtypes[d], bias, s, seed++);
        check_linear(1, (int64_t[]){4}, 6, dtypes[d], bias, s, seed++);
        check_linear(4, (int64_t[]){2, 1, 3, 5}, 1, dtypes[d], bias, s, seed++);
        check_linear(3, (int64_t[]){2, 0, 5}, 3, dtypes[d], bias, s, seed++);
        check_linear(3, (int64_t[]){2, 3, 0}, 3, dtypes[d], bias, s, seed++);
      }
    }
  }
}

Test(linear, bad_input) {
  dt_tensor *x = rnd(3, (int64_t[]){2, 3, 5}, DT_F32, 1), *w = rnd(2, (int64_t[]){4, 6}, DT_F32, 2);
  dt_tensor *w1 = rnd(1, (int64_t[]){5}, DT_F32, 3), *w2 = rnd(2, (int64_t[]){4, 5}, DT_F32, 4);
  dt_tensor *bias = rnd(1, (int64_t[]){3}, DT_F32, 5), *s = rnd(0, NO_DIMS, DT_F32, 6);
  dt_tensor *out = (dt_tensor *)0x1;
  cr_assert_eq(dt_linear(x, w, NULL, &out), DT_ERR_SHAPE);
  cr_assert_null(out);
  ref_assert_error_mentions("linear: x [2, 3, 5] and weight [4, 6]", "in_features 6");
  cr_assert_eq(dt_linear(x, w1, NULL, &out), DT_ERR_SHAPE);
  ref_assert_error_mentions("linear", "weight must be 2-D");
  cr_assert_eq(dt_linear(x, w2, bias, &out), DT_ERR_SHAPE);
  ref_assert_error_mentions("linear: bias [3]", "[2, 3, 4]");
  cr_assert_eq(dt_linear(s, w2, NULL, &out), DT_ERR_SHAPE);
  cr_assert_eq(dt_linear(NULL, w2, NULL, &out), DT_ERR_INVALID);
  cr_assert_null(out);
  ref_assert_error_mentions("linear", "input 0");
  dt_tensor_release(x);
  dt_tensor_release(w);
  dt_tensor_release(w1);
  dt_tensor_release(w2);
  dt_tensor_release(bias);
  dt_tensor_release(s);
}
