/*
 * The profile module's records and out-of-line entry points: the event layout, the clock and
 * the functions that append events. recorder.c implements them and includes only this (not
 * profile_impl.h, whose inline fast path calls into recorder.c: calls go one way).
 */
#ifndef DT_PROFILE_EVENT_H
#define DT_PROFILE_EVENT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/core_impl.h"
#include "dtensor/profile.h"

/* Event categories; their Chrome "cat" strings are in dt__profile_category_name. */
typedef enum dt__profile_category {
  DT__PROFILE_CAT_OP = 0,       /* "op": a dispatched op, local or distributed */
  DT__PROFILE_CAT_KERNEL,       /* "kernel": the local kernel of an op */
  DT__PROFILE_CAT_COLLECTIVE,   /* "collective": all_reduce, all_gather, ... */
  DT__PROFILE_CAT_WAIT,         /* "wait": waiting on an async work handle */
  DT__PROFILE_CAT_REDISTRIBUTE, /* "redistribute": a placement change of one tensor */
  DT__PROFILE_CAT_USER,         /* "user_annotation": dt_profiler_range_push/pop */
  DT__PROFILE_CAT_COUNT
} dt__profile_category;

/* What an event's small argument payload holds. */
typedef enum dt__profile_args_kind {
  DT__PROFILE_ARGS_NONE = 0,
  DT__PROFILE_ARGS_TEXT,  /* a short string, copied (≤ 31 bytes, longer is cut) */
  DT__PROFILE_ARGS_SHAPE, /* up to 4 dims, exported as "shape":[...] ("ndim" if more) */
  DT__PROFILE_ARGS_BYTES, /* ints[0] bytes, ints[1] group size: "bytes":N,"group_size":G */
} dt__profile_args_kind;

#define DT__PROFILE_TEXT_CAPACITY 32
#define DT__PROFILE_SHAPE_CAPACITY 4

/* One complete event: 64 bytes, one cache line. Times are clock ticks (see
 * dt__profile_now). */
typedef struct dt__profile_event {
  const char *name;
  uint64_t start;
  uint64_t end;
  uint8_t category;
  uint8_t lane;
  uint8_t args_kind;
  uint8_t ndim; /* for SHAPE: the tensor's real ndim */
  uint32_t reserved;
  union {
    char text[DT__PROFILE_TEXT_CAPACITY];
    int64_t ints[DT__PROFILE_SHAPE_CAPACITY];
  } args;
} dt__profile_event;

/* Nonzero while a profiler records. Read relaxed: it only gates recording. */
extern atomic_int dt__profile_active;

/* The profiler clock: the TSC where it is invariant (x86-64), else CLOCK_MONOTONIC in ns.
 * Ticks convert to microseconds at export. Never returns 0. */
uint64_t dt__profile_now(void);

/* Appends a complete event for the calling thread (no-op when not recording). */
void dt__profile_record(const char *name, dt__profile_category category, dt_profiler_lane lane,
                        uint64_t start, uint64_t end);
void dt__profile_record_text(const char *name, dt__profile_category category, dt_profiler_lane lane,
                             uint64_t start, uint64_t end, const char *text);
void dt__profile_record_shape(const char *name, dt__profile_category category,
                              dt_profiler_lane lane, uint64_t start, uint64_t end, int ndim,
                              const int64_t *shape);
void dt__profile_record_bytes(const char *name, dt__profile_category category,
                              dt_profiler_lane lane, uint64_t start, uint64_t end, int64_t bytes,
                              int64_t group_size);

/* Chrome "cat" string of a category. */
const char *dt__profile_category_name(dt__profile_category category);

/* The benchmark helper behind dt_benchmark_write_chrome_trace: warm up, time `runs` calls of fn
 * without the profiler (*time_us), time them again while recording (*profiled_us, may be
 * NULL) and write the trace to path. `what` names the public function in messages. Trace
 * analysis (dt_benchmark_utilization) builds on it. */
dt_status dt__benchmark_dump(const char *what, dt_benchmark_fn fn, void *arg, const char *path,
                             int runs, double *time_us, double *profiled_us);

#endif /* DT_PROFILE_EVENT_H */
