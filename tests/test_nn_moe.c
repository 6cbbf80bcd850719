/*
 * The sparse mixture-of-experts MLP (dt_nn_moe) against naive loops in double: the router's
 * softmax, top-k with ties to the lower expert, renormalised weights, SwiGLU experts, the
 * weighted sum; an expert without tokens; the load-balancing and z losses; gradients of the
 * input and of every weight against central finite differences (float64 parameters); and bad
 * arguments.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtensor/dtensor.h"

enum { N = 10, D = 6, E = 4, K = 2, F = 5 };

static double *values(const dt_module *m, const char *fqn, int64_t n) {
  dt_tensor *t = dt_module_get_tensor(m, fqn);
  cr_assert_not_null(t, "no tensor %s", fqn);
  double *v = malloc(sizeof(double) * (size_t)n);
  cr_assert_eq(dt_tensor_to_doubles(t, v, n), DT_OK);
  return v;
}

static double silu(double x) { return x / (1 + exp(-x)); }

/* y [N, D] of x [N, D]; counts[e] assignments, aux the load-balancing loss, z the z-loss. */
static void moe_ref(const dt_module *m, bool renorm, const double *x, double *y, int *counts,
                    double *aux, double *z) {
  double *wr = values(m, "gate.weight", E * D);
  double P[E] = {0};
  for (int e = 0; e < E; e++) counts[e] = 0;
  *z = 0;
  memset(y, 0, sizeof(double) * N * D);
  for (int t = 0; t < N; t++) {
    double lg[E], p[E], mx = -INFINITY, sum = 0;
    for (int e = 0; e < E; e++) {
      lg[e] = 0;
      for (int i = 0; i < D; i++) lg[e] += x[t * D + i] * wr[e * D + i];
      mx = fmax(mx, lg[e]);
    }
    for (int e = 0; e < E; e++) sum += p[e] = exp(lg[e] - mx);
    for (int e = 0; e < E; e++) p[e] /= sum, P[e] += p[e] / N;
    double lse = mx + log(sum);
    *z += lse * lse / N;
    int pick[K];
    bool used[E] = {false};
    double wsum = 0;
    for (int s = 0; s < K; s++) {
      int best = -1;
      for (int e = 0; e < E; e++)
        if (!used[e] && (best < 0 || p[e] > p[best])) best = e;
      used[best] = true, pick[s] = best, wsum += p[best];
    }
    for (int s = 0; s < K; s++) {
      int e = pick[s];
      counts[e]++;
      char name[64];
      snprintf(name, sizeof name, "experts.%d.gate_proj.weight", e);
      double *wg = values(m, name, F * D);
      snprintf(name, sizeof name, "experts.%d.up_proj.weight", e);
      double *wu = values(m, name, F * D);
      snprintf(name, sizeof name, "experts.%d.down_proj.weight", e);
      double *wd = values(m, name, D * F);
      double h[F];
      for (int f = 0; f < F; f++) {
        double g = 0, u = 0;
        for (int i = 0; i < D; i++)
          g += x[t * D + i] * wg[f * D + i], u += x[t * D + i] * wu[f * D + i];
        h[f] = silu(g) * u;
      }
      double w = renorm ? p[e] / wsum : p[e];
      for (int i = 0; i < D; i++) {
        double o = 0;
        for (int f = 0; f < F; f++) o += h[f] * wd[i * F + f];
        y[t * D + i] += w * o;
      }
      free(wg), free(wu), free(wd);
    }
  }
  *aux = 0;
  for (int e = 0; e < E; e++) *aux += E * ((double)counts[e] / (N * K)) * P[e];
  free(wr);
}

static dt_module *make(bool renorm, double aux, double z) {
  dt_nn_moe_options o = {.n_experts = E,
                         .top_k = K,
                         .hidden = F,
                         .norm_topk_prob = renorm,
                         .router_aux_loss_coef = aux,
                         .router_z_loss_coef = z,
                         .seed = 3};
  dt_module *m = NULL;
  cr_assert_eq(dt_nn_moe(D, &o, &m), DT_OK, "%s", dt_last_error());
  return m;
}

static void check(bool renorm) {
  dt_module *m = make(renorm, 0.01, 0.001);
  dt_tensor *x = NULL, *y = NULL, *aux = NULL;
  cr_assert_eq(dt_randn(3, (int64_t[]){2, N / 2, D}, DT_F32, 5, &x), DT_OK);
  cr_assert_eq(dt_module_forward(m, x, &y), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_tensor_ndim(y), 3);
  double xv[N * D], got[N * D], want[N * D], ref_aux, ref_z, a = 0;
  int counts[E];
  cr_assert_eq(dt_tensor_to_doubles(x, xv, N * D), DT_OK);
  cr_assert_eq(dt_tensor_to_doubles(y, got, N * D), DT_OK);
  moe_ref(m, renorm, xv, want, counts, &ref_aux, &ref_z);
  for (int i = 0; i < N * D; i++)
    cr_assert(fabs(got[i] - want[i]) <= 1e-5 * (1 + fabs(want[i])), "element %d: %.7g, want %.7g",
              i, got[i], want[i]);
  int64_t c[E];
  cr_assert_eq(dt_nn_moe_expert_counts(m, c, E), E);
  for (int e = 0; e < E; e++)
    cr_assert_eq(c[e], counts[e], "expert %d: %lld, want %d", e, (long long)c[e], counts[e]);
  cr_assert_eq(dt_nn_moe_aux_loss(m, &aux), DT_OK, "%s", dt_last_error());
  cr_assert_not_null(aux);
  cr_assert_eq(dt_tensor_to_doubles(aux, &a, 1), DT_OK);
  double w = 0.01 * ref_aux + 0.001 * ref_z;
  cr_assert(fabs(a - w) <= 1e-5 * fabs(w), "aux %.9g, want %.9g", a, w);
  dt_tensor_release(x), dt_tensor_release(y), dt_tensor_release(aux);
  dt_module_destroy(m);
}

Test(nn_moe, mixtral_routing_renormalised_matches_naive_loops) { check(true); }
Test(nn_moe, unnormalised_routing_matches_naive_loops) { check(false); }

/* A router that sends every token to experts 0 and 1: experts 2 and 3 get none and no gradient,
 * the output still matches. */
Test(nn_moe, experts_without_tokens_cost_nothing) {
  dt_module *m = make(true, 0, 0);
  dt_tensor *wr = dt_module_get_tensor(m, "gate.weight");
  float big[E * D];
  for (int e = 0; e < E; e++)
    for (int i = 0; i < D; i++) big[e * D + i] = e < 2 ? 0.0f : -50.0f;
  dt_tensor *nw = NULL;
  cr_assert_eq(dt_from_data(big, 2, (int64_t[]){E, D}, DT_F32, &nw), DT_OK);
  cr_assert_eq(dt_copy_(wr, nw), DT_OK, "%s", dt_last_error());
  dt_tensor *x = NULL, *y = NULL;
  cr_assert_eq(dt_rand(2, (int64_t[]){N, D}, DT_F32, 8, &x), DT_OK); /* positive: logits e>=2 < 0 */
  cr_assert_eq(dt_module_forward(m, x, &y), DT_OK, "%s", dt_last_error());
  int64_t c[E];
  cr_assert_eq(dt_nn_moe_expert_counts(m, c, E), E);
  cr_assert(c[0] == N && c[1] == N && c[2] == 0 && c[3] == 0, "counts %lld %lld %lld %lld",
            (long long)c[0], (long long)c[1], (long long)c[2], (long long)c[3]);
  double xv[N * D], got[N * D], want[N * D], a, z;
  int counts[E];
  cr_assert_eq(dt_tensor_to_doubles(x, xv, N * D), DT_OK);
  cr_assert_eq(dt_tensor_to_doubles(y, got, N * D), DT_OK);
  moe_ref(m, true, xv, want, counts, &a, &z);
  for (int i = 0; i < N * D; i++)
    cr_assert(fabs(got[i] - want[i]) <= 1e-5 * (1 + fabs(want[i])), "element %d", i);
  dt_tensor *aux = (dt_tensor *)1;
  cr_assert_eq(dt_nn_moe_aux_loss(m, &aux), DT_OK);
  cr_assert_null(aux, "no auxiliary loss was asked for");
  dt_tensor_release(nw), dt_tensor_release(x), dt_tensor_release(y);
  dt_module_destroy(m);
}

/* Every parameter of the tree made float64 and a leaf that requires grad. */
static void make_f64(dt_module *m) {
  for (int i = 0; i < dt_module_child_count(m); i++) make_f64(dt_module_child(m, i));
  dt_tensor *w = dt_module_parameter(m, "weight");
  if (!w) return;
  dt_tensor *d = NULL;
  cr_assert_eq(dt_to(w, DT_F64, &d), DT_OK);
  cr_assert_eq(dt_tensor_set_requires_grad(d, true), DT_OK);
  cr_assert_eq(dt_module_set_tensor(m, "weight", d), DT_OK);
  dt_tensor_release(d);
}

/* L = sum(y * r) + aux, for finite differences. */
static double loss_of(dt_module *m, dt_tensor *x, dt_tensor *r, dt_tensor **graph) {
  dt_tensor *y = NULL, *yr = NULL, *s = NULL, *aux = NULL, *l = NULL;
  cr_assert_eq(dt_module_forward(m, x, &y), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_mul(y, r, &yr), DT_OK);
  cr_assert_eq(dt_sum(yr, &s), DT_OK);
  cr_assert_eq(dt_nn_moe_aux_loss(m, &aux), DT_OK);
  dt_tensor *aux64 = NULL;
  cr_assert_eq(dt_to(aux, DT_F64, &aux64), DT_OK);
  cr_assert_eq(dt_add(s, aux64, &l), DT_OK);
  double v = 0;
  cr_assert_eq(dt_tensor_to_doubles(l, &v, 1), DT_OK);
  dt_tensor_release(y), dt_tensor_release(yr), dt_tensor_release(s), dt_tensor_release(aux);
  dt_tensor_release(aux64);
  if (graph) {
    *graph = l;
  } else {
    dt_tensor_release(l);
  }
  return v;
}

Test(nn_moe, gradients_match_finite_differences) {
  dt_module *m = make(true, 0.5, 0.1);
  make_f64(m);
  dt_tensor *x = NULL, *r = NULL, *l = NULL;
  cr_assert_eq(dt_randn(2, (int64_t[]){N, D}, DT_F64, 12, &x), DT_OK);
  cr_assert_eq(dt_randn(2, (int64_t[]){N, D}, DT_F64, 13, &r), DT_OK);
  cr_assert_eq(dt_tensor_set_requires_grad(x, true), DT_OK);
  loss_of(m, x, r, &l);
  cr_assert_eq(dt_backward(l, NULL), DT_OK, "%s", dt_last_error());
  const char *fqns[] = {"gate.weight", "experts.0.gate_proj.weight", "experts.1.up_proj.weight",
                        "experts.2.down_proj.weight", "experts.3.gate_proj.weight"};
  for (int p = -1; p < 5; p++) {
    dt_tensor *t = p < 0 ? x : dt_module_get_tensor(m, fqns[p]), *g = NULL;
    cr_assert_eq(dt_tensor_grad(t, &g), DT_OK);
    int64_t n = dt_tensor_numel(t);
    double *gv = calloc((size_t)n, sizeof(double)), *tv = malloc(sizeof(double) * (size_t)n);
    if (g) cr_assert_eq(dt_tensor_to_doubles(g, gv, n), DT_OK);
    cr_assert_eq(dt_tensor_to_doubles(t, tv, n), DT_OK);
    for (int64_t i = 0; i < n; i += 3) {
      double h = 1e-6, save = tv[i];
      int64_t at[2] = {i / dt_tensor_size(t, 1), i % dt_tensor_size(t, 1)};
      cr_assert_eq(dt_tensor_set(t, at, save + h), DT_OK);
      double up = loss_of(m, x, r, NULL);
      cr_assert_eq(dt_tensor_set(t, at, save - h), DT_OK);
      double down = loss_of(m, x, r, NULL);
      cr_assert_eq(dt_tensor_set(t, at, save), DT_OK);
      double fd = (up - down) / (2 * h);
      cr_assert(fabs(fd - gv[i]) <= 1e-5 * (1 + fabs(fd)), "%s[%lld]: autograd %.9g, fd %.9g",
                p < 0 ? "x" : fqns[p], (long long)i, gv[i], fd);
    }
    free(gv), free(tv);
    dt_tensor_release(g);
  }
  dt_tensor_release(x), dt_tensor_release(r), dt_tensor_release(l);
  dt_module_destroy(m);
}

Test(nn_moe, bad_arguments_are_refused_by_name) {
  dt_module *m = NULL;
  dt_nn_moe_options o = {.n_experts = 4, .top_k = 5, .hidden = 3};
  cr_assert_eq(dt_nn_moe(6, &o, &m), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "top_k 5"), "%s", dt_last_error());
  o.top_k = 2, o.router_aux_loss_coef = NAN;
  cr_assert_eq(dt_nn_moe(6, &o, &m), DT_ERR_INVALID);
  o.router_aux_loss_coef = 0, o.n_experts = 0;
  cr_assert_eq(dt_nn_moe(6, &o, &m), DT_ERR_INVALID);
  cr_assert_eq(dt_nn_moe(6, NULL, &m), DT_ERR_INVALID);
  cr_assert_null(m);
  o.n_experts = 4;
  cr_assert_eq(dt_nn_moe(6, &o, &m), DT_OK, "%s", dt_last_error());
  dt_tensor *aux = NULL;
  cr_assert_eq(dt_nn_moe_aux_loss(m, &aux), DT_ERR_INVALID); /* no forward yet */
  cr_assert_eq(dt_nn_moe_expert_counts(m, NULL, 0), -1);
  dt_tensor *x = NULL, *y = NULL;
  cr_assert_eq(dt_randn(1, (int64_t[]){6}, DT_F32, 1, &x), DT_OK);
  cr_assert_eq(dt_module_forward(m, x, &y), DT_ERR_SHAPE);
  cr_assert(strstr(dt_last_error(), "MoE: input is 1-D"), "%s", dt_last_error());
  dt_module *lin = NULL;
  cr_assert_eq(dt_nn_linear(2, 2, false, 1, &lin), DT_OK);
  cr_assert_eq(dt_nn_moe_aux_loss(lin, &aux), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "Linear is not a MoE"), "%s", dt_last_error());
  dt_tensor_release(x);
  dt_module_destroy(lin), dt_module_destroy(m);
}

/* No tokens: a [0, D] output, a zero auxiliary loss (not 0/0), counts of zero. */
Test(nn_moe, zero_tokens_give_an_empty_output) {
  dt_module *m = make(true, 0.01, 0.001);
  dt_tensor *x = NULL, *y = NULL, *aux = NULL;
  cr_assert_eq(dt_zeros(3, (int64_t[]){2, 0, D}, DT_F32, &x), DT_OK);
  cr_assert_eq(dt_module_forward(m, x, &y), DT_OK, "%s", dt_last_error());
  cr_assert(dt_tensor_ndim(y) == 3 && dt_tensor_size(y, 1) == 0 && dt_tensor_size(y, 2) == D);
  cr_assert_eq(dt_nn_moe_aux_loss(m, &aux), DT_OK);
  double a = 1;
  cr_assert_eq(dt_tensor_to_doubles(aux, &a, 1), DT_OK);
  cr_assert_eq(a, 0.0, "aux %g", a);
  int64_t c[E] = {1, 1, 1, 1};
  cr_assert_eq(dt_nn_moe_expert_counts(m, c, E), E);
  for (int e = 0; e < E; e++) cr_assert_eq(c[e], 0);
  cr_assert_eq(dt_nn_moe_expert_counts(m, c, -5), -1);
  dt_tensor_release(x), dt_tensor_release(y), dt_tensor_release(aux);
  dt_module_destroy(m);
}
