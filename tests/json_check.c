/*
 * json_check FILE: exits 0 when FILE holds exactly one valid JSON value (RFC 8259: no raw
 * control bytes in strings, only the standard escapes, UTF-8 well formed), else prints where
 * it went wrong and exits 1. The device check's CTest (tests/device_check_dry.sh) validates
 * the summary with it, so that the CPU build needs neither Python nor jq.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  const unsigned char *p, *end, *start;
  const char *error;
} reader;

static bool fail(reader *r, const char *why) {
  if (!r->error) r->error = why;
  return false;
}

static void skip_space(reader *r) {
  while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r')) r->p++;
}

static bool literal(reader *r, const char *word) {
  size_t n = strlen(word);
  if ((size_t)(r->end - r->p) < n || memcmp(r->p, word, n) != 0) return fail(r, "bad literal");
  r->p += n;
  return true;
}

/* One UTF-8 sequence of 2 to 4 bytes starting at r->p (a lead byte >= 0x80). */
static bool utf8_sequence(reader *r) {
  unsigned char c = *r->p;
  int more = c >= 0xc2 && c <= 0xdf   ? 1
             : c >= 0xe0 && c <= 0xef ? 2
             : c >= 0xf0 && c <= 0xf4 ? 3
                                      : -1;
  if (more < 0 || r->end - r->p <= more) return fail(r, "invalid UTF-8");
  for (int i = 1; i <= more; i++)
    if ((r->p[i] & 0xc0) != 0x80) return fail(r, "invalid UTF-8");
  r->p += more + 1;
  return true;
}

static bool string(reader *r) {
  r->p++; /* the opening quote */
  while (r->p < r->end) {
    unsigned char c = *r->p;
    if (c == '"') {
      r->p++;
      return true;
    }
    if (c < 0x20) return fail(r, "raw control byte in a string");
    if (c >= 0x80) {
      if (!utf8_sequence(r)) return false;
      continue;
    }
    if (c == '\\') {
      if (++r->p >= r->end) break;
      if (*r->p == 'u') {
        for (int i = 1; i <= 4; i++)
          if (r->p + i >= r->end || !strchr("0123456789abcdefABCDEF", r->p[i]) || !r->p[i])
            return fail(r, "bad \\u escape");
        r->p += 4;
      } else if (!strchr("\"\\/bfnrt", *r->p) || !*r->p) {
        return fail(r, "bad escape");
      }
    }
    r->p++;
  }
  return fail(r, "unterminated string");
}

static bool digits(reader *r) {
  const unsigned char *s = r->p;
  while (r->p < r->end && *r->p >= '0' && *r->p <= '9') r->p++;
  return r->p > s || fail(r, "bad number");
}

static bool number(reader *r) {
  if (*r->p == '-') r->p++;
  if (r->p < r->end && *r->p == '0') {
    r->p++;
  } else if (!digits(r)) {
    return false;
  }
  if (r->p < r->end && *r->p == '.') {
    r->p++;
    if (!digits(r)) return false;
  }
  if (r->p < r->end && (*r->p == 'e' || *r->p == 'E')) {
    r->p++;
    if (r->p < r->end && (*r->p == '+' || *r->p == '-')) r->p++;
    if (!digits(r)) return false;
  }
  return true;
}

static bool value(reader *r, int depth);

/* An object or an array: `close` is '}' or ']'. */
static bool container(reader *r, int depth, char close) {
  r->p++;
  skip_space(r);
  if (r->p < r->end && *r->p == close) {
    r->p++;
    return true;
  }
  for (;;) {
    skip_space(r);
    if (close == '}') {
      if (r->p >= r->end || *r->p != '"') return fail(r, "expected a key");
      if (!string(r)) return false;
      skip_space(r);
      if (r->p >= r->end || *r->p != ':') return fail(r, "expected ':'");
      r->p++;
    }
    if (!value(r, depth + 1)) return false;
    skip_space(r);
    if (r->p < r->end && *r->p == ',') {
      r->p++;
      continue;
    }
    if (r->p < r->end && *r->p == close) {
      r->p++;
      return true;
    }
    return fail(r, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
  }
}

static bool value(reader *r, int depth) {
  if (depth > 64) return fail(r, "nested too deeply");
  skip_space(r);
  if (r->p >= r->end) return fail(r, "expected a value");
  switch (*r->p) {
  case '{': return container(r, depth, '}');
  case '[': return container(r, depth, ']');
  case '"': return string(r);
  case 't': return literal(r, "true");
  case 'f': return literal(r, "false");
  case 'n': return literal(r, "null");
  default:
    if (*r->p == '-' || (*r->p >= '0' && *r->p <= '9')) return number(r);
    return fail(r, "expected a value");
  }
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: json_check FILE\n");
    return 2;
  }
  FILE *f = fopen(argv[1], "rb");
  if (!f) {
    fprintf(stderr, "json_check: cannot open '%s'\n", argv[1]);
    return 2;
  }
  static unsigned char text[1 << 20];
  size_t n = fread(text, 1, sizeof text, f);
  fclose(f);
  reader r = {.p = text, .end = text + n, .start = text};
  bool ok = value(&r, 0);
  skip_space(&r);
  if (ok && r.p != r.end) ok = fail(&r, "text after the value");
  if (!ok) {
    fprintf(stderr, "json_check: %s: invalid JSON at byte %ld: %s\n", argv[1],
            (long)(r.p - r.start), r.error);
    return 1;
  }
  return 0;
}
