/* Ops that reinterpret a tensor's shape: view, reshape, flatten, permute, expand, squeeze,
 * unsqueeze. All are views of the input, except reshape and flatten, which copy when the
 * input's strides cannot express the new shape. */
#include <inttypes.h>

#include "kernels/cpu/cpu_kernels.h"
#include "ops/op_impl.h"

/* ---- Shape arguments --------------------------------------------------------------------- */

/* The wrappers of view, reshape, permute and expand pass the user's list both in ints (when it
 * fits) and in int_list, so that infer can tell a bad length from a NULL list. */
static dt_status check_int_list(const dt_op_call *call, const char *what) {
  if (call->n_ints < 0 || call->n_ints > DT_MAX_DIMS) {
    return dt__error(DT_ERR_INVALID, "%s: %s has %d entries (expected 0..%d)", dt__op_name(call),
                     what, call->n_ints, DT_MAX_DIMS);
  }
  if (call->n_ints > 0 && !call->int_list) {
    return dt__error(DT_ERR_INVALID, "%s: %s is NULL with %d entries", dt__op_name(call), what,
                     call->n_ints);
  }
  return DT_OK;
}

/* Resolves a view/reshape target shape in place: at most one -1, which takes whatever size
 * makes the element counts match; every other entry must be >= 0. */
static dt_status resolve_shape(const dt_op_call *call, const dt_tensor *a, int ndim,
                               int64_t *shape) {
  const char *op = dt__op_name(call);
  char sa[160], ss[160];
  int inferred = -1;
  int64_t known = 1;
  bool overflow = false;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] == -1) {
      if (inferred >= 0) {
        return dt__error(DT_ERR_INVALID, "%s: shape %s has more than one -1", op,
                         dt__format_ints(ss, sizeof ss, ndim, shape));
      }
      inferred = i;
      continue;
    }
    if (shape[i] < 0) {
      return dt__error(DT_ERR_INVALID, "%s: invalid size %" PRId64 " at dim %d of shape %s", op,
                       shape[i], i, dt__format_ints(ss, sizeof ss, ndim, shape));
    }
    if (shape[i] > 0 && known > INT64_MAX / shape[i])
      overflow = true;
    else
      known *= shape[i];
  }
  int64_t numel = dt__tensor_numel(a);
  if (inferred >= 0) {
    if (overflow || known == 0 || numel % known != 0) {
      return dt__error(DT_ERR_SHAPE,
                       "%s: shape %s is invalid for input of shape %s (%" PRId64 " elements)%s", op,
                       dt__format_ints(ss, sizeof ss, ndim, shape),
                       dt__format_ints(sa, sizeof sa, a->ndim, a->shape), numel,
                       known == 0 ? ": the -1 could be any size" : "");
    }
    shape[inferred] = numel / known;
  } else if (overflow || known != numel) {
    return dt__error(DT_ERR_SHAPE,
                     "%s: shape %s is invalid for input of shape %s (%" PRId64 " elements)", op,
                     dt__format_ints(ss, sizeof ss, ndim, shape),
                     dt__format_ints(sa, sizeof sa, a->ndim, a->shape), numel);
  }
  /* An empty input matches any shape with a 0 in it, even [0, 2^62, 2^62], whose contiguous
   * strides would overflow: the target must pass the same bound as a created shape. */
  return dt__check_shape(op, ndim, shape);
}

/*
 * Strides that show a tensor of (ndim, shape, strides) with new_shape without moving any data;
 * false when there are none. The old dims fall into runs in which each dim steps exactly over
 * the next (stride[i] == stride[i+1] * shape[i+1], size-1 dims ignored): such a run is one
 * block of evenly spaced elements, which any row-major split can index. Each run must therefore
 * be covered exactly by consecutive new dims; a new dim spanning two runs is impossible.
 */
bool dt__view_strides(int ndim, const int64_t *shape, const int64_t *strides, int new_ndim,
                      const int64_t *new_shape, int64_t *new_strides) {
  if (dt__numel(ndim, shape) <= 1) {
    /* Nothing to step over (or at most one element): any strides do. */
    dt__contiguous_strides(new_ndim, new_shape, new_strides);
    return true;
  }
  int next = new_ndim - 1; /* the next new dim to place, from the back */
  int d = ndim - 1;
  while (d >= 0) {
    if (shape[d] == 1) {
      d--;
      continue;
    }
    /* Grow the run leftwards from d. */
    int64_t base = strides[d], run_numel = shape[d];
    int64_t inner_stride = strides[d], inner_size = shape[d];
    int e = d - 1;
    for (; e >= 0; e--) {
      if (shape[e] == 1) continue;
      if (strides[e] != inner_stride * inner_size) break;
      run_numel *= shape[e];
      inner_stride = strides[e];
      inner_size = shape[e];
    }
    /* Cover it with new dims; size-1 new dims may ride along with any run. */
    int64_t covered = 1;
    while (next >= 0 && (covered < run_numel || new_shape[next] == 1)) {
      new_strides[next] = covered * base;
      covered *= new_shape[next];
      next--;
    }
    if (covered != run_numel) return false;
    d = e;
  }
  /* Leading size-1 new dims were absorbed above; anything left has a size > 1. */
  return next < 0;
}

static dt_status view_error(const dt_op_call *call, const dt_tensor *a, int ndim,
                            const int64_t *shape) {
  char sa[160], st[160], ss[160];
  return dt__error(DT_ERR_SHAPE,
                   "%s: shape %s is not compatible with the input's shape %s and strides %s "
                   "(its dims cannot be merged or split without a copy); use reshape instead",
                   dt__op_name(call), dt__format_ints(ss, sizeof ss, ndim, shape),
                   dt__format_ints(sa, sizeof sa, a->ndim, a->shape),
                   dt__format_ints(st, sizeof st, a->ndim, a->strides));
}

/* ---- view, reshape, flatten --------------------------------------------------------------- */

static dt_status infer_reshape_like(dt_op_call *call, dt_tensor_meta *metas, bool must_view) {
  const dt_tensor *a = call->inputs[0];
  dt_status st = check_int_list(call, "shape");
  if (st) return st;
  st = resolve_shape(call, a, call->n_ints, call->ints);
  if (st) return st;
  if (must_view) {
    int64_t strides[DT_MAX_DIMS];
    if (!dt__view_strides(a->ndim, a->shape, a->strides, call->n_ints, call->ints, strides)) {
      return view_error(call, a, call->n_ints, call->ints);
    }
  }
  dt__meta_set(&metas[0], a->dtype, call->n_ints, call->ints);
  return DT_OK;
}

dt_status dt__infer_view(dt_op_call *call, dt_tensor_meta *metas) {
  return infer_reshape_like(call, metas, true);
}

dt_status dt__infer_reshape(dt_op_call *call, dt_tensor_meta *metas) {
  return infer_reshape_like(call, metas, false);
}

/* flatten leaves the merged shape in ints, so that it shares reshape's kernel. */
dt_status dt__infer_flatten(dt_op_call *call, dt_tensor_meta *metas) {
  const dt_tensor *a = call->inputs[0];
  int start, end;
  dt_status st = dt__normalize_dim_pair(call, &start, &end);
  if (st) return st;
  if (start > end) {
    return dt__error(DT_ERR_INVALID,
                     "%s: start_dim %" PRId64 " comes after end_dim %" PRId64 " (a %d-d tensor)",
                     dt__op_name(call), call->ints[0], call->ints[1], a->ndim);
  }
  int64_t shape[DT_MAX_DIMS];
  int n = 0;
  if (a->ndim == 0) {
    shape[n++] = 1; /* a scalar flattens to one element, as in PyTorch */
  } else {
    for (int i = 0; i < start; i++) shape[n++] = a->shape[i];
    shape[n++] = dt__numel(end - start + 1, a->shape + start);
    for (int i = end + 1; i < a->ndim; i++) shape[n++] = a->shape[i];
  }
  call->n_ints = n;
  memcpy(call->ints, shape, sizeof(int64_t) * (size_t)n);
  dt__meta_set(&metas[0], a->dtype, n, shape);
  return DT_OK;
}

dt_status dt__kernel_view(dt_op_call *call) {
  const dt_tensor *a = call->inputs[0];
  int64_t strides[DT_MAX_DIMS];
  bool ok = dt__view_strides(a->ndim, a->shape, a->strides, call->n_ints, call->ints, strides);
  DT_ASSERT(ok);
  return dt__tensor_view(a, call->n_ints, call->ints, strides, a->offset, &call->outputs[0]);
}

/* reshape and flatten: a view when the strides allow one, else a contiguous copy. */
dt_status dt__kernel_reshape(dt_op_call *call) {
  const dt_tensor *a = call->inputs[0];
  int64_t strides[DT_MAX_DIMS];
  if (dt__view_strides(a->ndim, a->shape, a->strides, call->n_ints, call->ints, strides)) {
    return dt__tensor_view(a, call->n_ints, call->ints, strides, a->offset, &call->outputs[0]);
  }
  dt_tensor *out = NULL;
  dt_status st = dt__tensor_new(call->n_ints, call->ints, a->dtype, &out);
  if (st) return st;
  /* Copy through a view of the new buffer in a's shape, so the elements land row-major. */
  dt_tensor *as_input = NULL;
  int64_t contiguous[DT_MAX_DIMS];
  dt__contiguous_strides(a->ndim, a->shape, contiguous);
  st = dt__tensor_view(out, a->ndim, a->shape, contiguous, 0, &as_input);
  if (st) {
    dt_tensor_release(out);
    return st;
  }
  dt__cpu_copy(as_input, a);
  dt_tensor_release(as_input);
  call->outputs[0] = out;
  return DT_OK;
}

/* ---- permute -------------------------------------------------------------------------------- */

dt_status dt__infer_permute(dt_op_call *call, dt_tensor_meta *metas) {
  const dt_tensor *a = call->inputs[0];
  const char *op = dt__op_name(call);
  dt_status st = check_int_list(call, "dims");
  if (st) return st;
  char sd[160];
  if (call->n_ints != a->ndim) {
    return dt__error(DT_ERR_INVALID, "%s: dims %s has %d entries for a %d-d tensor", op,
                     dt__format_ints(sd, sizeof sd, call->n_ints, call->ints), call->n_ints,
                     a->ndim);
  }
  bool seen[DT_MAX_DIMS] = {false};
  int64_t shape[DT_MAX_DIMS];
  for (int i = 0; i < a->ndim; i++) {
    int d;
    st = dt__normalize_dim(op, call->ints[i], a->ndim, &d);
    if (st) return st;
    if (seen[d]) {
      return dt__error(DT_ERR_INVALID, "%s: dims %s repeat dim %d", op,
                       dt__format_ints(sd, sizeof sd, call->n_ints, call->ints), d);
    }
    seen[d] = true;
    call->ints[i] = d;
    shape[i] = a->shape[d];
  }
  dt__meta_set(&metas[0], a->dtype, a->ndim, shape);
  return DT_OK;
}

dt_status dt__kernel_permute(dt_op_call *call) {
  const dt_tensor *a = call->inputs[0];
  int64_t shape[DT_MAX_DIMS], strides[DT_MAX_DIMS];
  for (int i = 0; i < a->ndim; i++) {
    shape[i] = a->shape[call->ints[i]];
    strides[i] = a->strides[call->ints[i]];
  }
  return dt__tensor_view(a, a->ndim, shape, strides, a->offset, &call->outputs[0]);
}

/* ---- expand --------------------------------------------------------------------------------- */

/* Why expand refuses dim i of its target shape (have: the input's size there, want: the
 * target's), with both shapes in the message: formatted only on failure. */
enum expand_refusal { EXPAND_FEWER_DIMS, EXPAND_NEGATIVE_LEADING, EXPAND_NEGATIVE, EXPAND_SIZE };
static dt_status expand_refused(const dt_op_call *call, enum expand_refusal why, int i,
                                int64_t have, int64_t want) {
  const dt_tensor *a = call->inputs[0];
  const char *op = dt__op_name(call);
  char sa[160], ss[160];
  dt__format_ints(sa, sizeof sa, a->ndim, a->shape);
  dt__format_ints(ss, sizeof ss, call->n_ints, call->ints);
  switch (why) {
  case EXPAND_FEWER_DIMS:
    return dt__error(DT_ERR_SHAPE, "%s: shape %s has fewer dims than the input's shape %s", op, ss,
                     sa);
  case EXPAND_NEGATIVE_LEADING:
    return dt__error(DT_ERR_INVALID,
                     "%s: size %" PRId64 " at new leading dim %d of shape %s (input shape %s)", op,
                     want, i, ss, sa);
  case EXPAND_NEGATIVE:
    return dt__error(DT_ERR_INVALID, "%s: invalid size %" PRId64 " at dim %d of shape %s", op, want,
                     i, ss);
  default:
    return dt__error(DT_ERR_SHAPE,
                     "%s: cannot expand dim %d of size %" PRId64 " to %" PRId64
                     " (input shape %s, target %s); only size-1 dims expand",
                     op, i, have, want, sa, ss);
  }
}

/* Leaves the target shape, with every -1 replaced, in ints. */
dt_status dt__infer_expand(dt_op_call *call, dt_tensor_meta *metas) {
  const dt_tensor *a = call->inputs[0];
  const char *op = dt__op_name(call);
  dt_status st = check_int_list(call, "shape");
  if (st) return st;
  int n = call->n_ints, lead = n - a->ndim;
  if (lead < 0) return expand_refused(call, EXPAND_FEWER_DIMS, 0, 0, 0);
  /* Checked before any -1 is replaced, so that a message shows the shape as asked. */
  for (int i = 0; i < n; i++) {
    int64_t want = call->ints[i];
    if (i < lead) {
      if (want < 0) return expand_refused(call, EXPAND_NEGATIVE_LEADING, i, 0, want);
      continue;
    }
    int64_t have = a->shape[i - lead];
    if (want == -1) want = have;
    if (want < 0) return expand_refused(call, EXPAND_NEGATIVE, i, have, want);
    if (have != want && have != 1) return expand_refused(call, EXPAND_SIZE, i - lead, have, want);
  }
  for (int i = lead; i < n; i++) {
    if (call->ints[i] == -1) call->ints[i] = a->shape[i - lead];
  }
  st = dt__check_shape(op, n, call->ints);
  if (st) return st;
  dt__meta_set(&metas[0], a->dtype, n, call->ints);
  return DT_OK;
}

dt_status dt__kernel_expand(dt_op_call *call) {
  const dt_tensor *a = call->inputs[0];
  int n = call->n_ints, lead = n - a->ndim;
  int64_t strides[DT_MAX_DIMS];
  for (int i = 0; i < n; i++) {
    int j = i - lead;
    strides[i] = (j < 0 || a->shape[j] != call->ints[i]) ? 0 : a->strides[j];
  }
  return dt__tensor_view(a, n, call->ints, strides, a->offset, &call->outputs[0]);
}

/* ---- squeeze, unsqueeze ----------------------------------------------------------------- */

/* squeeze: ints[0] = -1 removes every size-1 dim; squeeze.dim normalizes its dim into ints[0]
 * and leaves -2 there when that dim is not of size 1 (nothing to remove). */
dt_status dt__infer_squeeze(dt_op_call *call, dt_tensor_meta *metas) {
  const dt_tensor *a = call->inputs[0];
  call->ints[0] = -1;
  call->n_ints = 1;
  int n = 0;
  for (int i = 0; i < a->ndim; i++) {
    if (a->shape[i] != 1) metas[0].shape[n++] = a->shape[i];
  }
  metas[0].ndim = n;
  metas[0].dtype = a->dtype;
  return DT_OK;
}

dt_status dt__infer_squeeze_dim(dt_op_call *call, dt_tensor_meta *metas) {
  const dt_tensor *a = call->inputs[0];
  int d;
  dt_status st = dt__call_dim(call, a, &d);
  if (st) return st;
  bool removes = a->ndim > 0 && a->shape[d] == 1;
  call->ints[0] = removes ? d : -2;
  int n = 0;
  for (int i = 0; i < a->ndim; i++) {
    if (!removes || i != d) metas[0].shape[n++] = a->shape[i];
  }
  metas[0].ndim = n;
  metas[0].dtype = a->dtype;
  return DT_OK;
}

dt_status dt__kernel_squeeze(dt_op_call *call) {
  const dt_tensor *a = call->inputs[0];
  int64_t which = call->ints[0];
  int64_t shape[DT_MAX_DIMS], strides[DT_MAX_DIMS];
  int n = 0;
  for (int i = 0; i < a->ndim; i++) {
    bool drop = which == -1 ? a->shape[i] == 1 : which == i;
    if (drop) continue;
    shape[n] = a->shape[i];
    strides[n++] = a->strides[i];
  }
  return dt__tensor_view(a, n, shape, strides, a->offset, &call->outputs[0]);
}

dt_status dt__infer_unsqueeze(dt_op_call *call, dt_tensor_meta *metas) {
  const dt_tensor *a = call->inputs[0];
  const char *op = dt__op_name(call);
  if (a->ndim >= DT_MAX_DIMS) {
    return dt__error(DT_ERR_INVALID, "%s: a %d-d tensor cannot gain a dim (at most %d dims)", op,
                     a->ndim, DT_MAX_DIMS);
  }
  int d;
  /* The new dim may go anywhere from before the first to after the last: ndim + 1 places. */
  dt_status st = dt__normalize_dim(op, call->ints[0], a->ndim + 1, &d);
  if (st) return st;
  call->ints[0] = d;
  metas[0].dtype = a->dtype;
  metas[0].ndim = a->ndim + 1;
  for (int i = 0, j = 0; i <= a->ndim; i++) metas[0].shape[i] = i == d ? 1 : a->shape[j++];
  return DT_OK;
}

dt_status dt__kernel_unsqueeze(dt_op_call *call) {
  const dt_tensor *a = call->inputs[0];
  int d = (int)call->ints[0];
  int64_t shape[DT_MAX_DIMS], strides[DT_MAX_DIMS];
  for (int i = 0, j = 0; i <= a->ndim; i++) {
    if (i == d) {
      /* Any stride works for a size-1 dim; this one keeps a contiguous input contiguous. */
      shape[i] = 1;
      strides[i] = d < a->ndim ? a->shape[d] * a->strides[d] : 1;
    } else {
      shape[i] = a->shape[j];
      strides[i] = a->strides[j++];
    }
  }
  return dt__tensor_view(a, a->ndim + 1, shape, strides, a->offset, &call->outputs[0]);
}

/* ---- Public functions ---------------------------------------------------------------------- */

/* Ops taking one tensor and an int list (shape or dims). */
static dt_status list_op(dt_op op, dt_tensor *a, int n, const int64_t *list, dt_tensor **out) {
  dt_op_call call = {.op = op,
                     .n_inputs = 1,
                     .inputs = {a},
                     .n_ints = n,
                     .int_list = list,
                     .n_int_list = n,
                     .n_outputs = 1,
                     .outputs = out};
  if (list && n > 0 && n <= DT_MAX_DIMS) memcpy(call.ints, list, sizeof(int64_t) * (size_t)n);
  return dt__dispatch(&call);
}

static dt_status dims_op(dt_op op, dt_tensor *a, int n, int64_t d0, int64_t d1, dt_tensor **out) {
  dt_op_call call = {.op = op,
                     .n_inputs = 1,
                     .inputs = {a},
                     .n_ints = n,
                     .ints = {d0, d1},
                     .n_outputs = 1,
                     .outputs = out};
  return dt__dispatch(&call);
}

dt_status dt_view(dt_tensor *a, int ndim, const int64_t *shape, dt_tensor **out) {
  return list_op(DT_OP_VIEW, a, ndim, shape, out);
}
dt_status dt_reshape(dt_tensor *a, int ndim, const int64_t *shape, dt_tensor **out) {
  return list_op(DT_OP_RESHAPE, a, ndim, shape, out);
}
dt_status dt_permute(dt_tensor *a, int ndim, const int64_t *dims, dt_tensor **out) {
  return list_op(DT_OP_PERMUTE, a, ndim, dims, out);
}
dt_status dt_expand(dt_tensor *a, int ndim, const int64_t *shape, dt_tensor **out) {
  return list_op(DT_OP_EXPAND, a, ndim, shape, out);
}
dt_status dt_flatten(dt_tensor *a, int64_t start_dim, int64_t end_dim, dt_tensor **out) {
  return dims_op(DT_OP_FLATTEN, a, 2, start_dim, end_dim, out);
}
dt_status dt_squeeze(dt_tensor *a, dt_tensor **out) {
  return dims_op(DT_OP_SQUEEZE, a, 0, 0, 0, out);
}
dt_status dt_squeeze_dim(dt_tensor *a, int64_t dim, dt_tensor **out) {
  return dims_op(DT_OP_SQUEEZE_DIM, a, 1, dim, 0, out);
}
dt_status dt_unsqueeze(dt_tensor *a, int64_t dim, dt_tensor **out) {
  return dims_op(DT_OP_UNSQUEEZE, a, 1, dim, 0, out);
}
