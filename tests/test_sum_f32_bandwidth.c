/* dt_sum over contiguous float32 (the fast path's row sum): the same bits as eight double
 * lanes summed in order, for every tail length, and, in optimized builds, a read bandwidth of
 * at least 0.7x a memcpy's (bytes read + written) in the same run (issue 17: the portable
 * loop stayed scalar under gcc 12 -O2 and read at ~0.6x; the AVX loop reads at ~0.9x). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dtensor/dtensor.h"

/* The definition: lane j sums p[j], p[j + 8], ...; the tail first, then the lanes in order. */
static double reference(const float *p, int64_t n) {
  double lanes[8] = {0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; j++) lanes[j] += p[i + j];
  }
  double s = 0;
  for (; i < n; i++) s += p[i];
  for (int j = 0; j < 8; j++) s += lanes[j];
  return s;
}

static float sum_of(dt_tensor *t) {
  dt_tensor *out = NULL;
  cr_assert_eq(dt_sum(t, &out), DT_OK, "%s", dt_last_error());
  float v = *(const float *)dt_tensor_data(out);
  dt_tensor_release(out);
  return v;
}

Test(sum_f32, same_bits_as_eight_lanes) {
  const int64_t lengths[] = {1, 7, 8, 63, 64, 65, 71, 1000, 4099, (1 << 20) + 5};
  for (size_t k = 0; k < sizeof lengths / sizeof *lengths; k++) {
    int64_t n = lengths[k];
    dt_tensor *t = NULL;
    cr_assert_eq(dt_randn(1, &n, DT_F32, 7 + k, &t), DT_OK);
    const float *p = dt_tensor_data(t);
    float want = (float)reference(p, n), got = sum_of(t);
    cr_expect(memcmp(&want, &got, sizeof want) == 0, "n %lld: %.9g, want %.9g", (long long)n, got,
              want);
    dt_tensor_release(t);
  }
}

#ifdef __OPTIMIZE__
static double cpu_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif

Test(sum_f32, reads_near_memcpy_bandwidth) {
#ifndef __OPTIMIZE__
  cr_skip_test("bandwidth is only meaningful in an optimized build");
#else
  int64_t n = 8 << 20;
  size_t bytes = sizeof(float) * (size_t)n;
  dt_tensor *t = NULL;
  cr_assert_eq(dt_randn(1, &n, DT_F32, 1, &t), DT_OK);
  char *dst = malloc(bytes);
  memset(dst, 0, bytes);
  double best_sum = 0, best_copy = 0;
  for (int r = 0; r < 5; r++) {
    double t0 = cpu_seconds();
    memcpy(dst, dt_tensor_data(t), bytes);
    __asm__ volatile("" : : "r"(dst) : "memory");
    double t1 = cpu_seconds();
    (void)sum_of(t);
    double t2 = cpu_seconds();
    double copy = 2.0 * (double)bytes / (t1 - t0), sum = (double)bytes / (t2 - t1);
    if (copy > best_copy) best_copy = copy;
    if (sum > best_sum) best_sum = sum;
  }
  cr_expect_geq(best_sum, 0.7 * best_copy, "sum reads %.2f GB/s, memcpy moves %.2f GB/s",
                best_sum / 1e9, best_copy / 1e9);
  free(dst);
  dt_tensor_release(t);
#endif
}
