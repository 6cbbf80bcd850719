/* Autograd's public API on tensors: requires_grad, .grad, retain_grad, grad mode. */
#include <inttypes.h>
#include <pthread.h>

#include "autograd/autograd_impl.h"
#include "autograd/meta_of.h"
#include "dtensor/dist.h"
#include "dtensor/ops.h"

static dt_autograd_meta *meta_of(const dt_tensor *t) {
  return t ? (dt_autograd_meta *)t->autograd : NULL;
}

/* The meta of t, created if missing, with autograd's dispatch installed first: the public
 * calls here are where tensors first get autograd state, so dispatch never sees a live meta
 * without it (the one entry of dt__upcalls that autograd owns). */
static dt_status record_conversion(const dt_autograd_function *fn, struct dt_dist_spec *spec,
                                   dt_tensor *input, dt_tensor *output) {
  if (!dt__autograd_should_record(input)) return DT_OK;
  return dt__autograd_record_function(fn, dt__upcall.spec_retain(spec), input, output);
}

static dt_status copy_requires_grad(const dt_tensor *from, dt_tensor *to) {
  return dt_tensor_requires_grad(from) ? dt_tensor_set_requires_grad(to, true) : DT_OK;
}

static void install_upcalls(void) {
  dt__upcall.autograd_dispatch = dt__autograd_dispatch;
  dt__upcall.autograd_record_conversion = record_conversion;
  dt__upcall.autograd_copy_requires_grad = copy_requires_grad;
}

/* The upcalls are written once (rank threads call this concurrently while others dispatch);
 * a meta's creation then raises dt__autograd_live with release order, and dispatch reads it
 * with acquire before it reads dt__upcall.autograd_dispatch. */
static dt_autograd_meta *meta_create(dt_tensor *t) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, install_upcalls);
  return dt__autograd_meta_get(t);
}

dt_status dt_tensor_set_requires_grad(dt_tensor *t, bool requires_grad) {
  if (!t) return dt__error(DT_ERR_INVALID, "dt_tensor_set_requires_grad: t is NULL");
  dt_autograd_meta *meta = meta_of(t);
  if (meta && meta->grad_fn) {
    return dt__error(DT_ERR_INVALID,
                     "dt_tensor_set_requires_grad: t is not a leaf (it is output %d of a recorded "
                     "%s); dt_detach it to make a leaf",
                     meta->output_nr, dt__autograd_node_name(meta->grad_fn));
  }
  if (!requires_grad) {
    if (meta) meta->requires_grad = false;
    return DT_OK;
  }
  if (!dt_dtype_is_floating(t->dtype)) {
    return dt__error(DT_ERR_DTYPE,
                     "dt_tensor_set_requires_grad: a %s tensor cannot require grad (only floating "
                     "dtypes have gradients)",
                     dt_dtype_name(t->dtype));
  }
  meta = meta_create(t);
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
  if (!out) return dt__error(DT_ERR_INVALID, "dt_tensor_grad: out is NULL");
  *out = NULL;
  if (!t) return dt__error(DT_ERR_INVALID, "dt_tensor_grad: t is NULL");
  const dt_autograd_meta *meta = meta_of(t);
  if (meta) *out = dt_tensor_retain(meta->grad);
  return DT_OK;
}

dt_status dt_tensor_set_grad(dt_tensor *t, dt_tensor *grad) {
  if (!t) return dt__error(DT_ERR_INVALID, "dt_tensor_set_grad: t is NULL");
  if (grad) {
    /* A tensor holding a reference to itself as its gradient would never be freed (and
     * PyTorch refuses it too: "can't assign Variable as its own grad"). */
    if (grad == t)
      return dt__error(DT_ERR_INVALID, "dt_tensor_set_grad: grad is t itself (a tensor cannot "
                                       "be its own gradient; pass a copy)");
    /* The optimizer and clip_grad_norm assume a distributed tensor's gradient is distributed
     * and a local tensor's is local, as backward makes them. */
    if (dt_tensor_is_distributed(grad) != dt_tensor_is_distributed(t)) {
      return dt__error(DT_ERR_INVALID, "dt_tensor_set_grad: grad is %s but t is %s",
                       dt_tensor_is_distributed(grad) ? "distributed" : "local",
                       dt_tensor_is_distributed(t) ? "distributed" : "local");
    }
    dt_tensor_meta tm, gm;
    dt__autograd_meta_of(t, &tm);
    dt__autograd_meta_of(grad, &gm);
    if (gm.dtype != tm.dtype) {
      return dt__error(DT_ERR_DTYPE, "dt_tensor_set_grad: grad is %s but t is %s",
                       dt_dtype_name(gm.dtype), dt_dtype_name(tm.dtype));
    }
    /* PyTorch: "assigned grad has data located on a different device". The optimizer and
     * clip_grad_norm would read it as the parameter's memory. */
    dt_device gd = dt_tensor_device(grad), td = dt_tensor_device(t);
    if (gd.kind != td.kind || gd.index != td.index) {
      char a[64], b[64];
      return dt__error(DT_ERR_INVALID, "dt_tensor_set_grad: grad is on %s but t is on %s",
                       dt_device_format(gd, a, sizeof a), dt_device_format(td, b, sizeof b));
    }
    bool same = gm.ndim == tm.ndim;
    for (int i = 0; same && i < tm.ndim; i++) same = gm.shape[i] == tm.shape[i];
    if (!same) {
      char a[160], b[160];
      return dt__error(DT_ERR_INVALID, "dt_tensor_set_grad: grad has shape %s but t has %s",
                       dt__format_ints(a, sizeof a, gm.ndim, gm.shape),
                       dt__format_ints(b, sizeof b, tm.ndim, tm.shape));
    }
  }
  dt_autograd_meta *meta = meta_of(t);
  if (!meta && !grad) return DT_OK;
  /* A gradient that requires grad is stored as a detached alias (same storage, no graph):
   * there are no higher-order gradients here, and its graph may reach t itself (grad made from
   * t by recorded ops), a cycle t -> grad -> node -> t that would never be freed. */
  dt_tensor *stored = NULL;
  if (grad && dt_tensor_requires_grad(grad)) {
    dt_status st = dt_detach(grad, &stored);
    if (st) return st;
  } else {
    stored = dt_tensor_retain(grad);
  }
  if (!meta && !(meta = meta_create(t))) {
    dt_tensor_release(stored);
    return dt__error(DT_ERR_NOMEM, "dt_tensor_set_grad: cannot allocate t's autograd state");
  }
  dt_tensor *old = meta->grad;
  meta->grad = stored;
  dt_tensor_release(old);
  return DT_OK;
}

dt_status dt_tensor_zero_grad(dt_tensor *t, bool set_to_none) {
  if (!t) return dt__error(DT_ERR_INVALID, "dt_tensor_zero_grad: t is NULL");
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
  if (!t) return dt__error(DT_ERR_INVALID, "dt_tensor_retain_grad: t is NULL");
  dt_autograd_meta *meta = meta_of(t);
  if (!meta || !meta->requires_grad) {
    return dt__error(DT_ERR_INVALID, "dt_tensor_retain_grad: t does not require grad");
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

dt_status dt__copy_values_no_grad(dt_tensor *dst, dt_tensor *src) {
  bool prev = dt_grad_mode_set(false);
  dt_tensor *d = NULL, *s = NULL;
  dt_status st = DT_OK;
  if (dt_tensor_is_distributed(dst)) {
    st = dt_dist_to_local(dst, &d);
    if (!st) st = dt_dist_to_local(src, &s);
  } else {
    d = dt_tensor_retain(dst);
    s = dt_tensor_retain(src);
  }
  if (!st) st = dt_copy_(d, s);
  dt_tensor_release(d);
  dt_tensor_release(s);
  dt_grad_mode_set(prev);
  return st;
}
