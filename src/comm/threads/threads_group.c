/* Threads backend, bottom file: rings of slots, groups and their channels, domains (aborts and
 * wake-ups), and the task that builds the groups of a split. threads_tasks.c, threads_sync.c
 * and threads_world.c call down into it; it calls none of them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/threads/threads_impl.h"
#include "tensor/device_impl.h"

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
    /* A collective left unfinished by an abort still holds its device markers. */
    th_slot *slot = &ring->slots[i];
    for (int p = 0; slot->posts && p < ring->nparties; p++) {
      if (slot->posts[p].marker) slot->posts[p].marker_ops->release(slot->posts[p].marker);
    }
    if (slot->done) slot->device_ops->release(slot->done);
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
th_ring *dt__th_channel(th_group *g, int src, int dst) {
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

/* ---- Device movers ----------------------------------------------------------------------- */

static const th_device_ops *registered_devices[DT__DEVICE_KINDS];

const th_device_ops *dt__th_device_ops(int kind) {
  if (kind <= 0 || kind >= DT__DEVICE_KINDS) return NULL;
#ifdef DT_HAVE_CUDA
  if (kind == DT_DEVICE_CUDA) return &dt__th_cuda_ops;
#endif
  return registered_devices[kind];
}

dt_status dt__th_register_device(int kind, const th_device_ops *ops) {
  if (kind < DT__DEVICE_RUNTIME_KIND || kind >= DT__DEVICE_KINDS) {
    return dt__error(DT_ERR_INVALID,
                     "dt__th_register_device: kind %d is not a run-time device kind (%d..%d)", kind,
                     DT__DEVICE_RUNTIME_KIND, DT__DEVICE_KINDS - 1);
  }
  registered_devices[kind] = ops;
  return DT_OK;
}

/* ---- Domains: aborts and wake-ups ------------------------------------------------------- */

th_domain *dt__th_domain_create(int world_size) {
  th_domain *d = dt__calloc(sizeof *d);
  if (!d) return NULL;
  d->exited = dt__calloc(sizeof *d->exited * (size_t)world_size);
  d->live_groups = dt__calloc(sizeof *d->live_groups * (size_t)world_size);
  if (!d->exited || !d->live_groups) {
    dt__free((void *)d->exited);
    dt__free((void *)d->live_groups);
    dt__free(d);
    return NULL;
  }
  for (int r = 0; r < world_size; r++) {
    atomic_init(&d->exited[r], 0);
    atomic_init(&d->live_groups[r], 0);
  }
  atomic_init(&d->refs, 1);
  atomic_init(&d->aborted, 0);
  atomic_init(&d->epoch, 0);
  pthread_mutex_init(&d->lock, NULL);
  d->world_size = world_size;
  return d;
}

void dt__th_domain_free(th_domain *d) {
  /* Groups a rank function forgot to destroy die with their world. */
  while (d->groups) group_free(d->groups);
  pthread_mutex_destroy(&d->lock);
  dt__free((void *)d->exited);
  dt__free((void *)d->live_groups);
  dt__free(d);
}

void dt__th_domain_retain(th_domain *d) { atomic_fetch_add(&d->refs, 1); }

void dt__th_domain_release(th_domain *d) {
  if (d && atomic_fetch_sub(&d->refs, 1) == 1) dt__th_domain_free(d);
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

/* ---- Splits ------------------------------------------------------------------------------ */

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
