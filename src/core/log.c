/* Log messages go to the user's callback; without one they are dropped. */
#include <stdarg.h>
#include <stdio.h>

#include "core/core_impl.h"

static dt_log_fn log_fn;
static void *log_user;
static dt_log_level log_min_level = DT_LOG_WARN;

void dt_set_log_callback(dt_log_fn fn, void *user, dt_log_level min_level) {
  log_fn = fn;
  log_user = user;
  log_min_level = min_level;
}

void dt__log(dt_log_level level, const char *format, ...) {
  if (!log_fn || level < log_min_level) return;
  char message[1024];
  va_list args;
  va_start(args, format);
  vsnprintf(message, sizeof message, format, args);
  va_end(args);
  log_fn(level, message, log_user);
}
