/*
 * dtensor bench models --attention-memory [--seq N] [--heads N] [--head-dim N] [--batch N]
 *                                         [--reps N] [--threads N] [--json]
 *
 * Fused attention against the composition, causal, q, k, v [B, H, T, E] float32: the fused op
 * (dt_scaled_dot_product_attention: a flash-style blocked loop, O(T) memory) against what
 * PyTorch's reference writes: matmul(q, k^T), * scale, masked_fill of the causal mask (a [T, T]
 * bool triu), softmax, matmul with v.
 *  - Memory: the bytes allocated through the library at the peak of a forward + backward,
 *    above what was live before it (a counting allocator, dt_set_allocator, installed before
 *    any library object exists: every tensor, saved activation, gradient and kernel scratch
 *    buffer; the BLAS's own buffers are not the library's).
 *  - Time: the forward alone and the forward + backward of each path, wall and process CPU
 *    seconds, the four runs alternating within each of --reps rounds, medians.
 *  - The largest difference between the two paths' outputs and gradients.
 * Defaults: GPT-2 small's one layer at seq 2048 (B 1, H 12, E 64), 1 thread (--threads: the
 * intra-op pool's and the BLAS's). The GPT-2-like step's attention: --batch 8 --heads 8
 * --seq 256. bench/peers/attention.py is the PyTorch twin (F.scaled_dot_product_attention).
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

/* One forward (+ backward); keep: the values for the comparison. */
static dt_status run_once(const attn_case *c, bool fused, bool backward, bool keep,
                          attn_result *r) {
  int64_t shape[4] = {c->B, c->H, c->T, c->E};
  dt_tensor *q = NULL, *k = NULL, *v = NULL, *g = NULL, *o = NULL;
  dt_status st = dt_randn(4, shape, DT_F32, 1, &q);
  if (!st) st = dt_randn(4, shape, DT_F32, 2, &k);
  if (!st) st = dt_randn(4, shape, DT_F32, 3, &v);
  if (!st) st = dt_randn(4, shape, DT_F32, 4, &g);
  for (int i = 0; i < 3 && !st && backward; i++)
    st = dt_tensor_set_requires_grad((dt_tensor *[]){q, k, v}[i], true);
  long long base = atomic_load(&live_bytes);
  atomic_store(&peak_bytes, base);
  double t0 = bench_now_us(), c0 = bench_process_cpu_us();
  dt_attention_options o_causal = {.is_causal = true};
  if (!st)
    st = fused ? dt_scaled_dot_product_attention(q, k, v, NULL, &o_causal, &o, NULL)
               : unfused(c, q, k, v, &o);
  if (!st && backward) st = dt_backward(o, g);
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

/* The medians of --reps rounds: [path: fused, composition][pass: forward, forward + backward]. */
typedef struct attn_times {
  double wall[2][2], cpu[2][2];
} attn_times;

/* reps alternating rounds of the four runs (fused and composition, forward and forward +
 * backward); the first round's forward + backward runs keep their values in fz and uf. */
static dt_status time_rounds(const attn_case *c, int reps, attn_result *fz, attn_result *uf,
                             attn_times *t) {
  double wall[2][2][MAX_REPS], cpu[2][2][MAX_REPS];
  for (int r = 0; r < reps; r++)
    for (int pass = 0; pass < 2; pass++)
      for (int path = 0; path < 2; path++) {
        bool keep = r == 0 && pass == 1;
        attn_result tmp = {0}, *res = keep ? (path == 0 ? fz : uf) : &tmp;
        dt_status st = run_once(c, path == 0, pass == 1, keep, res);
        if (st) return st;
        wall[path][pass][r] = res->seconds, cpu[path][pass][r] = res->cpu_seconds;
      }
  for (int path = 0; path < 2; path++)
    for (int pass = 0; pass < 2; pass++) {
      t->wall[path][pass] = bench_median(wall[path][pass], reps);
      t->cpu[path][pass] = bench_median(cpu[path][pass], reps);
    }
  return DT_OK;
}

static void print_results(const attn_case *c, int reps, int threads, bool json,
                          const attn_result *fz, const attn_result *uf, const attn_times *t,
                          double diff) {
  int64_t n = c->B * c->H * c->T * c->E;
  double mib = 1024.0 * 1024.0, in_bytes = 4.0 * (double)n;
  double scores = 4.0 * (double)(c->B * c->H) * (double)c->T * (double)c->T;
  if (json) {
    printf("{\"name\":\"models_attention_memory\",\"batch\":%lld,\"heads\":%lld,\"seq\":%lld,"
           "\"head_dim\":%lld,\"threads\":%d,\"input_bytes\":%.0f,\"scores_bytes\":%.0f,"
           "\"fused_peak_bytes\":%lld,\"unfused_peak_bytes\":%lld,\"ratio\":%.2f,"
           "\"fused_fwd_s\":%.4f,\"unfused_fwd_s\":%.4f,\"fused_fwd_cpu_s\":%.4f,"
           "\"unfused_fwd_cpu_s\":%.4f,\"fused_s\":%.4f,\"unfused_s\":%.4f,\"fused_cpu_s\":%.4f,"
           "\"unfused_cpu_s\":%.4f,\"max_abs_diff\":%.3g,\"reps\":%d}\n",
           (long long)c->B, (long long)c->H, (long long)c->T, (long long)c->E, threads, in_bytes,
           scores, fz->peak_extra, uf->peak_extra, (double)uf->peak_extra / (double)fz->peak_extra,
           t->wall[0][0], t->wall[1][0], t->cpu[0][0], t->cpu[1][0], t->wall[0][1], t->wall[1][1],
           t->cpu[0][1], t->cpu[1][1], diff, reps);
    return;
  }
  printf("attention, causal, B %lld H %lld T %lld E %lld float32, %d thread(s) (one of q, k, v: "
         "%.2f MiB; one [B, H, T, T] scores tensor: %.1f MiB), medians of %d alternating rounds:\n",
         (long long)c->B, (long long)c->H, (long long)c->T, (long long)c->E, threads,
         in_bytes / mib, scores / mib, reps);
  const char *names[2] = {"fused scaled_dot_product_attention", "matmul + softmax composition"};
  for (int path = 0; path < 2; path++)
    printf("  %-35s peak %8.2f MiB above the inputs; forward %.4f s (CPU %.4f s), forward+"
           "backward %.4f s (CPU %.4f s)\n",
           names[path], (double)(path ? uf : fz)->peak_extra / mib, t->wall[path][0],
           t->cpu[path][0], t->wall[path][1], t->cpu[path][1]);
  printf("  %.1fx less memory fused; CPU time composition / fused: forward %.2fx, forward+"
         "backward %.2fx; outputs and gradients differ by at most %.3g\n",
         (double)uf->peak_extra / (double)fz->peak_extra, t->cpu[1][0] / t->cpu[0][0],
         t->cpu[1][1] / t->cpu[0][1], diff);
}

int bench_models_attention(int argc, char **argv) {
  dt_set_allocator(&(dt_allocator){.alloc = count_alloc, .free = count_free});
  bool json = tool_has_flag(argc, argv, "--json");
  attn_case c = {1, 12, 2048, 64};
  int reps = 3, threads = 1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json") || !strcmp(argv[i], "--attention-memory")) continue;
    if (i + 1 >= argc) return usage();
    long long v = 0;
    bool reps_or_threads = !strcmp(argv[i], "--reps") || !strcmp(argv[i], "--threads");
    if (!bench_int_option(argv[i], argv[i + 1], 1, reps_or_threads ? 1024 : 1 << 20, &v))
      return usage();
    i++;
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
    } else if (!strcmp(argv[i - 1], "--threads")) {
      threads = (int)v;
    } else {
      return usage();
    }
  }
  if (c.B < 1 || c.H < 1 || c.T < 1 || c.E < 1 || reps < 1 || reps > MAX_REPS || threads < 1 ||
      threads > 1024)
    return usage();
  /* The composition stores the [B, H, T, T] scores (float32) several times over: refuse what
   * cannot fit rather than let the allocator or the OOM killer decide. */
  double scores = (double)c.B * (double)c.H * (double)c.T * (double)c.T;
  if (scores > (double)(1LL << 30)) {
    fprintf(stderr,
            "bench models --attention-memory: [%lld, %lld, %lld, %lld] scores (%.3g elements) "
            "are over 2^30 for the composition\n",
            (long long)c.B, (long long)c.H, (long long)c.T, (long long)c.T, scores);
    return 2;
  }
  bench_machine_print(json);
  dt_set_num_threads(threads); /* the BLAS's and the kernels' */
  attn_result fz = {0}, uf = {0};
  attn_times t;
  dt_status st = time_rounds(&c, reps, &fz, &uf, &t);
  if (st) {
    fprintf(stderr, "bench models --attention-memory: %s\n", dt_last_error());
    result_free(&fz), result_free(&uf);
    return 1;
  }
  int64_t n = c.B * c.H * c.T * c.E;
  double d = fmax(fmax(max_diff(fz.out, uf.out, n), max_diff(fz.dq, uf.dq, n)),
                  fmax(max_diff(fz.dk, uf.dk, n), max_diff(fz.dv, uf.dv, n)));
  print_results(&c, reps, threads, json, &fz, &uf, &t, d);
  result_free(&fz), result_free(&uf);
  return 0;
}
