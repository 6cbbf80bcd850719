/*
 * dtensor bench autograd: what autograd costs and how its backward scales (issue 12).
 *
 *   recording  forward ops on small tensors ([4, 4] float32) with recording (an input
 *              requires grad, grad mode on) against the same ops under no_grad: the extra
 *              nanoseconds per op (target <= 150), for add, mul, relu and mm. Each op of
 *              the recorded run also frees its node when its output dies, as a training
 *              loop does.
 *   matmul     the same for one 1024x1024 matmul (target <= 2 % extra).
 *   tp_mlp     the backward of a tensor-parallel MLP (Linear(H, H) colwise, ReLU,
 *              Linear(H, H) rowwise, no bias, H = 4096, batch 64, loss = sum) on 2 ranks
 *              (threads) against the same MLP on local tensors on 1 rank (target speedup
 *              >= 1.7). Only dt_backward is timed; the forward runs before it, untimed.
 *
 * Every comparison alternates its two sides (A B A B ...: ABAB interleaving) so that drift
 * in the machine's load hits both alike, and reports medians; BLAS runs one thread per rank.
 * Options: --json, --iters N (samples per side, default 7), --hidden H, --batch B.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_machine.h"
#include "bench_util.h"
#include "dtensor/dtensor.h"
#include "kernels/cpu/blas.h"
#include "tools.h"

#define MAX_ITERS 64

typedef dt_status (*op_fn)(dt_tensor *a, dt_tensor *b, dt_tensor **out);

static dt_status op_add(dt_tensor *a, dt_tensor *b, dt_tensor **out) { return dt_add(a, b, out); }
static dt_status op_mul(dt_tensor *a, dt_tensor *b, dt_tensor **out) { return dt_mul(a, b, out); }
static dt_status op_mm(dt_tensor *a, dt_tensor *b, dt_tensor **out) { return dt_mm(a, b, out); }
static dt_status op_relu(dt_tensor *a, dt_tensor *b, dt_tensor **out) {
  (void)b;
  return dt_relu(a, out);
}

/* Microseconds per call of `reps` calls of op, recorded (grad mode on) or not. */
static dt_status time_op(op_fn op, dt_tensor *a, dt_tensor *b, int reps, bool record, double *us) {
  bool prev = dt_grad_mode_set(record);
  dt_status st = DT_OK;
  double t0 = bench_now_us();
  for (int i = 0; i < reps && !st; i++) {
    dt_tensor *y = NULL;
    st = op(a, b, &y);
    dt_tensor_release(y);
  }
  *us = (bench_now_us() - t0) / reps;
  dt_grad_mode_set(prev);
  return st;
}

/* Median recorded and unrecorded time per call, sides alternating. */
static dt_status compare(op_fn op, dt_tensor *a, dt_tensor *b, int reps, int iters,
                         double *recorded, double *plain) {
  double r[MAX_ITERS], p[MAX_ITERS], warm;
  dt_status st = time_op(op, a, b, reps, true, &warm);
  if (!st) st = time_op(op, a, b, reps, false, &warm);
  for (int it = 0; it < iters && !st; it++) {
    st = time_op(op, a, b, reps, false, &p[it]);
    if (!st) st = time_op(op, a, b, reps, true, &r[it]);
  }
  if (st) return st;
  *recorded = bench_median(r, iters);
  *plain = bench_median(p, iters);
  return DT_OK;
}

typedef struct tp_bench {
  int64_t hidden, batch;
  int iters;
  double single[MAX_ITERS]; /* backward on 1 rank, microseconds */
  double tp[MAX_ITERS];     /* backward on 2 ranks, rank 0, microseconds */
} tp_bench;

/* loss = sum(linear(relu(linear(x, w1)), w2)); the weights require grad. */
static dt_status mlp_loss(dt_tensor *x, dt_tensor *w1, dt_tensor *w2, dt_tensor **loss) {
  dt_tensor *h = NULL, *a = NULL, *y = NULL;
  dt_status st = dt_linear(x, w1, NULL, &h);
  if (!st) st = dt_relu(h, &a);
  if (!st) st = dt_linear(a, w2, NULL, &y);
  if (!st) st = dt_sum(y, loss);
  dt_tensor_release(h);
  dt_tensor_release(a);
  dt_tensor_release(y);
  return st;
}

/* Forward (untimed), then the timed backward; the gradients are dropped afterwards. */
static dt_status timed_backward(dt_tensor *x, dt_tensor *w1, dt_tensor *w2, dt_comm *barrier,
                                double *us) {
  dt_tensor *loss = NULL;
  dt_status st = mlp_loss(x, w1, w2, &loss);
  if (!st && barrier) st = dt_comm_barrier(barrier);
  double t0 = bench_now_us();
  if (!st) st = dt_backward(loss, NULL);
  *us = bench_now_us() - t0;
  dt_tensor_release(loss);
  if (!st) st = dt_tensor_zero_grad(w1, true);
  if (!st) st = dt_tensor_zero_grad(w2, true);
  return st;
}

static dt_status tp_rank(dt_comm *world, void *arg) {
  tp_bench *b = arg;
  int rank = dt_comm_rank(world);
  int64_t h = b->hidden, n = b->batch;
  dt_mesh *mesh = NULL;
  dt_tensor *x = NULL, *w1 = NULL, *w2 = NULL;    /* distributed */
  dt_tensor *lx = NULL, *lw1 = NULL, *lw2 = NULL; /* rank 0's local copies */
  dt_placement r = dt_replicate(), s0 = dt_shard(0), s1 = dt_shard(1);
  dt_status st = dt_mesh_create(world, 1, (int[]){2}, NULL, &mesh);
  if (!st) st = dt_dist_randn(mesh, 2, (int64_t[]){n, h}, DT_F32, 1, 1, &r, &x);
  if (!st) st = dt_dist_randn(mesh, 2, (int64_t[]){h, h}, DT_F32, 2, 1, &s0, &w1); /* colwise */
  if (!st) st = dt_dist_randn(mesh, 2, (int64_t[]){h, h}, DT_F32, 3, 1, &s1, &w2); /* rowwise */
  if (!st) st = dt_tensor_set_requires_grad(w1, true);
  if (!st) st = dt_tensor_set_requires_grad(w2, true);
  if (!st && rank == 0) {
    st = dt_randn(2, (int64_t[]){n, h}, DT_F32, 1, &lx);
    if (!st) st = dt_randn(2, (int64_t[]){h, h}, DT_F32, 2, &lw1);
    if (!st) st = dt_randn(2, (int64_t[]){h, h}, DT_F32, 3, &lw2);
    if (!st) st = dt_tensor_set_requires_grad(lw1, true);
    if (!st) st = dt_tensor_set_requires_grad(lw2, true);
  }
  for (int it = -1; it < b->iters && !st; it++) { /* iteration -1 warms up */
    double us = 0;
    /* A: the local MLP on rank 0 alone; rank 1 waits at the barrier. */
    if (rank == 0) st = timed_backward(lx, lw1, lw2, NULL, &us);
    if (!st && it >= 0 && rank == 0) b->single[it] = us;
    if (!st) st = dt_comm_barrier(world);
    /* B: the distributed MLP on both ranks. */
    if (!st) st = timed_backward(x, w1, w2, world, &us);
    if (!st && it >= 0 && rank == 0) b->tp[it] = us;
    if (!st) st = dt_comm_barrier(world);
  }
  dt_tensor_release(x);
  dt_tensor_release(w1);
  dt_tensor_release(w2);
  dt_tensor_release(lx);
  dt_tensor_release(lw1);
  dt_tensor_release(lw2);
  dt_mesh_destroy(mesh);
  return st;
}

static int usage(void) {
  fprintf(stderr,
          "bench autograd: bad or incomplete option (see 'dtensor bench autograd --help')\n");
  return 2;
}

int bench_suite_autograd(int argc, char **argv) {
  bool json = tool_has_flag(argc, argv, "--json");
  int iters = 7;
  int64_t hidden = 4096, batch = 64;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0) continue;
    if (i + 1 >= argc) return usage();
    if (strcmp(argv[i], "--iters") == 0)
      iters = atoi(argv[++i]);
    else if (strcmp(argv[i], "--hidden") == 0)
      hidden = atoll(argv[++i]);
    else if (strcmp(argv[i], "--batch") == 0)
      batch = atoll(argv[++i]);
    else
      return usage();
  }
  if (iters < 1 || iters > MAX_ITERS || hidden < 2 || hidden % 2 || batch < 1) return usage();
  bench_machine_print(json);
  dt_set_num_threads(1); /* one thread: the BLAS's and the kernels' */

  /* Small ops: a requires grad, b does not. */
  static const struct {
    const char *name;
    op_fn fn;
  } ops[] = {{"add", op_add}, {"mul", op_mul}, {"relu", op_relu}, {"mm", op_mm}};
  dt_tensor *a = NULL, *b = NULL;
  dt_status st = dt_rand(2, (int64_t[]){4, 4}, DT_F32, 1, &a);
  if (!st) st = dt_rand(2, (int64_t[]){4, 4}, DT_F32, 2, &b);
  if (!st) st = dt_tensor_set_requires_grad(a, true);
  for (size_t k = 0; k < sizeof ops / sizeof ops[0] && !st; k++) {
    double rec = 0, plain = 0;
    st = compare(ops[k].fn, a, b, 20000, iters, &rec, &plain);
    if (st) break;
    if (json) {
      printf("{\"name\":\"autograd_recording\",\"op\":\"%s\",\"shape\":[4,4],\"no_grad_ns\":%.1f,"
             "\"recorded_ns\":%.1f,\"extra_ns\":%.1f,\"target_extra_ns\":150}\n",
             ops[k].name, plain * 1e3, rec * 1e3, (rec - plain) * 1e3);
    } else {
      printf("recording %-4s [4, 4]: no_grad %.0f ns, recorded %.0f ns, +%.0f ns per op "
             "(target <= 150)\n",
             ops[k].name, plain * 1e3, rec * 1e3, (rec - plain) * 1e3);
    }
  }
  dt_tensor_release(a);
  dt_tensor_release(b);
  a = b = NULL;

  /* One 1024x1024 matmul. */
  if (!st) st = dt_rand(2, (int64_t[]){1024, 1024}, DT_F32, 3, &a);
  if (!st) st = dt_rand(2, (int64_t[]){1024, 1024}, DT_F32, 4, &b);
  if (!st) st = dt_tensor_set_requires_grad(a, true);
  if (!st) {
    double rec = 0, plain = 0;
    st = compare(op_mm, a, b, 1, iters, &rec, &plain);
    double pct = 100 * (rec - plain) / plain;
    if (!st && json) {
      printf("{\"name\":\"autograd_recording\",\"op\":\"mm\",\"shape\":[1024,1024],"
             "\"no_grad_us\":%.1f,\"recorded_us\":%.1f,\"extra_percent\":%.2f,"
             "\"target_extra_percent\":2}\n",
             plain, rec, pct);
    } else if (!st) {
      printf("recording mm [1024, 1024]: no_grad %.0f us, recorded %.0f us, %+.2f %% "
             "(target <= 2 %%)\n",
             plain, rec, pct);
    }
  }
  dt_tensor_release(a);
  dt_tensor_release(b);

  /* Backward of the TP MLP, 2 ranks against 1. */
  tp_bench tb = {.hidden = hidden, .batch = batch, .iters = iters};
  if (!st) st = dt_comm_spawn(2, tp_rank, &tb);
  if (!st) {
    bench_stats one = bench_stats_of(tb.single, iters), two = bench_stats_of(tb.tp, iters);
    if (json) {
      printf("{\"name\":\"autograd_tp_mlp_backward\",\"world\":2,\"hidden\":%lld,\"batch\":%lld,"
             "\"iters\":%d,\"single_us\":%.1f,\"single_min_us\":%.1f,\"single_max_us\":%.1f,"
             "\"tp_us\":%.1f,\"tp_min_us\":%.1f,\"tp_max_us\":%.1f,\"speedup\":%.3f,"
             "\"target_speedup\":1.7}\n",
             (long long)hidden, (long long)batch, iters, one.median, one.min, one.max, two.median,
             two.min, two.max, one.median / two.median);
    } else {
      printf("tp_mlp backward hidden %lld batch %lld, %d alternating runs: 1 rank %.1f us "
             "(%.1f..%.1f), 2 ranks %.1f us (%.1f..%.1f), speedup %.2fx (target >= 1.7)\n",
             (long long)hidden, (long long)batch, iters, one.median, one.min, one.max, two.median,
             two.min, two.max, one.median / two.median);
    }
  }
  if (st) {
    fprintf(stderr, "bench autograd: %s\n", dt_last_error());
    return 1;
  }
  return 0;
}
