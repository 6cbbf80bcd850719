/* Chrome Trace Event Format export of a profiler's events (merged or one rank per file). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "profile/output_file.h"
#include "profile/recorder_impl.h"

/* Writes s as a JSON string: quotes, backslashes and control characters escaped; bytes that
 * are not valid UTF-8 become U+FFFD so that strict readers (Perfetto) accept the file. */
static void write_json_string(FILE *f, const char *s) {
  const unsigned char *p = (const unsigned char *)(s ? s : "");
  fputc('"', f);
  while (*p) {
    unsigned char c = *p;
    if (c == '"' || c == '\\') {
      fputc('\\', f);
      fputc(c, f);
      p++;
    } else if (c < 0x20) {
      fprintf(f, "\\u%04x", c);
      p++;
    } else if (c < 0x80) {
      fputc(c, f);
      p++;
    } else {
      int len = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
      int ok = len > 0;
      for (int i = 1; ok && i < len; i++) ok = (p[i] & 0xc0) == 0x80;
      if (ok) {
        fwrite(p, 1, (size_t)len, f);
        p += len;
      } else {
        fputs("\\ufffd", f);
        p++;
      }
    }
  }
  fputc('"', f);
}

typedef struct writer {
  FILE *f;
  const dt_profiler *profiler;
  double ns_per_tick;
  bool first;
} writer;

static void separator(writer *w) {
  if (!w->first) fputs(",\n", w->f);
  w->first = false;
}

/* Ticks to absolute CLOCK_MONOTONIC microseconds, so that per-rank files written by
 * different processes of one machine line up. */
static double to_us(const writer *w, uint64_t tick) {
  int64_t delta = (int64_t)(tick - w->profiler->start_tick);
  return ((double)w->profiler->start_ns + (double)delta * w->ns_per_tick) / 1000.0;
}

static void write_metadata(writer *w, const char *what, int pid, int tid, const char *key,
                           const char *value) {
  separator(w);
  fprintf(w->f, "{\"name\":\"%s\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"%s\":", what, pid,
          tid, key);
  write_json_string(w->f, value);
  fputs("}}", w->f);
}

static void write_sort_index(writer *w, const char *what, int pid, int tid, int index) {
  separator(w);
  fprintf(w->f, "{\"name\":\"%s\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"sort_index\":%d}}",
          what, pid, tid, index);
}

/* Metadata of a rank: its process, and the two lanes of each of its threads (thread k of
 * the rank, in registration order, gets tids 2k and 2k+1). */
static void write_rank_metadata(writer *w, int rank, int n_threads) {
  char buf[64];
  snprintf(buf, sizeof buf, "rank %d", rank);
  write_metadata(w, "process_name", rank, 0, "name", buf);
  write_metadata(w, "process_labels", rank, 0, "labels", "CPU");
  write_sort_index(w, "process_sort_index", rank, 0, rank);
  for (int k = 0; k < (n_threads > 0 ? n_threads : 1); k++) {
    for (int lane = 0; lane < 2; lane++) {
      const char *base = lane == DT_PROFILER_LANE_COMPUTE ? "compute" : "comm";
      if (k == 0) {
        snprintf(buf, sizeof buf, "%s", base);
      } else {
        snprintf(buf, sizeof buf, "%s (thread %d)", base, k);
      }
      write_metadata(w, "thread_name", rank, 2 * k + lane, "name", buf);
      write_sort_index(w, "thread_sort_index", rank, 2 * k + lane, 2 * k + lane);
    }
  }
}

static void write_event(writer *w, const dt__profile_event *e, int pid, int tid) {
  double ts = to_us(w, e->start), end = to_us(w, e->end);
  double dur = end > ts ? end - ts : 0.0;
  separator(w);
  fputs("{\"name\":", w->f);
  write_json_string(w->f, e->name);
  fprintf(w->f, ",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":%d",
          dt__profile_category_name((dt__profile_category)e->category), ts, dur, pid, tid);
  switch ((dt__profile_args_kind)e->args_kind) {
  case DT__PROFILE_ARGS_TEXT:
    fputs(",\"args\":{\"info\":", w->f);
    write_json_string(w->f, e->args.text);
    fputs("}", w->f);
    break;
  case DT__PROFILE_ARGS_SHAPE: {
    int n = e->ndim < DT__PROFILE_SHAPE_CAPACITY ? e->ndim : DT__PROFILE_SHAPE_CAPACITY;
    fputs(",\"args\":{\"shape\":[", w->f);
    for (int i = 0; i < n; i++) fprintf(w->f, i ? ",%" PRId64 : "%" PRId64, e->args.ints[i]);
    fputs("]", w->f);
    if (e->ndim > n) fprintf(w->f, ",\"ndim\":%d", e->ndim);
    fputs("}", w->f);
    break;
  }
  case DT__PROFILE_ARGS_BYTES:
    fprintf(w->f, ",\"args\":{\"bytes\":%" PRId64 ",\"group_size\":%" PRId64 "}", e->args.ints[0],
            e->args.ints[1]);
    break;
  case DT__PROFILE_ARGS_NONE:
  default: break;
  }
  fputs("}", w->f);
}

/* ---- Device processes: one per device, one thread per queue (profile_event.h) ------------ */

/* Chrome pids of device processes start here, past any rank. */
#define DEVICE_PID_BASE 1000000

static int device_pid(const dt__profile_device_event *e) {
  return DEVICE_PID_BASE + e->kind * 1000 + e->device;
}

static bool wanted(const dt__profile_device_event *e, int rank) {
  return rank < 0 || e->rank == rank;
}

/* Metadata of every device and queue the events name (each once, in order of appearance). */
static void write_device_metadata(writer *w, int rank) {
  const dt_profiler *p = w->profiler;
  enum { SEEN = 256 }; /* queues remembered; beyond, a queue's metadata may repeat (harmless) */
  struct {
    int pid, track;
  } seen[SEEN];
  int n_seen = 0;
  for (size_t i = 0; i < p->n_device_events; i++) {
    const dt__profile_device_event *e = &p->device_events[i];
    if (!wanted(e, rank)) continue;
    int pid = device_pid(e);
    bool process_seen = false, track_seen = false;
    for (int j = 0; j < n_seen && !track_seen; j++) {
      process_seen |= seen[j].pid == pid;
      track_seen = seen[j].pid == pid && seen[j].track == e->track;
    }
    if (track_seen) continue;
    if (n_seen < SEEN) {
      seen[n_seen].pid = pid;
      seen[n_seen++].track = e->track;
    }
    const dt__profile_device_timer *timer = dt__profile_device_timer_of(e->kind);
    char buf[96];
    if (!process_seen) {
      snprintf(buf, sizeof buf, "%s %d", timer && timer->name ? timer->name : "device", e->device);
      write_metadata(w, "process_name", pid, 0, "name", buf);
      write_metadata(w, "process_labels", pid, 0, "labels",
                     timer && timer->label ? timer->label : "device");
      write_sort_index(w, "process_sort_index", pid, 0, pid);
    }
    snprintf(buf, sizeof buf, "%sstream %d (rank %d)", e->comm_track ? "comm " : "", e->track,
             e->rank);
    write_metadata(w, "thread_name", pid, e->track, "name", buf);
    write_sort_index(w, "thread_sort_index", pid, e->track, e->track);
  }
}

static void write_device_events(writer *w, int rank) {
  const dt_profiler *p = w->profiler;
  for (size_t i = 0; i < p->n_device_events; i++) {
    const dt__profile_device_event *e = &p->device_events[i];
    if (!wanted(e, rank)) continue;
    double ts = (double)e->start_ns / 1000.0, end = (double)e->end_ns / 1000.0;
    separator(w);
    fputs("{\"name\":", w->f);
    write_json_string(w->f, e->name);
    fprintf(w->f,
            ",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":%d,"
            "\"args\":{\"rank\":%d",
            dt__profile_category_name((dt__profile_category)e->category), ts,
            end > ts ? end - ts : 0.0, device_pid(e), e->track, e->rank);
    if (e->bytes >= 0) fprintf(w->f, ",\"bytes\":%" PRId64, e->bytes);
    fputs("}}", w->f);
  }
}

static int compare_threads(const void *a, const void *b) {
  const dt__profile_thread *x = *(const dt__profile_thread *const *)a;
  const dt__profile_thread *y = *(const dt__profile_thread *const *)b;
  if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
  return (x->order > y->order) - (x->order < y->order);
}

/* rank < 0: every rank. */
static dt_status write_trace(const char *fn, const dt_profiler *profiler, int rank,
                             const char *path) {
  if (!profiler || !path) return dt__error(DT_ERR_INVALID, "%s: profiler or path is NULL", fn);
  size_t n = (size_t)profiler->n_threads;
  const dt__profile_thread **threads = dt__alloc(sizeof *threads * (n ? n : 1));
  if (!threads) return dt__error(DT_ERR_NOMEM, "%s: out of memory", fn);
  size_t k = 0;
  for (const dt__profile_thread *t = profiler->threads; t && k < n; t = t->next) {
    if (rank < 0 || t->rank == rank) threads[k++] = t;
  }
  n = k;
  qsort(threads, n, sizeof *threads, compare_threads);

  dt__output_file out;
  FILE *f = dt__output_open(&out, path);
  if (!f) {
    int err = errno;
    dt__free(threads);
    return dt__error(DT_ERR_IO, "%s: cannot open '%s' for writing: %s", fn, path,
                     dt__output_strerror(&out, err));
  }
  char *buffer = dt__alloc(1 << 20);
  if (buffer) setvbuf(f, buffer, _IOFBF, 1 << 20);
  writer w = {.f = f,
              .profiler = profiler,
              .ns_per_tick = dt__profile_ns_per_tick(profiler),
              .first = true};
  fputs("{\"traceEvents\":[\n", f);
  if (n == 0 && rank >= 0) write_rank_metadata(&w, rank, 1);
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && threads[j]->rank == threads[i]->rank) j++;
    write_rank_metadata(&w, threads[i]->rank, (int)(j - i));
    for (size_t t = i; t < j; t++) {
      int base = 2 * (int)(t - i);
      for (const dt__profile_chunk *c = threads[t]->head; c; c = c->next) {
        size_t count = dt__profile_chunk_count(threads[t], c);
        for (size_t e = 0; e < count; e++) {
          write_event(&w, &c->events[e], threads[t]->rank, base + c->events[e].lane);
        }
      }
    }
    i = j;
  }
  write_device_metadata(&w, rank);
  write_device_events(&w, rank);
  fprintf(f,
          "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"producer\":\"libdtensor %s\","
          "\"clock\":\"%s\",\"dropped_events\":%" PRId64 "}}\n",
          dt_version_string(), dt__profile_clock_name(), dt_profiler_dropped_count(profiler));
  dt__free(threads);
  int err = dt__output_close(&out, f, false); /* never leaves half a trace behind */
  dt__free(buffer);
  if (err) return dt__output_close_error(&out, err, fn);
  return DT_OK;
}

dt_status dt_profiler_write_chrome_trace(const dt_profiler *profiler, const char *path) {
  return write_trace("dt_profiler_write_chrome_trace", profiler, -1, path);
}

dt_status dt_profiler_write_chrome_trace_rank(const dt_profiler *profiler, int rank,
                                              const char *path) {
  if (rank < 0) {
    return dt__error(DT_ERR_INVALID, "dt_profiler_write_chrome_trace_rank: rank %d < 0", rank);
  }
  return write_trace("dt_profiler_write_chrome_trace_rank", profiler, rank, path);
}
