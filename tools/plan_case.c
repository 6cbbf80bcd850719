/* dtensor plan's cases: the table of ops it can run, and the parsing of a case from the command
 * line or from a JSON line (tools/plan.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"

#ifdef DT_HAVE_CJSON
#include <cjson/cJSON.h>
#endif

typedef dt_status (*plan_reduce_fn)(dt_tensor *, int, const int64_t *, bool, dt_tensor **);

static dt_status reduce(plan_reduce_fn fn, dt_tensor *x, const plan_attrs *a, dt_tensor **out) {
  int64_t all[DT_MAX_DIMS];
  int n = a->n_dim;
  const int64_t *dims = a->dim;
  if (n == 0) { /* no dim: every dim, as torch.sum(x) (keepdim then keeps them all) */
    n = dt_dist_ndim(x);
    for (int d = 0; d < n; d++) all[d] = d;
    dims = all;
  }
  return fn(x, n, dims, a->keepdim, out);
}
static dt_status call_sum(dt_tensor **in, int n, const plan_attrs *a, dt_tensor **out) {
  (void)n;
  return reduce(dt_sum_dims, in[0], a, out);
}
static dt_status call_mean(dt_tensor **in, int n, const plan_attrs *a, dt_tensor **out) {
  (void)n;
  return reduce(dt_mean_dims, in[0], a, out);
}
static dt_status call_amax(dt_tensor **in, int n, const plan_attrs *a, dt_tensor **out) {
  (void)n;
  return reduce(dt_amax, in[0], a, out);
}
static dt_status call_amin(dt_tensor **in, int n, const plan_attrs *a, dt_tensor **out) {
  (void)n;
  return reduce(dt_amin, in[0], a, out);
}
static int64_t first_dim(const plan_attrs *a, int64_t fallback) {
  return a->n_dim > 0 ? a->dim[0] : fallback;
}
static dt_status call_softmax(dt_tensor **in, int n, const plan_attrs *a, dt_tensor **out) {
  (void)n;
  return dt_softmax(in[0], first_dim(a, -1), out);
}
static dt_status call_log_softmax(dt_tensor **in, int n, const plan_attrs *a, dt_tensor **out) {
  (void)n;
  return dt_log_softmax(in[0], first_dim(a, -1), out);
}
static dt_status call_linear(dt_tensor **in, int n, const plan_attrs *a, dt_tensor **out) {
  (void)a;
  return dt_linear(in[0], in[1], n > 2 ? in[2] : NULL, out);
}
static dt_status call_addmm(dt_tensor **in, int n, const plan_attrs *a, dt_tensor **out) {
  (void)n, (void)a;
  return dt_addmm(in[0], in[1], in[2], out);
}
static dt_status call_view(dt_tensor **in, int n, const plan_attrs *a, dt_tensor **out) {
  (void)n;
  return dt_view(in[0], a->n_shape, a->shape, out);
}
static dt_status call_reshape(dt_tensor **in, int n, const plan_attrs *a, dt_tensor **out) {
  (void)n;
  return dt_reshape(in[0], a->n_shape, a->shape, out);
}
static dt_status call_flatten(dt_tensor **in, int n, const plan_attrs *a, dt_tensor **out) {
  (void)n;
  return dt_flatten(in[0], a->start, a->end, out);
}
static dt_status call_transpose(dt_tensor **in, int n, const plan_attrs *a, dt_tensor **out) {
  (void)n;
  return dt_transpose(in[0], a->dim0, a->dim1, out);
}
static dt_status call_permute(dt_tensor **in, int n, const plan_attrs *a, dt_tensor **out) {
  (void)n;
  return dt_permute(in[0], a->n_dims, a->dims, out);
}
static dt_status call_cat(dt_tensor **in, int n, const plan_attrs *a, dt_tensor **out) {
  return dt_cat(n, in, first_dim(a, 0), out);
}
static dt_status call_stack(dt_tensor **in, int n, const plan_attrs *a, dt_tensor **out) {
  return dt_stack(n, in, first_dim(a, 0), out);
}
static dt_status call_layer_norm(dt_tensor **in, int n, const plan_attrs *a, dt_tensor **out) {
  int ndim = dt_dist_ndim(in[0]), k = a->normalized; /* plan_parse_case checked 1 <= k <= ndim */
  return dt_layer_norm(in[0], k, dt_dist_global_shape(in[0]) + ndim - k, n > 1 ? in[1] : NULL,
                       n > 2 ? in[2] : NULL, 1e-5, out);
}

#define UNARY(n, f)                                                                                \
  { .name = n, .min_in = 1, .max_in = 1, .unary = f }
#define BINARY(n, f)                                                                               \
  { .name = n, .min_in = 2, .max_in = 2, .binary = f }
#define SCALAR(n, f)                                                                               \
  { .name = n, .min_in = 1, .max_in = 1, .scalar = f, .attrs = "scalar" }
#define CALL(n, lo, hi, f, at)                                                                     \
  { .name = n, .min_in = lo, .max_in = hi, .call = f, .attrs = at }

static const plan_op plan_ops[] = {
    BINARY("add", dt_add),
    BINARY("sub", dt_sub),
    BINARY("mul", dt_mul),
    BINARY("div", dt_div),
    BINARY("maximum", dt_maximum),
    BINARY("minimum", dt_minimum),
    BINARY("pow", dt_pow),
    UNARY("neg", dt_neg),
    UNARY("abs", dt_abs),
    UNARY("exp", dt_exp),
    UNARY("log", dt_log),
    UNARY("sqrt", dt_sqrt),
    UNARY("rsqrt", dt_rsqrt),
    UNARY("relu", dt_relu),
    UNARY("gelu", dt_gelu),
    UNARY("silu", dt_silu),
    UNARY("tanh", dt_tanh),
    UNARY("sigmoid", dt_sigmoid),
    SCALAR("add_scalar", dt_add_scalar),
    SCALAR("sub_scalar", dt_sub_scalar),
    SCALAR("mul_scalar", dt_mul_scalar),
    SCALAR("div_scalar", dt_div_scalar),
    SCALAR("pow_scalar", dt_pow_scalar),
    CALL("sum", 1, 1, call_sum, "dim keepdim"),
    CALL("mean", 1, 1, call_mean, "dim keepdim"),
    CALL("amax", 1, 1, call_amax, "dim keepdim"),
    CALL("amin", 1, 1, call_amin, "dim keepdim"),
    CALL("softmax", 1, 1, call_softmax, "dim"),
    CALL("log_softmax", 1, 1, call_log_softmax, "dim"),
    BINARY("mm", dt_mm),
    BINARY("matmul", dt_matmul),
    BINARY("bmm", dt_bmm),
    CALL("linear", 2, 3, call_linear, NULL),
    CALL("addmm", 3, 3, call_addmm, NULL),
    CALL("view", 1, 1, call_view, "shape"),
    CALL("reshape", 1, 1, call_reshape, "shape"),
    CALL("flatten", 1, 1, call_flatten, "start end"),
    CALL("transpose", 1, 1, call_transpose, "dim0 dim1"),
    CALL("permute", 1, 1, call_permute, "dims"),
    CALL("cat", 1, PLAN_MAX_INPUTS, call_cat, "dim"),
    CALL("stack", 1, PLAN_MAX_INPUTS, call_stack, "dim"),
    BINARY("embedding", dt_embedding),
    CALL("layer_norm", 1, 3, call_layer_norm, "normalized"),
    {0},
};

const plan_op *plan_find_op(const char *name) {
  for (const plan_op *o = plan_ops; o->name; o++) {
    if (strcmp(o->name, name) == 0) return o;
  }
  return NULL;
}

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

static bool parse_attr(const char *text, plan_attrs *a, char *err, size_t size) {
  const char *eq = strchr(text, '=');
  size_t klen = eq ? (size_t)(eq - text) : 0;
  const char *v = eq ? eq + 1 : "";
  int n = 0;
  int64_t one[1];
#define KEY(k) (klen == strlen(k) && strncmp(text, k, klen) == 0)
  if (KEY("dim")) {
    if (!parse_ints(v, DT_MAX_DIMS, a->dim, &a->n_dim, true))
      return fail(err, size, "attribute '%.200s': dim=1 or dim=0,1", text);
  } else if (KEY("keepdim")) {
    if (strcmp(v, "1") && strcmp(v, "true") && strcmp(v, "0") && strcmp(v, "false"))
      return fail(err, size, "attribute '%.200s': keepdim=true|false", text);
    a->keepdim = strcmp(v, "1") == 0 || strcmp(v, "true") == 0;
  } else if (KEY("shape")) {
    if (!parse_ints(v, DT_MAX_DIMS, a->shape, &a->n_shape, true))
      return fail(err, size, "attribute '%.200s': shape=6x5 or shape=-1", text);
  } else if (KEY("dims")) {
    if (!parse_ints(v, DT_MAX_DIMS, a->dims, &a->n_dims, true))
      return fail(err, size, "attribute '%.200s': dims=2,0,1", text);
  } else if (KEY("start") || KEY("end") || KEY("dim0") || KEY("dim1") || KEY("normalized")) {
    if (!parse_ints(v, 1, one, &n, true) || n != 1)
      return fail(err, size, "attribute '%.200s': an integer", text);
    if (KEY("start"))
      a->start = one[0];
    else if (KEY("end"))
      a->end = one[0];
    else if (KEY("dim0"))
      a->dim0 = one[0];
    else if (KEY("dim1"))
      a->dim1 = one[0];
    else if (one[0] < 0 || one[0] > DT_MAX_DIMS) /* an int cast would wrap 2147483648 */
      return fail(err, size, "attribute '%.200s': normalized=1 up to the input's dims", text);
    else
      a->normalized = (int)one[0];
  } else if (KEY("scalar")) {
    char *end;
    a->scalar = strtod(v, &end);
    if (end == v || *end) return fail(err, size, "attribute '%.200s': a number", text);
  } else {
    return fail(err, size,
                "unknown attribute '%.200s' (dim, keepdim, shape, dims, start, end, dim0, dim1, "
                "scalar, normalized)",
                text);
  }
#undef KEY
  return true;
}

static void default_attrs(plan_attrs *a) {
  memset(a, 0, sizeof *a);
  a->end = -1;
  a->dim1 = 1;
  a->scalar = 2;
  a->normalized = 1;
}

/* MESH OP ARG... [key=value...] after the options; false with a message on a usage error. */
bool plan_parse_case(int argc, char **argv, plan_case *c, char *err, size_t size) {
  memset(c, 0, sizeof *c);
  default_attrs(&c->attrs);
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
  c->op = plan_find_op(argv[1]);
  if (!c->op) return fail(err, size, "unknown op '%.200s' (see --help for the list)", argv[1]);
  for (int i = 2; i < argc; i++) {
    if (strchr(argv[i], '=')) {
      if (!parse_attr(argv[i], &c->attrs, err, size)) return false;
    } else {
      if (c->n_in == PLAN_MAX_INPUTS) return fail(err, size, "%s", "too many tensor arguments");
      if (!parse_input(argv[i], c->mesh_ndim, &c->in[c->n_in], err, size)) return false;
      c->n_in++;
    }
  }
  if (c->n_in < c->op->min_in || c->n_in > c->op->max_in) {
    if (c->op->min_in == c->op->max_in)
      snprintf(err, size, "%s takes %d tensor arguments, %d given", c->op->name, c->op->min_in,
               c->n_in);
    else
      snprintf(err, size, "%s takes %d to %d tensor arguments, %d given", c->op->name,
               c->op->min_in, c->op->max_in, c->n_in);
    return false;
  }
  if (c->op->call == call_layer_norm &&
      (c->attrs.normalized < 1 || c->attrs.normalized > c->in[0].ndim)) {
    snprintf(err, size, "layer_norm: normalized=%d outside 1..%d", c->attrs.normalized,
             c->in[0].ndim);
    return false;
  }
  return true;
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
