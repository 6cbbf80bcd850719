/*
 * CPU kernels of the matrix family (GEMM through CBLAS) and of the gather-style NN ops
 * (embedding, cat, stack). Like every kernel, they take arguments the op layer has already
 * validated; they fail only for reasons found while computing (an index out of range, a
 * temporary that cannot be allocated, a size CBLAS cannot express).
 */
#ifndef DT_KERNELS_CPU_MATRIX_H
#define DT_KERNELS_CPU_MATRIX_H

#include "kernels/matmul_views.h"
#include "tensor/tensor_impl.h"

/*
 * out = beta * bias + alpha * (a @ b), batched with broadcasting:
 *   a   [batch_a..., n, k]  (ndim >= 2, any strides, any dtype but bool)
 *   b   [batch_b..., k, m]  (ndim >= 2)
 *   out [batch..., n, m]    contiguous, batch = broadcast(batch_a, batch_b)
 *   bias broadcastable to out's shape, or NULL (then beta is ignored); beta == 0 ignores
 *   bias entirely (NaNs in it do not propagate), as in PyTorch.
 * Floating outputs compute in f64 for f64 and in f32 otherwise through cblas_?gemm;
 * operands CBLAS cannot address (other dtype, neither row- nor column-contiguous) are
 * copied first. Integer outputs use an exact int64 loop (wrapping on overflow).
 * A contiguous f32 product of f32 operands is one cblas_sgemm call into out, no copy.
 */
dt_status dt__cpu_matmul(const dt_tensor *a, const dt_tensor *b, const dt_tensor *bias, double beta,
                         double alpha, dt_tensor *out);

/* out[..., :] = weight[indices[...], :]. out is contiguous [indices.shape..., dim]; indices
 * are int64 or int32. Every index is checked against [0, num) before anything is written:
 * DT_ERR_INDEX names `op`, the index value and num. */
dt_status dt__cpu_embedding(const char *op, const dt_tensor *weight, const dt_tensor *indices,
                            dt_tensor *out);

/* The vocabulary-parallel lookup on one shard: weight holds rows [offset, offset + rows) of
 * a table of `total` rows. Indices are checked against [0, total) first (DT_ERR_INDEX);
 * an index outside this shard's rows gives a zero row. */
dt_status dt__cpu_embedding_window(const char *op, const dt_tensor *weight,
                                   const dt_tensor *indices, int64_t offset, int64_t total,
                                   dt_tensor *out);

/* The embedding's weight gradient on a window of rows [offset, offset + out's rows) of a table
 * of `total` rows: out [rows, dim] is zeroed, then grad's row r ([indices.shape..., dim], any
 * strides) is added into row indices[r] - offset when that row is in the window (repeated
 * indices accumulate). Indices are checked against [0, total) first (DT_ERR_INDEX). */
dt_status dt__cpu_embedding_backward(const char *op, const dt_tensor *indices,
                                     const dt_tensor *grad, int64_t offset, int64_t total,
                                     dt_tensor *out);

/* Copies tensors[i] (converted to out's dtype) into out along dim, one after the other.
 * When `stack` is true each tensor fills index i of out's dim (the tensors lack that dim);
 * otherwise tensor i fills its own extent along dim. Tensors without elements contribute
 * nothing and are passed over (cat's legacy 1-D empty tensors among them, whatever their
 * rank). out is contiguous. */
void dt__cpu_concat(int n, dt_tensor *const *tensors, int dim, bool stack, dt_tensor *out);

#endif /* DT_KERNELS_CPU_MATRIX_H */
