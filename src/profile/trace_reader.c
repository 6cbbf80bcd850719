/*
 * Streaming reader of Chrome trace JSON.
 *
 * cJSON would build a tree of every value first: a million-event trace is ~10 million nodes,
 * one malloc each, several seconds and gigabytes before the analysis starts. This reader
 * walks the text once and keeps, per complete event, only what the analysis needs (32
 * bytes). It validates full JSON grammar as it goes, bounds-checks every byte (the input need
 * not be NUL-terminated), never recurses (nesting is tracked on a fixed stack, 512 deep), and
 * reports the first problem with its byte offset.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "profile/trace_impl.h"

#define MAX_DEPTH 512
#define MAX_NUMBER_LENGTH 512

typedef struct reader {
  const char *begin, *p, *end;
  dt_trace *trace;
  size_t event_index;
  char *scratch; /* unescaped names */
  size_t scratch_cap;
} reader;

/* A string token: raw bytes between the quotes. */
typedef struct span {
  const char *s;
  size_t n;
  bool escaped;
} span;

/* A pid or tid: an integer or a string. */
typedef struct ident {
  bool present, is_string;
  int64_t number;
  span text;
} ident;

DT_PRINTF(3, 4) static dt_status fail(reader *r, const char *at, const char *format, ...) {
  char message[512];
  va_list args;
  va_start(args, format);
  vsnprintf(message, sizeof message, format, args);
  va_end(args);
  return dt__error(DT_ERR_INVALID, "byte %zu: %s", (size_t)(at - r->begin), message);
}

static inline void skip_ws(reader *r) {
  while (r->p < r->end && (*r->p == ' ' || *r->p == '\n' || *r->p == '\r' || *r->p == '\t')) {
    r->p++;
  }
}

/* Describes the byte at p for error messages. */
static const char *describe(const reader *r, const char *p, char *buf, size_t size) {
  if (p >= r->end) return "the end of the input";
  unsigned char c = (unsigned char)*p;
  if (c >= 0x20 && c < 0x7f) {
    snprintf(buf, size, "'%c'", c);
  } else {
    snprintf(buf, size, "byte 0x%02x", c);
  }
  return buf;
}

static dt_status expected(reader *r, const char *what) {
  char buf[32];
  return fail(r, r->p, "expected %s, found %s", what, describe(r, r->p, buf, sizeof buf));
}

static inline int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Reads a string token at r->p (which is '"'), validating escapes. */
static dt_status parse_string(reader *r, span *out) {
  const char *open = r->p++;
  const char *start = r->p;
  bool escaped = false;
  for (;;) {
    while (r->p < r->end && *r->p != '"' && *r->p != '\\' && (unsigned char)*r->p >= 0x20) {
      r->p++;
    }
    if (r->p >= r->end) return fail(r, open, "unterminated string");
    char c = *r->p;
    if (c == '"') break;
    if (c == '\\') {
      escaped = true;
      if (r->end - r->p < 2) return fail(r, open, "unterminated string");
      char e = r->p[1];
      if (e == 'u') {
        if (r->end - r->p < 6) return fail(r, r->p, "truncated \\u escape");
        for (int i = 2; i < 6; i++) {
          if (hex_value(r->p[i]) < 0) return fail(r, r->p, "bad \\u escape (4 hex digits)");
        }
        r->p += 6;
      } else if (strchr("\"\\/bfnrt", e) && e) {
        r->p += 2;
      } else {
        return fail(r, r->p, "bad escape '\\%c' in string", e >= 0x20 && e < 0x7f ? e : '?');
      }
      continue;
    }
    return fail(r, r->p, "control character 0x%02x in string (must be escaped)", (unsigned char)c);
  }
  out->s = start;
  out->n = (size_t)(r->p - start);
  out->escaped = escaped;
  r->p++;
  return DT_OK;
}

static size_t put_utf8(char *out, unsigned cp) {
  if (cp < 0x80) {
    out[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    out[0] = (char)(0xc0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = (char)(0xe0 | (cp >> 12));
    out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[2] = (char)(0x80 | (cp & 0x3f));
    return 3;
  }
  out[0] = (char)(0xf0 | (cp >> 18));
  out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
  out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
  out[3] = (char)(0x80 | (cp & 0x3f));
  return 4;
}

static unsigned read_hex4(const char *s) {
  unsigned v = 0;
  for (int i = 0; i < 4; i++) v = v * 16 + (unsigned)hex_value(s[i]);
  return v;
}

/* Unescapes a validated string token into out (room for sp.n + 1 bytes: escapes never
 * lengthen a string), NUL-terminated; returns the length. NUL characters (\u0000) become
 * U+FFFD so that the result is a C string. */
static size_t unescape(span sp, char *out) {
  size_t n = 0;
  const char *s = sp.s, *end = sp.s + sp.n;
  while (s < end) {
    if (*s != '\\') {
      out[n++] = *s++;
      continue;
    }
    char e = s[1];
    s += 2;
    switch (e) {
    case 'b': out[n++] = '\b'; break;
    case 'f': out[n++] = '\f'; break;
    case 'n': out[n++] = '\n'; break;
    case 'r': out[n++] = '\r'; break;
    case 't': out[n++] = '\t'; break;
    case 'u': {
      unsigned cp = read_hex4(s);
      s += 4;
      if (cp >= 0xd800 && cp < 0xdc00 && end - s >= 6 && s[0] == '\\' && s[1] == 'u') {
        unsigned low = read_hex4(s + 2);
        if (low >= 0xdc00 && low < 0xe000) {
          cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
          s += 6;
        }
      }
      if (cp == 0 || (cp >= 0xd800 && cp < 0xe000)) cp = 0xfffd;
      n += put_utf8(out + n, cp); /* at most 4 bytes for 6 (or 12) escaped ones */
      break;
    }
    default: out[n++] = e; break; /* \" \\ \/ */
    }
  }
  out[n] = '\0';
  return n;
}

/* A heap copy of a string token, unescaped. */
static char *copy_string(span sp) {
  char *out = dt__alloc(sp.n + 1);
  if (!out) return NULL;
  if (sp.escaped) {
    unescape(sp, out);
  } else {
    memcpy(out, sp.s, sp.n);
    out[sp.n] = '\0';
  }
  return out;
}

/* The bytes of a string token unescaped, in the reader's scratch buffer when needed. */
static dt_status plain_text(reader *r, span sp, const char **text, size_t *length) {
  if (!sp.escaped) {
    *text = sp.s;
    *length = sp.n;
    return DT_OK;
  }
  if (sp.n + 1 > r->scratch_cap) {
    size_t cap = sp.n + 1 > 256 ? sp.n + 1 : 256;
    char *buf = dt__alloc(cap);
    if (!buf) return dt__error(DT_ERR_NOMEM, "out of memory");
    dt__free(r->scratch);
    r->scratch = buf;
    r->scratch_cap = cap;
  }
  *length = unescape(sp, r->scratch);
  *text = r->scratch;
  return DT_OK;
}

static bool span_equals(span sp, const char *text) {
  size_t n = strlen(text);
  if (!sp.escaped) return sp.n == n && memcmp(sp.s, text, n) == 0;
  char buf[64];
  if (sp.n >= sizeof buf) return false;
  size_t m = unescape(sp, buf);
  return m == n && memcmp(buf, text, n) == 0;
}

static const double powers_of_ten[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                       1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                       1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* Parses a JSON number in [p, end) that must span the whole range when `whole` (numbers in
 * strings) and sets *next past it. Exact: up to 15 significant digits and a power of ten up to
 * 22 convert with one correctly rounded operation; anything else goes through strtod. */
static dt_status parse_number_at(reader *r, const char *p, const char *end, const char **next,
                                 double *out, bool *integral) {
  const char *start = p;
  bool negative = false;
  if (p < end && *p == '-') {
    negative = true;
    p++;
  }
  if (p >= end || *p < '0' || *p > '9') return fail(r, start, "malformed number");
  uint64_t mantissa = 0;
  int digits = 0, exponent = 0;
  bool is_integral = true;
  if (*p == '0') {
    p++;
  } else {
    while (p < end && *p >= '0' && *p <= '9') {
      if (digits < 19) {
        mantissa = mantissa * 10 + (uint64_t)(*p - '0');
        if (mantissa) digits++;
      } else {
        exponent++;
      }
      p++;
    }
  }
  if (p < end && *p == '.') {
    p++;
    if (p >= end || *p < '0' || *p > '9')
      return fail(r, start, "malformed number (digit after '.')");
    while (p < end && *p >= '0' && *p <= '9') {
      if (*p != '0') is_integral = false;
      if (digits < 19) {
        mantissa = mantissa * 10 + (uint64_t)(*p - '0');
        if (mantissa) digits++;
        exponent--;
      }
      p++;
    }
  }
  bool has_exponent = false;
  if (p < end && (*p == 'e' || *p == 'E')) {
    has_exponent = true;
    p++;
    if (p < end && (*p == '+' || *p == '-')) p++;
    if (p >= end || *p < '0' || *p > '9') return fail(r, start, "malformed number (exponent)");
    while (p < end && *p >= '0' && *p <= '9') p++;
  }
  size_t length = (size_t)(p - start);
  double value;
  if (!has_exponent && digits <= 15 && exponent >= -22) {
    value = (double)mantissa;
    value = exponent < 0 ? value / powers_of_ten[-exponent] : value;
    if (negative) value = -value;
  } else {
    if (length > MAX_NUMBER_LENGTH)
      return fail(r, start, "number longer than %d characters", MAX_NUMBER_LENGTH);
    char buf[MAX_NUMBER_LENGTH + 1];
    memcpy(buf, start, length);
    buf[length] = '\0';
    value = strtod(buf, NULL);
    is_integral = value == floor(value);
  }
  if (!isfinite(value))
    return fail(r, start, "number %.*s is out of range", (int)(length > 40 ? 40 : length), start);
  *next = p;
  *out = value;
  if (integral) *integral = is_integral;
  return DT_OK;
}

static dt_status parse_number(reader *r, double *out, bool *integral) {
  return parse_number_at(r, r->p, r->end, &r->p, out, integral);
}

static dt_status parse_literal(reader *r) {
  static const char *const words[] = {"true", "false", "null"};
  for (int i = 0; i < 3; i++) {
    size_t n = strlen(words[i]);
    if ((size_t)(r->end - r->p) >= n && memcmp(r->p, words[i], n) == 0) {
      r->p += n;
      return DT_OK;
    }
  }
  return expected(r, "a JSON value");
}

/* Skips one value of any kind without recursion; containers nest at most MAX_DEPTH deep. */
static dt_status skip_value(reader *r) {
  char stack[MAX_DEPTH]; /* '{' or '[' per open container */
  int depth = 0;
  dt_status st;
  for (;;) {
    /* A value starts here. */
    skip_ws(r);
    if (r->p >= r->end) return expected(r, "a JSON value");
    char c = *r->p;
    if (c == '{' || c == '[') {
      if (depth >= MAX_DEPTH) return fail(r, r->p, "nesting deeper than %d", MAX_DEPTH);
      stack[depth++] = c;
      r->p++;
      skip_ws(r);
      if (r->p < r->end && *r->p == (c == '{' ? '}' : ']')) {
        r->p++;
        depth--;
      } else if (c == '{') {
        if (r->p >= r->end || *r->p != '"') return expected(r, "a string key or '}'");
        span key;
        if ((st = parse_string(r, &key))) return st;
        skip_ws(r);
        if (r->p >= r->end || *r->p != ':') return expected(r, "':' after an object key");
        r->p++;
        continue;
      } else {
        continue;
      }
    } else if (c == '"') {
      span s;
      if ((st = parse_string(r, &s))) return st;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      double v;
      if ((st = parse_number(r, &v, NULL))) return st;
    } else if ((st = parse_literal(r))) {
      return st;
    }
    /* A value ended: close containers or go on to the next element. */
    for (;;) {
      if (depth == 0) return DT_OK;
      skip_ws(r);
      if (r->p >= r->end)
        return fail(r, r->p, "unexpected end of input inside %s",
                    stack[depth - 1] == '{' ? "an object" : "an array");
      char close = stack[depth - 1] == '{' ? '}' : ']';
      if (*r->p == close) {
        r->p++;
        depth--;
        continue;
      }
      if (*r->p != ',') {
        return expected(r, stack[depth - 1] == '{' ? "',' or '}' in an object"
                                                   : "',' or ']' in an array");
      }
      r->p++;
      if (stack[depth - 1] == '{') {
        skip_ws(r);
        if (r->p >= r->end || *r->p != '"') return expected(r, "a string key");
        span key;
        if ((st = parse_string(r, &key))) return st;
        skip_ws(r);
        if (r->p >= r->end || *r->p != ':') return expected(r, "':' after an object key");
        r->p++;
      }
      break;
    }
  }
}

/* Object iteration: call first with *first = true at '{'. Returns 1 with the key, 0 at '}'. */
static dt_status next_key(reader *r, bool *first, span *key, int *has) {
  skip_ws(r);
  if (r->p >= r->end) return fail(r, r->p, "unexpected end of input inside an object");
  if (*first) {
    *first = false;
    if (*r->p == '}') {
      r->p++;
      *has = 0;
      return DT_OK;
    }
  } else {
    if (*r->p == '}') {
      r->p++;
      *has = 0;
      return DT_OK;
    }
    if (*r->p != ',') return expected(r, "',' or '}' in an object");
    r->p++;
    skip_ws(r);
  }
  if (r->p >= r->end || *r->p != '"') return expected(r, "a string key");
  dt_status st = parse_string(r, key);
  if (st) return st;
  skip_ws(r);
  if (r->p >= r->end || *r->p != ':') return expected(r, "':' after an object key");
  r->p++;
  skip_ws(r);
  *has = 1;
  return DT_OK;
}

/* ---- Fields of an event -------------------------------------------------------------------- */

static dt_status parse_ident(reader *r, ident *out, const char *field) {
  const char *at = r->p;
  if (r->p < r->end && *r->p == '"') {
    out->is_string = true;
    out->present = true;
    return parse_string(r, &out->text);
  }
  if (r->p < r->end && (*r->p == '-' || (*r->p >= '0' && *r->p <= '9'))) {
    double v;
    bool integral;
    dt_status st = parse_number(r, &v, &integral);
    if (st) return st;
    if (!integral || v < -9.2e18 || v > 9.2e18) {
      return fail(r, at, "\"%s\" %.*s is not an integer in range", field,
                  (int)(r->p - at > 40 ? 40 : r->p - at), at);
    }
    out->present = true;
    out->is_string = false;
    out->number = (int64_t)v;
    out->text.s = at;
    out->text.n = (size_t)(r->p - at);
    out->text.escaped = false;
    return DT_OK;
  }
  return fail(r, at, "\"%s\" must be an integer or a string", field);
}

/* ts and dur: numbers, or strings holding one (some tools write "ts":"12.5"). */
static dt_status parse_time(reader *r, double *out, const char *field) {
  const char *at = r->p;
  if (r->p < r->end && *r->p == '"') {
    span s;
    dt_status st = parse_string(r, &s);
    if (st) return st;
    const char *next;
    if (s.escaped || s.n == 0 || parse_number_at(r, s.s, s.s + s.n, &next, out, NULL) ||
        next != s.s + s.n) {
      return fail(r, at, "\"%s\" string does not hold a number", field);
    }
    return DT_OK;
  }
  if (r->p < r->end && (*r->p == '-' || (*r->p >= '0' && *r->p <= '9'))) {
    return parse_number(r, out, NULL);
  }
  return fail(r, at, "\"%s\" must be a number", field);
}

/* ---- Processes and lanes ------------------------------------------------------------------ */

static uint64_t fnv1a(const char *s, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
  return h;
}

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
    if (plain_text(r, id->text, &text, &n)) {
      text = id->text.s;
      n = id->text.n;
    }
    *key = fnv1a(text, n);
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
  p->pid_text = pid->present ? copy_string(pid->text) : copy_string((span){"0", 1, false});
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
  l->tid_text = tid->present ? copy_string(tid->text) : copy_string((span){"0", 1, false});
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
  if (!args_at) return fail(r, event_at, "%s metadata has no \"args\"", meta);
  const char *saved = r->p;
  r->p = args_at;
  dt_status st = DT_OK;
  if (*r->p != '{') {
    st = fail(r, args_at, "%s metadata: \"args\" must be an object", meta);
    goto done;
  }
  r->p++;
  bool first = true;
  for (;;) {
    span key;
    int has;
    if ((st = next_key(r, &first, &key, &has))) goto done;
    if (!has) break;
    if (!span_equals(key, want)) {
      if ((st = skip_value(r))) goto done;
      continue;
    }
    const char *at = r->p;
    char *value = NULL;
    if (r->p < r->end && *r->p == '"') {
      span s;
      if ((st = parse_string(r, &s))) goto done;
      value = copy_string(s);
      if (!value) {
        st = dt__error(DT_ERR_NOMEM, "out of memory");
        goto done;
      }
    } else if (r->p < r->end && *r->p == '[' && strcmp(want, "labels") == 0) {
      /* An array of label strings, joined with ','. */
      const char *list_start = r->p;
      if ((st = skip_value(r))) goto done;
      value = dt__alloc((size_t)(r->p - list_start) + 1);
      if (!value) {
        st = dt__error(DT_ERR_NOMEM, "out of memory");
        goto done;
      }
      size_t n = 0;
      const char *after = r->p;
      r->p = list_start + 1;
      for (;;) {
        skip_ws(r);
        if (*r->p == ']') break;
        if (*r->p == ',') {
          r->p++;
          continue;
        }
        if (*r->p != '"') {
          dt__free(value);
          st = fail(r, r->p, "%s metadata: labels must be strings", meta);
          goto done;
        }
        span s;
        if ((st = parse_string(r, &s))) {
          dt__free(value);
          goto done;
        }
        if (n) value[n++] = ',';
        if (s.escaped) {
          n += unescape(s, value + n);
        } else {
          memcpy(value + n, s.s, s.n);
          n += s.n;
        }
      }
      value[n] = '\0';
      r->p = after;
    } else {
      st = fail(r, at, "%s metadata: args.%s must be a string", meta, want);
      goto done;
    }
    dt__free(*out); /* a repeated key: the last one wins */
    *out = value;
  }
  if (!*out) st = fail(r, args_at, "%s metadata has no args.%s", meta, want);
done:
  if (st) {
    dt__free(*out);
    *out = NULL;
  }
  r->p = saved;
  return st;
}

/* ---- Events -------------------------------------------------------------------------------- */

typedef struct fields {
  span name, ph, cat;
  bool has_name, has_ph, has_cat, has_ts, has_dur;
  double ts, dur;
  ident pid, tid;
  const char *args_at;
} fields;

static dt_status add_complete(reader *r, const fields *f, const char *at) {
  if (!f->has_ts) return fail(r, at, "complete event (ph \"X\") has no \"ts\"");
  if (!f->has_dur) return fail(r, at, "complete event (ph \"X\") has no \"dur\"");
  if (!f->pid.present) return fail(r, at, "complete event (ph \"X\") has no \"pid\"");
  if (f->dur < 0) return fail(r, at, "complete event has a negative \"dur\" (%g)", f->dur);
  /* Bounded times keep every difference and union the analysis computes finite: unbounded,
   * ts -1e308 with dur 1e308 and another event at 1e308 make the span infinite and the
   * utilization NaN. */
  double end = f->ts + f->dur;
  if (!(fabs(f->ts) <= DT_TRACE_MAX_TIME_US && fabs(end) <= DT_TRACE_MAX_TIME_US)) {
    return fail(r, at,
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
    if ((st = plain_text(r, f->name, &text, &n))) return st;
    if (dt__trace_is_matrix_span(text, n)) flags |= DT__TRACE_MATRIX;
    if (dt__trace_contains(text, n, "nccl")) flags |= DT__TRACE_NCCL;
  }
  if (f->has_cat && span_equals(f->cat, "user_annotation")) flags |= DT__TRACE_USER;
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
  if (!f->has_name) return fail(r, at, "metadata event (ph \"M\") has no \"name\"");
  bool process_name = span_equals(f->name, "process_name");
  bool labels = !process_name && span_equals(f->name, "process_labels");
  bool thread_name = !process_name && !labels && span_equals(f->name, "thread_name");
  if (!process_name && !labels && !thread_name) return DT_OK;
  const char *meta = process_name ? "process_name" : labels ? "process_labels" : "thread_name";
  if (!f->pid.present) return fail(r, at, "%s metadata has no \"pid\"", meta);
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
  const char *at = r->p;
  fields f = {0};
  r->p++;
  bool first = true;
  dt_status st = DT_OK;
  for (;;) {
    span key;
    int has;
    if ((st = next_key(r, &first, &key, &has))) return st;
    if (!has) break;
    const char *k = key.s;
    size_t n = key.escaped ? 0 : key.n; /* escaped keys are not ours: skip them */
    if (n == 2 && memcmp(k, "ph", 2) == 0) {
      if (r->p >= r->end || *r->p != '"') return fail(r, r->p, "\"ph\" must be a string");
      if ((st = parse_string(r, &f.ph))) return st;
      f.has_ph = true;
    } else if (n == 4 && memcmp(k, "name", 4) == 0) {
      if (r->p >= r->end || *r->p != '"') return fail(r, r->p, "\"name\" must be a string");
      if ((st = parse_string(r, &f.name))) return st;
      f.has_name = true;
    } else if (n == 3 && memcmp(k, "cat", 3) == 0) {
      if (r->p >= r->end || *r->p != '"') return fail(r, r->p, "\"cat\" must be a string");
      if ((st = parse_string(r, &f.cat))) return st;
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
      f.args_at = r->p;
      if ((st = skip_value(r))) return st;
    } else if ((st = skip_value(r))) {
      return st;
    }
  }
  if (!f.has_ph) return fail(r, at, "event (traceEvents[%zu]) has no \"ph\"", r->event_index);
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
  r->p++;
  dt_status st;
  skip_ws(r);
  if (r->p >= r->end) {
    return may_be_truncated ? DT_OK : fail(r, r->p, "unterminated traceEvents array");
  }
  if (*r->p == ']') {
    r->p++;
    return DT_OK;
  }
  for (;;) {
    skip_ws(r);
    if (r->p >= r->end && may_be_truncated) return DT_OK;
    if (r->p >= r->end || *r->p != '{') {
      char buf[32];
      return fail(r, r->p, "traceEvents[%zu] is not an object (found %s)", r->event_index,
                  describe(r, r->p, buf, sizeof buf));
    }
    if ((st = parse_event(r))) return st;
    r->event_index++;
    skip_ws(r);
    if (r->p >= r->end) {
      return may_be_truncated ? DT_OK : fail(r, r->p, "unterminated traceEvents array");
    }
    if (*r->p == ']') {
      r->p++;
      return DT_OK;
    }
    if (*r->p != ',') return expected(r, "',' or ']' after an event");
    r->p++;
  }
}

static dt_status parse_trace(reader *r) {
  dt_status st;
  if (r->end - r->p >= 3 && memcmp(r->p, "\xef\xbb\xbf", 3) == 0) r->p += 3; /* UTF-8 BOM */
  skip_ws(r);
  if (r->p >= r->end) return fail(r, r->p, "empty input: a trace is a JSON object or array");
  if (*r->p == '[') {
    if ((st = parse_events(r, true))) return st;
  } else if (*r->p == '{') {
    r->p++;
    bool first = true, found = false;
    for (;;) {
      span key;
      int has;
      if ((st = next_key(r, &first, &key, &has))) return st;
      if (!has) break;
      if (span_equals(key, "traceEvents")) {
        if (r->p >= r->end || *r->p != '[')
          return fail(r, r->p, "\"traceEvents\" must be an array");
        if ((st = parse_events(r, false))) return st;
        found = true;
      } else if ((st = skip_value(r))) {
        return st;
      }
    }
    if (!found) return fail(r, r->begin, "the trace object has no \"traceEvents\" array");
  } else {
    return expected(r, "'{' or '[' at the start of a trace");
  }
  skip_ws(r);
  if (r->p < r->end) return expected(r, "the end of the input after the trace");
  return DT_OK;
}

dt_status dt_trace_read_memory(const char *data, size_t size, dt_trace **out) {
  if (!out) return dt__error(DT_ERR_INVALID, "dt_trace_read_memory: out is NULL");
  *out = NULL;
  if (!data && size) return dt__error(DT_ERR_INVALID, "dt_trace_read_memory: data is NULL");
  dt_trace *t = dt__calloc(sizeof *t);
  if (!t) return dt__error(DT_ERR_NOMEM, "dt_trace_read_memory: out of memory");
  reader r = {.begin = data ? data : "",
              .p = data ? data : "",
              .end = (data ? data : "") + size,
              .trace = t};
  dt_status st = parse_trace(&r);
  dt__free(r.scratch);
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
  FILE *f = fopen(path, "rb");
  if (!f) {
    return dt__error(DT_ERR_IO, "%s: cannot open '%s': %s", fn, path, strerror(errno));
  }
  /* A regular file's size is known: one allocation, and a file over the limit is refused
   * before reading. Pipes and devices are read in growing blocks up to the limit. */
  size_t cap = 1 << 20;
  struct stat st;
  if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode)) {
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
