/* What the library says through dt_set_log_callback, for tests that check it:
 * log_capture_start() installs a callback that counts the DT_LOG_WARN messages (`warnings`),
 * keeps the first four (`warning_text`) and the last (`last_warning`); log_capture_stop()
 * removes it. Header-only; one capture per test program. */
#ifndef DT_TESTS_LOG_CAPTURE_H
#define DT_TESTS_LOG_CAPTURE_H

#include <stdio.h>

#include "dtensor/dtensor.h"

static int warnings;
static char last_warning[512];
static char warning_text[4][512];

static inline void log_capture_fn(dt_log_level level, const char *message, void *user) {
  (void)user;
  if (level != DT_LOG_WARN) return;
  if (warnings < 4) snprintf(warning_text[warnings], sizeof warning_text[0], "%s", message);
  warnings++;
  snprintf(last_warning, sizeof last_warning, "%s", message);
}

static inline void log_capture_start(void) {
  warnings = 0;
  last_warning[0] = '\0';
  dt_set_log_callback(log_capture_fn, NULL, DT_LOG_WARN);
}

static inline void log_capture_stop(void) { dt_set_log_callback(NULL, NULL, DT_LOG_WARN); }

#endif
