/*
 * dtensor bench kernels: local kernels against a baseline measured in the same run.
 *   sgemm         dt_mm against a direct cblas_sgemm on the same buffers (ratio = ours/BLAS
 *                 GFLOP/s, target >= 0.97)
 *   add_512x512   dt_add (output allocated per call, as users call it) against a plain C
 *                 loop into a preallocated buffer (ratio = ours/loop time, target <= 1.2)
 *   local_dispatch  a 1-element dt_add minus the same 1-element kernel loop: what dispatch,
 *                 validation, allocation and release cost (target <= 100 ns)
 */
#include <cblas.h>
#include <stdio.h>
#include <string.h>

#include "bench_machine.h"
#include "bench_util.h"
#include "kernels/cpu/blas.h"
#include "dtensor/dtensor.h"
#include "tools.h"

static int fail(const char *what) {
  fprintf(stderr, "bench kernels: %s: %s\n", what, dt_last_error());
  return 1;
}

static int bench_sgemm(bool json, int64_t n) {
  int64_t shape[] = {n, n};
  dt_tensor *a = NULL, *b = NULL, *c = NULL;
  if (dt_rand(2, shape, DT_F32, 1, &a) || dt_rand(2, shape, DT_F32, 2, &b)) return fail("rand");
  float *raw_c = malloc(sizeof(float) * (size_t)(n * n));
  const float *pa = dt_tensor_data(a), *pb = dt_tensor_data(b);
  enum { REPS = 7 };
  double ours[REPS], blas[REPS];
  /* Warm up both paths (thread pools, page faults). */
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.0f, pa, (int)n,
              pb, (int)n, 0.0f, raw_c, (int)n);
  if (dt_mm(a, b, &c)) return fail("mm");
  dt_tensor_release(c);
  for (int r = 0; r < REPS; r++) { /* interleaved so drift hits both alike */
    double t0 = bench_now_us();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.0f, pa, (int)n,
                pb, (int)n, 0.0f, raw_c, (int)n);
    double t1 = bench_now_us();
    if (dt_mm(a, b, &c)) return fail("mm");
    double t2 = bench_now_us();
    dt_tensor_release(c);
    blas[r] = t1 - t0;
    ours[r] = t2 - t1;
  }
  double flops = 2.0 * (double)n * (double)n * (double)n;
  double gf = flops / bench_min(ours, REPS) / 1e3, blas_gf = flops / bench_min(blas, REPS) / 1e3;
  if (json) {
    printf(
        "{\"name\":\"sgemm\",\"m\":%lld,\"n\":%lld,\"k\":%lld,\"gflops\":%.2f,\"blas_gflops\":%.2f,"
        "\"ratio\":%.3f}\n",
        (long long)n, (long long)n, (long long)n, gf, blas_gf, gf / blas_gf);
  } else {
    printf("sgemm %lldx%lldx%lld: dt_mm %.1f GFLOP/s, cblas_sgemm %.1f GFLOP/s, ratio %.3f\n",
           (long long)n, (long long)n, (long long)n, gf, blas_gf, gf / blas_gf);
  }
  free(raw_c);
  dt_tensor_release(a);
  dt_tensor_release(b);
  return 0;
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
  double us = bench_median(ours, REPS), loop_us = bench_median(loop, REPS);
  if (json) {
    printf("{\"name\":\"add_512x512\",\"us\":%.3f,\"loop_us\":%.3f,\"ratio\":%.3f}\n", us, loop_us,
           us / loop_us);
  } else {
    printf("add 512x512 f32: dt_add %.2f us, plain loop %.2f us, ratio %.3f\n", us, loop_us,
           us / loop_us);
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
  double ns = bench_median(ours, REPS), kernel_ns = bench_median(kernel, REPS);
  if (json) {
    printf(
        "{\"name\":\"local_dispatch\",\"call_ns\":%.1f,\"kernel_ns\":%.1f,\"overhead_ns\":%.1f}\n",
        ns, kernel_ns, ns - kernel_ns);
  } else {
    printf("local dispatch: 1-element dt_add %.1f ns, kernel alone %.1f ns, overhead %.1f ns\n", ns,
           kernel_ns, ns - kernel_ns);
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
  if (n <= 0) {
    fprintf(stderr, "bench kernels: --gemm-size must be positive\n");
    return 2;
  }
  bench_machine_print(json);
  int rc = bench_sgemm(json, n);
  rc |= bench_add(json);
  rc |= bench_dispatch(json);
  return rc;
}
