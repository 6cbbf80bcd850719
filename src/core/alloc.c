/* Allocation through user-replaceable hooks; the default is aligned malloc. */
#include <stdlib.h>
#include <string.h>

#include "core/core_impl.h"

#define DT_DEFAULT_ALIGNMENT 64

static void *default_alloc(size_t size, size_t alignment, void *user) {
  (void)user;
  void *ptr = NULL;
  if (size == 0) size = 1;
  if (alignment <= 16) return malloc(size); /* glibc malloc is 16-byte aligned and cheaper */
  if (alignment < sizeof(void *)) alignment = sizeof(void *);
  if (posix_memalign(&ptr, alignment, size) != 0) return NULL;
  return ptr;
}

static void default_free(void *ptr, void *user) {
  (void)user;
  free(ptr);
}

static dt_allocator current = {default_alloc, default_free, NULL};

void dt_set_allocator(const dt_allocator *allocator) {
  if (allocator && allocator->alloc && allocator->free) {
    current = *allocator;
  } else {
    current = (dt_allocator){default_alloc, default_free, NULL};
  }
}

void *dt__alloc_aligned(size_t size, size_t alignment) {
  return current.alloc(size, alignment, current.user);
}

void *dt__alloc(size_t size) { return dt__alloc_aligned(size, DT_DEFAULT_ALIGNMENT); }

void *dt__calloc(size_t size) {
  void *ptr = dt__alloc(size);
  if (ptr) memset(ptr, 0, size);
  return ptr;
}

void dt__free(void *ptr) {
  if (ptr) current.free(ptr, current.user);
}
