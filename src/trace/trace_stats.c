/* Analysis of a parsed trace: interval unions, utilization, matrix and comm shares, and the
 * accessors of processes and lanes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace/trace_impl.h"

bool dt__trace_grow(void **array, size_t *cap, size_t need, size_t size) {
  if (need <= *cap) return true;
  size_t capacity = *cap ? *cap : 16;
  while (capacity < need) {
    if (capacity > SIZE_MAX / 2 / size) return false;
    capacity *= 2;
  }
  void *grown = dt__alloc(capacity * size);
  if (!grown) return false;
  if (*array) memcpy(grown, *array, *cap * size);
  dt__free(*array);
  *array = grown;
  *cap = capacity;
  return true;
}

bool dt__trace_contains(const char *name, size_t length, const char *needle) {
  size_t n = strlen(needle);
  if (n == 0) return true;
  for (size_t i = 0; i + n <= length; i++) {
    if (name[i] == needle[0] && memcmp(name + i, needle, n) == 0) return true;
  }
  return false;
}

bool dt__trace_is_matrix_span(const char *name, size_t length) {
  /* PyTorch's rule (benchmark_utils.py), for GPU kernel names. */
  if (dt__trace_contains(name, length, "gemm") || dt__trace_contains(name, length, "conv") ||
      dt__trace_contains(name, length, "cutlass") || dt__trace_contains(name, length, "wgrad")) {
    return true;
  }
  /* Our op names are short ATen names; a substring test would count "comm" as "mm", so they
   * match whole, with an "aten::" prefix and an ".overload" suffix allowed. */
  if (length >= 6 && memcmp(name, "aten::", 6) == 0) {
    name += 6;
    length -= 6;
  }
  const char *dot = memchr(name, '.', length);
  if (dot) length = (size_t)(dot - name);
  static const char *const ops[] = {"mm",     "addmm",  "bmm", "baddbmm",
                                    "matmul", "linear", "mv",  "addmv"};
  for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) {
    if (strlen(ops[i]) == length && memcmp(ops[i], name, length) == 0) return true;
  }
  return false;
}

bool dt_trace_is_matrix_name(const char *name) {
  return name && dt__trace_is_matrix_span(name, strlen(name));
}

/* ---- Interval unions ------------------------------------------------------------------------
 * Events arrive sorted by start; a union keeps the interval it is growing and adds it to the
 * total when the next event starts after its end, so overlaps count once. */

typedef struct interval_union {
  double start, end, total;
  bool open;
} interval_union;

static inline void union_add(interval_union *u, double start, double end) {
  if (!u->open) {
    u->open = true;
    u->start = start;
    u->end = end;
  } else if (start > u->end) {
    u->total += u->end - u->start;
    u->start = start;
    u->end = end;
  } else if (end > u->end) {
    u->end = end;
  }
}

static inline double union_total(const interval_union *u) {
  return u->total + (u->open ? u->end - u->start : 0.0);
}

static int compare_events(const void *a, const void *b) {
  const dt__trace_event *x = a, *y = b;
  if (x->start != y->start) return x->start < y->start ? -1 : 1;
  return (x->end > y->end) - (x->end < y->end);
}

dt_status dt__trace_finish(dt_trace *t) {
  if (t->n_events > 1) qsort(t->events, t->n_events, sizeof *t->events, compare_events);
  size_t np = t->n_processes, nl = t->n_lanes;
  interval_union *per_process = dt__calloc(sizeof *per_process * (np ? np : 1));
  interval_union *per_lane = dt__calloc(sizeof *per_lane * (nl ? nl : 1));
  t->process_lanes = dt__alloc(sizeof *t->process_lanes * (nl ? nl : 1));
  t->process_lane_start = dt__calloc(sizeof *t->process_lane_start * (np + 1));
  if (!per_process || !per_lane || !t->process_lanes || !t->process_lane_start) {
    dt__free(per_process);
    dt__free(per_lane);
    return dt__error(DT_ERR_NOMEM, "dt_trace: out of memory");
  }
  for (size_t i = 0; i < t->n_events; i++) {
    const dt__trace_event *e = &t->events[i];
    if (e->flags & DT__TRACE_USER) continue;
    union_add(&per_process[e->process], e->start, e->end);
    union_add(&per_lane[e->lane], e->start, e->end);
  }
  for (size_t p = 0; p < np; p++) t->processes[p].busy_us = union_total(&per_process[p]);
  for (size_t l = 0; l < nl; l++) t->lanes[l].busy_us = union_total(&per_lane[l]);
  dt__free(per_process);
  dt__free(per_lane);
  /* Lanes grouped by process, in order of first appearance (a counting sort). */
  for (size_t l = 0; l < nl; l++) t->process_lane_start[t->lanes[l].process + 1]++;
  for (size_t p = 0; p < np; p++) t->process_lane_start[p + 1] += t->process_lane_start[p];
  size_t *fill = dt__alloc(sizeof *fill * (np ? np : 1));
  if (!fill) return dt__error(DT_ERR_NOMEM, "dt_trace: out of memory");
  memcpy(fill, t->process_lane_start, sizeof *fill * np);
  for (size_t l = 0; l < nl; l++) t->process_lanes[fill[t->lanes[l].process]++] = (uint32_t)l;
  dt__free(fill);
  return DT_OK;
}

void dt_trace_destroy(dt_trace *t) {
  if (!t) return;
  for (size_t p = 0; p < t->n_processes; p++) {
    dt__free(t->processes[p].pid_text);
    dt__free(t->processes[p].name);
    dt__free(t->processes[p].labels);
  }
  for (size_t l = 0; l < t->n_lanes; l++) {
    dt__free(t->lanes[l].tid_text);
    dt__free(t->lanes[l].name);
  }
  dt__free(t->events);
  dt__free(t->processes);
  dt__free(t->lanes);
  dt__free(t->process_lanes);
  dt__free(t->process_lane_start);
  dt__free(t->process_map.entries);
  dt__free(t->lane_map.entries);
  dt__free(t);
}

/* ---- Statistics ----------------------------------------------------------------------------- */

static bool is_comm_lane(const dt__trace_lane *lane) {
  return lane->name && strncmp(lane->name, "comm", 4) == 0;
}

static bool has_label(const dt_trace *t, const char *label) {
  for (size_t p = 0; p < t->n_processes; p++)
    if (t->processes[p].labels && strstr(t->processes[p].labels, label)) return true;
  return false;
}

const char *dt_trace_device_label(const dt_trace *t) {
  if (!t) return NULL;
  return has_label(t, "GPU") || !has_label(t, "CPU") ? "GPU" : "CPU";
}

dt_status dt_trace_compute_stats(const dt_trace *t, const char *device_label, double total_us,
                                 dt_trace_stats *out) {
  if (!t || !out) return dt__error(DT_ERR_INVALID, "dt_trace_compute_stats: trace or out is NULL");
  memset(out, 0, sizeof *out);
  if (!isfinite(total_us)) {
    return dt__error(DT_ERR_INVALID, "dt_trace_compute_stats: total_us %g is not a finite number",
                     total_us);
  }
  if (device_label && !*device_label) /* "" is in every label: every process would count */
    return dt__error(DT_ERR_INVALID,
                     "dt_trace_compute_stats: device_label is empty (NULL: the trace's own)");
  const char *label = device_label ? device_label : dt_trace_device_label(t);
  bool *counted = dt__calloc(sizeof *counted * (t->n_processes ? t->n_processes : 1));
  bool *comm = dt__calloc(sizeof *comm * (t->n_lanes ? t->n_lanes : 1));
  if (!counted || !comm) {
    dt__free(counted);
    dt__free(comm);
    return dt__error(DT_ERR_NOMEM, "dt_trace_compute_stats: out of memory");
  }
  for (size_t p = 0; p < t->n_processes; p++) {
    counted[p] = t->processes[p].labels && strstr(t->processes[p].labels, label);
    out->processes += counted[p];
  }
  for (size_t l = 0; l < t->n_lanes; l++) comm[l] = is_comm_lane(&t->lanes[l]);
  interval_union all = {0}, mm = {0}, comm_union = {0}, compute = {0};
  for (size_t i = 0; i < t->n_events; i++) {
    const dt__trace_event *e = &t->events[i];
    if (!counted[e->process] || (e->flags & DT__TRACE_USER)) continue;
    if (out->events == 0 || e->start < out->start_us) out->start_us = e->start;
    if (out->events == 0 || e->end > out->end_us) out->end_us = e->end;
    out->events++;
    union_add(&all, e->start, e->end);
    if (e->flags & DT__TRACE_MATRIX) union_add(&mm, e->start, e->end);
    if (comm[e->lane] || (e->flags & (DT__TRACE_NCCL | DT__TRACE_COLLECTIVE))) {
      union_add(&comm_union, e->start, e->end);
    } else {
      union_add(&compute, e->start, e->end);
    }
  }
  dt__free(counted);
  dt__free(comm);
  if (out->events == 0 && !(total_us > 0)) {
    char labels[512];
    size_t used = 0;
    labels[0] = '\0';
    for (size_t p = 0; p < t->n_processes && used + 1 < sizeof labels; p++) {
      if (!t->processes[p].labels) continue;
      bool seen = false; /* each distinct label once */
      for (size_t q = 0; q < p && !seen; q++) {
        seen =
            t->processes[q].labels && strcmp(t->processes[q].labels, t->processes[p].labels) == 0;
      }
      if (seen) continue;
      used += (size_t)snprintf(labels + used, sizeof labels - used, "%s'%s'", used ? ", " : "",
                               t->processes[p].labels);
    }
    if (used >= sizeof labels) used = sizeof labels - 1;
    return dt__error(DT_ERR_INVALID,
                     "dt_trace_compute_stats: no complete events in processes labelled '%s' "
                     "(%zu events in %zu processes; labels present: %s; device_label picks "
                     "another)",
                     label, t->n_events, t->n_processes, used ? labels : "none");
  }
  out->busy_us = union_total(&all);
  out->mm_us = union_total(&mm);
  out->comm_us = union_total(&comm_union);
  out->compute_us = union_total(&compute);
  /* |compute ∩ comm| = |compute| + |comm| - |compute ∪ comm|. */
  out->overlap_us = out->compute_us + out->comm_us - out->busy_us;
  if (out->overlap_us < 0) out->overlap_us = 0; /* rounding */
  out->total_us = total_us > 0 ? total_us : out->end_us - out->start_us;
  if (out->total_us > 0) {
    out->utilization = out->busy_us / out->total_us;
    out->mm_fraction = out->mm_us / out->total_us;
    out->comm_fraction = out->comm_us / out->total_us;
  }
  if (out->comm_us > 0) out->overlap_fraction = out->overlap_us / out->comm_us;
  return DT_OK;
}

dt_status dt_trace_process_comm(const dt_trace *t, int process, double start_us, double end_us,
                                dt_trace_comm_info *out) {
  static const char fn[] = "dt_trace_process_comm";
  if (!t || !out) return dt__error(DT_ERR_INVALID, "%s: trace or out is NULL", fn);
  memset(out, 0, sizeof *out);
  if (!isfinite(start_us) || !isfinite(end_us)) {
    return dt__error(DT_ERR_INVALID, "%s: window [%g, %g] is not finite", fn, start_us, end_us);
  }
  bool window = end_us > start_us;
  if (process < 0 || (size_t)process >= t->n_processes) {
    return dt__error(DT_ERR_INDEX, "%s: process %d out of range (the trace has %zu)", fn, process,
                     t->n_processes);
  }
  interval_union comm = {0}, kernel = {0}, both = {0};
  bool any = false;
  double first = 0, last = 0;
  for (size_t i = 0; i < t->n_events; i++) {
    const dt__trace_event *e = &t->events[i];
    if (e->process != (uint32_t)process || (e->flags & DT__TRACE_USER)) continue;
    double a = e->start, b = e->end;
    if (window) { /* clipped to the window; clipping keeps the order of the starts */
      if (b <= start_us || a >= end_us) continue;
      a = a < start_us ? start_us : a;
      b = b > end_us ? end_us : b;
    }
    if (!any || a < first) first = a;
    if (!any || b > last) last = b;
    any = true;
    bool is_comm = (e->flags & (DT__TRACE_COLLECTIVE | DT__TRACE_NCCL)) != 0;
    bool is_kernel = !is_comm && (e->flags & DT__TRACE_KERNEL);
    if (is_comm) union_add(&comm, a, b);
    if (is_kernel) union_add(&kernel, a, b);
    if (is_comm || is_kernel) union_add(&both, a, b);
  }
  out->collective_us = union_total(&comm);
  out->kernel_us = union_total(&kernel);
  /* |comm ∩ kernel| = |comm| + |kernel| - |comm ∪ kernel|. */
  out->overlap_us = out->collective_us + out->kernel_us - union_total(&both);
  if (out->overlap_us < 0) out->overlap_us = 0; /* rounding */
  if (out->overlap_us > out->collective_us) out->overlap_us = out->collective_us;
  out->exposed_us = out->collective_us - out->overlap_us;
  out->span_us = window ? end_us - start_us : any ? last - first : 0;
  if (out->span_us > 0) out->exposed_fraction = out->exposed_us / out->span_us;
  return DT_OK;
}

/* ---- Accessors ------------------------------------------------------------------------------ */

int64_t dt_trace_event_count(const dt_trace *t) { return t ? (int64_t)t->n_events : 0; }

int dt_trace_process_count(const dt_trace *t) { return t ? (int)t->n_processes : 0; }

dt_status dt_trace_process(const dt_trace *t, int index, dt_trace_process_info *out) {
  if (!t || !out) return dt__error(DT_ERR_INVALID, "dt_trace_process: trace or out is NULL");
  if (index < 0 || (size_t)index >= t->n_processes) {
    return dt__error(DT_ERR_INDEX, "dt_trace_process: index %d not in [0, %zu)", index,
                     t->n_processes);
  }
  const dt__trace_process *p = &t->processes[index];
  *out = (dt_trace_process_info){.pid = p->pid_text,
                                 .pid_number = p->pid_number,
                                 .name = dt__trace_text(p->name),
                                 .labels = dt__trace_text(p->labels),
                                 .lanes = p->n_lanes,
                                 .events = p->events,
                                 .busy_us = p->busy_us};
  return DT_OK;
}

dt_status dt_trace_lane(const dt_trace *t, int process, int lane, dt_trace_lane_info *out) {
  if (!t || !out) return dt__error(DT_ERR_INVALID, "dt_trace_lane: trace or out is NULL");
  if (process < 0 || (size_t)process >= t->n_processes) {
    return dt__error(DT_ERR_INDEX, "dt_trace_lane: process %d not in [0, %zu)", process,
                     t->n_processes);
  }
  size_t first = t->process_lane_start[process], count = t->process_lane_start[process + 1] - first;
  if (lane < 0 || (size_t)lane >= count) {
    return dt__error(DT_ERR_INDEX, "dt_trace_lane: lane %d not in [0, %zu) of process %d", lane,
                     count, process);
  }
  const dt__trace_lane *l = &t->lanes[t->process_lanes[first + (size_t)lane]];
  *out = (dt_trace_lane_info){.tid = l->tid_text,
                              .tid_number = l->tid_number,
                              .name = dt__trace_text(l->name),
                              .events = l->events,
                              .busy_us = l->busy_us};
  return DT_OK;
}
