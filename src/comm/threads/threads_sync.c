/* Threads backend: posting to a slot, claiming and running its tasks, waiting (a short
 * spin, then the group's condition variable), timeouts and aborts. See threads_impl.h for
 * the protocol. */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "comm/threads/threads_impl.h"

/* Spin iterations before blocking: long enough to catch a peer that is microseconds away,
 * short enough that 8 ranks on 2 cores do not burn their time slices. */
#define SPIN 64

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

void dt__th_notify(th_group *g) {
  /* A waiter increments `waiters` before its last check of the condition (both seq_cst),
   * so either it sees our change or we see it waiting. */
  if (atomic_load(&g->waiters) > 0) {
    pthread_mutex_lock(&g->lock);
    pthread_cond_broadcast(&g->cond);
    pthread_mutex_unlock(&g->lock);
  }
}

typedef bool (*th_pred)(const void *ctx);

/* True when the domain aborted or a rank exited since the caller read `epoch`. */
static bool domain_changed(const th_domain *d, unsigned epoch) {
  return atomic_load(&d->aborted) || atomic_load(&d->epoch) != epoch;
}

/* Waits until pred holds, the domain changes (abort, a rank exits after the caller read
 * `epoch`), any broadcast on the group (a peer changed something: the caller re-examines),
 * or the deadline. Returns false only on the deadline. */
static bool th_block(th_group *g, th_pred pred, const void *ctx, unsigned epoch,
                     const struct timespec *deadline) {
  for (int i = 0; i < SPIN; i++) {
    if (pred(ctx) || domain_changed(g->domain, epoch)) return true;
    cpu_relax();
  }
  sched_yield();
  bool in_time = true;
  pthread_mutex_lock(&g->lock);
  atomic_fetch_add(&g->waiters, 1);
  if (!pred(ctx) && !domain_changed(g->domain, epoch)) {
    int rc = pthread_cond_timedwait(&g->cond, &g->lock, deadline);
    if (rc == ETIMEDOUT) in_time = pred(ctx) || atomic_load(&g->domain->aborted);
  }
  atomic_fetch_sub(&g->waiters, 1);
  pthread_mutex_unlock(&g->lock);
  return in_time;
}

static void deadline_after(int64_t ms, struct timespec *ts) {
  clock_gettime(CLOCK_MONOTONIC, ts);
  ts->tv_sec += (time_t)(ms / 1000);
  ts->tv_nsec += (long)(ms % 1000) * 1000000L;
  if (ts->tv_nsec >= 1000000000L) {
    ts->tv_sec += 1;
    ts->tv_nsec -= 1000000000L;
  }
}

static th_group *group_of(const dt_comm *comm) { return ((th_comm *)comm->state)->group; }

static int party_rank(const th_ring *ring, int party) {
  return ring->party_ranks ? ring->party_ranks[party] : party;
}

/* "[2, 3]": the parties (as group ranks) that have not posted sequence number seq. */
static int missing_ranks(const th_ring *ring, th_slot *slot, uint64_t seq, int64_t *ranks,
                         int capacity) {
  int n = 0;
  for (int p = 0; p < ring->nparties && n < capacity; p++) {
    if (atomic_load(&slot->posted[p]) != seq + 1) ranks[n++] = party_rank(ring, p);
  }
  return n;
}

/* The status and message a party returns once the domain is aborted. */
static dt_status aborted_error(dt_comm *comm, const dt_work *work, const th_ring *ring,
                               uint64_t seq, bool waited) {
  th_group *g = group_of(comm);
  th_domain *d = g->domain;
  dt_status status;
  const th_ring *at_ring;
  uint64_t at_seq;
  char reason[TH_MESSAGE];
  pthread_mutex_lock(&d->lock);
  status = d->abort_status;
  at_ring = d->abort_ring;
  at_seq = d->abort_seq;
  memcpy(reason, d->abort_message, sizeof reason);
  pthread_mutex_unlock(&d->lock);
  /* Every rank that waited in the collective that timed out reports the timeout itself. */
  if (waited && status == DT_ERR_TIMEOUT && at_ring == ring && at_seq == seq) {
    return dt__error(DT_ERR_TIMEOUT, "%s", reason);
  }
  return dt__error(DT_ERR_ABORTED, "%s: group '%s' (id %llu) is aborted: %s", work->args.op_name,
                   comm->name, (unsigned long long)g->id, reason);
}

/* Waits for the threads inside this slot's tasks to leave, so none reads our buffers after
 * we return; after an abort no new task starts. */
static void drain(th_slot *slot) {
  while (atomic_load(&slot->active) > 0) sched_yield();
}

/* Notes the sequence number of a slot a party waits on in the ring's own namespace, for
 * messages: group collectives count per group, point to point per ordered pair. */
static void describe_seq(const th_ring *ring, const th_group *g, uint64_t seq, char *buf,
                         size_t size) {
  if (ring == &g->ring) {
    snprintf(buf, size, "sequence number %llu", (unsigned long long)seq);
  } else {
    snprintf(buf, size, "message %llu from rank %d to rank %d", (unsigned long long)seq,
             ring->party_storage[0], ring->party_storage[1]);
  }
}

/* The message names the waiting rank and what it waited for separately: every rank that
 * waited in the collective reports this one message, so "rank R of N" alone was read as
 * the missing rank. Ranks are group ranks; the world rank follows when it differs. */
static void abort_on_timeout(dt_comm *comm, const dt_work *work, const th_ring *ring, th_slot *slot,
                             uint64_t seq, const char *waiting_for) {
  th_group *g = group_of(comm);
  char where[96], waited[48], world[40] = "", message[TH_MESSAGE];
  describe_seq(ring, g, seq, where, sizeof where);
  long long ms = (long long)comm->timeout_ms;
  if (ms >= 1000 && ms % 1000 == 0) {
    snprintf(waited, sizeof waited, "%lld s", ms / 1000);
  } else {
    snprintf(waited, sizeof waited, "%lld ms", ms);
  }
  int world_rank = g->world_ranks[comm->rank];
  if (world_rank != comm->rank) snprintf(world, sizeof world, " (world rank %d)", world_rank);
  snprintf(message, sizeof message,
           "%s: timed out: rank %d%s waited %s in %s for %s (group '%s' of %d ranks, id %llu, "
           "threads backend, %s)",
           work->args.op_name, comm->rank, world, waited, work->args.op_name, waiting_for,
           comm->name, comm->size, (unsigned long long)g->id, where);
  (void)slot;
  dt__th_abort(g->domain, DT_ERR_TIMEOUT, ring, seq, message);
}

/* Fails the collective when a party it waits for has already returned from its rank
 * function: it will never arrive, so waiting out the timeout would only delay the error. */
static void abort_if_peer_exited(dt_comm *comm, const dt_work *work, const th_ring *ring,
                                 th_slot *slot, uint64_t seq) {
  th_group *g = group_of(comm);
  if (!g->domain->exited) return;
  int64_t missing[64];
  int n = missing_ranks(ring, slot, seq, missing, 64);
  for (int i = 0; i < n; i++) {
    int world_rank = g->world_ranks[missing[i]];
    if (atomic_load(&g->domain->exited[world_rank])) {
      char where[96], message[TH_MESSAGE];
      describe_seq(ring, g, seq, where, sizeof where);
      snprintf(message, sizeof message,
               "rank %d returned from its rank function without joining %s (%s of group '%s')",
               (int)missing[i], work->args.op_name, where, comm->name);
      dt__th_abort(g->domain, DT_ERR_ABORTED, NULL, 0, message);
      return;
    }
  }
}

typedef struct slot_watch {
  th_slot *slot;
  int state;
  uint64_t seq;
} slot_watch;

static bool slot_progressed(const void *ctx) {
  const slot_watch *w = ctx;
  int state = atomic_load(&w->slot->state);
  if (state != w->state) return true;
  return state == TH_READY && atomic_load(&w->slot->tasks_done) >= w->slot->ntasks;
}

static bool slot_free(const void *ctx) {
  const slot_watch *w = ctx;
  return atomic_load(&w->slot->seq) == w->seq;
}

static void release(th_group *g, th_ring *ring, th_slot *slot, int party, uint64_t seq) {
  th_post *post = &slot->posts[party];
  post->work = NULL;
  if (post->marker) {
    post->marker_ops->release(post->marker);
    post->marker = NULL;
  }
  if (atomic_fetch_add(&slot->released, 1) + 1 == ring->nparties) {
    if (slot->done) slot->device_ops->release(slot->done);
    slot->done = NULL;
    slot->device_ops = NULL;
    slot->task_message[0] = '\0';
    atomic_store(&slot->arrived, 0);
    atomic_store(&slot->next_task, 0);
    atomic_store(&slot->tasks_done, 0);
    slot->task_status = DT_OK;
    slot->ntasks = 0;
    atomic_store(&slot->state, TH_GATHERING);
    atomic_store(&slot->released, 0);
    atomic_store(&slot->seq, seq + TH_SLOTS);
    dt__th_notify(g);
  }
}

static void run_tasks(th_group *g, th_ring *ring, th_slot *slot, int party) {
  th_domain *d = g->domain;
  int64_t n = slot->ntasks;
  while (atomic_load(&slot->next_task) < n) {
    atomic_fetch_add(&slot->active, 1);
    if (atomic_load(&d->aborted)) {
      atomic_fetch_sub(&slot->active, 1);
      return;
    }
    int64_t task = atomic_fetch_add(&slot->next_task, 1);
    if (task >= n) {
      atomic_fetch_sub(&slot->active, 1);
      return;
    }
    dt__th_run_task(g, ring, slot, task, party);
    int64_t done = atomic_fetch_add(&slot->tasks_done, 1) + 1;
    atomic_fetch_sub(&slot->active, 1);
    if (done == n) dt__th_notify(g);
  }
}

dt_status dt__th_complete(dt_comm *comm, dt_work *work, bool blocking, bool *done) {
  th_group *g = group_of(comm);
  th_ring *ring = work->backend_ptr[0];
  int party = (int)work->backend_int[0];
  uint64_t seq = (uint64_t)work->backend_int[1];
  th_slot *slot = &ring->slots[seq % TH_SLOTS];
  struct timespec deadline;
  bool armed = false;
  *done = false;
  for (;;) {
    int state = atomic_load(&slot->state);
    if (state == TH_READY) {
      run_tasks(g, ring, slot, party);
      if (atomic_load(&slot->tasks_done) == slot->ntasks) {
        dt_status status = slot->task_status;
        char message[TH_MESSAGE];
        if (status != DT_OK) snprintf(message, sizeof message, "%s", slot->task_message);
        if (work->args.kind == DT_COLL_SPLIT) {
          work->backend_ptr[1] = slot->posts[party].split_group;
          work->scratch[0] = slot->posts[party].split_rank;
        }
        /* Device memory: this rank's queue waits for the collective's end before anything
         * it queues later (the host does not wait). */
        if (status == DT_OK && slot->done) {
          status =
              slot->device_ops->wait(work->args.op_name, (int)(work->args.device >> 8), slot->done);
          if (status != DT_OK) snprintf(message, sizeof message, "%s", dt_last_error());
        }
        release(g, ring, slot, party, seq);
        *done = true;
        if (status != DT_OK) return dt__error(status, "%s: %s", work->args.op_name, message);
        return DT_OK;
      }
    } else if (state == TH_FAILED) {
      dt_status status = slot->error;
      dt__error(status, "%s: %s", work->args.op_name, slot->message);
      release(g, ring, slot, party, seq);
      *done = true;
      return status;
    }
    if (atomic_load(&g->domain->aborted)) {
      drain(slot);
      *done = true;
      return aborted_error(comm, work, ring, seq, true);
    }
    if (!blocking) return DT_OK;
    if (!armed) {
      deadline_after(comm->timeout_ms, &deadline);
      armed = true;
    }
    unsigned epoch = atomic_load(&g->domain->epoch);
    if (state == TH_GATHERING) abort_if_peer_exited(comm, work, ring, slot, seq);
    slot_watch watch = {slot, state, seq};
    if (!th_block(g, slot_progressed, &watch, epoch, &deadline)) {
      if (atomic_load(&slot->state) == TH_GATHERING) {
        int64_t missing[64];
        int n = missing_ranks(ring, slot, seq, missing, 64);
        char list[512], waiting[600];
        if (n == 1) {
          snprintf(waiting, sizeof waiting, "rank %lld, which never arrived",
                   (long long)missing[0]);
        } else {
          snprintf(waiting, sizeof waiting, "ranks %s, which never arrived",
                   dt__format_ints(list, sizeof list, n, missing));
        }
        abort_on_timeout(comm, work, ring, slot, seq, waiting);
      } else {
        armed = false; /* peers are running the last tasks: they always finish */
      }
    }
  }
}

/* Makes sure the slot of `seq` is free for us: our own older work there is completed
 * first, then we wait for the peers to release it. */
static dt_status acquire_slot(dt_comm *comm, dt_work *work, th_ring *ring, th_slot *slot, int party,
                              uint64_t seq) {
  th_group *g = group_of(comm);
  if (atomic_load(&slot->seq) == seq) return DT_OK;
  dt_work *older = slot->posts[party].work;
  if (older && older != work && !older->done) {
    bool done = false;
    dt_status status = dt__th_complete(comm, older, true, &done);
    dt__work_finish(older, status);
  }
  struct timespec deadline;
  deadline_after(comm->timeout_ms, &deadline);
  slot_watch watch = {slot, 0, seq};
  while (!slot_free(&watch)) {
    if (atomic_load(&g->domain->aborted)) return aborted_error(comm, work, ring, seq, false);
    unsigned epoch = atomic_load(&g->domain->epoch);
    if (!th_block(g, slot_free, &watch, epoch, &deadline) && !slot_free(&watch)) {
      char waiting[160];
      snprintf(waiting, sizeof waiting,
               "the group to finish the collective %d calls earlier (too many in flight)",
               TH_SLOTS);
      abort_on_timeout(comm, work, ring, slot, seq, waiting);
    }
  }
  return DT_OK;
}

dt_status dt__th_post(dt_comm *comm, th_ring *ring, int party, uint64_t seq, dt_work *work) {
  th_group *g = group_of(comm);
  th_slot *slot = &ring->slots[seq % TH_SLOTS];
  work->backend_ptr[0] = ring;
  work->backend_int[0] = party;
  work->backend_int[1] = (int64_t)seq;
  if (atomic_load(&g->domain->aborted)) return aborted_error(comm, work, ring, seq, false);
  dt_status status = acquire_slot(comm, work, ring, slot, party, seq);
  if (status != DT_OK) return status;

  th_post *post = &slot->posts[party];
  post->marker = NULL;
  post->marker_ops = NULL;
  /* Device memory: mark where this rank's queue stands, so that the collective reads its
   * buffers after the work it queued before. */
  int kind = (int)(work->args.device & 0xffu);
  if (kind != 0) {
    const th_device_ops *ops = dt__th_device_ops(kind);
    if (!ops) {
      return dt__error(DT_ERR_UNSUPPORTED,
                       "%s: the threads backend has no mover for device kind %d",
                       work->args.op_name, kind);
    }
    status = ops->mark(work->args.op_name, (int)(work->args.device >> 8), &post->marker);
    if (status != DT_OK) return status;
    post->marker_ops = ops;
  }
  post->args = work->args;
  post->work = work;
  post->split_group = NULL;
  post->split_rank = -1;
  atomic_store(&slot->posted[party], seq + 1);
  if (atomic_fetch_add(&slot->arrived, 1) + 1 == ring->nparties) {
    bool ok = dt__th_prepare(comm, ring, slot);
    atomic_store(&slot->state, ok ? TH_READY : TH_FAILED);
    dt__th_notify(g);
  }
  return DT_OK;
}
