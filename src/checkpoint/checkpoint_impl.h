/* Private layout of an open safetensors file, shared by the header parser and the loader. */
#ifndef DT_CHECKPOINT_IMPL_H
#define DT_CHECKPOINT_IMPL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtensor/checkpoint.h"

/* The reference library refuses headers above 100 MB; so do we, before allocating. */
#define DT_SAFETENSORS_MAX_HEADER 100000000ull

/* Names to small integers (name_index.c): open addressing over borrowed names, which must
 * outlive the index. */
typedef struct dt__name_slot {
  const char *name;
  int value;
} dt__name_slot;

typedef struct dt__name_index {
  dt__name_slot *slots;
  size_t mask;
  int count, capacity;
} dt__name_index;

/* An empty index with room for `capacity` names; DT_ERR_NOMEM (no message) on failure. */
dt_status dt__name_index_init(dt__name_index *index, int capacity);

/* Adds name -> value: -1 when added, the value already there when the name is (nothing is
 * added then), -2 when the index is full or was never made. */
int dt__name_index_add(dt__name_index *index, const char *name, int value);

/* The value of `name`, or -1. */
int dt__name_index_find(const dt__name_index *index, const char *name);

void dt__name_index_free(dt__name_index *index);

/* Text read from a file (a tensor name, a key, a file name, a header value) escaped for a
 * message (core/text_escape.h: control characters and bytes that are not UTF-8 become escapes,
 * so a message never carries a raw ESC or newline), cut with "..." past about 250 bytes. Each
 * slot (0 to 3) is a buffer of the thread, so one message can quote four texts; valid until the
 * thread's next call with that slot (file_text.c). */
const char *dt__ckpt_shown(int slot, const char *s);

/* CRC32C (Castagnoli) of n bytes, continuing from `crc` (0 to start): crc32c.c. */
uint32_t dt__crc32c(uint32_t crc, const void *data, size_t n);

/* A read-only file mapping with a reference count (see dt_safetensors.map). */
typedef struct dt__safetensors_map {
  atomic_int refs;
  void *addr;
  size_t size;
} dt__safetensors_map;

struct dt_safetensors {
  const char *label;    /* the path escaped (text_escape.h), or "(memory)", for messages */
  char *path_copy;      /* owned: the escaped path */
  int fd;               /* -1 for a memory image */
  const uint8_t *image; /* the whole file: the read-only map or the caller's memory */
  size_t image_size;
  uint64_t data_start; /* 8 + header length */
  char *strings;       /* owned: every name, key and value, NUL-terminated */
  dt_safetensors_entry_info *entries;
  int count;
  const char **meta_keys;
  const char **meta_values;
  int n_meta;
  /* The mmap of a file (NULL for a memory image), shared with the BORROW tensors: the handle
   * holds one reference and every borrowed tensor's storage one more, so the map goes away
   * with the last of them. */
  struct dt__safetensors_map *map;
  atomic_uint_fast64_t bytes_read;
  dt__name_index names;      /* entry names -> entry index */
  dt__name_index meta_names; /* __metadata__ keys -> their index (a checkpoint shard holds one
                              * key per block: lookups and the duplicate check stay linear) */
};

/* Parses and validates the header text (length bytes, not NUL-terminated) against a data
 * section of data_size bytes, filling file's entries, metadata and strings. `op` names the
 * public function in messages. */
dt_status dt__safetensors_parse_header(dt_safetensors *file, const char *op, const char *text,
                                       size_t length, uint64_t data_size);

/* The safetensors name of a dtype ("F32") and back (DT_DTYPE_COUNT when unknown). */
const char *dt__safetensors_dtype_name(dt_dtype dtype);
dt_dtype dt__safetensors_dtype_parse(const char *name);

/* Reads n bytes at absolute file offset `offset` (pread, or memcpy for a memory image),
 * counted in the handle's bytes_read. `op` names the public function in messages. */
dt_status dt__safetensors_read(dt_safetensors *file, const char *op, uint64_t offset, void *buf,
                               size_t n);

/* dt_safetensors_save for a file whose name the library owns (a checkpoint's shard, see
 * dt__output_open_owned): a link or stale file at `path` is replaced, never followed, and the
 * new file's mode is 0666 less the umask. `op` names the public function in messages. */
dt_status dt__safetensors_save_owned(const char *op, const char *path, int count,
                                     const char *const *names, dt_tensor *const *tensors,
                                     int n_metadata, const char *const *keys,
                                     const char *const *values);

/* Failure injection for the crash-safety tests: when dt__checkpoint_fail_step equals one of
 * these steps, dt_checkpoint_save stops there with DT_ERR_IO, as a crash would, leaving the
 * files as they are at that point. 0 (the default) injects nothing. */
enum {
  DT__CKPT_STEP_NONE = 0,
  DT__CKPT_STEP_BEFORE_DATA = 1,   /* nothing written yet */
  DT__CKPT_STEP_DATA_WRITTEN = 2,  /* data files fsynced and renamed; no metadata */
  DT__CKPT_STEP_METADATA_TEMP = 3, /* metadata temporary fsynced, not renamed */
  DT__CKPT_STEP_COMMITTED = 4,     /* metadata renamed; old generations not removed */
};
extern atomic_int dt__checkpoint_fail_step;

#endif
