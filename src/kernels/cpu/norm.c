/*
 * softmax, log_softmax, layer norm and inference batch norm.
 *
 * Each works line by line: a line is the run of elements one normalization covers (the
 * softmax dim, the trailing normalized dims, one channel of one sample). Statistics are
 * computed in double, except contiguous float32 lines of softmax and layer norm, which run in
 * float32 with blocked sums (rows.h) and vmath.h's exp; any other layout or dtype is
 * gathered into a double buffer first, so every stride and dtype takes the same path.
 */
#include <math.h>

#include "kernels/cpu/reduce.h"
#include "kernels/cpu/rows.h"
#include "kernels/cpu/vmath.h"
#include "kernels/math/norm.h"

int64_t dt__line_offset(const dt_tensor *t, int skip_from, int skip_to, int64_t l) {
  int64_t off = 0;
  for (int d = t->ndim - 1; d >= 0; d--) {
    if (d >= skip_from && d < skip_to) continue;
    off += (l % t->shape[d]) * t->strides[d];
    l /= t->shape[d];
  }
  return off;
}

void dt__gather_double(const dt_tensor *t, int first, const char *base, double *dst) {
  int n = t->ndim - first;
  int64_t esize = (int64_t)dt__dtype_sizes[t->dtype];
  int64_t count = dt__numel(n, t->shape + first);
  int64_t index[DT_MAX_DIMS] = {0};
  for (int64_t i = 0; i < count; i++) {
    int64_t off = 0;
    for (int d = 0; d < n; d++) off += index[d] * t->strides[first + d];
    dst[i] = dt__load_as_double(t->dtype, base + off * esize);
    for (int d = n - 1; d >= 0; d--) {
      if (++index[d] < t->shape[first + d]) break;
      index[d] = 0;
    }
  }
}

static double *alloc_doubles(int64_t n) {
  return dt__alloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
}

/* ---- softmax ------------------------------------------------------------------------------ */

/* float32 throughout (rows.h's blocked sums, vmath.h's exp): no double conversion. */
DT_VECTOR_CLONES static void softmax_f32_line(const float *x, float *y, int64_t n, bool take_log) {
  float m = dt__row_max_f32(x, n);
  if (take_log) {
    /* (x - m) first: subtracting m + log(s) at once would round at the scale of m. */
    float log_sum = logf(dt__row_exp_sum_f32(x, m, NULL, n));
    for (int64_t i = 0; i < n; i++) y[i] = (x[i] - m) - log_sum;
    return;
  }
  float inv = 1.0f / dt__row_exp_sum_f32(x, m, y, n);
  for (int64_t i = 0; i < n; i++) y[i] *= inv;
}

/* Lines [begin, end) of a float32 softmax, for the pool. */
typedef struct line_job {
  const dt_tensor *a;
  dt_tensor *out;
  int dim;
  int64_t len;
  bool take_log;
  bool packed; /* both contiguous, dim the last: line l at l * len */
} line_job;

static void softmax_chunk(void *p, int64_t begin, int64_t end) {
  const line_job *j = p;
  const float *abase = (const float *)dt__tensor_base(j->a);
  float *obase = (float *)dt__tensor_base(j->out);
  int64_t len = j->len;
  if (j->packed && !j->take_log) {
    /* Packed lines: line l at l * len, no division per line for the offsets. */
    dt__rows_softmax_f32(abase + begin * len, obase + begin * len, end - begin, len);
    return;
  }
  for (int64_t l = begin; l < end; l++) {
    softmax_f32_line(abase + dt__line_offset(j->a, j->dim, j->dim + 1, l),
                     obase + dt__line_offset(j->out, j->dim, j->dim + 1, l), len, j->take_log);
  }
}

static void softmax_double_line(const double *x, double *y, int64_t n, bool take_log) {
  double m = -INFINITY;
  for (int64_t i = 0; i < n; i++) m = dt__max_nan(x[i], m);
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += exp(x[i] - m);
  if (take_log) {
    double log_sum = log(s);
    for (int64_t i = 0; i < n; i++) y[i] = dt__log_softmax_value(x[i], m, log_sum);
  } else {
    for (int64_t i = 0; i < n; i++) y[i] = dt__softmax_value(x[i], m, s);
  }
}

dt_status dt__cpu_softmax(const dt_tensor *a, int dim, bool take_log, dt_tensor *out) {
  int64_t n_total = dt__tensor_numel(a);
  if (n_total == 0) return DT_OK;
  bool scalar = a->ndim == 0;
  int64_t len = scalar ? 1 : a->shape[dim];
  int64_t lines = n_total / len;
  int64_t in_stride = scalar ? 1 : a->strides[dim];
  int64_t out_stride = scalar ? 1 : out->strides[dim];
  int64_t in_size = (int64_t)dt__dtype_sizes[a->dtype];
  int64_t out_size = (int64_t)dt__dtype_sizes[out->dtype];
  bool fast = a->dtype == DT_F32 && out->dtype == DT_F32 && (in_stride == 1 || len == 1) &&
              (out_stride == 1 || len == 1);
  if (fast) {
    bool packed = dt__is_contiguous(a->ndim, a->shape, a->strides) &&
                  dt__is_contiguous(out->ndim, out->shape, out->strides) &&
                  (scalar || dim == a->ndim - 1);
    line_job j = {
        .a = a, .out = out, .dim = dim, .len = len, .take_log = take_log, .packed = packed};
    dt__parallel_for(lines, dt__lines_grain(len), softmax_chunk, &j);
    return DT_OK;
  }
  double *buf = NULL;
  if (!fast) {
    buf = alloc_doubles(2 * len);
    if (!buf)
      return dt__error(DT_ERR_NOMEM, "softmax: out of memory for a line of %lld", (long long)len);
  }
  const char *abase = dt__tensor_base(a);
  char *obase = dt__tensor_base(out);
  for (int64_t l = 0; l < lines; l++) {
    const char *x = abase + dt__line_offset(a, dim, dim + 1, l) * in_size;
    char *y = obase + dt__line_offset(out, dim, dim + 1, l) * out_size;
    if (fast) {
      softmax_f32_line((const float *)x, (float *)y, len, take_log);
      continue;
    }
    for (int64_t i = 0; i < len; i++)
      buf[i] = dt__load_as_double(a->dtype, x + i * in_stride * in_size);
    softmax_double_line(buf, buf + len, len, take_log);
    for (int64_t i = 0; i < len; i++) {
      dt__store_from_double(out->dtype, y + i * out_stride * out_size, buf[len + i]);
    }
  }
  dt__free(buf);
  return DT_OK;
}

/* ---- layer norm --------------------------------------------------------------------------- */

/* Mean and 1/sqrt(biased variance + eps) by two passes, which stays accurate when the
 * mean is large relative to the spread. */
#define LINE_STATS(x, n, eps, mean, rstd)                                                          \
  do {                                                                                             \
    double sum_ = 0, sq_ = 0;                                                                      \
    for (int64_t i = 0; i < (n); i++) sum_ += (double)(x)[i];                                      \
    double mean_ = (n) > 0 ? sum_ / (double)(n) : NAN;                                             \
    for (int64_t i = 0; i < (n); i++) {                                                            \
      double dx_ = (double)(x)[i] - mean_;                                                         \
      sq_ += dx_ * dx_;                                                                            \
    }                                                                                              \
    (mean) = mean_;                                                                                \
    (rstd) = dt__norm_rstd(sq_, (double)(n), (eps));                                               \
  } while (0)

DT_VECTOR_CLONES static void normalize_row(const float *x, float mean, float rstd, const float *w,
                                           const float *b, float *y, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = (x[i] - mean) * rstd * w[i] + b[i];
}

/* Rows [begin, end) of a float32 layer norm, for the pool. */
typedef struct ln_job {
  const dt_tensor *x;
  dt_tensor *out;
  int lead;
  int64_t len;
  const float *w, *b;
  float eps;
  bool rms; /* rms_norm: mean 0, the bias zeros */
} ln_job;

static void layer_norm_chunk(void *p, int64_t begin, int64_t end) {
  const ln_job *j = p;
  int64_t len = j->len;
  for (int64_t l = begin; l < end; l++) {
    const float *x =
        (const float *)dt__tensor_base(j->x) + dt__line_offset(j->x, j->lead, j->x->ndim, l);
    float *y = (float *)dt__tensor_base(j->out) + l * len;
    float mean = j->rms ? 0.0f : dt__row_sum_f32(x, len) / (float)len;
    float rstd = 1.0f / sqrtf(dt__row_sq_dev_sum_f32(x, mean, len) / (float)len + j->eps);
    normalize_row(x, mean, rstd, j->w, j->b, y, len);
  }
}

/* float32 rows in float32: mean and biased variance by two blocked passes (rows.h; rms_norm:
 * the mean of squares in one), then y = (x - mean) rstd w + b; weight and bias gathered once
 * into float32 (w is all ones, b all zeros when absent). Rows split over the pool. */
static dt_status layer_norm_f32(bool rms, const dt_tensor *x, int lead, int64_t len, int64_t lines,
                                const dt_tensor *weight, const dt_tensor *bias, double eps,
                                dt_tensor *out) {
  float *wb = dt__alloc(sizeof(float) * (size_t)(2 * len));
  double *tmp = alloc_doubles(len);
  if (!wb || !tmp) {
    dt__free(wb);
    dt__free(tmp);
    return dt__error(DT_ERR_NOMEM, "layer_norm: out of memory for a line of %lld", (long long)len);
  }
  float *w = wb, *b = wb + len;
  for (int64_t i = 0; i < len; i++) w[i] = 1.0f, b[i] = 0.0f;
  if (weight) {
    dt__gather_double(weight, 0, dt__tensor_base(weight), tmp);
    for (int64_t i = 0; i < len; i++) w[i] = (float)tmp[i];
  }
  if (bias) {
    dt__gather_double(bias, 0, dt__tensor_base(bias), tmp);
    for (int64_t i = 0; i < len; i++) b[i] = (float)tmp[i];
  }
  dt__free(tmp);
  ln_job j = {
      .x = x, .out = out, .lead = lead, .len = len, .w = w, .b = b, .eps = (float)eps, .rms = rms};
  dt__parallel_for(lines, dt__lines_grain(len), layer_norm_chunk, &j);
  dt__free(wb);
  return DT_OK;
}

dt_status dt__cpu_layer_norm(const dt_tensor *x, int ndims, const dt_tensor *weight,
                             const dt_tensor *bias, double eps, dt_tensor *out) {
  int lead = x->ndim - ndims;
  int64_t len = dt__numel(ndims, x->shape + lead);
  int64_t lines = dt__numel(lead, x->shape);
  if (len == 0 || lines == 0) return DT_OK;
  bool fast = x->dtype == DT_F32 && dt__is_contiguous(ndims, x->shape + lead, x->strides + lead);
  if (fast && out->dtype == DT_F32)
    return layer_norm_f32(false, x, lead, len, lines, weight, bias, eps, out);
  /* buf holds [weight | bias | gathered line]. */
  double *buf = alloc_doubles(3 * len);
  if (!buf)
    return dt__error(DT_ERR_NOMEM, "layer_norm: out of memory for a line of %lld", (long long)len);
  double *w = buf, *b = buf + len, *line = buf + 2 * len;
  for (int64_t i = 0; i < len; i++) {
    w[i] = 1.0;
    b[i] = 0.0;
  }
  if (weight) dt__gather_double(weight, 0, dt__tensor_base(weight), w);
  if (bias) dt__gather_double(bias, 0, dt__tensor_base(bias), b);
  int64_t in_size = (int64_t)dt__dtype_sizes[x->dtype];
  const char *xbase = dt__tensor_base(x);
  for (int64_t l = 0; l < lines; l++) {
    const char *row = xbase + dt__line_offset(x, lead, x->ndim, l) * in_size;
    double mean, rstd;
    if (fast) {
      const float *p = (const float *)row;
      for (int64_t i = 0; i < len; i++) line[i] = p[i];
    } else {
      dt__gather_double(x, lead, row, line);
    }
    LINE_STATS(line, len, eps, mean, rstd);
    char *y = dt__tensor_base(out) + l * len * (int64_t)dt__dtype_sizes[out->dtype];
    for (int64_t i = 0; i < len; i++) {
      dt__store_from_double(out->dtype, y + i * (int64_t)dt__dtype_sizes[out->dtype],
                            (line[i] - mean) * rstd * w[i] + b[i]);
    }
  }
  dt__free(buf);
  return DT_OK;
}

bool dt__rms_norm_f32_fits(const dt_tensor *x, int ndims, const dt_tensor *out) {
  int lead = x->ndim - ndims;
  return x->dtype == DT_F32 && out->dtype == DT_F32 &&
         dt__is_contiguous(ndims, x->shape + lead, x->strides + lead) &&
         dt__is_contiguous(out->ndim, out->shape, out->strides);
}

dt_status dt__cpu_rms_norm_f32(const dt_tensor *x, int ndims, const dt_tensor *weight, double eps,
                               dt_tensor *out) {
  int lead = x->ndim - ndims;
  int64_t len = dt__numel(ndims, x->shape + lead), lines = dt__numel(lead, x->shape);
  if (len == 0 || lines == 0) return DT_OK;
  dt_status st = layer_norm_f32(true, x, lead, len, lines, weight, NULL, eps, out);
  return st ? dt__error(st, "rms_norm: out of memory for a row of %lld", (long long)len) : DT_OK;
}

/* ---- batch norm (inference) --------------------------------------------------------------- */

static double element(const dt_tensor *t, int64_t i) {
  const char *p = dt__tensor_base(t) + i * t->strides[0] * (int64_t)dt__dtype_sizes[t->dtype];
  return dt__load_as_double(t->dtype, p);
}

dt_status dt__cpu_batch_norm(const dt_tensor *x, const dt_tensor *mean, const dt_tensor *var,
                             const dt_tensor *weight, const dt_tensor *bias, double eps,
                             dt_tensor *out) {
  int64_t channels = x->shape[1];
  int64_t len = dt__numel(x->ndim - 2, x->shape + 2);
  int64_t lines = x->shape[0] * channels;
  if (len == 0 || lines == 0) return DT_OK;
  /* buf holds [scale | shift | gathered line]: y = x * scale[c] + shift[c]. */
  double *buf = alloc_doubles(2 * channels + len);
  if (!buf)
    return dt__error(DT_ERR_NOMEM, "batch_norm: out of memory for %lld channels",
                     (long long)channels);
  double *scale = buf, *shift = buf + channels, *line = buf + 2 * channels;
  for (int64_t c = 0; c < channels; c++) {
    double w = weight ? element(weight, c) : 1.0, b = bias ? element(bias, c) : 0.0;
    dt__batch_norm_affine(w, b, element(mean, c), element(var, c), eps, &scale[c], &shift[c]);
  }
  bool fast = x->dtype == DT_F32 && out->dtype == DT_F32 &&
              dt__is_contiguous(x->ndim - 2, x->shape + 2, x->strides + 2);
  int64_t in_size = (int64_t)dt__dtype_sizes[x->dtype];
  int64_t out_size = (int64_t)dt__dtype_sizes[out->dtype];
  for (int64_t l = 0; l < lines; l++) {
    int64_t n = l / channels, c = l % channels;
    const char *row = dt__tensor_base(x) + (n * x->strides[0] + c * x->strides[1]) * in_size;
    char *y = dt__tensor_base(out) + l * len * out_size;
    double s = scale[c], t = shift[c];
    if (fast) {
      const float *p = (const float *)row;
      float *q = (float *)y;
      for (int64_t i = 0; i < len; i++) q[i] = (float)(p[i] * s + t);
      continue;
    }
    dt__gather_double(x, 2, row, line);
    for (int64_t i = 0; i < len; i++)
      dt__store_from_double(out->dtype, y + i * out_size, line[i] * s + t);
  }
  dt__free(buf);
  return DT_OK;
}
