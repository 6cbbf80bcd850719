/*
 * Allocation through user-replaceable hooks. The default allocator is malloc with two
 * additions:
 *   - alignment: every block carries a 16-byte header just before the user pointer that
 *     records how to find the raw block, so any alignment works with one free function;
 *   - per-thread caches of freed blocks, so that a training step's tensors, which recur with
 *     the same sizes every step, cost no malloc and no fresh pages in steady state. glibc
 *     maps blocks of 128 KiB and more (up to 32 MiB as its threshold adapts) anew each time,
 *     and first touch costs a page fault and the zeroing of 4 KiB: it made a 1 MiB
 *     redistribution buffer cost milliseconds, and a GPT-2-like training step took 118,000
 *     faults (460 MiB of fresh pages) per step. Blocks up to 1 MiB go to power-of-two size
 *     classes (256 B .. 1 MiB; 32 blocks per class up to 4 KiB, 4 above); larger ones to a
 *     best-fit list of up to 512 blocks by their exact size (4 KiB pages), a request taking
 *     the smallest block that fits with at most a quarter to spare, the oldest blocks
 *     evicted past the thread's limit: DT_ALLOC_CACHE_MB (read at each free; 0 turns it off),
 *     default 1024 MiB. Sanitizer builds (DT_NO_ALLOC_CACHE) skip both caches so that
 *     use-after-free stays detectable.
 * A user allocator (dt_set_allocator) replaces all of this.
 */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/core_impl.h"
#include "core/thread_key.h"

#define CLASS_MIN_SHIFT 8  /* 256 B */
#define CLASS_MAX_SHIFT 20 /* 1 MiB; larger blocks go to the large-block list */
#define CLASS_COUNT (CLASS_MAX_SHIFT - CLASS_MIN_SHIFT + 1)
#define SMALL_CLASS_SHIFT 12 /* classes up to 4 KiB keep up to 32 blocks, larger ones 4 */
#define LARGE_SLOTS 512
#define LARGE_PAGE ((size_t)4096)
#define LARGE_DEFAULT_MB 1024

/* size_class: class index + 1, or LARGE | the raw block's bytes, or 0: not cacheable. */
#define LARGE ((size_t)1 << (sizeof(size_t) * 8 - 1))

typedef struct block_header {
  size_t size_class;
  size_t offset; /* from the raw block to the user pointer */
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
  int count[CLASS_COUNT];
  void *raw[CLASS_COUNT][32];
  /* Large blocks, oldest first, with their sizes; large_bytes is their sum. */
  int large_count;
  void *large_raw[LARGE_SLOTS];
  size_t large_size[LARGE_SLOTS];
  size_t large_bytes;
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
  for (int i = 0; i < c->large_count; i++) free(c->large_raw[i]);
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
  /* The smallest k with 2^k >= size: the bit length of size - 1 (one instruction where a
   * loop over k took two per class, on every allocation). */
  int k = size <= ((size_t)1 << CLASS_MIN_SHIFT)
              ? CLASS_MIN_SHIFT
              : (int)(sizeof(unsigned long long) * CHAR_BIT) -
                    __builtin_clzll((unsigned long long)(size - 1));
  return k <= CLASS_MAX_SHIFT ? k - CLASS_MIN_SHIFT : -1;
}

static void *cache_take(int k) {
#ifdef DT_NO_ALLOC_CACHE
  (void)k;
  return NULL;
#else
  block_cache *c = thread_cache();
  if (!c || c->count[k] == 0) return NULL;
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
  int capacity = k + CLASS_MIN_SHIFT <= SMALL_CLASS_SHIFT ? 32 : 4;
  if (!c || c->count[k] >= capacity) return false;
  c->raw[k][c->count[k]++] = raw;
  return true;
#endif
}

#ifndef DT_NO_ALLOC_CACHE
/* The large-block list's limit in bytes: DT_ALLOC_CACHE_MB, else LARGE_DEFAULT_MB (a value
 * outside 0..2^30 is reported once through the log callback). */
static size_t large_limit(void) {
  int64_t mb = dt__env_int("DT_ALLOC_CACHE_MB", 0, (int64_t)1 << 30, LARGE_DEFAULT_MB,
                           "the default (1024 MiB)");
  return (size_t)mb << 20;
}

static void large_remove(block_cache *c, int i) {
  c->large_bytes -= c->large_size[i];
  c->large_count--;
  memmove(c->large_raw + i, c->large_raw + i + 1, sizeof(void *) * (size_t)(c->large_count - i));
  memmove(c->large_size + i, c->large_size + i + 1, sizeof(size_t) * (size_t)(c->large_count - i));
}
#endif

/* The smallest cached large block of at least `need` bytes and at most a quarter more; its
 * size into *size. NULL when none fits. */
static void *large_take(size_t need, size_t *size) {
#ifdef DT_NO_ALLOC_CACHE
  (void)need;
  (void)size;
  return NULL;
#else
  block_cache *c = thread_cache();
  int best = -1;
  for (int i = 0; c && i < c->large_count; i++) {
    size_t s = c->large_size[i];
    if (s >= need && s - need <= need / 4 && (best < 0 || s < c->large_size[best])) best = i;
  }
  if (best < 0) return NULL;
  void *raw = c->large_raw[best];
  *size = c->large_size[best];
  large_remove(c, best);
  return raw;
#endif
}

/* Keeps a freed large block, evicting the oldest past the limit; false: free it now. */
static bool large_put(void *raw, size_t size) {
#ifdef DT_NO_ALLOC_CACHE
  (void)raw;
  (void)size;
  return false;
#else
  block_cache *c = thread_cache();
  size_t limit = large_limit();
  if (!c || size > limit) return false;
  while (c->large_count > 0 && (c->large_count == LARGE_SLOTS || c->large_bytes + size > limit)) {
    free(c->large_raw[0]);
    large_remove(c, 0);
  }
  c->large_raw[c->large_count] = raw;
  c->large_size[c->large_count++] = size;
  c->large_bytes += size;
  return true;
#endif
}

/* ---- Allocation
 * ---------------------------------------------------------------------------------- */

/* A new raw block of `total` bytes: 64-byte aligned when cacheable (any member of a class or
 * the large list then serves any alignment <= 64), else as asked. */
static void *raw_block(size_t total, size_t alignment, bool cacheable) {
  void *raw = NULL;
  size_t raw_alignment = cacheable ? 64 : alignment;
  if (raw_alignment <= 16) return malloc(total);
  return posix_memalign(&raw, raw_alignment, total) == 0 ? raw : NULL;
}

void *dt__alloc_aligned(size_t size, size_t alignment) {
  if (custom) return current.alloc(size, alignment, current.user);
  if (alignment < sizeof(block_header)) alignment = sizeof(block_header);
  size_t header = alignment; /* keeps the user pointer aligned; holds the block header */
  if (size > SIZE_MAX / 2 - header - LARGE_PAGE) return NULL;
  size_t total = header + size, tag = 0;
  int k = alignment <= 64 ? size_class_of(total) : -1;
  void *raw = NULL;
  if (k >= 0) {
    total = (size_t)1 << (k + CLASS_MIN_SHIFT);
    tag = (size_t)k + 1;
    raw = cache_take(k);
  } else if (alignment <= 64) {
    total = (total + LARGE_PAGE - 1) / LARGE_PAGE * LARGE_PAGE;
    size_t have = 0;
    raw = large_take(total, &have);
    if (raw) total = have; /* the block keeps its own size, so that it returns as it was */
    tag = LARGE | total;
  }
  if (!raw && !(raw = raw_block(total, alignment, tag != 0))) return NULL;
  char *user = (char *)raw + header;
  block_header *h = (block_header *)(user - sizeof(block_header));
  h->size_class = tag;
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
  size_t tag = h->size_class;
  if ((tag & LARGE) ? large_put(raw, tag & ~LARGE) : tag && cache_put((int)tag - 1, raw)) return;
  free(raw);
}
