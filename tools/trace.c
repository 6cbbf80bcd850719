/*
 * dtensor trace: analysis of Chrome traces (ours or PyTorch's).
 *   stats FILE.json [--total-us T] [--device-label L] [--json]
 *   plot  FILE.json -o FILE.svg [--total-us T] [--device-label L]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtensor/dtensor.h"
#include "tools.h"

static void trace_usage(FILE *f) {
  fprintf(f, "usage: dtensor trace stats FILE.json [--total-us T] [--device-label L] [--json]\n"
             "       dtensor trace plot FILE.json -o FILE.svg [--total-us T] [--device-label L]\n"
             "Counts complete events in processes whose process_labels contain L (default GPU,\n"
             "as PyTorch's traces; our own traces say CPU). Total time is T microseconds, or the\n"
             "span of the counted events.\n");
}

typedef struct trace_args {
  const char *file, *output, *label;
  double total_us;
  bool json;
} trace_args;

static int parse_args(int argc, char **argv, bool plot, trace_args *a) {
  *a = (trace_args){.label = "GPU"};
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    bool has_value = i + 1 < argc;
    if (strcmp(arg, "--json") == 0 && !plot) {
      a->json = true;
    } else if (strcmp(arg, "--device-label") == 0 && has_value) {
      a->label = argv[++i];
    } else if (strcmp(arg, "--total-us") == 0 && has_value) {
      char *end;
      a->total_us = strtod(argv[++i], &end);
      if (*end || !(a->total_us > 0) || a->total_us > 1e300) {
        fprintf(stderr, "dtensor trace: --total-us wants a positive number, got '%s'\n", argv[i]);
        return 2;
      }
    } else if (strcmp(arg, "-o") == 0 && plot && has_value) {
      a->output = argv[++i];
    } else if (arg[0] == '-' && arg[1]) {
      fprintf(stderr, "dtensor trace: unknown or incomplete option '%s'\n", arg);
      trace_usage(stderr);
      return 2;
    } else if (!a->file) {
      a->file = arg;
    } else {
      fprintf(stderr, "dtensor trace: one trace file at a time ('%s' and '%s')\n", a->file, arg);
      return 2;
    }
  }
  if (!a->file || (plot && !a->output)) {
    trace_usage(stderr);
    return 2;
  }
  return 0;
}

static void print_json_string(const char *s) {
  putchar('"');
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\') {
      printf("\\%c", *p);
    } else if (*p < 0x20) {
      printf("\\u%04x", *p);
    } else {
      putchar(*p);
    }
  }
  putchar('"');
}

static void print_json(const dt_trace *trace, const dt_trace_stats *s, const char *label) {
  printf("{\"events\":%lld,\"busy_us\":%.3f,\"total_us\":%.3f,\"utilization\":%.6f,"
         "\"mm_fraction\":%.6f,\"mm_us\":%.3f,\"comm_us\":%.3f,\"comm_fraction\":%.6f,"
         "\"compute_us\":%.3f,\"overlap_us\":%.3f,\"overlap_fraction\":%.6f,\"start_us\":%.3f,"
         "\"end_us\":%.3f,\"device_label\":",
         (long long)s->events, s->busy_us, s->total_us, s->utilization, s->mm_fraction, s->mm_us,
         s->comm_us, s->comm_fraction, s->compute_us, s->overlap_us, s->overlap_fraction,
         s->start_us, s->end_us);
  print_json_string(label);
  printf(",\"device_processes\":%d,\"all_events\":%lld,\"processes\":[", s->processes,
         (long long)dt_trace_event_count(trace));
  for (int p = 0; p < dt_trace_process_count(trace); p++) {
    dt_trace_process info;
    if (dt_trace_get_process(trace, p, &info)) break;
    printf(p ? ",{\"pid\":" : "{\"pid\":");
    print_json_string(info.pid);
    printf(",\"name\":");
    print_json_string(info.name);
    printf(",\"labels\":");
    print_json_string(info.labels);
    printf(",\"device\":%s,\"events\":%lld,\"busy_us\":%.3f,\"lanes\":[",
           strstr(info.labels, label) ? "true" : "false", (long long)info.events, info.busy_us);
    for (int l = 0; l < info.lanes; l++) {
      dt_trace_lane lane;
      if (dt_trace_get_lane(trace, p, l, &lane)) break;
      printf(l ? ",{\"tid\":" : "{\"tid\":");
      print_json_string(lane.tid);
      printf(",\"name\":");
      print_json_string(lane.name);
      printf(",\"events\":%lld,\"busy_us\":%.3f}", (long long)lane.events, lane.busy_us);
    }
    printf("]}");
  }
  printf("]}\n");
}

static void print_text(const char *file, const dt_trace *trace, const dt_trace_stats *s,
                       const char *label) {
  printf("%s: %lld complete events in %d process%s labelled '%s' (%lld in the trace)\n", file,
         (long long)s->events, s->processes, s->processes == 1 ? "" : "es", label,
         (long long)dt_trace_event_count(trace));
  printf("  busy        %14.3f us of %.3f us   utilization %6.2f%%\n", s->busy_us, s->total_us,
         100 * s->utilization);
  printf("  matrix      %14.3f us                  mm_fraction %6.2f%%\n", s->mm_us,
         100 * s->mm_fraction);
  printf("  comm        %14.3f us                  comm        %6.2f%%, %.1f%% of it overlapped "
         "with compute\n",
         s->comm_us, 100 * s->comm_fraction, 100 * s->overlap_fraction);
  printf("  %-8s %-24s %-12s %10s %14s\n", "pid", "name", "labels", "events", "busy us");
  for (int p = 0; p < dt_trace_process_count(trace); p++) {
    dt_trace_process info;
    if (dt_trace_get_process(trace, p, &info)) break;
    printf("  %-8.8s %-24.24s %-12.12s %10lld %14.3f\n", info.pid, info.name, info.labels,
           (long long)info.events, info.busy_us);
  }
}

static int trace_stats(int argc, char **argv) {
  trace_args a;
  int rc = parse_args(argc, argv, false, &a);
  if (rc) return rc;
  dt_trace *trace = NULL;
  if (dt_trace_read_file(a.file, &trace)) {
    fprintf(stderr, "dtensor trace stats: %s\n", dt_last_error());
    return 1;
  }
  dt_trace_stats stats;
  if (dt_trace_compute_stats(trace, a.label, a.total_us, &stats)) {
    fprintf(stderr, "dtensor trace stats: %s: %s\n", a.file, dt_last_error());
    dt_trace_destroy(trace);
    return 1;
  }
  if (a.json) {
    print_json(trace, &stats, a.label);
  } else {
    print_text(a.file, trace, &stats, a.label);
  }
  dt_trace_destroy(trace);
  return 0;
}

static int trace_plot(int argc, char **argv) {
  trace_args a;
  int rc = parse_args(argc, argv, true, &a);
  if (rc) return rc;
  dt_trace *trace = NULL;
  if (dt_trace_read_file(a.file, &trace)) {
    fprintf(stderr, "dtensor trace plot: %s\n", dt_last_error());
    return 1;
  }
  dt_status st = dt_trace_write_svg(trace, a.label, a.total_us, a.output);
  dt_trace_destroy(trace);
  if (st) {
    fprintf(stderr, "dtensor trace plot: %s\n", dt_last_error());
    return 1;
  }
  return 0;
}

int dt_tool_trace(int argc, char **argv) {
  if (argc < 2) {
    trace_usage(stderr);
    return 2;
  }
  if (strcmp(argv[1], "stats") == 0) return trace_stats(argc - 1, argv + 1);
  if (strcmp(argv[1], "plot") == 0) return trace_plot(argc - 1, argv + 1);
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
    trace_usage(stdout);
    return 0;
  }
  fprintf(stderr, "dtensor trace: unknown subcommand '%s'\n", argv[1]);
  trace_usage(stderr);
  return 2;
}
