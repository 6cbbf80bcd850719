/*
 * dtensor bench pipeline: the pipeline bubble of 1F1B measured from a Chrome trace against the
 * schedule's theory (issue 28).
 *
 *   pipeline_bubble  2 pp ranks (threads), 1F1B, m = 1, 2, 4, 8 microbatches of 32 rows; each
 *                    stage 4 x Linear(256, 256) + ReLU, mse on the last. One warm step, then
 *                    one step traced with the forward and backward actions named. Measured
 *                    bubble: 1 - (sum over ranks of the compute lane's busy time) / (ranks x
 *                    the step's wall time, first start to last end); theory (p-1)/(m+p-1),
 *                    and the schedule's own simulation (dt_pp_schedule_bubble, backward = 2
 *                    forwards).
 *
 *   activation_checkpoint  4 blocks of Linear(256, 1024), GELU, Linear(1024, 256), ReLU on 64
 *                    rows, forward + mse + backward with every block checkpointed
 *                    (dt_module_set_checkpoint) against the plain model, alternating (A B A B),
 *                    15 samples each, thread CPU time: the recompute cost as the step time
 *                    ratio; and the bytes alive after forward + loss (a counting allocator).
 *
 * Options: --json.
 */
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "bench_machine.h"
#include "bench_util.h"
#include "dtensor/dtensor.h"
#include "tools.h"

#define RANKS 2
#define LAYERS 4
#define WIDTH 256
#define ROWS 32

typedef struct bubble_arg {
  int m;
  dt_profiler *profiler;
  double start_us[RANKS], end_us[RANKS];
} bubble_arg;

static dt_status mse(dt_tensor *y, dt_tensor *t, void *user, dt_tensor **loss) {
  (void)user;
  return dt_mse_loss(y, t, DT_LOSS_MEAN, loss);
}

static dt_status requires_grad(const char *fqn, dt_tensor *t, bool is_buffer, void *user) {
  (void)fqn;
  (void)user;
  return is_buffer ? DT_OK : dt_tensor_set_requires_grad(t, true);
}

static dt_status make_stage(int rank, dt_module **out) {
  dt_module *c[2 * LAYERS];
  dt_status st = DT_OK;
  for (int i = 0; i < LAYERS && !st; i++) {
    st = dt_nn_linear(WIDTH, WIDTH, true, 10 * (uint64_t)rank + (uint64_t)i, &c[2 * i]);
    if (!st) st = dt_nn_relu(&c[2 * i + 1]);
  }
  if (st) return st;
  st = dt_nn_sequential(2 * LAYERS, c, out);
  return st ? st : dt_module_visit_tensors(*out, requires_grad, NULL);
}

static dt_status bubble_rank(dt_comm *world, void *p) {
  bubble_arg *a = p;
  int rank = dt_comm_rank(world);
  dt_module *stage = NULL;
  dt_pp_schedule *sched = NULL;
  dt_pipeline *pipe = NULL;
  dt_tensor *x = NULL, *y = NULL;
  int64_t shape[2] = {(int64_t)ROWS * a->m, WIDTH};
  dt_status st = make_stage(rank, &stage);
  if (!st) st = dt_pp_schedule_create(DT_PP_1F1B, RANKS, 1, a->m, &sched);
  dt_pipeline_options po = {.profile_actions = true};
  if (!st) st = dt_pipeline_create(world, sched, 1, &stage, mse, NULL, &po, &pipe);
  if (!st) st = dt_randn(2, shape, DT_F32, 1, &x);
  if (!st) st = dt_randn(2, shape, DT_F32, 2, &y);
  if (!st) st = dt_pipeline_step(pipe, x, y, NULL); /* warm */
  if (!st) st = dt_comm_barrier(world);
  if (!st && rank == 0) st = dt_profiler_start(a->profiler);
  if (!st) st = dt_comm_barrier(world);
  a->start_us[rank] = bench_now_us();
  if (!st) st = dt_pipeline_step(pipe, x, y, NULL);
  a->end_us[rank] = bench_now_us();
  if (!st) st = dt_comm_barrier(world);
  if (!st && rank == 0) st = dt_profiler_stop(a->profiler);
  dt_pipeline_destroy(pipe);
  dt_pp_schedule_destroy(sched);
  dt_module_destroy(stage);
  dt_tensor_release(x);
  dt_tensor_release(y);
  return st;
}

/* 1 - busy / (ranks x window), busy from each rank's compute lanes in the trace. */
static dt_status measured_bubble(bubble_arg *a, double *bubble) {
  char path[128];
  snprintf(path, sizeof path, "/tmp/dtensor_bench_pipeline_%d.json", (int)getpid());
  dt_trace *trace = NULL;
  dt_status st = dt_profiler_write_chrome_trace(a->profiler, path);
  if (!st) st = dt_trace_read_file(path, &trace);
  if (!getenv("DT_BENCH_KEEP_TRACE")) remove(path);
  double busy = 0, lo = INFINITY, hi = -INFINITY;
  for (int r = 0; r < RANKS; r++) {
    lo = fmin(lo, a->start_us[r]);
    hi = fmax(hi, a->end_us[r]);
  }
  for (int p = 0; !st && p < dt_trace_process_count(trace); p++) {
    dt_trace_process_info pi;
    st = dt_trace_process(trace, p, &pi);
    for (int l = 0; !st && l < pi.lanes; l++) {
      dt_trace_lane_info li;
      st = dt_trace_lane(trace, p, l, &li);
      if (!st && strncmp(li.name, "compute", 7) == 0) busy += li.busy_us;
    }
  }
  dt_trace_destroy(trace);
  *bubble = 1.0 - busy / (RANKS * (hi - lo));
  return st;
}

/* ---- Activation checkpointing -------------------------------------------------------------- */

#define CK_BLOCKS 4
#define CK_WIDTH 256
#define CK_WIDE 1024
#define CK_ROWS 64
#define CK_SAMPLES 15

static _Atomic long long ck_live; /* bytes the library holds (counting allocator) */

static void *ck_alloc(size_t size, size_t alignment, void *user) {
  (void)user;
  size_t head = alignment < 64 ? 64 : alignment;
  char *base = aligned_alloc(head, (head + size + head - 1) / head * head);
  if (!base) return NULL;
  ((size_t *)(base + head))[-1] = size;
  ((size_t *)(base + head))[-2] = head;
  ck_live += (long long)size;
  return base + head;
}

static void ck_free(void *ptr, void *user) {
  (void)user;
  if (!ptr) return;
  size_t size = ((size_t *)ptr)[-1], head = ((size_t *)ptr)[-2];
  ck_live -= (long long)size;
  free((char *)ptr - head);
}

static dt_status ck_model(bool checkpoint, dt_module **out) {
  dt_module *blocks[CK_BLOCKS];
  dt_status st = DT_OK;
  int made = 0;
  for (; made < CK_BLOCKS && !st; made++) {
    dt_module *c[4] = {0};
    st = dt_nn_linear(CK_WIDTH, CK_WIDE, true, 50 + 2 * (uint64_t)made, &c[0]);
    if (!st) st = dt_nn_gelu(&c[1]);
    if (!st) st = dt_nn_linear(CK_WIDE, CK_WIDTH, true, 51 + 2 * (uint64_t)made, &c[2]);
    if (!st) st = dt_nn_relu(&c[3]);
    if (!st) st = dt_nn_sequential(4, c, &blocks[made]);
    if (!st && checkpoint) st = dt_module_set_checkpoint(blocks[made], true);
    if (st) break;
  }
  if (st) {
    for (int i = 0; i < made; i++) dt_module_destroy(blocks[i]);
    return st;
  }
  st = dt_nn_sequential(CK_BLOCKS, blocks, out);
  return st ? st : dt_module_visit_tensors(*out, requires_grad, NULL);
}

/* One forward + mse (+ backward); *live (may be NULL) gets the bytes the forward left alive. */
static dt_status ck_step(dt_module *model, dt_tensor *x, dt_tensor *y, long long *live) {
  dt_tensor *out = NULL, *loss = NULL;
  long long before = ck_live;
  dt_status st = dt_module_forward(model, x, &out);
  if (!st) st = dt_mse_loss(out, y, DT_LOSS_MEAN, &loss);
  if (live) *live = ck_live - before;
  if (!st) st = dt_backward(loss, NULL);
  dt_tensor_release(out);
  dt_tensor_release(loss);
  return st;
}

static dt_status bench_checkpoint(bool json) {
  dt_module *models[2] = {NULL, NULL};
  dt_tensor *x = NULL, *y = NULL;
  int64_t shape[2] = {CK_ROWS, CK_WIDTH};
  double us[2][CK_SAMPLES];
  long long live[2] = {0, 0};
  dt_status st = ck_model(false, &models[0]);
  if (!st) st = ck_model(true, &models[1]);
  if (!st) st = dt_randn(2, shape, DT_F32, 1, &x);
  if (!st) st = dt_randn(2, shape, DT_F32, 2, &y);
  for (int k = 0; k < 2 && !st; k++) st = ck_step(models[k], x, y, NULL); /* warm */
  for (int i = 0; i < CK_SAMPLES && !st; i++) {
    for (int k = 0; k < 2 && !st; k++) {
      double t0 = bench_thread_cpu_us();
      st = ck_step(models[k], x, y, NULL);
      us[k][i] = bench_thread_cpu_us() - t0;
    }
  }
  for (int k = 0; k < 2 && !st; k++) st = ck_step(models[k], x, y, &live[k]);
  for (int k = 0; k < 2; k++) dt_module_destroy(models[k]);
  dt_tensor_release(x);
  dt_tensor_release(y);
  if (st) return st;
  bench_stats plain = bench_stats_of(us[0], CK_SAMPLES), ckpt = bench_stats_of(us[1], CK_SAMPLES);
  if (json) {
    printf("{\"name\":\"activation_checkpoint\",\"blocks\":%d,\"width\":%d,\"wide\":%d,"
           "\"rows\":%d,\"plain_step_us\":%.1f,\"checkpoint_step_us\":%.1f,\"ratio\":%.3f,"
           "\"plain_live_bytes\":%lld,\"checkpoint_live_bytes\":%lld,\"samples\":%d}\n",
           CK_BLOCKS, CK_WIDTH, CK_WIDE, CK_ROWS, plain.median, ckpt.median,
           ckpt.median / plain.median, live[0], live[1], CK_SAMPLES);
  } else {
    printf("activation checkpointing, %d blocks Linear(%d, %d)/GELU/Linear(%d, %d)/ReLU, %d rows: "
           "step %.0f us -> %.0f us (x%.2f, the recompute), live after forward %lld B -> %lld B\n",
           CK_BLOCKS, CK_WIDTH, CK_WIDE, CK_WIDE, CK_WIDTH, CK_ROWS, plain.median, ckpt.median,
           ckpt.median / plain.median, live[0], live[1]);
  }
  return DT_OK;
}

int bench_suite_pipeline(int argc, char **argv) {
  /* The counting allocator serves the whole run (objects must be freed by the allocator that
   * made them), before the library makes any object. */
  dt_set_allocator(&(dt_allocator){ck_alloc, ck_free, NULL});
  bool json = tool_has_flag(argc, argv, "--json");
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--json") != 0) return 2;
  bench_machine_print(json);
  for (int m = 1; m <= 8; m *= 2) {
    bubble_arg a = {.m = m};
    dt_pp_schedule *sched = NULL;
    double simulated = NAN, measured = NAN, theory = (double)(RANKS - 1) / (m + RANKS - 1);
    dt_status st = dt_profiler_create(&a.profiler);
    if (!st) st = dt_comm_spawn(RANKS, bubble_rank, &a);
    if (!st) st = measured_bubble(&a, &measured);
    if (!st) st = dt_pp_schedule_create(DT_PP_1F1B, RANKS, 1, m, &sched);
    if (!st) st = dt_pp_schedule_bubble(sched, 2.0, &simulated);
    dt_pp_schedule_destroy(sched);
    dt_profiler_destroy(a.profiler);
    if (st) {
      fprintf(stderr, "bench pipeline: %s\n", dt_last_error());
      return 1;
    }
    if (json) {
      printf("{\"name\":\"pipeline_bubble\",\"schedule\":\"1F1B\",\"ranks\":%d,\"microbatches\":%d,"
             "\"rows_per_microbatch\":%d,\"measured\":%.3f,\"theory\":%.3f,\"simulated\":%.3f}\n",
             RANKS, m, ROWS, measured, theory, simulated);
    } else {
      printf("1F1B %d ranks, %d microbatches: bubble measured %.3f, theory (p-1)/(m+p-1) %.3f, "
             "simulated %.3f\n",
             RANKS, m, measured, theory, simulated);
    }
  }
  if (bench_checkpoint(json)) {
    fprintf(stderr, "bench pipeline: %s\n", dt_last_error());
    return 1;
  }
  return 0;
}
