/*
 * A ThreadSanitizer workout of the intra-op thread pool (src/core/thread_pool.c), without
 * Criterion (whose forked runner cannot start under TSan): the kernels that split their rows
 * (softmax, log_softmax, layer_norm, rms_norm, gelu, cross_entropy, forward and backward)
 * on 1 and on every core, whose bits must agree; four threads submitting jobs at once while a
 * fifth changes the setting; a job whose chunks submit jobs; two rank threads running the
 * kernels and GEMMs (the BLAS's thread count synced under the rank cap). The closing line is
 * "N passed, N failed". Built and run by `make test-tsan`.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/core_impl.h"
#include "dtensor/dtensor.h"

static atomic_int passed, failed;

#define EXPECT(cond, what)                                                                         \
  do {                                                                                             \
    if (cond) {                                                                                    \
      passed++;                                                                                    \
    } else {                                                                                       \
      failed++;                                                                                    \
      fprintf(stderr, "%s failed (%s)\n", what, dt_last_error());                                  \
    }                                                                                              \
  } while (0)

enum { ROWS = 256, COLS = 600, KERNELS = 8 };

static dt_tensor *filled(int64_t rows, int64_t cols, double scale, double shift) {
  dt_tensor *t = NULL;
  if (dt_empty(2, (int64_t[]){rows, cols}, DT_F32, &t)) return NULL;
  float *p = dt_tensor_data(t);
  for (int64_t i = 0; i < rows * cols; i++) p[i] = (float)(scale * sin(0.37 * (double)i) + shift);
  return t;
}

/* Op k's forward on x (NULL when it failed). */
static dt_tensor *forward(int k, dt_tensor *x, dt_tensor *w, dt_tensor *tg) {
  dt_tensor *y = NULL;
  dt_status st = DT_ERR_INTERNAL;
  switch (k) {
  case 0: st = dt_softmax(x, 1, &y); break;
  case 1: st = dt_log_softmax(x, 1, &y); break;
  case 2: st = dt_layer_norm(x, 1, (int64_t[]){COLS}, w, NULL, 1e-5, &y); break;
  case 3: st = dt_rms_norm(x, 1, (int64_t[]){COLS}, w, 1e-5, &y); break;
  case 4: st = dt_gelu(x, &y); break;
  default:
    st = dt_cross_entropy_ex(x, tg, &(dt_cross_entropy_options){.reduction = DT_LOSS_SUM}, &y);
  }
  return st ? NULL : y;
}

/* The six forwards into out[0..5], then x's gradients through softmax and layer_norm for the
 * incoming gradient g (their backward kernels) into out[6], out[7]. */
static void run_kernels(dt_tensor *x, dt_tensor *g, dt_tensor *w, dt_tensor *tg, dt_tensor **out) {
  for (int k = 0; k < 6; k++) out[k] = forward(k, x, w, tg);
  for (int k = 6; k < KERNELS; k++) {
    dt_tensor *xr = NULL, *y = NULL;
    out[k] = NULL;
    if (dt_clone(x, &xr) || dt_tensor_set_requires_grad(xr, true)) goto next;
    y = forward(k == 6 ? 0 : 2, xr, w, tg);
    if (y && !dt_backward(y, g)) dt_tensor_grad(xr, &out[k]);
  next:
    dt_tensor_release(y);
    dt_tensor_release(xr);
  }
}

static void kernels_same_bits(int threads) {
  dt_tensor *x = filled(ROWS, COLS, 3, 0), *g = filled(ROWS, COLS, 1, 0.1);
  dt_tensor *w = NULL, *tg = NULL;
  dt_full(1, (int64_t[]){COLS}, 1.25, DT_F32, &w);
  int64_t targets[ROWS];
  for (int i = 0; i < ROWS; i++) targets[i] = (i * 37) % COLS;
  dt_from_data(targets, 1, (int64_t[]){ROWS}, DT_I64, &tg);
  dt_tensor *out[2][KERNELS];
  dt_set_num_threads(1);
  run_kernels(x, g, w, tg, out[0]);
  dt_set_num_threads(threads);
  run_kernels(x, g, w, tg, out[1]);
  for (int k = 0; k < KERNELS; k++) {
    bool same = out[0][k] && out[1][k] &&
                dt_tensor_numel(out[0][k]) == dt_tensor_numel(out[1][k]) &&
                memcmp(dt_tensor_data(out[0][k]), dt_tensor_data(out[1][k]),
                       (size_t)dt_tensor_numel(out[0][k]) * 4) == 0;
    char what[64];
    snprintf(what, sizeof what, "kernel %d: same bits on 1 and %d threads", k, threads);
    EXPECT(same, what);
    dt_tensor_release(out[0][k]);
    dt_tensor_release(out[1][k]);
  }
  dt_tensor *all[] = {x, g, w, tg};
  for (int i = 0; i < 4; i++) dt_tensor_release(all[i]);
  dt_set_num_threads(0);
}

/* ---- Raw dt__parallel_for: concurrent submitters, a changing setting, nesting ---------------- */

typedef struct cover {
  int64_t n;
  atomic_int *hits;
} cover;

static void mark(void *p, int64_t begin, int64_t end) {
  cover *c = p;
  for (int64_t i = begin; i < end; i++) atomic_fetch_add(&c->hits[i], 1);
}

static void *submit(void *p) {
  for (int k = 0; k < 50; k++) dt__parallel_for(((cover *)p)->n, 500, mark, p);
  return NULL;
}

static atomic_bool stop_toggling;

static void *toggle_setting(void *p) {
  (void)p;
  for (int k = 0; !atomic_load(&stop_toggling); k++) {
    dt_set_num_threads(k % 3);
    nanosleep(&(struct timespec){0, 100000}, NULL);
  }
  return NULL;
}

static void outer_chunk(void *p, int64_t begin, int64_t end) {
  cover *inner = p;
  for (int64_t i = begin; i < end; i++) dt__parallel_for(inner[i].n, 200, mark, &inner[i]);
}

static void raw_pool(void) {
  enum { T = 4, N = 20011 };
  cover c[T];
  pthread_t th[T], toggler;
  atomic_store(&stop_toggling, false);
  pthread_create(&toggler, NULL, toggle_setting, NULL);
  for (int t = 0; t < T; t++) {
    c[t].n = N - t;
    c[t].hits = calloc(N, sizeof(atomic_int));
    pthread_create(&th[t], NULL, submit, &c[t]);
  }
  for (int t = 0; t < T; t++) pthread_join(th[t], NULL);
  atomic_store(&stop_toggling, true);
  pthread_join(toggler, NULL);
  bool exact = true;
  for (int t = 0; t < T; t++) {
    for (int64_t i = 0; i < N; i++) exact &= atomic_load(&c[t].hits[i]) == (i < c[t].n ? 50 : 0);
    free(c[t].hits);
  }
  EXPECT(exact, "4 submitters, changing setting: every element once per job");
  dt_set_num_threads(0);
  cover inner[4];
  for (int i = 0; i < 4; i++)
    inner[i] = (cover){.n = 3000, .hits = calloc(3000, sizeof(atomic_int))};
  for (int rep = 0; rep < 20; rep++) dt__parallel_for(4, 1, outer_chunk, inner);
  exact = true;
  for (int i = 0; i < 4; i++) {
    for (int64_t k = 0; k < 3000; k++) exact &= atomic_load(&inner[i].hits[k]) == 20;
    free(inner[i].hits);
  }
  EXPECT(exact, "nested parallel_for");
}

/* ---- Rank threads ------------------------------------------------------------------------- */

static dt_status rank_fn(dt_comm *world, void *arg) {
  (void)world;
  (void)arg;
  dt_tensor *x = filled(128, 512, 2, 0), *w = filled(512, 512, 0.01, 0);
  dt_tensor *y = NULL, *z = NULL, *u = NULL;
  dt_status st = dt_softmax(x, 1, &y);
  if (!st) st = dt_matmul(y, w, &z);
  if (!st) st = dt_gelu(z, &u);
  dt_tensor *all[] = {x, w, y, z, u};
  for (int i = 0; i < 5; i++) dt_tensor_release(all[i]);
  return st;
}

int main(void) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  kernels_same_bits(cores > 1 ? (int)cores : 2);
  raw_pool();
  dt_tensor *a = filled(64, 64, 1, 0), *b = NULL;
  EXPECT(!dt_matmul(a, a, &b), "a GEMM on the main thread");
  dt_tensor_release(a);
  dt_tensor_release(b);
  /* A GEMM split over the pool (rows of C in blocks, the BLAS on one thread in each). */
  dt_tensor *p = filled(256, 512, 1, 0), *q = filled(512, 256, 0.5, 0.25), *pq[2] = {NULL, NULL};
  for (int i = 0; i < 2; i++) {
    dt_set_num_threads(i == 0 ? 1 : cores > 1 ? (int)cores : 2);
    EXPECT(!dt_matmul(p, q, &pq[i]), "a GEMM split on the pool");
  }
  dt_set_num_threads(0);
  EXPECT(pq[0] && pq[1] &&
             memcmp(dt_tensor_data(pq[0]), dt_tensor_data(pq[1]), 256 * 256 * sizeof(float)) == 0,
         "a split GEMM: same bits on 1 and N threads");
  dt_tensor *gone[] = {p, q, pq[0], pq[1]};
  for (int i = 0; i < 4; i++) dt_tensor_release(gone[i]);
  dt_status st = DT_OK;
  for (int round = 0; round < 3 && !st; round++) st = dt_comm_spawn(2, rank_fn, NULL);
  EXPECT(st == DT_OK, "2 rank threads: kernels and GEMMs");
  printf("%d passed, %d failed\n", (int)passed, (int)failed);
  return failed ? 1 : 0;
}
