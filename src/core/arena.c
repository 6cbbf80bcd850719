/* Arenas: bump allocation in blocks, freed all at once. A graph keeps its nodes, names and
 * types in one; any structure with many small parts and one lifetime can use one. */
#include <stdint.h>
#include <string.h>

#include "core/core_impl.h"

struct dt__arena_block {
  dt__arena_block *next;
  size_t size;
  /* data follows, 8-byte aligned (the header is 16 bytes) */
};

#define ARENA_BLOCK 8192

void *dt__arena_alloc(dt__arena *arena, size_t size) {
  /* Rounding up and the block header must not wrap around: such a request fails like any
   * allocation that cannot be met. */
  if (size > SIZE_MAX - sizeof(dt__arena_block) - 8) return NULL;
  size = (size + 7) & ~(size_t)7;
  if (!arena->head || size > arena->capacity - arena->used) {
    size_t cap = size > ARENA_BLOCK ? size : ARENA_BLOCK;
    dt__arena_block *b = dt__alloc(sizeof *b + cap);
    if (!b) return NULL;
    b->next = arena->head;
    b->size = cap;
    arena->head = b;
    arena->used = 0;
    arena->capacity = cap;
  }
  char *p = (char *)(arena->head + 1) + arena->used;
  arena->used += size;
  memset(p, 0, size);
  return p;
}

char *dt__arena_strdup(dt__arena *arena, const char *s) {
  size_t n = strlen(s);
  char *p = dt__arena_alloc(arena, n + 1);
  if (p) memcpy(p, s, n + 1);
  return p;
}

void dt__arena_free(dt__arena *arena) {
  dt__arena_block *b = arena->head;
  while (b) {
    dt__arena_block *next = b->next;
    dt__free(b);
    b = next;
  }
  arena->head = NULL;
  arena->used = arena->capacity = 0;
}
