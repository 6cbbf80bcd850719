/*
 * The safetensors header: a small JSON parser for exactly the shape the format allows, and
 * the checks that make the header safe to trust. The parser never reads past `length`
 * bytes and allocates only in proportion to the header's real size (never to a number the
 * header claims), so a hostile file costs at most a few times its own size.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/checkpoint_impl.h"
#include "core/core_impl.h"
#include "tensor/tensor_impl.h"
#include "core/json_scanner.h"

/* Nesting allowed inside values we skip (unknown fields): deep enough for any real header,
 * shallow enough that recursion stays cheap. */
#define MAX_SKIP_DEPTH 32

/* The dtypes libdtensor has, by their safetensors names. */
static const struct {
  const char *name;
  dt_dtype dtype;
} dtype_names[] = {
    {"F32", DT_F32}, {"F64", DT_F64}, {"BF16", DT_BF16}, {"F16", DT_F16},
    {"I64", DT_I64}, {"I32", DT_I32}, {"U8", DT_U8},     {"BOOL", DT_BOOL},
};
#define N_DTYPE_NAMES ((int)(sizeof dtype_names / sizeof dtype_names[0]))

const char *dt__safetensors_dtype_name(dt_dtype dtype) {
  for (int i = 0; i < N_DTYPE_NAMES; i++) {
    if (dtype_names[i].dtype == dtype) return dtype_names[i].name;
  }
  return NULL;
}

dt_dtype dt__safetensors_dtype_parse(const char *name) {
  for (int i = 0; i < N_DTYPE_NAMES; i++) {
    if (strcmp(dtype_names[i].name, name) == 0) return dtype_names[i].dtype;
  }
  return DT_DTYPE_COUNT;
}

typedef struct parser {
  const char *op, *label;
  const char *begin, *p, *end;
  char *strings; /* next free byte of file->strings */
  size_t max_meta;
} parser;

static long position(const parser *ps) { return (long)(ps->p - ps->begin); }

static dt_status syntax(const parser *ps, const char *what) {
  if (ps->p >= ps->end)
    return dt__error(DT_ERR_INVALID,
                     "%s: %s: header is not valid JSON: %s, but the header ends at byte %ld",
                     ps->op, ps->label, what, position(ps));
  return dt__error(DT_ERR_INVALID, "%s: %s: header is not valid JSON: %s at byte %ld (found '%c')",
                   ps->op, ps->label, what, position(ps),
                   (*ps->p >= 0x20 && *ps->p < 0x7f) ? *ps->p : '?');
}

static void skip_space(parser *ps) {
  while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
    ps->p++;
}

static bool accept(parser *ps, char c) {
  skip_space(ps);
  if (ps->p < ps->end && *ps->p == c) {
    ps->p++;
    return true;
  }
  return false;
}

static int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static bool read_hex4(parser *ps, unsigned *out) {
  if (ps->end - ps->p < 4) return false;
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    int d = hex_digit(ps->p[i]);
    if (d < 0) return false;
    v = v * 16 + (unsigned)d;
  }
  ps->p += 4;
  *out = v;
  return true;
}

static char *put_utf8(char *o, unsigned cp) {
  if (cp < 0x80) {
    *o++ = (char)cp;
  } else if (cp < 0x800) {
    *o++ = (char)(0xc0 | (cp >> 6));
    *o++ = (char)(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    *o++ = (char)(0xe0 | (cp >> 12));
    *o++ = (char)(0x80 | ((cp >> 6) & 0x3f));
    *o++ = (char)(0x80 | (cp & 0x3f));
  } else {
    *o++ = (char)(0xf0 | (cp >> 18));
    *o++ = (char)(0x80 | ((cp >> 12) & 0x3f));
    *o++ = (char)(0x80 | ((cp >> 6) & 0x3f));
    *o++ = (char)(0x80 | (cp & 0x3f));
  }
  return o;
}

/* Decodes a JSON string into the strings buffer. A decoded string is never longer than its
 * source text, so the buffer (twice the header length) cannot overflow. \u0000 is refused:
 * names and metadata are C strings. */
static dt_status parse_string(parser *ps, const char **out) {
  if (!accept(ps, '"')) return syntax(ps, "expected a string");
  char *start = ps->strings, *o = ps->strings;
  for (;;) {
    if (ps->p >= ps->end) return syntax(ps, "unterminated string");
    unsigned char c = (unsigned char)*ps->p++;
    if (c == '"') break;
    if (c < 0x20) {
      ps->p--;
      return syntax(ps, "control character in a string");
    }
    if (c != '\\') {
      *o++ = (char)c;
      continue;
    }
    if (ps->p >= ps->end) return syntax(ps, "unterminated escape");
    char e = *ps->p++;
    switch (e) {
    case '"': *o++ = '"'; break;
    case '\\': *o++ = '\\'; break;
    case '/': *o++ = '/'; break;
    case 'b': *o++ = '\b'; break;
    case 'f': *o++ = '\f'; break;
    case 'n': *o++ = '\n'; break;
    case 'r': *o++ = '\r'; break;
    case 't': *o++ = '\t'; break;
    case 'u': {
      unsigned cp;
      if (!read_hex4(ps, &cp)) return syntax(ps, "bad \\u escape");
      if (cp >= 0xdc00 && cp <= 0xdfff) return syntax(ps, "lone low surrogate in \\u escape");
      if (cp >= 0xd800 && cp <= 0xdbff) {
        unsigned low;
        if (ps->end - ps->p < 2 || ps->p[0] != '\\' || ps->p[1] != 'u')
          return syntax(ps, "high surrogate without its low half");
        ps->p += 2;
        if (!read_hex4(ps, &low) || low < 0xdc00 || low > 0xdfff)
          return syntax(ps, "high surrogate without its low half");
        cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
      }
      if (cp == 0) return syntax(ps, "\\u0000 in a string (names must be C strings)");
      o = put_utf8(o, cp);
      break;
    }
    default: ps->p--; return syntax(ps, "unknown escape");
    }
  }
  *o++ = '\0';
  ps->strings = o;
  *out = start;
  return DT_OK;
}

/* A non-negative integer that fits in uint64 (shape sizes and offsets). */
static dt_status parse_uint(parser *ps, const char *tensor, const char *field, uint64_t *out) {
  skip_space(ps);
  if (ps->p < ps->end && *ps->p == '-')
    return dt__error(DT_ERR_INVALID,
                     "%s: %s: tensor `%s`: %s holds a negative number at byte %ld (sizes and "
                     "offsets are unsigned)",
                     ps->op, ps->label, dt__ckpt_shown(0, tensor), field, position(ps));
  if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
    return dt__error(DT_ERR_INVALID,
                     "%s: %s: tensor `%s`: %s must hold unsigned integers (byte %ld)", ps->op,
                     ps->label, dt__ckpt_shown(0, tensor), field, position(ps));
  uint64_t v = 0;
  while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
    if (__builtin_mul_overflow(v, 10, &v) ||
        __builtin_add_overflow(v, (uint64_t)(*ps->p - '0'), &v))
      return dt__error(DT_ERR_INVALID, "%s: %s: tensor `%s`: a number in %s overflows 64 bits",
                       ps->op, ps->label, dt__ckpt_shown(0, tensor), field);
    ps->p++;
  }
  if (ps->p < ps->end && (*ps->p == '.' || *ps->p == 'e' || *ps->p == 'E'))
    return dt__error(DT_ERR_INVALID, "%s: %s: tensor `%s`: %s holds a non-integer at byte %ld",
                     ps->op, ps->label, dt__ckpt_shown(0, tensor), field, position(ps));
  *out = v;
  return DT_OK;
}

/* Skips any JSON value (fields the format does not define are ignored, as the reference
 * does). Strings are decoded into scratch space that is then given back. */
static dt_status skip_value(parser *ps, int depth) {
  if (depth > MAX_SKIP_DEPTH) return syntax(ps, "values nested too deeply");
  skip_space(ps);
  if (ps->p >= ps->end) return syntax(ps, "expected a value");
  char c = *ps->p;
  if (c == '"') {
    char *saved = ps->strings;
    const char *s;
    dt_status st = parse_string(ps, &s);
    ps->strings = saved;
    return st;
  }
  if (c == '{' || c == '[') {
    char close = c == '{' ? '}' : ']';
    ps->p++;
    if (accept(ps, close)) return DT_OK;
    for (;;) {
      if (c == '{') {
        char *saved = ps->strings;
        const char *k;
        dt_status st = parse_string(ps, &k);
        ps->strings = saved;
        if (st) return st;
        if (!accept(ps, ':')) return syntax(ps, "expected ':'");
      }
      dt_status st = skip_value(ps, depth + 1);
      if (st) return st;
      if (accept(ps, close)) return DT_OK;
      if (!accept(ps, ',')) return syntax(ps, "expected ',' or the end of a container");
    }
  }
  size_t literal = dt__json_literal_length(ps->p, ps->end);
  if (literal) {
    ps->p += literal;
    return DT_OK;
  }
  if (c == '-' || (c >= '0' && c <= '9')) {
    ps->p++;
    while (ps->p < ps->end && strchr("0123456789.eE+-", *ps->p) && *ps->p) ps->p++;
    return DT_OK;
  }
  return syntax(ps, "expected a value");
}

static dt_status parse_metadata(parser *ps, dt_safetensors *file) {
  skip_space(ps);
  if (ps->end - ps->p >= 4 && memcmp(ps->p, "null", 4) == 0) {
    ps->p += 4;
    return DT_OK;
  }
  if (!accept(ps, '{')) return syntax(ps, "__metadata__ must be an object of strings");
  if (accept(ps, '}')) return DT_OK;
  for (;;) {
    const char *key, *value;
    dt_status st = parse_string(ps, &key);
    if (st) return st;
    if (!accept(ps, ':')) return syntax(ps, "expected ':'");
    skip_space(ps);
    if (ps->p >= ps->end || *ps->p != '"')
      return dt__error(DT_ERR_INVALID,
                       "%s: %s: __metadata__ value of key `%s` is not a string (byte %ld)", ps->op,
                       ps->label, dt__ckpt_shown(0, key), position(ps));
    st = parse_string(ps, &value);
    if (st) return st;
    if ((size_t)file->n_meta == ps->max_meta) return syntax(ps, "too many metadata pairs");
    file->meta_keys[file->n_meta] = key;
    file->meta_values[file->n_meta] = value;
    file->n_meta++;
    if (accept(ps, '}')) break;
    if (!accept(ps, ',')) return syntax(ps, "expected ',' or '}' in __metadata__");
  }
  /* Duplicates through an index of the keys, which dt_safetensors_metadata_find then uses:
   * a shard of many blocks has as many keys, and comparing each with all was quadratic. */
  if (dt__name_index_init(&file->meta_names, file->n_meta))
    return dt__error(DT_ERR_NOMEM, "%s: %s: cannot index %d metadata keys", ps->op, ps->label,
                     file->n_meta);
  for (int i = 0; i < file->n_meta; i++)
    if (dt__name_index_add(&file->meta_names, file->meta_keys[i], i) != -1)
      return dt__error(DT_ERR_INVALID, "%s: %s: __metadata__ key `%s` appears twice", ps->op,
                       ps->label, dt__ckpt_shown(0, file->meta_keys[i]));
  return DT_OK;
}

static dt_status parse_tensor(parser *ps, const char *name, dt_safetensors_entry_info *entry) {
  bool have_dtype = false, have_shape = false, have_offsets = false;
  memset(entry, 0, sizeof *entry);
  entry->name = name;
  if (!accept(ps, '{'))
    return dt__error(DT_ERR_INVALID,
                     "%s: %s: tensor `%s`: its entry is not a JSON object (byte %ld)", ps->op,
                     ps->label, dt__ckpt_shown(0, name), position(ps));
  if (!accept(ps, '}')) {
    for (;;) {
      char *saved = ps->strings;
      const char *key;
      dt_status st = parse_string(ps, &key);
      if (st) return st;
      if (!accept(ps, ':')) return syntax(ps, "expected ':'");
      if (strcmp(key, "dtype") == 0 && !have_dtype) {
        const char *dtype;
        st = parse_string(ps, &dtype);
        if (st) return st;
        entry->dtype = dt__safetensors_dtype_parse(dtype);
        if (entry->dtype == DT_DTYPE_COUNT)
          return dt__error(DT_ERR_DTYPE,
                           "%s: %s: tensor `%s` has dtype `%.40s`, which libdtensor does not "
                           "support (F32, F64, BF16, F16, I64, I32, U8, BOOL)",
                           ps->op, ps->label, dt__ckpt_shown(0, name), dt__ckpt_shown(1, dtype));
        have_dtype = true;
      } else if (strcmp(key, "shape") == 0 && !have_shape) {
        if (!accept(ps, '['))
          return dt__error(DT_ERR_INVALID, "%s: %s: tensor `%s`: shape is not an array", ps->op,
                           ps->label, dt__ckpt_shown(0, name));
        if (!accept(ps, ']')) {
          for (;;) {
            uint64_t size;
            st = parse_uint(ps, name, "shape", &size);
            if (st) return st;
            if (entry->ndim == DT_MAX_DIMS)
              return dt__error(DT_ERR_INVALID,
                               "%s: %s: tensor `%s` has more than %d dims (libdtensor's limit)",
                               ps->op, ps->label, dt__ckpt_shown(0, name), DT_MAX_DIMS);
            if (size > (uint64_t)INT64_MAX)
              return dt__error(DT_ERR_INVALID,
                               "%s: %s: tensor `%s`: shape size %" PRIu64 " passes INT64_MAX",
                               ps->op, ps->label, dt__ckpt_shown(0, name), size);
            entry->shape[entry->ndim++] = (int64_t)size;
            if (accept(ps, ']')) break;
            if (!accept(ps, ',')) return syntax(ps, "expected ',' or ']' in a shape");
          }
        }
        have_shape = true;
      } else if (strcmp(key, "data_offsets") == 0 && !have_offsets) {
        if (!accept(ps, '['))
          return dt__error(DT_ERR_INVALID, "%s: %s: tensor `%s`: data_offsets is not an array",
                           ps->op, ps->label, dt__ckpt_shown(0, name));
        st = parse_uint(ps, name, "data_offsets", &entry->data_begin);
        if (!st && !accept(ps, ','))
          st = dt__error(DT_ERR_INVALID,
                         "%s: %s: tensor `%s`: data_offsets must hold exactly two numbers", ps->op,
                         ps->label, dt__ckpt_shown(0, name));
        if (!st) st = parse_uint(ps, name, "data_offsets", &entry->data_end);
        if (!st && !accept(ps, ']'))
          st = dt__error(DT_ERR_INVALID,
                         "%s: %s: tensor `%s`: data_offsets must hold exactly two numbers", ps->op,
                         ps->label, dt__ckpt_shown(0, name));
        if (st) return st;
        have_offsets = true;
      } else if (strcmp(key, "dtype") == 0 || strcmp(key, "shape") == 0 ||
                 strcmp(key, "data_offsets") == 0) {
        return dt__error(DT_ERR_INVALID, "%s: %s: tensor `%s`: field `%s` appears twice", ps->op,
                         ps->label, dt__ckpt_shown(0, name), dt__ckpt_shown(1, key));
      } else {
        st = skip_value(ps, 0);
        if (st) return st;
      }
      ps->strings = saved; /* field names are not kept; dtype strings neither */
      if (accept(ps, '}')) break;
      if (!accept(ps, ',')) return syntax(ps, "expected ',' or '}' in a tensor entry");
    }
  }
  const char *missing = !have_dtype     ? "dtype"
                        : !have_shape   ? "shape"
                        : !have_offsets ? "data_offsets"
                                        : NULL;
  if (missing)
    return dt__error(DT_ERR_INVALID, "%s: %s: tensor `%s` has no `%s` field", ps->op, ps->label,
                     dt__ckpt_shown(0, name), missing);
  return DT_OK;
}

static int compare_names(const void *a, const void *b) {
  const dt_safetensors_entry_info *x = *(const dt_safetensors_entry_info *const *)a;
  const dt_safetensors_entry_info *y = *(const dt_safetensors_entry_info *const *)b;
  return strcmp(x->name, y->name);
}

static int compare_offsets(const void *a, const void *b) {
  const dt_safetensors_entry_info *x = *(const dt_safetensors_entry_info *const *)a;
  const dt_safetensors_entry_info *y = *(const dt_safetensors_entry_info *const *)b;
  if (x->data_begin != y->data_begin) return x->data_begin < y->data_begin ? -1 : 1;
  if (x->data_end != y->data_end) return x->data_end < y->data_end ? -1 : 1;
  return strcmp(x->name, y->name);
}

/* Each entry alone: ordered offsets, and shape x element size = byte length without overflow
 * and within what a tensor may hold. */
static dt_status check_entry(const parser *ps, const dt_safetensors_entry_info *e) {
  char sa[200];
  /* span: the product of sizes with zeros counted as 1, which strides reach (see
   * DT_MAX_NUMEL); bytes: the real byte length. */
  uint64_t span = 1, numel = 1, bytes;
  bool overflow = false;
  for (int i = 0; i < e->ndim; i++) {
    uint64_t s = (uint64_t)e->shape[i];
    overflow |= __builtin_mul_overflow(span, s > 1 ? s : 1, &span);
    overflow |= __builtin_mul_overflow(numel, s, &numel);
  }
  overflow |= __builtin_mul_overflow(numel, (uint64_t)dt_dtype_size(e->dtype), &bytes);
  if (overflow || span > (uint64_t)DT_MAX_NUMEL)
    return dt__error(DT_ERR_INVALID,
                     "%s: %s: tensor `%s`: shape %s overflows: its element count times %zu "
                     "bytes passes what a tensor may hold (2^59 elements)",
                     ps->op, ps->label, dt__ckpt_shown(0, e->name),
                     dt__format_ints(sa, sizeof sa, e->ndim, e->shape), dt_dtype_size(e->dtype));
  if (bytes != e->data_end - e->data_begin)
    return dt__error(DT_ERR_INVALID,
                     "%s: %s: tensor `%s`: shape %s of %s needs %" PRIu64
                     " bytes but data_offsets [%" PRIu64 ", %" PRIu64 "] hold %" PRIu64,
                     ps->op, ps->label, dt__ckpt_shown(0, e->name),
                     dt__format_ints(sa, sizeof sa, e->ndim, e->shape),
                     dt__safetensors_dtype_name(e->dtype), bytes, e->data_begin, e->data_end,
                     e->data_end - e->data_begin);
  return DT_OK;
}

/* All entries together: unique names, and byte ranges that tile the data section exactly. */
static dt_status check_layout(const parser *ps, dt_safetensors *file, uint64_t data_size) {
  if (file->count == 0) {
    if (data_size != 0)
      return dt__error(DT_ERR_INVALID,
                       "%s: %s: the header lists no tensors but %" PRIu64
                       " data bytes follow it (the file is not fully covered)",
                       ps->op, ps->label, data_size);
    return DT_OK;
  }
  dt_safetensors_entry_info **order = dt__alloc(sizeof *order * (size_t)file->count);
  if (!order) return dt__error(DT_ERR_NOMEM, "%s: cannot allocate %d entries", ps->op, file->count);
  for (int i = 0; i < file->count; i++) order[i] = &file->entries[i];
  dt_status st = DT_OK;
  qsort(order, (size_t)file->count, sizeof *order, compare_names);
  for (int i = 1; i < file->count && !st; i++) {
    if (strcmp(order[i - 1]->name, order[i]->name) == 0)
      st = dt__error(DT_ERR_INVALID, "%s: %s: tensor name `%s` appears twice", ps->op, ps->label,
                     dt__ckpt_shown(0, order[i]->name));
  }
  if (!st) qsort(order, (size_t)file->count, sizeof *order, compare_offsets);
  uint64_t expected = 0;
  for (int i = 0; i < file->count && !st; i++) {
    const dt_safetensors_entry_info *e = order[i];
    if (e->data_begin < expected) {
      st = dt__error(DT_ERR_INVALID,
                     "%s: %s: tensor `%s`: data_offsets [%" PRIu64 ", %" PRIu64
                     "] overlap tensor `%s` [%" PRIu64 ", %" PRIu64 "]",
                     ps->op, ps->label, dt__ckpt_shown(0, e->name), e->data_begin, e->data_end,
                     dt__ckpt_shown(1, order[i - 1]->name), order[i - 1]->data_begin,
                     order[i - 1]->data_end);
    } else if (e->data_begin > expected) {
      st = dt__error(DT_ERR_INVALID,
                     "%s: %s: tensor `%s`: data_offsets [%" PRIu64 ", %" PRIu64
                     "] leave a gap of %" PRIu64 " bytes after byte %" PRIu64,
                     ps->op, ps->label, dt__ckpt_shown(0, e->name), e->data_begin, e->data_end,
                     e->data_begin - expected, expected);
    } else if (e->data_end > data_size) {
      st = dt__error(
          DT_ERR_INVALID,
          "%s: %s: tensor `%s`: data_offsets [%" PRIu64 ", %" PRIu64
          "] pass the end of the data section (%" PRIu64 " bytes): the file is truncated",
          ps->op, ps->label, dt__ckpt_shown(0, e->name), e->data_begin, e->data_end, data_size);
    }
    expected = e->data_end;
  }
  if (!st && expected != data_size)
    st = dt__error(DT_ERR_INVALID,
                   "%s: %s: the tensors cover %" PRIu64 " bytes of a %" PRIu64
                   "-byte data section (the file is not fully covered)",
                   ps->op, ps->label, expected, data_size);
  dt__free(order);
  return st;
}

dt_status dt__safetensors_parse_header(dt_safetensors *file, const char *op, const char *text,
                                       size_t length, uint64_t data_size) {
  parser ps = {op, file->label, text, text, text + length, NULL, 0};
  if (length == 0)
    return dt__error(DT_ERR_INVALID, "%s: %s: header length is 0: the header must be a JSON object",
                     op, file->label);
  /* Bounds from the header's real size: every tensor entry takes at least 40 bytes of text
   * ("":{"dtype":"U8","shape":[],"data_offsets":[0,0]}), every metadata pair at least 6. */
  size_t max_entries = length / 40 + 1, max_meta = length / 6 + 1;
  file->strings = dt__alloc(2 * length + 16);
  file->entries = dt__alloc(sizeof *file->entries * max_entries);
  file->meta_keys = dt__alloc(sizeof *file->meta_keys * max_meta);
  file->meta_values = dt__alloc(sizeof *file->meta_values * max_meta);
  if (!file->strings || !file->entries || !file->meta_keys || !file->meta_values)
    return dt__error(DT_ERR_NOMEM, "%s: %s: cannot allocate for a %zu-byte header", op, file->label,
                     length);
  ps.strings = file->strings;
  ps.max_meta = max_meta;
  skip_space(&ps);
  if (ps.p < ps.end && *ps.p != '{')
    return dt__error(DT_ERR_INVALID,
                     "%s: %s: header is not a JSON object (it starts with '%c' at byte %ld)", op,
                     file->label, (*ps.p >= 0x20 && *ps.p < 0x7f) ? *ps.p : '?', position(&ps));
  if (!accept(&ps, '{')) return syntax(&ps, "expected '{'");
  bool have_metadata = false;
  if (!accept(&ps, '}')) {
    for (;;) {
      const char *name;
      skip_space(&ps);
      if (ps.p < ps.end && *ps.p != '"') return syntax(&ps, "expected a string key");
      dt_status st = parse_string(&ps, &name);
      if (st) return st;
      if (!accept(&ps, ':')) return syntax(&ps, "expected ':'");
      if (strcmp(name, "__metadata__") == 0) {
        if (have_metadata)
          return dt__error(DT_ERR_INVALID, "%s: %s: __metadata__ appears twice", op, file->label);
        have_metadata = true;
        st = parse_metadata(&ps, file);
      } else {
        if ((size_t)file->count == max_entries) return syntax(&ps, "too many entries");
        st = parse_tensor(&ps, name, &file->entries[file->count]);
        if (!st) file->count++;
      }
      if (st) return st;
      if (accept(&ps, '}')) break;
      if (!accept(&ps, ',')) return syntax(&ps, "expected ',' or '}'");
    }
  }
  skip_space(&ps);
  if (ps.p != ps.end) return syntax(&ps, "trailing characters after the header object");
  /* Offsets first, as the reference does: two tensors on one range is reported as an
   * overlap rather than as the second one's size mismatch. */
  for (int i = 0; i < file->count; i++) {
    const dt_safetensors_entry_info *e = &file->entries[i];
    if (e->data_end < e->data_begin)
      return dt__error(DT_ERR_INVALID,
                       "%s: %s: tensor `%s`: data_offsets [%" PRIu64 ", %" PRIu64
                       "] end before they begin",
                       op, file->label, dt__ckpt_shown(0, e->name), e->data_begin, e->data_end);
  }
  dt_status st = check_layout(&ps, file, data_size);
  for (int i = 0; i < file->count && !st; i++) st = check_entry(&ps, &file->entries[i]);
  return st;
}
