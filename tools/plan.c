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

#include "ops/op_args.h"
#include "plan.h"
#include "tools.h"

#define PLAN_MAX_MESHES 8
#define PLAN_LINE 4096

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
  dt_status st = dt_dist_constant(mesh, in->ndim, in->shape, in->dtype == DT_I64 ? 1 : 0.5,
                                  in->dtype, in->n_placements, made, &t);
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

/* The op through the list's one adapter; a tuple op shows its first output. */
static dt_status call_op(const plan_case *c, dt_tensor **in, dt_tensor **out) {
  return dt__op_run(c->op, in, c->n_in, c->attrs, 0, out);
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
  fprintf(f, "\"op\":\"%s\",\"mesh\":", c->op_name);
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
  fprintf(f, "%s on mesh ", c->op_name);
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

#ifdef DT_HAVE_CJSON
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
    if (!plan_case_from_json(line, &c, &id, err, sizeof err)) {
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
    "  OP     any op of the list (dtensor info --ops prints their schemas), by its ATen name\n"
    "         (add.Tensor, sum.dim_IntList) or its base name (add, sum): the first overload whose\n"
    "         tensor count and attributes fit, so `add` with one tensor is add.Scalar and `sum`\n"
    "         with dim= is sum.dim_IntList; a tuple op (max.dim, split) shows its first output\n"
    "  ATTR   the op's arguments by their schema names: dim=1 | dim=0,1, keepdim=true,\n"
    "         size=6x5 (view), shape=-1 (reshape), dims=2,0,1 (permute), start_dim=, end_dim=\n"
    "         (flatten), dim0=, dim1= (transpose), other=2.5 (add.Scalar), normalized_shape=6\n"
    "         (layer_norm), ...; defaults as the schema gives them\n"
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
  if (!plan_parse_case(n, rest, &c, err, sizeof err)) {
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
  if (r.status && !json) fprintf(stderr, "dtensor plan: %s: %s\n", c.op_name, r.error);
  return r.bad_input ? 2 : r.status ? 1 : 0;
}
