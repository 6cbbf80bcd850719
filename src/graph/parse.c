/*
 * The graph text format, reading side. Everything is validated while reading: references,
 * op names, arities, attributes, and every declared type against what the op infers, so
 * that a graph this returns can be printed, transformed and run. Failures name the line and
 * column and free everything (nothing half-built is returned).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_impl.h"

#define MAX_NAME 128
#define MAX_LIST 1024
#define MAX_DIM_SIZE (INT64_C(1) << 40)
#define MAX_NUMEL (INT64_C(1) << 50)
#define MAX_ATTR (INT64_C(1) << 40)

typedef struct args args;

typedef struct parser {
  const char *s;
  size_t pos;
  dt_graph *g;
  size_t args_pos; /* where the current node's argument list starts, for errors about it */
  /* Scratch kept for the whole parse, so that a node costs no allocation: the argument list
   * being read, and each op's signature, read from its schema on first use. */
  args *a;
  dt_op_signature *signatures;
  bool *have_signature;
} parser;

DT_PRINTF(2, 3) static dt_status fail(const parser *p, const char *fmt, ...) {
  int line = 1, col = 1;
  for (size_t i = 0; i < p->pos && p->s[i]; i++) {
    if (p->s[i] == '\n')
      line++, col = 1;
    else
      col++;
  }
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return dt__error(DT_ERR_INVALID, "dt_graph_parse: line %d, column %d: %s", line, col, msg);
}

static void skip_ws(parser *p) {
  while (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' || p->s[p->pos] == '\n' ||
         p->s[p->pos] == '\r')
    p->pos++;
}

static char peek(parser *p) {
  skip_ws(p);
  return p->s[p->pos];
}

static bool accept(parser *p, char c) {
  if (peek(p) != c) return false;
  p->pos++;
  return true;
}

static dt_status expect(parser *p, char c) {
  if (accept(p, c)) return DT_OK;
  char got = p->s[p->pos];
  if (!got) return fail(p, "expected '%c' but the text ended", c);
  return fail(p, "expected '%c' but found '%c'", c, got);
}

static bool name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static bool name_char(char c) { return name_start(c) || (c >= '0' && c <= '9') || c == '.'; }
/* Node names are FQNs, whose parts may be digits ("mlps.0.weight"). */
static bool node_name_start(char c) { return name_start(c) || (c >= '0' && c <= '9'); }

static dt_status parse_name(parser *p, char *out) {
  skip_ws(p);
  size_t start = p->pos;
  if (!node_name_start(p->s[p->pos])) return fail(p, "expected a name");
  while (name_char(p->s[p->pos])) p->pos++;
  size_t len = p->pos - start;
  if (len >= MAX_NAME) return fail(p, "name longer than %d characters", MAX_NAME - 1);
  memcpy(out, p->s + start, len);
  out[len] = '\0';
  return DT_OK;
}

/* A keyword followed by something other than a name character. */
static bool accept_word(parser *p, const char *word) {
  skip_ws(p);
  size_t n = strlen(word);
  if (strncmp(p->s + p->pos, word, n) != 0 || name_char(p->s[p->pos + n])) return false;
  p->pos += n;
  return true;
}

static dt_status parse_int(parser *p, int64_t lo, int64_t hi, int64_t *out) {
  skip_ws(p);
  const char *start = p->s + p->pos;
  if (!(*start == '-' || (*start >= '0' && *start <= '9'))) return fail(p, "expected an integer");
  char *end = NULL;
  errno = 0;
  long long v = strtoll(start, &end, 10);
  if (end == start) return fail(p, "expected an integer");
  if (errno == ERANGE || v < lo || v > hi) {
    return fail(p, "integer out of range [%" PRId64 ", %" PRId64 "]", lo, hi);
  }
  p->pos += (size_t)(end - start);
  *out = v;
  return DT_OK;
}

static dt_status parse_double(parser *p, double *out) {
  skip_ws(p);
  const char *start = p->s + p->pos;
  char c = *start;
  if (!(c == '-' || c == '+' || c == '.' || (c >= '0' && c <= '9') || c == 'i' || c == 'n')) {
    return fail(p, "expected a number");
  }
  char *end = NULL;
  double v = strtod(start, &end);
  if (end == start) return fail(p, "expected a number");
  p->pos += (size_t)(end - start);
  *out = v;
  return DT_OK;
}

static dt_status parse_int_list(parser *p, int max, int64_t *values, int *n) {
  dt_status st = expect(p, '[');
  *n = 0;
  if (st || accept(p, ']')) return st;
  do {
    if (*n >= max) return fail(p, "more than %d integers in a list", max);
    st = parse_int(p, -MAX_ATTR, MAX_ATTR, &values[(*n)++]);
    if (st) return st;
  } while (accept(p, ','));
  return expect(p, ']');
}

static dt_status parse_ref(parser *p, int *index) {
  dt_status st = expect(p, '%');
  char name[MAX_NAME];
  if (!st) st = parse_name(p, name);
  if (st) return st;
  int i = dt__graph_find(p->g, name);
  if (i < 0) return fail(p, "'%%%s' is not defined before this use", name);
  *index = i;
  return DT_OK;
}

static const char *const dtype_short[DT_DTYPE_COUNT] = {"f32", "f64", "bf16", "f16",
                                                        "i64", "i32", "u8",   "b8"};

static dt_status parse_dtype(parser *p, dt_dtype *out) {
  char name[MAX_NAME];
  dt_status st = parse_name(p, name);
  if (st) return st;
  for (int d = 0; d < DT_DTYPE_COUNT; d++) {
    if (strcmp(name, dtype_short[d]) == 0) {
      *out = (dt_dtype)d;
      return DT_OK;
    }
  }
  return fail(p, "unknown dtype '%s' (expected f32, f64, bf16, f16, i64, i32, u8 or b8)", name);
}

static dt_status parse_type(parser *p, dt_value_type *t) {
  dt_status st = parse_dtype(p, &t->dtype);
  if (!st) st = expect(p, '[');
  if (st) return st;
  t->ndim = 0;
  memset(t->sym, DT_NO_SYMBOL, sizeof t->sym);
  int64_t numel = 1;
  if (accept(p, ']')) return DT_OK;
  do {
    if (t->ndim >= DT_MAX_DIMS) return fail(p, "more than %d dims", DT_MAX_DIMS);
    int d = t->ndim++;
    if (peek(p) == 's') {
      p->pos++;
      int64_t k;
      st = parse_int(p, 0, DT_GRAPH_MAX_SYMBOLS - 1, &k);
      if (st) return st;
      if (k >= p->g->n_symbols)
        return fail(p, "symbol s%" PRId64 " is not declared in the graph header", k);
      t->sym[d] = (int8_t)k;
      t->shape[d] = p->g->symbol_hints[k];
    } else {
      st = parse_int(p, 0, MAX_DIM_SIZE, &t->shape[d]);
      if (st) return st;
    }
    if (t->shape[d] > 0 && numel > MAX_NUMEL / t->shape[d])
      return fail(p, "type has too many elements");
    numel *= t->shape[d] > 0 ? t->shape[d] : 1;
  } while (accept(p, ','));
  return expect(p, ']');
}

static dt_status parse_reduce_op(parser *p, dt_reduce_op *op) {
  char name[MAX_NAME];
  dt_status st = parse_name(p, name);
  if (st) return st;
  for (int k = DT_REDUCE_SUM; k <= DT_REDUCE_PROD; k++) {
    if (strcmp(name, dt_reduce_op_name((dt_reduce_op)k)) == 0) {
      *op = (dt_reduce_op)k;
      return DT_OK;
    }
  }
  return fail(p, "unknown reduce op '%s'", name);
}

static dt_status parse_placement(parser *p, dt_placement *out) {
  if (accept_word(p, "R")) {
    *out = dt_replicate();
    return DT_OK;
  }
  if (accept_word(p, "S")) {
    int64_t d;
    dt_status st = expect(p, '(');
    if (!st) st = parse_int(p, 0, DT_MAX_DIMS - 1, &d);
    if (!st) st = expect(p, ')');
    *out = dt_shard((int)d);
    return st;
  }
  if (accept_word(p, "SS")) { /* StridedShard(d, f) */
    int64_t d = 0, f = 1;
    dt_status st = expect(p, '(');
    if (!st) st = parse_int(p, 0, DT_MAX_DIMS - 1, &d);
    if (!st) st = expect(p, ',');
    if (!st) st = parse_int(p, 1, INT32_MAX, &f);
    if (!st) st = expect(p, ')');
    *out = dt_strided_shard((int)d, (int)f);
    return st;
  }
  if (accept_word(p, "P")) {
    dt_reduce_op op = DT_REDUCE_SUM;
    dt_status st = expect(p, '(');
    if (!st) st = parse_reduce_op(p, &op);
    if (!st) st = expect(p, ')');
    *out = dt_partial(op);
    return st;
  }
  return fail(p, "expected a placement (R, S(d), SS(d,f) or P(op))");
}

/* What the argument list of a node holds before it is checked against the node's kind. */
struct args {
  int n_inputs;
  int inputs[DT_OP_MAX_INPUTS];
  bool has_list;
  int n_list;
  bool has_index;
  int64_t index;
  bool has_ints, has_int_list, has_scalars, has_dtype, has_flags, has_dim, has_new_dim, has_op;
  int n_ints, n_int_list, n_scalars;
  int64_t ints[DT_OP_MAX_INTS];
  double scalars[2];
  dt_dtype dtype;
  int64_t flags, dim, new_dim;
  dt_reduce_op op;
  /* The lists last: only their first n_int_list / n_list entries are read, so a new node
   * clears just what comes before them. */
  int64_t int_list[64];
  int list[MAX_LIST];
};

static const dt_op_signature *op_signature(parser *p, int op) {
  if (!p->have_signature[op]) {
    dt__op_signature(op, &p->signatures[op]);
    p->have_signature[op] = true;
  }
  return &p->signatures[op];
}

static dt_status parse_keyword(parser *p, const char *key, args *a) {
  dt_status st = DT_OK;
#define ONCE(flag)                                                                                 \
  do {                                                                                             \
    if (a->flag) return fail(p, "attribute '%s' given twice", key);                                \
    a->flag = true;                                                                                \
  } while (0)
  if (strcmp(key, "ints") == 0) {
    ONCE(has_ints);
    st = parse_int_list(p, DT_OP_MAX_INTS, a->ints, &a->n_ints);
    if (!st && a->n_ints == 0) st = fail(p, "ints=[] is written by leaving the attribute out");
  } else if (strcmp(key, "int_list") == 0) {
    ONCE(has_int_list);
    st = parse_int_list(p, 64, a->int_list, &a->n_int_list);
    if (!st && a->n_int_list == 0)
      st = fail(p, "int_list=[] is written by leaving the attribute out");
  } else if (strcmp(key, "scalars") == 0) {
    ONCE(has_scalars);
    st = expect(p, '[');
    a->n_scalars = 0;
    do {
      if (!st && a->n_scalars >= 2) st = fail(p, "at most 2 scalars");
      if (!st) st = parse_double(p, &a->scalars[a->n_scalars++]);
    } while (!st && accept(p, ','));
    if (!st) st = expect(p, ']');
  } else if (strcmp(key, "dtype") == 0) {
    ONCE(has_dtype);
    st = parse_dtype(p, &a->dtype);
  } else if (strcmp(key, "flags") == 0) {
    ONCE(has_flags);
    st = parse_int(p, 0, 255, &a->flags);
  } else if (strcmp(key, "dim") == 0) {
    ONCE(has_dim);
    st = parse_int(p, 0, DT_MAX_DIMS - 1, &a->dim);
  } else if (strcmp(key, "new_dim") == 0) {
    ONCE(has_new_dim);
    st = parse_int(p, 0, DT_MAX_DIMS - 1, &a->new_dim);
  } else if (strcmp(key, "op") == 0) {
    ONCE(has_op);
    st = parse_reduce_op(p, &a->op);
  } else {
    st = fail(p, "unknown attribute '%s'", key);
  }
#undef ONCE
  return st;
}

static dt_status parse_args(parser *p, args *a) {
  memset(a, 0, offsetof(args, int_list));
  dt_status st = expect(p, '(');
  if (st || accept(p, ')')) return st;
  bool keywords = false;
  do {
    char c = peek(p);
    if (c == '%' || accept_word(p, "None")) {
      if (keywords || a->has_list || a->has_index)
        return fail(p, "a tensor argument after the attributes");
      if (a->n_inputs >= DT_OP_MAX_INPUTS)
        return fail(p, "more than %d tensor arguments", DT_OP_MAX_INPUTS);
      int ref = -1;
      if (c == '%') st = parse_ref(p, &ref);
      a->inputs[a->n_inputs++] = ref;
    } else if (c == '[') {
      if (keywords || a->has_list) return fail(p, "a tensor list must follow the tensor arguments");
      p->pos++;
      a->has_list = true;
      if (!accept(p, ']')) {
        do {
          if (a->n_list >= MAX_LIST) return fail(p, "more than %d tensors in a list", MAX_LIST);
          st = parse_ref(p, &a->list[a->n_list++]);
        } while (!st && accept(p, ','));
        if (!st) st = expect(p, ']');
      }
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      if (keywords || a->has_index) return fail(p, "unexpected integer argument");
      a->has_index = true;
      st = parse_int(p, 0, DT_OP_MAX_META - 1, &a->index);
    } else {
      char key[MAX_NAME];
      st = parse_name(p, key);
      if (!st) st = expect(p, '=');
      if (!st) st = parse_keyword(p, key, a);
      keywords = true;
    }
  } while (!st && accept(p, ','));
  if (!st) st = expect(p, ')');
  return st;
}

static bool any_keyword(const args *a) {
  return a->has_ints || a->has_int_list || a->has_scalars || a->has_dtype || a->has_flags ||
         a->has_dim || a->has_new_dim || a->has_op;
}

/* Values a node takes must be single values (tuples are taken apart by getitem), and a
 * collective's value is in flight until a wait_tensor takes it: only a wait may use it. */
static dt_status check_value(parser *p, int ref, bool is_wait) {
  if (ref >= 0 && p->g->nodes[ref].is_tuple) {
    return fail(p, "'%%%s' is a tuple; take an element with getitem", p->g->nodes[ref].name);
  }
  if (ref >= 0 && p->g->nodes[ref].kind == DT_NODE_OUTPUT)
    return fail(p, "the return node has no value");
  const dt_node *src = ref >= 0 ? &p->g->nodes[ref] : NULL;
  if (src && !is_wait && src->kind == DT_NODE_COMM && src->target != DT_COMM_WAIT) {
    return fail(p, "'%%%s' is a collective in flight: only wait_tensor may take its value",
                src->name);
  }
  return DT_OK;
}

static dt_status check_single(parser *p, int ref) { return check_value(p, ref, false); }

static dt_status check_call(parser *p, int i, const args *a, int declared_n) {
  dt_graph *g = p->g;
  dt_node *n = &g->nodes[i];
  const dt_op_def *def = &dt__op_table[n->target];
  if (a->has_index || a->has_dim || a->has_new_dim || a->has_op)
    return fail(p, "%s: attribute not allowed on an op call", def->name);
  if (a->has_list != dt__op_has_trait(n->target, DT_TRAIT_TENSOR_LIST)) {
    return fail(p, "%s: %s", def->name,
                a->has_list ? "takes no tensor list" : "takes a tensor list [...]");
  }
  /* Arity and defaults come from the op's schema. Too few tensors is left to the check below
   * that names the absent input. */
  const dt_op_signature *sig = op_signature(p, n->target);
  parser at_args = *p;
  at_args.pos = p->args_pos;
  if (a->n_inputs > sig->max_inputs) {
    char expected[32];
    if (def->n_required == sig->max_inputs)
      snprintf(expected, sizeof expected, "%d", sig->max_inputs);
    else
      snprintf(expected, sizeof expected, "%d to %d", def->n_required, sig->max_inputs);
    return fail(&at_args, "%s takes %s tensor argument%s, %d given", def->name, expected,
                sig->max_inputs == 1 ? "" : "s", a->n_inputs);
  }
  for (int k = 0; k < 2; k++) {
    if (k < a->n_scalars) {
      n->scalars[k] = a->scalars[k];
    } else if (k < sig->n_scalars && sig->scalar_has_default[k]) {
      n->scalars[k] = sig->scalar_default[k];
    } else if (k < sig->n_scalars) {
      return fail(&at_args, "%s: '%s' has no default: give it in scalars=[...] (position %d)",
                  def->name, sig->scalar_name[k], k);
    } else {
      n->scalars[k] = 0; /* not a schema argument: no op reads it */
    }
  }
  for (int k = 0; k < a->n_inputs; k++) {
    dt_status st = check_single(p, a->inputs[k]);
    if (st) return st;
  }
  for (int k = 0; k < a->n_list; k++) {
    dt_status st = check_single(p, a->list[k]);
    if (st) return st;
  }
  if (n->is_tuple && declared_n > DT_OP_MAX_META)
    return fail(p, "%s: more than %d results", def->name, DT_OP_MAX_META);
  dt_tensor_meta metas[DT_OP_MAX_META];
  int n_out = 0;
  dt_status st = dt__graph_infer_call(g, i, NULL, metas, &n_out);
  if (st) return fail(p, "%s", dt_last_error());
  if (n_out != declared_n)
    return fail(p, "%s gives %d results but %d types are declared", def->name, n_out, declared_n);
  for (int k = 0; k < n_out; k++) {
    dt_value_type inferred;
    inferred.dtype = metas[k].dtype;
    inferred.ndim = metas[k].ndim;
    memcpy(inferred.shape, metas[k].shape, sizeof inferred.shape);
    memcpy(inferred.sym, n->types[k].sym, sizeof inferred.sym);
    if (!dt__type_equal(&inferred, &n->types[k])) {
      char a1[256], a2[256];
      return fail(p, "%s gives %s but %s is declared", def->name,
                  dt__type_format(a1, sizeof a1, &inferred),
                  dt__type_format(a2, sizeof a2, &n->types[k]));
    }
  }
  return DT_OK;
}

static dt_status check_comm(parser *p, int i, const args *a) {
  dt_node *n = &p->g->nodes[i];
  const char *name = dt__comm_target_names[n->target];
  if (p->g->world_size == 0)
    return fail(p, "%s needs a transformed graph (world=N rank=R in the header)", name);
  if (a->n_inputs != 1 || a->inputs[0] < 0 || a->has_list || a->has_index) {
    return fail(p, "%s takes exactly one tensor", name);
  }
  if (a->has_ints || a->has_int_list || a->has_scalars || a->has_dtype || a->has_flags) {
    return fail(p, "%s: attribute not allowed on a communication node", name);
  }
  dt_status st = check_value(p, a->inputs[0], n->target == DT_COMM_WAIT);
  if (st) return st;
  bool wants_dim = n->target == DT_COMM_ALL_GATHER || n->target == DT_COMM_REDUCE_SCATTER ||
                   n->target == DT_COMM_ALL_TO_ALL;
  bool wants_op = n->target == DT_COMM_ALL_REDUCE || n->target == DT_COMM_REDUCE_SCATTER;
  bool wants_new = n->target == DT_COMM_ALL_TO_ALL;
  if (a->has_dim != wants_dim || a->has_op != wants_op || a->has_new_dim != wants_new) {
    return fail(p, "%s takes %s", name,
                n->target == DT_COMM_ALL_GATHER       ? "dim=D"
                : n->target == DT_COMM_REDUCE_SCATTER ? "dim=D and op=OP"
                : n->target == DT_COMM_ALL_TO_ALL     ? "dim=D and new_dim=D"
                : n->target == DT_COMM_ALL_REDUCE     ? "op=OP"
                                                      : "no attributes");
  }
  const dt_value_type *in = dt__value_type(p->g, a->inputs[0]);
  const dt_value_type *t = &n->types[0];
  if (t->ndim != in->ndim || t->dtype != in->dtype)
    return fail(p, "%s: its type must keep its input's dtype and dims", name);
  if ((wants_dim && a->dim >= in->ndim) ||
      (wants_new && (a->new_dim >= in->ndim || a->new_dim == a->dim))) {
    return fail(p, "%s: dim out of range for %d dims", name, in->ndim);
  }
  if (n->target == DT_COMM_WAIT) {
    const dt_node *src = &p->g->nodes[a->inputs[0]];
    if (src->kind != DT_NODE_COMM || src->target == DT_COMM_WAIT)
      return fail(p, "wait_tensor must wait for a collective");
  }
  if ((n->target == DT_COMM_WAIT || n->target == DT_COMM_ALL_REDUCE) && !dt__type_equal(t, in)) {
    return fail(p, "%s: its type must equal its input's", name);
  }
  const dt_placement *pw = &n->placement, *pc = &p->g->nodes[a->inputs[0]].placement;
  if (n->target == DT_COMM_WAIT && n->has_placement && p->g->nodes[a->inputs[0]].has_placement &&
      (pw->kind != pc->kind || (pw->kind == DT_SHARD && pw->dim != pc->dim) ||
       (pw->kind == DT_PARTIAL && pw->op != pc->op) ||
       (pw->kind == DT_STRIDED_SHARD &&
        (pw->dim != pc->dim || pw->split_factor != pc->split_factor)))) {
    return fail(p, "wait_tensor: its placement must be its collective's");
  }
  for (int d = 0; d < in->ndim; d++) {
    bool moved = wants_dim && (d == a->dim || (wants_new && d == a->new_dim));
    if (!moved && (t->shape[d] != in->shape[d] || t->sym[d] != in->sym[d])) {
      return fail(p, "%s: dim %d must keep its size", name, d);
    }
  }
  n->ints[0] = a->dim;
  n->ints[1] = a->new_dim;
  n->n_ints = 0;
  n->reduce_op = a->op;
  if (wants_op && a->op == DT_REDUCE_AVG && !dt_dtype_is_floating(in->dtype)) {
    return fail(p, "%s: op=avg needs a floating dtype", name);
  }
  return DT_OK;
}

static dt_status parse_node(parser *p) {
  dt_graph *g = p->g;
  char name[MAX_NAME], target[MAX_NAME];
  dt_status st = expect(p, '%');
  if (!st) st = parse_name(p, name);
  if (st) return st;
  if (dt__graph_find(g, name) >= 0) return fail(p, "'%%%s' is defined twice", name);
  if (g->n_nodes >= DT_GRAPH_MAX_NODES - 1) {
    return fail(p, "more than %d nodes (a graph holds at most %d nodes, its return included)",
                DT_GRAPH_MAX_NODES - 1, DT_GRAPH_MAX_NODES);
  }
  size_t target_pos = p->pos;
  st = expect(p, '=');
  if (!st) st = parse_name(p, target);
  if (st) return st;
  dt_node_kind kind = DT_NODE_CALL;
  int op = -1;
  if (strcmp(target, "placeholder") == 0)
    kind = DT_NODE_PLACEHOLDER;
  else if (strcmp(target, "parameter") == 0)
    kind = DT_NODE_PARAMETER;
  else if (strcmp(target, "buffer") == 0)
    kind = DT_NODE_BUFFER;
  else if (strcmp(target, "getitem") == 0)
    kind = DT_NODE_GETITEM;
  else {
    for (int k = 0; k < DT_COMM_TARGET_COUNT; k++) {
      if (strcmp(target, dt__comm_target_names[k]) == 0) kind = DT_NODE_COMM, op = k;
    }
    if (kind == DT_NODE_CALL) {
      op = dt__op_by_name(target, strlen(target));
      if (op < 0) {
        p->pos = target_pos;
        return fail(p, "unknown op '%s'", target);
      }
    }
  }
  args *a = p->a;
  p->args_pos = p->pos;
  st = parse_args(p, a);
  if (!st) st = expect(p, ':');
  /* Declared type(s). */
  dt_value_type types[DT_OP_MAX_META + 1];
  int n_types = 0;
  bool tuple = false;
  if (!st && accept(p, '(')) {
    tuple = true;
    do {
      if (peek(p) == ')' && n_types > 0) break; /* "(t,)" */
      if (n_types > DT_OP_MAX_META) st = fail(p, "more than %d types in a tuple", DT_OP_MAX_META);
      if (!st) st = parse_type(p, &types[n_types++]);
    } while (!st && accept(p, ','));
    if (!st) st = expect(p, ')');
  } else if (!st) {
    st = parse_type(p, &types[n_types++]);
  }
  bool placed = false;
  dt_placement placement = dt_replicate();
  if (!st) {
    char c = peek(p);
    if ((c == 'R' || c == 'S' || c == 'P') && !name_char(p->s[p->pos + 1])) placed = true;
    if ((c == 'S' || c == 'P') && p->s[p->pos + 1] == '(') placed = true;
    if (placed) st = parse_placement(p, &placement);
  }
  if (!st && placed != (g->world_size > 0)) {
    st = fail(p, g->world_size > 0
                     ? "a transformed graph gives every value a placement"
                     : "placements need a transformed graph (world=N rank=R in the header)");
  }
  if (!st && placed && (placement.kind == DT_SHARD || placement.kind == DT_STRIDED_SHARD) &&
      placement.dim >= types[0].ndim) {
    st = fail(p, "placement S(%d) of a value with %d dims", placement.dim, types[0].ndim);
  }
  if (!st && tuple != (kind == DT_NODE_CALL && dt__op_returns_tuple(op))) {
    st = fail(p,
              tuple ? "only split, chunk, max.dim and min.dim give tuples"
                    : "%s gives a tuple: declare (t, ...)",
              target);
  }
  int i = -1;
  if (!st) {
    i = dt__graph_add_node(g, kind, name);
    if (i < 0) st = dt__error(DT_ERR_NOMEM, "dt_graph_parse: out of memory");
  }
  if (!st) st = dt__graph_node_types(g, i, n_types);
  if (!st) {
    dt_node *n = &g->nodes[i];
    memcpy(n->types, types, sizeof *types * (size_t)n_types);
    n->is_tuple = tuple;
    n->has_placement = placed;
    n->placement = placement;
    n->target = op;
    n->n_inputs = a->n_inputs;
    memcpy(n->inputs, a->inputs, sizeof n->inputs);
    for (int k = a->n_inputs; k < DT_OP_MAX_INPUTS; k++) n->inputs[k] = -1;
    if (a->has_list) {
      n->has_list = true;
      n->n_list = a->n_list;
      n->list = dt__arena_alloc(&g->arena, sizeof(int) * (size_t)(a->n_list ? a->n_list : 1));
      if (!n->list)
        st = dt__error(DT_ERR_NOMEM, "dt_graph_parse: out of memory");
      else
        memcpy(n->list, a->list, sizeof(int) * (size_t)a->n_list);
    }
  }
  if (!st) {
    dt_node *n = &g->nodes[i];
    switch (kind) {
    case DT_NODE_PLACEHOLDER:
    case DT_NODE_PARAMETER:
    case DT_NODE_BUFFER:
      if (a->n_inputs || a->has_list || a->has_index || any_keyword(a))
        st = fail(p, "%s() takes no arguments", target);
      break;
    case DT_NODE_GETITEM:
      if (a->n_inputs != 1 || a->inputs[0] < 0 || !a->has_index || a->has_list || any_keyword(a)) {
        st = fail(p, "getitem takes a tuple and an index");
      } else if (!g->nodes[a->inputs[0]].is_tuple) {
        st = fail(p, "getitem of '%%%s', which is not a tuple", g->nodes[a->inputs[0]].name);
      } else if (a->index >= g->nodes[a->inputs[0]].n_out) {
        st = fail(p, "getitem index %" PRId64 " of a tuple of %d", a->index,
                  g->nodes[a->inputs[0]].n_out);
      } else if (!dt__type_equal(&n->types[0], &g->nodes[a->inputs[0]].types[a->index])) {
        st = fail(p, "getitem: the declared type differs from the tuple element's");
      } else {
        n->ints[0] = a->index;
        n->n_ints = 1;
      }
      break;
    case DT_NODE_COMM: st = check_comm(p, i, a); break;
    default:
      n->n_ints = a->n_ints;
      memcpy(n->ints, a->ints, sizeof a->ints);
      if (a->n_int_list) {
        n->int_list = dt__arena_alloc(&g->arena, sizeof(int64_t) * (size_t)a->n_int_list);
        if (!n->int_list)
          st = dt__error(DT_ERR_NOMEM, "dt_graph_parse: out of memory");
        else
          memcpy(n->int_list, a->int_list, sizeof(int64_t) * (size_t)a->n_int_list);
        n->n_int_list = a->n_int_list;
      }
      n->dtype = a->dtype;
      n->flags = (int)a->flags;
      if (!st) st = check_call(p, i, a, n_types);
      break;
    }
  }
  return st;
}

static dt_status parse_graph(parser *p) {
  dt_graph *g = p->g;
  if (!accept_word(p, "graph")) return fail(p, "expected 'graph('");
  dt_status st = expect(p, '(');
  if (st) return st;
  if (!accept(p, ')')) {
    do {
      if (g->n_symbols >= DT_GRAPH_MAX_SYMBOLS)
        return fail(p, "more than %d symbols", DT_GRAPH_MAX_SYMBOLS);
      int64_t k, hint;
      if (peek(p) != 's') return fail(p, "expected a symbol s%d", g->n_symbols);
      p->pos++;
      st = parse_int(p, 0, DT_GRAPH_MAX_SYMBOLS, &k);
      if (!st && k != g->n_symbols)
        st = fail(p, "symbols must be declared in order: expected s%d", g->n_symbols);
      if (!st) st = expect(p, '=');
      if (!st) st = parse_int(p, 0, MAX_DIM_SIZE, &hint);
      if (st) return st;
      g->symbol_hints[g->n_symbols++] = hint;
    } while (accept(p, ','));
    st = expect(p, ')');
    if (st) return st;
  }
  if (accept_word(p, "world")) {
    int64_t world, rank;
    st = expect(p, '=');
    if (!st) st = parse_int(p, 1, DT_COMM_MAX_WORLD, &world);
    if (!st && !accept_word(p, "rank")) st = fail(p, "expected 'rank=' after 'world='");
    if (!st) st = expect(p, '=');
    if (!st) st = parse_int(p, 0, world - 1, &rank);
    if (st) return st;
    g->world_size = (int)world;
    g->rank = (int)rank;
  }
  st = expect(p, '{');
  while (!st && peek(p) == '%') st = parse_node(p);
  if (st) return st;
  if (!accept_word(p, "return")) return fail(p, "expected a node '%%name = ...' or 'return (...)'");
  st = expect(p, '(');
  int list[MAX_LIST], n = 0;
  if (!st && !accept(p, ')')) {
    do {
      if (n >= MAX_LIST) return fail(p, "more than %d returned values", MAX_LIST);
      st = parse_ref(p, &list[n]);
      if (!st) st = check_single(p, list[n]);
      n++;
    } while (!st && accept(p, ','));
    if (!st) st = expect(p, ')');
  }
  if (!st) st = expect(p, '}');
  if (st) return st;
  if (peek(p) != '\0') return fail(p, "text after the end of the graph");
  int o = dt__graph_add_node(g, DT_NODE_OUTPUT, "output");
  if (o < 0) return dt__error(DT_ERR_NOMEM, "dt_graph_parse: out of memory");
  st = dt__graph_node_types(g, o, 0);
  if (st) return st;
  g->nodes[o].has_list = true;
  g->nodes[o].n_list = n;
  g->nodes[o].list = dt__arena_alloc(&g->arena, sizeof(int) * (size_t)(n ? n : 1));
  if (!g->nodes[o].list) return dt__error(DT_ERR_NOMEM, "dt_graph_parse: out of memory");
  memcpy(g->nodes[o].list, list, sizeof(int) * (size_t)n);
  return DT_OK;
}

dt_status dt_graph_parse(const char *text, dt_graph **out) {
  dt_graph *g = NULL;
  dt_status st = dt__graph_create_from("dt_graph_parse", text, "text", out, &g);
  if (st) return st;
  parser p = {.s = text, .g = g};
  p.a = dt__alloc(sizeof *p.a);
  p.signatures = dt__alloc(sizeof *p.signatures * DT_OP_COUNT);
  p.have_signature = dt__calloc(sizeof *p.have_signature * DT_OP_COUNT);
  if (!p.a || !p.signatures || !p.have_signature)
    st = dt__error(DT_ERR_NOMEM, "dt_graph_parse: out of memory");
  if (!st) st = parse_graph(&p);
  dt__free(p.a);
  dt__free(p.signatures);
  dt__free(p.have_signature);
  if (st) {
    dt_graph_destroy(g);
    return st;
  }
  *out = g;
  return DT_OK;
}
