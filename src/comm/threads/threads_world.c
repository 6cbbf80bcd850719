/* Threads backend: worlds (dt_comm_spawn), groups and their splits, aborts, and the backend
 * table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/threads/threads_impl.h"
#include "dtensor/profile.h"

/* ---- Rings and groups ------------------------------------------------------------------- */

static bool ring_init(th_ring *ring, int nparties) {
  ring->nparties = nparties;
  ring->party_ranks = NULL;
  size_t n = (size_t)nparties;
  for (int i = 0; i < TH_SLOTS; i++) {
    th_slot *slot = &ring->slots[i];
    atomic_init(&slot->seq, (uint64_t)i);
    atomic_init(&slot->arrived, 0);
    atomic_init(&slot->state, TH_GATHERING);
    atomic_init(&slot->next_task, 0);
    atomic_init(&slot->tasks_done, 0);
    atomic_init(&slot->active, 0);
    atomic_init(&slot->released, 0);
    slot->posts = dt__calloc(sizeof *slot->posts * n);
    slot->posted = dt__calloc(sizeof *slot->posted * n);
    slot->offsets = dt__calloc(sizeof *slot->offsets * (n + 1));
    if (!slot->posts || !slot->posted || !slot->offsets) return false;
    /* posted holds seq + 1, so 0 means "never" for every sequence number. */
    for (size_t p = 0; p < n; p++) atomic_init(&slot->posted[p], 0);
  }
  return true;
}

static void ring_free(th_ring *ring) {
  for (int i = 0; i < TH_SLOTS; i++) {
    dt__free(ring->slots[i].posts);
    dt__free((void *)ring->slots[i].posted);
    dt__free(ring->slots[i].offsets);
  }
}

static void group_free(th_group *g) {
  th_domain *d = g->domain;
  pthread_mutex_lock(&d->lock);
  if (g->prev)
    g->prev->next = g->next;
  else if (d->groups == g)
    d->groups = g->next;
  if (g->next) g->next->prev = g->prev;
  pthread_mutex_unlock(&d->lock);
  if (g->channels) {
    for (int64_t i = 0; i < (int64_t)g->size * g->size; i++) {
      th_ring *ring = atomic_load(&g->channels[i]);
      if (ring) {
        ring_free(ring);
        dt__free(ring);
      }
    }
    dt__free((void *)g->channels);
  }
  ring_free(&g->ring);
  dt__free(g->world_ranks);
  pthread_cond_destroy(&g->cond);
  pthread_mutex_destroy(&g->lock);
  dt__free(g);
}

th_group *dt__th_group_create(th_domain *d, int size, const int *world_ranks) {
  th_group *g = dt__calloc(sizeof *g);
  if (!g) return NULL;
  g->domain = d;
  g->id = dt__comm_next_id();
  g->size = size;
  atomic_init(&g->refcount, size);
  atomic_init(&g->waiters, 0);
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&g->cond, &attr);
  pthread_condattr_destroy(&attr);
  pthread_mutex_init(&g->lock, NULL);
  g->world_ranks = dt__alloc(sizeof *g->world_ranks * (size_t)size);
  g->channels = dt__calloc(sizeof *g->channels * (size_t)size * (size_t)size);
  bool ok = g->world_ranks && g->channels && ring_init(&g->ring, size);
  if (g->channels) {
    for (int64_t i = 0; i < (int64_t)size * size; i++) atomic_init(&g->channels[i], NULL);
  }
  if (ok) memcpy(g->world_ranks, world_ranks, sizeof *g->world_ranks * (size_t)size);
  pthread_mutex_lock(&d->lock);
  g->next = d->groups;
  if (d->groups) d->groups->prev = g;
  d->groups = g;
  pthread_mutex_unlock(&d->lock);
  if (!ok) {
    group_free(g);
    return NULL;
  }
  return g;
}

void dt__th_group_release(th_group *g) {
  if (g && atomic_fetch_sub(&g->refcount, 1) == 1) group_free(g);
}

/* The ring of messages from src to dst, made by whichever end gets there first. */
static th_ring *channel(th_group *g, int src, int dst) {
  _Atomic(th_ring *) *cell = &g->channels[(int64_t)src * g->size + dst];
  th_ring *ring = atomic_load(cell);
  if (ring) return ring;
  th_ring *fresh = dt__calloc(sizeof *fresh);
  if (!fresh) return NULL;
  if (!ring_init(fresh, 2)) {
    ring_free(fresh);
    dt__free(fresh);
    return NULL;
  }
  fresh->party_storage[0] = src;
  fresh->party_storage[1] = dst;
  fresh->party_ranks = fresh->party_storage;
  th_ring *expected = NULL;
  if (atomic_compare_exchange_strong(cell, &expected, fresh)) return fresh;
  ring_free(fresh);
  dt__free(fresh);
  return expected;
}

/* ---- Domains: aborts and wake-ups ------------------------------------------------------- */

static th_domain *domain_create(int world_size) {
  th_domain *d = dt__calloc(sizeof *d);
  if (!d) return NULL;
  d->exited = dt__calloc(sizeof *d->exited * (size_t)world_size);
  if (!d->exited) {
    dt__free(d);
    return NULL;
  }
  for (int r = 0; r < world_size; r++) atomic_init(&d->exited[r], 0);
  atomic_init(&d->aborted, 0);
  atomic_init(&d->epoch, 0);
  pthread_mutex_init(&d->lock, NULL);
  d->world_size = world_size;
  return d;
}

static void domain_free(th_domain *d) {
  /* Groups a rank function forgot to destroy die with their world. */
  while (d->groups) group_free(d->groups);
  pthread_mutex_destroy(&d->lock);
  dt__free((void *)d->exited);
  dt__free(d);
}

void dt__th_wake_all(th_domain *d) {
  pthread_mutex_lock(&d->lock);
  for (th_group *g = d->groups; g; g = g->next) {
    pthread_mutex_lock(&g->lock);
    pthread_cond_broadcast(&g->cond);
    pthread_mutex_unlock(&g->lock);
  }
  pthread_mutex_unlock(&d->lock);
}

void dt__th_abort(th_domain *d, dt_status status, const th_ring *ring, uint64_t seq,
                  const char *message) {
  pthread_mutex_lock(&d->lock);
  if (!atomic_load(&d->aborted)) {
    d->abort_status = status;
    d->abort_ring = ring;
    d->abort_seq = seq;
    snprintf(d->abort_message, sizeof d->abort_message, "%s", message);
    atomic_store(&d->aborted, 1);
  }
  pthread_mutex_unlock(&d->lock);
  dt__th_wake_all(d);
}

/* ---- The backend ------------------------------------------------------------------------ */

dt_comm *dt__th_comm_new(th_group *g, int rank, bool owns_domain) {
  th_comm *tc = dt__calloc(sizeof *tc);
  if (!tc) return NULL;
  tc->group = g;
  tc->owns_domain = owns_domain;
  tc->send_seq = dt__calloc(sizeof *tc->send_seq * (size_t)g->size);
  tc->recv_seq = dt__calloc(sizeof *tc->recv_seq * (size_t)g->size);
  dt_comm *comm = tc->send_seq && tc->recv_seq
                      ? dt__comm_new(&dt__threads_backend, rank, g->size, g->id, tc)
                      : NULL;
  if (!comm) {
    dt__free(tc->send_seq);
    dt__free(tc->recv_seq);
    dt__free(tc);
  }
  return comm;
}

static dt_status th_start(dt_comm *comm, dt_work *w) {
  th_comm *tc = comm->state;
  th_group *g = tc->group;
  if (w->args.kind == DT_COLL_SEND || w->args.kind == DT_COLL_RECV) {
    bool is_send = w->args.kind == DT_COLL_SEND;
    int peer = w->args.root;
    th_ring *ring = is_send ? channel(g, comm->rank, peer) : channel(g, peer, comm->rank);
    if (!ring) return dt__error(DT_ERR_NOMEM, "%s: out of memory for a channel", w->args.op_name);
    uint64_t seq = is_send ? tc->send_seq[peer]++ : tc->recv_seq[peer]++;
    return dt__th_post(comm, ring, is_send ? 0 : 1, seq, w);
  }
  return dt__th_post(comm, &g->ring, comm->rank, w->seq, w);
}

static dt_status th_wait(dt_comm *comm, dt_work *w) {
  bool done = false;
  return dt__th_complete(comm, w, true, &done);
}

static dt_status th_test(dt_comm *comm, dt_work *w, bool *done) {
  return dt__th_complete(comm, w, false, done);
}

typedef struct split_entry {
  int color, key, rank;
} split_entry;

static int split_order(const void *pa, const void *pb) {
  const split_entry *a = pa, *b = pb;
  if (a->color != b->color) return a->color < b->color ? -1 : 1;
  if (a->key != b->key) return a->key < b->key ? -1 : 1;
  return a->rank < b->rank ? -1 : a->rank > b->rank;
}

dt_status dt__th_split_task(th_group *g, th_slot *slot) {
  int n = g->size;
  split_entry *entries = dt__alloc(sizeof *entries * (size_t)n);
  int *world_ranks = dt__alloc(sizeof *world_ranks * (size_t)n);
  th_group **made = dt__calloc(sizeof *made * (size_t)n);
  dt_status status = DT_ERR_NOMEM;
  int nmade = 0;
  if (!entries || !world_ranks || !made) goto done;
  for (int r = 0; r < n; r++) {
    entries[r] = (split_entry){slot->posts[r].args.root, (int)slot->posts[r].args.count, r};
  }
  qsort(entries, (size_t)n, sizeof *entries, split_order);
  for (int begin = 0; begin < n;) {
    int end = begin;
    while (end < n && entries[end].color == entries[begin].color) end++;
    if (entries[begin].color >= 0) {
      for (int i = begin; i < end; i++) world_ranks[i - begin] = g->world_ranks[entries[i].rank];
      th_group *fresh = dt__th_group_create(g->domain, end - begin, world_ranks);
      if (!fresh) goto done;
      made[nmade++] = fresh;
      for (int i = begin; i < end; i++) {
        slot->posts[entries[i].rank].split_group = fresh;
        slot->posts[entries[i].rank].split_rank = i - begin;
      }
    }
    begin = end;
  }
  status = DT_OK;
done:
  if (status != DT_OK) {
    for (int i = 0; i < nmade; i++) group_free(made[i]);
    for (int r = 0; r < n; r++) slot->posts[r].split_group = NULL;
  }
  dt__free(entries);
  dt__free(world_ranks);
  dt__free(made);
  return status;
}

static dt_status th_split(dt_comm *comm, int color, int key, const dt_split_hint *hint,
                          dt_comm **out) {
  (void)hint;
  th_group *g = ((th_comm *)comm->state)->group;
  dt_work w;
  memset(&w, 0, sizeof w);
  w.comm = comm;
  w.args = (dt_coll_args){
      .kind = DT_COLL_SPLIT, .root = color, .count = key, .op_name = "dt_comm_split"};
  w.seq = comm->seq++;
  dt_status status = dt__th_post(comm, &g->ring, comm->rank, w.seq, &w);
  if (status != DT_OK) return status;
  bool done = false;
  status = dt__th_complete(comm, &w, true, &done);
  if (status != DT_OK) return status;
  th_group *fresh = w.backend_ptr[1];
  if (!fresh) return DT_OK;
  *out = dt__th_comm_new(fresh, w.scratch[0], false);
  if (!*out) {
    dt__th_group_release(fresh);
    return dt__error(DT_ERR_NOMEM, "dt_comm_split: out of memory");
  }
  return DT_OK;
}

static void th_destroy(dt_comm *comm) {
  th_comm *tc = comm->state;
  th_domain *d = tc->group->domain;
  dt__th_group_release(tc->group);
  if (tc->owns_domain) domain_free(d);
  dt__free(tc->send_seq);
  dt__free(tc->recv_seq);
  dt__free(tc);
}

static void th_abort(dt_comm *comm, const char *reason) {
  th_group *g = ((th_comm *)comm->state)->group;
  char message[TH_MESSAGE];
  snprintf(message, sizeof message, "rank %d of group '%s' called dt_comm_abort: %s", comm->rank,
           comm->name, reason ? reason : "no reason given");
  dt__th_abort(g->domain, DT_ERR_ABORTED, NULL, 0, message);
}

const dt_comm_backend dt__threads_backend = {
    .name = "threads",
    .supports = DT_COLL_ALL,
    .start = th_start,
    .wait = th_wait,
    .test = th_test,
    .split = th_split,
    .destroy = th_destroy,
    .abort = th_abort,
    .all_gather_object = NULL, /* the generic two-step exchange */
};

/* ---- Worlds ------------------------------------------------------------------------------ */

dt_status dt__threads_init_single(const dt_comm_options *opts, dt_comm **out) {
  if (opts->world_size > 1 || opts->rank != 0) {
    return dt__error(DT_ERR_INVALID,
                     "dt_comm_init: the threads backend makes a one-rank world here (rank %d of "
                     "%d asked); use dt_comm_spawn for several ranks",
                     opts->rank, opts->world_size);
  }
  th_domain *d = domain_create(1);
  int zero = 0;
  th_group *g = d ? dt__th_group_create(d, 1, &zero) : NULL;
  dt_comm *comm = g ? dt__th_comm_new(g, 0, true) : NULL;
  if (!comm) {
    if (d) domain_free(d);
    return dt__error(DT_ERR_NOMEM, "dt_comm_init: out of memory");
  }
  *out = comm;
  return DT_OK;
}

typedef struct spawn_rank {
  th_domain *domain;
  dt_comm *comm;
  dt_rank_fn fn;
  void *arg;
  int rank;
  pthread_t thread;
  bool started;
} spawn_rank;

static void run_rank(spawn_rank *r) {
  th_domain *d = r->domain;
  dt_clear_error();
  dt_profiler_set_rank(r->rank); /* this thread's events belong to its rank */
  dt_status status = r->fn(r->comm, r->arg);
  if (status != DT_OK) {
    char message[TH_MESSAGE];
    snprintf(message, sizeof message, "%s", dt_last_error());
    pthread_mutex_lock(&d->lock);
    if (d->first_status == DT_OK) {
      d->first_status = status;
      d->first_rank = r->rank;
      snprintf(d->first_message, sizeof d->first_message, "%s", message);
    }
    pthread_mutex_unlock(&d->lock);
    char reason[TH_MESSAGE];
    snprintf(reason, sizeof reason, "rank %d failed (%s): %.900s", r->rank,
             dt_status_string(status), message);
    dt__th_abort(d, DT_ERR_ABORTED, NULL, 0, reason);
  }
  atomic_store(&d->exited[r->rank], 1);
  atomic_fetch_add(&d->epoch, 1);
  dt__th_wake_all(d);
}

static void *rank_main(void *arg) {
  run_rank(arg);
  return NULL;
}

dt_status dt_comm_spawn(int world_size, dt_rank_fn fn, void *arg) {
  if (world_size < 1 || world_size > DT_COMM_MAX_THREADS) {
    return dt__error(DT_ERR_INVALID, "dt_comm_spawn: world_size is %d, expected 1..%d", world_size,
                     DT_COMM_MAX_THREADS);
  }
  if (!fn) return dt__error(DT_ERR_INVALID, "dt_comm_spawn: fn is NULL");
  th_domain *d = domain_create(world_size);
  spawn_rank *ranks = dt__calloc(sizeof *ranks * (size_t)world_size);
  int *identity = dt__alloc(sizeof *identity * (size_t)world_size);
  th_group *world = NULL;
  dt_status status = DT_OK;
  if (!d || !ranks || !identity) {
    status = dt__error(DT_ERR_NOMEM, "dt_comm_spawn: out of memory");
    goto done;
  }
  for (int r = 0; r < world_size; r++) identity[r] = r;
  world = dt__th_group_create(d, world_size, identity);
  if (!world) {
    status = dt__error(DT_ERR_NOMEM, "dt_comm_spawn: out of memory");
    goto done;
  }
  for (int r = 0; r < world_size; r++) {
    ranks[r] = (spawn_rank){.domain = d, .fn = fn, .arg = arg, .rank = r};
    ranks[r].comm = dt__th_comm_new(world, r, false);
    if (!ranks[r].comm) {
      status = dt__error(DT_ERR_NOMEM, "dt_comm_spawn: out of memory");
      goto done;
    }
    ranks[r].comm->owned_by_spawn = true;
  }
  for (int r = 1; r < world_size; r++) {
    if (pthread_create(&ranks[r].thread, NULL, rank_main, &ranks[r]) != 0) {
      dt__th_abort(d, DT_ERR_ABORTED, NULL, 0, "dt_comm_spawn could not start every rank's thread");
      status =
          dt__error(DT_ERR_INTERNAL, "dt_comm_spawn: could not create the thread of rank %d", r);
      break;
    }
    ranks[r].started = true;
  }
  if (status == DT_OK) run_rank(&ranks[0]);
  for (int r = 1; r < world_size; r++) {
    if (ranks[r].started) pthread_join(ranks[r].thread, NULL);
  }
  if (status == DT_OK && d->first_status != DT_OK) {
    status = dt__error(d->first_status, "rank %d: %s", d->first_rank, d->first_message);
  }
done:
  if (ranks) {
    for (int r = 0; r < world_size; r++) {
      if (ranks[r].comm) {
        th_destroy(ranks[r].comm);
        dt__comm_free(ranks[r].comm);
      } else if (world) {
        dt__th_group_release(world);
      }
    }
  }
  if (d) domain_free(d);
  dt__free(ranks);
  dt__free(identity);
  return status;
}
