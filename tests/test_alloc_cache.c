/* The default allocator's per-thread caches (src/core/alloc.c): a freed large block (over
 * 1 MiB) serves the next request of its size or up to a quarter less, not a much smaller
 * one; DT_ALLOC_CACHE_MB bounds what a thread keeps (oldest evicted first, 0 keeps none);
 * blocks keep their alignment; a training-sized churn of large tensors reuses its pages
 * (no new page faults after the first round). Sanitizer builds compile the caches out
 * (DT_NO_ALLOC_CACHE): there only the values are checked. Includes core/core_impl.h for
 * dt__alloc / dt__free (internal). */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "core/core_impl.h"
#include "dtensor/dtensor.h"
#include "log_capture.h"

#define MIB ((size_t)1 << 20)

#ifdef DT_NO_ALLOC_CACHE
#define REUSED(a, b) ((void)(a), (void)(b), true)
#else
#define REUSED(a, b) ((a) == (b))
#endif

static void fill(void *p, size_t n, int v) { memset(p, v, n); }

Test(alloc_cache, a_large_block_serves_its_size_and_a_little_less) {
  unsetenv("DT_ALLOC_CACHE_MB");
  char *a = dt__alloc(3 * MIB);
  cr_assert_not_null(a);
  cr_assert_eq((uintptr_t)a % 64, 0, "64-byte aligned");
  fill(a, 3 * MIB, 1);
  dt__free(a);
  char *b = dt__alloc(3 * MIB);
  cr_assert(REUSED(b, a), "the same size takes the freed block");
  fill(b, 3 * MIB, 2);
  dt__free(b);
  char *c = dt__alloc(3 * MIB - 500000); /* within a quarter of the block */
  cr_assert(REUSED(c, a), "a quarter less takes it too");
  dt__free(c);
  char *d = dt__alloc(MIB + 4096); /* far smaller: a block of its own */
  cr_assert_neq(d, a);
  fill(d, MIB + 4096, 3);
  char *e = dt__alloc(3 * MIB); /* a is still free: taken, d is not disturbed */
  cr_assert(REUSED(e, a));
  fill(e, 3 * MIB, 4);
  for (size_t i = 0; i < MIB + 4096; i += 4096) cr_assert_eq(d[i], 3);
  dt__free(d);
  dt__free(e);
  void *f = dt__alloc_aligned(5 * MIB, 4096); /* alignment above 64: not cached, aligned */
  cr_assert_eq((uintptr_t)f % 4096, 0);
  dt__free(f);
}

Test(alloc_cache, the_limit_evicts_the_oldest_and_zero_keeps_none) {
  setenv("DT_ALLOC_CACHE_MB", "7", 1); /* room for two 3 MiB blocks, not three */
  char *blocks[3];
  for (int i = 0; i < 3; i++) blocks[i] = dt__alloc(3 * MIB);
  for (int i = 0; i < 3; i++) dt__free(blocks[i]); /* freeing the third evicts the first */
  char *x = dt__alloc(3 * MIB), *y = dt__alloc(3 * MIB);
  /* Best fit among equals takes the first kept: blocks[1], then blocks[2]. */
  cr_assert(REUSED(x, blocks[1]));
  cr_assert(REUSED(y, blocks[2]));
  dt__free(x);
  dt__free(y);
  setenv("DT_ALLOC_CACHE_MB", "0", 1);
  char *z = dt__alloc(3 * MIB);
  dt__free(z); /* not kept: the next large request cannot get it from the cache */
  setenv("DT_ALLOC_CACHE_MB", "x", 1);
  char *w = dt__alloc(2 * MIB); /* an unreadable limit is the default: kept and reused */
  dt__free(w);
  char *v = dt__alloc(2 * MIB);
  cr_assert(REUSED(v, w));
  dt__free(v);
  unsetenv("DT_ALLOC_CACHE_MB");
}

/* An unreadable DT_ALLOC_CACHE_MB (read at each free) is reported once through the log
 * callback, with its value, and the default limit applies. */
Test(alloc_cache, a_bad_limit_is_reported_once) {
  log_capture_start();
  const char *bad[] = {"12MB", "-1", "99999999999999999999"};
  for (int i = 0; i < 3; i++) {
    warnings = 0;
    setenv("DT_ALLOC_CACHE_MB", bad[i], 1);
    for (int k = 0; k < 3; k++) dt__free(dt__alloc(2 * MIB));
#ifndef DT_NO_ALLOC_CACHE
    cr_assert_eq(warnings, 1, "DT_ALLOC_CACHE_MB=\"%s\": reported once, got %d", bad[i], warnings);
    cr_assert(strstr(last_warning, "DT_ALLOC_CACHE_MB") && strstr(last_warning, bad[i]), "%s",
              last_warning);
#endif
  }
  unsetenv("DT_ALLOC_CACHE_MB");
  log_capture_stop();
}

static long minor_faults(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

/* Three "steps" of tensors as a training step makes them (64, 16 and 4 MiB, the same sizes
 * every step, freed in another order than made): after the first, no step touches fresh
 * pages, and the values are right. */
Test(alloc_cache, recurring_tensors_reuse_their_pages) {
  unsetenv("DT_ALLOC_CACHE_MB");
  const int64_t shapes[4][2] = {{2048, 8192}, {4096, 1024}, {1024, 1024}, {4096, 1024}};
  long faults[3];
  for (int step = 0; step < 3; step++) {
    long before = minor_faults();
    dt_tensor *t[4] = {NULL};
    for (int i = 0; i < 4; i++) {
      cr_assert_eq(dt_full(2, shapes[i], step + i, DT_F32, &t[i]), DT_OK);
    }
    for (int i = 0; i < 4; i++) {
      const float *p = dt_tensor_data(t[i]);
      int64_t n = shapes[i][0] * shapes[i][1];
      cr_assert(p[0] == (float)(step + i) && p[n - 1] == (float)(step + i));
    }
    for (int i = 3; i >= 0; i--) dt_tensor_release(t[(i + 2) % 4]);
    faults[step] = minor_faults() - before;
  }
#ifndef DT_NO_ALLOC_CACHE
  /* 100 MiB of tensors: 25,600 pages; a step served by the cache faults on none of them. */
  cr_assert_gt(faults[0], 20000, "the first step touches fresh pages (%ld faults)", faults[0]);
  cr_assert_lt(faults[1], 500, "the second step reuses them (%ld faults)", faults[1]);
  cr_assert_lt(faults[2], 500, "and the third (%ld faults)", faults[2]);
#else
  (void)faults; /* sanitizer builds keep no cache: nothing to expect of the faults */
#endif
}

/* A step's worth of large blocks (300 of 1.1 MiB, 330 MiB, all alive at once, as a training
 * step's activations are): every one is kept, so the second round touches no fresh pages. */
Test(alloc_cache, hundreds_of_blocks_stay_cached) {
  unsetenv("DT_ALLOC_CACHE_MB");
  enum { N = 300 };
  static char *blocks[N];
  const size_t size = MIB + MIB / 10;
  long faults[2];
  for (int round = 0; round < 2; round++) {
    long before = minor_faults();
    for (int i = 0; i < N; i++) {
      blocks[i] = dt__alloc(size);
      cr_assert_not_null(blocks[i]);
      fill(blocks[i], size, round + 1);
    }
    for (int i = 0; i < N; i++) cr_assert_eq(blocks[i][size - 1], round + 1);
    for (int i = 0; i < N; i++) dt__free(blocks[i]);
    faults[round] = minor_faults() - before;
  }
#ifndef DT_NO_ALLOC_CACHE
  cr_assert_gt(faults[0], 50000, "the first round touches fresh pages (%ld faults)", faults[0]);
  cr_assert_lt(faults[1], 500, "the second reuses all of them (%ld faults)", faults[1]);
#else
  (void)faults;
#endif
}
