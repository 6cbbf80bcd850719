/*
 * dtensor bench cuda: the CUDA device's kernels against the hardware's own baselines, measured
 * in the same run, the two sides alternating (ABAB...), median with spread (min..max) of wall
 * time around a device synchronization:
 *   gemm      dt_mm against a direct cuBLAS call on buffers of the same shapes (f32 with TF32
 *             off, f32 with TF32 on, bf16 with f32 accumulation), TFLOP/s and ratio (issue 24's
 *             target: >= 0.95 of the same GEMM, which torch.mm also calls);
 *   pointwise dt_add of two 32M-element f32 tensors (output allocated per call, as users call
 *             it) against cudaMemcpyAsync device to device: bytes moved / time for both (add
 *             reads 2 and writes 1 operand, a copy reads 1 and writes 1), ratio (target >= 0.8);
 *   rows      softmax and layer_norm (weight, bias) over [8192, 4096] f32 rows, the same way;
 *   copy      dt_to_device host -> device and device -> host of 256 MiB against cudaMemcpy of
 *             the same pageable buffers, GB/s.
 * Without CUDA (a build without it, or no device) it prints one line saying so and exits 0,
 * so that scripts may call it anywhere. Options: --json, --reps N (default 7).
 */
#include <stdio.h>
#include <string.h>

#include "bench_machine.h"
#include "bench_util.h"
#include "dtensor/dtensor.h"
#include "tools.h"

/* The one line of a machine without a CUDA device: why, and a clean exit. */
static int no_device(bool json, const char *why) {
  if (json)
    printf("{\"name\":\"cuda\",\"status\":\"no_cuda_device\",\"reason\":\"%s\"}\n", why);
  else
    printf("bench cuda: no CUDA device: %s\n", why);
  return 0;
}

#ifndef DT_HAVE_CUDA

int bench_suite_cuda(int argc, char **argv) {
  bool json = false;
  for (int i = 1; i < argc; i++) json = json || strcmp(argv[i], "--json") == 0;
  return no_device(json, "this dtensor was built without CUDA (configure with -DDT_WITH_CUDA=ON)");
}

#else

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#define CB_MAX_REPS 31

static const dt_device cuda0 = {DT_DEVICE_CUDA, 0};

static int fail(const char *what) {
  fprintf(stderr, "bench cuda: %s: %s\n", what, dt_last_error());
  return 1;
}

static int cuda_fail(const char *what, int error) {
  fprintf(stderr, "bench cuda: %s: %s\n", what, cudaGetErrorString((cudaError_t)error));
  return 1;
}

/* The JSON-safe copy of a device name (no quotes or backslashes). */
static void clean(char *s) {
  for (; *s; s++)
    if (*s == '"' || *s == '\\') *s = ' ';
}

static void print_gpu(bool json) {
  struct cudaDeviceProp p;
  int driver = 0, runtime = 0;
  memset(&p, 0, sizeof p);
  cudaGetDeviceProperties(&p, 0);
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  clean(p.name);
  double gib = (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0);
  if (json) {
    printf("{\"name\":\"gpu\",\"gpu\":\"%s\",\"sm\":\"%d.%d\",\"sms\":%d,\"memory_gib\":%.1f,"
           "\"driver\":%d,\"runtime\":%d}\n",
           p.name, p.major, p.minor, p.multiProcessorCount, gib, driver, runtime);
  } else {
    printf("# gpu: %s, sm_%d%d, %d SMs, %.1f GiB; driver %d, runtime %d\n", p.name, p.major,
           p.minor, p.multiProcessorCount, gib, driver, runtime);
  }
  fflush(stdout);
}

/* Both sides of one comparison: each rep times `iters` calls of ours, then of the baseline
 * (wall time between two device synchronizations), and stores the rate work / time. */
typedef int (*side_fn)(void *ctx);

typedef struct duel {
  side_fn ours, base;
  void *ctx;
  int iters, reps;
  double work; /* per call: flops or bytes */
  double ours_rate[CB_MAX_REPS], base_rate[CB_MAX_REPS];
} duel;

static int timed(side_fn f, void *ctx, int iters, double work, double *rate) {
  if (dt_cuda_synchronize(0)) return fail("synchronize");
  double t0 = bench_now_us();
  for (int i = 0; i < iters; i++)
    if (f(ctx)) return 1;
  if (dt_cuda_synchronize(0)) return fail("synchronize");
  double us = bench_now_us() - t0;
  *rate = work * iters / (us * 1e-6);
  return 0;
}

static int run_duel(duel *d) {
  /* one untimed call of each side: first-use costs (cuBLAS workspaces, the allocator) */
  if (d->ours(d->ctx) || d->base(d->ctx)) return 1;
  for (int r = 0; r < d->reps; r++) {
    if (timed(d->ours, d->ctx, d->iters, d->work, &d->ours_rate[r]) ||
        timed(d->base, d->ctx, d->iters, d->work, &d->base_rate[r]))
      return 1;
  }
  return 0;
}

/* ---- GEMM ---------------------------------------------------------------------------------- */

typedef struct gemm_ctx {
  dt_tensor *a, *b;
  void *ra, *rb, *rc; /* the baseline's buffers */
  cublasHandle_t handle;
  int64_t m, k, n;
  dt_dtype dtype;
  bool tf32;
} gemm_ctx;

static int gemm_ours(void *p) {
  gemm_ctx *g = p;
  dt_tensor *c = NULL;
  if (dt_mm(g->a, g->b, &c)) return fail("mm");
  dt_tensor_release(c);
  return 0;
}

/* Row-major c = a b is column-major c^T = b^T a^T: the same call dt_mm makes. */
static int gemm_base(void *p) {
  gemm_ctx *g = p;
  const float one = 1.0f, zero = 0.0f;
  cudaDataType_t t = g->dtype == DT_BF16 ? CUDA_R_16BF : CUDA_R_32F;
  cublasComputeType_t compute = g->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  cublasStatus_t s = cublasGemmEx(g->handle, CUBLAS_OP_N, CUBLAS_OP_N, (int)g->n, (int)g->m,
                                  (int)g->k, &one, g->rb, t, (int)g->n, g->ra, t, (int)g->k, &zero,
                                  g->rc, t, (int)g->n, compute, CUBLAS_GEMM_DEFAULT);
  if (s != CUBLAS_STATUS_SUCCESS) {
    fprintf(stderr, "bench cuda: cublasGemmEx: status %d\n", (int)s);
    return 1;
  }
  return 0;
}

static void *device_buffer(size_t bytes) {
  void *p = NULL;
  if (cudaMalloc(&p, bytes) != cudaSuccess) return NULL;
  cudaMemset(p, 0, bytes);
  return p;
}

static void report(bool json, const char *kind, const char *name, const duel *d, const char *unit,
                   double scale, const char *base_name) {
  double ours[CB_MAX_REPS], base[CB_MAX_REPS];
  memcpy(ours, d->ours_rate, sizeof(double) * (size_t)d->reps);
  memcpy(base, d->base_rate, sizeof(double) * (size_t)d->reps);
  bench_stats o = bench_stats_of(ours, d->reps), b = bench_stats_of(base, d->reps);
  if (json) {
    printf("{\"name\":\"cuda_%s\",\"case\":\"%s\",\"reps\":%d,\"iters\":%d,\"unit\":\"%s\","
           "\"ours\":%.3f,\"ours_min\":%.3f,\"ours_max\":%.3f,\"%s\":%.3f,\"ratio\":%.3f}\n",
           kind, name, d->reps, d->iters, unit, o.median / scale, o.min / scale, o.max / scale,
           base_name, b.median / scale, o.median / b.median);
  } else {
    printf("%-9s %-34s dt %8.2f %s (%.2f..%.2f); %s %8.2f; ratio %.3f\n", kind, name,
           o.median / scale, unit, o.min / scale, o.max / scale, base_name, b.median / scale,
           o.median / b.median);
  }
  fflush(stdout);
}

static int bench_gemm(bool json, int reps, int64_t m, int64_t k, int64_t n, dt_dtype dtype,
                      bool tf32, cublasHandle_t handle) {
  gemm_ctx g = {.m = m, .k = k, .n = n, .dtype = dtype, .tf32 = tf32, .handle = handle};
  dt_tensor *ha = NULL, *hb = NULL, *a32 = NULL, *b32 = NULL;
  int rc = 0;
  if (dt_randn(2, (int64_t[]){m, k}, DT_F32, 1, &a32) ||
      dt_randn(2, (int64_t[]){k, n}, DT_F32, 2, &b32) || dt_to(a32, dtype, &ha) ||
      dt_to(b32, dtype, &hb) || dt_to_device(ha, cuda0, &g.a) || dt_to_device(hb, cuda0, &g.b))
    rc = fail("gemm inputs");
  size_t es = dt_dtype_size(dtype);
  g.ra = device_buffer((size_t)(m * k) * es);
  g.rb = device_buffer((size_t)(k * n) * es);
  g.rc = device_buffer((size_t)(m * n) * es);
  if (!rc && (!g.ra || !g.rb || !g.rc))
    rc = cuda_fail("cudaMalloc", (int)cudaErrorMemoryAllocation);
  if (!rc && (dt_cuda_set_allow_tf32(tf32) ||
              cublasSetMathMode(handle, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH)))
    rc = fail("tf32 setting");
  double flops = 2.0 * (double)m * (double)k * (double)n;
  duel d = {.ours = gemm_ours, .base = gemm_base, .ctx = &g, .reps = reps, .work = flops};
  d.iters = flops > 1e11 ? 3 : 10;
  if (!rc) rc = run_duel(&d);
  if (!rc) {
    char name[96];
    snprintf(name, sizeof name, "%s%s %lldx%lldx%lld", dt_dtype_name(dtype), tf32 ? " tf32" : "",
             (long long)m, (long long)k, (long long)n);
    report(json, "gemm", name, &d, "TFLOP/s", 1e12, "cublas");
  }
  dt_cuda_set_allow_tf32(false);
  cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH);
  cudaFree(g.ra);
  cudaFree(g.rb);
  cudaFree(g.rc);
  dt_tensor_release(ha);
  dt_tensor_release(hb);
  dt_tensor_release(a32);
  dt_tensor_release(b32);
  dt_tensor_release(g.a);
  dt_tensor_release(g.b);
  return rc;
}

/* ---- Bandwidth: pointwise, rows, against a device copy -------------------------------------- */

typedef enum bw_op { BW_ADD, BW_SOFTMAX, BW_LAYER_NORM, BW_COUNT } bw_op;
static const char *const bw_names[BW_COUNT] = {"add 32M f32", "softmax [8192, 4096] f32",
                                               "layer_norm [8192, 4096] f32"};

typedef struct bw_ctx {
  bw_op op;
  dt_tensor *a, *b, *w, *bias;
  void *src, *dst; /* the copy's buffers: as many bytes as the op moves */
  size_t copy_bytes;
} bw_ctx;

static int bw_ours(void *p) {
  bw_ctx *c = p;
  dt_tensor *out = NULL;
  dt_status st;
  int64_t cols = 4096;
  switch (c->op) {
  case BW_ADD: st = dt_add(c->a, c->b, &out); break;
  case BW_SOFTMAX: st = dt_softmax(c->a, -1, &out); break;
  default: st = dt_layer_norm(c->a, 1, &cols, c->w, c->bias, 1e-5, &out); break;
  }
  dt_tensor_release(out);
  return st ? fail(bw_names[c->op]) : 0;
}

/* A copy of half the bytes the op moves: it reads them and writes them. */
static int bw_base(void *p) {
  bw_ctx *c = p;
  cudaError_t e = cudaMemcpyAsync(c->dst, c->src, c->copy_bytes, cudaMemcpyDeviceToDevice, 0);
  return e ? cuda_fail("cudaMemcpyAsync", (int)e) : 0;
}

static int bench_bandwidth(bool json, int reps, bw_op op) {
  bw_ctx c = {.op = op};
  int64_t shape[2] = {8192, 4096}, numel = 8192LL * 4096;
  int ndim = 2, words = 2; /* f32 words moved per element */
  if (op == BW_ADD) ndim = 1, numel = 32LL << 20, shape[0] = numel, words = 3;
  dt_tensor *h = NULL, *hb = NULL;
  int rc = 0;
  if (dt_randn(ndim, shape, DT_F32, 3, &h) || dt_randn(ndim, shape, DT_F32, 4, &hb) ||
      dt_to_device(h, cuda0, &c.a) || dt_to_device(hb, cuda0, &c.b))
    rc = fail("bandwidth inputs");
  if (!rc && op == BW_LAYER_NORM) {
    dt_tensor *hw = NULL;
    if (dt_randn(1, &shape[1], DT_F32, 5, &hw) || dt_to_device(hw, cuda0, &c.w) ||
        dt_to_device(hw, cuda0, &c.bias))
      rc = fail("layer_norm weight");
    dt_tensor_release(hw);
  }
  double bytes = (double)numel * 4.0 * words;
  c.copy_bytes = (size_t)(bytes / 2);
  c.src = device_buffer(c.copy_bytes);
  c.dst = device_buffer(c.copy_bytes);
  if (!rc && (!c.src || !c.dst)) rc = cuda_fail("cudaMalloc", (int)cudaErrorMemoryAllocation);
  duel d = {.ours = bw_ours, .base = bw_base, .ctx = &c, .reps = reps, .work = bytes, .iters = 10};
  if (!rc) rc = run_duel(&d);
  if (!rc) report(json, op == BW_ADD ? "pointwise" : "rows", bw_names[op], &d, "GB/s", 1e9, "copy");
  cudaFree(c.src);
  cudaFree(c.dst);
  dt_tensor_release(h);
  dt_tensor_release(hb);
  dt_tensor_release(c.a);
  dt_tensor_release(c.b);
  dt_tensor_release(c.w);
  dt_tensor_release(c.bias);
  return rc;
}

/* ---- Host <-> device copies ---------------------------------------------------------------- */

typedef struct copy_ctx {
  bool to_device;
  dt_tensor *host, *device;
  void *raw;      /* device buffer of the baseline */
  void *host_raw; /* the host tensor's bytes (pageable, as ours) */
  size_t bytes;
} copy_ctx;

static int copy_ours(void *p) {
  copy_ctx *c = p;
  dt_tensor *out = NULL;
  dt_status st = dt_to_device(c->to_device ? c->host : c->device,
                              c->to_device ? cuda0 : DT_DEVICE_CPU_VALUE, &out);
  dt_tensor_release(out);
  return st ? fail("to_device") : 0;
}

static int copy_base(void *p) {
  copy_ctx *c = p;
  cudaError_t e = c->to_device ? cudaMemcpy(c->raw, c->host_raw, c->bytes, cudaMemcpyHostToDevice)
                               : cudaMemcpy(c->host_raw, c->raw, c->bytes, cudaMemcpyDeviceToHost);
  return e ? cuda_fail("cudaMemcpy", (int)e) : 0;
}

static int bench_copy(bool json, int reps, bool to_device) {
  int64_t numel = 64LL << 20; /* 256 MiB of f32 */
  copy_ctx c = {.to_device = to_device, .bytes = (size_t)numel * 4};
  int rc = 0;
  if (dt_randn(1, &numel, DT_F32, 6, &c.host) || dt_to_device(c.host, cuda0, &c.device))
    rc = fail("copy inputs");
  c.raw = device_buffer(c.bytes);
  c.host_raw = rc ? NULL : dt_tensor_data(c.host);
  if (!rc && !c.raw) rc = cuda_fail("cudaMalloc", (int)cudaErrorMemoryAllocation);
  duel d = {.ours = copy_ours, .base = copy_base, .ctx = &c, .reps = reps, .iters = 2};
  d.work = (double)c.bytes;
  if (!rc) rc = run_duel(&d);
  if (!rc)
    report(json, "copy", to_device ? "host to device 256 MiB" : "device to host 256 MiB", &d,
           "GB/s", 1e9, "cudaMemcpy");
  cudaFree(c.raw);
  dt_tensor_release(c.host);
  dt_tensor_release(c.device);
  return rc;
}

int bench_suite_cuda(int argc, char **argv) {
  bool json = false;
  int reps = 7;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0) {
      json = true;
    } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      reps = atoi(argv[++i]);
    } else {
      return 2;
    }
  }
  if (reps < 1 || reps > CB_MAX_REPS) return 2;
  if (!dt_cuda_is_available()) {
    dt_tensor *t = NULL;
    dt_empty_ex(1, (int64_t[]){1}, DT_F32, &(dt_tensor_options){.device = cuda0}, &t);
    char why[256];
    snprintf(why, sizeof why, "%s", dt_last_error()); /* says why (no driver, no device) */
    clean(why);
    return no_device(json, why);
  }
  bench_machine_print(json);
  print_gpu(json);
  cublasHandle_t handle;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
    fprintf(stderr, "bench cuda: cublasCreate failed\n");
    return 1;
  }
  int rc = 0;
  static const int64_t shapes[][3] = {{4096, 4096, 4096}, {8192, 4096, 1024}, {64, 4096, 16384}};
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes && !rc; s++) {
    rc = bench_gemm(json, reps, shapes[s][0], shapes[s][1], shapes[s][2], DT_F32, false, handle);
    if (!rc)
      rc = bench_gemm(json, reps, shapes[s][0], shapes[s][1], shapes[s][2], DT_F32, true, handle);
    if (!rc)
      rc = bench_gemm(json, reps, shapes[s][0], shapes[s][1], shapes[s][2], DT_BF16, false, handle);
  }
  cublasDestroy(handle);
  for (int op = 0; op < BW_COUNT && !rc; op++) rc = bench_bandwidth(json, reps, (bw_op)op);
  if (!rc) rc = bench_copy(json, reps, true);
  if (!rc) rc = bench_copy(json, reps, false);
  return rc;
}

#endif
