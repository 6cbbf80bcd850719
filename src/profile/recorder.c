/* The event recorder: the profiler object, per-thread chunked buffers, user ranges, clock. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#define DT_PROFILE_HAVE_TSC 1
#endif

#include "profile/recorder_impl.h"

atomic_int dt__profile_active;

/* dt__profile_enabled of profile_impl.h, which this file does not include (that header's
 * inline fast path calls into this file). */
static inline bool recording(void) {
  return DT_UNLIKELY(atomic_load_explicit(&dt__profile_active, memory_order_relaxed) != 0);
}

/* The running (or last started, not yet destroyed) profiler's session id; a thread whose
 * cached session differs registers anew. 0 means none. */
static atomic_uint_least64_t current_session;
static dt_profiler *_Atomic current_profiler;
static atomic_uint_least64_t next_session = 1;
static pthread_mutex_t start_lock = PTHREAD_MUTEX_INITIALIZER;

static _Thread_local dt__profile_thread *tls_thread;
static _Thread_local uint64_t tls_session;
static _Thread_local int tls_rank;

/* ---- Clock -------------------------------------------------------------------------------
 * clock_gettime costs ~20 ns here, twice per event; the invariant TSC costs a few ns and is
 * what the kernel itself uses as clocksource on such machines. Ticks are converted to ns
 * with a ratio measured once (2 ms) and refined by each profiler's start/stop anchors. */

static bool use_tsc;
static double calibrated_ns_per_tick = 1.0;
static pthread_once_t clock_once = PTHREAD_ONCE_INIT;

uint64_t dt__profile_monotonic_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void clock_init(void) {
  static const char *const clocks[] = {"monotonic", "tsc"};
  int choice = dt__env_choice("DT_PROFILE_CLOCK", clocks, 2,
                              "the default (the invariant TSC where there is one)");
#ifdef DT_PROFILE_HAVE_TSC
  if (choice == 0) return;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0x80000007u, &a, &b, &c, &d) || !(d & (1u << 8))) return; /* not invariant */
  uint64_t ns0 = dt__profile_monotonic_ns(), tick0 = __builtin_ia32_rdtsc();
  uint64_t ns1 = ns0, tick1 = tick0;
  while (ns1 - ns0 < 2000000u) {
    ns1 = dt__profile_monotonic_ns();
    tick1 = __builtin_ia32_rdtsc();
  }
  if (tick1 <= tick0) return;
  calibrated_ns_per_tick = (double)(ns1 - ns0) / (double)(tick1 - tick0);
  use_tsc = true;
#else
  (void)choice;
#endif
}

uint64_t dt__profile_now(void) {
#ifdef DT_PROFILE_HAVE_TSC
  if (DT_LIKELY(use_tsc)) return __builtin_ia32_rdtsc() | 1u;
#endif
  return dt__profile_monotonic_ns() | 1u; /* never 0: 0 marks a scope that is not recording */
}

const char *dt__profile_clock_name(void) { return use_tsc ? "tsc" : "monotonic"; }

double dt__profile_ns_per_tick(const dt_profiler *profiler) {
  if (!use_tsc) return 1.0;
  /* Over 50 ms or more the profiler's own anchors measure the ratio better than the 2 ms
   * calibration; both read the same two clocks. */
  if (profiler->stop_ns > profiler->start_ns + 50000000u &&
      profiler->stop_tick > profiler->start_tick) {
    return (double)(profiler->stop_ns - profiler->start_ns) /
           (double)(profiler->stop_tick - profiler->start_tick);
  }
  return calibrated_ns_per_tick;
}

/* ---- Profiler lifetime ------------------------------------------------------------------- */

dt_status dt_profiler_create(dt_profiler **out) {
  if (!out) return dt__error(DT_ERR_INVALID, "dt_profiler_create: out is NULL");
  *out = NULL;
  pthread_once(&clock_once, clock_init);
  dt_profiler *p = dt__calloc(sizeof *p);
  if (!p) return dt__error(DT_ERR_NOMEM, "dt_profiler_create: out of memory");
  if (pthread_mutex_init(&p->lock, NULL) != 0) {
    dt__free(p);
    return dt__error(DT_ERR_NOMEM, "dt_profiler_create: cannot create a mutex");
  }
  p->session = atomic_fetch_add(&next_session, 1);
  *out = p;
  return DT_OK;
}

/* ---- Chunk pool ---------------------------------------------------------------------------
 * Touching fresh memory costs more than recording (on this VM a page fault per 64 events adds
 * ~20 ns an event), so chunks of destroyed profilers are kept for the next one (up to
 * POOL_KEEP), and dt_profiler_reserve fills the pool with touched chunks up front. */

#define POOL_KEEP 64 /* 16 MiB */

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static dt__profile_chunk *pool;
static int64_t pool_count;

static dt__profile_chunk *chunk_take(void) {
  dt__profile_chunk *c = NULL;
  pthread_mutex_lock(&pool_lock);
  if (pool) {
    c = pool;
    pool = c->next;
    pool_count--;
  }
  pthread_mutex_unlock(&pool_lock);
  return c ? c : dt__alloc(sizeof *c);
}

/* Returns a list of chunks to the pool, keeping at most `keep` there; frees the rest. */
static void chunks_give(dt__profile_chunk *c, int64_t keep) {
  while (c) {
    dt__profile_chunk *next = c->next;
    pthread_mutex_lock(&pool_lock);
    bool kept = pool_count < keep;
    if (kept) {
      c->next = pool;
      pool = c;
      pool_count++;
    }
    pthread_mutex_unlock(&pool_lock);
    if (!kept) dt__free(c);
    c = next;
  }
}

dt_status dt_profiler_reserve(int64_t events) {
  if (events < 0)
    return dt__error(DT_ERR_INVALID, "dt_profiler_reserve: events %lld < 0", (long long)events);
  int64_t want = (events + DT__PROFILE_CHUNK_EVENTS - 1) / DT__PROFILE_CHUNK_EVENTS;
  pthread_mutex_lock(&pool_lock);
  int64_t have = pool_count;
  pthread_mutex_unlock(&pool_lock);
  for (int64_t i = have; i < want; i++) {
    dt__profile_chunk *c = dt__alloc(sizeof *c);
    if (!c)
      return dt__error(DT_ERR_NOMEM, "dt_profiler_reserve: out of memory after %lld events",
                       (long long)(i * DT__PROFILE_CHUNK_EVENTS));
    memset(c, 0, sizeof *c); /* touch every page now, not while recording */
    c->next = NULL;
    chunks_give(c, INT64_MAX);
  }
  return DT_OK;
}

void dt_profiler_release_memory(void) {
  pthread_mutex_lock(&pool_lock);
  dt__profile_chunk *c = pool;
  pool = NULL;
  pool_count = 0;
  pthread_mutex_unlock(&pool_lock);
  while (c) {
    dt__profile_chunk *next = c->next;
    dt__free(c);
    c = next;
  }
}

static void free_thread(dt__profile_thread *t) {
  chunks_give(t->head, POOL_KEEP);
  for (dt__profile_name_block *b = t->names; b;) {
    dt__profile_name_block *next = b->next;
    dt__free(b);
    b = next;
  }
  dt__free(t);
}

void dt_profiler_destroy(dt_profiler *profiler) {
  if (!profiler) return;
  pthread_mutex_lock(&start_lock);
  if (atomic_load(&current_profiler) == profiler) {
    atomic_store(&dt__profile_active, 0);
    atomic_store(&current_session, 0);
    atomic_store(&current_profiler, NULL);
  }
  pthread_mutex_unlock(&start_lock);
  for (dt__profile_thread *t = profiler->threads; t;) {
    dt__profile_thread *next = t->next;
    free_thread(t);
    t = next;
  }
  dt__free(profiler->device_events);
  pthread_mutex_destroy(&profiler->lock);
  dt__free(profiler);
}

dt_status dt_profiler_start(dt_profiler *profiler) {
  if (!profiler) return dt__error(DT_ERR_INVALID, "dt_profiler_start: profiler is NULL");
  pthread_mutex_lock(&start_lock);
  dt_profiler *running = atomic_load(&current_profiler);
  if (running && running->running) {
    pthread_mutex_unlock(&start_lock);
    return dt__error(DT_ERR_INVALID, "dt_profiler_start: %s",
                     running == profiler ? "this profiler already runs" : "another profiler runs");
  }
  if (!profiler->ever_started) {
    profiler->start_ns = dt__profile_monotonic_ns();
    profiler->start_tick = dt__profile_now();
    profiler->ever_started = true;
  }
  profiler->running = true;
  atomic_store(&current_profiler, profiler);
  atomic_store(&current_session, profiler->session);
  atomic_store(&dt__profile_active, 1);
  pthread_mutex_unlock(&start_lock);
  return DT_OK;
}

static void flush_device_timers(void);

dt_status dt_profiler_stop(dt_profiler *profiler) {
  if (!profiler) return dt__error(DT_ERR_INVALID, "dt_profiler_stop: profiler is NULL");
  pthread_mutex_lock(&start_lock);
  if (!profiler->running) {
    pthread_mutex_unlock(&start_lock);
    return dt__error(DT_ERR_INVALID, "dt_profiler_stop: the profiler is not running");
  }
  /* Device work queued while it ran lands in it: wait for its markers now. */
  flush_device_timers();
  atomic_store(&dt__profile_active, 0);
  profiler->running = false;
  profiler->stop_ns = dt__profile_monotonic_ns();
  profiler->stop_tick = dt__profile_now();
  pthread_mutex_unlock(&start_lock);
  return DT_OK;
}

/* ---- Per-thread buffers ------------------------------------------------------------------ */

/* Slow path: the calling thread has no buffer in the current session (first event of this
 * thread, a new profiler, or a new rank). */
static dt__profile_thread *register_thread(uint64_t session) {
  dt_profiler *p = atomic_load(&current_profiler);
  if (!p || p->session != session) return NULL;
  dt__profile_thread *t = dt__calloc(sizeof *t);
  if (!t) return NULL;
  t->rank = tls_rank;
  pthread_mutex_lock(&p->lock);
  t->order = p->n_threads++;
  dt__profile_thread **tail = &p->threads;
  while (*tail) tail = &(*tail)->next;
  *tail = t;
  pthread_mutex_unlock(&p->lock);
  tls_thread = t;
  tls_session = session;
  return t;
}

static inline dt__profile_thread *current_thread(void) {
  uint64_t session = atomic_load_explicit(&current_session, memory_order_relaxed);
  if (DT_LIKELY(tls_session == session && tls_thread)) return tls_thread;
  return register_thread(session);
}

static bool grow(dt__profile_thread *t) {
  dt__profile_chunk *c = chunk_take();
  if (!c) return false;
  c->next = NULL;
  c->count = 0;
  if (t->tail) {
    t->tail->count = DT__PROFILE_CHUNK_EVENTS;
    t->tail->next = c;
  } else {
    t->head = c;
  }
  t->tail = c;
  t->cursor = c->events;
  t->limit = c->events + DT__PROFILE_CHUNK_EVENTS;
  return true;
}

/* A slot for one more event of the calling thread, or NULL (not recording, out of memory). */
static inline dt__profile_event *next_slot(void) {
  if (!recording()) return NULL;
  dt__profile_thread *t = current_thread();
  if (DT_UNLIKELY(!t)) return NULL;
  if (DT_UNLIKELY(t->cursor == t->limit) && !grow(t)) {
    t->dropped++;
    return NULL;
  }
  return t->cursor++;
}

static inline dt__profile_event *fill(const char *name, dt__profile_category category,
                                      dt_profiler_lane lane, uint64_t start, uint64_t end,
                                      dt__profile_args_kind kind) {
  dt__profile_event *e = next_slot();
  if (!e) return NULL;
  e->name = name;
  e->start = start;
  e->end = end;
  e->category = (uint8_t)category;
  e->lane = (uint8_t)lane;
  e->args_kind = (uint8_t)kind;
  e->ndim = 0;
  return e;
}

void dt__profile_record(const char *name, dt__profile_category category, dt_profiler_lane lane,
                        uint64_t start, uint64_t end) {
  fill(name, category, lane, start, end, DT__PROFILE_ARGS_NONE);
}

void dt__profile_record_text(const char *name, dt__profile_category category, dt_profiler_lane lane,
                             uint64_t start, uint64_t end, const char *text) {
  dt__profile_event *e = fill(name, category, lane, start, end, DT__PROFILE_ARGS_TEXT);
  if (!e) return;
  size_t n = 0;
  if (text) {
    while (n < DT__PROFILE_TEXT_CAPACITY - 1 && text[n]) n++;
    memcpy(e->args.text, text, n);
  }
  e->args.text[n] = '\0';
}

void dt__profile_record_shape(const char *name, dt__profile_category category,
                              dt_profiler_lane lane, uint64_t start, uint64_t end, int ndim,
                              const int64_t *shape) {
  dt__profile_event *e = fill(name, category, lane, start, end, DT__PROFILE_ARGS_SHAPE);
  if (!e) return;
  if (ndim < 0 || !shape) ndim = 0;
  e->ndim = (uint8_t)(ndim > 255 ? 255 : ndim);
  for (int i = 0; i < ndim && i < DT__PROFILE_SHAPE_CAPACITY; i++) e->args.ints[i] = shape[i];
}

void dt__profile_record_bytes(const char *name, dt__profile_category category,
                              dt_profiler_lane lane, uint64_t start, uint64_t end, int64_t bytes,
                              int64_t group_size) {
  dt__profile_event *e = fill(name, category, lane, start, end, DT__PROFILE_ARGS_BYTES);
  if (!e) return;
  e->args.ints[0] = bytes;
  e->args.ints[1] = group_size;
}

const char *dt__profile_category_name(dt__profile_category category) {
  static const char *const names[DT__PROFILE_CAT_COUNT] = {
      [DT__PROFILE_CAT_OP] = "op",
      [DT__PROFILE_CAT_KERNEL] = "kernel",
      [DT__PROFILE_CAT_COLLECTIVE] = "collective",
      [DT__PROFILE_CAT_WAIT] = "wait",
      [DT__PROFILE_CAT_REDISTRIBUTE] = "redistribute",
      [DT__PROFILE_CAT_USER] = "user_annotation",
  };
  return (unsigned)category < DT__PROFILE_CAT_COUNT ? names[category] : "unknown";
}

/* ---- Ranks and user ranges --------------------------------------------------------------- */

dt_status dt_profiler_set_rank(int rank) {
  if (rank < 0) return dt__error(DT_ERR_INVALID, "dt_profiler_set_rank: rank %d < 0", rank);
  if (rank != tls_rank) {
    tls_rank = rank;
    tls_session = 0; /* the next event registers a buffer for the new rank */
    tls_thread = NULL;
  }
  return DT_OK;
}

#define DT_PROFILE_MAX_RANGES 64

typedef struct open_range {
  const char *name; /* the copy in the thread's buffer, NULL if not recording */
  uint64_t start;
  uint64_t session;
} open_range;

static _Thread_local open_range tls_ranges[DT_PROFILE_MAX_RANGES];
static _Thread_local int tls_range_depth;

/* Copies a user range name into the thread's name blocks. */
static const char *intern_name(dt__profile_thread *t, const char *name) {
  size_t n = strlen(name) + 1;
  dt__profile_name_block *b = t->names;
  if (!b || b->capacity - b->used < n) {
    size_t capacity = n > DT__PROFILE_NAME_BLOCK ? n : DT__PROFILE_NAME_BLOCK;
    b = dt__alloc(sizeof *b + capacity);
    if (!b) return NULL;
    b->used = 0;
    b->capacity = capacity;
    b->next = t->names;
    t->names = b;
  }
  char *copy = b->data + b->used;
  memcpy(copy, name, n);
  b->used += n;
  return copy;
}

dt_status dt_profiler_range_push(const char *name) {
  if (!name) return dt__error(DT_ERR_INVALID, "dt_profiler_range_push: name is NULL");
  if (tls_range_depth >= DT_PROFILE_MAX_RANGES) {
    return dt__error(DT_ERR_INVALID, "dt_profiler_range_push: ranges nest deeper than %d ('%s')",
                     DT_PROFILE_MAX_RANGES, name);
  }
  open_range *r = &tls_ranges[tls_range_depth++];
  r->name = NULL;
  if (recording()) {
    dt__profile_thread *t = current_thread();
    if (t) {
      r->name = intern_name(t, name);
      r->session = tls_session;
      r->start = dt__profile_now();
    }
  }
  return DT_OK;
}

dt_status dt_profiler_range_pop(void) {
  if (tls_range_depth == 0) {
    return dt__error(DT_ERR_INVALID, "dt_profiler_range_pop: no open range on this thread");
  }
  open_range *r = &tls_ranges[--tls_range_depth];
  if (r->name && recording() && r->session == tls_session) {
    dt__profile_record(r->name, DT__PROFILE_CAT_USER, DT_PROFILER_LANE_COMPUTE, r->start,
                       dt__profile_now());
  }
  return DT_OK;
}

/* ---- Counters ---------------------------------------------------------------------------- */

int64_t dt_profiler_event_count(const dt_profiler *profiler, int rank, int lane) {
  if (!profiler) return 0;
  int64_t n = 0;
  for (const dt__profile_thread *t = profiler->threads; t; t = t->next) {
    if (rank >= 0 && t->rank != rank) continue;
    for (const dt__profile_chunk *c = t->head; c; c = c->next) {
      size_t count = dt__profile_chunk_count(t, c);
      if (lane < 0) {
        n += (int64_t)count;
        continue;
      }
      for (size_t i = 0; i < count; i++) n += c->events[i].lane == lane;
    }
  }
  return n;
}

int64_t dt_profiler_dropped_count(const dt_profiler *profiler) {
  if (!profiler) return 0;
  int64_t n = profiler->device_dropped;
  for (const dt__profile_thread *t = profiler->threads; t; t = t->next) n += t->dropped;
  return n;
}

/* ---- Device timing (profile_event.h) ------------------------------------------------------ */

#define DT__PROFILE_TIMER_KINDS 8
static const dt__profile_device_timer *device_timers[DT__PROFILE_TIMER_KINDS];

void dt__profile_register_device_timer(int kind, const dt__profile_device_timer *timer) {
  if (kind >= 0 && kind < DT__PROFILE_TIMER_KINDS) device_timers[kind] = timer;
}

const dt__profile_device_timer *dt__profile_device_timer_of(int kind) {
  return kind >= 0 && kind < DT__PROFILE_TIMER_KINDS ? device_timers[kind] : NULL;
}

static void flush_device_timers(void) {
  for (int k = 0; k < DT__PROFILE_TIMER_KINDS; k++) {
    if (device_timers[k] && device_timers[k]->flush) device_timers[k]->flush();
  }
}

void *dt__profile_device_begin(uint32_t device_key, void *queue, bool comm) {
  if (!recording()) return NULL;
  const dt__profile_device_timer *timer = dt__profile_device_timer_of((int)(device_key & 0xffu));
  return timer ? timer->begin((int)(device_key >> 8), queue, comm) : NULL;
}

void dt__profile_device_end(uint32_t device_key, void *token, const char *name,
                            dt__profile_category category, int64_t bytes) {
  if (!token) return;
  const dt__profile_device_timer *timer = dt__profile_device_timer_of((int)(device_key & 0xffu));
  if (timer) timer->end(token, name, category, bytes, tls_rank);
}

void dt__profile_record_device(const dt__profile_device_event *event) {
  dt_profiler *p = atomic_load(&current_profiler);
  if (!p || !event) return;
  pthread_mutex_lock(&p->lock);
  if (p->n_device_events == p->device_capacity) {
    size_t capacity = p->device_capacity ? 2 * p->device_capacity : 256;
    dt__profile_device_event *grown = dt__alloc(sizeof *grown * capacity);
    if (!grown) {
      p->device_dropped++;
      pthread_mutex_unlock(&p->lock);
      return;
    }
    if (p->n_device_events) {
      memcpy(grown, p->device_events, sizeof *grown * p->n_device_events);
    }
    dt__free(p->device_events);
    p->device_events = grown;
    p->device_capacity = capacity;
  }
  p->device_events[p->n_device_events++] = *event;
  pthread_mutex_unlock(&p->lock);
}
