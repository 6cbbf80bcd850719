/* rms_norm and scaled_dot_product_attention (with its backward op): argument checks, output
 * metas, the CPU kernels' calls and the public functions. */
#include <float.h>
#include <math.h>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/reduce.h"
#include "ops/attention_impl.h"
#include "ops/op_impl.h"

/* ---- rms_norm (its infer is layer_norm's: {input, weight?}, normalized_shape, eps) -------- */

dt_status dt__kernel_rms_norm(dt_op_call *call) {
  const dt_tensor *x = call->inputs[0];
  int ndims = (int)call->n_ints;
  if (dt__rms_norm_f32_fits(x, ndims, call->outputs[0]))
    return dt__cpu_rms_norm_f32(x, ndims, call->inputs[1], call->scalars[0], call->outputs[0]);
  return dt__cpu_rms_norm(x, ndims, call->inputs[1], call->scalars[0], call->outputs[0]);
}

dt_status dt_rms_norm(dt_tensor *x, int ndims, const int64_t *normalized_shape, dt_tensor *weight,
                      double eps, dt_tensor **out) {
  dt_status st = dt__norm_check_eps("rms_norm", eps, out);
  if (st) return st;
  return dt__norm_dispatch(DT_OP_RMS_NORM, x, ndims, normalized_shape, weight, NULL, eps, out);
}

/* ---- scaled_dot_product_attention ---------------------------------------------------------- */

static dt_status check_4d(const dt_op_call *call, const char *arg, const dt_tensor *t,
                          dt_dtype dtype) {
  if (t->ndim != 4) {
    char b[160];
    return dt__error(DT_ERR_SHAPE, "%s: %s of shape %s must be 4-D [batch, heads, seq, dim]",
                     dt__op_name(call), arg, dt__format_ints(b, sizeof b, t->ndim, t->shape));
  }
  /* The query's own dtype is checked first (its message said "expected the query's floating
   * dtype int64" for an int64 query). */
  if (!dt_dtype_is_floating(t->dtype))
    return dt__error(DT_ERR_DTYPE, "%s: %s has dtype %s (expected a floating dtype)",
                     dt__op_name(call), arg, dt_dtype_name(t->dtype));
  if (t->dtype != dtype)
    return dt__error(DT_ERR_DTYPE, "%s: %s has dtype %s (expected the query's dtype %s)",
                     dt__op_name(call), arg, dt_dtype_name(t->dtype), dt_dtype_name(dtype));
  return DT_OK;
}

/* q [B, H, T, E], k [B, Hk, S, E], v [B, Hk, S, Ev] with Hk dividing H (or both 0: a head
 * shard with no heads, as uneven shards make, runs and computes nothing); mask (bool or q's
 * dtype) broadcasting to [B, H, T, S]. */
static dt_status check_attention(const dt_op_call *call, const dt_tensor *q, const dt_tensor *k,
                                 const dt_tensor *v, const dt_tensor *mask) {
  const char *op = dt__op_name(call);
  dt_status st = check_4d(call, "query", q, q->dtype);
  if (!st) st = check_4d(call, "key", k, q->dtype);
  if (!st) st = check_4d(call, "value", v, q->dtype);
  if (st) return st;
  char bq[160], bk[160], bv[160];
  if (k->shape[0] != q->shape[0] || v->shape[0] != q->shape[0] || k->shape[1] != v->shape[1] ||
      k->shape[2] != v->shape[2] || k->shape[3] != q->shape[3] ||
      (k->shape[1] < 1 ? q->shape[1] != 0 : q->shape[1] % k->shape[1] != 0))
    return dt__error(DT_ERR_SHAPE,
                     "%s: query %s, key %s, value %s: expected [B, H, T, E], [B, Hk, S, E], "
                     "[B, Hk, S, Ev] with Hk dividing H",
                     op, dt__format_ints(bq, sizeof bq, 4, q->shape),
                     dt__format_ints(bk, sizeof bk, 4, k->shape),
                     dt__format_ints(bv, sizeof bv, 4, v->shape));
  if (mask) {
    if (mask->dtype != DT_BOOL && mask->dtype != q->dtype)
      return dt__error(DT_ERR_DTYPE, "%s: attn_mask has dtype %s (expected bool or %s)", op,
                       dt_dtype_name(mask->dtype), dt_dtype_name(q->dtype));
    int64_t full[4] = {q->shape[0], q->shape[1], q->shape[2], k->shape[2]};
    bool ok = mask->ndim <= 4;
    for (int d = 0; d < mask->ndim && ok; d++) {
      int64_t m = mask->shape[mask->ndim - 1 - d];
      ok = m == 1 || m == full[3 - d];
    }
    if (!ok)
      return dt__error(DT_ERR_SHAPE, "%s: attn_mask of shape %s does not broadcast to %s", op,
                       dt__format_ints(bq, sizeof bq, mask->ndim, mask->shape),
                       dt__format_ints(bk, sizeof bk, 4, full));
  }
  return DT_OK;
}

dt_status dt__infer_attention(dt_op_call *call, dt_tensor_meta *metas) {
  const dt_tensor *q = call->inputs[0], *k = call->inputs[1], *v = call->inputs[2];
  dt_status st = check_attention(call, q, k, v, call->inputs[3]);
  if (st) return st;
  if (q->dtype != DT_F64 && call->scalars[0] > FLT_MAX) /* float16 / bfloat16 run in float32 */
    return dt__error(DT_ERR_INVALID,
                     "%s: scale %g overflows float32 (the query's dtype %s is computed in "
                     "float32; at most %g)",
                     dt__op_name(call), call->scalars[0], dt_dtype_name(q->dtype), (double)FLT_MAX);
  int64_t out[4] = {q->shape[0], q->shape[1], q->shape[2], v->shape[3]};
  dt__meta_set(&metas[0], q->dtype, 4, out);
  dt__meta_set(&metas[1], q->dtype == DT_F64 ? DT_F64 : DT_F32, 3, q->shape);
  if (call->n_outputs > 2) call->n_outputs = 2;
  return DT_OK;
}

/* The kernel's arguments from a call of either op (q, k, v at `first`, then the mask). */
static void attention_args(const dt_op_call *call, int first, const dt_tensor *mask,
                           dt_attention_args *a) {
  a->q = call->inputs[first];
  a->k = call->inputs[first + 1];
  a->v = call->inputs[first + 2];
  a->mask = mask;
  a->causal = call->ints[0] != 0;
  /* E = 0: every score is an empty sum (0) whatever the scale; 1/sqrt(0) = inf would make
   * them inf * 0 = NaN (PyTorch gives the mean of the values). */
  int64_t E = a->q->shape[3];
  a->scale = call->scalars[0] > 0 ? call->scalars[0] : E > 0 ? 1.0 / sqrt((double)E) : 1.0;
  if (mask) {
    int64_t full[4] = {a->q->shape[0], a->q->shape[1], a->q->shape[2], a->k->shape[2]};
    dt__broadcast_strides(mask, 4, full, a->mask_strides);
  }
}

dt_status dt__kernel_attention(dt_op_call *call) {
  /* No heads (an empty head shard): the outputs have no elements, and the kernels' group
   * size H / Hk has no value. */
  if (call->inputs[1]->shape[1] == 0) return DT_OK;
  dt_attention_args a;
  attention_args(call, 0, call->inputs[3], &a);
  return dt__cpu_attention(&a, call->outputs[0], call->outputs[1]);
}

/* Backward op: inputs {gs [B, H, T, Ev + 2] (grad, lse, delta), q, k, v, mask?}; outputs dq,
 * dk, dv. */
dt_status dt__infer_attention_backward(dt_op_call *call, dt_tensor_meta *metas) {
  const dt_tensor *gs = call->inputs[0], *q = call->inputs[1], *k = call->inputs[2],
                  *v = call->inputs[3];
  dt_status st = check_attention(call, q, k, v, call->inputs[4]);
  if (st) return st;
  int64_t want[4] = {q->shape[0], q->shape[1], q->shape[2], v->shape[3] + 2};
  bool ok = gs->ndim == 4 && dt_dtype_is_floating(gs->dtype);
  for (int d = 0; d < 4 && ok; d++) ok = gs->shape[d] == want[d];
  if (!ok) {
    char b1[160], b2[160];
    return dt__error(DT_ERR_SHAPE, "%s: grad_and_stats of shape %s (%s) must be floating %s",
                     dt__op_name(call), dt__format_ints(b1, sizeof b1, gs->ndim, gs->shape),
                     dt_dtype_name(gs->dtype), dt__format_ints(b2, sizeof b2, 4, want));
  }
  dt__meta_set(&metas[0], q->dtype, 4, q->shape);
  dt__meta_set(&metas[1], q->dtype, 4, k->shape);
  dt__meta_set(&metas[2], q->dtype, 4, v->shape);
  if (call->n_outputs > 3) call->n_outputs = 3;
  return DT_OK;
}

dt_status dt__kernel_attention_backward(dt_op_call *call) {
  if (call->inputs[2]->shape[1] == 0) return DT_OK; /* no heads: nothing to compute */
  dt_attention_args a;
  attention_args(call, 1, call->inputs[4], &a);
  return dt__cpu_attention_backward(&a, call->inputs[0], call->outputs[0], call->outputs[1],
                                    call->outputs[2]);
}

dt_status dt_scaled_dot_product_attention(dt_tensor *q, dt_tensor *k, dt_tensor *v, dt_tensor *mask,
                                          const dt_attention_options *options, dt_tensor **out,
                                          dt_tensor **lse) {
  if (out) *out = NULL;
  if (lse) *lse = NULL;
  if (!out) return dt__error(DT_ERR_INVALID, "scaled_dot_product_attention: out is NULL");
  double scale = options ? options->scale : 0;
  if (!isfinite(scale) || scale < 0)
    return dt__error(DT_ERR_INVALID,
                     "scaled_dot_product_attention: scale %g must be finite and > 0 "
                     "(0: 1/sqrt(E))",
                     scale);
  dt_tensor *outs[2] = {NULL, NULL};
  dt_op_call call = {.op = DT_OP_SCALED_DOT_PRODUCT_ATTENTION,
                     .n_inputs = 4,
                     .inputs = {q, k, v, mask},
                     .n_ints = 1,
                     .ints = {options && options->is_causal},
                     .scalars = {scale},
                     .n_outputs = 2,
                     .outputs = outs};
  dt_status st = dt__dispatch(&call);
  if (st) return st;
  *out = outs[0];
  if (lse)
    *lse = outs[1];
  else
    dt_tensor_release(outs[1]);
  return DT_OK;
}

dt_status dt__attention_backward(const dt_op_call *fwd, dt_tensor *grad_and_stats, dt_tensor **dq,
                                 dt_tensor **dk, dt_tensor **dv) {
  dt_tensor *outs[3] = {NULL, NULL, NULL};
  dt_op_call call = {
      .op = DT_OP_SCALED_DOT_PRODUCT_ATTENTION_BACKWARD,
      .n_inputs = 5,
      .inputs = {grad_and_stats, fwd->inputs[0], fwd->inputs[1], fwd->inputs[2], fwd->inputs[3]},
      .n_ints = 1,
      .ints = {fwd->ints[0]},
      .scalars = {fwd->scalars[0]},
      .n_outputs = 3,
      .outputs = outs};
  dt_status st = dt__dispatch(&call);
  *dq = outs[0], *dk = outs[1], *dv = outs[2];
  return st;
}

dt_status dt__attention_grad_and_stats(dt_tensor *out, dt_tensor *lse, dt_tensor *g, dt_tensor *gl,
                                       dt_tensor **gs) {
  dt_tensor *zero = NULL, *gc = NULL, *oc = NULL, *go = NULL, *dsum = NULL, *dl = NULL;
  dt_tensor *stats = NULL;
  dt_dtype acc = dt_tensor_dtype(lse);
  int64_t last = -1;
  dt_status st = DT_OK;
  *gs = NULL;
  if (!g) {
    st = dt_zeros_like(out, &zero);
    g = zero;
  }
  /* float32 and float64 outputs convert nothing: dt_to of the same dtype is a view */
  if (!st) st = dt_to(g, acc, &gc);
  if (!st) st = dt_to(out, acc, &oc);
  if (!st) st = dt_mul(gc, oc, &go);
  if (!st) st = dt_sum_dims(go, 1, &last, false, &dsum);
  if (!st && gl) st = dt_sub(dsum, gl, &dl);
  if (!st) st = dt_stack(2, (dt_tensor *[]){lse, dl ? dl : dsum}, -1, &stats);
  if (!st) st = dt_cat(2, (dt_tensor *[]){gc, stats}, -1, gs);
  dt_tensor *tmp[] = {zero, gc, oc, go, dsum, dl, stats};
  for (size_t i = 0; i < sizeof tmp / sizeof *tmp; i++) dt_tensor_release(tmp[i]);
  return st;
}
