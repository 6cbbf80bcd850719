/* dtensor plan: what an op does on given placements — the output placements and the collectives
 * with their bytes — found by running it on the fake backend (one process impersonating rank 0
 * of the mesh's world; collectives move nothing but are counted) under a comm ledger.
 *
 * One case on the command line, or JSON lines on stdin (--stdin), so that a script comparing
 * thousands of cases with another library starts one process. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtensor/dtensor.h"
#include "tools.h"

#ifdef DT_HAVE_CJSON
#include <cjson/cJSON.h>
#endif

#define PLAN_MAX_INPUTS 8
#define PLAN_MAX_MESHES 8
#define PLAN_LINE 4096

/* ---- The case: parsed from the command line or from a JSON line -------------------------- */

typedef struct plan_input {
  int ndim;
  int64_t shape[DT_MAX_DIMS];
  dt_placement placements[DT_MESH_MAX_DIMS];
  int n_placements;
  dt_dtype dtype;
} plan_input;

/* Attributes, by name; an op reads those it takes (unset ones have the op's default). */
typedef struct plan_attrs {
  int n_dim;
  int64_t dim[DT_MAX_DIMS]; /* dim=1 or dim=0,1: reductions, softmax, cat, stack */
  bool keepdim;
  int n_shape;
  int64_t shape[DT_MAX_DIMS]; /* shape=6x5 (view, reshape) */
  int n_dims;
  int64_t dims[DT_MAX_DIMS]; /* dims=2,0,1 (permute) */
  int64_t start, end;        /* flatten: start=0 end=-1 */
  int64_t dim0, dim1;        /* transpose: dim0=0 dim1=1 */
  double scalar;             /* scalar ops: scalar=3 */
  int normalized;            /* layer_norm: how many trailing dims are normalized (1) */
} plan_attrs;

typedef struct plan_case {
  int mesh_ndim;
  int mesh_shape[DT_MESH_MAX_DIMS];
  const struct plan_op *op;
  int n_in;
  plan_input in[PLAN_MAX_INPUTS];
  plan_attrs attrs;
} plan_case;

/* ---- The ops: a name, an arity and how to call it with the attributes -------------------- */

typedef dt_status (*plan_unary_fn)(dt_tensor *, dt_tensor **);
typedef dt_status (*plan_binary_fn)(dt_tensor *, dt_tensor *, dt_tensor **);
typedef dt_status (*plan_scalar_fn)(dt_tensor *, double, dt_tensor **);
typedef dt_status (*plan_call_fn)(dt_tensor **in, int n, const plan_attrs *a, dt_tensor **out);

typedef struct plan_op {
  const char *name;
  int min_in, max_in;
  plan_unary_fn unary;
  plan_binary_fn binary;
  plan_scalar_fn scalar;
  plan_call_fn call;
  const char *attrs; /* the attributes it reads, for --help and errors */
} plan_op;

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
  int ndim = dt_dist_ndim(in[0]), k = a->normalized; /* parse_case checked 1 <= k <= ndim */
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

static const plan_op *find_op(const char *name) {
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
static bool parse_case(int argc, char **argv, plan_case *c, char *err, size_t size) {
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
  c->op = find_op(argv[1]);
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

/* ---- Running a case ---------------------------------------------------------------------------
 */

typedef struct plan_world {
  int ndim, shape[DT_MESH_MAX_DIMS];
  dt_comm *comm;
  dt_mesh *mesh;
} plan_world;

typedef struct plan_env {
  int n;
  plan_world worlds[PLAN_MAX_MESHES];
} plan_env;

static void env_release(plan_env *e) {
  for (int i = 0; i < e->n; i++) {
    dt_mesh_destroy(e->worlds[i].mesh);
    dt_comm_destroy(e->worlds[i].comm);
  }
  e->n = 0;
}

/* The fake world and mesh of a shape, made once per shape. */
static dt_status env_mesh(plan_env *e, const plan_case *c, dt_mesh **out) {
  for (int i = 0; i < e->n; i++) {
    plan_world *w = &e->worlds[i];
    if (w->ndim == c->mesh_ndim &&
        memcmp(w->shape, c->mesh_shape, sizeof(int) * (size_t)c->mesh_ndim) == 0) {
      *out = w->mesh;
      return DT_OK;
    }
  }
  if (e->n == PLAN_MAX_MESHES) env_release(e);
  plan_world *w = &e->worlds[e->n];
  memset(w, 0, sizeof *w);
  w->ndim = c->mesh_ndim;
  int world = 1;
  for (int d = 0; d < c->mesh_ndim; d++) {
    w->shape[d] = c->mesh_shape[d];
    world *= c->mesh_shape[d];
  }
  dt_comm_options opts = {.backend = "fake", .rank = 0, .world_size = world};
  dt_status st = dt_comm_init(&opts, &w->comm);
  if (!st) st = dt_mesh_create(w->comm, c->mesh_ndim, c->mesh_shape, NULL, &w->mesh);
  if (st) {
    dt_comm_destroy(w->comm);
    return st;
  }
  e->n++;
  *out = w->mesh;
  return DT_OK;
}

/* Rank 0's shard of an input: made with Replicate where a Partial is asked (rank 0's local
 * shape is the same), then wrapped with the real placements. */
static dt_status make_input(dt_mesh *mesh, const plan_input *in, dt_tensor **out) {
  dt_placement made[DT_MESH_MAX_DIMS];
  bool partial = false;
  for (int m = 0; m < in->n_placements; m++) {
    made[m] = in->placements[m];
    if (made[m].kind == DT_PARTIAL) {
      made[m] = dt_replicate();
      partial = true;
    }
  }
  dt_tensor *t = NULL, *local = NULL;
  dt_status st = dt_dist_full(mesh, in->ndim, in->shape, in->dtype == DT_I64 ? 1 : 0.5, in->dtype,
                              in->n_placements, made, &t);
  if (st || !partial) {
    *out = t;
    return st;
  }
  st = dt_dist_to_local(t, &local);
  if (!st) {
    dt_dist_from_local_options o = {.global_shape = in->shape, .global_ndim = in->ndim};
    st = dt_dist_from_local(mesh, local, in->n_placements, in->placements, &o, out);
  }
  dt_tensor_release(local);
  dt_tensor_release(t);
  return st;
}

static dt_status call_op(const plan_case *c, dt_tensor **in, dt_tensor **out) {
  const plan_op *o = c->op;
  if (o->unary) return o->unary(in[0], out);
  if (o->binary) return o->binary(in[0], in[1], out);
  if (o->scalar) return o->scalar(in[0], c->attrs.scalar, out);
  return o->call(in, c->n_in, &c->attrs, out);
}

/* The collectives the ledger can name (comm.h's), for the per-collective lines. */
static const char *const collectives[] = {"all_reduce",
                                          "broadcast",
                                          "all_gather_into_tensor",
                                          "all_gather_uneven",
                                          "reduce_scatter_tensor",
                                          "reduce_scatter_uneven",
                                          "all_to_all",
                                          "all_to_all_uneven",
                                          "scatter",
                                          "gather",
                                          "send",
                                          "recv",
                                          "barrier",
                                          "all_gather_object",
                                          NULL};

typedef struct plan_result {
  dt_status status;
  bool bad_input; /* the mesh or an input could not be made: a usage error */
  char error[512];
  int out_ndim;
  int64_t out_shape[DT_MAX_DIMS];
  char out_placements[DT_MESH_MAX_DIMS][32];
  int n_out_placements;
  int64_t calls, bytes;
  int64_t kind_calls[16], kind_bytes[16];
} plan_result;

static void run_case(plan_env *e, const plan_case *c, plan_result *r) {
  memset(r, 0, sizeof *r);
  dt_tensor *in[PLAN_MAX_INPUTS] = {0}, *out = NULL;
  dt_comm_ledger *ledger = NULL;
  dt_mesh *mesh = NULL;
  dt_status st = env_mesh(e, c, &mesh);
  for (int i = 0; !st && i < c->n_in; i++) st = make_input(mesh, &c->in[i], &in[i]);
  r->bad_input = st != DT_OK;
  if (!st) st = dt_comm_ledger_start(&ledger);
  if (!st) {
    st = call_op(c, in, &out);
    if (st) snprintf(r->error, sizeof r->error, "%s", dt_last_error());
    dt_status stop = dt_comm_ledger_stop(ledger);
    if (!st) st = stop;
  }
  if (st && !r->error[0]) snprintf(r->error, sizeof r->error, "%s", dt_last_error());
  r->status = st;
  if (!st && !dt_dist_mesh(out)) {
    r->status = DT_ERR_INTERNAL;
    snprintf(r->error, sizeof r->error, "the result is not distributed");
  }
  if (!r->status) {
    r->calls = dt_comm_ledger_count(ledger, NULL);
    r->bytes = dt_comm_ledger_bytes(ledger, NULL);
    for (int k = 0; collectives[k]; k++) {
      r->kind_calls[k] = dt_comm_ledger_count(ledger, collectives[k]);
      r->kind_bytes[k] = dt_comm_ledger_bytes(ledger, collectives[k]);
    }
    r->out_ndim = dt_dist_ndim(out);
    memcpy(r->out_shape, dt_dist_global_shape(out), sizeof(int64_t) * (size_t)r->out_ndim);
    r->n_out_placements = dt_mesh_ndim(dt_dist_mesh(out));
    for (int m = 0; m < r->n_out_placements; m++) {
      dt_placement_format(dt_dist_placements(out)[m], r->out_placements[m],
                          sizeof r->out_placements[m]);
    }
  }
  dt_comm_ledger_destroy(ledger);
  dt_tensor_release(out);
  for (int i = 0; i < c->n_in; i++) dt_tensor_release(in[i]);
}

/* ---- Printing ------------------------------------------------------------------------------- */

/* The length of the well-formed UTF-8 sequence of 2 to 4 bytes at s, 0 when there is none (a
 * stray byte, or a character cut by a "%.200s" truncation). */
static int utf8_sequence(const unsigned char *s) {
  int n = s[0] >= 0xC2 && s[0] <= 0xDF   ? 2
          : s[0] >= 0xE0 && s[0] <= 0xEF ? 3
          : s[0] >= 0xF0 && s[0] <= 0xF4 ? 4
                                         : 0;
  unsigned char lo = s[0] == 0xE0 ? 0xA0 : s[0] == 0xF0 ? 0x90 : 0x80;
  unsigned char hi = s[0] == 0xED ? 0x9F : s[0] == 0xF4 ? 0x8F : 0xBF;
  for (int i = 1; i < n; i++) {
    if (s[i] < (i == 1 ? lo : 0x80) || s[i] > (i == 1 ? hi : 0xBF)) return 0;
  }
  return n;
}

/* s as a JSON string; bytes that are not UTF-8 become U+FFFD, so a reader decoding the line as
 * UTF-8 never fails on what a user's input or a truncation left in a message. */
static void json_string(FILE *f, const char *s) {
  fputc('"', f);
  while (*s) {
    unsigned char c = (unsigned char)*s;
    int n = c < 0x80 ? 1 : utf8_sequence((const unsigned char *)s);
    if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c < 0x20)
      fprintf(f, "\\u%04x", c);
    else if (n == 0)
      fputs("\\ufffd", f);
    else
      fwrite(s, 1, (size_t)n, f);
    s += n ? n : 1;
  }
  fputc('"', f);
}

static void print_ints(FILE *f, int n, const int64_t *v) {
  fputc('[', f);
  for (int i = 0; i < n; i++) fprintf(f, "%s%lld", i ? "," : "", (long long)v[i]);
  fputc(']', f);
}

static void print_json(FILE *f, const plan_case *c, const plan_result *r, long id) {
  fputc('{', f);
  if (id >= 0) fprintf(f, "\"id\":%ld,", id);
  fprintf(f, "\"op\":\"%s\",\"mesh\":", c->op->name);
  fputc('[', f);
  for (int d = 0; d < c->mesh_ndim; d++) fprintf(f, "%s%d", d ? "," : "", c->mesh_shape[d]);
  fputc(']', f);
  if (r->status) {
    fprintf(f, ",\"ok\":false,\"status\":\"%s\",\"error\":",
            r->bad_input ? "usage" : dt_status_string(r->status));
    json_string(f, r->error);
    fputs("}\n", f);
    return;
  }
  fputs(",\"ok\":true,\"out_shape\":", f);
  print_ints(f, r->out_ndim, r->out_shape);
  fputs(",\"out_placements\":[", f);
  for (int m = 0; m < r->n_out_placements; m++)
    fprintf(f, "%s\"%s\"", m ? "," : "", r->out_placements[m]);
  fprintf(f, "],\"calls\":%lld,\"bytes\":%lld,\"collectives\":{", (long long)r->calls,
          (long long)r->bytes);
  bool first = true;
  for (int k = 0; collectives[k]; k++) {
    if (!r->kind_calls[k]) continue;
    fprintf(f, "%s\"%s\":{\"calls\":%lld,\"bytes\":%lld}", first ? "" : ",", collectives[k],
            (long long)r->kind_calls[k], (long long)r->kind_bytes[k]);
    first = false;
  }
  fputs("}}\n", f);
}

static void print_text(FILE *f, const plan_case *c, const plan_result *r) {
  fprintf(f, "%s on mesh ", c->op->name);
  for (int d = 0; d < c->mesh_ndim; d++) fprintf(f, "%s%d", d ? "x" : "", c->mesh_shape[d]);
  fputs(" (rank 0, fake backend)\n", f);
  fputs("output: ", f);
  print_ints(f, r->out_ndim, r->out_shape);
  fputc(' ', f);
  for (int m = 0; m < r->n_out_placements; m++)
    fprintf(f, "%s%s", m ? "," : "", r->out_placements[m]);
  fprintf(f, "\ncollectives: %lld, bytes: %lld\n", (long long)r->calls, (long long)r->bytes);
  for (int k = 0; collectives[k]; k++) {
    if (r->kind_calls[k]) {
      fprintf(f, "  %-24s %4lld calls %12lld bytes\n", collectives[k], (long long)r->kind_calls[k],
              (long long)r->kind_bytes[k]);
    }
  }
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
static bool case_from_json(const char *line, plan_case *c, long *id, char *err, size_t size) {
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
  ok = parse_case(n, words, c, err, size);
done:
  cJSON_Delete(root);
  return ok;
}

static int run_stdin(void) {
  plan_env env = {0};
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  while ((len = getline(&line, &cap, stdin)) > 0) {
    if (len <= 1) continue;
    plan_case c;
    plan_result r;
    char err[512];
    long id = -1;
    if (!case_from_json(line, &c, &id, err, sizeof err)) {
      printf("{");
      if (id >= 0) printf("\"id\":%ld,", id);
      printf("\"ok\":false,\"status\":\"usage\",\"error\":");
      json_string(stdout, err);
      printf("}\n");
    } else {
      run_case(&env, &c, &r);
      print_json(stdout, &c, &r, id);
    }
    fflush(stdout);
  }
  free(line);
  env_release(&env);
  return 0;
}
#endif

/* ---- The command -------------------------------------------------------------------------------
 */

const char tool_plan_details[] =
    "Runs the op on the fake backend (this process is rank 0 of the mesh's world; collectives\n"
    "move nothing) under a comm ledger and prints the output placements and the collectives\n"
    "with their bytes (the larger buffer of each collective on rank 0).\n"
    "  MESH   4, 2x2, 2x3, ...\n"
    "  ARG    SHAPE:PLACEMENTS[:DTYPE], one placement per mesh dim: 8x6:S0,R  [6]:Psum  5:R:i64\n"
    "         placements R, S0 or S(0), SS0/6 (StridedShard(0, 6)), P or Psum, Pavg, Pmax, Pmin;\n"
    "         dtype f32 (default), i64...\n"
    "  ATTR   dim=1 | dim=0,1, keepdim=true, shape=6x5 (view, reshape), dims=2,0,1 (permute),\n"
    "         start=, end= (flatten; 0, -1), dim0=, dim1= (transpose; 0, 1), scalar= (2),\n"
    "         normalized= (layer_norm: trailing dims, 1)\n"
    "ops: add sub mul div maximum minimum pow neg abs exp log sqrt rsqrt relu gelu silu tanh\n"
    "  sigmoid add_scalar sub_scalar mul_scalar div_scalar pow_scalar sum mean amax amin softmax\n"
    "  log_softmax mm matmul bmm linear (x, w[, b]) addmm (bias, a, b) view reshape flatten\n"
    "  transpose permute cat stack embedding (weight, indices:i64) layer_norm (x[, w[, b]])\n"
    "--stdin: JSON lines in, one JSON line out per case, e.g.\n"
    "  "
    "{\"id\":1,\"mesh\":[2,2],\"op\":\"sum\",\"args\":[{\"shape\":[8,6],\"placements\":[\"S0\","
    "\"R\"]}],"
    "\"attrs\":{\"dim\":[1]}}\n"
    "Exit: 0 done, 1 the op failed (the library's message), 2 a usage error (also an input the\n"
    "library refuses to make, e.g. S2 of a 2-D tensor).";

/* The fake backend leaves a collective's output as it was: zeroed memory makes gathered
 * embedding indices 0 (in range) instead of whatever the allocation held. */
static void *zeroed_alloc(size_t size, size_t alignment, void *user) {
  (void)user;
  void *p = NULL;
  if (alignment < sizeof(void *)) alignment = sizeof(void *);
  if (posix_memalign(&p, alignment, size ? size : 1)) return NULL;
  memset(p, 0, size);
  return p;
}
static void zeroed_free(void *ptr, void *user) {
  (void)user;
  free(ptr);
}

int tool_plan(int argc, char **argv) {
  bool json = false, from_stdin = false;
  char *rest[64];
  int n = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0)
      json = true;
    else if (strcmp(argv[i], "--stdin") == 0)
      from_stdin = true;
    else if (strncmp(argv[i], "--", 2) == 0) {
      fprintf(stderr, "dtensor plan: unknown option '%.200s' (see 'dtensor plan --help')\n",
              argv[i]);
      return 2;
    } else if (n < 64) {
      rest[n++] = argv[i];
    } else {
      fprintf(stderr, "dtensor plan: too many arguments\n");
      return 2;
    }
  }
  dt_set_allocator(&(dt_allocator){.alloc = zeroed_alloc, .free = zeroed_free});
  if (from_stdin) {
    if (n > 0) {
      fprintf(stderr, "dtensor plan: --stdin takes no case on the command line\n");
      return 2;
    }
#ifdef DT_HAVE_CJSON
    return run_stdin();
#else
    fprintf(stderr, "dtensor plan: --stdin needs cJSON, which this build did not find\n");
    return 2;
#endif
  }
  plan_case c;
  char err[512];
  if (!parse_case(n, rest, &c, err, sizeof err)) {
    fprintf(stderr, "dtensor plan: %s\n", err);
    return 2;
  }
  plan_env env = {0};
  plan_result r;
  run_case(&env, &c, &r);
  env_release(&env);
  if (json)
    print_json(stdout, &c, &r, -1);
  else if (!r.status)
    print_text(stdout, &c, &r);
  if (r.status && !json) fprintf(stderr, "dtensor plan: %s: %s\n", c.op->name, r.error);
  return r.bad_input ? 2 : r.status ? 1 : 0;
}
