/* dtensor plan's cases: the parsing of a case from the command line or from a JSON line
 * (tools/plan.h). The ops are the list's (src/ops/op_list.h), called through its one adapter
 * (src/ops/op_args.h): every op of the list, by its ATen name or its base name, with its
 * arguments by the names its schema gives them. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op_args.h"
#include "plan.h"

#ifdef DT_HAVE_CJSON
#include <cjson/cJSON.h>
#endif

/* ---- Parsing ------------------------------------------------------------------------------- */

/* A usage error: message into err, false returned. */
static bool fail(char *err, size_t size, const char *fmt, const char *what) {
  snprintf(err, size, fmt, what);
  return false;
}

/* "8x6", "[8,6]", "8,6", "[]" (0-d) or "24" into ints; sep is any of "x,". */
static bool parse_ints(const char *text, int max, int64_t *out, int *n, bool allow_negative) {
  const char *p = text;
  if (*p == '[') p++;
  *n = 0;
  while (*p && *p != ']') {
    char *end;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    if (end == p || errno || (!allow_negative && v < 0) || *n == max) return false;
    out[(*n)++] = v;
    p = end;
    if (*p == 'x' || *p == ',') {
      p++;
      if (!*p || *p == ']') return false; /* "2x", "8,": a separator needs a number after it */
    } else if (*p && *p != ']') {
      return false;
    }
  }
  if (*p == ']') p++;
  return *p == '\0';
}

/* R, S0 or S(0), SS0/6 (StridedShard(0, 6): '/' since ',' separates placements), P / Psum /
 * P(sum), Pavg, Pmax, Pmin. */
static bool parse_placement(const char *t, dt_placement *p) {
  if (strcmp(t, "R") == 0) {
    *p = dt_replicate();
    return true;
  }
  if (t[0] == 'S' && t[1] == 'S') {
    char *end;
    long d = strtol(t + 2, &end, 10);
    if (end == t + 2 || *end != '/' || d < -DT_MAX_DIMS || d >= DT_MAX_DIMS) return false;
    const char *q = end + 1;
    long f = strtol(q, &end, 10);
    if (end == q || *end != '\0' || f < 1 || f > (1L << 30)) return false;
    *p = dt_strided_shard((int)d, (int)f);
    return true;
  }
  if (t[0] == 'S') {
    char *end;
    const char *q = t + 1 + (t[1] == '(');
    long d = strtol(q, &end, 10);
    if (end == q || d < -DT_MAX_DIMS || d >= DT_MAX_DIMS) return false;
    if (t[1] == '(' && *end++ != ')') return false;
    *p = dt_shard((int)d);
    return *end == '\0';
  }
  if (t[0] == 'P') {
    static const struct {
      const char *name;
      dt_reduce_op op;
    } ops[] = {{"", DT_REDUCE_SUM},      {"sum", DT_REDUCE_SUM},   {"(sum)", DT_REDUCE_SUM},
               {"avg", DT_REDUCE_AVG},   {"(avg)", DT_REDUCE_AVG}, {"max", DT_REDUCE_MAX},
               {"(max)", DT_REDUCE_MAX}, {"min", DT_REDUCE_MIN},   {"(min)", DT_REDUCE_MIN}};
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) {
      if (strcmp(t + 1, ops[i].name) == 0) {
        *p = dt_partial(ops[i].op);
        return true;
      }
    }
  }
  return false;
}

static bool parse_dtype(const char *t, dt_dtype *out) {
  static const char *short_names[] = {"f32", "f64", "bf16", "f16", "i64", "i32", "u8", "bool"};
  for (int d = 0; d < DT_DTYPE_COUNT; d++) {
    if (strcmp(t, short_names[d]) == 0 || strcmp(t, dt_dtype_name((dt_dtype)d)) == 0) {
      *out = (dt_dtype)d;
      return true;
    }
  }
  return false;
}

/* SHAPE:PLACEMENTS[:DTYPE], placements comma-separated, one per mesh dim. */
static bool parse_input(const char *text, int mesh_ndim, plan_input *in, char *err, size_t size) {
  char buf[512];
  if (strlen(text) >= sizeof buf) return fail(err, size, "argument too long: '%.40s...'", text);
  strcpy(buf, text);
  char *colon = strchr(buf, ':');
  if (!colon) return fail(err, size, "argument '%.200s' is not SHAPE:PLACEMENTS[:DTYPE]", text);
  *colon = '\0';
  char *places = colon + 1, *dtype = strchr(places, ':');
  if (dtype) *dtype++ = '\0';
  memset(in, 0, sizeof *in);
  in->dtype = DT_F32;
  if (!parse_ints(buf, DT_MAX_DIMS, in->shape, &in->ndim, false))
    return fail(err, size, "argument '%.200s': bad shape (e.g. 8x6 or [8,6])", text);
  if (dtype && !parse_dtype(dtype, &in->dtype))
    return fail(err, size, "argument '%.200s': unknown dtype (f32, f64, i64, ...)", text);
  for (char *tok = strtok(places, ","); tok; tok = strtok(NULL, ",")) {
    if (in->n_placements == DT_MESH_MAX_DIMS ||
        !parse_placement(tok, &in->placements[in->n_placements]))
      return fail(err, size,
                  "argument '%.200s': bad placement (R, S0, SS0/6, P, Psum, Pmax, Pmin, Pavg)",
                  text);
    in->n_placements++;
  }
  if (in->n_placements != mesh_ndim)
    return fail(err, size, "argument '%.200s': give one placement per mesh dim", text);
  return true;
}

/* Appends one attribute word "name=value" to the case's attributes. */
static bool add_attr(plan_case *c, const char *word, char *err, size_t size) {
  size_t used = strlen(c->attrs);
  if (word[0] == '=' || strchr(word, ' '))
    return fail(err, size, "attribute '%.200s' is not name=value without spaces", word);
  if (used + strlen(word) + 2 > sizeof c->attrs)
    return fail(err, size, "%s", "too many attributes");
  snprintf(c->attrs + used, sizeof c->attrs - used, "%s%s", used ? " " : "", word);
  return true;
}

/* The op a name means: the list's op of that ATen name ("add.Tensor"), or the first op of that
 * base name ("add") whose tensor count and attributes fit, as PyTorch picks an overload. When
 * none fits, the reason told is the most specific one: a bad value of an attribute the overload
 * knows (sum dim=1.5) over an attribute it does not know, over a wrong tensor count. */
static bool resolve_op(const char *name, plan_case *c, char *err, size_t size) {
  bool named = false;
  int told = -1; /* the rank of the reason in err: 0 count, 1 unknown attribute, 2 a value */
  for (int op = 0; op < DT_OP_COUNT; op++) {
    const char *full = dt__op_table[op].name;
    size_t base = strcspn(full, ".");
    if (strcmp(full, name) != 0 && (strlen(name) != base || strncmp(full, name, base) != 0))
      continue;
    dt_op_params p;
    dt_op_args args;
    const char *why = NULL;
    char count[160];
    if (dt__op_params(op, &p)) {
      why = dt_last_error();
    } else if (c->n_in < p.min_tensors || c->n_in > p.max_tensors) {
      if (p.max_tensors == INT_MAX)
        snprintf(count, sizeof count, "%s takes %d or more tensor arguments, %d given", full,
                 p.min_tensors, c->n_in);
      else if (p.min_tensors == p.max_tensors)
        snprintf(count, sizeof count, "%s takes %d tensor arguments, %d given", full, p.min_tensors,
                 c->n_in);
      else
        snprintf(count, sizeof count, "%s takes %d to %d tensor arguments, %d given", full,
                 p.min_tensors, p.max_tensors, c->n_in);
      why = count;
    } else if (dt__op_args_parse(op, c->attrs, &args)) {
      why = dt_last_error();
    }
    if (!why) {
      c->op = op;
      return true;
    }
    int rank = why == count ? 0 : strstr(why, "unknown attribute") ? 1 : 2;
    if (rank > told) {
      snprintf(err, size, "%s", why);
      told = rank;
    }
    named = true;
  }
  if (!named) snprintf(err, size, "unknown op '%.200s' (dtensor info --ops lists them)", name);
  return false;
}

/* MESH OP ARG... [key=value...] after the options; false with a message on a usage error. */
bool plan_parse_case(int argc, char **argv, plan_case *c, char *err, size_t size) {
  memset(c, 0, sizeof *c);
  if (argc < 3) return fail(err, size, "%s", "expected MESH OP ARG... (see --help)");
  int64_t mesh[DT_MESH_MAX_DIMS];
  int n = 0;
  if (!parse_ints(argv[0], DT_MESH_MAX_DIMS, mesh, &n, false) || n == 0)
    return fail(err, size, "bad mesh '%.200s' (e.g. 4, 2x2, 2x3)", argv[0]);
  int64_t world = 1;
  for (int d = 0; d < n; d++) {
    if (mesh[d] < 1 || mesh[d] > 1024) return fail(err, size, "bad mesh '%.200s'", argv[0]);
    c->mesh_shape[d] = (int)mesh[d];
    world *= mesh[d];
  }
  if (world > 1024) return fail(err, size, "mesh '%.200s' has too many ranks", argv[0]);
  c->mesh_ndim = n;
  snprintf(c->op_name, sizeof c->op_name, "%s", argv[1]);
  for (int i = 2; i < argc; i++) {
    if (strchr(argv[i], '=')) {
      if (!add_attr(c, argv[i], err, size)) return false;
    } else {
      if (c->n_in == PLAN_MAX_INPUTS) return fail(err, size, "%s", "too many tensor arguments");
      if (!parse_input(argv[i], c->mesh_ndim, &c->in[c->n_in], err, size)) return false;
      c->n_in++;
    }
  }
  return resolve_op(argv[1], c, err, size);
}

/* ---- Batch mode: JSON lines -------------------------------------------------------------------
 */

#ifdef DT_HAVE_CJSON
/* A JSON number that is a whole number an int64 holds (2.7, 1e300 and -1e30 are not: a cast
 * would truncate them or be undefined). */
static bool json_int(const cJSON *v, long long *out) {
  if (!cJSON_IsNumber(v)) return false;
  double d = v->valuedouble;
  if (!(d >= -9.2e18 && d <= 9.2e18) || (double)(long long)d != d) return false;
  *out = (long long)d;
  return true;
}

/* Appends the ints of a JSON array (or one number) as "a,b,c" to buf. */
static bool json_ints(const cJSON *v, char *buf, size_t size) {
  size_t used = 0;
  long long i;
  buf[0] = '\0';
  if (cJSON_IsNumber(v)) {
    if (!json_int(v, &i)) return false;
    snprintf(buf, size, "%lld", i);
    return true;
  }
  if (!cJSON_IsArray(v)) return false;
  const cJSON *x;
  used += (size_t)snprintf(buf, size, "[");
  cJSON_ArrayForEach(x, v) {
    if (!json_int(x, &i) || used >= size) return false;
    used +=
        (size_t)snprintf(buf + used, size - used, "%s%lld", x->prev && x != v->child ? "," : "", i);
  }
  if (used < size) snprintf(buf + used, size - used, "]");
  return used < size;
}

/* Turns a JSON case into the command line's words, then parses those: one parser.
 * {"mesh":[2,2],"op":"sum","args":[{"shape":[8,6],"placements":["S0","R"],"dtype":"f32"}],
 *  "attrs":{"dim":[1],"keepdim":true}} */
bool plan_case_from_json(const char *line, plan_case *c, long *id, char *err, size_t size) {
  enum { WORDS = 2 + PLAN_MAX_INPUTS + 16 };
  char store[WORDS][160];
  char *words[WORDS];
  int n = 0;
  bool ok = false;
  cJSON *root = cJSON_Parse(line);
  if (!root || !cJSON_IsObject(root)) {
    snprintf(err, size, "not a JSON object");
    goto done;
  }
  const cJSON *vid = cJSON_GetObjectItemCaseSensitive(root, "id");
  long long given_id;
  *id = json_int(vid, &given_id) && given_id >= 0 && given_id <= 2147483647 ? (long)given_id : -1;
  const cJSON *mesh = cJSON_GetObjectItemCaseSensitive(root, "mesh");
  const cJSON *op = cJSON_GetObjectItemCaseSensitive(root, "op");
  const cJSON *args = cJSON_GetObjectItemCaseSensitive(root, "args");
  const cJSON *attrs = cJSON_GetObjectItemCaseSensitive(root, "attrs");
  if (!json_ints(mesh, store[n], sizeof store[n]) || !cJSON_IsString(op) || !cJSON_IsArray(args)) {
    snprintf(err, size, "a case needs \"mesh\" (ints), \"op\" (a string) and \"args\" (a list)");
    goto done;
  }
  n++;
  snprintf(store[n++], sizeof store[0], "%s", op->valuestring);
  const cJSON *a;
  cJSON_ArrayForEach(a, args) {
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(a, "shape");
    const cJSON *pl = cJSON_GetObjectItemCaseSensitive(a, "placements");
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(a, "dtype");
    char s[64];
    if (n == WORDS || !json_ints(shape, s, sizeof s) || !cJSON_IsArray(pl)) {
      snprintf(err, size, "an argument needs \"shape\" (ints) and \"placements\" (strings)");
      goto done;
    }
    size_t used = (size_t)snprintf(store[n], sizeof store[0], "%s:", s);
    const cJSON *p;
    cJSON_ArrayForEach(p, pl) {
      /* ',' and ':' separate the words this builds: inside one string they would smuggle in
       * another placement or a dtype. */
      if (!cJSON_IsString(p) || strpbrk(p->valuestring, ",:") || used >= sizeof store[0]) {
        snprintf(err, size,
                 "placements are strings, one per mesh dim (\"R\", \"S0\", \"Psum\", ...)");
        goto done;
      }
      used += (size_t)snprintf(store[n] + used, sizeof store[0] - used, "%s%s",
                               p == pl->child ? "" : ",", p->valuestring);
    }
    if (dt && (!cJSON_IsString(dt) || strchr(dt->valuestring, ':'))) {
      snprintf(err, size, "an argument's \"dtype\" is a string (\"f32\", \"i64\", ...)");
      goto done;
    }
    if (dt && used < sizeof store[0])
      snprintf(store[n] + used, sizeof store[0] - used, ":%s", dt->valuestring);
    n++;
  }
  if (attrs && !cJSON_IsObject(attrs)) {
    snprintf(err, size, "\"attrs\" is an object ({\"dim\":[1], ...})");
    goto done;
  }
  if (attrs) {
    cJSON_ArrayForEach(a, attrs) {
      char v[96];
      if (n == WORDS) {
        snprintf(err, size, "too many attributes");
        goto done;
      }
      if (cJSON_IsBool(a))
        snprintf(v, sizeof v, "%s", cJSON_IsTrue(a) ? "1" : "0");
      else if (cJSON_IsNumber(a) && !json_int(a, &given_id)) /* 1.5, 1e300: scalar= reads it */
        snprintf(v, sizeof v, "%.17g", a->valuedouble);
      else if (!json_ints(a, v, sizeof v)) {
        snprintf(err, size, "attribute \"%s\": a number, a list of ints or a bool", a->string);
        goto done;
      }
      snprintf(store[n++], sizeof store[0], "%s=%s", a->string, v);
    }
  }
  for (int i = 0; i < n; i++) words[i] = store[i];
  ok = plan_parse_case(n, words, c, err, size);
done:
  cJSON_Delete(root);
  return ok;
}
#endif
