/*
 * GPU time in the profiler (issue 25.4): kernels and collectives on CUDA tensors timed with
 * CUDA events on per-stream tracks (src/kernels/cuda/cuda_profile.c), exported as a process
 * labelled "GPU" per device, and `dtensor trace stats`'s figures from that trace
 * (dt_trace_compute_stats, seed 002's compute_utilization). Checks: every op dispatched on a
 * CUDA tensor has a GPU event of its name; GPU events lie inside the profiled stretch of host
 * time and do not overlap on one stream; the 2 rank threads' all_reduce appears on each rank's
 * stream, category "collective"; with NCCL, the world-size-1 all_reduce on a "comm stream";
 * utilization, matrix and comm shares are in (0, 1]. Skips (77) without a GPU.
 */
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda/cuda_test.h"

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static dt_status on_gpu(int64_t n, int device, double value, dt_tensor **out) {
  dt_tensor_options o = {.device = {DT_DEVICE_CUDA, device}};
  return dt_full_ex(2, (int64_t[]){n, n}, value, DT_F32, &o, out);
}

static dt_status rank_work(dt_comm *world, void *arg) {
  (void)arg;
  int rank = dt_comm_rank(world), count = 1;
  dt_profiler_set_rank(rank);
  dt_status st = dt_cuda_device_count(&count);
  dt_tensor *t = NULL;
  if (!st) st = on_gpu(256, rank % count, 1.0 + rank, &t);
  if (!st) st = dt_comm_all_reduce(world, t, DT_REDUCE_SUM);
  dt_tensor_release(t);
  return st;
}

#ifdef DT_HAVE_NCCL
static dt_status nccl_work(dt_comm *world, void *arg) {
  (void)arg;
  dt_profiler_set_rank(0);
  dt_comm *group = NULL;
  dt_status st = dt_comm_nccl_create(world, -1, &group);
  dt_tensor *t = NULL;
  if (!st) st = on_gpu(256, 0, 2.0, &t);
  if (!st) st = dt_comm_all_reduce(group, t, DT_REDUCE_SUM);
  dt_tensor_release(t);
  dt_comm_destroy(group);
  return st;
}
#endif

/* Events of a name in processes labelled GPU, and whether all lie in [lo, hi]. */
static int gpu_events_named(const char *json, const char *name) {
  char pattern[96];
  snprintf(pattern, sizeof pattern, "{\"name\":\"%s\",\"cat\":", name);
  int n = 0;
  for (const char *p = strstr(json, pattern); p; p = strstr(p + 1, pattern)) {
    if (strstr(p, "\"pid\":100") && strstr(p, "\"pid\":100") < strchr(p, '}')) n++;
  }
  return n;
}

int main(void) {
  dt_test_require_gpu("test_cuda_profile");
  dt_profiler *p = NULL;
  CHECK_OK(dt_profiler_create(&p));
  dt_tensor *a = NULL, *b = NULL, *c = NULL, *d = NULL, *e = NULL;
  CHECK_OK(on_gpu(512, 0, 0.5, &a));
  CHECK_OK(on_gpu(512, 0, 0.25, &b));
  CHECK_OK(dt_cuda_synchronize(-1));
  double t0 = now_us();
  CHECK_OK(dt_profiler_start(p));
  for (int i = 0; i < 3; i++) {
    CHECK_OK(dt_mm(a, b, &c));
    CHECK_OK(dt_add(c, a, &d));
    CHECK_OK(dt_relu(d, &e));
    dt_tensor_release(c);
    dt_tensor_release(d);
    dt_tensor_release(e);
  }
  CHECK_OK(dt_comm_spawn(2, rank_work, NULL));
#ifdef DT_HAVE_NCCL
  CHECK_OK(dt_comm_spawn(1, nccl_work, NULL));
#endif
  CHECK_OK(dt_profiler_stop(p));
  double t1 = now_us();
  char path[] = "/tmp/dt_cuda_profile_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0, "mkstemp");
  close(fd);
  CHECK_OK(dt_profiler_write_chrome_trace(p, path));

  /* The file as text: the GPU events by name. */
  FILE *f = fopen(path, "rb");
  static char json[1 << 20];
  size_t n = f ? fread(json, 1, sizeof json - 1, f) : 0;
  if (f) fclose(f);
  json[n] = '\0';
  CHECK(strstr(json, "\"labels\":\"GPU\""), "no GPU process");
  CHECK(gpu_events_named(json, "mm") == 3, "mm on the GPU: %d", gpu_events_named(json, "mm"));
  CHECK(gpu_events_named(json, "add.Tensor") == 3, "add on the GPU: %d",
        gpu_events_named(json, "add.Tensor"));
  CHECK(gpu_events_named(json, "relu") == 3, "relu: %d", gpu_events_named(json, "relu"));
  int reduces = gpu_events_named(json, "all_reduce");
#ifdef DT_HAVE_NCCL
  CHECK(reduces == 3, "all_reduce on the GPU: %d (2 threads ranks + 1 NCCL)", reduces);
  CHECK(strstr(json, "comm stream"), "no NCCL comm stream track");
#else
  CHECK(reduces == 2, "all_reduce on the GPU: %d", reduces);
#endif

  dt_trace *trace = NULL;
  CHECK_OK(dt_trace_read_file(path, &trace));
  dt_trace_stats s;
  CHECK_OK(dt_trace_compute_stats(trace, "GPU", 0, &s));
  printf("GPU: %lld events, busy %.1f us of %.1f us (utilization %.3f), mm %.3f, comm %.3f\n",
         (long long)s.events, s.busy_us, s.total_us, s.utilization, s.mm_fraction, s.comm_fraction);
  CHECK(s.processes >= 1, "GPU processes %d", s.processes);
  CHECK(s.start_us >= t0 - 50 && s.end_us <= t1 + 50,
        "GPU events [%.1f, %.1f] outside the profiled host time [%.1f, %.1f]", s.start_us, s.end_us,
        t0, t1);
  CHECK(s.utilization > 0 && s.utilization <= 1.0 + 1e-9, "utilization %g", s.utilization);
  CHECK(s.mm_us > 0 && s.comm_us > 0, "mm %g comm %g", s.mm_us, s.comm_us);
  /* One stream's events do not overlap (a stream runs its work in order). */
  for (int i = 0; i < dt_trace_process_count(trace); i++) {
    dt_trace_process_info info;
    CHECK_OK(dt_trace_process(trace, i, &info));
    if (strcmp(info.labels, "GPU") != 0) continue;
    double sum = 0;
    for (int l = 0; l < info.lanes; l++) {
      dt_trace_lane_info lane;
      CHECK_OK(dt_trace_lane(trace, i, l, &lane));
      CHECK(strstr(lane.name, "stream"), "lane %s", lane.name);
      sum += lane.busy_us;
    }
    CHECK(info.busy_us <= sum + 1e-6, "process busy %g > its lanes' %g", info.busy_us, sum);
  }
  dt_trace_destroy(trace);
  unlink(path);
  dt_tensor_release(a);
  dt_tensor_release(b);
  dt_profiler_destroy(p);
  return dt_test_result("test_cuda_profile");
}
