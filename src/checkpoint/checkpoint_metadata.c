/*
 * metadata.json of a distributed checkpoint: written by rank 0 as the commit marker, read and
 * validated by every loader before a byte of data is trusted.
 *
 * {"format":"dtensor-checkpoint","version":2,"generation":G,
 *  "files":[{"name":"__G_0.safetensors","bytes":N,"generation":G,"rank":0,
 *            "crc32c":C},...],
 *  "tensors":[{"name":"0.weight","dtype":"F32","shape":[18,12],"mesh":[2],
 *              "placements":["S(0)"],
 *              "blocks":[{"file":0,"offsets":[0,0],"lengths":[9,12],"byte_range":[B,E]},...]}]}
 *
 * Version 3 (issue 35) ends with "metadata_crc32c":C, the CRC32C of every byte before that
 * key's opening quote, checked before anything else is read; and each data file records the
 * blocks it holds (dt__ckpt_block_record). Version 2 lacks both and version 1 (before issue
 * 22) also the per-file generation, rank and crc32c; both are still read, without those
 * checks. A text of any version that carries the checksum is held to it (so a flipped
 * "version" digit cannot drop it). Every version's blocks must tile their tensor exactly.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/checkpoint_meta.h"
#include "core/text_escape.h"
#include "core/json_scanner.h"

void dt__ckpt_meta_free(dt__ckpt_meta *meta) {
  if (!meta) return;
  dt__name_index_free(&meta->names);
  for (int i = 0; i < meta->n_files; i++) dt__free(meta->files[i].name);
  for (int i = 0; i < meta->n_tensors; i++) {
    dt__free(meta->tensors[i].name);
    dt__free(meta->tensors[i].blocks);
  }
  dt__free(meta->files);
  dt__free(meta->tensors);
  memset(meta, 0, sizeof *meta);
}

/* ---- Reading ------------------------------------------------------------------------------ */

typedef struct reader {
  dt__json_scanner r;
  const char *label; /* the path, for messages */
} reader;

static dt_status bad(reader *rd, const char *what) {
  return dt__error(DT_ERR_INVALID, "dt_checkpoint_load: %s: corrupt metadata at byte %td: %s",
                   rd->label, rd->r.p - rd->r.begin, what);
}

/* Wraps a scanner error (its message says the byte) with the file's name. */
static dt_status scan_failed(reader *rd, dt_status st) {
  if (st == DT_ERR_NOMEM) return st;
  char message[512];
  snprintf(message, sizeof message, "%s", dt_last_error());
  return dt__error(DT_ERR_INVALID, "dt_checkpoint_load: %s: corrupt metadata: %s", rd->label,
                   message);
}

/* Array iteration: call with *first = true just before '['. */
static dt_status next_element(reader *rd, bool *first, int *has) {
  dt__json_skip_ws(&rd->r);
  if (rd->r.p >= rd->r.end) return bad(rd, "unexpected end inside an array");
  if (*first) {
    if (*rd->r.p != '[') return bad(rd, "expected '['");
    rd->r.p++;
    *first = false;
    dt__json_skip_ws(&rd->r);
    if (rd->r.p < rd->r.end && *rd->r.p == ']') {
      rd->r.p++;
      *has = 0;
      return DT_OK;
    }
  } else {
    if (*rd->r.p == ']') {
      rd->r.p++;
      *has = 0;
      return DT_OK;
    }
    if (*rd->r.p != ',') return bad(rd, "expected ',' or ']' in an array");
    rd->r.p++;
    dt__json_skip_ws(&rd->r);
  }
  *has = 1;
  return DT_OK;
}

static dt_status read_integer(reader *rd, int64_t min, int64_t max, int64_t *out) {
  double v = 0;
  bool integral = false;
  dt_status st = dt__json_number(&rd->r, &v, &integral);
  if (st) return scan_failed(rd, st);
  if (!integral || v < (double)min || v > (double)max) return bad(rd, "integer out of range");
  *out = (int64_t)v;
  return DT_OK;
}

static dt_status read_integers(reader *rd, int max_count, int64_t min, int64_t max, int64_t *out,
                               int *count) {
  bool first = true;
  int has = 0, n = 0;
  for (;;) {
    dt_status st = next_element(rd, &first, &has);
    if (st) return st;
    if (!has) break;
    if (n == max_count) return bad(rd, "too many dims");
    st = read_integer(rd, min, max, &out[n++]);
    if (st) return st;
  }
  *count = n;
  return DT_OK;
}

static dt_status read_string(reader *rd, char **out) {
  dt__json_skip_ws(&rd->r);
  if (rd->r.p >= rd->r.end || *rd->r.p != '"') return bad(rd, "expected a string");
  dt__json_span sp;
  dt_status st = dt__json_string(&rd->r, &sp);
  if (st) return scan_failed(rd, st);
  *out = dt__json_copy_string(sp);
  return *out ? DT_OK : dt__error(DT_ERR_NOMEM, "dt_checkpoint_load: cannot allocate a string");
}

/* Objects: skips to the '{' that opens one, or says what was expected there. */
static dt_status open_object(reader *rd, const char *expected) {
  dt__json_skip_ws(&rd->r);
  if (rd->r.p >= rd->r.end || *rd->r.p != '{') return bad(rd, expected);
  rd->r.p++;
  return DT_OK;
}

/* Unknown keys are skipped so that a later version's additions do not break this reader. */
static dt_status skip_value(reader *rd) {
  dt_status st = dt__json_skip_value(&rd->r);
  return st ? scan_failed(rd, st) : DT_OK;
}

/* A key a reader knows, met a second time in one object, is refused: which value would count
 * is a guess (and a second "name" used to leak the first). */
static dt_status first_time(reader *rd, unsigned *seen, unsigned bit, const char *key) {
  if (*seen & bit) {
    char what[64];
    snprintf(what, sizeof what, "key \"%s\" appears twice in one object", key);
    return bad(rd, what);
  }
  *seen |= bit;
  return DT_OK;
}

/* Walks an object's keys: its '{' on the first call, then one key a call; false at the
 * closing '}' or once *st holds an error (the body's or the scan's). seen: the keys met so
 * far (first_time). */
typedef struct members {
  const char *expected; /* the message when there is no object */
  bool opened, first;
  unsigned seen;
} members;

static bool next_member(reader *rd, members *m, dt__json_span *key, dt_status *st) {
  if (*st) return false;
  if (!m->opened) {
    m->opened = m->first = true;
    if ((*st = open_object(rd, m->expected))) return false;
  }
  if (dt__json_next_key(&rd->r, &m->first, key, st)) return true;
  if (*st) *st = scan_failed(rd, *st);
  return false;
}

/* Appends a zeroed item to the array *items of *n (capacity: *n rounded up to a power of two);
 * NULL with DT_ERR_NOMEM set naming what when out of memory. */
static void *append(void **items, int *n, size_t size, const char *what) {
  if (!(*n & (*n - 1))) { /* full: double */
    int capacity = *n ? *n * 2 : 1;
    void *bigger = dt__calloc(size * (size_t)capacity);
    if (!bigger) {
      dt__error(DT_ERR_NOMEM, "dt_checkpoint_load: cannot allocate %s", what);
      return NULL;
    }
    if (*n) memcpy(bigger, *items, size * (size_t)*n);
    dt__free(*items);
    *items = bigger;
  }
  return (char *)*items + size * (size_t)(*n)++;
}

/* An array of objects: each is appended to the array *items of *n (see append) and parsed
 * into its new, zeroed item by read_element, which is also given the items' owner. */
static dt_status read_array(reader *rd, void **items, int *n, size_t size, const char *what,
                            dt_status (*read_element)(reader *, void *item, const void *owner),
                            const void *owner) {
  bool first = true;
  int has = 0;
  for (;;) {
    dt_status st = next_element(rd, &first, &has);
    if (st || !has) return st;
    void *item = append(items, n, size, what);
    if (!item) return DT_ERR_NOMEM;
    st = read_element(rd, item, owner);
    if (st) return st;
  }
}

#define INT64_LIMIT ((int64_t)1 << 62)

static dt_status read_block(reader *rd, void *item, const void *owner) {
  dt__ckpt_block *b = item;
  const dt__ckpt_tensor *t = owner;
  b->file = -1;
  bool seen_range = false;
  int n_offsets = -1, n_lengths = -1;
  members m = {.expected = "expected a block object"};
  dt__json_span key;
  dt_status st = DT_OK;
  while (next_member(rd, &m, &key, &st)) {
    if (dt__json_span_equals(key, "file")) {
      int64_t v = 0;
      st = first_time(rd, &m.seen, 1, "file");
      if (!st) st = read_integer(rd, 0, INT32_MAX, &v);
      b->file = (int)v;
    } else if (dt__json_span_equals(key, "offsets")) {
      st = first_time(rd, &m.seen, 2, "offsets");
      if (!st) st = read_integers(rd, DT_MAX_DIMS, 0, INT64_LIMIT, b->offsets, &n_offsets);
    } else if (dt__json_span_equals(key, "lengths")) {
      st = first_time(rd, &m.seen, 4, "lengths");
      if (!st) st = read_integers(rd, DT_MAX_DIMS, 0, INT64_LIMIT, b->lengths, &n_lengths);
    } else if (dt__json_span_equals(key, "byte_range")) {
      st = first_time(rd, &m.seen, 8, "byte_range");
      if (st) break;
      int64_t range[2];
      int n = 0;
      st = read_integers(rd, 2, 0, INT64_LIMIT, range, &n);
      if (!st && n != 2) return bad(rd, "byte_range needs 2 numbers");
      b->begin = (uint64_t)range[0];
      b->end = (uint64_t)range[1];
      seen_range = true;
    } else {
      st = skip_value(rd);
    }
  }
  if (st) return st;
  if (b->file < 0 || !seen_range || n_offsets != t->ndim || n_lengths != t->ndim)
    return bad(rd, "a block needs file, offsets and lengths (one per dim) and byte_range");
  return DT_OK;
}

/* The placements a tensor's metadata lists, as read: each one's text is checked once the
 * tensor's name, shape and mesh are known (the members come in any order). */
typedef struct placement_list {
  int count;
  int bad;               /* the first placement that is not "R" or "S(d)", or -1 */
  char text[80];         /* its text, escaped; or the first Shard's whose dim is out of range */
  int dims[DT_MAX_DIMS]; /* the sharded dim, -1 for R */
} placement_list;

/* "R" is -1, "S(d)" is d (as dt_placement_format writes them: no sign, no space, no leading
 * zero), anything else -2: Partial and StridedShard are refused by a save, so never written. */
static int placement_dim(const char *p) {
  if (strcmp(p, "R") == 0) return -1;
  if (p[0] != 'S' || p[1] != '(' || p[2] < '0' || p[2] > '9' || (p[2] == '0' && p[3] != ')'))
    return -2;
  int dim = 0, i = 2;
  for (; p[i] >= '0' && p[i] <= '9'; i++) {
    dim = dim * 10 + (p[i] - '0');
    if (dim >= DT_MAX_DIMS) return -2;
  }
  return p[i] == ')' && p[i + 1] == '\0' ? dim : -2;
}

static void add_placement(placement_list *pl, const char *p) {
  int dim = placement_dim(p);
  if (pl->count < DT_MAX_DIMS) pl->dims[pl->count] = dim;
  if (dim == -2 && pl->bad < 0) {
    pl->bad = pl->count;
    dt__escape_text(pl->text, sizeof pl->text, p);
  }
  pl->count++;
}

/* Each placement is one a save writes, one per mesh dim: Replicate, or Shard of a dim of the
 * tensor. "S(99)", "S(-1)" or "P(sum)" used to load and be shown by `ckpt inspect`. */
static dt_status check_placements(const reader *rd, const dt__ckpt_tensor *t,
                                  const placement_list *pl) {
  const char *name = dt__ckpt_shown(0, t->name);
  if (pl->bad >= 0)
    return dt__error(DT_ERR_INVALID,
                     "dt_checkpoint_load: %s: tensor `%s`: placement %d \"%s\" is not one a save "
                     "writes (\"R\" or \"S(d)\", d a dim of the tensor)",
                     rd->label, name, pl->bad, pl->text);
  if (pl->count != t->mesh_ndim)
    return dt__error(DT_ERR_INVALID,
                     "dt_checkpoint_load: %s: tensor `%s`: %d placements for a mesh of %d dims",
                     rd->label, name, pl->count, t->mesh_ndim);
  for (int m = 0; m < pl->count; m++)
    if (pl->dims[m] >= t->ndim)
      return dt__error(DT_ERR_INVALID,
                       "dt_checkpoint_load: %s: tensor `%s`: placement %d \"S(%d)\" shards dim "
                       "%d of a tensor of %d dims",
                       rd->label, name, m, pl->dims[m], pl->dims[m], t->ndim);
  return DT_OK;
}

static dt_status read_tensor(reader *rd, void *item, const void *owner) {
  (void)owner; /* the meta */
  dt__ckpt_tensor *t = item;
  t->ndim = -1;
  t->dtype = DT_DTYPE_COUNT;
  bool blocks_seen = false;
  placement_list pl = {.bad = -1};
  members m = {.expected = "expected a tensor object"};
  dt__json_span key;
  dt_status st = DT_OK;
  while (next_member(rd, &m, &key, &st)) {
    if (dt__json_span_equals(key, "name")) {
      st = first_time(rd, &m.seen, 1, "name");
      if (!st) st = read_string(rd, &t->name);
    } else if (dt__json_span_equals(key, "dtype")) {
      char *name = NULL;
      st = first_time(rd, &m.seen, 2, "dtype");
      if (!st) st = read_string(rd, &name);
      if (!st) t->dtype = dt__safetensors_dtype_parse(name);
      dt__free(name);
      if (!st && t->dtype == DT_DTYPE_COUNT) return bad(rd, "unknown dtype");
    } else if (dt__json_span_equals(key, "shape")) {
      st = first_time(rd, &m.seen, 4, "shape");
      if (!st) st = read_integers(rd, DT_MAX_DIMS, 0, INT64_LIMIT, t->shape, &t->ndim);
    } else if (dt__json_span_equals(key, "mesh")) {
      int64_t mesh[DT_MAX_DIMS];
      st = first_time(rd, &m.seen, 8, "mesh");
      if (!st) st = read_integers(rd, DT_MAX_DIMS, 1, INT32_MAX, mesh, &t->mesh_ndim);
      for (int i = 0; !st && i < t->mesh_ndim; i++) t->mesh[i] = (int)mesh[i];
    } else if (dt__json_span_equals(key, "placements")) {
      st = first_time(rd, &m.seen, 16, "placements");
      bool pfirst = true;
      int phas = 0, n = 0;
      t->placements[0] = '\0';
      while (!st) {
        st = next_element(rd, &pfirst, &phas);
        if (st || !phas) break;
        char *p = NULL;
        st = read_string(rd, &p);
        if (st) break;
        size_t at = strlen(t->placements);
        snprintf(t->placements + at, sizeof t->placements - at, "%s%s", n++ ? ", " : "", p);
        add_placement(&pl, p);
        dt__free(p);
      }
    } else if (dt__json_span_equals(key, "blocks")) {
      st = first_time(rd, &m.seen, 32, "blocks");
      if (st) break;
      if (t->ndim < 0) return bad(rd, "a tensor's shape must come before its blocks");
      blocks_seen = true;
      st = read_array(rd, (void **)&t->blocks, &t->n_blocks, sizeof *t->blocks, "blocks",
                      read_block, t);
    } else {
      st = skip_value(rd);
    }
  }
  if (st) return st;
  if (!t->name || t->ndim < 0 || t->dtype == DT_DTYPE_COUNT || !blocks_seen)
    return bad(rd, "a tensor needs name, dtype, shape and blocks");
  return check_placements(rd, t, &pl);
}

static dt_status read_file_entry(reader *rd, void *item, const void *owner) {
  (void)owner; /* the meta */
  dt__ckpt_file *f = item;
  bool seen_bytes = false;
  members m = {.expected = "expected a file object"};
  dt__json_span key;
  dt_status st = DT_OK;
  while (next_member(rd, &m, &key, &st)) {
    int64_t v = 0;
    if (dt__json_span_equals(key, "name")) {
      st = first_time(rd, &m.seen, 1, "name");
      if (!st) st = read_string(rd, &f->name);
    } else if (dt__json_span_equals(key, "bytes")) {
      st = first_time(rd, &m.seen, 2, "bytes");
      if (!st) st = read_integer(rd, 0, INT64_LIMIT, &v);
      f->bytes = (uint64_t)v;
      seen_bytes = true;
    } else if (dt__json_span_equals(key, "generation")) {
      st = first_time(rd, &m.seen, 4, "generation");
      if (!st) st = read_integer(rd, 0, INT64_LIMIT, &f->generation);
    } else if (dt__json_span_equals(key, "rank")) {
      st = first_time(rd, &m.seen, 8, "rank");
      if (!st) st = read_integer(rd, 0, INT32_MAX, &v);
      f->rank = (int)v;
    } else if (dt__json_span_equals(key, "crc32c")) {
      st = first_time(rd, &m.seen, 16, "crc32c");
      if (!st) st = read_integer(rd, 0, UINT32_MAX, &v);
      f->crc32c = (uint32_t)v;
    } else {
      st = skip_value(rd);
    }
  }
  if (st) return st;
  /* A file name is a plain name inside the checkpoint's directory, never a path. */
  if (!f->name || !seen_bytes || !f->name[0] || strchr(f->name, '/') || f->name[0] == '.')
    return bad(rd, "a file needs a plain name and its bytes");
  /* Version 2 names each file's generation, rank and checksum; all three or none. */
  f->has_identity = (m.seen & 28) == 28;
  if ((m.seen & 28) && !f->has_identity)
    return bad(rd, "a file needs all of generation, rank and crc32c, or none");
  return DT_OK;
}

#define CHECKSUM_KEY "\"metadata_crc32c\""

static bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

/* Finds the checksum member that ends a version 3 text: "metadata_crc32c", ':', up to 10
 * digits, '}' (whitespace between and after). *at: the offset of the key's opening quote,
 * so the checksum covers text[0, *at). False when the text does not end so. */
static bool find_checksum(const char *text, size_t length, size_t *at, uint64_t *recorded) {
  size_t i = length;
  while (i > 0 && is_space(text[i - 1])) i--;
  if (i == 0 || text[--i] != '}') return false;
  while (i > 0 && is_space(text[i - 1])) i--;
  size_t digits_end = i;
  while (i > 0 && text[i - 1] >= '0' && text[i - 1] <= '9') i--;
  if (i == digits_end || digits_end - i > 10) return false;
  uint64_t v = 0;
  for (size_t k = i; k < digits_end; k++) v = v * 10 + (uint64_t)(text[k] - '0');
  while (i > 0 && is_space(text[i - 1])) i--;
  if (i == 0 || text[--i] != ':') return false;
  while (i > 0 && is_space(text[i - 1])) i--;
  size_t key_length = strlen(CHECKSUM_KEY);
  if (i < key_length || memcmp(text + i - key_length, CHECKSUM_KEY, key_length) != 0) return false;
  *at = i - key_length;
  *recorded = v;
  return true;
}

dt_status dt__ckpt_meta_parse(const char *label, const char *text, size_t length,
                              dt__ckpt_meta *meta) {
  memset(meta, 0, sizeof *meta);
  reader rd = {.r = {.begin = text, .p = text, .end = text + length}, .label = label};
  /* The checksum first: an altered text is refused as such, whatever else the change did. */
  size_t signed_length = 0;
  uint64_t recorded = 0;
  bool has_checksum = find_checksum(text, length, &signed_length, &recorded);
  if (has_checksum) {
    uint32_t crc = dt__crc32c(0, text, signed_length);
    if (crc != recorded)
      return dt__error(DT_ERR_INVALID,
                       "dt_checkpoint_load: %s: the metadata fails its checksum: CRC32C 0x%08x "
                       "of its first %zu bytes, the file records %" PRIu64 " (0x%08" PRIx64
                       "): it was changed after the save",
                       label, (unsigned)crc, signed_length, recorded, recorded);
  }
  bool format_ok = false;
  int64_t version = 0;
  members m = {.expected = "expected a JSON object"};
  dt__json_span key;
  dt_status st = DT_OK;
  while (next_member(&rd, &m, &key, &st)) {
    if (dt__json_span_equals(key, "metadata_crc32c")) {
      /* Only the one find_checksum found, the last member, counts. */
      int64_t v = 0;
      st = first_time(&rd, &m.seen, 32, "metadata_crc32c");
      if (!st && (!has_checksum || key.s - 1 != text + signed_length))
        st = bad(&rd, "\"metadata_crc32c\" must be the last member, an integer");
      if (!st) st = read_integer(&rd, 0, UINT32_MAX, &v);
    } else if (dt__json_span_equals(key, "format")) {
      char *format = NULL;
      st = first_time(&rd, &m.seen, 1, "format");
      if (!st) st = read_string(&rd, &format);
      format_ok = format && strcmp(format, "dtensor-checkpoint") == 0;
      dt__free(format);
    } else if (dt__json_span_equals(key, "version")) {
      st = first_time(&rd, &m.seen, 2, "version");
      if (!st) st = read_integer(&rd, 0, 1000, &version);
      if (!st && (version < 1 || version > DT__CKPT_VERSION))
        st = bad(&rd, "unknown version (this library reads versions 1 to 3)");
    } else if (dt__json_span_equals(key, "generation")) {
      st = first_time(&rd, &m.seen, 4, "generation");
      if (!st) st = read_integer(&rd, 0, INT64_LIMIT, &meta->generation);
    } else if (dt__json_span_equals(key, "files")) {
      st = first_time(&rd, &m.seen, 8, "files");
      if (!st)
        st = read_array(&rd, (void **)&meta->files, &meta->n_files, sizeof *meta->files, "files",
                        read_file_entry, meta);
    } else if (dt__json_span_equals(key, "tensors")) {
      st = first_time(&rd, &m.seen, 16, "tensors");
      if (!st)
        st = read_array(&rd, (void **)&meta->tensors, &meta->n_tensors, sizeof *meta->tensors,
                        "tensors", read_tensor, meta);
    } else {
      st = skip_value(&rd);
    }
  }
  if (st) goto done;
  if (!format_ok) {
    st = bad(&rd, "not a dtensor checkpoint (\"format\" is not \"dtensor-checkpoint\")");
    goto done;
  }
  if (!(m.seen & 2)) {
    st = bad(&rd, "no \"version\"");
    goto done;
  }
  dt__json_skip_ws(&rd.r);
  if (rd.r.p != rd.r.end) {
    st = bad(&rd, "trailing characters after the metadata object");
    goto done;
  }
  if (version >= 3 && !(m.seen & 32)) {
    st = bad(&rd, "version 3 metadata must end with its checksum \"metadata_crc32c\"");
    goto done;
  }
  st = dt__ckpt_meta_check(label, (int)version, meta);
done:
  dt__free(rd.r.scratch);
  if (st) dt__ckpt_meta_free(meta);
  return st;
}

/* ---- Writing ------------------------------------------------------------------------------ */

bool dt__ckpt_text_reserve(dt__ckpt_text *t, size_t extra) {
  if (t->failed) return false;
  if (t->length + extra <= t->capacity) return true;
  size_t capacity = t->capacity ? 2 * t->capacity : 256;
  while (capacity < t->length + extra) capacity *= 2;
  char *data = dt__alloc(capacity);
  if (!data) {
    t->failed = true;
    return false;
  }
  if (t->length) memcpy(data, t->data, t->length);
  dt__free(t->data);
  t->data = data;
  t->capacity = capacity;
  return true;
}

DT_PRINTF(2, 3) static void put(dt__ckpt_text *t, const char *format, ...) {
  if (t->failed) return;
  for (;;) {
    va_list args;
    va_start(args, format);
    size_t room = t->capacity - t->length;
    int n = vsnprintf(t->data ? t->data + t->length : NULL, t->data ? room : 0, format, args);
    va_end(args);
    if (n < 0) {
      t->failed = true;
      return;
    }
    if (t->data && (size_t)n < room) {
      t->length += (size_t)n;
      return;
    }
    if (!dt__ckpt_text_reserve(t, (size_t)n + 1)) return;
  }
}

/* A JSON string; names are the caller's and may hold any byte. */
static void put_string(dt__ckpt_text *t, const char *s) {
  put(t, "\"");
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      put(t, "\\%c", c);
    else if (c < 0x20)
      put(t, "\\u%04x", c);
    else
      put(t, "%c", c);
  }
  put(t, "\"");
}

static void put_integers(dt__ckpt_text *t, int n, const int64_t *v) {
  put(t, "[");
  for (int i = 0; i < n; i++) put(t, "%s%" PRId64, i ? "," : "", v[i]);
  put(t, "]");
}

void dt__ckpt_meta_write(const dt__ckpt_meta *meta, dt__ckpt_text *out) {
  put(out,
      "{\"format\":\"dtensor-checkpoint\",\"version\":%d,\"generation\":%" PRId64 ",\n\"files\":[",
      meta->version ? meta->version : DT__CKPT_VERSION, meta->generation);
  for (int i = 0; i < meta->n_files; i++) {
    put(out, "%s\n {\"name\":", i ? "," : "");
    put_string(out, meta->files[i].name);
    const dt__ckpt_file *f = &meta->files[i];
    put(out, ",\"bytes\":%" PRIu64, f->bytes);
    if (f->has_identity)
      put(out, ",\"generation\":%" PRId64 ",\"rank\":%d,\"crc32c\":%" PRIu32, f->generation,
          f->rank, f->crc32c);
    put(out, "}");
  }
  put(out, "],\n\"tensors\":[");
  for (int i = 0; i < meta->n_tensors; i++) {
    const dt__ckpt_tensor *t = &meta->tensors[i];
    put(out, "%s\n {\"name\":", i ? "," : "");
    put_string(out, t->name);
    put(out, ",\"dtype\":\"%s\",\"shape\":", dt__safetensors_dtype_name(t->dtype));
    put_integers(out, t->ndim, t->shape);
    put(out, ",\"mesh\":[");
    for (int m = 0; m < t->mesh_ndim; m++) put(out, "%s%d", m ? "," : "", t->mesh[m]);
    put(out, "],\"placements\":[");
    /* placements holds "S(0), R": one JSON string per comma-separated item. */
    const char *p = t->placements;
    for (int m = 0; *p; m++) {
      const char *comma = strchr(p, ',');
      size_t n = comma ? (size_t)(comma - p) : strlen(p);
      char item[sizeof t->placements];
      snprintf(item, sizeof item, "%.*s", (int)n, p);
      put(out, "%s", m ? "," : "");
      put_string(out, item); /* as read: any byte, escaped */
      p += n;
      while (*p == ',' || *p == ' ') p++;
    }
    put(out, "],\"blocks\":[");
    for (int k = 0; k < t->n_blocks; k++) {
      const dt__ckpt_block *b = &t->blocks[k];
      put(out, "%s\n  {\"file\":%d,\"offsets\":", k ? "," : "", b->file);
      put_integers(out, t->ndim, b->offsets);
      put(out, ",\"lengths\":");
      put_integers(out, t->ndim, b->lengths);
      put(out, ",\"byte_range\":[%" PRIu64 ",%" PRIu64 "]}", b->begin, b->end);
    }
    put(out, "]}");
  }
  int version = meta->version ? meta->version : DT__CKPT_VERSION;
  if (version < 3) {
    put(out, "]}\n");
    return;
  }
  put(out, "],\n");
  uint32_t crc = out->failed ? 0 : dt__crc32c(0, out->data, out->length);
  put(out, CHECKSUM_KEY ":%" PRIu32 "}\n", crc);
}

void dt__ckpt_block_record(int ndim, const int64_t *offsets, const int64_t *lengths, char *buf,
                           size_t size) {
  char o[DT__CKPT_RECORD_MAX / 2], l[DT__CKPT_RECORD_MAX / 2];
  dt__format_ints(o, sizeof o, ndim, offsets);
  dt__format_ints(l, sizeof l, ndim, lengths);
  snprintf(buf, size, "offsets %s, lengths %s", o, l);
}
