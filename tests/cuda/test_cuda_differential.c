/*
 * The differential sweep (ggml's test-backend-ops is the model): every case of the op sweep
 * (tests/sweep_cases.h: every op of the list, by its schema) runs on the CPU and on CUDA with
 * the same inputs, in several variants, and the results must agree within per-dtype
 * tolerances:
 *   - as the case is written, then with its float32 inputs as float64, bfloat16 and float16;
 *   - strided: every input of 2 dims or more non-contiguous (built transposed, viewed back);
 *   - odd and large: the last dim scaled up (block reductions, several blocks), and empty:
 *     dim 0 of every input 0 (variants the op refuses on the CPU are counted, not run);
 *   - backward: loss = sum(output * weights), the gradient of every floating input on both.
 * An op CUDA refuses must refuse with DT_ERR_UNSUPPORTED naming the op and the device; the
 * refusals are listed. Skipped (77) without a GPU.
 */
#include <math.h>
#include <string.h>

#include "cuda/cuda_test.h"

/* The sweep's cases without the Criterion helpers of reference.h (this is a plain program:
 * the inputs are drawn with the library's own random functions). */
#define DT_TESTS_REFERENCE_H
#include "sweep_cases.h"

static const dt_device cuda0 = {DT_DEVICE_CUDA, 0};

typedef enum variant {
  V_AS_IS,
  V_F64,
  V_BF16,
  V_F16,
  V_STRIDED,
  V_LARGE,
  V_EMPTY,
  V_COUNT
} variant;
static const char *const variant_names[] = {"as is",   "float64", "bfloat16", "float16",
                                            "strided", "large",   "empty"};

static int compared, not_applicable, refused, grads_compared;

/* The index and ordering ops beyond the sweep's cases: other dtypes (bfloat16 and integer
 * elements, int32 indices), many ties (integers in a small range), long lines, other dims.
 * Each runs in every variant as the sweep's cases do. */
static const op_case index_cases[] = {
    {"tril -2 bfloat16", DT_OP_TRIL, "diagonal=-2", 1, {3}, {{2, 9, 4}}, {DT_BF16}, .exact = true},
    {"triu 2 int64",
     DT_OP_TRIU,
     "diagonal=2",
     1,
     {2},
     {S2(6, 300)},
     {DT_I64},
     .lo = -50,
     .hi = 50,
     .exact = true},
    {"cumsum dim 0 int32 (to int64)",
     DT_OP_CUMSUM,
     "dim=0",
     1,
     {2},
     {S2(1031, 3)},
     {DT_I32},
     .lo = -100,
     .hi = 100,
     .exact = true},
    {"cumsum dim 2 of 3-d", DT_OP_CUMSUM, "dim=2", 1, {3}, {{3, 4, 9}}},
    {"topk int64 ties indices",
     DT_OP_TOPK,
     "k=5 dim=0",
     1,
     {2},
     {S2(1031, 3)},
     {DT_I64},
     .lo = -3,
     .hi = 3,
     .exact = true,
     .output = 1},
    {"topk k=all dim 1", DT_OP_TOPK, "k=7 dim=1 largest=false", 1, {2}, {S2(5, 7)}},
    {"index_select dim 0 int32 index",
     DT_OP_INDEX_SELECT,
     "dim=0",
     2,
     {2, 1},
     {S2(6, 9), {11}},
     {DT_F32, DT_I32},
     .lo = 0,
     .hi = 6},
    {"gather dim 1 int32 index",
     DT_OP_GATHER,
     "dim=1",
     2,
     {2, 2},
     {S2(5, 7), S2(4, 9)},
     {DT_F32, DT_I32},
     .lo = 0,
     .hi = 5},
    {"cross_entropy_vocab_terms 2 terms",
     DT_OP_CROSS_ENTROPY_VOCAB_TERMS,
     "terms=2",
     3,
     {2, 2, 2},
     {S2(6, 300), S2(6, 1), S2(6, 1)},
     {DT_F32, DT_F32, DT_I64},
     .lo = 0,
     .hi = 6},
};

/* Tolerances by the result's dtype: |got - want| <= atol + rtol |want|. float32 allows for
 * the CPU's float32 fast paths (blocked float sums, vmath.h's exp) against the GPU's double
 * statistics; the 16-bit formats one or two of their ulps. */
static void tolerance(dt_dtype dtype, double *rtol, double *atol) {
  switch (dtype) {
  case DT_F64: *rtol = 1e-10, *atol = 1e-12; break;
  case DT_F32: *rtol = 2e-5, *atol = 2e-6; break;
  case DT_BF16: *rtol = 1.6e-2, *atol = 1.6e-2; break;
  case DT_F16: *rtol = 2e-3, *atol = 2e-3; break;
  default: *rtol = 0, *atol = 0; break; /* integers and bool: exact */
  }
}

/* A CPU tensor of values in [lo, hi) (integers for integer dtypes), from the library's RNG. */
static dt_tensor *random_input(int ndim, const int64_t *shape, dt_dtype dtype, double lo, double hi,
                               uint64_t seed) {
  dt_tensor *t = NULL, *u = NULL, *v = NULL;
  if (!dt_dtype_is_floating(dtype)) {
    int64_t l = (int64_t)lo, h = (int64_t)hi;
    if (dtype == DT_BOOL) l = 0, h = 2;
    if (h <= l) h = l + 1;
    CHECK_OK(dt_randint(l, h, ndim, shape, dtype, seed, &t));
    return t;
  }
  CHECK_OK(dt_rand(ndim, shape, DT_F64, seed, &u));
  CHECK_OK(dt_mul_scalar(u, hi - lo, &v));
  dt_tensor_release(u);
  CHECK_OK(dt_add_scalar(v, lo, &u));
  dt_tensor_release(v);
  CHECK_OK(dt_to(u, dtype, &t));
  dt_tensor_release(u);
  return t;
}

/* The same values, non-contiguous: the last two dims stored swapped, viewed back. */
static dt_tensor *strided_copy(dt_tensor *t) {
  int nd = dt_tensor_ndim(t);
  if (nd < 2) return dt_tensor_retain(t);
  dt_tensor *tt = NULL, *c = NULL, *back = NULL;
  CHECK_OK(dt_transpose(t, -1, -2, &tt));
  CHECK_OK(dt_contiguous(tt, &c));
  CHECK_OK(dt_transpose(c, -1, -2, &back));
  dt_tensor_release(tt);
  dt_tensor_release(c);
  return back;
}

/* The case's shapes for a variant: large scales the last dim unless it is 1 (7 -> 263; a case
 * whose inputs then disagree is refused by the CPU and counted), empty zeroes dim 0 of each
 * input. */
static void variant_shape(variant v, int ndim, const int64_t *in, int64_t *out) {
  for (int d = 0; d < ndim; d++) {
    out[d] = in[d];
    if (v == V_LARGE && d == ndim - 1 && in[d] > 1) out[d] = in[d] * 37 + 4;
    if (v == V_EMPTY && d == 0) out[d] = 0;
  }
}

static dt_dtype variant_dtype(variant v, dt_dtype d) {
  if (d != DT_F32) return d;
  return v == V_F64 ? DT_F64 : v == V_BF16 ? DT_BF16 : v == V_F16 ? DT_F16 : d;
}

/* Whether a (from CUDA, copied back) equals b (the CPU's) within the dtype's tolerance. */
static bool agree(const op_case *c, const char *what, dt_tensor *a, dt_tensor *b) {
  if (dt_tensor_dtype(a) != dt_tensor_dtype(b) || dt_tensor_ndim(a) != dt_tensor_ndim(b) ||
      memcmp(dt_tensor_shape(a), dt_tensor_shape(b), sizeof(int64_t) * (size_t)dt_tensor_ndim(b)) !=
          0) {
    CHECK(false, "%s (%s): shape or dtype differs", c->name, what);
    return false;
  }
  int64_t n = dt_tensor_numel(b);
  double *x = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
  double *y = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
  CHECK_OK(dt_tensor_to_doubles(a, x, n));
  CHECK_OK(dt_tensor_to_doubles(b, y, n));
  double rtol, atol;
  tolerance(dt_tensor_dtype(b), &rtol, &atol);
  if (c->exact) rtol = atol = 0;
  int64_t bad = -1;
  for (int64_t i = 0; i < n && bad < 0; i++) {
    bool nan = isnan(x[i]) || isnan(y[i]);
    if (nan ? !(isnan(x[i]) && isnan(y[i])) : !(fabs(x[i] - y[i]) <= atol + rtol * fabs(y[i])))
      bad = i;
  }
  if (bad >= 0)
    CHECK(false, "%s (%s): element %lld: cuda %.17g, cpu %.17g", c->name, what, (long long)bad,
          x[bad], y[bad]);
  free(x);
  free(y);
  return bad < 0;
}

/* Runs c on inputs on one device; the result copied to the CPU (grads: each input's). */
static dt_status run_on(const op_case *c, dt_tensor **in, bool backward, dt_tensor *weights,
                        dt_tensor **out, dt_tensor **grads) {
  dt_tensor *y = NULL;
  for (int i = 0; backward && i < c->n_in; i++)
    if (dt_dtype_is_floating(dt_tensor_dtype(in[i]))) dt_tensor_set_requires_grad(in[i], true);
  dt_status st = case_run(c, in, &y);
  if (!st && backward) {
    dt_tensor *yw = NULL, *loss = NULL;
    st = dt_mul(y, weights, &yw);
    if (!st) st = dt_sum(yw, &loss);
    if (!st) st = dt_backward(loss, NULL);
    dt_tensor_release(yw);
    dt_tensor_release(loss);
    for (int i = 0; !st && i < c->n_in; i++) {
      dt_tensor *g = NULL;
      grads[i] = NULL;
      if (dt_tensor_requires_grad(in[i]) && !dt_tensor_grad(in[i], &g) && g) {
        st = dt_to_device(g, DT_DEVICE_CPU_VALUE, &grads[i]);
        dt_tensor_release(g);
      }
    }
  }
  if (!st) st = dt_to_device(y, DT_DEVICE_CPU_VALUE, out);
  dt_tensor_release(y);
  return st;
}

/* One case in one variant: forward (and backward when asked) on both devices. */
static void run_variant(const op_case *c, variant v, bool backward, uint64_t seed) {
  dt_tensor *cpu_in[3] = {0}, *gpu_in[3] = {0}, *cpu_out = NULL, *gpu_out = NULL;
  dt_tensor *cpu_g[3] = {0}, *gpu_g[3] = {0}, *weights = NULL, *gpu_weights = NULL;
  for (int i = 0; i < c->n_in; i++) {
    int64_t shape[4];
    variant_shape(v, c->ndim[i], c->shape[i], shape);
    double lo = c->lo, hi = c->hi;
    if (lo == 0 && hi == 0) lo = -2, hi = 2;
    dt_tensor *base =
        random_input(c->ndim[i], shape, variant_dtype(v, c->dtype[i]), lo, hi, seed + (uint64_t)i);
    dt_tensor *dev = NULL;
    CHECK_OK(dt_to_device(base, cuda0, &dev));
    cpu_in[i] = v == V_STRIDED ? strided_copy(base) : dt_tensor_retain(base);
    gpu_in[i] = v == V_STRIDED ? strided_copy(dev) : dt_tensor_retain(dev);
    dt_tensor_release(base);
    dt_tensor_release(dev);
  }
  char what[96];
  snprintf(what, sizeof what, "%s%s", variant_names[v], backward ? ", backward" : "");
  /* the weights of the loss take the forward's output shape and dtype */
  bool prev = dt_grad_mode_set(false);
  dt_status st = case_run(c, cpu_in, &cpu_out);
  dt_grad_mode_set(prev);
  if (st || (backward && !dt_dtype_is_floating(dt_tensor_dtype(cpu_out)))) {
    not_applicable++; /* the CPU refuses the variant (or nothing to differentiate) */
    goto done;
  }
  if (backward) {
    weights = random_input(dt_tensor_ndim(cpu_out), dt_tensor_shape(cpu_out),
                           dt_tensor_dtype(cpu_out), -1, 1, seed + 77);
    CHECK_OK(dt_to_device(weights, cuda0, &gpu_weights));
    dt_tensor_release(cpu_out);
    cpu_out = NULL;
    if (run_on(c, cpu_in, true, weights, &cpu_out, cpu_g)) {
      not_applicable++; /* no backward formula, or refused in place on a leaf */
      goto done;
    }
  }
  st = run_on(c, gpu_in, backward, gpu_weights, &gpu_out, gpu_g);
  if (st == DT_ERR_UNSUPPORTED && strstr(dt_last_error(), "cuda")) {
    refused++;
    if (v == V_AS_IS && !backward) printf("refused on CUDA: %s: %s\n", c->name, dt_last_error());
    goto done;
  }
  CHECK(st == DT_OK, "%s (%s): cuda failed: %s", c->name, what, dt_last_error());
  if (st) goto done;
  compared++;
  agree(c, what, gpu_out, cpu_out);
  for (int i = 0; backward && i < c->n_in; i++) {
    CHECK(!cpu_g[i] == !gpu_g[i], "%s (%s): input %d has a gradient on one device only", c->name,
          what, i);
    if (cpu_g[i] && gpu_g[i]) {
      char gw[128];
      snprintf(gw, sizeof gw, "%s, grad of input %d", what, i);
      agree(c, gw, gpu_g[i], cpu_g[i]);
      grads_compared++;
    }
  }
done:
  for (int i = 0; i < 3; i++) {
    dt_tensor_release(cpu_in[i]);
    dt_tensor_release(gpu_in[i]);
    dt_tensor_release(cpu_g[i]);
    dt_tensor_release(gpu_g[i]);
  }
  dt_tensor_release(cpu_out);
  dt_tensor_release(gpu_out);
  dt_tensor_release(weights);
  dt_tensor_release(gpu_weights);
}

/* Reductions and rows long enough for the block kernels, with NaN and ties for the extremes. */
static void run_extremes(void) {
  int64_t shape[2] = {3, 5003};
  dt_tensor *x = random_input(2, shape, DT_F32, -3, 3, 9), *g = NULL;
  float *p = dt_tensor_data(x);
  p[17] = NAN;           /* row 0: the NaN wins max and argmax */
  p[5003 + 100] = 50.0f; /* row 1: a tie, the first index wins */
  p[5003 + 4000] = 50.0f;
  CHECK_OK(dt_to_device(x, cuda0, &g));
  static const op_case red[] = {
      {"max.dim 1 (NaN, ties)",
       DT_OP_MAX_DIM,
       "dim=1",
       1,
       {2},
       {{3, 5003}},
       .output = 1,
       .exact = true},
      {"argmax dim 1 (NaN, ties)", DT_OP_ARGMAX, "dim=1", 1, {2}, {{3, 5003}}, .exact = true},
      {"amax dim 1", DT_OP_AMAX, "dim=1", 1, {2}, {{3, 5003}}},
      {"sum dim 1 (long rows)", DT_OP_SUM_DIM, "dim=1", 1, {2}, {{3, 5003}}},
      {"softmax dim 1 (long rows)", DT_OP_SOFTMAX, "dim=1", 1, {2}, {{3, 5003}}},
      /* topk's order over a block's threads: the NaN first, the tie by position */
      {"topk k=40 values (NaN, ties)",
       DT_OP_TOPK,
       "k=40 dim=1",
       1,
       {2},
       {{3, 5003}},
       .exact = true},
      {"topk k=40 indices (NaN, ties)",
       DT_OP_TOPK,
       "k=40 dim=1",
       1,
       {2},
       {{3, 5003}},
       .exact = true,
       .output = 1},
      {"topk smallest k=40 indices",
       DT_OP_TOPK,
       "k=40 dim=1 largest=false",
       1,
       {2},
       {{3, 5003}},
       .exact = true,
       .output = 1},
      {"cumsum dim 1 (long rows, NaN)", DT_OP_CUMSUM, "dim=1", 1, {2}, {{3, 5003}}},
  };
  for (size_t k = 0; k < sizeof red / sizeof *red; k++) {
    dt_tensor *a = NULL, *b = NULL, *h = NULL;
    CHECK_OK(case_run(&red[k], &x, &a));
    CHECK_OK(case_run(&red[k], &g, &b));
    CHECK_OK(dt_to_device(b, DT_DEVICE_CPU_VALUE, &h));
    agree(&red[k], "as is", h, a);
    compared++;
    dt_tensor_release(a);
    dt_tensor_release(b);
    dt_tensor_release(h);
  }
  dt_tensor_release(x);
  dt_tensor_release(g);
}

/* Random tensors drawn on the GPU are the CPU's, bit for bit (tensor/philox.h). */
static void run_random(void) {
  int64_t shape[2] = {37, 101};
  dt_dtype dtypes[] = {DT_F32, DT_F64, DT_BF16, DT_F16};
  for (size_t k = 0; k < sizeof dtypes / sizeof *dtypes; k++) {
    dt_tensor *c = NULL, *g = NULL, *h = NULL;
    dt_tensor_options on = {.device = cuda0};
    CHECK_OK(dt_empty(2, shape, dtypes[k], &c));
    CHECK_OK(dt_empty_ex(2, shape, dtypes[k], &on, &g));
    CHECK_OK(dt_uniform_(c, -1.5, 2.0, 1234));
    CHECK_OK(dt_uniform_(g, -1.5, 2.0, 1234));
    CHECK_OK(dt_to_device(g, DT_DEVICE_CPU_VALUE, &h));
    CHECK(memcmp(dt_tensor_data(c), dt_tensor_data(h),
                 (size_t)dt_tensor_numel(c) * dt_dtype_size(dtypes[k])) == 0,
          "uniform_ %s: the GPU's values differ from the CPU's", dt_dtype_name(dtypes[k]));
    compared++;
    dt_tensor_release(c);
    dt_tensor_release(g);
    dt_tensor_release(h);
  }
}

/* A bad index fails the op naming it, before anything is written. */
static void run_bad_index(void) {
  int64_t ws[2] = {10, 4}, is[1] = {3};
  dt_tensor *w = random_input(2, ws, DT_F32, -1, 1, 5), *wg = NULL, *ig = NULL, *out = NULL;
  int64_t idx[3] = {1, 12, 2};
  dt_tensor_options on = {.device = cuda0};
  CHECK_OK(dt_to_device(w, cuda0, &wg));
  CHECK_OK(dt_from_data_ex(idx, 1, is, DT_I64, &on, &ig));
  dt_status st = dt_embedding(wg, ig, &out);
  CHECK(st == DT_ERR_INDEX && strstr(dt_last_error(), "12"),
        "embedding with index 12 of 10 rows: %d: %s", (int)st, dt_last_error());
  /* index_select and gather check theirs on the device first, as the CPU does */
  st = dt_index_select(wg, 0, ig, &out);
  CHECK(st == DT_ERR_INDEX && strstr(dt_last_error(), "index 12 at position 1"),
        "index_select with index 12 of 10: %d: %s", (int)st, dt_last_error());
  dt_tensor *ig2 = NULL;
  int64_t gidx[8] = {0, 1, 2, 3, 3, 2, -1, 0}, gs[2] = {2, 4};
  CHECK_OK(dt_from_data_ex(gidx, 2, gs, DT_I64, &on, &ig2));
  st = dt_gather(wg, 1, ig2, &out);
  CHECK(st == DT_ERR_INDEX && strstr(dt_last_error(), "index -1 at position 6"),
        "gather with index -1: %d: %s", (int)st, dt_last_error());
  CHECK(out == NULL, "a failed gather left an output");
  dt_tensor_release(w);
  dt_tensor_release(wg);
  dt_tensor_release(ig);
  dt_tensor_release(ig2);
  dt_tensor_release(out);
}

int main(void) {
  dt_test_require_gpu("test_cuda_differential");
  for (size_t k = 0; k < N_CASES; k++) {
    for (int v = 0; v < V_COUNT; v++) run_variant(&cases[k], (variant)v, false, 1000 + 10 * k);
    run_variant(&cases[k], V_AS_IS, true, 5000 + 10 * k);
    run_variant(&cases[k], V_F64, true, 7000 + 10 * k);
  }
  for (size_t k = 0; k < sizeof index_cases / sizeof *index_cases; k++) {
    const op_case *c = &index_cases[k];
    for (int v = 0; v < V_COUNT; v++) run_variant(c, (variant)v, false, 3000 + 10 * k);
    run_variant(c, V_AS_IS, true, 4000 + 10 * k);
    run_variant(c, V_F64, true, 6000 + 10 * k);
  }
  run_extremes();
  run_random();
  run_bad_index();
  printf("test_cuda_differential: %d comparisons (%d gradients), %d variants the CPU refuses, "
         "%d refused on CUDA\n",
         compared, grads_compared, not_applicable, refused);
  return dt_test_result("test_cuda_differential");
}
