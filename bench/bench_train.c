/*
 * dtensor bench train: what training costs (issue 13).
 *
 *   optim_step  one step of SGD (momentum 0.9) and of AdamW over P parameters of E float32
 *               elements each (default 1,000 x 1,000), against a plain C loop doing the same
 *               arithmetic over the same memory (the parameters, gradients and state buffers)
 *               (target ratio <= 1.3), and the overhead per parameter in ns ((ours - plain) /
 *               P): the checks of every parameter and gradient before any update, and the
 *               state lookup. The two sides alternate (A B A B ...), each timed in CPU time of
 *               the thread (the machine is shared); medians and the spread (min, max) of the
 *               per-pair ratio are reported.
 *   demo_step   the training step of the `dtensor demo` model (tools/demo_model.c, the very
 *               step function the demo runs) on 4 ranks (2 dp x 2 tp, threads) and on 1 rank
 *               (1 x 1), alternating runs; wall time per step, and the exposed communication:
 *               the time of each rank's collective spans not overlapped by its kernel spans in
 *               the profiler's trace of one step (dt_trace_process_comm), as a fraction of the
 *               step, mean over ranks.
 *   fsdp_step   an MLP of 6 Linear(256, 256) layers under dt_parallel_fsdp on 2 ranks, with
 *               prefetch on and off (two models, alternating steps): step time (forward, mse,
 *               backward, SGD) and the exposed-comm fraction of one traced step each.
 *
 * Options: --json, --iters N (samples per side, default 15), --params P, --elems E,
 * --only optim|demo|fsdp. With --size, the suite is the GPT-2-like training step instead
 * (bench/bench_gpt.c).
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_machine.h"
#include "bench_util.h"
#include "demo_model.h"
#include "dtensor/dtensor.h"
#include "dtensor/parallel.h"
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

/* Median microseconds of our step and of the plain loop, alternating, and the spread of the
 * per-pair ratio. */
static dt_status measure(dt_optimizer *opt, void (*plain)(plain_state *), plain_state *ps,
                         int iters, double *ours_us, double *plain_us, bench_stats *ratio) {
  double a[MAX_ITERS], b[MAX_ITERS], r[MAX_ITERS];
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
    r[it] = a[it] / b[it];
  }
  *ratio = bench_stats_of(r, iters);
  *ours_us = bench_median(a, iters);
  *plain_us = bench_median(b, iters);
  return st;
}

static dt_status bench_optim(bool json, int iters, int n, int64_t e) {
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
    bench_stats spread = {0};
    if (!st)
      st = measure(opt, k == 0 ? plain_sgd : plain_adamw, &ps, iters, &ours, &plain, &spread);
    dt_optimizer_destroy(opt);
    if (st) break;
    double ratio = ours / plain, per_param_ns = (ours - plain) * 1e3 / n;
    if (json) {
      printf("{\"name\":\"optim_step\",\"optimizer\":\"%s\",\"params\":%d,\"elems\":%lld,"
             "\"ours_us\":%.1f,\"plain_us\":%.1f,\"ratio\":%.3f,\"ratio_min\":%.3f,"
             "\"ratio_max\":%.3f,\"target_ratio\":1.3,\"overhead_ns_per_param\":%.1f}\n",
             names[k], n, (long long)e, ours, plain, ratio, spread.min, spread.max, per_param_ns);
    } else {
      printf("optim step %-12s %d x %lld: ours %.0f us, plain loop %.0f us, ratio %.2f "
             "(pairs %.2f..%.2f; target <= 1.3), overhead %.0f ns per parameter\n",
             names[k], n, (long long)e, ours, plain, ratio, spread.min, spread.max, per_param_ns);
    }
  }
  for (int i = 0; i < n && params; i++) dt_tensor_release(params[i]);
  free(params);
  free(ps.p);
  free(ps.g);
  free(ps.s0);
  free(ps.s1);
  return st;
}

/* ---- Training steps on several ranks ------------------------------------------------------ */

#define MAX_RANKS 4

/* One traced step per rank: the window (trace time, us) each rank spent in it. */
typedef struct traced_step {
  dt_profiler *profiler;
  double start_us[MAX_RANKS], end_us[MAX_RANKS];
} traced_step;

/* Starts (or stops) the profiler between barriers, so that it covers the same work on every
 * rank; the barriers themselves lie outside the measured windows. */
static dt_status profiler_switch(dt_comm *world, dt_profiler *profiler, bool start) {
  dt_status st = dt_comm_barrier(world);
  if (!st && dt_comm_rank(world) == 0)
    st = start ? dt_profiler_start(profiler) : dt_profiler_stop(profiler);
  if (!st) st = dt_comm_barrier(world);
  return st;
}

/* The exposed-comm fraction of the traced step: per rank, over its window, then the mean. */
static dt_status exposed_fraction(traced_step *ts, int ranks, double *fraction) {
  char path[128];
  snprintf(path, sizeof path, "/tmp/dtensor_bench_train_%d.json", (int)getpid());
  dt_trace *trace = NULL;
  dt_status st = dt_profiler_write_chrome_trace(ts->profiler, path);
  if (!st) st = dt_trace_read_file(path, &trace);
  remove(path);
  double sum = 0;
  int counted = 0;
  for (int p = 0; !st && p < dt_trace_process_count(trace); p++) {
    dt_trace_process_info pi;
    dt_trace_comm_info ci;
    st = dt_trace_process(trace, p, &pi);
    int r = (int)pi.pid_number;
    if (st || r < 0 || r >= ranks) continue;
    st = dt_trace_process_comm(trace, p, ts->start_us[r], ts->end_us[r], &ci);
    if (!st) sum += ci.exposed_fraction, counted++;
  }
  dt_trace_destroy(trace);
  *fraction = counted ? sum / counted : NAN;
  return st;
}

typedef struct demo_arg {
  int world;          /* 4 (2 x 2) or 1 (1 x 1) */
  int steps;          /* timed steps */
  double step_us;     /* rank 0: wall time per step */
  traced_step *trace; /* NULL: no traced step */
  const char *device; /* the mesh's device kind: "cpu" or "cuda" */
} demo_arg;

static dt_status demo_rank(dt_comm *world, void *p) {
  demo_arg *a = p;
  int rank = dt_comm_rank(world), side = a->world == 1 ? 1 : 2;
  dt_mesh *mesh = NULL;
  demo_model *model = NULL;
  dt_status st = dt_mesh_create_on(a->device, world, 2, (int[]){side, side},
                                   (const char *const[]){"dp", "tp"}, &mesh);
  if (!st) st = demo_model_create(mesh, &model);
  if (!st) st = demo_model_step(model, 0, NULL); /* warm: first-step paths, plan caches */
  if (!st) st = dt_comm_barrier(world);
  double t0 = bench_now_us();
  for (int s = 0; s < a->steps && !st; s++) st = demo_model_step(model, 1 + s, NULL);
  if (!st) st = dt_comm_barrier(world);
  if (rank == 0) a->step_us = (bench_now_us() - t0) / a->steps;
  if (!st && a->trace) {
    st = profiler_switch(world, a->trace->profiler, true);
    a->trace->start_us[rank] = bench_now_us();
    if (!st) st = demo_model_step(model, 1 + a->steps, NULL);
    a->trace->end_us[rank] = bench_now_us();
    if (!st) st = profiler_switch(world, a->trace->profiler, false);
  }
  demo_model_destroy(model);
  dt_mesh_destroy(mesh);
  return st;
}

static dt_status bench_demo(bool json, int iters, const char *device) {
  int rounds = iters < 3 ? 3 : iters > 9 ? 9 : iters;
  double us[2][MAX_ITERS], fraction[2] = {NAN, NAN};
  static const int worlds[2] = {4, 1};
  dt_status st = DT_OK;
  for (int r = 0; r < rounds && !st; r++) {
    for (int k = 0; k < 2 && !st; k++) { /* A B A B ...: 4 ranks, then 1 */
      traced_step ts = {0};
      demo_arg a = {
          .world = worlds[k], .steps = 3, .trace = r == rounds - 1 ? &ts : NULL, .device = device};
      if (a.trace) st = dt_profiler_create(&ts.profiler);
      if (!st) st = dt_comm_spawn(a.world, demo_rank, &a);
      if (!st && a.trace) st = exposed_fraction(&ts, a.world, &fraction[k]);
      dt_profiler_destroy(ts.profiler);
      us[k][r] = a.step_us;
    }
  }
  if (st) return st;
  bench_stats s4 = bench_stats_of(us[0], rounds), s1 = bench_stats_of(us[1], rounds);
  if (json) {
    printf(
        "{\"name\":\"demo_step\",\"device\":\"%s\",\"ranks\":4,\"mesh\":\"2x2\",\"step_us\":%.1f,"
        "\"step_us_min\":"
        "%.1f,\"step_us_max\":%.1f,\"one_rank_step_us\":%.1f,\"one_rank_min\":%.1f,"
        "\"one_rank_max\":%.1f,\"ratio\":%.3f,\"exposed_comm_fraction\":%.3f,"
        "\"one_rank_exposed_comm_fraction\":%.3f,\"rounds\":%d}\n",
        device, s4.median, s4.min, s4.max, s1.median, s1.min, s1.max, s4.median / s1.median,
        fraction[0], fraction[1], rounds);
  } else {
    printf("demo step 4 ranks (2x2): %.0f us (%.0f..%.0f), 1 rank: %.0f us (%.0f..%.0f), ratio "
           "%.2f; exposed comm %.1f %% of the step (1 rank: %.1f %%), %d rounds\n",
           s4.median, s4.min, s4.max, s1.median, s1.min, s1.max, s4.median / s1.median,
           100 * fraction[0], 100 * fraction[1], rounds);
  }
  return DT_OK;
}

/* ---- FSDP prefetch on vs off ---------------------------------------------------------------- */

#define FSDP_LAYERS 6
#define FSDP_WIDTH 256
#define FSDP_ROWS 32 /* per rank */
#define FSDP_MAX_PARAMS (2 * FSDP_LAYERS)

typedef struct fsdp_model {
  dt_module *module;
  dt_optimizer *opt;
  dt_tensor *params[FSDP_MAX_PARAMS];
  int n;
} fsdp_model;

typedef struct fsdp_arg {
  int rounds;
  double us[2][MAX_ITERS]; /* rank 0: [prefetch off, on][round] */
  traced_step trace[2];
} fsdp_arg;

static dt_status collect_param(const char *fqn, dt_tensor *t, bool is_buffer, void *user) {
  (void)fqn;
  fsdp_model *m = user;
  if (!is_buffer && m->n < FSDP_MAX_PARAMS) m->params[m->n++] = dt_tensor_retain(t);
  return DT_OK;
}

static dt_status fsdp_model_create(dt_mesh *mesh, bool prefetch, fsdp_model *m) {
  dt_module *layers[2 * FSDP_LAYERS - 1] = {0};
  dt_status st = DT_OK;
  int made = 0;
  for (int l = 0; l < FSDP_LAYERS && !st; l++) {
    st = dt_nn_linear(FSDP_WIDTH, FSDP_WIDTH, true, 1 + (uint64_t)l, &layers[made]);
    if (!st) made++;
    if (!st && l + 1 < FSDP_LAYERS) st = dt_nn_relu(&layers[made]);
    if (!st && l + 1 < FSDP_LAYERS) made++;
  }
  if (st) {
    for (int i = 0; i < made; i++) dt_module_destroy(layers[i]);
    return st;
  }
  st = dt_nn_sequential(made, layers, &m->module);
  dt_fsdp_options fo = {.mesh_dim = 0, .prefetch = prefetch};
  if (!st) st = dt_parallel_fsdp(m->module, mesh, &fo);
  if (!st) st = dt_module_visit_tensors(m->module, collect_param, m);
  dt_sgd_options so = {.lr = 1e-3, .momentum = 0.9};
  if (!st) st = dt_optimizer_create_sgd(m->n, m->params, &so, &m->opt);
  return st;
}

static void fsdp_model_destroy(fsdp_model *m) {
  dt_optimizer_destroy(m->opt);
  for (int i = 0; i < m->n; i++) dt_tensor_release(m->params[i]);
  dt_module_destroy(m->module);
}

static dt_status fsdp_step(fsdp_model *m, dt_tensor *x, dt_tensor *y) {
  dt_tensor *out = NULL, *loss = NULL;
  dt_status st = dt_optimizer_zero_grad(m->opt, true);
  if (!st) st = dt_module_forward(m->module, x, &out);
  if (!st) st = dt_mse_loss(out, y, DT_LOSS_MEAN, &loss);
  if (!st) st = dt_backward(loss, NULL);
  if (!st) st = dt_optimizer_step(m->opt);
  dt_tensor_release(out);
  dt_tensor_release(loss);
  return st;
}

static dt_status fsdp_rank(dt_comm *world, void *p) {
  fsdp_arg *a = p;
  int rank = dt_comm_rank(world);
  dt_mesh *mesh = NULL;
  fsdp_model models[2] = {{0}, {0}};
  dt_tensor *x = NULL, *y_local = NULL, *y = NULL;
  dt_status st =
      dt_mesh_create(world, 1, (int[]){dt_comm_size(world)}, (const char *const[]){"dp"}, &mesh);
  for (int k = 0; k < 2 && !st; k++) st = fsdp_model_create(mesh, k == 1, &models[k]);
  int64_t shape[2] = {FSDP_ROWS, FSDP_WIDTH};
  if (!st) st = dt_randn(2, shape, DT_F32, 100 + (uint64_t)rank, &x);
  if (!st) st = dt_randn(2, shape, DT_F32, 200 + (uint64_t)rank, &y_local);
  dt_placement s0 = dt_shard(0);
  if (!st) st = dt_dist_from_local(mesh, y_local, 1, &s0, NULL, &y);
  for (int k = 0; k < 2 && !st; k++) st = fsdp_step(&models[k], x, y); /* warm */
  for (int r = 0; r < a->rounds && !st; r++) {
    for (int k = 0; k < 2 && !st; k++) { /* A B A B ...: off, on */
      st = dt_comm_barrier(world);
      double t0 = bench_now_us();
      if (!st) st = fsdp_step(&models[k], x, y);
      if (!st) st = dt_comm_barrier(world);
      if (rank == 0) a->us[k][r] = bench_now_us() - t0;
    }
  }
  for (int k = 0; k < 2 && !st; k++) {
    traced_step *ts = &a->trace[k];
    st = profiler_switch(world, ts->profiler, true);
    ts->start_us[rank] = bench_now_us();
    if (!st) st = fsdp_step(&models[k], x, y);
    ts->end_us[rank] = bench_now_us();
    if (!st) st = profiler_switch(world, ts->profiler, false);
  }
  for (int k = 0; k < 2; k++) fsdp_model_destroy(&models[k]);
  dt_tensor_release(x);
  dt_tensor_release(y_local);
  dt_tensor_release(y);
  dt_mesh_destroy(mesh);
  return st;
}

static dt_status bench_fsdp(bool json, int iters) {
  const int ranks = 2;
  fsdp_arg a = {.rounds = iters};
  dt_status st = DT_OK;
  for (int k = 0; k < 2 && !st; k++) st = dt_profiler_create(&a.trace[k].profiler);
  if (!st) st = dt_comm_spawn(ranks, fsdp_rank, &a);
  double fraction[2] = {NAN, NAN};
  for (int k = 0; k < 2 && !st; k++) st = exposed_fraction(&a.trace[k], ranks, &fraction[k]);
  for (int k = 0; k < 2; k++) dt_profiler_destroy(a.trace[k].profiler);
  if (st) return st;
  for (int k = 0; k < 2; k++) {
    bench_stats s = bench_stats_of(a.us[k], a.rounds);
    if (json) {
      printf("{\"name\":\"fsdp_step\",\"prefetch\":%s,\"ranks\":%d,\"layers\":%d,\"width\":%d,"
             "\"rows_per_rank\":%d,\"step_us\":%.1f,\"step_us_min\":%.1f,\"step_us_max\":%.1f,"
             "\"exposed_comm_fraction\":%.3f,\"rounds\":%d}\n",
             k ? "true" : "false", ranks, FSDP_LAYERS, FSDP_WIDTH, FSDP_ROWS, s.median, s.min,
             s.max, fraction[k], a.rounds);
    } else {
      printf("fsdp step prefetch %-3s %d ranks, %d x Linear(%d, %d): %.0f us (%.0f..%.0f), "
             "exposed comm %.1f %% of the step\n",
             k ? "on" : "off", ranks, FSDP_LAYERS, FSDP_WIDTH, FSDP_WIDTH, s.median, s.min, s.max,
             100 * fraction[k]);
    }
  }
  return DT_OK;
}

int bench_suite_train(int argc, char **argv) {
  if (tool_has_flag(argc, argv, "--size")) return bench_gpt_train(argc, argv);
  bool json = tool_has_flag(argc, argv, "--json");
  int iters = 15, n = 1000;
  int64_t e = 1000;
  const char *only = NULL, *device = "cpu";
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0) continue;
    if (i + 1 >= argc) return usage();
    if (strcmp(argv[i], "--device") == 0)
      device = argv[++i];
    else if (strcmp(argv[i], "--iters") == 0 || strcmp(argv[i], "--params") == 0 ||
             strcmp(argv[i], "--elems") == 0) {
      long long v = 0;
      if (!bench_int_option(argv[i], argv[i + 1], 1, argv[i][2] == 'e' ? 1LL << 30 : INT_MAX, &v))
        return usage();
      if (argv[i][2] == 'i') iters = (int)v;
      if (argv[i][2] == 'p') n = (int)v;
      if (argv[i][2] == 'e') e = v;
      i++;
    } else if (strcmp(argv[i], "--only") == 0)
      only = argv[++i];
    else
      return usage();
  }
  if (iters < 1 || iters > MAX_ITERS || n < 1 || e < 1) return usage();
  if (only && strcmp(only, "optim") && strcmp(only, "demo") && strcmp(only, "fsdp")) return usage();
  if (strcmp(device, "cpu") != 0 && strcmp(device, "cuda") != 0) return usage();
  if (strcmp(device, "cpu") != 0 && (!only || strcmp(only, "demo") != 0)) {
    fprintf(stderr,
            "bench train: --device %s times the demo's step only (--only demo); the "
            "optimizer and FSDP rows are CPU figures\n",
            device);
    return 2;
  }
  bench_machine_print(json);
  dt_status st = DT_OK;
  if (!only || strcmp(only, "optim") == 0) st = bench_optim(json, iters, n, e);
  if (!st && (!only || strcmp(only, "demo") == 0)) st = bench_demo(json, iters, device);
  if (!st && (!only || strcmp(only, "fsdp") == 0)) st = bench_fsdp(json, iters);
  if (st) {
    fprintf(stderr, "bench train: %s\n", dt_last_error());
    return 1;
  }
  return 0;
}
