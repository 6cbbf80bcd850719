/*
 * The intra-op thread pool: large kernels split their work into chunks that idle pool threads
 * and the calling thread run together (dt__parallel_for).
 *
 * How many threads one call may use: the setting (dt_set_num_threads, else the environment's
 * DT_NUM_THREADS as the process's first call that asks found it, else the cores) capped at
 * cores / rank threads of the process (rank threads count themselves in with
 * dt__rank_threads_add, so that N ranks on C cores never run more than C threads of kernels), at
 * least 1. One call uses the caller plus at most that many - 1 pool threads; with 1 it runs inline
 * and the pool is never started.
 *
 * Waiting blocks on condition variables, never spins: a test that runs 8 rank threads on 2
 * cores must not burn the cores the ranks need. Several rank threads may submit at once; each
 * submission is a job on a list that every idle pool thread takes chunks from, and its caller
 * runs chunks of its own job only, so a chunk that submits a job of its own (nesting) cannot
 * deadlock: its thread runs whatever no pool thread took. The pool threads start at the first
 * call that needs them; an atexit handler stops and joins them (their per-thread allocation
 * caches are freed as they exit, so leak checkers see nothing); a forked child starts with an
 * empty pool.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/core_impl.h"

#define MAX_POOL_THREADS 63
#define CHUNKS_PER_THREAD 4

typedef struct pool_job {
  dt_chunk_fn fn;
  void *ctx;
  int64_t n, chunk;         /* [0, n) in chunks of `chunk` elements (the last one shorter) */
  int chunks, next;         /* next: the first chunk not yet taken */
  int done;                 /* chunks finished */
  int helpers, max_helpers; /* pool threads that joined the job, and how many may */
  pthread_cond_t finished;
  struct pool_job *link; /* the list of jobs with chunks left */
} pool_job;

static struct {
  pthread_mutex_t lock;
  pthread_cond_t work; /* a job was added, or stop was set */
  pool_job *jobs;
  int started; /* pool threads running, their handles in threads[0, started) */
  bool stop;   /* the process is exiting: threads leave once no job has chunks left */
  bool hooks;  /* the atfork and atexit handlers are installed */
  pthread_t threads[MAX_POOL_THREADS];
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER, .work = PTHREAD_COND_INITIALIZER};

static atomic_int setting;      /* dt_set_num_threads; 0: the default */
static atomic_int rank_threads; /* live rank threads (dt_comm_spawn) */

/* The online cores, read once (sysconf reads /sys: too slow for every kernel call). */
static int cores(void) {
  static atomic_int cached;
  int c = atomic_load_explicit(&cached, memory_order_relaxed);
  if (c > 0) return c;
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  c = n < 1 ? 1 : n > MAX_POOL_THREADS + 1 ? MAX_POOL_THREADS + 1 : (int)n;
  atomic_store_explicit(&cached, c, memory_order_relaxed);
  return c;
}

/* DT_NUM_THREADS, read once per process at the first call that needs it (as OpenMP reads
 * OMP_NUM_THREADS): getenv scans the whole environment, too slow for every GEMM and kernel
 * split. 0 when unset; a value outside 1..4096 is reported once and gives 0. */
static int env_setting(void) {
  static atomic_int cached = -1;
  int v = atomic_load_explicit(&cached, memory_order_relaxed);
  if (v >= 0) return v;
  v = (int)dt__env_int("DT_NUM_THREADS", 1, 4096, 0, "the default (the cores)");
  atomic_store_explicit(&cached, v, memory_order_relaxed);
  return v;
}

int dt__intra_threads(void) {
  int c = cores(), ranks = atomic_load(&rank_threads);
  int cap = c / (ranks > 1 ? ranks : 1);
  int want = atomic_load(&setting);
  if (want == 0) want = env_setting();
  if (want == 0 || want > cap) want = cap;
  return want < 1 ? 1 : want;
}

void dt__rank_threads_add(int delta) { atomic_fetch_add(&rank_threads, delta); }

int dt__blas_threads_for(int base) {
  int intra = dt__intra_threads();
  if (atomic_load(&setting) != 0 || env_setting() != 0) return intra;
  return base < intra ? (base < 1 ? 1 : base) : intra;
}

dt_status dt_set_num_threads(int n) {
  if (n < 0) return dt__error(DT_ERR_INVALID, "dt_set_num_threads: n is %d (expected >= 0)", n);
  atomic_store(&setting, n);
  return DT_OK;
}

int dt_get_num_threads(void) { return dt__intra_threads(); }

/* The first job with chunks left that another pool thread may join (the lock held). */
static pool_job *job_to_join(void) {
  pool_job *j = pool.jobs;
  while (j && j->helpers >= j->max_helpers) j = j->link;
  return j;
}

/* Takes job j's next chunk (the lock held; j has one left), unlinking j when it was the last. */
static int take_chunk(pool_job *j) {
  int c = j->next++;
  if (j->next == j->chunks) {
    pool_job **p = &pool.jobs;
    while (*p != j) p = &(*p)->link;
    *p = j->link;
  }
  return c;
}

/* Runs chunk c of j without the lock and counts it done; the last one wakes the job's caller,
 * which may then end j: nobody touches j once its chunks are all done and the lock is free. */
static void run_chunk(pool_job *j, int c) {
  pthread_mutex_unlock(&pool.lock);
  int64_t begin = (int64_t)c * j->chunk, end = begin + j->chunk;
  j->fn(j->ctx, begin, end < j->n ? end : j->n);
  pthread_mutex_lock(&pool.lock);
  if (++j->done == j->chunks) pthread_cond_signal(&j->finished);
}

/* A pool thread joins one job at a time (so that a job never has more threads than its
 * caller's count allows) and takes its chunks until none is left. */
static void *worker(void *arg) {
  (void)arg;
  pthread_mutex_lock(&pool.lock);
  for (;;) {
    pool_job *j;
    while (!(j = job_to_join()) && !pool.stop) pthread_cond_wait(&pool.work, &pool.lock);
    if (!j) break; /* stopping, and no job has chunks left */
    j->helpers++;
    while (j->next < j->chunks) run_chunk(j, take_chunk(j));
  }
  pthread_mutex_unlock(&pool.lock);
  return NULL;
}

/* A forked child has none of the parent's pool threads: start again from an empty pool. */
static void after_fork_child(void) {
  pthread_mutex_init(&pool.lock, NULL);
  pthread_cond_init(&pool.work, NULL);
  pool.jobs = NULL;
  pool.started = 0;
  pool.stop = false;
}

/* At exit: wakes every pool thread, which leaves once the jobs in flight have no chunks left
 * (a rank thread still inside a kernel gets its chunks run), and joins them. */
static void stop_threads(void) {
  pthread_mutex_lock(&pool.lock);
  pool.stop = true;
  int started = pool.started;
  pthread_cond_broadcast(&pool.work);
  pthread_mutex_unlock(&pool.lock);
  for (int i = 0; i < started; i++) pthread_join(pool.threads[i], NULL);
  pthread_mutex_lock(&pool.lock);
  pool.started = 0;
  pthread_mutex_unlock(&pool.lock);
}

/* Starts pool threads up to `want` (the lock held); fewer when the system refuses. After
 * stop_threads (a kernel run by another atexit handler) it starts none: the caller runs
 * everything. */
static void start_threads(int want) {
  if (!pool.hooks) {
    pthread_atfork(NULL, NULL, after_fork_child);
    atexit(stop_threads);
    pool.hooks = true;
  }
  while (!pool.stop && pool.started < want && pool.started < MAX_POOL_THREADS) {
    if (pthread_create(&pool.threads[pool.started], NULL, worker, NULL) != 0) break;
    pool.started++;
  }
}

void dt__parallel_for(int64_t n, int64_t grain, dt_chunk_fn fn, void *ctx) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  if (n <= grain) { /* one chunk: no need to ask how many threads */
    fn(ctx, 0, n);
    return;
  }
  int threads = dt__intra_threads();
  if (threads <= 1) {
    fn(ctx, 0, n);
    return;
  }
  /* Up to CHUNKS_PER_THREAD chunks per thread: on a loaded machine a pool thread may start
   * late or be preempted, and the caller then runs the chunks it has not taken. */
  int64_t pieces = (n + grain - 1) / grain, most = (int64_t)threads * CHUNKS_PER_THREAD;
  int chunks = (int)(pieces < most ? pieces : most);
  pool_job j = {.fn = fn, .ctx = ctx, .n = n, .chunk = (n + chunks - 1) / chunks};
  j.chunks = (int)((n + j.chunk - 1) / j.chunk);
  j.max_helpers = threads - 1;
  pthread_cond_init(&j.finished, NULL);
  pthread_mutex_lock(&pool.lock);
  start_threads(cores() - 1);
  if (pool.started == 0) { /* no pool thread could start (or the process is exiting) */
    pthread_mutex_unlock(&pool.lock);
    pthread_cond_destroy(&j.finished);
    fn(ctx, 0, n);
    return;
  }
  j.link = pool.jobs;
  pool.jobs = &j;
  pthread_cond_broadcast(&pool.work);
  /* The caller takes chunks of its own job until none is left, then waits for the others. */
  while (j.next < j.chunks) run_chunk(&j, take_chunk(&j));
  while (j.done < j.chunks) pthread_cond_wait(&j.finished, &pool.lock);
  pthread_mutex_unlock(&pool.lock);
  pthread_cond_destroy(&j.finished);
}
