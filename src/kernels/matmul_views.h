/*
 * How every device's GEMM sees a matmul's operands as matrices: handles on the stack that see
 * a tensor through another geometry, matmul's 1-D operands as one-row or one-column matrices,
 * linear as a matmul, the sizes a BLAS takes, and the batch of left rows that one GEMM can
 * take at once. Used by the CPU's kernels
 * (kernels/cpu/gemm.c, ops/matrix.c) and CUDA's (kernels/cuda/gemm_plan.c, op_gemm.c), so
 * that both read an operand the same way.
 */
#ifndef DT_KERNELS_MATMUL_VIEWS_H
#define DT_KERNELS_MATMUL_VIEWS_H

#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>

#include "tensor/tensor_impl.h"

/*
 * Fills *alias with a handle that sees base's storage through another geometry, without
 * taking a reference: it lives on the caller's stack, must not be retained or released, and
 * is valid only while base lives. Kernels use it to reshape operands (a 1-D vector as a
 * [1, k] matrix, weight^T for linear) without allocating a handle.
 */
static inline void dt__tensor_alias(dt_tensor *alias, const dt_tensor *base, int ndim,
                                    const int64_t *shape, const int64_t *strides, int64_t offset) {
  memset(alias, 0, sizeof *alias);
  alias->dtype = base->dtype;
  alias->ndim = ndim;
  for (int i = 0; i < ndim; i++) {
    alias->shape[i] = shape[i];
    alias->strides[i] = strides[i];
  }
  alias->offset = offset;
  alias->storage = base->storage;
}

/* matmul's 1-D operands as matrices, as PyTorch has them: a 1-D *a is a [1, k] row, a 1-D *b
 * a [k, 1] column, and *out (contiguous) is seen with those unit dims put back. The three are
 * then replaced by aliases held in the caller's views[3]; with no 1-D operand nothing changes. */
static inline void dt__matmul_as_matrices(const dt_tensor **a, const dt_tensor **b, dt_tensor **out,
                                          dt_tensor views[3]) {
  const dt_tensor *ta = *a, *tb = *b, *to = *out;
  bool a1 = ta->ndim == 1, b1 = tb->ndim == 1;
  if (!a1 && !b1) return;
  if (a1) {
    dt__tensor_alias(&views[0], ta, 2, (int64_t[]){1, ta->shape[0]}, (int64_t[]){0, ta->strides[0]},
                     ta->offset);
    *a = &views[0];
  }
  if (b1) {
    dt__tensor_alias(&views[1], tb, 2, (int64_t[]){tb->shape[0], 1}, (int64_t[]){tb->strides[0], 0},
                     tb->offset);
    *b = &views[1];
  }
  int bnd = to->ndim - (a1 ? 0 : 1) - (b1 ? 0 : 1);
  int64_t shape[DT_MAX_DIMS], strides[DT_MAX_DIMS];
  for (int i = 0; i < bnd; i++) shape[i] = to->shape[i];
  shape[bnd] = a1 ? 1 : to->shape[bnd];
  shape[bnd + 1] = b1 ? 1 : to->shape[to->ndim - 1];
  dt__contiguous_strides(bnd + 2, shape, strides);
  dt__tensor_alias(&views[2], to, bnd + 2, shape, strides, to->offset);
  *out = &views[2];
}

/* linear's x [..., in] @ weight^T as a matmul: weight^T is weight with its strides swapped,
 * which a BLAS reads as a transposed operand (no copy), and a 1-D x is a [1, in] row, out a
 * [1, out_features] one. Returns weight^T; *x and *out may be replaced. The aliases are held
 * in the caller's views[3]. */
static inline const dt_tensor *dt__linear_as_matmul(const dt_tensor **x, const dt_tensor *w,
                                                    dt_tensor **out, dt_tensor views[3]) {
  const dt_tensor *tx = *x;
  dt_tensor *to = *out;
  dt__tensor_alias(&views[0], w, 2, (int64_t[]){w->shape[1], w->shape[0]},
                   (int64_t[]){w->strides[1], w->strides[0]}, w->offset);
  if (tx->ndim == 1) {
    dt__tensor_alias(&views[1], tx, 2, (int64_t[]){1, tx->shape[0]}, (int64_t[]){0, tx->strides[0]},
                     tx->offset);
    dt__tensor_alias(&views[2], to, 2, (int64_t[]){1, to->shape[0]}, (int64_t[]){0, 1}, to->offset);
    *x = &views[1];
    *out = &views[2];
  }
  return &views[0];
}

/* The sizes of out [..., n, m] = a [..., n, k] @ b; DT_ERR_UNSUPPORTED naming op when one is
 * above INT_MAX, which `blas` (the library's name, for the message) cannot take. */
static inline dt_status dt__matmul_sizes(const char *op, const char *blas, const dt_tensor *a,
                                         const dt_tensor *out, int64_t *n, int64_t *m, int64_t *k) {
  *n = out->shape[out->ndim - 2], *m = out->shape[out->ndim - 1], *k = a->shape[a->ndim - 1];
  if (*n > INT_MAX || *m > INT_MAX || *k > INT_MAX) {
    return dt__error(DT_ERR_UNSUPPORTED,
                     "%s: sizes n=%" PRId64 ", m=%" PRId64 ", k=%" PRId64 " exceed what %s takes",
                     op, *n, *m, *k, blas);
  }
  return DT_OK;
}

/* When b has a single matrix and a's batch and row dims form one strided run (as in a
 * contiguous [B, S, k] activation), all of a's rows are *rows rows of one matrix with row
 * stride *row_stride, and the product is one GEMM of them into out (contiguous): fewer,
 * larger calls. False when they are not, when out is a single matrix, or for more than
 * INT_MAX rows. */
static inline bool dt__matmul_row_run(const dt_tensor *a, const dt_tensor *b, const dt_tensor *out,
                                      int64_t *rows, int64_t *row_stride) {
  if (out->ndim == 2 || dt__numel(b->ndim - 2, b->shape) != 1 ||
      dt__numel(a->ndim - 2, a->shape) != dt__numel(out->ndim - 2, out->shape)) {
    return false;
  }
  int64_t total = 1, rs = 0, next = 0;
  bool first = true;
  for (int d = a->ndim - 2; d >= 0; d--) {
    if (a->shape[d] == 1) continue;
    if (first) {
      rs = a->strides[d];
      first = false;
    } else if (a->strides[d] != next) {
      return false;
    }
    next = a->strides[d] * a->shape[d];
    total *= a->shape[d];
  }
  if (total > INT_MAX) return false;
  *rows = total;
  *row_stride = rs;
  return true;
}

#endif /* DT_KERNELS_MATMUL_VIEWS_H */
