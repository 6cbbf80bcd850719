/* The f32 sum behind large threads collectives (dt__reduce_buffers with streaming asked for):
 * exact values in place, out of place and on a 64 MiB all_reduce over 2 ranks. */
#include <criterion/criterion.h>
#include <string.h>

/* Private header: the streaming reduction equals a naive one: dt__reduce_buffers is called
 * directly. */
#include "comm/comm_impl.h"
#include "comm_helpers.h"

static float *filled(int64_t n, float scale) {
  float *p = NULL;
  cr_assert_eq(posix_memalign((void **)&p, 64, sizeof(float) * (size_t)n), 0);
  for (int64_t i = 0; i < n; i++) p[i] = scale * (float)(i % 1000);
  return p;
}

Test(reduce_streaming, in_place_and_out_of_place_values) {
  const int64_t n = (8 << 20) + 3; /* past the 8-wide loop: the tail too */
  float *a = filled(n, 1.0f), *b = filled(n, 2.0f);
  float *c = filled(n, 0.0f), *d = filled(n, 0.0f);
  const void *src[2] = {a, b};
  void *out[2] = {c, d};
  dt__reduce_buffers(DT_F32, DT_REDUCE_SUM, 2, src, 2, out, n, 2, true);
  void *in_place[2] = {a, b};
  dt__reduce_buffers(DT_F32, DT_REDUCE_SUM, 2, src, 2, in_place, n, 2, true);
  for (int64_t i = 0; i < n; i++) {
    float want = 3.0f * (float)(i % 1000);
    if (c[i] != want || d[i] != want || a[i] != want || b[i] != want) {
      cr_assert_fail("element %lld: out %g %g, in place %g %g, want %g", (long long)i, c[i], d[i],
                     a[i], b[i], want);
    }
  }
  free(a);
  free(b);
  free(c);
  free(d);
}

/* In place with streaming asked for, alternating with the plain path, the values stay exact.
 * (Its speed against ordinary stores is measured by `dtensor bench collectives`, not here:
 * tests do not time.) */
Test(reduce_streaming, in_place_alternating_exact) {
  const int64_t n = 8 << 20; /* 32 MiB a buffer: beyond the caches, as the path is meant for */
  float *a = filled(n, 1.0f), *b = filled(n, 0.0f);
  const void *src[2] = {a, b};
  void *dst[2] = {a, b};
  for (int r = 0; r < 5; r++) {
    dt__reduce_buffers(DT_F32, DT_REDUCE_SUM, 2, src, 2, dst, n, 2, true);
    dt__reduce_buffers(DT_F32, DT_REDUCE_SUM, 2, src, 2, dst, n, 2, false);
  }
  /* The values are still the sums: a[i] + b[i] written to both, 10 times: 7, 14, 28, ... 7 x 2^9.
   */
  cr_expect_eq(a[7], 7.0f * 512.0f, "a[7] = %g", a[7]);
  free(a);
  free(b);
}

static dt_status all_reduce_64mib(dt_comm *comm, void *arg) {
  (void)arg;
  const int64_t n = 16 << 20;
  int rank = dt_comm_rank(comm);
  dt_tensor *t = NULL;
  dt_status st = dt_empty(1, &n, DT_F32, &t);
  if (st) return st;
  float *p = dt_tensor_data(t);
  for (int64_t i = 0; i < n; i++) p[i] = (float)(rank + 1) * (float)(i % 4096);
  st = dt_comm_all_reduce(comm, t, DT_REDUCE_SUM);
  for (int64_t i = 0; i < n && !st; i++) {
    if (p[i] != 3.0f * (float)(i % 4096)) {
      st = DT_ERR_INTERNAL;
      dt__error(st, "rank %d element %lld: %g, want %g", rank, (long long)i, p[i],
                3.0f * (float)(i % 4096));
    }
  }
  dt_tensor_release(t);
  return st;
}

Test(reduce_streaming, all_reduce_64mib_two_ranks) {
  dt_status st = dt_comm_spawn(2, all_reduce_64mib, NULL);
  cr_assert_eq(st, DT_OK, "%s", dt_last_error());
}
