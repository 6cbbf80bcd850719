/* Status strings and the thread-local error message. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core_impl.h"

#define DT_ERROR_CAPACITY 1024

static _Thread_local char error_message[DT_ERROR_CAPACITY];

const char *dt_status_string(dt_status status) {
  switch (status) {
#define DT_STATUS_CASE(name, value, text)                                                          \
  case name: return text;
    DT_STATUS_MAP(DT_STATUS_CASE)
#undef DT_STATUS_CASE
  }
  return "unknown status";
}

const char *dt_last_error(void) { return error_message; }

void dt_clear_error(void) { error_message[0] = '\0'; }

dt_status dt__error(dt_status status, const char *format, ...) {
  va_list args;
  va_start(args, format);
  vsnprintf(error_message, sizeof error_message, format, args);
  va_end(args);
  dt__log(DT_LOG_DEBUG, "%s: %s", dt_status_string(status), error_message);
  return status;
}

void dt__error_prefix(const char *prefix) {
  char previous[DT_ERROR_CAPACITY];
  memcpy(previous, error_message, sizeof previous);
  /* A message names its public function once: when the prefix starts with a function name
   * (dt_...) that the inner message already starts with, the inner one drops it, so
   * "dt_program_run: node %x" over "dt_program_run: bad" reads
   * "dt_program_run: node %x: bad", not the name twice. */
  const char *rest = previous;
  size_t name = strspn(prefix, "abcdefghijklmnopqrstuvwxyz0123456789_");
  if (name > 3 && strncmp(prefix, "dt_", 3) == 0 && strncmp(previous, prefix, name) == 0 &&
      previous[name] == ':' && previous[name + 1] == ' ')
    rest = previous + name + 2;
  int room = (int)sizeof error_message - 3 - (int)strlen(prefix);
  snprintf(error_message, sizeof error_message, "%s: %.*s", prefix, room > 0 ? room : 0, rest);
}

void dt__assert_fail(const char *expr, const char *file, int line) {
  /* An internal invariant is broken: this is a bug in libdtensor, not bad input. */
  dt__log(DT_LOG_ERROR, "internal assertion failed: %s (%s:%d)", expr, file, line);
  fprintf(stderr, "libdtensor: internal assertion failed: %s (%s:%d)\n", expr, file, line);
  abort();
}

char *dt__format_ints(char *buf, size_t size, int n, const int64_t *values) {
  size_t used = 0;
  if (size == 0) return buf;
  buf[0] = '\0';
  used += (size_t)snprintf(buf + used, size - used, "[");
  for (int i = 0; i < n && used < size; i++) {
    used += (size_t)snprintf(buf + used, size - used, i ? ", %lld" : "%lld", (long long)values[i]);
  }
  if (used < size) snprintf(buf + used, size - used, "]");
  return buf;
}

const char *dt_version_string(void) {
#define DT_STR2(x) #x
#define DT_STR(x) DT_STR2(x)
  return DT_STR(DT_VERSION_MAJOR) "." DT_STR(DT_VERSION_MINOR) "." DT_STR(DT_VERSION_PATCH);
}
