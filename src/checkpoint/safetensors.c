/*
 * safetensors files: opening (validate, then map read-only), reading tensors whole, borrowed
 * or as one rank's block, and writing them byte for byte as the reference library does.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/checkpoint_impl.h"
#include "core/text_escape.h"
#include "checkpoint/checkpoint_meta.h"
#include "dtensor/ops.h"
#include "core/core_impl.h"
#include "core/refcount.h"
#include "profile/output_file.h"
#include "tensor/device_impl.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; this reader assumes a little-endian host"
#endif

/* ---- Opening ------------------------------------------------------------------------------ */

/* Drops one reference to a file mapping; the last one unmaps it. Also the release function
 * of borrowed tensors' storage (dt_wrap_ex), so it may run on any thread. */
static void map_release(void *user) {
  dt__safetensors_map *m = user;
  if (!dt__ref_drop(&m->refs)) return;
  munmap(m->addr, m->size);
  dt__free(m);
}

static void file_free(dt_safetensors *f) {
  if (!f) return;
  /* Borrowed tensors still alive hold their own references to the map. */
  if (f->map) map_release(f->map);
  if (f->fd >= 0) close(f->fd);
  dt__name_index_free(&f->names);
  dt__name_index_free(&f->meta_names);
  DT__FREE_EACH(f->entries, f->meta_keys, f->meta_values, f->strings, f->path_copy, f);
}

/* Reads n bytes at offset: pread for a file (looping over short reads), memcpy for an image. */
static dt_status read_at(dt_safetensors *f, const char *op, uint64_t offset, void *buf, size_t n) {
  if (n == 0) return DT_OK; /* an empty tensor's buffer may be NULL: memcpy must not see it */
  if (f->fd < 0) {
    memcpy(buf, f->image + offset, n);
  } else {
    size_t done = 0;
    while (done < n) {
      ssize_t r = pread(f->fd, (char *)buf + done, n - done, (off_t)(offset + done));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0)
        return dt__error(DT_ERR_IO, "%s: %s: reading %zu bytes at offset %" PRIu64 " failed: %s",
                         op, f->label, n, offset,
                         r < 0 ? strerror(errno) : "unexpected end of file");
      done += (size_t)r;
    }
  }
  atomic_fetch_add(&f->bytes_read, n);
  return DT_OK;
}

dt_status dt__safetensors_read(dt_safetensors *file, const char *op, uint64_t offset, void *buf,
                               size_t n) {
  if (offset > file->image_size || n > file->image_size - offset)
    return dt__error(DT_ERR_INVALID,
                     "%s: %s: %zu bytes at offset %" PRIu64 " lie past the end of the file (%zu "
                     "bytes)",
                     op, file->label, n, offset, file->image_size);
  return read_at(file, op, offset, buf, n);
}

/* Validates the 8-byte length and the header of a file of `size` bytes whose first bytes
 * (up to 8 + header length) `head` reads. */
static dt_status open_common(dt_safetensors *f, const char *op, uint64_t size) {
  if (size < 8)
    return dt__error(DT_ERR_INVALID,
                     "%s: %s: the file has %" PRIu64 " bytes, fewer than the 8-byte header length",
                     op, f->label, size);
  uint8_t len_bytes[8];
  dt_status st = read_at(f, op, 0, len_bytes, 8);
  if (st) return st;
  uint64_t length = 0;
  for (int i = 7; i >= 0; i--) length = (length << 8) | len_bytes[i];
  if (length > DT_SAFETENSORS_MAX_HEADER || length > size - 8)
    return dt__error(DT_ERR_INVALID,
                     "%s: %s: header length %" PRIu64 " passes the end of the file (%" PRIu64
                     " bytes)%s",
                     op, f->label, length, size,
                     length > DT_SAFETENSORS_MAX_HEADER ? " and the 100 MB header limit" : "");
  char *text = dt__alloc(length > 0 ? length : 1);
  if (!text) return dt__error(DT_ERR_NOMEM, "%s: %s: cannot allocate the header", op, f->label);
  st = read_at(f, op, 8, text, length);
  if (!st) st = dt__safetensors_parse_header(f, op, text, length, size - 8 - length);
  dt__free(text);
  /* The names are unique (the header check refused duplicates): an index for find. */
  if (!st && dt__name_index_init(&f->names, f->count))
    st = dt__error(DT_ERR_NOMEM, "%s: %s: cannot index %d names", op, f->label, f->count);
  for (int i = 0; i < f->count && !st; i++)
    (void)dt__name_index_add(&f->names, f->entries[i].name, i);
  f->data_start = 8 + length;
  atomic_store(&f->bytes_read, 0); /* the counter counts tensor bytes only */
  return st;
}

static dt_safetensors *file_new(void) {
  dt_safetensors *f = dt__calloc(sizeof *f);
  if (f) f->fd = -1;
  return f;
}

dt_status dt_safetensors_open(const char *path, dt_safetensors **out) {
  static const char op[] = "dt_safetensors_open";
  if (!out) return dt__error(DT_ERR_INVALID, "%s: out is NULL", op);
  *out = NULL;
  if (!path) return dt__error(DT_ERR_INVALID, "%s: path is NULL", op);
  /* The label is the path escaped (text_escape.h): a path may hold a name read from a file (a
   * checkpoint's metadata, a model's index), and every message quotes the label. An escape
   * takes at most 4 bytes per byte, so it is never cut. */
  dt_safetensors *f = file_new();
  size_t label_size = 4 * strlen(path) + 8;
  if (!f || !(f->path_copy = dt__alloc(label_size))) {
    dt__free(f);
    return dt__error(DT_ERR_NOMEM, "%s: cannot allocate a file handle", op);
  }
  f->label = dt__escape_text(f->path_copy, label_size, path);
  dt_status st = DT_OK;
  struct stat sb;
  /* O_NONBLOCK: a FIFO or a device in the file's place must not block the open; only a
   * regular file is read, and for one the flag changes nothing (it is cleared anyway). */
  f->fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (f->fd < 0 || fstat(f->fd, &sb) != 0) {
    st = dt__error(DT_ERR_IO, "%s: cannot open %s: %s", op, f->label, strerror(errno));
    goto fail;
  }
  if (!S_ISREG(sb.st_mode)) {
    st = dt__error(DT_ERR_IO, "%s: %s is not a regular file", op, f->label);
    goto fail;
  }
  int flags = fcntl(f->fd, F_GETFL);
  if (flags >= 0) (void)fcntl(f->fd, F_SETFL, flags & ~O_NONBLOCK);
  st = open_common(f, op, (uint64_t)sb.st_size);
  if (st) goto fail;
  f->image_size = (size_t)sb.st_size;
  /* Private and writable: a write through a borrowed tensor (any in-place op) copies the page
   * it touches instead of faulting, and never reaches the file (the descriptor is read-only).
   * The header was parsed from a pread copy, so such writes cannot change what was validated. */
  void *map = mmap(NULL, f->image_size, PROT_READ | PROT_WRITE, MAP_PRIVATE, f->fd, 0);
  if (map == MAP_FAILED) {
    st = dt__error(DT_ERR_IO, "%s: cannot map %s (%zu bytes): %s", op, f->label, f->image_size,
                   strerror(errno));
    goto fail;
  }
  f->map = dt__alloc(sizeof *f->map);
  if (!f->map) {
    munmap(map, f->image_size);
    st = dt__error(DT_ERR_NOMEM, "%s: cannot allocate a file handle", op);
    goto fail;
  }
  atomic_init(&f->map->refs, 1);
  f->map->addr = map;
  f->map->size = f->image_size;
  f->image = map;
  *out = f;
  return DT_OK;
fail:
  file_free(f);
  return st;
}

dt_status dt_safetensors_open_memory(const void *data, size_t size, dt_safetensors **out) {
  static const char op[] = "dt_safetensors_open_memory";
  if (!out) return dt__error(DT_ERR_INVALID, "%s: out is NULL", op);
  *out = NULL;
  if (!data && size > 0)
    return dt__error(DT_ERR_INVALID, "%s: data is NULL for %zu bytes", op, size);
  dt_safetensors *f = file_new();
  if (!f) return dt__error(DT_ERR_NOMEM, "%s: cannot allocate a file handle", op);
  f->label = "(memory)";
  f->image = data;
  f->image_size = size;
  dt_status st = open_common(f, op, size);
  if (st) {
    file_free(f);
    return st;
  }
  *out = f;
  return DT_OK;
}

void dt_safetensors_destroy(dt_safetensors *file) { file_free(file); }

/* ---- Inspecting --------------------------------------------------------------------------- */

int dt_safetensors_count(const dt_safetensors *file) { return file ? file->count : 0; }

dt_status dt_safetensors_entry(const dt_safetensors *file, int index,
                               dt_safetensors_entry_info *entry) {
  if (!file || !entry)
    return dt__error(DT_ERR_INVALID, "dt_safetensors_entry: %s is NULL", !file ? "file" : "entry");
  if (index < 0 || index >= file->count)
    return dt__error(DT_ERR_INDEX, "dt_safetensors_entry: index %d outside [0, %d)", index,
                     file->count);
  *entry = file->entries[index];
  return DT_OK;
}

int dt_safetensors_find(const dt_safetensors *file, const char *name) {
  if (!file || !name) return -1;
  return dt__name_index_find(&file->names, name);
}

int dt_safetensors_metadata_count(const dt_safetensors *file) { return file ? file->n_meta : 0; }

dt_status dt_safetensors_metadata(const dt_safetensors *file, int index, const char **key,
                                  const char **value) {
  if (!file || !key || !value)
    return dt__error(DT_ERR_INVALID, "dt_safetensors_metadata: %s is NULL",
                     !file  ? "file"
                     : !key ? "key"
                            : "value");
  if (index < 0 || index >= file->n_meta)
    return dt__error(DT_ERR_INDEX, "dt_safetensors_metadata: index %d outside [0, %d)", index,
                     file->n_meta);
  *key = file->meta_keys[index];
  *value = file->meta_values[index];
  return DT_OK;
}

const char *dt_safetensors_metadata_find(const dt_safetensors *file, const char *key) {
  if (!file || !key) return NULL;
  int i = dt__name_index_find(&file->meta_names, key);
  return i >= 0 ? file->meta_values[i] : NULL;
}

uint64_t dt_safetensors_bytes_read(const dt_safetensors *file) {
  return file ? atomic_load(&((dt_safetensors *)file)->bytes_read) : 0;
}

/* ---- Reading tensors ---------------------------------------------------------------------- */

static dt_status lookup(const dt_safetensors *file, const char *op, const char *name,
                        const dt_safetensors_entry_info **out) {
  int i = dt_safetensors_find(file, name);
  if (i < 0)
    return dt__error(DT_ERR_INVALID, "%s: %s has no tensor named `%s` (%d tensors)", op,
                     file->label, name, file->count);
  *out = &file->entries[i];
  return DT_OK;
}

static dt_status borrow(dt_safetensors *file, const char *op, const dt_safetensors_entry_info *e,
                        dt_tensor **out) {
  const uint8_t *data = file->image + file->data_start + e->data_begin;
  size_t size = dt_dtype_size(e->dtype);
  if ((uintptr_t)data % size != 0)
    return dt__error(DT_ERR_INVALID,
                     "%s: %s: tensor `%s` starts at byte %" PRIu64
                     ", not aligned to its %zu-byte elements: it cannot be borrowed (use "
                     "DT_SAFETENSORS_COPY)",
                     op, file->label, dt__ckpt_shown(0, e->name), file->data_start + e->data_begin,
                     size);
  /* The map is private copy-on-write: a write through the tensor stays in this process. The
   * tensor's storage holds a reference to the map, dropped when its last view goes; a memory
   * image is the caller's, borrowed as it is. */
  dt__safetensors_map *map = file->map;
  if (map) dt__ref_take(&map->refs);
  dt_tensor *t = NULL;
  dt_status st = dt_wrap_ex((void *)data, (size_t)(e->data_end - e->data_begin), e->ndim, e->shape,
                            NULL, e->dtype, map ? map_release : NULL, map, &t);
  if (st) {
    if (map) map_release(map);
    return st;
  }
  *out = t;
  return DT_OK;
}

dt_status dt_safetensors_load(dt_safetensors *file, const char *name, dt_safetensors_mode mode,
                              dt_tensor **out) {
  static const char op[] = "dt_safetensors_load";
  if (!out) return dt__error(DT_ERR_INVALID, "%s: out is NULL", op);
  *out = NULL;
  if (!file || !name)
    return dt__error(DT_ERR_INVALID, "%s: %s is NULL", op, !file ? "file" : "name");
  if (mode != DT_SAFETENSORS_COPY && mode != DT_SAFETENSORS_BORROW)
    return dt__error(DT_ERR_INVALID, "%s: mode %d is neither COPY nor BORROW", op, (int)mode);
  const dt_safetensors_entry_info *e = NULL;
  dt_status st = lookup(file, op, name, &e);
  if (st) return st;
  if (mode == DT_SAFETENSORS_BORROW) return borrow(file, op, e, out);
  dt_tensor *t = NULL;
  st = dt_empty(e->ndim, e->shape, e->dtype, &t);
  if (st) return st;
  st = read_at(file, op, file->data_start + e->data_begin, dt_tensor_data(t),
               (size_t)(e->data_end - e->data_begin));
  if (st) {
    dt_tensor_release(t);
    return st;
  }
  *out = t;
  return DT_OK;
}

/* torch.chunk geometry: piece `index` of `n` pieces of a dim of `size`. */
static void chunk_range(int64_t size, int64_t n, int64_t index, int64_t *start, int64_t *length) {
  int64_t piece = (size + n - 1) / n;
  int64_t s = piece * index;
  if (s > size) s = size;
  int64_t l = size - s;
  if (l > piece) l = piece;
  *start = s;
  *length = l;
}

dt_status dt_safetensors_load_distributed(dt_safetensors *file, const char *name, dt_mesh *mesh,
                                          int n_placements, const dt_placement *placements,
                                          dt_tensor **out) {
  static const char op[] = "dt_safetensors_load_distributed";
  if (!out) return dt__error(DT_ERR_INVALID, "%s: out is NULL", op);
  *out = NULL;
  if (!file || !name || !mesh || !placements)
    return dt__error(DT_ERR_INVALID, "%s: %s is NULL", op,
                     !file   ? "file"
                     : !name ? "name"
                     : !mesh ? "mesh"
                             : "placements");
  const dt_safetensors_entry_info *e = NULL;
  dt_status st = lookup(file, op, name, &e);
  if (st) return st;
  int mesh_ndim = dt_mesh_ndim(mesh);
  if (n_placements != mesh_ndim)
    return dt__error(DT_ERR_INVALID, "%s: %d placements for a %d-dim mesh", op, n_placements,
                     mesh_ndim);
  /* This rank's block: sharded dims split in mesh-dim order, as the dist layer does. */
  int64_t local[DT_MAX_DIMS], offset[DT_MAX_DIMS];
  for (int d = 0; d < e->ndim; d++) {
    local[d] = e->shape[d];
    offset[d] = 0;
  }
  for (int m = 0; m < mesh_ndim; m++) {
    dt_placement p = placements[m];
    if (p.kind == DT_REPLICATE) continue;
    if (p.kind == DT_STRIDED_SHARD)
      return dt__error(DT_ERR_UNSUPPORTED,
                       "%s: tensor `%s`: placement %d is StridedShard SS(%d,%d); load as Shard "
                       "or Replicate, then redistribute",
                       op, name, m, p.dim, p.split_factor);
    if (p.kind != DT_SHARD)
      return dt__error(DT_ERR_INVALID,
                       "%s: tensor `%s`: placement %d is Partial; a file holds full values "
                       "(load as Replicate, then redistribute)",
                       op, name, m);
    int dim = p.dim < 0 ? p.dim + e->ndim : p.dim;
    if (dim < 0 || dim >= e->ndim)
      return dt__error(DT_ERR_INVALID, "%s: tensor `%s`: Shard(%d) on a %d-dim tensor", op, name,
                       p.dim, e->ndim);
    int64_t start, length;
    chunk_range(local[dim], dt_mesh_size(mesh, m), dt_mesh_coordinate(mesh, m), &start, &length);
    offset[dim] += start;
    local[dim] = length;
  }
  dt_tensor *block = NULL;
  st = dt_empty(e->ndim, local, e->dtype, &block);
  if (st) return st;
  /* k: the outermost dim from which the block's trailing dims are whole, so that each run
   * local[k] * (whole trailing rows) is contiguous in the file. A row shard is one run. */
  int k = e->ndim - 1;
  while (k > 0 && local[k] == e->shape[k]) k--;
  size_t elem = dt_dtype_size(e->dtype);
  int64_t numel = dt_tensor_numel(block);
  if (e->ndim > 0 && numel > 0) {
    int64_t inner = 1; /* elements per unit of dim k in the file */
    for (int d = k + 1; d < e->ndim; d++) inner *= e->shape[d];
    size_t run = (size_t)(local[k] * inner) * elem;
    int64_t index[DT_MAX_DIMS] = {0};
    char *dst = dt_tensor_data(block);
    for (;;) {
      /* Row-major element offset of the run's first element in the whole tensor. */
      int64_t at = 0;
      for (int d = 0; d < e->ndim; d++)
        at = at * e->shape[d] + (d < k ? offset[d] + index[d] : d == k ? offset[d] : 0);
      st = read_at(file, op, file->data_start + e->data_begin + (uint64_t)at * elem, dst, run);
      if (st) break;
      dst += run;
      int d = k - 1;
      while (d >= 0 && ++index[d] == local[d]) index[d--] = 0;
      if (d < 0) break;
    }
  } else if (e->ndim == 0) {
    st = read_at(file, op, file->data_start + e->data_begin, dt_tensor_data(block), elem);
  }
  if (!st) {
    dt_dist_from_local_options options = {.global_shape = e->shape, .global_ndim = e->ndim};
    st = dt_dist_from_local(mesh, block, n_placements, placements, &options, out);
  }
  dt_tensor_release(block);
  return st;
}

/* ---- Writing ------------------------------------------------------------------------------ */

/* The reference library's dtype order (its enum order); it writes the widest first. */
static int dtype_rank(dt_dtype dtype) {
  switch (dtype) {
  case DT_BOOL: return 0;
  case DT_U8: return 4;
  case DT_F16: return 11;
  case DT_BF16: return 12;
  case DT_I32: return 13;
  case DT_F32: return 15;
  case DT_F64: return 17;
  case DT_I64: return 18;
  default: return -1;
  }
}

typedef struct save_item {
  const char *name;
  dt_tensor *tensor; /* contiguous (retained) */
} save_item;

static int compare_items(const void *a, const void *b) {
  const save_item *x = a, *y = b;
  int rx = dtype_rank(dt_tensor_dtype(x->tensor)), ry = dtype_rank(dt_tensor_dtype(y->tensor));
  if (rx != ry) return ry - rx;
  return strcmp(x->name, y->name);
}

static int compare_strings(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

typedef struct meta_pair {
  const char *key, *value;
} meta_pair;

static int compare_pairs(const void *a, const void *b) {
  return strcmp(((const meta_pair *)a)->key, ((const meta_pair *)b)->key);
}

/* A growable text buffer; `failed` records an allocation failure. */
typedef dt__ckpt_text text;

static void text_put(text *t, const char *s, size_t n) {
  if (!dt__ckpt_text_reserve(t, n + 1)) return;
  memcpy(t->data + t->length, s, n);
  t->length += n;
}

static void text_str(text *t, const char *s) { text_put(t, s, strlen(s)); }

/* A JSON string as serde_json writes it: quotes, backslashes and control characters escaped,
 * everything else (including non-ASCII UTF-8) as is. */
static void text_json_string(text *t, const char *s) {
  text_put(t, "\"", 1);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    char buf[8];
    switch (c) {
    case '"': text_str(t, "\\\""); break;
    case '\\': text_str(t, "\\\\"); break;
    case '\n': text_str(t, "\\n"); break;
    case '\r': text_str(t, "\\r"); break;
    case '\t': text_str(t, "\\t"); break;
    case '\b': text_str(t, "\\b"); break;
    case '\f': text_str(t, "\\f"); break;
    default:
      if (c < 0x20) {
        snprintf(buf, sizeof buf, "\\u%04x", c);
        text_str(t, buf);
      } else {
        text_put(t, (const char *)&c, 1);
      }
    }
  }
  text_put(t, "\"", 1);
}

static dt_status write_all(FILE *f, const void *data, size_t n) {
  return n == 0 || fwrite(data, 1, n, f) == n ? DT_OK : DT_ERR_IO;
}

/* save_file's argument checks, before anything is allocated or written. */
static dt_status check_save_args(const char *op, const char *path, int count,
                                 const char *const *names, dt_tensor *const *tensors,
                                 int n_metadata, const char *const *keys,
                                 const char *const *values) {
  if (!path) return dt__error(DT_ERR_INVALID, "%s: path is NULL", op);
  if (count < 0 || n_metadata < 0)
    return dt__error(DT_ERR_INVALID, "%s: count %d and n_metadata %d must be >= 0", op, count,
                     n_metadata);
  if (count > 0 && (!names || !tensors))
    return dt__error(DT_ERR_INVALID, "%s: %s is NULL for %d tensors", op,
                     !names ? "names" : "tensors", count);
  if (n_metadata > 0 && (!keys || !values))
    return dt__error(DT_ERR_INVALID, "%s: %s is NULL for %d metadata pairs", op,
                     !keys ? "keys" : "values", n_metadata);
  for (int i = 0; i < count; i++) {
    if (!names[i] || !tensors[i])
      return dt__error(DT_ERR_INVALID, "%s: %s[%d] is NULL", op, !names[i] ? "names" : "tensors",
                       i);
    if (strcmp(names[i], "__metadata__") == 0)
      return dt__error(DT_ERR_INVALID, "%s: names[%d] is `__metadata__`, which the format reserves",
                       op, i);
    if (dt_tensor_is_distributed(tensors[i]))
      return dt__error(DT_ERR_INVALID,
                       "%s: tensor `%s` is distributed: gather it with dt_dist_full_tensor first",
                       op, names[i]);
    if (tensors[i]->storage->device != 0) {
      char dev[48];
      return dt__error(
          DT_ERR_UNSUPPORTED, "%s: tensor `%s` is on %s; copy it to the CPU first (dt_to_device)",
          op, names[i], dt__device_key_format(tensors[i]->storage->device, dev, sizeof dev));
    }
    if (dtype_rank(dt_tensor_dtype(tensors[i])) < 0)
      return dt__error(DT_ERR_DTYPE, "%s: tensor `%s` has an unknown dtype %d", op, names[i],
                       (int)dt_tensor_dtype(tensors[i]));
  }
  for (int i = 0; i < n_metadata; i++) {
    if (!keys[i] || !values[i])
      return dt__error(DT_ERR_INVALID, "%s: %s[%d] is NULL", op, !keys[i] ? "keys" : "values", i);
  }
  return DT_OK;
}

/* The JSON header: the sorted metadata, then each item's dtype, shape and byte range. */
static void build_header(text *header, const save_item *items, int count,
                         const char *const *sorted_keys, const char *const *sorted_values,
                         int n_metadata) {
  text_str(header, "{");
  if (n_metadata > 0) {
    text_str(header, "\"__metadata__\":{");
    for (int i = 0; i < n_metadata; i++) {
      if (i) text_str(header, ",");
      text_json_string(header, sorted_keys[i]);
      text_str(header, ":");
      text_json_string(header, sorted_values[i]);
    }
    text_str(header, "}");
  }
  uint64_t offset = 0;
  for (int i = 0; i < count; i++) {
    dt_tensor *t = items[i].tensor;
    char buf[64];
    if (i || n_metadata > 0) text_str(header, ",");
    text_json_string(header, items[i].name);
    text_str(header, ":{\"dtype\":\"");
    text_str(header, dt__safetensors_dtype_name(dt_tensor_dtype(t)));
    text_str(header, "\",\"shape\":[");
    for (int d = 0; d < dt_tensor_ndim(t); d++) {
      snprintf(buf, sizeof buf, "%s%" PRId64, d ? "," : "", dt_tensor_size(t, d));
      text_str(header, buf);
    }
    uint64_t bytes = (uint64_t)dt_tensor_numel(t) * dt_dtype_size(dt_tensor_dtype(t));
    snprintf(buf, sizeof buf, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", offset,
             offset + bytes);
    text_str(header, buf);
    offset += bytes;
  }
  text_str(header, "}");
}

static dt_status save_file(const char *op, bool owned, const char *path, int count,
                           const char *const *names, dt_tensor *const *tensors, int n_metadata,
                           const char *const *keys, const char *const *values) {
  dt_status st = check_save_args(op, path, count, names, tensors, n_metadata, keys, values);
  if (st) return st;
  save_item *items = dt__calloc(sizeof *items * (size_t)(count > 0 ? count : 1));
  const char **sorted_keys = dt__calloc(sizeof *sorted_keys * (size_t)(n_metadata + 1));
  const char **sorted_values = dt__calloc(sizeof *sorted_values * (size_t)(n_metadata + 1));
  text header = {0};
  if (!items || !sorted_keys || !sorted_values) {
    st = dt__error(DT_ERR_NOMEM, "%s: cannot allocate for %d tensors", op, count);
    goto done;
  }
  for (int i = 0; i < count; i++) {
    items[i].name = names[i];
    st = dt_contiguous(tensors[i], &items[i].tensor);
    if (st) goto done;
  }
  qsort(items, (size_t)count, sizeof *items, compare_items);
  /* Duplicate names, found in a sorted copy: the items' order (dtype first) does not put
   * equal names of different dtypes side by side. */
  {
    const char **sorted_names = dt__alloc(sizeof *sorted_names * (size_t)(count > 0 ? count : 1));
    if (!sorted_names) {
      st = dt__error(DT_ERR_NOMEM, "%s: cannot allocate for %d tensors", op, count);
      goto done;
    }
    for (int i = 0; i < count; i++) sorted_names[i] = names[i];
    qsort(sorted_names, (size_t)count, sizeof *sorted_names, compare_strings);
    for (int i = 1; i < count && !st; i++) {
      if (strcmp(sorted_names[i - 1], sorted_names[i]) == 0)
        st = dt__error(DT_ERR_INVALID, "%s: tensor name `%s` appears twice", op, sorted_names[i]);
    }
    dt__free(sorted_names);
    if (st) goto done;
  }
  /* Metadata keys sorted, so the bytes do not depend on the caller's order: the pairs are
   * sorted together (a checkpoint shard has a key per block, and finding each key's value by
   * a scan was quadratic). */
  {
    meta_pair *pairs = dt__alloc(sizeof *pairs * (size_t)(n_metadata + 1));
    if (!pairs) {
      st = dt__error(DT_ERR_NOMEM, "%s: cannot allocate for %d metadata pairs", op, n_metadata);
      goto done;
    }
    for (int i = 0; i < n_metadata; i++) pairs[i] = (meta_pair){keys[i], values[i]};
    qsort(pairs, (size_t)n_metadata, sizeof *pairs, compare_pairs);
    for (int i = 0; i < n_metadata; i++) {
      sorted_keys[i] = pairs[i].key;
      sorted_values[i] = pairs[i].value;
    }
    dt__free(pairs);
  }
  for (int i = 1; i < n_metadata; i++) {
    if (strcmp(sorted_keys[i - 1], sorted_keys[i]) == 0) {
      st = dt__error(DT_ERR_INVALID, "%s: metadata key `%s` appears twice", op, sorted_keys[i]);
      goto done;
    }
  }
  build_header(&header, items, count, sorted_keys, sorted_values, n_metadata);
  /* The reference pads the header with spaces to a multiple of 8, so data starts aligned. */
  while (!header.failed && header.length % 8 != 0) text_str(&header, " ");
  if (header.failed) {
    st = dt__error(DT_ERR_NOMEM, "%s: cannot allocate the header", op);
    goto done;
  }
  dt__output_file output;
  FILE *f = owned ? dt__output_open_owned(&output, path) : dt__output_open(&output, path);
  if (!f) {
    int err = errno;
    st = dt__error(DT_ERR_IO, "%s: cannot write %s: %s", op, path,
                   dt__output_strerror(&output, err));
    goto done;
  }
  uint8_t len_bytes[8];
  for (int i = 0; i < 8; i++) len_bytes[i] = (uint8_t)((uint64_t)header.length >> (8 * i));
  bool failed = write_all(f, len_bytes, 8) || write_all(f, header.data, header.length);
  for (int i = 0; i < count && !failed; i++) {
    dt_tensor *t = items[i].tensor;
    failed = write_all(f, dt_tensor_data(t),
                       (size_t)dt_tensor_numel(t) * dt_dtype_size(dt_tensor_dtype(t))) != DT_OK;
  }
  /* dt__output_close fsyncs the temporary, renames it in place and fsyncs the folder. */
  int err = dt__output_close(&output, f, failed);
  if (err) {
    st = dt__output_close_error(&output, err, op);
    goto done;
  }
done:
  for (int i = 0; items && i < count; i++) dt_tensor_release(items[i].tensor);
  dt__free(items);
  dt__free(sorted_keys);
  dt__free(sorted_values);
  dt__free(header.data);
  return st;
}

dt_status dt_safetensors_save(const char *path, int count, const char *const *names,
                              dt_tensor *const *tensors, int n_metadata, const char *const *keys,
                              const char *const *values) {
  return save_file("dt_safetensors_save", false, path, count, names, tensors, n_metadata, keys,
                   values);
}

dt_status dt__safetensors_save_owned(const char *op, const char *path, int count,
                                     const char *const *names, dt_tensor *const *tensors,
                                     int n_metadata, const char *const *keys,
                                     const char *const *values) {
  return save_file(op, true, path, count, names, tensors, n_metadata, keys, values);
}
