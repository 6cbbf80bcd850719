/*
 * config.json and model.safetensors.index.json read as transformers reads them, or refused.
 * Python's json.load takes the last of a duplicated key where cJSON takes the first, and cJSON
 * accepts a byte order mark and anything after the value: the same folder would load as two
 * different models. So before cJSON reads config.json, the whole text is checked here (one
 * UTF-8 JSON value, no BOM, nothing after it, no key twice in any object), and the index's
 * weight_map is read here into a hash table, once, with pointers into the text it came from.
 */
#include <string.h>

#include "core/json_scanner.h"
#include "core/text_escape.h"
#include "models/models_impl.h"

#define MAX_DEPTH 512

typedef dt__hf_key_table key_set;

static void key_set_clear(key_set *s) {
  DT__FREE_EACH(s->key, s->len, s->value);
  memset(s, 0, sizeof *s);
}

static size_t slot_of(const key_set *s, const char *key, size_t len) {
  size_t mask = s->cap - 1, i = (size_t)dt__hash_bytes(key, len) & mask;
  while (s->key[i] && !(s->len[i] == len && memcmp(s->key[i], key, len) == 0)) i = (i + 1) & mask;
  return i;
}

/* Room for one more key (the table at most half full); false when out of memory. */
static bool key_set_reserve(key_set *s, bool values) {
  if (2 * (s->n + 1) <= s->cap) return true;
  key_set bigger = {.cap = s->cap ? 2 * s->cap : 16, .n = s->n};
  bigger.key = dt__calloc(bigger.cap * sizeof *bigger.key);
  bigger.len = dt__alloc(bigger.cap * sizeof *bigger.len);
  bigger.value = values ? dt__alloc(bigger.cap * sizeof *bigger.value) : NULL;
  if (!bigger.key || !bigger.len || (values && !bigger.value)) {
    key_set_clear(&bigger);
    return false;
  }
  for (size_t i = 0; i < s->cap; i++) {
    if (!s->key[i]) continue;
    size_t j = slot_of(&bigger, s->key[i], s->len[i]);
    bigger.key[j] = s->key[i];
    bigger.len[j] = s->len[i];
    if (values) bigger.value[j] = s->value[i];
  }
  key_set_clear(s);
  *s = bigger;
  return true;
}

/* Adds key (value: the index's file name, or NULL); *added false when it is there already. */
static dt_status key_set_add(key_set *s, const char *key, size_t len, const char *value,
                             bool *added) {
  if (!key_set_reserve(s, value != NULL))
    return dt__error(DT_ERR_NOMEM, "dt_hf_model_load: out of memory (JSON keys)");
  size_t i = slot_of(s, key, len);
  *added = s->key[i] == NULL;
  if (*added) {
    s->key[i] = key;
    s->len[i] = len;
    if (value) s->value[i] = value;
    s->n++;
  }
  return DT_OK;
}

/* The scanner's error ("byte N: ...") with the function and file in front. */
static dt_status scan_failed(dt_status st, const char *path) {
  char where[160];
  if (st == DT_ERR_INVALID) {
    snprintf(where, sizeof where, "dt_hf_model_load: %s", path);
    dt__error_prefix(where);
  }
  return st;
}

static dt_status duplicate(const char *path, const char *key) {
  char shown[160];
  return dt__error(DT_ERR_INVALID,
                   "dt_hf_model_load: %s: key \"%s\" appears twice in one object (transformers "
                   "would take the last value, this reader the first: refused)",
                   path, dt__escape_text(shown, sizeof shown, key));
}

static int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* The code unit of a \uXXXX escape at s (validated by the scanner). */
static unsigned unit_at(const char *s) {
  unsigned v = 0;
  for (int i = 2; i < 6; i++) v = v * 16 + (unsigned)hex_digit(s[i]);
  return v;
}

/* A string token (a key, or the value of member `owner`; NULL: a value not in an object)
 * whose escapes mean the same to every reader, or refused at their byte: \u0000 ends a C
 * string, so cJSON read "silu\u0000x" as "silu" where Python keeps the whole; a lone
 * surrogate (\ud800 without its low half, or a low half alone) is no character, and cJSON
 * refused the file as "not a JSON object" without saying where. */
static dt_status check_escapes(const dt__json_scanner *r, dt__json_span sp, const char *path,
                               bool is_key, const char *owner) {
  const char *end = sp.s + sp.n;
  for (const char *s = sp.s; sp.escaped && s < end;) {
    if (*s != '\\') {
      s++;
      continue;
    }
    if (s[1] != 'u') {
      s += 2;
      continue;
    }
    unsigned unit = unit_at(s);
    bool high = unit >= 0xd800 && unit < 0xdc00, low = unit >= 0xdc00 && unit < 0xe000;
    bool paired = high && end - s >= 12 && s[6] == '\\' && s[7] == 'u' &&
                  unit_at(s + 6) >= 0xdc00 && unit_at(s + 6) < 0xe000;
    if (unit != 0 && !(high && !paired) && !low) {
      s += paired ? 12 : 6;
      continue;
    }
    /* A key is named by its own text, unescaped (\u0000 and lone halves read as U+FFFD). */
    char shown[160], what[200], key[128];
    if (is_key && sp.n < sizeof key) {
      dt__json_unescape(sp, key);
      owner = key;
    }
    if (owner)
      snprintf(what, sizeof what, "%s \"%s\"", is_key ? "the key" : "the value of",
               dt__escape_text(shown, sizeof shown, owner));
    else
      snprintf(what, sizeof what, is_key ? "a key" : "a string");
    size_t at = (size_t)(s - r->begin);
    if (unit == 0)
      return dt__error(DT_ERR_INVALID,
                       "dt_hf_model_load: %s: byte %zu: %s holds \\u0000, where a C string ends "
                       "(what follows would be lost: \"silu\\u0000x\" read as \"silu\"): refused",
                       path, at, what);
    return dt__error(DT_ERR_INVALID,
                     "dt_hf_model_load: %s: byte %zu: %s holds a lone surrogate \\u%04x (half of "
                     "a UTF-16 pair, not a character): refused",
                     path, at, what, unit);
  }
  return DT_OK;
}

/* A string token unescaped in place, NUL-terminated where its closing quote stood: the
 * unescaped form is never longer and is written behind the bytes still to be read. The
 * scanner has moved past the token, so what follows is unchanged. */
static const char *in_place(dt__json_span sp, size_t *len) {
  char *s = (char *)sp.s;
  if (sp.escaped) {
    *len = dt__json_unescape(sp, s);
  } else {
    s[sp.n] = '\0';
    *len = sp.n;
  }
  return s;
}

/* Checks the value at r->p and everything inside it; r's text is a private copy (keys are
 * unescaped in place). The top object's member named `unchecked` (NULL: none) is only
 * scanned. */
static dt_status check_value(dt__json_scanner *r, const char *path, int depth,
                             const char *unchecked, const char *owner) {
  dt__json_skip_ws(r);
  if (r->p < r->end && *r->p == '"') {
    dt__json_span sp;
    dt_status st = dt__json_string(r, &sp);
    return st ? scan_failed(st, path) : check_escapes(r, sp, path, false, owner);
  }
  if (r->p >= r->end || (*r->p != '{' && *r->p != '[')) {
    dt_status st = dt__json_skip_value(r);
    return st ? scan_failed(st, path) : DT_OK;
  }
  if (depth >= MAX_DEPTH)
    return dt__error(DT_ERR_INVALID, "dt_hf_model_load: %s: nesting deeper than %d", path,
                     MAX_DEPTH);
  dt_status st = DT_OK;
  if (*r->p++ == '[') {
    dt__json_skip_ws(r);
    if (r->p < r->end && *r->p == ']') {
      r->p++;
      return DT_OK;
    }
    for (;;) {
      if ((st = check_value(r, path, depth + 1, NULL, owner))) return st;
      dt__json_skip_ws(r);
      if (r->p < r->end && *r->p == ']') {
        r->p++;
        return DT_OK;
      }
      if (r->p >= r->end || *r->p != ',')
        return scan_failed(dt__json_expected(r, "',' or ']' in an array"), path);
      r->p++;
    }
  }
  key_set keys = {0};
  bool first = true;
  dt__json_span key;
  dt_status body = DT_OK; /* the loop body's error, named already; st: the scanner's */
  while (!body && dt__json_next_key(r, &first, &key, &st)) {
    size_t len = 0;
    if ((body = check_escapes(r, key, path, true, NULL))) break;
    const char *text = in_place(key, &len);
    bool added = false;
    body = key_set_add(&keys, text, len, NULL, &added);
    if (!body && !added) body = duplicate(path, text);
    if (!body && depth == 0 && unchecked && !strcmp(text, unchecked)) {
      /* Only its grammar: its own reader refuses its duplicates (read_weight_map). */
      st = dt__json_skip_value(r);
    } else if (!body) {
      body = check_value(r, path, depth + 1, NULL, text);
    }
  }
  key_set_clear(&keys);
  if (body) return body;
  return st ? scan_failed(st, path) : DT_OK;
}

static dt_status check_bom(const char *text, const char *path) {
  if (memcmp(text, "\xef\xbb\xbf", 3) == 0)
    return dt__error(DT_ERR_INVALID,
                     "dt_hf_model_load: %s starts with a UTF-8 byte order mark (JSON has none; "
                     "Python's json refuses it)",
                     path);
  return DT_OK;
}

dt_status dt__hf_json_check(const char *text, const char *path, const char *unchecked) {
  dt_status st = check_bom(text, path);
  if (st) return st;
  size_t length = strlen(text);
  char *copy = dt__alloc(length + 1);
  if (!copy) return dt__error(DT_ERR_NOMEM, "dt_hf_model_load: out of memory reading %s", path);
  memcpy(copy, text, length + 1);
  dt__json_scanner r = {.begin = copy, .p = copy, .end = copy + length};
  st = check_value(&r, path, 0, unchecked, NULL);
  dt__json_skip_ws(&r);
  if (!st && r.p < r.end)
    st = dt__error(DT_ERR_INVALID,
                   "dt_hf_model_load: %s: byte %zu: trailing characters after the JSON value", path,
                   (size_t)(r.p - r.begin));
  dt__free(r.scratch);
  dt__free(copy);
  return st;
}

/* A file of the index must be a plain name in the model directory, shown as it can be. */
static dt_status check_file_name(const char *path, const char *tensor, const char *file) {
  bool plain = file[0] && strchr(file, '/') == NULL && strcmp(file, ".") && strcmp(file, "..");
  for (const char *c = file; plain && *c;) {
    size_t n = 0;
    char buf[8];
    plain = dt__escape_next(c, &n, buf) == NULL || *c == '\\';
    c += n;
  }
  if (plain) return DT_OK;
  char t[160], f[160];
  return dt__error(DT_ERR_INVALID,
                   "dt_hf_model_load: %s: the file \"%s\" of tensor \"%s\" must be a file name in "
                   "the model directory (no '/', no control characters)",
                   path, dt__escape_text(f, sizeof f, file), dt__escape_text(t, sizeof t, tensor));
}

/* weight_map's members into ix->map: each key and its string value, in place. */
static dt_status read_weight_map(dt__json_scanner *r, const char *path, dt__hf_index *ix) {
  dt__json_skip_ws(r);
  if (r->p >= r->end || *r->p != '{')
    return dt__error(DT_ERR_INVALID, "dt_hf_model_load: %s: \"weight_map\" is not an object", path);
  r->p++;
  bool first = true;
  dt__json_span key;
  dt_status st = DT_OK;
  while (dt__json_next_key(r, &first, &key, &st)) {
    size_t len = 0;
    if ((st = check_escapes(r, key, path, true, NULL))) return st;
    const char *tensor = in_place(key, &len);
    if (r->p >= r->end || *r->p != '"') {
      char t[160];
      return dt__error(DT_ERR_INVALID,
                       "dt_hf_model_load: %s: the file of tensor \"%s\" is not a string", path,
                       dt__escape_text(t, sizeof t, tensor));
    }
    dt__json_span value;
    if ((st = dt__json_string(r, &value))) break;
    if ((st = check_escapes(r, value, path, false, tensor))) return st;
    size_t file_len = 0;
    const char *file = in_place(value, &file_len);
    if ((st = check_file_name(path, tensor, file))) return st;
    bool added = false;
    if ((st = key_set_add(&ix->map, tensor, len, file, &added))) return st;
    if (!added) return duplicate(path, tensor);
  }
  return st ? scan_failed(st, path) : DT_OK;
}

dt_status dt__hf_index_read(char *text, const char *path, dt__hf_index *ix) {
  memset(ix, 0, sizeof *ix);
  dt_status st = dt__hf_json_check(text, path, "weight_map");
  if (st) return st;
  /* The text is valid and every object's keys are unique: the top object is walked for
   * weight_map, the rest skipped. */
  dt__json_scanner r = {.begin = text, .p = text, .end = text + strlen(text)};
  dt__json_skip_ws(&r);
  bool found = false;
  if (r.p < r.end && *r.p == '{') {
    r.p++;
    bool first = true;
    dt__json_span key;
    while (dt__json_next_key(&r, &first, &key, &st)) {
      if (dt__json_span_equals(key, "weight_map")) {
        found = true;
        st = read_weight_map(&r, path, ix);
      } else {
        st = dt__json_skip_value(&r);
      }
    }
  }
  dt__free(r.scratch);
  if (!st && !found)
    st = dt__error(DT_ERR_INVALID, "dt_hf_model_load: %s has no \"weight_map\" object", path);
  if (st) dt__hf_index_clear(ix);
  return st;
}

const char *dt__hf_index_find(const dt__hf_index *ix, const char *tensor) {
  if (ix->map.cap == 0) return NULL;
  size_t i = slot_of(&ix->map, tensor, strlen(tensor));
  return ix->map.key[i] ? ix->map.value[i] : NULL;
}

size_t dt__hf_index_count(const dt__hf_index *ix) { return ix->map.n; }

void dt__hf_index_clear(dt__hf_index *ix) { key_set_clear(&ix->map); }
