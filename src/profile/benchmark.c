/* Benchmark helper after torch/_functorch/benchmark_utils.py: time a function without the
 * profiler, then record it with the profiler into a Chrome trace. Measuring utilization from
 * that trace is trace analysis, a layer above (src/trace/benchmark_utilization.c). */
#include <stdio.h>
#include <string.h>

#include "profile/recorder_impl.h"

#define WARMUP_RUNS 5

static dt_status run(const char *what, dt_benchmark_fn fn, void *arg, int runs) {
  for (int i = 0; i < runs; i++) {
    dt_status st = fn(arg);
    if (st) {
      char prefix[96];
      snprintf(prefix, sizeof prefix, "%s: the benchmarked function failed", what);
      dt__error_prefix(prefix);
      return st;
    }
  }
  return DT_OK;
}

dt_status dt__benchmark_dump(const char *what, dt_benchmark_fn fn, void *arg, const char *path,
                             int runs, double *time_us, double *profiled_us) {
  if (!fn || !path) return dt__error(DT_ERR_INVALID, "%s: fn or path is NULL", what);
  if (runs < 1) return dt__error(DT_ERR_INVALID, "%s: runs %d < 1", what, runs);
  dt_status st = run(what, fn, arg, WARMUP_RUNS);
  if (st) return st;
  uint64_t t0 = dt__profile_monotonic_ns();
  if ((st = run(what, fn, arg, runs))) return st;
  uint64_t t1 = dt__profile_monotonic_ns();
  dt_profiler *profiler = NULL;
  if ((st = dt_profiler_create(&profiler))) return st;
  if ((st = dt_profiler_start(profiler))) {
    dt_profiler_destroy(profiler);
    return st;
  }
  uint64_t t2 = dt__profile_monotonic_ns();
  st = run(what, fn, arg, runs);
  uint64_t t3 = dt__profile_monotonic_ns();
  dt_profiler_stop(profiler);
  if (!st) st = dt_profiler_write_chrome_trace(profiler, path);
  dt_profiler_destroy(profiler);
  if (st) return st;
  if (time_us) *time_us = (double)(t1 - t0) / 1e3;
  if (profiled_us) *profiled_us = (double)(t3 - t2) / 1e3;
  return DT_OK;
}

dt_status dt_benchmark_write_chrome_trace(dt_benchmark_fn fn, void *arg, const char *path, int runs,
                                          double *time_us) {
  return dt__benchmark_dump("dt_benchmark_write_chrome_trace", fn, arg, path, runs, time_us, NULL);
}
