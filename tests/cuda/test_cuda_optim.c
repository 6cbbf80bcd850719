/*
 * The optimizers and clip_grad_norm on CUDA parameters against the same on the CPU: SGD
 * (plain, momentum with dampening, nesterov with weight decay), Adam, AdamW (weight decay) and
 * Lion over three steps with new gradients each step, in float32 with the CPU's element
 * functions (kernels/math/optim.h): parameters and every state slot must be the CPU's bits.
 * clip_grad_norm: the same total norm (to the last bits of a double: the GPU sums in a tree)
 * and the same clipped gradients; skip_if_nonfinite skips on a NaN gradient. Skipped (77)
 * without a GPU.
 */
#include <math.h>
#include <string.h>

#include "cuda/cuda_test.h"

static const dt_device cuda0 = {DT_DEVICE_CUDA, 0};
static const int64_t shapes[2][2] = {{37, 53}, {1, 1029}};

static dt_tensor *cpu_random(const int64_t *shape, double scale, uint64_t seed) {
  dt_tensor *f = NULL, *s = NULL, *t = NULL;
  CHECK_OK(dt_randn(2, shape, DT_F64, seed, &f));
  CHECK_OK(dt_mul_scalar(f, scale, &s));
  CHECK_OK(dt_to(s, DT_F32, &t));
  dt_tensor_release(f);
  dt_tensor_release(s);
  return t;
}

static dt_tensor *on(dt_tensor *t, dt_device device) {
  dt_tensor *d = NULL;
  CHECK_OK(dt_to_device(t, device, &d));
  return d;
}

/* The GPU tensor's float32 bits equal the CPU tensor's. */
static void check_same(const char *what, const char *name, dt_tensor *gpu, dt_tensor *cpu) {
  dt_tensor *h = on(gpu, DT_DEVICE_CPU_VALUE);
  int64_t n = dt_tensor_numel(cpu);
  const float *a = dt_tensor_data(h), *b = dt_tensor_data(cpu);
  int64_t bad = -1;
  for (int64_t k = 0; k < n && bad < 0; k++)
    if (memcmp(&a[k], &b[k], sizeof(float)) != 0) bad = k;
  CHECK(bad < 0, "%s: %s element %lld: cuda %.9g, cpu %.9g", what, name, (long long)bad,
        bad >= 0 ? a[bad] : 0.0, bad >= 0 ? b[bad] : 0.0);
  dt_tensor_release(h);
}

typedef dt_status (*make_fn)(int n, dt_tensor *const *params, dt_optimizer **out);

static dt_status sgd_plain(int n, dt_tensor *const *p, dt_optimizer **o) {
  dt_sgd_options s = {.lr = 0.1};
  return dt_optimizer_create_sgd(n, p, &s, o);
}
static dt_status sgd_dampening(int n, dt_tensor *const *p, dt_optimizer **o) {
  dt_sgd_options s = {.lr = 0.05, .momentum = 0.9, .dampening = 0.3};
  return dt_optimizer_create_sgd(n, p, &s, o);
}
static dt_status sgd_nesterov(int n, dt_tensor *const *p, dt_optimizer **o) {
  dt_sgd_options s = {.lr = 0.05, .momentum = 0.8, .weight_decay = 0.01, .nesterov = true};
  return dt_optimizer_create_sgd(n, p, &s, o);
}
static dt_status adam(int n, dt_tensor *const *p, dt_optimizer **o) {
  dt_adam_options a = {.lr = 1e-2, .weight_decay = 0.1};
  return dt_optimizer_create_adam(n, p, &a, o);
}
static dt_status adamw(int n, dt_tensor *const *p, dt_optimizer **o) {
  dt_adam_options a = {.lr = 1e-2, .weight_decay = 0.05};
  return dt_optimizer_create_adamw(n, p, &a, o);
}
static dt_status lion(int n, dt_tensor *const *p, dt_optimizer **o) {
  dt_optimizer_hyperparameter h[] = {{"lr", 3e-3}, {"weight_decay", 0.1}};
  return dt_optimizer_create("lion", n, p, 2, h, o);
}

static const struct {
  const char *name;
  make_fn make;
  const char *slots[2];
} optimizers[] = {
    {"sgd", sgd_plain, {NULL, NULL}},
    {"sgd momentum dampening", sgd_dampening, {"momentum_buffer", NULL}},
    {"sgd nesterov weight_decay", sgd_nesterov, {"momentum_buffer", NULL}},
    {"adam weight_decay", adam, {"exp_avg", "exp_avg_sq"}},
    {"adamw", adamw, {"exp_avg", "exp_avg_sq"}},
    {"lion", lion, {"exp_avg", NULL}},
};

/* Two parameters on each device, three steps with the same gradients on both. */
static void run_optimizer(int which) {
  dt_tensor *cp[2], *gp[2];
  for (int i = 0; i < 2; i++) {
    cp[i] = cpu_random(shapes[i], 1.0, 100 + (uint64_t)i);
    gp[i] = on(cp[i], cuda0);
    CHECK_OK(dt_tensor_set_requires_grad(cp[i], true));
    CHECK_OK(dt_tensor_set_requires_grad(gp[i], true));
  }
  dt_optimizer *co = NULL, *go = NULL;
  CHECK_OK(optimizers[which].make(2, cp, &co));
  CHECK_OK(optimizers[which].make(2, gp, &go));
  const char *what = optimizers[which].name;
  for (int step = 0; step < 3; step++) {
    for (int i = 0; i < 2; i++) {
      dt_tensor *g = cpu_random(shapes[i], 0.5, 1000 + 10 * (uint64_t)step + (uint64_t)i);
      dt_tensor *gg = on(g, cuda0);
      CHECK_OK(dt_tensor_set_grad(cp[i], g));
      CHECK_OK(dt_tensor_set_grad(gp[i], gg));
      dt_tensor_release(g);
      dt_tensor_release(gg);
    }
    CHECK_OK(dt_optimizer_step(co));
    CHECK_OK(dt_optimizer_step(go));
    for (int i = 0; i < 2; i++) {
      check_same(what, "parameter", gp[i], cp[i]);
      for (int k = 0; k < 2 && optimizers[which].slots[k]; k++) {
        dt_tensor *cs = NULL, *gs = NULL;
        CHECK_OK(dt_optimizer_state(co, i, optimizers[which].slots[k], &cs, NULL));
        CHECK_OK(dt_optimizer_state(go, i, optimizers[which].slots[k], &gs, NULL));
        CHECK(dt_tensor_device(gs).kind == DT_DEVICE_CUDA, "%s: state %s is not on the GPU", what,
              optimizers[which].slots[k]);
        check_same(what, optimizers[which].slots[k], gs, cs);
        dt_tensor_release(cs);
        dt_tensor_release(gs);
      }
    }
  }
  dt_optimizer_destroy(co);
  dt_optimizer_destroy(go);
  for (int i = 0; i < 2; i++) {
    dt_tensor_release(cp[i]);
    dt_tensor_release(gp[i]);
  }
}

/* clip_grad_norm: the norm and the clipped gradients; then a NaN gradient skips a step. */
static void run_clip(void) {
  dt_tensor *cp[2], *gp[2];
  for (int i = 0; i < 2; i++) {
    cp[i] = cpu_random(shapes[i], 1.0, 200 + (uint64_t)i);
    gp[i] = on(cp[i], cuda0);
    CHECK_OK(dt_tensor_set_requires_grad(cp[i], true));
    CHECK_OK(dt_tensor_set_requires_grad(gp[i], true));
    dt_tensor *g = cpu_random(shapes[i], 3.0, 300 + (uint64_t)i), *gg = on(g, cuda0);
    CHECK_OK(dt_tensor_set_grad(cp[i], g));
    CHECK_OK(dt_tensor_set_grad(gp[i], gg));
    dt_tensor_release(g);
    dt_tensor_release(gg);
  }
  double cn = 0, gn = 0;
  CHECK_OK(dt_clip_grad_norm(2, cp, 1.5, NULL, &cn));
  CHECK_OK(dt_clip_grad_norm(2, gp, 1.5, NULL, &gn));
  CHECK(fabs(gn - cn) <= 1e-12 * cn, "clip_grad_norm: cuda norm %.17g, cpu %.17g", gn, cn);
  for (int i = 0; i < 2; i++) {
    dt_tensor *cg = NULL, *gg = NULL;
    CHECK_OK(dt_tensor_grad(cp[i], &cg));
    CHECK_OK(dt_tensor_grad(gp[i], &gg));
    dt_tensor *h = on(gg, DT_DEVICE_CPU_VALUE);
    const float *a = dt_tensor_data(h), *b = dt_tensor_data(cg);
    for (int64_t k = 0; k < dt_tensor_numel(cg); k++) {
      /* the same float32 coefficient unless the norms' last bits round it apart: one ulp */
      if (!(fabsf(a[k] - b[k]) <= 2e-7f * fabsf(b[k]))) {
        CHECK(false, "clip_grad_norm: grad %d element %lld: cuda %.9g, cpu %.9g", i, (long long)k,
              a[k], b[k]);
        break;
      }
    }
    dt_tensor_release(h);
    dt_tensor_release(cg);
    dt_tensor_release(gg);
  }
  /* a NaN in the second gradient: the step is skipped, nothing moves */
  dt_optimizer *go = NULL;
  CHECK_OK(sgd_plain(2, gp, &go));
  dt_tensor *bad = cpu_random(shapes[1], 1.0, 400);
  ((float *)dt_tensor_data(bad))[1000] = NAN;
  dt_tensor *gbad = on(bad, cuda0), *before = on(gp[0], DT_DEVICE_CPU_VALUE);
  CHECK_OK(dt_tensor_set_grad(gp[1], gbad));
  bool skipped = false;
  dt_optimizer_step_options so = {.skip_if_nonfinite = true};
  CHECK_OK(dt_optimizer_step_ex(go, &so, &skipped));
  CHECK(skipped, "skip_if_nonfinite did not see the NaN on the GPU");
  check_same("skipped step", "parameter 0", gp[0], before);
  dt_optimizer_destroy(go);
  dt_tensor_release(bad);
  dt_tensor_release(gbad);
  dt_tensor_release(before);
  for (int i = 0; i < 2; i++) {
    dt_tensor_release(cp[i]);
    dt_tensor_release(gp[i]);
  }
}

int main(void) {
  dt_test_require_gpu("test_cuda_optim");
  for (int k = 0; k < (int)(sizeof optimizers / sizeof *optimizers); k++) run_optimizer(k);
  run_clip();
  return dt_test_result("test_cuda_optim");
}
