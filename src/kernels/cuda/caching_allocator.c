/* The caching allocator's bookkeeping (caching_allocator.h): segments split into blocks that
 * link to their neighbours, free blocks in one array per pool sorted by (stream, size,
 * address) for best fit by binary search, allocated blocks in a hash map by address. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/caching_allocator.h"

typedef struct block {
  uintptr_t ptr;
  size_t size;
  uintptr_t stream;
  bool small;                /* its pool */
  bool allocated;            /* held by a caller; otherwise in its pool's free set */
  struct block *prev, *next; /* neighbours in the segment; the head has prev NULL */
} block;

/* Free blocks sorted by (stream, size, ptr). */
typedef struct free_set {
  block **items;
  size_t n, capacity;
} free_set;

/* Allocated blocks by address: open addressing, linear probing, at most half full. */
typedef struct block_map {
  block **slots;
  size_t capacity; /* a power of two, or 0 */
  size_t n;
} block_map;

struct dt_caching_allocator {
  pthread_mutex_t lock;
  dt_block_backing backing;
  free_set small, large;
  block_map allocated;
  block **segments; /* the head block of every segment */
  size_t n_segments, segments_capacity;
  dt_cuda_allocator_stats stats;
};

static int compare_key(const block *b, uintptr_t stream, size_t size, uintptr_t ptr) {
  if (b->stream != stream) return b->stream < stream ? -1 : 1;
  if (b->size != size) return b->size < size ? -1 : 1;
  if (b->ptr != ptr) return b->ptr < ptr ? -1 : 1;
  return 0;
}

/* The first position whose block is not below (stream, size, ptr). */
static size_t lower_bound(const free_set *s, uintptr_t stream, size_t size, uintptr_t ptr) {
  size_t lo = 0, hi = s->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (compare_key(s->items[mid], stream, size, ptr) < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* Room for one more block pointer in *items, which holds n of *capacity: the capacity doubles
 * (from `initial`) when full. false, nothing changed, when the memory cannot be had. */
static bool reserve_one(block ***items, size_t n, size_t *capacity, size_t initial) {
  if (n < *capacity) return true;
  size_t grown_capacity = *capacity ? 2 * *capacity : initial;
  block **grown = realloc(*items, sizeof *grown * grown_capacity);
  if (!grown) return false;
  *items = grown;
  *capacity = grown_capacity;
  return true;
}

static bool set_insert(free_set *s, block *b) {
  if (!reserve_one(&s->items, s->n, &s->capacity, 64)) return false;
  size_t at = lower_bound(s, b->stream, b->size, b->ptr);
  memmove(s->items + at + 1, s->items + at, sizeof *s->items * (s->n - at));
  s->items[at] = b;
  s->n++;
  return true;
}

static void set_remove(free_set *s, block *b) {
  size_t at = lower_bound(s, b->stream, b->size, b->ptr);
  if (at < s->n && s->items[at] == b) {
    memmove(s->items + at, s->items + at + 1, sizeof *s->items * (s->n - at - 1));
    s->n--;
  }
}

static size_t map_slot(uintptr_t ptr, size_t capacity) {
  uint64_t h = (uint64_t)ptr * 0x9e3779b97f4a7c15ull;
  return (size_t)(h >> 32) & (capacity - 1);
}

static bool map_insert(block_map *m, block *b);

static bool map_grow(block_map *m) {
  size_t capacity = m->capacity ? 2 * m->capacity : 256;
  block_map grown = {calloc(capacity, sizeof(block *)), capacity, 0};
  if (!grown.slots) return false;
  for (size_t i = 0; i < m->capacity; i++) {
    if (m->slots[i]) map_insert(&grown, m->slots[i]);
  }
  free(m->slots);
  *m = grown;
  return true;
}

static bool map_insert(block_map *m, block *b) {
  if (2 * (m->n + 1) > m->capacity && !map_grow(m)) return false;
  size_t i = map_slot(b->ptr, m->capacity);
  while (m->slots[i]) i = (i + 1) & (m->capacity - 1);
  m->slots[i] = b;
  m->n++;
  return true;
}

static size_t map_find(const block_map *m, uintptr_t ptr) {
  if (!m->capacity) return SIZE_MAX;
  for (size_t i = map_slot(ptr, m->capacity); m->slots[i]; i = (i + 1) & (m->capacity - 1)) {
    if (m->slots[i]->ptr == ptr) return i;
  }
  return SIZE_MAX;
}

/* Removes slot i, shifting back the entries of its probe run (no tombstones). */
static void map_remove_at(block_map *m, size_t i) {
  size_t mask = m->capacity - 1;
  m->slots[i] = NULL;
  m->n--;
  for (size_t j = (i + 1) & mask; m->slots[j]; j = (j + 1) & mask) {
    size_t home = map_slot(m->slots[j]->ptr, m->capacity);
    /* Entry j may move to the hole i when its home is not in the cyclic range (i, j]. */
    bool home_between = i <= j ? (i < home && home <= j) : (i < home || home <= j);
    if (!home_between) {
      m->slots[i] = m->slots[j];
      m->slots[j] = NULL;
      i = j;
    }
  }
}

/* ---- Sizes ------------------------------------------------------------------------------- */

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

static size_t segment_size(size_t size) {
  if (size <= DT__ALLOC_SMALL_MAX) return DT__ALLOC_SMALL_SEGMENT;
  if (size < DT__ALLOC_LARGE_MIN_OWN) return DT__ALLOC_LARGE_SEGMENT;
  return round_up(size, DT__ALLOC_LARGE_ROUND);
}

/* Whether the rest of a free block is worth its own block. */
static bool worth_splitting(const block *b, size_t size) {
  size_t rest = b->size - size;
  return b->small ? rest >= DT__ALLOC_ROUND : rest > DT__ALLOC_SMALL_MAX;
}

static void update_peaks(dt_cuda_allocator_stats *s) {
  if (s->allocated > s->peak_allocated) s->peak_allocated = s->allocated;
  if (s->reserved > s->peak_reserved) s->peak_reserved = s->reserved;
}

/* ---- Allocator --------------------------------------------------------------------------- */

dt_caching_allocator *dt__caching_allocator_create(const dt_block_backing *backing) {
  dt_caching_allocator *a = calloc(1, sizeof *a);
  if (!a) return NULL;
  pthread_mutex_init(&a->lock, NULL);
  a->backing = *backing;
  return a;
}

static void release_segment_at(dt_caching_allocator *a, size_t index) {
  block *head = a->segments[index];
  size_t total = 0;
  for (block *b = head, *next; b; b = next) {
    next = b->next;
    total += b->size;
    if (b != head) free(b);
  }
  a->backing.free(a->backing.context, (void *)head->ptr);
  free(head);
  a->segments[index] = a->segments[--a->n_segments];
  a->stats.reserved -= total;
  a->stats.n_cuda_free++;
}

size_t dt__caching_allocator_destroy(dt_caching_allocator *a) {
  if (!a) return 0;
  size_t leaked = a->allocated.n;
  while (a->n_segments > 0) release_segment_at(a, a->n_segments - 1);
  free(a->small.items);
  free(a->large.items);
  free(a->allocated.slots);
  free(a->segments);
  pthread_mutex_destroy(&a->lock);
  free(a);
  return leaked;
}

/* Every wholly free segment back to the backing allocator (the lock held). */
static size_t release_free_segments(dt_caching_allocator *a) {
  size_t released = 0;
  for (size_t i = 0; i < a->n_segments;) {
    block *head = a->segments[i];
    if (head->allocated || head->next) {
      i++;
      continue;
    }
    set_remove(head->small ? &a->small : &a->large, head);
    release_segment_at(a, i); /* moves the last segment to i */
    released++;
  }
  return released;
}

/* A new segment for a block of `size` as one free block outside the free sets, or NULL. */
static block *new_segment(dt_caching_allocator *a, size_t size, uintptr_t stream) {
  if (!reserve_one(&a->segments, a->n_segments, &a->segments_capacity, 16)) return NULL;
  block *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  size_t bytes = segment_size(size);
  void *mem = a->backing.alloc(a->backing.context, bytes);
  if (!mem && release_free_segments(a) > 0) {
    a->stats.n_oom_retries++;
    mem = a->backing.alloc(a->backing.context, bytes);
  }
  if (!mem) {
    a->stats.n_ooms++;
    free(b);
    return NULL;
  }
  *b = (block){
      .ptr = (uintptr_t)mem, .size = bytes, .stream = stream, .small = size <= DT__ALLOC_SMALL_MAX};
  a->segments[a->n_segments++] = b;
  a->stats.reserved += bytes;
  a->stats.n_cuda_malloc++;
  return b;
}

/* The best free block of the pool on `stream` for `size`, taken out of its set, or NULL. */
static block *take_free(dt_caching_allocator *a, size_t size, uintptr_t stream) {
  free_set *s = size <= DT__ALLOC_SMALL_MAX ? &a->small : &a->large;
  size_t at = lower_bound(s, stream, size, 0);
  if (at == s->n || s->items[at]->stream != stream) return NULL;
  block *b = s->items[at];
  memmove(s->items + at, s->items + at + 1, sizeof *s->items * (s->n - at - 1));
  s->n--;
  return b;
}

void *dt__caching_allocator_alloc(dt_caching_allocator *a, size_t nbytes, uintptr_t stream) {
  if (nbytes == 0 || nbytes > SIZE_MAX / 2) return NULL;
  size_t size = round_up(nbytes, DT__ALLOC_ROUND);
  pthread_mutex_lock(&a->lock);
  /* Room in the map first, so that nothing fails once a block is taken. */
  block_map *m = &a->allocated;
  if (2 * (m->n + 1) > m->capacity && !map_grow(m)) goto fail;
  block *b = take_free(a, size, stream);
  if (!b) b = new_segment(a, size, stream);
  if (!b) goto fail;
  if (worth_splitting(b, size)) {
    block *rest = malloc(sizeof *rest);
    free_set *s = b->small ? &a->small : &a->large;
    if (rest) {
      *rest = (block){.ptr = b->ptr + size,
                      .size = b->size - size,
                      .stream = stream,
                      .small = b->small,
                      .prev = b,
                      .next = b->next};
      if (set_insert(s, rest)) {
        if (b->next) b->next->prev = rest;
        b->next = rest;
        b->size = size;
      } else {
        free(rest); /* no room to track it: the whole block serves the request */
      }
    }
  }
  map_insert(m, b); /* cannot fail: room was made above */
  b->allocated = true;
  a->stats.allocated += b->size;
  a->stats.n_blocks++;
  a->stats.n_allocs++;
  update_peaks(&a->stats);
  pthread_mutex_unlock(&a->lock);
  return (void *)b->ptr;
fail:
  pthread_mutex_unlock(&a->lock);
  return NULL;
}

/* Joins two neighbouring free blocks (out of their set) into the lower one, which it returns. */
static block *merge(block *lower, block *upper) {
  lower->size += upper->size;
  lower->next = upper->next;
  if (upper->next) upper->next->prev = lower;
  free(upper);
  return lower;
}

bool dt__caching_allocator_free(dt_caching_allocator *a, void *ptr, uintptr_t stream) {
  pthread_mutex_lock(&a->lock);
  size_t slot = map_find(&a->allocated, (uintptr_t)ptr);
  if (slot == SIZE_MAX) {
    pthread_mutex_unlock(&a->lock);
    return false;
  }
  block *b = a->allocated.slots[slot];
  map_remove_at(&a->allocated, slot);
  if (stream != b->stream && a->backing.stream_wait)
    a->backing.stream_wait(a->backing.context, b->stream, stream);
  b->allocated = false;
  a->stats.allocated -= b->size;
  a->stats.n_blocks--;
  free_set *s = b->small ? &a->small : &a->large;
  if (b->next && !b->next->allocated) {
    set_remove(s, b->next);
    b = merge(b, b->next);
  }
  if (b->prev && !b->prev->allocated) {
    set_remove(s, b->prev);
    b = merge(b->prev, b);
  }
  if (!set_insert(s, b)) {
    /* No host memory to track it: the block stays out of reuse until its segment is
     * released by destroy. Marking it allocated keeps neighbours from merging into it. */
    b->allocated = true;
  }
  pthread_mutex_unlock(&a->lock);
  return true;
}

size_t dt__caching_allocator_empty_cache(dt_caching_allocator *a) {
  pthread_mutex_lock(&a->lock);
  size_t released = release_free_segments(a);
  pthread_mutex_unlock(&a->lock);
  return released;
}

void dt__caching_allocator_stats(dt_caching_allocator *a, dt_cuda_allocator_stats *out) {
  pthread_mutex_lock(&a->lock);
  *out = a->stats;
  pthread_mutex_unlock(&a->lock);
}

void dt__caching_allocator_reset_peak(dt_caching_allocator *a) {
  pthread_mutex_lock(&a->lock);
  a->stats.peak_allocated = a->stats.allocated;
  a->stats.peak_reserved = a->stats.reserved;
  pthread_mutex_unlock(&a->lock);
}

size_t dt__caching_allocator_block_size(dt_caching_allocator *a, const void *ptr) {
  pthread_mutex_lock(&a->lock);
  size_t slot = map_find(&a->allocated, (uintptr_t)ptr);
  size_t size = slot == SIZE_MAX ? 0 : a->allocated.slots[slot]->size;
  pthread_mutex_unlock(&a->lock);
  return size;
}
