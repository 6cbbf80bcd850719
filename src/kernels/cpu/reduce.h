/*
 * CPU kernels of the reduction family (sum, mean, max, min and their index forms) and of
 * softmax and the normalizations. The op layer has validated every argument and allocated
 * the outputs (contiguous); these only fail when a scratch allocation fails.
 */
#ifndef DT_KERNELS_CPU_REDUCE_H
#define DT_KERNELS_CPU_REDUCE_H

#include "tensor/tensor_impl.h"

typedef enum dt_cpu_reduce_kind {
  DT_CPU_SUM,  /* floating: accumulated in double; integer and bool: exact in int64 */
  DT_CPU_MEAN, /* floating only: the sum divided by the number of reduced elements */
  DT_CPU_MAX,  /* NaN propagates; the index is the first NaN or first maximum */
  DT_CPU_MIN,  /* NaN propagates; the index is the first NaN or first minimum */
} dt_cpu_reduce_kind;

/*
 * Reduces `a` over the dims whose bit is set in `mask` (bit d for dim d). The kept dims, in
 * order, are the row-major dims of the outputs (keepdim only changes their shape, not
 * their element order). `values` receives the reduction in its dtype; for MAX and MIN,
 * `indices` (int64, may be NULL) receives the row-major position of the chosen element
 * among the reduced dims. `values` may be NULL when `indices` is given. Every reduced dim
 * of a MAX/MIN must be non-empty (the op layer checks). Any strides.
 */
dt_status dt__cpu_reduce(dt_cpu_reduce_kind kind, const dt_tensor *a, uint32_t mask,
                         dt_tensor *values, dt_tensor *indices);

/* Lines per pool chunk for a row kernel of rows of `len` elements (DT_PARALLEL_GRAIN
 * elements at least). */
static inline int64_t dt__lines_grain(int64_t len) {
  return len >= DT_PARALLEL_GRAIN ? 1 : DT_PARALLEL_GRAIN / (len > 0 ? len : 1);
}

/* Element offset of line l of t, where lines run row-major over t's dims outside
 * [skip_from, skip_to). */
int64_t dt__line_offset(const dt_tensor *t, int skip_from, int skip_to, int64_t l);

/* Copies the elements of t's dims [first, ndim), starting at base, row-major into dst (as
 * double, any dtype and strides). */
void dt__gather_double(const dt_tensor *t, int first, const char *base, double *dst);

/* softmax (log_softmax when `take_log`) of a floating tensor along dim; out has a's shape. */
dt_status dt__cpu_softmax(const dt_tensor *a, int dim, bool take_log, dt_tensor *out);

/* Layer norm over the last `ndims` dims of x; weight and bias (of those dims' shape) may
 * be NULL. Statistics in double (contiguous float32 rows: in float32 with blocked sums),
 * biased variance. */
dt_status dt__cpu_layer_norm(const dt_tensor *x, int ndims, const dt_tensor *weight,
                             const dt_tensor *bias, double eps, dt_tensor *out);

/* rms_norm over the last ndims dims of contiguous float32 rows into a contiguous float32 out
 * (when dt__rms_norm_f32_fits): float32 statistics (rows.h), rows split over the pool; any
 * other layout runs kernels/cpu/attention.h's dt__cpu_rms_norm (double). (norm.c) */
bool dt__rms_norm_f32_fits(const dt_tensor *x, int ndims, const dt_tensor *out);
dt_status dt__cpu_rms_norm_f32(const dt_tensor *x, int ndims, const dt_tensor *weight, double eps,
                               dt_tensor *out);

/* The backward of softmax (log_softmax when take_log) along dim: g and y (the forward's
 * output) of out's shape and dtype, any strides. (norm_backward.c) */
dt_status dt__cpu_softmax_backward(const dt_tensor *g, const dt_tensor *y, int dim, bool take_log,
                                   dt_tensor *out);

/* The input's gradient dx of layer_norm (rms_norm when rms) over the last ndims dims of x,
 * from g (x's shape and dtype) and the weight (NULL: none). (norm_backward.c) */
dt_status dt__cpu_norm_backward_input(bool rms, const dt_tensor *g, const dt_tensor *x, int ndims,
                                      const dt_tensor *weight, double eps, dt_tensor *dx);

/* The parameters' gradients: dw = sum over the leading dims of g xhat, db = sum of g (db NULL:
 * not computed); both of the normalized dims' shape. (norm_backward.c) */
dt_status dt__cpu_norm_backward_affine(bool rms, const dt_tensor *g, const dt_tensor *x, int ndims,
                                       double eps, dt_tensor *dw, dt_tensor *db);

/* layer_norm's three gradients in one pass over g and x: dx as dt__cpu_norm_backward_input,
 * dw and db as dt__cpu_norm_backward_affine (the same bits as those two). */
dt_status dt__cpu_layer_norm_backward_all(const dt_tensor *g, const dt_tensor *x, int ndims,
                                          const dt_tensor *weight, double eps, dt_tensor *dx,
                                          dt_tensor *dw, dt_tensor *db);

/* Inference batch norm over channel dim 1 of x [N, C, ...] with running statistics [C];
 * weight and bias [C] may be NULL. */
dt_status dt__cpu_batch_norm(const dt_tensor *x, const dt_tensor *mean, const dt_tensor *var,
                             const dt_tensor *weight, const dt_tensor *bias, double eps,
                             dt_tensor *out);

#endif /* DT_KERNELS_CPU_REDUCE_H */
