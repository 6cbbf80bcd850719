/* MPI backend: the process-wide runtime. MPI is initialised once (MPI_THREAD_MULTIPLE when
 * the library offers it, else whatever it gives, with every backend MPI call serialised by
 * a lock) and finalised at exit when this library initialised it. Also the error strings,
 * dtype mapping, reduction operators and the timeout watchdog. */
/* glibc declares on_exit (the exit handler that sees the exit status) with _DEFAULT_SOURCE. */
#define _DEFAULT_SOURCE 1
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/mpi/mpi_impl.h"

int64_t dt__mp_max_count = INT_MAX;
/* Below MPI_THREAD_MULTIPLE every MPI call of the backend holds call_lock. */
static bool serialize_calls = false;
static pthread_mutex_t call_lock = PTHREAD_MUTEX_INITIALIZER;

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static bool runtime_ready = false;
static bool we_initialized = false;
static MPI_Op op_fmax = MPI_OP_NULL, op_fmin = MPI_OP_NULL;
/* A duplicate of MPI_COMM_WORLD used only by the exit handshake, so that it cannot match
 * anything a group does. */
static MPI_Comm exit_comm = MPI_COMM_NULL;
atomic_int dt__mp_live_groups;

/* The calling thread's latest collective (the exit handler runs on the exiting thread). */
static _Thread_local struct {
  const char *op_name; /* static strings */
  uint64_t seq;
  int rank, size;
  char group[64];
} last_collective;

void dt__mp_lock(void) {
  if (serialize_calls) pthread_mutex_lock(&call_lock);
}

void dt__mp_unlock(void) {
  if (serialize_calls) pthread_mutex_unlock(&call_lock);
}

void dt__mp_note_collective(const dt_comm *comm, const char *op_name, uint64_t seq) {
  last_collective.op_name = op_name;
  last_collective.seq = seq;
  last_collective.rank = comm->rank;
  last_collective.size = comm->size;
  memcpy(last_collective.group, comm->name, sizeof last_collective.group);
}

int64_t dt__mp_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void dt__mp_backoff_init(mp_backoff *backoff, const dt_comm *comm) {
  backoff->deadline_ns = dt__mp_deadline(dt__mp_now_ns(), comm->timeout_ms);
  backoff->spin_until_ns = 0;
  backoff->sleep_ns = 2000;
  backoff->round = 0;
}

void dt__mp_backoff_step(mp_backoff *backoff, const dt_comm *comm, const dt_coll_args *args,
                         uint64_t seq) {
  /* Read the clock once every 64 tests: a test is far cheaper than clock_gettime. */
  if ((backoff->round++ & 63) != 0) return;
  int64_t now = dt__mp_now_ns();
  if (now > backoff->deadline_ns) dt__mp_timeout(comm, args, seq);
  if (backoff->spin_until_ns == 0) backoff->spin_until_ns = now + 50000;
  if (now < backoff->spin_until_ns) return;
  struct timespec nap = {0, backoff->sleep_ns};
  nanosleep(&nap, NULL);
  if (backoff->sleep_ns < 1000000) backoff->sleep_ns *= 2;
}

/* ---- Reduction operators ---------------------------------------------------------------- */

/* inout = max(inout, in), NaN from either side winning (as dt__reduce_buffers does). */
#define FMAX(a, b) (((b) > (a) || (b) != (b)) ? (b) : (a))
#define FMIN(a, b) (((b) < (a) || (b) != (b)) ? (b) : (a))

/* inout = max or min(inout, in) over float or double; inlined into the two operators with
 * `max` constant. */
static inline void extremum(const void *in, void *inout, int len, MPI_Datatype type, bool max) {
  if (type == MPI_DOUBLE) {
    const double *a = in;
    double *b = inout;
    for (int i = 0; i < len; i++) b[i] = max ? FMAX(b[i], a[i]) : FMIN(b[i], a[i]);
  } else {
    const float *a = in;
    float *b = inout;
    for (int i = 0; i < len; i++) b[i] = max ? FMAX(b[i], a[i]) : FMIN(b[i], a[i]);
  }
}

static void fmax_fn(void *in, void *inout, int *len, MPI_Datatype *type) {
  extremum(in, inout, *len, *type, true);
}

static void fmin_fn(void *in, void *inout, int *len, MPI_Datatype *type) {
  extremum(in, inout, *len, *type, false);
}

MPI_Datatype dt__mp_move_type(dt_dtype dtype) {
  switch (dtype) {
  case DT_F32: return MPI_FLOAT;
  case DT_F64: return MPI_DOUBLE;
  case DT_BF16:
  case DT_F16: return MPI_UINT16_T;
  case DT_I64: return MPI_INT64_T;
  case DT_I32: return MPI_INT32_T;
  case DT_U8:
  case DT_BOOL:
  case DT_DTYPE_COUNT: break;
  }
  return MPI_UINT8_T;
}

void dt__mp_reduce_types(dt_dtype dtype, dt_reduce_op op, MPI_Datatype *type, MPI_Op *mpi_op) {
  bool sum = op == DT_REDUCE_SUM || op == DT_REDUCE_AVG;
  switch (dtype) {
  case DT_F32:
  case DT_F64:
  case DT_BF16: /* widened to f32 by the caller */
  case DT_F16:
    *type = dtype == DT_F64 ? MPI_DOUBLE : MPI_FLOAT;
    *mpi_op = sum                    ? MPI_SUM
              : op == DT_REDUCE_PROD ? MPI_PROD
              : op == DT_REDUCE_MAX  ? op_fmax
                                     : op_fmin;
    return;
  case DT_I64:
  case DT_I32:
    /* Two's complement sums and products are the same bits signed or unsigned; unsigned
     * makes the wrap-around defined. max/min need the signed order. */
    if (sum || op == DT_REDUCE_PROD) {
      *type = dtype == DT_I64 ? MPI_UINT64_T : MPI_UINT32_T;
      *mpi_op = sum ? MPI_SUM : MPI_PROD;
    } else {
      *type = dtype == DT_I64 ? MPI_INT64_T : MPI_INT32_T;
      *mpi_op = op == DT_REDUCE_MAX ? MPI_MAX : MPI_MIN;
    }
    return;
  case DT_U8:
    *type = MPI_UINT8_T;
    *mpi_op = sum                    ? MPI_SUM
              : op == DT_REDUCE_PROD ? MPI_PROD
              : op == DT_REDUCE_MAX  ? MPI_MAX
                                     : MPI_MIN;
    return;
  case DT_BOOL:
  case DT_DTYPE_COUNT: break;
  }
  /* bool: sum and max are "or", prod and min "and" (logical ops read any nonzero byte as
   * true and write 0 or 1). */
  *type = MPI_UINT8_T;
  *mpi_op = sum || op == DT_REDUCE_MAX ? MPI_LOR : MPI_LAND;
}

/* ---- Errors and aborts ------------------------------------------------------------------ */

void dt__mp_error_text(int rc, char text[MPI_MAX_ERROR_STRING + 1]) {
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) {
    snprintf(text, MPI_MAX_ERROR_STRING + 1, "MPI error code %d", rc);
  } else {
    text[len] = '\0';
  }
}

dt_status dt__mp_fail(int rc, const dt_comm *comm, const char *op, const char *call) {
  char text[MPI_MAX_ERROR_STRING + 1];
  int error_class = MPI_ERR_OTHER;
  dt__mp_error_text(rc, text);
  MPI_Error_class(rc, &error_class);
  dt_status status = error_class == MPI_ERR_TRUNCATE ? DT_ERR_MISMATCH : DT_ERR_COMM;
  return dt__error(status, "%s: %s failed on group '%s' (rank %d of %d): %s", op, call, comm->name,
                   comm->rank, comm->size, text);
}

_Noreturn void dt__mp_abort_job(const char *message) {
  int world_rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  fprintf(stderr, "dtensor [MPI rank %d]: %s\n", world_rank, message);
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 3);
  /* MPI_Abort does not return; if an implementation does, do not carry on regardless. */
  abort();
}

static void timeout_message(char *buf, size_t size, const char *call, const char *group, int rank,
                            int group_size, uint64_t seq, int64_t timeout_ms) {
  snprintf(buf, size,
           "DT_ERR_TIMEOUT: %s on group '%s' (rank %d of %d, sequence number %llu) did not "
           "complete "
           "within the group's timeout of %lld ms; some peer never arrived. Aborting the MPI "
           "job rather than hanging (set DT_COMM_TIMEOUT_MS or dt_comm_set_timeout to change "
           "the timeout)",
           call, group, rank, group_size, (unsigned long long)seq, (long long)timeout_ms);
}

_Noreturn void dt__mp_timeout(const dt_comm *comm, const dt_coll_args *args, uint64_t seq) {
  char call[256], message[768];
  dt__coll_describe(args, comm->size, call, sizeof call);
  timeout_message(message, sizeof message, call, comm->name, comm->rank, comm->size, seq,
                  comm->timeout_ms);
  dt__error(DT_ERR_TIMEOUT, "%s", message);
  dt__mp_abort_job(message);
}

/* ---- The watchdog ----------------------------------------------------------------------
 * Each thread that makes blocking MPI calls owns one slot. Registering a call writes the
 * slot's fields and then its deadline (release); the watchdog reads the deadline (acquire),
 * copies the fields and re-reads the generation to be sure they belong together. */

#define WATCH_SLOTS 256

typedef struct watch_slot {
  atomic_int_fast64_t deadline_ns; /* 0: no call in progress */
  atomic_uint gen;
  const char *op_name; /* static strings */
  uint64_t seq;
  int rank, size;
  int64_t timeout_ms;
  char group[64];
} watch_slot;

static watch_slot slots[WATCH_SLOTS];
static atomic_int slots_used;
static _Thread_local int my_slot = -1;
static atomic_int_fast64_t shortest_timeout_ms = INT64_MAX;
static pthread_t watchdog_thread;
static bool watchdog_running;
static pthread_mutex_t watchdog_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t watchdog_cond;
static bool watchdog_stop;

void dt__mp_watch_begin(const dt_comm *comm, const char *op_name, uint64_t seq) {
  if (DT_UNLIKELY(my_slot < 0)) {
    int slot = atomic_fetch_add(&slots_used, 1);
    /* More threads than slots: the extra ones go unwatched rather than fail. */
    if (slot >= WATCH_SLOTS) return;
    my_slot = slot;
  }
  if (my_slot >= WATCH_SLOTS) return;
  watch_slot *s = &slots[my_slot];
  atomic_fetch_add_explicit(&s->gen, 1, memory_order_relaxed);
  s->op_name = op_name;
  s->seq = seq;
  s->rank = comm->rank;
  s->size = comm->size;
  s->timeout_ms = comm->timeout_ms;
  memcpy(s->group, comm->name, sizeof s->group);
  if (comm->timeout_ms < atomic_load_explicit(&shortest_timeout_ms, memory_order_relaxed)) {
    atomic_store(&shortest_timeout_ms, comm->timeout_ms);
    pthread_mutex_lock(&watchdog_lock);
    pthread_cond_signal(&watchdog_cond);
    pthread_mutex_unlock(&watchdog_lock);
  }
  atomic_store_explicit(&s->deadline_ns, dt__mp_deadline(dt__mp_now_ns(), comm->timeout_ms),
                        memory_order_release);
}

void dt__mp_watch_end(void) {
  if (my_slot >= 0 && my_slot < WATCH_SLOTS) {
    atomic_store_explicit(&slots[my_slot].deadline_ns, 0, memory_order_relaxed);
  }
}

static void watchdog_check(void) {
  int used = atomic_load(&slots_used);
  if (used > WATCH_SLOTS) used = WATCH_SLOTS;
  int64_t now = dt__mp_now_ns();
  for (int i = 0; i < used; i++) {
    watch_slot *s = &slots[i];
    unsigned gen = atomic_load(&s->gen);
    int64_t deadline = atomic_load_explicit(&s->deadline_ns, memory_order_acquire);
    if (deadline == 0 || now < deadline) continue;
    char group[64], call[96], message[768];
    memcpy(group, s->group, sizeof group);
    group[sizeof group - 1] = '\0';
    snprintf(call, sizeof call, "%s", s->op_name ? s->op_name : "collective");
    uint64_t seq = s->seq;
    int rank = s->rank, size = s->size;
    int64_t timeout_ms = s->timeout_ms;
    if (atomic_load(&s->gen) != gen || atomic_load(&s->deadline_ns) != deadline) continue;
    timeout_message(message, sizeof message, call, group, rank, size, seq, timeout_ms);
    dt__mp_abort_job(message);
  }
}

static void *watchdog_main(void *arg) {
  (void)arg;
  pthread_mutex_lock(&watchdog_lock);
  while (!watchdog_stop) {
    /* Wake often enough to catch a timeout within about a quarter of it. */
    int64_t interval_ms = atomic_load(&shortest_timeout_ms) / 4;
    if (interval_ms < 2) interval_ms = 2;
    if (interval_ms > 100) interval_ms = 100;
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_nsec += (long)(interval_ms % 1000) * 1000000;
    until.tv_sec += (time_t)(interval_ms / 1000) + until.tv_nsec / 1000000000;
    until.tv_nsec %= 1000000000;
    pthread_cond_timedwait(&watchdog_cond, &watchdog_lock, &until);
    if (watchdog_stop) break;
    pthread_mutex_unlock(&watchdog_lock);
    watchdog_check();
    pthread_mutex_lock(&watchdog_lock);
  }
  pthread_mutex_unlock(&watchdog_lock);
  return NULL;
}

/* ---- Initialisation and finalisation ----------------------------------------------------- */

/* How long an exiting process that still holds groups waits for its peers to exit too. */
static int64_t exit_grace_ms(void) {
  return dt__env_int("DT_MPI_EXIT_GRACE_MS", 0, 600000, 1000, "the default (1000 ms)");
}

/* True when every process reaches this handshake within `grace_ms`: the whole job is
 * exiting, so MPI_Finalize will not wait on anyone. */
static bool peers_exit_too(int64_t grace_ms) {
  MPI_Request request = MPI_REQUEST_NULL;
  if (MPI_Ibarrier(exit_comm, &request) != MPI_SUCCESS) return false;
  int64_t deadline = dt__mp_now_ns() + grace_ms * 1000000;
  long sleep_ns = 2000;
  for (;;) {
    int flag = 0;
    if (MPI_Test(&request, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) return false;
    if (flag) return true;
    if (dt__mp_now_ns() > deadline) return false;
    struct timespec nap = {0, sleep_ns};
    nanosleep(&nap, NULL);
    if (sleep_ns < 1000000) sleep_ns *= 2;
  }
}

/* The process is leaving (exit() or a return from main) while some of its groups are alive
 * and its peers are not leaving with it: they may be waiting for it inside a collective,
 * and MPI_Finalize would block behind them until their timeout. End the job now. */
_Noreturn static void abort_leaving(int live, int64_t grace_ms) {
  char message[768];
  char group[sizeof last_collective.group];
  memcpy(group, last_collective.group, sizeof group);
  group[sizeof group - 1] = '\0';
  if (last_collective.op_name) {
    snprintf(message, sizeof message,
             "DT_ERR_ABORTED: the process is exiting (exit() or a return from main) with %d "
             "group(s) not destroyed, and its peers did not exit within %lld ms; its last "
             "collective was %s on group '%s' (rank %d of %d, sequence number %llu). Aborting "
             "the MPI job so that peers waiting for this rank do not hang (destroy every group "
             "before exiting to finish normally; DT_MPI_EXIT_GRACE_MS sets the wait)",
             live, (long long)grace_ms, last_collective.op_name, group, last_collective.rank,
             last_collective.size, (unsigned long long)last_collective.seq);
  } else {
    snprintf(message, sizeof message,
             "DT_ERR_ABORTED: the process is exiting (exit() or a return from main) with %d "
             "group(s) not destroyed, and its peers did not exit within %lld ms; it made no "
             "collective call. Aborting the MPI job so that peers waiting for this rank do "
             "not hang (destroy every group before exiting to finish normally)",
             live, (long long)grace_ms);
  }
  dt__mp_abort_job(message);
}

/* The process is exiting with a non-zero status: it failed. Its peers may be waiting for it
 * in a collective (or will call one), and, when it destroyed its groups first, nothing else
 * tells them it is gone: MPI_Finalize would leave them blocked until their timeout. End the
 * job now, with the process's status. */
_Noreturn static void abort_failing(int status, int live) {
  char message[768], groups[96];
  char group[sizeof last_collective.group];
  memcpy(group, last_collective.group, sizeof group);
  group[sizeof group - 1] = '\0';
  if (live > 0)
    snprintf(groups, sizeof groups, "with %d group(s) not destroyed", live);
  else
    snprintf(groups, sizeof groups, "after destroying its groups");
  if (last_collective.op_name) {
    snprintf(message, sizeof message,
             "DT_ERR_ABORTED: the process is exiting with status %d (exit() or a return from "
             "main) %s; its last collective was %s on group '%s' (rank %d of %d, sequence "
             "number %llu). Aborting the MPI job so that its peers do not wait for it until "
             "their timeout",
             status, groups, last_collective.op_name, group, last_collective.rank,
             last_collective.size, (unsigned long long)last_collective.seq);
  } else {
    snprintf(message, sizeof message,
             "DT_ERR_ABORTED: the process is exiting with status %d (exit() or a return from "
             "main) %s; it made no collective call. Aborting the MPI job so that its peers do "
             "not wait for it until their timeout",
             status, groups);
  }
  /* exit() flushes stdio only after its handlers: what the program printed must not be lost. */
  fflush(NULL);
  int world_rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  fprintf(stderr, "dtensor [MPI rank %d]: %s\n", world_rank, message);
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, status & 0xff ? status & 0xff : 1);
  abort();
}

/* At exit with the process's status (status_known: glibc's on_exit; else atexit, which does
 * not see it, and only the handshake below protects the peers). */
static void finalize_with(int status, bool status_known) {
  if (watchdog_running) {
    pthread_mutex_lock(&watchdog_lock);
    watchdog_stop = true;
    pthread_cond_signal(&watchdog_cond);
    pthread_mutex_unlock(&watchdog_lock);
    pthread_join(watchdog_thread, NULL);
    watchdog_running = false;
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  int live = atomic_load(&dt__mp_live_groups);
  if (status_known && status != 0) abort_failing(status, live);
  if (we_initialized && live > 0 && exit_comm != MPI_COMM_NULL) {
    int64_t grace_ms = exit_grace_ms();
    if (!peers_exit_too(grace_ms)) abort_leaving(live, grace_ms);
  }
  if (op_fmax != MPI_OP_NULL) MPI_Op_free(&op_fmax);
  if (op_fmin != MPI_OP_NULL) MPI_Op_free(&op_fmin);
  if (exit_comm != MPI_COMM_NULL) MPI_Comm_free(&exit_comm);
  if (we_initialized) MPI_Finalize();
}

#if defined(__GLIBC__)
static void runtime_finalize_status(int status, void *arg) {
  (void)arg;
  finalize_with(status, true);
}
#else
static void runtime_finalize(void) { finalize_with(0, false); }
#endif

static const char *thread_level_name(int level) {
  switch (level) {
  case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
  case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
  case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
  default: return "MPI_THREAD_MULTIPLE";
  }
}

static dt_status runtime_init_locked(void) {
  int finalized = 0, initialized = 0;
  MPI_Finalized(&finalized);
  if (finalized) {
    return dt__error(DT_ERR_UNSUPPORTED,
                     "dt_comm_init: MPI has already been finalized in this process and cannot "
                     "be initialised again");
  }
  MPI_Initialized(&initialized);
  int provided = MPI_THREAD_SINGLE;
  if (initialized) {
    MPI_Query_thread(&provided);
  } else {
    int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS) {
      char text[MPI_MAX_ERROR_STRING + 1];
      dt__mp_error_text(rc, text);
      return dt__error(DT_ERR_COMM, "dt_comm_init: MPI_Init_thread failed: %s", text);
    }
    we_initialized = true;
  }
  /* Below MPI_THREAD_MULTIPLE the library may not be entered by two threads at once: the
   * backend serialises its own calls (the program must not call MPI concurrently). */
  serialize_calls = provided < MPI_THREAD_MULTIPLE;
  if (serialize_calls) {
    dt__log(DT_LOG_INFO,
            "MPI backend: MPI provides %s, not MPI_THREAD_MULTIPLE; its calls are "
            "serialised by a lock",
            thread_level_name(provided));
  }
  dt__mp_max_count =
      dt__env_int("DT_MPI_MAX_COUNT", 1, INT_MAX, dt__mp_max_count, "the default (INT_MAX)");
  if (we_initialized && MPI_Comm_dup(MPI_COMM_WORLD, &exit_comm) == MPI_SUCCESS) {
    MPI_Comm_set_errhandler(exit_comm, MPI_ERRORS_RETURN);
  } else {
    exit_comm = MPI_COMM_NULL;
  }
  MPI_Op_create(fmax_fn, 1, &op_fmax);
  MPI_Op_create(fmin_fn, 1, &op_fmin);
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&watchdog_cond, &attr);
  pthread_condattr_destroy(&attr);
  watchdog_running = pthread_create(&watchdog_thread, NULL, watchdog_main, NULL) == 0;
  if (!watchdog_running) {
    dt__log(DT_LOG_WARN, "MPI backend: no watchdog thread; blocking collectives cannot time "
                         "out");
  }
  /* Finalise at exit rather than when the last world handle goes, so a program may make
   * and destroy worlds as often as it likes (MPI cannot be initialised twice). Where the
   * handler can see the exit status (glibc), a failing process ends the job at once. */
#if defined(__GLIBC__)
  on_exit(runtime_finalize_status, NULL);
#else
  atexit(runtime_finalize);
#endif
  runtime_ready = true;
  return DT_OK;
}

dt_status dt__mp_runtime_init(void) {
  pthread_mutex_lock(&init_lock);
  dt_status status = runtime_ready ? DT_OK : runtime_init_locked();
  pthread_mutex_unlock(&init_lock);
  return status;
}
