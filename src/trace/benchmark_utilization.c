/* dt_benchmark_utilization (torch/_functorch/benchmark_utils.py): record a function with the
 * profiler's benchmark helper, then measure the trace it wrote. It lives with trace analysis
 * because it reads the trace back; the recording half is src/profile/benchmark.c. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "profile/profile_impl.h"
#include "trace/trace_impl.h"

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
  if ((st = dt__benchmark_dump(what, fn, arg, path, runs, &time_us, &profiled_us))) return st;
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
