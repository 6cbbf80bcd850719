/*
 * The list's one adapter (src/ops/op_args.h), which `dtensor plan` and the op sweeps call every
 * op through: for each way the schema maps an argument onto dt_op_call (ints in order, None,
 * lists, keepdim, Scalars, bools, str, dtype, tensor lists, optional tensors, tuple outputs,
 * in-place ops), the call it makes gives what the public function gives; its errors name the
 * op and the argument.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Private header: the adapter is internal (tools and tests call ops by id through it). */
#include "ops/op_args.h"
#include "reference.h"

/* out = the adapter's op(in) with attrs, output which; asserts it equals want (released). */
static void check(int op, dt_tensor **in, int n, const char *attrs, int which, dt_tensor *want) {
  const char *name = dt__op_table[op].name;
  dt_tensor *got = NULL;
  cr_assert_eq(dt__op_run(op, in, n, attrs, which, &got), DT_OK, "%s %s: %s", name,
               attrs ? attrs : "", dt_last_error());
  cr_assert(want, "%s: no reference", name);
  cr_assert_eq(dt_tensor_dtype(got), dt_tensor_dtype(want), "%s %s: dtype", name, attrs);
  cr_assert_eq(dt_tensor_numel(got), dt_tensor_numel(want), "%s %s: numel", name, attrs);
  double *g = ref_values(got), *w = ref_values(want);
  for (int64_t i = 0; i < dt_tensor_numel(want); i++) {
    cr_assert(g[i] == w[i] || (isnan(g[i]) && isnan(w[i])), "%s %s: element %lld is %g, not %g",
              name, attrs ? attrs : "", (long long)i, g[i], w[i]);
  }
  free(g);
  free(w);
  dt_tensor_release(got);
  dt_tensor_release(want);
}

static dt_tensor *x57, *y57, *r7, *x357;

static void setup(void) {
  x57 = ref_random(2, (int64_t[]){5, 7}, DT_F32, -2, 2, 1);
  y57 = ref_random(2, (int64_t[]){5, 7}, DT_F32, -2, 2, 2);
  r7 = ref_random(1, (int64_t[]){7}, DT_F32, -2, 2, 3);
  x357 = ref_random(3, (int64_t[]){3, 5, 7}, DT_F32, -2, 2, 4);
}
static void teardown(void) {
  dt_tensor_release(x57);
  dt_tensor_release(y57);
  dt_tensor_release(r7);
  dt_tensor_release(x357);
}

TestSuite(op_args, .init = setup, .fini = teardown);

Test(op_args, ints_lists_and_keepdim) {
  dt_tensor *w = NULL, *idx = NULL;
  cr_assert_eq(dt_sum_dims(x357, 2, (int64_t[]){0, 2}, true, &w), DT_OK);
  check(DT_OP_SUM_DIM, &x357, 1, "dim=0,2 keepdim=true", 0, w);
  cr_assert_eq(dt_amax(x57, 1, (int64_t[]){-1}, false, &w), DT_OK);
  check(DT_OP_AMAX, &x57, 1, "dim=[-1]", 0, w);
  cr_assert_eq(dt_argmax(x57, &w), DT_OK);
  check(DT_OP_ARGMAX, &x57, 1, NULL, 0, w); /* dim=None: no ints */
  cr_assert_eq(dt_argmax_dim(x57, 1, true, &w), DT_OK);
  check(DT_OP_ARGMAX, &x57, 1, "dim=1 keepdim=1", 0, w);
  cr_assert_eq(dt_max_dim(x57, 0, false, &w, &idx), DT_OK);
  dt_tensor_release(w);
  check(DT_OP_MAX_DIM, &x57, 1, "dim=0", 1, idx); /* the tuple's second output */
  cr_assert_eq(dt_softmax(x357, -2, &w), DT_OK);
  check(DT_OP_SOFTMAX, &x357, 1, "dim=-2", 0, w);
  cr_assert_eq(dt_permute(x357, 3, (int64_t[]){2, 0, 1}, &w), DT_OK);
  check(DT_OP_PERMUTE, &x357, 1, "dims=[2,0,1]", 0, w);
  cr_assert_eq(dt_view(x357, 2, (int64_t[]){15, 7}, &w), DT_OK);
  check(DT_OP_VIEW, &x357, 1, "size=15x7", 0, w);
  cr_assert_eq(dt_reshape(x357, 2, (int64_t[]){-1, 5}, &w), DT_OK);
  check(DT_OP_RESHAPE, &x357, 1, "shape=-1,5", 0, w);
  cr_assert_eq(dt_expand(r7, 3, (int64_t[]){2, 5, 7}, &w), DT_OK);
  check(DT_OP_EXPAND, &r7, 1, "size=2x5x7 implicit=false", 0, w);
  cr_assert_eq(dt_flatten(x357, 0, 1, &w), DT_OK);
  check(DT_OP_FLATTEN, &x357, 1, "end_dim=1", 0, w);
  cr_assert_eq(dt_transpose(x357, 2, 0, &w), DT_OK);
  check(DT_OP_TRANSPOSE, &x357, 1, "dim0=2 dim1=0", 0, w);
}

Test(op_args, windows_and_pieces) {
  dt_tensor *w = NULL, *pieces[4] = {0};
  int n = 0;
  cr_assert_eq(dt_narrow(x57, 1, 2, 3, &w), DT_OK);
  check(DT_OP_NARROW, &x57, 1, "dim=1 start=2 length=3", 0, w);
  cr_assert_eq(dt_slice(x57, 1, -6, 100, 3, &w), DT_OK);
  check(DT_OP_SLICE, &x57, 1, "dim=1 start=-6 end=100 step=3", 0, w);
  cr_assert_eq(dt_select(x357, 1, 4, &w), DT_OK);
  check(DT_OP_SELECT, &x357, 1, "dim=1 index=4", 0, w);
  cr_assert_eq(dt_split_with_sizes(x57, 3, (int64_t[]){2, 1, 4}, 1, pieces, 4, &n), DT_OK);
  dt_tensor_release(pieces[0]);
  dt_tensor_release(pieces[1]);
  check(DT_OP_SPLIT_WITH_SIZES, &x57, 1, "split_sizes=2,1,4 dim=1", 2, pieces[2]);
  cr_assert_eq(dt_chunk(x57, 2, 0, pieces, 4, &n), DT_OK);
  dt_tensor_release(pieces[0]);
  check(DT_OP_CHUNK, &x57, 1, "chunks=2", 1, pieces[1]);
  dt_tensor *all[3] = {x57, y57, x57};
  cr_assert_eq(dt_cat(3, all, 1, &w), DT_OK);
  check(DT_OP_CAT, all, 3, "dim=1", 0, w);
  cr_assert_eq(dt_stack(2, all, 0, &w), DT_OK);
  check(DT_OP_STACK, all, 2, NULL, 0, w);
}

Test(op_args, scalars_bools_str_and_dtype) {
  dt_tensor *in2[2] = {x57, y57}, *w = NULL;
  cr_assert_eq(dt_sub_ex(x57, y57, 2.5, &w), DT_OK);
  check(DT_OP_SUB, in2, 2, "alpha=2.5", 0, w);
  cr_assert_eq(dt_add_scalar(x57, -3, &w), DT_OK);
  check(DT_OP_ADD_SCALAR, &x57, 1, "other=-3", 0, w);
  cr_assert_eq(dt_pow_scalar(x57, 2, &w), DT_OK);
  check(DT_OP_POW_SCALAR, &x57, 1, "exponent=2", 0, w);
  cr_assert_eq(dt_gelu_tanh(x57, &w), DT_OK);
  check(DT_OP_GELU, &x57, 1, "approximate='tanh'", 0, w);
  cr_assert_eq(dt_to(x57, DT_F64, &w), DT_OK);
  check(DT_OP_TO, &x57, 1, "dtype=float64", 0, w);
  cr_assert_eq(dt_full_like(x57, 7, &w), DT_OK);
  check(DT_OP_FULL_LIKE, &x57, 1, "fill_value=7", 0, w);
  dt_tensor *q = ref_random(4, (int64_t[]){1, 2, 5, 4}, DT_F32, -1, 1, 5);
  dt_tensor *kv = ref_random(4, (int64_t[]){1, 1, 6, 4}, DT_F32, -1, 1, 6);
  dt_tensor *qkv[3] = {q, kv, kv};
  dt_attention_options o = {.is_causal = true, .scale = 0.75};
  cr_assert_eq(dt_scaled_dot_product_attention(q, kv, kv, NULL, &o, &w, NULL), DT_OK);
  check(DT_OP_SCALED_DOT_PRODUCT_ATTENTION, qkv, 3, "is_causal=true scale=0.75", 0, w);
  dt_tensor_release(q);
  dt_tensor_release(kv);
}

Test(op_args, optional_tensors_and_in_place) {
  dt_tensor *w = NULL, *c = NULL;
  dt_tensor *bias = ref_random(1, (int64_t[]){5}, DT_F32, -1, 1, 7);
  dt_tensor *lin[3] = {x57, y57, bias};
  cr_assert_eq(dt_linear(x57, y57, NULL, &w), DT_OK);
  check(DT_OP_LINEAR, lin, 2, NULL, 0, w); /* bias absent */
  cr_assert_eq(dt_linear(x57, y57, bias, &w), DT_OK);
  check(DT_OP_LINEAR, lin, 3, NULL, 0, w);
  dt_tensor *mm[3] = {bias, x57, NULL};
  dt_tensor *y75 = NULL;
  cr_assert_eq(dt_transpose(y57, 0, 1, &y75), DT_OK);
  mm[2] = y75;
  cr_assert_eq(dt_addmm_ex(bias, x57, y75, 0.5, 2, &w), DT_OK);
  check(DT_OP_ADDMM, mm, 3, "beta=0.5 alpha=2", 0, w);
  dt_tensor *ln[3] = {x57, r7, r7};
  cr_assert_eq(dt_layer_norm(x57, 1, (int64_t[]){7}, r7, r7, 1e-3, &w), DT_OK);
  check(DT_OP_LAYER_NORM, ln, 3, "normalized_shape=[7] eps=1e-3", 0, w);
  /* In place: a clone is written, the input is not. */
  dt_tensor *in2[2] = {x57, r7};
  cr_assert_eq(dt_clone(x57, &c), DT_OK);
  cr_assert_eq(dt_mul_(c, r7), DT_OK);
  check(DT_OP_MUL_, in2, 2, NULL, 0, c);
  cr_assert_eq(dt_clone(x57, &c), DT_OK);
  cr_assert_eq(dt_uniform_(c, -1, 3, 11), DT_OK);
  check(DT_OP_UNIFORM_, &x57, 1, "from=-1 to=3 seed=11", 0, c);
  double *before = ref_values(x57);
  dt_tensor *again = ref_random(2, (int64_t[]){5, 7}, DT_F32, -2, 2, 1);
  double *now = ref_values(again);
  cr_assert_eq(memcmp(before, now, sizeof(double) * 35), 0, "the adapter wrote its input");
  free(before);
  free(now);
  dt_tensor_release(again);
  dt_tensor_release(y75);
  dt_tensor_release(bias);
}

Test(op_args, cross_entropy_ignore_index) {
  dt_tensor *logits = ref_random(2, (int64_t[]){6, 4}, DT_F32, -2, 2, 8);
  dt_tensor *target = ref_tensor(1, (int64_t[]){6}, DT_I64, (double[]){0, 3, 1, 3, 2, -100});
  dt_tensor *target2 = NULL, *w = NULL;
  cr_assert_eq(dt_unsqueeze(target, 1, &target2), DT_OK);
  dt_tensor *in[2] = {logits, target2};
  /* The schema's ignore_index is always in force (default -100), as in PyTorch. */
  dt_cross_entropy_options o = {
      .reduction = DT_LOSS_NONE, .ignore_index = &(int64_t){-100}, .label_smoothing = 0.2};
  cr_assert_eq(dt_cross_entropy_ex(logits, target, &o, &w), DT_OK, "%s", dt_last_error());
  check(DT_OP_CROSS_ENTROPY_LOSS, in, 2, "label_smoothing=0.2", 0, w);
  o.ignore_index = &(int64_t){3};
  dt_tensor *t3 = ref_tensor(1, (int64_t[]){6}, DT_I64, (double[]){0, 3, 1, 3, 2, 1});
  dt_tensor *t3b = NULL;
  cr_assert_eq(dt_unsqueeze(t3, 1, &t3b), DT_OK);
  in[1] = t3b;
  cr_assert_eq(dt_cross_entropy_ex(logits, t3, &o, &w), DT_OK);
  check(DT_OP_CROSS_ENTROPY_LOSS, in, 2, "ignore_index=3 label_smoothing=0.2", 0, w);
  /* The raw fields: ints=3,0 turns the ignored index off. */
  o.ignore_index = NULL;
  cr_assert_eq(dt_cross_entropy_ex(logits, t3, &o, &w), DT_OK);
  check(DT_OP_CROSS_ENTROPY_LOSS, in, 2, "ints=3,0 scalars=0.2", 0, w);
  dt_tensor *made[] = {logits, target, target2, t3, t3b};
  for (size_t i = 0; i < sizeof made / sizeof *made; i++) dt_tensor_release(made[i]);
}

Test(op_args, errors_name_the_op_and_the_argument) {
  dt_tensor *out = NULL;
  dt_op_args a;
  cr_assert_eq(dt__op_run(DT_OP_SOFTMAX, &x57, 1, "dimension=1", 0, &out), DT_ERR_INVALID);
  ref_assert_error_mentions("softmax.int: unknown attribute 'dimension'", "it takes: dim");
  cr_assert_null(out);
  cr_assert_eq(dt__op_run(DT_OP_SOFTMAX, &x57, 1, NULL, 0, &out), DT_ERR_INVALID);
  ref_assert_error_mentions("softmax.int", "'dim' is required");
  cr_assert_eq(dt__op_args_parse(DT_OP_TRANSPOSE, "dim0=1 dim1=x", &a), DT_ERR_INVALID);
  ref_assert_error_mentions("transpose.int: argument 'dim1=x'", "an integer");
  cr_assert_eq(dt__op_args_parse(DT_OP_SUM_DIM, "dim=1 dim=0", &a), DT_ERR_INVALID);
  ref_assert_error_mentions("sum.dim_IntList", "'dim' given twice");
  cr_assert_eq(dt__op_args_parse(DT_OP_SUM, "dtype=float64", &a), DT_ERR_UNSUPPORTED);
  ref_assert_error_mentions("sum: dtype=float64", "not supported");
  cr_assert_eq(dt__op_args_parse(DT_OP_EXPAND, "size=2x7 implicit=true", &a), DT_ERR_UNSUPPORTED);
  ref_assert_error_mentions("expand", "implicit=true");
  cr_assert_eq(dt__op_args_parse(DT_OP_SLICE, "dim=1", &a), DT_ERR_UNSUPPORTED);
  ref_assert_error_mentions("slice.Tensor: start=None", "start is required");
  cr_assert_eq(dt__op_args_parse(DT_OP_GELU, "approximate=fast", &a), DT_ERR_INVALID);
  ref_assert_error_mentions("gelu", "'none' or 'tanh'");
  cr_assert_eq(dt__op_run(DT_OP_MM, &x57, 1, NULL, 0, &out), DT_ERR_INVALID);
  ref_assert_error_mentions("mm takes 2 to 2 tensors", "1 given");
  cr_assert_eq(dt__op_run(DT_OP_RELU, &x57, 1, NULL, 1, &out), DT_ERR_INVALID);
  ref_assert_error_mentions("relu", "output 1 of 1");
  cr_assert_null(out);
  cr_assert_eq(dt__op_params(DT_OP_COUNT, NULL), DT_ERR_INVALID);
  cr_assert_eq(dt__op_params(-1, &(dt_op_params){0}), DT_ERR_INVALID);
  ref_assert_error_mentions("dt__op_params", "not in the list");
}
