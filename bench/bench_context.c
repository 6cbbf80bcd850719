/*
 * dtensor bench context: ring attention (context parallelism, parallel.h) on 2 cp ranks
 * (threads) against dt_scaled_dot_product_attention of the whole sequence on 1 rank (issue 28).
 *
 *   ring_attention   causal attention, B 1, H 4, E 64, T 2048 by default (--seq T): forward +
 *                    backward of sum(out * w), one warm step, then the median of --reps steps
 *                    (default 3). Per rank: thread CPU time of the step, wall time of the
 *                    step (a barrier before it; the slowest rank's), and the peak bytes the
 *                    library held on that rank's thread during the step (a counting allocator
 *                    with a counter per rank thread; the rank's q, k, v parts included). The cp
 *                    runs use the head-tail layout and, to show why it is the default, the
 *                    contiguous one (rank 1 then attends to three times rank 0's pairs).
 *                    For the cp runs, each rank's forward (dt_cp_attention_stats, last step):
 *                    chunk pairs attended, wall time attending and merging, wall time still
 *                    blocked on the ring's transfers after that (what the overlap did not hide),
 *                    bytes sent.
 *
 * Options: --json, --seq T, --reps N.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_machine.h"
#include "bench_util.h"
#include "dtensor/dtensor.h"
#include "tools.h"

#define CX_B 1
#define CX_H 4
#define CX_E 64
#define CX_MAX_REPS 15

/* ---- A counting allocator, one counter per rank thread ------------------------------------ */

typedef struct cx_counter {
  _Atomic long long live, peak;
} cx_counter;

static cx_counter cx_other; /* threads that are no rank's */
static _Thread_local cx_counter *cx_mine;

static void cx_add(cx_counter *c, long long n) {
  long long now = atomic_fetch_add(&c->live, n) + n, peak = atomic_load(&c->peak);
  while (now > peak && !atomic_compare_exchange_weak(&c->peak, &peak, now)) {
  }
}

static void *cx_alloc(size_t size, size_t alignment, void *user) {
  (void)user;
  size_t head = alignment < 64 ? 64 : alignment;
  char *base = aligned_alloc(head, (head + size + head - 1) / head * head);
  if (!base) return NULL;
  cx_counter *c = cx_mine ? cx_mine : &cx_other;
  ((size_t *)(base + head))[-1] = size;
  ((size_t *)(base + head))[-2] = head;
  ((cx_counter **)(base + head))[-3] = c;
  cx_add(c, (long long)size);
  return base + head;
}

static void cx_free(void *ptr, void *user) {
  (void)user;
  if (!ptr) return;
  size_t size = ((size_t *)ptr)[-1], head = ((size_t *)ptr)[-2];
  cx_add(((cx_counter **)ptr)[-3], -(long long)size);
  free((char *)ptr - head);
}

/* ---- One configuration ------------------------------------------------------------------- */

enum { CX_WHOLE, CX_HEAD_TAIL, CX_CONTIGUOUS };

typedef struct cx_arg {
  int mode, reps;
  int64_t T;
  cx_counter counter[2];
  double cpu_ms[2][CX_MAX_REPS], wall_ms[2][CX_MAX_REPS];
  long long peak[2];
  dt_cp_attention_stats stats[2]; /* each rank's forward of the last step */
} cx_arg;

/* Forward + backward of sum(attention(q, k, v) * w). */
static dt_status cx_step(cx_arg *a, int rank, dt_mesh *mesh, dt_tensor *q, dt_tensor *k,
                         dt_tensor *v, dt_tensor *w) {
  dt_tensor *out = NULL, *y = NULL, *loss = NULL;
  dt_status st;
  if (a->mode == CX_WHOLE) {
    st = dt_scaled_dot_product_attention(q, k, v, NULL, &(dt_attention_options){.is_causal = true},
                                         &out, NULL);
  } else {
    dt_cp_attention_options o = {.is_causal = true,
                                 .layout = a->mode == CX_HEAD_TAIL ? DT_CP_LAYOUT_HEAD_TAIL
                                                                   : DT_CP_LAYOUT_CONTIGUOUS,
                                 .stats = &a->stats[rank]};
    st = dt_parallel_cp_attention(mesh, 0, q, k, v, NULL, &o, &out, NULL);
  }
  if (!st) st = dt_mul(out, w, &y);
  if (!st) st = dt_sum(y, &loss);
  if (!st) st = dt_backward(loss, NULL);
  dt_tensor_release(out), dt_tensor_release(y), dt_tensor_release(loss);
  dt_tensor *leaves[3] = {q, k, v};
  for (int i = 0; i < 3 && !st; i++) st = dt_tensor_zero_grad(leaves[i], true);
  return st;
}

/* This rank's part of a whole [B, H, T, e] tensor drawn from seed (the whole one for CX_WHOLE),
 * a leaf that requires grad when grad is set. */
static dt_status cx_input(const cx_arg *a, dt_mesh *mesh, int64_t e, uint64_t seed, bool grad,
                          dt_tensor **out) {
  dt_tensor *whole = NULL;
  dt_status st = dt_randn(4, (int64_t[]){CX_B, CX_H, a->T, e}, DT_F32, seed, &whole);
  if (!st && a->mode == CX_WHOLE) *out = dt_tensor_retain(whole);
  if (!st && a->mode != CX_WHOLE)
    st = dt_parallel_cp_shard_sequence(
        mesh, 0, whole, 2,
        a->mode == CX_HEAD_TAIL ? DT_CP_LAYOUT_HEAD_TAIL : DT_CP_LAYOUT_CONTIGUOUS, out);
  dt_tensor_release(whole);
  if (!st && grad) st = dt_tensor_set_requires_grad(*out, true);
  return st;
}

static dt_status cx_rank(dt_comm *world, void *arg) {
  cx_arg *a = arg;
  int rank = dt_comm_rank(world), size = dt_comm_size(world);
  cx_mine = &a->counter[rank];
  dt_mesh *mesh = NULL;
  dt_tensor *q = NULL, *k = NULL, *v = NULL, *w = NULL;
  dt_status st = dt_mesh_create(world, 1, (int[]){size}, (const char *[]){"cp"}, &mesh);
  if (!st) st = cx_input(a, mesh, CX_E, 1, true, &q);
  if (!st) st = cx_input(a, mesh, CX_E, 2, true, &k);
  if (!st) st = cx_input(a, mesh, CX_E, 3, true, &v);
  if (!st) st = cx_input(a, mesh, CX_E, 4, false, &w);
  if (!st) st = cx_step(a, rank, mesh, q, k, v, w); /* warm */
  atomic_store(&a->counter[rank].peak, atomic_load(&a->counter[rank].live));
  for (int i = 0; i < a->reps && !st; i++) {
    st = dt_comm_barrier(world);
    double t0 = bench_now_us(), c0 = bench_thread_cpu_us();
    if (!st) st = cx_step(a, rank, mesh, q, k, v, w);
    a->cpu_ms[rank][i] = (bench_thread_cpu_us() - c0) / 1e3;
    a->wall_ms[rank][i] = (bench_now_us() - t0) / 1e3;
  }
  a->peak[rank] = atomic_load(&a->counter[rank].peak);
  dt_tensor_release(q), dt_tensor_release(k), dt_tensor_release(v), dt_tensor_release(w);
  dt_mesh_destroy(mesh);
  cx_mine = NULL;
  return st;
}

static const char *const cx_names[] = {"whole", "cp2_head_tail", "cp2_contiguous"};

static int cx_report(const cx_arg *a, int ranks, bool json) {
  double cpu[2], wall = 0;
  for (int r = 0; r < ranks; r++) {
    double c[CX_MAX_REPS], w[CX_MAX_REPS];
    memcpy(c, a->cpu_ms[r], sizeof(double) * (size_t)a->reps);
    memcpy(w, a->wall_ms[r], sizeof(double) * (size_t)a->reps);
    cpu[r] = bench_stats_of(c, a->reps).median;
    double wr = bench_stats_of(w, a->reps).median;
    if (wr > wall) wall = wr;
  }
  if (json) {
    printf("{\"name\":\"ring_attention\",\"mode\":\"%s\",\"ranks\":%d,\"batch\":%d,\"heads\":%d,"
           "\"head_dim\":%d,\"seq\":%lld,\"causal\":true,\"wall_ms\":%.1f,\"cpu_ms\":[",
           cx_names[a->mode], ranks, CX_B, CX_H, CX_E, (long long)a->T, wall);
    for (int r = 0; r < ranks; r++) printf("%s%.1f", r ? "," : "", cpu[r]);
    printf("],\"peak_bytes\":[");
    for (int r = 0; r < ranks; r++) printf("%s%lld", r ? "," : "", a->peak[r]);
    printf("],\"fwd_pairs_attended\":[");
    for (int r = 0; r < ranks; r++) printf("%s%d", r ? "," : "", a->stats[r].pairs_attended);
    printf("],\"fwd_compute_ms\":[");
    for (int r = 0; r < ranks; r++) printf("%s%.1f", r ? "," : "", a->stats[r].compute_us / 1e3);
    printf("],\"fwd_wait_ms\":[");
    for (int r = 0; r < ranks; r++) printf("%s%.2f", r ? "," : "", a->stats[r].wait_us / 1e3);
    printf("],\"fwd_bytes_sent\":[");
    for (int r = 0; r < ranks; r++)
      printf("%s%lld", r ? "," : "", (long long)a->stats[r].bytes_sent);
    printf("],\"reps\":%d}\n", a->reps);
  } else {
    printf("%-15s %d rank%s  wall %8.1f ms  cpu/rank", cx_names[a->mode], ranks,
           ranks > 1 ? "s" : " ", wall);
    for (int r = 0; r < ranks; r++) printf(" %8.1f", cpu[r]);
    printf(" ms  peak/rank");
    for (int r = 0; r < ranks; r++) printf(" %11lld", a->peak[r]);
    printf(" B\n");
    if (a->mode != CX_WHOLE) {
      printf("%-15s forward per rank: pairs attended", "");
      for (int r = 0; r < ranks; r++) printf(" %d", a->stats[r].pairs_attended);
      printf(", compute");
      for (int r = 0; r < ranks; r++) printf(" %.1f", a->stats[r].compute_us / 1e3);
      printf(" ms, wait on the ring after it");
      for (int r = 0; r < ranks; r++) printf(" %.2f", a->stats[r].wait_us / 1e3);
      printf(" ms, sent");
      for (int r = 0; r < ranks; r++) printf(" %lld", (long long)a->stats[r].bytes_sent);
      printf(" B\n");
    }
  }
  return 0;
}

int bench_suite_context(int argc, char **argv) {
  /* Before the library makes any object: objects must be freed by the allocator that made
   * them. */
  dt_set_allocator(&(dt_allocator){cx_alloc, cx_free, NULL});
  bool json = false;
  int64_t T = 2048;
  int reps = 3;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0) {
      json = true;
    } else if (strcmp(argv[i], "--seq") == 0 && i + 1 < argc) {
      T = atoll(argv[++i]);
    } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      reps = atoi(argv[++i]);
    } else {
      return 2;
    }
  }
  if (T < 4 || reps < 1 || reps > CX_MAX_REPS) return 2;
  bench_machine_print(json);
  if (!json)
    printf("causal attention fwd+bwd, B %d, H %d, E %d, T %lld, float32 (median of %d)\n", CX_B,
           CX_H, CX_E, (long long)T, reps);
  for (int mode = CX_WHOLE; mode <= CX_CONTIGUOUS; mode++) {
    cx_arg *a = calloc(1, sizeof *a);
    if (!a) return 1;
    a->mode = mode, a->reps = reps, a->T = T;
    int ranks = mode == CX_WHOLE ? 1 : 2;
    dt_status st = dt_comm_spawn(ranks, cx_rank, a);
    if (st) {
      fprintf(stderr, "bench context: %s\n", dt_last_error());
      free(a);
      return 1;
    }
    cx_report(a, ranks, json);
    free(a);
  }
  return 0;
}
