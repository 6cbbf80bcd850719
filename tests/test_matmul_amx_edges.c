/* dt_matmul / dt_addmm_ex / dt_linear around the float32 AMX path (src/kernels/cpu/amx_gemm.c,
 * chosen in gemm.c) against float64 loops: shapes at and around the size thresholds, transposed
 * and sliced operands, broadcast batch dims, bias rows and (beta, alpha) values that must not
 * take the path, special values (NaN, infinities, -0, denormals, the largest floats), bfloat16
 * and float16 operands (a transposed one converted in memory order), 8 rank threads at once,
 * 1 and 2 pool threads giving the same bits, a forked child, and DT_AMX's values. Where the CPU
 * has no AMX the same checks run on the BLAS. Includes kernels/cpu/amx_gemm.h and
 * tests/log_capture.h: internal. */
#include <cblas.h>
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dtensor/dtensor.h"
#include "kernels/cpu/amx_gemm.h"
#include "log_capture.h"
#include "tensor/element.h"

#if defined(__SANITIZE_ADDRESS__)
/* conversion_that_cannot_be_allocated asks for 1 TiB: a NULL from malloc, not an abort */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }
#endif

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double uniform(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

/* A contiguous tensor of uniform values in (-scale, scale), rounded to its dtype. */
static dt_tensor *random_tensor(int nd, const int64_t *shape, dt_dtype dtype, double scale) {
  int64_t count = 1;
  for (int i = 0; i < nd; i++) count *= shape[i];
  double *v = malloc((size_t)count * sizeof *v);
  for (int64_t i = 0; i < count; i++) v[i] = uniform() * scale;
  dt_tensor *f = NULL, *t = NULL;
  cr_assert_eq(dt_from_data(v, nd, shape, DT_F64, &f), DT_OK);
  cr_assert_eq(dt_to(f, dtype, &t), DT_OK, "%s", dt_last_error());
  dt_tensor_release(f);
  free(v);
  return t;
}

static double *values(const dt_tensor *t) {
  int64_t n = dt_tensor_numel(t);
  double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
  cr_assert_eq(dt_tensor_to_doubles(t, v, n), DT_OK, "%s", dt_last_error());
  return v;
}

/* op [rows, cols] as a view: transposed (stored [cols, rows]) and/or sliced out of rows wider
 * than cols (a leading dimension past the row, starting one element in). Every variant holds fresh
 * random values. */
static dt_tensor *operand(int64_t rows, int64_t cols, bool transposed, int64_t pad, dt_dtype dtype,
                          double scale) {
  int64_t store[2] = {transposed ? cols : rows, (transposed ? rows : cols) + pad};
  dt_tensor *s = random_tensor(2, store, dtype, scale), *n = NULL, *t = NULL;
  cr_assert_eq(dt_narrow(s, 1, pad > 0, store[1] - pad, &n), DT_OK); /* an offset too */
  dt_tensor_release(s);
  if (!transposed) return n;
  cr_assert_eq(dt_transpose(n, 0, 1, &t), DT_OK);
  dt_tensor_release(n);
  return t;
}

/* Row i of a [., k] times column j of b [k, n] in float64; *mag: the sum of |a b|. */
static double dot64(const double *a, const double *b, int64_t i, int64_t j, int64_t n, int64_t k,
                    double *mag) {
  double s = 0, sum_abs = 0;
  for (int64_t p = 0; p < k; p++) {
    double v = a[i * k + p] * b[p * n + j];
    s += v;
    sum_abs += fabs(v);
  }
  *mag = sum_abs;
  return s;
}

/* Checks out [batches, m, n] = beta * bias + alpha * a b for a [batches, m, k], b [batches, k,
 * n] and bias [m, n] (NULL: none; beta 0 ignores it, NaNs included), all given as float64
 * values: within 8 * 2^-24 of the magnitudes (sgemm's tolerance) plus `rel` of the result
 * (a 16-bit output's rounding). */
static void check(const double *a, const double *b, const double *bias, double beta, double alpha,
                  const double *out, int64_t batches, int64_t m, int64_t n, int64_t k, double rel,
                  const char *what) {
  for (int64_t q = 0; q < batches; q++)
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        double mag, s = dot64(a + q * m * k, b + q * k * n, i, j, n, k, &mag);
        s *= alpha;
        mag *= fabs(alpha);
        if (bias && beta != 0) {
          s += beta * bias[i * n + j];
          mag += fabs(beta * bias[i * n + j]);
        }
        double got = out[(q * m + i) * n + j];
        cr_assert(fabs(got - s) <= 8 * 0x1p-24 * mag + rel * fabs(s) + 1e-37,
                  "%s: out[%ld][%ld][%ld] = %.9g, float64 %.9g (sum |ab| %.3g)", what, (long)q,
                  (long)i, (long)j, got, s, mag);
      }
}

/* One 2-D product op(a) [m, k] op(b) [k, n] through dt_matmul, checked. */
static void matmul_case(int64_t m, int64_t n, int64_t k, int variant) {
  bool ta = variant & 1, tb = variant & 2;
  int64_t pa = variant & 4 ? 7 : 0, pb = variant & 4 ? 3 : 0;
  dt_tensor *a = operand(m, k, ta, pa, DT_F32, 1.0), *b = operand(k, n, tb, pb, DT_F32, 1.0);
  dt_tensor *c = NULL;
  cr_assert_eq(dt_matmul(a, b, &c), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_tensor_shape(c)[0], m);
  cr_assert_eq(dt_tensor_shape(c)[1], n);
  double *va = values(a), *vb = values(b), *vc = values(c);
  char what[96];
  snprintf(what, sizeof what, "[%ld x %ld x %ld] variant %d", (long)m, (long)n, (long)k, variant);
  check(va, vb, NULL, 0, 1, vc, 1, m, n, k, 0, what);
  free(va);
  free(vb);
  free(vc);
  dt_tensor_release(a);
  dt_tensor_release(b);
  dt_tensor_release(c);
}

/* The path needs m >= 64, n >= 128, k >= 64 and m n k >= 2^23: each side of each bound, odd
 * edges that leave partial tiles, every transpose and slice (variant bits). */
Test(matmul_amx_edges, shapes_at_the_thresholds) {
  static const int64_t shapes[][3] = {
      {64, 128, 1024}, {64, 128, 1023}, {63, 129, 1100}, {64, 127, 1100}, {65, 130, 1000},
      {100, 200, 450}, {257, 129, 257}, {97, 161, 545},  {128, 128, 512},
  };
  for (int s = 0; s < (int)(sizeof shapes / sizeof shapes[0]); s++)
    matmul_case(shapes[s][0], shapes[s][1], shapes[s][2], s % 8);
  for (int v = 0; v < 8; v++) matmul_case(80, 144, 777, v);
}

/* Batched products with broadcast batch dims (stride 0, from dt_expand), a transposed batched
 * operand, and a 2-D operand against a batch: the reference reads the expanded views. */
Test(matmul_amx_edges, broadcast_batches) {
  int64_t m = 70, n = 150, k = 800;
  int64_t s_a[3] = {1, m, k}, full_a[4] = {2, 3, m, k};
  dt_tensor *a1 = random_tensor(3, s_a, DT_F32, 1.0), *a = NULL;
  cr_assert_eq(dt_expand(a1, 4, full_a, &a), DT_OK, "%s", dt_last_error()); /* [2, 3, m, k] */
  int64_t s_b[4] = {2, 1, n, k}, full_b[4] = {2, 3, k, n};
  dt_tensor *bs = random_tensor(4, s_b, DT_F32, 1.0), *bt = NULL, *b = NULL;
  cr_assert_eq(dt_transpose(bs, 2, 3, &bt), DT_OK); /* [2, 1, k, n], transposed */
  cr_assert_eq(dt_expand(bt, 4, full_b, &b), DT_OK, "%s", dt_last_error());
  dt_tensor *c = NULL;
  cr_assert_eq(dt_matmul(a, b, &c), DT_OK, "%s", dt_last_error());
  double *va = values(a), *vb = values(b), *vc = values(c);
  check(va, vb, NULL, 0, 1, vc, 6, m, n, k, 0, "broadcast batches");
  free(va);
  free(vb);
  free(vc);
  dt_tensor_release(c);
  /* a 2-D b against the batch: folded into one product of 6 m rows */
  dt_tensor *b2 = operand(k, n, true, 5, DT_F32, 1.0), *b2e = NULL;
  int64_t full_b2[4] = {2, 3, k, n};
  cr_assert_eq(dt_matmul(a, b2, &c), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_expand(b2, 4, full_b2, &b2e), DT_OK);
  va = values(a), vb = values(b2e), vc = values(c);
  check(va, vb, NULL, 0, 1, vc, 6, m, n, k, 0, "batch x matrix");
  free(va);
  free(vb);
  free(vc);
  dt_tensor_release(c);
  dt_tensor_release(b2);
  dt_tensor_release(b2e);
  dt_tensor_release(a1);
  dt_tensor_release(a);
  dt_tensor_release(bs);
  dt_tensor_release(bt);
  dt_tensor_release(b);
}

/* addmm with bias rows, full and column biases and (beta, alpha) pairs: only alpha 1 with beta
 * 0 or 1 may run on AMX; the others must still give beta * bias + alpha * a b (beta 0 ignores
 * a NaN bias, as PyTorch). */
Test(matmul_amx_edges, addmm_bias_beta_alpha) {
  int64_t m = 96, n = 160, k = 640;
  dt_tensor *a = operand(m, k, false, 0, DT_F32, 1.0), *b = operand(k, n, true, 0, DT_F32, 1.0);
  double *va = values(a), *vb = values(b);
  int64_t row[1] = {n}, full[2] = {m, n}, col[2] = {m, 1};
  dt_tensor *biases[3] = {random_tensor(1, row, DT_F32, 3.0), random_tensor(2, full, DT_F32, 3.0),
                          random_tensor(2, col, DT_F32, 3.0)};
  static const double pairs[][2] = {{1, 1}, {0, 1}, {0.5, 1}, {1, 0.5}, {2, -1}, {-1, 1}, {1, 2}};
  for (int bi = 0; bi < 3; bi++) {
    dt_tensor *be = NULL;
    cr_assert_eq(dt_expand(biases[bi], 2, full, &be), DT_OK);
    double *vbias = values(be);
    for (int p = 0; p < (int)(sizeof pairs / sizeof pairs[0]); p++) {
      dt_tensor *c = NULL;
      cr_assert_eq(dt_addmm_ex(biases[bi], a, b, pairs[p][0], pairs[p][1], &c), DT_OK, "%s",
                   dt_last_error());
      double *vc = values(c);
      char what[64];
      snprintf(what, sizeof what, "bias %d beta %g alpha %g", bi, pairs[p][0], pairs[p][1]);
      check(va, vb, vbias, pairs[p][0], pairs[p][1], vc, 1, m, n, k, 0, what);
      free(vc);
      dt_tensor_release(c);
    }
    free(vbias);
    dt_tensor_release(be);
  }
  /* beta 0: a NaN bias is not read */
  float *pb = dt_tensor_data(biases[0]);
  pb[3] = NAN;
  dt_tensor *c = NULL;
  cr_assert_eq(dt_addmm_ex(biases[0], a, b, 0, 1, &c), DT_OK);
  double *vc = values(c);
  check(va, vb, NULL, 0, 1, vc, 1, m, n, k, 0, "beta 0, NaN bias");
  free(vc);
  dt_tensor_release(c);
  for (int bi = 0; bi < 3; bi++) dt_tensor_release(biases[bi]);
  free(va);
  free(vb);
  dt_tensor_release(a);
  dt_tensor_release(b);
}

/* linear: x [2, 40, k] (folded: 80 rows), a sliced x (not foldable), weight [n, k], bias row. */
Test(matmul_amx_edges, linear_with_bias) {
  int64_t k = 520, n = 200;
  int64_t sx[3] = {2, 40, k + 8}, sw[2] = {n, k}, sbias[1] = {n};
  dt_tensor *xs = random_tensor(3, sx, DT_F32, 1.0), *w = random_tensor(2, sw, DT_F32, 1.0);
  dt_tensor *bias = random_tensor(1, sbias, DT_F32, 1.0), *wt = NULL;
  cr_assert_eq(dt_transpose(w, 0, 1, &wt), DT_OK);
  double *vw = values(wt), *vbias = values(bias);
  double *wb = malloc((size_t)(2 * k * n) * sizeof *wb), *bias_rows = malloc((size_t)(40 * n) * 8);
  memcpy(wb, vw, (size_t)(k * n) * sizeof *wb);
  memcpy(wb + k * n, vw, (size_t)(k * n) * sizeof *wb);
  for (int i = 0; i < 40; i++) memcpy(bias_rows + i * n, vbias, (size_t)n * sizeof *vbias);
  for (int sliced = 0; sliced < 2; sliced++) {
    dt_tensor *x = NULL, *c = NULL;
    cr_assert_eq(dt_narrow(xs, 2, sliced ? 8 : 0, k, &x), DT_OK);
    dt_tensor *xc = NULL;
    if (!sliced) { /* contiguous rows: folded into one product of 80 rows */
      cr_assert_eq(dt_contiguous(x, &xc), DT_OK);
      dt_tensor_release(x);
      x = xc;
    }
    cr_assert_eq(dt_linear(x, w, bias, &c), DT_OK, "%s", dt_last_error());
    double *vx = values(x), *vc = values(c);
    check(vx, wb, bias_rows, 1, 1, vc, 2, 40, n, k, 0, sliced ? "linear, sliced x" : "linear");
    free(vx);
    free(vc);
    dt_tensor_release(x);
    dt_tensor_release(c);
  }
  free(vw);
  free(vbias);
  free(wb);
  free(bias_rows);
  dt_tensor_release(xs);
  dt_tensor_release(w);
  dt_tensor_release(wt);
  dt_tensor_release(bias);
}

/* ---- Special values ------------------------------------------------------------------ */

/* a [64, 1024] b [1024, 128]: 2^23 multiply-adds, on AMX where the CPU has it. Rows of a hold
 * one special value each against random b; the float64 loop gives what sgemm would. */
Test(matmul_amx_edges, special_values) {
  int64_t m = 64, n = 128, k = 1024;
  int64_t sa[2] = {m, k}, sb[2] = {k, n};
  dt_tensor *a = random_tensor(2, sa, DT_F32, 1.0), *b = random_tensor(2, sb, DT_F32, 1.0);
  float *pa = dt_tensor_data(a), *pb = dt_tensor_data(b);
  for (int i = 0; i < 8; i++)
    for (int p = 0; p < k; p++) pa[i * k + p] = 0.0f;
  pa[0 * k + 5] = NAN;      /* row 0: NaN everywhere */
  pa[1 * k + 3] = INFINITY; /* row 1: +-inf by b[3][j]'s sign; NaN where it is 0 */
  pb[3 * n + 7] = 0.0f;     /* ... and -0 */
  pb[3 * n + 8] = -0.0f;
  for (int p = 0; p < k; p++) pa[2 * k + p] = -0.0f; /* row 2: zeros */
  pa[3 * k + 9] = FLT_MAX;                           /* row 3: FLT_MAX b[9][j], finite */
  pa[4 * k + 10] = 1e-39f;   /* row 4: a denormal (flushed on AMX: documented) */
  pa[5 * k + 11] = -FLT_MAX; /* row 5: -FLT_MAX x 2 overflows to -inf */
  pb[11 * n + 0] = 2.0f;
  pa[6 * k + 12] = 1e30f; /* row 6: large and small terms together */
  pa[6 * k + 13] = 1e-30f;
  pa[7 * k + 14] = FLT_MIN; /* row 7: the smallest normal float times b */
  dt_tensor *c = NULL;
  cr_assert_eq(dt_matmul(a, b, &c), DT_OK, "%s", dt_last_error());
  double *va = values(a), *vb = values(b), *vc = values(c);
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) {
      double mag, s = dot64(va, vb, i, j, n, k, &mag);
      double got = vc[i * n + j];
      if (isnan(s)) {
        cr_assert(isnan(got), "[%d][%d]: %g, float64 NaN", i, j, got);
      } else if (fabs(s) > FLT_MAX) {
        cr_assert(isinf(got) && (got > 0) == (s > 0), "[%d][%d]: %g, float64 %g", i, j, got, s);
      } else {
        cr_assert(isfinite(got) && fabs(got - s) <= 8 * 0x1p-24 * mag + 1e-37,
                  "[%d][%d] = %.9g, float64 %.9g", i, j, got, s);
      }
    }
  cr_assert(isnan(vc[1 * n + 7]) && isnan(vc[1 * n + 8]), "inf x 0 and inf x -0: NaN");
  for (int j = 0; j < n; j++) cr_assert_eq(vc[2 * n + j], 0.0, "zeros give zero");
  free(va);
  free(vb);
  free(vc);
  dt_tensor_release(a);
  dt_tensor_release(b);
  dt_tensor_release(c);
}

/* A single product whose float32 value is finite but within 2^-8 of FLT_MAX (FLT_MAX itself,
 * 2^119 x 511.75): sgemm gives the finite value; the AMX path may give an infinity of its sign
 * there (a documented difference: its rounded parts' product x0 y0 passes 2^128), but a finite
 * result must be the exact one, and products further below stay finite and exact. */
Test(matmul_amx_edges, products_next_to_the_largest_float) {
  int64_t m = 64, n = 128, k = 1024;
  int64_t sa[2] = {m, k}, sb[2] = {k, n};
  dt_tensor *a = NULL, *b = NULL;
  cr_assert_eq(dt_zeros(2, sa, DT_F32, &a), DT_OK);
  cr_assert_eq(dt_zeros(2, sb, DT_F32, &b), DT_OK);
  float *pa = dt_tensor_data(a), *pb = dt_tensor_data(b);
  pa[0] = 0x1p119f;
  pa[k] = -0x1p119f;
  const float y[4] = {512.0f * (1.0f - 0x1p-24f), 511.75f, -511.5f, 510.0f};
  for (int j = 0; j < 4; j++) pb[j] = y[j];
  for (int amx = 1; amx >= 0; amx--) {
    dt__amx_set_enabled(amx);
    dt_tensor *c = NULL;
    cr_assert_eq(dt_matmul(a, b, &c), DT_OK, "%s", dt_last_error());
    const float *pc = dt_tensor_data(c);
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < 4; j++) {
        float want = (i ? -0x1p119f : 0x1p119f) * y[j], got = pc[i * n + j];
        bool near = fabs((double)want) > 0x1p128 * (1 - 0x1p-8);
        cr_assert(got == want || (amx && near && isinf(got) && (got > 0) == (want > 0)),
                  "AMX %s: [%d][%d] = %g, want %g", amx ? "on" : "off", i, j, got, want);
      }
    dt_tensor_release(c);
  }
  dt__amx_set_enabled(true);
  dt_tensor_release(a);
  dt_tensor_release(b);
}

/* ---- 16-bit floats ------------------------------------------------------------------- */

/* bfloat16 and float16 matmul and linear (computed in float32, rounded once): the float64
 * product of the 16-bit values, within the output's rounding; a transposed bfloat16 operand
 * (converted in memory order) against a float32 one gives float32, at sgemm's tolerance. */
Test(matmul_amx_edges, sixteen_bit_floats) {
  int64_t m = 96, n = 200, k = 448;
  const dt_dtype types[2] = {DT_BF16, DT_F16};
  const double rel[2] = {0x1p-8, 0x1p-10};
  for (int d = 0; d < 2; d++)
    for (int v = 0; v < 4; v++) {
      dt_tensor *a = operand(m, k, v & 1, v >= 2 ? 5 : 0, types[d], 1.0);
      dt_tensor *b = operand(k, n, v & 2, v & 1 ? 3 : 0, types[d], 1.0), *c = NULL;
      cr_assert_eq(dt_matmul(a, b, &c), DT_OK, "%s", dt_last_error());
      cr_assert_eq(dt_tensor_dtype(c), types[d]);
      double *va = values(a), *vb = values(b), *vc = values(c);
      check(va, vb, NULL, 0, 1, vc, 1, m, n, k, rel[d], d ? "float16 matmul" : "bfloat16 matmul");
      free(va);
      free(vb);
      free(vc);
      dt_tensor_release(a);
      dt_tensor_release(b);
      dt_tensor_release(c);
    }
  /* linear: x [2, 48, k], weight [n, k] (its transpose read), bias [n] */
  int64_t sx[3] = {2, 48, k}, sw[2] = {n, k}, sbias[1] = {n};
  for (int d = 0; d < 2; d++) {
    dt_tensor *x = random_tensor(3, sx, types[d], 1.0), *w = random_tensor(2, sw, types[d], 1.0);
    dt_tensor *bias = random_tensor(1, sbias, types[d], 1.0), *wt = NULL, *c = NULL;
    cr_assert_eq(dt_linear(x, w, bias, &c), DT_OK, "%s", dt_last_error());
    cr_assert_eq(dt_transpose(w, 0, 1, &wt), DT_OK);
    double *vx = values(x), *vw = values(wt), *vbias = values(bias), *vc = values(c);
    double *wb = malloc((size_t)(2 * k * n) * sizeof *wb), *rows = malloc((size_t)(48 * n) * 8);
    memcpy(wb, vw, (size_t)(k * n) * 8);
    memcpy(wb + k * n, vw, (size_t)(k * n) * 8);
    for (int i = 0; i < 48; i++) memcpy(rows + i * n, vbias, (size_t)n * 8);
    check(vx, wb, rows, 1, 1, vc, 2, 48, n, k, rel[d], d ? "float16 linear" : "bfloat16 linear");
    free(vx);
    free(vw);
    free(vbias);
    free(vc);
    free(wb);
    free(rows);
    dt_tensor_release(x);
    dt_tensor_release(w);
    dt_tensor_release(wt);
    dt_tensor_release(bias);
    dt_tensor_release(c);
  }
  /* mixed: a transposed, broadcast bfloat16 operand against float32: float32 out */
  int64_t sb3[3] = {1, n, k}, full[3] = {3, k, n}, sa3[3] = {3, m, k};
  dt_tensor *bs = random_tensor(3, sb3, DT_BF16, 1.0), *bt = NULL, *be = NULL, *c = NULL;
  dt_tensor *a = random_tensor(3, sa3, DT_F32, 1.0);
  cr_assert_eq(dt_transpose(bs, 1, 2, &bt), DT_OK);
  cr_assert_eq(dt_expand(bt, 3, full, &be), DT_OK);
  cr_assert_eq(dt_matmul(a, be, &c), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_tensor_dtype(c), DT_F32);
  double *va = values(a), *vb = values(be), *vc = values(c);
  check(va, vb, NULL, 0, 1, vc, 3, m, n, k, 0, "float32 x broadcast transposed bfloat16");
  free(va);
  free(vb);
  free(vc);
  dt_tensor_release(a);
  dt_tensor_release(bs);
  dt_tensor_release(bt);
  dt_tensor_release(be);
  dt_tensor_release(c);
}

/* The 16-bit conversions of dt_to, contiguous and strided, against element.h's scalar
 * functions: every bfloat16 and float16 bit pattern to float32, and float32 values of every
 * kind (NaNs, infinities, -0, denormals, rounding ties, overflow) to both. */
Test(matmul_amx_edges, sixteen_bit_conversions) {
  int64_t all[1] = {65536};
  uint16_t *bits = malloc(65536 * sizeof *bits);
  for (int i = 0; i < 65536; i++) bits[i] = (uint16_t)i;
  for (int d = 0; d < 2; d++) {
    dt_dtype type = d ? DT_F16 : DT_BF16;
    dt_tensor *h = NULL, *f = NULL, *hs = NULL, *fs = NULL;
    cr_assert_eq(dt_from_data(bits, 1, all, type, &h), DT_OK);
    cr_assert_eq(dt_to(h, DT_F32, &f), DT_OK);
    cr_assert_eq(dt_slice(h, 0, 1, 65536, 3, &hs), DT_OK);
    cr_assert_eq(dt_to(hs, DT_F32, &fs), DT_OK);
    const uint32_t *pf = dt_tensor_data(f), *pfs = dt_tensor_data(fs);
    for (int i = 0; i < 65536; i++) {
      float want = d ? dt__elem_f16_to_f32(bits[i]) : dt__elem_bf16_to_f32(bits[i]);
      uint32_t w;
      memcpy(&w, &want, 4);
      cr_assert_eq(pf[i], w, "%s %#x -> %#x, want %#x", d ? "f16" : "bf16", i, pf[i], w);
      if (i % 3 == 1) cr_assert_eq(pfs[i / 3], w, "strided %#x", i);
    }
    dt_tensor_release(h);
    dt_tensor_release(f);
    dt_tensor_release(hs);
    dt_tensor_release(fs);
  }
  free(bits);
  /* float32 -> 16 bits: specials and random bit patterns */
  int64_t count = 4096;
  uint32_t *f = malloc((size_t)count * 4);
  const uint32_t specials[] = {0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x7f800000u, 0xff800000u,
                               0x80000000u, 0x00000001u, 0x807fffffu, 0x3f808000u, 0x3f818000u,
                               0x3f80ffffu, 0x7f7fffffu, 0x477ff000u, 0x477fefffu, 0x33000000u,
                               0x33000001u, 0x387fc000u, 0xc77fffffu};
  for (int64_t i = 0; i < count; i++) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    f[i] = i < (int64_t)(sizeof specials / 4) ? specials[i] : (uint32_t)(rng >> 17);
  }
  int64_t shape[1] = {count};
  dt_tensor *ft = NULL, *fts = NULL;
  cr_assert_eq(dt_from_data(f, 1, shape, DT_F32, &ft), DT_OK);
  cr_assert_eq(dt_slice(ft, 0, 0, count, 2, &fts), DT_OK);
  for (int d = 0; d < 2; d++) {
    dt_tensor *h = NULL, *hs = NULL;
    cr_assert_eq(dt_to(ft, d ? DT_F16 : DT_BF16, &h), DT_OK);
    cr_assert_eq(dt_to(fts, d ? DT_F16 : DT_BF16, &hs), DT_OK);
    const uint16_t *ph = dt_tensor_data(h), *phs = dt_tensor_data(hs);
    for (int64_t i = 0; i < count; i++) {
      float x;
      memcpy(&x, &f[i], 4);
      uint16_t want = d ? dt__elem_f32_to_f16(x) : dt__elem_f32_to_bf16(x);
      cr_assert_eq(ph[i], want, "%s of %#x: %#x, want %#x", d ? "f16" : "bf16", f[i], ph[i], want);
      if (i % 2 == 0) cr_assert_eq(phs[i / 2], want, "strided, of %#x", f[i]);
    }
    dt_tensor_release(h);
    dt_tensor_release(hs);
  }
  dt_tensor_release(ft);
  dt_tensor_release(fts);
  free(f);
}

/* ---- Threads, fork, DT_AMX ----------------------------------------------------------- */

typedef struct rank_case {
  int64_t m, n, k;
  int failures[8];
} rank_case;

/* Each rank its own shape (all past the thresholds, different workspace sizes), three
 * products in a row, each against the float64 loop. */
static dt_status rank_products(dt_comm *world, void *arg) {
  rank_case *rc = arg;
  int r = dt_comm_rank(world);
  int64_t m = rc->m + 16 * r + r, n = rc->n + 40 * r, k = rc->k - 60 * r + 3 * r;
  uint64_t seed = 0x1234567ull * (uint64_t)(r + 1);
  for (int rep = 0; rep < 3; rep++) {
    int64_t sa[2] = {m, k}, sb[2] = {k, n};
    float *pa = malloc((size_t)(m * k) * 4), *pb = malloc((size_t)(k * n) * 4);
    for (int64_t i = 0; i < m * k + k * n; i++) {
      seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
      float v = (float)((double)(seed >> 11) / 9007199254740992.0 * 2.0 - 1.0);
      if (i < m * k)
        pa[i] = v;
      else
        pb[i - m * k] = v;
    }
    dt_tensor *a = NULL, *b = NULL, *c = NULL;
    if (dt_from_data(pa, 2, sa, DT_F32, &a) || dt_from_data(pb, 2, sb, DT_F32, &b) ||
        dt_matmul(a, b, &c)) {
      rc->failures[r]++;
    } else {
      const float *pc = dt_tensor_data(c);
      for (int64_t i = 0; i < m; i += 7)
        for (int64_t j = 0; j < n; j++) {
          double s = 0, mag = 0;
          for (int64_t p = 0; p < k; p++) {
            s += (double)pa[i * k + p] * pb[p * n + j];
            mag += fabs((double)pa[i * k + p] * pb[p * n + j]);
          }
          if (!(fabs(pc[i * n + j] - s) <= 8 * 0x1p-24 * mag)) rc->failures[r]++;
        }
    }
    dt_tensor_release(a);
    dt_tensor_release(b);
    dt_tensor_release(c);
    free(pa);
    free(pb);
  }
  return DT_OK;
}

Test(matmul_amx_edges, eight_rank_threads_at_once) {
  rank_case rc = {.m = 64, .n = 128, .k = 1100};
  cr_assert_eq(dt_comm_spawn(8, rank_products, &rc), DT_OK, "%s", dt_last_error());
  for (int r = 0; r < 8; r++) cr_assert_eq(rc.failures[r], 0, "rank %d: wrong elements", r);
}

/* 1 and 2 pool threads: the product splits into blocks of rows on 2 (at multiples of 96), and
 * every element keeps its bits. */
Test(matmul_amx_edges, one_and_two_threads_same_bits) {
  int64_t m = 400, n = 256, k = 300;
  for (int v = 0; v < 4; v++) {
    dt_tensor *a = operand(m, k, v & 1, 0, DT_F32, 1.0), *b = operand(k, n, v & 2, 0, DT_F32, 1.0);
    dt_tensor *c1 = NULL, *c2 = NULL;
    cr_assert_eq(dt_set_num_threads(1), DT_OK);
    cr_assert_eq(dt_matmul(a, b, &c1), DT_OK);
    cr_assert_eq(dt_set_num_threads(2), DT_OK);
    cr_assert_eq(dt_matmul(a, b, &c2), DT_OK);
    cr_assert_eq(memcmp(dt_tensor_data(c1), dt_tensor_data(c2), (size_t)(m * n) * 4), 0,
                 "variant %d: 1 and 2 threads differ", v);
    dt_tensor_release(a);
    dt_tensor_release(b);
    dt_tensor_release(c1);
    dt_tensor_release(c2);
  }
  cr_assert_eq(dt_set_num_threads(0), DT_OK);
}

/* A child forked after the parent ran AMX products runs them too, with the same bits. */
Test(matmul_amx_edges, forked_child_after_amx) {
  int64_t sa[2] = {128, 512}, sb[2] = {512, 192};
  dt_tensor *a = random_tensor(2, sa, DT_F32, 1.0), *b = random_tensor(2, sb, DT_F32, 1.0);
  dt_tensor *c = NULL;
  cr_assert_eq(dt_matmul(a, b, &c), DT_OK);
  pid_t pid = fork();
  cr_assert_neq(pid, -1);
  if (pid == 0) {
    for (int rep = 0; rep < 2; rep++) {
      dt_tensor *cc = NULL;
      if (dt_matmul(a, b, &cc) != DT_OK) _exit(1);
      if (memcmp(dt_tensor_data(cc), dt_tensor_data(c), 128 * 192 * 4) != 0) _exit(2);
      dt_tensor_release(cc);
    }
    dt_tensor_release(a); /* nothing left for valgrind's leak check in the child */
    dt_tensor_release(b);
    dt_tensor_release(c);
    _exit(0);
  }
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child: status %#x", status);
  dt_tensor_release(a);
  dt_tensor_release(b);
  dt_tensor_release(c);
}

/* DT_AMX in a fresh child (read once per process): exit code bit 0: AMX usable; bit 1: a
 * product equal to sgemm's bits; bits 2-3: the warnings the log got (bit 4: one naming the
 * variable and value). */
static int amx_env_child(const char *value) {
  pid_t pid = fork();
  if (pid == 0) {
    log_capture_start();
    if (value)
      setenv("DT_AMX", value, 1);
    else
      unsetenv("DT_AMX");
    int code = dt__amx_usable() ? 1 : 0;
    setenv("DT_AMX", "0", 1); /* read once: not seen */
    if (dt__amx_usable() != (code == 1)) _exit(64);
    int64_t sa[2] = {128, 256}, sb[2] = {256, 256};
    dt_tensor *a = random_tensor(2, sa, DT_F32, 1.0), *b = random_tensor(2, sb, DT_F32, 1.0);
    dt_tensor *c = NULL;
    float *ref = malloc(128 * 256 * 4);
    dt_set_num_threads(1);
    if (dt_matmul(a, b, &c) != DT_OK) _exit(65);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 128, 256, 256, 1, dt_tensor_data(a), 256,
                dt_tensor_data(b), 256, 0, ref, 256);
    if (memcmp(ref, dt_tensor_data(c), 128 * 256 * 4) == 0) code |= 2;
    code |= (warnings > 3 ? 3 : warnings) << 2;
    if (warnings && strstr(last_warning, "DT_AMX") && value && strstr(last_warning, value))
      code |= 16;
    free(ref);
    dt_tensor_release(a);
    dt_tensor_release(b);
    dt_tensor_release(c);
    _exit(code);
  }
  int status = -1;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100;
}

Test(matmul_amx_edges, amx_environment_values) {
  int unset = amx_env_child(NULL), zero = amx_env_child("0"), one = amx_env_child("1");
  int empty = amx_env_child(""), bad = amx_env_child("abc"), spaced = amx_env_child(" 0");
  bool hardware = unset & 1;
  cr_assert_eq(zero, 2, "DT_AMX=0: off, sgemm's bits, no warning (%d)", zero);
  int on = hardware ? 1 : 2; /* AMX: its own bits; without: the BLAS's */
  cr_assert_eq(unset, on, "unset (%d)", unset);
  cr_assert_eq(one, on, "DT_AMX=1 (%d)", one);
  cr_assert_eq(empty, on, "DT_AMX= (empty) is unset (%d)", empty);
  cr_assert_eq(bad, on | 4 | 16, "DT_AMX=abc: the default, reported once (%d)", bad);
  cr_assert_eq(spaced, on | 4 | 16, "DT_AMX=\" 0\": the default, reported once (%d)", spaced);
}

/* Which path a product takes, seen in its bits on one thread: below each threshold, and with
 * (beta, alpha) other than (0 or 1, 1), dt_matmul / dt_addmm_ex give cblas_sgemm's bits
 * exactly; at the thresholds (when the CPU has AMX) bits of their own. */
static bool same_as_sgemm(int64_t m, int64_t n, int64_t k, double beta, double alpha) {
  int64_t sa[2] = {m, k}, sb[2] = {k, n}, sbias[1] = {n};
  dt_tensor *a = random_tensor(2, sa, DT_F32, 1.0), *b = random_tensor(2, sb, DT_F32, 1.0);
  dt_tensor *bias = random_tensor(1, sbias, DT_F32, 1.0), *c = NULL;
  cr_assert_eq(dt_addmm_ex(bias, a, b, beta, alpha, &c), DT_OK, "%s", dt_last_error());
  float *ref = malloc((size_t)(m * n) * sizeof *ref);
  const float *pbias = dt_tensor_data(bias);
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) ref[i * n + j] = beta == 0 ? 0.0f : pbias[j];
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k, (float)alpha,
              dt_tensor_data(a), (int)k, dt_tensor_data(b), (int)n, beta == 0 ? 1.0f : (float)beta,
              ref, (int)n);
  bool same = memcmp(ref, dt_tensor_data(c), (size_t)(m * n) * sizeof *ref) == 0;
  free(ref);
  dt_tensor_release(a);
  dt_tensor_release(b);
  dt_tensor_release(bias);
  dt_tensor_release(c);
  return same;
}

Test(matmul_amx_edges, path_choice) {
  cr_assert_eq(dt_set_num_threads(1), DT_OK);
  static const int64_t below[][3] = {
      {64, 128, 1023}, {63, 128, 2000}, {64, 127, 2000}, {365, 365, 63}};
  for (int s = 0; s < 4; s++)
    cr_assert(same_as_sgemm(below[s][0], below[s][1], below[s][2], 0, 1), "[%ld x %ld x %ld]",
              (long)below[s][0], (long)below[s][1], (long)below[s][2]);
  static const double not_amx[][2] = {{0.5, 1}, {1, 0.5}, {2, 1}, {0, -1}, {1, 2}};
  for (int p = 0; p < 5; p++)
    cr_assert(same_as_sgemm(128, 256, 512, not_amx[p][0], not_amx[p][1]), "beta %g alpha %g",
              not_amx[p][0], not_amx[p][1]);
  if (dt__amx_usable()) {
    static const int64_t at[][3] = {{64, 128, 1024}, {365, 365, 64}, {128, 256, 512}};
    for (int s = 0; s < 3; s++) {
      cr_assert(!same_as_sgemm(at[s][0], at[s][1], at[s][2], 0, 1), "[%ld x %ld x %ld]: AMX",
                (long)at[s][0], (long)at[s][1], (long)at[s][2]);
      cr_assert(!same_as_sgemm(at[s][0], at[s][1], at[s][2], 1, 1), "bias row: AMX");
    }
  }
  cr_assert_eq(dt_set_num_threads(0), DT_OK);
}

/* A transposed bfloat16 operand whose float32 copy cannot be allocated (a broadcast view of
 * 2^16 x 64 x 2^16 elements: 1 TiB as float32): dt_matmul says so (DT_ERR_NOMEM) and leaves
 * nothing behind (the sanitizer build checks the views and copies it made on the way). */
Test(matmul_amx_edges, conversion_that_cannot_be_allocated) {
  int64_t k = 65536, m = 64, batch = 65536;
  int64_t stored[3] = {1, k, m}, full[3] = {batch, m, k}, sb[2] = {k, 1};
  dt_tensor *s = random_tensor(3, stored, DT_BF16, 1.0), *t = NULL, *a = NULL, *c = NULL;
  dt_tensor *b = random_tensor(2, sb, DT_F32, 1.0);
  cr_assert_eq(dt_transpose(s, 1, 2, &t), DT_OK);
  cr_assert_eq(dt_expand(t, 3, full, &a), DT_OK, "%s", dt_last_error());
  dt_status st = dt_matmul(a, b, &c);
  cr_assert_eq(st, DT_ERR_NOMEM, "status %d: %s", (int)st, dt_last_error());
  cr_assert_null(c);
  dt_tensor_release(s);
  dt_tensor_release(t);
  dt_tensor_release(a);
  dt_tensor_release(b);
}

/* Tiny normal values: products of 2^-100 keep float32's precision (about an ulp on AMX); below
 * about 2^-110 the parts under 2^-126 are flushed on AMX (documented: down to bfloat16's precision,
 * relative error up to 2^-7, at 2^-117), while sgemm keeps float32's. */
Test(matmul_amx_edges, tiny_values) {
  int64_t m = 64, n = 128, k = 1024;
  int64_t sa[2] = {m, k}, sb[2] = {k, n};
  const int scale[3] = {-100, -112, -117};
  for (int amx = 1; amx >= 0; amx--)
    for (int e = 0; e < 3; e++) {
      dt__amx_set_enabled(amx);
      dt_tensor *a = NULL, *b = NULL, *c = NULL;
      cr_assert_eq(dt_zeros(2, sa, DT_F32, &a), DT_OK);
      cr_assert_eq(dt_zeros(2, sb, DT_F32, &b), DT_OK);
      float *pa = dt_tensor_data(a), *pb = dt_tensor_data(b);
      for (int i = 0; i < m; i++)
        pa[i * k] = ldexpf(1.0f + (float)(i * 2654435761u % 8388608u) / 8388608.0f, scale[e]);
      for (int j = 0; j < n; j++) pb[j] = 1.0f + (float)(j * 40503u % 8388608u) / 8388608.0f;
      cr_assert_eq(dt_matmul(a, b, &c), DT_OK, "%s", dt_last_error());
      const float *pc = dt_tensor_data(c);
      double bound = !amx               ? 0x1p-24
                     : scale[e] >= -100 ? 0x1p-22
                     : scale[e] >= -112 ? 0x1p-13
                                        : 0x1p-7;
      for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
          double want = (double)pa[i * k] * pb[j];
          cr_assert(fabs(pc[i * n + j] - want) <= bound * want, "AMX %d, 2^%d: %.9g, want %.9g",
                    amx, scale[e], pc[i * n + j], want);
        }
      dt_tensor_release(a);
      dt_tensor_release(b);
      dt_tensor_release(c);
    }
  dt__amx_set_enabled(true);
}
