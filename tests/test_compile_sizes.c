/* dt_compile and size-derived numbers (issue 14): an op wrapper or backward formula that passes
 * an op a number computed from sizes (a loss's mean divides by the element count) must not
 * leave the traced count in a compiled call. Each loss and reduction-like public op is compiled
 * with every dim dynamic, traced at one size and run at others: the result equals eager at
 * that size bitwise, with no recompile where the op is symbolic (or one, guarded, where not).
 * Also the joint forward+backward of a mean-squared-error step (the backward of the division
 * reuses the forward's count) and cross-entropy with an ignored index (the count of kept
 * targets depends on their values). */
#include <criterion/criterion.h>
#include <string.h>

#include "compile_helpers.h"

static dt_tensor *ramp(int ndim, const int64_t *shape, int salt) {
  dt_tensor *t = ramp_f32(ndim, shape, salt);
  cr_assert_not_null(t);
  return t;
}

/* Targets in [0, classes); every third one the ignored index -1 when ignore is set. */
static dt_tensor *targets(int64_t n, int64_t classes, int salt, bool ignore) {
  dt_tensor *t = NULL;
  cr_assert_eq(dt_empty(1, (int64_t[]){n}, DT_I64, &t), DT_OK);
  int64_t *p = dt_tensor_data(t);
  for (int64_t i = 0; i < n; i++)
    p[i] = ignore && (i + salt) % 3 == 0 ? -1 : (i * 5 + salt) % classes;
  return t;
}

/* ---- One op per function ------------------------------------------------------------------ */

typedef enum which {
  MSE_MEAN,
  MSE_SUM,
  MSE_NONE,
  CE_MEAN,
  CE_SUM,
  CE_IGNORE_MEAN,
  MEAN,
  MEAN_DIM0,
  MEAN_DIM1,
  SUM,
  SOFTMAX,
  LOG_SOFTMAX,
  LAYER_NORM,
  BATCH_NORM_TRAINING,
  N_WHICH
} which;

static const char *const names[N_WHICH] = {"mse mean",   "mse sum",
                                           "mse none",   "ce mean",
                                           "ce sum",     "ce mean ignore_index",
                                           "mean",       "mean dim 0",
                                           "mean dim 1", "sum",
                                           "softmax",    "log_softmax",
                                           "layer_norm", "batch_norm_training"};

/* in[0]: x [B, F]; in[1]: target (x's shape for mse, [B] int64 for ce). */
static dt_status one_op(void *user, int n_in, dt_tensor *const *in, int n_out, dt_tensor **out) {
  (void)n_in, (void)n_out;
  which w = *(const which *)user;
  int64_t ignore = -1;
  dt_cross_entropy_options ce = {.reduction = DT_LOSS_MEAN};
  switch (w) {
  case MSE_MEAN: return dt_mse_loss(in[0], in[1], DT_LOSS_MEAN, &out[0]);
  case MSE_SUM: return dt_mse_loss(in[0], in[1], DT_LOSS_SUM, &out[0]);
  case MSE_NONE: return dt_mse_loss(in[0], in[1], DT_LOSS_NONE, &out[0]);
  case CE_MEAN: return dt_cross_entropy(in[0], in[1], &out[0]);
  case CE_SUM: ce.reduction = DT_LOSS_SUM; return dt_cross_entropy_ex(in[0], in[1], &ce, &out[0]);
  case CE_IGNORE_MEAN:
    ce.ignore_index = &ignore;
    return dt_cross_entropy_ex(in[0], in[1], &ce, &out[0]);
  case MEAN: return dt_mean(in[0], &out[0]);
  case MEAN_DIM0: return dt_mean_dims(in[0], 1, (int64_t[]){0}, false, &out[0]);
  case MEAN_DIM1: return dt_mean_dims(in[0], 1, (int64_t[]){1}, true, &out[0]);
  case SUM: return dt_sum(in[0], &out[0]);
  case SOFTMAX: return dt_softmax(in[0], 1, &out[0]);
  case LOG_SOFTMAX: return dt_log_softmax(in[0], 1, &out[0]);
  case LAYER_NORM: {
    int64_t f = dt_tensor_size(in[0], 1); /* guards dim 1 only (dt_tensor_shape: both) */
    return dt_layer_norm(in[0], 1, &f, NULL, NULL, 1e-5, &out[0]);
  }
  case BATCH_NORM_TRAINING: return dt_batch_norm_training(in[0], NULL, NULL, 1e-5, &out[0]);
  default: return DT_ERR_INVALID;
  }
}

static bool is_ce(which w) { return w == CE_MEAN || w == CE_SUM || w == CE_IGNORE_MEAN; }

static void make_inputs(which w, int64_t b, int64_t f, int salt, dt_tensor **in) {
  in[0] = ramp(2, (int64_t[]){b, f}, salt);
  in[1] =
      is_ce(w) ? targets(b, f, salt, w == CE_IGNORE_MEAN) : ramp(2, (int64_t[]){b, f}, salt + 7);
}

/* One call of w's compiled function at [rows, cols] (inputs of `salt`) equals eager's bitwise. */
static void check_call(dt_compiled *c, which w, int64_t rows, int64_t cols, int salt) {
  dt_tensor *in[2], *eager = NULL, *got = NULL;
  make_inputs(w, rows, cols, salt, in);
  cr_assert_eq(one_op(&w, 2, in, 1, &eager), DT_OK, "%s: eager: %s", names[w], dt_last_error());
  cr_assert_eq(dt_compiled_call(c, 2, in, 1, &got), DT_OK, "%s: compiled: %s", names[w],
               dt_last_error());
  cr_assert(bitwise_equal(got, eager), "%s at [%lld, %lld]: compiled differs from eager", names[w],
            (long long)rows, (long long)cols);
  dt_tensor_release(eager);
  dt_tensor_release(got);
  dt_tensor_release(in[0]);
  dt_tensor_release(in[1]);
}

/* Compiled with every dim dynamic at sizes[0], then run at the others (and back at the first):
 * bitwise equal to eager each time. */
static void check_op(which w, dt_compile_options opts) {
  static const int64_t sizes[][2] = {{4, 6}, {7, 6}, {2, 6}, {9, 5}, {4, 6}};
  dt_compiled *c = NULL;
  cr_assert_eq(dt_compile(one_op, &w, 2, 1, &opts, &c), DT_OK);
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    check_call(c, w, sizes[k][0], sizes[k][1], (int)k + 1);
  }
  dt_compile_stats s;
  cr_assert_eq(dt_compiled_stats(c, &s), DT_OK);
  /* The losses and reductions are symbolic in every size: one trace for all five calls;
   * layer_norm's normalized_shape is read from a size by the function (a C number), so the
   * trace is guarded on it: one recompile at F = 5. */
  cr_assert_eq(s.recompiles, w == LAYER_NORM ? 1 : 0, "%s: %lld recompiles (first: %s)", names[w],
               (long long)s.recompiles,
               dt_compiled_recompile_reason(c, 0) ? dt_compiled_recompile_reason(c, 0) : "-");
  dt_compiled_destroy(c);
}

Test(compile_sizes, every_loss_and_reduction_at_other_sizes) {
  for (int w = 0; w < N_WHICH; w++) check_op((which)w, (dt_compile_options){.dynamic = true});
}

/* Only the batch dynamic (the usual mark): the same, through the per-dim marks. */
Test(compile_sizes, losses_with_a_dynamic_batch) {
  dt_compile_mark marks[2] = {{.input = 0, .dim = 0, .dynamic = true},
                              {.input = 1, .dim = 0, .dynamic = true}};
  static const int64_t batches[] = {4, 1, 11, 6};
  which ws[] = {MSE_MEAN, CE_MEAN, CE_IGNORE_MEAN};
  for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) {
    which w = ws[i];
    dt_compiled *c = NULL;
    cr_assert_eq(
        dt_compile(one_op, &w, 2, 1, &(dt_compile_options){.n_marks = 2, .marks = marks}, &c),
        DT_OK);
    for (size_t k = 0; k < sizeof batches / sizeof batches[0]; k++) {
      check_call(c, w, batches[k], 5, (int)k + 3);
    }
    dt_compile_stats s;
    cr_assert_eq(dt_compiled_stats(c, &s), DT_OK);
    cr_assert_eq(s.recompiles, 0, "%s: %s", names[w],
                 dt_compiled_recompile_reason(c, 0) ? dt_compiled_recompile_reason(c, 0) : "-");
    dt_compiled_destroy(c);
  }
}

/* ---- The joint forward+backward ------------------------------------------------------------ */

typedef struct step_arg {
  which loss;
  dt_tensor *w; /* [C, F], requires grad: read by the function (a constant of the trace) */
} step_arg;

/* loss(x @ w^T, target) */
static dt_status step(void *user, int n_in, dt_tensor *const *in, int n_out, dt_tensor **out) {
  (void)n_in, (void)n_out;
  step_arg *a = user;
  dt_tensor *p = NULL;
  dt_status st = dt_linear(in[0], a->w, NULL, &p);
  if (!st) {
    dt_tensor *args[2] = {p, in[1]};
    st = one_op(&a->loss, 2, args, 1, out);
  }
  dt_tensor_release(p);
  return st;
}

static void check_joint(which loss) {
  const int64_t f = 5, classes = 4;
  step_arg eager = {.loss = loss, .w = ramp(2, (int64_t[]){classes, f}, 2)};
  step_arg comp = {.loss = loss, .w = ramp(2, (int64_t[]){classes, f}, 2)};
  cr_assert_eq(dt_tensor_set_requires_grad(eager.w, true), DT_OK);
  cr_assert_eq(dt_tensor_set_requires_grad(comp.w, true), DT_OK);
  dt_compile_mark marks[2] = {{.input = 0, .dim = 0, .dynamic = true},
                              {.input = 1, .dim = 0, .dynamic = true}};
  dt_compiled *c = NULL;
  cr_assert_eq(dt_compile(step, &comp, 2, 1,
                          &(dt_compile_options){.n_marks = 2, .marks = marks, .backward = true},
                          &c),
               DT_OK);
  static const int64_t batches[] = {6, 3, 10};
  for (size_t k = 0; k < sizeof batches / sizeof batches[0]; k++) {
    int64_t b = batches[k];
    dt_tensor *in[2], *le = NULL, *lc = NULL, *ge = NULL, *gc = NULL;
    in[0] = ramp(2, (int64_t[]){b, f}, (int)k + 1);
    in[1] = is_ce(loss) ? targets(b, classes, (int)k, loss == CE_IGNORE_MEAN)
                        : ramp(2, (int64_t[]){b, classes}, (int)k + 9);
    cr_assert_eq(dt_tensor_set_grad(eager.w, NULL), DT_OK);
    cr_assert_eq(dt_tensor_set_grad(comp.w, NULL), DT_OK);
    cr_assert_eq(step(&eager, 2, in, 1, &le), DT_OK, "%s", dt_last_error());
    cr_assert_eq(dt_backward(le, NULL), DT_OK, "%s", dt_last_error());
    cr_assert_eq(dt_compiled_call(c, 2, in, 1, &lc), DT_OK, "%s", dt_last_error());
    cr_assert(bitwise_equal(lc, le), "%s: loss at batch %lld", names[loss], (long long)b);
    cr_assert_eq(dt_tensor_grad(eager.w, &ge), DT_OK);
    cr_assert_eq(dt_tensor_grad(comp.w, &gc), DT_OK);
    cr_assert(bitwise_equal(gc, ge), "%s: grad at batch %lld", names[loss], (long long)b);
    dt_tensor *all[] = {in[0], in[1], le, lc, ge, gc};
    for (int i = 0; i < 6; i++) dt_tensor_release(all[i]);
  }
  dt_compile_stats s;
  cr_assert_eq(dt_compiled_stats(c, &s), DT_OK);
  cr_assert_eq(s.recompiles, 0, "%s: %s", names[loss],
               dt_compiled_recompile_reason(c, 0) ? dt_compiled_recompile_reason(c, 0) : "-");
  dt_compiled_destroy(c);
  dt_tensor_release(eager.w);
  dt_tensor_release(comp.w);
}

Test(compile_sizes, joint_mse_mean) { check_joint(MSE_MEAN); }
Test(compile_sizes, joint_cross_entropy_mean) { check_joint(CE_MEAN); }
Test(compile_sizes, joint_cross_entropy_ignore_index) { check_joint(CE_IGNORE_MEAN); }

/* ---- The shape-inference cache switch ------------------------------------------------------ */

/* A chain with repeated calls on equal symbolic shapes: relu, mul, add, mse, over [B, F]. */
static dt_status repeated(void *user, int n_in, dt_tensor *const *in, int n_out, dt_tensor **out) {
  (void)user, (void)n_in, (void)n_out;
  dt_tensor *cur = dt_tensor_retain(in[0]), *next = NULL;
  dt_status st = DT_OK;
  for (int k = 0; k < 12 && !st; k++) {
    st = k % 3 == 0   ? dt_relu(cur, &next)
         : k % 3 == 1 ? dt_mul(cur, in[1], &next)
                      : dt_add(cur, in[1], &next);
    dt_tensor_release(cur);
    cur = next;
  }
  if (!st) st = dt_mse_loss(cur, in[1], DT_LOSS_MEAN, &out[0]);
  dt_tensor_release(cur);
  return st;
}

Test(compile_sizes, shape_cache_on_and_off_identical) {
  dt_compiled *c[2] = {NULL, NULL};
  for (int k = 0; k < 2; k++) {
    dt_compile_options o = {.dynamic = true, .no_shape_cache = k == 1};
    cr_assert_eq(dt_compile(repeated, NULL, 2, 1, &o, &c[k]), DT_OK);
  }
  static const int64_t sizes[][2] = {{4, 3}, {9, 3}, {2, 7}};
  for (size_t s = 0; s < 3; s++) {
    dt_tensor *in[2] = {ramp(2, sizes[s], (int)s), ramp(2, sizes[s], (int)s + 5)};
    dt_tensor *eager = NULL, *got[2] = {NULL, NULL};
    cr_assert_eq(repeated(NULL, 2, in, 1, &eager), DT_OK);
    for (int k = 0; k < 2; k++) {
      cr_assert_eq(dt_compiled_call(c[k], 2, in, 1, &got[k]), DT_OK, "%s", dt_last_error());
      cr_assert(bitwise_equal(got[k], eager), "cache %s at size %zu", k ? "off" : "on", s);
      dt_tensor_release(got[k]);
    }
    dt_tensor_release(eager);
    dt_tensor_release(in[0]);
    dt_tensor_release(in[1]);
  }
  dt_compile_stats st[2];
  char *text[2];
  for (int k = 0; k < 2; k++) {
    cr_assert_eq(dt_compiled_stats(c[k], &st[k]), DT_OK);
    cr_assert_eq(dt_compiled_to_string(c[k], 0, &text[k]), DT_OK);
  }
  /* The same variant either way: graph, symbolic shapes and guards. */
  cr_assert_str_eq(text[0], text[1]);
  cr_assert_eq(st[0].compiles, st[1].compiles);
  cr_assert_eq(st[0].recompiles, st[1].recompiles);
  cr_assert_gt(st[0].shape_cache_hits, 0, "the chain repeats calls on equal shapes");
  cr_assert_eq(st[1].shape_cache_hits, 0);
  for (int k = 0; k < 2; k++) {
    dt_free(text[k]);
    dt_compiled_destroy(c[k]);
  }
}
