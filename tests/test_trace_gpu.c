/*
 * GPU tracks in traces, without a GPU:
 *   - dt_trace_compute_stats (`dtensor trace stats`) on a hand-written trace in our format with
 *     GPU tracks (tests/traces/gpu_tracks.json: two ranks labelled CPU, one GPU process with a
 *     stream per rank and a communication stream), every figure derived by hand below, and the
 *     GPU utilization equal to seed 002's compute_utilization (union of the GPU processes'
 *     complete events over the total);
 *   - the profiler's export of device events: a stand-in device timer (what the CUDA kind's
 *     cuda_profile.c does with CUDA events) hands the recorder events with known times; the
 *     Chrome trace must carry them as a "GPU"-labelled process with one thread per queue, for
 *     the merged file and per rank, and the stats of that file are checked exactly.
 * tests/cuda/test_cuda_profile.c times real kernels and collectives on a GPU.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "dtensor/dtensor.h"
#include "profile/profile_event.h"

#define CLOSE(a, b) (fabs((a) - (b)) < 1e-9)

static void trace_path(char *buf, size_t size) {
  snprintf(buf, size, "%s/traces/gpu_tracks.json", DT_TESTS_DIR);
}

/* GPU events (us): stream 0 mm [100,150], add [160,170]; stream 1 mm [120,170], all_reduce
 * (category collective) [180,200]; comm stream all_gather [140,170].
 * busy = [100,170] u [180,200] = 90 of the span [100,200] = 100: 0.9 (seed 002's get_duration
 * walks the same events sorted by ts: 50 + 20 + 0 + 0 + 20 = 90);
 * mm = [100,150] u [120,170] = 70; comm = collective category or comm lane: [140,170] u
 * [180,200] = 50; compute = the kernels = [100,170] = 70; overlap = 70 + 50 - 90 = 30 (the
 * all_gather under the kernels), 30 / 50 = 0.6 of comm hidden. */
Test(trace_gpu, hand_written_trace_with_gpu_tracks) {
  char path[1100];
  trace_path(path, sizeof path);
  dt_trace *trace = NULL;
  cr_assert_eq(dt_trace_read_file(path, &trace), DT_OK, "%s", dt_last_error());
  dt_trace_stats s;
  cr_assert_eq(dt_trace_compute_stats(trace, NULL, 0, &s), DT_OK, "%s", dt_last_error());
  cr_assert_eq(s.processes, 1);
  cr_assert_eq(s.events, 5);
  cr_assert(CLOSE(s.start_us, 100) && CLOSE(s.end_us, 200), "%g %g", s.start_us, s.end_us);
  cr_assert(CLOSE(s.total_us, 100), "%g", s.total_us);
  cr_assert(CLOSE(s.busy_us, 90), "%g", s.busy_us);
  cr_assert(CLOSE(s.utilization, 0.9), "%g", s.utilization);
  cr_assert(CLOSE(s.mm_us, 70) && CLOSE(s.mm_fraction, 0.7), "%g %g", s.mm_us, s.mm_fraction);
  cr_assert(CLOSE(s.comm_us, 50) && CLOSE(s.comm_fraction, 0.5), "%g", s.comm_us);
  cr_assert(CLOSE(s.compute_us, 70), "%g", s.compute_us);
  cr_assert(CLOSE(s.overlap_us, 30) && CLOSE(s.overlap_fraction, 0.6), "%g %g", s.overlap_us,
            s.overlap_fraction);
  /* Over a measured total of 200 us (seed 002's total_length): 90 / 200. */
  cr_assert_eq(dt_trace_compute_stats(trace, "GPU", 200, &s), DT_OK);
  cr_assert(CLOSE(s.utilization, 0.45) && CLOSE(s.mm_fraction, 0.35) &&
                CLOSE(s.comm_fraction, 0.25),
            "%g %g %g", s.utilization, s.mm_fraction, s.comm_fraction);
  /* The CPU processes: op [90,190] u kernel [91,93] u rank 1's all_reduce [175,215] = 125
   * (the user range does not count); the all_reduce is comm by its category (its lane has no
   * name). */
  cr_assert_eq(dt_trace_compute_stats(trace, "CPU", 0, &s), DT_OK);
  cr_assert_eq(s.processes, 2);
  cr_assert(CLOSE(s.busy_us, 125) && CLOSE(s.comm_us, 40) && CLOSE(s.total_us, 125), "%g %g %g",
            s.busy_us, s.comm_us, s.total_us);
  dt_trace_destroy(trace);
}

/* ---- The recorder's device events, through a stand-in timer ------------------------------ */

#define KIND 3 /* a run-time device kind slot: the timer registry is the profiler's own */

typedef struct token {
  uint64_t start_ns, end_ns;
  int device;
  bool comm;
} token;

static token tokens[8];
static int n_tokens;
static dt__profile_device_event pending[8];
static int n_pending, flushes;
static uint64_t next_ns; /* the stand-in's device clock */

static void *fake_begin(int index, void *queue, bool comm) {
  (void)queue;
  token *t = &tokens[n_tokens++];
  *t = (token){.start_ns = next_ns, .device = index, .comm = comm};
  return t;
}
static void fake_end(void *tok, const char *name, dt__profile_category category, int64_t bytes,
                     int rank) {
  token *t = tok;
  pending[n_pending++] = (dt__profile_device_event){.name = name,
                                                    .start_ns = t->start_ns,
                                                    .end_ns = next_ns,
                                                    .bytes = bytes,
                                                    .rank = rank,
                                                    .kind = KIND,
                                                    .device = t->device,
                                                    .track = t->comm ? 7 : rank,
                                                    .category = (uint8_t)category,
                                                    .comm_track = t->comm};
}
static void fake_flush(void) {
  flushes++;
  for (int i = 0; i < n_pending; i++) dt__profile_record_device(&pending[i]);
  n_pending = 0;
}

static const dt__profile_device_timer fake_timer = {
    .label = "GPU", .name = "GPU", .begin = fake_begin, .end = fake_end, .flush = fake_flush};

/* Work on device 1 at [t0, t1] us, as rank `rank`'s thread queues it. */
static void device_work(int rank, const char *name, dt__profile_category cat, bool comm, double t0,
                        double t1) {
  cr_assert_eq(dt_profiler_set_rank(rank), DT_OK);
  next_ns = (uint64_t)(t0 * 1000);
  void *t = dt__profile_device_begin((uint32_t)KIND | 1u << 8, NULL, comm);
  cr_assert_not_null(t);
  next_ns = (uint64_t)(t1 * 1000);
  dt__profile_device_end((uint32_t)KIND | 1u << 8, t, name, cat, comm ? 4096 : -1);
}

Test(trace_gpu, recorder_exports_device_events_as_gpu_tracks) {
  dt__profile_register_device_timer(KIND, &fake_timer);
  /* No profiler: nothing is timed. */
  cr_assert_null(dt__profile_device_begin((uint32_t)KIND | 1u << 8, NULL, false));
  dt_profiler *p = NULL;
  cr_assert_eq(dt_profiler_create(&p), DT_OK);
  cr_assert_eq(dt_profiler_start(p), DT_OK);
  /* rank 0: mm [1000,1040], relu [1050,1060]; rank 1: mm [1010,1050]; rank 0's comm stream:
   * all_reduce [1030,1070]. */
  device_work(0, "mm", DT__PROFILE_CAT_KERNEL, false, 1000, 1040);
  device_work(0, "relu", DT__PROFILE_CAT_KERNEL, false, 1050, 1060);
  device_work(1, "mm", DT__PROFILE_CAT_KERNEL, false, 1010, 1050);
  device_work(0, "all_reduce", DT__PROFILE_CAT_COLLECTIVE, true, 1030, 1070);
  cr_assert_eq(flushes, 0);
  cr_assert_eq(dt_profiler_stop(p), DT_OK);
  cr_assert_eq(flushes, 1, "dt_profiler_stop flushes the device timers");
  dt_profiler_set_rank(0);

  char path[] = "/tmp/dt_trace_gpu_XXXXXX";
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  close(fd);
  cr_assert_eq(dt_profiler_write_chrome_trace(p, path), DT_OK, "%s", dt_last_error());
  dt_trace *trace = NULL;
  cr_assert_eq(dt_trace_read_file(path, &trace), DT_OK, "%s", dt_last_error());
  /* busy [1000,1070] = 70 of 70; mm [1000,1050] = 50; comm [1030,1070] = 40; compute
   * [1000,1060] = 60; overlap 60 + 40 - 70 = 30. */
  dt_trace_stats s;
  cr_assert_eq(dt_trace_compute_stats(trace, "GPU", 0, &s), DT_OK, "%s", dt_last_error());
  cr_assert_eq(s.processes, 1);
  cr_assert_eq(s.events, 4);
  cr_assert(CLOSE(s.start_us, 1000) && CLOSE(s.end_us, 1070), "%g %g", s.start_us, s.end_us);
  cr_assert(CLOSE(s.busy_us, 70) && CLOSE(s.utilization, 1.0), "%g", s.busy_us);
  cr_assert(CLOSE(s.mm_us, 50) && CLOSE(s.comm_us, 40) && CLOSE(s.compute_us, 60), "%g %g %g",
            s.mm_us, s.comm_us, s.compute_us);
  cr_assert(CLOSE(s.overlap_us, 30), "%g", s.overlap_us);
  /* The GPU process: its name, label and one thread per queue. */
  bool found = false;
  for (int i = 0; i < dt_trace_process_count(trace); i++) {
    dt_trace_process_info info;
    cr_assert_eq(dt_trace_process(trace, i, &info), DT_OK);
    if (strcmp(info.labels, "GPU") != 0) continue;
    found = true;
    cr_assert_str_eq(info.name, "GPU 1");
    cr_assert_eq(info.lanes, 3);
    cr_assert_eq(info.events, 4);
    bool comm_lane = false;
    for (int l = 0; l < info.lanes; l++) {
      dt_trace_lane_info lane;
      cr_assert_eq(dt_trace_lane(trace, i, l, &lane), DT_OK);
      if (strcmp(lane.name, "comm stream 7 (rank 0)") == 0) comm_lane = true;
    }
    cr_assert(comm_lane);
  }
  cr_assert(found, "no GPU process in the trace");
  dt_trace_destroy(trace);

  /* Rank 1's own file: its one device event. */
  cr_assert_eq(dt_profiler_write_chrome_trace_rank(p, 1, path), DT_OK);
  cr_assert_eq(dt_trace_read_file(path, &trace), DT_OK);
  cr_assert_eq(dt_trace_compute_stats(trace, "GPU", 0, &s), DT_OK);
  cr_assert(s.events == 1 && CLOSE(s.busy_us, 40), "%lld %g", (long long)s.events, s.busy_us);
  dt_trace_destroy(trace);
  unlink(path);
  dt_profiler_destroy(p);
  dt__profile_register_device_timer(KIND, NULL);
}
