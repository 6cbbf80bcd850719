/*
 * Integer environment variables (DT_NUM_THREADS, DT_ALLOC_CACHE_MB, DT_COMM_TIMEOUT_MS, ...)
 * and those naming one of a few words (DT_PROFILE_CLOCK, DT_COMPILE_LOG): one strict reader for
 * each kind. A value
 * must be a whole decimal integer inside the variable's range (an optional sign; no white space, no
 * trailing letters, no overflow);
 * any other value is not silently dropped but reported through the log callback (DT_LOG_WARN), once
 * per variable and value, and the caller's default applies. Settings read at every kernel call or
 * free would otherwise report on every call.
 */
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core_impl.h"

#define REPORTED_MAX 32

static struct {
  pthread_mutex_t lock;
  int count; /* entries used; past REPORTED_MAX the oldest is replaced (a ring) */
  char name[REPORTED_MAX][40];
  char value[REPORTED_MAX][64];
} reported = {.lock = PTHREAD_MUTEX_INITIALIZER};

bool dt__env_int_parse(const char *text, int64_t min, int64_t max, int64_t *out) {
  /* strtoll skips leading white space: " 4" was read as 4 while "4 " was refused. */
  if (!text || !*text || isspace((unsigned char)*text)) return false;
  char *end = NULL;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  if (end == text || *end != '\0' || errno == ERANGE || v < min || v > max) return false;
  *out = (int64_t)v;
  return true;
}

/* True the first time (name, value) is seen; a value longer than the table keeps is compared
 * by its first 63 characters. The table remembers the last REPORTED_MAX pairs, so a setting
 * read at every call never reports twice in a row, whatever the process did before. */
static bool first_report(const char *name, const char *value) {
  bool first = true;
  pthread_mutex_lock(&reported.lock);
  int used = reported.count < REPORTED_MAX ? reported.count : REPORTED_MAX;
  for (int i = 0; i < used && first; i++) {
    first = strncmp(reported.name[i], name, sizeof reported.name[i] - 1) != 0 ||
            strncmp(reported.value[i], value, sizeof reported.value[i] - 1) != 0;
  }
  if (first) {
    int i = reported.count++ % REPORTED_MAX;
    if (reported.count == 2 * REPORTED_MAX) reported.count = REPORTED_MAX; /* no overflow */
    memset(reported.name[i], 0, sizeof reported.name[i]);
    memset(reported.value[i], 0, sizeof reported.value[i]);
    strncpy(reported.name[i], name, sizeof reported.name[i] - 1);
    strncpy(reported.value[i], value, sizeof reported.value[i] - 1);
  }
  pthread_mutex_unlock(&reported.lock);
  return first;
}

int dt__env_choice(const char *name, const char *const *words, int n_words,
                   const char *fallback_text) {
  const char *text = getenv(name);
  if (!text || !*text) return -1;
  char listed[160] = "";
  size_t used = 0;
  for (int i = 0; i < n_words; i++) {
    if (strcmp(text, words[i]) == 0) return i;
    if (used < sizeof listed)
      used +=
          (size_t)snprintf(listed + used, sizeof listed - used, "%s%s", i ? ", " : "", words[i]);
  }
  if (first_report(name, text)) {
    dt__log(DT_LOG_WARN, "%s=\"%.64s\" is not one of %s: ignored, using %s", name, text, listed,
            fallback_text);
  }
  return -1;
}

int64_t dt__env_int(const char *name, int64_t min, int64_t max, int64_t fallback,
                    const char *fallback_text) {
  const char *text = getenv(name);
  if (!text || !*text) return fallback;
  int64_t value = 0;
  if (dt__env_int_parse(text, min, max, &value)) return value;
  if (first_report(name, text)) {
    char range[64];
    if (max == INT64_MAX)
      snprintf(range, sizeof range, ">= %lld", (long long)min);
    else
      snprintf(range, sizeof range, "in [%lld, %lld]", (long long)min, (long long)max);
    dt__log(DT_LOG_WARN, "%s=\"%.64s\" is not an integer %s: ignored, using %s", name, text, range,
            fallback_text);
  }
  return fallback;
}
