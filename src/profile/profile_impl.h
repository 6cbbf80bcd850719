/*
 * Private interface of the profiler: what other layers call to record events.
 *
 * The hot path, as the dispatcher would write it:
 *
 *   dt__profile_scope scope;
 *   dt__profile_begin(&scope, def->name, DT__PROFILE_CAT_OP, DT_PROFILER_LANE_COMPUTE);
 *   st = ...;                                  // the work
 *   dt__profile_end(&scope);                   // or dt__profile_end_shape / _bytes / _text
 *
 * With no profiler running, begin is one load and one predictable branch and end is one
 * branch on the scope. With one running, begin reads the clock and end reads it again and
 * appends a 64-byte event to the calling thread's chunked buffer: no lock, no malloc (but
 * one per 4096 events), no formatting. Names must be static strings (op names, kernel names):
 * only the pointer is kept and it is read at export time.
 */
#ifndef DT_PROFILE_IMPL_H
#define DT_PROFILE_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "profile/profile_event.h"

/* True while a profiler records (one relaxed load and one predictable branch). */
static inline bool dt__profile_enabled(void) {
  return DT_UNLIKELY(atomic_load_explicit(&dt__profile_active, memory_order_relaxed) != 0);
}

/* A begin/end pair on the stack. start == 0 means "not recording". */
typedef struct dt__profile_scope {
  const char *name;
  uint64_t start;
  uint8_t category;
  uint8_t lane;
} dt__profile_scope;

static inline void dt__profile_begin(dt__profile_scope *scope, const char *name,
                                     dt__profile_category category, dt_profiler_lane lane) {
  scope->start = 0;
  if (dt__profile_enabled()) {
    scope->name = name;
    scope->category = (uint8_t)category;
    scope->lane = (uint8_t)lane;
    scope->start = dt__profile_now();
  }
}

static inline void dt__profile_end(const dt__profile_scope *scope) {
  if (DT_UNLIKELY(scope->start != 0)) {
    dt__profile_record(scope->name, (dt__profile_category)scope->category,
                       (dt_profiler_lane)scope->lane, scope->start, dt__profile_now());
  }
}

static inline void dt__profile_end_shape(const dt__profile_scope *scope, int ndim,
                                         const int64_t *shape) {
  if (DT_UNLIKELY(scope->start != 0)) {
    dt__profile_record_shape(scope->name, (dt__profile_category)scope->category,
                             (dt_profiler_lane)scope->lane, scope->start, dt__profile_now(), ndim,
                             shape);
  }
}

static inline void dt__profile_end_bytes(const dt__profile_scope *scope, int64_t bytes,
                                         int64_t group_size) {
  if (DT_UNLIKELY(scope->start != 0)) {
    dt__profile_record_bytes(scope->name, (dt__profile_category)scope->category,
                             (dt_profiler_lane)scope->lane, scope->start, dt__profile_now(), bytes,
                             group_size);
  }
}

static inline void dt__profile_end_text(const dt__profile_scope *scope, const char *text) {
  if (DT_UNLIKELY(scope->start != 0)) {
    dt__profile_record_text(scope->name, (dt__profile_category)scope->category,
                            (dt_profiler_lane)scope->lane, scope->start, dt__profile_now(), text);
  }
}

#endif /* DT_PROFILE_IMPL_H */
