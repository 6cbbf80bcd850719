/*
 * dtensor bench models --attention-memory [--seq N] [--heads N] [--head-dim N] [--batch N]
 *                                         [--reps N] [--json]
 *
 * Attention memory: the bytes allocated through the library at the peak of a causal attention
 * forward + backward, above what was live before it (q, k, v [B, H, T, E] float32 and the
 * output gradient), for the fused op (dt_scaled_dot_product_attention: a flash-style tiled
 * loop, O(T) memory) against the composition PyTorch's reference writes: matmul(q, k^T),
 * * scale, masked_fill of the causal mask (a [T, T] bool triu), softmax, matmul with v. A
 * counting allocator (dt_set_allocator, installed before any library object exists) keeps the
 * live and the peak bytes; the peak counts every tensor, saved activation, gradient and kernel
 * scratch buffer the library allocates (the BLAS's own buffers are not the library's). Also
 * the wall and process CPU seconds of each (median of --reps, alternating) and the largest
 * difference between the two paths' outputs and gradients. Defaults: GPT-2 small's one layer
 * at seq 2048 (B 1, H 12, E 64).
 */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_machine.h"
#include "bench_models.h"
#include "bench_util.h"
#include "kernels/cpu/blas.h"
#include "tools.h"

#define MAX_REPS 16

static atomic_llong live_bytes, peak_bytes;

/* A header of `head` bytes before each block holds its size. */
static void *count_alloc(size_t size, size_t alignment, void *user) {
  (void)user;
  size_t head = alignment < 64 ? 64 : alignment;
  char *base = aligned_alloc(head, (head + size + head - 1) / head * head);
  if (!base) return NULL;
  ((size_t *)(base + head))[-1] = size;
  ((size_t *)(base + head))[-2] = head;
  long long now = atomic_fetch_add(&live_bytes, (long long)size) + (long long)size;
  long long peak = atomic_load(&peak_bytes);
  while (now > peak && !atomic_compare_exchange_weak(&peak_bytes, &peak, now)) {
  }
  return base + head;
}

static void count_free(void *ptr, void *user) {
  (void)user;
  if (!ptr) return;
  size_t size = ((size_t *)ptr)[-1], head = ((size_t *)ptr)[-2];
  atomic_fetch_sub(&live_bytes, (long long)size);
  free((char *)ptr - head);
}

typedef struct attn_case {
  int64_t B, H, T, E;
} attn_case;

typedef struct attn_result {
  long long peak_extra;        /* bytes above the live bytes before the forward */
  double seconds, cpu_seconds; /* wall; process CPU time (every thread) */
  double *out, *dq, *dk, *dv;  /* malloc'd values, for the comparison */
} attn_result;

static void result_free(attn_result *r) { free(r->out), free(r->dq), free(r->dk), free(r->dv); }

/* The values of t (a tensor or its gradient) into a new malloc'd array. */
static dt_status values(dt_tensor *t, bool grad, double **out) {
  dt_tensor *g = NULL;
  dt_status st = grad ? dt_tensor_grad(t, &g) : DT_OK;
  dt_tensor *src = grad ? g : t;
  int64_t n = st ? 0 : dt_tensor_numel(src);
  *out = st ? NULL : malloc(sizeof(double) * (size_t)n);
  if (!st && !*out) st = DT_ERR_NOMEM;
  if (!st) st = dt_tensor_to_doubles(src, *out, n);
  dt_tensor_release(g);
  return st;
}

/* The composition: softmax(mask(q k^T * scale)) v. */
static dt_status unfused(const attn_case *c, dt_tensor *q, dt_tensor *k, dt_tensor *v,
                         dt_tensor **out) {
  dt_tensor *kt = NULL, *s = NULL, *ss = NULL, *ones = NULL, *upper = NULL, *sm = NULL, *p = NULL;
  dt_status st = dt_transpose(k, 2, 3, &kt);
  if (!st) st = dt_matmul(q, kt, &s);
  if (!st) st = dt_mul_scalar(s, 1.0 / sqrt((double)c->E), &ss);
  if (!st) st = dt_ones(2, (int64_t[]){c->T, c->T}, DT_BOOL, &ones);
  if (!st) st = dt_triu(ones, 1, &upper);
  if (!st) st = dt_masked_fill(ss, upper, -INFINITY, &sm);
  if (!st) st = dt_softmax(sm, -1, &p);
  if (!st) st = dt_matmul(p, v, out);
  dt_tensor_release(kt), dt_tensor_release(s), dt_tensor_release(ss), dt_tensor_release(ones);
  dt_tensor_release(upper), dt_tensor_release(sm), dt_tensor_release(p);
  return st;
}

/* One forward + backward; keep: the values for the comparison. */
static dt_status run_once(const attn_case *c, bool fused, bool keep, attn_result *r) {
  int64_t shape[4] = {c->B, c->H, c->T, c->E};
  dt_tensor *q = NULL, *k = NULL, *v = NULL, *g = NULL, *o = NULL;
  dt_status st = dt_randn(4, shape, DT_F32, 1, &q);
  if (!st) st = dt_randn(4, shape, DT_F32, 2, &k);
  if (!st) st = dt_randn(4, shape, DT_F32, 3, &v);
  if (!st) st = dt_randn(4, shape, DT_F32, 4, &g);
  for (int i = 0; i < 3 && !st; i++)
    st = dt_tensor_set_requires_grad((dt_tensor *[]){q, k, v}[i], true);
  long long base = atomic_load(&live_bytes);
  atomic_store(&peak_bytes, base);
  double t0 = bench_now_us(), c0 = bench_process_cpu_us();
  dt_attention_options o_causal = {.is_causal = true};
  if (!st)
    st = fused ? dt_scaled_dot_product_attention(q, k, v, NULL, &o_causal, &o, NULL)
               : unfused(c, q, k, v, &o);
  if (!st) st = dt_backward(o, g);
  double t1 = bench_now_us(), c1 = bench_process_cpu_us();
  r->peak_extra = atomic_load(&peak_bytes) - base;
  r->seconds = (t1 - t0) * 1e-6;
  r->cpu_seconds = (c1 - c0) * 1e-6;
  if (!st && keep) st = values(o, false, &r->out);
  if (!st && keep) st = values(q, true, &r->dq);
  if (!st && keep) st = values(k, true, &r->dk);
  if (!st && keep) st = values(v, true, &r->dv);
  dt_tensor_release(q), dt_tensor_release(k), dt_tensor_release(v), dt_tensor_release(g);
  dt_tensor_release(o);
  return st;
}

static double max_diff(const double *a, const double *b, int64_t n) {
  double d = 0;
  for (int64_t i = 0; i < n; i++) d = fmax(d, fabs(a[i] - b[i]));
  return d;
}

static int usage(void) {
  fprintf(stderr, "bench models --attention-memory: bad option (see 'dtensor bench models "
                  "--help')\n");
  return 2;
}

int bench_models_attention(int argc, char **argv) {
  dt_set_allocator(&(dt_allocator){.alloc = count_alloc, .free = count_free});
  bool json = tool_has_flag(argc, argv, "--json");
  attn_case c = {1, 12, 2048, 64};
  int reps = 3;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json") || !strcmp(argv[i], "--attention-memory")) continue;
    if (i + 1 >= argc) return usage();
    long long v = atoll(argv[++i]);
    if (!strcmp(argv[i - 1], "--seq")) {
      c.T = v;
    } else if (!strcmp(argv[i - 1], "--heads")) {
      c.H = v;
    } else if (!strcmp(argv[i - 1], "--head-dim")) {
      c.E = v;
    } else if (!strcmp(argv[i - 1], "--batch")) {
      c.B = v;
    } else if (!strcmp(argv[i - 1], "--reps")) {
      reps = (int)v;
    } else {
      return usage();
    }
  }
  if (c.B < 1 || c.H < 1 || c.T < 1 || c.E < 1 || reps < 1 || reps > MAX_REPS) return usage();
  bench_machine_print(json);
  dt_set_num_threads(1); /* one thread: the BLAS's and the kernels' */
  attn_result fz = {0}, uf = {0};
  double secs[2][MAX_REPS], cpu[2][MAX_REPS];
  dt_status st = DT_OK;
  for (int r = 0; r < reps && !st; r++) {
    attn_result a = {0}, b = {0};
    st = run_once(&c, true, r == 0, r == 0 ? &fz : &a);
    if (!st) st = run_once(&c, false, r == 0, r == 0 ? &uf : &b);
    secs[0][r] = r == 0 ? fz.seconds : a.seconds;
    secs[1][r] = r == 0 ? uf.seconds : b.seconds;
    cpu[0][r] = r == 0 ? fz.cpu_seconds : a.cpu_seconds;
    cpu[1][r] = r == 0 ? uf.cpu_seconds : b.cpu_seconds;
  }
  if (st) {
    fprintf(stderr, "bench models --attention-memory: %s\n", dt_last_error());
    result_free(&fz), result_free(&uf);
    return 1;
  }
  int64_t n = c.B * c.H * c.T * c.E;
  double d = fmax(fmax(max_diff(fz.out, uf.out, n), max_diff(fz.dq, uf.dq, n)),
                  fmax(max_diff(fz.dk, uf.dk, n), max_diff(fz.dv, uf.dv, n)));
  double sf = bench_median(secs[0], reps), su = bench_median(secs[1], reps);
  double cf = bench_median(cpu[0], reps), cu = bench_median(cpu[1], reps);
  double mib = 1024.0 * 1024.0, in_bytes = 4.0 * (double)n;
  double scores = 4.0 * (double)(c.B * c.H) * (double)c.T * (double)c.T;
  if (json) {
    printf("{\"name\":\"models_attention_memory\",\"batch\":%lld,\"heads\":%lld,\"seq\":%lld,"
           "\"head_dim\":%lld,\"input_bytes\":%.0f,\"scores_bytes\":%.0f,"
           "\"fused_peak_bytes\":%lld,\"unfused_peak_bytes\":%lld,\"ratio\":%.2f,"
           "\"fused_s\":%.3f,\"unfused_s\":%.3f,\"fused_cpu_s\":%.3f,\"unfused_cpu_s\":%.3f,\"max_"
           "abs_diff\":%.3g,\"reps\":%d}\n",
           (long long)c.B, (long long)c.H, (long long)c.T, (long long)c.E, in_bytes, scores,
           fz.peak_extra, uf.peak_extra, (double)uf.peak_extra / (double)fz.peak_extra, sf, su, cf,
           cu, d, reps);
  } else {
    printf("attention forward+backward, causal, B %lld H %lld T %lld E %lld float32 (one of q, "
           "k, v: %.2f MiB; one [B, H, T, T] scores tensor: %.1f MiB):\n",
           (long long)c.B, (long long)c.H, (long long)c.T, (long long)c.E, in_bytes / mib,
           scores / mib);
    printf("  fused scaled_dot_product_attention: peak %.2f MiB above the inputs, %.2f s (CPU "
           "%.2f s)\n",
           (double)fz.peak_extra / mib, sf, cf);
    printf("  matmul + softmax composition:       peak %.2f MiB above the inputs, %.2f s (CPU "
           "%.2f s)\n",
           (double)uf.peak_extra / mib, su, cu);
    printf("  %.1fx less memory fused; outputs and gradients differ by at most %.3g\n",
           (double)uf.peak_extra / (double)fz.peak_extra, d);
  }
  result_free(&fz), result_free(&uf);
  return 0;
}
