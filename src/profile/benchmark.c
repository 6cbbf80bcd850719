/* Benchmark utilities after torch/_functorch/benchmark_utils.py: time a function without the
 * profiler, record it with the profiler, and measure utilization from the trace. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

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

static dt_status dump(const char *what, dt_benchmark_fn fn, void *arg, const char *path, int runs,
                      double *time_us, double *profiled_us) {
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

dt_status dt_dump_chrome_trace(dt_benchmark_fn fn, void *arg, const char *path, int runs,
                               double *time_us) {
  return dump("dt_dump_chrome_trace", fn, arg, path, runs, time_us, NULL);
}

/* mkdir -p: creates every missing folder of path. */
static dt_status make_dirs(const char *path) {
  char buf[4096];
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof buf) {
    return dt__error(DT_ERR_INVALID,
                     "dt_benchmark_utilization: trace_dir '%s' is empty or too long", path);
  }
  memcpy(buf, path, n + 1);
  for (size_t i = 1; i <= n; i++) {
    if (buf[i] != '/' && buf[i] != '\0') continue;
    char saved = buf[i];
    buf[i] = '\0';
    if (mkdir(buf, 0777) != 0 && errno != EEXIST) {
      return dt__error(DT_ERR_IO, "dt_benchmark_utilization: cannot create '%s': %s", buf,
                       strerror(errno));
    }
    buf[i] = saved;
  }
  struct stat info;
  if (stat(path, &info) != 0 || !S_ISDIR(info.st_mode)) {
    return dt__error(DT_ERR_IO, "dt_benchmark_utilization: '%s' is not a folder", path);
  }
  return DT_OK;
}

dt_status dt_benchmark_utilization(dt_benchmark_fn fn, void *arg, const char *trace_dir,
                                   const char *trace_name, int runs, dt_benchmark_result *result) {
  const char *what = "dt_benchmark_utilization";
  if (!trace_dir || !trace_name || !result) {
    return dt__error(DT_ERR_INVALID, "%s: trace_dir, trace_name or result is NULL", what);
  }
  memset(result, 0, sizeof *result);
  dt_status st = make_dirs(trace_dir);
  if (st) return st;
  char path[4096];
  if (snprintf(path, sizeof path, "%s/%s.json", trace_dir, trace_name) >= (int)sizeof path) {
    return dt__error(DT_ERR_INVALID, "%s: trace path too long", what);
  }
  double time_us = 0, profiled_us = 0;
  if ((st = dump(what, fn, arg, path, runs, &time_us, &profiled_us))) return st;
  dt_trace *trace = NULL;
  if ((st = dt_trace_read_file(path, &trace))) return st;
  dt_trace_stats stats;
  /* The unprofiled time is the denominator, as in PyTorch: what the run costs without us. */
  st = dt_trace_compute_stats(trace, "CPU", time_us > 0 ? time_us : 1e-3, &stats);
  dt_trace_destroy(trace);
  if (st) return st;
  if (stats.events == 0) {
    return dt__error(DT_ERR_INVALID,
                     "%s: the trace '%s' has no events: nothing the function ran reached the "
                     "profiler",
                     what, path);
  }
  *result = (dt_benchmark_result){.time_us = time_us,
                                  .profiled_us = profiled_us,
                                  .busy_us = stats.busy_us,
                                  .utilization = stats.utilization,
                                  .mm_fraction = stats.mm_fraction,
                                  .comm_fraction = stats.comm_fraction,
                                  .events = stats.events};
  return DT_OK;
}
