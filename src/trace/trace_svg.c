/* SVG timeline of a parsed trace: a row per process and lane, busy intervals as bars. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "profile/output_file.h"
#include "trace/trace_impl.h"

#define WIDTH 1200.0
#define LEFT 260.0
#define RIGHT 20.0
#define TOP 56.0
#define ROW 18.0
#define GAP 4.0

static void xml_text(FILE *f, const char *s) {
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    switch (*p) {
    case '&': fputs("&amp;", f); break;
    case '<': fputs("&lt;", f); break;
    case '>': fputs("&gt;", f); break;
    case '"': fputs("&quot;", f); break;
    default:
      if (*p >= 0x20 || *p == '\t') fputc(*p, f); /* XML 1.0 forbids other controls */
    }
  }
}

/* A bar being grown on one row; bars closer than half a pixel merge, so the file stays small
 * (at most about WIDTH bars a row) however many events there are. */
typedef struct row_state {
  double x0, x1;
  bool open;
  int y;
  const char *color;
} row_state;

static void flush(FILE *f, row_state *row) {
  if (!row->open) return;
  double w = row->x1 - row->x0;
  fprintf(f, "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\"/>\n", row->x0,
          row->y, w < 0.5 ? 0.5 : w, (int)ROW, row->color);
  row->open = false;
}

dt_status dt_trace_write_svg(const dt_trace *t, const char *device_label, double total_us,
                             const char *path) {
  if (!t || !path) return dt__error(DT_ERR_INVALID, "dt_trace_write_svg: trace or path is NULL");
  if (!isfinite(total_us)) {
    return dt__error(DT_ERR_INVALID, "dt_trace_write_svg: total_us %g is not a finite number",
                     total_us);
  }
  if (device_label && !*device_label)
    return dt__error(DT_ERR_INVALID,
                     "dt_trace_write_svg: device_label is empty (NULL: the trace's own)");
  const char *label = device_label ? device_label : dt_trace_device_label(t);
  dt_trace_stats stats;
  bool have_stats = dt_trace_compute_stats(t, label, total_us, &stats) == DT_OK;
  if (!have_stats) dt_clear_error(); /* no device events is a title, not a failure */
  double t0 = t->n_events ? t->events[0].start : 0.0, t1 = t0;
  for (size_t i = 0; i < t->n_events; i++) t1 = t->events[i].end > t1 ? t->events[i].end : t1;
  double span = t1 > t0 ? t1 - t0 : 1.0;
  double scale = (WIDTH - LEFT - RIGHT) / span;

  row_state *rows = dt__calloc(sizeof *rows * (t->n_lanes ? t->n_lanes : 1));
  if (!rows) return dt__error(DT_ERR_NOMEM, "dt_trace_write_svg: out of memory");
  dt__output_file out;
  FILE *f = dt__output_open(&out, path);
  if (!f) {
    int err = errno;
    dt__free(rows);
    return dt__error(DT_ERR_IO, "dt_trace_write_svg: cannot open '%s' for writing: %s", path,
                     dt__output_strerror(&out, err));
  }
  double height = TOP + (double)t->n_lanes * (ROW + GAP) + 40;
  fprintf(f,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
          "font-family=\"sans-serif\" font-size=\"12\">\n"
          "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
          (int)WIDTH, (int)height);
  fputs("<text x=\"10\" y=\"22\" font-size=\"15\">", f);
  if (have_stats) {
    fprintf(f,
            "utilization %.1f%% (busy %.1f us of %.1f us), matrix %.1f%%, comm %.1f%% "
            "&#8212; processes labelled '",
            100 * stats.utilization, stats.busy_us, stats.total_us, 100 * stats.mm_fraction,
            100 * stats.comm_fraction);
  } else {
    fputs("no complete events in processes labelled '", f);
  }
  xml_text(f, label);
  fprintf(f,
          "'</text>\n<text x=\"10\" y=\"40\" fill=\"#555\">%zu events, %zu processes, span %.1f "
          "us</text>\n",
          t->n_events, t->n_processes, t1 - t0);

  /* Row labels and backgrounds, lanes grouped by process. */
  int row = 0;
  for (size_t p = 0; p < t->n_processes; p++) {
    const dt__trace_process *proc = &t->processes[p];
    bool device = proc->labels && strstr(proc->labels, label);
    for (size_t k = t->process_lane_start[p]; k < t->process_lane_start[p + 1]; k++, row++) {
      uint32_t l = t->process_lanes[k];
      const dt__trace_lane *lane = &t->lanes[l];
      bool comm = lane->name && strncmp(lane->name, "comm", 4) == 0;
      int y = (int)(TOP + row * (ROW + GAP));
      rows[l].y = y;
      rows[l].color = !device ? "#9e9e9e" : comm ? "#ef6c00" : "#1565c0";
      fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#f2f2f2\"/>\n",
              (int)LEFT, y, (int)(WIDTH - LEFT - RIGHT), (int)ROW);
      fprintf(f, "<text x=\"10\" y=\"%d\">", y + 13);
      xml_text(f, proc->name ? proc->name : proc->pid_text);
      fputs(" / ", f);
      xml_text(f, lane->name ? lane->name : lane->tid_text);
      fputs("</text>\n", f);
    }
  }
  for (size_t i = 0; i < t->n_events; i++) {
    const dt__trace_event *e = &t->events[i];
    if (e->flags & DT__TRACE_USER) continue;
    row_state *r = &rows[e->lane];
    double x0 = LEFT + (e->start - t0) * scale, x1 = LEFT + (e->end - t0) * scale;
    if (r->open && x0 <= r->x1 + 0.5) {
      if (x1 > r->x1) r->x1 = x1;
      continue;
    }
    flush(f, r);
    *r = (row_state){.x0 = x0, .x1 = x1, .open = true, .y = r->y, .color = r->color};
  }
  for (size_t l = 0; l < t->n_lanes; l++) flush(f, &rows[l]);

  /* Time axis: five ticks relative to the first event. */
  int axis_y = (int)(TOP + (double)t->n_lanes * (ROW + GAP) + 14);
  for (int i = 0; i <= 4; i++) {
    double x = LEFT + (WIDTH - LEFT - RIGHT) * i / 4.0, us = span * i / 4.0;
    fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#999\"/>\n", x,
            (int)TOP - 4, x, axis_y - 10);
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%.4g %s</text>\n", x, axis_y + 4,
            us >= 1e3 ? us / 1e3 : us, us >= 1e3 ? "ms" : "us");
  }
  fputs("</svg>\n", f);
  dt__free(rows);
  int err = dt__output_close(&out, f, false);
  if (err) return dt__output_close_error(&out, err, "dt_trace_write_svg");
  return DT_OK;
}
