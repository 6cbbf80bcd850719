/*
 * dtensor bench train: what an optimizer step costs (issue 13).
 *
 *   optim_step  one step of SGD (momentum 0.9) and of AdamW over P parameters of E float32
 *               elements each (default 1,000 x 1,000), against a plain C loop doing the same
 *               arithmetic over the same memory (the parameters, gradients and state buffers)
 * (target ratio <= 1.3), and the overhead per parameter in ns ((ours - plain) / P): the checks of
 * every parameter and gradient before any update, and the state lookup.
 *
 * The two sides alternate (A B A B ...); each is timed in CPU time of the thread (the machine
 * is shared) and the medians are reported.
 * Options: --json, --iters N (samples per side, default 15), --params P, --elems E.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_machine.h"
#include "bench_util.h"
#include "dtensor/dtensor.h"
#include "tools.h"

#define MAX_ITERS 64

typedef struct plain_state {
  float **p, **g, **s0, **s1;
  int n;
  int64_t e;
  int64_t step;
} plain_state;

/* The baseline: the same updates as dt_optimizer_step, one plain loop per parameter. */
static void plain_sgd(plain_state *st) {
  const float mom = 0.9f, neg_lr = -0.01f;
  bool first = st->step++ == 0;
  for (int i = 0; i < st->n; i++) {
    float *p = st->p[i], *b = st->s0[i];
    const float *g = st->g[i];
    for (int64_t k = 0; k < st->e; k++) {
      float v = first ? g[k] : b[k] * mom + g[k];
      b[k] = v;
      p[k] = p[k] + neg_lr * v;
    }
  }
}

static void plain_adamw(plain_state *st) {
  int64_t step = ++st->step;
  const double lr = 1e-3, b1 = 0.9, b2 = 0.999;
  const float decay = (float)(1.0 - lr * 0.01), w1 = (float)(1 - b1), fb2 = (float)b2,
              w2 = (float)(1 - b2);
  const float neg_step = (float)(-lr / (1 - pow(b1, (double)step)));
  const float bc2 = (float)sqrt(1 - pow(b2, (double)step)), eps = 1e-8f;
  for (int i = 0; i < st->n; i++) {
    float *p = st->p[i], *m = st->s0[i], *v = st->s1[i];
    const float *g = st->g[i];
    for (int64_t k = 0; k < st->e; k++) {
      p[k] = p[k] * decay;
      m[k] = m[k] + w1 * (g[k] - m[k]);
      v[k] = v[k] * fb2 + w2 * g[k] * g[k];
      p[k] = p[k] + neg_step * (m[k] / (sqrtf(v[k]) / bc2 + eps));
    }
  }
}

static float *local_floats(dt_tensor *t) { return (float *)dt_tensor_data(t); }

static int usage(void) {
  fprintf(stderr, "bench train: bad or incomplete option (see 'dtensor bench train --help')\n");
  return 2;
}

/* Median microseconds of our step and of the plain loop, alternating. */
static dt_status measure(dt_optimizer *opt, void (*plain)(plain_state *), plain_state *ps,
                         int iters, double *ours_us, double *plain_us) {
  double a[MAX_ITERS], b[MAX_ITERS];
  dt_status st = dt_optimizer_step(opt); /* warm: first-step paths, page faults */
  plain(ps);
  for (int it = 0; it < iters && !st; it++) {
    double t0 = bench_thread_cpu_us();
    st = dt_optimizer_step(opt);
    double t1 = bench_thread_cpu_us();
    plain(ps);
    double t2 = bench_thread_cpu_us();
    a[it] = t1 - t0;
    b[it] = t2 - t1;
  }
  *ours_us = bench_median(a, iters);
  *plain_us = bench_median(b, iters);
  return st;
}

int bench_suite_train(int argc, char **argv) {
  bool json = tool_has_flag(argc, argv, "--json");
  int iters = 15, n = 1000;
  int64_t e = 1000;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0) continue;
    if (i + 1 >= argc) return usage();
    if (strcmp(argv[i], "--iters") == 0)
      iters = atoi(argv[++i]);
    else if (strcmp(argv[i], "--params") == 0)
      n = atoi(argv[++i]);
    else if (strcmp(argv[i], "--elems") == 0)
      e = atoll(argv[++i]);
    else
      return usage();
  }
  if (iters < 1 || iters > MAX_ITERS || n < 1 || e < 1) return usage();
  bench_machine_print(json);
  dt_tensor **params = calloc((size_t)n, sizeof *params);
  plain_state ps = {.n = n, .e = e};
  ps.p = calloc((size_t)n, sizeof(float *));
  ps.g = calloc((size_t)n, sizeof(float *));
  ps.s0 = calloc((size_t)n, sizeof(float *));
  ps.s1 = calloc((size_t)n, sizeof(float *));
  dt_status st = params && ps.p && ps.g && ps.s0 && ps.s1 ? DT_OK : DT_ERR_NOMEM;
  for (int i = 0; i < n && !st; i++) {
    dt_tensor *g = NULL;
    st = dt_rand(1, &e, DT_F32, (uint64_t)i + 1, &params[i]);
    if (!st) st = dt_rand(1, &e, DT_F32, (uint64_t)(i + n + 1), &g);
    if (!st) st = dt_tensor_set_requires_grad(params[i], true);
    if (!st) st = dt_tensor_set_grad(params[i], g);
    if (!st) ps.g[i] = local_floats(g);
    dt_tensor_release(g); /* the parameter keeps it as its .grad */
  }
  static const char *const names[2] = {"sgd_momentum", "adamw"};
  for (int k = 0; k < 2 && !st; k++) {
    dt_optimizer *opt = NULL;
    if (k == 0) {
      dt_sgd_options o = {.lr = 0.01, .momentum = 0.9};
      st = dt_optimizer_create_sgd(n, params, &o, &opt);
    } else {
      dt_adam_options o = {0}; /* PyTorch's AdamW: lr 1e-3, betas 0.9, 0.999, eps 1e-8, wd 0.01 */
      st = dt_optimizer_create_adamw(n, params, &o, &opt);
    }
    /* The baseline runs over the same memory: the parameters, gradients and state. */
    for (int i = 0; i < n && !st; i++) {
      dt_tensor *s0 = NULL, *s1 = NULL;
      st = dt_optimizer_state(opt, i, k == 0 ? "momentum_buffer" : "exp_avg", &s0, NULL);
      if (!st && k == 1) st = dt_optimizer_state(opt, i, "exp_avg_sq", &s1, NULL);
      if (!st) {
        ps.p[i] = local_floats(params[i]);
        ps.s0[i] = local_floats(s0);
        ps.s1[i] = s1 ? local_floats(s1) : NULL;
      }
      dt_tensor_release(s0); /* the optimizer keeps them */
      dt_tensor_release(s1);
    }
    ps.step = 0;
    double ours = 0, plain = 0;
    if (!st) st = measure(opt, k == 0 ? plain_sgd : plain_adamw, &ps, iters, &ours, &plain);
    dt_optimizer_destroy(opt);
    if (st) break;
    double ratio = ours / plain, per_param_ns = (ours - plain) * 1e3 / n;
    if (json) {
      printf("{\"name\":\"optim_step\",\"optimizer\":\"%s\",\"params\":%d,\"elems\":%lld,"
             "\"ours_us\":%.1f,\"plain_us\":%.1f,\"ratio\":%.3f,\"target_ratio\":1.3,"
             "\"overhead_ns_per_param\":%.1f}\n",
             names[k], n, (long long)e, ours, plain, ratio, per_param_ns);
    } else {
      printf("optim step %-12s %d x %lld: ours %.0f us, plain loop %.0f us, ratio %.2f "
             "(target <= 1.3), overhead %.0f ns per parameter\n",
             names[k], n, (long long)e, ours, plain, ratio, per_param_ns);
    }
  }
  for (int i = 0; i < n && params; i++) dt_tensor_release(params[i]);
  free(params);
  free(ps.p);
  free(ps.g);
  free(ps.s0);
  free(ps.s1);
  if (st) {
    fprintf(stderr, "bench train: %s\n", dt_last_error());
    return 1;
  }
  return 0;
}
