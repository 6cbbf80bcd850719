/*
 * dtensor bench compile's training step (issue 22.7, 26.5): two Linear layers 64-128-16 with
 * relu and an mse loss, four parameters that require grad, compiled with options.backward
 * against eager (the function, then dt_backward); the batch is a dynamic dim (no recompile).
 *
 *   time          wall and process CPU microseconds per step, sides alternating (compiled,
 *                 eager, compiled, ...; each sample 200 steps), medians.
 *   instructions  instructions per step counted by callgrind: each (side, batch) in its own
 *                 child under valgrind (bench_callgrind.h), 5 steps of warm-up (the trace
 *                 among them) then `steps` steps counted, the total divided by steps.
 *   child         one side at one batch, the counted region between callgrind client
 *                 requests: what `instructions` runs, and what a profile by hand runs:
 *                   valgrind --tool=callgrind --collect-atstart=no dtensor bench compile \
 *                     --child --side compiled --batch 32 --steps 200
 *                 (DT_BENCH_PROFILE=1 with --collect-atstart=yes keeps collection on for
 *                 callgrind_annotate, the setup and the trace included).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <valgrind/callgrind.h>

#include "bench_callgrind.h"
#include "bench_util.h"
#include "core/core_impl.h"
#include "dtensor/compile.h"
#include "dtensor/dtensor.h"

#define MAX_SAMPLES 64
#define WARMUP_STEPS 5

/* bench/bench_compile.c's entries into this file. */
int bench_compile_train_time(bool json, int iters, const int64_t *batches, int n_batches);
int bench_compile_train_instructions(bool json, int steps, const int64_t *batches, int n_batches);
int bench_compile_train_child(bool compiled, int64_t batch, int steps);

enum { IN = 64, HID = 128, OUT = 16 };

/* Two Linear layers with relu and an mse loss; the four parameters (user) require grad. */
static dt_status train_fn(void *user, int n_in, dt_tensor *const *in, int n_out, dt_tensor **out) {
  (void)n_in, (void)n_out;
  dt_tensor **p = user, *h = NULL, *a = NULL, *y = NULL;
  dt_status st = dt_linear(in[0], p[0], p[1], &h);
  if (!st) st = dt_relu(h, &a);
  if (!st) st = dt_linear(a, p[2], p[3], &y);
  if (!st) st = dt_mse_loss(y, in[1], DT_LOSS_MEAN, &out[0]);
  dt_tensor_release(h);
  dt_tensor_release(a);
  dt_tensor_release(y);
  return st;
}

/* One side of the comparison: its parameters (seeded alike on both sides) and, compiled, its
 * handle. */
typedef struct train_side {
  dt_tensor *params[4];
  dt_compiled *c; /* NULL: eager */
} train_side;

static void side_destroy(train_side *s) {
  dt_compiled_destroy(s->c);
  for (int k = 0; k < 4; k++) dt_tensor_release(s->params[k]);
  memset(s, 0, sizeof *s);
}

static dt_status side_init(bool compiled, train_side *s) {
  static const int64_t shapes[4][2] = {{HID, IN}, {HID, 0}, {OUT, HID}, {OUT, 0}};
  memset(s, 0, sizeof *s);
  dt_status st = DT_OK;
  for (int k = 0; k < 4 && !st; k++) {
    st = dt_rand(shapes[k][1] ? 2 : 1, shapes[k], DT_F32, 10 + (uint64_t)k, &s->params[k]);
    if (!st) st = dt_tensor_set_requires_grad(s->params[k], true);
  }
  dt_compile_mark marks[2] = {{.input = 0, .dim = 0, .dynamic = true},
                              {.input = 1, .dim = 0, .dynamic = true}};
  if (!st && compiled)
    st = dt_compile(train_fn, s->params, 2, 1,
                    &(dt_compile_options){.n_marks = 2, .marks = marks, .backward = true}, &s->c);
  if (st) side_destroy(s);
  return st;
}

/* reps steps: a compiled call (forward, backward, .grad accumulated) or eager (the function,
 * then dt_backward). */
static dt_status run_steps(train_side *s, dt_tensor *const *in, int reps) {
  dt_status st = DT_OK;
  for (int i = 0; i < reps && !st; i++) {
    dt_tensor *loss = NULL;
    st = s->c ? dt_compiled_call(s->c, 2, in, 1, &loss) : train_fn(s->params, 2, in, 1, &loss);
    if (!st && !s->c) st = dt_backward(loss, NULL);
    dt_tensor_release(loss);
  }
  return st;
}

/* Wall and process CPU microseconds per step of reps steps. */
static dt_status time_steps(train_side *s, dt_tensor *const *in, int reps, double *wall,
                            double *cpu) {
  double t0 = bench_now_us(), c0 = bench_process_cpu_us();
  dt_status st = run_steps(s, in, reps);
  *cpu = (bench_process_cpu_us() - c0) / reps;
  *wall = (bench_now_us() - t0) / reps;
  return st;
}

static dt_status make_batch(int64_t batch, dt_tensor **x, dt_tensor **y) {
  dt_status st = dt_rand(2, (int64_t[]){batch, IN}, DT_F32, 1, x);
  if (!st) st = dt_rand(2, (int64_t[]){batch, OUT}, DT_F32, 2, y);
  return st;
}

static dt_status check_no_recompile(train_side *s) {
  dt_compile_stats stats = {0};
  dt_status st = dt_compiled_stats(s->c, &stats);
  if (!st && stats.recompiles != 0)
    st = dt__error(DT_ERR_INTERNAL, "bench compile: the training step recompiled: %s",
                   dt_compiled_recompile_reason(s->c, 0));
  return st;
}

int bench_compile_train_time(bool json, int iters, const int64_t *batches, int n_batches) {
  train_side sc = {0}, se = {0};
  dt_status st = side_init(true, &sc);
  if (!st) st = side_init(false, &se);
  for (int b = 0; b < n_batches && !st; b++) {
    dt_tensor *x = NULL, *y = NULL;
    st = make_batch(batches[b], &x, &y);
    dt_tensor *in[2] = {x, y};
    double cw[MAX_SAMPLES], cc[MAX_SAMPLES], ew[MAX_SAMPLES], ec[MAX_SAMPLES], w = 0, c = 0;
    if (!st) st = time_steps(&sc, in, 50, &w, &c);
    if (!st) st = time_steps(&se, in, 50, &w, &c);
    for (int i = 0; i < iters && !st; i++) {
      st = time_steps(&sc, in, 200, &cw[i], &cc[i]);
      if (!st) st = time_steps(&se, in, 200, &ew[i], &ec[i]);
    }
    if (!st) {
      double cwm = bench_median(cw, iters), ewm = bench_median(ew, iters);
      double ccm = bench_median(cc, iters), ecm = bench_median(ec, iters);
      if (json)
        printf("{\"name\":\"compile_train_step\",\"batch\":%lld,\"layers\":[%d,%d,%d],"
               "\"samples\":%d,\"compiled_us\":%.2f,\"eager_us\":%.2f,"
               "\"eager_over_compiled\":%.2f,\"compiled_cpu_us\":%.2f,\"eager_cpu_us\":%.2f,"
               "\"eager_over_compiled_cpu\":%.2f}\n",
               (long long)batches[b], IN, HID, OUT, iters, cwm, ewm, ewm / cwm, ccm, ecm,
               ecm / ccm);
      else
        printf("training step (Linear %d-%d-%d + mse, batch %lld, forward + backward + .grad), "
               "medians of %d alternating samples:\n  wall: compiled %.2f us, eager %.2f us, "
               "%.2fx; CPU: compiled %.2f us, eager %.2f us, %.2fx\n",
               IN, HID, OUT, (long long)batches[b], iters, cwm, ewm, ewm / cwm, ccm, ecm,
               ecm / ccm);
    }
    dt_tensor_release(x);
    dt_tensor_release(y);
  }
  if (!st) st = check_no_recompile(&sc);
  side_destroy(&sc);
  side_destroy(&se);
  if (st) fprintf(stderr, "bench compile: %s\n", dt_last_error());
  return st ? 1 : 0;
}

int bench_compile_train_child(bool compiled, int64_t batch, int steps) {
  train_side s = {0};
  dt_tensor *x = NULL, *y = NULL;
  dt_status st = side_init(compiled, &s);
  if (!st) st = make_batch(batch, &x, &y);
  dt_tensor *in[2] = {x, y};
  if (!st) st = run_steps(&s, in, WARMUP_STEPS); /* the trace, caches, pools */
  bool toggle = !getenv("DT_BENCH_PROFILE");
  if (!st) {
    CALLGRIND_ZERO_STATS;
    if (toggle) CALLGRIND_TOGGLE_COLLECT;
    st = run_steps(&s, in, steps);
    if (toggle) CALLGRIND_TOGGLE_COLLECT;
    CALLGRIND_DUMP_STATS_AT("train_step");
  }
  if (!st && compiled) st = check_no_recompile(&s);
  dt_tensor_release(x);
  dt_tensor_release(y);
  side_destroy(&s);
  if (st) fprintf(stderr, "bench compile: %s\n", dt_last_error());
  return st ? 1 : 0;
}

static void take_total(const char *label, long total, void *user) {
  if (strcmp(label, "train_step") == 0) *(long *)user = total;
}

/* Instructions of `steps` steps of one side at one batch, in a child under callgrind. */
static int count_side(bool compiled, int64_t batch, int steps, long *total) {
  char batch_text[24], steps_text[24];
  snprintf(batch_text, sizeof batch_text, "%lld", (long long)batch);
  snprintf(steps_text, sizeof steps_text, "%d", steps);
  const char *args[] = {
      "bench",   "compile",  "--child", "--side",   compiled ? "compiled" : "eager",
      "--batch", batch_text, "--steps", steps_text, NULL};
  bench_callgrind_dir dir = {{0}};
  *total = -1;
  int rc = bench_callgrind_run("bench compile", args, &dir);
  if (!rc) rc = bench_callgrind_each(&dir, take_total, total);
  bench_callgrind_clean(&dir);
  if (!rc && *total < 0) {
    fprintf(stderr, "bench compile: no count for the %s side at batch %lld\n",
            compiled ? "compiled" : "eager", (long long)batch);
    rc = 1;
  }
  return rc;
}

int bench_compile_train_instructions(bool json, int steps, const int64_t *batches, int n_batches) {
  for (int b = 0; b < n_batches; b++) {
    long compiled = 0, eager = 0;
    if (count_side(true, batches[b], steps, &compiled) ||
        count_side(false, batches[b], steps, &eager))
      return 1;
    double c = (double)compiled / steps, e = (double)eager / steps;
    if (json)
      printf("{\"name\":\"compile_train_step\",\"metric\":\"instructions_per_step\",\"batch\":%lld,"
             "\"layers\":[%d,%d,%d],\"steps\":%d,\"compiled\":%.0f,\"eager\":%.0f,"
             "\"eager_over_compiled\":%.3f}\n",
             (long long)batches[b], IN, HID, OUT, steps, c, e, e / c);
    else
      printf("training step (Linear %d-%d-%d + mse, batch %lld), instructions per step over %d "
             "steps: compiled %.0f, eager %.0f, %.3fx\n",
             IN, HID, OUT, (long long)batches[b], steps, c, e, e / c);
  }
  return 0;
}
