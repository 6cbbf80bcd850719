/* dt_compile (issue 14): the seed scenario (an embedding of a Replicate or vocabulary-parallel
 * 202048x256 weight at four index shapes, zero recompiles, on 1, 2 and 4 ranks), one recompile
 * per guard kind with its reason, the eager fallback at the cache limit, eager's errors for
 * bad inputs, and random op chains compiled and run at three sizes, bitwise equal to eager.
 * Ranks are threads (dt_comm_spawn). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm_helpers.h"
#include "compile_helpers.h"
#include "log_capture.h"

/* ---- Helpers -------------------------------------------------------------------------- */

/* A local copy of the whole of t (t itself when local). */
static dt_status whole(dt_tensor *t, dt_tensor **out) {
  if (dt_tensor_is_distributed(t)) return dt_dist_full_tensor(t, out);
  *out = dt_tensor_retain(t);
  return DT_OK;
}

static dt_tensor *ramp(int ndim, const int64_t *shape, dt_dtype dtype, int salt) {
  dt_tensor *t = NULL;
  if (dt_empty(ndim, shape, dtype, &t)) return NULL;
  int64_t n = dt_tensor_numel(t);
  char *p = dt_tensor_data(t);
  for (int64_t i = 0; i < n; i++) {
    double v = (double)((i * 37 + salt * 11) % 23) / 8.0 - 1.25;
    dt__store_from_double(dtype, p + i * (int64_t)dt_dtype_size(dtype), v);
  }
  return t;
}

/* ---- The seed scenario ------------------------------------------------------------------- */

#define VOCAB 202048
#define EMBED 256

/* forward(idx) = embedding(idx, weight.to(float32)); also returns the converted weight so
 * that the test can see it shares the weight's storage. */
static dt_status seed_fn(void *user, int n_in, dt_tensor *const *in, int n_out, dt_tensor **out) {
  (void)user;
  (void)n_in;
  (void)n_out;
  dt_tensor *w32 = NULL;
  dt_status st = dt_to(in[0], DT_F32, &w32);
  if (!st) st = dt_embedding(w32, in[1], &out[0]);
  out[1] = w32;
  return st;
}

typedef struct seed_arg {
  dt_tensor *weight; /* the full weight, shared by every rank (read only) */
  bool vocab_parallel;
} seed_arg;

static dt_tensor *indices(int64_t rows, int64_t cols, int salt) {
  int64_t shape[2] = {rows, cols};
  dt_tensor *t = NULL;
  if (dt_empty(2, shape, DT_I64, &t)) return NULL;
  int64_t *p = dt_tensor_data(t);
  for (int64_t i = 0; i < rows * cols; i++) p[i] = (i * 7919 + salt * 104729) % VOCAB;
  return t;
}

static dt_status seed_rank(dt_comm *world, void *varg) {
  seed_arg *arg = varg;
  int size = dt_comm_size(world), rank = dt_comm_rank(world);
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, &size, NULL, &mesh));
  /* The weight: every rank wraps the one shared tensor (Replicate) or its row block. */
  dt_tensor *local = dt_tensor_retain(arg->weight);
  dt_placement place = dt_replicate();
  int64_t global[2] = {VOCAB, EMBED};
  if (arg->vocab_parallel) {
    dt_tensor_release(local);
    local = narrow_rows(arg->weight, rank * (VOCAB / size), VOCAB / size);
    place = dt_shard(0);
  }
  dt_dist_from_local_options fo = {.global_shape = global, .global_ndim = 2};
  dt_tensor *weight = NULL;
  RANK_OK(dt_dist_from_local(mesh, local, 1, &place, &fo, &weight));
  RANK_OK(dt_tensor_set_requires_grad(weight, true));
  /* Grad mode on, as in the seed: the compiled forward is recorded for autograd. */
  dt_compiled *compiled = NULL;
  dt_compile_options opt = {.dynamic = true};
  RANK_OK(dt_compile(seed_fn, NULL, 2, 2, &opt, &compiled));
  static const int64_t sizes[4][2] = {{2, 512}, {3, 100}, {1, 1}, {8, 2048}};
  for (int s = 0; s < 4; s++) {
    dt_tensor *idx_local = indices(sizes[s][0], sizes[s][1], s);
    dt_placement r = dt_replicate();
    dt_tensor *idx = NULL;
    RANK_OK(dt_dist_from_local(mesh, idx_local, 1, &r, NULL, &idx));
    dt_tensor *in[2] = {weight, idx}, *out[2] = {NULL, NULL}, *eager[2] = {NULL, NULL};
    RANK_OK(dt_compiled_call(compiled, 2, in, 2, out));
    RANK_OK(seed_fn(NULL, 2, in, 2, eager));
    /* to(float32) of a float32 weight is the weight: same storage, no copy. */
    dt_tensor *w_local = NULL;
    RANK_OK(dt_dist_to_local(out[1], &w_local));
    RANK_CHECK(dt_tensor_data(w_local) == dt_tensor_data(local),
               "size %d: to(float32) copied the weight", s);
    dt_tensor *a = NULL, *b = NULL;
    RANK_OK(whole(out[0], &a));
    RANK_OK(whole(eager[0], &b));
    RANK_CHECK(dt_tensor_shape(a)[0] == sizes[s][0] && dt_tensor_shape(a)[1] == sizes[s][1] &&
                   dt_tensor_shape(a)[2] == EMBED,
               "size %d: compiled output has the wrong shape", s);
    RANK_CHECK(bitwise_equal(a, b), "size %d: compiled differs from eager", s);
    /* One row checked against the weight itself. */
    const float *row =
        (const float *)dt_tensor_data(a) + (int64_t)(sizes[s][0] * sizes[s][1] - 1) * EMBED;
    int64_t last = ((sizes[s][0] * sizes[s][1] - 1) * 7919 + s * 104729) % VOCAB;
    const float *want = (const float *)dt_tensor_data(arg->weight) + last * EMBED;
    RANK_CHECK(memcmp(row, want, EMBED * sizeof(float)) == 0, "size %d: wrong row", s);
    dt_tensor_release(a);
    dt_tensor_release(b);
    dt_tensor_release(w_local);
    for (int k = 0; k < 2; k++) {
      dt_tensor_release(out[k]);
      dt_tensor_release(eager[k]);
    }
    dt_tensor_release(idx);
    dt_tensor_release(idx_local);
  }
  dt_compile_stats stats;
  RANK_OK(dt_compiled_stats(compiled, &stats));
  RANK_CHECK(stats.compiles == 1 && stats.recompiles == 0 && stats.calls == 4,
             "compiles %lld recompiles %lld calls %lld (first reason: %s)",
             (long long)stats.compiles, (long long)stats.recompiles, (long long)stats.calls,
             dt_compiled_recompile_reason(compiled, 0));
  char *text = NULL;
  RANK_OK(dt_compiled_to_string(compiled, 0, &text));
  RANK_CHECK(strstr(text, "embedding(") && strstr(text, "[s2, s3, s1]"), "graph text:\n%s", text);
  /* Sharding decided at compile time: a replicated embedding runs on the shards directly; the
   * vocabulary-parallel one needs its row window, so dispatch plans it on each call. */
  const char *how = arg->vocab_parallel ? "%embedding : [s2, s3, s1] planned per call (P(sum))"
                                        : "%embedding : [s2, s3, s1] on the shards (R)";
  RANK_CHECK(strstr(text, how) && strstr(text, "%to : [s0, s1] on the shards"), "no '%s' in\n%s",
             how, text);
  /* This rank's rows of the vocabulary-parallel weight, as an expression of s0. */
  if (arg->vocab_parallel && rank > 0) {
    char want[160];
    if (rank == 1)
      snprintf(want, sizeof want, "(S(0)) local [max(min(ceil(s0/%d), s0 - ceil(s0/%d)), 0), s1]",
               size, size);
    else
      snprintf(want, sizeof want,
               "(S(0)) local [max(min(ceil(s0/%d), s0 - %d*ceil(s0/%d)), 0), s1]", size, rank,
               size);
    RANK_CHECK(strstr(text, want), "rank %d: no '%s' in\n%s", rank, want, text);
  }
  dt_free(text);
  dt_compiled_destroy(compiled);
  dt_tensor_release(weight);
  dt_tensor_release(local);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

static dt_tensor *seed_weight(void) {
  int64_t shape[2] = {VOCAB, EMBED};
  dt_tensor *w = NULL;
  if (dt_empty(2, shape, DT_F32, &w)) return NULL;
  float *p = dt_tensor_data(w);
  for (int64_t i = 0; i < (int64_t)VOCAB * EMBED; i++) p[i] = (float)(i % 1009) * 0.25f;
  return w;
}

static void run_seed(int world, bool vocab_parallel) {
  seed_arg arg = {.weight = seed_weight(), .vocab_parallel = vocab_parallel};
  cr_assert_not_null(arg.weight);
  SPAWN_OK(world, seed_rank, &arg);
  dt_tensor_release(arg.weight);
}

Test(compile_seed, replicate_1_rank) { run_seed(1, false); }
Test(compile_seed, replicate_2_ranks) { run_seed(2, false); }
Test(compile_seed, replicate_4_ranks) { run_seed(4, false); }
Test(compile_seed, vocab_parallel_2_ranks) { run_seed(2, true); }
Test(compile_seed, vocab_parallel_4_ranks) { run_seed(4, true); }

/* ---- Guards: each kind, one recompile with its reason ---------------------------------- */

static dt_status add_fn(void *user, int n_in, dt_tensor *const *in, int n_out, dt_tensor **out) {
  (void)user;
  (void)n_in;
  (void)n_out;
  return dt_add(in[0], in[1], &out[0]);
}

static dt_status relu_fn(void *user, int n_in, dt_tensor *const *in, int n_out, dt_tensor **out) {
  (void)user;
  (void)n_in;
  (void)n_out;
  return dt_relu(in[0], &out[0]);
}

/* The first of chunk(x, 4, dim 0). */
static dt_status chunk_fn(void *user, int n_in, dt_tensor *const *in, int n_out, dt_tensor **out) {
  (void)user;
  (void)n_in;
  (void)n_out;
  dt_tensor *pieces[4] = {0};
  int n = 0;
  dt_status st = dt_chunk(in[0], 4, 0, pieces, 4, &n);
  if (!st) st = dt_relu(pieces[0], &out[0]);
  for (int k = 0; k < n; k++) dt_tensor_release(pieces[k]);
  return st;
}

/* x.view(-1, 4) summed over its rows. */
static dt_status view_fn(void *user, int n_in, dt_tensor *const *in, int n_out, dt_tensor **out) {
  (void)user;
  (void)n_in;
  (void)n_out;
  dt_tensor *v = NULL;
  dt_status st = dt_view(in[0], 2, (int64_t[]){-1, 4}, &v);
  if (!st) st = dt_sum_dims(v, 1, (int64_t[]){0}, false, &out[0]);
  dt_tensor_release(v);
  return st;
}

/* Calls c on the inputs and checks the result against fn run eagerly. */
static void call_and_check(dt_compiled *c, dt_compile_fn fn, int n_in, dt_tensor **in) {
  dt_tensor *out = NULL, *eager = NULL;
  cr_assert_eq(dt_compiled_call(c, n_in, in, 1, &out), DT_OK, "%s", dt_last_error());
  cr_assert_eq(fn(NULL, n_in, in, 1, &eager), DT_OK, "%s", dt_last_error());
  cr_assert(bitwise_equal(out, eager), "compiled differs from eager");
  dt_tensor_release(out);
  dt_tensor_release(eager);
}

static void expect_one_recompile(dt_compiled *c, const char *reason_part) {
  dt_compile_stats s;
  cr_assert_eq(dt_compiled_stats(c, &s), DT_OK);
  cr_assert_eq(s.recompiles, 1, "recompiles %lld", (long long)s.recompiles);
  const char *why = dt_compiled_recompile_reason(c, 0);
  cr_assert(why && strstr(why, reason_part), "reason '%s' lacks '%s'", why ? why : "(none)",
            reason_part);
  cr_assert_null(dt_compiled_recompile_reason(c, 1));
}

/* The stderr of one compiled function called on float32 then float64 (one recompile), with
 * DT_COMPILE_LOG set to value, into text. */
static void stderr_of_a_recompile(const char *value, char *text, size_t size) {
  setenv("DT_COMPILE_LOG", value, 1);
  fflush(stderr);
  FILE *tmp = tmpfile();
  cr_assert_not_null(tmp);
  int saved = dup(2);
  cr_assert(saved >= 0 && dup2(fileno(tmp), 2) >= 0);
  dt_compiled *c = NULL;
  cr_assert_eq(dt_compile(relu_fn, NULL, 1, 1, NULL, &c), DT_OK, "%s", dt_last_error());
  dt_tensor *a = ramp(2, (int64_t[]){3, 4}, DT_F32, 1), *d = ramp(2, (int64_t[]){3, 4}, DT_F64, 3);
  call_and_check(c, relu_fn, 1, &a);
  call_and_check(c, relu_fn, 1, &d);
  expect_one_recompile(c, "dtype is float64");
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  rewind(tmp);
  size_t n = fread(text, 1, size - 1, tmp);
  text[n] = '\0';
  fclose(tmp);
  dt_tensor_release(a);
  dt_tensor_release(d);
  dt_compiled_destroy(c);
  unsetenv("DT_COMPILE_LOG");
}

/* DT_COMPILE_LOG=recompiles prints each recompile; other values (it matched any value holding
 * "recompiles") print nothing and are reported once through the log callback. */
Test(compile_log, only_the_documented_value_logs_recompiles) {
  char text[1024];
  log_capture_start();
  stderr_of_a_recompile("recompiles", text, sizeof text);
  cr_assert(strstr(text, "dtensor compile: recompile 1: ") && strstr(text, "float64"), "'%s'",
            text);
  cr_assert_eq(warnings, 0, "%s", last_warning);
  const char *others[] = {"norecompiles", "recompiles,graph_breaks", "RECOMPILES", "1"};
  for (int i = 0; i < 4; i++) {
    for (int twice = 0; twice < 2; twice++) {
      stderr_of_a_recompile(others[i], text, sizeof text);
      cr_assert(!strstr(text, "recompile 1"), "%s: '%s'", others[i], text);
    }
    cr_assert_eq(warnings, i + 1, "%s: %d warnings", others[i], warnings);
    char want[64];
    snprintf(want, sizeof want, "DT_COMPILE_LOG=\"%s\" is not one of recompiles", others[i]);
    cr_assert(strstr(last_warning, want), "%s", last_warning);
  }
  log_capture_stop();
}

Test(compile_guards, dtype) {
  dt_compiled *c = NULL;
  cr_assert_eq(dt_compile(relu_fn, NULL, 1, 1, &(dt_compile_options){.dynamic = true}, &c), DT_OK);
  dt_tensor *a = ramp(2, (int64_t[]){3, 4}, DT_F32, 1), *b = ramp(2, (int64_t[]){5, 2}, DT_F32, 2);
  dt_tensor *d = ramp(2, (int64_t[]){3, 4}, DT_F64, 3);
  call_and_check(c, relu_fn, 1, &a);
  call_and_check(c, relu_fn, 1, &b); /* dynamic: no recompile */
  call_and_check(c, relu_fn, 1, &d);
  call_and_check(c, relu_fn, 1, &d);
  expect_one_recompile(c, "dtype is float64");
  dt_tensor_release(a);
  dt_tensor_release(b);
  dt_tensor_release(d);
  dt_compiled_destroy(c);
}

Test(compile_guards, static_dim) {
  dt_compile_mark marks[] = {{.input = 0, .dim = 1, .dynamic = false}};
  dt_compile_options o = {.dynamic = true, .n_marks = 1, .marks = marks};
  dt_compiled *c = NULL;
  cr_assert_eq(dt_compile(relu_fn, NULL, 1, 1, &o, &c), DT_OK);
  dt_tensor *a = ramp(2, (int64_t[]){3, 4}, DT_F32, 1), *b = ramp(2, (int64_t[]){6, 4}, DT_F32, 2);
  dt_tensor *d = ramp(2, (int64_t[]){3, 5}, DT_F32, 3);
  call_and_check(c, relu_fn, 1, &a);
  call_and_check(c, relu_fn, 1, &b);
  call_and_check(c, relu_fn, 1, &d);
  expect_one_recompile(c, "input 0: dim 1 is 5, static in the trace at 4");
  dt_tensor_release(a);
  dt_tensor_release(b);
  dt_tensor_release(d);
  dt_compiled_destroy(c);
}

Test(compile_guards, broadcast_size_one) {
  dt_compiled *c = NULL;
  cr_assert_eq(dt_compile(add_fn, NULL, 2, 1, &(dt_compile_options){.dynamic = true}, &c), DT_OK);
  dt_tensor *x = ramp(2, (int64_t[]){3, 4}, DT_F32, 1), *y1 = ramp(2, (int64_t[]){1, 4}, DT_F32, 2);
  dt_tensor *x5 = ramp(2, (int64_t[]){5, 4}, DT_F32, 3),
            *y5 = ramp(2, (int64_t[]){5, 4}, DT_F32, 4);
  call_and_check(c, add_fn, 2, (dt_tensor *[]){x, y1});
  call_and_check(c, add_fn, 2, (dt_tensor *[]){x5, y1}); /* still a broadcast */
  call_and_check(c, add_fn, 2, (dt_tensor *[]){x5, y5});
  expect_one_recompile(c, "s2 == 1 (add.Tensor: broadcast (size 1) of dim 0) failed");
  dt_tensor_release(x);
  dt_tensor_release(y1);
  dt_tensor_release(x5);
  dt_tensor_release(y5);
  dt_compiled_destroy(c);
}

Test(compile_guards, equal_sizes) {
  dt_compiled *c = NULL;
  cr_assert_eq(dt_compile(add_fn, NULL, 2, 1, &(dt_compile_options){.dynamic = true}, &c), DT_OK);
  dt_tensor *x = ramp(2, (int64_t[]){3, 4}, DT_F32, 1), *y = ramp(2, (int64_t[]){3, 4}, DT_F32, 2);
  dt_tensor *x7 = ramp(2, (int64_t[]){7, 4}, DT_F32, 3),
            *y1 = ramp(2, (int64_t[]){1, 4}, DT_F32, 4);
  call_and_check(c, add_fn, 2, (dt_tensor *[]){x, y});
  call_and_check(c, add_fn, 2, (dt_tensor *[]){x7, x7});
  call_and_check(c, add_fn, 2, (dt_tensor *[]){x7, y1});
  expect_one_recompile(c, "s0 == s2 (add.Tensor: broadcast of dim 0) failed: 7 != 1");
  dt_tensor_release(x);
  dt_tensor_release(y);
  dt_tensor_release(x7);
  dt_tensor_release(y1);
  dt_compiled_destroy(c);
}

Test(compile_guards, size_against_constant) {
  dt_compiled *c = NULL;
  cr_assert_eq(dt_compile(chunk_fn, NULL, 1, 1, &(dt_compile_options){.dynamic = true}, &c), DT_OK);
  dt_tensor *a = ramp(2, (int64_t[]){8, 3}, DT_F32, 1), *b = ramp(2, (int64_t[]){13, 3}, DT_F32, 2);
  dt_tensor *d = ramp(2, (int64_t[]){6, 3}, DT_F32, 3);
  call_and_check(c, chunk_fn, 1, &a);
  call_and_check(c, chunk_fn, 1, &b); /* 4 pieces of 4 */
  call_and_check(c, chunk_fn, 1, &d); /* 3 pieces of 2 */
  expect_one_recompile(c, "(chunk: chunk (number of pieces) of dim 0) failed: 3 != 4");
  dt_tensor_release(a);
  dt_tensor_release(b);
  dt_tensor_release(d);
  dt_compiled_destroy(c);
}

/* A divisibility a view needed: kept as a guard; a size that breaks it gives eager's error
 * (the view's), not a cached variant. */
Test(compile_guards, divisibility) {
  dt_compiled *c = NULL;
  cr_assert_eq(dt_compile(view_fn, NULL, 1, 1, &(dt_compile_options){.dynamic = true}, &c), DT_OK);
  dt_tensor *a = ramp(2, (int64_t[]){2, 6}, DT_F32, 1), *b = ramp(2, (int64_t[]){3, 4}, DT_F32, 2);
  dt_tensor *bad = ramp(2, (int64_t[]){3, 5}, DT_F32, 3);
  call_and_check(c, view_fn, 1, &a);
  call_and_check(c, view_fn, 1, &b);
  char *text = NULL;
  cr_assert_eq(dt_compiled_to_string(c, 0, &text), DT_OK);
  cr_assert(strstr(text, "s0*s1 divisible by 4"), "%s", text);
  dt_free(text);
  dt_tensor *out = NULL;
  dt_status eager = view_fn(NULL, 1, &bad, 1, &out);
  char eager_msg[512];
  snprintf(eager_msg, sizeof eager_msg, "%s", dt_last_error());
  cr_assert_neq(eager, DT_OK);
  cr_assert_eq(dt_compiled_call(c, 1, &bad, 1, &out), eager);
  cr_assert_str_eq(dt_last_error(), eager_msg);
  cr_assert_null(out);
  dt_compile_stats s;
  dt_compiled_stats(c, &s);
  cr_assert_eq(s.variants, 1);
  cr_assert_eq(s.failed_traces, 1);
  dt_tensor_release(a);
  dt_tensor_release(b);
  dt_tensor_release(bad);
  dt_compiled_destroy(c);
}

static dt_status placement_rank(dt_comm *world, void *arg) {
  (void)arg;
  int size = dt_comm_size(world);
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, &size, NULL, &mesh));
  dt_tensor *full = ramp(2, (int64_t[]){8, 4}, DT_F32, 5), *x = NULL, *y = NULL;
  RANK_OK(dt_dist_distribute_tensor(mesh, full, 1, (dt_placement[]){dt_replicate()}, &x));
  RANK_OK(dt_dist_distribute_tensor(mesh, full, 1, (dt_placement[]){dt_shard(0)}, &y));
  dt_compiled *c = NULL;
  RANK_OK(dt_compile(relu_fn, NULL, 1, 1, &(dt_compile_options){.dynamic = true}, &c));
  dt_tensor *out = NULL, *ins[3] = {x, y, y};
  for (int k = 0; k < 3; k++) {
    RANK_OK(dt_compiled_call(c, 1, &ins[k], 1, &out));
    RANK_CHECK(dt_dist_placements(out)[0].kind == dt_dist_placements(ins[k])[0].kind,
               "call %d: placement", k);
    dt_tensor_release(out);
  }
  dt_compile_stats s;
  RANK_OK(dt_compiled_stats(c, &s));
  const char *why = dt_compiled_recompile_reason(c, 0);
  RANK_CHECK(s.recompiles == 1 && why &&
                 strstr(why, "placement S(0) on mesh dim 0, the trace had R"),
             "recompiles %lld, reason %s", (long long)s.recompiles, why ? why : "(none)");
  dt_compiled_destroy(c);
  dt_tensor_release(x);
  dt_tensor_release(y);
  dt_tensor_release(full);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(compile_guards, placement) { SPAWN_OK(2, placement_rank, NULL); }

Test(compile_guards, cache_limit_falls_back_to_eager) {
  dt_compiled *c = NULL;
  dt_compile_options o = {.dynamic = true, .cache_limit = 2};
  cr_assert_eq(dt_compile(relu_fn, NULL, 1, 1, &o, &c), DT_OK);
  log_capture_start();
  static const dt_dtype dtypes[] = {DT_F32, DT_F64, DT_BF16, DT_BF16, DT_F32};
  for (int k = 0; k < 5; k++) {
    dt_tensor *x = ramp(2, (int64_t[]){3, 4}, dtypes[k], k);
    call_and_check(c, relu_fn, 1, &x);
    dt_tensor_release(x);
  }
  log_capture_stop();
  dt_compile_stats s;
  dt_compiled_stats(c, &s);
  cr_assert_eq(s.variants, 2);
  cr_assert_eq(s.eager_calls, 2);
  cr_assert_eq(warnings, 1);
  cr_assert(strstr(last_warning, "cache limit"), "%s", last_warning);
  dt_compiled_destroy(c);
}

/* ---- Errors are eager's ----------------------------------------------------------------- */

Test(compile_errors, bad_inputs) {
  dt_compiled *c = NULL;
  cr_assert_eq(dt_compile(NULL, NULL, 1, 1, NULL, &c), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "compile: fn is NULL"));
  cr_assert_eq(dt_compile(seed_fn, NULL, 2, 2, &(dt_compile_options){.dynamic = true}, &c), DT_OK);
  dt_tensor *w = ramp(2, (int64_t[]){10, 4}, DT_F32, 1);
  dt_tensor *idx = indices(2, 3, 0), *fidx = ramp(2, (int64_t[]){2, 3}, DT_F32, 2);
  dt_tensor *out[2];
  /* Wrong argument count: an error naming the counts. */
  cr_assert_eq(dt_compiled_call(c, 1, (dt_tensor *[]){w}, 2, out), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "1 inputs and 2 outputs given, the function takes 2 and 2"),
            "%s", dt_last_error());
  /* Indices beyond the vocabulary of 10 rows, then float indices: eager's errors, each time. */
  int64_t *p = dt_tensor_data(idx);
  for (int k = 0; k < 6; k++) p[k] = k;
  cr_assert_eq(dt_compiled_call(c, 2, (dt_tensor *[]){w, idx}, 2, out), DT_OK);
  dt_tensor_release(out[0]);
  dt_tensor_release(out[1]);
  for (int round = 0; round < 3; round++) {
    dt_tensor *e[2] = {0};
    dt_status want = seed_fn(NULL, 2, (dt_tensor *[]){w, fidx}, 2, e);
    dt_tensor_release(e[0]);
    dt_tensor_release(e[1]);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", dt_last_error());
    cr_assert_neq(want, DT_OK);
    cr_assert_eq(dt_compiled_call(c, 2, (dt_tensor *[]){w, fidx}, 2, out), want);
    cr_assert_str_eq(dt_last_error(), msg);
    cr_assert_null(out[0]);
    cr_assert_null(out[1]);
  }
  dt_compile_stats s;
  dt_compiled_stats(c, &s);
  cr_assert_eq(s.variants, 1);
  cr_assert_eq(s.recompiles, 0);
  cr_assert_eq(s.failed_traces, 3);
  /* An input that requires grad while grad mode is on: the call is recorded for autograd
   * (tests/test_compile_grad_call.c checks the gradients). */
  cr_assert_eq(dt_tensor_set_requires_grad(w, true), DT_OK);
  cr_assert_eq(dt_compiled_call(c, 2, (dt_tensor *[]){w, idx}, 2, out), DT_OK, "%s",
               dt_last_error());
  cr_assert(dt_tensor_requires_grad(out[0]) && dt_tensor_requires_grad(out[1]));
  dt_tensor_release(out[0]);
  dt_tensor_release(out[1]);
  dt_tensor_release(w);
  dt_tensor_release(idx);
  dt_tensor_release(fidx);
  dt_compiled_destroy(c);
}

/* ---- Random programs ---------------------------------------------------------------------- */

/* A program: a chain of steps over x [s0, 8] with a second input y of x's shape and a
 * constant 8x8 weight. Every step keeps the shape [s0, 8]. */
#define MAX_STEPS 8
typedef struct program {
  int n_steps;
  int steps[MAX_STEPS];
  dt_tensor *weight; /* captured: becomes a constant of the trace */
} program;

enum {
  STEP_RELU,
  STEP_TANH,
  STEP_ADD_Y,
  STEP_MUL_Y,
  STEP_SOFTMAX,
  STEP_LINEAR,
  STEP_SUM_ADD,
  STEP_CAT_CHUNK,
  STEP_TRANSPOSE_BACK,
  STEP_DIST_COUNT, /* the steps below run on local programs only */
  STEP_VIEW_ROUNDTRIP = STEP_DIST_COUNT,
  STEP_MEAN_UNSQUEEZE_ADD,
  STEP_TRANSPOSE_RESHAPE,
  STEP_COUNT
};

static dt_status program_fn(void *user, int n_in, dt_tensor *const *in, int n_out,
                            dt_tensor **out) {
  (void)n_in;
  (void)n_out;
  const program *p = user;
  dt_tensor *cur = dt_tensor_retain(in[0]), *next = NULL, *tmp = NULL;
  dt_status st = DT_OK;
  for (int k = 0; k < p->n_steps && !st; k++) {
    switch (p->steps[k]) {
    case STEP_RELU: st = dt_relu(cur, &next); break;
    case STEP_TANH: st = dt_tanh(cur, &next); break;
    case STEP_ADD_Y: st = dt_add(cur, in[1], &next); break;
    case STEP_MUL_Y: st = dt_mul(cur, in[1], &next); break;
    case STEP_SOFTMAX: st = dt_softmax(cur, 1, &next); break;
    case STEP_LINEAR: st = dt_linear(cur, p->weight, NULL, &next); break;
    case STEP_SUM_ADD:
      st = dt_sum_dims(cur, 1, (int64_t[]){1}, true, &tmp);
      if (!st) st = dt_add(cur, tmp, &next);
      break;
    case STEP_CAT_CHUNK: {
      dt_tensor *pieces[2] = {0};
      int n = 0;
      st = dt_cat(2, (dt_tensor *[]){cur, cur}, 0, &tmp);
      if (!st) st = dt_chunk(tmp, 2, 0, pieces, 2, &n);
      if (!st) st = dt_neg(pieces[1], &next);
      for (int i = 0; i < n; i++) dt_tensor_release(pieces[i]);
      break;
    }
    case STEP_TRANSPOSE_BACK:
      st = dt_transpose(cur, 0, 1, &tmp);
      if (!st) st = dt_transpose(tmp, 1, 0, &next);
      break;
    case STEP_VIEW_ROUNDTRIP: /* [s0, 8] -> [8*s0] -> [s0, 8]: floor(8*s0 / 8) is s0 */
      st = dt_view(cur, 1, (int64_t[]){-1}, &tmp);
      if (!st) st = dt_view(tmp, 2, (int64_t[]){-1, 8}, &next);
      break;
    case STEP_MEAN_UNSQUEEZE_ADD: { /* cur + mean(cur, 0)[None]: a constant-1 broadcast */
      dt_tensor *m = NULL;
      st = dt_mean_dims(cur, 1, (int64_t[]){0}, false, &m);
      if (!st) st = dt_unsqueeze(m, 0, &tmp);
      if (!st) st = dt_add(cur, tmp, &next);
      dt_tensor_release(m);
      break;
    }
    case STEP_TRANSPOSE_RESHAPE: /* a copying reshape of a transposed value */
      st = dt_transpose(cur, 0, 1, &tmp);
      if (!st) st = dt_reshape(tmp, 2, (int64_t[]){-1, 8}, &next);
      break;
    }
    dt_tensor_release(tmp);
    tmp = NULL;
    dt_tensor_release(cur);
    cur = next;
    next = NULL;
  }
  if (st) {
    dt_tensor_release(cur);
    return st;
  }
  out[0] = cur;
  return DT_OK;
}

typedef struct random_arg {
  unsigned seed;
  int programs;
} random_arg;

static dt_tensor *placed(dt_mesh *mesh, dt_tensor *full, dt_placement p) {
  dt_tensor *t = NULL;
  if (!mesh) return dt_tensor_retain(full);
  if (dt_dist_distribute_tensor(mesh, full, 1, &p, &t)) return NULL;
  return t;
}

static dt_status random_rank(dt_comm *world, void *varg) {
  random_arg *arg = varg;
  dt_mesh *mesh = NULL;
  if (world) {
    int size = dt_comm_size(world);
    RANK_OK(dt_mesh_create(world, 1, &size, NULL, &mesh));
  }
  unsigned rng = arg->seed; /* the same on every rank: the ranks run the same programs */
  for (int pi = 0; pi < arg->programs; pi++) {
    program p = {.n_steps = 1 + (int)((rng = rng * 1103515245u + 12345u) >> 16) % MAX_STEPS};
    for (int k = 0; k < p.n_steps; k++)
      p.steps[k] =
          (int)((rng = rng * 1103515245u + 12345u) >> 16) % (mesh ? STEP_DIST_COUNT : STEP_COUNT);
    dt_tensor *wfull = ramp(2, (int64_t[]){8, 8}, DT_F32, pi);
    static const dt_placement choices[3] = {{DT_REPLICATE, 0, DT_REDUCE_SUM, 0},
                                            {DT_SHARD, 0, DT_REDUCE_SUM, 0},
                                            {DT_SHARD, 1, DT_REDUCE_SUM, 0}};
    dt_placement px = choices[((rng = rng * 1103515245u + 12345u) >> 16) % 3];
    dt_placement py = choices[((rng = rng * 1103515245u + 12345u) >> 16) % 3];
    p.weight = placed(mesh, wfull, choices[0]);
    dt_compiled *c = NULL;
    RANK_OK(dt_compile(program_fn, &p, 2, 1, &(dt_compile_options){.dynamic = true}, &c));
    static const int64_t sizes[3] = {4, 7, 10};
    for (int s = 0; s < 3; s++) {
      dt_tensor *xf = ramp(2, (int64_t[]){sizes[s], 8}, DT_F32, 3 * pi + s);
      dt_tensor *yf = ramp(2, (int64_t[]){sizes[s], 8}, DT_F32, 3 * pi + s + 1);
      dt_tensor *in[2] = {placed(mesh, xf, px), placed(mesh, yf, py)};
      dt_tensor *out = NULL, *eager = NULL, *a = NULL, *b = NULL;
      RANK_OK(dt_compiled_call(c, 2, in, 1, &out));
      RANK_OK(program_fn(&p, 2, in, 1, &eager));
      RANK_OK(whole(out, &a));
      RANK_OK(whole(eager, &b));
      RANK_CHECK(bitwise_equal(a, b), "program %d (%d steps, first %d) size %lld differs", pi,
                 p.n_steps, p.steps[0], (long long)sizes[s]);
      dt_tensor *list[] = {a, b, out, eager, in[0], in[1], xf, yf};
      for (int k = 0; k < 8; k++) dt_tensor_release(list[k]);
    }
    dt_compile_stats st;
    RANK_OK(dt_compiled_stats(c, &st));
    RANK_CHECK(st.recompiles == 0, "program %d: %lld recompiles: %s", pi, (long long)st.recompiles,
               dt_compiled_recompile_reason(c, 0));
    dt_compiled_destroy(c);
    dt_tensor_release(p.weight);
    dt_tensor_release(wfull);
  }
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(compile_random, local_programs) {
  random_arg arg = {.seed = 12345, .programs = 40};
  cr_assert_eq(random_rank(NULL, &arg), DT_OK, "%s", dt_last_error());
}

Test(compile_random, distributed_programs_2_ranks) {
  random_arg arg = {.seed = 777, .programs = 25};
  SPAWN_OK(2, random_rank, &arg);
}

/* ---- Planned buffers ---------------------------------------------------------------------- */

/* relu(x * y) + x, returned through a transpose (a view of the planned add). */
static dt_status view_out_fn(void *user, int n_in, dt_tensor *const *in, int n_out,
                             dt_tensor **out) {
  (void)user;
  (void)n_in;
  (void)n_out;
  dt_tensor *m = NULL, *r = NULL, *a = NULL;
  dt_status st = dt_mul(in[0], in[1], &m);
  if (!st) st = dt_relu(m, &r);
  if (!st) st = dt_add(r, in[0], &a);
  if (!st) st = dt_transpose(a, 0, 1, &out[0]);
  dt_tensor_release(m);
  dt_tensor_release(r);
  dt_tensor_release(a);
  return st;
}

/* A value that reaches the outputs (here through a view) must not live in a reused buffer:
 * the first call's result stays intact after later calls at the same and other sizes. */
Test(compile_buffers, outputs_survive_later_calls) {
  dt_compiled *c = NULL;
  cr_assert_eq(dt_compile(view_out_fn, NULL, 2, 1, &(dt_compile_options){.dynamic = true}, &c),
               DT_OK);
  dt_tensor *x = ramp(2, (int64_t[]){5, 3}, DT_F32, 1), *y = ramp(2, (int64_t[]){5, 3}, DT_F32, 2);
  dt_tensor *x2 = ramp(2, (int64_t[]){5, 3}, DT_F32, 7),
            *y2 = ramp(2, (int64_t[]){5, 3}, DT_F32, 9);
  dt_tensor *x3 = ramp(2, (int64_t[]){9, 3}, DT_F32, 4),
            *y3 = ramp(2, (int64_t[]){9, 3}, DT_F32, 5);
  dt_tensor *first = NULL, *eager = NULL, *later = NULL;
  cr_assert_eq(dt_compiled_call(c, 2, (dt_tensor *[]){x, y}, 1, &first), DT_OK);
  cr_assert_eq(view_out_fn(NULL, 2, (dt_tensor *[]){x, y}, 1, &eager), DT_OK);
  for (int k = 0; k < 3; k++) {
    dt_tensor *in[2] = {k == 1 ? x3 : x2, k == 1 ? y3 : y2};
    cr_assert_eq(dt_compiled_call(c, 2, in, 1, &later), DT_OK, "%s", dt_last_error());
    dt_tensor *e = NULL;
    cr_assert_eq(view_out_fn(NULL, 2, in, 1, &e), DT_OK);
    cr_assert(bitwise_equal(later, e), "call %d differs from eager", k);
    dt_tensor_release(e);
    dt_tensor_release(later);
  }
  cr_assert(bitwise_equal(first, eager), "a later call overwrote the first call's output");
  /* The value checked by hand: element (0, 1) of the transposed output is at x[1][0]. */
  float x10 = ((float *)dt_tensor_data(x))[3], y10 = ((float *)dt_tensor_data(y))[3];
  dt_tensor *cf = NULL;
  dt_contiguous(first, &cf);
  cr_assert_float_eq(((float *)dt_tensor_data(cf))[1], fmaxf(x10 * y10, 0.f) + x10, 1e-6);
  dt_compile_stats s;
  dt_compiled_stats(c, &s);
  cr_assert_eq(s.compiles, 1);
  dt_tensor *list[] = {cf, first, eager, x, y, x2, y2, x3, y3};
  for (int k = 0; k < 9; k++) dt_tensor_release(list[k]);
  dt_compiled_destroy(c);
}
