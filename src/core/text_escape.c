/*
 * Escaping of untrusted text for terminals and messages (text_escape.h): one rule for the
 * library's messages and the tool's output.
 */
#include <stdbool.h>
#include <string.h>

#include "core/text_escape.h"

/* The length (1 to 4) of the valid UTF-8 character at s and its code point, or 0 if s[0] does
 * not start one (a stray continuation byte, an overlong form, a surrogate). s is
 * NUL-terminated, and NUL is never a continuation byte, so reading stops in time. */
static int utf8_char(const unsigned char *s, unsigned *cp) {
  unsigned c = s[0];
  int n;
  unsigned min;
  if (c < 0x80) {
    *cp = c;
    return 1;
  } else if (c >= 0xc2 && c <= 0xdf) {
    n = 2, min = 0x80, *cp = c & 0x1f;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3, min = 0x800, *cp = c & 0x0f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4, min = 0x10000, *cp = c & 0x07;
  } else {
    return 0;
  }
  for (int i = 1; i < n; i++) {
    if ((s[i] & 0xc0) != 0x80) return 0;
    *cp = (*cp << 6) | (s[i] & 0x3f);
  }
  if (*cp < min || *cp > 0x10ffff || (*cp >= 0xd800 && *cp < 0xe000)) return 0;
  return n;
}

/* Control characters: C0, DEL and C1. */
static bool is_control(unsigned cp) { return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f); }

static const char hex[] = "0123456789abcdef";

const char *dt__escape_next(const char *s, size_t *length, char buf[8]) {
  const unsigned char *p = (const unsigned char *)s;
  unsigned cp = 0;
  int n = utf8_char(p, &cp);
  *length = n ? (size_t)n : 1;
  if (n == 0 || (is_control(cp) && cp < 0x80)) {
    unsigned byte = n == 0 ? p[0] : cp;
    memcpy(buf, "\\x", 2);
    buf[2] = hex[byte >> 4], buf[3] = hex[byte & 15], buf[4] = '\0';
    return buf;
  }
  if (cp == '\\') return "\\\\";
  if (is_control(cp)) {
    memcpy(buf, "\\u00", 4);
    buf[4] = hex[cp >> 4], buf[5] = hex[cp & 15], buf[6] = '\0';
    return buf;
  }
  return NULL;
}

/* The length of s escaped. */
static size_t escaped_length(const char *s) {
  size_t total = 0, n = 0;
  char buf[8];
  for (; *s; s += n) {
    const char *escape = dt__escape_next(s, &n, buf);
    total += escape ? strlen(escape) : n;
  }
  return total;
}

const char *dt__escape_text(char *out, size_t size, const char *s) {
  /* Cut only when the whole text does not fit, leaving room for "..." then. */
  size_t limit = escaped_length(s) + 1 <= size ? size - 1 : size - 4;
  size_t used = 0, n = 0;
  char buf[8];
  for (; *s; s += n) {
    const char *escape = dt__escape_next(s, &n, buf);
    size_t add = escape ? strlen(escape) : n;
    if (used + add > limit) {
      memcpy(out + used, "...", 3);
      used += 3;
      break;
    }
    memcpy(out + used, escape ? escape : s, add);
    used += add;
  }
  out[used] = '\0';
  return out;
}

void dt__escape_write(FILE *f, const char *s, int width) {
  int used = 0;
  char buf[8];
  while (*s) {
    size_t n = 0;
    const char *escape = dt__escape_next(s, &n, buf);
    int columns = escape ? (int)strlen(escape) : 1;
    if (width >= 0 && used + columns > width) break;
    if (escape)
      fputs(escape, f);
    else
      fwrite(s, 1, n, f);
    used += columns;
    s += n;
  }
  for (; used < width; used++) fputc(' ', f);
}

void dt__escape_write_message(FILE *f, const char *s) {
  char buf[8];
  while (*s) {
    size_t n = 0;
    const char *escape = *s == '\\' ? NULL : dt__escape_next(s, &n, buf);
    if (*s == '\\') n = 1;
    if (escape)
      fputs(escape, f);
    else
      fwrite(s, 1, n, f);
    s += n;
  }
}

void dt__escape_write_json(FILE *f, const char *s) {
  fputc('"', f);
  const unsigned char *p = (const unsigned char *)s;
  while (*p) {
    unsigned cp = 0;
    int n = utf8_char(p, &cp);
    if (n == 0) {
      fputs("\\ufffd", f);
      n = 1;
    } else if (cp == '"' || cp == '\\') {
      fprintf(f, "\\%c", (int)cp);
    } else if (is_control(cp)) {
      fprintf(f, "\\u%04x", cp);
    } else {
      fwrite(p, 1, (size_t)n, f);
    }
    p += n;
  }
  fputc('"', f);
}
