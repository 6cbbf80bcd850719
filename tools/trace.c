/*
 * dtensor trace: analysis of Chrome traces (ours or PyTorch's).
 *   stats FILE.json [--total-us T] [--device-label L] [--max-bytes N] [--json]
 *   plot  FILE.json -o FILE.svg [--total-us T] [--device-label L] [--max-bytes N]
 *
 * Strings from a trace are untrusted: text output escapes control characters (a process name
 * could otherwise clear or retitle the terminal) and JSON output escapes them as JSON does.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/text_escape.h"
#include "dtensor/dtensor.h"
#include "tools.h"

/* What --help adds for both subcommands. */
#define TRACE_DETAILS                                                                              \
  "Counts complete events in processes whose process_labels contain L (default: GPU\n"             \
  "when a process is labelled GPU, as in PyTorch's traces, else CPU when one is, as in\n"          \
  "our CPU traces). Total time is T microseconds, or the\n"                                        \
  "span of the counted events. Reads at most N bytes of FILE (default 4 GiB)."

static void trace_usage(FILE *f, bool plot) {
  fprintf(f, "Run 'dtensor trace %s --help' for its usage.\n", plot ? "plot" : "stats");
}

typedef struct trace_args {
  const char *file, *output, *label;
  double total_us;
  unsigned long long max_bytes; /* 0: the library's default */
  bool json;
} trace_args;

static int parse_args(int argc, char **argv, bool plot, trace_args *a) {
  *a = (trace_args){.label = NULL}; /* NULL: the trace's own (dt_trace_device_label) */
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
    } else if (strcmp(arg, "--max-bytes") == 0 && has_value) {
      char *end;
      const char *text = argv[++i];
      errno = 0;
      a->max_bytes = strtoull(text, &end, 10);
      if (*end || end == text || text[0] == '-' || errno || a->max_bytes == 0) {
        fprintf(stderr, "dtensor trace: --max-bytes wants a positive integer, got '");
        dt__escape_write(stderr, text, -1);
        fprintf(stderr, "'\n");
        return 2;
      }
    } else if (strcmp(arg, "-o") == 0 && plot && has_value) {
      a->output = argv[++i];
    } else if (arg[0] == '-' && arg[1]) {
      fprintf(stderr, "dtensor trace: unknown or incomplete option '%s'\n", arg);
      trace_usage(stderr, plot);
      return 2;
    } else if (!a->file) {
      a->file = arg;
    } else {
      fprintf(stderr, "dtensor trace: one trace file at a time ('%s' and '%s')\n", a->file, arg);
      return 2;
    }
  }
  if (!a->file || (plot && !a->output)) {
    trace_usage(stderr, plot);
    return 2;
  }
  return 0;
}

static void print_json_string(const char *s) { dt__escape_write_json(stdout, s); }

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
    dt_trace_process_info info;
    if (dt_trace_process(trace, p, &info)) break;
    printf(p ? ",{\"pid\":" : "{\"pid\":");
    print_json_string(info.pid);
    printf(",\"name\":");
    print_json_string(info.name);
    printf(",\"labels\":");
    print_json_string(info.labels);
    printf(",\"device\":%s,\"events\":%lld,\"busy_us\":%.3f,\"lanes\":[",
           strstr(info.labels, label) ? "true" : "false", (long long)info.events, info.busy_us);
    for (int l = 0; l < info.lanes; l++) {
      dt_trace_lane_info lane;
      if (dt_trace_lane(trace, p, l, &lane)) break;
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
  dt__escape_write(stdout, file, -1);
  printf(": %lld complete events in %d process%s labelled '", (long long)s->events, s->processes,
         s->processes == 1 ? "" : "es");
  dt__escape_write(stdout, label, -1);
  printf("' (%lld in the trace)\n", (long long)dt_trace_event_count(trace));
  printf("  busy        %14.3f us of %.3f us   utilization %6.2f%%\n", s->busy_us, s->total_us,
         100 * s->utilization);
  printf("  matrix      %14.3f us                  mm_fraction %6.2f%%\n", s->mm_us,
         100 * s->mm_fraction);
  printf("  comm        %14.3f us                  comm        %6.2f%%, %.1f%% of it overlapped "
         "with compute\n",
         s->comm_us, 100 * s->comm_fraction, 100 * s->overlap_fraction);
  printf("  %-8s %-24s %-12s %10s %14s\n", "pid", "name", "labels", "events", "busy us");
  for (int p = 0; p < dt_trace_process_count(trace); p++) {
    dt_trace_process_info info;
    if (dt_trace_process(trace, p, &info)) break;
    fputs("  ", stdout);
    dt__escape_write(stdout, info.pid, 8);
    fputc(' ', stdout);
    dt__escape_write(stdout, info.name, 24);
    fputc(' ', stdout);
    dt__escape_write(stdout, info.labels, 12);
    printf(" %10lld %14.3f\n", (long long)info.events, info.busy_us);
  }
}

int tool_trace_stats(int argc, char **argv) {
  trace_args a;
  int rc = parse_args(argc, argv, false, &a);
  if (rc) return rc;
  dt_trace *trace = NULL;
  if (dt_trace_read_file_ex(a.file, a.max_bytes, &trace)) {
    tool_print_error("dtensor trace stats");
    return 1;
  }
  if (!a.label) a.label = dt_trace_device_label(trace);
  dt_trace_stats stats;
  if (dt_trace_compute_stats(trace, a.label, a.total_us, &stats)) {
    tool_print_error("dtensor trace stats");
    fprintf(stderr, "dtensor trace stats: --device-label L counts the processes labelled L\n");
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

int tool_trace_plot(int argc, char **argv) {
  trace_args a;
  int rc = parse_args(argc, argv, true, &a);
  if (rc) return rc;
  dt_trace *trace = NULL;
  if (dt_trace_read_file_ex(a.file, a.max_bytes, &trace)) {
    tool_print_error("dtensor trace plot");
    return 1;
  }
  dt_status st = dt_trace_write_svg(trace, a.label, a.total_us, a.output);
  dt_trace_destroy(trace);
  if (st) {
    tool_print_error("dtensor trace plot");
    return 1;
  }
  return 0;
}

const tool_command tool_trace_commands[] = {
    {.name = "stats",
     .summary = "utilization of a Chrome trace (ours or PyTorch's), as text or JSON",
     .usage = "FILE.json [--total-us T] [--device-label L] [--max-bytes N] [--json]",
     .details = TRACE_DETAILS,
     .run = tool_trace_stats},
    {.name = "plot",
     .summary = "the timeline of a Chrome trace as SVG",
     .usage = "FILE.json -o FILE.svg [--total-us T] [--device-label L] [--max-bytes N]",
     .details = TRACE_DETAILS,
     .run = tool_trace_plot},
    {0},
};
