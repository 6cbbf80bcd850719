/* dt_compile and sizes the compiled function reads as plain numbers: a function that reads a
 * symbolic dim through the public accessors (dt_tensor_size, dt_tensor_shape, dt_tensor_numel,
 * dt_dist_global_shape) and passes the number on bakes it into the trace, so the trace guards
 * that dim to its traced size (PyTorch specializes a SymInt read as an int) and another size
 * traces again. Each case runs at several shapes and checks the values against eager and
 * against the input itself (a reshape keeps the elements in order), the recompile count and
 * its reason; dims the function does not read stay symbolic; at the cache limit the call runs
 * eagerly with the right values. The distributed case runs 2 ranks as threads. */
#include <criterion/criterion.h>
#include <string.h>

#include "comm_helpers.h"
#include "compile_helpers.h"

typedef enum reader { READ_SIZE, READ_SHAPE, READ_NUMEL, READ_OUTPUT_SIZE } reader;

/* out[0] = x reshaped with a size the function reads as a number:
 * READ_SIZE: [-1, size(x, 1)]; READ_SHAPE: [-1, shape(x)[1]]; READ_NUMEL: [numel(x)];
 * READ_OUTPUT_SIZE: y = x + x, then y reshaped [size(y, 0), -1] (an op's output read). */
static dt_status reshape_fn(void *user, int n_in, dt_tensor *const *in, int n_out,
                            dt_tensor **out) {
  (void)n_in, (void)n_out;
  dt_tensor *x = in[0];
  switch (*(const reader *)user) {
  case READ_SIZE: return dt_reshape(x, 2, (int64_t[]){-1, dt_tensor_size(x, 1)}, &out[0]);
  case READ_SHAPE: return dt_reshape(x, 2, (int64_t[]){-1, dt_tensor_shape(x)[1]}, &out[0]);
  case READ_NUMEL: return dt_reshape(x, 1, (int64_t[]){dt_tensor_numel(x)}, &out[0]);
  case READ_OUTPUT_SIZE: {
    dt_tensor *y = NULL;
    dt_status st = dt_add(x, x, &y);
    if (!st) st = dt_reshape(y, 2, (int64_t[]){dt_tensor_size(y, 0), -1}, &out[0]);
    dt_tensor_release(y);
    return st;
  }
  }
  return DT_ERR_INVALID;
}

/* The compiled call at [rows, cols]: equal to eager bitwise, and to the reference: x's
 * elements in order (twice them for READ_OUTPUT_SIZE) in the shape the reshape asked for. */
static void check_call(dt_compiled *c, reader r, int64_t rows, int64_t cols, int salt) {
  dt_tensor *x = ramp_f32(2, (int64_t[]){rows, cols}, salt), *got = NULL, *eager = NULL;
  cr_assert_not_null(x);
  cr_assert_eq(dt_compiled_call(c, 1, &x, 1, &got), DT_OK, "[%lld, %lld]: %s", (long long)rows,
               (long long)cols, dt_last_error());
  cr_assert_eq(reshape_fn(&r, 1, &x, 1, &eager), DT_OK, "eager: %s", dt_last_error());
  cr_assert(bitwise_equal(got, eager), "[%lld, %lld]: compiled differs from eager", (long long)rows,
            (long long)cols);
  int64_t want[2] = {rows, cols};
  int want_ndim = r == READ_NUMEL ? 1 : 2;
  if (r == READ_NUMEL) want[0] = rows * cols;
  cr_assert_eq(dt_tensor_ndim(got), want_ndim);
  for (int d = 0; d < want_ndim; d++)
    cr_assert_eq(dt_tensor_size(got, d), want[d], "[%lld, %lld]: dim %d is %lld, expected %lld",
                 (long long)rows, (long long)cols, d, (long long)dt_tensor_size(got, d),
                 (long long)want[d]);
  dt_tensor *dense = NULL;
  cr_assert_eq(dt_contiguous(got, &dense), DT_OK);
  const float *g = dt_tensor_data(dense), *xs = dt_tensor_data(x);
  for (int64_t i = 0; i < rows * cols; i++) {
    float w = r == READ_OUTPUT_SIZE ? xs[i] + xs[i] : xs[i];
    cr_assert_eq(g[i], w, "[%lld, %lld]: element %lld is %g, expected %g", (long long)rows,
                 (long long)cols, (long long)i, (double)g[i], (double)w);
  }
  dt_tensor_release(dense);
  dt_tensor_release(got);
  dt_tensor_release(eager);
  dt_tensor_release(x);
}

static dt_compile_stats stats_of(const dt_compiled *c) {
  dt_compile_stats s;
  cr_assert_eq(dt_compiled_stats(c, &s), DT_OK);
  return s;
}

/* The case: traced at [4, 6], called at [3, 4], the compiled call returned [2, 6]. Now
 * dim 1 is guarded (one recompile, at [3, 4]) and dim 0 stays symbolic ([5, 6] and [2, 4] reuse
 * the two variants). */
static void check_dim1_reader(reader r, const char *accessor) {
  dt_compile_options opt = {.dynamic = true};
  dt_compiled *c = NULL;
  cr_assert_eq(dt_compile(reshape_fn, &r, 1, 1, &opt, &c), DT_OK);
  static const int64_t shapes[][2] = {{4, 6}, {3, 4}, {5, 6}, {2, 4}, {4, 6}, {7, 9}};
  static const int64_t recompiles_after[] = {0, 1, 1, 1, 1, 2};
  for (int k = 0; k < 6; k++) {
    check_call(c, r, shapes[k][0], shapes[k][1], k + 1);
    dt_compile_stats s = stats_of(c);
    cr_assert_eq(s.recompiles, recompiles_after[k], "%s, call %d: %lld recompiles", accessor, k,
                 (long long)s.recompiles);
  }
  const char *why = dt_compiled_recompile_reason(c, 0);
  cr_assert_not_null(why);
  cr_assert(strstr(why, accessor) && strstr(why, "dim 1") && strstr(why, "read as a number"),
            "reason: %s", why);
  cr_assert_eq(stats_of(c).variants, 3);
  dt_compiled_destroy(c);
}

Test(compile_size_guards, size_read_guards_its_dim) {
  check_dim1_reader(READ_SIZE, "dt_tensor_size");
}

Test(compile_size_guards, shape_read_guards_every_dim) {
  /* dt_tensor_shape hands out every size: each dim is guarded, so [5, 6] recompiles too. */
  reader r = READ_SHAPE;
  dt_compile_options opt = {.dynamic = true};
  dt_compiled *c = NULL;
  cr_assert_eq(dt_compile(reshape_fn, &r, 1, 1, &opt, &c), DT_OK);
  static const int64_t shapes[][2] = {{4, 6}, {3, 4}, {5, 6}, {4, 6}, {3, 4}};
  for (int k = 0; k < 5; k++) check_call(c, r, shapes[k][0], shapes[k][1], k + 1);
  dt_compile_stats s = stats_of(c);
  cr_assert_eq(s.recompiles, 2, "%lld recompiles", (long long)s.recompiles);
  cr_assert_eq(s.variants, 3);
  cr_assert(strstr(dt_compiled_recompile_reason(c, 0), "dt_tensor_shape"), "reason: %s",
            dt_compiled_recompile_reason(c, 0));
  dt_compiled_destroy(c);
}

Test(compile_size_guards, numel_read_guards_every_dim) {
  reader r = READ_NUMEL;
  dt_compile_options opt = {.dynamic = true};
  dt_compiled *c = NULL;
  cr_assert_eq(dt_compile(reshape_fn, &r, 1, 1, &opt, &c), DT_OK);
  static const int64_t shapes[][2] = {{2, 3}, {4, 5}, {3, 2}, {2, 3}, {4, 5}};
  for (int k = 0; k < 5; k++) check_call(c, r, shapes[k][0], shapes[k][1], k + 1);
  dt_compile_stats s = stats_of(c);
  /* [3, 2] has the same count as [2, 3] but not the same dims: a guard per dim. */
  cr_assert_eq(s.recompiles, 2, "%lld recompiles", (long long)s.recompiles);
  cr_assert(strstr(dt_compiled_recompile_reason(c, 0), "dt_tensor_numel"), "reason: %s",
            dt_compiled_recompile_reason(c, 0));
  dt_compiled_destroy(c);
}

Test(compile_size_guards, read_of_an_op_output) {
  /* y = x + x is a traced value whose dims are x's symbols: reading y's dim 0 guards s0. */
  reader r = READ_OUTPUT_SIZE;
  dt_compile_options opt = {.dynamic = true};
  dt_compiled *c = NULL;
  cr_assert_eq(dt_compile(reshape_fn, &r, 1, 1, &opt, &c), DT_OK);
  static const int64_t shapes[][2] = {{4, 6}, {4, 3}, {2, 6}, {4, 5}};
  static const int64_t recompiles_after[] = {0, 0, 1, 1};
  for (int k = 0; k < 4; k++) {
    check_call(c, r, shapes[k][0], shapes[k][1], k + 1);
    cr_assert_eq(stats_of(c).recompiles, recompiles_after[k], "call %d", k);
  }
  cr_assert(strstr(dt_compiled_recompile_reason(c, 0), "dim 0"), "reason: %s",
            dt_compiled_recompile_reason(c, 0));
  dt_compiled_destroy(c);
}

Test(compile_size_guards, static_dim_read_adds_no_guard) {
  /* Dim 1 static, dim 0 dynamic: reading dim 1 reads a constant of the trace. */
  reader r = READ_SIZE;
  dt_compile_mark mark = {.input = 0, .dim = 1, .dynamic = false};
  dt_compile_options opt = {.dynamic = true, .n_marks = 1, .marks = &mark};
  dt_compiled *c = NULL;
  cr_assert_eq(dt_compile(reshape_fn, &r, 1, 1, &opt, &c), DT_OK);
  for (int64_t rows = 1; rows <= 5; rows++) check_call(c, r, rows, 6, (int)rows);
  cr_assert_eq(stats_of(c).recompiles, 0, "reason: %s", dt_compiled_recompile_reason(c, 0));
  dt_compiled_destroy(c);
}

/* The symbolic paths: a reshape size given as -1 and a mean whose divisor the library passes on
 * as a size note (autograd/size_note.h) read no size through the accessors. */
static dt_status symbolic_fn(void *user, int n_in, dt_tensor *const *in, int n_out,
                             dt_tensor **out) {
  (void)user, (void)n_in, (void)n_out;
  dt_tensor *flat = NULL;
  dt_status st = dt_reshape(in[0], 1, (int64_t[]){-1}, &flat);
  if (!st) st = dt_mean(flat, &out[0]);
  if (!st) st = dt_mse_loss(in[0], in[1], DT_LOSS_MEAN, &out[1]);
  dt_tensor_release(flat);
  return st;
}

Test(compile_size_guards, unread_sizes_stay_symbolic) {
  dt_compile_options opt = {.dynamic = true};
  dt_compiled *c = NULL;
  cr_assert_eq(dt_compile(symbolic_fn, NULL, 2, 2, &opt, &c), DT_OK);
  static const int64_t shapes[][2] = {{4, 6}, {3, 4}, {5, 7}, {1, 1}};
  for (int k = 0; k < 4; k++) {
    int64_t shape[2] = {shapes[k][0], shapes[k][1]};
    dt_tensor *in[2] = {ramp_f32(2, shape, k), ramp_f32(2, shape, k + 5)};
    dt_tensor *got[2] = {NULL, NULL}, *eager[2] = {NULL, NULL};
    cr_assert_eq(dt_compiled_call(c, 2, in, 2, got), DT_OK, "%s", dt_last_error());
    cr_assert_eq(symbolic_fn(NULL, 2, in, 2, eager), DT_OK, "%s", dt_last_error());
    /* The mean against a naive sum in double (the values are multiples of 1/8: exact). */
    const float *x = dt_tensor_data(in[0]);
    double sum = 0;
    for (int64_t i = 0; i < shape[0] * shape[1]; i++) sum += x[i];
    cr_assert_float_eq(*(const float *)dt_tensor_data(got[0]), sum / (double)(shape[0] * shape[1]),
                       1e-5, "shape %d", k);
    for (int o = 0; o < 2; o++) {
      cr_assert(bitwise_equal(got[o], eager[o]), "shape %d, output %d differs from eager", k, o);
      dt_tensor_release(got[o]);
      dt_tensor_release(eager[o]);
      dt_tensor_release(in[o]);
    }
  }
  cr_assert_eq(stats_of(c).recompiles, 0, "reason: %s", dt_compiled_recompile_reason(c, 0));
  dt_compiled_destroy(c);
}

Test(compile_size_guards, cache_limit_runs_eagerly_with_right_values) {
  /* One variant at most: the guarded size is not traced again; the call runs eagerly. */
  reader r = READ_SIZE;
  dt_compile_options opt = {.dynamic = true, .cache_limit = 1};
  dt_compiled *c = NULL;
  cr_assert_eq(dt_compile(reshape_fn, &r, 1, 1, &opt, &c), DT_OK);
  check_call(c, r, 4, 6, 1);
  check_call(c, r, 3, 4, 2);
  check_call(c, r, 5, 6, 3);
  dt_compile_stats s = stats_of(c);
  cr_assert_eq(s.recompiles, 0);
  cr_assert_eq(s.eager_calls, 1);
  cr_assert(strstr(dt_compiled_eager_reason(c), "read as a number"), "eager reason: %s",
            dt_compiled_eager_reason(c));
  dt_compiled_destroy(c);
}

/* ---- Distributed: dt_dist_global_shape of a Replicate tensor on 2 ranks -------------------- */

static dt_status global_fn(void *user, int n_in, dt_tensor *const *in, int n_out, dt_tensor **out) {
  (void)user, (void)n_in, (void)n_out;
  return dt_reshape(in[0], 2, (int64_t[]){-1, dt_dist_global_shape(in[0])[1]}, &out[0]);
}

static dt_status global_rank(dt_comm *world, void *arg) {
  (void)arg;
  int size = dt_comm_size(world);
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, &size, NULL, &mesh));
  dt_compile_options opt = {.dynamic = true};
  dt_compiled *c = NULL;
  RANK_OK(dt_compile(global_fn, NULL, 1, 1, &opt, &c));
  static const int64_t shapes[][2] = {{4, 6}, {3, 4}, {5, 6}};
  for (int k = 0; k < 3; k++) {
    dt_tensor *local = ramp_f32(2, (int64_t[]){shapes[k][0], shapes[k][1]}, k);
    RANK_CHECK(local != NULL, "ramp");
    dt_placement rep = dt_replicate();
    dt_tensor *x = NULL, *got = NULL, *eager = NULL;
    RANK_OK(dt_dist_from_local(mesh, local, 1, &rep, NULL, &x));
    RANK_OK(dt_compiled_call(c, 1, &x, 1, &got));
    RANK_OK(global_fn(NULL, 1, &x, 1, &eager));
    bool eq = false;
    RANK_OK(same_whole(got, eager, &eq));
    RANK_CHECK(eq, "shape %d: compiled differs from eager", k);
    const int64_t *gs = dt_dist_global_shape(got);
    RANK_CHECK(gs[0] == shapes[k][0] && gs[1] == shapes[k][1], "shape %d: [%lld, %lld]", k,
               (long long)gs[0], (long long)gs[1]);
    dt_tensor_release(got);
    dt_tensor_release(eager);
    dt_tensor_release(x);
    dt_tensor_release(local);
  }
  dt_compile_stats s;
  RANK_OK(dt_compiled_stats(c, &s));
  /* The whole global shape was read: both dims guarded, [3, 4] and [5, 6] trace again. */
  RANK_CHECK(s.recompiles == 2, "%lld recompiles", (long long)s.recompiles);
  RANK_CHECK(strstr(dt_compiled_recompile_reason(c, 0), "dt_dist_global_shape") != NULL,
             "reason: %s", dt_compiled_recompile_reason(c, 0));
  dt_compiled_destroy(c);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(compile_size_guards, global_shape_read_on_2_ranks) { SPAWN_OK(2, global_rank, NULL); }
