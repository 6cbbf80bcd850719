/* The fused backward ops of softmax, log_softmax, layer_norm and rms_norm, through dt_backward:
 * float64 gradients (input, weight, bias) against central finite differences of the forward
 * op; strided float64 inputs (the gathered double path) and float32 inputs (the float32 row
 * path, contiguous and strided) against those float64 gradients; and the backward ops' own
 * argument errors. Includes ops/op_impl.h: dt__softmax_backward and dt__norm_backward_input
 * are the ops' internal dispatch functions (the public path to them is dt_backward). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dtensor/dtensor.h"
#include "ops/op_impl.h"
#include "reference.h"

#define MAXN 256

typedef enum { LAYER_NORM, LAYER_NORM_NO_AFFINE, RMS_NORM, SOFTMAX, LOG_SOFTMAX } op_kind;

typedef struct problem {
  op_kind kind;
  int ndim, k; /* k: normalized dims (norms) or the softmax dim */
  int64_t shape[3];
} problem;

static int n_params(op_kind kind) { return kind == LAYER_NORM ? 3 : kind == RMS_NORM ? 2 : 1; }

static dt_status forward(const problem *p, dt_tensor **in, dt_tensor **out) {
  const int64_t *ns = p->shape + p->ndim - p->k;
  switch (p->kind) {
  case LAYER_NORM: return dt_layer_norm(in[0], p->k, ns, in[1], in[2], 1e-5, out);
  case LAYER_NORM_NO_AFFINE: return dt_layer_norm(in[0], p->k, ns, NULL, NULL, 1e-5, out);
  case RMS_NORM: return dt_rms_norm(in[0], p->k, ns, in[1], 1e-5, out);
  case SOFTMAX: return dt_softmax(in[0], p->k, out);
  case LOG_SOFTMAX: return dt_log_softmax(in[0], p->k, out);
  }
  return DT_ERR_INVALID;
}

/* sum(forward(in) * G) in double. */
static double loss(const problem *p, dt_tensor **in, const double *G, int64_t n) {
  dt_tensor *y = NULL;
  cr_assert_eq(forward(p, in, &y), DT_OK, "%s", dt_last_error());
  double *v = ref_values(y), s = 0;
  for (int64_t i = 0; i < n; i++) s += v[i] * G[i];
  free(v);
  dt_tensor_release(y);
  return s;
}

/* The inputs of p (x, then the parameters over the normalized dims) as `dtype`, strided x when
 * asked; G the incoming gradient's values. */
static void make_inputs(const problem *p, dt_dtype dtype, bool strided, dt_tensor **in) {
  in[0] = strided ? ref_random_strided(p->ndim, p->shape, dtype, -2, 3, 11)
                  : ref_random(p->ndim, p->shape, dtype, -2, 3, 11);
  for (int i = 1; i < n_params(p->kind); i++)
    in[i] = ref_random(p->k, p->shape + p->ndim - p->k, dtype, 0.5, 1.5, 20 + (uint64_t)i);
}

/* The gradients of every input through dt_backward, as doubles into grads[i]. */
static void autograd(const problem *p, dt_tensor **in, const double *G, int64_t n, double **grads) {
  dt_tensor *y = NULL, *g = NULL;
  int np = n_params(p->kind);
  for (int i = 0; i < np; i++) cr_assert_eq(dt_tensor_set_requires_grad(in[i], true), DT_OK);
  cr_assert_eq(forward(p, in, &y), DT_OK, "%s", dt_last_error());
  dt_tensor *g64 = ref_tensor(p->ndim, p->shape, DT_F64, G);
  cr_assert_eq(dt_to(g64, dt_tensor_dtype(y), &g), DT_OK);
  cr_assert_eq(dt_backward(y, g), DT_OK, "%s", dt_last_error());
  for (int i = 0; i < np; i++) {
    dt_tensor *gi = NULL;
    cr_assert_eq(dt_tensor_grad(in[i], &gi), DT_OK);
    cr_assert(gi, "input %d got no gradient", i);
    grads[i] = ref_values(gi);
    dt_tensor_release(gi);
  }
  dt_tensor_release(y);
  dt_tensor_release(g);
  dt_tensor_release(g64);
}

static int64_t numel_of(int n, const int64_t *shape) {
  int64_t c = 1;
  for (int i = 0; i < n; i++) c *= shape[i];
  return c;
}

static void release_inputs(const problem *p, dt_tensor **in) {
  for (int i = 0; i < n_params(p->kind); i++) dt_tensor_release(in[i]);
}

/* float64 gradients against central differences, then the other paths against them. */
static void check_problem(const problem *p) {
  int64_t n = numel_of(p->ndim, p->shape);
  int np = n_params(p->kind);
  double G[MAXN];
  for (int64_t i = 0; i < n; i++) G[i] = sin(0.7 * (double)i) + 0.3;
  dt_tensor *in[3] = {NULL, NULL, NULL};
  double *want[3] = {NULL, NULL, NULL};
  make_inputs(p, DT_F64, false, in);
  autograd(p, in, G, n, want);
  for (int i = 0; i < np; i++) {
    dt_tensor *t = NULL;
    cr_assert_eq(dt_detach(in[i], &t), DT_OK);
    double *data = dt_tensor_data(t);
    int64_t m = dt_tensor_numel(t);
    for (int64_t j = 0; j < m; j++) {
      const double h = 1e-6, keep = data[j];
      dt_tensor *fd_in[3] = {in[0], in[1], in[2]};
      fd_in[i] = t;
      data[j] = keep + h;
      double up = loss(p, fd_in, G, n);
      data[j] = keep - h;
      double down = loss(p, fd_in, G, n);
      data[j] = keep;
      double fd = (up - down) / (2 * h);
      cr_assert(fabs(want[i][j] - fd) <= 1e-6 * (1 + fabs(fd)),
                "kind %d input %d element %lld: autograd %.12g, differences %.12g", p->kind, i,
                (long long)j, want[i][j], fd);
    }
    dt_tensor_release(t);
  }
  release_inputs(p, in);
  /* Strided float64, float32 contiguous and strided: the same gradients. */
  for (int variant = 0; variant < 3; variant++) {
    dt_dtype dtype = variant == 0 ? DT_F64 : DT_F32;
    double tol = dtype == DT_F64 ? 1e-12 : 2e-5;
    double *got[3] = {NULL, NULL, NULL};
    make_inputs(p, dtype, variant != 1, in);
    autograd(p, in, G, n, got);
    for (int i = 0; i < np; i++) {
      int64_t m = i == 0 ? n : numel_of(p->k, p->shape + p->ndim - p->k);
      double scale = 0;
      for (int64_t j = 0; j < m; j++) scale = fmax(scale, fabs(want[i][j]));
      for (int64_t j = 0; j < m; j++) {
        cr_assert(fabs(got[i][j] - want[i][j]) <= tol * (1 + scale),
                  "kind %d variant %d input %d element %lld: %.9g, want %.9g", p->kind, variant, i,
                  (long long)j, got[i][j], want[i][j]);
      }
      free(got[i]);
    }
    release_inputs(p, in);
  }
  for (int i = 0; i < np; i++) free(want[i]);
}

Test(norm_backward, layer_norm_matches_finite_differences) {
  check_problem(&(problem){LAYER_NORM, 2, 1, {6, 9}});
  check_problem(&(problem){LAYER_NORM, 3, 2, {4, 3, 5}});
  check_problem(&(problem){LAYER_NORM_NO_AFFINE, 3, 1, {2, 3, 7}});
}

Test(norm_backward, rms_norm_matches_finite_differences) {
  check_problem(&(problem){RMS_NORM, 2, 1, {6, 9}});
  check_problem(&(problem){RMS_NORM, 3, 2, {4, 3, 5}});
}

Test(norm_backward, softmax_and_log_softmax_match_finite_differences) {
  check_problem(&(problem){SOFTMAX, 2, 1, {5, 11}});
  check_problem(&(problem){SOFTMAX, 3, 1, {3, 7, 4}});
  check_problem(&(problem){LOG_SOFTMAX, 2, 1, {5, 11}});
  check_problem(&(problem){LOG_SOFTMAX, 3, 0, {3, 7, 4}});
}

/* A row longer than a float32 block (1024) with a large mean: the float32 row path keeps the
 * layer_norm gradient's digits (two-pass statistics). */
Test(norm_backward, long_float32_rows_with_a_large_mean) {
  problem p = {LAYER_NORM, 2, 1, {3, 3000}};
  int64_t n = 9000;
  double *G = malloc(sizeof(double) * (size_t)n);
  for (int64_t i = 0; i < n; i++) G[i] = cos(0.3 * (double)i);
  dt_tensor *x64 = ref_random(2, p.shape, DT_F64, 99, 101, 5), *in[3] = {NULL, NULL, NULL};
  double *want[3] = {NULL, NULL, NULL}, *got[3] = {NULL, NULL, NULL};
  for (int pass = 0; pass < 2; pass++) {
    dt_dtype dtype = pass ? DT_F32 : DT_F64;
    cr_assert_eq(dt_to(x64, dtype, &in[0]), DT_OK);
    in[1] = ref_random(1, p.shape + 1, dtype, 0.5, 1.5, 21);
    in[2] = ref_random(1, p.shape + 1, dtype, -1, 1, 22);
    autograd(&p, in, G, n, pass ? got : want);
    release_inputs(&p, in);
  }
  for (int i = 0; i < 3; i++) {
    int64_t m = i == 0 ? n : 3000;
    double scale = 0;
    for (int64_t j = 0; j < m; j++) scale = fmax(scale, fabs(want[i][j]));
    for (int64_t j = 0; j < m; j++)
      cr_assert(fabs(got[i][j] - want[i][j]) <= 1e-4 * scale, "input %d element %lld: %g vs %g", i,
                (long long)j, got[i][j], want[i][j]);
    free(want[i]);
    free(got[i]);
  }
  dt_tensor_release(x64);
  free(G);
}

/* layer_norm_backward_all against the two ops it fuses (the same bits: dx as
 * layer_norm_backward, dw and db as layer_norm_backward_affine), against a naive double loop,
 * and on 1 and 2 threads (the same bits); rows not a multiple of the affine chunk (64), one
 * and two normalized dims, with and without a weight, float32 and float64. */
static void check_backward_all(int ndim, const int64_t *shape, int k, dt_dtype dtype, bool with_w) {
  const int64_t *norm = shape + ndim - k;
  int64_t n = numel_of(k, norm), rows = numel_of(ndim - k, shape);
  const double eps = 1e-5;
  dt_tensor *g = ref_random(ndim, shape, dtype, -1, 1, 31),
            *x = ref_random(ndim, shape, dtype, -2, 3, 32);
  dt_tensor *w = with_w ? ref_random(k, norm, dtype, 0.5, 1.5, 33) : NULL;
  dt_tensor *all[3] = {NULL, NULL, NULL}, *two[3] = {NULL, NULL, NULL},
            *par[3] = {NULL, NULL, NULL};
  cr_assert_eq(dt__layer_norm_backward_all(g, x, k, norm, w, eps, &all[0], &all[1], &all[2]), DT_OK,
               "%s", dt_last_error());
  cr_assert_eq(dt__norm_backward_input(false, g, x, k, norm, w, eps, &two[0]), DT_OK);
  cr_assert_eq(dt__norm_backward_affine(false, g, x, k, norm, eps, &two[1], &two[2]), DT_OK);
  int threads = dt_get_num_threads();
  cr_assert_eq(dt_set_num_threads(2), DT_OK);
  cr_assert_eq(dt__layer_norm_backward_all(g, x, k, norm, w, eps, &par[0], &par[1], &par[2]),
               DT_OK);
  cr_assert_eq(dt_set_num_threads(threads), DT_OK);
  size_t esize = dtype == DT_F32 ? 4 : 8;
  for (int i = 0; i < 3; i++) {
    size_t bytes = esize * (size_t)(i == 0 ? n * rows : n);
    cr_assert_eq(memcmp(dt_tensor_data(all[i]), dt_tensor_data(two[i]), bytes), 0,
                 "output %d differs from the separate op's", i);
    cr_assert_eq(memcmp(dt_tensor_data(all[i]), dt_tensor_data(par[i]), bytes), 0,
                 "output %d differs on 2 threads", i);
  }
  double *gv = ref_values(g), *xv = ref_values(x), *wv = w ? ref_values(w) : NULL;
  double *dx = calloc((size_t)(n * rows), sizeof(double)), *dw = calloc((size_t)n, sizeof(double));
  double *db = calloc((size_t)n, sizeof(double));
  for (int64_t r = 0; r < rows; r++) {
    const double *gr = gv + r * n, *xr = xv + r * n;
    double mean = 0, var = 0, a = 0, b = 0;
    for (int64_t i = 0; i < n; i++) mean += xr[i] / (double)n;
    for (int64_t i = 0; i < n; i++) var += (xr[i] - mean) * (xr[i] - mean) / (double)n;
    double rstd = 1 / sqrt(var + eps);
    for (int64_t i = 0; i < n; i++) {
      double gw = gr[i] * (wv ? wv[i] : 1), xhat = (xr[i] - mean) * rstd;
      a += gw / (double)n, b += gw * xhat / (double)n;
      dw[i] += gr[i] * xhat, db[i] += gr[i];
    }
    for (int64_t i = 0; i < n; i++)
      dx[r * n + i] = rstd * (gr[i] * (wv ? wv[i] : 1) - a - (xr[i] - mean) * rstd * b);
  }
  double *want[3] = {dx, dw, db}, tol = dtype == DT_F32 ? 2e-5 : 1e-11;
  for (int i = 0; i < 3; i++) {
    double *got = ref_values(all[i]), scale = 0;
    int64_t m = i == 0 ? n * rows : n;
    for (int64_t j = 0; j < m; j++) scale = fmax(scale, fabs(want[i][j]));
    for (int64_t j = 0; j < m; j++)
      cr_assert(fabs(got[j] - want[i][j]) <= tol * scale, "output %d element %lld: %g vs %g", i,
                (long long)j, got[j], want[i][j]);
    free(got);
  }
  for (int i = 0; i < 3; i++) {
    dt_tensor_release(all[i]);
    dt_tensor_release(two[i]);
    dt_tensor_release(par[i]);
  }
  free(gv), free(xv), free(wv), free(dx), free(dw), free(db);
  dt_tensor_release(g);
  dt_tensor_release(x);
  dt_tensor_release(w);
}

Test(norm_backward, layer_norm_backward_all_matches_the_two_ops_and_a_reference) {
  static const dt_dtype dtypes[] = {DT_F32, DT_F64};
  for (int d = 0; d < 2; d++) {
    for (int with_w = 0; with_w < 2; with_w++) {
      check_backward_all(3, (int64_t[]){5, 33, 70}, 1, dtypes[d], with_w);
      check_backward_all(3, (int64_t[]){4, 6, 10}, 2, dtypes[d], with_w);
    }
  }
  /* Its arguments are checked as the two ops' are, naming it. */
  dt_tensor *a = ref_random(2, (int64_t[]){3, 4}, DT_F32, 0, 1, 1);
  dt_tensor *b = ref_random(2, (int64_t[]){3, 5}, DT_F32, 0, 1, 2), *o[3] = {NULL, NULL, NULL};
  cr_assert_eq(
      dt__layer_norm_backward_all(a, b, 1, (int64_t[]){5}, NULL, 1e-5, &o[0], &o[1], &o[2]),
      DT_ERR_SHAPE);
  ref_assert_error_mentions("layer_norm_backward_all", "grad_output");
  cr_assert(!o[0] && !o[1] && !o[2]);
  dt_tensor_release(a);
  dt_tensor_release(b);
}

Test(norm_backward, argument_errors) {
  dt_tensor *a = ref_random(2, (int64_t[]){3, 4}, DT_F32, 0, 1, 1);
  dt_tensor *b = ref_random(2, (int64_t[]){3, 5}, DT_F32, 0, 1, 2);
  dt_tensor *c = ref_random(2, (int64_t[]){3, 4}, DT_F64, 0, 1, 3);
  dt_tensor *out = NULL;
  cr_assert_eq(dt__softmax_backward(a, b, 1, false, &out), DT_ERR_SHAPE);
  ref_assert_error_mentions("softmax_backward", "[3, 5]");
  cr_assert_eq(dt__softmax_backward(a, c, 1, true, &out), DT_ERR_DTYPE);
  ref_assert_error_mentions("log_softmax_backward", "float64");
  cr_assert_eq(dt__softmax_backward(a, a, 2, false, &out), DT_ERR_INVALID);
  cr_assert_eq(dt__norm_backward_input(false, a, b, 1, (int64_t[]){5}, NULL, 1e-5, &out),
               DT_ERR_SHAPE);
  ref_assert_error_mentions("layer_norm_backward", "grad_output");
  cr_assert_eq(dt__norm_backward_input(true, a, a, 1, (int64_t[]){5}, NULL, 1e-5, &out),
               DT_ERR_SHAPE);
  ref_assert_error_mentions("rms_norm_backward", "normalized_shape");
  cr_assert_eq(dt__norm_backward_input(true, a, a, 1, (int64_t[]){4}, b, 1e-5, &out), DT_ERR_SHAPE);
  ref_assert_error_mentions("rms_norm_backward", "weight");
  cr_assert_null(out);
  dt_tensor_release(a);
  dt_tensor_release(b);
  dt_tensor_release(c);
}
