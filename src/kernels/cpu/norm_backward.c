/*
 * Backward kernels of softmax, log_softmax, layer_norm and rms_norm, each one pass per line.
 *
 * The normalizations recompute their row statistics from the saved input (a row of the step's
 * sizes stays in L1, so the recomputation costs less than reading saved statistics). With
 * xhat = (x - mean) rstd (rms_norm: mean = 0, rstd = 1 / sqrt(mean(x^2) + eps)) and gy = g w:
 *   dx = rstd (gy - mean(gy) - xhat mean(gy xhat))    (rms_norm: without the mean(gy) term)
 *   dw = sum over rows of g xhat,  db = sum over rows of g.
 * softmax: dx = y (g - sum(g y)); log_softmax: dx = g - exp(y) sum(g).
 *
 * Contiguous float32 lines run in float32 (rows.h's blocked sums, vmath.h's exp, clones for
 * AVX-512 / AVX2 / the baseline); the affine sums add float32 partial sums of 64 rows into
 * double totals. Any other dtype or layout gathers each line into doubles and computes in
 * double. Outputs are contiguous (the dispatcher allocates them).
 */
#include <math.h>

#include "kernels/cpu/reduce.h"
#include "kernels/cpu/rows.h"
#include "kernels/cpu/vmath.h"

/* Rows whose float32 affine partial sums are added into the double totals at once. */
#define AFFINE_CHUNK 64

/* ---- softmax, log_softmax ----------------------------------------------------------------- */

DT_VECTOR_CLONES static void softmax_line_f32(const float *g, const float *y, float *dx, int64_t n,
                                              bool take_log) {
  if (take_log) {
    float s = dt__row_sum_f32(g, n);
    for (int64_t i = 0; i < n; i++) dx[i] = g[i] - dt__exp_f32(y[i]) * s;
    return;
  }
  float s = dt__row_dot_f32(g, y, n);
  for (int64_t i = 0; i < n; i++) dx[i] = y[i] * (g[i] - s);
}

/* Lines [begin, end) of the float32 path, for the pool. */
typedef struct softmax_job {
  const dt_tensor *g, *y;
  dt_tensor *out;
  int dim;
  int64_t len;
  bool take_log;
} softmax_job;

static void softmax_chunk(void *p, int64_t begin, int64_t end) {
  const softmax_job *j = p;
  for (int64_t l = begin; l < end; l++) {
    int d = j->dim;
    softmax_line_f32((const float *)dt__tensor_base(j->g) + dt__line_offset(j->g, d, d + 1, l),
                     (const float *)dt__tensor_base(j->y) + dt__line_offset(j->y, d, d + 1, l),
                     (float *)dt__tensor_base(j->out) + dt__line_offset(j->out, d, d + 1, l),
                     j->len, j->take_log);
  }
}

/* One line in double: g and y gathered into buf[0, n) and buf[n, 2n), dx into buf[2n, 3n). */
static void softmax_line_double(double *buf, int64_t n, bool take_log) {
  const double *g = buf, *y = buf + n;
  double *dx = buf + 2 * n, s = 0;
  for (int64_t i = 0; i < n; i++) s += take_log ? g[i] : g[i] * y[i];
  for (int64_t i = 0; i < n; i++) dx[i] = take_log ? g[i] - exp(y[i]) * s : y[i] * (g[i] - s);
}

dt_status dt__cpu_softmax_backward(const dt_tensor *g, const dt_tensor *y, int dim, bool take_log,
                                   dt_tensor *out) {
  int64_t total = dt__tensor_numel(y);
  if (total == 0) return DT_OK;
  bool scalar = y->ndim == 0;
  int64_t len = scalar ? 1 : y->shape[dim], lines = total / len;
  int64_t gs = scalar ? 1 : g->strides[dim], ys = scalar ? 1 : y->strides[dim];
  int64_t os = scalar ? 1 : out->strides[dim];
  bool fast = g->dtype == DT_F32 && y->dtype == DT_F32 && out->dtype == DT_F32 &&
              ((gs == 1 && ys == 1 && os == 1) || len == 1);
  if (fast) {
    softmax_job j = {.g = g, .y = y, .out = out, .dim = dim, .len = len, .take_log = take_log};
    dt__parallel_for(lines, dt__lines_grain(len), softmax_chunk, &j);
    return DT_OK;
  }
  double *buf = NULL;
  if (!fast && !(buf = dt__alloc(sizeof(double) * (size_t)(3 * len))))
    return dt__error(DT_ERR_NOMEM, "softmax_backward: out of memory for a line of %lld",
                     (long long)len);
  int64_t gz = (int64_t)dt__dtype_sizes[g->dtype], yz = (int64_t)dt__dtype_sizes[y->dtype];
  int64_t oz = (int64_t)dt__dtype_sizes[out->dtype];
  for (int64_t l = 0; l < lines; l++) {
    const char *gl = (const char *)dt__tensor_base(g) + dt__line_offset(g, dim, dim + 1, l) * gz;
    const char *yl = (const char *)dt__tensor_base(y) + dt__line_offset(y, dim, dim + 1, l) * yz;
    char *ol = dt__tensor_base(out) + dt__line_offset(out, dim, dim + 1, l) * oz;
    if (fast) {
      softmax_line_f32((const float *)gl, (const float *)yl, (float *)ol, len, take_log);
      continue;
    }
    for (int64_t i = 0; i < len; i++) {
      buf[i] = dt__load_as_double(g->dtype, gl + i * gs * gz);
      buf[len + i] = dt__load_as_double(y->dtype, yl + i * ys * yz);
    }
    softmax_line_double(buf, len, take_log);
    for (int64_t i = 0; i < len; i++)
      dt__store_from_double(out->dtype, ol + i * os * oz, buf[2 * len + i]);
  }
  dt__free(buf);
  return DT_OK;
}

/* ---- layer_norm, rms_norm ----------------------------------------------------------------- */

/* Scratch rows of float32 (f) or double (d) for one call. */
typedef struct norm_scratch {
  const float *w;
  float *dwf, *dbf;
  double *dw, *db, *gd, *xd, *wd;
} norm_scratch;

/* One float32 row in four passes, nothing stored but the results: the mean and the squared
 * deviations (two passes, as the forward), sum(g w) and sum(g w (x - mean)) in one, then dx
 * (when given) with xhat and g w recomputed; or the affine partial sums (when s->dwf). */
DT_VECTOR_CLONES static void norm_row_f32(bool rms, const float *g, const float *x, int64_t n,
                                          float eps, const norm_scratch *s, float *dx) {
  float mean = rms ? 0.0f : dt__row_sum_f32(x, n) / (float)n;
  float rstd = 1.0f / sqrtf(dt__row_sq_dev_sum_f32(x, mean, n) / (float)n + eps);
  if (dx) {
    const float *w = s->w;
    float sums[2];
    dt__row_norm_grad_sums_f32(g, w, x, mean, n, sums);
    float ca = rms ? 0.0f : sums[0] / (float)n, cb = sums[1] * rstd / (float)n;
    for (int64_t i = 0; i < n; i++) dx[i] = rstd * (g[i] * w[i] - ca - (x[i] - mean) * rstd * cb);
  }
  if (s->dwf) {
    float *dw = s->dwf, *db = s->dbf;
    for (int64_t i = 0; i < n; i++) dw[i] += g[i] * ((x[i] - mean) * rstd);
    if (db)
      for (int64_t i = 0; i < n; i++) db[i] += g[i];
  }
}

/* One row in double, from s->gd and s->xd (the gathered rows): dx (when given) and the affine
 * sums (when s->dw). */
static void norm_row_double(bool rms, int64_t n, double eps, const norm_scratch *s, double *dx) {
  const double *g = s->gd, *x = s->xd;
  double mean = 0, var = 0, a = 0, b = 0;
  if (!rms) {
    for (int64_t i = 0; i < n; i++) mean += x[i];
    mean /= (double)n;
  }
  for (int64_t i = 0; i < n; i++) var += (x[i] - mean) * (x[i] - mean);
  double rstd = 1.0 / sqrt(var / (double)n + eps);
  if (dx) {
    for (int64_t i = 0; i < n; i++) {
      double gy = g[i] * s->wd[i];
      a += gy;
      b += gy * (x[i] - mean) * rstd;
    }
    double ca = rms ? 0.0 : a / (double)n, cb = b / (double)n;
    for (int64_t i = 0; i < n; i++)
      dx[i] = rstd * (g[i] * s->wd[i] - ca - (x[i] - mean) * rstd * cb);
  }
  if (s->dw) {
    for (int64_t i = 0; i < n; i++) s->dw[i] += g[i] * (x[i] - mean) * rstd;
    if (s->db)
      for (int64_t i = 0; i < n; i++) s->db[i] += g[i];
  }
}

static void store_row(dt_tensor *t, int64_t row, const double *v, int64_t n) {
  int64_t z = (int64_t)dt__dtype_sizes[t->dtype];
  char *p = dt__tensor_base(t) + row * n * z;
  for (int64_t i = 0; i < n; i++) dt__store_from_double(t->dtype, p + i * z, v[i]);
}

/* The affine sums on the float32 path: float32 partial sums of each run of AFFINE_CHUNK rows
 * (chunks run on the pool, each into its own slice of part), added into the double totals
 * in chunk order afterwards: the same bits on 1 and N threads. */
typedef struct affine_job {
  bool rms;
  const dt_tensor *g, *x;
  int lead;
  int64_t n, rows;
  float eps;
  const float *w;
  float *part; /* [chunks][2 n]: dw partials, then db's */
  bool with_db;
  float *dx; /* the input's gradient too (rows of n), or NULL */
} affine_job;

static void affine_chunk(void *p, int64_t begin, int64_t end) {
  const affine_job *j = p;
  int64_t n = j->n;
  for (int64_t c = begin; c < end; c++) {
    norm_scratch s = {.w = j->w, .dwf = j->part + c * 2 * n};
    s.dbf = j->with_db ? s.dwf + n : NULL;
    int64_t last = (c + 1) * AFFINE_CHUNK < j->rows ? (c + 1) * AFFINE_CHUNK : j->rows;
    for (int64_t r = c * AFFINE_CHUNK; r < last; r++) {
      const float *x =
          (const float *)dt__tensor_base(j->x) + dt__line_offset(j->x, j->lead, j->x->ndim, r);
      const float *g =
          (const float *)dt__tensor_base(j->g) + dt__line_offset(j->g, j->lead, j->g->ndim, r);
      norm_row_f32(j->rms, g, x, n, j->eps, &s, j->dx ? j->dx + r * n : NULL);
    }
  }
}

static dt_status affine_f32(affine_job *j, norm_scratch *s) {
  int64_t chunks = (j->rows + AFFINE_CHUNK - 1) / AFFINE_CHUNK, n = j->n;
  size_t bytes = sizeof(float) * (size_t)(chunks * 2 * n);
  j->part = dt__alloc(bytes);
  if (!j->part) return DT_ERR_NOMEM;
  memset(j->part, 0, bytes);
  int64_t grain = DT_PARALLEL_GRAIN / (AFFINE_CHUNK * n);
  dt__parallel_for(chunks, grain < 1 ? 1 : grain, affine_chunk, j);
  for (int64_t c = 0; c < chunks; c++) {
    const float *dwf = j->part + c * 2 * n, *dbf = dwf + n;
    for (int64_t i = 0; i < n; i++) s->dw[i] += dwf[i];
    if (s->db)
      for (int64_t i = 0; i < n; i++) s->db[i] += dbf[i];
  }
  dt__free(j->part);
  return DT_OK;
}

/* The shared walk of the backward kernels: dx (when not NULL) and the affine gradients dw,
 * db (when not NULL) of the normalization over the last ndims dims of x. The float32 path
 * computes dx in the affine chunks' pass (each row's g and x read once for all three). */
static dt_status norm_backward(bool rms, const dt_tensor *g, const dt_tensor *x, int ndims,
                               const dt_tensor *weight, double eps, dt_tensor *dx, dt_tensor *dw,
                               dt_tensor *db) {
  int lead = x->ndim - ndims;
  int64_t n = dt__numel(ndims, x->shape + lead), rows = dt__numel(lead, x->shape);
  bool fast = (!dx || dx->dtype == DT_F32) && x->dtype == DT_F32 && g->dtype == DT_F32 &&
              dt__is_contiguous(ndims, x->shape + lead, x->strides + lead) &&
              dt__is_contiguous(ndims, g->shape + lead, g->strides + lead);
  /* Doubles: the dw and db totals, the weight, then (double path) the g, x and dx rows;
   * floats (float32 path): the weight. */
  size_t nd = (size_t)(fast ? 3 * n : 6 * n), nf = (size_t)(fast ? n : 0);
  size_t bytes = sizeof(double) * nd + sizeof(float) * nf;
  double *dmem = dt__alloc(bytes);
  dt_status st = dmem ? DT_OK : DT_ERR_NOMEM;
  if (dmem) memset(dmem, 0, bytes);
  norm_scratch s = {0};
  if (dmem) {
    s.dw = dw ? dmem : NULL, s.db = db ? dmem + n : NULL, s.wd = dmem + 2 * n;
    for (int64_t i = 0; i < n; i++) s.wd[i] = 1.0;
    if (weight) dt__gather_double(weight, 0, dt__tensor_base(weight), s.wd);
  }
  if (dmem && fast) {
    float *w = (float *)(dmem + nd);
    for (int64_t i = 0; i < n; i++) w[i] = (float)s.wd[i];
    affine_job j = {.rms = rms,
                    .g = g,
                    .x = x,
                    .lead = lead,
                    .n = n,
                    .rows = rows,
                    .eps = (float)eps,
                    .w = w,
                    .with_db = db != NULL,
                    .dx = dx ? (float *)dt__tensor_base(dx) : NULL};
    st = affine_f32(&j, &s);
  }
  double *dx_row = NULL;
  if (dmem && !fast) s.gd = dmem + 3 * n, s.xd = dmem + 4 * n, dx_row = dx ? dmem + 5 * n : NULL;
  int64_t xz = (int64_t)dt__dtype_sizes[x->dtype], gz = (int64_t)dt__dtype_sizes[g->dtype];
  for (int64_t r = 0; r < rows && dmem && !fast; r++) {
    const char *xr = (const char *)dt__tensor_base(x) + dt__line_offset(x, lead, x->ndim, r) * xz;
    const char *gr = (const char *)dt__tensor_base(g) + dt__line_offset(g, lead, g->ndim, r) * gz;
    dt__gather_double(x, lead, xr, s.xd);
    dt__gather_double(g, lead, gr, s.gd);
    norm_row_double(rms, n, eps, &s, dx_row);
    if (dx) store_row(dx, r, dx_row, n);
  }
  if (!st && dw) store_row(dw, 0, s.dw, n);
  if (!st && db) store_row(db, 0, s.db, n);
  dt__free(dmem);
  if (st)
    return dt__error(DT_ERR_NOMEM, "%s_backward: out of memory for a row of %lld",
                     rms ? "rms_norm" : "layer_norm", (long long)n);
  return DT_OK;
}

/* Rows [begin, end) of dx on the float32 path. */
typedef struct dx_job {
  bool rms;
  const dt_tensor *g, *x;
  dt_tensor *dx;
  int lead;
  int64_t n;
  const float *w;
  float eps;
} dx_job;

static void dx_chunk(void *p, int64_t begin, int64_t end) {
  dx_job *j = p;
  norm_scratch s = {.w = j->w};
  for (int64_t r = begin; r < end; r++) {
    const float *x =
        (const float *)dt__tensor_base(j->x) + dt__line_offset(j->x, j->lead, j->x->ndim, r);
    const float *g =
        (const float *)dt__tensor_base(j->g) + dt__line_offset(j->g, j->lead, j->g->ndim, r);
    norm_row_f32(j->rms, g, x, j->n, j->eps, &s, (float *)dt__tensor_base(j->dx) + r * j->n);
  }
}

dt_status dt__cpu_norm_backward_input(bool rms, const dt_tensor *g, const dt_tensor *x, int ndims,
                                      const dt_tensor *weight, double eps, dt_tensor *dx) {
  if (dt__tensor_numel(x) == 0) return DT_OK;
  int lead = x->ndim - ndims;
  int64_t n = dt__numel(ndims, x->shape + lead), rows = dt__numel(lead, x->shape);
  bool fast = x->dtype == DT_F32 && g->dtype == DT_F32 && dx->dtype == DT_F32 &&
              dt__is_contiguous(ndims, x->shape + lead, x->strides + lead) &&
              dt__is_contiguous(ndims, g->shape + lead, g->strides + lead);
  if (!fast) return norm_backward(rms, g, x, ndims, weight, eps, dx, NULL, NULL);
  double *wd = dt__alloc(sizeof(double) * (size_t)n);
  float *w = dt__alloc(sizeof(float) * (size_t)n);
  dx_job j = {
      .rms = rms, .g = g, .x = x, .dx = dx, .lead = lead, .n = n, .w = w, .eps = (float)eps};
  bool failed = !wd || !w;
  if (!failed) {
    for (int64_t i = 0; i < n; i++) wd[i] = 1.0;
    if (weight) dt__gather_double(weight, 0, dt__tensor_base(weight), wd);
    for (int64_t i = 0; i < n; i++) w[i] = (float)wd[i];
    dt__parallel_for(rows, dt__lines_grain(n), dx_chunk, &j);
  }
  dt__free(wd);
  dt__free(w);
  if (failed)
    return dt__error(DT_ERR_NOMEM, "%s_backward: out of memory for a row of %lld",
                     rms ? "rms_norm" : "layer_norm", (long long)n);
  return DT_OK;
}

dt_status dt__cpu_norm_backward_affine(bool rms, const dt_tensor *g, const dt_tensor *x, int ndims,
                                       double eps, dt_tensor *dw, dt_tensor *db) {
  int lead = x->ndim - ndims;
  int64_t n = dt__numel(ndims, x->shape + lead);
  if (n == 0) return DT_OK;
  if (dt__numel(lead, x->shape) == 0) {
    /* No rows: the sums are zero. */
    double *zeros = dt__alloc(sizeof(double) * (size_t)n);
    if (!zeros) return dt__error(DT_ERR_NOMEM, "norm_backward_affine: out of memory");
    memset(zeros, 0, sizeof(double) * (size_t)n);
    store_row(dw, 0, zeros, n);
    if (db) store_row(db, 0, zeros, n);
    dt__free(zeros);
    return DT_OK;
  }
  return norm_backward(rms, g, x, ndims, NULL, eps, NULL, dw, db);
}

dt_status dt__cpu_layer_norm_backward_all(const dt_tensor *g, const dt_tensor *x, int ndims,
                                          const dt_tensor *weight, double eps, dt_tensor *dx,
                                          dt_tensor *dw, dt_tensor *db) {
  int lead = x->ndim - ndims;
  if (dt__numel(ndims, x->shape + lead) == 0 || dt__numel(lead, x->shape) == 0) {
    dt_status st = dt__cpu_norm_backward_input(false, g, x, ndims, weight, eps, dx);
    return st ? st : dt__cpu_norm_backward_affine(false, g, x, ndims, eps, dw, db);
  }
  return norm_backward(false, g, x, ndims, weight, eps, dx, dw, db);
}
