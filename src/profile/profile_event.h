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

/* ---- Device timing ----------------------------------------------------------------------
 * A device kind whose work runs on queues the host does not wait for (CUDA streams) registers
 * a timer: begin/end put markers (CUDA events) on a queue around work as it is queued, and
 * flush later turns every finished pair into a device event of the current profiler
 * (dt__profile_record_device), with the rank of the thread that queued it. Exported as one
 * Chrome process per device labelled with the timer's label ("GPU", as PyTorch labels its
 * GPU processes) and one thread per queue, so that `dtensor trace stats` computes GPU
 * utilization from them (seed 002's compute_utilization). */
/* Work a device queued (a GPU kernel, a collective on a stream), timed by the device's own
 * markers (CUDA events) and resolved into CLOCK_MONOTONIC ns by its timer. */
typedef struct dt__profile_device_event {
  const char *name; /* static, like every event name */
  uint64_t start_ns, end_ns;
  int64_t bytes; /* collectives: bytes through this rank; -1 for none */
  int32_t rank;  /* the rank whose thread queued it */
  int32_t kind;  /* device kind */
  int32_t device;
  int32_t track; /* the queue (stream) on that device: one Chrome thread per track */
  uint8_t category;
  bool comm_track; /* a communication queue (NCCL's stream): its thread is named "comm ..." */
} dt__profile_device_event;

typedef struct dt__profile_device_timer {
  const char *label; /* process_labels of its devices' processes: "GPU" */
  const char *name;  /* process_name prefix: "GPU" gives "GPU 0" */
  /* A marker before work queued next on device `index`'s queue (NULL: the calling thread's
   * current queue); comm says the queue is a communication queue. Returns a token, or NULL
   * when it cannot time (the work then goes untimed). */
  void *(*begin)(int index, void *queue, bool comm);
  /* A marker after the work; the pair is resolved by flush. Takes the token over. */
  void (*end)(void *token, const char *name, dt__profile_category category, int64_t bytes,
              int rank);
  /* Waits for every pending pair and records it (dt__profile_record_device). */
  void (*flush)(void);
} dt__profile_device_timer;

/* Registers the timer of a device kind (NULL unregisters). Not thread-safe: at start-up. */
void dt__profile_register_device_timer(int kind, const dt__profile_device_timer *timer);

/* The token of a timed stretch of device work on device `device_key` (kind | index << 8), or
 * NULL when no profiler records, the kind has no timer, or it cannot time. Cheap when NULL. */
void *dt__profile_device_begin(uint32_t device_key, void *queue, bool comm);
/* Ends a stretch begun with dt__profile_device_begin (token may be NULL: nothing). */
void dt__profile_device_end(uint32_t device_key, void *token, const char *name,
                            dt__profile_category category, int64_t bytes);

/* Records a resolved device event into the current profiler (whether or not it still runs:
 * timers flush while it stops). Times in CLOCK_MONOTONIC ns. Thread-safe. */
void dt__profile_record_device(const dt__profile_device_event *event);

/* The timer label and process name prefix of a kind ("GPU", ...), or NULL. */
const dt__profile_device_timer *dt__profile_device_timer_of(int kind);

/* Chrome "cat" string of a category. */
const char *dt__profile_category_name(dt__profile_category category);

/* The benchmark helper behind dt_benchmark_write_chrome_trace: warm up, time `runs` calls of fn
 * without the profiler (*time_us), time them again while recording (*profiled_us, may be
 * NULL) and write the trace to path. `what` names the public function in messages. Trace
 * analysis (dt_benchmark_utilization) builds on it. */
dt_status dt__benchmark_dump(const char *what, dt_benchmark_fn fn, void *arg, const char *path,
                             int runs, double *time_us, double *profiled_us);

#endif /* DT_PROFILE_EVENT_H */
