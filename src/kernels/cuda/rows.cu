/*
 * Row kernels on CUDA: softmax and log_softmax, layer norm and RMS norm, batch norm
 * (inference and training statistics), cross-entropy with its backward and the
 * vocabulary-parallel cross-entropy terms with their gradient. One block per row
 * (a softmax line, a normalized row, a channel, a sample); statistics in double, combined in
 * a fixed tree (deterministic); the formulas are kernels/math/norm.h's, the CPU's.
 */
#include "kernels/cuda/indexer.cuh"
#include "kernels/math/norm.h"
#include "kernels/math/order.h"

static __device__ __forceinline__ double load_at(const dt_cuda_ref &t, int64_t off) {
  return dt__elem_load_f64(t.dtype, t.data + off * dt_cuda_esize(t.dtype));
}

static __device__ __forceinline__ void store_at(const dt_cuda_ref &t, int64_t off, double v) {
  dt__elem_store_f64(t.dtype, t.data + off * dt_cuda_esize(t.dtype), v);
}

/* The block's sum (max_nan when is_max) of v, in a fixed tree; every thread gets it. */
static __device__ double block_reduce(double v, bool is_max) {
  __shared__ double buf[DT_CUDA_THREADS];
  buf[threadIdx.x] = v;
  __syncthreads();
  for (unsigned width = blockDim.x / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) {
      double o = buf[threadIdx.x + width];
      buf[threadIdx.x] = is_max ? dt__max_nan(o, buf[threadIdx.x]) : buf[threadIdx.x] + o;
    }
    __syncthreads();
  }
  double r = buf[0];
  __syncthreads();
  return r;
}

/* ---- softmax ------------------------------------------------------------------------------------
 */

/* One operand of softmax or its backward seen as lines along dim: where line l starts (the
 * walk over the other dims) and the step along it. A 0-d tensor is one line of one element. */
struct dt_cuda_lines {
  dt_cuda_ref t;
  dt_cuda_dims starts;
  int64_t step;

  __device__ __forceinline__ double load(int64_t start, int64_t i) const {
    return load_at(t, start + i * step);
  }
  __device__ __forceinline__ void store(int64_t start, int64_t i, double v) const {
    store_at(t, start + i * step, v);
  }
};

static dt_cuda_lines lines_of(const dt_cuda_ref *t, int dim) {
  dt_cuda_lines w;
  w.t = *t;
  w.starts = dt_cuda_dims_of(t, 0, t->ndim, dim);
  w.step = t->ndim == 0 ? 1 : t->strides[dim];
  return w;
}

/* How many lines t has along dim (*lines) and their length (*len); false when t is empty. */
static bool count_lines(const dt_cuda_ref *t, int dim, int64_t *lines, int64_t *len) {
  *len = t->ndim == 0 ? 1 : t->shape[dim];
  int64_t numel = 1;
  for (int d = 0; d < t->ndim; d++) numel *= t->shape[d];
  if (numel == 0) return false;
  *lines = numel / *len;
  return true;
}

struct dt_cuda_softmax_args {
  dt_cuda_lines in, out;
  int64_t lines, len;
  bool take_log;
};

__global__ void dt_cuda_softmax_kernel(dt_cuda_softmax_args a) {
  for (int64_t l = blockIdx.x; l < a.lines; l += gridDim.x) {
    int64_t xo = a.in.starts.offset(l), yo = a.out.starts.offset(l);
    double m = -INFINITY;
    for (int64_t i = threadIdx.x; i < a.len; i += blockDim.x) m = dt__max_nan(a.in.load(xo, i), m);
    m = block_reduce(m, true);
    double s = 0;
    for (int64_t i = threadIdx.x; i < a.len; i += blockDim.x) s += exp(a.in.load(xo, i) - m);
    s = block_reduce(s, false);
    double log_s = log(s);
    for (int64_t i = threadIdx.x; i < a.len; i += blockDim.x) {
      double x = a.in.load(xo, i);
      a.out.store(yo, i,
                  a.take_log ? dt__log_softmax_value(x, m, log_s) : dt__softmax_value(x, m, s));
    }
  }
}

static unsigned row_blocks(int64_t rows) { return (unsigned)(rows < 65536 ? rows : 65536); }

/* Launches a row kernel on stream, one block per row (grid-stride past 65536 rows); the
 * launch's cudaError_t. */
template <typename Args>
static int launch_rows(void (*kernel)(Args), const Args &a, int64_t rows, void *stream) {
  kernel<<<row_blocks(rows), DT_CUDA_THREADS, 0, (cudaStream_t)stream>>>(a);
  return (int)cudaGetLastError();
}

extern "C" int dt__cuda_launch_softmax(void *stream, const dt_cuda_ref *a, int dim, bool take_log,
                                       const dt_cuda_ref *out) {
  dt_cuda_softmax_args r;
  if (!count_lines(a, dim, &r.lines, &r.len)) return 0;
  r.in = lines_of(a, dim);
  r.out = lines_of(out, dim);
  r.take_log = take_log;
  return launch_rows(dt_cuda_softmax_kernel, r, r.lines, stream);
}

/* ---- layer norm, RMS norm
 * ------------------------------------------------------------------------ */

struct dt_cuda_norm_args {
  dt_cuda_ref x, out, weight, bias;
  bool has_weight, has_bias, rms;
  dt_cuda_dims x_rows, out_rows, x_row, out_row, w_row, b_row;
  int64_t rows, len;
  double eps;
};

/* The mean (0 for RMS norm) and rstd of the row of len elements at x + xo (its elements at
 * row's offsets), for every thread of the block. Layer norm: the mean, then the squared
 * deviations (two passes, as the CPU); RMS norm: the sum of squares. */
static __device__ void norm_row_stats(const dt_cuda_ref &x, const dt_cuda_dims &row, int64_t len,
                                      bool rms, double eps, int64_t xo, double *mean,
                                      double *rstd) {
  double m = 0;
  if (!rms) {
    double s = 0;
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) s += load_at(x, xo + row.offset(i));
    m = block_reduce(s, false) / (double)len;
  }
  double sq = 0;
  for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
    double d = load_at(x, xo + row.offset(i)) - m;
    sq += d * d;
  }
  *mean = m;
  *rstd = dt__norm_rstd(block_reduce(sq, false), (double)len, eps);
}

/* y = (x - mean) * rstd * w + b (layer norm), or x * rstd * w (RMS norm). */
__global__ void dt_cuda_norm_kernel(dt_cuda_norm_args a) {
  for (int64_t l = blockIdx.x; l < a.rows; l += gridDim.x) {
    int64_t xo = a.x_rows.offset(l), yo = a.out_rows.offset(l);
    double mean, rstd;
    norm_row_stats(a.x, a.x_row, a.len, a.rms, a.eps, xo, &mean, &rstd);
    for (int64_t i = threadIdx.x; i < a.len; i += blockDim.x) {
      double w = a.has_weight ? load_at(a.weight, a.w_row.offset(i)) : 1.0;
      double b = a.has_bias ? load_at(a.bias, a.b_row.offset(i)) : 0.0;
      double x = load_at(a.x, xo + a.x_row.offset(i));
      double y = a.rms ? x * rstd * w : (x - mean) * rstd * w + b;
      store_at(a.out, yo + a.out_row.offset(i), y);
    }
  }
}

extern "C" int dt__cuda_launch_layer_norm(void *stream, bool rms, const dt_cuda_ref *x, int ndims,
                                          const dt_cuda_ref *weight, const dt_cuda_ref *bias,
                                          double eps, const dt_cuda_ref *out) {
  dt_cuda_norm_args a;
  memset(&a, 0, sizeof a);
  int lead = x->ndim - ndims;
  a.x = *x;
  a.out = *out;
  a.rms = rms;
  a.eps = eps;
  a.has_weight = weight != nullptr;
  a.has_bias = bias != nullptr && !rms;
  if (weight) a.weight = *weight, a.w_row = dt_cuda_dims_of(weight, 0, weight->ndim, -1);
  if (a.has_bias) a.bias = *bias, a.b_row = dt_cuda_dims_of(bias, 0, bias->ndim, -1);
  a.x_rows = dt_cuda_dims_of(x, 0, lead, -1);
  a.out_rows = dt_cuda_dims_of(out, 0, lead, -1);
  a.x_row = dt_cuda_dims_of(x, lead, x->ndim, -1);
  a.out_row = dt_cuda_dims_of(out, lead, out->ndim, -1);
  a.rows = 1;
  a.len = 1;
  for (int d = 0; d < x->ndim; d++) (d < lead ? a.rows : a.len) *= x->shape[d];
  if (a.rows == 0 || a.len == 0) return 0;
  return launch_rows(dt_cuda_norm_kernel, a, a.rows, stream);
}

/* ---- batch norm
 * ---------------------------------------------------------------------------------- */

struct dt_cuda_bn_args {
  dt_cuda_ref x, out, mean, var, weight, bias;
  bool has_stats, has_weight, has_bias;
  int64_t n, channels, inner; /* x viewed as [N, C, inner] */
  dt_cuda_dims x_inner, out_inner;
  double eps;
  double *stats; /* [C] means and [C] biased variances (training) */
};

static __device__ __forceinline__ int64_t bn_offset(const dt_cuda_ref &t, const dt_cuda_dims &w,
                                                    int64_t n, int64_t c, int64_t i) {
  return n * t.strides[0] + c * t.strides[1] + w.offset(i);
}

/* The batch's statistics of channel c: mean, then biased variance by a second pass. */
__global__ void dt_cuda_bn_stats_kernel(dt_cuda_bn_args a) {
  int64_t per = a.n * a.inner;
  for (int64_t c = blockIdx.x; c < a.channels; c += gridDim.x) {
    double s = 0;
    for (int64_t j = threadIdx.x; j < per; j += blockDim.x)
      s += load_at(a.x, bn_offset(a.x, a.x_inner, j / a.inner, c, j % a.inner));
    double mean = block_reduce(s, false) / (double)per;
    double sq = 0;
    for (int64_t j = threadIdx.x; j < per; j += blockDim.x) {
      double d = load_at(a.x, bn_offset(a.x, a.x_inner, j / a.inner, c, j % a.inner)) - mean;
      sq += d * d;
    }
    double var = block_reduce(sq, false) / (double)per;
    if (threadIdx.x == 0) a.stats[c] = mean, a.stats[a.channels + c] = var;
  }
}

__global__ void dt_cuda_bn_apply_kernel(dt_cuda_bn_args a) {
  int64_t total = a.n * a.channels * a.inner, step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += step) {
    int64_t i = e % a.inner, c = (e / a.inner) % a.channels, n = e / (a.inner * a.channels);
    double mean = a.has_stats ? load_at(a.mean, c * a.mean.strides[0]) : a.stats[c];
    double var = a.has_stats ? load_at(a.var, c * a.var.strides[0]) : a.stats[a.channels + c];
    double w = a.has_weight ? load_at(a.weight, c * a.weight.strides[0]) : 1.0;
    double b = a.has_bias ? load_at(a.bias, c * a.bias.strides[0]) : 0.0;
    double scale, shift;
    dt__batch_norm_affine(w, b, mean, var, a.eps, &scale, &shift);
    double x = load_at(a.x, bn_offset(a.x, a.x_inner, n, c, i));
    store_at(a.out, bn_offset(a.out, a.out_inner, n, c, i), x * scale + shift);
  }
}

extern "C" int dt__cuda_launch_batch_norm(void *stream, const dt_cuda_ref *x,
                                          const dt_cuda_ref *mean, const dt_cuda_ref *var,
                                          const dt_cuda_ref *weight, const dt_cuda_ref *bias,
                                          double eps, double *scratch, const dt_cuda_ref *out) {
  dt_cuda_bn_args a;
  memset(&a, 0, sizeof a);
  a.x = *x;
  a.out = *out;
  a.has_stats = mean != nullptr;
  if (mean) a.mean = *mean, a.var = *var;
  a.has_weight = weight != nullptr;
  a.has_bias = bias != nullptr;
  if (weight) a.weight = *weight;
  if (bias) a.bias = *bias;
  a.n = x->shape[0];
  a.channels = x->shape[1];
  a.inner = 1;
  for (int d = 2; d < x->ndim; d++) a.inner *= x->shape[d];
  a.x_inner = dt_cuda_dims_of(x, 2, x->ndim, -1);
  a.out_inner = dt_cuda_dims_of(out, 2, out->ndim, -1);
  a.eps = eps;
  a.stats = scratch;
  int64_t total = a.n * a.channels * a.inner;
  if (total == 0) return 0;
  cudaStream_t s = (cudaStream_t)stream;
  if (!a.has_stats) dt_cuda_bn_stats_kernel<<<row_blocks(a.channels), DT_CUDA_THREADS, 0, s>>>(a);
  dt_cuda_bn_apply_kernel<<<dt_cuda_blocks(total), DT_CUDA_THREADS, 0, s>>>(a);
  return (int)cudaGetLastError();
}

/* ---- cross-entropy
 * ---------------------------------------------------------------------------------- */

struct dt_cuda_ce_args {
  dt_cuda_ref grad, logits, target, out;
  bool backward, has_ignore;
  int64_t ignore_index, rows, classes;
  double eps;
};

/* Row i: the loss into out[i, 0], or g * (softmax - want) into out's row; zeros for an ignored
 * row (and, backward, a zero incoming gradient), as the CPU's kernel. */
__global__ void dt_cuda_ce_kernel(dt_cuda_ce_args a) {
  for (int64_t i = blockIdx.x; i < a.rows; i += gridDim.x) {
    int64_t t = *(const int64_t *)(a.target.data + i * a.target.strides[0] * 8);
    bool ignored = a.has_ignore && t == a.ignore_index;
    double g = ignored || !a.backward ? 0.0 : load_at(a.grad, i * a.grad.strides[0]);
    int64_t xo = i * a.logits.strides[0], cs = a.logits.strides[1];
    int64_t oo = i * a.out.strides[0], os = a.out.strides[1];
    if (ignored || (a.backward && g == 0.0)) {
      int64_t cols = a.backward ? a.classes : 1;
      for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) store_at(a.out, oo + j * os, 0.0);
      continue;
    }
    double m = -INFINITY;
    for (int64_t j = threadIdx.x; j < a.classes; j += blockDim.x)
      m = dt__max_nan(load_at(a.logits, xo + j * cs), m);
    m = block_reduce(m, true);
    double s = 0, xs = 0;
    for (int64_t j = threadIdx.x; j < a.classes; j += blockDim.x) {
      double x = load_at(a.logits, xo + j * cs);
      s += exp(x - m);
      xs += x;
    }
    s = block_reduce(s, false);
    double lse = log(s);
    if (!a.backward) {
      xs = block_reduce(xs, false);
      if (threadIdx.x == 0) {
        double x_t = load_at(a.logits, xo + t * cs);
        store_at(a.out, oo, dt__cross_entropy_row(m + lse, x_t, xs, a.eps, (double)a.classes));
      }
      continue;
    }
    for (int64_t j = threadIdx.x; j < a.classes; j += blockDim.x) {
      double p = exp(load_at(a.logits, xo + j * cs) - m - lse);
      store_at(a.out, oo + j * os, dt__cross_entropy_grad(g, p, j == t, a.eps, (double)a.classes));
    }
  }
}

extern "C" int dt__cuda_launch_cross_entropy(void *stream, const dt_cuda_ref *grad,
                                             const dt_cuda_ref *logits, const dt_cuda_ref *target,
                                             bool has_ignore, int64_t ignore_index,
                                             double label_smoothing, const dt_cuda_ref *out) {
  dt_cuda_ce_args a;
  memset(&a, 0, sizeof a);
  a.backward = grad != nullptr;
  if (grad) a.grad = *grad;
  a.logits = *logits;
  a.target = *target;
  a.out = *out;
  a.has_ignore = has_ignore;
  a.ignore_index = ignore_index;
  a.rows = logits->shape[0];
  a.classes = logits->shape[1];
  a.eps = label_smoothing;
  if (a.rows == 0) return 0;
  return launch_rows(dt_cuda_ce_kernel, a, a.rows, stream);
}

/* ---- softmax and norm backward ----------------------------------------------------------------
 */

struct dt_cuda_softmax_bwd_args {
  dt_cuda_lines g, y, out;
  int64_t lines, len;
  bool take_log;
};

/* softmax: dx = y (g - sum(g y)); log_softmax: dx = g - exp(y) sum(g) (as the CPU's). */
__global__ void dt_cuda_softmax_bwd_kernel(dt_cuda_softmax_bwd_args a) {
  for (int64_t l = blockIdx.x; l < a.lines; l += gridDim.x) {
    int64_t go = a.g.starts.offset(l), yo = a.y.starts.offset(l), oo = a.out.starts.offset(l);
    double s = 0;
    for (int64_t i = threadIdx.x; i < a.len; i += blockDim.x) {
      double g = a.g.load(go, i);
      s += a.take_log ? g : g * a.y.load(yo, i);
    }
    s = block_reduce(s, false);
    for (int64_t i = threadIdx.x; i < a.len; i += blockDim.x) {
      double g = a.g.load(go, i), y = a.y.load(yo, i);
      a.out.store(oo, i, a.take_log ? g - exp(y) * s : y * (g - s));
    }
  }
}

extern "C" int dt__cuda_launch_softmax_backward(void *stream, const dt_cuda_ref *g,
                                                const dt_cuda_ref *y, int dim, bool take_log,
                                                const dt_cuda_ref *out) {
  dt_cuda_softmax_bwd_args r;
  if (!count_lines(y, dim, &r.lines, &r.len)) return 0;
  r.g = lines_of(g, dim);
  r.y = lines_of(y, dim);
  r.out = lines_of(out, dim);
  r.take_log = take_log;
  return launch_rows(dt_cuda_softmax_bwd_kernel, r, r.lines, stream);
}

struct dt_cuda_norm_bwd_args {
  dt_cuda_ref g, x, weight, dx, dw, db;
  bool rms, has_weight;
  dt_cuda_dims g_rows, x_rows, g_row, x_row, w_row;
  int64_t rows, len;
  double eps;
  double *stats; /* [rows] means, [rows] rstds (affine) */
};

/* dx = rstd (g w - mean(g w) - xhat mean(g w xhat)); RMS norm without the mean(g w) term. With
 * stats set (affine), only each row's mean and rstd are stored. */
__global__ void dt_cuda_norm_bwd_kernel(dt_cuda_norm_bwd_args a) {
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    int64_t xo = a.x_rows.offset(r), go = a.g_rows.offset(r);
    double mean, rstd;
    norm_row_stats(a.x, a.x_row, a.len, a.rms, a.eps, xo, &mean, &rstd);
    if (a.stats) {
      if (threadIdx.x == 0) a.stats[r] = mean, a.stats[a.rows + r] = rstd;
      continue;
    }
    double sa = 0, sb = 0;
    for (int64_t i = threadIdx.x; i < a.len; i += blockDim.x) {
      double w = a.has_weight ? load_at(a.weight, a.w_row.offset(i)) : 1.0;
      double gy = load_at(a.g, go + a.g_row.offset(i)) * w;
      sa += gy;
      sb += gy * (load_at(a.x, xo + a.x_row.offset(i)) - mean) * rstd;
    }
    double ca = a.rms ? 0.0 : block_reduce(sa, false) / (double)a.len;
    double cb = block_reduce(sb, false) / (double)a.len;
    for (int64_t i = threadIdx.x; i < a.len; i += blockDim.x) {
      double w = a.has_weight ? load_at(a.weight, a.w_row.offset(i)) : 1.0;
      double gy = load_at(a.g, go + a.g_row.offset(i)) * w;
      double xhat = (load_at(a.x, xo + a.x_row.offset(i)) - mean) * rstd;
      store_at(a.dx, r * a.len + i, rstd * (gy - ca - xhat * cb));
    }
  }
}

/* dw[i] = sum over rows of g xhat, db[i] = sum of g: a thread per column, rows in order. */
__global__ void dt_cuda_norm_affine_kernel(dt_cuda_norm_bwd_args a) {
  int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.len; i += step) {
    double dw = 0, db = 0;
    int64_t xi = a.x_row.offset(i), gi = a.g_row.offset(i);
    for (int64_t r = 0; r < a.rows; r++) {
      double g = load_at(a.g, a.g_rows.offset(r) + gi);
      dw += g * (load_at(a.x, a.x_rows.offset(r) + xi) - a.stats[r]) * a.stats[a.rows + r];
      db += g;
    }
    store_at(a.dw, i, dw);
    if (a.db.data) store_at(a.db, i, db);
  }
}

extern "C" int dt__cuda_launch_norm_backward(void *stream, bool rms, const dt_cuda_ref *g,
                                             const dt_cuda_ref *x, int ndims,
                                             const dt_cuda_ref *weight, double eps, double *scratch,
                                             const dt_cuda_ref *dx, const dt_cuda_ref *dw,
                                             const dt_cuda_ref *db) {
  dt_cuda_norm_bwd_args a;
  memset(&a, 0, sizeof a);
  int lead = x->ndim - ndims;
  a.g = *g, a.x = *x, a.rms = rms, a.eps = eps;
  a.has_weight = weight != nullptr;
  if (weight) a.weight = *weight, a.w_row = dt_cuda_dims_of(weight, 0, weight->ndim, -1);
  if (dx) a.dx = *dx;
  if (dw) a.dw = *dw;
  if (db) a.db = *db;
  a.g_rows = dt_cuda_dims_of(g, 0, lead, -1), a.x_rows = dt_cuda_dims_of(x, 0, lead, -1);
  a.g_row = dt_cuda_dims_of(g, lead, g->ndim, -1), a.x_row = dt_cuda_dims_of(x, lead, x->ndim, -1);
  a.rows = 1, a.len = 1;
  for (int d = 0; d < x->ndim; d++) (d < lead ? a.rows : a.len) *= x->shape[d];
  if (a.len == 0) return 0;
  cudaStream_t s = (cudaStream_t)stream;
  if (dx) {
    if (a.rows > 0) dt_cuda_norm_bwd_kernel<<<row_blocks(a.rows), DT_CUDA_THREADS, 0, s>>>(a);
    return (int)cudaGetLastError();
  }
  a.stats = scratch; /* the affine gradients: row statistics first, then the column sums */
  if (a.rows > 0) dt_cuda_norm_bwd_kernel<<<row_blocks(a.rows), DT_CUDA_THREADS, 0, s>>>(a);
  dt_cuda_norm_affine_kernel<<<dt_cuda_blocks(a.len), DT_CUDA_THREADS, 0, s>>>(a);
  return (int)cudaGetLastError();
}

/* ---- vocabulary-parallel cross-entropy terms ----------------------------------------------- */

struct dt_cuda_vocab_args {
  dt_cuda_ref logits, max, target, grad, out;
  int64_t rows, classes, offset, terms;
};

/* Row i's class in this shard's window [offset, offset + classes), or -1. */
static __device__ __forceinline__ int64_t vocab_local_class(const dt_cuda_vocab_args &a,
                                                            int64_t i) {
  int64_t j = *(const int64_t *)(a.target.data + i * a.target.strides[0] * 8) - a.offset;
  return j >= 0 && j < a.classes ? j : -1;
}

/* A block per row: sum exp(x - m), x_t - m, sum (x - m) (kernels/cpu/loss.h's terms). */
__global__ void dt_cuda_vocab_terms_kernel(dt_cuda_vocab_args a) {
  for (int64_t i = blockIdx.x; i < a.rows; i += gridDim.x) {
    double m = load_at(a.max, i * a.max.strides[0]);
    int64_t xo = i * a.logits.strides[0], cs = a.logits.strides[1];
    double s = 0, sz = 0;
    for (int64_t c = threadIdx.x; c < a.classes; c += blockDim.x) {
      double v = load_at(a.logits, xo + c * cs);
      s += exp(v - m);
      sz += v - m;
    }
    s = block_reduce(s, false);
    sz = block_reduce(sz, false);
    if (threadIdx.x == 0) {
      int64_t j = vocab_local_class(a, i), oo = i * a.out.strides[0], os = a.out.strides[1];
      store_at(a.out, oo, s);
      store_at(a.out, oo + os, j >= 0 ? load_at(a.logits, xo + j * cs) - m : 0.0);
      if (a.terms > 2) store_at(a.out, oo + 2 * os, sz);
    }
  }
}

/* A thread per element: out[i, c] = g0 exp(x - m) + g2 (+ g1 at the target's class). */
__global__ void dt_cuda_vocab_grad_kernel(dt_cuda_vocab_args a) {
  int64_t n = a.rows * a.classes, step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += step) {
    int64_t i = e / a.classes, c = e % a.classes, go = i * a.grad.strides[0];
    double m = load_at(a.max, i * a.max.strides[0]);
    double g0 = load_at(a.grad, go), g1 = load_at(a.grad, go + a.grad.strides[1]);
    double g2 = a.terms > 2 ? load_at(a.grad, go + 2 * a.grad.strides[1]) : 0.0;
    double x = load_at(a.logits, i * a.logits.strides[0] + c * a.logits.strides[1]);
    store_at(a.out, i * a.out.strides[0] + c * a.out.strides[1],
             dt__vocab_terms_grad(g0, exp(x - m), g1, g2, c == vocab_local_class(a, i)));
  }
}

extern "C" int dt__cuda_launch_vocab_terms(void *stream, const dt_cuda_ref *logits,
                                           const dt_cuda_ref *max, const dt_cuda_ref *target,
                                           const dt_cuda_ref *grad, int64_t offset,
                                           const dt_cuda_ref *out) {
  dt_cuda_vocab_args a;
  memset(&a, 0, sizeof a);
  a.logits = *logits, a.max = *max, a.target = *target, a.out = *out;
  if (grad) a.grad = *grad;
  a.rows = logits->shape[0], a.classes = logits->shape[1], a.offset = offset;
  a.terms = grad ? grad->shape[1] : out->shape[1];
  cudaStream_t s = (cudaStream_t)stream;
  if (!grad) {
    if (a.rows > 0) dt_cuda_vocab_terms_kernel<<<row_blocks(a.rows), DT_CUDA_THREADS, 0, s>>>(a);
  } else if (a.rows * a.classes > 0) {
    dt_cuda_vocab_grad_kernel<<<dt_cuda_blocks(a.rows * a.classes), DT_CUDA_THREADS, 0, s>>>(a);
  }
  return (int)cudaGetLastError();
}
