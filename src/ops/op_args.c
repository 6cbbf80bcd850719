/* Any op of the list called by its schema's argument names (ops/op_args.h). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op_args.h"

enum {
  P_TENSOR,
  P_TENSOR_LIST,
  P_SCALAR,  /* Scalar, float */
  P_INT,     /* int, SymInt */
  P_BOOL,    /* bool other than keepdim: an int slot */
  P_KEEPDIM, /* bool keepdim: a flag */
  P_LIST,    /* int[], int[1], SymInt[] */
  P_STR,
  P_DTYPE,
  P_OTHER /* MemoryFormat, ...: only its default */
};

#define MAX_PARAMS 16

typedef struct param {
  int kind;
  bool optional; /* the type ends with '?': None is a value */
  char name[32];
  char def[32]; /* the default as the schema writes it; "" without one */
  bool has_def;
} param;

typedef struct schema {
  const char *op;
  int n;
  param p[MAX_PARAMS];
  dt_op_params tensors;
  bool has_int;  /* an int or SymInt parameter (not a bool): a list then stays out of ints */
  bool has_list; /* an int[] parameter */
} schema;

/* Copies [begin, end) into out without what stands inside parentheses: "Tensor(a!)" ->
 * "Tensor". */
static void strip_alias(const char *begin, const char *end, char *out, size_t size) {
  size_t n = 0;
  int inside = 0;
  for (; begin < end && n + 1 < size; begin++) {
    inside += *begin == '(';
    if (!inside) out[n++] = *begin;
    inside -= *begin == ')';
  }
  out[n] = '\0';
}

static int kind_of(const char *type, const char *name) {
  static const struct {
    const char *type;
    int kind;
  } kinds[] = {{"Tensor", P_TENSOR},   {"Tensor[]", P_TENSOR_LIST},
               {"Scalar", P_SCALAR},   {"float", P_SCALAR},
               {"int", P_INT},         {"SymInt", P_INT},
               {"bool", P_BOOL},       {"str", P_STR},
               {"ScalarType", P_DTYPE}};
  for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++) {
    if (strcmp(type, kinds[i].type) == 0) {
      return kinds[i].kind == P_BOOL && strcmp(name, "keepdim") == 0 ? P_KEEPDIM : kinds[i].kind;
    }
  }
  if (strncmp(type, "int[", 4) == 0 || strncmp(type, "SymInt[", 7) == 0) return P_LIST;
  return P_OTHER;
}

/* One parameter "type name[=default]" of [begin, end) appended to s. */
static dt_status add_param(schema *s, const char *begin, const char *end) {
  while (begin < end && *begin == ' ') begin++;
  if (end - begin == 1 && *begin == '*') return DT_OK; /* keyword-only marker */
  const char *space = begin;
  for (int depth = 0; space < end && (depth || *space != ' '); space++) {
    depth += (*space == '(') - (*space == ')');
  }
  if (space == end || s->n == MAX_PARAMS) {
    return dt__error(DT_ERR_UNSUPPORTED, "dt__op_params: %s: cannot read parameter '%.*s'", s->op,
                     (int)(end - begin), begin);
  }
  param *p = &s->p[s->n++];
  char type[32];
  strip_alias(begin, space, type, sizeof type);
  size_t len = strlen(type);
  p->optional = len > 0 && type[len - 1] == '?';
  if (p->optional) type[len - 1] = '\0';
  const char *name = space + 1, *eq = memchr(name, '=', (size_t)(end - name));
  snprintf(p->name, sizeof p->name, "%.*s", (int)((eq ? eq : end) - name), name);
  p->has_def = eq != NULL;
  if (eq) snprintf(p->def, sizeof p->def, "%.*s", (int)(end - eq - 1), eq + 1);
  p->kind = kind_of(type, p->name);
  if (p->kind == P_OTHER && !p->has_def) {
    return dt__error(DT_ERR_UNSUPPORTED,
                     "dt__op_params: %s: parameter '%s' of type %s has no default and no place "
                     "in dt_op_call",
                     s->op, p->name, type);
  }
  if (p->kind == P_TENSOR) s->tensors.max_tensors++;
  if (p->kind == P_TENSOR_LIST) {
    s->tensors.tensor_list = true;
    s->tensors.max_tensors = INT_MAX;
  }
  s->has_int |= p->kind == P_INT;
  s->has_list |= p->kind == P_LIST;
  return DT_OK;
}

/* The parameters of op's schema "name(type name, ...) -> ...". */
static dt_status read_schema(int op, schema *s) {
  memset(s, 0, sizeof *s);
  if (op < 0 || op >= DT_OP_COUNT) {
    return dt__error(DT_ERR_INVALID, "dt__op_params: op %d is not in the list (0..%d)", op,
                     DT_OP_COUNT - 1);
  }
  const dt_op_def *def = &dt__op_table[op];
  s->op = def->name;
  s->tensors.min_tensors = def->n_required;
  const char *c = strchr(def->schema, '(');
  if (!c) return dt__error(DT_ERR_UNSUPPORTED, "dt__op_params: %s: no parameters", s->op);
  c++;
  while (*c && *c != ')') {
    const char *begin = c;
    for (int depth = 0; *c && (depth || (*c != ',' && *c != ')')); c++) {
      depth += (*c == '(' || *c == '[') - (*c == ')' || *c == ']');
    }
    dt_status st = add_param(s, begin, c);
    if (st) return st;
    if (*c == ',') c++;
  }
  return DT_OK;
}

dt_status dt__op_params(int op, dt_op_params *out) {
  if (!out) return dt__error(DT_ERR_INVALID, "dt__op_params: out is NULL");
  schema s;
  dt_status st = read_schema(op, &s);
  if (!st) *out = s.tensors;
  return st;
}

/* ---- Values ------------------------------------------------------------------------------- */

static bool read_int(const char *v, int64_t *out) {
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (end == v || *end || errno) return false;
  *out = x;
  return true;
}

/* 1, 0,1, 6x5, [6,5] or [] */
static bool read_list(const char *v, int64_t *out, int *n) {
  char buf[256];
  size_t len = strlen(v);
  if (len >= sizeof buf) return false;
  if (v[0] == '[') {
    if (len < 2 || v[len - 1] != ']') return false;
    v++, len -= 2;
  }
  memcpy(buf, v, len);
  buf[len] = '\0';
  *n = 0;
  if (len == 0) return true;
  for (char *tok = buf, *next; tok; tok = next) {
    next = strpbrk(tok, ",x");
    if (next) *next++ = '\0';
    if (*n == DT_MAX_DIMS || !read_int(tok, &out[*n])) return false;
    (*n)++;
  }
  return true;
}

static bool read_bool(const char *v, bool *out) {
  *out = strcmp(v, "true") == 0 || strcmp(v, "True") == 0 || strcmp(v, "1") == 0;
  return *out || strcmp(v, "false") == 0 || strcmp(v, "False") == 0 || strcmp(v, "0") == 0;
}

static bool read_double(const char *v, double *out) {
  char *end;
  *out = strtod(v, &end);
  return end != v && *end == '\0';
}

static bool read_dtype(const char *v, dt_dtype *out) {
  static const char *short_names[] = {"f32", "f64", "bf16", "f16", "i64", "i32", "u8", "bool"};
  _Static_assert(sizeof short_names / sizeof *short_names == DT_DTYPE_COUNT, "a short name each");
  for (int d = 0; d < DT_DTYPE_COUNT; d++) {
    if (strcmp(v, short_names[d]) == 0 || strcmp(v, dt_dtype_name((dt_dtype)d)) == 0) {
      *out = (dt_dtype)d;
      return true;
    }
  }
  return false;
}

/* A str value without its quotes. */
static void unquote(const char *v, char *out, size_t size) {
  size_t len = strlen(v);
  if (len >= 2 && (v[0] == '\'' || v[0] == '"') && v[len - 1] == v[0]) v++, len -= 2;
  snprintf(out, size, "%.*s", (int)len, v);
}

/* ---- Filling the call --------------------------------------------------------------------- */

typedef struct filling {
  const schema *s;
  dt_op_args *args;
  int n_ints, n_scalars;
  const char *none_at; /* the int parameter that was None: later ints cannot follow it */
} filling;

static dt_status bad_value(const filling *f, const param *p, const char *v, const char *want) {
  return dt__error(DT_ERR_INVALID, "%s: argument '%s=%s' is not %s", f->s->op, p->name, v, want);
}

static dt_status put_int(filling *f, const param *p, const char *v, bool given) {
  dt_op_call *call = &f->args->call;
  int64_t x = 0;
  bool b;
  if (p->kind == P_BOOL && f->s->has_list && !f->s->has_int) {
    /* expand's implicit: the ints hold the list, so only the default fits. */
    if (read_bool(v, &b) && !b) return DT_OK;
    return dt__error(DT_ERR_UNSUPPORTED, "%s: %s=%s is not supported (only false)", f->s->op,
                     p->name, v);
  }
  if (strcmp(v, "None") == 0) {
    if (!f->none_at) f->none_at = p->name;
    return DT_OK;
  }
  if (p->kind == P_BOOL ? !read_bool(v, &b) : !read_int(v, &x)) {
    return bad_value(f, p, v, p->kind == P_BOOL ? "true or false" : "an integer");
  }
  if (p->kind == P_BOOL) x = b;
  if (f->none_at) {
    return dt__error(DT_ERR_UNSUPPORTED,
                     "%s: %s=None cannot be followed by %s=%s%s in dt_op_call's ints: %s is "
                     "required",
                     f->s->op, f->none_at, p->name, v, given ? "" : " (its default)", f->none_at);
  }
  if (f->n_ints == DT_OP_MAX_INTS) {
    return dt__error(DT_ERR_UNSUPPORTED, "%s: more int arguments than dt_op_call holds", f->s->op);
  }
  call->ints[f->n_ints++] = x;
  return DT_OK;
}

static dt_status put_list(filling *f, const param *p, const char *v) {
  dt_op_args *a = f->args;
  int n = 0;
  if (strcmp(v, "None") != 0 && !read_list(v, a->list, &n)) {
    return bad_value(f, p, v, "a list of integers (0,1 or 6x5 or [6,5])");
  }
  a->call.int_list = a->list;
  a->call.n_int_list = n;
  if (!f->s->has_int) { /* view, permute, expand: the list is also the ints */
    memcpy(a->call.ints, a->list, sizeof(int64_t) * (size_t)n);
    f->n_ints = n;
  }
  return DT_OK;
}

static dt_status put_other(filling *f, const param *p, const char *v) {
  dt_op_call *call = &f->args->call;
  if (p->kind == P_DTYPE && !p->optional) {
    return read_dtype(v, &call->dtype) ? DT_OK : bad_value(f, p, v, "a dtype (float64, i64, ...)");
  }
  char text[32], def[32];
  unquote(v, text, sizeof text);
  unquote(p->def, def, sizeof def);
  if (p->kind == P_STR && strcmp(p->name, "approximate") == 0) {
    if (strcmp(text, "tanh") == 0) call->flags |= DT_OP_FLAG_GELU_TANH;
    return strcmp(text, "tanh") == 0 || strcmp(text, "none") == 0
               ? DT_OK
               : bad_value(f, p, v, "'none' or 'tanh'");
  }
  if (p->has_def && strcmp(text, def) == 0) return DT_OK;
  return dt__error(DT_ERR_UNSUPPORTED, "%s: %s=%s is not supported (only %s)", f->s->op, p->name, v,
                   p->has_def ? p->def : "its default");
}

static dt_status put_param(filling *f, const param *p, const char *v, bool given) {
  dt_op_call *call = &f->args->call;
  bool b;
  if (strcmp(v, "None") == 0 && !p->optional) return bad_value(f, p, v, "optional");
  switch (p->kind) {
  case P_SCALAR:
    if (f->n_scalars == 2) {
      return dt__error(DT_ERR_UNSUPPORTED, "%s: more Scalar arguments than dt_op_call holds",
                       f->s->op);
    }
    return read_double(v, &call->scalars[f->n_scalars++]) ? DT_OK : bad_value(f, p, v, "a number");
  case P_INT:
  case P_BOOL: return put_int(f, p, v, given);
  case P_KEEPDIM:
    if (!read_bool(v, &b)) return bad_value(f, p, v, "true or false");
    if (b) call->flags |= DT_OP_FLAG_KEEPDIM;
    return DT_OK;
  case P_LIST: return put_list(f, p, v);
  default: return put_other(f, p, v);
  }
}

/* The raw fields ints=, scalars=, flags=: what the schema does not carry. */
static dt_status put_raw(filling *f, const char *name, const char *v, bool *known) {
  dt_op_call *call = &f->args->call;
  int64_t x[DT_MAX_DIMS];
  int n = 0;
  *known = true;
  if (strcmp(name, "ints") == 0) {
    if (!read_list(v, x, &n)) return dt__error(DT_ERR_INVALID, "%s: ints=%s", f->s->op, v);
    memcpy(call->ints, x, sizeof(int64_t) * (size_t)n);
    f->n_ints = n;
  } else if (strcmp(name, "scalars") == 0) {
    char buf[96], *next;
    snprintf(buf, sizeof buf, "%s", v);
    n = 0;
    for (char *tok = buf; tok; tok = next, n++) {
      next = strchr(tok, ',');
      if (next) *next++ = '\0';
      if (n == 2 || !read_double(tok, &call->scalars[n])) {
        return dt__error(DT_ERR_INVALID, "%s: scalars=%s (at most 2 numbers)", f->s->op, v);
      }
    }
  } else if (strcmp(name, "flags") == 0) {
    if (!read_int(v, x) || x[0] < 0 || x[0] > 255) {
      return dt__error(DT_ERR_INVALID, "%s: flags=%s", f->s->op, v);
    }
    call->flags = (int)x[0];
  } else {
    *known = false;
  }
  return DT_OK;
}

/* Splits attrs into name=value words: given[i] the value of parameter i (NULL: not given);
 * raw fields are applied after the parameters. */
typedef struct words {
  char buf[1024];
  const char *given[MAX_PARAMS];
  const char *raw_name[8], *raw_value[8];
  int n_raw;
} words;

static dt_status split_words(const schema *s, const char *attrs, words *w) {
  memset(w, 0, sizeof *w);
  if (!attrs) return DT_OK;
  if (strlen(attrs) >= sizeof w->buf) {
    return dt__error(DT_ERR_INVALID, "%s: attributes longer than %zu characters", s->op,
                     sizeof w->buf - 1);
  }
  strcpy(w->buf, attrs);
  char *save = NULL; /* strtok_r: ranks are threads calling this at once */
  for (char *tok = strtok_r(w->buf, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
    char *eq = strchr(tok, '=');
    if (!eq) return dt__error(DT_ERR_INVALID, "%s: attribute '%s' is not name=value", s->op, tok);
    *eq = '\0';
    int i = 0;
    while (i < s->n && (s->p[i].kind <= P_TENSOR_LIST || strcmp(s->p[i].name, tok) != 0)) i++;
    bool raw = strcmp(tok, "ints") == 0 || strcmp(tok, "scalars") == 0 || strcmp(tok, "flags") == 0;
    if (i == s->n && !raw) {
      char names[256] = "";
      for (int k = 0; k < s->n; k++) {
        if (s->p[k].kind <= P_TENSOR_LIST) continue;
        size_t used = strlen(names);
        snprintf(names + used, sizeof names - used, "%s%s", used ? ", " : "", s->p[k].name);
      }
      return dt__error(DT_ERR_INVALID,
                       "%s: unknown attribute '%s' (it takes: %s%sints, scalars, "
                       "flags)",
                       s->op, tok, names, names[0] ? "; raw: " : "raw: ");
    }
    if (raw ? w->n_raw == 8 : w->given[i] != NULL) {
      return dt__error(DT_ERR_INVALID, "%s: attribute '%s' given twice", s->op, tok);
    }
    if (raw) {
      w->raw_name[w->n_raw] = tok;
      w->raw_value[w->n_raw++] = eq + 1;
    } else {
      w->given[i] = eq + 1;
    }
  }
  return DT_OK;
}

dt_status dt__op_args_parse(int op, const char *attrs, dt_op_args *args) {
  if (!args) return dt__error(DT_ERR_INVALID, "dt__op_args_parse: args is NULL");
  memset(args, 0, sizeof *args);
  schema s;
  words w;
  dt_status st = read_schema(op, &s);
  if (!st) st = split_words(&s, attrs, &w);
  if (st) return st;
  args->call.op = (dt_op)op;
  filling f = {.s = &s, .args = args};
  for (int i = 0; i < s.n && !st; i++) {
    const param *p = &s.p[i];
    if (p->kind <= P_TENSOR_LIST) continue;
    const char *v = w.given[i] ? w.given[i] : p->has_def ? p->def : NULL;
    if (!v) return dt__error(DT_ERR_INVALID, "%s: argument '%s' is required", s.op, p->name);
    st = put_param(&f, p, v, w.given[i] != NULL);
  }
  for (int r = 0; r < w.n_raw && !st; r++) {
    bool known;
    st = put_raw(&f, w.raw_name[r], w.raw_value[r], &known);
  }
  args->call.n_ints = f.n_ints;
  return st;
}

/* ---- Running -------------------------------------------------------------------------------- */

/* Keeps outs[which] in *out and releases the other outputs. */
static dt_status keep_output(const dt_op_call *call, dt_tensor **outs, int which, dt_tensor **out) {
  dt_status st = DT_OK;
  if (which < 0 || which >= call->n_outputs) {
    st = dt__error(DT_ERR_INVALID, "dt__op_run: %s: output %d of %d", dt__op_table[call->op].name,
                   which, call->n_outputs);
  } else {
    *out = outs[which];
    outs[which] = NULL;
  }
  for (int k = 0; k < call->n_outputs; k++) dt_tensor_release(outs[k]);
  return st;
}

dt_status dt__op_run(int op, dt_tensor *const *inputs, int n, const char *attrs, int which,
                     dt_tensor **out) {
  if (!out) return dt__error(DT_ERR_INVALID, "dt__op_run: out is NULL");
  *out = NULL;
  dt_op_params params;
  dt_status st = dt__op_params(op, &params);
  if (st) return st;
  if (n < params.min_tensors || n > params.max_tensors || (n > 0 && !inputs)) {
    return dt__error(DT_ERR_INVALID, "dt__op_run: %s takes %d to %d tensors, %d given",
                     dt__op_table[op].name, params.min_tensors, params.max_tensors, n);
  }
  dt_op_args a;
  st = dt__op_args_parse(op, attrs, &a);
  if (st) return st;
  dt_op_call *call = &a.call;
  if (params.tensor_list) {
    call->input_list = inputs;
    call->n_input_list = n;
  } else {
    for (int i = 0; i < n; i++) call->inputs[i] = inputs[i];
    call->n_inputs = params.max_tensors; /* absent optional ones NULL */
  }
  if (dt__op_table[op].kind == DT_OP_KIND_INPLACE) {
    dt_tensor *self = NULL;
    st = dt_clone(inputs[0], &self);
    call->inputs[0] = self;
    if (!st) st = dt__dispatch(call);
    if (!st && which != 0) st = dt__error(DT_ERR_INVALID, "dt__op_run: output %d of 1", which);
    if (st) dt_tensor_release(self);
    if (!st) *out = self;
    return st;
  }
  dt_tensor *outs[DT_OP_MAX_META] = {0};
  call->outputs = outs;
  call->n_outputs = dt__op_has_trait(op, DT_TRAIT_TUPLE) ? DT_OP_MAX_META : 1;
  st = dt__dispatch(call);
  if (st) return st;
  return keep_output(call, outs, which, out);
}
