/*
 * How a row-major batched product maps onto a column-major BLAS (cuBLAS): plain C, no cuBLAS
 * types, compiled in every build so that tests/test_cuda_gemm_plan.c checks the mapping on the
 * CPU against a column-major reference GEMM (op_gemm.c is its only other user).
 *
 * out = a @ b in row-major terms is out^T = b^T @ a^T in column-major ones: a matrix whose
 * rows are contiguous is, read column-major, its own transpose with the row stride as leading
 * dimension (no transpose flag), and one whose columns are contiguous (a transposed view) is
 * passed with the transpose flag and its column stride.
 */
#ifndef DT_KERNELS_CUDA_GEMM_PLAN_H
#define DT_KERNELS_CUDA_GEMM_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "tensor/tensor_impl.h"

/* How the BLAS reads one [rows, cols] operand: transposed flag and leading dimension. */
typedef struct dt_gemm_layout {
  bool transposed;
  int64_t ld;
} dt_gemm_layout;

/* The layout of a [rows, cols] matrix with strides (rs, cs); false when it has none (neither
 * rows nor columns contiguous, or a leading dimension above INT_MAX): copy it first. */
bool dt__gemm_layout_of(int64_t rows, int64_t cols, int64_t rs, int64_t cs, dt_gemm_layout *out);

/* The layout of t's last two dims (t->ndim >= 2). */
bool dt__gemm_matrix_layout(const dt_tensor *t, dt_gemm_layout *out);

/* When b has one matrix and a's batch and row dims form one strided run, the product is one
 * GEMM of all of a's rows (rows of them, read with *layout, never transposed); out must be
 * contiguous. */
bool dt__gemm_fold_rows(const dt_tensor *a, const dt_tensor *b, const dt_tensor *out, int64_t *rows,
                        dt_gemm_layout *layout);

/* out's batch dims (all but the last two), each with the element strides of a, b (0 where
 * they broadcast) and out, size-1 dims dropped and neighbours merged where all three run on:
 * the product is a loop over dims [0, nb - 1) of strided-batched GEMMs over dim nb - 1. */
typedef struct dt_gemm_batches {
  int nb;
  int64_t shape[DT_MAX_DIMS];
  int64_t sa[DT_MAX_DIMS], sb[DT_MAX_DIMS], sc[DT_MAX_DIMS];
} dt_gemm_batches;

void dt__gemm_batches(const dt_tensor *a, const dt_tensor *b, const dt_tensor *out,
                      dt_gemm_batches *bd);

/* One strided-batched column-major GEMM as the BLAS takes it: for each of `batch` matrices,
 * C = op(A) op(B) (scaled as the caller's BLAS call says), op(A) [m, k], op(B) [k, n], C [m, n]
 * with leading dimension ldc; op(X) = X^T when trans_x. A is the product's b, B its a (the
 * column-major view of out^T = b^T a^T). Pointers to element 0, strides in elements. */
typedef struct dt_gemm_launch {
  bool trans_a, trans_b;
  int64_t m, n, k;
  const char *a;
  int64_t lda, stride_a;
  const char *b;
  int64_t ldb, stride_b;
  char *c;
  int64_t ldc, stride_c;
  int64_t batch;
} dt_gemm_launch;

typedef dt_status (*dt_gemm_launch_fn)(void *context, const dt_gemm_launch *launch);

/* out = a @ b over every batch, as launches of fn: a [..., n, k] and b [..., k, m] whose last
 * two dims have a layout (dt__gemm_matrix_layout: the caller copied those that had none),
 * batch dims broadcasting to out's; out [..., n, m] contiguous and not empty, k > 0. A single
 * right-hand matrix and a strided run of left rows is one launch of all the rows; otherwise
 * one strided-batched launch per index of the outer merged batch dims. DT_ERR_UNSUPPORTED naming
 * op when a size exceeds INT_MAX (cuBLAS's int arguments); fn's first failure is returned. */
dt_status dt__gemm_run(const char *op, const dt_tensor *a, const dt_tensor *b, dt_tensor *out,
                       dt_gemm_launch_fn fn, void *context);

#endif /* DT_KERNELS_CUDA_GEMM_PLAN_H */
