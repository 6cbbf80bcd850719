/*
 * Every op of the table, walked one by one (as ggml's test-backend-ops does):
 * - the op list gives it every fact (a sharding-rule family, or REPLICATE with a reason
 *   listed here; a symbolic shape rule, or SPECIALIZE listed here; the element function of a
 *   pointwise kernel, named as the op is), and its traits agree with its schema;
 * - its schema maps onto dt_op_call, so the list's one adapter (src/ops/op_args.h) calls it:
 *   an op that would need a hand-written call fails, named;
 * - the op sweep (tests/sweep_cases.h, run distributed by tests/test_dist_sweep.c) reaches
 *   it. A coverage table is printed; an op no case reaches fails the test unless it is
 *   listed below with a reason.
 */
#include <stdio.h>
#include <string.h>

/* Private headers: every op carries every fact (the test walks dt__op_table), and the CPU's
 * kernel table is the list's kernel column (dt__cpu_kernels, dt__device_kernels). */
#include "kernels/kernel_table.h"
#include "ops/op_impl.h"
#include "sweep_cases.h"

/* Ops without a sharding rule, with the reason. Each is marked DT_TRAIT_LOCAL_ONLY in the list,
 * so that a distributed call is refused (tests/test_dist_sweep.c checks the refusal on every
 * mesh) instead of gathering its arguments silently. */
static const struct {
  dt_op op;
  const char *reason;
} local_only[] = {
    {DT_OP_LAYER_NORM_BACKWARD_ALL,
     "layer_norm's three gradients in one pass for local tensors: with the rows sharded its "
     "outputs would need two placements (the input's shard, Partial(sum)); distributed, the "
     "autograd formula takes layer_norm_backward and layer_norm_backward_affine"},
};

/* Ops the sweep does not reach, with the reason. */
static const struct {
  dt_op op;
  const char *reason;
} not_swept[] = {
    {DT_OP_SCALED_DOT_PRODUCT_ATTENTION_BACKWARD,
     "reached by the attention's gradient; tests/test_attention.c checks it on 2 ranks"},
    {DT_OP_CROSS_ENTROPY_VOCAB_TERMS_BACKWARD,
     "four inputs (the sweep takes three); reached by the vocabulary-parallel loss's gradient, "
     "which tests/test_loss.c checks on 2-4 ranks"},
};

/* Ops a CUDA build refuses on CUDA tensors (DT_ERR_UNSUPPORTED naming the op and the device),
 * with the reason. The first row is a sentinel (no op has the id DT_OP_COUNT); an op added
 * without a CUDA kernel is listed here with its reason. */
static const struct {
  dt_op op;
  const char *reason;
} cuda_refused[] = {
    {DT_OP_COUNT, "(none: a sentinel)"},
    {DT_OP_LAYER_NORM_BACKWARD_ALL,
     "a CPU fusion (one pass over grad and input); on CUDA the autograd formula takes "
     "layer_norm_backward and layer_norm_backward_affine"},
};

static bool listed_cuda_refused(int op) {
  for (size_t i = 0; i < sizeof cuda_refused / sizeof *cuda_refused; i++) {
    if ((int)cuda_refused[i].op == op) return true;
  }
  return false;
}

/* Ops compile specializes (no symbolic shape rule: their input sizes are guarded to the traced
 * values), with the reason. A new op either names a shape family or is added here. */
static const struct {
  dt_op op;
  const char *reason;
} specialized[] = {
    {DT_OP_FILL_, "not written yet"},
    {DT_OP_MASKED_FILL, "not written yet"},
    {DT_OP_BMM, "not written yet"},
    {DT_OP_ADDMM, "not written yet"},
    {DT_OP_COPY_, "not written yet"},
    {DT_OP_FLATTEN, "not written yet"},
    {DT_OP_PERMUTE, "not written yet"},
    {DT_OP_SQUEEZE, "which dims are 1 is data"},
    {DT_OP_SQUEEZE_DIM, "not written yet"},
    {DT_OP_NARROW, "start and length are constants"},
    {DT_OP_SLICE, "start and end clamp"},
    {DT_OP_SELECT, "not written yet"},
    {DT_OP_SPLIT, "the piece count is data"},
    {DT_OP_SPLIT_WITH_SIZES, "sizes are constants"},
    {DT_OP_UNIFORM_, "not written yet"},
    {DT_OP_SCALED_DOT_PRODUCT_ATTENTION, "not written yet (4-D shapes of three arguments)"},
    {DT_OP_SCALED_DOT_PRODUCT_ATTENTION_BACKWARD, "not written yet"},
    {DT_OP_LAYER_NORM_BACKWARD_AFFINE, "not written yet (outputs of normalized_shape)"},
    {DT_OP_LAYER_NORM_BACKWARD_ALL, "not written yet (outputs of two shapes)"},
    {DT_OP_RMS_NORM_BACKWARD_WEIGHT, "not written yet (output of normalized_shape)"},
    {DT_OP_CROSS_ENTROPY_VOCAB_TERMS, "not written yet"},
    {DT_OP_CROSS_ENTROPY_VOCAB_TERMS_BACKWARD, "not written yet"},
    {DT_OP_TOPK, "k is a constant"},
    {DT_OP_INDEX_SELECT, "not written yet (the index's length)"},
    {DT_OP_GATHER, "not written yet (the index's shape)"},
};

static bool listed_specialized(int op) {
  for (size_t i = 0; i < sizeof specialized / sizeof *specialized; i++) {
    if ((int)specialized[i].op == op) return true;
  }
  return false;
}

/* The shape column's families as the coverage table prints them. */
static const char *shape_names[] = {"SPECIALIZE (guards)",
                                    "same",
                                    "broadcast_into",
                                    "broadcast",
                                    "where",
                                    "batch_norm",
                                    "batch_norm_training",
                                    "layer_norm",
                                    "cross_entropy",
                                    "cross_entropy_backward",
                                    "mm",
                                    "linear",
                                    "matmul",
                                    "embedding",
                                    "reduce",
                                    "cat",
                                    "stack",
                                    "chunk",
                                    "transpose",
                                    "unsqueeze",
                                    "view",
                                    "expand",
                                    "scatter_add"};
_Static_assert(sizeof shape_names / sizeof *shape_names == DT_SHAPE_COUNT,
               "a name for every shape family");

/* The names of the element functions (kernels/elementwise.h), as the ops that apply them
 * begin. */
static const char *unary_names[] = {"neg",  "abs",  "relu", "exp",  "log",     "sqrt", "rsqrt",
                                    "gelu", "gelu", "silu", "tanh", "sigmoid", "sin",  "cos"};
static const char *binary_names[] = {"add", "sub", "mul", "div", "maximum", "minimum", "pow",
                                     "eq",  "ne",  "lt",  "le",  "gt",      "ge"};

/* The element function an op's name says it applies, checked against the func column. */
static void check_func(int op) {
  const dt_op_def *def = &dt__op_table[op];
  dt_op_kernel_fn kernel = dt__cpu_kernels[op];
  bool unary = kernel == dt__kernel_unary;
  bool binary = kernel == dt__kernel_binary || kernel == dt__kernel_binary_scalar ||
                kernel == dt__kernel_binary_inplace || kernel == dt__kernel_binary_scalar_inplace;
  if (!unary && !binary) {
    cr_assert_eq(def->func, NO_FUNC, "%s: an element function on a non-pointwise kernel",
                 def->name);
    return;
  }
  int n = unary ? (int)(sizeof unary_names / sizeof *unary_names)
                : (int)(sizeof binary_names / sizeof *binary_names);
  cr_assert(def->func >= 0 && def->func < n, "%s: no element function in the func column",
            def->name);
  const char *fn = unary ? unary_names[def->func] : binary_names[def->func];
  size_t len = strlen(fn);
  cr_assert(strncmp(def->name, fn, len) == 0 && strchr("._", def->name[len]) != NULL,
            "%s: the func column names %s", def->name, fn);
}

static bool listed_local_only(int op) {
  for (size_t i = 0; i < sizeof local_only / sizeof *local_only; i++) {
    if ((int)local_only[i].op == op) return true;
  }
  return false;
}

static bool listed_not_swept(int op) {
  for (size_t i = 0; i < sizeof not_swept / sizeof *not_swept; i++) {
    if ((int)not_swept[i].op == op) return true;
  }
  return false;
}

Test(op_list, every_op_has_its_facts) {
  for (int op = 0; op < DT_OP_COUNT; op++) {
    const dt_op_def *def = &dt__op_table[op];
    cr_assert(def->name && def->schema && def->infer && dt__cpu_kernels[op], "op %d lacks a column",
              op);
    cr_assert(dt__device_kernels[DT_DEVICE_CPU][op] == dt__cpu_kernels[op] &&
                  dt__device_has_kernel(DT_DEVICE_CPU, op),
              "%s: the CPU's table is not the list's kernel column", def->name);
    cr_assert(def->shape >= 0 && def->shape < DT_SHAPE_COUNT, "%s: bad shape column", def->name);
    cr_assert_eq(def->shape == DT_SHAPE_SPECIALIZE, listed_specialized(op),
                 "%s: shape column %d, but the list of specialized ops says otherwise", def->name,
                 (int)def->shape);
    check_func(op);
    cr_assert(strncmp(def->schema, def->name, strlen(def->name)) == 0 &&
                  def->schema[strlen(def->name)] == '(',
              "%s: the schema names another op: %s", def->name, def->schema);
    /* Every op has a sharding rule, or is local-only (refused on distributed tensors) with a
     * reason listed above: none falls back to replicating its arguments unsaid. */
    bool local = dt__op_has_trait(op, DT_TRAIT_LOCAL_ONLY);
    cr_assert_eq(def->rule == DT_RULE_REPLICATE, local, "%s: %s, but the local-only trait is %s",
                 def->name, def->rule == DT_RULE_REPLICATE ? "no sharding rule" : "a sharding rule",
                 local ? "set" : "unset");
    cr_assert_eq(local, listed_local_only(op),
                 "%s: the local-only trait and the list of local-only ops with their reason "
                 "disagree",
                 def->name);
    /* The traits say what the schema says. */
    const char *ret = strstr(def->schema, ") -> ");
    cr_assert(ret, "%s: schema without a return type", def->name);
    bool tuple = ret[5] == '(' || strstr(ret, "[]") != NULL;
    cr_assert_eq(tuple, dt__op_has_trait(op, DT_TRAIT_TUPLE),
                 "%s: the tuple trait disagrees "
                 "with the schema",
                 def->name);
    bool list = strstr(def->schema, "Tensor[]") != NULL &&
                strstr(def->schema, "Tensor[] ") == strstr(def->schema, "Tensor[]");
    cr_assert_eq(list, dt__op_has_trait(op, DT_TRAIT_TENSOR_LIST),
                 "%s: the tensor-list trait disagrees with the schema", def->name);
    bool mutates = strstr(def->schema, "(a!)") != NULL;
    cr_assert_eq(mutates, def->kind == DT_OP_KIND_INPLACE, "%s: kind disagrees with the schema",
                 def->name);
    int linear_bits = dt__op_has_trait(op, DT_TRAIT_LINEAR) +
                      dt__op_has_trait(op, DT_TRAIT_LINEAR_FIRST) +
                      dt__op_has_trait(op, DT_TRAIT_LINEAR_EACH);
    cr_assert(linear_bits <= 1, "%s: more than one linearity trait", def->name);
    if (linear_bits) {
      cr_assert_eq(def->rule, DT_RULE_POINTWISE, "%s: linearity is a pointwise fact", def->name);
    }
  }
}

/* Every op's schema maps onto dt_op_call: the adapter reads its tensors, and its attributes
 * parse from the schema's defaults, or name a required argument, which a caller gives (slice's
 * start=None cannot precede end and step in ints: start is required there). */
Test(op_list, every_op_adapts_from_its_schema) {
  int adapted = 0;
  for (int op = 0; op < DT_OP_COUNT; op++) {
    const dt_op_def *def = &dt__op_table[op];
    dt_op_params p;
    cr_assert_eq(dt__op_params(op, &p), DT_OK, "%s: the adapter cannot call it: %s", def->name,
                 dt_last_error());
    cr_assert(p.min_tensors <= p.max_tensors, "%s: %d required of %d tensor parameters", def->name,
              p.min_tensors, p.max_tensors);
    cr_assert_eq(p.tensor_list, dt__op_has_trait(op, DT_TRAIT_TENSOR_LIST), "%s", def->name);
    dt_op_args args;
    dt_status st = dt__op_args_parse(op, NULL, &args);
    cr_assert(st == DT_OK || strstr(dt_last_error(), "is required"),
              "%s: its defaults do not parse: %s", def->name, dt_last_error());
    adapted++;
  }
  printf("%d of %d ops called through the list's one adapter (dt__op_run)\n", adapted, DT_OP_COUNT);
  cr_assert_eq(adapted, DT_OP_COUNT);
}

/* Records which ops a call reaches. */
static dt_status record(dt_invocation *inv, void *user) {
  bool *seen = user;
  int op = dt_invocation_op(inv);
  if (op >= 0 && op < DT_OP_COUNT) seen[op] = true;
  return dt_invocation_run(inv);
}

Test(op_list, the_sweep_covers_every_op) {
  bool seen[DT_OP_COUNT] = {0}, direct[DT_OP_COUNT] = {0};
  const char *by[DT_OP_COUNT] = {0};
  for (size_t c = 0; c < N_CASES; c++) {
    direct[cases[c].op] = true;
    if (cases[c].then.on) direct[cases[c].then.op] = true;
    dt_tensor *in[3] = {0}, *out = NULL;
    for (int i = 0; i < cases[c].n_in; i++) {
      double lo = cases[c].lo, hi = cases[c].hi;
      if (lo == 0 && hi == 0) lo = -2, hi = 2;
      in[i] = ref_random(cases[c].ndim[i], cases[c].shape[i], cases[c].dtype[i], lo, hi, 7 + i);
    }
    bool now[DT_OP_COUNT] = {0};
    cr_assert_eq(dt_mode_push(record, now), DT_OK);
    dt_status st = case_run(&cases[c], in, &out);
    cr_assert_eq(dt_mode_pop(), DT_OK);
    cr_assert_eq(st, DT_OK, "case %s: %s", cases[c].name, dt_last_error());
    for (int op = 0; op < DT_OP_COUNT; op++) {
      if (now[op] && !seen[op]) seen[op] = true, by[op] = cases[c].name;
    }
    for (int i = 0; i < cases[c].n_in; i++) dt_tensor_release(in[i]);
    dt_tensor_release(out);
  }
  int covered = 0, missing = 0, n_direct = 0;
  /* The op x device table: a device column says whether the kind registered a kernel. */
  int per_device[2] = {0, 0};
  printf("%-28s %-5s %-23s %-4s %-4s %s\n", "op", "rule", "shape", "cpu", "cuda", "swept by");
  for (int op = 0; op < DT_OP_COUNT; op++) {
    const dt_op_def *def = &dt__op_table[op];
    const char *how = seen[op] ? by[op] : listed_not_swept(op) ? "(listed: not swept)" : "MISSING";
    bool cpu = dt__device_has_kernel(DT_DEVICE_CPU, op);
    bool cuda = dt__device_has_kernel(DT_DEVICE_CUDA, op);
    per_device[0] += cpu, per_device[1] += cuda;
    printf("%-28s %-5d %-23s %-4s %-4s %s\n", def->name, (int)def->rule, shape_names[def->shape],
           cpu ? "yes" : "-", cuda ? "yes" : "-", how);
    covered += seen[op];
    n_direct += direct[op];
    if (!seen[op] && !listed_not_swept(op)) missing++;
  }
  printf("%d of %d ops swept (%d named by a case, %zu cases); kernels: cpu %d of %d, cuda %d of "
         "%d\n",
         covered, DT_OP_COUNT, n_direct, N_CASES, per_device[0], DT_OP_COUNT, per_device[1],
         DT_OP_COUNT);
  cr_assert_eq(per_device[0], DT_OP_COUNT, "the CPU column must be complete");
  /* A build with CUDA registers its table: then every op has a CUDA kernel (issue 24: the
   * coverage table shows 100 %) or is refused on CUDA with a reason listed in cuda_refused. */
  if (per_device[1] > 0) {
    for (int op = 0; op < DT_OP_COUNT; op++) {
      bool has = dt__device_has_kernel(DT_DEVICE_CUDA, op);
      cr_assert(has || listed_cuda_refused(op),
                "%s: no CUDA kernel and no reason listed in cuda_refused", dt__op_table[op].name);
      if (has && listed_cuda_refused(op))
        printf("%s: has a CUDA kernel now: drop it from cuda_refused\n", dt__op_table[op].name);
    }
  }
  cr_assert_eq(missing, 0, "%d ops are reached by no sweep case (see the table)", missing);
}
