/*
 * The op sweep's cases: every op of the table with sample inputs. Shared by the distributed
 * sweep (tests/test_dist_sweep.c), the autograd sweep (tests/test_autograd_sweep.c) and the
 * coverage check (tests/test_op_coverage.c), which fails naming an op of the table that no case
 * sweeps. Shapes are odd so shards are uneven.
 *
 * A case is data: the op and its arguments by the names its schema gives them. One adapter,
 * dt__op_run (src/ops/op_args.h), reads the op list's schema column to make the call, so an op
 * added to the list needs a row here, not a function.
 */
#ifndef DT_TEST_SWEEP_CASES_H
#define DT_TEST_SWEEP_CASES_H

/* Private header: the cases name ops by their id and run them through the list's one adapter
 * (every op of the table, also those without a public function, such as gelu_backward). */
#include "ops/op_args.h"
#include "reference.h"

/* A second op applied to the first one's result (its only input). */
typedef struct op_then {
  bool on;
  dt_op op;
  const char *attrs;
} op_then;

typedef struct op_case {
  const char *name;
  dt_op op;
  const char *attrs; /* the op's arguments by schema name: "dim=1 keepdim=true" */
  int n_in;
  int ndim[3];
  int64_t shape[3][4];
  dt_dtype dtype[3]; /* DT_F32 unless set (0 is DT_F32) */
  double lo, hi;     /* value range of inputs */
  bool exact;        /* integer results: compare exactly */
  bool no_partial;   /* in place, not linear: a Partial first input is refused, not swept */
  int output;        /* which output of a tuple op is compared */
  op_then then;
} op_case;

/* Runs a case on its inputs: *out is a new reference (in-place ops run on a clone). */
static dt_status case_run(const op_case *c, dt_tensor **in, dt_tensor **out) {
  if (!c->then.on) return dt__op_run(c->op, in, c->n_in, c->attrs, c->output, out);
  dt_tensor *first = NULL;
  dt_status st = dt__op_run(c->op, in, c->n_in, c->attrs, c->output, &first);
  if (!st) st = dt__op_run(c->then.op, &first, 1, c->then.attrs, 0, out);
  dt_tensor_release(first);
  return st;
}

/* Table rows leave trailing fields (dtypes, ranges) to their zero defaults. */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#define S2(a, b)                                                                                   \
  { a, b }
#define F32_I64                                                                                    \
  { DT_F32, DT_I64 }
static const op_case cases[] = {
    {"add", DT_OP_ADD, NULL, 2, {2, 2}, {S2(5, 7), S2(5, 7)}},
    {"add broadcast", DT_OP_ADD, NULL, 2, {2, 1}, {S2(5, 7), {7}}},
    {"add size-1 dims", DT_OP_ADD, NULL, 2, {2, 2}, {S2(1, 7), S2(1, 7)}},
    {"mul size-1 vs broadcast", DT_OP_MUL, NULL, 2, {2, 2}, {S2(1, 7), S2(3, 1)}},
    {"sum of 1 element", DT_OP_SUM, NULL, 1, {1}, {{1}}},
    {"sub alpha", DT_OP_SUB, "alpha=2", 2, {2, 2}, {S2(5, 7), S2(1, 7)}},
    {"mul", DT_OP_MUL, NULL, 2, {2, 2}, {S2(5, 7), S2(5, 7)}},
    {"div", DT_OP_DIV, NULL, 2, {2, 2}, {S2(5, 7), S2(5, 7)}, .lo = 1, .hi = 3},
    {"maximum", DT_OP_MAXIMUM, NULL, 2, {2, 2}, {S2(5, 7), S2(5, 7)}},
    {"gt", DT_OP_GT, NULL, 2, {2, 2}, {S2(5, 7), S2(5, 7)}, .exact = true},
    {"where",
     DT_OP_WHERE,
     NULL,
     3,
     {2, 2, 2},
     {S2(5, 7), S2(5, 7), S2(5, 7)},
     {DT_BOOL, DT_F32, DT_F32}},
    {"masked_fill",
     DT_OP_MASKED_FILL,
     "value=-7",
     2,
     {2, 2},
     {S2(5, 7), S2(5, 7)},
     {DT_F32, DT_BOOL}},
    {"relu", DT_OP_RELU, NULL, 1, {2}, {S2(5, 7)}},
    {"neg", DT_OP_NEG, NULL, 1, {2}, {S2(5, 7)}},
    {"exp", DT_OP_EXP, NULL, 1, {2}, {S2(5, 7)}},
    {"gelu", DT_OP_GELU, NULL, 1, {2}, {S2(5, 7)}},
    {"gelu tanh", DT_OP_GELU, "approximate='tanh'", 1, {2}, {S2(5, 7)}},
    {"gelu_backward", DT_OP_GELU_BACKWARD, NULL, 2, {2, 2}, {S2(5, 7), S2(5, 7)}},
    {"mul.Scalar", DT_OP_MUL_SCALAR, "other=3", 1, {2}, {S2(5, 7)}},
    {"add.Scalar", DT_OP_ADD_SCALAR, "other=3", 1, {2}, {S2(5, 7)}},
    {"add_", DT_OP_ADD_, NULL, 2, {2, 2}, {S2(5, 7), S2(5, 7)}},
    {"sum", DT_OP_SUM, NULL, 1, {2}, {S2(5, 7)}},
    {"sum dim 0", DT_OP_SUM_DIM, "dim=0", 1, {2}, {S2(5, 7)}},
    {"sum dim 1 keepdim", DT_OP_SUM_DIM, "dim=1 keepdim=true", 1, {2}, {S2(5, 7)}},
    {"mean dim -1", DT_OP_MEAN_DIM, "dim=-1", 1, {2}, {S2(5, 8)}},
    {"mean", DT_OP_MEAN, NULL, 1, {2}, {S2(5, 7)}},
    {"amax dim 0", DT_OP_AMAX, "dim=0", 1, {2}, {S2(5, 7)}},
    {"max", DT_OP_MAX, NULL, 1, {2}, {S2(5, 7)}},
    {"argmax dim 1", DT_OP_ARGMAX, "dim=1", 1, {2}, {S2(5, 7)}, .exact = true},
    {"softmax", DT_OP_SOFTMAX, "dim=1", 1, {2}, {S2(5, 7)}},
    {"log_softmax", DT_OP_LOG_SOFTMAX, "dim=0", 1, {2}, {S2(5, 7)}},
    {"layer_norm", DT_OP_LAYER_NORM, "normalized_shape=7", 1, {2}, {S2(5, 7)}},
    {"rms_norm", DT_OP_RMS_NORM, "normalized_shape=7", 1, {2}, {S2(5, 7)}},
    {"scaled_dot_product_attention",
     DT_OP_SCALED_DOT_PRODUCT_ATTENTION,
     "is_causal=true",
     3,
     {4, 4, 4},
     {{3, 4, 5, 6}, {3, 2, 7, 6}, {3, 2, 7, 5}}},
    {"mm", DT_OP_MM, NULL, 2, {2, 2}, {S2(5, 6), S2(6, 7)}},
    {"bmm", DT_OP_BMM, NULL, 2, {3, 3}, {{3, 5, 6}, {3, 6, 4}}},
    {"matmul 3d@2d", DT_OP_MATMUL, NULL, 2, {3, 2}, {{3, 5, 6}, S2(6, 4)}},
    {"addmm", DT_OP_ADDMM, NULL, 3, {1, 2, 2}, {{7}, S2(5, 6), S2(6, 7)}},
    {"linear", DT_OP_LINEAR, NULL, 3, {2, 2, 1}, {S2(5, 6), S2(7, 6), {7}}},
    {"linear no bias 3d", DT_OP_LINEAR, NULL, 2, {3, 2}, {{3, 5, 6}, S2(7, 6)}},
    {"cross_entropy_loss",
     DT_OP_CROSS_ENTROPY_LOSS,
     "label_smoothing=0.1",
     2,
     {2, 2},
     {S2(5, 7), S2(5, 1)},
     F32_I64,
     .lo = 0,
     .hi = 7},
    {"cross_entropy_loss_backward",
     DT_OP_CROSS_ENTROPY_LOSS_BACKWARD,
     "ignore_index=3 label_smoothing=0.1",
     3,
     {2, 2, 2},
     {S2(5, 1), S2(5, 7), S2(5, 1)},
     {DT_F32, DT_F32, DT_I64},
     .lo = 0,
     .hi = 7},
    {"embedding", DT_OP_EMBEDDING, NULL, 2, {2, 1}, {S2(10, 6), {5}}, F32_I64, .lo = 0, .hi = 10},
    {"scatter_add dim 0",
     DT_OP_SCATTER_ADD,
     "dim=0",
     3,
     {2, 2, 2},
     {S2(5, 7), S2(3, 7), S2(3, 7)},
     {DT_F32, DT_I64, DT_F32},
     .lo = 0,
     .hi = 5},
    {"cat 0", DT_OP_CAT, "dim=0", 2, {2, 2}, {S2(5, 7), S2(3, 7)}},
    {"cat 1", DT_OP_CAT, "dim=1", 2, {2, 2}, {S2(5, 7), S2(5, 2)}},
    {"stack 1", DT_OP_STACK, "dim=1", 2, {2, 2}, {S2(5, 7), S2(5, 7)}},
    {"transpose", DT_OP_TRANSPOSE, "dim0=0 dim1=1", 1, {2}, {S2(5, 7)}},
    {"permute", DT_OP_PERMUTE, "dims=2,0,1", 1, {3}, {{3, 5, 7}}},
    {"view 6x5", DT_OP_VIEW, "size=6x5", 1, {2}, {S2(10, 3)}},
    {"reshape -1", DT_OP_RESHAPE, "shape=-1", 1, {2}, {S2(4, 7)}},
    {"flatten 1..2", DT_OP_FLATTEN, "start_dim=1 end_dim=2", 1, {3}, {{3, 4, 5}}},
    {"unsqueeze", DT_OP_UNSQUEEZE, "dim=1", 1, {2}, {S2(5, 7)}},
    {"select", DT_OP_SELECT, "dim=0 index=2", 1, {2}, {S2(5, 7)}},
    {"narrow", DT_OP_NARROW, "dim=1 start=1 length=4", 1, {2}, {S2(5, 7)}},
    {"chunk", DT_OP_CHUNK, "chunks=3 dim=1", 1, {2}, {S2(5, 7)}, .output = 1},
    {"expand", DT_OP_EXPAND, "size=3x5x7", 1, {2}, {S2(1, 7)}},
    {"clone", DT_OP_CLONE, NULL, 1, {2}, {S2(5, 7)}},
    {"detach", DT_OP_DETACH, NULL, 1, {2}, {S2(5, 7)}},
    {"contiguous of transpose",
     DT_OP_TRANSPOSE,
     "dim0=0 dim1=1",
     1,
     {2},
     {S2(5, 7)},
     .then = {true, DT_OP_CONTIGUOUS, NULL}},
    {"to float64", DT_OP_TO, "dtype=float64", 1, {2}, {S2(5, 7)}},
    {"ones_like", DT_OP_ONES_LIKE, NULL, 1, {2}, {S2(5, 7)}},
    {"abs", DT_OP_ABS, NULL, 1, {2}, {S2(5, 7)}},
    {"log", DT_OP_LOG, NULL, 1, {2}, {S2(5, 7)}, .lo = 0.5, .hi = 3},
    {"sqrt", DT_OP_SQRT, NULL, 1, {2}, {S2(5, 7)}, .lo = 0.5, .hi = 3},
    {"rsqrt", DT_OP_RSQRT, NULL, 1, {2}, {S2(5, 7)}, .lo = 0.5, .hi = 3},
    {"silu", DT_OP_SILU, NULL, 1, {2}, {S2(5, 7)}},
    {"tanh", DT_OP_TANH, NULL, 1, {2}, {S2(5, 7)}},
    {"sigmoid", DT_OP_SIGMOID, NULL, 1, {2}, {S2(5, 7)}},
    {"minimum", DT_OP_MINIMUM, NULL, 2, {2, 2}, {S2(5, 7), S2(5, 7)}},
    {"pow", DT_OP_POW, NULL, 2, {2, 1}, {S2(5, 7), {7}}, .lo = 0.5, .hi = 2},
    {"sub.Scalar", DT_OP_SUB_SCALAR, "other=2", 1, {2}, {S2(5, 7)}},
    {"div.Scalar", DT_OP_DIV_SCALAR, "other=4", 1, {2}, {S2(5, 7)}},
    {"pow.Scalar", DT_OP_POW_SCALAR, "exponent=2", 1, {2}, {S2(5, 7)}},
    {"eq",
     DT_OP_EQ,
     NULL,
     2,
     {2, 2},
     {S2(5, 7), S2(5, 7)},
     {DT_I64, DT_I64},
     .lo = 0,
     .hi = 3,
     .exact = true},
    {"ne",
     DT_OP_NE,
     NULL,
     2,
     {2, 2},
     {S2(5, 7), S2(5, 7)},
     {DT_I64, DT_I64},
     .lo = 0,
     .hi = 3,
     .exact = true},
    {"lt", DT_OP_LT, NULL, 2, {2, 2}, {S2(5, 7), S2(5, 7)}, .exact = true},
    {"le", DT_OP_LE, NULL, 2, {2, 2}, {S2(5, 7), S2(5, 7)}, .exact = true},
    {"ge", DT_OP_GE, NULL, 2, {2, 2}, {S2(5, 7), S2(5, 7)}, .exact = true},
    {"eq.Scalar",
     DT_OP_EQ_SCALAR,
     "other=0",
     1,
     {2},
     {S2(5, 7)},
     {DT_I64},
     .lo = -2,
     .hi = 2,
     .exact = true},
    {"ne.Scalar",
     DT_OP_NE_SCALAR,
     "other=0",
     1,
     {2},
     {S2(5, 7)},
     {DT_I64},
     .lo = -2,
     .hi = 2,
     .exact = true},
    {"lt.Scalar", DT_OP_LT_SCALAR, "other=0", 1, {2}, {S2(5, 7)}, .exact = true},
    {"le.Scalar", DT_OP_LE_SCALAR, "other=0", 1, {2}, {S2(5, 7)}, .exact = true},
    {"gt.Scalar", DT_OP_GT_SCALAR, "other=0", 1, {2}, {S2(5, 7)}, .exact = true},
    {"ge.Scalar", DT_OP_GE_SCALAR, "other=0", 1, {2}, {S2(5, 7)}, .exact = true},
    {"min", DT_OP_MIN, NULL, 1, {2}, {S2(5, 7)}},
    {"amin dim 1", DT_OP_AMIN, "dim=1", 1, {2}, {S2(5, 7)}},
    {"max.dim 0 values", DT_OP_MAX_DIM, "dim=0", 1, {2}, {S2(5, 7)}},
    {"min.dim 1 indices",
     DT_OP_MIN_DIM,
     "dim=1 keepdim=true",
     1,
     {2},
     {S2(5, 7)},
     .exact = true,
     .output = 1},
    {"batch_norm",
     DT_OP_BATCH_NORM,
     "eps=1e-5",
     3,
     {3, 1, 1},
     {{4, 3, 5}, {3}, {3}},
     .lo = 0.5,
     .hi = 2},
    {"batch_norm_training",
     DT_OP_BATCH_NORM_TRAINING,
     "eps=1e-5",
     3,
     {3, 1, 1},
     {{4, 3, 5}, {3}, {3}}},
    {"squeeze", DT_OP_SQUEEZE, NULL, 1, {3}, {{5, 1, 7}}},
    {"squeeze dim 1", DT_OP_SQUEEZE_DIM, "dim=1", 1, {3}, {{5, 1, 7}}},
    {"slice step 2", DT_OP_SLICE, "dim=1 start=1 end=7 step=2", 1, {2}, {S2(5, 7)}},
    {"split", DT_OP_SPLIT, "split_size=2 dim=0", 1, {2}, {S2(5, 7)}, .output = 1},
    {"split_with_sizes",
     DT_OP_SPLIT_WITH_SIZES,
     "split_sizes=1,4,2 dim=1",
     1,
     {2},
     {S2(5, 7)},
     .output = 1},
    {"sub_", DT_OP_SUB_, NULL, 2, {2, 2}, {S2(5, 7), S2(5, 7)}},
    {"mul_", DT_OP_MUL_, NULL, 2, {2, 2}, {S2(5, 7), S2(5, 7)}},
    {"div_", DT_OP_DIV_, NULL, 2, {2, 1}, {S2(5, 7), {7}}, .lo = 1, .hi = 3},
    {"add_.Scalar", DT_OP_ADD_SCALAR_, "other=1.5", 1, {2}, {S2(5, 7)}, .no_partial = true},
    {"mul_.Scalar", DT_OP_MUL_SCALAR_, "other=-2", 1, {2}, {S2(5, 7)}},
    {"copy_", DT_OP_COPY_, NULL, 2, {2, 2}, {S2(5, 7), S2(5, 7)}},
    {"uniform_", DT_OP_UNIFORM_, "from=-1 to=1 seed=11", 1, {2}, {S2(5, 7)}, .no_partial = true},
    {"empty_like + fill_",
     DT_OP_EMPTY_LIKE,
     NULL,
     1,
     {2},
     {S2(5, 7)},
     .then = {true, DT_OP_FILL_, "value=2.5"}},
    {"zeros_like", DT_OP_ZEROS_LIKE, NULL, 1, {2}, {S2(5, 7)}},
    {"full_like", DT_OP_FULL_LIKE, "fill_value=7", 1, {2}, {S2(5, 7)}},
};
#define N_CASES (sizeof cases / sizeof *cases)

#endif /* DT_TEST_SWEEP_CASES_H */
