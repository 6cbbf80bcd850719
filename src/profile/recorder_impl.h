/* Private state of the recorder, shared by the recorder and the Chrome trace writer. */
#ifndef DT_RECORDER_IMPL_H
#define DT_RECORDER_IMPL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "profile/profile_event.h"

/* Events per chunk: 4096 x 64 bytes = 256 KiB, so a malloc every 4096 events at most. */
#define DT__PROFILE_CHUNK_EVENTS 4096
#define DT__PROFILE_NAME_BLOCK 4096

typedef struct dt__profile_chunk {
  struct dt__profile_chunk *next;
  size_t count; /* filled events; the tail chunk's count is its thread's cursor */
  dt__profile_event events[DT__PROFILE_CHUNK_EVENTS];
} dt__profile_chunk;

/* Copies of user range names, owned by the thread buffer. */
typedef struct dt__profile_name_block {
  struct dt__profile_name_block *next;
  size_t used, capacity;
  char data[];
} dt__profile_name_block;

/* One recording thread (with one rank) of one profiler. Owned by the profiler. */
typedef struct dt__profile_thread {
  struct dt__profile_thread *next;
  int rank;
  int order; /* registration order, to give each thread of a rank its own pair of lanes */
  dt__profile_chunk *head, *tail;
  dt__profile_event *cursor, *limit;
  dt__profile_name_block *names;
  int64_t dropped;
} dt__profile_thread;

struct dt_profiler {
  uint64_t session;
  pthread_mutex_t lock; /* guards the thread list (registration is rare) */
  dt__profile_thread *threads;
  int n_threads;
  bool running;
  bool ever_started;
  /* Clock anchors: the tick and CLOCK_MONOTONIC ns at the first start and the last stop,
   * which convert ticks to absolute monotonic microseconds at export. */
  uint64_t start_tick, start_ns, stop_tick, stop_ns;
  /* Device events (guarded by lock): recorded when a device timer resolves them. */
  dt__profile_device_event *device_events;
  size_t n_device_events, device_capacity;
  int64_t device_dropped;
};

/* Events filled in a chunk of a thread. */
static inline size_t dt__profile_chunk_count(const dt__profile_thread *thread,
                                             const dt__profile_chunk *chunk) {
  return chunk == thread->tail ? (size_t)(thread->cursor - chunk->events) : chunk->count;
}

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t dt__profile_monotonic_ns(void);

/* Nanoseconds per tick for this profiler's events (1 for the monotonic clock). */
double dt__profile_ns_per_tick(const dt_profiler *profiler);

/* Name of the clock in use: "tsc" or "monotonic". */
const char *dt__profile_clock_name(void);

#endif /* DT_RECORDER_IMPL_H */
