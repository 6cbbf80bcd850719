/* Optimizers: SGD (momentum, dampening, nesterov, weight decay), Adam and AdamW against the
 * PyTorch update rules written out in double, state placed like sharded parameters, Partial
 * gradients reduced, clip_grad_norm over shards and mesh dims with one all_reduce (replicas
 * counted once), zero_grad, and the errors: nothing is updated unless every check passes. */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <time.h>

#include "comm_helpers.h"

enum { N = 6, STEPS = 3 };

static dt_tensor *param_of(const double *v, int64_t n) {
  dt_tensor *t = NULL;
  float f[64];
  for (int64_t i = 0; i < n; i++) f[i] = (float)v[i];
  cr_assert_eq(dt_from_data(f, 1, (int64_t[]){n}, DT_F32, &t), DT_OK);
  cr_assert_eq(dt_tensor_set_requires_grad(t, true), DT_OK);
  return t;
}

static void set_grad(dt_tensor *p, const double *v, int64_t n) {
  dt_tensor *g = NULL;
  float f[64];
  for (int64_t i = 0; i < n; i++) f[i] = (float)v[i];
  cr_assert_eq(dt_from_data(f, 1, (int64_t[]){n}, DT_F32, &g), DT_OK);
  cr_assert_eq(dt_tensor_set_grad(p, g), DT_OK, "%s", dt_last_error());
  dt_tensor_release(g);
}

static double grad_at(int step, int i) { return sin(1.3 * i + 0.7 * step) * (1 + i % 3); }

static void check_values(dt_tensor *t, const double *want, int64_t n, double rtol,
                         const char *what) {
  double got[64];
  cr_assert_eq(dt_tensor_to_doubles(t, got, n), DT_OK);
  for (int64_t i = 0; i < n; i++) {
    cr_assert(fabs(got[i] - want[i]) <= rtol * fabs(want[i]) + 1e-7, "%s[%lld]: %.9g, want %.9g",
              what, (long long)i, got[i], want[i]);
  }
}

/* torch.optim.SGD in double. */
static void sgd_reference(const dt_sgd_options *o, double *p) {
  double buf[N] = {0};
  for (int s = 0; s < STEPS; s++) {
    for (int i = 0; i < N; i++) {
      double d = grad_at(s, i) + o->weight_decay * p[i];
      if (o->momentum != 0) {
        buf[i] = s == 0 ? d : o->momentum * buf[i] + (1 - o->dampening) * d;
        d = o->nesterov ? d + o->momentum * buf[i] : buf[i];
      }
      p[i] -= o->lr * d;
    }
  }
}

/* torch.optim.Adam / AdamW in double. */
static void adam_reference(const dt_adam_options *o, bool decoupled, double *p) {
  double m[N] = {0}, v[N] = {0};
  for (int s = 0; s < STEPS; s++) {
    for (int i = 0; i < N; i++) {
      double g = grad_at(s, i);
      if (decoupled)
        p[i] *= 1 - o->lr * o->weight_decay;
      else
        g += o->weight_decay * p[i];
      m[i] = o->beta1 * m[i] + (1 - o->beta1) * g;
      v[i] = o->beta2 * v[i] + (1 - o->beta2) * g * g;
      double bc1 = 1 - pow(o->beta1, s + 1), bc2 = 1 - pow(o->beta2, s + 1);
      p[i] -= o->lr / bc1 * m[i] / (sqrt(v[i]) / sqrt(bc2) + o->eps);
    }
  }
}

static const double p0[N] = {0.5, -1.0, 2.0, 0.0, -0.25, 1.5};

static void run_steps(dt_optimizer *opt, dt_tensor *p) {
  for (int s = 0; s < STEPS; s++) {
    double g[N];
    for (int i = 0; i < N; i++) g[i] = grad_at(s, i);
    set_grad(p, g, N);
    cr_assert_eq(dt_optimizer_step(opt), DT_OK, "%s", dt_last_error());
  }
}

Test(optim, sgd_variants_match_pytorch_rules) {
  dt_sgd_options cases[] = {
      {.lr = 0.1},
      {.lr = 0.1, .momentum = 0.9},
      {.lr = 0.05, .momentum = 0.8, .dampening = 0.3, .weight_decay = 0.01},
      {.lr = 0.05, .momentum = 0.9, .nesterov = true, .weight_decay = 0.1},
      {.lr = 0.05, .momentum = 0.7, .dampening = 0.5}, /* the momentum loop with dampening */
  };
  for (int c = 0; c < 5; c++) {
    dt_tensor *p = param_of(p0, N);
    dt_optimizer *opt = NULL;
    cr_assert_eq(dt_optimizer_create_sgd(1, &p, &cases[c], &opt), DT_OK, "%s", dt_last_error());
    run_steps(opt, p);
    double want[N];
    memcpy(want, p0, sizeof want);
    sgd_reference(&cases[c], want);
    check_values(p, want, N, 1e-6, "sgd");
    dt_optimizer_destroy(opt);
    dt_tensor_release(p);
  }
}

Test(optim, adam_and_adamw_match_pytorch_rules) {
  dt_adam_options o = {.lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1};
  for (int decoupled = 0; decoupled < 2; decoupled++) {
    dt_tensor *p = param_of(p0, N), *m = NULL;
    dt_optimizer *opt = NULL;
    dt_status st = decoupled ? dt_optimizer_create_adamw(1, &p, &o, &opt)
                             : dt_optimizer_create_adam(1, &p, &o, &opt);
    cr_assert_eq(st, DT_OK, "%s", dt_last_error());
    run_steps(opt, p);
    double want[N];
    memcpy(want, p0, sizeof want);
    adam_reference(&o, decoupled, want);
    check_values(p, want, N, 1e-5, decoupled ? "adamw" : "adam");
    int64_t steps = 0;
    cr_assert_eq(dt_optimizer_state(opt, 0, "exp_avg_sq", &m, &steps), DT_OK);
    cr_assert_eq(steps, STEPS);
    dt_tensor_release(m);
    cr_assert_eq(dt_optimizer_state(opt, 0, "momentum_buffer", &m, NULL), DT_ERR_INVALID);
    cr_assert(strstr(dt_last_error(), "momentum_buffer"), "%s", dt_last_error());
    dt_optimizer_destroy(opt);
    dt_tensor_release(p);
  }
}

Test(optim, zero_grad_and_parameters_without_gradient) {
  dt_tensor *a = param_of(p0, N), *b = param_of(p0, N), *g = NULL;
  dt_tensor *ps[] = {a, b};
  dt_optimizer *opt = NULL;
  dt_sgd_options o = {.lr = 1};
  cr_assert_eq(dt_optimizer_create_sgd(2, ps, &o, &opt), DT_OK, "%s", dt_last_error());
  double ones[N] = {1, 1, 1, 1, 1, 1}, want[N];
  set_grad(a, ones, N);
  cr_assert_eq(dt_optimizer_step(opt), DT_OK, "%s", dt_last_error());
  for (int i = 0; i < N; i++) want[i] = p0[i] - 1;
  check_values(a, want, N, 0, "a");
  check_values(b, p0, N, 0, "b (no gradient: untouched)");
  cr_assert_eq(dt_optimizer_zero_grad(opt, false), DT_OK);
  cr_assert_eq(dt_tensor_grad(a, &g), DT_OK);
  double zeros[N] = {0};
  check_values(g, zeros, N, 0, "zeroed grad");
  dt_tensor_release(g);
  cr_assert_eq(dt_optimizer_zero_grad(opt, true), DT_OK);
  cr_assert_eq(dt_tensor_grad(a, &g), DT_OK);
  cr_assert_null(g);
  dt_optimizer_destroy(opt);
  dt_tensor_release(a);
  dt_tensor_release(b);
}

Test(optim, create_errors) {
  dt_tensor *a = param_of(p0, N), *d = NULL, *y = NULL, *f64 = NULL;
  dt_optimizer *opt = NULL;
  dt_sgd_options o = {.lr = 0.1};
  cr_assert_eq(dt_optimizer_create_sgd(2, (dt_tensor *[]){a, a}, &o, &opt), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "parameter 1 repeats parameter 0"), "%s", dt_last_error());
  cr_assert_eq(dt_optimizer_create_sgd(2, (dt_tensor *[]){a, NULL}, &o, &opt), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "parameter 1 is NULL"), "%s", dt_last_error());
  cr_assert_eq(dt_optimizer_create_sgd(0, &a, &o, &opt), DT_ERR_INVALID);
  cr_assert_eq(dt_mul_scalar(a, 2, &y), DT_OK);
  cr_assert_eq(dt_optimizer_create_sgd(1, &y, &o, &opt), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "not a leaf"), "%s", dt_last_error());
  cr_assert_eq(dt_zeros(1, (int64_t[]){3}, DT_F64, &f64), DT_OK);
  cr_assert_eq(dt_tensor_set_requires_grad(f64, true), DT_OK);
  cr_assert_eq(dt_optimizer_create_sgd(1, &f64, &o, &opt), DT_ERR_DTYPE);
  cr_assert(strstr(dt_last_error(), "float64"), "%s", dt_last_error());
  cr_assert(strstr(dt_last_error(), "float32 master"), "%s", dt_last_error()); /* what to do */
  dt_sgd_options bad = {.lr = 0.1, .nesterov = true};
  cr_assert_eq(dt_optimizer_create_sgd(1, &a, &bad, &opt), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "nesterov"), "%s", dt_last_error());
  dt_adam_options ba = {.lr = 0.1, .beta1 = 1.0, .beta2 = 0.9};
  cr_assert_eq(dt_optimizer_create_adam(1, &a, &ba, &opt), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "beta1 1"), "%s", dt_last_error());
  dt_sgd_options neg = {.lr = -1};
  cr_assert_eq(dt_optimizer_create_sgd(1, &a, &neg, &opt), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "lr -1"), "%s", dt_last_error());
  cr_assert_null(opt);
  cr_assert_eq(dt_optimizer_step(NULL), DT_ERR_INVALID);
  dt_tensor_release(a);
  dt_tensor_release(d);
  dt_tensor_release(y);
  dt_tensor_release(f64);
}

Test(optim, clip_grad_norm_local) {
  dt_tensor *a = param_of(p0, 3), *b = param_of(p0, 4);
  set_grad(a, (double[]){3, 0, 0}, 3);
  set_grad(b, (double[]){0, 4, 0, 0}, 4);
  double norm = 0;
  cr_assert_eq(dt_clip_grad_norm(2, (dt_tensor *[]){a, b}, 1.0, NULL, &norm), DT_OK, "%s",
               dt_last_error());
  cr_assert_float_eq(norm, 5.0, 1e-9);
  dt_tensor *g = NULL;
  cr_assert_eq(dt_tensor_grad(b, &g), DT_OK);
  check_values(g, (double[]){0, 4 / (5 + 1e-6), 0, 0}, 4, 1e-6, "clipped");
  dt_tensor_release(g);
  /* A non-finite norm: reported, nothing scaled; an error when asked. */
  set_grad(a, (double[]){INFINITY, 1, 0}, 3);
  cr_assert_eq(dt_clip_grad_norm(2, (dt_tensor *[]){a, b}, 1.0, NULL, &norm), DT_OK);
  cr_assert(isinf(norm));
  dt_clip_grad_options strict = {.error_if_nonfinite = true};
  cr_assert_eq(dt_clip_grad_norm(2, (dt_tensor *[]){a, b}, 1.0, &strict, &norm), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "dt_clip_grad_norm") && strstr(dt_last_error(), "non-finite"),
            "%s", dt_last_error());
  /* A negative or NaN max_norm is refused, the gradients untouched. */
  for (int i = 0; i < 2; i++) {
    double bad = i ? NAN : -1.0;
    cr_assert_eq(dt_clip_grad_norm(1, &a, bad, NULL, &norm), DT_ERR_INVALID);
    cr_assert(strstr(dt_last_error(), "max_norm") && strstr(dt_last_error(), ">= 0"), "%s",
              dt_last_error());
  }
  double kept[3];
  cr_assert_eq(dt_tensor_grad(a, &g), DT_OK);
  cr_assert_eq(dt_tensor_to_doubles(g, kept, 3), DT_OK);
  cr_assert(kept[0] == INFINITY && kept[1] == 1 && kept[2] == 0, "%g %g %g", kept[0], kept[1],
            kept[2]);
  dt_tensor_release(g);
  dt_tensor_release(a);
  dt_tensor_release(b);
}

/* max_norm 0, as PyTorch's clip_grad_norm_ (2.15: clip_coef 0 / (norm + 1e-6) = 0): every
 * gradient becomes 0 (-0 for a negative one), the norm is the norm before. */
Test(optim, clip_grad_norm_max_norm_zero_zeroes_the_gradients) {
  dt_tensor *a = param_of(p0, 3), *b = param_of(p0, 4);
  set_grad(a, (double[]){3, -2, 0}, 3);
  set_grad(b, (double[]){0, 4, 0, 1}, 4);
  double norm = 0;
  cr_assert_eq(dt_clip_grad_norm(2, (dt_tensor *[]){a, b}, 0.0, NULL, &norm), DT_OK, "%s",
               dt_last_error());
  cr_assert_float_eq(norm, sqrt(9 + 4 + 16 + 1), 1e-9);
  dt_tensor *g = NULL;
  cr_assert_eq(dt_tensor_grad(a, &g), DT_OK);
  check_values(g, (double[]){0, 0, 0}, 3, 0, "a");
  cr_assert(signbit(((const float *)dt_tensor_data(g))[1]), "-2 * 0 is -0");
  dt_tensor_release(g);
  cr_assert_eq(dt_tensor_grad(b, &g), DT_OK);
  check_values(g, (double[]){0, 0, 0, 0}, 4, 0, "b");
  dt_tensor_release(g);
  dt_tensor_release(a);
  dt_tensor_release(b);
}

/* ---- Distributed -------------------------------------------------------------------------- */

/* A distributed float32 parameter from full values: placements on the mesh. */
static dt_status dist_param(dt_mesh *mesh, int ndim, const int64_t *shape, const float *v,
                            const dt_placement *pl, dt_tensor **out) {
  dt_tensor *full = NULL;
  dt_status st = dt_from_data(v, ndim, shape, DT_F32, &full);
  if (!st) st = dt_dist_distribute_tensor(mesh, full, dt_mesh_ndim(mesh), pl, out);
  dt_tensor_release(full);
  if (!st) st = dt_tensor_set_requires_grad(*out, true);
  return st;
}

static dt_status dist_grad(dt_tensor *p, const float *v, const dt_placement *pl) {
  dt_tensor *full = NULL, *g = NULL;
  dt_mesh *mesh = dt_dist_mesh(p);
  dt_status st = dt_from_data(v, dt_dist_ndim(p), dt_dist_global_shape(p), DT_F32, &full);
  if (!st) st = dt_dist_distribute_tensor(mesh, full, dt_mesh_ndim(mesh), pl, &g);
  if (!st) st = dt_tensor_set_grad(p, g);
  dt_tensor_release(full);
  dt_tensor_release(g);
  return st;
}

static dt_status full_values(dt_tensor *t, double *out, int64_t n) {
  dt_tensor *full = NULL;
  dt_status st = dt_dist_full_tensor(t, &full);
  if (!st) st = dt_tensor_to_doubles(full, out, n);
  dt_tensor_release(full);
  return st;
}

/* Adam on a Shard(0) [7, 2] parameter: the state is Shard(0) with the parameter's local
 * shapes, and the result equals the local computation. */
static dt_status sharded_state_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){dt_comm_size(world)}, NULL, &mesh));
  float v[14], g[14];
  for (int i = 0; i < 14; i++) v[i] = (float)(i * 0.1 - 0.5), g[i] = (float)sin(i);
  dt_placement s0 = dt_shard(0);
  dt_tensor *p = NULL, *m = NULL, *pl = NULL, *ml = NULL, *ref = NULL;
  RANK_OK(dist_param(mesh, 2, (int64_t[]){7, 2}, v, &s0, &p));
  dt_optimizer *opt = NULL;
  dt_adam_options o = {.lr = 0.1}; /* PyTorch's betas and eps */
  RANK_OK(dt_optimizer_create_adam(1, &p, &o, &opt));
  RANK_OK(dist_grad(p, g, &s0));
  RANK_OK(dt_optimizer_step(opt));
  RANK_OK(dt_optimizer_state(opt, 0, "exp_avg", &m, NULL));
  RANK_CHECK(dt_tensor_is_distributed(m) && dt_dist_placements(m)[0].kind == DT_SHARD,
             "exp_avg is not Shard(0)");
  RANK_OK(dt_dist_to_local(p, &pl));
  RANK_OK(dt_dist_to_local(m, &ml));
  RANK_CHECK(dt_tensor_size(pl, 0) == dt_tensor_size(ml, 0), "state shard of %lld rows, param %lld",
             (long long)dt_tensor_size(ml, 0), (long long)dt_tensor_size(pl, 0));
  /* Local reference. */
  dt_tensor *lp = NULL, *lg = NULL;
  dt_optimizer *lopt = NULL;
  RANK_OK(dt_from_data(v, 2, (int64_t[]){7, 2}, DT_F32, &lp));
  RANK_OK(dt_tensor_set_requires_grad(lp, true));
  RANK_OK(dt_from_data(g, 2, (int64_t[]){7, 2}, DT_F32, &lg));
  RANK_OK(dt_tensor_set_grad(lp, lg));
  RANK_OK(dt_optimizer_create_adam(1, &lp, &o, &lopt));
  RANK_OK(dt_optimizer_step(lopt));
  double a[14], b[14];
  RANK_OK(full_values(p, a, 14));
  RANK_OK(dt_tensor_to_doubles(lp, b, 14));
  for (int i = 0; i < 14; i++) RANK_CHECK(a[i] == b[i], "[%d] %.9g vs %.9g", i, a[i], b[i]);
  dt_optimizer_destroy(opt);
  dt_optimizer_destroy(lopt);
  dt_tensor *all[] = {p, m, pl, ml, ref, lp, lg};
  for (int i = 0; i < 7; i++) dt_tensor_release(all[i]);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(optim, sharded_state_on_2_3_4_ranks) {
  for (int r = 2; r <= 4; r++) SPAWN_OK(r, sharded_state_rank, NULL);
}

/* A Replicate parameter with a Partial(sum) gradient (data parallelism): the step reduces
 * it (one all_reduce, after the one that agrees on the checks), stores it Replicate, and every
 * rank applies the same update. */
static dt_status partial_grad_rank(dt_comm *world, void *arg) {
  (void)arg;
  int w = dt_comm_size(world), r = dt_comm_rank(world);
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){w}, NULL, &mesh));
  dt_placement R = dt_replicate(), P = dt_partial(DT_REDUCE_SUM);
  dt_tensor *p = NULL, *local = NULL, *g = NULL, *stored = NULL;
  RANK_OK(dist_param(mesh, 1, (int64_t[]){3}, (float[]){1, 2, 3}, &R, &p));
  RANK_OK(dt_from_data((float[]){(float)(r + 1), 0, -1}, 1, (int64_t[]){3}, DT_F32, &local));
  RANK_OK(dt_dist_from_local(mesh, local, 1, &P, NULL, &g));
  RANK_OK(dt_tensor_set_grad(p, g));
  dt_optimizer *opt = NULL;
  RANK_OK(dt_optimizer_create_sgd(1, &p, &(dt_sgd_options){.lr = 1}, &opt));
  dt_comm_ledger *ledger = NULL;
  RANK_OK(dt_comm_ledger_start(&ledger));
  RANK_OK(dt_optimizer_step(opt));
  RANK_OK(dt_comm_ledger_stop(ledger));
  RANK_CHECK(dt_comm_ledger_count(ledger, "all_reduce") == 2, "%lld all_reduces",
             (long long)dt_comm_ledger_count(ledger, "all_reduce"));
  dt_comm_ledger_destroy(ledger);
  RANK_OK(dt_tensor_grad(p, &stored));
  RANK_CHECK(dt_dist_placements(stored)[0].kind == DT_REPLICATE, "stored gradient not Replicate");
  double v[3], sum = w * (w + 1) / 2.0;
  RANK_OK(full_values(p, v, 3));
  RANK_CHECK(v[0] == 1 - sum && v[1] == 2 && v[2] == 3 + w, "%g %g %g", v[0], v[1], v[2]);
  dt_optimizer_destroy(opt);
  dt_tensor *all[] = {p, local, g, stored};
  for (int i = 0; i < 4; i++) dt_tensor_release(all[i]);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(optim, partial_gradient_reduced_by_the_step) {
  for (int r = 2; r <= 4; r++) SPAWN_OK(r, partial_grad_rank, NULL);
}

/* A gradient whose placements differ from its parameter's is redistributed to them, as
 * PyTorch's sharding propagation does for the update's ops: S(1) or R gradients of an S(0)
 * parameter, an S(0) gradient of a Replicate one; the step equals the whole-tensor SGD step. */
static dt_status redistributed_grad_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){dt_comm_size(world)}, NULL, &mesh));
  float v[20], g[20];
  for (int i = 0; i < 20; i++) v[i] = (float)i, g[i] = (float)(0.5 * i - 3);
  dt_placement s0 = dt_shard(0), s1 = dt_shard(1), r = dt_replicate();
  const dt_placement *param_pl[3] = {&s0, &s0, &r}, *grad_pl[3] = {&s1, &r, &s0};
  dt_tensor *p[3] = {NULL};
  for (int k = 0; k < 3; k++) {
    RANK_OK(dist_param(mesh, 2, (int64_t[]){5, 4}, v, param_pl[k], &p[k]));
    RANK_OK(dist_grad(p[k], g, grad_pl[k]));
  }
  dt_optimizer *opt = NULL;
  RANK_OK(dt_optimizer_create_sgd(3, p, &(dt_sgd_options){.lr = 0.25}, &opt));
  RANK_OK(dt_optimizer_step(opt));
  for (int k = 0; k < 3; k++) {
    double got[20];
    RANK_OK(full_values(p[k], got, 20));
    for (int i = 0; i < 20; i++) {
      double want = (double)v[i] - 0.25 * (double)g[i];
      RANK_CHECK(fabs(got[i] - want) < 1e-6, "parameter %d [%d]: %g, want %g", k, i, got[i], want);
    }
    dt_tensor *stored = NULL;
    RANK_OK(dt_tensor_grad(p[k], &stored));
    const dt_placement *sp = dt_dist_placements(stored);
    RANK_CHECK(sp[0].kind == param_pl[k]->kind && sp[0].dim == param_pl[k]->dim,
               "parameter %d's .grad keeps the parameter's placements", k);
    dt_tensor_release(stored);
  }
  double norm = 0;
  RANK_OK(dt_clip_grad_norm(3, p, 1e9, NULL, &norm));
  double want_norm = 0;
  for (int i = 0; i < 20; i++) want_norm += 3.0 * (double)g[i] * (double)g[i];
  RANK_CHECK(fabs(norm - sqrt(want_norm)) < 1e-4 * sqrt(want_norm), "norm %g, want %g", norm,
             sqrt(want_norm));
  dt_optimizer_destroy(opt);
  for (int k = 0; k < 3; k++) dt_tensor_release(p[k]);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(optim, gradient_of_other_placements_is_redistributed) {
  for (int n = 2; n <= 4; n++) SPAWN_OK(n, redistributed_grad_rank, NULL);
}

/* Bad gradients: nothing updated. Parameter 0 has a good gradient, parameter 1 a float64 one
 * (refused by .grad); then a NaN on one rank only, with skip_if_nonfinite: every rank skips. */
static dt_status bad_grad_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL, *other = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){dt_comm_size(world)}, NULL, &mesh));
  float v[16];
  for (int i = 0; i < 16; i++) v[i] = (float)i;
  dt_placement s0 = dt_shard(0);
  dt_tensor *a = NULL, *b = NULL;
  RANK_OK(dist_param(mesh, 2, (int64_t[]){4, 4}, v, &s0, &a));
  RANK_OK(dist_param(mesh, 2, (int64_t[]){4, 4}, v, &s0, &b));
  dt_optimizer *opt = NULL;
  RANK_OK(dt_optimizer_create_sgd(2, (dt_tensor *[]){a, b}, &(dt_sgd_options){.lr = 1}, &opt));
  RANK_OK(dist_grad(a, v, &s0));
  {
    /* A float64 gradient never reaches the step: .grad refuses it. */
    double dv[16];
    for (int i = 0; i < 16; i++) dv[i] = v[i];
    dt_tensor *full = NULL, *g = NULL;
    RANK_OK(dt_from_data(dv, 2, (int64_t[]){4, 4}, DT_F64, &full));
    RANK_OK(dt_dist_distribute_tensor(mesh, full, 1, &s0, &g));
    RANK_CHECK(dt_tensor_set_grad(b, g) == DT_ERR_DTYPE && strstr(dt_last_error(), "float64"), "%s",
               dt_last_error());
    dt_tensor_release(full);
    dt_tensor_release(g);
  }
  double got[16];
  RANK_OK(full_values(a, got, 16));
  for (int i = 0; i < 16; i++) RANK_CHECK(got[i] == v[i], "parameter 0 was updated");
  /* NaN on the last rank's shard only. */
  float nan_v[16];
  memcpy(nan_v, v, sizeof v);
  nan_v[15] = NAN;
  RANK_OK(dist_grad(b, nan_v, &s0));
  bool skipped = false;
  dt_optimizer_step_options so = {.skip_if_nonfinite = true};
  RANK_OK(dt_optimizer_step_ex(opt, &so, &skipped));
  RANK_CHECK(skipped, "step not skipped");
  RANK_OK(full_values(a, got, 16));
  for (int i = 0; i < 16; i++) RANK_CHECK(got[i] == v[i], "parameter 0 was updated");
  /* A parameter on another mesh. */
  RANK_OK(dt_mesh_create(world, 1, (int[]){dt_comm_size(world)}, NULL, &other));
  dt_tensor *c = NULL;
  dt_optimizer *bad = NULL;
  RANK_OK(dist_param(other, 2, (int64_t[]){4, 4}, v, &s0, &c));
  dt_status st =
      dt_optimizer_create_sgd(2, (dt_tensor *[]){a, c}, &(dt_sgd_options){.lr = 1}, &bad);
  RANK_CHECK(st == DT_ERR_INVALID && strstr(dt_last_error(), "parameter 1 is on"), "%s",
             dt_last_error());
  dt_optimizer_destroy(opt);
  dt_tensor_release(a);
  dt_tensor_release(b);
  dt_tensor_release(c);
  dt_mesh_destroy(other);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(optim, bad_gradients_update_nothing) {
  for (int r = 2; r <= 3; r++) SPAWN_OK(r, bad_grad_rank, NULL);
}

/* clip_grad_norm on a 2x2 mesh: gradients [S(0), R], [R, R] and [R, S(0)]; the norm counts
 * each element once, with exactly one all_reduce. */
static dt_status clip_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 2, (int[]){2, 2}, NULL, &mesh));
  dt_placement pls[3][2] = {{dt_shard(0), dt_replicate()},
                            {dt_replicate(), dt_replicate()},
                            {dt_replicate(), dt_shard(0)}};
  int64_t sizes[3] = {5, 3, 7};
  dt_tensor *ps[3] = {0};
  double squares = 0;
  float g[3][8];
  for (int k = 0; k < 3; k++) {
    float v[8] = {0};
    for (int i = 0; i < sizes[k]; i++) {
      g[k][i] = (float)(k + 1) * (float)(i - 2);
      squares += (double)g[k][i] * g[k][i];
    }
    RANK_OK(dist_param(mesh, 1, &sizes[k], v, pls[k], &ps[k]));
    RANK_OK(dist_grad(ps[k], g[k], pls[k]));
  }
  dt_comm_ledger *ledger = NULL;
  double norm = 0;
  RANK_OK(dt_comm_ledger_start(&ledger));
  RANK_OK(dt_clip_grad_norm(3, ps, 2.0, NULL, &norm));
  RANK_OK(dt_comm_ledger_stop(ledger));
  RANK_CHECK(dt_comm_ledger_count(ledger, NULL) == 1, "%lld collectives",
             (long long)dt_comm_ledger_count(ledger, NULL));
  dt_comm_ledger_destroy(ledger);
  RANK_CHECK(fabs(norm - sqrt(squares)) <= 1e-9 * norm, "norm %.12g, want %.12g", norm,
             sqrt(squares));
  double coef = 2.0 / (norm + 1e-6);
  for (int k = 0; k < 3; k++) {
    dt_tensor *gr = NULL;
    double got[8];
    RANK_OK(dt_tensor_grad(ps[k], &gr));
    RANK_OK(full_values(gr, got, sizes[k]));
    for (int i = 0; i < sizes[k]; i++)
      RANK_CHECK(fabs(got[i] - g[k][i] * coef) <= 1e-6, "grad %d[%d] %g", k, i, got[i]);
    dt_tensor_release(gr);
    dt_tensor_release(ps[k]);
  }
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(optim, clip_grad_norm_2x2_mesh_one_all_reduce) { SPAWN_OK(4, clip_rank, NULL); }

/* ---- A refusal on one rank fails every rank at once ---------------------------------------- */

enum { BAD_CLIP, BAD_CLIP_PARTIAL, BAD_STEP, BAD_STEP_SKIP, BAD_STEP_PARTIAL, BAD_CASES };

typedef struct one_bad {
  int which;
  atomic_int returned; /* ranks back from the call */
} one_bad;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Rank 1's gradient (on another mesh object) or parameter (no longer requiring grad) is bad,
 * rank 0's good (a Replicate parameter, its gradient Replicate, or Partial for the _PARTIAL
 * cases, whose reduction is a collective). Rank 1 stays in its rank function until rank 0 is
 * back from its call (5 s at most: leaving earlier would abort rank 0's wait and hide a hang;
 * rank 0 waited there until then). Both must return an error, rank 0 within a second, naming
 * rank 1, and nothing is updated. BAD_STEP, a step with nothing to reduce and no
 * skip_if_nonfinite, communicates nothing (no agreement is added to it): rank 0 updates and
 * returns at once, rank 1 refuses. */
static dt_status one_bad_rank(dt_comm *world, void *arg) {
  one_bad *c = arg;
  int r = dt_comm_rank(world);
  dt_mesh *mesh = NULL, *other = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){2}, NULL, &mesh));
  RANK_OK(dt_mesh_create(world, 1, (int[]){2}, NULL, &other));
  bool partial = c->which == BAD_CLIP_PARTIAL || c->which == BAD_STEP_PARTIAL;
  dt_placement R = dt_replicate(), P = dt_partial(DT_REDUCE_SUM);
  dt_tensor *p = NULL, *local = NULL, *g = NULL;
  RANK_OK(dist_param(mesh, 1, (int64_t[]){3}, (float[]){1, 2, 3}, &R, &p));
  dt_optimizer *opt = NULL;
  RANK_OK(dt_optimizer_create_sgd(1, &p, &(dt_sgd_options){.lr = 1}, &opt));
  bool bad_grad = c->which == BAD_CLIP || c->which == BAD_CLIP_PARTIAL || partial;
  RANK_OK(dt_from_data((float[]){3, 0, -4}, 1, (int64_t[]){3}, DT_F32, &local));
  RANK_OK(
      dt_dist_from_local(r == 1 && bad_grad ? other : mesh, local, 1, partial ? &P : &R, NULL, &g));
  RANK_OK(dt_tensor_set_grad(p, g));
  if (r == 1 && !bad_grad) RANK_OK(dt_tensor_set_requires_grad(p, false));
  double t0 = now_s(), norm = 0;
  dt_status st;
  if (c->which == BAD_CLIP || c->which == BAD_CLIP_PARTIAL) {
    st = dt_clip_grad_norm(1, &p, 1.0, NULL, &norm);
  } else {
    dt_optimizer_step_options so = {.skip_if_nonfinite = c->which == BAD_STEP_SKIP};
    st = dt_optimizer_step_ex(opt, &so, NULL);
  }
  double took = now_s() - t0;
  char message[300];
  snprintf(message, sizeof message, "%.299s", dt_last_error());
  atomic_fetch_add(&c->returned, 1);
  while (r == 1 && atomic_load(&c->returned) < 2 && now_s() - t0 < 5) {
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
  }
  bool local_only = c->which == BAD_STEP && r == 0;
  RANK_CHECK(local_only ? st == DT_OK : st != DT_OK, "case %d: rank %d: %s", c->which, r,
             dt_status_string(st));
  RANK_CHECK(took < 1.0, "case %d: rank %d returned after %.2f s: %s", c->which, r, took, message);
  if (r == 0 && !local_only)
    RANK_CHECK(st == DT_ERR_INVALID && strstr(message, "rank 1 refused"), "case %d: %s (%d)",
               c->which, message, st);
  double v[3];
  dt_tensor *mine = NULL;
  RANK_OK(dt_dist_to_local(p, &mine));
  RANK_OK(dt_tensor_to_doubles(mine, v, 3));
  dt_tensor_release(mine);
  bool updated = v[0] == -2 && v[1] == 2 && v[2] == 7, kept = v[0] == 1 && v[1] == 2 && v[2] == 3;
  RANK_CHECK(local_only ? updated : kept, "case %d: rank %d holds %g %g %g", c->which, r, v[0],
             v[1], v[2]);
  dt_optimizer_destroy(opt);
  dt_tensor_release(p), dt_tensor_release(local), dt_tensor_release(g);
  dt_mesh_destroy(other);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(optim, a_refusal_on_one_rank_fails_every_rank_at_once) {
  for (int which = 0; which < BAD_CASES; which++) {
    one_bad c = {.which = which};
    atomic_init(&c.returned, 0);
    SPAWN_OK(2, one_bad_rank, &c);
  }
}
