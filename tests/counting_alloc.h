/* A counting allocator for the memory tests (dt_set_allocator): live bytes, their peak and
 * live blocks, kept in a header word before each block. One copy for every test that measures
 * what the library holds (install it before the test makes any object). */
#ifndef DT_TESTS_COUNTING_ALLOC_H
#define DT_TESTS_COUNTING_ALLOC_H

#include <stdatomic.h>
#include <stdlib.h>

#include "dtensor/core.h"

static atomic_llong live_bytes, peak_bytes, live_blocks;

static void *count_alloc(size_t size, size_t alignment, void *user) {
  (void)user;
  size_t head = alignment < 64 ? 64 : alignment;
  char *base = aligned_alloc(head, (head + size + head - 1) / head * head);
  if (!base) return NULL;
  ((size_t *)(base + head))[-1] = size;
  ((size_t *)(base + head))[-2] = head;
  atomic_fetch_add(&live_blocks, 1);
  long long now = atomic_fetch_add(&live_bytes, (long long)size) + (long long)size;
  long long peak = atomic_load(&peak_bytes);
  while (now > peak && !atomic_compare_exchange_weak(&peak_bytes, &peak, now)) {
  }
  return base + head;
}

static void count_free(void *ptr, void *user) {
  (void)user;
  if (!ptr) return;
  size_t size = ((size_t *)ptr)[-1], head = ((size_t *)ptr)[-2];
  atomic_fetch_sub(&live_blocks, 1);
  atomic_fetch_sub(&live_bytes, (long long)size);
  free((char *)ptr - head);
}

#endif /* DT_TESTS_COUNTING_ALLOC_H */
