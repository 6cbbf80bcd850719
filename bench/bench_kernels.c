/*
 * dtensor bench kernels: local kernels against a baseline measured in the same run, the two
 * alternating (ABAB...) and reported as median with spread (min..max). One BLAS thread: the
 * figures compare with one core's peak, as each rank of a threads world runs on one core.
 *   sgemm M x K x N   dt_mm against a direct cblas_sgemm on the same buffers, in GFLOP/s and
 *                     as a fraction of one core's f32 peak (the machine header says how the
 *                     peak is derived) and of the peak an FMA loop reaches in the same run
 *                     (which catches a core boosting above its nominal clock). Shapes: the TP MLP's
 * tall-skinny products (64 x 4096 x 4096, 64 x 4096 x 16384), a square 1024 (--gemm-size) and the
 *                     attention bmm of hidden 4096 / 32 heads / 64 tokens (scores q k^T:
 *                     32 x [64 x 128] x [128 x 64], context p v: 32 x [64 x 64] x [64 x 128]).
 *   add, mul, relu, sum   large contiguous f32 (8M elements, 32 MiB an operand: beyond the
 *                     L3 with three operands, and within the allocator's cached classes) against a
 *                     memcpy in the same run: bandwidth = bytes read + bytes written / time
 *                     for both (add reads 2 and writes 1 operand, relu 1 and 1, sum reads 1),
 *                     ratio = op / memcpy (target >= 0.8), both timed in thread CPU time.
 *   add_512x512       dt_add (output allocated per call, as users call it) against a plain C
 *                     loop into a preallocated buffer (ratio = ours/loop time, target <= 1.2)
 *   local_dispatch    a 1-element dt_add minus the same 1-element kernel loop: what dispatch,
 *                     validation, allocation and release cost (target <= 100 ns)
 */
#include <cblas.h>
#include <stdio.h>
#include <string.h>

#include "bench_machine.h"
#include "bench_util.h"
#include "dtensor/dtensor.h"
#include "kernels/cpu/blas.h"
#include "tools.h"

static int fail(const char *what) {
  fprintf(stderr, "bench kernels: %s: %s\n", what, dt_last_error());
  return 1;
}

/* One GEMM row: `batch` products of [m, k] x [k, n]. */
typedef struct gemm_shape {
  const char *name;
  int64_t batch, m, k, n;
} gemm_shape;

static void raw_gemm(const gemm_shape *s, const float *a, const float *b, float *c) {
  for (int64_t i = 0; i < s->batch; i++) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)s->m, (int)s->n, (int)s->k, 1.0f,
                a + i * s->m * s->k, (int)s->k, b + i * s->k * s->n, (int)s->n, 0.0f,
                c + i * s->m * s->n, (int)s->n);
  }
}

static int bench_gemm(bool json, const gemm_shape *s) {
  int64_t ashape[] = {s->batch, s->m, s->k}, bshape[] = {s->batch, s->k, s->n};
  int nd = s->batch > 1 ? 3 : 2;
  dt_tensor *a = NULL, *b = NULL, *c = NULL;
  if (dt_rand(nd, ashape + 3 - nd, DT_F32, 1, &a) || dt_rand(nd, bshape + 3 - nd, DT_F32, 2, &b))
    return fail("rand");
  float *raw_c = malloc(sizeof(float) * (size_t)(s->batch * s->m * s->n));
  const float *pa = dt_tensor_data(a), *pb = dt_tensor_data(b);
  double flops = 2.0 * (double)s->batch * (double)s->m * (double)s->n * (double)s->k;
  /* Enough repetitions for ~0.3 s of each side at 50 GFLOP/s, at least 5. */
  int reps = (int)(0.3 * 50e9 / flops);
  reps = reps < 5 ? 5 : reps > 201 ? 201 : reps;
  double *ours = malloc(sizeof(double) * (size_t)reps),
         *blas = malloc(sizeof(double) * (size_t)reps);
  double *ours_cpu = malloc(sizeof(double) * (size_t)reps);
  double *blas_cpu = malloc(sizeof(double) * (size_t)reps);
  int rc = 0;
  /* Warm up both paths (page faults, packing buffers). */
  raw_gemm(s, pa, pb, raw_c);
  if (dt_matmul(a, b, &c)) rc = fail("matmul");
  dt_tensor_release(c);
  for (int r = 0; r < reps && !rc; r++) {
    double t0 = bench_now_us(), c0 = bench_thread_cpu_us();
    raw_gemm(s, pa, pb, raw_c);
    double t1 = bench_now_us(), c1 = bench_thread_cpu_us();
    if (dt_matmul(a, b, &c)) rc = fail("matmul");
    double t2 = bench_now_us(), c2 = bench_thread_cpu_us();
    dt_tensor_release(c);
    blas[r] = flops / (t1 - t0) / 1e3;
    ours[r] = flops / (t2 - t1) / 1e3;
    blas_cpu[r] = flops / (c1 - c0) / 1e3;
    ours_cpu[r] = flops / (c2 - c1) / 1e3;
  }
  if (!rc) {
    bench_stats g = bench_stats_of(ours, reps), bg = bench_stats_of(blas, reps);
    bench_stats gc = bench_stats_of(ours_cpu, reps), bgc = bench_stats_of(blas_cpu, reps);
    double peak = bench_machine_get()->peak_core_gflops;
    double measured = bench_machine_get()->measured_core_gflops;
    double of_measured = measured > 0 ? gc.median / measured : 0;
    /* The fraction of peak uses CPU time: wall time on a loaded machine includes the time
     * slices other processes took. */
    if (json) {
      printf("{\"name\":\"sgemm\",\"shape\":\"%s\",\"batch\":%lld,\"m\":%lld,\"k\":%lld,"
             "\"n\":%lld,\"reps\":%d,\"gflops\":%.2f,\"gflops_min\":%.2f,\"gflops_max\":%.2f,"
             "\"blas_gflops\":%.2f,\"ratio\":%.3f,\"cpu_gflops\":%.2f,\"blas_cpu_gflops\":%.2f,"
             "\"fraction_of_core_peak\":%.3f,\"fraction_of_measured_peak\":%.3f}\n",
             s->name, (long long)s->batch, (long long)s->m, (long long)s->k, (long long)s->n, reps,
             g.median, g.min, g.max, bg.median, g.median / bg.median, gc.median, bgc.median,
             gc.median / peak, of_measured);
    } else {
      printf("sgemm %-8s %2lld x [%4lld x %4lld] x [%4lld x %5lld]: dt %5.1f GFLOP/s (%.1f..%.1f) "
             "wall, %5.1f cpu; cblas %5.1f wall, %5.1f cpu; ratio %.3f; %4.1f%% of one core's "
             "peak (cpu), %4.1f%% of the measured FMA peak\n",
             s->name, (long long)s->batch, (long long)s->m, (long long)s->k, (long long)s->k,
             (long long)s->n, g.median, g.min, g.max, gc.median, bg.median, bgc.median,
             g.median / bg.median, 100 * gc.median / peak, 100 * of_measured);
    }
  }
  free(ours);
  free(blas);
  free(ours_cpu);
  free(blas_cpu);
  free(raw_c);
  dt_tensor_release(a);
  dt_tensor_release(b);
  return rc;
}

/* ---- Bandwidth-bound kernels against memcpy ------------------------------------------------ */

enum { BW_ADD, BW_MUL, BW_RELU, BW_SUM, BW_COUNT };
static const char *const bw_names[BW_COUNT] = {"add", "mul", "relu", "sum"};
/* Operands read and written per element, in f32 words. */
static const int bw_words[BW_COUNT] = {3, 3, 2, 1};

static dt_status run_bw(int op, dt_tensor *a, dt_tensor *b) {
  dt_tensor *out = NULL;
  dt_status st;
  switch (op) {
  case BW_ADD: st = dt_add(a, b, &out); break;
  case BW_MUL: st = dt_mul(a, b, &out); break;
  case BW_RELU: st = dt_relu(a, &out); break;
  default: st = dt_sum(a, &out); break;
  }
  dt_tensor_release(out);
  return st;
}

static int bench_bandwidth(bool json) {
  const int64_t numel = 8LL << 20;
  const size_t bytes = sizeof(float) * (size_t)numel;
  dt_tensor *a = NULL, *b = NULL;
  if (dt_randn(1, &numel, DT_F32, 1, &a) || dt_randn(1, &numel, DT_F32, 2, &b))
    return fail("randn");
  char *src = malloc(bytes), *dst = malloc(bytes);
  if (!src || !dst) {
    free(src);
    free(dst);
    return fail("malloc");
  }
  memset(src, 1, bytes);
  memset(dst, 2, bytes);
  enum { REPS = 9 };
  int rc = 0;
  for (int op = 0; op < BW_COUNT && !rc; op++) {
    double ours[REPS], copy[REPS];
    if (run_bw(op, a, b)) rc = fail(bw_names[op]); /* warm up: the output's block cached */
    for (int r = 0; r < REPS && !rc; r++) {
      src[r] = (char)r;
      /* Thread CPU time: on a shared machine wall time also counts other processes' slices. */
      double t0 = bench_thread_cpu_us();
      memcpy(dst, src, bytes);
      double t1 = bench_thread_cpu_us();
      __asm__ volatile("" : : "r"(dst) : "memory");
      if (run_bw(op, a, b)) rc = fail(bw_names[op]);
      double t2 = bench_thread_cpu_us();
      copy[r] = 2.0 * (double)bytes / ((t1 - t0) * 1e3);
      ours[r] = (double)bw_words[op] * (double)bytes / ((t2 - t1) * 1e3);
    }
    if (rc) break;
    bench_stats o = bench_stats_of(ours, REPS), c = bench_stats_of(copy, REPS);
    if (json) {
      printf("{\"name\":\"bandwidth\",\"op\":\"%s\",\"numel\":%lld,\"gbs\":%.2f,\"gbs_min\":%.2f,"
             "\"gbs_max\":%.2f,\"memcpy_gbs\":%.2f,\"ratio\":%.3f}\n",
             bw_names[op], (long long)numel, o.median, o.min, o.max, c.median, o.median / c.median);
    } else {
      printf("%-4s f32 8M: %6.2f GB/s (%.2f..%.2f) read+written, memcpy %6.2f GB/s, ratio %.2f "
             "(target >= 0.8)\n",
             bw_names[op], o.median, o.min, o.max, c.median, o.median / c.median);
    }
  }
  free(src);
  free(dst);
  dt_tensor_release(a);
  dt_tensor_release(b);
  return rc;
}

static int bench_add(bool json) {
  int64_t shape[] = {512, 512};
  int64_t numel = 512 * 512;
  dt_tensor *a = NULL, *b = NULL, *c = NULL;
  if (dt_rand(2, shape, DT_F32, 1, &a) || dt_rand(2, shape, DT_F32, 2, &b)) return fail("rand");
  const float *pa = dt_tensor_data(a), *pb = dt_tensor_data(b);
  float *pc = malloc(sizeof(float) * (size_t)numel);
  enum { REPS = 201, INNER = 10 };
  double ours[REPS], loop[REPS];
  for (int r = 0; r < REPS; r++) {
    double t0 = bench_now_us();
    for (int i = 0; i < INNER; i++) {
      for (int64_t j = 0; j < numel; j++) pc[j] = pa[j] + pb[j];
      __asm__ volatile("" : : "r"(pc) : "memory"); /* keep the loop */
    }
    double t1 = bench_now_us();
    for (int i = 0; i < INNER; i++) {
      if (dt_add(a, b, &c)) return fail("add");
      dt_tensor_release(c);
    }
    double t2 = bench_now_us();
    loop[r] = (t1 - t0) / INNER;
    ours[r] = (t2 - t1) / INNER;
  }
  bench_stats o = bench_stats_of(ours, REPS), l = bench_stats_of(loop, REPS);
  if (json) {
    printf("{\"name\":\"add_512x512\",\"us\":%.3f,\"us_min\":%.3f,\"us_max\":%.3f,"
           "\"loop_us\":%.3f,\"ratio\":%.3f}\n",
           o.median, o.min, o.max, l.median, o.median / l.median);
  } else {
    printf("add 512x512 f32: dt_add %.2f us (%.2f..%.2f), plain loop %.2f us, ratio %.3f\n",
           o.median, o.min, o.max, l.median, o.median / l.median);
  }
  free(pc);
  dt_tensor_release(a);
  dt_tensor_release(b);
  return 0;
}

static int bench_dispatch(bool json) {
  int64_t one = 1;
  dt_tensor *a = NULL, *b = NULL, *c = NULL;
  if (dt_ones(1, &one, DT_F32, &a) || dt_ones(1, &one, DT_F32, &b)) return fail("ones");
  enum { REPS = 101, INNER = 2000 };
  double ours[REPS], kernel[REPS];
  float x = 1.0f, y = 2.0f, z = 0.0f;
  for (int r = 0; r < REPS; r++) {
    double t0 = bench_now_us();
    for (int i = 0; i < INNER; i++) {
      __asm__ volatile("" : "+r"(x), "+r"(y));
      z = x + y;
      __asm__ volatile("" : : "r"(z) : "memory");
    }
    double t1 = bench_now_us();
    for (int i = 0; i < INNER; i++) {
      if (dt_add(a, b, &c)) return fail("add");
      dt_tensor_release(c);
    }
    double t2 = bench_now_us();
    kernel[r] = (t1 - t0) * 1e3 / INNER;
    ours[r] = (t2 - t1) * 1e3 / INNER;
  }
  bench_stats o = bench_stats_of(ours, REPS), k = bench_stats_of(kernel, REPS);
  if (json) {
    printf("{\"name\":\"local_dispatch\",\"call_ns\":%.1f,\"call_min_ns\":%.1f,"
           "\"call_max_ns\":%.1f,\"kernel_ns\":%.1f,\"overhead_ns\":%.1f}\n",
           o.median, o.min, o.max, k.median, o.median - k.median);
  } else {
    printf("local dispatch: 1-element dt_add %.1f ns (%.1f..%.1f), kernel alone %.1f ns, "
           "overhead %.1f ns\n",
           o.median, o.min, o.max, k.median, o.median - k.median);
  }
  dt_tensor_release(a);
  dt_tensor_release(b);
  return 0;
}

int bench_suite_kernels(int argc, char **argv) {
  bool json = tool_has_flag(argc, argv, "--json");
  int64_t n = 1024;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--gemm-size") == 0 && i + 1 < argc) {
      char *end = NULL;
      n = strtoll(argv[++i], &end, 10);
      if (!end || *end) n = -1;
    } else if (strcmp(argv[i], "--json") != 0) {
      fprintf(stderr, "bench kernels: unknown option '%s' (see 'dtensor bench kernels --help')\n",
              argv[i]);
      return 2;
    }
  }
  if (n <= 0 || n > 16384) {
    fprintf(stderr, "bench kernels: --gemm-size must be 1..16384\n");
    return 2;
  }
  bench_machine_print(json);
  dt_set_num_threads(1);   /* one thread: the BLAS's and the kernels' */
  dt__blas_sync_threads(); /* before the first direct cblas_sgemm */
  const gemm_shape shapes[] = {
      {"mlp", 1, 64, 4096, 4096},   {"mlp_up", 1, 64, 4096, 16384}, {"square", 1, n, n, n},
      {"attn_qk", 32, 64, 128, 64}, {"attn_pv", 32, 64, 64, 128},
  };
  int rc = 0;
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) rc |= bench_gemm(json, &shapes[i]);
  rc |= bench_bandwidth(json);
  rc |= bench_add(json);
  rc |= bench_dispatch(json);
  return rc;
}
