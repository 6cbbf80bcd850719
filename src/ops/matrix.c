/* Matrix products: mm, bmm, matmul, addmm, linear. Checks and shapes here; the products in
 * kernels/cpu/gemm.c. */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>

#include "kernels/cpu/matrix.h"
#include "ops/op_impl.h"

/* ---- Checks shared by the products ----------------------------------------------------------- */

/* The result dtype of a product of operands of dtypes a and b (and c, for a bias): the
 * promoted one, which must not be bool (there is no boolean matrix product). */
static dt_status product_dtype(const dt_op_call *call, int n, const dt_tensor *const *ts,
                               dt_dtype *out) {
  dt_dtype d = ts[0]->dtype;
  for (int i = 1; i < n; i++) {
    if (ts[i]) d = dt_dtype_promote(d, ts[i]->dtype);
  }
  if (d == DT_BOOL) {
    return dt__error(DT_ERR_DTYPE,
                     "%s: bool operands have no matrix product (use an integer or "
                     "floating dtype)",
                     dt__op_name(call));
  }
  *out = d;
  return DT_OK;
}

static dt_status require_ndim(const dt_op_call *call, const char *arg, const dt_tensor *t, int ndim,
                              const char *what) {
  if (t->ndim == ndim) return DT_OK;
  char buf[160];
  return dt__error(DT_ERR_SHAPE, "%s: %s must be %s, got shape %s", dt__op_name(call), arg, what,
                   dt__format_ints(buf, sizeof buf, t->ndim, t->shape));
}

/* Every shape error between the two operands names both shapes the same way:
 * "<op>: a [..] and b [..]: <problem>". */
DT_PRINTF(4, 5)
static dt_status operands_error(const dt_op_call *call, const dt_tensor *a, const dt_tensor *b,
                                const char *format, ...) {
  char sa[160], sb[160], problem[256];
  va_list args;
  va_start(args, format);
  vsnprintf(problem, sizeof problem, format, args);
  va_end(args);
  return dt__error(DT_ERR_SHAPE, "%s: a %s and b %s: %s", dt__op_name(call),
                   dt__format_ints(sa, sizeof sa, a->ndim, a->shape),
                   dt__format_ints(sb, sizeof sb, b->ndim, b->shape), problem);
}

static dt_status inner_mismatch(const dt_op_call *call, const dt_tensor *a, const dt_tensor *b,
                                int64_t ka, int64_t kb) {
  return operands_error(call, a, b, "inner dims %" PRId64 " and %" PRId64 " differ", ka, kb);
}

/* mm and addmm: a [n, k] times b [k, m]. */
static dt_status check_matrix_operands(const dt_op_call *call, const dt_tensor *a,
                                       const dt_tensor *b) {
  dt_status st = require_ndim(call, "a", a, 2, "2-D [n, k]");
  if (!st) st = require_ndim(call, "b", b, 2, "2-D [k, m]");
  if (st) return st;
  if (a->shape[1] != b->shape[0]) return inner_mismatch(call, a, b, a->shape[1], b->shape[0]);
  return DT_OK;
}

/* bias must broadcast to the output shape exactly (it is added to every product row). */
static dt_status check_bias(const dt_op_call *call, const dt_tensor *bias, int ndim,
                            const int64_t *shape) {
  int bnd;
  int64_t bshape[DT_MAX_DIMS];
  if (bias->ndim > ndim ||
      dt__broadcast_shapes(dt__op_name(call), bias->ndim, bias->shape, ndim, shape, &bnd, bshape) ||
      memcmp(bshape, shape, sizeof(int64_t) * (size_t)ndim) != 0) {
    char sb[160], so[160]; /* formatted for the message only: a linear's every call passes here */
    dt__format_ints(sb, sizeof sb, bias->ndim, bias->shape);
    dt__format_ints(so, sizeof so, ndim, shape);
    return dt__error(DT_ERR_SHAPE, "%s: bias %s does not broadcast to the output shape %s",
                     dt__op_name(call), sb, so);
  }
  return DT_OK;
}

/* Integer products scale by alpha and beta exactly, so these must be integers. */
static dt_status check_integral_scalars(const dt_op_call *call, dt_dtype dtype) {
  if (dt_dtype_is_floating(dtype)) return DT_OK;
  for (int i = 0; i < 2; i++) {
    double s = call->scalars[i];
    if (s != floor(s) || fabs(s) >= 9.2e18) {
      return dt__error(DT_ERR_INVALID, "%s: %s = %g must be an integer for %s operands",
                       dt__op_name(call), i == 0 ? "beta" : "alpha", s, dt_dtype_name(dtype));
    }
  }
  return DT_OK;
}

/* ---- mm, bmm ------------------------------------------------------------------------------------
 */

dt_status dt__infer_mm(dt_op_call *call, dt_tensor_meta *metas) {
  const dt_tensor *a = call->inputs[0], *b = call->inputs[1];
  dt_status st = check_matrix_operands(call, a, b);
  if (!st) st = product_dtype(call, 2, (const dt_tensor *const[]){a, b}, &metas[0].dtype);
  if (st) return st;
  metas[0].ndim = 2;
  metas[0].shape[0] = a->shape[0];
  metas[0].shape[1] = b->shape[1];
  return DT_OK;
}

dt_status dt__infer_bmm(dt_op_call *call, dt_tensor_meta *metas) {
  const dt_tensor *a = call->inputs[0], *b = call->inputs[1];
  dt_status st = require_ndim(call, "a", a, 3, "3-D [batch, n, k]");
  if (!st) st = require_ndim(call, "b", b, 3, "3-D [batch, k, m]");
  if (st) return st;
  if (a->shape[0] != b->shape[0]) {
    return operands_error(call, a, b, "batch sizes %" PRId64 " and %" PRId64 " differ", a->shape[0],
                          b->shape[0]);
  }
  if (a->shape[2] != b->shape[1]) return inner_mismatch(call, a, b, a->shape[2], b->shape[1]);
  st = product_dtype(call, 2, (const dt_tensor *const[]){a, b}, &metas[0].dtype);
  if (st) return st;
  metas[0].ndim = 3;
  metas[0].shape[0] = a->shape[0];
  metas[0].shape[1] = a->shape[1];
  metas[0].shape[2] = b->shape[2];
  return DT_OK;
}

/* mm and bmm: the shapes are already what the batched kernel takes. */
dt_status dt__kernel_mm(dt_op_call *call) {
  return dt__cpu_matmul(call->inputs[0], call->inputs[1], NULL, 0.0, 1.0, call->outputs[0]);
}

/* ---- matmul -----------------------------------------------------------------------------------
 */

/* torch.matmul: a 1-D a is a row vector [1, k] and a 1-D b a column vector [k, 1], whose unit
 * dim is dropped from the result; dims before the last two are batch dims that broadcast. */
dt_status dt__infer_matmul(dt_op_call *call, dt_tensor_meta *metas) {
  const dt_tensor *a = call->inputs[0], *b = call->inputs[1];
  if (a->ndim == 0 || b->ndim == 0) {
    return operands_error(call, a, b, "both operands need at least 1 dim");
  }
  bool a1 = a->ndim == 1, b1 = b->ndim == 1;
  int64_t ka = a->shape[a->ndim - 1], kb = b1 ? b->shape[0] : b->shape[b->ndim - 2];
  if (ka != kb) return inner_mismatch(call, a, b, ka, kb);
  int abd = a1 ? 0 : a->ndim - 2, bbd = b1 ? 0 : b->ndim - 2;
  int bnd = abd > bbd ? abd : bbd;
  dt_tensor_meta *m = &metas[0];
  for (int i = 0; i < bnd; i++) {
    int ia = abd - bnd + i, ib = bbd - bnd + i;
    int64_t sa = ia >= 0 ? a->shape[ia] : 1, sb = ib >= 0 ? b->shape[ib] : 1;
    if (sa != sb && sa != 1 && sb != 1) {
      return operands_error(call, a, b, "batch dims do not broadcast (%" PRId64 " vs %" PRId64 ")",
                            sa, sb);
    }
    m->shape[i] = sa == 1 ? sb : sa;
  }
  m->ndim = bnd;
  if (!a1) m->shape[m->ndim++] = a->shape[a->ndim - 2];
  if (!b1) m->shape[m->ndim++] = b->shape[b->ndim - 1];
  return product_dtype(call, 2, (const dt_tensor *const[]){a, b}, &m->dtype);
}

/* Sees a 1-D operand as a one-row or one-column matrix, and out through the shape with the
 * unit dims put back, so that every case is one batched product. */
dt_status dt__kernel_matmul(dt_op_call *call) {
  const dt_tensor *a = call->inputs[0], *b = call->inputs[1];
  dt_tensor *out = call->outputs[0];
  dt_tensor views[3];
  dt__matmul_as_matrices(&a, &b, &out, views);
  return dt__cpu_matmul(a, b, NULL, 0.0, 1.0, out);
}

/* ---- addmm -------------------------------------------------------------------------------------
 */

dt_status dt__infer_addmm(dt_op_call *call, dt_tensor_meta *metas) {
  const dt_tensor *bias = call->inputs[0], *a = call->inputs[1], *b = call->inputs[2];
  dt_status st = check_matrix_operands(call, a, b);
  if (st) return st;
  int64_t shape[2] = {a->shape[0], b->shape[1]};
  st = check_bias(call, bias, 2, shape);
  if (!st) st = product_dtype(call, 3, (const dt_tensor *const[]){bias, a, b}, &metas[0].dtype);
  if (!st) st = check_integral_scalars(call, metas[0].dtype);
  if (st) return st;
  dt__meta_set(&metas[0], metas[0].dtype, 2, shape);
  return DT_OK;
}

dt_status dt__kernel_addmm(dt_op_call *call) {
  return dt__cpu_matmul(call->inputs[1], call->inputs[2], call->inputs[0], call->scalars[0],
                        call->scalars[1], call->outputs[0]);
}

/* ---- linear ------------------------------------------------------------------------------------
 */

dt_status dt__infer_linear(dt_op_call *call, dt_tensor_meta *metas) {
  const dt_tensor *x = call->inputs[0], *w = call->inputs[1], *bias = call->inputs[2];
  dt_status st = require_ndim(call, "weight", w, 2, "2-D [out_features, in_features]");
  if (st) return st;
  if (x->ndim == 0 || x->shape[x->ndim - 1] != w->shape[1]) {
    char sx[160], sw[160];
    return dt__error(DT_ERR_SHAPE,
                     "%s: x %s and weight %s: x's last dim must equal in_features %" PRId64,
                     dt__op_name(call), dt__format_ints(sx, sizeof sx, x->ndim, x->shape),
                     dt__format_ints(sw, sizeof sw, w->ndim, w->shape), w->shape[1]);
  }
  dt_tensor_meta *m = &metas[0];
  dt__meta_set(m, x->dtype, x->ndim, x->shape);
  m->shape[x->ndim - 1] = w->shape[0];
  if (bias) {
    st = check_bias(call, bias, m->ndim, m->shape);
    if (st) return st;
  }
  return product_dtype(call, 3, (const dt_tensor *const[]){x, w, bias}, &m->dtype);
}

/* x [..., in] @ weight^T: weight^T is weight read with its strides swapped, which CBLAS
 * takes as a transposed operand, so a contiguous weight is never copied; a contiguous x is
 * folded into one GEMM over all its leading dims. */
dt_status dt__kernel_linear(dt_op_call *call) {
  const dt_tensor *x = call->inputs[0], *w = call->inputs[1], *bias = call->inputs[2];
  dt_tensor *out = call->outputs[0];
  dt_tensor views[3];
  const dt_tensor *wt = dt__linear_as_matmul(&x, w, &out, views);
  return dt__cpu_matmul(x, wt, bias, 1.0, 1.0, out);
}

/* ---- Public functions
 * ---------------------------------------------------------------------------- */

dt_status dt_mm(dt_tensor *a, dt_tensor *b, dt_tensor **out) {
  return dt__dispatch_two(DT_OP_MM, a, b, 0.0, out);
}
dt_status dt_bmm(dt_tensor *a, dt_tensor *b, dt_tensor **out) {
  return dt__dispatch_two(DT_OP_BMM, a, b, 0.0, out);
}
dt_status dt_matmul(dt_tensor *a, dt_tensor *b, dt_tensor **out) {
  return dt__dispatch_two(DT_OP_MATMUL, a, b, 0.0, out);
}

dt_status dt_addmm(dt_tensor *bias, dt_tensor *a, dt_tensor *b, dt_tensor **out) {
  return dt_addmm_ex(bias, a, b, 1.0, 1.0, out);
}

dt_status dt_addmm_ex(dt_tensor *bias, dt_tensor *a, dt_tensor *b, double beta, double alpha,
                      dt_tensor **out) {
  dt_op_call call = {.op = DT_OP_ADDMM,
                     .n_inputs = 3,
                     .inputs = {bias, a, b},
                     .scalars = {beta, alpha},
                     .n_outputs = 1,
                     .outputs = out};
  return dt__dispatch(&call);
}

dt_status dt_linear(dt_tensor *x, dt_tensor *weight, dt_tensor *bias, dt_tensor **out) {
  return dt__dispatch_tensors(DT_OP_LINEAR, 3, (dt_tensor *[]){x, weight, bias}, 0, 0, out);
}
