/*
 * dtensor bench profile: what recording and analysis cost.
 *   off_ns        a begin/end pair with no profiler running (target: about 1 ns, one branch)
 *   event_ns      a begin/end pair recorded: two clock reads and a 64-byte append, into memory
 *                 prepared by dt_profiler_reserve (target <= 50)
 *   record_ns     the append alone (dt__profile_record with given times)
 *   event_fresh_memory_ns  event_ns without reserving: first-touch page faults included
 *   The four are measured in alternating rounds (off, event, record, fresh, off, ...) and
 *   reported as the median of REPS rounds with min..max.
 *   analysis_s    read + stats of a generated trace of --events N complete events (default
 *                 1,000,000, one JSON object a line) (target <= 2 s for 1M)
 * Options: --events N, --json, --keep (keep the generated trace and print its path).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "dtensor/dtensor.h"
#include "profile/output_file.h"
#include "profile/profile_impl.h"
#include "profile/recorder_impl.h"
#include "bench_machine.h"
#include "tools.h"

enum { REPS = 7, PAIRS = 200000, OFF_PAIRS = 10000000 };

static int fail(const char *what) {
  fprintf(stderr, "bench profile: %s: %s\n", what, dt_last_error());
  return 1;
}

/* One sample of a begin/end pair with no profiler running, in ns per pair. */
static double off_ns(void) {
  double t0 = bench_now_us();
  for (int i = 0; i < OFF_PAIRS; i++) {
    dt__profile_scope scope;
    dt__profile_begin(&scope, "add", DT__PROFILE_CAT_OP, DT_PROFILER_LANE_COMPUTE);
    __asm__ volatile("" : : "r"(&scope) : "memory");
    dt__profile_end(&scope);
  }
  return (bench_now_us() - t0) * 1e3 / OFF_PAIRS;
}

/* One sample of recorded pairs, in ns per pair, on a fresh profiler. reserved: memory prepared
 * with dt_profiler_reserve beforehand; otherwise the pool is emptied first, so the sample pays
 * its chunk allocations and first-touch page faults. */
static int on_ns(bool with_clock, bool reserved, double *out) {
  dt_profiler *p = NULL;
  dt_profiler_release_memory();
  if (reserved && dt_profiler_reserve(PAIRS)) return fail("reserve");
  if (dt_profiler_create(&p) || dt_profiler_start(p)) return fail("profiler");
  uint64_t now = dt__profile_now();
  double t0 = bench_now_us();
  if (with_clock) {
    for (int i = 0; i < PAIRS; i++) {
      dt__profile_scope scope;
      dt__profile_begin(&scope, "add", DT__PROFILE_CAT_OP, DT_PROFILER_LANE_COMPUTE);
      dt__profile_end(&scope);
    }
  } else {
    for (int i = 0; i < PAIRS; i++) {
      dt__profile_record("add", DT__PROFILE_CAT_OP, DT_PROFILER_LANE_COMPUTE, now, now + 1);
    }
  }
  *out = (bench_now_us() - t0) * 1e3 / PAIRS;
  bool lost = dt_profiler_event_count(p, -1, -1) != PAIRS;
  dt_profiler_stop(p);
  dt_profiler_destroy(p);
  if (lost) {
    fprintf(stderr, "bench profile: events lost\n");
    return 1;
  }
  return 0;
}

/* The four recording figures, measured in alternating rounds (off, event, record, fresh, off,
 * ...) so that load from other processes hits all alike; median and spread of each. */
static int recording_stats(bench_stats *off, bench_stats *event, bench_stats *record,
                           bench_stats *fresh) {
  double s[4][REPS];
  for (int r = 0; r < REPS; r++) {
    s[0][r] = off_ns();
    if (on_ns(true, true, &s[1][r]) || on_ns(false, true, &s[2][r]) || on_ns(true, false, &s[3][r]))
      return 1;
  }
  *off = bench_stats_of(s[0], REPS);
  *event = bench_stats_of(s[1], REPS);
  *record = bench_stats_of(s[2], REPS);
  *fresh = bench_stats_of(s[3], REPS);
  return 0;
}

/* A PyTorch-like trace: 4 GPU processes and a CPU one, kernels with gemm/other names. */
static int generate(const char *path, long events) {
  dt__output_file out;
  FILE *f = dt__output_open(&out, path); /* never through a link planted in /tmp */
  if (!f) return 1;
  fputs("{\"traceEvents\":[\n", f);
  fputs("{\"name\":\"process_labels\",\"ph\":\"M\",\"pid\":100,\"tid\":0,\"args\":{\"labels\":"
        "\"CPU\"}},\n",
        f);
  for (int g = 0; g < 4; g++) {
    fprintf(f,
            "{\"name\":\"process_labels\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"labels\":"
            "\"GPU %d\"}},\n",
            g, g);
  }
  static const char *const names[] = {"ampere_sgemm_128x64_nn", "vectorized_elementwise_kernel",
                                      "aten::addmm", "ncclDevKernel_AllReduce_Sum_f32",
                                      "softmax_warp_forward"};
  uint64_t x = 88172645463325252ull;
  double ts = 1.0e6;
  for (long i = 0; i < events; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    ts += (double)(x % 3000) / 1000.0;
    double dur = (double)((x >> 20) % 4000) / 1000.0;
    int pid = i % 7 == 6 ? 100 : (int)(i % 4);
    fprintf(f,
            "{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"%s\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,"
            "\"dur\":%.3f,\"args\":{\"stream\":7,\"correlation\":%ld}}%s\n",
            names[i % 5], pid, (int)(i % 2) + 7, ts, dur, i, i + 1 < events ? "," : "");
  }
  fputs("]}\n", f);
  return dt__output_close(&out, f, false) != 0;
}

int bench_suite_profile(int argc, char **argv) {
  bool json = tool_has_flag(argc, argv, "--json");
  bool keep = tool_has_flag(argc, argv, "--keep");
  bench_machine_print(json);
  long events = 1000000;
  for (int i = 1; i + 1 < argc; i++) {
    if (strcmp(argv[i], "--events") == 0) events = strtol(argv[i + 1], NULL, 10);
  }
  if (events < 1) events = 1;
  bench_stats off_s, event_s, record_s, fresh_s;
  if (recording_stats(&off_s, &event_s, &record_s, &fresh_s)) return 1;
  double off = off_s.median, event = event_s.median, record = record_s.median,
         fresh = fresh_s.median;
  dt_profiler_release_memory();

  char path[] = "/tmp/dtensor_bench_trace_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return fail("mkstemp");
  close(fd);
  if (generate(path, events)) {
    remove(path);
    fprintf(stderr, "bench profile: cannot write %s\n", path);
    return 1;
  }
  double t0 = bench_now_us();
  dt_trace *trace = NULL;
  if (dt_trace_read_file(path, &trace)) {
    remove(path);
    return fail("read");
  }
  double t1 = bench_now_us();
  dt_trace_stats stats;
  dt_status st = dt_trace_compute_stats(trace, "GPU", 0, &stats);
  double t2 = bench_now_us();
  dt_trace_destroy(trace);
  if (!keep) remove(path);
  if (st) return fail("stats");
  double read_s = (t1 - t0) / 1e6, stats_s = (t2 - t1) / 1e6;
  if (json) {
    printf("{\"name\":\"profile\",\"off_ns\":%.2f,\"event_ns\":%.2f,\"record_ns\":%.2f,"
           "\"event_fresh_memory_ns\":%.2f,\"off_min_ns\":%.2f,\"off_max_ns\":%.2f,"
           "\"event_min_ns\":%.2f,\"event_max_ns\":%.2f,\"record_min_ns\":%.2f,"
           "\"record_max_ns\":%.2f,\"event_fresh_memory_min_ns\":%.2f,"
           "\"event_fresh_memory_max_ns\":%.2f,"
           "\"clock\":\"%s\",\"trace_events\":%ld,\"read_s\":%.3f,\"stats_s\":%.3f,"
           "\"analysis_s\":%.3f,\"utilization\":%.4f,\"kept_trace\":",
           off, event, record, fresh, off_s.min, off_s.max, event_s.min, event_s.max, record_s.min,
           record_s.max, fresh_s.min, fresh_s.max, dt__profile_clock_name(), events, read_s,
           stats_s, read_s + stats_s, stats.utilization);
    /* --keep says where the trace is, as the text output does; null when it was removed. */
    if (keep)
      printf("\"%s\"}\n", path);
    else
      printf("null}\n");
  } else {
    printf("profile off: %.2f ns (%.2f..%.2f) per begin/end pair (one branch)\n", off, off_s.min,
           off_s.max);
    printf("profile on:  %.2f ns (%.2f..%.2f) per recorded event (clock reads + append, reserved "
           "memory), %.2f ns (%.2f..%.2f) append only, %.2f ns (%.2f..%.2f) on fresh memory "
           "(page faults) (target <= 50, clock %s)\n",
           event, event_s.min, event_s.max, record, record_s.min, record_s.max, fresh, fresh_s.min,
           fresh_s.max, dt__profile_clock_name());
    printf("analysis:    %ld events: read %.3f s + stats %.3f s = %.3f s (target <= 2 s for 1M), "
           "utilization %.4f\n",
           events, read_s, stats_s, read_s + stats_s, stats.utilization);
    if (keep) printf("trace kept at %s\n", path);
  }
  return 0;
}
