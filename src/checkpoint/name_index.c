/*
 * An index from names to small integers (open addressing, linear probing, a power-of-two
 * table at most half full), so that looking up a tensor by name costs the same for a file of
 * 100,000 tensors as for one of ten.
 */
#include <string.h>

#include "checkpoint/checkpoint_impl.h"
#include "core/core_impl.h"

dt_status dt__name_index_init(dt__name_index *index, int capacity) {
  memset(index, 0, sizeof *index);
  size_t slots = 8;
  while (slots < 2 * (size_t)(capacity > 0 ? capacity : 1)) slots *= 2;
  index->slots = dt__calloc(sizeof *index->slots * slots);
  if (!index->slots) return DT_ERR_NOMEM;
  index->mask = slots - 1;
  index->capacity = capacity;
  return DT_OK;
}

static size_t slot_of(const dt__name_index *index, const char *name) {
  size_t at = (size_t)dt__hash_bytes(name, strlen(name)) & index->mask;
  while (index->slots[at].name && strcmp(index->slots[at].name, name) != 0)
    at = (at + 1) & index->mask;
  return at;
}

int dt__name_index_add(dt__name_index *index, const char *name, int value) {
  if (!index->slots || index->count >= index->capacity) return -2;
  size_t at = slot_of(index, name);
  if (index->slots[at].name) return index->slots[at].value;
  index->slots[at].name = name;
  index->slots[at].value = value;
  index->count++;
  return -1;
}

int dt__name_index_find(const dt__name_index *index, const char *name) {
  if (!index->slots || !name) return -1;
  size_t at = slot_of(index, name);
  return index->slots[at].name ? index->slots[at].value : -1;
}

void dt__name_index_free(dt__name_index *index) {
  dt__free(index->slots);
  memset(index, 0, sizeof *index);
}
