/* FSDP prefetch overlap in the Chrome trace (issue 13): an MLP of LAYERS Linear layers under
 * dt_parallel_fsdp on 2 ranks (threads), one forward recorded by the profiler. With prefetch,
 * a unit's pre-hook issues the next unit's all-gathers (async) and the trace shows each of
 * them in flight (issue to wait) while the current unit's kernels run: the span starts before
 * the current unit's compute ends. Without prefetch every all-gather is synchronous and no
 * collective span overlaps a kernel span of its rank. The trace file is read back twice:
 * line by line here (names, categories, times) and by dt_trace_process_comm. */
#include <criterion/criterion.h>
#include <unistd.h>

#include "comm_helpers.h"
#include "dtensor/parallel.h"

#define LAYERS 4
#define WIDTH 64
#define ROWS 8 /* per rank */
#define MAX_SPANS 4096

typedef struct span {
  double start, end;
  bool gather; /* a collective named all_gather... */
  bool collective;
  bool kernel;
} span;

typedef struct overlap_arg {
  bool prefetch;
  dt_profiler *profiler;
} overlap_arg;

static dt_status profiler_switch(dt_comm *world, dt_profiler *profiler, bool start) {
  RANK_OK(dt_comm_barrier(world));
  if (dt_comm_rank(world) == 0)
    RANK_OK(start ? dt_profiler_start(profiler) : dt_profiler_stop(profiler));
  RANK_OK(dt_comm_barrier(world));
  return DT_OK;
}

static dt_status forward_rank(dt_comm *world, void *p) {
  overlap_arg *arg = p;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){2}, (const char *const[]){"dp"}, &mesh));
  dt_module *layers[2 * LAYERS - 1];
  for (int l = 0; l < LAYERS; l++) {
    RANK_OK(dt_nn_linear(WIDTH, WIDTH, true, 10 + (uint64_t)l, &layers[2 * l]));
    if (l + 1 < LAYERS) RANK_OK(dt_nn_relu(&layers[2 * l + 1]));
  }
  dt_module *model = NULL;
  RANK_OK(dt_nn_sequential(2 * LAYERS - 1, layers, &model));
  dt_fsdp_options fo = {.mesh_dim = 0, .prefetch = arg->prefetch};
  RANK_OK(dt_parallel_fsdp(model, mesh, &fo));
  dt_tensor *x = NULL;
  RANK_OK(dt_randn(2, (int64_t[]){ROWS, WIDTH}, DT_F32, 7 + (uint64_t)dt_comm_rank(world), &x));
  for (int run = 0; run < 2; run++) { /* the first warms up; the second is recorded */
    dt_tensor *out = NULL;
    if (run == 1) RANK_OK(profiler_switch(world, arg->profiler, true));
    RANK_OK(dt_module_forward(model, x, &out));
    if (run == 1) RANK_OK(profiler_switch(world, arg->profiler, false));
    dt_tensor_release(out);
  }
  dt_tensor_release(x);
  dt_module_destroy(model);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

/* The value of "key": in a trace line, or NAN. */
static double number_field(const char *line, const char *key) {
  const char *at = strstr(line, key);
  return at ? strtod(at + strlen(key), NULL) : NAN;
}

/* Complete events of rank 0 in the trace file written by dt_profiler_write_chrome_trace (one
 * event per line). */
static int read_spans(const char *path, span *spans) {
  FILE *f = fopen(path, "r");
  cr_assert(f, "cannot read %s", path);
  char line[1024];
  int n = 0;
  while (fgets(line, sizeof line, f) && n < MAX_SPANS) {
    if (!strstr(line, "\"ph\":\"X\"") || number_field(line, "\"pid\":") != 0) continue;
    span *s = &spans[n++];
    s->start = number_field(line, "\"ts\":");
    s->end = s->start + number_field(line, "\"dur\":");
    s->collective = strstr(line, "\"cat\":\"collective\"") != NULL;
    s->kernel = strstr(line, "\"cat\":\"kernel\"") != NULL;
    s->gather = s->collective && strstr(line, "{\"name\":\"all_gather") == line;
    cr_assert(isfinite(s->start) && s->end >= s->start, "bad event: %s", line);
  }
  fclose(f);
  return n;
}

/* Records one forward and returns the trace's path (a temporary file). */
static void record(bool prefetch, char *path, size_t size) {
  overlap_arg arg = {.prefetch = prefetch};
  cr_assert_eq(dt_profiler_create(&arg.profiler), DT_OK);
  SPAWN_OK(2, forward_rank, &arg);
  snprintf(path, size, "/tmp/test_fsdp_overlap_%d_%d.json", (int)getpid(), prefetch);
  cr_assert_eq(dt_profiler_write_chrome_trace(arg.profiler, path), DT_OK, "%s", dt_last_error());
  dt_profiler_destroy(arg.profiler);
}

/* Gathers in flight while a kernel of rank 0 ran: the gather started before that kernel
 * ended, and the kernel ended before the gather did. */
static int overlapping_gathers(const span *s, int n, int *gathers) {
  int overlapping = 0;
  *gathers = 0;
  for (int i = 0; i < n; i++) {
    if (!s[i].gather) continue;
    (*gathers)++;
    bool hit = false;
    for (int k = 0; k < n && !hit; k++)
      hit = s[k].kernel && s[i].start < s[k].end && s[k].end < s[i].end;
    overlapping += hit;
  }
  return overlapping;
}

static void trace_comm(const char *path, dt_trace_comm_info *info) {
  dt_trace *trace = NULL;
  cr_assert_eq(dt_trace_read_file(path, &trace), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_trace_process_count(trace), 2);
  cr_assert_eq(dt_trace_process_comm(trace, 0, 0, 0, info), DT_OK, "%s", dt_last_error());
  dt_trace_destroy(trace);
}

Test(fsdp_overlap, prefetch_gather_overlaps_compute, .timeout = 120) {
  static span spans[MAX_SPANS];
  char path[256];
  record(true, path, sizeof path);
  int n = read_spans(path, spans), gathers = 0;
  int overlapping = overlapping_gathers(spans, n, &gathers);
  /* Units 1..LAYERS-1 are prefetched (weight and bias each); unit 0 is gathered in place. */
  cr_assert_geq(gathers, 2 * LAYERS, "%d all-gather spans on rank 0", gathers);
  cr_assert_eq(overlapping, 2 * (LAYERS - 1), "%d of %d all-gathers overlap compute", overlapping,
               gathers);
  dt_trace_comm_info info;
  trace_comm(path, &info);
  cr_assert_gt(info.overlap_us, 0.0, "no comm/compute overlap on rank 0");
  cr_assert_lt(info.exposed_us, info.collective_us);
  cr_assert_float_eq(info.exposed_us + info.overlap_us, info.collective_us, 1e-6);
  remove(path);
}

Test(fsdp_overlap, no_prefetch_no_overlap, .timeout = 120) {
  static span spans[MAX_SPANS];
  char path[256];
  record(false, path, sizeof path);
  int n = read_spans(path, spans), gathers = 0;
  int overlapping = overlapping_gathers(spans, n, &gathers);
  cr_assert_geq(gathers, 2 * LAYERS, "%d all-gather spans on rank 0", gathers);
  cr_assert_eq(overlapping, 0, "%d all-gathers overlap compute without prefetch", overlapping);
  /* Every collective span is disjoint from every kernel span of the rank. */
  for (int i = 0; i < n; i++) {
    for (int k = 0; spans[i].collective && k < n; k++) {
      cr_assert(
          !(spans[k].kernel && spans[i].start < spans[k].end && spans[k].start < spans[i].end),
          "collective [%.3f, %.3f] overlaps kernel [%.3f, %.3f]", spans[i].start, spans[i].end,
          spans[k].start, spans[k].end);
    }
  }
  dt_trace_comm_info info;
  trace_comm(path, &info);
  cr_assert_gt(info.collective_us, 0.0);
  cr_assert_lt(info.overlap_us, 0.01, "overlap %g us without prefetch", info.overlap_us);
  remove(path);
}

Test(fsdp_overlap, process_comm_errors) {
  dt_trace *trace = NULL;
  const char text[] = "{\"traceEvents\":[{\"name\":\"all_reduce\",\"cat\":\"collective\",\"ph\":"
                      "\"X\",\"ts\":0,\"dur\":10,\"pid\":0,\"tid\":1},{\"name\":\"mm\",\"cat\":"
                      "\"kernel\",\"ph\":\"X\",\"ts\":4,\"dur\":10,\"pid\":0,\"tid\":0}]}";
  cr_assert_eq(dt_trace_read_memory(text, sizeof text - 1, &trace), DT_OK, "%s", dt_last_error());
  dt_trace_comm_info info;
  cr_assert_eq(dt_trace_process_comm(trace, 0, 0, 0, &info), DT_OK);
  /* Independent figures: comm [0, 10], kernel [4, 14]: overlap 6, exposed 4, span 14. */
  cr_assert_float_eq(info.collective_us, 10.0, 1e-9);
  cr_assert_float_eq(info.kernel_us, 10.0, 1e-9);
  cr_assert_float_eq(info.overlap_us, 6.0, 1e-9);
  cr_assert_float_eq(info.exposed_us, 4.0, 1e-9);
  cr_assert_float_eq(info.span_us, 14.0, 1e-9);
  cr_assert_float_eq(info.exposed_fraction, 4.0 / 14.0, 1e-9);
  /* The window [2, 8]: comm [2, 8], kernel [4, 8]: overlap 4, exposed 2, span 6. */
  cr_assert_eq(dt_trace_process_comm(trace, 0, 2, 8, &info), DT_OK);
  cr_assert_float_eq(info.collective_us, 6.0, 1e-9);
  cr_assert_float_eq(info.overlap_us, 4.0, 1e-9);
  cr_assert_float_eq(info.exposed_us, 2.0, 1e-9);
  cr_assert_float_eq(info.span_us, 6.0, 1e-9);
  cr_assert_eq(dt_trace_process_comm(trace, 0, NAN, 8, &info), DT_ERR_INVALID);
  cr_assert_eq(dt_trace_process_comm(trace, 1, 0, 0, &info), DT_ERR_INDEX);
  cr_assert(strstr(dt_last_error(), "dt_trace_process_comm"), "%s", dt_last_error());
  cr_assert_eq(dt_trace_process_comm(NULL, 0, 0, 0, &info), DT_ERR_INVALID);
  cr_assert_eq(dt_trace_process_comm(trace, 0, 0, 0, NULL), DT_ERR_INVALID);
  dt_trace_destroy(trace);
}
