/*
 * A bounds-checked JSON scanner (json_scanner.c): reads tokens of a JSON text in memory and
 * validates the full grammar without building a tree. The caller (a schema such as the
 * Chrome trace reader) decides which values to read and which to skip.
 *
 * Every function reads at r->p, never past r->end, and on success leaves r->p after what it
 * read. Errors are DT_ERR_INVALID with a message "byte N: ..." (N counted from r->begin), or
 * DT_ERR_NOMEM.
 */
#ifndef DT_CORE_JSON_SCANNER_H
#define DT_CORE_JSON_SCANNER_H

#include <stdbool.h>
#include <stddef.h>

#include "core/core_impl.h"

typedef struct dt__json_scanner {
  const char *begin, *p, *end;
  char *scratch; /* unescaped strings (dt__json_plain_text); the caller frees it */
  size_t scratch_cap;
} dt__json_scanner;

/* A string token: the raw bytes between the quotes. */
typedef struct dt__json_span {
  const char *s;
  size_t n;
  bool escaped; /* holds backslash escapes: read it through dt__json_unescape */
} dt__json_span;

static inline void dt__json_skip_ws(dt__json_scanner *r) {
  while (r->p < r->end && (*r->p == ' ' || *r->p == '\n' || *r->p == '\r' || *r->p == '\t')) {
    r->p++;
  }
}

/* Sets the error "byte <offset of at>: <formatted message>" and returns DT_ERR_INVALID. */
DT_PRINTF(3, 4)
dt_status dt__json_fail(dt__json_scanner *r, const char *at, const char *format, ...);

/* "expected <what>, found <the byte at r->p>". */
dt_status dt__json_expected(dt__json_scanner *r, const char *what);

/* Describes the byte at p for an error message ("'x'", "byte 0x01", "the end of the input"),
 * in buf when it needs formatting. */
const char *dt__json_describe(const dt__json_scanner *r, const char *p, char *buf, size_t size);

/* Reads a string token at r->p (which is '"'), validating its escapes. */
dt_status dt__json_string(dt__json_scanner *r, dt__json_span *out);

/* Unescapes a validated token into out (room for sp.n + 1 bytes: escapes never lengthen a
 * string), NUL-terminated, and returns the length. \u0000 becomes U+FFFD so that the result
 * is a C string. */
size_t dt__json_unescape(dt__json_span sp, char *out);

/* A heap copy (dt__alloc) of a token, unescaped; NULL when out of memory. */
char *dt__json_copy_string(dt__json_span sp);

/* A token's bytes unescaped: the input itself when it has no escapes, else the scanner's
 * scratch buffer (valid until the next call). */
dt_status dt__json_plain_text(dt__json_scanner *r, dt__json_span sp, const char **text,
                              size_t *length);

/* True if the token, unescaped, equals text. */
bool dt__json_span_equals(dt__json_span sp, const char *text);

/* Parses a JSON number in [p, end), sets *next past it and *integral (may be NULL) to whether
 * its value is an integer. A number that overflows a double is an error. */
dt_status dt__json_number_at(dt__json_scanner *r, const char *p, const char *end, const char **next,
                             double *out, bool *integral);

/* The length of the literal true, false or null at p (0 when none stands there). */
size_t dt__json_literal_length(const char *p, const char *end);

/* dt__json_number_at at r->p. */
dt_status dt__json_number(dt__json_scanner *r, double *out, bool *integral);

/* Skips one value of any kind without recursion; containers nest at most 512 deep. */
dt_status dt__json_skip_value(dt__json_scanner *r);

/* Object iteration, as a loop's condition: call with *first = true just after '{' and *st =
 * DT_OK. True with the next key and r->p at its value; false after the closing '}', or with
 * the error in *st, or at once when *st already holds one (the loop body's):
 *   while (dt__json_next_key(r, &first, &key, &st)) { ... }  if (st) ... */
bool dt__json_next_key(dt__json_scanner *r, bool *first, dt__json_span *key, dt_status *st);

#endif /* DT_CORE_JSON_SCANNER_H */
