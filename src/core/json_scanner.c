/*
 * A bounds-checked JSON scanner: the tokens of a JSON text in memory, validated against the
 * full grammar, without building a tree.
 *
 * cJSON would build a tree of every value first: a million-event trace is ~10 million nodes,
 * one malloc each, several seconds and gigabytes before the analysis starts. This scanner
 * lets a schema (trace_reader.c: the Chrome trace format) walk the text once and keep only
 * what it needs. Every byte read is bounds-checked (the input need not be NUL-terminated),
 * nothing recurses (nesting is tracked on a fixed stack, 512 deep), and the first problem is
 * reported with its byte offset.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json_scanner.h"

#define MAX_DEPTH 512
#define MAX_NUMBER_LENGTH 512

dt_status dt__json_fail(dt__json_scanner *r, const char *at, const char *format, ...) {
  char message[512];
  va_list args;
  va_start(args, format);
  vsnprintf(message, sizeof message, format, args);
  va_end(args);
  return dt__error(DT_ERR_INVALID, "byte %zu: %s", (size_t)(at - r->begin), message);
}

/* Describes the byte at p for error messages. */
const char *dt__json_describe(const dt__json_scanner *r, const char *p, char *buf, size_t size) {
  if (p >= r->end) return "the end of the input";
  unsigned char c = (unsigned char)*p;
  if (c >= 0x20 && c < 0x7f) {
    snprintf(buf, size, "'%c'", c);
  } else {
    snprintf(buf, size, "byte 0x%02x", c);
  }
  return buf;
}

dt_status dt__json_expected(dt__json_scanner *r, const char *what) {
  char buf[32];
  return dt__json_fail(r, r->p, "expected %s, found %s", what,
                       dt__json_describe(r, r->p, buf, sizeof buf));
}

static inline int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Reads a string token at r->p (which is '"'), validating escapes. */
dt_status dt__json_string(dt__json_scanner *r, dt__json_span *out) {
  const char *open = r->p++;
  const char *start = r->p;
  bool escaped = false;
  for (;;) {
    while (r->p < r->end && *r->p != '"' && *r->p != '\\' && (unsigned char)*r->p >= 0x20) {
      r->p++;
    }
    if (r->p >= r->end) return dt__json_fail(r, open, "unterminated string");
    char c = *r->p;
    if (c == '"') break;
    if (c == '\\') {
      escaped = true;
      if (r->end - r->p < 2) return dt__json_fail(r, open, "unterminated string");
      char e = r->p[1];
      if (e == 'u') {
        if (r->end - r->p < 6) return dt__json_fail(r, r->p, "truncated \\u escape");
        for (int i = 2; i < 6; i++) {
          if (hex_value(r->p[i]) < 0)
            return dt__json_fail(r, r->p, "bad \\u escape (4 hex digits)");
        }
        r->p += 6;
      } else if (strchr("\"\\/bfnrt", e) && e) {
        r->p += 2;
      } else {
        return dt__json_fail(r, r->p, "bad escape '\\%c' in string",
                             e >= 0x20 && e < 0x7f ? e : '?');
      }
      continue;
    }
    return dt__json_fail(r, r->p, "control character 0x%02x in string (must be escaped)",
                         (unsigned char)c);
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
size_t dt__json_unescape(dt__json_span sp, char *out) {
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
char *dt__json_copy_string(dt__json_span sp) {
  char *out = dt__alloc(sp.n + 1);
  if (!out) return NULL;
  if (sp.escaped) {
    dt__json_unescape(sp, out);
  } else {
    memcpy(out, sp.s, sp.n);
    out[sp.n] = '\0';
  }
  return out;
}

/* The bytes of a string token unescaped, in the reader's scratch buffer when needed. */
dt_status dt__json_plain_text(dt__json_scanner *r, dt__json_span sp, const char **text,
                              size_t *length) {
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
  *length = dt__json_unescape(sp, r->scratch);
  *text = r->scratch;
  return DT_OK;
}

bool dt__json_span_equals(dt__json_span sp, const char *text) {
  size_t n = strlen(text);
  if (!sp.escaped) return sp.n == n && memcmp(sp.s, text, n) == 0;
  char buf[64];
  if (sp.n >= sizeof buf) return false;
  size_t m = dt__json_unescape(sp, buf);
  return m == n && memcmp(buf, text, n) == 0;
}

static const double powers_of_ten[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                       1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                       1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* Parses a JSON number in [p, end) that must dt__json_span the whole range when `whole` (numbers in
 * strings) and sets *next past it. Exact: up to 15 significant digits and a power of ten up to
 * 22 convert with one correctly rounded operation; anything else goes through strtod. */
dt_status dt__json_number_at(dt__json_scanner *r, const char *p, const char *end, const char **next,
                             double *out, bool *integral) {
  const char *start = p;
  bool negative = false;
  if (p < end && *p == '-') {
    negative = true;
    p++;
  }
  if (p >= end || *p < '0' || *p > '9') return dt__json_fail(r, start, "malformed number");
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
      return dt__json_fail(r, start, "malformed number (digit after '.')");
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
    if (p >= end || *p < '0' || *p > '9')
      return dt__json_fail(r, start, "malformed number (exponent)");
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
      return dt__json_fail(r, start, "number longer than %d characters", MAX_NUMBER_LENGTH);
    char buf[MAX_NUMBER_LENGTH + 1];
    memcpy(buf, start, length);
    buf[length] = '\0';
    value = strtod(buf, NULL);
    is_integral = value == floor(value);
  }
  if (!isfinite(value))
    return dt__json_fail(r, start, "number %.*s is out of range", (int)(length > 40 ? 40 : length),
                         start);
  *next = p;
  *out = value;
  if (integral) *integral = is_integral;
  return DT_OK;
}

dt_status dt__json_number(dt__json_scanner *r, double *out, bool *integral) {
  return dt__json_number_at(r, r->p, r->end, &r->p, out, integral);
}

size_t dt__json_literal_length(const char *p, const char *end) {
  static const char *const words[] = {"true", "false", "null"};
  for (int i = 0; i < 3; i++) {
    size_t n = strlen(words[i]);
    if ((size_t)(end - p) >= n && memcmp(p, words[i], n) == 0) return n;
  }
  return 0;
}

static dt_status parse_literal(dt__json_scanner *r) {
  size_t n = dt__json_literal_length(r->p, r->end);
  if (!n) return dt__json_expected(r, "a JSON value");
  r->p += n;
  return DT_OK;
}

/* An object's key and its ':' at r->p (white space before the ':' skipped); `expected`
 * names what should stand where no key does. */
static dt_status read_key(dt__json_scanner *r, dt__json_span *key, const char *expected) {
  if (r->p >= r->end || *r->p != '"') return dt__json_expected(r, expected);
  dt_status st = dt__json_string(r, key);
  if (st) return st;
  dt__json_skip_ws(r);
  if (r->p >= r->end || *r->p != ':') return dt__json_expected(r, "':' after an object key");
  r->p++;
  return DT_OK;
}

/* Skips one value of any kind without recursion; containers nest at most MAX_DEPTH deep. */
dt_status dt__json_skip_value(dt__json_scanner *r) {
  char stack[MAX_DEPTH]; /* '{' or '[' per open container */
  int depth = 0;
  dt_status st;
  for (;;) {
    /* A value starts here. */
    dt__json_skip_ws(r);
    if (r->p >= r->end) return dt__json_expected(r, "a JSON value");
    char c = *r->p;
    if (c == '{' || c == '[') {
      if (depth >= MAX_DEPTH) return dt__json_fail(r, r->p, "nesting deeper than %d", MAX_DEPTH);
      stack[depth++] = c;
      r->p++;
      dt__json_skip_ws(r);
      if (r->p < r->end && *r->p == (c == '{' ? '}' : ']')) {
        r->p++;
        depth--;
      } else if (c == '{') {
        dt__json_span key;
        if ((st = read_key(r, &key, "a string key or '}'"))) return st;
        continue;
      } else {
        continue;
      }
    } else if (c == '"') {
      dt__json_span s;
      if ((st = dt__json_string(r, &s))) return st;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      double v;
      if ((st = dt__json_number(r, &v, NULL))) return st;
    } else if ((st = parse_literal(r))) {
      return st;
    }
    /* A value ended: close containers or go on to the next element. */
    for (;;) {
      if (depth == 0) return DT_OK;
      dt__json_skip_ws(r);
      if (r->p >= r->end)
        return dt__json_fail(r, r->p, "unexpected end of input inside %s",
                             stack[depth - 1] == '{' ? "an object" : "an array");
      char close = stack[depth - 1] == '{' ? '}' : ']';
      if (*r->p == close) {
        r->p++;
        depth--;
        continue;
      }
      if (*r->p != ',') {
        return dt__json_expected(r, stack[depth - 1] == '{' ? "',' or '}' in an object"
                                                            : "',' or ']' in an array");
      }
      r->p++;
      if (stack[depth - 1] == '{') {
        dt__json_skip_ws(r);
        dt__json_span key;
        if ((st = read_key(r, &key, "a string key"))) return st;
      }
      break;
    }
  }
}

/* The next key of an object (see json_scanner.h); *st set only on an error. */
static dt_status next_key(dt__json_scanner *r, bool *first, dt__json_span *key, bool *has) {
  *has = false;
  dt__json_skip_ws(r);
  if (r->p >= r->end) return dt__json_fail(r, r->p, "unexpected end of input inside an object");
  bool was_first = *first;
  *first = false;
  if (*r->p == '}') {
    r->p++;
    return DT_OK;
  }
  if (!was_first) {
    if (*r->p != ',') return dt__json_expected(r, "',' or '}' in an object");
    r->p++;
    dt__json_skip_ws(r);
  }
  dt_status st = read_key(r, key, "a string key");
  if (st) return st;
  dt__json_skip_ws(r);
  *has = true;
  return DT_OK;
}

bool dt__json_next_key(dt__json_scanner *r, bool *first, dt__json_span *key, dt_status *st) {
  bool has = false;
  if (!*st) *st = next_key(r, first, key, &has);
  return !*st && has;
}
