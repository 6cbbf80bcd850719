/*
 * The CUDA kernels' launchers (the .cu files of src/kernels/cuda/), callable from C. They see
 * tensors as dt_cuda_ref: a strided view of device memory (no library types, so the .cu files
 * include only this header, the host/device element headers and CUDA's), and enqueue on `stream` (a
 * cudaStream_t) without waiting. Each returns 0 or the cudaError_t of the launch.
 *
 * The element arithmetic is the CPU's (kernels/math/, tensor/element.h, tensor/philox.h),
 * so float32 elementwise results are the CPU's bits (nvcc --fmad=false, as the C build has
 * -ffp-contract=off), float64 differs by the math libraries' last place, and reductions
 * accumulate as the CPU does (double, compensated) but in a block's tree order: deterministic,
 * equal to the CPU up to the last bits of a double.
 *
 * Operands are broadcast by the caller: a ref's shape is the output's (ndim and sizes), with
 * stride 0 on broadcast dims. Byte offsets are computed in 32-bit integers when every offset
 * of the launch fits (the common case), in 64-bit otherwise.
 */
#ifndef DT_KERNELS_CUDA_KERNELS_H
#define DT_KERNELS_CUDA_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/elementwise.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DT_CUDA_MAX_DIMS 8

/* A strided view of device memory: element (0, ..., 0) at data; strides in elements. */
typedef struct dt_cuda_ref {
  char *data;
  int dtype; /* a dt_dtype */
  int ndim;
  int64_t shape[DT_CUDA_MAX_DIMS];
  int64_t strides[DT_CUDA_MAX_DIMS];
} dt_cuda_ref;

/* A scalar operand held by value (binary ops with a Scalar): `dtype` says how it is stored,
 * as the CPU keeps it (kernels/cpu/binary.c). */
typedef struct dt_cuda_scalar {
  int dtype;
  double value;
} dt_cuda_scalar;

/* ---- Pointwise (pointwise.cu) ---------------------------------------------------------- */
/* out = op(a); a has out's shape and dtype. */
int dt__cuda_launch_unary(void *stream, dt_unary_op op, const dt_cuda_ref *out,
                          const dt_cuda_ref *a);
/* out = g * gelu'(x) (tanh form when tanh_form); g, x of out's dtype, broadcast. */
int dt__cuda_launch_gelu_backward(void *stream, bool tanh_form, const dt_cuda_ref *out,
                                  const dt_cuda_ref *g, const dt_cuda_ref *x);
/* out = a <op> b (b NULL: the scalar s), converted as kernels/math/binary.h says. */
int dt__cuda_launch_binary(void *stream, dt_binary_op op, double alpha, const dt_cuda_ref *out,
                           const dt_cuda_ref *a, const dt_cuda_ref *b, dt_cuda_scalar s);
/* dst = src converted to dst's dtype (src broadcast). */
int dt__cuda_launch_copy(void *stream, const dt_cuda_ref *dst, const dt_cuda_ref *src);
/* out = cond ? a : b (cond bool). */
int dt__cuda_launch_where(void *stream, const dt_cuda_ref *out, const dt_cuda_ref *cond,
                          const dt_cuda_ref *a, const dt_cuda_ref *b);
/* out = mask ? value : a (mask bool, NULL: every element is value, a unused: fill). */
int dt__cuda_launch_masked_fill(void *stream, const dt_cuda_ref *out, const dt_cuda_ref *a,
                                const dt_cuda_ref *mask, double value);

/* ---- Reductions (reduce.cu) ---------------------------------------------------------------- */
typedef enum dt_cuda_reduce_kind {
  DT_CUDA_SUM,
  DT_CUDA_MEAN,
  DT_CUDA_MAX,
  DT_CUDA_MIN,
} dt_cuda_reduce_kind;

/* Reduces a over the dims whose bit is set in mask into values (contiguous, the kept dims
 * row-major; may be NULL) and indices (int64 contiguous, MAX/MIN only; may be NULL), as
 * kernels/cpu/reduce.h's dt__cpu_reduce. */
int dt__cuda_launch_reduce(void *stream, dt_cuda_reduce_kind kind, const dt_cuda_ref *a,
                           uint32_t mask, const dt_cuda_ref *values, const dt_cuda_ref *indices);

/* ---- Rows (rows.cu): softmax, norms, cross-entropy ------------------------------------------ */
/* softmax (log_softmax when take_log) of a along dim into out (a's shape). */
int dt__cuda_launch_softmax(void *stream, const dt_cuda_ref *a, int dim, bool take_log,
                            const dt_cuda_ref *out);
/* Layer norm (rms: RMS norm, bias unused) over the last ndims dims of x; weight and bias of
 * those dims' shape or NULL. */
int dt__cuda_launch_layer_norm(void *stream, bool rms, const dt_cuda_ref *x, int ndims,
                               const dt_cuda_ref *weight, const dt_cuda_ref *bias, double eps,
                               const dt_cuda_ref *out);
/* Batch norm over channel dim 1 of x [N, C, ...]: with running statistics mean and var [C]
 * (inference), or with the batch's (mean and var NULL: biased, two passes, per channel).
 * weight and bias [C] or NULL. scratch: 2 * C doubles of device memory (training only). */
int dt__cuda_launch_batch_norm(void *stream, const dt_cuda_ref *x, const dt_cuda_ref *mean,
                               const dt_cuda_ref *var, const dt_cuda_ref *weight,
                               const dt_cuda_ref *bias, double eps, double *scratch,
                               const dt_cuda_ref *out);
/* softmax_backward (log_softmax_backward when take_log): the input's gradient from grad g and
 * the forward's output y along dim, into out (y's shape). */
int dt__cuda_launch_softmax_backward(void *stream, const dt_cuda_ref *g, const dt_cuda_ref *y,
                                     int dim, bool take_log, const dt_cuda_ref *out);
/* The backward of layer norm (rms: RMS norm) over the last ndims dims of x: with dx, the
 * input's gradient (weight may be NULL; dx contiguous); otherwise the affine gradients dw and
 * db (NULL for RMS norm), contiguous of those dims' shape, from a scratch of 2 * rows doubles
 * of device memory. */
int dt__cuda_launch_norm_backward(void *stream, bool rms, const dt_cuda_ref *g,
                                  const dt_cuda_ref *x, int ndims, const dt_cuda_ref *weight,
                                  double eps, double *scratch, const dt_cuda_ref *dx,
                                  const dt_cuda_ref *dw, const dt_cuda_ref *db);
/* The per-row cross-entropy of logits [N, C] against target [N, 1] (int64, checked by the
 * caller) into out [N, 1]; with grad (not NULL) its backward into out [N, C]. */
int dt__cuda_launch_cross_entropy(void *stream, const dt_cuda_ref *grad, const dt_cuda_ref *logits,
                                  const dt_cuda_ref *target, bool has_ignore, int64_t ignore_index,
                                  double label_smoothing, const dt_cuda_ref *out);

/* ---- Indices (index.cu): embedding, scatter_add, the index checks --------------------------- */
/* The first row-major position of idx (int64 or int32, any strides) whose value is outside
 * [lo, hi) (and, when allow, not equal to allowed) into first[0], its value into first[1]
 * (2 int64 of device memory; first[0] = -1 when every value is valid). */
int dt__cuda_launch_check_index(void *stream, const dt_cuda_ref *idx, int64_t lo, int64_t hi,
                                bool allow, int64_t allowed, int64_t *first);
/* out[..., :] = weight[idx[...] - offset, :] for an index in [offset, offset + rows), zero rows
 * otherwise (the vocabulary-parallel window; offset 0 for a whole table). */
int dt__cuda_launch_embedding(void *stream, const dt_cuda_ref *weight, const dt_cuda_ref *idx,
                              int64_t offset, const dt_cuda_ref *out);
/* out (a copy of self already) [..., index - offset, ...] += src along dim for every position
 * of index whose value lies in [offset, offset + out's size along dim). Deterministic: one
 * thread per position off the dim, adding along the dim in order (as the CPU does). */
int dt__cuda_launch_scatter_add(void *stream, const dt_cuda_ref *out, int dim,
                                const dt_cuda_ref *index, const dt_cuda_ref *src, int64_t offset);

/* The vocabulary-parallel cross-entropy terms (kernels/cpu/loss.h's dt__cpu_vocab_terms) of
 * logits [N, C] holding classes [offset, offset + C), max [N, 1], target [N, 1] int64 into
 * out [N, terms]; with grad [N, terms] (not NULL) their gradient into out [N, C]. */
int dt__cuda_launch_vocab_terms(void *stream, const dt_cuda_ref *logits, const dt_cuda_ref *max,
                                const dt_cuda_ref *target, const dt_cuda_ref *grad, int64_t offset,
                                const dt_cuda_ref *out);

/* ---- Index and ordering (order.cu): tril/triu, cumsum, topk, index_select, gather -------- */
/* out = a with the elements off the kept triangle of the last two dims zeroed (upper: triu). */
int dt__cuda_launch_triangle(void *stream, const dt_cuda_ref *a, int64_t diagonal, bool upper,
                             const dt_cuda_ref *out);
/* out = the running sum of a along dim (floating in double, integers in int64). */
int dt__cuda_launch_cumsum(void *stream, const dt_cuda_ref *a, int dim, const dt_cuda_ref *out);
/* The k first elements of every line of a along dim in kernels/math/order.h's order, sorted,
 * into values (a's dtype) and indices (int64). */
int dt__cuda_launch_topk(void *stream, const dt_cuda_ref *a, int64_t k, int dim, bool largest,
                         const dt_cuda_ref *values, const dt_cuda_ref *indices);
/* index_select (gather false: index 1-D along dim) or gather (index of out's shape): out at p
 * is a at p with p[dim] = the index there minus offset, or zero where that is outside a (a row
 * window of a sharded a; offset 0 for a whole one). The indices are checked by the caller
 * first. */
int dt__cuda_launch_take(void *stream, const dt_cuda_ref *a, int dim, const dt_cuda_ref *index,
                         bool gather, int64_t offset, const dt_cuda_ref *out);

/* ---- Attention (attention.cu) ------------------------------------------------------------------
 */
/* out [B, H, T, Ev] and lse [B, H, T] of q [B, H, T, E], k [B, Hk, S, E], v [B, Hk, S, Ev] with
 * mask (bool or floating, NULL: none) seen through mask_strides as [B, H, T, S], as
 * kernels/cpu/attention.h's dt__cpu_attention. cudaErrorInvalidValue when E + Ev is too large
 * for the kernel's shared memory (about 5,000). */
int dt__cuda_launch_attention(void *stream, const dt_cuda_ref *q, const dt_cuda_ref *k,
                              const dt_cuda_ref *v, const dt_cuda_ref *mask,
                              const int64_t *mask_strides, bool causal, double scale,
                              const dt_cuda_ref *out, const dt_cuda_ref *lse);
/* Its gradients from gs [B, H, T, Ev + 2] (grad, lse, delta); dq, dk, dv may be NULL. */
int dt__cuda_launch_attention_backward(void *stream, const dt_cuda_ref *q, const dt_cuda_ref *k,
                                       const dt_cuda_ref *v, const dt_cuda_ref *mask,
                                       const int64_t *mask_strides, bool causal, double scale,
                                       const dt_cuda_ref *gs, const dt_cuda_ref *dq,
                                       const dt_cuda_ref *dk, const dt_cuda_ref *dv);

/* ---- Random (random.cu) -----------------------------------------------------------------------
 */
/* Fills out (contiguous) with the uniform stream of seed on [lo, hi): element e of out is
 * element flat(e) of the global tensor of global_shape whose block out is, starting at
 * offset (ndim entries each; ndim 0 or global_shape NULL: out is the whole tensor). */
int dt__cuda_launch_uniform(void *stream, const dt_cuda_ref *out, double lo, double hi,
                            uint64_t seed, int ndim, const int64_t *global_shape,
                            const int64_t *offset);

/* The text of a cudaError_t returned above. */
const char *dt__cuda_error_text(int error);

#ifdef __cplusplus
}
#endif

#endif /* DT_KERNELS_CUDA_KERNELS_H */
