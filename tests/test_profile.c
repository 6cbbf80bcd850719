/* Recording: profiler lifetime, ranges, Chrome export, a 4-rank round trip through our own
 * analyser, and the benchmark utilities. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Private header: the recorder's inline fast path records exact begin/end pairs. */
#include "profile/profile_impl.h"
#include "reference.h"
#include "log_capture.h"

static void temp_path(char *path, size_t size, const char *tag) {
  snprintf(path, size, "/tmp/dt_test_%s_%d_XXXXXX", tag, (int)getpid());
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  close(fd);
}

static dt_trace *read_back(const char *path) {
  dt_trace *trace = NULL;
  cr_assert_eq(dt_trace_read_file(path, &trace), DT_OK, "%s", dt_last_error());
  return trace;
}

/* The lane of `trace` with this process pid and tid, or fails. */
static dt_trace_lane_info find_lane(const dt_trace *trace, int64_t pid, int64_t tid) {
  for (int p = 0; p < dt_trace_process_count(trace); p++) {
    dt_trace_process_info info;
    cr_assert_eq(dt_trace_process(trace, p, &info), DT_OK);
    if (info.pid_number != pid) continue;
    for (int l = 0; l < info.lanes; l++) {
      dt_trace_lane_info lane;
      cr_assert_eq(dt_trace_lane(trace, p, l, &lane), DT_OK);
      if (lane.tid_number == tid) return lane;
    }
  }
  cr_assert_fail("no lane pid %lld tid %lld", (long long)pid, (long long)tid);
  return (dt_trace_lane_info){0};
}

static void record_op(const char *name, dt_profiler_lane lane) {
  dt__profile_scope scope;
  dt__profile_begin(&scope, name,
                    lane == DT_PROFILER_LANE_COMM ? DT__PROFILE_CAT_COLLECTIVE : DT__PROFILE_CAT_OP,
                    lane);
  dt__profile_end(&scope);
}

Test(profiler, off_records_nothing_and_ranges_still_nest) {
  cr_assert_not(dt__profile_enabled());
  record_op("add", DT_PROFILER_LANE_COMPUTE);
  cr_assert_eq(dt_profiler_range_push("idle"), DT_OK);
  cr_assert_eq(dt_profiler_range_pop(), DT_OK);
  cr_assert_eq(dt_profiler_range_pop(), DT_ERR_INVALID);
  ref_assert_error_mentions("dt_profiler_range_pop", "no open range");
  cr_assert_eq(dt_profiler_range_push(NULL), DT_ERR_INVALID);
  for (int i = 0; i < 64; i++) cr_assert_eq(dt_profiler_range_push("deep"), DT_OK);
  cr_assert_eq(dt_profiler_range_push("too deep"), DT_ERR_INVALID);
  ref_assert_error_mentions("deeper than 64", "too deep");
  for (int i = 0; i < 64; i++) cr_assert_eq(dt_profiler_range_pop(), DT_OK);
  cr_assert_eq(dt_profiler_set_rank(-1), DT_ERR_INVALID);
}

/* DT_PROFILE_CLOCK names a clock; another value is reported once through the log callback
 * (read at the first dt_profiler_create of the process: each test runs in its own). */
Test(profiler, an_unknown_clock_is_reported) {
  setenv("DT_PROFILE_CLOCK", "monotnic", 1);
  log_capture_start();
  dt_profiler *p = NULL;
  cr_assert_eq(dt_profiler_create(&p), DT_OK, "%s", dt_last_error());
  dt_profiler_destroy(p);
  cr_assert_eq(warnings, 1);
  cr_assert(strstr(last_warning, "DT_PROFILE_CLOCK=\"monotnic\"") &&
                strstr(last_warning, "monotonic, tsc"),
            "%s", last_warning);
  log_capture_stop();
  unsetenv("DT_PROFILE_CLOCK");
}

Test(profiler, lifetime_errors) {
  dt_profiler *a = NULL, *b = NULL;
  cr_assert_eq(dt_profiler_create(NULL), DT_ERR_INVALID);
  cr_assert_eq(dt_profiler_create(&a), DT_OK);
  cr_assert_eq(dt_profiler_create(&b), DT_OK);
  cr_assert_eq(dt_profiler_stop(a), DT_ERR_INVALID);
  ref_assert_error_mentions("dt_profiler_stop", "not running");
  cr_assert_eq(dt_profiler_start(a), DT_OK);
  cr_assert_eq(dt_profiler_start(a), DT_ERR_INVALID);
  cr_assert_eq(dt_profiler_start(b), DT_ERR_INVALID);
  ref_assert_error_mentions("dt_profiler_start", "another profiler");
  record_op("add", DT_PROFILER_LANE_COMPUTE);
  cr_assert_eq(dt_profiler_stop(a), DT_OK);
  record_op("add", DT_PROFILER_LANE_COMPUTE); /* stopped: not recorded */
  cr_assert_eq(dt_profiler_start(b), DT_OK);
  record_op("mul", DT_PROFILER_LANE_COMPUTE);
  record_op("all_reduce", DT_PROFILER_LANE_COMM);
  cr_assert_eq(dt_profiler_stop(b), DT_OK);
  cr_assert_eq(dt_profiler_start(a), DT_OK); /* restart appends */
  record_op("sub", DT_PROFILER_LANE_COMPUTE);
  cr_assert_eq(dt_profiler_event_count(a, -1, -1), 2);
  cr_assert_eq(dt_profiler_event_count(b, 0, -1), 2);
  cr_assert_eq(dt_profiler_event_count(b, 0, DT_PROFILER_LANE_COMM), 1);
  cr_assert_eq(dt_profiler_event_count(b, 1, -1), 0);
  cr_assert_eq(dt_profiler_dropped_count(a), 0);
  dt_profiler_destroy(a); /* destroying a running profiler stops it */
  cr_assert_not(dt__profile_enabled());
  dt_profiler_destroy(b);
  dt_profiler_destroy(NULL);
  cr_assert_eq(dt_profiler_start(NULL), DT_ERR_INVALID);
  cr_assert_eq(dt_profiler_reserve(-1), DT_ERR_INVALID);
  cr_assert_eq(dt_profiler_reserve(10000), DT_OK);
  dt_profiler_release_memory();
}

Test(profiler, export_is_valid_chrome_json) {
  dt_profiler *p = NULL;
  cr_assert_eq(dt_profiler_create(&p), DT_OK);
  cr_assert_eq(dt_profiler_start(p), DT_OK);
  /* A name with a quote, a backslash, a control character and an invalid UTF-8 byte. */
  cr_assert_eq(dt_profiler_range_push("step \"1\" \\ \x01 \xff é"), DT_OK);
  dt__profile_scope scope;
  dt__profile_begin(&scope, "mm", DT__PROFILE_CAT_OP, DT_PROFILER_LANE_COMPUTE);
  dt__profile_end_shape(&scope, 6, (const int64_t[]){2, 3, 4, 5, 6, 7});
  dt__profile_begin(&scope, "all_gather", DT__PROFILE_CAT_COLLECTIVE, DT_PROFILER_LANE_COMM);
  dt__profile_end_bytes(&scope, 4096, 4);
  dt__profile_begin(&scope, "redistribute", DT__PROFILE_CAT_REDISTRIBUTE, DT_PROFILER_LANE_COMM);
  dt__profile_end_text(&scope, "S(0)->R \"q\" and a text longer than thirty-one bytes");
  cr_assert_eq(dt_profiler_range_pop(), DT_OK);
  cr_assert_eq(dt_profiler_stop(p), DT_OK);
  char path[128];
  temp_path(path, sizeof path, "export");
  cr_assert_eq(dt_profiler_write_chrome_trace(p, path), DT_OK, "%s", dt_last_error());
  FILE *f = fopen(path, "r");
  char text[8192];
  size_t n = fread(text, 1, sizeof text - 1, f);
  text[n] = '\0';
  fclose(f);
  cr_assert(strstr(text, "{\"traceEvents\":["));
  cr_assert(strstr(text, "\"name\":\"process_labels\",\"ph\":\"M\",\"pid\":0,\"tid\":0,\"args\":{"
                         "\"labels\":\"CPU\"}"),
            "%s", text);
  cr_assert(strstr(text, "\"args\":{\"name\":\"comm\"}"));
  cr_assert(strstr(text, "step \\\"1\\\" \\\\ \\u0001 \\ufffd é"), "%s", text);
  cr_assert(strstr(text, "\"shape\":[2,3,4,5],\"ndim\":6"), "%s", text);
  cr_assert(strstr(text, "\"bytes\":4096,\"group_size\":4"), "%s", text);
  cr_assert(strstr(text, "\"info\":\"S(0)->R \\\"q\\\" and a text longer t\""), "%s", text);
  cr_assert(strstr(text, "\"cat\":\"user_annotation\",\"ph\":\"X\",\"ts\":"), "%s", text);
  dt_trace *trace = read_back(path);
  cr_assert_eq(dt_trace_event_count(trace), 4);
  dt_trace_lane_info compute = find_lane(trace, 0, 0), comm = find_lane(trace, 0, 1);
  cr_assert_str_eq(compute.name, "compute");
  cr_assert_str_eq(comm.name, "comm");
  cr_assert_eq(compute.events, 2);
  cr_assert_eq(comm.events, 2);
  dt_trace_destroy(trace);
  cr_assert_eq(dt_profiler_write_chrome_trace(p, "/nonexistent/dir/x.json"), DT_ERR_IO);
  ref_assert_error_mentions("dt_profiler_write_chrome_trace", "/nonexistent/dir/x.json");
  cr_assert_eq(dt_profiler_write_chrome_trace(NULL, path), DT_ERR_INVALID);
  cr_assert_eq(dt_profiler_write_chrome_trace_rank(p, -1, path), DT_ERR_INVALID);
  remove(path);
  dt_profiler_destroy(p);
}

/* ---- 4 ranks as 4 threads ---------------------------------------------------------------- */

enum { RANKS = 4, BIG = 5000 };

typedef struct rank_arg {
  int rank;
} rank_arg;

/* Rank r records r+1 ops (and rank 3 enough to span chunks), 2 collectives and a user range. */
static void *rank_main(void *p) {
  int rank = ((rank_arg *)p)->rank;
  dt_profiler_set_rank(rank);
  dt_profiler_range_push("forward");
  int ops = rank == 3 ? BIG : rank + 1;
  for (int i = 0; i < ops; i++) {
    dt__profile_scope scope;
    dt__profile_begin(&scope, i % 2 ? "addmm" : "add", DT__PROFILE_CAT_OP,
                      DT_PROFILER_LANE_COMPUTE);
    dt__profile_end_shape(&scope, 2, (const int64_t[]){rank, i});
  }
  for (int i = 0; i < 2; i++) {
    dt__profile_scope scope;
    dt__profile_begin(&scope, "all_reduce", DT__PROFILE_CAT_COLLECTIVE, DT_PROFILER_LANE_COMM);
    dt__profile_end_bytes(&scope, 1024, RANKS);
  }
  dt_profiler_range_pop();
  return NULL;
}

static int64_t compute_events(int rank) { return (rank == 3 ? BIG : rank + 1) + 1; }

Test(profiler, four_rank_round_trip) {
  dt_profiler *p = NULL;
  cr_assert_eq(dt_profiler_create(&p), DT_OK);
  cr_assert_eq(dt_profiler_start(p), DT_OK);
  pthread_t threads[RANKS];
  rank_arg args[RANKS];
  for (int r = 0; r < RANKS; r++) {
    args[r].rank = r;
    cr_assert_eq(pthread_create(&threads[r], NULL, rank_main, &args[r]), 0);
  }
  for (int r = 0; r < RANKS; r++) pthread_join(threads[r], NULL);
  cr_assert_eq(dt_profiler_stop(p), DT_OK);
  for (int r = 0; r < RANKS; r++) {
    cr_assert_eq(dt_profiler_event_count(p, r, DT_PROFILER_LANE_COMPUTE), compute_events(r));
    cr_assert_eq(dt_profiler_event_count(p, r, DT_PROFILER_LANE_COMM), 2);
  }

  /* Merged: one process per rank, labelled CPU, two lanes each. */
  char path[128];
  temp_path(path, sizeof path, "merged");
  cr_assert_eq(dt_profiler_write_chrome_trace(p, path), DT_OK, "%s", dt_last_error());
  dt_trace *trace = read_back(path);
  cr_assert_eq(dt_trace_process_count(trace), RANKS);
  int64_t all = 0;
  for (int r = 0; r < RANKS; r++) {
    dt_trace_process_info info;
    cr_assert_eq(dt_trace_process(trace, r, &info), DT_OK);
    cr_assert_eq(info.pid_number, r);
    char name[16];
    snprintf(name, sizeof name, "rank %d", r);
    cr_assert_str_eq(info.name, name);
    cr_assert_str_eq(info.labels, "CPU");
    cr_assert_eq(info.lanes, 2);
    dt_trace_lane_info compute = find_lane(trace, r, 0), comm = find_lane(trace, r, 1);
    cr_assert_eq(compute.events, compute_events(r), "rank %d", r);
    cr_assert_eq(comm.events, 2, "rank %d", r);
    all += compute.events + comm.events;
  }
  cr_assert_eq(dt_trace_event_count(trace), all);
  dt_trace_stats s;
  cr_assert_eq(dt_trace_compute_stats(trace, "CPU", 0, &s), DT_OK, "%s", dt_last_error());
  cr_assert_eq(s.events, all - RANKS); /* user ranges do not count */
  cr_assert_eq(s.processes, RANKS);
  cr_assert(s.busy_us > 0 && s.busy_us <= s.total_us * (1 + 1e-9));
  cr_assert(s.mm_us > 0 && s.mm_us <= s.busy_us);
  cr_assert(s.comm_us > 0);
  cr_assert_eq(dt_trace_compute_stats(trace, "GPU", 0, &s), DT_ERR_INVALID);
  dt_trace_destroy(trace);

  /* One file per rank. */
  for (int r = 0; r <= RANKS; r++) {
    cr_assert_eq(dt_profiler_write_chrome_trace_rank(p, r, path), DT_OK, "%s", dt_last_error());
    trace = read_back(path);
    cr_assert_eq(dt_trace_process_count(trace), 1);
    int64_t expected = r < RANKS ? compute_events(r) + 2 : 0; /* rank 4 never recorded */
    cr_assert_eq(dt_trace_event_count(trace), expected, "rank %d", r);
    dt_trace_process_info info;
    cr_assert_eq(dt_trace_process(trace, 0, &info), DT_OK);
    cr_assert_eq(info.pid_number, r);
    dt_trace_destroy(trace);
  }
  remove(path);
  dt_profiler_destroy(p);
}

Test(profiler, two_threads_of_one_rank_get_their_own_lanes) {
  dt_profiler *p = NULL;
  cr_assert_eq(dt_profiler_create(&p), DT_OK);
  cr_assert_eq(dt_profiler_start(p), DT_OK);
  rank_arg arg = {.rank = 1};
  pthread_t a, b;
  cr_assert_eq(pthread_create(&a, NULL, rank_main, &arg), 0);
  pthread_join(a, NULL);
  cr_assert_eq(pthread_create(&b, NULL, rank_main, &arg), 0);
  pthread_join(b, NULL);
  cr_assert_eq(dt_profiler_stop(p), DT_OK);
  char path[128];
  temp_path(path, sizeof path, "threads");
  cr_assert_eq(dt_profiler_write_chrome_trace(p, path), DT_OK);
  dt_trace *trace = read_back(path);
  dt_trace_process_info info;
  cr_assert_eq(dt_trace_process(trace, 0, &info), DT_OK);
  cr_assert_eq(info.lanes, 4);
  cr_assert_str_eq(find_lane(trace, 1, 2).name, "compute (thread 1)");
  cr_assert_eq(find_lane(trace, 1, 3).events, 2);
  dt_trace_destroy(trace);
  remove(path);
  dt_profiler_destroy(p);
}

/* ---- Benchmark utilities ------------------------------------------------------------------ */

typedef struct work {
  int calls;
  bool fail;
} work;

/* Stands for an op: a "mm" kernel and an "add" kernel of a few microseconds each. */
static dt_status fake_step(void *p) {
  work *w = p;
  w->calls++;
  if (w->fail && w->calls == 3) return dt__error(DT_ERR_SHAPE, "fake_step: shapes disagree");
  const char *names[] = {"mm", "add"};
  for (int k = 0; k < 2; k++) {
    dt__profile_scope scope;
    dt__profile_begin(&scope, names[k], DT__PROFILE_CAT_KERNEL, DT_PROFILER_LANE_COMPUTE);
    volatile double x = 0;
    for (int i = 0; i < 2000; i++) x += i;
    dt__profile_end(&scope);
  }
  return DT_OK;
}

Test(benchmark, utilization_of_a_profiled_function) {
  char dir[128];
  snprintf(dir, sizeof dir, "/tmp/dt_test_bench_%d/nested/dir", (int)getpid());
  work w = {0};
  dt_benchmark_result result;
  cr_assert_eq(dt_benchmark_utilization(fake_step, &w, dir, "step", 3, &result), DT_OK, "%s",
               dt_last_error());
  cr_assert_eq(w.calls, 5 + 3 + 3); /* warm-up, timed, profiled */
  cr_assert_eq(result.events, 6);
  cr_assert(result.time_us > 0 && result.profiled_us > 0);
  cr_assert(result.busy_us > 0);
  cr_assert(result.utilization > 0);
  cr_assert(result.mm_fraction > 0 && result.mm_fraction < result.utilization);
  cr_assert_eq(result.comm_fraction, 0);
  char path[256];
  snprintf(path, sizeof path, "%s/step.json", dir);
  dt_trace *trace = read_back(path);
  cr_assert_eq(dt_trace_event_count(trace), 6);
  dt_trace_destroy(trace);

  double time_us = -1;
  cr_assert_eq(dt_benchmark_write_chrome_trace(fake_step, &w, path, 2, &time_us), DT_OK);
  cr_assert(time_us > 0);
  remove(path);
  snprintf(path, sizeof path, "/tmp/dt_test_bench_%d/nested/dir", (int)getpid());
  rmdir(path);
  snprintf(path, sizeof path, "/tmp/dt_test_bench_%d/nested", (int)getpid());
  rmdir(path);
  snprintf(path, sizeof path, "/tmp/dt_test_bench_%d", (int)getpid());
  rmdir(path);
}

static dt_status no_events(void *p) {
  (void)p;
  return DT_OK;
}

Test(benchmark, errors) {
  work w = {.fail = true};
  dt_benchmark_result result;
  cr_assert_eq(dt_benchmark_utilization(fake_step, &w, "/tmp", "dt_test_fail", 2, &result),
               DT_ERR_SHAPE);
  ref_assert_error_mentions("benchmarked function failed", "shapes disagree");
  cr_assert_eq(dt_benchmark_utilization(no_events, NULL, "/tmp", "dt_test_empty", 1, &result),
               DT_ERR_INVALID);
  ref_assert_error_mentions("dt_benchmark_utilization", "no events");
  remove("/tmp/dt_test_empty.json");
  cr_assert_eq(dt_benchmark_utilization(NULL, NULL, "/tmp", "x", 1, &result), DT_ERR_INVALID);
  cr_assert_eq(dt_benchmark_utilization(no_events, NULL, "/tmp", "x", 0, &result), DT_ERR_INVALID);
  ref_assert_error_mentions("runs 0", "< 1");
  cr_assert_eq(dt_benchmark_utilization(no_events, NULL, "/proc/no/such", "x", 1, &result),
               DT_ERR_IO);
  cr_assert_eq(dt_benchmark_write_chrome_trace(no_events, NULL, NULL, 1, NULL), DT_ERR_INVALID);
  /* A profiler already running is reported, not hijacked. */
  dt_profiler *p = NULL;
  cr_assert_eq(dt_profiler_create(&p), DT_OK);
  cr_assert_eq(dt_profiler_start(p), DT_OK);
  cr_assert_eq(dt_benchmark_write_chrome_trace(no_events, NULL, "/tmp/dt_test_x.json", 1, NULL),
               DT_ERR_INVALID);
  ref_assert_error_mentions("dt_profiler_start", "another profiler");
  dt_profiler_destroy(p);
}
