/* The intra-op thread pool (src/core/thread_pool.c): dt_set_num_threads / DT_NUM_THREADS and the
 * cap at cores / rank threads; dt__parallel_for covers its range exactly once, also with
 * several threads submitting at once and with a chunk that submits a job of its own; waiting
 * threads block (no CPU burnt); a forked child gets a pool of its own; the kernels that split
 * their rows give the same bits on 1 and N threads and match naive loops; 8 rank threads get
 * one thread each; the BLAS follows the setting and the rank cap. Includes core/core_impl.h
 * (dt__parallel_for) and kernels/cpu/blas.h (dt__blas_threads): internal. */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/core_impl.h"
#include "dtensor/dtensor.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/loss.h"
#include "reference.h"
#include "log_capture.h"

static int cores(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : (int)n;
}

Test(thread_pool, setting_environment_and_errors) {
  cr_assert_eq(dt_set_num_threads(-1), DT_ERR_INVALID);
  ref_assert_error_mentions("dt_set_num_threads", "-1");
  cr_assert_eq(dt_set_num_threads(1), DT_OK);
  cr_assert_eq(dt_get_num_threads(), 1);
  cr_assert_eq(dt_set_num_threads(1000), DT_OK);
  cr_assert_eq(dt_get_num_threads(), cores(), "capped at the cores");
  cr_assert_eq(dt_set_num_threads(0), DT_OK);
  cr_assert_eq(dt_get_num_threads(), cores(), "default: the cores");
}

/* DT_NUM_THREADS is read once per process, at the first call that asks (as OpenMP reads
 * OMP_NUM_THREADS), so each value is tried in a child process of its own that reads it first:
 * the threads it gives (the second call too, after the variable changed), and the warnings the
 * log callback got. 0 when the child saw what was expected, else the failed check's number. */
static int env_child(const char *value, const char *later, int expect, int expect_warnings) {
  pid_t pid = fork();
  if (pid == 0) {
    log_capture_start();
    setenv("DT_NUM_THREADS", value, 1);
    if (dt_get_num_threads() != expect) _exit(1);
    setenv("DT_NUM_THREADS", later, 1);
    if (dt_get_num_threads() != expect) _exit(2); /* read once: the change is not seen */
    if (warnings != expect_warnings) _exit(3);
    if (warnings && !(strstr(last_warning, "DT_NUM_THREADS") && strstr(last_warning, value)))
      _exit(4);
    if (dt_set_num_threads(1) != DT_OK || dt_get_num_threads() != 1) _exit(5); /* setting wins */
    if (dt_set_num_threads(0) != DT_OK || dt_get_num_threads() != expect) _exit(6);
    _exit(0);
  }
  int status = -1;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100;
}

Test(thread_pool, environment_read_once) {
  cr_assert_eq(env_child("1", "1000", 1, 0), 0, "DT_NUM_THREADS=1, then 1000 (not seen)");
  cr_assert_eq(env_child("1", "abc", 1, 0), 0, "a bad value set later is not read");
}

/* A DT_NUM_THREADS that is not an integer in 1..4096 is reported once through the log
 * callback, naming the variable and the value, and the default (the cores) applies. */
Test(thread_pool, a_bad_environment_value_is_reported_once) {
  const char *bad[] = {"abc", "0",  "-3",  "99999999999", "4x",  "99999999999999999999999",
                       " ",   " 4", "\t4", "4 ",          "0x10"};
  for (int i = 0; i < (int)(sizeof bad / sizeof bad[0]); i++) {
    cr_assert_eq(env_child(bad[i], "1", cores(), 1), 0,
                 "DT_NUM_THREADS=\"%s\": the default, reported once", bad[i]);
  }
}

/* The strict parse: a whole decimal integer, an optional sign, no white space on either side
 * (" 4" was accepted while "4 " was not), no hex, no overflow, any length refused cleanly. */
Test(thread_pool, env_integers_are_parsed_strictly) {
  int64_t v = 0;
  cr_assert(dt__env_int_parse("+4", 1, 9, &v) && v == 4);
  cr_assert(dt__env_int_parse("-2", -3, 9, &v) && v == -2);
  const char *bad[] = {" 4", "\n4", "4 ", "0x10", "4.0", "", "+", "1e3"};
  for (int i = 0; i < (int)(sizeof bad / sizeof bad[0]); i++)
    cr_assert(!dt__env_int_parse(bad[i], -1000, 1000, &v), "\"%s\" was accepted", bad[i]);
  char longest[4096];
  memset(longest, '9', sizeof longest - 1);
  longest[sizeof longest - 1] = '\0';
  cr_assert(!dt__env_int_parse(longest, 0, INT64_MAX, &v));
  memset(longest, '0', sizeof longest - 2); /* 4094 zeros then a 9: the value 9 */
  cr_assert(dt__env_int_parse(longest, 0, 9, &v) && v == 9);
}

/* The reader behind it (dt__env_int, for variables read at every use such as
 * DT_ALLOC_CACHE_MB): the same bad value is not reported twice, and more distinct bad values
 * than the reports remember are each still reported once, not at every read. */
Test(thread_pool, env_reports_once_per_value) {
  log_capture_start();
  setenv("DT_TEST_ENV_READ", "abc", 1);
  for (int k = 0; k < 3; k++) cr_assert_eq(dt__env_int("DT_TEST_ENV_READ", 1, 9, 0, "0"), 0);
  cr_assert_eq(warnings, 1, "reported %d times", warnings);
  setenv("DT_TEST_ENV_READ", "7", 1);
  cr_assert_eq(dt__env_int("DT_TEST_ENV_READ", 1, 9, 0, "0"), 7, "a good value after a bad one");
  cr_assert_eq(warnings, 1);
  for (int i = 0; i < 80; i++) {
    char v[16];
    snprintf(v, sizeof v, "bad%d", i);
    setenv("DT_TEST_ENV_READ", v, 1);
    warnings = 0;
    for (int k = 0; k < 3; k++) cr_assert_eq(dt__env_int("DT_TEST_ENV_READ", 1, 9, 0, "0"), 0);
    cr_assert_eq(warnings, 1, "DT_TEST_ENV_READ=%s: reported %d times", v, warnings);
  }
  unsetenv("DT_TEST_ENV_READ");
  log_capture_stop();
}

typedef struct cover {
  int64_t n;
  atomic_int *hits;
} cover;

static void mark(void *p, int64_t begin, int64_t end) {
  cover *c = p;
  for (int64_t i = begin; i < end; i++) atomic_fetch_add(&c->hits[i], 1);
}

static void *submit(void *p) {
  cover *c = p;
  for (int k = 0; k < 20; k++) dt__parallel_for(c->n, 1000, mark, c);
  return NULL;
}

/* Four threads submit 20 jobs each at once; every element is covered once per job. */
Test(thread_pool, parallel_for_covers_each_element_once) {
  cr_assert_eq(dt_set_num_threads(0), DT_OK);
  enum { N = 100003, T = 4 };
  cover c[T];
  pthread_t th[T];
  for (int t = 0; t < T; t++) {
    c[t].n = N - t;
    c[t].hits = calloc(N, sizeof(atomic_int));
    cr_assert_eq(pthread_create(&th[t], NULL, submit, &c[t]), 0);
  }
  for (int t = 0; t < T; t++) pthread_join(th[t], NULL);
  for (int t = 0; t < T; t++) {
    for (int64_t i = 0; i < N; i++)
      cr_assert_eq(atomic_load(&c[t].hits[i]), i < c[t].n ? 20 : 0, "thread %d element %lld", t,
                   (long long)i);
    free(c[t].hits);
  }
  dt__parallel_for(0, 1, mark, &c[0]); /* nothing to do: fn is not called (hits is freed) */
}

/* A chunk that runs a parallel_for of its own (a kernel calling a kernel): the inner job's
 * caller runs what no pool thread takes, so nothing waits forever. */
typedef struct nested {
  cover inner[8];
} nested;

static void outer_chunk(void *p, int64_t begin, int64_t end) {
  nested *s = p;
  for (int64_t i = begin; i < end; i++) dt__parallel_for(s->inner[i].n, 100, mark, &s->inner[i]);
}

Test(thread_pool, nested_parallel_for_finishes) {
  cr_assert_eq(dt_set_num_threads(0), DT_OK);
  nested s;
  for (int i = 0; i < 8; i++) {
    s.inner[i].n = 5000 + i;
    s.inner[i].hits = calloc(5008, sizeof(atomic_int));
  }
  for (int rep = 0; rep < 10; rep++) dt__parallel_for(8, 1, outer_chunk, &s);
  for (int i = 0; i < 8; i++) {
    for (int64_t k = 0; k < 5008; k++)
      cr_assert_eq(atomic_load(&s.inner[i].hits[k]), k < s.inner[i].n ? 10 : 0);
    free(s.inner[i].hits);
  }
}

static double cpu_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void sleep_ms(int ms) {
  struct timespec t = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
  while (nanosleep(&t, &t) != 0) {
  }
}

/* Chunk 0 sleeps 300 ms; whoever finished the other chunk waits for it. */
static void slow_first(void *p, int64_t begin, int64_t end) {
  (void)p;
  (void)end;
  if (begin == 0) sleep_ms(300);
}

/* Neither an idle pool thread nor a caller waiting for a chunk burns a core: the process
 * uses far less CPU time than the wall time it waits (a spinning waiter would use ~all). */
Test(thread_pool, waiting_threads_block) {
  if (cores() < 2) cr_skip_test("one core: the pool never starts");
  cr_assert_eq(dt_set_num_threads(0), DT_OK);
  cr_assert_eq(dt_get_num_threads() >= 2, true);
  dt__parallel_for(2, 1, slow_first, NULL); /* starts the pool */
  double before = cpu_seconds();
  dt__parallel_for(2, 1, slow_first, NULL); /* 300 ms: one thread sleeps, one waits */
  sleep_ms(300);                            /* the pool idle */
  double used = cpu_seconds() - before;
  cr_assert_lt(used, 0.1, "%.3f s of CPU time over 0.6 s of waiting", used);
}

/* A child forked after the pool started gets a fresh pool: its kernels still split and
 * finish (the parent's pool threads do not exist there). */
Test(thread_pool, forked_child_gets_its_own_pool) {
  cr_assert_eq(dt_set_num_threads(0), DT_OK);
  cover c = {.n = 100000, .hits = calloc(100000, sizeof(atomic_int))};
  dt__parallel_for(c.n, 1000, mark, &c);
  pid_t pid = fork();
  cr_assert_neq(pid, -1);
  if (pid == 0) {
    for (int k = 0; k < 5; k++) dt__parallel_for(c.n, 1000, mark, &c);
    for (int64_t i = 0; i < c.n; i++)
      if (atomic_load(&c.hits[i]) != 6) _exit(1);
    _exit(0);
  }
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child's kernels failed");
  free(c.hits);
}

/* ---- Kernels: the same bits on 1 and N threads, and right ---------------------------------- */

enum { ROWS = 512, COLS = 1000, KERNELS = 14 };

/* x's gradient through f (autograd: the backward kernels) for the incoming gradient g. */
typedef dt_status (*unary_fn)(dt_tensor *x, void *arg, dt_tensor **out);

static dt_tensor *grad_through(unary_fn f, void *arg, dt_tensor *x, dt_tensor *g) {
  dt_tensor *xr = NULL, *y = NULL, *dx = NULL;
  cr_assert_eq(dt_clone(x, &xr), DT_OK);
  cr_assert_eq(dt_tensor_set_requires_grad(xr, true), DT_OK);
  cr_assert_eq(f(xr, arg, &y), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_backward(y, g), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_tensor_grad(xr, &dx), DT_OK);
  dt_tensor_release(y);
  dt_tensor_release(xr);
  return dx;
}

static dt_status softmax_fn(dt_tensor *x, void *arg, dt_tensor **out) {
  (void)arg;
  return dt_softmax(x, 1, out);
}
static dt_status log_softmax_fn(dt_tensor *x, void *arg, dt_tensor **out) {
  (void)arg;
  return dt_log_softmax(x, 1, out);
}
static dt_status layer_norm_fn(dt_tensor *x, void *w, dt_tensor **out) {
  return dt_layer_norm(x, 1, (int64_t[]){COLS}, w, NULL, 1e-5, out);
}
static dt_status rms_norm_fn(dt_tensor *x, void *w, dt_tensor **out) {
  return dt_rms_norm(x, 1, (int64_t[]){COLS}, w, 1e-5, out);
}
static dt_status gelu_fn(dt_tensor *x, void *arg, dt_tensor **out) {
  (void)arg;
  return dt_gelu(x, out);
}
static dt_status cross_entropy_fn(dt_tensor *x, void *targets, dt_tensor **out) {
  return dt_cross_entropy_ex(x, targets, &(dt_cross_entropy_options){.reduction = DT_LOSS_NONE},
                             out);
}

/* layer_norm's weight and bias gradients for the incoming gradient g (the affine kernel:
 * chunks of 64 rows on the pool, added in chunk order). */
static void affine_grads_through(dt_tensor *x, dt_tensor *w, dt_tensor *g, dt_tensor **dw,
                                 dt_tensor **db) {
  dt_tensor *wr = NULL, *br = NULL, *y = NULL;
  cr_assert_eq(dt_clone(w, &wr), DT_OK);
  cr_assert_eq(dt_zeros(1, (int64_t[]){COLS}, DT_F32, &br), DT_OK);
  cr_assert_eq(dt_tensor_set_requires_grad(wr, true), DT_OK);
  cr_assert_eq(dt_tensor_set_requires_grad(br, true), DT_OK);
  cr_assert_eq(dt_layer_norm(x, 1, (int64_t[]){COLS}, wr, br, 1e-5, &y), DT_OK);
  cr_assert_eq(dt_backward(y, g), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_tensor_grad(wr, dw), DT_OK);
  cr_assert_eq(dt_tensor_grad(br, db), DT_OK);
  dt_tensor_release(y);
  dt_tensor_release(wr);
  dt_tensor_release(br);
}

/* Every split kernel once: forwards, then backwards through autograd. gelu runs on a view
 * that starts one element into its storage and has an odd length (chunk edges off the
 * vector width and off the allocation's alignment). */
static void run_kernels(dt_tensor *x, dt_tensor *g, dt_tensor *w, dt_tensor *tg, dt_tensor *flat,
                        dt_tensor *gflat, dt_tensor **out) {
  cr_assert_eq(softmax_fn(x, NULL, &out[0]), DT_OK);
  cr_assert_eq(log_softmax_fn(x, NULL, &out[1]), DT_OK);
  cr_assert_eq(layer_norm_fn(x, w, &out[2]), DT_OK);
  cr_assert_eq(gelu_fn(flat, NULL, &out[3]), DT_OK);
  cr_assert_eq(cross_entropy_fn(x, tg, &out[4]), DT_OK);
  out[5] = grad_through(softmax_fn, NULL, x, g);
  out[6] = grad_through(log_softmax_fn, NULL, x, g);
  out[7] = grad_through(layer_norm_fn, w, x, g);
  out[8] = grad_through(rms_norm_fn, w, x, g);
  out[9] = grad_through(gelu_fn, NULL, flat, gflat);
  dt_tensor *ones = NULL;
  cr_assert_eq(dt_ones(1, (int64_t[]){ROWS}, DT_F32, &ones), DT_OK);
  out[10] = grad_through(cross_entropy_fn, tg, x, ones);
  dt_tensor_release(ones);
  cr_assert_eq(rms_norm_fn(x, w, &out[11]), DT_OK);
  affine_grads_through(x, w, g, &out[12], &out[13]);
}

/* Naive double references for rms_norm's forward and layer_norm's weight and bias
 * gradients (sums over the rows of g xhat and of g). */
static void check_norms_against_naive(const double *xv, const double *gv, const double *wv,
                                      dt_tensor **out) {
  double *rms = ref_values(out[11]), *dw = ref_values(out[12]), *db = ref_values(out[13]);
  double *dw_want = calloc(COLS, sizeof(double)), *db_want = calloc(COLS, sizeof(double));
  for (int r = 0; r < ROWS; r++) {
    const double *row = xv + (int64_t)r * COLS, *grow = gv + (int64_t)r * COLS;
    double ss = 0, mean = 0, var = 0;
    for (int c = 0; c < COLS; c++) ss += row[c] * row[c], mean += row[c];
    mean /= COLS;
    for (int c = 0; c < COLS; c++) var += (row[c] - mean) * (row[c] - mean);
    double rs = 1 / sqrt(ss / COLS + 1e-5), rstd = 1 / sqrt(var / COLS + 1e-5);
    for (int c = 0; c < COLS; c++) {
      double want = row[c] * rs * wv[c];
      cr_assert_float_eq(rms[(int64_t)r * COLS + c], want, 1e-6 + 2e-6 * fabs(want),
                         "rms_norm[%d, %d]", r, c);
      dw_want[c] += grow[c] * (row[c] - mean) * rstd;
      db_want[c] += grow[c];
    }
  }
  for (int c = 0; c < COLS; c++) {
    cr_assert_float_eq(dw[c], dw_want[c], 2e-5 * (1 + fabs(dw_want[c])), "dw[%d]", c);
    cr_assert_float_eq(db[c], db_want[c], 2e-5 * (1 + fabs(db_want[c])), "db[%d]", c);
  }
  free(rms), free(dw), free(db), free(dw_want), free(db_want);
}

/* Naive double references for the softmax, log_softmax and gelu forwards. */
static void check_against_naive(const double *xv, const double *fv, dt_tensor **out) {
  double *sm = ref_values(out[0]), *lsm = ref_values(out[1]), *ge = ref_values(out[3]);
  for (int r = 0; r < ROWS; r++) {
    const double *row = xv + (int64_t)r * COLS;
    double m = -INFINITY, s = 0;
    for (int c = 0; c < COLS; c++) m = fmax(m, row[c]);
    for (int c = 0; c < COLS; c++) s += exp(row[c] - m);
    for (int c = 0; c < COLS; c++) {
      int64_t i = (int64_t)r * COLS + c;
      double want = exp(row[c] - m) / s;
      cr_assert_float_eq(sm[i], want, 1e-6 + 1e-5 * want, "softmax[%d, %d]", r, c);
      cr_assert_float_eq(lsm[i], row[c] - m - log(s), 2e-5, "log_softmax[%d, %d]", r, c);
    }
  }
  for (int64_t i = 0; i < (int64_t)ROWS * COLS - 9; i++) {
    double want = 0.5 * fv[i] * (1.0 + erf(fv[i] / sqrt(2.0)));
    cr_assert_float_eq(ge[i], want, 1e-6 + 1e-5 * fabs(want), "gelu[%lld]", (long long)i);
  }
  free(sm);
  free(lsm);
  free(ge);
}

Test(thread_pool, kernels_equal_on_one_and_all_threads) {
  dt_tensor *x = ref_random(2, (int64_t[]){ROWS, COLS}, DT_F32, -3, 3, 7);
  dt_tensor *g = ref_random(2, (int64_t[]){ROWS, COLS}, DT_F32, -1, 1, 8);
  dt_tensor *w = ref_random(1, (int64_t[]){COLS}, DT_F32, 0.5, 1.5, 9);
  dt_tensor *tg = NULL, *xflat = NULL, *flat = NULL, *gflat_all = NULL, *gflat = NULL;
  int64_t targets[ROWS];
  for (int i = 0; i < ROWS; i++) targets[i] = (i * 37) % COLS;
  cr_assert_eq(dt_from_data(targets, 1, (int64_t[]){ROWS}, DT_I64, &tg), DT_OK);
  int64_t len = (int64_t)ROWS * COLS - 9; /* odd, not a multiple of any vector width */
  cr_assert_eq(dt_reshape(x, 1, (int64_t[]){(int64_t)ROWS * COLS}, &xflat), DT_OK);
  cr_assert_eq(dt_narrow(xflat, 0, 1, len, &flat), DT_OK);
  cr_assert_eq(dt_reshape(g, 1, (int64_t[]){(int64_t)ROWS * COLS}, &gflat_all), DT_OK);
  cr_assert_eq(dt_narrow(gflat_all, 0, 3, len, &gflat), DT_OK);
  int threads[2] = {1, cores()};
  dt_tensor *out[2][KERNELS] = {{NULL}};
  for (int pass = 0; pass < 2; pass++) {
    cr_assert_eq(dt_set_num_threads(threads[pass]), DT_OK);
    cr_assert_eq(dt_get_num_threads(), threads[pass]);
    run_kernels(x, g, w, tg, flat, gflat, out[pass]);
  }
  double *xv = ref_values(x), *fv = ref_values(flat), *gv = ref_values(g), *wv = ref_values(w);
  check_against_naive(xv, fv, out[1]);
  check_norms_against_naive(xv, gv, wv, out[1]);
  free(xv);
  free(fv);
  free(gv);
  free(wv);
  for (int k = 0; k < KERNELS; k++) {
    int64_t n = dt_tensor_numel(out[0][k]);
    cr_assert_eq(n, dt_tensor_numel(out[1][k]));
    cr_assert(memcmp(dt_tensor_data(out[0][k]), dt_tensor_data(out[1][k]), (size_t)n * 4) == 0,
              "kernel %d differs between 1 and %d threads", k, threads[1]);
    dt_tensor_release(out[0][k]);
    dt_tensor_release(out[1][k]);
  }
  dt_tensor *all[] = {x, g, w, tg, xflat, flat, gflat_all, gflat};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dt_tensor_release(all[i]);
}

/* Column reductions of a contiguous float32 matrix (a linear's bias gradient) split their
 * column chunks over the pool: the same bits on 1 and N threads, and the naive sums. */
Test(thread_pool, column_sums_equal_on_one_and_all_threads) {
  const int64_t rows = 2048, cols = 1000; /* 4 chunks of 256 columns, the last shorter */
  dt_tensor *x = ref_random(2, (int64_t[]){rows, cols}, DT_F32, -1, 1, 31);
  dt_tensor *out[2][2] = {{NULL}};
  int threads[2] = {1, cores()};
  for (int pass = 0; pass < 2; pass++) {
    cr_assert_eq(dt_set_num_threads(threads[pass]), DT_OK);
    cr_assert_eq(dt_sum_dims(x, 1, (int64_t[]){0}, false, &out[pass][0]), DT_OK, "%s",
                 dt_last_error());
    cr_assert_eq(dt_amax(x, 1, (int64_t[]){0}, false, &out[pass][1]), DT_OK, "%s", dt_last_error());
  }
  for (int k = 0; k < 2; k++)
    cr_assert(memcmp(dt_tensor_data(out[0][k]), dt_tensor_data(out[1][k]), (size_t)cols * 4) == 0);
  const float *xv = dt_tensor_data(x), *sv = dt_tensor_data(out[1][0]),
              *mv = dt_tensor_data(out[1][1]);
  for (int64_t c = 0; c < cols; c++) {
    double sum = 0, best = -INFINITY;
    for (int64_t r = 0; r < rows; r++) sum += xv[r * cols + c], best = fmax(best, xv[r * cols + c]);
    cr_assert_float_eq(sv[c], sum, 1e-5 * (1 + fabs(sum)), "sum[%lld]", (long long)c);
    cr_assert_eq(mv[c], (float)best, "max[%lld]", (long long)c);
  }
  for (int pass = 0; pass < 2; pass++)
    for (int k = 0; k < 2; k++) dt_tensor_release(out[pass][k]);
  dt_tensor_release(x);
  dt_set_num_threads(0);
}

/* AdamW splits a parameter's elements over the pool: 1 and N threads give the same bits,
 * and both equal PyTorch's _single_tensor_adamw arithmetic written out in float32 here
 * (factors in double, rounded once, as the optimizer computes them). */
static void adamw_steps(int threads, int64_t n, float *p_out) {
  cr_assert_eq(dt_set_num_threads(threads), DT_OK);
  dt_tensor *p = ref_random(1, (int64_t[]){n}, DT_F32, -1, 1, 21);
  dt_tensor *g = ref_random(1, (int64_t[]){n}, DT_F32, -0.1, 0.1, 22);
  cr_assert_eq(dt_tensor_set_requires_grad(p, true), DT_OK);
  cr_assert_eq(dt_tensor_set_grad(p, g), DT_OK);
  dt_optimizer *opt = NULL;
  dt_adam_options o = {.lr = 0.01, .weight_decay = 0.1};
  cr_assert_eq(dt_optimizer_create_adamw(1, &p, &o, &opt), DT_OK);
  for (int s = 0; s < 3; s++) cr_assert_eq(dt_optimizer_step(opt), DT_OK);
  memcpy(p_out, dt_tensor_data(p), (size_t)n * sizeof(float));
  dt_optimizer_destroy(opt);
  dt_tensor_release(p);
  dt_tensor_release(g);
}

Test(thread_pool, adamw_equal_on_one_and_all_threads) {
  const int64_t n = 3 * DT_PARALLEL_GRAIN * 4 + 13; /* several chunks, an odd tail */
  float *one = malloc((size_t)n * sizeof(float)), *all = malloc((size_t)n * sizeof(float));
  adamw_steps(1, n, one);
  adamw_steps(cores(), n, all);
  cr_assert(memcmp(one, all, (size_t)n * sizeof(float)) == 0);
  dt_tensor *p0 = ref_random(1, (int64_t[]){n}, DT_F32, -1, 1, 21);
  dt_tensor *g0 = ref_random(1, (int64_t[]){n}, DT_F32, -0.1, 0.1, 22);
  const float *pv = dt_tensor_data(p0), *gv = dt_tensor_data(g0);
  const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1;
  int64_t bad = 0;
  for (int64_t k = 0; k < n; k++) {
    float x = pv[k], m = 0, v = 0;
    for (int s = 1; s <= 3; s++) {
      float gk = gv[k];
      x = x * (float)(1.0 - lr * wd);
      m = m + (float)(1.0 - b1) * (gk - m);
      v = v * (float)b2 + (float)(1.0 - b2) * gk * gk;
      float step_size = (float)(lr / (1.0 - pow(b1, s)));
      float bc2 = (float)sqrt(1.0 - pow(b2, s));
      x = x + -step_size * (m / (sqrtf(v) / bc2 + (float)eps));
    }
    if (fabsf(x - all[k]) > 1e-6f * (1.0f + fabsf(x))) bad++;
  }
  cr_assert_eq(bad, 0, "%lld of %lld elements differ from the written-out AdamW", (long long)bad,
               (long long)n);
  dt_tensor_release(p0);
  dt_tensor_release(g0);
  free(one);
  free(all);
  dt_set_num_threads(0);
}

/* ---- Rank threads and the BLAS -------------------------------------------------------------- */

/* 8 rank threads on this machine: one kernel thread each (cores / 8, at least 1), and a large
 * softmax still right on every rank. */
static dt_status rank_fn(dt_comm *world, void *arg) {
  (void)world;
  (void)arg;
  int want = cores() / 8 > 0 ? cores() / 8 : 1;
  if (dt_get_num_threads() != want) return DT_ERR_INTERNAL;
  dt_tensor *x = ref_random(2, (int64_t[]){64, 4096}, DT_F32, -3, 3, 3), *y = NULL;
  dt_status st = dt_softmax(x, 1, &y);
  double *v = st ? NULL : ref_values(y);
  for (int r = 0; v && r < 64 && !st; r++) {
    double s = 0;
    for (int c = 0; c < 4096; c++) s += v[r * 4096 + c];
    if (fabs(s - 1.0) > 1e-4) st = DT_ERR_INTERNAL;
  }
  free(v);
  dt_tensor_release(x);
  dt_tensor_release(y);
  return st;
}

Test(thread_pool, ranks_share_the_cores) {
  cr_assert_eq(dt_set_num_threads(0), DT_OK);
  cr_assert_eq(dt_comm_spawn(8, rank_fn, NULL), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_get_num_threads(), cores(), "back to the cores after the ranks ended");
}

/* One small GEMM through the library (the BLAS's count is synced before each). */
static void matmul_once(void) {
  dt_tensor *a = ref_random(2, (int64_t[]){8, 8}, DT_F32, -1, 1, 1), *c = NULL;
  cr_assert_eq(dt_matmul(a, a, &c), DT_OK);
  dt_tensor_release(a);
  dt_tensor_release(c);
}

static dt_status blas_rank_fn(dt_comm *world, void *arg) {
  (void)world;
  int want = *(const int *)arg;
  matmul_once();
  return dt__gemm_threads() == want ? DT_OK : DT_ERR_INTERNAL;
}

/* dt_set_num_threads sets the GEMMs' threads too; without it they keep the BLAS's own count,
 * capped at cores / ranks while rank threads run. The BLAS itself runs on one thread inside
 * each block of a GEMM split on the pool (OpenBLAS, BLIS; a generic CBLAS reports 1). */
Test(thread_pool, gemms_follow_the_setting_and_the_ranks) {
  dt__blas_set_threads(cores());
  matmul_once();
  int base = dt__gemm_threads();
  cr_assert_eq(base, cores(), "dt__blas_set_threads sets the GEMMs' base count");
  cr_assert_eq(dt__blas_threads(), 1, "the BLAS itself runs on one thread");
  cr_assert_eq(dt_set_num_threads(1), DT_OK);
  matmul_once();
  cr_assert_eq(dt__gemm_threads(), 1, "dt_set_num_threads(1) reaches the GEMMs");
  cr_assert_eq(dt_set_num_threads(0), DT_OK);
  matmul_once();
  cr_assert_eq(dt__gemm_threads(), base, "the default gives the GEMMs the base count back");
  int per_rank = base < cores() / 2 ? base : cores() / 2 > 0 ? cores() / 2 : 1;
  cr_assert_eq(dt_comm_spawn(2, blas_rank_fn, &per_rank), DT_OK, "%s", dt_last_error());
  matmul_once();
  cr_assert_eq(dt__gemm_threads(), base, "back after the ranks ended");
  cr_assert_eq(dt__blas_threads(), 1, "the BLAS itself still on one thread");
}

/* The vocabulary-parallel cross-entropy terms and their gradient (the TP loss, issue 43 item
 * 2) split their rows over the pool: the same bits on 1 and 2 threads, and right against
 * double sums. A shard of 1000 classes at offset 3000: targets in and out of it. */
static void vocab_terms_on(int threads, dt_tensor *x, dt_tensor *m, dt_tensor *t, dt_tensor *g,
                           dt_tensor **terms, dt_tensor **dx) {
  cr_assert_eq(dt_set_num_threads(threads), DT_OK);
  cr_assert_eq(dt_zeros(2, (int64_t[]){ROWS, 3}, DT_F32, terms), DT_OK);
  cr_assert_eq(dt_zeros(2, (int64_t[]){ROWS, COLS}, DT_F32, dx), DT_OK);
  cr_assert_eq(dt__cpu_vocab_terms(x, m, t, 3000, *terms), DT_OK);
  cr_assert_eq(dt__cpu_vocab_terms_backward(x, m, t, g, 3000, *dx), DT_OK);
}

Test(thread_pool, vocab_terms_equal_on_one_and_two_threads) {
  if (cores() < 2) cr_skip_test("one core: nothing splits");
  dt_tensor *x = ref_random(2, (int64_t[]){ROWS, COLS}, DT_F32, -3, 3, 41);
  dt_tensor *g = ref_random(2, (int64_t[]){ROWS, 3}, DT_F32, -1, 1, 42);
  dt_tensor *m = NULL, *t = NULL;
  cr_assert_eq(dt_full(2, (int64_t[]){ROWS, 1}, 3.5, DT_F32, &m), DT_OK);
  cr_assert_eq(dt_zeros(2, (int64_t[]){ROWS, 1}, DT_I64, &t), DT_OK);
  int64_t *tv = dt_tensor_data(t);
  for (int i = 0; i < ROWS; i++) tv[i] = 2500 + (i * 7919) % 2000; /* half in [3000, 4000) */
  dt_tensor *terms[2], *dx[2];
  vocab_terms_on(1, x, m, t, g, &terms[0], &dx[0]);
  vocab_terms_on(2, x, m, t, g, &terms[1], &dx[1]);
  cr_assert_eq(dt_set_num_threads(0), DT_OK);
  cr_assert(memcmp(dt_tensor_data(terms[0]), dt_tensor_data(terms[1]), ROWS * 3 * 4) == 0,
            "the terms differ between 1 and 2 threads");
  cr_assert(memcmp(dt_tensor_data(dx[0]), dt_tensor_data(dx[1]), (size_t)ROWS * COLS * 4) == 0,
            "the gradient differs between 1 and 2 threads");
  const float *xv = dt_tensor_data(x), *gv = dt_tensor_data(g);
  const float *tm = dt_tensor_data(terms[1]), *dv = dt_tensor_data(dx[1]);
  for (int i = 0; i < ROWS; i++) {
    double s = 0, sz = 0;
    for (int c = 0; c < COLS; c++) {
      s += exp(xv[i * COLS + c] - 3.5);
      sz += xv[i * COLS + c] - 3.5;
    }
    int64_t j = tv[i] - 3000;
    bool in = j >= 0 && j < COLS;
    cr_assert_float_eq(tm[i * 3], s, 1e-4 * s, "row %d: sum of exp", i);
    cr_assert_float_eq(tm[i * 3 + 1], in ? xv[i * COLS + j] - 3.5 : 0.0, 1e-6, "row %d", i);
    cr_assert_float_eq(tm[i * 3 + 2], sz, 1e-2, "row %d: sum of x - m", i);
    for (int c = 0; c < COLS; c += 97) {
      double want = gv[i * 3] * exp(xv[i * COLS + c] - 3.5) + gv[i * 3 + 2] +
                    (in && c == j ? gv[i * 3 + 1] : 0.0);
      cr_assert_float_eq(dv[i * COLS + c], want, 1e-5 * (1 + fabs(want)), "dx[%d][%d]", i, c);
    }
    if (in) {
      double want = gv[i * 3] * exp(xv[i * COLS + j] - 3.5) + gv[i * 3 + 2] + gv[i * 3 + 1];
      cr_assert_float_eq(dv[i * COLS + j], want, 1e-5 * (1 + fabs(want)), "dx at the target");
    }
  }
  for (int k = 0; k < 2; k++) {
    dt_tensor_release(terms[k]);
    dt_tensor_release(dx[k]);
  }
  dt_tensor_release(x);
  dt_tensor_release(g);
  dt_tensor_release(m);
  dt_tensor_release(t);
}

/* A GEMM too small to split skips reading the thread setting (dt__blas_sync_unsplit), yet
 * still sets the BLAS back to one thread after a benchmark let it run its own (issue 43 item
 * 5: the instruction gate's cheaper path keeps what dt__blas_sync_threads did). */
Test(thread_pool, small_gemm_sets_the_blas_back_to_one_thread) {
  dt__blas_set_threads(cores());
  matmul_once();
  dt__blas_use_own_threads();
  if (dt__gemm_threads() > 1 && strncmp(dt__blas_name(), "generic", 7) != 0) {
    cr_assert_gt(dt__blas_threads(), 1, "the BLAS runs its own threads for the benchmark");
  }
  dt_tensor *a = ref_random(2, (int64_t[]){3, 5}, DT_F32, -1, 1, 7);
  dt_tensor *b = ref_random(2, (int64_t[]){5, 4}, DT_F32, -1, 1, 8), *c = NULL;
  cr_assert_eq(dt_matmul(a, b, &c), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt__blas_threads(), 1, "the small GEMM put the BLAS back on one thread");
  /* The product itself: every element against a double-precision sum. */
  const float *pa = dt_tensor_data(a), *pb = dt_tensor_data(b), *pc = dt_tensor_data(c);
  for (int i = 0; i < 3; i++) {
    for (int j = 0; j < 4; j++) {
      double want = 0;
      for (int k = 0; k < 5; k++) want += (double)pa[i * 5 + k] * pb[k * 4 + j];
      cr_assert_float_eq(pc[i * 4 + j], want, 1e-5, "c[%d][%d]", i, j);
    }
  }
  dt_tensor_release(a);
  dt_tensor_release(b);
  dt_tensor_release(c);
}

/* ---- GEMMs split on the pool ---------------------------------------------------------- */

/* c[b] = beta * bias + alpha * a[b] b[b] in double, naive (a: [batch, n, k], b: [batch, k, m]
 * row-major values; bias: m values, or NULL). */
static double *naive_gemm(const double *a, const double *b, const double *bias, int64_t batch,
                          int64_t n, int64_t m, int64_t k, double beta, double alpha) {
  double *c = malloc(sizeof(double) * (size_t)(batch * n * m));
  for (int64_t t = 0; t < batch; t++)
    for (int64_t i = 0; i < n; i++)
      for (int64_t j = 0; j < m; j++) {
        double s = 0;
        for (int64_t p = 0; p < k; p++) s += a[(t * n + i) * k + p] * b[(t * k + p) * m + j];
        c[(t * n + i) * m + j] = alpha * s + (bias ? beta * bias[j] : 0);
      }
  return c;
}

typedef enum { GEMM_MATMUL, GEMM_LINEAR, GEMM_ADDMM } gemm_kind;

/* One product at `threads` threads; returns its values. b_t: b given as a transposed view
 * (the BLAS reads it with a transpose flag). */
static double *gemm_at(int threads, gemm_kind kind, dt_tensor *a, dt_tensor *b, dt_tensor *bias) {
  cr_assert_eq(dt_set_num_threads(threads), DT_OK);
  dt_tensor *c = NULL;
  dt_status st = kind == GEMM_LINEAR  ? dt_linear(a, b, bias, &c)
                 : kind == GEMM_ADDMM ? dt_addmm_ex(bias, a, b, 0.5, 2.0, &c)
                                      : dt_matmul(a, b, &c);
  cr_assert_eq(st, DT_OK, "%s", dt_last_error());
  double *v = ref_values(c);
  dt_tensor_release(c);
  cr_assert_eq(dt_set_num_threads(0), DT_OK);
  return v;
}

/* Products large enough to split (rows, a batch of matrices; transposed operands; a linear's
 * bias row; addmm's beta and alpha) give the same bits on 1 and all threads; those and a
 * matrix-vector product (split by columns) match a naive double loop. */
Test(thread_pool, gemms_equal_on_one_and_all_threads) {
  struct {
    gemm_kind kind;
    int64_t batch, n, m, k;
    bool b_t;
  } cases[] = {
      {GEMM_MATMUL, 1, 513, 257, 300, false}, /* rows */
      {GEMM_MATMUL, 1, 200, 130, 400, false}, /* rows in blocks of 96 and 104 */
      {GEMM_MATMUL, 1, 45, 1000, 300, true},  /* too few rows to split: whole */
      {GEMM_MATMUL, 1, 300, 700, 200, true},  /* rows, b transposed */
      {GEMM_MATMUL, 6, 128, 128, 96, false},  /* a batch */
      {GEMM_LINEAR, 4, 100, 384, 256, true},  /* folded rows, bias row */
      {GEMM_ADDMM, 1, 200, 600, 64, false},   /* beta, alpha, bias row */
      {GEMM_MATMUL, 1, 1, 4096, 2048, false}, /* one row: columns (close, not same bits) */
  };
  for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
    int64_t B = cases[t].batch, n = cases[t].n, m = cases[t].m, k = cases[t].k;
    bool batched_b = cases[t].kind == GEMM_MATMUL && B > 1;
    int an = B > 1 ? 3 : 2;
    int64_t ashape[3] = {B, n, k}, bshape[3] = {B, k, m}, wshape[2] = {m, k};
    dt_tensor *a = ref_random(an, an == 3 ? ashape : ashape + 1, DT_F32, -1, 1, 11 + t);
    dt_tensor *b = NULL, *bias = NULL;
    if (cases[t].kind == GEMM_LINEAR) {
      b = ref_random(2, wshape, DT_F32, -1, 1, 23 + t); /* weight [m, k]: read as b^T */
    } else if (cases[t].b_t) {
      b = ref_random_strided(2, bshape + 1, DT_F32, -1, 1, 23 + t);
    } else {
      b = ref_random(batched_b ? 3 : 2, batched_b ? bshape : bshape + 1, DT_F32, -1, 1, 23 + t);
    }
    if (cases[t].kind != GEMM_MATMUL) bias = ref_random(1, &m, DT_F32, -1, 1, 37 + t);
    double *one = gemm_at(1, cases[t].kind, a, b, bias);
    double *all = gemm_at(cores(), cases[t].kind, a, b, bias);
    double *av = ref_values(a), *bv = ref_values(b), *biv = bias ? ref_values(bias) : NULL;
    double *bk = bv; /* b as [.., k, m] row-major values */
    if (cases[t].kind == GEMM_LINEAR) {
      bk = malloc(sizeof(double) * (size_t)(k * m));
      for (int64_t p = 0; p < k; p++)
        for (int64_t j = 0; j < m; j++) bk[p * m + j] = bv[j * k + p];
    }
    double beta = cases[t].kind == GEMM_ADDMM ? 0.5 : 1,
           alpha = cases[t].kind == GEMM_ADDMM ? 2 : 1;
    double *want = batched_b ? naive_gemm(av, bk, biv, B, n, m, k, beta, alpha)
                             : naive_gemm(av, bk, biv, 1, B * n, m, k, beta, alpha);
    for (int64_t i = 0; i < B * n * m; i++) {
      /* a matrix-vector product splits its columns, where kernels may round differently */
      if (n > 1)
        cr_assert(memcmp(&one[i], &all[i], sizeof(double)) == 0,
                  "case %zu element %lld: %.9g on 1 thread, %.9g on %d", t, (long long)i, one[i],
                  all[i], cores());
      cr_assert(fabs(one[i] - want[i]) <= 1e-4 * (1 + fabs(want[i])),
                "case %zu element %lld: %.9g, naive %.9g", t, (long long)i, one[i], want[i]);
    }
    if (bk != bv) free(bk);
    free(one), free(all), free(av), free(bv), free(biv), free(want);
    dt_tensor_release(a), dt_tensor_release(b), dt_tensor_release(bias);
  }
}

/* Copies split on the pool (rows of a strided copy, runs of one contiguous row, a broadcast
 * source, a dtype conversion) equal a naive copy on 1 and all threads. */
Test(thread_pool, copies_equal_on_one_and_all_threads) {
  dt_tensor *t = ref_random_strided(2, (int64_t[]){700, 300}, DT_F32, -1, 1, 5);
  dt_tensor *flat = ref_random(1, (int64_t[]){300000}, DT_F32, -1, 1, 6);
  dt_tensor *row = ref_random(2, (int64_t[]){1, 400}, DT_F32, -1, 1, 7), *wide = NULL;
  dt_tensor *d64 = ref_random_strided(2, (int64_t[]){300, 500}, DT_F64, -1, 1, 8);
  cr_assert_eq(dt_expand(row, 2, (int64_t[]){300, 400}, &wide), DT_OK);
  dt_tensor *src[] = {t, flat, wide, d64};
  for (int i = 0; i < 4; i++) {
    double *want = ref_values(src[i]);
    for (int threads = 1; threads <= 2; threads++) {
      cr_assert_eq(dt_set_num_threads(threads == 1 ? 1 : cores()), DT_OK);
      dt_tensor *c = NULL;
      if (i == 3) {
        cr_assert_eq(dt_empty(2, (int64_t[]){300, 500}, DT_F32, &c), DT_OK);
        cr_assert_eq(dt_copy_(c, src[i]), DT_OK, "%s", dt_last_error());
      } else if (i == 1) { /* contiguous: a clone copies it */
        cr_assert_eq(dt_clone(src[i], &c), DT_OK, "%s", dt_last_error());
      } else {
        cr_assert_eq(dt_contiguous(src[i], &c), DT_OK, "%s", dt_last_error());
      }
      double *got = ref_values(c);
      for (int64_t e = 0; e < dt_tensor_numel(c); e++)
        cr_assert_eq(got[e], i == 3 ? (double)(float)want[e] : want[e],
                     "copy %d, element %lld, %d thread(s)", i, (long long)e, threads);
      free(got);
      dt_tensor_release(c);
    }
    free(want);
  }
  cr_assert_eq(dt_set_num_threads(0), DT_OK);
  dt_tensor *all[] = {t, flat, row, wide, d64};
  for (int i = 0; i < 5; i++) dt_tensor_release(all[i]);
}

/* Binary ops split on the pool (the contiguous fast loop by runs of elements, broadcasts by
 * rows of the strided loop, a strided operand, an in-place add, float64, bfloat16) equal a
 * naive double loop, the same bits on 1 and all threads. */
typedef enum {
  BIN_ADD_ALPHA,
  BIN_MUL_ROWS,
  BIN_ADD_BIAS,
  BIN_SUB_STRIDED,
  BIN_ADD_INPLACE
} bin_case;

static dt_tensor *binary_at(int threads, bin_case c, dt_tensor *x, dt_tensor *y) {
  cr_assert_eq(dt_set_num_threads(threads), DT_OK);
  dt_tensor *out = NULL;
  switch (c) {
  case BIN_ADD_ALPHA: cr_assert_eq(dt_add_ex(x, y, 0.5, &out), DT_OK, "%s", dt_last_error()); break;
  case BIN_MUL_ROWS:
  case BIN_ADD_BIAS:
    cr_assert_eq(c == BIN_MUL_ROWS ? dt_mul(x, y, &out) : dt_add(x, y, &out), DT_OK, "%s",
                 dt_last_error());
    break;
  case BIN_SUB_STRIDED: cr_assert_eq(dt_sub(x, y, &out), DT_OK, "%s", dt_last_error()); break;
  case BIN_ADD_INPLACE:
    cr_assert_eq(dt_clone(x, &out), DT_OK);
    cr_assert_eq(dt_add_(out, y), DT_OK, "%s", dt_last_error());
    break;
  }
  cr_assert_eq(dt_set_num_threads(0), DT_OK);
  return out;
}

Test(thread_pool, binary_ops_equal_on_one_and_all_threads) {
  int64_t B = 8, T = 96, D = 512;
  dt_dtype dtypes[] = {DT_F32, DT_F64, DT_BF16};
  for (int d = 0; d < 3; d++)
    for (int c = BIN_ADD_ALPHA; c <= BIN_ADD_INPLACE; c++) {
      dt_tensor *x = ref_random(3, (int64_t[]){B, T, D}, dtypes[d], -1, 1, 50 + c), *y = NULL;
      if (c == BIN_MUL_ROWS)
        y = ref_random(3, (int64_t[]){B, T, 1}, dtypes[d], -1, 1, 60);
      else if (c == BIN_ADD_BIAS)
        y = ref_random(1, &D, dtypes[d], -1, 1, 61);
      else if (c == BIN_SUB_STRIDED)
        y = ref_random_strided(3, (int64_t[]){B, T, D}, dtypes[d], -1, 1, 62);
      else
        y = ref_random(3, (int64_t[]){B, T, D}, dtypes[d], -1, 1, 63);
      dt_tensor *one = binary_at(1, c, x, y), *all = binary_at(cores(), c, x, y);
      double *xv = ref_values(x), *yv = ref_values(y), *ov = ref_values(one), *av = ref_values(all);
      for (int64_t i = 0; i < B * T * D; i++) {
        double yi = c == BIN_MUL_ROWS ? yv[i / D] : c == BIN_ADD_BIAS ? yv[i % D] : yv[i];
        double want = c == BIN_ADD_ALPHA     ? xv[i] + 0.5 * yi
                      : c == BIN_MUL_ROWS    ? xv[i] * yi
                      : c == BIN_SUB_STRIDED ? xv[i] - yi
                                             : xv[i] + yi;
        double tol = dtypes[d] == DT_BF16 ? 1e-2 : dtypes[d] == DT_F32 ? 1e-6 : 1e-15;
        cr_assert(fabs(ov[i] - want) <= tol * (1 + fabs(want)), "case %d dtype %d [%lld]: %g vs %g",
                  c, d, (long long)i, ov[i], want);
        cr_assert(memcmp(&ov[i], &av[i], sizeof(double)) == 0, "case %d dtype %d [%lld]: %g vs %g",
                  c, d, (long long)i, ov[i], av[i]);
      }
      free(xv), free(yv), free(ov), free(av);
      dt_tensor *gone[] = {x, y, one, all};
      for (int i = 0; i < 4; i++) dt_tensor_release(gone[i]);
    }
}

/* A comparison (bool output, one byte per element) split on the pool. */
Test(thread_pool, comparison_split_on_the_pool) {
  int64_t n = 300000;
  dt_tensor *x = ref_random(1, &n, DT_F32, -1, 1, 70), *y = ref_random(1, &n, DT_F32, -1, 1, 71);
  dt_tensor *lt[2] = {NULL, NULL};
  for (int i = 0; i < 2; i++) {
    cr_assert_eq(dt_set_num_threads(i == 0 ? 1 : cores()), DT_OK);
    cr_assert_eq(dt_lt(x, y, &lt[i]), DT_OK, "%s", dt_last_error());
  }
  cr_assert_eq(dt_set_num_threads(0), DT_OK);
  const float *xv = dt_tensor_data(x), *yv = dt_tensor_data(y);
  const uint8_t *l0 = dt_tensor_data(lt[0]), *l1 = dt_tensor_data(lt[1]);
  for (int64_t i = 0; i < n; i++) {
    cr_assert_eq(l0[i], xv[i] < yv[i], "[%lld]", (long long)i);
    cr_assert_eq(l1[i], l0[i], "[%lld]", (long long)i);
  }
  dt_tensor *gone[] = {x, y, lt[0], lt[1]};
  for (int i = 0; i < 4; i++) dt_tensor_release(gone[i]);
}
