/*
 * Scaled dot-product attention in float32 on the BLAS: for each (batch, head, block of BQ
 * queries) the keys are read in blocks of BK; each block's scores come from one sgemm
 * (S = scale Q K^T), are folded into a running maximum and sum per query (the online
 * softmax, vmath.h's exp), and the block's probabilities times its values are added to the
 * output block by a second sgemm. Extra memory: a few blocks per thread, never the [T, S]
 * scores. Causal key blocks wholly in a query block's future are skipped; the diagonal one
 * is masked.
 *
 * The backward recomputes each block's probabilities from the saved log-sum-exp and takes
 * every product through sgemm (dV += P^T dO, dP = dO V^T, dS = P (dP - D), dQ += scale dS K,
 * dK += scale dS^T Q). One pool job per (batch, kv head): it walks that kv head's query heads
 * and query blocks in order and owns the float32 dK, dV accumulators of the whole sequence
 * (O(seq)), so nothing is shared between jobs.
 *
 * Threads: the (batch, head, query block) jobs of the forward and the (batch, kv head) jobs
 * of the backward run on the intra-op pool (dt__parallel_for); each output element is
 * computed by one job in a fixed order, so any thread count gives the same bits. The blocks
 * are sized so that every sgemm has M N K <= 64^3, which OpenBLAS runs on the calling thread
 * (its interface goes multi-threaded above 65536 * GEMM_MULTITHREAD_THRESHOLD = 4): the pool's
 * jobs never wait on the BLAS's own threads.
 */
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/vmath.h"

/* M N K of every block product at most this (see above); BQ queries by BK keys. */
#define PRODUCT_BUDGET (64 * 64 * 64)
#define BQ_MAX 64
#define BK_MAX 256

/* A 4-D float32 operand whose rows (last dim) are contiguous: element (b, h, i, e) at
 * base[b s0 + h s1 + i ld + e]. */
typedef struct rows4 {
  const float *base;
  int64_t s0, s1;
  int ld;
} rows4;

static const float *rows_at(const rows4 *r, int64_t b, int64_t h, int64_t i) {
  return r->base + b * r->s0 + h * r->s1 + i * (int64_t)r->ld;
}

/* t as rows4 when CBLAS can read its rows as they are: float32, unit last stride, a row
 * stride that is a valid leading dimension. */
static bool rows4_of(const dt_tensor *t, int64_t cols, rows4 *r) {
  if (t->dtype != DT_F32) return false;
  if (cols > 1 && t->strides[3] != 1) return false;
  int64_t ld = t->shape[2] <= 1 || cols == 0 ? (cols > 1 ? cols : 1) : t->strides[2];
  if (ld < cols || ld < 1 || ld > INT_MAX) return false;
  r->base = (const float *)dt__tensor_base(t);
  r->s0 = t->strides[0], r->s1 = t->strides[1], r->ld = (int)ld;
  return true;
}

/* r over t's first `cols` columns; a contiguous float32 copy in *copy when t does not fit. */
static dt_status rows4_prepare(const dt_tensor *t, int64_t cols, rows4 *r, dt_tensor **copy) {
  *copy = NULL;
  if (rows4_of(t, cols, r)) return DT_OK;
  dt_status st = dt__tensor_new(4, t->shape, DT_F32, copy);
  if (st) return st;
  dt__cpu_copy(*copy, t);
  if (rows4_of(*copy, cols, r)) return DT_OK;
  return dt__error(DT_ERR_UNSUPPORTED,
                   "scaled_dot_product_attention: a row of %lld elements is too long for CBLAS",
                   (long long)t->shape[3]);
}

typedef struct sdpa {
  const dt_attention_args *a;
  rows4 q, k, v, g; /* g: the backward's [grad | lse | delta] rows */
  int64_t B, H, Hk, T, S, E, Ev, bq, bk, q_blocks;
  float scale;
  atomic_int failed; /* a job could not allocate its scratch */
} sdpa;

static void sdpa_init(sdpa *c, const dt_attention_args *a) {
  memset(c, 0, sizeof *c);
  c->a = a;
  c->B = a->q->shape[0], c->H = a->q->shape[1], c->T = a->q->shape[2], c->E = a->q->shape[3];
  c->Hk = a->k->shape[1], c->S = a->k->shape[2], c->Ev = a->v->shape[3];
  c->scale = (float)a->scale;
  int64_t widest = c->E > c->Ev ? c->E : c->Ev;
  if (widest < 1) widest = 1;
  c->bq = BQ_MAX;
  c->bk = PRODUCT_BUDGET / (c->bq * widest);
  if (c->bk < 16) { /* wide heads: fewer queries per block first */
    c->bk = 16;
    c->bq = PRODUCT_BUDGET / (16 * widest);
    if (c->bq < 8) c->bq = 8; /* above 2048 columns the BLAS may use its threads */
  }
  if (c->bk > BK_MAX) c->bk = BK_MAX;
  c->q_blocks = (c->T + c->bq - 1) / c->bq;
  atomic_init(&c->failed, 0);
}

/* The keys a query block [i0, i0 + nr) can keep: [0, S), or causally [0, i0 + nr). */
static int64_t key_end(const sdpa *c, int64_t i0, int64_t nr) {
  if (!c->a->causal) return c->S;
  return i0 + nr < c->S ? i0 + nr : c->S;
}

/* The scores of queries i0 + r against keys j0 + j, at s[r rs + j cs] (rs, cs: a row-major
 * block [nr][nc] or a transposed one [nc][nr]), scaled: the mask added (bool false: -inf)
 * and, causally, keys after the query dropped. */
static void mask_block(const sdpa *c, int64_t b, int64_t h, int64_t i0, int64_t nr, int64_t j0,
                       int64_t nc, float *s, int64_t rs, int64_t cs) {
  const dt_attention_args *a = c->a;
  if (a->mask) {
    const int64_t *ms = a->mask_strides;
    const char *base = dt__tensor_base(a->mask);
    for (int64_t r = 0; r < nr; r++) {
      int64_t off = b * ms[0] + h * ms[1] + (i0 + r) * ms[2] + j0 * ms[3];
      float *row = s + r * rs;
      if (a->mask->dtype == DT_BOOL) {
        const uint8_t *m = (const uint8_t *)base + off;
        for (int64_t j = 0; j < nc; j++)
          if (!m[j * ms[3]]) row[j * cs] = -INFINITY;
      } else {
        const float *m = (const float *)base + off;
        for (int64_t j = 0; j < nc; j++) row[j * cs] += m[j * ms[3]];
      }
    }
  }
  if (a->causal && j0 + nc - 1 > i0)
    for (int64_t r = 0; r < nr; r++) {
      int64_t first = i0 + r + 1 - j0; /* the first key after query i0 + r */
      for (int64_t j = first > 0 ? first : 0; j < nc; j++) s[r * rs + j * cs] = -INFINITY;
    }
}

/* dst [cols][rows] (row stride ldd) = src [rows][cols] (row stride lds). */
static void transpose(const float *src, int64_t rows, int64_t cols, int64_t lds, float *dst,
                      int64_t ldd) {
  for (int64_t r0 = 0; r0 < rows; r0 += 16)
    for (int64_t c = 0; c < cols; c++)
      for (int64_t r = r0; r < rows && r < r0 + 16; r++) dst[c * ldd + r] = src[r * lds + c];
}

/* s = scale Q_block K_block^T (+ mask) for nr queries at i0 of head h and nc keys at j0, with
 * K_block^T given as kt [E][nc] (row stride ldkt): OpenBLAS 0.3.21 runs a row-major A B^T of
 * these sizes through its packing path and A B through its small-matrix kernel, twice as fast
 * here (perf). */
static void scores(const sdpa *c, int64_t b, int64_t h, int64_t i0, int64_t nr, int64_t j0,
                   int64_t nc, const float *kt, int64_t ldkt, float *s) {
  if (c->E == 0)
    memset(s, 0, sizeof(float) * (size_t)(nr * c->bk));
  else
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)nr, (int)nc, (int)c->E, c->scale,
                rows_at(&c->q, b, h, i0), c->q.ld, kt, (int)ldkt, 0.0f, s, (int)c->bk);
  mask_block(c, b, h, i0, nr, j0, nc, s, c->bk, 1);
}

DT_VECTOR_CLONES static void scale_row(float *x, float f, int64_t n) {
  for (int64_t i = 0; i < n; i++) x[i] *= f;
}

/* ---- forward ------------------------------------------------------------------------------ */

/* The forward works on transposed scores, st [nc keys][nr queries] = K_block Q_block^T: both
 * operands as stored (the query block transposed once into qt), so OpenBLAS takes its
 * small-matrix kernel, and the online softmax runs down the columns, its loops vectorized over
 * the block's queries with no per-row reduction. */

/* The running maximum of each column (query) after this block: m[r] = max(m[r], st[.][r]),
 * NaN when any score is NaN; then mref[r] = m[r], or 0 while the query has kept nothing (so
 * that exp(score - mref) is 0 for its -inf scores instead of NaN). */
DT_VECTOR_CLONES static void column_max(const float *st, int64_t nc, int64_t nr, int64_t ld,
                                        float *m, int *nan, float *mref) {
  for (int64_t r = 0; r < nr; r++) nan[r] = 0;
  for (int64_t j = 0; j < nc; j++)
    for (int64_t r = 0; r < nr; r++) {
      float v = st[j * ld + r];
      m[r] = v > m[r] ? v : m[r];
      nan[r] |= v != v;
    }
  for (int64_t r = 0; r < nr; r++) {
    m[r] = nan[r] ? NAN : m[r];
    mref[r] = m[r] == -INFINITY ? 0.0f : m[r];
  }
}

/* st[j][r] = exp(st[j][r] - mref[r]), and l[r] = alpha[r] l[r] + the column's sum, with
 * alpha[r] = exp(old[r] - mref[r]) the rescaling of what the query had summed so far. */
DT_VECTOR_CLONES static void column_exp_sum(float *st, int64_t nc, int64_t nr, int64_t ld,
                                            const float *old, const float *mref, float *alpha,
                                            float *l) {
  for (int64_t r = 0; r < nr; r++) {
    alpha[r] = dt__exp_f32(old[r] - mref[r]);
    l[r] *= alpha[r];
  }
  for (int64_t j = 0; j < nc; j++)
    for (int64_t r = 0; r < nr; r++) {
      float p = dt__exp_f32(st[j * ld + r] - mref[r]);
      st[j * ld + r] = p;
      l[r] += p;
    }
}

typedef struct fwd_scratch {
  float *st, *qt, *acc, *m, *old, *mref, *alpha, *l;
  int *nan;
} fwd_scratch;

/* One key block [j0, j0 + nc) folded into query block [i0, i0 + nr)'s running state. */
static void forward_pair(const sdpa *c, fwd_scratch *w, int64_t b, int64_t h, int64_t i0,
                         int64_t nr, int64_t j0, int64_t nc) {
  int64_t Ev = c->Ev, kh = h / (c->H / c->Hk), bq = c->bq;
  if (c->E == 0)
    memset(w->st, 0, sizeof(float) * (size_t)(nc * bq));
  else
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)nc, (int)nr, (int)c->E, c->scale,
                rows_at(&c->k, b, kh, j0), c->k.ld, w->qt, (int)bq, 0.0f, w->st, (int)bq);
  mask_block(c, b, h, i0, nr, j0, nc, w->st, 1, bq);
  memcpy(w->old, w->m, sizeof(float) * (size_t)nr);
  column_max(w->st, nc, nr, bq, w->m, w->nan, w->mref);
  column_exp_sum(w->st, nc, nr, bq, w->old, w->mref, w->alpha, w->l);
  for (int64_t r = 0; r < nr; r++)
    if (w->alpha[r] != 1.0f) scale_row(w->acc + r * Ev, w->alpha[r], Ev);
  if (Ev > 0)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)nr, (int)Ev, (int)nc, 1.0f, w->st,
                (int)bq, rows_at(&c->v, b, kh, j0), c->v.ld, 1.0f, w->acc, (int)Ev);
}

static void forward_block(const sdpa *c, fwd_scratch *w, int64_t b, int64_t h, int64_t i0,
                          int64_t nr, dt_tensor *out, dt_tensor *lse) {
  int64_t Ev = c->Ev;
  for (int64_t r = 0; r < nr; r++) w->m[r] = -INFINITY, w->l[r] = 0;
  memset(w->acc, 0, sizeof(float) * (size_t)(nr * Ev));
  transpose(rows_at(&c->q, b, h, i0), nr, c->E, c->q.ld, w->qt, c->bq);
  int64_t end = key_end(c, i0, nr);
  for (int64_t j0 = 0; j0 < end; j0 += c->bk)
    forward_pair(c, w, b, h, i0, nr, j0, end - j0 < c->bk ? end - j0 : c->bk);
  float *ob = (float *)dt__tensor_base(out), *lb = (float *)dt__tensor_base(lse);
  for (int64_t r = 0; r < nr; r++) {
    float l = w->l[r], inv = 1.0f / l; /* l NaN: NaN */
    float *o = ob + b * out->strides[0] + h * out->strides[1] + (i0 + r) * out->strides[2];
    for (int64_t e = 0; e < Ev; e++) /* l 0: the query kept no key, its output 0 (PyTorch's) */
      o[e * out->strides[3]] = l == 0 ? 0.0f : w->acc[r * Ev + e] * inv;
    lb[b * lse->strides[0] + h * lse->strides[1] + (i0 + r) * lse->strides[2]] =
        l > 0    ? w->m[r] + logf(l)
        : l == 0 ? -INFINITY
                 : NAN;
  }
}

typedef struct fwd_job {
  sdpa *c;
  dt_tensor *out, *lse;
} fwd_job;

/* Jobs [begin, end) of (batch, head, query block), row-major. */
static void forward_chunk(void *p, int64_t begin, int64_t end) {
  fwd_job *j = p;
  sdpa *c = j->c;
  int64_t bq = c->bq;
  size_t n = (size_t)(c->bk * bq + c->E * bq + bq * c->Ev + 7 * bq);
  float *buf = dt__alloc(sizeof(float) * n);
  if (!buf) {
    atomic_store(&c->failed, 1);
    return;
  }
  fwd_scratch w = {.st = buf, .qt = buf + c->bk * bq};
  w.acc = w.qt + c->E * bq, w.m = w.acc + bq * c->Ev, w.old = w.m + bq, w.mref = w.old + bq;
  w.alpha = w.mref + bq, w.l = w.alpha + bq, w.nan = (int *)(w.l + bq);
  for (int64_t job = begin; job < end; job++) {
    int64_t qb = job % c->q_blocks, bh = job / c->q_blocks;
    int64_t i0 = qb * bq, nr = c->T - i0 < bq ? c->T - i0 : bq;
    forward_block(c, &w, bh / c->H, bh % c->H, i0, nr, j->out, j->lse);
  }
  dt__free(buf);
}

dt_status dt__cpu_attention_f32(const dt_attention_args *a, dt_tensor *out, dt_tensor *lse) {
  sdpa c;
  sdpa_init(&c, a);
  dt_tensor *qc = NULL, *kc = NULL, *vc = NULL;
  dt_status st = rows4_prepare(a->q, c.E, &c.q, &qc);
  if (!st) st = rows4_prepare(a->k, c.E, &c.k, &kc);
  if (!st) st = rows4_prepare(a->v, c.Ev, &c.v, &vc);
  if (!st) {
    fwd_job j = {.c = &c, .out = out, .lse = lse};
    dt__blas_sync_threads(); /* the BLAS on one thread inside each job */
    dt__parallel_for(c.B * c.H * c.q_blocks, 1, forward_chunk, &j);
    if (atomic_load(&c.failed))
      st = dt__error(DT_ERR_NOMEM, "scaled_dot_product_attention: out of memory for blocks");
  }
  dt_tensor_release(qc), dt_tensor_release(kc), dt_tensor_release(vc);
  return st;
}

/* ---- backward ----------------------------------------------------------------------------- */

typedef struct bwd_job {
  sdpa *c;
  dt_tensor *dq, *dk, *dv;
} bwd_job;

typedef struct bwd_scratch {
  float *p, *ds, *dq, *lse, *dd;
  float *gz; /* the block's output gradient with the rows that kept no key zeroed [bq, Ev] */
  float *kt, *vt, *dk, *dv; /* the kv head's k^T [E, S], v^T [Ev, S], dk [S, E], dv [S, Ev] */
} bwd_scratch;

/* p = exp(s - lse) per row (0 for a row that kept no key, and for dropped pairs). */
DT_VECTOR_CLONES static void probabilities(float *s, float lse, int64_t n) {
  for (int64_t i = 0; i < n; i++) s[i] = dt__exp_f32(s[i] - lse);
}

/* ds = p (dp - d), in place in dp. */
DT_VECTOR_CLONES static void score_grad(const float *p, float *dp, float d, int64_t n) {
  for (int64_t i = 0; i < n; i++) dp[i] = p[i] * (dp[i] - d);
}

/* Key block [j0, j0 + nc) of query block [i0, i0 + nr) of head h (kv head kh). */
static void backward_pair(const sdpa *c, const bwd_job *job, bwd_scratch *w, int64_t b, int64_t h,
                          int64_t kh, int64_t i0, int64_t nr, int64_t j0, int64_t nc) {
  int bk = (int)c->bk, E = (int)c->E, Ev = (int)c->Ev;
  const float *q = rows_at(&c->q, b, h, i0), *g = rows_at(&c->g, b, h, i0);
  const float *k = rows_at(&c->k, b, kh, j0);
  scores(c, b, h, i0, nr, j0, nc, w->kt + j0, c->S, w->p);
  bool none = false; /* a query that kept no key */
  for (int64_t r = 0; r < nr; r++) {
    if (w->lse[r] == -INFINITY)
      memset(w->p + r * bk, 0, sizeof(float) * (size_t)nc), none = true;
    else
      probabilities(w->p + r * bk, w->lse[r], nc);
  }
  const float *gv = g;
  int ldg = c->g.ld;
  if (none && job->dv && Ev > 0) { /* its p row is 0, but 0 times a NaN gradient is NaN */
    for (int64_t r = 0; r < nr; r++)
      if (w->lse[r] == -INFINITY)
        memset(w->gz + r * Ev, 0, sizeof(float) * (size_t)Ev);
      else
        memcpy(w->gz + r * Ev, g + r * ldg, sizeof(float) * (size_t)Ev);
    gv = w->gz, ldg = Ev;
  }
  if (job->dv && Ev > 0)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)nc, Ev, (int)nr, 1.0f, w->p, bk, gv,
                ldg, 1.0f, w->dv + j0 * Ev, Ev);
  if (!job->dq && !job->dk) return;
  if (Ev > 0)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)nr, (int)nc, Ev, 1.0f, g, c->g.ld,
                w->vt + j0, (int)c->S, 0.0f, w->ds, bk);
  else
    memset(w->ds, 0, sizeof(float) * (size_t)(nr * bk));
  for (int64_t r = 0; r < nr; r++) {
    if (w->lse[r] == -INFINITY) /* no key kept: no gradient (delta may be NaN there) */
      memset(w->ds + r * bk, 0, sizeof(float) * (size_t)nc);
    else
      score_grad(w->p + r * bk, w->ds + r * bk, w->dd[r], nc);
  }
  if (job->dq && E > 0)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)nr, E, (int)nc, c->scale, w->ds, bk,
                k, c->k.ld, 1.0f, w->dq, E);
  if (job->dk && E > 0)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)nc, E, (int)nr, c->scale, w->ds, bk,
                q, c->q.ld, 1.0f, w->dk + j0 * E, E);
}

/* Writes rows [0, n) of src [n][cols] to head (b, h) of the float32 tensor t from row i0. */
static void store_rows(dt_tensor *t, int64_t b, int64_t h, int64_t i0, int64_t n, int64_t cols,
                       const float *src) {
  float *base = (float *)dt__tensor_base(t);
  for (int64_t r = 0; r < n; r++) {
    float *o = base + b * t->strides[0] + h * t->strides[1] + (i0 + r) * t->strides[2];
    for (int64_t e = 0; e < cols; e++) o[e * t->strides[3]] = src[r * cols + e];
  }
}

/* The query heads of kv head (b, kh), block by block; then its dk and dv. */
static void backward_kv_head(const sdpa *c, const bwd_job *job, bwd_scratch *w, int64_t b,
                             int64_t kh) {
  int64_t E = c->E, Ev = c->Ev, rep = c->H / c->Hk;
  transpose(rows_at(&c->k, b, kh, 0), c->S, E, c->k.ld, w->kt, c->S);
  transpose(rows_at(&c->v, b, kh, 0), c->S, Ev, c->v.ld, w->vt, c->S);
  memset(w->dk, 0, sizeof(float) * (size_t)(c->S * E));
  memset(w->dv, 0, sizeof(float) * (size_t)(c->S * Ev));
  for (int64_t h = kh * rep; h < (kh + 1) * rep; h++)
    for (int64_t i0 = 0; i0 < c->T; i0 += c->bq) {
      int64_t nr = c->T - i0 < c->bq ? c->T - i0 : c->bq;
      for (int64_t r = 0; r < nr; r++) {
        const float *row = rows_at(&c->g, b, h, i0 + r);
        w->lse[r] = row[Ev], w->dd[r] = row[Ev + 1];
      }
      memset(w->dq, 0, sizeof(float) * (size_t)(nr * E));
      int64_t end = key_end(c, i0, nr);
      for (int64_t j0 = 0; j0 < end; j0 += c->bk)
        backward_pair(c, job, w, b, h, kh, i0, nr, j0, end - j0 < c->bk ? end - j0 : c->bk);
      if (job->dq) store_rows(job->dq, b, h, i0, nr, E, w->dq);
    }
  if (job->dk) store_rows(job->dk, b, kh, 0, c->S, E, w->dk);
  if (job->dv) store_rows(job->dv, b, kh, 0, c->S, Ev, w->dv);
}

/* Jobs [begin, end) of (batch, kv head). */
static void backward_chunk(void *p, int64_t begin, int64_t end) {
  bwd_job *j = p;
  sdpa *c = j->c;
  int64_t blk = c->bq * c->bk;
  size_t n = (size_t)(2 * blk + c->bq * (c->E + c->Ev) + 2 * c->bq + 2 * c->S * (c->E + c->Ev));
  float *buf = dt__alloc(sizeof(float) * n);
  if (!buf) {
    atomic_store(&c->failed, 1);
    return;
  }
  bwd_scratch w = {.p = buf, .ds = buf + blk, .dq = buf + 2 * blk};
  w.lse = w.dq + c->bq * c->E, w.dd = w.lse + c->bq, w.kt = w.dd + c->bq;
  w.vt = w.kt + c->S * c->E, w.dk = w.vt + c->S * c->Ev, w.dv = w.dk + c->S * c->E;
  w.gz = w.dv + c->S * c->Ev;
  for (int64_t job = begin; job < end; job++) backward_kv_head(c, j, &w, job / c->Hk, job % c->Hk);
  dt__free(buf);
}

dt_status dt__cpu_attention_backward_f32(const dt_attention_args *a, const dt_tensor *gs,
                                         dt_tensor *dq, dt_tensor *dk, dt_tensor *dv) {
  sdpa c;
  sdpa_init(&c, a);
  dt_tensor *qc = NULL, *kc = NULL, *vc = NULL, *gc = NULL;
  dt_status st = rows4_prepare(a->q, c.E, &c.q, &qc);
  if (!st) st = rows4_prepare(a->k, c.E, &c.k, &kc);
  if (!st) st = rows4_prepare(a->v, c.Ev, &c.v, &vc);
  if (!st) st = rows4_prepare(gs, c.Ev + 2, &c.g, &gc);
  if (!st) {
    bwd_job j = {.c = &c, .dq = dq, .dk = dk, .dv = dv};
    dt__blas_sync_threads();
    dt__parallel_for(c.B * c.Hk, 1, backward_chunk, &j);
    if (atomic_load(&c.failed))
      st = dt__error(DT_ERR_NOMEM,
                     "scaled_dot_product_attention backward: out of memory for blocks");
  }
  dt_tensor_release(qc), dt_tensor_release(kc), dt_tensor_release(vc), dt_tensor_release(gc);
  return st;
}
