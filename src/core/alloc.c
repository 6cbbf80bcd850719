/*
 * Allocation through user-replaceable hooks. The default allocator is malloc with two
 * additions:
 *   - alignment: every block carries a 16-byte header just before the user pointer that
 *     records how to find the raw block, so any alignment works with one free function;
 *   - a per-thread cache of freed blocks by power-of-two size class (256 B .. 64 MiB): small
 *     tensors then cost no malloc/free at all in steady state (aligned malloc alone was a
 *     third of a small op's dispatch), and large ones no fresh mmap -- glibc maps blocks of
 *     128 KiB and more anew each time, and first touch costs a page fault per 4 KiB, which
 *     made a 1 MiB redistribution buffer cost milliseconds. A class keeps up to 32 blocks
 *     (4 above 4 KiB) and a thread at most 256 MiB. Sanitizer builds (DT_NO_ALLOC_CACHE)
 *     skip the cache so that use-after-free stays detectable.
 * A user allocator (dt_set_allocator) replaces all of this.
 */
#include <stdlib.h>
#include <string.h>

#include "core/core_impl.h"
#include "core/thread_key.h"

#define CLASS_MIN_SHIFT 8  /* 256 B */
#define CLASS_MAX_SHIFT 26 /* 64 MiB */
#define CLASS_COUNT (CLASS_MAX_SHIFT - CLASS_MIN_SHIFT + 1)
#define SMALL_CLASS_SHIFT 12 /* classes up to 4 KiB keep up to 32 blocks, larger ones 4 */
#define CACHE_MAX_BYTES ((size_t)256 << 20)

typedef struct block_header {
  size_t size_class; /* class index + 1; 0: not cacheable */
  size_t offset;     /* from the raw block to the user pointer */
} block_header;

static bool custom;
static dt_allocator current;

void dt_set_allocator(const dt_allocator *allocator) {
  if (allocator && allocator->alloc && allocator->free) {
    current = *allocator;
    custom = true;
  } else {
    custom = false;
  }
}

/* ---- The per-thread cache of freed blocks, by power-of-two size class ---------------------- */

typedef struct block_cache {
  size_t bytes;
  int count[CLASS_COUNT];
  void *raw[CLASS_COUNT][32];
} block_cache;

#ifndef DT_NO_ALLOC_CACHE
static _Thread_local block_cache *cache;
/* Set once this thread's cache is destroyed: other thread-exit destructors (the tensor
 * handle pool, the sharding-plan cache) still free blocks afterwards, and those must go
 * straight back to malloc rather than into a freed cache or a new one nobody frees. */
static _Thread_local bool cache_dead;

static void cache_destroy(void *p) {
  block_cache *c = p;
  cache = NULL;
  cache_dead = true;
  for (int k = 0; k < CLASS_COUNT; k++) {
    for (int i = 0; i < c->count[k]; i++) free(c->raw[k][i]);
  }
  free(c);
}

static dt_thread_key cache_key = DT_THREAD_KEY_INIT(cache_destroy);

static block_cache *thread_cache(void) {
  if (DT_LIKELY(cache != NULL)) return cache;
  if (cache_dead) return NULL;
  cache = dt__thread_key_set(&cache_key, calloc(1, sizeof *cache));
  return cache;
}
#endif

/* The class of a size (its index), or -1 when it is too large to cache. */
static int size_class_of(size_t size) {
  int k = CLASS_MIN_SHIFT;
  while (((size_t)1 << k) < size) k++;
  return k <= CLASS_MAX_SHIFT ? k - CLASS_MIN_SHIFT : -1;
}

static void *cache_take(int k) {
#ifdef DT_NO_ALLOC_CACHE
  (void)k;
  return NULL;
#else
  block_cache *c = thread_cache();
  if (!c || c->count[k] == 0) return NULL;
  c->bytes -= (size_t)1 << (k + CLASS_MIN_SHIFT);
  return c->raw[k][--c->count[k]];
#endif
}

static bool cache_put(int k, void *raw) {
#ifdef DT_NO_ALLOC_CACHE
  (void)k;
  (void)raw;
  return false;
#else
  block_cache *c = thread_cache();
  size_t bytes = (size_t)1 << (k + CLASS_MIN_SHIFT);
  int capacity = k + CLASS_MIN_SHIFT <= SMALL_CLASS_SHIFT ? 32 : 4;
  if (!c || c->count[k] >= capacity || c->bytes + bytes > CACHE_MAX_BYTES) return false;
  c->raw[k][c->count[k]++] = raw;
  c->bytes += bytes;
  return true;
#endif
}

/* ---- Allocation
 * ---------------------------------------------------------------------------------- */

void *dt__alloc_aligned(size_t size, size_t alignment) {
  if (custom) return current.alloc(size, alignment, current.user);
  if (alignment < sizeof(block_header)) alignment = sizeof(block_header);
  size_t header = alignment; /* keeps the user pointer aligned; holds the block header */
  int k = alignment <= 64 ? size_class_of(header + size) : -1;
  size_t total = k >= 0 ? (size_t)1 << (k + CLASS_MIN_SHIFT) : header + size;
  void *raw = k >= 0 ? cache_take(k) : NULL;
  if (!raw) {
    /* Cacheable blocks are 64-byte aligned so any class member serves any alignment <= 64. */
    size_t raw_alignment = k >= 0 ? 64 : alignment;
    if (raw_alignment <= 16) {
      raw = malloc(total);
    } else if (posix_memalign(&raw, raw_alignment, total) != 0) {
      raw = NULL;
    }
    if (!raw) return NULL;
  }
  char *user = (char *)raw + header;
  block_header *h = (block_header *)(user - sizeof(block_header));
  h->size_class = k >= 0 ? (size_t)k + 1 : 0;
  h->offset = header;
  return user;
}

void *dt__alloc(size_t size) { return dt__alloc_aligned(size, 64); }

void *dt__calloc(size_t size) {
  void *ptr = dt__alloc(size);
  if (ptr) memset(ptr, 0, size);
  return ptr;
}

bool dt__reserve_arrays(int used, int *capacity, int first_capacity, int n, void *const *array_ptrs,
                        const size_t *element_sizes) {
  if (used < *capacity) return true;
  enum { MAX_ARRAYS = 8 };
  DT_ASSERT(n > 0 && n <= MAX_ARRAYS);
  int cap = *capacity ? *capacity * 2 : first_capacity;
  void *blocks[MAX_ARRAYS] = {NULL};
  for (int i = 0; i < n; i++) {
    blocks[i] = dt__alloc(element_sizes[i] * (size_t)cap);
    if (!blocks[i]) {
      for (int k = 0; k < i; k++) dt__free(blocks[k]);
      return false;
    }
  }
  for (int i = 0; i < n; i++) {
    void *old;
    memcpy(&old, array_ptrs[i], sizeof old);
    size_t kept = element_sizes[i] * (size_t)used;
    if (kept) memcpy(blocks[i], old, kept);
    memset((char *)blocks[i] + kept, 0, element_sizes[i] * (size_t)cap - kept);
    dt__free(old);
    memcpy(array_ptrs[i], &blocks[i], sizeof blocks[i]);
  }
  *capacity = cap;
  return true;
}

char *dt__strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *copy = dt__alloc(n);
  if (copy) memcpy(copy, s, n);
  return copy;
}

void dt__free_strings(char **strings, int n) {
  if (!strings) return;
  for (int i = 0; i < n; i++) dt__free(strings[i]);
  dt__free(strings);
}

void dt__free_each(int n, void *const *blocks) {
  for (int i = 0; i < n; i++) dt__free(blocks[i]);
}

void dt_free(void *ptr) { dt__free(ptr); }

void dt__free(void *ptr) {
  if (!ptr) return;
  if (custom) {
    current.free(ptr, current.user);
    return;
  }
  block_header *h = (block_header *)((char *)ptr - sizeof(block_header));
  void *raw = (char *)ptr - h->offset;
  if (h->size_class && cache_put((int)h->size_class - 1, raw)) return;
  free(raw);
}
