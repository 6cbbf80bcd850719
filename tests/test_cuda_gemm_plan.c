/*
 * The CUDA GEMMs' mapping onto cuBLAS, on the CPU: dt__gemm_run (kernels/cuda/gemm_plan.c,
 * what op_gemm.c calls with cuBLAS as the launcher) drives a column-major reference GEMM that
 * follows cuBLAS's definition of cublasGemmStridedBatchedEx and checks its argument rules
 * (leading dimensions, sizes), and the products must equal a naive row-major loop over the
 * operands' strides: transposed and strided views, broadcast and merged batch dims, folded
 * rows, 1-row and 1-column matrices.
 *
 * Includes kernels/cuda/gemm_plan.h and tensor/tensor_impl.h (private): the mapping has no
 * public face and must be tested without a GPU.
 */
#include <criterion/criterion.h>
#include <limits.h>
#include <math.h>

#include "dtensor/dtensor.h"
#include "kernels/cuda/gemm_plan.h"

/* cublasGemmStridedBatchedEx's semantics on doubles (alpha 1, beta 0), with its checks. */
typedef struct reference_counts {
  int launches;
  int64_t batches;
} reference_counts;

static dt_status reference_launch(void *context, const dt_gemm_launch *l) {
  reference_counts *counts = context;
  counts->launches++;
  counts->batches += l->batch;
  cr_assert(l->m >= 1 && l->n >= 1 && l->k >= 1 && l->batch >= 1);
  cr_assert(l->m <= INT_MAX && l->n <= INT_MAX && l->k <= INT_MAX && l->batch <= INT_MAX);
  int64_t rows_a = l->trans_a ? l->k : l->m, rows_b = l->trans_b ? l->n : l->k;
  cr_assert(l->lda >= (rows_a > 1 ? rows_a : 1), "lda %ld < %ld", (long)l->lda, (long)rows_a);
  cr_assert(l->ldb >= (rows_b > 1 ? rows_b : 1), "ldb %ld < %ld", (long)l->ldb, (long)rows_b);
  cr_assert(l->ldc >= (l->m > 1 ? l->m : 1));
  for (int64_t t = 0; t < l->batch; t++) {
    const double *a = (const double *)l->a + t * l->stride_a;
    const double *b = (const double *)l->b + t * l->stride_b;
    double *c = (double *)l->c + t * l->stride_c;
    for (int64_t j = 0; j < l->n; j++) {
      for (int64_t i = 0; i < l->m; i++) {
        double s = 0;
        for (int64_t p = 0; p < l->k; p++) {
          double x = l->trans_a ? a[p + i * l->lda] : a[i + p * l->lda];
          double y = l->trans_b ? b[j + p * l->ldb] : b[p + j * l->ldb];
          s += x * y;
        }
        c[i + j * l->ldc] = s;
      }
    }
  }
  return DT_OK;
}

/* Element (batch index of out, i, j) of a through its strides, its batch dims broadcast. */
static double at(const dt_tensor *t, const int64_t *out_batch, int out_nb, int64_t i, int64_t j) {
  const double *base = (const double *)dt__tensor_base(t);
  int nb = t->ndim - 2;
  int64_t off = i * t->strides[nb] + j * t->strides[nb + 1];
  for (int d = 0; d < nb; d++) {
    int od = out_nb - nb + d;
    if (t->shape[d] != 1) off += out_batch[od] * t->strides[d];
  }
  return base[off];
}

/* out (contiguous) == a @ b by a naive loop. */
static void check_product(const dt_tensor *a, const dt_tensor *b, const dt_tensor *out) {
  int nb = out->ndim - 2;
  int64_t n = out->shape[nb], m = out->shape[nb + 1], k = a->shape[a->ndim - 1];
  int64_t batches = dt__numel(nb, out->shape), idx[DT_MAX_DIMS] = {0};
  const double *o = (const double *)dt__tensor_base(out);
  for (int64_t t = 0; t < batches; t++) {
    for (int64_t i = 0; i < n; i++) {
      for (int64_t j = 0; j < m; j++) {
        double s = 0;
        for (int64_t p = 0; p < k; p++) s += at(a, idx, nb, i, p) * at(b, idx, nb, p, j);
        double got = o[(t * n + i) * m + j];
        cr_assert(fabs(got - s) <= 1e-12 * (1 + fabs(s)), "batch %ld (%ld, %ld): %g, expected %g",
                  (long)t, (long)i, (long)j, got, s);
      }
    }
    for (int d = nb - 1; d >= 0 && ++idx[d] == out->shape[d]; d--) idx[d] = 0;
  }
}

static dt_tensor *random_f64(int ndim, const int64_t *shape, uint64_t seed) {
  dt_tensor *t = NULL;
  cr_assert_eq(dt_randn(ndim, shape, DT_F64, seed, &t), DT_OK, "%s", dt_last_error());
  return t;
}

/* Runs a @ b through dt__gemm_run and the reference launcher (copying an operand without a
 * layout first, as op_gemm.c does) and checks it; returns the launch counts. Takes a's and
 * b's references (keep() what is used again). */
static reference_counts run(dt_tensor *a, dt_tensor *b) {
  dt_tensor *ca = NULL, *cb = NULL, *out = NULL;
  dt_gemm_layout layout;
  if (!dt__gemm_matrix_layout(a, &layout)) cr_assert_eq(dt_contiguous(a, &ca), DT_OK);
  if (!dt__gemm_matrix_layout(b, &layout)) cr_assert_eq(dt_contiguous(b, &cb), DT_OK);
  const dt_tensor *ta = ca ? ca : a, *tb = cb ? cb : b;
  /* The output's shape: broadcast batch dims, then [n, m]. */
  int nb = (a->ndim > b->ndim ? a->ndim : b->ndim) - 2;
  int64_t shape[DT_MAX_DIMS];
  for (int d = 0; d < nb; d++) {
    int da = a->ndim - 2 - nb + d, db = b->ndim - 2 - nb + d;
    int64_t sa = da >= 0 ? a->shape[da] : 1, sb = db >= 0 ? b->shape[db] : 1;
    shape[d] = sa > sb ? sa : sb;
  }
  shape[nb] = a->shape[a->ndim - 2];
  shape[nb + 1] = b->shape[b->ndim - 1];
  cr_assert_eq(dt_full(nb + 2, shape, NAN, DT_F64, &out), DT_OK);
  reference_counts counts = {0};
  cr_assert_eq(dt__gemm_run("test", ta, tb, out, reference_launch, &counts), DT_OK, "%s",
               dt_last_error());
  check_product(ta, tb, out);
  dt_tensor_release(ca);
  dt_tensor_release(cb);
  dt_tensor_release(out);
  dt_tensor_release(a);
  dt_tensor_release(b);
  return counts;
}

static dt_tensor *keep(dt_tensor *t) { return dt_tensor_retain(t); }

static dt_tensor *transposed(dt_tensor *t, int d0, int d1) {
  dt_tensor *v = NULL;
  cr_assert_eq(dt_transpose(t, d0, d1, &v), DT_OK);
  dt_tensor_release(t);
  return v;
}

Test(cuda_gemm_plan, layouts_of_row_and_column_major_matrices) {
  dt_gemm_layout l;
  cr_assert(dt__gemm_layout_of(5, 7, 7, 1, &l) && !l.transposed && l.ld == 7);
  cr_assert(dt__gemm_layout_of(5, 7, 10, 1, &l) && !l.transposed && l.ld == 10); /* narrowed */
  cr_assert(dt__gemm_layout_of(5, 7, 1, 5, &l) && l.transposed && l.ld == 5);    /* a.t() */
  cr_assert(dt__gemm_layout_of(1, 7, 0, 1, &l) && !l.transposed && l.ld == 7);   /* 1 row */
  cr_assert(dt__gemm_layout_of(1, 7, 0, 3, &l) && l.transposed && l.ld == 3);    /* strided row */
  cr_assert(dt__gemm_layout_of(7, 1, 3, 0, &l) && !l.transposed && l.ld == 3);   /* 1 column */
  cr_assert(dt__gemm_layout_of(1, 1, 0, 0, &l) && l.ld == 1);
  cr_assert_not(dt__gemm_layout_of(5, 7, 14, 2, &l)); /* every other column: copy */
  cr_assert_not(dt__gemm_layout_of(5, 7, 3, 1, &l));  /* rows overlap: ld < cols */
  cr_assert_not(dt__gemm_layout_of(2, 3, (int64_t)INT_MAX + 1, 1, &l));
}

Test(cuda_gemm_plan, matrices_plain_transposed_strided) {
  dt_tensor *a = random_f64(2, (int64_t[]){5, 7}, 1), *b = random_f64(2, (int64_t[]){7, 3}, 2);
  cr_assert_eq(run(keep(a), keep(b)).launches, 1);
  dt_tensor *at_ = transposed(random_f64(2, (int64_t[]){7, 5}, 3), 0, 1);
  dt_tensor *bt = transposed(random_f64(2, (int64_t[]){3, 7}, 4), 0, 1);
  run(keep(at_), keep(b));
  run(keep(a), keep(bt));
  run(keep(at_), keep(bt));
  /* Every other column: no layout, copied first. */
  dt_tensor *wide = random_f64(2, (int64_t[]){5, 14}, 5), *s = NULL;
  cr_assert_eq(dt_slice(wide, 1, 0, 14, 2, &s), DT_OK);
  dt_gemm_layout l;
  cr_assert_not(dt__gemm_matrix_layout(s, &l));
  run(keep(s), keep(b));
  /* Narrowed rows (row stride above the row length), 1-row, 1-column, k = 1. */
  dt_tensor *n = NULL;
  cr_assert_eq(dt_narrow(wide, 1, 3, 7, &n), DT_OK);
  run(keep(n), keep(b));
  run(random_f64(2, (int64_t[]){1, 7}, 6), keep(b));
  run(keep(a), random_f64(2, (int64_t[]){7, 1}, 7));
  run(random_f64(2, (int64_t[]){5, 1}, 8), random_f64(2, (int64_t[]){1, 3}, 9));
  dt_tensor *all[] = {a, b, at_, bt, wide, s, n};
  for (int i = 0; i < 7; i++) dt_tensor_release(all[i]);
}

Test(cuda_gemm_plan, batches_merged_broadcast_and_folded) {
  /* bmm: one strided-batched launch of 4. */
  reference_counts c =
      run(random_f64(3, (int64_t[]){4, 5, 7}, 11), random_f64(3, (int64_t[]){4, 7, 3}, 12));
  cr_assert(c.launches == 1 && c.batches == 4);
  /* Transposed matrices inside a batch. */
  run(transposed(random_f64(3, (int64_t[]){4, 7, 5}, 13), 1, 2),
      transposed(random_f64(3, (int64_t[]){4, 3, 7}, 14), 1, 2));
  /* 4-D contiguous: the two batch dims merge into one launch of 6. */
  c = run(random_f64(4, (int64_t[]){2, 3, 5, 7}, 15), random_f64(4, (int64_t[]){2, 3, 7, 4}, 16));
  cr_assert(c.launches == 1 && c.batches == 6, "%d launches, %ld batches", c.launches,
            (long)c.batches);
  /* Broadcast [2, 1] x [3]: b repeats (stride 0) across a's batch. */
  run(random_f64(4, (int64_t[]){2, 1, 5, 7}, 17), random_f64(3, (int64_t[]){3, 7, 4}, 18));
  /* A batch dim of b broadcast inside a's: two merged dims cannot merge, so 2 launches of 3. */
  c = run(random_f64(4, (int64_t[]){2, 3, 5, 7}, 19), random_f64(4, (int64_t[]){2, 1, 7, 4}, 20));
  cr_assert(c.launches == 2 && c.batches == 6, "%d launches, %ld batches", c.launches,
            (long)c.batches);
  /* One right-hand matrix and a contiguous left: one GEMM of 2 * 6 rows. */
  c = run(random_f64(3, (int64_t[]){2, 6, 7}, 21), random_f64(2, (int64_t[]){7, 4}, 22));
  cr_assert(c.launches == 1 && c.batches == 1);
  /* The same with rows that do not run on (a narrowed middle dim): batched instead. */
  dt_tensor *big = random_f64(3, (int64_t[]){2, 8, 7}, 23), *nar = NULL;
  cr_assert_eq(dt_narrow(big, 1, 1, 6, &nar), DT_OK);
  c = run(keep(nar), random_f64(2, (int64_t[]){7, 4}, 24));
  cr_assert(c.launches == 1 && c.batches == 2);
  /* An expanded (stride 0) batch of a. */
  dt_tensor *one = random_f64(3, (int64_t[]){1, 5, 7}, 25), *ex = NULL;
  cr_assert_eq(dt_expand(one, 3, (int64_t[]){3, 5, 7}, &ex), DT_OK);
  run(keep(ex), random_f64(3, (int64_t[]){3, 7, 2}, 26));
  dt_tensor_release(big);
  dt_tensor_release(nar);
  dt_tensor_release(one);
  dt_tensor_release(ex);
}
