/*
 * The Chrome trace format on top of the JSON scanner (json_scanner.c): traceEvents, complete
 * ("X") and metadata ("M") events, pids and tids as numbers or strings. Per complete event it
 * keeps only what the analysis needs (32 bytes).
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/json_scanner.h"
#include "trace/trace_impl.h"

typedef struct reader {
  dt__json_scanner json;
  dt_trace *trace;
  size_t event_index;
} reader;

/* A pid or tid: an integer or a string. */
typedef struct ident {
  bool present, is_string;
  int64_t number;
  dt__json_span text;
} ident;

/* ---- Fields of an event -------------------------------------------------------------------- */

static dt_status parse_ident(reader *r, ident *out, const char *field) {
  const char *at = r->json.p;
  if (r->json.p < r->json.end && *r->json.p == '"') {
    out->is_string = true;
    out->present = true;
    return dt__json_string(&r->json, &out->text);
  }
  if (r->json.p < r->json.end && (*r->json.p == '-' || (*r->json.p >= '0' && *r->json.p <= '9'))) {
    double v;
    bool integral;
    dt_status st = dt__json_number(&r->json, &v, &integral);
    if (st) return st;
    if (!integral || v < -9.2e18 || v > 9.2e18) {
      return dt__json_fail(&r->json, at, "\"%s\" %.*s is not an integer in range", field,
                           (int)(r->json.p - at > 40 ? 40 : r->json.p - at), at);
    }
    out->present = true;
    out->is_string = false;
    out->number = (int64_t)v;
    out->text.s = at;
    out->text.n = (size_t)(r->json.p - at);
    out->text.escaped = false;
    return DT_OK;
  }
  return dt__json_fail(&r->json, at, "\"%s\" must be an integer or a string", field);
}

/* ts and dur: numbers, or strings holding one (some tools write "ts":"12.5"). */
static dt_status parse_time(reader *r, double *out, const char *field) {
  const char *at = r->json.p;
  if (r->json.p < r->json.end && *r->json.p == '"') {
    dt__json_span s;
    dt_status st = dt__json_string(&r->json, &s);
    if (st) return st;
    const char *next;
    if (s.escaped || s.n == 0 || dt__json_number_at(&r->json, s.s, s.s + s.n, &next, out, NULL) ||
        next != s.s + s.n) {
      return dt__json_fail(&r->json, at, "\"%s\" string does not hold a number", field);
    }
    return DT_OK;
  }
  if (r->json.p < r->json.end && (*r->json.p == '-' || (*r->json.p >= '0' && *r->json.p <= '9'))) {
    return dt__json_number(&r->json, out, NULL);
  }
  return dt__json_fail(&r->json, at, "\"%s\" must be a number", field);
}

/* ---- Processes and lanes ------------------------------------------------------------------ */

static size_t map_slot(const dt__trace_map *m, uint64_t key, uint64_t aux) {
  size_t mask = m->capacity - 1;
  size_t i = (size_t)dt__hash_mix(key, aux) & mask;
  while (m->entries[i].index >= 0 && (m->entries[i].key != key || m->entries[i].aux != aux)) {
    i = (i + 1) & mask;
  }
  return i;
}

static bool map_reserve(dt__trace_map *m) {
  if (m->capacity && (m->count + 1) * 2 <= m->capacity) return true;
  size_t capacity = m->capacity ? m->capacity * 2 : 64;
  dt__trace_map_entry *old = m->entries;
  size_t old_capacity = m->capacity;
  m->entries = dt__alloc(capacity * sizeof *m->entries);
  if (!m->entries) {
    m->entries = old;
    return false;
  }
  m->capacity = capacity;
  for (size_t i = 0; i < capacity; i++) m->entries[i].index = -1;
  for (size_t i = 0; i < old_capacity; i++) {
    if (old[i].index >= 0) m->entries[map_slot(m, old[i].key, old[i].aux)] = old[i];
  }
  dt__free(old);
  return true;
}

static void ident_key(reader *r, const ident *id, uint64_t *key, uint64_t *aux) {
  if (!id->present) {
    *key = 0;
    *aux = 0;
  } else if (id->is_string) {
    const char *text = "";
    size_t n = 0;
    /* The scratch buffer cannot fail to grow here without a NOMEM already reported. */
    if (dt__json_plain_text(&r->json, id->text, &text, &n)) {
      text = id->text.s;
      n = id->text.n;
    }
    *key = dt__hash_bytes(text, n);
    *aux = 1;
  } else {
    *key = (uint64_t)id->number;
    *aux = 0;
  }
}

static dt_status process_index(reader *r, const ident *pid, uint32_t *out) {
  dt_trace *t = r->trace;
  uint64_t key, aux;
  ident_key(r, pid, &key, &aux);
  if (!map_reserve(&t->process_map)) return dt__error(DT_ERR_NOMEM, "out of memory");
  size_t slot = map_slot(&t->process_map, key, aux);
  if (t->process_map.entries[slot].index >= 0) {
    *out = (uint32_t)t->process_map.entries[slot].index;
    return DT_OK;
  }
  if (!dt__trace_grow((void **)&t->processes, &t->cap_processes, t->n_processes + 1,
                      sizeof *t->processes)) {
    return dt__error(DT_ERR_NOMEM, "out of memory");
  }
  dt__trace_process *p = &t->processes[t->n_processes];
  memset(p, 0, sizeof *p);
  p->pid_text = pid->present ? dt__json_copy_string(pid->text)
                             : dt__json_copy_string((dt__json_span){"0", 1, false});
  if (!p->pid_text) return dt__error(DT_ERR_NOMEM, "out of memory");
  p->pid_number = pid->present && !pid->is_string ? pid->number : 0;
  t->process_map.entries[slot] = (dt__trace_map_entry){key, aux, (int64_t)t->n_processes};
  t->process_map.count++;
  *out = (uint32_t)t->n_processes++;
  return DT_OK;
}

static dt_status lane_index(reader *r, uint32_t process, const ident *tid, uint32_t *out) {
  dt_trace *t = r->trace;
  uint64_t key, aux;
  ident_key(r, tid, &key, &aux);
  aux |= (uint64_t)process << 1;
  if (!map_reserve(&t->lane_map)) return dt__error(DT_ERR_NOMEM, "out of memory");
  size_t slot = map_slot(&t->lane_map, key, aux);
  if (t->lane_map.entries[slot].index >= 0) {
    *out = (uint32_t)t->lane_map.entries[slot].index;
    return DT_OK;
  }
  if (!dt__trace_grow((void **)&t->lanes, &t->cap_lanes, t->n_lanes + 1, sizeof *t->lanes)) {
    return dt__error(DT_ERR_NOMEM, "out of memory");
  }
  dt__trace_lane *l = &t->lanes[t->n_lanes];
  memset(l, 0, sizeof *l);
  l->process = process;
  l->tid_text = tid->present ? dt__json_copy_string(tid->text)
                             : dt__json_copy_string((dt__json_span){"0", 1, false});
  if (!l->tid_text) return dt__error(DT_ERR_NOMEM, "out of memory");
  l->tid_number = tid->present && !tid->is_string ? tid->number : 0;
  t->processes[process].n_lanes++;
  t->lane_map.entries[slot] = (dt__trace_map_entry){key, aux, (int64_t)t->n_lanes};
  t->lane_map.count++;
  *out = (uint32_t)t->n_lanes++;
  return DT_OK;
}

/* ---- Metadata ------------------------------------------------------------------------------ */

/* Reads args.<want> of a metadata event (re-reading the args object the event skipped): a
 * string, or for labels an array of strings joined with ','. */
static dt_status metadata_value(reader *r, const char *args_at, const char *event_at,
                                const char *meta, const char *want, char **out) {
  *out = NULL;
  if (!args_at) return dt__json_fail(&r->json, event_at, "%s metadata has no \"args\"", meta);
  const char *saved = r->json.p;
  r->json.p = args_at;
  dt_status st = DT_OK;
  if (*r->json.p != '{') {
    st = dt__json_fail(&r->json, args_at, "%s metadata: \"args\" must be an object", meta);
    goto done;
  }
  r->json.p++;
  bool first = true;
  dt__json_span key;
  while (dt__json_next_key(&r->json, &first, &key, &st)) {
    if (!dt__json_span_equals(key, want)) {
      if ((st = dt__json_skip_value(&r->json))) goto done;
      continue;
    }
    const char *at = r->json.p;
    char *value = NULL;
    if (r->json.p < r->json.end && *r->json.p == '"') {
      dt__json_span s;
      if ((st = dt__json_string(&r->json, &s))) goto done;
      value = dt__json_copy_string(s);
      if (!value) {
        st = dt__error(DT_ERR_NOMEM, "out of memory");
        goto done;
      }
    } else if (r->json.p < r->json.end && *r->json.p == '[' && strcmp(want, "labels") == 0) {
      /* An array of label strings, joined with ','. */
      const char *list_start = r->json.p;
      if ((st = dt__json_skip_value(&r->json))) goto done;
      value = dt__alloc((size_t)(r->json.p - list_start) + 1);
      if (!value) {
        st = dt__error(DT_ERR_NOMEM, "out of memory");
        goto done;
      }
      size_t n = 0;
      const char *after = r->json.p;
      r->json.p = list_start + 1;
      for (;;) {
        dt__json_skip_ws(&r->json);
        if (*r->json.p == ']') break;
        if (*r->json.p == ',') {
          r->json.p++;
          continue;
        }
        if (*r->json.p != '"') {
          dt__free(value);
          st = dt__json_fail(&r->json, r->json.p, "%s metadata: labels must be strings", meta);
          goto done;
        }
        dt__json_span s;
        if ((st = dt__json_string(&r->json, &s))) {
          dt__free(value);
          goto done;
        }
        if (n) value[n++] = ',';
        if (s.escaped) {
          n += dt__json_unescape(s, value + n);
        } else {
          memcpy(value + n, s.s, s.n);
          n += s.n;
        }
      }
      value[n] = '\0';
      r->json.p = after;
    } else {
      st = dt__json_fail(&r->json, at, "%s metadata: args.%s must be a string", meta, want);
      goto done;
    }
    dt__free(*out); /* a repeated key: the last one wins */
    *out = value;
  }
  if (st) goto done;
  if (!*out) st = dt__json_fail(&r->json, args_at, "%s metadata has no args.%s", meta, want);
done:
  if (st) {
    dt__free(*out);
    *out = NULL;
  }
  r->json.p = saved;
  return st;
}

/* ---- Events -------------------------------------------------------------------------------- */

typedef struct fields {
  dt__json_span name, ph, cat;
  bool has_name, has_ph, has_cat, has_ts, has_dur;
  double ts, dur;
  ident pid, tid;
  const char *args_at;
} fields;

static dt_status add_complete(reader *r, const fields *f, const char *at) {
  if (!f->has_ts) return dt__json_fail(&r->json, at, "complete event (ph \"X\") has no \"ts\"");
  if (!f->has_dur) return dt__json_fail(&r->json, at, "complete event (ph \"X\") has no \"dur\"");
  if (!f->pid.present)
    return dt__json_fail(&r->json, at, "complete event (ph \"X\") has no \"pid\"");
  if (f->dur < 0)
    return dt__json_fail(&r->json, at, "complete event has a negative \"dur\" (%g)", f->dur);
  /* Bounded times keep every difference and union the analysis computes finite: unbounded,
   * ts -1e308 with dur 1e308 and another event at 1e308 make the dt__json_span infinite and the
   * utilization NaN. */
  double end = f->ts + f->dur;
  if (!(fabs(f->ts) <= DT_TRACE_MAX_TIME_US && fabs(end) <= DT_TRACE_MAX_TIME_US)) {
    return dt__json_fail(
        &r->json, at,
        "complete event time out of range: \"ts\" %g, \"ts\" + \"dur\" %g (both must be "
        "within +-%g us)",
        f->ts, end, DT_TRACE_MAX_TIME_US);
  }
  dt_trace *t = r->trace;
  uint32_t process, lane;
  dt_status st = process_index(r, &f->pid, &process);
  if (st) return st;
  if ((st = lane_index(r, process, &f->tid, &lane))) return st;
  uint32_t flags = 0;
  if (f->has_name) {
    const char *text = "";
    size_t n = 0;
    if ((st = dt__json_plain_text(&r->json, f->name, &text, &n))) return st;
    if (dt__trace_is_matrix_span(text, n)) flags |= DT__TRACE_MATRIX;
    if (dt__trace_contains(text, n, "nccl")) flags |= DT__TRACE_NCCL;
  }
  if (f->has_cat && dt__json_span_equals(f->cat, "user_annotation")) flags |= DT__TRACE_USER;
  if (f->has_cat && dt__json_span_equals(f->cat, "collective")) flags |= DT__TRACE_COLLECTIVE;
  if (f->has_cat && dt__json_span_equals(f->cat, "kernel")) flags |= DT__TRACE_KERNEL;
  if (t->n_events == t->cap_events &&
      !dt__trace_grow((void **)&t->events, &t->cap_events, t->n_events + 1, sizeof *t->events)) {
    return dt__error(DT_ERR_NOMEM, "out of memory (%zu events)", t->n_events);
  }
  t->events[t->n_events++] = (dt__trace_event){
      .start = f->ts, .end = end, .process = process, .lane = lane, .flags = flags};
  t->processes[process].events++;
  t->lanes[lane].events++;
  return DT_OK;
}

static dt_status add_metadata(reader *r, const fields *f, const char *at) {
  if (!f->has_name) return dt__json_fail(&r->json, at, "metadata event (ph \"M\") has no \"name\"");
  bool process_name = dt__json_span_equals(f->name, "process_name");
  bool labels = !process_name && dt__json_span_equals(f->name, "process_labels");
  bool thread_name = !process_name && !labels && dt__json_span_equals(f->name, "thread_name");
  if (!process_name && !labels && !thread_name) return DT_OK;
  const char *meta = process_name ? "process_name" : labels ? "process_labels" : "thread_name";
  if (!f->pid.present) return dt__json_fail(&r->json, at, "%s metadata has no \"pid\"", meta);
  char *value;
  dt_status st = metadata_value(r, f->args_at, at, meta, labels ? "labels" : "name", &value);
  if (st) return st;
  uint32_t process;
  if ((st = process_index(r, &f->pid, &process))) {
    dt__free(value);
    return st;
  }
  dt_trace *t = r->trace;
  char **slot;
  if (thread_name) {
    uint32_t lane;
    if ((st = lane_index(r, process, &f->tid, &lane))) {
      dt__free(value);
      return st;
    }
    slot = &t->lanes[lane].name;
  } else {
    slot = process_name ? &t->processes[process].name : &t->processes[process].labels;
  }
  dt__free(*slot);
  *slot = value;
  return DT_OK;
}

/* One element of traceEvents, at '{'. */
static dt_status parse_event(reader *r) {
  const char *at = r->json.p;
  fields f = {0};
  r->json.p++;
  bool first = true;
  dt_status st = DT_OK;
  dt__json_span key;
  while (dt__json_next_key(&r->json, &first, &key, &st)) {
    const char *k = key.s;
    size_t n = key.escaped ? 0 : key.n; /* escaped keys are not ours: skip them */
    if (n == 2 && memcmp(k, "ph", 2) == 0) {
      if (r->json.p >= r->json.end || *r->json.p != '"')
        return dt__json_fail(&r->json, r->json.p, "\"ph\" must be a string");
      if ((st = dt__json_string(&r->json, &f.ph))) return st;
      f.has_ph = true;
    } else if (n == 4 && memcmp(k, "name", 4) == 0) {
      if (r->json.p >= r->json.end || *r->json.p != '"')
        return dt__json_fail(&r->json, r->json.p, "\"name\" must be a string");
      if ((st = dt__json_string(&r->json, &f.name))) return st;
      f.has_name = true;
    } else if (n == 3 && memcmp(k, "cat", 3) == 0) {
      if (r->json.p >= r->json.end || *r->json.p != '"')
        return dt__json_fail(&r->json, r->json.p, "\"cat\" must be a string");
      if ((st = dt__json_string(&r->json, &f.cat))) return st;
      f.has_cat = true;
    } else if (n == 2 && memcmp(k, "ts", 2) == 0) {
      if ((st = parse_time(r, &f.ts, "ts"))) return st;
      f.has_ts = true;
    } else if (n == 3 && memcmp(k, "dur", 3) == 0) {
      if ((st = parse_time(r, &f.dur, "dur"))) return st;
      f.has_dur = true;
    } else if (n == 3 && memcmp(k, "pid", 3) == 0) {
      if ((st = parse_ident(r, &f.pid, "pid"))) return st;
    } else if (n == 3 && memcmp(k, "tid", 3) == 0) {
      if ((st = parse_ident(r, &f.tid, "tid"))) return st;
    } else if (n == 4 && memcmp(k, "args", 4) == 0) {
      f.args_at = r->json.p;
      if ((st = dt__json_skip_value(&r->json))) return st;
    } else if ((st = dt__json_skip_value(&r->json))) {
      return st;
    }
  }
  if (st) return st;
  if (!f.has_ph)
    return dt__json_fail(&r->json, at, "event (traceEvents[%zu]) has no \"ph\"", r->event_index);
  if (f.ph.n == 1 && f.ph.s[0] == 'X') {
    st = add_complete(r, &f, at);
  } else if (f.ph.n == 1 && f.ph.s[0] == 'M') {
    st = add_metadata(r, &f, at);
  }
  return st;
}

/* The traceEvents array at '['. A bare top-level array may end early (the format lets a
 * crashing writer leave out the closing bracket). */
static dt_status parse_events(reader *r, bool may_be_truncated) {
  r->json.p++;
  dt_status st;
  dt__json_skip_ws(&r->json);
  if (r->json.p >= r->json.end) {
    return may_be_truncated ? DT_OK
                            : dt__json_fail(&r->json, r->json.p, "unterminated traceEvents array");
  }
  if (*r->json.p == ']') {
    r->json.p++;
    return DT_OK;
  }
  for (;;) {
    dt__json_skip_ws(&r->json);
    if (r->json.p >= r->json.end && may_be_truncated) return DT_OK;
    if (r->json.p >= r->json.end || *r->json.p != '{') {
      char buf[32];
      return dt__json_fail(&r->json, r->json.p, "traceEvents[%zu] is not an object (found %s)",
                           r->event_index, dt__json_describe(&r->json, r->json.p, buf, sizeof buf));
    }
    if ((st = parse_event(r))) return st;
    r->event_index++;
    dt__json_skip_ws(&r->json);
    if (r->json.p >= r->json.end) {
      return may_be_truncated
                 ? DT_OK
                 : dt__json_fail(&r->json, r->json.p, "unterminated traceEvents array");
    }
    if (*r->json.p == ']') {
      r->json.p++;
      return DT_OK;
    }
    if (*r->json.p != ',') return dt__json_expected(&r->json, "',' or ']' after an event");
    r->json.p++;
  }
}

static dt_status parse_trace(reader *r) {
  dt_status st = DT_OK;
  if (r->json.end - r->json.p >= 3 && memcmp(r->json.p, "\xef\xbb\xbf", 3) == 0)
    r->json.p += 3; /* UTF-8 BOM */
  dt__json_skip_ws(&r->json);
  if (r->json.p >= r->json.end)
    return dt__json_fail(&r->json, r->json.p, "empty input: a trace is a JSON object or array");
  if (*r->json.p == '[') {
    if ((st = parse_events(r, true))) return st;
  } else if (*r->json.p == '{') {
    r->json.p++;
    bool first = true, found = false;
    dt__json_span key;
    while (dt__json_next_key(&r->json, &first, &key, &st)) {
      if (dt__json_span_equals(key, "traceEvents")) {
        if (r->json.p >= r->json.end || *r->json.p != '[')
          return dt__json_fail(&r->json, r->json.p, "\"traceEvents\" must be an array");
        if ((st = parse_events(r, false))) return st;
        found = true;
      } else if ((st = dt__json_skip_value(&r->json))) {
        return st;
      }
    }
    if (st) return st;
    if (!found)
      return dt__json_fail(&r->json, r->json.begin,
                           "the trace object has no \"traceEvents\" array");
  } else {
    return dt__json_expected(&r->json, "'{' or '[' at the start of a trace");
  }
  dt__json_skip_ws(&r->json);
  if (r->json.p < r->json.end)
    return dt__json_expected(&r->json, "the end of the input after the trace");
  return DT_OK;
}

dt_status dt_trace_read_memory(const char *data, size_t size, dt_trace **out) {
  if (!out) return dt__error(DT_ERR_INVALID, "dt_trace_read_memory: out is NULL");
  *out = NULL;
  if (!data && size) return dt__error(DT_ERR_INVALID, "dt_trace_read_memory: data is NULL");
  dt_trace *t = dt__calloc(sizeof *t);
  if (!t) return dt__error(DT_ERR_NOMEM, "dt_trace_read_memory: out of memory");
  const char *text = data ? data : "";
  reader r = {.json = {.begin = text, .p = text, .end = text + size}, .trace = t};
  dt_status st = parse_trace(&r);
  dt__free(r.json.scratch);
  if (!st) st = dt__trace_finish(t);
  if (st) {
    dt_trace_destroy(t);
    return st;
  }
  *out = t;
  return DT_OK;
}

/* True once the bytes read so far show that the input cannot be a trace: its first byte
 * after a BOM and whitespace is neither '{' nor '['. The parser's error for that byte does
 * not depend on what follows, so reading can stop there (an endless /dev/zero fails at once).
 * *scanned keeps the whitespace already skipped between calls. */
static bool cannot_be_a_trace(const char *data, size_t n, size_t *scanned) {
  if (n < 3) return false; /* a BOM may still be arriving */
  size_t i = *scanned;
  if (i == 0 && memcmp(data, "\xef\xbb\xbf", 3) == 0) i = 3;
  while (i < n && (data[i] == ' ' || data[i] == '\n' || data[i] == '\r' || data[i] == '\t')) i++;
  *scanned = i;
  return i < n && data[i] != '{' && data[i] != '[';
}

/* dt_trace_read_file and _ex; fn names the public function in messages. */
static dt_status read_file(const char *fn, const char *path, uint64_t max_bytes, dt_trace **out) {
  if (!out) return dt__error(DT_ERR_INVALID, "%s: out is NULL", fn);
  *out = NULL;
  if (!path) return dt__error(DT_ERR_INVALID, "%s: path is NULL", fn);
  if (max_bytes == 0) max_bytes = DT_TRACE_DEFAULT_MAX_BYTES;
  if (max_bytes > SIZE_MAX / 2) max_bytes = SIZE_MAX / 2;
  size_t limit = (size_t)max_bytes;
  /* O_NONBLOCK: a FIFO with no writer must not block the open (it once hung `dtensor trace
   * stats` forever). Cleared before reading, so a pipe whose writer is connected is read as it
   * arrives, and one without a writer reads end of file at once (refused below). */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return dt__error(DT_ERR_IO, "%s: cannot open '%s': %s", fn, path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    return dt__error(DT_ERR_IO, "%s: cannot inspect '%s': %s", fn, path, strerror(err));
  }
  if (S_ISDIR(st.st_mode)) {
    close(fd);
    return dt__error(DT_ERR_IO, "%s: '%s' is a directory, not a trace", fn, path);
  }
  int flags = fcntl(fd, F_GETFL);
  FILE *f = flags >= 0 && fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == 0 ? fdopen(fd, "rb") : NULL;
  if (!f) {
    int err = errno;
    close(fd);
    return dt__error(DT_ERR_IO, "%s: cannot read '%s': %s", fn, path, strerror(err));
  }
  /* A regular file's size is known: one allocation, and a file over the limit is refused
   * before reading. Pipes and devices are read in growing blocks up to the limit. */
  size_t cap = 1 << 20;
  if (S_ISREG(st.st_mode)) {
    if ((uint64_t)st.st_size > limit) {
      fclose(f);
      return dt__error(DT_ERR_INVALID,
                       "%s: '%s' is %lld bytes, more than the limit of %zu "
                       "(max_bytes)",
                       fn, path, (long long)st.st_size, limit);
    }
    /* One more byte sees the end without growing; files that report size 0 (procfs) grow. */
    cap = (size_t)st.st_size + 1 > 4096 ? (size_t)st.st_size + 1 : 4096;
  }
  if (cap > limit + 1) cap = limit + 1;
  size_t n = 0, scanned = 0;
  char *data = dt__alloc(cap);
  dt_status st_read = DT_OK;
  while (data) {
    if (n == cap) {
      if (n > limit) break;
      size_t grown = cap > (limit + 1) / 2 ? limit + 1 : cap * 2;
      char *bigger = dt__alloc(grown);
      if (bigger) memcpy(bigger, data, n);
      dt__free(data);
      data = bigger;
      cap = grown;
      if (!data) break;
    }
    size_t got = fread(data + n, 1, cap - n, f);
    n += got;
    if (got == 0 || cannot_be_a_trace(data, n, &scanned)) break;
  }
  if (!data) {
    st_read = dt__error(DT_ERR_NOMEM, "%s: '%s': out of memory", fn, path);
  } else if (ferror(f)) {
    st_read = dt__error(DT_ERR_IO, "%s: reading '%s' failed", fn, path);
  } else if (n == 0 && S_ISFIFO(st.st_mode)) {
    st_read = dt__error(DT_ERR_IO, "%s: '%s' is a FIFO or pipe with no writer (nothing to read)",
                        fn, path);
  } else if (n > limit) {
    st_read = dt__error(DT_ERR_INVALID,
                        "%s: '%s' holds more than the limit of %zu bytes "
                        "(max_bytes)",
                        fn, path, limit);
  }
  fclose(f);
  if (!st_read) {
    st_read = dt_trace_read_memory(data, n, out);
    if (st_read) {
      char prefix[600];
      snprintf(prefix, sizeof prefix, "%s: '%s'", fn, path);
      dt__error_prefix(prefix);
    }
  }
  dt__free(data);
  return st_read;
}

dt_status dt_trace_read_file_ex(const char *path, uint64_t max_bytes, dt_trace **out) {
  return read_file("dt_trace_read_file_ex", path, max_bytes, out);
}

dt_status dt_trace_read_file(const char *path, dt_trace **out) {
  return read_file("dt_trace_read_file", path, 0, out);
}
