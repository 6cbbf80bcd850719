/* dt__dispatch, the one entry point of every op: checks the call, records a profiler event
 * and sends the call through the modes or autograd when either is in use, else straight to
 * dt__dispatch_inner (dispatch_local.c). Also the broadcasting helpers of the infer
 * functions. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "kernels/cpu/cpu_kernels.h"
#include "ops/op_impl.h"
#include "profile/profile_impl.h"

atomic_int dt__autograd_live;

/* The name of the i-th Tensor argument in an ATen-style schema ("addmm(Tensor self, Tensor
 * mat1, ...)" -> "mat1"), for error messages; "?" if it cannot be found. */
static const char *schema_arg_name(const char *schema, int i, char *buf, size_t size) {
  const char *p = schema ? strchr(schema, '(') : NULL;
  snprintf(buf, size, "?");
  for (int k = 0; p && *p && *p != ')'; p++) {
    if (strncmp(p, "Tensor", 6) != 0) continue;
    p += 6;
    while (*p && *p != ' ' && *p != ',' && *p != ')') p++; /* (a!), ?, [] */
    while (*p == ' ') p++;
    size_t n = strcspn(p, " ,)=");
    if (k++ == i) {
      snprintf(buf, size, "%.*s", (int)(n < size - 1 ? n : size - 1), p);
      break;
    }
  }
  return buf;
}

/* Checks what every op needs: an output slot, required inputs present, list entries
 * present. Clears the outputs so that no failure leaves a stale pointer behind. */
static dt_status check_call(const dt_op_def *def, dt_op_call *call) {
  if (def->kind != DT_OP_KIND_INPLACE) {
    if (!call->outputs) return dt__error(DT_ERR_INVALID, "%s: out is NULL", def->name);
    /* Most ops have one output: stored directly (the loop alone becomes a call to memset). */
    if (DT_LIKELY(call->n_outputs == 1)) {
      call->outputs[0] = NULL;
    } else {
      for (int i = 0; i < call->n_outputs; i++) call->outputs[i] = NULL;
    }
  }
  for (int i = 0; i < def->n_required; i++) {
    if (DT_UNLIKELY(!call->inputs[i])) {
      char arg[32];
      return dt__error(DT_ERR_INVALID, "%s: input %d (%s) is NULL", def->name, i,
                       schema_arg_name(def->schema, i, arg, sizeof arg));
    }
  }
  if (call->n_input_list > 0 && !call->input_list) {
    return dt__error(DT_ERR_INVALID, "%s: the tensor list is NULL (%d tensors)", def->name,
                     call->n_input_list);
  }
  for (int i = 0; i < call->n_input_list; i++) {
    if (!call->input_list[i]) {
      return dt__error(DT_ERR_INVALID, "%s: tensor %d of the list is NULL", def->name, i);
    }
  }
  return DT_OK;
}

dt_status dt__dispatch(dt_op_call *call) {
  const dt_op_def *def = &dt__op_table[call->op];
  dt_status st = check_call(def, call);
  if (DT_UNLIKELY(st)) return st;
  dt__profile_scope scope;
  dt__profile_begin(&scope, def->name, DT__PROFILE_CAT_OP, DT_PROFILER_LANE_COMPUTE);
  /* Modes and autograd share one predictable branch: neither is in use on the hot path. */
  int autograd_live = atomic_load_explicit(&dt__autograd_live, memory_order_acquire);
  if (DT_UNLIKELY((autograd_live | dt__modes_visible) != 0)) {
    /* Autograd runs the modes itself, around its recording. */
    st = autograd_live && dt__upcall.autograd_dispatch ? dt__upcall.autograd_dispatch(call)
                                                       : dt__dispatch_with_modes(call);
  } else {
    st = dt__dispatch_inner(call);
  }
  if (DT_UNLIKELY(scope.start != 0)) {
    if (st == DT_OK && def->kind != DT_OP_KIND_INPLACE && call->n_outputs > 0 && call->outputs[0]) {
      dt__profile_end_shape(&scope, call->outputs[0]->ndim, call->outputs[0]->shape);
    } else {
      dt__profile_end(&scope);
    }
  }
  return st;
}

dt_status dt__dispatch_two(dt_op op, dt_tensor *a, dt_tensor *b, double scalar, dt_tensor **out) {
  dt_op_call call = {.op = op,
                     .n_inputs = 2,
                     .inputs = {a, b},
                     .scalars = {scalar},
                     .n_outputs = 1,
                     .outputs = out};
  return dt__dispatch(&call);
}

dt_status dt__dispatch_tensors(dt_op op, int n, dt_tensor *const *inputs, int n_ints, int64_t v,
                               dt_tensor **out) {
  dt_op_call call = {
      .op = op, .n_inputs = n, .n_ints = n_ints, .ints = {v}, .n_outputs = 1, .outputs = out};
  for (int i = 0; i < n; i++) call.inputs[i] = inputs[i];
  return dt__dispatch(&call);
}

dt_status dt__broadcast_shapes(const char *op, int ndim_a, const int64_t *shape_a, int ndim_b,
                               const int64_t *shape_b, int *out_ndim, int64_t *out_shape) {
  int ndim = ndim_a > ndim_b ? ndim_a : ndim_b;
  for (int i = 0; i < ndim; i++) {
    int ia = ndim_a - ndim + i, ib = ndim_b - ndim + i;
    int64_t sa = ia >= 0 ? shape_a[ia] : 1;
    int64_t sb = ib >= 0 ? shape_b[ib] : 1;
    if (sa != sb && sa != 1 && sb != 1) {
      char ba[160], bb[160];
      return dt__error(DT_ERR_SHAPE,
                       "%s: shapes %s and %s cannot be broadcast (dim %d: %" PRId64 " vs %" PRId64
                       ")",
                       op, dt__format_ints(ba, sizeof ba, ndim_a, shape_a),
                       dt__format_ints(bb, sizeof bb, ndim_b, shape_b), i, sa, sb);
    }
    out_shape[i] = sa == 1 ? sb : sa;
  }
  *out_ndim = ndim;
  return DT_OK;
}

dt_status dt__check_broadcasts_to_self(const char *op, const char *what, const dt_tensor *self,
                                       const dt_tensor *other) {
  int ndim;
  int64_t shape[DT_MAX_DIMS];
  dt_status st =
      dt__broadcast_shapes(op, self->ndim, self->shape, other->ndim, other->shape, &ndim, shape);
  if (st) return st;
  if (ndim != self->ndim || memcmp(shape, self->shape, sizeof(int64_t) * (size_t)ndim) != 0) {
    char ss[160], so[160];
    return dt__error(DT_ERR_SHAPE, "%s: %s of shape %s does not broadcast to self of shape %s", op,
                     what, dt__format_ints(so, sizeof so, other->ndim, other->shape),
                     dt__format_ints(ss, sizeof ss, self->ndim, self->shape));
  }
  return DT_OK;
}

dt_status dt__copy_if_overlapping(const dt_tensor *dst, const dt_tensor *src, dt_tensor **copy) {
  *copy = NULL;
  if (DT_LIKELY(!dt__overlaps_differently(dst, src))) return DT_OK;
  dt_status st = dt__tensor_new(src->ndim, src->shape, src->dtype, copy);
  if (st) return st;
  dt__cpu_copy(*copy, src);
  return DT_OK;
}

void dt__broadcast_strides(const dt_tensor *t, int ndim, const int64_t *shape, int64_t *strides) {
  int lead = ndim - t->ndim;
  for (int i = 0; i < ndim; i++) {
    int it = i - lead;
    strides[i] = (it < 0 || (t->shape[it] == 1 && shape[i] != 1)) ? 0 : t->strides[it];
  }
}
