/*
 * Cross-entropy rows. The log-sum-exp is taken around the row maximum so that large logits
 * do not overflow. Float32 rows with unit class stride run in float32 (rows.h: blocked sums,
 * vmath.h's exp; the backward writes exp(x - max) into its output row and scales it in
 * place: two passes over the logits, one over the output); any other layout or dtype is
 * read with its strides, in double. One row at a time, so the kernel needs no scratch memory.
 */
#include <math.h>

#include "core/core_impl.h"
#include "kernels/cpu/loss.h"
#include "kernels/cpu/reduce.h"
#include "kernels/cpu/rows.h"
#include "kernels/cpu/vmath.h"
#include "kernels/math/norm.h"
#include "kernels/math/order.h"
#include "tensor/dtype_impl.h"

static double load(const dt_tensor *t, int64_t i, int64_t j) {
  const char *p = dt__tensor_base(t) +
                  (i * t->strides[0] + j * t->strides[1]) * (int64_t)dt__dtype_sizes[t->dtype];
  return dt__load_as_double(t->dtype, p);
}

static void store(dt_tensor *t, int64_t i, int64_t j, double v) {
  char *p = dt__tensor_base(t) +
            (i * t->strides[0] + j * t->strides[1]) * (int64_t)dt__dtype_sizes[t->dtype];
  dt__store_from_double(t->dtype, p, v);
}

static int64_t target_at(const dt_tensor *target, int64_t i) {
  const char *p = dt__tensor_base(target) + i * target->strides[0] * (int64_t)sizeof(int64_t);
  int64_t v;
  memcpy(&v, p, sizeof v);
  return v;
}

/* Reads row i's target: *ignored when it is the ignored index, an error when out of range. */
static dt_status row_target(const char *op, const dt_tensor *target, int64_t i, int64_t classes,
                            const dt_cross_entropy_params *p, int64_t *t, bool *ignored) {
  *t = target_at(target, i);
  *ignored = p->has_ignore_index && *t == p->ignore_index;
  if (*ignored || (*t >= 0 && *t < classes)) return DT_OK;
  return dt__error(DT_ERR_INVALID, "%s: target[%lld] = %lld is out of range for %lld classes", op,
                   (long long)i, (long long)*t, (long long)classes);
}

/* The row maximum and log(sum(exp(x - max))). */
static void row_stats(const dt_tensor *x, int64_t i, int64_t classes, double *max, double *lse) {
  double m = -INFINITY;
  for (int64_t j = 0; j < classes; j++) {
    double v = load(x, i, j);
    m = dt__max_nan(v, m);
  }
  double s = 0.0;
  for (int64_t j = 0; j < classes; j++) s += exp(load(x, i, j) - m);
  *max = m;
  *lse = log(s);
}

/* Row i's loss, given its target t, max m and log-sum-exp lse. */
static double row_loss(const dt_tensor *logits, int64_t i, int64_t classes, int64_t t, double m,
                       double lse, double eps) {
  double x_sum = 0.0;
  if (eps != 0.0) {
    for (int64_t j = 0; j < classes; j++) x_sum += load(logits, i, j);
  }
  return dt__cross_entropy_row(m + lse, load(logits, i, t), x_sum, eps, (double)classes);
}

/* Float32 rows with unit class stride: max, sum of exp and (label smoothing) sum in float32
 * (rows.h), the loss assembled in double from those three numbers. */
static bool fast_rows(const dt_tensor *logits, const dt_tensor *grad_in) {
  return logits->dtype == DT_F32 && (logits->shape[1] <= 1 || logits->strides[1] == 1) &&
         (!grad_in ||
          (grad_in->dtype == DT_F32 && (grad_in->shape[1] <= 1 || grad_in->strides[1] == 1)));
}

static const float *row_f32(const dt_tensor *t, int64_t i) {
  return (const float *)dt__tensor_base(t) + i * t->strides[0];
}

/* Row i of float32 logits: the forward's loss into out[i, 0], or the backward's gradient
 * g (softmax - want) into grad_in's row. */
DT_VECTOR_CLONES static void fast_row(const dt_tensor *logits, int64_t i, int64_t t, double eps,
                                      double g, dt_tensor *out, dt_tensor *grad_in) {
  int64_t classes = logits->shape[1];
  const float *x = row_f32(logits, i);
  float m = dt__row_max_f32(x, classes);
  if (!grad_in) {
    double log_z = (double)m + log((double)dt__row_exp_sum_f32(x, m, NULL, classes));
    double x_sum = eps != 0.0 ? (double)dt__row_sum_f32(x, classes) : 0.0;
    store(out, i, 0, dt__cross_entropy_row(log_z, (double)x[t], x_sum, eps, (double)classes));
    return;
  }
  float *y = (float *)dt__tensor_base(grad_in) + i * grad_in->strides[0];
  float scale = (float)(g / (double)dt__row_exp_sum_f32(x, m, y, classes));
  float smooth = (float)(g * eps / (double)classes);
  for (int64_t j = 0; j < classes; j++) y[j] = y[j] * scale - smooth;
  y[t] -= (float)(g * (1.0 - eps));
}

/* Rows [begin, end) of the float32 path (targets already checked), for the pool. */
typedef struct ce_job {
  const dt_tensor *grad, *logits, *target;
  const dt_cross_entropy_params *p;
  dt_tensor *out;
} ce_job;

static void ce_chunk(void *vp, int64_t begin, int64_t end) {
  const ce_job *j = vp;
  int64_t out_cols = j->grad ? j->logits->shape[1] : 1;
  for (int64_t i = begin; i < end; i++) {
    int64_t t = target_at(j->target, i);
    bool ignored = j->p->has_ignore_index && t == j->p->ignore_index;
    double g = ignored || !j->grad ? 0.0 : load(j->grad, i, 0);
    if (ignored || (j->grad && g == 0.0)) {
      for (int64_t c = 0; c < out_cols; c++) store(j->out, i, c, 0.0);
      continue;
    }
    fast_row(j->logits, i, t, j->p->label_smoothing, g, j->out, j->grad ? j->out : NULL);
  }
}

/* The forward (grad NULL: out[i, 0] = row i's loss) and the backward (out = grad_in) walk the
 * rows alike: check the target, write zeros for an ignored row (and, backward, for a zero
 * incoming gradient), else compute from the row's max and log-sum-exp. */
static dt_status cross_entropy_rows(const char *op, const dt_tensor *grad, const dt_tensor *logits,
                                    const dt_tensor *target, const dt_cross_entropy_params *p,
                                    dt_tensor *out) {
  int64_t rows = logits->shape[0], classes = logits->shape[1];
  int64_t out_cols = grad ? classes : 1;
  double eps = p->label_smoothing;
  if (fast_rows(logits, grad ? out : NULL)) {
    /* Every target checked first, so that the rows can run on the pool (and a bad target
     * leaves out unwritten). */
    for (int64_t i = 0; i < rows; i++) {
      int64_t t;
      bool ignored;
      dt_status st = row_target(op, target, i, classes, p, &t, &ignored);
      if (st) return st;
    }
    ce_job j = {.grad = grad, .logits = logits, .target = target, .p = p, .out = out};
    dt__parallel_for(rows, dt__lines_grain(classes), ce_chunk, &j);
    return DT_OK;
  }
  for (int64_t i = 0; i < rows; i++) {
    int64_t t;
    bool ignored;
    dt_status st = row_target(op, target, i, classes, p, &t, &ignored);
    if (st) return st;
    double g = ignored || !grad ? 0.0 : load(grad, i, 0);
    if (ignored || (grad && g == 0.0)) {
      for (int64_t j = 0; j < out_cols; j++) store(out, i, j, 0.0);
      continue;
    }
    double m, lse;
    row_stats(logits, i, classes, &m, &lse);
    if (!grad) {
      store(out, i, 0, row_loss(logits, i, classes, t, m, lse, eps));
      continue;
    }
    for (int64_t j = 0; j < classes; j++) {
      double softmax = exp(load(logits, i, j) - m - lse);
      store(out, i, j, dt__cross_entropy_grad(g, softmax, j == t, eps, (double)classes));
    }
  }
  return DT_OK;
}

dt_status dt__cpu_cross_entropy(const dt_tensor *logits, const dt_tensor *target,
                                const dt_cross_entropy_params *p, dt_tensor *out) {
  return cross_entropy_rows("cross_entropy_loss", NULL, logits, target, p, out);
}

dt_status dt__cpu_cross_entropy_backward(const dt_tensor *grad, const dt_tensor *logits,
                                         const dt_tensor *target, const dt_cross_entropy_params *p,
                                         dt_tensor *grad_in) {
  return cross_entropy_rows("cross_entropy_loss_backward", grad, logits, target, p, grad_in);
}

/* ---- Vocabulary-parallel terms -------------------------------------------------------------- */

/* Row i's class of this shard's window [offset, offset + C), or -1. */
static int64_t local_class(const dt_tensor *target, int64_t i, int64_t offset, int64_t classes) {
  int64_t j = target_at(target, i) - offset;
  return j >= 0 && j < classes ? j : -1;
}

/* Rows [begin, end) of the terms or of their gradient, for the pool: each row reads and
 * writes its own elements only, in the same order on any number of threads, so the results
 * are the same bits on 1 and N threads. */
typedef struct vocab_job {
  const dt_tensor *logits, *max, *target, *grad; /* grad: the backward's, else NULL */
  int64_t offset;
  bool fast;
  dt_tensor *out; /* the terms (forward) or the logits' gradient (backward) */
} vocab_job;

static void vocab_terms_chunk(void *vp, int64_t begin, int64_t end) {
  const vocab_job *jb = vp;
  const dt_tensor *logits = jb->logits, *max = jb->max, *target = jb->target;
  dt_tensor *terms = jb->out;
  int64_t classes = logits->shape[1], k = terms->shape[1];
  for (int64_t i = begin; i < end; i++) {
    double m = load(max, i, 0), s = 0, sz = 0;
    int64_t j = local_class(target, i, jb->offset, classes);
    if (jb->fast && classes > 0) {
      const float *x = row_f32(logits, i);
      s = (double)dt__row_exp_sum_f32(x, (float)m, NULL, classes);
      if (k > 2) sz = (double)dt__row_sum_f32(x, classes) - (double)classes * m;
    } else {
      for (int64_t c = 0; c < classes; c++) {
        double v = load(logits, i, c);
        s += exp(v - m);
        sz += v - m;
      }
    }
    store(terms, i, 0, s);
    store(terms, i, 1, j >= 0 ? load(logits, i, j) - m : 0.0);
    if (k > 2) store(terms, i, 2, sz);
  }
}

dt_status dt__cpu_vocab_terms(const dt_tensor *logits, const dt_tensor *max,
                              const dt_tensor *target, int64_t offset, dt_tensor *terms) {
  vocab_job jb = {.logits = logits,
                  .max = max,
                  .target = target,
                  .offset = offset,
                  .fast = fast_rows(logits, NULL),
                  .out = terms};
  dt__parallel_for(logits->shape[0], dt__lines_grain(logits->shape[1]), vocab_terms_chunk, &jb);
  return DT_OK;
}

/* y = g0 exp(x - m) + g2 over a float32 row. */
DT_VECTOR_CLONES static void vocab_row_f32(const float *x, float m, float g0, float g2, float *y,
                                           int64_t n) {
  for (int64_t c = 0; c < n; c++) y[c] = g0 * dt__exp_f32(x[c] - m) + g2;
}

static void vocab_backward_chunk(void *vp, int64_t begin, int64_t end) {
  const vocab_job *jb = vp;
  const dt_tensor *logits = jb->logits, *max = jb->max, *grad = jb->grad;
  dt_tensor *out = jb->out;
  int64_t classes = logits->shape[1], k = grad->shape[1];
  for (int64_t i = begin; i < end; i++) {
    double m = load(max, i, 0), g0 = load(grad, i, 0), g1 = load(grad, i, 1);
    double g2 = k > 2 ? load(grad, i, 2) : 0.0;
    int64_t j = local_class(jb->target, i, jb->offset, classes);
    if (jb->fast && classes > 0) {
      float *y = (float *)dt__tensor_base(out) + i * out->strides[0];
      vocab_row_f32(row_f32(logits, i), (float)m, (float)g0, (float)g2, y, classes);
      if (j >= 0) y[j] = (float)((double)y[j] + g1);
      continue;
    }
    for (int64_t c = 0; c < classes; c++)
      store(out, i, c, dt__vocab_terms_grad(g0, exp(load(logits, i, c) - m), g1, g2, c == j));
  }
}

dt_status dt__cpu_vocab_terms_backward(const dt_tensor *logits, const dt_tensor *max,
                                       const dt_tensor *target, const dt_tensor *grad,
                                       int64_t offset, dt_tensor *out) {
  vocab_job jb = {.logits = logits,
                  .max = max,
                  .target = target,
                  .grad = grad,
                  .offset = offset,
                  .fast = fast_rows(logits, out),
                  .out = out};
  dt__parallel_for(logits->shape[0], dt__lines_grain(logits->shape[1]), vocab_backward_chunk, &jb);
  return DT_OK;
}
