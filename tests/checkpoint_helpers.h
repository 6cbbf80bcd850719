/* Helpers of the checkpoint tests that edit a saved metadata.json by hand. */
#ifndef DT_TESTS_CHECKPOINT_HELPERS_H
#define DT_TESTS_CHECKPOINT_HELPERS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Private header: dt__crc32c, the checksum metadata.json carries (version 3). */
#include "checkpoint/checkpoint_impl.h"

/* Reads the whole file at path into a NUL-terminated heap buffer (free it); NULL on failure. */
static inline char *ckpt_read_text(const char *path, size_t *length) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *text = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (n + 4096 + 1 > cap) {
      cap = (n + 4096 + 1) * 2;
      char *bigger = realloc(text, cap);
      if (!bigger) break;
      text = bigger;
    }
    size_t got = fread(text + n, 1, 4096, f);
    n += got;
    if (got < 4096) break;
  }
  fclose(f);
  if (text) text[n] = '\0';
  if (length) *length = n;
  return text;
}

static inline int ckpt_write_text(const char *path, const char *text, size_t length) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  size_t put = fwrite(text, 1, length, f);
  return fclose(f) == 0 && put == length ? 0 : -1;
}

/* Recomputes the checksum of a metadata text edited in memory, as a save would have written
 * it over the edited bytes: the CRC32C of everything before the last "metadata_crc32c" key.
 * Returns the new text's length (the digits may change in number); the buffer needs room
 * for 10 more bytes. -1 when the text has no checksum member. */
static inline long ckpt_resign_text(char *text, size_t length) {
  const char *key = "\"metadata_crc32c\":";
  char *at = NULL;
  for (char *p = strstr(text, key); p; p = strstr(p + 1, key)) at = p;
  if (!at) return -1;
  (void)length;
  uint32_t crc = dt__crc32c(0, text, (size_t)(at - text));
  int n = sprintf(at, "%s%u}\n", key, (unsigned)crc);
  return (long)(at - text) + n;
}

/* ckpt_resign_text on DIR/metadata.json, in place. 0 on success. */
static inline int ckpt_resign(const char *dir) {
  char path[4200];
  snprintf(path, sizeof path, "%s/metadata.json", dir);
  size_t length = 0;
  char *text = ckpt_read_text(path, &length);
  if (!text) return -1;
  char *room = realloc(text, length + 16);
  if (!room) {
    free(text);
    return -1;
  }
  long n = ckpt_resign_text(room, length);
  int rc = n < 0 ? -1 : ckpt_write_text(path, room, (size_t)n);
  free(room);
  return rc;
}

#endif
