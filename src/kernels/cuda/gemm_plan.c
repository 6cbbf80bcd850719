/* The mapping of row-major products onto a column-major BLAS (gemm_plan.h). */
#include <inttypes.h>
#include <limits.h>

#include "kernels/cuda/gemm_plan.h"
#include "kernels/matmul_views.h"

static int64_t max1(int64_t v) { return v > 1 ? v : 1; }

bool dt__gemm_layout_of(int64_t rows, int64_t cols, int64_t rs, int64_t cs, dt_gemm_layout *out) {
  if (cs == 1 || cols <= 1) {
    int64_t ld = rows <= 1 ? max1(cols) : rs;
    if (ld >= max1(cols) && ld <= INT_MAX) {
      *out = (dt_gemm_layout){false, ld};
      return true;
    }
  }
  if (rs == 1 || rows <= 1) {
    int64_t ld = cols <= 1 ? max1(rows) : cs;
    if (ld >= max1(rows) && ld <= INT_MAX) {
      *out = (dt_gemm_layout){true, ld};
      return true;
    }
  }
  return false;
}

bool dt__gemm_matrix_layout(const dt_tensor *t, dt_gemm_layout *out) {
  int nd = t->ndim;
  return dt__gemm_layout_of(t->shape[nd - 2], t->shape[nd - 1], t->strides[nd - 2],
                            t->strides[nd - 1], out);
}

bool dt__gemm_fold_rows(const dt_tensor *a, const dt_tensor *b, const dt_tensor *out, int64_t *rows,
                        dt_gemm_layout *layout) {
  int64_t total, rs;
  if (!dt__matmul_row_run(a, b, out, &total, &rs)) return false;
  if (!dt__gemm_layout_of(total, a->shape[a->ndim - 1], rs, a->strides[a->ndim - 1], layout)) {
    return false;
  }
  /* The rows of every batch become rows of one matrix only when rows are contiguous. */
  if (layout->transposed) return false;
  *rows = total;
  return true;
}

static int64_t batch_stride(const dt_tensor *t, int nb, int d) {
  int td = t->ndim - 2 - nb + d;
  return td >= 0 && t->shape[td] != 1 ? t->strides[td] : 0;
}

void dt__gemm_batches(const dt_tensor *a, const dt_tensor *b, const dt_tensor *out,
                      dt_gemm_batches *bd) {
  int nb = out->ndim - 2;
  bd->nb = 0;
  for (int d = 0; d < nb; d++) {
    int64_t size = out->shape[d];
    if (size == 1) continue;
    int64_t sa = batch_stride(a, nb, d), sb = batch_stride(b, nb, d), sc = out->strides[d];
    int j = bd->nb - 1;
    if (j >= 0 && bd->sa[j] == sa * size && bd->sb[j] == sb * size && bd->sc[j] == sc * size) {
      bd->shape[j] *= size; /* the previous dim runs on into this one */
      bd->sa[j] = sa, bd->sb[j] = sb, bd->sc[j] = sc;
      continue;
    }
    bd->shape[bd->nb] = size;
    bd->sa[bd->nb] = sa, bd->sb[bd->nb] = sb, bd->sc[bd->nb] = sc;
    bd->nb++;
  }
}

dt_status dt__gemm_run(const char *op, const dt_tensor *a, const dt_tensor *b, dt_tensor *out,
                       dt_gemm_launch_fn fn, void *context) {
  int64_t n, m, k;
  dt_status st = dt__matmul_sizes(op, "cuBLAS", a, out, &n, &m, &k);
  if (st) return st;
  dt_gemm_layout la, lb;
  if (!dt__gemm_matrix_layout(a, &la) || !dt__gemm_matrix_layout(b, &lb))
    return dt__error(DT_ERR_INTERNAL, "%s: an operand without a BLAS layout", op);
  int64_t es = (int64_t)dt__dtype_sizes[out->dtype];
  dt_gemm_launch l = {.trans_a = lb.transposed,
                      .trans_b = la.transposed,
                      .m = m,
                      .n = n,
                      .k = k,
                      .a = dt__tensor_base(b),
                      .lda = lb.ld,
                      .b = dt__tensor_base(a),
                      .ldb = la.ld,
                      .c = dt__tensor_base(out),
                      .ldc = max1(m),
                      .batch = 1};
  int64_t rows;
  dt_gemm_layout folded;
  if (dt__gemm_fold_rows(a, b, out, &rows, &folded)) {
    l.n = rows;
    l.trans_b = folded.transposed;
    l.ldb = folded.ld;
    return fn(context, &l);
  }
  dt_gemm_batches bd;
  dt__gemm_batches(a, b, out, &bd);
  if (bd.nb == 0) return fn(context, &l);
  int last = bd.nb - 1;
  if (bd.shape[last] > INT_MAX) {
    return dt__error(DT_ERR_UNSUPPORTED, "%s: %" PRId64 " batches exceed what cuBLAS takes", op,
                     bd.shape[last]);
  }
  l.batch = bd.shape[last];
  l.stride_a = bd.sb[last], l.stride_b = bd.sa[last], l.stride_c = bd.sc[last];
  const char *pa = dt__tensor_base(a), *pb = dt__tensor_base(b);
  char *pc = dt__tensor_base(out);
  int64_t outer = dt__numel(last, bd.shape), idx[DT_MAX_DIMS] = {0};
  for (int64_t i = 0; i < outer; i++) {
    int64_t oa = 0, ob = 0, oc = 0;
    for (int d = 0; d < last; d++) {
      oa += idx[d] * bd.sa[d];
      ob += idx[d] * bd.sb[d];
      oc += idx[d] * bd.sc[d];
    }
    l.a = pb + ob * es;
    l.b = pa + oa * es;
    l.c = pc + oc * es;
    st = fn(context, &l);
    if (st) return st;
    for (int d = last - 1; d >= 0 && ++idx[d] == bd.shape[d]; d--) idx[d] = 0;
  }
  return DT_OK;
}
