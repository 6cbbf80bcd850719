/* Autograd's public API on tensors: requires_grad, .grad, retain_grad, grad mode. */
#include <inttypes.h>

#include "autograd/autograd_impl.h"
#include "dtensor/dist.h"
#include "dtensor/ops.h"

atomic_int dt__autograd_live;
_Thread_local bool dt__grad_disabled;

static void meta_destroy(dt_tensor_ext *ext) {
  dt_autograd_meta *meta = (dt_autograd_meta *)ext;
  /* A node that was asked to keep this tensor's gradient must forget it. */
  if (meta->grad_fn && meta->output_nr < DT_OP_MAX_META &&
      meta->grad_fn->retain_meta[meta->output_nr] == meta) {
    meta->grad_fn->retain_meta[meta->output_nr] = NULL;
  }
  dt_tensor_release(meta->grad);
  dt__autograd_node_release(meta->grad_fn);
  dt__free(meta);
  atomic_fetch_sub_explicit(&dt__autograd_live, 1, memory_order_relaxed);
}

dt_autograd_meta *dt__autograd_meta_get(dt_tensor *t) {
  if (t->autograd) return (dt_autograd_meta *)t->autograd;
  dt_autograd_meta *meta = dt__calloc(sizeof *meta);
  if (!meta) {
    dt__error(DT_ERR_NOMEM, "autograd: cannot allocate a tensor's autograd state");
    return NULL;
  }
  meta->ext.destroy = meta_destroy;
  atomic_fetch_add_explicit(&dt__autograd_live, 1, memory_order_relaxed);
  t->autograd = &meta->ext;
  return meta;
}

static dt_autograd_meta *meta_of(const dt_tensor *t) {
  return t ? (dt_autograd_meta *)t->autograd : NULL;
}

void dt__autograd_meta_of(const dt_tensor *t, dt_tensor_meta *meta) {
  meta->dtype = t->dtype;
  meta->ndim = t->spec ? dt_dist_ndim(t) : t->ndim;
  const int64_t *shape = t->spec ? dt_dist_global_shape(t) : t->shape;
  for (int i = 0; i < meta->ndim; i++) meta->shape[i] = shape[i];
}

dt_status dt_tensor_set_requires_grad(dt_tensor *t, bool requires_grad) {
  if (!t) return dt__error(DT_ERR_INVALID, "tensor_set_requires_grad: t is NULL");
  dt_autograd_meta *meta = meta_of(t);
  if (meta && meta->grad_fn) {
    return dt__error(DT_ERR_INVALID,
                     "tensor_set_requires_grad: t is not a leaf (it is output %d of a recorded "
                     "%s); dt_detach it to make a leaf",
                     meta->output_nr, dt__op_table[meta->grad_fn->call.op].name);
  }
  if (!requires_grad) {
    if (meta) meta->requires_grad = false;
    return DT_OK;
  }
  if (!dt_dtype_is_floating(t->dtype)) {
    return dt__error(DT_ERR_DTYPE,
                     "tensor_set_requires_grad: a %s tensor cannot require grad (only floating "
                     "dtypes have gradients)",
                     dt_dtype_name(t->dtype));
  }
  meta = dt__autograd_meta_get(t);
  if (!meta) return DT_ERR_NOMEM;
  meta->requires_grad = true;
  return DT_OK;
}

bool dt_tensor_requires_grad(const dt_tensor *t) {
  const dt_autograd_meta *meta = meta_of(t);
  return meta && meta->requires_grad;
}

bool dt_tensor_is_leaf(const dt_tensor *t) {
  const dt_autograd_meta *meta = meta_of(t);
  return t && (!meta || !meta->grad_fn);
}

dt_status dt_tensor_grad(const dt_tensor *t, dt_tensor **out) {
  if (!out) return dt__error(DT_ERR_INVALID, "tensor_grad: out is NULL");
  *out = NULL;
  if (!t) return dt__error(DT_ERR_INVALID, "tensor_grad: t is NULL");
  const dt_autograd_meta *meta = meta_of(t);
  if (meta) *out = dt_tensor_retain(meta->grad);
  return DT_OK;
}

dt_status dt_tensor_set_grad(dt_tensor *t, dt_tensor *grad) {
  if (!t) return dt__error(DT_ERR_INVALID, "tensor_set_grad: t is NULL");
  if (grad) {
    dt_tensor_meta tm, gm;
    dt__autograd_meta_of(t, &tm);
    dt__autograd_meta_of(grad, &gm);
    if (gm.dtype != tm.dtype) {
      return dt__error(DT_ERR_DTYPE, "tensor_set_grad: grad is %s but t is %s",
                       dt_dtype_name(gm.dtype), dt_dtype_name(tm.dtype));
    }
    bool same = gm.ndim == tm.ndim;
    for (int i = 0; same && i < tm.ndim; i++) same = gm.shape[i] == tm.shape[i];
    if (!same) {
      char a[160], b[160];
      return dt__error(DT_ERR_INVALID, "tensor_set_grad: grad has shape %s but t has %s",
                       dt__format_ints(a, sizeof a, gm.ndim, gm.shape),
                       dt__format_ints(b, sizeof b, tm.ndim, tm.shape));
    }
  }
  dt_autograd_meta *meta = meta_of(t);
  if (!meta && !grad) return DT_OK;
  if (!meta && !(meta = dt__autograd_meta_get(t))) return DT_ERR_NOMEM;
  dt_tensor *old = meta->grad;
  meta->grad = dt_tensor_retain(grad);
  dt_tensor_release(old);
  return DT_OK;
}

dt_status dt_tensor_zero_grad(dt_tensor *t, bool set_to_none) {
  if (!t) return dt__error(DT_ERR_INVALID, "tensor_zero_grad: t is NULL");
  dt_autograd_meta *meta = meta_of(t);
  if (!meta || !meta->grad) return DT_OK;
  if (set_to_none) {
    dt_tensor_release(meta->grad);
    meta->grad = NULL;
    return DT_OK;
  }
  /* In place under no_grad: the gradient may itself be saved by nothing, but filling it must
   * not be refused as an in-place op on a tensor that requires grad. */
  bool prev = dt_grad_mode_set(false);
  dt_status st = dt_fill_(meta->grad, 0.0);
  dt_grad_mode_set(prev);
  return st;
}

dt_status dt_tensor_retain_grad(dt_tensor *t) {
  if (!t) return dt__error(DT_ERR_INVALID, "tensor_retain_grad: t is NULL");
  dt_autograd_meta *meta = meta_of(t);
  if (!meta || !meta->requires_grad) {
    return dt__error(DT_ERR_INVALID, "tensor_retain_grad: t does not require grad");
  }
  if (!meta->grad_fn) return DT_OK; /* a leaf keeps its gradient anyway */
  meta->retains_grad = true;
  meta->grad_fn->retain_meta[meta->output_nr] = meta;
  return DT_OK;
}

bool dt_grad_mode_set(bool enabled) {
  bool prev = !dt__grad_disabled;
  dt__grad_disabled = !enabled;
  return prev;
}

bool dt_grad_mode_enabled(void) { return !dt__grad_disabled; }
