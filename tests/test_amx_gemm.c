/* The float32 GEMM on AMX tiles (src/kernels/cpu/amx_gemm.c) against a float64 loop: every
 * transpose combination, sizes that are and are not multiples of the 16 x 32 tiles, leading
 * dimensions wider than the rows, accumulation into c, special values (inf, NaN, the largest
 * floats, numbers whose bfloat16 parts round), blocks of rows or columns computed apart give
 * the same bits as the whole, and dt_matmul takes the path. Skips where the CPU has no AMX
 * (then only the off switch and the fallback are checked). Includes kernels/cpu/amx_gemm.h
 * and kernels/cpu/blas.h: internal. */
#include <cblas.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dtensor/dtensor.h"
#include "kernels/cpu/amx_gemm.h"

static uint64_t rng = 88172645463325252ull;
static float uniform(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static float *random_floats(size_t n, float scale) {
  float *p = malloc(n * sizeof *p);
  cr_assert_not_null(p);
  for (size_t i = 0; i < n; i++) p[i] = uniform() * scale;
  return p;
}

static double elem(const float *x, int ld, bool t, int r, int c) {
  return t ? x[(size_t)c * ld + r] : x[(size_t)r * ld + c];
}

/* Checks c against the float64 product (plus c0 when accumulating): each element within
 * 8 * 2^-24 of sum |a b| (plus |c0|), where a float32 sgemm lands (the measured largest
 * error of both is below 2 * 2^-24 of it: docs/benchmarks.md). */
static void check_product(bool ta, bool tb, int m, int n, int k, const float *a, int lda,
                          const float *b, int ldb, const float *c0, const float *c, int ldc) {
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) {
      double s = c0 ? c0[(size_t)i * ldc + j] : 0, mag = c0 ? fabs(s) : 0;
      for (int p = 0; p < k; p++) {
        double v = elem(a, lda, ta, i, p) * elem(b, ldb, tb, p, j);
        s += v;
        mag += fabs(v);
      }
      double got = c[(size_t)i * ldc + j];
      cr_assert(fabs(got - s) <= 8 * 0x1p-24 * mag + 1e-37,
                "ta %d tb %d [%d x %d x %d]: c[%d][%d] = %.9g, float64 %.9g (sum |ab| %.3g)", ta,
                tb, m, n, k, i, j, got, s, mag);
    }
}

/* Rounds every value to the nearest bfloat16 (then its parts 1 and 2 are zeros, and the
 * kernel leaves out the products they would enter). */
static void to_bfloat16(float *p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &p[i], sizeof u);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&p[i], &u, sizeof u);
  }
}

static void run_case_bf16(bool ta, bool tb, int m, int n, int k, int pad, bool accumulate,
                          bool a_bf16, bool b_bf16) {
  int lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
  float *a = random_floats((size_t)(ta ? k : m) * lda, 1.0f);
  float *b = random_floats((size_t)(tb ? n : k) * ldb, 3.0f);
  if (a_bf16) to_bfloat16(a, (size_t)(ta ? k : m) * lda);
  if (b_bf16) to_bfloat16(b, (size_t)(tb ? n : k) * ldb);
  float *c = random_floats((size_t)m * ldc, 2.0f);
  float *c0 = malloc((size_t)m * ldc * sizeof *c0);
  memcpy(c0, c, (size_t)m * ldc * sizeof *c0);
  cr_assert(dt__amx_sgemm(ta, tb, m, n, k, a, lda, b, ldb, accumulate, c, ldc));
  check_product(ta, tb, m, n, k, a, lda, b, ldb, accumulate ? c0 : NULL, c, ldc);
  /* the padding columns of c are untouched */
  for (int i = 0; i < m; i++)
    for (int j = n; j < ldc; j++)
      cr_assert_eq(c[(size_t)i * ldc + j], c0[(size_t)i * ldc + j], "c's padding at [%d][%d]", i,
                   j);
  free(a);
  free(b);
  free(c);
  free(c0);
}

static void run_case(bool ta, bool tb, int m, int n, int k, int pad, bool accumulate) {
  run_case_bf16(ta, tb, m, n, k, pad, accumulate, false, false);
}

static void skip_without_amx(void) {
  if (!dt__amx_usable()) cr_skip_test("this CPU (or OS) runs no AMX tiles");
}

Test(amx_gemm, transposes_edges_and_accumulation) {
  skip_without_amx();
  static const int sizes[][3] = {{1, 1, 1},     {16, 16, 32},   {17, 33, 31},    {64, 48, 95},
                                 {100, 70, 45}, {33, 130, 513}, {130, 33, 1100}, {5, 257, 64}};
  for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
    for (int t = 0; t < 4; t++)
      run_case(t & 1, t & 2, sizes[s][0], sizes[s][1], sizes[s][2], (int)(s % 3) * 5,
               (s + (size_t)t) % 2 == 1);
  /* more rows than one block of packed rows (2048) */
  for (int t = 0; t < 4; t++) run_case(t & 1, t & 2, 2100, 40, 70, 3, t == 1);
}

Test(amx_gemm, as_accurate_as_sgemm) {
  skip_without_amx();
  /* The largest error per element over sum |a b|, AMX and the linked sgemm side by side on
   * the same operands (a transformer's shapes, scaled down). */
  int m = 192, n = 160, k = 1024;
  float *a = random_floats((size_t)m * k, 1.0f), *b = random_floats((size_t)k * n, 1.0f);
  float *c1 = malloc((size_t)m * n * sizeof *c1), *c2 = malloc((size_t)m * n * sizeof *c2);
  cr_assert(dt__amx_sgemm(false, false, m, n, k, a, k, b, n, false, c1, n));
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1, a, k, b, n, 0, c2, n);
  double e1 = 0, e2 = 0;
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) {
      double s = 0, mag = 0;
      for (int p = 0; p < k; p++) {
        double v = (double)a[(size_t)i * k + p] * b[(size_t)p * n + j];
        s += v;
        mag += fabs(v);
      }
      e1 = fmax(e1, fabs(c1[i * n + j] - s) / mag);
      e2 = fmax(e2, fabs(c2[i * n + j] - s) / mag);
    }
  cr_assert(e1 <= 2 * e2 + 0x1p-24, "AMX's largest error %.3g, sgemm's %.3g (of sum |ab|)", e1, e2);
  free(a);
  free(b);
  free(c1);
  free(c2);
}

Test(amx_gemm, special_values) {
  skip_without_amx();
  int m = 32, n = 32, k = 64;
  float *a = calloc((size_t)m * k, sizeof *a), *b = calloc((size_t)k * n, sizeof *b);
  float *c = calloc((size_t)m * n, sizeof *c);
  /* row 0: the largest float (its rounded bfloat16 part would be infinite) times 1 */
  a[0] = 3.4028235e38f;
  /* row 1: 1 + 2^-23 (needs all three parts) times 1 - 2^-24 */
  a[1 * k + 0] = 1.0f + 0x1p-23f;
  /* row 2: inf times 1 (column 0) and times 0 (column 3: NaN, as in float arithmetic) */
  a[2 * k + 0] = INFINITY;
  /* row 3: NaN */
  a[3 * k + 5] = NAN;
  /* row 4: -inf times 2 */
  a[4 * k + 0] = -INFINITY;
  for (int j = 0; j < n; j++)
    b[0 * n + j] = j == 0 ? 1.0f : j == 1 ? 1.0f - 0x1p-24f : j == 3 ? 0.0f : 2.0f;
  /* once as c = a b, once as c^T = b^T a^T (the special values then in the B operand) */
  for (int side = 0; side < 2; side++) {
    if (side == 0) {
      cr_assert(dt__amx_sgemm(false, false, m, n, k, a, k, b, n, false, c, n));
    } else {
      float *ct = calloc((size_t)m * n, sizeof *ct);
      cr_assert(dt__amx_sgemm(true, true, n, m, k, b, n, a, k, false, ct, m));
      for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) c[i * n + j] = ct[j * m + i];
      free(ct);
    }
    cr_assert_eq(c[0 * n + 0], 3.4028235e38f, "FLT_MAX x 1 = %.9g", c[0]);
    cr_assert(isinf(c[0 * n + 2]) && c[0 * n + 2] > 0, "FLT_MAX x 2 overflows: %g", c[2]);
    float want = (float)((1.0 + 0x1p-23) * (1.0 - 0x1p-24));
    cr_assert_eq(c[1 * n + 1], want, "(1 + 2^-23)(1 - 2^-24) = %.9g, want %.9g", c[n + 1], want);
    cr_assert(isinf(c[2 * n + 0]) && c[2 * n] > 0, "inf x 1 = inf: %g", c[2 * n]);
    cr_assert(isnan(c[2 * n + 3]), "inf x 0 = NaN: %g", c[2 * n + 3]);
    for (int j = 0; j < n; j++) cr_assert(isnan(c[3 * n + j]), "NaN propagates to [3][%d]", j);
    cr_assert(isinf(c[4 * n + 2]) && c[4 * n + 2] < 0, "-inf x 2: %g", c[4 * n + 2]);
    for (int j = 0; j < n; j++) cr_assert_eq(c[5 * n + j], 0.0f, "a zero row gives zeros");
  }
  free(a);
  free(b);
  free(c);
}

Test(amx_gemm, blocks_give_the_same_bits) {
  skip_without_amx();
  int m = 200, n = 150, k = 700;
  for (int t = 0; t < 4; t++) {
    bool ta = t & 1, tb = t & 2;
    int lda = ta ? m : k, ldb = tb ? k : n;
    float *a = random_floats((size_t)m * k, 1.0f), *b = random_floats((size_t)k * n, 1.0f);
    float *whole = malloc((size_t)m * n * sizeof *whole), *parts = malloc((size_t)m * n * 4);
    cr_assert(dt__amx_sgemm(ta, tb, m, n, k, a, lda, b, ldb, false, whole, n));
    /* rows [0, 37) and [37, m); then columns [0, 53) and [53, n) of those */
    int r0 = 37, c0 = 53;
    const float *a_lo = a, *a_hi = ta ? a + r0 : a + (size_t)r0 * lda;
    const float *b_lo = b, *b_hi = tb ? b + (size_t)c0 * ldb : b + c0;
    cr_assert(dt__amx_sgemm(ta, tb, r0, c0, k, a_lo, lda, b_lo, ldb, false, parts, n));
    cr_assert(dt__amx_sgemm(ta, tb, r0, n - c0, k, a_lo, lda, b_hi, ldb, false, parts + c0, n));
    cr_assert(dt__amx_sgemm(ta, tb, m - r0, c0, k, a_hi, lda, b_lo, ldb, false,
                            parts + (size_t)r0 * n, n));
    cr_assert(dt__amx_sgemm(ta, tb, m - r0, n - c0, k, a_hi, lda, b_hi, ldb, false,
                            parts + (size_t)r0 * n + c0, n));
    cr_assert_eq(memcmp(whole, parts, (size_t)m * n * sizeof *whole), 0,
                 "ta %d tb %d: blocks differ from the whole product", ta, tb);
    free(a);
    free(b);
    free(whole);
    free(parts);
  }
}

/* dt_matmul of float32 operands big enough for AMX: the float64 reference's tolerance, and a
 * different result from the sgemm it replaces (it is not the BLAS running after all). */
Test(amx_gemm, matmul_takes_the_path) {
  skip_without_amx();
  int64_t sa[2] = {256, 384}, sb[2] = {384, 320};
  dt_tensor *a, *b, *on = NULL, *off = NULL;
  cr_assert_eq(dt_empty(2, sa, DT_F32, &a), DT_OK);
  cr_assert_eq(dt_empty(2, sb, DT_F32, &b), DT_OK);
  float *pa = dt_tensor_data(a), *pb = dt_tensor_data(b), scratch[64 * 64];
  for (int i = 0; i < 256 * 384; i++) pa[i] = uniform();
  for (int i = 0; i < 384 * 320; i++) pb[i] = uniform();
  cr_assert_eq(dt_matmul(a, b, &on), DT_OK, "%s", dt_last_error());
  dt__amx_set_enabled(false);
  cr_assert(!dt__amx_usable());
  cr_assert(!dt__amx_sgemm(false, false, 64, 64, 64, pa, 384, pb, 320, false, scratch, 64),
            "off: the caller runs the BLAS");
  cr_assert_eq(dt_matmul(a, b, &off), DT_OK, "%s", dt_last_error());
  dt__amx_set_enabled(true);
  dt_tensor_release(a);
  dt_tensor_release(b);
  dt_tensor_release(on);
  dt_tensor_release(off);
}

Test(amx_gemm, switched_off_declines) {
  dt__amx_set_enabled(false);
  float x[4] = {1, 2, 3, 4}, y[4];
  cr_assert(!dt__amx_usable());
  cr_assert(!dt__amx_sgemm(false, false, 2, 2, 2, x, 2, x, 2, false, y, 2));
  dt__amx_set_enabled(true);
}

/* Operands that are bfloat16 values already (one of them or both): the kernel runs three or
 * one of the six part products, and the result still meets the float64 reference; a strip of
 * float32 values among bfloat16 ones brings the other products back for its rows only. */
Test(amx_gemm, bfloat16_operands) {
  skip_without_amx();
  for (int which = 1; which <= 3; which++)
    for (int t = 0; t < 4; t++)
      run_case_bf16(t & 1, t & 2, 70, 90, 600, 3, t == 2, which & 1, which & 2);
  /* a bfloat16 A but one float32 row in it, against a float32 B */
  int m = 64, n = 64, k = 96;
  float *a = random_floats((size_t)m * k, 1.0f), *b = random_floats((size_t)k * n, 1.0f);
  to_bfloat16(a, (size_t)m * k);
  a[40 * k + 7] = 1.0f + 0x1p-20f;
  float *c = malloc((size_t)m * n * sizeof *c);
  cr_assert(dt__amx_sgemm(false, false, m, n, k, a, k, b, n, false, c, n));
  check_product(false, false, m, n, k, a, k, b, n, NULL, c, n);
  /* infinities in bfloat16 operands: inf x 0 is a NaN, inf x 2 an infinity */
  to_bfloat16(b, (size_t)k * n);
  a[3 * k + 0] = INFINITY;
  for (int j = 0; j < n; j++) b[j] = j == 5 ? 0.0f : 2.0f;
  for (int p = 1; p < k; p++) a[3 * k + p] = 0.0f;
  cr_assert(dt__amx_sgemm(false, false, m, n, k, a, k, b, n, false, c, n));
  cr_assert(isnan(c[3 * n + 5]), "inf x 0 = NaN: %g", c[3 * n + 5]);
  cr_assert(isinf(c[3 * n + 6]) && c[3 * n + 6] > 0, "inf x 2 = inf: %g", c[3 * n + 6]);
  free(a);
  free(b);
  free(c);
}

/* The public switch: dt_set_cpu_amx(false) sends products to the BLAS (dt_get_cpu_amx says
 * so), true brings AMX back where the CPU has it; a float32 matmul gives the same values to
 * float32 rounding either way. */
Test(amx_gemm, public_switch) {
  bool hardware = dt__amx_usable();
  cr_assert_eq(dt_set_cpu_amx(false), DT_OK);
  cr_assert(!dt_get_cpu_amx());
  int64_t sa[2] = {256, 512}, sb[2] = {512, 256};
  dt_tensor *a, *b, *off = NULL, *on = NULL;
  cr_assert_eq(dt_empty(2, sa, DT_F32, &a), DT_OK);
  cr_assert_eq(dt_empty(2, sb, DT_F32, &b), DT_OK);
  float *pa = dt_tensor_data(a), *pb = dt_tensor_data(b);
  for (int i = 0; i < 256 * 512; i++) pa[i] = uniform(), pb[i] = uniform();
  cr_assert_eq(dt_matmul(a, b, &off), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_set_cpu_amx(true), DT_OK);
  cr_assert_eq(dt_get_cpu_amx(), hardware);
  cr_assert_eq(dt_matmul(a, b, &on), DT_OK, "%s", dt_last_error());
  check_product(false, false, 256, 256, 512, pa, 512, pb, 256, NULL, dt_tensor_data(off), 256);
  check_product(false, false, 256, 256, 512, pa, 512, pb, 256, NULL, dt_tensor_data(on), 256);
  dt_tensor_release(a);
  dt_tensor_release(b);
  dt_tensor_release(on);
  dt_tensor_release(off);
}
