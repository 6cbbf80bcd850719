/* Trace analysis: synthetic traces with known answers, both JSON forms, and bad traces. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "reference.h"

static dt_trace *read_text(const char *text) {
  dt_trace *trace = NULL;
  dt_status st = dt_trace_read_memory(text, strlen(text), &trace);
  cr_assert_eq(st, DT_OK, "%s", dt_last_error());
  cr_assert_not_null(trace);
  return trace;
}

static dt_trace_stats stats_of(const char *text, const char *label, double total_us) {
  dt_trace *trace = read_text(text);
  dt_trace_stats s;
  cr_assert_eq(dt_trace_compute_stats(trace, label, total_us, &s), DT_OK, "%s", dt_last_error());
  dt_trace_destroy(trace);
  return s;
}

#define GPU0 "{\"name\":\"process_labels\",\"ph\":\"M\",\"pid\":0,\"args\":{\"labels\":\"GPU 0\"}}"
#define GPU1 "{\"name\":\"process_labels\",\"ph\":\"M\",\"pid\":1,\"args\":{\"labels\":\"GPU 1\"}}"
#define CPU9 "{\"name\":\"process_labels\",\"ph\":\"M\",\"pid\":9,\"args\":{\"labels\":\"CPU\"}}"
#define EV(name, pid, tid, ts, dur)                                                                \
  "{\"name\":\"" name "\",\"ph\":\"X\",\"pid\":" #pid ",\"tid\":" #tid ",\"ts\":" #ts              \
  ",\"dur\":" #dur "}"

static void assert_near(double got, double want, const char *what) {
  cr_assert(fabs(got - want) <= 1e-9 * (1 + fabs(want)), "%s: got %.9g, want %.9g", what, got,
            want);
}

Test(trace_stats, nested_intervals_count_once) {
  dt_trace_stats s = stats_of("{\"traceEvents\":[" GPU0 "," EV("outer", 0, 7, 0, 100) "," EV(
                                  "inner", 0, 7, 10, 10) "," EV("inner2", 0, 7, 30, 20) "]}",
                              NULL, 0);
  cr_assert_eq(s.events, 3);
  assert_near(s.busy_us, 100, "busy");
  assert_near(s.total_us, 100, "total");
  assert_near(s.utilization, 1.0, "utilization");
}

Test(trace_stats, overlapping_and_disjoint_intervals) {
  dt_trace_stats s =
      stats_of("{\"traceEvents\":[" GPU0
               "," EV("a", 0, 1, 5, 10) "," EV("b", 0, 1, 0, 10) "," EV("c", 0, 1, 12, 8) "]}",
               "GPU", 40);
  assert_near(s.busy_us, 20, "busy"); /* [0,10] u [5,15] u [12,20] = [0,20] */
  assert_near(s.total_us, 40, "total from --total-us");
  assert_near(s.utilization, 0.5, "utilization");
  s = stats_of("[" GPU0
               "," EV("a", 0, 1, 0, 10) "," EV("b", 0, 1, 20, 10) "," EV("c", 0, 1, 40, 10) "]",
               "GPU", 0);
  assert_near(s.busy_us, 30, "disjoint busy");
  assert_near(s.total_us, 50, "span");
  assert_near(s.utilization, 0.6, "disjoint utilization");
  assert_near(s.start_us, 0, "start");
  assert_near(s.end_us, 50, "end");
}

Test(trace_stats, several_processes_and_labels) {
  /* Labels may come after the events; CPU events do not count for GPU, and the union spans
   * both GPUs. */
  const char *text = "{\"traceEvents\":[" EV("k", 0, 7, 0, 10) "," EV("k", 1, 7, 5, 10) "," EV(
      "cpu_work", 9, 1, 100, 50) "," EV("unlabelled", 5, 1, 0, 1000) "," GPU0 "," GPU1 "," CPU9
                                                                     "]}";
  dt_trace_stats s = stats_of(text, "GPU", 0);
  cr_assert_eq(s.events, 2);
  cr_assert_eq(s.processes, 2);
  assert_near(s.busy_us, 15, "gpu busy");
  assert_near(s.utilization, 1.0, "gpu utilization");
  s = stats_of(text, "CPU", 200);
  cr_assert_eq(s.events, 1);
  assert_near(s.busy_us, 50, "cpu busy");
  assert_near(s.utilization, 0.25, "cpu utilization");

  dt_trace *trace = read_text(text);
  cr_assert_eq(dt_trace_event_count(trace), 4);
  cr_assert_eq(dt_trace_process_count(trace), 4);
  dt_trace_process_info p;
  cr_assert_eq(dt_trace_process(trace, 2, &p), DT_OK);
  cr_assert_str_eq(p.pid, "9");
  cr_assert_eq(p.pid_number, 9);
  cr_assert_str_eq(p.labels, "CPU");
  cr_assert_eq(p.events, 1);
  assert_near(p.busy_us, 50, "process busy");
  cr_assert_eq(dt_trace_process(trace, 3, &p), DT_OK);
  cr_assert_str_eq(p.labels, "");
  cr_assert_eq(dt_trace_process(trace, 4, &p), DT_ERR_INDEX);
  dt_trace_lane_info lane;
  cr_assert_eq(dt_trace_lane(trace, 0, 1, &lane), DT_ERR_INDEX);
  cr_assert_eq(dt_trace_lane(trace, -1, 0, &lane), DT_ERR_INDEX);
  dt_trace_destroy(trace);
}

Test(trace_stats, matrix_share) {
  const char *text =
      "[" GPU0 "," EV("volta_sgemm_128x64_nn", 0, 7, 0, 10) "," EV("aten::mm", 0, 7, 20, 10) "," EV(
          "comm_kernel", 0, 7, 40, 10) "," EV("cudnn_conv2d", 0, 7, 60,
                                              10) "," EV("addmm.default", 0, 7, 65,
                                                         10) "," EV("elementwise", 0, 7, 80,
                                                                    20) "]";
  dt_trace_stats s = stats_of(text, "GPU", 0);
  assert_near(s.busy_us, 65, "busy");
  assert_near(s.mm_us, 35, "mm"); /* [0,10] + [20,30] + [60,75] */
  assert_near(s.total_us, 100, "total");
  assert_near(s.mm_fraction, 0.35, "mm_fraction");
  cr_assert(dt_trace_is_matrix_name("mm"));
  cr_assert(dt_trace_is_matrix_name("aten::bmm"));
  cr_assert(dt_trace_is_matrix_name("linear"));
  cr_assert(dt_trace_is_matrix_name("cutlass::Kernel<wgrad>"));
  cr_assert(dt_trace_is_matrix_name("matmul.out"));
  cr_assert_not(dt_trace_is_matrix_name("comm"));
  cr_assert_not(dt_trace_is_matrix_name("GEMM")); /* PyTorch's test is case-sensitive */
  cr_assert_not(dt_trace_is_matrix_name("summ"));
  cr_assert_not(dt_trace_is_matrix_name(NULL));
}

Test(trace_stats, user_annotations_do_not_count) {
  const char *text =
      "[" GPU0 ",{\"name\":\"step\",\"cat\":\"user_annotation\",\"ph\":\"X\",\"pid\":0,"
      "\"tid\":1,\"ts\":0,\"dur\":1000}," EV("k", 0, 1, 10, 10) "]";
  dt_trace_stats s = stats_of(text, "GPU", 0);
  cr_assert_eq(s.events, 1);
  assert_near(s.busy_us, 10, "busy");
}

Test(trace_stats, comm_lane_and_overlap) {
  const char *text =
      "{\"traceEvents\":[" CPU9 ",{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":9,\"tid\":0,"
      "\"args\":{\"name\":\"compute\"}},"
      "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":9,\"tid\":1,\"args\":{\"name\":\"comm\"}}"
      "," EV("mm", 9, 0, 0, 10) "," EV("all_reduce", 9, 1, 5, 10) "," EV("add", 9, 0, 30, 10) "]}";
  dt_trace_stats s = stats_of(text, "CPU", 0);
  assert_near(s.busy_us, 25, "busy");
  assert_near(s.comm_us, 10, "comm");
  assert_near(s.compute_us, 20, "compute");
  assert_near(s.overlap_us, 5, "overlap");
  assert_near(s.overlap_fraction, 0.5, "overlap fraction");
  assert_near(s.comm_fraction, 0.25, "comm fraction");
  /* nccl kernels are comm on any lane. */
  s = stats_of("[" GPU0 "," EV("ncclDevKernel_AllReduce", 0, 7, 0, 10) "," EV("k", 0, 8, 0, 20) "]",
               "GPU", 0);
  assert_near(s.comm_us, 10, "nccl comm");
  assert_near(s.overlap_us, 10, "nccl overlap");
}

Test(trace_read, pytorch_shapes_strings_and_extra_fields) {
  /* String pids/tids, ts as strings, label arrays, unknown keys and phases, escapes. */
  const char *text =
      "\xef\xbb\xbf {\"schemaVersion\": 1, \"deviceProperties\": [{\"id\": 0, \"x\": [1, {\"y\": "
      "null}]}],\n \"traceEvents\": [\n"
      "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"ampere_\\u0073gemm\", \"pid\": 0, \"tid\": "
      "\"stream 7\", \"ts\": \"100.5\", \"dur\": 12.25, \"args\": {\"a\": [true, false]}},\n"
      "{\"ph\": \"X\", \"name\": \"PyTorch Profiler (0)\", \"pid\": \"Spans\", \"tid\": \"PyTorch "
      "Profiler\", \"ts\": 0, \"dur\": 200},\n"
      "{\"ph\": \"i\", \"name\": \"marker\", \"pid\": 0, \"ts\": 3, \"s\": \"t\"},\n"
      "{\"ph\": \"B\", \"name\": \"begin\", \"pid\": 0, \"tid\": 1, \"ts\": 3},\n"
      "{\"name\": \"process_labels\", \"ph\": \"M\", \"pid\": 0, \"args\": {\"labels\": [\"GPU "
      "0\", "
      "\"x\\\"y\"]}},\n"
      "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": \"Spans\", \"args\": {\"name\": "
      "\"spans\"}}\n],\"displayTimeUnit\":\"ns\"}\n";
  dt_trace *trace = read_text(text);
  cr_assert_eq(dt_trace_event_count(trace), 2);
  cr_assert_eq(dt_trace_process_count(trace), 2);
  dt_trace_process_info p;
  cr_assert_eq(dt_trace_process(trace, 0, &p), DT_OK);
  cr_assert_str_eq(p.labels, "GPU 0,x\"y");
  cr_assert_eq(dt_trace_process(trace, 1, &p), DT_OK);
  cr_assert_str_eq(p.pid, "Spans");
  cr_assert_str_eq(p.name, "spans");
  dt_trace_lane_info lane;
  cr_assert_eq(dt_trace_lane(trace, 0, 0, &lane), DT_OK);
  cr_assert_str_eq(lane.tid, "stream 7");
  dt_trace_stats s;
  cr_assert_eq(dt_trace_compute_stats(trace, "GPU", 0, &s), DT_OK);
  cr_assert_eq(s.events, 1);
  assert_near(s.start_us, 100.5, "ts from a string");
  assert_near(s.mm_us, 12.25, "escaped gemm name");
  dt_trace_destroy(trace);
}

Test(trace_read, bare_array_may_be_truncated) {
  dt_trace_stats s = stats_of("[" GPU0 "," EV("k", 0, 1, 1.5, 2.25) ",\n", "GPU", 0);
  cr_assert_eq(s.events, 1);
  assert_near(s.busy_us, 2.25, "busy");
  s = stats_of("[" GPU0 "," EV("k", 0, 1, 1e3, 2e1), "GPU", 0);
  assert_near(s.busy_us, 20, "exponents");
}

Test(trace_read, empty_traces) {
  const char *empties[] = {"{\"traceEvents\":[]}", "[]", "[", " [ \n"};
  for (size_t i = 0; i < sizeof empties / sizeof *empties; i++) {
    dt_trace *trace = read_text(empties[i]);
    cr_assert_eq(dt_trace_event_count(trace), 0);
    dt_trace_stats s;
    cr_assert_eq(dt_trace_compute_stats(trace, "GPU", 0, &s), DT_ERR_INVALID);
    ref_assert_error_mentions("no complete events", "'GPU'");
    cr_assert_eq(dt_trace_compute_stats(trace, "GPU", 100, &s), DT_OK);
    cr_assert_eq(s.utilization, 0);
    dt_trace_destroy(trace);
  }
  /* A label the trace lacks: the message names it and lists the labels present, and speaks of
   * the library's argument, not of a command-line option. */
  dt_trace *trace = read_text("[" CPU9 "," EV("k", 9, 0, 0, 1) "]");
  dt_trace_stats s;
  cr_assert_eq(dt_trace_compute_stats(trace, "GPU", 0, &s), DT_ERR_INVALID);
  ref_assert_error_mentions("labels present: 'CPU'", "'GPU'");
  cr_assert(strstr(dt_last_error(), "device_label") && !strstr(dt_last_error(), "--"), "%s",
            dt_last_error());
  dt_trace_destroy(trace);
}

/* NULL device_label: the trace's own. Our CPU traces (processes labelled CPU only) count their
 * CPU processes; a trace with GPU processes (PyTorch's, or ours with GPU tracks) its GPU ones;
 * a trace with neither label looks for GPU. */
Test(trace_stats, the_default_label_comes_from_the_trace) {
  dt_trace *cpu = read_text("[" CPU9 "," EV("a", 9, 0, 0, 10) "," EV("b", 9, 1, 20, 10) "]");
  cr_assert_str_eq(dt_trace_device_label(cpu), "CPU");
  dt_trace_stats s;
  cr_assert_eq(dt_trace_compute_stats(cpu, NULL, 0, &s), DT_OK, "%s", dt_last_error());
  cr_assert_eq(s.events, 2);
  cr_assert_eq(s.processes, 1);
  assert_near(s.busy_us, 20, "busy");
  assert_near(s.utilization, 20.0 / 30.0, "utilization");
  dt_trace_destroy(cpu);
  dt_trace *both =
      read_text("[" CPU9 "," GPU0 "," EV("cpu", 9, 0, 0, 100) "," EV("k", 0, 7, 10, 5) "]");
  cr_assert_str_eq(dt_trace_device_label(both), "GPU");
  cr_assert_eq(dt_trace_compute_stats(both, NULL, 0, &s), DT_OK, "%s", dt_last_error());
  cr_assert_eq(s.events, 1, "only the GPU kernel counts");
  assert_near(s.busy_us, 5, "busy");
  dt_trace_destroy(both);
  dt_trace *none = read_text("[" EV("k", 3, 0, 0, 1) "]");
  cr_assert_str_eq(dt_trace_device_label(none), "GPU");
  cr_assert_eq(dt_trace_compute_stats(none, NULL, 0, &s), DT_ERR_INVALID);
  ref_assert_error_mentions("'GPU'", "labels present: none");
  dt_trace_destroy(none);
  cr_assert_null(dt_trace_device_label(NULL));
  /* An empty label would match every process: refused by the stats and the plot. */
  dt_trace *gpu = read_text("[" CPU9 "," GPU0 "," EV("cpu", 9, 0, 0, 100) "]");
  cr_assert_eq(dt_trace_compute_stats(gpu, "", 0, &s), DT_ERR_INVALID);
  ref_assert_error_mentions("dt_trace_compute_stats", "device_label is empty");
  cr_assert_eq(dt_trace_write_svg(gpu, "", 0, "/tmp/dt_trace_empty_label.svg"), DT_ERR_INVALID);
  ref_assert_error_mentions("dt_trace_write_svg", "device_label is empty");
  cr_assert_neq(access("/tmp/dt_trace_empty_label.svg", F_OK), 0, "nothing written");
  dt_trace_destroy(gpu);
}

typedef struct bad_case {
  const char *text;
  const char *mentions;
} bad_case;

Test(trace_read, bad_traces_name_the_problem) {
  static const bad_case cases[] = {
      {"", "empty input"},
      {"   ", "empty input"},
      {"{", "end of input"},
      {"nope", "'{' or '['"},
      {"{\"a\":1}", "no \"traceEvents\""},
      {"{\"traceEvents\":{}}", "must be an array"},
      {"{\"traceEvents\":[", "unterminated"},
      {"{\"traceEvents\":[]} x", "end of the input"},
      {"[1]", "traceEvents[0] is not an object"},
      {"[{\"ph\":\"X\",\"ts\":1,\"dur\":1,\"pid\":1} {}]", "',' or ']'"},
      {"[{\"ph\":\"X\",\"dur\":1,\"pid\":1}]", "no \"ts\""},
      {"[{\"ph\":\"X\",\"ts\":1,\"pid\":1}]", "no \"dur\""},
      {"[{\"ph\":\"X\",\"ts\":1,\"dur\":1}]", "no \"pid\""},
      {"[{\"ts\":1,\"dur\":1,\"pid\":1}]", "no \"ph\""},
      {"[{\"ph\":7}]", "\"ph\" must be a string"},
      {"[{\"ph\":\"X\",\"name\":[],\"ts\":1,\"dur\":1,\"pid\":1}]", "\"name\" must be a string"},
      {"[{\"ph\":\"X\",\"ts\":true,\"dur\":1,\"pid\":1}]", "\"ts\" must be a number"},
      {"[{\"ph\":\"X\",\"ts\":\"12x\",\"dur\":1,\"pid\":1}]", "does not hold a number"},
      {"[{\"ph\":\"X\",\"ts\":1,\"dur\":-1,\"pid\":1}]", "negative \"dur\""},
      {"[{\"ph\":\"X\",\"ts\":1e999,\"dur\":1,\"pid\":1}]", "out of range"},
      {"[{\"ph\":\"X\",\"ts\":1.5e308,\"dur\":1.5e308,\"pid\":1}]", "out of range"},
      {"[{\"ph\":\"X\",\"ts\":1,\"dur\":1,\"pid\":1e30}]", "not an integer"},
      {"[{\"ph\":\"X\",\"ts\":1,\"dur\":1,\"pid\":2.5}]", "not an integer"},
      {"[{\"ph\":\"X\",\"ts\":1,\"dur\":1,\"pid\":{}}]", "integer or a string"},
      {"[{\"ph\":\"X\",\"ts\":01,\"dur\":1,\"pid\":1}]", "',' or '}'"},
      {"[{\"ph\":\"X\",\"ts\":1.,\"dur\":1,\"pid\":1}]", "malformed number"},
      {"[{\"ph\":\"X\",\"ts\":-,\"dur\":1,\"pid\":1}]", "malformed number"},
      {"[{\"ph\":\"X\",\"ts\":1e,\"dur\":1,\"pid\":1}]", "exponent"},
      {"[{\"name\":\"a\nb\"}]", "control character"},
      {"[{\"name\":\"a\\qb\"}]", "bad escape"},
      {"[{\"name\":\"\\u12\"}]", "\\u escape"},
      {"[{\"name\":\"abc", "unterminated string"},
      {"[{\"x\":tru}]", "a JSON value"},
      {"[{\"x\":[1,2}]", "',' or ']' in an array"},
      {"[{\"x\":{\"a\" 1}}]", "':'"},
      {"[{\"x\":{1:2}}]", "string key"},
      {"[{\"ph\":\"M\",\"name\":\"process_labels\",\"pid\":1}]", "no \"args\""},
      {"[{\"ph\":\"M\",\"name\":\"process_labels\",\"pid\":1,\"args\":[]}]", "must be an object"},
      {"[{\"ph\":\"M\",\"name\":\"process_labels\",\"pid\":1,\"args\":{}}]", "no args.labels"},
      {"[{\"ph\":\"M\",\"name\":\"process_labels\",\"pid\":1,\"args\":{\"labels\":5}}]",
       "must be a string"},
      {"[{\"ph\":\"M\",\"name\":\"process_labels\",\"pid\":1,\"args\":{\"labels\":[1]}}]",
       "labels must be strings"},
      {"[{\"ph\":\"M\",\"name\":\"thread_name\",\"args\":{\"name\":\"x\"}}]", "no \"pid\""},
      {"[{\"ph\":\"M\",\"pid\":1}]", "no \"name\""},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    dt_trace *trace = (dt_trace *)&cases[i]; /* must be cleared */
    dt_status st = dt_trace_read_memory(cases[i].text, strlen(cases[i].text), &trace);
    cr_assert_eq(st, DT_ERR_INVALID, "case %zu (%s): status %d", i, cases[i].text, st);
    cr_assert_null(trace, "case %zu", i);
    cr_assert(strstr(dt_last_error(), cases[i].mentions) && strstr(dt_last_error(), "byte "),
              "case %zu (%s): message '%s' should mention '%s' and the byte", i, cases[i].text,
              dt_last_error(), cases[i].mentions);
  }
}

Test(trace_read, deep_nesting_and_long_numbers) {
  size_t depth = 100000;
  char *text = malloc(depth * 2 + 64);
  strcpy(text, "[{\"args\":");
  size_t n = strlen(text);
  for (size_t i = 0; i < depth; i++) text[n++] = '[';
  text[n] = '\0';
  dt_trace *trace = NULL;
  cr_assert_eq(dt_trace_read_memory(text, n, &trace), DT_ERR_INVALID);
  ref_assert_error_mentions("nesting deeper than 512", "byte ");
  /* 511 levels are fine. */
  strcpy(text, "[{\"ph\":\"i\",\"args\":");
  n = strlen(text);
  for (size_t i = 0; i < 511; i++) text[n++] = '[';
  for (size_t i = 0; i < 511; i++) text[n++] = ']';
  strcpy(text + n, "}]");
  cr_assert_eq(dt_trace_read_memory(text, strlen(text), &trace), DT_OK, "%s", dt_last_error());
  dt_trace_destroy(trace);
  /* A 1000-digit number is too long to convert but is reported, not overflowed. */
  strcpy(text, "[{\"x\":");
  n = strlen(text);
  for (size_t i = 0; i < 1000; i++) text[n++] = '7';
  strcpy(text + n, "}]");
  cr_assert_eq(dt_trace_read_memory(text, strlen(text), &trace), DT_ERR_INVALID);
  ref_assert_error_mentions("longer than", "byte 6");
  free(text);
  /* Not NUL-terminated: the reader must stop at size. */
  const char buf[] = {'[', '{', '"', 'p', 'h', '"', ':', '"', 'X'};
  cr_assert_eq(dt_trace_read_memory(buf, sizeof buf, &trace), DT_ERR_INVALID);
  ref_assert_error_mentions("unterminated string", "byte 7");
}

Test(trace_read, files_and_arguments) {
  dt_trace *trace = NULL;
  cr_assert_eq(dt_trace_read_file("/nonexistent/trace.json", &trace), DT_ERR_IO);
  ref_assert_error_mentions("cannot open", "/nonexistent/trace.json");
  cr_assert_null(trace);
  cr_assert_eq(dt_trace_read_file(NULL, &trace), DT_ERR_INVALID);
  cr_assert_eq(dt_trace_read_file("x", NULL), DT_ERR_INVALID);
  cr_assert_eq(dt_trace_read_memory(NULL, 3, &trace), DT_ERR_INVALID);
  char path[] = "/tmp/dt_test_trace_XXXXXX";
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  FILE *f = fdopen(fd, "w");
  fputs("{\"traceEvents\":[{\"ph\":\"X\",\"ts\":1,\"dur\":1,\"pid\":1}, oops]}", f);
  fclose(f);
  cr_assert_eq(dt_trace_read_file(path, &trace), DT_ERR_INVALID);
  ref_assert_error_mentions(path, "byte 51");
  dt_trace_stats s;
  cr_assert_eq(dt_trace_compute_stats(NULL, "GPU", 0, &s), DT_ERR_INVALID);
  cr_assert_eq(dt_trace_write_svg(NULL, "GPU", 0, path), DT_ERR_INVALID);
  remove(path);
  dt_trace_destroy(NULL);
}

Test(trace_plot, svg_has_rows_and_title) {
  dt_trace *trace = read_text("[" GPU0 "," EV("k", 0, 7, 0, 10) "," EV(
      "k", 0, 8, 20, 10) ","
                         "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"args\":{\"name\":"
                         "\"<dev & 0>\"}}]");
  char path[] = "/tmp/dt_test_svg_XXXXXX";
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  close(fd);
  cr_assert_eq(dt_trace_write_svg(trace, "GPU", 0, path), DT_OK, "%s", dt_last_error());
  FILE *f = fopen(path, "r");
  char buf[8192];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  cr_assert(strstr(buf, "<svg"), "%s", buf);
  cr_assert(strstr(buf, "utilization 66.7%"), "%s", buf);
  cr_assert(strstr(buf, "&lt;dev &amp; 0&gt;"), "%s", buf);
  cr_assert(strstr(buf, "</svg>"));
  cr_assert_eq(dt_trace_write_svg(trace, "GPU", 0, "/nonexistent/x.svg"), DT_ERR_IO);
  remove(path);
  dt_trace_destroy(trace);
}
