/*
 * Matrix products. Floating products go to cblas_sgemm / cblas_dgemm, which read any
 * row- or column-contiguous matrix directly (a transpose flag and a leading dimension), so
 * transposed views never cost a copy; only operands of another dtype or with two
 * non-unit strides are copied first. Integer products run an exact int64 triple loop.
 */
#include <cblas.h>
#include <inttypes.h>
#include <limits.h>

#include "kernels/cpu/amx_gemm.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/matrix.h"
#include "kernels/cpu/vmath.h"

/* How CBLAS reads one [rows, cols] operand stored in row-major CBLAS terms. */
typedef struct blas_layout {
  CBLAS_TRANSPOSE trans;
  int ld;
} blas_layout;

static int64_t max1(int64_t v) { return v > 1 ? v : 1; }

/* Element (i, j) lives at i*rs + j*cs. CBLAS can address it when one stride is 1 and the
 * other is a valid leading dimension. The stride of a size-1 dim is never used, so any
 * value is fine there (broadcast views give 0). */
static inline bool blas_layout_of(int64_t rows, int64_t cols, int64_t rs, int64_t cs,
                                  blas_layout *out) {
  int64_t ld;
  if ((cols <= 1 || cs == 1) && (rows <= 1 || rs >= max1(cols))) {
    out->trans = CblasNoTrans;
    ld = rows <= 1 ? max1(cols) : rs;
  } else if ((rows <= 1 || rs == 1) && (cols <= 1 || cs >= max1(rows))) {
    out->trans = CblasTrans;
    ld = cols <= 1 ? max1(rows) : cs;
  } else {
    return false;
  }
  if (ld > INT_MAX) return false;
  out->ld = (int)ld;
  return true;
}

static inline bool matrix_layout(const dt_tensor *t, blas_layout *out) {
  int nd = t->ndim;
  return blas_layout_of(t->shape[nd - 2], t->shape[nd - 1], t->strides[nd - 2], t->strides[nd - 1],
                        out);
}

/* ---- Batch walk: the output's batch dims, with each operand's broadcast strides --------- */

typedef struct batch_walk {
  int ndim;
  int64_t shape[DT_MAX_DIMS];
  int64_t a_strides[DT_MAX_DIMS], b_strides[DT_MAX_DIMS]; /* elements; 0 when broadcast */
  int64_t index[DT_MAX_DIMS];
  int64_t a_off, b_off;
} batch_walk;

static void batch_strides(const dt_tensor *t, int ndim, const int64_t *shape, int64_t *strides) {
  int lead = ndim - (t->ndim - 2);
  for (int i = 0; i < ndim; i++) {
    int it = i - lead;
    strides[i] = (it < 0 || (t->shape[it] == 1 && shape[i] != 1)) ? 0 : t->strides[it];
  }
}

static void batch_walk_init(batch_walk *w, const dt_tensor *a, const dt_tensor *b,
                            const dt_tensor *out) {
  w->ndim = out->ndim - 2;
  for (int i = 0; i < w->ndim; i++) {
    w->shape[i] = out->shape[i];
    w->index[i] = 0;
  }
  batch_strides(a, w->ndim, w->shape, w->a_strides);
  batch_strides(b, w->ndim, w->shape, w->b_strides);
  w->a_off = w->b_off = 0;
}

static void batch_walk_next(batch_walk *w) {
  for (int d = w->ndim - 1; d >= 0; d--) {
    w->a_off += w->a_strides[d];
    w->b_off += w->b_strides[d];
    if (++w->index[d] < w->shape[d]) return;
    w->a_off -= w->a_strides[d] * w->shape[d];
    w->b_off -= w->b_strides[d] * w->shape[d];
    w->index[d] = 0;
  }
}

/* Positions w at batch entry `at` (row-major over the batch dims) from its start. */
static void batch_walk_seek(batch_walk *w, int64_t at) {
  w->a_off = w->b_off = 0;
  for (int d = w->ndim - 1; d >= 0; d--) {
    w->index[d] = at % w->shape[d];
    at /= w->shape[d];
    w->a_off += w->index[d] * w->a_strides[d];
    w->b_off += w->index[d] * w->b_strides[d];
  }
}

static int64_t batch_count(const dt_tensor *t) { return dt__numel(t->ndim - 2, t->shape); }

/* ---- Integer products ----------------------------------------------------------------- */

/* Exact, wrapping int64 arithmetic (as PyTorch's integer matmul); correct, not fast. The op
 * layer has checked that alpha and beta are integral and within int64. */
static void integer_matmul(const dt_tensor *a, const dt_tensor *b, const dt_tensor *bias,
                           double beta, double alpha, dt_tensor *out) {
  int nd = out->ndim;
  int64_t n = out->shape[nd - 2], m = out->shape[nd - 1], k = a->shape[a->ndim - 1];
  int64_t ars = a->strides[a->ndim - 2], acs = a->strides[a->ndim - 1];
  int64_t brs = b->strides[b->ndim - 2], bcs = b->strides[b->ndim - 1];
  int64_t aes = (int64_t)dt__dtype_sizes[a->dtype], bes = (int64_t)dt__dtype_sizes[b->dtype];
  int64_t oes = (int64_t)dt__dtype_sizes[out->dtype];
  bool use_bias = bias && beta != 0;
  if (use_bias) dt__cpu_copy(out, bias);
  uint64_t ibeta = use_bias ? (uint64_t)(int64_t)beta : 0, ialpha = (uint64_t)(int64_t)alpha;
  const char *abase = dt__tensor_base(a), *bbase = dt__tensor_base(b);
  char *c = dt__tensor_base(out);
  batch_walk w;
  batch_walk_init(&w, a, b, out);
  for (int64_t batch = batch_count(out); batch > 0; batch--) {
    const char *pa = abase + w.a_off * aes, *pb = bbase + w.b_off * bes;
    for (int64_t i = 0; i < n; i++) {
      for (int64_t j = 0; j < m; j++) {
        uint64_t acc = 0;
        for (int64_t p = 0; p < k; p++) {
          acc += (uint64_t)dt__cpu_load_i64(a->dtype, pa + (i * ars + p * acs) * aes) *
                 (uint64_t)dt__cpu_load_i64(b->dtype, pb + (p * brs + j * bcs) * bes);
        }
        uint64_t prev = ibeta ? (uint64_t)dt__cpu_load_i64(out->dtype, c) : 0;
        dt__cpu_store_i64(out->dtype, c, (int64_t)(ibeta * prev + ialpha * acc));
        c += oes;
      }
    }
    batch_walk_next(&w);
  }
}

/* ---- Floating products through CBLAS ---------------------------------------------------- */

/* A copy of t in dtype cd that keeps t's memory order where its matrices are stored
 * transposed (a weight gradient's g^T, a bfloat16 one): the copy then reads t in order,
 * not across its rows, and the GEMM reads the copy with a transpose flag. */
static dt_status convert_transposed(const dt_tensor *t, dt_dtype cd, dt_tensor **copy) {
  int nd = t->ndim;
  int64_t shape[DT_MAX_DIMS], strides[DT_MAX_DIMS];
  for (int i = 0; i < nd; i++) shape[i] = t->shape[i], strides[i] = t->strides[i];
  shape[nd - 2] = t->shape[nd - 1], shape[nd - 1] = t->shape[nd - 2];
  strides[nd - 2] = t->strides[nd - 1], strides[nd - 1] = t->strides[nd - 2];
  dt_tensor *in_order = NULL, *converted = NULL;
  dt_status st = dt__tensor_view(t, nd, shape, strides, t->offset, &in_order);
  if (!st) st = dt__tensor_new(nd, shape, cd, &converted);
  if (!st) {
    dt__cpu_copy(converted, in_order);
    for (int i = 0; i < nd; i++) strides[i] = converted->strides[i];
    strides[nd - 2] = converted->strides[nd - 1], strides[nd - 1] = converted->strides[nd - 2];
    st = dt__tensor_view(converted, nd, t->shape, strides, 0, copy);
  }
  dt_tensor_release(in_order);
  dt_tensor_release(converted);
  return st;
}

/* *view = t when CBLAS can read t's matrices in dtype cd as they are; otherwise a copy
 * converted to cd (contiguous, or transposed as t is), returned in *copy for the caller to
 * release. */
static DT_NOINLINE dt_status prepare_copy(const dt_tensor *t, dt_dtype cd, const dt_tensor **view,
                                          dt_tensor **copy, blas_layout *layout) {
  int nd = t->ndim;
  if (t->dtype != cd && matrix_layout(t, layout) && layout->trans == CblasTrans &&
      t->shape[nd - 1] > 1 && t->shape[nd - 2] > 1) {
    dt_status st = convert_transposed(t, cd, copy);
    if (st) return st;
    *view = *copy;
    if (matrix_layout(*copy, layout)) return DT_OK;
    dt_tensor_release(*copy);
    *copy = NULL;
    *view = t;
  }
  dt_status st = dt__tensor_new(t->ndim, t->shape, cd, copy);
  if (st) return st;
  dt__cpu_copy(*copy, t);
  *view = *copy;
  if (!matrix_layout(*copy, layout)) {
    return dt__error(DT_ERR_UNSUPPORTED,
                     "matmul: a row of %" PRId64 " elements is too long for CBLAS",
                     t->shape[t->ndim - 1]);
  }
  return DT_OK;
}

/* The common case inline (the operand read as it is); the copies out of line. */
static inline dt_status prepare_operand(const dt_tensor *t, dt_dtype cd, const dt_tensor **view,
                                        dt_tensor **copy, blas_layout *layout) {
  *view = t;
  if (DT_LIKELY(t->dtype == cd && matrix_layout(t, layout))) return DT_OK;
  return prepare_copy(t, cd, view, copy, layout);
}

/* The whole product as one GEMM of all of a's rows when they form one strided run
 * (dt__matmul_row_run): fewer, larger calls, which is what CBLAS is fast at. */
static bool fold_batch_into_rows(const dt_tensor *a, const dt_tensor *b, const dt_tensor *out,
                                 int64_t *rows, blas_layout *layout) {
  int64_t total, rs;
  if (!dt__matmul_row_run(a, b, out, &total, &rs)) return false;
  if (!blas_layout_of(total, a->shape[a->ndim - 1], rs, a->strides[a->ndim - 1], layout)) {
    return false;
  }
  *rows = total;
  return true;
}

/* One row times a matrix (decoding a token, a batch of one): a matrix-vector product reads
 * b once, where sgemm would pack all of b for a single row first. c's row is written whole
 * (zeroed first when beta is 0, so that nothing depends on how the BLAS scales by 0). */
static void gemv_row(dt_dtype cd, blas_layout la, blas_layout lb, int m, int k, double alpha,
                     const char *pa, const char *pb, double beta, char *pc) {
  int inc_a = la.trans == CblasNoTrans ? 1 : la.ld;
  /* b holds op(b) [k, m] row-major (NoTrans: c = b^T a) or its transpose [m, k] (c = b a). */
  CBLAS_TRANSPOSE t = lb.trans == CblasNoTrans ? CblasTrans : CblasNoTrans;
  int rows = lb.trans == CblasNoTrans ? k : m, cols = lb.trans == CblasNoTrans ? m : k;
  if (beta == 0) memset(pc, 0, (size_t)m * dt__dtype_sizes[cd]);
  if (cd == DT_F32) {
    cblas_sgemv(CblasRowMajor, t, rows, cols, (float)alpha, (const float *)pb, lb.ld,
                (const float *)pa, inc_a, (float)beta, (float *)pc, 1);
  } else {
    cblas_dgemv(CblasRowMajor, t, rows, cols, alpha, (const double *)pb, lb.ld, (const double *)pa,
                inc_a, beta, (double *)pc, 1);
  }
}

/* amx: the product was found worth the AMX path (float_matmul decides for the whole product,
 * so that every block of it computes alike); the BLAS runs when AMX declines. */
static void gemm(dt_dtype cd, blas_layout la, blas_layout lb, int n, int m, int k, double alpha,
                 const char *pa, const char *pb, double beta, char *pc, int ldc, bool amx) {
  if (n == 1) {
    gemv_row(cd, la, lb, m, k, alpha, pa, pb, beta, pc);
    return;
  }
  if (amx &&
      dt__amx_sgemm(la.trans == CblasTrans, lb.trans == CblasTrans, n, m, k, (const float *)pa,
                    la.ld, (const float *)pb, lb.ld, beta != 0, (float *)pc, ldc)) {
    return;
  }
  if (cd == DT_F32) {
    cblas_sgemm(CblasRowMajor, la.trans, lb.trans, n, m, k, (float)alpha, (const float *)pa, la.ld,
                (const float *)pb, lb.ld, (float)beta, (float *)pc, ldc);
  } else {
    cblas_dgemm(CblasRowMajor, la.trans, lb.trans, n, m, k, alpha, (const double *)pa, la.ld,
                (const double *)pb, lb.ld, beta, (double *)pc, ldc);
  }
}

/* c = beta * c (k == 0: the product is empty), c contiguous f32 or f64. */
static void scale(dt_tensor *c, double beta) {
  int64_t count = dt__tensor_numel(c);
  if (c->dtype == DT_F32) {
    float *p = (float *)dt__tensor_base(c);
    for (int64_t i = 0; i < count; i++) p[i] = beta == 0 ? 0.0f : (float)beta * p[i];
  } else {
    double *p = (double *)dt__tensor_base(c);
    for (int64_t i = 0; i < count; i++) p[i] = beta == 0 ? 0.0 : beta * p[i];
  }
}

/* Zeroes n bytes at p (a multiple of 4) with vector stores. With beta = 0 OpenBLAS zeroes C
 * through memset, whose `rep stosb` callgrind counts once per byte (a 32 KiB weight gradient:
 * 32,768 "instructions", for a few hundred cycles); zeroed here, C goes to the BLAS with
 * beta = 1 instead, at the same speed. OpenBLAS adds alpha * AB to the zeroed C either way:
 * the same bits. (A BLAS that stores alpha * AB without adding could differ in the sign of a
 * zero result only: -0 + 0 is +0.) The loop is kept a loop: gcc would otherwise turn it back
 * into a memset call. */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-tree-loop-distribute-patterns")))
#endif
DT_VECTOR_CLONES static void
zero_bytes(char *p, size_t n) {
  float *f = (float *)p;
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC unroll 4
#endif
  for (size_t i = 0; i < n / sizeof(float); i++) f[i] = 0.0f;
}

/* True when bias is one contiguous row of c's width (a linear's bias) and c is contiguous:
 * then each block of c starts as a copy of the bias's columns (no strided broadcast loop). */
static bool bias_is_row(const dt_tensor *c, const dt_tensor *bias) {
  int64_t m = c->shape[c->ndim - 1];
  return bias->dtype == c->dtype && bias->ndim == 1 && bias->shape[0] == m &&
         (m <= 1 || bias->strides[0] == 1) && dt__is_contiguous(c->ndim, c->shape, c->strides);
}

/* Below this many multiply-adds (about 20 us of sgemm on one core) a GEMM runs on its caller
 * alone: waking a pool thread costs 10-30 us. */
#define GEMM_SPLIT_MIN ((int64_t)1 << 22)
/* Blocks of a split GEMM start at multiples of this many rows or columns, so that they cover
 * whole panels of the BLAS's micro-kernels, whose tiles then compute each element as the
 * unsplit product does: the same bits on 1 and N threads. 96 is a multiple of every panel
 * width of OpenBLAS's x86-64 sgemm and dgemm kernels (4, 6, 8, 12, 16, 24, 32; with Haswell's
 * kernels a split at 32 changed the last bits of the elements around it). */
#define GEMM_SPLIT_ALIGN 96

/* How C starts before alpha * AB is added: as it is (beta given: the caller prepared it),
 * zeroed, or holding the bias row in every row (then beta scales the bias). */
typedef enum { C_AS_IS, C_ZERO, C_BIAS_ROW } c_start;

/* One product c = alpha * op(a) op(b) + beta * c as the blocks the pool runs: one matrix
 * (folded rows or a single batch entry) split into `blocks` runs of rows or of columns, or
 * a batch of matrices split into runs of whole matrices. */
typedef struct gemm_plan {
  dt_dtype cd;
  size_t esize;
  blas_layout la, lb;
  int64_t n, m, k;
  double alpha, beta;
  c_start start;
  const char *bias; /* C_BIAS_ROW: m elements */
  const char *pa, *pb;
  char *pc;
  const dt_tensor *ta, *tb, *c; /* batched: the operands walked */
  bool batched, by_rows;
  bool amx;       /* f32 on AMX tiles (amx_gemm.h) when it accepts */
  int64_t block;  /* rows or columns per block (one matrix), matrices per block (batched) */
  int64_t blocks; /* the last block takes the rest */
} gemm_plan;

/* Rows [r0, r1) x columns [c0, c1) of one matrix's product: C's block started as planned,
 * then one GEMM on the block's rows of op(a) and columns of op(b). */
static void gemm_block(const gemm_plan *p, const char *pa, const char *pb, char *pc, int64_t r0,
                       int64_t r1, int64_t c0, int64_t c1) {
  size_t es = p->esize, width = (size_t)(c1 - c0) * es;
  char *corner = pc + (size_t)(r0 * p->m + c0) * es;
  if (p->start == C_ZERO && r1 - r0 > 1) { /* gemv_row zeroes its one row itself */
    if (c0 == 0 && c1 == p->m) {
      zero_bytes(corner, (size_t)(r1 - r0) * width);
    } else {
      for (int64_t r = r0; r < r1; r++) zero_bytes(corner + (size_t)((r - r0) * p->m) * es, width);
    }
  } else if (p->start == C_BIAS_ROW) {
    for (int64_t r = r0; r < r1; r++)
      memcpy(corner + (size_t)((r - r0) * p->m) * es, p->bias + (size_t)c0 * es, width);
  }
  double beta = p->start == C_ZERO && r1 - r0 > 1 ? 1 : p->start == C_ZERO ? 0 : p->beta;
  const char *a = pa + (size_t)(p->la.trans == CblasNoTrans ? r0 * p->la.ld : r0) * es;
  const char *b = pb + (size_t)(p->lb.trans == CblasNoTrans ? c0 : c0 * p->lb.ld) * es;
  gemm(p->cd, p->la, p->lb, (int)(r1 - r0), (int)(c1 - c0), (int)p->k, p->alpha, a, b, beta, corner,
       (int)p->m, p->amx);
}

static void gemm_matrices(const gemm_plan *p, int64_t first, int64_t end) {
  batch_walk w;
  batch_walk_init(&w, p->ta, p->tb, p->c);
  batch_walk_seek(&w, first);
  for (int64_t i = first; i < end; i++) {
    gemm_block(p, p->pa + w.a_off * (int64_t)p->esize, p->pb + w.b_off * (int64_t)p->esize,
               p->pc + (size_t)(i * p->n * p->m) * p->esize, 0, p->n, 0, p->m);
    batch_walk_next(&w);
  }
}

static void gemm_chunk(void *ctx, int64_t begin, int64_t end) {
  const gemm_plan *p = ctx;
  if (p->batched) {
    gemm_matrices(p, begin * p->block, end == p->blocks ? batch_count(p->c) : end * p->block);
    return;
  }
  int64_t lo = begin * p->block,
          hi = end == p->blocks ? (p->by_rows ? p->n : p->m) : end * p->block;
  if (p->by_rows) {
    gemm_block(p, p->pa, p->pb, p->pc, lo, hi, 0, p->m);
  } else {
    gemm_block(p, p->pa, p->pb, p->pc, 0, p->n, lo, hi);
  }
}

/* Runs the plan on up to `threads` threads of the pool (the BLAS itself on one thread in
 * each block, see dt__blas_sync_threads): a batch by runs of whole matrices, one matrix by
 * runs of rows (one row: of columns), about GEMM_SPLIT_MIN multiply-adds per block at
 * least. Blocks of one matrix start at multiples of GEMM_SPLIT_ALIGN, the last one taking
 * the rest, so that every block runs the BLAS's regular path over the same micro-kernel
 * panels as the whole product would. */
static void gemm_run(gemm_plan *p) {
  int64_t count = p->batched ? batch_count(p->c) : 1;
  double work = (double)p->n * (double)p->m * (double)p->k * (double)count;
  if (work < GEMM_SPLIT_MIN) { /* one block on the caller: the thread setting is not read */
    dt__blas_sync_unsplit();
    p->by_rows = p->n > 1;
    p->block = p->blocks = 1;
    if (p->batched) {
      gemm_matrices(p, 0, count);
    } else {
      gemm_block(p, p->pa, p->pb, p->pc, 0, p->n, 0, p->m);
    }
    return;
  }
  int threads = dt__blas_sync_threads();
  int64_t blocks = work / GEMM_SPLIT_MIN < threads ? (int64_t)(work / GEMM_SPLIT_MIN) : threads;
  if (p->batched) {
    if (blocks > count) blocks = count;
    if (blocks < 1) blocks = 1;
    p->block = (count + blocks - 1) / blocks;
    p->blocks = (count + p->block - 1) / p->block;
  } else {
    /* Rows (whole panels of the column-major N the BLAS sees) keep the bits; a split of the
     * columns changes how some kernels (OpenBLAS's Haswell and Zen sgemm) cut the M panels,
     * and with them the last bits: only a matrix-vector product (one row) splits its columns,
     * a product of too few rows to split runs whole. */
    p->by_rows = p->n > 1;
    int64_t side = p->by_rows ? p->n : p->m;
    if (blocks > side / GEMM_SPLIT_ALIGN) blocks = side / GEMM_SPLIT_ALIGN;
    if (blocks < 1) blocks = 1;
    /* the nearest multiple of the alignment to an even share; the last block takes the rest */
    p->block = (side / blocks + GEMM_SPLIT_ALIGN / 2) / GEMM_SPLIT_ALIGN * GEMM_SPLIT_ALIGN;
    while (blocks > 1 && (blocks - 1) * p->block >= side) blocks--;
    if (blocks == 1) p->block = side;
    p->blocks = blocks;
  }
  dt__parallel_for(p->blocks, 1, gemm_chunk, p);
}

static dt_status float_matmul(const dt_tensor *a, const dt_tensor *b, const dt_tensor *bias,
                              double beta, double alpha, dt_tensor *out) {
  int64_t n, m, k;
  dt_status st = dt__matmul_sizes("matmul", "CBLAS", a, out, &n, &m, &k);
  if (st) return st;
  dt_dtype cd = out->dtype == DT_F64 ? DT_F64 : DT_F32;
  dt_tensor *a_copy = NULL, *b_copy = NULL, *c_temp = NULL;
  dt_tensor *c = out;
  if (out->dtype != cd) {
    st = dt__tensor_new(out->ndim, out->shape, cd, &c_temp);
    if (st) goto done;
    c = c_temp;
  }
  gemm_plan p = {.cd = cd, .esize = dt__dtype_sizes[cd], .n = n, .m = m, .k = k};
  p.alpha = alpha, p.beta = beta, p.start = C_AS_IS, p.c = c;
  if (bias && beta != 0) {
    if (bias_is_row(c, bias) && k != 0) {
      p.start = C_BIAS_ROW;
      p.bias = dt__tensor_base((dt_tensor *)bias);
    } else {
      dt__cpu_copy(c, bias);
    }
  } else {
    p.beta = 0;
    p.start = C_ZERO;
  }
  if (k == 0) { /* (an empty c returned in dt__cpu_matmul) */
    if (k == 0 && p.beta != 1) scale(c, p.beta);
    goto finish;
  }
  st = prepare_operand(a, cd, &p.ta, &a_copy, &p.la);
  if (!st) st = prepare_operand(b, cd, &p.tb, &b_copy, &p.lb);
  if (st) goto done;
  p.pa = dt__tensor_base((dt_tensor *)p.ta);
  p.pb = dt__tensor_base((dt_tensor *)p.tb);
  p.pc = dt__tensor_base(c);
  int64_t rows;
  blas_layout folded;
  if (fold_batch_into_rows(p.ta, p.tb, c, &rows, &folded) && rows <= INT_MAX) {
    p.la = folded;
    p.n = rows;
  } else {
    p.batched = batch_count(c) > 1;
  }
  /* AMX computes c = op(a) op(b) or c += op(a) op(b): alpha 1, and beta 0 or 1 as gemm_block
   * passes it (a zeroed C goes with beta 1). */
  double block_beta = p.start == C_BIAS_ROW ? p.beta : p.start == C_ZERO ? 0 : p.beta;
  p.amx = cd == DT_F32 && alpha == 1 && (block_beta == 0 || block_beta == 1) && p.n <= INT_MAX &&
          dt__amx_worth((int)p.n, (int)p.m, (int)p.k) && dt__amx_usable();
  gemm_run(&p);
finish:
  if (c_temp) dt__cpu_copy(out, c_temp);
done:
  dt_tensor_release(a_copy);
  dt_tensor_release(b_copy);
  dt_tensor_release(c_temp);
  return st;
}

dt_status dt__cpu_matmul(const dt_tensor *a, const dt_tensor *b, const dt_tensor *bias, double beta,
                         double alpha, dt_tensor *out) {
  if (dt__tensor_numel(out) == 0) return DT_OK;
  if (!dt_dtype_is_floating(out->dtype)) {
    integer_matmul(a, b, bias, beta, alpha, out);
    return DT_OK;
  }
  return float_matmul(a, b, bias, beta, alpha, out);
}
