/* The float32 row primitives of kernels/cpu/rows.h (softmax, log_softmax, cross_entropy and
 * the normalizations run on them) against naive double loops: the maximum (integer-key
 * vector loop) with NaN, infinities and signed zeros anywhere in rows of every length
 * around the vector width, and the sum of exp(x - m) with and without its stored terms
 * (one fused pass), in place too. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "kernels/cpu/rows.h"

static const int64_t lengths[] = {0, 1, 2, 7, 15, 16, 17, 31, 64, 255, 256, 1000, 1025, 8192};
#define N_LENGTHS (sizeof lengths / sizeof *lengths)

/* Deterministic values in [-scale, scale). */
static void fill(float *x, int64_t n, uint32_t seed, float scale) {
  for (int64_t i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    x[i] = scale * ((float)(seed >> 8) / 8388608.0f - 1.0f);
  }
}

static double naive_max(const float *x, int64_t n) {
  double m = -INFINITY;
  for (int64_t i = 0; i < n; i++) {
    if (isnan(x[i])) return NAN;
    if (x[i] > m) m = x[i];
  }
  return m;
}

Test(rows, max_matches_a_naive_loop) {
  float *x = malloc(sizeof(float) * 8192);
  for (size_t k = 0; k < N_LENGTHS; k++) {
    int64_t n = lengths[k];
    for (uint32_t seed = 1; seed <= 4; seed++) {
      fill(x, n, seed * 7919u + (uint32_t)n, seed == 4 ? 1e30f : 50.0f);
      if (seed == 2) /* all negative */
        for (int64_t i = 0; i < n; i++) x[i] = -fabsf(x[i]) - 1.0f;
      float got = dt__row_max_f32(x, n);
      double want = naive_max(x, n);
      cr_assert((double)got == want, "n %lld seed %u: %.9g, want %.9g", (long long)n, seed,
                (double)got, want);
    }
  }
  cr_assert_eq(dt__row_max_f32(x, 0), -INFINITY);
  free(x);
}

Test(rows, max_special_values_at_every_position) {
  float x[40];
  for (int64_t n = 1; n <= 40; n++) {
    for (int64_t at = 0; at < n; at++) {
      fill(x, n, (uint32_t)(n * 41 + at), 3.0f);
      x[at] = NAN;
      cr_assert(isnan(dt__row_max_f32(x, n)), "NaN at %lld of %lld", (long long)at, (long long)n);
      x[at] = INFINITY;
      cr_assert_eq(dt__row_max_f32(x, n), INFINITY);
      x[at] = -NAN; /* a NaN with the sign bit set */
      cr_assert(isnan(dt__row_max_f32(x, n)));
      for (int64_t i = 0; i < n; i++) x[i] = -INFINITY;
      cr_assert_eq(dt__row_max_f32(x, n), -INFINITY);
      x[at] = -0.0f;
      cr_assert(dt__row_max_f32(x, n) == 0.0f && signbit(dt__row_max_f32(x, n)));
      if (at + 1 < n) {
        x[at + 1] = 0.0f; /* both zeros: +0 */
        cr_assert(dt__row_max_f32(x, n) == 0.0f && !signbit(dt__row_max_f32(x, n)));
      }
    }
  }
}

Test(rows, exp_sum_matches_a_naive_double_loop) {
  float *x = malloc(sizeof(float) * 8192), *y = malloc(sizeof(float) * 8192);
  for (size_t k = 0; k < N_LENGTHS; k++) {
    int64_t n = lengths[k];
    fill(x, n, 99u + (uint32_t)n, 20.0f);
    float m = dt__row_max_f32(x, n);
    double want = 0;
    for (int64_t i = 0; i < n; i++) want += exp((double)x[i] - (double)m);
    float only = dt__row_exp_sum_f32(x, m, NULL, n);
    float stored = dt__row_exp_sum_f32(x, m, y, n);
    /* Blocked float32 sums (rows.h): about 1e-6 relative for these lengths. */
    cr_assert(fabs((double)stored - want) <= 2e-6 * want + 1e-30, "n %lld: %.9g, want %.9g",
              (long long)n, (double)stored, want);
    cr_assert(only == stored, "n %lld: the sum alone %.9g, with stores %.9g", (long long)n,
              (double)only, (double)stored);
    for (int64_t i = 0; i < n; i++) {
      /* exp's 2 ulp, and the float32 rounding of x - m, which exp scales by |x - m|. */
      double d = (double)x[i] - (double)m, e = exp(d);
      cr_assert(fabs((double)y[i] - e) <= (2.4e-7 + 6e-8 * fabs(d)) * e,
                "n %lld, i %lld: %.9g, want %.9g", (long long)n, (long long)i, (double)y[i], e);
    }
    /* In place: the same terms and sum. */
    float sum_in_place = dt__row_exp_sum_f32(x, m, x, n);
    cr_assert(sum_in_place == stored);
    for (int64_t i = 0; i < n; i++) cr_assert(x[i] == y[i]);
  }
  free(x);
  free(y);
}
