/*
 * libdtensor — operations on tensors.
 *
 * Every function here goes through one dispatch entry point, so it works on local and on
 * distributed tensors alike. Names follow ATen (add.Tensor, mm, addmm, ...), which is what
 * traces, benchmarks and `dtensor info --ops` print.
 *
 * Conventions for every function below:
 * - Inputs are borrowed. A result returned through `dt_tensor **out` is a new reference the
 *   caller releases. On any failure *out is set to NULL and nothing was written anywhere.
 * - Dims may be negative (counting from the end), as in PyTorch.
 * - Errors: DT_ERR_INVALID (NULL argument, bad dim, bad attribute), DT_ERR_SHAPE
 *   (incompatible shapes), DT_ERR_DTYPE (a dtype the op does not take), DT_ERR_INDEX
 *   (an index out of range), DT_ERR_NOMEM. dt_last_error() names the op, the argument and
 *   the shapes involved.
 * - Binary ops broadcast (NumPy rules) and promote dtypes (dt_dtype_promote). A scalar
 *   operand takes the tensor's dtype, except that a non-integral scalar with an integer
 *   tensor gives float32, as in PyTorch.
 * - "View" results share storage with their input (no copy).
 */
#ifndef DTENSOR_OPS_H
#define DTENSOR_OPS_H

#include "dtensor/core.h"
#include "dtensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Pointwise unary (floating dtypes; neg and abs also take integers) -------------- */
DT_API dt_status dt_neg(dt_tensor *a, dt_tensor **out);
DT_API dt_status dt_abs(dt_tensor *a, dt_tensor **out);
DT_API dt_status dt_exp(dt_tensor *a, dt_tensor **out);
DT_API dt_status dt_log(dt_tensor *a, dt_tensor **out);
DT_API dt_status dt_sqrt(dt_tensor *a, dt_tensor **out);
DT_API dt_status dt_rsqrt(dt_tensor *a, dt_tensor **out);
DT_API dt_status dt_relu(dt_tensor *a, dt_tensor **out);
/* GELU with the exact erf form; dt_gelu_tanh uses PyTorch's approximate="tanh". */
DT_API dt_status dt_gelu(dt_tensor *a, dt_tensor **out);
DT_API dt_status dt_gelu_tanh(dt_tensor *a, dt_tensor **out);
DT_API dt_status dt_silu(dt_tensor *a, dt_tensor **out);
DT_API dt_status dt_tanh(dt_tensor *a, dt_tensor **out);
DT_API dt_status dt_sigmoid(dt_tensor *a, dt_tensor **out);
/* Sine and cosine (radians); float32 through libm's sinf/cosf, exact argument reduction. */
DT_API dt_status dt_sin(dt_tensor *a, dt_tensor **out);
DT_API dt_status dt_cos(dt_tensor *a, dt_tensor **out);

/* ---- Pointwise binary, with broadcasting ---------------------------------------------- */
/* out = a + alpha * b (dt_add: alpha = 1). */
DT_API dt_status dt_add(dt_tensor *a, dt_tensor *b, dt_tensor **out);
DT_API dt_status dt_add_ex(dt_tensor *a, dt_tensor *b, double alpha, dt_tensor **out);
/* out = a - alpha * b (dt_sub: alpha = 1). */
DT_API dt_status dt_sub(dt_tensor *a, dt_tensor *b, dt_tensor **out);
DT_API dt_status dt_sub_ex(dt_tensor *a, dt_tensor *b, double alpha, dt_tensor **out);
DT_API dt_status dt_mul(dt_tensor *a, dt_tensor *b, dt_tensor **out);
/* True division: integer inputs give float32. */
DT_API dt_status dt_div(dt_tensor *a, dt_tensor *b, dt_tensor **out);
DT_API dt_status dt_maximum(dt_tensor *a, dt_tensor *b, dt_tensor **out);
DT_API dt_status dt_minimum(dt_tensor *a, dt_tensor *b, dt_tensor **out);
DT_API dt_status dt_pow(dt_tensor *a, dt_tensor *b, dt_tensor **out);

/* Scalar forms: out = a <op> s. */
DT_API dt_status dt_add_scalar(dt_tensor *a, double s, dt_tensor **out);
DT_API dt_status dt_sub_scalar(dt_tensor *a, double s, dt_tensor **out);
DT_API dt_status dt_mul_scalar(dt_tensor *a, double s, dt_tensor **out);
DT_API dt_status dt_div_scalar(dt_tensor *a, double s, dt_tensor **out);
DT_API dt_status dt_pow_scalar(dt_tensor *a, double s, dt_tensor **out);

/* In-place forms: a <op>= b. b broadcasts to a's shape (a's shape never changes); the
 * result is cast to a's dtype. DT_ERR_SHAPE if b does not broadcast to a. */
DT_API dt_status dt_add_(dt_tensor *a, dt_tensor *b);
DT_API dt_status dt_sub_(dt_tensor *a, dt_tensor *b);
DT_API dt_status dt_mul_(dt_tensor *a, dt_tensor *b);
DT_API dt_status dt_div_(dt_tensor *a, dt_tensor *b);
DT_API dt_status dt_add_scalar_(dt_tensor *a, double s);
DT_API dt_status dt_mul_scalar_(dt_tensor *a, double s);
/* Sets every element of a to value. */
DT_API dt_status dt_fill_(dt_tensor *a, double value);

/* ---- Comparisons (result dtype bool), where, masked_fill --------------------------- */
DT_API dt_status dt_eq(dt_tensor *a, dt_tensor *b, dt_tensor **out);
DT_API dt_status dt_ne(dt_tensor *a, dt_tensor *b, dt_tensor **out);
DT_API dt_status dt_lt(dt_tensor *a, dt_tensor *b, dt_tensor **out);
DT_API dt_status dt_le(dt_tensor *a, dt_tensor *b, dt_tensor **out);
DT_API dt_status dt_gt(dt_tensor *a, dt_tensor *b, dt_tensor **out);
DT_API dt_status dt_ge(dt_tensor *a, dt_tensor *b, dt_tensor **out);
DT_API dt_status dt_eq_scalar(dt_tensor *a, double s, dt_tensor **out);
DT_API dt_status dt_ne_scalar(dt_tensor *a, double s, dt_tensor **out);
DT_API dt_status dt_lt_scalar(dt_tensor *a, double s, dt_tensor **out);
DT_API dt_status dt_le_scalar(dt_tensor *a, double s, dt_tensor **out);
DT_API dt_status dt_gt_scalar(dt_tensor *a, double s, dt_tensor **out);
DT_API dt_status dt_ge_scalar(dt_tensor *a, double s, dt_tensor **out);
/* out = cond ? a : b, all three broadcast together; cond must be bool. */
DT_API dt_status dt_where(dt_tensor *cond, dt_tensor *a, dt_tensor *b, dt_tensor **out);
/* out = mask ? value : a; mask (bool) broadcasts to a's shape. */
DT_API dt_status dt_masked_fill(dt_tensor *a, dt_tensor *mask, double value, dt_tensor **out);

/* ---- Reductions ------------------------------------------------------------------------ */
/* Over all elements: a 0-d result. sum of an integer or bool tensor gives int64; mean
 * needs a floating dtype. */
DT_API dt_status dt_sum(dt_tensor *a, dt_tensor **out);
DT_API dt_status dt_mean(dt_tensor *a, dt_tensor **out);
DT_API dt_status dt_max(dt_tensor *a, dt_tensor **out);
DT_API dt_status dt_min(dt_tensor *a, dt_tensor **out);
/* Index of the largest element of the flattened tensor (int64, 0-d). */
DT_API dt_status dt_argmax(dt_tensor *a, dt_tensor **out);
/* Over the listed dims (ndims of them, distinct); keepdim keeps them as size 1.
 * ndims == 0 reduces over every dim, as PyTorch's dim=None. */
DT_API dt_status dt_sum_dims(dt_tensor *a, int ndims, const int64_t *dims, bool keepdim,
                             dt_tensor **out);
DT_API dt_status dt_mean_dims(dt_tensor *a, int ndims, const int64_t *dims, bool keepdim,
                              dt_tensor **out);
DT_API dt_status dt_amax(dt_tensor *a, int ndims, const int64_t *dims, bool keepdim,
                         dt_tensor **out);
DT_API dt_status dt_amin(dt_tensor *a, int ndims, const int64_t *dims, bool keepdim,
                         dt_tensor **out);
/* max.dim / min.dim: values and int64 indices (first occurrence) along one dim. */
DT_API dt_status dt_max_dim(dt_tensor *a, int64_t dim, bool keepdim, dt_tensor **values,
                            dt_tensor **indices);
DT_API dt_status dt_min_dim(dt_tensor *a, int64_t dim, bool keepdim, dt_tensor **values,
                            dt_tensor **indices);
DT_API dt_status dt_argmax_dim(dt_tensor *a, int64_t dim, bool keepdim, dt_tensor **out);

/* ---- Matrix ops (f32/f64 through CBLAS; bf16/f16 computed in f32; integer dtypes exact
 * in int64, not fast; bool is DT_ERR_DTYPE). Any strides; dtypes promote. --------------- */
/* [n, k] @ [k, m] -> [n, m]. */
DT_API dt_status dt_mm(dt_tensor *a, dt_tensor *b, dt_tensor **out);
/* [B, n, k] @ [B, k, m] -> [B, n, m]. */
DT_API dt_status dt_bmm(dt_tensor *a, dt_tensor *b, dt_tensor **out);
/* torch.matmul: 1-D and 2-D cases and broadcast batch dims. */
DT_API dt_status dt_matmul(dt_tensor *a, dt_tensor *b, dt_tensor **out);
/* out = beta * bias + alpha * (a @ b); bias broadcasts to [n, m]. dt_addmm: beta = alpha = 1. */
DT_API dt_status dt_addmm(dt_tensor *bias, dt_tensor *a, dt_tensor *b, dt_tensor **out);
DT_API dt_status dt_addmm_ex(dt_tensor *bias, dt_tensor *a, dt_tensor *b, double beta, double alpha,
                             dt_tensor **out);
/* out = x @ weight^T + bias; weight is [out_features, in_features] as in PyTorch; bias may
 * be NULL. x may have any leading batch dims. */
DT_API dt_status dt_linear(dt_tensor *x, dt_tensor *weight, dt_tensor *bias, dt_tensor **out);

/* ---- Neural-network ops ---------------------------------------------------------------- */
/* Rows of weight [num, dim] picked by indices (int64 or int32, any shape) -> [..., dim].
 * An index outside [0, num) is DT_ERR_INDEX, checked before anything is written. */
DT_API dt_status dt_embedding(dt_tensor *weight, dt_tensor *indices, dt_tensor **out);
/* PyTorch's scatter_add: a copy of self with src[i] added at position index[i] along dim,
 * for every position i of index (int64 or int32; self, index and src have the same number
 * of dims, index no larger than src in any dim nor than self outside dim; self and src one
 * dtype). The backward formulas of embedding and max.dim use it. Errors: DT_ERR_INVALID
 * (NULL argument), DT_ERR_DTYPE, DT_ERR_SHAPE, DT_ERR_INDEX (an index outside
 * [0, self's size along dim), checked before anything is written). */
DT_API dt_status dt_scatter_add(dt_tensor *self, int64_t dim, dt_tensor *index, dt_tensor *src,
                                dt_tensor **out);
DT_API dt_status dt_softmax(dt_tensor *a, int64_t dim, dt_tensor **out);
DT_API dt_status dt_log_softmax(dt_tensor *a, int64_t dim, dt_tensor **out);
/* PyTorch's layer_norm: (x - mean) / sqrt(var + eps) * weight + bias, mean and biased
 * variance over the last ndims dims of x, which must equal normalized_shape[0..ndims) (for a
 * [B, T, D] x over D: ndims 1, normalized_shape {D}); weight and bias (normalized_shape, may
 * be NULL) are floating. Differentiable in x, weight and bias. Distributed: shards of the
 * leading dims stay; a shard of a normalized dim is moved off it first (to Replicate, or to a
 * leading dim when cheaper: a [4, 6] S(1) x gives an S(0) output). x, weight and bias are all
 * local or all distributed (a local weight beside a distributed x is DT_ERR_INVALID): a TP
 * model's local LayerNorm runs on the local activation, which then enters the TP region
 * through dt_dist_from_local(Replicate) (examples/tp_mlp_clip.c).
 * Errors: DT_ERR_INVALID (NULL x or out, ndims < 1, NULL normalized_shape, eps not finite or
 * < 0), DT_ERR_SHAPE (x does not end with normalized_shape, weight or bias of another shape),
 * DT_ERR_DTYPE (a non-floating argument). */
DT_API dt_status dt_layer_norm(dt_tensor *x, int ndims, const int64_t *normalized_shape,
                               dt_tensor *weight, dt_tensor *bias, double eps, dt_tensor **out);
/* RMS norm over the last ndims dims (PyTorch's rms_norm, fused): x * rsqrt(mean(x^2) + eps) *
 * weight; weight (normalized_shape, may be NULL). Statistics in double. Errors: as layer_norm,
 * DT_ERR_INVALID for eps not finite or < 0. */
DT_API dt_status dt_rms_norm(dt_tensor *x, int ndims, const int64_t *normalized_shape,
                             dt_tensor *weight, double eps, dt_tensor **out);

/* Options of dt_scaled_dot_product_attention. Zero-initialised: no causal mask, scale
 * 1/sqrt(E). */
typedef struct dt_attention_options {
  bool is_causal; /* query i keeps keys j <= i (PyTorch's top-left alignment) */
  double scale;   /* > 0; 0: 1/sqrt(E) */
} dt_attention_options;

/* Fused attention (flash style: the [T, S] scores are never stored; memory O(tile)): out =
 * softmax(scale q k^T + mask) v for q [B, H, T, E], k [B, Hk, S, E], v [B, Hk, S, Ev] with Hk
 * dividing H (grouped-query attention: query head h reads kv head h / (H / Hk)). mask may be NULL,
 * bool (true: the pair takes part, as PyTorch's attn_mask) or of q's dtype (added to the scores),
 * broadcasting to [B, H, T, S]. *lse (may be NULL) receives the log-sum-exp of each query's scores
 * [B, H, T] (float32, float64 for float64 inputs); a query that keeps no key (every pair masked, or
 * S = 0) gets zero outputs (PyTorch's), lse -inf and no gradient. Differentiable in q, k, v (not in
 * a float mask). Distributed: batch or heads sharded (a shard may hold no heads) run without
 * communication, and so does the non-causal forward with q sharded on the sequence (dim 2) and k, v
 * replicated. Errors: DT_ERR_SHAPE (not 4-D, sizes that disagree, a mask that does not broadcast),
 * DT_ERR_DTYPE (dtypes differ, not floating), DT_ERR_INVALID (NULL out, a scale not finite or < 0,
 * or above FLT_MAX for float32, float16 or bfloat16 inputs). E = 0 gives every query the mean of
 * its values. On the CPU float16 and bfloat16 run the float32 kernel on float32 copies of q, k, v
 * (as PyTorch computes them in float32), the output rounded to the dtype once; the backward reads
 * that rounded output (its row sums with the output gradient in float32), so the gradients are
 * close to the float32 backward's on the same rounded inputs relative to each gradient's largest
 * element, not elementwise (docs/models.md, "The ops it runs on"). */
DT_API dt_status dt_scaled_dot_product_attention(dt_tensor *q, dt_tensor *k, dt_tensor *v,
                                                 dt_tensor *mask,
                                                 const dt_attention_options *options,
                                                 dt_tensor **out, dt_tensor **lse);
/* Inference batch norm over channel dim 1 of [N, C, ...] with running statistics [C];
 * weight and bias [C] may be NULL. Errors: DT_ERR_INVALID (NULL x, running_mean, running_var or
 * out; eps not finite or < 0), DT_ERR_SHAPE (fewer than 2 dims, a [C] argument of another
 * shape), DT_ERR_DTYPE (a non-floating argument). */
DT_API dt_status dt_batch_norm(dt_tensor *x, dt_tensor *running_mean, dt_tensor *running_var,
                               dt_tensor *weight, dt_tensor *bias, double eps, dt_tensor **out);
/* Training batch norm: like dt_batch_norm with the batch's own statistics (per channel, the
 * mean and biased variance over every dim but 1), as PyTorch's batch_norm(training=True).
 * Running statistics are not updated (do it under no_grad). On distributed tensors every shard
 * stays: the channel dim's with weight and bias sliced alike; the batch's (or a spatial dim's)
 * as synchronized batch norm, the statistics all_reduced across the mesh dims sharding it
 * (PyTorch's SyncBatchNorm). Errors: DT_ERR_INVALID (NULL x or out, eps not finite or < 0),
 * DT_ERR_DTYPE (a non-floating argument), DT_ERR_SHAPE (fewer than 2 dims; 1 value per
 * channel; weight or bias not [C]). */
DT_API dt_status dt_batch_norm_training(dt_tensor *x, dt_tensor *weight, dt_tensor *bias,
                                        double eps, dt_tensor **out);
/* Concatenates n tensors along dim (shapes equal elsewhere; 1-D empty tensors are skipped
 * as in PyTorch); dtypes promote. */
DT_API dt_status dt_cat(int n, dt_tensor *const *tensors, int64_t dim, dt_tensor **out);
/* Stacks n equal-shaped tensors along a new dim. */
DT_API dt_status dt_stack(int n, dt_tensor *const *tensors, int64_t dim, dt_tensor **out);

/* ---- Index and ordering ops ------------------------------------------------------------ */
/* tril / triu: a copy of a (at least 2-D, any dtype) with the elements below (triu) or above
 * (tril) the given diagonal of its last two dims zeroed: tril keeps column - row <= diagonal,
 * triu column - row >= diagonal. A distributed a keeps any shard, the matrix dims included
 * (each shard applies the global diagonal). Errors: DT_ERR_SHAPE (fewer than 2 dims). */
DT_API dt_status dt_tril(dt_tensor *a, int64_t diagonal, dt_tensor **out);
DT_API dt_status dt_triu(dt_tensor *a, int64_t diagonal, dt_tensor **out);
/* Running sum along dim; integer and bool inputs give int64, floating inputs keep their dtype
 * (accumulated in double). A shard of dim is gathered first; other shards stay. */
DT_API dt_status dt_cumsum(dt_tensor *a, int64_t dim, dt_tensor **out);
/* The k largest (largest = false: smallest) elements along dim, sorted (ties: the lower
 * index first; NaN above every number), and their int64 indices; both a's shape with k along
 * dim. Errors: DT_ERR_INVALID (k outside [0, size of dim], NULL values or indices),
 * DT_ERR_DTYPE (bool). */
DT_API dt_status dt_topk(dt_tensor *a, int64_t k, int64_t dim, bool largest, dt_tensor **values,
                         dt_tensor **indices);
/* The slices of a along dim at the positions of the 1-D index (int64 or int32): the result has
 * a's shape with index's length along dim. Errors: DT_ERR_DTYPE, DT_ERR_SHAPE (index not
 * 1-D), DT_ERR_INDEX (an index outside [0, size of dim), checked before anything is written). */
DT_API dt_status dt_index_select(dt_tensor *a, int64_t dim, dt_tensor *index, dt_tensor **out);
/* PyTorch's gather: out[p] = a[p with p[dim] replaced by index[p]] for every position p of
 * index (int64 or int32, a's number of dims, no larger than a outside dim); out has index's
 * shape. Errors: as index_select, DT_ERR_SHAPE for an index too large outside dim. */
DT_API dt_status dt_gather(dt_tensor *a, int64_t dim, dt_tensor *index, dt_tensor **out);

/* ---- Views, reshapes and copies --------------------------------------------------------- */
/* view: a view with the new shape (one entry may be -1); DT_ERR_SHAPE when the strides
 * do not allow a view. reshape: a view when possible, else a copy. */
DT_API dt_status dt_view(dt_tensor *a, int ndim, const int64_t *shape, dt_tensor **out);
DT_API dt_status dt_reshape(dt_tensor *a, int ndim, const int64_t *shape, dt_tensor **out);
DT_API dt_status dt_transpose(dt_tensor *a, int64_t dim0, int64_t dim1, dt_tensor **out);
/* dims is a permutation of 0..ndim-1 (negative allowed). */
DT_API dt_status dt_permute(dt_tensor *a, int ndim, const int64_t *dims, dt_tensor **out);
/* Elements [start, start + length) of dim; a negative start counts from the end.
 * DT_ERR_INDEX when start or start + length falls outside the dim. */
DT_API dt_status dt_narrow(dt_tensor *a, int64_t dim, int64_t start, int64_t length,
                           dt_tensor **out);
/* Python-style slice start:end:step of dim (step > 0; start/end clamp like Python). */
DT_API dt_status dt_slice(dt_tensor *a, int64_t dim, int64_t start, int64_t end, int64_t step,
                          dt_tensor **out);
/* Removes dim by taking one index of it (negative counts from the end; DT_ERR_INDEX when
 * out of range). narrow, slice and select need a tensor of at least one dim. */
DT_API dt_status dt_select(dt_tensor *a, int64_t dim, int64_t index, dt_tensor **out);
/* Broadcasts size-1 dims (and new leading dims) to shape; -1 keeps a size. Stride 0. */
DT_API dt_status dt_expand(dt_tensor *a, int ndim, const int64_t *shape, dt_tensor **out);
/* Removes every size-1 dim / the given dim if its size is 1. */
DT_API dt_status dt_squeeze(dt_tensor *a, dt_tensor **out);
DT_API dt_status dt_squeeze_dim(dt_tensor *a, int64_t dim, dt_tensor **out);
/* Inserts a size-1 dim at dim (range -ndim-1 .. ndim). */
DT_API dt_status dt_unsqueeze(dt_tensor *a, int64_t dim, dt_tensor **out);
/* Merges dims start_dim..end_dim (a view when possible, else a copy). */
DT_API dt_status dt_flatten(dt_tensor *a, int64_t start_dim, int64_t end_dim, dt_tensor **out);
/* split / split_with_sizes / chunk: views into a along dim, written to outs[0..*n_out).
 * chunk follows torch.chunk: each piece has ceil(size / chunks) elements, the trailing
 * ones fewer, and fewer than `chunks` pieces may come back; a dim of size 0 gives `chunks`
 * empty pieces (split gives one). capacity is the length of outs; DT_ERR_INVALID if the
 * pieces do not fit (nothing is returned then, and *n_out is 0). */
DT_API dt_status dt_split(dt_tensor *a, int64_t split_size, int64_t dim, dt_tensor **outs,
                          int capacity, int *n_out);
DT_API dt_status dt_split_with_sizes(dt_tensor *a, int n_sizes, const int64_t *sizes, int64_t dim,
                                     dt_tensor **outs, int capacity, int *n_out);
DT_API dt_status dt_chunk(dt_tensor *a, int64_t chunks, int64_t dim, dt_tensor **outs, int capacity,
                          int *n_out);
/* a itself (retained) if contiguous, else a contiguous copy. */
DT_API dt_status dt_contiguous(dt_tensor *a, dt_tensor **out);
/* A contiguous copy with its own storage. */
DT_API dt_status dt_clone(dt_tensor *a, dt_tensor **out);
/* Copies src into dst (src broadcasts to dst's shape; dtype converts). */
DT_API dt_status dt_copy_(dt_tensor *dst, dt_tensor *src);
/* A view of a that shares storage (no copy, ever). */
DT_API dt_status dt_detach(dt_tensor *a, dt_tensor **out);
/* Converts to dtype: a view (no copy) when dtype is already a's dtype, else a new tensor. */
DT_API dt_status dt_to(dt_tensor *a, dt_dtype dtype, dt_tensor **out);

/* ---- *_like factories: a new contiguous tensor of a's shape and dtype ------------------ */
/* full_like: DT_ERR_INVALID when value does not fit an integer dtype (NaN, inf, overflow);
 * a fractional value truncates toward zero there. */
DT_API dt_status dt_empty_like(dt_tensor *a, dt_tensor **out);
DT_API dt_status dt_zeros_like(dt_tensor *a, dt_tensor **out);
DT_API dt_status dt_ones_like(dt_tensor *a, dt_tensor **out);
DT_API dt_status dt_full_like(dt_tensor *a, double value, dt_tensor **out);

/* ---- Random fills and cheap queries ------------------------------------------------------ */
/* Fills a (floating) with uniform values in [lo, hi) from the counter-based generator keyed
 * by seed: element i of the (global) tensor is element i of dt_rand's stream, so a
 * distributed tensor gets the same values whatever its mesh and placements (a Partial
 * tensor is refused). Errors: DT_ERR_DTYPE (not floating), DT_ERR_INVALID (hi < lo). */
DT_API dt_status dt_uniform_(dt_tensor *a, double lo, double hi, uint64_t seed);

/* Whether a and b have the same (global) shape. Answered from metadata alone, without the
 * op table's propagation (PyTorch's DTensor treats is_same_size as a custom handler).
 * Errors: DT_ERR_INVALID for NULL arguments. */
DT_API dt_status dt_is_same_size(const dt_tensor *a, const dt_tensor *b, bool *same);

/* ---- Introspection of the op table ---------------------------------------------------------- */
/* Number of ops in the table, and the ATen-style name / schema of op i (NULL when out of
 * range). */
DT_API int dt_op_count(void);
DT_API const char *dt_op_name(int op);
DT_API const char *dt_op_schema(int op);

#ifdef __cplusplus
}
#endif

#endif /* DTENSOR_OPS_H */
