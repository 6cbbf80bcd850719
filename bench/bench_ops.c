/*
 * dtensor bench ops: every non-GEMM op of the GPT-2-like training step (bench_gpt.h) at the
 * step's shapes, forward and forward+backward, against a memcpy of the bytes the op must move
 * at least, timed in the same run; then each GEMM call of the step against cblas_sgemm alone
 * on the same shapes (issue 26).
 *
 * The bytes: a memcpy of the op's main operand for the forward (an elementwise op or a
 * row-wise normalization reads it once and writes its result once: one memcpy); for
 * forward+backward, the forward's plus the backward's reads of the incoming gradient and the
 * saved tensor (three memcpy's worth; two for the ops whose backward needs only the
 * gradient: add of a bias, masked_fill, embedding; two for cross_entropy, which takes no
 * incoming gradient of the logits' size). AdamW reads the parameters, gradients and two state
 * buffers: four. ratio = ours / memcpy, so 1 means "as fast as moving the bytes".
 *
 * The sides alternate (ours, memcpy, ours, memcpy, ...), wall time (our kernels may use
 * several threads), median and min of --iters samples each.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_gpt.h"
#include "bench_machine.h"
#include "bench_util.h"
#include "kernels/cpu/blas.h"
#include "tools.h"

#include <cblas.h>

#define MAX_ITERS 64

/* The step's activations at its shapes. */
typedef struct op_env {
  gpt_sizes s;
  dt_tensor *x;                   /* [B, T, D] */
  dt_tensor *w, *b;               /* [D]: layer_norm's affine, the bias of add */
  dt_tensor *col;                 /* [B, T, 1] */
  dt_tensor *u;                   /* [B T, 4 D]: the MLP's hidden layer */
  dt_tensor *scores;              /* [B, H, T, T] */
  dt_tensor *mask;                /* [T, T] bool, causal */
  dt_tensor *logits;              /* [B T, V] */
  dt_tensor *target;              /* [B T] int64 */
  dt_tensor *table;               /* [V, D]: the token embedding */
  dt_tensor *idx;                 /* [B, T] int64 */
  dt_tensor *rope_cos, *rope_sin; /* [T, D / H]: a rotary embedding's tables */
  dt_tensor *x2;                  /* [B, T, D]: the residual stream's other term */
  dt_tensor *pos;                 /* [T, D]: the position embedding */
  dt_tensor *heads;               /* [B, H, T, D / H]: the attention's output by heads */
} op_env;

typedef struct op_case {
  const char *name;
  dt_status (*run)(op_env *e, dt_tensor **out);
  int leaves; /* which of x, w, b, ... take gradients: bits of LEAF_* */
  int bwd_copies;
} op_case;

enum {
  LEAF_X = 1,
  LEAF_W = 2,
  LEAF_B = 4,
  LEAF_COL = 8,
  LEAF_U = 16,
  LEAF_SCORES = 32,
  LEAF_LOGITS = 64,
  LEAF_TABLE = 128,
  LEAF_X2 = 256,
  LEAF_POS = 512,
  LEAF_HEADS = 1024,
  LEAF_LAST = LEAF_HEADS
};

static dt_tensor **leaf_slot(op_env *e, int bit) {
  switch (bit) {
  case LEAF_X: return &e->x;
  case LEAF_W: return &e->w;
  case LEAF_B: return &e->b;
  case LEAF_COL: return &e->col;
  case LEAF_U: return &e->u;
  case LEAF_SCORES: return &e->scores;
  case LEAF_LOGITS: return &e->logits;
  case LEAF_X2: return &e->x2;
  case LEAF_POS: return &e->pos;
  case LEAF_HEADS: return &e->heads;
  default: return &e->table;
  }
}

static dt_status run_layer_norm(op_env *e, dt_tensor **out) {
  return dt_layer_norm(e->x, 1, &e->s.dmodel, e->w, e->b, 1e-5, out);
}
static dt_status run_gelu(op_env *e, dt_tensor **out) { return dt_gelu(e->u, out); }
static dt_status run_softmax(op_env *e, dt_tensor **out) { return dt_softmax(e->scores, -1, out); }
static dt_status run_log_softmax(op_env *e, dt_tensor **out) {
  return dt_log_softmax(e->logits, -1, out);
}
static dt_status run_cross_entropy(op_env *e, dt_tensor **out) {
  return dt_cross_entropy(e->logits, e->target, out);
}
static dt_status run_mul_col(op_env *e, dt_tensor **out) { return dt_mul(e->x, e->col, out); }
static dt_status run_add_bias(op_env *e, dt_tensor **out) { return dt_add(e->x, e->b, out); }
static dt_status run_mul_row(op_env *e, dt_tensor **out) { return dt_mul(e->x, e->w, out); }
static dt_status run_masked_fill(op_env *e, dt_tensor **out) {
  return dt_masked_fill(e->scores, e->mask, -INFINITY, out);
}
static dt_status run_add_residual(op_env *e, dt_tensor **out) { return dt_add(e->x, e->x2, out); }
static dt_status run_add_pos(op_env *e, dt_tensor **out) { return dt_add(e->x, e->pos, out); }
static dt_status run_mul_scalar(op_env *e, dt_tensor **out) {
  return dt_mul_scalar(e->scores, 0.125, out);
}
static dt_status run_rms_norm(op_env *e, dt_tensor **out) {
  return dt_rms_norm(e->x, 1, &e->s.dmodel, e->w, 1e-5, out);
}
/* The attention's output back to [B, T, D]: a transposed view reshaped (a copy). */
static dt_status run_merge_heads(op_env *e, dt_tensor **out) {
  dt_tensor *t = NULL;
  dt_status st = dt_transpose(e->heads, 1, 2, &t);
  if (!st) st = dt_reshape(t, 3, (int64_t[]){e->s.batch, e->s.seq, e->s.dmodel}, out);
  dt_tensor_release(t);
  return st;
}
static dt_status run_embedding(op_env *e, dt_tensor **out) {
  return dt_embedding(e->table, e->idx, out);
}

/* Llama's rotary embedding as the model code composes it (src/models/forward.c): x viewed as
 * heads [B, H, T, D / H], x * cos + cat(-x2, x1) * sin. A fused kernel would read x and write
 * the output once: the memcpy of x's bytes is that bound. */
static dt_status run_rotary(op_env *e, dt_tensor **out) {
  const gpt_sizes *s = &e->s;
  int64_t hd = s->dmodel / s->heads, half = hd / 2;
  dt_tensor *v = NULL, *q = NULL, *x1 = NULL, *x2 = NULL, *nx2 = NULL, *rot = NULL, *a = NULL,
            *b = NULL;
  dt_status st = dt_view(e->x, 4, (int64_t[]){s->batch, s->seq, s->heads, hd}, &v);
  if (!st) st = dt_transpose(v, 1, 2, &q);
  if (!st) st = dt_narrow(q, 3, 0, half, &x1);
  if (!st) st = dt_narrow(q, 3, half, half, &x2);
  if (!st) st = dt_neg(x2, &nx2);
  if (!st) st = dt_cat(2, (dt_tensor *[]){nx2, x1}, 3, &rot);
  if (!st) st = dt_mul(q, e->rope_cos, &a);
  if (!st) st = dt_mul(rot, e->rope_sin, &b);
  if (!st) st = dt_add(a, b, out);
  dt_tensor *all[] = {v, q, x1, x2, nx2, rot, a, b};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) dt_tensor_release(all[i]);
  return st;
}

static const op_case cases[] = {
    {"layer_norm", run_layer_norm, LEAF_X | LEAF_W | LEAF_B, 3},
    {"gelu", run_gelu, LEAF_U, 3},
    {"softmax", run_softmax, LEAF_SCORES, 3},
    {"log_softmax", run_log_softmax, LEAF_LOGITS, 3},
    {"cross_entropy", run_cross_entropy, LEAF_LOGITS, 2},
    {"mul_btd_bt1", run_mul_col, LEAF_X | LEAF_COL, 3},
    {"add_btd_d", run_add_bias, LEAF_X | LEAF_B, 2},
    {"mul_btd_d", run_mul_row, LEAF_X | LEAF_W, 3},
    {"masked_fill", run_masked_fill, LEAF_SCORES, 2},
    {"embedding", run_embedding, LEAF_TABLE, 2},
    {"rotary", run_rotary, LEAF_X, 2},
    {"add_btd_btd", run_add_residual, LEAF_X | LEAF_X2, 2},
    {"add_btd_td", run_add_pos, LEAF_X | LEAF_POS, 2},
    {"mul_scalar", run_mul_scalar, LEAF_SCORES, 2},
    {"merge_heads", run_merge_heads, LEAF_HEADS, 2},
    {"rms_norm", run_rms_norm, LEAF_X | LEAF_W, 3},
};

static dt_status randn(int ndim, const int64_t *shape, uint64_t seed, dt_tensor **out) {
  return dt_randn(ndim, shape, DT_F32, seed, out);
}

static dt_status env_create(const gpt_sizes *s, op_env *e) {
  memset(e, 0, sizeof *e);
  e->s = *s;
  int64_t n = s->batch * s->seq, d = s->dmodel;
  dt_status st = randn(3, (int64_t[]){s->batch, s->seq, d}, 1, &e->x);
  if (!st) st = randn(1, &d, 2, &e->w);
  if (!st) st = randn(1, &d, 3, &e->b);
  if (!st) st = randn(3, (int64_t[]){s->batch, s->seq, 1}, 4, &e->col);
  if (!st) st = randn(2, (int64_t[]){n, 4 * d}, 5, &e->u);
  if (!st) st = randn(4, (int64_t[]){s->batch, s->heads, s->seq, s->seq}, 6, &e->scores);
  if (!st) st = randn(2, (int64_t[]){n, s->vocab}, 7, &e->logits);
  if (!st) st = dt_randint(0, s->vocab, 1, &n, DT_I64, 8, &e->target);
  if (!st) st = randn(2, (int64_t[]){s->vocab, d}, 9, &e->table);
  if (!st) st = dt_randint(0, s->vocab, 2, (int64_t[]){s->batch, s->seq}, DT_I64, 10, &e->idx);
  if (!st) st = randn(2, (int64_t[]){s->seq, d / s->heads}, 11, &e->rope_cos);
  if (!st) st = randn(2, (int64_t[]){s->seq, d / s->heads}, 12, &e->rope_sin);
  if (!st) st = randn(3, (int64_t[]){s->batch, s->seq, d}, 13, &e->x2);
  if (!st) st = randn(2, (int64_t[]){s->seq, d}, 14, &e->pos);
  if (!st) st = randn(4, (int64_t[]){s->batch, s->heads, s->seq, d / s->heads}, 15, &e->heads);
  bool *causal = st ? NULL : malloc((size_t)(s->seq * s->seq));
  if (!st && !causal) st = DT_ERR_NOMEM;
  for (int64_t i = 0; i < s->seq && causal; i++)
    for (int64_t j = 0; j < s->seq; j++) causal[i * s->seq + j] = j > i;
  if (!st) st = dt_from_data(causal, 2, (int64_t[]){s->seq, s->seq}, DT_BOOL, &e->mask);
  free(causal);
  return st;
}

static void env_destroy(op_env *e) {
  dt_tensor *all[] = {e->x,        e->w,      e->b,     e->col,  e->u,    e->scores,
                      e->logits,   e->target, e->table, e->idx,  e->mask, e->rope_cos,
                      e->rope_sin, e->x2,     e->pos,   e->heads};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) dt_tensor_release(all[i]);
}

/* The case's main operand (0 for embedding, whose output stands for it). */
static int main_leaf(const op_case *c) {
  return c->leaves & LEAF_TABLE    ? 0
         : c->leaves & LEAF_X      ? LEAF_X
         : c->leaves & LEAF_U      ? LEAF_U
         : c->leaves & LEAF_SCORES ? LEAF_SCORES
         : c->leaves & LEAF_HEADS  ? LEAF_HEADS
                                   : LEAF_LOGITS;
}

/* The operand a memcpy stands for: the op's main tensor (the output for embedding). */
static int64_t main_bytes(const op_case *c, op_env *e) {
  const gpt_sizes *s = &e->s;
  if (c->leaves & LEAF_TABLE) return 4 * s->batch * s->seq * s->dmodel;
  return 4 * dt_tensor_numel(*leaf_slot(e, main_leaf(c)));
}

/* One sample of the case: the forward, or forward + backward (with a random incoming
 * gradient of the output's shape, or none for a scalar loss) and the gradients dropped. */
static dt_status run_once(const op_case *c, op_env *e, dt_tensor *grad, bool backward) {
  dt_tensor *out = NULL;
  dt_status st = c->run(e, &out);
  if (!st && backward) st = dt_backward(out, grad);
  dt_tensor_release(out);
  for (int bit = 1; bit <= LEAF_LAST && backward; bit <<= 1)
    if (c->leaves & bit) dt_tensor_zero_grad(*leaf_slot(e, bit), true);
  return st;
}

typedef struct copy_bufs {
  char *src, *dst;
  int64_t bytes;
} copy_bufs;

static void timed_memcpy(copy_bufs *cb, int64_t bytes) {
  memcpy(cb->dst, cb->src, (size_t)bytes);
  __asm__ volatile("" : : "r"(cb->dst) : "memory");
}

static void print_row(bool json, const char *op, const char *pass, const char *shape,
                      bench_stats ours, bench_stats copy, int64_t bytes, int iters) {
  if (json) {
    printf("{\"name\":\"op\",\"op\":\"%s\",\"pass\":\"%s\",\"shape\":\"%s\",\"ours_ms\":%.3f,"
           "\"ours_min_ms\":%.3f,\"memcpy_ms\":%.3f,\"memcpy_min_ms\":%.3f,\"memcpy_bytes\":%lld,"
           "\"ratio_memcpy\":%.2f,\"iters\":%d,\"clock\":\"%s\"}\n",
           op, pass, shape, ours.median, ours.min, copy.median, copy.min, (long long)bytes,
           ours.median / copy.median, iters, bench_clock_name());
  } else {
    printf("%-14s %-7s %-18s ours %9.3f ms (min %8.3f)  memcpy %8.3f ms of %6.1f MB  x%.2f\n", op,
           pass, shape, ours.median, ours.min, copy.median, (double)bytes / 1e6,
           ours.median / copy.median);
  }
}

static void shape_text(const dt_tensor *t, char *buf, size_t cap) {
  int n = dt_tensor_ndim(t);
  size_t used = (size_t)snprintf(buf, cap, "[");
  for (int i = 0; i < n && used < cap; i++)
    used += (size_t)snprintf(buf + used, cap - used, i ? ",%lld" : "%lld",
                             (long long)dt_tensor_shape(t)[i]);
  if (used < cap) snprintf(buf + used, cap - used, "]");
}

static dt_status bench_case(const op_case *c, op_env *e, copy_bufs *cb, int iters, bool json) {
  dt_tensor *grad = NULL, *probe = NULL;
  dt_status st = c->run(e, &probe);
  bool scalar = !st && dt_tensor_ndim(probe) == 0;
  char shape[64];
  int main_bit = main_leaf(c);
  if (!st) shape_text(main_bit ? *leaf_slot(e, main_bit) : probe, shape, sizeof shape);
  if (!st && !scalar)
    st = dt_randn(dt_tensor_ndim(probe), dt_tensor_shape(probe), DT_F32, 77, &grad);
  dt_tensor_release(probe);
  int64_t bytes = main_bytes(c, e);
  for (int pass = 0; pass < 2 && !st; pass++) {
    bool backward = pass == 1;
    for (int bit = 1; bit <= LEAF_LAST && !st; bit <<= 1)
      if (c->leaves & bit) st = dt_tensor_set_requires_grad(*leaf_slot(e, bit), backward);
    int64_t copy = bytes * (backward ? c->bwd_copies : 1);
    if (copy > cb->bytes) copy = cb->bytes; /* never: the buffers fit the largest case */
    double ours[MAX_ITERS], mem[MAX_ITERS];
    if (!st) st = run_once(c, e, grad, backward); /* warm */
    timed_memcpy(cb, copy);
    for (int it = 0; it < iters && !st; it++) {
      double t0 = bench_clock();
      st = run_once(c, e, grad, backward);
      double t1 = bench_clock();
      timed_memcpy(cb, copy);
      double t2 = bench_clock();
      ours[it] = (t1 - t0) / 1e3;
      mem[it] = (t2 - t1) / 1e3;
    }
    if (!st)
      print_row(json, c->name, backward ? "fwd+bwd" : "fwd", shape, bench_stats_of(ours, iters),
                bench_stats_of(mem, iters), copy, iters);
  }
  for (int bit = 1; bit <= LEAF_LAST; bit <<= 1)
    if (c->leaves & bit) dt_tensor_set_requires_grad(*leaf_slot(e, bit), false);
  dt_tensor_release(grad);
  return st;
}

/* AdamW over the model's parameters with random gradients. */
static dt_status bench_adamw(const gpt_sizes *s, copy_bufs *cb, int iters, bool json) {
  gpt_model *m = NULL;
  dt_tensor *const *params = NULL;
  dt_optimizer *opt = NULL;
  dt_status st = gpt_model_create(s, 99, &m);
  int n = st ? 0 : gpt_model_params(m, &params);
  int64_t elems = 0;
  for (int i = 0; i < n && !st; i++) {
    dt_tensor *g = NULL;
    st = dt_randn(dt_tensor_ndim(params[i]), dt_tensor_shape(params[i]), DT_F32, 500 + (uint64_t)i,
                  &g);
    if (!st) st = dt_tensor_set_grad(params[i], g);
    dt_tensor_release(g);
    elems += dt_tensor_numel(params[i]);
  }
  if (!st) st = dt_optimizer_create_adamw(n, params, NULL, &opt);
  int64_t copy = 4 * 4 * elems;
  if (copy > cb->bytes) copy = cb->bytes;
  double ours[MAX_ITERS], mem[MAX_ITERS];
  if (!st) st = dt_optimizer_step(opt);
  for (int it = 0; it < iters && !st; it++) {
    double t0 = bench_clock();
    st = dt_optimizer_step(opt);
    double t1 = bench_clock();
    timed_memcpy(cb, copy);
    double t2 = bench_clock();
    ours[it] = (t1 - t0) / 1e3;
    mem[it] = (t2 - t1) / 1e3;
  }
  char shape[32];
  snprintf(shape, sizeof shape, "%d params, %.1fM", n, (double)elems / 1e6);
  if (!st)
    print_row(json, "adamw", "step", shape, bench_stats_of(ours, iters), bench_stats_of(mem, iters),
              copy, iters);
  dt_optimizer_destroy(opt);
  gpt_model_destroy(m);
  return st;
}

/* ---- GEMM calls of the step against cblas_sgemm alone ------------------------------------- */

/* One product of the step: batch x ([M, K] op [K, N]); a_t / b_t say that the operand is
 * read transposed (a view, as autograd passes it). */
typedef struct gemm_case {
  const char *name;
  int64_t batch, M, N, K;
  bool a_t, b_t;
} gemm_case;

/* Ours: dt_matmul on views shaped as the step's tensors; the reference: cblas_sgemm per
 * matrix on the same memory layout. dtype DT_BF16: ours multiplies bfloat16 tensors (their
 * conversions included), cblas_sgemm the same values as float32. */
static dt_status bench_gemm(const gemm_case *g, dt_dtype dtype, int iters, bool json) {
  int64_t as[3] = {g->batch, g->a_t ? g->K : g->M, g->a_t ? g->M : g->K};
  int64_t bs[3] = {g->batch, g->b_t ? g->N : g->K, g->b_t ? g->K : g->N};
  dt_tensor *a = NULL, *b = NULL, *av = NULL, *bv = NULL, *c = NULL;
  dt_status st = dt_randn(3, as, DT_F32, 1, &a);
  if (!st) st = dt_randn(3, bs, DT_F32, 2, &b);
  if (!st && dtype != DT_F32) { /* a and b become the float32 values of dtype's tensors */
    dt_tensor *a16 = NULL, *b16 = NULL, *a32 = NULL, *b32 = NULL;
    st = dt_to(a, dtype, &a16);
    if (!st) st = dt_to(b, dtype, &b16);
    if (!st) st = dt_to(a16, DT_F32, &a32);
    if (!st) st = dt_to(b16, DT_F32, &b32);
    if (!st) {
      dt_tensor_release(a), dt_tensor_release(b);
      a = a32, b = b32, a32 = b32 = NULL;
      st = g->a_t ? dt_transpose(a16, 1, 2, &av) : (av = dt_tensor_retain(a16), DT_OK);
      if (!st) st = g->b_t ? dt_transpose(b16, 1, 2, &bv) : (bv = dt_tensor_retain(b16), DT_OK);
    }
    dt_tensor_release(a16), dt_tensor_release(b16), dt_tensor_release(a32);
    dt_tensor_release(b32);
  } else {
    if (!st) st = g->a_t ? dt_transpose(a, 1, 2, &av) : (av = dt_tensor_retain(a), DT_OK);
    if (!st) st = g->b_t ? dt_transpose(b, 1, 2, &bv) : (bv = dt_tensor_retain(b), DT_OK);
  }
  float *cref = st ? NULL : malloc(sizeof(float) * (size_t)(g->batch * g->M * g->N));
  if (!st && !cref) st = DT_ERR_NOMEM;
  double ours[MAX_ITERS], ref[MAX_ITERS];
  const float *pa = st ? NULL : dt_tensor_data(a), *pb = st ? NULL : dt_tensor_data(b);
  for (int it = -1; it < iters && !st; it++) {
    dt_tensor_release(c); /* the last iteration's stays for the error below */
    c = NULL;
    double t0 = bench_clock();
    st = dt_matmul(av, bv, &c);
    double t1 = bench_clock();
    dt__blas_use_own_threads(); /* the BLAS alone, on as many threads as ours (not timed) */
    double t1b = bench_clock();
    for (int64_t k = 0; k < g->batch; k++) {
      cblas_sgemm(CblasRowMajor, g->a_t ? CblasTrans : CblasNoTrans,
                  g->b_t ? CblasTrans : CblasNoTrans, (int)g->M, (int)g->N, (int)g->K, 1.0f,
                  pa + k * g->M * g->K, (int)as[2], pb + k * g->K * g->N, (int)bs[2], 0.0f,
                  cref + k * g->M * g->N, (int)g->N);
    }
    double t2 = bench_clock();
    if (it >= 0) ours[it] = (t1 - t0) / 1e3, ref[it] = (t2 - t1b) / 1e3;
  }
  /* float32: the largest error over 16 rows of the first matrix, of ours and of cblas_sgemm,
   * against a float64 loop, relative to the sum of |a b| of each element */
  double err_ours = 0, err_ref = 0;
  if (!st && dtype == DT_F32) {
    const float *pc = dt_tensor_data(c);
    for (int64_t r = 0; r < 16 && r < g->M; r++) {
      int64_t i = r * g->M / 16;
      for (int64_t j = 0; j < g->N; j++) {
        double sum = 0, mag = 0;
        for (int64_t k = 0; k < g->K; k++) {
          double x = g->a_t ? pa[k * g->M + i] : pa[i * g->K + k];
          double y = g->b_t ? pb[j * g->K + k] : pb[k * g->N + j];
          sum += x * y, mag += fabs(x * y);
        }
        if (mag == 0) continue;
        double eo = fabs(pc[i * g->N + j] - sum) / mag, er = fabs(cref[i * g->N + j] - sum) / mag;
        err_ours = eo > err_ours ? eo : err_ours, err_ref = er > err_ref ? er : err_ref;
      }
    }
  }
  if (!st) {
    bench_stats o = bench_stats_of(ours, iters), r = bench_stats_of(ref, iters);
    double gf = 2.0 * (double)(g->batch * g->M) * (double)g->N * (double)g->K / 1e9;
    if (json) {
      /* bfloat16: no error is measured (null, not 0) */
      char eo[32] = "null", er[32] = "null";
      if (dtype == DT_F32) {
        snprintf(eo, sizeof eo, "%.3g", err_ours);
        snprintf(er, sizeof er, "%.3g", err_ref);
      }
      printf("{\"name\":\"gemm\",\"call\":\"%s\",\"dtype\":\"%s\",\"batch\":%lld,\"m\":%lld,\"n\":%"
             "lld,\"k\":%lld,"
             "\"a_t\":%s,\"b_t\":%s,\"ours_ms\":%.3f,\"cblas_ms\":%.3f,\"ratio\":%.3f,"
             "\"ours_gflops\":%.1f,\"cblas_gflops\":%.1f,\"ours_max_err\":%s,"
             "\"cblas_max_err\":%s,\"iters\":%d,\"clock\":\"%s\"}\n",
             g->name, dt_dtype_name(dtype), (long long)g->batch, (long long)g->M, (long long)g->N,
             (long long)g->K, g->a_t ? "true" : "false", g->b_t ? "true" : "false", o.median,
             r.median, o.median / r.median, gf / (o.median * 1e-3), gf / (r.median * 1e-3), eo, er,
             iters, bench_clock_name());
    } else {
      printf("gemm %-16s %s %3lld x [%5lld x %5lld] x [%5lld x %5lld]%s%s ours %8.3f ms (%5.1f "
             "GF/s) cblas %8.3f ms (%5.1f GF/s) x%.2f",
             g->name, dt_dtype_name(dtype), (long long)g->batch, (long long)g->M, (long long)g->K,
             (long long)g->K, (long long)g->N, g->a_t ? " aT" : "", g->b_t ? " bT" : "", o.median,
             gf / (o.median * 1e-3), r.median, gf / (r.median * 1e-3), o.median / r.median);
      if (dtype == DT_F32) printf(" err %.1e / %.1e", err_ours, err_ref);
      printf("\n");
    }
  }
  free(cref);
  dt_tensor_release(c);
  dt_tensor_release(a);
  dt_tensor_release(b);
  dt_tensor_release(av);
  dt_tensor_release(bv);
  return st;
}

static dt_status bench_gemms(const gpt_sizes *s, dt_dtype dtype, int iters, bool json) {
  int64_t n = s->batch * s->seq, d = s->dmodel, t = s->seq, bh = s->batch * s->heads,
          hd = s->dmodel / s->heads;
  /* Forward linears (x W^T), their input gradients (g W) and weight gradients (g^T x); the
   * attention products and their gradients, batched over B H. */
  const gemm_case g[] = {
      {"qkv", 1, n, 3 * d, d, false, true},        {"qkv.dx", 1, n, d, 3 * d, false, false},
      {"qkv.dw", 1, 3 * d, d, n, true, false},     {"fc1", 1, n, 4 * d, d, false, true},
      {"fc1.dx", 1, n, d, 4 * d, false, false},    {"fc1.dw", 1, 4 * d, d, n, true, false},
      {"fc2", 1, n, d, 4 * d, false, true},        {"fc2.dw", 1, d, 4 * d, n, true, false},
      {"head", 1, n, s->vocab, d, false, true},    {"head.dx", 1, n, d, s->vocab, false, false},
      {"head.dw", 1, s->vocab, d, n, true, false}, {"q@kT", bh, t, t, hd, false, true},
      {"p@v", bh, t, hd, t, false, false},         {"p@v.dp", bh, t, t, hd, false, true},
      {"p@v.dv", bh, t, hd, t, true, false},
  };
  dt_status st = DT_OK;
  for (size_t k = 0; k < sizeof g / sizeof *g && !st; k++)
    st = bench_gemm(&g[k], dtype, iters, json);
  return st;
}

int bench_suite_ops(int argc, char **argv) {
  bool json = false;
  int iters = 7, threads = 0;
  long long v = 0;
  const char *only = NULL;
  dt_dtype gemm_dtype = DT_F32;
  gpt_sizes s;
  gpt_sizes_start(argc, argv, &s);
  for (int i = 1; i < argc; i++) {
    int took = gpt_sizes_option(argc, argv, &i, &s);
    if (!took) took = bench_clock_option(argc, argv, &i);
    if (took < 0) goto usage;
    if (took) continue;
    if (strcmp(argv[i], "--json") == 0) {
      json = true;
    } else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
      if (!bench_int_option(argv[i], argv[i + 1], 1, INT_MAX, &v)) goto usage;
      iters = (int)v, i++;
    } else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
      only = argv[++i];
    } else if (strcmp(argv[i], "--gemm-dtype") == 0 && i + 1 < argc) {
      i++;
      if (strcmp(argv[i], "f32") == 0) {
        gemm_dtype = DT_F32;
      } else if (strcmp(argv[i], "bf16") == 0) {
        gemm_dtype = DT_BF16;
      } else {
        fprintf(stderr, "bench ops: --gemm-dtype %s: f32 or bf16\n", argv[i]);
        return 2;
      }
    } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
      if (!bench_int_option(argv[i], argv[i + 1], 1, 4096, &v)) goto usage;
      threads = (int)v, i++;
      if (threads < 1) goto usage;
    } else {
      goto usage;
    }
  }
  if (!gpt_sizes_valid(&s) || iters < 1 || iters > MAX_ITERS) goto usage;
  /* --only names a case, adamw or gemm: another name would time nothing and exit 0. */
  bool known = !only || strcmp(only, "adamw") == 0 || strcmp(only, "gemm") == 0;
  for (size_t k = 0; k < sizeof cases / sizeof *cases && !known; k++)
    known = strcmp(only, cases[k].name) == 0;
  if (!known) {
    fprintf(stderr, "bench ops: --only %s names no case (see 'dtensor bench ops --help')\n", only);
    return 2;
  }
  /* The BLAS's threads and the library's own kernels', as torch.set_num_threads. */
  if (threads) dt_set_num_threads(threads);
  dt__blas_sync_threads(); /* before the GEMM rows call the BLAS directly */
  bench_machine_print(json);
  if (!json)
    printf("# clock: %s time; sizes as bench train --size (see --help)\n", bench_clock_name());
  op_env e;
  dt_status st = env_create(&s, &e);
  /* The largest copy: AdamW's four passes over the parameters, or three of the logits. */
  int64_t largest = 4 * 4 * gpt_param_count(&s);
  int64_t logits3 = 3 * 4 * s.batch * s.seq * s.vocab;
  copy_bufs cb = {.bytes = largest > logits3 ? largest : logits3};
  cb.src = malloc((size_t)cb.bytes), cb.dst = malloc((size_t)cb.bytes);
  if (!st && (!cb.src || !cb.dst)) st = DT_ERR_NOMEM;
  if (!st) memset(cb.src, 1, (size_t)cb.bytes), memset(cb.dst, 2, (size_t)cb.bytes);
  for (size_t k = 0; k < sizeof cases / sizeof *cases && !st; k++)
    if (!only || strcmp(only, cases[k].name) == 0) st = bench_case(&cases[k], &e, &cb, iters, json);
  if (!st && (!only || strcmp(only, "adamw") == 0)) st = bench_adamw(&s, &cb, iters, json);
  if (!st && (!only || strcmp(only, "gemm") == 0)) st = bench_gemms(&s, gemm_dtype, iters, json);
  env_destroy(&e);
  free(cb.src);
  free(cb.dst);
  if (st) {
    fprintf(stderr, "bench ops: %s\n", dt_last_error());
    return 1;
  }
  return 0;
usage:
  fprintf(stderr, "bench ops: bad or incomplete option (see 'dtensor bench ops --help')\n");
  return 2;
}
